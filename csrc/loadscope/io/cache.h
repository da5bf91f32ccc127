#pragma once
// A node-local cache of remote objects (LOADSCOPE_CACHE_DIR, LOADSCOPE_CACHE_LIMIT; the Loader's
// cache_dir= and cache_limit= set them): whole objects kept on local disk, so a second epoch
// reads nothing from the network and the ranks and DataLoader workers of a node fetch each
// object once between them.
//
//   <dir>/<16 hex digits of the URL's hash>-<file name>          the object's bytes
//   <dir>/<same>.etag                                             its ETag when it was fetched
//   <dir>/<same>.lock                                             flock()ed while fetching
//
// A process checks a cached object against the server (HEAD: size and ETag) the first time it
// uses it, then trusts it for its life. Fetching takes the object's lock, so concurrent
// processes wait for one download instead of racing; the file appears by rename only once
// complete. Before a download, least recently used objects (by mtime, touched on every first
// use in a process) are evicted until the new one fits under the limit. An object evicted and
// needed again within one run is a thrash: the limit is below the working set, and that is an
// error saying so, not a silent re-download of every shard every epoch.

//
// The cache is a layer: CachedStorage wraps the remote Storage it fetches from and is what the
// registry hands out for its scheme (storage.cc), so no reader asks for copies; it reads a copy
// through local_storage(), and retries once when another process evicted it just then.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

namespace loadscope::io {
class Storage;
}

namespace loadscope::io::cache {

struct Settings {
  std::string dir;     // empty: no cache
  uint64_t limit = 0;  // bytes; 0: no limit
};
void configure(const Settings& s);
Settings settings();

// `from` read through a node-local cache with settings `own` (a loader's or a source's:
// Loader(cache_dir=), loadscope.Remote(cache_dir=)); without them, through the process's
// (configure(), LOADSCOPE_CACHE_DIR), which may be none: then reads pass straight through.
std::shared_ptr<Storage> cached(std::shared_ptr<Storage> from, std::optional<Settings> own);

// The local file holding `url`'s current version (stat and read through `from`), fetched into
// the cache `s` if needed. Throws ReadFailure (the fetch failed, the object does not fit, or it
// was evicted and is needed again).
std::string local_copy(Storage& from, const std::string& url, const Settings& s);

// The local file holding `url`'s current version if the cache has it already, else "" (never
// fetches: for reading a little of an object that may never be read whole, like a shard's
// fingerprint, without a download).
std::string cached_copy(Storage& from, const std::string& url, const Settings& s);

struct Stats {
  uint64_t hits = 0, misses = 0, evictions = 0;
  uint64_t bytes_fetched = 0;  // into the cache
};
Stats stats();
void reset_stats();

}  // namespace loadscope::io::cache
