// Fuzz target: prompt cache files (prompt_cache.hpp): a header with tokens, then
// an embedded cache file. Each input is tried as is and "resealed" (the header
// checksum after the tokens and the embedded cache file's trailing checksum
// recomputed), so that mutations get past both checksums. The file is parsed from
// memory; when it is accepted and its cache is small (the caller's budget), it is
// restored into a KVCache and into a PagedSequence of its element type and saved
// again from each: the same bytes must come back (f32; f64, bf16 and f16 value for
// value, NaN payloads aside, through the contiguous cache only).
#include <fstream>
#include <iterator>
#include <vector>

#include "fuzz_util.hpp"
#include "kvdecode/kvdecode.hpp"

namespace {

std::vector<unsigned char> read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<unsigned char>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

[[noreturn]] void finding(const char* what) {
  std::fprintf(stderr, "FINDING: %s\n", what);
  std::abort();
}

template <class S, class SV = S>
bool same_values(const std::vector<unsigned char>& a, const std::vector<unsigned char>& b) {
  if (a.size() != b.size()) return false;
  if constexpr (std::is_same_v<S, float> || !std::is_same_v<S, SV> || kvd::detail::KVStore<S>::kQuantized) {
    return a == b;
  } else {
    // The embedded cache's data: between its 64-byte header and its 8-byte checksum.
    const std::uint32_t n = kvd::detail::load_u32_le(a.data() + 8);
    const std::size_t data0 = 40 + 4 * static_cast<std::size_t>(n) + 64, data_end = a.size() - 8;
    if (std::memcmp(a.data(), b.data(), data0) != 0) return false;
    for (std::size_t i = data0; i + sizeof(S) <= data_end; i += sizeof(S)) {
      S x, y;
      std::memcpy(static_cast<void*>(&x), &a[i], sizeof(S));
      std::memcpy(static_cast<void*>(&y), &b[i], sizeof(S));
      const float fx = static_cast<float>(x), fy = static_cast<float>(y);
      if (fx != fx ? fy == fy : std::memcmp(&a[i], &b[i], sizeof(S)) != 0) return false;
    }
    return true;
  }
}

template <class T, class S, class SV = S>
void round_trip(const std::string& path, const kvd::PromptCacheInfo& info, const std::vector<unsigned char>& input) {
  kvd::ModelConfig c;  // only the cache shape has to match the file
  c.n_layers = info.cache.shape.n_layers;
  c.n_heads = c.n_kv_heads = info.cache.shape.n_kv_heads;
  c.head_dim = info.cache.shape.head_dim;
  c.max_seq_len = info.cache.shape.max_seq_len;
  c.sliding_window = info.cache.shape.sliding_window;
  c.kv_rotation = info.cache.shape.rotation;  // a rotated file loads into a rotated cache
  c.d_model = 2; c.hidden_dim = 2; c.vocab_size = 3;
  kvd::KVCache<T, S, SV> cache(c, info.cache.capacity);
  const std::vector<int> tokens = kvd::restore_prompt_cache(path, cache, info.model_id);
  if (tokens != info.tokens || cache.length() != info.cache.length) finding("restore disagrees with the file's info");
  const std::string copy = path + ".copy";
  kvd::save_prompt_cache(cache, tokens, info.vocab_size, copy, info.model_id);
  if (!same_values<S, SV>(read_all(copy), input)) finding("restore + save into a KVCache changed the file");
  if constexpr (std::is_same_v<T, S> || kvd::detail::KVStore<S>::kQuantized) {
    if (info.cache.capacity != c.max_seq_len) return;  // a sequence records capacity = max_seq_len
    kvd::BlockPool<T, S, SV> pool(c, c.max_seq_len / 16 + 2, 16);
    kvd::PagedSequence<T, S, SV> seq(pool);
    if (kvd::restore_prompt_cache(path, seq, info.model_id) != info.tokens) finding("paged restore lost the tokens");
    kvd::save_prompt_cache(seq, tokens, info.vocab_size, copy, info.model_id);
    if (!same_values<S, SV>(read_all(copy), input)) finding("restore + save into a PagedSequence changed the file");
  }
  std::remove(copy.c_str());
}

void one(const std::vector<unsigned char>& bytes) {
  kvd_fuzz::run([&] {
    const std::string& path = kvd_fuzz::write_scratch("prompt.kvdp", bytes.data(), bytes.size());
    kvd::detail::prompt_file::Contents c;
    c.file = kvd::detail::MappedFile::from_bytes(bytes, path);
    kvd::detail::prompt_file::parse_into(c, path);  // from memory
    const kvd::PromptCacheInfo& info = c.info;
    const kvd::CacheShape& s = info.cache.shape;
    const std::uint64_t per_token = 2ull * s.n_layers * s.n_kv_heads * s.head_dim * 8;
    if (per_token * static_cast<std::uint64_t>(s.max_seq_len + 32) > (64ull << 20)) return;  // the caller's budget
    using kvd::DType;
    const DType k = info.cache.dtype, v = info.cache.value_dtype;
    if (k != v || k == DType::kQ8 || k == DType::kQ4) {  // a version 3 cache file inside
      if (k == DType::kQ8 && v == DType::kQ8) round_trip<float, kvd::CacheQ8_0>(path, info, bytes);
      else if (k == DType::kQ4 && v == DType::kQ4) round_trip<float, kvd::CacheQ4_0>(path, info, bytes);
      else if (k == DType::kQ8 && v == DType::kQ4) round_trip<float, kvd::CacheQ8_0, kvd::CacheQ4_0>(path, info, bytes);
      else if (k == DType::kQ4 && v == DType::kF16) round_trip<float, kvd::CacheQ4_0, Eigen::half>(path, info, bytes);
      return;  // other pairs are sound files of types this harness does not compile
    }
    switch (info.cache.dtype) {
      case kvd::DType::kF32: round_trip<float, float>(path, info, bytes); break;
      case kvd::DType::kF64: round_trip<double, double>(path, info, bytes); break;
      case kvd::DType::kBF16: round_trip<float, Eigen::bfloat16>(path, info, bytes); break;
      case kvd::DType::kF16: round_trip<float, Eigen::half>(path, info, bytes); break;
      default: finding("the parser accepted an unknown cache dtype");
    }
  });
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  kvd_fuzz::remove_scratch_at_exit("prompt.kvdp");
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::vector<unsigned char> bytes(data, data + size);
  one(bytes);
  if (size >= 40) {  // reseal: the header checksum, then the embedded cache file's
    const std::uint64_t n = kvd::detail::load_u32_le(bytes.data() + 8);
    const std::uint64_t hashed = 32 + 4 * n;
    if (hashed + 8 <= size) {
      kvd::detail::store_u64_le(bytes.data() + hashed, kvd::detail::fnv1a64(bytes.data(), hashed));
      if (size >= hashed + 8 + 72)
        kvd::detail::store_u64_le(bytes.data() + size - 8, kvd::detail::fnv1a64(bytes.data() + hashed + 8, size - hashed - 16));
      one(bytes);
    }
  }
  return 0;
}
