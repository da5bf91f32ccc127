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
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "loadscope/core/sample.h"

namespace loadscope::io {

class Prefetcher {
 public:
  static constexpr uint64_t kMaxSpan = 16u << 20;  // one GET covers at most this
  static constexpr uint64_t kMaxGap = 64u << 10;   // bytes between members read and thrown away
  static constexpr uint64_t kBlock = 4u << 20;     // dense reading: aligned blocks of an object

  // LOADSCOPE_REMOTE_CONNECTIONS (default 16) and LOADSCOPE_REMOTE_INFLIGHT (bytes, default
  // 256 MiB), as remote::options() read them.
  static std::unique_ptr<Prefetcher> from_environment();

  Prefetcher(int connections, uint64_t budget_bytes);
  ~Prefetcher();  // cancels what has not started, waits for what has
  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;

  // Starts fetching these members (remote, named by path); sets their `fetched`. Blocks while
  // over budget, unless `stop`.
  //
  // dense: every sample of the stream is this consumer's (one rank, no DataLoader workers), so
  // the neighbours of a member will be wanted soon even when the order is shuffled (a shuffle
  // buffer draws from the open shards). Members are then served from aligned kBlock blocks of
  // their object, each fetched once and kept (up to half the budget, least recently used
  // first): a shuffled epoch costs about one request per 4 MiB instead of one per sample.
  // Not dense (several ranks or workers share the stream): spans of this batch's members only,
  // so a rank never fetches what other ranks read.
  void fetch(const std::vector<Member*>& members, const std::atomic<bool>& stop,
             bool dense = false);

  // Fails what is queued and aborts what is in flight ("the loader stopped"); the next fetch()
  // starts afresh.
  void cancel();

  uint64_t held_bytes() const { return held_->load(std::memory_order_relaxed); }
  int connections() const { return static_cast<int>(threads_.size()); }

 private:
  using Future = std::shared_future<std::shared_ptr<const std::string>>;
  struct Task {
    std::string url;
    uint64_t offset = 0;
    int64_t length = -1;  // -1: the whole object
    bool block = false;   // a block: may end early, at the object's end
    std::promise<std::shared_ptr<const std::string>> promise;
  };
  void run();
  // Queues a task once the budget allows (earlier batches' bytes only: see fetch()).
  void enqueue(Task task, uint64_t& own, const std::atomic<bool>& stop);
  void fetch_spans(std::vector<Member*> members, uint64_t& own, const std::atomic<bool>& stop);
  Future block(const std::string& url, uint64_t index, uint64_t& own, const std::atomic<bool>& stop,
               std::unordered_set<std::string>& used);

  uint64_t budget_;
  std::shared_ptr<std::atomic<uint64_t>> held_;  // shared with the spans' deleters
  std::mutex mutex_;
  std::condition_variable work_cv_, space_cv_;
  std::deque<Task> queue_;
  struct Block {
    Future future;
    std::list<std::string>::iterator lru;
  };
  std::unordered_map<std::string, Block> blocks_;  // "url#index", under mutex_
  std::list<std::string> blocks_lru_;              // most recent first
  bool stopping_ = false;
  std::atomic<bool> cancelled_{false};  // watched by the transfers (remote::set_thread_cancel_flag)
  std::vector<std::thread> threads_;
};

}  // namespace loadscope::io
