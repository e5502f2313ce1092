// Chat templates: renders a conversation (a list of role/content messages) into
// the prompt text an instruct model was trained on, with the model's own Jinja
// template, as Hugging Face does (transformers' apply_chat_template, which
// @huggingface/jinja mirrors): `messages`, `add_generation_prompt`, `bos_token`
// and `eos_token` are bound, and the template runs with trim_blocks and
// lstrip_blocks, loop controls ({% break %}, {% continue %}) and without a
// trailing newline.
//
// The engine (kvd::detail::jinja, in chat/jinja.hpp) implements the subset of
// Jinja that real chat templates use; every other construct ({% macro %},
// {% include %}, an unknown filter, test or method...) is a TemplateError naming
// it with its line and column. Templates come from downloaded files, so parsing
// and rendering are bounded (TemplateLimits): nesting depth, output size, loop
// iterations, work (every operation charges what it costs before doing it) and
// bytes built (sized before they are allocated); docs/limits.md lists them.
//
// Built-in templates (chatml, llama3, llama2, mistral, phi3) are Jinja sources
// rendered by the same engine, for models whose files carry no template.
//
// encode_chat() tokenizes a rendered conversation so that a BOS the template
// already wrote is not added a second time by the tokenizer's add_bos.
#pragma once

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvdecode/chat/jinja.hpp"
#include "kvdecode/io/json.hpp"
#include "kvdecode/error.hpp"
#include "kvdecode/io/gguf.hpp"
#include "kvdecode/text/text_tokenizer.hpp"
#include "kvdecode/text/tokenizer_json.hpp"

namespace kvd {

/// One message of a conversation: role ("system", "user", "assistant", "tool"...) and text.
struct ChatMessage {
  std::string role;
  std::string content;
};

/// The names builtin() accepts, for messages and --help.
constexpr const char* kBuiltinChatTemplates = "chatml, llama3, llama2, mistral, phi3";

class ChatTemplate {
 public:
  /// Largest tokenizer_config.json / chat_template.jinja read (real ones are < 1 MB).
  static constexpr std::uint64_t kMaxConfigBytes = std::uint64_t{64} << 20;

  /// Parses Jinja source. `where` names it in messages ("<where>:<line>:<col>: ...").
  /// Throws TemplateError on a syntax error, an unsupported construct (naming it) or a
  /// source over limits.max_source_bytes / nested deeper than limits.max_depth.
  static ChatTemplate parse(const std::string& source, const std::string& where = "chat template",
                            const TemplateLimits& limits = TemplateLimits{}) {
    ChatTemplate t;
    t.program_ = std::make_shared<const detail::jinja::Program>(detail::jinja::parse(source, where, limits));
    return t;
  }

  /// A built-in template: chatml, llama3, llama2, mistral or phi3, with that format's
  /// usual BOS/EOS text (replace them with set_special_tokens for another vocabulary).
  /// Throws ConfigError naming the list for any other name.
  static ChatTemplate builtin(const std::string& name) {
    const char* src = nullptr;
    std::string bos, eos;
    if (name == "chatml") {
      src = kChatml;
      eos = "<|im_end|>";
    } else if (name == "llama3") {
      src = kLlama3;
      bos = "<|begin_of_text|>";
      eos = "<|eot_id|>";
    } else if (name == "llama2") {
      src = kLlama2;
      bos = "<s>";
      eos = "</s>";
    } else if (name == "mistral") {
      src = kMistral;
      bos = "<s>";
      eos = "</s>";
    } else if (name == "phi3") {
      src = kPhi3;
      bos = "<s>";
      eos = "<|end|>";
    } else {
      throw ConfigError(detail::msg("unknown chat template '", name, "' (built-in templates: ", kBuiltinChatTemplates,
                                    ")"));
    }
    ChatTemplate t = parse(src, "built-in chat template " + name);
    t.set_special_tokens(bos, eos);
    return t;
  }

  /// The template in a GGUF's `tokenizer.chat_template`, with bos_token/eos_token the
  /// texts of tokenizer.ggml.bos_token_id / eos_token_id in tokenizer.ggml.tokens (left
  /// undefined when the id is absent). Throws ConfigError naming the file when it has no
  /// template, FormatError naming the key for a value of the wrong type or an id outside
  /// the token list, TemplateError for a template that does not parse.
  static ChatTemplate from_gguf(const GGUFFile& file) {
    if (!file.find("tokenizer.chat_template"))
      throw ConfigError(detail::msg(file.path(), ": no tokenizer.chat_template (choose a built-in with --chat-template: ",
                                    kBuiltinChatTemplates, ")"));
    ChatTemplate t = parse(file.get_string("tokenizer.chat_template"), file.path() + ": tokenizer.chat_template");
    auto token = [&](const char* key, std::string& text, bool& defined) {
      if (!file.find(key)) return;
      const std::uint64_t id = file.get_u64(key);
      const std::vector<std::string>& tokens = file.get_string_array("tokenizer.ggml.tokens");
      if (id >= tokens.size())
        throw FormatError(detail::msg(file.path(), ": ", key, " = ", id, " is outside tokenizer.ggml.tokens (",
                                      tokens.size(), " tokens)"));
      text = tokens[id];
      defined = true;
    };
    token("tokenizer.ggml.bos_token_id", t.bos_, t.bos_defined_);
    token("tokenizer.ggml.eos_token_id", t.eos_, t.eos_defined_);
    return t;
  }

  /// The template of a Hugging Face tokenizer_config.json: its `chat_template` (a string,
  /// or a list of {"name", "template"} of which "default" is used, or the only one), else
  /// the chat_template.jinja beside it; bos_token/eos_token from the config (strings or
  /// {"content": ...} AddedToken objects; null or absent leaves them undefined). Throws
  /// FileError if the file cannot be read, FormatError naming the file and key for invalid
  /// JSON or a value of the wrong type, ConfigError when there is no template,
  /// TemplateError for a template that does not parse.
  static ChatTemplate from_tokenizer_config(const std::string& path_to_tokenizer_config_json) {
    const std::string& path = path_to_tokenizer_config_json;
    const nlohmann::json cfg = detail::parse_json(detail::read_text_file(path, kMaxConfigBytes), path);
    if (!cfg.is_object()) throw FormatError(detail::msg(path, ": the root is not a JSON object"));
    std::string source, where = path + ": chat_template";
    const auto it = cfg.find("chat_template");
    if (it != cfg.end() && it->is_string()) {
      source = it->get<std::string>();
    } else if (it != cfg.end() && it->is_array()) {
      std::vector<std::string> names;
      const nlohmann::json* chosen = nullptr;
      for (std::size_t i = 0; i < it->size(); ++i) {
        const nlohmann::json& e = (*it)[i];
        if (!e.is_object() || !e.contains("name") || !e["name"].is_string() || !e.contains("template") ||
            !e["template"].is_string())
          throw FormatError(detail::msg(path, ": chat_template[", i, "] is not {\"name\": string, \"template\": string}"));
        names.push_back(e["name"].get<std::string>());
        if (names.back() == "default") chosen = &e;
      }
      if (!chosen && it->size() == 1) chosen = &(*it)[0];
      if (!chosen) {
        std::string list;
        for (const std::string& n : names) list += (list.empty() ? "" : ", ") + n;
        throw ConfigError(detail::msg(path, ": chat_template holds ", names.size(), " named templates (", list,
                                      ") and none is called 'default'"));
      }
      source = (*chosen)["template"].get<std::string>();
      where = detail::msg(path, ": chat_template '", (*chosen)["name"].get<std::string>(), "'");
    } else if (it != cfg.end() && !it->is_null()) {
      throw FormatError(detail::msg(path, ": chat_template is neither a string nor a list of named templates"));
    } else {
      const std::filesystem::path jinja = std::filesystem::path(path).parent_path() / "chat_template.jinja";
      std::error_code ec;
      if (!std::filesystem::is_regular_file(jinja, ec))
        throw ConfigError(detail::msg(path, ": no chat_template (and no chat_template.jinja beside it); choose a "
                                      "built-in with --chat-template: ", kBuiltinChatTemplates));
      source = detail::read_text_file(jinja.string(), kMaxConfigBytes);
      where = jinja.string();
    }
    ChatTemplate t = parse(source, where);
    auto token = [&](const char* key, std::string& text, bool& defined) {
      const auto v = cfg.find(key);
      if (v == cfg.end() || v->is_null()) return;
      if (v->is_string()) {
        text = v->get<std::string>();
      } else if (v->is_object() && v->contains("content") && (*v)["content"].is_string()) {
        text = (*v)["content"].get<std::string>();
      } else {
        throw FormatError(detail::msg(path, ": ", key, " is neither a string nor {\"content\": string}"));
      }
      defined = true;
    };
    token("bos_token", t.bos_, t.bos_defined_);
    token("eos_token", t.eos_, t.eos_defined_);
    return t;
  }

  /// The conversation as the template lays it out. `messages` binds a list of
  /// {"role", "content"} objects; add_generation_prompt, bos_token and eos_token are bound
  /// (the tokens stay undefined if the template's source gave none). Throws TemplateError
  /// (with line and column) when the template raises (raise_exception), performs an
  /// invalid operation (e.g. adds a string to a number) or exceeds its limits. The
  /// template is never modified: render may be called from several threads at once.
  std::string render(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const {
    namespace j = detail::jinja;
    KVD_ASSERT(program_);
    std::vector<j::Value> list;
    list.reserve(messages.size());
    for (const ChatMessage& m : messages) {
      auto d = std::make_shared<j::ValueDict>();
      d->items.emplace_back("role", j::Value::string(m.role));
      d->items.emplace_back("content", j::Value::string(m.content));
      list.push_back(j::Value::of_dict(std::move(d)));
    }
    std::vector<std::pair<std::string, j::Value>> globals;
    globals.emplace_back("messages", j::Value::of_list(std::move(list)));
    globals.emplace_back("add_generation_prompt", j::Value::boolean(add_generation_prompt));
    if (bos_defined_) globals.emplace_back("bos_token", j::Value::string(bos_));
    if (eos_defined_) globals.emplace_back("eos_token", j::Value::string(eos_));
    for (const auto& kv : variables_) globals.push_back(kv);
    return j::render(*program_, globals, limits_);
  }

  const std::string& bos_token() const { return bos_; }  ///< "" when undefined
  const std::string& eos_token() const { return eos_; }  ///< "" when undefined

  /// Binds bos_token and eos_token to these texts (both become defined). Never fails.
  void set_special_tokens(std::string bos, std::string eos) {
    bos_ = std::move(bos);
    eos_ = std::move(eos);
    bos_defined_ = eos_defined_ = true;
  }

  /// Binds one more variable for render(), given as JSON (objects keep their key order),
  /// e.g. set_variable("enable_thinking", "false") for Qwen3, or "tools" to a list of
  /// function schemas. Replaces an earlier value of the same name; messages,
  /// add_generation_prompt, bos_token and eos_token cannot be set this way. Throws
  /// ArgumentError naming the variable for invalid JSON or a reserved name (nothing changes).
  void set_variable(const std::string& name, const std::string& json) {
    if (name == "messages" || name == "add_generation_prompt" || name == "bos_token" || name == "eos_token")
      throw ArgumentError(detail::msg("template variable '", name, "' is bound by render() itself"));
    nlohmann::ordered_json j;
    try {
      j = detail::parse_json_text<nlohmann::ordered_json>(std::string_view(json), detail::msg("template variable '", name, "'"),
                                                          detail::JsonLimits{kMaxConfigBytes});
    } catch (const FormatError& e) {
      throw ArgumentError(e.what());
    }
    detail::jinja::Value v;
    try {
      v = detail::jinja::from_json(j);
    } catch (const TemplateError& e) {
      throw ArgumentError(detail::msg("template variable '", name, "': ", e.what()));
    }
    for (auto& kv : variables_)
      if (kv.first == name) {
        kv.second = std::move(v);
        return;
      }
    variables_.emplace_back(name, std::move(v));
  }

  /// Limits applied by render() (parsing used the ones given to parse()). Never fails.
  void set_limits(const TemplateLimits& limits) { limits_ = limits; }

 private:
  ChatTemplate() = default;

  // Built-ins, written from each format's documented layout.
  static constexpr const char* kChatml =
      "{%- for message in messages %}"
      "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
      "{%- endfor %}"
      "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";
  static constexpr const char* kLlama3 =
      "{{- bos_token }}"
      "{%- for message in messages %}"
      "{{- '<|start_header_id|>' + message.role + '<|end_header_id|>\\n\\n' + message.content | trim + '<|eot_id|>' }}"
      "{%- endfor %}"
      "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}";
  // Llama 2: the system prompt goes inside the first [INST] between <<SYS>> markers;
  // each user turn opens with BOS, each assistant turn ends with EOS.
  static constexpr const char* kLlama2 =
      "{%- if messages and messages[0].role == 'system' %}"
      "{%- set system = messages[0].content | trim %}{%- set turns = messages[1:] %}"
      "{%- else %}{%- set system = '' %}{%- set turns = messages %}{%- endif %}"
      "{%- for message in turns %}"
      "{%- if (message.role == 'user') != (loop.index0 % 2 == 0) %}"
      "{{- raise_exception('llama2 chat template: after an optional system message, roles must alternate "
      "user/assistant/user/...') }}"
      "{%- endif %}"
      "{%- if message.role == 'user' %}"
      "{%- set content = message.content | trim %}"
      "{%- if loop.first and system %}{%- set content = '<<SYS>>\\n' + system + '\\n<</SYS>>\\n\\n' + content %}"
      "{%- endif %}"
      "{{- bos_token + '[INST] ' + content + ' [/INST]' }}"
      "{%- else %}{{- ' ' + message.content | trim + ' ' + eos_token }}{%- endif %}"
      "{%- endfor %}";
  // Mistral instruct: BOS once, [INST] user [/INST]assistant</s>; a system message is
  // prepended to the first user message.
  static constexpr const char* kMistral =
      "{{- bos_token }}"
      "{%- if messages and messages[0].role == 'system' %}"
      "{%- set system = messages[0].content %}{%- set turns = messages[1:] %}"
      "{%- else %}{%- set system = '' %}{%- set turns = messages %}{%- endif %}"
      "{%- for message in turns %}"
      "{%- if (message.role == 'user') != (loop.index0 % 2 == 0) %}"
      "{{- raise_exception('mistral chat template: after an optional system message, roles must alternate "
      "user/assistant/user/...') }}"
      "{%- endif %}"
      "{%- if message.role == 'user' %}"
      "{%- if loop.first and system %}{{- '[INST] ' + system + '\\n\\n' + message.content + ' [/INST]' }}"
      "{%- else %}{{- '[INST] ' + message.content + ' [/INST]' }}{%- endif %}"
      "{%- else %}{{- message.content + eos_token }}{%- endif %}"
      "{%- endfor %}";
  // Phi-3: <|role|>\ncontent<|end|>\n per message, <|assistant|>\n to prompt a reply.
  static constexpr const char* kPhi3 =
      "{%- for message in messages %}"
      "{{- '<|' + message.role + '|>\\n' + message.content + '<|end|>\\n' }}"
      "{%- endfor %}"
      "{%- if add_generation_prompt %}{{- '<|assistant|>\\n' }}{%- endif %}";

  std::shared_ptr<const detail::jinja::Program> program_;
  std::string bos_, eos_;
  bool bos_defined_ = false, eos_defined_ = false;
  TemplateLimits limits_;
  std::vector<std::pair<std::string, detail::jinja::Value>> variables_;
};

/// The chat template that goes with the model or tokenizer at `path`, told apart by
/// content as load_tokenizer() does: a GGUF file's tokenizer.chat_template; a folder's
/// tokenizer_config.json; for a tokenizer.json (any name) or a tokenizer_config.json, the
/// tokenizer_config.json in its folder. Throws ConfigError naming the path when there is
/// no template (a llama2.c file, a folder or config without one: choose a built-in),
/// and as from_gguf / from_tokenizer_config do.
inline ChatTemplate load_chat_template(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (is_gguf_file(path)) return ChatTemplate::from_gguf(GGUFFile::open(path));
  fs::path cfg;
  if (fs::is_directory(path, ec)) {
    cfg = fs::path(path) / "tokenizer_config.json";
  } else if (fs::path(path).filename() == "tokenizer_config.json") {
    cfg = path;
  } else {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw FileError(detail::msg("cannot open ", path));
    char c = ' ';
    while (in.get(c) && (c == ' ' || c == '\t' || c == '\n' || c == '\r')) {
    }
    if (!in || c != '{')
      throw ConfigError(detail::msg(path, " holds no chat template (not a GGUF or Hugging Face tokenizer file); choose a "
                                    "built-in with --chat-template: ", kBuiltinChatTemplates));
    cfg = fs::path(path).parent_path() / "tokenizer_config.json";
  }
  if (!fs::is_regular_file(cfg, ec))
    throw ConfigError(detail::msg(path, ": no ", cfg.string(), " to take a chat template from; choose a built-in with "
                                  "--chat-template: ", kBuiltinChatTemplates));
  return ChatTemplate::from_tokenizer_config(cfg.string());
}

/// Ids of a rendered conversation: its text with special-token text parsed (so
/// "<|im_start|>" becomes that token), and BOS prepended when the tokenizer adds BOS
/// (add_bos()) unless the text already starts with it, as templates that write
/// bos_token do. No EOS is appended: the prompt ends where the model continues. Throws
/// as tok.encode does.
inline std::vector<int> encode_chat(const TextTokenizer& tok, const std::string& rendered) {
  std::vector<int> ids = tok.encode(rendered, false, true);
  if (tok.add_bos() && tok.bos_id() >= 0 && (ids.empty() || ids.front() != tok.bos_id()))
    ids.insert(ids.begin(), tok.bos_id());
  return ids;
}

}  // namespace kvd
