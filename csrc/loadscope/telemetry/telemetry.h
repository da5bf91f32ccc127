#pragma once
// What the engine measures about itself, cheaply enough to stay on by default.
//
// Writers are the engine's own threads, each into its own slot (slot 0: the planner, slot 1:
// the consumer, slots 2..: the worker threads, by their index in the oneTBB arena), so the hot
// path takes no lock and shares no cache line. Readers (snapshot()) merge all slots at any
// time; every field is a relaxed atomic, so a snapshot may be a few samples behind but is
// never torn. One Telemetry lives as long as its loader and accumulates over its epochs.

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "loadscope/telemetry/histogram.h"

namespace loadscope::telemetry {

enum class Stage { kRead, kDecode, kAugment, kCollate, kCount };
constexpr int kStages = static_cast<int>(Stage::kCount);
const char* stage_name(Stage s);

// What a stage worked on, by name: each field kind names itself (Field::kind(): "image",
// "video", ...), so this layer knows no modality. "source" (reading shards, which the planner
// does before a sample exists) and "other" (collation) are the engine's. A name gets its id the
// first time it is made, process-wide, and keeps it; at most kMaxKinds names.
constexpr int kMaxKinds = 12;
class Kind {
 public:
  explicit Kind(const char* name);  // thread-safe; throws std::length_error past kMaxKinds
  static Kind source();             // both registered once, then a copy
  static Kind other();
  int id() const { return id_; }
  const char* name() const;
  static int count();  // names given so far
  static const char* name_of(int id);

 private:
  int id_;
};

// A count a field kind keeps besides time and bytes (a video field: clips, frames decoded for
// those shown, packets, seeks, open time), named "<kind>.<what>", a name ending in "_ns" being
// nanoseconds; ids as for Kind, at most kMaxCounters.
constexpr int kMaxCounters = 16;
class Counter {
 public:
  explicit Counter(const char* name);
  int id() const { return id_; }
  static int count();
  static const char* name_of(int id);

 private:
  int id_;
};

inline uint64_t now_ns() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}
uint64_t thread_cpu_ns();  // CPU time of the calling thread

// A timed interval of one thread, for the Chrome/Perfetto trace. `name` is a static string.
struct Span {
  const char* name;
  uint64_t start_ns;
  uint64_t dur_ns;
  int64_t arg;  // sample position or batch index, -1 if none
};

// Counters of one stage and kind in one slot. The histogram is created by its writer on
// first use (most stage x kind pairs never occur).
struct StageCell {
  std::atomic<Histogram*> busy{nullptr};  // busy time, ns
  std::atomic<uint64_t> items{0}, bytes{0}, failures{0};
};

struct Slot {
  std::string role;  // "planner", "consumer", "worker 0", ...
  StageCell cells[kStages][kMaxKinds];
  std::atomic<uint64_t> counters[kMaxCounters]{};
  std::atomic<uint64_t> cpu_ns{0};         // CPU time spent in the engine's work
  std::atomic<uint64_t> scratch_bytes{0};  // decoder and resampler buffers held
  std::mutex spans_mutex;                  // taken only while tracing
  std::vector<Span> spans;
  ~Slot();
};

struct StageTotals {
  HistogramData busy;
  uint64_t items = 0, bytes = 0, failures = 0;
};

struct ProcessStats {
  int64_t rss = -1, pss = -1, rss_peak = -1;      // bytes (VmRSS, smaps_rollup Pss, VmHWM)
  int64_t cgroup_current = -1, cgroup_peak = -1;  // bytes, when the cgroup tells
  int64_t mem_available = -1;                     // bytes (MemAvailable)
  double cpu_user = 0, cpu_system = 0;            // seconds, whole process
  int64_t io_rchar = -1, io_read_bytes = -1, io_syscr = -1;  // /proc/self/io
  int threads = 0;
};
// Reads /proc and the cgroup of the calling process; fields it cannot read stay -1.
// with_pss=false skips smaps_rollup, which walks every mapping (3 ms for a torch process).
ProcessStats read_process_stats(bool with_pss = true);

struct Snapshot {
  double uptime = 0;                       // seconds since the Telemetry was created
  StageTotals stages[kStages][kMaxKinds];  // by Kind id
  struct SlotView {
    std::string role;
    double cpu = 0;  // seconds
    uint64_t scratch_bytes = 0;
  };
  std::vector<SlotView> slots;
  std::vector<std::pair<std::string, uint64_t>> counters;  // every Counter, by id
  HistogramData consumer_wait, producer_block;             // ns
  double ready_integral = 0, inflight_integral = 0;        // batch-seconds (occupancy x time)
  double back_pressure_seconds = 0;  // every prefetch slot held a ready batch: workers idle
  double active_seconds = 0;         // time with an epoch running
  uint64_t batches = 0, samples = 0, failures = 0, warnings = 0;
  uint64_t pool_bytes = 0, pinned_bytes = 0, source_buffer_bytes = 0;
  int prefetch = 0;
  double first_batch_after_create = -1;  // seconds, first epoch
  double first_batch_last_epoch = -1;    // seconds from the epoch's start
  uint64_t spans_dropped = 0;
  std::vector<std::array<double, 3>> depth;  // (seconds, ready, in flight) at changes, recent
  bool enabled = true;
};

class Telemetry {
 public:
  // enabled=false: no timing at all (the engine checks enabled() before reading clocks).
  // Histograms are ~7.8 KiB each (976 buckets); a slot creates only those it uses.
  explicit Telemetry(bool enabled);
  ~Telemetry();
  bool enabled() const { return enabled_; }
  uint64_t created_ns() const { return created_ns_; }
  // Unique in the process, never reused: what a per-thread cache of a slot is keyed on. The
  // object's address is not enough: a telemetry made after another is freed often lands at
  // the same address, and a cache keyed on it wrote into the freed one's slot.
  uint64_t serial() const { return serial_; }

  // The calling thread's slot: 0 planner, 1 consumer, 2 + index for arena workers.
  // `role` (and `number`, if >= 0) name it when it is first created.
  Slot& slot(int index, const char* role, int number = -1);

  // Recording (single writer per slot).
  void record(Slot& s, Stage stage, Kind kind, uint64_t ns, uint64_t bytes = 0);
  void fail(Slot& s, Stage stage, Kind kind);
  void count(Slot& s, Counter counter, uint64_t n);
  void span(Slot& s, const char* name, uint64_t start_ns, uint64_t end_ns, int64_t arg);

  // Queue accounting, called under the engine's lock whenever a count changes.
  void depth(int ready, int inflight, uint64_t at_ns);
  void set_prefetch(int p) { prefetch_.store(p, std::memory_order_relaxed); }
  Histogram consumer_wait;   // consumer thread only
  Histogram producer_block;  // planner only: waits for a free prefetch slot, for any reason
  std::atomic<uint64_t> batches{0}, samples{0}, failures{0}, warnings{0};
  // Live gauges the engine's buffer pools add to and take from.
  std::shared_ptr<std::atomic<int64_t>> pool_bytes = std::make_shared<std::atomic<int64_t>>(0);
  std::shared_ptr<std::atomic<int64_t>> pinned_bytes = std::make_shared<std::atomic<int64_t>>(0);
  std::atomic<uint64_t> source_buffer_bytes{0};
  // The engine's threads of an epoch are gone: their scratch went with them.
  void workers_ended();

  void epoch_started(uint64_t at_ns);
  void batch_delivered(uint64_t at_ns);
  void epoch_ended(uint64_t at_ns);

  // Tracing: spans are kept (up to `max_spans` in all) only while enabled.
  void set_tracing(bool on, size_t max_spans = 500000);
  bool tracing() const { return tracing_.load(std::memory_order_relaxed); }
  std::vector<std::pair<std::string, std::vector<Span>>> take_spans();

  // with_depth: include the recent queue changes (4096 rows: large; traces and plots only).
  Snapshot snapshot(bool with_depth = false) const;
  // Queue changes recorded while tracing (all of them, up to the span budget).
  std::vector<std::array<double, 3>> take_trace_depth();

 private:
  const bool enabled_;
  const uint64_t created_ns_;
  const uint64_t serial_;
  mutable std::mutex slots_mutex_;
  std::vector<std::unique_ptr<Slot>> slots_;
  std::atomic<int> prefetch_{0};
  // Occupancy integrals, written under the engine's lock; read relaxed.
  std::atomic<double> ready_integral_{0}, inflight_integral_{0}, back_pressure_{0};
  std::atomic<uint64_t> last_depth_ns_{0};
  std::atomic<int> ready_{0}, inflight_{0};
  std::atomic<uint64_t> active_ns_{0}, epoch_start_ns_{0};
  std::atomic<bool> first_batch_pending_{false};
  std::atomic<double> first_after_create_{-1}, first_last_epoch_{-1};
  mutable std::mutex depth_mutex_;
  std::vector<std::array<double, 3>> depth_;  // ring of recent changes
  size_t depth_next_ = 0;
  std::atomic<bool> tracing_{false};
  std::atomic<size_t> max_spans_{0};
  std::atomic<size_t> span_count_{0};
  std::atomic<uint64_t> spans_dropped_{0};
  std::vector<std::array<double, 3>> trace_depth_;  // under depth_mutex_
  int worker_slots_ = 0;                            // under slots_mutex_
};

// Times a scope into a stage when telemetry is on.
class StageTimer {
 public:
  StageTimer(Telemetry* t, Slot* s, Stage stage, Kind kind)
      : t_(t && t->enabled() ? t : nullptr),
        s_(s),
        stage_(stage),
        kind_(kind),
        start_(t_ ? now_ns() : 0) {}
  ~StageTimer() { stop(); }
  void add_bytes(uint64_t b) { bytes_ += b; }
  uint64_t stop() {
    if (!t_) return 0;
    const uint64_t end = now_ns();
    t_->record(*s_, stage_, kind_, end - start_, bytes_);
    t_ = nullptr;
    return end - start_;
  }

 private:
  Telemetry* t_;
  Slot* s_;
  Stage stage_;
  Kind kind_;
  uint64_t start_;
  uint64_t bytes_ = 0;
};

}  // namespace loadscope::telemetry
