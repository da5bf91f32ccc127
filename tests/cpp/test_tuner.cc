// The auto controller's policy (core/tuner.h), fed windows of measurements: it grows when the
// consumer waits and cores are idle, not when they are busy, shrinks when the queue stays full,
// undoes a shrink that brought the wait back and then settles.
#include <catch2/catch.hpp>

#include "loadscope/core/tuner.h"

using namespace loadscope;

namespace {

TunerSettings auto_settings(int threads, int max_threads) {
  TunerSettings s;
  s.threads = threads;
  s.max_threads = max_threads;
  s.auto_threads = true;
  s.prefetch = 2;
  s.max_prefetch = 6;
  s.auto_prefetch = true;
  s.cores = max_threads;
  return s;
}

TunerWindow window(double wait, double full, double idle, int64_t batch = 100) {
  TunerWindow w;
  w.batch = batch;
  w.seconds = 1.0;
  w.wait_seconds = wait;
  w.full_seconds = full;
  w.idle_cores = idle;
  return w;
}

// The first window of an epoch, and the one after each change, is not judged.
bool judge(Tuner& t, const TunerWindow& w) {
  return t.window(w);
}

}  // namespace

TEST_CASE("grows in proportion to the data wait while cores are idle", "[tuner]") {
  Tuner t(auto_settings(1, 8));
  t.start_epoch(0);
  CHECK_FALSE(judge(t, window(0.5, 0, 6)));  // the epoch's first window
  CHECK(judge(t, window(0.5, 0, 6, 140)));   // waiting half the time: twice the threads
  CHECK(t.threads() == 2);
  REQUIRE(t.decisions().size() == 1);
  CHECK(t.decisions()[0].text() == "threads 1 → 2 at batch 140: data wait 50% with 6.0 cores idle");
  CHECK_FALSE(judge(t, window(0.75, 0, 6)));  // straddles the change
  CHECK(judge(t, window(0.75, 0, 6)));        // waiting 3/4: four times, 8
  CHECK(t.threads() == 8);
  CHECK_FALSE(judge(t, window(0.2, 0, 1)));
  CHECK_FALSE(judge(t, window(0.2, 0, 1)));  // at the most: nothing to add
  CHECK(t.threads() == 8);
}

TEST_CASE("no more threads than idle cores, and none when the cores are busy", "[tuner]") {
  Tuner t(auto_settings(2, 8));
  t.start_epoch(0);
  judge(t, window(0, 0, 0));
  CHECK(judge(t, window(0.8, 0, 1.4)));  // would want 10: one idle core, one thread
  CHECK(t.threads() == 3);
  judge(t, window(0, 0, 0));
  // The consumer waits but the cores are busy (a CPU-bound step): a thread more would take a
  // core from it. Noted once, not changed.
  CHECK_FALSE(judge(t, window(0.3, 0, 0.2)));
  CHECK_FALSE(judge(t, window(0.3, 0, 0.2)));
  CHECK(t.threads() == 3);
  auto d = t.decisions();
  REQUIRE(d.size() == 2);
  CHECK(d[1].from == d[1].to);
  CHECK(d[1].text().find("threads 3 kept") == 0);
  CHECK(d[1].reason.find("0.2 cores idle") != std::string::npos);
}

TEST_CASE("shrinks while the queue stays full, undoes a shrink that brings the wait back, settles",
          "[tuner]") {
  Tuner t(auto_settings(4, 4));
  t.start_epoch(0);
  judge(t, window(0, 0, 0));
  CHECK(judge(t, window(0.001, 0.9, 2)));  // the loader is ahead: one thread less
  CHECK(t.threads() == 3);
  CHECK(t.decisions().back().reason == "queue full 90% of the time, data wait 0%");
  judge(t, window(0, 0, 0));
  CHECK(judge(t, window(0.001, 0.8, 2)));
  CHECK(t.threads() == 2);
  judge(t, window(0, 0, 0));
  // 2 is too few: the wait comes back, and 3 is restored and held.
  CHECK(judge(t, window(0.2, 0, 1)));
  CHECK(t.threads() == 3);
  CHECK(t.decisions().back().reason.find("after the last shrink") != std::string::npos);
  // A consumer whose needs sit between 2 and 3 threads: full queue at 3, waits at 2. The
  // tries of 2 come ever rarer: a handful of changes in a thousand windows.
  const int64_t before = t.changes();
  for (int i = 0; i < 1000; ++i) {
    judge(t, t.threads() >= 3 ? window(0.001, 0.9, 1) : window(0.2, 0, 1));
  }
  CHECK(t.threads() >= 2);
  CHECK(t.changes() - before <= 14);  // tries after 8, 16, 32, ... windows: 2 changes each
}

TEST_CASE("a deeper queue for bursts, a shallower one over the memory limit", "[tuner]") {
  TunerSettings s = auto_settings(2, 2);
  s.memory_limit = 1000;
  Tuner t(s);
  t.set_bytes_per_batch(100);
  t.start_epoch(0);
  judge(t, window(0, 0, 0));
  TunerWindow w = window(0.2, 0.3, 0);  // waits, yet the queue was full at times: bursts
  w.rss = 500;
  CHECK(judge(t, w));
  CHECK(t.prefetch() == 3);
  judge(t, window(0, 0, 0));
  w.rss = 950;  // no room for one more batch
  CHECK_FALSE(judge(t, w));
  CHECK(t.prefetch() == 3);
  w.rss = 1200;
  CHECK(judge(t, w));
  CHECK(t.prefetch() == 2);
  CHECK(t.decisions().back().reason.find("over memory_limit") != std::string::npos);
}

TEST_CASE("fixed settings never change, and decoder threads share the cores", "[tuner]") {
  TunerSettings s;
  s.threads = 2;
  s.max_threads = 2;
  s.prefetch = 2;
  s.cores = 8;
  s.auto_decoder_threads = true;
  Tuner t(s);
  CHECK_FALSE(t.tuning());
  t.start_epoch(0);
  for (int i = 0; i < 10; ++i) CHECK_FALSE(judge(t, window(0.9, 0, 6)));
  CHECK(t.threads() == 2);
  CHECK(t.decoder_threads() == 4);  // 8 cores / 2 threads
  TunerSettings a = auto_settings(1, 16);
  a.cores = 16;
  a.auto_decoder_threads = true;
  Tuner u(a);
  CHECK(u.decoder_threads() == 4);  // at most 4
  u.start_epoch(0);
  judge(u, window(0, 0, 0));
  judge(u, window(0.9, 0, 15));
  CHECK(u.threads() == 10);
  CHECK(u.decoder_threads() == 1);
}
