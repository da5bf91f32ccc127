// Decoding on NVDEC through FFmpeg's CUDA hwaccel (VideoClip(hwaccel="cuda")).
//
// Note [NVDEC decodes, the CPU path converts]
// The GPU decodes (entropy decoding, inverse transform, motion compensation: the part of a
// clip's cost that grows with the source's resolution) and each frame that is output is copied
// back to host memory (NV12, 3 MB for 1080p) and converted by the same swscale pass as a frame
// the CPU decoded, into the same batch slot. H.264, HEVC, VP9 and AV1 decoding is exact by
// their specifications, so the frames are the CPU path's up to swscale's handling of NV12
// against planar 4:2:0 input; the clip reaches the GPU with the batch, through the pinned copy.
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
  std::map<int, AVBufferRef*> made;        // kept for the process's life
  std::map<int, std::string> unavailable;  // FFmpeg's reason, asked once

  static CudaDevices& instance() {
    static CudaDevices* d = new CudaDevices();  // never destroyed: decoders outlive statics
    return *d;
  }
  // A new reference, or nullptr with *why set.
  AVBufferRef* get(int index, std::string* why) {
    std::lock_guard<std::mutex> lock(mu);
    if (auto it = made.find(index); it != made.end()) return av_buffer_ref(it->second);
    if (auto it = unavailable.find(index); it != unavailable.end()) {
      *why = it->second;
      return nullptr;
    }
    AVBufferRef* ref = nullptr;
    const int rc = av_hwdevice_ctx_create(&ref, AV_HWDEVICE_TYPE_CUDA,
                                          std::to_string(index).c_str(), nullptr, 0);
    if (rc < 0) {
      *why = unavailable[index] = "FFmpeg could not open CUDA device " + std::to_string(index) +
                                  " (" + ffmpeg::error_string(rc) +
                                  "; is there an NVIDIA GPU and its driver's libcuda?)";
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
  if (!s.nvdec) return nvdec_missing_;
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

const AVFrame* to_host(const AVFrame* f, AVFrame* host) {
  if (f->format != AV_PIX_FMT_CUDA) return f;
  av_frame_unref(host);
  int rc = av_hwframe_transfer_data(host, f, 0);
  if (rc >= 0) rc = av_frame_copy_props(host, f);  // colour tags, timestamps
  if (rc < 0)
    throw DecodeFailure("video: copying a frame from the GPU failed: " + ffmpeg::error_string(rc));
  return host;
}

}  // namespace video_parts
}  // namespace loadscope::decode
