#pragma once
// The last step of an image: uint8 RGB from the resampler into the output element type, with
// torchvision's ToTensor + Normalize semantics, (v / 255 - mean[c]) / std[c].
//
// Note [float output by table]
// A uint8 channel has 256 values, so the whole conversion is a table of 3 x 256 results,
// computed once per field in double precision and rounded once (to float32, then to the
// 16-bit type with round-to-nearest-even: the rounding torch's .to(dtype) does). Per pixel it
// is then one load per channel, from an image the resampler has just written (cache-hot), so
// the cost is the 2-4x larger store into the batch; the benchmark in docs/benchmarks.md
// measures it against the same conversion done by torch on the batch.

#include <array>
#include <cstddef>
#include <cstdint>

namespace loadscope::augment {

enum class PixelType { kUint8, kFloat32, kFloat16, kBFloat16 };

size_t pixel_bytes(PixelType type);

// float32 -> IEEE binary16 / bfloat16 bits, round to nearest, ties to even (NaN stays NaN).
uint16_t float_to_half(float value);
uint16_t float_to_bfloat16(float value);

class PixelConverter {
 public:
  PixelConverter() = default;
  // type must not be kUint8; std[c] != 0.
  PixelConverter(PixelType type, const std::array<double, 3>& mean,
                 const std::array<double, 3>& std);

  // `pixels` RGB pixels of src (planar [3][pixels] when chw, else interleaved) into dst, laid
  // out the same way, pixel_bytes(type) bytes per element.
  void convert(const uint8_t* src, size_t pixels, bool chw, void* dst) const;

 private:
  PixelType type_ = PixelType::kFloat32;
  std::array<std::array<float, 256>, 3> f32_{};
  std::array<std::array<uint16_t, 256>, 3> u16_{};
};

}  // namespace loadscope::augment
