#include "loadscope/augment/color.h"

#include <algorithm>
#include <cmath>
#include <cstring>

// Results must equal torchvision's float32 ops bit for bit: CMakeLists.txt compiles this file
// with -ffp-contract=off (no fused multiply-adds).

namespace loadscope::augment {

namespace {

// torch's uint8 -> float32 promotion of `scalar * tensor` and `.to(uint8)`: the Python float
// becomes a float32 and the result is truncated toward zero after clamping to [0, 255].
inline uint8_t to_u8(float x) {
  return static_cast<uint8_t>(std::min(std::max(x, 0.0f), 255.0f));
}

// torchvision's rgb_to_grayscale for uint8: (0.2989 r + 0.587 g + 0.114 b), truncated.
inline uint8_t gray(uint8_t r, uint8_t g, uint8_t b) {
  const float x = 0.2989f * static_cast<float>(r) + 0.587f * static_cast<float>(g) +
                  0.114f * static_cast<float>(b);
  return static_cast<uint8_t>(x);
}

// _blend(img1, img2, ratio) = (ratio * img1 + (1 - ratio) * img2).clamp(0, 255).to(uint8)
struct Blend {
  float a, b;
  explicit Blend(double ratio) : a(static_cast<float>(ratio)), b(static_cast<float>(1.0 - ratio)) {}
  uint8_t operator()(uint8_t x, float other) const {
    return to_u8(a * static_cast<float>(x) + b * other);
  }
};

template <typename F>
void each(const RgbView& img, F&& f) {
  uint8_t *r = img.r, *g = img.g, *b = img.b;
  for (size_t i = 0; i < img.pixels; ++i, r += img.step, g += img.step, b += img.step)
    f(*r, *g, *b);
}

}  // namespace

void adjust_brightness(const RgbView& img, double factor) {
  const Blend blend(factor);
  each(img, [&](uint8_t& r, uint8_t& g, uint8_t& b) {
    r = blend(r, 0.0f);
    g = blend(g, 0.0f);
    b = blend(b, 0.0f);
  });
}

void adjust_contrast(const RgbView& img, double factor) {
  // The mean of the truncated gray levels: integers, so a float32 sum is exact below 2^24.
  uint64_t sum = 0;
  each(img, [&](uint8_t& r, uint8_t& g, uint8_t& b) { sum += gray(r, g, b); });
  const float mean = static_cast<float>(sum) / static_cast<float>(img.pixels);
  const Blend blend(factor);
  each(img, [&](uint8_t& r, uint8_t& g, uint8_t& b) {
    r = blend(r, mean);
    g = blend(g, mean);
    b = blend(b, mean);
  });
}

void adjust_saturation(const RgbView& img, double factor) {
  const Blend blend(factor);
  each(img, [&](uint8_t& r, uint8_t& g, uint8_t& b) {
    const float l = gray(r, g, b);
    r = blend(r, l);
    g = blend(g, l);
    b = blend(b, l);
  });
}

void to_grayscale(const RgbView& img) {
  each(img, [&](uint8_t& r, uint8_t& g, uint8_t& b) { r = g = b = gray(r, g, b); });
}

namespace {

// The hue op on n pixels in float arrays, written without branches so that the compiler can
// vectorise it (the clones: AVX2 and SSE4.1 where the CPU has them, for vector floor). Every
// operation is the IEEE one torch does, in its order: the results do not depend on the clone.
// fmod(x, 1) for the x here (non-negative, or > -1) is x - trunc(x), which is exact.
// Clones are ifuncs, resolved while the program is relocated: before a sanitizer's runtime is
// up, which crashes under TSan. Sanitizer builds get the plain version.
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define LOADSCOPE_CLONES
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer) || \
    __has_feature(memory_sanitizer)
#define LOADSCOPE_CLONES
#else
#define LOADSCOPE_CLONES __attribute__((target_clones("avx2", "sse4.1", "default")))
#endif
#else
#define LOADSCOPE_CLONES __attribute__((target_clones("avx2", "sse4.1", "default")))
#endif

LOADSCOPE_CLONES
void hue_block(float* __restrict r, float* __restrict g, float* __restrict b, int n, float hue) {
  const float scale = static_cast<float>(255.0 + 1.0 - 1e-3);
  for (int k = 0; k < n; ++k) {
    // convert_image_dtype(uint8 -> float32), then _rgb2hsv, op for op.
    const float R = r[k] / 255.0f, G = g[k] / 255.0f, B = b[k] / 255.0f;
    const float maxc = std::max(std::max(R, G), B), minc = std::min(std::min(R, G), B);
    const bool eqc = maxc == minc;
    const float cr = maxc - minc;
    const float s = cr / (eqc ? 1.0f : maxc);
    const float div = eqc ? 1.0f : cr;
    const float rc = (maxc - R) / div, gc = (maxc - G) / div, bc = (maxc - B) / div;
    const float hr = (maxc == R) ? (bc - gc) : 0.0f;
    const float hg = (maxc == G && maxc != R) ? (2.0f + rc - bc) : 0.0f;
    const float hb = (maxc != G && maxc != R) ? (4.0f + gc - rc) : 0.0f;
    const float t0 = ((hr + hg) + hb) / 6.0f + 1.0f;
    float h = t0 - std::trunc(t0);
    // (h + hue) % 1.0: torch.remainder, fmod moved to the divisor's sign.
    const float t1 = h + hue;
    h = t1 - std::trunc(t1);
    h = h < 0.0f ? h + 1.0f : h;
    // _hsv2rgb
    const float v = maxc;
    const float h6 = h * 6.0f;
    const float fl = std::floor(h6);
    const float f = h6 - fl;
    const float i = fl == 6.0f ? 0.0f : fl;  // int(fl) % 6 for fl in 0..6
    const float p = std::min(std::max(v * (1.0f - s), 0.0f), 1.0f);
    const float q = std::min(std::max(v * (1.0f - s * f), 0.0f), 1.0f);
    const float t = std::min(std::max(v * (1.0f - s * (1.0f - f)), 0.0f), 1.0f);
    // (r, g, b) by sector: 0 (v,t,p) 1 (q,v,p) 2 (p,v,t) 3 (p,q,v) 4 (t,p,v) 5 (v,p,q)
    const float o0 = i == 0.0f || i == 5.0f ? v : i == 1.0f ? q : i == 4.0f ? t : p;
    const float o1 = i == 1.0f || i == 2.0f ? v : i == 0.0f ? t : i == 3.0f ? q : p;
    const float o2 = i == 3.0f || i == 4.0f ? v : i == 2.0f ? t : i == 5.0f ? q : p;
    // convert_image_dtype(float32 -> uint8): x * (255 + 1 - 1e-3), truncated.
    r[k] = std::trunc(o0 * scale);
    g[k] = std::trunc(o1 * scale);
    b[k] = std::trunc(o2 * scale);
  }
}

}  // namespace

void adjust_hue(const RgbView& img, double factor) {
  const float hue = static_cast<float>(factor);
  constexpr int kBlock = 256;
  float r[kBlock], g[kBlock], b[kBlock];
  for (size_t start = 0; start < img.pixels; start += kBlock) {
    const int n = static_cast<int>(std::min<size_t>(kBlock, img.pixels - start));
    const ptrdiff_t base = static_cast<ptrdiff_t>(start) * img.step;
    for (int k = 0; k < n; ++k) {
      r[k] = img.r[base + k * img.step];
      g[k] = img.g[base + k * img.step];
      b[k] = img.b[base + k * img.step];
    }
    hue_block(r, g, b, n, hue);
    for (int k = 0; k < n; ++k) {
      img.r[base + k * img.step] = static_cast<uint8_t>(r[k]);
      img.g[base + k * img.step] = static_cast<uint8_t>(g[k]);
      img.b[base + k * img.step] = static_cast<uint8_t>(b[k]);
    }
  }
}

ColorDraw draw_color(const ColorSpec& spec, Rng& rng) {
  ColorDraw d;
  if (spec.p <= 0.0) return d;
  d.apply = spec.p >= 1.0 || rng.uniform() < spec.p;
  if (!d.apply) return d;
  for (int k = 3; k > 0; --k) {  // Fisher-Yates
    const int j = static_cast<int>(rng.below(static_cast<uint64_t>(k) + 1));
    std::swap(d.order[k], d.order[j]);
  }
  for (int k = 0; k < 4; ++k) d.factor[k] = rng.uniform(spec.lo[k], spec.hi[k]);
  for (int k = 0; k < 4; ++k) {  // an op whose range is the identity is skipped, as None is
    const double identity = k == 3 ? 0.0 : 1.0;
    if (spec.lo[k] == identity && spec.hi[k] == identity) d.factor[k] = identity;
  }
  return d;
}

void apply_color(const RgbView& img, const ColorDraw& draw) {
  if (!draw.apply) return;
  for (int k : draw.order) {
    const double f = draw.factor[k];
    switch (k) {
      case 0:
        if (f != 1.0) adjust_brightness(img, f);
        break;
      case 1:
        if (f != 1.0) adjust_contrast(img, f);
        break;
      case 2:
        if (f != 1.0) adjust_saturation(img, f);
        break;
      default:
        if (f != 0.0) adjust_hue(img, f);
        break;
    }
  }
}

EraseBox draw_erase(const EraseSpec& spec, int height, int width, Rng& rng) {
  EraseBox box;
  if (spec.p <= 0.0 || !(spec.p >= 1.0 || rng.uniform() < spec.p)) return box;
  const double area = static_cast<double>(height) * width;
  const double log_lo = std::log(spec.ratio_min), log_hi = std::log(spec.ratio_max);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double erase_area = area * rng.uniform(spec.scale_min, spec.scale_max);
    const double aspect = std::exp(rng.uniform(log_lo, log_hi));
    const int h = static_cast<int>(std::nearbyint(std::sqrt(erase_area * aspect)));
    const int w = static_cast<int>(std::nearbyint(std::sqrt(erase_area / aspect)));
    if (!(h < height && w < width)) continue;
    box.erase = true;
    box.height = h;
    box.width = w;
    box.top = static_cast<int>(rng.below(static_cast<uint64_t>(height - h) + 1));
    box.left = static_cast<int>(rng.below(static_cast<uint64_t>(width - w) + 1));
    return box;
  }
  return box;  // torchvision returns the image unchanged after 10 misses
}

namespace {

template <typename T>
void fill(T* image, int height, int width, bool chw, const EraseBox& box, const T value[3]) {
  const size_t plane = static_cast<size_t>(height) * width;
  for (int y = box.top; y < box.top + box.height; ++y) {
    for (int x = box.left; x < box.left + box.width; ++x) {
      const size_t px = static_cast<size_t>(y) * width + x;
      for (int c = 0; c < 3; ++c) {
        image[chw ? c * plane + px : 3 * px + c] = value[c];
      }
    }
  }
}

}  // namespace

void erase(void* image, PixelType type, int height, int width, bool chw, const EraseBox& box,
           const std::array<double, 3>& value) {
  if (!box.erase) return;
  switch (type) {
    case PixelType::kUint8: {
      uint8_t v[3];
      for (int c = 0; c < 3; ++c) v[c] = static_cast<uint8_t>(std::clamp(value[c], 0.0, 255.0));
      fill(static_cast<uint8_t*>(image), height, width, chw, box, v);
      break;
    }
    case PixelType::kFloat32: {
      float v[3];
      for (int c = 0; c < 3; ++c) v[c] = static_cast<float>(value[c]);
      fill(static_cast<float*>(image), height, width, chw, box, v);
      break;
    }
    case PixelType::kFloat16:
    case PixelType::kBFloat16: {
      uint16_t v[3];
      for (int c = 0; c < 3; ++c) {
        const float f = static_cast<float>(value[c]);
        v[c] = type == PixelType::kFloat16 ? float_to_half(f) : float_to_bfloat16(f);
      }
      fill(static_cast<uint16_t*>(image), height, width, chw, box, v);
      break;
    }
  }
}

}  // namespace loadscope::augment
