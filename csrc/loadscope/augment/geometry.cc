#include "loadscope/augment/geometry.h"

#include <algorithm>
#include <cmath>

namespace loadscope::augment {

namespace {
CropPlan integer_crop(int x, int y, int w, int h) {
  CropPlan p;
  p.box = Box{double(x), double(y), double(x + w), double(y + h)};
  p.window = p.box;
  return p;
}
}  // namespace

CropPlan plan_random_resized_crop(int width, int height, double scale_min, double scale_max,
                                  double ratio_min, double ratio_max, Rng& rng) {
  const double area = double(width) * height;
  const double log_lo = std::log(ratio_min), log_hi = std::log(ratio_max);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target_area = area * rng.uniform(scale_min, scale_max);
    const double aspect = std::exp(rng.uniform(log_lo, log_hi));
    // Python's round() rounds half to even, as std::nearbyint does in the default mode.
    const int w = static_cast<int>(std::nearbyint(std::sqrt(target_area * aspect)));
    const int h = static_cast<int>(std::nearbyint(std::sqrt(target_area / aspect)));
    if (0 < w && w <= width && 0 < h && h <= height) {
      const int y = static_cast<int>(rng.below(static_cast<uint64_t>(height - h + 1)));
      const int x = static_cast<int>(rng.below(static_cast<uint64_t>(width - w + 1)));
      return integer_crop(x, y, w, h);
    }
  }
  const double in_ratio = double(width) / height;
  int w = width, h = height;
  if (in_ratio < ratio_min) {
    h = static_cast<int>(std::nearbyint(w / ratio_min));
  } else if (in_ratio > ratio_max) {
    w = static_cast<int>(std::nearbyint(h * ratio_max));
  }
  return integer_crop((width - w) / 2, (height - h) / 2, w, h);
}

CropPlan plan_resize_center_crop(int width, int height, int resize, int out_w, int out_h) {
  // torchvision's F.resize with an int: the short side becomes `resize`, the long side
  // int(resize * long / short) (truncated).
  int new_w, new_h;
  if (width <= height) {
    new_w = resize;
    new_h = static_cast<int>(static_cast<long long>(resize) * height / width);
  } else {
    new_h = resize;
    new_w = static_cast<int>(static_cast<long long>(resize) * width / height);
  }
  // F.center_crop: int(round((size - crop) / 2.0)). When the crop is larger than the image,
  // torchvision pads with zeros; the box then extends outside the image and the resampler
  // fills those pixels from the edge instead (the caller validates resize >= output size).
  const int top = static_cast<int>(std::nearbyint((new_h - out_h) / 2.0));
  const int left = static_cast<int>(std::nearbyint((new_w - out_w) / 2.0));
  const double sx = double(width) / new_w, sy = double(height) / new_h;
  CropPlan p;
  p.box = Box{left * sx, top * sy, (left + out_w) * sx, (top + out_h) * sy};
  p.window = Box{0, 0, double(width), double(height)};
  return p;
}

CropPlan plan_resize(int width, int height) {
  return integer_crop(0, 0, width, height);
}

}  // namespace loadscope::augment
