#include "loadscope/io/file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#include "loadscope/core/error.h"
#include "loadscope/io/cache.h"
#include "loadscope/io/faults.h"
#include "loadscope/io/remote.h"
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

// A local file held open for positioned reads (a video FFmpeg demuxes through a custom AVIO,
// which reads a few kilobytes at a time: one open per file, not per read).
class LocalFile {
 public:
  explicit LocalFile(const std::string& path);  // throws ReadFailure; only regular files
  ~LocalFile();
  LocalFile(const LocalFile&) = delete;
  LocalFile& operator=(const LocalFile&) = delete;
  uint64_t size() const { return size_; }
  const std::string& version() const { return version_; }  // size + mtime
  // Up to n bytes at `offset` (fewer only at the end of the file). Throws ReadFailure.
  size_t read_at(uint64_t offset, uint8_t* dst, size_t n) const;

 private:
  int fd_ = -1;
  uint64_t size_ = 0;
  std::string version_;
  std::string path_;  // for injected faults (faults.h)
};

}  // namespace

void check_member_size(uint64_t bytes) {
  if (bytes > kMaxMemberBytes) {
    throw ReadFailure(
        std::to_string(bytes) + " bytes: over the " + std::to_string(kMaxMemberBytes >> 30) +
        " GiB a sample member may have (each is read whole into memory; videos named by path "
        "are read by FFmpeg as needed instead)");
  }
}

uint64_t file_size(const std::string& path) {
  Storage& storage = storage_for(path);
  if (storage.remote()) return storage.stat(path).size;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    throw ReadFailure(path + ": cannot stat: " + std::strerror(errno));
  return static_cast<uint64_t>(st.st_size);
}

std::string node_copy(const std::string& name, bool fetch) {
  const Storage* storage = find_storage(name);
  if (!storage || !storage->remote()) return "";
  if (const cache::Settings* own = storage->cache()) {
    return fetch ? cache::local_copy(name, *own) : cache::cached_copy(name, *own);
  }
  return fetch ? cache::local_copy(name) : cache::cached_copy(name);
}

bool node_cached(const std::string& name) {
  const Storage* storage = find_storage(name);
  if (!storage || !storage->remote()) return false;
  return storage->cache() ? !storage->cache()->dir.empty() : !cache::settings().dir.empty();
}

// The cached copy of a remote object when a cache is configured (cache.h), else "".
static std::string cached(const std::string& path) {
  return node_copy(path);
}

uint64_t read_file(const std::string& path, std::string& out) {
  check_read_fault(path);
  Storage& storage = storage_for(path);
  if (storage.remote()) {
    const std::string local = cached(path);
    if (local.empty()) return storage.read(path, 0, -1, out, "", false);
    try {
      return read_file(local, out);
    } catch (const ReadFailure&) {
      if (::access(local.c_str(), F_OK) == 0) throw;
      return read_file(cached(path), out);  // evicted by another process just now: once more
    }
  }
  struct stat st {};
  Fd f{open_regular(path, st)};
  check_member_size(static_cast<uint64_t>(st.st_size));
  out.resize(static_cast<size_t>(st.st_size));
  size_t done = 0;
  while (done < out.size()) {
    ssize_t n = ::read(f.fd, out.data() + done, out.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw ReadFailure(std::string("read failed: ") + std::strerror(errno));
    }
    if (n == 0) break;  // the file shrank while we read it
    done += static_cast<size_t>(n);
  }
  if (done != out.size()) {
    throw ReadFailure("short read: expected " + std::to_string(out.size()) + " bytes, got " +
                      std::to_string(done));
  }
  return done;
}

uint64_t read_range(const std::string& path, uint64_t offset, uint64_t length, std::string& out) {
  check_read_fault(path);
  check_member_size(length);
  Storage& storage = storage_for(path);
  if (storage.remote()) {
    const std::string local = cached(path);
    if (!local.empty()) {
      try {
        return read_range(local, offset, length, out);
      } catch (const ReadFailure&) {
        if (::access(local.c_str(), F_OK) == 0) throw;
        return read_range(cached(path), offset, length, out);  // evicted just now: once more
      }
    }
    storage.read(path, offset, static_cast<int64_t>(length), out, "", false);
    if (out.size() != length) {
      throw ReadFailure("short read: " + std::to_string(length) + " bytes at byte " +
                        std::to_string(offset) + " of " + remote::redact(path) + ", got " +
                        std::to_string(out.size()));
    }
    return length;
  }
  struct stat st {};
  Fd f{open_regular(path, st)};
  out.resize(static_cast<size_t>(length));
  size_t done = 0;
  while (done < out.size()) {
    ssize_t n =
        ::pread(f.fd, out.data() + done, out.size() - done, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      throw ReadFailure(std::string("read failed: ") + std::strerror(errno));
    }
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  if (done != out.size()) {
    throw ReadFailure("short read: " + std::to_string(length) + " bytes at byte " +
                      std::to_string(offset) + " of " + path + ", got " + std::to_string(done) +
                      " (the file changed after it was indexed?)");
  }
  return done;
}

RandomAccess::RandomAccess(const std::string& path) : path_(path) {
  if (is_remote(path)) {
    const std::string local = cached(path);
    if (local.empty()) {
      const ObjectInfo info = storage_for(path).stat(path);
      size_ = info.size;
      version_ = info.version;
      return;
    }
    path_ = local;  // the cached copy, read like any local file
  }
  const LocalFile file(path_);
  size_ = file.size();
  version_ = file.version();
}

LocalFile::LocalFile(const std::string& path) : path_(path) {
  struct stat st {};
  fd_ = open_regular(path, st);
  size_ = static_cast<uint64_t>(st.st_size);
  version_ = std::to_string(st.st_size) + "@" + std::to_string(st.st_mtim.tv_sec) + "." +
             std::to_string(st.st_mtim.tv_nsec);
}

LocalFile::~LocalFile() {
  ::close(fd_);
}

size_t LocalFile::read_at(uint64_t offset, uint8_t* dst, size_t n) const {
  check_read_fault(path_);
  size_t done = 0;
  while (done < n) {
    ssize_t got = ::pread(fd_, dst + done, n - done, static_cast<off_t>(offset + done));
    if (got < 0) {
      if (errno == EINTR) continue;
      throw ReadFailure(std::string("read failed: ") + std::strerror(errno));
    }
    if (got == 0) break;
    done += static_cast<size_t>(got);
  }
  return done;
}

void RandomAccess::read(uint64_t offset, uint64_t length, std::string& out) const {
  if (is_remote(path_)) {
    storage_for(path_).read(path_, offset, static_cast<int64_t>(length), out, version_, false);
  } else {
    read_range(path_, offset, length, out);
  }
}

namespace {

class LocalSeekable final : public Seekable {
 public:
  explicit LocalSeekable(const std::string& path) : file_(path) {}
  uint64_t size() const override { return file_.size(); }
  const std::string& version() const override { return file_.version(); }
  size_t read_at(uint64_t offset, uint8_t* dst, size_t n) override {
    const size_t k = file_.read_at(offset, dst, n);
    fetched_ += k;
    return k;
  }
  uint64_t fetched() const override { return fetched_; }

 private:
  LocalFile file_;
  uint64_t fetched_ = 0;
};

}  // namespace

std::unique_ptr<Seekable> open_seekable(const std::string& path) {
  Storage& storage = storage_for(path);
  if (!storage.remote()) return storage.open_seekable(path);
  const std::string local = cached(path);  // the node's copy, read like any local file
  return local.empty() ? storage.open_seekable(path) : std::make_unique<LocalSeekable>(local);
}

bool is_remote(const std::string& path) {
  const Storage* storage = find_storage(path);
  return storage && storage->remote();
}

namespace {

class LocalStream : public ByteStream {
 public:
  explicit LocalStream(const std::string& path) {
    struct stat st {};
    fd_ = open_regular(path, st);
  }
  ~LocalStream() override { ::close(fd_); }
  size_t read(char* dst, size_t n) override {
    while (true) {
      ssize_t got = ::read(fd_, dst, n);
      if (got >= 0) return static_cast<size_t>(got);
      if (errno != EINTR) throw ReadFailure(std::string("read failed: ") + std::strerror(errno));
    }
  }

 private:
  int fd_ = -1;
};

// Inflates gzip (concatenated members too, as gzip -d does) when the data starts with its
// magic; passes anything else through.
class GunzipStream : public ByteStream {
 public:
  explicit GunzipStream(std::unique_ptr<ByteStream> raw)
      : raw_(std::move(raw)), in_(1 << 18, '\0') {
    fill();
    while (have_ == 1) {  // the magic's two bytes may arrive in two reads
      const size_t got = raw_->read(in_.data() + 1, in_.size() - 1);
      if (got == 0) break;
      have_ += got;
    }
    gzip_ = have_ >= 2 && static_cast<unsigned char>(in_[0]) == 0x1f &&
            static_cast<unsigned char>(in_[1]) == 0x8b;
    if (gzip_) {
      if (inflateInit2(&z_, 16 + MAX_WBITS) != Z_OK) throw ReadFailure("inflateInit2 failed");
      z_.next_in = reinterpret_cast<Bytef*>(in_.data());
      z_.avail_in = static_cast<uInt>(have_);
    }
  }
  ~GunzipStream() override {
    if (gzip_) inflateEnd(&z_);
  }
  size_t read(char* dst, size_t n) override {
    if (!gzip_) {
      if (pos_ < have_) {
        const size_t take = std::min(n, have_ - pos_);
        std::memcpy(dst, in_.data() + pos_, take);
        pos_ += take;
        return take;
      }
      return raw_->read(dst, n);
    }
    if (finished_) return 0;
    z_.next_out = reinterpret_cast<Bytef*>(dst);
    z_.avail_out = static_cast<uInt>(std::min<size_t>(n, 1u << 30));
    while (z_.avail_out == std::min<size_t>(n, 1u << 30)) {
      if (z_.avail_in == 0) {
        fill();
        if (have_ == 0) {
          if (ended_) return 0;
          throw ReadFailure("truncated gzip stream");
        }
        z_.next_in = reinterpret_cast<Bytef*>(in_.data());
        z_.avail_in = static_cast<uInt>(have_);
      }
      if (ended_) {
        // Another gzip member follows, or trailing bytes (zero padding) that gzip ignores too.
        // Its magic may straddle two reads: keep the byte left over and read on.
        while (z_.avail_in < 2) {
          const size_t left = z_.avail_in;
          std::memmove(in_.data(), z_.next_in, left);
          const size_t got = raw_->read(in_.data() + left, in_.size() - left);
          have_ = left + got;
          z_.next_in = reinterpret_cast<Bytef*>(in_.data());
          z_.avail_in = static_cast<uInt>(have_);
          if (got == 0) break;
        }
        if (z_.avail_in < 2 || z_.next_in[0] != 0x1f || z_.next_in[1] != 0x8b) {
          finished_ = true;
          break;
        }
        inflateReset(&z_);
        ended_ = false;
      }
      const int rc = inflate(&z_, Z_NO_FLUSH);
      if (rc == Z_STREAM_END) {
        ended_ = true;
      } else if (rc != Z_OK && rc != Z_BUF_ERROR) {
        throw ReadFailure(std::string("gzip error: ") + (z_.msg ? z_.msg : "corrupt data"));
      }
    }
    return std::min<size_t>(n, 1u << 30) - z_.avail_out;
  }

 private:
  void fill() {
    have_ = raw_->read(in_.data(), in_.size());
    pos_ = 0;
  }

  std::unique_ptr<ByteStream> raw_;
  std::string in_;
  size_t have_ = 0, pos_ = 0;
  bool gzip_ = false, ended_ = false, finished_ = false;
  z_stream z_{};
};

// Local paths: POSIX reads of regular files.
class LocalStorage final : public Storage {
 public:
  bool remote() const override { return false; }
  ObjectInfo stat(const std::string& name) override {
    const LocalFile file(name);
    return {file.size(), file.version()};
  }
  uint64_t read(const std::string& name, uint64_t offset, int64_t length, std::string& out,
                const std::string& version, bool upto) override {
    const LocalFile file(name);
    if (!version.empty() && version != file.version()) {
      throw ReadFailure(name + " changed while it was read (" + version + ", now " +
                        file.version() + ")");
    }
    const uint64_t end = length < 0 ? file.size() : offset + static_cast<uint64_t>(length);
    const uint64_t want = offset >= file.size() ? 0 : std::min(end, file.size()) - offset;
    out.resize(static_cast<size_t>(want));
    const size_t got = file.read_at(offset, reinterpret_cast<uint8_t*>(out.data()), out.size());
    out.resize(got);
    if (!upto && length >= 0 && got != static_cast<uint64_t>(length)) {
      throw ReadFailure("short read: " + std::to_string(length) + " bytes at byte " +
                        std::to_string(offset) + " of " + name + ", got " + std::to_string(got));
    }
    return got;
  }
  std::unique_ptr<Seekable> open_seekable(const std::string& name) override {
    return std::make_unique<LocalSeekable>(name);
  }
  std::unique_ptr<ByteStream> open_stream(const std::string& name, size_t) override {
    return std::make_unique<LocalStream>(name);
  }
};

}  // namespace

std::shared_ptr<Storage> local_storage() {
  static const auto storage = std::make_shared<LocalStorage>();
  return storage;
}

std::unique_ptr<ByteStream> open_stream(const std::string& path, bool gunzip, size_t chunk_bytes) {
  check_read_fault(path);
  std::unique_ptr<ByteStream> raw;
  const std::string local = cached(path);
  raw = local.empty() ? storage_for(path).open_stream(path, chunk_bytes)
                      : std::make_unique<LocalStream>(local);
  if (!gunzip) return raw;
  return std::make_unique<GunzipStream>(std::move(raw));
}

}  // namespace loadscope::io
