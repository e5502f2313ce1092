// Tokenizer encoding throughput on mixed English and code, one thread.
//
//   BM_TokenizerEncode/<vocabulary>
//       encodes the corpus once per iteration (no BOS, special-token text
//       parsed, as a prompt is). bytes_per_second is the throughput; the
//       counter tokens_per_byte shows how well the vocabulary compresses it.
//       Vocabularies: llama3-gguf and qwen3-gguf (vocabulary-only GGUFs),
//       llama3-json and qwen3-json (their tokenizer.json files), mistral-json
//       and llama-spm-gguf (SentencePiece).
//
// The corpus is this repository's own text: README.md and docs/*.md (English
// prose) followed by the library headers (C++ with English comments), read from the
// source tree at run time, so it is real mixed text rather than a repeated phrase.
// Each vocabulary is loaded once, outside the timing. The target is >= 2 MB/s.
//
// Run: build/bin/kvdecode-bench --benchmark_filter=BM_TokenizerEncode
#include <benchmark/benchmark.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "kvdecode/text/tokenizer_loader.hpp"

namespace {

namespace fs = std::filesystem;

const std::string kShared = KVDECODE_SHARED_DIR;

std::string slurp(const fs::path& p) { return kvd::detail::read_text_file(p.string(), std::uint64_t{1} << 30); }

// README.md, docs/*.md and include/kvdecode/**/*.hpp, each group in name order.
const std::string& corpus() {
  static const std::string text = [] {
    const fs::path root = fs::path(__FILE__).parent_path().parent_path();
    std::string t = slurp(root / "README.md");
    std::vector<fs::path> pages, headers;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(root / "docs", ec))
      if (e.path().extension() == ".md") pages.push_back(e.path());
    std::sort(pages.begin(), pages.end());
    for (const fs::path& p : pages) t += slurp(p);
    for (const auto& e : fs::recursive_directory_iterator(root / "include" / "kvdecode", ec))
      if (e.path().extension() == ".hpp") headers.push_back(e.path());
    std::sort(headers.begin(), headers.end());
    for (const fs::path& h : headers) t += slurp(h);
    return t;
  }();
  return text;
}

const kvd::TextTokenizer* tokenizer(const std::string& path) {
  static std::map<std::string, std::unique_ptr<kvd::TextTokenizer>> cache;
  auto it = cache.find(path);
  if (it == cache.end()) it = cache.emplace(path, kvd::load_tokenizer(path)).first;
  return it->second.get();
}

void BM_TokenizerEncode(benchmark::State& state, const std::string& rel) {
  const std::string path = kShared + "/models/" + rel;
  if (!fs::exists(path)) {
    state.SkipWithError(("shared file " + path + " is absent").c_str());
    return;
  }
  const std::string& text = corpus();
  if (text.size() < 100000) {
    state.SkipWithError("corpus (README.md, docs/ and headers) not found next to the benchmark source");
    return;
  }
  const kvd::TextTokenizer* tok = tokenizer(path);
  std::size_t n_ids = 0;
  for (auto _ : state) {
    const std::vector<int> ids = tok->encode(text, false, true);
    n_ids = ids.size();
    benchmark::DoNotOptimize(ids.data());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * text.size()));
  state.counters["tokens_per_byte"] = static_cast<double>(n_ids) / static_cast<double>(text.size());
  state.counters["corpus_bytes"] = static_cast<double>(text.size());
}

BENCHMARK_CAPTURE(BM_TokenizerEncode, llama3-gguf, std::string("vocab/vocab-llama3.gguf"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_TokenizerEncode, qwen3-gguf, std::string("vocab/vocab-qwen3.gguf"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_TokenizerEncode, llama3-json, std::string("tokenizer-json/llama3"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_TokenizerEncode, qwen3-json, std::string("tokenizer-json/qwen3"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_TokenizerEncode, mistral-json, std::string("tokenizer-json/mistral"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_TokenizerEncode, llama-spm-gguf, std::string("vocab/ggml-vocab-llama-spm.gguf"))
    ->Unit(benchmark::kMillisecond);

}  // namespace
