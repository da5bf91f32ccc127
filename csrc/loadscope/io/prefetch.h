#pragma once
// Fetching remote members ahead of the workers that decode them.
//
// A worker that GETs its own member waits a round trip per member, and the engine runs only
// as many workers as cores: an epoch from object storage would run at (threads / latency)
// samples per second. Instead the planner hands each batch's remote members here before the
// workers see the batch (SampleProcessor::prepare). Members of one object that lie close
// together (an indexed shard's samples, in shard order) are coalesced into one ranged GET of up
// to kMaxSpan bytes; the GETs run on `connections` threads of their own. A worker then waits
// only for what has not arrived yet (Member::fetched), and that wait is its read time.
//
// Memory stays bounded: the planner waits while more than `budget_bytes` are fetched or being
// fetched and not yet consumed. Only earlier batches' bytes count against the wait (this
// batch's own spans cannot be consumed before it is submitted), so a batch larger than the
// budget waits for the earlier ones to drain and then goes ahead: no deadlock.

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "loadscope/core/sample.h"

namespace loadscope::io {

class Prefetcher {
 public:
  static constexpr uint64_t kMaxSpan = 16u << 20;  // one GET covers at most this
  static constexpr uint64_t kMaxGap = 64u << 10;  // bytes between members read and thrown away

  // LOADSCOPE_REMOTE_CONNECTIONS (default 16) and LOADSCOPE_REMOTE_INFLIGHT (bytes, default
  // 256 MiB), read from the environment.
  static std::unique_ptr<Prefetcher> from_environment();

  Prefetcher(int connections, uint64_t budget_bytes);
  ~Prefetcher();  // cancels what has not started, waits for what has
  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;

  // Starts fetching these members (remote, named by path); sets their `fetched`. Blocks while
  // over budget, unless `stop`.
  void fetch(const std::vector<Member*>& members, const std::atomic<bool>& stop);

  // Fails what is queued and aborts what is in flight ("the loader stopped"); the next fetch()
  // starts afresh.
  void cancel();

  uint64_t held_bytes() const { return held_->load(std::memory_order_relaxed); }
  int connections() const { return static_cast<int>(threads_.size()); }

 private:
  struct Task {
    std::string url;
    uint64_t offset = 0;
    int64_t length = -1;  // -1: the whole object
    std::promise<std::shared_ptr<const std::string>> promise;
  };
  void run();

  uint64_t budget_;
  std::shared_ptr<std::atomic<uint64_t>> held_;  // shared with the spans' deleters
  std::mutex mutex_;
  std::condition_variable work_cv_, space_cv_;
  std::deque<Task> queue_;
  bool stopping_ = false;
  std::atomic<bool> cancelled_{false};  // watched by the transfers (remote::set_thread_cancel_flag)
  std::vector<std::thread> threads_;
};

}  // namespace loadscope::io
