#pragma once
// torchvision's RandAugment (transforms.RandAugment, Cubuk et al. 2019) per sample on a uint8
// RGB image: `num_ops` ops drawn uniformly from its 14 with a fixed magnitude, a random sign for
// the signed ones. The ops are torchvision's functional ops on uint8 tensors, op for op in
// float32: all 14 equal torchvision's bit for bit in tests/python/test_augment.py (torch 2.14,
// x86-64). The geometric ones (shear, translate, rotate: nearest neighbour, zero fill) and
// sharpness follow torch's affine grid, grid_sample and 3x3 convolution formulas; a torch build
// whose matrix product or convolution rounds differently could move a pixel at a .5 boundary.

#include <cstdint>
#include <vector>

#include "loadscope/core/rng.h"

namespace loadscope::augment {

struct RandAugmentSpec {
  int num_ops = 0;  // 0: off
  int magnitude = 9;
  int bins = 31;
};

enum class RandOp {
  kIdentity,
  kShearX,
  kShearY,
  kTranslateX,
  kTranslateY,
  kRotate,
  kBrightness,
  kColor,
  kContrast,
  kSharpness,
  kPosterize,
  kSolarize,
  kAutoContrast,
  kEqualize
};
constexpr int kRandOps = 14;

struct RandOpDraw {
  RandOp op;
  double magnitude;  // signed; the op's own units (see magnitude_of)
};

// The magnitude torchvision uses for op at bin `magnitude` of `bins` (its _augmentation_space,
// float32 linspace values), unsigned; the image size matters for translations.
double magnitude_of(RandOp op, int magnitude, int bins, int height, int width);

std::vector<RandOpDraw> draw_randaugment(const RandAugmentSpec& spec, int height, int width,
                                         Rng& rng);

// Applies one op in place to an image of height x width, planar (chw) or interleaved.
// `scratch` holds a copy for the ops that read neighbours.
void apply_op(uint8_t* image, int height, int width, bool chw, const RandOpDraw& op,
              std::vector<uint8_t>& scratch);

}  // namespace loadscope::augment
