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

// The video ceiling: for each (file, start second), seek to the keyframe before the start and
// decode up to the clip's last frame (frames x stride at the stream's frame rate), with no
// conversion, resizing or batching; `threads` videos in parallel, `decoder_threads` FFmpeg
// threads each. `images` counts clips.
DecodeOnlyResult ffmpeg_decode_only(const std::vector<std::string>& paths,
                                    const std::vector<double>& starts, int frames, int stride,
                                    int threads, int decoder_threads);

}  // namespace loadscope::bench
