// Telemetry building blocks: histogram quantiles against exact order statistics, bucket
// boundaries, concurrent writers and readers, /proc readings, the buffer pool's pin hooks.
#include <algorithm>
#include <cmath>
#include <random>
#include <set>
#include <thread>

#include "helpers.h"
#include "loadscope/core/batch.h"
#include "loadscope/telemetry/histogram.h"
#include "loadscope/telemetry/telemetry.h"

using namespace loadscope;
using telemetry::Histogram;

TEST_CASE("histogram quantiles are within 1/16 of the exact ones", "[telemetry]") {
  std::mt19937_64 gen(42);
  std::lognormal_distribution<double> dist(12.0, 2.0);  // ~160 us median, wide tail
  Histogram h;
  std::vector<uint64_t> values;
  for (int i = 0; i < 100000; ++i) {
    const uint64_t v = static_cast<uint64_t>(dist(gen));
    values.push_back(v);
    h.record(v);
  }
  std::sort(values.begin(), values.end());
  const auto d = h.data();
  REQUIRE(d.count == values.size());
  CHECK(d.max == values.back());
  uint64_t sum = 0;
  for (auto v : values) sum += v;
  CHECK(d.sum == sum);
  for (double q : {0.5, 0.9, 0.99, 0.999}) {
    const double exact = static_cast<double>(values[static_cast<size_t>(q * values.size()) - 1]);
    INFO("q=" << q);
    CHECK(std::abs(d.quantile(q) - exact) <= exact / 16 + 1);
  }
  CHECK(Histogram().data().quantile(0.5) == 0);
}

TEST_CASE("histogram buckets tile the integers", "[telemetry]") {
  for (int b = 0; b + 1 < Histogram::kBuckets; ++b) {
    INFO("bucket " << b);
    REQUIRE(Histogram::bucket_high(b) + 1 == Histogram::bucket_low(b + 1));
    REQUIRE(Histogram::bucket_of(Histogram::bucket_low(b)) == b);
    REQUIRE(Histogram::bucket_of(Histogram::bucket_high(b)) == b);
  }
  for (uint64_t v : {0ull, 1ull, 15ull, 16ull, 17ull, 1000ull, 123456789ull, ~0ull}) {
    const int b = Histogram::bucket_of(v);
    CHECK(Histogram::bucket_low(b) <= v);
    CHECK(v <= Histogram::bucket_high(b));
  }
}

TEST_CASE("kinds and counters are named at run time, one id per name", "[telemetry]") {
  const telemetry::Kind a("test-kind-a"), b("test-kind-b");
  CHECK(a.id() != b.id());
  CHECK(telemetry::Kind("test-kind-a").id() == a.id());
  CHECK(std::string(a.name()) == "test-kind-a");
  CHECK(std::string(telemetry::Kind::name_of(b.id())) == "test-kind-b");
  CHECK(telemetry::Kind::source().id() == telemetry::Kind("source").id());
  telemetry::Telemetry t(true);
  telemetry::Slot& s = t.slot(2, "worker", 0);
  t.record(s, telemetry::Stage::kDecode, b, 500, 7);
  const telemetry::Counter c("test.frames"), ns("test.open_ns");
  t.count(s, c, 3);
  t.count(s, c, 4);
  t.count(s, ns, 9);
  const auto snap = t.snapshot();
  CHECK(snap.stages[1][b.id()].items == 1);
  CHECK(snap.stages[1][b.id()].bytes == 7);
  CHECK(snap.stages[1][a.id()].items == 0);
  bool frames = false, open = false;
  for (const auto& [name, value] : snap.counters) {
    if (name == "test.frames") frames = value == 7;
    if (name == "test.open_ns") open = value == 9;
  }
  CHECK(frames);
  CHECK(open);
}

TEST_CASE("concurrent writers in their own slots and a reader never tear", "[telemetry]") {
  telemetry::Telemetry t(true);
  const int image = telemetry::Kind("image").id();
  std::atomic<bool> go{true};
  std::vector<std::thread> writers;
  for (int w = 0; w < 3; ++w) {
    writers.emplace_back([&, w] {
      telemetry::Slot& s = t.slot(2 + w, "worker", w);
      for (int i = 0; i < 20000; ++i) {
        t.record(s, telemetry::Stage::kDecode, telemetry::Kind("image"), 1000 + i, 10);
      }
    });
  }
  uint64_t last = 0;
  while (last < 60000) {  // counts only grow while the writers run
    const auto snap = t.snapshot();
    const auto& cell = snap.stages[1][image];
    REQUIRE(cell.items >= last);
    REQUIRE(cell.busy.count <= cell.items + 3);
    last = cell.items;
    if (last == 60000) break;
  }
  for (auto& th : writers) th.join();
  const auto snap = t.snapshot();
  CHECK(snap.stages[1][image].items == 60000);
  CHECK(snap.stages[1][image].bytes == 600000);
  CHECK(snap.slots.size() == 3);
}

TEST_CASE("queue occupancy and back-pressure integrate over time", "[telemetry]") {
  telemetry::Telemetry t(true);
  t.set_prefetch(2);
  const uint64_t s = 1000000000;  // ns
  t.epoch_started(10 * s);
  t.depth(0, 2, 10 * s);  // both slots being built
  t.depth(2, 0, 12 * s);  // both ready: full, workers idle
  t.depth(1, 1, 15 * s);
  t.epoch_ended(16 * s);
  const auto snap = t.snapshot();
  CHECK(snap.ready_integral == Approx(2 * 3 + 1 * 1));
  CHECK(snap.inflight_integral == Approx(2 * 2 + 1 * 1));
  CHECK(snap.back_pressure_seconds == Approx(3));
  CHECK(snap.active_seconds == Approx(6));
}

TEST_CASE("process readings match /proc", "[telemetry]") {
  const auto p = telemetry::read_process_stats();
  CHECK(p.rss > 1 << 20);
  CHECK(p.pss > 0);
  CHECK(p.pss <= p.rss + (1 << 20));
  CHECK(p.rss_peak >= p.rss);
  CHECK(p.mem_available > 0);
  CHECK(p.threads >= 1);
  CHECK(p.io_rchar > 0);
}

namespace {
std::set<void*> g_pinned;
int fake_pin(void* p, size_t, unsigned) {
  g_pinned.insert(p);
  return 0;
}
int fake_unpin(void* p) {
  g_pinned.erase(p);
  return 0;
}
}  // namespace

TEST_CASE("the pool pins blocks once and unpins them before freeing", "[pool]") {
  g_pinned.clear();
  {
    auto pool = BufferPool::create(4096, 1, PinHooks{&fake_pin, &fake_unpin});
    auto a = pool->acquire();
    auto b = pool->acquire();
    CHECK(g_pinned.size() == 2);
    CHECK(pool->blocks_pinned() == 2);
    void* first = a.get();
    a.reset();  // back to the free list (keep 1)
    b.reset();  // over the limit: unpinned and freed
    CHECK(g_pinned.size() == 1);
    CHECK(g_pinned.count(first) == 1);
    auto c = pool->acquire();  // reused, not pinned again
    CHECK(c.get() == first);
    CHECK(g_pinned.size() == 1);
  }
  CHECK(g_pinned.empty());  // the pool's destructor unpinned the rest
}
