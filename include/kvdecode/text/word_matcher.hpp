// WordMatcher: for every position of a text, the longest word of a fixed list
// that starts there, in one pass over the text. The tokenizers use it for their
// added tokens (BpeTokenizer splits the raw text on them, leftmost-longest).
//
// It is an Aho–Corasick automaton over the reversed words, run from the text's
// end to its start: the words ending at a position of the reversed text are the
// words starting there in the text, and the longest of them is the first word on
// the automaton state's suffix chain. A pass costs O(text) whatever the words'
// lengths (a walk of the plain trie from every position costs O(text x longest
// word)).
//
// The trie is stored flat, in breadth-first order, so a node's children are
// consecutive and sorted by byte: per node a first-child index, its byte, its
// suffix link, its word and the nearest word on its suffix chain (two of these:
// any word, or only unflagged ones), 21 bytes per node, at most one node per byte
// of the words. Building needs, besides, 4 bytes per word and 12 per node of the
// widest level.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace kvd::detail {

class WordMatcher {
 public:
  WordMatcher() = default;

  /// Builds the automaton over `words` (a word's index is its place in the list;
  /// empty words are never matched). `flagged[k]` marks words that a search may
  /// leave out (the tokenizers flag their special tokens). When several words are
  /// equal, the first one stands for them. Throws std::bad_alloc only.
  WordMatcher(const std::vector<std::string>& words, const std::vector<bool>& flagged) {
    const auto nw = static_cast<std::uint32_t>(words.size());
    std::vector<std::uint32_t> order;
    order.reserve(nw);
    for (std::uint32_t k = 0; k < nw; ++k)
      if (!words[k].empty()) order.push_back(k);
    // Sorted by the reversed word, comparing unsigned bytes; equal words keep
    // their list order, so the first of them comes first.
    auto rev_less = [&](std::uint32_t a, std::uint32_t b) {
      const std::string& x = words[a];
      const std::string& y = words[b];
      const std::size_t n = std::min(x.size(), y.size());
      for (std::size_t i = 1; i <= n; ++i) {
        const auto cx = static_cast<unsigned char>(x[x.size() - i]), cy = static_cast<unsigned char>(y[y.size() - i]);
        if (cx != cy) return cx < cy;
      }
      return x.size() < y.size();
    };
    std::stable_sort(order.begin(), order.end(), rev_less);
    auto byte_at = [&](std::uint32_t k, std::size_t depth) {
      const std::string& w = words[k];
      return static_cast<unsigned char>(w[w.size() - 1 - depth]);
    };

    // Level by level: each node owns the range of `order` whose reversed words
    // start with its path; the words exactly as long as the path sort first.
    struct Span { std::uint32_t node, lo, hi; };
    std::vector<Span> level{{0, 0, static_cast<std::uint32_t>(order.size())}}, next;
    first_child_.push_back(1);
    label_.push_back(0);
    word_.push_back(-1);
    for (std::size_t depth = 0; !level.empty(); ++depth) {
      next.clear();
      for (const Span& sp : level) {
        std::uint32_t lo = sp.lo;
        if (depth > 0) {
          if (lo < sp.hi && words[order[lo]].size() == depth) word_[sp.node] = static_cast<std::int32_t>(order[lo]);
          while (lo < sp.hi && words[order[lo]].size() == depth) ++lo;
        }
        first_child_[sp.node] = static_cast<std::uint32_t>(label_.size());
        while (lo < sp.hi) {
          const unsigned char c = byte_at(order[lo], depth);
          std::uint32_t hi = lo + 1;
          while (hi < sp.hi && byte_at(order[hi], depth) == c) ++hi;
          const auto child = static_cast<std::uint32_t>(label_.size());
          label_.push_back(c);
          word_.push_back(-1);
          first_child_.push_back(0);
          next.push_back({child, lo, hi});
          lo = hi;
        }
      }
      level.swap(next);
    }
    const auto nodes = static_cast<std::uint32_t>(label_.size());
    first_child_.push_back(nodes);  // the end of the last node's children
    std::vector<std::uint32_t>().swap(order);

    for (std::uint32_t c = 0; c < 256; ++c) root_[c] = child(0, static_cast<unsigned char>(c));
    fail_.assign(nodes, 0);
    out_.assign(nodes, 0);
    out_plain_.assign(nodes, 0);
    for (std::uint32_t v = 0; v < nodes; ++v) {  // breadth-first: a suffix link points to a shallower node
      for (std::uint32_t u = first_child_[v]; u < first_child_[v + 1]; ++u) {
        std::uint32_t f = 0;
        if (v != 0) {
          f = fail_[v];
          std::uint32_t g = child(f, label_[u]);
          while (g == 0 && f != 0) {
            f = fail_[f];
            g = child(f, label_[u]);
          }
          f = g;
        }
        fail_[u] = f;
        const std::int32_t w = word_[u];
        out_[u] = w >= 0 ? u : out_[f];
        out_plain_[u] = w >= 0 && !(static_cast<std::size_t>(w) < flagged.size() && flagged[static_cast<std::size_t>(w)])
                            ? u
                            : out_plain_[f];
      }
    }
  }

  bool empty() const { return label_.size() <= 1; }

  /// Bytes the automaton holds.
  std::size_t memory_bytes() const {
    return first_child_.size() * 4 + label_.size() + fail_.size() * 4 + word_.size() * 4 + out_.size() * 4 +
           out_plain_.size() * 4 + sizeof root_;
  }

  /// Sets best[i], for every i in [0, n), to the index of the longest word that
  /// starts at s[i] (leaving out flagged words when skip_flagged), or -1. Never throws
  /// but std::bad_alloc (best takes 4 bytes per byte of s). If `steps` is given, it
  /// receives the number of automaton moves made (at most 2n: linear time).
  void longest_at(const char* s, std::size_t n, bool skip_flagged, std::vector<std::int32_t>& best,
                  std::size_t* steps = nullptr) const {
    best.assign(n, -1);
    if (steps) *steps = 0;
    if (empty()) return;
    const std::vector<std::uint32_t>& out = skip_flagged ? out_plain_ : out_;
    std::uint32_t v = 0;
    std::size_t moves = 0;
    for (std::size_t j = n; j-- > 0;) {
      const auto c = static_cast<unsigned char>(s[j]);
      std::uint32_t g = v == 0 ? root_[c] : child(v, c);
      ++moves;
      while (g == 0 && v != 0) {
        v = fail_[v];
        g = v == 0 ? root_[c] : child(v, c);
        ++moves;
      }
      if (steps) *steps = moves;
      v = g;
      const std::uint32_t o = out[v];
      if (o != 0) best[j] = word_[o];
    }
  }

 private:
  // The child of v by byte c, or 0 (the root is nobody's child).
  std::uint32_t child(std::uint32_t v, unsigned char c) const {
    std::uint32_t lo = first_child_[v], hi = first_child_[v + 1];
    while (lo < hi) {
      const std::uint32_t mid = lo + (hi - lo) / 2;
      if (label_[mid] < c) lo = mid + 1;
      else hi = mid;
    }
    return lo < first_child_[v + 1] && label_[lo] == c ? lo : 0;
  }

  std::vector<std::uint32_t> first_child_;  // (nodes + 1) children of v: [first_child_[v], first_child_[v + 1])
  std::vector<unsigned char> label_;        // (nodes) byte of the edge into the node
  std::vector<std::uint32_t> fail_;         // (nodes) longest proper suffix that is a node
  std::vector<std::int32_t> word_;          // (nodes) word ending here, or -1
  std::vector<std::uint32_t> out_;          // (nodes) nearest node with a word on the suffix chain, or 0
  std::vector<std::uint32_t> out_plain_;    // (nodes) the same among unflagged words
  std::uint32_t root_[256] = {};            // the root's child by byte, or 0
};

}  // namespace kvd::detail
