#include "loadscope/decode/video/video_decoder.h"

#include <algorithm>
#include <chrono>
#include <numeric>

#include "loadscope/core/error.h"
#include "loadscope/decode/ffmpeg/ffmpeg_common.h"
#include "loadscope/decode/ffmpeg/input.h"
#include "loadscope/decode/video/video_parts.h"

namespace loadscope::decode {

using ffmpeg::error_string;
using ffmpeg::with_log;
using video_parts::convert;
using video_parts::Extrapolate;
using video_parts::Key;

VideoDecoder::VideoDecoder() : s_(std::make_unique<State>()) {
  if (!s_->packet || !s_->frame || !s_->last) throw std::bad_alloc();
}
VideoDecoder::~VideoDecoder() = default;

size_t VideoDecoder::buffer_bytes() const {
  return s_->rgb.capacity();
}

const std::string& VideoDecoder::input_error() const {
  return s_->input.error;
}

uint64_t VideoDecoder::bytes_read() const {
  return s_->input.fetched();
}

// One decode() call, in named steps: the requests in presentation order, and where the
// demuxer and the decoder stand. Note [leading pictures]: after a seek to keyframe K, frames
// timed before K belong to the previous GOP; in an open GOP they reference pictures that were
// never decoded and fail. They are never shown (every target is at or after K), so their errors
// are ignored and the frames dropped; an error on any later frame still fails the clip.
class VideoDecoder::Pass {
 public:
  Pass(VideoDecoder& d, const std::vector<Request>& requests);
  void run();

 private:
  // Where to start for a target: seek to `key`; frames before `from` are never shown.
  struct Start {
    Key key;
    int64_t from;
  };
  Start start_for(int64_t t) const;
  void seek_to(const Start& start);
  void seek_earlier();
  void restart(int64_t from);
  bool read_packet();  // false at the end of the stream
  void count_sent(const AVPacket* p, int64_t ts);
  void receive_all();
  void on_frame(AVFrame* f);
  void emit(const AVFrame* f);
  void drain();
  void drain_early_if_complete();
  void finish_after_end();
  DecodeFailure fail(const std::string& what) const {
    return DecodeFailure(with_log("video: " + what, log));
  }
  std::string seconds(int64_t ts) const { return std::to_string(ts * tb); }

  VideoDecoder& d;
  State& s;
  const std::vector<Request>& requests;
  ffmpeg::LogCapture log;
  const double tb;
  std::vector<int64_t> targets;         // by request
  std::vector<size_t> order;            // requests by target, stable
  std::vector<int64_t> sorted_targets;  // ascending
  int64_t last_target = 0;
  AVCodecContext* ctx;
  AVPacket* pkt;
  AVFrame* frame;
  AVFrame* last;  // the frame decoded last: on screen until the next one
  bool have_last = false;
  size_t cur = 0;                   // requests produced, in `order`
  int64_t read_up_to = INT64_MIN;   // largest packet timestamp read since the last seek
  int64_t key_reached = INT64_MIN;  // the keyframe sought last, or the latest one read
  int64_t sought = INT64_MIN;       // frames before it are leading pictures: never shown
  int64_t seek_pts = INT64_MIN;     // the keyframe sought last
  bool check_landing = false;       // the next packet tells where the seek landed
  int64_t last_sent = INT64_MIN;    // timestamp of the packet sent last
  Extrapolate frame_time;
  // Note [draining early]: a decoder that reorders frames holds each one back until it has
  // seen a few packets more (the P-frame after a run of B-frames), so decoding up to the last
  // target's output costs frames after it that are never shown. The index says which frames
  // lie between the keyframe sought and the last target; once a packet of each of them has
  // been sent, every frame to show is inside the decoder (what they reference was sent before
  // them), and draining it outputs them without decoding anything more. Packets an edit list
  // discards are not frames of the index and do not count, nor does a timestamp sent twice.
  // Not when frame times come from the decoder. A drain that leaves a target unproduced (a
  // file whose packets disagree with its index) is undone: the targets from before it are
  // decoded again from a seek, as without the drain.
  bool drain_early;
  size_t first_needed = 0;        // index position of the first frame in [sought, last_target]
  std::vector<char> needed_sent;  // per frame of that range: a packet of it was sent
  size_t sent = 0;                // how many of them
};

VideoDecoder::Pass::Pass(VideoDecoder& decoder, const std::vector<Request>& reqs)
    : d(decoder),
      s(*decoder.s_),
      requests(reqs),
      tb(s.info.time_base),
      targets(reqs.size()),
      order(reqs.size()),
      ctx(s.codec.get()),
      pkt(s.packet.get()),
      frame(s.frame.get()),
      last(s.last.get()),
      drain_early(!s.decoder_times) {
  for (size_t i = 0; i < requests.size(); ++i) targets[i] = requests[i].pts;
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return targets[a] < targets[b]; });
  sorted_targets = targets;
  std::sort(sorted_targets.begin(), sorted_targets.end());
  last_target = sorted_targets.back();
}

void VideoDecoder::Pass::run() {
  seek_to(start_for(targets[order[0]]));
  while (cur < order.size()) {
    // Far ahead of what was read so far: jump to the target's keyframe instead of decoding up
    // to it.
    const Start start = start_for(targets[order[cur]]);
    if (start.from > key_reached && start.key.pts > read_up_to) seek_to(start);
    if (!read_packet()) {
      finish_after_end();
      return;
    }
  }
}

// Mostly the last keyframe at or before t, for both. When frame times come from the decoder,
// a keyframe packet's time says little about the frames around it (a DivX keyframe packet at
// 118 may hold the frame shown at 120, the frames shown at 118 and 119 needing the GOP
// before): start one keyframe earlier.
VideoDecoder::Pass::Start VideoDecoder::Pass::start_for(int64_t t) const {
  auto it = std::upper_bound(s.keys.begin(), s.keys.end(), t,
                             [](int64_t v, const Key& k) { return v < k.pts; });
  const size_t at_or_before = static_cast<size_t>(it - s.keys.begin());
  const size_t back = s.decoder_times ? 2 : 1;
  if (at_or_before < back) return Start{s.keys.front(), s.keys.front().pts};
  size_t i = at_or_before - back;
  const int64_t from = s.keys[i].pts;
  // An open GOP's keyframe: H.264's reference marking in the frames after it may name
  // pictures of the GOP before, which fails under AV_EF_EXPLODE. Decode from the keyframe
  // before it; the frames in between are never shown, so their errors do not count. Not
  // HEVC: a CRA picture is a random access point by the standard, and FFmpeg's decoder
  // drops its leading (RASL) pictures after a flush instead of decoding a GOP for them.
  if (s.keys[i].leading && i > 0 && s.codec->codec_id != AV_CODEC_ID_HEVC) --i;
  return Start{s.keys[i], from};
}

void VideoDecoder::Pass::seek_to(const Start& start) {
  const Key& k = start.key;
  // Seeks find the last keyframe at or before a time in the demuxer's own terms. Mostly
  // decode times, hence the keyframe's (at or before its presentation time). MP4's table is
  // the decode times shifted by the first frame's reordering delay, where a keyframe's decode
  // time lies before its entry and the seek landed a whole GOP early: there, by presentation
  // time. A seek that lands after the keyframe is caught by read_packet.
  const int64_t ts = s.mov || k.dts == AV_NOPTS_VALUE ? k.pts : std::min(k.dts, k.pts);
  ++d.work_.seeks;
  int rc = av_seek_frame(s.fmt.get(), s.stream->index, ts, AVSEEK_FLAG_BACKWARD);
  if (rc < 0) rc = avformat_seek_file(s.fmt.get(), -1, INT64_MIN, INT64_MIN, INT64_MAX, 0);
  if (rc < 0) throw fail("cannot seek: " + error_string(rc));
  restart(start.from);
  frame_time = Extrapolate{};
  key_reached = start.from;  // a seek may land earlier (Matroska seeks by cue): never retry it
  seek_pts = k.pts;
  check_landing = true;
}

// A seek that landed after its keyframe (inexact seeking, e.g. MPEG-PS): start from the
// keyframe before it, or from the beginning.
void VideoDecoder::Pass::seek_earlier() {
  auto it = std::lower_bound(s.keys.begin(), s.keys.end(), seek_pts,
                             [](const Key& k, int64_t v) { return k.pts < v; });
  if (it != s.keys.begin()) {
    seek_to(Start{*(it - 1), sought});
  } else {
    int rc = avformat_seek_file(s.fmt.get(), -1, INT64_MIN, INT64_MIN, INT64_MIN, 0);
    if (rc < 0) throw fail("cannot seek to the start: " + error_string(rc));
    restart(INT64_MIN);
    frame_time = Extrapolate{};
    check_landing = false;
  }
}

// After a seek (or the rewind to the start): nothing decoded, nothing of the range sent.
void VideoDecoder::Pass::restart(int64_t from) {
  avcodec_flush_buffers(ctx);
  have_last = false;
  read_up_to = INT64_MIN;
  sought = from;
  const auto& pts = d.pts_;
  first_needed = static_cast<size_t>(std::lower_bound(pts.begin(), pts.end(), from) - pts.begin());
  const size_t end =
      static_cast<size_t>(std::upper_bound(pts.begin(), pts.end(), last_target) - pts.begin());
  needed_sent.assign(end > first_needed ? end - first_needed : 0, 0);
  sent = 0;
}

bool VideoDecoder::Pass::read_packet() {
  int rc = av_read_frame(s.fmt.get(), pkt);
  if (rc == AVERROR_EOF) return false;
  if (rc < 0) throw fail("cannot read packets: " + error_string(rc));
  if (pkt->stream_index != s.stream->index) {
    av_packet_unref(pkt);
    return true;
  }
  const int64_t ts = pkt->pts != AV_NOPTS_VALUE ? pkt->pts : pkt->dts;
  if (check_landing && ts != AV_NOPTS_VALUE) {
    check_landing = false;
    if (ts > seek_pts && !s.decoder_times) {
      av_packet_unref(pkt);
      seek_earlier();
      return true;
    }
  }
  if (ts != AV_NOPTS_VALUE) {
    read_up_to = std::max(read_up_to, ts);
    if (pkt->flags & AV_PKT_FLAG_KEY) key_reached = std::max(key_reached, ts);
  }
  // Targets are frames of the index, so a frame whose timestamp is not one of them is never
  // shown: if nothing references it either, it need not be decoded (the B-frames between a
  // stride-2 clip's frames, everything non-reference before the clip). Not when frame times
  // come from the decoder: packets then say too little about them.
  const bool shown = std::binary_search(sorted_targets.begin(), sorted_targets.end(), ts);
  ctx->skip_frame =
      !s.decoder_times && ts != AV_NOPTS_VALUE && !shown ? AVDISCARD_NONREF : AVDISCARD_DEFAULT;
  ++d.work_.packets;
  count_sent(pkt, ts);
  rc = avcodec_send_packet(ctx, pkt);
  av_packet_unref(pkt);
  last_sent = ts;
  if (rc < 0 && rc != AVERROR(EAGAIN) && !(ts != AV_NOPTS_VALUE && ts < sought)) {
    throw fail("decoding failed: " + error_string(rc));
  }
  receive_all();
  drain_early_if_complete();
  return true;
}

// Counts a packet about to be sent if it is a frame of the range not counted yet.
void VideoDecoder::Pass::count_sent(const AVPacket* p, int64_t ts) {
  if (ts == AV_NOPTS_VALUE || (p->flags & AV_PKT_FLAG_DISCARD)) return;
  const auto& pts = d.pts_;
  auto it = std::lower_bound(pts.begin(), pts.end(), ts);
  if (it == pts.end() || *it != ts) return;
  const size_t k = static_cast<size_t>(it - pts.begin());
  if (k < first_needed || k - first_needed >= needed_sent.size() || needed_sent[k - first_needed])
    return;
  needed_sent[k - first_needed] = 1;
  ++sent;
}

void VideoDecoder::Pass::receive_all() {
  while (true) {
    int rc = avcodec_receive_frame(ctx, frame);
    if (rc == AVERROR(EAGAIN) || rc == AVERROR_EOF) return;
    if (rc < 0) {
      if (last_sent < sought) continue;  // a leading picture's error
      throw fail("decoding failed: " + error_string(rc));
    }
    ++d.work_.frames_decoded;
    d.work_.gpu_frames += frame->format == AV_PIX_FMT_CUDA;
    on_frame(frame);
    av_frame_unref(frame);
  }
}

// A decoded frame: it settles every target before it (shown: the previous frame) and every
// target equal to it.
void VideoDecoder::Pass::on_frame(AVFrame* f) {
  int64_t ts = f->best_effort_timestamp;
  if (ts == AV_NOPTS_VALUE) {
    // Drained at the end without a time: it is the next frame the index expects, after the
    // last one seen (or the keyframe sought, when none was seen since the seek).
    const int64_t after = have_last ? last->best_effort_timestamp : sought - 1;
    auto it = std::upper_bound(d.pts_.begin(), d.pts_.end(), after);
    if (it != d.pts_.end()) ts = *it;
  }
  const int64_t p = frame_time(ts);
  if (p < sought) return;  // a leading picture of the GOP: never shown
  if (f->decode_error_flags != 0 || (f->flags & AV_FRAME_FLAG_CORRUPT)) {
    throw fail("corrupt frame at " + seconds(p) + " s");
  }
  f->best_effort_timestamp = p;
  while (cur < order.size() && targets[order[cur]] < p) {
    const int64_t t = targets[order[cur]];
    if (!have_last || t - last->best_effort_timestamp > s.max_gap) {
      throw fail("the frame shown at " + seconds(t) + " s could not be decoded");
    }
    emit(last);
  }
  while (cur < order.size() && targets[order[cur]] == p) emit(f);
  av_frame_unref(last);
  av_frame_move_ref(last, f);
  last->best_effort_timestamp = p;
  have_last = true;
}

void VideoDecoder::Pass::emit(const AVFrame* f) {
  const Request& r = requests[order[cur]];
  const auto c0 = std::chrono::steady_clock::now();
  convert(s.sws, s.rgb, video_parts::to_host(f, s.copied.get(), s.planar.get()), s.info.rotation,
          *r.out, r.dst);
  d.convert_ns_ += static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - c0)
          .count());
  if (r.time) *r.time = f->best_effort_timestamp * tb;
  ++cur;
}

// Sends the end of the stream: the decoder outputs every frame it still holds.
void VideoDecoder::Pass::drain() {
  ctx->skip_frame = AVDISCARD_DEFAULT;
  avcodec_send_packet(ctx, nullptr);
  receive_all();
}

void VideoDecoder::Pass::drain_early_if_complete() {
  if (!drain_early || sent != needed_sent.size() || cur >= order.size()) return;
  const size_t before = cur;
  drain();
  // Targets between index frames (decode_video_frames takes any time) show the last frame at
  // or before them: the drained last frame, when it is that frame of the index.
  while (cur < order.size() && have_last) {
    const int64_t t = targets[order[cur]];
    auto at_or_before = std::upper_bound(d.pts_.begin(), d.pts_.end(), t);
    if (at_or_before == d.pts_.begin() || *(at_or_before - 1) != last->best_effort_timestamp) break;
    emit(last);
  }
  if (cur < order.size()) {  // the packets disagreed with the index: undo, decode as without
    drain_early = false;
    cur = before;
    seek_to(start_for(targets[order[cur]]));
  }
}

void VideoDecoder::Pass::finish_after_end() {
  drain();
  while (cur < order.size()) {  // targets after the last frame: it stays on screen
    const int64_t t = targets[order[cur]];
    if (!have_last || t - last->best_effort_timestamp > s.max_gap) {
      throw fail("the frame shown at " + seconds(t) + " s could not be decoded (stream ended)");
    }
    emit(last);
  }
  // The decoder was drained; later decodes start with a seek, which flushes it.
}

void VideoDecoder::decode(const std::vector<Request>& requests) {
  if (!s_->fmt || s_->keys.empty() || pts_.empty())
    throw DecodeFailure("video: decode() without a successful open()");
  if (requests.empty()) return;
  try {
    Pass(*this, requests).run();
  } catch (const DecodeFailure& e) {
    // NVDEC refused the stream before its first frame (a hardware-only decoder such as
    // FFmpeg's av1 then has no software path): the CPU decodes the video from the start.
    if (!s_->nvdec || work_.frames_decoded > 0 || !input_error().empty()) throw;
    fallback_reason_ = std::string("NVDEC failed: ") + e.what();
    s_->nvdec = false;
    open_codec(avcodec_find_decoder(s_->stream->codecpar->codec_id), threads_);
    Pass(*this, requests).run();  // its packets and seeks add to the failed pass's
  }
}

}  // namespace loadscope::decode
