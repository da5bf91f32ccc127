#pragma once
// The decode-only ceiling of the image benchmark: TurboJPEG full-image decodes of the same
// files on the same number of threads, with no augmentation, no batching and no copy-out.
// An independent code path (the TurboJPEG API, not loadscope's decoder), so the ratio
// "loader / ceiling" measures the loader, not a shared routine.

#include <string>
#include <vector>

namespace loadscope::bench {

struct DecodeOnlyResult {
  double seconds = 0;
  long images = 0;
  long failures = 0;
};

// Decodes every buffer `repeat` times, `threads` ways in parallel (oneTBB).
DecodeOnlyResult turbojpeg_decode_only(const std::vector<std::string>& jpegs, int threads,
                                       int repeat);

}  // namespace loadscope::bench
