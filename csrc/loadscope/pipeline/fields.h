#pragma once
// What a loader produces per sample: a list of fields, each taken from one member of the
// sample (the first of `keys` that exists) and turned into a fixed-size tensor slot (images,
// integers) or a string (text, JSON, raw bytes).

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "loadscope/augment/color.h"
#include "loadscope/augment/pixels.h"
#include "loadscope/augment/randaugment.h"
#include "loadscope/core/engine.h"
#include "loadscope/core/rng.h"
#include "loadscope/io/prefetch.h"
#include "loadscope/pipeline/audio_field.h"
#include "loadscope/pipeline/clips.h"
#include "loadscope/pipeline/outputs.h"

namespace loadscope::pipeline {

enum class CropMode { kRandomResized, kCenter, kResize };
enum class FieldKind { kImage, kInt, kText, kJson, kBytes, kVideo, kAudio };

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
  // Per-sample ops after crop and flip: RandAugment, colour jitter, grayscale, then the dtype
  // conversion, then erasing (the order of torchvision's and timm's recipes: RandAugment or
  // ColorJitter, RandomGrayscale, ToTensor, Normalize, RandomErasing). Images only.
  augment::RandAugmentSpec randaugment;  // before the colour ops
  augment::ColorSpec color;
  double grayscale = 0.0;  // probability
  augment::EraseSpec erase;
};

// A video field: K clips of T frames, each clip with one spatial crop (ImageSpec's size, crop,
// flip and layout; dct_scaling and exif do not apply).
struct VideoSpec {
  ClipSpec clip;
  int stream = -1;          // container stream index, -1: FFmpeg's best video stream
  int decoder_threads = 1;  // FFmpeg's own threads per decode (the engine parallelises videos)
  bool rotate = true;       // apply the display-matrix rotation: frames come out upright
  bool color_tags = true;   // honour colour-matrix and range tags, as the ffmpeg CLI does
  // A member (a manifest column, a tar member) holding the clip's start in seconds from the
  // first frame, instead of a drawn one (VideoClip(start=)): a plan given from outside.
  std::string start_key;
};

struct FieldSpec {
  std::string name;               // output name
  std::vector<std::string> keys;  // member names to try, in order
  FieldKind kind = FieldKind::kImage;
  ImageSpec image;  // kImage, and the frame geometry of kVideo
  VideoSpec video;
  AudioSpec audio;
  // A missing member (for audio also a file without an audio stream) gives zeros and presence
  // 0, not an error.
  bool optional = false;
};

// What a field puts into a batch, in order: its kind's outputs, then ".present" (bool) when
// optional. Images: "" pixels. Ints: "" int64. Text/JSON/bytes: "" a string each. Videos: ""
// pixels, ".time" (float64 seconds a frame), ".meta" (JSON). Audio: audio_outputs().
std::vector<Output> outputs_of(const FieldSpec& f);

// Where a field's outputs live in a batch: `at[k]` is output k's index into the batch's
// fixed-size or string area; `fixed` and `strings` list those indices in output order.
struct FieldSlots {
  std::vector<Output> outputs;
  std::vector<int> at;
  std::vector<int> fixed;
  std::vector<int> strings;
};

// The integer options of fields and their allowed ranges, inclusive. validate() enforces them,
// and the Python field classes check arguments against the same table (_native.option_bounds),
// so that both say the same and a bad argument fails where it is given.
struct IntBound {
  const char* name;
  int64_t min, max;
};
inline constexpr IntBound kIntBounds[] = {
    {"size", 1, 16384},              // each side of an output image or frame
    {"frames", 1, 100000},           // frames per clip
    {"clips", 1, 1000},              // clips per video
    {"decoder_threads", 0, 64},      // FFmpeg threads per video (0: FFmpeg's choice)
    {"max_pixels", 1, INT64_MAX},    // decoded pixels an image or frame may have
    {"num_ops", 0, 16},              // RandAugment operations per image
    {"num_magnitude_bins", 2, 1000}  // RandAugment magnitude bins
};
const IntBound& int_bound(const char* name);

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
  // Remote members the fields will read are fetched ahead (io/prefetch.h).
  void prepare(std::vector<Sample>& samples, const std::atomic<bool>& stop,
               int64_t stride) override;
  void cancel() override;
  ~FieldProcessor() override;

  const std::vector<FieldSpec>& fields() const { return fields_; }
  const FieldSlots& slots(size_t field) const { return slots_[field]; }

 private:
  void process_field(size_t index, Sample& sample, Batch& batch, int slot, SampleContext& ctx,
                     std::vector<ClipSpan>& spans);
  void process_video(const FieldSpec& f, size_t index, const Member& m, const std::string& bytes,
                     Sample& sample, Batch& batch, int slot, SampleContext& ctx, ClipSpan& span);
  void process_audio(const FieldSpec& f, size_t index, const Member& m, const std::string& bytes,
                     Sample& sample, Batch& batch, int slot, SampleContext& ctx,
                     const std::vector<ClipSpan>& spans);

  std::vector<FieldSpec> fields_;
  std::vector<FieldSlots> slots_;
  std::vector<size_t> order_;    // processing order: aligned audio after its video
  std::vector<int> aligned_to_;  // per field: the video field an audio field aligns to, -1
  std::vector<size_t> fixed_bytes_;
  std::vector<augment::PixelConverter> converters_;  // per field; used where dtype != uint8
  size_t num_strings_ = 0;
  std::mutex prefetcher_mutex_;
  std::unique_ptr<io::Prefetcher> prefetcher_;  // made on the first remote member
  int prefetcher_pid_ = 0;                      // by this process (a fork gets its own)
  int64_t batches_in_run_ = 0;                  // prepared since the run started
};

// Where decode_image spent its time, when asked.
struct DecodeSplit {
  uint64_t decode_ns = 0;   // parsing and decoding (the region) into RGB
  uint64_t augment_ns = 0;  // orientation, crop, resampling into the slot
};

// Decodes one encoded image into an output slot per `spec`; exposed for tests and the
// decode-only benchmark. Returns a decoder warning ("" if none). Throws DecodeFailure.
std::string decode_image(const uint8_t* data, size_t size, const ImageSpec& spec, Rng& rng,
                         uint8_t* dst, DecodeSplit* split = nullptr);

// Checks that bytes are a syntactically valid JSON text (RFC 8259), nesting at most 256 deep.
bool is_valid_json(const std::string& text, std::string* reason);
bool is_valid_utf8(const std::string& text);

}  // namespace loadscope::pipeline
