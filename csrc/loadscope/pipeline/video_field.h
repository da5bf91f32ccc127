#pragma once
// The VideoClip field: K clips of T frames of a video (a file opened by path, or a tar member
// in memory), each with one spatial crop, decoded with FFmpeg straight into the batch slot;
// docs/video.md.

#include <string>
#include <vector>

#include "loadscope/pipeline/clips.h"
#include "loadscope/pipeline/field.h"
#include "loadscope/pipeline/image_field.h"

namespace loadscope::pipeline {

// A video field: K clips of T frames, each clip with one spatial crop (ImageSpec's size, crop,
// flip and layout; dct_scaling and exif do not apply).
struct VideoSpec {
  ClipSpec clip;
  int stream = -1;  // container stream index, -1: FFmpeg's best video stream
  static constexpr int kAutoDecoderThreads = -1;  // the engine's hint (SampleContext)
  int decoder_threads = 1;  // FFmpeg's own threads per decode (the engine parallelises videos)
  bool rotate = true;       // apply the display-matrix rotation: frames come out upright
  bool color_tags = true;   // honour colour-matrix and range tags, as the ffmpeg CLI does
  // A member (a manifest column, a tar member) holding the clip's start in seconds from the
  // first frame, instead of a drawn one (VideoClip(start=)): a plan given from outside.
  std::string start_key;
  // VideoClip(hwaccel="cuda:N"): decode on NVDEC of CUDA device N (-1: the CPU); the frames are
  // converted as the CPU's are (Note [NVDEC decodes, the CPU path converts]).
  int cuda_device = -1;
};

class VideoField : public Field {
 public:
  // `frame`: the frames' geometry (size, crop, flip, layout, max_pixels).
  VideoField(VideoSpec video, ImageSpec frame)
      : video_(std::move(video)), frame_(std::move(frame)) {}
  const VideoSpec& spec() const { return video_; }
  // Outputs: "" uint8 [T, 3, H, W] ([K, T, ...] for K > 1 clips; channels last on request),
  // ".time" float64 [T] or [K, T] (each frame's presentation time, seconds), ".meta" a record
  // (duration, fps, frames, width, height, rotation, codec, stream).
  std::vector<Output> outputs() const override;
  telemetry::Kind kind() const override;
  void validate(const std::string& name) const override;
  bool reads_by_path() const override { return true; }
  int clips() const override { return video_.clip.clips; }
  void fill(FieldCall& call) const override;
  size_t scratch_bytes() const override;

 private:
  VideoSpec video_;
  ImageSpec frame_;
};

}  // namespace loadscope::pipeline
