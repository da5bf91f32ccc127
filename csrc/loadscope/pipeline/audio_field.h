#pragma once
// The Audio field: a window of an audio stream (an audio file's, or a video's), decoded and
// resampled to float32 [channels, N]; docs/audio.md.

#include <string>
#include <vector>

#include "loadscope/core/engine.h"
#include "loadscope/core/sample.h"
#include "loadscope/pipeline/outputs.h"

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

// A clip's time span, which a video field leaves for an aligned audio field.
struct ClipSpan {
  double start = 0, end = 0;  // seconds
  bool set = false;
};

// Outputs: "" float32 [channels, N]; ".length" int64 (window samples from the stream; the rest
// are zeros); ".time" float64 (the window's first sample, seconds).
std::vector<Output> audio_outputs(const AudioSpec& spec);
int64_t audio_window_samples(const AudioSpec& spec);

// Throws ConfigError naming the field.
void validate_audio(const std::string& field, const AudioSpec& spec);

// One sample's audio into its slots: `out[k]` points at output k of audio_outputs. `bytes` is
// the member's content unless the member is a whole file (then read by FFmpeg by path). `rng`
// draws the position; `span` is the aligned clip (align only). Returns the bytes read. Throws
// DecodeFailure / ReadFailure; optional: `missing` set when the file has no audio stream.
struct AudioResult {
  uint64_t bytes_read = 0;
  bool missing = false;  // no audio stream (allowed for optional fields)
  std::string warning;   // the decoder's complaint about data it decoded anyway
};
AudioResult fill_audio(const AudioSpec& spec, const Member& m, const std::string& bytes,
                       bool missing_ok, double draw, const ClipSpan* span,
                       const std::vector<uint8_t*>& out);
size_t audio_scratch_bytes();

}  // namespace loadscope::pipeline
