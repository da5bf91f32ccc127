#pragma once
// Per-sample colour augmentations on a uint8 RGB image, with the semantics of torchvision's
// functional ops on uint8 tensors (torchvision.transforms.v1 `ColorJitter`, `RandomGrayscale`,
// `RandomErasing`): the same float32 arithmetic in the same order, and the same truncation to
// uint8 after each op, so outputs match theirs exactly for images up to 2^16 pixels (larger
// ones: contrast's mean may differ in the last bit, as float32 sums of more gray levels round).
// Parameters are drawn from the loader's Rng: a function of (seed, epoch, position, field).

#include <array>
#include <cstddef>
#include <cstdint>

#include "loadscope/augment/pixels.h"
#include "loadscope/core/rng.h"

namespace loadscope::augment {

// The three channels of an image: planar (CHW, step 1) or interleaved (HWC, step 3).
struct RgbView {
  uint8_t* r;
  uint8_t* g;
  uint8_t* b;
  ptrdiff_t step;
  size_t pixels;
  static RgbView of(uint8_t* image, size_t pixels, bool chw) {
    return chw ? RgbView{image, image + pixels, image + 2 * pixels, 1, pixels}
               : RgbView{image, image + 1, image + 2, 3, pixels};
  }
};

// torchvision's ColorJitter: each op on where its range is not the identity (brightness,
// contrast, saturation factors (1, 1); hue (0, 0)), applied with probability p (RandomApply),
// in a random order, each factor uniform in its range.
struct ColorSpec {
  double p = 0.0;                                        // 0: off
  std::array<double, 4> lo{1, 1, 1, 0}, hi{1, 1, 1, 0};  // brightness, contrast, saturation, hue
};

struct EraseSpec {
  double p = 0.0;  // 0: off
  double scale_min = 0.02, scale_max = 0.33;
  double ratio_min = 0.3, ratio_max = 3.3;
  std::array<double, 3> value{0, 0, 0};  // in output units (0..255 for uint8)
};

void adjust_brightness(const RgbView& img, double factor);
void adjust_contrast(const RgbView& img, double factor);
void adjust_saturation(const RgbView& img, double factor);
void adjust_hue(const RgbView& img, double factor);  // factor in [-0.5, 0.5]
void to_grayscale(const RgbView& img);               // 3 channels of the same gray

struct ColorDraw {
  bool apply = false;
  std::array<int, 4> order{0, 1, 2, 3};
  std::array<double, 4> factor{1, 1, 1, 0};
};
ColorDraw draw_color(const ColorSpec& spec, Rng& rng);
// The ops of `draw` in its order (index 0..3: brightness, contrast, saturation, hue).
void apply_color(const RgbView& img, const ColorDraw& draw);

struct EraseBox {
  bool erase = false;
  int top = 0, left = 0, height = 0, width = 0;
};
// torchvision's RandomErasing.get_params: up to 10 tries for a box inside the image.
EraseBox draw_erase(const EraseSpec& spec, int height, int width, Rng& rng);
// Fills the box of an image of `type` elements (layout as RgbView) with spec.value.
void erase(void* image, PixelType type, int height, int width, bool chw, const EraseBox& box,
           const std::array<double, 3>& value);

}  // namespace loadscope::augment
