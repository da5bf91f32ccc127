#include "loadscope/io/file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "loadscope/core/error.h"
#include "loadscope/io/faults.h"

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

}  // namespace

void check_member_size(uint64_t bytes) {
  if (bytes > kMaxMemberBytes) {
    throw ReadFailure(std::to_string(bytes) + " bytes: over the " + std::to_string(kMaxMemberBytes >> 30) +
                      " GiB a sample member may have (each is read whole into memory; videos named by path "
                      "are read by FFmpeg as needed instead)");
  }
}

void check_regular_file(const std::string& path) {
  struct stat st {};
  Fd f{open_regular(path, st)};
}

uint64_t read_file(const std::string& path, std::string& out) {
  check_read_fault(path);
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
  struct stat st {};
  Fd f{open_regular(path, st)};
  out.resize(static_cast<size_t>(length));
  size_t done = 0;
  while (done < out.size()) {
    ssize_t n = ::pread(f.fd, out.data() + done, out.size() - done, static_cast<off_t>(offset + done));
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

}  // namespace loadscope::io
