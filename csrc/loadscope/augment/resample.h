#pragma once
// Antialiased bilinear resampling that reproduces Pillow's Image.resize(size, BILINEAR, box)
// bit for bit: the same filter support (widened by the downscale factor), the same 22-bit
// fixed-point coefficients and rounding, horizontal pass first, then vertical. torchvision's
// PIL backend resizes this way, so loadscope's output matches it wherever the decoded pixels
// match.
//
// The destination is written directly (e.g. a slot of a batch), planar CHW or interleaved HWC,
// optionally mirrored left-right. Not thread-safe per Resampler (it owns scratch).

#include <cstddef>
#include <cstdint>
#include <vector>

#include "loadscope/augment/geometry.h"

namespace loadscope::augment {

enum class Layout { kCHW, kHWC };

class Resampler {
 public:
  // src: interleaved RGB, width x height, `stride` bytes per row. The filter reads only these
  // pixels (they are the "image" for Pillow's edge handling). box: the source area, in src
  // coordinates, that maps onto the out_w x out_h output.
  void resample(const uint8_t* src, int width, int height, size_t stride, const Box& box,
                uint8_t* dst, int out_w, int out_h, Layout layout, bool flip);

 private:
  struct Coeffs {
    int ksize = 0;
    std::vector<int> bounds;  // per output: first tap, tap count
    std::vector<int32_t> k;   // per output: ksize fixed-point weights
  };
  static void precompute(int in_size, double in0, double in1, int out_size, Coeffs& c);

  Coeffs horizontal_, vertical_;
  std::vector<uint8_t> temp_;   // horizontal pass output, interleaved
  std::vector<int32_t> accum_;  // one output row of the vertical pass
};

// Applies EXIF orientation 1..8 (Pillow's ImageOps.exif_transpose): dst receives the upright
// image, width x height swapped for orientations 5..8, rows packed (stride = width * 3).
void orient(const uint8_t* src, int width, int height, size_t stride, int orientation,
            uint8_t* dst);

}  // namespace loadscope::augment
