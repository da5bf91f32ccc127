#pragma once
// A batch as the engine delivers it: one block of memory holding every fixed-size field
// (pixels, integers) for all samples, plus per-sample strings. The block comes from a
// BufferPool and returns to it when the last reference (e.g. a torch tensor) is dropped.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace loadscope {

// Where a fixed-size field lives inside a batch block.
struct FixedSlot {
  size_t offset = 0;            // bytes from the block start to sample 0
  size_t bytes_per_sample = 0;  // sample i starts at offset + i * bytes_per_sample
};

struct BatchLayout {
  std::vector<FixedSlot> fixed;  // one per fixed-size field, in field order
  size_t bytes_per_batch = 0;    // total block size for a full batch
};

// Optional page-locking of pool blocks, e.g. cudaHostRegister/cudaHostUnregister found at run
// time in the CUDA runtime the process already loaded (loadscope does not link CUDA).
struct PinHooks {
  int (*pin)(void* ptr, size_t bytes, unsigned flags) = nullptr;  // returns 0 on success
  int (*unpin)(void* ptr) = nullptr;
};

// Live byte counts of a pool's blocks, for telemetry: added on allocation, taken off when a
// block goes back to the OS (the counters may outlive the pool's loader, hence shared).
struct PoolGauges {
  std::shared_ptr<std::atomic<int64_t>> allocated, pinned;
};

// Thread-safe pool of equally sized, 64-byte aligned blocks. Blocks handed out keep the pool
// alive, so a tensor may outlive the loader that produced it.
class BufferPool : public std::enable_shared_from_this<BufferPool> {
 public:
  // keep_free: blocks kept for reuse once returned; more are freed to the OS.
  static std::shared_ptr<BufferPool> create(size_t block_bytes, size_t keep_free,
                                            PinHooks hooks = {}, PoolGauges gauges = {});
  ~BufferPool();

  std::shared_ptr<uint8_t> acquire();
  size_t block_bytes() const { return block_bytes_; }
  // Blocks currently allocated (in use or free): the engine's own memory accounting.
  size_t blocks_allocated() const;
  // Blocks page-locked by the hooks (pinning can fail, e.g. past the locked-memory limit).
  size_t blocks_pinned() const;

 private:
  BufferPool(size_t block_bytes, size_t keep_free, PinHooks hooks, PoolGauges gauges)
      : block_bytes_(block_bytes),
        keep_free_(keep_free),
        hooks_(hooks),
        gauges_(std::move(gauges)) {}
  void release(uint8_t* block);
  void free_block(uint8_t* block);

  const size_t block_bytes_;
  const size_t keep_free_;
  const PinHooks hooks_;
  const PoolGauges gauges_;
  size_t pinned_ = 0;
  std::vector<uint8_t*> pinned_blocks_;
  mutable std::mutex mutex_;
  std::vector<uint8_t*> free_;
  size_t allocated_ = 0;
};

// A sample that was skipped (on_error="skip") or produced a warning.
struct SampleNote {
  std::string key;
  std::string reason;
  std::string kind;       // "read", "decode", "field", "source", or "warning"
  int64_t position = -1;  // stream position, -1 for source-level failures
};

struct Batch {
  int64_t index = -1;  // batch number within the epoch
  int size = 0;        // samples present (after removing skipped ones)
  std::shared_ptr<uint8_t> block;
  const BatchLayout* layout = nullptr;
  std::vector<std::string> keys;
  std::vector<int64_t> positions;
  std::vector<std::vector<std::string>> strings;  // [string field][sample]
  std::vector<SampleNote> skipped;                // failures removed from this batch
  std::vector<SampleNote> warnings;               // decoded, but the decoder complained

  uint8_t* fixed_data(size_t field) const { return block.get() + layout->fixed[field].offset; }
};

}  // namespace loadscope
