#include "loadscope/augment/resample.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace loadscope::augment {

namespace {
constexpr int kBits = 14;  // weights sum to 1 << kBits and fit int16 with room to spare
constexpr int32_t kHalf = 1 << (kBits - 1);

inline uint8_t clip8(int32_t v) {
  return static_cast<uint8_t>(std::clamp(v >> kBits, 0, 255));
}

constexpr int kBlock = 8;  // rows (pass 1) or columns (pass 2) finished together

// x86-64 builds also carry AVX2 versions of the hot loops, picked at load time (GCC/Clang
// function multi-versioning); other targets use their baseline vector units.
// Not under sanitizers: their instrumented ifunc resolvers run during relocation, before the
// sanitizer runtime is up (ThreadSanitizer crashes there).
#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define LOADSCOPE_SANITIZED 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define LOADSCOPE_SANITIZED 1
#endif
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && \
    !defined(LOADSCOPE_SANITIZED)
#define LOADSCOPE_HOT __attribute__((target_clones("avx2", "default")))
#else
#define LOADSCOPE_HOT
#endif

// Narrows n fixed-point sums to bytes (a contiguous loop, so it vectorises).
LOADSCOPE_HOT void narrow(const int32_t* __restrict acc, uint8_t* __restrict out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = clip8(acc[i]);
}

inline double bilinear(double x) {
  x = std::fabs(x);
  return x < 1.0 ? 1.0 - x : 0.0;
}

// acc[i] = kHalf + sum_t src_t[i] * k[t] over n values, for the n_taps rows src_t at
// src + t * step: int16 x int16 -> int32 products, which vectorise everywhere.
LOADSCOPE_HOT void filter_rows(int32_t* __restrict acc, const uint8_t* __restrict src, size_t step,
                               const int16_t* k, int n_taps, size_t n) {
  if (n_taps == 0) {
    std::fill(acc, acc + n, kHalf);
    return;
  }
  const int16_t k0 = k[0];
  for (size_t i = 0; i < n; ++i) acc[i] = kHalf + static_cast<int16_t>(src[i]) * k0;
  for (int t = 1; t < n_taps; ++t) {
    const uint8_t* __restrict row = src + t * step;
    const int16_t kt = k[t];
    for (size_t i = 0; i < n; ++i) acc[i] += static_cast<int16_t>(row[i]) * kt;
  }
}
}  // namespace

// Pillow's precompute_coeffs (libImaging/Resample.c), with int16 weights.
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
    xmax = std::clamp(xmax - xmin, 0, c.ksize);
    double ww = 0.0;
    for (int x = 0; x < xmax; ++x) {
      w[x] = bilinear((x + xmin - center + 0.5) * ss);
      ww += w[x];
    }
    int16_t* k = &c.k[static_cast<size_t>(xx) * c.ksize];
    for (int x = 0; x < xmax; ++x) {
      const double v = ww != 0.0 ? w[x] / ww : w[x];
      k[x] = static_cast<int16_t>(std::lround(v * (1 << kBits)));
    }
    c.bounds[xx * 2] = xmin;
    c.bounds[xx * 2 + 1] = xmax;
  }
}

namespace {

// Note [transposes]
// Both passes leave their results transposed (pass 1 as columns of tmp, pass 2 as columns of the
// output), and moving those bytes one by one cost as much as the filtering. They move as 8 x 16
// byte blocks instead: 8 rows of 16 bytes in, 16 groups of 8 bytes out (group k holds byte k
// of each row, in row order); with SSE2, 24 unpacks.
using Groups = uint8_t[16][8];

inline void transpose_8x16(const uint8_t* const rows[8], size_t at, Groups out) {
#if defined(__SSE2__)
  __m128i a[8];
  for (int r = 0; r < 8; ++r)
    a[r] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[r] + at));
  __m128i b[8], c[8];
  for (int i = 0; i < 4; ++i) {  // bytes of rows 2i, 2i+1 interleaved
    b[2 * i] = _mm_unpacklo_epi8(a[2 * i], a[2 * i + 1]);
    b[2 * i + 1] = _mm_unpackhi_epi8(a[2 * i], a[2 * i + 1]);
  }
  for (int i = 0; i < 2; ++i) {  // then 2-byte pairs: rows 4i..4i+3 per byte
    c[4 * i] = _mm_unpacklo_epi16(b[4 * i], b[4 * i + 2]);
    c[4 * i + 1] = _mm_unpackhi_epi16(b[4 * i], b[4 * i + 2]);
    c[4 * i + 2] = _mm_unpacklo_epi16(b[4 * i + 1], b[4 * i + 3]);
    c[4 * i + 3] = _mm_unpackhi_epi16(b[4 * i + 1], b[4 * i + 3]);
  }
  for (int i = 0; i < 4; ++i) {  // then 4-byte quads: all 8 rows, two groups a register
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out[4 * i]), _mm_unpacklo_epi32(c[i], c[i + 4]));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out[4 * i + 2]),
                     _mm_unpackhi_epi32(c[i], c[i + 4]));
  }
#else
  for (int k = 0; k < 16; ++k) {
    for (int r = 0; r < 8; ++r) out[k][r] = rows[r][at + k];
  }
#endif
}

}  // namespace

void Resampler::resample(const uint8_t* src, int width, int height, size_t stride, const Box& box,
                         uint8_t* dst, int out_w, int out_h, Layout layout, bool flip) {
  precompute(width, box.x0, box.x1, out_w, horizontal_);
  precompute(height, box.y0, box.y1, out_h, vertical_);
  // Only the source columns some horizontal tap reads take part in the vertical pass.
  int x_first = width, x_last = 0;
  for (int x = 0; x < out_w; ++x) {
    const int n = horizontal_.bounds[2 * x + 1];
    if (n == 0) continue;
    x_first = std::min(x_first, horizontal_.bounds[2 * x]);
    x_last = std::max(x_last, horizontal_.bounds[2 * x] + n);
  }
  if (x_first >= x_last) x_first = x_last = 0;
  const int cols = x_last - x_first;
  // A column of tmp holds the R, G and B planes of one source column after the vertical pass,
  // each padded to a multiple of 16 rows for the transposes (the padding is filtered in pass 2
  // and never written out).
  const size_t h_pad = (static_cast<size_t>(out_h) + 15) / 16 * 16;
  const size_t col_stride = 3 * h_pad;
  const size_t row_values = static_cast<size_t>(cols) * 3;
  const size_t row_pad = (row_values + 15) / 16 * 16;
  temp_.resize(std::max<size_t>(static_cast<size_t>(cols) * col_stride, 1));
  accum_.resize(std::max(row_values, col_stride));
  block_.resize(kBlock * std::max(row_pad, col_stride));
  static_assert(kBlock == 8, "the transposes move 8 rows");
  Groups groups;

  // 1. Vertical: output rows from source rows, 8 at a time, then stored transposed. A last block
  // of fewer rows transposes stale rows too, into tmp's padding.
  const uint8_t* rows1[kBlock];
  for (int r = 0; r < kBlock; ++r) rows1[r] = block_.data() + r * row_pad;
  for (int y0 = 0; y0 < out_h; y0 += kBlock) {
    const int rows = std::min(kBlock, out_h - y0);
    for (int r = 0; r < rows; ++r) {
      const int yy = y0 + r;
      const int ymin = vertical_.bounds[2 * yy], n = vertical_.bounds[2 * yy + 1];
      const int16_t* k = &vertical_.k[static_cast<size_t>(yy) * vertical_.ksize];
      filter_rows(accum_.data(), src + static_cast<size_t>(ymin) * stride + 3 * x_first, stride, k,
                  n, row_values);
      narrow(accum_.data(), block_.data() + r * row_pad, row_values);
    }
    for (size_t at = 0; at < row_values; at += 16) {
      transpose_8x16(rows1, at, groups);
      const size_t n = std::min<size_t>(16, row_values - at);
      for (size_t g = 0; g < n; ++g) {  // byte at + g of a row: channel c of source column x
        const size_t x = (at + g) / 3, c = (at + g) % 3;
        std::memcpy(temp_.data() + x * col_stride + c * h_pad + y0, groups[g], 8);
      }
    }
  }

  // 2. Horizontal: output columns from columns of tmp, 8 at a time, then written out.
  const size_t plane = static_cast<size_t>(out_w) * out_h;
  // A group of the second transpose is one output row's ncols pixels of one channel. Mirrored,
  // the columns go in reverse order, so that a group's bytes are the row's left to right;
  // unused rows (ncols < 8) are stale and never stored.
  const uint8_t* rows2[kBlock];
  for (int j = 0; j < kBlock; ++j)
    rows2[flip ? kBlock - 1 - j : j] = block_.data() + j * col_stride;
  for (int x0 = 0; x0 < out_w; x0 += kBlock) {
    const int ncols = std::min(kBlock, out_w - x0);
    for (int j = 0; j < ncols; ++j) {
      const int xx = x0 + j;
      const int xmin = horizontal_.bounds[2 * xx] - x_first, n = horizontal_.bounds[2 * xx + 1];
      const int16_t* k = &horizontal_.k[static_cast<size_t>(xx) * horizontal_.ksize];
      filter_rows(accum_.data(), temp_.data() + static_cast<size_t>(xmin) * col_stride, col_stride,
                  k, n, col_stride);
      narrow(accum_.data(), block_.data() + j * col_stride, col_stride);
    }
    const size_t x_at = flip ? static_cast<size_t>(out_w - x0 - ncols) : static_cast<size_t>(x0);
    const size_t skip = flip ? kBlock - ncols : 0;
    for (size_t y0 = 0; y0 < static_cast<size_t>(out_h); y0 += 16) {
      const size_t n = std::min<size_t>(16, out_h - y0);
      if (layout == Layout::kCHW) {
        for (int c = 0; c < 3; ++c) {
          transpose_8x16(rows2, c * h_pad + y0, groups);
          uint8_t* d = dst + c * plane + y0 * out_w + x_at;
          if (ncols == kBlock) {
            for (size_t g = 0; g < n; ++g) std::memcpy(d + g * out_w, groups[g], kBlock);
          } else {
            for (size_t g = 0; g < n; ++g) std::memcpy(d + g * out_w, groups[g] + skip, ncols);
          }
        }
      } else {
        Groups rgb[3];
        for (int c = 0; c < 3; ++c) transpose_8x16(rows2, c * h_pad + y0, rgb[c]);
        for (size_t g = 0; g < n; ++g) {
          uint8_t* d = dst + ((y0 + g) * out_w + x_at) * 3;
          for (int i = 0; i < ncols; ++i) {
            for (int c = 0; c < 3; ++c) d[3 * i + c] = rgb[c][g][skip + i];
          }
        }
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
        case 2:
          sx = w - 1 - x;
          sy = y;
          break;
        case 3:
          sx = w - 1 - x;
          sy = h - 1 - y;
          break;
        case 4:
          sx = x;
          sy = h - 1 - y;
          break;
        case 5:
          sx = y;
          sy = x;
          break;
        case 6:
          sx = y;
          sy = h - 1 - x;
          break;
        case 7:
          sx = w - 1 - y;
          sy = h - 1 - x;
          break;
        case 8:
          sx = w - 1 - y;
          sy = x;
          break;
        default:
          sx = x;
          sy = y;
          break;
      }
      std::memcpy(out + 3 * x, src + static_cast<size_t>(sy) * stride + 3 * sx, 3);
    }
  }
}

}  // namespace loadscope::augment
