#include "loadscope/decode/video/video_decoder.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <list>
#include <mutex>
#include <numeric>
#include <unordered_map>

extern "C" {
#include <libavutil/display.h>
#include <libavutil/pixdesc.h>
}

#include "loadscope/core/error.h"
#include "loadscope/decode/ffmpeg/ffmpeg_common.h"
#include "loadscope/decode/ffmpeg/input.h"
#include "loadscope/decode/formats.h"
#include "loadscope/decode/limits.h"

namespace loadscope::decode {

using ffmpeg::error_string;
using ffmpeg::with_log;

namespace {

// Frames of w x h, as a header claims them or a decoder made one, refused where they are over
// decode/limits.h: the decoder would hold up to 16 such frames. 0: not stated (yet).
void check_frame_size(int w, int h, const char* who) {
  if (w > kMaxVideoSide || h > kMaxVideoSide || int64_t{w} * h > kMaxVideoPixels) {
    throw DecodeFailure("video: " + std::string(who) + " frames of " + std::to_string(w) + "x" +
                        std::to_string(h) + " (" + std::to_string(int64_t{w} * h) +
                        " pixels), over the " + std::to_string(kMaxVideoPixels) + " pixels (and " +
                        std::to_string(kMaxVideoSide) +
                        " a side) loadscope decodes: 8192x4352, H.264's and HEVC's largest level");
  }
}

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

struct Key {
  int64_t pts;
  int64_t dts;
  // Followed in decode order by frames shown before it (an open GOP's leading pictures, which
  // reference the GOP before): see Note [leading pictures].
  bool leading = false;
};

// A decoded frame's timestamp; frames drained from the decoder at the end may carry none, and
// then follow the previous one by the previous step (as the ffmpeg CLI numbers them).
struct Extrapolate {
  int64_t last = AV_NOPTS_VALUE;
  int64_t step = 1;
  int64_t operator()(int64_t ts) {
    if (ts == AV_NOPTS_VALUE) ts = last == AV_NOPTS_VALUE ? 0 : last + step;
    if (last != AV_NOPTS_VALUE && ts > last) step = ts - last;
    last = ts;
    return ts;
  }
};

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

struct VideoDecoder::State {
  // Declared in this order so that the input is closed before its AVIOContext goes.
  ffmpeg::AvioPtr avio;
  ffmpeg::FormatInputPtr fmt;
  ffmpeg::Input input;
  ffmpeg::CodecContextPtr codec;
  AVStream* stream = nullptr;
  VideoInfo info;
  std::vector<Key> keys;  // keyframe packets, ascending pts
  int64_t max_gap = 1;    // largest step between consecutive frame timestamps
  bool decoder_times =
      false;         // indexed from decoded frames; see Note [timestamps from the decoder]
  bool mov = false;  // MP4/MOV (FFmpeg's mov demuxer)
  ffmpeg::PacketPtr packet{av_packet_alloc()};
  ffmpeg::FramePtr frame{av_frame_alloc()};
  ffmpeg::FramePtr last{av_frame_alloc()};
  ffmpeg::SwsPtr sws;        // reused while the conversion does not change
  std::vector<uint8_t> rgb;  // converted pixels before they are placed; see convert()

  ~State() { close(); }
  void close() {
    codec.reset();
    fmt.reset();
    avio.reset();
    stream = nullptr;
    keys.clear();
    input = ffmpeg::Input{};
  }
};

VideoDecoder::VideoDecoder() : s_(std::make_unique<State>()) {
  if (!s_->packet || !s_->frame || !s_->last) throw std::bad_alloc();
}
VideoDecoder::~VideoDecoder() = default;

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
  s.codec.reset(avcodec_alloc_context3(codec));
  if (!s.codec) throw std::bad_alloc();
  rc = avcodec_parameters_to_context(s.codec.get(), s.stream->codecpar);
  if (rc < 0) throw DecodeFailure("video: bad codec parameters: " + error_string(rc));
  s.codec->thread_count = std::max(threads, 0);  // 0: FFmpeg chooses
  // Bitstream errors fail the decode instead of being concealed: a clip never silently
  // contains a damaged frame.
  s.codec->err_recognition |= AV_EF_EXPLODE;
  s.codec->pkt_timebase = s.stream->time_base;
  rc = avcodec_open2(s.codec.get(), codec, nullptr);
  if (rc < 0)
    throw DecodeFailure(with_log(
        "video: cannot open the " + std::string(codec->name) + " decoder: " + error_string(rc),
        log));

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

namespace {

// A converted image in scratch, stored orientation: channel c (R, G, B) of pixel (x, y) is
// at ch[c][y * stride + x * step]. Packed RGB24 (step 3) or planar GBRP (step 1).
struct Pixels {
  const uint8_t* ch[3];
  ptrdiff_t step, stride;
  int w, h;
};

// dst[x] = src[-x] for x < n: a mirrored row, 8 bytes at a time (a byte swap reverses them;
// the byte loop before it stood out in a profile of flipped clips).
void copy_mirrored(const uint8_t* src, int n, uint8_t* dst) {
  int x = 0;
  for (; x + 8 <= n; x += 8) {
    uint64_t v;
    std::memcpy(&v, src - x - 7, 8);
    v = __builtin_bswap64(v);
    std::memcpy(dst + x, &v, 8);
  }
  for (; x < n; ++x) dst[x] = src[-x];
}

// Writes `src` upright (turned clockwise by `rotation`, then mirrored if `flip`) into dst as
// [3, H, W] planes or [H, W, 3]. Each output row walks the source along a line: a row for 0
// and 180 degrees, a column for 90 and 270.
void place(const Pixels& src, int rotation, bool flip, bool chw, uint8_t* dst) {
  const bool swap = rotation == 90 || rotation == 270;
  const int ow = swap ? src.h : src.w, oh = swap ? src.w : src.h;
  const size_t plane = static_cast<size_t>(ow) * oh;
  const ptrdiff_t ostep = chw ? 1 : 3;
  for (int y = 0; y < oh; ++y) {
    // Source pixel of output column 0 and the step to the next column, before the mirror.
    ptrdiff_t first, next;
    if (rotation == 90) {
      first = static_cast<ptrdiff_t>(src.h - 1) * src.stride + y * src.step, next = -src.stride;
    } else if (rotation == 270) {
      first = static_cast<ptrdiff_t>(src.w - 1 - y) * src.step, next = src.stride;
    } else if (rotation == 180) {
      first = static_cast<ptrdiff_t>(src.h - 1 - y) * src.stride + (src.w - 1) * src.step,
      next = -src.step;
    } else {
      first = static_cast<ptrdiff_t>(y) * src.stride, next = src.step;
    }
    if (flip) first += (ow - 1) * next, next = -next;
    if (!chw && src.step == 3 && next == 3 && src.ch[1] == src.ch[0] + 1 &&
        src.ch[2] == src.ch[0] + 2) {
      std::memcpy(dst + static_cast<size_t>(y) * ow * 3, src.ch[0] + first,
                  static_cast<size_t>(ow) * 3);
      continue;  // packed RGB to [H, W, 3] as it is: whole rows
    }
    for (int c = 0; c < 3; ++c) {
      uint8_t* out = chw ? dst + c * plane + static_cast<size_t>(y) * ow
                         : dst + static_cast<size_t>(y) * ow * 3 + c;
      const uint8_t* in = src.ch[c] + first;
      if (ostep == 1 && next == 1) {
        std::memcpy(out, in, static_cast<size_t>(ow));
      } else if (ostep == 1 && next == -1) {
        copy_mirrored(in, ow, out);
      } else {
        for (int x = 0; x < ow; ++x) out[x * ostep] = in[x * next];
      }
    }
  }
}

// Converts the crop of `f` into dst; see FrameOutput. Only frames that are output get here.
void convert(ffmpeg::SwsPtr& sws, std::vector<uint8_t>& scratch, const AVFrame* f, int rotation,
             const FrameOutput& out, uint8_t* dst) {
  const auto fmt = static_cast<AVPixelFormat>(f->format);
  const AVPixFmtDescriptor* desc = av_pix_fmt_desc_get(fmt);
  if (desc == nullptr || (desc->flags & AV_PIX_FMT_FLAG_HWACCEL)) {
    throw DecodeFailure("video: unsupported pixel format");
  }
  const int W = f->width, H = f->height;          // stored
  check_frame_size(W, H, "a decoded frame has");  // a stream may change size after its header
  // The crop box in stored coordinates.
  double x0 = out.x0, y0 = out.y0, x1 = out.x1, y1 = out.y1;
  if (rotation == 90) {
    x0 = out.y0, x1 = out.y1, y0 = H - out.x1, y1 = H - out.x0;
  } else if (rotation == 270) {
    x0 = W - out.y1, x1 = W - out.y0, y0 = out.x0, y1 = out.x1;
  } else if (rotation == 180) {
    x0 = W - out.x1, x1 = W - out.x0, y0 = H - out.y1, y1 = H - out.y0;
  }
  // Whole chroma samples only: planar YUV crops start on the subsampling grid.
  const bool yuv = !(desc->flags & AV_PIX_FMT_FLAG_RGB) && desc->nb_components >= 3;
  const int ax = yuv ? 1 << desc->log2_chroma_w : 1, ay = yuv ? 1 << desc->log2_chroma_h : 1;
  int cx0 = std::clamp(static_cast<int>(std::floor(x0)), 0, W - 1) / ax * ax;
  int cy0 = std::clamp(static_cast<int>(std::floor(y0)), 0, H - 1) / ay * ay;
  int cx1 = std::clamp(static_cast<int>(std::lround(x1)), cx0 + 1, W);
  int cy1 = std::clamp(static_cast<int>(std::lround(y1)), cy0 + 1, H);
  const int cw = cx1 - cx0, ch = cy1 - cy0;
  const bool swap = rotation == 90 || rotation == 270;
  const int ow = swap ? out.out_h : out.out_w, oh = swap ? out.out_w : out.out_h;

  // Note [planar output when resizing]
  // A resize converts to planar GBRP: swscale's packed RGB24 output after scaling is scalar
  // code; planar output takes 0.57-0.68x its time for a 720x720 or 1280x720 crop to 224x224
  // (benchmarks/swscale_formats.c), and the planes are what a [3, H, W] batch holds. Planar also
  // interpolates chroma to every pixel where RGB24 shares it between pixel pairs. A frame kept
  // at its size goes to RGB24 instead: that is swscale's unscaled converter, the ffmpeg CLI's
  // rgb24 byte for byte (test_decoded_frames_equal_the_ffmpeg_cli).
  const bool planar = cw != ow || ch != oh;
  // sws_getCachedContext frees the context it is given when it makes another.
  sws.reset(sws_getCachedContext(sws.release(), cw, ch, fmt, ow, oh,
                                 planar ? AV_PIX_FMT_GBRP : AV_PIX_FMT_RGB24, SWS_BILINEAR, nullptr,
                                 nullptr, nullptr));
  if (sws == nullptr) throw DecodeFailure("video: cannot convert from " + std::string(desc->name));
  if (out.color_tags) {
    const int cs = f->colorspace == AVCOL_SPC_UNSPECIFIED || f->colorspace == AVCOL_SPC_RGB
                       ? SWS_CS_DEFAULT
                       : static_cast<int>(f->colorspace);
    const int full = f->color_range == AVCOL_RANGE_JPEG;
    sws_setColorspaceDetails(sws.get(), sws_getCoefficients(cs), full,
                             sws_getCoefficients(SWS_CS_DEFAULT), 1, 0, 1 << 16, 1 << 16);
  }
  const uint8_t* src[4] = {nullptr, nullptr, nullptr, nullptr};
  int src_stride[4] = {0, 0, 0, 0};
  const bool palette = desc->flags & AV_PIX_FMT_FLAG_PAL;
  for (int p = 0; p < 4 && f->data[p]; ++p) {
    src_stride[p] = f->linesize[p];
    if (palette && p == 1) {
      src[p] = f->data[p];
      continue;
    }
    int step = 0;
    bool chroma = false;
    for (int c = 0; c < desc->nb_components; ++c) {
      if (desc->comp[c].plane == p) {
        step = std::max(step, desc->comp[c].step);
        chroma |= yuv && (c == 1 || c == 2);
      }
    }
    const int sx = chroma ? desc->log2_chroma_w : 0, sy = chroma ? desc->log2_chroma_h : 0;
    src[p] = f->data[p] + static_cast<ptrdiff_t>(cy0 >> sy) * f->linesize[p] + (cx0 >> sx) * step;
  }
  // Note [swscale overrun]: swscale's vector code may write up to a block's width past the end
  // of a row. Into a batch slot that would overwrite the next frame (possibly another thread's
  // sample) or run off the block, so it converts into padded scratch and the result is copied.
  // The stride must also hold the row rounded up to 16 pixels: FFmpeg 5.1's SIMD yuv2rgb
  // converts 8 pixels at a time and, when the stride cannot take the rounded-up row, silently
  // leaves the last partial block unconverted (a 340-pixel row lost its last 4 pixels).
  const int bytes = planar ? 1 : 3;
  const size_t stride = ((static_cast<size_t>(ow) + 15) / 16 * 16 * bytes + 63) / 64 * 64;
  const size_t plane_bytes = stride * oh + 64;
  scratch.resize(planar ? 3 * plane_bytes : plane_bytes);
  uint8_t* base = scratch.data();
  uint8_t* dst_planes[4] = {base, planar ? base + plane_bytes : nullptr,
                            planar ? base + 2 * plane_bytes : nullptr, nullptr};
  int dst_stride[4] = {static_cast<int>(stride), planar ? static_cast<int>(stride) : 0,
                       planar ? static_cast<int>(stride) : 0, 0};
  const int rows = sws_scale(sws.get(), src, src_stride, 0, ch, dst_planes, dst_stride);
  if (rows != oh)
    throw DecodeFailure("video: conversion from " + std::string(desc->name) + " failed");
  // GBRP's planes are G, B, R.
  const Pixels px =
      planar ? Pixels{{dst_planes[2], dst_planes[0], dst_planes[1]},
                      1,
                      static_cast<ptrdiff_t>(stride),
                      ow,
                      oh}
             : Pixels{{base, base + 1, base + 2}, 3, static_cast<ptrdiff_t>(stride), ow, oh};
  place(px, rotation, out.flip, out.chw, dst);
}

}  // namespace

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
  convert(s.sws, s.rgb, f, s.info.rotation, *r.out, r.dst);
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
  Pass(*this, requests).run();
}

}  // namespace loadscope::decode
