#pragma once
// Video decoding with FFmpeg: open a file or an in-memory file (tar members, through a custom
// AVIO context, no temporary files), index the frames of one stream by demuxing (no decoding),
// then decode exactly the frames a clip needs and convert them — crop, resize and colour
// conversion in one swscale pass — into caller-owned memory.
//
// One decoder per thread; it keeps its swscale context between frames and samples.
// Not thread-safe.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

struct AVCodec;

namespace loadscope::decode {

namespace ffmpeg {
class LogCapture;
}

struct VideoInfo {
  int stream = -1;             // index of the decoded stream in the container
  int width = 0, height = 0;   // upright (after rotation) frame size
  int rotation = 0;            // clockwise degrees applied to stored frames: 0, 90, 180, 270
  double time_base = 0;        // seconds per pts tick
  double duration = -1;        // seconds: the stream's, else the container's, else the index's
  double fps = 0;              // average frame rate (container's, else frames / duration)
  int64_t header_frames = -1;  // frame count the container states, -1 if none
  std::string codec;           // e.g. "h264"
};

// How decoded frames become output: a crop of the upright frame resized to out_w x out_h.
struct FrameOutput {
  double x0 = 0, y0 = 0, x1 = 0, y1 = 0;  // crop box, upright coordinates
  int out_w = 0, out_h = 0;
  bool chw = true;         // [3, H, W] planes, else [H, W, 3]
  bool flip = false;       // mirror left-right (after rotation)
  bool color_tags = true;  // honour the stream's colour matrix and range tags
};

class VideoDecoder {
 public:
  VideoDecoder();
  ~VideoDecoder();
  VideoDecoder(const VideoDecoder&) = delete;
  VideoDecoder& operator=(const VideoDecoder&) = delete;

  // Opens a video and indexes the chosen stream (stream < 0: FFmpeg's best video stream).
  // open_file reads a file or object by name through io::open_seekable (a remote one by byte
  // ranges, retried there; a failed read is a ReadFailure). `data` must stay alive until the
  // next open() or the decoder's destruction. rotate: apply the display-matrix rotation.
  // Throws DecodeFailure with FFmpeg's reason.
  const VideoInfo& open_file(const std::string& path, int stream, bool rotate, int threads);
  const VideoInfo& open_memory(const uint8_t* data, size_t size, int stream, bool rotate,
                               int threads);
  // The remote read that failed during the last decode, if one did (else empty).
  const std::string& input_error() const;

  // Decode later videos on NVDEC (CUDA device `cuda_device`, -1: on the CPU), through FFmpeg's
  // CUDA hwaccel: Note [NVDEC decodes, the CPU path converts]. A video whose codec or profile
  // NVDEC does not take is decoded by the CPU; cpu_fallback() says why.
  void set_hwaccel(int cuda_device);
  // Why FFmpeg cannot open CUDA device `cuda_device` ("" if it can); asked once per process.
  static std::string hwaccel_unavailable(int cuda_device);
  // The FFmpeg decoder NVDEC decoding uses for a codec ("h264"), "" if none (the CPU decodes).
  static std::string nvdec_decoder(const std::string& codec);
  // After decode(), with set_hwaccel: why the CPU decoded this video's frames ("" if NVDEC did).
  std::string cpu_fallback() const;

  // Presentation timestamps of the stream's frames, ascending, in time_base ticks.
  //
  // Note [timestamps from the decoder]
  // Normally read from packets while demuxing. Streams whose packets carry only decode
  // timestamps while the codec reorders frames (AVI with B-frames, e.g. HMDB51's DivX files)
  // cannot be indexed that way: FFmpeg stamps their decoded frames later than the packets'
  // DTS. Those are indexed by one decoding pass instead (timestamps only, no conversion), so
  // the index holds exactly the timestamps decoded frames carry.
  const std::vector<int64_t>& pts() const { return pts_; }

  // One frame to produce: the frame displayed at `pts` (the last frame with timestamp <=
  // pts), converted per `*out` into `dst`.
  struct Request {
    int64_t pts;
    uint8_t* dst;
    const FrameOutput* out;
    double* time = nullptr;  // if set: receives the returned frame's presentation time (s)
  };

  // Produces every request (in any order). Decodes from the keyframe before the earliest one,
  // skips non-reference frames that cannot be shown, converts only frames that are output,
  // jumps ahead to a later keyframe between distant requests, and stops after the last one.
  // Throws DecodeFailure when a needed frame cannot be decoded (corrupt or truncated data).
  void decode(const std::vector<Request>& requests);

  // Bytes read from the input since open() (header, index scan and decoding).
  uint64_t bytes_read() const;
  // What decode() calls did since open().
  struct Work {
    uint64_t packets = 0;  // packets of the stream read (skipped non-reference ones included)
    uint64_t frames_decoded = 0;  // frames the decoder produced
    uint64_t seeks = 0;
    uint64_t gpu_frames = 0;  // frames NVDEC decoded (decoded frames in GPU memory)
  };
  const Work& work() const { return work_; }
  // Time spent converting frames (crop, resize, colour) since open(), ns.
  uint64_t convert_ns() const { return convert_ns_; }
  // Bytes of conversion buffers held between calls.
  size_t buffer_bytes() const;

 private:
  struct State;
  class Pass;  // one decode() call, in named steps
  std::unique_ptr<State> s_;
  std::vector<int64_t> pts_;
  uint64_t convert_ns_ = 0;
  Work work_;
  void open_common(int stream, bool rotate, int threads);
  void open_codec(const AVCodec* codec, int threads);
  int threads_ = 1;
  const VideoInfo& open_custom(const char* url, int stream, bool rotate, int threads);
  void scan_index(const ffmpeg::LogCapture& log);
  void index_by_decoding();
  std::string cache_key_;  // set for files opened by path: see Note [index cache]
  // set_hwaccel: why the CPU decodes this video, if known at open or retry.
  std::string fallback_reason_;
};

}  // namespace loadscope::decode
