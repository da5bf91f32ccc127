#pragma once
// Deterministic randomness. Every random choice in loadscope is a pure function of
// (seed, epoch, sample position, stream id) — never of the thread that runs it or of timing.
// std::uniform_*_distribution is implementation-defined, so draws are computed here.

#include <cmath>
#include <cstdint>

namespace loadscope {

// SplitMix64 finaliser: a bijective 64-bit mix with full avalanche.
inline uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

inline uint64_t hash_keys(uint64_t a, uint64_t b, uint64_t c = 0, uint64_t d = 0) {
  return mix64(mix64(mix64(mix64(a) ^ b) ^ c) ^ d);
}

// Stream ids keep independent decisions (epoch order, shard order, per-field augmentation)
// from sharing draws.
enum class RngStream : uint64_t {
  kOrder = 1,
  kShardOrder = 2,
  kShuffleBuffer = 3,
  kMix = 4,
  kAugment = 16,        // + field index: crop and flip
  kPixels = 4096,       // + field index: colour, grayscale, erasing
  kRandAugment = 8192,  // + field index
};

// A small counter-based generator: cheap to construct per sample, no shared state.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  Rng(uint64_t seed, uint64_t epoch, RngStream stream, uint64_t index = 0)
      : state_(hash_keys(seed, epoch, static_cast<uint64_t>(stream), index)) {}

  uint64_t next_u64() { return mix64(state_++); }

  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }

  // Uniform integer in [0, n), n > 0; Lemire's method without the rejection step's bias
  // mattering for n far below 2^64.
  uint64_t below(uint64_t n) {
    return static_cast<uint64_t>((static_cast<unsigned __int128>(next_u64()) * n) >> 64);
  }

 private:
  uint64_t state_;
};

}  // namespace loadscope
