// Cache files: saving one sequence's KV cache to disk and restoring it, so a
// conversation can be parked and resumed without recomputing its prompt.
// Restoring is exact: decoding after load_cache() gives the same logits, bit
// for bit, as if the cache had never left memory. Contiguous caches (KVCache)
// and paged sequences (PagedSequence) both save and restore, in the same format:
// a file written by either kind restores into either. prompt_cache.hpp embeds
// these files, with their tokens, in prompt cache files.
//
// File layout (version 1, little-endian; keys and values of one element type):
//   offset  bytes  field
//        0      4  magic "KVDC"
//        4      4  u32 format version (1)
//        8      4  u32 header bytes (64)
//       12     16  u32 n_layers, n_kv_heads, head_dim, max_seq_len   the cache shape
//       28      4  u32 capacity                                       positions the saved cache could hold
//       32      4  u32 length                                         sequence length: positions [0, length) appended
//       36      1  u8  dtype (DType's frozen codes: 0 f32, 1 f64, 2 bf16, 3 f16)
//       37      1  u8  bytes per element
//       38      2  zero
//       40      8  u64 model_id (caller-chosen; 0 = none, see config_fingerprint())
//       48      8  u64 data bytes = (length - first) * 2 * n_layers * n_kv_heads * head_dim * element bytes
//       56      4  u32 sliding_window (0 = none)                     part of the cache shape
//       60      4  u32 first: first position stored = the cache's first_position()
//                      (max(0, length - sliding_window + 1) with a window, else 0)
//       64      -  data: (length - first, 2 [K then V], n_layers, n_kv_heads, head_dim) raw elements of dtype
//   end - 8     8  u64 checksum: FNV-1a 64 of every byte before it
//
// Version 3 (written when keys and values differ in type, either is a block type
// q8_0 / q4_0, or the heads are rotated; version 1 is written otherwise, byte for
// byte as before):
//       36      1  u8  K dtype (0 f32, 1 f64, 2 bf16, 3 f16, 4 q8_0, 5 q4_0)
//       37      1  u8  V dtype (the same codes)
//       64      -  data: (length - first, 2 [K then V], n_layers, n_kv_heads) rows of
//                      head_dim values: a plain type's raw elements, or a block type's
//                      head_dim / 32 blocks of [f16 d, codes] as ggml stores them
//                      (q8_0: 32 int8; q4_0: 16 bytes, byte j = (q[j] + 8) | (q[j + 16] + 8) << 4)
//       38      1  u8  rotation (KVRotation's frozen codes: 0 none, 1 keys, 2 keys and
//                      values): the heads are stored rotated (ModelConfig::kv_rotation);
//                      part of the cache shape. Needs a power-of-two head_dim. A rotated
//                      cache is always version 3, and builds before rotation refuse
//                      the byte (version 1 and older version 3 files keep it 0).
//   every other field as in version 1 (data bytes = (length - first) * the cache's bytes_per_token()).
// A block must be one the quantizer writes (kv_cache.hpp, KVStore): its scale finite, and
// quantizing the values it reads as gives it back; a block type needs a head_dim
// that is a multiple of 32. So a restored quantized cache reads exactly the
// values that were saved.
//
// Only positions [first, length) are written: never the unused capacity, and
// for a sliding-window cache only the window later rows can still attend to.
// The data is position-major, independent of the cache's 16-position block
// layout (and of a window cache's ring size), so one position's record is
// exactly the (n_layers, n_kv_heads * head_dim) K and V rows KVCache::write() takes.
//
// A restored sliding-window cache knows that positions before `first` were not
// restored (KVCache::commit_restored), so truncate() refuses to rewind it to a
// length whose window would reach them.
//
// The local layers of a swa_pattern model (Gemma 3, gpt-oss) keep a ring of their
// window by default (kv_cache.hpp), while the global layers keep every position; a
// file holds positions [first, length) of every layer, so such a cache saves only
// while its rings still hold every position (KVCache::oldest_resident() == 0), and
// save_cache() refuses a longer one with ArgumentError (nothing written) rather than
// write positions it no longer has. A cache built with LocalLayers::kEveryPosition
// saves at any length. The file does not record the layer pattern (model_id does:
// config_fingerprint() covers it), and restoring into a ring writes the positions in
// order, so each local layer keeps the newest ones.
//
// A file is never trusted. Loading reads and checks the whole file (header
// fields, sizes, checksum) before it touches a cache, so every failure leaves
// the target exactly as it was. FileError means the file is damaged or not a
// cache file; CacheMismatchError means a sound file saved for another shape,
// element type or model_id; CacheFullError means the target cannot hold it.
#pragma once

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <system_error>
#include <type_traits>
#include <vector>

#include "kvdecode/io/bytes.hpp"
#include "kvdecode/io/file.hpp"
#include "kvdecode/core/config.hpp"
#include "kvdecode/core/dtype.hpp"
#include "kvdecode/error.hpp"
#include "kvdecode/cache/kv_cache.hpp"
#include "kvdecode/cache/paged_cache.hpp"

namespace kvd {

/// What a cache file's header says, after every check read_cache_info() makes.
struct CacheFileInfo {
  CacheShape shape;                 ///< n_layers, n_kv_heads, head_dim, max_seq_len of the saved cache
  DType dtype = DType::kF32;        ///< storage type of the saved cache's keys
  DType value_dtype = DType::kF32;  ///< storage type of its values (= dtype in a version 1 file)
  int capacity = 0;                 ///< capacity of the saved cache, in [1, max_seq_len]
  int length = 0;                   ///< sequence length, in [0, capacity]
  int first = 0;                    ///< first position stored; the file holds [first, length)
  std::uint64_t model_id = 0;       ///< as given to save_cache()
  std::uint64_t data_bytes = 0;     ///< bytes of K/V data: (length - first) * bytes per token
  std::uint64_t file_bytes = 0;     ///< header + data + checksum
  std::uint64_t checksum = 0;       ///< FNV-1a 64 of header and data
};

/// Options for load_cache().
struct CacheLoadOptions {
  int capacity = 0;             ///< capacity of the new cache; 0 = the capacity recorded in the file
  int max_append = 0;           ///< sliding-window caches only: as KVCache's constructor (0 = its default)
  std::uint64_t model_id = 0;   ///< must equal the file's model_id (both 0 when ids are not used)
};

namespace detail {
namespace cache_file {

inline constexpr char kMagic[4] = {'K', 'V', 'D', 'C'};
inline constexpr std::uint32_t kVersion = 1;      // keys and values of one plain element type
// Typed files are version 3: builds before it refused every version but 1, and
// their tests pin 2 as an unsupported version, so 2 stays unused.
inline constexpr std::uint32_t kVersionTyped = 3;  // K and V types of their own, block types allowed
inline constexpr std::uint64_t kHeaderBytes = 64;
inline constexpr std::uint64_t kChecksumBytes = 8;
inline constexpr std::uint32_t kMaxDim = 1u << 20;  // ModelConfig's limit on every dimension

/// Throws FileError("cache file '<path>': <parts...>"): the file cannot be used (missing, unreadable).
template <class... Parts>
[[noreturn]] void fail(const std::string& path, Parts&&... parts) {
  throw FileError(msg("cache file '", path, "': ", std::forward<Parts>(parts)...));
}

/// Throws FormatError("cache file '<path>': <parts...>"): the file's bytes break the format.
template <class... Parts>
[[noreturn]] void bad(const std::string& path, Parts&&... parts) {
  throw FormatError(msg("cache file '", path, "': ", std::forward<Parts>(parts)...));
}

/// Elements are copied byte for byte between memory and the file, so the host
/// must be little-endian. Checked at run time (see checkpoint.hpp for why).
inline void require_little_endian(const std::string& path) {
  if (!host_is_little_endian()) fail(path, "cache files are little-endian and this host is not (unsupported)");
}

/// Storage bytes of the element types a KVCache can hold; 0 for any other DType.
inline std::uint32_t element_bytes(DType t) {
  switch (t) {
    case DType::kF32: return 4;
    case DType::kF64: return 8;
    case DType::kBF16: return 2;
    case DType::kF16: return 2;
    default: return 0;
  }
}

/// True for the codes a version 3 file may hold for K or V (f32, f64, bf16, f16, q8_0, q4_0).
inline bool is_cache_type(DType t) { return static_cast<unsigned>(t) <= static_cast<unsigned>(DType::kQ4); }
inline bool is_block_type(DType t) { return t == DType::kQ8 || t == DType::kQ4; }
/// "f32", ..., "q8_0", "q4_0": the names the options take.
inline const char* type_text(DType t) { return t == DType::kQ8 ? "q8_0" : t == DType::kQ4 ? "q4_0" : dtype_name(t); }

/// "(layers 2, kv_heads 4, head_dim 16, max_seq_len 256, sliding_window 0)", and
/// ", rotation kv" before the parenthesis closes for a rotated cache.
inline std::string shape_text(const CacheShape& s) {
  return msg("(layers ", s.n_layers, ", kv_heads ", s.n_kv_heads, ", head_dim ", s.head_dim, ", max_seq_len ",
             s.max_seq_len, ", sliding_window ", s.sliding_window,
             s.rotation != KVRotation::kNone ? msg(", rotation ", kv_rotation_name(s.rotation)) : std::string(), ")");
}

/// The first position a cache of this shape and length keeps (KVCache::first_position()).
inline int first_kept(const CacheShape& s, int length) {
  return detail::first_visible(length, s.sliding_window);  // what the next position appended will see
}

/// The 64-byte header for a cache; the checksum is appended after the data.
inline std::array<unsigned char, kHeaderBytes> make_header(const CacheShape& shape, DType dtype, DType value_dtype,
                                                           int capacity, int length, int first, std::uint64_t model_id,
                                                           std::uint64_t data_bytes) {
  const bool typed = dtype != value_dtype || is_block_type(dtype) || shape.rotation != KVRotation::kNone;
  std::array<unsigned char, kHeaderBytes> h{};
  std::memcpy(h.data(), kMagic, 4);
  store_u32_le(h.data() + 4, typed ? kVersionTyped : kVersion);
  store_u32_le(h.data() + 8, static_cast<std::uint32_t>(kHeaderBytes));
  store_u32_le(h.data() + 12, static_cast<std::uint32_t>(shape.n_layers));
  store_u32_le(h.data() + 16, static_cast<std::uint32_t>(shape.n_kv_heads));
  store_u32_le(h.data() + 20, static_cast<std::uint32_t>(shape.head_dim));
  store_u32_le(h.data() + 24, static_cast<std::uint32_t>(shape.max_seq_len));
  store_u32_le(h.data() + 28, static_cast<std::uint32_t>(capacity));
  store_u32_le(h.data() + 32, static_cast<std::uint32_t>(length));
  h[36] = static_cast<unsigned char>(dtype);
  h[37] = static_cast<unsigned char>(typed ? static_cast<unsigned>(value_dtype) : element_bytes(dtype));
  h[38] = static_cast<unsigned char>(shape.rotation);  // 0 unless rotated (then version 3)
  store_u64_le(h.data() + 40, model_id);
  store_u64_le(h.data() + 48, data_bytes);
  store_u32_le(h.data() + 56, static_cast<std::uint32_t>(shape.sliding_window));
  store_u32_le(h.data() + 60, static_cast<std::uint32_t>(first));
  return h;
}

/// A whole cache file, mapped and checked: the header's meaning and the raw data.
struct Contents {
  CacheFileInfo info;
  MappedFile file;
  const unsigned char* data = nullptr;  // info.data_bytes bytes in `file`: (length - first, 2, n_layers, n_kv_heads, head_dim) elements
};

/// Checks the header fields one by one and the file size they imply.
/// Throws FileError naming the path, the field, its value and the limit.
inline CacheFileInfo parse_header(const std::string& path, const unsigned char* h, std::uint64_t file_bytes) {
  const std::uint32_t version = load_u32_le(h + 4);
  if (version != kVersion && version != kVersionTyped)
    bad(path, "unsupported cache file version ", version, " (this build of kvdecode reads version ", kVersion,
        ", and version ", kVersionTyped, " for keys and values of their own types; save the cache again with this build)");
  const std::uint32_t header_bytes = load_u32_le(h + 8);
  if (header_bytes != kHeaderBytes)
    bad(path, "header size field = ", header_bytes, ", expected ", kHeaderBytes, " for version ", version);

  auto dim = [&](const char* name, int offset) {
    const std::uint32_t v = load_u32_le(h + offset);
    if (v < 1 || v > kMaxDim) bad(path, "header field ", name, " = ", v, " must be in [1, ", kMaxDim, "]");
    return static_cast<int>(v);
  };
  CacheFileInfo info;
  info.shape.n_layers = dim("n_layers", 12);
  info.shape.n_kv_heads = dim("n_kv_heads", 16);
  info.shape.head_dim = dim("head_dim", 20);
  info.shape.max_seq_len = dim("max_seq_len", 24);
  const std::uint32_t window = load_u32_le(h + 56);
  if (window > kMaxDim) bad(path, "header field sliding_window = ", window, " must be in [0, ", kMaxDim, "]");
  info.shape.sliding_window = static_cast<int>(window);
  const std::uint32_t capacity = load_u32_le(h + 28), length = load_u32_le(h + 32);
  if (capacity < 1 || capacity > static_cast<std::uint32_t>(info.shape.max_seq_len))
    bad(path, "header field capacity = ", capacity, " must be in [1, max_seq_len = ", info.shape.max_seq_len, "]");
  if (length > capacity)
    bad(path, "header field length = ", length, " exceeds the cache's capacity = ", capacity,
         " (max_seq_len = ", info.shape.max_seq_len, ")");
  info.capacity = static_cast<int>(capacity);
  info.length = static_cast<int>(length);
  const std::uint32_t first = load_u32_le(h + 60);
  const int expected_first = first_kept(info.shape, info.length);
  if (first != static_cast<std::uint32_t>(expected_first))
    bad(path, "header field first = ", first, " must be ", expected_first, " for length ", length,
         " and sliding_window ", window);
  info.first = expected_first;

  const unsigned dtype_code = h[36];
  const DType dtype = static_cast<DType>(dtype_code);
  std::uint32_t elem = element_bytes(dtype);  // 0 for q8 and unknown codes (DType is 8-bit, so any code is a value)
  if (version == kVersion) {
    if (elem == 0)
      bad(path, "header field dtype = ", dtype_code, " is not a cache element type (0 f32, 1 f64, 2 bf16, 3 f16)");
    if (h[37] != elem)
      bad(path, "header field element bytes = ", unsigned(h[37]), " disagrees with dtype ", dtype_name(dtype),
           " (", elem, " bytes)");
    info.dtype = info.value_dtype = dtype;
  } else {
    for (int off : {36, 37}) {
      const DType t = static_cast<DType>(h[off]);
      const char* field = off == 36 ? "K dtype" : "V dtype";
      if (!is_cache_type(t))
        bad(path, "header field ", field, " = ", unsigned(h[off]),
            " is not a cache type (0 f32, 1 f64, 2 bf16, 3 f16, 4 q8_0, 5 q4_0)");
      if (is_block_type(t) && info.shape.head_dim % kQuantBlock != 0)
        bad(path, "header field ", field, " = ", type_text(t), " needs a head_dim that is a multiple of ", kQuantBlock,
            ", but head_dim = ", info.shape.head_dim);
    }
    if (h[38] > static_cast<unsigned>(KVRotation::kKeysValues))
      bad(path, "header field rotation = ", unsigned(h[38]), " is not a cache rotation (0 none, 1 keys, 2 keys and values)");
    info.shape.rotation = static_cast<KVRotation>(h[38]);
    if (info.shape.rotation != KVRotation::kNone && !is_power_of_two(info.shape.head_dim))
      bad(path, "header field rotation = ", kv_rotation_name(info.shape.rotation),
          " needs a head_dim that is a power of two, but head_dim = ", info.shape.head_dim);
    // One file per cache: one plain type for keys and values, unrotated, is written as
    // version 1, so a version 3 file of one plain type is refused unless rotated
    // (restoring and saving it again must give the same bytes).
    if (h[36] == h[37] && !is_block_type(dtype) && info.shape.rotation == KVRotation::kNone)
      bad(path, "header fields K dtype = V dtype = ", type_text(dtype), " in a version ", kVersionTyped,
          " file; version ", kVersionTyped, " holds a block type, keys and values of different types or rotated "
          "heads, one plain type is version ", kVersion);
    info.dtype = dtype;
    info.value_dtype = static_cast<DType>(h[37]);
    elem = 1;  // sizes below come from the row bytes of each type
  }
  for (int off : {38, 39})
    if (h[off] != 0 && !(off == 38 && version == kVersionTyped))
      bad(path, "reserved header byte ", off, " = ", unsigned(h[off]), " must be 0");
  info.model_id = load_u64_le(h + 40);

  // Each factor is at most 2^20, but their product can pass 2^64 (2^20 layers x 2^20
  // heads x 2^20 head_dim x 8 positions wraps to 0), so it is formed with checked_mul.
  const std::uint64_t stored = static_cast<std::uint64_t>(info.length - info.first);
  std::uint64_t expected_data = 0, expected_file = 0;
  try {
    std::uint64_t per_token = 0;
    if (version == kVersion) {
      per_token = checked_mul(2ull * static_cast<std::uint64_t>(info.shape.n_layers),
                              static_cast<std::uint64_t>(info.shape.n_kv_heads), "K/V rows");
      per_token = checked_mul(per_token, static_cast<std::uint64_t>(info.shape.head_dim), "K/V elements per position");
      per_token = checked_mul(per_token, elem, "K/V bytes per position");
    } else {  // each row at most 8 x 2^20 bytes: the sum cannot wrap
      const std::uint64_t row_bytes = dtype_bytes_for(info.dtype, static_cast<std::uint64_t>(info.shape.head_dim)) +
                                      dtype_bytes_for(info.value_dtype, static_cast<std::uint64_t>(info.shape.head_dim));
      per_token = checked_mul(static_cast<std::uint64_t>(info.shape.n_layers),
                              static_cast<std::uint64_t>(info.shape.n_kv_heads), "K/V rows");
      per_token = checked_mul(per_token, row_bytes, "K/V bytes per position");
    }
    expected_data = checked_mul(per_token, stored, "K/V data bytes");
    expected_file = checked_add(checked_add(kHeaderBytes, expected_data, "file size"), kChecksumBytes, "file size");
  } catch (const FormatError& e) {
    bad(path, "header fields describe more data than 64-bit sizes hold: ", stored, " positions x 2 x n_layers ",
        info.shape.n_layers, " x n_kv_heads ", info.shape.n_kv_heads, " x head_dim ", info.shape.head_dim, " x ",
        elem, " bytes (", e.what(), "); the header is corrupt");
  }
  info.data_bytes = load_u64_le(h + 48);
  if (info.data_bytes != expected_data)
    bad(path, "header field data bytes = ", info.data_bytes, " disagrees with its shape, ", stored,
         " stored positions and dtype ", dtype_name(dtype), ", which need ", expected_data);

  if (file_bytes != expected_file) {
    if (file_bytes < expected_file)
      bad(path, "truncated: the file has ", file_bytes, " bytes but its header (", stored, " positions of ",
           dtype_name(dtype), ") implies ", expected_file, " (", expected_file - file_bytes, " bytes missing)");
    bad(path, "size mismatch: the file has ", file_bytes, " bytes but its header (", stored, " positions of ",
         dtype_name(dtype), ") implies ", expected_file, " (", file_bytes - expected_file, " extra bytes at the end)");
  }
  info.file_bytes = file_bytes;
  return info;
}

/// Throws FormatError naming the first K/V element of `info`'s data that is NaN or
/// infinite (its position, K or V, layer, head and index, and its file offset): a
/// cache holding one would turn every later logit into NaN. Reads each element once
/// by its exponent bits (f32, f64, bf16, f16), so the cost is that of the checksum.
inline void check_finite(const std::string& path, const CacheFileInfo& info, const unsigned char* data) {
  const std::uint32_t elem = element_bytes(info.dtype);
  const std::uint64_t n = info.data_bytes / elem;
  std::uint64_t bad_at = n;
  switch (info.dtype) {
    case DType::kF32:
      for (std::uint64_t i = 0; i < n && bad_at == n; ++i)
        if ((load_u32_le(data + 4 * i) & 0x7F800000u) == 0x7F800000u) bad_at = i;
      break;
    case DType::kF64:
      for (std::uint64_t i = 0; i < n && bad_at == n; ++i)
        if ((load_u64_le(data + 8 * i) & 0x7FF0000000000000ull) == 0x7FF0000000000000ull) bad_at = i;
      break;
    case DType::kBF16:
      for (std::uint64_t i = 0; i < n && bad_at == n; ++i)
        if (((data[2 * i] | (data[2 * i + 1] << 8)) & 0x7F80) == 0x7F80) bad_at = i;
      break;
    case DType::kF16:
      for (std::uint64_t i = 0; i < n && bad_at == n; ++i)
        if (((data[2 * i] | (data[2 * i + 1] << 8)) & 0x7C00) == 0x7C00) bad_at = i;
      break;
    default: return;
  }
  if (bad_at == n) return;
  // Records are (position, 2 [K then V], n_layers, n_kv_heads, head_dim) elements.
  const auto hd = static_cast<std::uint64_t>(info.shape.head_dim);
  const std::uint64_t row = hd * static_cast<std::uint64_t>(info.shape.n_kv_heads);
  const std::uint64_t kv_block = row * static_cast<std::uint64_t>(info.shape.n_layers);
  const std::uint64_t rec = bad_at / (2 * kv_block), in_rec = bad_at % (2 * kv_block);
  const std::uint64_t in_kv = in_rec % kv_block;
  bad(path, "non-finite ", in_rec < kv_block ? "K" : "V", " element at position ", info.first + rec, ", layer ",
      in_kv / row, ", kv head ", in_kv % row / hd, ", index ", in_kv % hd, " (file offset ", kHeaderBytes + bad_at * elem,
      "): a cache must hold finite values only");
}

/// Version 3 data: walks every row (position, K or V, layer, kv head) in its own
/// type. Throws FormatError naming the first bad value or block (its position, K or
/// V, layer, head, index or block, and file offset): a NaN or infinite element or
/// scale, or a block the quantizer would not write (quantizing its values does not
/// give it back: its largest code is not 127 / -8, or a code is out of range).
inline void check_rows(const std::string& path, const CacheFileInfo& info, const unsigned char* data) {
  const int L = info.shape.n_layers, Hk = info.shape.n_kv_heads, Dh = info.shape.head_dim;
  const unsigned char* p = data;
  auto where = [&](int pos, bool key, int l, int h) {
    return msg(key ? "K" : "V", " row at position ", pos, ", layer ", l, ", kv head ", h);
  };
  for (int pos = info.first; pos < info.length; ++pos)
    for (int kv = 0; kv < 2; ++kv) {
      const DType t = kv == 0 ? info.dtype : info.value_dtype;
      for (int l = 0; l < L; ++l)
        for (int h = 0; h < Hk; ++h) {
          const std::uint64_t offset = kHeaderBytes + static_cast<std::uint64_t>(p - data);
          if (!is_block_type(t)) {
            const std::uint32_t eb = element_bytes(t);
            for (int d = 0; d < Dh; ++d, p += eb) {
              bool finite = true;
              if (t == DType::kF32) finite = (load_u32_le(p) & 0x7F800000u) != 0x7F800000u;
              if (t == DType::kF64) finite = (load_u64_le(p) & 0x7FF0000000000000ull) != 0x7FF0000000000000ull;
              if (t == DType::kBF16) finite = ((p[0] | (p[1] << 8)) & 0x7F80) != 0x7F80;
              if (t == DType::kF16) finite = ((p[0] | (p[1] << 8)) & 0x7C00) != 0x7C00;
              if (!finite)
                bad(path, "non-finite ", where(pos, kv == 0, l, h), ", index ", d, " (file offset ",
                    offset + static_cast<std::uint64_t>(d) * eb, "): a cache must hold finite values only");
            }
            continue;
          }
          for (int b = 0; b < Dh / kQuantBlock; ++b) {
            const std::uint16_t bits = static_cast<std::uint16_t>(p[0] | (p[1] << 8));
            const std::uint64_t at = kHeaderBytes + static_cast<std::uint64_t>(p - data);
            if ((bits & 0x7C00) == 0x7C00)
              bad(path, "non-finite ", type_text(t), " scale (f16 bits 0x", std::hex, bits, std::dec, ") in ",
                  where(pos, kv == 0, l, h), ", block ", b, " (file offset ", at, "): a cache must hold finite values only");
            const Eigen::half d = Eigen::numext::bit_cast<Eigen::half>(bits);
            std::int8_t q[kQuantBlock], again[kQuantBlock];
            float x[kQuantBlock];
            if (t == DType::kQ8) {
              for (int j = 0; j < kQuantBlock; ++j) q[j] = static_cast<std::int8_t>(p[2 + j]);
            } else {
              for (int j = 0; j < kQuantBlock / 2; ++j) {
                q[j] = static_cast<std::int8_t>((p[2 + j] & 15) - 8);
                q[j + 16] = static_cast<std::int8_t>((p[2 + j] >> 4) - 8);
              }
            }
            for (int j = 0; j < kQuantBlock; ++j) x[j] = dequantize(q[j], d);
            const Eigen::half d2 = t == DType::kQ8 ? quantize_q8_0(x, again) : quantize_q4_0(x, again);
            bool same = Eigen::numext::bit_cast<std::uint16_t>(d2) == bits;
            for (int j = 0; j < kQuantBlock; ++j) same = same && again[j] == q[j];
            if (!same)
              bad(path, "a ", type_text(t), " block no quantizer writes in ", where(pos, kv == 0, l, h), ", block ", b,
                  " (file offset ", at, "): its largest code must be ", t == DType::kQ8 ? "+-127 (codes in [-127, 127])" : "-8 (codes in [-8, 7])",
                  " and its scale that block's own; the file is corrupt");
            p += t == DType::kQ8 ? 34 : 18;
          }
        }
    }
}

/// Checks the cache file held in bytes [h, h + file_bytes) (a whole file, or one
/// embedded in another file such as a prompt cache) and fills c.info and c.data
/// (pointing into those bytes, which must outlive c). `path` names it in errors.
/// Throws FormatError naming the problem (a NaN or infinite K/V element included);
/// reads nothing beyond the first 64 bytes until the header and the size agree.
inline void parse_into(Contents& c, const std::string& path, const unsigned char* h, std::uint64_t file_bytes) {
  if (file_bytes == 0) bad(path, "file is empty (0 bytes); a cache file starts with a ", kHeaderBytes, "-byte header");
  if (file_bytes < 4 || std::memcmp(h, kMagic, 4) != 0) {
    char got[5] = {0, 0, 0, 0, 0};
    for (std::uint64_t i = 0; i < std::min<std::uint64_t>(file_bytes, 4); ++i)
      got[i] = h[i] >= 0x20 && h[i] < 0x7f ? static_cast<char>(h[i]) : '?';
    bad(path, "not a kvdecode cache file: it starts with \"", got, "\", expected the magic \"KVDC\"");
  }
  if (file_bytes < kHeaderBytes)
    bad(path, "truncated: the file has ", file_bytes, " bytes, the header alone needs ", kHeaderBytes);

  c.info = parse_header(path, h, file_bytes);  // file_bytes == header + data + checksum from here on
  c.data = h + kHeaderBytes;
  const unsigned char* trailer = c.data + c.info.data_bytes;
  c.info.checksum = load_u64_le(trailer);
  const std::uint64_t computed =
      fnv1a64(c.data, static_cast<std::size_t>(c.info.data_bytes), fnv1a64(h, static_cast<std::size_t>(kHeaderBytes)));
  if (computed != c.info.checksum)
    bad(path, "checksum mismatch: the file records ", std::hex, "0x", c.info.checksum, " but its contents hash to 0x",
         computed, std::dec, "; the file is corrupt");
  if (load_u32_le(h + 4) == kVersion) check_finite(path, c.info, c.data);
  else check_rows(path, c.info, c.data);
}

/// Opens `path` as a regular file and maps it. Throws FileError naming the path
/// (missing, a directory, not a regular file, unreadable).
inline MappedFile open_regular(const std::string& path, const char* kind) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status st = fs::status(fs::path(path), ec);
  if (st.type() == fs::file_type::not_found) fail(path, "file does not exist");
  if (ec) fail(path, "cannot inspect the file: ", ec.message());
  if (st.type() == fs::file_type::directory) fail(path, "is a directory, not a ", kind);
  if (st.type() != fs::file_type::regular) fail(path, "is not a regular file");
  try {
    return MappedFile::open(path);
  } catch (const FileError& e) {
    fail(path, "cannot be read: ", e.what());
  }
}

/// Maps, reads and checks a whole cache file. Throws FileError naming the path
/// and the problem (FormatError when its bytes break the format); reads nothing
/// beyond the first 64 bytes until the header and the file size agree, and
/// allocates nothing in proportion to the file (the data stays in the mapping).
inline Contents read(const std::string& path) {
  require_little_endian(path);
  Contents c;
  c.file = open_regular(path, "cache file");
  parse_into(c, path, c.file.data(), c.file.size());
  return c;
}

/// Bytes a cache file of `cache` takes: header, its positions [first, length), checksum.
template <class Cache>
std::uint64_t file_bytes_of(const Cache& cache) {
  return kHeaderBytes + cache.bytes_per_token() * static_cast<std::uint64_t>(cache.length() - cache.first_position()) +
         kChecksumBytes;
}

/// Appends one row (head_dim values of one head) of a K or V block in the file's
/// form to `out`: a plain type's raw elements, or a block type's [f16 d, codes]
/// blocks, re-quantized from the values it reads as (which gives the stored block
/// back, kv_cache.hpp, KVStore). `at(d)` is the row's value d as the block reference reads it.
template <class S, class Ref>
void append_row(const Ref& ref, long first, long stride, int head_dim, std::vector<unsigned char>& out) {
  if constexpr (!KVStore<S>::kQuantized) {
    for (int d = 0; d < head_dim; ++d) {
      const S x = ref[first + d * stride];
      const auto* b = reinterpret_cast<const unsigned char*>(&x);
      out.insert(out.end(), b, b + sizeof(S));
    }
  } else {
    float x[kQuantBlock];
    std::int8_t q[kQuantBlock];
    for (int b0 = 0; b0 < head_dim; b0 += kQuantBlock) {
      for (int j = 0; j < kQuantBlock; ++j) x[j] = ref[first + (b0 + j) * stride];
      const Eigen::half d = KVStore<S>::quantize(x, q);
      const std::uint16_t bits = Eigen::numext::bit_cast<std::uint16_t>(d);
      out.push_back(static_cast<unsigned char>(bits & 0xFF));
      out.push_back(static_cast<unsigned char>(bits >> 8));
      if constexpr (std::is_same_v<S, CacheQ8_0>) {
        for (int j = 0; j < kQuantBlock; ++j) out.push_back(static_cast<unsigned char>(q[j]));
      } else {
        for (int j = 0; j < kQuantBlock / 2; ++j)
          out.push_back(static_cast<unsigned char>((q[j] + 8) | ((q[j + 16] + 8) << 4)));
      }
    }
  }
}

/// Writes `cache` in the format above to `out` (header, data, checksum). Reads the
/// cache through k_block/v_block only, so KVCache and PagedSequence share it.
template <class Cache>
void write_cache(const Cache& cache, std::ostream& out, std::uint64_t model_id) {
  using S = typename Cache::Storage;
  using SV = typename Cache::ValueStorage;
  const CacheShape& shape = cache.shape();
  const int L = shape.n_layers, Hk = shape.n_kv_heads, Dh = shape.head_dim, kB = kLanes;
  const int first = cache.first_position();  // 0 without a sliding window
  const std::uint64_t data_bytes = cache.bytes_per_token() * static_cast<std::uint64_t>(cache.length() - first);
  const auto header = make_header(shape, cache.dtype(), DTypeOf<SV>::value, cache.capacity(), cache.length(), first,
                                  model_id, data_bytes);
  out.write(reinterpret_cast<const char*>(header.data()), static_cast<std::streamsize>(header.size()));
  std::uint64_t hash = fnv1a64(header.data(), header.size());
  // One position's record: K then V, each (n_layers, n_kv_heads, head_dim), gathered from the blocks.
  std::vector<unsigned char> record;
  record.reserve(static_cast<std::size_t>(cache.bytes_per_token()));
  for (int pos = first; pos < cache.length(); ++pos) {
    const int b = pos / kB, lane = pos % kB;  // k_block takes the absolute block (a ring maps it to its slot)
    record.clear();
    for (int l = 0; l < L; ++l)
      for (int h = 0; h < Hk; ++h)  // K (Hk, Dh, 16): value d of lane at (h Dh + d) 16 + lane
        append_row<S>(cache.k_block(l, b), static_cast<long>(h) * Dh * kB + lane, kB, Dh, record);
    for (int l = 0; l < L; ++l)
      for (int h = 0; h < Hk; ++h)  // V (Hk, 16, Dh): value d of lane at (h 16 + lane) Dh + d
        append_row<SV>(cache.v_block(l, b), (static_cast<long>(h) * kB + lane) * Dh, 1, Dh, record);
    hash = fnv1a64(record.data(), record.size(), hash);
    out.write(reinterpret_cast<const char*>(record.data()), static_cast<std::streamsize>(record.size()));
  }
  std::array<unsigned char, kChecksumBytes> trailer{};
  store_u64_le(trailer.data(), hash);
  out.write(reinterpret_cast<const char*>(trailer.data()), static_cast<std::streamsize>(trailer.size()));
}

/// Throws CacheMismatchError unless a sound file fits a cache of `shape` storing `dtype`.
/// The file does not record the local layers (swa_pattern, local_window): its
/// positions are every layer's, whatever each layer of the target keeps.
inline void check_compatible(const std::string& path, const CacheFileInfo& info, CacheShape shape, DType dtype,
                             DType value_dtype, std::uint64_t model_id) {
  shape.swa_pattern = info.shape.swa_pattern;
  shape.local_window = info.shape.local_window;
  if (!(info.shape == shape))
    throw CacheMismatchError(msg("cache file '", path, "': saved for cache shape ", shape_text(info.shape),
                                 ", but the model's cache shape is ", shape_text(shape)));
  if (info.dtype != dtype && info.dtype == info.value_dtype && dtype == value_dtype)
    throw CacheMismatchError(msg("cache file '", path, "': holds ", dtype_name(info.dtype),
                                 " elements, but the cache stores ", dtype_name(dtype),
                                 " (load it into a cache of element type ", dtype_name(info.dtype), ")"));
  if (info.dtype != dtype || info.value_dtype != value_dtype)
    throw CacheMismatchError(msg("cache file '", path, "': holds ", type_text(info.dtype), " keys and ",
                                 type_text(info.value_dtype), " values, but the cache stores ", type_text(dtype),
                                 " keys and ", type_text(value_dtype), " values (load it into a cache of those types)"));
  if (info.model_id != model_id)
    throw CacheMismatchError(msg("cache file '", path, "': saved with model_id ", std::hex, "0x", info.model_id,
                                 ", expected 0x", model_id, std::dec, " (a cache of another model)"));
}

/// Throws ArgumentError naming `path` unless every layer of `cache` still holds
/// positions [first_position(), length()), which a file records for every layer: a
/// local layer's ring (kv_cache.hpp) drops the positions behind its window.
template <class T, class S, class SV>
void check_savable(const KVCache<T, S, SV>& cache, const std::string& path) {
  const int first = cache.first_position();
  for (int l = 0; l < cache.shape().n_layers; ++l)
    if (cache.oldest_resident(l) > first)
      throw ArgumentError(msg("cache file '", path, "': cannot save this cache of ", cache.length(),
                              " positions: layer ", l, " keeps only positions [", cache.oldest_resident(l), ", ",
                              cache.length(), ") (a ring for its window of ", cache.layer_window(l),
                              "), and a cache file holds positions [", first, ", ", cache.length(),
                              ") of every layer; build the cache with LocalLayers::kEveryPosition to save it"));
}
/// A paged sequence keeps every position its window needs in every layer.
template <class Cache>
void check_savable(const Cache&, const std::string&) {}

/// Decodes `n` rows of head_dim values of type S from `src` into `out` as T;
/// returns the bytes read. Every stored value is exact in T.
template <class T, class S>
const unsigned char* decode_rows(const unsigned char* src, long n, int head_dim, T* out) {
  if constexpr (!KVStore<S>::kQuantized) {
    for (long i = 0; i < n * head_dim; ++i, src += sizeof(S)) {
      S x;
      std::memcpy(static_cast<void*>(&x), src, sizeof(S));
      out[i] = from_storage<T>(x);
    }
  } else {
    for (long i = 0; i < n * head_dim; i += kQuantBlock) {
      const Eigen::half d = Eigen::numext::bit_cast<Eigen::half>(static_cast<std::uint16_t>(src[0] | (src[1] << 8)));
      for (int j = 0; j < kQuantBlock; ++j) {
        int q = 0;
        if constexpr (std::is_same_v<S, CacheQ8_0>) q = static_cast<std::int8_t>(src[2 + j]);
        else q = j < 16 ? (src[2 + j] & 15) - 8 : (src[2 + j - 16] >> 4) - 8;
        out[i + j] = static_cast<T>(dequantize(q, d));
      }
      src += std::is_same_v<S, CacheQ8_0> ? 34 : 18;
    }
  }
  return src;
}

/// Copies position `pos`'s record (K then V, each (n_layers, n_kv_heads * head_dim))
/// from the checked file contents into `record` as T.
template <class T, class S, class SV = S>
void load_record(const Contents& c, int pos, std::vector<T>& record) {
  const CacheShape& s = c.info.shape;
  const long rows = static_cast<long>(s.n_layers) * s.n_kv_heads;
  const std::uint64_t per_token = static_cast<std::uint64_t>(rows) *
      (dtype_bytes_for(DTypeOf<S>::value, s.head_dim) + dtype_bytes_for(DTypeOf<SV>::value, s.head_dim));
  const unsigned char* src = c.data + static_cast<std::size_t>(pos - c.info.first) * per_token;
  src = decode_rows<T, S>(src, rows, s.head_dim, record.data());
  decode_rows<T, SV>(src, rows, s.head_dim, record.data() + rows * s.head_dim);
}

/// Replaces cache's contents with the checked file contents: clear(), write()
/// positions [first, length) in increasing order (so a ring cache keeps the newest),
/// then commit_append(length). Cannot fail once the staging buffer exists: the
/// caller checked shape, type and capacity, and a window cache's ring always
/// holds the window.
template <class T, class S, class SV>
void fill(const Contents& c, KVCache<T, S, SV>& cache) {
  const CacheShape& s = c.info.shape;
  const long kv = static_cast<long>(s.n_kv_heads) * s.head_dim;
  std::vector<T> record(static_cast<std::size_t>(2L * s.n_layers * kv));  // K (n_layers, kv) then V (n_layers, kv)
  cache.clear();
  for (int pos = c.info.first; pos < c.info.length; ++pos) {
    load_record<T, S, SV>(c, pos, record);
    for (int l = 0; l < s.n_layers; ++l) cache.write(l, pos, record.data() + l * kv, record.data() + (s.n_layers + l) * kv);
  }
  cache.commit_restored(c.info.first, c.info.length);
}

/// A new sequence of `pool` holding the checked file contents: positions appended a
/// pool block at a time (so a sliding window's blocks are released as it goes and the
/// pool never needs more than the window), those before `first` left unwritten and
/// marked as never restored. Throws OutOfBlocksError if the pool runs out; the
/// partial sequence is then destroyed and its blocks returned.
template <class T, class S, class SV>
PagedSequence<T, S, SV> fill_paged(const Contents& c, BlockPool<T, S, SV>& pool) {
  const CacheShape& s = c.info.shape;
  const long kv = static_cast<long>(s.n_kv_heads) * s.head_dim;
  std::vector<T> record(static_cast<std::size_t>(2L * s.n_layers * kv));
  PagedSequence<T, S, SV> seq(pool);
  for (int pos0 = 0; pos0 < c.info.length; pos0 += pool.block_size()) {
    const int n = std::min(pool.block_size(), c.info.length - pos0);
    seq.prepare_append(n);
    for (int pos = std::max(pos0, c.info.first); pos < pos0 + n; ++pos) {
      load_record<T, S, SV>(c, pos, record);
      for (int l = 0; l < s.n_layers; ++l) seq.write(l, pos, record.data() + l * kv, record.data() + (s.n_layers + l) * kv);
    }
    seq.commit_append(n);
  }
  seq.commit_restored(c.info.first);
  return seq;
}

}  // namespace cache_file
}  // namespace detail

/// A model_id covering every ModelConfig field that changes the cached K and V
/// apart from the weights themselves (all shapes, rope_theta, norm_eps, the
/// classifier flag, the sliding window, the RoPE style and rotary dims, the q/k/v
/// biases and q/k norms, and Gemma's options when any is set: the layer pattern, the
/// local window and RoPE base, the RoPE scaling, the embedding scale, the post norms,
/// the activation and the attention scalar; gpt-oss's when any is set: YaRN, the local
/// layers' scaling, sinks and biases): FNV-1a 64 of their little-endian bytes. A model
/// without these options hashes the bytes it always did.
/// Same config, same id, on every platform. For protection against another
/// checkpoint of the same shape, hash the checkpoint file instead. Never fails.
inline std::uint64_t config_fingerprint(const ModelConfig& c) {
  unsigned char bytes[4 * 11 + 8 * 2 + 3];
  unsigned char* p = bytes;
  for (int v : {c.vocab_size, c.d_model, c.n_layers, c.n_heads, c.n_kv_heads, c.head_dim, c.hidden_dim,
                c.max_seq_len, c.sliding_window, static_cast<int>(c.rope_style), c.rope_dim}) {
    detail::store_u32_le(p, static_cast<std::uint32_t>(v));
    p += 4;
  }
  for (double v : {c.rope_theta, c.norm_eps}) {
    std::uint64_t bits;
    std::memcpy(&bits, &v, 8);
    detail::store_u64_le(p, bits);
    p += 8;
  }
  *p++ = c.shared_classifier ? 1 : 0;
  *p++ = c.qkv_bias ? 1 : 0;
  *p = c.qk_norm ? 1 : 0;
  const ModelConfig plain;
  const bool gpt_oss_plain = c.rope_scale_local == plain.rope_scale_local && c.rope_scaling == plain.rope_scaling &&
                             c.yarn_orig_ctx == plain.yarn_orig_ctx && c.yarn_beta_fast == plain.yarn_beta_fast &&
                             c.yarn_beta_slow == plain.yarn_beta_slow && c.yarn_truncate == plain.yarn_truncate &&
                             c.attn_sinks == plain.attn_sinks &&
                             c.attn_out_bias == plain.attn_out_bias && c.moe_bias == plain.moe_bias;
  if (c.swa_pattern == plain.swa_pattern && c.local_window == plain.local_window &&
      c.rope_theta_local == plain.rope_theta_local && c.rope_scale == plain.rope_scale &&
      c.embed_scale == plain.embed_scale && c.post_norms == plain.post_norms &&
      c.ffn_activation == plain.ffn_activation && c.query_pre_attn_scalar == plain.query_pre_attn_scalar && gpt_oss_plain)
    return detail::fnv1a64(bytes, sizeof bytes);
  unsigned char more[sizeof bytes + 4 * 3 + 8 * 2 + 3];
  std::memcpy(more, bytes, sizeof bytes);
  unsigned char* q = more + sizeof bytes;
  for (int v : {c.swa_pattern, c.local_window, c.query_pre_attn_scalar}) {
    detail::store_u32_le(q, static_cast<std::uint32_t>(v));
    q += 4;
  }
  for (double v : {c.rope_theta_local, c.rope_scale}) {
    std::uint64_t bits;
    std::memcpy(&bits, &v, 8);
    detail::store_u64_le(q, bits);
    q += 8;
  }
  *q++ = c.embed_scale ? 1 : 0;
  *q++ = c.post_norms ? 1 : 0;
  *q = static_cast<unsigned char>(c.ffn_activation);
  if (gpt_oss_plain) return detail::fnv1a64(more, sizeof more);
  unsigned char most[sizeof more + 4 + 8 * 2 + 5];
  std::memcpy(most, more, sizeof more);
  unsigned char* r = most + sizeof more;
  detail::store_u32_le(r, static_cast<std::uint32_t>(c.yarn_orig_ctx));
  r += 4;
  for (double v : {c.yarn_beta_fast, c.yarn_beta_slow}) {
    std::uint64_t bits;
    std::memcpy(&bits, &v, 8);
    detail::store_u64_le(r, bits);
    r += 8;
  }
  *r++ = c.rope_scale_local ? 1 : 0;
  *r++ = static_cast<unsigned char>(c.rope_scaling);
  *r++ = c.attn_sinks ? 1 : 0;
  *r++ = c.attn_out_bias ? 1 : 0;
  *r = c.moe_bias ? 1 : 0;
  if (c.yarn_truncate) return detail::fnv1a64(most, sizeof most);
  unsigned char untruncated[sizeof most + 1];  // HF's rope_scaling.truncate false (a fourth tier: the others' values stay)
  std::memcpy(untruncated, most, sizeof most);
  untruncated[sizeof most] = 1;
  return detail::fnv1a64(untruncated, sizeof untruncated);
}

/// Reads and checks a cache file (header, size and checksum) without loading it
/// into a cache. Reads the whole file.
/// Failure: FileError naming the path and the problem: missing, a directory or
/// not a regular file, unreadable, empty, wrong magic, unsupported version, a
/// header field out of range or inconsistent (length > capacity, capacity >
/// max_seq_len, unknown dtype, `first` not what length and sliding_window imply...),
/// truncated or extended, or a checksum mismatch.
inline CacheFileInfo read_cache_info(const std::string& path) { return detail::cache_file::read(path).info; }

/// Writes positions [cache.first_position(), cache.length()) of `cache` to `path`
/// in the format above, with `model_id` recorded for load_cache()/restore_cache() to check.
/// Result: `path` holds the file; the cache is not modified.
/// Failure: ArgumentError naming the path (nothing written) if a local layer's ring
/// no longer holds all those positions (see the top of this file: build the cache with
/// LocalLayers::kEveryPosition to save long sequences of such a model); FileError naming the path if it cannot be written or exists and is not a
/// regular file (a FIFO, a device, a symbolic link: never replaced). The file is written
/// beside `path` under a unique temporary name and renamed over it only when complete
/// and synced (detail::write_file_atomically), so on failure `path` is untouched and
/// no temporary file remains.
template <class T, class S, class SV>
void save_cache(const KVCache<T, S, SV>& cache, const std::string& path, std::uint64_t model_id = 0) {
  detail::cache_file::require_little_endian(path);
  detail::cache_file::check_savable(cache, path);
  detail::write_file_atomically(path, [&](std::ostream& out) { detail::cache_file::write_cache(cache, out, model_id); });
}

/// The same for a paged sequence: positions [first_position(), length()) gathered
/// from its blocks; the file records capacity = max_seq_len. The file is the same as
/// a KVCache of the same contents would write (apart from that capacity), and either
/// kind of cache restores it.
template <class T, class S, class SV>
void save_cache(const PagedSequence<T, S, SV>& cache, const std::string& path, std::uint64_t model_id = 0) {
  detail::cache_file::require_little_endian(path);
  detail::write_file_atomically(path, [&](std::ostream& out) { detail::cache_file::write_cache(cache, out, model_id); });
}

/// Replaces the contents of `cache` with the positions saved in `path`.
/// Result: cache.length() is the file's length and every K/V element of positions
/// [first, length) equals the saved one, so decoding on is bit-identical to
/// decoding on from the saved cache. The cache keeps its own capacity (it need
/// only hold `length` positions) and, for a sliding window, its own max_append.
/// A restored sliding-window cache holds positions [first, length) only; truncate()
/// then refuses (CacheFullError) a length whose window would need older ones.
/// Failure (the cache is unchanged in every case; the whole file is read and
/// checked first): FileError as for read_cache_info(); CacheMismatchError if the
/// file was saved for another cache shape, element type S or model_id;
/// CacheFullError if the file holds more positions than cache.capacity().
template <class T, class S, class SV>
void restore_cache(const std::string& path, KVCache<T, S, SV>& cache, std::uint64_t model_id = 0) {
  const detail::cache_file::Contents c = detail::cache_file::read(path);
  detail::cache_file::check_compatible(path, c.info, cache.shape(), cache.dtype(), cache.value_dtype(), model_id);
  if (c.info.length > cache.capacity())
    throw CacheFullError(detail::msg("cache file '", path, "': holds ", c.info.length,
                                     " positions, more than the target cache's capacity of ", cache.capacity()));
  detail::cache_file::fill(c, cache);
}

/// Replaces the contents of paged sequence `seq` with the positions saved in `path`,
/// in new blocks of its pool (a file from a contiguous cache or a paged one).
/// Result as for the KVCache overload; a restored sliding-window sequence holds
/// positions [first, length) only and truncate() refuses lengths whose window needs older ones.
/// Failure (the sequence and its blocks unchanged in every case): FileError as for
/// read_cache_info(); CacheMismatchError if the file was saved for another cache shape,
/// element type S or model_id; CacheFullError if it holds more than max_seq_len
/// positions; OutOfBlocksError if the pool lacks the blocks (while `seq` still holds its own).
template <class T, class S, class SV>
void restore_cache(const std::string& path, PagedSequence<T, S, SV>& seq, std::uint64_t model_id = 0) {
  const detail::cache_file::Contents c = detail::cache_file::read(path);
  detail::cache_file::check_compatible(path, c.info, seq.shape(), seq.dtype(), seq.value_dtype(), model_id);
  if (c.info.length > seq.capacity())
    throw CacheFullError(detail::msg("cache file '", path, "': holds ", c.info.length,
                                     " positions, more than the sequence's capacity of ", seq.capacity()));
  seq = detail::cache_file::fill_paged(c, seq.pool());
}

/// A new cache of `config`'s shape holding the positions saved in `path`, with
/// capacity options.capacity (0 = the capacity recorded in the file).
/// Failure: ConfigError if config is invalid, options.capacity is outside
/// [1, max_seq_len] (and not 0) or options.max_append < 0; FileError, CacheMismatchError as for
/// restore_cache(); CacheFullError if options.capacity is below the file's length.
template <class T, class S = T, class SV = S>
KVCache<T, S, SV> load_cache(const std::string& path, const ModelConfig& config, const CacheLoadOptions& options = {}) {
  config.validate();
  const detail::cache_file::Contents c = detail::cache_file::read(path);
  detail::cache_file::check_compatible(path, c.info, CacheShape::of(config), DTypeOf<S>::value, DTypeOf<SV>::value,
                                       options.model_id);
  const int capacity = options.capacity == 0 ? c.info.capacity : options.capacity;
  if (capacity < c.info.length && capacity >= 1)
    throw CacheFullError(detail::msg("cache file '", path, "': holds ", c.info.length,
                                     " positions, more than the requested capacity of ", capacity));
  KVCache<T, S, SV> cache(config, capacity, options.max_append);  // ConfigError for a capacity outside [1, max_seq_len]
  detail::cache_file::fill(c, cache);
  return cache;
}

}  // namespace kvd
