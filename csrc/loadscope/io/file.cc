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
  if (remote::is_url(path)) return remote::stat(path).size;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    throw ReadFailure(path + ": cannot stat: " + std::strerror(errno));
  return static_cast<uint64_t>(st.st_size);
}

// The cached copy of a remote object when a cache is configured (cache.h), else "".
static std::string cached(const std::string& path) {
  return remote::is_url(path) ? cache::local_copy(path) : std::string();
}

uint64_t read_file(const std::string& path, std::string& out) {
  check_read_fault(path);
  if (remote::is_url(path)) {
    const std::string local = cached(path);
    if (local.empty()) return remote::get(path, 0, -1, out);
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
  if (remote::is_url(path)) {
    const std::string local = cached(path);
    if (!local.empty()) {
      try {
        return read_range(local, offset, length, out);
      } catch (const ReadFailure&) {
        if (::access(local.c_str(), F_OK) == 0) throw;
        return read_range(cached(path), offset, length, out);  // evicted just now: once more
      }
    }
    remote::get(path, offset, static_cast<int64_t>(length), out);
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
  if (remote::is_url(path)) {
    const std::string local = cached(path);
    if (local.empty()) {
      const remote::ObjectInfo info = remote::stat(path);
      size_ = info.size;
      version_ = info.etag;
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
  if (remote::is_url(path_)) {
    remote::get(path_, offset, static_cast<int64_t>(length), out, version_);
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

class BlockSeekable final : public Seekable {
 public:
  explicit BlockSeekable(const std::string& path) : object_(path) {}
  uint64_t size() const override { return object_.size(); }
  const std::string& version() const override { return object_.version(); }
  size_t read_at(uint64_t offset, uint8_t* dst, size_t n) override {
    if (offset >= object_.size()) return 0;
    const uint64_t at = offset / kBlock * kBlock;
    if (at != block_at_) {
      block_at_ = UINT64_MAX;  // a failed read leaves no stale block behind
      object_.read(at, std::min(kBlock, object_.size() - at), block_);
      block_at_ = at;
      fetched_ += block_.size();
    }
    const size_t within = static_cast<size_t>(offset - at);
    if (within >= block_.size()) return 0;
    const size_t k = std::min(block_.size() - within, n);
    std::memcpy(dst, block_.data() + within, k);
    return k;
  }
  uint64_t fetched() const override { return fetched_; }

 private:
  RandomAccess object_;
  uint64_t block_at_ = UINT64_MAX;
  std::string block_;
  uint64_t fetched_ = 0;
};

}  // namespace

std::unique_ptr<Seekable> open_seekable(const std::string& path) {
  if (is_remote(path)) return std::make_unique<BlockSeekable>(path);
  return std::make_unique<LocalSeekable>(path);
}

bool is_remote(const std::string& path) {
  return remote::is_url(path);
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

// Ranged GETs of `chunk` bytes, one ahead of the reader on a thread of its own (which keeps
// its own connection alive). Every chunk is pinned to the ETag of the object when it was
// opened: a shard rewritten mid-stream is an error, not a mix of two versions.
class RemoteStream : public ByteStream {
 public:
  RemoteStream(const std::string& url, size_t chunk) : url_(url), chunk_(chunk) {
    const remote::ObjectInfo info = remote::stat(url);
    size_ = info.size;
    etag_ = info.etag;
    fetcher_ = std::thread([this] { fetch_all(); });
  }
  ~RemoteStream() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    fetcher_.join();
  }
  size_t read(char* dst, size_t n) override {
    if (at_ == current_.size()) {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [this] { return !ready_.empty() || done_ || error_; });
      if (ready_.empty()) {
        if (error_) std::rethrow_exception(error_);
        return 0;
      }
      current_ = std::move(ready_.front());
      ready_.pop_front();
      at_ = 0;
      cv_.notify_all();
    }
    const size_t take = std::min(n, current_.size() - at_);
    std::memcpy(dst, current_.data() + at_, take);
    at_ += take;
    return take;
  }

 private:
  void fetch_all() {
    for (uint64_t offset = 0; offset < size_; offset += chunk_) {
      {
        std::unique_lock<std::mutex> lock(mutex_);
        cv_.wait(lock, [this] { return ready_.size() < 1 || stop_; });  // one chunk ahead
        if (stop_) return;
      }
      std::string bytes;
      try {
        remote::get(url_, offset, static_cast<int64_t>(std::min<uint64_t>(chunk_, size_ - offset)),
                    bytes, etag_);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mutex_);
        error_ = std::current_exception();
        cv_.notify_all();
        return;
      }
      std::lock_guard<std::mutex> lock(mutex_);
      ready_.push_back(std::move(bytes));
      cv_.notify_all();
    }
    std::lock_guard<std::mutex> lock(mutex_);
    done_ = true;
    cv_.notify_all();
  }

  std::string url_;
  size_t chunk_;
  uint64_t size_ = 0;
  std::string etag_;
  std::string current_;
  size_t at_ = 0;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::string> ready_;
  bool done_ = false, stop_ = false;
  std::exception_ptr error_;
  std::thread fetcher_;
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

}  // namespace

std::unique_ptr<ByteStream> open_stream(const std::string& path, bool gunzip, size_t chunk_bytes) {
  check_read_fault(path);
  std::unique_ptr<ByteStream> raw;
  const std::string local = cached(path);
  if (!local.empty()) {
    raw = std::make_unique<LocalStream>(local);
  } else if (remote::is_url(path)) {
    raw = std::make_unique<RemoteStream>(path, chunk_bytes);
  } else {
    raw = std::make_unique<LocalStream>(path);
  }
  if (!gunzip) return raw;
  return std::make_unique<GunzipStream>(std::move(raw));
}

}  // namespace loadscope::io
