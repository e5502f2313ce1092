// A compiled PCRE2 regular expression for the pre-tokenizers: UTF and UCP mode
// (\p{L}, \s, \w follow Unicode properties), lookahead, case-insensitive groups,
// JIT-compiled when the library supports it. Invalid UTF-8 in the subject is
// allowed (PCRE2_MATCH_INVALID_UTF): such bytes never match, so they fall into the
// gaps between matches and are tokenized as bytes, never rejected.
//
// Matching is paid from a RegexBudget that one encode call shares across all its
// matches. PCRE2's own match limit applies to each start position separately, so a
// backtracking pattern could cost the limit at every character of the text; here
// each pcre2 call is stopped after one attempted start position (a callout at the
// pattern's start), is given a small match limit (kRegexFirstLimit, four times
// more on each retry) and is charged the limit it was given. The work done is
// therefore never more than what is charged, and a legitimate pattern is charged a
// few hundred units per match.
#pragma once

#ifndef PCRE2_CODE_UNIT_WIDTH
#define PCRE2_CODE_UNIT_WIDTH 8
#endif
#include <pcre2.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "kvdecode/text/unicode.hpp"
#include "kvdecode/error.hpp"

namespace kvd::detail {

/// Match-limit units a call is first given (the retries after PCRE2_ERROR_MATCHLIMIT get 4x more each).
constexpr std::uint32_t kRegexFirstLimit = 128;

/// The regex work one encode call may do, in PCRE2 match-limit units, shared by
/// every match of every pattern in the call. `limit` is what the call started
/// with (named in the message when it runs out).
struct RegexBudget {
  std::uint64_t limit = 0;
  std::uint64_t left = 0;
  explicit RegexBudget(std::uint64_t units) : limit(units), left(units) {}
};

class Regex {
 public:
  /// Compiles `pattern`. Throws FormatError naming the pattern, the error and its
  /// offset in the pattern if PCRE2 rejects it; `where` says whose pattern it is.
  Regex(const std::string& pattern, const std::string& where) : pattern_(pattern) {
    // The pattern as written is compiled first, so that errors and their offsets
    // are the file's; then the same pattern behind the attempt callout.
    const std::string wrapped = with_attempt_callout(pattern);
    pcre2_code* code = nullptr;
    for (const std::string* p : {&pattern, &wrapped}) {
      int err = 0;
      PCRE2_SIZE err_off = 0;
      if (code) pcre2_code_free(code);
      code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(p->data()), p->size(),
                           PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &err_off, nullptr);
      if (!code) {
        PCRE2_UCHAR buf[256];
        pcre2_get_error_message(err, buf, sizeof buf);
        throw FormatError(msg(where, ": regex '", pattern, "' does not compile: ", reinterpret_cast<const char*>(buf),
                              " at pattern offset ", err_off));
      }
    }
    code_ = std::shared_ptr<pcre2_code>(code, CodeFree{});
    jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  }

  const std::string& pattern() const { return pattern_; }
  bool jit() const { return jit_; }

  /// Calls fn(begin, end) for each non-empty match in s[0, n), left to right,
  /// non-overlapping (offsets into s), paying for the matching from `budget`.
  /// Throws TokenError naming the pattern and the budget's limit when the budget
  /// runs out, and Error naming the pattern if PCRE2 fails otherwise; matches
  /// already reported stay reported.
  template <class Fn>
  void for_each_match(const char* s, std::size_t n, RegexBudget& budget, Fn fn) const {
    struct Matcher {
      std::unique_ptr<pcre2_match_data, MatchDataFree> md{pcre2_match_data_create(1, nullptr)};
      std::unique_ptr<pcre2_match_context, ContextFree> ctx{pcre2_match_context_create(nullptr)};
    };
    thread_local Matcher m;
    Attempts attempts;
    pcre2_set_callout(m.ctx.get(), &Regex::on_attempt, &attempts);
    const auto subject = reinterpret_cast<PCRE2_SPTR>(s);
    std::size_t start = 0;
    std::uint32_t limit = kRegexFirstLimit;
    while (start < n) {
      if (budget.left == 0)
        throw TokenError(msg("regex '", pattern_, "' used up the regex budget of this encode call (", budget.limit,
                             " match steps) at byte ", start, "; raise BpeTokenizer::set_regex_budget"));
      const auto given = static_cast<std::uint32_t>(std::min<std::uint64_t>(limit, budget.left));
      budget.left -= given;
      pcre2_set_match_limit(m.ctx.get(), given);
      attempts = Attempts{};
      int rc = jit_ ? pcre2_jit_match(code_.get(), subject, n, start, 0, m.md.get(), m.ctx.get())
                    : pcre2_match(code_.get(), subject, n, start, 0, m.md.get(), m.ctx.get());
      // The JIT's default stack is small; the interpreter keeps its backtracking on the heap.
      if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
        attempts = Attempts{};
        rc = pcre2_match(code_.get(), subject, n, start, 0, m.md.get(), m.ctx.get());
      }
      if (rc == PCRE2_ERROR_NOMATCH) return;
      if (rc == PCRE2_ERROR_MATCHLIMIT) {  // the same start again, with more
        limit = limit > (UINT32_MAX >> 2) ? UINT32_MAX : limit << 2;
        continue;
      }
      limit = kRegexFirstLimit;
      if (rc == PCRE2_ERROR_CALLOUT) {  // the first attempted position failed: go on from the next
        start = attempts.next;
        continue;
      }
      if (rc < 0) {
        PCRE2_UCHAR buf[256];
        pcre2_get_error_message(rc, buf, sizeof buf);
        throw Error(msg("regex '", pattern_, "' failed at byte ", start, ": ", reinterpret_cast<const char*>(buf)));
      }
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(m.md.get());
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
  struct ContextFree {
    void operator()(pcre2_match_context* c) const { pcre2_match_context_free(c); }
  };
  // The start positions one pcre2 call has tried: the callout at the pattern's
  // start stops the call when a second position is tried (a recursion into the
  // whole pattern calls it again at the same position, which goes on).
  struct Attempts {
    bool started = false;
    std::size_t first = 0, next = 0;
  };
  static int on_attempt(pcre2_callout_block* cb, void* data) {
    auto* a = static_cast<Attempts*>(data);
    if (!a->started) {
      a->started = true;
      a->first = cb->start_match;
      return 0;
    }
    if (cb->start_match == a->first) return 0;
    a->next = cb->start_match;
    return PCRE2_ERROR_CALLOUT;
  }
  // `pattern` behind a callout that every attempted start position passes first
  // (after any leading (*OPTION) settings, which must stay first).
  static std::string with_attempt_callout(const std::string& pattern) {
    std::size_t k = 0;
    while (pattern.compare(k, 2, "(*") == 0) {
      std::size_t e = k + 2;
      while (e < pattern.size() && ((pattern[e] >= 'A' && pattern[e] <= 'Z') || pattern[e] == '_' || pattern[e] == '=' ||
                                    (pattern[e] >= '0' && pattern[e] <= '9')))
        ++e;
      if (e >= pattern.size() || pattern[e] != ')') break;
      k = e + 1;
    }
    return pattern.substr(0, k) + "(?C1)(?:" + pattern.substr(k) + ")";
  }
  std::string pattern_;
  std::shared_ptr<pcre2_code> code_;  // shared by copies; matching never writes it
  bool jit_ = false;
};

}  // namespace kvd::detail
