// Typed errors. Every recoverable failure in kvdecode throws a subclass of
// kvd::Error, whose message names the offending value and the limit it broke.
// A call that throws leaves the objects it was given exactly as they were.
// Internal invariants use KVD_ASSERT, which users may override and which
// compiles away when NDEBUG is defined.
#pragma once

#include <cassert>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

#ifndef KVD_ASSERT
#define KVD_ASSERT(cond) assert(cond)
#endif

namespace kvd {

/// Root of every exception kvdecode throws on bad input or exhausted resources.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

/// A ModelConfig (or another option struct) holds inconsistent values.
class ConfigError : public Error {
  using Error::Error;
};

/// A token id is outside [0, vocab_size), or a token list is empty where one is required.
class TokenError : public Error {
  using Error::Error;
};

/// A cache has no room for the positions a call would append.
class CacheFullError : public Error {
  using Error::Error;
};

/// A cache was built for a different model shape or element type.
class CacheMismatchError : public Error {
  using Error::Error;
};

/// A file is missing, unreadable, truncated, or its contents are inconsistent.
class FileError : public Error {
  using Error::Error;
};

/// A file's bytes break its format's rules: a bad magic or version, a count or
/// length that does not fit in what remains, an unknown type code, an offset out
/// of bounds. The message names the field, its file offset, the value and the limit.
class FormatError : public FileError {
  using FileError::FileError;
};

/// A pool of cache blocks has no free block left.
class OutOfBlocksError : public CacheFullError {
  using CacheFullError::CacheFullError;
};

/// A command-line or API argument is malformed.
class ArgumentError : public Error {
  using Error::Error;
};

/// A chat template that cannot be parsed or rendered: a syntax error, an unsupported
/// construct, raise_exception() in the template, an invalid operation or an exceeded
/// limit. The message names the construct and its line and column in the source.
class TemplateError : public Error {
  using Error::Error;
};

namespace detail {
/// Builds a message from streamable pieces: detail::msg("token ", t, " >= ", n).
template <class... Parts>
std::string msg(Parts&&... parts) {
  std::ostringstream os;
  (os << ... << std::forward<Parts>(parts));
  return os.str();
}
}  // namespace detail

}  // namespace kvd
