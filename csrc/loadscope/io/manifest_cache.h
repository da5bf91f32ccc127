#pragma once
// The cache file of a parsed manifest (manifest.h): the table as flat arrays, read back by
// mapping it, so that a restart costs a few page faults instead of a parse.

#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "loadscope/io/manifest.h"

namespace loadscope::io {

struct Mapping {
  void* data = MAP_FAILED;
  size_t size = 0;
  ~Mapping() {
    if (data != MAP_FAILED) munmap(data, size);
  }
};

// Maps a local file read-only; nullptr when it cannot be opened. Throws ReadFailure for other
// errors. populate: fault every page in now (one batched pass in the kernel instead of a fault per
// 4 KiB page in the parser's threads) — for a manifest read whole, not for a cache file read
// lazily.
std::shared_ptr<Mapping> map_file(const std::string& path, bool must_exist, bool populate = false);

// A cache file's name for the options a table was parsed under (FNV-1a).
uint64_t fnv1a(const std::string& s);

// The table in a cache file, or nothing when the file is missing, stale or damaged.
bool read_cache(const std::shared_ptr<Mapping>& map, const std::string& identity, Manifest& out);

// Writes the cache file under a temporary name and renames it into place, so that a reader
// (another rank) sees the old file, no file, or the whole new one. Temporary files that
// processes of this host left when they died are removed first (the host is in the name: on a
// shared file system another node's live writer must not lose its file). Throws ReadFailure.
void write_cache(const std::string& path, const Manifest& m, const std::string& identity);

// write_cache in a thread the process waits for when it exits (a forked child does not); false
// when no thread could be started.
bool write_cache_in_background(const std::string& path, const Manifest& m,
                               const std::string& identity);

}  // namespace loadscope::io
