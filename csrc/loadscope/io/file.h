#pragma once
#include <cstdint>
#include <string>

namespace loadscope::io {

// Reads a whole file into `out` (reusing its capacity). Throws ReadFailure with the OS reason.
uint64_t read_file(const std::string& path, std::string& out);

// Reads `length` bytes at `offset` of a file into `out` (a tar member through an index).
// Throws ReadFailure with the OS reason, or when the file is shorter than the range.
uint64_t read_range(const std::string& path, uint64_t offset, uint64_t length, std::string& out);

}  // namespace loadscope::io
