#pragma once
#include <cstdint>
#include <string>

namespace loadscope::io {

// A member read whole (an image, a label, a tar member) larger than this is refused before it
// is read: a 3 GB sparse file named like an image was read into memory by every thread that met
// it. Memory stays bounded by threads x this, at worst.
constexpr uint64_t kMaxMemberBytes = uint64_t{1} << 30;
void check_member_size(uint64_t bytes);  // throws ReadFailure above kMaxMemberBytes

// Throws ReadFailure unless `path` is a regular file (what FFmpeg is about to open by path:
// a FIFO there would block the thread forever).
void check_regular_file(const std::string& path);

// Reads a whole file into `out` (reusing its capacity). Throws ReadFailure with the OS reason.
uint64_t read_file(const std::string& path, std::string& out);

// Reads `length` bytes at `offset` of a file into `out` (a tar member through an index).
// Throws ReadFailure with the OS reason, or when the file is shorter than the range.
uint64_t read_range(const std::string& path, uint64_t offset, uint64_t length, std::string& out);

}  // namespace loadscope::io
