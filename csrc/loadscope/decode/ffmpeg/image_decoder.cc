#include "loadscope/decode/ffmpeg/image_decoder.h"

#include <algorithm>
#include <climits>

#include <cstring>

extern "C" {
#include <libavutil/pixdesc.h>
#include <libswscale/swscale.h>
}

#include "loadscope/core/error.h"

namespace loadscope::decode {

using ffmpeg::error_string;

namespace {
AVCodecID codec_of(ImageFormat format) {
  switch (format) {
    case ImageFormat::kPng: return AV_CODEC_ID_PNG;
    case ImageFormat::kBmp: return AV_CODEC_ID_BMP;
    case ImageFormat::kGif: return AV_CODEC_ID_GIF;
    case ImageFormat::kTiff: return AV_CODEC_ID_TIFF;
    default: return AV_CODEC_ID_NONE;
  }
}
}  // namespace

FfmpegImageDecoder::FfmpegImageDecoder(ImageFormat format) : name_(format_name(format)) {
  const AVCodecID id = codec_of(format);
  if (id == AV_CODEC_ID_NONE) throw std::logic_error("FfmpegImageDecoder: not an FFmpeg format");
  codec_ = avcodec_find_decoder(id);
  if (codec_ == nullptr)
    throw DecodeFailure(std::string(name_) + ": this FFmpeg build has no decoder for it");
  packet_.reset(av_packet_alloc());
  frame_.reset(av_frame_alloc());
  if (!packet_ || !frame_) throw std::bad_alloc();
}

FfmpegImageDecoder::~FfmpegImageDecoder() = default;

RgbView FfmpegImageDecoder::decode(const uint8_t* data, size_t size, int64_t max_pixels) {
  ffmpeg::LogCapture log;
  if (size > static_cast<size_t>(INT_MAX - AV_INPUT_BUFFER_PADDING_SIZE))
    throw DecodeFailure(std::string(name_) + ": file too large for one packet");
  input_.resize(size + AV_INPUT_BUFFER_PADDING_SIZE);
  std::memcpy(input_.data(), data, size);
  std::memset(input_.data() + size, 0, AV_INPUT_BUFFER_PADDING_SIZE);
  av_packet_unref(packet_.get());
  packet_->data = input_.data();
  packet_->size = static_cast<int>(size);
  // A fresh context per image: FFmpeg 5.1's PNG decoder keeps state from the previous image
  // (an image decoded after another came out wrong when the context was reused and flushed).
  context_.reset(avcodec_alloc_context3(codec_));
  if (!context_) throw std::bad_alloc();
  context_->thread_count = 1;  // parallelism comes from the engine's threads
  // A header claiming a huge image fails when the frame is allocated, not after.
  context_->max_pixels = std::max<int64_t>(max_pixels, 1);
  int rc = avcodec_open2(context_.get(), codec_, nullptr);
  if (rc < 0)
    throw DecodeFailure(std::string(name_) + ": cannot open decoder: " + error_string(rc));
  auto fail = [&](const char* what, int rc) {
    std::string reason = std::string(name_) + ": " + what + ": " + error_string(rc);
    if (!log.text().empty()) reason += " (" + log.text() + ")";
    return DecodeFailure(reason);
  };
  rc = avcodec_send_packet(context_.get(), packet_.get());
  if (rc < 0) throw fail("cannot decode", rc);
  rc = avcodec_receive_frame(context_.get(), frame_.get());
  if (rc < 0) throw fail("cannot decode", rc);
  // FFmpeg's decoder tolerates some damage; a message at error level means the pixels are
  // not trustworthy, so the image fails rather than being delivered half-decoded.
  if (!log.text().empty())
    throw DecodeFailure(std::string(name_) + ": corrupt data (" + log.text() + ")");

  const AVFrame& f = *frame_;
  const int w = f.width, h = f.height;
  const size_t stride = static_cast<size_t>(w) * 3;
  pixels_.resize(stride * h + 64);  // swscale (fallback below) may write past a row's end
  const auto fmt = static_cast<AVPixelFormat>(f.format);
  for (int y = 0; y < h && fmt != AV_PIX_FMT_NONE; ++y) {
    const uint8_t* s = f.data[0] + static_cast<ptrdiff_t>(y) * f.linesize[0];
    uint8_t* d = pixels_.data() + y * stride;
    switch (fmt) {
      case AV_PIX_FMT_RGB24: std::memcpy(d, s, stride); break;
      case AV_PIX_FMT_RGBA:
        for (int x = 0; x < w; ++x) std::memcpy(d + 3 * x, s + 4 * x, 3);
        break;
      case AV_PIX_FMT_GRAY8:
      case AV_PIX_FMT_YA8: {
        const int step = fmt == AV_PIX_FMT_GRAY8 ? 1 : 2;
        for (int x = 0; x < w; ++x) d[3 * x] = d[3 * x + 1] = d[3 * x + 2] = s[step * x];
        break;
      }
      case AV_PIX_FMT_PAL8: {
        const auto* pal = reinterpret_cast<const uint32_t*>(f.data[1]);  // native-endian ARGB
        for (int x = 0; x < w; ++x) {
          const uint32_t c = pal[s[x]];
          d[3 * x] = static_cast<uint8_t>(c >> 16);
          d[3 * x + 1] = static_cast<uint8_t>(c >> 8);
          d[3 * x + 2] = static_cast<uint8_t>(c);
        }
        break;
      }
      case AV_PIX_FMT_RGB48BE:
      case AV_PIX_FMT_RGBA64BE: {
        const int step = fmt == AV_PIX_FMT_RGB48BE ? 6 : 8;
        for (int x = 0; x < w; ++x) {
          d[3 * x] = s[step * x];  // big-endian: the high byte comes first
          d[3 * x + 1] = s[step * x + 2];
          d[3 * x + 2] = s[step * x + 4];
        }
        break;
      }
      case AV_PIX_FMT_GRAY16BE:
      case AV_PIX_FMT_YA16BE: {
        const int step = fmt == AV_PIX_FMT_GRAY16BE ? 2 : 4;
        for (int x = 0; x < w; ++x) d[3 * x] = d[3 * x + 1] = d[3 * x + 2] = s[step * x];
        break;
      }
      default: {
        // Anything else (1-bit monochrome, ...): let swscale convert the whole frame.
        // sws_getCachedContext frees the context it is given when it makes another.
        sws_.reset(sws_getCachedContext(sws_.release(), w, h, fmt, w, h, AV_PIX_FMT_RGB24,
                                        SWS_POINT, nullptr, nullptr, nullptr));
        if (sws_ == nullptr) {
          const char* name = av_get_pix_fmt_name(fmt);
          throw DecodeFailure(std::string(name_) + ": unsupported pixel format " +
                              (name ? name : "?"));
        }
        uint8_t* dst[4] = {pixels_.data(), nullptr, nullptr, nullptr};
        int dst_stride[4] = {static_cast<int>(stride), 0, 0, 0};
        if (sws_scale(sws_.get(), f.data, f.linesize, 0, h, dst, dst_stride) != h) {
          const char* name = av_get_pix_fmt_name(fmt);
          throw DecodeFailure(std::string(name_) + ": conversion from " + (name ? name : "?") +
                              " failed");
        }
        y = h;  // whole frame done
        break;
      }
    }
  }
  av_frame_unref(frame_.get());
  RgbView view;
  view.data = pixels_.data();
  view.width = w;
  view.height = h;
  view.stride = stride;
  return view;
}

}  // namespace loadscope::decode
