#pragma once
// The index of a WebDataset tar shard: every sample's key and where each of its members' bytes
// lie. With it a reader knows the sample count before reading (ranks can split an epoch
// evenly), reads a sample with one pread per member from any thread, and resumes mid-epoch
// without reading what it skips.
//
// On disk, next to the shard (`train-000000.tar.idx`), UTF-8 text, one sample per line:
//
//   loadscope-tar-index 1
//   tar_bytes <size of the shard in bytes>
//   fingerprint <CRC-32 of the shard's first and last 8 KiB, hex>
//   samples <count>
//   <key> TAB <member> TAB <offset> TAB <size> [TAB <member> TAB <offset> TAB <size> ...]
//
// Keys are the WebDataset keys (the member path up to the first dot of its file name); members
// are the lower-case extensions; offsets point at the data, not the header.

#include <cstdint>
#include <string>
#include <vector>

namespace loadscope::io {

struct IndexedMember {
  std::string name;
  uint64_t offset = 0;
  uint64_t size = 0;
};

struct IndexedSample {
  std::string key;
  std::vector<IndexedMember> members;
};

struct ShardIndex {
  std::string path;          // the tar shard
  uint64_t tar_bytes = 0;    // its size when indexed
  uint32_t fingerprint = 0;  // shard_fingerprint() when indexed
  // A different size or fingerprint means a stale index: the shard changed after indexing (an
  // append, a rewrite). Head and tail only, so that checking costs 16 KiB of reading per shard;
  // an in-place edit that keeps both and the size goes unnoticed.
  std::vector<IndexedSample> samples;
  uint64_t member_bytes() const;
};

// CRC-32 of the shard's size, first 8 KiB and last 8 KiB. Throws ReadFailure.
uint32_t shard_fingerprint(const std::string& tar_path);
uint32_t shard_fingerprint(const std::string& tar_path, uint64_t size);  // size known already

// Indexes a shard by reading its headers only (scan_tar), grouping consecutive members with the
// same key into samples as WebDataset does. Throws ReadFailure naming what is wrong (gzip,
// corrupt header, truncation, a member twice in one sample, a key with a tab or newline).
ShardIndex index_shard(const std::string& tar_path);

// Writes `index` to `idx_path` atomically (a temporary file renamed into place).
void write_index(const ShardIndex& index, const std::string& idx_path);

// Parses an index's text (member ranges checked against its own tar_bytes). Throws
// ConfigError naming `idx_path` and the line. The part of read_index that the fuzzer reaches.
ShardIndex parse_index(const std::string& text, const std::string& idx_path,
                       const std::string& tar_path);

// Reads an index and checks it against its shard's current size and fingerprint. Throws
// ConfigError for a malformed, unknown-version or stale index, ReadFailure when reading fails.
ShardIndex read_index(const std::string& idx_path, const std::string& tar_path);

}  // namespace loadscope::io
