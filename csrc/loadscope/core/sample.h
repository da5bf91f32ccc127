#pragma once
// A sample as sources hand it to the pipeline: a key and named members. A member either holds
// its bytes (tar shards, inline manifest fields) or names a file that a worker thread reads
// later, so that file I/O runs in parallel and the planner thread never blocks on it.

#include <cstdint>
#include <future>
#include <memory>
#include <string>
#include <vector>

namespace loadscope {

struct Member {
  std::string name;  // lower-case extension, e.g. "jpg", "cls", "seg.png"
  std::string data;  // the bytes, when !is_path
  std::string path;  // the file to read, when is_path
  bool is_path = false;
  // With is_path: a byte range of the file (a tar member found through an index) instead of
  // the whole file. length -1: the whole file.
  uint64_t offset = 0;
  int64_t length = -1;

  // Bytes fetched ahead for this member (a remote one: SampleProcessor::prepare) — they lie at
  // `fetched_at` of the shared span, which may hold neighbouring members too. Invalid when the
  // worker is to read the member itself.
  std::shared_future<std::shared_ptr<const std::string>> fetched;
  uint64_t fetched_at = 0;

  bool whole_file() const { return is_path && length < 0; }
};

struct Sample {
  std::string key;              // names the sample in errors: a path, or "shard.tar:key"
  std::vector<Member> members;  // in source order
  int64_t position = -1;        // index in the epoch's stream, set by the engine

  const Member* find(const std::string& name) const {
    for (const auto& m : members) {
      if (m.name == name) return &m;
    }
    return nullptr;
  }
};

}  // namespace loadscope
