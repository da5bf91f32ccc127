#pragma once
// The Audio field: a window of an audio stream (an audio file's, or a video's), decoded and
// resampled to float32 [channels, N]; docs/audio.md.

#include <string>
#include <vector>

#include "loadscope/pipeline/field.h"

namespace loadscope::pipeline {

enum class AudioPosition { kRandom, kCenter, kStart };

struct AudioSpec {
  int sample_rate = 16000;
  int channels = 1;
  // A window of `seconds` at `position`; or, with seconds == 0, the stream from its start up to
  // `max_seconds`. Either way the output holds round(seconds * sample_rate) samples a channel.
  double seconds = 0;
  double max_seconds = 0;
  AudioPosition position = AudioPosition::kRandom;
  int stream = -1;  // container stream index, -1: FFmpeg's best audio stream
  // The name of a video field: the window is that field's clip (its first frame's time to its
  // last frame's end); `seconds` is then the longest clip the output holds.
  std::string align;
};

int64_t audio_window_samples(const AudioSpec& spec);

class AudioField : public Field {
 public:
  explicit AudioField(AudioSpec spec) : spec_(std::move(spec)) {}
  const AudioSpec& spec() const { return spec_; }
  // "" float32 [channels, N]; ".length" int64 (window samples from the stream; the rest are
  // zeros); ".time" float64 (the window's first sample, seconds).
  std::vector<Output> outputs() const override;
  telemetry::Kind kind() const override;
  void validate(const std::string& name) const override;
  bool reads_by_path() const override { return true; }
  std::string follows() const override { return spec_.align; }
  void fill(FieldCall& call) const override;
  size_t scratch_bytes() const override;

 private:
  AudioSpec spec_;
};

}  // namespace loadscope::pipeline
