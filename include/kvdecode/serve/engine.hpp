// Engine: a Scheduler (scheduler.hpp) on a thread of its own, for a server whose
// requests arrive on other threads. submit() and cancel() only put the request in
// an inbox and wake the loop, which moves the inbox into the scheduler between
// steps; callbacks run on the loop thread. GenerationService is the interface the
// HTTP handlers (api.hpp) see, whatever the cache's storage type.
//
// A step that throws (a NumericError from a model with non-finite weights, an
// allocation failure) ends every request then live with FinishReason::kError; the
// loop goes on serving new ones.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <limits>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "kvdecode/serve/request_error.hpp"
#include "kvdecode/serve/scheduler.hpp"

namespace kvd {

/// What the HTTP handlers need from the generation side. Thread-safe.
class GenerationService {
 public:
  virtual ~GenerationService() = default;
  /// A fresh request id. Never throws.
  virtual long next_id() = 0;
  /// Queues a job (see Scheduler::submit). Throws RequestError (400 for a bad job,
  /// 503 when the queue is full) or ConfigError, with nothing queued.
  virtual void submit(long id, ScheduledJob job, JobCallbacks callbacks) = 0;
  /// Asks for request `id` to end (on_finish(kCancelled) follows unless it already
  /// finished). Never throws beyond bad_alloc.
  virtual void cancel(long id) = 0;
  /// The scheduler's counters and state after its last step. Never throws.
  virtual SchedulerStats stats() const = 0;
  virtual int context() const = 0;     ///< positions per request
  virtual int vocab_size() const = 0;
};

template <class S = float>
class Engine : public GenerationService {
 public:
  /// Builds the scheduler (throws as Scheduler's constructor does) and starts the
  /// loop thread. `options.max_queue` is enforced here, across the inbox and the
  /// scheduler's queue. `model` must outlive the engine.
  Engine(Transformer<float>& model, SchedulerOptions options)
      : max_queue_(options.max_queue), sched_(model, unlimited_queue(options)) {
    stats_ = sched_.stats();
    thread_ = std::thread([this] { loop(); });
  }
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;
  /// Stops the loop; requests still live end with on_finish(kCancelled).
  ~Engine() override {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

  long next_id() override { return ++last_id_; }

  void submit(long id, ScheduledJob job, JobCallbacks callbacks) override {
    check_job(job, sched_.context(), sched_.vocab_size());
    {
      std::lock_guard<std::mutex> lk(mu_);
      const long waiting = static_cast<long>(inbox_.size()) + queued_.load();
      if (waiting >= max_queue_)
        throw RequestError(503, "server_error", "", "queue_full",
                           detail::msg("the server is busy: ", waiting, " requests wait (the limit is ", max_queue_,
                                       ", --max-queue); retry later"));
      inbox_.push_back(Submission{id, std::move(job), std::move(callbacks)});
    }
    cv_.notify_all();
  }

  void cancel(long id) override {
    {
      std::lock_guard<std::mutex> lk(mu_);
      cancels_.push_back(id);
    }
    cv_.notify_all();
  }

  SchedulerStats stats() const override {
    std::lock_guard<std::mutex> lk(stats_mu_);
    return stats_;
  }
  int context() const override { return sched_.context(); }
  int vocab_size() const override { return sched_.vocab_size(); }

  /// Runs `f(scheduler)` on the loop thread between steps and waits for it (tests
  /// use it to set the logits hook, clear the prefix cache or wait for idleness).
  /// Every submit() and cancel() that returned before this call has reached the
  /// scheduler when f runs, so f sees their effect. Rethrows what f throws.
  template <class F>
  void with_scheduler(F f) {
    std::mutex done_mu;
    std::condition_variable done_cv;
    bool done = false;
    std::exception_ptr err;
    {
      std::lock_guard<std::mutex> lk(mu_);
      tasks_.push_back([&] {
        try {
          f(sched_);
        } catch (...) {
          err = std::current_exception();
        }
        std::lock_guard<std::mutex> dl(done_mu);
        done = true;
        done_cv.notify_all();
      });
    }
    cv_.notify_all();
    std::unique_lock<std::mutex> dl(done_mu);
    done_cv.wait(dl, [&] { return done; });
    if (err) std::rethrow_exception(err);
  }

 private:
  struct Submission {
    long id;
    ScheduledJob job;
    JobCallbacks callbacks;
  };

  static SchedulerOptions unlimited_queue(SchedulerOptions o) {
    o.max_queue = std::numeric_limits<int>::max();
    return o;
  }

  void loop() {
    bool busy = false;
    for (;;) {
      std::vector<Submission> in;
      std::vector<long> cancels;
      std::vector<std::function<void()>> tasks;
      {
        std::unique_lock<std::mutex> lk(mu_);
        cv_.wait(lk, [&] { return stop_ || busy || !inbox_.empty() || !cancels_.empty() || !tasks_.empty(); });
        if (stop_) break;
        in.swap(inbox_);
        cancels.swap(cancels_);
        tasks.swap(tasks_);
        queued_ += static_cast<long>(in.size());
      }
      for (auto& s : in) {
        const auto on_finish = s.callbacks.on_finish;
        try {
          sched_.submit(s.id, std::move(s.job), std::move(s.callbacks));
        } catch (const std::exception&) {
          if (on_finish) on_finish(FinishReason::kError, 0);
        }
      }
      for (long id : cancels) sched_.cancel(id);
      for (auto& t : tasks) t();  // after the submissions and cancels that came before it
      try {
        busy = sched_.step();
      } catch (const std::exception&) {
        sched_.abort_all(FinishReason::kError);
        busy = false;
      }
      publish();
    }
    sched_.abort_all(FinishReason::kCancelled);
  }

  void publish() {
    SchedulerStats s = sched_.stats();
    queued_ = s.queued;
    std::lock_guard<std::mutex> lk(stats_mu_);
    stats_ = s;
  }

  const long max_queue_;
  Scheduler<S> sched_;
  std::atomic<long> last_id_{0};
  std::atomic<long> queued_{0};  // in the scheduler's queue after the last step
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::vector<Submission> inbox_;
  std::vector<long> cancels_;
  std::vector<std::function<void()>> tasks_;
  mutable std::mutex stats_mu_;
  SchedulerStats stats_;
  std::thread thread_;
};

}  // namespace kvd
