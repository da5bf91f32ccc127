#include "loadscope/io/cache.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "loadscope/core/error.h"
#include "loadscope/io/file.h"
#include "loadscope/io/remote.h"
#include "loadscope/io/storage.h"

namespace loadscope::io::cache {

namespace {

std::mutex g_mutex;
std::unique_ptr<Settings> g_settings;
// "<dir>\n<url>" -> its file, verified by this process (two loaders may cache one object in
// two directories).
std::unordered_map<std::string, std::string> g_checked;
std::unordered_set<std::string> g_fetched;  // cache files this process fetched
std::atomic<uint64_t> g_hits{0}, g_misses{0}, g_evictions{0}, g_bytes{0};

Settings from_environment() {
  Settings s;
  if (const char* d = std::getenv("LOADSCOPE_CACHE_DIR")) s.dir = d;
  if (const char* l = std::getenv("LOADSCOPE_CACHE_LIMIT"); l && *l) {
    char* end = nullptr;
    s.limit = std::strtoull(l, &end, 10);
    if (*end != '\0')
      throw ConfigError(std::string("LOADSCOPE_CACHE_LIMIT=") + l +
                        ": expected bytes, a whole number");
  }
  return s;
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// "<hash>-<file name>": the hash keeps URLs apart, the name keeps the cache readable.
std::string file_for(const std::string& dir, const std::string& url) {
  std::string name = url.substr(url.find_last_of('/') + 1);
  name = name.substr(0, name.find('?'));
  for (char& c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != '_') c = '_';
  }
  if (name.size() > 64) name = name.substr(name.size() - 64);
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(fnv1a(url)));
  return dir + "/" + hex + "-" + name;
}

bool ends_with(const std::string& s, const char* suffix) {
  const size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

std::string read_small(const std::string& path) {
  std::ifstream f(path);
  std::string s;
  std::getline(f, s);
  return s;
}

struct LockFile {
  int fd = -1;
  explicit LockFile(const std::string& path, bool wait) {
    fd = ::open(path.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0644);
    if (fd < 0) throw ReadFailure("cache: cannot open " + path + ": " + std::strerror(errno));
    int rc;
    do {
      rc = ::flock(fd, wait ? LOCK_EX : LOCK_EX | LOCK_NB);
    } while (rc != 0 && errno == EINTR);
    if (rc != 0) {
      const int err = errno;
      ::close(fd);
      fd = -1;
      // Busy is an answer for a try; anything else (no locks on this file system) is an error:
      // fetching unlocked would let processes write over each other.
      if (!wait && err == EWOULDBLOCK) return;
      throw ReadFailure("cache: cannot lock " + path + ": " + std::strerror(err) +
                        " (cache_dir must be on a local file system with flock)");
    }
  }
  ~LockFile() {
    if (fd >= 0) ::close(fd);  // releases the flock
  }
  bool held() const { return fd >= 0; }
};

// Evicts least recently used objects (not `keep`, not being fetched) until `need` more bytes fit.
void make_room(const Settings& s, uint64_t need, const std::string& keep) {
  if (s.limit == 0) return;
  struct Entry {
    int64_t mtime;
    uint64_t size;
    std::string path;
  };
  std::vector<Entry> entries;
  uint64_t total = 0;
  if (DIR* d = ::opendir(s.dir.c_str())) {
    while (dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (name[0] == '.' || ends_with(name, ".etag") || ends_with(name, ".lock") ||
          name.find(".partial") != std::string::npos)
        continue;
      struct stat st {};
      const std::string path = s.dir + "/" + name;
      if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
      entries.push_back(
          {static_cast<int64_t>(st.st_mtime), static_cast<uint64_t>(st.st_size), path});
      total += static_cast<uint64_t>(st.st_size);
    }
    ::closedir(d);
  }
  if (total + need <= s.limit) return;
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return a.mtime < b.mtime; });
  for (const Entry& e : entries) {
    if (total + need <= s.limit) return;
    if (e.path == keep) continue;
    LockFile busy(e.path + ".lock", /*wait=*/false);
    if (!busy.held()) continue;  // being fetched right now
    if (::unlink(e.path.c_str()) == 0) {
      ::unlink((e.path + ".etag").c_str());
      total -= std::min(total, e.size);
      g_evictions.fetch_add(1, std::memory_order_relaxed);
    }
  }
  if (total + need > s.limit) {
    throw ReadFailure(
        "cache: " + std::to_string(need) + " more bytes do not fit in cache_limit " +
        std::to_string(s.limit) + " (" + s.dir + " holds " + std::to_string(total) +
        " bytes that are being fetched): raise cache_limit above what the loaders of this node "
        "read at once (the open shards of every rank)");
  }
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
  out.flush();
  if (!out) throw ReadFailure("cache: cannot write " + path + ": " + std::strerror(errno));
}

// Removes a temporary file unless it was renamed into place.
struct TempFile {
  std::string path;
  bool kept = false;
  ~TempFile() {
    if (!kept) ::unlink(path.c_str());
  }
};

void fetch(Storage& from, const std::string& url, const ObjectInfo& info, const std::string& path) {
  // Unique per process and thread; another process waits on the lock instead.
  TempFile tmp{path + ".partial." + std::to_string(::getpid()) + "." +
               std::to_string(std::hash<std::thread::id>()(std::this_thread::get_id()) & 0xffffff)};
  {
    std::ofstream out(tmp.path, std::ios::binary | std::ios::trunc);
    if (!out) throw ReadFailure("cache: cannot write " + tmp.path + ": " + std::strerror(errno));
    std::string chunk;
    constexpr uint64_t kChunk = 8u << 20;
    for (uint64_t at = 0; at < info.size; at += kChunk) {
      from.read(url, at, static_cast<int64_t>(std::min(kChunk, info.size - at)), chunk,
                info.version, false);
      out.write(chunk.data(), static_cast<std::streamsize>(chunk.size()));
    }
    out.flush();
    if (!out)
      throw ReadFailure("cache: writing " + tmp.path + " failed: " + std::strerror(errno) +
                        " (disk full?)");
  }
  // The data first, then its ETag: a crash between the two leaves an ETag that does not match,
  // so the object is fetched again; the other order could pair old bytes with a new ETag.
  if (::rename(tmp.path.c_str(), path.c_str()) != 0) {
    throw ReadFailure("cache: cannot rename into " + path + ": " + std::strerror(errno));
  }
  tmp.kept = true;
  TempFile etag{path + ".etag.partial"};
  write_file(etag.path, info.version + "\n");
  if (::rename(etag.path.c_str(), (path + ".etag").c_str()) != 0) {
    throw ReadFailure("cache: cannot rename into " + path + ".etag: " + std::strerror(errno));
  }
  etag.kept = true;
}

}  // namespace

void configure(const Settings& s) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_settings = std::make_unique<Settings>(s);
  g_checked.clear();
}

Settings settings() {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (!g_settings) g_settings = std::make_unique<Settings>(from_environment());
  return *g_settings;
}

std::string cached_copy(Storage& from, const std::string& url, const Settings& s) {
  if (s.dir.empty()) return "";
  const std::string key = s.dir + '\n' + url;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    auto it = g_checked.find(key);  // checked against the server by this process already
    if (it != g_checked.end()) return ::access(it->second.c_str(), R_OK) == 0 ? it->second : "";
  }
  const std::string path = file_for(s.dir, url);
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return "";  // not there: no request at all
  const ObjectInfo info = from.stat(url);
  const bool current =
      static_cast<uint64_t>(st.st_size) == info.size && read_small(path + ".etag") == info.version;
  return current ? path : "";
}

std::string local_copy(Storage& from, const std::string& url, const Settings& s) {
  const std::string key = s.dir + '\n' + url;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    auto it = g_checked.find(key);
    if (it != g_checked.end()) {
      struct stat st {};
      if (::stat(it->second.c_str(), &st) == 0) {
        g_hits.fetch_add(1, std::memory_order_relaxed);
        // Used now: kept last in the eviction order (mtime, refreshed at most once a second).
        if (::time(nullptr) > st.st_mtime) ::utimensat(AT_FDCWD, it->second.c_str(), nullptr, 0);
        return it->second;
      }
      g_checked.erase(it);  // evicted by another process: fetched again below
    }
  }
  ::mkdir(s.dir.c_str(), 0755);
  const std::string path = file_for(s.dir, url);
  const ObjectInfo info = from.stat(url);
  if (s.limit > 0 && info.size > s.limit) {
    throw ReadFailure("cache: " + remote::redact(url) + " has " + std::to_string(info.size) +
                      " bytes, more than cache_limit " + std::to_string(s.limit));
  }
  LockFile lock(path + ".lock", /*wait=*/true);  // another process fetching it: wait for that
  struct stat st {};
  const bool exists = ::stat(path.c_str(), &st) == 0;
  const bool present = exists && static_cast<uint64_t>(st.st_size) == info.size &&
                       read_small(path + ".etag") == info.version;
  if (present) {
    g_hits.fetch_add(1, std::memory_order_relaxed);
  } else {
    bool again = false;
    {
      std::lock_guard<std::mutex> guard(g_mutex);
      again = g_fetched.count(path) > 0;
    }
    if (again && !exists &&
        s.limit > 0) {  // (an object that changed on the server is just fetched again)
      // Fetched by this process, evicted since, needed again: every pass over the data would
      // fetch everything again. Say so instead of running at network speed with a full disk.
      throw ReadFailure("cache: " + remote::redact(url) +
                        " was fetched before and evicted since: cache_limit " +
                        std::to_string(s.limit) +
                        " bytes is below what one pass over the data needs; raise it, or drop "
                        "cache_dir to stream");
    }
    make_room(s, info.size, path);
    fetch(from, url, info, path);
    g_misses.fetch_add(1, std::memory_order_relaxed);
    g_bytes.fetch_add(info.size, std::memory_order_relaxed);
    std::lock_guard<std::mutex> guard(g_mutex);
    g_fetched.insert(path);
  }
  ::utimensat(AT_FDCWD, path.c_str(), nullptr, 0);  // used now: last in the eviction order
  std::lock_guard<std::mutex> guard(g_mutex);
  g_checked[key] = path;
  return path;
}

namespace {

// A remote storage read through the cache: an object is fetched whole once (for the node: the
// processes share the directory), then every read, seek and stream is a read of the copy.
class CachedStorage final : public Storage {
 public:
  CachedStorage(std::shared_ptr<Storage> from, std::optional<Settings> own)
      : from_(std::move(from)), own_(std::move(own)) {}
  bool remote() const override { return from_->remote(); }
  bool node_cached() const override { return !settings_now().dir.empty(); }
  ObjectInfo stat(const std::string& name) override { return from_->stat(name); }
  uint64_t read(const std::string& name, uint64_t offset, int64_t length, std::string& out,
                const std::string& version, bool upto) override {
    const Settings s = settings_now();
    // A read of one given version is the server's to answer (a copy is of the current one).
    if (s.dir.empty() || !version.empty()) {
      return from_->read(name, offset, length, out, version, upto);
    }
    return through_copy(name, s, [&](const std::string& copy) {
      return local_storage()->read(copy, offset, length, out, "", upto);
    });
  }
  uint64_t peek(const std::string& name, uint64_t offset, int64_t length,
                std::string& out) override {
    const Settings s = settings_now();
    const std::string copy = s.dir.empty() ? "" : cached_copy(*from_, name, s);
    if (copy.empty()) return from_->read(name, offset, length, out, "", false);
    return local_storage()->read(copy, offset, length, out, "", false);
  }
  std::unique_ptr<Seekable> open_seekable(const std::string& name) override {
    const Settings s = settings_now();
    if (s.dir.empty()) return from_->open_seekable(name);
    return through_copy(name, s, [](const std::string& copy) {
      return local_storage()->open_seekable(copy);  // held open: an eviction cannot take it now
    });
  }
  std::unique_ptr<ByteStream> open_stream(const std::string& name, size_t chunk) override {
    const Settings s = settings_now();
    if (s.dir.empty()) return from_->open_stream(name, chunk);
    return through_copy(name, s, [chunk](const std::string& copy) {
      return local_storage()->open_stream(copy, chunk);
    });
  }
  void pin(const std::string& name, const std::string& version) override {
    from_->pin(name, version);
  }
  void put(const std::string& name, const std::string& data) override { from_->put(name, data); }

 private:
  Settings settings_now() const { return own_ ? *own_ : settings(); }
  // f(the copy's path); once more with a fresh copy when another process evicted it just now.
  template <class F>
  std::invoke_result_t<F, const std::string&> through_copy(const std::string& name,
                                                           const Settings& s, F&& f) {
    const std::string copy = local_copy(*from_, name, s);
    try {
      return f(copy);
    } catch (const ReadFailure&) {
      if (::access(copy.c_str(), F_OK) == 0) throw;
      return f(local_copy(*from_, name, s));
    }
  }

  std::shared_ptr<Storage> from_;
  std::optional<Settings> own_;
};

}  // namespace

std::shared_ptr<Storage> cached(std::shared_ptr<Storage> from, std::optional<Settings> own) {
  return std::make_shared<CachedStorage>(std::move(from), std::move(own));
}

Stats stats() {
  return Stats{g_hits.load(), g_misses.load(), g_evictions.load(), g_bytes.load()};
}

void reset_stats() {
  for (auto* a : {&g_hits, &g_misses, &g_evictions, &g_bytes}) a->store(0);
}

}  // namespace loadscope::io::cache
