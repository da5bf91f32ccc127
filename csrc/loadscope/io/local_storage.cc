// The Storage of names without a scheme: local paths, read with POSIX calls. Every local read
// of the engine comes here through file.h (members, shards, indexes, manifests, the videos
// FFmpeg seeks in) and so does every read of a node-local cache's copy (cache.cc), so a local
// file is opened, checked and read in one place.

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "loadscope/core/error.h"
#include "loadscope/io/faults.h"
#include "loadscope/io/file.h"
#include "loadscope/io/storage.h"

namespace loadscope::io {

namespace {

struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// Opens a regular file for reading. O_NONBLOCK: opening a FIFO (a named pipe where an image
// should be) would otherwise wait for a writer forever, in a worker thread.
int open_regular(const std::string& path, struct stat& st) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw ReadFailure(std::string("cannot open: ") + std::strerror(errno));
  Fd guard{fd};
  if (::fstat(fd, &st) != 0) throw ReadFailure(std::string("cannot stat: ") + std::strerror(errno));
  if (S_ISDIR(st.st_mode)) throw ReadFailure("is a directory");
  if (!S_ISREG(st.st_mode)) throw ReadFailure("not a regular file (a device, pipe or socket)");
  guard.fd = -1;
  return fd;
}

// A file's version: size and modification time (an indexed shard rewritten in place changes it).
std::string version_of(const struct stat& st) {
  return std::to_string(st.st_size) + "@" + std::to_string(st.st_mtim.tv_sec) + "." +
         std::to_string(st.st_mtim.tv_nsec);
}

// Up to n bytes at `offset` (fewer only at the end of the file). Throws ReadFailure.
size_t pread_all(int fd, uint8_t* dst, size_t n, uint64_t offset) {
  size_t done = 0;
  while (done < n) {
    const ssize_t got = ::pread(fd, dst + done, n - done, static_cast<off_t>(offset + done));
    if (got < 0) {
      if (errno == EINTR) continue;
      throw ReadFailure(std::string("read failed: ") + std::strerror(errno));
    }
    if (got == 0) break;  // the file ends here (or shrank while we read it)
    done += static_cast<size_t>(got);
  }
  return done;
}

// A file held open for positioned reads (FFmpeg's AVIO reads a few kilobytes at a time: one
// open per file, not per read).
class LocalSeekable final : public Seekable {
 public:
  explicit LocalSeekable(const std::string& path) : path_(path) {
    struct stat st {};
    fd_ = open_regular(path, st);
    size_ = static_cast<uint64_t>(st.st_size);
    version_ = version_of(st);
  }
  ~LocalSeekable() override { ::close(fd_); }
  uint64_t size() const override { return size_; }
  const std::string& version() const override { return version_; }
  size_t read_at(uint64_t offset, uint8_t* dst, size_t n) override {
    check_read_fault(path_);  // where FFmpeg's reads of a file surface (faults.h)
    const size_t k = pread_all(fd_, dst, n, offset);
    fetched_ += k;
    return k;
  }
  uint64_t fetched() const override { return fetched_; }

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
  std::string version_;
  uint64_t fetched_ = 0;
};

class LocalStream final : public ByteStream {
 public:
  explicit LocalStream(const std::string& path) {
    struct stat st {};
    fd_ = open_regular(path, st);
  }
  ~LocalStream() override { ::close(fd_); }
  size_t read(char* dst, size_t n) override {
    while (true) {
      const ssize_t got = ::read(fd_, dst, n);
      if (got >= 0) return static_cast<size_t>(got);
      if (errno != EINTR) throw ReadFailure(std::string("read failed: ") + std::strerror(errno));
    }
  }

 private:
  int fd_ = -1;
};

class LocalStorage final : public Storage {
 public:
  bool remote() const override { return false; }
  ObjectInfo stat(const std::string& name) override {
    struct stat st {};
    Fd f{open_regular(name, st)};
    return {static_cast<uint64_t>(st.st_size), version_of(st)};
  }
  // One open, one fstat, the reads: what a hand-written read of a file costs, nothing more.
  uint64_t read(const std::string& name, uint64_t offset, int64_t length, std::string& out,
                const std::string& version, bool upto) override {
    struct stat st {};
    Fd f{open_regular(name, st)};
    if (!version.empty() && version != version_of(st)) {
      throw ReadFailure(name + " changed while it was read (" + version + ", now " +
                        version_of(st) + ")");
    }
    const auto size = static_cast<uint64_t>(st.st_size);
    const uint64_t end = length < 0 ? size : offset + static_cast<uint64_t>(length);
    const uint64_t want = offset >= size ? 0 : std::min(end, size) - offset;
    check_member_size(want);  // before the allocation: a sparse 3 GB "image" is not read
    out.resize(static_cast<size_t>(want));
    const size_t got = pread_all(f.fd, reinterpret_cast<uint8_t*>(out.data()), out.size(), offset);
    out.resize(got);
    const uint64_t expected = length < 0 ? want : static_cast<uint64_t>(length);
    if (got != expected && (length < 0 || !upto)) {
      throw ReadFailure("short read: " + std::to_string(expected) + " bytes at byte " +
                        std::to_string(offset) + " of " + name + ", got " + std::to_string(got) +
                        " (the file changed after it was listed or indexed?)");
    }
    return got;
  }
  std::unique_ptr<Seekable> open_seekable(const std::string& name) override {
    return std::make_unique<LocalSeekable>(name);
  }
  std::unique_ptr<ByteStream> open_stream(const std::string& name, size_t) override {
    return std::make_unique<LocalStream>(name);
  }
  // Written beside and renamed into place: a reader never sees half a file.
  void put(const std::string& name, const std::string& data) override {
    const std::string tmp = name + ".partial";
    {
      std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
      if (!out) throw ReadFailure(tmp + ": cannot write: " + std::strerror(errno));
      out << data;
      out.flush();
      if (!out) throw ReadFailure(tmp + ": write failed: " + std::strerror(errno));
    }
    if (std::rename(tmp.c_str(), name.c_str()) != 0) {
      throw ReadFailure(name + ": cannot rename into place: " + std::strerror(errno));
    }
  }
};

}  // namespace

std::shared_ptr<Storage> local_storage() {
  static const auto storage = std::make_shared<LocalStorage>();
  return storage;
}

}  // namespace loadscope::io
