// Non-finite numbers from files. The quantizer refuses a NaN weight and weights
// whose block scales overflow f16, naming the tensor, the type and the row (it
// used to report "RMSE 0" and write a NaN model). A cache file or prompt cache
// whose checksums are sound but whose K/V hold a NaN or an infinity is refused
// with a FormatError naming the position, K or V, layer, head and offset, and
// the target cache is left as it was.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "kvdecode/cache/cache_io.hpp"
#include "kvdecode/io/checkpoint.hpp"
#include "kvdecode/cache/kv_cache.hpp"
#include "kvdecode/generate/prompt_cache.hpp"
#include "kvdecode/convert/quantize.hpp"
#include "kvdecode/model/transformer.hpp"
#include "test_util.hpp"

using namespace kvd;
namespace fs = std::filesystem;

namespace {

using kvd_test::TempDir;

const std::string kShared = KVDECODE_SHARED_DIR;

#define SKIP_IF_MISSING(path) \
  if (!fs::exists(path)) GTEST_SKIP() << "shared test file not found: " << (path) << " (needs ../shared beside the checkout)"

std::vector<unsigned char> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<unsigned char>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}
void write_bytes(const std::string& path, const std::vector<unsigned char>& b) {
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}
void put_f32(std::vector<unsigned char>& b, std::size_t offset, float v) { std::memcpy(b.data() + offset, &v, 4); }

template <class E>
std::string expect_throw(const std::function<void()>& f) {
  std::string m;
  try {
    f();
    ADD_FAILURE() << "no error";
  } catch (const E& e) {
    m = e.what();
  }
  return m;
}
#define EXPECT_HAS(m, piece) EXPECT_NE((m).find(piece), std::string::npos) << "'" << (piece) << "' not in: " << (m)

// stories260K.bin with token embedding row 5, column 3 set to `v` (D = 64).
std::string checkpoint_with(const TempDir& dir, float v) {
  const std::string src = kShared + "/models/stories260K.bin";
  const CheckpointInfo info = read_checkpoint_info(src);
  const std::size_t header = info.format == CheckpointFormat::kLlama2cV1 ? 256 : 28;
  std::vector<unsigned char> b = read_bytes(src);
  put_f32(b, header + (5 * static_cast<std::size_t>(info.config.d_model) + 3) * 4, v);
  const std::string path = dir.file("model.bin");
  write_bytes(path, b);
  return path;
}

TEST(NonFinite, QuantizerRefusesANanWeight) {
  SKIP_IF_MISSING(kShared + "/models/stories260K.bin");
  TempDir dir;
  const std::string in = checkpoint_with(dir, std::numeric_limits<float>::quiet_NaN());
  const std::string m = expect_throw<FormatError>([&] { quantize_model(in, dir.file("out.gguf"), QuantScheme::kQ8_0); });
  EXPECT_HAS(m, "tensor 'token_embd.weight'");
  EXPECT_HAS(m, "row 5: weight [3] = nan is not finite");
  EXPECT_FALSE(fs::exists(dir.file("out.gguf")));
}

TEST(NonFinite, QuantizerRefusesScalesThatOverflowF16) {
  SKIP_IF_MISSING(kShared + "/models/stories260K.bin");
  TempDir dir;
  // q8_0's scale is max|x| / 127, stored as f16 (largest finite 65504): 1e9 / 127 overflows.
  const std::string in = checkpoint_with(dir, 1e9f);
  const std::string m = expect_throw<FormatError>([&] { quantize_model(in, dir.file("out.gguf"), QuantScheme::kQ8_0); });
  EXPECT_HAS(m, "tensor 'token_embd.weight'");
  EXPECT_HAS(m, "row 5: weights up to |1e+09| overflow the f16 scales of q8_0");
  EXPECT_HAS(m, "65504");
  EXPECT_FALSE(fs::exists(dir.file("out.gguf")));
  // F16 itself: 1e5 is past its largest finite value.
  const std::string in16 = checkpoint_with(dir, 1e5f);
  const std::string m16 = expect_throw<FormatError>([&] { quantize_model(in16, dir.file("out.gguf"), QuantScheme::kF16); });
  EXPECT_HAS(m16, "tensor 'token_embd.weight' as f16");
  EXPECT_HAS(m16, "row 5: weights up to |100000| overflow f16 (largest finite f16: 65504)");
  EXPECT_FALSE(fs::exists(dir.file("out.gguf")));
}

ModelConfig tiny_config() { return kvd_test::small_config(2, 1, 8, 16, 1, 24, 32, 16); }

// A sound cache file of 3 positions (1 layer, 1 kv head, head_dim 8, f32) with the
// element (position 2, V, index 1) set to `v` and the checksum recomputed.
void poison_cache_element(std::vector<unsigned char>& b, std::size_t cache_at, float v) {
  const std::size_t element = 2 * 16 + 8 + 1;  // records of 2 x 8 elements: position 2, V, index 1
  put_f32(b, cache_at + 64 + 4 * element, v);
  detail::store_u64_le(b.data() + b.size() - 8, detail::fnv1a64(b.data() + cache_at, b.size() - 8 - cache_at));
}

TEST(NonFinite, CacheFileWithNanOrInfIsRefused) {
  TempDir dir;
  Transformer<float> model(ModelWeights<float>::random(tiny_config(), 5));
  KVCache<float> cache(tiny_config());
  model.prefill({1, 2, 3}, cache);
  const std::string path = dir.file("c.kvdc");
  save_cache(cache, path);
  const std::vector<unsigned char> good = read_bytes(path);
  for (const float v : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    std::vector<unsigned char> b = good;
    poison_cache_element(b, 0, v);
    write_bytes(path, b);
    KVCache<float> target(tiny_config());
    model.prefill({4, 5}, target);
    const std::string m = expect_throw<FormatError>([&] { restore_cache(path, target); });
    EXPECT_HAS(m, "non-finite V element at position 2, layer 0, kv head 0, index 1");
    EXPECT_HAS(m, "file offset " + std::to_string(64 + 4 * (2 * 16 + 8 + 1)));
    EXPECT_EQ(target.length(), 2) << "the target cache changed";
  }
}

TEST(NonFinite, PromptCacheWithNanIsRefused) {
  TempDir dir;
  Transformer<float> model(ModelWeights<float>::random(tiny_config(), 5));
  KVCache<float> cache(tiny_config());
  model.prefill({1, 2, 3}, cache);
  const std::string path = dir.file("p.kvdp");
  save_prompt_cache(cache, {1, 2, 3}, tiny_config().vocab_size, path, model_fingerprint(model));
  std::vector<unsigned char> b = read_bytes(path);
  poison_cache_element(b, 40 + 4 * 3, std::numeric_limits<float>::quiet_NaN());  // the embedded cache file
  write_bytes(path, b);
  KVCache<float> target(tiny_config());
  const std::string m = expect_throw<FormatError>([&] { restore_prompt_cache(path, target, model_fingerprint(model)); });
  EXPECT_HAS(m, "non-finite V element at position 2");
  EXPECT_EQ(target.length(), 0) << "the target cache changed";
}

}  // namespace
