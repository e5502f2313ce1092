// Conversations. A turn that reuses the cache (rewinding it to the longest
// common token prefix, prefilling only the rest) gives the tokens and every
// logit, bit for bit (memcmp), of generate() on the whole prompt from an empty
// cache: greedy and sampled (with a repetition penalty, which reads the whole
// history), contiguous and paged caches, bf16 storage, sliding windows that
// cannot rewind, and a chat renderer that rewrites earlier turns as Qwen3's
// template does (a renderer written here, and Qwen3's own template). Bad inputs
// each get their own test, with nothing changed.
#include <gtest/gtest.h>

#include <map>
#include <memory>

#include "kvdecode/chat/chat_template.hpp"
#include "kvdecode/generate/conversation.hpp"
#include "kvdecode/cache/paged_cache.hpp"
#include "test_util.hpp"

using namespace kvd;
using kvd_test::make_tokens;
using kvd_test::small_config;

namespace {

ModelConfig conv_config(int window = 0, int max_seq_len = 256) {
  ModelConfig c = small_config(4, 2, 16, 64, 2, 96, 300, max_seq_len);
  c.sliding_window = window;
  return c;
}

/// Logit rows by position, as a turn delivered them.
struct Rows {
  std::vector<int> pos;
  std::vector<std::vector<float>> rows;
  LogitsCallback<float> callback() {
    return [this](int p, const float* l, int n) {
      pos.push_back(p);
      rows.emplace_back(l, l + n);
    };
  }
};

SamplerConfig sampled(std::uint64_t seed) {
  SamplerConfig s;
  s.temperature = 1.5;
  s.top_p = 0.98;
  s.repetition_penalty = 3.0;  // reads the history: the prompt before the reused prefix too
  s.seed = seed;
  return s;
}

/// Runs one conversation turn and, independently, generate() on the whole prompt
/// from an empty cache with a sampler in the same state; expects the same tokens and
/// the same rows, bit for bit, for every position from first_new on.
template <class S, class Cache>
TurnResult turn_and_check(Conversation<float, Cache>& conv, const std::vector<int>& prompt, Sampler& conv_sampler,
                          Sampler& ref_sampler, int max_new) {
  Transformer<float>& model = conv.model();
  const int V = model.config().vocab_size;
  GenerateOptions opt;
  opt.max_new_tokens = max_new;
  opt.stop_tokens = {5};
  Rows got, want;
  GenerateHooks<float> h;
  h.all_prompt_logits = true;
  h.on_logits = got.callback();
  h.choose = [&](const float* l, int n, const std::vector<int>& hist) { return conv_sampler.sample(l, n, hist); };
  TurnResult r = conv.turn(prompt, opt, h);

  KVCache<float, S> fresh(model.config());
  GenerateHooks<float> hr;
  hr.all_prompt_logits = true;
  hr.on_logits = want.callback();
  hr.choose = [&](const float* l, int n, const std::vector<int>& hist) { return ref_sampler.sample(l, n, hist); };
  GenerateResult<float> ref = generate(model, prompt, fresh, opt, hr);

  EXPECT_EQ(r.tokens, ref.tokens);
  EXPECT_EQ(r.stop, ref.stop);
  EXPECT_EQ(r.prompt_tokens, static_cast<int>(prompt.size()));
  EXPECT_EQ(r.reused + r.prefilled, r.prompt_tokens);
  // The rows delivered: every position from first_new, in order, each equal to the full prefill's.
  std::size_t j = 0;
  while (j < want.pos.size() && want.pos[j] < r.first_new) ++j;
  EXPECT_EQ(got.pos.size(), want.pos.size() - j) << "rows from position " << r.first_new;
  for (std::size_t i = 0; i < got.pos.size() && j + i < want.pos.size(); ++i) {
    EXPECT_EQ(got.pos[i], want.pos[j + i]);
    EXPECT_TRUE(kvd_test::same_bits(got.rows[i].data(), want.rows[j + i].data(), V))
        << "position " << got.pos[i] << ": " << kvd_test::first_difference(got.rows[i].data(), want.rows[j + i].data(), V);
  }
  // The history is the prompt and every generated token.
  std::vector<int> hist = prompt;
  hist.insert(hist.end(), r.tokens.begin(), r.tokens.end());
  EXPECT_EQ(conv.tokens(), hist);
  EXPECT_EQ(conv.cache().length(), static_cast<int>(hist.size()) - 1);
  return r;
}

/// Five turns: a first prompt; the history plus a new message (full reuse); a
/// rewrite inside the first reply (rewind); a strict prefix (truncate); one token.
template <class S, class Cache>
std::vector<TurnResult> run_turns(Conversation<float, Cache>& conv, bool sample) {
  const int V = conv.model().config().vocab_size;
  Sampler a(sample ? sampled(11) : SamplerConfig{}), b(sample ? sampled(11) : SamplerConfig{});
  std::vector<TurnResult> out;
  const std::vector<int> p1 = make_tokens(12, V, 1);
  out.push_back(turn_and_check<S>(conv, p1, a, b, 16));
  EXPECT_EQ(out.back().reused, 0);

  std::vector<int> p2 = conv.tokens();
  const std::vector<int> user2 = make_tokens(7, V, 2);
  p2.insert(p2.end(), user2.begin(), user2.end());
  out.push_back(turn_and_check<S>(conv, p2, a, b, 16));

  std::vector<int> p3 = conv.tokens();
  p3[p1.size() + 2] = (p3[p1.size() + 2] + 1) % V;  // an earlier reply, rendered differently
  const std::vector<int> user3 = make_tokens(9, V, 3);
  p3.insert(p3.end(), user3.begin(), user3.end());
  out.push_back(turn_and_check<S>(conv, p3, a, b, 16));

  const std::vector<int> p4(conv.tokens().begin(), conv.tokens().begin() + 10);
  out.push_back(turn_and_check<S>(conv, p4, a, b, 6));
  out.push_back(turn_and_check<S>(conv, {conv.tokens()[0]}, a, b, 4));
  return out;
}

template <class S>
void check_contiguous(bool sample, int window, int max_append) {
  const ModelConfig c = conv_config(window);
  Transformer<float> model(ModelWeights<float>::random(c, 3));
  Conversation conv(model, KVCache<float, S>(c, 0, max_append));
  const auto turns = run_turns<S>(conv, sample);
  if (window == 0) {
    // Turn 2 reused every fed position; turn 3 rewound to the changed token.
    EXPECT_EQ(turns[1].reused, static_cast<int>(12 + turns[0].tokens.size()) - 1);
    EXPECT_EQ(turns[1].dropped, 0);
    EXPECT_EQ(turns[2].reused, 12 + 2);
    EXPECT_GT(turns[2].dropped, 0);
    EXPECT_EQ(turns[3].reused, 9);
    EXPECT_EQ(turns[3].prefilled, 1);
  } else {
    bool reprefill = false;
    for (const auto& t : turns) reprefill = reprefill || t.window_reprefill;
    EXPECT_TRUE(reprefill) << "the test should make the window's ring lose a position a rewind needs";
  }
}

template <class S>
void check_paged(bool sample, int window, int block_size) {
  const ModelConfig c = conv_config(window);
  Transformer<float> model(ModelWeights<float>::random(c, 3));
  BlockPool<float, S> pool(c, 64, block_size);
  Conversation conv(model, PagedSequence<float, S>(pool));
  const auto turns = run_turns<S>(conv, sample);
  if (window == 0) {
    EXPECT_EQ(turns[2].reused, 12 + 2);
  } else {
    bool reprefill = false;
    for (const auto& t : turns) reprefill = reprefill || t.window_reprefill;
    EXPECT_TRUE(reprefill);
  }
}

}  // namespace

TEST(ConversationExact, ContiguousGreedy) { check_contiguous<float>(false, 0, 0); }
TEST(ConversationExact, ContiguousSampled) { check_contiguous<float>(true, 0, 0); }
TEST(ConversationExact, ContiguousBfloat16StorageSampled) { check_contiguous<Eigen::bfloat16>(true, 0, 0); }
TEST(ConversationExact, PagedGreedyBlock16) { check_paged<float>(false, 0, 16); }
TEST(ConversationExact, PagedSampledBlock32) { check_paged<float>(true, 0, 32); }
// A ring of 48 positions (window 8, 16 rows per call): turn 3's rewind needs a position it lost.
TEST(ConversationExact, SlidingWindowContiguousRePrefills) { check_contiguous<float>(true, 8, 16); }
TEST(ConversationExact, SlidingWindowPagedRePrefills) { check_paged<float>(false, 8, 16); }

TEST(ConversationExact, NoReuseModeMatchesReuseMode) {
  const ModelConfig c = conv_config();
  Transformer<float> model(ModelWeights<float>::random(c, 3));
  ConversationOptions off;
  off.reuse_cache = false;
  Conversation reuse(model, KVCache<float>(c));
  Conversation again(model, KVCache<float>(c), off);
  const auto a = run_turns<float>(reuse, true);
  const auto b = run_turns<float>(again, true);
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].tokens, b[i].tokens);
    EXPECT_EQ(a[i].first_new, b[i].first_new);  // both modes deliver the same rows
    EXPECT_EQ(b[i].reused, 0);
    EXPECT_EQ(b[i].prefilled, b[i].prompt_tokens);
  }
}

// ---- the text layer: a renderer that rewrites history

namespace {

struct Msg {
  std::string role, content;
};

/// Bytes as tokens 3..258 (a byte-level "tokenizer"), so every text encodes.
std::vector<int> byte_encode(const std::string& s) {
  std::vector<int> ids;
  for (unsigned char ch : s) ids.push_back(3 + ch);
  return ids;
}
std::string byte_decode(const std::vector<int>& ids) {
  std::string s;
  for (int id : ids) s += id >= 3 && id < 259 ? static_cast<char>(id - 3) : '?';
  return s;
}

/// ChatML as Qwen3 renders it with enable_thinking = false: the generation prompt
/// opens an empty think block, and earlier assistant messages are rendered without
/// one, so each new turn rewrites the text the previous generation prompt emitted.
std::string qwen3_like_render(const std::vector<Msg>& messages, bool add_generation_prompt) {
  std::string out;
  for (const Msg& m : messages) {
    std::string content = m.content;
    if (m.role == "assistant") {
      const auto end = content.find("</think>");
      if (end != std::string::npos) content = content.substr(end + 8);
    }
    out += "<|im_start|>" + m.role + "\n" + content + "<|im_end|>\n";
  }
  if (add_generation_prompt) out += "<|im_start|>assistant\n<think>\n\n</think>\n\n";
  return out;
}

template <class M = Msg, class Cache>
void check_chat_rewrites(Transformer<float>& model, Cache cache, bool sample,
                         ChatRenderer<M> render = qwen3_like_render) {
  Conversation conv(model, std::move(cache));
  Chat<float, Cache, M> chat(conv, render, byte_encode, byte_decode, {{"system", "Be brief."}});
  Sampler a(sample ? sampled(5) : SamplerConfig{}), b(sample ? sampled(5) : SamplerConfig{});
  GenerateOptions opt;
  opt.max_new_tokens = 12;
  const int V = model.config().vocab_size;
  int rewound = 0;
  for (const char* user : {"Hello there.", "And again?", "A third question, longer than the others.", "Bye."}) {
    const std::vector<int> prompt = chat.prompt_for(user);
    Rows got, want;
    GenerateHooks<float> h;
    h.all_prompt_logits = true;
    h.on_logits = got.callback();
    h.choose = [&](const float* l, int n, const std::vector<int>& hist) { return a.sample(l, n, hist); };
    std::string text;
    const std::size_t before = conv.tokens().size();
    TurnResult r = chat.reply(user, opt, h, &text);
    if (r.dropped > 0) ++rewound;
    EXPECT_LE(r.reused, static_cast<int>(before));
    KVCache<float> fresh(model.config());
    GenerateHooks<float> hr;
    hr.all_prompt_logits = true;
    hr.on_logits = want.callback();
    hr.choose = [&](const float* l, int n, const std::vector<int>& hist) { return b.sample(l, n, hist); };
    GenerateResult<float> ref = generate(model, prompt, fresh, opt, hr);
    ASSERT_EQ(r.tokens, ref.tokens) << user;
    ASSERT_LE(got.pos.size(), want.pos.size());
    const std::size_t skip = want.pos.size() - got.pos.size();
    for (std::size_t i = 0; i < got.pos.size(); ++i) {
      ASSERT_EQ(got.pos[i], want.pos[skip + i]);
      ASSERT_TRUE(kvd_test::same_bits(got.rows[i].data(), want.rows[skip + i].data(), V)) << "position " << got.pos[i];
    }
    EXPECT_EQ(text, byte_decode(r.tokens));
  }
  EXPECT_EQ(chat.messages().size(), 9u);  // system + 4 x (user, assistant)
  EXPECT_EQ(rewound, 3) << "each later turn drops the previous generation prompt's think block";
}

}  // namespace

TEST(ConversationChat, RewritingRendererContiguousGreedy) {
  const ModelConfig c = conv_config(0, 512);
  Transformer<float> model(ModelWeights<float>::random(c, 9));
  check_chat_rewrites(model, KVCache<float>(c), false);
}
TEST(ConversationChat, RewritingRendererPagedSampled) {
  const ModelConfig c = conv_config(0, 512);
  Transformer<float> model(ModelWeights<float>::random(c, 9));
  BlockPool<float> pool(c, 40, 16);
  check_chat_rewrites(model, PagedSequence<float>(pool), true);
}

// Qwen3's own template (tokenizer_config.json, rendered by kvd::ChatTemplate) with
// enable_thinking = false rewrites history the same way.
TEST(ConversationChat, Qwen3TemplateRewritesHistoryPaged) {
  const std::string shared = kvd_test::shared_dir();
  if (shared.empty()) GTEST_SKIP() << "../shared is absent: no Qwen3 tokenizer_config.json";
  ChatTemplate qwen3 = ChatTemplate::from_tokenizer_config(shared + "/models/tokenizer-json/qwen3/tokenizer_config.json");
  qwen3.set_variable("enable_thinking", "false");
  const ModelConfig c = conv_config(0, 512);
  Transformer<float> model(ModelWeights<float>::random(c, 9));
  BlockPool<float> pool(c, 40, 16);
  check_chat_rewrites<ChatMessage>(model, PagedSequence<float>(pool), true,
                                   [&](const std::vector<ChatMessage>& m, bool g) { return qwen3.render(m, g); });
}

// A real model and its real tokenizer: stories260K with tok512's BPE merges, where a
// reply re-tokenizes differently from the ids generated.
TEST(ConversationChat, Stories260KWithTok512) {
  const std::string shared = kvd_test::shared_dir();
  if (shared.empty()) GTEST_SKIP() << "../shared is absent: no stories260K.bin / tok512.bin";
  Transformer<float> model(load_checkpoint<float>(shared + "/models/stories260K.bin"));
  const Llama2cTokenizer tok = Llama2cTokenizer::load(shared + "/models/tok512.bin", model.config().vocab_size);
  Conversation conv(model, KVCache<float>(model.config()));
  Chat<float, KVCache<float>, Msg> chat(
      conv, qwen3_like_render, [&](const std::string& s) { return tok.encode(s, true, false); },
      [&](const std::vector<int>& ids) {
        std::string s;
        int prev = 1;
        for (int id : ids) { s += tok.decode(prev, id); prev = id; }
        return s;
      });
  GenerateOptions opt;
  opt.max_new_tokens = 10;
  opt.stop_tokens = {2};
  for (const char* user : {"Once upon a time", "Lily saw a dog.", "The end."}) {
    const std::vector<int> prompt = chat.prompt_for(user);
    TurnResult r = chat.reply(user, opt);
    KVCache<float> fresh(model.config());
    GenerateResult<float> ref = generate(model, prompt, fresh, opt);
    EXPECT_EQ(r.tokens, ref.tokens) << user;
    EXPECT_EQ(r.prefilled + r.reused, static_cast<int>(prompt.size()));
  }
}

// ---- bad inputs: each throws its typed error and changes nothing

namespace {
struct Fixture {
  ModelConfig c = conv_config();
  Transformer<float> model{ModelWeights<float>::random(c, 3)};
  Conversation<float, KVCache<float>> conv{model, KVCache<float>(c, 64)};
  GenerateOptions opt;
  Fixture() {
    opt.max_new_tokens = 4;
    conv.turn(make_tokens(10, c.vocab_size, 1), opt);
  }
  void expect_unchanged(const std::vector<int>& tokens, int length) {
    EXPECT_EQ(conv.tokens(), tokens);
    EXPECT_EQ(conv.cache().length(), length);
  }
};
}  // namespace

TEST(ConversationErrors, EmptyPromptIsTokenError) {
  Fixture f;
  const auto t = f.conv.tokens();
  const int len = f.conv.cache().length();
  EXPECT_THROW(f.conv.turn({}, f.opt), TokenError);
  f.expect_unchanged(t, len);
}
TEST(ConversationErrors, TokenOutsideVocabularyIsTokenError) {
  Fixture f;
  const auto t = f.conv.tokens();
  const int len = f.conv.cache().length();
  std::vector<int> p = t;
  p.push_back(f.c.vocab_size);
  try {
    f.conv.turn(p, f.opt);
    FAIL() << "no throw";
  } catch (const TokenError& e) {
    EXPECT_NE(std::string(e.what()).find("300"), std::string::npos) << e.what();
  }
  f.expect_unchanged(t, len);
}
TEST(ConversationErrors, PromptBeyondCapacityIsCacheFullError) {
  Fixture f;
  const auto t = f.conv.tokens();
  const int len = f.conv.cache().length();
  EXPECT_THROW(f.conv.turn(make_tokens(65, f.c.vocab_size), f.opt), CacheFullError);
  f.expect_unchanged(t, len);
}
TEST(ConversationErrors, CacheFreeOptionIsArgumentError) {
  Fixture f;
  const auto t = f.conv.tokens();
  const int len = f.conv.cache().length();
  GenerateOptions o = f.opt;
  o.use_cache = false;
  EXPECT_THROW(f.conv.turn(t, o), ArgumentError);
  f.expect_unchanged(t, len);
}
TEST(ConversationErrors, NonEmptyCacheIsArgumentError) {
  const ModelConfig c = conv_config();
  Transformer<float> model(ModelWeights<float>::random(c, 3));
  KVCache<float> cache(c);
  model.prefill({1, 2, 3}, cache);
  EXPECT_THROW(Conversation(model, std::move(cache)), ArgumentError);
}
TEST(ConversationErrors, CacheOfAnotherShapeIsCacheMismatchError) {
  const ModelConfig c = conv_config();
  Transformer<float> model(ModelWeights<float>::random(c, 3));
  ModelConfig other = c;
  other.n_layers = 3;
  EXPECT_THROW(Conversation(model, KVCache<float>(other)), CacheMismatchError);
}
TEST(ConversationErrors, AdoptWithWrongTokenCountIsArgumentError) {
  Fixture f;
  const auto t = f.conv.tokens();
  const int len = f.conv.cache().length();
  KVCache<float> other(f.c, 64);
  f.model.prefill({1, 2, 3}, other);
  EXPECT_THROW(f.conv.adopt(std::move(other), {1, 2}), ArgumentError);
  f.expect_unchanged(t, len);
}
TEST(ConversationErrors, AdoptedCacheIsReused) {
  Fixture f;
  KVCache<float> other(f.c, 64);
  const std::vector<int> head = make_tokens(8, f.c.vocab_size, 4);
  f.model.prefill(head, other);
  f.conv.adopt(std::move(other), head);
  std::vector<int> p = head;
  p.push_back(7);
  const TurnResult r = f.conv.turn(p, f.opt);
  EXPECT_EQ(r.reused, 8);
  EXPECT_EQ(r.prefilled, 1);
  KVCache<float> fresh(f.c);
  EXPECT_EQ(r.tokens, generate(f.model, p, fresh, f.opt).tokens);
}
// A pool that runs out mid-turn: OutOfBlocksError, and the conversation stays
// consistent (its cache holds a prefix of tokens()); the next turn is exact again.
TEST(ConversationErrors, PoolOutOfBlocksKeepsTheInvariant) {
  const ModelConfig c = conv_config();
  Transformer<float> model(ModelWeights<float>::random(c, 3));
  BlockPool<float> pool(c, 3, 16);  // 48 positions
  Conversation conv(model, PagedSequence<float>(pool));
  GenerateOptions opt;
  opt.max_new_tokens = 40;
  EXPECT_THROW(conv.turn(make_tokens(20, c.vocab_size, 1), opt), OutOfBlocksError);
  ASSERT_LE(conv.cache().length(), static_cast<int>(conv.tokens().size()));
  EXPECT_GE(conv.cache().length(), 20);
  std::vector<int> p(conv.tokens().begin(), conv.tokens().begin() + 24);
  opt.max_new_tokens = 6;
  const TurnResult r = conv.turn(p, opt);
  EXPECT_EQ(r.reused, 23);
  KVCache<float> fresh(c);
  EXPECT_EQ(r.tokens, generate(model, p, fresh, opt).tokens);
}
