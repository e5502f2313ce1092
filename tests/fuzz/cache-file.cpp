// Fuzz target: saved KV cache files (cache_io.hpp).
// Each input is tried as is and "resealed" (its last 8 bytes replaced by the
// FNV-1a checksum of the rest), so that mutations of the header and data get
// past the checksum. read_cache_info, then, for a cache of at most 64 MB,
// load_cache into a KVCache of the file's element type, and save it again: a
// f32/f64 file must come back byte for byte; a bf16/f16 one value for value
// (NaN payloads may be quieted on the way through float). A version 3 file of
// q8_0 / q4_0 blocks or of K and V types of their own (a pair kvdecode-generate
// compiles) must come back byte for byte: its blocks are re-quantized from the
// values they read as, which gives them back.
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

template <class S>
bool same_value(const unsigned char* a, const unsigned char* b) {
  S x, y;
  std::memcpy(static_cast<void*>(&x), a, sizeof(S));
  std::memcpy(static_cast<void*>(&y), b, sizeof(S));
  const float fx = static_cast<float>(x), fy = static_cast<float>(y);
  if (fx != fx) return fy != fy;
  return std::memcmp(a, b, sizeof(S)) == 0;
}

template <class T, class S, class SV = S>
void round_trip(const std::string& path, const kvd::CacheFileInfo& info, const std::vector<unsigned char>& input) {
  kvd::ModelConfig c;  // the caller's model: only the cache shape has to match the file
  c.n_layers = info.shape.n_layers;
  c.n_heads = c.n_kv_heads = info.shape.n_kv_heads;
  c.head_dim = info.shape.head_dim;
  c.max_seq_len = info.shape.max_seq_len;
  c.sliding_window = info.shape.sliding_window;
  c.kv_rotation = info.shape.rotation;  // a rotated file loads into a rotated cache
  c.d_model = 2; c.hidden_dim = 2; c.vocab_size = 3;
  kvd::CacheLoadOptions opt;
  opt.model_id = info.model_id;
  kvd::KVCache<T, S, SV> cache = kvd::load_cache<T, S, SV>(path, c, opt);
  if (cache.length() != info.length || cache.first_position() != info.first || cache.capacity() != info.capacity) {
    std::fprintf(stderr, "FINDING: loaded cache has length %d first %d capacity %d, the file says %d %d %d\n",
                 cache.length(), cache.first_position(), cache.capacity(), info.length, info.first, info.capacity);
    std::abort();
  }
  const std::string copy = path + ".copy";
  kvd::save_cache(cache, copy, info.model_id);
  const std::vector<unsigned char> out = read_all(copy);
  std::remove(copy.c_str());
  bool same = out.size() == input.size();
  if constexpr (std::is_same_v<T, S> || !std::is_same_v<S, SV> || kvd::detail::KVStore<S>::kQuantized) {
    same = same && out == input;
  } else if (same) {
    const std::size_t header = 64, data_end = input.size() - 8;
    same = std::memcmp(out.data(), input.data(), header) == 0;
    for (std::size_t i = header; same && i < data_end; i += sizeof(S)) same = same_value<S>(&out[i], &input[i]);
  }
  if (!same) {
    std::fprintf(stderr, "FINDING: load_cache + save_cache changed the file (%zu bytes in, %zu out)\n", input.size(),
                 out.size());
    std::abort();
  }
}

void one(const std::vector<unsigned char>& bytes) {
  kvd_fuzz::run([&] {
    const std::string& path = kvd_fuzz::write_scratch("cache.kvdc", bytes.data(), bytes.size());
    const kvd::CacheFileInfo info = kvd::read_cache_info(path);
    const std::uint64_t per_token = 2ull * info.shape.n_layers * info.shape.n_kv_heads * info.shape.head_dim * 8;  // the widest type
    if (per_token * static_cast<std::uint64_t>(info.capacity + 16) > (64ull << 20)) return;  // the caller's budget
    using kvd::DType;
    if (info.dtype != info.value_dtype || info.dtype == DType::kQ8 || info.dtype == DType::kQ4) {
      const auto pair = [&](DType k, DType v) { return info.dtype == k && info.value_dtype == v; };
      if (pair(DType::kQ8, DType::kQ8)) round_trip<float, kvd::CacheQ8_0>(path, info, bytes);
      else if (pair(DType::kQ4, DType::kQ4)) round_trip<float, kvd::CacheQ4_0>(path, info, bytes);
      else if (pair(DType::kQ8, DType::kF16)) round_trip<float, kvd::CacheQ8_0, Eigen::half>(path, info, bytes);
      else if (pair(DType::kQ4, DType::kF16)) round_trip<float, kvd::CacheQ4_0, Eigen::half>(path, info, bytes);
      else if (pair(DType::kQ4, DType::kQ8)) round_trip<float, kvd::CacheQ4_0, kvd::CacheQ8_0>(path, info, bytes);
      return;  // other pairs are sound files of types this harness does not compile
    }
    switch (info.dtype) {
      case kvd::DType::kF32: round_trip<float, float>(path, info, bytes); break;
      case kvd::DType::kF64: round_trip<double, double>(path, info, bytes); break;
      case kvd::DType::kBF16: round_trip<float, Eigen::bfloat16>(path, info, bytes); break;
      case kvd::DType::kF16: round_trip<float, Eigen::half>(path, info, bytes); break;
      default:
        std::fprintf(stderr, "FINDING: read_cache_info accepted dtype code %d\n", static_cast<int>(info.dtype));
        std::abort();
    }
  });
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  kvd_fuzz::remove_scratch_at_exit("cache.kvdc");
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::vector<unsigned char> bytes(data, data + size);
  one(bytes);
  if (size >= 72) {
    kvd::detail::store_u64_le(bytes.data() + size - 8, kvd::detail::fnv1a64(bytes.data(), size - 8));
    one(bytes);
  }
  return 0;
}
