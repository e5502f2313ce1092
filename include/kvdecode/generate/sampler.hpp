// Sampling: picks the next token from a row of logits. SamplerConfig holds the
// knobs (temperature, top-k, top-p, min-p, repetition penalty, seed) with
// "off" defaults; uniform_at(seed, pos) is our own fixed, documented,
// counter-based generator, so that a seed gives the same tokens on every
// platform and standard library (the std:: distributions are
// implementation-defined) and the draw for a position does not depend on how
// many draws came before (speculative decoding relies on this); Sampler applies
// the filters in the order llama.cpp and Hugging Face use and draws one token.
//
// Pipeline of Sampler::sample over a logits row of vocab_size V:
//   1. repetition penalty (CTRL): each distinct token among the last
//      repetition_last_n entries of history gets logit / penalty if the logit
//      is positive, logit * penalty otherwise;
//   2. temperature == 0: return the argmax (lowest id on ties), no randomness;
//   3. probabilities p = softmax(logit / temperature), in double (computed as
//      exp((logit - max logit) / temperature) / sum);
//   4. top-k: keep the k best tokens;
//   5. top-p: keep the smallest best-first prefix whose probability,
//      renormalised over what top-k kept, sums to >= top_p;
//   6. min-p: drop tokens with p < min_p * (largest kept p);
//   7. draw u = uniform_at(seed, pos) * (sum of kept p), where pos is the
//      position of the token being chosen (history.size() unless given), and
//      return the first kept token, in increasing id order, whose running sum
//      exceeds u.
// "Best" means higher penalised logit, then lower id: the probability order, but
// decided on the logits so that rounding in exp() cannot create ties, which makes
// top_k = 1 pick exactly the greedy token at any temperature.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "kvdecode/error.hpp"

namespace kvd {

/// The greedy choice, defined once for every caller: the index of the largest of
/// x[0, n), the lowest index among equal maxima (a strict '>' scan, so NaN entries
/// are never chosen over an earlier value). Precondition n >= 1 (returns 0 for n <= 0).
/// Never throws.
template <class T>
inline int argmax(const T* x, int n) {
  int best = 0;
  for (int i = 1; i < n; ++i)
    if (x[i] > x[best]) best = i;
  return best;
}

/// Sampling options. Every default means "off", so SamplerConfig{} is greedy decoding.
struct SamplerConfig {
  double temperature = 0.0;         ///< >= 0; 0 = greedy (argmax)
  int top_k = 0;                    ///< >= 0; 0 = off
  double top_p = 1.0;               ///< in (0, 1]; 1 = off
  double min_p = 0.0;               ///< in [0, 1]; 0 = off
  double repetition_penalty = 1.0;  ///< > 0; 1 = off; > 1 discourages repeats
  int repetition_last_n = 64;       ///< >= 0; how many trailing history entries the penalty looks at
  std::uint64_t seed = 0;           ///< keys uniform_at(seed, pos); any value

  /// Throws ConfigError naming the first bad field, its value and the allowed range.
  /// NaN and infinite values are rejected everywhere.
  void validate() const {
    auto bad = [](const char* field, double value, const char* range) {
      throw ConfigError(detail::msg("SamplerConfig.", field, " = ", value, " is outside ", range));
    };
    if (!(std::isfinite(temperature) && temperature >= 0)) bad("temperature", temperature, "[0, inf) (0 = greedy)");
    if (top_k < 0) bad("top_k", top_k, "[0, inf) (0 = off)");
    if (!(top_p > 0 && top_p <= 1)) bad("top_p", top_p, "(0, 1] (1 = off)");
    if (!(min_p >= 0 && min_p <= 1)) bad("min_p", min_p, "[0, 1] (0 = off)");
    if (!(std::isfinite(repetition_penalty) && repetition_penalty > 0))
      bad("repetition_penalty", repetition_penalty, "(0, inf) (1 = off)");
    if (repetition_last_n < 0) bad("repetition_last_n", repetition_last_n, "[0, inf) (0 = off)");
  }
};

/// One SplitMix64 step (Steele, Lea and Flood, 2014), written from the published
/// reference code: advances `state` by 0x9E3779B97F4A7C15 and returns its mix
///   z = state; z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9;
///   z = (z ^ (z >> 27)) * 0x94D049BB133111EB; return z ^ (z >> 31).
/// Never fails.
inline std::uint64_t splitmix64(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/// The random bits of position `pos` under `seed`: a counter-based generator, so a
/// draw depends on (seed, pos) only, never on how many draws came before. That is
/// what makes sampled text independent of how the tokens were produced (one at a
/// time, verified k at a time by speculative decoding, any draft length). Defined
/// as the pos-th output (from 0) of a SplitMix64 sequence whose state starts at
/// key = splitmix64(seed) (one step from state = seed), i.e.
///   random_bits_at(seed, pos) = mix(key + (pos + 1) * 0x9E3779B97F4A7C15)
/// with mix the SplitMix64 output function above. The values are part of
/// kvdecode's contract (tests pin them), so a seed reproduces the same samples on
/// every platform and standard library. Never fails.
inline std::uint64_t random_bits_at(std::uint64_t seed, std::uint64_t pos) {
  std::uint64_t key_state = seed;
  std::uint64_t state = splitmix64(key_state) + pos * 0x9E3779B97F4A7C15ull;  // wraps mod 2^64, as intended
  return splitmix64(state);
}

/// Uniform double in [0, 1) for position `pos` under `seed`: the top 53 bits of
/// random_bits_at(seed, pos) times 2^-53. Never fails.
inline double uniform_at(std::uint64_t seed, std::uint64_t pos) {
  return static_cast<double>(random_bits_at(seed, pos) >> 11) * 0x1.0p-53;
}

/// Draws tokens from logits rows by the pipeline described at the top of this file.
/// Holds no random state: the draw for position pos is uniform_at(seed, pos), so a
/// token depends only on its logits, the history the penalty reads, the seed and
/// its position. Holds scratch buffers sized for the largest vocab_size seen, so
/// after the first call for a vocab size, sampling allocates nothing. Not
/// thread-safe (the scratch buffers); use one Sampler per thread.
class Sampler {
 public:
  /// Throws ConfigError (from config.validate()) if a field is out of range.
  explicit Sampler(SamplerConfig config) : config_(config) { config_.validate(); }

  /// Picks the token id in [0, vocab_size) for position `pos` of the sequence from
  /// the logits row `logits` ((vocab_size) values of any type convertible to double,
  /// e.g. float or double; never modified). `history` is the sequence before it (prompt
  /// and generated ids); only its last repetition_last_n entries are read, and only if
  /// repetition_penalty != 1. Greedy (temperature 0) uses no random number; every
  /// other call uses uniform_at(config().seed, pos), so calling it again for the same
  /// position gives the same token. -inf logits are allowed and mean "never pick".
  /// Throws ArgumentError if logits is null, vocab_size <= 0, pos < 0, a logit is NaN
  /// or +inf, or every logit is -inf; TokenError if a history entry the penalty reads
  /// is outside [0, vocab_size). The Sampler keeps no state a throw could leave behind.
  template <class T>
  int sample(const T* logits, int vocab_size, const std::vector<int>& history, long pos) {
    if (pos < 0) throw ArgumentError(detail::msg("Sampler::sample: pos = ", pos, " must be >= 0"));
    const int greedy = prepare(logits, vocab_size, history);
    if (greedy >= 0) return greedy;
    // Step 7: one uniform draw over the kept mass, walked in increasing id order.
    const auto V = static_cast<std::size_t>(vocab_size);
    double mass = 0;
    for (std::size_t i = 0; i < V; ++i) mass += probs_[i];
    const double u = uniform_at(config_.seed, static_cast<std::uint64_t>(pos)) * mass;
    double cum = 0;
    int last = -1;
    for (std::size_t i = 0; i < V; ++i) {
      if (probs_[i] <= 0) continue;
      cum += probs_[i];
      last = static_cast<int>(i);
      if (u < cum) return last;
    }
    KVD_ASSERT(last >= 0);  // the most likely token always keeps p > 0
    return last;            // only when rounding left u >= the final running sum
  }

  /// sample() for the token that follows `history`: its position is history.size()
  /// (history is the whole sequence before it). Throws as sample() above does.
  template <class T>
  int sample(const T* logits, int vocab_size, const std::vector<int>& history = {}) {
    return sample(logits, vocab_size, history, static_cast<long>(history.size()));
  }

  /// The distribution sample() would draw from, without drawing: fills `probs`
  /// ((vocab_size)) with the renormalised probabilities of the kept tokens and 0
  /// elsewhere (one-hot at the argmax when greedy). Draws nothing.
  /// Throws as sample() does; on throw `probs` is unchanged.
  template <class T>
  void distribution(const T* logits, int vocab_size, const std::vector<int>& history, std::vector<double>& probs) {
    const int greedy = prepare(logits, vocab_size, history);
    const auto V = static_cast<std::size_t>(vocab_size);
    probs.assign(V, 0.0);
    if (greedy >= 0) {
      probs[static_cast<std::size_t>(greedy)] = 1.0;
      return;
    }
    double mass = 0;
    for (std::size_t i = 0; i < V; ++i) mass += probs_[i];
    for (std::size_t i = 0; i < V; ++i) probs[i] = probs_[i] / mass;
  }

  const SamplerConfig& config() const { return config_; }

 private:
  // Validates, applies steps 1-6 and returns the greedy token, or -1 when a draw is
  // needed, with probs_ then holding the kept probabilities (0 for dropped tokens).
  template <class T>
  int prepare(const T* logits, int vocab_size, const std::vector<int>& history) {
    if (logits == nullptr) throw ArgumentError("Sampler::sample: logits is null");
    if (vocab_size <= 0) throw ArgumentError(detail::msg("Sampler::sample: vocab_size = ", vocab_size, " must be > 0"));
    const bool penalise = config_.repetition_penalty != 1.0;
    const std::size_t window =
        penalise ? std::min(history.size(), static_cast<std::size_t>(config_.repetition_last_n)) : 0;
    const std::size_t first = history.size() - window;  // penalty reads history[first, size)
    for (std::size_t j = first; j < history.size(); ++j)
      if (history[j] < 0 || history[j] >= vocab_size)
        throw TokenError(detail::msg("Sampler::sample: history[", j, "] = ", history[j],
                                     " is outside [0, vocab_size = ", vocab_size, ")"));

    // Scratch buffers keep their capacity: only a vocab size larger than any seen before
    // allocates, so a steady decode loop never does.
    const auto V = static_cast<std::size_t>(vocab_size);
    if (logits_.size() != V) {
      logits_.assign(V, 0.0);
      probs_.assign(V, 0.0);
      order_.assign(V, 0);
      seen_.assign(V, 0);
    }

    for (std::size_t i = 0; i < V; ++i) {
      const double x = static_cast<double>(logits[i]);
      if (std::isnan(x) || x == kInf)
        throw ArgumentError(detail::msg("Sampler::sample: logit[", i, "] = ", x, " (must be finite or -inf)"));
      logits_[i] = x;
    }

    // Step 1: repetition penalty, once per distinct token in the window.
    if (penalise) {
      const double pen = config_.repetition_penalty;
      for (std::size_t j = first; j < history.size(); ++j) {
        const auto t = static_cast<std::size_t>(history[j]);
        if (seen_[t]) continue;
        seen_[t] = 1;
        logits_[t] = logits_[t] > 0 ? logits_[t] / pen : logits_[t] * pen;
      }
      for (std::size_t j = first; j < history.size(); ++j) seen_[static_cast<std::size_t>(history[j])] = 0;
    }

    // The largest logit; every token at -inf leaves nothing to pick. (A finite logit
    // can reach +-inf only through an extreme penalty overflowing.)
    double max_logit = -kInf;
    for (std::size_t i = 0; i < V; ++i) max_logit = std::max(max_logit, logits_[i]);
    if (max_logit == -kInf)
      throw ArgumentError(detail::msg("Sampler::sample: all ", V, " logits are -inf (after the repetition penalty)"));

    // Step 2: greedy. Strict '>' keeps the lowest id among equal maxima.
    if (config_.temperature == 0.0) return argmax(logits_.data(), vocab_size);

    // Step 3: p_i = exp((l_i - l_max) / T) / sum, which is softmax(l / T); taking the
    // max out first keeps every exponent <= 0, so nothing overflows or turns NaN.
    double sum = 0;
    for (std::size_t i = 0; i < V; ++i) {
      probs_[i] = max_logit == kInf ? (logits_[i] == kInf ? 1.0 : 0.0)  // overflowed: share among the +inf
                                    : std::exp((logits_[i] - max_logit) / config_.temperature);
      sum += probs_[i];
    }
    // Candidates: tokens with p > 0, in increasing id order; order_[0, n).
    std::size_t n = 0;
    for (std::size_t i = 0; i < V; ++i) {
      probs_[i] /= sum;
      if (probs_[i] > 0) order_[n++] = static_cast<int>(i);
    }
    auto better = [this](int a, int b) {
      const double la = logits_[static_cast<std::size_t>(a)], lb = logits_[static_cast<std::size_t>(b)];
      return la > lb || (la == lb && a < b);
    };
    auto drop_from = [this](std::size_t keep, std::size_t end) {  // zero order_[keep, end)
      for (std::size_t j = keep; j < end; ++j) probs_[static_cast<std::size_t>(order_[j])] = 0;
    };

    // Step 4: top-k. nth_element puts the k best in order_[0, k) in O(n).
    const auto k = static_cast<std::size_t>(config_.top_k);
    if (k > 0 && k < n) {
      std::nth_element(order_.begin(), order_.begin() + static_cast<std::ptrdiff_t>(k),
                       order_.begin() + static_cast<std::ptrdiff_t>(n), better);
      drop_from(k, n);
      n = k;
    }

    // Step 5: top-p over the renormalised survivors, best first.
    if (config_.top_p < 1.0 && n > 1) {
      std::sort(order_.begin(), order_.begin() + static_cast<std::ptrdiff_t>(n), better);
      double mass = 0;
      for (std::size_t j = 0; j < n; ++j) mass += probs_[static_cast<std::size_t>(order_[j])];
      double cum = 0;
      std::size_t keep = n;  // if rounding never reaches top_p, keep everything
      for (std::size_t j = 0; j < n; ++j) {
        cum += probs_[static_cast<std::size_t>(order_[j])] / mass;
        if (cum >= config_.top_p) {
          keep = j + 1;
          break;
        }
      }
      drop_from(keep, n);
      n = keep;
    }

    // Step 6: min-p, relative to the most likely survivor (renormalising would not
    // change the ratio).
    if (config_.min_p > 0.0) {
      double p_max = 0;
      for (std::size_t j = 0; j < n; ++j) p_max = std::max(p_max, probs_[static_cast<std::size_t>(order_[j])]);
      const double threshold = config_.min_p * p_max;
      for (std::size_t j = 0; j < n; ++j) {
        double& p = probs_[static_cast<std::size_t>(order_[j])];
        if (p < threshold) p = 0;
      }
    }
    return -1;
  }

  static constexpr double kInf = std::numeric_limits<double>::infinity();

  SamplerConfig config_;
  std::vector<double> logits_;        // (V) input logits after the repetition penalty
  std::vector<double> probs_;         // (V) softmax probabilities; 0 for filtered-out tokens
  std::vector<int> order_;            // (V) candidate ids, the first n still kept
  std::vector<unsigned char> seen_;   // (V) all 0 between calls; marks penalised tokens
};

}  // namespace kvd
