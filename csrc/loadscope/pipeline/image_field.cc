#include "loadscope/pipeline/image_field.h"

#include <algorithm>
#include <cmath>
#include <memory>

#include "loadscope/augment/resample.h"
#include "loadscope/core/error.h"
#include "loadscope/decode/ffmpeg/image_decoder.h"
#include "loadscope/decode/formats.h"
#include "loadscope/decode/image.h"
#include "loadscope/decode/jpeg/jpeg_decoder.h"
#include "loadscope/decode/webp/webp_decoder.h"

namespace loadscope::pipeline {

using augment::Box;
using augment::CropPlan;
using decode::Rect;

namespace {

const telemetry::Kind kImage("image");

// Codec state and buffers of one worker thread, reused for every sample it processes.
struct Scratch {
  decode::JpegDecoder jpeg;
  // The formats FFmpeg decodes, by ImageFormat, each decoder created on first use.
  std::unique_ptr<decode::FfmpegImageDecoder> still[decode::kImageFormatCount];
  decode::WebpDecoder webp;
  augment::Resampler resampler;
  std::vector<uint8_t> oriented;
  std::vector<uint8_t> pixels;  // uint8 output before conversion to a float dtype

  size_t bytes() const {
    size_t n = 0;
    for (const auto& d : still) n += d ? d->buffer_bytes() : 0;
    return n + jpeg.buffer_bytes() + webp.buffer_bytes() + resampler.buffer_bytes() +
           oriented.capacity() + pixels.capacity();
  }
};

Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

}  // namespace

CropPlan make_plan(const ImageSpec& spec, int w, int h, Rng& rng) {
  CropPlan plan;
  switch (spec.crop) {
    case CropMode::kRandomResized:
      plan = augment::plan_random_resized_crop(w, h, spec.scale_min, spec.scale_max, spec.ratio_min,
                                               spec.ratio_max, rng);
      break;
    case CropMode::kCenter:
      plan = augment::plan_resize_center_crop(
          w, h, spec.resize > 0 ? spec.resize : std::max(spec.width, spec.height), spec.width,
          spec.height);
      break;
    case CropMode::kResize: plan = augment::plan_resize(w, h); break;
  }
  plan.flip = spec.flip > 0 && rng.uniform() < spec.flip;
  return plan;
}

namespace {

Box scaled(const Box& b, double fx, double fy) {
  return Box{b.x0 * fx, b.y0 * fy, b.x1 * fx, b.y1 * fy};
}

// The pixels the resampler needs, in an image of size w x h: the window, cut down to the box
// plus the filter's reach (which Pillow's coefficient code never exceeds).
Rect needed_region(const CropPlan& plan, int w, int h, int out_w, int out_h) {
  const double reach_x = std::ceil(std::max(plan.box.width() / out_w, 1.0)) + 2;
  const double reach_y = std::ceil(std::max(plan.box.height() / out_h, 1.0)) + 2;
  Rect r;
  r.x0 = std::max({0, static_cast<int>(std::floor(plan.window.x0)),
                   static_cast<int>(std::floor(plan.box.x0 - reach_x))});
  r.y0 = std::max({0, static_cast<int>(std::floor(plan.window.y0)),
                   static_cast<int>(std::floor(plan.box.y0 - reach_y))});
  r.x1 = std::min({w, static_cast<int>(std::ceil(plan.window.x1)),
                   static_cast<int>(std::ceil(plan.box.x1 + reach_x))});
  r.y1 = std::min({h, static_cast<int>(std::ceil(plan.window.y1)),
                   static_cast<int>(std::ceil(plan.box.y1 + reach_y))});
  return r;
}

// Resamples `plan` (in the coordinates of `img`, whose pixels cover at least `region`).
void resample_region(Scratch& s, const decode::RgbView& img, const Rect& region,
                     const CropPlan& plan, const ImageSpec& spec, uint8_t* dst) {
  const uint8_t* src = img.data + static_cast<size_t>(region.y0 - img.y0) * img.stride +
                       static_cast<size_t>(region.x0 - img.x0) * 3;
  Box box{plan.box.x0 - region.x0, plan.box.y0 - region.y0, plan.box.x1 - region.x0,
          plan.box.y1 - region.y0};
  s.resampler.resample(
      src, region.width(), region.height(), img.stride, box, dst, spec.width, spec.height,
      spec.channels_last ? augment::Layout::kHWC : augment::Layout::kCHW, plan.flip);
}

// Note [DCT scaling]
// With dct_scaling, a JPEG decodes at the smallest of 1/8, 1/4, 1/2 (else full size) at which
// the crop still has at least the output's pixels: the FFCV/DALI rule. Only these power-of-two
// scales: libjpeg-turbo has SIMD IDCTs for them, while 7/8 or 6/8 run in plain C and were
// slower than a full-size decode (3950 vs 4400 img/s on the demo set). On 1800x1200 photos a
// RandomResizedCrop(224) takes 3.9 ms instead of 7.3 ms. The price is fidelity: the result is
// sharper than Pillow's filter, up to 3 levels (mean) on real photos at large downscales, which
// is why the Python API turns it on by default only for random_resized (see docs/options.md).
int choose_scale(const Box& box, const ImageSpec& spec) {
  if (!spec.dct_scaling) return 8;
  for (int n = 1; n < 8; n *= 2) {
    if (box.width() * n / 8 >= spec.width && box.height() * n / 8 >= spec.height) return n;
  }
  return 8;
}

}  // namespace

void check_pixels(int64_t w, int64_t h, const ImageSpec& spec) {
  // Each side first: a PNG header can claim 2^32-1 pixels a side, and that product overflows
  // (found by fuzzing: tests/fuzz/regressions/png/png-size-product-overflow).
  if (w > spec.max_pixels || h > spec.max_pixels || w * h > spec.max_pixels) {
    throw DecodeFailure("image too large: " + std::to_string(w) + "x" + std::to_string(h) +
                        " pixels, over max_pixels=" + std::to_string(spec.max_pixels));
  }
}

namespace {

// PNG's size from its IHDR chunk (bytes 16-23), so a huge image fails before decoding.
void check_png_size(const uint8_t* d, size_t n, const ImageSpec& spec) {
  if (n < 24) return;  // the decoder reports it
  auto be32 = [&](size_t at) {
    return (int64_t(d[at]) << 24) | (int64_t(d[at + 1]) << 16) | (int64_t(d[at + 2]) << 8) |
           d[at + 3];
  };
  check_pixels(be32(16), be32(20), spec);
}

// `stored` turned upright by an EXIF orientation (2..8), into the thread's scratch.
decode::RgbView upright(Scratch& s, const decode::RgbView& stored, int orientation) {
  const bool transpose = orientation >= 5;
  decode::RgbView out;
  out.width = transpose ? stored.height : stored.width;
  out.height = transpose ? stored.width : stored.height;
  out.stride = static_cast<size_t>(out.width) * 3;
  s.oriented.resize(out.stride * out.height);
  augment::orient(stored.data, stored.width, stored.height, stored.stride, orientation,
                  s.oriented.data());
  out.data = s.oriented.data();
  return out;
}

std::string decode_jpeg(Scratch& s, const uint8_t* data, size_t size, const ImageSpec& spec,
                        Rng& rng, uint8_t* dst, DecodeSplit* split) {
  const uint64_t t0 = split ? telemetry::now_ns() : 0;
  const decode::JpegInfo info = s.jpeg.open(data, size);
  check_pixels(info.width, info.height, spec);
  const int orientation = spec.exif ? info.orientation : 1;
  const bool transpose = orientation >= 5;
  const int w = transpose ? info.height : info.width;  // upright size
  const int h = transpose ? info.width : info.height;
  const CropPlan plan = make_plan(spec, w, h, rng);
  const int num = choose_scale(plan.box, spec);
  const int sw_stored = decode::JpegDecoder::scaled_size(info.width, num);
  const int sh_stored = decode::JpegDecoder::scaled_size(info.height, num);
  const int sw = transpose ? sh_stored : sw_stored;
  const int sh = transpose ? sw_stored : sh_stored;
  CropPlan splan = plan;
  splan.box = scaled(plan.box, double(sw) / w, double(sh) / h);
  splan.window = scaled(plan.window, double(sw) / w, double(sh) / h);
  const Rect region = needed_region(splan, sw, sh, spec.width, spec.height);
  if (orientation == 1) {
    const decode::RgbView img = s.jpeg.decode(num, region);
    const uint64_t t1 = split ? telemetry::now_ns() : 0;
    resample_region(s, img, region, splan, spec, dst);
    if (split) {
      split->decode_ns = t1 - t0;
      split->augment_ns = telemetry::now_ns() - t1;
    }
  } else {
    // Rare: decode the whole (scaled) image and turn it upright first.
    const decode::RgbView stored = s.jpeg.decode(num, Rect{0, 0, sw_stored, sh_stored});
    const uint64_t t1 = split ? telemetry::now_ns() : 0;
    resample_region(s, upright(s, stored, orientation), region, splan, spec, dst);
    if (split) {
      split->decode_ns = t1 - t0;
      split->augment_ns = telemetry::now_ns() - t1;
    }
  }
  return s.jpeg.warning();
}

// A still WebP decodes only the region the crop needs (libwebp's cropping), like JPEG without
// DCT scaling; an EXIF orientation other than 1 decodes the whole image and turns it first.
void decode_webp(Scratch& s, const uint8_t* data, size_t size, const ImageSpec& spec, Rng& rng,
                 uint8_t* dst, DecodeSplit* split) {
  const uint64_t t0 = split ? telemetry::now_ns() : 0;
  const decode::WebpInfo info = s.webp.open(data, size);
  check_pixels(info.width, info.height, spec);
  const int orientation = spec.exif ? info.orientation : 1;
  decode::RgbView img;
  CropPlan plan;
  Rect region;
  if (orientation == 1) {
    plan = make_plan(spec, info.width, info.height, rng);
    region = needed_region(plan, info.width, info.height, spec.width, spec.height);
    img = s.webp.decode(region);
  } else {
    img = upright(s, s.webp.decode(Rect{0, 0, info.width, info.height}), orientation);
    plan = make_plan(spec, img.width, img.height, rng);
    region = needed_region(plan, img.width, img.height, spec.width, spec.height);
  }
  const uint64_t t1 = split ? telemetry::now_ns() : 0;
  resample_region(s, img, region, plan, spec, dst);
  if (split) {
    split->decode_ns = t1 - t0;
    split->augment_ns = telemetry::now_ns() - t1;
  }
}

}  // namespace

std::string decode_image(const uint8_t* data, size_t size, const ImageSpec& spec, Rng& rng,
                         uint8_t* dst, DecodeSplit* split) {
  Scratch& s = scratch();
  const decode::ImageFormat format = decode::sniff(data, size);
  if (format == decode::ImageFormat::kUnknown || format == decode::ImageFormat::kPngTruncated) {
    if (size == 0) throw DecodeFailure("empty file");
    if (format == decode::ImageFormat::kPngTruncated) {
      throw DecodeFailure("truncated or damaged PNG: signature incomplete (" +
                          std::to_string(size) + " bytes)");
    }
    throw DecodeFailure(
        "unsupported image format: unknown (supported: " + decode::supported_image_formats() + ")");
  }
  switch (decode::image_format(format).backend) {
    case decode::ImageBackend::kJpeg: return decode_jpeg(s, data, size, spec, rng, dst, split);
    case decode::ImageBackend::kWebp: decode_webp(s, data, size, spec, rng, dst, split); return "";
    case decode::ImageBackend::kFfmpeg: break;
  }
  const uint64_t t0 = split ? telemetry::now_ns() : 0;
  if (format == decode::ImageFormat::kPng) check_png_size(data, size, spec);
  auto& dec = s.still[static_cast<size_t>(format)];
  if (!dec) dec = std::make_unique<decode::FfmpegImageDecoder>(format);
  const decode::RgbView img = dec->decode(data, size, spec.max_pixels);
  const uint64_t t1 = split ? telemetry::now_ns() : 0;
  const CropPlan plan = make_plan(spec, img.width, img.height, rng);
  resample_region(s, img, needed_region(plan, img.width, img.height, spec.width, spec.height), plan,
                  spec, dst);
  if (split) {
    split->decode_ns = t1 - t0;
    split->augment_ns = telemetry::now_ns() - t1;
  }
  return "";
}

void validate_image(const std::string& field, const ImageSpec& s, bool video) {
  check_bound(field, "size", s.height);
  check_bound(field, "size", s.width);
  if (!(s.scale_min > 0 && s.scale_min <= s.scale_max && s.scale_max <= 1.0)) {
    throw ConfigError("field '" + field + "': scale must satisfy 0 < min <= max <= 1");
  }
  if (!(s.ratio_min > 0 && s.ratio_min <= s.ratio_max)) {
    throw ConfigError("field '" + field + "': ratio must satisfy 0 < min <= max");
  }
  check_bound(field, "max_pixels", s.max_pixels);
  if (!s.ops.empty() && video) {
    throw ConfigError("field '" + field + "': augmentations (ops) are for images only");
  }
  if (const std::string order = augment::check_order(s.ops); !order.empty()) {
    throw ConfigError("field '" + field + "': " + order);
  }
  if (s.dtype != augment::PixelType::kUint8) {
    if (video) {
      throw ConfigError("field '" + field + "': videos are uint8 only (convert on the GPU)");
    }
    for (int c = 0; c < 3; ++c) {
      if (!std::isfinite(s.mean[c]) || !std::isfinite(s.std[c]) || s.std[c] == 0.0) {
        throw ConfigError("field '" + field + "': mean must be finite and std finite and non-zero");
      }
    }
  }
  if (!(s.flip >= 0 && s.flip <= 1)) {
    throw ConfigError("field '" + field + "': flip is a probability in [0, 1]");
  }
  if (s.crop == CropMode::kCenter && s.resize > 0 && s.resize < std::max(s.width, s.height)) {
    throw ConfigError("field '" + field + "': resize (" + std::to_string(s.resize) +
                      ") must be >= the output size for a center crop");
  }
}

telemetry::Kind ImageField::kind() const {
  return kImage;
}

ImageField::ImageField(ImageSpec spec) : spec_(std::move(spec)) {
  if (spec_.dtype != augment::PixelType::kUint8) {
    converter_ = augment::PixelConverter(spec_.dtype, spec_.mean, spec_.std);
  }
}

std::vector<Output> ImageField::outputs() const {
  static constexpr OutputType kTypes[] = {OutputType::kUint8, OutputType::kFloat32,
                                          OutputType::kFloat16, OutputType::kBFloat16};
  const int64_t h = spec_.height, w = spec_.width;
  return {{"", kTypes[static_cast<int>(spec_.dtype)],
           spec_.channels_last ? std::vector<int64_t>{h, w, 3} : std::vector<int64_t>{3, h, w}}};
}

size_t ImageField::scratch_bytes() const {
  return scratch().bytes();
}

void ImageField::fill(FieldCall& call) const {
  Scratch& s = scratch();
  telemetry::Telemetry* t = call.ctx.telemetry;
  SampleContext& ctx = call.ctx;
  const ImageSpec& spec = spec_;
  Rng rng = call.rng(RngStream::kAugment);
  DecodeSplit split;
  const bool convert = spec.dtype != augment::PixelType::kUint8;
  const size_t pixels = static_cast<size_t>(spec.height) * spec.width;
  uint8_t* dst = call.fixed[0];
  if (convert) s.pixels.resize(pixels * 3);
  const std::string warning =
      decode_image(reinterpret_cast<const uint8_t*>(call.bytes.data()), call.bytes.size(), spec,
                   rng, convert ? s.pixels.data() : dst, t ? &split : nullptr);
  if (convert || !spec.ops.empty()) {
    const uint64_t t0 = t ? telemetry::now_ns() : 0;
    augment::OpStreams streams{call.rng(RngStream::kPixels), call.rng(RngStream::kRandAugment)};
    augment::run_ops(spec.ops, convert ? s.pixels.data() : dst, dst, spec.dtype,
                     convert ? &converter_ : nullptr, spec.height, spec.width, !spec.channels_last,
                     streams, s.oriented);
    if (t) split.augment_ns += telemetry::now_ns() - t0;
  }
  if (!warning.empty() && ctx.warning.empty()) ctx.warning = call.member.name + ": " + warning;
  if (t) {
    t->record(*ctx.slot, telemetry::Stage::kDecode, kImage, split.decode_ns, call.bytes.size());
    t->record(*ctx.slot, telemetry::Stage::kAugment, kImage, split.augment_ns);
  }
}

}  // namespace loadscope::pipeline
