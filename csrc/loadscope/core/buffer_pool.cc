#include <cstdlib>
#include <new>

#include "loadscope/core/batch.h"

namespace loadscope {

std::shared_ptr<BufferPool> BufferPool::create(size_t block_bytes, size_t keep_free) {
  return std::shared_ptr<BufferPool>(new BufferPool(block_bytes, keep_free));
}

BufferPool::~BufferPool() {
  for (auto* b : free_) std::free(b);
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
  std::free(block);
}

size_t BufferPool::blocks_allocated() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return allocated_;
}

}  // namespace loadscope
