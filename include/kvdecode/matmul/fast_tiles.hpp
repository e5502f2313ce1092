// The fast mode's AVX2 register tiles for small M (fast_int8.hpp): MR rows x NH
// half panels over all of k, the codes rebuilt in registers from the panel blocks
// through the AVX2 decoders (quant_decode_avx2.hpp) and multiplied with the rounded
// rows (fast_rows.hpp) by vpmaddubsw or, with VNNI, vpdpbusd. Three tile kinds: the
// nibble planes (q4, q5, and the table types' levels looked up by nibble) and
// q8_0's bytes, the 2-bit planes (q2_K, q3_K) and q6_K. Empty unless
// KVDECODE_FAST_AVX2.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kvdecode/core/isa.hpp"
#include "kvdecode/core/simd.hpp"
#include "kvdecode/matmul/dense_kernels.hpp"
#include "kvdecode/matmul/fast_rows.hpp"
#include "kvdecode/matmul/lane_bits.hpp"
#include "kvdecode/matmul/panel_layout.hpp"
#include "kvdecode/matmul/quant_decode_avx2.hpp"
#include "kvdecode/matmul/static_for.hpp"

namespace kvd::detail {

#if defined(KVDECODE_FAST_AVX2)
#if defined(KVDECODE_FAST_VNNI)
// VNNI: vpdpbusd adds the 4 products of unsigned code bytes and signed activation
// bytes of each 32-bit lane to it in one instruction, exactly (no 16-bit step,
// no saturation), where AVX2 takes vpmaddubsw, a 16-bit add and a vpmaddwd. The
// integer sums are the same, so are the bits.
/// acc + for each 32-bit lane the sum of its 4 products u8[b] * s8[b] (vpdpbusd).
KVD_ALWAYS_INLINE inline __m256i fast_dpbusd(__m256i acc, __m256i u8, __m256i s8) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
  return _mm256_dpbusd_epi32(acc, u8, s8);
#else
  return _mm256_dpbusd_avx_epi32(acc, u8, s8);
#endif
}
#endif
/// Whether Dec decodes 5-bit codes (a nibble plus one high bit per value).
template <class Dec>
inline constexpr bool kFastFive = Dec::kFastCodes == FastCodes::kFive;

/// Whether Dec's codes are levels of a table (iq4_nl, iq4_xs, mxfp4).
template <class Dec>
inline constexpr bool kFastLevels = Dec::kFastCodes == FastCodes::kLevels;

/// The fast mode's offset of Dec's unsigned codes (subtracted as offset * Q_s).
/// q8_0's signed codes enter vpdpbusd as code + 128; without VNNI its tiles move
/// the code's sign onto the activation instead (fast_q8_dot16) and have no offset.
/// Levels: with VNNI the tile looks up level + 128 (unsigned, in [1, 241]) for
/// vpdpbusd; without, the level itself (|level| <= 127) through vpsignb.
template <class Dec>
constexpr int fast_code_offset() {
#if defined(KVDECODE_FAST_VNNI)
  if constexpr (kFastLevels<Dec>) return 128;
#else
  if constexpr (Dec::kFastCodes == FastCodes::kBytes) return 0;
#endif
  return Dec::kFastOffset;
}

/// q8_0: 4 values of 8 outputs from two 32-byte loads of a panel block's codes,
/// a = values k, k + 1 and b = values k + 2, k + 3 of the 16 outputs (the byte of
/// value k of output n at 16 k + n): for the outputs of half h, one 32-bit lane
/// per output holding its values k .. k + 3 in order.
KVD_ALWAYS_INLINE inline __m256i fast_q8_lanes(__m256i a, __m256i b, int h) {
  // k, k + 2 interleaved for the half's 8 outputs | k + 1, k + 3 interleaved
  const __m256i x = h == 0 ? _mm256_unpacklo_epi8(a, b) : _mm256_unpackhi_epi8(a, b);
  // outputs 0..3 of the half in the low 128 bits, 4..7 in the high ones
  const __m256i y = _mm256_permute4x64_epi64(x, 0xD8);
  const __m256i order = _mm256_setr_epi8(0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15,  //
                                         0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15);
  return _mm256_shuffle_epi8(y, order);
}

/// q8_0: values 8 g .. 8 g + 3 (lo) and 8 g + 4 .. 8 g + 7 (hi) of half h of panel
/// block pb, 4 per output lane (rows of order 4): with VNNI code + 128 as unsigned
/// bytes, else the signed codes.
KVD_ALWAYS_INLINE inline void fast_q8_codes(const unsigned char* pb, int g, int h, __m256i& lo, __m256i& hi) {
  const unsigned char* q = pb + 32 + 128 * g;  // Avx2DecodeQ8_0's codes: 16 bytes per value
  auto load = [&](int v) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 32 * v)); };
  lo = fast_q8_lanes(load(0), load(1), h);
  hi = fast_q8_lanes(load(2), load(3), h);
#if defined(KVDECODE_FAST_VNNI)
  const __m256i bias = _mm256_set1_epi8(static_cast<char>(0x80));
  lo = _mm256_xor_si256(lo, bias);
  hi = _mm256_xor_si256(hi, bias);
#endif
}

/// q8_0 without VNNI: each lane's 4 products of signed codes c and activations a,
/// as 32-bit sums: |c| times a with c's sign, whose pairs (at most 2 x 128 x 127 =
/// 32512) fit vpmaddubsw's 16 bits, widened at once (a code of -128 has |c| = 128
/// as an unsigned byte, and vpsignb negates the activation).
KVD_ALWAYS_INLINE inline __m256i fast_q8_dot16(__m256i acc, __m256i c, __m256i a) {
  const __m256i p = _mm256_maddubs_epi16(_mm256_abs_epi8(c), _mm256_sign_epi8(a, c));
  return _mm256_add_epi32(acc, _mm256_madd_epi16(p, _mm256_set1_epi16(1)));
}

/// Dec's 16 levels as the bytes the tile multiplies (fast_code_offset() added), in
/// both 128-bit lanes, for vpshufb by nibble.
template <class Dec>
inline __m256i fast_level_table() {
  return q2_level_bytes(Dec::levels(), fast_code_offset<Dec>());
}

/// The word of high bits a 5-bit decoder loaded in begin() (bit v = value v of the sub-block).
template <class Dec>
inline __m256i fast_high_word(const Dec& d) {
  if constexpr (std::is_same_v<Dec, Avx2DecodeQK4<true>>)
    return d.hw;
  else
    return d.qh;
}

// The lane-wise integer steps that rebuild codes from their bit fields, written
// once over a width trait B (lane_bits.hpp: LaneBits256 here; LaneBits512 in
// fast_tiles_512.hpp, where a panel's two halves sit side by side).
/// Whether Dec unpacks a panel block's scales once for all its sub-blocks
/// (Dec::block_scales() into a Dec::BlockScales, then begin(that, pb, s, h)).
template <class Dec, class = void>
struct FastBlockScalesOf {
  struct type {};
  static constexpr bool kHas = false;
};
template <class Dec>
struct FastBlockScalesOf<Dec, std::void_t<typename Dec::BlockScales>> {
  using type = typename Dec::BlockScales;
  static constexpr bool kHas = true;
};
template <class Dec>
inline constexpr bool kFastBlockScales = FastBlockScalesOf<Dec>::kHas;

/// Whether half panel i of a tile is the first the tile holds of its panel (pb: the
/// tile's panel blocks, one per half panel): what is done once per panel, not per half.
template <int NH>
KVD_ALWAYS_INLINE inline bool fast_leads_panel(const unsigned char* const (&pb)[NH], int i) {
  return i == 0 || pb[i] != pb[i - 1];
}

/// The 4 rounded values at qa as one 32-bit word (a tile broadcasts it to every lane).
KVD_ALWAYS_INLINE inline std::int32_t fast_row_word(const std::int8_t* qa) {
  std::int32_t a;
  std::memcpy(&a, qa, 4);
  return a;
}

/// The tiles' running sums in y (MR rows x NH half panels from h0) set to +0.
template <int MR, int NH>
inline void fast_tile_zero(float* y, long ldy, long h0) {
  KVD_UNROLL(4) for (int r = 0; r < MR; ++r)
    KVD_UNROLL(4) for (int i = 0; i < NH; ++i) _mm256_storeu_ps(y + r * ldy + (h0 + i) * 8, _mm256_setzero_ps());
}

/// The float sums of an AVX2 tile of MR rows x NH half panels. With kRegs in
/// registers, stored once at the end; else in y itself, zeroed first and read and
/// written once per sub-block (the 16 ymm registers hold MR x NH sums beside the
/// integer sums, codes and constants only for small tiles: sums in registers for
/// up to 4 of them, 2 for the codes with more constants, took one Zen 4 core in L2,
/// x86-64-v3, G multiply-adds/s, q4_0 at M = 1 57 -> 63, q4_K 45 -> 48, q5_0
/// 31 -> 33, q6_K at M = 4 and 8 49 -> 54). The same values either way.
template <int MR, int NH, bool kRegs>
struct FastSums256 {
  float* y;
  long ldy, h0;
  __m256 v[kRegs ? MR : 1][kRegs ? NH : 1];
  KVD_ALWAYS_INLINE FastSums256(float* y_, long ldy_, long h0_) : y(y_), ldy(ldy_), h0(h0_) {
    if constexpr (kRegs) {
      KVD_UNROLL(4) for (int r = 0; r < MR; ++r) KVD_UNROLL(4) for (int i = 0; i < NH; ++i) v[r][i] = _mm256_setzero_ps();
    } else {
      fast_tile_zero<MR, NH>(y, ldy, h0);
    }
  }
  KVD_ALWAYS_INLINE float* at(int r, int i) const { return y + r * ldy + (h0 + i) * 8; }
  KVD_ALWAYS_INLINE __m256 get(int r, int i) const {
    if constexpr (kRegs) return v[r][i];
    return _mm256_loadu_ps(at(r, i));
  }
  KVD_ALWAYS_INLINE void set(int r, int i, __m256 a) {
    if constexpr (kRegs) v[r][i] = a;
    else _mm256_storeu_ps(at(r, i), a);
  }
  /// y's MR x NH vectors hold the sums after this
  KVD_ALWAYS_INLINE void finish() const {
    if constexpr (kRegs) KVD_UNROLL(4) for (int r = 0; r < MR; ++r) KVD_UNROLL(4) for (int i = 0; i < NH; ++i) _mm256_storeu_ps(at(r, i), v[r][i]);
  }
};

/// Panel block b of each of the NH half panels from h0.
template <int NH>
KVD_ALWAYS_INLINE inline void fast_panel_blocks(const QuantPanels& w, long nblk, std::size_t pbb, long h0, long b,
                                                const unsigned char* (&pb)[NH]) {
  KVD_UNROLL(4) for (int i = 0; i < NH; ++i) pb[i] = w.data + (static_cast<std::size_t>((h0 + i) / 2) * nblk + b) * pbb;
}

/// AVX2 register tile for codes in nibble planes (q4_0, q4_1, q4_K; q5_0, q5_1,
/// q5_K with their high bits; iq4_nl, iq4_xs, mxfp4 through their level table) or
/// bytes (q8_0): MR rows x NH half panels over all of k (see the top of this file).
/// The running sums live in y, the sub-block's partial sums in registers (16-bit for
/// 4-bit codes, widened to 32 per group of 8 for 5-bit ones, per plane for levels,
/// whose products reach 127 * 127, and per product pair for q8_0's).
template <class Dec, int MR, int NH, std::size_t kPbb>
inline void fast_tile_avx2(const FastRows& rows, long m0, const QuantPanels& w, long h0, float* y, long ldy) {
  constexpr bool kFive = kFastFive<Dec>, kLevels = kFastLevels<Dec>;
  constexpr bool kBytes = Dec::kFastCodes == FastCodes::kBytes;
  constexpr bool kWide = kFive || kLevels || kBytes;  // 32-bit sums without VNNI; more constants in registers
  constexpr int kOffset = fast_code_offset<Dec>();  // q4_0: codes - 8, q5_0: codes - 16
  constexpr int kSubs = Dec::kBlock / kFastBlock;
  const long K = rows.K, nbq = K / kFastBlock;
  FastSums256<MR, NH, MR * NH <= (kWide ? 2 : 4)> acc(y, ldy, h0);
  [[maybe_unused]] const __m256i ones = _mm256_set1_epi16(1);
  [[maybe_unused]] __m256i table = _mm256_setzero_si256();
  if constexpr (kLevels) table = fast_level_table<Dec>();
  constexpr std::size_t pbb = kPbb;
  const long nblk = w.n_blocks();  // once: QuantPanels looks both up in the type's traits
  const std::int8_t* q0 = rows.q.data() + m0 * K;
  // q4_K, q5_K: each panel block's scales and mins unpacked once for its 8 sub-blocks
  // (and both halves, when the tile has both), not per sub-block and half
  constexpr int kPanels = kFastBlockScales<Dec> ? (NH + 1) / 2 + 1 : 1;
  [[maybe_unused]] typename FastBlockScalesOf<Dec>::type bsc[kPanels];
  for (long b = 0; b < nblk; ++b) {
    const unsigned char* pb[NH];
    fast_panel_blocks<NH>(w, nblk, pbb, h0, b, pb);
    [[maybe_unused]] int panel_of[NH];  // half panel i's entry of bsc
    if constexpr (kFastBlockScales<Dec>) {
      int n = 0;
      KVD_UNROLL(4) for (int i = 0; i < NH; ++i) {
        if (fast_leads_panel<NH>(pb, i)) Dec::block_scales(pb[i], bsc[n++]);
        panel_of[i] = n - 1;
      }
    }
    for (int s = 0; s < kSubs; ++s) {
      const long j = b * kSubs + s;
      // The code words' addresses now, the scales and offsets after the sub-block's
      // integer loop (computed before it, GCC keeps them in registers the loop needs).
      const unsigned char* qw[NH];
      [[maybe_unused]] __m256i hword[NH];
      KVD_UNROLL(4) for (int i = 0; i < NH; ++i) {
        Dec where;
        where.begin(pb[i], s, static_cast<int>((h0 + i) % 2));
        qw[i] = where.q;
        if constexpr (kFive) hword[i] = fast_high_word(where);
        if (fast_leads_panel<NH>(pb, i)) prefetch_panel_share<kPbb, kSubs>(pb[i], s);
      }
      __m256i t[MR][NH];
      KVD_UNROLL(4) for (int r = 0; r < MR; ++r)
        KVD_UNROLL(4) for (int i = 0; i < NH; ++i) t[r][i] = _mm256_setzero_si256();
      // The groups: without VNNI the 4-bit codes' loop is not unrolled: unrolled, GCC
      // reassociates the 16-bit sums and computes every product of the sub-block first,
      // spilling them to the stack (one Zen 4 core in L2, x86-64-v3, G multiply-adds/s
      // at M = 1: q4_0 62 -> 56, q4_K 48 -> 44). The codes that widen their sums per
      // group (5-bit, level and q8_0 codes) and every VNNI tile are unrolled (q5_K
      // 25 -> 30 at M = 1 and 50 -> 53 at M = 4, q8_0 30 -> 31, q5_0 and q5_1 level).
#if defined(KVDECODE_FAST_VNNI)
      constexpr bool kUnrollGroups = true;
#else
      constexpr bool kUnrollGroups = kWide;
#endif
      auto group = [&](int g) KVD_ALWAYS_INLINE {
        // every half panel's two code vectors, then each row's two broadcasts used
        // for all of them: 2 NH + MR NH + 2 + 1 registers
        __m256i lo[NH], hi[NH];
        KVD_UNROLL(4) for (int i = 0; i < NH; ++i) {
          if constexpr (kBytes) {
            fast_q8_codes(pb[i], g, static_cast<int>((h0 + i) % 2), lo[i], hi[i]);
            continue;
          }
          nibble_bytes<LaneBits256>(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(qw[i] + 64 * g)), lo[i], hi[i]);
          if constexpr (kFive) or_high_bits<LaneBits256>(hword[i], g, lo[i], hi[i]);
          if constexpr (kLevels) {
            lo[i] = _mm256_shuffle_epi8(table, lo[i]);
            hi[i] = _mm256_shuffle_epi8(table, hi[i]);
          }
        }
        KVD_UNROLL(4) for (int r = 0; r < MR; ++r) {
          const std::int8_t* qa = q0 + r * K + j * kFastBlock + 8 * g;
          const __m256i b0 = _mm256_set1_epi32(fast_row_word(qa)), b1 = _mm256_set1_epi32(fast_row_word(qa + 4));
          KVD_UNROLL(4) for (int i = 0; i < NH; ++i) {
#if defined(KVDECODE_FAST_VNNI)
            t[r][i] = fast_dpbusd(fast_dpbusd(t[r][i], lo[i], b0), hi[i], b1);
#else
            if constexpr (kBytes) {
              t[r][i] = fast_q8_dot16(fast_q8_dot16(t[r][i], lo[i], b0), hi[i], b1);
              continue;
            }
            if constexpr (kLevels) {
              // |level| * (q with the level's sign): each 16-bit pair sum stays within 2 * 127 * 127
              const __m256i p0 = _mm256_maddubs_epi16(_mm256_abs_epi8(lo[i]), _mm256_sign_epi8(b0, lo[i]));
              const __m256i p1 = _mm256_maddubs_epi16(_mm256_abs_epi8(hi[i]), _mm256_sign_epi8(b1, hi[i]));
              t[r][i] = _mm256_add_epi32(t[r][i], _mm256_add_epi32(_mm256_madd_epi16(p0, ones), _mm256_madd_epi16(p1, ones)));
            } else {
              const __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(lo[i], b0), _mm256_maddubs_epi16(hi[i], b1));
              t[r][i] = kFive ? _mm256_add_epi32(t[r][i], _mm256_madd_epi16(p, ones)) : _mm256_add_epi16(t[r][i], p);
            }
#endif
          }
        }
      };
      if constexpr (kUnrollGroups) {
        static_for<4>([&](auto gg) KVD_ALWAYS_INLINE { group(decltype(gg)::value); });
      } else {
        KVD_UNROLL(1) for (int g = 0; g < 4; ++g) group(g);
      }
      Dec dec[NH];
      KVD_UNROLL(4) for (int i = 0; i < NH; ++i) {
        if constexpr (kFastBlockScales<Dec>)
          dec[i].begin(bsc[panel_of[i]], pb[i], s, static_cast<int>((h0 + i) % 2));
        else
          dec[i].begin(pb[i], s, static_cast<int>((h0 + i) % 2));
      }
      KVD_UNROLL(4) for (int r = 0; r < MR; ++r) {
        const long e = (m0 + r) * nbq + j;
        const __m256 d = _mm256_set1_ps(rows.d.data()[e]);
        KVD_UNROLL(4) for (int i = 0; i < NH; ++i) {
#if defined(KVDECODE_FAST_VNNI)
          __m256i I = t[r][i];
#else
          __m256i I = kWide ? t[r][i] : _mm256_madd_epi16(t[r][i], ones);
#endif
          if constexpr (kOffset != 0) I = _mm256_sub_epi32(I, _mm256_set1_epi32(kOffset * rows.qsum.data()[e]));
          __m256 a = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(I), d), dec[i].D, acc.get(r, i));
          if constexpr (Dec::kMin) a = _mm256_fmadd_ps(_mm256_set1_ps(rows.xq.data()[e]), dec[i].N, a);
          acc.set(r, i, a);
        }
      }
    }
  }
  acc.finish();
}

/// The q2_K (kThree = false) and q3_K tile: MR rows x NH half panels, sub-blocks of
/// 16 values, one code word per row (value v at bits 2 v); rows of order 16.
/// Vector j = (w >> 2 j) & 3 holds values j, j + 4, j + 8, j + 12 in its bytes;
/// q3_K ors in its high bit at bit 2 (code + 4) and subtracts 4 Q_s after.
template <bool kThree, int MR, int NH, std::size_t kPbb>
inline void fast_tile_k2_avx2(const FastRows& rows, long m0, const QuantPanels& w, long h0, float* y, long ldy) {
  using Dec = std::conditional_t<kThree, Avx2DecodeQ3_K, Avx2DecodeQ2_K>;
  const long K = rows.K, nbq = K / kFastBlock;
  fast_tile_zero<MR, NH>(y, ldy, h0);
  [[maybe_unused]] const __m256i ones = _mm256_set1_epi16(1);
  constexpr std::size_t pbb = kPbb;
  const long nblk = w.n_blocks();  // once: QuantPanels looks both up in the type's traits
  const std::int8_t* q0 = rows.q.data() + m0 * K;
  for (long b = 0; b < nblk; ++b) {
    const unsigned char* pb[NH];
    fast_panel_blocks<NH>(w, nblk, pbb, h0, b, pb);
    for (int s = 0; s < 16; ++s) {
      __m256i wv[NH], hx[NH];
      KVD_UNROLL(4) for (int i = 0; i < NH; ++i) {
        k2_words<kThree>(pb[i], s, static_cast<int>((h0 + i) % 2), wv[i], hx[i]);
        if (fast_leads_panel<NH>(pb, i)) prefetch_panel_share<kPbb, 16>(pb[i], s);
      }
      __m256i t[MR][NH];
      KVD_UNROLL(4) for (int r = 0; r < MR; ++r)
        KVD_UNROLL(4) for (int i = 0; i < NH; ++i) t[r][i] = _mm256_setzero_si256();
      const long k0 = b * 256 + 16 * s;
      static_for<4>([&](auto jj) KVD_ALWAYS_INLINE {
        constexpr int j = decltype(jj)::value;
        __m256i bq[MR];
        KVD_UNROLL(4) for (int r = 0; r < MR; ++r) {
          std::int32_t a;
          std::memcpy(&a, q0 + r * K + k0 + 4 * j, 4);
          bq[r] = _mm256_set1_epi32(a);
        }
        KVD_UNROLL(4) for (int i = 0; i < NH; ++i) {
          const __m256i c = k2_code_bytes<kThree, j>(wv[i], hx[i]);
#if defined(KVDECODE_FAST_VNNI)
          KVD_UNROLL(4) for (int r = 0; r < MR; ++r) t[r][i] = fast_dpbusd(t[r][i], c, bq[r]);
#else
          KVD_UNROLL(4) for (int r = 0; r < MR; ++r) t[r][i] = _mm256_add_epi16(t[r][i], _mm256_maddubs_epi16(c, bq[r]));
#endif
        }
      });
      Dec dec[NH];
      KVD_UNROLL(4) for (int i = 0; i < NH; ++i) dec[i].begin(pb[i], s, static_cast<int>((h0 + i) % 2));
      KVD_UNROLL(4) for (int r = 0; r < MR; ++r) {
        const long row = m0 + r, e16 = row * (K / 16) + k0 / 16;
        const __m256 d = _mm256_set1_ps(rows.d.data()[row * nbq + k0 / kFastBlock]);
        KVD_UNROLL(4) for (int i = 0; i < NH; ++i) {
#if defined(KVDECODE_FAST_VNNI)
          __m256i I = t[r][i];
#else
          __m256i I = _mm256_madd_epi16(t[r][i], ones);
#endif
          if constexpr (kThree) I = _mm256_sub_epi32(I, _mm256_set1_epi32(fast_code_offset<Dec>() * rows.qsum16.data()[e16]));
          float* yp = y + r * ldy + (h0 + i) * 8;
          __m256 a = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(I), d), dec[i].D, _mm256_loadu_ps(yp));
          if constexpr (!kThree) a = _mm256_fmadd_ps(_mm256_set1_ps(rows.xq16.data()[e16]), dec[i].N, a);
          _mm256_storeu_ps(yp, a);
        }
      }
    }
  }
}

/// The q6_K tile: MR rows x NH half panels; per group of 8 values the two nibble
/// planes get their two high bits (bits 4..5 of each byte) from the high word.
template <int MR, int NH, std::size_t kPbb>
inline void fast_tile_q6k_avx2(const FastRows& rows, long m0, const QuantPanels& w, long h0, float* y, long ldy) {
  const long K = rows.K, nbq = K / kFastBlock;
  FastSums256<MR, NH, MR * NH <= 4> acc(y, ldy, h0);
  [[maybe_unused]] const __m256i ones = _mm256_set1_epi16(1);
  constexpr std::size_t pbb = kPbb;
  const long nblk = w.n_blocks();  // once: QuantPanels looks both up in the type's traits
  const std::int8_t* q0 = rows.q.data() + m0 * K;
  for (long b = 0; b < nblk; ++b) {
    const unsigned char* pb[NH];
    fast_panel_blocks<NH>(w, nblk, pbb, h0, b, pb);
    for (int s = 0; s < 16; ++s) {
      const unsigned char* ql[NH];
      const unsigned char* qh[NH];
      KVD_UNROLL(4) for (int i = 0; i < NH; ++i) {
        const int h = static_cast<int>((h0 + i) % 2);
        ql[i] = pb[i] + 288 + 128 * s + 32 * h;  // Avx2DecodeQ6_K's fields
        qh[i] = pb[i] + 2336 + 64 * s + 32 * h;
        if (fast_leads_panel<NH>(pb, i)) prefetch_panel_share<kPbb, 16>(pb[i], s);
      }
      __m256i t[MR][NH];
      KVD_UNROLL(4) for (int r = 0; r < MR; ++r)
        KVD_UNROLL(4) for (int i = 0; i < NH; ++i) t[r][i] = _mm256_setzero_si256();
      const long k0 = b * 256 + 16 * s;
      KVD_UNROLL(1) for (int g = 0; g < 2; ++g) {
        __m256i lo[NH], hi[NH];
        KVD_UNROLL(4) for (int i = 0; i < NH; ++i) {
          q6_code_bytes<LaneBits256>(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql[i] + 64 * g)),
                         _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qh[i])), g, lo[i], hi[i]);
        }
        KVD_UNROLL(4) for (int r = 0; r < MR; ++r) {
          const std::int8_t* qa = q0 + r * K + k0 + 8 * g;
          const __m256i b0 = _mm256_set1_epi32(fast_row_word(qa)), b1 = _mm256_set1_epi32(fast_row_word(qa + 4));
          KVD_UNROLL(4) for (int i = 0; i < NH; ++i) {
#if defined(KVDECODE_FAST_VNNI)
            t[r][i] = fast_dpbusd(fast_dpbusd(t[r][i], lo[i], b0), hi[i], b1);
#else
            const __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(lo[i], b0), _mm256_maddubs_epi16(hi[i], b1));
            t[r][i] = _mm256_add_epi32(t[r][i], _mm256_madd_epi16(p, ones));
#endif
          }
        }
      }
      Avx2DecodeQ6_K dec[NH];
      KVD_UNROLL(4) for (int i = 0; i < NH; ++i) dec[i].begin(pb[i], s, static_cast<int>((h0 + i) % 2));
      KVD_UNROLL(4) for (int r = 0; r < MR; ++r) {
        const long row = m0 + r;
        const __m256 d = _mm256_set1_ps(rows.d.data()[row * nbq + k0 / kFastBlock]);
        const __m256i off = _mm256_set1_epi32(fast_code_offset<Avx2DecodeQ6_K>() * rows.qsum16.data()[row * (K / 16) + k0 / 16]);
        KVD_UNROLL(4) for (int i = 0; i < NH; ++i) {
          const __m256i I = _mm256_sub_epi32(t[r][i], off);  // codes - 32
          acc.set(r, i, _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(I), d), dec[i].D, acc.get(r, i)));
        }
      }
    }
  }
  acc.finish();
}

#if defined(__AVX512VL__)
// EVEX encodings reach 32 vector registers: tiles of up to 7 rows (M = 5 to 7).
inline constexpr int kFastVectorRegisters = 32;
#else
inline constexpr int kFastVectorRegisters = 16;
#endif
/// The rows of a tile for M > kFastMaxRows (and every M with 16 registers).
inline constexpr int kFastTileRows = 4;
/// The rows of a tile: 4, or with 32 registers M itself for M = 5 to 7 (a speculative
/// verification), which would otherwise run as 4 rows and a remainder. One core in L2,
/// Zen 5, G multiply-adds/s at M = 5, 4 + 1 -> 5 rows: q4_0 44 -> 66-69, q4_K 54 -> 68-70,
/// q5_K 36 -> 51-56. Larger M keeps 4-row tiles: 8-row tiles lost at M = 8 and 64
/// (q4_K 60 -> 53, 62 -> 55). The 512-bit tiles take up to 8 rows (fast_rows_512(),
/// fast_tiles_512.hpp).
inline constexpr int kFastMaxRows = kFastVectorRegisters == 32 ? 7 : kFastTileRows;
/// Rows of a half-panel byte-plane tile (large M; q8_0's 256-bit planes, the others take
/// kFastPlanePairRows over whole panels): 2 MR sums, a code vector, a broadcast and a constant in 16 registers.
/// (12 rows in 32 registers measured slower: 43 against 67 G multiply-adds/s for q5_0 at M = 64, Zen 5.)
inline constexpr int kFastPlaneRows = 6;
/// The smallest M that takes the byte planes.
/// (M = 8, a batch of 8 decoding sequences, keeps the tiles: one Zen 4 core, G
/// multiply-adds/s, tiles -> planes at M = 8: q4_K 96 -> 87 and q4_0, q8_0 the same
/// on 2048 x 2048; q6_K 44.6 -> 51.7 there but 24.4 -> 23.9 and 20.1 -> 17.4 on the
/// 32000 x 2048 classifier, whose default-mode kernel ran at 36.9 and 28.7. Again
/// with the whole-panel planes, -march=x86-64-v3, kvdecode-roofline's batch 8 on the
/// 1.1B shape, tokens/s, planes from M = 16 -> 8: Q4_K_M 105-115 -> 88, Q6_K
/// 61 -> 53, Q8_0 87 -> 70, though in L2 the planes led at M = 8.)
inline constexpr long kFastPlanesMinM = 16;
/// Half panels per tile: 4 for 1 or 2 rows, 2 beyond (8 to 16 accumulators).
constexpr int fast_halves(int mr) { return mr <= 2 ? 4 : 2; }

/// The most rows of a tile for Dec: kFastMaxRows for the nibble planes; 4 for q2_K,
/// q3_K and q6_K, whose 5-row tiles gained nothing (Zen 5, one core in L2: q6_K 31
/// at M = 5 either way; their 8-row tiles fell at M = 8, q2_K 55 -> 33, q6_K 39 -> 28).
template <class Dec>
constexpr int fast_max_rows() {
  if constexpr (Dec::kFastCodes == FastCodes::kSix || Dec::kFastCodes == FastCodes::kCrumbs ||
                Dec::kFastCodes == FastCodes::kCrumbs3)
    return kFastTileRows;
  return kFastMaxRows;
}

/// q6_K's tiles hold 32-bit sums and more constants: 2 half panels for 1 row, 1
/// beyond; the q5 and q3_K tiles hold a word of high bits per half panel besides.
template <class Dec>
constexpr int fast_halves_of(int mr) {
  if constexpr (Dec::kFastCodes == FastCodes::kSix) return mr <= 1 ? 2 : 1;
  // q8_0's transposes hold 4 loaded vectors besides the codes
  if constexpr (Dec::kFastCodes == FastCodes::kBytes) return mr <= 2 || kFastVectorRegisters == 32 ? 2 : 1;
  if constexpr (kFastFive<Dec> || kFastLevels<Dec> || Dec::kFastCodes == FastCodes::kCrumbs3) return mr <= 2 ? 2 : 1;
  return fast_halves(mr);
}

/// The tile shapes of Dec: up to fast_max_rows<Dec>() rows, fast_halves_of<Dec>(mr) half panels.
template <class Dec>
struct FastShapeAvx2 {
  static constexpr int kMaxRows = fast_max_rows<Dec>();
  static constexpr int halves(int mr) { return fast_halves_of<Dec>(mr); }
};
/// The tile of mr rows and nh half panels (FastShapeAvx2<Dec>). kPbb: the bytes of a
/// panel block (w.panel_block_bytes(), asserted), a constant so that a sub-block's
/// prefetches compile to straight-line code.
template <class Dec, std::size_t kPbb>
inline void fast_tile_avx2_any(int mr, int nh, const FastRows& rows, long m0, const QuantPanels& w, long h0, float* y,
                               long ldy) {
  KVD_ASSERT(w.panel_block_bytes() == kPbb);
  with_tile_shape<FastShapeAvx2<Dec>>(mr, nh, [&](auto r, auto h) {
    constexpr int MR = decltype(r)::value, NH = decltype(h)::value;
    if constexpr (Dec::kFastCodes == FastCodes::kSix) fast_tile_q6k_avx2<MR, NH, kPbb>(rows, m0, w, h0, y, ldy);
    else if constexpr (Dec::kFastCodes == FastCodes::kCrumbs) fast_tile_k2_avx2<false, MR, NH, kPbb>(rows, m0, w, h0, y, ldy);
    else if constexpr (Dec::kFastCodes == FastCodes::kCrumbs3) fast_tile_k2_avx2<true, MR, NH, kPbb>(rows, m0, w, h0, y, ldy);
    else fast_tile_avx2<Dec, MR, NH, kPbb>(rows, m0, w, h0, y, ldy);
  });
}
#endif  // KVDECODE_FAST_AVX2

}  // namespace kvd::detail
