#pragma once
// WebP decoding with libwebp: lossy (VP8) and lossless (VP8L), with or without alpha, and the
// first frame of an animation. Output is 8-bit RGB: alpha is dropped, as PIL's convert("RGB")
// and the PNG decoder do. A still image decodes only the rows and columns of a region
// (libwebp's cropping: rows below it are never decoded and colour is converted only inside it;
// VP8 predicts from the rows above, so those are decoded).
// One decoder per thread; not thread-safe.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "loadscope/decode/image.h"

namespace loadscope::decode {

struct WebpInfo {
  int width = 0, height = 0;  // stored (not oriented) size: the canvas of an animation
  int orientation = 1;        // EXIF orientation, 1 when absent
  bool animated = false;
};

class WebpDecoder {
 public:
  // Reads the headers of `data` (which must stay alive until decode() returns). Throws
  // DecodeFailure when it is not a WebP libwebp reads, or is cut short before its image data.
  WebpInfo open(const uint8_t* data, size_t size);

  // Decodes at least `region` (stored coordinates, clipped to the image) of the image last
  // opened; once per open(). A still image's region starts on even coordinates (libwebp crops on
  // the chroma grid), so the view may begin up to a pixel before it; an animation's first frame is
  // decoded whole. Throws DecodeFailure naming libwebp's status (a truncated file included).
  RgbView decode(Rect region);

  // Bytes of output buffer held between calls.
  size_t buffer_bytes() const { return pixels_.capacity(); }

 private:
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  WebpInfo info_;
  std::vector<uint8_t> pixels_;
};

}  // namespace loadscope::decode
