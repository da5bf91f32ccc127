#include "loadscope/decode/video/video_decoder.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <list>
#include <mutex>
#include <unordered_map>

extern "C" {
#include <libavutil/display.h>
}

#include "loadscope/core/error.h"
#include "loadscope/decode/ffmpeg/ffmpeg_common.h"
#include "loadscope/decode/ffmpeg/input.h"
#include "loadscope/decode/formats.h"
#include "loadscope/decode/video/video_parts.h"

namespace loadscope::decode {

using ffmpeg::error_string;
using ffmpeg::with_log;
using video_parts::check_frame_size;
using video_parts::Extrapolate;
using video_parts::Key;

namespace {

// Clockwise rotation (0/90/180/270) that shows the stream's frames upright.
int stream_rotation(const AVStream* st) {
  const uint8_t* matrix = nullptr;
#if LIBAVFORMAT_VERSION_MAJOR >= 61
  const AVPacketSideData* sd = av_packet_side_data_get(
      st->codecpar->coded_side_data, st->codecpar->nb_coded_side_data, AV_PKT_DATA_DISPLAYMATRIX);
  if (sd) matrix = sd->data;
#else
  matrix = av_stream_get_side_data(st, AV_PKT_DATA_DISPLAYMATRIX, nullptr);
#endif
  if (matrix == nullptr) return 0;
  const double theta = -av_display_rotation_get(reinterpret_cast<const int32_t*>(matrix));
  if (std::isnan(theta)) return 0;
  int r = static_cast<int>(std::lround(theta / 90.0)) * 90 % 360;
  return r < 0 ? r + 360 : r;
}

// Note [index cache]
// Indexing a container without tables (Matroska/WebM, AVI, MPEG-TS, ...) demuxes the whole
// file, i.e. reads all of it: a clip of a 2-minute video would cost 120 MB of reads every epoch.
// (An MP4 indexed from its tables reads only its header; the cache then spares the walk over
// its packets.) Indexes of files opened by path or URL are kept per process, keyed by (path,
// size, mtime or ETag, stream), least recently used first out, within the budget; a changed
// file has a new key. (Tar members are indexed from memory, where reading is free.)
struct CachedIndex {
  std::vector<int64_t> pts;
  std::vector<Key> keys;
  int64_t max_gap = 1;
  bool decoder_times = false;
  size_t bytes() const { return pts.size() * sizeof(int64_t) + keys.size() * sizeof(Key) + 128; }
};

class IndexCache {
 public:
  static IndexCache& instance() {
    static IndexCache cache;
    return cache;
  }
  bool get(const std::string& key, CachedIndex& out) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = map_.find(key);
    if (it == map_.end()) return false;
    lru_.splice(lru_.begin(), lru_, it->second.second);
    out = it->second.first;
    return true;
  }
  void put(const std::string& key, CachedIndex value) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (map_.count(key) || value.bytes() > budget_ / 4) return;
    bytes_ += value.bytes();
    lru_.push_front(key);
    map_.emplace(key, std::make_pair(std::move(value), lru_.begin()));
    while (bytes_ > budget_ && !lru_.empty()) {
      auto victim = map_.find(lru_.back());
      bytes_ -= victim->second.first.bytes();
      map_.erase(victim);
      lru_.pop_back();
    }
  }

 private:
  std::mutex mutex_;
  std::list<std::string> lru_;
  std::unordered_map<std::string, std::pair<CachedIndex, std::list<std::string>::iterator>> map_;
  size_t bytes_ = 0;
  // LOADSCOPE_VIDEO_INDEX_CACHE_MB (default 64; 0: none, every open indexes again, as when
  // every clip comes from another video).
  const size_t budget_ = [] {
    const char* v = std::getenv("LOADSCOPE_VIDEO_INDEX_CACHE_MB");
    char* end = nullptr;
    const long mb = v && *v ? std::strtol(v, &end, 10) : 64;
    if (v && *v && (*end != '\0' || mb < 0)) return size_t{64} << 20;
    return static_cast<size_t>(std::min(mb, 1L << 20)) << 20;
  }();
};

}  // namespace

const VideoInfo& VideoDecoder::open_file(const std::string& path, int stream, bool rotate,
                                         int threads) {
  s_->close();
  cache_key_ = s_->input.set_path(path) + '\n' + std::to_string(stream);
  // The name goes with the custom I/O so that probing may use its extension, as it would if
  // FFmpeg opened the file itself.
  return open_custom(path.c_str(), stream, rotate, threads);
}

const VideoInfo& VideoDecoder::open_memory(const uint8_t* data, size_t size, int stream,
                                           bool rotate, int threads) {
  s_->close();
  cache_key_.clear();
  s_->input.set_memory(data, size);
  return open_custom(nullptr, stream, rotate, threads);
}

const VideoInfo& VideoDecoder::open_custom(const char* url, int stream, bool rotate, int threads) {
  s_->fmt = ffmpeg::open_input(s_->input, s_->avio, url, video_demuxers(), "video");
  s_->mov = std::strstr(s_->fmt->iformat->name, "mov") != nullptr;
  open_common(stream, rotate, threads);
  return s_->info;
}

// A decoder of the open stream, `s.nvdec` saying whether on NVDEC.
void VideoDecoder::open_codec(const AVCodec* codec, int threads) {
  ffmpeg::LogCapture log;
  State& s = *s_;
  threads_ = threads;
  s.codec.reset(avcodec_alloc_context3(codec));
  if (!s.codec) throw std::bad_alloc();
  int rc = avcodec_parameters_to_context(s.codec.get(), s.stream->codecpar);
  if (rc < 0) throw DecodeFailure("video: bad codec parameters: " + error_string(rc));
  s.codec->thread_count = std::max(threads, 0);  // 0: FFmpeg chooses
  if (s.nvdec) video_parts::attach_cuda(s.codec.get(), s.cuda_device);
  // Bitstream errors fail the decode instead of being concealed: a clip never silently
  // contains a damaged frame.
  s.codec->err_recognition |= AV_EF_EXPLODE;
  s.codec->pkt_timebase = s.stream->time_base;
  rc = avcodec_open2(s.codec.get(), codec, nullptr);
  if (rc < 0)
    throw DecodeFailure(with_log(
        "video: cannot open the " + std::string(codec->name) + " decoder: " + error_string(rc),
        log));
}

void VideoDecoder::open_common(int stream, bool rotate, int threads) {
  ffmpeg::LogCapture log;
  convert_ns_ = 0;
  work_ = Work{};
  State& s = *s_;
  // Probing cost 3.5 ms of a 45 ms clip where the header already says it all.
  bool complete = ffmpeg::header_states_codecs(s.fmt.get());
  for (unsigned i = 0; i < s.fmt->nb_streams && complete; ++i) {
    const AVCodecParameters* par = s.fmt->streams[i]->codecpar;
    if (par->codec_type == AVMEDIA_TYPE_VIDEO) {
      complete = par->codec_id != AV_CODEC_ID_NONE && par->width > 0 && par->height > 0;
    }
  }
  int rc = complete ? 0 : avformat_find_stream_info(s.fmt.get(), nullptr);
  if (rc < 0)
    throw DecodeFailure(with_log("video: cannot read stream info: " + error_string(rc), log));
  const AVCodec* codec = nullptr;
  rc = av_find_best_stream(s.fmt.get(), AVMEDIA_TYPE_VIDEO, stream, -1, &codec, 0);
  if (rc < 0) {
    throw DecodeFailure(
        stream >= 0 ? "video: stream " + std::to_string(stream) + " is not a decodable video stream"
                    : "video: no decodable video stream (" + error_string(rc) + ")");
  }
  s.stream = s.fmt->streams[rc];
  check_frame_size(s.stream->codecpar->width, s.stream->codecpar->height, "the header claims");
  for (unsigned i = 0; i < s.fmt->nb_streams; ++i) {
    if (static_cast<int>(i) != rc) s.fmt->streams[i]->discard = AVDISCARD_ALL;  // audio, subtitles
  }
  fallback_reason_.clear();
  s.nvdec = false;
  if (s.cuda_device >= 0) {
    const AVCodec* hw = video_parts::nvdec_decoder(codec, &fallback_reason_);
    s.nvdec = hw != nullptr;
    codec = hw ? hw : codec;
  }
  open_codec(codec, threads);

  CachedIndex cached;
  if (!cache_key_.empty() && IndexCache::instance().get(cache_key_, cached)) {
    pts_ = std::move(cached.pts);
    s.keys = std::move(cached.keys);
    s.max_gap = cached.max_gap;
    s.decoder_times = cached.decoder_times;
  } else {
    scan_index(log);
    if (!cache_key_.empty()) {
      IndexCache::instance().put(cache_key_, CachedIndex{pts_, s.keys, s.max_gap, s.decoder_times});
    }
  }
  VideoInfo& info = s.info;
  info = VideoInfo{};
  info.stream = s.stream->index;
  info.time_base = av_q2d(s.stream->time_base);
  info.codec = avcodec_get_name(s.stream->codecpar->codec_id);  // "av1", not "libdav1d"
  info.rotation = rotate ? stream_rotation(s.stream) : 0;
  const int w = s.stream->codecpar->width, h = s.stream->codecpar->height;
  const bool swap = info.rotation == 90 || info.rotation == 270;
  info.width = swap ? h : w;
  info.height = swap ? w : h;
  info.header_frames = s.stream->nb_frames > 0 ? s.stream->nb_frames : -1;
  // Containers without a frame count may still state a duration (FLV metadata, MPEG-PS): a file
  // cut short indexes fewer seconds than it states. Only the video stream's own duration, or
  // the container's when it holds nothing else (audio may outlast the video).
  {
    const int64_t step = pts_.size() > 1 ? pts_[pts_.size() - 1] - pts_[pts_.size() - 2] : 0;
    const double indexed = (pts_.back() - pts_.front() + step) * info.time_base;
    double stated = -1;
    if (s.stream->duration != AV_NOPTS_VALUE && s.stream->duration > 0) {
      stated = s.stream->duration * info.time_base;
    } else if (s.fmt->nb_streams == 1 && s.fmt->duration != AV_NOPTS_VALUE && s.fmt->duration > 0 &&
               s.fmt->duration_estimation_method == AVFMT_DURATION_FROM_STREAM) {
      stated = static_cast<double>(s.fmt->duration) / AV_TIME_BASE;
    }
    const double tolerance = std::max(3 * step * info.time_base, 0.1 * stated);
    if (stated > 0 && indexed + tolerance < stated) {
      throw DecodeFailure("video: truncated: the container states " + std::to_string(stated) +
                          " s, only " + std::to_string(indexed) + " s of frames are present");
    }
  }
  if (s.stream->duration != AV_NOPTS_VALUE && s.stream->duration > 0) {
    info.duration = s.stream->duration * info.time_base;
  } else if (s.fmt->duration != AV_NOPTS_VALUE && s.fmt->duration > 0) {
    info.duration = static_cast<double>(s.fmt->duration) / AV_TIME_BASE;
  } else {  // no stated duration: the index's span plus one typical frame
    const int64_t step = pts_.size() > 1 ? (pts_.back() - pts_.front()) / (pts_.size() - 1) : 0;
    info.duration = (pts_.back() - pts_.front() + step) * info.time_base;
  }
  const AVRational rate = s.stream->avg_frame_rate.num > 0 && s.stream->avg_frame_rate.den > 0
                              ? s.stream->avg_frame_rate
                              : s.stream->r_frame_rate;
  // Without probing, Matroska may state no rate: frames per second of the index's span then.
  const double span = (pts_.back() - pts_.front()) * info.time_base;
  info.fps = rate.num > 0 && rate.den > 0  ? av_q2d(rate)
             : pts_.size() > 1 && span > 0 ? (pts_.size() - 1) / span
                                           : 0;
}

namespace {
// Note [index from the container's tables]
// An MP4/MOV file lists every sample in its `moov` (sizes, offsets, decode times, composition
// offsets, keyframes, edit lists), and FFmpeg's demuxer reads all of it while opening. Indexing
// such a file reads no packet data: the demuxer walks its packets while the input answers their
// reads without fetching anything, so the index holds exactly the timestamps and flags FFmpeg's
// own reading gives (edit-list discards, B-frame reordering), at the cost of the moov alone.
// A 10 s 720p clip then reads the moov and the GOPs it decodes instead of the whole file, which
// mattered most where every clip of an epoch is from another video (the index cache never hits)
// and over a network. Only for files that are not fragmented (fragments are read as the demuxer
// reaches them) and codecs whose packets FFmpeg's timestamps do not depend on. Parsers are off
// for the walk (AVFMT_FLAG_NOPARSE: H.264's would read the unread bytes and report damage), so
// the keyframes are the table's sync samples, the ones the demuxer's seeks land on. A file cut
// short fails as before: the walk's reads stop at its real end ("partial file").
bool index_from_tables(bool mov, const AVStream* st) {
  if (!mov) return false;
#if LIBAVFORMAT_VERSION_MAJOR < 61
  // NOPARSE only keeps parsers from being made: one that stream probing made already would
  // read the unread bytes.
  if (av_stream_get_parser(st) != nullptr) return false;
#else
  return false;  // no telling whether probing made a parser
#endif
  switch (st->codecpar->codec_id) {
    case AV_CODEC_ID_H264:
    case AV_CODEC_ID_HEVC:
    case AV_CODEC_ID_MPEG4:
    case AV_CODEC_ID_AV1: break;
    default: return false;
  }
  const int entries = avformat_index_get_entries_count(st);
  if (st->nb_frames <= 0 || entries != st->nb_frames) return false;
  // A table without sync samples (no `stss` where not every frame is one) leaves keyframes to
  // the parser, which the walk turns off.
  for (int i = 0; i < entries; ++i) {
    if (avformat_index_get_entry(const_cast<AVStream*>(st), i)->flags & AVINDEX_KEYFRAME)
      return true;
  }
  return false;
}
}  // namespace

void VideoDecoder::scan_index(const ffmpeg::LogCapture& log) {
  State& s = *s_;
  int rc = 0;
  // Every packet's timestamp, by demuxing alone (no decoding).
  pts_.clear();
  s.decoder_times = false;
  bool missing_pts = false;
  int64_t packets = 0;  // all of the stream's packets, edit-list discards included
  AVPacket* pkt = s.packet.get();
  // Skipping: reads bypass AVIO's buffer (`direct`), so that no unread bytes are left there for
  // the decoding after it, and the buffer is emptied at the end all the same.
  struct Skipping {
    ffmpeg::Input& in;
    AVIOContext* pb;
    AVFormatContext* fmt;
    int direct = 0, flags = 0;  // as they were before the walk
    void begin() {
      direct = pb->direct, flags = fmt->flags;
      in.skip = true;
      pb->direct = 1;
      fmt->flags |= AVFMT_FLAG_NOPARSE | AVFMT_FLAG_NOFILLIN;
    }
    ~Skipping() { end(); }
    void end() {
      if (!in.skip) return;
      in.skip = false;
      pb->direct = direct;
      fmt->flags = flags;
      pb->buf_ptr = pb->buf_end = pb->buffer;
      pb->pos = static_cast<int64_t>(in.pos);
      pb->eof_reached = 0;
    }
  } skipping{s.input, s.fmt->pb, s.fmt.get()};
  if (index_from_tables(s.mov, s.stream)) skipping.begin();
  while (true) {
    rc = av_read_frame(s.fmt.get(), pkt);
    if (rc == AVERROR_EOF) break;
    if (rc < 0)
      throw DecodeFailure(with_log("video: cannot read packets: " + error_string(rc), log));
    packets += pkt->stream_index == s.stream->index;
    if (pkt->stream_index == s.stream->index) {
      const int64_t ts = pkt->pts != AV_NOPTS_VALUE ? pkt->pts : pkt->dts;
      missing_pts |= pkt->pts == AV_NOPTS_VALUE;
      // Packets an edit list cuts away (AV_PKT_FLAG_DISCARD) are decoded but never output:
      // not frames of the index, yet their keyframes are where decoding must start.
      if (ts != AV_NOPTS_VALUE) {
        if (!(pkt->flags & AV_PKT_FLAG_DISCARD)) pts_.push_back(ts);
        if (pkt->flags & AV_PKT_FLAG_KEY) {
          s.keys.push_back(Key{ts, pkt->dts});
        } else if (!s.keys.empty() && ts < s.keys.back().pts) {
          s.keys.back().leading = true;
        }
      }
    }
    av_packet_unref(pkt);
  }
  // The demuxer reports damage (a file cut short, broken packets) only in its log; such a file
  // is not indexed completely, so it fails here rather than serving clips from what is left.
  if (!log.text().empty())
    throw DecodeFailure("video: damaged or truncated file (" + log.text() + ")");
  if (pts_.empty()) throw DecodeFailure(with_log("video: the stream has no frames", log));
  if (s.keys.empty()) throw DecodeFailure("video: the stream has no keyframe");
  if (s.stream->nb_frames > packets) {
    throw DecodeFailure("video: truncated: the container lists " +
                        std::to_string(s.stream->nb_frames) + " frames, only " +
                        std::to_string(packets) + " are present");
  }
  skipping.end();  // decoding by timestamps (below) needs the bytes
  // Some or all packets without a presentation time while the codec reorders frames: the
  // decoder alone knows the frames' times (Note [timestamps from the decoder]).
  if (missing_pts && (s.codec->has_b_frames > 0 || s.stream->codecpar->video_delay > 0)) {
    index_by_decoding();
  }
  std::sort(pts_.begin(), pts_.end());
  pts_.erase(std::unique(pts_.begin(), pts_.end()), pts_.end());
  std::sort(s.keys.begin(), s.keys.end(), [](const Key& a, const Key& b) { return a.pts < b.pts; });
  s.max_gap = 1;
  for (size_t i = 1; i < pts_.size(); ++i) s.max_gap = std::max(s.max_gap, pts_[i] - pts_[i - 1]);
}

void VideoDecoder::index_by_decoding() {
  State& s = *s_;
  ffmpeg::LogCapture log;
  const Key& first = s.keys.front();
  int rc = av_seek_frame(s.fmt.get(), s.stream->index,
                         first.dts != AV_NOPTS_VALUE ? std::min(first.dts, first.pts) : first.pts,
                         AVSEEK_FLAG_BACKWARD);
  if (rc < 0) throw DecodeFailure("video: cannot seek to the start: " + error_string(rc));
  avcodec_flush_buffers(s.codec.get());
  pts_.clear();
  AVPacket* pkt = s.packet.get();
  AVFrame* frame = s.frame.get();
  Extrapolate next_time;
  auto receive = [&]() {
    while (avcodec_receive_frame(s.codec.get(), frame) == 0) {
      pts_.push_back(next_time(frame->best_effort_timestamp));
      av_frame_unref(frame);
    }
  };
  while (av_read_frame(s.fmt.get(), pkt) >= 0) {
    if (pkt->stream_index == s.stream->index) {
      rc = avcodec_send_packet(s.codec.get(), pkt);
      if (rc < 0 && rc != AVERROR(EAGAIN)) {
        av_packet_unref(pkt);
        throw DecodeFailure(
            with_log("video: decoding failed while indexing: " + error_string(rc), log));
      }
      receive();
    }
    av_packet_unref(pkt);
  }
  avcodec_send_packet(s.codec.get(), nullptr);
  receive();
  avcodec_flush_buffers(s.codec.get());
  s.decoder_times = true;
}

}  // namespace loadscope::decode
