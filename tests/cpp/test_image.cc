// Image-level behaviour: format sniffing and the format table, PNG and PPM decoding, resampling
// properties, crop planning.
#include <cmath>
#include <cstring>
#include <set>

#include "helpers.h"
#include "loadscope/augment/geometry.h"
#include "loadscope/augment/resample.h"
#include "loadscope/core/error.h"
#include "loadscope/decode/ffmpeg/image_decoder.h"
#include "loadscope/decode/formats.h"
#include "loadscope/decode/image.h"
#include "loadscope/pipeline/image_field.h"

using namespace loadscope;
using namespace testing;

TEST_CASE("formats are recognised from bytes, not names", "[image]") {
  using decode::ImageFormat;
  using decode::sniff;
  auto s = [](const std::string& b) {
    return sniff(reinterpret_cast<const uint8_t*>(b.data()), b.size());
  };
  CHECK(s("\xFF\xD8\xFF\xE0") == ImageFormat::kJpeg);
  CHECK(s(std::string("\x89PNG\r\n\x1a\n", 8)) == ImageFormat::kPng);
  CHECK(s(std::string("\x89PNG\r\n\x1a", 7)) == ImageFormat::kPngTruncated);
  CHECK(s("BM6\x00") == ImageFormat::kBmp);
  CHECK(s("GIF89a...") == ImageFormat::kGif);
  // netpbm: the type's digit, then whitespace (netpbm's rule); P7 (PAM) is not read.
  CHECK(s("P6\n3 2\n255\n") == ImageFormat::kPpm);
  CHECK(s("P3 3 2 255") == ImageFormat::kPpm);
  CHECK(s("P5\r\n") == ImageFormat::kPgm);
  CHECK(s("P4\t") == ImageFormat::kPbm);
  CHECK(s("P7\nWIDTH 3") == ImageFormat::kUnknown);
  CHECK(s("P61") == ImageFormat::kUnknown);
  CHECK(s("hello") == ImageFormat::kUnknown);
  // Every row has a distinct format, a name and at least one extension; FFmpeg rows a decoder.
  std::set<ImageFormat> seen;
  for (const auto& row : decode::image_formats()) {
    CHECK(seen.insert(row.format).second);
    CHECK(std::string(row.extensions).size() > 0);
    CHECK((row.backend == decode::ImageBackend::kFfmpeg) == (row.ffmpeg_decoder != nullptr));
  }
}

TEST_CASE("unsupported and truncated images fail with a clear reason", "[image]") {
  REQUIRE_SHARED_DATA();
  pipeline::ImageSpec spec;
  std::vector<uint8_t> out(224 * 224 * 3);
  Rng rng(0);
  auto decode = [&](const std::string& data) {
    return pipeline::decode_image(reinterpret_cast<const uint8_t*>(data.data()), data.size(), spec,
                                  rng, out.data());
  };
  CHECK_THROWS_WITH(
      decode(read_all(real("pillow/LICENSE"))),
      Catch::Contains("unsupported image format: unknown") &&
          Catch::Contains("supported: JPEG, PNG, PPM, BMP, PGM, TIFF, WebP, GIF, PBM"));
  CHECK_THROWS_WITH(decode(read_all(real("pillow/Tests/images/bmp/b/shortfile.bmp"))),
                    Catch::Contains("BMP: cannot decode"));
  const std::string webp = read_all(real("pillow/Tests/images/hopper.webp"));
  CHECK_THROWS_WITH(decode(webp.substr(0, webp.size() - 1)), Catch::Contains("truncated WebP"));
  CHECK_THROWS_WITH(decode(read_all(real("vision/test/assets/toosmall_png/heapbof.png"))),
                    Catch::Contains("damaged PNG"));
  const std::string png = read_all(real("vision/test/assets/fakedata/imagefolder/a/a1.png"));
  CHECK_THROWS_AS(decode(png.substr(0, png.size() / 2)), DecodeFailure);
  CHECK_THROWS_WITH(decode(""), Catch::Contains("empty"));
}

TEST_CASE("PNG and PPM decode to the same pixels as ffmpeg's rgb24 conversion", "[image][png]") {
  REQUIRE_SHARED_DATA();
  if (!have_tool("ffmpeg")) {
    WARN("skipped: ffmpeg not installed");
    return;
  }
  decode::FfmpegImageDecoder dec(decode::ImageFormat::kPng);
  // 8-bit colour types (16-bit ones are checked against PIL in the Python tests: ffmpeg
  // rounds 16 -> 8 bits where PIL and loadscope keep the high byte).
  for (const char* rel : {"vision/test/assets/fakedata/logos/rgb_pytorch.png",
                          "vision/test/assets/fakedata/logos/gray_pytorch.png",
                          "vision/test/assets/fakedata/logos/palette_pytorch.png",
                          "vision/test/assets/fakedata/logos/rgbalpha_pytorch.png",
                          // same size and format one after another: a reused FFmpeg
                          // context got the second one wrong
                          "vision/test/assets/fakedata/imagefolder/a/a1.png",
                          "vision/test/assets/fakedata/imagefolder/a/a2.png",
                          "vision/test/assets/fakedata/imagefolder/b/b1.png"}) {
    INFO(rel);
    const std::string data = read_all(real(rel));
    const auto v = dec.decode(reinterpret_cast<const uint8_t*>(data.data()), data.size());
    int rc = 0;
    // ffmpeg's rgb24 conversion drops alpha, as PIL's convert("RGB") does.
    const std::string ref =
        run("ffmpeg -v error -i " + quote(real(rel)) + " -f rawvideo -pix_fmt rgb24 - 2>/dev/null",
            &rc);
    REQUIRE(rc == 0);
    REQUIRE(ref.size() == static_cast<size_t>(v.width) * v.height * 3);
    CHECK(std::memcmp(ref.data(), v.data, ref.size()) == 0);
  }
  const std::string rel = "pillow/Tests/images/hopper_webp_bits.ppm";
  const std::string data = read_all(real(rel));
  decode::FfmpegImageDecoder ppm(decode::ImageFormat::kPpm);
  const auto v = ppm.decode(reinterpret_cast<const uint8_t*>(data.data()), data.size());
  int rc = 0;
  const std::string ref = run(
      "ffmpeg -v error -i " + quote(real(rel)) + " -f rawvideo -pix_fmt rgb24 - 2>/dev/null", &rc);
  REQUIRE(rc == 0);
  REQUIRE(ref.size() == static_cast<size_t>(v.width) * v.height * 3);
  CHECK(std::memcmp(ref.data(), v.data, ref.size()) == 0);
}

TEST_CASE("resampling: identity, constants and flips", "[resample]") {
  augment::Resampler r;
  const int w = 37, h = 23;
  std::vector<uint8_t> src(w * h * 3);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>((i * 7919) % 251);
  std::vector<uint8_t> hwc(w * h * 3), chw(w * h * 3), flipped(w * h * 3);
  r.resample(src.data(), w, h, w * 3, augment::Box{0, 0, w, h}, hwc.data(), w, h,
             augment::Layout::kHWC, false);
  CHECK(hwc == src);  // same size, whole image: every pixel is its own
  r.resample(src.data(), w, h, w * 3, augment::Box{0, 0, w, h}, chw.data(), w, h,
             augment::Layout::kCHW, false);
  r.resample(src.data(), w, h, w * 3, augment::Box{0, 0, w, h}, flipped.data(), w, h,
             augment::Layout::kCHW, true);
  for (int c = 0; c < 3; ++c) {
    for (int y = 0; y < h; ++y) {
      for (int x = 0; x < w; ++x) {
        const uint8_t v = src[(y * w + x) * 3 + c];
        REQUIRE(chw[(c * h + y) * w + x] == v);
        REQUIRE(flipped[(c * h + y) * w + (w - 1 - x)] == v);
      }
    }
  }
  std::vector<uint8_t> flat(100 * 80 * 3, 173), small(9 * 13 * 3);
  r.resample(flat.data(), 100, 80, 300, augment::Box{3.5, 2.25, 97, 61}, small.data(), 9, 13,
             augment::Layout::kCHW, false);
  for (uint8_t v : small) REQUIRE(v == 173);  // weights sum to one at every output pixel
}

TEST_CASE("crop plans follow torchvision's RandomResizedCrop and CenterCrop", "[geometry]") {
  Rng rng(3);
  for (int i = 0; i < 2000; ++i) {
    auto p = augment::plan_random_resized_crop(500, 375, 0.08, 1.0, 3.0 / 4, 4.0 / 3, rng);
    const double w = p.box.width(), h = p.box.height();
    REQUIRE(p.box.x0 >= 0);
    REQUIRE(p.box.y0 >= 0);
    REQUIRE(p.box.x1 <= 500);
    REQUIRE(p.box.y1 <= 375);
    REQUIRE(w == std::floor(w));
    REQUIRE(p.window.x0 == p.box.x0);  // crop first, then resize: the filter stays inside
    const double area = w * h / (500.0 * 375);
    REQUIRE(area >= 0.08 * 0.95);
    REQUIRE(area <= 1.0);
  }
  // The fallback for an extreme image: a central crop clipped to the ratio bounds.
  Rng r2(0);
  auto thin = augment::plan_random_resized_crop(1000, 10, 0.9, 1.0, 3.0 / 4, 4.0 / 3, r2);
  CHECK(thin.box.height() == 10);
  CHECK(thin.box.width() == 13);  // round(10 * 4/3)
  CHECK(thin.box.x0 == (1000 - 13) / 2);
  // Resize(256) + CenterCrop(224) of 500x375: resized to 341x256, crop at (58, 16).
  auto c = augment::plan_resize_center_crop(500, 375, 256, 224, 224);
  const double s = 375.0 / 256;
  CHECK(c.box.x0 == Approx(58 * 500.0 / 341));
  CHECK(c.box.y0 == Approx(16 * s));
  CHECK(c.window.x1 == 500);  // resize first: the whole image may be filtered
}
