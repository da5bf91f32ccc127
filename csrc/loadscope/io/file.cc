#include "loadscope/io/file.h"

#include <zlib.h>

#include <algorithm>
#include <cstring>

#include "loadscope/core/error.h"
#include "loadscope/io/faults.h"
#include "loadscope/io/storage.h"

namespace loadscope::io {

// Each of these looks the name's scheme up once and leaves the rest to its Storage: a local
// file, an object, or a node-local cache's copy of one (storage.h).

uint64_t file_size(const std::string& path) {
  return storage_for(path).stat(path).size;
}

uint64_t read_file(const std::string& path, std::string& out) {
  check_read_fault(path);
  return storage_for(path).read(path, 0, -1, out, "", false);
}

uint64_t read_range(const std::string& path, uint64_t offset, uint64_t length, std::string& out) {
  check_read_fault(path);
  check_member_size(length);
  return storage_for(path).read(path, offset, static_cast<int64_t>(length), out, "", false);
}

std::unique_ptr<Seekable> open_seekable(const std::string& path) {
  return storage_for(path).open_seekable(path);
}

bool is_remote(const std::string& path) {
  const Storage* storage = find_storage(path);
  return storage && storage->remote();
}

bool node_cached(const std::string& path) {
  const Storage* storage = find_storage(path);
  return storage && storage->node_cached();
}

namespace {

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
  std::unique_ptr<ByteStream> raw = storage_for(path).open_stream(path, chunk_bytes);
  if (!gunzip) return raw;
  return std::make_unique<GunzipStream>(std::move(raw));
}

}  // namespace loadscope::io
