// Prompt cache files and paged cache files. A prompt cache saved after a
// prompt and restored on a later run gives, bit for bit (memcmp), the tokens
// and logits of prefilling the whole prompt, from contiguous and paged caches
// alike; paged sequences save and restore (also across the two kinds, and with
// a sliding window). The model identity tells models apart. Every malformed or
// mismatched file is its own test: the typed error, a message naming the field
// and its offset, and a target cache left as it was.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "kvdecode/generate/conversation.hpp"
#include "kvdecode/generate/prompt_cache.hpp"
#include "test_util.hpp"

using namespace kvd;
using kvd_test::make_tokens;
using kvd_test::small_config;
namespace fs = std::filesystem;

namespace {

ModelConfig pc_config(int window = 0) {
  ModelConfig c = small_config(4, 2, 16, 64, 2, 96, 300, 128);
  c.sliding_window = window;
  return c;
}

/// Removes the scratch directories when the program ends.
struct ScratchDirs : ::testing::Environment {
  std::vector<fs::path> dirs;
  void TearDown() override {
    std::error_code ec;
    for (const auto& d : dirs) fs::remove_all(d, ec);
  }
};
ScratchDirs* const scratch = static_cast<ScratchDirs*>(::testing::AddGlobalTestEnvironment(new ScratchDirs));

/// A path in a scratch directory of the current test.
std::string temp_file(const std::string& name) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const fs::path dir = fs::temp_directory_path() / (std::string("kvd_prompt_cache_") + info->name());
  fs::create_directories(dir);
  scratch->dirs.push_back(dir);
  return (dir / name).string();
}

std::vector<unsigned char> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<unsigned char>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}
void write_bytes(const std::string& path, const std::vector<unsigned char>& b) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

/// Logits of decoding `next` on each cache, as one vector.
template <class Cache>
std::vector<float> decode_rows(Transformer<float>& model, Cache& cache, const std::vector<int>& next) {
  std::vector<float> out;
  for (int t : next) {
    auto l = model.decode_step(t, cache);
    out.insert(out.end(), l.data(), l.data() + model.config().vocab_size);
  }
  return out;
}

struct Model {
  ModelConfig c;
  Transformer<float> model;
  std::uint64_t id;
  explicit Model(ModelConfig config, std::uint64_t seed = 3)
      : c(config), model(ModelWeights<float>::random(config, seed)), id(model_fingerprint(model)) {}
};

}  // namespace

// ---- paged sequences in cache files

TEST(PagedCacheFile, SavedSequenceRestoresIntoBothKindsExactly) {
  Model m(pc_config());
  BlockPool<float> pool(m.c, 24, 16);
  PagedSequence<float> seq(pool);
  const auto prompt = make_tokens(37, m.c.vocab_size, 1);
  m.model.prefill(prompt, seq);
  const std::string path = temp_file("paged.kvdc");
  save_cache(seq, path, 42);
  EXPECT_EQ(read_cache_info(path).length, 37);

  KVCache<float> contiguous(m.c);
  restore_cache(path, contiguous, 42);
  PagedSequence<float> back(pool);
  restore_cache(path, back, 42);
  EXPECT_EQ(back.length(), 37);
  const auto next = make_tokens(6, m.c.vocab_size, 2);
  const auto want = decode_rows(m.model, seq, next);
  EXPECT_EQ(decode_rows(m.model, contiguous, next), want);
  EXPECT_EQ(decode_rows(m.model, back, next), want);
}

TEST(PagedCacheFile, ContiguousFileRestoresIntoASequence) {
  Model m(pc_config());
  KVCache<float> cache(m.c);
  m.model.prefill(make_tokens(20, m.c.vocab_size, 1), cache);
  const std::string path = temp_file("contig.kvdc");
  save_cache(cache, path);
  BlockPool<float> pool(m.c, 16, 32);
  PagedSequence<float> seq(pool);
  restore_cache(path, seq);
  const auto next = make_tokens(5, m.c.vocab_size, 2);
  EXPECT_EQ(decode_rows(m.model, seq, next), decode_rows(m.model, cache, next));
}

// A sliding window of 8: the file holds the last 8 positions; the restored sequence
// decodes exactly and refuses to rewind to a length whose window it never held.
TEST(PagedCacheFile, SlidingWindowSequenceRestoresAndRefusesOldRewinds) {
  Model m(pc_config(8));
  BlockPool<float> pool(m.c, 12, 16);
  PagedSequence<float> seq(pool);
  m.model.prefill(make_tokens(50, m.c.vocab_size, 1), seq);
  const std::string path = temp_file("window.kvdc");
  save_cache(seq, path);
  EXPECT_EQ(read_cache_info(path).first, 43);
  PagedSequence<float> back(pool);
  restore_cache(path, back);
  EXPECT_LE(back.bytes_held(), 2 * pool.bytes_per_block()) << "blocks behind the window are returned";
  EXPECT_THROW(back.truncate(45), CacheFullError);  // its window starts at 38 < 43
  EXPECT_EQ(back.length(), 50);
  const auto next = make_tokens(20, m.c.vocab_size, 2);
  EXPECT_EQ(decode_rows(m.model, back, next), decode_rows(m.model, seq, next));
}

TEST(PagedCacheFile, PoolWithoutBlocksIsOutOfBlocksErrorAndKeepsTheSequence) {
  Model m(pc_config());
  BlockPool<float> big(m.c, 8, 16);
  PagedSequence<float> src(big);
  m.model.prefill(make_tokens(40, m.c.vocab_size, 1), src);
  const std::string path = temp_file("big.kvdc");
  save_cache(src, path);
  BlockPool<float> small(m.c, 3, 16);
  PagedSequence<float> seq(small);
  m.model.prefill(make_tokens(5, m.c.vocab_size, 3), seq);
  EXPECT_THROW(restore_cache(path, seq), OutOfBlocksError);
  EXPECT_EQ(seq.length(), 5);
  EXPECT_EQ(small.free_blocks(), 2);
}

// ---- the model identity

TEST(ModelFingerprint, SameWeightsSameIdOtherWeightsOrTypesOther) {
  const ModelConfig c = pc_config();
  Model a(c, 3), b(c, 3), other(c, 4);
  EXPECT_EQ(a.id, b.id);
  EXPECT_NE(a.id, other.id) << "same config, other weights";
  auto w = ModelWeights<float>::random(c, 3);
  for (auto& l : w.layers) l.w2 = l.w2.converted_to(WeightType::kF16);
  Transformer<float> f16(std::move(w));
  EXPECT_NE(a.id, model_fingerprint(f16)) << "same values, another storage type";
  ModelConfig c2 = c;
  c2.rope_theta = 20000;
  Model theta(c2, 3);
  EXPECT_NE(a.id, theta.id);
}

// ---- prompt cache files: save after a prompt, restore, prefill only the rest

TEST(PromptCache, ContiguousRestoreReusesThePromptExactly) {
  Model m(pc_config());
  const auto prompt = make_tokens(30, m.c.vocab_size, 1);
  const std::vector<int> head(prompt.begin(), prompt.end() - 1);
  const std::string path = temp_file("prompt.kvdp");
  GenerateOptions opt;
  opt.max_new_tokens = 8;
  {
    Conversation conv(m.model, KVCache<float>(m.c));
    conv.extend_to(head);
    save_prompt_cache(conv.cache(), conv.tokens(), m.c.vocab_size, path, m.id);
  }
  std::vector<int> longer = prompt;
  for (int t : make_tokens(9, m.c.vocab_size, 5)) longer.push_back(t);
  KVCache<float> restored(m.c);
  std::vector<int> tokens = restore_prompt_cache(path, restored, m.id);
  EXPECT_EQ(tokens, head);
  Conversation conv(m.model, KVCache<float>(m.c));
  conv.adopt(std::move(restored), std::move(tokens));
  std::vector<float> got, want;
  GenerateHooks<float> h;
  h.all_prompt_logits = true;
  h.on_logits = [&](int, const float* l, int n) { got.insert(got.end(), l, l + n); };
  const TurnResult r = conv.turn(longer, opt, h);
  EXPECT_EQ(r.reused, 29);
  EXPECT_EQ(r.prefilled, 10);
  KVCache<float> fresh(m.c);
  GenerateHooks<float> hr = h;
  hr.on_logits = [&](int pos, const float* l, int n) {
    if (pos >= 29) want.insert(want.end(), l, l + n);
  };
  EXPECT_EQ(generate(m.model, longer, fresh, opt, hr).tokens, r.tokens);
  ASSERT_EQ(got.size(), want.size());
  EXPECT_TRUE(kvd_test::same_bits(got.data(), want.data(), static_cast<long>(got.size())));
}

TEST(PromptCache, PagedSaveContiguousRestoreAndBack) {
  Model m(pc_config());
  BlockPool<float> pool(m.c, 20, 16);
  const auto head = make_tokens(21, m.c.vocab_size, 1);
  const std::string path = temp_file("paged.kvdp");
  {
    Conversation conv(m.model, PagedSequence<float>(pool));
    conv.extend_to(head);
    save_prompt_cache(conv.cache(), conv.tokens(), m.c.vocab_size, path, m.id);
  }
  PagedSequence<float> seq(pool);
  EXPECT_EQ(restore_prompt_cache(path, seq, m.id), head);
  KVCache<float> contiguous(m.c);
  EXPECT_EQ(restore_prompt_cache(path, contiguous, m.id), head);
  KVCache<float> fresh(m.c);
  m.model.prefill(head, fresh);
  const auto next = make_tokens(4, m.c.vocab_size, 2);
  const auto want = decode_rows(m.model, fresh, next);
  EXPECT_EQ(decode_rows(m.model, seq, next), want);
  EXPECT_EQ(decode_rows(m.model, contiguous, next), want);
}

// ---- bad files: each its own test, the target cache unchanged

namespace {
/// A valid prompt cache file of 12 tokens for model m (bytes), and a target cache holding 5 positions.
struct BadFile {
  Model m{pc_config()};
  std::string path = temp_file("bad.kvdp");
  std::vector<unsigned char> bytes;
  KVCache<float> target{m.c};
  BadFile() {
    KVCache<float> cache(m.c);
    const auto tokens = make_tokens(12, m.c.vocab_size, 1);
    m.model.prefill(tokens, cache);
    save_prompt_cache(cache, tokens, m.c.vocab_size, path, m.id);
    bytes = read_bytes(path);
    m.model.prefill(make_tokens(5, m.c.vocab_size, 9), target);
  }
  /// Rewrites the header checksum after an edit of bytes [0, 32 + 4n).
  void reseal() {
    const std::uint32_t n = detail::load_u32_le(bytes.data() + 8);
    const std::size_t hashed = 32 + 4 * static_cast<std::size_t>(n);
    detail::store_u64_le(bytes.data() + hashed, detail::fnv1a64(bytes.data(), hashed));
  }
  /// Loads the edited bytes; expects E with every fragment in the message and the target unchanged.
  template <class E>
  void expect(std::initializer_list<const char*> fragments) {
    write_bytes(path, bytes);
    try {
      restore_prompt_cache(path, target, m.id);
      ADD_FAILURE() << "no throw";
    } catch (const E& e) {
      for (const char* f : fragments) EXPECT_NE(std::string(e.what()).find(f), std::string::npos) << e.what() << " / " << f;
    }
    EXPECT_EQ(target.length(), 5);
    KVCache<float> ref(m.c);
    m.model.prefill(make_tokens(5, m.c.vocab_size, 9), ref);
    const auto next = make_tokens(2, m.c.vocab_size, 4);
    EXPECT_EQ(decode_rows(m.model, target, next), decode_rows(m.model, ref, next));
  }
};
}  // namespace

TEST(PromptCacheErrors, MissingFileIsFileError) {
  BadFile f;
  fs::remove(f.path);
  KVCache<float> c(f.m.c);
  EXPECT_THROW(restore_prompt_cache(f.path, c, f.m.id), FileError);
}
TEST(PromptCacheErrors, BadMagicIsFormatError) {
  BadFile f;
  f.bytes[0] = 'X';
  f.expect<FormatError>({"magic at offset 0", "KVDP"});
}
TEST(PromptCacheErrors, UnknownVersionIsFormatError) {
  BadFile f;
  detail::store_u32_le(f.bytes.data() + 4, 9);
  f.expect<FormatError>({"version at offset 4", "9"});
}
TEST(PromptCacheErrors, TooManyTokensIsFormatError) {
  BadFile f;
  detail::store_u32_le(f.bytes.data() + 8, (1u << 20) + 1);
  f.expect<FormatError>({"n_tokens at offset 8", "1048577"});
}
TEST(PromptCacheErrors, TokenCountBeyondTheFileIsFormatError) {
  BadFile f;
  detail::store_u32_le(f.bytes.data() + 8, 1u << 20);
  f.expect<FormatError>({"tokens at offset 32", "cannot fit"});
}
TEST(PromptCacheErrors, ZeroVocabularyIsFormatError) {
  BadFile f;
  detail::store_u32_le(f.bytes.data() + 12, 0);
  f.expect<FormatError>({"vocab_size at offset 12"});
}
TEST(PromptCacheErrors, TokenOutsideVocabularyIsFormatError) {
  BadFile f;
  detail::store_u32_le(f.bytes.data() + 32 + 4 * 3, 300);
  f.reseal();
  f.expect<FormatError>({"token at offset 44", "token 3 = 300", "vocab_size = 300"});
}
TEST(PromptCacheErrors, HeaderChecksumMismatchIsFormatError) {
  BadFile f;
  f.bytes[32] ^= 1;  // a token, checksum not updated
  f.expect<FormatError>({"checksum at offset 80", "corrupt"});
}
TEST(PromptCacheErrors, TruncatedFileIsFormatError) {
  BadFile f;
  f.bytes.resize(f.bytes.size() - 3);
  f.expect<FormatError>({"cache bytes at offset 24", "truncated"});
}
TEST(PromptCacheErrors, ExtendedFileIsFormatError) {
  BadFile f;
  f.bytes.push_back(0);
  f.expect<FormatError>({"cache bytes at offset 24"});
}
TEST(PromptCacheErrors, CorruptCacheDataIsFormatError) {
  BadFile f;
  f.bytes[f.bytes.size() - 20] ^= 0x40;  // inside the embedded cache's K/V data
  f.expect<FormatError>({"cache at offset 88", "checksum mismatch"});
}
TEST(PromptCacheErrors, CacheLengthDisagreeingWithTokensIsFormatError) {
  BadFile f;
  // Drop the last token from the list: 11 tokens for a cache of 12 positions.
  std::vector<unsigned char> b(f.bytes.begin(), f.bytes.begin() + 32 + 4 * 11);
  b.insert(b.end(), 8, 0);
  b.insert(b.end(), f.bytes.begin() + 32 + 4 * 12 + 8, f.bytes.end());
  detail::store_u32_le(b.data() + 8, 11);
  f.bytes = b;
  f.reseal();
  f.expect<FormatError>({"cache length at offset", "12 positions", "11 tokens"});
}
TEST(PromptCacheErrors, CacheModelIdDisagreeingWithTheFileIsFormatError) {
  BadFile f;
  detail::store_u64_le(f.bytes.data() + 16, 77);
  f.reseal();
  f.expect<FormatError>({"cache model_id at offset 128", "disagrees"});
}
TEST(PromptCacheErrors, FileOfAnotherModelIsCacheMismatchError) {
  BadFile f;
  Model other(pc_config(), 4);
  write_bytes(f.path, f.bytes);
  try {
    restore_prompt_cache(f.path, f.target, other.id);
    ADD_FAILURE() << "no throw";
  } catch (const CacheMismatchError& e) {
    EXPECT_NE(std::string(e.what()).find("another model"), std::string::npos) << e.what();
  }
  EXPECT_EQ(f.target.length(), 5);
}
TEST(PromptCacheErrors, FileForAnotherCacheTypeIsCacheMismatchError) {
  BadFile f;
  KVCache<float, Eigen::bfloat16> bf16(f.m.c);
  EXPECT_THROW(restore_prompt_cache(f.path, bf16, f.m.id), CacheMismatchError);
  EXPECT_EQ(bf16.length(), 0);
}
