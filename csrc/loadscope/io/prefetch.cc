#include "loadscope/io/prefetch.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <map>
#include <unordered_set>

#include "loadscope/core/error.h"
#include "loadscope/io/file.h"
#include "loadscope/io/remote.h"

namespace loadscope::io {

std::unique_ptr<Prefetcher> Prefetcher::from_environment() {
  const remote::Options o = remote::options();  // read from the environment by the Python thread
  return std::make_unique<Prefetcher>(o.connections, o.inflight);
}

Prefetcher::Prefetcher(int connections, uint64_t budget_bytes)
    : budget_(budget_bytes), held_(std::make_shared<std::atomic<uint64_t>>(0)) {
  for (int i = 0; i < std::max(1, connections); ++i) threads_.emplace_back([this] { run(); });
}

Prefetcher::~Prefetcher() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    for (auto& t : queue_) {
      t.promise.set_exception(
          std::make_exception_ptr(ReadFailure("the loader stopped before this read")));
    }
    queue_.clear();
  }
  work_cv_.notify_all();
  space_cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void Prefetcher::cancel() {
  cancelled_.store(true);
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& t : queue_) {
    held_->fetch_sub(t.length > 0 ? static_cast<uint64_t>(t.length) : 0);
    t.promise.set_exception(
        std::make_exception_ptr(ReadFailure("the loader stopped before this read")));
  }
  queue_.clear();
  blocks_.clear();  // an epoch's blocks are not the next one's (nor kept alive by it)
  blocks_lru_.clear();
  space_cv_.notify_all();
}

void Prefetcher::fetch(const std::vector<Member*>& members, const std::atomic<bool>& stop,
                       bool dense) {
  cancelled_.store(false);
  uint64_t own = 0;  // reserved by this batch: not consumable until it is submitted
  // A node-local cache serves from local disk already: blocks would only copy more.
  if (!dense || (!members.empty() && node_cached(members.front()->path))) {
    return fetch_spans(members, own, stop);
  }
  std::vector<Member*> rest;
  std::unordered_set<std::string> used;  // blocks this batch holds: they count as its own bytes
  for (Member* m : members) {
    const uint64_t index = m->offset / kBlock;
    if (m->whole_file() || m->offset + static_cast<uint64_t>(m->length) > (index + 1) * kBlock) {
      rest.push_back(m);  // a whole object, or a member across a block boundary: a span
      continue;
    }
    m->fetched = block(m->path, index, own, stop, used);
    m->fetched_at = m->offset - index * kBlock;
  }
  fetch_spans(std::move(rest), own, stop);
}

Prefetcher::Future Prefetcher::block(const std::string& url, uint64_t index, uint64_t& own,
                                     const std::atomic<bool>& stop,
                                     std::unordered_set<std::string>& used) {
  const std::string key = url + "#" + std::to_string(index);
  const bool first_use = used.insert(key).second;
  std::unique_lock<std::mutex> lock(mutex_);  // cancel() clears the blocks from another thread
  auto it = blocks_.find(key);
  if (it != blocks_.end()) {
    blocks_lru_.splice(blocks_lru_.begin(), blocks_lru_, it->second.lru);
    // Fetched for an earlier batch and held by this one now: not released before it is
    // submitted, so the budget wait must not wait for it.
    if (first_use) own += kBlock;
    return it->second.future;
  }
  Task task;
  task.url = url;
  task.offset = index * kBlock;
  task.length = static_cast<int64_t>(kBlock);
  task.block = true;
  Future future = task.promise.get_future().share();
  blocks_lru_.push_front(key);
  blocks_.emplace(key, Block{future, blocks_lru_.begin()});
  // The blocks kept for later members take at most half the budget; members already handed a
  // block keep it alive until they are consumed.
  while (blocks_.size() * kBlock > budget_ / 2 && blocks_.size() > 1) {
    blocks_.erase(blocks_lru_.back());
    blocks_lru_.pop_back();
  }
  lock.unlock();
  enqueue(std::move(task), own, stop);
  return future;
}

void Prefetcher::enqueue(Task task, uint64_t& own, const std::atomic<bool>& stop) {
  const uint64_t reserve = task.length > 0 ? static_cast<uint64_t>(task.length) : 0;
  std::unique_lock<std::mutex> lock(mutex_);
  // Spans are released by the workers' samples, outside this lock: the wait polls too.
  auto others = [&] { return held_->load() - std::min(held_->load(), own); };
  auto room = [&] {
    return stopping_ || stop.load() || others() == 0 || others() + own + reserve <= budget_;
  };
  if (!room()) {
    // Blocks kept for later members are the first to go: kept, they would hold the budget
    // against the very batch that needs it.
    blocks_.clear();
    blocks_lru_.clear();
  }
  while (!room()) space_cv_.wait_for(lock, std::chrono::milliseconds(20));
  if (stopping_ || stop.load()) {
    task.promise.set_exception(
        std::make_exception_ptr(ReadFailure("the loader stopped before this read")));
    return;
  }
  held_->fetch_add(reserve);
  own += reserve;
  queue_.push_back(std::move(task));
  work_cv_.notify_one();
}

void Prefetcher::fetch_spans(std::vector<Member*> members, uint64_t& own,
                             const std::atomic<bool>& stop) {
  // Per object, in offset order; whole objects are spans of their own.
  std::map<std::string, std::vector<Member*>> by_url;
  for (Member* m : members) by_url[m->path].push_back(m);
  for (auto& [url, list] : by_url) {
    std::sort(list.begin(), list.end(),
              [](const Member* a, const Member* b) { return a->offset < b->offset; });
    size_t i = 0;
    while (i < list.size()) {
      Task task;
      task.url = url;
      std::vector<Member*> covered{list[i]};
      if (list[i]->whole_file()) {
        ++i;
      } else {
        task.offset = list[i]->offset;
        uint64_t end = list[i]->offset + static_cast<uint64_t>(list[i]->length);
        uint64_t useful = static_cast<uint64_t>(list[i]->length), waste = 0;
        for (++i; i < list.size() && !list[i]->whole_file(); ++i) {
          const uint64_t next_end = list[i]->offset + static_cast<uint64_t>(list[i]->length);
          const uint64_t gap = list[i]->offset > end ? list[i]->offset - end : 0;
          // Bytes read only to be thrown away stay below the bytes wanted: a shuffled batch's
          // scattered members cost at most twice their size, in shard order nearly nothing.
          if (gap > kMaxGap || waste + gap > useful ||
              std::max(end, next_end) - task.offset > kMaxSpan)
            break;
          waste += gap;
          useful += static_cast<uint64_t>(list[i]->length);
          end = std::max(end, next_end);
          covered.push_back(list[i]);
        }
        task.length = static_cast<int64_t>(end - task.offset);
      }
      Future future = task.promise.get_future().share();
      for (Member* m : covered) {
        m->fetched = future;
        m->fetched_at = m->whole_file() ? 0 : m->offset - task.offset;
      }
      enqueue(std::move(task), own, stop);
    }
  }
}

void Prefetcher::run() {
  while (true) {
    Task task;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      work_cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (stopping_ && queue_.empty()) return;
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    const uint64_t reserved = task.length > 0 ? static_cast<uint64_t>(task.length) : 0;
    remote::set_thread_cancel_flag(&cancelled_);
    try {
      auto bytes = std::make_unique<std::string>();
      // Through the read seam (file.h), so that a node-local cache serves it when configured.
      if (task.block) {
        storage_for(task.url).read(task.url, task.offset, task.length, *bytes, "", /*upto=*/true);
      } else if (task.length < 0) {
        read_file(task.url, *bytes);
      } else {
        read_range(task.url, task.offset, static_cast<uint64_t>(task.length), *bytes);
      }
      const uint64_t charge = reserved ? reserved : bytes->size();  // a whole object: known now
      if (!reserved) held_->fetch_add(charge);
      task.promise.set_value(std::shared_ptr<const std::string>(
          bytes.release(), [held = held_, charge](const std::string* p) {
            held->fetch_sub(charge);
            delete p;
          }));
    } catch (...) {
      held_->fetch_sub(reserved);
      task.promise.set_exception(std::current_exception());
    }
    space_cv_.notify_all();
  }
}

}  // namespace loadscope::io
