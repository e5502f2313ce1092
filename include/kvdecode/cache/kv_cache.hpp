// KVCache: the keys and values of every past position, per layer, stored
// contiguously. Under the causal mask a token's K and V depend only on that
// token and the ones before it, so once written they never change; keeping
// them turns each decode step's projection work from O(pos) into O(1).
//
// Storage is in blocks of 16 positions (kLanes), the unit the attention
// kernel reads, so a contiguous cache and a paged one serve the same kernel:
//   K block: (n_kv_heads, head_dim, 16)   position-minor, so 16 scores are one vector
//   V block: (n_kv_heads, 16, head_dim)   position-major, so out += w_t * v_t is a vector op
// Layout of the whole cache: the layers in order, each (its blocks, [K block | V block]).
//
// The storage types are S for keys and SV (default S) for values: float, double,
// Eigen::bfloat16, Eigen::half, or the block types CacheQ8_0 / CacheQ4_0 (32
// values along the head dimension per f16 scale; see KVStore below); compute happens
// in T. Values are rounded to the storage type when written, and every reader
// sees the stored value.
//
// A layer that attends to a window of W positions (ModelConfig::layer_window: the
// whole model's sliding_window, or local_window for the local layers of a
// swa_pattern model such as Gemma 3 or gpt-oss) keeps only those: a ring of
// blocks, block b living in slot b % ring_blocks of that layer. The ring also has
// room for the rows of one call (max_append() positions), because every row of a
// call writes its K and V before any row reads; Transformer::prefill splits
// longer prompts into chunks, which is exact. Layers without a window (a
// swa_pattern model's global layers) keep every position up to the capacity, so
// each layer has its own number of blocks (detail::window_ring_blocks, the one
// ring-size rule). LocalLayers::kEveryPosition builds a swa_pattern model's cache
// with every position in every layer instead (what a cache file needs, below).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "kvdecode/core/config.hpp"
#include "kvdecode/core/dtype.hpp"
#include "kvdecode/error.hpp"
#include "kvdecode/core/parallel.hpp"
#include "kvdecode/core/simd.hpp"

namespace kvd {

namespace detail {

// ---- Storage per type (KVStore): how one K or V block of the cache is stored,
// per storage type. The plain element types (float, double, bfloat16, half) one value per element, and the
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

#if defined(KVDECODE_VEC_AVX512) || defined(KVDECODE_VEC_AVX2)
/// The 16 codes [p.i, p.i + 16) as signed bytes; p.i is a multiple of 16.
template <int kBits, bool kKey>
KVD_ALWAYS_INLINE inline __m128i quant_codes16(const QuantRef<kBits, kKey>& p) {
  const long i = p.i;
  if constexpr (kBits == 8) {
    return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p.q + i));
  } else if constexpr (kKey) {  // 16 lanes of one d: one nibble of 16 consecutive bytes
    __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p.q + (i >> 5) * 16));
    if ((i >> 4) & 1) bytes = _mm_srli_epi16(bytes, 4);
    return _mm_sub_epi8(_mm_and_si128(bytes, _mm_set1_epi8(15)), _mm_set1_epi8(8));
  } else {  // 16 consecutive d of one position: 8 bytes, low nibble first
    const __m128i b8 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p.q + (i >> 1)));
    const __m128i lo = _mm_and_si128(b8, _mm_set1_epi8(15));
    const __m128i hi = _mm_and_si128(_mm_srli_epi16(b8, 4), _mm_set1_epi8(15));
    return _mm_sub_epi8(_mm_unpacklo_epi8(lo, hi), _mm_set1_epi8(8));
  }
}
#endif

/// Loads the 16 values [p.i, p.i + 16) as a compute vector; p.i is a multiple of
/// 16 (every kernel reads whole lanes or whole 16-value runs of a V row). Each value
/// is float(q) * float(d), the same exact product every other reader forms: in
/// AVX-512 or AVX2 registers for a float model, otherwise in loops written so that
/// the compiler vectorizes them (the f16 scales convert as one vector).
template <class T, int kBits, bool kKey>
KVD_ALWAYS_INLINE inline Vec16<T> load_lanes(const QuantRef<kBits, kKey>& p) {
  const long i = p.i;
#if defined(KVDECODE_VEC_AVX512)
  // The maskz forms with an all-ones mask are the plain instructions (see core/simd.hpp).
  if constexpr (std::is_same_v<T, float>) {
    const __m512 code =
        _mm512_maskz_cvtepi32_ps(__mmask16(0xFFFF), _mm512_maskz_cvtepi8_epi32(__mmask16(0xFFFF), quant_codes16(p)));
    __m512 scale;
    if constexpr (kKey)
      scale = _mm512_maskz_cvtph_ps(__mmask16(0xFFFF), _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p.d + (i >> 9) * 16)));
    else
      scale = _mm512_set1_ps(static_cast<float>(p.d[i >> 5]));
    return Vec16<T>{_mm512_maskz_mul_ps(__mmask16(0xFFFF), code, scale)};
  }
#elif defined(KVDECODE_VEC_AVX2)
  if constexpr (std::is_same_v<T, float>) {
    const __m128i bytes = quant_codes16(p);
    const __m256 code_lo = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(bytes));
    const __m256 code_hi = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_unpackhi_epi64(bytes, bytes)));
    if constexpr (kKey) {
      const Vec16<float> scale = Vec16<float>::load_f16(reinterpret_cast<const std::uint16_t*>(p.d + (i >> 9) * 16));
      return Vec16<T>{_mm256_mul_ps(code_lo, scale.lo), _mm256_mul_ps(code_hi, scale.hi)};
    } else {
      const __m256 scale = _mm256_set1_ps(static_cast<float>(p.d[i >> 5]));
      return Vec16<T>{_mm256_mul_ps(code_lo, scale), _mm256_mul_ps(code_hi, scale)};
    }
  }
#endif
  float code[kLanes], scale[kLanes], out[kLanes];
  if constexpr (kBits == 8) {
    const std::int8_t* c = reinterpret_cast<const std::int8_t*>(p.q) + i;
    for (int j = 0; j < kLanes; ++j) code[j] = static_cast<float>(c[j]);
  } else if constexpr (kKey) {  // 16 lanes of one d: one nibble of 16 consecutive bytes
    const std::uint8_t* c = p.q + (i >> 5) * 16;
    const int shift = static_cast<int>((i >> 4) & 1) * 4;
    for (int j = 0; j < kLanes; ++j) code[j] = static_cast<float>(((c[j] >> shift) & 15) - 8);
  } else {  // 16 consecutive d of one position: 8 bytes, low nibble first
    const std::uint8_t* c = p.q + (i >> 1);
    for (int j = 0; j < kLanes / 2; ++j) {
      code[2 * j] = static_cast<float>((c[j] & 15) - 8);
      code[2 * j + 1] = static_cast<float>((c[j] >> 4) - 8);
    }
  }
  if constexpr (kKey) {  // 16 lanes: 16 scales, one per lane
    Vec16<float>::load_f16(reinterpret_cast<const std::uint16_t*>(p.d + (i >> 9) * 16)).store(scale);
  } else {
    const float s = static_cast<float>(p.d[i >> 5]);
    for (int j = 0; j < kLanes; ++j) scale[j] = s;
  }
  for (int j = 0; j < kLanes; ++j) out[j] = code[j] * scale[j];
  if constexpr (std::is_same_v<T, float>) {
    return Vec16<T>::load(out);
  } else {
    T wide[kLanes];
    for (int j = 0; j < kLanes; ++j) wide[j] = static_cast<T>(out[j]);
    return Vec16<T>::load(wide);
  }
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

/// a * b for a cache size, or ConfigError naming `what` if the product does not fit in
/// size_t. ModelConfig::validate() already bounds every product a valid config forms;
/// this keeps each size formed in the caches checked where it is formed.
inline std::size_t cache_size_mul(std::size_t a, std::size_t b, const char* what) {
  std::size_t r = 0;
  if (__builtin_mul_overflow(a, b, &r))
    throw ConfigError(msg(what, ": ", a, " x ", b, " overflows size_t (limit ", static_cast<std::size_t>(-1), ")"));
  return r;
}

/// Rows one call appends to a window ring by default (KVCache's max_append = 0).
inline constexpr int kDefaultWindowChunk = 64;

/// The one ring-size rule: blocks of `block` positions that a ring for a window of
/// `window` positions keeps when one call appends at most `max_append` positions.
/// Every row of a call writes its K and V before any row reads, so the ring spans
/// the window of the call's first row up to its last row (window + max_append - 1
/// positions; position p lives at p mod the ring's positions), in blocks, plus one
/// block to spare; never more than the `capacity` positions rounded up to blocks.
/// window = 0 (every position kept) gives the capacity's blocks. Preconditions:
/// capacity, max_append and block positive, capacity below 2^30 (KVCache's
/// constructor and the planner make sure). Never throws.
inline int window_ring_blocks(int window, int max_append, int capacity, int block) {
  const int all_blocks = (capacity + block - 1) / block;
  if (window <= 0) return all_blocks;
  const long span = static_cast<long>(window) + max_append - 1;
  const long ring = (span + block - 1) / block + 1;
  return ring < all_blocks ? static_cast<int>(ring) : all_blocks;
}
}  // namespace detail

/// The shape a cache must agree with: layers, KV heads and head width, whether
/// its heads are stored rotated (a rotated cache means nothing to an unrotated model),
/// and which layers attend to a window (a ring built for one layer pattern cannot
/// serve another).
struct CacheShape {
  int n_layers = 0, n_kv_heads = 0, head_dim = 0, max_seq_len = 0;
  int sliding_window = 0;  ///< 0 = every past position is kept
  KVRotation rotation = KVRotation::kNone;  ///< heads stored rotated (ModelConfig::kv_rotation)
  int swa_pattern = 0, local_window = 0;    ///< the local layers (ModelConfig's; 0 = none)
  static CacheShape of(const ModelConfig& c) {
    return {c.n_layers, c.n_kv_heads, c.head_dim, c.max_seq_len, c.sliding_window, c.kv_rotation,
            c.swa_pattern, c.local_window};
  }
  bool operator==(const CacheShape& o) const {
    return n_layers == o.n_layers && n_kv_heads == o.n_kv_heads && head_dim == o.head_dim &&
           max_seq_len == o.max_seq_len && sliding_window == o.sliding_window && rotation == o.rotation &&
           swa_pattern == o.swa_pattern && local_window == o.local_window;
  }
  bool operator!=(const CacheShape& o) const { return !(*this == o); }
};

/// What a cache for a model with local layers (ModelConfig::swa_pattern) keeps of them.
enum class LocalLayers {
  kWindow,         ///< a ring of local_window + max_append positions per local layer (the default)
  kEveryPosition,  ///< every position up to the capacity, as the global layers
};

/// A contiguous KV cache for one sequence, holding up to capacity() positions.
/// T is the compute scalar, S the keys' storage type and SV the values'.
template <class T, class S = T, class SV = S>
class KVCache {
 public:
  using Scalar = T;
  using Storage = S;        ///< keys
  using ValueStorage = SV;  ///< values
  using KRef = typename detail::KVStore<S>::KRef;   ///< what k_block() returns
  using VRef = typename detail::KVStore<SV>::VRef;  ///< what v_block() returns
  static constexpr int kBlock = detail::kLanes;  ///< positions per block

  /// Default rows per call for a sliding-window cache (longer prefills are split).
  static constexpr int kDefaultWindowChunk = detail::kDefaultWindowChunk;

  /// A cache for `config`'s shape holding up to `capacity` positions (0 = max_seq_len).
  /// Allocates everything up front: per layer, capacity positions, or for a layer
  /// that attends to a window of W positions (config.layer_window: sliding_window,
  /// or local_window for a local layer) only a ring of W + max_append positions
  /// (rounded up to blocks), where max_append (0 = kDefaultWindowChunk) is the most
  /// positions one call may append. With `local` = LocalLayers::kEveryPosition the
  /// local layers of a swa_pattern model keep every position too (sliding_window
  /// rings stay). Throws ConfigError if config is invalid, capacity is outside
  /// [1, max_seq_len], max_append is negative, a block type (q8_0, q4_0) meets a
  /// head_dim that is not a multiple of 32, or a size overflows; std::bad_alloc if
  /// the memory is not there.
  explicit KVCache(const ModelConfig& config, int capacity = 0, int max_append = 0,
                   LocalLayers local = LocalLayers::kWindow) {
    config.validate();
    detail::KVStore<S>::check_head_dim(config.head_dim, "KVCache keys");
    detail::KVStore<SV>::check_head_dim(config.head_dim, "KVCache values");
    if (capacity == 0) capacity = config.max_seq_len;
    if (capacity < 1 || capacity > config.max_seq_len)
      throw ConfigError(detail::msg("KVCache capacity ", capacity, " must be in [1, max_seq_len = ", config.max_seq_len, "]"));
    if (max_append < 0) throw ConfigError(detail::msg("KVCache max_append ", max_append, " must be >= 0"));
    shape_ = CacheShape::of(config);
    capacity_ = capacity;
    window_.assign(static_cast<std::size_t>(shape_.n_layers), 0);
    bool any_window = false;
    for (int l = 0; l < shape_.n_layers; ++l) {
      const bool keep_all = local == LocalLayers::kEveryPosition && config.layer_local(l);
      window_[l] = keep_all ? 0 : config.layer_window(l);
      any_window = any_window || window_[l] > 0;
    }
    max_append_ = any_window ? std::min(capacity, max_append > 0 ? max_append : kDefaultWindowChunk) : capacity;
    blocks_.assign(static_cast<std::size_t>(shape_.n_layers), 0);
    first_block_.assign(static_cast<std::size_t>(shape_.n_layers), 0);
    std::size_t total_blocks = 0;
    for (int l = 0; l < shape_.n_layers; ++l) {
      blocks_[l] = detail::window_ring_blocks(window_[l], max_append_, capacity, kBlock);
      first_block_[l] = total_blocks;
      total_blocks += static_cast<std::size_t>(blocks_[l]);
    }
    using detail::cache_size_mul;
    const std::size_t block_elems = cache_size_mul(
        cache_size_mul(static_cast<std::size_t>(shape_.n_kv_heads), static_cast<std::size_t>(shape_.head_dim),
                       "KVCache n_kv_heads x head_dim"),
        kBlock, "KVCache block elements");  // one of K or V
    cache_size_mul(block_elems, 8, "KVCache block bytes");
    k_bytes_ = detail::KVStore<S>::bytes(block_elems);
    v_bytes_ = detail::KVStore<SV>::bytes(block_elems);
    const std::size_t bytes = cache_size_mul(total_blocks, k_bytes_ + v_bytes_, "KVCache bytes");
    block_elems_ = static_cast<long>(block_elems);
    data_.resize(bytes);
  }

  KVCache(const KVCache&) = delete;             // big: copy explicitly with copy()
  KVCache& operator=(const KVCache&) = delete;
  KVCache(KVCache&&) noexcept = default;
  KVCache& operator=(KVCache&&) noexcept = default;

  /// An explicit deep copy (same shape, capacity, contents and length).
  KVCache copy() const {
    KVCache c;
    c.shape_ = shape_; c.capacity_ = capacity_; c.block_elems_ = block_elems_; c.length_ = length_;
    c.window_ = window_; c.blocks_ = blocks_; c.first_block_ = first_block_;
    c.k_bytes_ = k_bytes_; c.v_bytes_ = v_bytes_;
    c.max_append_ = max_append_; c.high_water_ = high_water_; c.restored_first_ = restored_first_;
    c.data_.resize(data_.size());
    std::memcpy(static_cast<void*>(c.data_.data()), data_.data(), data_.size());
    return c;
  }

  const CacheShape& shape() const { return shape_; }
  int length() const { return length_; }      ///< positions stored: [0, length)
  int capacity() const { return capacity_; }  ///< most positions the sequence can reach
  int max_append() const { return max_append_; }  ///< most positions one call may append
  int sliding_window() const { return shape_.sliding_window; }
  /// Oldest position a future row can attend to (0 without a sliding window).
  int first_position() const { return detail::first_visible(length_, shape_.sliding_window); }
  /// Positions the allocation holds for layer `layer` (in [0, n_layers); asserted).
  int stored_positions(int layer = 0) const { return blocks_[checked_layer(layer)] * kBlock; }
  /// The window layer `layer`'s ring keeps (0 = every position up to the capacity).
  int layer_window(int layer) const { return window_[checked_layer(layer)]; }
  DType dtype() const { return DTypeOf<S>::value; }         ///< the keys' storage type
  DType value_dtype() const { return DTypeOf<SV>::value; }  ///< the values' storage type

  /// Bytes one position takes: n_layers * n_kv_heads * (bytes of head_dim keys + of head_dim values).
  std::uint64_t bytes_per_token() const {
    return static_cast<std::uint64_t>(shape_.n_layers) * shape_.n_kv_heads *
           (dtype_bytes_for(DTypeOf<S>::value, shape_.head_dim) + dtype_bytes_for(DTypeOf<SV>::value, shape_.head_dim));
  }
  /// Bytes of the sequence's positions the layers hold: bytes_per_token() * length()
  /// without window rings; a ring holds only its layer's newest positions.
  std::uint64_t bytes_used() const {
    std::uint64_t held = 0;  // layer-positions
    for (int l = 0; l < shape_.n_layers; ++l) held += static_cast<std::uint64_t>(std::max(0, length_ - oldest_resident(l)));
    return bytes_per_token() / static_cast<std::uint64_t>(shape_.n_layers) * held;
  }
  std::uint64_t bytes_reserved() const { return static_cast<std::uint64_t>(data_.size()); }  ///< allocated

  /// Forgets every position (keeps the allocation).
  void clear() { length_ = 0; high_water_ = 0; restored_first_ = 0; }

  /// Rewinds to `length` positions, dropping [length, this->length()).
  /// Throws CacheFullError (nothing changed) if length is outside [0, this->length()],
  /// or, for a layer with a window ring, if positions the rewound sequence would
  /// attend to in that layer have already been overwritten in its ring (or were never
  /// restored).
  void truncate(int length) {
    if (length < 0 || length > length_)
      throw CacheFullError(detail::msg("cannot truncate cache to ", length, " positions: it holds ", length_));
    if (length > 0) {
      for (int l = 0; l < shape_.n_layers; ++l) {
        const int oldest_needed = detail::first_visible(length, window_[l]);
        if (oldest_resident(l) > oldest_needed)
          throw CacheFullError(detail::msg("cannot rewind this sliding-window cache to ", length, " positions: position ",
                                           oldest_needed, " was overwritten; the oldest kept is ", oldest_resident(l),
                                           shape_.swa_pattern > 0 ? detail::msg(" (layer ", l, ", window ", window_[l], ")")
                                                                  : std::string()));
      }
    }
    length_ = length;
  }

  /// Appends one position: k and v are (n_layers, n_kv_heads * head_dim).
  /// Throws CacheFullError (nothing changed) when length() == capacity().
  void append(const T* k, const T* v) {
    check_room(1);
    const long kv_dim = static_cast<long>(shape_.n_kv_heads) * shape_.head_dim;
    for (int l = 0; l < shape_.n_layers; ++l) write(l, length_, k + l * kv_dim, v + l * kv_dim);
    length_ += 1;
  }

  /// K[layer][pos][kv_head][d] as T. Precondition (asserted): first_position() <= pos < length().
  T key(int layer, int pos, int kv_head, int d) const {
    KVD_ASSERT(pos >= oldest_resident(layer) && pos < length_);
    return detail::from_storage<T>(k_block(layer, pos / kBlock)[(kv_head * shape_.head_dim + d) * kBlock + pos % kBlock]);
  }
  /// V[layer][pos][kv_head][d] as T. Precondition (asserted): first_position() <= pos < length().
  T value(int layer, int pos, int kv_head, int d) const {
    KVD_ASSERT(pos >= oldest_resident(layer) && pos < length_);
    return detail::from_storage<T>(v_block(layer, pos / kBlock)[(kv_head * kBlock + pos % kBlock) * shape_.head_dim + d]);
  }

  // ---- The cache interface the forward pass uses (cache_interface.hpp, checked
  // there by is_kv_cache_v); a paged cache implements the same. k_block/v_block take
  // the absolute block index b = pos / 16 and return the 16-position block holding
  // positions [16b, 16b + 16). ----

  /// Throws CacheFullError (nothing changed) unless n more positions fit, in one call.
  void check_room(int n) const {
    if (n > capacity_ - length_)
      throw CacheFullError(detail::msg("KV cache full: appending ", n, " position(s) to ", length_,
                                       " would exceed its capacity of ", capacity_));
    if (n > max_append_)
      throw CacheFullError(detail::msg("sliding-window cache: appending ", n, " positions in one call exceeds its max_append of ",
                                       max_append_, " (Transformer::prefill splits longer prompts itself)"));
  }
  /// Makes positions [length, length + n) writable (contiguous: nothing to do). check_room(n) must hold.
  void prepare_append(int /*n*/) {}
  /// Writes one position's K and V (each n_kv_heads * head_dim) for one layer; pos < capacity.
  void write(int layer, int pos, const T* k, const T* v) {
    std::uint8_t* kb = block_bytes(layer, pos / kBlock);
    detail::KVStore<S>::store_k(kb, block_elems_, pos % kBlock, k, shape_.n_kv_heads, shape_.head_dim);
    detail::KVStore<SV>::store_v(kb + k_bytes_, block_elems_, pos % kBlock, v, shape_.n_kv_heads, shape_.head_dim);
  }
  /// Undoes prepare_append(n) when a later cache of the same call could not make room.
  void cancel_append(int /*n*/) {}
  /// Oldest position whose K and V layer `layer` still holds: 0, or with a window
  /// ring the oldest one the ring has not overwritten (or that a restore brought back).
  int oldest_resident(int layer) const {
    const int newest_block = high_water_ > 0 ? (high_water_ - 1) / kBlock : 0;
    return std::max(restored_first_, std::max(0, (newest_block - blocks_[checked_layer(layer)] + 1) * kBlock));
  }
  /// Oldest position whose K and V every layer still holds (the largest oldest_resident(layer)).
  int oldest_resident() const {
    int oldest = restored_first_;
    for (int l = 0; l < shape_.n_layers; ++l) oldest = std::max(oldest, oldest_resident(l));
    return oldest;
  }
  /// After a restore wrote positions [first, length) with write(): makes them the
  /// sequence, with nothing older held. Preconditions (asserted): 0 <= first <= length <= capacity.
  void commit_restored(int first, int length) {
    KVD_ASSERT(0 <= first && first <= length && length <= capacity_);
    length_ = high_water_ = length;
    restored_first_ = first;
  }
  /// Makes n written positions part of the sequence.
  void commit_append(int n) {
    length_ += n;
    high_water_ = std::max(high_water_, length_);
  }
  /// K block b of a layer: (n_kv_heads, head_dim, 16). With a window ring the
  /// block lives in the layer's ring slot b % stored_positions(layer) / 16.
  KRef k_block(int layer, int b) const {
    return detail::KVStore<S>::k_ref(block_bytes(layer, b), block_elems_);
  }
  /// V block b of a layer: (n_kv_heads, 16, head_dim).
  VRef v_block(int layer, int b) const { return detail::KVStore<SV>::v_ref(block_bytes(layer, b) + k_bytes_, block_elems_); }

 private:
  KVCache() = default;
  int checked_layer(int layer) const {
    KVD_ASSERT(layer >= 0 && layer < shape_.n_layers);
    return layer;
  }
  // The bytes of block b's pair [K block | V block] in a layer: slot b % blocks of the layer's run.
  std::size_t block_offset(int layer, int b) const {
    return (first_block_[layer] + static_cast<std::size_t>(b % blocks_[layer])) * (k_bytes_ + v_bytes_);
  }
  const std::uint8_t* block_bytes(int layer, int b) const { return data_.data() + block_offset(layer, b); }
  std::uint8_t* block_bytes(int layer, int b) { return data_.data() + block_offset(layer, b); }

  CacheShape shape_;
  int capacity_ = 0, length_ = 0, max_append_ = 0;
  std::vector<int> window_;               // (n_layers) the window each layer's ring keeps; 0 = every position
  std::vector<int> blocks_;               // (n_layers) blocks each layer holds (its ring slots)
  std::vector<std::size_t> first_block_;  // (n_layers) index of each layer's first block in data_
  int high_water_ = 0;  // most positions ever committed since the last clear (what the ring has overwritten)
  int restored_first_ = 0;  // oldest position a restore brought back (older ones were never written)
  long block_elems_ = 0;                // values in one K or V block: n_kv_heads * head_dim * 16
  std::size_t k_bytes_ = 0, v_bytes_ = 0;  // bytes of one K block, one V block
  detail::AlignedBuffer<std::uint8_t> data_;  // per layer in order, (blocks_[l], [K block | V block]) bytes
};

}  // namespace kvd
