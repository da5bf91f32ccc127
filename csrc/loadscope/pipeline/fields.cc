#include "loadscope/pipeline/fields.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "loadscope/augment/resample.h"
#include "loadscope/core/error.h"
#include "loadscope/decode/ffmpeg/image_decoder.h"
#include "loadscope/decode/jpeg/jpeg_decoder.h"
#include "loadscope/decode/video/video_decoder.h"
#include "loadscope/decode/webp/webp_decoder.h"
#include "loadscope/io/file.h"
#include "loadscope/io/remote.h"

namespace loadscope::pipeline {

using augment::Box;
using augment::CropPlan;
using decode::Rect;

namespace {

// Codec state and buffers of one worker thread, reused for every sample it processes.
struct Scratch {
  decode::JpegDecoder jpeg;
  // PNG, BMP, GIF, TIFF (FFmpeg's decoders), each created on first use.
  std::unique_ptr<decode::FfmpegImageDecoder> still[4];
  decode::WebpDecoder webp;
  augment::Resampler resampler;
  std::vector<uint8_t> oriented;
  std::vector<uint8_t> pixels;  // uint8 output before conversion to a float dtype
  std::string file;
  std::unique_ptr<decode::VideoDecoder> video;  // created on first use

  size_t bytes() const {
    size_t n = 0;
    for (const auto& d : still) n += d ? d->buffer_bytes() : 0;
    return n + jpeg.buffer_bytes() + webp.buffer_bytes() + resampler.buffer_bytes() +
           oriented.capacity() + pixels.capacity() + file.capacity() +
           (video ? video->buffer_bytes() : 0);
  }
};

Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

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

void check_pixels(int64_t w, int64_t h, const ImageSpec& spec) {
  // Each side first: a PNG header can claim 2^32-1 pixels a side, and that product overflows
  // (found by fuzzing: tests/fuzz/regressions/png/png-size-product-overflow).
  if (w > spec.max_pixels || h > spec.max_pixels || w * h > spec.max_pixels) {
    throw DecodeFailure("image too large: " + std::to_string(w) + "x" + std::to_string(h) +
                        " pixels, over max_pixels=" + std::to_string(spec.max_pixels));
  }
}

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
  if (format == decode::ImageFormat::kJpeg)
    return decode_jpeg(s, data, size, spec, rng, dst, split);
  const int still = format == decode::ImageFormat::kPng    ? 0
                    : format == decode::ImageFormat::kBmp  ? 1
                    : format == decode::ImageFormat::kGif  ? 2
                    : format == decode::ImageFormat::kTiff ? 3
                                                           : -1;
  if (still >= 0) {
    const uint64_t t0 = split ? telemetry::now_ns() : 0;
    if (format == decode::ImageFormat::kPng) check_png_size(data, size, spec);
    auto& dec = s.still[still];
    if (!dec) dec = std::make_unique<decode::FfmpegImageDecoder>(format);
    const decode::RgbView img = dec->decode(data, size, spec.max_pixels);
    const uint64_t t1 = split ? telemetry::now_ns() : 0;
    const CropPlan plan = make_plan(spec, img.width, img.height, rng);
    resample_region(s, img, needed_region(plan, img.width, img.height, spec.width, spec.height),
                    plan, spec, dst);
    if (split) {
      split->decode_ns = t1 - t0;
      split->augment_ns = telemetry::now_ns() - t1;
    }
    return "";
  }
  if (format == decode::ImageFormat::kWebp) {
    decode_webp(s, data, size, spec, rng, dst, split);
    return "";
  }
  if (size == 0) throw DecodeFailure("empty file");
  if (format == decode::ImageFormat::kPngTruncated) {
    throw DecodeFailure("truncated or damaged PNG: signature incomplete (" + std::to_string(size) +
                        " bytes)");
  }
  throw DecodeFailure(std::string("unsupported image format: ") + decode::format_name(format) +
                      " (supported: JPEG, PNG, WebP, BMP, GIF, TIFF)");
}

const IntBound& int_bound(const char* name) {
  for (const auto& b : kIntBounds) {
    if (std::strcmp(b.name, name) == 0) return b;
  }
  throw std::logic_error(std::string("no bound named ") + name);
}

namespace {

// "field 'x': frames must be 1..100000" when `value` is outside its bound.
void check_bound(const FieldSpec& f, const char* name, int64_t value) {
  const IntBound& b = int_bound(name);
  if (value >= b.min && value <= b.max) return;
  throw ConfigError("field '" + f.name + "': " + name + " must be " + std::to_string(b.min) +
                    (b.max == INT64_MAX ? " or more" : ".." + std::to_string(b.max)));
}

}  // namespace

void validate(const std::vector<FieldSpec>& fields) {
  if (fields.empty()) throw ConfigError("fields: at least one field is needed");
  for (size_t i = 0; i < fields.size(); ++i) {
    const FieldSpec& f = fields[i];
    for (size_t j = 0; j < i; ++j) {
      if (fields[j].name == f.name) throw ConfigError("fields: duplicate name '" + f.name + "'");
    }
    if (f.keys.empty()) throw ConfigError("field '" + f.name + "': no member keys");
    if (f.kind == FieldKind::kVideo) {
      const VideoSpec& v = f.video;
      check_bound(f, "frames", v.clip.frames);
      check_bound(f, "clips", v.clip.clips);
      if (v.clip.fps < 0 || (v.clip.fps == 0 && v.clip.stride < 1)) {
        throw ConfigError("field '" + f.name + "': give stride >= 1 or fps > 0");
      }
      check_bound(f, "decoder_threads", v.decoder_threads);
      if (!v.start_key.empty() && v.clip.clips != 1) {
        throw ConfigError("field '" + f.name + "': start= gives one clip's start; clips must be 1");
      }
    }
    if (f.kind == FieldKind::kAudio) {
      validate_audio(f.name, f.audio);
    }
    if (f.kind != FieldKind::kImage && f.kind != FieldKind::kVideo) continue;
    const ImageSpec& s = f.image;
    check_bound(f, "size", s.height);
    check_bound(f, "size", s.width);
    if (!(s.scale_min > 0 && s.scale_min <= s.scale_max && s.scale_max <= 1.0)) {
      throw ConfigError("field '" + f.name + "': scale must satisfy 0 < min <= max <= 1");
    }
    if (!(s.ratio_min > 0 && s.ratio_min <= s.ratio_max)) {
      throw ConfigError("field '" + f.name + "': ratio must satisfy 0 < min <= max");
    }
    check_bound(f, "max_pixels", s.max_pixels);
    const auto& c = s.color;
    const auto& e = s.erase;
    const auto& ra = s.randaugment;
    const bool pixel_ops = c.p > 0 || s.grayscale > 0 || e.p > 0 || ra.num_ops > 0;
    check_bound(f, "num_ops", ra.num_ops);
    check_bound(f, "num_magnitude_bins", ra.bins);
    if (ra.magnitude < 0 || ra.magnitude >= ra.bins) {
      throw ConfigError("field '" + f.name + "': RandAugment needs 0 <= magnitude < bins");
    }
    if (pixel_ops && f.kind == FieldKind::kVideo) {
      throw ConfigError("field '" + f.name +
                        "': RandAugment, colour jitter, grayscale and erasing are for images only");
    }
    if (!(c.p >= 0 && c.p <= 1) || !(s.grayscale >= 0 && s.grayscale <= 1) ||
        !(e.p >= 0 && e.p <= 1)) {
      throw ConfigError("field '" + f.name + "': probabilities must be in [0, 1]");
    }
    for (int k = 0; k < 4; ++k) {
      const bool ok = k == 3 ? (c.lo[k] >= -0.5 && c.lo[k] <= c.hi[k] && c.hi[k] <= 0.5)
                             : (c.lo[k] >= 0 && c.lo[k] <= c.hi[k] && std::isfinite(c.hi[k]));
      if (!ok) {
        throw ConfigError("field '" + f.name + "': colour jitter ranges must be (min, max) with " +
                          (k == 3 ? "-0.5 <= min <= max <= 0.5 (hue)" : "0 <= min <= max"));
      }
    }
    if (e.p > 0 && !(e.scale_min > 0 && e.scale_min <= e.scale_max && e.scale_max <= 1 &&
                     e.ratio_min > 0 && e.ratio_min <= e.ratio_max && std::isfinite(e.ratio_max))) {
      throw ConfigError("field '" + f.name +
                        "': erasing needs 0 < scale min <= max <= 1 and 0 < ratio min <= max");
    }
    if (s.dtype != augment::PixelType::kUint8) {
      if (f.kind == FieldKind::kVideo) {
        throw ConfigError("field '" + f.name + "': videos are uint8 only (convert on the GPU)");
      }
      for (int c = 0; c < 3; ++c) {
        if (!std::isfinite(s.mean[c]) || !std::isfinite(s.std[c]) || s.std[c] == 0.0) {
          throw ConfigError("field '" + f.name +
                            "': mean must be finite and std finite and non-zero");
        }
      }
    }
    if (!(s.flip >= 0 && s.flip <= 1)) {
      throw ConfigError("field '" + f.name + "': flip is a probability in [0, 1]");
    }
    if (s.crop == CropMode::kCenter && s.resize > 0 && s.resize < std::max(s.width, s.height)) {
      throw ConfigError("field '" + f.name + "': resize (" + std::to_string(s.resize) +
                        ") must be >= the output size for a center crop");
    }
  }
}

std::vector<Output> outputs_of(const FieldSpec& f) {
  std::vector<Output> out;
  const int64_t h = f.image.height, w = f.image.width;
  const std::vector<int64_t> frame =
      f.image.channels_last ? std::vector<int64_t>{h, w, 3} : std::vector<int64_t>{3, h, w};
  switch (f.kind) {
    case FieldKind::kImage: {
      static constexpr OutputType kTypes[] = {OutputType::kUint8, OutputType::kFloat32,
                                              OutputType::kFloat16, OutputType::kBFloat16};
      out.push_back({"", kTypes[static_cast<int>(f.image.dtype)], frame});
      break;
    }
    case FieldKind::kInt: out.push_back({"", OutputType::kInt64, {}}); break;
    case FieldKind::kText: out.push_back({"", OutputType::kText, {}}); break;
    case FieldKind::kJson: out.push_back({"", OutputType::kJson, {}}); break;
    case FieldKind::kBytes: out.push_back({"", OutputType::kBytes, {}}); break;
    case FieldKind::kVideo: {
      std::vector<int64_t> clips{f.video.clip.frames};
      if (f.video.clip.clips > 1) clips.insert(clips.begin(), f.video.clip.clips);
      std::vector<int64_t> pixels = clips;
      pixels.insert(pixels.end(), frame.begin(), frame.end());
      out.push_back({"", OutputType::kUint8, pixels});
      out.push_back({".time", OutputType::kFloat64, clips});
      out.push_back({".meta", OutputType::kJson, {}});
      break;
    }
    case FieldKind::kAudio: out = audio_outputs(f.audio); break;
  }
  if (f.optional) out.push_back({".present", OutputType::kBool, {}});
  return out;
}

FieldProcessor::FieldProcessor(std::vector<FieldSpec> fields) : fields_(std::move(fields)) {
  validate(fields_);
  int strings = 0;
  for (const auto& f : fields_) {
    FieldSlots slots;
    slots.outputs = outputs_of(f);
    for (const Output& o : slots.outputs) {
      if (o.fixed()) {
        slots.at.push_back(static_cast<int>(fixed_bytes_.size()));
        slots.fixed.push_back(slots.at.back());
        fixed_bytes_.push_back(o.bytes_per_sample());
      } else {
        slots.at.push_back(strings++);
        slots.strings.push_back(slots.at.back());
      }
    }
    converters_.emplace_back();
    if (f.kind == FieldKind::kImage && f.image.dtype != augment::PixelType::kUint8) {
      converters_.back() = augment::PixelConverter(f.image.dtype, f.image.mean, f.image.std);
    }
    slots_.push_back(std::move(slots));
  }
  num_strings_ = static_cast<size_t>(strings);
  // An aligned audio field runs after the video field whose clip it follows.
  aligned_to_.assign(fields_.size(), -1);
  for (size_t i = 0; i < fields_.size(); ++i) {
    if (fields_[i].kind != FieldKind::kAudio || fields_[i].audio.align.empty()) continue;
    const FieldSpec& f = fields_[i];
    for (size_t j = 0; j < fields_.size(); ++j) {
      if (fields_[j].name == f.audio.align && fields_[j].kind == FieldKind::kVideo)
        aligned_to_[i] = static_cast<int>(j);
    }
    if (aligned_to_[i] < 0) {
      throw ConfigError("field '" + f.name + "': align='" + f.audio.align +
                        "' must name a VideoClip field of this loader");
    }
    const FieldSpec& v = fields_[static_cast<size_t>(aligned_to_[i])];
    if (v.video.clip.clips != 1) {
      throw ConfigError("field '" + f.name + "': align= follows one clip; field '" + v.name +
                        "' has clips=" + std::to_string(v.video.clip.clips));
    }
  }
  for (size_t i = 0; i < fields_.size(); ++i) {
    if (aligned_to_[i] < 0) order_.push_back(i);
  }
  for (size_t i = 0; i < fields_.size(); ++i) {
    if (aligned_to_[i] >= 0) order_.push_back(i);
  }
}

std::vector<size_t> FieldProcessor::fixed_bytes_per_sample() const {
  return fixed_bytes_;
}

namespace {

// The bytes of a member named by path (a whole file, or a byte range such as an indexed tar's
// member): from the span prepare() fetched ahead (waited for; rethrows its failure), else read
// now. Returns the bytes read. Throws ReadFailure.
uint64_t read_member(const Member& m, std::string& out) {
  if (m.fetched.valid()) {
    const std::shared_ptr<const std::string> span = m.fetched.get();
    const uint64_t want = m.whole_file() ? span->size() : static_cast<uint64_t>(m.length);
    if (m.fetched_at + want > span->size()) throw ReadFailure("short read of a prefetched range");
    out.assign(*span, static_cast<size_t>(m.fetched_at), static_cast<size_t>(want));
    return want;
  }
  return m.whole_file() ? io::read_file(m.path, out)
                        : io::read_range(m.path, m.offset, static_cast<uint64_t>(m.length), out);
}

std::string member_list(const Sample& s) {
  std::string names;
  for (const auto& m : s.members) names += (names.empty() ? "" : ", ") + m.name;
  return names.empty() ? "none" : names;
}

bool parse_int(const std::string& text, int64_t& out) {
  size_t b = 0, e = text.size();
  while (b < e && std::isspace(static_cast<unsigned char>(text[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(text[e - 1]))) --e;
  if (b == e) return false;
  std::string t = text.substr(b, e - b);
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(t.c_str(), &end, 10);
  if (errno != 0 || end != t.c_str() + t.size()) return false;
  out = v;
  return true;
}

std::string preview(const std::string& s) {
  std::string p = s.substr(0, 40);
  for (auto& c : p) {
    if (!std::isprint(static_cast<unsigned char>(c))) c = '?';
  }
  return p + (s.size() > 40 ? "..." : "");
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

// Always with a decimal point, so JSON readers give a float (5.0, not 5).
std::string json_number(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  std::string s = buf;
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

uint8_t* slot_ptr(Batch& batch, int fixed, int slot) {
  return batch.fixed_data(static_cast<size_t>(fixed)) +
         static_cast<size_t>(slot) *
             batch.layout->fixed[static_cast<size_t>(fixed)].bytes_per_sample;
}

}  // namespace

namespace {
telemetry::Kind kind_of(FieldKind k) {
  return k == FieldKind::kImage   ? telemetry::Kind::kImage
         : k == FieldKind::kVideo ? telemetry::Kind::kVideo
         : k == FieldKind::kAudio ? telemetry::Kind::kAudio
                                  : telemetry::Kind::kOther;
}
// Fields whose whole-file members FFmpeg opens by path, reading only what it needs.
bool reads_by_path(FieldKind k) {
  return k == FieldKind::kVideo || k == FieldKind::kAudio;
}
telemetry::Stage stage_of(FailureKind k) {
  return k == FailureKind::kRead     ? telemetry::Stage::kRead
         : k == FailureKind::kDecode ? telemetry::Stage::kDecode
                                     : telemetry::Stage::kCollate;
}
}  // namespace

void FieldProcessor::process(Sample& sample, Batch& batch, int slot, SampleContext& ctx) {
  telemetry::Telemetry* t = ctx.telemetry;
  size_t i = 0;
  std::vector<ClipSpan> spans(fields_.size());  // video fields' clips, for aligned audio
  try {
    for (const size_t k : order_) {
      i = k;
      process_field(i, sample, batch, slot, ctx, spans);
    }
  } catch (const SampleError& e) {
    if (t) t->fail(*ctx.slot, stage_of(e.kind()), kind_of(fields_[i].kind));
    throw;
  }
  if (t) {
    ctx.slot->scratch_bytes.store(scratch().bytes() + audio_scratch_bytes(),
                                  std::memory_order_relaxed);
  }
}

FieldProcessor::~FieldProcessor() = default;

void FieldProcessor::prepare(std::vector<Sample>& samples, const std::atomic<bool>& stop,
                             int64_t stride) {
  std::vector<Member*> remote_members;
  for (Sample& sample : samples) {
    for (const FieldSpec& f : fields_) {
      for (const auto& key : f.keys) {
        Member* m = nullptr;
        for (auto& candidate : sample.members) {
          if (candidate.name == key) {
            m = &candidate;  // the first, as process_field takes it
            break;
          }
        }
        if (m == nullptr) continue;
        // Whole remote videos are read by the decoder, a range at a time, as it seeks.
        const bool decoder_reads = reads_by_path(f.kind) && m->whole_file();
        const bool listed =
            std::find(remote_members.begin(), remote_members.end(), m) != remote_members.end();
        if (m->is_path && !decoder_reads && !listed && io::remote::is_url(m->path))
          remote_members.push_back(m);
        break;
      }
    }
  }
  if (remote_members.empty()) return;
  std::lock_guard<std::mutex> lock(prefetcher_mutex_);
  if (prefetcher_ && prefetcher_pid_ != ::getpid()) {
    // Made before a fork: this process (a DataLoader worker) has none of its threads. Leaked,
    // not destroyed: its destructor would join threads that do not exist here.
    (void)prefetcher_.release();
  }
  if (!prefetcher_) {
    prefetcher_ = io::Prefetcher::from_environment();
    prefetcher_pid_ = ::getpid();
  }
  // The first batch of a run (an epoch's start, a resume) fetches its own members only: reading
  // whole blocks of every shard in the shuffle window first would delay it (by 40 MB for the
  // demo set); the blocks follow from the second batch on.
  const bool dense = stride == 1 && batches_in_run_++ > 0;
  prefetcher_->fetch(remote_members, stop, dense);
}

void FieldProcessor::cancel() {
  std::lock_guard<std::mutex> lock(prefetcher_mutex_);
  batches_in_run_ = 0;  // the run is over: the next one starts with spans again
  if (prefetcher_ && prefetcher_pid_ == ::getpid()) prefetcher_->cancel();
}

void FieldProcessor::process_field(size_t i, Sample& sample, Batch& batch, int slot,
                                   SampleContext& ctx, std::vector<ClipSpan>& spans) {
  Scratch& s = scratch();
  telemetry::Telemetry* t = ctx.telemetry;
  {
    const FieldSpec& f = fields_[i];
    const FieldSlots& out = slots_[i];
    const telemetry::Kind kind = kind_of(f.kind);
    const Member* m = nullptr;
    for (const auto& key : f.keys) {
      if ((m = sample.find(key)) != nullptr) break;
    }
    if (m == nullptr) {
      if (f.optional) {  // zeros everywhere, presence 0, empty strings
        for (int fx : out.fixed) {
          std::memset(slot_ptr(batch, fx, slot), 0, batch.layout->fixed[fx].bytes_per_sample);
        }
        for (int st : out.strings) batch.strings[st][slot].clear();
        return;
      }
      std::string wanted;
      for (const auto& k : f.keys) wanted += (wanted.empty() ? "" : ";") + k;
      throw SampleError(sample.key,
                        "no member '" + wanted + "' for field '" + f.name +
                            "' (sample has: " + member_list(sample) + ")",
                        FailureKind::kField);
    }
    if (f.optional) *slot_ptr(batch, out.fixed.back(), slot) = 1;
    const std::string* bytes = &m->data;
    // Videos and audio named by path are opened by FFmpeg directly: it reads only what it
    // needs. A byte range (an indexed tar member) is read here for them too.
    if (m->is_path && (!reads_by_path(f.kind) || !m->whole_file())) {
      telemetry::StageTimer timer(t, ctx.slot, telemetry::Stage::kRead, kind);
      try {
        const uint64_t n = read_member(*m, s.file);
        ctx.bytes_read += n;
        timer.add_bytes(n);
      } catch (const ReadFailure& e) {
        throw SampleError(m->whole_file() ? io::remote::redact(m->path) : sample.key, e.what(),
                          FailureKind::kRead);
      }
      bytes = &s.file;
    }
    const std::string where = m->whole_file() ? io::remote::redact(m->path) : sample.key;
    (void)kind;
    switch (f.kind) {
      case FieldKind::kImage: {
        Rng rng(ctx.order->seed, static_cast<uint64_t>(ctx.order->epoch),
                static_cast<RngStream>(static_cast<uint64_t>(RngStream::kAugment) + i),
                static_cast<uint64_t>(sample.position));
        try {
          DecodeSplit split;
          const bool convert = f.image.dtype != augment::PixelType::kUint8;
          const size_t pixels = static_cast<size_t>(f.image.height) * f.image.width;
          uint8_t* dst = slot_ptr(batch, out.fixed[0], slot);
          if (convert) s.pixels.resize(pixels * 3);
          std::string warning =
              decode_image(reinterpret_cast<const uint8_t*>(bytes->data()), bytes->size(), f.image,
                           rng, convert ? s.pixels.data() : dst, t ? &split : nullptr);
          const ImageSpec& spec = f.image;
          if (convert || spec.color.p > 0 || spec.grayscale > 0 || spec.erase.p > 0 ||
              spec.randaugment.num_ops > 0) {
            const uint64_t t0 = t ? telemetry::now_ns() : 0;
            const bool chw = !spec.channels_last;
            Rng prng(ctx.order->seed, static_cast<uint64_t>(ctx.order->epoch),
                     static_cast<RngStream>(static_cast<uint64_t>(RngStream::kPixels) + i),
                     static_cast<uint64_t>(sample.position));
            const augment::ColorDraw color = augment::draw_color(spec.color, prng);
            const bool gray =
                spec.grayscale > 0 && (spec.grayscale >= 1 || prng.uniform() < spec.grayscale);
            const augment::EraseBox box =
                augment::draw_erase(spec.erase, spec.height, spec.width, prng);
            uint8_t* u8 = convert ? s.pixels.data() : dst;
            if (spec.randaugment.num_ops >
                0) {  // its own stream: the other draws stay as they were
              Rng rrng(ctx.order->seed, static_cast<uint64_t>(ctx.order->epoch),
                       static_cast<RngStream>(static_cast<uint64_t>(RngStream::kRandAugment) + i),
                       static_cast<uint64_t>(sample.position));
              for (const auto& op :
                   augment::draw_randaugment(spec.randaugment, spec.height, spec.width, rrng)) {
                augment::apply_op(u8, spec.height, spec.width, chw, op, s.oriented);
              }
            }
            const auto rgb = augment::RgbView::of(u8, pixels, chw);
            augment::apply_color(rgb, color);
            if (gray) augment::to_grayscale(rgb);
            // Note [float output by table]
            if (convert) converters_[i].convert(s.pixels.data(), pixels, chw, dst);
            augment::erase(dst, spec.dtype, spec.height, spec.width, chw, box, spec.erase.value);
            if (t) split.augment_ns += telemetry::now_ns() - t0;
          }
          if (!warning.empty() && ctx.warning.empty()) ctx.warning = m->name + ": " + warning;
          if (t) {
            t->record(*ctx.slot, telemetry::Stage::kDecode, kind, split.decode_ns, bytes->size());
            t->record(*ctx.slot, telemetry::Stage::kAugment, kind, split.augment_ns);
          }
        } catch (const DecodeFailure& e) {
          throw SampleError(where, m->name + ": " + e.what(), FailureKind::kDecode);
        }
        break;
      }
      case FieldKind::kVideo:
        process_video(f, i, *m, *bytes, sample, batch, slot, ctx, spans[i]);
        break;
      case FieldKind::kAudio:
        process_audio(f, i, *m, *bytes, sample, batch, slot, ctx, spans);
        break;
      case FieldKind::kInt: {
        telemetry::StageTimer timer(t, ctx.slot, telemetry::Stage::kDecode, kind);
        int64_t v = 0;
        if (!parse_int(*bytes, v)) {
          throw SampleError(where, m->name + ": not an integer: '" + preview(*bytes) + "'",
                            FailureKind::kField);
        }
        std::memcpy(slot_ptr(batch, out.fixed[0], slot), &v, sizeof v);
        break;
      }
      case FieldKind::kText: {
        telemetry::StageTimer timer(t, ctx.slot, telemetry::Stage::kDecode, kind);
        if (!is_valid_utf8(*bytes)) {
          throw SampleError(where, m->name + ": text is not valid UTF-8", FailureKind::kField);
        }
        batch.strings[out.strings[0]][slot] = *bytes;
        break;
      }
      case FieldKind::kJson: {
        telemetry::StageTimer timer(t, ctx.slot, telemetry::Stage::kDecode, kind);
        std::string reason;
        if (!is_valid_json(*bytes, &reason)) {
          throw SampleError(where, m->name + ": invalid JSON: " + reason, FailureKind::kField);
        }
        batch.strings[out.strings[0]][slot] = *bytes;
        break;
      }
      case FieldKind::kBytes: batch.strings[out.strings[0]][slot] = *bytes; break;
    }
  }
}

namespace {
// The clip's start in seconds from the sample's member `key` (VideoClip(start=)): a number
// >= 0, as a manifest column or a tar member holds it (an indexed tar's member is a byte range
// of its shard, read here: a few bytes). Parsed with from_chars: no locale's decimal comma.
double clip_start(const Sample& sample, const std::string& key, const std::string& field) {
  const Member* m = sample.find(key);
  if (m == nullptr) {
    throw SampleError(sample.key,
                      "no member '" + key + "' for the start of field '" + field +
                          "' (sample has: " + member_list(sample) + ")",
                      FailureKind::kField);
  }
  std::string text = m->data;
  if (m->is_path) {
    try {
      read_member(*m, text);
    } catch (const ReadFailure& e) {
      throw SampleError(sample.key, key + ": " + e.what(), FailureKind::kRead);
    }
  }
  const auto space = [](char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; };
  const char* first = text.data();
  const char* last = text.data() + text.size();
  while (first < last && space(*first)) ++first;
  while (last > first && space(last[-1])) --last;
  double v = -1;
  const auto [end, ec] = std::from_chars(first, last, v);
  if (ec != std::errc() || end != last || first == last || !(v >= 0) || !std::isfinite(v)) {
    throw SampleError(sample.key,
                      key + ": the start of field '" + field + "' must be seconds >= 0, got '" +
                          preview(text) + "'",
                      FailureKind::kField);
  }
  return v;
}
}  // namespace

void FieldProcessor::process_video(const FieldSpec& f, size_t index, const Member& m,
                                   const std::string& bytes, Sample& sample, Batch& batch, int slot,
                                   SampleContext& ctx, ClipSpan& span) {
  Scratch& s = scratch();
  if (!s.video) s.video = std::make_unique<decode::VideoDecoder>();
  decode::VideoDecoder& dec = *s.video;
  const VideoSpec& v = f.video;
  const FieldSlots& out = slots_[index];
  const std::string where = m.whole_file() ? io::remote::redact(m.path) : sample.key;
  const uint64_t t0 = ctx.telemetry ? telemetry::now_ns() : 0;
  if (m.whole_file() && !io::remote::is_url(m.path)) {
    try {
      io::check_regular_file(m.path);  // before FFmpeg opens it: a FIFO would block it forever
    } catch (const ReadFailure& e) {
      throw SampleError(m.path, e.what(), FailureKind::kRead);
    }
  }
  // Before the video is opened and indexed: a bad start costs no index pass.
  const double start = v.start_key.empty() ? 0.0 : clip_start(sample, v.start_key, f.name);
  try {
    const decode::VideoInfo& info =
        m.whole_file() ? dec.open_file(m.path, v.stream, v.rotate, v.decoder_threads)
                       : dec.open_memory(reinterpret_cast<const uint8_t*>(bytes.data()),
                                         bytes.size(), v.stream, v.rotate, v.decoder_threads);
    const uint64_t opened = ctx.telemetry ? telemetry::now_ns() : 0;
    check_pixels(info.width, info.height, f.image);  // a frame size no real video has
    Rng rng(ctx.order->seed, static_cast<uint64_t>(ctx.order->epoch),
            static_cast<RngStream>(static_cast<uint64_t>(RngStream::kAugment) + index),
            static_cast<uint64_t>(sample.position));
    const std::vector<int64_t> targets =
        plan_clips(dec.pts(), info.time_base, v.clip, rng, v.start_key.empty() ? nullptr : &start);
    const int frames = v.clip.frames;
    const size_t frame_bytes = static_cast<size_t>(f.image.height) * f.image.width * 3;
    uint8_t* pixels = slot_ptr(batch, out.fixed[0], slot);
    auto* times = reinterpret_cast<double*>(slot_ptr(batch, out.fixed[1], slot));
    std::vector<decode::FrameOutput> outputs(static_cast<size_t>(v.clip.clips));
    std::vector<decode::VideoDecoder::Request> requests;
    requests.reserve(targets.size());
    for (int k = 0; k < v.clip.clips; ++k) {
      const CropPlan plan = make_plan(f.image, info.width, info.height, rng);  // one per clip
      decode::FrameOutput& o = outputs[static_cast<size_t>(k)];
      o.x0 = plan.box.x0, o.y0 = plan.box.y0, o.x1 = plan.box.x1, o.y1 = plan.box.y1;
      o.out_w = f.image.width;
      o.out_h = f.image.height;
      o.chw = !f.image.channels_last;
      o.flip = plan.flip;
      o.color_tags = v.color_tags;
      for (int j = 0; j < frames; ++j) {
        const size_t t = static_cast<size_t>(k) * frames + j;
        requests.push_back({targets[t], pixels + t * frame_bytes, &o, times + t});
      }
    }
    dec.decode(requests);
    {
      // The first clip's span, for aligned audio: its first frame's time to its last frame's
      // end (the next frame's time, or one frame at the average rate after the last frame).
      const std::vector<int64_t>& pts = dec.pts();
      const double tb = info.time_base;
      const int64_t last = std::llround(times[frames - 1] / tb);
      const auto next = std::upper_bound(pts.begin(), pts.end(), last);
      span.start = times[0];
      span.end = next != pts.end() ? *next * tb
                                   : times[frames - 1] + (info.fps > 0 ? 1.0 / info.fps : 0.0);
      span.set = true;
    }
    const uint64_t read = m.whole_file() ? dec.bytes_read() : bytes.size();
    ctx.bytes_read += m.whole_file() ? read : 0;
    if (ctx.telemetry) {  // decode = open, index, seek, decode; augment = frame conversion
      const uint64_t total = telemetry::now_ns() - t0;
      const uint64_t convert = std::min(dec.convert_ns(), total);
      ctx.telemetry->record(*ctx.slot, telemetry::Stage::kDecode, telemetry::Kind::kVideo,
                            total - convert, read);
      ctx.telemetry->record(*ctx.slot, telemetry::Stage::kAugment, telemetry::Kind::kVideo,
                            convert);
      const decode::VideoDecoder::Work& w = dec.work();
      ctx.telemetry->record_video(
          *ctx.slot, telemetry::VideoTotals{1, requests.size(), w.frames_decoded, w.packets,
                                            w.seeks, opened - t0});
    }
    batch.strings[out.strings[0]][slot] = "{\"duration\": " + json_number(info.duration) +
                                          ", \"fps\": " + json_number(info.fps) +
                                          ", \"frames\": " + std::to_string(dec.pts().size()) +
                                          ", \"width\": " + std::to_string(info.width) +
                                          ", \"height\": " + std::to_string(info.height) +
                                          ", \"rotation\": " + std::to_string(info.rotation) +
                                          ", \"codec\": " + json_string(info.codec) +
                                          ", \"stream\": " + std::to_string(info.stream) + "}";
  } catch (const DecodeFailure& e) {
    // A remote read that failed under FFmpeg surfaces as a decode error: say what it was.
    if (!dec.input_error().empty()) throw SampleError(where, dec.input_error(), FailureKind::kRead);
    throw SampleError(where, m.name + ": " + e.what(), FailureKind::kDecode);
  } catch (const ReadFailure& e) {
    throw SampleError(where, e.what(), FailureKind::kRead);
  }
}

void FieldProcessor::process_audio(const FieldSpec& f, size_t index, const Member& m,
                                   const std::string& bytes, Sample& sample, Batch& batch, int slot,
                                   SampleContext& ctx, const std::vector<ClipSpan>& spans) {
  const FieldSlots& out = slots_[index];
  const std::string where = m.whole_file() ? io::remote::redact(m.path) : sample.key;
  const ClipSpan* span = nullptr;
  if (aligned_to_[index] >= 0) {
    span = &spans[static_cast<size_t>(aligned_to_[index])];
  }
  std::vector<uint8_t*> ptrs;
  for (int fx : out.fixed) ptrs.push_back(slot_ptr(batch, fx, slot));
  auto absent = [&] {  // zeros, presence 0
    for (size_t k = 0; k < out.fixed.size(); ++k) {
      std::memset(ptrs[k], 0,
                  batch.layout->fixed[static_cast<size_t>(out.fixed[k])].bytes_per_sample);
    }
  };
  if (span != nullptr && !span->set) {  // the video field was optional and absent
    if (f.optional) return absent();
    throw SampleError(where,
                      m.name + ": field '" + f.name + "' aligns to '" + f.audio.align +
                          "', which has no clip in this sample",
                      FailureKind::kField);
  }
  Rng rng(ctx.order->seed, static_cast<uint64_t>(ctx.order->epoch),
          static_cast<RngStream>(static_cast<uint64_t>(RngStream::kAugment) + index),
          static_cast<uint64_t>(sample.position));
  const uint64_t t0 = ctx.telemetry ? telemetry::now_ns() : 0;
  try {
    const AudioResult r = fill_audio(f.audio, m, bytes, f.optional, rng.uniform(), span, ptrs);
    if (r.missing) absent();  // optional, and the file has no audio stream
    ctx.bytes_read += m.whole_file() ? r.bytes_read : 0;
    if (!r.warning.empty() && ctx.warning.empty()) ctx.warning = m.name + ": " + r.warning;
    if (ctx.telemetry) {
      ctx.telemetry->record(*ctx.slot, telemetry::Stage::kDecode, telemetry::Kind::kAudio,
                            telemetry::now_ns() - t0, r.bytes_read);
    }
  } catch (const DecodeFailure& e) {
    throw SampleError(where, m.name + ": " + e.what(), FailureKind::kDecode);
  } catch (const ReadFailure& e) {
    throw SampleError(where, e.what(), FailureKind::kRead);
  }
}

bool is_valid_utf8(const std::string& text) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const auto* end = p + text.size();
  while (p < end) {
    const unsigned c = *p;
    int n;
    uint32_t cp;
    if (c < 0x80) {
      ++p;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      n = 1, cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      n = 2, cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      n = 3, cp = c & 0x07;
    } else {
      return false;
    }
    if (end - p <= n) return false;
    for (int i = 1; i <= n; ++i) {
      if ((p[i] & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (p[i] & 0x3F);
    }
    static const uint32_t kMin[4] = {0, 0x80, 0x800, 0x10000};
    if (cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    p += n + 1;
  }
  return true;
}

namespace {

class JsonChecker {
 public:
  explicit JsonChecker(const std::string& s)
      : begin_(s.data()), p_(s.data()), end_(s.data() + s.size()) {}
  bool run(std::string* reason) {
    ws();
    bool ok = value(0);
    ws();
    if (ok && p_ != end_) ok = fail("trailing characters");
    if (!ok && reason) *reason = error_ + " at byte " + std::to_string(pos_);
    return ok;
  }

 private:
  bool fail(const char* what) {
    if (error_.empty()) {
      error_ = what;
      pos_ = static_cast<size_t>(p_ - begin_);
    }
    return false;
  }
  void ws() {
    while (p_ < end_ && (*p_ == ' ' || *p_ == '\t' || *p_ == '\n' || *p_ == '\r')) advance(1);
  }
  void advance(size_t n) { p_ += n; }
  bool literal(const char* word) {
    size_t n = std::strlen(word);
    if (static_cast<size_t>(end_ - p_) < n || std::memcmp(p_, word, n) != 0) {
      return fail("invalid literal");
    }
    advance(n);
    return true;
  }
  bool string() {
    advance(1);  // opening quote
    while (p_ < end_) {
      const unsigned char c = static_cast<unsigned char>(*p_);
      if (c == '"') {
        advance(1);
        return true;
      }
      if (c < 0x20) return fail("control character in string");
      if (c == '\\') {
        if (end_ - p_ < 2) return fail("unterminated escape");
        const char e = p_[1];
        if (e == 'u') {
          if (end_ - p_ < 6) return fail("short \\u escape");
          for (int i = 2; i < 6; ++i) {
            if (!std::isxdigit(static_cast<unsigned char>(p_[i]))) return fail("bad \\u escape");
          }
          advance(6);
          continue;
        }
        if (!std::strchr("\"\\/bfnrt", e)) return fail("bad escape");
        advance(2);
        continue;
      }
      advance(1);
    }
    return fail("unterminated string");
  }
  bool digits() {
    if (p_ >= end_ || !std::isdigit(static_cast<unsigned char>(*p_))) return fail("digit expected");
    while (p_ < end_ && std::isdigit(static_cast<unsigned char>(*p_))) advance(1);
    return true;
  }
  bool number() {
    if (*p_ == '-') advance(1);
    if (p_ < end_ && *p_ == '0') {
      advance(1);
    } else if (!digits()) {
      return false;
    }
    if (p_ < end_ && *p_ == '.') {
      advance(1);
      if (!digits()) return false;
    }
    if (p_ < end_ && (*p_ == 'e' || *p_ == 'E')) {
      advance(1);
      if (p_ < end_ && (*p_ == '+' || *p_ == '-')) advance(1);
      if (!digits()) return false;
    }
    return true;
  }
  bool value(int depth) {
    if (depth > 256) return fail("nested too deeply");
    if (p_ >= end_) return fail("value expected");
    switch (*p_) {
      case '{': {
        advance(1);
        ws();
        if (p_ < end_ && *p_ == '}') {
          advance(1);
          return true;
        }
        while (true) {
          ws();
          if (p_ >= end_ || *p_ != '"') return fail("object key expected");
          if (!string()) return false;
          ws();
          if (p_ >= end_ || *p_ != ':') return fail("':' expected");
          advance(1);
          ws();
          if (!value(depth + 1)) return false;
          ws();
          if (p_ < end_ && *p_ == ',') {
            advance(1);
            continue;
          }
          if (p_ < end_ && *p_ == '}') {
            advance(1);
            return true;
          }
          return fail("',' or '}' expected");
        }
      }
      case '[': {
        advance(1);
        ws();
        if (p_ < end_ && *p_ == ']') {
          advance(1);
          return true;
        }
        while (true) {
          ws();
          if (!value(depth + 1)) return false;
          ws();
          if (p_ < end_ && *p_ == ',') {
            advance(1);
            continue;
          }
          if (p_ < end_ && *p_ == ']') {
            advance(1);
            return true;
          }
          return fail("',' or ']' expected");
        }
      }
      case '"': return string();
      case 't': return literal("true");
      case 'f': return literal("false");
      case 'n': return literal("null");
      default:
        if (*p_ == '-' || std::isdigit(static_cast<unsigned char>(*p_))) return number();
        return fail("value expected");
    }
  }

  const char* begin_;
  const char* p_;
  const char* end_;
  std::string error_;
  size_t pos_ = 0;
};

}  // namespace

bool is_valid_json(const std::string& text, std::string* reason) {
  if (!is_valid_utf8(text)) {
    if (reason) *reason = "not valid UTF-8";
    return false;
  }
  return JsonChecker(text).run(reason);
}

}  // namespace loadscope::pipeline
