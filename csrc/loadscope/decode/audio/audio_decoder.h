#pragma once
// Audio decoding with FFmpeg (libavcodec, libswresample): open an audio file or the audio
// stream of a video (a path, an in-memory file, a remote object: decode/ffmpeg/input.h), then
// produce any window of it resampled to a requested rate and channel count, as float32 planes.
//
// Times: a stream's samples lie on the grid start + i / rate, where `start` is the time of its
// first decoded sample in the container's timeline (the timeline video frames' times are in),
// after the encoder delay FFmpeg's decoders drop (MP3's LAME header, AAC's edit list). Output
// sample j of a window lies at start + j / out_rate; the whole stream resampled from its start
// is what the ffmpeg CLI's `-ar R -ac C` gives, and any window is that sequence's slice.
//
// One decoder per thread. Not thread-safe.

#include <cstdint>
#include <memory>
#include <string>

namespace loadscope::decode {

struct AudioInfo {
  int stream = -1;       // container stream index; -1: the file has no audio (open's `missing_ok`)
  int sample_rate = 0;   // the stream's
  int channels = 0;      // the stream's
  double start = 0;      // seconds: the first sample's time
  double duration = -1;  // seconds the container states from `start` (-1: none stated)
  std::string codec;     // e.g. "aac"
};

class AudioDecoder {
 public:
  AudioDecoder();
  ~AudioDecoder();
  AudioDecoder(const AudioDecoder&) = delete;
  AudioDecoder& operator=(const AudioDecoder&) = delete;

  // Opens the file and its audio stream (stream < 0: FFmpeg's best audio stream) and decodes
  // its first frame (to learn `start`). Without an audio stream: info().stream == -1 when
  // missing_ok, else DecodeFailure. URLs (s3://, http(s)://) are read by byte ranges. `data`
  // must outlive the decoder's use of it. Throws ReadFailure or DecodeFailure.
  const AudioInfo& open_file(const std::string& path, int stream, bool missing_ok);
  const AudioInfo& open_memory(const uint8_t* data, size_t size, int stream, bool missing_ok);
  const AudioInfo& info() const { return info_; }

  // Writes output samples [first, first + n) of the stream at (rate, channels) into `dst`,
  // planar (channel c at dst + c * n), zeros where the stream has none (before its start, past
  // its end). Channels are mixed as FFmpeg mixes them. Returns one past the last window sample
  // the stream reached (0: none; a window wholly past a stream's real end fails instead).
  // Throws DecodeFailure on damaged data, ReadFailure when a remote read fails.
  // past_end_ok: a window wholly past the end gives zeros and 0 instead.
  int64_t read(int64_t first, int64_t n, int rate, int channels, float* dst,
               bool past_end_ok = false);

  // What the decoder logged as errors during the last read() without failing it (a damaged MP3
  // frame it concealed), else empty.
  const std::string& warning() const { return warning_; }

  // Bytes read from the input since open().
  uint64_t bytes_read() const;
  // The remote read that failed, if one did (else empty).
  const std::string& input_error() const;
  // Bytes of buffers held between calls.
  size_t buffer_bytes() const;

 private:
  struct State;
  std::unique_ptr<State> s_;
  AudioInfo info_;
  std::string warning_;
  const AudioInfo& open_custom(const char* url, int stream, bool missing_ok);
  int64_t read_window(int64_t first, int64_t n, int rate, int channels, float* dst,
                      bool past_end_ok);
};

}  // namespace loadscope::decode
