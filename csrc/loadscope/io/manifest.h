#pragma once
// Manifests (JSON lines or CSV) parsed into a SampleTable (table.h), and the table's cache file.
//
// Each row names a file in its path column (relative paths are taken from `root`); every other
// column becomes an inline member named by the column's lower-cased name: a JSON string's
// text, any other JSON value as written in the file (so `{"cls": 3}` gives "3" and a nested
// object its JSON). A JSON line without a column has no such member. Rows are numbered by the
// line they start on.
//
// A bad row — not JSON, not an object, no string path, a path without an extension, a column
// named like the file's own member, a CSV row with the wrong number of fields, bytes that are
// not UTF-8, a row over kMaxRowBytes — is a ConfigError naming the manifest and the line, or,
// with skip_bad_rows, counted and left out (the first few reasons are kept).
//
// JSON lines are parsed in parallel chunks (oneTBB) split at line ends; CSV, whose quoted
// fields may hold newlines, in one pass.
//
// The cache file holds the parsed table as flat arrays, read back by mapping it: a restart
// costs a few page faults instead of a parse. It is keyed by everything the table depends on —
// the manifest's name, size, version (mtime, or a remote object's ETag) and a CRC of its first
// and last 8 KiB, the root, the path column and skip_bad_rows — and any mismatch or damage
// means a fresh parse that replaces it.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "loadscope/io/table.h"

namespace loadscope::io {

constexpr uint64_t kMaxRowBytes = uint64_t{16} << 20;

struct ManifestOptions {
  std::string manifest;  // a local path or a URL; its extension says the format
  std::string root;      // relative paths are joined to it (a directory or a URL)
  std::string path_key = "path";
  bool skip_bad_rows = false;
  std::string cache_dir;  // where the cache file goes; empty: no cache file
  // "+r1f2e3d4c5": rows that are s3/http(s) URLs are read with that storage's settings
  // (loadscope.Remote; SampleTable::scheme_tag). Empty: the manifest's or root's tag, if any.
  std::string scheme_tag;
};

struct Manifest {
  std::shared_ptr<const SampleTable> table;
  int64_t skipped = 0;             // bad rows left out (skip_bad_rows)
  std::vector<std::string> notes;  // the first few of them: "<manifest>:<line>: <reason>"
  std::string cache_path;          // the cache file read or written; empty: none
  bool from_cache = false;
  std::string cache_error;     // why the cache file could not be written, if it could not
  bool cache_pending = false;  // a large table's cache file is being written in the background
  std::string source;          // the manifest's size, version and CRC of its ends when read
};

// Tables smaller than this have their cache file written before read_manifest returns; larger
// ones in a background thread (writing 550 MB for 10^7 rows took as long as parsing them).
constexpr uint64_t kSyncCacheBytes = uint64_t{64} << 20;

enum class ManifestFormat { kJsonl, kCsv };

// The format a manifest's name says. Throws ConfigError listing the allowed extensions.
ManifestFormat manifest_format(const std::string& manifest);

// Reads a manifest (through its cache file when that is current). Throws ConfigError for bad
// rows (unless skipped), an empty manifest, or one that cannot be read.
Manifest read_manifest(const ManifestOptions& options);

// The parser alone over bytes in memory; `options.manifest` only names it in messages. The
// part that the fuzzer reaches.
Manifest parse_manifest(const char* data, size_t size, ManifestFormat format,
                        const ManifestOptions& options);

}  // namespace loadscope::io
