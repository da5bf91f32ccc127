#include "loadscope/telemetry/histogram.h"

#include <algorithm>

namespace loadscope::telemetry {

int Histogram::bucket_of(uint64_t v) {
  if (v < (uint64_t{1} << kSubBits)) return static_cast<int>(v);  // exact below 16
  const int msb = 63 - __builtin_clzll(v);
  const int shift = msb - kSubBits;
  const uint64_t sub = (v >> shift) & ((uint64_t{1} << kSubBits) - 1);
  return ((shift + 1) << kSubBits) + static_cast<int>(sub);
}

uint64_t Histogram::bucket_low(int b) {
  if (b < (1 << kSubBits)) return static_cast<uint64_t>(b);
  const int shift = (b >> kSubBits) - 1;
  const uint64_t sub = static_cast<uint64_t>(b & ((1 << kSubBits) - 1));
  return ((uint64_t{1} << kSubBits) | sub) << shift;
}

uint64_t Histogram::bucket_high(int b) {
  if (b + 1 >= kBuckets) return UINT64_MAX;
  return bucket_low(b + 1) - 1;
}

void Histogram::add_to(HistogramData& out) const {
  if (out.buckets.size() < static_cast<size_t>(kBuckets)) out.buckets.resize(kBuckets, 0);
  for (int i = 0; i < kBuckets; ++i) out.buckets[i] += buckets_[i].load(std::memory_order_relaxed);
  out.count += count_.load(std::memory_order_relaxed);
  out.sum += sum_.load(std::memory_order_relaxed);
  out.max = std::max(out.max, max_.load(std::memory_order_relaxed));
}

void HistogramData::merge(const HistogramData& other) {
  if (buckets.size() < other.buckets.size()) buckets.resize(other.buckets.size(), 0);
  for (size_t i = 0; i < other.buckets.size(); ++i) buckets[i] += other.buckets[i];
  count += other.count;
  sum += other.sum;
  max = std::max(max, other.max);
}

double HistogramData::quantile(double q) const {
  if (count == 0) return 0.0;
  // Rank of the sample wanted (1-based), then the bucket holding it.
  const uint64_t rank = std::max<uint64_t>(1, static_cast<uint64_t>(q * count + 0.5));
  uint64_t seen = 0;
  for (size_t b = 0; b < buckets.size(); ++b) {
    seen += buckets[b];
    if (seen >= rank) {
      const double lo = static_cast<double>(Histogram::bucket_low(static_cast<int>(b)));
      const double hi = static_cast<double>(Histogram::bucket_high(static_cast<int>(b)));
      return std::min((lo + hi) / 2, static_cast<double>(max));
    }
  }
  return static_cast<double>(max);
}

}  // namespace loadscope::telemetry
