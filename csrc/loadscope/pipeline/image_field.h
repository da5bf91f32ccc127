#pragma once
// The Image field: one encoded image (a format of decode/formats.h, sniffed from its bytes)
// decoded — only the region the crop needs where the codec allows — cropped, resized and
// augmented straight into its batch slot.

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "loadscope/augment/geometry.h"
#include "loadscope/augment/ops.h"
#include "loadscope/augment/pixels.h"
#include "loadscope/core/rng.h"
#include "loadscope/pipeline/field.h"

namespace loadscope::pipeline {

enum class CropMode { kRandomResized, kCenter, kResize };

struct ImageSpec {
  int height = 224, width = 224;  // output size
  CropMode crop = CropMode::kRandomResized;
  double scale_min = 0.08, scale_max = 1.0;  // RandomResizedCrop
  double ratio_min = 3.0 / 4.0, ratio_max = 4.0 / 3.0;
  int resize = 0;              // kCenter: shorter side before the crop (0 = max(height, width))
  double flip = 0.0;           // probability of a horizontal flip
  bool channels_last = false;  // [H, W, 3] instead of [3, H, W]
  bool exif = true;            // apply EXIF orientation
  bool dct_scaling = true;     // decode JPEGs at 1/8, 1/4 or 1/2 when the crop allows
  // Images with more pixels fail before any decoding (a 600-byte JPEG can claim 20000x20000):
  // Pillow's decompression-bomb limit by default.
  int64_t max_pixels = 178956970;
  // The output element type; other than uint8: (v / 255 - mean[c]) / std[c] (images only).
  augment::PixelType dtype = augment::PixelType::kUint8;
  std::array<double, 3> mean{0.0, 0.0, 0.0};
  std::array<double, 3> std{1.0, 1.0, 1.0};
  // Per-sample ops after crop and flip, in order (augment/ops.h). Images only.
  std::vector<augment::OpCall> ops;
};

// Checks an image's (or a video frame's: `video`) geometry and pixel options; throws ConfigError
// naming the field.
void validate_image(const std::string& field, const ImageSpec& spec, bool video);

// The crop and flip of one image (or clip) of size w x h, drawn from `rng`.
augment::CropPlan make_plan(const ImageSpec& spec, int w, int h, Rng& rng);

// Throws DecodeFailure when w x h exceeds spec.max_pixels.
void check_pixels(int64_t w, int64_t h, const ImageSpec& spec);

// Where decode_image spent its time, when asked.
struct DecodeSplit {
  uint64_t decode_ns = 0;   // parsing and decoding (the region) into RGB
  uint64_t augment_ns = 0;  // orientation, crop, resampling into the slot
};

// Decodes one encoded image into an output slot per `spec`; exposed for tests and the
// decode-only benchmark. Returns a decoder warning ("" if none). Throws DecodeFailure.
std::string decode_image(const uint8_t* data, size_t size, const ImageSpec& spec, Rng& rng,
                         uint8_t* dst, DecodeSplit* split = nullptr);

class ImageField : public Field {
 public:
  explicit ImageField(ImageSpec spec);
  const ImageSpec& spec() const { return spec_; }
  std::vector<Output> outputs() const override;
  telemetry::Kind kind() const override;
  void validate(const std::string& name) const override { validate_image(name, spec_, false); }
  void fill(FieldCall& call) const override;
  size_t scratch_bytes() const override;

 private:
  ImageSpec spec_;
  augment::PixelConverter converter_;  // used where dtype != uint8
};

}  // namespace loadscope::pipeline
