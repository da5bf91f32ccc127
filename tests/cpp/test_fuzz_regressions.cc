// Every input the fuzzers ever found a bug with (tests/fuzz/regressions/<target>/) goes back
// through the same target body: it must now return normally (and, under the sanitizer builds,
// cleanly). The seed files of a fresh checkout are small valid and broken inputs.
#include <filesystem>

#include "helpers.h"
#include "targets.h"

namespace fs = std::filesystem;

TEST_CASE("inputs that once broke a fuzz target are handled", "[fuzz]") {
  const fs::path root = LOADSCOPE_FUZZ_REGRESSIONS;
  REQUIRE(fs::is_directory(root));
  int replayed = 0;
  for (const auto& [name, fn] :
       std::vector<std::pair<std::string, int (*)(const uint8_t*, size_t)>>{
           {"jpeg", loadscope::fuzz::jpeg},
           {"png", loadscope::fuzz::png},
           {"webp", loadscope::fuzz::webp},
           {"tar", loadscope::fuzz::tar},
           {"video", loadscope::fuzz::video},
           {"audio", loadscope::fuzz::audio},
           {"manifest", loadscope::fuzz::manifest}}) {
    if (!fs::is_directory(root / name)) continue;
    for (const auto& entry : fs::directory_iterator(root / name)) {
      INFO(entry.path().string());
      const std::string bytes = testing::read_all(entry.path().string());
      CHECK(fn(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()) == 0);
      ++replayed;
    }
  }
  CHECK(replayed > 0);
}
