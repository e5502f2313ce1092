// Tests for kvdecode/cache/planner.hpp: exact byte counts for the KV cache, the
// sequences that fit, the bandwidth bound, GPU lookup, formatting, and one
// test per rejected input.
#include "kvdecode/cache/planner.hpp"

#include <gtest/gtest.h>

#include "kvdecode/io/checkpoint.hpp"

#include <cmath>
#include <cstdint>
#include <fstream>
#include <limits>
#include <set>
#include <string>

namespace {

using kvd::ArgumentError;
using kvd::DType;
using kvd::MemoryPlan;
using kvd::PlanInput;

// 80 layers, 8 KV heads, head dim 128 (a Llama-2/3-70B-shaped cache), 8,000 tokens, 80 GB.
PlanInput llama70b_shape(DType dtype = DType::kF16) {
  PlanInput in;
  in.n_layers = 80;
  in.n_kv_heads = 8;
  in.head_dim = 128;
  in.dtype = dtype;
  in.tokens_per_sequence = 8000;
  in.memory_gb = 80;
  return in;
}

// Runs `in` through plan_memory() expecting ArgumentError whose message mentions `field`.
void expect_rejected(const PlanInput& in, const std::string& field) {
  try {
    kvd::plan_memory(in);
    FAIL() << "expected ArgumentError for " << field;
  } catch (const ArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
  }
}

TEST(Planner, Llama70bShapeF16Figures) {
  const MemoryPlan p = kvd::plan_memory(llama70b_shape());
  EXPECT_EQ(p.bytes_per_token, 327680u);  // 2 * 80 * 8 * 128 * 2
  EXPECT_EQ(p.bytes_per_sequence, 2621440000u);
  EXPECT_EQ(p.memory_bytes, 80000000000u);
  EXPECT_EQ(p.weight_bytes, 0u);
  EXPECT_EQ(p.kv_budget_bytes, 80000000000u);
  EXPECT_EQ(p.max_sequences, 30u);  // floor(80e9 / 2.62144e9) = floor(30.52)
  EXPECT_EQ(p.decode_tokens_per_second_bound, 0.0);  // bandwidth unknown
  EXPECT_EQ(p.batched_tokens_per_second_bound, 0.0);
  EXPECT_EQ(kvd::format_count(p.bytes_per_token), "327,680");
  EXPECT_EQ(kvd::format_bytes(p.bytes_per_sequence), "2.62 GB");
}

TEST(Planner, F32DoublesF16AndBf16EqualsF16) {
  const MemoryPlan f16 = kvd::plan_memory(llama70b_shape(DType::kF16));
  const MemoryPlan f32 = kvd::plan_memory(llama70b_shape(DType::kF32));
  const MemoryPlan bf16 = kvd::plan_memory(llama70b_shape(DType::kBF16));
  EXPECT_EQ(f32.bytes_per_token, 2 * f16.bytes_per_token);
  EXPECT_EQ(f32.bytes_per_sequence, 5242880000u);
  EXPECT_EQ(f32.max_sequences, 15u);  // floor(15.26)
  EXPECT_EQ(bf16.bytes_per_token, f16.bytes_per_token);
  EXPECT_EQ(bf16.max_sequences, f16.max_sequences);
}

TEST(Planner, Q8Is34BytesPer32Values) {
  const MemoryPlan q8 = kvd::plan_memory(llama70b_shape(DType::kQ8));
  EXPECT_EQ(q8.bytes_per_token, 2u * 80 * 8 * (128 / 32) * 34);  // 174,080
  EXPECT_EQ(q8.bytes_per_sequence, 1392640000u);
  EXPECT_EQ(q8.max_sequences, 57u);  // floor(80e9 / 1.39264e9) = floor(57.44)
}

TEST(Planner, Q8RoundsUpPerHeadVector) {
  // Dh = 48 needs two q8 groups per head vector (68 bytes), not 48 * 34/32 = 51.
  EXPECT_EQ(kvd::kv_bytes_per_token(6, 6, 48, DType::kQ8), 2u * 6 * 6 * 68);
  // Dh = 8: one whole group (34 bytes) per 8 values, more than f32's 32 bytes.
  EXPECT_EQ(kvd::kv_bytes_per_token(5, 4, 8, DType::kQ8), 2u * 5 * 4 * 34);
  EXPECT_EQ(kvd::kv_bytes_per_token(5, 4, 8, DType::kF32), 2u * 5 * 4 * 32);
  // For Dh a multiple of 32, per-head rounding agrees with ModelConfig's whole-row count.
  kvd::ModelConfig c = kvd::stories110m_config();  // Dh = 64
  EXPECT_EQ(kvd::kv_bytes_per_token(c.n_layers, c.n_kv_heads, c.head_dim, DType::kQ8),
            c.kv_bytes_per_token(DType::kQ8));
}

TEST(Planner, MatchesModelConfigForFloatTypes) {
  const kvd::ModelConfig c = kvd::stories15m_config();
  for (DType t : {DType::kF32, DType::kF64, DType::kBF16, DType::kF16})
    EXPECT_EQ(kvd::kv_bytes_per_token(c.n_layers, c.n_kv_heads, c.head_dim, t), c.kv_bytes_per_token(t))
        << kvd::dtype_name(t);
}

TEST(Planner, PlanInputForTakesTheCacheShapeFromAConfig) {
  const kvd::ModelConfig c = kvd::stories110m_config();
  const PlanInput in = kvd::plan_input_for(c, DType::kBF16);
  EXPECT_EQ(in.n_layers, 12);
  EXPECT_EQ(in.n_kv_heads, 12);
  EXPECT_EQ(in.head_dim, 64);
  EXPECT_EQ(in.dtype, DType::kBF16);
  EXPECT_EQ(in.tokens_per_sequence, 1024u);
  EXPECT_EQ(in.memory_gb, 0.0);
  EXPECT_THROW(kvd::plan_memory(in), ArgumentError);  // memory not set yet
}

TEST(Planner, WeightsComeOutOfTheBudget) {
  PlanInput in = llama70b_shape();
  in.weight_bytes = 20000000000u;
  const MemoryPlan p = kvd::plan_memory(in);
  EXPECT_EQ(p.weight_bytes, 20000000000u);
  EXPECT_EQ(p.kv_budget_bytes, 60000000000u);
  EXPECT_EQ(p.max_sequences, 22u);  // floor(60e9 / 2.62144e9) = floor(22.89)
  EXPECT_TRUE(p.weights_fit());
}

TEST(Planner, ExactFitIsCounted) {
  PlanInput in = llama70b_shape();
  in.memory_gb = 78.6432;  // exactly 30 * 2,621,440,000 bytes
  MemoryPlan p = kvd::plan_memory(in);
  EXPECT_EQ(p.memory_bytes, 78643200000u);
  EXPECT_EQ(p.max_sequences, 30u);
  in.weight_bytes = 1;  // one byte short of the 30th sequence
  p = kvd::plan_memory(in);
  EXPECT_EQ(p.max_sequences, 29u);
}

TEST(Planner, WeightsLargerThanMemoryGiveZeroSequences) {
  PlanInput in = llama70b_shape();
  in.weight_bytes = 140000000000u;  // 70B parameters in f16
  in.bandwidth_gb_s = 3350;
  const MemoryPlan p = kvd::plan_memory(in);
  EXPECT_FALSE(p.weights_fit());
  EXPECT_EQ(p.kv_budget_bytes, 0u);
  EXPECT_EQ(p.max_sequences, 0u);
  EXPECT_EQ(p.decode_tokens_per_second_bound, 0.0);
  EXPECT_EQ(p.batched_tokens_per_second_bound, 0.0);
}

TEST(Planner, WeightsEqualToMemoryLeaveNoBudget) {
  PlanInput in = llama70b_shape();
  in.weight_bytes = 80000000000u;
  const MemoryPlan p = kvd::plan_memory(in);
  EXPECT_TRUE(p.weights_fit());
  EXPECT_EQ(p.kv_budget_bytes, 0u);
  EXPECT_EQ(p.max_sequences, 0u);
}

TEST(Planner, SequenceLargerThanMemoryGivesZeroSequences) {
  PlanInput in = llama70b_shape();
  in.tokens_per_sequence = 1000000;  // 327.68 GB per sequence
  const MemoryPlan p = kvd::plan_memory(in);
  EXPECT_EQ(p.bytes_per_sequence, 327680000000u);
  EXPECT_EQ(p.max_sequences, 0u);
}

TEST(Planner, BandwidthBoundArithmetic) {
  PlanInput in = llama70b_shape();
  in.weight_bytes = 20000000000u;
  in.bandwidth_gb_s = 2000;
  const MemoryPlan p = kvd::plan_memory(in);
  ASSERT_EQ(p.max_sequences, 22u);
  // Same expressions, same operation order, so exact equality holds.
  EXPECT_EQ(p.decode_tokens_per_second_bound, 1.0 * 2000 * 1e9 / (20e9 + 1.0 * 2621440000.0));
  EXPECT_EQ(p.batched_tokens_per_second_bound, 22.0 * 2000 * 1e9 / (20e9 + 22.0 * 2621440000.0));
  // And the figures by hand: 2000 / 22.62 GB = 88.4 tok/s; 22 * 2000 / 77.67 GB = 566.5 tok/s.
  EXPECT_GT(p.decode_tokens_per_second_bound, 88.4);
  EXPECT_LT(p.decode_tokens_per_second_bound, 88.5);
  EXPECT_GT(p.batched_tokens_per_second_bound, 566.4);
  EXPECT_LT(p.batched_tokens_per_second_bound, 566.5);
}

TEST(Planner, BandwidthBoundWithoutWeightsCountsKvOnly) {
  PlanInput in = llama70b_shape();
  in.bandwidth_gb_s = 3350;
  const MemoryPlan p = kvd::plan_memory(in);
  EXPECT_EQ(p.decode_tokens_per_second_bound, 1.0 * 3350 * 1e9 / (0.0 + 1.0 * 2621440000.0));
  // With no weight traffic batching shares nothing: each sequence still streams its own cache.
  EXPECT_EQ(p.batched_tokens_per_second_bound, 30.0 * 3350 * 1e9 / (0.0 + 30.0 * 2621440000.0));
}

TEST(Planner, DecodeBoundEdgeCases) {
  EXPECT_EQ(kvd::decode_bound_tokens_per_second(0, 1000, 1000, 4), 0.0);  // bandwidth unknown
  EXPECT_EQ(kvd::decode_bound_tokens_per_second(100, 1000, 1000, 0), 0.0);  // empty batch
  EXPECT_EQ(kvd::decode_bound_tokens_per_second(100, 0, 0, 1), 0.0);        // nothing read
  EXPECT_EQ(kvd::decode_bound_tokens_per_second(1, 1000000000, 0, 1), 1.0);  // 1 GB/s over 1 GB
  EXPECT_THROW(kvd::decode_bound_tokens_per_second(-1, 1, 1, 1), ArgumentError);
  EXPECT_THROW(kvd::decode_bound_tokens_per_second(std::nan(""), 1, 1, 1), ArgumentError);
}

TEST(Planner, BytesPerTokenOverflowThrows) {
  PlanInput in = llama70b_shape(DType::kF64);
  in.n_layers = std::numeric_limits<int>::max();
  in.n_kv_heads = std::numeric_limits<int>::max();
  in.head_dim = std::numeric_limits<int>::max();
  expect_rejected(in, "overflows");
}

TEST(Planner, BytesPerSequenceOverflowThrows) {
  PlanInput in = llama70b_shape();
  in.tokens_per_sequence = std::numeric_limits<std::uint64_t>::max() / 1000;
  expect_rejected(in, "bytes per sequence");
}

TEST(PlannerValidation, ZeroLayers) {
  PlanInput in = llama70b_shape();
  in.n_layers = 0;
  expect_rejected(in, "n_layers = 0");
}

TEST(PlannerValidation, NegativeLayers) {
  PlanInput in = llama70b_shape();
  in.n_layers = -3;
  expect_rejected(in, "n_layers = -3");
}

TEST(PlannerValidation, ZeroKvHeads) {
  PlanInput in = llama70b_shape();
  in.n_kv_heads = 0;
  expect_rejected(in, "n_kv_heads = 0");
}

TEST(PlannerValidation, ZeroHeadDim) {
  PlanInput in = llama70b_shape();
  in.head_dim = 0;
  expect_rejected(in, "head_dim = 0");
}

TEST(PlannerValidation, ZeroTokens) {
  PlanInput in = llama70b_shape();
  in.tokens_per_sequence = 0;
  expect_rejected(in, "tokens_per_sequence = 0");
}

TEST(PlannerValidation, ZeroMemory) {
  PlanInput in = llama70b_shape();
  in.memory_gb = 0;
  expect_rejected(in, "memory_gb = 0");
}

TEST(PlannerValidation, NegativeMemory) {
  PlanInput in = llama70b_shape();
  in.memory_gb = -80;
  expect_rejected(in, "memory_gb = -80");
}

TEST(PlannerValidation, NanMemory) {
  PlanInput in = llama70b_shape();
  in.memory_gb = std::nan("");
  expect_rejected(in, "memory_gb");
}

TEST(PlannerValidation, MemoryAboveLimit) {
  PlanInput in = llama70b_shape();
  in.memory_gb = 2 * PlanInput::kMaxMemoryGb;
  expect_rejected(in, "memory_gb");
}

TEST(PlannerValidation, NegativeBandwidth) {
  PlanInput in = llama70b_shape();
  in.bandwidth_gb_s = -1;
  expect_rejected(in, "bandwidth_gb_s = -1");
}

TEST(PlannerValidation, InfiniteBandwidth) {
  PlanInput in = llama70b_shape();
  in.bandwidth_gb_s = std::numeric_limits<double>::infinity();
  expect_rejected(in, "bandwidth_gb_s");
}

TEST(PlannerGpu, FindsCanonicalNamesAndAliases) {
  const kvd::GpuSpec* h100 = kvd::find_gpu("h100");
  ASSERT_NE(h100, nullptr);
  EXPECT_STREQ(h100->name, "H100-SXM-80GB");
  EXPECT_EQ(h100->memory_gb, 80);
  EXPECT_EQ(h100->bandwidth_gb_s, 3350);
  EXPECT_EQ(kvd::find_gpu("H100-80GB"), h100);
  EXPECT_EQ(kvd::find_gpu("NVIDIA H100 SXM"), h100);
  EXPECT_EQ(kvd::find_gpu("h100_sxm_80gb"), h100);

  const kvd::GpuSpec* pcie = kvd::find_gpu("H100 PCIe");
  ASSERT_NE(pcie, nullptr);
  EXPECT_EQ(pcie->bandwidth_gb_s, 2000);

  const kvd::GpuSpec* a100_40 = kvd::find_gpu("a100-40gb");
  ASSERT_NE(a100_40, nullptr);
  EXPECT_EQ(a100_40->memory_gb, 40);
  EXPECT_EQ(a100_40->bandwidth_gb_s, 1555);
  const kvd::GpuSpec* a100 = kvd::find_gpu("A100");
  ASSERT_NE(a100, nullptr);
  EXPECT_EQ(a100->memory_gb, 80);
  EXPECT_EQ(a100->bandwidth_gb_s, 2039);

  const kvd::GpuSpec* rtx = kvd::find_gpu("GeForce RTX 4090");
  ASSERT_NE(rtx, nullptr);
  EXPECT_EQ(rtx->bandwidth_gb_s, 1008);
  EXPECT_EQ(kvd::find_gpu("4090"), rtx);

  const kvd::GpuSpec* mi = kvd::find_gpu("AMD Instinct MI300X");
  ASSERT_NE(mi, nullptr);
  EXPECT_EQ(mi->memory_gb, 192);
  EXPECT_EQ(mi->bandwidth_gb_s, 5300);
  EXPECT_EQ(kvd::find_gpu("t4")->bandwidth_gb_s, 320);
  EXPECT_EQ(kvd::find_gpu("L40S")->memory_gb, 48);
}

TEST(PlannerGpu, UnknownNamesGiveNull) {
  EXPECT_EQ(kvd::find_gpu("gtx1080"), nullptr);
  EXPECT_EQ(kvd::find_gpu(""), nullptr);
  EXPECT_EQ(kvd::find_gpu("--"), nullptr);
  EXPECT_EQ(kvd::find_gpu("nvidia"), nullptr);
}

TEST(PlannerGpu, TableEntriesFindThemselvesAndHaveDistinctKeys) {
  std::set<std::string> keys;
  for (const kvd::GpuSpec& g : kvd::gpu_table()) {
    EXPECT_EQ(kvd::find_gpu(g.name), &g) << g.name;
    EXPECT_GT(g.memory_gb, 0) << g.name;
    EXPECT_GT(g.bandwidth_gb_s, 0) << g.name;
    EXPECT_TRUE(keys.insert(kvd::detail::gpu_key(g.name)).second) << g.name;
  }
  // Every alias points at a real entry.
  for (const auto& a : kvd::detail::gpu_aliases()) EXPECT_NE(kvd::find_gpu(a.key), nullptr) << a.key;
}

TEST(PlannerFormat, Bytes) {
  EXPECT_EQ(kvd::format_bytes(0), "0 B");
  EXPECT_EQ(kvd::format_bytes(999), "999 B");
  EXPECT_EQ(kvd::format_bytes(1000), "1.00 kB");
  EXPECT_EQ(kvd::format_bytes(327680), "327.68 kB");
  EXPECT_EQ(kvd::format_bytes(999999), "1.00 MB");  // not "1000.00 kB"
  EXPECT_EQ(kvd::format_bytes(2621440000u), "2.62 GB");
  EXPECT_EQ(kvd::format_bytes(80000000000u), "80.00 GB");
  EXPECT_EQ(kvd::format_bytes(std::numeric_limits<std::uint64_t>::max()), "18.45 EB");
}

TEST(PlannerFormat, Count) {
  EXPECT_EQ(kvd::format_count(0), "0");
  EXPECT_EQ(kvd::format_count(999), "999");
  EXPECT_EQ(kvd::format_count(1000), "1,000");
  EXPECT_EQ(kvd::format_count(327680), "327,680");
  EXPECT_EQ(kvd::format_count(2621440000u), "2,621,440,000");
  EXPECT_EQ(kvd::format_count(std::numeric_limits<std::uint64_t>::max()), "18,446,744,073,709,551,615");
}

TEST(PlannerCheckpoint, PlansFromStories260K) {
  const std::string path = std::string(KVDECODE_SHARED_DIR) + "/models/stories260K.bin";
  if (!std::ifstream(path).good()) GTEST_SKIP() << "model file not found (shared/models absent?): " << path;
  const kvd::CheckpointInfo info = kvd::read_checkpoint_info(path);
  const kvd::ModelConfig& c = info.config;
  // stories260K: 5 layers, 4 KV heads, head dim 64 / 8 = 8, 512 positions.
  ASSERT_EQ(c.n_layers, 5);
  ASSERT_EQ(c.n_kv_heads, 4);
  ASSERT_EQ(c.head_dim, 8);
  PlanInput in = kvd::plan_input_for(c, DType::kF32);
  EXPECT_EQ(in.tokens_per_sequence, 512u);
  in.memory_gb = 1;
  in.weight_bytes = info.weight_bytes;
  const MemoryPlan p = kvd::plan_memory(in);
  EXPECT_EQ(p.bytes_per_token, c.kv_bytes_per_token(DType::kF32));
  EXPECT_EQ(p.bytes_per_token, 1280u);  // 2 * 5 * 4 * 8 * 4
  EXPECT_EQ(p.bytes_per_sequence, 1280u * 512);
  // The float32 weight tensors only (no header, no RoPE tables): 4 * 260,032 parameters.
  EXPECT_EQ(c.n_params(), 260032u);
  EXPECT_EQ(info.weight_bytes, 4 * c.n_params());
  EXPECT_EQ(p.kv_budget_bytes, 1000000000u - info.weight_bytes);
  EXPECT_EQ(p.max_sequences, (1000000000u - info.weight_bytes) / (1280u * 512));
  EXPECT_EQ(p.max_sequences, 1524u);  // floor(998,959,872 / 655,360)
}

}  // namespace
