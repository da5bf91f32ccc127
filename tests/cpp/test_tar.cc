// The tar reader and the WebDataset source against archives written by GNU tar and the
// WebDataset project's own test shards.
#include <sys/resource.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <map>

#include "helpers.h"
#include "loadscope/core/error.h"
#include "loadscope/io/file.h"
#include "loadscope/io/sources.h"
#include "loadscope/io/tar.h"
#include "loadscope/io/tar_index.h"

using namespace loadscope;
using namespace testing;
namespace fs = std::filesystem;

namespace {

struct TempDir {
  fs::path path;
  TempDir() {
    char tmpl[] = "/tmp/loadscope-test-XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() { fs::remove_all(path); }
  void write(const std::string& rel, const std::string& data) const {
    fs::create_directories((path / rel).parent_path());
    std::ofstream(path / rel, std::ios::binary) << data;
  }
};

std::map<std::string, std::string> read_tar(const std::string& path) {
  io::TarReader reader(path);
  io::TarEntry e;
  std::map<std::string, std::string> out;
  while (reader.next(e)) out[e.name] = e.data;
  return out;
}

std::vector<Sample> all_samples(io::TarSource& src, EpochOrder order = {}) {
  src.start_epoch(order);
  std::vector<Sample> out;
  Sample s;
  while (src.next(s)) out.push_back(s);
  return out;
}

}  // namespace

TEST_CASE("reads what GNU tar writes: ustar, long names, pax, gzip", "[tar]") {
  if (!have_tool("tar")) {
    WARN("skipped: tar not installed");
    return;
  }
  TempDir d;
  const std::string long_dir(120, 'd');
  std::string big(70000, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 31 + 7);
  d.write("in/a.txt", "hello\n");
  d.write("in/" + long_dir + "/b.bin", big);
  d.write("in/empty.cls", "");
  for (const char* fmt : {"gnu", "pax", "ustar"}) {
    for (bool gz : {false, true}) {
      INFO(fmt << (gz ? " gzip" : ""));
      if (std::string(fmt) == "ustar") {  // ustar cannot hold the 124-character path
        fs::remove_all(d.path / "in" / long_dir);
      }
      const std::string archive = (d.path / (std::string(fmt) + (gz ? ".tgz" : ".tar"))).string();
      int rc = 0;
      run("cd " + quote(d.path.string()) + " && tar --format=" + fmt + (gz ? " -czf " : " -cf ") +
              quote(archive) + " in",
          &rc);
      REQUIRE(rc == 0);
      auto members = read_tar(archive);
      CHECK(members["in/a.txt"] == "hello\n");
      CHECK(members.count("in/empty.cls") == 1);
      CHECK(members["in/empty.cls"].empty());
      if (std::string(fmt) != "ustar") CHECK(members["in/" + long_dir + "/b.bin"] == big);
      for (const auto& [name, _] : members) CHECK(name.back() != '/');  // no directories
    }
  }
}

TEST_CASE("truncated and corrupt archives raise ReadFailure", "[tar]") {
  if (!have_tool("tar")) return;
  TempDir d;
  d.write("in/x.jpg", std::string(5000, 'x'));
  d.write("in/y.jpg", std::string(5000, 'y'));
  int rc = 0;
  run("cd " + quote(d.path.string()) + " && tar -cf t.tar in", &rc);
  const std::string tar = read_all((d.path / "t.tar").string());
  d.write("cut.tar", tar.substr(0, 512 * 4));  // inside the first member's data
  CHECK_THROWS_WITH(read_tar((d.path / "cut.tar").string()), Catch::Contains("truncated"));
  std::string bad = tar;
  bad[5] ^= 0x55;  // a byte of the first header's name
  d.write("bad.tar", bad);
  CHECK_THROWS_WITH(read_tar((d.path / "bad.tar").string()), Catch::Contains("checksum"));
  CHECK_THROWS_AS(io::TarReader((d.path / "missing.tar").string()), ReadFailure);
}

TEST_CASE("WebDataset test shards group into samples as webdataset's tests say", "[tar][wds]") {
  REQUIRE_SHARED_DATA();
  // sample.tgz: 90 samples keyed 10..99, members cls and png; first cls == "0".
  io::TarSource src({real("webdataset/testdata/sample.tgz")}, 1);
  auto samples = all_samples(src);
  REQUIRE(samples.size() == 90);
  CHECK(samples[0].key == real("webdataset/testdata/sample.tgz") + ":10");
  REQUIRE(samples[0].find("cls") != nullptr);
  CHECK(samples[0].find("cls")->data == "0");
  REQUIRE(samples[0].find("png") != nullptr);
  CHECK(samples[0].find("png")->data.compare(0, 4, "\x89PNG") == 0);
  CHECK(src.bytes_read() > 0);
  // compressed.tar: 3 samples under a directory prefix, member "txt.gz".
  io::TarSource compressed({real("webdataset/testdata/compressed.tar")}, 1);
  auto c = all_samples(compressed);
  REQUIRE(c.size() == 3);
  for (const auto& s : c) {
    CHECK(s.find("txt.gz") != nullptr);
    CHECK(s.key.find(":compressed/") != std::string::npos);
  }
  // mpdata.tar: 100 samples with one "mp" member each.
  io::TarSource mp({real("webdataset/testdata/mpdata.tar")}, 1);
  CHECK(all_samples(mp).size() == 100);
}

TEST_CASE("shuffled shards: same samples, order from (seed, epoch)", "[tar][wds]") {
  REQUIRE_SHARED_DATA();
  const std::vector<std::string> shards = {real("webdataset/testdata/sample.tgz"),
                                           real("webdataset/testdata/mpdata.tar")};
  io::TarSource src(shards, 16);
  auto keys = [&](uint64_t seed, int64_t epoch) {
    std::vector<std::string> k;
    for (auto& s : all_samples(src, EpochOrder{seed, epoch, true})) k.push_back(s.key);
    return k;
  };
  auto plain = all_samples(src);
  std::vector<std::string> sorted_plain;
  for (auto& s : plain) sorted_plain.push_back(s.key);
  auto a = keys(1, 0), b = keys(1, 0), c = keys(1, 1), e = keys(2, 0);
  CHECK(a == b);
  CHECK(a != c);
  CHECK(a != e);
  CHECK(a != sorted_plain);
  std::sort(a.begin(), a.end());
  std::sort(sorted_plain.begin(), sorted_plain.end());
  CHECK(a == sorted_plain);
}

TEST_CASE("a bad shard is reported with its path and the next shard still loads", "[tar][wds]") {
  REQUIRE_SHARED_DATA();
  TempDir d;
  const std::string good = read_all(real("webdataset/testdata/mpdata.tar"));
  d.write("cut.tar", good.substr(0, 512 * 21 + 100));
  const std::string cut = (d.path / "cut.tar").string();
  io::TarSource src(
      {(d.path / "missing.tar").string(), cut, real("webdataset/testdata/mpdata.tar")}, 1);
  src.start_epoch({});
  std::vector<std::string> errors;
  int samples = 0;
  Sample s;
  while (true) {
    try {
      if (!src.next(s)) break;
      ++samples;
    } catch (const SampleError& e) {
      errors.push_back(e.key() + " | " + e.reason());
    }
  }
  REQUIRE(errors.size() == 2);
  CHECK_THAT(errors[0], Catch::Contains("missing.tar"));
  CHECK_THAT(errors[1], Catch::Contains("cut.tar") && Catch::Contains("truncated"));
  // The cut falls in member 11; member 10 might have had more members after it, so its sample
  // is reported with the cut rather than delivered: 9 samples, then all of mpdata.tar.
  CHECK(samples == 9 + 100);
}

TEST_CASE("member names split into key and extension like WebDataset", "[wds]") {
  std::string key, ext;
  CHECK(io::split_member_name("dir/a.b.JPG", key, ext));
  CHECK(key == "dir/a");
  CHECK(ext == "b.jpg");
  CHECK_FALSE(io::split_member_name("dir.x/README", key, ext));
  CHECK_FALSE(io::split_member_name("dir/.hidden", key, ext));
}

// --- indexes: header scans, index files, IndexedTarSource ------------------------------------

namespace {

std::vector<std::string> keys_in_order(Source& src, EpochOrder order) {
  src.start_epoch(order);
  std::vector<std::string> out;
  Sample s;
  while (src.next(s)) out.push_back(s.key);
  return out;
}

std::string member_bytes(const Member& m) {
  if (!m.is_path) return m.data;
  std::string out;
  io::read_range(m.path, m.offset, static_cast<uint64_t>(m.length), out);
  return out;
}

}  // namespace

TEST_CASE("the header scan finds what the sequential reader reads, long names included",
          "[tar][index]") {
  if (!have_tool("tar")) return;
  TempDir d;
  const std::string long_dir(120, 'd');
  d.write("in/a.jpg", std::string(1000, 'a'));
  d.write("in/a.cls", "3");
  d.write("in/" + long_dir + "/b.jpg", std::string(70000, 'b'));
  d.write("in/empty.cls", "");
  for (const char* fmt : {"gnu", "pax"}) {
    INFO(fmt);
    const std::string archive = (d.path / (std::string(fmt) + ".tar")).string();
    int rc = 0;
    run("cd " + quote(d.path.string()) + " && tar --format=" + fmt + " -cf " + quote(archive) +
            " in",
        &rc);
    REQUIRE(rc == 0);
    auto seq = read_tar(archive);
    auto scanned = io::scan_tar(archive);
    REQUIRE(scanned.size() == seq.size());
    for (const auto& m : scanned) {
      std::string bytes;
      io::read_range(archive, m.offset, m.size, bytes);
      CHECK(seq.at(m.name) == bytes);
    }
  }
  run("cd " + quote(d.path.string()) + " && tar -czf g.tgz in");
  CHECK_THROWS_WITH(io::scan_tar((d.path / "g.tgz").string()), Catch::Contains("gzip-compressed"));
  const std::string tar = read_all((d.path / "gnu.tar").string());
  d.write("cut.tar", tar.substr(0, 512 * 3 + 100));  // a partial header block
  CHECK_THROWS_WITH(io::scan_tar((d.path / "cut.tar").string()), Catch::Contains("truncated"));
  d.write("cut2.tar", tar.substr(0, 512 * 6 + 100));  // inside a member's data
  CHECK_THROWS_AS(io::scan_tar((d.path / "cut2.tar").string()), ReadFailure);
}

TEST_CASE("an indexed shard gives the stream's samples in the stream's order", "[tar][index]") {
  REQUIRE_SHARED_DATA();
  // mpdata.tar: 100 samples 000000..000099, one 7-byte .mp member each (README of the data).
  const std::string shard = real("webdataset/testdata/mpdata.tar");
  TempDir d;
  auto index = std::make_shared<io::ShardIndex>(io::index_shard(shard));
  REQUIRE(index->samples.size() == 100);
  CHECK(index->samples[0].key == "000000");
  uint64_t sequential_bytes = 0;
  for (const auto& [name, data] : read_tar(shard)) sequential_bytes += data.size();
  const std::string idx = (d.path / "mpdata.tar.idx").string();
  io::write_index(*index, idx);
  auto back = std::make_shared<io::ShardIndex>(io::read_index(idx, shard));
  CHECK(back->member_bytes() == sequential_bytes);
  for (bool shuffle : {false, true}) {
    io::TarSource stream({shard}, 16);
    io::IndexedTarSource indexed({back}, 16);
    const EpochOrder order{7, 2, shuffle};
    CHECK(keys_in_order(indexed, order) == keys_in_order(stream, order));
    CHECK(indexed.size() == 100);
    // Bytes through the ranges equal the stream's members.
    stream.start_epoch(order);
    indexed.start_epoch(order);
    Sample a, b;
    while (stream.next(a)) {
      REQUIRE(indexed.next(b));
      REQUIRE(b.members.size() == a.members.size());
      CHECK(member_bytes(b.members[0]) == a.members[0].data);
    }
    // Skipping moves through the same order without reading.
    indexed.start_epoch(order);
    CHECK(indexed.skip(40) == 40);
    REQUIRE(indexed.next(b));
    CHECK(b.key == keys_in_order(stream, order)[40]);
  }
  // A shard that changed after indexing: the index is stale, whether its size changed or not.
  d.write("copy.tar", read_all(shard) + std::string(512, '\0'));
  CHECK_THROWS_AS(io::read_index(idx, (d.path / "copy.tar").string()), ConfigError);
  std::string same_size = read_all(shard);
  same_size[same_size.size() - 2048] ^= 1;  // in the zero blocks that tar's record padding leaves
  d.write("edited.tar", same_size);
  CHECK_THROWS_WITH(io::read_index(idx, (d.path / "edited.tar").string()),
                    Catch::Contains("same size, other contents"));
  char fp[16];
  std::snprintf(fp, sizeof fp, "%08x", io::shard_fingerprint(shard));
  d.write("bad.idx", "loadscope-tar-index 1\ntar_bytes 112640\nfingerprint " + std::string(fp) +
                         "\nsamples 2\n000000\tmp\t512\t7\n");
  CHECK_THROWS_WITH(io::read_index((d.path / "bad.idx").string(), shard),
                    Catch::Contains("says 2 samples"));
  CHECK_THROWS_AS(io::read_index((d.path / "bad.idx").string(), shard), ConfigError);
}

TEST_CASE("a header claiming more than the file holds fails without allocating it", "[tar]") {
  // Found by fuzzing (tests/fuzz/regressions/tar/size-8gib-in-1kib): the reader once sized the
  // member from the header, an 8 GiB allocation for a 1 KiB file.
  const std::string input =
      testing::read_all(std::string(LOADSCOPE_FUZZ_REGRESSIONS) + "/tar/size-8gib-in-1kib");
  TempDir d;
  d.write("claim.tar", input);
  struct rusage before {
  }, after{};
  getrusage(RUSAGE_SELF, &before);
  CHECK_THROWS_WITH(read_tar((d.path / "claim.tar").string()), Catch::Contains("truncated"));
  CHECK_THROWS_WITH(io::scan_tar((d.path / "claim.tar").string()), Catch::Contains("truncated"));
  getrusage(RUSAGE_SELF, &after);
  CHECK(after.ru_maxrss - before.ru_maxrss < 64 * 1024);  // KiB: far below the claimed 8 GiB
}
