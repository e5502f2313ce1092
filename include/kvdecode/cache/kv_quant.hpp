// How one K or V block of the cache is stored, per storage type: the plain
// element types (float, double, bfloat16, half) one value per element, and the
// block types q8_0 and q4_0 (CacheQ8_0, CacheQ4_0), 32 values along the head
// dimension sharing one f16 scale. KVStore<S> is the one row of facts per type:
// bytes per cache block, how a position's K or V is written, and the reference
// a kernel reads through (a plain pointer, or a QuantRef that decodes).
//
// The q8_0 / q4_0 rounding (written once, here; tests hold it to a double oracle):
//   x   = float(value)                           (a double model rounds to float first)
//   q8_0: d = amax / 127, amax = max |x| over the 32     (float division)
//   q4_0: d = m / -8, m = the x of largest |x| (the first on ties)
//   q   = round-half-away(float(x / d)), clamped to [-127, 127] or [-8, 7];
//         0 when half(d) == 0 (every value then reads as 0 anyway)
//   stored: q and half(d) (round to nearest even)
// Quantizing the values a block reads back gives that block again (its largest
// code is 127 or -8, so d comes back as half(d) exactly): a file can be checked
// for blocks no writer produces, and restoring re-quantizes without a change.
//   read:   float(q) * float(half(d))  — exact in float (8 + 11 significant bits)
// so every path that reads a stored value reads the same bits, and the cache-free
// reference gets them with quantize_round_trip().
//
// Layout inside a 16-position block (i = the value's index as for a plain type):
//   K (n_kv_heads, head_dim, 16): the 32 values of one scale run along d at one
//     lane, so scale (h, d / 32, lane) = index (i / 512) * 16 + i % 16; q4 packs
//     d pairs at one lane: byte (i / 32) * 16 + i % 16, high nibble for odd d.
//   V (n_kv_heads, 16, head_dim): scale i / 32; q4 byte i / 2, high nibble for odd d.
// The scales (f16) follow the codes: [codes | scales] per K or V block. A
// position's bytes are never shared with another position's, so rows written
// in parallel never touch the same byte.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kvdecode/core/dtype.hpp"
#include "kvdecode/core/simd.hpp"
#include "kvdecode/error.hpp"

namespace kvd {
namespace detail {

/// Values per q8_0 / q4_0 block (along the head dimension).
inline constexpr int kQuantBlock = 32;

/// Converts a compute value to the storage type (round to nearest even) and back.
template <class S, class T>
inline S to_storage(T x) {
  if constexpr (std::is_same_v<S, T>) return x;
  else if constexpr (std::is_floating_point_v<S>) return static_cast<S>(x);
  else return S(static_cast<float>(x));
}
template <class T, class S>
inline T from_storage(S x) {
  if constexpr (std::is_same_v<S, T>) return x;
  else return static_cast<T>(static_cast<float>(x));
}

/// Quantizes 32 values x to q8_0 (see the top of this file): writes q[32], returns d.
template <class T>
inline Eigen::half quantize_q8_0(const T* x, std::int8_t* q) {
  float xf[kQuantBlock];
  float amax = 0.0f;
  for (int j = 0; j < kQuantBlock; ++j) {
    xf[j] = static_cast<float>(x[j]);
    amax = std::max(amax, std::fabs(xf[j]));
  }
  const float d = amax / 127.0f;
  const Eigen::half dh(d);
  for (int j = 0; j < kQuantBlock; ++j) {
    float r = static_cast<float>(dh) != 0.0f ? xf[j] / d : 0.0f;
    if (!(std::fabs(r) <= 127.0f)) r = r > 0.0f ? 127.0f : (r < 0.0f ? -127.0f : 0.0f);  // NaN -> 0
    q[j] = static_cast<std::int8_t>(std::round(r));
  }
  return dh;
}

/// Quantizes 32 values x to q4_0 (see the top of this file): writes q[32] in [-8, 7], returns d.
template <class T>
inline Eigen::half quantize_q4_0(const T* x, std::int8_t* q) {
  float xf[kQuantBlock];
  float amax = 0.0f, m = 0.0f;
  for (int j = 0; j < kQuantBlock; ++j) {
    xf[j] = static_cast<float>(x[j]);
    if (std::fabs(xf[j]) > amax) {
      amax = std::fabs(xf[j]);
      m = xf[j];
    }
  }
  const float d = m / -8.0f;
  const Eigen::half dh(d);
  for (int j = 0; j < kQuantBlock; ++j) {
    float r = static_cast<float>(dh) != 0.0f ? xf[j] / d : 0.0f;
    r = r == r ? std::min(7.0f, std::max(-8.0f, r)) : 0.0f;
    q[j] = static_cast<std::int8_t>(std::round(r));
  }
  return dh;
}

/// The value a stored code q with scale d stands for: float(q) * float(d), exact.
inline float dequantize(int q, Eigen::half d) { return static_cast<float>(q) * static_cast<float>(d); }

/// A read-only reference into a quantized K (kKey) or V block, at value index i
/// (see the layout at the top of this file); behaves like a pointer to values
/// for the attention kernels: p + n, p[n], *p.
template <int kBits, bool kKey>
struct QuantRef {
  const std::uint8_t* q = nullptr;  // the block's codes
  const Eigen::half* d = nullptr;   // the block's scales
  long i = 0;                       // value index inside the block

  QuantRef operator+(long n) const { return {q, d, i + n}; }
  float operator[](long n) const { return value(i + n); }
  float operator*() const { return value(i); }

  static long scale_index(long e) { return kKey ? (e >> 9) * 16 + (e & 15) : e >> 5; }
  int code(long e) const {
    if constexpr (kBits == 8) {
      return static_cast<std::int8_t>(q[e]);
    } else {
      const long byte = kKey ? (e >> 5) * 16 + (e & 15) : e >> 1;
      const int shift = kKey ? static_cast<int>((e >> 4) & 1) * 4 : static_cast<int>(e & 1) * 4;
      return ((q[byte] >> shift) & 15) - 8;
    }
  }
  float value(long e) const { return dequantize(code(e), d[scale_index(e)]); }
};

/// Loads the 16 values [p.i, p.i + 16) as a compute vector; p.i is a multiple of
/// 16 (every kernel reads whole lanes or whole 16-value runs of a V row).
template <class T, int kBits, bool kKey>
inline Vec16<T> load_lanes(const QuantRef<kBits, kKey>& p) {
  T tmp[kLanes];
  const long i = p.i;
  if constexpr (kKey) {  // 16 lanes of one d: 16 scales, one per lane
    const Eigen::half* s = p.d + (i >> 9) * 16;
    if constexpr (kBits == 8) {
      const std::int8_t* c = reinterpret_cast<const std::int8_t*>(p.q) + i;
      for (int j = 0; j < kLanes; ++j) tmp[j] = static_cast<T>(dequantize(c[j], s[j]));
    } else {
      const std::uint8_t* c = p.q + (i >> 5) * 16;
      const int shift = static_cast<int>((i >> 4) & 1) * 4;
      for (int j = 0; j < kLanes; ++j) tmp[j] = static_cast<T>(dequantize(((c[j] >> shift) & 15) - 8, s[j]));
    }
  } else {  // 16 consecutive d of one position: one scale
    const Eigen::half s = p.d[i >> 5];
    if constexpr (kBits == 8) {
      const std::int8_t* c = reinterpret_cast<const std::int8_t*>(p.q) + i;
      for (int j = 0; j < kLanes; ++j) tmp[j] = static_cast<T>(dequantize(c[j], s));
    } else {
      const std::uint8_t* c = p.q + (i >> 1);
      for (int j = 0; j < kLanes / 2; ++j) {
        tmp[2 * j] = static_cast<T>(dequantize((c[j] & 15) - 8, s));
        tmp[2 * j + 1] = static_cast<T>(dequantize((c[j] >> 4) - 8, s));
      }
    }
  }
  return Vec16<T>::load(tmp);
}

/// KVStore<S>: how a K or V block of `elems` values (n_kv_heads * head_dim * 16)
/// is stored in storage type S. The plain element types:
template <class S>
struct KVStore {
  static constexpr bool kQuantized = false;
  using KRef = const S*;  // what k_block() returns
  using VRef = const S*;  // what v_block() returns
  /// Bytes of one K or V block.
  static std::size_t bytes(std::size_t elems) { return elems * sizeof(S); }
  static KRef k_ref(const std::uint8_t* p, std::size_t) { return reinterpret_cast<const S*>(p); }
  static VRef v_ref(const std::uint8_t* p, std::size_t) { return reinterpret_cast<const S*>(p); }
  /// Nothing to check: any head_dim fits.
  static void check_head_dim(int, const char*) {}
  /// Writes one position's K (n_kv_heads * head_dim values) into lane `lane` of K block kb.
  template <class T>
  static void store_k(std::uint8_t* kb, std::size_t, int lane, const T* k, int n_kv_heads, int head_dim) {
    S* p = reinterpret_cast<S*>(kb);
    for (int h = 0; h < n_kv_heads; ++h)
      for (int d = 0; d < head_dim; ++d) p[(h * head_dim + d) * kLanes + lane] = to_storage<S>(k[h * head_dim + d]);
  }
  /// Writes one position's V into lane `lane` of V block vb.
  template <class T>
  static void store_v(std::uint8_t* vb, std::size_t, int lane, const T* v, int n_kv_heads, int head_dim) {
    S* p = reinterpret_cast<S*>(vb);
    for (int h = 0; h < n_kv_heads; ++h)
      for (int d = 0; d < head_dim; ++d) p[(h * kLanes + lane) * head_dim + d] = to_storage<S>(v[h * head_dim + d]);
  }
  /// x (n) -> the values a cache of type S reads back for them (one head row or more).
  template <class T>
  static void round_trip(T* x, long n) {
    for (long j = 0; j < n; ++j) x[j] = from_storage<T>(to_storage<S>(x[j]));
  }
};

/// The block types: codes then f16 scales, as laid out at the top of this file.
template <int kBits>
struct KVStoreQuant {
  static constexpr bool kQuantized = true;
  using KRef = QuantRef<kBits, true>;
  using VRef = QuantRef<kBits, false>;
  static std::size_t code_bytes(std::size_t elems) { return elems * kBits / 8; }
  static std::size_t bytes(std::size_t elems) { return code_bytes(elems) + elems / kQuantBlock * sizeof(Eigen::half); }
  static KRef k_ref(const std::uint8_t* p, std::size_t elems) {
    return {p, reinterpret_cast<const Eigen::half*>(p + code_bytes(elems)), 0};
  }
  static VRef v_ref(const std::uint8_t* p, std::size_t elems) {
    return {p, reinterpret_cast<const Eigen::half*>(p + code_bytes(elems)), 0};
  }
  /// Throws ConfigError naming head_dim unless it is a multiple of 32 (`what` names the cache).
  static void check_head_dim(int head_dim, const char* what) {
    if (head_dim % kQuantBlock != 0)
      throw ConfigError(msg(what, ": head_dim ", head_dim, " is not a multiple of ", kQuantBlock, ", the ",
                            kBits == 8 ? "q8_0" : "q4_0", " block length along the head dimension"));
  }
  template <class T>
  static Eigen::half quantize(const T* x, std::int8_t* q) {
    return kBits == 8 ? quantize_q8_0(x, q) : quantize_q4_0(x, q);
  }
  template <class T>
  static void store_k(std::uint8_t* kb, std::size_t elems, int lane, const T* k, int n_kv_heads, int head_dim) {
    Eigen::half* scales = reinterpret_cast<Eigen::half*>(kb + code_bytes(elems));
    std::int8_t q[kQuantBlock];
    for (int h = 0; h < n_kv_heads; ++h)
      for (int c = 0; c < head_dim / kQuantBlock; ++c) {
        const long e0 = (static_cast<long>(h) * head_dim + c * kQuantBlock) * kLanes + lane;  // index of d = 32c
        scales[KRef::scale_index(e0)] = quantize(k + h * head_dim + c * kQuantBlock, q);
        for (int j = 0; j < kQuantBlock; ++j) {
          const long e = e0 + static_cast<long>(j) * kLanes;
          if constexpr (kBits == 8) {
            kb[e] = static_cast<std::uint8_t>(q[j]);
          } else {
            std::uint8_t& byte = kb[(e >> 5) * 16 + (e & 15)];
            const int shift = static_cast<int>((e >> 4) & 1) * 4;
            byte = static_cast<std::uint8_t>((byte & (0xF0 >> shift)) | ((q[j] + 8) << shift));
          }
        }
      }
  }
  template <class T>
  static void store_v(std::uint8_t* vb, std::size_t elems, int lane, const T* v, int n_kv_heads, int head_dim) {
    Eigen::half* scales = reinterpret_cast<Eigen::half*>(vb + code_bytes(elems));
    std::int8_t q[kQuantBlock];
    for (int h = 0; h < n_kv_heads; ++h)
      for (int c = 0; c < head_dim / kQuantBlock; ++c) {
        const long e0 = (static_cast<long>(h) * kLanes + lane) * head_dim + c * kQuantBlock;
        scales[VRef::scale_index(e0)] = quantize(v + h * head_dim + c * kQuantBlock, q);
        for (int j = 0; j < kQuantBlock; ++j) {
          if constexpr (kBits == 8) {
            vb[e0 + j] = static_cast<std::uint8_t>(q[j]);
          } else if (j % 2 == 0) {
            vb[(e0 + j) >> 1] = static_cast<std::uint8_t>((q[j] + 8) | ((q[j + 1] + 8) << 4));
          }
        }
      }
  }
  /// x (n, a multiple of 32: whole blocks along one head row or more) -> the values
  /// a cache of this type reads back for them.
  template <class T>
  static void round_trip(T* x, long n) {
    std::int8_t q[kQuantBlock];
    for (long b = 0; b + kQuantBlock <= n; b += kQuantBlock) {
      const Eigen::half d = quantize(x + b, q);
      for (int j = 0; j < kQuantBlock; ++j) x[b + j] = static_cast<T>(dequantize(q[j], d));
    }
  }
};
template <>
struct KVStore<CacheQ8_0> : KVStoreQuant<8> {};
template <>
struct KVStore<CacheQ4_0> : KVStoreQuant<4> {};

}  // namespace detail
}  // namespace kvd
