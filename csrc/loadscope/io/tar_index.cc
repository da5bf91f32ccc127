#include "loadscope/io/tar_index.h"

#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <sstream>

#include "loadscope/core/error.h"
#include "loadscope/io/file.h"
#include "loadscope/io/sources.h"
#include "loadscope/io/tar.h"

namespace loadscope::io {

namespace {

constexpr const char* kMagic = "loadscope-tar-index 1";

bool parse_u64(const std::string& s, uint64_t& out) {
  if (s.empty() || s.size() > 20) return false;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  out = v;
  return true;
}

bool parse_hex32(const std::string& s, uint32_t& out) {
  if (s.empty() || s.size() > 8) return false;
  uint32_t v = 0;
  for (char c : s) {
    int d = (c >= '0' && c <= '9') ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : -1;
    if (d < 0) return false;
    v = v * 16 + static_cast<uint32_t>(d);
  }
  out = v;
  return true;
}

}  // namespace

uint32_t shard_fingerprint(const std::string& tar_path) {
  return shard_fingerprint(tar_path, file_size(tar_path));
}

uint32_t shard_fingerprint(const std::string& tar_path, uint64_t size) {
  constexpr uint64_t kEdge = 8192;
  std::string head, tail;
  // Two small ranges: never a download of a whole remote shard through the node cache (its
  // copy is read when the node has one: every process would otherwise fetch the same ranges).
  Storage& storage = storage_for(tar_path);
  const uint64_t edge = std::min(size, kEdge);
  storage.peek(tar_path, 0, static_cast<int64_t>(edge), head);
  storage.peek(tar_path, size - edge, static_cast<int64_t>(edge), tail);
  uLong crc = crc32(0L, Z_NULL, 0);
  const std::string sz = std::to_string(size);
  crc = crc32(crc, reinterpret_cast<const Bytef*>(sz.data()), static_cast<uInt>(sz.size()));
  crc = crc32(crc, reinterpret_cast<const Bytef*>(head.data()), static_cast<uInt>(head.size()));
  crc = crc32(crc, reinterpret_cast<const Bytef*>(tail.data()), static_cast<uInt>(tail.size()));
  return static_cast<uint32_t>(crc);
}

uint64_t ShardIndex::member_bytes() const {
  uint64_t total = 0;
  for (const auto& s : samples)
    for (const auto& m : s.members) total += m.size;
  return total;
}

namespace {
// The size of a shard; a remote one's version is pinned from here on (Storage::pin), so a
// shard rewritten after it was indexed fails its reads instead of mixing two versions.
uint64_t shard_size(const std::string& tar_path) {
  Storage& storage = storage_for(tar_path);
  const ObjectInfo info = storage.stat(tar_path);
  storage.pin(tar_path, info.version);  // a local file has nothing to pin: its reads see it now
  return info.size;
}
}  // namespace

ShardIndex index_shard(const std::string& tar_path) {
  ShardIndex index;
  index.path = tar_path;
  index.tar_bytes = shard_size(tar_path);
  index.fingerprint = shard_fingerprint(tar_path, index.tar_bytes);
  std::string key, ext;
  for (auto& m : scan_tar(tar_path)) {
    if (!split_member_name(m.name, key, ext))
      continue;  // no extension: in no sample (as WebDataset)
    if (key.find_first_of("\t\n\r") != std::string::npos ||
        ext.find_first_of("\t\n\r") != std::string::npos) {
      throw ReadFailure("member '" + m.name + "': names with tabs or newlines cannot be indexed");
    }
    if (index.samples.empty() || index.samples.back().key != key) {
      index.samples.push_back(IndexedSample{key, {}});
    }
    IndexedSample& s = index.samples.back();
    for (const auto& other : s.members) {
      if (other.name == ext) {
        throw ReadFailure("sample '" + key + "': member '" + ext + "' appears twice");
      }
    }
    s.members.push_back(IndexedMember{ext, m.offset, m.size});
  }
  return index;
}

void write_index(const ShardIndex& index, const std::string& idx_path) {
  std::ostringstream text;
  char fp[16];
  std::snprintf(fp, sizeof fp, "%08x", index.fingerprint);
  text << kMagic << "\ntar_bytes " << index.tar_bytes << "\nfingerprint " << fp << "\nsamples "
       << index.samples.size() << "\n";
  for (const auto& s : index.samples) {
    text << s.key;
    for (const auto& m : s.members) text << '\t' << m.name << '\t' << m.offset << '\t' << m.size;
    text << '\n';
  }
  storage_for(idx_path).put(idx_path, text.str());  // atomic: an object PUT, a file renamed
}

ShardIndex parse_index(const std::string& text, const std::string& idx_path,
                       const std::string& tar_path) {
  std::istringstream in(text);
  // Malformed content is a bad data layout (ConfigError) naming the file and line.
  auto bad = [&](size_t line, const std::string& why) {
    return ConfigError(idx_path + " line " + std::to_string(line) + ": " + why);
  };
  std::string line;
  ShardIndex index;
  index.path = tar_path;
  uint64_t count = 0;
  if (!std::getline(in, line) || line.rfind("loadscope-tar-index ", 0) != 0) {
    throw bad(1, "not a loadscope tar index (expected '" + std::string(kMagic) + "')");
  }
  if (line != kMagic) {
    throw bad(1, "unsupported index version '" + line.substr(20) +
                     "' (this loadscope reads version 1; re-run `loadscope index`)");
  }
  if (!std::getline(in, line) || line.rfind("tar_bytes ", 0) != 0 ||
      !parse_u64(line.substr(10), index.tar_bytes)) {
    throw bad(2, "expected 'tar_bytes N'");
  }
  if (!std::getline(in, line) || line.rfind("fingerprint ", 0) != 0 ||
      !parse_hex32(line.substr(12), index.fingerprint)) {
    throw bad(3, "expected 'fingerprint HEX'");
  }
  if (!std::getline(in, line) || line.rfind("samples ", 0) != 0 ||
      !parse_u64(line.substr(8), count)) {
    throw bad(4, "expected 'samples N'");
  }
  // `count` is checked at the end; reserving for it up front would trust the file (a damaged
  // count of 10^15 was an allocation failure): at most one sample per 4 bytes of index.
  index.samples.reserve(static_cast<size_t>(std::min<uint64_t>(count, text.size() / 4 + 1)));
  size_t lineno = 4;
  const uint64_t total = index.tar_bytes;
  while (std::getline(in, line)) {
    ++lineno;
    if (line.empty()) continue;
    std::vector<std::string> cols;
    size_t start = 0;
    while (true) {
      size_t tab = line.find('\t', start);
      cols.push_back(
          line.substr(start, tab == std::string::npos ? std::string::npos : tab - start));
      if (tab == std::string::npos) break;
      start = tab + 1;
    }
    if (cols.size() < 4 || (cols.size() - 1) % 3 != 0)
      throw bad(lineno, "expected key, then member, offset, size triples");
    IndexedSample smp;
    smp.key = cols[0];
    for (size_t i = 1; i < cols.size(); i += 3) {
      IndexedMember m;
      m.name = cols[i];
      if (!parse_u64(cols[i + 1], m.offset) || !parse_u64(cols[i + 2], m.size))
        throw bad(lineno, "bad offset or size");
      if (m.size > total || m.offset > total - m.size) {  // no overflow for sizes near 2^64
        throw bad(lineno, "member '" + m.name + "' lies past the end of " + tar_path);
      }
      smp.members.push_back(std::move(m));
    }
    index.samples.push_back(std::move(smp));
  }
  if (index.samples.size() != count) {
    throw bad(lineno, "says " + std::to_string(count) + " samples, holds " +
                          std::to_string(index.samples.size()) + " (truncated?)");
  }
  return index;
}

ShardIndex read_index(const std::string& idx_path, const std::string& tar_path) {
  std::string text;
  try {
    read_file(idx_path, text);
  } catch (const ReadFailure& e) {
    throw ReadFailure(idx_path + ": " + e.what());
  }
  ShardIndex index = parse_index(text, idx_path, tar_path);
  uint64_t actual = 0;
  uint32_t fingerprint = 0;
  try {
    actual = shard_size(tar_path);
    fingerprint = shard_fingerprint(tar_path, actual);
  } catch (const ReadFailure& e) {
    throw ReadFailure(tar_path + ": " + e.what());
  }
  if (actual != index.tar_bytes || fingerprint != index.fingerprint) {
    throw ConfigError(idx_path + " is stale: " + tar_path + " changed after it was indexed (" +
                      (actual != index.tar_bytes ? "size " + std::to_string(index.tar_bytes) +
                                                       " then, " + std::to_string(actual) + " now"
                                                 : "same size, other contents") +
                      "); re-run `loadscope index`");
  }
  return index;
}

}  // namespace loadscope::io
