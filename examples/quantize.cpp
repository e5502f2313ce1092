// kvdecode-quantize: a model (llama2.c checkpoint, GGUF file or Hugging Face
// folder) to a GGUF file of another storage type, with llama.cpp's per-tensor mix.
//
//   kvdecode-quantize ../shared/models/stories260K.bin out.gguf Q4_K_M --tokenizer ../shared/models/tok512.bin
//   kvdecode-quantize ../shared/models/gguf/stories260K-F32.gguf out.gguf Q8_0
//   kvdecode-quantize ../shared/models/hf/stories260K out.gguf F16
//
// Exit status: 0 on success, 1 if the input cannot be used or the output written, 2 on a bad argument.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "cli.hpp"
#include "kvdecode/convert/quantize.hpp"

namespace {

using kvd::ArgumentError;
using kvd::detail::msg;

const std::string kIntro = R"(kvdecode-quantize: store a model's weights as another type, in a GGUF file

Usage:
  kvdecode-quantize IN OUT TYPE [--tokenizer PATH] [--threads N] [--quiet]

IN is a llama2.c checkpoint, a GGUF file (any supported type: its metadata and
vocabulary are copied) or a Hugging Face Llama folder (its tokenizer.json is
converted to a GGUF vocabulary). OUT is the GGUF file to write.
TYPE is one of: )" + kvd::quant_scheme_names() + R"(.
The _M mixes give attn_v and ffn_down more bits on some layers as llama.cpp does;
the classifier gets q6_K (q8_0 for Q8_0); norms stay f32.)";

const char* const kOutro = R"(Progress (one line per tensor: name, type chosen, relative RMSE) goes to stderr,
then a summary: file size, bits per weight, worst and mean relative RMSE per kind.
Exit status: 0 success, 1 input unusable or output not written, 2 bad argument.
)";

std::string fixed(double v, int digits) {
  char b[64];
  std::snprintf(b, sizeof b, "%.*f", digits, v);
  return b;
}
std::string sci(double v) {
  char b[64];
  std::snprintf(b, sizeof b, "%.3e", v);
  return b;
}

int run(int argc, char** argv) {
  kvd::cli::Params p;
  kvd::cli::OptionTable table(kvd::cli::kQuantize, p, kIntro, kOutro);
  table.set_help("--tokenizer", "vocabulary (tokenizer.ggml.*) for a checkpoint or Hugging Face input: a tokenizer.json "
                 "(any name) or its folder, a llama2.c tokenizer.bin or a GGUF file; a Hugging Face folder's own "
                 "tokenizer.json is used without it; a GGUF input's own vocabulary is always copied");
  // Positional arguments (IN OUT TYPE) apart from the options.
  std::vector<const char*> opts{argv[0]};
  std::vector<std::string> pos;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.size() >= 2 && a[0] == '-') {
      opts.push_back(argv[i]);
      const kvd::cli::Option* o = table.find(a.substr(0, a.find('=')));
      if (o && o->takes_value() && a.find('=') == std::string::npos && i + 1 < argc) opts.push_back(argv[++i]);
    } else {
      pos.push_back(a);
    }
  }
  table.parse(static_cast<int>(opts.size()), opts.data());
  if (p.help || argc == 1) {
    std::cout << table.help();
    return 0;
  }
  if (pos.size() != 3)
    throw ArgumentError(msg("expected IN OUT TYPE, got ", pos.size(), " argument(s)"));
  const kvd::QuantScheme scheme = kvd::parse_quant_scheme(pos[2]);

  kvd::QuantizeOptions o;
  o.tokenizer = p.tokenizer;
  o.threads = p.threads;
  o.allow_unused_tensors = p.allow_unused_tensors;
  if (!p.quiet)
    o.progress = [](const kvd::QuantizedTensorReport& r) {
      std::string shape;
      for (auto d : r.ne) shape += (shape.empty() ? "" : ",") + std::to_string(d);
      std::cerr << "  " << r.name << " [" << shape << "] " << kvd::weight_type_name(r.source_type) << " -> "
                << kvd::weight_type_name(r.type) << "  rel. RMSE " << sci(r.rel_rmse) << '\n';
    };
  if (!p.quiet) std::cerr << "quantizing " << pos[0] << " to " << kvd::quant_scheme_name(scheme) << '\n';
  const kvd::QuantizeResult res = kvd::quantize_model(pos[0], pos[1], scheme, o);
  if (!res.unused_tensors.empty())
    std::cerr << "warning: " << res.unused_tensors.size() << " tensor(s) of " << pos[0]
              << " not used by the model were left out (--allow-unused-tensors), the first: " << res.unused_tensors[0] << '\n';
  if (!res.wrote_vocabulary)
    std::cerr << "note: no vocabulary written (give --tokenizer PATH to include one)\n";

  struct Stat {
    double worst = 0, sum = 0;
    int n = 0;
  };
  std::map<std::string, Stat> by_kind;
  // The matrix kinds of the tensor table (architecture.hpp): a layer's, then the classifier and the embedding.
  std::vector<std::string> kinds;
  for (const kvd::TensorSpec& s : kvd::kTensors)
    if (s.matrix && s.per_layer) kinds.push_back(kvd::tensor_kind(kvd::gguf_tensor_name(s, 0)).kind);
  for (kvd::TensorId id : {kvd::TensorId::kClassifier, kvd::TensorId::kTokenEmbedding})
    kinds.push_back(kvd::tensor_kind(kvd::tensor_spec(id).gguf).kind);
  for (const auto& t : res.tensors) {
    if (t.ne.size() < 2) continue;
    Stat& s = by_kind[kvd::tensor_kind(t.name).kind];
    s.worst = std::max(s.worst, t.rel_rmse);
    s.sum += t.rel_rmse;
    ++s.n;
  }
  std::cout << pos[1] << ": " << res.file_bytes << " bytes, " << fixed(res.bits_per_weight(), 3)
            << " bits per weight (matrices), " << res.tensors.size() << " tensors, input " << res.input_format << '\n';
  std::cout << "relative RMSE per tensor kind (worst / mean):\n";
  for (const std::string& k : kinds) {
    const auto it = by_kind.find(k);
    if (it == by_kind.end()) continue;
    std::cout << "  " << k << std::string(12 - k.size(), ' ') << sci(it->second.worst) << " / "
              << sci(it->second.sum / it->second.n) << '\n';
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return kvd::cli::run_main("kvdecode-quantize", [&] { return run(argc, argv); });
}
