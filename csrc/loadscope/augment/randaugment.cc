#include "loadscope/augment/randaugment.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

#include "loadscope/augment/color.h"

// Like color.cc, compiled with -ffp-contract=off: torchvision's float32 arithmetic, op for op.

namespace loadscope::augment {

namespace {

constexpr double kPi = 3.14159265358979323846;

// torch.linspace(start, end, steps)[i] on the CPU, float32: from the start for the first half,
// from the end for the second (so both ends are exact).
float linspace(float start, float end, int steps, int i) {
  if (steps == 1) return start;
  const float step = (end - start) / static_cast<float>(steps - 1);
  return i < steps / 2 ? start + step * static_cast<float>(i)
                       : end - step * static_cast<float>(steps - i - 1);
}

struct Pixels {
  uint8_t* data;
  int h, w;
  bool chw;
  size_t at(int c, int y, int x) const {
    return chw ? (static_cast<size_t>(c) * h + y) * w + x
               : (static_cast<size_t>(y) * w + x) * 3 + c;
  }
  uint8_t& operator()(int c, int y, int x) const { return data[at(c, y, x)]; }
};

// torchvision.transforms.functional._get_inverse_affine_matrix, in double as Python computes it.
std::array<double, 6> inverse_affine(double angle, double tx, double ty, double shear_x,
                                     double shear_y, double cx, double cy) {
  const double rot = angle * kPi / 180, sx = shear_x * kPi / 180, sy = shear_y * kPi / 180;
  const double a = std::cos(rot - sy) / std::cos(sy);
  const double b = -std::cos(rot - sy) * std::tan(sx) / std::cos(sy) - std::sin(rot);
  const double c = std::sin(rot - sy) / std::cos(sy);
  const double d = -std::sin(rot - sy) * std::tan(sx) / std::cos(sy) + std::cos(rot);
  std::array<double, 6> m{d, -b, 0.0, -c, a, 0.0};
  m[2] += m[0] * (-cx - tx) + m[1] * (-cy - ty);
  m[5] += m[3] * (-cx - tx) + m[4] * (-cy - ty);
  m[2] += cx;
  m[5] += cy;
  return m;
}

// _gen_affine_grid + grid_sample(mode="nearest", padding_mode="zeros", align_corners=False):
// output pixel (y, x) takes the source pixel nearest to theta applied to its centred coordinates.
void warp(const Pixels& img, const std::array<double, 6>& m, std::vector<uint8_t>& scratch) {
  const int h = img.h, w = img.w;
  const size_t n = static_cast<size_t>(h) * w * 3;
  scratch.assign(img.data, img.data + n);
  const Pixels src{scratch.data(), h, w, img.chw};
  float t[6];
  for (int k = 0; k < 6; ++k) t[k] = static_cast<float>(m[k]);
  const float hw = 0.5f * static_cast<float>(w), hh = 0.5f * static_cast<float>(h);
  // rescaled_theta = theta^T / [0.5 w, 0.5 h]
  const float r00 = t[0] / hw, r10 = t[1] / hw, r20 = t[2] / hw;
  const float r01 = t[3] / hh, r11 = t[4] / hh, r21 = t[5] / hh;
  const float sw = static_cast<float>(w) / 2.0f, sh = static_cast<float>(h) / 2.0f;
  for (int y = 0; y < h; ++y) {
    const float by = linspace(-static_cast<float>(h) * 0.5f + 0.5f,
                              static_cast<float>(h) * 0.5f + 0.5f - 1.0f, h, y);
    for (int x = 0; x < w; ++x) {
      const float bx = linspace(-static_cast<float>(w) * 0.5f + 0.5f,
                                static_cast<float>(w) * 0.5f + 0.5f - 1.0f, w, x);
      const float gx = bx * r00 + by * r10 + r20;
      const float gy = bx * r01 + by * r11 + r21;
      const float ix = std::nearbyint((gx + 1.0f) * sw - 0.5f);
      const float iy = std::nearbyint((gy + 1.0f) * sh - 0.5f);
      const bool inside =
          ix >= 0 && iy >= 0 && ix <= static_cast<float>(w - 1) && iy <= static_cast<float>(h - 1);
      for (int c = 0; c < 3; ++c) {
        img(c, y, x) = inside ? src(c, static_cast<int>(iy), static_cast<int>(ix)) : 0;
      }
    }
  }
}

uint8_t round_u8(float v) {
  return static_cast<uint8_t>(std::min(std::max(std::nearbyint(v), 0.0f), 255.0f));
}

// adjust_sharpness: blend with the image blurred by [[1,1,1],[1,5,1],[1,1,1]]/13 (borders kept).
// Per channel plane, with the nine products summed in torch's order (row by row), so the
// compiler can vectorise along x without changing a result.
void sharpness(const Pixels& img, double factor, std::vector<uint8_t>& scratch) {
  const int h = img.h, w = img.w;
  if (h <= 2 || w <= 2) return;
  const size_t plane = static_cast<size_t>(h) * w;
  scratch.resize(3 * plane);
  uint8_t* src = scratch.data();  // the channel as it was
  uint8_t* out = src + plane;     // blurred, rounded (borders: the pixel itself)
  const float one = 1.0f / 13.0f, five = 5.0f / 13.0f;
  const float a = static_cast<float>(factor), b = static_cast<float>(1.0 - factor);
  for (int c = 0; c < 3; ++c) {
    for (int y = 0; y < h; ++y) {
      for (int x = 0; x < w; ++x) src[static_cast<size_t>(y) * w + x] = img(c, y, x);
    }
    std::memcpy(out, src, plane);
    for (int y = 1; y < h - 1; ++y) {
      const uint8_t* up = src + static_cast<size_t>(y - 1) * w;
      const uint8_t* mid = up + w;
      const uint8_t* down = mid + w;
      uint8_t* o = out + static_cast<size_t>(y) * w;
      for (int x = 1; x < w - 1; ++x) {
        float s = 0.0f;
        s += static_cast<float>(up[x - 1]) * one;
        s += static_cast<float>(up[x]) * one;
        s += static_cast<float>(up[x + 1]) * one;
        s += static_cast<float>(mid[x - 1]) * one;
        s += static_cast<float>(mid[x]) * five;
        s += static_cast<float>(mid[x + 1]) * one;
        s += static_cast<float>(down[x - 1]) * one;
        s += static_cast<float>(down[x]) * one;
        s += static_cast<float>(down[x + 1]) * one;
        o[x] = round_u8(s);
      }
    }
    // The blend covers the borders too (a x + (1 - a) x need not round back to x).
    for (int y = 0; y < h; ++y) {
      for (int x = 0; x < w; ++x) {
        const size_t i = static_cast<size_t>(y) * w + x;
        const float v = a * static_cast<float>(src[i]) + b * static_cast<float>(out[i]);
        img(c, y, x) = static_cast<uint8_t>(std::min(std::max(v, 0.0f), 255.0f));
      }
    }
  }
}

void autocontrast(const Pixels& img) {
  for (int c = 0; c < 3; ++c) {
    int lo = 255, hi = 0;
    for (int y = 0; y < img.h; ++y) {
      for (int x = 0; x < img.w; ++x) {
        lo = std::min<int>(lo, img(c, y, x));
        hi = std::max<int>(hi, img(c, y, x));
      }
    }
    // bound / (max - min) on a tensor is torch's __rtruediv__: reciprocal, then multiply.
    float minimum = static_cast<float>(lo),
          scale = (1.0f / (static_cast<float>(hi) - minimum)) * 255.0f;
    if (!std::isfinite(scale)) minimum = 0.0f, scale = 1.0f;
    for (int y = 0; y < img.h; ++y) {
      for (int x = 0; x < img.w; ++x) {
        const float v = (static_cast<float>(img(c, y, x)) - minimum) * scale;
        img(c, y, x) = static_cast<uint8_t>(std::min(std::max(v, 0.0f), 255.0f));
      }
    }
  }
}

void equalize(const Pixels& img) {
  for (int c = 0; c < 3; ++c) {
    std::array<int64_t, 256> hist{};
    for (int y = 0; y < img.h; ++y) {
      for (int x = 0; x < img.w; ++x) ++hist[img(c, y, x)];
    }
    int64_t last = -1, sum = 0;  // the sum of the non-zero bins but the last
    for (int v = 0; v < 256; ++v) {
      if (hist[v] == 0) continue;
      if (last >= 0) sum += hist[last];
      last = v;
    }
    const int64_t step = sum / 255;
    if (step == 0) continue;
    std::array<uint8_t, 256> lut{};
    int64_t cum = 0;
    for (int v = 0; v < 256; ++v) {  // lut[v] = (cumsum[v - 1] + step // 2) // step, lut[0] = 0
      lut[v] = static_cast<uint8_t>(std::min<int64_t>(v == 0 ? 0 : (cum + step / 2) / step, 255));
      cum += hist[v];
    }
    for (int y = 0; y < img.h; ++y) {
      for (int x = 0; x < img.w; ++x) img(c, y, x) = lut[img(c, y, x)];
    }
  }
}

}  // namespace

double magnitude_of(RandOp op, int magnitude, int bins, int height, int width) {
  const auto lin = [&](double end) {
    return static_cast<double>(linspace(0.0f, static_cast<float>(end), bins, magnitude));
  };
  switch (op) {
    case RandOp::kShearX:
    case RandOp::kShearY: return lin(0.3);
    case RandOp::kTranslateX: return lin(150.0 / 331.0 * width);
    case RandOp::kTranslateY: return lin(150.0 / 331.0 * height);
    case RandOp::kRotate: return lin(30.0);
    case RandOp::kBrightness:
    case RandOp::kColor:
    case RandOp::kContrast:
    case RandOp::kSharpness: return lin(0.9);
    case RandOp::kPosterize:  // 8 - round(arange(bins) / ((bins - 1) / 4)), float32, half to even
      return 8 - static_cast<int>(std::nearbyint(static_cast<float>(magnitude) /
                                                 static_cast<float>((bins - 1) / 4.0)));
    case RandOp::kSolarize: return static_cast<double>(linspace(255.0f, 0.0f, bins, magnitude));
    default: return 0.0;
  }
}

std::vector<RandOpDraw> draw_randaugment(const RandAugmentSpec& spec, int height, int width,
                                         Rng& rng) {
  std::vector<RandOpDraw> ops;
  for (int k = 0; k < spec.num_ops; ++k) {
    const auto op = static_cast<RandOp>(rng.below(kRandOps));
    double m = magnitude_of(op, spec.magnitude, spec.bins, height, width);
    const bool is_signed = op != RandOp::kIdentity && op != RandOp::kPosterize &&
                           op != RandOp::kSolarize && op != RandOp::kAutoContrast &&
                           op != RandOp::kEqualize;
    if (is_signed && rng.below(2)) m = -m;
    ops.push_back({op, m});
  }
  return ops;
}

void apply_op(uint8_t* image, int height, int width, bool chw, const RandOpDraw& d,
              std::vector<uint8_t>& scratch) {
  const Pixels img{image, height, width, chw};
  const auto rgb = RgbView::of(image, static_cast<size_t>(height) * width, chw);
  const double m = d.magnitude;
  switch (d.op) {
    case RandOp::kIdentity: break;
    case RandOp::kShearX:  // F.affine(shear=[degrees(atan(m)), 0], center=[0, 0])
      warp(img, inverse_affine(0, 0, 0, std::atan(m) * 180 / kPi, 0, -0.5 * width, -0.5 * height),
           scratch);
      break;
    case RandOp::kShearY:
      warp(img, inverse_affine(0, 0, 0, 0, std::atan(m) * 180 / kPi, -0.5 * width, -0.5 * height),
           scratch);
      break;
    case RandOp::kTranslateX:  // F.affine(translate=[int(m), 0])
      warp(img, inverse_affine(0, static_cast<double>(static_cast<int>(m)), 0, 0, 0, 0, 0),
           scratch);
      break;
    case RandOp::kTranslateY:
      warp(img, inverse_affine(0, 0, static_cast<double>(static_cast<int>(m)), 0, 0, 0, 0),
           scratch);
      break;
    case RandOp::kRotate:  // F.rotate(angle): the inverse matrix of -angle about the centre
      warp(img, inverse_affine(-m, 0, 0, 0, 0, 0, 0), scratch);
      break;
    case RandOp::kBrightness: adjust_brightness(rgb, 1.0 + m); break;
    case RandOp::kColor: adjust_saturation(rgb, 1.0 + m); break;
    case RandOp::kContrast: adjust_contrast(rgb, 1.0 + m); break;
    case RandOp::kSharpness: sharpness(img, 1.0 + m, scratch); break;
    case RandOp::kPosterize: {
      const uint8_t mask = static_cast<uint8_t>(-(1 << (8 - static_cast<int>(m))));
      for (size_t i = 0; i < static_cast<size_t>(height) * width * 3; ++i) image[i] &= mask;
      break;
    }
    case RandOp::kSolarize: {
      const float threshold = static_cast<float>(m);
      for (size_t i = 0; i < static_cast<size_t>(height) * width * 3; ++i) {
        if (static_cast<float>(image[i]) >= threshold)
          image[i] = static_cast<uint8_t>(255 - image[i]);
      }
      break;
    }
    case RandOp::kAutoContrast: autocontrast(img); break;
    case RandOp::kEqualize: equalize(img); break;
  }
}

}  // namespace loadscope::augment
