// Little-endian byte helpers and a checksum shared by kvdecode's file formats
// (llama2.c checkpoints, saved KV caches).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace kvd::detail {

inline std::uint32_t load_u32_le(const unsigned char* p) {
  return std::uint32_t(p[0]) | std::uint32_t(p[1]) << 8 | std::uint32_t(p[2]) << 16 | std::uint32_t(p[3]) << 24;
}
inline std::uint64_t load_u64_le(const unsigned char* p) { return load_u32_le(p) | std::uint64_t(load_u32_le(p + 4)) << 32; }
inline std::int32_t load_i32_le(const unsigned char* p) {
  const std::uint32_t u = load_u32_le(p);
  std::int32_t v;
  std::memcpy(&v, &u, 4);  // two's complement reinterpretation, no implementation-defined conversion
  return v;
}
inline void store_u32_le(unsigned char* p, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}
inline void store_u64_le(unsigned char* p, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}
inline void store_i32_le(unsigned char* p, std::int32_t v) {
  std::uint32_t u;
  std::memcpy(&u, &v, 4);
  store_u32_le(p, u);
}

/// True on a little-endian host. Tensors are copied byte for byte between files and
/// memory, so the file readers check this at run time (rather than by static_assert,
/// so that merely including kvdecode.hpp still compiles elsewhere).
inline bool host_is_little_endian() {
  const std::uint32_t probe = 1;
  unsigned char first = 0;
  std::memcpy(&first, &probe, 1);
  return first == 1;
}

/// FNV-1a 64: hash = (hash ^ byte) * prime, byte by byte. Each step is a bijection
/// of the state, so any single changed byte always changes the result.
inline constexpr std::uint64_t kFnvOffset = 0xcbf29ce484222325ull;
inline constexpr std::uint64_t kFnvPrime = 0x100000001b3ull;
inline std::uint64_t fnv1a64(const unsigned char* p, std::size_t n, std::uint64_t h = kFnvOffset) {
  for (std::size_t i = 0; i < n; ++i) h = (h ^ p[i]) * kFnvPrime;
  return h;
}

}  // namespace kvd::detail
