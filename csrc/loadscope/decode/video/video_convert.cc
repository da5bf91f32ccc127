#include "loadscope/decode/video/video_decoder.h"

#include <algorithm>
#include <cmath>
#include <cstring>

extern "C" {
#include <libavutil/pixdesc.h>
}

#include "loadscope/core/error.h"
#include "loadscope/decode/limits.h"
#include "loadscope/decode/video/video_parts.h"

namespace loadscope::decode {

namespace {

// A converted image in scratch, stored orientation: channel c (R, G, B) of pixel (x, y) is
// at ch[c][y * stride + x * step]. Packed RGB24 (step 3) or planar GBRP (step 1).
struct Pixels {
  const uint8_t* ch[3];
  ptrdiff_t step, stride;
  int w, h;
};

// dst[x] = src[-x] for x < n: a mirrored row, 8 bytes at a time (a byte swap reverses them;
// the byte loop before it stood out in a profile of flipped clips).
void copy_mirrored(const uint8_t* src, int n, uint8_t* dst) {
  int x = 0;
  for (; x + 8 <= n; x += 8) {
    uint64_t v;
    std::memcpy(&v, src - x - 7, 8);
    v = __builtin_bswap64(v);
    std::memcpy(dst + x, &v, 8);
  }
  for (; x < n; ++x) dst[x] = src[-x];
}

// Writes `src` upright (turned clockwise by `rotation`, then mirrored if `flip`) into dst as
// [3, H, W] planes or [H, W, 3]. Each output row walks the source along a line: a row for 0
// and 180 degrees, a column for 90 and 270.
void place(const Pixels& src, int rotation, bool flip, bool chw, uint8_t* dst) {
  const bool swap = rotation == 90 || rotation == 270;
  const int ow = swap ? src.h : src.w, oh = swap ? src.w : src.h;
  const size_t plane = static_cast<size_t>(ow) * oh;
  const ptrdiff_t ostep = chw ? 1 : 3;
  for (int y = 0; y < oh; ++y) {
    // Source pixel of output column 0 and the step to the next column, before the mirror.
    ptrdiff_t first, next;
    if (rotation == 90) {
      first = static_cast<ptrdiff_t>(src.h - 1) * src.stride + y * src.step, next = -src.stride;
    } else if (rotation == 270) {
      first = static_cast<ptrdiff_t>(src.w - 1 - y) * src.step, next = src.stride;
    } else if (rotation == 180) {
      first = static_cast<ptrdiff_t>(src.h - 1 - y) * src.stride + (src.w - 1) * src.step,
      next = -src.step;
    } else {
      first = static_cast<ptrdiff_t>(y) * src.stride, next = src.step;
    }
    if (flip) first += (ow - 1) * next, next = -next;
    if (!chw && src.step == 3 && next == 3 && src.ch[1] == src.ch[0] + 1 &&
        src.ch[2] == src.ch[0] + 2) {
      std::memcpy(dst + static_cast<size_t>(y) * ow * 3, src.ch[0] + first,
                  static_cast<size_t>(ow) * 3);
      continue;  // packed RGB to [H, W, 3] as it is: whole rows
    }
    for (int c = 0; c < 3; ++c) {
      uint8_t* out = chw ? dst + c * plane + static_cast<size_t>(y) * ow
                         : dst + static_cast<size_t>(y) * ow * 3 + c;
      const uint8_t* in = src.ch[c] + first;
      if (ostep == 1 && next == 1) {
        std::memcpy(out, in, static_cast<size_t>(ow));
      } else if (ostep == 1 && next == -1) {
        copy_mirrored(in, ow, out);
      } else {
        for (int x = 0; x < ow; ++x) out[x * ostep] = in[x * next];
      }
    }
  }
}

}  // namespace

namespace video_parts {

// Frames of w x h, as a header claims them or a decoder made one, refused where they are over
// decode/limits.h: the decoder would hold up to 16 such frames. 0: not stated (yet).
void check_frame_size(int w, int h, const char* who) {
  if (w > kMaxVideoSide || h > kMaxVideoSide || int64_t{w} * h > kMaxVideoPixels) {
    throw DecodeFailure("video: " + std::string(who) + " frames of " + std::to_string(w) + "x" +
                        std::to_string(h) + " (" + std::to_string(int64_t{w} * h) +
                        " pixels), over the " + std::to_string(kMaxVideoPixels) + " pixels (and " +
                        std::to_string(kMaxVideoSide) +
                        " a side) loadscope decodes: 8192x4352, H.264's and HEVC's largest level");
  }
}

void convert(ffmpeg::SwsPtr& sws, std::vector<uint8_t>& scratch, const AVFrame* f, int rotation,
             const FrameOutput& out, uint8_t* dst) {
  const auto fmt = static_cast<AVPixelFormat>(f->format);
  const AVPixFmtDescriptor* desc = av_pix_fmt_desc_get(fmt);
  if (desc == nullptr || (desc->flags & AV_PIX_FMT_FLAG_HWACCEL)) {
    throw DecodeFailure("video: unsupported pixel format");
  }
  const int W = f->width, H = f->height;          // stored
  check_frame_size(W, H, "a decoded frame has");  // a stream may change size after its header
  // The crop box in stored coordinates.
  double x0 = out.x0, y0 = out.y0, x1 = out.x1, y1 = out.y1;
  if (rotation == 90) {
    x0 = out.y0, x1 = out.y1, y0 = H - out.x1, y1 = H - out.x0;
  } else if (rotation == 270) {
    x0 = W - out.y1, x1 = W - out.y0, y0 = out.x0, y1 = out.x1;
  } else if (rotation == 180) {
    x0 = W - out.x1, x1 = W - out.x0, y0 = H - out.y1, y1 = H - out.y0;
  }
  // Whole chroma samples only: planar YUV crops start on the subsampling grid.
  const bool yuv = !(desc->flags & AV_PIX_FMT_FLAG_RGB) && desc->nb_components >= 3;
  const int ax = yuv ? 1 << desc->log2_chroma_w : 1, ay = yuv ? 1 << desc->log2_chroma_h : 1;
  int cx0 = std::clamp(static_cast<int>(std::floor(x0)), 0, W - 1) / ax * ax;
  int cy0 = std::clamp(static_cast<int>(std::floor(y0)), 0, H - 1) / ay * ay;
  int cx1 = std::clamp(static_cast<int>(std::lround(x1)), cx0 + 1, W);
  int cy1 = std::clamp(static_cast<int>(std::lround(y1)), cy0 + 1, H);
  const int cw = cx1 - cx0, ch = cy1 - cy0;
  const bool swap = rotation == 90 || rotation == 270;
  const int ow = swap ? out.out_h : out.out_w, oh = swap ? out.out_w : out.out_h;

  // Note [planar output when resizing]
  // A resize converts to planar GBRP: swscale's packed RGB24 output after scaling is scalar
  // code; planar output takes 0.57-0.68x its time for a 720x720 or 1280x720 crop to 224x224
  // (benchmarks/swscale_formats.c), and the planes are what a [3, H, W] batch holds. Planar also
  // interpolates chroma to every pixel where RGB24 shares it between pixel pairs. A frame kept
  // at its size goes to RGB24 instead: that is swscale's unscaled converter, the ffmpeg CLI's
  // rgb24 byte for byte (test_decoded_frames_equal_the_ffmpeg_cli).
  const bool planar = cw != ow || ch != oh;
  // sws_getCachedContext frees the context it is given when it makes another.
  sws.reset(sws_getCachedContext(sws.release(), cw, ch, fmt, ow, oh,
                                 planar ? AV_PIX_FMT_GBRP : AV_PIX_FMT_RGB24, SWS_BILINEAR, nullptr,
                                 nullptr, nullptr));
  if (sws == nullptr) throw DecodeFailure("video: cannot convert from " + std::string(desc->name));
  if (out.color_tags) {
    const int cs = f->colorspace == AVCOL_SPC_UNSPECIFIED || f->colorspace == AVCOL_SPC_RGB
                       ? SWS_CS_DEFAULT
                       : static_cast<int>(f->colorspace);
    const int full = f->color_range == AVCOL_RANGE_JPEG;
    sws_setColorspaceDetails(sws.get(), sws_getCoefficients(cs), full,
                             sws_getCoefficients(SWS_CS_DEFAULT), 1, 0, 1 << 16, 1 << 16);
  }
  const uint8_t* src[4] = {nullptr, nullptr, nullptr, nullptr};
  int src_stride[4] = {0, 0, 0, 0};
  const bool palette = desc->flags & AV_PIX_FMT_FLAG_PAL;
  for (int p = 0; p < 4 && f->data[p]; ++p) {
    src_stride[p] = f->linesize[p];
    if (palette && p == 1) {
      src[p] = f->data[p];
      continue;
    }
    int step = 0;
    bool chroma = false;
    for (int c = 0; c < desc->nb_components; ++c) {
      if (desc->comp[c].plane == p) {
        step = std::max(step, desc->comp[c].step);
        chroma |= yuv && (c == 1 || c == 2);
      }
    }
    const int sx = chroma ? desc->log2_chroma_w : 0, sy = chroma ? desc->log2_chroma_h : 0;
    src[p] = f->data[p] + static_cast<ptrdiff_t>(cy0 >> sy) * f->linesize[p] + (cx0 >> sx) * step;
  }
  // Note [swscale overrun]: swscale's vector code may write up to a block's width past the end
  // of a row. Into a batch slot that would overwrite the next frame (possibly another thread's
  // sample) or run off the block, so it converts into padded scratch and the result is copied.
  // The stride must also hold the row rounded up to 16 pixels: FFmpeg 5.1's SIMD yuv2rgb
  // converts 8 pixels at a time and, when the stride cannot take the rounded-up row, silently
  // leaves the last partial block unconverted (a 340-pixel row lost its last 4 pixels).
  const int bytes = planar ? 1 : 3;
  const size_t stride = ((static_cast<size_t>(ow) + 15) / 16 * 16 * bytes + 63) / 64 * 64;
  const size_t plane_bytes = stride * oh + 64;
  scratch.resize(planar ? 3 * plane_bytes : plane_bytes);
  uint8_t* base = scratch.data();
  uint8_t* dst_planes[4] = {base, planar ? base + plane_bytes : nullptr,
                            planar ? base + 2 * plane_bytes : nullptr, nullptr};
  int dst_stride[4] = {static_cast<int>(stride), planar ? static_cast<int>(stride) : 0,
                       planar ? static_cast<int>(stride) : 0, 0};
  const int rows = sws_scale(sws.get(), src, src_stride, 0, ch, dst_planes, dst_stride);
  if (rows != oh)
    throw DecodeFailure("video: conversion from " + std::string(desc->name) + " failed");
  // GBRP's planes are G, B, R.
  const Pixels px =
      planar ? Pixels{{dst_planes[2], dst_planes[0], dst_planes[1]},
                      1,
                      static_cast<ptrdiff_t>(stride),
                      ow,
                      oh}
             : Pixels{{base, base + 1, base + 2}, 3, static_cast<ptrdiff_t>(stride), ow, oh};
  place(px, rotation, out.flip, out.chw, dst);
}

}  // namespace video_parts
}  // namespace loadscope::decode
