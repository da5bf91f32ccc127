#pragma once
// A shuffled epoch order that is computed, not stored: position -> sample is a keyed bijection
// of [0, n), so a source of 10^9 samples shuffles without a 4 GB table, starting an epoch costs
// nothing (a Fisher-Yates pass is random swaps over 4 bytes per sample, all of it before the
// first batch of a resume), and skipping to any position is free.
//
// The bijection is a balanced Feistel network over the smallest even number of bits (at least
// 8) that covers n, with cycle walking: values at or above n are permuted again until they land
// below n. Each round mixes one half with a key drawn from (seed, epoch) through mix64, and any
// Feistel network is a bijection whatever its round function, so every sample appears exactly
// once. The domain is under 4n, so a position takes under 4 walks on average.

#include <cstdint>

#include "loadscope/core/rng.h"

namespace loadscope {

class Permutation {
 public:
  Permutation() = default;
  // The identity when !shuffle.
  Permutation(uint64_t n, bool shuffle, uint64_t seed, uint64_t epoch, RngStream stream)
      : n_(n), shuffle_(shuffle && n > 1) {
    if (!shuffle_) return;
    unsigned bits = 8;
    while (bits < 64 && (uint64_t{1} << bits) < n) bits += 2;
    half_ = bits / 2;
    mask_ = (uint64_t{1} << half_) - 1;
    Rng rng(seed, epoch, stream);
    for (auto& k : keys_) k = rng.next_u64();
  }

  uint64_t size() const { return n_; }

  // The sample at `position` (< size()).
  uint64_t operator()(uint64_t position) const {
    if (!shuffle_) return position;
    uint64_t x = position;
    do {
      x = round_trip(x);
    } while (x >= n_);
    return x;
  }

 private:
  static constexpr int kRounds = 6;

  uint64_t round_trip(uint64_t x) const {
    uint64_t left = x >> half_, right = x & mask_;
    for (int r = 0; r < kRounds; ++r) {
      const uint64_t next = left ^ (mix64(right ^ keys_[r]) & mask_);
      left = right;
      right = next;
    }
    return (left << half_) | right;
  }

  uint64_t n_ = 0;
  bool shuffle_ = false;
  unsigned half_ = 0;
  uint64_t mask_ = 0;
  uint64_t keys_[kRounds] = {};
};

}  // namespace loadscope
