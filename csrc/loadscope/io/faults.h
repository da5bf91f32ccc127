#pragma once
// Injected read faults, for the reliability tests (tests/python/test_faults.py): an I/O error,
// a short read, or a file that vanished, on reads whose path contains a given text. Real
// faults of these kinds are rare and hard to produce on demand (no failing disk in CI); the
// injection sits where the real ones surface, in read_file, read_range and a local file's
// positioned reads (FFmpeg's reads of a video or audio file), so the rest of the
// path — error kinds, sample keys, skip and raise policies, shutdown — is the real one.
// Off by default: one relaxed atomic load per read.

#include <cstdint>
#include <string>
#include <vector>

namespace loadscope::io {

enum class FaultKind { kIoError, kShortRead, kVanished };

struct ReadFault {
  std::string match;  // the fault applies to reads whose path contains this
  FaultKind kind = FaultKind::kIoError;
  int64_t times = -1;  // how many reads fail (-1: every one)
  int64_t after = 0;   // matching reads that succeed first (a failure mid-decode, not at open)
};

// Replaces the active faults (an empty list turns injection off). Thread-safe.
void set_read_faults(std::vector<ReadFault> faults);

// Throws the injected ReadFailure for `path`, if a fault matches. Called by the readers.
void check_read_fault(const std::string& path);

}  // namespace loadscope::io
