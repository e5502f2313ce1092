// Conversations: one KV cache kept across the turns of a chat, so that each
// turn prefills only the tokens the cache does not already hold.
//
// Conversation works on tokens. Each turn is given the whole conversation so
// far as tokens (the new rendering of every message, with the generation
// prompt), finds the longest common prefix with the tokens it has cached,
// rewinds the cache to it (a template that rewrites earlier text, or a reply
// that re-tokenizes differently, costs only the positions after the first
// difference), prefills the rest and generates. The generated tokens, the stop
// token included, become part of the history. Because prefilling a suffix onto
// a cache is exact (chunked prefill == one prefill, see transformer.hpp), every
// logit is bit-identical to prefilling the whole rendering from an empty cache.
//
// A sliding-window cache cannot rewind past positions its ring (or a paged
// sequence's released blocks) no longer holds; such a turn clears the cache and
// prefills the whole prompt, which is just as exact, and says so
// (TurnResult::window_reprefill).
//
// Chat, below, is the text layer: it keeps the messages, renders them with a
// caller-given renderer (a chat template), encodes the result and runs a turn.
// It is a template on the message type so that any {role, content} struct
// serves (kvd::ChatMessage of chat_template.hpp).
//
// Invariant kept by every call, also when one throws: the cache holds the K and
// V of tokens()[0, cache().length()), and tokens() has at most one more entry
// (the last generated token, which no forward has consumed yet).
#pragma once

#include <algorithm>
#include <chrono>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "kvdecode/cache/cache_interface.hpp"
#include "kvdecode/error.hpp"
#include "kvdecode/generate/generate.hpp"
#include "kvdecode/model/transformer.hpp"

namespace kvd {

struct ConversationOptions {
  /// false: every turn clears the cache and prefills the whole prompt (the
  /// baseline that reuse is compared with; results are bit-identical either way).
  bool reuse_cache = true;
};

/// What one turn (or one Conversation::extend_to) did.
struct TurnResult {
  std::vector<int> tokens;           ///< generated tokens, the stop token included
  StopReason stop = StopReason::kMaxTokens;
  int prompt_tokens = 0;             ///< tokens of the whole conversation this turn was given
  int reused = 0;                    ///< positions [0, reused) kept in the cache
  int prefilled = 0;                 ///< positions run through prefill: prompt_tokens - reused
  int dropped = 0;                   ///< cached positions rewound away (the new tokens differ there)
  int first_new = 0;                 ///< first position this turn added; logit rows are delivered from here
  bool window_reprefill = false;     ///< a sliding window could not rewind: the whole prompt was prefilled
  double prefill_seconds = 0;        ///< rewind + prefill: time to the first token's logits
  double decode_seconds = 0;         ///< decode steps after it
  int decode_steps = 0;
};

/// Length of the longest common prefix of a and b. Never fails.
inline int common_prefix_length(const std::vector<int>& a, const std::vector<int>& b) {
  const std::size_t n = std::min(a.size(), b.size());
  std::size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return static_cast<int>(i);
}

/// A conversation's token history and the cache holding it, for one model.
/// Cache is KVCache<T, S>, PagedSequence<T, S> or any type of the cache interface
/// with length(), capacity(), clear() and truncate(int). The model must outlive the
/// Conversation; a PagedSequence's pool too. Not thread-safe (one model, one workspace).
template <class T, class Cache>
class Conversation {
  static_assert(detail::check_cache_interface<Cache, T>());

 public:
  /// Takes an empty cache for `model`'s shape.
  /// Throws CacheMismatchError if the cache's shape is not the model's, ArgumentError
  /// if it is not empty (use adopt() for a cache that already holds known tokens).
  Conversation(Transformer<T>& model, Cache cache, ConversationOptions options = {})
      : model_(&model), cache_(std::move(cache)), options_(options) {
    check_shape(cache_);
    if (cache_.length() != 0)
      throw ArgumentError(detail::msg("Conversation needs an empty cache, this one holds ", cache_.length(),
                                      " positions of unknown tokens (use adopt(cache, tokens))"));
  }

  Cache& cache() { return cache_; }
  const Cache& cache() const { return cache_; }
  Transformer<T>& model() const { return *model_; }
  const ConversationOptions& options() const { return options_; }
  void set_options(const ConversationOptions& o) { options_ = o; }
  /// The conversation's tokens: every cached position, then possibly the last
  /// generated token (a stop token included), not yet fed to the model.
  const std::vector<int>& tokens() const { return history_; }

  /// Forgets the history and clears the cache. Never fails.
  void reset() {
    cache_.clear();
    history_.clear();
  }

  /// Replaces the cache by one that already holds the K and V of `tokens` (a
  /// prompt cache restored from a file, see prompt_cache.hpp).
  /// Throws (the conversation unchanged) CacheMismatchError if the cache's shape is
  /// not the model's, ArgumentError if tokens.size() != cache.length(), TokenError if
  /// a token is outside [0, vocab_size).
  void adopt(Cache cache, std::vector<int> tokens) {
    check_shape(cache);
    if (static_cast<int>(tokens.size()) != cache.length())
      throw ArgumentError(detail::msg("adopt: ", tokens.size(), " tokens given for a cache of ", cache.length(),
                                      " positions (they must be the cached positions' tokens)"));
    check_tokens(tokens);
    cache_ = std::move(cache);
    history_ = std::move(tokens);
  }

  /// Declares that cache(), filled in place while tokens() was empty (e.g. by
  /// restore_prompt_cache(path, conversation.cache(), id)), holds the K and V of `tokens`.
  /// Throws ArgumentError if tokens.size() != cache().length(), TokenError if a token is
  /// outside [0, vocab_size); the cache is then cleared and tokens() left empty.
  void adopt(std::vector<int> tokens) {
    try {
      if (!history_.empty()) throw ArgumentError("adopt(tokens): the conversation already has a history (reset() it)");
      if (static_cast<int>(tokens.size()) != cache_.length())
        throw ArgumentError(detail::msg("adopt: ", tokens.size(), " tokens given for a cache of ", cache_.length(),
                                        " positions (they must be the cached positions' tokens)"));
      check_tokens(tokens);
    } catch (...) {
      reset();
      throw;
    }
    history_ = std::move(tokens);
  }

  /// Makes the cache hold exactly `tokens`: keeps the longest common prefix with
  /// tokens() that is cached, rewinds the rest, prefills tokens[reused, n).
  /// `on_logits`, if given, sees the logits of every position in [first_new, n),
  /// where first_new = min(common prefix, cached length): the positions whose rows
  /// were not delivered before for the same tokens.
  /// Result: tokens() == tokens and cache().length() == tokens.size().
  /// Throws, with nothing changed: TokenError for a token outside [0, vocab_size);
  /// CacheFullError if tokens.size() > cache().capacity(). Throws OutOfBlocksError
  /// (a paged pool without the blocks) after the rewind: the cache and tokens() then
  /// hold the kept prefix.
  TurnResult extend_to(const std::vector<int>& tokens, const LogitsCallback<T>& on_logits = {}) {
    check_tokens(tokens);
    check_fits(tokens.size());
    const auto t0 = std::chrono::steady_clock::now();
    TurnResult r = rewind_to_prefix(tokens);
    if (r.reused < static_cast<int>(tokens.size())) {
      const std::vector<int> rest(tokens.begin() + r.reused, tokens.end());
      const bool all_rows = static_cast<bool>(on_logits);
      auto logits = model_->prefill(rest, cache_, all_rows);
      if (all_rows)
        for (long i = 0; i < logits.rows(); ++i) {
          const int pos = r.reused + static_cast<int>(i);
          if (pos >= r.first_new) on_logits(pos, logits.row(i).data(), model_->config().vocab_size);
        }
    }
    history_ = tokens;
    r.prefill_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return r;
  }

  /// One turn: `prompt` is the whole conversation so far (every message rendered
  /// again, with the generation prompt). extend_to(prompt minus its last token),
  /// then generate() from the last token with `opt` and `hooks`.
  /// hooks.choose sees the whole history (prompt and tokens generated so far), as
  /// generate() on the whole prompt would give it; hooks.on_logits sees positions
  /// from first_new on (every prompt position from there only with
  /// hooks.all_prompt_logits, else the last one), then each generated one.
  /// The generated tokens, stop token included, are appended to tokens().
  /// Tokens and logits are bit-identical to generate(model, prompt, empty cache, opt).
  /// Throws, with nothing changed: TokenError for an empty prompt or a token outside
  /// [0, vocab_size); CacheFullError if the prompt exceeds cache().capacity();
  /// ArgumentError if opt.use_cache is false. Later failures (OutOfBlocksError from a
  /// paged pool) leave the invariant above: tokens() holds what was produced.
  TurnResult turn(const std::vector<int>& prompt, const GenerateOptions& opt, const GenerateHooks<T>& hooks = {}) {
    if (prompt.empty()) throw TokenError("a conversation turn needs a prompt of at least one token");
    if (!opt.use_cache) throw ArgumentError("a conversation turn runs with the cache (GenerateOptions::use_cache = true)");
    check_tokens(prompt);
    check_fits(prompt.size());
    const int n = static_cast<int>(prompt.size());
    const std::vector<int> head(prompt.begin(), prompt.end() - 1);
    TurnResult r = extend_to(head, hooks.all_prompt_logits ? hooks.on_logits : LogitsCallback<T>());
    r.first_new = std::min(r.first_new, n - 1);
    r.prompt_tokens = n;
    r.prefilled = n - r.reused;
    history_.push_back(prompt.back());

    GenerateHooks<T> h;
    h.all_prompt_logits = false;  // generate() sees one prompt token: the last
    h.on_logits = hooks.on_logits;
    if (hooks.choose) {
      std::vector<int> full = head;  // the whole history for the chooser, as generate(prompt) would pass it
      h.choose = [&, full](const T* l, int v, const std::vector<int>& seq) mutable {
        full.resize(head.size());
        full.insert(full.end(), seq.begin(), seq.end());
        return hooks.choose(l, v, full);
      };
    }
    h.on_token = [&](int t) {
      history_.push_back(t);
      if (hooks.on_token) hooks.on_token(t);
    };
    GenerateResult<T> g = generate(*model_, std::vector<int>{prompt.back()}, cache_, opt, h);
    r.tokens = std::move(g.tokens);
    r.stop = g.stop;
    r.prefill_seconds += g.prefill_seconds;
    r.decode_seconds = g.decode_seconds;
    r.decode_steps = g.decode_steps;
    return r;
  }

 private:
  void check_shape(const Cache& c) const {
    if (c.shape() != CacheShape::of(model_->config()))
      throw CacheMismatchError("Conversation: the cache's shape is not the model's (layers, KV heads, head_dim, "
                               "max_seq_len and sliding_window must agree)");
  }
  void check_tokens(const std::vector<int>& tokens) const {
    const int V = model_->config().vocab_size;
    for (std::size_t i = 0; i < tokens.size(); ++i)
      if (tokens[i] < 0 || tokens[i] >= V)
        throw TokenError(detail::msg("conversation token ", tokens[i], " at index ", i, " is outside [0, vocab_size = ",
                                     V, ")"));
  }
  void check_fits(std::size_t n) const {
    if (n > static_cast<std::size_t>(cache_.capacity()))
      throw CacheFullError(detail::msg("the conversation has ", n, " tokens, more than the cache's capacity of ",
                                       cache_.capacity(), " positions"));
  }

  // Rewinds the cache to the longest prefix it can keep for `tokens`; fills in
  // reused, dropped, first_new and window_reprefill. history_ = the cached tokens after it.
  TurnResult rewind_to_prefix(const std::vector<int>& tokens) {
    TurnResult r;
    r.prompt_tokens = static_cast<int>(tokens.size());
    const int cached = cache_.length();
    r.first_new = std::min(common_prefix_length(tokens, history_), cached);
    int keep = options_.reuse_cache ? r.first_new : 0;
    if (keep < cached) {
      try {
        cache_.truncate(keep);
      } catch (const CacheFullError&) {  // a sliding window: the positions the kept prefix needs are gone
        cache_.clear();
        keep = 0;
        r.window_reprefill = true;
      }
    }
    history_.resize(static_cast<std::size_t>(keep));
    r.reused = keep;
    r.dropped = cached - keep;
    r.prefilled = r.prompt_tokens - keep;
    return r;
  }

  Transformer<T>* model_;
  Cache cache_;
  ConversationOptions options_;
  std::vector<int> history_;  // (cache_.length() or cache_.length() + 1) the conversation's tokens
};

/// Renders messages to the text a model reads: a chat template. Called with the
/// whole conversation each turn; add_generation_prompt opens the assistant's turn.
template <class Message>
using ChatRenderer = std::function<std::string(const std::vector<Message>& messages, bool add_generation_prompt)>;

/// The text side of a conversation: messages, rendered by a ChatRenderer,
/// encoded, and run as Conversation turns.
/// Message: any struct with std::string members `role` and `content`, built as
/// Message{role, content} (kvd::ChatMessage). The Conversation must outlive the Chat.
template <class T, class Cache, class Message>
class Chat {
 public:
  using Encoder = std::function<std::vector<int>(const std::string& text)>;   ///< text -> ids (specials parsed)
  using Decoder = std::function<std::string(const std::vector<int>& ids)>;    ///< ids -> text

  /// `messages` are the opening ones (a system prompt). Never fails.
  Chat(Conversation<T, Cache>& conversation, ChatRenderer<Message> render, Encoder encode, Decoder decode,
       std::vector<Message> messages = {})
      : conversation_(&conversation), render_(std::move(render)), encode_(std::move(encode)),
        decode_(std::move(decode)), messages_(std::move(messages)) {}

  const std::vector<Message>& messages() const { return messages_; }
  Conversation<T, Cache>& conversation() const { return *conversation_; }

  /// The prompt tokens of the conversation with `user_message` added: the rendering
  /// with the generation prompt, encoded. Throws what the renderer or encoder throws.
  std::vector<int> prompt_for(const std::string& user_message) const {
    std::vector<Message> m = messages_;
    m.push_back(Message{std::string("user"), user_message});
    return encode_(render_(m, true));
  }

  /// Adds the user message, renders and encodes every message with the generation
  /// prompt, runs Conversation::turn, and adds the reply (the generated tokens
  /// decoded, without a final stop token) as an assistant message; the reply's text is
  /// returned in `text`. Throws what the renderer, the encoder or turn() throws; the
  /// messages are then unchanged.
  TurnResult reply(const std::string& user_message, const GenerateOptions& opt, const GenerateHooks<T>& hooks = {},
                   std::string* text = nullptr) {
    const std::vector<int> prompt = prompt_for(user_message);
    TurnResult r = conversation_->turn(prompt, opt, hooks);
    std::vector<int> content = r.tokens;
    if (r.stop == StopReason::kStopToken && !content.empty()) content.pop_back();
    std::string said = decode_(content);
    messages_.push_back(Message{std::string("user"), user_message});
    messages_.push_back(Message{std::string("assistant"), said});
    if (text) *text = std::move(said);
    return r;
  }

 private:
  Conversation<T, Cache>* conversation_;
  ChatRenderer<Message> render_;
  Encoder encode_;
  Decoder decode_;
  std::vector<Message> messages_;
};

}  // namespace kvd
