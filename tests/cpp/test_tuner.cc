// The auto controller's policy (core/tuner.h), fed windows of measurements: it grows when the
// consumer waits, keeps a change only when the consumer got more batches per second (or, for a
// shrink, no wait back), shrinks when the queue stays full, and settles.
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

// Ten seconds of measurements: `rate` batches a second, `wait` and `full` the shares of time
// the consumer waited and the queue was full.
TunerWindow window(double wait, double full, double idle, double rate = 10, int64_t batch = 100) {
  TunerWindow w;
  w.batch = batch;
  w.seconds = 10.0;
  w.batches = static_cast<int64_t>(rate * 10 + 0.5);
  w.wait_seconds = wait * 10;
  w.full_seconds = full * 10;
  w.idle_cores = idle;
  return w;
}

// The window after each change is not judged (it straddles the change).
bool judge(Tuner& t, const TunerWindow& w) {
  return t.window(w);
}

}  // namespace

TEST_CASE("grows in proportion to the data wait, and keeps what raised the batch rate", "[tuner]") {
  Tuner t(auto_settings(1, 8));
  t.start_epoch(0);
  CHECK(judge(t, window(0.5, 0, 6, 10, 140)));  // waiting half the time: twice the threads
  CHECK(t.threads() == 2);
  REQUIRE(t.decisions().size() == 1);
  CHECK(t.decisions()[0].text() == "threads 1 → 2 at batch 140: data wait 50% with 6.0 cores idle");
  CHECK_FALSE(judge(t, window(0.25, 0, 6, 15)));  // straddles the change
  CHECK_FALSE(judge(t, window(0, 0, 6, 20)));     // twice the rate, no wait left: kept
  CHECK(t.threads() == 2);
  Tuner u(auto_settings(2, 8));
  u.start_epoch(0);
  CHECK(judge(u, window(0.75, 0, 6, 5)));  // waiting 3/4 of the time: four times the threads
  CHECK(u.threads() == 8);
  CHECK_FALSE(judge(u, window(0.2, 0, 1, 16)));
  CHECK_FALSE(judge(u, window(0.2, 0, 1, 16)));  // 3.2x the rate: kept; at the most: nothing to add
  CHECK(u.threads() == 8);
}

TEST_CASE("a thread more that does not raise the batch rate is undone and not tried again soon",
          "[tuner]") {
  // The consumer waits, but a thread more takes a core from its step (a CPU-bound training
  // step): the batches per second do not rise, so the trial is undone.
  Tuner t(auto_settings(2, 8));
  t.start_epoch(0);
  CHECK(judge(t, window(0.3, 0, 0.2, 10)));  // no idle core: one thread, as a trial
  CHECK(t.threads() == 3);
  judge(t, window(0.3, 0, 0, 10));
  CHECK(judge(t, window(0.3, 0, 0, 10.2)));  // +2%: not worth a core
  CHECK(t.threads() == 2);
  CHECK(t.decisions().back().text() ==
        "threads 3 → 2 at batch 100: 3 threads gave 1.02x the batches per second of 2: back, held "
        "for 8 windows");
  judge(t, window(0, 0, 0));
  // Held for 8 windows from the one that undid it (the next settles): the wait goes on, noted
  // once, and nothing changes.
  int changed = 0;
  for (int i = 0; i < 6; ++i) changed += judge(t, window(0.3, 0, 0, 10));
  CHECK(changed == 0);
  CHECK(t.decisions().back().from == t.decisions().back().to);
  CHECK(judge(t, window(0.3, 0, 0, 10)));  // the hold is over: tried again
  CHECK(t.threads() == 3);
  judge(t, window(0.3, 0, 0, 10));
  CHECK(judge(t, window(0.3, 0, 0, 9)));  // slower: undone, held twice as long
  CHECK(t.decisions().back().reason.find("held for 16 windows") != std::string::npos);
}

TEST_CASE("a trial across a change of the consumer is void, not undone", "[tuner]") {
  // The loop's own time per batch goes from 25 ms to 100 ms (a benchmark's pipeline phase
  // ends and its training phase begins): the rate falls whatever the threads did.
  Tuner t(auto_settings(1, 4));
  t.start_epoch(0);
  CHECK(judge(t, window(0.5, 0, 3, 20)));  // 20 batches/s, half of it waiting: 25 ms own
  CHECK(t.threads() == 2);
  judge(t, window(0.2, 0, 3, 8));
  CHECK_FALSE(judge(t, window(0.2, 0, 3, 8)));  // 100 ms own: void; 2 threads kept
  CHECK(t.threads() == 2);
  CHECK(t.decisions().back().reason ==
        "trial void: the consumer's own time per batch went from 25.0 ms to 100.0 ms (it changed, "
        "not the loader)");
}

TEST_CASE("shrinks while the queue stays full, undoes a shrink that brings the wait back, settles",
          "[tuner]") {
  Tuner t(auto_settings(4, 4));
  t.start_epoch(0);
  CHECK(judge(t, window(0.001, 0.9, 2)));  // the loader is ahead: one thread less
  CHECK(t.threads() == 3);
  CHECK(t.decisions().back().reason == "queue full 90% of the time, data wait 0%");
  judge(t, window(0, 0, 0));
  CHECK(judge(t, window(0.001, 0.8, 2)));  // the trial held (no wait): and again
  CHECK(t.threads() == 2);
  judge(t, window(0, 0, 0));
  // 2 is too few: the wait comes back, and 3 is restored and held.
  CHECK(judge(t, window(0.2, 0, 1, 8)));
  CHECK(t.threads() == 3);
  CHECK(t.decisions().back().reason.find("after the shrink: back, held for 8") !=
        std::string::npos);
  // A consumer whose needs sit between 2 and 3 threads: full queue at 3, waits at 2. The
  // tries of 2 come ever rarer: a handful of changes in a thousand windows.
  const int64_t before = t.changes();
  for (int i = 0; i < 1000; ++i) {
    judge(t, t.threads() >= 3 ? window(0.001, 0.9, 1) : window(0.2, 0, 1, 8));
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
  TunerWindow w =
      window(0.2, 0.3, 0);  // waits at the most threads, yet the queue was full at times
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
  judge(u, window(0.9, 0, 15));
  CHECK(u.threads() == 10);
  CHECK(u.decoder_threads() == 1);
}
