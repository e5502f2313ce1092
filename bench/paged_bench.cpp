// Paged vs contiguous KV cache, on stories15M's shape (D 288, 6 layers, 6 KV
// heads of 48) with max_seq_len 2048 and a float32 cache: 13,824 bytes per
// token. (stories15M itself has max_seq_len 256; a long context is where a
// cache that reserves max_seq_len per sequence wastes memory.)
//
//   BM_PagedMemory/block:B
//       64 sequences with lengths uniform in [20, 2048] (std::mt19937, seed
//       2024) take blocks of B tokens from one pool, sized to exactly the blocks
//       they need. One iteration is the block bookkeeping for all 64 (create,
//       prepare_append + commit_append of the whole length, destroy); no K/V is
//       written. Counters (plain values, not rates):
//         live_fraction_paged       bytes holding live tokens / bytes the pool reserved
//         live_fraction_contiguous  the same for 64 KVCaches of max_seq_len each
//         bytes_live, bytes_paged, bytes_contiguous, contiguous_over_paged
//       The contiguous figure is 64 x one real KVCache's bytes_reserved() (a
//       KVCache allocates its capacity up front), not 1.8 GB actually allocated.
//   BM_PagedDecode/cache:{contiguous,paged}/pos:P/threads:N
//       one decode_step at position P; each iteration appends one position and
//       truncates back. Positions 1024 (a block edge: the paged step takes and
//       returns a block every time) and 2000.
//   BM_PagedDecodeBatch/cache:{contiguous,paged}/batch:8/threads:N
//       one decode_batch step of 8 sequences at positions drawn like the above.
//
// Decode caches are filled through the cache interface with seeded
// pseudo-random K/V (prefilling 2000 tokens would take longer than the whole
// benchmark), the same values in both kinds; paged sequences are filled in
// turns with a second sequence, 16 positions at a time, so their blocks are
// scattered through the pool. The paged variants first check that their logits
// are bit-identical to the contiguous ones and stop with an error otherwise.
//
// Run: build/bin/kvdecode-bench --benchmark_filter=BM_Paged
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kvdecode/matmul/matmul.hpp"
#include "kvdecode/cache/kv_cache.hpp"
#include "kvdecode/cache/paged_cache.hpp"
#include "kvdecode/model/transformer.hpp"

namespace {

using Model = kvd::Transformer<float>;
using Contiguous = kvd::KVCache<float>;
using Pool = kvd::BlockPool<float>;
using Paged = kvd::PagedSequence<float>;

constexpr int kSequences = 64, kMinLength = 20, kMaxSeqLen = 2048, kBatch = 8;
constexpr std::uint32_t kLengthSeed = 2024;

kvd::ModelConfig paged_config() {
  kvd::ModelConfig c = kvd::stories15m_config();
  c.max_seq_len = kMaxSeqLen;
  return c;
}

/// Seeded random weights of that shape, built on first use and kept for the run.
Model& paged_model() {
  static Model m(kvd::ModelWeights<float>::random(paged_config(), 1234));
  return m;
}

/// n lengths uniform in [kMinLength, max_len], the same for every run.
std::vector<int> mixed_lengths(int n, int max_len) {
  std::mt19937 rng(kLengthSeed);
  std::uniform_int_distribution<int> len(kMinLength, max_len);
  std::vector<int> v(n);
  for (auto& x : v) x = len(rng);
  return v;
}

/// A K/V value in [-1, 1) determined by (seed, layer, pos, index), whatever the cache.
float kv_value(std::uint64_t seed, int layer, int pos, int i) {
  std::uint64_t z = seed * 0x9E3779B97F4A7C15ull + ((static_cast<std::uint64_t>(layer) << 48) ^
                                                     (static_cast<std::uint64_t>(pos) << 24) ^ static_cast<std::uint64_t>(i));
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;  // splitmix64 finaliser
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<float>(static_cast<double>(z >> 40) / 8388608.0 - 1.0);
}

/// Appends n positions of seeded K/V through the cache interface.
template <class Cache>
void append_kv(Cache& c, int n, std::uint64_t seed) {
  const int kv = c.shape().n_kv_heads * c.shape().head_dim, p0 = c.length();
  std::vector<float> k(kv), v(kv);
  c.check_room(n);
  c.prepare_append(n);
  for (int pos = p0; pos < p0 + n; ++pos)
    for (int l = 0; l < c.shape().n_layers; ++l) {
      for (int i = 0; i < kv; ++i) {
        k[i] = kv_value(seed, l, pos, i);
        v[i] = kv_value(seed + 1, l, pos, i);
      }
      c.write(l, pos, k.data(), v.data());
    }
  c.commit_append(n);
}

/// Fills paged sequences to their lengths 16 positions at a time, in turns, so their blocks interleave.
void fill_interleaved(std::vector<Paged*> seqs, const std::vector<int>& lengths) {
  for (bool more = true; more;) {
    more = false;
    for (std::size_t s = 0; s < seqs.size(); ++s) {
      const int n = std::min(16, lengths[s] - seqs[s]->length());
      if (n > 0) append_kv(*seqs[s], n, 100 + s);
      more = more || seqs[s]->length() < lengths[s];
    }
  }
}

void BM_PagedMemory(benchmark::State& st) {
  const int block_size = static_cast<int>(st.range(0));
  const kvd::ModelConfig c = paged_config();
  const std::vector<int> lengths = mixed_lengths(kSequences, kMaxSeqLen);
  int blocks = 0;
  std::uint64_t tokens = 0;
  for (int len : lengths) {
    blocks += (len + block_size - 1) / block_size;
    tokens += static_cast<std::uint64_t>(len);
  }
  Pool pool(c, blocks, block_size);
  kvd::PoolStats full;
  for (auto _ : st) {
    std::vector<Paged> seqs;
    seqs.reserve(kSequences);
    for (int len : lengths) {
      seqs.emplace_back(pool);
      seqs.back().prepare_append(len);  // bookkeeping only: takes the blocks, writes nothing
      seqs.back().commit_append(len);
    }
    full = pool.stats();
    benchmark::DoNotOptimize(full);
  }
  const double contiguous = static_cast<double>(Contiguous(c).bytes_reserved()) * kSequences;
  const double live = static_cast<double>(full.bytes_live);
  st.counters["sequences"] = kSequences;
  st.counters["tokens_live"] = static_cast<double>(tokens);
  st.counters["bytes_live"] = live;
  st.counters["bytes_paged"] = static_cast<double>(full.bytes_reserved);
  st.counters["bytes_contiguous"] = contiguous;
  st.counters["live_fraction_paged"] = full.live_fraction;
  st.counters["live_fraction_contiguous"] = live / contiguous;
  st.counters["contiguous_over_paged"] = contiguous / static_cast<double>(full.bytes_reserved);
  if (full.tokens_resident != tokens || full.blocks_in_use != blocks) st.SkipWithError("pool accounting is off");
}

/// Logits rows as a copy (a LogitsView lives only until the model's next call).
kvd::RowMatrix<float> rows(const kvd::LogitsView<float>& v) { return v; }

bool same_bits(const kvd::RowMatrix<float>& a, const kvd::RowMatrix<float>& b) {
  return a.rows() == b.rows() && a.cols() == b.cols() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

void BM_PagedDecode(benchmark::State& st, bool paged, int pos, int threads) {
  kvd::set_num_threads(threads);
  Model& m = paged_model();
  const int token = 17;
  Contiguous contiguous(m.config());
  append_kv(contiguous, pos, 100);
  const kvd::RowMatrix<float> expected = rows(m.decode_step(token, contiguous));
  contiguous.truncate(pos);
  if (!paged) {
    for (auto _ : st) {
      auto logits = m.decode_step(token, contiguous);
      benchmark::DoNotOptimize(logits.data());
      benchmark::ClobberMemory();
      contiguous.truncate(pos);
    }
    return;
  }
  Pool pool(m.config(), 2 * (kMaxSeqLen / 16 + 1), 16);
  Paged seq(pool), spacer(pool);
  fill_interleaved({&seq, &spacer}, {pos, pos});  // seed 100 for seq: the same K/V as `contiguous`
  if (!same_bits(rows(m.decode_step(token, seq)), expected)) {
    st.SkipWithError("paged logits differ from contiguous ones");
    return;
  }
  seq.truncate(pos);
  for (auto _ : st) {
    auto logits = m.decode_step(token, seq);
    benchmark::DoNotOptimize(logits.data());
    benchmark::ClobberMemory();
    seq.truncate(pos);
  }
}

void BM_PagedDecodeBatch(benchmark::State& st, bool paged, int batch, int threads) {
  kvd::set_num_threads(threads);
  Model& m = paged_model();
  const std::vector<int> pos = mixed_lengths(batch, kMaxSeqLen - 1);
  std::vector<int> tokens(batch);
  for (int b = 0; b < batch; ++b) tokens[b] = 17 + b;
  std::vector<Contiguous> contiguous;
  std::vector<Contiguous*> cptr;
  for (int b = 0; b < batch; ++b) contiguous.emplace_back(m.config());
  for (int b = 0; b < batch; ++b) {
    append_kv(contiguous[b], pos[b], 100 + b);
    cptr.push_back(&contiguous[b]);
  }
  const kvd::RowMatrix<float> expected = rows(m.decode_batch(tokens, cptr));
  for (int b = 0; b < batch; ++b) contiguous[b].truncate(pos[b]);
  if (!paged) {
    for (auto _ : st) {
      auto logits = m.decode_batch(tokens, cptr);
      benchmark::DoNotOptimize(logits.data());
      benchmark::ClobberMemory();
      for (int b = 0; b < batch; ++b) contiguous[b].truncate(pos[b]);
    }
    st.counters["tokens"] = benchmark::Counter(static_cast<double>(batch) * st.iterations(), benchmark::Counter::kIsRate);
    return;
  }
  int blocks = 0;
  for (int p : pos) blocks += p / 16 + 1;
  Pool pool(m.config(), blocks, 16);
  std::vector<Paged> seqs;
  std::vector<Paged*> pptr;
  for (int b = 0; b < batch; ++b) seqs.emplace_back(pool);
  for (auto& s : seqs) pptr.push_back(&s);
  fill_interleaved(pptr, pos);  // seeds 100 + b: the same K/V as the contiguous caches
  if (!same_bits(rows(m.decode_batch(tokens, pptr)), expected)) {
    st.SkipWithError("paged logits differ from contiguous ones");
    return;
  }
  for (int b = 0; b < batch; ++b) seqs[b].truncate(pos[b]);
  for (auto _ : st) {
    auto logits = m.decode_batch(tokens, pptr);
    benchmark::DoNotOptimize(logits.data());
    benchmark::ClobberMemory();
    for (int b = 0; b < batch; ++b) seqs[b].truncate(pos[b]);
  }
  st.counters["tokens"] = benchmark::Counter(static_cast<double>(batch) * st.iterations(), benchmark::Counter::kIsRate);
}

// The pool of BM_PagedMemory is ~0.9 GB, allocated once per run: a few iterations suffice.
BENCHMARK(BM_PagedMemory)->ArgName("block")->Arg(16)->Arg(64)->Iterations(20)->Unit(benchmark::kMicrosecond);

const bool kPagedRegistered = [] {
  for (int pos : {1024, 2000})
    for (int threads : {1, 2})
      for (bool paged : {false, true})
        benchmark::RegisterBenchmark((std::string("BM_PagedDecode/cache:") + (paged ? "paged" : "contiguous") +
                                      "/pos:" + std::to_string(pos) + "/threads:" + std::to_string(threads)).c_str(),
                                     BM_PagedDecode, paged, pos, threads)
            ->UseRealTime()
            ->Unit(benchmark::kMillisecond);
  for (int threads : {1, 2})
    for (bool paged : {false, true})
      benchmark::RegisterBenchmark((std::string("BM_PagedDecodeBatch/cache:") + (paged ? "paged" : "contiguous") +
                                    "/batch:" + std::to_string(kBatch) + "/threads:" + std::to_string(threads)).c_str(),
                                   BM_PagedDecodeBatch, paged, kBatch, threads)
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond);
  return true;
}();

}  // namespace
