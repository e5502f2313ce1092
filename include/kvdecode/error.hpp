// Typed errors. Every recoverable failure in kvdecode throws a subclass of
// kvd::Error, whose message names the offending value and the limit it broke.
// A call that throws leaves the objects it was given exactly as they were.
// Internal invariants use KVD_ASSERT, which users may override and which
// compiles away when NDEBUG is defined.
//
// Messages often quote bytes taken from a file (a key, a token, a tensor name).
// Every Error's message is passed through escape_control() once, when it is
// constructed, so a NUL or another control byte from a file is shown as \xNN
// instead of cutting the message short or driving the terminal.
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

namespace detail {
/// `text` with every control byte (0x00-0x1F and 0x7F) except newline and tab written
/// as "\xNN" (NUL as "\x00"). Bytes 0x80 and above pass unchanged (UTF-8 text stays
/// readable). Applying it twice gives the same text as once. Never throws beyond
/// std::bad_alloc.
inline std::string escape_control(const std::string& text) {
  std::size_t n = 0;
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7F) ++n;
  }
  if (n == 0) return text;
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(text.size() + 3 * n);
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7F) {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += ch;
    }
  }
  return out;
}
}  // namespace detail

/// Root of every exception kvdecode throws on bad input or exhausted resources.
/// The message is stored with its control bytes escaped (detail::escape_control).
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(detail::escape_control(what)) {}
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

/// A computation produced a NaN or infinite value where only finite ones are valid
/// (logits of a model whose weights or cache hold such values). The message names
/// the position and the value.
class NumericError : public Error {
  using Error::Error;
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
