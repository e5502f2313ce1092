// The Jinja subset chat templates use (see chat_template.hpp): a lexer with
// Jinja2's whitespace rules (trim_blocks, lstrip_blocks, `-` and `+` markers, one
// trailing newline dropped), a recursive-descent parser into a small AST, and a
// tree-walking renderer with Python's value semantics (truthiness, `and`/`or`
// returning an operand, floor division and modulo, negative indices, slices,
// str() of values). Strings are UTF-8; length, indexing and slicing count code
// points as Python does.
//
// Everything outside the subset is refused by name: at parse time for tags,
// filters and tests; at render time for methods and functions (whose receiver is
// only known then). Hostile templates are bounded by TemplateLimits: the parser
// refuses nesting deeper than max_depth (expressions and blocks), so neither parse,
// render nor destruction recurses further; rendering counts loop iterations, output
// bytes, work steps and the bytes of every value it builds. Every operation charges
// what it costs before doing it: a step per evaluation, and for string work (search,
// strip, compare, length, case tests, repetition) one step per 16 bytes or repeats;
// a value's size is charged before it is allocated. Searches are linear (KMP), dicts
// are hashed, and error text taken from a template is cut to kMaxErrorTextBytes.
#pragma once

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <limits>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kvdecode/text/unicode.hpp"
#include "kvdecode/error.hpp"

namespace kvd {

/// Bounds on a template's parse and render; a template over any of them gets a
/// TemplateError naming the limit.
struct TemplateLimits {
  std::uint64_t max_source_bytes = std::uint64_t{1} << 20;  ///< template source
  int max_depth = 64;                                       ///< nesting of blocks and brackets
  int max_expr_depth = 256;                                 ///< depth of an expression's tree (a+b+c+... counts each +)
  std::uint64_t max_output_bytes = std::uint64_t{1} << 24;  ///< rendered text
  std::uint64_t max_built_bytes = std::uint64_t{1} << 28;   ///< sum of all strings/lists built while rendering
  std::uint64_t max_steps = 20'000'000;                     ///< work: evaluations, statements, iterations, and 1 per 16 bytes a string operation reads
  std::uint64_t max_loop_iterations = 1'000'000;            ///< for-loop iterations, all loops together
};

namespace detail::jinja {

// ---------------------------------------------------------------- values

struct Value;
struct ValueDict;
using ValueList = std::vector<Value>;

/// A Jinja value. Lists and dicts are shared and immutable once built; a namespace
/// (namespace()) is a dict that `{% set ns.x = ... %}` mutates, shared by reference
/// as in Python. A function is a global callable named by `s`.
struct Value {
  enum class Kind : unsigned char { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kNamespace, kFunction };
  Kind kind = Kind::kUndefined;
  bool b = false;
  std::int64_t i = 0;
  double f = 0;
  std::shared_ptr<const std::string> s;
  std::shared_ptr<const ValueList> list;
  std::shared_ptr<ValueDict> dict;
  std::uint32_t depth = 0;  // containers: 1 + the deepest element (a namespace counts as 1)
  bool has_ns = false;      // is or holds a namespace

  static Value none() { Value v; v.kind = Kind::kNone; return v; }
  static Value boolean(bool x) { Value v; v.kind = Kind::kBool; v.b = x; return v; }
  static Value integer(std::int64_t x) { Value v; v.kind = Kind::kInt; v.i = x; return v; }
  static Value number(double x) { Value v; v.kind = Kind::kFloat; v.f = x; return v; }
  static Value string(std::string x) {
    Value v;
    v.kind = Kind::kString;
    v.s = std::make_shared<const std::string>(std::move(x));
    return v;
  }
  static Value of_shared_list(std::shared_ptr<const ValueList> l) {
    Value v;
    v.kind = Kind::kList;
    for (const Value& x : *l) {
      v.depth = std::max(v.depth, x.depth);
      v.has_ns = v.has_ns || x.has_ns;
    }
    v.depth += 1;
    v.list = std::move(l);
    return v;
  }
  static Value of_list(ValueList l) { return of_shared_list(std::make_shared<const ValueList>(std::move(l))); }
  static inline Value of_dict(std::shared_ptr<ValueDict> d, Kind k = Kind::kDict);
  static Value function(const char* name) {
    Value v;
    v.kind = Kind::kFunction;
    v.s = std::make_shared<const std::string>(name);
    return v;
  }
  bool is_number() const { return kind == Kind::kInt || kind == Kind::kFloat || kind == Kind::kBool; }
  bool is_integer() const { return kind == Kind::kInt || kind == Kind::kBool; }
  bool is_mapping() const { return kind == Kind::kDict || kind == Kind::kNamespace; }
  std::int64_t as_int() const { return kind == Kind::kBool ? (b ? 1 : 0) : i; }
  double as_double() const { return kind == Kind::kFloat ? f : static_cast<double>(as_int()); }
  const std::string& str() const { return *s; }
};

/// Keys in insertion order, as Python dicts keep them. Past kLinearKeys keys, set()
/// keeps a hash index beside the items, so building a dict and looking keys up stay
/// linear in its size (a dict literal of n keys was O(n^2) with linear insertion).
/// Items appended directly (small fixed dicts) are found by a linear scan until the
/// next set() rebuilds the index.
struct ValueDict {
  static constexpr std::size_t kLinearKeys = 8;
  std::vector<std::pair<std::string, Value>> items;
  std::unordered_map<std::string, std::size_t> index;  // key -> position in items, once items > kLinearKeys

  const Value* find(const std::string& key) const {
    const std::size_t k = position(key);
    return k == kNone ? nullptr : &items[k].second;
  }
  void set(const std::string& key, Value v) {
    const std::size_t k = position(key);
    if (k != kNone) {
      items[k].second = std::move(v);
      return;
    }
    items.emplace_back(key, std::move(v));
    if (items.size() <= kLinearKeys) return;
    if (index.size() + 1 == items.size()) {
      index.emplace(key, items.size() - 1);
    } else {  // the first key past the threshold, or items appended directly
      index.clear();
      for (std::size_t i = 0; i < items.size(); ++i) index.emplace(items[i].first, i);
    }
  }

 private:
  static constexpr std::size_t kNone = static_cast<std::size_t>(-1);
  std::size_t position(const std::string& key) const {
    if (items.size() > kLinearKeys && index.size() == items.size()) {
      const auto it = index.find(key);
      return it == index.end() ? kNone : it->second;
    }
    for (std::size_t i = 0; i < items.size(); ++i)
      if (items[i].first == key) return i;
    return kNone;
  }
};

inline Value Value::of_dict(std::shared_ptr<ValueDict> d, Kind k) {
  Value v;
  v.kind = k;
  for (const auto& kv : d->items) {
    v.depth = std::max(v.depth, kv.second.depth);
    v.has_ns = v.has_ns || kv.second.has_ns;
  }
  v.depth = k == Kind::kNamespace ? 1 : v.depth + 1;
  v.has_ns = v.has_ns || k == Kind::kNamespace;
  v.dict = std::move(d);
  return v;
}

inline const char* kind_name(const Value& v);

/// "a string", "an integer", ... for messages.
inline std::string a_kind(const Value& v) {
  const std::string k = kind_name(v);
  return (std::strchr("aeiou", k[0]) ? "an " : "a ") + k;
}

inline const char* kind_name(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kUndefined: return "undefined";
    case Value::Kind::kNone: return "none";
    case Value::Kind::kBool: return "boolean";
    case Value::Kind::kInt: return "integer";
    case Value::Kind::kFloat: return "float";
    case Value::Kind::kString: return "string";
    case Value::Kind::kList: return "list";
    case Value::Kind::kDict: return "dict";
    case Value::Kind::kNamespace: return "namespace";
    case Value::Kind::kFunction: return "function";
  }
  return "?";
}

/// A JSON value (objects keep their key order) as a template value; `depth` counts
/// the nesting so far. Throws TemplateError past 64 levels.
template <class Json>
Value from_json(const Json& j, int depth = 0) {
  if (depth > 64) throw TemplateError("template variable: JSON nested deeper than the limit of 64");
  if (j.is_null()) return Value::none();
  if (j.is_boolean()) return Value::boolean(j.template get<bool>());
  if (j.is_number_integer() && (!j.is_number_unsigned() || j.template get<std::uint64_t>() <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())))
    return Value::integer(j.template get<std::int64_t>());
  if (j.is_number()) return Value::number(j.template get<double>());
  if (j.is_string()) return Value::string(j.template get<std::string>());
  if (j.is_array()) {
    ValueList l;
    for (const auto& x : j) l.push_back(from_json(x, depth + 1));
    return Value::of_list(std::move(l));
  }
  auto d = std::make_shared<ValueDict>();
  for (auto it = j.begin(); it != j.end(); ++it) d->set(it.key(), from_json(it.value(), depth + 1));
  return Value::of_dict(std::move(d));
}

// ---------------------------------------------------------------- UTF-8 helpers

/// Bytes of the UTF-8 unit starting at s[i]; an invalid byte counts as one unit.
inline std::size_t utf8_len_at(const std::string& s, std::size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  std::size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
  if (i + n > s.size()) return 1;
  for (std::size_t k = 1; k < n; ++k)
    if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return 1;
  return n;
}

/// Start offsets of every code point of s, plus s.size() at the end.
inline std::vector<std::size_t> utf8_offsets(const std::string& s) {
  std::vector<std::size_t> off;
  off.reserve(s.size() + 1);
  for (std::size_t i = 0; i < s.size(); i += utf8_len_at(s, i)) off.push_back(i);
  off.push_back(s.size());
  return off;
}

inline std::size_t utf8_count(const std::string& s) {
  std::size_t n = 0;
  for (std::size_t i = 0; i < s.size(); i += utf8_len_at(s, i)) ++n;
  return n;
}

/// Python's str.isspace() for the code point at s[i] (length n): ASCII \t\n\v\f\r
/// space and \x1c-\x1f, and the Unicode spaces (U+0085, U+00A0, U+1680, U+2000-200A,
/// U+2028, U+2029, U+202F, U+205F, U+3000).
inline bool is_py_space(const std::string& s, std::size_t i, std::size_t n) {
  const auto c = static_cast<unsigned char>(s[i]);
  if (n == 1) return c == ' ' || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F);
  std::uint32_t cp = 0;
  if (n == 2) cp = ((c & 0x1Fu) << 6) | (static_cast<unsigned char>(s[i + 1]) & 0x3Fu);
  else if (n == 3)
    cp = ((c & 0x0Fu) << 12) | ((static_cast<unsigned char>(s[i + 1]) & 0x3Fu) << 6) |
         (static_cast<unsigned char>(s[i + 2]) & 0x3Fu);
  else return false;
  return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 ||
         cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

/// Code points in s[0, end).
inline std::size_t utf8_count(const std::string& s, std::size_t end) {
  std::size_t n = 0;
  for (std::size_t i = 0; i < end; i += utf8_len_at(s, i)) ++n;
  return n;
}

/// Start of the unit that ends at e (0 < e <= s.size(), e the end of a unit), as
/// utf8_len_at splits s from its start: every byte that is not a continuation byte
/// starts a unit, so the nearest one before e starts it if its sequence ends at e;
/// otherwise s[e - 1] is a lone continuation byte, a unit of its own.
inline std::size_t utf8_unit_before(const std::string& s, std::size_t e) {
  std::size_t k = e - 1;
  while (k > 0 && e - k < 4 && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80) --k;
  if ((static_cast<unsigned char>(s[k]) & 0xC0) != 0x80 && k + utf8_len_at(s, k) == e) return k;
  return e - 1;
}

/// The bytes of the unit at s[i] (length n) packed into one number: equal units give
/// equal keys, and a lone invalid byte (>= 0x80) gives a key no valid unit has.
inline std::uint32_t unit_key(const std::string& s, std::size_t i, std::size_t n) {
  std::uint32_t k = 0;
  for (std::size_t j = 0; j < n; ++j) k = (k << 8) | static_cast<unsigned char>(s[i + j]);
  return k;
}

// ---------------------------------------------------------------- linear search

/// A needle prepared for Knuth-Morris-Pratt search. find() reads each haystack byte
/// at most twice, so `in`, find, count, replace and split stay linear where
/// std::string::find is O(n*m) (a long 'aaa...a' against 'aa...ab'). The table costs
/// 4 bytes per needle byte; the needle must outlive this object.
class Needle {
 public:
  explicit Needle(const std::string& p) : p_(p), border_(p.size()) {
    std::uint32_t k = 0;  // border_[i]: length of the longest proper border of p[0..i]
    for (std::size_t i = 1; i < p.size(); ++i) {
      while (k > 0 && p[i] != p[k]) k = border_[k - 1];
      if (p[i] == p[k]) ++k;
      border_[i] = k;
    }
  }
  /// First occurrence in s at or after `from`, or npos; an empty needle is found at `from`.
  std::size_t find(const std::string& s, std::size_t from) const {
    const std::size_t m = p_.size();
    if (m == 0) return from <= s.size() ? from : std::string::npos;
    std::size_t k = 0;
    for (std::size_t i = from; i < s.size(); ++i) {
      if (k == 0) {  // skip to the next possible first byte
        const void* q = std::memchr(s.data() + i, p_[0], s.size() - i);
        if (!q) return std::string::npos;
        i = static_cast<std::size_t>(static_cast<const char*>(q) - s.data());
      }
      while (k > 0 && s[i] != p_[k]) k = border_[k - 1];
      if (s[i] == p_[k]) ++k;
      if (k == m) return i + 1 - m;
    }
    return std::string::npos;
  }

 private:
  const std::string& p_;
  std::vector<std::uint32_t> border_;
};

// ---------------------------------------------------------------- AST

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kLiteral, kName, kList, kDict, kAttr, kIndex, kSlice, kCall, kFilter, kTest,
    kNot, kNeg, kPos, kBinary, kConcat, kAnd, kOr, kCompare, kCond,
  };
  Kind kind;
  std::size_t pos = 0;       // source offset, for messages
  int depth = 1;             // 1 + the deepest child
  Value value;               // kLiteral
  std::string name;          // kName, kAttr, kCall of a method, kFilter, kTest; operator of kBinary
  ExprPtr a, b, c, d;        // operands: kAttr/kIndex/kFilter/kTest/kCall object in a; kSlice a[b:c:d]; kCond b if a else c
  std::vector<ExprPtr> args;            // kList/kDict (keys, values alternate)/kCall/kFilter/kTest positional
  std::vector<std::string> kw_names;    // keyword arguments
  std::vector<ExprPtr> kw_values;
  std::vector<std::string> ops;         // kCompare: ops[i] between args[i] and args[i+1]
  bool negated = false;                 // kTest: `is not`
};

struct Node;
using NodeList = std::vector<std::unique_ptr<Node>>;

struct Node {
  enum class Kind { kText, kOutput, kIf, kFor, kSet, kSetAttr, kSetBlock, kBreak, kContinue, kBlock };
  Kind kind;
  std::size_t pos = 0;
  std::string text;                     // kText; kSet/kSetBlock/kSetAttr: the variable
  std::string attr;                     // kSetAttr
  std::vector<std::string> targets;     // kFor loop variables
  ExprPtr expr;                         // kOutput, kSet value, kFor iterable
  ExprPtr filter;                       // kFor `if` filter
  std::vector<ExprPtr> conds;           // kIf: one per branch (else has none)
  std::vector<NodeList> bodies;         // kIf branches (+ else); kFor body (+ else); kSetBlock/kBlock body
};

/// A parsed template: immutable, shareable between threads.
struct Program {
  std::string source, where;
  NodeList body;
};

/// "<where>:<line>:<col>: " for an offset in source.
inline std::string location(const std::string& source, const std::string& where, std::size_t pos) {
  std::size_t line = 1, col = 1;
  for (std::size_t i = 0; i < pos && i < source.size(); ++i) {
    if (source[i] == '\n') {
      ++line;
      col = 1;
    } else {
      ++col;
    }
  }
  return msg(where, ":", line, ":", col, ": ");
}

/// Longest text a template puts into an error message (raise_exception's argument,
/// a name or value it reports); the rest is cut off with a note.
constexpr std::size_t kMaxErrorTextBytes = 4096;

/// s, or its first `limit` bytes (cut at a UTF-8 boundary) and a note giving its length.
inline std::string clip_text(const std::string& s, std::size_t limit = kMaxErrorTextBytes) {
  if (s.size() <= limit) return s;
  std::size_t cut = limit;
  for (int k = 0; k < 3 && cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80; ++k) --cut;
  return s.substr(0, cut) + msg(" [message truncated to ", limit, " of its ", s.size(), " bytes]");
}

/// A TemplateError at `pos`: location, then `what` clipped (its own clip notes fit).
inline TemplateError template_error(const std::string& source, const std::string& where, std::size_t pos,
                                    const std::string& what) {
  return TemplateError(location(source, where, pos) + clip_text(what, kMaxErrorTextBytes + 256));
}

// ---------------------------------------------------------------- lexer

struct Token {
  enum class Kind { kText, kVarBegin, kVarEnd, kBlockBegin, kBlockEnd, kName, kString, kInt, kFloat, kOp, kEof };
  Kind kind;
  std::size_t pos;
  std::string text;  // kText, kName, kString (decoded), kOp
  std::int64_t i = 0;
  double f = 0;
};

class Lexer {
 public:
  Lexer(const std::string& src, const std::string& where) : src_(src), where_(where) {}

  std::vector<Token> run() {
    std::size_t n = src_.size();
    // Jinja2 drops one trailing newline (keep_trailing_newline=False).
    if (n > 0 && src_[n - 1] == '\n') --n;
    if (n > 0 && src_[n - 1] == '\r') --n;
    n_ = n;
    std::size_t pos = 0;
    bool line_starting = true;
    while (pos < n_) {
      std::size_t tag = pos;
      while (tag + 1 < n_ && !(src_[tag] == '{' && (src_[tag + 1] == '{' || src_[tag + 1] == '%' || src_[tag + 1] == '#')))
        ++tag;
      if (tag + 1 >= n_) {
        emit_text(src_.substr(pos, n_ - pos), pos);
        break;
      }
      const char kind = src_[tag + 1];
      const char mod = tag + 2 < n_ ? src_[tag + 2] : '\0';
      std::string text = src_.substr(pos, tag - pos);
      if (mod == '-') {
        while (!text.empty() && is_space(text.back())) text.pop_back();
      } else if (kind != '{' && mod != '+') {  // lstrip_blocks
        const std::size_t l = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
        if (l > 0 || line_starting) {
          bool blank = true;
          for (std::size_t k = l; k < text.size(); ++k) blank = blank && (text[k] == ' ' || text[k] == '\t');
          if (blank) text.resize(l);
        }
      }
      emit_text(std::move(text), pos);
      std::size_t p = tag + 2 + ((mod == '-' || mod == '+') ? 1 : 0);
      bool strip_after = false, trim = false;
      if (kind == '#') {
        const std::size_t end = src_.find("#}", p);
        if (end == std::string::npos || end + 2 > n_) fail(tag, "unclosed comment ({# without #})");
        strip_after = end > p && src_[end - 1] == '-';
        trim = !(end > p && src_[end - 1] == '+');
        p = end + 2;
      } else {
        const bool block = kind == '%';
        toks_.push_back({block ? Token::Kind::kBlockBegin : Token::Kind::kVarBegin, tag, ""});
        int braces = 0;
        for (;;) {
          while (p < n_ && is_space(src_[p])) ++p;
          if (p >= n_) fail(tag, block ? "unclosed {% tag (no %})" : "unclosed {{ expression (no }})");
          const char* end2 = block ? "%}" : "}}";
          if (block || braces == 0) {
            // '-%}' strips the whitespace after the tag; '+%}' keeps the newline trim_blocks would drop.
            if ((src_[p] == '-' || (block && src_[p] == '+')) && at(p + 1, end2)) {
              strip_after = src_[p] == '-';
              trim = false;
              toks_.push_back({block ? Token::Kind::kBlockEnd : Token::Kind::kVarEnd, p, ""});
              p += 3;
              break;
            }
            if (at(p, end2)) {
              trim = block;
              toks_.push_back({block ? Token::Kind::kBlockEnd : Token::Kind::kVarEnd, p, ""});
              p += 2;
              break;
            }
          }
          p = lex_token(p, braces);
        }
      }
      if (strip_after) {
        while (p < n_ && is_space(src_[p])) ++p;
      } else if (trim && p < n_ && src_[p] == '\n') {  // trim_blocks
        ++p;
      }
      line_starting = p > 0 && src_[p - 1] == '\n';
      pos = p;
    }
    toks_.push_back({Token::Kind::kEof, n_, ""});
    return std::move(toks_);
  }

 private:
  bool at(std::size_t q, const char* s) const {
    const std::size_t len = std::strlen(s);
    return q + len <= n_ && src_.compare(q, len, s) == 0;
  }
  static bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
  static bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
  static bool is_digit(char c) { return c >= '0' && c <= '9'; }

  [[noreturn]] void fail(std::size_t pos, const std::string& what) const {
    throw template_error(src_, where_, pos, what);
  }

  // Template data with Jinja2's newline normalisation (\r\n and \r become \n).
  void emit_text(std::string text, std::size_t pos) {
    if (text.empty()) return;
    std::string out;
    out.reserve(text.size());
    for (std::size_t k = 0; k < text.size(); ++k) {
      if (text[k] == '\r') {
        out += '\n';
        if (k + 1 < text.size() && text[k + 1] == '\n') ++k;
      } else {
        out += text[k];
      }
    }
    toks_.push_back({Token::Kind::kText, pos, std::move(out)});
  }

  std::size_t lex_token(std::size_t p, int& braces) {
    const char c = src_[p];
    if (is_name_start(c)) {
      std::size_t q = p;
      while (q < n_ && (is_name_start(src_[q]) || is_digit(src_[q]))) ++q;
      toks_.push_back({Token::Kind::kName, p, src_.substr(p, q - p)});
      return q;
    }
    if (is_digit(c)) return lex_number(p);
    if (c == '\'' || c == '"') return lex_string(p);
    static const char* const kOps2[] = {"//", "**", "==", "!=", "<=", ">="};
    for (const char* op : kOps2)
      if (p + 1 < n_ && src_[p] == op[0] && src_[p + 1] == op[1]) {
        toks_.push_back({Token::Kind::kOp, p, op});
        return p + 2;
      }
    if (std::strchr("+-*/%~|.,:()[]{}<>=", c) != nullptr && c != '\0') {
      if (c == '{') ++braces;
      if (c == '}') --braces;
      toks_.push_back({Token::Kind::kOp, p, std::string(1, c)});
      return p + 1;
    }
    fail(p, msg("unexpected character '", printable(c), "' in a tag"));
  }

  static std::string printable(char c) {
    const auto u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u < 0x7F) return std::string(1, c);
    char buf[8];
    std::snprintf(buf, sizeof buf, "\\x%02X", u);
    return buf;
  }

  std::size_t lex_number(std::size_t p) {
    std::size_t q = p;
    std::string digits;
    auto take_digits = [&] {
      while (q < n_ && (is_digit(src_[q]) || (src_[q] == '_' && q + 1 < n_ && is_digit(src_[q + 1])))) {
        if (src_[q] != '_') digits += src_[q];
        ++q;
      }
    };
    take_digits();
    bool is_float = false;
    const bool leading_zero = digits.size() > 1 && digits[0] == '0' && digits.find_first_not_of('0') != std::string::npos;
    // A float needs digits after the dot, and none right after a '.' (so a.0.1 stays subscripts).
    const bool after_dot = p > 0 && src_[p - 1] == '.';
    if (!after_dot && q + 1 < n_ && src_[q] == '.' && is_digit(src_[q + 1])) {
      is_float = true;
      digits += '.';
      ++q;
      take_digits();
    }
    if (!after_dot && q < n_ && (src_[q] == 'e' || src_[q] == 'E')) {
      std::size_t r = q + 1;
      if (r < n_ && (src_[r] == '+' || src_[r] == '-')) ++r;
      if (r < n_ && is_digit(src_[r])) {
        is_float = true;
        digits += 'e';
        if (src_[q + 1] == '-') digits += '-';
        q = r;
        take_digits();
      }
    }
    Token t{is_float ? Token::Kind::kFloat : Token::Kind::kInt, p, digits};
    if (is_float) {
      t.f = std::strtod(digits.c_str(), nullptr);
    } else {
      if (leading_zero) fail(p, msg("integer literal ", digits, " has a leading zero"));
      std::int64_t v = 0;
      for (char d : digits) {
        if (v > (std::numeric_limits<std::int64_t>::max() - (d - '0')) / 10)
          fail(p, msg("integer literal ", digits, " exceeds the 64-bit range"));
        v = v * 10 + (d - '0');
      }
      t.i = v;
    }
    toks_.push_back(std::move(t));
    return q;
  }

  // A string literal with Python's escapes (Jinja2 decodes them as unicode-escape).
  std::size_t lex_string(std::size_t p) {
    const char quote = src_[p];
    std::string out;
    std::size_t q = p + 1;
    auto hex = [&](std::size_t at, int count) -> std::uint32_t {
      std::uint32_t v = 0;
      for (int k = 0; k < count; ++k) {
        const char h = at + k < n_ ? src_[at + k] : '\0';
        int d = (h >= '0' && h <= '9') ? h - '0' : (h >= 'a' && h <= 'f') ? h - 'a' + 10 : (h >= 'A' && h <= 'F') ? h - 'A' + 10 : -1;
        if (d < 0) fail(at, msg("bad escape in a string literal: expected ", count, " hex digits"));
        v = v * 16 + static_cast<std::uint32_t>(d);
      }
      return v;
    };
    for (;;) {
      if (q >= n_) fail(p, "unterminated string literal");
      const char c = src_[q];
      if (c == quote) break;
      if (c == '\r') {  // newline normalisation
        out += '\n';
        q += (q + 1 < n_ && src_[q + 1] == '\n') ? 2 : 1;
        continue;
      }
      if (c != '\\') {
        out += c;
        ++q;
        continue;
      }
      if (q + 1 >= n_) fail(p, "unterminated string literal");
      const char e = src_[q + 1];
      q += 2;
      switch (e) {
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case 'a': out += '\a'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'v': out += '\v'; break;
        case '\n': break;  // line continuation
        case 'x': case 'u': case 'U': {
          const int count = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          const std::uint32_t cp = hex(q, count);
          q += static_cast<std::size_t>(count);
          if (cp > 0x10FFFF) fail(q, msg("escape \\", e, " names U+", cp, ", beyond U+10FFFF"));
          if (cp >= 0xD800 && cp <= 0xDFFF) fail(q, "escape names a lone surrogate, which has no UTF-8 form");
          utf8_append(out, cp);
          break;
        }
        default:
          if (e >= '0' && e <= '7') {
            std::uint32_t v = static_cast<std::uint32_t>(e - '0');
            for (int k = 0; k < 2 && q < n_ && src_[q] >= '0' && src_[q] <= '7'; ++k, ++q)
              v = v * 8 + static_cast<std::uint32_t>(src_[q] - '0');
            utf8_append(out, v);
          } else {  // unknown escapes stay as written
            out += '\\';
            out += e;
          }
      }
    }
    toks_.push_back({Token::Kind::kString, p, std::move(out)});
    return q + 1;
  }

  const std::string& src_;
  const std::string& where_;
  std::size_t n_ = 0;
  std::vector<Token> toks_;
};

// ---------------------------------------------------------------- parser

inline bool known_filter(const std::string& n) {
  static const char* const kFilters[] = {"length", "count", "trim", "tojson", "default", "d", "upper", "lower",
                                         "string", "join", "first", "last", "items", "list", "reverse", "capitalize",
                                         "title", "replace", "int", "float", "abs", "safe", "e", "escape",
                                         "selectattr", "rejectattr", "map", "select", "reject", "unique", "sort",
                                         "indent", "wordcount", "round", "sum", "min", "max", "batch"};
  for (const char* f : kFilters)
    if (n == f) return true;
  return false;
}

inline bool known_test(const std::string& n) {
  static const char* const kTests[] = {"defined", "undefined", "none", "string", "number", "integer", "float",
                                       "boolean", "true", "false", "mapping", "iterable", "sequence", "callable",
                                       "even", "odd", "divisibleby", "eq", "equalto", "==", "ne", "!=", "in",
                                       "lt", "lessthan", "le", "gt", "greaterthan", "ge", "lower", "upper"};
  for (const char* t : kTests)
    if (n == t) return true;
  return false;
}

class Parser {
 public:
  Parser(const std::string& src, const std::string& where, std::vector<Token> toks, const TemplateLimits& lim)
      : src_(src), where_(where), toks_(std::move(toks)), lim_(lim) {}

  NodeList parse_template() {
    std::string ender;
    NodeList body = parse_body({}, ender, 0);
    return body;
  }

 private:
  // ---- helpers
  const Token& cur() const { return toks_[i_]; }
  const Token& next() { return toks_[i_++]; }
  bool is_op(const char* op) const { return cur().kind == Token::Kind::kOp && cur().text == op; }
  bool is_name(const char* n) const { return cur().kind == Token::Kind::kName && cur().text == n; }
  [[noreturn]] void fail(std::size_t pos, const std::string& what) const {
    throw template_error(src_, where_, pos, what);
  }
  std::string describe(const Token& t) const {
    switch (t.kind) {
      case Token::Kind::kText: return "text";
      case Token::Kind::kVarBegin: return "'{{'";
      case Token::Kind::kVarEnd: return "'}}'";
      case Token::Kind::kBlockBegin: return "'{%'";
      case Token::Kind::kBlockEnd: return "'%}'";
      case Token::Kind::kName: return "'" + t.text + "'";
      case Token::Kind::kString: return "a string";
      case Token::Kind::kInt: case Token::Kind::kFloat: return "a number";
      case Token::Kind::kOp: return "'" + t.text + "'";
      case Token::Kind::kEof: return "the end of the template";
    }
    return "?";
  }
  void expect_op(const char* op) {
    if (!is_op(op)) fail(cur().pos, msg("expected '", op, "', found ", describe(cur())));
    ++i_;
  }
  void expect_block_end(const char* tag) {
    if (cur().kind != Token::Kind::kBlockEnd)
      fail(cur().pos, msg("expected '%}' to end {% ", tag, " %}, found ", describe(cur())));
    ++i_;
  }
  std::string expect_name(const char* what) {
    if (cur().kind != Token::Kind::kName) fail(cur().pos, msg("expected ", what, ", found ", describe(cur())));
    return next().text;
  }
  ExprPtr make(Expr::Kind k, std::size_t pos) {
    auto e = std::make_unique<Expr>();
    e->kind = k;
    e->pos = pos;
    return e;
  }
  // Sets e's depth from its children; refuses trees deeper than max_depth, which
  // bounds the recursion of evaluation and destruction.
  ExprPtr finish(ExprPtr e) {
    int d = 0;
    for (const ExprPtr* p : {&e->a, &e->b, &e->c, &e->d})
      if (*p) d = std::max(d, (*p)->depth);
    for (const auto& x : e->args) d = std::max(d, x->depth);
    for (const auto& x : e->kw_values) d = std::max(d, x->depth);
    e->depth = d + 1;
    if (e->depth > lim_.max_expr_depth)
      fail(e->pos, msg("expression tree deeper than the limit of ", lim_.max_expr_depth));
    return e;
  }
  struct DepthGuard {
    DepthGuard(Parser& p, std::size_t pos) : p_(p) {
      if (++p_.depth_ > p_.lim_.max_depth)
        p_.fail(pos, msg("template nested deeper than the limit of ", p_.lim_.max_depth));
    }
    ~DepthGuard() { --p_.depth_; }
    Parser& p_;
  };

  // ---- statements
  NodeList parse_body(const std::vector<const char*>& enders, std::string& ender, std::size_t open_pos) {
    NodeList body;
    for (;;) {
      const Token& t = cur();
      if (t.kind == Token::Kind::kEof) {
        if (enders.empty()) return body;
        std::string want;
        for (const char* e : enders) want += (want.empty() ? "" : " or ") + std::string("{% ") + e + " %}";
        fail(open_pos, msg("block is never closed (expected ", want, ")"));
      }
      if (t.kind == Token::Kind::kText) {
        auto n = std::make_unique<Node>();
        n->kind = Node::Kind::kText;
        n->pos = t.pos;
        n->text = t.text;
        body.push_back(std::move(n));
        ++i_;
        continue;
      }
      if (t.kind == Token::Kind::kVarBegin) {
        auto n = std::make_unique<Node>();
        n->kind = Node::Kind::kOutput;
        n->pos = t.pos;
        ++i_;
        n->expr = parse_expression();
        if (cur().kind != Token::Kind::kVarEnd)
          fail(cur().pos, msg("expected '}}' to end the expression, found ", describe(cur())));
        ++i_;
        body.push_back(std::move(n));
        continue;
      }
      if (t.kind != Token::Kind::kBlockBegin) fail(t.pos, msg("unexpected ", describe(t)));
      const std::size_t tag_pos = t.pos;
      ++i_;
      const std::string name = expect_name("a tag name after '{%'");
      for (const char* e : enders)
        if (name == e) {
          ender = name;
          return body;
        }
      body.push_back(parse_statement(name, tag_pos));
    }
  }

  std::unique_ptr<Node> parse_statement(const std::string& name, std::size_t pos) {
    DepthGuard guard(*this, pos);
    auto n = std::make_unique<Node>();
    n->pos = pos;
    std::string ender;
    if (name == "if") {
      n->kind = Node::Kind::kIf;
      n->conds.push_back(parse_or_test());
      expect_block_end("if");
      for (;;) {
        n->bodies.push_back(parse_body({"elif", "else", "endif"}, ender, pos));
        if (ender == "elif") {
          n->conds.push_back(parse_or_test());
          expect_block_end("elif");
          continue;
        }
        if (ender == "else") {
          expect_block_end("else");
          n->bodies.push_back(parse_body({"endif"}, ender, pos));
        }
        expect_block_end("endif");
        return n;
      }
    }
    if (name == "for") {
      n->kind = Node::Kind::kFor;
      for (;;) {
        n->targets.push_back(expect_name("a loop variable"));
        if (!is_op(",")) break;
        ++i_;
      }
      if (!is_name("in")) fail(cur().pos, msg("expected 'in' in {% for %}, found ", describe(cur())));
      ++i_;
      n->expr = parse_or_test();
      if (is_name("if")) {
        ++i_;
        n->filter = parse_or_test();
      }
      if (is_name("recursive")) fail(cur().pos, "unsupported construct: recursive for loops ({% for ... recursive %})");
      expect_block_end("for");
      ++loops_;
      n->bodies.push_back(parse_body({"else", "endfor"}, ender, pos));
      --loops_;
      if (ender == "else") {
        expect_block_end("else");
        n->bodies.push_back(parse_body({"endfor"}, ender, pos));
      }
      expect_block_end("endfor");
      return n;
    }
    if (name == "set") {
      n->text = expect_name("a variable name after {% set");
      if (is_op(".")) {
        ++i_;
        n->kind = Node::Kind::kSetAttr;
        n->attr = expect_name("an attribute name");
        expect_op("=");
        n->expr = parse_expression();
        expect_block_end("set");
        return n;
      }
      if (is_op(",")) fail(cur().pos, "unsupported construct: {% set a, b = ... %} (tuple assignment)");
      if (cur().kind == Token::Kind::kBlockEnd) {  // {% set x %}...{% endset %}
        ++i_;
        n->kind = Node::Kind::kSetBlock;
        n->bodies.push_back(parse_body({"endset"}, ender, pos));
        expect_block_end("endset");
        return n;
      }
      n->kind = Node::Kind::kSet;
      expect_op("=");
      n->expr = parse_expression();
      expect_block_end("set");
      return n;
    }
    if (name == "break" || name == "continue") {
      if (loops_ == 0) fail(pos, msg("{% ", name, " %} outside a for loop"));
      n->kind = name == "break" ? Node::Kind::kBreak : Node::Kind::kContinue;
      expect_block_end(name.c_str());
      return n;
    }
    if (name == "generation") {  // transformers' assistant-mask marker: renders its body
      n->kind = Node::Kind::kBlock;
      expect_block_end("generation");
      n->bodies.push_back(parse_body({"endgeneration"}, ender, pos));
      expect_block_end("endgeneration");
      return n;
    }
    static const char* const kUnsupported[] = {"macro", "call", "filter", "include", "import", "from", "extends",
                                               "block", "with", "raw", "autoescape", "do", "trans", "pluralize"};
    for (const char* u : kUnsupported)
      if (name == u) fail(pos, msg("unsupported construct: {% ", name, " %}"));
    static const char* const kEnders[] = {"endif", "endfor", "elif", "else", "endset", "endgeneration", "endmacro",
                                          "endcall", "endfilter", "endblock", "endwith", "endraw"};
    for (const char* e : kEnders)
      if (name == e) fail(pos, msg("unexpected {% ", name, " %} (no open block it closes)"));
    fail(pos, msg("unknown tag {% ", name, " %}"));
  }

  // ---- expressions (Jinja2's precedence, lowest first)
  ExprPtr parse_expression() {
    DepthGuard guard(*this, cur().pos);
    ExprPtr e = parse_or_test();
    while (is_name("if")) {  // x if cond [else y]
      const std::size_t pos = next().pos;
      ExprPtr c = make(Expr::Kind::kCond, pos);
      c->b = std::move(e);
      c->a = parse_or_test();
      if (is_name("else")) {
        ++i_;
        c->c = parse_expression();
      }
      e = finish(std::move(c));
    }
    return e;
  }
  ExprPtr parse_or_test() {
    ExprPtr e = parse_and();
    while (is_name("or")) {
      ExprPtr o = make(Expr::Kind::kOr, next().pos);
      o->a = std::move(e);
      o->b = parse_and();
      e = finish(std::move(o));
    }
    return e;
  }
  ExprPtr parse_and() {
    ExprPtr e = parse_not();
    while (is_name("and")) {
      ExprPtr o = make(Expr::Kind::kAnd, next().pos);
      o->a = std::move(e);
      o->b = parse_not();
      e = finish(std::move(o));
    }
    return e;
  }
  ExprPtr parse_not() {
    if (is_name("not")) {
      DepthGuard guard(*this, cur().pos);
      ExprPtr o = make(Expr::Kind::kNot, next().pos);
      o->a = parse_not();
      return finish(std::move(o));
    }
    return parse_compare();
  }
  ExprPtr parse_compare() {
    const std::size_t pos = cur().pos;
    ExprPtr first = parse_math1();
    ExprPtr cmp;
    for (;;) {
      std::string op;
      if (cur().kind == Token::Kind::kOp &&
          (cur().text == "==" || cur().text == "!=" || cur().text == "<" || cur().text == "<=" || cur().text == ">" ||
           cur().text == ">=")) {
        op = next().text;
      } else if (is_name("in")) {
        ++i_;
        op = "in";
      } else if (is_name("not") && toks_[i_ + 1].kind == Token::Kind::kName && toks_[i_ + 1].text == "in") {
        i_ += 2;
        op = "not in";
      } else {
        break;
      }
      if (!cmp) {
        cmp = make(Expr::Kind::kCompare, pos);
        cmp->args.push_back(std::move(first));
      }
      cmp->ops.push_back(op);
      cmp->args.push_back(parse_math1());
      if (cmp->args.size() > static_cast<std::size_t>(lim_.max_depth))
        fail(pos, msg("comparison chain longer than the limit of ", lim_.max_depth));
    }
    return cmp ? finish(std::move(cmp)) : std::move(first);
  }
  ExprPtr binary(const std::string& op, ExprPtr a, ExprPtr b, std::size_t pos) {
    ExprPtr e = make(op == "~" ? Expr::Kind::kConcat : Expr::Kind::kBinary, pos);
    e->name = op;
    e->a = std::move(a);
    e->b = std::move(b);
    return finish(std::move(e));
  }
  ExprPtr parse_math1() {
    ExprPtr e = parse_concat();
    while (is_op("+") || is_op("-")) {
      const Token& t = next();
      e = binary(t.text, std::move(e), parse_concat(), t.pos);
    }
    return e;
  }
  ExprPtr parse_concat() {
    ExprPtr e = parse_math2();
    while (is_op("~")) {
      const Token& t = next();
      e = binary("~", std::move(e), parse_math2(), t.pos);
    }
    return e;
  }
  ExprPtr parse_math2() {
    ExprPtr e = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token& t = next();
      e = binary(t.text, std::move(e), parse_pow(), t.pos);
    }
    return e;
  }
  ExprPtr parse_pow() {
    ExprPtr e = parse_unary(true);
    while (is_op("**")) {
      const Token& t = next();
      e = binary("**", std::move(e), parse_unary(true), t.pos);
    }
    return e;
  }
  ExprPtr parse_unary(bool with_filter) {
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      DepthGuard guard(*this, cur().pos);
      const Token& t = next();
      e = make(t.text == "-" ? Expr::Kind::kNeg : Expr::Kind::kPos, t.pos);
      e->a = parse_unary(false);
      e = finish(std::move(e));
    } else {
      e = parse_primary();
    }
    e = parse_postfix(std::move(e));
    if (with_filter) e = parse_filter_expr(std::move(e));
    return e;
  }
  ExprPtr parse_primary() {
    const Token& t = cur();
    switch (t.kind) {
      case Token::Kind::kName: {
        ++i_;
        ExprPtr e = make(Expr::Kind::kLiteral, t.pos);
        if (t.text == "true" || t.text == "True") e->value = Value::boolean(true);
        else if (t.text == "false" || t.text == "False") e->value = Value::boolean(false);
        else if (t.text == "none" || t.text == "None") e->value = Value::none();
        else {
          e->kind = Expr::Kind::kName;
          e->name = t.text;
        }
        return e;
      }
      case Token::Kind::kString: {
        ExprPtr e = make(Expr::Kind::kLiteral, t.pos);
        std::string s;
        while (cur().kind == Token::Kind::kString) s += next().text;  // adjacent literals join
        e->value = Value::string(std::move(s));
        return e;
      }
      case Token::Kind::kInt: {
        ExprPtr e = make(Expr::Kind::kLiteral, t.pos);
        e->value = Value::integer(next().i);
        return e;
      }
      case Token::Kind::kFloat: {
        ExprPtr e = make(Expr::Kind::kLiteral, t.pos);
        e->value = Value::number(next().f);
        return e;
      }
      case Token::Kind::kOp:
        if (t.text == "(") {
          ++i_;
          if (is_op(")")) {  // () is an empty tuple
            ++i_;
            return finish(make(Expr::Kind::kList, t.pos));
          }
          ExprPtr e = parse_expression();
          if (is_op(",")) {  // a tuple: kept as a list
            ExprPtr l = make(Expr::Kind::kList, t.pos);
            l->args.push_back(std::move(e));
            while (is_op(",")) {
              ++i_;
              if (is_op(")")) break;
              l->args.push_back(parse_expression());
            }
            e = finish(std::move(l));
          }
          expect_op(")");
          return e;
        }
        if (t.text == "[") {
          ++i_;
          ExprPtr l = make(Expr::Kind::kList, t.pos);
          while (!is_op("]")) {
            l->args.push_back(parse_expression());
            if (!is_op(",")) break;
            ++i_;
          }
          expect_op("]");
          return finish(std::move(l));
        }
        if (t.text == "{") {
          ++i_;
          ExprPtr d = make(Expr::Kind::kDict, t.pos);
          while (!is_op("}")) {
            d->args.push_back(parse_expression());
            expect_op(":");
            d->args.push_back(parse_expression());
            if (!is_op(",")) break;
            ++i_;
          }
          expect_op("}");
          return finish(std::move(d));
        }
        break;
      default: break;
    }
    fail(t.pos, msg("expected a value, found ", describe(t)));
  }
  void parse_call_args(Expr& e) {
    expect_op("(");
    while (!is_op(")")) {
      if (is_op("*") || is_op("**")) fail(cur().pos, "unsupported construct: *args / **kwargs in a call");
      if (cur().kind == Token::Kind::kName && toks_[i_ + 1].kind == Token::Kind::kOp && toks_[i_ + 1].text == "=") {
        e.kw_names.push_back(next().text);
        ++i_;
        e.kw_values.push_back(parse_expression());
      } else {
        if (!e.kw_names.empty()) fail(cur().pos, "a positional argument follows a keyword argument");
        e.args.push_back(parse_expression());
      }
      if (!is_op(",")) break;
      ++i_;
    }
    expect_op(")");
  }
  ExprPtr parse_postfix(ExprPtr e) {
    for (;;) {
      if (is_op(".")) {
        const std::size_t pos = next().pos;
        if (cur().kind == Token::Kind::kInt) {  // a.0 is a[0]
          ExprPtr ix = make(Expr::Kind::kIndex, pos);
          ix->a = std::move(e);
          ix->b = make(Expr::Kind::kLiteral, cur().pos);
          ix->b->value = Value::integer(next().i);
          e = finish(std::move(ix));
          continue;
        }
        ExprPtr at = make(Expr::Kind::kAttr, pos);
        at->a = std::move(e);
        at->name = expect_name("an attribute name after '.'");
        e = finish(std::move(at));
      } else if (is_op("[")) {
        const std::size_t pos = next().pos;
        ExprPtr first;
        if (!is_op(":")) first = parse_expression();
        if (is_op(":")) {  // slice a[b:c:d]
          ++i_;
          ExprPtr s = make(Expr::Kind::kSlice, pos);
          s->a = std::move(e);
          s->b = std::move(first);
          if (!is_op(":") && !is_op("]")) s->c = parse_expression();
          if (is_op(":")) {
            ++i_;
            if (!is_op("]")) s->d = parse_expression();
          }
          expect_op("]");
          e = finish(std::move(s));
        } else {
          expect_op("]");
          ExprPtr ix = make(Expr::Kind::kIndex, pos);
          ix->a = std::move(e);
          ix->b = std::move(first);
          e = finish(std::move(ix));
        }
      } else if (is_op("(")) {
        ExprPtr call = make(Expr::Kind::kCall, e->pos);
        call->a = std::move(e);
        parse_call_args(*call);
        e = finish(std::move(call));
      } else {
        return e;
      }
    }
  }
  ExprPtr parse_filter_expr(ExprPtr e) {
    for (;;) {
      if (is_op("|")) {
        const std::size_t pos = next().pos;
        ExprPtr f = make(Expr::Kind::kFilter, cur().pos);
        f->name = expect_name("a filter name after '|'");
        if (!known_filter(f->name)) fail(f->pos, msg("unknown filter '", f->name, "'"));
        (void)pos;
        f->a = std::move(e);
        if (is_op("(")) parse_call_args(*f);
        e = finish(std::move(f));
      } else if (is_name("is")) {
        ++i_;
        ExprPtr t = make(Expr::Kind::kTest, cur().pos);
        if (is_name("not")) {
          ++i_;
          t->negated = true;
        }
        if (cur().kind == Token::Kind::kOp && (cur().text == "==" || cur().text == "!=")) t->name = next().text;
        else t->name = expect_name("a test name after 'is'");
        if (!known_test(t->name)) fail(t->pos, msg("unknown test '", t->name, "'"));
        t->a = std::move(e);
        if (is_op("(")) {
          parse_call_args(*t);
        } else {
          const Token& n = cur();
          const bool arg = n.kind == Token::Kind::kString || n.kind == Token::Kind::kInt ||
                           n.kind == Token::Kind::kFloat ||
                           (n.kind == Token::Kind::kOp && (n.text == "[" || n.text == "{")) ||
                           (n.kind == Token::Kind::kName && n.text != "else" && n.text != "or" && n.text != "and" &&
                            n.text != "if" && n.text != "not" && n.text != "in" && n.text != "is");
          if (arg) t->args.push_back(parse_postfix(parse_primary()));
        }
        e = finish(std::move(t));
      } else if (is_op("(")) {
        ExprPtr call = make(Expr::Kind::kCall, e->pos);
        call->a = std::move(e);
        parse_call_args(*call);
        e = finish(std::move(call));
      } else {
        return e;
      }
    }
  }

  const std::string& src_;
  const std::string& where_;
  std::vector<Token> toks_;
  const TemplateLimits& lim_;
  std::size_t i_ = 0;
  int depth_ = 0;
  int loops_ = 0;
};

/// Parses a template. Throws TemplateError (location and what) for anything it refuses.
inline Program parse(const std::string& source, const std::string& where, const TemplateLimits& lim) {
  if (source.size() > lim.max_source_bytes)
    throw TemplateError(msg(where, ": template of ", source.size(), " bytes exceeds the limit of ",
                            lim.max_source_bytes));
  Program prog;
  prog.source = source;
  prog.where = where;
  Parser parser(prog.source, prog.where, Lexer(prog.source, prog.where).run(), lim);
  prog.body = parser.parse_template();
  return prog;
}

// ---------------------------------------------------------------- rendering

/// Bytes append_json_string(out, s) appends, without building them.
inline std::uint64_t json_string_size(const std::string& s) {
  std::uint64_t n = 2;
  for (unsigned char c : s)
    n += (c == '"' || c == '\\' || c == '\n' || c == '\r' || c == '\t' || c == '\b' || c == '\f') ? 2 : c < 0x20 ? 6 : 1;
  return n;
}

/// Python's repr() of a float: the shortest digits that read back as the same
/// double, in positional notation for exponents in [-4, 16), else as d.ddde+XX.
inline std::string float_repr(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[48];
  for (int prec = 0; prec <= 16; ++prec) {
    std::snprintf(buf, sizeof buf, "%.*e", prec, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  // buf = [-]d[.ddd]e[+-]XX
  std::string m = buf;
  std::string sign;
  if (m[0] == '-') {
    sign = "-";
    m.erase(0, 1);
  }
  const std::size_t epos = m.find('e');
  const int exp = std::atoi(m.c_str() + epos + 1);
  std::string digits;
  for (std::size_t k = 0; k < epos; ++k)
    if (m[k] != '.') digits += m[k];
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  std::string out;
  if (exp >= -4 && exp < 16) {
    if (exp >= 0) {
      const auto int_len = static_cast<std::size_t>(exp) + 1;
      std::string ip = digits.substr(0, std::min(int_len, digits.size()));
      ip.append(int_len - ip.size(), '0');
      const std::string frac = digits.size() > int_len ? digits.substr(int_len) : "0";
      out = ip + "." + frac;
    } else {
      out = "0." + std::string(static_cast<std::size_t>(-exp - 1), '0') + digits;
    }
  } else {
    out = digits.substr(0, 1) + (digits.size() > 1 ? "." + digits.substr(1) : std::string());
    char e[16];
    std::snprintf(e, sizeof e, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    out += e;
  }
  return sign + out;
}

/// The quote Python's repr() puts around s: single unless s holds ' and no ".
inline char repr_quote(const std::string& s) {
  return (s.find('\'') != std::string::npos && s.find('"') == std::string::npos) ? '"' : '\'';
}

/// Bytes append_string_repr(out, s) appends, without building them.
inline std::uint64_t string_repr_size(const std::string& s) {
  const char q = repr_quote(s);
  std::uint64_t n = 2;
  for (unsigned char c : s)
    n += (c == '\\' || c == static_cast<unsigned char>(q) || c == '\n' || c == '\r' || c == '\t') ? 2
         : (c < 0x20 || c == 0x7F)                                                          ? 4
                                                                                            : 1;
  return n;
}

/// Appends Python's repr() of a string: single quotes unless it holds ' and no ".
inline void append_string_repr(std::string& out, const std::string& s) {
  const char q = repr_quote(s);
  out += q;
  for (unsigned char c : s) {
    if (c == '\\') out += "\\\\";
    else if (c == static_cast<unsigned char>(q)) { out += '\\'; out += static_cast<char>(c); }
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (c < 0x20 || c == 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else out += static_cast<char>(c);
  }
  out += q;
}

class Renderer {
 public:
  Renderer(const Program& prog, const TemplateLimits& lim) : prog_(prog), lim_(lim) {}

  std::string run(const std::vector<std::pair<std::string, Value>>& globals) {
    scopes_.emplace_back();
    for (const auto& kv : globals) scopes_.back()[kv.first] = kv.second;
    exec_body(prog_.body, out_);
    return std::move(out_);
  }

 private:
  enum class Flow { kNormal, kBreak, kContinue };

  [[noreturn]] void fail(std::size_t pos, const std::string& what) const {
    throw template_error(prog_.source, prog_.where, pos, what);
  }
  void step(std::size_t pos) {
    if (++steps_ > lim_.max_steps) fail(pos, msg("rendering exceeds the limit of ", lim_.max_steps, " steps"));
  }
  // Work proportional to `units` (bytes read by a search, comparison, strip, length or
  // case test; repetitions of a `*`), charged before it is done: one step per
  // kUnitsPerStep, so a loop over long strings runs out of steps as a loop of
  // expressions would.
  static constexpr std::uint64_t kUnitsPerStep = 16;
  void work(std::uint64_t units, std::size_t pos) {
    const std::uint64_t budget = lim_.max_steps - std::min(steps_, lim_.max_steps);
    const std::uint64_t total = units / kUnitsPerStep + (units_ + units % kUnitsPerStep) / kUnitsPerStep;
    if (total > budget) fail(pos, msg("rendering exceeds the limit of ", lim_.max_steps, " steps"));
    steps_ += total;
    units_ = (units_ + units % kUnitsPerStep) % kUnitsPerStep;
  }
  // Bytes of values about to be built, charged before they are allocated.
  void charge(std::uint64_t bytes, std::size_t pos) {
    if (bytes > lim_.max_built_bytes - std::min(built_, lim_.max_built_bytes))
      fail(pos, msg("rendering builds more than the limit of ", lim_.max_built_bytes, " bytes of values"));
    built_ += bytes;
  }
  // a * b and a + b, saturating, for sizes checked against a limit.
  static std::uint64_t times(std::uint64_t a, std::uint64_t b) {
    std::uint64_t r = 0;
    return __builtin_mul_overflow(a, b, &r) ? std::numeric_limits<std::uint64_t>::max() : r;
  }
  static std::uint64_t plus(std::uint64_t a, std::uint64_t b) {
    std::uint64_t r = 0;
    return __builtin_add_overflow(a, b, &r) ? std::numeric_limits<std::uint64_t>::max() : r;
  }
  // The text of v as str() gives it, without copying a string: v's own bytes, or the
  // repr built (and charged) into tmp.
  const std::string& text_of(const Value& v, std::string& tmp, std::size_t pos) {
    if (v.kind == Value::Kind::kString) return v.str();
    tmp.clear();
    if (v.kind != Value::Kind::kUndefined) tmp = repr(v, pos);
    return tmp;
  }
  // Code point offsets of s (utf8_offsets), charged before they are allocated.
  std::vector<std::size_t> offsets(const std::string& s, std::size_t pos) {
    charge((s.size() + 1) * sizeof(std::size_t), pos);
    return utf8_offsets(s);
  }
  // A small string (a code point, a date), charged once built.
  Value make_string(std::string s, std::size_t pos) {
    charge(s.size() + 16, pos);
    return Value::string(std::move(s));
  }
  // What a dict of n items costs besides its keys' bytes, charged before it is built:
  // its items and, past ValueDict::kLinearKeys, its hash index.
  static std::uint64_t dict_bytes(std::uint64_t n) {
    return times(n + 1, sizeof(Value) + 32) + (n > ValueDict::kLinearKeys ? times(n, 64) : 0);
  }
  // Values nest at most value_limit() deep; as namespaces cannot hold namespaces (so no
  // cycles), every value is then at most 2 * value_limit() + 2 deep, which bounds the
  // recursion of repr, tojson, comparison and destruction.
  int value_limit() const { return 4 * lim_.max_depth; }
  int walk_limit() const { return 2 * value_limit() + 2; }
  Value checked_depth(Value v, std::size_t pos) const {
    if (v.depth > static_cast<std::uint32_t>(value_limit()))
      fail(pos, msg("value nested deeper than the limit of ", value_limit()));
    return v;
  }

  // ---- statements
  Flow exec_body(const NodeList& body, std::string& out) {
    for (const auto& n : body) {
      const Flow f = exec(*n, out);
      if (f != Flow::kNormal) return f;
    }
    return Flow::kNormal;
  }

  // Appends to the output, or to a {% set %} block's capture, whose bytes are values
  // and so are charged before they are appended.
  void emit(std::string& out, const std::string& s, std::size_t pos) {
    if (out.size() + s.size() > lim_.max_output_bytes)
      fail(pos, msg("output exceeds the limit of ", lim_.max_output_bytes, " bytes"));
    if (&out != &out_) charge(s.size(), pos);
    out += s;
  }

  Flow exec(const Node& n, std::string& out) {
    step(n.pos);
    switch (n.kind) {
      case Node::Kind::kText: emit(out, n.text, n.pos); return Flow::kNormal;
      case Node::Kind::kOutput: {
        const Value v = eval(*n.expr);
        std::string tmp;
        emit(out, text_of(v, tmp, n.pos), n.pos);
        return Flow::kNormal;
      }
      case Node::Kind::kIf:
        for (std::size_t k = 0; k < n.bodies.size(); ++k)
          if (k >= n.conds.size() || truthy(eval(*n.conds[k]))) return exec_body(n.bodies[k], out);
        return Flow::kNormal;
      case Node::Kind::kFor: return exec_for(n, out);
      case Node::Kind::kSet: scopes_.back()[n.text] = eval(*n.expr); return Flow::kNormal;
      case Node::Kind::kSetAttr: {
        Value* target = lookup(n.text);
        if (!target || target->kind != Value::Kind::kNamespace)
          fail(n.pos, msg("{% set ", n.text, ".", n.attr, " %}: '", n.text, "' is ",
                          target ? kind_name(*target) : "undefined", ", not a namespace()"));
        Value v = eval(*n.expr);
        if (v.has_ns) fail(n.pos, msg("{% set ", n.text, ".", n.attr, " %}: a namespace cannot hold a namespace"));
        target->dict->set(n.attr, std::move(v));
        return Flow::kNormal;
      }
      case Node::Kind::kSetBlock: {
        std::string captured;
        scopes_.emplace_back();
        exec_body(n.bodies[0], captured);
        scopes_.pop_back();
        scopes_.back()[n.text] = Value::string(std::move(captured));  // charged as it grew
        return Flow::kNormal;
      }
      case Node::Kind::kBreak: return Flow::kBreak;
      case Node::Kind::kContinue: return Flow::kContinue;
      case Node::Kind::kBlock: return exec_body(n.bodies[0], out);
    }
    return Flow::kNormal;
  }

  // The items a for loop (or a filter) walks: a list's elements, a dict's keys, a
  // string's code points; undefined walks nothing.
  std::shared_ptr<const ValueList> iterate(const Value& v, std::size_t pos) {
    switch (v.kind) {
      case Value::Kind::kList: return v.list;
      case Value::Kind::kUndefined: return std::make_shared<const ValueList>();
      case Value::Kind::kDict: case Value::Kind::kNamespace: {
        std::uint64_t bytes = 16;
        for (const auto& kv : v.dict->items) bytes += sizeof(Value) + 32 + kv.first.size();
        charge(bytes, pos);
        ValueList keys;
        keys.reserve(v.dict->items.size());
        for (const auto& kv : v.dict->items) keys.push_back(Value::string(kv.first));
        return std::make_shared<const ValueList>(std::move(keys));
      }
      case Value::Kind::kString: {
        ValueList chars;
        const std::string& s = v.str();
        charge(s.size() * (sizeof(Value) + 32), pos);  // before building: at most one item per byte
        for (std::size_t k = 0; k < s.size();) {
          const std::size_t len = utf8_len_at(s, k);
          chars.push_back(Value::string(s.substr(k, len)));
          k += len;
        }
        return std::make_shared<const ValueList>(std::move(chars));
      }
      default: fail(pos, msg("cannot iterate over ", a_kind(v)));
    }
  }

  void bind_targets(const Node& n, const Value& item, std::unordered_map<std::string, Value>& scope) {
    if (n.targets.size() == 1) {
      scope[n.targets[0]] = item;
      return;
    }
    if (item.kind != Value::Kind::kList || item.list->size() != n.targets.size())
      fail(n.pos, msg("cannot unpack ", a_kind(item),
                      item.kind == Value::Kind::kList ? msg(" of ", item.list->size(), " items") : std::string(),
                      " into ", n.targets.size(), " loop variables"));
    for (std::size_t k = 0; k < n.targets.size(); ++k) scope[n.targets[k]] = (*item.list)[k];
  }

  Flow exec_for(const Node& n, std::string& out) {
    std::shared_ptr<const ValueList> items = iterate(eval(*n.expr), n.pos);
    if (n.filter) {  // {% for x in xs if cond %}: the loop sees only the items kept
      ValueList kept;
      for (const Value& item : *items) {
        count_iteration(n.pos);
        scopes_.emplace_back();
        bind_targets(n, item, scopes_.back());
        const bool keep = truthy(eval(*n.filter));
        scopes_.pop_back();
        if (keep) {
          charge(sizeof(Value), n.pos);
          kept.push_back(item);
        }
      }
      items = std::make_shared<const ValueList>(std::move(kept));
    }
    const std::int64_t len = static_cast<std::int64_t>(items->size());
    if (len == 0) return n.bodies.size() > 1 ? exec_body(n.bodies[1], out) : Flow::kNormal;
    for (std::int64_t k = 0; k < len; ++k) {
      count_iteration(n.pos);
      charge(sizeof(ValueDict) + 9 * sizeof(Value), n.pos);
      scopes_.emplace_back();
      auto loop = std::make_shared<ValueDict>();
      loop->items = {{"index", Value::integer(k + 1)},
                     {"index0", Value::integer(k)},
                     {"revindex", Value::integer(len - k)},
                     {"revindex0", Value::integer(len - k - 1)},
                     {"first", Value::boolean(k == 0)},
                     {"last", Value::boolean(k == len - 1)},
                     {"length", Value::integer(len)},
                     {"previtem", k > 0 ? (*items)[static_cast<std::size_t>(k - 1)] : Value()},
                     {"nextitem", k + 1 < len ? (*items)[static_cast<std::size_t>(k + 1)] : Value()}};
      scopes_.back()["loop"] = Value::of_dict(std::move(loop));
      bind_targets(n, (*items)[static_cast<std::size_t>(k)], scopes_.back());
      const Flow f = exec_body(n.bodies[0], out);
      scopes_.pop_back();
      if (f == Flow::kBreak) break;
    }
    return Flow::kNormal;
  }

  void count_iteration(std::size_t pos) {
    if (++iterations_ > lim_.max_loop_iterations)
      fail(pos, msg("loops exceed the limit of ", lim_.max_loop_iterations, " iterations"));
    step(pos);
  }

  Value* lookup(const std::string& name) {
    for (auto s = scopes_.rbegin(); s != scopes_.rend(); ++s) {
      auto it = s->find(name);
      if (it != s->end()) return &it->second;
    }
    return nullptr;
  }

  // ---- value semantics
  static bool truthy(const Value& v) {
    switch (v.kind) {
      case Value::Kind::kUndefined: case Value::Kind::kNone: return false;
      case Value::Kind::kBool: return v.b;
      case Value::Kind::kInt: return v.i != 0;
      case Value::Kind::kFloat: return v.f != 0;
      case Value::Kind::kString: return !v.s->empty();
      case Value::Kind::kList: return !v.list->empty();
      case Value::Kind::kDict: return !v.dict->items.empty();
      default: return true;
    }
  }

  // repr() and tojson walk a value twice: first into a SizeSink, which counts the
  // bytes and charges the walk's steps and work, then (the size charged) into a string
  // reserved to that size, so no growth of the text ever passes what was charged.
  struct SizeSink {
    std::uint64_t n = 0;
  };
  static constexpr bool sizing(const SizeSink&) { return true; }
  static constexpr bool sizing(const std::string&) { return false; }
  static void put(SizeSink& out, const std::string& piece) { out.n += piece.size(); }
  static void put(std::string& out, const std::string& piece) { out += piece; }
  static void put_spaces(SizeSink& out, std::size_t n) { out.n += n; }
  static void put_spaces(std::string& out, std::size_t n) { out.append(n, ' '); }
  static void put_repr(SizeSink& out, const std::string& s) { out.n += string_repr_size(s); }
  static void put_repr(std::string& out, const std::string& s) { append_string_repr(out, s); }
  static void put_json(SizeSink& out, const std::string& s) { out.n += json_string_size(s); }
  static void put_json(std::string& out, const std::string& s) { append_json_string(out, s); }
  static std::uint64_t size_of(const SizeSink& out) { return out.n; }
  static std::uint64_t size_of(const std::string& out) { return out.size(); }

  // Python's repr() of v (str() of a container), sized and charged before it is built.
  std::string repr(const Value& v, std::size_t pos) {
    SizeSink size;
    repr_into(v, size, pos, 0);
    charge(size.n + 16, pos);
    std::string out;
    out.reserve(static_cast<std::size_t>(size.n));
    repr_into(v, out, pos, 0);
    return out;
  }
  template <class Out>
  void repr_into(const Value& v, Out& out, std::size_t pos, int depth) {
    if (depth > walk_limit()) fail(pos, msg("value nested deeper than the limit of ", walk_limit()));
    switch (v.kind) {
      case Value::Kind::kUndefined: return;
      case Value::Kind::kNone: put(out, "None"); return;
      case Value::Kind::kBool: put(out, v.b ? "True" : "False"); return;
      case Value::Kind::kInt: put(out, std::to_string(v.i)); return;
      case Value::Kind::kFloat: put(out, float_repr(v.f)); return;
      case Value::Kind::kString:
        if (sizing(out)) work(v.str().size(), pos);
        put_repr(out, v.str());
        return;
      case Value::Kind::kFunction: put(out, "<function " + v.str() + ">"); return;
      case Value::Kind::kList: {
        put(out, "[");
        for (std::size_t k = 0; k < v.list->size(); ++k) {
          if (sizing(out)) step(pos);
          if (k) put(out, ", ");
          repr_into((*v.list)[k], out, pos, depth + 1);
        }
        put(out, "]");
        return;
      }
      case Value::Kind::kDict: case Value::Kind::kNamespace: {
        put(out, v.kind == Value::Kind::kNamespace ? "<Namespace {" : "{");
        bool first = true;
        for (const auto& kv : v.dict->items) {
          if (sizing(out)) {
            step(pos);
            work(kv.first.size(), pos);
          }
          if (!first) put(out, ", ");
          first = false;
          put_repr(out, kv.first);
          put(out, ": ");
          repr_into(kv.second, out, pos, depth + 1);
        }
        put(out, v.kind == Value::Kind::kNamespace ? "}>" : "}");
        return;
      }
    }
  }

  // Python's json.dumps(v, ensure_ascii=False), as transformers' tojson calls it,
  // sized and charged before it is built.
  std::string tojson(const Value& v, int indent, std::size_t pos) {
    SizeSink size;
    to_json(v, indent, 0, size, pos);
    charge(size.n + 16, pos);
    std::string out;
    out.reserve(static_cast<std::size_t>(size.n));
    to_json(v, indent, 0, out, pos);
    return out;
  }
  template <class Out>
  void to_json(const Value& v, int indent, int level, Out& out, std::size_t pos) {
    if (level > walk_limit()) fail(pos, msg("value nested deeper than the limit of ", walk_limit()));
    if (sizing(out)) step(pos);
    if (size_of(out) > lim_.max_output_bytes)
      fail(pos, msg("tojson output exceeds the limit of ", lim_.max_output_bytes, " bytes"));
    auto newline = [&](int lvl) {
      if (indent < 0) return;
      put(out, "\n");
      put_spaces(out, static_cast<std::size_t>(indent) * static_cast<std::size_t>(lvl));
    };
    auto json_string = [&](const std::string& x) {
      if (sizing(out)) work(x.size(), pos);
      put_json(out, x);
    };
    const char* item_sep = indent < 0 ? ", " : ",";
    switch (v.kind) {
      case Value::Kind::kUndefined: fail(pos, "tojson: an undefined value is not JSON serializable");
      case Value::Kind::kNone: put(out, "null"); return;
      case Value::Kind::kBool: put(out, v.b ? "true" : "false"); return;
      case Value::Kind::kInt: put(out, std::to_string(v.i)); return;
      case Value::Kind::kFloat:
        put(out, std::isnan(v.f) ? "NaN" : std::isinf(v.f) ? (v.f > 0 ? "Infinity" : "-Infinity") : float_repr(v.f));
        return;
      case Value::Kind::kFunction: fail(pos, "tojson: a function is not JSON serializable");
      case Value::Kind::kString: json_string(v.str()); return;
      case Value::Kind::kList: {
        if (v.list->empty()) {
          put(out, "[]");
          return;
        }
        put(out, "[");
        for (std::size_t k = 0; k < v.list->size(); ++k) {
          if (k) put(out, item_sep);
          newline(level + 1);
          to_json((*v.list)[k], indent, level + 1, out, pos);
        }
        newline(level);
        put(out, "]");
        return;
      }
      case Value::Kind::kDict: case Value::Kind::kNamespace: {
        if (v.dict->items.empty()) {
          put(out, "{}");
          return;
        }
        put(out, "{");
        bool first = true;
        for (const auto& kv : v.dict->items) {
          if (!first) put(out, item_sep);
          first = false;
          newline(level + 1);
          if (sizing(out)) step(pos);
          json_string(kv.first);
          put(out, ": ");
          to_json(kv.second, indent, level + 1, out, pos);
        }
        newline(level);
        put(out, "}");
        return;
      }
    }
  }

  bool equal(const Value& x, const Value& y, std::size_t pos, int depth = 0) {
    if (depth > walk_limit()) fail(pos, msg("value nested deeper than the limit of ", walk_limit()));
    if (x.is_number() && y.is_number()) {
      if (x.is_integer() && y.is_integer()) return x.as_int() == y.as_int();
      return x.as_double() == y.as_double();
    }
    if (x.kind != y.kind) return false;
    switch (x.kind) {
      case Value::Kind::kUndefined: case Value::Kind::kNone: return true;
      case Value::Kind::kString:
        if (x.str().size() != y.str().size()) return false;
        work(x.str().size(), pos);
        return x.str() == y.str();
      case Value::Kind::kFunction: return x.str() == y.str();
      case Value::Kind::kList:
        if (x.list->size() != y.list->size()) return false;
        for (std::size_t k = 0; k < x.list->size(); ++k) {
          step(pos);
          if (!equal((*x.list)[k], (*y.list)[k], pos, depth + 1)) return false;
        }
        return true;
      case Value::Kind::kDict: case Value::Kind::kNamespace:
        if (x.dict == y.dict) return true;
        if (x.dict->items.size() != y.dict->items.size()) return false;
        for (const auto& kv : x.dict->items) {
          step(pos);
          work(kv.first.size(), pos);
          const Value* o = y.dict->find(kv.first);
          if (!o || !equal(kv.second, *o, pos, depth + 1)) return false;
        }
        return true;
      default: return false;
    }
  }

  // <0, 0, >0 for ordered comparison; TemplateError for values Python cannot order.
  int order(const Value& x, const Value& y, std::size_t pos, int depth = 0) {
    if (depth > walk_limit()) fail(pos, msg("value nested deeper than the limit of ", walk_limit()));
    if (x.is_number() && y.is_number()) {
      if (x.is_integer() && y.is_integer()) return x.as_int() < y.as_int() ? -1 : x.as_int() > y.as_int() ? 1 : 0;
      const double a = x.as_double(), b = y.as_double();
      return a < b ? -1 : a > b ? 1 : 0;
    }
    if (x.kind == Value::Kind::kString && y.kind == Value::Kind::kString) {
      work(std::min(x.str().size(), y.str().size()), pos);
      const int c = x.str().compare(y.str());  // byte order of UTF-8 = code point order
      return c < 0 ? -1 : c > 0 ? 1 : 0;
    }
    if (x.kind == Value::Kind::kList && y.kind == Value::Kind::kList) {
      const std::size_t n = std::min(x.list->size(), y.list->size());
      for (std::size_t k = 0; k < n; ++k) {
        step(pos);
        const int c = order((*x.list)[k], (*y.list)[k], pos, depth + 1);
        if (c != 0) return c;
      }
      return x.list->size() < y.list->size() ? -1 : x.list->size() > y.list->size() ? 1 : 0;
    }
    fail(pos, msg("cannot order ", a_kind(x), " and ", a_kind(y)));
  }

  // A needle for searching `hay`, with the whole search charged first: its table's
  // memory, and as work three units per hay byte (read at most twice, and skipped to
  // with memchr) and two per needle byte (its table), whatever it finds.
  Needle search(const std::string& hay, const std::string& needle, std::size_t pos) {
    work(plus(times(3, hay.size()), times(2, needle.size())), pos);
    charge(times(needle.size(), sizeof(std::uint32_t)), pos);
    return Needle(needle);
  }

  bool contains(const Value& hay, const Value& needle, std::size_t pos) {
    switch (hay.kind) {
      case Value::Kind::kString:
        if (needle.kind != Value::Kind::kString)
          fail(pos, msg("'in <string>' needs a string on the left, not ", a_kind(needle)));
        return search(hay.str(), needle.str(), pos).find(hay.str(), 0) != std::string::npos;
      case Value::Kind::kList:
        for (const Value& x : *hay.list) {
          step(pos);
          if (equal(x, needle, pos)) return true;
        }
        return false;
      case Value::Kind::kDict: case Value::Kind::kNamespace:
        if (needle.kind != Value::Kind::kString) return false;
        work(needle.str().size(), pos);  // hashing the key
        return hay.dict->find(needle.str()) != nullptr;
      case Value::Kind::kUndefined: return false;
      default: fail(pos, msg("'in' needs a string, list or dict on the right, not ", a_kind(hay)));
    }
  }

  // a op b, or TemplateError on overflow (Python's integers are unbounded; ours are 64-bit).
  std::int64_t checked(char op, std::int64_t a, std::int64_t b, std::size_t pos) {
    std::int64_t r = 0;
    const bool overflow = op == '+' ? __builtin_add_overflow(a, b, &r)
                          : op == '-' ? __builtin_sub_overflow(a, b, &r)
                                      : __builtin_mul_overflow(a, b, &r);
    if (overflow) fail(pos, "integer overflow (results are limited to 64 bits)");
    return r;
  }

  Value arith(const std::string& op, const Value& x, const Value& y, std::size_t pos) {
    if (op == "+") {
      if (x.kind == Value::Kind::kString && y.kind == Value::Kind::kString) {
        charge(x.str().size() + y.str().size() + 16, pos);  // before building it
        return Value::string(x.str() + y.str());
      }
      if (x.kind == Value::Kind::kList && y.kind == Value::Kind::kList) {
        charge((x.list->size() + y.list->size()) * sizeof(Value) + 16, pos);
        ValueList l;
        l.reserve(x.list->size() + y.list->size());
        l.insert(l.end(), x.list->begin(), x.list->end());
        l.insert(l.end(), y.list->begin(), y.list->end());
        return checked_depth(Value::of_list(std::move(l)), pos);
      }
    }
    if (op == "*") {  // repetition: 'ab' * 3, [x] * 3
      const Value* seq = x.is_integer() ? &y : &x;
      const Value* cnt = x.is_integer() ? &x : &y;
      if ((seq->kind == Value::Kind::kString || seq->kind == Value::Kind::kList) && cnt->is_integer()) {
        // Checked before anything is built: the result's size against the bytes left,
        // then the count (whatever the unit, an empty one too) as work.
        const auto n = static_cast<std::uint64_t>(std::max<std::int64_t>(0, cnt->as_int()));
        const std::uint64_t unit = seq->kind == Value::Kind::kString ? seq->str().size() : seq->list->size() * sizeof(Value);
        if (unit > 0 && n > (lim_.max_built_bytes - std::min(built_, lim_.max_built_bytes)) / unit)
          fail(pos, msg("repetition builds more than the limit of ", lim_.max_built_bytes, " bytes of values"));
        work(n, pos);
        charge(n * unit + 16, pos);
        if (unit == 0) return seq->kind == Value::Kind::kString ? Value::string("") : Value::of_list({});
        if (seq->kind == Value::Kind::kString) {  // doubled in place: log(n) copies, not n
          const std::size_t total = static_cast<std::size_t>(n * unit);
          std::string s;
          s.reserve(total);
          if (n > 0) s = seq->str();
          while (s.size() < total) s.append(s.data(), std::min(s.size(), total - s.size()));
          return Value::string(std::move(s));
        }
        ValueList l;
        l.reserve(static_cast<std::size_t>(n * seq->list->size()));
        for (std::uint64_t k = 0; k < n; ++k) l.insert(l.end(), seq->list->begin(), seq->list->end());
        return checked_depth(Value::of_list(std::move(l)), pos);
      }
    }
    if (op == "%" && x.kind == Value::Kind::kString)
      fail(pos, "unsupported construct: printf-style string formatting ('...' % value)");
    if (!x.is_number() || !y.is_number())
      fail(pos, msg("cannot apply '", op, "' to ", a_kind(x), " and ", a_kind(y)));
    const bool ints = x.is_integer() && y.is_integer();
    if (op == "/") {
      if (y.as_double() == 0) fail(pos, "division by zero");
      return Value::number(x.as_double() / y.as_double());
    }
    if (ints) {
      const std::int64_t a = x.as_int(), b = y.as_int();
      if (op == "+" || op == "-" || op == "*") return Value::integer(checked(op[0], a, b, pos));
      if (op == "//" || op == "%") {  // Python: floor division, remainder with the divisor's sign
        if (b == 0) fail(pos, op == "%" ? "modulo by zero" : "division by zero");
        if (a == std::numeric_limits<std::int64_t>::min() && b == -1) {
          if (op == "%") return Value::integer(0);
          fail(pos, "integer overflow (results are limited to 64 bits)");
        }
        std::int64_t q = a / b, m = a % b;
        if (m != 0 && ((m < 0) != (b < 0))) {
          q -= 1;
          m += b;
        }
        return Value::integer(op == "//" ? q : m);
      }
      if (op == "**") {
        if (b < 0) return Value::number(std::pow(static_cast<double>(a), static_cast<double>(b)));
        std::int64_t result = 1, base = a;
        for (std::int64_t e = b; e > 0; e >>= 1) {
          if (e & 1) result = checked('*', result, base, pos);
          if (e > 1) base = checked('*', base, base, pos);
        }
        return Value::integer(result);
      }
    }
    const double a = x.as_double(), b = y.as_double();
    if (op == "+") return Value::number(a + b);
    if (op == "-") return Value::number(a - b);
    if (op == "*") return Value::number(a * b);
    if (op == "**") return Value::number(std::pow(a, b));
    if (b == 0) fail(pos, op == "%" ? "modulo by zero" : "division by zero");
    if (op == "//") return Value::number(std::floor(a / b));
    double m = std::fmod(a, b);
    if (m != 0 && ((m < 0) != (b < 0))) m += b;
    return Value::number(m);
  }

  // The items a slice selects: start, start + step, ... (count of them).
  struct Slice {
    std::int64_t start, step;
    std::uint64_t count;
    std::size_t at(std::uint64_t k) const {  // k < count, so k * |step| < n: no overflow
      return static_cast<std::size_t>(start + static_cast<std::int64_t>(k) * step);
    }
  };
  // Python slice semantics over n items, without listing the indices.
  Slice slice_indices(std::int64_t n, const Expr& e) {
    auto get = [&](const ExprPtr& p, bool& given) -> std::int64_t {
      given = false;
      if (!p) return 0;
      const Value v = eval(*p);
      if (v.kind == Value::Kind::kNone) return 0;
      if (!v.is_integer()) fail(p->pos, msg("slice bounds must be integers or none, not ", a_kind(v)));
      given = true;
      return v.as_int();
    };
    bool has_start, has_stop, has_step;
    const std::int64_t start_v = get(e.b, has_start), stop_v = get(e.c, has_stop);
    std::int64_t stp = get(e.d, has_step);
    if (!has_step) stp = 1;
    if (stp == 0) fail(e.pos, "slice step cannot be zero");
    auto clamp = [&](std::int64_t v, bool given, std::int64_t dflt) -> std::int64_t {
      if (!given) return dflt;
      if (v < 0) {
        v = v < -n ? -1 : v + n;
        if (v < 0) return stp < 0 ? -1 : 0;
        return v;
      }
      if (v >= n) return stp < 0 ? n - 1 : n;
      return v;
    };
    const std::int64_t start = clamp(start_v, has_start, stp < 0 ? n - 1 : 0);
    const std::int64_t stop = clamp(stop_v, has_stop, stp < 0 ? -1 : n);
    // Python's slice length; start and stop lie in [-1, n], so the span fits, and
    // |step| is taken without negating INT64_MIN.
    const std::int64_t span = stp > 0 ? stop - start : start - stop;
    const std::uint64_t by = stp > 0 ? static_cast<std::uint64_t>(stp) : static_cast<std::uint64_t>(-(stp + 1)) + 1;
    const std::uint64_t count = span > 0 ? (static_cast<std::uint64_t>(span) - 1) / by + 1 : 0;
    return {start, stp, count};
  }

  Value get_attr(const Value& obj, const std::string& name, const Expr& e) {
    if (obj.kind == Value::Kind::kUndefined)
      fail(e.pos, msg("cannot read attribute '", name, "' of an undefined value"));
    if (obj.is_mapping()) {
      work(name.size(), e.pos);  // hashing or comparing the key
      const Value* v = obj.dict->find(name);
      return v ? *v : Value();
    }
    return Value();
  }

  Value get_item(const Value& obj, const Value& key, const Expr& e) {
    if (obj.kind == Value::Kind::kUndefined) fail(e.pos, "cannot subscript an undefined value");
    if (obj.is_mapping()) {
      if (key.kind != Value::Kind::kString) return Value();
      return get_attr(obj, key.str(), e);
    }
    if ((obj.kind == Value::Kind::kList || obj.kind == Value::Kind::kString) && key.is_integer()) {
      std::int64_t k = key.as_int();
      if (obj.kind == Value::Kind::kList) {
        const auto n = static_cast<std::int64_t>(obj.list->size());
        if (k < 0) k += n;
        if (k < 0 || k >= n) return Value();
        return (*obj.list)[static_cast<std::size_t>(k)];
      }
      const std::string& str = obj.str();  // walked, not indexed: no table of offsets
      work(times(2, str.size()), e.pos);
      if (k < 0) k += static_cast<std::int64_t>(utf8_count(str));
      if (k < 0) return Value();
      std::size_t at = 0;
      for (; at < str.size() && k > 0; --k) at += utf8_len_at(str, at);
      if (at >= str.size()) return Value();
      return make_string(str.substr(at, utf8_len_at(str, at)), e.pos);
    }
    if (obj.kind == Value::Kind::kString && key.kind == Value::Kind::kString) return Value();  // a method, unsupported as a value
    return Value();
  }

  // ---- calls
  struct Args {
    std::vector<Value> pos;
    std::vector<std::pair<std::string, Value>> kw;
    const Value* find(const char* name) const {
      for (const auto& kv : kw)
        if (kv.first == name) return &kv.second;
      return nullptr;
    }
  };
  Args eval_args(const Expr& e) {
    Args a;
    for (const auto& x : e.args) a.pos.push_back(eval(*x));
    for (std::size_t k = 0; k < e.kw_names.size(); ++k) a.kw.emplace_back(e.kw_names[k], eval(*e.kw_values[k]));
    return a;
  }
  // Argument `k` (positional index or keyword), or nullptr.
  static const Value* arg(const Args& a, std::size_t k, const char* name) {
    if (k < a.pos.size()) return &a.pos[k];
    return a.find(name);
  }
  void check_arity(const Args& a, std::size_t max_pos, const std::vector<const char*>& names, const std::string& what,
                   std::size_t pos) {
    if (a.pos.size() > max_pos) fail(pos, msg(what, " takes at most ", max_pos, " positional arguments, got ", a.pos.size()));
    for (const auto& kv : a.kw) {
      bool ok = false;
      for (const char* n : names) ok = ok || kv.first == n;
      if (!ok) fail(pos, msg(what, " has no argument '", kv.first, "'"));
    }
  }
  const std::string& want_string(const Value* v, const std::string& what, std::size_t pos) {
    if (!v || v->kind != Value::Kind::kString)
      fail(pos, msg(what, " needs a string, got ", v ? kind_name(*v) : "nothing"));
    return v->str();
  }

  // Bounds [b, e) of s without its leading (left) and trailing (right) code points in
  // `chars` (Python's whitespace when chars is absent or none). Only the bytes stripped
  // are read, and each is looked up in a table of chars built once: a bitmap of its
  // one-byte units, a sorted list of its longer ones (sorting charged as m log m).
  std::pair<std::size_t, std::size_t> strip_bounds(const std::string& s, const Value* chars, bool left, bool right,
                                                   std::size_t pos) {
    std::uint64_t bytes[4] = {0, 0, 0, 0};
    std::vector<std::uint32_t> wide;
    const bool spaces = !chars || chars->kind == Value::Kind::kNone;
    if (!spaces) {
      const std::string& cs = want_string(chars, "strip characters", pos);
      work(cs.size(), pos);
      charge(times(cs.size() / 2, sizeof(std::uint32_t)), pos);  // at most one wide unit per 2 bytes
      for (std::size_t i = 0; i < cs.size();) {
        const auto c = static_cast<unsigned char>(cs[i]);
        const std::size_t len = c < 0x80 ? 1 : utf8_len_at(cs, i);
        if (len == 1) bytes[c >> 6] |= std::uint64_t{1} << (c & 63);
        else wide.push_back(unit_key(cs, i, len));
        i += len;
      }
      std::uint64_t log = 1;
      while ((std::uint64_t{1} << log) < wide.size()) ++log;
      work(times(wide.size(), log), pos);
      std::sort(wide.begin(), wide.end());
    }
    auto stripped = [&](std::size_t i, std::size_t len) {
      if (spaces) return is_py_space(s, i, len);
      const auto c = static_cast<unsigned char>(s[i]);
      if (len == 1) return ((bytes[c >> 6] >> (c & 63)) & 1) != 0;
      return std::binary_search(wide.begin(), wide.end(), unit_key(s, i, len));
    };
    std::size_t b = 0;
    if (left)
      while (b < s.size() && stripped(b, utf8_len_at(s, b))) b += utf8_len_at(s, b);
    std::size_t e = s.size();
    if (right)
      while (e > b) {
        const std::size_t u = utf8_unit_before(s, e);
        if (!stripped(u, e - u)) break;
        e = u;
      }
    work(b + (s.size() - e) + 8, pos);  // the bytes read: those stripped and one unit on each side
    step(pos);
    return {b, e};
  }

  // s stripped as strip_bounds says, charged before it is copied.
  Value strip(const std::string& s, const Value* chars, bool left, bool right, std::size_t pos) {
    const auto be = strip_bounds(s, chars, left, right, pos);
    charge(be.second - be.first + 16, pos);
    return Value::string(s.substr(be.first, be.second - be.first));
  }

  static std::string ascii_case(std::string s, bool upper) {  // simple ASCII case mapping
    for (char& c : s) {
      if (upper && c >= 'a' && c <= 'z') c = static_cast<char>(c - 32);
      if (!upper && c >= 'A' && c <= 'Z') c = static_cast<char>(c + 32);
    }
    return s;
  }

  Value split(const std::string& s, const Value* sep, const Value* maxsplit_v, std::size_t pos) {
    std::int64_t maxsplit = -1;
    if (maxsplit_v) {
      if (!maxsplit_v->is_integer()) fail(pos, "split: maxsplit must be an integer");
      maxsplit = maxsplit_v->as_int();
    }
    ValueList parts;
    auto add = [&](std::size_t at, std::size_t len) {  // each part charged before it is copied
      charge(len + sizeof(Value) + 32, pos);
      parts.push_back(Value::string(s.substr(at, len)));
    };
    if (!sep || sep->kind == Value::Kind::kNone) {  // runs of whitespace, none at the ends
      work(s.size(), pos);
      std::size_t k = 0;
      auto space = [&](std::size_t i) { return is_py_space(s, i, utf8_len_at(s, i)); };
      while (k < s.size()) {
        while (k < s.size() && space(k)) k += utf8_len_at(s, k);
        if (k >= s.size()) break;
        if (maxsplit >= 0 && static_cast<std::int64_t>(parts.size()) >= maxsplit) {
          add(k, s.size() - k);  // the rest, trailing whitespace included (as Python keeps it)
          break;
        }
        std::size_t j = k;
        while (j < s.size() && !space(j)) j += utf8_len_at(s, j);
        add(k, j - k);
        k = j;
      }
    } else {
      const std::string& d = want_string(sep, "split separator", pos);
      if (d.empty()) fail(pos, "split: empty separator");
      const Needle needle = search(s, d, pos);
      std::size_t at = 0;
      for (std::size_t hit; (maxsplit < 0 || static_cast<std::int64_t>(parts.size()) < maxsplit) &&
                            (hit = needle.find(s, at)) != std::string::npos;
           at = hit + d.size())
        add(at, hit - at);
      add(at, s.size() - at);
    }
    return Value::of_list(std::move(parts));
  }

  // s with `from` replaced by `to` (at most `count` times when count >= 0), sized
  // and charged before it is built.
  Value replace(const std::string& s, const std::string& from, const std::string& to, std::int64_t count,
                std::size_t pos) {
    const auto limit = count < 0 ? std::numeric_limits<std::uint64_t>::max() : static_cast<std::uint64_t>(count);
    std::string out;
    if (from.empty()) {  // Python inserts `to` before every code point and at the end
      work(s.size(), pos);
      const std::uint64_t inserts = std::min<std::uint64_t>(limit, utf8_count(s) + 1);
      charge(plus(s.size() + 16, times(inserts, to.size())), pos);
      work(times(inserts, to.size()), pos);
      out.reserve(static_cast<std::size_t>(s.size() + inserts * to.size()));
      std::uint64_t done = 0;
      for (std::size_t k = 0;; k += utf8_len_at(s, k)) {
        if (done < inserts) {
          out += to;
          ++done;
        }
        if (k >= s.size()) break;
        out.append(s, k, utf8_len_at(s, k));
      }
      return Value::string(std::move(out));
    }
    const Needle needle = search(s, from, pos);
    std::uint64_t hits = 0;
    for (std::size_t at = 0, hit; hits < limit && (hit = needle.find(s, at)) != std::string::npos; at = hit + from.size())
      ++hits;
    work(times(2, s.size()), pos);  // the second pass that builds the result
    const std::uint64_t size = plus(s.size() - hits * from.size(), times(hits, to.size()));
    charge(plus(size, 16), pos);
    out.reserve(static_cast<std::size_t>(size));
    std::size_t at = 0;
    for (std::uint64_t done = 0; done < hits; ++done) {
      const std::size_t hit = needle.find(s, at);
      out.append(s, at, hit - at);
      out += to;
      at = hit + from.size();
    }
    out.append(s, at, std::string::npos);
    return Value::string(std::move(out));
  }

  Value call_method(const Value& obj, const std::string& name, const Args& a, std::size_t pos) {
    const std::string what = msg(kind_name(obj), ".", name, "()");
    if (obj.kind == Value::Kind::kString) {
      const std::string& s = obj.str();
      if (name == "startswith" || name == "endswith") {
        check_arity(a, 1, {}, what, pos);
        const Value* p = arg(a, 0, "prefix");
        auto test = [&](const std::string& x) {
          if (x.size() > s.size()) return false;
          work(x.size(), pos);
          return name == "startswith" ? s.compare(0, x.size(), x) == 0 : s.compare(s.size() - x.size(), x.size(), x) == 0;
        };
        if (p && p->kind == Value::Kind::kList) {
          for (const Value& x : *p->list) {
            step(pos);
            if (test(want_string(&x, what, pos))) return Value::boolean(true);
          }
          return Value::boolean(false);
        }
        return Value::boolean(test(want_string(p, what, pos)));
      }
      if (name == "strip" || name == "lstrip" || name == "rstrip") {
        check_arity(a, 1, {"chars"}, what, pos);
        return strip(s, arg(a, 0, "chars"), name != "rstrip", name != "lstrip", pos);
      }
      if (name == "split") {
        check_arity(a, 2, {"sep", "maxsplit"}, what, pos);
        return split(s, arg(a, 0, "sep"), arg(a, 1, "maxsplit"), pos);
      }
      if (name == "replace") {
        check_arity(a, 3, {"count"}, what, pos);
        const Value* c = arg(a, 2, "count");
        if (c && !c->is_integer()) fail(pos, what + ": count must be an integer");
        return replace(s, want_string(arg(a, 0, "old"), what, pos), want_string(arg(a, 1, "new"), what, pos),
                       c ? c->as_int() : -1, pos);
      }
      if (name == "upper" || name == "lower") {
        check_arity(a, 0, {}, what, pos);
        charge(s.size() + 16, pos);
        return Value::string(ascii_case(s, name == "upper"));
      }
      if (name == "title" || name == "capitalize") {
        check_arity(a, 0, {}, what, pos);
        charge(s.size() + 16, pos);
        return Value::string(name == "title" ? title(s) : capitalize(s));
      }
      if (name == "find" || name == "count") {
        check_arity(a, 1, {}, what, pos);
        const std::string& x = want_string(arg(a, 0, "sub"), what, pos);
        if (x.empty() && name == "count") {
          work(s.size(), pos);
          return Value::integer(static_cast<std::int64_t>(utf8_count(s)) + 1);
        }
        const Needle needle = search(s, x, pos);
        if (name == "find") {
          const std::size_t hit = needle.find(s, 0);
          return Value::integer(hit == std::string::npos ? -1 : static_cast<std::int64_t>(utf8_count(s, hit)));
        }
        std::int64_t n = 0;
        for (std::size_t at = needle.find(s, 0); at != std::string::npos; at = needle.find(s, at + x.size())) ++n;
        return Value::integer(n);
      }
      if (name == "join") {
        check_arity(a, 1, {}, what, pos);
        const Value* l = arg(a, 0, "iterable");
        if (!l) fail(pos, what + " needs an iterable");
        return join(*iterate(*l, pos), s, pos, true);
      }
    } else if (obj.is_mapping()) {
      if (name == "get") {
        check_arity(a, 2, {}, what, pos);
        const Value* k = arg(a, 0, "key");
        if (!k) fail(pos, what + " needs a key");
        const Value* d = arg(a, 1, "default");
        if (k->kind == Value::Kind::kString) work(k->str().size(), pos);
        const Value* v = k->kind == Value::Kind::kString ? obj.dict->find(k->str()) : nullptr;
        return v ? *v : d ? *d : Value::none();
      }
      if (name == "items" || name == "keys" || name == "values") {
        check_arity(a, 0, {}, what, pos);
        return dict_view(obj, name, pos);
      }
      // A key holding a function (e.g. ns.f = raise_exception) is called like one.
      if (const Value* v = obj.dict->find(name); v && v->kind == Value::Kind::kFunction) return call_function(v->str(), a, pos);
    }
    fail(pos, msg("unknown method '", name, "' of ", a_kind(obj)));
  }

  Value dict_view(const Value& obj, const std::string& which, std::size_t pos) {
    std::uint64_t bytes = 16;
    for (const auto& kv : obj.dict->items)
      bytes += sizeof(Value) + (which == "values" ? 0 : kv.first.size() + 32) + (which == "items" ? 2 * sizeof(Value) + 48 : 0);
    charge(bytes, pos);
    ValueList out;
    out.reserve(obj.dict->items.size());
    for (const auto& kv : obj.dict->items) {
      if (which == "keys") out.push_back(Value::string(kv.first));
      else if (which == "values") out.push_back(kv.second);
      else out.push_back(Value::of_list({Value::string(kv.first), kv.second}));
    }
    return checked_depth(Value::of_list(std::move(out)), pos);
  }

  static std::string capitalize(const std::string& s) {
    std::string out = ascii_case(s, false);
    if (!out.empty() && out[0] >= 'a' && out[0] <= 'z') out[0] = static_cast<char>(out[0] - 32);
    return out;
  }
  static std::string title(const std::string& s) {
    std::string out = s;
    bool prev_alpha = false;
    for (char& c : out) {
      const bool lower = c >= 'a' && c <= 'z', upper = c >= 'A' && c <= 'Z';
      if (lower && !prev_alpha) c = static_cast<char>(c - 32);
      else if (upper && prev_alpha) c = static_cast<char>(c + 32);
      prev_alpha = lower || upper || (static_cast<unsigned char>(c) >= 0x80);
    }
    return out;
  }

  // Jinja's title filter: each word (after whitespace, '-', '(', '{', '[' or '<')
  // starts upper case, the rest lower case (str.title() instead starts a word after
  // any character that is not a letter).
  static std::string title_words(const std::string& s) {
    std::string out = s;
    bool start = true;
    for (char& c : out) {
      const bool sep = c == ' ' || (c >= '\t' && c <= '\r') || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
      if (sep) {
        start = true;
        continue;
      }
      if (start && c >= 'a' && c <= 'z') c = static_cast<char>(c - 32);
      else if (!start && c >= 'A' && c <= 'Z') c = static_cast<char>(c + 32);
      start = false;
    }
    return out;
  }

  // The items' texts joined by sep: a non-string item's repr is built (and charged)
  // first, then the whole result is sized and charged before it is built.
  Value join(const ValueList& items, const std::string& sep, std::size_t pos, bool strings_only) {
    std::vector<std::string> reprs;
    std::uint64_t size = 16;
    for (std::size_t k = 0; k < items.size(); ++k) {
      step(pos);
      if (strings_only && items[k].kind != Value::Kind::kString)
        fail(pos, msg("str.join() needs strings, item ", k, " is ", a_kind(items[k])));
      if (items[k].kind != Value::Kind::kString && items[k].kind != Value::Kind::kUndefined) {
        reprs.push_back(repr(items[k], pos));
        size = plus(size, reprs.back().size());
      } else if (items[k].kind == Value::Kind::kString) {
        size = plus(size, items[k].str().size());
      }
      if (k) size = plus(size, sep.size());
    }
    charge(size, pos);
    std::string out;
    out.reserve(static_cast<std::size_t>(size - 16));
    std::size_t r = 0;
    for (std::size_t k = 0; k < items.size(); ++k) {
      if (k) out += sep;
      if (items[k].kind == Value::Kind::kString) out += items[k].str();
      else if (items[k].kind != Value::Kind::kUndefined) out += reprs[r++];
    }
    return Value::string(std::move(out));
  }

  Value call_function(const std::string& name, const Args& a, std::size_t pos) {
    if (name == "raise_exception") {
      const Value* m = arg(a, 0, "message");
      std::string tmp;  // a string message is clipped, never copied whole
      fail(pos, "raise_exception: " + (m ? clip_text(text_of(*m, tmp, pos)) : std::string()));
    }
    if (name == "namespace") {
      std::uint64_t bytes = dict_bytes(a.kw.size());
      for (const Value& p : a.pos) {
        if (!p.is_mapping()) fail(pos, msg("namespace() takes a dict or keyword arguments, not ", a_kind(p)));
        bytes = plus(bytes, dict_bytes(p.dict->items.size()));
        for (const auto& kv : p.dict->items) bytes = plus(bytes, kv.first.size());
      }
      charge(bytes, pos);
      auto d = std::make_shared<ValueDict>();
      for (const Value& p : a.pos)
        for (const auto& kv : p.dict->items) {
          work(kv.first.size(), pos);
          d->set(kv.first, kv.second);
        }
      for (const auto& kv : a.kw) d->set(kv.first, kv.second);
      for (const auto& kv : d->items)
        if (kv.second.has_ns) fail(pos, "namespace(): a namespace cannot hold a namespace");
      return Value::of_dict(std::move(d), Value::Kind::kNamespace);
    }
    if (name == "dict") {
      check_arity(a, 0, {}, "dict()", pos);
      charge(dict_bytes(a.kw.size()), pos);
      auto d = std::make_shared<ValueDict>();
      for (const auto& kv : a.kw) d->set(kv.first, kv.second);
      return checked_depth(Value::of_dict(std::move(d)), pos);
    }
    if (name == "range") {
      std::int64_t start = 0, stop = 0, stp = 1;
      for (const Value& v : a.pos)
        if (!v.is_integer()) fail(pos, msg("range() needs integers, got ", a_kind(v)));
      if (a.pos.size() == 1) stop = a.pos[0].as_int();
      else if (a.pos.size() == 2 || a.pos.size() == 3) {
        start = a.pos[0].as_int();
        stop = a.pos[1].as_int();
        if (a.pos.size() == 3) stp = a.pos[2].as_int();
      } else fail(pos, msg("range() takes 1 to 3 arguments, got ", a.pos.size()));
      if (stp == 0) fail(pos, "range() step cannot be zero");
      constexpr std::int64_t kMaxRange = 100000;  // Jinja2's sandbox refuses longer ranges too
      const long double span = (static_cast<long double>(stop) - static_cast<long double>(start)) / static_cast<long double>(stp);
      if (span > kMaxRange) fail(pos, msg("range() of more than ", kMaxRange, " items"));
      charge((span > 0 ? static_cast<std::uint64_t>(span) + 1 : 0) * sizeof(Value) + 16, pos);
      ValueList l;
      for (std::int64_t k = start; stp > 0 ? k < stop : k > stop;) {
        l.push_back(Value::integer(k));
        if (__builtin_add_overflow(k, stp, &k)) break;
      }
      return Value::of_list(std::move(l));
    }
    if (name == "strftime_now") {  // transformers' global: the local time, formatted
      check_arity(a, 1, {}, "strftime_now()", pos);
      const std::string& fmt = want_string(arg(a, 0, "format"), "strftime_now()", pos);
      if (fmt.size() > 64) fail(pos, msg("strftime_now(): format of ", fmt.size(), " bytes exceeds the limit of 64"));
      const std::time_t now = std::time(nullptr);
      std::tm tm{};
      localtime_r(&now, &tm);
      char buf[512];
      const std::size_t n = std::strftime(buf, sizeof buf, fmt.c_str(), &tm);
      if (n == 0 && !fmt.empty()) fail(pos, "strftime_now(): the formatted date is empty or too long");
      return make_string(std::string(buf, n), pos);
    }
    fail(pos, msg("unknown function '", name, "'"));
  }

  bool is_global_function(const std::string& n) const {
    return n == "raise_exception" || n == "namespace" || n == "range" || n == "dict" || n == "strftime_now";
  }

  // ---- filters and tests
  Value apply_filter(const Expr& e) {
    const Value v = eval(*e.a);
    const Args a = eval_args(e);
    const std::string& f = e.name;
    const std::size_t pos = e.pos;
    const std::string what = "filter '" + f + "'";
    if (f == "length" || f == "count") {
      check_arity(a, 0, {}, what, pos);
      switch (v.kind) {
        case Value::Kind::kString:
          work(v.str().size(), pos);
          return Value::integer(static_cast<std::int64_t>(utf8_count(v.str())));
        case Value::Kind::kList: return Value::integer(static_cast<std::int64_t>(v.list->size()));
        case Value::Kind::kDict: case Value::Kind::kNamespace: return Value::integer(static_cast<std::int64_t>(v.dict->items.size()));
        case Value::Kind::kUndefined: return Value::integer(0);
        default: fail(pos, msg("filter 'length' of ", a_kind(v)));
      }
    }
    if (f == "trim") {
      check_arity(a, 1, {"chars"}, what, pos);
      std::string tmp;
      return strip(text_of(v, tmp, pos), arg(a, 0, "chars"), true, true, pos);
    }
    if (f == "tojson") {
      check_arity(a, 1, {"indent", "ensure_ascii", "separators", "sort_keys"}, what, pos);
      const Value* ind = arg(a, 0, "indent");
      int indent = -1;
      if (ind && ind->kind != Value::Kind::kNone) {
        if (!ind->is_integer() || ind->as_int() < 0 || ind->as_int() > 32) fail(pos, "tojson: indent must be an integer in [0, 32]");
        indent = static_cast<int>(ind->as_int());
      }
      if (a.find("separators") || a.find("sort_keys") || (a.find("ensure_ascii") && truthy(*a.find("ensure_ascii"))))
        fail(pos, "unsupported construct: tojson with separators, sort_keys or ensure_ascii");
      return Value::string(tojson(v, indent, pos));
    }
    if (f == "default" || f == "d") {
      check_arity(a, 2, {"default_value", "boolean"}, what, pos);
      const Value* dflt = arg(a, 0, "default_value");
      const Value* boolean = arg(a, 1, "boolean");
      const bool use = v.kind == Value::Kind::kUndefined || (boolean && truthy(*boolean) && !truthy(v));
      if (use) return dflt ? *dflt : Value::string("");
      return v;
    }
    if (f == "upper" || f == "lower") {
      check_arity(a, 0, {}, what, pos);
      std::string tmp;
      const std::string& text = text_of(v, tmp, pos);
      charge(text.size() + 16, pos);
      return Value::string(ascii_case(text, f == "upper"));
    }
    if (f == "capitalize" || f == "title") {
      check_arity(a, 0, {}, what, pos);
      std::string tmp;
      const std::string& text = text_of(v, tmp, pos);
      charge(text.size() + 16, pos);
      return Value::string(f == "title" ? title_words(text) : capitalize(text));
    }
    if (f == "string") {
      check_arity(a, 0, {}, what, pos);
      if (v.kind == Value::Kind::kString) return v;
      return Value::string(repr(v, pos));
    }
    if (f == "safe" || f == "e" || f == "escape") {  // no autoescaping in chat templates: identity
      check_arity(a, 0, {}, what, pos);
      if (f == "safe") return v;
      fail(pos, "unsupported construct: filter 'escape' (HTML escaping)");
    }
    if (f == "join") {
      check_arity(a, 2, {"d", "attribute"}, what, pos);
      const Value* sep = arg(a, 0, "d");
      std::string tmp;
      const std::string& s = sep ? text_of(*sep, tmp, pos) : tmp;
      if (const Value* at = arg(a, 1, "attribute"))
        return join(*attr_map(*iterate(v, pos), want_string(at, what, pos), e), s, pos, false);
      return join(*iterate(v, pos), s, pos, false);
    }
    if (f == "first" || f == "last") {
      check_arity(a, 0, {}, what, pos);
      if (v.kind == Value::Kind::kString) {  // one code point, without listing them all
        const std::string& str = v.str();
        if (str.empty()) return Value();
        work(str.size(), pos);
        std::size_t at = 0;
        if (f == "last")
          for (std::size_t k = 0; k < str.size(); k += utf8_len_at(str, k)) at = k;
        return make_string(str.substr(at, utf8_len_at(str, at)), pos);
      }
      const auto items = iterate(v, pos);
      if (items->empty()) return Value();
      return f == "first" ? items->front() : items->back();
    }
    if (f == "items") {
      check_arity(a, 0, {}, what, pos);
      if (v.kind == Value::Kind::kUndefined) return Value::of_list({});
      if (!v.is_mapping()) fail(pos, msg("filter 'items' of ", a_kind(v)));
      return dict_view(v, "items", pos);
    }
    if (f == "list") {
      check_arity(a, 0, {}, what, pos);
      return Value::of_shared_list(iterate(v, pos));
    }
    if (f == "reverse") {
      check_arity(a, 0, {}, what, pos);
      if (v.kind == Value::Kind::kString) {
        work(v.str().size(), pos);
        const std::vector<std::size_t> off = offsets(v.str(), pos);
        charge(v.str().size() + 16, pos);
        std::string out;
        out.reserve(v.str().size());
        for (std::size_t k = off.size() - 1; k > 0; --k) out.append(v.str(), off[k - 1], off[k] - off[k - 1]);
        return Value::string(std::move(out));
      }
      const auto items = iterate(v, pos);
      charge(items->size() * sizeof(Value) + 16, pos);
      ValueList l(items->rbegin(), items->rend());
      return checked_depth(Value::of_list(std::move(l)), pos);
    }
    if (f == "replace") {
      check_arity(a, 3, {"count"}, what, pos);
      const Value* c = arg(a, 2, "count");
      if (c && c->kind != Value::Kind::kNone && !c->is_integer()) fail(pos, what + ": count must be an integer");
      std::string tmp;
      return replace(text_of(v, tmp, pos), want_string(arg(a, 0, "old"), what, pos), want_string(arg(a, 1, "new"), what, pos),
                     c && c->kind != Value::Kind::kNone ? c->as_int() : -1, pos);
    }
    if (f == "int") {
      check_arity(a, 1, {"default"}, what, pos);
      const Value* dflt = arg(a, 0, "default");
      if (v.is_integer()) return Value::integer(v.as_int());
      if (v.kind == Value::Kind::kFloat && std::isfinite(v.f) && std::fabs(v.f) < 9.2e18)
        return Value::integer(static_cast<std::int64_t>(v.f));
      if (v.kind == Value::Kind::kString) {
        const Value stripped = strip(v.str(), nullptr, true, true, pos);
        const std::string& s = stripped.str();
        char* end = nullptr;
        errno = 0;
        const long long x = std::strtoll(s.c_str(), &end, 10);
        if (!s.empty() && end == s.c_str() + s.size() && errno == 0) return Value::integer(x);
      }
      return dflt ? *dflt : Value::integer(0);
    }
    if (f == "float") {
      check_arity(a, 1, {"default"}, what, pos);
      if (v.is_number()) return Value::number(v.as_double());
      if (v.kind == Value::Kind::kString) {
        const Value stripped = strip(v.str(), nullptr, true, true, pos);
        const std::string& s = stripped.str();
        char* end = nullptr;
        const double x = std::strtod(s.c_str(), &end);
        if (!s.empty() && end == s.c_str() + s.size()) return Value::number(x);
      }
      const Value* dflt = arg(a, 0, "default");
      return dflt ? *dflt : Value::number(0);
    }
    if (f == "abs") {
      check_arity(a, 0, {}, what, pos);
      if (v.kind == Value::Kind::kFloat) return Value::number(std::fabs(v.f));
      if (!v.is_integer()) fail(pos, msg("filter 'abs' of ", a_kind(v)));
      if (v.as_int() == std::numeric_limits<std::int64_t>::min()) fail(pos, "integer overflow (results are limited to 64 bits)");
      return Value::integer(v.as_int() < 0 ? -v.as_int() : v.as_int());
    }
    if (f == "selectattr" || f == "rejectattr") {
      if (a.pos.empty()) fail(pos, what + " needs an attribute name");
      const std::string& attr = want_string(&a.pos[0], what, pos);
      const bool want = f == "selectattr";
      const auto items_ = iterate(v, pos);
      charge(items_->size() * sizeof(Value) + 16, pos);  // at most every item
      ValueList out;
      out.reserve(items_->size());
      for (const Value& item : *items_) {
        step(pos);
        work(attr.size(), pos);
        const Value x = item.kind == Value::Kind::kUndefined ? Value() : get_attr_or_undefined(item, attr);
        const bool ok = a.pos.size() > 1 ? run_test(want_string(&a.pos[1], what, pos), x,
                                                    std::vector<Value>(a.pos.begin() + 2, a.pos.end()), pos)
                                         : truthy(x);
        if (ok == want) out.push_back(item);
      }
      return checked_depth(Value::of_list(std::move(out)), pos);
    }
    if (f == "select" || f == "reject") {
      const bool want = f == "select";
      const auto items_ = iterate(v, pos);
      charge(items_->size() * sizeof(Value) + 16, pos);  // at most every item
      ValueList out;
      out.reserve(items_->size());
      for (const Value& item : *items_) {
        step(pos);
        const bool ok = !a.pos.empty() ? run_test(want_string(&a.pos[0], what, pos), item,
                                                  std::vector<Value>(a.pos.begin() + 1, a.pos.end()), pos)
                                       : truthy(item);
        if (ok == want) out.push_back(item);
      }
      return checked_depth(Value::of_list(std::move(out)), pos);
    }
    if (f == "map") {
      const Value* at = a.find("attribute");
      if (!at || !a.pos.empty()) fail(pos, "unsupported construct: filter 'map' other than map(attribute='name')");
      const Value* dflt = a.find("default");
      auto l = attr_map(*iterate(v, pos), want_string(at, what, pos), e);
      if (dflt) {
        charge(l->size() * sizeof(Value) + 16, pos);
        ValueList out(*l);
        for (Value& x : out)
          if (x.kind == Value::Kind::kUndefined) x = *dflt;
        return checked_depth(Value::of_list(std::move(out)), pos);
      }
      return Value::of_shared_list(l);
    }
    fail(pos, msg("unsupported construct: filter '", f, "'"));
  }

  Value get_attr_or_undefined(const Value& item, const std::string& attr) {
    if (!item.is_mapping()) return Value();
    const Value* x = item.dict->find(attr);
    return x ? *x : Value();
  }
  std::shared_ptr<const ValueList> attr_map(const ValueList& items, const std::string& attr, const Expr& e) {
    charge(items.size() * sizeof(Value) + 16, e.pos);
    ValueList out;
    out.reserve(items.size());
    for (const Value& item : items) {
      step(e.pos);
      work(attr.size(), e.pos);
      out.push_back(get_attr_or_undefined(item, attr));
    }
    return std::make_shared<const ValueList>(std::move(out));
  }

  bool run_test(const std::string& t, const Value& v, const std::vector<Value>& args, std::size_t pos) {
    if (!known_test(t)) fail(pos, msg("unknown test '", clip_text(t, 256), "'"));  // t is a value: clipped first
    auto need = [&](std::size_t n) {
      if (args.size() != n) fail(pos, msg("test '", t, "' takes ", n, " argument", n == 1 ? "" : "s", ", got ", args.size()));
    };
    using K = Value::Kind;
    if (t == "defined") return need(0), v.kind != K::kUndefined;
    if (t == "undefined") return need(0), v.kind == K::kUndefined;
    if (t == "none") return need(0), v.kind == K::kNone;
    if (t == "string") return need(0), v.kind == K::kString;
    if (t == "number") return need(0), v.is_number();
    if (t == "integer") return need(0), v.kind == K::kInt;
    if (t == "float") return need(0), v.kind == K::kFloat;
    if (t == "boolean") return need(0), v.kind == K::kBool;
    if (t == "true") return need(0), v.kind == K::kBool && v.b;
    if (t == "false") return need(0), v.kind == K::kBool && !v.b;
    if (t == "mapping") return need(0), v.is_mapping();
    if (t == "iterable") return need(0), v.kind == K::kList || v.kind == K::kString || v.is_mapping() || v.kind == K::kUndefined;
    if (t == "sequence") return need(0), v.kind == K::kList || v.kind == K::kString || v.is_mapping();
    if (t == "callable") return need(0), v.kind == K::kFunction;
    if (t == "lower" || t == "upper") {  // no cased letter of the other case; read in place, not copied
      need(0);
      if (v.kind != K::kString) return false;
      work(v.str().size(), pos);
      const char lo = t == "lower" ? 'A' : 'a';
      return std::none_of(v.str().begin(), v.str().end(), [lo](char c) { return c >= lo && c <= lo + 25; });
    }
    if (t == "even" || t == "odd") {
      need(0);
      if (!v.is_integer()) fail(pos, msg("test '", t, "' of ", a_kind(v)));
      return (v.as_int() % 2 == 0) == (t == "even");
    }
    need(1);
    const Value& o = args[0];
    if (t == "divisibleby") {
      if (!v.is_integer() || !o.is_integer()) fail(pos, "test 'divisibleby' needs integers");
      if (o.as_int() == 0) fail(pos, "modulo by zero");
      if (o.as_int() == -1) return true;
      return v.as_int() % o.as_int() == 0;
    }
    if (t == "eq" || t == "equalto" || t == "==") return equal(v, o, pos);
    if (t == "ne" || t == "!=") return !equal(v, o, pos);
    if (t == "in") return contains(o, v, pos);
    if (t == "lt" || t == "lessthan") return order(v, o, pos) < 0;
    if (t == "le") return order(v, o, pos) <= 0;
    if (t == "gt" || t == "greaterthan") return order(v, o, pos) > 0;
    return order(v, o, pos) >= 0;  // ge
  }

  // ---- expressions
  Value eval(const Expr& e) {
    step(e.pos);
    switch (e.kind) {
      case Expr::Kind::kLiteral: return e.value;
      case Expr::Kind::kName: {
        if (const Value* v = lookup(e.name)) return *v;
        if (is_global_function(e.name)) return Value::function(e.name.c_str());
        return Value();
      }
      case Expr::Kind::kList: {
        charge(e.args.size() * sizeof(Value) + 16, e.pos);
        ValueList l;
        l.reserve(e.args.size());
        for (const auto& x : e.args) l.push_back(eval(*x));
        return checked_depth(Value::of_list(std::move(l)), e.pos);
      }
      case Expr::Kind::kDict: {  // hashed past ValueDict::kLinearKeys keys: linear in its size
        charge(dict_bytes(e.args.size() / 2), e.pos);
        auto d = std::make_shared<ValueDict>();
        for (std::size_t k = 0; k + 1 < e.args.size(); k += 2) {
          const Value key = eval(*e.args[k]);
          if (key.kind != Value::Kind::kString) fail(e.args[k]->pos, msg("dict keys must be strings, not ", a_kind(key)));
          work(key.str().size(), e.pos);
          charge(key.str().size(), e.pos);
          d->set(key.str(), eval(*e.args[k + 1]));
        }
        return checked_depth(Value::of_dict(std::move(d)), e.pos);
      }
      case Expr::Kind::kAttr: return get_attr(eval(*e.a), e.name, e);
      case Expr::Kind::kIndex: {
        const Value obj = eval(*e.a);
        return get_item(obj, eval(*e.b), e);
      }
      case Expr::Kind::kSlice: {
        const Value obj = eval(*e.a);
        if (obj.kind == Value::Kind::kList) {
          const Slice sl = slice_indices(static_cast<std::int64_t>(obj.list->size()), e);
          charge(sl.count * sizeof(Value) + 16, e.pos);
          ValueList out;
          out.reserve(static_cast<std::size_t>(sl.count));
          for (std::uint64_t k = 0; k < sl.count; ++k) out.push_back((*obj.list)[sl.at(k)]);
          return checked_depth(Value::of_list(std::move(out)), e.pos);
        }
        if (obj.kind == Value::Kind::kString) {
          const std::string& str = obj.str();
          work(str.size(), e.pos);
          const std::vector<std::size_t> off = offsets(str, e.pos);
          const Slice sl = slice_indices(static_cast<std::int64_t>(off.size() - 1), e);
          std::uint64_t bytes = 16;
          for (std::uint64_t k = 0; k < sl.count; ++k) bytes += off[sl.at(k) + 1] - off[sl.at(k)];
          work(sl.count, e.pos);
          charge(bytes, e.pos);
          std::string out;
          out.reserve(static_cast<std::size_t>(bytes - 16));
          for (std::uint64_t k = 0; k < sl.count; ++k) {
            const std::size_t u = sl.at(k);
            out.append(str, off[u], off[u + 1] - off[u]);
          }
          return Value::string(std::move(out));
        }
        if (obj.kind == Value::Kind::kUndefined) fail(e.pos, "cannot slice an undefined value");
        fail(e.pos, msg("cannot slice ", a_kind(obj)));
      }
      case Expr::Kind::kCall: {
        if (e.a->kind == Expr::Kind::kAttr) {  // obj.method(...)
          const Value obj = eval(*e.a->a);
          if (obj.kind == Value::Kind::kUndefined)
            fail(e.pos, msg("cannot call method '", e.a->name, "' of an undefined value"));
          const Args a = eval_args(e);
          return call_method(obj, e.a->name, a, e.pos);
        }
        const Value callee = eval(*e.a);
        const Args a = eval_args(e);
        if (callee.kind == Value::Kind::kFunction) return call_function(callee.str(), a, e.pos);
        if (e.a->kind == Expr::Kind::kName && callee.kind == Value::Kind::kUndefined)
          fail(e.pos, msg("unknown function '", e.a->name, "'"));
        fail(e.pos, msg(a_kind(callee), " is not callable"));
      }
      case Expr::Kind::kFilter: return apply_filter(e);
      case Expr::Kind::kTest: {
        const Value v = eval(*e.a);
        const Args a = eval_args(e);
        if (!a.kw.empty()) fail(e.pos, msg("test '", e.name, "' takes no keyword arguments"));
        return Value::boolean(run_test(e.name, v, a.pos, e.pos) != e.negated);
      }
      case Expr::Kind::kNot: return Value::boolean(!truthy(eval(*e.a)));
      case Expr::Kind::kNeg: case Expr::Kind::kPos: {
        const Value v = eval(*e.a);
        if (!v.is_number()) fail(e.pos, msg("unary '", e.kind == Expr::Kind::kNeg ? "-" : "+", "' of ", a_kind(v)));
        if (e.kind == Expr::Kind::kPos) return v.kind == Value::Kind::kBool ? Value::integer(v.as_int()) : v;
        if (v.kind == Value::Kind::kFloat) return Value::number(-v.f);
        if (v.as_int() == std::numeric_limits<std::int64_t>::min()) fail(e.pos, "integer overflow (results are limited to 64 bits)");
        return Value::integer(-v.as_int());
      }
      case Expr::Kind::kBinary: {
        const Value x = eval(*e.a);
        const Value y = eval(*e.b);
        return arith(e.name, x, y, e.pos);
      }
      case Expr::Kind::kConcat: {
        const Value x = eval(*e.a);
        const Value y = eval(*e.b);
        std::string tx, ty;
        const std::string& a = text_of(x, tx, e.pos);
        const std::string& b = text_of(y, ty, e.pos);
        charge(a.size() + b.size() + 16, e.pos);  // before building it
        std::string out;
        out.reserve(a.size() + b.size());
        out += a;
        out += b;
        return Value::string(std::move(out));
      }
      case Expr::Kind::kAnd: {
        Value x = eval(*e.a);
        return truthy(x) ? eval(*e.b) : x;
      }
      case Expr::Kind::kOr: {
        Value x = eval(*e.a);
        return truthy(x) ? x : eval(*e.b);
      }
      case Expr::Kind::kCompare: {
        Value left = eval(*e.args[0]);
        for (std::size_t k = 0; k < e.ops.size(); ++k) {
          Value right = eval(*e.args[k + 1]);
          const std::string& op = e.ops[k];
          bool ok;
          if (op == "==") ok = equal(left, right, e.pos);
          else if (op == "!=") ok = !equal(left, right, e.pos);
          else if (op == "in") ok = contains(right, left, e.pos);
          else if (op == "not in") ok = !contains(right, left, e.pos);
          else {
            const int c = order(left, right, e.pos);
            ok = op == "<" ? c < 0 : op == "<=" ? c <= 0 : op == ">" ? c > 0 : c >= 0;
          }
          if (!ok) return Value::boolean(false);
          left = std::move(right);
        }
        return Value::boolean(true);
      }
      case Expr::Kind::kCond: return truthy(eval(*e.a)) ? eval(*e.b) : (e.c ? eval(*e.c) : Value());
    }
    return Value();
  }

  const Program& prog_;
  const TemplateLimits& lim_;
  std::vector<std::unordered_map<std::string, Value>> scopes_;
  std::string out_;
  std::uint64_t steps_ = 0, built_ = 0, iterations_ = 0, units_ = 0;
};

/// Renders a parsed template with these global variables. Throws TemplateError.
inline std::string render(const Program& prog, const std::vector<std::pair<std::string, Value>>& globals,
                          const TemplateLimits& lim) {
  Renderer r(prog, lim);
  return r.run(globals);
}

}  // namespace detail::jinja
}  // namespace kvd
