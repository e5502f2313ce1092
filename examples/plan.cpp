// kvdecode-plan: how many sequences' KV caches fit on a card, and how fast
// decode can go at best. Takes a cache shape (--layers/--kv-heads/--head-dim,
// or --model to read it from any model kvd::read_model_info reads: a GGUF file, a Hugging
// Face folder or a llama2.c checkpoint), a cache dtype, a context
// length and a card (--memory-gb, or --gpu from the built-in table), and prints
// the plan from kvd::plan_memory() plus the same plan for each cache dtype.
//
//   kvdecode-plan --layers 80 --kv-heads 8 --head-dim 128 --dtype f16 --tokens 8000 --memory-gb 80
//   kvdecode-plan --model ../shared/models/stories260K.bin --gpu l4 --json
//
// Exit status: 0 on success, 1 if the model file cannot be used, 2 on a bad argument.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "cli.hpp"
#include "kvdecode/io/model_format.hpp"
#include "kvdecode/cache/planner.hpp"
#include "kvdecode/convert/quantize.hpp"

namespace {

using kvd::cli::json_number;
using kvd::cli::json_string;

using kvd::ArgumentError;
using kvd::detail::msg;

const char* const kIntro = R"(kvdecode-plan: KV cache capacity and decode-speed bound for one card

Usage:
  kvdecode-plan --layers N --kv-heads N --head-dim N --tokens N (--memory-gb G | --gpu NAME) [options]
  kvdecode-plan --model PATH [--tokens N] (--memory-gb G | --gpu NAME) [options]
  kvdecode-plan --list-gpus

Cache shape: --layers, --kv-heads and --head-dim, or --model.)";

const char* const kOutro = R"(Options take their value as the next argument or after '=' (--tokens=8000).
Exit status: 0 success, 1 model file unusable, 2 bad argument.
)";

// The dtypes compared on the "by cache dtype" line.
const kvd::DType kCompared[] = {kvd::DType::kF32, kvd::DType::kBF16, kvd::DType::kF16, kvd::DType::kQ8, kvd::DType::kQ4};

using Options = kvd::cli::Params;

/// The parsed options; `help` receives the --help text.
Options parse_args(int argc, char** argv, std::string& help) {
  Options o;
  kvd::cli::OptionTable table(kvd::cli::kPlan, o, kIntro, kOutro);
  table.set_help("--model", "GGUF file (llama, qwen2, qwen3, qwen3moe; any weight types), Hugging Face folder or llama2.c "
                            "checkpoint: shape, context length and the exact bytes of the weights as stored",
                 "Cache shape");
  help = table.help();
  table.parse(argc, argv);
  return o;
}

void print_gpu_table(std::ostream& os) {
  os << "Built-in cards (nominal vendor figures; GB = 10^9 bytes):\n";
  char line[96];
  std::snprintf(line, sizeof line, "  %-16s %10s %14s\n", "name", "memory GB", "bandwidth GB/s");
  os << line;
  for (const kvd::GpuSpec& g : kvd::gpu_table()) {
    std::snprintf(line, sizeof line, "  %-16s %10g %14g\n", g.name, g.memory_gb, g.bandwidth_gb_s);
    os << line;
  }
  os << "Names match ignoring case and punctuation; aliases such as h100, a100, 4090 are accepted.\n";
}

// "1,234 (1.23 kB)"
std::string bytes_both(std::uint64_t b) { return kvd::format_count(b) + "  (" + kvd::format_bytes(b) + ")"; }

std::string fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

// A tokens/s figure: one decimal below 100, whole numbers with separators above.
std::string rate(double v) { return v < 100 ? fixed(v, 1) : kvd::format_count(static_cast<std::uint64_t>(std::llround(v))); }



// Prints "  label  text" with the label padded to a fixed column.
void row(std::ostream& os, const std::string& label, const std::string& text) {
  os << "  " << label << std::string(label.size() < 26 ? 26 - label.size() : 1, ' ') << text << '\n';
}

/// The model at `path` in any format kvd::read_model_info reads (GGUF file, Hugging
/// Face folder, llama2.c checkpoint), without its weight data. A context beyond
/// kvdecode's limit (2^20 positions) is capped rather than refused: the plan only
/// needs the shape, and --tokens says how many positions to plan for. So the file is
/// read for one position (no reader's memory-demand check applies) and the config
/// then gets the file's context, capped. A model whose tensors are not all used is
/// refused unless allow_unused_tensors. Throws FileError/FormatError/ConfigError.
kvd::ModelInfo read_model(const std::string& path, bool allow_unused_tensors) {
  kvd::WeightLoadOptions load;
  load.max_seq_len = 1;
  load.allow_unused_tensors = allow_unused_tensors;
  kvd::ModelInfo m = kvd::read_model_info(path, load);
  m.config.max_seq_len = static_cast<int>(std::min<std::uint64_t>(m.file_context, kvd::kMaxModelContext));
  return m;
}

/// "f16 584.19 kB + f32 2.82 kB": the bytes of the weights by storage type.
std::string stored_as(const kvd::ModelInfo& m) {
  std::string s;
  for (const auto& [type, bytes] : m.bytes_by_type)
    s += msg(s.empty() ? "" : " + ", kvd::weight_type_name(type), " ", kvd::format_bytes(bytes));
  return s;
}

int run(const Options& o) {
  // Resolve the cache shape, the weights and the card into one PlanInput.
  kvd::PlanInput in;
  in.dtype = o.dtype;
  std::optional<kvd::ModelInfo> info;
  bool estimated = false;  // weight bytes of --weight-dtype's scheme rather than of the file
  std::string scheme_as;   // "Q4_K_M: q4_K 3.2 GB + q6_K ..." with --weight-dtype
  if (o.model) {
    auto reject = [](bool given, const char* opt) {
      if (given) throw ArgumentError(msg(opt, " cannot be combined with --model (the model file gives it)"));
    };
    reject(o.layers.has_value(), "--layers");
    reject(o.kv_heads.has_value(), "--kv-heads");
    reject(o.head_dim.has_value(), "--head-dim");
    reject(o.weights_gb.has_value(), "--weights-gb");
    reject(o.swa_pattern.has_value(), "--swa-pattern");
    reject(o.local_window.has_value(), "--local-window");
    info = read_model(*o.model, o.allow_unused_tensors);  // FileError/FormatError -> exit 1
    in = kvd::plan_input_for(info->config, o.dtype);
    // Without --weight-dtype: the exact bytes of the tensors as the file stores them.
    // With it, the bytes kvdecode-quantize would write with that scheme, tensor by tensor.
    in.weight_bytes = info->weight_bytes;
    in.active_weight_bytes = info->active_weight_bytes();
    if (o.weight_dtype) {
      const kvd::QuantScheme scheme = kvd::parse_quant_scheme(*o.weight_dtype);  // ArgumentError listing the names
      const kvd::SchemeBytes sb = kvd::scheme_weight_bytes(info->config, scheme);
      estimated = true;
      in.weight_bytes = sb.total;
      in.active_weight_bytes = info->config.active_weight_bytes(sb.total, sb.experts);
      scheme_as = msg(kvd::quant_scheme_name(scheme), ":");
      for (const auto& [type, bytes] : sb.by_type)
        scheme_as += msg(scheme_as.back() == ':' ? " " : " + ", kvd::weight_type_name(type), " ", kvd::format_bytes(bytes));
    }
  } else {
    if (o.weight_dtype) throw ArgumentError("--weight-dtype needs --model (use --weights-gb to give weight bytes)");
    std::string missing;
    if (!o.layers) missing += " --layers";
    if (!o.kv_heads) missing += " --kv-heads";
    if (!o.head_dim) missing += " --head-dim";
    if (!missing.empty()) throw ArgumentError(msg("missing cache shape:", missing, " (or give --model PATH)"));
    in.n_layers = *o.layers;
    in.n_kv_heads = *o.kv_heads;
    in.head_dim = *o.head_dim;
    if (o.weights_gb) in.weight_bytes = static_cast<std::uint64_t>(std::llround(*o.weights_gb * 1e9));
  }
  // A context longer than kvdecode's limit (2^20 positions) was capped when the file was
  // read; without --tokens the plan is for the cap, which is said, never left silent.
  const bool context_capped =
      info && !o.tokens && static_cast<std::uint64_t>(info->config.max_seq_len) < info->file_context;
  // --cache-type-k / --cache-type-v override --dtype for the keys or the values.
  const kvd::DType key_type = o.cache_type_k.empty() ? o.dtype : kvd::parse_dtype(o.cache_type_k);
  const kvd::DType value_type = o.cache_type_v.empty() ? o.dtype : kvd::parse_dtype(o.cache_type_v);
  in.dtype = key_type;
  if (value_type != key_type) in.value_dtype = value_type;
  if (o.tokens) in.tokens_per_sequence = *o.tokens;
  if (in.tokens_per_sequence == 0) throw ArgumentError("missing --tokens N (positions per sequence)");
  // Layers that attend to a window keep a ring of it (kv_cache.hpp): the model's, or --swa-pattern's.
  if (info) {
    kvd::set_window_layers(in, info->config);
  } else if (o.swa_pattern || o.local_window) {
    if (!o.swa_pattern || !o.local_window)
      throw ArgumentError(msg(o.swa_pattern ? "--swa-pattern needs --local-window" : "--local-window needs --swa-pattern"));
    kvd::ModelConfig layers;
    layers.n_layers = in.n_layers;
    layers.swa_pattern = *o.swa_pattern;
    layers.local_window = *o.local_window;
    kvd::set_window_layers(in, layers);
  }

  const kvd::GpuSpec* gpu = nullptr;
  if (o.gpu) {
    gpu = kvd::find_gpu(*o.gpu);
    if (!gpu) throw ArgumentError(msg("--gpu: unknown card '", *o.gpu, "' (see --list-gpus, or give --memory-gb)"));
    in.memory_gb = gpu->memory_gb;
    in.bandwidth_gb_s = gpu->bandwidth_gb_s;
  }
  if (o.memory_gb) in.memory_gb = *o.memory_gb;
  if (o.bandwidth_gb_s) in.bandwidth_gb_s = *o.bandwidth_gb_s;
  if (in.memory_gb == 0) throw ArgumentError("missing --memory-gb G or --gpu NAME");

  const kvd::MemoryPlan p = kvd::plan_memory(in);  // ArgumentError (overflow) -> exit 2

  // Sequences that fit for each compared cache dtype; nullopt where the byte count overflows.
  std::vector<std::optional<std::uint64_t>> by_dtype;
  for (kvd::DType t : kCompared) {
    kvd::PlanInput other = in;
    other.dtype = t;
    other.value_dtype.reset();  // keys and values both of type t
    try {
      by_dtype.push_back(kvd::plan_memory(other).max_sequences);
    } catch (const ArgumentError&) {
      by_dtype.push_back(std::nullopt);
    }
  }

  std::ostream& os = std::cout;
  os << "KV cache plan: L=" << in.n_layers << " Hk=" << in.n_kv_heads << " Dh=" << in.head_dim << ", cache "
     << kvd::dtype_name(in.dtype) << (in.value_dtype ? msg(" keys + ", kvd::dtype_name(*in.value_dtype), " values") : std::string())
     << ", " << kvd::format_count(in.tokens_per_sequence) << " tokens per sequence\n";
  if (info) {
    row(os, "model", msg(*o.model, " (", info->description, ", ", info->config.summary(), ")"));
    if (in.tokens_per_sequence > info->file_context)
      row(os, "note", msg("--tokens exceeds the model's context of ", info->file_context, " positions"));
    if (context_capped)
      row(os, "note", msg("the model's context of ", info->file_context, " positions is capped at kvdecode's limit of ",
                          info->config.max_seq_len, " (planned for the cap; --tokens N plans another length)"));
  }
  if (gpu) row(os, "gpu", msg(gpu->name, " (nominal ", gpu->memory_gb, " GB, ", gpu->bandwidth_gb_s, " GB/s)"));
  row(os, "bytes per token", bytes_both(p.bytes_per_token));
  row(os, "bytes per sequence", bytes_both(p.bytes_per_sequence));
  if (in.window_layers > 0)
    row(os, "window layers", msg(in.window_layers, " of ", in.n_layers, " layers keep ",
                                 kvd::format_count(std::min(in.window_positions, in.tokens_per_sequence)),
                                 " positions (a ring of their window), the others every position"));
  if (info)
    row(os, "weights", msg(bytes_both(p.weight_bytes), ", ", kvd::format_count(info->config.n_params()),
                           " parameters as ", estimated ? scheme_as : stored_as(*info),
                           estimated ? " (as kvdecode-quantize would store them)" : ""));
  else if (o.weights_gb)
    row(os, "weights", bytes_both(p.weight_bytes));
  if (info && info->config.moe())
    row(os, "active weights", msg(bytes_both(p.active_weight_bytes), " read per token (", info->config.n_experts_used,
                                  " of ", info->config.n_experts, " experts per layer)"));
  else
    row(os, "weights", "unknown, not subtracted (give --weights-gb or --model)");
  row(os, "memory", bytes_both(p.memory_bytes));
  row(os, "KV budget", bytes_both(p.kv_budget_bytes));
  std::string fits = kvd::format_count(p.max_sequences);
  if (!p.weights_fit())
    fits += msg("  (weights ", kvd::format_bytes(p.weight_bytes), " exceed memory ", kvd::format_bytes(p.memory_bytes),
                ")");
  else if (p.max_sequences == 0)
    fits += msg("  (one sequence needs ", kvd::format_bytes(p.bytes_per_sequence), ", the KV budget is ",
                kvd::format_bytes(p.kv_budget_bytes), ")");
  row(os, "sequences that fit", fits);
  if (in.bandwidth_gb_s == 0) {
    row(os, "decode bound", "bandwidth unknown (give --gpu NAME or --bandwidth-gb-s B)");
  } else if (p.max_sequences == 0) {
    row(os, "decode bound", msg("none (nothing fits) at ", in.bandwidth_gb_s, " GB/s"));
  } else {
    const std::string caveat = p.weight_bytes == 0 ? ", weights unknown so KV reads only" : "";
    row(os, "decode bound, 1 seq",
        msg(rate(p.decode_tokens_per_second_bound), " tokens/s  (", in.bandwidth_gb_s, " GB/s over ",
            kvd::format_bytes(p.active_weight_bytes + p.bytes_per_sequence), " per token", caveat, ")"));
    row(os, msg("decode bound, ", kvd::format_count(p.max_sequences), " seq"),
        msg(rate(p.batched_tokens_per_second_bound), " tokens/s aggregate, ",
            rate(p.batched_tokens_per_second_bound / static_cast<double>(p.max_sequences)), " per sequence"));
  }
  std::string compare;
  for (std::size_t i = 0; i < by_dtype.size(); ++i) {
    compare += msg(i ? ", " : "", kvd::dtype_name(kCompared[i]), " ",
                   by_dtype[i] ? kvd::format_count(*by_dtype[i]) : std::string("overflow"));
  }
  row(os, "sequences by cache dtype", compare);

  if (o.json) {
    std::ostringstream j;
    j << "{\"n_layers\":" << in.n_layers << ",\"n_kv_heads\":" << in.n_kv_heads << ",\"head_dim\":" << in.head_dim
      << ",\"dtype\":" << json_string(kvd::dtype_name(in.dtype))
      << ",\"value_dtype\":" << json_string(kvd::dtype_name(in.value_dtype.value_or(in.dtype))) << ",\"tokens_per_sequence\":" << in.tokens_per_sequence
      << ",\"model\":" << (o.model ? json_string(*o.model) : "null")
      << ",\"model_format\":" << (info ? json_string(info->description) : "null")
      << ",\"model_context\":" << (info ? std::to_string(info->file_context) : std::string("null"))
      << ",\"context_capped\":" << (context_capped ? "true" : "false")
      << ",\"gpu\":" << (gpu ? json_string(gpu->name) : "null") << ",\"memory_gb\":" << json_number(in.memory_gb)
      << ",\"bandwidth_gb_s\":" << json_number(in.bandwidth_gb_s) << ",\"bytes_per_token\":" << p.bytes_per_token
      << ",\"bytes_per_sequence\":" << p.bytes_per_sequence << ",\"window_layers\":" << in.window_layers
      << ",\"window_positions\":" << in.window_positions << ",\"weight_bytes\":" << p.weight_bytes
      << ",\"active_weight_bytes\":" << p.active_weight_bytes
      << ",\"memory_bytes\":" << p.memory_bytes << ",\"kv_budget_bytes\":" << p.kv_budget_bytes
      << ",\"max_sequences\":" << p.max_sequences
      << ",\"decode_tokens_per_second_bound\":" << json_number(p.decode_tokens_per_second_bound)
      << ",\"batched_tokens_per_second_bound\":" << json_number(p.batched_tokens_per_second_bound)
      << ",\"max_sequences_by_dtype\":{";
    for (std::size_t i = 0; i < by_dtype.size(); ++i)
      j << (i ? "," : "") << json_string(kvd::dtype_name(kCompared[i])) << ":"
        << (by_dtype[i] ? std::to_string(*by_dtype[i]) : std::string("null"));
    j << "}}";
    os << j.str() << '\n';
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return kvd::cli::run_main("kvdecode-plan", [&] {
    std::string help;
    const Options o = parse_args(argc, argv, help);
    if (o.help) {
      std::cout << help;
      return 0;
    }
    if (o.list_gpus) {
      print_gpu_table(std::cout);
      return 0;
    }
    return run(o);
  });
}
