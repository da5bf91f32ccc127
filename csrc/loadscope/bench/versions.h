#pragma once
// The versions of the native libraries loadscope was built with and runs against, for the
// environment record of every experiment (an A/B result is only meaningful with them).

#include <string>
#include <utility>
#include <vector>

namespace loadscope::bench {

// (name, version) pairs. FFmpeg libraries and oneTBB report both the headers' version
// ("built") and the loaded library's ("runtime"): they differ when a library was upgraded
// under an existing build. libjpeg-turbo 2.1 has no runtime version call: headers only.
std::vector<std::pair<std::string, std::string>> library_versions();

}  // namespace loadscope::bench
