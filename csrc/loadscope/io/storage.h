#pragma once
// Where bytes live, by the scheme of their name. Every reader of the engine (sources, fields,
// the video and audio decoders through file.h) names what it wants; file.h asks the Storage
// registered for the name's scheme ("s3://b/k": "s3"; a name without "scheme://" is a local
// path, read by local_storage() of file.h). Nothing above io/ knows which storage it reads.
//
// A new scheme (gs://, a user's object store) is one Storage and one line in registry() of
// storage.cc: the planner's fetch-ahead, the node-local cache (cache.h), indexed shards, video
// seeks and every error message work with it unchanged (docs/development.md has the example).

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace loadscope::io {

namespace remote {
struct Profile;
}
namespace cache {
struct Settings;
}
class Seekable;
class ByteStream;

struct ObjectInfo {
  uint64_t size = 0;
  std::string version;  // an object's ETag as the server sent it, a file's size + mtime
};

class Storage {
 public:
  virtual ~Storage() = default;
  // Reads go over the network: the planner fetches members ahead (prefetch.h) and the
  // node-local cache may keep copies (cache.h).
  virtual bool remote() const = 0;
  // The object's size and version. Throws ReadFailure naming it (missing, denied, network).
  virtual ObjectInfo stat(const std::string& name) = 0;
  // Bytes [offset, offset + length) (length < 0: to the end) into `out`; returns their count.
  // `version` non-empty: the object must still be that version, else a ReadFailure saying it
  // changed. upto: the object may end first (fewer bytes come back), else that is a failure.
  virtual uint64_t read(const std::string& name, uint64_t offset, int64_t length, std::string& out,
                        const std::string& version, bool upto) = 0;
  // Random access to one version, for readers that seek (FFmpeg's AVIO). The default reads
  // whole blocks of Seekable::kBlock through read(), pinned to the version stat() gave.
  virtual std::unique_ptr<Seekable> open_seekable(const std::string& name);
  // The object from its start in chunks of `chunk` bytes, the next fetched while the current
  // one is consumed (the default: ranged read()s pinned to one version, on a thread of its own).
  virtual std::unique_ptr<ByteStream> open_stream(const std::string& name, size_t chunk);
  // Makes every later read of `name` require `version`, as if each passed it (an indexed shard
  // must stay the object that was indexed). The default: nothing to pin.
  virtual void pin(const std::string& name, const std::string& version) {}
  // Writes a whole object (an index next to its shard). The default refuses.
  virtual void put(const std::string& name, const std::string& data);
  // The node-local cache of this storage's objects (remote ones only): nullptr, the process's
  // (Loader(cache_dir=), LOADSCOPE_CACHE_DIR); a source's own settings may name another.
  virtual const cache::Settings* cache() const { return nullptr; }
};

// "s3" for "s3://bucket/key", "" for a name without a scheme (a local path).
std::string scheme_of(const std::string& name);
bool has_scheme(const char* p, size_t n);  // the same over bytes (a table's rows)

// The storage for `name`'s scheme, or nullptr when none is registered.
Storage* find_storage(const std::string& name);
// The same; throws ReadFailure for an unknown scheme, listing those there are.
Storage& storage_for(const std::string& name);
// "no storage for gs:// names (there are: http://, https://, s3:// and local paths; ...)".
std::string no_storage(const std::string& name);
// The schemes there are, sorted: "http", "https", "s3" (a local path has none; the tagged
// schemes of profiles are not listed).
std::vector<std::string> storage_schemes();
// Adds (or replaces) the storage of a scheme, for the process; not while loaders read it.
void register_storage(const std::string& scheme, std::shared_ptr<Storage> storage);
// The remote storage with settings of its own (loadscope.Remote) under "s3+<tag>", "http+<tag>"
// and "https+<tag>"; a tag already there is kept (the tag is a hash of the settings).
// `cache`: its objects' node-local cache (nullptr: the process's).
void register_remote_profile(const std::string& tag, std::shared_ptr<const remote::Profile> profile,
                             const cache::Settings* cache = nullptr);

}  // namespace loadscope::io
