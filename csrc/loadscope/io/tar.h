#pragma once
// Sequential reader of tar archives (POSIX ustar, GNU long names, pax path records), plain or
// gzip-compressed, local or remote (file.h). Regular files only; directories, links and pax globals
// are passed over. Not thread-safe: one reader per thread.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "loadscope/io/file.h"

namespace loadscope::io {

struct TarEntry {
  std::string name;     // path inside the archive
  std::string data;     // contents
  uint64_t offset = 0;  // byte offset of the member's header in the (uncompressed) archive
};

// A regular-file member of an uncompressed tar: where its data lies.
struct TarMemberInfo {
  std::string name;
  uint64_t offset = 0;  // first byte of the data
  uint64_t size = 0;
};

// Lists the regular-file members of an uncompressed tar by reading its headers only (the data
// is never read: each header says how far the next one is). Throws ReadFailure for a gzip
// file (its offsets would need the whole stream decompressed), a corrupt header or a member
// that runs past the end of the file.
std::vector<TarMemberInfo> scan_tar(const std::string& path);

class TarReader {
 public:
  // Throws ReadFailure when the file cannot be opened.
  explicit TarReader(const std::string& path);
  ~TarReader();
  TarReader(const TarReader&) = delete;
  TarReader& operator=(const TarReader&) = delete;

  // Reads the next regular file; false at the end of the archive. Throws ReadFailure on a
  // corrupt header, a truncated member or a gzip error; the reader is unusable afterwards.
  bool next(TarEntry& entry);

  // Uncompressed bytes consumed so far.
  uint64_t position() const { return position_; }

 private:
  size_t read_upto(char* dst, size_t n);  // fewer only at the end of the stream
  void read_exact(char* dst, size_t n, const char* what);
  void skip(uint64_t n);

  std::unique_ptr<ByteStream> stream_;
  std::string path_;
  uint64_t position_ = 0;
};

}  // namespace loadscope::io
