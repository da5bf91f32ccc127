#include "loadscope/augment/pixels.h"

#include <cstring>

namespace loadscope::augment {

size_t pixel_bytes(PixelType type) {
  switch (type) {
    case PixelType::kUint8: return 1;
    case PixelType::kFloat32: return 4;
    case PixelType::kFloat16:
    case PixelType::kBFloat16: return 2;
  }
  return 1;
}

uint16_t float_to_bfloat16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u)
    return static_cast<uint16_t>((bits >> 16) | 0x40u);  // NaN
  const uint32_t lsb = (bits >> 16) & 1u;
  return static_cast<uint16_t>((bits + 0x7fffu + lsb) >> 16);
}

uint16_t float_to_half(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t abs = bits & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00u;           // NaN
  if (abs >= 0x477ff000u) return sign | 0x7c00u;          // rounds to >= 65520: infinity
  if (abs < 0x38800000u) {                                // below 2^-14: subnormal or zero
    if (abs < 0x33000000u) return sign;                   // below half the smallest subnormal
    const uint32_t mant = (abs & 0x7fffffu) | 0x800000u;  // implicit bit
    const int shift = 126 - static_cast<int>(abs >> 23);  // to units of 2^-24
    const uint32_t q = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    const uint32_t r = q + ((rem > half || (rem == half && (q & 1u))) ? 1u : 0u);
    return static_cast<uint16_t>(sign | r);
  }
  // Normal: rebias the exponent (127 -> 15), round the 23-bit mantissa to 10 bits.
  const uint32_t rebased = abs - (112u << 23);
  const uint32_t lsb = (rebased >> 13) & 1u;
  return static_cast<uint16_t>(sign | ((rebased + 0xfffu + lsb) >> 13));
}

PixelConverter::PixelConverter(PixelType type, const std::array<double, 3>& mean,
                               const std::array<double, 3>& std)
    : type_(type) {
  for (int c = 0; c < 3; ++c) {
    for (int v = 0; v < 256; ++v) {
      const float x = static_cast<float>((v / 255.0 - mean[c]) / std[c]);
      f32_[c][v] = x;
      u16_[c][v] = type == PixelType::kBFloat16 ? float_to_bfloat16(x) : float_to_half(x);
    }
  }
}

namespace {

template <typename T, typename Table>
void apply(const Table& table, const uint8_t* src, size_t pixels, bool chw, T* dst) {
  if (chw) {
    for (int c = 0; c < 3; ++c) {
      const auto& t = table[c];
      const uint8_t* s = src + c * pixels;
      T* d = dst + c * pixels;
      for (size_t i = 0; i < pixels; ++i) d[i] = t[s[i]];
    }
    return;
  }
  const auto &r = table[0], &g = table[1], &b = table[2];
  for (size_t i = 0; i < pixels; ++i) {
    dst[3 * i] = r[src[3 * i]];
    dst[3 * i + 1] = g[src[3 * i + 1]];
    dst[3 * i + 2] = b[src[3 * i + 2]];
  }
}

}  // namespace

void PixelConverter::convert(const uint8_t* src, size_t pixels, bool chw, void* dst) const {
  if (type_ == PixelType::kFloat32) {
    apply(f32_, src, pixels, chw, static_cast<float*>(dst));
  } else {
    apply(u16_, src, pixels, chw, static_cast<uint16_t*>(dst));
  }
}

}  // namespace loadscope::augment
