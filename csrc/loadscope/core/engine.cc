#include "loadscope/core/engine.h"

#include <algorithm>
#include <cstring>

#include <oneapi/tbb/global_control.h>
#include <oneapi/tbb/task_arena.h>

#include "loadscope/core/error.h"

namespace loadscope {

namespace {

// Note [TBB worker count]
// An arena created with no slots reserved for external threads is served only by TBB's global
// workers, of which there are hardware_concurrency - 1 by default: a 2-thread loader on a
// 2-core machine would get one. Each run therefore asks for `threads` workers, and the process
// keeps a single global_control at (sum of active requests + 1). A single control matters:
// with several, TBB applies the smallest.
class WorkerBudget {
 public:
  static WorkerBudget& instance() {
    static WorkerBudget budget;
    return budget;
  }
  void add(int n) { update(n); }
  void remove(int n) { update(-n); }

 private:
  void update(int delta) {
    std::lock_guard<std::mutex> lock(mutex_);
    requested_ += delta;
    control_.reset();
    if (requested_ > 0) {
      control_ = std::make_unique<tbb::global_control>(tbb::global_control::max_allowed_parallelism,
                                                       static_cast<size_t>(requested_ + 1));
    }
  }
  std::mutex mutex_;
  int requested_ = 0;
  std::unique_ptr<tbb::global_control> control_;
};

SampleNote note_from(const SampleError& e, int64_t position) {
  return SampleNote{e.key(), e.reason(), failure_kind_name(e.kind()), position};
}

}  // namespace

// Note [fork during an epoch]
// A process forked while an epoch runs in its parent inherits oneTBB's state with workers that
// do not exist in it: tasks enqueued there never run, and oneTBB has no way to start over. So
// such a child (Python marks it, see _loader.py's fork hook) runs every sample on the planner
// thread instead: one thread, but batches identical to any other thread count, and no hang.
// A child forked while no epoch runs (TBB finalized) uses threads as usual.
std::atomic<bool>& forked_during_epoch() {
  static std::atomic<bool> flag{false};
  return flag;
}

struct EpochRun::Arena {
  Arena(int threads, int slot_base)
      : threads(threads), slot_base(slot_base), handle(tbb::attach{}), arena(threads, 0) {
    WorkerBudget::instance().add(threads);
  }
  ~Arena() { shutdown(); }
  // Joins TBB's workers when no other user of TBB in the process holds them, so that
  // nothing of loadscope keeps running after stop (and a later fork sees no live workers).
  void shutdown() {
    if (shut) return;
    shut = true;
    arena.terminate();
    // finalize first, while this run's workers are still allowed: withdrawn first, a process
    // whose affinity holds one CPU (default parallelism 1, so no workers without the control)
    // spun in finalize forever, its worker never told to leave (oneTBB 2021.8).
    tbb::finalize(handle, std::nothrow);
    WorkerBudget::instance().remove(threads);
  }
  bool shut = false;
  int threads;
  int slot_base;  // its workers' telemetry slots start here (arenas of a run never share one)
  tbb::task_scheduler_handle handle;
  tbb::task_arena arena;
};

struct EpochRun::Job {
  int64_t index = 0;
  std::vector<Sample> samples;
  std::vector<SampleNote> source_failures;  // shard-level failures met while filling this job
  std::unique_ptr<Batch> batch;
  std::vector<SampleNote> failures;   // per slot; kind empty = ok
  std::vector<std::string> warnings;  // per slot
  std::atomic<int> pending{0};
  bool done = false;
};

EpochRun::EpochRun(std::shared_ptr<Source> source, std::shared_ptr<SampleProcessor> processor,
                   EngineOptions options, std::shared_ptr<telemetry::Telemetry> telemetry)
    : source_(std::move(source)),
      processor_(std::move(processor)),
      telemetry_(std::move(telemetry)),
      t_(telemetry_ && telemetry_->enabled() ? telemetry_.get() : nullptr),
      options_(options),
      tuner_(options.tuner) {
  if (options_.threads < 1) throw ConfigError("threads must be >= 1");
  if (options_.batch_size < 1) throw ConfigError("batch_size must be >= 1");
  if (options_.prefetch < 1) throw ConfigError("prefetch must be >= 1");
  if (options_.batch_stride < 1 || options_.batch_offset < 0 ||
      options_.batch_offset >= options_.batch_stride) {
    throw ConfigError("batch_offset must be in [0, batch_stride)");
  }
  // A rank's slots are every row-th: only then do its contiguous batches lie in order.
  if (options_.partition == Partition::kContiguous && options_.row > 0 &&
      options_.batch_stride % options_.row != 0) {
    throw ConfigError("partition 'contiguous' needs batch_stride to be a multiple of row");
  }
  size_t offset = 0;
  for (size_t bytes : processor_->fixed_bytes_per_sample()) {
    layout_.fixed.push_back(FixedSlot{offset, bytes});
    offset += (bytes * options_.batch_size + 63) / 64 * 64;
  }
  layout_.bytes_per_batch = offset;
  // Jobs in flight plus a couple held by the consumer are reused; more are returned.
  PoolGauges gauges;
  if (t_) gauges = PoolGauges{t_->pool_bytes, t_->pinned_bytes};
  prefetch_.store(tuner_ ? tuner_->prefetch() : options_.prefetch);
  if (prefetch_.load() < 1) throw ConfigError("prefetch must be >= 1");
  const int most =
      tuner_ ? std::max(tuner_->settings().max_prefetch, prefetch_.load()) : options_.prefetch;
  pool_ = BufferPool::create(layout_.bytes_per_batch, most + 2, options_.pin, gauges);
  if (tuner_) tuner_->set_bytes_per_batch(static_cast<int64_t>(layout_.bytes_per_batch));
}

EpochRun::~EpochRun() {
  stop();
}

void EpochRun::start() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (started_) throw Error("EpochRun::start called twice");
  started_ = true;
  if (t_) {
    t_->set_prefetch(prefetch_.load());
    t_->epoch_started(telemetry::now_ns());
  }
  if (tuner_) tuner_->start_epoch(options_.order.epoch);
  // See Note [fork during an epoch]: then there is no arena, and samples run on the planner.
  if (!forked_during_epoch().load()) {
    arenas_.resize(tuner_ ? options_.threads : 1);
    current_ = arena_for(tuner_ ? tuner_->threads() : options_.threads);
  }
  planner_ = std::thread([this] { plan(); });
}

void EpochRun::update_depth() {
  if (tuner_) {
    const uint64_t now = telemetry::now_ns();
    if (full_ && depth_ns_ != 0) full_ns_ += now - depth_ns_;
    depth_ns_ = now;
    full_ = ready_jobs_ >= prefetch_.load(std::memory_order_relaxed);
  }
  if (t_) t_->depth(ready_jobs_, static_cast<int>(jobs_.size()) - ready_jobs_, telemetry::now_ns());
}

EpochGeometry::EpochGeometry(int64_t n, int64_t batch, int64_t row, DropLast drop)
    : n_(n), batch_(batch), row_(row) {
  if (batch < 1 || row < 1) throw ConfigError("batch size and ranks must be >= 1");
  if (n < 0) {
    if (row > 1) {
      throw ConfigError(
          "splitting an epoch between ranks needs its size: index tar shards "
          "(`loadscope index`) or use a folder or file list");
    }
    return;
  }
  if (drop == DropLast::kUneven) n_ = n - n % row;
  const int64_t rows = n_ / (batch * row);
  full_ = rows * row;
  const int64_t rest = n_ - full_ * batch;
  if (rest > 0 && drop != DropLast::kSteps) tail_size_ = (rest + row - 1) / row;
  batches_ = full_ + (tail_size_ > 0 ? row : 0);
  length_ = full_ * batch + (tail_size_ > 0 ? row * tail_size_ : 0);
}

int64_t EpochGeometry::start(int64_t k) const {
  if (k <= full_ || n_ < 0) return k * batch_;
  return full_ * batch_ + (k - full_) * tail_size_;
}

// Note [ranks reading contiguous blocks]
// Under kInterleave a rank reads one batch in `row` of the epoch's order, so with shards the
// ranks of one node all read from the same shards, each in many small spans, and a rank that
// read ahead in blocks would fetch its neighbours' samples. Under kContiguous rank r reads the full
// batches [r*per, (r+1)*per) (per = full batches / row), then the last row's batch r, as under
// kInterleave: each rank reads its own stretch of the order, which for shards in storage or
// shard-shuffled order is its own shards. The epoch's order, each sample's position (and so every
// random draw), the batch sizes and the counts per rank are those of kInterleave: the same samples,
// dealt to ranks differently. A step of all ranks then holds batches from `row` distant stretches
// of the order rather than `row` neighbouring ones, which for a shard order with a shuffle buffer
// mixes more shards.
int64_t EpochGeometry::batch_of_slot(int64_t k, Partition partition) const {
  if (partition == Partition::kInterleave || n_ < 0 || k >= full_) return k;
  return (k % row_) * (full_ / row_) + k / row_;
}

int64_t EpochGeometry::size(int64_t k) const {
  if (n_ < 0) return batch_;
  if (k < full_) return batch_;
  return k < batches_ ? tail_size_ : 0;
}

int64_t EpochGeometry::rank_length(int64_t rank) const {
  if (n_ < 0) return -1;
  return full_ / row_ * batch_ + tail_size_;  // full rows, then one batch of the last row
}

int64_t EpochGeometry::rank_samples(int64_t rank) const {
  if (n_ < 0) return -1;
  // Only the last row holds padding: rank r's batch there starts at start(full_ + r).
  const int64_t last =
      tail_size_ > 0 ? std::clamp<int64_t>(n_ - start(full_ + rank), 0, tail_size_) : 0;
  return full_ / row_ * batch_ + last;
}

void EpochRun::plan() {
  telemetry::Slot* slot = t_ ? &t_->slot(0, "planner") : nullptr;
  uint64_t cpu_last = t_ ? telemetry::thread_cpu_ns() : 0;
  try {
    source_->start_epoch(options_.order);
    const int64_t n = source_->size();
    const EpochGeometry geo(n, options_.batch_size, options_.row, options_.drop_last);
    int64_t position = 0;
    // Padding (see EpochGeometry) draws the epoch's first samples again: the source starts
    // the same epoch over, as often as needed (with fewer samples than ranks, more than once).
    // Positions keep counting, so padded samples have position >= n.
    auto restart = [&](int64_t at) {
      if (n <= 0 || at >= geo.length()) return false;
      source_->start_epoch(options_.order);
      return true;
    };
    auto draw = [&](Sample& s) {
      if (source_->next(s)) return true;
      return restart(position) && source_->next(s);
    };
    auto skip = [&](int64_t count) {
      int64_t done = source_->skip(count);
      while (done < count && restart(position + done)) {
        const int64_t more = source_->skip(count - done);
        if (more == 0) break;
        done += more;
      }
      position += done;
      return done;
    };
    // The batches this run reads lie in increasing order in the source (under both
    // partitions), so reaching each is a skip forward from the last.
    const int64_t row = std::max<int64_t>(1, options_.row);
    for (int64_t k = std::max<int64_t>(0, options_.start_batch); !stop_flag_.load(); ++k) {
      const int64_t b = geo.batch_of_slot(k, options_.partition);
      const int64_t want = geo.size(b);
      if (want == 0) break;  // the last batch of a sized epoch
      if (k % options_.batch_stride != options_.batch_offset) continue;
      // In steps, so that a stop is seen during a long skip of a source that reads to skip
      // (a Mix, streamed shards: the last contiguous rank skips most of the epoch).
      bool ended = false;
      for (int64_t gap; !ended && !stop_flag_.load() && (gap = geo.start(b) - position) > 0;) {
        const int64_t step = std::min<int64_t>(gap, 1024);
        ended = skip(step) < step;
      }
      if (ended || stop_flag_.load()) break;  // the source ended first, or the run stops
      {
        const uint64_t b0 = t_ ? telemetry::now_ns() : 0;
        std::unique_lock<std::mutex> lock(mutex_);
        space_cv_.wait(lock, [&] {
          return stop_flag_.load() || jobs_.size() < static_cast<size_t>(prefetch_.load());
        });
        if (t_) t_->producer_block.record(telemetry::now_ns() - b0);  // back-pressure
        if (stop_flag_.load()) break;
      }
      const uint64_t fill0 = t_ ? telemetry::now_ns() : 0;
      auto job = std::make_unique<Job>();
      job->index = b;  // the epoch's batch: what map= draws from and traces name
      job->samples.reserve(static_cast<size_t>(want));
      bool end = false;
      while (static_cast<int64_t>(job->samples.size()) < want && !stop_flag_.load()) {
        Sample sample;
        const uint64_t r0 = t_ ? telemetry::now_ns() : 0;
        const uint64_t bytes0 = t_ ? source_->bytes_read() : 0;
        try {
          if (!draw(sample)) {
            end = true;
            break;
          }
        } catch (const SampleError& e) {
          job->source_failures.push_back(SampleNote{e.key(), e.reason(), "source", -1});
          if (t_) t_->fail(*slot, telemetry::Stage::kRead, telemetry::Kind::source());
          continue;
        }
        if (t_) {  // reading from the source itself (tar shards); lists cost nothing here
          t_->record(*slot, telemetry::Stage::kRead, telemetry::Kind::source(),
                     telemetry::now_ns() - r0, source_->bytes_read() - bytes0);
          t_->source_buffer_bytes.store(source_->buffered_bytes(), std::memory_order_relaxed);
        }
        sample.position = position++;
        job->samples.push_back(std::move(sample));
      }
      bool partial = static_cast<int64_t>(job->samples.size()) < want;
      if (partial && options_.drop_last == DropLast::kSteps) job->samples.clear();
      if (job->samples.empty() && job->source_failures.empty()) break;
      if (t_) {
        t_->span(*slot, "fill batch", fill0, telemetry::now_ns(), k);
        const uint64_t cpu = telemetry::thread_cpu_ns();  // once a batch, visible mid-epoch
        slot->cpu_ns.fetch_add(cpu - cpu_last, std::memory_order_relaxed);
        cpu_last = cpu;
      }
      // Under kContiguous this rank's batches follow one another in the source: only its
      // DataLoader workers (stride / row) take turns.
      processor_->prepare(job->samples, stop_flag_,
                          options_.partition == Partition::kContiguous ? options_.batch_stride / row
                                                                       : options_.batch_stride);
      submit(std::move(job));
      if (end) break;
    }
  } catch (...) {
    std::lock_guard<std::mutex> lock(mutex_);
    planner_error_ = std::current_exception();
  }
  if (t_) slot->cpu_ns.fetch_add(telemetry::thread_cpu_ns() - cpu_last, std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(mutex_);
  planner_done_ = true;
  ready_cv_.notify_all();
}

void EpochRun::submit(std::unique_ptr<Job> job) {
  const int n = static_cast<int>(job->samples.size());
  auto batch = std::make_unique<Batch>();
  batch->index = job->index;
  batch->size = n;
  batch->layout = &layout_;
  batch->block = pool_->acquire();

  batch->keys.resize(n);
  batch->positions.resize(n);
  batch->strings.assign(processor_->num_string_fields(), std::vector<std::string>(n));
  for (int i = 0; i < n; ++i) {
    batch->keys[i] = job->samples[i].key;
    batch->positions[i] = job->samples[i].position;
  }
  job->batch = std::move(batch);
  job->failures.resize(n);
  job->warnings.resize(n);
  job->pending.store(n, std::memory_order_release);  // see run_sample
  Job* raw = job.get();
  Arena* arena = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    job->done = (n == 0);
    if (n == 0) ++ready_jobs_;
    jobs_.push_back(std::move(job));
    outstanding_tasks_ += n;
    update_depth();
    if (n == 0) ready_cv_.notify_all();
    arena = current_;
  }
  for (int i = 0; i < n; ++i) {
    if (arena) {
      const int base = arena->slot_base;
      arena->arena.enqueue([this, raw, i, base] { run_sample(raw, i, base); });
    } else {
      run_sample(raw, i, 0);
    }
  }
}

void EpochRun::run_sample(Job* job, int slot, int slot_base) {
  // Pairs with the store of `pending` in submit(): TBB's enqueue already orders the job's
  // writes before this task, but inside libtbb, where ThreadSanitizer cannot see it (`make
  // tsan`). One acquire load makes the hand-off visible; it costs nothing measurable.
  (void)job->pending.load(std::memory_order_acquire);
  Sample& sample = job->samples[slot];
  if (stop_flag_.load()) {
    job->failures[slot] = SampleNote{sample.key, "cancelled", "cancelled", sample.position};
  } else {
    auto t0 = std::chrono::steady_clock::now();
    SampleContext ctx;
    ctx.order = &options_.order;
    if (tuner_) ctx.decoder_threads = tuner_->decoder_threads();
    uint64_t cpu0 = 0, start_ns = 0;
    if (t_) {
      // The worker's slot, looked up once per thread and telemetry (a lock otherwise). Keyed
      // on the telemetry's serial, not its address: see Telemetry::serial().
      thread_local uint64_t cached_for = 0;
      thread_local int cached_index = -1;
      thread_local telemetry::Slot* cached_slot = nullptr;
      const int index = slot_base + std::max(tbb::this_task_arena::current_thread_index(), 0);
      if (cached_for != t_->serial() || cached_index != index) {
        cached_slot = &t_->slot(2 + index, "worker", index);
        cached_for = t_->serial();
        cached_index = index;
      }
      ctx.telemetry = t_;
      ctx.slot = cached_slot;
      cpu0 = telemetry::thread_cpu_ns();
      start_ns = telemetry::now_ns();
    }
    try {
      processor_->process(sample, *job->batch, slot, ctx);
      job->warnings[slot] = std::move(ctx.warning);
    } catch (const SampleError& e) {
      job->failures[slot] = note_from(e, sample.position);
    } catch (const Failure& e) {  // a processor that did not name the sample: the engine does
      job->failures[slot] = note_from(e.named(sample.key), sample.position);
    } catch (const std::bad_alloc&) {
      job->failures[slot] = SampleNote{sample.key, "out of memory while processing the sample",
                                       "decode", sample.position};
    } catch (const std::exception& e) {
      job->failures[slot] = SampleNote{sample.key, e.what(), "decode", sample.position};
    }
    bytes_read_.fetch_add(ctx.bytes_read, std::memory_order_relaxed);
    if (t_) {
      ctx.slot->cpu_ns.fetch_add(telemetry::thread_cpu_ns() - cpu0, std::memory_order_relaxed);
      t_->span(*ctx.slot, "sample", start_ns, telemetry::now_ns(), sample.position);
    }
    process_ns_.fetch_add(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0)
            .count(),
        std::memory_order_relaxed);
  }
  sample = Sample{};  // the encoded bytes are no longer needed
  bool last = job->pending.fetch_sub(1) == 1;
  std::lock_guard<std::mutex> lock(mutex_);
  if (last) {
    job->done = true;
    ++ready_jobs_;
    update_depth();
    ready_cv_.notify_all();
  }
  if (--outstanding_tasks_ == 0) idle_cv_.notify_all();
}

// Note [changing concurrency mid-epoch]
// oneTBB cannot resize an arena. A run with a tuner keeps one arena per thread count it has
// used (made when first needed: their workers are oneTBB's global ones, so an arena costs
// little), and submit() hands each batch's samples to the arena of the current count. A change
// makes the next batch go to another arena; the batches already handed over finish where they
// are, at the old count, so for the next `prefetch` batches both may run. Samples are handed
// over in stream order, batches leave in order, and a sample's bytes depend only on its
// position: no sample is lost, repeated or reordered, and the batches equal those of any fixed
// thread count (tests/cpp/test_engine.cc, under ThreadSanitizer too). An arena of k threads
// has k workers: no idle workers spin for work that a limit would hold back (bounding samples
// in flight in one large arena cost 15% more CPU per batch with a slow consumer).
EpochRun::Arena* EpochRun::arena_for(int threads) {
  threads = std::clamp(threads, 1, options_.threads);
  auto& slot = arenas_[tuner_ ? threads - 1 : 0];
  if (!slot) {
    // Telemetry slots: arena k's workers (indexes 0..k) after those of arenas 1..k-1.
    const int base = tuner_ ? (threads - 1) * threads / 2 + (threads - 1) : 0;
    slot = std::make_unique<Arena>(threads, base);
  }
  return slot.get();
}

void EpochRun::tune(uint64_t wait_ns) {
  const TunerSettings& s = tuner_->settings();
  const uint64_t now = telemetry::now_ns();
  if (window_start_ns_ == 0) {  // the first batch: its wait is the pipeline's start
    window_start_ns_ = now;
    const telemetry::ProcessStats p = telemetry::read_process_stats(false);
    idle_.idle_cores(s.cores, p.cpu_user + p.cpu_system);
    std::lock_guard<std::mutex> lock(mutex_);
    full_ns_ = 0;
    return;
  }
  window_wait_ns_ += wait_ns;
  ++window_batches_;
  if (window_batches_ < s.window_batches ||
      static_cast<double>(now - window_start_ns_) < s.window_seconds * 1e9) {
    return;
  }
  TunerWindow w;
  w.batch = stats_.batches;  // written by this (the consumer's) thread
  w.seconds = static_cast<double>(now - window_start_ns_) * 1e-9;
  w.batches = window_batches_;
  w.wait_seconds = static_cast<double>(window_wait_ns_) * 1e-9;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (full_) full_ns_ += now - depth_ns_;
    depth_ns_ = now;
    w.full_seconds = static_cast<double>(full_ns_) * 1e-9;
    full_ns_ = 0;
  }
  // One read of /proc/self a window: the process's CPU (for idle cores) and its RSS.
  const telemetry::ProcessStats p = telemetry::read_process_stats(false);
  w.idle_cores = idle_.idle_cores(s.cores, p.cpu_user + p.cpu_system);
  if (s.memory_limit > 0) w.rss = p.rss;
  window_start_ns_ = now;
  window_wait_ns_ = 0;
  window_batches_ = 0;
  if (!tuner_->window(w)) return;
  const int prefetch = tuner_->prefetch();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (current_) current_ = arena_for(tuner_->threads());
    prefetch_.store(prefetch);
    update_depth();
    space_cv_.notify_all();
  }
  if (t_) t_->set_prefetch(prefetch);
}

EpochRun::Status EpochRun::next(std::unique_ptr<Batch>& out, std::chrono::milliseconds wait) {
  const auto deadline = std::chrono::steady_clock::now() + wait;
  // Data wait: the consumer blocked for a batch, summed over the calls (timeouts) it takes.
  const bool timed = t_ || tuner_;
  uint64_t mark = timed ? telemetry::now_ns() : 0;  // waiting counted up to here
  if (timed && wait_start_ns_ == 0) wait_start_ns_ = mark;
  auto waited = [&] {
    if (!timed) return;
    const uint64_t now = telemetry::now_ns();
    wait_ns_ += now - mark;
    mark = now;
  };
  while (true) {
    std::unique_ptr<Job> job;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      if (!started_) throw Error("EpochRun::next before start");
      while (true) {
        if (failed_ || stopped_) return Status::kEnd;
        if (!jobs_.empty() && jobs_.front()->done) {
          job = std::move(jobs_.front());
          jobs_.pop_front();
          --ready_jobs_;
          update_depth();
          space_cv_.notify_one();
          break;
        }
        if (jobs_.empty() && planner_done_) {
          if (t_) t_->epoch_ended(telemetry::now_ns());
          if (planner_error_) {
            failed_ = true;
            std::rethrow_exception(planner_error_);
          }
          return Status::kEnd;
        }
        if (ready_cv_.wait_until(lock, deadline) == std::cv_status::timeout &&
            !(!jobs_.empty() && jobs_.front()->done) && !(jobs_.empty() && planner_done_)) {
          waited();
          return Status::kTimeout;
        }
      }
    }
    waited();
    const uint64_t f0 = timed ? telemetry::now_ns() : 0;
    const bool delivered = finish(*job, out);
    if (timed && !t_) {
      mark = telemetry::now_ns();
      if (delivered) {
        tune(wait_ns_);
        wait_ns_ = 0;
        wait_start_ns_ = 0;
      }
    }
    if (t_) {
      telemetry::Slot& c = t_->slot(1, "consumer");
      const uint64_t end = telemetry::now_ns();
      mark = end;  // finishing a batch is collating, not waiting
      t_->record(c, telemetry::Stage::kCollate, telemetry::Kind::other(), end - f0);
      if (delivered) {
        t_->consumer_wait.record(wait_ns_);
        t_->span(c, "wait for batch", wait_start_ns_, end, out->index);
        if (tuner_) tune(wait_ns_);
        wait_ns_ = 0;
        wait_start_ns_ = 0;
        t_->batch_delivered(end);
      }
    }
    if (delivered) return Status::kBatch;
  }
}

bool EpochRun::finish(Job& job, std::unique_ptr<Batch>& out) {
  std::unique_ptr<Batch> batch = std::move(job.batch);
  const int n = batch->size;
  std::vector<bool> failed(n, false);
  std::vector<SampleNote> failures = job.source_failures;
  for (int i = 0; i < n; ++i) {
    if (!job.failures[i].kind.empty()) {
      failed[i] = true;
      failures.push_back(job.failures[i]);
    }
    if (!job.warnings[i].empty()) {
      batch->warnings.push_back(
          SampleNote{batch->keys[i], job.warnings[i], "warning", batch->positions[i]});
    }
  }
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.warnings += static_cast<int64_t>(batch->warnings.size());
  for (const auto& w : batch->warnings) {
    if (stats_.warning_notes.size() < kMaxNotes) stats_.warning_notes.push_back(w);
  }
  if (!failures.empty()) {
    if (options_.on_error == ErrorPolicy::kRaise) {
      failed_ = true;
      const SampleNote& f = failures.front();
      FailureKind kind = f.kind == "read" || f.kind == "source" ? FailureKind::kRead
                         : f.kind == "field"                    ? FailureKind::kField
                                                                : FailureKind::kDecode;
      throw SampleError(f.key, f.reason, kind);
    }
    stats_.failures += static_cast<int64_t>(failures.size());
    if (t_) t_->failures.fetch_add(failures.size(), std::memory_order_relaxed);
    for (const auto& f : failures) {
      if (stats_.skipped.size() < kMaxNotes) stats_.skipped.push_back(f);
    }
    // Samples of the epoch handled so far: delivered ones, this batch's good ones, failures.
    const int64_t seen =
        stats_.samples +
        (n - static_cast<int64_t>(std::count(failed.begin(), failed.end(), true))) +
        stats_.failures;
    const bool over_count = options_.max_errors >= 0 && stats_.failures > options_.max_errors;
    const bool over_rate =
        options_.max_error_rate >= 0 &&
        static_cast<double>(stats_.failures) >
            options_.max_error_rate * static_cast<double>(std::max<int64_t>(seen, 100));
    if (over_count || over_rate) {
      failed_ = true;
      const SampleNote& f = failures.front();
      throw BudgetError("error budget exceeded: " + std::to_string(stats_.failures) +
                        " failures in the first " + std::to_string(seen) +
                        " samples of the epoch (budget: " +
                        (over_count ? std::to_string(options_.max_errors) + " failures"
                                    : std::to_string(options_.max_error_rate) + " of samples") +
                        "); the first failure of this batch: '" + f.key + "': " + f.reason);
    }
    batch->skipped = std::move(failures);
    compact(*batch, failed);
  }
  stats_.samples += batch->size;
  if (t_) {
    t_->samples.fetch_add(batch->size, std::memory_order_relaxed);
    t_->warnings.fetch_add(batch->warnings.size(), std::memory_order_relaxed);
    if (batch->size > 0) t_->batches.fetch_add(1, std::memory_order_relaxed);
  }
  if (!carried_skips_.empty()) {  // failures of earlier batches that had nothing left
    batch->skipped.insert(batch->skipped.begin(), carried_skips_.begin(), carried_skips_.end());
    carried_skips_.clear();
  }
  if (batch->size == 0) {
    carried_skips_ = std::move(batch->skipped);
    return false;
  }
  ++stats_.batches;
  out = std::move(batch);
  return true;
}

void EpochRun::compact(Batch& batch, const std::vector<bool>& failed) const {
  int dst = 0;
  for (int src = 0; src < batch.size; ++src) {
    if (failed[src]) continue;
    if (dst != src) {
      for (size_t f = 0; f < layout_.fixed.size(); ++f) {
        const size_t bytes = layout_.fixed[f].bytes_per_sample;
        uint8_t* base = batch.fixed_data(f);
        std::memmove(base + dst * bytes, base + src * bytes, bytes);
      }
      batch.keys[dst] = std::move(batch.keys[src]);
      batch.positions[dst] = batch.positions[src];
      for (auto& column : batch.strings) column[dst] = std::move(column[src]);
    }
    ++dst;
  }
  batch.size = dst;
  batch.keys.resize(dst);
  batch.positions.resize(dst);
  for (auto& column : batch.strings) column.resize(dst);
}

void EpochRun::stop() {
  {
    std::unique_lock<std::mutex> lock(mutex_);
    if (stopped_) return;
    stopped_ = true;
    stop_flag_.store(true);
    space_cv_.notify_all();
    ready_cv_.notify_all();
  }
  processor_->cancel();  // a worker waiting for a fetch must not wait out a dead server
  if (planner_.joinable()) planner_.join();
  {
    // Queued tasks see the stop flag and return at once; running ones finish their sample.
    std::unique_lock<std::mutex> lock(mutex_);
    idle_cv_.wait(lock, [&] { return outstanding_tasks_ == 0; });
    jobs_.clear();
  }
  for (auto& a : arenas_) {
    if (a) a->shutdown();
  }
  arenas_.clear();
  current_ = nullptr;
  if (t_) {
    t_->epoch_ended(telemetry::now_ns());
    t_->workers_ended();
  }
}

EpochStats EpochRun::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  EpochStats s = stats_;
  s.bytes_read = bytes_read_.load() + source_->bytes_read();
  s.process_seconds = static_cast<double>(process_ns_.load()) * 1e-9;
  return s;
}

}  // namespace loadscope
