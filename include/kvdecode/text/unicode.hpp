// Unicode helpers for the tokenizers: lenient UTF-8 stepping (invalid bytes are
// single one-byte units, so any byte string has one deterministic split), NFC
// and lowercasing through utf8proc (applied to valid runs only; invalid bytes
// pass through untouched), and GPT-2's byte-level alphabet (each byte 0..255
// stands for one printable code point, so byte strings can live in a vocabulary
// of text).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include <utf8proc.h>

#include "kvdecode/error.hpp"

namespace kvd::detail {

/// Length in bytes of the UTF-8 unit starting at s[pos] (pos < n): the whole
/// character when it is well formed (Unicode Table 3-7: no overlongs, no
/// surrogates, nothing above U+10FFFF), else 1 (one invalid byte).
inline std::size_t utf8_unit(const char* s, std::size_t n, std::size_t pos) {
  const auto b0 = static_cast<unsigned char>(s[pos]);
  if (b0 < 0x80) return 1;
  std::size_t need;
  unsigned char lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return 1;
  }
  if (pos + need > n) return 1;
  for (std::size_t k = 1; k < need; ++k) {
    const auto b = static_cast<unsigned char>(s[pos + k]);
    if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xBF)) return 1;
  }
  return need;
}

/// True if the unit of `len` bytes at s[pos] is a well-formed character.
inline bool utf8_valid_unit(const char* s, std::size_t pos, std::size_t len) {
  return len > 1 || static_cast<unsigned char>(s[pos]) < 0x80;
}

/// Code point of a well-formed unit (see utf8_unit).
inline std::uint32_t utf8_decode(const char* s, std::size_t len) {
  const auto b = [&](std::size_t i) { return static_cast<std::uint32_t>(static_cast<unsigned char>(s[i])); };
  switch (len) {
    case 1: return b(0);
    case 2: return ((b(0) & 0x1F) << 6) | (b(1) & 0x3F);
    case 3: return ((b(0) & 0x0F) << 12) | ((b(1) & 0x3F) << 6) | (b(2) & 0x3F);
    default: return ((b(0) & 0x07) << 18) | ((b(1) & 0x3F) << 12) | ((b(2) & 0x3F) << 6) | (b(3) & 0x3F);
  }
}

/// Appends `s` as a quoted JSON string, escaped as JSON.stringify and Python's
/// json.dumps(ensure_ascii=False) write it: \" \\ \n \r \t \b \f, other
/// control bytes as \u00XX, everything else (UTF-8 included) as it is.
inline void append_json_string(std::string& out, const std::string& s) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          static const char kHex[] = "0123456789abcdef";
          out += "\\u00";
          out += kHex[c >> 4];
          out += kHex[c & 15];
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}

/// Appends code point `cp` (<= U+10FFFF) as UTF-8.
inline void utf8_append(std::string& out, std::uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

/// Replaces every invalid byte of `s` by U+FFFD, one per byte (as Hugging Face's
/// lossy byte decoding does), so the result is valid UTF-8.
inline std::string utf8_repair(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t len = utf8_unit(s.data(), s.size(), i);
    if (utf8_valid_unit(s.data(), i, len)) out.append(s, i, len); else out += "\xEF\xBF\xBD";
    i += len;
  }
  return out;
}

/// Applies `fn(valid_run) -> transformed` to each maximal run of valid UTF-8 in
/// `s`, copying invalid bytes through unchanged.
template <class Fn>
std::string map_valid_runs(const std::string& s, Fn fn) {
  std::string out;
  out.reserve(s.size());
  std::size_t run = 0;
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t len = utf8_unit(s.data(), s.size(), i);
    if (!utf8_valid_unit(s.data(), i, len)) {
      if (i > run) out += fn(s.substr(run, i - run));
      out += s[i];
      run = i + 1;
    }
    i += len;
  }
  if (s.size() > run) out += fn(s.substr(run));
  return out;
}

/// Unicode NFC of `s` (utf8proc); invalid bytes pass through. Throws Error only
/// if utf8proc runs out of memory.
inline std::string nfc(const std::string& s) {
  bool ascii = true;
  for (char c : s) ascii = ascii && static_cast<unsigned char>(c) < 0x80;
  if (ascii) return s;  // ASCII is always NFC
  return map_valid_runs(s, [](const std::string& run) {
    utf8proc_uint8_t* dst = nullptr;
    const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(run.data()),
                                            static_cast<utf8proc_ssize_t>(run.size()), &dst,
                                            static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
    if (n < 0) throw Error(msg("NFC normalization failed: ", utf8proc_errmsg(n)));
    std::string out(reinterpret_cast<const char*>(dst), static_cast<std::size_t>(n));
    std::free(dst);
    return out;
  });
}

/// Simple (one-to-one) Unicode lowercase of `s`; invalid bytes pass through.
inline std::string lowercase(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t len = utf8_unit(s.data(), s.size(), i);
    if (utf8_valid_unit(s.data(), i, len)) {
      utf8_append(out, static_cast<std::uint32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(utf8_decode(s.data() + i, len)))));
    } else {
      out += s[i];
    }
    i += len;
  }
  return out;
}

/// GPT-2's byte-level alphabet: the code point standing for each byte. Printable
/// bytes ('!'..'~', 0xA1..0xAC, 0xAE..0xFF) stand for themselves; the other 68
/// take U+0100, U+0101, ... in byte order.
struct ByteLevelAlphabet {
  std::uint32_t cp[256];        // byte -> code point
  std::string utf8[256];        // byte -> its code point in UTF-8
  int shifted[68];              // code point 256 + k -> byte
  ByteLevelAlphabet() {
    std::uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      if (!printable) shifted[next - 256] = b;
      cp[b] = printable ? static_cast<std::uint32_t>(b) : next++;
      utf8_append(utf8[b], cp[b]);
    }
  }
  /// The byte a code point stands for, or -1.
  int byte_of(std::uint32_t c) const {
    if (c < 256) {
      const bool printable = (c >= 0x21 && c <= 0x7E) || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE);
      return printable ? static_cast<int>(c) : -1;
    }
    return c < 256 + 68 ? shifted[c - 256] : -1;
  }
};

inline const ByteLevelAlphabet& byte_level_alphabet() {
  static const ByteLevelAlphabet a;
  return a;
}

/// Maps every byte of `s` to its byte-level code point (UTF-8 out).
inline std::string byte_level_encode(const std::string& s) {
  const ByteLevelAlphabet& a = byte_level_alphabet();
  std::string out;
  out.reserve(s.size() * 2);
  for (unsigned char c : s) out += a.utf8[c];
  return out;
}

/// Inverse of byte_level_encode: each character of the alphabet becomes its byte;
/// anything else (added tokens' plain text) is copied as is.
inline std::string byte_level_decode(const std::string& s) {
  const ByteLevelAlphabet& a = byte_level_alphabet();
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t len = utf8_unit(s.data(), s.size(), i);
    int b = -1;
    if (utf8_valid_unit(s.data(), i, len)) b = a.byte_of(utf8_decode(s.data() + i, len));
    if (b >= 0) out += static_cast<char>(b); else out.append(s, i, len);
    i += len;
  }
  return out;
}

}  // namespace kvd::detail
