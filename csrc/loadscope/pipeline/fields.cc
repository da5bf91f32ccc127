#include "loadscope/pipeline/fields.h"

#include <algorithm>
#include <cerrno>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "loadscope/augment/resample.h"
#include "loadscope/core/error.h"
#include "loadscope/decode/jpeg/jpeg_decoder.h"
#include "loadscope/decode/png/png_decoder.h"
#include "loadscope/io/file.h"

namespace loadscope::pipeline {

using augment::Box;
using augment::CropPlan;
using decode::Rect;

namespace {

// Codec state and buffers of one worker thread, reused for every sample it processes.
struct Scratch {
  decode::JpegDecoder jpeg;
  std::unique_ptr<decode::PngDecoder> png;  // created on first use
  augment::Resampler resampler;
  std::vector<uint8_t> oriented;
  std::string file;
};

Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

CropPlan make_plan(const ImageSpec& spec, int w, int h, Rng& rng) {
  CropPlan plan;
  switch (spec.crop) {
    case CropMode::kRandomResized:
      plan = augment::plan_random_resized_crop(w, h, spec.scale_min, spec.scale_max,
                                               spec.ratio_min, spec.ratio_max, rng);
      break;
    case CropMode::kCenter:
      plan = augment::plan_resize_center_crop(
          w, h, spec.resize > 0 ? spec.resize : std::max(spec.width, spec.height), spec.width,
          spec.height);
      break;
    case CropMode::kResize:
      plan = augment::plan_resize(w, h);
      break;
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
  s.resampler.resample(src, region.width(), region.height(), img.stride, box, dst, spec.width,
                       spec.height,
                       spec.channels_last ? augment::Layout::kHWC : augment::Layout::kCHW,
                       plan.flip);
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
  if (w * h > spec.max_pixels) {
    throw DecodeFailure("image too large: " + std::to_string(w) + "x" + std::to_string(h) + " is " +
                        std::to_string(w * h) + " pixels, over max_pixels=" +
                        std::to_string(spec.max_pixels));
  }
}

// PNG's size from its IHDR chunk (bytes 16-23), so a huge image fails before decoding.
void check_png_size(const uint8_t* d, size_t n, const ImageSpec& spec) {
  if (n < 24) return;  // the decoder reports it
  auto be32 = [&](size_t at) {
    return (int64_t(d[at]) << 24) | (int64_t(d[at + 1]) << 16) | (int64_t(d[at + 2]) << 8) | d[at + 3];
  };
  check_pixels(be32(16), be32(20), spec);
}

std::string decode_jpeg(Scratch& s, const uint8_t* data, size_t size, const ImageSpec& spec,
                        Rng& rng, uint8_t* dst) {
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
    resample_region(s, img, region, splan, spec, dst);
  } else {
    // Rare: decode the whole (scaled) image and turn it upright first.
    const decode::RgbView stored = s.jpeg.decode(num, Rect{0, 0, sw_stored, sh_stored});
    s.oriented.resize(static_cast<size_t>(sw) * sh * 3);
    augment::orient(stored.data, stored.width, stored.height, stored.stride, orientation,
                    s.oriented.data());
    decode::RgbView upright;
    upright.data = s.oriented.data();
    upright.width = sw;
    upright.height = sh;
    upright.stride = static_cast<size_t>(sw) * 3;
    resample_region(s, upright, region, splan, spec, dst);
  }
  return s.jpeg.warning();
}

}  // namespace

std::string decode_image(const uint8_t* data, size_t size, const ImageSpec& spec, Rng& rng,
                         uint8_t* dst) {
  Scratch& s = scratch();
  const decode::ImageFormat format = decode::sniff(data, size);
  if (format == decode::ImageFormat::kJpeg) return decode_jpeg(s, data, size, spec, rng, dst);
  if (format == decode::ImageFormat::kPng) {
    check_png_size(data, size, spec);
    if (!s.png) s.png = std::make_unique<decode::PngDecoder>();
    const decode::RgbView img = s.png->decode(data, size);
    const CropPlan plan = make_plan(spec, img.width, img.height, rng);
    resample_region(s, img, needed_region(plan, img.width, img.height, spec.width, spec.height),
                    plan, spec, dst);
    return "";
  }
  if (size == 0) throw DecodeFailure("empty file");
  if (format == decode::ImageFormat::kPngTruncated) {
    throw DecodeFailure("truncated or damaged PNG: signature incomplete (" + std::to_string(size) +
                        " bytes)");
  }
  throw DecodeFailure(std::string("unsupported image format: ") + decode::format_name(format) +
                      " (supported: JPEG, PNG)");
}

void validate(const std::vector<FieldSpec>& fields) {
  if (fields.empty()) throw ConfigError("fields: at least one field is needed");
  for (size_t i = 0; i < fields.size(); ++i) {
    const FieldSpec& f = fields[i];
    for (size_t j = 0; j < i; ++j) {
      if (fields[j].name == f.name) throw ConfigError("fields: duplicate name '" + f.name + "'");
    }
    if (f.keys.empty()) throw ConfigError("field '" + f.name + "': no member keys");
    if (f.kind != FieldKind::kImage) continue;
    const ImageSpec& s = f.image;
    if (s.height < 1 || s.width < 1 || s.height > 16384 || s.width > 16384) {
      throw ConfigError("field '" + f.name + "': size must be 1..16384");
    }
    if (!(s.scale_min > 0 && s.scale_min <= s.scale_max && s.scale_max <= 1.0)) {
      throw ConfigError("field '" + f.name + "': scale must satisfy 0 < min <= max <= 1");
    }
    if (!(s.ratio_min > 0 && s.ratio_min <= s.ratio_max)) {
      throw ConfigError("field '" + f.name + "': ratio must satisfy 0 < min <= max");
    }
    if (s.max_pixels < 1) throw ConfigError("field '" + f.name + "': max_pixels must be >= 1");
    if (!(s.flip >= 0 && s.flip <= 1)) {
      throw ConfigError("field '" + f.name + "': flip is a probability in [0, 1]");
    }
    if (s.crop == CropMode::kCenter && s.resize > 0 && s.resize < std::max(s.width, s.height)) {
      throw ConfigError("field '" + f.name + "': resize (" + std::to_string(s.resize) +
                        ") must be >= the output size for a center crop");
    }
  }
}

FieldProcessor::FieldProcessor(std::vector<FieldSpec> fields) : fields_(std::move(fields)) {
  validate(fields_);
  int fixed = 0, strings = 0;
  for (const auto& f : fields_) {
    const bool is_fixed = f.kind == FieldKind::kImage || f.kind == FieldKind::kInt;
    slot_of_.push_back(is_fixed ? fixed++ : strings++);
  }
  num_strings_ = static_cast<size_t>(strings);
}

std::vector<size_t> FieldProcessor::fixed_bytes_per_sample() const {
  std::vector<size_t> bytes;
  for (const auto& f : fields_) {
    if (f.kind == FieldKind::kImage) {
      bytes.push_back(static_cast<size_t>(f.image.height) * f.image.width * 3);
    } else if (f.kind == FieldKind::kInt) {
      bytes.push_back(sizeof(int64_t));
    }
  }
  return bytes;
}

namespace {

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

}  // namespace

void FieldProcessor::process(Sample& sample, Batch& batch, int slot, SampleContext& ctx) {
  Scratch& s = scratch();
  for (size_t i = 0; i < fields_.size(); ++i) {
    const FieldSpec& f = fields_[i];
    const Member* m = nullptr;
    for (const auto& key : f.keys) {
      if ((m = sample.find(key)) != nullptr) break;
    }
    if (m == nullptr) {
      std::string wanted;
      for (const auto& k : f.keys) wanted += (wanted.empty() ? "" : ";") + k;
      throw SampleError(sample.key,
                        "no member '" + wanted + "' for field '" + f.name +
                            "' (sample has: " + member_list(sample) + ")",
                        FailureKind::kField);
    }
    const std::string* bytes = &m->data;
    if (m->is_path) {
      try {
        ctx.bytes_read += io::read_file(m->path, s.file);
      } catch (const ReadFailure& e) {
        throw SampleError(m->path, e.what(), FailureKind::kRead);
      }
      bytes = &s.file;
    }
    const std::string& where = m->is_path ? m->path : sample.key;
    switch (f.kind) {
      case FieldKind::kImage: {
        Rng rng(ctx.order->seed, static_cast<uint64_t>(ctx.order->epoch),
                static_cast<RngStream>(static_cast<uint64_t>(RngStream::kAugment) + i),
                static_cast<uint64_t>(sample.position));
        uint8_t* dst = batch.fixed_data(slot_of_[i]) +
                       static_cast<size_t>(slot) * batch.layout->fixed[slot_of_[i]].bytes_per_sample;
        try {
          std::string warning =
              decode_image(reinterpret_cast<const uint8_t*>(bytes->data()), bytes->size(),
                           f.image, rng, dst);
          if (!warning.empty() && ctx.warning.empty()) ctx.warning = m->name + ": " + warning;
        } catch (const DecodeFailure& e) {
          throw SampleError(where, m->name + ": " + e.what(), FailureKind::kDecode);
        }
        break;
      }
      case FieldKind::kInt: {
        int64_t v = 0;
        if (!parse_int(*bytes, v)) {
          throw SampleError(where, m->name + ": not an integer: '" + preview(*bytes) + "'",
                            FailureKind::kField);
        }
        auto* dst = reinterpret_cast<int64_t*>(batch.fixed_data(slot_of_[i]));
        dst[slot] = v;
        break;
      }
      case FieldKind::kText:
        if (!is_valid_utf8(*bytes)) {
          throw SampleError(where, m->name + ": text is not valid UTF-8", FailureKind::kField);
        }
        batch.strings[slot_of_[i]][slot] = *bytes;
        break;
      case FieldKind::kJson: {
        std::string reason;
        if (!is_valid_json(*bytes, &reason)) {
          throw SampleError(where, m->name + ": invalid JSON: " + reason, FailureKind::kField);
        }
        batch.strings[slot_of_[i]][slot] = *bytes;
        break;
      }
      case FieldKind::kBytes:
        batch.strings[slot_of_[i]][slot] = *bytes;
        break;
    }
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
      case '"':
        return string();
      case 't':
        return literal("true");
      case 'f':
        return literal("false");
      case 'n':
        return literal("null");
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
