#pragma once
// PNG decoding with FFmpeg's PNG decoder (libavcodec), which handles every PNG colour type and
// bit depth, interlacing and palettes. Output is 8-bit RGB: alpha is dropped (as PIL's
// convert("RGB") does), 16-bit samples keep their high byte, grey is replicated.
// One decoder per thread; not thread-safe.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "loadscope/decode/ffmpeg/ffmpeg_common.h"
#include "loadscope/decode/image.h"

struct SwsContext;

namespace loadscope::decode {

class PngDecoder {
 public:
  PngDecoder();
  ~PngDecoder();
  PngDecoder(const PngDecoder&) = delete;
  PngDecoder& operator=(const PngDecoder&) = delete;

  // Decodes the whole image. Throws DecodeFailure with FFmpeg's reason.
  RgbView decode(const uint8_t* data, size_t size);

  // Bytes of buffers held between calls.
  size_t buffer_bytes() const { return input_.capacity() + pixels_.capacity(); }

 private:
  const AVCodec* codec_ = nullptr;
  ffmpeg::CodecContextPtr context_;
  ffmpeg::PacketPtr packet_;
  ffmpeg::FramePtr frame_;
  std::vector<uint8_t> input_;  // padded copy of the input, as libavcodec requires
  std::vector<uint8_t> pixels_;
  ffmpeg::SwsPtr sws_;  // only for uncommon pixel formats (e.g. 1-bit)
};

}  // namespace loadscope::decode
