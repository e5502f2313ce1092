// open_model(path): one entry point for a model in any format kvdecode reads
// (model_format.hpp: a GGUF file, a Hugging Face folder or a llama2.c checkpoint,
// told apart by content). It returns everything a program needs to run the model:
// the packed Transformer, the text tokenizer (the GGUF's own vocabulary, the
// folder's tokenizer.json, or LoadOptions::tokenizer), the chat template that goes
// with it, the ids that end generation, and the ModelInfo read_model_info() gives.
#pragma once

#include <algorithm>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "kvdecode/chat/chat_template.hpp"
#include "kvdecode/error.hpp"
#include "kvdecode/io/gguf.hpp"
#include "kvdecode/io/hf_model.hpp"
#include "kvdecode/io/load_options.hpp"
#include "kvdecode/io/model_format.hpp"
#include "kvdecode/matmul/numerics.hpp"
#include "kvdecode/text/text_tokenizer.hpp"
#include "kvdecode/text/llama2c_tokenizer.hpp"
#include "kvdecode/text/tokenizer_gguf.hpp"
#include "kvdecode/text/tokenizer_loader.hpp"
#include "kvdecode/model/transformer.hpp"
#include "kvdecode/weights/model_weights.hpp"

namespace kvd {

/// Options for open_model(): the weight loaders' options plus the text side.
struct LoadOptions : WeightLoadOptions {
  /// The tokenizer, in any format load_tokenizer() reads (a llama2.c tokenizer.bin
  /// is read for exactly the model's vocab_size pieces). "" = the model's own: a GGUF
  /// file's vocabulary (none when it holds no tokenizer.ggml.tokens), a Hugging Face
  /// folder's tokenizer.json (none when absent), none for a llama2.c checkpoint
  /// (llama2.c keeps it apart, in tokenizer.bin: pass its path here).
  std::string tokenizer;
  /// Load the chat template that goes with the tokenizer (load_chat_template()). A
  /// tokenizer without one leaves LoadedModel::chat_template empty; one that does not
  /// parse is an error.
  bool chat_template = true;
  /// The model's numerics mode (numerics.hpp, Transformer::set_numerics). By default
  /// block-type matrices round their input rows to int8 blocks, as llama.cpp does,
  /// and f32/f16/bf16 ones keep float activations: the same bits on every CPU.
  /// Numerics::kExact keeps float activations everywhere (`--exact-activations`).
  Numerics numerics = Numerics::kInt8Blocks;
};

/// A model ready to run, and what goes with it.
struct LoadedModel {
  explicit LoadedModel(Transformer<float> m) : model(std::move(m)) {}

  Transformer<float> model;
  std::unique_ptr<TextTokenizer> tokenizer;  ///< null when the model has none (see LoadOptions::tokenizer)
  std::optional<ChatTemplate> chat_template;  ///< empty: the tokenizer has none, or not asked for
  std::string no_chat_template;  ///< why chat_template is empty, when it was asked for (for a note)
  /// Ids that end generation: the tokenizer's end-of-generation ids (eog_ids()), then
  /// the eos_token_id of a Hugging Face folder's generation_config.json not among them.
  std::vector<int> stop_ids;
  ModelInfo info;
};

/// The tokenizer `options` ask for (see LoadOptions::tokenizer) for a model whose
/// ModelInfo is `info`; null when the model has none. Throws as
/// load_tokenizer(path, vocab_size) does (FileError naming the tokenizer when it holds
/// more tokens than the model's vocab_size).
inline std::unique_ptr<TextTokenizer> open_model_tokenizer(const ModelInfo& info, const LoadOptions& options) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!options.tokenizer.empty()) return load_tokenizer(options.tokenizer, info.config.vocab_size);
  if (info.format == ModelFormat::kGguf) {
    const GGUFFile f = GGUFFile::open(info.path);
    if (!f.find("tokenizer.ggml.tokens")) return nullptr;  // a file without a vocabulary
    std::unique_ptr<TextTokenizer> tok = load_tokenizer_gguf(f);
    // (gguf_model_info already refused a vocabulary shorter than the embedding.)
    detail::require_tokenizer_fits(*tok, info.path, info.config.vocab_size);
    return tok;
  }
  const fs::path json = fs::path(info.path) / "tokenizer.json";
  if (info.format == ModelFormat::kHfFolder && fs::is_regular_file(json, ec))
    return load_tokenizer(json.string(), info.config.vocab_size);
  return nullptr;  // a llama2.c checkpoint keeps its vocabulary apart
}

/// Opens the model at `path` in any format (detect_model_format()): its weights,
/// packed into a Transformer<float>; the tokenizer and chat template of `options`;
/// the stop ids; and its ModelInfo. Unused tensors (allow_unused_tensors) are listed
/// in info.unused_tensors and, when set, options.unused_tensors.
/// Failure: FileError / FormatError / ConfigError from detection, the weights, the
/// tokenizer (FileError when it holds more tokens than vocab_size) or the chat
/// template (TemplateError / FormatError for one that does not parse), each naming
/// the file and the problem. Nothing is returned on failure.
inline LoadedModel open_model(const std::string& path, const LoadOptions& options = {}) {
  ModelInfo info;
  ModelWeights<float> w = load_model_weights<float>(path, options, &info);
  LoadedModel out{Transformer<float>(std::move(w))};
  out.model.set_numerics(options.numerics);
  out.info = std::move(info);
  out.tokenizer = open_model_tokenizer(out.info, options);
  if (out.tokenizer && options.chat_template) {
    const std::string source = options.tokenizer.empty() ? path : options.tokenizer;
    try {
      out.chat_template = load_chat_template(source);
    } catch (const ConfigError& e) {  // no template (ConfigError); one that does not parse is not caught
      out.no_chat_template = e.what();
    }
  } else if (options.chat_template) {
    out.no_chat_template = detail::msg(path, ": no tokenizer, so no chat template (give LoadOptions::tokenizer)");
  }
  if (out.tokenizer) out.stop_ids = out.tokenizer->eog_ids();
  if (out.info.format == ModelFormat::kHfFolder)
    for (int id : hf_generation_eos_ids(path))
      if (std::find(out.stop_ids.begin(), out.stop_ids.end(), id) == out.stop_ids.end()) out.stop_ids.push_back(id);
  return out;
}

}  // namespace kvd
