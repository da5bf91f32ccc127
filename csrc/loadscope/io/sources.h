#pragma once
// Concrete sources: an in-memory list of samples (folders and manifests, scanned by the caller)
// and WebDataset-style tar shards read sequentially.

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "loadscope/core/permutation.h"
#include "loadscope/core/rng.h"
#include "loadscope/core/source.h"
#include "loadscope/io/tar.h"
#include "loadscope/io/tar_index.h"

namespace loadscope::io {

// Samples known up front (tests and small lists; folders and manifests are SampleTables,
// table.h). A shuffled epoch is a Permutation keyed by (seed, epoch).
class ListSource : public Source {
 public:
  explicit ListSource(std::vector<Sample> samples);
  int64_t size() const override { return static_cast<int64_t>(samples_.size()); }
  void start_epoch(const EpochOrder& order) override;
  bool next(Sample& out) override;
  int64_t skip(int64_t n) override;

 private:
  std::vector<Sample> samples_;
  Permutation order_;
  size_t cursor_ = 0;
};

// Splits a member path the way WebDataset does: the key is everything up to the first dot of
// the file name (directories included), the extension the rest, lower-cased.
// Returns false for names without an extension.
bool split_member_name(const std::string& name, std::string& key, std::string& ext);

// WebDataset-style shards: members with the same key that follow each other form a sample.
// Shuffling permutes the shard order per epoch and passes samples through a bounded buffer
// (`shuffle_buffer` samples held in memory), both seeded from (seed, epoch).
class TarSource : public Source {
 public:
  TarSource(std::vector<std::string> shards, size_t shuffle_buffer);
  int64_t size() const override { return -1; }
  void start_epoch(const EpochOrder& order) override;
  bool next(Sample& out) override;
  uint64_t bytes_read() const override { return bytes_read_.load(std::memory_order_relaxed); }
  uint64_t buffered_bytes() const override { return buffer_bytes_; }

 private:
  bool read_sample(Sample& out);  // next sample in shard order, no shuffling
  bool open_next_shard();

  std::vector<std::string> shards_;
  size_t shuffle_buffer_;
  std::vector<size_t> shard_order_;
  size_t shard_cursor_ = 0;
  std::unique_ptr<TarReader> reader_;
  std::string shard_path_;
  TarEntry lookahead_;
  bool have_lookahead_ = false;
  bool shuffle_ = false;
  bool exhausted_ = false;
  Rng rng_{0};
  std::vector<Sample> buffer_;
  uint64_t buffer_bytes_ = 0;
  std::atomic<uint64_t> bytes_read_{0};
};

// Tar shards with an index (tar_index.h): the same samples in the same order as TarSource
// (shard order and shuffle buffer drawn alike), but the planner reads nothing: each sample
// names byte ranges of its shard that the worker threads read with pread. So the size is known
// before the epoch, skipping (another rank's batches, a resume) costs no I/O, and reads run in
// parallel.
class IndexedTarSource : public Source {
 public:
  IndexedTarSource(std::vector<std::shared_ptr<const ShardIndex>> shards, size_t shuffle_buffer);
  int64_t size() const override { return total_; }
  void start_epoch(const EpochOrder& order) override;
  bool next(Sample& out) override;
  int64_t skip(int64_t n) override;

 private:
  struct Ref {
    uint32_t shard, sample;
  };
  bool next_in_order(Ref& out);  // shard order, no shuffling
  bool next_ref(Ref& out);

  std::vector<std::shared_ptr<const ShardIndex>> shards_;
  size_t shuffle_buffer_;
  int64_t total_ = 0;
  std::vector<size_t> shard_order_;
  size_t shard_cursor_ = 0;
  size_t sample_cursor_ = 0;
  bool shuffle_ = false;
  bool exhausted_ = false;
  Rng rng_{0};
  std::vector<Ref> buffer_;
};

// Several sources mixed by sampling weights: each sample of an epoch comes from source i with
// probability weights[i] / sum(weights), drawn from (seed, epoch). A source that runs out starts
// over (a new order of its own, so it repeats only after showing everything); an epoch is
// `samples_per_epoch` samples. The mix of a multimodal dataset: 70% images, 30% clips.
class MixSource : public Source {
 public:
  MixSource(std::vector<std::shared_ptr<Source>> sources, std::vector<double> weights,
            int64_t samples_per_epoch);
  int64_t size() const override { return samples_per_epoch_; }
  void start_epoch(const EpochOrder& order) override;
  bool next(Sample& out) override;
  uint64_t bytes_read() const override;
  uint64_t buffered_bytes() const override;

 private:
  std::vector<std::shared_ptr<Source>> sources_;
  std::vector<double> cumulative_;  // normalised cumulative weights
  int64_t samples_per_epoch_;
  EpochOrder order_;
  std::vector<int64_t> passes_;  // restarts of each source in this epoch
  int64_t produced_ = 0;
  Rng rng_{0};
};

}  // namespace loadscope::io
