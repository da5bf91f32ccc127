#include "loadscope/bench/decode_only.h"

#include <turbojpeg.h>
#include <webp/decode.h>

#include "loadscope/decode/ffmpeg/ffmpeg_common.h"

#include <atomic>
#include <chrono>
#include <cmath>
#include <vector>

#include <oneapi/tbb/global_control.h>
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/task_arena.h>

namespace loadscope::bench {

namespace {

// Runs decode_one(i) for i in [0, n) on `threads` oneTBB threads and times the whole: each call
// that returns true counts as an image (or clip), each false as a failure.
template <class F>
DecodeOnlyResult timed_parallel(size_t n, int threads, F&& decode_one) {
  tbb::global_control workers(tbb::global_control::max_allowed_parallelism, threads + 1);
  tbb::task_arena arena(threads, 0);
  std::atomic<long> images{0}, failures{0};
  const auto t0 = std::chrono::steady_clock::now();
  arena.execute([&] {
    tbb::parallel_for(tbb::blocked_range<size_t>(0, n, 1), [&](const auto& range) {
      for (size_t i = range.begin(); i != range.end(); ++i) {
        (decode_one(i) ? images : failures).fetch_add(1);
      }
    });
  });
  DecodeOnlyResult r;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.images = images.load();
  r.failures = failures.load();
  return r;
}

}  // namespace

DecodeOnlyResult turbojpeg_decode_only(const std::vector<std::string>& jpegs, int threads,
                                       int repeat) {
  struct Handle {
    tjhandle h = tjInitDecompress();
    ~Handle() { tjDestroy(h); }
  };
  return timed_parallel(jpegs.size() * static_cast<size_t>(repeat), threads, [&](size_t i) {
    thread_local Handle tj;
    thread_local std::vector<unsigned char> pixels;
    const std::string& j = jpegs[i % jpegs.size()];
    const auto* data = reinterpret_cast<const unsigned char*>(j.data());
    int w = 0, h = 0, sub = 0, cs = 0;
    if (tjDecompressHeader3(tj.h, data, j.size(), &w, &h, &sub, &cs) != 0) return false;
    pixels.resize(static_cast<size_t>(w) * h * 3);
    return tjDecompress2(tj.h, data, j.size(), pixels.data(), w, 0, h, TJPF_RGB, 0) == 0;
  });
}

DecodeOnlyResult webp_decode_only(const std::vector<std::string>& webps,
                                  const std::vector<std::array<int, 4>>& crops, int threads) {
  return timed_parallel(webps.size(), threads, [&](size_t i) {
    thread_local std::vector<uint8_t> pixels;
    const auto* data = reinterpret_cast<const uint8_t*>(webps[i].data());
    WebPDecoderConfig config;
    if (!WebPInitDecoderConfig(&config) ||
        WebPGetFeatures(data, webps[i].size(), &config.input) != VP8_STATUS_OK) {
      return false;
    }
    int w = config.input.width, h = config.input.height;
    const auto& [x, y, cw, ch] = crops[i];
    if (cw > 0 || ch > 0) {
      if (cw <= 0 || ch <= 0) return false;  // a region of no pixels: not a decode
      config.options.use_cropping = 1;
      config.options.crop_left = x;
      config.options.crop_top = y;
      config.options.crop_width = w = cw;
      config.options.crop_height = h = ch;
    }
    pixels.resize(static_cast<size_t>(w) * h * 3);
    config.output.colorspace = MODE_RGB;
    config.output.is_external_memory = 1;
    config.output.u.RGBA.rgba = pixels.data();
    config.output.u.RGBA.stride = w * 3;
    config.output.u.RGBA.size = pixels.size();
    const bool ok = WebPDecode(data, webps[i].size(), &config) == VP8_STATUS_OK;
    WebPFreeDecBuffer(&config.output);
    return ok;
  });
}

namespace {

// One clip's frames decoded, nothing else; false on any FFmpeg error. `least`: the floor, see
// ffmpeg_decode_only.
struct ClipWork {
  long decoded = 0, shown = 0;  // frames out of the decoder; those of them the clip shows
};

bool decode_clip(const std::string& path, double start, int frames, int stride, int threads,
                 bool least, ClipWork& work) {
  AVFormatContext* opened = nullptr;
  if (avformat_open_input(&opened, path.c_str(), nullptr, nullptr) < 0) return false;
  const decode::ffmpeg::FormatInputPtr input(opened);
  AVFormatContext* fmt = input.get();
  bool ok = false;
  decode::ffmpeg::CodecContextPtr context;
  const decode::ffmpeg::PacketPtr packet(av_packet_alloc());
  const decode::ffmpeg::FramePtr frame_owner(av_frame_alloc());
  AVPacket* pkt = packet.get();
  AVFrame* frame = frame_owner.get();
  if (pkt == nullptr || frame == nullptr) return false;
  const AVCodec* codec = nullptr;
  int idx;
  if (avformat_find_stream_info(fmt, nullptr) >= 0 &&
      (idx = av_find_best_stream(fmt, AVMEDIA_TYPE_VIDEO, -1, -1, &codec, 0)) >= 0) {
    AVStream* st = fmt->streams[idx];
    context.reset(avcodec_alloc_context3(codec));
    AVCodecContext* ctx = context.get();
    if (ctx == nullptr || avcodec_parameters_to_context(ctx, st->codecpar) < 0) return false;
    ctx->thread_count = threads;
    const double fps = av_q2d(st->avg_frame_rate);
    const double tb = av_q2d(st->time_base);
    const int span = (frames - 1) * stride + 1;  // frames from the clip's first to its last
    const int64_t first = static_cast<int64_t>(start / tb);
    const int64_t last = static_cast<int64_t>((start + (frames - 1) * stride / fps) / tb + 0.5);
    // The frame of the clip a timestamp is (0 = its first), by the frame rate; -1 if outside.
    auto clip_frame = [&](int64_t ts) {
      const long k = std::lround((ts * tb - start) * fps);
      return ts == AV_NOPTS_VALUE || k < 0 || k >= span ? -1L : k;
    };
    if (avcodec_open2(ctx, codec, nullptr) >= 0 &&
        av_seek_frame(fmt, idx, first, AVSEEK_FLAG_BACKWARD) >= 0) {
      bool done = false;
      int sent = 0;  // packets of the clip's frames sent
      auto receive = [&] {
        while (avcodec_receive_frame(ctx, frame) == 0) {
          done |= frame->best_effort_timestamp >= last;
          ++work.decoded;
          const long k = clip_frame(frame->best_effort_timestamp);
          work.shown += k >= 0 && k % stride == 0;
          av_frame_unref(frame);
        }
      };
      while (!done && av_read_frame(fmt, pkt) >= 0) {
        if (pkt->stream_index == idx) {
          const long k = clip_frame(pkt->pts);
          const bool shown =
              pkt->pts == AV_NOPTS_VALUE || (k >= 0 && k % stride == 0);  // no time: keep it
          if (least) ctx->skip_frame = shown ? AVDISCARD_DEFAULT : AVDISCARD_NONREF;
          sent +=
              k >= 0 && !(pkt->flags &
                          AV_PKT_FLAG_DISCARD);  // an edit list's hidden frames are not the clip's
          if (avcodec_send_packet(ctx, pkt) >= 0) receive();
        }
        av_packet_unref(pkt);
        if (least && sent == span) break;  // every frame of the clip is in the decoder
      }
      if (!done) {  // drain the decoder: the clip ends on the last frame, or the floor
        avcodec_send_packet(ctx, nullptr);
        receive();
      }
      ok = work.decoded > 0;
    }
  }
  return ok;
}

}  // namespace

DecodeOnlyResult ffmpeg_decode_only(const std::vector<std::string>& paths,
                                    const std::vector<double>& starts, int frames, int stride,
                                    int threads, int decoder_threads, bool least) {
  std::atomic<long> decoded{0}, shown{0};
  DecodeOnlyResult r = timed_parallel(paths.size(), threads, [&](size_t i) {
    ClipWork work;
    const bool ok = decode_clip(paths[i], starts[i], frames, stride, decoder_threads, least, work);
    decoded.fetch_add(work.decoded);
    shown.fetch_add(work.shown);
    return ok;
  });
  r.frames = decoded.load();
  r.shown = shown.load();
  return r;
}

}  // namespace loadscope::bench
