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

std::vector<Output> AudioField::outputs() const {
  return {{"", OutputType::kFloat32, {spec_.channels, audio_window_samples(spec_)}},
          {".length", OutputType::kInt64, {}},
          {".time", OutputType::kFloat64, {}}};
}

void AudioField::validate(const std::string& field) const {
  const AudioSpec& s = spec_;
  auto fail = [&](const std::string& what) { throw ConfigError("field '" + field + "': " + what); };
  check_bound(field, "sample_rate", s.sample_rate);
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

const telemetry::Kind kAudio("audio");
decode::AudioDecoder& decoder() {
  thread_local decode::AudioDecoder d;
  return d;
}
}  // namespace

size_t AudioField::scratch_bytes() const {
  return decoder().buffer_bytes();
}

void AudioField::fill(FieldCall& call) const {
  const AudioSpec& spec = spec_;
  const Member& m = call.member;
  const std::string& bytes = call.bytes;
  const ClipSpan* span = nullptr;
  if (!spec.align.empty()) {
    span = &call.spans[static_cast<size_t>(call.follows)];
    if (!span->set) {  // the video field was optional and absent: no clip to follow
      if (call.optional) {
        call.absent = true;
        return;
      }
      throw SampleError(call.where,
                        m.name + ": field '" + call.name + "' aligns to '" + spec.align +
                            "', which has no clip in this sample",
                        FailureKind::kField);
    }
  }
  const uint64_t t0 = call.ctx.telemetry ? telemetry::now_ns() : 0;
  decode::AudioDecoder& dec = decoder();
  const int64_t n = audio_window_samples(spec);
  auto* samples = reinterpret_cast<float*>(call.fixed[0]);
  const decode::AudioInfo& info =
      m.whole_file() ? dec.open_file(m.path, spec.stream, call.optional)
                     : dec.open_memory(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(),
                                       spec.stream, call.optional);
  if (info.stream < 0) {  // no audio stream, and the field is optional
    call.absent = true;
    return;
  }
  const double draw = call.rng(RngStream::kAugment).uniform();
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
    // An aligned clip after the audio's end (a soundtrack a little shorter than the video)
    // is zeros and length 0, not a failure.
    reached = dec.read(first, want, rate, spec.channels, samples, span != nullptr);
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
  std::memcpy(call.fixed[1], &length, sizeof length);
  const double time = info.start + static_cast<double>(first) / rate;
  std::memcpy(call.fixed[2], &time, sizeof time);
  const uint64_t read = m.whole_file() ? dec.bytes_read() : bytes.size();
  call.ctx.bytes_read += m.whole_file() ? read : 0;
  if (!dec.warning().empty() && call.ctx.warning.empty()) {
    call.ctx.warning = m.name + ": " + dec.warning();
  }
  if (call.ctx.telemetry) {
    call.ctx.telemetry->record(*call.ctx.slot, telemetry::Stage::kDecode, kAudio,
                               telemetry::now_ns() - t0, read);
  }
}

telemetry::Kind AudioField::kind() const {
  return kAudio;
}

}  // namespace loadscope::pipeline
