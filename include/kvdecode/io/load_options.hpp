// WeightLoadOptions: what every weight loader takes (GGUF files, Hugging Face
// folders, llama2.c checkpoints): the context to plan for and what to do with
// tensors the model does not use. GGUFLoadOptions, HFLoadOptions and
// CheckpointLoadOptions are this one struct under their old names; open_model()
// (model_loader.hpp) takes LoadOptions, which adds the tokenizer and chat template.
#pragma once

#include <string>
#include <vector>

#include "kvdecode/core/config.hpp"

namespace kvd {

/// Options shared by every weight loader.
struct WeightLoadOptions {
  /// Longest sequence to plan for: caps the model's own context (GGUF
  /// context_length, config.json max_position_embeddings, a checkpoint's seq_len)
  /// for the RoPE tables, the default cache capacity and the memory-demand checks.
  /// 0 = the model's own context.
  int max_seq_len = 0;
  /// Load a GGUF file or Hugging Face folder holding tensors the model does not use
  /// (refused by default, naming the first); their names go to `unused_tensors`, for
  /// a warning. A llama2.c checkpoint has no names: ignored.
  bool allow_unused_tensors = false;
  /// With allow_unused_tensors: receives the unused tensors' names (file order for
  /// GGUF, name order for a folder); may be null.
  std::vector<std::string>* unused_tensors = nullptr;
  /// Caches of this model store their heads rotated (ModelConfig::kv_rotation,
  /// --cache-rotate): none, keys, or keys and values. Set by load_model_weights(),
  /// read_model_info() and open_model(), which then throw ConfigError naming
  /// head_dim when it is not a power of two.
  KVRotation cache_rotation = KVRotation::kNone;
};

}  // namespace kvd
