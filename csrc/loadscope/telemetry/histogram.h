#pragma once
// A streaming histogram of non-negative integers (durations in ns): log-linear buckets, 16 per
// power of two, so any quantile is known to within 1/16 (~6%) of its value, in fixed memory
// (976 buckets, 7.8 KiB) whatever the number of samples.
//
// Thread-safety: record() has a single writer (each thread owns its histograms); readers may
// snapshot concurrently: every field is a relaxed atomic, so a snapshot can be a few samples
// behind but is never torn. Single-writer increments are plain load+store, no lock prefix.

#include <atomic>
#include <cstdint>
#include <vector>

namespace loadscope::telemetry {

struct HistogramData {
  std::vector<uint64_t> buckets;
  uint64_t count = 0;
  uint64_t sum = 0;
  uint64_t max = 0;

  void merge(const HistogramData& other);
  // The value below which a fraction q of the samples fall (bucket midpoint); 0 when empty.
  double quantile(double q) const;
  double mean() const { return count ? static_cast<double>(sum) / count : 0.0; }
};

class Histogram {
 public:
  static constexpr int kSubBits = 4;  // 16 sub-buckets per power of two
  static constexpr int kBuckets = (64 - kSubBits + 1) << kSubBits;

  static int bucket_of(uint64_t v);
  static uint64_t bucket_low(int b);   // smallest value in bucket b
  static uint64_t bucket_high(int b);  // largest value in bucket b

  void record(uint64_t v) {
    auto bump = [](std::atomic<uint64_t>& a, uint64_t d) {
      a.store(a.load(std::memory_order_relaxed) + d, std::memory_order_relaxed);
    };
    bump(buckets_[bucket_of(v)], 1);
    bump(count_, 1);
    bump(sum_, v);
    if (v > max_.load(std::memory_order_relaxed)) max_.store(v, std::memory_order_relaxed);
  }
  void add_to(HistogramData& out) const;
  HistogramData data() const {
    HistogramData d;
    add_to(d);
    return d;
  }

 private:
  std::atomic<uint64_t> buckets_[kBuckets] = {};
  std::atomic<uint64_t> count_{0}, sum_{0}, max_{0};
};

}  // namespace loadscope::telemetry
