#include "loadscope/decode/image.h"

#include <algorithm>
#include <cstring>

namespace loadscope::decode {

ImageFormat sniff(const uint8_t* d, size_t n) {
  static const uint8_t kPng[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  if (n >= 3 && d[0] == 0xFF && d[1] == 0xD8 && d[2] == 0xFF) return ImageFormat::kJpeg;
  if (n >= 8 && std::memcmp(d, kPng, 8) == 0) return ImageFormat::kPng;
  // A PNG whose 8-byte signature is cut short or damaged after "\x89PNG".
  if (n > 0 && std::memcmp(d, kPng, std::min<size_t>(n, 4)) == 0) return ImageFormat::kPngTruncated;
  if (n >= 6 && (std::memcmp(d, "GIF87a", 6) == 0 || std::memcmp(d, "GIF89a", 6) == 0)) {
    return ImageFormat::kGif;
  }
  if (n >= 2 && d[0] == 'B' && d[1] == 'M') return ImageFormat::kBmp;
  if (n >= 12 && std::memcmp(d, "RIFF", 4) == 0 && std::memcmp(d + 8, "WEBP", 4) == 0) {
    return ImageFormat::kWebp;
  }
  if (n >= 4 && (std::memcmp(d, "II*\0", 4) == 0 || std::memcmp(d, "MM\0*", 4) == 0)) {
    return ImageFormat::kTiff;
  }
  return ImageFormat::kUnknown;
}

const char* format_name(ImageFormat format) {
  switch (format) {
    case ImageFormat::kJpeg: return "JPEG";
    case ImageFormat::kPng: return "PNG";
    case ImageFormat::kPngTruncated: return "PNG (damaged signature)";
    case ImageFormat::kGif: return "GIF";
    case ImageFormat::kBmp: return "BMP";
    case ImageFormat::kWebp: return "WebP";
    case ImageFormat::kTiff: return "TIFF";
    case ImageFormat::kUnknown: break;
  }
  return "unknown";
}

}  // namespace loadscope::decode
