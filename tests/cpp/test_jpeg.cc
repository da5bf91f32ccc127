// The JPEG decoder against djpeg (libjpeg-turbo's own CLI) and the facts of the data README.
#include <cstdlib>
#include <cstring>

#include "helpers.h"
#include "loadscope/core/error.h"
#include "loadscope/decode/jpeg/exif.h"
#include "loadscope/decode/jpeg/jpeg_decoder.h"

using loadscope::DecodeFailure;
using loadscope::decode::JpegDecoder;
using loadscope::decode::Rect;
using loadscope::decode::RgbView;
using namespace testing;

namespace {

const char* kDecodable[] = {
    "vision/test/assets/encode_jpeg/grace_hopper_517x606.jpg",  // restart markers
    "vision/test/assets/fakedata/logos/rgb_pytorch.jpg",
    "vision/test/assets/fakedata/logos/gray_pytorch.jpg",  // greyscale
    "pillow/Tests/images/hopper.jpg",
    "pillow/Tests/images/pil_sample_rgb.jpg",        // 4:4:4, DRI, ICC
    "pillow/Tests/images/hopper_16bit_qtables.jpg",  // SOF1
    "imageio/chelsea.jpg",
    "imageio/bricks.jpg",  // 4:2:2
    "libjpeg-turbo/testimages/testorig.jpg",
    "libjpeg-turbo/testimages/testimgari.jpg",    // arithmetic coding
    "moviepy/media/doc_medias/example_mask.jpg",  // progressive
    "exif-orientation-examples/Landscape_6.jpg",
};

std::vector<uint8_t> pixels(const RgbView& v) {
  std::vector<uint8_t> out;
  for (int y = 0; y < v.height; ++y) {
    out.insert(out.end(), v.data + y * v.stride, v.data + y * v.stride + v.width * 3);
  }
  return out;
}

Pnm djpeg(const std::string& path, const std::string& args = "") {
  int rc = 0;
  std::string out = run("djpeg -pnm " + args + " " + quote(path) + " 2>/dev/null", &rc);
  return parse_pnm(out);
}

}  // namespace

TEST_CASE("full decode is identical to djpeg", "[jpeg]") {
  REQUIRE_SHARED_DATA();
  if (!have_tool("djpeg")) {
    WARN("skipped: djpeg not installed");
    return;
  }
  JpegDecoder dec;
  for (const char* rel : kDecodable) {
    INFO(rel);
    const std::string data = read_all(real(rel));
    const auto info = dec.open(reinterpret_cast<const uint8_t*>(data.data()), data.size());
    const RgbView v = dec.decode(8, Rect{0, 0, info.width, info.height});
    const Pnm ref = djpeg(real(rel));
    REQUIRE(v.width == ref.width);
    REQUIRE(v.height == ref.height);
    CHECK(pixels(v) == ref.rgb);
  }
}

TEST_CASE("CMYK converts to RGB like libjpeg-turbo's djpeg", "[jpeg]") {
  REQUIRE_SHARED_DATA();
  if (!have_tool("djpeg")) return;
  const std::string rel = real("vision/test/assets/fakedata/logos/cmyk_pytorch.jpg");
  const std::string data = read_all(rel);
  JpegDecoder dec;
  const auto info = dec.open(reinterpret_cast<const uint8_t*>(data.data()), data.size());
  REQUIRE(info.components == 4);
  const auto got = pixels(dec.decode(8, Rect{0, 0, info.width, info.height}));
  const Pnm ref = djpeg(rel);
  REQUIRE(got.size() == ref.rgb.size());
  int worst = 0;
  for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::abs(got[i] - ref.rgb[i]));
  CHECK(worst <= 1);  // rounding of C * K / 255
}

TEST_CASE("scaled decodes are identical to djpeg -scale", "[jpeg]") {
  REQUIRE_SHARED_DATA();
  if (!have_tool("djpeg")) return;
  JpegDecoder dec;
  for (const char* rel : {"imageio/chelsea.jpg", "exif-orientation-examples/Landscape_1.jpg"}) {
    for (int n : {1, 3, 4, 6, 7}) {
      INFO(rel << " at " << n << "/8");
      const std::string data = read_all(real(rel));
      const auto info = dec.open(reinterpret_cast<const uint8_t*>(data.data()), data.size());
      const int w = JpegDecoder::scaled_size(info.width, n);
      const int h = JpegDecoder::scaled_size(info.height, n);
      const auto got = pixels(dec.decode(n, Rect{0, 0, w, h}));
      const Pnm ref = djpeg(real(rel), "-scale " + std::to_string(n) + "/8");
      REQUIRE(ref.width == w);
      REQUIRE(ref.height == h);
      CHECK(got == ref.rgb);
    }
  }
}

TEST_CASE("a region decodes to the same pixels as that region of the full image", "[jpeg]") {
  REQUIRE_SHARED_DATA();
  JpegDecoder dec;
  for (const char* rel : {"imageio/chelsea.jpg", "moviepy/media/doc_medias/example_mask.jpg",
                          "vision/test/assets/encode_jpeg/grace_hopper_517x606.jpg",
                          "libjpeg-turbo/testimages/testimgari.jpg"}) {
    const std::string data = read_all(real(rel));
    const auto* bytes = reinterpret_cast<const uint8_t*>(data.data());
    for (int n : {8, 5}) {
      const auto info = dec.open(bytes, data.size());
      const int w = JpegDecoder::scaled_size(info.width, n);
      const int h = JpegDecoder::scaled_size(info.height, n);
      const RgbView full_view = dec.decode(n, Rect{0, 0, w, h});
      const std::vector<uint8_t> full = pixels(full_view);
      for (Rect r : {Rect{0, 0, w / 2, h / 2}, Rect{w / 3, h / 4, w - 3, h - 5},
                     Rect{w - 17, h - 9, w, h}, Rect{5, 7, 6, 8}}) {
        INFO(rel << " n=" << n << " region " << r.x0 << "," << r.y0 << "-" << r.x1 << "," << r.y1);
        dec.open(bytes, data.size());
        const RgbView v = dec.decode(n, r);
        REQUIRE(v.x0 <= r.x0);
        REQUIRE(v.x0 + v.width >= r.x1);
        REQUIRE(v.y0 == r.y0);
        REQUIRE(v.height == r.height());
        bool same = true;
        for (int y = r.y0; y < r.y1 && same; ++y) {
          for (int x = r.x0; x < r.x1 && same; ++x) {
            for (int c = 0; c < 3; ++c) {
              same &= v.data[(y - v.y0) * v.stride + (x - v.x0) * 3 + c] ==
                      full[(static_cast<size_t>(y) * w + x) * 3 + c];
            }
          }
        }
        CHECK(same);
      }
    }
  }
}

TEST_CASE("corrupt, truncated and unsupported JPEGs fail with libjpeg's reason", "[jpeg]") {
  REQUIRE_SHARED_DATA();
  JpegDecoder dec;
  auto decode_all = [&](const std::string& data) {
    const auto info = dec.open(reinterpret_cast<const uint8_t*>(data.data()), data.size());
    dec.decode(8, Rect{0, 0, info.width, info.height});
  };
  // djpeg: "Unsupported marker type 0xae" (torchvision's test matches the same text).
  REQUIRE_THROWS_WITH(decode_all(read_all(real("vision/test/assets/damaged_jpeg/corrupt.jpg"))),
                      Catch::Contains("Unsupported marker type 0xae"));
  // 755 bytes of a 2544x3300 image: djpeg warns "Premature end of JPEG file".
  REQUIRE_THROWS_WITH(decode_all(read_all(real("vision/test/assets/damaged_jpeg/corrupt34_2.jpg"))),
                      Catch::Contains("truncated"));
  // Any prefix of a good file is truncated, whatever region is asked for.
  const std::string good = read_all(real("imageio/chelsea.jpg"));
  for (size_t cut : {good.size() / 2, good.size() - 3, size_t(700)}) {
    REQUIRE_THROWS_AS(decode_all(good.substr(0, cut)), DecodeFailure);
  }
  // 12-bit precision in the frame header: an 8-bit libjpeg-turbo refuses it by name.
  std::string twelve = good;
  const size_t sof = twelve.find("\xFF\xC0");
  REQUIRE(sof != std::string::npos);
  twelve[sof + 4] = 12;
  REQUIRE_THROWS_WITH(decode_all(twelve), Catch::Contains("precision 12"));
  REQUIRE_THROWS_AS(decode_all(std::string("\xFF\xD8\xFF")), DecodeFailure);
  // A corrupt file that libjpeg can still decode is delivered, with its warning kept.
  const std::string ff00 = read_all(real("pillow/Tests/images/jpeg_ff00_header.jpg"));
  const auto info = dec.open(reinterpret_cast<const uint8_t*>(ff00.data()), ff00.size());
  dec.decode(8, Rect{0, 0, info.width, info.height});
  CHECK_THAT(dec.warning(), Catch::Contains("extraneous bytes before marker 0xdb"));
}

TEST_CASE("EXIF orientation is read as the data README states", "[jpeg][exif]") {
  REQUIRE_SHARED_DATA();
  JpegDecoder dec;
  for (int o = 0; o <= 8; ++o) {
    const std::string data =
        read_all(real("exif-orientation-examples/Landscape_" + std::to_string(o) + ".jpg"));
    const auto info = dec.open(reinterpret_cast<const uint8_t*>(data.data()), data.size());
    CHECK(info.orientation == (o == 0 ? 1 : o));
    const bool transposed = o >= 5;
    CHECK(info.width == (transposed ? 1200 : 1800));
    CHECK(info.height == (transposed ? 1800 : 1200));
  }
  const std::string rect = read_all(real("pillow/Tests/images/orientation_rectangle.jpg"));
  CHECK(dec.open(reinterpret_cast<const uint8_t*>(rect.data()), rect.size()).orientation == 8);
}

TEST_CASE("malformed EXIF never fails an image", "[exif]") {
  using loadscope::decode::exif_orientation;
  const uint8_t not_exif[] = "JFIF\0\0II*\0\x08\0\0\0";
  CHECK(exif_orientation(not_exif, sizeof not_exif) == 1);
  // Big-endian TIFF, IFD at 8 with one entry: 0x0112 SHORT count 1 value 6.
  const uint8_t mm[] = {'E',  'x',  'i', 'f', 0, 0, 'M', 'M', 0, 42, 0, 0, 0, 8, 0, 1,
                        0x01, 0x12, 0,   3,   0, 0, 0,   1,   0, 6,  0, 0, 0, 0, 0, 0};
  CHECK(exif_orientation(mm, sizeof mm) == 6);
  // The same entry with the IFD offset pointing past the end, or cut short.
  uint8_t bad[sizeof mm];
  std::memcpy(bad, mm, sizeof mm);
  bad[13] = 200;
  CHECK(exif_orientation(bad, sizeof bad) == 1);
  CHECK(exif_orientation(mm, 20) == 1);
  uint8_t nine[sizeof mm];
  std::memcpy(nine, mm, sizeof mm);
  nine[25] = 9;  // out of range
  CHECK(exif_orientation(nine, sizeof nine) == 1);
}
