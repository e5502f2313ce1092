// Helpers shared by the tests: small model shapes, exact row comparison, the
// location of ../shared, and a plain double-precision oracle of the model.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "kvdecode/kvdecode.hpp"

namespace kvd_test {

/// The shared/ folder (models and reference outputs), or "" when it is absent.
inline std::string shared_dir() {
#ifdef KVDECODE_SHARED_DIR
  const std::string d = KVDECODE_SHARED_DIR;
  std::ifstream probe(d + "/models/README.md");
  if (probe.good()) return d;
#endif
  return "";
}

inline kvd::ModelConfig small_config(int n_heads, int n_kv_heads, int head_dim, int d_model, int n_layers,
                                     int hidden_dim, int vocab, int max_seq_len) {
  kvd::ModelConfig c;
  c.n_heads = n_heads; c.n_kv_heads = n_kv_heads; c.head_dim = head_dim; c.d_model = d_model;
  c.n_layers = n_layers; c.hidden_dim = hidden_dim; c.vocab_size = vocab; c.max_seq_len = max_seq_len;
  return c;
}

/// A model shape with a name for parameterised test suites.
struct NamedConfig {
  const char* name;
  kvd::ModelConfig config;
};

/// c with a sliding window of `window` positions.
inline kvd::ModelConfig windowed(kvd::ModelConfig c, int window) {
  c.sliding_window = window;
  return c;
}

/// Deterministic pseudo-random tokens in [0, vocab).
inline std::vector<int> make_tokens(int n, int vocab, unsigned seed = 7) {
  std::vector<int> t(n);
  std::uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (auto& x : t) { s = s * 6364136223846793005ull + 1442695040888963407ull; x = static_cast<int>((s >> 33) % vocab); }
  return t;
}

/// True when the n values at a and b have identical bits.
template <class T>
bool same_bits(const T* a, const T* b, long n) { return std::memcmp(a, b, n * sizeof(T)) == 0; }

/// Index of the first differing value, for failure messages.
template <class T>
std::string first_difference(const T* a, const T* b, long n) {
  for (long i = 0; i < n; ++i)
    if (std::memcmp(a + i, b + i, sizeof(T)) != 0)
      return kvd::detail::msg("first difference at index ", i, ": ", a[i], " vs ", b[i], " (diff ", a[i] - b[i], ")");
  return "identical";
}

#define EXPECT_ROW_BITS_EQ(a, b, n) \
  EXPECT_TRUE(kvd_test::same_bits((a), (b), (n))) << kvd_test::first_difference((a), (b), (n))

/// A plain double-precision implementation of the whole model, written without
/// any of the library's kernels: textbook loops, full causal attention.
/// Returns logits (n, V) for tokens at positions 0..n-1.
inline std::vector<std::vector<double>> oracle_logits(const kvd::ModelWeights<double>& w, const std::vector<int>& tokens) {
  const auto& c = w.config;
  const int n = static_cast<int>(tokens.size()), D = c.d_model, Dh = c.head_dim, H = c.n_heads, Hk = c.n_kv_heads;
  const int F = c.hidden_dim, V = c.vocab_size;
  using Vec = std::vector<double>;
  auto matvec = [](const kvd::RowMatrix<double>& m, const Vec& x) {
    Vec y(m.rows(), 0.0);
    for (long i = 0; i < m.rows(); ++i) for (long j = 0; j < m.cols(); ++j) y[i] += m(i, j) * x[j];
    return y;
  };
  auto rmsnorm = [&](const Vec& x, const kvd::Vector<double>& g) {
    double ss = 0; for (double v : x) ss += v * v;
    const double s = 1.0 / std::sqrt(ss / x.size() + c.norm_eps);
    Vec y(x.size()); for (size_t i = 0; i < x.size(); ++i) y[i] = g[i] * x[i] * s;
    return y;
  };
  auto rope = [&](Vec& v, int heads, int pos) {
    for (int h = 0; h < heads; ++h)
      for (int i = 0; i < Dh / 2; ++i) {
        const double a = pos * std::pow(c.rope_theta, -2.0 * i / Dh);
        double& x0 = v[h * Dh + 2 * i]; double& x1 = v[h * Dh + 2 * i + 1];
        const double y0 = x0 * std::cos(a) - x1 * std::sin(a), y1 = x0 * std::sin(a) + x1 * std::cos(a);
        x0 = y0; x1 = y1;
      }
  };
  std::vector<Vec> x(n, Vec(D));
  for (int t = 0; t < n; ++t) for (int i = 0; i < D; ++i) x[t][i] = w.token_embedding(tokens[t], i);
  for (int l = 0; l < c.n_layers; ++l) {
    const auto& L = w.layers[l];
    std::vector<Vec> q(n), k(n), v(n);
    for (int t = 0; t < n; ++t) {
      Vec xn = rmsnorm(x[t], L.attn_norm);
      q[t] = matvec(L.wq, xn); k[t] = matvec(L.wk, xn); v[t] = matvec(L.wv, xn);
      rope(q[t], H, t); rope(k[t], Hk, t);
    }
    for (int t = 0; t < n; ++t) {
      Vec att(H * Dh, 0.0);
      for (int h = 0; h < H; ++h) {
        const int kh = h / (H / Hk);
        const int first = c.sliding_window > 0 ? std::max(0, t - c.sliding_window + 1) : 0;
        Vec s(t + 1, -1e300); double mx = -1e300;
        for (int u = first; u <= t; ++u) {
          double d = 0; for (int j = 0; j < Dh; ++j) d += q[t][h * Dh + j] * k[u][kh * Dh + j];
          s[u] = d / std::sqrt(double(Dh)); mx = std::max(mx, s[u]);
        }
        double sum = 0; for (int u = first; u <= t; ++u) { s[u] = std::exp(s[u] - mx); sum += s[u]; }
        for (int u = first; u <= t; ++u) for (int j = 0; j < Dh; ++j) att[h * Dh + j] += s[u] / sum * v[u][kh * Dh + j];
      }
      Vec o = matvec(L.wo, att);
      for (int i = 0; i < D; ++i) x[t][i] += o[i];
      Vec xn = rmsnorm(x[t], L.ffn_norm);
      Vec g = matvec(L.w1, xn), u = matvec(L.w3, xn), hm(F);
      for (int i = 0; i < F; ++i) hm[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
      Vec o2 = matvec(L.w2, hm);
      for (int i = 0; i < D; ++i) x[t][i] += o2[i];
    }
  }
  std::vector<Vec> logits(n);
  for (int t = 0; t < n; ++t) logits[t] = matvec(w.output_matrix(), rmsnorm(x[t], w.final_norm));
  (void)V;
  return logits;
}

}  // namespace kvd_test
