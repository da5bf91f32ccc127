#include "loadscope/core/tuner.h"

#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>

namespace loadscope {

namespace {

std::string percent(double fraction) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.0f%%", 100.0 * fraction);
  return buf;
}

std::string cores_text(double cores) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", cores);
  return buf;
}

std::string gib(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GiB", static_cast<double>(bytes) / (1 << 30));
  return buf;
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
  std::lock_guard<std::mutex> hold(observe_mutex_);
  settle_ = true;
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
  const bool measured_rss = s_.memory_limit > 0 && w.rss >= 0;
  const bool memory_room =
      !measured_rss || w.rss + bytes_per_batch_.load(std::memory_order_relaxed) <= s_.memory_limit;

  if (measured_rss && w.rss > s_.memory_limit) {
    const std::string why =
        "resident memory " + gib(w.rss) + " over memory_limit " + gib(s_.memory_limit);
    if (s_.auto_prefetch && p > 1) {
      decide("prefetch", p - 1, w.batch, why);
    } else if (s_.auto_threads && t > 1) {
      decide("threads", t - 1, w.batch, why);  // each thread holds decoder scratch
    }
    return changes() != before;
  }

  if (wait > kWaitGrow) {
    if (s_.auto_threads && t < s_.max_threads && windows_ - last_shrink_window_ <= 3) {
      // The last shrink brought the wait back: undo it, and do not try that level again for a
      // while (longer after each failed try), so that a steady consumer sees few changes.
      floor_ = t + 1;
      floor_until_ = windows_ + hold_;
      decide("threads", t + 1, w.batch,
             "data wait " + percent(wait) + " after the last shrink: back, held for " +
                 std::to_string(hold_) + " windows");
      hold_ *= 2;
    } else if (s_.auto_threads && t < s_.max_threads && w.idle_cores >= kIdleToGrow &&
               memory_room) {
      // In proportion to the wait (waiting half the time: about twice the threads), but no
      // more threads than there are idle cores to run them.
      const int want = static_cast<int>(std::ceil(t / (1.0 - std::min(wait, 0.9)) - 1e-9));
      const int add =
          std::clamp(want - t, 1, std::max(1, static_cast<int>(std::floor(w.idle_cores))));
      decide("threads", std::min(s_.max_threads, t + add), w.batch,
             "data wait " + percent(wait) + " with " + cores_text(w.idle_cores) + " cores idle");
    } else if (s_.auto_prefetch && p < s_.max_prefetch && full > 0.05 && memory_room) {
      // Fast enough on average (the queue was full at times), yet the consumer waited: the
      // batches come in bursts, and a deeper queue evens them out.
      decide("prefetch", p + 1, w.batch,
             "data wait " + percent(wait) + " although the queue was full " + percent(full) +
                 " of the time");
    } else if (s_.auto_threads && t < s_.max_threads && last_grow_note_ != t) {
      last_grow_note_ = t;
      decide("threads", t, w.batch,
             "data wait " + percent(wait) + " but only " + cores_text(w.idle_cores) +
                 " cores idle" + (memory_room ? "" : " and no memory to spare") +
                 ": more threads would take cores from the training step");
    }
  } else if (wait < kWaitQuiet && full > kFullShrink && s_.auto_threads && t > 1) {
    const int lowest = windows_ < floor_until_ ? floor_ : 1;
    if (t - 1 >= lowest) {
      last_shrink_window_ = windows_;
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

double IdleProbe::idle_cores(double cores) {
  std::ifstream in("/proc/stat");
  std::string cpu;
  uint64_t v[10] = {};
  in >> cpu;
  for (auto& x : v) in >> x;
  const uint64_t idle = v[3] + v[4];  // idle + iowait
  uint64_t total = 0;
  for (int i = 0; i < 8; ++i) total += v[i];  // guest time is already in user
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  const double cpu_s = static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
                       1e-6 * static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  const double wall = static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
  double out = 0;
  if (last_cpu_ >= 0 && total > last_total_ && wall > last_wall_) {
    const long online = sysconf(_SC_NPROCESSORS_ONLN);
    const double machine_idle = static_cast<double>(idle - last_idle_) /
                                static_cast<double>(total - last_total_) *
                                static_cast<double>(std::max(online, 1L));
    const double mine = (cpu_s - last_cpu_) / (wall - last_wall_);
    out = std::max(0.0, std::min(machine_idle, cores - mine));
  }
  last_idle_ = idle;
  last_total_ = total;
  last_cpu_ = cpu_s;
  last_wall_ = wall;
  return out;
}

}  // namespace loadscope
