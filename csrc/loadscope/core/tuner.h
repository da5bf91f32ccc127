#pragma once
// The auto controller (`threads="auto"`, `prefetch="auto"`, `decoder_threads="auto"`): picks
// the least parallelism that keeps the consumer's data wait near zero, from what the engine
// measures while an epoch runs. docs/tuning.md describes it for users.
//
// The policy (Tuner::observe) only sees windows of measurements, so it is tested by feeding it
// windows; the engine (engine.cc) measures the windows and applies the settings between
// samples, without stopping the epoch. Nothing here changes what a batch contains: every
// sample's bytes are a function of (data, config, seed, epoch, position), not of how many
// threads made it.
//
// Thread-safety: observe() is called by one consumer at a time (under the engine's lock of the
// run that owns the window); the getters are atomics and may be read from any thread.

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace loadscope {

struct TunerSettings {
  int max_threads = 1;  // the arena's size: auto never goes above it
  int threads = 1;      // where auto starts, or the fixed value
  bool auto_threads = false;
  int prefetch = 2;  // where auto starts, or the fixed value
  int max_prefetch = 2;
  bool auto_prefetch = false;
  bool auto_decoder_threads = false;
  double cores = 1;              // cores this process may use (affinity)
  int64_t memory_limit = -1;     // bytes of resident memory auto may grow into; -1: none
  int64_t bytes_per_batch = 0;   // what one more prefetch slot costs
  int window_batches = 8;        // a window closes after this many batches ...
  double window_seconds = 0.25;  // ... and at least this long
};

// What the consumer saw over one window of batches.
struct TunerWindow {
  int64_t batch = 0;        // batches delivered in this epoch when the window closed
  double seconds = 0;       // wall time of the window
  int64_t batches = 0;      // batches the consumer took in it
  double wait_seconds = 0;  // the consumer blocked for a batch: the data wait
  double full_seconds = 0;  // every prefetch slot held a ready batch: the loader was ahead
  double idle_cores = 0;    // cores idle on the machine that this process may use
  int64_t rss = -1;         // resident bytes of the process at the end, -1 unknown
};

struct TunerDecision {
  int64_t epoch = 0, batch = 0;  // where: batches delivered in that epoch
  std::string knob;              // "threads", "prefetch" or "decoder_threads"
  int from = 0, to = 0;          // from == to: a note (held back, and why)
  std::string reason;
  uint64_t at_ns = 0;        // steady clock, as telemetry::now_ns (traces place it)
  std::string text() const;  // "threads 2 → 3 at batch 140: data wait 31% with 0.6 cores idle"
};

class Tuner {
 public:
  // The policy's thresholds, as fractions of a window's wall time.
  static constexpr double kWaitGrow = 0.05;   // the consumer waits more than this: too slow
  static constexpr double kWaitQuiet = 0.01;  // less than this: no data wait to speak of
  static constexpr double kFullShrink = 0.5;  // the queue stays full this much: loader ahead
  static constexpr double kMinGain = 0.03;    // a trial must change the batch rate this much
  static constexpr size_t kMaxKept = 256;     // decisions kept (the count goes on)

  explicit Tuner(TunerSettings settings);
  virtual ~Tuner() = default;

  int threads() const { return threads_.load(std::memory_order_relaxed); }
  int prefetch() const { return prefetch_.load(std::memory_order_relaxed); }
  // FFmpeg's threads per video for decoder_threads="auto": the cores the loader may use, shared
  // between its threads (at most 4: frame threads past that add latency, not speed).
  int decoder_threads() const { return decoder_threads_.load(std::memory_order_relaxed); }
  bool tuning() const { return s_.auto_threads || s_.auto_prefetch; }
  const TunerSettings& settings() const { return s_; }

  void start_epoch(int64_t epoch);
  // One window; returns true when threads or prefetch changed. Serialised: the runs of two
  // epochs may overlap briefly (a new loop supersedes the old one while it stops).
  bool window(const TunerWindow& w) {
    std::lock_guard<std::mutex> lock(observe_mutex_);
    return observe(w);
  }

  std::vector<TunerDecision> decisions() const;
  int64_t changes() const { return changes_.load(std::memory_order_relaxed); }
  // What one more prefetch slot costs (the engine knows its batch layout).
  void set_bytes_per_batch(int64_t b) { bytes_per_batch_.store(b, std::memory_order_relaxed); }

 protected:
  // The policy (tests replace it with a script of changes).
  virtual bool observe(const TunerWindow& w);
  // Sets a knob and records the decision (from == to: a note only).
  void decide(const char* knob, int to, int64_t batch, std::string reason);

 private:
  void set_threads(int t);

  const TunerSettings s_;
  std::atomic<int> threads_, prefetch_, decoder_threads_{1};
  std::atomic<int64_t> changes_{0}, bytes_per_batch_{0};
  std::mutex observe_mutex_;
  int64_t epoch_ = 0;    // under mutex_
  bool settle_ = false;  // the next window straddles a change
  // Trials and holds (Note [trials] in tuner.cc).
  struct Trial {
    bool active = false, grow = false;
    int from = 0;
    double rate = 0;  // batches per second before the change
    double own = 0;   // the consumer's own seconds per batch (not waiting) before it
  };
  Trial trial_;
  int floor_ = 1, ceiling_ = 1;                  // fewest / most threads that may be tried now
  int64_t floor_until_ = 0, ceiling_until_ = 0;  // window counts until which they hold
  int64_t hold_ = 8, grow_hold_ = 8;
  int64_t windows_ = 0;
  int noted_ = 0;  // threads at which "waits, but no grow" was last noted (notes once)
  mutable std::mutex mutex_;
  std::vector<TunerDecision> decisions_;
};

// Replays settings, one (threads, prefetch) pair per window, then holds the last: the engine's
// side (changes mid-epoch) is tested with it, under ThreadSanitizer too, and Python's tests use
// it to change concurrency many times in one epoch.
class ScriptedTuner : public Tuner {
 public:
  ScriptedTuner(TunerSettings settings, std::vector<std::pair<int, int>> script)
      : Tuner(settings), script_(std::move(script)) {}

 protected:
  bool observe(const TunerWindow& w) override;

 private:
  std::vector<std::pair<int, int>> script_;
  size_t next_ = 0;
};

// Cores idle on the machine since the last call, from /proc/stat, capped by what this process
// may still use (cores minus its own CPU rate). First call: 0.
class IdleProbe {
 public:
  // process_cpu_seconds: the process's CPU time so far (telemetry::read_process_stats).
  double idle_cores(double cores, double process_cpu_seconds);

 private:
  uint64_t last_idle_ = 0, last_total_ = 0;
  double last_cpu_ = -1, last_wall_ = 0;
};

}  // namespace loadscope
