#include "loadscope/decode/webp/webp_decoder.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>

#include <webp/decode.h>
#include <webp/demux.h>

#include "loadscope/core/error.h"
#include "loadscope/decode/jpeg/exif.h"

namespace loadscope::decode {

namespace {

const char* status_name(VP8StatusCode s) {
  switch (s) {
    case VP8_STATUS_OK: return "ok";
    case VP8_STATUS_OUT_OF_MEMORY: return "out of memory";
    case VP8_STATUS_INVALID_PARAM: return "invalid parameter";
    case VP8_STATUS_BITSTREAM_ERROR: return "bitstream error";
    case VP8_STATUS_UNSUPPORTED_FEATURE: return "unsupported feature";
    case VP8_STATUS_SUSPENDED: return "suspended";
    case VP8_STATUS_USER_ABORT: return "aborted";
    case VP8_STATUS_NOT_ENOUGH_DATA: return "truncated (not enough data)";
  }
  return "unknown status";
}

uint32_t le32(const uint8_t* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}

struct DemuxDeleter {
  void operator()(WebPDemuxer* d) const { WebPDemuxDelete(d); }
};

// EXIF orientation from the EXIF chunk of an extended (VP8X) file, as Pillow reads it (the
// VP8X flags are not consulted). The chunk holds the TIFF structure, which some writers prefix
// with JPEG's "Exif\0\0". Simple files (a bare VP8 or VP8L chunk) have no metadata.
int orientation_of(const uint8_t* data, size_t size) {
  if (size < 16 || std::memcmp(data + 12, "VP8X", 4) != 0) return 1;
  const WebPData whole{data, size};
  std::unique_ptr<WebPDemuxer, DemuxDeleter> demux(WebPDemux(&whole));
  if (!demux) return 1;  // a broken container is the decoder's to report
  WebPChunkIterator it;
  if (!WebPDemuxGetChunk(demux.get(), "EXIF", 1, &it)) return 1;
  std::string app1(it.chunk.bytes, it.chunk.bytes + it.chunk.size);
  WebPDemuxReleaseChunkIterator(&it);
  if (app1.compare(0, 6, std::string("Exif\0\0", 6)) != 0)
    app1.insert(0, std::string("Exif\0\0", 6));
  return exif_orientation(reinterpret_cast<const uint8_t*>(app1.data()), app1.size());
}

}  // namespace

WebpInfo WebpDecoder::open(const uint8_t* data, size_t size) {
  data_ = nullptr;  // set once the file is known good
  info_ = WebpInfo{};
  // The RIFF header states the file's size: a file cut short fails here, with the sizes named
  // (libwebp refuses it too, as "not enough data").
  if (size < 12) throw DecodeFailure("truncated WebP: " + std::to_string(size) + " bytes");
  const uint64_t stated = uint64_t(le32(data + 4)) + 8;
  if (size < stated) {
    throw DecodeFailure("truncated WebP: its header says " + std::to_string(stated) + " bytes, " +
                        std::to_string(size) + " are present");
  }
  WebPBitstreamFeatures f;
  const VP8StatusCode rc = WebPGetFeatures(data, size, &f);
  if (rc != VP8_STATUS_OK) throw DecodeFailure(std::string("WebP: ") + status_name(rc));
  info_.width = f.width;
  info_.height = f.height;
  info_.animated = f.has_animation != 0;
  if (info_.animated) {  // the canvas, not the first frame's own rectangle
    const WebPData whole{data, size};
    std::unique_ptr<WebPDemuxer, DemuxDeleter> demux(WebPDemux(&whole));
    if (!demux) throw DecodeFailure("WebP: damaged animation container");
    info_.width = static_cast<int>(WebPDemuxGetI(demux.get(), WEBP_FF_CANVAS_WIDTH));
    info_.height = static_cast<int>(WebPDemuxGetI(demux.get(), WEBP_FF_CANVAS_HEIGHT));
  }
  info_.orientation = orientation_of(data, size);
  data_ = data;
  size_ = size;
  return info_;
}

RgbView WebpDecoder::decode(Rect region) {
  if (data_ == nullptr) throw DecodeFailure("WebP: decode() without open()");
  const int W = info_.width, H = info_.height;
  RgbView view;
  if (info_.animated) {
    // The first frame as shown. It is a key frame: libwebp's animation decoder draws it on a
    // zeroed (transparent black) canvas without blending, so its pixels are the frame's own;
    // decoded here straight into the canvas (3 bytes a pixel; the animation decoder holds two
    // RGBA canvases). Pillow reads animations through that decoder: byte for byte its result.
    const WebPData whole{data_, size_};
    std::unique_ptr<WebPDemuxer, DemuxDeleter> demux(WebPDemux(&whole));
    WebPIterator frame;
    if (!demux || !WebPDemuxGetFrame(demux.get(), 1, &frame)) {
      throw DecodeFailure("WebP: cannot read the animation's first frame");
    }
    pixels_.assign(static_cast<size_t>(W) * H * 3, 0);
    WebPDecoderConfig config;
    if (!WebPInitDecoderConfig(&config)) {
      WebPDemuxReleaseIterator(&frame);
      throw DecodeFailure("WebP: libwebp version mismatch");
    }
    // The demuxer checked that the frame lies within the canvas.
    const size_t at = (static_cast<size_t>(frame.y_offset) * W + frame.x_offset) * 3;
    config.output.colorspace = MODE_RGB;
    config.output.is_external_memory = 1;
    config.output.u.RGBA.rgba = pixels_.data() + at;
    config.output.u.RGBA.stride = W * 3;
    config.output.u.RGBA.size = pixels_.size() - at;
    const VP8StatusCode rc = WebPDecode(frame.fragment.bytes, frame.fragment.size, &config);
    WebPFreeDecBuffer(&config.output);
    WebPDemuxReleaseIterator(&frame);
    data_ = nullptr;
    if (rc != VP8_STATUS_OK) throw DecodeFailure(std::string("WebP: ") + status_name(rc));
    view.data = pixels_.data();
    view.width = W;
    view.height = H;
    view.stride = static_cast<size_t>(W) * 3;
    return view;
  }
  // Note [WebP crop margin]
  // libwebp crops from even coordinates (4:2:0 chroma), and a lossy crop's first and last rows
  // and columns upsample chroma as an image's edges do, unlike a crop of the whole decode. A
  // margin of kMargin pixels around the region keeps those edges out of it, so the region's
  // pixels are exactly the whole decode's (tested on every crop of a random-resized run).
  constexpr int kMargin = 2;
  const int x0 = std::clamp(region.x0 - kMargin, 0, W - 1) & ~1;
  const int y0 = std::clamp(region.y0 - kMargin, 0, H - 1) & ~1;
  const int x1 = std::clamp(region.x1 + kMargin, x0 + 1, W);
  const int y1 = std::clamp(region.y1 + kMargin, y0 + 1, H);
  const int w = x1 - x0, h = y1 - y0;
  WebPDecoderConfig config;
  if (!WebPInitDecoderConfig(&config)) throw DecodeFailure("WebP: libwebp version mismatch");
  const bool whole = x0 == 0 && y0 == 0 && w == W && h == H;
  config.options.use_cropping = whole ? 0 : 1;
  config.options.crop_left = x0;
  config.options.crop_top = y0;
  config.options.crop_width = w;
  config.options.crop_height = h;
  pixels_.resize(static_cast<size_t>(w) * h * 3);
  config.output.colorspace = MODE_RGB;
  config.output.is_external_memory = 1;
  config.output.u.RGBA.rgba = pixels_.data();
  config.output.u.RGBA.stride = w * 3;
  config.output.u.RGBA.size = pixels_.size();
  const VP8StatusCode rc = WebPDecode(data_, size_, &config);
  WebPFreeDecBuffer(&config.output);  // external memory: frees nothing of ours
  data_ = nullptr;                    // one decode per open()
  if (rc != VP8_STATUS_OK) throw DecodeFailure(std::string("WebP: ") + status_name(rc));
  view.data = pixels_.data();
  view.width = w;
  view.height = h;
  view.stride = static_cast<size_t>(w) * 3;
  view.x0 = x0;
  view.y0 = y0;
  return view;
}

}  // namespace loadscope::decode
