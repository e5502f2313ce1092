// The model formats kvdecode reads, told apart by content, never by name
// (detect_model_format):
//   - a folder holding config.json: a Hugging Face model (hf_model.hpp);
//   - a file starting with "GGUF": a GGUF model (gguf_model.hpp);
//   - a file starting with llama2.c's v1 magic "ak42", or whose first 28 bytes
//     are a legacy header the checkpoint reader accepts: a llama2.c checkpoint
//     (checkpoint.hpp).
// read_model_info(path) reads what any of them says about its model (ModelInfo:
// format, architecture, config, bytes by weight type) without its weight data, for
// the planner and other tools that need only the shape and the bytes;
// load_model_weights<T>(path) reads the weights. open_model() (model_loader.hpp)
// builds on both to give a model ready to run.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "kvdecode/io/checkpoint.hpp"
#include "kvdecode/core/config.hpp"
#include "kvdecode/error.hpp"
#include "kvdecode/io/gguf.hpp"
#include "kvdecode/io/gguf_model.hpp"
#include "kvdecode/io/hf_model.hpp"
#include "kvdecode/io/load_options.hpp"
#include "kvdecode/weights/weight_type.hpp"
#include "kvdecode/weights/model_weights.hpp"

namespace kvd {

/// The longest context any format may plan for (2^20 positions; GGUF, Hugging Face
/// folders and checkpoints are each refused beyond it).
inline constexpr std::uint64_t kMaxModelContext = kHFMaxContext;

/// The model formats kvdecode reads. The numbers are frozen (they may be stored).
enum class ModelFormat {
  kGguf = 1,      ///< a GGUF file (llama, qwen2, qwen3)
  kHfFolder = 2,  ///< a Hugging Face folder: config.json + safetensors
  kLlama2c = 3,   ///< a llama2.c checkpoint, legacy or v1
};

/// "GGUF", "Hugging Face folder" or "llama2.c checkpoint". Never fails.
inline const char* model_format_name(ModelFormat f) {
  switch (f) {
    case ModelFormat::kGguf: return "GGUF";
    case ModelFormat::kHfFolder: return "Hugging Face folder";
    case ModelFormat::kLlama2c: return "llama2.c checkpoint";
  }
  return "?";
}

/// What a model file says about its model, read without its weight data.
struct ModelInfo {
  ModelFormat format = ModelFormat::kGguf;
  std::string path;          ///< as given to open_model() / read_model_info()
  std::string architecture;  ///< GGUF general.architecture, config.json architectures[0], "llama" for llama2.c
  std::string name;          ///< GGUF general.name, or empty
  /// One phrase for messages: "GGUF llama 'stories260K'", "Hugging Face LlamaForCausalLM",
  /// "llama2.c legacy", "llama2.c v1".
  std::string description;
  ModelConfig config;                ///< validated; max_seq_len capped at the options' max_seq_len
  std::uint64_t file_context = 0;    ///< the model's own context, as stored (before any cap)
  std::uint64_t weight_bytes = 0;    ///< bytes of every tensor the model uses, as stored
  std::uint64_t expert_bytes = 0;    ///< of which expert tensors (a mixture of experts)
  /// Bytes of weights one token reads: all but the experts, and K of E of those.
  std::uint64_t active_weight_bytes() const { return config.active_weight_bytes(weight_bytes, expert_bytes); }
  /// (type, bytes) of the tensors the model uses, one entry per storage type present.
  std::vector<std::pair<WeightType, std::uint64_t>> bytes_by_type;
  /// Tensors the model does not use (only with allow_unused_tensors; otherwise refused).
  std::vector<std::string> unused_tensors;
};

namespace detail {

/// The first bytes of a regular file (at most n). Throws FileError naming the path.
inline std::vector<unsigned char> model_file_prefix(const std::string& path, std::size_t n) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw FileError(msg("'", path, "': cannot be opened for reading"));
  std::vector<unsigned char> head(n);
  in.read(reinterpret_cast<char*>(head.data()), static_cast<std::streamsize>(n));
  head.resize(static_cast<std::size_t>(in.gcount()));
  return head;
}

}  // namespace detail

/// The format of the model at `path`, from its contents (see the top of this file).
/// Throws FileError naming the path when it does not exist, cannot be inspected or
/// read, or is neither a regular file nor a folder; FormatError naming the path for a
/// folder without config.json, or a file that is none of the formats (the message
/// gives the legacy-header check that failed). Reads at most 256 bytes.
inline ModelFormat detect_model_format(const std::string& path) {
  namespace fs = std::filesystem;
  using detail::msg;
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (st.type() == fs::file_type::not_found) throw FileError(msg("'", path, "': no such file or folder"));
  if (ec) throw FileError(msg("'", path, "': cannot inspect it: ", ec.message()));
  if (st.type() == fs::file_type::directory) {
    if (is_hf_folder(path)) return ModelFormat::kHfFolder;
    throw FormatError(msg("'", path, "' is a folder without config.json: not a Hugging Face model folder"));
  }
  if (st.type() != fs::file_type::regular) throw FileError(msg("'", path, "' is neither a regular file nor a folder"));
  const std::vector<unsigned char> head = detail::model_file_prefix(path, detail::kV1HeaderBytes);
  if (head.size() >= 4 && std::memcmp(head.data(), "GGUF", 4) == 0) return ModelFormat::kGguf;
  if (head.size() >= 4 && detail::load_u32_le(head.data()) == detail::kCheckpointMagic) return ModelFormat::kLlama2c;
  // No magic: a legacy llama2.c header is 7 int32 that must pass the reader's field checks.
  try {
    std::array<unsigned char, detail::kV1HeaderBytes> prefix{};
    std::copy(head.begin(), head.end(), prefix.begin());
    detail::check_header_fields(path, detail::parse_header(path, prefix.data(), head.size()));
  } catch (const FileError& e) {
    throw FormatError(msg("'", path, "' is neither a GGUF file (no \"GGUF\" magic), a Hugging Face folder nor a ",
                          "llama2.c checkpoint (", e.what(), ")"));
  }
  return ModelFormat::kLlama2c;
}

/// What the model at `path` says about itself, read without its weight data: the
/// config the loaders would give with `options` (max_seq_len caps the context), the
/// bytes of its tensors by storage type, and for GGUF files and folders the tensors it
/// does not use (refused unless options.allow_unused_tensors). A GGUF file and the
/// safetensors files are mapped but their tensor data is not read; a checkpoint's
/// first 256 bytes are. Throws as detect_model_format() does, then what the format's
/// reader throws (FileError, FormatError, ConfigError) naming the file and the problem.
inline ModelInfo read_model_info(const std::string& path, const WeightLoadOptions& options = {}) {
  using detail::msg;
  ModelInfo m;
  m.format = detect_model_format(path);
  m.path = path;
  switch (m.format) {
    case ModelFormat::kGguf: {
      const GGUFModelInfo g = gguf_model_info(GGUFFile::open(path), options);
      m.architecture = g.architecture;
      m.name = g.name;
      m.description = msg("GGUF ", g.architecture, g.name.empty() ? std::string() : msg(" '", g.name, "'"));
      m.config = g.config;
      m.file_context = g.file_context;
      m.weight_bytes = g.weight_bytes;
      m.expert_bytes = g.expert_bytes;
      m.bytes_by_type = g.bytes_by_type;
      m.unused_tensors = g.unused_tensors;
      break;
    }
    case ModelFormat::kHfFolder: {
      HFModelInfo h = hf_model_weights_info(path, options);
      m.architecture = h.architecture;
      m.description = msg("Hugging Face ", h.architecture);
      m.config = h.config;
      m.file_context = h.file_context;
      m.weight_bytes = h.weight_bytes;
      m.expert_bytes = h.expert_bytes;
      m.bytes_by_type = std::move(h.bytes_by_type);
      m.unused_tensors = std::move(h.unused_tensors);
      break;
    }
    case ModelFormat::kLlama2c: {
      const CheckpointInfo c = detail::open_checkpoint(path, options.max_seq_len).info;
      m.architecture = "llama";
      m.description = checkpoint_format_name(c.format);
      m.config = c.config;
      m.file_context = static_cast<std::uint64_t>(c.config.max_seq_len);
      if (options.max_seq_len > 0 && options.max_seq_len < m.config.max_seq_len) m.config.max_seq_len = options.max_seq_len;
      m.weight_bytes = c.weight_bytes;
      m.bytes_by_type = {{WeightType::kF32, c.weight_bytes}};
      break;
    }
  }
  m.config.kv_rotation = options.cache_rotation;
  m.config.validate();  // a rotation needs a power-of-two head_dim
  return m;
}

/// The weights of the model at `path` in any format, with `options` (the unused
/// tensors' names go to options.unused_tensors as the format's loader puts them).
/// With `info`, also what read_model_info() gives. Throws as read_model_info() and
/// the format's loader do; nothing is returned on failure.
template <class T>
ModelWeights<T> load_model_weights(const std::string& path, const WeightLoadOptions& options = {},
                                   ModelInfo* info = nullptr) {
  ModelInfo m = read_model_info(path, options);
  ModelWeights<T> w;
  switch (m.format) {
    case ModelFormat::kGguf: w = load_gguf_model<T>(path, options); break;
    case ModelFormat::kHfFolder: w = load_hf_model<T>(path, options); break;
    case ModelFormat::kLlama2c: w = load_checkpoint<T>(path, options); break;
  }
  w.config.kv_rotation = options.cache_rotation;
  w.config.validate();  // a rotation needs a power-of-two head_dim
  if (info) *info = std::move(m);
  return w;
}

}  // namespace kvd
