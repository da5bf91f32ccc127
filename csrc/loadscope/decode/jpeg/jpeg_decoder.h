#pragma once
// JPEG decoding with libjpeg-turbo's libjpeg API, which — unlike the TurboJPEG 2.1 API — can
// decode a region: jpeg_crop_scanline skips IDCT, upsampling and colour conversion left and
// right of it, jpeg_skip_scanlines skips the work above it, and rows below it are never
// entropy-decoded. With DCT scaling (n/8) this decodes only what a crop needs.
//
// One decoder per thread; it owns its output buffer. Not thread-safe.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "loadscope/decode/image.h"

namespace loadscope::decode {

struct JpegInfo {
  int width = 0, height = 0;  // stored (not oriented) size
  int orientation = 1;        // EXIF orientation, 1 when absent
  int components = 0;
};

class JpegDecoder {
 public:
  JpegDecoder();
  ~JpegDecoder();
  JpegDecoder(const JpegDecoder&) = delete;
  JpegDecoder& operator=(const JpegDecoder&) = delete;

  // Reads the header of `data` (which must stay alive until decode() returns).
  // Throws DecodeFailure: not a JPEG, unsupported (e.g. 12-bit), or truncated (no end-of-image
  // marker after the scan data: checked up front so the result never depends on the crop).
  JpegInfo open(const uint8_t* data, size_t size);

  // Size of the image decoded at scale num/8, as libjpeg computes it.
  static int scaled_size(int size, int num) { return (size * num + 7) / 8; }

  // Decodes at least `region` (scaled coordinates, clipped to the scaled image) of the image
  // last opened, at scale num/8 (1..16), converted to RGB. Throws DecodeFailure.
  RgbView decode(int num, Rect region);

  // The first warning libjpeg issued for the last image ("" if none), e.g. corrupt data that
  // it could still decode. Such images are delivered; the warning is reported.
  const std::string& warning() const { return warning_; }

  // Bytes of output buffer held between calls.
  size_t buffer_bytes() const { return pixels_.capacity(); }

 private:
  struct State;
  std::unique_ptr<State> state_;
  std::vector<uint8_t> pixels_;
  std::string warning_;
};

}  // namespace loadscope::decode
