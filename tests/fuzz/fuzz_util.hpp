// Shared by the libFuzzer targets in tests/fuzz (one per input format).
//
// Contract of every target: a kvd::Error is a clean rejection of a bad input;
// any other exception is a finding (reported with its type and message, then
// abort() so that libFuzzer saves the input), as are crashes, sanitizer
// reports, leaks, hangs (-timeout) and allocations over -rss_limit_mb /
// -malloc_limit_mb.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <new>
#include <string>
#include <typeinfo>

#include "kvdecode/error.hpp"

namespace kvd_fuzz {

/// Runs one input: kvd::Error is swallowed, everything else aborts with a message.
template <class F>
void run(F&& body) {
  try {
    body();
  } catch (const kvd::Error&) {
    // clean rejection
  } catch (const std::exception& e) {
    std::fprintf(stderr, "FINDING: %s escaped (not a kvd::Error): %s\n", typeid(e).name(), e.what());
    std::abort();
  } catch (...) {
    std::fprintf(stderr, "FINDING: a non-std exception escaped\n");
    std::abort();
  }
}

/// A scratch file for readers that take a path: one per process and target,
/// under /dev/shm when it exists (no disk traffic), else TMPDIR or /tmp.
inline const std::string& scratch_path(const char* name) {
  static const std::string path = [name] {
    const char* dir = "/dev/shm";
    if (::access(dir, W_OK) != 0) {
      dir = std::getenv("TMPDIR");
      if (dir == nullptr || *dir == '\0') dir = "/tmp";
    }
    return std::string(dir) + "/kvdecode-fuzz-" + std::to_string(::getpid()) + "-" + name;
  }();
  return path;
}

/// Writes the input to the scratch file and returns its path.
inline const std::string& write_scratch(const char* name, const std::uint8_t* data, std::size_t size) {
  const std::string& path = scratch_path(name);
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr || (size > 0 && std::fwrite(data, 1, size, f) != size) || std::fclose(f) != 0) {
    std::fprintf(stderr, "kvdecode fuzz: cannot write the scratch file %s\n", path.c_str());
    std::abort();
  }
  return path;
}

/// Removes the scratch file at exit (libFuzzer exits through exit()).
inline void remove_scratch_at_exit(const char* name) {
  static const std::string path = scratch_path(name);
  std::atexit([] { std::remove(path.c_str()); });
}

/// A short text with ASCII, Latin-1, CJK, an emoji, a control byte and spaces,
/// encoded by the tokenizer targets.
inline const char* kSampleText = "Hello world! Once upon a time, caf\xC3\xA9 \xE4\xB8\xAD\xE6\x96\x87 \xF0\x9F\x98\x80\t 12 345\n";

}  // namespace kvd_fuzz

namespace kvd_fuzz {
/// True if s is well-formed UTF-8 (no overlongs, surrogates or code points > U+10FFFF).
inline bool valid_utf8(const std::string& s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const std::size_t n = s.size();
  for (std::size_t i = 0; i < n;) {
    const unsigned c = p[i];
    std::size_t len = 0;
    unsigned lo = 0x80, hi = 0xBF;
    if (c < 0x80) { ++i; continue; }
    if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c >= 0xE0 && c <= 0xEF) { len = 3; if (c == 0xE0) lo = 0xA0; if (c == 0xED) hi = 0x9F; }
    else if (c >= 0xF0 && c <= 0xF4) { len = 4; if (c == 0xF0) lo = 0x90; if (c == 0xF4) hi = 0x8F; }
    else return false;
    if (i + len > n) return false;
    if (p[i + 1] < lo || p[i + 1] > hi) return false;
    for (std::size_t k = 2; k < len; ++k)
      if (p[i + k] < 0x80 || p[i + k] > 0xBF) return false;
    i += len;
  }
  return true;
}
}  // namespace kvd_fuzz
