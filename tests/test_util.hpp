// Helpers shared by the tests: small model shapes, exact row comparison, the
// location of ../shared, and a plain double-precision oracle of the model.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <functional>
#include <iterator>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

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

/// One float32 tensor for write_safetensors_f32.
struct F32Tensor {
  std::string name;
  std::vector<std::uint64_t> shape;
  std::vector<float> data;
};

/// Writes `ts` as one safetensors file of F32 tensors at `path`, byte by byte from the
/// format's definition (u64 header length, the JSON header, the data in order).
inline void write_safetensors_f32(const std::filesystem::path& path, const std::vector<F32Tensor>& ts) {
  std::ostringstream header;
  header << "{";
  std::uint64_t offset = 0;
  for (std::size_t i = 0; i < ts.size(); ++i) {
    const std::uint64_t n = ts[i].data.size() * 4;
    header << (i ? "," : "") << "\"" << ts[i].name << "\":{\"dtype\":\"F32\",\"shape\":[";
    for (std::size_t d = 0; d < ts[i].shape.size(); ++d) header << (d ? "," : "") << ts[i].shape[d];
    header << "],\"data_offsets\":[" << offset << "," << offset + n << "]}";
    offset += n;
  }
  header << "}";
  const std::string h = header.str();
  std::ofstream st(path, std::ios::binary);
  const std::uint64_t hn = h.size();
  for (int b = 0; b < 8; ++b) st.put(static_cast<char>((hn >> (8 * b)) & 0xff));
  st << h;
  for (const F32Tensor& t : ts)
    st.write(reinterpret_cast<const char*>(t.data.data()), static_cast<std::streamsize>(t.data.size() * 4));
}

/// A model shape with a name for parameterised test suites.
struct NamedConfig {
  const char* name;
  kvd::ModelConfig config;
  /// How the random weights are stored: kF32 = the compute type; kF16/kBF16 = every
  /// matrix rounded to that type (kvd_test::storage_mix: several types at once).
  kvd::WeightType storage = kvd::WeightType::kF32;
  bool mixed_storage = false;   ///< projections in f16, bf16 and dense at once (PackedMatrix segments)
  bool rope_factors = false;    ///< attach RoPE frequency factors (Llama 3.1 rope_freqs)
};

/// c with q/k/v biases and RoPE on halves (the qwen2 options).
inline kvd::ModelConfig qwen2_like(kvd::ModelConfig c) {
  c.rope_style = kvd::RopeStyle::kHalves;
  c.qkv_bias = true;
  return c;
}
/// c with per-head q/k RMSNorm and RoPE on halves (the qwen3 options).
inline kvd::ModelConfig qwen3_like(kvd::ModelConfig c) {
  c.rope_style = kvd::RopeStyle::kHalves;
  c.qk_norm = true;
  return c;
}

/// c as a qwen3moe model (qwen3's attention) with a mixture of `experts` experts,
/// `used` per token, router weights normalised.
inline kvd::ModelConfig qwen3moe_like(kvd::ModelConfig c, int experts, int used) {
  c = qwen3_like(c);
  c.n_experts = experts;
  c.n_experts_used = used;
  c.norm_topk_prob = true;
  return c;
}

/// c as a gemma3 model: qwen3's attention, post norms, scaled embeddings, GeGLU,
/// `pattern` - 1 local layers (window `window`, RoPE base 10000) to one global
/// (rope_theta, linear scaling `scale`), scores over sqrt(`scalar`) (0: head_dim).
inline kvd::ModelConfig gemma3_like(kvd::ModelConfig c, int pattern, int window, double scale = 1.0, int scalar = 0) {
  c = qwen3_like(c);
  c.post_norms = true;
  c.embed_scale = true;
  c.ffn_activation = kvd::Activation::kGeluTanh;
  c.swa_pattern = pattern;
  c.local_window = window;
  c.rope_theta_local = 10000.0;
  c.rope_scale = scale;
  c.query_pre_attn_scalar = scalar;
  return c;
}

/// c as a gpt-oss model: q/k/v/o biases, attention sinks, a mixture of `experts`
/// experts, `used` per token (top-k, then softmax) with biased router and experts and
/// the clamped SwiGLU, local (window `window`) and full layers alternating, YaRN RoPE
/// (`factor`, trained context `orig_ctx`) on every layer, RoPE on halves. Set
/// c.rope_theta before: the local layers take the same base.
inline kvd::ModelConfig gpt_oss_like(kvd::ModelConfig c, int experts, int used, int window, double factor, int orig_ctx) {
  c.rope_style = kvd::RopeStyle::kHalves;
  c.qkv_bias = true;
  c.n_experts = experts;
  c.n_experts_used = used;
  c.router_order = kvd::RouterOrder::kTopKSoftmax;
  c.norm_topk_prob = false;
  c.attn_sinks = true;
  c.attn_out_bias = true;
  c.moe_bias = true;
  c.ffn_activation = kvd::Activation::kSwigluOai;
  c.swa_pattern = 2;
  c.local_window = window;
  c.rope_theta_local = c.rope_theta;
  c.rope_scale_local = true;
  c.rope_scale = factor;
  c.rope_scaling = kvd::RopeScaling::kYarn;
  c.yarn_orig_ctx = orig_ctx;
  return c;
}

/// Seeded random weights for a named shape, stored as the shape asks.
template <class T>
kvd::ModelWeights<T> make_weights(const NamedConfig& s, std::uint64_t seed) {
  auto w = kvd::ModelWeights<T>::random(s.config, seed);
  using kvd::WeightType;
  if (s.mixed_storage) {
    w.token_embedding = w.token_embedding.converted_to(WeightType::kF16);
    for (auto& l : w.layers) {
      l.wq = l.wq.converted_to(WeightType::kF16);
      l.wk = l.wk.converted_to(WeightType::kF16);
      l.wv = l.wv.converted_to(WeightType::kBF16);   // q|k|v: two segments
      l.w1 = l.w1.converted_to(WeightType::kBF16);   // gate|up: bf16 then dense
      l.w2 = l.w2.converted_to(WeightType::kF16);
    }
    if (!w.config.shared_classifier) w.classifier = w.classifier.converted_to(WeightType::kBF16);
  } else if (s.storage != WeightType::kF32) {
    auto conv = [&](kvd::WeightMatrix& m) { m = m.converted_to(s.storage); };
    conv(w.token_embedding);
    for (auto& l : w.layers)
      for (kvd::WeightMatrix* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w1, &l.w2, &l.w3, &l.router, &l.experts_gate,
                                   &l.experts_down, &l.experts_up})
        conv(*m);
    if (!w.config.shared_classifier) conv(w.classifier);
  }
  if (s.rope_factors) {
    w.rope_freq_factors.resize(s.config.rotary_dim() / 2);
    for (long i = 0; i < w.rope_freq_factors.size(); ++i) w.rope_freq_factors[i] = T(1) + T(i % 3) * T(1.5);
  }
  return w;
}

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
/// any of the library's kernels: textbook loops, full causal attention. Covers
/// every architecture option: q/k/v biases, per-head q/k RMSNorm, both RoPE
/// pairings, partial rotary dims, RoPE frequency factors, sliding windows, a
/// mixture of experts (either router order, with or without normalisation), and
/// Gemma 3's options (local and global layers with their windows and RoPE bases,
/// linear RoPE scaling, scaled embeddings, post norms, GeGLU by tanh, the attention scalar)
/// and gpt-oss's (attention sinks, YaRN RoPE on every layer, the output projection's,
/// router's and experts' biases, the clamped SwiGLU).
/// Returns logits (n, V) for tokens at positions 0..n-1.
inline std::vector<std::vector<double>> oracle_logits(const kvd::ModelWeights<double>& w, const std::vector<int>& tokens) {
  const auto& c = w.config;
  const int n = static_cast<int>(tokens.size()), D = c.d_model, Dh = c.head_dim, H = c.n_heads, Hk = c.n_kv_heads;
  const int F = c.hidden_dim, R = c.rotary_dim();
  using Vec = std::vector<double>;
  using Mat = kvd::RowMatrix<double>;
  auto matvec = [](const Mat& m, const Vec& x) {
    Vec y(m.rows(), 0.0);
    for (long i = 0; i < m.rows(); ++i) for (long j = 0; j < m.cols(); ++j) y[i] += m(i, j) * x[j];
    return y;
  };
  auto add = [](Vec& y, const kvd::Vector<double>& b) { for (long i = 0; i < b.size(); ++i) y[i] += b[i]; };
  auto rmsnorm = [&](const double* x, int len, const kvd::Vector<double>& g, double* y) {
    double ss = 0; for (int i = 0; i < len; ++i) ss += x[i] * x[i];
    const double s = 1.0 / std::sqrt(ss / len + c.norm_eps);
    for (int i = 0; i < len; ++i) y[i] = g[i] * x[i] * s;
  };
  auto norm = [&](const Vec& x, const kvd::Vector<double>& g) { Vec y(x.size()); rmsnorm(x.data(), static_cast<int>(x.size()), g, y.data()); return y; };
  auto rope = [&](Vec& v, int heads, int pos, int layer) {
    const bool local = c.swa_pattern > 0 && (layer + 1) % c.swa_pattern != 0;
    const double base = local ? c.rope_theta_local : c.rope_theta;
    const double s = local && !c.rope_scale_local ? 1.0 : c.rope_scale;
    const bool yarn = c.rope_scaling == kvd::RopeScaling::kYarn;
    // YaRN (ggml's rope_yarn): pair i turns at f_i (r_i + (1 - r_i) / s), r_i ramping from 1
    // (pairs that turn more than beta_fast times over the trained context) to 0 (fewer
    // than beta_slow), and cos and sin gain 1 + 0.1 ln s.
    const double kPi = 3.14159265358979323846;
    auto dim_of = [&](double turns) { return R * std::log(c.yarn_orig_ctx / (turns * 2 * kPi)) / (2 * std::log(base)); };
    // Without truncation (HF's rope_scaling.truncate false) the ends keep their fractions.
    const double lo_d = dim_of(c.yarn_beta_fast), hi_d = dim_of(c.yarn_beta_slow);
    const double lo = yarn ? std::max(0.0, c.yarn_truncate ? std::floor(lo_d) : lo_d) : 0.0;
    const double hi = yarn ? std::min(R - 1.0, c.yarn_truncate ? std::ceil(hi_d) : hi_d) : 0.0;
    const double m = yarn ? 1.0 + 0.1 * std::log(s) : 1.0;
    for (int h = 0; h < heads; ++h)
      for (int i = 0; i < R / 2; ++i) {
        double freq = std::pow(base, -2.0 * i / R);
        if (w.rope_freq_factors.size()) freq /= w.rope_freq_factors[i];
        if (yarn) {
          const double r = 1.0 - std::clamp((i - lo) / std::max(0.001, hi - lo), 0.0, 1.0);
          freq = r * freq + (1.0 - r) * freq / s;
        } else {
          freq /= s;
        }
        const double a = pos * freq;
        const bool adjacent = c.rope_style == kvd::RopeStyle::kAdjacent;
        double& x0 = v[h * Dh + (adjacent ? 2 * i : i)];
        double& x1 = v[h * Dh + (adjacent ? 2 * i + 1 : i + R / 2)];
        const double y0 = m * (x0 * std::cos(a) - x1 * std::sin(a)), y1 = m * (x0 * std::sin(a) + x1 * std::cos(a));
        x0 = y0; x1 = y1;
      }
  };
  std::vector<Vec> x(n, Vec(D));
  for (int t = 0; t < n; ++t) for (int i = 0; i < D; ++i) x[t][i] = w.token_embedding(tokens[t], i);
  if (c.embed_scale)
    for (int t = 0; t < n; ++t) for (int i = 0; i < D; ++i) x[t][i] *= std::sqrt(double(D));
  for (int l = 0; l < c.n_layers; ++l) {
    const bool local = c.swa_pattern > 0 && (l + 1) % c.swa_pattern != 0;
    const int window = local ? c.local_window : c.sliding_window;
    const double scalar = c.query_pre_attn_scalar > 0 ? c.query_pre_attn_scalar : Dh;
    const auto& L = w.layers[l];
    const Mat wq = L.wq.to_dense<double>(), wk = L.wk.to_dense<double>(), wv = L.wv.to_dense<double>();
    const Mat wo = L.wo.to_dense<double>(), w1 = L.w1.to_dense<double>(), w2 = L.w2.to_dense<double>(), w3 = L.w3.to_dense<double>();
    const Mat router = L.router.to_dense<double>(), eg = L.experts_gate.to_dense<double>();
    const Mat eu = L.experts_up.to_dense<double>(), ed = L.experts_down.to_dense<double>();
    std::vector<Vec> q(n), k(n), v(n);
    for (int t = 0; t < n; ++t) {
      Vec xn = norm(x[t], L.attn_norm);
      q[t] = matvec(wq, xn); k[t] = matvec(wk, xn); v[t] = matvec(wv, xn);
      if (c.qkv_bias) { add(q[t], L.bq); add(k[t], L.bk); add(v[t], L.bv); }
      if (c.qk_norm) {
        for (int h = 0; h < H; ++h) rmsnorm(&q[t][h * Dh], Dh, L.q_norm, &q[t][h * Dh]);
        for (int h = 0; h < Hk; ++h) rmsnorm(&k[t][h * Dh], Dh, L.k_norm, &k[t][h * Dh]);
      }
      rope(q[t], H, t, l); rope(k[t], Hk, t, l);
    }
    for (int t = 0; t < n; ++t) {
      Vec att(H * Dh, 0.0);
      for (int h = 0; h < H; ++h) {
        const int kh = h / (H / Hk);
        const int first = window > 0 ? std::max(0, t - window + 1) : 0;
        Vec s(t + 1, -1e300); double mx = -1e300;
        for (int u = first; u <= t; ++u) {
          double d = 0; for (int j = 0; j < Dh; ++j) d += q[t][h * Dh + j] * k[u][kh * Dh + j];
          s[u] = d / std::sqrt(scalar); mx = std::max(mx, s[u]);
        }
        if (c.attn_sinks) mx = std::max(mx, static_cast<double>(L.attn_sinks[h]));  // the sink: one more logit
        double sum = c.attn_sinks ? std::exp(L.attn_sinks[h] - mx) : 0.0;
        for (int u = first; u <= t; ++u) { s[u] = std::exp(s[u] - mx); sum += s[u]; }
        for (int u = first; u <= t; ++u) for (int j = 0; j < Dh; ++j) att[h * Dh + j] += s[u] / sum * v[u][kh * Dh + j];
      }
      Vec o = matvec(wo, att);
      if (c.attn_out_bias) add(o, L.bo);
      if (c.post_norms) o = norm(o, L.attn_post_norm);
      for (int i = 0; i < D; ++i) x[t][i] += o[i];
      Vec xn = norm(x[t], L.ffn_norm);
      // SwiGLU of rows [r0, r0 + F) of gate/up and [d0, d0 + D) of down (with the
      // experts' biases at the same rows when `biased`).
      auto swiglu = [&](const Mat& gm, const Mat& um, const Mat& dm, long r0, long d0, bool biased = false) {
        Vec hm(F, 0.0), o(D, 0.0);
        for (int i = 0; i < F; ++i) {
          double g = 0, u = 0;
          for (int j = 0; j < D; ++j) { g += gm(r0 + i, j) * xn[j]; u += um(r0 + i, j) * xn[j]; }
          if (biased) { g += L.experts_gate_bias[r0 + i]; u += L.experts_up_bias[r0 + i]; }
          const double kPi = 3.14159265358979323846;
          if (c.ffn_activation == kvd::Activation::kSwigluOai) {  // gpt-oss: clamped, sigmoid(1.702 g), up + 1
            g = std::min(g, 7.0);
            u = std::clamp(u, -7.0, 7.0);
            hm[i] = g / (1.0 + std::exp(-1.702 * g)) * (u + 1.0);
            continue;
          }
          hm[i] = (c.ffn_activation == kvd::Activation::kGeluTanh
                       ? 0.5 * g * (1.0 + std::tanh(std::sqrt(2.0 / kPi) * (g + 0.044715 * g * g * g)))
                       : g / (1.0 + std::exp(-g))) * u;
        }
        for (int d = 0; d < D; ++d) for (int i = 0; i < F; ++i) o[d] += dm(d0 + d, i) * hm[i];
        if (biased) for (int d = 0; d < D; ++d) o[d] += L.experts_down_bias[d0 + d];
        return o;
      };
      Vec o2(D, 0.0);
      if (c.n_experts == 0) {
        o2 = swiglu(w1, w3, w2, 0, 0);
      } else {
        const int E = c.n_experts, K = c.n_experts_used;
        Vec p = matvec(router, xn);
        if (c.moe_bias) add(p, L.router_bias);
        auto softmax = [](Vec& v) {
          double mx = v[0]; for (double a : v) mx = std::max(mx, a);
          double sum = 0; for (double& a : v) { a = std::exp(a - mx); sum += a; }
          for (double& a : v) a /= sum;
        };
        if (c.router_order == kvd::RouterOrder::kSoftmaxTopK) softmax(p);
        std::vector<int> idx(E);
        for (int e = 0; e < E; ++e) idx[e] = e;
        std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) { return p[a] > p[b]; });
        Vec wk(K);
        for (int k = 0; k < K; ++k) wk[k] = p[idx[k]];
        if (c.router_order == kvd::RouterOrder::kTopKSoftmax) softmax(wk);
        double sum = 0; for (double a : wk) sum += a;
        for (int k = 0; k < K; ++k) {
          const Vec o = swiglu(eg, eu, ed, static_cast<long>(idx[k]) * F, static_cast<long>(idx[k]) * D, c.moe_bias);
          for (int d = 0; d < D; ++d) o2[d] += (c.norm_topk_prob ? wk[k] / sum : wk[k]) * o[d];
        }
      }
      if (c.post_norms) o2 = norm(o2, L.ffn_post_norm);
      for (int i = 0; i < D; ++i) x[t][i] += o2[i];
    }
  }
  const Mat out = w.output_matrix().to_dense<double>();
  std::vector<Vec> logits(n);
  for (int t = 0; t < n; ++t) logits[t] = matvec(out, norm(x[t], w.final_norm));
  return logits;
}

/// Every path on model w over `tokens` (at least 34 of them) gives the same bits as
/// the cache-free reference: prefill of the whole prompt, prefill then decode steps,
/// chunked prefill, batched decode and a paged cache, with 1 and 2 threads (and the
/// two thread counts agree). The architecture tests run it on their tiny files.
/// A model whose layers attend to windows gets those paths with its default caches
/// (a ring per windowed layer, kv_cache.hpp) and again with small rings (max_append
/// 5, so prefills go in chunks of 5) and with every position kept
/// (LocalLayers::kEveryPosition); a prompt longer than the rings wraps them.
inline void expect_every_path_same_bits(const kvd::ModelWeights<float>& w, const std::vector<int>& tokens) {
  using namespace kvd;
  const ModelConfig c = w.config;
  const long n = static_cast<long>(tokens.size()), V = c.vocab_size;
  ASSERT_GE(n, 34) << "the paths below split the prompt at positions up to 33";
  ASSERT_GE(c.max_seq_len, n);
  auto row_eq = [&](const float* got, long t, const RowMatrix<float>& ref, const std::string& what) {
    ASSERT_TRUE(same_bits(got, ref.row(t).data(), V))
        << what << " position " << t << ": " << first_difference(got, ref.row(t).data(), V);
  };
  const int saved = num_threads();
  std::vector<RowMatrix<float>> results;
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    Transformer<float> model(w);
    const RowMatrix<float> ref = model.forward_reference(tokens);
    {  // whole prompt
      KVCache<float> cache(c);
      const RowMatrix<float> pre = model.prefill(tokens, cache, true);
      for (long t = 0; t < n; ++t) row_eq(pre.row(t).data(), t, ref, "prefill");
    }
    for (long k : {1L, 7L, 19L, 20L, 33L}) {  // prefill k, then decode one at a time
      KVCache<float> cache(c);
      const RowMatrix<float> pre = model.prefill(std::vector<int>(tokens.begin(), tokens.begin() + k), cache, true);
      for (long t = 0; t < k; ++t) row_eq(pre.row(t).data(), t, ref, "prefill " + std::to_string(k));
      for (long t = k; t < n; ++t) {
        const RowMatrix<float> d = model.decode_step(tokens[t], cache);
        row_eq(d.data(), t, ref, "decode after " + std::to_string(k));
      }
    }
    {  // chunked prefill in chunks of 6
      KVCache<float> cache(c);
      for (long s = 0; s < n; s += 6) {
        const long e = std::min(n, s + 6);
        const RowMatrix<float> part = model.prefill(std::vector<int>(tokens.begin() + s, tokens.begin() + e), cache, true);
        for (long t = s; t < e; ++t) row_eq(part.row(t - s).data(), t, ref, "chunked");
      }
    }
    {  // batched decode: two sequences of different lengths step together
      KVCache<float> a(c), b(c);
      model.prefill(std::vector<int>(tokens.begin(), tokens.begin() + 11), a);
      model.prefill(std::vector<int>(tokens.begin(), tokens.begin() + 24), b);
      for (long i = 0; i + 24 < n; ++i) {
        std::vector<KVCache<float>*> caches{&a, &b};
        const RowMatrix<float> rows = model.decode_batch({tokens[11 + i], tokens[24 + i]}, caches);
        row_eq(rows.row(0).data(), 11 + i, ref, "batched (short)");
        row_eq(rows.row(1).data(), 24 + i, ref, "batched (long)");
      }
    }
    bool windowed = false;
    for (int l = 0; l < c.n_layers; ++l) windowed = windowed || c.layer_window(l) > 0;
    if (windowed) {
      {  // every position kept in every layer: the cache without rings
        KVCache<float> full(c, 0, 0, LocalLayers::kEveryPosition);
        const RowMatrix<float> pre = model.prefill(tokens, full, true);
        for (long t = 0; t < n; ++t) row_eq(pre.row(t).data(), t, ref, "prefill, every position kept");
      }
      {  // small rings: prefill in chunks of 5, then decode
        KVCache<float> cache(c, 0, 5);
        const RowMatrix<float> pre = model.prefill(std::vector<int>(tokens.begin(), tokens.begin() + 23), cache, true);
        for (long t = 0; t < 23; ++t) row_eq(pre.row(t).data(), t, ref, "small-ring prefill");
        for (long t = 23; t < n; ++t) {
          const RowMatrix<float> d = model.decode_step(tokens[t], cache);
          row_eq(d.data(), t, ref, "small-ring decode");
        }
      }
      {  // small rings in a batch with a full cache, at different lengths
        KVCache<float> a(c, 0, 3), b(c, 0, 0, LocalLayers::kEveryPosition);
        model.prefill(std::vector<int>(tokens.begin(), tokens.begin() + 13), a);
        model.prefill(std::vector<int>(tokens.begin(), tokens.begin() + 30), b);
        for (long i = 0; i + 30 < n; ++i) {
          std::vector<KVCache<float>*> caches{&a, &b};
          const RowMatrix<float> rows = model.decode_batch({tokens[13 + i], tokens[30 + i]}, caches);
          row_eq(rows.row(0).data(), 13 + i, ref, "small-ring batched");
          row_eq(rows.row(1).data(), 30 + i, ref, "full batched");
        }
      }
    }
    {  // paged: blocks of 16 positions, prefill 17 then decode
      BlockPool<float> pool(c, static_cast<int>(std::max(8L, (n + 15) / 16 + 1)), 16);
      PagedSequence<float> seq(pool);
      const RowMatrix<float> pre = model.prefill(std::vector<int>(tokens.begin(), tokens.begin() + 17), seq, true);
      for (long t = 0; t < 17; ++t) row_eq(pre.row(t).data(), t, ref, "paged prefill");
      for (long t = 17; t < n; ++t) {
        const RowMatrix<float> d = model.decode_step(tokens[t], seq);
        row_eq(d.data(), t, ref, "paged decode");
      }
    }
    results.push_back(ref);
  }
  set_num_threads(saved);
  EXPECT_TRUE(same_bits(results[0].data(), results[1].data(), results[0].size()));
}

/// A fresh directory for the running test (named after it and this process), removed
/// afterwards with everything in it.
class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = std::string("kvd_") + info->test_suite_name() + "_" + info->name() + "_" + std::to_string(::getpid());
    for (char& ch : name)
      if (ch == '/') ch = '_';
    path_ = std::filesystem::temp_directory_path() / name;
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  const std::filesystem::path& path() const { return path_; }
  std::string str() const { return path_.string(); }
  /// The names of the entries in the directory.
  std::set<std::string> names() const {
    std::set<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(path_)) out.insert(e.path().filename().string());
    return out;
  }

 private:
  std::filesystem::path path_;
};

/// A whole file's bytes ("" if it cannot be read).
inline std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

/// Writes w as a GGUF file with kvdecode's writer (the quantizer's keys and tensors, all
/// f32), letting `tweak` change the writer first, `keep` drop tensors by name and
/// `reshape` change a tensor's dimensions as written.
inline void write_gguf_f32(const std::string& path, std::shared_ptr<const kvd::ModelWeights<float>> w,
                           const std::function<void(kvd::GGUFWriter&)>& tweak = {},
                           const std::function<bool(const std::string&)>& keep = {},
                           const std::function<void(const std::string&, std::vector<std::uint64_t>&)>& reshape = {}) {
  kvd::GGUFWriter g;
  kvd::detail::write_model_keys(g, w->config, "kvdecode test model");
  std::vector<std::vector<float>> buffers;
  const auto sources = kvd::detail::sources_from_weights(w);
  buffers.reserve(sources.size());
  for (const kvd::detail::QuantSource& s : sources) {
    if (keep && !keep(s.name)) continue;
    std::uint64_t rows = 1;
    for (std::size_t d = 1; d < s.ne.size(); ++d) rows *= s.ne[d];
    buffers.emplace_back(static_cast<std::size_t>(rows * s.ne[0]));
    for (std::uint64_t r = 0; r < rows; ++r) s.row(r, buffers.back().data() + r * s.ne[0]);
    std::vector<std::uint64_t> ne = s.ne;
    if (reshape) reshape(s.name, ne);
    g.add_tensor_ref(s.name, kvd::WeightType::kF32, ne, buffers.back().data(), buffers.back().size() * 4);
  }
  if (tweak) tweak(g);
  g.write(path);
}

/// Loads the GGUF file and expects a FormatError whose message holds every one of `parts`.
inline void expect_gguf_load_error(const std::string& path, const std::vector<std::string>& parts) {
  try {
    kvd::load_gguf_model<float>(path);
    FAIL() << "no throw";
  } catch (const kvd::FormatError& e) {
    const std::string m = e.what();
    for (const std::string& p : parts) EXPECT_NE(m.find(p), std::string::npos) << "missing '" << p << "' in: " << m;
  }
}

/// The float32 values of a file (its size / 4 of them), as reference dumps store them.
inline std::vector<float> read_f32_file(const std::string& path) {
  std::vector<float> v(static_cast<std::size_t>(std::filesystem::file_size(path) / 4));
  std::ifstream(path, std::ios::binary).read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(v.size() * 4));
  return v;
}

/// Expects, at each position t of `got` (rows of V logits), the largest |ref(t, v) -
/// got(t, v)| within tol of that position's largest |ref(t, v)|; returns the largest
/// ratio seen. `ref` is any callable (t, v) -> double.
template <class Ref, class Rows>
double check_near(const Ref& ref, const Rows& got, int V, double tol, const std::string& what) {
  double worst = 0;
  for (long t = 0; t < got.rows(); ++t) {
    double max_abs = 0, max_err = 0;
    for (int v = 0; v < V; ++v) {
      const double r = ref(t, v);
      max_abs = std::max(max_abs, std::fabs(r));
      max_err = std::max(max_err, std::fabs(r - static_cast<double>(got(t, v))));
    }
    EXPECT_LE(max_err, tol * max_abs) << what << " position " << t;
    worst = std::max(worst, max_err / max_abs);
  }
  return worst;
}

/// The architecture tests' tiny file at `path` against the float64 oracle over `prompt`:
/// the float model with an f32 cache lands within 1e-5 of the largest logit at every
/// position. Prints the largest error.
inline void expect_near_oracle(const std::string& path, const std::vector<int>& prompt) {
  using namespace kvd;
  ASSERT_TRUE(std::filesystem::exists(path)) << path;
  ModelWeights<float> w = load_gguf_model<float>(path);
  const int V = w.config.vocab_size;
  const auto oracle = oracle_logits(w.cast<double>(), prompt);
  Transformer<float> model(std::move(w));
  KVCache<float> cache(model.config());
  const auto oracle_at = [&](long t, int v) { return oracle[static_cast<std::size_t>(t)][static_cast<std::size_t>(v)]; };
  const double vs_f64 = check_near(oracle_at, model.prefill(prompt, cache, true), V, 1e-5, "f32 cache vs float64");
  std::printf("largest error: %.3g of the largest logit against float64 (f32 cache)\n", vs_f64);
}

/// The tiny file at `path` against ik_llama.cpp's logits over `prompt` in `ref_path`
/// (tools/ik_reference.cpp steps, an f16 KV cache): kvdecode with an f16 cache lands
/// within 1e-4 of the largest logit at every position, and ik within 1e-3 of the
/// float64 oracle. Prints both largest errors.
inline void expect_near_ik(const std::string& path, const std::string& ref_path, const std::vector<int>& prompt) {
  using namespace kvd;
  ASSERT_TRUE(std::filesystem::exists(path)) << path;
  ASSERT_TRUE(std::filesystem::exists(ref_path)) << ref_path;
  const std::vector<float> ik = read_f32_file(ref_path);
  ModelWeights<float> w = load_gguf_model<float>(path);
  const int V = w.config.vocab_size;
  ASSERT_EQ(ik.size(), prompt.size() * static_cast<std::size_t>(V));
  const auto oracle = oracle_logits(w.cast<double>(), prompt);
  Transformer<float> model(std::move(w));
  KVCache<float, Eigen::half> f16_cache(model.config());
  const auto ik_at = [&](long t, int v) { return static_cast<double>(ik[static_cast<std::size_t>(t * V + v)]); };
  const double vs_ik = check_near(ik_at, model.prefill(prompt, f16_cache, true), V, 1e-4, "f16 cache vs ik_llama.cpp");
  const auto oracle_at = [&](long t, int v) { return oracle[static_cast<std::size_t>(t)][static_cast<std::size_t>(v)]; };
  const RowMatrix<float> ik_rows = Eigen::Map<const RowMatrix<float>>(ik.data(), static_cast<long>(prompt.size()), V);
  const double ik_f64 = check_near(oracle_at, ik_rows, V, 1e-3, "ik_llama.cpp vs float64");
  std::printf("largest error: %.3g of the largest logit against ik_llama.cpp (f16 cache); ik_llama.cpp against "
              "float64 %.3g\n", vs_ik, ik_f64);
}

/// A model with local layers (swa_pattern > 0) over `tokens` (longer than its local
/// rings: at least local_window + 64 + 32): the default KVCache keeps a ring per
/// local layer (local_window + 64 positions, in blocks) and every position in the
/// global ones, so it takes fewer bytes than a cache keeping every position
/// (LocalLayers::kEveryPosition), exactly the bytes the planner counts. The prompt
/// wraps the rings; a rewind the rings still hold decodes on to the reference's bits,
/// one they do not throws CacheFullError with the cache unchanged, while the full
/// cache rewinds anywhere. A cache file refuses the wrapped ring (ArgumentError,
/// nothing written), saves a short ring or the full cache, and either file restores
/// into a ring (wrapping it as it goes) that decodes on to the same bits.
inline void expect_local_rings(const kvd::ModelWeights<float>& w, const std::vector<int>& tokens) {
  using namespace kvd;
  const ModelConfig c = w.config;
  const int n = static_cast<int>(tokens.size()), V = c.vocab_size, L = c.n_layers;
  ASSERT_GT(c.swa_pattern, 0);
  ASSERT_EQ(c.max_seq_len % 16, 0);
  ASSERT_GE(n, c.local_window + 64 + 32) << "the prompt must wrap the rings";
  ASSERT_LE(n, c.max_seq_len);
  // Bytes: per layer, the ring's positions or the capacity's.
  KVCache<float> ring(c), full(c, 0, 0, LocalLayers::kEveryPosition);
  const std::uint64_t per_position = full.bytes_reserved() / (static_cast<std::uint64_t>(L) * c.max_seq_len);
  std::uint64_t positions = 0;
  int local = 0;
  for (int l = 0; l < L; ++l) {
    const int kept = c.layer_local(l) ? detail::window_ring_blocks(c.local_window, 64, c.max_seq_len, 16) * 16 : c.max_seq_len;
    EXPECT_EQ(ring.stored_positions(l), kept) << "layer " << l;
    EXPECT_EQ(full.stored_positions(l), c.max_seq_len) << "layer " << l;
    EXPECT_EQ(ring.layer_window(l), c.layer_window(l)) << "layer " << l;
    positions += static_cast<std::uint64_t>(kept);
    local += c.layer_local(l) ? 1 : 0;
  }
  ASSERT_GT(local, 0);
  EXPECT_LT(ring.bytes_reserved(), full.bytes_reserved());
  EXPECT_EQ(ring.bytes_reserved(), per_position * positions);
  PlanInput in = plan_input_for(c, DType::kF32);
  in.memory_gb = 1;
  EXPECT_EQ(in.window_layers, local);
  EXPECT_EQ(plan_memory(in).bytes_per_sequence, ring.bytes_reserved());
  in.window_layers = 0;
  EXPECT_EQ(plan_memory(in).bytes_per_sequence, full.bytes_reserved());

  Transformer<float> model(w);
  const RowMatrix<float> ref = model.forward_reference(tokens);
  auto decode_on = [&](KVCache<float>& cache, const std::string& what) {
    for (int t = cache.length(); t < n; ++t) {
      const RowMatrix<float> d = model.decode_step(tokens[t], cache);
      ASSERT_TRUE(same_bits(d.data(), ref.row(t).data(), V)) << what << " position " << t << ": "
                                                             << first_difference(d.data(), ref.row(t).data(), V);
    }
  };
  model.prefill(tokens, ring);
  model.prefill(tokens, full);
  const int oldest = ring.oldest_resident();
  EXPECT_GT(oldest, 0) << "the rings did not wrap";
  EXPECT_EQ(full.bytes_used(), full.bytes_per_token() * static_cast<std::uint64_t>(n));
  EXPECT_EQ(ring.bytes_used(), full.bytes_per_token() / L * static_cast<std::uint64_t>((L - local) * n + local * (n - oldest)));
  EXPECT_EQ(full.oldest_resident(), 0);
  // The longest rewind the rings refuse: the window of length `bad` starts before `oldest`.
  const int bad = oldest + c.local_window - 2;
  ASSERT_LT(detail::first_visible(bad, c.local_window), oldest);
  EXPECT_THROW(ring.truncate(bad), CacheFullError);
  EXPECT_EQ(ring.length(), n);
  {  // a save of the wrapped ring: refused, nothing written
    TempDir dir;
    EXPECT_THROW(save_cache(ring, dir.file("ring.kvc")), ArgumentError);
    EXPECT_TRUE(dir.names().empty());
    save_cache(full, dir.file("full.kvc"));
    KVCache<float> back(c);
    restore_cache(dir.file("full.kvc"), back);
    EXPECT_EQ(back.oldest_resident(), oldest);  // the restore wrapped the rings as the prefill did
    back.truncate(n - 10);
    decode_on(back, "restored from a full cache, rewound");
    KVCache<float> short_ring(c);
    model.prefill(std::vector<int>(tokens.begin(), tokens.begin() + c.local_window + 20), short_ring);
    ASSERT_EQ(short_ring.oldest_resident(), 0);
    save_cache(short_ring, dir.file("short.kvc"));
    KVCache<float> loaded = load_cache<float>(dir.file("short.kvc"), c);
    decode_on(loaded, "restored from a short ring");
  }
  ring.truncate(bad + 1);  // the oldest rewind the rings hold
  decode_on(ring, "rewound ring");
  full.truncate(bad);
  decode_on(full, "rewound full cache");
  full.truncate(1);
  decode_on(full, "full cache rewound to 1");
}

/// Loading the Hugging Face folder `dir` throws a kvd::FormatError whose message holds `part`.
inline void expect_hf_error(const std::filesystem::path& dir, const std::string& part) {
  try {
    kvd::load_hf_model<float>(dir.string());
    FAIL() << "no throw";
  } catch (const kvd::FormatError& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

}  // namespace kvd_test
