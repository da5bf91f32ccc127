// The storage seam (io/storage.h): a scheme registered by a test is read by every reader above
// io/ (whole files, ranges, a streamed gzip shard, an indexed shard, a video FFmpeg seeks in)
// without any of them knowing it, and gives the bytes the same data gives from a local file.

#include <stdlib.h>

#include <map>
#include <mutex>

#include "helpers.h"
#include "loadscope/core/error.h"
#include "loadscope/decode/video/video_decoder.h"
#include "loadscope/io/cache.h"
#include "loadscope/io/file.h"
#include "loadscope/io/storage.h"
#include "loadscope/io/tar.h"
#include "loadscope/io/tar_index.h"

using namespace loadscope;
using namespace testing;

namespace {

// Objects in memory, versioned by a counter. Not remote (nothing goes over a network): every
// reader must still read it through the Storage, not around it with POSIX calls on the name.
class MemStorage final : public io::Storage {
 public:
  void set(const std::string& name, std::string data) {
    std::lock_guard<std::mutex> lock(mutex_);
    objects_[name] = {std::move(data), std::to_string(++versions_)};
  }
  bool remote() const override { return false; }
  io::ObjectInfo stat(const std::string& name) override {
    std::lock_guard<std::mutex> lock(mutex_);
    const Object& o = find(name);
    return {o.data.size(), o.version};
  }
  uint64_t read(const std::string& name, uint64_t offset, int64_t length, std::string& out,
                const std::string& version, bool upto) override {
    std::lock_guard<std::mutex> lock(mutex_);
    const Object& o = find(name);
    const std::string& want = !version.empty() ? version : pinned_[name];
    if (!want.empty() && want != o.version) throw ReadFailure(name + ": changed");
    const uint64_t end = length < 0 ? o.data.size() : offset + static_cast<uint64_t>(length);
    if (!upto && end > o.data.size()) throw ReadFailure(name + ": short");
    out = offset < o.data.size() ? o.data.substr(offset, end - offset) : "";
    ++reads;
    return out.size();
  }
  void pin(const std::string& name, const std::string& version) override {
    std::lock_guard<std::mutex> lock(mutex_);
    pinned_[name] = version;
  }
  int reads = 0;

 private:
  struct Object {
    std::string data, version;
  };
  const Object& find(const std::string& name) {
    auto it = objects_.find(name);
    if (it == objects_.end()) throw ReadFailure(name + ": no such object");
    return it->second;
  }
  std::mutex mutex_;
  std::map<std::string, Object> objects_;
  std::map<std::string, std::string> pinned_;
  int versions_ = 0;
};

std::shared_ptr<MemStorage> mem() {
  static const auto storage = [] {
    auto s = std::make_shared<MemStorage>();
    io::register_storage("mem", s);
    return s;
  }();
  return storage;
}

}  // namespace

TEST_CASE("a registered scheme is read through file.h like a local file", "[storage]") {
  REQUIRE_SHARED_DATA();
  const std::string local = real("webdataset/testdata/mpdata.tar");
  const std::string data = read_all(local);
  mem()->set("mem://b/mpdata.tar", data);
  CHECK(!io::is_remote("mem://b/mpdata.tar"));
  CHECK(!io::is_remote(local));
  CHECK(io::scheme_of("mem://b/x") == "mem");
  CHECK(io::scheme_of("/tmp/a://b") == "");  // a path is never a scheme
  CHECK(io::file_size("mem://b/mpdata.tar") == data.size());
  std::string out;
  io::read_file("mem://b/mpdata.tar", out);
  CHECK(out == data);
  io::read_range("mem://b/mpdata.tar", 512, 100, out);
  CHECK(out == data.substr(512, 100));
  CHECK_THROWS_WITH(io::read_file("nope://b/x", out),
                    Catch::Contains("no storage for nope:// names (there are: ") &&
                        Catch::Contains("mem://") && Catch::Contains("s3://"));
}

TEST_CASE("tar shards stream and index through a registered scheme", "[storage]") {
  REQUIRE_SHARED_DATA();
  for (const char* rel : {"webdataset/testdata/mpdata.tar", "webdataset/testdata/sample.tgz"}) {
    INFO(rel);
    const std::string name = std::string("mem://b/") + rel;
    mem()->set(name, read_all(real(rel)));
    io::TarReader a(real(rel)), b(name);
    io::TarEntry ea, eb;
    int n = 0;
    while (a.next(ea)) {
      REQUIRE(b.next(eb));
      CHECK(ea.name == eb.name);
      CHECK(ea.data == eb.data);
      ++n;
    }
    CHECK(!b.next(eb));
    CHECK(n > 0);
  }
  const std::string name = "mem://b/webdataset/testdata/mpdata.tar";
  const io::ShardIndex remote = io::index_shard(name);
  const io::ShardIndex local = io::index_shard(real("webdataset/testdata/mpdata.tar"));
  CHECK(remote.samples.size() == 100);
  CHECK(remote.fingerprint == local.fingerprint);
  CHECK(remote.tar_bytes == local.tar_bytes);
  // Indexing pinned the version: the object rewritten afterwards is an error, not a mix.
  mem()->set(name, read_all(real("webdataset/testdata/mpdata.tar")));
  std::string out;
  CHECK_THROWS_WITH(io::read_range(name, 512, 10, out), Catch::Contains("changed"));
}

TEST_CASE("a video FFmpeg seeks in is read through a registered scheme", "[storage]") {
  REQUIRE_SHARED_DATA();
  const std::string rel = "torchcodec/test/resources/nasa_13013.mp4";
  mem()->set("mem://b/nasa.mp4", read_all(real(rel)));
  const int before = mem()->reads;
  decode::VideoDecoder a, b;
  a.open_file(real(rel), -1, true, 1);
  b.open_file("mem://b/nasa.mp4", -1, true, 1);
  REQUIRE(a.pts() == b.pts());
  decode::FrameOutput out;
  out.x1 = out.out_w = 64;
  out.y1 = out.out_h = 48;
  out.chw = false;
  std::vector<uint8_t> pa(64 * 48 * 3), pb(pa.size());
  a.decode({{a.pts()[250], pa.data(), &out}});
  b.decode({{b.pts()[250], pb.data(), &out}});
  CHECK(pa == pb);
  CHECK(mem()->reads > before);  // the decoder asked the storage, in blocks
}

TEST_CASE("the node cache is a storage wrapping another: one fetch, then reads of its copy",
          "[storage][cache]") {
  REQUIRE_SHARED_DATA();
  const std::string data = read_all(real("webdataset/testdata/mpdata.tar"));
  char tmpl[] = "/tmp/loadscope-cache-XXXXXX";
  REQUIRE(::mkdtemp(tmpl) != nullptr);
  const std::string dir = tmpl;
  io::register_storage("memc", io::cache::cached(mem(), io::cache::Settings{dir, 0}));
  const std::string name = "memc://b/mpdata.tar";
  mem()->set(name, data);
  CHECK(io::node_cached(name));
  CHECK(!io::node_cached("mem://b/mpdata.tar"));
  CHECK(!io::node_cached(real("webdataset/testdata/mpdata.tar")));

  // A fingerprint peeks: two ranges from the storage under it, nothing fetched whole.
  int before = mem()->reads;
  const uint32_t fingerprint = io::shard_fingerprint(name);
  CHECK(mem()->reads == before + 2);
  CHECK(run("ls " + quote(dir)).empty());

  // The first read fetches the object into the directory; every read after is of the copy.
  std::string out;
  io::read_file(name, out);
  CHECK(out == data);
  CHECK(!run("ls " + quote(dir)).empty());
  before = mem()->reads;
  io::read_range(name, 512, 100, out);
  CHECK(out == data.substr(512, 100));
  const io::ShardIndex indexed = io::index_shard(name);
  CHECK(indexed.samples.size() == 100);
  CHECK(indexed.fingerprint == fingerprint);
  auto seekable = io::open_seekable(name);
  std::vector<uint8_t> head(512);
  CHECK(seekable->read_at(0, head.data(), head.size()) == head.size());
  CHECK(std::string(head.begin(), head.end()) == data.substr(0, 512));
  CHECK(mem()->reads == before);  // none of these asked the storage under the cache

  // A copy removed (another process evicted it) is fetched again, not an error.
  run("rm -f " + quote(dir) + "/*mpdata.tar");
  io::read_file(name, out);
  CHECK(out == data);
  CHECK(mem()->reads > before);
  run("rm -rf " + quote(dir));
}
