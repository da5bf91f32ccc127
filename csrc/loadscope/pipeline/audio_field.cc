#include "loadscope/pipeline/audio_field.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>

#include "loadscope/core/error.h"
#include "loadscope/decode/audio/audio_decoder.h"

namespace loadscope::pipeline {

int64_t audio_window_samples(const AudioSpec& spec) {
  const double seconds = spec.seconds > 0 ? spec.seconds : spec.max_seconds;
  return std::llround(seconds * spec.sample_rate);
}

std::vector<Output> audio_outputs(const AudioSpec& spec) {
  return {{"", OutputType::kFloat32, {spec.channels, audio_window_samples(spec)}},
          {".length", OutputType::kInt64, {}},
          {".time", OutputType::kFloat64, {}}};
}

void validate_audio(const std::string& field, const AudioSpec& s) {
  auto fail = [&](const std::string& what) { throw ConfigError("field '" + field + "': " + what); };
  if (s.sample_rate < 1 || s.sample_rate > 768000) fail("sample_rate must be 1..768000");
  if (s.channels < 1 || s.channels > 8) fail("channels must be 1..8");
  if ((s.seconds > 0) == (s.max_seconds > 0)) {
    fail("give one of seconds (a window) and max_seconds (the stream from its start), > 0");
  }
  const double seconds = s.seconds > 0 ? s.seconds : s.max_seconds;
  if (!std::isfinite(seconds) || seconds * s.sample_rate > 1e9 / s.channels) {
    fail("the window is too long (at most 10^9 samples in all)");
  }
  if (audio_window_samples(s) < 1) fail("the window holds no sample at this sample_rate");
  if (s.max_seconds > 0 && s.position != AudioPosition::kStart) {
    fail("max_seconds reads from the start: position must be 'start'");
  }
  if (!s.align.empty() && s.seconds <= 0) {
    fail("align= needs seconds: the longest clip the output holds");
  }
}

namespace {
decode::AudioDecoder& decoder() {
  thread_local decode::AudioDecoder d;
  return d;
}
}  // namespace

size_t audio_scratch_bytes() {
  return decoder().buffer_bytes();
}

AudioResult fill_audio(const AudioSpec& spec, const Member& m, const std::string& bytes,
                       bool missing_ok, double draw, const ClipSpan* span,
                       const std::vector<uint8_t*>& out) {
  decode::AudioDecoder& dec = decoder();
  const int64_t n = audio_window_samples(spec);
  auto* samples = reinterpret_cast<float*>(out[0]);
  AudioResult result;
  const decode::AudioInfo& info =
      m.whole_file() ? dec.open_file(m.path, spec.stream, missing_ok)
                     : dec.open_memory(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(),
                                       spec.stream, missing_ok);
  if (info.stream < 0) {
    result.missing = true;
    return result;
  }
  const int rate = spec.sample_rate;
  int64_t first = 0;  // output grid index of the window's first sample
  int64_t want = n;   // window samples the stream is asked for (an aligned clip may be shorter)
  if (span != nullptr) {
    // Sample-accurate: the grid sample nearest the clip's first frame, for the clip's length.
    first = std::llround((span->start - info.start) * rate);
    want = std::min(n, std::max<int64_t>(std::llround((span->end - span->start) * rate), 0));
  } else if (spec.position != AudioPosition::kStart) {
    // Where the header states no duration, a window starts at the stream's start.
    const int64_t total = info.duration > 0 ? std::llround(info.duration * rate) : 0;
    const int64_t room = std::max<int64_t>(total - n, 0);
    first = spec.position == AudioPosition::kCenter
                ? room / 2
                : std::min(static_cast<int64_t>(draw * static_cast<double>(room + 1)), room);
  }
  int64_t reached = 0;
  if (want > 0) {
    // Read into the output's first `want` samples a channel, then spread the planes out to
    // stride n (in place, from the last plane backwards).
    reached = dec.read(first, want, rate, spec.channels, samples);
    if (want < n) {
      for (int c = spec.channels - 1; c >= 0; --c) {
        std::memmove(samples + c * n, samples + c * want, static_cast<size_t>(want) * 4);
        std::fill(samples + c * n + want, samples + (c + 1) * n, 0.0f);
      }
    }
  } else {
    std::fill(samples, samples + static_cast<size_t>(n) * spec.channels, 0.0f);
  }
  const int64_t length = reached;
  std::memcpy(out[1], &length, sizeof length);
  const double time = info.start + static_cast<double>(first) / rate;
  std::memcpy(out[2], &time, sizeof time);
  result.bytes_read = m.whole_file() ? dec.bytes_read() : bytes.size();
  result.warning = dec.warning();
  return result;
}

}  // namespace loadscope::pipeline
