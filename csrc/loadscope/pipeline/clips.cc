#include "loadscope/pipeline/clips.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "loadscope/core/error.h"

namespace loadscope::pipeline {

namespace {

// Start positions (in [0, max_start]) of K clips.
std::vector<double> starts(double max_start, const ClipSpec& spec, Rng& rng, bool integral) {
  std::vector<double> out;
  for (int k = 0; k < spec.clips; ++k) {
    double s;
    switch (spec.position) {
      case ClipPosition::kRandom:
        s = integral ? static_cast<double>(rng.below(static_cast<uint64_t>(max_start) + 1))
                     : rng.uniform(0.0, max_start);
        break;
      case ClipPosition::kUniform:
        s = spec.clips == 1 ? max_start / 2 : max_start * k / (spec.clips - 1);
        break;
      case ClipPosition::kCenter:
      default: s = max_start / 2; break;
    }
    out.push_back(integral ? std::floor(s + 0.5) : s);  // random draws are integral already
  }
  return out;
}

}  // namespace

std::vector<int64_t> plan_clips(const std::vector<int64_t>& pts, double time_base,
                                const ClipSpec& spec, Rng& rng, const double* start) {
  const int64_t n = static_cast<int64_t>(pts.size());
  std::vector<int64_t> targets;
  targets.reserve(static_cast<size_t>(spec.clips) * spec.frames);
  // The video shows its last frame for one more frame step: a 3-frame 30 fps video lasts 0.1 s.
  const double step = n > 1 ? (pts[n - 1] - pts[n - 2]) * time_base : 0.0;
  const double first = pts.front() * time_base, end = pts.back() * time_base + step;
  // The frame shown at `t` seconds: the last with pts <= t (a tiny epsilon keeps exact frame
  // times from rounding down).
  auto shown_at = [&](double t) {
    const int64_t tick = static_cast<int64_t>(std::floor(t / time_base + 1e-6));
    auto it = std::upper_bound(pts.begin(), pts.end(), tick);
    return it == pts.begin() ? int64_t{0} : static_cast<int64_t>(it - pts.begin()) - 1;
  };
  if (start != nullptr && *start >= end - first) {
    throw DecodeFailure("the clip's start, " + std::to_string(*start) +
                        " s, is at or past the video's end (" + std::to_string(end - first) +
                        " s)");
  }
  if (spec.fps <= 0) {
    // By frame index: frames s, s + stride, ..., s + (T-1) * stride.
    const int64_t span = static_cast<int64_t>(spec.frames - 1) * spec.stride + 1;
    const int64_t max_start = start != nullptr ? n - span - shown_at(first + *start) : n - span;
    if (max_start < 0 && spec.short_video == ShortVideo::kFail) {
      throw DecodeFailure(start != nullptr ? "a clip from " + std::to_string(*start) + " s spans " +
                                                 std::to_string(span) +
                                                 " frames, past the video's " + std::to_string(n)
                                           : "video too short: " + std::to_string(n) +
                                                 " frames, a clip spans " + std::to_string(span));
    }
    const std::vector<double> chosen =
        start != nullptr
            ? std::vector<double>{static_cast<double>(shown_at(first + *start))}
            : starts(static_cast<double>(std::max<int64_t>(max_start, 0)), spec, rng, true);
    for (double s : chosen) {
      for (int j = 0; j < spec.frames; ++j) {
        const int64_t i = static_cast<int64_t>(s) + static_cast<int64_t>(j) * spec.stride;
        targets.push_back(pts[static_cast<size_t>(std::min(i, n - 1))]);  // pad: last frame
      }
    }
    return targets;
  }
  // By time: t0, t0 + 1/fps, ...; each shows the last frame with pts <= t.
  const double span = (spec.frames - 1) / spec.fps;
  // The last clip frame is sampled strictly before the end (at most 1 us short of it).
  const double max_start = end - first - span - (step > 0 ? 1e-6 : 0.0);
  if ((start != nullptr ? *start > max_start : max_start < 0) &&
      spec.short_video == ShortVideo::kFail) {
    throw DecodeFailure(start != nullptr ? "a clip from " + std::to_string(*start) + " s spans " +
                                               std::to_string(span) + " s, past the video's end (" +
                                               std::to_string(end - first) + " s)"
                                         : "video too short: " + std::to_string(end - first) +
                                               " s, a clip spans " + std::to_string(span) + " s");
  }
  const std::vector<double> chosen = start != nullptr
                                         ? std::vector<double>{*start}
                                         : starts(std::max(max_start, 0.0), spec, rng, false);
  for (double s : chosen) {
    for (int j = 0; j < spec.frames; ++j) {
      // A time past the end shows the last frame: the clip is padded with it.
      targets.push_back(pts[static_cast<size_t>(shown_at(first + s + j / spec.fps))]);
    }
  }
  return targets;
}

}  // namespace loadscope::pipeline
