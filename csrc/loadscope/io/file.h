#pragma once
#include <cstdint>
#include <string>

namespace loadscope::io {

// Reads a whole file into `out` (reusing its capacity). Throws ReadFailure with the OS reason.
uint64_t read_file(const std::string& path, std::string& out);

}  // namespace loadscope::io
