// Decoding on NVDEC through FFmpeg's CUDA hwaccel (VideoClip(hwaccel="cuda")).
//
// Note [NVDEC decodes, the CPU path converts]
// The GPU decodes (entropy decoding, inverse transform, motion compensation: the part of a
// clip's cost that grows with the source's resolution) and each frame that is output is copied
// back to host memory (NV12, 3 MB for 1080p), made planar 4:2:0 and converted by the same
// swscale pass as a frame the CPU decoded, into the same batch slot. Only codecs whose decoding
// is exact by their specification go to NVDEC (exact_codec), so the frames are the CPU path's
// byte for byte; the clip reaches the GPU with the batch, through the pinned copy.
// Keeping frames on the GPU would need a colour conversion and resize there: the extension
// links neither CUDA nor libtorch, and FFmpeg 5.1's CUDA filters convert between YUV formats
// only. The first GPU run measures whether the copy back or the conversion binds.
//
// FFmpeg's CUDA device is made once per process and device, and every loader thread's decoder
// shares it. It is a context of its own, not the primary one torch uses: FFmpeg retains the
// primary context only with blocking-sync scheduling, so it refuses one torch already made
// ("Primary context already active with incompatible flags"), and made first it would impose
// that scheduling on every synchronisation of the training. Frames leave it through FFmpeg's
// own copy to host memory, so no pointer crosses contexts; the cost is one context's device
// memory per process. The driver (libcuda) is loaded by FFmpeg at run time: the build needs no
// CUDA, and a machine without a GPU gets FFmpeg's reason from hwaccel_unavailable() before any
// sample is read.

#include <dlfcn.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <mutex>
#include <string>

#include "loadscope/core/error.h"
#include "loadscope/decode/video/video_parts.h"

extern "C" {
#include <libavutil/hwcontext.h>
#include <libavutil/pixdesc.h>
}

namespace loadscope::decode {
namespace {

struct CudaDevices {
  std::mutex mu;
  pid_t pid = 0;                           // the process that made `made`
  std::map<int, AVBufferRef*> made;        // kept for the process's life
  std::map<int, std::string> unavailable;  // why not, asked once

  static CudaDevices& instance() {
    static CudaDevices* d = new CudaDevices();  // never destroyed: decoders outlive statics
    return *d;
  }
  // A new reference, or nullptr with *why set.
  AVBufferRef* get(int index, std::string* why) {
    std::lock_guard<std::mutex> lock(mu);
    if (pid != getpid()) {
      // A forked child cannot use its parent's CUDA context: it makes its own. The parent's
      // references are left as they are (freeing them here would call into that context).
      made.clear();
      unavailable.clear();
      pid = getpid();
    }
    if (auto it = made.find(index); it != made.end()) return av_buffer_ref(it->second);
    if (auto it = unavailable.find(index); it != unavailable.end()) {
      *why = it->second;
      return nullptr;
    }
    AVBufferRef* ref = nullptr;
    ffmpeg::LogCapture log;  // FFmpeg's reason goes into the message, not to stderr
    const int rc = av_hwdevice_ctx_create(&ref, AV_HWDEVICE_TYPE_CUDA,
                                          std::to_string(index).c_str(), nullptr, 0);
    if (rc < 0) {
      std::string said = log.text();  // lines; the message is one
      while (!said.empty() && (said.back() == '\n' || said.back() == ' ')) said.pop_back();
      for (char& c : said) c = c == '\n' ? ';' : c;
      *why = "FFmpeg could not open CUDA device " + std::to_string(index) + " (" +
             ffmpeg::error_string(rc) + (said.empty() ? "" : ": " + said) +
             "; is there an NVIDIA GPU and its driver's libcuda?)";
      if (rc != AVERROR(ENOMEM)) unavailable[index] = *why;  // out of memory may pass
      return nullptr;
    }
    // FFmpeg loads libnvcuvid (NVDEC) only when a decoder first asks for the hwaccel, and its
    // absence would then make every video a CPU fallback with a profile's reason: a container
    // without the driver's video capability has libcuda but not libnvcuvid.
    if (void* nvcuvid = dlopen("libnvcuvid.so.1", RTLD_LAZY | RTLD_LOCAL)) {
      dlclose(nvcuvid);
    } else {
      const char* e = dlerror();
      *why = unavailable[index] = std::string("the driver's NVDEC library cannot be loaded (") +
                                  (e ? e : "libnvcuvid.so.1") + ")";
      av_buffer_unref(&ref);
      return nullptr;
    }
    made[index] = ref;
    return av_buffer_ref(ref);
  }
};

// Offered formats: the CUDA one where FFmpeg's hwaccel could be set up for this stream (its
// codec, profile, bit depth and size), else FFmpeg's software choice (the CPU decodes).
AVPixelFormat pick_cuda(AVCodecContext* ctx, const AVPixelFormat* offered) {
  for (const AVPixelFormat* p = offered; *p != AV_PIX_FMT_NONE; ++p) {
    if (*p == AV_PIX_FMT_CUDA) return *p;
  }
  return avcodec_default_get_format(ctx, offered);
}

}  // namespace

void VideoDecoder::set_hwaccel(int cuda_device) {
  s_->cuda_device = cuda_device;
}

std::string VideoDecoder::cpu_fallback() const {
  const State& s = *s_;
  if (s.cuda_device < 0) return "";
  if (!s.nvdec) return fallback_reason_;
  if (work_.frames_decoded == work_.gpu_frames) return "";
  const char* profile = avcodec_profile_name(s.codec->codec_id, s.codec->profile);
  const char* format = av_get_pix_fmt_name(s.codec->sw_pix_fmt);
  return std::string("NVDEC did not take this stream (") + avcodec_get_name(s.codec->codec_id) +
         (profile ? std::string(" ") + profile : "") + ", " + (format ? format : "?") + ", " +
         std::to_string(s.codec->width) + "x" + std::to_string(s.codec->height) + ")";
}

std::string VideoDecoder::nvdec_decoder(const std::string& codec) {
  const AVCodecDescriptor* d = avcodec_descriptor_get_by_name(codec.c_str());
  const AVCodec* preferred = d ? avcodec_find_decoder(d->id) : nullptr;
  std::string why;
  const AVCodec* c = preferred ? video_parts::nvdec_decoder(preferred, &why) : nullptr;
  return c ? c->name : "";
}

std::string VideoDecoder::hwaccel_unavailable(int cuda_device) {
  std::string why;
  AVBufferRef* ref = CudaDevices::instance().get(cuda_device, &why);
  av_buffer_unref(&ref);
  return why;
}

namespace video_parts {

namespace {
const char kExactOnly[] =
    "NVDEC is used for H.264, HEVC, VP8, VP9 and AV1 only (exact decoding), not ";

// Codecs whose decoding is exact by their specification, so that NVDEC's frames are the CPU's:
// MPEG-1/2/4, VC-1 and MJPEG (which FFmpeg's NVDEC also takes) leave the IDCT's rounding to the
// decoder, and their frames would drift from the CPU path's over a GOP.
bool exact_codec(AVCodecID id) {
  switch (id) {
    case AV_CODEC_ID_H264:
    case AV_CODEC_ID_HEVC:
    case AV_CODEC_ID_VP8:
    case AV_CODEC_ID_VP9:
    case AV_CODEC_ID_AV1: return true;
    default: return false;
  }
}

bool has_nvdec(const AVCodec* codec) {
  // FFmpeg's *_cuvid wrappers (AV_CODEC_CAP_HARDWARE) parse and reorder on their own: skipping
  // non-reference frames and exact seeking, which decode() relies on, are the native
  // decoders'. Their hwaccel is what the ffmpeg CLI's `-hwaccel cuda` uses.
  if (codec->capabilities & AV_CODEC_CAP_HARDWARE) return false;
  for (int i = 0;; ++i) {
    const AVCodecHWConfig* c = avcodec_get_hw_config(codec, i);
    if (c == nullptr) return false;
    if (c->device_type == AV_HWDEVICE_TYPE_CUDA && c->pix_fmt == AV_PIX_FMT_CUDA &&
        (c->methods & AV_CODEC_HW_CONFIG_METHOD_HW_DEVICE_CTX)) {
      return true;
    }
  }
}
}  // namespace

const AVCodec* nvdec_decoder(const AVCodec* preferred, std::string* why) {
  if (!exact_codec(preferred->id)) {
    *why = kExactOnly + std::string(avcodec_get_name(preferred->id));
    return nullptr;
  }
  if (has_nvdec(preferred)) return preferred;
  // FFmpeg's preferred decoder may be a library without hwaccels (libdav1d for AV1), where
  // FFmpeg's own decoder of that codec has NVDEC.
  void* it = nullptr;
  while (const AVCodec* c = av_codec_iterate(&it)) {
    if (c->id == preferred->id && av_codec_is_decoder(c) && has_nvdec(c)) return c;
  }
  *why = std::string("FFmpeg has no NVDEC path for ") + avcodec_get_name(preferred->id);
  return nullptr;
}

void attach_cuda(AVCodecContext* ctx, int cuda_device) {
  std::string why;
  ctx->hw_device_ctx = CudaDevices::instance().get(cuda_device, &why);
  if (ctx->hw_device_ctx == nullptr) throw DecodeFailure("video: " + why);
  ctx->get_format = pick_cuda;
  // NVDEC does the work; FFmpeg's frame threads would only hold more surfaces.
  ctx->thread_count = 1;
}

// NV12 to planar 4:2:0, exactly (the chroma samples only change places): swscale then takes
// the CPU path's own input format and converter, so the frames are the CPU path's byte for
// byte. Read as NV12, swscale's unscaled RGB24 converter has no NV12 case in FFmpeg 5.1 and
// interpolates chroma where the planar one repeats it.
void nv12_to_planar(const AVFrame* nv12, AVFrame* planar) {
  const int w = nv12->width, h = nv12->height, cw = (w + 1) / 2, ch = (h + 1) / 2;
  if (planar->format != AV_PIX_FMT_YUV420P || planar->width != w || planar->height != h) {
    av_frame_unref(planar);
    planar->format = AV_PIX_FMT_YUV420P;
    planar->width = w;
    planar->height = h;
    if (av_frame_get_buffer(planar, 0) < 0) throw std::bad_alloc();
  }
  if (av_frame_copy_props(planar, nv12) < 0) throw std::bad_alloc();
  for (int y = 0; y < h; ++y) {
    std::memcpy(planar->data[0] + static_cast<ptrdiff_t>(y) * planar->linesize[0],
                nv12->data[0] + static_cast<ptrdiff_t>(y) * nv12->linesize[0],
                static_cast<size_t>(w));
  }
  for (int y = 0; y < ch; ++y) {
    const uint8_t* uv = nv12->data[1] + static_cast<ptrdiff_t>(y) * nv12->linesize[1];
    uint8_t* u = planar->data[1] + static_cast<ptrdiff_t>(y) * planar->linesize[1];
    uint8_t* v = planar->data[2] + static_cast<ptrdiff_t>(y) * planar->linesize[2];
    for (int x = 0; x < cw; ++x) u[x] = uv[2 * x], v[x] = uv[2 * x + 1];
  }
}

const AVFrame* to_host(const AVFrame* f, AVFrame* copied, AVFrame* planar) {
  if (f->format != AV_PIX_FMT_CUDA) return f;
  // The copy's buffers are kept between frames of one size (a 1080p frame is 3 MB).
  const auto* frames = reinterpret_cast<const AVHWFramesContext*>(f->hw_frames_ctx->data);
  if (copied->format != frames->sw_format || copied->width != f->width ||
      copied->height != f->height) {
    av_frame_unref(copied);
    copied->format = frames->sw_format;
    copied->width = f->width;
    copied->height = f->height;
    if (av_frame_get_buffer(copied, 0) < 0) throw std::bad_alloc();
  }
  int rc = av_hwframe_transfer_data(copied, f, 0);
  if (rc >= 0) rc = av_frame_copy_props(copied, f);  // colour tags, timestamps, crop fields
  // A GPU frame is cropped only at its right and bottom; the top and left crop here.
  if (rc >= 0) rc = av_frame_apply_cropping(copied, AV_FRAME_CROP_UNALIGNED);
  if (rc < 0) {
    av_frame_unref(copied);
    throw DecodeFailure("video: copying a frame from the GPU failed: " + ffmpeg::error_string(rc));
  }
  if (copied->format != AV_PIX_FMT_NV12) return copied;  // P010 and the like: swscale reads them
  nv12_to_planar(copied, planar);
  return planar;
}

}  // namespace video_parts
}  // namespace loadscope::decode
