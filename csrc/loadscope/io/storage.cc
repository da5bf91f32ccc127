#include "loadscope/io/storage.h"

#include <algorithm>
#include <cctype>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <shared_mutex>
#include <thread>

#include "loadscope/core/error.h"
#include "loadscope/io/cache.h"
#include "loadscope/io/file.h"
#include "loadscope/io/remote.h"

namespace loadscope::io {

namespace {

// s3://, http:// and https:// objects through libcurl (remote.h): retries, resumes, SigV4. With
// a profile (loadscope.Remote), under the schemes "s3+<tag>", ...: the names carry the tag, the
// requests go to the plain URL with the profile's endpoint, credentials and retries, and pins
// are kept here, per profile.
class RemoteStorage final : public Storage {
 public:
  RemoteStorage() = default;
  explicit RemoteStorage(std::shared_ptr<const remote::Profile> profile)
      : profile_(std::move(profile)) {}
  bool remote() const override { return true; }
  ObjectInfo stat(const std::string& name) override {
    remote::ProfileScope scope(profile_.get());
    const remote::ObjectInfo info = remote::stat(plain(name));
    return {info.size, info.etag};
  }
  uint64_t read(const std::string& name, uint64_t offset, int64_t length, std::string& out,
                const std::string& version, bool upto) override {
    remote::ProfileScope scope(profile_.get());
    return remote::get(plain(name), offset, length, out, version.empty() ? pinned(name) : version,
                       upto);
  }
  void pin(const std::string& name, const std::string& version) override {
    if (!profile_) return remote::pin_etag(name, version);
    std::lock_guard<std::mutex> lock(mutex_);
    pins_[name] = version;
  }
  void put(const std::string& name, const std::string& data) override {
    remote::ProfileScope scope(profile_.get());
    remote::put(plain(name), data);
  }

 private:
  // "s3+r1f2e3://b/k" -> "s3://b/k"
  std::string plain(const std::string& name) const {
    if (!profile_) return name;
    const auto plus = name.find('+'), colon = name.find("://");
    return plus < colon ? name.substr(0, plus) + name.substr(colon) : name;
  }
  std::string pinned(const std::string& name) {
    if (!profile_) return "";  // remote::get consults the process's pins itself
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = pins_.find(name);
    return it == pins_.end() ? "" : it->second;
  }

  std::shared_ptr<const remote::Profile> profile_;
  std::mutex mutex_;
  std::map<std::string, std::string> pins_;
};

struct Registry {
  std::shared_mutex mutex;
  std::map<std::string, std::shared_ptr<Storage>> by_scheme;
};

// The built-in schemes (a name without one is a local path: local_storage()). A new one: its
// Storage, and a line here. Never destroyed: threads of loaders still alive at exit may read
// through it. Objects are read through the process's node-local cache, if it has one.
Registry& registry() {
  static Registry* r = [] {
    auto* out = new Registry;
    const auto objects = cache::cached(std::make_shared<RemoteStorage>(), std::nullopt);
    out->by_scheme = {{"s3", objects}, {"http", objects}, {"https", objects}};
    return out;
  }();
  return *r;
}

}  // namespace

bool has_scheme(const char* p, size_t n) {
  // RFC 3986: ALPHA *( ALPHA / DIGIT / "+" / "-" / "." ) then "://" (a path never starts so).
  if (n == 0 || !std::isalpha(static_cast<unsigned char>(p[0]))) return false;
  for (size_t i = 1; i + 2 < n; ++i) {
    const unsigned char c = static_cast<unsigned char>(p[i]);
    if (c == ':') return p[i + 1] == '/' && p[i + 2] == '/';
    if (!std::isalnum(c) && c != '+' && c != '-' && c != '.') return false;
  }
  return false;
}

std::string scheme_of(const std::string& name) {
  if (!has_scheme(name.data(), name.size())) return "";
  return name.substr(0, name.find(':'));  // case-sensitive, as the remote client's
}

Storage* find_storage(const std::string& name) {
  static Storage* const local = local_storage().get();
  if (!has_scheme(name.data(), name.size())) return local;  // no lock on the common path
  Registry& r = registry();
  std::shared_lock<std::shared_mutex> lock(r.mutex);
  auto it = r.by_scheme.find(scheme_of(name));
  return it == r.by_scheme.end() ? nullptr : it->second.get();
}

std::string no_storage(const std::string& name) {
  std::string known;
  for (const auto& s : storage_schemes()) known += (known.empty() ? "" : ", ") + s + "://";
  return "no storage for " + scheme_of(name) + ":// names (there are: " + known +
         " and local paths; a new scheme is registered in io/storage.cc)";
}

Storage& storage_for(const std::string& name) {
  if (Storage* s = find_storage(name)) return *s;
  throw ReadFailure(no_storage(name));
}

std::vector<std::string> storage_schemes() {
  Registry& r = registry();
  std::shared_lock<std::shared_mutex> lock(r.mutex);
  std::vector<std::string> out;
  for (const auto& [scheme, storage] : r.by_scheme) {
    if (scheme.find('+') == std::string::npos) out.push_back(scheme);  // not a profile's
  }
  return out;
}

void register_storage(const std::string& scheme, std::shared_ptr<Storage> storage) {
  const std::string probe = scheme + "://x";
  if (!has_scheme(probe.data(), probe.size())) {
    throw ConfigError("register_storage: '" + scheme + "' is not a scheme one may register");
  }
  Registry& r = registry();
  std::unique_lock<std::shared_mutex> lock(r.mutex);
  r.by_scheme[scheme] = std::move(storage);
}

void register_remote_profile(const std::string& tag, std::shared_ptr<const remote::Profile> profile,
                             const cache::Settings* cache) {
  const auto storage = cache::cached(std::make_shared<RemoteStorage>(std::move(profile)),
                                     cache ? std::optional<cache::Settings>(*cache) : std::nullopt);
  Registry& r = registry();
  std::unique_lock<std::shared_mutex> lock(r.mutex);
  for (const char* scheme : {"s3", "http", "https"}) {
    // Kept once made: a loader may be reading through it (the tag is a hash of the settings,
    // so the same tag is the same settings).
    r.by_scheme.emplace(std::string(scheme) + "+" + tag, storage);
  }
}

void check_member_size(uint64_t bytes) {
  if (bytes > kMaxMemberBytes) {
    throw ReadFailure(
        std::to_string(bytes) + " bytes: over the " + std::to_string(kMaxMemberBytes >> 30) +
        " GiB a sample member may have (each is read whole into memory; videos named by path "
        "are read by FFmpeg as needed instead)");
  }
}

void Storage::put(const std::string& name, const std::string&) {
  throw ReadFailure(scheme_of(name) + "://: this storage cannot be written to");
}

namespace {

// Whole blocks of one version of an object, the last one kept: a clip costs the blocks its
// packets lie in, never the whole object.
class BlockSeekable final : public Seekable {
 public:
  BlockSeekable(Storage& storage, const std::string& name)
      : storage_(storage), name_(name), info_(storage.stat(name)) {}
  uint64_t size() const override { return info_.size; }
  const std::string& version() const override { return info_.version; }
  size_t read_at(uint64_t offset, uint8_t* dst, size_t n) override {
    if (offset >= info_.size) return 0;
    const uint64_t at = offset / kBlock * kBlock;
    if (at != block_at_) {
      block_at_ = UINT64_MAX;  // a failed read leaves no stale block behind
      storage_.read(name_, at, static_cast<int64_t>(std::min(kBlock, info_.size - at)), block_,
                    info_.version, false);
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
  Storage& storage_;
  std::string name_;
  ObjectInfo info_;
  uint64_t block_at_ = UINT64_MAX;
  std::string block_;
  uint64_t fetched_ = 0;
};

// Ranged reads of `chunk` bytes, one ahead of the reader on a thread of its own (which keeps
// its own connection alive). Every chunk is pinned to the version of the object when it was
// opened: a shard rewritten mid-stream is an error, not a mix of two versions.
class ChunkStream final : public ByteStream {
 public:
  ChunkStream(Storage& storage, const std::string& name, size_t chunk)
      : storage_(storage), name_(name), chunk_(chunk), info_(storage.stat(name)) {
    fetcher_ = std::thread([this] { fetch_all(); });
  }
  ~ChunkStream() override {
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
    for (uint64_t offset = 0; offset < info_.size; offset += chunk_) {
      {
        std::unique_lock<std::mutex> lock(mutex_);
        cv_.wait(lock, [this] { return ready_.size() < 1 || stop_; });  // one chunk ahead
        if (stop_) return;
      }
      std::string bytes;
      try {
        storage_.read(name_, offset,
                      static_cast<int64_t>(std::min<uint64_t>(chunk_, info_.size - offset)), bytes,
                      info_.version, false);
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

  Storage& storage_;
  std::string name_;
  size_t chunk_;
  ObjectInfo info_;
  std::string current_;
  size_t at_ = 0;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::string> ready_;
  bool done_ = false, stop_ = false;
  std::exception_ptr error_;
  std::thread fetcher_;
};

}  // namespace

std::unique_ptr<Seekable> Storage::open_seekable(const std::string& name) {
  return std::make_unique<BlockSeekable>(*this, name);
}

std::unique_ptr<ByteStream> Storage::open_stream(const std::string& name, size_t chunk) {
  return std::make_unique<ChunkStream>(*this, name, chunk);
}

}  // namespace loadscope::io
