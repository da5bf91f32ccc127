#pragma once
// What a loader produces per sample: a list of fields, each taken from one member of the
// sample (the first of `keys` that exists) and turned into a fixed-size tensor slot (images,
// integers) or a string (text, JSON, raw bytes).

#include <memory>
#include <string>
#include <vector>

#include "loadscope/core/engine.h"
#include "loadscope/core/rng.h"

namespace loadscope::pipeline {

enum class CropMode { kRandomResized, kCenter, kResize };
enum class FieldKind { kImage, kInt, kText, kJson, kBytes };

struct ImageSpec {
  int height = 224, width = 224;  // output size
  CropMode crop = CropMode::kRandomResized;
  double scale_min = 0.08, scale_max = 1.0;           // RandomResizedCrop
  double ratio_min = 3.0 / 4.0, ratio_max = 4.0 / 3.0;
  int resize = 0;               // kCenter: shorter side before the crop (0 = max(height, width))
  double flip = 0.0;            // probability of a horizontal flip
  bool channels_last = false;   // [H, W, 3] instead of [3, H, W]
  bool exif = true;             // apply EXIF orientation
  bool dct_scaling = true;      // decode JPEGs at 1/8, 1/4 or 1/2 when the crop allows
  // Images with more pixels fail before any decoding (a 600-byte JPEG can claim 20000x20000):
  // Pillow's decompression-bomb limit by default.
  int64_t max_pixels = 178956970;
};

struct FieldSpec {
  std::string name;               // output name
  std::vector<std::string> keys;  // member names to try, in order
  FieldKind kind = FieldKind::kImage;
  ImageSpec image;
};

// Checks a field list; throws ConfigError naming the field and what is allowed.
void validate(const std::vector<FieldSpec>& fields);

// The SampleProcessor for a field list. Thread-safe: per-thread codec state lives in
// thread-local scratch.
class FieldProcessor : public SampleProcessor {
 public:
  explicit FieldProcessor(std::vector<FieldSpec> fields);
  std::vector<size_t> fixed_bytes_per_sample() const override;
  size_t num_string_fields() const override { return num_strings_; }
  void process(Sample& sample, Batch& batch, int slot, SampleContext& ctx) override;

  // For each field: its index among fixed-size fields or among string fields.
  const std::vector<FieldSpec>& fields() const { return fields_; }
  int slot_of(size_t field) const { return slot_of_[field]; }

 private:
  std::vector<FieldSpec> fields_;
  std::vector<int> slot_of_;
  size_t num_strings_ = 0;
};

// Decodes one encoded image into an output slot per `spec`; exposed for tests and the
// decode-only benchmark. Returns a decoder warning ("" if none). Throws DecodeFailure.
std::string decode_image(const uint8_t* data, size_t size, const ImageSpec& spec, Rng& rng,
                         uint8_t* dst);

// Checks that bytes are a syntactically valid JSON text (RFC 8259), nesting at most 256 deep.
bool is_valid_json(const std::string& text, std::string* reason);
bool is_valid_utf8(const std::string& text);

}  // namespace loadscope::pipeline
