#pragma once
// Sources produce one epoch's samples in a deterministic order. They are driven by a single
// planner thread, so implementations need no locking.

#include <cstdint>
#include <exception>

#include "loadscope/core/sample.h"

namespace loadscope {

struct EpochOrder {
  uint64_t seed = 0;
  int64_t epoch = 0;
  bool shuffle = false;
};

class Source {
 public:
  virtual ~Source() = default;

  // Samples per epoch, or -1 when only reading tells (tar shards without an index).
  virtual int64_t size() const = 0;

  // Resets to the start of an epoch whose order is a function of `order` alone.
  virtual void start_epoch(const EpochOrder& order) = 0;

  // Fills `out` with the next sample; false at the end of the epoch. A SampleError here is
  // a failure of the source itself (an unreadable or corrupt shard): the source has already
  // moved past it, so the caller may call next() again.
  virtual bool next(Sample& out) = 0;

  // Bytes this source read itself since start_epoch (tar shards); files named by path are
  // read by the workers and counted by the engine. Safe to call from any thread.
  virtual uint64_t bytes_read() const { return 0; }

  // Bytes of samples the source holds in memory (a shuffle buffer). Planner thread only.
  virtual uint64_t buffered_bytes() const { return 0; }

  // Advances by up to n samples the caller does not need (another worker's batches); returns
  // how many were skipped. Never throws: a source failure met while skipping belongs to the
  // worker that owns those samples, which reports it. Random-access sources override this.
  virtual int64_t skip(int64_t n) {
    Sample scratch;
    int64_t done = 0;
    while (done < n) {
      try {
        if (!next(scratch)) break;
        ++done;
      } catch (const std::exception&) {
        // reported by the owner of these samples
      }
    }
    return done;
  }
};

}  // namespace loadscope
