// Writes the seed corpora of the fuzz targets with kvdecode's own writers:
//   kvdecode-fuzz-make-corpus <dir>   ->  <dir>/<target>/<seed>
// Small valid files of each format and nearly valid ones (truncated, one field
// off), so that every target starts past its magic and its first checks.
// No file from ../shared is copied: the formats are written from scratch here.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "kvdecode/weights/blocks.hpp"
#include "kvdecode/kvdecode.hpp"

namespace fs = std::filesystem;
using Bytes = std::vector<unsigned char>;

namespace {

fs::path g_root;

Bytes read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void put(const std::string& target, const std::string& name, const Bytes& b) {
  const fs::path dir = g_root / target;
  fs::create_directories(dir);
  std::ofstream out(dir / name, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  if (!out) throw std::runtime_error("cannot write " + (dir / name).string());
}

Bytes truncated(Bytes b, std::size_t n) {
  b.resize(b.size() > n ? b.size() - n : 0);
  return b;
}

// `depth` nested JSON arrays around 1: deeper than kvd::kMaxJsonDepth (128) for the
// seeds of deep nesting, which must end in a FormatError, never a stack overflow.
std::string nested_json(int depth) {
  return std::string(static_cast<std::size_t>(depth), '[') + "1" + std::string(static_cast<std::size_t>(depth), ']');
}

// A cache file (whole, or embedded at `at` in a prompt cache) whose first V element is
// NaN, with the cache file's checksum made right again: only the finiteness check refuses it.
Bytes with_nan_element(Bytes b, std::size_t at, std::size_t v_offset) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(b.data() + at + 64 + v_offset, &nan, 4);
  kvd::detail::store_u64_le(b.data() + b.size() - 8, kvd::detail::fnv1a64(b.data() + at, b.size() - 8 - at));
  return b;
}

kvd::ModelConfig tiny(bool shared, int n_kv_heads = 2) {
  kvd::ModelConfig c;
  c.vocab_size = 16; c.d_model = 8; c.n_layers = 1; c.n_heads = 2; c.n_kv_heads = n_kv_heads; c.head_dim = 4;
  c.hidden_dim = 12; c.max_seq_len = 8; c.shared_classifier = shared;
  return c;
}

void checkpoints(const fs::path& tmp) {
  int i = 0;
  for (auto fmt : {kvd::CheckpointFormat::kLlama2cLegacy, kvd::CheckpointFormat::kLlama2cV1})
    for (bool shared : {true, false})
      for (int hk : {2, 1}) {
        const auto w = kvd::ModelWeights<float>::random(tiny(shared, hk), 11 + i);
        const fs::path p = tmp / "ckpt.bin";
        kvd::save_checkpoint(w, p.string(), fmt);
        const Bytes b = read_all(p);
        const std::string name = std::string(fmt == kvd::CheckpointFormat::kLlama2cV1 ? "v1" : "legacy") +
                                 (shared ? "-shared" : "-separate") + (hk == 1 ? "-mqa" : "-mha");
        put("checkpoint", name, b);
        if (i == 0) {
          put("checkpoint", name + "-truncated", truncated(b, 4));
          Bytes longer = b;
          longer.insert(longer.end(), {0, 0, 0, 0});
          put("checkpoint", name + "-extra", longer);
        }
        if (i == 4) {
          put("checkpoint", name + "-header-only", Bytes(b.begin(), b.begin() + 256));
          Bytes bad = b;
          bad[4] = 2;  // version 2
          put("checkpoint", name + "-version2", bad);
        }
        ++i;
      }
}

// llama2.c tokenizer.bin: i32 max_token_length, then per piece f32 score, i32 length, bytes.
void tokenizers() {
  std::vector<std::string> pieces = {"<unk>", "\n<s>\n", "\n</s>\n"};
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    pieces.push_back(buf);
  }
  for (const char* p : {" ", "e", "l", "o", "H", "w", "r", "d", "ll", "He", "llo", "Hello", " w", " wor", " world",
                        "or", "ld", "!", "\xC3\xA9", "caf", "\xE4\xB8\xAD", " 1", "2", "3", "45"})
    pieces.push_back(p);
  auto write = [&](const std::vector<std::string>& ps, int max_len) {
    Bytes b(4);
    kvd::detail::store_i32_le(b.data(), max_len);
    for (std::size_t i = 0; i < ps.size(); ++i) {
      const std::size_t at = b.size();
      b.resize(at + 8 + ps[i].size());
      const float score = i < 259 ? 0.0f : -static_cast<float>(ps.size() - i);
      std::memcpy(b.data() + at, &score, 4);
      kvd::detail::store_i32_le(b.data() + at + 4, static_cast<std::int32_t>(ps[i].size()));
      std::memcpy(b.data() + at + 8, ps[i].data(), ps[i].size());
    }
    return b;
  };
  const Bytes full = write(pieces, 6);
  put("tokenizer-bin", "bytes-and-merges", full);
  put("tokenizer-bin", "three-pieces", write({"<unk>", "<s>", "</s>"}, 5));
  put("tokenizer-bin", "truncated", truncated(full, 3));
  Bytes neg = write({"<unk>", "<s>", "</s>", "a"}, 5);
  kvd::detail::store_i32_le(neg.data() + 4 + (8 + 5) + (8 + 3) + (8 + 4) + 4, -1);  // length of piece 3 ("a")
  put("tokenizer-bin", "negative-length", neg);
}

template <class S, class SV = S>
void cache_file(const fs::path& tmp, const std::string& name, kvd::ModelConfig c, int length, int capacity) {
  kvd::KVCache<float, S, SV> cache(c, capacity);
  std::vector<float> k(static_cast<std::size_t>(c.n_layers) * c.kv_dim()), v(k.size());
  for (int pos = 0; pos < length; ++pos) {
    for (std::size_t i = 0; i < k.size(); ++i) { k[i] = 0.25f * pos + 0.01f * i; v[i] = -k[i]; }
    cache.append(k.data(), v.data());
  }
  const fs::path p = tmp / "cache.kvdc";
  kvd::save_cache(cache, p.string(), kvd::config_fingerprint(c));
  put("cache-file", name, read_all(p));
}

void cache_files(const fs::path& tmp) {
  kvd::ModelConfig c = tiny(true);
  cache_file<float>(tmp, "f32-3of8", c, 3, 8);
  // The same file with a NaN V element (f32, 1 layer x 2 kv heads x 4: V starts 8 elements in).
  put("cache-file", "f32-3of8-nan", with_nan_element(read_all(tmp / "cache.kvdc"), 0, 8 * 4));
  cache_file<float>(tmp, "f32-empty", c, 0, 8);
  cache_file<double>(tmp, "f64-2of4", c, 2, 4);
  cache_file<Eigen::bfloat16>(tmp, "bf16-5of8", c, 5, 8);
  cache_file<Eigen::half>(tmp, "f16-1of1", c, 1, 1);
  c.sliding_window = 3;
  c.max_seq_len = 40;
  cache_file<float>(tmp, "f32-window3-20of40", c, 20, 40);
  Bytes b = read_all(tmp / "cache.kvdc");
  put("cache-file", "window-truncated", truncated(b, 9));
  // Version 3: q8_0 / q4_0 blocks (head_dim 32: one block per head row), and K and V of different types.
  c = tiny(true);
  c.head_dim = 32;
  cache_file<kvd::CacheQ8_0>(tmp, "q8_0-3of8", c, 3, 8);
  Bytes bad_scale = read_all(tmp / "cache.kvdc");
  bad_scale[64] = 0x00;  // the first K block's f16 scale: +inf
  bad_scale[65] = 0x7C;
  put("cache-file", "q8_0-3of8-inf-scale", bad_scale);
  cache_file<kvd::CacheQ4_0>(tmp, "q4_0-2of4", c, 2, 4);
  cache_file<kvd::CacheQ8_0, Eigen::half>(tmp, "q8_0-keys-f16-values-3of8", c, 3, 8);
  cache_file<kvd::CacheQ4_0, kvd::CacheQ8_0>(tmp, "q4_0-keys-q8_0-values-1of1", c, 1, 1);
  c.sliding_window = 3;
  c.max_seq_len = 40;
  cache_file<kvd::CacheQ4_0>(tmp, "q4_0-window3-20of40", c, 20, 40);
  // Rotated heads (header byte 38): q4_0 keys rotated, and one plain type rotated (version 3 too).
  c = tiny(true);
  c.head_dim = 32;
  c.kv_rotation = kvd::KVRotation::kKeys;
  cache_file<kvd::CacheQ4_0>(tmp, "q4_0-rotated-k-2of4", c, 2, 4);
  c.kv_rotation = kvd::KVRotation::kKeysValues;
  cache_file<Eigen::half>(tmp, "f16-rotated-kv-3of8", c, 3, 8);
}

template <class S, class SV = S>
void prompt_cache_file(const fs::path& tmp, const std::string& name, kvd::ModelConfig c, int length, int capacity,
                       bool paged = false) {
  std::vector<float> k(static_cast<std::size_t>(c.n_layers) * c.kv_dim()), v(k.size());
  std::vector<int> tokens;
  auto fill = [&](auto& cache) {
    for (int pos = 0; pos < length; ++pos) {
      for (std::size_t i = 0; i < k.size(); ++i) { k[i] = 0.5f * pos - 0.02f * i; v[i] = 1 - k[i]; }
      cache.check_room(1);
      cache.prepare_append(1);
      for (int l = 0; l < c.n_layers; ++l) cache.write(l, pos, k.data() + l * c.kv_dim(), v.data() + l * c.kv_dim());
      cache.commit_append(1);
      tokens.push_back((pos * 7 + 1) % c.vocab_size);
    }
  };
  const fs::path p = tmp / "prompt.kvdp";
  if (paged) {
    kvd::BlockPool<float, S, SV> pool(c, c.max_seq_len / 16 + 2, 16);
    kvd::PagedSequence<float, S, SV> seq(pool);
    fill(seq);
    kvd::save_prompt_cache(seq, tokens, c.vocab_size, p.string(), kvd::config_fingerprint(c));
  } else {
    kvd::KVCache<float, S, SV> cache(c, capacity);
    fill(cache);
    kvd::save_prompt_cache(cache, tokens, c.vocab_size, p.string(), kvd::config_fingerprint(c));
  }
  put("prompt-cache", name, read_all(p));
}

void prompt_cache_files(const fs::path& tmp) {
  kvd::ModelConfig c = tiny(true);
  prompt_cache_file<float>(tmp, "f32-3of8", c, 3, 8);
  put("prompt-cache", "f32-3of8-nan", with_nan_element(read_all(tmp / "prompt.kvdp"), 40 + 4 * 3, 8 * 4));
  prompt_cache_file<float>(tmp, "f32-empty", c, 0, 8);
  prompt_cache_file<double>(tmp, "f64-2of4", c, 2, 4);
  prompt_cache_file<Eigen::bfloat16>(tmp, "bf16-5of8", c, 5, 8);
  prompt_cache_file<Eigen::half>(tmp, "f16-1of1", c, 1, 1);
  c.max_seq_len = 32;
  prompt_cache_file<float>(tmp, "paged-f32-20of32", c, 20, 0, true);
  c.sliding_window = 3;
  c.max_seq_len = 40;
  prompt_cache_file<float>(tmp, "f32-window3-20of40", c, 20, 40);
  prompt_cache_file<float>(tmp, "paged-window3-20of40", c, 20, 0, true);
  Bytes b = read_all(tmp / "prompt.kvdp");
  put("prompt-cache", "window-truncated", truncated(b, 9));
  // Version 3 cache files inside: q8_0 / q4_0 blocks, K and V of different types.
  c = tiny(true);
  c.head_dim = 32;
  prompt_cache_file<kvd::CacheQ8_0>(tmp, "q8_0-3of8", c, 3, 8);
  prompt_cache_file<kvd::CacheQ4_0, Eigen::half>(tmp, "q4_0-keys-f16-values-2of4", c, 2, 4);
  c.max_seq_len = 32;
  prompt_cache_file<kvd::CacheQ8_0, kvd::CacheQ4_0>(tmp, "paged-q8_0-keys-q4_0-values-20of32", c, 20, 0, true);
  // Rotated heads inside (the cache file's header byte 38).
  c.kv_rotation = kvd::KVRotation::kKeysValues;
  prompt_cache_file<kvd::CacheQ8_0>(tmp, "q8_0-rotated-kv-3of8", c, 3, 8);
}

void ggufs() {
  // Every metadata type, and tensors of several weight types.
  kvd::GGUFWriter w;
  w.set_string("general.architecture", "llama");
  w.set_string("general.name", "fuzz seed");
  w.set_u32("general.alignment", 32);
  w.set_u8("u8", 7);
  w.set_i32("i32", -5);
  w.set_u64("u64", 1ull << 40);
  w.set_i64("i64", -(1ll << 40));
  w.set_f32("f32", 1.5f);
  w.set_f64("f64", -2.25);
  w.set_bool("bool", true);
  w.set_string_array("strings", {"a", "", "\xE4\xB8\xAD"});
  w.set_f32_array("floats", {0.5f, -1.0f});
  w.set_i32_array("ints", {1, -2, 3});
  w.set_u32_array("uints", {4, 5});
  std::vector<float> x(256);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = 0.01f * static_cast<float>(i) - 1.0f;
  for (auto t : {kvd::WeightType::kF32, kvd::WeightType::kF16, kvd::WeightType::kBF16, kvd::WeightType::kQ8_0,
                 kvd::WeightType::kQ4_0, kvd::WeightType::kQ5_1, kvd::WeightType::kQ4_K, kvd::WeightType::kQ6_K}) {
    const std::uint64_t n = 256, bytes = kvd::weight_row_bytes(t, n);
    Bytes q(bytes);
    kvd::detail::quantize_row(t, x.data(), q.data(), static_cast<std::int64_t>(n));
    w.add_tensor(std::string("t.") + kvd::weight_type_name(t), t, {n}, q.data(), bytes);
  }
  std::vector<float> m(32 * 2 * 3);
  w.add_tensor("t.3d", kvd::WeightType::kF32, {32, 2, 3}, m.data(), m.size() * 4);
  const Bytes all = w.bytes();
  put("gguf", "every-type", all);
  put("gguf", "every-type-truncated", truncated(all, 100));
  kvd::GGUFWriter e;
  put("gguf", "empty", e.bytes());
  Bytes v2 = e.bytes();
  v2[4] = 2;
  put("gguf", "empty-v2", v2);
}

// safetensors: u64 header length, a JSON header padded with spaces to 8 bytes, the data.
Bytes safetensors_file(const std::string& json_body, const Bytes& data) {
  std::string h = json_body;
  while (h.size() % 8 != 0) h += ' ';
  Bytes b(8);
  kvd::detail::store_u64_le(b.data(), h.size());
  b.insert(b.end(), h.begin(), h.end());
  b.insert(b.end(), data.begin(), data.end());
  return b;
}

void safetensors() {
  Bytes data(24 + 8 + 8);
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<unsigned char>(i * 37 + 11);
  const std::string three =
      R"({"__metadata__":{"format":"pt"},"model.embed_tokens.weight":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},)"
      R"("model.norm.weight":{"dtype":"BF16","shape":[4],"data_offsets":[24,32]},)"
      R"("lm_head.weight":{"dtype":"F16","shape":[2,2],"data_offsets":[32,40]}})";
  put("safetensors", "three-tensors", safetensors_file(three, data));
  put("safetensors", "empty", safetensors_file("{}", {}));
  put("safetensors", "scalar", safetensors_file(R"({"s":{"dtype":"F32","shape":[],"data_offsets":[0,4]}})", Bytes(4, 0)));
  put("safetensors", "overlapping",
      safetensors_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                       Bytes(12, 0)));
  put("safetensors", "shape-disagrees", safetensors_file(R"({"a":{"dtype":"F16","shape":[3,3],"data_offsets":[0,16]}})", Bytes(16, 0)));
  put("safetensors", "unsupported-dtype", safetensors_file(R"({"a":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})", Bytes(8, 0)));
  put("safetensors", "truncated", truncated(safetensors_file(three, data), 5));
  // Deep nesting: past the limit (a FormatError while parsing), and within it where a
  // dimension belongs (named by its type, never dumped).
  put("safetensors", "deep-metadata",
      safetensors_file(R"({"__metadata__":{"format":)" + nested_json(200) + R"(},"s":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
                       Bytes(4, 0)));
  put("safetensors", "nested-shape",
      safetensors_file(R"({"s":{"dtype":"F32","shape":[1,)" + nested_json(100) + R"(],"data_offsets":[0,4]}})", Bytes(4, 0)));
}

// hf-folder: config.json \0 generation_config.json \0 model.safetensors of a tiny
// model (d 8, 1 layer, 2 heads of 4, 1 KV head, hidden 12, vocab 16) with every
// tensor config.json asks for, in F32 or BF16; qwen2 adds q/k/v biases, qwen3 q/k norms.
Bytes hf_folder(const std::string& arch, const std::string& dtype, bool tied, const std::string& extra = "") {
  const int d = 8, dh = 4, H = 2, KV = 1, ff = 12, V = 16;
  const std::string config = R"({"architectures":[")" + arch + R"("],"hidden_size":8,"intermediate_size":12,)"
      R"("num_hidden_layers":1,"num_attention_heads":2,"num_key_value_heads":1,"vocab_size":16,)"
      R"("max_position_embeddings":64,"rms_norm_eps":1e-5,"rope_theta":10000.0,"tie_word_embeddings":)" +
      std::string(tied ? "true" : "false") + extra + "}";
  const std::string gen = R"({"bos_token_id":1,"eos_token_id":[2,3]})";
  const std::size_t es = dtype == "F32" ? 4 : 2;
  std::string header = "{";
  std::size_t off = 0;
  auto t = [&](const std::string& name, std::vector<int> shape) {
    std::size_t n = 1;
    std::string sh;
    for (int x : shape) n *= static_cast<std::size_t>(x), sh += (sh.empty() ? "" : ",") + std::to_string(x);
    header += (off ? "," : "") + std::string("\"") + name + R"(":{"dtype":")" + dtype + R"(","shape":[)" + sh +
              R"(],"data_offsets":[)" + std::to_string(off) + "," + std::to_string(off + n * es) + "]}";
    off += n * es;
  };
  const bool qwen2 = arch == "Qwen2ForCausalLM", qwen3 = arch == "Qwen3ForCausalLM";
  t("model.embed_tokens.weight", {V, d});
  t("model.norm.weight", {d});
  if (!tied) t("lm_head.weight", {V, d});
  const std::string l = "model.layers.0.";
  t(l + "input_layernorm.weight", {d});
  t(l + "post_attention_layernorm.weight", {d});
  t(l + "self_attn.q_proj.weight", {H * dh, d});
  t(l + "self_attn.k_proj.weight", {KV * dh, d});
  t(l + "self_attn.v_proj.weight", {KV * dh, d});
  t(l + "self_attn.o_proj.weight", {d, H * dh});
  if (qwen2) {
    t(l + "self_attn.q_proj.bias", {H * dh});
    t(l + "self_attn.k_proj.bias", {KV * dh});
    t(l + "self_attn.v_proj.bias", {KV * dh});
  }
  if (qwen3) {
    t(l + "self_attn.q_norm.weight", {dh});
    t(l + "self_attn.k_norm.weight", {dh});
  }
  t(l + "mlp.gate_proj.weight", {ff, d});
  t(l + "mlp.up_proj.weight", {ff, d});
  t(l + "mlp.down_proj.weight", {d, ff});
  header += "}";
  Bytes values(off);
  for (std::size_t i = 0; i < off; i += es) {  // small values: F32 1/64 steps, BF16 the top half of the same floats
    const float f = static_cast<float>(static_cast<int>(i / es % 13) - 6) / 64.f;
    std::uint32_t b;
    std::memcpy(&b, &f, 4);
    if (es == 4) kvd::detail::store_u32_le(values.data() + i, b);
    else values[i] = static_cast<unsigned char>(b >> 16), values[i + 1] = static_cast<unsigned char>(b >> 24);
  }
  Bytes out(config.begin(), config.end());
  out.push_back(0);
  out.insert(out.end(), gen.begin(), gen.end());
  out.push_back(0);
  const Bytes st = safetensors_file(header, values);
  out.insert(out.end(), st.begin(), st.end());
  return out;
}

// hf-folder: a tiny GptOssForCausalLM folder (d 32, 1 layer, 4 heads of 8, 2 KV heads,
// 2 experts of width 32, top-1, a window of 4, YaRN): sinks, biases, the router and the
// fused experts [E, in, out] in F32, or (mxfp4) as MXFP4 blocks and scales [E, out, ...].
Bytes hf_gpt_oss_folder(bool mxfp4) {
  const int d = 32, dh = 8, H = 4, KV = 2, ff = 32, V = 16, E = 2;
  const std::string config = R"({"architectures":["GptOssForCausalLM"],"model_type":"gpt_oss","hidden_size":32,)"
      R"("intermediate_size":32,"num_hidden_layers":1,"num_attention_heads":4,"num_key_value_heads":2,"head_dim":8,)"
      R"("num_local_experts":2,"num_experts_per_tok":1,"vocab_size":16,"max_position_embeddings":64,)"
      R"("rms_norm_eps":1e-5,"rope_theta":150000.0,"sliding_window":4,"layer_types":["sliding_attention"],)"
      R"("rope_scaling":{"rope_type":"yarn","factor":4.0,"beta_fast":32.0,"beta_slow":1.0,)"
      R"("original_max_position_embeddings":16,"truncate":false},"swiglu_limit":7.0,"attention_bias":true,)"
      R"("tie_word_embeddings":false})";
  const std::string gen = R"({"eos_token_id":2})";
  std::string header = "{";
  Bytes values;
  auto t = [&](const std::string& name, std::vector<int> shape, bool bytes = false) {
    std::size_t n = 1;
    std::string sh;
    for (int x : shape) n *= static_cast<std::size_t>(x), sh += (sh.empty() ? "" : ",") + std::to_string(x);
    const std::size_t off = values.size(), es = bytes ? 1 : 4;
    header += (off ? "," : "") + std::string("\"") + name + R"(":{"dtype":")" + (bytes ? "U8" : "F32") +
              R"(","shape":[)" + sh + R"(],"data_offsets":[)" + std::to_string(off) + "," + std::to_string(off + n * es) + "]}";
    values.resize(off + n * es);
    for (std::size_t i = 0; i < n; ++i) {
      if (bytes) {  // scales near 2^0 (e8m0 124..127), nibbles of every code
        values[off + i] = static_cast<unsigned char>(name.find("_scales") != std::string::npos ? 124 + i % 4 : i * 37 % 256);
        continue;
      }
      const float f = static_cast<float>(static_cast<int>(i % 13) - 6) / 64.f;
      std::uint32_t b;
      std::memcpy(&b, &f, 4);
      kvd::detail::store_u32_le(values.data() + off + i * 4, b);
    }
  };
  t("model.embed_tokens.weight", {V, d});
  t("model.norm.weight", {d});
  t("lm_head.weight", {V, d});
  const std::string l = "model.layers.0.";
  t(l + "input_layernorm.weight", {d});
  t(l + "post_attention_layernorm.weight", {d});
  t(l + "self_attn.q_proj.weight", {H * dh, d});
  t(l + "self_attn.k_proj.weight", {KV * dh, d});
  t(l + "self_attn.v_proj.weight", {KV * dh, d});
  t(l + "self_attn.o_proj.weight", {d, H * dh});
  t(l + "self_attn.q_proj.bias", {H * dh});
  t(l + "self_attn.k_proj.bias", {KV * dh});
  t(l + "self_attn.v_proj.bias", {KV * dh});
  t(l + "self_attn.o_proj.bias", {d});
  t(l + "self_attn.sinks", {H});
  t(l + "mlp.router.weight", {E, d});
  t(l + "mlp.router.bias", {E});
  if (mxfp4) {
    t(l + "mlp.experts.gate_up_proj_blocks", {E, 2 * ff, d / 32, 16}, true);
    t(l + "mlp.experts.gate_up_proj_scales", {E, 2 * ff, d / 32}, true);
    t(l + "mlp.experts.down_proj_blocks", {E, d, ff / 32, 16}, true);
    t(l + "mlp.experts.down_proj_scales", {E, d, ff / 32}, true);
  } else {
    t(l + "mlp.experts.gate_up_proj", {E, d, 2 * ff});
    t(l + "mlp.experts.down_proj", {E, ff, d});
  }
  t(l + "mlp.experts.gate_up_proj_bias", {E, 2 * ff});
  t(l + "mlp.experts.down_proj_bias", {E, d});
  header += "}";
  Bytes out(config.begin(), config.end());
  out.push_back(0);
  out.insert(out.end(), gen.begin(), gen.end());
  out.push_back(0);
  const Bytes st = safetensors_file(header, values);
  out.insert(out.end(), st.begin(), st.end());
  return out;
}

void hf_folders() {
  put("hf-folder", "gpt-oss-f32", hf_gpt_oss_folder(false));
  put("hf-folder", "gpt-oss-mxfp4", hf_gpt_oss_folder(true));
  put("hf-folder", "llama-f32", hf_folder("LlamaForCausalLM", "F32", true));
  put("hf-folder", "llama-bf16-untied", hf_folder("LlamaForCausalLM", "BF16", false));
  put("hf-folder", "mistral-window", hf_folder("MistralForCausalLM", "F16", true, R"(,"sliding_window":4)"));
  put("hf-folder", "qwen2-bias", hf_folder("Qwen2ForCausalLM", "F32", true));
  put("hf-folder", "qwen3-norms", hf_folder("Qwen3ForCausalLM", "BF16", true, R"(,"head_dim":4)"));
  put("hf-folder", "llama3-rope", hf_folder("LlamaForCausalLM", "F32", true,
      R"(,"rope_scaling":{"rope_type":"llama3","factor":8.0,"low_freq_factor":1.0,"high_freq_factor":4.0,"original_max_position_embeddings":16})"));
  put("hf-folder", "truncated", truncated(hf_folder("LlamaForCausalLM", "F32", true), 9));
  // Deep nesting in config.json (past the limit, and within it where a number belongs)
  // and in generation_config.json's eos_token_id.
  put("hf-folder", "deep-rope-scaling", hf_folder("LlamaForCausalLM", "F32", true, R"(,"rope_scaling":)" + nested_json(200)));
  put("hf-folder", "nested-rope-theta", hf_folder("LlamaForCausalLM", "F32", true, R"(,"rope_theta":)" + nested_json(100)));
  const Bytes plain = hf_folder("LlamaForCausalLM", "F32", true);
  std::string deep_eos(plain.begin(), plain.end());
  deep_eos.replace(deep_eos.find(R"("eos_token_id":[2,3])"), 20, R"("eos_token_id":[2,)" + nested_json(200) + "]");
  put("hf-folder", "deep-eos", Bytes(deep_eos.begin(), deep_eos.end()));
}

// tokenizer.json: a byte-level BPE (GPT-2 style) and a SentencePiece-style BPE with byte fallback.
void tokenizer_jsons() {
  const std::string byte_level = R"({"version":"1.0","added_tokens":[{"id":6,"content":"<|endoftext|>","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true}],
"normalizer":null,
"pre_tokenizer":{"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":"'s|'t| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"},"behavior":"Isolated","invert":false},{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":false}]},
"post_processor":{"type":"ByteLevel","add_prefix_space":true,"trim_offsets":false,"use_regex":true},
"decoder":{"type":"ByteLevel","add_prefix_space":true,"trim_offsets":true,"use_regex":true},
"model":{"type":"BPE","dropout":null,"unk_token":null,"continuing_subword_prefix":null,"end_of_word_suffix":null,"fuse_unk":false,"byte_fallback":false,"ignore_merges":false,
"vocab":{"H":0,"e":1,"l":2,"o":3,"\u0120":4,"He":5,"<|endoftext|>":6,"ll":7,"Hell":8,"Hello":9,"w":10,"\u0120w":11},
"merges":["H e","l l","He ll","Hell o","\u0120 w"]}})";
  put("tokenizer-json", "byte-level-bpe", Bytes(byte_level.begin(), byte_level.end()));
  // The same with ByteLevel's own GPT-2 split, a pre-tokenizer GGUF names ("gpt-2"),
  // so the GGUF vocabulary writer (vocab_writer.hpp) converts it.
  std::string gpt2 = byte_level;
  const std::size_t pre_at = gpt2.find("\"pre_tokenizer\":"), pre_end = gpt2.find("\n\"post_processor\"");
  gpt2.replace(pre_at, pre_end - pre_at,
               R"("pre_tokenizer":{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":true},)");
  put("tokenizer-json", "byte-level-gpt2", Bytes(gpt2.begin(), gpt2.end()));
  std::string spm = R"({"version":"1.0","added_tokens":[{"id":0,"content":"<unk>","special":true},{"id":1,"content":"<s>","special":true},{"id":2,"content":"</s>","special":true}],
"normalizer":{"type":"Sequence","normalizers":[{"type":"Prepend","prepend":"\u2581"},{"type":"Replace","pattern":{"String":" "},"content":"\u2581"}]},
"pre_tokenizer":null,
"post_processor":{"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"<s>","type_id":0}},{"Sequence":{"id":"A","type_id":0}}],"pair":[],"special_tokens":{"<s>":{"id":"<s>","ids":[1],"tokens":["<s>"]}}},
"decoder":{"type":"Sequence","decoders":[{"type":"Replace","pattern":{"String":"\u2581"},"content":" "},{"type":"ByteFallback"},{"type":"Fuse"},{"type":"Strip","content":" ","start":1,"stop":0}]},
"model":{"type":"BPE","dropout":null,"unk_token":"<unk>","continuing_subword_prefix":null,"end_of_word_suffix":null,"fuse_unk":true,"byte_fallback":true,"ignore_merges":false,
"vocab":{"<unk>":0,"<s>":1,"</s>":2)";
  int id = 3;
  for (int b = 0; b < 256; ++b) {
    char buf[16];
    std::snprintf(buf, sizeof buf, ",\"<0x%02X>\":%d", b, id++);
    spm += buf;
  }
  const char* pieces[] = {"\u2581", "H", "e", "l", "o", "w", "r", "d", "He", "ll", "llo", "Hello", "\u2581Hello", "\u2581w", "or", "ld", "\u2581wor", "\u2581world"};
  for (const char* p : pieces) spm += std::string(",\"") + p + "\":" + std::to_string(id++);
  spm += R"(},"merges":["H e","l l","ll o","He llo","\u2581 Hello","\u2581 w","o r","l d","\u2581w or","\u2581wor ld"]}})";
  put("tokenizer-json", "spm-byte-fallback", Bytes(spm.begin(), spm.end()));
  const std::string tiny = R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]}})";
  put("tokenizer-json", "tiny", Bytes(tiny.begin(), tiny.end()));
  const std::string bad_merge = R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a c"]}})";
  put("tokenizer-json", "merge-names-unknown-token", Bytes(bad_merge.begin(), bad_merge.end()));
  put("tokenizer-json", "truncated", truncated(Bytes(byte_level.begin(), byte_level.end()), 40));
  // Deep nesting in added_tokens (past the limit: a FormatError while parsing).
  std::string deep = byte_level;
  deep.replace(deep.find("\"added_tokens\":["), 16, "\"added_tokens\":[" + nested_json(200) + ",");
  put("tokenizer-json", "deep-added-tokens", Bytes(deep.begin(), deep.end()));
}

// A GGUF holding only a vocabulary, as llama.cpp's vocab files do: SentencePiece
// ("llama") and byte-level BPE ("gpt2").
void gguf_vocabs() {
  {
    kvd::GGUFWriter w;
    w.set_string("general.architecture", "llama");
    w.set_string("tokenizer.ggml.model", "llama");
    std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
    std::vector<float> scores = {0, 0, 0};
    std::vector<std::int32_t> types = {2, 3, 3};
    for (int b = 0; b < 256; ++b) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "<0x%02X>", b);
      tokens.push_back(buf); scores.push_back(0); types.push_back(6);
    }
    const char* pieces[] = {"\u2581", "H", "e", "l", "o", "\u2581H", "ll", "\u2581He", "llo", "\u2581Hello"};
    float sc = -1;
    for (const char* p : pieces) { tokens.push_back(p); scores.push_back(sc); sc -= 1; types.push_back(1); }
    w.set_string_array("tokenizer.ggml.tokens", tokens);
    w.set_f32_array("tokenizer.ggml.scores", scores);
    w.set_i32_array("tokenizer.ggml.token_type", types);
    w.set_u32("tokenizer.ggml.bos_token_id", 1);
    w.set_u32("tokenizer.ggml.eos_token_id", 2);
    w.set_u32("tokenizer.ggml.unknown_token_id", 0);
    w.set_bool("tokenizer.ggml.add_bos_token", true);
    put("gguf", "vocab-spm", w.bytes());
  }
  {
    kvd::GGUFWriter w;
    w.set_string("general.architecture", "gpt2");
    w.set_string("tokenizer.ggml.model", "gpt2");
    w.set_string("tokenizer.ggml.pre", "gpt-2");
    std::vector<std::string> tokens;
    for (int c = 33; c < 127; ++c) tokens.push_back(std::string(1, static_cast<char>(c)));
    for (const char* p : {"\u0120", "He", "ll", "Hell", "Hello", "\u0120w", "<|endoftext|>"}) tokens.push_back(p);
    std::vector<std::int32_t> types(tokens.size(), 1);
    types.back() = 3;
    w.set_string_array("tokenizer.ggml.tokens", tokens);
    w.set_i32_array("tokenizer.ggml.token_type", types);
    w.set_string_array("tokenizer.ggml.merges", {"H e", "l l", "He ll", "Hell o", "\u0120 w"});
    w.set_u32("tokenizer.ggml.bos_token_id", static_cast<std::uint32_t>(tokens.size() - 1));
    w.set_u32("tokenizer.ggml.eos_token_id", static_cast<std::uint32_t>(tokens.size() - 1));
    put("gguf", "vocab-bpe", w.bytes());
  }
}

// What a qwen3moe seed gets wrong (issue 38's bad-input classes), or nothing.
enum class MoeDefect { kNone, kZeroExperts, kTopKAboveCount, kMissingRouter, kRaggedExperts };
// What a gemma3 seed gets wrong, or nothing.
enum class GemmaDefect { kNone, kZeroPattern, kMissingPostNorm };

// A tiny llama model in GGUF, with a byte-level BPE vocabulary: D=32, L=1, H=4,
// Hk=2, Dh=8, F=64, context 16; matrices of type `mt`, the embedding f16. With
// experts > 0, a qwen3moe model instead (q/k norms, a router and `experts` experts of
// width F, 2 per token), wrong as `defect` says. With gemma, a gemma3 model instead
// (q/k norms, post norms, a window of 4), wrong as `gemma_defect` says. With gpt_oss
// (and experts), a gpt-oss model instead (q/k/v/o biases, sinks, a window of 4, YaRN,
// biased router and experts). `spoil` may change a tensor's bytes after quantization
// (by name).
void gguf_model(kvd::WeightType mt, const std::string& name, std::uint64_t experts = 0,
                MoeDefect defect = MoeDefect::kNone,
                const std::function<void(const std::string&, Bytes&)>& spoil = {}, bool gemma = false,
                GemmaDefect gemma_defect = GemmaDefect::kNone, bool gpt_oss = false) {
  kvd::GGUFWriter w;
  const std::string arch = gpt_oss ? "gpt-oss" : gemma ? "gemma3" : experts ? "qwen3moe" : "llama";
  std::vector<std::string> tokens;
  for (int c = 33; c < 127; ++c) tokens.push_back(std::string(1, static_cast<char>(c)));
  for (const char* p : {"\u0120", "He", "ll", "Hell", "Hello", "\u0120w", "<|endoftext|>"}) tokens.push_back(p);
  const std::uint64_t V = tokens.size(), D = 32, H = 4, Hk = 2, Dh = 8, F = 64;
  w.set_string("general.architecture", arch);
  w.set_string("general.name", "fuzz-tiny-" + arch);
  w.set_u32(arch + ".context_length", 16);
  w.set_u32(arch + ".embedding_length", static_cast<std::uint32_t>(D));
  w.set_u32(arch + ".block_count", 1);
  w.set_u32(arch + (experts ? ".expert_feed_forward_length" : ".feed_forward_length"), static_cast<std::uint32_t>(F));
  if (experts) {
    w.set_u32(arch + ".expert_count", defect == MoeDefect::kZeroExperts ? 0 : static_cast<std::uint32_t>(experts));
    w.set_u32(arch + ".expert_used_count", defect == MoeDefect::kTopKAboveCount ? static_cast<std::uint32_t>(experts + 1) : 2);
  }
  w.set_u32(arch + ".attention.head_count", static_cast<std::uint32_t>(H));
  w.set_u32(arch + ".attention.head_count_kv", static_cast<std::uint32_t>(Hk));
  w.set_u32(arch + ".rope.dimension_count", static_cast<std::uint32_t>(Dh));
  w.set_f32(arch + ".rope.freq_base", 10000.0f);
  w.set_f32(arch + ".attention.layer_norm_rms_epsilon", 1e-5f);
  w.set_u32(arch + ".vocab_size", static_cast<std::uint32_t>(V));
  if (gemma) {
    w.set_u32(arch + ".attention.sliding_window", 4);
    if (gemma_defect == GemmaDefect::kZeroPattern) w.set_u32(arch + ".attention.sliding_window_pattern", 0);
  }
  if (gpt_oss) {
    w.set_u32(arch + ".attention.sliding_window", 4);
    w.set_string(arch + ".rope.scaling.type", "yarn");
    w.set_f32(arch + ".rope.scaling.factor", 4.0f);
    w.set_u32(arch + ".rope.scaling.original_context_length", 8);
  }
  w.set_string("tokenizer.ggml.model", "gpt2");
  w.set_string("tokenizer.ggml.pre", "gpt-2");
  std::vector<std::int32_t> types(tokens.size(), 1);
  types.back() = 3;
  w.set_string_array("tokenizer.ggml.tokens", tokens);
  w.set_i32_array("tokenizer.ggml.token_type", types);
  w.set_string_array("tokenizer.ggml.merges", {"H e", "l l", "He ll", "Hell o", "\u0120 w"});
  w.set_u32("tokenizer.ggml.bos_token_id", static_cast<std::uint32_t>(V - 1));
  w.set_u32("tokenizer.ggml.eos_token_id", static_cast<std::uint32_t>(V - 1));
  std::uint64_t seed = 12345;
  auto values = [&](std::uint64_t n, float scale) {
    std::vector<float> v(n);
    for (auto& x : v) {
      seed = seed * 6364136223846793005ull + 1442695040888963407ull;
      x = scale * (static_cast<float>((seed >> 40) % 2001) / 1000.0f - 1.0f);
    }
    return v;
  };
  auto tensor = [&](const std::string& name, kvd::WeightType t, std::uint64_t cols, std::uint64_t rows, float scale,
                    std::uint64_t n_experts = 1) {
    const std::vector<float> x = values(cols * rows * n_experts, scale);
    const std::uint64_t row_bytes = kvd::weight_row_bytes(t, cols);
    Bytes q(row_bytes * rows * n_experts);
    for (std::uint64_t r = 0; r < rows * n_experts; ++r)
      kvd::detail::quantize_row(t, x.data() + r * cols, q.data() + r * row_bytes, static_cast<std::int64_t>(cols));
    if (spoil) spoil(name, q);
    std::vector<std::uint64_t> ne = {cols};
    if (rows > 1 || n_experts > 1) ne.push_back(rows);
    if (n_experts > 1) ne.push_back(n_experts);
    w.add_tensor(name, t, ne, q.data(), q.size());
  };
  using WT = kvd::WeightType;
  tensor("token_embd.weight", WT::kF16, D, V, 0.5f);
  tensor("blk.0.attn_norm.weight", WT::kF32, D, 1, 1.0f);
  tensor("blk.0.attn_q.weight", mt, D, H * Dh, 0.2f);
  tensor("blk.0.attn_k.weight", mt, D, Hk * Dh, 0.2f);
  tensor("blk.0.attn_v.weight", mt, D, Hk * Dh, 0.2f);
  tensor("blk.0.attn_output.weight", mt, H * Dh, D, 0.2f);
  tensor(gpt_oss ? "blk.0.post_attention_norm.weight" : "blk.0.ffn_norm.weight", WT::kF32, D, 1, 1.0f);
  if (gpt_oss) {
    for (const char* b : {"blk.0.attn_q.bias", "blk.0.attn_k.bias", "blk.0.attn_v.bias"})
      tensor(b, WT::kF32, std::string(b) == "blk.0.attn_q.bias" ? H * Dh : Hk * Dh, 1, 0.2f);
    tensor("blk.0.attn_output.bias", WT::kF32, D, 1, 0.2f);
    tensor("blk.0.attn_sinks.weight", WT::kF32, H, 1, 1.0f);
    tensor("blk.0.ffn_gate_inp.bias", WT::kF32, experts, 1, 0.2f);
    tensor("blk.0.ffn_gate_exps.bias", WT::kF32, F, experts, 0.2f);
    tensor("blk.0.ffn_up_exps.bias", WT::kF32, F, experts, 0.2f);
    tensor("blk.0.ffn_down_exps.bias", WT::kF32, D, experts, 0.2f);
    tensor("output.weight", mt, D, V, 0.2f);
  }
  if ((experts && !gpt_oss) || gemma) {
    tensor("blk.0.attn_q_norm.weight", WT::kF32, Dh, 1, 1.0f);
    tensor("blk.0.attn_k_norm.weight", WT::kF32, Dh, 1, 1.0f);
  }
  if (gemma) {
    tensor("blk.0.post_attention_norm.weight", WT::kF32, D, 1, 1.0f);
    if (gemma_defect != GemmaDefect::kMissingPostNorm) tensor("blk.0.post_ffw_norm.weight", WT::kF32, D, 1, 1.0f);
  }
  if (experts) {
    if (defect != MoeDefect::kMissingRouter) tensor("blk.0.ffn_gate_inp.weight", WT::kF32, D, experts, 0.5f);
    // Ragged: the up experts twice as wide, half as many (the same bytes).
    const bool ragged = defect == MoeDefect::kRaggedExperts;
    tensor("blk.0.ffn_gate_exps.weight", mt, D, F, 0.2f, experts);
    tensor("blk.0.ffn_up_exps.weight", mt, D, ragged ? 2 * F : F, 0.2f, ragged ? experts / 2 : experts);
    tensor("blk.0.ffn_down_exps.weight", mt, F, D, 0.2f, experts);
  } else {
    tensor("blk.0.ffn_gate.weight", mt, D, F, 0.2f);
    tensor("blk.0.ffn_up.weight", mt, D, F, 0.2f);
    tensor("blk.0.ffn_down.weight", mt, F, D, 0.2f);
  }
  tensor("output_norm.weight", WT::kF32, D, 1, 1.0f);
  put("gguf", name, w.bytes());
}

// The table types (iq4_nl, iq4_xs, mxfp4): one tensor of each, as written, and
// with the block a load refuses (an infinite or NaN f16 d, e8m0 0xFF, an e8m0
// scale whose levels overflow float); and tiny models of iq4_nl and mxfp4 (their
// blocks of 32 fit D = 32), one with an mxfp4 NaN scale.
void table_type_ggufs() {
  using WT = kvd::WeightType;
  std::vector<float> x(256);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = 0.013f * static_cast<float>((i * 37) % 101) - 0.6f;
  auto one = [&](WT t, const std::function<void(Bytes&)>& spoil, const std::string& name) {
    kvd::GGUFWriter w;
    w.set_string("general.architecture", "llama");
    Bytes q(kvd::weight_row_bytes(t, 256));
    kvd::detail::quantize_row(t, x.data(), q.data(), 256);
    spoil(q);
    w.add_tensor(std::string("t.") + kvd::weight_type_name(t), t, {256}, q.data(), q.size());
    put("gguf", name, w.bytes());
  };
  auto keep = [](Bytes&) {};
  one(WT::kIQ4_NL, keep, "iq4_nl-row");
  one(WT::kIQ4_XS, keep, "iq4_xs-row");
  one(WT::kMXFP4, keep, "mxfp4-row");
  one(WT::kIQ4_NL, [](Bytes& q) { q[18 * 2] = 0x00, q[18 * 2 + 1] = 0x7C; }, "iq4_nl-inf-scale");
  one(WT::kIQ4_XS, [](Bytes& q) { q[0] = 0x00, q[1] = 0x7E; }, "iq4_xs-nan-scale");
  one(WT::kMXFP4, [](Bytes& q) { q[17 * 3] = 0xFF; }, "mxfp4-e8m0-nan");
  one(WT::kMXFP4, [](Bytes& q) { q[17] = 0xFE, q[18] = 0x77; }, "mxfp4-e8m0-overflow");
  gguf_model(WT::kIQ4_NL, "tiny-llama-iq4_nl");
  gguf_model(WT::kMXFP4, "tiny-llama-mxfp4");
  gguf_model(WT::kMXFP4, "tiny-llama-mxfp4-nan-scale", 0, MoeDefect::kNone, [](const std::string& name, Bytes& q) {
    if (name == "blk.0.ffn_up.weight") q[17 * 5] = 0xFF;
  });
}

// Texts for the encoder targets: ASCII, valid multi-byte UTF-8, invalid UTF-8, spaces.
void texts() {
  auto text = [](const std::string& name, const std::string& t) { put("tokenizer-encode", name, Bytes(t.begin(), t.end())); };
  text("ascii", "Hello world!");
  text("story", "Once upon a time, there was a little girl named Lily.\n");
  text("utf8", "caf\xc3\xa9 \xe4\xb8\xad\xe6\x96\x87 \xf0\x9f\x98\x80");
  text("invalid-utf8", std::string("\xff\xfe\xc3\x28 \xe2\x82 \x00 \t\n  ", 14));
  text("spaces", "   leading and  double  spaces ");
}

// Issue 33 shapes: tokenizers whose steps grow text (Replace rules that double it,
// a long Metaspace replacement), a long added token and a backtracking pattern;
// texts that are long runs; a header of many empty tensors; a model folder whose
// config plans a huge context.
void growth_and_length_seeds() {
  const std::string tiny_model = R"("model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2, " ": 3}, "merges": ["a b"]})";
  auto json = [&](const std::string& name, const std::string& extra) {
    const std::string j = "{" + tiny_model + ", " + extra + "}";
    put("tokenizer-json", name, Bytes(j.begin(), j.end()));
  };
  std::string doubling;
  for (int i = 0; i < 12; ++i)
    doubling += std::string(i ? "," : "") + R"({"type": "Replace", "pattern": {"String": "a"}, "content": "aa"})";
  json("doubling-replace-normalizer", R"("normalizer": {"type": "Sequence", "normalizers": [)" + doubling + "]}");
  json("doubling-replace-decoder", R"("decoder": {"type": "Sequence", "decoders": [)" + doubling + "]}");
  json("huge-metaspace", R"("pre_tokenizer": {"type": "Metaspace", "replacement": ")" + std::string(4096, 'x') +
                             R"(", "prepend_scheme": "always"})");
  json("long-added-token", R"("added_tokens": [{"id": 4, "content": ")" + std::string(4096, 'a') +
                               R"(b", "special": false}])");
  json("backtracking-split", R"("pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(a|a){1,14}\\d"}, "behavior": "Isolated"})");
  auto text = [](const std::string& name, const std::string& t) { put("tokenizer-encode", name, Bytes(t.begin(), t.end())); };
  text("long-run", std::string(2000, 'a'));
  std::string prefixes;
  while (prefixes.size() < 1900) prefixes += "<|endoftext|<|endo<|im_start|><|im_sta";
  text("special-prefixes", prefixes);
  std::string many = "{";
  for (int k = 0; k < 300; ++k)
    many += (k ? ",\"e" : "\"e") + std::to_string(k) + R"(":{"dtype":"F32","shape":[0],"data_offsets":[0,0]})";
  put("safetensors", "many-empty-tensors", safetensors_file(many + "}", {}));
  // The llama-f32 folder with a 2^20-position context (the demand check refuses it).
  Bytes huge = hf_folder("LlamaForCausalLM", "F32", true);
  const std::string from = R"("max_position_embeddings":64)", to = R"("max_position_embeddings":1048576)";
  const auto at = std::search(huge.begin(), huge.end(), from.begin(), from.end());
  huge.erase(at, at + static_cast<std::ptrdiff_t>(from.size()));
  huge.insert(huge.begin() + (at - huge.begin()), to.begin(), to.end());
  put("hf-folder", "huge-context", huge);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <corpus dir>   (writes <dir>/<target>/<seed>)\n", argv[0]);
    return 2;
  }
  try {
    g_root = argv[1];
    const fs::path tmp = fs::temp_directory_path() / ("kvdecode-make-corpus-" + std::to_string(::getpid()));
    fs::create_directories(tmp);
    checkpoints(tmp);
    tokenizers();
    cache_files(tmp);
    prompt_cache_files(tmp);
    ggufs();
    gguf_vocabs();
    gguf_model(kvd::WeightType::kF16, "tiny-llama-f16");
    gguf_model(kvd::WeightType::kQ8_0, "tiny-llama-q8_0");
    gguf_model(kvd::WeightType::kQ8_0, "tiny-qwen3moe-q8_0", 4);
    gguf_model(kvd::WeightType::kF16, "qwen3moe-zero-experts", 4, MoeDefect::kZeroExperts);
    gguf_model(kvd::WeightType::kF16, "qwen3moe-topk-above-count", 4, MoeDefect::kTopKAboveCount);
    gguf_model(kvd::WeightType::kF16, "qwen3moe-missing-router", 4, MoeDefect::kMissingRouter);
    gguf_model(kvd::WeightType::kF16, "qwen3moe-ragged-experts", 4, MoeDefect::kRaggedExperts);
    gguf_model(kvd::WeightType::kQ8_0, "tiny-gemma3-q8_0", 0, MoeDefect::kNone, {}, true);
    gguf_model(kvd::WeightType::kF16, "gemma3-zero-window-pattern", 0, MoeDefect::kNone, {}, true, GemmaDefect::kZeroPattern);
    gguf_model(kvd::WeightType::kF16, "gemma3-missing-post-norm", 0, MoeDefect::kNone, {}, true, GemmaDefect::kMissingPostNorm);
    gguf_model(kvd::WeightType::kQ8_0, "tiny-gpt-oss-q8_0", 4, MoeDefect::kNone, {}, false, GemmaDefect::kNone, true);
    table_type_ggufs();
    safetensors();
    hf_folders();
    tokenizer_jsons();
    texts();
    growth_and_length_seeds();
    fs::remove_all(tmp);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kvdecode-fuzz-make-corpus: %s\n", e.what());
    return 1;
  }
  return 0;
}
