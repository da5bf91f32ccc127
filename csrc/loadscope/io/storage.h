#pragma once
// Where bytes live, by the scheme of their name. Every reader of the engine (sources, fields,
// the video and audio decoders through file.h) names what it wants; file.h asks the Storage
// registered for the name's scheme ("s3://b/k": "s3"; a name without "scheme://" is a local
// path, read by local_storage()), once per open, and leaves the rest to it. Nothing above io/
// knows which storage it reads, and no reader reads around one: local files are a Storage too.
//
// Storages are layers. The node-local cache (cache.h) is a Storage wrapping a remote one
// (CachedStorage: it fetches an object whole into local disk once and reads the copy through
// local_storage()); the built-in remote schemes are registered wrapped in it, so a cache is
// configured, not consulted by each reader.
//
// A new scheme (gs://, a user's object store) is one Storage and one line in registry() of
// storage.cc: the planner's fetch-ahead, the node-local cache, indexed shards, video seeks and
// every error message work with it unchanged (docs/development.md has the example).

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

// A member read whole (an image, a label, a tar member) larger than this is refused before it
// is read, by every storage: a 3 GB sparse file named like an image was read into memory by
// every thread that met it. Memory stays bounded by threads x this, at worst.
constexpr uint64_t kMaxMemberBytes = uint64_t{1} << 30;
void check_member_size(uint64_t bytes);  // throws ReadFailure above kMaxMemberBytes

struct ObjectInfo {
  uint64_t size = 0;
  std::string version;  // an object's ETag as the server sent it, a file's size + mtime
};

class Storage {
 public:
  virtual ~Storage() = default;
  // Reads go over the network: the planner fetches members ahead (prefetch.h). It steers
  // nothing else: a storage that is not remote is read exactly as one that is.
  virtual bool remote() const = 0;
  // A node-local cache holds this storage's objects (CachedStorage): reads after the first come
  // from local disk, so the planner fetches whole members, not blocks, and a shard is indexed
  // from the copy.
  virtual bool node_cached() const { return false; }
  // The object's size and version. Throws ReadFailure naming it (missing, denied, network).
  virtual ObjectInfo stat(const std::string& name) = 0;
  // Bytes [offset, offset + length) (length < 0: to the end) into `out`; returns their count.
  // `version` non-empty: the object must still be that version, else a ReadFailure saying it
  // changed. upto: the object may end first (fewer bytes come back), else that is a failure.
  // More than kMaxMemberBytes is refused (check_member_size), before it is read.
  virtual uint64_t read(const std::string& name, uint64_t offset, int64_t length, std::string& out,
                        const std::string& version, bool upto) = 0;
  // A few bytes of an object that may never be read whole (a shard's fingerprint): the same as
  // read(), but a node-local cache serves them from its copy only when it has one already and
  // never fetches the whole object for them.
  virtual uint64_t peek(const std::string& name, uint64_t offset, int64_t length,
                        std::string& out) {
    return read(name, offset, length, out, "", false);
  }
  // Random access to one version, for readers that seek (FFmpeg's AVIO). The default reads
  // whole blocks of Seekable::kBlock through read(), pinned to the version stat() gave.
  virtual std::unique_ptr<Seekable> open_seekable(const std::string& name);
  // The object from its start in chunks of `chunk` bytes, the next fetched while the current
  // one is consumed (the default: ranged read()s pinned to one version, on a thread of its own).
  virtual std::unique_ptr<ByteStream> open_stream(const std::string& name, size_t chunk);
  // Makes every later read of `name` require `version`, as if each passed it (an indexed shard
  // must stay the object that was indexed). The default: nothing to pin.
  virtual void pin(const std::string& name, const std::string& version) {}
  // Writes a whole object (an index next to its shard), atomically: a reader sees the old one
  // or the new one. The default refuses.
  virtual void put(const std::string& name, const std::string& data);
};

// The storage of local paths (local_storage.cc): POSIX reads of regular files only (a FIFO
// where an image should be would block a thread forever).
std::shared_ptr<Storage> local_storage();

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
// `cache`: its objects' node-local cache (nullptr: the process's, LOADSCOPE_CACHE_DIR).
void register_remote_profile(const std::string& tag, std::shared_ptr<const remote::Profile> profile,
                             const cache::Settings* cache = nullptr);

}  // namespace loadscope::io
