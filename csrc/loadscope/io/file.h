#pragma once
// Reading bytes by name: a local path, or a URL of a registered scheme (storage.h: s3://,
// http(s)://). Every reader of the engine (members named by path, tar shards, indexes, videos)
// comes through here, and every call goes to the Storage of the name's scheme, looked up once:
// a source that works on local files works on object storage too, and a remote object is read
// from the node-local cache's copy when its storage keeps one (cache.h's CachedStorage).
#include <cstdint>
#include <memory>
#include <string>

#include "loadscope/io/storage.h"

namespace loadscope::io {

// The size of a file or object. Throws ReadFailure.
uint64_t file_size(const std::string& path);

// Reads a whole file into `out` (reusing its capacity). Throws ReadFailure with the OS reason.
uint64_t read_file(const std::string& path, std::string& out);

// Reads `length` bytes at `offset` of a file into `out` (a tar member through an index).
// Throws ReadFailure with the OS reason, or when the file is shorter than the range.
uint64_t read_range(const std::string& path, uint64_t offset, uint64_t length, std::string& out);

// Positioned reads of one version of a file or object, for readers that seek (FFmpeg's
// demuxers, through a custom AVIO, read a few kilobytes at a time). Where the bytes live is the
// storage's business, not the reader's: a local file (or a node-local cache's copy) is held open
// and read where asked; a remote object is read in whole blocks of kBlock, the last one kept,
// so a clip costs the blocks its packets lie in, never the whole object.
class Seekable {
 public:
  static constexpr uint64_t kBlock = 1 << 20;
  virtual ~Seekable() = default;
  virtual uint64_t size() const = 0;
  virtual const std::string& version() const = 0;  // ETag, or size + mtime
  // Up to n bytes at `offset` (fewer only at the end). Throws ReadFailure.
  virtual size_t read_at(uint64_t offset, uint8_t* dst, size_t n) = 0;
  // Bytes read from storage so far (whole blocks, for a remote object).
  virtual uint64_t fetched() const = 0;
};

// Opens a file or object for positioned reads; a local path must be a regular file (a FIFO
// would block the reading thread forever). Throws ReadFailure.
std::unique_ptr<Seekable> open_seekable(const std::string& path);

// Whether reading `path` goes over the network: the planner fetches such members ahead.
bool is_remote(const std::string& path);

// Whether a node-local cache holds `path`'s objects (storage.h: Storage::node_cached).
bool node_cached(const std::string& path);

// A sequential reader (a streamed tar shard). read() returns 0 at the end; throws ReadFailure.
class ByteStream {
 public:
  virtual ~ByteStream() = default;
  virtual size_t read(char* dst, size_t n) = 0;
};

// Opens a file or object for reading from its start. Remote objects arrive in ranged chunks of
// `chunk_bytes`, the next fetched while the current one is consumed (so at most two chunks
// are held), each retried and resumed on its own. gzip data is inflated when `gunzip` and the
// first bytes say gzip.
std::unique_ptr<ByteStream> open_stream(const std::string& path, bool gunzip,
                                        size_t chunk_bytes = 8u << 20);

}  // namespace loadscope::io
