// One way into JSON: every JSON document kvdecode reads (config.json,
// generation_config.json, tokenizer.json, tokenizer_config.json, a safetensors
// header, a shard index, chat template variables, a program's JSON input, and
// later a server's request bodies) is parsed by parse_json_text(), which enforces
// two limits before nlohmann/json builds anything:
//   - a size limit in bytes, chosen per document (JsonLimits::max_bytes);
//   - a nesting limit, kMaxJsonDepth (128) levels of arrays and objects, checked by
//     a linear scan of the text that knows strings and their escapes.
// nlohmann parses deep values without recursion, but copying, comparing or dumping
// one recurses once per level: a 100,000-level value overflows the stack. With the
// nesting limit no value kvdecode holds is deeper than 128 levels. Code that reads
// a parsed document still neither copies nor dumps a file's values: messages name
// the field and show a scalar or the type of a container (json_value_text()).
//
// Failures are FormatError "<where>: ..." naming the document, the offset, the
// depth or size, and the limit.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include <nlohmann/json.hpp>

#include "kvdecode/error.hpp"

/// The deepest nesting of arrays and objects a JSON document may have. Define it
/// before including kvdecode to raise it (each level costs a stack frame wherever
/// a value is copied or compared).
#ifndef KVD_MAX_JSON_DEPTH
#define KVD_MAX_JSON_DEPTH 128
#endif

namespace kvd {

/// Levels of arrays and objects any JSON document may nest (KVD_MAX_JSON_DEPTH).
inline constexpr int kMaxJsonDepth = KVD_MAX_JSON_DEPTH;
/// The largest JSON document accepted when the caller names no smaller limit (1 GiB).
inline constexpr std::uint64_t kMaxJsonBytes = std::uint64_t{1} << 30;

namespace detail {

/// The limits parse_json_text() enforces on one document.
struct JsonLimits {
  std::uint64_t max_bytes = kMaxJsonBytes;  ///< the document's size in bytes
  int max_depth = kMaxJsonDepth;            ///< levels of arrays and objects
};

/// The JSON type of `v` for a message ("an array", "a string", ...), never its contents.
template <class Json>
const char* json_type_text(const Json& v) {
  switch (v.type()) {
    case Json::value_t::null: return "null";
    case Json::value_t::object: return "an object";
    case Json::value_t::array: return "an array";
    case Json::value_t::string: return "a string";
    case Json::value_t::boolean: return "a boolean";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned: return "an integer";
    case Json::value_t::number_float: return "a number with a fraction";
    case Json::value_t::binary: return "binary data";
    default: return "an unreadable value";
  }
}

/// `v` as a message shows it: a scalar as JSON text (a string quoted, cut after 80
/// bytes, invalid UTF-8 replaced), an array or object by its type and size only
/// ("an array of 3 items"), so no message copies or dumps a nested value.
template <class Json>
std::string json_value_text(const Json& v) {
  if (v.is_array()) return msg("an array of ", v.size(), v.size() == 1 ? " item" : " items");
  if (v.is_object()) return msg("an object of ", v.size(), v.size() == 1 ? " key" : " keys");
  if (v.is_binary()) return "binary data";
  constexpr std::size_t kShown = 80;
  if (v.is_string()) {  // cut before quoting: a string from a file may be megabytes long
    const auto& s = v.template get_ref<const typename Json::string_t&>();
    if (s.size() > kShown)
      return Json(s.substr(0, kShown)).dump(-1, ' ', false, Json::error_handler_t::replace) + "...";
  }
  return v.dump(-1, ' ', false, Json::error_handler_t::replace);
}

/// Throws FormatError if [begin, end) nests arrays and objects deeper than
/// `max_depth`: "<where>: JSON nesting depth <d> at offset <o> (under key '<k>')
/// exceeds the limit of <max_depth> levels". `base` is the file offset of begin.
/// Strings (and the brackets inside them) are skipped with their escapes, so for any
/// text nlohmann accepts, the depth found is the depth it would build; for text it
/// rejects, the scan stops no later than the parser would. Linear, allocates nothing.
inline void check_json_depth(const char* begin, const char* end, const std::string& where, std::uint64_t base,
                             int max_depth) {
  int depth = 0;
  bool top_is_object = false;
  const char* key_begin = nullptr;  // the last string seen at depth 1: the key of what opens there
  const char* key_end = nullptr;
  for (const char* p = begin; p < end; ++p) {
    const char c = *p;
    if (c == '"') {
      const char* s = p + 1;
      ++p;
      while (p < end && *p != '"') {
        if (*p == '\\') ++p;
        ++p;
      }
      if (p >= end) return;  // an unterminated string: the parser reports it
      if (depth == 1) {
        key_begin = s;
        key_end = p;
      }
    } else if (c == '[' || c == '{') {
      if (depth == 0) top_is_object = c == '{';
      if (++depth > max_depth) {
        std::string key;
        if (top_is_object && key_begin) {
          const std::size_t n = static_cast<std::size_t>(key_end - key_begin);
          key = msg(" under key '", std::string(key_begin, n < 64 ? n : 64), n > 64 ? "...'" : "'");
        }
        throw FormatError(msg(where, ": JSON nesting depth ", depth, " at offset ", base + static_cast<std::uint64_t>(p - begin),
                              key, " exceeds the limit of ", max_depth,
                              " levels of arrays and objects (KVD_MAX_JSON_DEPTH)"));
      }
    } else if (c == ']' || c == '}') {
      if (depth == 0) return;  // unbalanced: the parser reports it
      --depth;
    }
  }
}

/// Parses one JSON document [begin, end) after checking its size and nesting
/// against `limits`. `where` names it in messages ("config.json", "x.safetensors:
/// header"); `base` is its file offset, added to the offsets messages give. `cb`
/// (optional) is nlohmann's parser callback, as for Json::parse.
/// Failure: FormatError "<where>: ..." for a document over limits.max_bytes, nesting
/// deeper than limits.max_depth, invalid JSON ("at offset <o>: invalid JSON (...)")
/// or unreadable values (a number too large for a double). Nothing is kept.
template <class Json = nlohmann::json>
Json parse_json_text(const char* begin, const char* end, const std::string& where, const JsonLimits& limits = {},
                     std::uint64_t base = 0, typename Json::parser_callback_t cb = nullptr) {
  const auto size = static_cast<std::uint64_t>(end - begin);
  if (size > limits.max_bytes)
    throw FormatError(msg(where, ": JSON document of ", size, " bytes exceeds the limit of ", limits.max_bytes, " bytes"));
  check_json_depth(begin, end, where, base, limits.max_depth);
  try {
    return Json::parse(begin, end, std::move(cb));
  } catch (const typename Json::parse_error& e) {
    throw FormatError(msg(where, " at offset ", base + (e.byte > 0 ? e.byte - 1 : 0), ": invalid JSON (", e.what(), ")"));
  } catch (const typename Json::exception& e) {  // e.g. out_of_range: a number too large for a double
    throw FormatError(msg(where, " at offset ", base, ": unreadable JSON (", e.what(), ")"));
  }
}

/// parse_json_text() on a whole string.
template <class Json = nlohmann::json>
Json parse_json_text(std::string_view text, const std::string& where, const JsonLimits& limits = {}) {
  return parse_json_text<Json>(text.data(), text.data() + text.size(), where, limits);
}

/// A JSON document held in `text` (the spelling every reader used before the limits):
/// parse_json_text() with the default limits.
inline nlohmann::json parse_json(const std::string& text, const std::string& where) {
  return parse_json_text<nlohmann::json>(std::string_view(text), where);
}

}  // namespace detail
}  // namespace kvd
