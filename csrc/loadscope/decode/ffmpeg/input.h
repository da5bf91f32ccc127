#pragma once
// Where FFmpeg reads a container from, for the video and the audio decoder alike: one custom
// AVIO over a file or object opened by name (io::Seekable: the storage decides how the bytes
// come, local or remote) or an in-memory file (a tar member). Counts the bytes really fetched.
// An exception must not cross FFmpeg's C frames: a failed read is kept in `error` and rethrown
// once FFmpeg gives up.

#include <cstdint>
#include <memory>
#include <string>

#include "loadscope/decode/ffmpeg/ffmpeg_common.h"

namespace loadscope::io {
class Seekable;
}  // namespace loadscope::io

namespace loadscope::decode::ffmpeg {

struct Input {
  Input();
  ~Input();
  Input(Input&&) noexcept;
  Input& operator=(Input&&) noexcept;

  std::unique_ptr<io::Seekable> reader;
  const uint8_t* data = nullptr;  // in memory
  uint64_t size = 0;
  uint64_t pos = 0;
  uint64_t memory_read = 0;
  // Answer reads without fetching anything: the demuxer then walks the packets the container's
  // tables list, at no I/O cost (Note [index from the container's tables] in video/video_open.cc).
  bool skip = false;
  std::string error;

  // Points the input at a file or object by name (throws ReadFailure), or at memory that must
  // outlive the reads. set_path returns a key that changes when the file does.
  std::string set_path(const std::string& path);
  void set_memory(const uint8_t* bytes, size_t n);
  // Bytes read from storage (or memory) since the input was set.
  uint64_t fetched() const;
};

// Note [demuxer whitelist]
// A dataset is untrusted input. FFmpeg would open an HLS playlist saved as .mp4 and read the
// local files it names, or treat a JPEG as a one-frame video; only real media containers are
// allowed (decode::video_demuxers() and audio_demuxers(), from the format table in
// formats.h), and only the plain file protocol (nested opens by a demuxer included).

// An opened container reading through `in`: avformat_open_input with the whitelist `formats`.
// `url` (may be null) only helps probing by its extension. The returned input must be closed
// before `avio` is released. Throws ReadFailure (the input's) or DecodeFailure naming `what`.
FormatInputPtr open_input(Input& in, AvioPtr& avio, const char* url, const char* formats,
                          const std::string& what);

// Whether the container's header states each stream's codec parameters (MP4/MOV, Matroska/
// WebM: codec, size or rate and channels, extradata), so that avformat_find_stream_info — which
// decodes frames of every stream to learn them — can be skipped for a stream whose parameters
// are complete. Other containers (AVI, MPEG-TS, raw streams, ...) may say too little.
bool header_states_codecs(const AVFormatContext* fmt);

// `what` with FFmpeg's logged reason appended, if it logged one.
std::string with_log(std::string what, const LogCapture& log);

}  // namespace loadscope::decode::ffmpeg
