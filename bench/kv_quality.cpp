// kvdecode-kv_quality: the price of quantized and rotated KV caches in quality.
// One token sequence is fed teacher-forced (one prefill, every position's logits)
// through caches of each key/value type pair, unrotated and rotated (keys; keys and
// values: --cache-rotate k / kv), and compared position by position with an f32
// cache's logits: mean KL(p_f32 || p_cache) of the next-token distribution, top-1
// agreement, and the perplexity of the fed text relative to the f32 cache's.
//   kvdecode-kv_quality MODEL [--positions 256] [--text greedy|random]
// MODEL: any file kvdecode-generate --model reads. The text: the model's own greedy
// continuation of token 1 (`greedy`, the default: the model's own text), or seeded
// random ids (`random`, for a large random-weight model whose greedy text would take
// long to generate and mean no more). A pair whose block type the model's head_dim
// refuses (not a multiple of 32), or a rotation it refuses (head_dim not a power of
// two), gets a row saying so. Prints a Markdown table.
// Exit status: 0 success, 1 a failure, 2 bad arguments.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "kvdecode/kvdecode.hpp"

namespace {

using Matrix = kvd::RowMatrix<float>;

// log softmax of one row of logits, in double.
std::vector<double> log_softmax(const float* x, int n) {
  double m = x[0];
  for (int i = 1; i < n; ++i) m = std::max(m, static_cast<double>(x[i]));
  double s = 0;
  for (int i = 0; i < n; ++i) s += std::exp(x[i] - m);
  const double lse = m + std::log(s);
  std::vector<double> out(n);
  for (int i = 0; i < n; ++i) out[i] = x[i] - lse;
  return out;
}

struct Quality {
  double mean_kl = 0, top1 = 0, ppl_change = 0;
};

Quality compare(const Matrix& ref, const Matrix& got, const std::vector<int>& tokens) {
  const int n = static_cast<int>(ref.rows()), V = static_cast<int>(ref.cols());
  Quality q;
  double nll_ref = 0, nll_got = 0;
  for (int i = 0; i < n; ++i) {
    const std::vector<double> lp = log_softmax(ref.row(i).data(), V), lq = log_softmax(got.row(i).data(), V);
    for (int j = 0; j < V; ++j) q.mean_kl += std::exp(lp[j]) * (lp[j] - lq[j]);
    q.top1 += std::max_element(lp.begin(), lp.end()) - lp.begin() == std::max_element(lq.begin(), lq.end()) - lq.begin();
    if (i + 1 < n) {
      nll_ref -= lp[tokens[i + 1]];
      nll_got -= lq[tokens[i + 1]];
    }
  }
  q.mean_kl /= n;
  q.top1 /= n;
  q.ppl_change = std::exp((nll_got - nll_ref) / std::max(1, n - 1)) - 1;
  return q;
}

template <class K, class V>
Matrix logits_with(kvd::Transformer<float>& m, const std::vector<int>& tokens) {
  kvd::KVCache<float, K, V> cache(m.config(), static_cast<int>(tokens.size()));
  return m.prefill(tokens, cache, /*all_logits=*/true);
}

const char* name_of(kvd::DType t) { return t == kvd::DType::kQ8 ? "q8_0" : t == kvd::DType::kQ4 ? "q4_0" : kvd::dtype_name(t); }

template <class K, class V>
void row(kvd::Transformer<float>* m, const std::string& why_not, const Matrix& ref, const std::vector<int>& tokens,
         const char* rotation) {
  char line[256];
  const std::string pair = std::string(name_of(kvd::DTypeOf<K>::value)) + " / " + name_of(kvd::DTypeOf<V>::value);
  if (m == nullptr) {
    std::printf("| %s | %s | refused: %s |||\n", pair.c_str(), rotation, why_not.c_str());
    return;
  }
  try {
    const Quality q = compare(ref, logits_with<K, V>(*m, tokens), tokens);
    std::snprintf(line, sizeof line, "| %s | %s | %.1e | %.1f%% | %+.2f%% |\n", pair.c_str(), rotation, q.mean_kl,
                  100 * q.top1, 100 * q.ppl_change);
    std::fputs(line, stdout);
  } catch (const kvd::ConfigError& e) {
    std::printf("| %s | %s | refused: %s |||\n", pair.c_str(), rotation, e.what());
  }
  std::fflush(stdout);
}

int run(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
    std::cerr << "usage: kvdecode-kv_quality MODEL [--positions 256] [--text greedy|random]\n";
    return argc < 2 ? 2 : 0;
  }
  const std::string path = argv[1];
  int positions = 256;
  std::string text = "greedy";
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--positions") positions = std::stoi(v);
    else if (a == "--text" && (v == "greedy" || v == "random")) text = v;
    else throw kvd::ArgumentError(kvd::detail::msg("unknown argument '", a, " ", v, "'"));
  }
  if (positions < 2) throw kvd::ArgumentError(kvd::detail::msg("--positions ", positions, " must be >= 2"));
  kvd::WeightLoadOptions lo;
  lo.max_seq_len = positions;
  kvd::Transformer<float> plain(kvd::load_model_weights<float>(path, lo));
  const kvd::ModelConfig& c = plain.config();
  if (c.max_seq_len < positions)
    throw kvd::ArgumentError(kvd::detail::msg("the model holds ", c.max_seq_len, " positions, fewer than --positions ", positions));
  std::vector<int> tokens{1};
  if (text == "greedy") {  // the model's own text: greedy from token 1, on an f32 cache
    kvd::KVCache<float> cache(c, positions);
    auto argmax = [&](const kvd::LogitsView<float>& l) {
      return static_cast<int>(std::max_element(l.data(), l.data() + c.vocab_size) - l.data());
    };
    int next = argmax(plain.prefill(tokens, cache));
    while (static_cast<int>(tokens.size()) < positions) {
      tokens.push_back(next);
      if (static_cast<int>(tokens.size()) < positions) next = argmax(plain.decode_step(next, cache));
    }
  } else {
    std::uint64_t s = 7;
    while (static_cast<int>(tokens.size()) < positions) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      tokens.push_back(static_cast<int>((s >> 33) % static_cast<std::uint64_t>(c.vocab_size)));
    }
  }
  const Matrix ref = logits_with<float, float>(plain, tokens);
  std::printf("%s (%s), %d positions of %s text; against an f32 cache:\n\n", path.c_str(), c.summary().c_str(), positions,
              text == "greedy" ? "its own greedy" : "seeded random");
  std::printf("| keys / values | rotation | mean KL | top-1 | perplexity |\n| --- | --- | ---: | ---: | ---: |\n");
  for (kvd::KVRotation r : {kvd::KVRotation::kNone, kvd::KVRotation::kKeys, kvd::KVRotation::kKeysValues}) {
    std::unique_ptr<kvd::Transformer<float>> rotated;
    std::string why_not;
    if (r != kvd::KVRotation::kNone) {
      kvd::WeightLoadOptions rl = lo;
      rl.cache_rotation = r;
      try {
        rotated = std::make_unique<kvd::Transformer<float>>(kvd::load_model_weights<float>(path, rl));
      } catch (const kvd::ConfigError& e) {
        why_not = e.what();
      }
    }
    kvd::Transformer<float>* m = r == kvd::KVRotation::kNone ? &plain : rotated.get();
    const char* rn = kvd::kv_rotation_name(r);
    row<Eigen::half, Eigen::half>(m, why_not, ref, tokens, rn);
    row<kvd::CacheQ8_0, kvd::CacheQ8_0>(m, why_not, ref, tokens, rn);
    row<kvd::CacheQ8_0, Eigen::half>(m, why_not, ref, tokens, rn);
    row<kvd::CacheQ4_0, kvd::CacheQ8_0>(m, why_not, ref, tokens, rn);
    row<kvd::CacheQ4_0, Eigen::half>(m, why_not, ref, tokens, rn);
    row<kvd::CacheQ4_0, kvd::CacheQ4_0>(m, why_not, ref, tokens, rn);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const kvd::ArgumentError& e) {
    std::cerr << "kvdecode-kv_quality: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "kvdecode-kv_quality: " << e.what() << "\n";
    return 1;
  }
}
