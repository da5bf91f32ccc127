#include "loadscope/io/sources.h"

#include <algorithm>
#include <cctype>
#include <cmath>

#include "loadscope/core/error.h"

namespace loadscope::io {

ListSource::ListSource(std::vector<Sample> samples) : samples_(std::move(samples)) {}

void ListSource::start_epoch(const EpochOrder& order) {
  cursor_ = 0;
  order_ = Permutation(samples_.size(), order.shuffle, order.seed,
                       static_cast<uint64_t>(order.epoch), RngStream::kOrder);
}

bool ListSource::next(Sample& out) {
  if (cursor_ >= samples_.size()) return false;
  out = samples_[order_(
      cursor_)];  // a copy: members of a list sample are paths or short inline fields
  ++cursor_;
  return true;
}

int64_t ListSource::skip(int64_t n) {
  const int64_t left = static_cast<int64_t>(samples_.size() - cursor_);
  const int64_t done = std::min(n, left);
  cursor_ += static_cast<size_t>(done);
  return done;
}

bool split_member_name(const std::string& name, std::string& key, std::string& ext) {
  const size_t slash = name.rfind('/');
  const size_t base = slash == std::string::npos ? 0 : slash + 1;
  const size_t dot = name.find('.', base);
  if (dot == std::string::npos || dot == base || dot + 1 == name.size()) return false;
  key = name.substr(0, dot);
  ext = name.substr(dot + 1);
  for (auto& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return true;
}

namespace {

// The shards' order in an epoch: permuted from (seed, epoch) when shuffling. TarSource and
// IndexedTarSource share it, so that an index changes nothing but the I/O.
std::vector<size_t> shard_order(size_t shards, const EpochOrder& order) {
  std::vector<size_t> out(shards);
  for (size_t i = 0; i < out.size(); ++i) out[i] = i;
  if (order.shuffle) {
    Rng rng(order.seed, static_cast<uint64_t>(order.epoch), RngStream::kShardOrder);
    for (size_t i = out.size(); i > 1; --i) std::swap(out[i - 1], out[rng.below(i)]);
  }
  return out;
}

}  // namespace

TarSource::TarSource(std::vector<std::string> shards, size_t shuffle_buffer)
    : shards_(std::move(shards)), shuffle_buffer_(std::max<size_t>(shuffle_buffer, 1)) {
  if (shards_.empty()) throw ConfigError("TarSource needs at least one shard");
}

void TarSource::start_epoch(const EpochOrder& order) {
  shuffle_ = order.shuffle;
  shard_order_ = shard_order(shards_.size(), order);
  rng_ = Rng(order.seed, static_cast<uint64_t>(order.epoch), RngStream::kShuffleBuffer);
  bytes_read_.store(0, std::memory_order_relaxed);
  shard_cursor_ = 0;
  reader_.reset();
  have_lookahead_ = false;
  exhausted_ = false;
  buffer_.clear();
  buffer_bytes_ = 0;
}

bool TarSource::open_next_shard() {
  reader_.reset();
  have_lookahead_ = false;
  if (shard_cursor_ >= shard_order_.size()) return false;
  shard_path_ = shards_[shard_order_[shard_cursor_++]];
  try {
    reader_ = std::make_unique<TarReader>(shard_path_);
  } catch (const ReadFailure& e) {
    throw SampleError(shard_path_, e.what(), FailureKind::kRead);
  }
  return true;
}

bool TarSource::read_sample(Sample& out) {
  out.key.clear();
  out.members.clear();
  std::string key, ext;
  while (true) {
    if (!reader_ && !open_next_shard()) return false;
    if (!have_lookahead_) {
      try {
        have_lookahead_ = reader_->next(lookahead_);
      } catch (const ReadFailure& e) {
        // The rest of this shard is unreachable; the sample being assembled is incomplete.
        std::string where = out.key.empty() ? shard_path_ : out.key;  // out.key = "shard:key"
        reader_.reset();
        throw SampleError(where, e.what(), FailureKind::kRead);
      }
      if (!have_lookahead_) {
        reader_.reset();
        if (!out.members.empty()) return true;
        continue;
      }
      bytes_read_.fetch_add(lookahead_.data.size(), std::memory_order_relaxed);
    }
    if (!split_member_name(lookahead_.name, key, ext)) {
      have_lookahead_ = false;  // no extension: not part of any sample (WebDataset skips these)
      continue;
    }
    const std::string full_key = shard_path_ + ":" + key;
    if (!out.members.empty() && full_key != out.key) return true;  // lookahead starts the next
    if (out.members.empty()) out.key = full_key;
    if (out.find(ext) != nullptr) {
      have_lookahead_ = false;
      std::string dup_key = out.key;
      out.members.clear();
      out.key.clear();
      throw SampleError(dup_key, "member '" + ext + "' appears twice", FailureKind::kRead);
    }
    Member m;
    m.name = ext;
    m.data = std::move(lookahead_.data);
    out.members.push_back(std::move(m));
    have_lookahead_ = false;
  }
}

bool TarSource::next(Sample& out) {
  if (!shuffle_) return read_sample(out);
  while (buffer_.size() < shuffle_buffer_ && !exhausted_) {
    Sample s;
    if (!read_sample(s)) {
      exhausted_ = true;
      break;
    }
    for (const auto& m : s.members) buffer_bytes_ += m.data.size();
    buffer_.push_back(std::move(s));
  }
  if (buffer_.empty()) return false;
  const size_t j = rng_.below(buffer_.size());
  out = std::move(buffer_[j]);
  for (const auto& m : out.members) buffer_bytes_ -= m.data.size();
  if (j + 1 != buffer_.size()) buffer_[j] = std::move(buffer_.back());
  buffer_.pop_back();
  return true;
}

IndexedTarSource::IndexedTarSource(std::vector<std::shared_ptr<const ShardIndex>> shards,
                                   size_t shuffle_buffer)
    : shards_(std::move(shards)), shuffle_buffer_(std::max<size_t>(shuffle_buffer, 1)) {
  if (shards_.empty()) throw ConfigError("IndexedTarSource needs at least one shard");
  for (const auto& s : shards_) {
    if (s->samples.size() > UINT32_MAX)
      throw ConfigError(s->path + ": more than 2^32 samples in one shard");
    total_ += static_cast<int64_t>(s->samples.size());
  }
}

void IndexedTarSource::start_epoch(const EpochOrder& order) {
  // The shard order and the buffer's draws are TarSource's (tested: the same keys in order).
  shuffle_ = order.shuffle;
  shard_order_ = shard_order(shards_.size(), order);
  rng_ = Rng(order.seed, static_cast<uint64_t>(order.epoch), RngStream::kShuffleBuffer);
  shard_cursor_ = 0;
  sample_cursor_ = 0;
  exhausted_ = false;
  buffer_.clear();
}

bool IndexedTarSource::next_in_order(Ref& out) {
  while (shard_cursor_ < shard_order_.size()) {
    const size_t shard = shard_order_[shard_cursor_];
    if (sample_cursor_ < shards_[shard]->samples.size()) {
      out = Ref{static_cast<uint32_t>(shard), static_cast<uint32_t>(sample_cursor_++)};
      return true;
    }
    ++shard_cursor_;
    sample_cursor_ = 0;
  }
  return false;
}

bool IndexedTarSource::next_ref(Ref& out) {
  if (!shuffle_) return next_in_order(out);
  while (buffer_.size() < shuffle_buffer_ && !exhausted_) {
    Ref r{};
    if (!next_in_order(r)) {
      exhausted_ = true;
      break;
    }
    buffer_.push_back(r);
  }
  if (buffer_.empty()) return false;
  const size_t j = rng_.below(buffer_.size());
  out = buffer_[j];
  buffer_[j] = buffer_.back();
  buffer_.pop_back();
  return true;
}

bool IndexedTarSource::next(Sample& out) {
  Ref r{};
  if (!next_ref(r)) return false;
  const ShardIndex& shard = *shards_[r.shard];
  const IndexedSample& s = shard.samples[r.sample];
  out.key = shard.path + ":" + s.key;
  out.members.clear();
  for (const auto& m : s.members) {
    Member member;
    member.name = m.name;
    member.path = shard.path;
    member.is_path = true;
    member.offset = m.offset;
    member.length = static_cast<int64_t>(m.size);
    out.members.push_back(std::move(member));
  }
  return true;
}

int64_t IndexedTarSource::skip(int64_t n) {
  Ref r{};
  int64_t done = 0;
  while (done < n && next_ref(r)) ++done;
  return done;
}

}  // namespace loadscope::io

namespace loadscope::io {

MixSource::MixSource(std::vector<std::shared_ptr<Source>> sources, std::vector<double> weights,
                     int64_t samples_per_epoch)
    : sources_(std::move(sources)), samples_per_epoch_(samples_per_epoch) {
  if (sources_.empty() || sources_.size() != weights.size()) {
    throw ConfigError("Mix: give one weight per source");
  }
  double total = 0;
  for (double w : weights) {
    if (!(w >= 0) || !std::isfinite(w)) throw ConfigError("Mix: weights must be finite and >= 0");
    total += w;
  }
  if (total <= 0) throw ConfigError("Mix: at least one weight must be > 0");
  if (samples_per_epoch_ < 1) throw ConfigError("Mix: samples_per_epoch must be >= 1");
  double acc = 0;
  for (double w : weights) cumulative_.push_back(acc += w / total);
  cumulative_.back() = 1.0;
}

void MixSource::start_epoch(const EpochOrder& order) {
  order_ = order;
  produced_ = 0;
  passes_.assign(sources_.size(), 0);
  rng_ = Rng(order.seed, static_cast<uint64_t>(order.epoch), RngStream::kMix);
  for (size_t i = 0; i < sources_.size(); ++i) {
    sources_[i]->start_epoch(EpochOrder{
        order.seed, static_cast<int64_t>(hash_keys(order.epoch, i, 0) >> 1), order.shuffle});
  }
}

bool MixSource::next(Sample& out) {
  if (produced_ >= samples_per_epoch_) return false;
  const double u = rng_.uniform();
  const size_t i = static_cast<size_t>(std::upper_bound(cumulative_.begin(), cumulative_.end(), u) -
                                       cumulative_.begin());
  const size_t pick = std::min(i, sources_.size() - 1);
  ++produced_;  // counted before reading: a failing source still uses its draw
  Source& src = *sources_[pick];
  if (src.next(out)) return true;
  // Exhausted: start this source over with a fresh order of its own.
  ++passes_[pick];
  src.start_epoch(EpochOrder{
      order_.seed, static_cast<int64_t>(hash_keys(order_.epoch, pick, passes_[pick]) >> 1),
      order_.shuffle});
  if (src.next(out)) return true;
  throw ConfigError("Mix: source " + std::to_string(pick) + " has no samples");
}

uint64_t MixSource::buffered_bytes() const {
  uint64_t total = 0;
  for (const auto& s : sources_) total += s->buffered_bytes();
  return total;
}

uint64_t MixSource::bytes_read() const {
  uint64_t total = 0;
  for (const auto& s : sources_) total += s->bytes_read();
  return total;
}

}  // namespace loadscope::io
