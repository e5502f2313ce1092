// kvdecode-generate's conversation modes and prompt cache (not part of the
// library): --conversation FILE.json, --chat, --system, --no-cache-reuse and
// --prompt-cache FILE, on kvd::Conversation / kvd::Chat (conversation.hpp) and
// the prompt cache files of prompt_cache.hpp.
//
// Rendering: the model's own chat template (kvd::ChatTemplate, chat_template.hpp, as
// kvd::open_model loads it: a GGUF's tokenizer.chat_template, a tokenizer.json's
// tokenizer_config.json), or
// the built-in --chat-template NAME; a model without one (a llama2.c tokenizer.bin)
// falls back to the built-in ChatML, with a note. Prompts are encoded with
// kvd::encode_chat (one BOS, even if the template wrote it).
#pragma once

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli.hpp"
#include "kvdecode/kvdecode.hpp"

namespace kvd::cli {

using Message = ChatMessage;

/// The chat template a conversation is rendered with: --chat-template NAME (a
/// built-in, with the vocabulary's BOS/EOS text), else the model's own (`m`, as
/// open_model() loaded it), else the built-in ChatML with a note on stderr saying why.
/// Throws ArgumentError for an unknown NAME.
inline ChatTemplate chat_template_for(const Params& o, const LoadedModel& m, const TextTokenizer& tok) {
  auto builtin = [&](const std::string& name) {
    ChatTemplate t = [&] {
      try {
        return ChatTemplate::builtin(name);
      } catch (const ConfigError& e) {
        throw ArgumentError(detail::msg("--chat-template: ", e.what()));
      }
    }();
    t.set_special_tokens(tok.bos_id() >= 0 ? tok.token_text(tok.bos_id()) : std::string(),
                         tok.eos_id() >= 0 ? tok.token_text(tok.eos_id()) : std::string());
    return t;
  };
  if (!o.chat_template.empty()) return builtin(o.chat_template);
  if (m.chat_template) return *m.chat_template;
  if (!o.quiet) std::cerr << "note: " << m.no_chat_template << "; using the built-in chatml\n";
  return builtin("chatml");
}

/// The user messages of a --conversation file: a JSON array of strings.
/// Throws FileError naming the file (unreadable, over 64 MiB), FormatError (not JSON,
/// nested deeper than kMaxJsonDepth), or FileError naming the index of an entry that is not a string.
inline std::vector<std::string> read_conversation_file(const std::string& path) {
  constexpr std::uint64_t kMaxBytes = std::uint64_t{64} << 20;
  std::string text;
  try {
    text = detail::read_text_file(path, kMaxBytes);
  } catch (const FileError& e) {
    throw FileError(detail::msg("--conversation '", path, "': cannot be opened (", e.what(), ")"));
  }
  const nlohmann::json j =
      detail::parse_json_text(std::string_view(text), detail::msg("--conversation '", path, "'"), detail::JsonLimits{kMaxBytes});
  if (!j.is_array() || j.empty())
    throw FileError(detail::msg("--conversation '", path, "': must be a non-empty JSON array of user messages (strings)"));
  std::vector<std::string> out;
  for (std::size_t i = 0; i < j.size(); ++i) {
    if (!j[i].is_string())
      throw FileError(detail::msg("--conversation '", path, "': entry ", i, " is ", j[i].type_name(), ", not a string"));
    out.push_back(j[i].get<std::string>());
  }
  return out;
}

/// Stop tokens of a run: the vocabulary's end-of-generation ids and the model's stop ids
/// (kvd::LoadedModel::stop_ids: those ids and a folder's generation_config.json EOS ids).
inline std::vector<int> stop_tokens_of(const Params& o, const TextTokenizer* tok) {
  std::vector<int> stop;
  if (o.ignore_eos) return stop;
  if (tok) stop = tok->eog_ids();
  for (int id : o.model_eos_ids)
    if (std::find(stop.begin(), stop.end(), id) == stop.end()) stop.push_back(id);
  return stop;
}

/// --conversation / --chat on an open model with a tokenizer (m.tokenizer not null).
/// Turn by turn: render every message with the generation prompt, encode, Conversation::turn (reusing the cache unless --no-cache-reuse),
/// decode the reply into an assistant message. Writes --dump-logits rows (each turn's
/// new positions), --ids (one line of generated ids per turn) and the --json object.
/// With --prompt-cache, the opening messages' rendering comes from / goes to the file.
/// Returns the exit status. Throws what the tokenizer, the model or the files throw.
template <class S, class SV = S>
int run_conversation(LoadedModel& m, const Params& o) {
  Transformer<float>& model = m.model;
  const TextTokenizer& tok = *m.tokenizer;
  const ModelConfig& c = model.config();
  const bool progress = !o.quiet;
  ConversationOptions copt;
  copt.reuse_cache = !o.no_cache_reuse;
  // A prompt cache file holds every layer's positions: local layers keep them all then.
  const LocalLayers local = o.prompt_cache.empty() ? LocalLayers::kWindow : LocalLayers::kEveryPosition;
  Conversation<float, KVCache<float, S, SV>> conv(model, KVCache<float, S, SV>(c, 0, 0, local), copt);
  std::vector<Message> opening;
  if (o.system) opening.push_back({"system", *o.system});
  const ChatTemplate tmpl = chat_template_for(o, m, tok);
  auto render = [&tmpl](const std::vector<Message>& m, bool gen) { return tmpl.render(m, gen); };
  Chat<float, KVCache<float, S, SV>, Message> chat(
      conv, render, [&](const std::string& text) { return encode_chat(tok, text); },
      [&](const std::vector<int>& ids) { return tok.decode(ids); }, opening);

  // --prompt-cache: the rendered opening messages (the system prompt) are what later
  // runs share; the first turn then prefills only what follows them.
  // (Turn 1's "reused" then counts the opening positions, whether restored or prefilled
  // here; prompt_cache_restored in --json says how many came from the file.)
  int pc_restored = -1;
  if (!o.prompt_cache.empty()) {
    const std::vector<int> head = encode_chat(tok, render(opening, false));
    double seconds = 0;
    pc_restored = prime_from_prompt_cache(conv, head, o, &seconds);
    if (progress)
      std::cerr << "prompt cache: " << pc_restored << " of " << head.size() << " opening tokens restored, "
                << head.size() - pc_restored << " prefilled in " << std::fixed << std::setprecision(2) << seconds * 1e3
                << " ms\n";
  }
  Sampler sampler(o.sampler);
  GenerateOptions gopt;
  gopt.max_new_tokens = o.steps;
  gopt.stop_tokens = stop_tokens_of(o, &tok);
  std::unique_ptr<detail::AtomicFileWriter> dump;  // replaces --dump-logits' file when the conversation ends
  if (!o.dump_logits.empty()) dump = std::make_unique<detail::AtomicFileWriter>(o.dump_logits);
  std::uint64_t rows = 0;
  std::ostringstream turns_json;
  int turn_no = 0;

  auto one_turn = [&](const std::string& user) {
    ++turn_no;
    const std::vector<int> prompt = chat.prompt_for(user);
    if (static_cast<int>(prompt.size()) >= conv.cache().capacity())
      throw CacheFullError(detail::msg("turn ", turn_no, ": the conversation has ", prompt.size(),
                                       " tokens; the context holds ", conv.cache().capacity()));
    GenerateOptions g = gopt;
    g.max_new_tokens = std::min(o.steps, conv.cache().capacity() - static_cast<int>(prompt.size()) + 1);
    GenerateHooks<float> h;
    h.choose = [&](const float* l, int n, const std::vector<int>& hist) {
      require_finite_logits(l, n, hist.empty() ? 0 : hist.size() - 1);
      return sampler.sample(l, n, hist);
    };
    if (dump) {
      h.all_prompt_logits = true;
      h.on_logits = [&](int, const float* l, int n) {
        dump->stream().write(reinterpret_cast<const char*>(l), static_cast<std::streamsize>(n * sizeof(float)));
        ++rows;
      };
    }
    std::unique_ptr<TokenStreamDecoder> stream;
    if (o.chat && !o.ids) {
      stream = std::make_unique<TokenStreamDecoder>(tok, true);
      h.on_token = [&](int t) {
        if (!tok.is_eog(t)) std::cout << stream->push(t) << std::flush;
      };
    }
    std::string text;
    const TurnResult r = chat.reply(user, g, h, &text);
    if (stream) std::cout << stream->flush() << "\n";
    else if (!o.ids && !o.json) std::cout << "user: " << user << "\nassistant: " << text << "\n";
    if (o.ids) {
      for (std::size_t i = 0; i < r.tokens.size(); ++i) std::cout << (i ? " " : "") << r.tokens[i];
      std::cout << "\n";
    }
    if (progress)
      std::cerr << std::fixed << std::setprecision(2) << "[turn " << turn_no << ": " << r.prompt_tokens
                << " prompt tokens, " << r.reused << " reused, " << r.prefilled << " prefilled"
                << (r.window_reprefill ? " (sliding window: re-prefilled)" : "") << "; first token after "
                << r.prefill_seconds * 1e3 << " ms; " << r.tokens.size() << " generated, "
                << stop_reason_name(r.stop) << "]\n";
    turns_json << (turn_no > 1 ? "," : "") << "{\"prompt_tokens\":" << r.prompt_tokens << ",\"reused\":" << r.reused
               << ",\"prefilled\":" << r.prefilled << ",\"dropped\":" << r.dropped << ",\"first_new\":" << r.first_new
               << ",\"generated_tokens\":" << r.tokens.size() << ",\"prefill_seconds\":" << json_number(r.prefill_seconds)
               << ",\"decode_seconds\":" << json_number(r.decode_seconds) << ",\"stop_reason\":\""
               << stop_reason_name(r.stop) << "\",\"generated_ids\":[";
    for (std::size_t i = 0; i < r.tokens.size(); ++i) turns_json << (i ? "," : "") << r.tokens[i];
    turns_json << "],\"text\":" << json_string(text) << "}";
  };

  if (o.conversation) {
    for (const std::string& user : read_conversation_file(*o.conversation)) one_turn(user);
  } else {
    if (progress) std::cerr << "chat: one message per line, end with EOF (Ctrl-D)\n";
    std::string line;
    while ((progress ? std::cerr << "> " << std::flush : std::cerr), std::getline(std::cin, line)) {
      if (line.empty()) continue;
      one_turn(line);
    }
  }
  if (dump) {
    dump->commit();
    if (progress) std::cerr << "wrote " << rows << " rows x " << c.vocab_size << " float32 logits to " << o.dump_logits << "\n";
  }
  if (o.json) {
    std::cout << "{\"model\":" << json_string(o.model ? *o.model : std::string()) << ",\"cache_reuse\":"
              << (o.no_cache_reuse ? "false" : "true") << ",\"cache_dtype\":\"" << o.cache_dtype << "\"";
    if (pc_restored >= 0) std::cout << ",\"prompt_cache_restored\":" << pc_restored;
    std::cout << ",\"turns\":[" << turns_json.str() << "]}" << std::endl;
  }
  return 0;
}

/// --prompt-cache FILE: restores the file into the (empty) conversation when it is
/// this model's (a file that is missing, damaged or of another model is ignored: a
/// warning), then extend_to(head) (prefilling what the file lacks) and saves the
/// cache holding `head` when the file did not already hold exactly it (a file that
/// cannot be written is a warning). Returns the positions of `head` restored.
/// Throws what prefill throws.
template <class Cache>
int prime_from_prompt_cache(Conversation<float, Cache>& conv, const std::vector<int>& head, const Params& o,
                            double* seconds) {
  const std::string& path = o.prompt_cache;
  Transformer<float>& model = conv.model();
  const std::uint64_t id = model_fingerprint(model);
  std::vector<int> restored;
  std::error_code ec;
  if (std::filesystem::exists(path, ec)) {
    try {
      restored = restore_prompt_cache(path, conv.cache(), id);
      conv.adopt(restored);
    } catch (const Error& e) {
      restored.clear();
      conv.reset();
      std::cerr << "warning: ignoring the prompt cache: " << e.what() << "; prefilling the whole prompt\n";
    }
  }
  const TurnResult pre = conv.extend_to(head);
  if (seconds) *seconds = pre.prefill_seconds;
  if (conv.tokens() != restored) {
    try {
      save_prompt_cache(conv.cache(), conv.tokens(), model.config().vocab_size, path, id);
      if (!o.quiet) std::cerr << "saved the prompt cache (" << head.size() << " tokens) to " << path << "\n";
    } catch (const Error& e) {
      std::cerr << "warning: the prompt cache was not saved: " << e.what() << "\n";
    }
  }
  return pre.reused;
}

/// --prompt-cache FILE for one prompt: restores the file when it is this model's
/// (a file that is missing, damaged or of another model is ignored: a warning,
/// then a full prefill), prefills the prompt's tokens the file lacks, saves the
/// cache after the prompt when the file did not already hold exactly it, then
/// generates. Tokens and logits are the same as without the file.
/// *kv_bytes = the cache's bytes used at the end, *reused = prompt positions restored.
/// Throws what generation throws; a file that cannot be written is a warning.
template <class S, class SV = S>
GenerateResult<float> generate_with_prompt_cache(Transformer<float>& model, const std::vector<int>& prompt,
                                                 const Params& o, const GenerateOptions& gopt,
                                                 const GenerateHooks<float>& hooks, std::uint64_t* kv_bytes,
                                                 int* reused) {
  const ModelConfig& c = model.config();
  // The file holds every layer's positions: local layers keep them all (LocalLayers).
  Conversation<float, KVCache<float, S, SV>> conv(model, KVCache<float, S, SV>(c, 0, 0, LocalLayers::kEveryPosition));
  const std::vector<int> head(prompt.begin(), prompt.end() - 1);
  double head_seconds = 0;
  const int restored = prime_from_prompt_cache(conv, head, o, &head_seconds);
  const TurnResult r = conv.turn(prompt, gopt, hooks);
  if (!o.quiet)
    std::cerr << "prompt cache: " << restored << " of " << prompt.size() << " prompt tokens restored, "
              << prompt.size() - restored << " prefilled\n";
  GenerateResult<float> g;
  g.tokens = r.tokens;
  g.stop = r.stop;
  g.prefill_seconds = head_seconds + r.prefill_seconds;
  g.decode_seconds = r.decode_seconds;
  g.decode_steps = r.decode_steps;
  *kv_bytes = conv.cache().bytes_used();
  *reused = restored;
  return g;
}

}  // namespace kvd::cli
