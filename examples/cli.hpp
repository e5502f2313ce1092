// Helpers shared by kvdecode's command-line programs (not part of the library):
// strict number parsing that names the option and the limit, JSON string and
// number formatting, and a main() wrapper that maps errors to exit statuses
// (2 for a bad argument, 1 for any other kvd::Error).
#pragma once

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <string>

#include "kvdecode/error.hpp"

namespace kvd::cli {

/// A decimal integer in [lo, hi]; ArgumentError naming the option otherwise.
inline long long parse_integer(const std::string& opt, const std::string& text, long long lo, long long hi) {
  const char* begin = text.c_str();
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(begin, &end, 10);
  if (text.empty() || end != begin + text.size() || errno == ERANGE)
    throw ArgumentError(detail::msg(opt, ": '", text, "' is not an integer"));
  if (v < lo || v > hi) throw ArgumentError(detail::msg(opt, ": ", text, " must be in [", lo, ", ", hi, "]"));
  return v;
}

/// A decimal integer in [1, max].
inline std::uint64_t parse_positive(const std::string& opt, const std::string& text, std::uint64_t max) {
  bool digits = !text.empty();
  for (char c : text) digits = digits && c >= '0' && c <= '9';
  if (!digits) throw ArgumentError(detail::msg(opt, ": '", text, "' is not a positive integer"));
  errno = 0;
  const unsigned long long v = std::strtoull(text.c_str(), nullptr, 10);
  if (errno == ERANGE || v > max) throw ArgumentError(detail::msg(opt, ": ", text, " exceeds the limit ", max));
  if (v == 0) throw ArgumentError(detail::msg(opt, ": 0 must be positive (> 0)"));
  return v;
}

/// A finite decimal number in [min, max] (min itself excluded when `open_min`).
inline double parse_number(const std::string& opt, const std::string& text, double min, bool open_min, double max) {
  const char* begin = text.c_str();
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(begin, &end);
  if (text.empty() || end != begin + text.size() || errno == ERANGE || !std::isfinite(v))
    throw ArgumentError(detail::msg(opt, ": '", text, "' is not a number"));
  if (v < min || (open_min && v == min) || v > max)
    throw ArgumentError(detail::msg(opt, ": ", text, " must be in ", open_min ? "(" : "[", min, ", ", max, "]"));
  return v;
}

/// s as a quoted JSON string.
inline std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

/// v as a JSON number with 10 significant digits.
inline std::string json_number(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.10g", v);
  return buf;
}

/// Runs body(); ArgumentError -> message and exit status 2, other kvd::Error -> 1.
inline int run_main(const char* program, const std::function<int()>& body) {
  try {
    return body();
  } catch (const ArgumentError& e) {
    std::cerr << program << ": " << e.what() << "\n(run " << program << " --help for usage)\n";
    return 2;
  } catch (const Error& e) {
    std::cerr << program << ": " << e.what() << '\n';
    return 1;
  }
}

}  // namespace kvd::cli
