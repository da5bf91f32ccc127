// The engine without Python and without codecs: ordering, coverage, determinism across thread
// counts, error policy, striding and prompt stop.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <new>
#include <set>
#include <thread>

#include <oneapi/tbb/global_control.h>

#include "helpers.h"
#include "loadscope/core/engine.h"
#include "loadscope/core/error.h"
#include "loadscope/core/permutation.h"
#include "loadscope/core/rng.h"
#include "loadscope/io/sources.h"

using namespace loadscope;

namespace {

// Writes 16 bytes per sample derived from (key, seed, epoch, position) via the engine's Rng, so
// a batch's bytes depend on exactly what the engine promises and nothing else. Samples whose
// key contains "bad" fail; "eio" ones throw a ReadFailure that does not name them; "slow" ones take
// 20 ms; "gate" ones wait until the epoch is cancelled (then finish normally), counting how many
// ever started.
class FakeProcessor : public SampleProcessor {
 public:
  std::atomic<int> gated_started{0};
  std::atomic<bool> gate_timed_out{false};

  std::vector<size_t> fixed_bytes_per_sample() const override { return {16, 8}; }
  size_t num_string_fields() const override { return 1; }
  void process(Sample& s, Batch& b, int slot, SampleContext& ctx) override {
    if (s.key.find("bad") != std::string::npos) {
      throw SampleError(s.key, "fake decode error", FailureKind::kDecode);
    }
    if (s.key.find("eio") != std::string::npos) throw ReadFailure("fake EIO");  // unnamed
    if (s.key.find("slow") != std::string::npos) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (s.key.find("gate") != std::string::npos) {
      gated_started.fetch_add(1);
      std::unique_lock<std::mutex> lock(gate_mutex_);
      // The timeout only catches a stop() that never cancels: the test then fails, not hangs.
      // (Catch's assertions are not thread-safe: the test checks the flag.)
      if (!gate_cv_.wait_for(lock, std::chrono::seconds(60), [&] { return cancelled_; })) {
        gate_timed_out = true;
      }
    }
    Rng rng(ctx.order->seed, ctx.order->epoch, RngStream::kAugment, s.position);
    uint8_t* px = b.fixed_data(0) + slot * 16;
    for (int i = 0; i < 16; ++i) px[i] = static_cast<uint8_t>(rng.next_u64());
    reinterpret_cast<int64_t*>(b.fixed_data(1))[slot] = std::stoll(s.key.substr(1));
    b.strings[0][slot] = s.key;
  }
  void cancel() override {
    std::lock_guard<std::mutex> lock(gate_mutex_);
    cancelled_ = true;
    gate_cv_.notify_all();
  }

 private:
  std::mutex gate_mutex_;
  std::condition_variable gate_cv_;
  bool cancelled_ = false;
};

std::shared_ptr<Source> list_source(int n, const std::set<int>& bad = {}) {
  std::vector<Sample> samples;
  for (int i = 0; i < n; ++i) {
    Sample s;
    s.key = bad.count(i) ? "k" + std::to_string(i) + "-bad" : "k" + std::to_string(i);
    samples.push_back(s);
  }
  return std::make_shared<io::ListSource>(std::move(samples));
}

struct Collected {
  std::vector<int64_t> ids;  // sample ids in delivery order
  std::vector<int> sizes;    // batch sizes
  std::string bytes;         // all pixel bytes
  std::vector<SampleNote> skipped;
};

Collected collect(std::shared_ptr<Source> src, EngineOptions o) {
  EpochRun run(src, std::make_shared<FakeProcessor>(), o);
  run.start();
  Collected c;
  std::unique_ptr<Batch> b;
  while (true) {
    auto st = run.next(b, std::chrono::milliseconds(10000));
    REQUIRE(st != EpochRun::Status::kTimeout);
    if (st == EpochRun::Status::kEnd) break;
    c.sizes.push_back(b->size);
    const auto* ids = reinterpret_cast<const int64_t*>(b->fixed_data(1));
    for (int i = 0; i < b->size; ++i) {
      c.ids.push_back(ids[i]);
      CHECK(b->keys[i] == b->strings[0][i]);
    }
    c.bytes.append(reinterpret_cast<const char*>(b->fixed_data(0)), b->size * 16);
    c.skipped.insert(c.skipped.end(), b->skipped.begin(), b->skipped.end());
  }
  return c;
}

EngineOptions options(int threads, int batch, bool shuffle = true, int64_t epoch = 0) {
  EngineOptions o;
  o.threads = threads;
  o.batch_size = batch;
  o.prefetch = 3;
  o.order = EpochOrder{7, epoch, shuffle};
  return o;
}

}  // namespace

TEST_CASE("every sample exactly once per epoch, in batches of batch_size", "[engine]") {
  auto c = collect(list_source(1000), options(3, 64));
  REQUIRE(c.ids.size() == 1000);
  CHECK(std::set<int64_t>(c.ids.begin(), c.ids.end()).size() == 1000);
  REQUIRE(c.sizes.size() == 16);
  for (size_t i = 0; i + 1 < c.sizes.size(); ++i) CHECK(c.sizes[i] == 64);
  CHECK(c.sizes.back() == 1000 - 15 * 64);
  auto dropped = options(3, 64);
  dropped.drop_last = DropLast::kSteps;
  CHECK(collect(list_source(1000), dropped).ids.size() == 15 * 64);
}

TEST_CASE("batches are identical for 1, 2 and 4 threads", "[engine]") {
  auto one = collect(list_source(777), options(1, 32));
  for (int t : {2, 4}) {
    auto many = collect(list_source(777), options(t, 32));
    CHECK(many.ids == one.ids);
    CHECK(many.bytes == one.bytes);
  }
}

TEST_CASE("order depends on seed and epoch only", "[engine]") {
  auto a = collect(list_source(500), options(2, 50, true, 0));
  auto b = collect(list_source(500), options(2, 50, true, 1));
  auto a2 = collect(list_source(500), options(2, 50, true, 0));
  auto plain = collect(list_source(500), options(2, 50, false, 0));
  CHECK(a.ids == a2.ids);
  CHECK(a.ids != b.ids);
  CHECK(a.bytes != b.bytes);  // augmentation draws change with the epoch too
  for (int64_t i = 0; i < 500; ++i) CHECK(plain.ids[i] == i);
  auto other_seed = options(2, 50, true, 0);
  other_seed.order.seed = 8;
  CHECK(collect(list_source(500), other_seed).ids != a.ids);
}

TEST_CASE("a shuffled order is a permutation of its own per seed and epoch", "[engine][order]") {
  for (uint64_t n : {1, 2, 3, 255, 256, 257, 1000, 65537}) {
    INFO("n = " << n);
    const Permutation p(n, true, 7, 0, RngStream::kOrder);
    std::vector<char> seen(n, 0);
    bool moved = false;
    for (uint64_t i = 0; i < n; ++i) {
      const uint64_t v = p(i);
      REQUIRE(v < n);
      REQUIRE_FALSE(seen[v]);
      seen[v] = 1;
      moved = moved || v != i;
    }
    const Permutation identity(n, false, 7, 0, RngStream::kOrder);
    for (uint64_t i = 0; i < n; ++i) REQUIRE(identity(i) == i);
    if (n < 255) continue;
    CHECK(moved);
    const Permutation epoch1(n, true, 7, 1, RngStream::kOrder),
        seed8(n, true, 8, 0, RngStream::kOrder);
    int same_epoch = 0, same_seed = 0;
    for (uint64_t i = 0; i < n; ++i) same_epoch += epoch1(i) == p(i), same_seed += seed8(i) == p(i);
    CHECK(same_epoch <
          static_cast<int>(n / 16));  // about one fixed point each, as for random orders
    CHECK(same_seed < static_cast<int>(n / 16));
  }
  // The first sample of 10 over 4000 epochs: each one about 400 times (a random order's 1/10).
  std::vector<int> first(10, 0);
  for (int64_t epoch = 0; epoch < 4000; ++epoch)
    ++first[Permutation(10, true, 1, epoch, RngStream::kOrder)(0)];
  for (int count : first) CHECK((count > 300 && count < 500));
}

TEST_CASE("striding splits batches between consumers without overlap", "[engine]") {
  auto whole = collect(list_source(300), options(2, 16));
  std::vector<int64_t> merged;
  std::vector<Collected> parts;
  for (int w = 0; w < 3; ++w) {
    auto o = options(2, 16);
    o.batch_offset = w;
    o.batch_stride = 3;
    parts.push_back(collect(list_source(300), o));
  }
  // Round-robin over the workers, as torch's DataLoader does, gives back the whole epoch.
  std::vector<size_t> pos(3, 0);
  for (size_t batch = 0; batch < whole.sizes.size(); ++batch) {
    auto& p = parts[batch % 3];
    const size_t n = whole.sizes[batch];
    merged.insert(merged.end(), p.ids.begin() + pos[batch % 3], p.ids.begin() + pos[batch % 3] + n);
    pos[batch % 3] += n;
  }
  CHECK(merged == whole.ids);
}

TEST_CASE("on_error=raise names the first failing sample in order", "[engine]") {
  auto o = options(2, 10, false);
  EpochRun run(list_source(100, {37, 55}), std::make_shared<FakeProcessor>(), o);
  run.start();
  std::unique_ptr<Batch> b;
  int batches = 0;
  try {
    while (run.next(b, std::chrono::seconds(10)) == EpochRun::Status::kBatch) ++batches;
    FAIL("no error raised");
  } catch (const SampleError& e) {
    CHECK(e.key() == "k37-bad");
    CHECK(e.reason() == "fake decode error");
    CHECK(e.kind() == FailureKind::kDecode);
  }
  CHECK(batches == 3);  // batches 0..2 arrived before the one holding sample 37
  CHECK(run.next(b, std::chrono::seconds(1)) == EpochRun::Status::kEnd);
}

TEST_CASE("on_error=skip removes, counts and names failures; the budget stops it", "[engine]") {
  auto o = options(2, 10, false);
  o.on_error = ErrorPolicy::kSkip;
  auto c = collect(list_source(100, {3, 4, 99}), o);
  CHECK(c.ids.size() == 97);
  CHECK(c.sizes[0] == 8);
  CHECK(c.sizes.back() == 9);
  REQUIRE(c.skipped.size() == 3);
  CHECK(c.skipped[0].key == "k3-bad");
  CHECK(c.skipped[0].kind == "decode");
  CHECK(c.skipped[0].position == 3);
  // The remaining samples are the right ones, with their own bytes.
  auto clean = collect(list_source(100), options(2, 10, false));
  std::string expect;
  for (int64_t i = 0; i < 100; ++i) {
    if (i != 3 && i != 4 && i != 99) expect += clean.bytes.substr(i * 16, 16);
  }
  CHECK(c.bytes == expect);

  o.max_errors = 2;
  CHECK_THROWS_AS(collect(list_source(100, {3, 4, 99}), o), BudgetError);
  o.max_errors = -1;
  o.max_error_rate = 0.01;  // 3 failures > 0.01 * max(seen, 100)
  CHECK_THROWS_WITH(collect(list_source(300, {1, 2, 3}), o), Catch::Contains("error budget"));
}

TEST_CASE("all samples of a batch failing gives no empty batch", "[engine]") {
  auto o = options(2, 4, false);
  o.on_error = ErrorPolicy::kSkip;
  auto c = collect(list_source(12, {4, 5, 6, 7}), o);
  CHECK(c.sizes == std::vector<int>{4, 4});
  CHECK(c.skipped.size() == 4);
}

TEST_CASE("stop is prompt and idempotent mid-epoch", "[engine]") {
  // Counted, not timed: both workers sit in a sample that lasts until the epoch is cancelled.
  // stop() must let exactly those two finish and start no other, although the jobs in flight
  // hold 22 more.
  std::vector<Sample> samples;
  for (int i = 0; i < 2000; ++i) {
    Sample s;
    s.key = "k" + std::to_string(i) + "-gate";
    samples.push_back(s);
  }
  auto proc = std::make_shared<FakeProcessor>();
  EpochRun run(std::make_shared<io::ListSource>(samples), proc, options(2, 8, false));
  run.start();
  std::unique_ptr<Batch> b;
  for (int i = 0; i < 60000 && proc->gated_started.load() < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  REQUIRE(proc->gated_started.load() == 2);
  run.stop();
  CHECK(proc->gated_started.load() == 2);
  CHECK_FALSE(proc->gate_timed_out.load());
  run.stop();
  CHECK(run.next(b, std::chrono::milliseconds(10)) == EpochRun::Status::kEnd);
}

TEST_CASE("next() times out while the first batch is not ready", "[engine]") {
  std::vector<Sample> samples(4);
  for (int i = 0; i < 4; ++i) samples[i].key = "k" + std::to_string(i) + "-slow";
  EpochRun run(std::make_shared<io::ListSource>(samples), std::make_shared<FakeProcessor>(),
               options(1, 4));
  run.start();
  std::unique_ptr<Batch> b;
  CHECK(run.next(b, std::chrono::milliseconds(1)) == EpochRun::Status::kTimeout);
  CHECK(run.next(b, std::chrono::seconds(10)) == EpochRun::Status::kBatch);
}

TEST_CASE("bad engine options are refused up front", "[engine]") {
  auto src = list_source(10);
  auto proc = std::make_shared<FakeProcessor>();
  auto o = options(0, 4);
  CHECK_THROWS_AS(EpochRun(src, proc, o), ConfigError);
  o = options(1, 0);
  CHECK_THROWS_AS(EpochRun(src, proc, o), ConfigError);
  o = options(1, 4);
  o.batch_offset = 2;
  o.batch_stride = 2;
  CHECK_THROWS_AS(EpochRun(src, proc, o), ConfigError);
}

TEST_CASE("mixing sources follows the weights and repeats a source only after all of it", "[mix]") {
  auto small = std::static_pointer_cast<Source>(list_source(7));
  std::vector<Sample> other;
  for (int i = 0; i < 1000; ++i) {
    Sample s;
    s.key = "m" + std::to_string(i);
    other.push_back(s);
  }
  io::MixSource mix({small, std::make_shared<io::ListSource>(other)}, {1, 3}, 4000);
  auto draw = [&](int64_t epoch) {
    mix.start_epoch(EpochOrder{5, epoch, true});
    std::vector<std::string> keys;
    Sample s;
    while (mix.next(s)) keys.push_back(s.key);
    return keys;
  };
  auto keys = draw(0);
  REQUIRE(keys.size() == 4000);
  std::vector<std::string> from_small;
  for (const auto& k : keys) {
    if (k[0] == 'k') from_small.push_back(k);
  }
  CHECK(from_small.size() > 900);  // 1000 expected
  CHECK(from_small.size() < 1100);
  for (size_t i = 0; i + 7 <= from_small.size(); i += 7) {  // each pass shows all 7 once
    std::set<std::string> pass(from_small.begin() + i, from_small.begin() + i + 7);
    CHECK(pass.size() == 7);
  }
  CHECK(draw(0) == keys);
  CHECK(draw(1) != keys);
  CHECK_THROWS_AS(io::MixSource({small}, {0}, 10), ConfigError);
}

TEST_CASE("epoch geometry: equal batch counts per rank, padding as DistributedSampler",
          "[engine][ranks]") {
  for (int64_t world : {1, 2, 3, 8}) {
    for (int64_t batch : {1, 4, 7}) {
      for (int64_t n : {0, 1, 5, 31, 32, 33, 100, 1001}) {
        INFO("n=" << n << " batch=" << batch << " world=" << world);
        EpochGeometry g(n, batch, world, DropLast::kNone);
        CHECK(g.batches() % world == 0);
        CHECK(g.padding() == (world - n % world) % world);  // DistributedSampler's total_size - n
        int64_t pos = 0;
        for (int64_t k = 0; k < g.batches(); ++k) {  // contiguous, and each step's batches equal
          CHECK(g.start(k) == pos);
          CHECK(g.size(k) >= 1);
          CHECK(g.size(k) == g.size(k / world * world));
          pos += g.size(k);
        }
        CHECK(pos == g.length());
        CHECK(g.size(g.batches()) == 0);
        int64_t real = 0;
        for (int64_t r = 0; r < world; ++r) {  // each rank the same count; padding only at the end
          CHECK(g.rank_length(r) == g.length() / world);
          CHECK(g.rank_samples(r) <= g.rank_length(r));
          real += g.rank_samples(r);
        }
        CHECK(real == n);  // every sample exactly once across the ranks, padding not counted
        EpochGeometry d(n, batch, world, DropLast::kSteps);
        CHECK(d.length() == n / (batch * world) * batch * world);
        // DistributedSampler(drop_last=True): num_samples = ceil((n - W) / W) per rank, no
        // padding, and (for W > 1) the DataLoader batches each rank's share on its own.
        EpochGeometry u(n, batch, world, DropLast::kUneven);
        const int64_t per_rank = n / world;
        CHECK(u.padding() == 0);
        CHECK(u.length() == per_rank * world);
        CHECK(u.batches() % world == 0);
        CHECK(u.batches() / world == (per_rank + batch - 1) / batch);
        for (int64_t r = 0; r < world; ++r) CHECK(u.rank_samples(r) == per_rank);
      }
    }
  }
  CHECK_THROWS_AS(EpochGeometry(-1, 4, 2, DropLast::kNone), ConfigError);
  EpochGeometry stream(-1, 4, 1, DropLast::kNone);
  CHECK(stream.batches() == -1);
  CHECK(stream.size(1000) == 4);
}

TEST_CASE("contiguous partition: the same batches, each rank's in one increasing stretch",
          "[engine][ranks]") {
  for (int64_t world : {1, 2, 3, 8}) {
    for (int64_t batch : {1, 4, 7}) {
      for (int64_t n : {0, 1, 5, 31, 32, 33, 100, 1001}) {
        for (DropLast drop : {DropLast::kNone, DropLast::kSteps, DropLast::kUneven}) {
          INFO("n=" << n << " batch=" << batch << " world=" << world);
          EpochGeometry g(n, batch, world, drop);
          std::vector<int> taken(static_cast<size_t>(g.batches()), 0);
          for (int64_t r = 0; r < world; ++r) {
            int64_t last = -1, samples = 0;
            for (int64_t k = r; k < g.batches(); k += world) {
              const int64_t b = g.batch_of_slot(k, Partition::kContiguous);
              CHECK(b > last);  // a rank's batches lie in order: reaching each is a skip forward
              CHECK(g.size(b) == g.size(k));  // each slot keeps its size
              ++taken[static_cast<size_t>(b)];
              samples += g.size(b);
              last = b;
            }
            CHECK(samples == g.rank_length(r));
          }
          for (int t : taken) CHECK(t == 1);  // every batch of the epoch exactly once
          CHECK(g.batch_of_slot(g.batches(), Partition::kContiguous) == g.batches());
        }
      }
    }
  }
}

TEST_CASE("a read or decode Failure is an Error, and names its sample as a SampleError",
          "[engine]") {
  try {
    throw DecodeFailure("bad huffman table");
  } catch (const Error& e) {  // one hierarchy: a catch of Error sees it
    const auto& f = dynamic_cast<const Failure&>(e);
    const SampleError named = f.named("a/b.jpg");
    CHECK(named.key() == "a/b.jpg");
    CHECK(named.reason() == "bad huffman table");
    CHECK(named.kind() == FailureKind::kDecode);
  }
  CHECK(ReadFailure("EIO").named("x").kind() == FailureKind::kRead);
}

TEST_CASE("a Failure a processor did not name is the engine's, named and of its kind", "[engine]") {
  std::vector<Sample> samples(8);
  for (int i = 0; i < 8; ++i) samples[i].key = "k" + std::to_string(i) + (i == 5 ? "-eio" : "");
  auto o = options(2, 4, false);
  o.on_error = ErrorPolicy::kSkip;
  auto c = collect(std::make_shared<io::ListSource>(samples), o);
  REQUIRE(c.skipped.size() == 1);
  CHECK(c.skipped[0].key == "k5-eio");
  CHECK(c.skipped[0].kind == "read");  // not "decode", the kind of an unknown exception
  CHECK(c.skipped[0].reason == "fake EIO");
}

TEST_CASE("concurrency and queue depth changed mid-epoch: the same batches as fixed threads",
          "[engine][tuner]") {
  // A change after every batch, through every (threads, prefetch) pair up to 4 x 4, in an
  // arena of 4: no sample lost, repeated or reordered, and the bytes of fixed threads.
  std::vector<std::pair<int, int>> script;
  for (int round = 0; round < 6; ++round) {
    for (int t = 1; t <= 4; ++t) {
      for (int p = 1; p <= 4; ++p) script.emplace_back(round % 2 ? 5 - t : t, (t + p) % 4 + 1);
    }
  }
  TunerSettings s;
  s.max_threads = 4;
  s.threads = 2;
  s.auto_threads = true;
  s.prefetch = 2;
  s.max_prefetch = 4;
  s.auto_prefetch = true;
  s.window_batches = 1;
  s.window_seconds = 0;
  for (bool telemetry : {false, true}) {
    auto tuner = std::make_shared<ScriptedTuner>(s, script);
    EngineOptions o = options(4, 7);
    o.tuner = tuner;
    Collected fixed = collect(list_source(1000), options(1, 7));
    Collected tuned;
    {
      EpochRun run(list_source(1000), std::make_shared<FakeProcessor>(), o,
                   std::make_shared<telemetry::Telemetry>(telemetry));
      run.start();
      std::unique_ptr<Batch> b;
      while (run.next(b, std::chrono::milliseconds(10000)) == EpochRun::Status::kBatch) {
        tuned.sizes.push_back(b->size);
        const auto* ids = reinterpret_cast<const int64_t*>(b->fixed_data(1));
        tuned.ids.insert(tuned.ids.end(), ids, ids + b->size);
        tuned.bytes.append(reinterpret_cast<const char*>(b->fixed_data(0)), b->size * 16);
      }
    }
    CHECK(tuner->changes() > 100);  // the script ran: windows closed and settings changed
    CHECK(tuned.ids == fixed.ids);
    CHECK(tuned.sizes == fixed.sizes);
    CHECK(tuned.bytes == fixed.bytes);
  }
}

namespace {
// Counts the samples running at once.
class ConcurrencyProcessor : public FakeProcessor {
 public:
  std::atomic<int> running{0}, most{0};
  void process(Sample& s, Batch& b, int slot, SampleContext& ctx) override {
    const int now = running.fetch_add(1) + 1;
    for (int m = most.load(); now > m && !most.compare_exchange_weak(m, now);) {
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    FakeProcessor::process(s, b, slot, ctx);
    running.fetch_sub(1);
  }
};
}  // namespace

TEST_CASE("the tuner's thread count bounds the samples running at once", "[engine][tuner]") {
  for (int limit : {1, 3}) {
    TunerSettings s;
    s.max_threads = 4;
    s.threads = limit;
    s.auto_threads = true;
    s.prefetch = 4;
    s.max_prefetch = 4;
    auto proc = std::make_shared<ConcurrencyProcessor>();
    EngineOptions o = options(4, 8);
    o.tuner = std::make_shared<ScriptedTuner>(s, std::vector<std::pair<int, int>>{});
    EpochRun run(list_source(200), proc, o);
    run.start();
    std::unique_ptr<Batch> b;
    int samples = 0;
    while (run.next(b, std::chrono::milliseconds(10000)) == EpochRun::Status::kBatch) {
      samples += b->size;
    }
    CHECK(samples == 200);
    CHECK(proc->most.load() <= limit);
    if (limit == 1) CHECK(proc->most.load() == 1);
  }
}

namespace {
// Remembers which threads ran its samples.
class ThreadsProcessor : public FakeProcessor {
 public:
  std::set<std::thread::id> threads;
  void process(Sample& s, Batch& b, int slot, SampleContext& ctx) override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      threads.insert(std::this_thread::get_id());
    }
    FakeProcessor::process(s, b, slot, ctx);
  }

 private:
  std::mutex mutex_;
};
}  // namespace

TEST_CASE("a telemetry made where a freed one lay gets its own worker slots",
          "[engine][telemetry]") {
  // The worker's slot was cached per thread, keyed on the telemetry's address: a loader made
  // after another was dropped often gets its telemetry at the freed one's address, and its
  // workers then wrote into the freed slots (a heap corruption under Python, where an abandoned
  // epoch kept oneTBB's workers alive). Here the address is the same by construction, and a
  // handle keeps the worker thread alive between runs, as that epoch did; the test checks that
  // some thread did serve two of them (otherwise it would have tested nothing). Its handle is
  // released, not finalized: a blocking finalize with no run left to allow workers spun forever
  // in a one-CPU process (engine.cc, Arena::shutdown).
  tbb::task_scheduler_handle keep(tbb::attach{});
  void* storage =
      ::operator new(sizeof(telemetry::Telemetry), std::align_val_t(alignof(telemetry::Telemetry)));
  // Eight rounds: more than the workers earlier tests of a one-process run (`make asan`) can
  // have made, so some thread serves two of them whichever joins each arena.
  std::set<std::thread::id> before;
  bool reused = false;
  for (int round = 0; round < 8; ++round) {
    std::shared_ptr<telemetry::Telemetry> t(new (storage) telemetry::Telemetry(true),
                                            [](telemetry::Telemetry* p) { p->~Telemetry(); });
    t->set_tracing(true);
    auto processor = std::make_shared<ThreadsProcessor>();
    {
      EpochRun run(list_source(40), processor, options(1, 8), t);
      run.start();
      std::unique_ptr<Batch> b;
      EpochRun::Status st;
      while ((st = run.next(b, std::chrono::milliseconds(10000))) == EpochRun::Status::kBatch) {
      }
      REQUIRE(st == EpochRun::Status::kEnd);
    }
    int samples = 0;
    for (const auto& [role, spans] : t->take_spans()) {
      for (const telemetry::Span& s : spans)
        samples += std::string(s.name) == "sample" && role.rfind("worker", 0) == 0;
    }
    CHECK(samples == 40);  // every sample recorded in this telemetry's own worker slot
    for (auto id : processor->threads) reused = reused || before.count(id);
    before.insert(processor->threads.begin(), processor->threads.end());
  }
  ::operator delete(storage, std::align_val_t(alignof(telemetry::Telemetry)));
  CHECK(reused);
}
