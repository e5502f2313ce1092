// StopStrings: ends a generated text before the first occurrence of any of the
// request's `stop` strings, as OpenAI's API does, while streaming. Text arrives in
// pieces (one token's worth at a time); a piece may end with the beginning of a
// stop string, so the matcher holds back the longest tail that could still become
// one and releases it once it cannot. The released text never contains a stop
// string, and its concatenation is the same however the text was cut into pieces.
#pragma once

#include <algorithm>
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace kvd {

class StopStrings {
 public:
  /// `stops` must be non-empty strings (the request parser checks it).
  explicit StopStrings(std::vector<std::string> stops) : stops_(std::move(stops)) {}

  /// Adds a piece; returns the text now safe to emit. After a stop string is found,
  /// returns what precedes it and stopped() is true; later pushes return "".
  /// Never throws beyond bad_alloc.
  std::string push(const std::string& piece) {
    if (stopped_) return "";
    held_ += piece;
    std::size_t first = std::string::npos;
    for (const std::string& s : stops_) first = std::min(first, held_.find(s));
    if (first != std::string::npos) {
      stopped_ = true;
      std::string out = held_.substr(0, first);
      held_.clear();
      return out;
    }
    const std::size_t keep = partial_tail();
    std::string out = held_.substr(0, held_.size() - keep);
    held_.erase(0, held_.size() - keep);
    return out;
  }

  /// The text held back, at the end of the generation (no stop string followed).
  std::string flush() {
    std::string out = stopped_ ? std::string() : held_;
    held_.clear();
    return out;
  }

  bool stopped() const { return stopped_; }  ///< a stop string was found

 private:
  // Length of the longest tail of held_ that is a proper prefix of a stop string.
  std::size_t partial_tail() const {
    std::size_t best = 0;
    for (const std::string& s : stops_) {
      const std::size_t most = std::min(held_.size(), s.size() - 1);
      for (std::size_t n = most; n > best; --n)
        if (held_.compare(held_.size() - n, n, s, 0, n) == 0) {
          best = n;
          break;
        }
    }
    return best;
  }

  std::vector<std::string> stops_;
  std::string held_;
  bool stopped_ = false;
};

}  // namespace kvd
