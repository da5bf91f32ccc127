#pragma once
// Antialiased bilinear resampling with the filter of Pillow's Image.resize(size, BILINEAR, box),
// which torchvision's PIL backend uses: the same taps and weights (the triangle's support
// widened by the downscale factor, Pillow's window bounds and normalisation), so outputs agree
// with Pillow's within one level per channel.
//
// Note [resampling speed]
// Pillow filters each output pixel with a short loop over its taps, horizontal pass first;
// that does not vectorise and cost as much as decoding the JPEG. Here both passes are long
// multiply-accumulates over whole rows, which compilers vectorise on any target:
//   1. vertical: each output row = sum of source rows, written transposed (a column of tmp);
//   2. horizontal: each output column = sum of rows of tmp, written to the destination.
// Both write their results transposed, 8 x 16 bytes at a time (Note [transposes]).
// Weights are 14-bit fixed point (int16) so the products widen cheaply; the different pass
// order and precision are why results may differ from Pillow's by one level.
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

  // Bytes of scratch held between calls.
  size_t buffer_bytes() const {
    return temp_.capacity() + accum_.capacity() * sizeof(int32_t) + block_.capacity() +
           (horizontal_.k.capacity() + vertical_.k.capacity()) * sizeof(int16_t);
  }

 private:
  struct Coeffs {
    int ksize = 0;
    std::vector<int> bounds;  // per output: first tap, tap count
    std::vector<int16_t> k;   // per output: ksize fixed-point weights
  };
  static void precompute(int in_size, double in0, double in1, int out_size, Coeffs& c);

  Coeffs horizontal_, vertical_;
  // The vertical pass's output, transposed: [source column][rgb][out row, padded to 16].
  std::vector<uint8_t> temp_;
  std::vector<int32_t> accum_;  // one row of either pass
  std::vector<uint8_t> block_;  // kBlock finished rows or columns
};

// Applies EXIF orientation 1..8 (Pillow's ImageOps.exif_transpose): dst receives the upright
// image, width x height swapped for orientations 5..8, rows packed (stride = width * 3).
void orient(const uint8_t* src, int width, int height, size_t stride, int orientation,
            uint8_t* dst);

}  // namespace loadscope::augment
