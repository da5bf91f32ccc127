#include "loadscope/io/tar.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "loadscope/core/error.h"
#include "loadscope/io/file.h"

namespace loadscope::io {

namespace {

constexpr size_t kBlock = 512;

// Numeric header fields are octal text, or base-256 with the high bit set (GNU, > 8 GiB).
bool parse_number(const char* field, size_t len, uint64_t& out) {
  const auto* p = reinterpret_cast<const unsigned char*>(field);
  if (p[0] & 0x80) {
    uint64_t v = p[0] & 0x7f;
    for (size_t i = 1; i < len; ++i) v = (v << 8) | p[i];
    out = v;
    return true;
  }
  uint64_t v = 0;
  size_t i = 0;
  while (i < len && (field[i] == ' ' || field[i] == '\0')) ++i;
  bool any = false;
  for (; i < len && field[i] >= '0' && field[i] <= '7'; ++i) {
    v = v * 8 + static_cast<uint64_t>(field[i] - '0');
    any = true;
  }
  for (; i < len; ++i) {
    if (field[i] != ' ' && field[i] != '\0') return false;
  }
  out = v;
  return any || field[0] == '\0' || field[0] == ' ';
}

std::string field_string(const char* field, size_t len) {
  return std::string(field, strnlen(field, len));
}

bool checksum_ok(const char* header) {
  uint64_t stored = 0;
  if (!parse_number(header + 148, 8, stored)) return false;
  uint64_t sum = 0;
  for (size_t i = 0; i < kBlock; ++i) {
    sum += (i >= 148 && i < 156) ? ' ' : static_cast<unsigned char>(header[i]);
  }
  return sum == stored;
}

// pax records: "<len> <key>=<value>\n"; returns the value of "path" if present.
std::string pax_path(const std::string& records) {
  size_t pos = 0;
  std::string path;
  while (pos < records.size()) {
    size_t space = records.find(' ', pos);
    if (space == std::string::npos) break;
    size_t len = std::strtoul(records.c_str() + pos, nullptr, 10);
    if (len == 0 || pos + len > records.size()) break;
    std::string record = records.substr(space + 1, pos + len - space - 2);
    size_t eq = record.find('=');
    if (eq != std::string::npos && record.compare(0, eq, "path") == 0) path = record.substr(eq + 1);
    pos += len;
  }
  return path;
}

// The member path of a ustar/GNU header (without long-name records).
std::string header_name(const char* header) {
  std::string name = field_string(header, 100);
  std::string prefix = field_string(header + 345, 155);
  const bool ustar = std::memcmp(header + 257, "ustar", 5) == 0;
  return (ustar && !prefix.empty()) ? prefix + "/" + name : name;
}

void read_exact(Seekable& file, char* dst, size_t n, uint64_t offset, const char* what) {
  size_t done = 0;
  while (done < n) {
    size_t got = 0;
    try {
      got = file.read_at(offset + done, reinterpret_cast<uint8_t*>(dst) + done, n - done);
    } catch (const ReadFailure& e) {
      throw ReadFailure(std::string("read error in ") + what + " at byte " +
                        std::to_string(offset) + ": " + e.what());
    }
    if (got == 0)
      throw ReadFailure(std::string("truncated archive: ") + what + " at byte " +
                        std::to_string(offset));
    done += got;
  }
}

}  // namespace

namespace {
const char* const kGzipRefused =
    "gzip-compressed: an index needs an uncompressed tar (its offsets would need the whole stream "
    "decompressed)";

// A remote shard is read once, front to back, instead of one ranged GET per header.
std::vector<TarMemberInfo> scan_remote_tar(const std::string& url) {
  std::string magic;
  read_range(url, 0, std::min<uint64_t>(2, file_size(url)), magic);
  if (magic.size() == 2 && static_cast<unsigned char>(magic[0]) == 0x1f &&
      static_cast<unsigned char>(magic[1]) == 0x8b) {
    throw ReadFailure(kGzipRefused);
  }
  std::vector<TarMemberInfo> out;
  TarReader reader(url);
  TarEntry e;
  while (reader.next(e)) out.push_back(TarMemberInfo{e.name, e.offset + kBlock, e.data.size()});
  return out;
}
}  // namespace

std::vector<TarMemberInfo> scan_tar(const std::string& path) {
  Storage& storage = storage_for(path);
  // An object on the network is read once, front to back, not one request per header; a local
  // file, or a node-local cache's copy of the object (fetched whole for the node once: its
  // members are read from it anyway), header by header.
  if (storage.remote() && !storage.node_cached()) return scan_remote_tar(path);
  const std::unique_ptr<Seekable> file = storage.open_seekable(path);
  const uint64_t file_size = file->size();
  std::vector<TarMemberInfo> out;
  std::string long_name;
  char header[kBlock];
  if (file_size >= 2) {
    read_exact(*file, header, 2, 0, "header");
    if (static_cast<unsigned char>(header[0]) == 0x1f &&
        static_cast<unsigned char>(header[1]) == 0x8b) {
      throw ReadFailure(kGzipRefused);
    }
  }
  uint64_t offset = 0;
  while (offset + kBlock <= file_size) {
    read_exact(*file, header, kBlock, offset, "header");
    bool zero = true;
    for (char c : header) {
      if (c != 0) {
        zero = false;
        break;
      }
    }
    if (zero) return out;
    if (!checksum_ok(header)) {
      throw ReadFailure("corrupt tar header at byte " + std::to_string(offset) +
                        " (checksum mismatch)");
    }
    uint64_t size = 0;
    if (!parse_number(header + 124, 12, size)) {
      throw ReadFailure("corrupt tar header at byte " + std::to_string(offset) +
                        " (bad size field)");
    }
    const uint64_t data = offset + kBlock;
    const uint64_t padded = (size + kBlock - 1) / kBlock * kBlock;
    if (data + size > file_size) {
      throw ReadFailure("truncated archive: member data at byte " + std::to_string(data) +
                        " needs " + std::to_string(size) + " bytes, the file ends at " +
                        std::to_string(file_size));
    }
    const char type = header[156];
    if (type == 'L' || type == 'x') {
      std::string meta(static_cast<size_t>(size), '\0');
      read_exact(*file, meta.data(), meta.size(), data, "extended header");
      long_name = type == 'L' ? field_string(meta.data(), meta.size()) : pax_path(meta);
    } else if (type == '0' || type == '\0' || type == '7') {
      TarMemberInfo m;
      m.name = long_name.empty() ? header_name(header) : std::move(long_name);
      long_name.clear();
      m.offset = data;
      m.size = size;
      out.push_back(std::move(m));
    } else {
      long_name.clear();
    }
    offset = data + padded;
  }
  if (offset != file_size) {
    throw ReadFailure("truncated or unreadable tar header at byte " + std::to_string(offset));
  }
  return out;  // archives without the two zero blocks end here
}

TarReader::TarReader(const std::string& path) : path_(path) {
  stream_ = open_stream(path, /*gunzip=*/true);  // plain or gzip, local or remote: one code path
}

TarReader::~TarReader() = default;

size_t TarReader::read_upto(char* dst, size_t n) {
  size_t done = 0;
  while (done < n) {
    const size_t got = stream_->read(dst + done, n - done);
    if (got == 0) break;
    done += got;
  }
  return done;
}

void TarReader::read_exact(char* dst, size_t n, const char* what) {
  size_t done = 0;
  try {
    done = read_upto(dst, n);
  } catch (const ReadFailure& e) {
    throw ReadFailure(std::string("read error in ") + what + " at byte " +
                      std::to_string(position_) + ": " + e.what());
  }
  if (done != n) {
    throw ReadFailure(std::string("truncated archive: ") + what + " at byte " +
                      std::to_string(position_) + " needs " + std::to_string(n) + " bytes, only " +
                      std::to_string(done) + " left");
  }
  position_ += n;
}

void TarReader::skip(uint64_t n) {
  std::vector<char> sink(std::min<uint64_t>(n, 1 << 16));
  while (n > 0) {
    size_t chunk = static_cast<size_t>(std::min<uint64_t>(n, sink.size()));
    read_exact(sink.data(), chunk, "member data");
    n -= chunk;
  }
}

bool TarReader::next(TarEntry& entry) {
  std::string long_name;
  char header[kBlock];
  while (true) {
    const uint64_t header_offset = position_;
    size_t got = 0;
    try {
      got = read_upto(header, kBlock);
    } catch (const ReadFailure& e) {
      throw ReadFailure("unreadable tar header at byte " + std::to_string(header_offset) + ": " +
                        e.what());
    }
    if (got == 0) return false;  // archives without the two zero blocks end here
    if (got != kBlock) {
      position_ += got;
      throw ReadFailure("truncated or unreadable tar header at byte " +
                        std::to_string(header_offset) + ": partial header block");
    }
    position_ += kBlock;
    bool zero = true;
    for (char c : header) {
      if (c != 0) {
        zero = false;
        break;
      }
    }
    if (zero) return false;  // end-of-archive marker
    if (!checksum_ok(header)) {
      throw ReadFailure("corrupt tar header at byte " + std::to_string(header_offset) +
                        " (checksum mismatch)");
    }
    uint64_t size = 0;
    if (!parse_number(header + 124, 12, size)) {
      throw ReadFailure("corrupt tar header at byte " + std::to_string(header_offset) +
                        " (bad size field)");
    }
    const char type = header[156];
    const uint64_t padded = (size + kBlock - 1) / kBlock * kBlock;
    if (type == 'L' || type == 'x') {
      if (size > (1 << 20)) {  // a long name or pax record; real ones are bytes to kilobytes
        throw ReadFailure("corrupt tar header at byte " + std::to_string(header_offset) +
                          " (an extended header of " + std::to_string(size) + " bytes)");
      }
      std::string meta(static_cast<size_t>(size), '\0');
      read_exact(meta.data(), meta.size(), "extended header");
      skip(padded - size);
      long_name = type == 'L' ? field_string(meta.data(), meta.size()) : pax_path(meta);
      continue;
    }
    if (type != '0' && type != '\0' && type != '7') {  // dirs, links, pax globals, ...
      skip(padded);
      long_name.clear();
      continue;
    }
    if (!long_name.empty()) {
      entry.name = std::move(long_name);
      long_name.clear();
    } else {
      entry.name = header_name(header);
    }
    entry.offset = header_offset;
    // Grown as the data arrives, never sized from the header alone: a corrupt header can claim
    // 8 GiB in a 1 KiB file (found by fuzzing: tests/fuzz/regressions/tar/size-8gib-in-1kib),
    // and allocating that up front is an out-of-memory, not an error naming the shard.
    entry.data.clear();
    uint64_t left = size;
    while (left > 0) {
      const size_t chunk = static_cast<size_t>(std::min<uint64_t>(left, 1 << 20));
      const size_t at = entry.data.size();
      entry.data.resize(at + chunk);
      read_exact(entry.data.data() + at, chunk, "member data");
      left -= chunk;
    }
    skip(padded - size);
    return true;
  }
}

}  // namespace loadscope::io
