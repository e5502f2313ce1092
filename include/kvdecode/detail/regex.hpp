// A compiled PCRE2 regular expression for the pre-tokenizers: UTF and UCP mode
// (\p{L}, \s, \w follow Unicode properties), lookahead, case-insensitive groups,
// JIT-compiled when the library supports it. Invalid UTF-8 in the subject is
// allowed (PCRE2_MATCH_INVALID_UTF): such bytes never match, so they fall into the
// gaps between matches and are tokenized as bytes, never rejected.
#pragma once

#ifndef PCRE2_CODE_UNIT_WIDTH
#define PCRE2_CODE_UNIT_WIDTH 8
#endif
#include <pcre2.h>

#include <cstddef>
#include <memory>
#include <string>

#include "kvdecode/detail/unicode.hpp"
#include "kvdecode/error.hpp"

namespace kvd::detail {

class Regex {
 public:
  /// Compiles `pattern`. Throws FormatError naming the pattern, the error and its
  /// offset in the pattern if PCRE2 rejects it; `where` says whose pattern it is.
  Regex(const std::string& pattern, const std::string& where) : pattern_(pattern) {
    int err = 0;
    PCRE2_SIZE err_off = 0;
    pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                     PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &err_off, nullptr);
    if (!code) {
      PCRE2_UCHAR buf[256];
      pcre2_get_error_message(err, buf, sizeof buf);
      throw FormatError(msg(where, ": regex '", pattern, "' does not compile: ", reinterpret_cast<const char*>(buf),
                            " at pattern offset ", err_off));
    }
    code_ = std::shared_ptr<pcre2_code>(code, CodeFree{});
    jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  }

  const std::string& pattern() const { return pattern_; }
  bool jit() const { return jit_; }

  /// Calls fn(begin, end) for each non-empty match in s[0, n), left to right,
  /// non-overlapping (offsets into s). Throws Error if PCRE2 fails while matching
  /// (resource limits), naming the pattern.
  template <class Fn>
  void for_each_match(const char* s, std::size_t n, Fn fn) const {
    thread_local std::unique_ptr<pcre2_match_data, MatchDataFree> md(pcre2_match_data_create(1, nullptr));
    const auto subject = reinterpret_cast<PCRE2_SPTR>(s);
    std::size_t start = 0;
    while (start < n) {
      int rc = jit_ ? pcre2_jit_match(code_.get(), subject, n, start, 0, md.get(), nullptr)
                    : pcre2_match(code_.get(), subject, n, start, 0, md.get(), nullptr);
      // The JIT's default stack is small; the interpreter keeps its backtracking on the heap.
      if (rc == PCRE2_ERROR_JIT_STACKLIMIT) rc = pcre2_match(code_.get(), subject, n, start, 0, md.get(), nullptr);
      if (rc == PCRE2_ERROR_NOMATCH) return;
      if (rc < 0) {
        PCRE2_UCHAR buf[256];
        pcre2_get_error_message(rc, buf, sizeof buf);
        throw Error(msg("regex '", pattern_, "' failed at byte ", start, ": ", reinterpret_cast<const char*>(buf)));
      }
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
      const std::size_t b = ov[0], e = ov[1];
      if (e > b) {
        fn(b, e);
        start = e;
      } else {
        start = b + utf8_unit(s, n, b);  // empty match: step over one character
      }
    }
  }

 private:
  struct CodeFree {
    void operator()(pcre2_code* c) const { pcre2_code_free(c); }
  };
  struct MatchDataFree {
    void operator()(pcre2_match_data* m) const { pcre2_match_data_free(m); }
  };
  std::string pattern_;
  std::shared_ptr<pcre2_code> code_;  // shared by copies; matching never writes it
  bool jit_ = false;
};

}  // namespace kvd::detail
