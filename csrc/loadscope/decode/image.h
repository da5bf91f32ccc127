#pragma once
// Types shared by the image decoders (which formats there are: formats.h).

#include <cstddef>
#include <cstdint>

namespace loadscope::decode {

// Half-open pixel rectangle [x0, x1) x [y0, y1).
struct Rect {
  int x0 = 0, y0 = 0, x1 = 0, y1 = 0;
  int width() const { return x1 - x0; }
  int height() const { return y1 - y0; }
};

// Interleaved 8-bit RGB pixels owned by a decoder; valid until its next call.
struct RgbView {
  const uint8_t* data = nullptr;
  int width = 0, height = 0;
  size_t stride = 0;   // bytes per row
  int x0 = 0, y0 = 0;  // where data's first pixel sits in the full (scaled) image
};

}  // namespace loadscope::decode
