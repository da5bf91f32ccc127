#include "loadscope/decode/audio/audio_decoder.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

extern "C" {
#include <libavutil/channel_layout.h>
#include <libavutil/opt.h>
#include <libswresample/swresample.h>
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
struct SwrDeleter {
  void operator()(SwrContext* p) const { swr_free(&p); }
};
using SwrPtr = std::unique_ptr<SwrContext, SwrDeleter>;

// Note [audio pre-roll]
// A window decodes from a packet at least this long before it. Decoders need the frames before
// a point to get it right (AAC's and Vorbis's overlapping transforms, MP3's bit reservoir,
// Opus's recommended 80 ms), and the resampler's filter needs input on both sides of a sample:
// starting 0.25 s early gives a window the same samples as a decode from the file's start.
constexpr double kPreRollSeconds = 0.25;

// A read that failed under FFmpeg surfaces as whatever FFmpeg made of it (a bad header, no
// stream, the end): the read's own reason is the one to report, as a ReadFailure.
template <class F>
decltype(auto) reading(const ffmpeg::Input& in, F&& f) {
  try {
    return f();
  } catch (const DecodeFailure&) {
    if (!in.error.empty()) throw ReadFailure(in.error);
    throw;
  }
}
// Where the header states the codecs (ffmpeg::header_states_codecs) and says which audio stream
// to decode (the one asked for, or the only audio stream), with its codec, rate and channels,
// avformat_find_stream_info is skipped and the other streams are discarded before any packet
// is read. The probe decoded an H.264 frame to learn a pixel format the audio field never uses:
// 2.9 ms an MP4 of the audio benchmark, against 0.3 ms to open it (benchmarks/probe_cost.c).
// Discarding the video and probing anyway is no better: the probe then waits for the video's
// parameters until 5 s of audio are read (228 KB a file instead of 21). Other files are probed as
// before. Audio-only files keep the probe although it reads more than they need (127 KB more a
// 10 s window of a 30 s WAV, no measurable time): it is what estimates a duration where the
// header has none (CAF with fixed-size packets, PCM W64, WAV and AU of unknown size: without
// one, every window would start at 0) and finds DTS carried in a WAV marked as PCM.
bool header_is_enough(AVFormatContext* fmt, int stream) {
  if (!ffmpeg::header_states_codecs(fmt)) return false;
  int audio = -1, audio_streams = 0;
  for (unsigned i = 0; i < fmt->nb_streams; ++i) {
    const AVCodecParameters* p = fmt->streams[i]->codecpar;
    if (p->codec_type == AVMEDIA_TYPE_UNKNOWN) return false;
    if (p->codec_type != AVMEDIA_TYPE_AUDIO) continue;
    ++audio_streams;
    if (stream < 0 || static_cast<int>(i) == stream) audio = static_cast<int>(i);
  }
  if (audio < 0 || (stream < 0 && audio_streams != 1)) return false;
  const AVCodecParameters* p = fmt->streams[audio]->codecpar;
  if (p->codec_id == AV_CODEC_ID_NONE || p->sample_rate <= 0 || p->ch_layout.nb_channels <= 0)
    return false;
  for (unsigned i = 0; i < fmt->nb_streams; ++i) {
    if (static_cast<int>(i) != audio) fmt->streams[i]->discard = AVDISCARD_ALL;
  }
  return true;
}

// A stream's rate and channels as its header (or its first frame) claims them, refused before
// any work where they are outside decode/limits.h. 0 where the header does not say (the first
// frame then does).
void check_claims(int rate, int channels, const char* who) {
  if (rate < 0 || rate > kMaxSampleRate) {
    throw DecodeFailure("audio: " + std::string(who) + " a sample rate of " + std::to_string(rate) +
                        " Hz, outside the 1.." + std::to_string(kMaxSampleRate) +
                        " Hz loadscope decodes");
  }
  if (channels < 0 || channels > kMaxChannels) {
    throw DecodeFailure("audio: " + std::string(who) + " " + std::to_string(channels) +
                        " channels, outside the 1.." + std::to_string(kMaxChannels) +
                        " loadscope decodes");
  }
}

}  // namespace

struct AudioDecoder::State {
  // Declared in this order so that the input is closed before its AVIOContext goes.
  ffmpeg::AvioPtr avio;
  ffmpeg::FormatInputPtr fmt;
  ffmpeg::Input input;
  ffmpeg::CodecContextPtr codec;
  const AVCodec* decoder = nullptr;
  AVStream* stream = nullptr;
  ffmpeg::PacketPtr packet{av_packet_alloc()};
  ffmpeg::FramePtr frame{av_frame_alloc()};
  SwrPtr swr;
  std::vector<float> out;  // one call's resampled samples, planar
  // The frames open() decoded, kept for a read from the start: the stream then decodes once,
  // from its first packet, as the ffmpeg CLI decodes it (a seek back to the start gives other
  // first samples: FFmpeg's MP4 demuxer and MP3 decoder handle the encoder delay differently
  // after a seek).
  std::vector<ffmpeg::FramePtr> pending;
  size_t next_pending = 0;
  bool at_beginning = false;  // nothing decoded but `pending`

  ~State() { close(); }
  void close() {
    pending.clear();
    next_pending = 0;
    at_beginning = false;
    swr.reset();
    codec.reset();
    fmt.reset();
    avio.reset();
    stream = nullptr;
    input = ffmpeg::Input{};
  }

  // The next decoded frame of the stream into `frame`; false at the end of the stream.
  bool next_frame(bool& draining) {
    if (next_pending < pending.size()) {
      av_frame_move_ref(frame.get(), pending[next_pending++].get());
      return true;
    }
    while (true) {
      int rc = avcodec_receive_frame(codec.get(), frame.get());
      if (rc == 0) return true;
      if (rc == AVERROR_EOF) return false;
      if (rc != AVERROR(EAGAIN)) {
        throw DecodeFailure("audio: cannot decode: " + error_string(rc));
      }
      if (draining) return false;
      rc = av_read_frame(fmt.get(), packet.get());
      // A failed read makes some demuxers (Matroska's) report the end: it is not one.
      if (rc < 0 && !input.error.empty()) throw ReadFailure(input.error);
      if (rc == AVERROR_EOF) {
        draining = true;
        rc = avcodec_send_packet(codec.get(), nullptr);
        if (rc < 0 && rc != AVERROR_EOF) {
          throw DecodeFailure("audio: cannot flush the decoder: " + error_string(rc));
        }
        continue;
      }
      if (rc < 0) throw DecodeFailure("audio: cannot read a packet: " + error_string(rc));
      if (packet->stream_index == stream->index) {
        rc = avcodec_send_packet(codec.get(), packet.get());
        const double at =
            packet->pts == AV_NOPTS_VALUE ? -1 : packet->pts * av_q2d(stream->time_base);
        av_packet_unref(packet.get());
        if (rc < 0 && rc != AVERROR(EAGAIN)) {
          throw DecodeFailure("audio: cannot decode the packet at " + std::to_string(at) +
                              " s: " + error_string(rc));
        }
      } else {
        av_packet_unref(packet.get());
      }
    }
  }

  void open_codec() {
    ffmpeg::LogCapture log;
    codec.reset(avcodec_alloc_context3(decoder));
    if (!codec) throw std::bad_alloc();
    int rc = avcodec_parameters_to_context(codec.get(), stream->codecpar);
    if (rc < 0) throw DecodeFailure("audio: bad codec parameters: " + error_string(rc));
    codec->thread_count = 1;  // the engine parallelises samples
    // Damage fails the decode instead of being concealed as silence.
    codec->err_recognition |= AV_EF_EXPLODE;
    codec->pkt_timebase = stream->time_base;
    rc = avcodec_open2(codec.get(), decoder, nullptr);
    if (rc < 0) {
      throw DecodeFailure(with_log(
          "audio: cannot open the " + std::string(decoder->name) + " decoder: " + error_string(rc),
          log));
    }
  }

  // To the stream's start with a new decoder (the state the ffmpeg CLI decodes in: a flushed
  // MP3 or AAC decoder gives other first samples than a new one), else to the packet before
  // `ts` with the decoder flushed (Note [audio pre-roll]).
  void seek(int64_t ts, bool to_start) {
    const int rc = av_seek_frame(fmt.get(), stream->index, ts, AVSEEK_FLAG_BACKWARD);
    if (rc < 0 && !input.error.empty()) throw ReadFailure(input.error);
    // A format that cannot seek stays where it is; read() then decodes forward from there and
    // fails below if that is past the window (never for the formats on the whitelist).
    if (to_start) {
      open_codec();
    } else {
      avcodec_flush_buffers(codec.get());
    }
  }
};

AudioDecoder::AudioDecoder() : s_(std::make_unique<State>()) {
  if (!s_->packet || !s_->frame) throw std::bad_alloc();
}
AudioDecoder::~AudioDecoder() = default;

const AudioInfo& AudioDecoder::open_file(const std::string& path, int stream, bool missing_ok) {
  s_->close();
  s_->input.set_path(path);
  // The name goes with the custom I/O so that probing may use its extension, as it would if
  // FFmpeg opened the file itself.
  return reading(s_->input, [&]() -> const AudioInfo& {
    return open_custom(path.c_str(), stream, missing_ok);
  });
}

const AudioInfo& AudioDecoder::open_memory(const uint8_t* data, size_t size, int stream,
                                           bool missing_ok) {
  s_->close();
  s_->input.set_memory(data, size);
  return reading(s_->input,
                 [&]() -> const AudioInfo& { return open_custom(nullptr, stream, missing_ok); });
}

const AudioInfo& AudioDecoder::open_custom(const char* url, int stream, bool missing_ok) {
  State& s = *s_;
  info_ = AudioInfo{};
  s.fmt = ffmpeg::open_input(s.input, s.avio, url, audio_demuxers(), "audio");
  ffmpeg::LogCapture log;
  int rc =
      header_is_enough(s.fmt.get(), stream) ? 0 : avformat_find_stream_info(s.fmt.get(), nullptr);
  if (rc < 0)
    throw DecodeFailure(with_log("audio: cannot read stream info: " + error_string(rc), log));
  const AVCodec* codec = nullptr;
  rc = av_find_best_stream(s.fmt.get(), AVMEDIA_TYPE_AUDIO, stream, -1, &codec, 0);
  if (rc < 0) {
    if (stream >= 0) {
      throw DecodeFailure("audio: stream " + std::to_string(stream) +
                          " is not a decodable audio stream");
    }
    if (rc == AVERROR_STREAM_NOT_FOUND && missing_ok) return info_;
    throw DecodeFailure("audio: no decodable audio stream (" + error_string(rc) + ")");
  }
  s.stream = s.fmt->streams[rc];
  check_claims(s.stream->codecpar->sample_rate, s.stream->codecpar->ch_layout.nb_channels,
               "the header claims");
  for (unsigned i = 0; i < s.fmt->nb_streams; ++i) {
    if (static_cast<int>(i) != rc) s.fmt->streams[i]->discard = AVDISCARD_ALL;
  }
  s.decoder = codec;
  s.open_codec();
  // The first frames say where the samples start (after the encoder delay the decoder drops).
  // From the second frame's time less the first's length: the first frame's own time was moved
  // by the dropped samples and rounded to the stream's time base (Matroska's milliseconds), the
  // second's is the packet's.
  bool draining = false;
  if (!s.next_frame(draining)) throw DecodeFailure("audio: the stream has no samples");
  AVFrame* f = s.frame.get();
  if (f->sample_rate <= 0 || f->ch_layout.nb_channels <= 0) {
    throw DecodeFailure("audio: the first frame has no sample rate or channels");
  }
  check_claims(f->sample_rate, f->ch_layout.nb_channels, "the first frame has");
  const double tb = av_q2d(s.stream->time_base);
  info_.stream = s.stream->index;
  info_.sample_rate = f->sample_rate;
  info_.channels = f->ch_layout.nb_channels;
  info_.codec = avcodec_get_name(s.stream->codecpar->codec_id);
  info_.start = f->best_effort_timestamp != AV_NOPTS_VALUE ? f->best_effort_timestamp * tb : 0.0;
  const int first_samples = f->nb_samples;
  auto keep = [&] {
    s.pending.emplace_back(av_frame_alloc());
    if (!s.pending.back()) throw std::bad_alloc();
    av_frame_move_ref(s.pending.back().get(), f);
    s.next_pending = s.pending.size();  // kept for read(), not handed out again here
  };
  keep();
  if (s.next_frame(draining)) {
    if (f->best_effort_timestamp != AV_NOPTS_VALUE) {
      info_.start =
          f->best_effort_timestamp * tb - static_cast<double>(first_samples) / f->sample_rate;
    }
    keep();
  }
  s.at_beginning = true;  // a drained decoder answers EOF after `pending`
  const int64_t stream_start = s.stream->start_time != AV_NOPTS_VALUE ? s.stream->start_time : 0;
  if (s.stream->duration != AV_NOPTS_VALUE && s.stream->duration > 0) {
    info_.duration = (stream_start + s.stream->duration) * tb - info_.start;
  } else if (s.fmt->duration != AV_NOPTS_VALUE && s.fmt->duration > 0) {
    info_.duration = static_cast<double>(s.fmt->duration) / AV_TIME_BASE;
  }
  return info_;
}

int64_t AudioDecoder::read(int64_t first, int64_t n, int rate, int channels, float* dst,
                           bool past_end_ok) {
  return reading(s_->input,
                 [&] { return read_window(first, n, rate, channels, dst, past_end_ok); });
}

int64_t AudioDecoder::read_window(int64_t first, int64_t n, int rate, int channels, float* dst,
                                  bool past_end_ok) {
  State& s = *s_;
  ffmpeg::LogCapture log;  // what the decoder complains of without failing: warning()
  warning_.clear();
  std::fill(dst, dst + static_cast<size_t>(n) * channels, 0.0f);
  const double tb = av_q2d(s.stream->time_base);
  const double target = info_.start + static_cast<double>(first) / rate;  // the window's start
  const int in_rate = info_.sample_rate;
  // The resampler's filter grows with the ratio downwards, its buffers with the ratio upwards.
  if (static_cast<double>(rate) > double{kMaxResampleRatio} * in_rate ||
      static_cast<double>(in_rate) > double{kMaxResampleRatio} * rate) {
    throw DecodeFailure("audio: resampling " + std::to_string(in_rate) + " Hz to " +
                        std::to_string(rate) + " Hz: a ratio over " +
                        std::to_string(kMaxResampleRatio) + "x");
  }
  const int64_t g = std::gcd<int64_t>(rate, in_rate);
  const int64_t step = in_rate / g;  // input samples per grid cell
  const int64_t per = rate / g;      // output samples per grid cell
  // Seek to the window less the pre-roll and one grid cell (the resampler starts on the first
  // input sample on the grid: up to a cell after the seek), or to the stream's start (every
  // format seeks there).
  const double from = target - kPreRollSeconds - static_cast<double>(step) / in_rate;
  if (!(from / tb < 9e18)) {
    throw DecodeFailure("audio: no samples at " + std::to_string(target) + " s");
  }
  const int64_t stream_start = s.stream->start_time != AV_NOPTS_VALUE ? s.stream->start_time : 0;
  const bool to_start = from <= info_.start;
  if (to_start && s.at_beginning) {
    s.next_pending = 0;  // decode on from open()'s frames
  } else {
    s.pending.clear();
    s.next_pending = 0;
    s.seek(to_start ? stream_start : static_cast<int64_t>(std::floor(from / tb)), to_start);
  }
  s.at_beginning = false;

  // Input sample i (from the stream's start) lies at start + i / in_rate. The resampler is fed
  // from an input sample on the output grid (s0 * rate / in_rate whole), so that its output
  // sample k is grid sample s0 * rate / in_rate + k exactly.
  int64_t next_out = INT64_MIN;  // grid index of the resampler's next output sample
  int64_t reached = 0;           // one past the last window sample written from the stream
  bool draining = false;
  int64_t expected_in = INT64_MIN;  // input index the next frame should start at
  s.swr.reset();
  AVChannelLayout out_layout;
  av_channel_layout_default(&out_layout, channels);

  auto emit = [&](int produced) {
    // out holds `produced` samples per channel, planar with stride `cap`, from grid next_out.
    const size_t cap = s.out.size() / channels;
    const int64_t lo = std::max(next_out, first);
    const int64_t hi = std::min(next_out + produced, first + n);
    for (int c = 0; c < channels && lo < hi; ++c) {
      std::memcpy(dst + c * n + (lo - first), s.out.data() + c * cap + (lo - next_out),
                  static_cast<size_t>(hi - lo) * sizeof(float));
    }
    if (hi > lo) reached = hi - first;
    next_out += produced;
  };
  auto convert = [&](const uint8_t** in, int count) {
    const int room = swr_get_out_samples(s.swr.get(), count);
    if (room < 0) throw DecodeFailure("audio: resampler: " + error_string(room));
    if (s.out.size() < static_cast<size_t>(room) * channels)
      s.out.resize(static_cast<size_t>(room) * channels);
    uint8_t* planes[64];
    for (int c = 0; c < channels; ++c)
      planes[c] = reinterpret_cast<uint8_t*>(s.out.data() + c * (s.out.size() / channels));
    const int got = swr_convert(s.swr.get(), planes, room, in, count);
    if (got < 0) throw DecodeFailure("audio: resampler: " + error_string(got));
    emit(got);
  };
  // Feeds `f` from its sample `offset` on, at most 1024 input samples a call, so the output
  // buffer stays small whatever the ratio; stops once the window is full.
  int in_channels = 0, in_format = -1;  // what the resampler was made for
  auto feed = [&](const AVFrame* f, int offset) {
    const auto format = static_cast<AVSampleFormat>(f->format);
    const bool planar = av_sample_fmt_is_planar(format);
    const size_t bytes = static_cast<size_t>(av_get_bytes_per_sample(format));
    const size_t stride = planar ? bytes : bytes * static_cast<size_t>(in_channels);
    for (int done = offset; done < f->nb_samples && next_out < first + n;) {
      const int k = std::min(f->nb_samples - done, 1024);
      const uint8_t* in[64] = {};
      for (int c = 0; c < (planar ? in_channels : 1); ++c) {
        in[c] = f->extended_data[c] + static_cast<size_t>(done) * stride;
      }
      convert(in, k);
      done += k;
    }
  };

  while (next_out == INT64_MIN || next_out < first + n) {
    if (!s.next_frame(draining)) break;
    AVFrame* f = s.frame.get();
    if (f->sample_rate != in_rate) {
      throw DecodeFailure("audio: the sample rate changes within the stream (" +
                          std::to_string(in_rate) + " to " + std::to_string(f->sample_rate) +
                          " Hz)");
    }
    // Where the frame's samples lie: right after the previous frame's; the first after a seek
    // by its time, where the first of the stream is sample 0 (its time is rounded).
    const int64_t pts = f->best_effort_timestamp;
    int64_t i0 = expected_in;
    if (i0 == INT64_MIN) {
      const bool at_start = to_start || pts == AV_NOPTS_VALUE || pts * tb - info_.start < tb;
      i0 = at_start ? 0 : std::llround((pts * tb - info_.start) * in_rate);
    }
    int offset = 0;  // samples of this frame skipped
    if (!s.swr) {
      const int64_t s0 = std::max<int64_t>((i0 + step - 1) / step * step, 0);
      if (i0 + f->nb_samples <= s0) {  // all of this frame lies before the first grid point
        expected_in = i0 + f->nb_samples;
        av_frame_unref(f);
        continue;
      }
      offset = static_cast<int>(s0 - i0);
      SwrContext* swr = nullptr;
      AVChannelLayout in_layout;
      if (f->ch_layout.order == AV_CHANNEL_ORDER_UNSPEC) {
        av_channel_layout_default(&in_layout, f->ch_layout.nb_channels);
      } else {
        av_channel_layout_copy(&in_layout, &f->ch_layout);
      }
      int rc = swr_alloc_set_opts2(&swr, &out_layout, AV_SAMPLE_FMT_FLTP, rate, &in_layout,
                                   static_cast<AVSampleFormat>(f->format), in_rate, 0, nullptr);
      av_channel_layout_uninit(&in_layout);
      if (rc < 0) throw DecodeFailure("audio: resampler: " + error_string(rc));
      s.swr.reset(swr);
      in_channels = f->ch_layout.nb_channels;
      in_format = f->format;
      rc = swr_init(swr);
      if (rc < 0) throw DecodeFailure("audio: resampler: " + error_string(rc));
      // Grid samples from `first` to here, if any, have no input: zeros (a window that starts
      // before the stream does).
      next_out = s0 / step * per;
    } else if (f->ch_layout.nb_channels != in_channels || f->format != in_format) {
      // The resampler reads the layout it was made for: a frame of another would be overread.
      throw DecodeFailure("audio: the channel count or sample format changes within the stream");
    }
    expected_in = i0 + f->nb_samples;
    feed(f, offset);
    av_frame_unref(f);
  }
  if (s.swr && next_out < first + n) convert(nullptr, 0);  // the resampler's tail at the end
  av_channel_layout_uninit(&out_layout);
  if (reached == 0 && first > 0 && n > 0 && !past_end_ok) {
    throw DecodeFailure(
        "audio: no samples at " + std::to_string(target) + " s (the stream " +
        (next_out == INT64_MIN
             ? std::string("has none there")
             : "ends at " + std::to_string(info_.start + double(next_out) / rate) + " s") +
        (info_.duration > 0 ? ", its header states " + std::to_string(info_.duration) + " s)"
                            : ")"));
  }
  warning_ = log.text();
  return reached;
}

uint64_t AudioDecoder::bytes_read() const {
  return s_->input.fetched();
}
const std::string& AudioDecoder::input_error() const {
  return s_->input.error;
}
size_t AudioDecoder::buffer_bytes() const {
  return s_->out.capacity() * sizeof(float);
}

}  // namespace loadscope::decode
