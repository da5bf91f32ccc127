#pragma once
// Which frames a clip shows: pure functions of a video's frame timestamps, the clip spec and
// the sample's Rng. No FFmpeg here; the decoder then fetches exactly these frames.

#include <cstdint>
#include <vector>

#include "loadscope/core/rng.h"

namespace loadscope::pipeline {

enum class ClipPosition { kRandom, kUniform, kCenter };
enum class ShortVideo { kPad, kFail };

struct ClipSpec {
  int frames = 16;  // T: frames per clip
  int stride = 1;   // frames between clip frames (when fps == 0)
  double fps = 0;   // > 0: sample by presentation time at this rate instead
  ClipPosition position = ClipPosition::kRandom;
  int clips = 1;  // K clips per video
  ShortVideo short_video = ShortVideo::kPad;
};

// Returns clips * frames target timestamps (clip-major), each one of `pts` (ascending, in
// ticks of `time_base` seconds): the frame shown at the sampled time. A video too short for a
// clip is padded with its last frame (kPad) or throws DecodeFailure (kFail).
// `start` (seconds from the first frame; one clip): the clip starts at the frame shown then,
// instead of a drawn position; a clip running past the end is padded or fails alike, a start
// at or past the end fails.
std::vector<int64_t> plan_clips(const std::vector<int64_t>& pts, double time_base,
                                const ClipSpec& spec, Rng& rng, const double* start = nullptr);

}  // namespace loadscope::pipeline
