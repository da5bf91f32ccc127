#pragma once
// The image formats FFmpeg decodes (formats.h: PNG, BMP, GIF, TIFF, PPM/PGM/PBM), with
// libavcodec, which handles every PNG colour type and bit depth, interlacing and palettes;
// BMP's 1-32-bit and RLE variants; a GIF's first frame; TIFF's strips, tiles and compressions;
// netpbm's plain and raw forms. Output is 8-bit RGB: alpha is
// dropped (as PIL's convert("RGB") does), 16-bit samples keep their high byte, grey is
// replicated. The whole image is decoded (none of these formats can skip rows cheaply).
// One decoder per thread and format; not thread-safe.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "loadscope/decode/ffmpeg/ffmpeg_common.h"
#include "loadscope/decode/formats.h"
#include "loadscope/decode/image.h"

struct SwsContext;

namespace loadscope::decode {

class FfmpegImageDecoder {
 public:
  // format: one whose row in image_formats() names an FFmpeg decoder (std::logic_error if
  // not); DecodeFailure if this FFmpeg build lacks that decoder.
  explicit FfmpegImageDecoder(ImageFormat format);
  ~FfmpegImageDecoder();
  FfmpegImageDecoder(const FfmpegImageDecoder&) = delete;
  FfmpegImageDecoder& operator=(const FfmpegImageDecoder&) = delete;

  // Decodes the whole image. An image of more than max_pixels pixels fails before its pixels
  // are allocated. Throws DecodeFailure with FFmpeg's reason, prefixed with the format.
  RgbView decode(const uint8_t* data, size_t size, int64_t max_pixels = INT64_MAX);

  // Bytes of buffers held between calls.
  size_t buffer_bytes() const { return input_.capacity() + pixels_.capacity(); }

 private:
  const char* name_;  // the format's, for messages
  const AVCodec* codec_ = nullptr;
  ffmpeg::PacketPtr packet_;
  ffmpeg::FramePtr frame_;
  std::vector<uint8_t> input_;  // padded copy of the input, as libavcodec requires
  std::vector<uint8_t> pixels_;
  ffmpeg::SwsPtr sws_;  // only for uncommon pixel formats (e.g. 1-bit, BGR)
};

}  // namespace loadscope::decode
