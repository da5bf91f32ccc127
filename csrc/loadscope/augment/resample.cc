#include "loadscope/augment/resample.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace loadscope::augment {

namespace {
constexpr int kPrecisionBits = 32 - 8 - 2;  // Pillow's PRECISION_BITS for 8-bit images

inline uint8_t clip8(int32_t v) {
  v >>= kPrecisionBits;
  return static_cast<uint8_t>(v < 0 ? 0 : (v > 255 ? 255 : v));
}

inline double bilinear(double x) {
  x = std::fabs(x);
  return x < 1.0 ? 1.0 - x : 0.0;
}
}  // namespace

void Resampler::precompute(int in_size, double in0_d, double in1_d, int out_size, Coeffs& c) {
  // Pillow keeps the box in single precision.
  const double in0 = static_cast<float>(in0_d), in1 = static_cast<float>(in1_d);
  const double scale = (in1 - in0) / out_size;
  const double filterscale = std::max(scale, 1.0);
  const double support = 1.0 * filterscale;
  c.ksize = static_cast<int>(std::ceil(support)) * 2 + 1;
  c.bounds.resize(static_cast<size_t>(out_size) * 2);
  c.k.assign(static_cast<size_t>(out_size) * c.ksize, 0);
  std::vector<double> w(c.ksize);
  for (int xx = 0; xx < out_size; ++xx) {
    const double center = in0 + (xx + 0.5) * scale;
    const double ss = 1.0 / filterscale;
    int xmin = static_cast<int>(center - support + 0.5);  // truncation, as in C
    if (xmin < 0) xmin = 0;
    int xmax = static_cast<int>(center + support + 0.5);
    if (xmax > in_size) xmax = in_size;
    xmax -= xmin;
    if (xmax > c.ksize) xmax = c.ksize;
    double ww = 0.0;
    for (int x = 0; x < xmax; ++x) {
      w[x] = bilinear((x + xmin - center + 0.5) * ss);
      ww += w[x];
    }
    int32_t* k = &c.k[static_cast<size_t>(xx) * c.ksize];
    for (int x = 0; x < xmax; ++x) {
      const double v = ww != 0.0 ? w[x] / ww : w[x];
      k[x] = static_cast<int32_t>(v < 0 ? -0.5 + v * (1 << kPrecisionBits)
                                        : 0.5 + v * (1 << kPrecisionBits));
    }
    c.bounds[xx * 2] = xmin;
    c.bounds[xx * 2 + 1] = std::max(xmax, 0);
  }
}

void Resampler::resample(const uint8_t* src, int width, int height, size_t stride, const Box& box,
                         uint8_t* dst, int out_w, int out_h, Layout layout, bool flip) {
  precompute(width, box.x0, box.x1, out_w, horizontal_);
  precompute(height, box.y0, box.y1, out_h, vertical_);
  const int y_first = vertical_.bounds[0];
  int y_last = y_first;
  for (int y = 0; y < out_h; ++y) {
    y_last = std::max(y_last, vertical_.bounds[2 * y] + vertical_.bounds[2 * y + 1]);
  }
  const int rows = std::max(y_last - y_first, 0);
  const size_t tstride = static_cast<size_t>(out_w) * 3;
  temp_.resize(tstride * std::max(rows, 1));

  // Horizontal pass over the rows the vertical pass will read.
  const int hk = horizontal_.ksize;
  for (int r = 0; r < rows; ++r) {
    const uint8_t* in = src + static_cast<size_t>(y_first + r) * stride;
    uint8_t* out = temp_.data() + r * tstride;
    for (int xx = 0; xx < out_w; ++xx) {
      const int xmin = horizontal_.bounds[2 * xx], n = horizontal_.bounds[2 * xx + 1];
      const int32_t* k = &horizontal_.k[static_cast<size_t>(xx) * hk];
      const uint8_t* p = in + 3 * xmin;
      int32_t s0 = 1 << (kPrecisionBits - 1), s1 = s0, s2 = s0;
      for (int x = 0; x < n; ++x) {
        s0 += p[3 * x] * k[x];
        s1 += p[3 * x + 1] * k[x];
        s2 += p[3 * x + 2] * k[x];
      }
      uint8_t* o = out + 3 * (flip ? out_w - 1 - xx : xx);
      o[0] = clip8(s0);
      o[1] = clip8(s1);
      o[2] = clip8(s2);
    }
  }

  // Vertical pass: whole rows at a time so the inner loop vectorises.
  const int vk = vertical_.ksize;
  accum_.resize(tstride);
  const size_t plane = static_cast<size_t>(out_w) * out_h;
  for (int yy = 0; yy < out_h; ++yy) {
    const int ymin = vertical_.bounds[2 * yy] - y_first, n = vertical_.bounds[2 * yy + 1];
    const int32_t* k = &vertical_.k[static_cast<size_t>(yy) * vk];
    int32_t* acc = accum_.data();
    std::fill(acc, acc + tstride, 1 << (kPrecisionBits - 1));
    for (int t = 0; t < n; ++t) {
      const uint8_t* row = temp_.data() + static_cast<size_t>(ymin + t) * tstride;
      const int32_t kt = k[t];
      for (size_t i = 0; i < tstride; ++i) acc[i] += row[i] * kt;
    }
    if (layout == Layout::kHWC) {
      uint8_t* o = dst + yy * tstride;
      for (size_t i = 0; i < tstride; ++i) o[i] = clip8(acc[i]);
    } else {
      uint8_t* r = dst + static_cast<size_t>(yy) * out_w;
      uint8_t* g = r + plane;
      uint8_t* b = g + plane;
      for (int x = 0; x < out_w; ++x) {
        r[x] = clip8(acc[3 * x]);
        g[x] = clip8(acc[3 * x + 1]);
        b[x] = clip8(acc[3 * x + 2]);
      }
    }
  }
}

void orient(const uint8_t* src, int w, int h, size_t stride, int orientation, uint8_t* dst) {
  const bool transpose = orientation >= 5;
  const int ow = transpose ? h : w;
  const int oh = transpose ? w : h;
  for (int y = 0; y < oh; ++y) {
    uint8_t* out = dst + static_cast<size_t>(y) * ow * 3;
    for (int x = 0; x < ow; ++x) {
      int sx, sy;  // the stored pixel shown at upright (x, y)
      switch (orientation) {
        case 2: sx = w - 1 - x; sy = y; break;
        case 3: sx = w - 1 - x; sy = h - 1 - y; break;
        case 4: sx = x; sy = h - 1 - y; break;
        case 5: sx = y; sy = x; break;
        case 6: sx = y; sy = h - 1 - x; break;
        case 7: sx = w - 1 - y; sy = h - 1 - x; break;
        case 8: sx = w - 1 - y; sy = x; break;
        default: sx = x; sy = y; break;
      }
      std::memcpy(out + 3 * x, src + static_cast<size_t>(sy) * stride + 3 * sx, 3);
    }
  }
}

}  // namespace loadscope::augment
