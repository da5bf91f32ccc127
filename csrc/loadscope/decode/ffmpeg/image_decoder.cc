#include "loadscope/decode/ffmpeg/image_decoder.h"

#include <algorithm>
#include <climits>
#include <stdexcept>

#include <cstring>

extern "C" {
#include <libavutil/pixdesc.h>
#include <libswscale/swscale.h>
}

#include "loadscope/core/error.h"

namespace loadscope::decode {

using ffmpeg::error_string;

FfmpegImageDecoder::FfmpegImageDecoder(ImageFormat format) : name_(format_name(format)) {
  const ImageFormatInfo& row = image_format(format);
  if (row.backend != ImageBackend::kFfmpeg)
    throw std::logic_error("FfmpegImageDecoder: not an FFmpeg format");
  codec_ = avcodec_find_decoder_by_name(row.ffmpeg_decoder);
  if (codec_ == nullptr) {
    throw DecodeFailure(std::string(name_) + ": this FFmpeg build has no " + row.ffmpeg_decoder +
                        " decoder");
  }
  packet_.reset(av_packet_alloc());
  frame_.reset(av_frame_alloc());
  if (!packet_ || !frame_) throw std::bad_alloc();
}

FfmpegImageDecoder::~FfmpegImageDecoder() = default;

namespace {
// The frame's size against max_pixels, exactly, before its pixels are allocated. (FFmpeg's own
// max_pixels check counts the width rounded up to its alignment: it refused a 1000x1000 image
// under a limit of 1000000.)
struct SizeLimit {
  int64_t max_pixels;
  bool exceeded = false;
};

// Whether a GIF holds its first image whole: FFmpeg's decoder delivers an image whose data ends
// between two rows as if it were complete, so the blocks are walked
// up to that image's terminator first. Anything the walk does not understand is left to FFmpeg.
bool gif_first_image_complete(const uint8_t* d, size_t n) {
  size_t pos = 13;  // signature and logical screen descriptor
  if (n < pos) return false;
  if (d[10] & 0x80) pos += size_t{3} << ((d[10] & 7) + 1);  // global colour table
  auto sub_blocks = [&]() {                                 // to the 0-length terminator
    while (pos < n) {
      const size_t len = d[pos++];
      if (len == 0) return true;
      pos += len;
    }
    return false;
  };
  while (pos < n) {
    const uint8_t block = d[pos++];
    if (block == 0x21) {  // extension: label, then sub-blocks
      if (++pos > n || !sub_blocks()) return false;
    } else if (block == 0x2C) {  // image descriptor, local colour table, LZW code size, data
      if (pos + 9 > n) return false;
      const uint8_t flags = d[pos + 8];
      pos += 9;
      if (flags & 0x80) pos += size_t{3} << ((flags & 7) + 1);
      return ++pos <= n && sub_blocks();
    } else {
      return true;  // the trailer or something else: FFmpeg's to judge
    }
  }
  return false;
}

int limited_get_buffer(AVCodecContext* c, AVFrame* f, int flags) {
  auto* limit = static_cast<SizeLimit*>(c->opaque);
  if (static_cast<int64_t>(f->width) * f->height > limit->max_pixels) {
    limit->exceeded = true;
    return AVERROR(ERANGE);
  }
  return avcodec_default_get_buffer2(c, f, flags);
}
}  // namespace

RgbView FfmpegImageDecoder::decode(const uint8_t* data, size_t size, int64_t max_pixels) {
  ffmpeg::LogCapture log;
  if (size > static_cast<size_t>(INT_MAX - AV_INPUT_BUFFER_PADDING_SIZE))
    throw DecodeFailure(std::string(name_) + ": file too large for one packet");
  if (codec_->id == AV_CODEC_ID_GIF && !gif_first_image_complete(data, size))
    throw DecodeFailure("GIF: truncated (the file ends inside its first image)");
  input_.resize(size + AV_INPUT_BUFFER_PADDING_SIZE);
  std::memcpy(input_.data(), data, size);
  std::memset(input_.data() + size, 0, AV_INPUT_BUFFER_PADDING_SIZE);
  av_packet_unref(packet_.get());
  packet_->data = input_.data();
  packet_->size = static_cast<int>(size);
  // A fresh context per image: FFmpeg 5.1's PNG decoder keeps state from the previous image
  // (an image decoded after another came out wrong when the context was reused and flushed).
  // It holds `limit` and goes with this call: a GIF decoder keeps its whole RGBA canvas.
  ffmpeg::CodecContextPtr context(avcodec_alloc_context3(codec_));
  if (!context) throw std::bad_alloc();
  context->thread_count = 1;  // parallelism comes from the engine's threads
  SizeLimit limit{max_pixels};
  context->opaque = &limit;
  context->get_buffer2 = limited_get_buffer;
  int rc = avcodec_open2(context.get(), codec_, nullptr);
  if (rc < 0)
    throw DecodeFailure(std::string(name_) + ": cannot open decoder: " + error_string(rc));
  auto fail = [&](const char* what, int rc) {
    if (limit.exceeded) {  // the message check_pixels gives for JPEG, PNG and WebP headers
      return DecodeFailure("image too large: " + std::to_string(context->width) + "x" +
                           std::to_string(context->height) +
                           " pixels, over max_pixels=" + std::to_string(max_pixels));
    }
    std::string reason = std::string(name_) + ": " + what + ": " + error_string(rc);
    if (!log.text().empty()) reason += " (" + log.text() + ")";
    return DecodeFailure(reason);
  };
  rc = avcodec_send_packet(context.get(), packet_.get());
  if (rc < 0) throw fail("cannot decode", rc);
  rc = avcodec_receive_frame(context.get(), frame_.get());
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
      case AV_PIX_FMT_RGBA64BE:
      case AV_PIX_FMT_RGB48LE:
      case AV_PIX_FMT_RGBA64LE: {  // each sample's high byte: first big-endian, second little
        const int step = fmt == AV_PIX_FMT_RGB48BE || fmt == AV_PIX_FMT_RGB48LE ? 6 : 8;
        const int hi = fmt == AV_PIX_FMT_RGB48LE || fmt == AV_PIX_FMT_RGBA64LE;
        for (int x = 0; x < w; ++x) {
          for (int c = 0; c < 3; ++c) d[3 * x + c] = s[step * x + 2 * c + hi];
        }
        break;
      }
      case AV_PIX_FMT_GRAY16BE:
      case AV_PIX_FMT_YA16BE:
      case AV_PIX_FMT_GRAY16LE:
      case AV_PIX_FMT_YA16LE: {  // PNG is big-endian, TIFF from little-endian writers little
        const int step = fmt == AV_PIX_FMT_GRAY16BE || fmt == AV_PIX_FMT_GRAY16LE ? 2 : 4;
        const int hi = fmt == AV_PIX_FMT_GRAY16LE || fmt == AV_PIX_FMT_YA16LE;
        for (int x = 0; x < w; ++x) d[3 * x] = d[3 * x + 1] = d[3 * x + 2] = s[step * x + hi];
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
