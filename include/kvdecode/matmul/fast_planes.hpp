// The fast mode's large-M path (fast_int8.hpp): each panel's (q8_0 without the
// 512-bit planes: each half panel's) codes over all of k decoded once into byte
// planes, then tiles of rows over them. The same integer sums and float steps as the
// small-M tiles (fast_tiles.hpp), so the same bits. Empty unless KVDECODE_FAST_AVX2.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kvdecode/core/isa.hpp"
#include "kvdecode/core/parallel.hpp"
#include "kvdecode/core/simd.hpp"
#include "kvdecode/matmul/dense_kernels.hpp"
#include "kvdecode/matmul/fast_rows.hpp"
#include "kvdecode/matmul/fast_tiles.hpp"
#include "kvdecode/matmul/lane_bits.hpp"
#include "kvdecode/matmul/panel_layout.hpp"
#include "kvdecode/matmul/quant_decode_avx2.hpp"
#include "kvdecode/matmul/static_for.hpp"

namespace kvd::detail {

#if defined(KVDECODE_FAST_AVX2)
// ---- Large M (prefill): the codes decoded once into byte planes ---------------------
// The small-M tiles (fast_tiles.hpp) rebuild every code for each tile of at most 4
// rows (q8_0: transpose its bytes), which costs about as much as the integer
// products. For large M each half panel's codes over all of k are decoded once, per
// thread, into byte planes: per sub-block of S values, S / 4 vectors of 32 bytes
// (a panel's two halves side by side: 64), vector v holding the 4 values of 8
// outputs whose rounded activations are the row's bytes [k0 + 4 v, k0 + 4 v + 4)
// (the rows' order makes that so for every type), as
// unsigned codes (the type's offset is subtracted after the integer sum, as in
// those tiles). q8_0 without VNNI: its signed codes as 16-bit pairs, twice the bytes,
// multiplied by the rows' activations, also as 16-bit pairs, with vpmaddwd. The same
// integer sums and float steps, so the same bits.

/// Sub-block s of half h of panel block pb as byte planes (out: Dec::kSub / 4
/// vectors of 32 bytes, vstride bytes apart; q8_0 without VNNI: two vectors of 16-bit
/// pairs at each, the second 32 bytes after the first) and its scales D (8 floats) and
/// offsets N (8 floats, types with a min).
template <class Dec>
inline void fast_planes_avx2(const unsigned char* pb, int s, int h, unsigned char* out, float* D, float* N,
                             long vstride = 32) {
  Dec dec;
  dec.begin(pb, s, h);
  _mm256_storeu_ps(D, dec.D);
  if constexpr (Dec::kMin) _mm256_storeu_ps(N, dec.N);
  auto put = [&](int v, __m256i c) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + vstride * v), c); };
  if constexpr (Dec::kFastCodes == FastCodes::kCrumbs || Dec::kFastCodes == FastCodes::kCrumbs3) {
    constexpr bool kThree = Dec::kFastCodes == FastCodes::kCrumbs3;
    __m256i wv, hx;
    k2_words<kThree>(pb, s, h, wv, hx);
    static_for<4>([&](auto jj) KVD_ALWAYS_INLINE { put(decltype(jj)::value, k2_code_bytes<kThree, decltype(jj)::value>(wv, hx)); });
  } else if constexpr (Dec::kFastCodes == FastCodes::kSix) {
    const unsigned char* ql = pb + 288 + 128 * s + 32 * h;  // Avx2DecodeQ6_K's fields
    const __m256i hw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pb + 2336 + 64 * s + 32 * h));
    for (int g = 0; g < 2; ++g) {
      __m256i lo, hi;
      q6_code_bytes<LaneBits256>(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql + 64 * g)), hw, g, lo, hi);
      put(2 * g, lo);
      put(2 * g + 1, hi);
    }
  } else if constexpr (Dec::kFastCodes == FastCodes::kBytes) {
    // the planes hold fast_q8_codes()'s bytes: code + 128 for vpdpbusd, without VNNI the signed code
#if defined(KVDECODE_FAST_VNNI)
    static_assert(fast_code_offset<Dec>() == 128, "q8_0's planes hold code + 128, for vpdpbusd");
#else
    static_assert(fast_code_offset<Dec>() == 0, "q8_0's planes hold its signed codes, for vpmaddwd");
#endif
    for (int g = 0; g < 4; ++g) {
      __m256i lo, hi;
      fast_q8_codes(pb, g, h, lo, hi);
#if defined(KVDECODE_FAST_VNNI)
      put(2 * g, lo);
      put(2 * g + 1, hi);
#else
      // each 32-bit lane's 4 codes c0 c1 c2 c3 as two vectors of 16-bit pairs: (c0, c2) at
      // 0 and (c1, c3) at 32 bytes (vstride: 64 bytes per 4 values), for vpmaddwd
      auto pairs = [&](int v, __m256i c) KVD_ALWAYS_INLINE {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + vstride * v), _mm256_srai_epi16(_mm256_slli_epi16(c, 8), 8));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + vstride * v + 32), _mm256_srai_epi16(c, 8));
      };
      pairs(2 * g, lo);
      pairs(2 * g + 1, hi);
#endif
    }
  } else {
    for (int g = 0; g < 4; ++g) {
      __m256i lo, hi;
      nibble_bytes<LaneBits256>(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(dec.q + 64 * g)), lo, hi);
      if constexpr (kFastFive<Dec>) or_high_bits<LaneBits256>(fast_high_word(dec), g, lo, hi);
      put(2 * g, lo);
      put(2 * g + 1, hi);
    }
  }
}

/// Rows of a 512-bit byte-plane tile (defined on every ISA: matmul_fast_planes names it
/// in both of its instances). One Zen 5 core in L2, M = 64, G multiply-adds/s,
/// 3 / 4 / 6 / 10 rows: q5_0 87 / 97 / 88 / 57, q3_K 70 / 70-73 / 67 / 47, q6_K 70 /
/// 74-75 / 68 / 47-49 (the 256-bit planes: q5_0 66, q3_K 47, q6_K 49).
inline constexpr int kFastPlaneRows512 = 4;
/// Panels of a 512-bit byte-plane tile: each row's broadcast feeds this many code
/// vectors, so a step of 4 values is 2 code loads and 4 broadcasts for 8 vpdpbusd
/// instead of 1 and 4 for 4. One Intel Xeon core (family 6 model 207), 512 x 2048,
/// M = 64 / 256, G multiply-adds/s, 1 -> 2 panels: q4_0 130 -> 160 / 139 -> 161,
/// q4_K 129 -> 156 / 138 -> 165, q5_K 83 -> 154 / 140 -> 164, q6_K 97 -> 101 / 105 ->
/// 132, q8_0 132 -> 155 / 130 -> 165 (the same bits).
inline constexpr int kFastPlanePanels512 = 2;

// ---- The vectors of a byte-plane tile ------------------------------------------------
// fast_planes_tile() is written once over an integer vector trait IV, as Vec16 is
// for the float kernels: IV::I holds IV::kOutputs 32-bit sums (8 for a half panel
// in 256 bits, 16 for a whole panel in 512), IV::F as many floats. With kDot, one
// dot(acc, codes, activations) adds each lane's 4 byte products (vpdpbusd); without
// it (256 bits, no VNNI), dot16() adds them in 16-bit sums that widen() adds to
// the 32-bit ones. The same integer sums and float steps per output either way.

/// 256 bits: one half panel (8 outputs) per tile.
struct FastPlaneVec256 {
  using I = __m256i;
  using F = __m256;
  static constexpr int kOutputs = 8;
#if defined(KVDECODE_FAST_VNNI)
  static constexpr bool kDot = true;
  KVD_ALWAYS_INLINE static I dot(I acc, I u8, I s8) { return fast_dpbusd(acc, u8, s8); }
#else
  static constexpr bool kDot = false;
#endif
  KVD_ALWAYS_INLINE static I dot16(I acc16, I u8, I s8) { return _mm256_add_epi16(acc16, _mm256_maddubs_epi16(u8, s8)); }
  KVD_ALWAYS_INLINE static I widen(I acc32, I acc16) {
    return _mm256_add_epi32(acc32, _mm256_madd_epi16(acc16, _mm256_set1_epi16(1)));
  }
  KVD_ALWAYS_INLINE static I widen0(I acc16) { return _mm256_madd_epi16(acc16, _mm256_set1_epi16(1)); }
  KVD_ALWAYS_INLINE static I madd(I a16, I b16) { return _mm256_madd_epi16(a16, b16); }
  KVD_ALWAYS_INLINE static I add(I a, I b) { return _mm256_add_epi32(a, b); }
  KVD_ALWAYS_INLINE static I zero() { return _mm256_setzero_si256(); }
  KVD_ALWAYS_INLINE static I load(const unsigned char* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
  KVD_ALWAYS_INLINE static I set1(std::int32_t a) { return _mm256_set1_epi32(a); }
  KVD_ALWAYS_INLINE static I sub(I a, I b) { return _mm256_sub_epi32(a, b); }
  KVD_ALWAYS_INLINE static F to_float(I v) { return _mm256_cvtepi32_ps(v); }
  KVD_ALWAYS_INLINE static F fzero() { return _mm256_setzero_ps(); }
  KVD_ALWAYS_INLINE static F fload(const float* p) { return _mm256_loadu_ps(p); }
  KVD_ALWAYS_INLINE static F fset1(float a) { return _mm256_set1_ps(a); }
  KVD_ALWAYS_INLINE static void fstore(float* p, F v) { _mm256_storeu_ps(p, v); }
  KVD_ALWAYS_INLINE static F mul(F a, F b) { return _mm256_mul_ps(a, b); }
  KVD_ALWAYS_INLINE static F fmadd(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
};

#if defined(KVDECODE_FAST_PLANES_512)
// With AVX-512 the planes of a panel's two halves sit side by side, 64 bytes per
// 4 values of 16 outputs, and one zmm vpdpbusd does what two ymm ones did: the
// same integer sums, the same float steps per output, so the same bits.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC 12's own 512-bit intrinsics
#endif
/// 512 bits (AVX512-VNNI and BW): one whole panel (16 outputs) per tile.
struct FastPlaneVec512 {
  using I = __m512i;
  using F = __m512;
  static constexpr int kOutputs = 16;
  static constexpr bool kDot = true;
  KVD_ALWAYS_INLINE static I dot(I acc, I u8, I s8) { return _mm512_dpbusd_epi32(acc, u8, s8); }
  KVD_ALWAYS_INLINE static I zero() { return _mm512_setzero_si512(); }
  KVD_ALWAYS_INLINE static I load(const unsigned char* p) { return _mm512_loadu_si512(p); }
  KVD_ALWAYS_INLINE static I set1(std::int32_t a) { return _mm512_set1_epi32(a); }
  KVD_ALWAYS_INLINE static I sub(I a, I b) { return _mm512_sub_epi32(a, b); }
  KVD_ALWAYS_INLINE static F to_float(I v) { return _mm512_cvtepi32_ps(v); }
  KVD_ALWAYS_INLINE static F fzero() { return _mm512_setzero_ps(); }
  KVD_ALWAYS_INLINE static F fload(const float* p) { return _mm512_loadu_ps(p); }
  KVD_ALWAYS_INLINE static F fset1(float a) { return _mm512_set1_ps(a); }
  KVD_ALWAYS_INLINE static void fstore(float* p, F v) { _mm512_storeu_ps(p, v); }
  KVD_ALWAYS_INLINE static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  KVD_ALWAYS_INLINE static F fmadd(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
};
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif  // 512-bit planes

/// A tile over byte planes: MR rows x NV vectors of IV::kOutputs outputs (a half
/// panel; two half panels side by side; or with 512 bits a panel) over all of k.
/// codes: the planes over k (NV kOutputs bytes per value); D, N: NV kOutputs floats
/// per sub-block. Without kDot: 16-bit sums over W vectors (W 4 values of 5-bit
/// codes, 2 for q6_K's 6-bit codes: 2 x 2 x 63 x 127 = 32004; the whole sub-block
/// of 4-bit codes: 8 x 2 x 15 x 127 = 30480), then widened.
template <class IV, class Dec, int MR, int NV = 1>
inline void fast_planes_tile(const FastRows& rows, long m0, const unsigned char* codes, const float* D, const float* N,
                             float* y, long ldy, [[maybe_unused]] const unsigned char* q16_rows = nullptr) {
  constexpr int S = Dec::kSub, kOffset = fast_code_offset<Dec>(), V = IV::kOutputs, L = V * NV;
  [[maybe_unused]] constexpr int W =
      Dec::kFastCodes == FastCodes::kSix ? 2 : Dec::kFastCodes == FastCodes::kNibbles ? S / 4 : 4;
  const long K = rows.K, nbq = K / kFastBlock;
  const std::int8_t* q0 = rows.q.data() + m0 * K;
  [[maybe_unused]] const unsigned char* q16 = q16_rows ? q16_rows + m0 * K * 2 : nullptr;
  // the float sums of the tile, in registers: the same values a store and a load of y would carry
  typename IV::F acc[MR][NV];
  KVD_UNROLL(8) for (int r = 0; r < MR; ++r) KVD_UNROLL(2) for (int i = 0; i < NV; ++i) acc[r][i] = IV::fzero();
  const float *const rd = rows.d.data(), *const rxq = rows.xq.data(), *const rxq16 = rows.xq16.data();
  const std::int32_t *const rq = rows.qsum.data(), *const rq16 = rows.qsum16.data();
  // each row's 4 values at k broadcast once, for the NV code vectors at k
  auto row_word = [&](int r, long k) KVD_ALWAYS_INLINE {
    std::int32_t a;
    std::memcpy(&a, q0 + r * K + k, 4);
    return IV::set1(a);
  };
  auto load_codes = [&](long k, typename IV::I (&c)[NV]) KVD_ALWAYS_INLINE {
    KVD_UNROLL(2) for (int i = 0; i < NV; ++i) c[i] = IV::load(codes + k * L + 4 * V * i);
  };
  for (long k0 = 0, s = 0; k0 < K; k0 += S, ++s) {
    typename IV::I t32[MR][NV];
    if constexpr (IV::kDot) {
      KVD_UNROLL(8) for (int r = 0; r < MR; ++r) KVD_UNROLL(2) for (int i = 0; i < NV; ++i) t32[r][i] = IV::zero();
      static_for<S / 4>([&](auto vv) KVD_ALWAYS_INLINE {
        constexpr int v = decltype(vv)::value;
        typename IV::I c[NV];
        load_codes(k0 + 4 * v, c);
        KVD_UNROLL(8) for (int r = 0; r < MR; ++r) {
          const typename IV::I a = row_word(r, k0 + 4 * v);
          KVD_UNROLL(2) for (int i = 0; i < NV; ++i) t32[r][i] = IV::dot(t32[r][i], c[i], a);
        }
      });
    } else if constexpr (Dec::kFastCodes == FastCodes::kBytes) {
      // q8_0 without VNNI (256 bits, a half panel): codes and activations as 16-bit pairs,
      // (c0, c2) * (a0, a2) + (c1, c3) * (a1, a3) by two vpmaddwd per row and 4 values,
      // where the tiles take vpsignb, vpmaddubsw, vpmaddwd (fast_q8_dot16). One Xeon core
      // (family 6 model 207), -march=x86-64-v3, in L2, G multiply-adds/s: 512 x 2048 at
      // M = 64 / 256 48.5-49.0 -> 52.6 / 49.3-49.7 -> 53.6-54.0; 256 x 5632 45.6 -> 49.1 /
      // 45.9 -> 47.7. Unrolled by 2 (by 1: a register move per sum; by 8: 40).
      // The rows' 16-bit pairs cost a copy of the activations (M x K x 2 bytes) per product.
      static_assert(NV == 1, "q8_0's 16-bit planes are a half panel wide");
      KVD_UNROLL(8) for (int r = 0; r < MR; ++r) t32[r][0] = IV::zero();
      KVD_UNROLL(2) for (int v = 0; v < S / 4; ++v) {
        const long k = k0 + 4 * v;
        const typename IV::I ce = IV::load(codes + 16 * k), co = IV::load(codes + 16 * k + 32);
        KVD_UNROLL(8) for (int r = 0; r < MR; ++r) {
          std::int32_t ae, ao;
          std::memcpy(&ae, q16 + (r * K + k) * 2, 4);
          std::memcpy(&ao, q16 + (r * K + k) * 2 + 4, 4);
          t32[r][0] = IV::add(t32[r][0], IV::add(IV::madd(ce, IV::set1(ae)), IV::madd(co, IV::set1(ao))));
        }
      }
    } else {
      KVD_UNROLL(1) for (int v0 = 0; v0 < S / 4; v0 += W) {
        typename IV::I t16[MR][NV];
        KVD_UNROLL(8) for (int r = 0; r < MR; ++r) KVD_UNROLL(2) for (int i = 0; i < NV; ++i) t16[r][i] = IV::zero();
        // (unrolled by 2: the 4-bit codes' 8 vectors rolled cost GCC a register move per sum)
        KVD_UNROLL(2) for (int v = v0; v < v0 + W; ++v) {
          typename IV::I c[NV];
          load_codes(k0 + 4 * v, c);
          KVD_UNROLL(8) for (int r = 0; r < MR; ++r) {
            const typename IV::I a = row_word(r, k0 + 4 * v);
            KVD_UNROLL(2) for (int i = 0; i < NV; ++i) t16[r][i] = IV::dot16(t16[r][i], c[i], a);
          }
        }
        KVD_UNROLL(8) for (int r = 0; r < MR; ++r) KVD_UNROLL(2) for (int i = 0; i < NV; ++i)
          t32[r][i] = v0 == 0 ? IV::widen0(t16[r][i]) : IV::widen(t32[r][i], t16[r][i]);
      }
    }
    KVD_UNROLL(8) for (int r = 0; r < MR; ++r) {
      const long row = m0 + r;
      const long e32 = row * nbq + k0 / kFastBlock, e16 = row * (K / 16) + k0 / 16;  // the row's block, 16-value group
      const typename IV::F d = IV::fset1(rd[e32]);
      KVD_UNROLL(2) for (int i = 0; i < NV; ++i) {
        typename IV::I I = t32[r][i];
        if constexpr (kOffset != 0) I = IV::sub(I, IV::set1(kOffset * (S == kFastBlock ? rq[e32] : rq16[e16])));
        acc[r][i] = IV::fmadd(IV::mul(IV::to_float(I), d), IV::fload(D + L * s + V * i), acc[r][i]);
        if constexpr (Dec::kMin)
          acc[r][i] = IV::fmadd(IV::fset1(S == kFastBlock ? rxq[e32] : rxq16[e16]), IV::fload(N + L * s + V * i), acc[r][i]);
      }
    }
  }
  KVD_UNROLL(8) for (int r = 0; r < MR; ++r) KVD_UNROLL(2) for (int i = 0; i < NV; ++i) IV::fstore(y + r * ldy + V * i, acc[r][i]);
}

template <class IV, class Dec, int MR, int NV = 1>
inline void fast_planes_tile_any(int mr, const FastRows& rows, long m0, const unsigned char* codes, const float* D,
                                 const float* N, float* y, long ldy, const unsigned char* q16_rows = nullptr) {
  if constexpr (MR >= 1) {
    if (mr == MR) return fast_planes_tile<IV, Dec, MR, NV>(rows, m0, codes, D, N, y, ldy, q16_rows);
    return fast_planes_tile_any<IV, Dec, MR - 1, NV>(mr, rows, m0, codes, D, N, y, ldy, q16_rows);
  }
}

/// Rows of a 256-bit byte-plane tile over a whole panel (two half panels side by
/// side, each row's broadcast serving both code vectors), for every type but q8_0:
/// 3 in 16 registers, 4 in 32. One Zen 4 core in L2, M = 64 and 256, G multiply-adds/s,
/// 6 rows x a half panel -> 3 rows x a panel, -march=x86-64-v3: q4_0 87 -> 104, q4_K
/// 94 -> 102 (both from 78 and 72 in the tiles), q5_0 81 -> 92, q5_K 83 -> 94, q6_K
/// 70 -> 80, q3_K 63 -> 75; q8_0 61 -> 59 keeps half panels. -march=x86-64-v4 (32
/// registers), 4 rows: q4_0 85 -> 107, q5_K 86 -> 96, q6_K 70 -> 82, q3_K 67 -> 80.
inline constexpr int kFastPlanePairRows = kFastVectorRegisters == 32 ? 4 : 3;

/// Large M: threads take ranges of units (whole panels, the halves side by side;
/// with the 512-bit tiles pairs of panels; q8_0's 256-bit planes: half panels); each
/// unit is decoded over all of k into the thread's planes (L bytes per value: 32, 16
/// or 8 outputs), then every row tile runs over them (k512: the 512-bit tiles).
template <class Dec, bool k512>
void matmul_fast_planes(const FastRows& rows, long M, const QuantPanels& w, float* y, long ldy, bool parallel) {
  // 256-bit tiles over whole panels (kFastPlanePairRows), but for q8_0
  constexpr bool kPair = !k512 && Dec::kFastCodes != FastCodes::kBytes;
  constexpr bool kWide = k512 || kPair;
  // panels per unit: kFastPlanePanels512 with the 512-bit tiles (the last unit may hold fewer)
  constexpr int kUP = k512 ? kFastPlanePanels512 : 1;
  constexpr int S = Dec::kSub, kSubs = Dec::kBlock / S, kL = kWide ? 16 * kUP : 8;
#if defined(KVDECODE_FAST_VNNI)
  constexpr bool kPairs16 = false;
#else
  constexpr bool kPairs16 = Dec::kFastCodes == FastCodes::kBytes && !k512;  // q8_0's 16-bit planes
#endif
  constexpr int kPairBytes = kPairs16 ? 2 : 1;  // plane bytes per value and output
  const long K = rows.K, n_panels = w.n_panels();
  const long n_units = kWide ? (n_panels + kUP - 1) / kUP : 2 * n_panels;
  // q8_0 without VNNI: each row's activations as 16-bit pairs, a0 a2 a1 a3 for each 4
  // (fast_planes_tile's vpmaddwd), once for all threads
  static thread_local AlignedBuffer<unsigned char> q16;
  if constexpr (kPairs16) {
    q16.reserve(static_cast<std::size_t>(M * K * 2));
    const __m256i order = _mm256_setr_epi8(0, 1, 4, 5, 2, 3, 6, 7, 8, 9, 12, 13, 10, 11, 14, 15,  //
                                           0, 1, 4, 5, 2, 3, 6, 7, 8, 9, 12, 13, 10, 11, 14, 15);
    for (long i = 0; i < M * K; i += 16) {  // K is a multiple of 32
      const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows.q.data() + i));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(q16.data() + 2 * i), _mm256_shuffle_epi8(_mm256_cvtepi8_epi16(a), order));
    }
  }
  const unsigned char* const q16_rows = kPairs16 ? q16.data() : nullptr;
  parallel_parts(n_units, parallel, [&](long u0, long u1) {
    static thread_local AlignedBuffer<unsigned char> codes;
    static thread_local AlignedBuffer<float> D, N;
    codes.reserve(static_cast<std::size_t>(K * kL * kPairBytes));
    D.reserve(static_cast<std::size_t>(K / S * kL));
    N.reserve(static_cast<std::size_t>(K / S * kL));
    for (long u = u0; u < u1; ++u) {
      const long p0 = kWide ? u * kUP : u / 2;  // the unit's first panel
      const int np = kWide ? static_cast<int>(std::min<long>(kUP, n_panels - p0)) : 1;
      const int L = kWide ? 16 * np : 8;  // bytes per value: the unit's outputs
      for (long b = 0; b < w.n_blocks(); ++b)
        for (int s = 0; s < kSubs; ++s)
          for (int p = 0; p < np; ++p)
            for (int h = 0; h < (kWide ? 2 : 1); ++h) {  // the halves side by side: 32 bytes, 8 floats each
              const long j = b * kSubs + s;
              const long cb = L * kPairBytes;  // plane bytes per value
              fast_planes_avx2<Dec>(w.panel_block(p0 + p, b), s, kWide ? h : static_cast<int>(u % 2),
                                    codes.data() + j * S * cb + 64 * p + 32 * h, D.data() + L * j + 16 * p + 8 * h,
                                    N.data() + L * j + 16 * p + 8 * h, 4 * cb);
            }
      float* const yu = y + (kWide ? p0 * 16 : u * 8);
      constexpr long kRows = kPair ? kFastPlanePairRows : k512 ? kFastPlaneRows512 : kFastPlaneRows;
      for (long m0 = 0; m0 < M; m0 += kRows) {
        const int mr = static_cast<int>(std::min<long>(kRows, M - m0));
        if constexpr (kPair) {
          fast_planes_tile_any<FastPlaneVec256, Dec, kFastPlanePairRows, 2>(mr, rows, m0, codes.data(), D.data(),
                                                                            N.data(), yu + m0 * ldy, ldy);
          continue;
        }
#if defined(KVDECODE_FAST_PLANES_512)
        if constexpr (k512) {
          if (np == kUP)
            fast_planes_tile_any<FastPlaneVec512, Dec, kFastPlaneRows512, kUP>(mr, rows, m0, codes.data(), D.data(),
                                                                               N.data(), yu + m0 * ldy, ldy);
          else
            fast_planes_tile_any<FastPlaneVec512, Dec, kFastPlaneRows512, 1>(mr, rows, m0, codes.data(), D.data(),
                                                                             N.data(), yu + m0 * ldy, ldy);
          continue;
        }
#endif
        fast_planes_tile_any<FastPlaneVec256, Dec, kFastPlaneRows>(mr, rows, m0, codes.data(), D.data(), N.data(),
                                                                   yu + m0 * ldy, ldy, q16_rows);
      }
    }
  });
}

/// Whether large M takes the byte planes for Dec: every type but the table types,
/// whose levels have no byte planes (they take the tiles at every M). Against the
/// small-M tiles, which rebuild the codes for each tile of rows (q8_0: transpose
/// them), one Zen 4 core in L2, M = 64 and 256, G multiply-adds/s, -march=x86-64-v3:
/// q8_0 45-46 -> 58-60 (with 256-bit VNNI 57-69 -> 75-109), q4_0 78 -> 104, q4_K
/// 72 -> 102, q2_K 69 -> 76; the 512-bit planes on Zen 5, M = 64: q4_0 75 -> 91-96,
/// q4_1 73 -> 87-92, q4_K 71 -> 87, q2_K 55 -> 68.
template <class Dec>
inline constexpr bool kFastPlanes = !kFastLevels<Dec>;
#endif  // KVDECODE_FAST_AVX2

}  // namespace kvd::detail
