// The one JSON entry point (io/json.hpp) and its limits. Every document kind
// kvdecode reads (config.json, generation_config.json, tokenizer.json,
// tokenizer_config.json, a safetensors header, a shard index, a chat template
// variable) is made here from a valid shared file with one change: a value nested
// 100,000 levels deep (200 KB). Each gives a FormatError (ArgumentError for a
// template variable) naming the document, the depth and the limit, in well under a
// second, instead of overflowing the stack. Values nested within the limit are
// named in messages by their type, never dumped.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <vector>

#include "kvdecode/chat/chat_template.hpp"
#include "kvdecode/io/bytes.hpp"
#include "kvdecode/io/json.hpp"
#include "kvdecode/io/hf_model.hpp"
#include "kvdecode/io/safetensors.hpp"
#include "kvdecode/text/tokenizer_json.hpp"
#include "test_util.hpp"

using namespace kvd;
namespace fs = std::filesystem;

namespace {

using kvd_test::TempDir;
using kvd_test::read_all;

const std::string kShared = KVDECODE_SHARED_DIR;

#define SKIP_IF_MISSING(path) \
  if (!fs::exists(path)) GTEST_SKIP() << "shared test file not found: " << (path) << " (needs ../shared beside the checkout)"

constexpr int kDeep = 100000;

// `depth` nested arrays around 1: "[[[1]]]" for 3.
std::string nested(int depth) { return std::string(static_cast<std::size_t>(depth), '[') + "1" + std::string(static_cast<std::size_t>(depth), ']'); }

void write_all(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

// `text` with its first `from` replaced by `to`; fails the test if `from` is absent.
std::string replace_once(std::string text, const std::string& from, const std::string& to) {
  const auto at = text.find(from);
  EXPECT_NE(at, std::string::npos) << "'" << from << "' not found";
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

// Runs f, expecting an E whose message holds every piece.
template <class E>
void expect_refused(const std::function<void()>& f, const std::vector<std::string>& pieces) {
  try {
    f();
    ADD_FAILURE() << "no error";
  } catch (const E& e) {
    for (const auto& p : pieces) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << "'" << p << "' not in: " << e.what();
  }
}

const std::string kLimit = "exceeds the limit of " + std::to_string(kMaxJsonDepth);

TEST(JsonLimits, DepthIsCheckedWhileParsing) {
  EXPECT_NO_THROW(detail::parse_json_text(nested(kMaxJsonDepth), "t"));
  expect_refused<FormatError>([] { detail::parse_json_text(nested(kMaxJsonDepth + 1), "t.json"); },
                              {"t.json", "depth " + std::to_string(kMaxJsonDepth + 1), "at offset 128", kLimit});
  // Brackets inside strings (escaped quotes too) are not nesting.
  const std::string in_string = "[\"" + std::string(1000, '[') + "\\\"" + std::string(1000, '{') + "\"]";
  EXPECT_NO_THROW(detail::parse_json_text(in_string, "t"));
  expect_refused<FormatError>([] { detail::parse_json_text(std::string("{\"a\": 1, \"deep\": ") + nested(kDeep) + "}", "t.json"); },
                              {"t.json", "under key 'deep'", kLimit});
  expect_refused<FormatError>([] { detail::parse_json_text(std::string(100, ' '), "t.json", detail::JsonLimits{99}); },
                              {"t.json", "100 bytes", "limit of 99 bytes"});
}

TEST(JsonLimits, DeepConfigJson) {
  const std::string src = kShared + "/models/hf/stories260K/config.json";
  SKIP_IF_MISSING(src);
  TempDir dir;
  write_all(dir.file("config.json"), replace_once(read_all(src), "\"torch_dtype\": \"float32\"", "\"torch_dtype\": " + nested(kDeep)));
  expect_refused<FormatError>([&] { hf_model_info(dir.str()); }, {"config.json", "under key 'torch_dtype'", kLimit});
}

TEST(JsonLimits, DeepGenerationConfigJson) {
  TempDir dir;
  write_all(dir.file("generation_config.json"), "{\"bos_token_id\": 1, \"eos_token_id\": " + nested(kDeep) + "}");
  expect_refused<FormatError>([&] { hf_generation_eos_ids(dir.str()); },
                              {"generation_config.json", "under key 'eos_token_id'", kLimit});
}

TEST(JsonLimits, DeepTokenizerJson) {
  const std::string src = kShared + "/models/tokenizer-json/mistral/tokenizer.json";
  SKIP_IF_MISSING(src);
  const std::string text = replace_once(read_all(src), "\"truncation\": null", "\"truncation\": " + nested(kDeep));
  expect_refused<FormatError>([&] { tokenizer_json_spec(text, "", "t/tokenizer.json"); },
                              {"t/tokenizer.json", "under key 'truncation'", kLimit});
}

TEST(JsonLimits, DeepTokenizerConfigJson) {
  const std::string dir_src = kShared + "/models/tokenizer-json/mistral";
  SKIP_IF_MISSING(dir_src + "/tokenizer_config.json");
  const std::string cfg =
      replace_once(read_all(dir_src + "/tokenizer_config.json"), "\"add_bos_token\": true", "\"add_bos_token\": " + nested(kDeep));
  expect_refused<FormatError>([&] { tokenizer_json_spec(read_all(dir_src + "/tokenizer.json"), cfg, "t"); },
                              {"tokenizer_config.json", "under key 'add_bos_token'", kLimit});
  TempDir dir;
  write_all(dir.file("tokenizer_config.json"), cfg);
  expect_refused<FormatError>([&] { ChatTemplate::from_tokenizer_config(dir.file("tokenizer_config.json")); },
                              {"tokenizer_config.json", "under key 'add_bos_token'", kLimit});
}

// The safetensors file at `src` with its header JSON passed through `edit` (the
// 8-byte header length fixed to match).
std::string edit_safetensors_header(const std::string& src, const std::function<std::string(const std::string&)>& edit) {
  const std::string file = read_all(src);
  const std::uint64_t n = detail::load_u64_le(reinterpret_cast<const unsigned char*>(file.data()));
  const std::string header = edit(file.substr(8, static_cast<std::size_t>(n)));
  std::string out(8, '\0');
  detail::store_u64_le(reinterpret_cast<unsigned char*>(&out[0]), header.size());
  return out + header + file.substr(8 + static_cast<std::size_t>(n));
}

TEST(JsonLimits, DeepSafetensorsHeader) {
  const std::string src = kShared + "/models/hf/stories260K/model.safetensors";
  SKIP_IF_MISSING(src);
  TempDir dir;
  write_all(dir.file("model.safetensors"), edit_safetensors_header(src, [](const std::string& h) {
              return "{\"__deep__\": " + nested(kDeep) + "," + h.substr(1);
            }));
  expect_refused<FormatError>([&] { SafetensorsFile::open(dir.file("model.safetensors")); },
                              {"model.safetensors", "header", "under key '__deep__'", "at offset " + std::to_string(8 + 13 + kMaxJsonDepth - 1), kLimit});
}

TEST(JsonLimits, DeepShardIndex) {
  const std::string src = kShared + "/models/hf/stories260K-bf16-sharded/model.safetensors.index.json";
  SKIP_IF_MISSING(src);
  TempDir dir;
  write_all(dir.file("model.safetensors.index.json"),
            replace_once(read_all(src), "\"total_size\": 520064", "\"total_size\": 520064, \"deep\": " + nested(kDeep)));
  expect_refused<FormatError>([&] { SafetensorsModel::open(dir.str()); },
                              {"model.safetensors.index.json", "under key 'metadata'", kLimit});
}

TEST(JsonLimits, DeepTemplateVariable) {
  ChatTemplate t = ChatTemplate::builtin("chatml");
  expect_refused<ArgumentError>([&] { t.set_variable("tools", nested(kDeep)); }, {"template variable 'tools'", kLimit});
}

// Within the limit, a nested value where a scalar belongs is named by its type and
// size in the message, never dumped (a dump recurses once per level).
TEST(JsonLimits, NestedValuesAreNamedByTypeNotDumped) {
  const std::string src = kShared + "/models/hf/stories260K/config.json";
  SKIP_IF_MISSING(src);
  TempDir dir;
  const std::string nest = nested(kMaxJsonDepth - 2);  // at most 128 levels with the root and a list
  write_all(dir.file("config.json"), replace_once(read_all(src), "\"hidden_size\": 64", "\"hidden_size\": " + nest));
  expect_refused<FormatError>([&] { hf_model_info(dir.str()); },
                              {"field 'hidden_size' = an array of 1 item is not an integer"});
  write_all(dir.file("config.json"), replace_once(read_all(src), "\"LlamaForCausalLM\"", nest));
  expect_refused<FormatError>([&] { hf_model_info(dir.str()); },
                              {"field 'architectures' = an array of 1 item must be an array of one string"});
  write_all(dir.file("generation_config.json"), "{\"eos_token_id\": [2, " + nest + "]}");
  expect_refused<FormatError>([&] { hf_generation_eos_ids(dir.str()); }, {"eos_token_id[1] = an array of 1 item"});
  const std::string st = kShared + "/models/hf/stories260K/model.safetensors";
  SKIP_IF_MISSING(st);
  write_all(dir.file("model.safetensors"), edit_safetensors_header(st, [](const std::string& h) {
              return replace_once(h, "\"shape\":[512,64]", "\"shape\":[512," + nested(kMaxJsonDepth - 4) + "]");
            }));
  expect_refused<FormatError>([&] { SafetensorsFile::open(dir.file("model.safetensors")); },
                              {"tensor 'model.embed_tokens.weight' shape", "an array of 1 item is not a non-negative integer"});
}

}  // namespace
