// Prompt cache files: a cache file (cache_io.hpp) together with the tokens whose
// K and V it holds and the identity of the model that computed them, so that a
// later run whose prompt starts with the same tokens restores the cache and
// prefills only the rest (kvdecode-generate --prompt-cache FILE). Restoring is
// exact: the logits are bit-identical to prefilling the whole prompt.
//
// File layout (version 1, little-endian):
//   offset    bytes  field
//        0        4  magic "KVDP"
//        4        4  u32 format version (1)
//        8        4  u32 n_tokens, in [0, 2^20]           the cached positions' tokens
//       12        4  u32 vocab_size, in [1, 2^30]         every token is below it
//       16        8  u64 model_id                         model_fingerprint() of the model
//       24        8  u64 cache bytes                      size of the embedded cache file
//       32   4 * n   u32 tokens
//   32 + 4n       8  u64 FNV-1a 64 of bytes [0, 32 + 4n)
//   40 + 4n   cache  a complete cache file ("KVDC", its own checksum), whose
//                    model_id is the same and whose length is n_tokens
// The file must end exactly there.
//
// The model identity. model_fingerprint() hashes what makes two models compute
// different K and V: the config (config_fingerprint), the compute type, every
// packed matrix's storage types and shape, the numerics of every segment whose
// products round their input rows (none in Numerics::kExact, so those ids do not
// depend on it), and 64-byte samples at fixed places of every matrix's bytes. It costs microseconds, so it runs on every load. It is not
// a hash of every weight: two models differing only between the samples collide
// (for trained weights that does not happen: fine-tuning moves every weight).
//
// A file is never trusted: everything is checked (each field names its offset in
// the FormatError) before a cache is touched. FileError / FormatError mean a
// damaged or foreign file, CacheMismatchError a sound file of another model or
// cache type; the caller falls back to a full prefill (see kvdecode-generate).
#pragma once

#include <cstdint>
#include <cstring>
#include <ostream>
#include <string>
#include <vector>

#include "kvdecode/cache/cache_io.hpp"
#include "kvdecode/io/bytes.hpp"
#include "kvdecode/io/file.hpp"
#include "kvdecode/error.hpp"
#include "kvdecode/cache/kv_cache.hpp"
#include "kvdecode/cache/paged_cache.hpp"
#include "kvdecode/model/transformer.hpp"

namespace kvd {

/// What a prompt cache file holds, after every check.
struct PromptCacheInfo {
  std::uint64_t model_id = 0;   ///< model_fingerprint() of the model that wrote it
  int vocab_size = 0;           ///< every token is in [0, vocab_size)
  std::vector<int> tokens;      ///< the cached positions' tokens, (cache.length)
  CacheFileInfo cache;          ///< the embedded cache file's header
};

namespace detail {
namespace prompt_file {

inline constexpr char kMagic[4] = {'K', 'V', 'D', 'P'};
inline constexpr std::uint32_t kVersion = 1;
inline constexpr std::uint64_t kHeaderBytes = 32;
inline constexpr std::uint32_t kMaxTokens = 1u << 20;   // ModelConfig's limit on max_seq_len
inline constexpr std::uint32_t kMaxVocab = 1u << 30;

/// A checked prompt cache file: its info and the embedded cache file's contents.
struct Contents {
  PromptCacheInfo info;
  MappedFile file;
  cache_file::Contents cache;  // points into `file`
};

/// Checks a whole prompt cache file held in `file`; `name` names it in errors.
/// Throws FormatError ("prompt cache file '<name>': <field> at offset <o>: ...").
inline void parse_into(Contents& c, const std::string& name) {
  const std::string label = msg("prompt cache file '", name, "'");
  ByteCursor cur(c.file.data(), c.file.size(), label);
  const unsigned char* magic = cur.bytes(4, "magic");
  if (std::memcmp(magic, kMagic, 4) != 0)
    cur.fail_at(0, "magic", "not a kvdecode prompt cache file (expected \"KVDP\")");
  const std::uint32_t version = cur.u32("version");
  if (version != kVersion)
    cur.fail_at(4, "version", msg("unsupported version ", version, " (this build reads version ", kVersion, ")"));
  const std::uint32_t n = cur.u32("n_tokens");
  if (n > kMaxTokens) cur.fail_at(8, "n_tokens", msg(n, " exceeds the limit ", kMaxTokens));
  const std::uint32_t vocab = cur.u32("vocab_size");
  if (vocab < 1 || vocab > kMaxVocab) cur.fail_at(12, "vocab_size", msg(vocab, " must be in [1, ", kMaxVocab, "]"));
  c.info.model_id = cur.u64("model_id");
  c.info.vocab_size = static_cast<int>(vocab);
  const std::uint64_t cache_bytes = cur.u64("cache bytes");
  cur.check_count(kHeaderBytes, n, 4, "tokens");  // before anything is allocated for them
  c.info.tokens.resize(n);
  for (std::uint32_t i = 0; i < n; ++i) {
    const std::uint64_t at = cur.offset();
    const std::uint32_t t = cur.u32("token");
    if (t >= vocab) cur.fail_at(at, "token", msg("token ", i, " = ", t, " is outside [0, vocab_size = ", vocab, ")"));
    c.info.tokens[i] = static_cast<int>(t);
  }
  const std::uint64_t hashed = cur.offset();
  const std::uint64_t recorded = cur.u64("checksum");
  const std::uint64_t computed = fnv1a64(c.file.data(), static_cast<std::size_t>(hashed));
  if (recorded != computed)
    cur.fail_at(hashed, "checksum", msg(std::hex, "records 0x", recorded, " but the header and tokens hash to 0x", computed,
                                        std::dec, "; the file is corrupt"));
  if (cache_bytes != cur.remaining())
    cur.fail_at(24, "cache bytes", msg(cache_bytes, " but ", cur.remaining(), " bytes follow the tokens at offset ",
                                       cur.offset(), " (the file is truncated or extended)"));
  const std::uint64_t cache_at = cur.offset();
  cache_file::parse_into(c.cache, msg(name, " (cache at offset ", cache_at, ")"), cur.bytes(cache_bytes, "cache"),
                         cache_bytes);
  c.info.cache = c.cache.info;
  if (c.cache.info.length != static_cast<int>(n))
    cur.fail_at(cache_at + 32, "cache length",
                msg("the cache holds ", c.cache.info.length, " positions but the file lists ", n, " tokens"));
  if (c.cache.info.model_id != c.info.model_id)
    cur.fail_at(cache_at + 40, "cache model_id",
                msg(std::hex, "0x", c.cache.info.model_id, " disagrees with the file's model_id 0x", c.info.model_id,
                    std::dec));
}

/// Maps and checks a prompt cache file. Throws FileError (missing, unreadable) or
/// FormatError naming the path, the field and its offset.
inline Contents read(const std::string& path) {
  cache_file::require_little_endian(path);
  Contents c;
  try {
    c.file = cache_file::open_regular(path, "prompt cache file");
  } catch (const FileError& e) {
    throw FileError(msg("prompt ", e.what()));
  }
  parse_into(c, path);
  return c;
}

/// Throws CacheMismatchError unless the file was written by the model `model_id` names.
inline void check_model(const std::string& path, const PromptCacheInfo& info, std::uint64_t model_id) {
  if (info.model_id != model_id)
    throw CacheMismatchError(msg("prompt cache file '", path, "': written by another model (model_id ", std::hex, "0x",
                                 info.model_id, ", this model's is 0x", model_id, std::dec, ")"));
}

/// Folds 64-byte samples at `k` evenly spaced places of [p, p + n) into h.
inline std::uint64_t hash_samples(const unsigned char* p, std::uint64_t n, int k, std::uint64_t h) {
  constexpr std::uint64_t kSample = 64;
  unsigned char len[8];
  store_u64_le(len, n);
  h = fnv1a64(len, 8, h);
  if (n == 0) return h;
  for (int i = 0; i < k; ++i) {
    const std::uint64_t at = n <= kSample ? 0 : (n - kSample) / static_cast<std::uint64_t>(k > 1 ? k - 1 : 1) * i;
    h = fnv1a64(p + at, static_cast<std::size_t>(std::min(kSample, n - at)), h);
  }
  return h;
}

}  // namespace prompt_file
}  // namespace detail

/// A model identity for prompt cache files: config_fingerprint(), sizeof(T), and
/// every packed matrix's storage types, shape, rounding numerics and byte samples (see the header
/// comment for what it does not cover). Same model, same id, on every platform of
/// the same endianness. Never fails.
template <class T>
std::uint64_t model_fingerprint(const Transformer<T>& model) {
  namespace pf = detail::prompt_file;
  std::uint64_t h = config_fingerprint(model.config());
  auto mix = [&h](std::uint64_t v) {
    unsigned char b[8];
    detail::store_u64_le(b, v);
    h = detail::fnv1a64(b, 8, h);
  };
  mix(sizeof(T));
  auto matrix = [&](const PackedMatrix<T>& m) {
    mix(static_cast<std::uint64_t>(m.n_out()));
    mix(static_cast<std::uint64_t>(m.n_in()));
    for (const auto& s : m.segments()) {
      mix(static_cast<std::uint64_t>(s.type));
      mix(static_cast<std::uint64_t>(s.n_panels));
      if (detail::fast_segment(m, s)) mix(0x524f554e44000000ull | static_cast<std::uint64_t>(m.numerics()));  // "ROUND"
      for (long p : {s.panel0, s.panel0 + s.n_panels / 2, s.panel0 + s.n_panels - 1})
        if (s.n_panels > 0) h = pf::hash_samples(m.template panel_as<unsigned char>(p), s.panel_bytes, 4, h);
    }
  };
  for (const auto& blk : model.blocks()) {
    matrix(blk.attention().wqkv());
    matrix(blk.attention().wo());
    matrix(blk.mlp().w13());
    matrix(blk.mlp().w2());
  }
  matrix(model.classifier());
  const WeightMatrix& e = model.embedding();
  mix(static_cast<std::uint64_t>(e.type()));
  h = pf::hash_samples(e.data(), e.bytes(), 16, h);
  return h;
}

/// Reads and checks a prompt cache file (header, tokens, checksums, the embedded
/// cache file) without loading it. Failure: FileError naming the path (missing,
/// a directory, unreadable) or FormatError naming the field and its offset.
inline PromptCacheInfo read_prompt_cache_info(const std::string& path) {
  return detail::prompt_file::read(path).info;
}

/// Writes `cache` and the tokens it holds to `path` with `model_id`
/// (model_fingerprint of the model that computed it) and the model's vocab_size.
/// Cache: KVCache or PagedSequence. The cache is not modified.
/// Failure: ArgumentError (nothing written) if tokens.size() != cache.length(), a
/// token is outside [0, vocab_size), or a local layer's ring no longer holds every
/// position (cache_io.hpp: save_cache); FileError naming the path if it cannot be
/// written or exists and is not a regular file (written beside it under a unique
/// temporary name, synced and renamed: `path` is then untouched).
template <class Cache>
void save_prompt_cache(const Cache& cache, const std::vector<int>& tokens, int vocab_size, const std::string& path,
                       std::uint64_t model_id) {
  namespace pf = detail::prompt_file;
  namespace cf = detail::cache_file;
  if (static_cast<int>(tokens.size()) != cache.length())
    throw ArgumentError(detail::msg("save_prompt_cache: ", tokens.size(), " tokens for a cache of ", cache.length(),
                                    " positions"));
  if (vocab_size < 1 || static_cast<std::uint32_t>(vocab_size) > pf::kMaxVocab)
    throw ArgumentError(detail::msg("save_prompt_cache: vocab_size ", vocab_size, " must be in [1, ", pf::kMaxVocab, "]"));
  for (std::size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] < 0 || tokens[i] >= vocab_size)
      throw ArgumentError(detail::msg("save_prompt_cache: token ", i, " = ", tokens[i], " is outside [0, ", vocab_size, ")"));
  cf::require_little_endian(path);
  cf::check_savable(cache, path);
  std::vector<unsigned char> head(pf::kHeaderBytes + 4 * tokens.size() + 8);
  std::memcpy(head.data(), pf::kMagic, 4);
  detail::store_u32_le(head.data() + 4, pf::kVersion);
  detail::store_u32_le(head.data() + 8, static_cast<std::uint32_t>(tokens.size()));
  detail::store_u32_le(head.data() + 12, static_cast<std::uint32_t>(vocab_size));
  detail::store_u64_le(head.data() + 16, model_id);
  detail::store_u64_le(head.data() + 24, cf::file_bytes_of(cache));
  for (std::size_t i = 0; i < tokens.size(); ++i)
    detail::store_u32_le(head.data() + pf::kHeaderBytes + 4 * i, static_cast<std::uint32_t>(tokens[i]));
  const std::size_t hashed = head.size() - 8;
  detail::store_u64_le(head.data() + hashed, detail::fnv1a64(head.data(), hashed));
  detail::write_file_atomically(path, [&](std::ostream& out) {
    out.write(reinterpret_cast<const char*>(head.data()), static_cast<std::streamsize>(head.size()));
    cf::write_cache(cache, out, model_id);
  });
}

/// Replaces `cache`'s contents with the file's and returns the tokens they belong to.
/// Failure (the cache unchanged; the whole file is checked first): FileError /
/// FormatError as for read_prompt_cache_info(); CacheMismatchError if the file was
/// written by another model (model_id) or for another cache shape or element type;
/// CacheFullError if it holds more positions than the cache can; for a PagedSequence,
/// OutOfBlocksError if the pool lacks the blocks.
template <class T, class S, class SV>
std::vector<int> restore_prompt_cache(const std::string& path, KVCache<T, S, SV>& cache, std::uint64_t model_id) {
  detail::prompt_file::Contents c = detail::prompt_file::read(path);
  detail::prompt_file::check_model(path, c.info, model_id);
  detail::cache_file::check_compatible(path, c.cache.info, cache.shape(), cache.dtype(), cache.value_dtype(), model_id);
  if (c.cache.info.length > cache.capacity())
    throw CacheFullError(detail::msg("prompt cache file '", path, "': holds ", c.cache.info.length,
                                     " positions, more than the cache's capacity of ", cache.capacity()));
  detail::cache_file::fill(c.cache, cache);
  return std::move(c.info.tokens);
}

/// The same for a paged sequence (new blocks of its pool; see restore_cache).
template <class T, class S, class SV>
std::vector<int> restore_prompt_cache(const std::string& path, PagedSequence<T, S, SV>& seq, std::uint64_t model_id) {
  detail::prompt_file::Contents c = detail::prompt_file::read(path);
  detail::prompt_file::check_model(path, c.info, model_id);
  detail::cache_file::check_compatible(path, c.cache.info, seq.shape(), seq.dtype(), seq.value_dtype(), model_id);
  if (c.cache.info.length > seq.capacity())
    throw CacheFullError(detail::msg("prompt cache file '", path, "': holds ", c.cache.info.length,
                                     " positions, more than the sequence's capacity of ", seq.capacity()));
  seq = detail::cache_file::fill_paged(c.cache, seq.pool());
  return std::move(c.info.tokens);
}

}  // namespace kvd
