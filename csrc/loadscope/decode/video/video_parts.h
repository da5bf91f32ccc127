// The parts of VideoDecoder (video_decoder.h), one file each, share what is declared here:
//   video_open.cc     opening an input and indexing its stream (the container's tables, a walk
//                     over its packets, or decoding; the per-process index cache)
//   video_convert.cc  a decoded frame cropped, resized, rotated and converted into a batch slot
//   video_decoder.cc  decode(): seeking and decoding exactly the frames a clip needs
// Internal to decode/video: nothing outside includes it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loadscope/decode/ffmpeg/ffmpeg_common.h"
#include "loadscope/decode/ffmpeg/input.h"
#include "loadscope/decode/video/video_decoder.h"

namespace loadscope::decode {
namespace video_parts {

// Frames of w x h, as a header claims them or a decoder made one, refused where they are over
// decode/limits.h: the decoder would hold up to 16 such frames. 0: not stated (yet).
void check_frame_size(int w, int h, const char* who);

struct Key {
  int64_t pts;
  int64_t dts;
  // Followed in decode order by frames shown before it (an open GOP's leading pictures, which
  // reference the GOP before): see Note [leading pictures].
  bool leading = false;
};

// A decoded frame's timestamp; frames drained from the decoder at the end may carry none, and
// then follow the previous one by the previous step (as the ffmpeg CLI numbers them).
struct Extrapolate {
  int64_t last = AV_NOPTS_VALUE;
  int64_t step = 1;
  int64_t operator()(int64_t ts) {
    if (ts == AV_NOPTS_VALUE) ts = last == AV_NOPTS_VALUE ? 0 : last + step;
    if (last != AV_NOPTS_VALUE && ts > last) step = ts - last;
    last = ts;
    return ts;
  }
};

// Converts the crop of `f` into dst; see FrameOutput. Only frames that are output get here.
void convert(ffmpeg::SwsPtr& sws, std::vector<uint8_t>& scratch, const AVFrame* f, int rotation,
             const FrameOutput& out, uint8_t* dst);

// NVDEC (video_hw.cc, Note [NVDEC decodes, the CPU path converts]).
// The decoder of `preferred`'s codec that decodes on NVDEC in this FFmpeg build, else nullptr
// and why.
const AVCodec* nvdec_decoder(const AVCodec* preferred, std::string* why);
// Sets up `ctx` (not yet opened) to decode on the process's CUDA device `cuda_device`; a
// stream NVDEC cannot take (profile, bit depth, size) is then decoded by the CPU.
void attach_cuda(AVCodecContext* ctx, int cuda_device);
// `f` where it is in host memory; a GPU frame otherwise copied into `copied` and, from NV12,
// made planar in `planar` (both kept between calls).
const AVFrame* to_host(const AVFrame* f, AVFrame* copied, AVFrame* planar);
// An NV12 frame as planar 4:2:0 in `planar` (reallocated only when its size changes).
void nv12_to_planar(const AVFrame* nv12, AVFrame* planar);

}  // namespace video_parts

struct VideoDecoder::State {
  // Declared in this order so that the input is closed before its AVIOContext goes.
  ffmpeg::AvioPtr avio;
  ffmpeg::FormatInputPtr fmt;
  ffmpeg::Input input;
  ffmpeg::CodecContextPtr codec;
  AVStream* stream = nullptr;
  VideoInfo info;
  std::vector<video_parts::Key> keys;  // keyframe packets, ascending pts
  int64_t max_gap = 1;                 // largest step between consecutive frame timestamps
  bool decoder_times =
      false;         // indexed from decoded frames; see Note [timestamps from the decoder]
  bool mov = false;  // MP4/MOV (FFmpeg's mov demuxer)
  ffmpeg::PacketPtr packet{av_packet_alloc()};
  ffmpeg::FramePtr frame{av_frame_alloc()};
  ffmpeg::FramePtr last{av_frame_alloc()};
  ffmpeg::SwsPtr sws;                         // reused while the conversion does not change
  int cuda_device = -1;                       // VideoDecoder::set_hwaccel: decode on NVDEC
  bool nvdec = false;                         // this video's decoder was set up for NVDEC
  ffmpeg::FramePtr copied{av_frame_alloc()};  // a GPU frame copied back: to_host()
  ffmpeg::FramePtr planar{av_frame_alloc()};
  std::vector<uint8_t> rgb;  // converted pixels before they are placed; see convert()

  ~State() { close(); }
  void close() {
    av_frame_unref(last.get());  // a GPU frame holds its decoder's frame pool
    codec.reset();
    fmt.reset();
    avio.reset();
    stream = nullptr;
    keys.clear();
    input = ffmpeg::Input{};
  }
};

}  // namespace loadscope::decode
