#include "loadscope/telemetry/telemetry.h"

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace loadscope::telemetry {

const char* stage_name(Stage s) {
  switch (s) {
    case Stage::kRead: return "read";
    case Stage::kDecode: return "decode";
    case Stage::kAugment: return "augment";
    case Stage::kCollate: return "collate";
    default: return "?";
  }
}

namespace {

// Names given ids in order, never changed once published: readers need no lock.
template <int N>
class Names {
 public:
  int id(const char* name, const char* what) {
    std::lock_guard<std::mutex> lock(mutex_);
    const int n = count_.load(std::memory_order_relaxed);
    for (int i = 0; i < n; ++i) {
      if (names_[i] == name) return i;
    }
    if (n == N) {
      throw std::length_error(std::string("telemetry: more than ") + std::to_string(N) + " " +
                              what + " names (raise the limit in telemetry.h)");
    }
    names_[n] = name;
    count_.store(n + 1, std::memory_order_release);
    return n;
  }
  int count() const { return count_.load(std::memory_order_acquire); }
  const char* name(int id) const { return id >= 0 && id < count() ? names_[id].c_str() : "?"; }

 private:
  std::mutex mutex_;
  std::atomic<int> count_{0};
  std::string names_[N];
};

Names<kMaxKinds>& kinds() {
  static Names<kMaxKinds> names;
  return names;
}

Names<kMaxCounters>& counters() {
  static Names<kMaxCounters> names;
  return names;
}

}  // namespace

Kind::Kind(const char* name) : id_(kinds().id(name, "kind")) {}
Kind Kind::source() {
  static const Kind k("source");
  return k;
}
Kind Kind::other() {
  static const Kind k("other");
  return k;
}
const char* Kind::name() const {
  return kinds().name(id_);
}
int Kind::count() {
  return kinds().count();
}
const char* Kind::name_of(int id) {
  return kinds().name(id);
}

Counter::Counter(const char* name) : id_(counters().id(name, "counter")) {}
int Counter::count() {
  return counters().count();
}
const char* Counter::name_of(int id) {
  return counters().name(id);
}

uint64_t thread_cpu_ns() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

Slot::~Slot() {
  for (auto& row : cells) {
    for (auto& c : row) delete c.busy.load();
  }
}

namespace {
std::atomic<uint64_t> g_serial{0};
}  // namespace

Telemetry::Telemetry(bool enabled)
    : enabled_(enabled), created_ns_(now_ns()), serial_(g_serial.fetch_add(1) + 1) {
  depth_.reserve(4096);
}

Telemetry::~Telemetry() = default;

Slot& Telemetry::slot(int index, const char* role, int number) {
  std::lock_guard<std::mutex> lock(slots_mutex_);
  if (static_cast<size_t>(index) >= slots_.size()) slots_.resize(index + 1);
  if (!slots_[index]) {
    slots_[index] = std::make_unique<Slot>();
    // Workers are numbered in the order they first appear (their arena index may start at 1).
    slots_[index]->role =
        number >= 0 ? std::string(role) + " " + std::to_string(worker_slots_++) : role;
  }
  return *slots_[index];
}

namespace {

// Adds to a counter only one thread writes (a slot's): load + store, no read-modify-write;
// readers on other threads see either value.
void bump(std::atomic<uint64_t>& a, uint64_t v) {
  a.store(a.load(std::memory_order_relaxed) + v, std::memory_order_relaxed);
}

}  // namespace

void Telemetry::record(Slot& s, Stage stage, Kind kind, uint64_t ns, uint64_t bytes) {
  StageCell& c = s.cells[static_cast<int>(stage)][kind.id()];
  Histogram* h = c.busy.load(std::memory_order_acquire);
  if (h == nullptr) {  // only this slot's thread writes the cell
    h = new Histogram();
    c.busy.store(h, std::memory_order_release);
  }
  h->record(ns);
  bump(c.items, 1);
  if (bytes) bump(c.bytes, bytes);
}

void Telemetry::fail(Slot& s, Stage stage, Kind kind) {
  bump(s.cells[static_cast<int>(stage)][kind.id()].failures, 1);
}

void Telemetry::count(Slot& s, Counter counter, uint64_t n) {
  bump(s.counters[counter.id()], n);
}

void Telemetry::span(Slot& s, const char* name, uint64_t start_ns, uint64_t end_ns, int64_t arg) {
  if (!tracing()) return;
  if (span_count_.fetch_add(1, std::memory_order_relaxed) >=
      max_spans_.load(std::memory_order_relaxed)) {
    spans_dropped_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  std::lock_guard<std::mutex> lock(s.spans_mutex);  // uncontended: only export also takes it
  s.spans.push_back(Span{name, start_ns, end_ns - start_ns, arg});
}

std::vector<std::array<double, 3>> Telemetry::take_trace_depth() {
  std::lock_guard<std::mutex> lock(depth_mutex_);
  std::vector<std::array<double, 3>> out = std::move(trace_depth_);
  trace_depth_.clear();
  return out;
}

void Telemetry::workers_ended() {
  std::lock_guard<std::mutex> lock(slots_mutex_);
  for (auto& s : slots_) {
    if (s && s->role.rfind("worker", 0) == 0) s->scratch_bytes.store(0, std::memory_order_relaxed);
  }
}

void Telemetry::set_tracing(bool on, size_t max_spans) {
  max_spans_.store(max_spans, std::memory_order_relaxed);
  tracing_.store(on, std::memory_order_relaxed);
}

std::vector<std::pair<std::string, std::vector<Span>>> Telemetry::take_spans() {
  std::vector<std::pair<std::string, std::vector<Span>>> out;
  std::lock_guard<std::mutex> lock(slots_mutex_);
  for (auto& s : slots_) {
    if (!s) continue;
    std::lock_guard<std::mutex> sl(s->spans_mutex);
    out.emplace_back(s->role, std::move(s->spans));
    s->spans.clear();
  }
  span_count_.store(0, std::memory_order_relaxed);
  spans_dropped_.store(0, std::memory_order_relaxed);  // counted per trace
  return out;
}

void Telemetry::depth(int ready, int inflight, uint64_t at_ns) {
  const uint64_t last = last_depth_ns_.load(std::memory_order_relaxed);
  if (last != 0 && at_ns > last) {
    const double dt = static_cast<double>(at_ns - last) * 1e-9;
    ready_integral_.store(ready_integral_.load(std::memory_order_relaxed) +
                              ready_.load(std::memory_order_relaxed) * dt,
                          std::memory_order_relaxed);
    inflight_integral_.store(inflight_integral_.load(std::memory_order_relaxed) +
                                 inflight_.load(std::memory_order_relaxed) * dt,
                             std::memory_order_relaxed);
    const int p = prefetch_.load(std::memory_order_relaxed);
    if (p > 0 && ready_.load(std::memory_order_relaxed) >= p) {
      back_pressure_.store(back_pressure_.load(std::memory_order_relaxed) + dt,
                           std::memory_order_relaxed);
    }
  }
  last_depth_ns_.store(at_ns, std::memory_order_relaxed);
  ready_.store(ready, std::memory_order_relaxed);
  inflight_.store(inflight, std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(depth_mutex_);
  const std::array<double, 3> row{static_cast<double>(at_ns - created_ns_) * 1e-9,
                                  static_cast<double>(ready), static_cast<double>(inflight)};
  if (tracing() && trace_depth_.size() < max_spans_.load(std::memory_order_relaxed)) {
    trace_depth_.push_back(row);
  }
  if (depth_.size() < 4096) {
    depth_.push_back(row);
  } else {  // a ring of the most recent changes
    depth_[depth_next_] = row;
    depth_next_ = (depth_next_ + 1) % depth_.size();
  }
}

void Telemetry::epoch_started(uint64_t at_ns) {
  epoch_start_ns_.store(at_ns, std::memory_order_relaxed);
  first_batch_pending_.store(true, std::memory_order_relaxed);
  last_depth_ns_.store(at_ns, std::memory_order_relaxed);
}

void Telemetry::batch_delivered(uint64_t at_ns) {
  if (first_batch_pending_.exchange(false, std::memory_order_relaxed)) {
    first_last_epoch_.store(static_cast<double>(at_ns - epoch_start_ns_.load()) * 1e-9);
    if (first_after_create_.load() < 0) {
      first_after_create_.store(static_cast<double>(at_ns - created_ns_) * 1e-9);
    }
  }
}

void Telemetry::epoch_ended(uint64_t at_ns) {
  const uint64_t start = epoch_start_ns_.exchange(0, std::memory_order_relaxed);
  if (start != 0 && at_ns > start) active_ns_.fetch_add(at_ns - start, std::memory_order_relaxed);
  depth(0, 0, at_ns);
}

Snapshot Telemetry::snapshot(bool with_depth) const {
  Snapshot out;
  out.enabled = enabled_;
  const uint64_t now = now_ns();
  out.uptime = static_cast<double>(now - created_ns_) * 1e-9;
  uint64_t counts[kMaxCounters] = {};
  {
    std::lock_guard<std::mutex> lock(slots_mutex_);
    for (const auto& s : slots_) {
      if (!s) continue;
      for (int st = 0; st < kStages; ++st) {
        for (int k = 0; k < kMaxKinds; ++k) {
          const StageCell& c = s->cells[st][k];
          StageTotals& t = out.stages[st][k];
          if (const Histogram* h = c.busy.load(std::memory_order_acquire)) h->add_to(t.busy);
          t.items += c.items.load(std::memory_order_relaxed);
          t.bytes += c.bytes.load(std::memory_order_relaxed);
          t.failures += c.failures.load(std::memory_order_relaxed);
        }
      }
      for (int c = 0; c < kMaxCounters; ++c) {
        counts[c] += s->counters[c].load(std::memory_order_relaxed);
      }
      out.slots.push_back(
          Snapshot::SlotView{s->role, s->cpu_ns.load() * 1e-9, s->scratch_bytes.load()});
    }
  }
  for (int c = 0; c < Counter::count(); ++c)
    out.counters.emplace_back(Counter::name_of(c), counts[c]);
  out.prefetch = prefetch_.load();
  out.consumer_wait = consumer_wait.data();
  out.producer_block = producer_block.data();
  // Integrals up to now, counting the current depth since its last change.
  const uint64_t last = last_depth_ns_.load(std::memory_order_relaxed);
  const double tail = last && now > last ? static_cast<double>(now - last) * 1e-9 : 0.0;
  const bool running = epoch_start_ns_.load(std::memory_order_relaxed) != 0;
  out.ready_integral = ready_integral_.load() + (running ? ready_.load() * tail : 0.0);
  out.inflight_integral = inflight_integral_.load() + (running ? inflight_.load() * tail : 0.0);
  const bool full = out.prefetch > 0 && ready_.load() >= out.prefetch;
  out.back_pressure_seconds = back_pressure_.load() + (running && full ? tail : 0.0);
  const uint64_t start = epoch_start_ns_.load(std::memory_order_relaxed);
  out.active_seconds =
      static_cast<double>(active_ns_.load() + (start && now > start ? now - start : 0)) * 1e-9;
  out.batches = batches.load();
  out.samples = samples.load();
  out.failures = failures.load();
  out.warnings = warnings.load();
  out.pool_bytes = static_cast<uint64_t>(std::max<int64_t>(pool_bytes->load(), 0));
  out.pinned_bytes = static_cast<uint64_t>(std::max<int64_t>(pinned_bytes->load(), 0));
  out.source_buffer_bytes = source_buffer_bytes.load();
  out.first_batch_after_create = first_after_create_.load();
  out.first_batch_last_epoch = first_last_epoch_.load();
  out.spans_dropped = spans_dropped_.load();
  if (with_depth) {
    std::lock_guard<std::mutex> lock(depth_mutex_);
    out.depth.reserve(depth_.size());
    for (size_t i = 0; i < depth_.size(); ++i)
      out.depth.push_back(depth_[(depth_next_ + i) % depth_.size()]);
  }
  return out;
}

namespace {

// "Key:   123 kB" lines of /proc files, in bytes.
int64_t kb_field(const std::string& text, const char* key) {
  const size_t at = text.find(key);
  if (at == std::string::npos) return -1;
  return std::strtoll(text.c_str() + at + std::strlen(key), nullptr, 10) * 1024;
}

int64_t plain_field(const std::string& text, const char* key) {
  const size_t at = text.find(key);
  if (at == std::string::npos) return -1;
  return std::strtoll(text.c_str() + at + std::strlen(key), nullptr, 10);
}

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  if (!f) return "";
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

int64_t read_number(const std::string& path) {
  const std::string s = slurp(path);
  if (s.empty() || s[0] < '0' || s[0] > '9') return -1;  // also "max"
  return std::strtoll(s.c_str(), nullptr, 10);
}

}  // namespace

ProcessStats read_process_stats(bool with_pss) {
  ProcessStats p;
  const std::string status = slurp("/proc/self/status");
  p.rss = kb_field(status, "VmRSS:");
  p.rss_peak = kb_field(status, "VmHWM:");
  p.threads = static_cast<int>(plain_field(status, "Threads:"));
  if (with_pss) p.pss = kb_field(slurp("/proc/self/smaps_rollup"), "Pss:");
  p.mem_available = kb_field(slurp("/proc/meminfo"), "MemAvailable:");
  const std::string io = slurp("/proc/self/io");
  p.io_rchar = plain_field(io, "rchar:");
  p.io_read_bytes = plain_field(io, "read_bytes:");
  p.io_syscr = plain_field(io, "syscr:");
  timespec ts{};
  // CPU time of the whole process, split from /proc/self/stat (utime, stime in clock ticks).
  const std::string stat = slurp("/proc/self/stat");
  const size_t paren = stat.rfind(')');
  if (paren != std::string::npos) {
    std::istringstream in(stat.substr(paren + 2));
    std::string field;
    unsigned long long utime = 0, stime = 0;
    for (int i = 3; i <= 15 && in >> field; ++i) {
      if (i == 14) utime = std::stoull(field);
      if (i == 15) stime = std::stoull(field);
    }
    const double tick = static_cast<double>(sysconf(_SC_CLK_TCK));
    p.cpu_user = utime / tick;
    p.cpu_system = stime / tick;
  }
  (void)ts;
  // cgroup v2: "0::/path" in /proc/self/cgroup; v1: the memory controller's line.
  // A v1 memory controller line wins (hybrid hosts list both); v2 lives at /sys/fs/cgroup or,
  // on hybrid hosts, /sys/fs/cgroup/unified.
  std::istringstream cg(slurp("/proc/self/cgroup"));
  std::string line, v1_path, v2_path;
  bool v1 = false, v2 = false;
  while (std::getline(cg, line)) {
    const size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    const std::string rel = path == "/" ? std::string() : path;
    if (controllers.empty()) {
      v2 = true;
      v2_path = rel;
    } else if (("," + controllers + ",").find(",memory,") != std::string::npos) {
      v1 = true;
      v1_path = rel;
    }
  }
  if (v1) {
    const std::string dir = "/sys/fs/cgroup/memory" + v1_path;
    p.cgroup_current = read_number(dir + "/memory.usage_in_bytes");
    p.cgroup_peak = read_number(dir + "/memory.max_usage_in_bytes");
  }
  if (v2 && p.cgroup_current < 0) {
    for (const char* root : {"/sys/fs/cgroup", "/sys/fs/cgroup/unified"}) {
      p.cgroup_current = read_number(root + v2_path + "/memory.current");
      p.cgroup_peak = read_number(root + v2_path + "/memory.peak");
      if (p.cgroup_current >= 0) break;
    }
  }
  return p;
}

}  // namespace loadscope::telemetry
