#include "loadscope/io/manifest_cache.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

#include "loadscope/core/error.h"
#include "loadscope/io/manifest_rows.h"

namespace loadscope::io {

using manifest_rows::BadRow;
using manifest_rows::canonical_int;
using manifest_rows::kMaxNotes;

std::shared_ptr<Mapping> map_file(const std::string& path, bool must_exist, bool populate) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (!must_exist && errno == ENOENT) return nullptr;
    throw ReadFailure(path + ": " + std::strerror(errno));
  }
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw ReadFailure(path + ": not a regular file");
  }
  auto m = std::make_shared<Mapping>();
  m->size = static_cast<size_t>(st.st_size);
  if (m->size > 0) {
    m->data = mmap(nullptr, m->size, PROT_READ, MAP_PRIVATE | (populate ? MAP_POPULATE : 0), fd, 0);
    if (m->data == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      throw ReadFailure(path + ": mmap: " + std::strerror(err));
    }
  }
  ::close(fd);
  return m;
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

namespace {

constexpr char kMagic[8] = {'L', 'S', 'T', 'A', 'B', 'L', 'E', '1'};

// Writes the cache file's sections straight from the table's arrays (no copy of the table).
class Writer {
 public:
  explicit Writer(int fd) : fd_(fd) {}
  void u64(uint64_t v) { raw(&v, 8); }
  void str(const std::string& s) { bytes(s.data(), s.size()); }
  template <typename T>
  void array(View<T> v) {
    bytes(v.data, v.size * sizeof(T));
  }
  void bytes(const void* p, size_t n) {
    u64(n);
    raw(p, n);
    static const char zeros[8] = {};
    raw(zeros, (8 - n % 8) % 8);
  }

 private:
  void raw(const void* p, size_t n) {
    const char* c = static_cast<const char*>(p);
    while (n > 0) {
      const ssize_t k = ::write(fd_, c, std::min<size_t>(n, size_t{1} << 30));
      if (k < 0 && errno == EINTR) continue;
      if (k <= 0) throw ReadFailure(std::string("write: ") + std::strerror(errno));
      c += k;
      n -= static_cast<size_t>(k);
    }
  }
  int fd_;
};

class Reader {
 public:
  Reader(const char* p, size_t n) : p_(p), end_(p + n) {}
  uint64_t u64() {
    need(8);
    uint64_t v;
    std::memcpy(&v, p_, 8);
    p_ += 8;
    return v;
  }
  std::string str() {
    const auto v = array<char>();
    return std::string(v.data, v.size);
  }
  template <typename T>
  View<T> array() {
    const uint64_t n = u64();
    if (n % sizeof(T) || n > (uint64_t{1} << 62)) throw BadRow{"bad array"};
    need(n + (8 - n % 8) % 8);  // the padding too, before the pointer moves past it
    View<T> v(reinterpret_cast<const T*>(p_), n / sizeof(T));
    p_ += n + (8 - n % 8) % 8;
    return v;
  }
  bool done() const { return p_ == end_; }

 private:
  void need(uint64_t n) {
    if (static_cast<uint64_t>(end_ - p_) < n) throw BadRow{"truncated"};
  }
  const char* p_;
  const char* end_;
};

bool monotonic(const Strings& s) {
  uint64_t prev = 0;
  for (size_t i = 0; i < s.ends.size; ++i) {
    if (s.ends[i] < prev) return false;
    prev = s.ends[i];
  }
  return prev == s.text.size;
}

void serialize(Writer& w, const Manifest& m, const std::string& identity) {
  const SampleTable& t = *m.table;
  w.u64(0);  // replaced by the magic once everything else is written
  w.str(identity);
  w.u64(static_cast<uint64_t>(m.skipped));
  w.u64(m.notes.size());
  for (const auto& n : m.notes) w.str(n);
  w.u64(t.prefixes.size());
  for (const auto& p : t.prefixes) w.str(p);
  w.u64(static_cast<uint64_t>(t.join));
  w.array(t.prefix);
  w.array(t.paths.ends);
  w.array(t.paths.text);
  w.array(t.extras.rows);
  w.array(t.extras.names.ends);
  w.array(t.extras.names.text);
  w.u64(t.columns.size());
  for (const auto& c : t.columns) {
    w.str(c.member);
    w.u64(c.is_int);
    w.array(c.ints);
    w.array(c.strings.ends);
    w.array(c.strings.text);
    w.array(c.absent);
  }
}

}  // namespace

bool read_cache(const std::shared_ptr<Mapping>& map, const std::string& identity, Manifest& out) {
  if (!map || map->size < 8 || std::memcmp(map->data, kMagic, 8) != 0) return false;
  try {
    Reader r(static_cast<const char*>(map->data) + 8, map->size - 8);
    if (r.str() != identity) return false;
    auto t = std::make_shared<SampleTable>();
    out.skipped = static_cast<int64_t>(r.u64());
    const uint64_t notes = r.u64();
    if (notes > kMaxNotes) return false;
    out.notes.clear();
    for (uint64_t i = 0; i < notes; ++i) out.notes.push_back(r.str());
    const uint64_t prefixes = r.u64();
    if (prefixes == 0 || prefixes > UINT32_MAX) return false;
    for (uint64_t i = 0; i < prefixes; ++i) t->prefixes.push_back(r.str());
    t->join = r.u64() ? SampleTable::Join::kUrl : SampleTable::Join::kLocal;
    t->prefix = r.array<uint32_t>();
    t->paths.ends = r.array<uint64_t>();
    t->paths.text = r.array<char>();
    t->extras.rows = r.array<uint32_t>();
    t->extras.names.ends = r.array<uint64_t>();
    t->extras.names.text = r.array<char>();
    const size_t rows = t->paths.ends.size;
    if (!monotonic(t->paths) || !monotonic(t->extras.names) || rows == 0) return false;
    if (!t->prefix.empty()) return false;  // a manifest has one prefix
    if (t->extras.rows.size != t->extras.names.ends.size || !t->extras.rows.empty()) return false;
    const uint64_t cols = r.u64();
    if (cols > (uint64_t{1} << 20)) return false;
    for (uint64_t i = 0; i < cols; ++i) {
      Column c;
      c.member = r.str();
      c.is_int = r.u64() != 0;
      c.ints = r.array<int64_t>();
      c.strings.ends = r.array<uint64_t>();
      c.strings.text = r.array<char>();
      c.absent = r.array<uint64_t>();
      if (c.is_int ? c.ints.size != rows : (c.strings.ends.size != rows || !monotonic(c.strings)))
        return false;
      if (!c.absent.empty() && c.absent.size != (rows + 63) / 64) return false;
      t->columns.push_back(std::move(c));
    }
    if (!r.done()) return false;
    t->storage = map;
    out.table = t;
    return true;
  } catch (const BadRow&) {
    return false;
  }
}

void write_cache(const std::string& path, const Manifest& m, const std::string& identity) {
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0) std::strcpy(host, "host");
  for (char* c = host; *c; ++c) {
    if (*c == '.' || *c == '/') *c = '_';
  }
  const size_t slash = path.find_last_of('/');
  const std::string dir = path.substr(0, slash);
  const std::string ours = path.substr(slash + 1) + ".tmp." + host + ".";
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      const std::string name = e->d_name;
      if (name.compare(0, ours.size(), ours) != 0) continue;
      const long pid = std::strtol(name.c_str() + ours.size(), nullptr, 10);
      if (pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH)
        ::unlink((dir + "/" + name).c_str());
    }
    closedir(d);
  }
  static std::atomic<uint64_t> counter{0};
  const std::string tmp =
      dir + "/" + ours + std::to_string(getpid()) + "." + std::to_string(counter++);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) throw ReadFailure(tmp + ": " + std::strerror(errno));
  try {
    Writer w(fd);
    serialize(w, m, identity);
    // The magic goes in last: a file cut short by a crash never looks complete.
    if (::pwrite(fd, kMagic, 8, 0) != 8)
      throw ReadFailure(std::string("write: ") + std::strerror(errno));
  } catch (const ReadFailure& e) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw ReadFailure(tmp + ": " + e.what());
  }
  ::close(fd);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw ReadFailure(path + ": " + std::strerror(err));
  }
}

namespace {

// Cache files being written in the background. The process waits for them when it exits (a
// short script, a benchmark's probe or a crash-looping job would otherwise never leave one);
// a forked child, which has none of its parent's threads, does not.
class BackgroundWrites {
 public:
  // Runs fn in a thread; false when no thread could be started (the caller writes itself).
  template <typename F>
  bool start(F&& fn) {
    std::lock_guard<std::mutex> lock(mu_);
    reap();
    auto done = std::make_shared<std::atomic<bool>>(false);
    try {
      writers_.push_back(Writer{std::thread([fn = std::forward<F>(fn), done] {
                                  fn();
                                  done->store(true);
                                }),
                                getpid(), done});
    } catch (const std::system_error&) {
      return false;
    }
    return true;
  }
  ~BackgroundWrites() {
    for (auto& w : writers_) finish(w, true);
  }

 private:
  struct Writer {
    std::thread thread;
    pid_t pid;  // the process that started it: a forked child has none of its threads
    std::shared_ptr<std::atomic<bool>> done;
  };
  static void finish(Writer& w, bool wait) {
    if (!w.thread.joinable()) return;
    if (w.pid != getpid()) {
      w.thread.detach();
    } else if (wait || w.done->load()) {
      w.thread.join();
    }
  }
  void reap() {  // joins finished writers, so that a long job does not collect them
    for (auto& w : writers_) finish(w, false);
    writers_.erase(std::remove_if(writers_.begin(), writers_.end(),
                                  [](const Writer& w) { return !w.thread.joinable(); }),
                   writers_.end());
  }
  std::mutex mu_;
  std::vector<Writer> writers_;
};

BackgroundWrites& background_writes() {
  static BackgroundWrites writes;
  return writes;
}

}  // namespace

bool write_cache_in_background(const std::string& path, const Manifest& m,
                               const std::string& identity) {
  // The thread holds the table, so the arrays outlive the caller's.
  return background_writes().start([m, path, identity] {
    try {
      write_cache(path, m, identity);
    } catch (const ReadFailure& e) {
      std::fprintf(stderr, "loadscope: could not write the manifest cache: %s\n", e.what());
    }
  });
}

}  // namespace loadscope::io
