#include <algorithm>
#include <cstdlib>
#include <new>

#include "loadscope/core/batch.h"

namespace loadscope {

std::shared_ptr<BufferPool> BufferPool::create(size_t block_bytes, size_t keep_free, PinHooks hooks,
                                               PoolGauges gauges) {
  return std::shared_ptr<BufferPool>(
      new BufferPool(block_bytes, keep_free, hooks, std::move(gauges)));
}

BufferPool::~BufferPool() {
  for (auto* b : free_) free_block(b);
}

void BufferPool::free_block(uint8_t* block) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = std::find(pinned_blocks_.begin(), pinned_blocks_.end(), block);
    if (it != pinned_blocks_.end()) {
      pinned_blocks_.erase(it);
      --pinned_;
      if (hooks_.unpin) hooks_.unpin(block);  // before the memory goes back to malloc
      if (gauges_.pinned) gauges_.pinned->fetch_sub(block_bytes_, std::memory_order_relaxed);
    }
  }
  if (gauges_.allocated) gauges_.allocated->fetch_sub(block_bytes_, std::memory_order_relaxed);
  std::free(block);
}

size_t BufferPool::blocks_pinned() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return pinned_;
}

std::shared_ptr<uint8_t> BufferPool::acquire() {
  uint8_t* block = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!free_.empty()) {
      block = free_.back();
      free_.pop_back();
    } else {
      ++allocated_;
    }
  }
  if (block == nullptr) {
    // aligned_alloc needs a size that is a multiple of the alignment; never zero.
    size_t bytes = (block_bytes_ + 63) / 64 * 64;
    block = static_cast<uint8_t*>(std::aligned_alloc(64, bytes == 0 ? 64 : bytes));
    if (block == nullptr) {
      std::lock_guard<std::mutex> lock(mutex_);
      --allocated_;
      throw std::bad_alloc();
    }
    if (gauges_.allocated) gauges_.allocated->fetch_add(block_bytes_, std::memory_order_relaxed);
    if (hooks_.pin && hooks_.pin(block, bytes == 0 ? 64 : bytes, 0) == 0) {
      std::lock_guard<std::mutex> lock(mutex_);
      pinned_blocks_.push_back(block);
      ++pinned_;
      if (gauges_.pinned) gauges_.pinned->fetch_add(block_bytes_, std::memory_order_relaxed);
    }
  }
  auto self = shared_from_this();
  return std::shared_ptr<uint8_t>(block, [self](uint8_t* b) { self->release(b); });
}

void BufferPool::release(uint8_t* block) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (free_.size() < keep_free_) {
      free_.push_back(block);
      return;
    }
    --allocated_;
  }
  free_block(block);
}

size_t BufferPool::blocks_allocated() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return allocated_;
}

}  // namespace loadscope
