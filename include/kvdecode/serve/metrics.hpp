// Server metrics in Prometheus' text exposition format (version 0.0.4), for
// GET /metrics: request counts by endpoint and status, tokens prefilled, taken
// from the prefix cache and generated, the queue and the cache blocks now, and
// two latency histograms (time to first token, time per generated token after
// the first). Counters are updated from the HTTP threads; everything is
// thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "kvdecode/serve/scheduler.hpp"

namespace kvd {

/// A cumulative histogram with fixed upper bounds (seconds), as Prometheus keeps one.
class LatencyHistogram {
 public:
  explicit LatencyHistogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

  /// Counts one observation. Never throws.
  void observe(double seconds) {
    std::lock_guard<std::mutex> lk(mu_);
    std::size_t i = 0;
    while (i < bounds_.size() && seconds > bounds_[i]) ++i;
    ++counts_[i];
    sum_ += seconds;
    ++count_;
  }

  /// The histogram's lines for metric `name` (with its HELP and TYPE lines).
  std::string text(const std::string& name, const std::string& help) const {
    std::lock_guard<std::mutex> lk(mu_);
    std::ostringstream os;
    os << "# HELP " << name << ' ' << help << "\n# TYPE " << name << " histogram\n";
    std::uint64_t cum = 0;
    for (std::size_t i = 0; i < bounds_.size(); ++i) {
      cum += counts_[i];
      os << name << "_bucket{le=\"" << bounds_[i] << "\"} " << cum << '\n';
    }
    cum += counts_.back();
    os << name << "_bucket{le=\"+Inf\"} " << cum << '\n' << name << "_sum " << sum_ << '\n' << name << "_count " << count_ << '\n';
    return os.str();
  }

  std::uint64_t count() const {
    std::lock_guard<std::mutex> lk(mu_);
    return count_;
  }

 private:
  mutable std::mutex mu_;
  std::vector<double> bounds_;
  std::vector<std::uint64_t> counts_;
  double sum_ = 0;
  std::uint64_t count_ = 0;
};

/// Everything GET /metrics reports that the scheduler does not count itself.
class ServerMetrics {
 public:
  ServerMetrics()
      : ttft_({0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}),
        per_token_({0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1}) {}

  /// Counts one answered request. Never throws beyond bad_alloc.
  void count_request(const std::string& endpoint, int status) {
    std::lock_guard<std::mutex> lk(mu_);
    ++requests_[{endpoint, status}];
  }
  void observe_ttft(double seconds) { ttft_.observe(seconds); }
  void observe_per_token(double seconds) { per_token_.observe(seconds); }
  /// Requests answered so far with `endpoint` and `status`.
  std::uint64_t requests(const std::string& endpoint, int status) const {
    std::lock_guard<std::mutex> lk(mu_);
    const auto it = requests_.find({endpoint, status});
    return it == requests_.end() ? 0 : it->second;
  }

  /// The exposition text, with the scheduler's state `s`.
  std::string text(const SchedulerStats& s) const {
    std::ostringstream os;
    auto gauge = [&os](const char* name, const char* help, const char* type, double v) {
      os << "# HELP " << name << ' ' << help << "\n# TYPE " << name << ' ' << type << '\n' << name << ' ' << v << '\n';
    };
    os << "# HELP kvdecode_requests_total HTTP requests answered, by endpoint and status\n"
          "# TYPE kvdecode_requests_total counter\n";
    {
      std::lock_guard<std::mutex> lk(mu_);
      for (const auto& [key, n] : requests_)
        os << "kvdecode_requests_total{endpoint=\"" << key.first << "\",status=\"" << key.second << "\"} " << n << '\n';
    }
    gauge("kvdecode_prompt_tokens_prefilled_total", "prompt tokens run through the model", "counter",
          static_cast<double>(s.tokens_prefilled));
    gauge("kvdecode_prefix_cache_hit_tokens_total", "prompt tokens taken from the prefix cache instead of prefilled",
          "counter", static_cast<double>(s.tokens_cached));
    gauge("kvdecode_tokens_generated_total", "tokens generated", "counter", static_cast<double>(s.tokens_generated));
    gauge("kvdecode_steps_total", "batched forwards run", "counter", static_cast<double>(s.steps));
    gauge("kvdecode_requests_running", "requests generating now", "gauge", s.running);
    gauge("kvdecode_queue_depth", "requests waiting for a slot or cache blocks", "gauge", s.queued);
    gauge("kvdecode_cache_blocks_total", "blocks in the paged KV cache", "gauge", static_cast<double>(s.blocks_total));
    gauge("kvdecode_cache_blocks_in_use", "cache blocks held by running requests or the prefix cache", "gauge",
          static_cast<double>(s.blocks_in_use));
    gauge("kvdecode_cache_blocks_running", "cache blocks held by running requests", "gauge",
          static_cast<double>(s.blocks_running));
    gauge("kvdecode_prefix_cache_entries", "sequences kept in the prefix cache", "gauge", s.prefix_entries);
    os << ttft_.text("kvdecode_time_to_first_token_seconds", "time from a request's arrival to its first token");
    os << per_token_.text("kvdecode_time_per_output_token_seconds", "time between consecutive generated tokens");
    return os.str();
  }

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, std::uint64_t> requests_;
  LatencyHistogram ttft_, per_token_;
};

}  // namespace kvd
