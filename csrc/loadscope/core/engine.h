#pragma once
// The batch engine: one EpochRun turns a Source into ordered batches.
//
//   planner thread: source.next() in stream order -> groups of batch_size samples ("jobs")
//   oneTBB arena:   one task per sample -> SampleProcessor::process writes into the job's block
//   consumer:       next() hands over jobs strictly in order once all their samples are done
//
// Determinism: a sample's bytes depend only on (data, config, seed, epoch, position); which
// thread processed it or when does not matter, and batches leave in order. So batches are
// identical for any thread count.
//
// Memory: at most `prefetch` jobs exist (being filled or ready), each owning one batch block;
// blocks handed to the consumer return to the pool when dropped.
//
// Thread-safety: next(), stop() and stats() may be called from any one consumer thread;
// stop() is idempotent and also runs in the destructor.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "loadscope/core/batch.h"
#include "loadscope/core/source.h"
#include "loadscope/core/tuner.h"
#include "loadscope/telemetry/telemetry.h"

namespace loadscope {

// Per-call context handed to SampleProcessor::process.
struct SampleContext {
  const EpochOrder* order = nullptr;
  std::string warning;      // set by the processor when a decoder complained but succeeded
  uint64_t bytes_read = 0;  // file bytes read by the processor (members that were paths)
  telemetry::Telemetry* telemetry = nullptr;  // null or disabled: record nothing
  telemetry::Slot* slot = nullptr;            // the calling thread's slot
  int decoder_threads = 1;  // threads a field may give its own decoder when told "auto"
};

// Turns one sample into slot `slot` of a batch. Called concurrently from many threads with
// distinct slots; implementations keep per-thread scratch. Throws SampleError on bad input.
class SampleProcessor {
 public:
  virtual ~SampleProcessor() = default;
  virtual std::vector<size_t> fixed_bytes_per_sample() const = 0;
  virtual size_t num_string_fields() const = 0;
  virtual void process(Sample& sample, Batch& batch, int slot, SampleContext& ctx) = 0;
  // Called by the planner with a batch's samples before any worker sees them, so that slow
  // reads can start early and in parallel (remote members: io/prefetch.h). May block for
  // back-pressure; returns promptly once `stop` is set.
  // `stride`: this run takes every stride-th batch of the stream (ranks x DataLoader workers);
  // 1 means every sample near these ones will be wanted soon, so reading ahead in large blocks
  // wastes nothing.
  virtual void prepare(std::vector<Sample>& samples, const std::atomic<bool>& stop,
                       int64_t stride) {}
  // The epoch is stopping: reads started by prepare() may be abandoned (their samples fail
  // with a read error nobody will see). Called before waiting for the workers.
  virtual void cancel() {}
};

enum class ErrorPolicy { kRaise, kSkip };

// What an epoch leaves out so that every rank gets the same number of batches (see
// EpochGeometry). torch spells these as DataLoader(drop_last=...) and
// DistributedSampler(drop_last=...); one enum keeps the three meanings apart.
enum class DropLast {
  kNone,    // keep every sample; pad the last step with the epoch's first samples
  kSteps,   // whole steps (rows) only: DataLoader's drop_last=True, all ranks together
  kUneven,  // only the n mod row samples that cannot be split evenly between the ranks:
            // DistributedSampler(drop_last=True); each rank's last batch may be short
};

// Which of the epoch's batches a rank takes (Note [ranks reading contiguous blocks]).
enum class Partition {
  kInterleave,  // batch k to rank k % row: a step of all ranks is `row` neighbouring batches
  kContiguous,  // rank r the r-th contiguous block of the full batches, then its last-row batch
};

// How an epoch of n samples is cut into batches that `row` consumers (data-parallel ranks)
// take in turn: batch k goes to rank k % row, so rank r's j-th batch is batch j*row + r and a
// "row" is one step of all ranks. Every rank must get the same number of batches, or the
// collectives of data-parallel training wait forever:
//  - kSteps: whole rows only; up to row*batch - 1 samples are left out of the epoch.
//  - kNone: full rows of full batches, then, if samples remain, one last row whose `row`
//    batches share the rest evenly (ceil(rest / row) each), the last ones padded with the
//    epoch's first samples: at most row - 1 repeats, as torch's DistributedSampler pads.
//  - kUneven: as kNone over the first n - n % row samples of the epoch order, which split
//    evenly: no padding, the epoch's last n % row samples left out, as DistributedSampler's
//    drop_last=True leaves out the tail of its order.
// With row = 1 this is DataLoader's batching (a short last batch, or none with kSteps).
// n < 0 (a streamed source of unknown size) supports only row = 1: batches of `batch` until
// the source ends.
struct EpochGeometry {
  EpochGeometry(int64_t n, int64_t batch, int64_t row, DropLast drop);
  int64_t batches() const { return batches_; }  // all ranks together; -1 when n is unknown
  int64_t length() const { return length_; }    // samples drawn, padding included; -1 unknown
  int64_t padding() const { return n_ < 0 ? 0 : std::max<int64_t>(0, length_ - n_); }
  int64_t start(int64_t k) const;  // first sample position of batch k
  // The batch of the epoch that slot k reads. Slots are dealt as batches are under
  // kInterleave (slot k is rank k % row's (k / row)-th), so ownership, resume points and
  // batch sizes are the same under both partitions; only the samples behind a slot differ.
  int64_t batch_of_slot(int64_t k, Partition partition) const;
  int64_t size(int64_t k) const;  // its size (0 past the end)
  // Samples rank r draws in an epoch: all of them (padding included), and those that are
  // not padding (positions < n). -1 when n is unknown.
  int64_t rank_length(int64_t rank) const;
  int64_t rank_samples(int64_t rank) const;

 private:
  int64_t n_, batch_, row_;  // n_: the samples the epoch uses (kUneven: fewer than given)
  int64_t full_ = 0;         // batches of `batch` samples
  int64_t tail_size_ = 0;    // size of each batch of the last row (0: none)
  int64_t batches_ = -1, length_ = -1;
};

struct EngineOptions {
  int threads = 1;
  int batch_size = 1;
  int prefetch = 2;  // jobs in flight or ready, >= 1
  DropLast drop_last = DropLast::kNone;
  ErrorPolicy on_error = ErrorPolicy::kRaise;
  int64_t max_errors = -1;     // under kSkip: more failures than this raise BudgetError; -1 = none
  double max_error_rate = -1;  // under kSkip: failures / max(samples seen, 100) above this raise
  int64_t batch_offset = 0;    // this consumer takes batches k with k % batch_stride == offset
  int64_t batch_stride = 1;    // (ranks, and torch DataLoader workers within a rank)
  int64_t row = 1;             // ranks sharing the epoch: see EpochGeometry
  int64_t start_batch = 0;     // resume: batches before this one are skipped, never read
  Partition partition = Partition::kInterleave;
  EpochOrder order;
  PinHooks pin;  // page-lock batch blocks (CUDA transfer); none by default
  // The auto controller (core/tuner.h), shared by a loader's epochs; null: threads and prefetch
  // stay as given. With one, `threads` is the most auto may use and the tuner says how many
  // threads run the next batch and how deep the queue is.
  std::shared_ptr<Tuner> tuner;
};

struct EpochStats {
  int64_t batches = 0;
  int64_t samples = 0;   // delivered
  int64_t failures = 0;  // skipped samples and source failures
  int64_t warnings = 0;
  uint64_t bytes_read = 0;     // file bytes read by workers (tar bytes are counted by the source)
  double process_seconds = 0;  // summed over threads
  std::vector<SampleNote> skipped;        // first kMaxNotes
  std::vector<SampleNote> warning_notes;  // first kMaxNotes
};

// Set in a process forked while an epoch was running: see Note [fork during an epoch].
std::atomic<bool>& forked_during_epoch();

class EpochRun {
 public:
  static constexpr size_t kMaxNotes = 1000;

  // telemetry may be null (nothing is measured).
  EpochRun(std::shared_ptr<Source> source, std::shared_ptr<SampleProcessor> processor,
           EngineOptions options, std::shared_ptr<telemetry::Telemetry> telemetry = nullptr);
  ~EpochRun();
  EpochRun(const EpochRun&) = delete;
  EpochRun& operator=(const EpochRun&) = delete;

  // Starts the planner and the worker threads. Called once.
  void start();

  enum class Status { kBatch, kEnd, kTimeout };
  // Waits up to `wait` for the next batch. Throws SampleError (on_error="raise"), BudgetError,
  // or whatever stopped the planner, after delivering every batch before the failure.
  Status next(std::unique_ptr<Batch>& out, std::chrono::milliseconds wait);

  // Stops promptly: no new samples start, running ones finish, threads are joined.
  void stop();
  EpochStats stats() const;
  const BatchLayout& layout() const { return layout_; }

 private:
  struct Job;
  void plan();
  void submit(std::unique_ptr<Job> job);
  void run_sample(Job* job, int slot, int slot_base);
  // Applies the error policy and removes failed samples; returns false for an empty batch.
  bool finish(Job& job, std::unique_ptr<Batch>& out);
  void compact(Batch& batch, const std::vector<bool>& failed) const;

  void update_depth();          // under mutex_
  void tune(uint64_t wait_ns);  // consumer, after a batch: close a window, apply the tuner's choice

  std::shared_ptr<Source> source_;
  std::shared_ptr<SampleProcessor> processor_;
  std::shared_ptr<telemetry::Telemetry> telemetry_;
  telemetry::Telemetry* t_ = nullptr;  // telemetry_.get() when enabled, else null
  int ready_jobs_ = 0;                 // done, not yet taken (under mutex_)
  uint64_t wait_ns_ = 0;               // consumer wait for the next batch so far (across timeouts)
  uint64_t wait_start_ns_ = 0;
  const EngineOptions options_;
  BatchLayout layout_;
  std::shared_ptr<BufferPool> pool_;

  struct Arena;
  // One arena (fixed threads), or one per thread count a tuner has used: see
  // Note [changing concurrency mid-epoch]. Samples go to current_.
  std::vector<std::unique_ptr<Arena>> arenas_;  // under mutex_
  Arena* current_ = nullptr;                    // under mutex_; null: samples run on the planner
  Arena* arena_for(int threads);                // under mutex_
  std::thread planner_;

  mutable std::mutex mutex_;
  std::condition_variable ready_cv_;  // consumer waits: a job finished, or the planner ended
  std::condition_variable space_cv_;  // planner waits: a job was taken
  std::condition_variable idle_cv_;   // stop() waits: outstanding tasks reached zero
  std::deque<std::unique_ptr<Job>> jobs_;
  int64_t outstanding_tasks_ = 0;
  bool planner_done_ = false;
  std::exception_ptr planner_error_;
  bool started_ = false;
  bool stopped_ = false;
  bool failed_ = false;                    // an error was raised to the consumer: the run is over
  std::vector<SampleNote> carried_skips_;  // from batches that lost every sample
  std::atomic<bool> stop_flag_{false};

  // Concurrency that can change mid-epoch (Note [changing concurrency mid-epoch]).
  std::shared_ptr<Tuner> tuner_;
  std::atomic<int> prefetch_{1};  // jobs in flight or ready
  // The tuner's window, measured whether or not telemetry is on.
  bool full_ = false;                                  // under mutex_: every prefetch slot ready
  uint64_t full_ns_ = 0, depth_ns_ = 0;                // under mutex_
  uint64_t window_start_ns_ = 0, window_wait_ns_ = 0;  // consumer
  int64_t window_batches_ = 0;                         // consumer
  IdleProbe idle_;                                     // consumer

  // Accounting; the atomics are written by workers, the rest by the consumer.
  std::atomic<uint64_t> bytes_read_{0};
  std::atomic<int64_t> process_ns_{0};
  EpochStats stats_;
};

}  // namespace loadscope
