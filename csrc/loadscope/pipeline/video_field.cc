#include "loadscope/pipeline/video_field.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstring>
#include <memory>

#include "loadscope/core/error.h"
#include "loadscope/decode/video/video_decoder.h"

namespace loadscope::pipeline {

namespace {

// What a clip took besides time: why a dataset is slow (long GOPs decode many frames per frame
// shown; large files read many bytes per clip). The snapshot's "video" section.
const telemetry::Kind kVideo("video");
const struct {
  telemetry::Counter clips{"video.clips"}, frames_shown{"video.frames_shown"},
      frames_decoded{"video.frames_decoded"}, packets{"video.packets"}, seeks{"video.seeks"},
      open_ns{"video.open_ns"}, gpu_frames{"video.gpu_frames"},
      cpu_fallbacks{"video.cpu_fallbacks"};
} kCounts;

decode::VideoDecoder& decoder() {
  thread_local decode::VideoDecoder d;
  return d;
}

// The clip's start in seconds from the sample's member `key` (VideoClip(start=)): a number
// >= 0, as a manifest column or a tar member holds it (an indexed tar's member is a byte range
// of its shard, read here: a few bytes). Parsed with from_chars: no locale's decimal comma.
double clip_start(const Sample& sample, const std::string& key, const std::string& field) {
  const Member* m = sample.find(key);
  if (m == nullptr) {
    throw SampleError(sample.key,
                      "no member '" + key + "' for the start of field '" + field +
                          "' (sample has: " + member_list(sample) + ")",
                      FailureKind::kField);
  }
  std::string text = m->data;
  if (m->is_path) {
    try {
      read_member(*m, text);
    } catch (const ReadFailure& e) {
      throw SampleError(sample.key, key + ": " + e.what(), FailureKind::kRead);
    }
  }
  const auto space = [](char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; };
  const char* first = text.data();
  const char* last = text.data() + text.size();
  while (first < last && space(*first)) ++first;
  while (last > first && space(last[-1])) --last;
  double v = -1;
  const auto [end, ec] = std::from_chars(first, last, v);
  if (ec != std::errc() || end != last || first == last || !(v >= 0) || !std::isfinite(v)) {
    throw SampleError(sample.key,
                      key + ": the start of field '" + field + "' must be seconds >= 0, got '" +
                          preview(text) + "'",
                      FailureKind::kField);
  }
  return v;
}
}  // namespace

std::vector<Output> VideoField::outputs() const {
  const int64_t h = frame_.height, w = frame_.width;
  std::vector<int64_t> clips{video_.clip.frames};
  if (video_.clip.clips > 1) clips.insert(clips.begin(), video_.clip.clips);
  std::vector<int64_t> pixels = clips;
  for (int64_t d :
       frame_.channels_last ? std::vector<int64_t>{h, w, 3} : std::vector<int64_t>{3, h, w})
    pixels.push_back(d);
  return {{"", OutputType::kUint8, pixels},
          {".time", OutputType::kFloat64, clips},
          // the video's metadata: a dict per sample (a record, outputs.h), filled in fill()
          {".meta", OutputType::kFloat64, {}, "duration"},
          {".meta", OutputType::kFloat64, {}, "fps"},
          {".meta", OutputType::kInt64, {}, "frames"},
          {".meta", OutputType::kInt64, {}, "width"},
          {".meta", OutputType::kInt64, {}, "height"},
          {".meta", OutputType::kInt64, {}, "rotation"},
          {".meta", OutputType::kText, {}, "codec"},
          {".meta", OutputType::kInt64, {}, "stream"}};
}

void VideoField::validate(const std::string& name) const {
  const VideoSpec& v = video_;
  check_bound(name, "frames", v.clip.frames);
  check_bound(name, "clips", v.clip.clips);
  if (v.clip.fps < 0 || (v.clip.fps == 0 && v.clip.stride < 1)) {
    throw ConfigError("field '" + name + "': give stride >= 1 or fps > 0");
  }
  if (v.decoder_threads != VideoSpec::kAutoDecoderThreads) {
    check_bound(name, "decoder_threads", v.decoder_threads);
  }
  if (!v.start_key.empty() && v.clip.clips != 1) {
    throw ConfigError("field '" + name + "': start= gives one clip's start; clips must be 1");
  }
  validate_image(name, frame_, true);
  // Before any sample: a machine without a GPU (or FFmpeg without CUDA) is a configuration
  // error, not a failure of every sample.
  if (v.cuda_device >= 0) {
    const std::string why = decode::VideoDecoder::hwaccel_unavailable(v.cuda_device);
    if (!why.empty()) {
      throw ConfigError("field '" + name + "': hwaccel='cuda:" + std::to_string(v.cuda_device) +
                        "': " + why + ". Leave hwaccel unset to decode on the CPU");
    }
  }
}

size_t VideoField::scratch_bytes() const {
  return decoder().buffer_bytes();
}

void VideoField::fill(FieldCall& call) const {
  decode::VideoDecoder& dec = decoder();
  const VideoSpec& v = video_;
  const ImageSpec& image = frame_;
  const Member& m = call.member;
  const std::string& bytes = call.bytes;
  const Sample& sample = call.sample;
  SampleContext& ctx = call.ctx;
  const std::string& where = call.where;
  ClipSpan& span = call.spans[call.index];
  const uint64_t t0 = ctx.telemetry ? telemetry::now_ns() : 0;
  // Before the video is opened and indexed: a bad start costs no index pass.
  const double start = v.start_key.empty() ? 0.0 : clip_start(sample, v.start_key, call.name);
  // "auto": the engine's share of cores per loader thread (core/tuner.h); FFmpeg's output does
  // not depend on its thread count, so neither do the clip's bytes.
  const int threads =
      v.decoder_threads == VideoSpec::kAutoDecoderThreads ? ctx.decoder_threads : v.decoder_threads;
  dec.set_hwaccel(v.cuda_device);
  try {
    const decode::VideoInfo& info =
        m.whole_file() ? dec.open_file(m.path, v.stream, v.rotate, threads)
                       : dec.open_memory(reinterpret_cast<const uint8_t*>(bytes.data()),
                                         bytes.size(), v.stream, v.rotate, threads);
    const uint64_t opened = ctx.telemetry ? telemetry::now_ns() : 0;
    check_pixels(info.width, info.height, image);  // a frame size no real video has
    Rng rng = call.rng(RngStream::kAugment);
    const std::vector<int64_t> targets =
        plan_clips(dec.pts(), info.time_base, v.clip, rng, v.start_key.empty() ? nullptr : &start);
    const int frames = v.clip.frames;
    const size_t frame_bytes = static_cast<size_t>(image.height) * image.width * 3;
    uint8_t* pixels = call.fixed[0];
    auto* times = reinterpret_cast<double*>(call.fixed[1]);
    std::vector<decode::FrameOutput> outputs(static_cast<size_t>(v.clip.clips));
    std::vector<decode::VideoDecoder::Request> requests;
    requests.reserve(targets.size());
    for (int k = 0; k < v.clip.clips; ++k) {
      const augment::CropPlan plan =
          make_plan(image, info.width, info.height, rng);  // one per clip
      decode::FrameOutput& o = outputs[static_cast<size_t>(k)];
      o.x0 = plan.box.x0, o.y0 = plan.box.y0, o.x1 = plan.box.x1, o.y1 = plan.box.y1;
      o.out_w = image.width;
      o.out_h = image.height;
      o.chw = !image.channels_last;
      o.flip = plan.flip;
      o.color_tags = v.color_tags;
      for (int j = 0; j < frames; ++j) {
        const size_t t = static_cast<size_t>(k) * frames + j;
        requests.push_back({targets[t], pixels + t * frame_bytes, &o, times + t});
      }
    }
    dec.decode(requests);
    {
      // The first clip's span, for aligned audio: its first frame's time to its last frame's
      // end (the next frame's time, or one frame at the average rate after the last frame).
      const std::vector<int64_t>& pts = dec.pts();
      const double tb = info.time_base;
      const int64_t last = std::llround(times[frames - 1] / tb);
      const auto next = std::upper_bound(pts.begin(), pts.end(), last);
      span.start = times[0];
      span.end = next != pts.end() ? *next * tb
                                   : times[frames - 1] + (info.fps > 0 ? 1.0 / info.fps : 0.0);
      span.set = true;
    }
    // A video NVDEC did not take is decoded by the CPU: counted, and a warning naming it.
    const std::string fallback = v.cuda_device >= 0 ? dec.cpu_fallback() : std::string();
    if (!fallback.empty() && ctx.warning.empty()) {
      ctx.warning = m.name + ": decoded on the CPU: " + fallback;
    }
    const uint64_t read = m.whole_file() ? dec.bytes_read() : bytes.size();
    ctx.bytes_read += m.whole_file() ? read : 0;
    if (ctx.telemetry) {  // decode = open, index, seek, decode; augment = frame conversion
      const uint64_t total = telemetry::now_ns() - t0;
      const uint64_t convert = std::min(dec.convert_ns(), total);
      ctx.telemetry->record(*ctx.slot, telemetry::Stage::kDecode, kVideo, total - convert, read);
      ctx.telemetry->record(*ctx.slot, telemetry::Stage::kAugment, kVideo, convert);
      const decode::VideoDecoder::Work& w = dec.work();
      telemetry::Telemetry& t = *ctx.telemetry;
      t.count(*ctx.slot, kCounts.clips, 1);
      t.count(*ctx.slot, kCounts.frames_shown, requests.size());
      t.count(*ctx.slot, kCounts.frames_decoded, w.frames_decoded);
      t.count(*ctx.slot, kCounts.packets, w.packets);
      t.count(*ctx.slot, kCounts.seeks, w.seeks);
      t.count(*ctx.slot, kCounts.open_ns, opened - t0);
      if (v.cuda_device >= 0) {
        t.count(*ctx.slot, kCounts.gpu_frames, w.gpu_frames);
        t.count(*ctx.slot, kCounts.cpu_fallbacks, fallback.empty() ? 0 : 1);
      }
    }
    // The ".meta" record, in outputs()'s order: fixed outputs 2..8, the codec the one string.
    const auto put = [&call](size_t k, auto v) { std::memcpy(call.fixed[k], &v, sizeof v); };
    put(2, info.duration);
    put(3, info.fps);
    put(4, static_cast<int64_t>(dec.pts().size()));
    put(5, static_cast<int64_t>(info.width));
    put(6, static_cast<int64_t>(info.height));
    put(7, static_cast<int64_t>(info.rotation));
    *call.strings[0] = info.codec;
    put(8, static_cast<int64_t>(info.stream));
  } catch (const DecodeFailure& e) {
    // A remote read that failed under FFmpeg surfaces as a decode error: say what it was.
    if (!dec.input_error().empty()) throw SampleError(where, dec.input_error(), FailureKind::kRead);
    throw SampleError(where, m.name + ": " + e.what(), FailureKind::kDecode);
  } catch (const ReadFailure& e) {
    throw SampleError(where, e.what(), FailureKind::kRead);
  }
}

telemetry::Kind VideoField::kind() const {
  return kVideo;
}

}  // namespace loadscope::pipeline
