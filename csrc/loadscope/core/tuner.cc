#include "loadscope/core/tuner.h"

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>

namespace loadscope {

namespace {

// One number in a decision's text, e.g. text("%.0f%%", 100 * wait).
std::string text(const char* format, double value) {
  char buf[48];
  std::snprintf(buf, sizeof buf, format, value);
  return buf;
}

std::string percent(double fraction) {
  return text("%.0f%%", 100.0 * fraction);
}

}  // namespace

std::string TunerDecision::text() const {
  std::string head = knob + " " + std::to_string(from);
  if (to != from) head += " → " + std::to_string(to);
  if (to == from) head += " kept";
  return head + " at batch " + std::to_string(batch) +
         (epoch > 0 ? " of epoch " + std::to_string(epoch) : "") + ": " + reason;
}

Tuner::Tuner(TunerSettings settings)
    : s_(settings), threads_(settings.threads), prefetch_(settings.prefetch) {
  set_threads(settings.threads);
}

void Tuner::set_threads(int t) {
  threads_.store(t, std::memory_order_relaxed);
  const int d = static_cast<int>(std::floor(s_.cores / std::max(t, 1)));
  decoder_threads_.store(s_.auto_decoder_threads ? std::clamp(d, 1, 4) : 1,
                         std::memory_order_relaxed);
}

void Tuner::start_epoch(int64_t epoch) {
  // The engine leaves the first batch's wait (the pipeline filling) out of the first window,
  // so that window is judged: a short benchmark or epoch gets its first decision sooner.
  std::lock_guard<std::mutex> hold(observe_mutex_);
  settle_ = false;
  std::lock_guard<std::mutex> lock(mutex_);
  epoch_ = epoch;  // the first window of an epoch holds its start (workers filling the queue)
}

void Tuner::decide(const char* knob, int to, int64_t batch, std::string reason) {
  const std::string k = knob;
  int from = k == "threads" ? threads() : prefetch();
  if (to != from) {
    if (k == "threads") set_threads(to);
    if (k == "prefetch") prefetch_.store(to, std::memory_order_relaxed);
    changes_.fetch_add(1, std::memory_order_relaxed);
    settle_ = true;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  if (decisions_.size() >= kMaxKept) decisions_.erase(decisions_.begin());
  const auto now = std::chrono::steady_clock::now().time_since_epoch();
  decisions_.push_back(TunerDecision{
      epoch_, batch, k, from, to, std::move(reason),
      static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(now).count())});
}

bool Tuner::observe(const TunerWindow& w) {
  ++windows_;
  if (!tuning() || w.seconds <= 0) return false;
  if (settle_) {  // measured across a change: says little about either setting
    settle_ = false;
    return false;
  }
  const int64_t before = changes();
  const int t = threads(), p = prefetch();
  const double wait = w.wait_seconds / w.seconds;
  const double full = w.full_seconds / w.seconds;
  const double rate = static_cast<double>(w.batches) / w.seconds;
  const bool measured_rss = s_.memory_limit > 0 && w.rss >= 0;
  const bool memory_room =
      !measured_rss || w.rss + bytes_per_batch_.load(std::memory_order_relaxed) <= s_.memory_limit;

  if (measured_rss && w.rss > s_.memory_limit) {
    trial_ = Trial{};
    const std::string why =
        "resident memory " + text("%.2f GiB", static_cast<double>(w.rss) / (1 << 30)) +
        " over memory_limit " + text("%.2f GiB", static_cast<double>(s_.memory_limit) / (1 << 30));
    if (s_.auto_prefetch && p > 1) {
      decide("prefetch", p - 1, w.batch, why);
    } else if (s_.auto_threads && t > 1) {
      decide("threads", t - 1, w.batch, why);  // each thread holds decoder scratch
    }
    return changes() != before;
  }

  // Note [trials]
  // Idle cores and waiting say where to look, not what will happen: a training step whose
  // OpenMP threads spin between ops shows no idle core, yet a loader thread more may pay; and a
  // thread more may slow the step more than it speeds the data. So every change of threads is
  // a trial, judged by what the consumer got in the window after it settles: the batches it
  // took per second. A grow that did not raise the rate by kMinGain is undone, and growing past
  // that level waits `grow_hold_` windows; a shrink that brought the wait back (or lost rate)
  // is undone, and shrinking below that level waits `hold_` windows. Both holds double after
  // each failed trial, so a steady consumer sees ever fewer changes.
  const double own =
      w.batches > 0 ? (w.seconds - w.wait_seconds) / static_cast<double>(w.batches) : 0;
  if (trial_.active) {
    const Trial trial = trial_;
    trial_ = Trial{};
    const double ratio = trial.rate > 0 ? rate / trial.rate : 1.0;
    // The consumer's own time per batch moved by more than a loader thread can make it move
    // (taking a core from a step at most doubles it): the consumer changed (warm-up ended,
    // evaluation, a new phase of a benchmark), so the rates do not compare. Keep the change;
    // the next windows judge it afresh.
    if (trial.own > 0 && own > 0 && (own > 2 * trial.own || own < trial.own / 2)) {
      decide("threads", t, w.batch,
             "trial void: the consumer's own time per batch went from " +
                 text("%.1f ms", trial.own * 1e3) + " to " + text("%.1f ms", own * 1e3) +
                 " (it changed, not the loader)");
      return false;
    }
    if (trial.grow && ratio < 1.0 + kMinGain) {
      ceiling_ = trial.from;
      ceiling_until_ = windows_ + grow_hold_;
      decide("threads", trial.from, w.batch,
             std::to_string(t) + " threads gave " + text("%.2fx", ratio) +
                 " the batches per second of " + std::to_string(trial.from) + ": back, held for " +
                 std::to_string(grow_hold_) + " windows");
      grow_hold_ *= 2;
      return true;
    }
    if (!trial.grow && (wait > kWaitGrow || ratio < 1.0 - kMinGain)) {
      floor_ = trial.from;
      floor_until_ = windows_ + hold_;
      decide("threads", trial.from, w.batch,
             "data wait " + percent(wait) + " (" + text("%.2fx", ratio) +
                 " the batches per second) after the shrink: back, held for " +
                 std::to_string(hold_) + " windows");
      hold_ *= 2;
      return true;
    }
  }

  if (wait > kWaitGrow) {
    const int top = windows_ < ceiling_until_ ? ceiling_ : s_.max_threads;
    if (s_.auto_threads && t < top && memory_room) {
      // In proportion to the wait (waiting half the time: about twice the threads), but no
      // more at once than there are idle cores to run them (one, as a trial, when none is).
      const int want = static_cast<int>(std::ceil(t / (1.0 - std::min(wait, 0.9)) - 1e-9));
      const int add =
          std::clamp(want - t, 1, std::max(1, static_cast<int>(std::floor(w.idle_cores))));
      trial_ = Trial{true, true, t, rate, own};
      decide("threads", std::min(top, t + add), w.batch,
             "data wait " + percent(wait) + " with " + text("%.1f", w.idle_cores) + " cores idle");
    } else if (s_.auto_prefetch && p < s_.max_prefetch && full > 0.05 && memory_room) {
      // Fast enough on average (the queue was full at times), yet the consumer waited: the
      // batches come in bursts, and a deeper queue evens them out.
      decide("prefetch", p + 1, w.batch,
             "data wait " + percent(wait) + " although the queue was full " + percent(full) +
                 " of the time");
    } else if (s_.auto_threads && t < s_.max_threads && noted_ != t) {
      noted_ = t;
      decide("threads", t, w.batch,
             "data wait " + percent(wait) + " but " +
                 (memory_room ? "more threads gave no more batches per second lately"
                              : std::string("no memory to spare")));
    }
  } else if (wait < kWaitQuiet && full > kFullShrink && s_.auto_threads && t > 1) {
    const int lowest = windows_ < floor_until_ ? floor_ : 1;
    if (t - 1 >= lowest) {
      trial_ = Trial{true, false, t, rate, own};
      decide("threads", t - 1, w.batch,
             "queue full " + percent(full) + " of the time, data wait " + percent(wait));
    }
  }
  return changes() != before;
}

std::vector<TunerDecision> Tuner::decisions() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return decisions_;
}

bool ScriptedTuner::observe(const TunerWindow& w) {
  if (next_ >= script_.size()) return false;
  const auto [t, p] = script_[next_++];
  const int64_t before = changes();
  decide("threads", t, w.batch, "scripted");
  decide("prefetch", p, w.batch, "scripted");
  return changes() != before;
}

double IdleProbe::idle_cores(double cores, double process_cpu_seconds) {
  std::ifstream in("/proc/stat");
  std::string cpu;
  uint64_t v[10] = {};
  in >> cpu;
  for (auto& x : v) in >> x;
  const uint64_t idle = v[3] + v[4];  // idle + iowait
  uint64_t total = 0;
  for (int i = 0; i < 8; ++i) total += v[i];  // guest time is already in user
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  const double wall = static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
  double out = 0;
  if (last_cpu_ >= 0 && total > last_total_ && wall > last_wall_) {
    const long online = sysconf(_SC_NPROCESSORS_ONLN);
    const double machine_idle = static_cast<double>(idle - last_idle_) /
                                static_cast<double>(total - last_total_) *
                                static_cast<double>(std::max(online, 1L));
    const double mine = (process_cpu_seconds - last_cpu_) / (wall - last_wall_);
    out = std::max(0.0, std::min(machine_idle, cores - mine));
  }
  last_idle_ = idle;
  last_total_ = total;
  last_cpu_ = process_cpu_seconds;
  last_wall_ = wall;
  return out;
}

}  // namespace loadscope
