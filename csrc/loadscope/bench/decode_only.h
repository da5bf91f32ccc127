#pragma once
// The decode-only ceiling of the image benchmark: TurboJPEG full-image decodes of the same
// files on the same number of threads, with no augmentation, no batching and no copy-out.
// An independent code path (the TurboJPEG API, not loadscope's decoder), so the ratio
// "loader / ceiling" measures the loader, not a shared routine.

#include <array>
#include <string>
#include <vector>

namespace loadscope::bench {

struct DecodeOnlyResult {
  double seconds = 0;
  long images = 0;
  long failures = 0;
  long frames = 0, shown = 0;  // video: frames decoded; those of them that are clip frames
};

// Decodes every buffer `repeat` times, `threads` ways in parallel (oneTBB).
DecodeOnlyResult turbojpeg_decode_only(const std::vector<std::string>& jpegs, int threads,
                                       int repeat);

// The WebP ceiling: libwebp decodes of each buffer to RGB from memory, `threads` ways in
// parallel, with no augmentation, batching or copy-out. crops[i] = {x, y, width, height} is the
// region of buffer i decoded with libwebp's cropping (the least an exact decoder of that crop
// does: rows below it and colour outside it skipped); width 0 decodes the whole image. Like
// the JPEG ceiling it calls libwebp's API directly, not loadscope's decoder.
DecodeOnlyResult webp_decode_only(const std::vector<std::string>& webps,
                                  const std::vector<std::array<int, 4>>& crops, int threads);

// The video ceiling: for each (file, start second), seek to the keyframe before the start and
// decode up to the clip's last frame (frames x stride at the stream's frame rate), with no
// conversion, resizing or batching; `threads` videos in parallel, `decoder_threads` FFmpeg
// threads each. `images` counts clips; `shown`, the decoded frames the clips show (by the
// frame rate), every clip's when nothing is missing.
//
// least: the floor instead, the least decoding any decoder returning exact frames must do.
// Non-reference frames that are not among the clip's frames are skipped (AVDISCARD_NONREF),
// and once every packet of the clip's span is sent the decoder is drained rather than fed
// the packets it would otherwise want before letting its last frames out. Frames are matched
// to the clip by the frame rate: for constant-rate videos.
DecodeOnlyResult ffmpeg_decode_only(const std::vector<std::string>& paths,
                                    const std::vector<double>& starts, int frames, int stride,
                                    int threads, int decoder_threads, bool least = false);

}  // namespace loadscope::bench
