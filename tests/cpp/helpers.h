#pragma once
// Shared helpers of the C++ tests: real data from ../shared/data/real (tests fail when it is
// absent under `make test`, and skip with a message otherwise) and running reference
// command-line tools.

#include <catch2/catch.hpp>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace testing {

inline std::string shared_data() {
  const char* env = std::getenv("LOADSCOPE_SHARED_DATA");
  return env ? env : LOADSCOPE_SHARED_DATA;
}

inline bool have_shared_data() {
  std::ifstream f(shared_data() + "/README.md");
  return f.good();
}

// Use at the top of a test that needs ../shared/data. Absent data fails the test when
// LOADSCOPE_REQUIRE_SHARED_DATA=1 (`make test` sets it, after checking the data); otherwise the
// test passes with a warning (Catch2 v2 has no "skipped" state).
inline bool shared_data_required() {
  const char* env = std::getenv("LOADSCOPE_REQUIRE_SHARED_DATA");
  return env && std::string(env) == "1";
}

#define REQUIRE_SHARED_DATA()                                                         \
  do {                                                                                \
    if (!testing::have_shared_data()) {                                               \
      if (testing::shared_data_required()) {                                          \
        FAIL("real test data not found at " << testing::shared_data()                 \
                                            << " (LOADSCOPE_REQUIRE_SHARED_DATA=1)"); \
      }                                                                               \
      WARN("skipped: real test data not found at " << testing::shared_data());        \
      return;                                                                         \
    }                                                                                 \
  } while (0)

inline std::string read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  REQUIRE(f.good());
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

inline std::string real(const std::string& relative) {
  return shared_data() + "/" + relative;
}

// Runs a shell command and returns its stdout (binary-safe); *rc receives the exit status.
inline std::string run(const std::string& cmd, int* rc = nullptr) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  char buf[65536];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  int status = pclose(p);
  if (rc) *rc = WEXITSTATUS(status);
  return out;
}

inline bool have_tool(const std::string& name) {
  int rc = 0;
  run("command -v " + name + " >/dev/null 2>&1", &rc);
  return rc == 0;
}

// A PPM/PGM (P6/P5, maxval 255) as interleaved RGB (grey replicated).
struct Pnm {
  int width = 0, height = 0;
  std::vector<uint8_t> rgb;
};

inline Pnm parse_pnm(const std::string& data) {
  Pnm p;
  std::istringstream in(data);
  std::string magic;
  int maxval = 0;
  in >> magic >> p.width >> p.height >> maxval;
  in.get();
  REQUIRE((magic == "P6" || magic == "P5"));
  REQUIRE(maxval == 255);
  const size_t pixels = static_cast<size_t>(p.width) * p.height;
  const size_t offset = static_cast<size_t>(in.tellg());
  const int channels = magic == "P6" ? 3 : 1;
  REQUIRE(data.size() >= offset + pixels * channels);
  p.rgb.resize(pixels * 3);
  for (size_t i = 0; i < pixels; ++i) {
    for (int c = 0; c < 3; ++c) {
      p.rgb[3 * i + c] =
          static_cast<uint8_t>(data[offset + i * channels + (channels == 3 ? c : 0)]);
    }
  }
  return p;
}

inline std::string quote(const std::string& s) {
  return "'" + s + "'";
}

}  // namespace testing
