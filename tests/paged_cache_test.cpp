// The paged cache's contract, as tests. Logits through a PagedSequence are
// bit-identical (memcmp, never a tolerance) to a contiguous KVCache and to
// forward_reference, for every block size, wherever the blocks sit in the
// pool, across forks (copy-on-write) and truncation. Block accounting
// (reference counts, free list, stats) is checked exactly, and a batch that
// runs out of blocks changes no sequence and no pool.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "kvdecode/cache/paged_cache.hpp"
#include "test_util.hpp"

using namespace kvd;
using kvd_test::make_tokens;
using kvd_test::small_config;

namespace {

ModelConfig mha_config(int max_seq_len = 150) { return small_config(4, 4, 10, 40, 2, 72, 97, max_seq_len); }
ModelConfig gqa_config(int max_seq_len = 150) { return small_config(8, 2, 16, 64, 2, 96, 130, max_seq_len); }

std::vector<int> concat(const std::vector<int>& a, const std::vector<int>& b) {
  std::vector<int> r = a;
  r.insert(r.end(), b.begin(), b.end());
  return r;
}
std::vector<int> head(const std::vector<int>& a, int n) { return std::vector<int>(a.begin(), a.begin() + n); }

// Prefill tokens[0..k) (all logits) into `cache`, then decode steps to the end: every position's logits (n, V).
template <class T, class Cache>
RowMatrix<T> prefill_then_decode(Transformer<T>& model, const std::vector<int>& tokens, int k, Cache& cache) {
  const int n = static_cast<int>(tokens.size()), V = model.config().vocab_size;
  RowMatrix<T> out(n, V);
  out.topRows(k) = model.prefill(head(tokens, k), cache, true);
  for (int t = k; t < n; ++t) out.row(t) = model.decode_step(tokens[t], cache).row(0);
  return out;
}

// Row r of `got` equals row `ref_row0 + r` of `ref`, bit for bit, for every row.
template <class T>
void expect_rows_bits_eq(const RowMatrix<T>& got, const RowMatrix<T>& ref, long ref_row0, const std::string& what) {
  ASSERT_EQ(got.cols(), ref.cols());
  for (long r = 0; r < got.rows(); ++r)
    ASSERT_TRUE(kvd_test::same_bits(got.row(r).data(), ref.row(ref_row0 + r).data(), got.cols()))
        << what << ", row " << r << ": "
        << kvd_test::first_difference(got.row(r).data(), ref.row(ref_row0 + r).data(), got.cols());
}

// Every stored K and V value of a sequence, to check that nothing changed it.
template <class T, class S>
std::vector<T> snapshot(const PagedSequence<T, S>& s) {
  std::vector<T> v;
  const CacheShape& sh = s.shape();
  for (int l = 0; l < sh.n_layers; ++l)
    for (int p = 0; p < s.length(); ++p)
      for (int h = 0; h < sh.n_kv_heads; ++h)
        for (int d = 0; d < sh.head_dim; ++d) {
          v.push_back(s.key(l, p, h, d));
          v.push_back(s.value(l, p, h, d));
        }
  return v;
}

template <class T>
bool same_values(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && kvd_test::same_bits(a.data(), b.data(), static_cast<long>(a.size()));
}

// Table entries of a sequence are not consecutive pool blocks somewhere.
bool scattered(const std::vector<int>& table) {
  for (std::size_t i = 1; i < table.size(); ++i)
    if (table[i] != table[i - 1] + 1) return true;
  return false;
}

// ---------------------------------------------------------------------------
// Paged == contiguous == reference, for block sizes 16, 32, 64, MHA and GQA.

struct PagedParam {
  const char* name;
  ModelConfig config;
  int block_size;
};

std::string param_name(const ::testing::TestParamInfo<PagedParam>& info) {
  return std::string(info.param.name) + "_block" + std::to_string(info.param.block_size);
}

class PagedExact : public ::testing::TestWithParam<PagedParam> {};

// For several prefill/decode splits (around block edges): paged logits == KVCache logits == reference rows.
template <class T, class S = T>
void check_paged_matches_contiguous(const ModelConfig& c, int block_size) {
  Transformer<T> model(ModelWeights<T>::random(c, 31));
  const int n = c.max_seq_len;
  const auto tokens = make_tokens(n, c.vocab_size, 41);
  const RowMatrix<T> ref = model.template forward_reference<S>(tokens);
  BlockPool<T, S> pool(c, (n + block_size - 1) / block_size + 3, block_size);
  for (int k : {1, 16, 17, 65, n}) {
    KVCache<T, S> contiguous(c);
    PagedSequence<T, S> paged(pool);
    const RowMatrix<T> a = prefill_then_decode(model, tokens, k, contiguous);
    const RowMatrix<T> b = prefill_then_decode(model, tokens, k, paged);
    expect_rows_bits_eq(a, ref, 0, "contiguous vs reference, prefill " + std::to_string(k));
    expect_rows_bits_eq(b, ref, 0, "paged vs reference, prefill " + std::to_string(k));
    EXPECT_EQ(paged.length(), n);
    EXPECT_EQ(static_cast<int>(paged.block_table().size()), pool.blocks_for(n));
    EXPECT_EQ(pool.blocks_in_use(), pool.blocks_for(n));
  }
  EXPECT_EQ(pool.blocks_in_use(), 0) << "destroyed sequences return their blocks";
}

TEST_P(PagedExact, MatchesContiguousAndReferenceFloat) {
  check_paged_matches_contiguous<float>(GetParam().config, GetParam().block_size);
}
TEST_P(PagedExact, MatchesContiguousAndReferenceDouble) {
  check_paged_matches_contiguous<double>(GetParam().config, GetParam().block_size);
}
TEST_P(PagedExact, MatchesContiguousAndReferenceBfloat16Storage) {
  check_paged_matches_contiguous<float, Eigen::bfloat16>(GetParam().config, GetParam().block_size);
}

INSTANTIATE_TEST_SUITE_P(BlockSizes, PagedExact,
                         ::testing::Values(PagedParam{"MHA", mha_config(), 16}, PagedParam{"GQA", gqa_config(), 16},
                                           PagedParam{"MHA", mha_config(), 32}, PagedParam{"GQA", gqa_config(), 32},
                                           PagedParam{"MHA", mha_config(), 64}, PagedParam{"GQA", gqa_config(), 64},
                                           PagedParam{"GQA", gqa_config(), 48},
                                           PagedParam{"Qwen3Moe", kvd_test::qwen3moe_like(gqa_config(), 6, 2), 16}),
                         param_name);

// Three sequences growing in turns (prefill chunks and decode steps), one of them
// freed half-way so the others reuse its blocks: tables end up scattered, logits exact.
template <class T>
void check_scattered_tables(int block_size) {
  const ModelConfig c = gqa_config();
  Transformer<T> model(ModelWeights<T>::random(c, 32));
  const int n = 120, V = c.vocab_size;
  BlockPool<T> pool(c, 3 * ((n + block_size - 1) / block_size), block_size);
  std::vector<std::vector<int>> tokens;
  std::vector<RowMatrix<T>> ref;
  std::vector<std::unique_ptr<PagedSequence<T>>> seqs;
  for (int s = 0; s < 3; ++s) {
    tokens.push_back(make_tokens(n, V, 50 + s));
    ref.push_back(model.forward_reference(tokens[s]));
    seqs.push_back(std::make_unique<PagedSequence<T>>(pool));
  }
  const int chunks[] = {5, 16, 1, 23, 9, 3, 17, 1, 1, 1, 30};
  for (int round = 0; round < 40; ++round) {
    if (round == 4) seqs[1].reset();  // free the middle sequence's blocks
    for (int s = 0; s < 3; ++s) {
      if (!seqs[s]) continue;
      PagedSequence<T>& seq = *seqs[s];
      const int pos = seq.length();
      const int len = std::min(n - pos, chunks[(round + s) % 11]);
      if (len <= 0) continue;
      if (len == 1) {
        RowMatrix<T> row = model.decode_step(tokens[s][pos], seq);
        expect_rows_bits_eq(row, ref[s], pos, "seq " + std::to_string(s) + " decode at " + std::to_string(pos));
      } else {
        std::vector<int> chunk(tokens[s].begin() + pos, tokens[s].begin() + pos + len);
        RowMatrix<T> rows = model.prefill(chunk, seq, true);
        expect_rows_bits_eq(rows, ref[s], pos, "seq " + std::to_string(s) + " chunk at " + std::to_string(pos));
      }
    }
  }
  for (int s : {0, 2}) {
    EXPECT_EQ(seqs[s]->length(), n);
    EXPECT_TRUE(scattered(seqs[s]->block_table())) << "sequence " << s << " sits in consecutive blocks";
  }
  // Reading a scattered sequence once more, after everything else moved around, is still exact.
  seqs[2]->truncate(n - 1);
  RowMatrix<T> last = model.decode_step(tokens[2][n - 1], *seqs[2]);
  expect_rows_bits_eq(last, ref[2], n - 1, "re-decoded last position");
}

TEST(PagedScattered, InterleavedSequencesStayExactFloatBlock16) { check_scattered_tables<float>(16); }
TEST(PagedScattered, InterleavedSequencesStayExactDoubleBlock32) { check_scattered_tables<double>(32); }

// decode_batch over PagedSequences of mixed lengths == each decoded alone (in its own pool) == reference.
template <class T>
void check_paged_decode_batch(int block_size) {
  const ModelConfig c = gqa_config();
  Transformer<T> model(ModelWeights<T>::random(c, 33));
  const int V = c.vocab_size, B = 5, steps = 40;
  const int prompt_len[B] = {1, 15, 16, 33, 70};
  BlockPool<T> batch_pool(c, 40, block_size), alone_pool(c, 40, block_size);
  std::vector<std::vector<int>> tokens;
  std::vector<RowMatrix<T>> ref;
  std::vector<PagedSequence<T>> batched, alone;
  for (int b = 0; b < B; ++b) {
    tokens.push_back(make_tokens(prompt_len[b] + steps, V, 60 + b));
    ref.push_back(model.forward_reference(tokens[b]));
    batched.emplace_back(batch_pool);
    alone.emplace_back(alone_pool);
    model.prefill(head(tokens[b], prompt_len[b]), batched[b]);
    model.prefill(head(tokens[b], prompt_len[b]), alone[b]);
  }
  std::vector<PagedSequence<T>*> ptrs;
  for (auto& s : batched) ptrs.push_back(&s);
  for (int step = 0; step < steps; ++step) {
    std::vector<int> toks;
    for (int b = 0; b < B; ++b) toks.push_back(tokens[b][batched[b].length()]);
    RowMatrix<T> rows = model.decode_batch(toks, ptrs);
    for (int b = 0; b < B; ++b) {
      const int pos = alone[b].length();
      RowMatrix<T> one = model.decode_step(toks[b], alone[b]);
      ASSERT_TRUE(kvd_test::same_bits(rows.row(b).data(), one.row(0).data(), V)) << "step " << step << " seq " << b;
      ASSERT_TRUE(kvd_test::same_bits(one.row(0).data(), ref[b].row(pos).data(), V)) << "step " << step << " seq " << b;
    }
  }
  EXPECT_EQ(batch_pool.stats().tokens_stored, alone_pool.stats().tokens_stored);
  EXPECT_EQ(batch_pool.blocks_in_use(), alone_pool.blocks_in_use());
}

TEST(PagedBatch, MixedLengthsEqualOneAtATimeFloatBlock16) { check_paged_decode_batch<float>(16); }
TEST(PagedBatch, MixedLengthsEqualOneAtATimeDoubleBlock32) { check_paged_decode_batch<double>(32); }

// A batch mixing contiguous-cache and paged results: the same decode_batch on KVCaches gives the same rows.
TEST(PagedBatch, EqualsBatchOverContiguousCaches) {
  const ModelConfig c = mha_config();
  Transformer<float> model(ModelWeights<float>::random(c, 34));
  BlockPool<float> pool(c, 30, 16);
  std::vector<PagedSequence<float>> paged;
  std::vector<KVCache<float>> contiguous;
  std::vector<std::vector<int>> tokens;
  for (int b = 0; b < 4; ++b) {
    tokens.push_back(make_tokens(60, c.vocab_size, 70 + b));
    paged.emplace_back(pool);
    contiguous.emplace_back(c);
    model.prefill(head(tokens[b], 3 + 11 * b), paged[b]);
    model.prefill(head(tokens[b], 3 + 11 * b), contiguous[b]);
  }
  std::vector<PagedSequence<float>*> pp;
  std::vector<KVCache<float>*> cp;
  for (int b = 0; b < 4; ++b) { pp.push_back(&paged[b]); cp.push_back(&contiguous[b]); }
  for (int step = 0; step < 20; ++step) {
    std::vector<int> toks;
    for (int b = 0; b < 4; ++b) toks.push_back(tokens[b][paged[b].length()]);
    RowMatrix<float> a = model.decode_batch(toks, pp);
    RowMatrix<float> b = model.decode_batch(toks, cp);
    expect_rows_bits_eq(a, b, 0, "step " + std::to_string(step));
  }
}

// forward() over several sequences where one has no row this call: the idle one is
// prepared and committed with 0 positions and keeps its blocks, shared ones included.
TEST(PagedBatch, ForwardWithAnIdleSequence) {
  const ModelConfig c = mha_config();
  Transformer<float> model(ModelWeights<float>::random(c, 38));
  const auto tokens = make_tokens(40, c.vocab_size, 39);
  const RowMatrix<float> ref = model.forward_reference(tokens);
  BlockPool<float> pool(c, 10, 16);
  PagedSequence<float> a(pool);
  model.prefill(head(tokens, 21), a);
  PagedSequence<float> idle = a.fork();  // shares a's partly filled block
  const std::vector<int> table = idle.block_table();
  std::vector<Row> rows;
  for (int p = 21; p < 30; ++p) rows.push_back(Row{tokens[p], 0, p, true});
  PagedSequence<float>* caches[] = {&a, &idle};
  RowMatrix<float> out = model.forward(rows.data(), static_cast<long>(rows.size()), caches, 2);
  expect_rows_bits_eq(out, ref, 21, "active sequence");
  EXPECT_EQ(idle.length(), 21);
  EXPECT_EQ(idle.block_table(), table);
  EXPECT_EQ(pool.refcount(table[1]), 1) << "a copied the shared block; idle holds the original alone";
}

// A sliding-window model: a paged sequence keeps every position and reads only the window, exactly.
TEST(PagedSlidingWindow, MatchesContiguousAndReference) {
  ModelConfig c = gqa_config(100);
  c.sliding_window = 20;
  Transformer<float> model(ModelWeights<float>::random(c, 39));
  const auto tokens = make_tokens(c.max_seq_len, c.vocab_size, 40);
  const RowMatrix<float> ref = model.forward_reference(tokens);
  BlockPool<float> pool(c, 10, 32);
  for (int k : {1, 20, 33}) {
    KVCache<float> contiguous(c);
    PagedSequence<float> paged(pool);
    expect_rows_bits_eq(prefill_then_decode(model, tokens, k, contiguous), ref, 0, "contiguous, window");
    expect_rows_bits_eq(prefill_then_decode(model, tokens, k, paged), ref, 0, "paged, window");
  }
}

// With a sliding window a paged sequence returns the blocks behind its window to
// the pool: 100 positions with a window of 10 run in a pool of only 3 blocks of 16,
// still bit-identical to the reference; a rewind into released blocks is refused.
TEST(PagedSlidingWindow, ReleasesBlocksBehindTheWindow) {
  ModelConfig c = gqa_config(100);
  c.sliding_window = 10;
  Transformer<float> model(ModelWeights<float>::random(c, 41));
  const auto tokens = make_tokens(c.max_seq_len, c.vocab_size, 42);
  const RowMatrix<float> ref = model.forward_reference(tokens);
  BlockPool<float> pool(c, 3, 16);
  PagedSequence<float> seq(pool);
  model.prefill(std::vector<int>(tokens.begin(), tokens.begin() + 5), seq);
  for (int t = 5; t < 100; ++t) {
    auto row = model.decode_step(tokens[t], seq);
    ASSERT_TRUE(kvd_test::same_bits(row.data(), ref.row(t).data(), c.vocab_size)) << "t=" << t;
    ASSERT_LE(pool.blocks_in_use(), 2) << "t=" << t;  // the window (10) spans at most 2 blocks
  }
  EXPECT_EQ(seq.first_position(), 91);
  EXPECT_EQ(seq.block_table()[0], -1);
  EXPECT_EQ(seq.bytes_held(), 2 * pool.bytes_per_block());
  EXPECT_THROW(seq.truncate(50), CacheFullError);
  EXPECT_EQ(seq.length(), 100);
  PagedSequence<float> twin = seq.fork();  // forks share only the live blocks
  EXPECT_EQ(pool.blocks_in_use(), 2);
  seq.clear();
  EXPECT_EQ(pool.blocks_in_use(), 2);  // twin still holds them
}

// One and two threads give the same paged logits (attention reads blocks in parallel).
TEST(PagedThreads, OneAndTwoThreadsIdentical) {
  const ModelConfig c = gqa_config();
  Transformer<float> model(ModelWeights<float>::random(c, 35));
  const auto tokens = make_tokens(c.max_seq_len, c.vocab_size, 36);
  const int saved = num_threads();
  BlockPool<float> pool(c, 20, 16);
  std::vector<RowMatrix<float>> out;
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    PagedSequence<float> seq(pool);
    out.push_back(prefill_then_decode(model, tokens, 100, seq));
  }
  set_num_threads(saved);
  expect_rows_bits_eq(out[1], out[0], 0, "two threads vs one");
}

// generate() takes a PagedSequence like a KVCache and produces the same tokens and logits.
TEST(PagedGenerate, SameAsKVCache) {
  const ModelConfig c = mha_config(60);
  Transformer<float> model(ModelWeights<float>::random(c, 37));
  const auto prompt = make_tokens(7, c.vocab_size, 38);
  GenerateOptions opt;
  opt.max_new_tokens = 40;
  std::vector<std::vector<float>> with_paged, with_contiguous;
  auto record = [](std::vector<std::vector<float>>& into) {
    return [&into](int, const float* l, int n) { into.emplace_back(l, l + n); };
  };
  GenerateHooks<float> hooks;
  hooks.on_logits = record(with_contiguous);
  KVCache<float> contiguous(c);
  auto a = generate(model, prompt, contiguous, opt, hooks);
  BlockPool<float> pool(c, 4, 16);
  PagedSequence<float> paged(pool);
  hooks.on_logits = record(with_paged);
  auto b = generate(model, prompt, paged, opt, hooks);
  EXPECT_EQ(a.tokens, b.tokens);
  ASSERT_EQ(with_paged.size(), with_contiguous.size());
  for (std::size_t i = 0; i < with_paged.size(); ++i)
    EXPECT_ROW_BITS_EQ(with_paged[i].data(), with_contiguous[i].data(), c.vocab_size) << "position " << i;
}

// ---------------------------------------------------------------------------
// fork() and copy-on-write.

// Prefix of 21 tokens (block 1 partly filled), forked twice. Fork 1 continues
// with the tokens of a from-scratch sequence, fork 2 with other tokens, the
// parent with a third continuation: every one equals its from-scratch result,
// and the parent's stored K/V never change while the forks write.
template <class T>
void check_fork(int block_size, int prefix_len) {
  const ModelConfig c = mha_config();
  Transformer<T> model(ModelWeights<T>::random(c, 40));
  const int V = c.vocab_size, cont = 45;
  const auto prefix = make_tokens(prefix_len, V, 41);
  const auto cx = make_tokens(cont, V, 42), cy = make_tokens(cont, V, 43), cz = make_tokens(cont, V, 44);
  const RowMatrix<T> ref_x = model.forward_reference(concat(prefix, cx));
  const RowMatrix<T> ref_y = model.forward_reference(concat(prefix, cy));
  const RowMatrix<T> ref_z = model.forward_reference(concat(prefix, cz));

  BlockPool<T> pool(c, 30, block_size);
  PagedSequence<T> parent(pool);
  model.prefill(prefix, parent);
  const std::vector<int> parent_table = parent.block_table();
  const int free_before = pool.free_blocks();
  const std::vector<T> parent_kv = snapshot(parent);

  PagedSequence<T> f1 = parent.fork();
  PagedSequence<T> f2 = parent.fork();
  EXPECT_EQ(f1.length(), prefix_len);
  EXPECT_EQ(f1.block_table(), parent_table);
  EXPECT_EQ(f2.block_table(), parent_table);
  EXPECT_EQ(pool.free_blocks(), free_before) << "fork copies no block";
  for (int b : parent_table) EXPECT_EQ(pool.refcount(b), 3);
  PoolStats st = pool.stats();
  EXPECT_EQ(st.tokens_stored, 3u * prefix_len);
  EXPECT_EQ(st.tokens_resident, static_cast<std::uint64_t>(prefix_len));
  EXPECT_EQ(st.blocks_shared, static_cast<long>(parent_table.size()));

  const bool partial = prefix_len % block_size != 0;
  const int last = static_cast<int>(parent_table.size()) - 1;
  // Fork 1: a chunk, then decode steps.
  RowMatrix<T> r = model.prefill(head(cx, 5), f1, true);
  expect_rows_bits_eq(r, ref_x, prefix_len, "fork 1 first chunk");
  for (int i = 0; i < last; ++i) EXPECT_EQ(f1.block_table()[i], parent_table[i]) << "full block " << i << " stays shared";
  if (partial) {
    EXPECT_NE(f1.block_table()[last], parent_table[last]) << "the partly filled shared block was copied";
    EXPECT_EQ(pool.refcount(parent_table[last]), 2);
    for (int i = 0; i < last; ++i) EXPECT_EQ(pool.refcount(parent_table[i]), 3);
  } else {
    EXPECT_EQ(f1.block_table()[last], parent_table[last]) << "a full block is never copied";
    EXPECT_EQ(pool.refcount(parent_table[last]), 3);
  }
  for (int t = 5; t < cont; ++t) {
    RowMatrix<T> row = model.decode_step(cx[t], f1);
    expect_rows_bits_eq(row, ref_x, prefix_len + t, "fork 1 decode");
  }
  EXPECT_TRUE(same_values(snapshot(parent), parent_kv)) << "fork 1's writes changed the parent";

  // Fork 2: decode steps only.
  for (int t = 0; t < cont; ++t) {
    RowMatrix<T> row = model.decode_step(cy[t], f2);
    expect_rows_bits_eq(row, ref_y, prefix_len + t, "fork 2 decode");
  }
  EXPECT_TRUE(same_values(snapshot(parent), parent_kv)) << "fork 2's writes changed the parent";
  for (int i = 0; i < last; ++i) EXPECT_EQ(pool.refcount(parent_table[i]), 3);
  EXPECT_EQ(pool.refcount(parent_table[last]), partial ? 1 : 3);

  // A from-scratch sequence with fork 1's tokens gives fork 1's logits.
  PagedSequence<T> scratch(pool);
  const RowMatrix<T> s = prefill_then_decode(model, concat(prefix, cx), prefix_len, scratch);
  expect_rows_bits_eq(s, ref_x, 0, "from scratch");

  // The parent continues; its last block is now its own, so it writes in place.
  for (int t = 0; t < cont; ++t) {
    RowMatrix<T> row = model.decode_step(cz[t], parent);
    expect_rows_bits_eq(row, ref_z, prefix_len + t, "parent continues");
  }
  for (int i = 0; i <= last; ++i) EXPECT_EQ(parent.block_table()[i], parent_table[i]) << "parent block " << i;
}

TEST(PagedFork, ForksContinueExactlyPartialBlockFloat) { check_fork<float>(16, 21); }
TEST(PagedFork, ForksContinueExactlyPartialBlockDouble) { check_fork<double>(16, 21); }
TEST(PagedFork, ForksContinueExactlyBlock32) { check_fork<float>(32, 40); }
TEST(PagedFork, ForksContinueExactlyAtBlockBoundary) { check_fork<float>(16, 32); }

// At a block boundary nothing is copied: each fork's next token takes one new block.
TEST(PagedFork, BlockBoundaryTakesNewBlocksOnly) {
  const ModelConfig c = mha_config();
  Transformer<float> model(ModelWeights<float>::random(c, 45));
  BlockPool<float> pool(c, 10, 16);
  PagedSequence<float> a(pool);
  model.prefill(make_tokens(32, c.vocab_size, 46), a);
  PagedSequence<float> b = a.fork();
  EXPECT_EQ(pool.free_blocks(), 8);
  model.decode_step(1, a);
  model.decode_step(2, b);
  EXPECT_EQ(pool.free_blocks(), 6);
  EXPECT_EQ(pool.refcount(a.block_table()[0]), 2);
  EXPECT_EQ(pool.refcount(a.block_table()[1]), 2);
  EXPECT_NE(a.block_table()[2], b.block_table()[2]);
}

// Truncating a fork into the middle of a shared block, then appending, copies the
// block and recomputes exactly; the other holder is untouched.
TEST(PagedFork, TruncateIntoSharedBlockThenContinue) {
  const ModelConfig c = gqa_config();
  Transformer<float> model(ModelWeights<float>::random(c, 47));
  const int V = c.vocab_size;
  const auto ta = make_tokens(60, V, 48), tb = make_tokens(20, V, 49);
  const RowMatrix<float> ref_a = model.forward_reference(ta);
  const RowMatrix<float> ref_b = model.forward_reference(concat(head(ta, 24), tb));
  BlockPool<float> pool(c, 20, 16);
  PagedSequence<float> a(pool);
  model.prefill(head(ta, 40), a);
  const std::vector<float> a_kv = snapshot(a);
  PagedSequence<float> b = a.fork();
  b.truncate(24);  // inside block 1, still shared with a
  EXPECT_EQ(b.block_table().size(), 2u);
  EXPECT_EQ(pool.refcount(a.block_table()[1]), 2);
  EXPECT_EQ(pool.refcount(a.block_table()[2]), 1);
  RowMatrix<float> rows = model.prefill(head(tb, 10), b, true);
  expect_rows_bits_eq(rows, ref_b, 24, "truncated fork");
  EXPECT_NE(b.block_table()[1], a.block_table()[1]);
  EXPECT_EQ(b.block_table()[0], a.block_table()[0]);
  EXPECT_TRUE(same_values(snapshot(a), a_kv));
  for (int t = 40; t < 60; ++t) {
    RowMatrix<float> row = model.decode_step(ta[t], a);
    expect_rows_bits_eq(row, ref_a, t, "original continues");
  }
}

// ---------------------------------------------------------------------------
// Block accounting.

TEST(PagedAccounting, StatsAndRefcountsThroughForkTruncateDestroy) {
  const ModelConfig c = mha_config();
  Transformer<float> model(ModelWeights<float>::random(c, 50));
  BlockPool<float> pool(c, 20, 16);
  const std::uint64_t bpt = 2ull * c.n_layers * c.kv_dim() * sizeof(float);
  EXPECT_EQ(pool.bytes_per_token(), bpt);
  EXPECT_EQ(pool.bytes_per_block(), 16 * bpt);
  EXPECT_EQ(pool.bytes_reserved(), 20 * 16 * bpt);

  PoolStats s = pool.stats();
  EXPECT_EQ(s.blocks_total, 20);
  EXPECT_EQ(s.blocks_in_use, 0);
  EXPECT_EQ(s.sequences, 0);
  EXPECT_EQ(s.live_fraction, 0.0);
  EXPECT_EQ(s.live_fraction_in_use, 0.0);

  auto b = std::make_unique<PagedSequence<float>>(pool);
  {
    PagedSequence<float> a(pool);
    EXPECT_TRUE(a.block_table().empty());
    model.prefill(make_tokens(40, c.vocab_size, 51), a);
    EXPECT_EQ(a.block_table().size(), 3u);
    EXPECT_EQ(a.bytes_used(), 40 * bpt);
    EXPECT_EQ(a.bytes_held(), 48 * bpt);
    s = pool.stats();
    EXPECT_EQ(s.sequences, 2);
    EXPECT_EQ(s.blocks_in_use, 3);
    EXPECT_EQ(s.tokens_stored, 40u);
    EXPECT_EQ(s.tokens_resident, 40u);
    EXPECT_EQ(s.bytes_in_use, 48 * bpt);
    EXPECT_EQ(s.bytes_live, 40 * bpt);
    EXPECT_EQ(s.live_fraction, 40.0 / 320.0);
    EXPECT_EQ(s.live_fraction_in_use, 40.0 / 48.0);

    *b = a.fork();
    for (int blk : a.block_table()) EXPECT_EQ(pool.refcount(blk), 2);
    s = pool.stats();
    EXPECT_EQ(s.blocks_in_use, 3);
    EXPECT_EQ(s.blocks_shared, 3);
    EXPECT_EQ(s.tokens_stored, 80u);
    EXPECT_EQ(s.tokens_resident, 40u);

    b->truncate(20);  // keeps blocks 0 and 1 (shared), drops its reference to block 2
    EXPECT_EQ(pool.refcount(a.block_table()[0]), 2);
    EXPECT_EQ(pool.refcount(a.block_table()[1]), 2);
    EXPECT_EQ(pool.refcount(a.block_table()[2]), 1);
    s = pool.stats();
    EXPECT_EQ(s.blocks_in_use, 3);
    EXPECT_EQ(s.blocks_shared, 2);
    EXPECT_EQ(s.tokens_stored, 60u);
    EXPECT_EQ(s.tokens_resident, 40u);

    a.truncate(40);  // a no-op truncation keeps everything
    EXPECT_EQ(pool.blocks_in_use(), 3);
  }  // a destroyed: block 2 freed, blocks 0 and 1 now b's alone
  s = pool.stats();
  EXPECT_EQ(s.sequences, 1);
  EXPECT_EQ(s.blocks_in_use, 2);
  EXPECT_EQ(s.blocks_shared, 0);
  EXPECT_EQ(s.tokens_stored, 20u);
  EXPECT_EQ(s.tokens_resident, 20u);
  for (int blk : b->block_table()) EXPECT_EQ(pool.refcount(blk), 1);

  b->truncate(16);
  EXPECT_EQ(pool.blocks_in_use(), 1);
  b->clear();
  EXPECT_EQ(b->length(), 0);
  EXPECT_EQ(pool.blocks_in_use(), 0);
  b.reset();
  EXPECT_EQ(pool.stats().sequences, 0);
  EXPECT_EQ(pool.free_blocks(), 20);
}

// Moving sequences (here, by a growing vector) keeps their blocks and the pool's registry right.
TEST(PagedAccounting, MovesKeepBlocks) {
  const ModelConfig c = mha_config();
  Transformer<float> model(ModelWeights<float>::random(c, 52));
  const auto tokens = make_tokens(50, c.vocab_size, 53);
  const RowMatrix<float> ref = model.forward_reference(tokens);
  BlockPool<float> pool(c, 40, 16);
  {
    std::vector<PagedSequence<float>> seqs;
    for (int i = 0; i < 9; ++i) {
      seqs.emplace_back(pool);
      model.prefill(head(tokens, 3 + i), seqs.back());
    }
    EXPECT_EQ(pool.stats().sequences, 9);
    EXPECT_EQ(pool.stats().tokens_stored, static_cast<std::uint64_t>(9 * 3 + 36));
    PagedSequence<float> moved = std::move(seqs[8]);
    seqs.pop_back();
    EXPECT_EQ(pool.stats().sequences, 9);
    seqs[0] = std::move(moved);  // seqs[0]'s old blocks return to the pool
    EXPECT_EQ(pool.stats().sequences, 8);
    EXPECT_EQ(seqs[0].length(), 11);
    RowMatrix<float> row = model.decode_step(tokens[11], seqs[0]);
    expect_rows_bits_eq(row, ref, 11, "moved sequence");
  }
  EXPECT_EQ(pool.stats().sequences, 0);
  EXPECT_EQ(pool.free_blocks(), 40);
}

// ---------------------------------------------------------------------------
// Out of blocks: a batch that does not fit changes nothing.

TEST(PagedOutOfBlocks, BatchThatDoesNotFitChangesNothing) {
  const ModelConfig c = mha_config();
  Transformer<float> model(ModelWeights<float>::random(c, 60));
  const int V = c.vocab_size;
  // a: 16 tokens (its next one needs a new block); b: 5 tokens and fb, a fork of b
  // (b's next token needs a copy of their shared block, after which fb holds the
  // original alone and writes in place); d: 32 tokens (needs a new block); e: 3
  // tokens, not in the batch. Held: 1 + 1 + 2 + 1 = 5 blocks; 2 free, 3 needed.
  BlockPool<float> pool(c, 7, 16);
  std::vector<std::vector<int>> tokens;
  for (int i = 0; i < 4; ++i) tokens.push_back(make_tokens(33, V, 61 + i));
  PagedSequence<float> a(pool), b(pool), d(pool);
  auto e = std::make_unique<PagedSequence<float>>(pool);
  model.prefill(head(tokens[0], 16), a);
  model.prefill(head(tokens[1], 5), b);
  PagedSequence<float> fb = b.fork();
  model.prefill(head(tokens[3], 32), d);
  model.prefill(make_tokens(3, V, 65), *e);
  ASSERT_EQ(pool.free_blocks(), 2);

  std::vector<PagedSequence<float>*> batch = {&a, &b, &fb, &d};
  const std::vector<int> next = {tokens[0][16], tokens[1][5], tokens[2][5], tokens[3][32]};
  std::vector<std::vector<int>> tables_before;
  std::vector<int> lengths_before;
  std::vector<std::vector<float>> kv_before;
  for (auto* s : batch) {
    tables_before.push_back(s->block_table());
    lengths_before.push_back(s->length());
    kv_before.push_back(snapshot(*s));
  }
  std::vector<int> refcounts_before;
  for (int blk = 0; blk < pool.n_blocks(); ++blk) refcounts_before.push_back(pool.refcount(blk));

  try {
    model.decode_batch(next, batch);
    FAIL() << "expected OutOfBlocksError";
  } catch (const OutOfBlocksError& err) {
    const std::string what = err.what();
    EXPECT_NE(what.find("needs 1 block"), std::string::npos) << what;
    EXPECT_NE(what.find("only 0 of 7 are free"), std::string::npos) << what;
  }
  for (std::size_t i = 0; i < batch.size(); ++i) {
    EXPECT_EQ(batch[i]->length(), lengths_before[i]) << "sequence " << i;
    EXPECT_EQ(batch[i]->block_table(), tables_before[i]) << "sequence " << i;
    EXPECT_TRUE(same_values(snapshot(*batch[i]), kv_before[i])) << "sequence " << i;
  }
  EXPECT_EQ(pool.free_blocks(), 2);
  for (int blk = 0; blk < pool.n_blocks(); ++blk) EXPECT_EQ(pool.refcount(blk), refcounts_before[blk]) << "block " << blk;
  // It is a CacheFullError too, for callers that only handle that.
  EXPECT_THROW(model.decode_batch(next, batch), CacheFullError);
  EXPECT_EQ(pool.free_blocks(), 2);

  e.reset();  // frees one block: now the batch fits
  RowMatrix<float> rows = model.decode_batch(next, batch);
  EXPECT_EQ(pool.free_blocks(), 0);
  // Bit-identical to the reference, and to the same batch over contiguous caches.
  const std::vector<std::vector<int>> full = {head(tokens[0], 17), head(tokens[1], 6),
                                              concat(head(tokens[1], 5), {tokens[2][5]}), head(tokens[3], 33)};
  std::vector<KVCache<float>> contiguous;
  std::vector<KVCache<float>*> cptr;
  for (std::size_t i = 0; i < batch.size(); ++i) {
    contiguous.emplace_back(c);
    model.prefill(head(full[i], static_cast<int>(full[i].size()) - 1), contiguous.back());
  }
  for (auto& cc : contiguous) cptr.push_back(&cc);
  RowMatrix<float> crows = model.decode_batch(next, cptr);
  expect_rows_bits_eq(rows, crows, 0, "paged batch vs contiguous batch");
  for (std::size_t i = 0; i < batch.size(); ++i) {
    const RowMatrix<float> ref = model.forward_reference(full[i]);
    ASSERT_TRUE(kvd_test::same_bits(rows.row(i).data(), ref.row(ref.rows() - 1).data(), V)) << "sequence " << i;
    EXPECT_EQ(batch[i]->length(), lengths_before[i] + 1);
  }
  EXPECT_NE(fb.block_table()[0], b.block_table()[0]) << "the fork copied its shared block";
}

TEST(PagedOutOfBlocks, PrefillThatDoesNotFitChangesNothing) {
  const ModelConfig c = mha_config();
  Transformer<float> model(ModelWeights<float>::random(c, 66));
  const auto tokens = make_tokens(80, c.vocab_size, 67);
  const RowMatrix<float> ref = model.forward_reference(tokens);
  BlockPool<float> pool(c, 4, 16);
  PagedSequence<float> a(pool), other(pool);
  model.prefill(head(tokens, 20), a);
  model.prefill(head(tokens, 3), other);
  const std::vector<int> table = a.block_table();
  const std::vector<float> kv = snapshot(a);
  std::vector<int> chunk(tokens.begin() + 20, tokens.begin() + 60);  // needs 2 more blocks, 1 free
  try {
    model.prefill(chunk, a);
    FAIL() << "expected OutOfBlocksError";
  } catch (const OutOfBlocksError& err) {
    EXPECT_NE(std::string(err.what()).find("needs 2 block"), std::string::npos) << err.what();
    EXPECT_NE(std::string(err.what()).find("only 1 of 4"), std::string::npos) << err.what();
  }
  EXPECT_EQ(a.length(), 20);
  EXPECT_EQ(a.block_table(), table);
  EXPECT_TRUE(same_values(snapshot(a), kv));
  EXPECT_EQ(pool.free_blocks(), 1);
  other.clear();
  RowMatrix<float> rows = model.prefill(chunk, a, true);
  expect_rows_bits_eq(rows, ref, 20, "retried prefill");
}

// ---------------------------------------------------------------------------
// Bad input: one case per test.

TEST(PagedBadInput, BlockSizeNotMultipleOf16) {
  try {
    BlockPool<float> pool(mha_config(), 4, 24);
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("block_size = 24"), std::string::npos) << e.what();
  }
}

TEST(PagedBadInput, BlockSizeSmallerThan16) {
  EXPECT_THROW(BlockPool<float>(mha_config(), 4, 8), ConfigError);
}

TEST(PagedBadInput, BlockSizeZero) {
  EXPECT_THROW(BlockPool<float>(mha_config(), 4, 0), ConfigError);
}

TEST(PagedBadInput, BlockSizeNegative) {
  try {
    BlockPool<float> pool(mha_config(), 4, -16);
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("-16"), std::string::npos) << e.what();
  }
}

TEST(PagedBadInput, BlockSizeLongerThanContext) {
  try {
    BlockPool<float> pool(mha_config(150), 4, 176);  // 150 rounds up to 160
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("block_size = 176"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("(160)"), std::string::npos) << e.what();
  }
  BlockPool<float> largest(mha_config(150), 1, 160);  // one block holds a whole sequence
  EXPECT_EQ(largest.blocks_for(150), 1);
}

TEST(PagedBadInput, NoBlocks) {
  try {
    BlockPool<float> pool(mha_config(), 0, 16);
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("n_blocks = 0"), std::string::npos) << e.what();
  }
}

TEST(PagedBadInput, InvalidConfig) {
  ModelConfig c = mha_config();
  c.n_kv_heads = 3;  // 4 heads are not a multiple of 3
  EXPECT_THROW(BlockPool<float>(c, 4, 16), ConfigError);
}

TEST(PagedBadInput, SequenceFromPoolOfDifferentShape) {
  const ModelConfig c = mha_config();
  Transformer<float> model(ModelWeights<float>::random(c, 70));
  ModelConfig other = c;
  other.n_kv_heads = 2;
  BlockPool<float> pool(other, 8, 16);
  PagedSequence<float> seq(pool);
  EXPECT_THROW(model.prefill({1, 2, 3}, seq), CacheMismatchError);
  EXPECT_THROW(model.decode_step(1, seq), CacheMismatchError);
  std::vector<PagedSequence<float>*> batch = {&seq};
  EXPECT_THROW(model.decode_batch({1}, batch), CacheMismatchError);
  EXPECT_EQ(seq.length(), 0);
  EXPECT_EQ(pool.free_blocks(), 8);
}

TEST(PagedBadInput, SequenceFromPoolOfDifferentMaxSeqLen) {
  Transformer<float> model(ModelWeights<float>::random(mha_config(150), 71));
  BlockPool<float> pool(mha_config(64), 8, 16);
  PagedSequence<float> seq(pool);
  EXPECT_THROW(model.prefill({1, 2, 3}, seq), CacheMismatchError);
  EXPECT_EQ(pool.free_blocks(), 8);
}

TEST(PagedBadInput, AppendBeyondMaxSeqLenIsCacheFullNotOutOfBlocks) {
  const ModelConfig c = mha_config(40);
  Transformer<float> model(ModelWeights<float>::random(c, 72));
  BlockPool<float> pool(c, 10, 16);
  PagedSequence<float> seq(pool);
  model.prefill(make_tokens(40, c.vocab_size, 73), seq);
  const std::vector<int> table = seq.block_table();
  try {
    model.decode_step(1, seq);
    FAIL() << "expected CacheFullError";
  } catch (const OutOfBlocksError&) {
    FAIL() << "a full context is not a pool shortage";
  } catch (const CacheFullError& e) {
    EXPECT_NE(std::string(e.what()).find("max_seq_len = 40"), std::string::npos) << e.what();
  }
  EXPECT_EQ(seq.length(), 40);
  EXPECT_EQ(seq.block_table(), table);
  EXPECT_EQ(pool.free_blocks(), 7);
}

TEST(PagedBadInput, TruncateBeyondLength) {
  const ModelConfig c = mha_config();
  Transformer<float> model(ModelWeights<float>::random(c, 74));
  BlockPool<float> pool(c, 10, 16);
  PagedSequence<float> seq(pool);
  model.prefill(make_tokens(20, c.vocab_size, 75), seq);
  EXPECT_THROW(seq.truncate(21), CacheFullError);
  EXPECT_THROW(seq.truncate(-1), CacheFullError);
  EXPECT_EQ(seq.length(), 20);
  EXPECT_EQ(pool.free_blocks(), 8);
}

}  // namespace

namespace {
// A valid config whose full cache is exactly ModelConfig's limit of 2^40 elements.
ModelConfig huge_block_config() {
  ModelConfig c;
  c.vocab_size = 2; c.d_model = 1; c.n_layers = 1 << 4; c.n_heads = 4; c.n_kv_heads = 4;
  c.head_dim = 1 << 18; c.hidden_dim = 2; c.max_seq_len = 1 << 15;  // 2 x 2^4 x 2^20 x 2^15 = 2^40 elements
  return c;
}
}  // namespace

TEST(PagedBadInput, PoolElementCountOverflowingSizeTIsConfigError) {
  // One block of 2^15 tokens holds 2^40 elements; 2^24 of them are 2^64 elements.
  ASSERT_NO_THROW(huge_block_config().validate());
  try {
    BlockPool<float> pool(huge_block_config(), 1 << 24, 1 << 15);
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("BlockPool elements"), std::string::npos) << e.what();
  }
}

TEST(PagedBadInput, PoolByteCountOverflowingSizeTIsConfigError) {
  // 2^23 blocks of 2^40 doubles: 2^63 elements fit in size_t, 2^66 bytes do not.
  try {
    BlockPool<double> pool(huge_block_config(), 1 << 23, 1 << 15);
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("BlockPool bytes"), std::string::npos) << e.what();
  }
}
