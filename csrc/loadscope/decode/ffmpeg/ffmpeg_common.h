#pragma once
// RAII and error helpers for FFmpeg. Every FFmpeg object is owned by a unique_ptr the moment
// it exists, and every failing call becomes an exception carrying FFmpeg's own reason.

#include <memory>
#include <string>

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavformat/avio.h>
#include <libavutil/frame.h>
#include <libswscale/swscale.h>
}

namespace loadscope::decode::ffmpeg {

struct CodecContextDeleter {
  void operator()(AVCodecContext* p) const { avcodec_free_context(&p); }
};
struct FrameDeleter {
  void operator()(AVFrame* p) const { av_frame_free(&p); }
};
struct PacketDeleter {
  void operator()(AVPacket* p) const { av_packet_free(&p); }
};
struct SwsDeleter {
  void operator()(SwsContext* p) const { sws_freeContext(p); }
};
// An opened input (avformat_open_input); with AVFMT_FLAG_CUSTOM_IO its AVIOContext is the
// caller's, released separately (AvioPtr) and after it.
struct FormatInputDeleter {
  void operator()(AVFormatContext* p) const { avformat_close_input(&p); }
};
// A custom AVIOContext with its buffer, which FFmpeg may have reallocated meanwhile.
struct AvioDeleter {
  void operator()(AVIOContext* p) const {
    av_freep(&p->buffer);
    avio_context_free(&p);
  }
};
using CodecContextPtr = std::unique_ptr<AVCodecContext, CodecContextDeleter>;
using FormatInputPtr = std::unique_ptr<AVFormatContext, FormatInputDeleter>;
using AvioPtr = std::unique_ptr<AVIOContext, AvioDeleter>;
using SwsPtr = std::unique_ptr<SwsContext, SwsDeleter>;
using FramePtr = std::unique_ptr<AVFrame, FrameDeleter>;
using PacketPtr = std::unique_ptr<AVPacket, PacketDeleter>;

// FFmpeg's text for an error code.
std::string error_string(int code);

// While alive on a thread, FFmpeg log messages of level <= AV_LOG_ERROR issued on that thread
// are captured here instead of printed (they become part of the exception); messages from
// other threads go to FFmpeg's default logger unchanged.
class LogCapture {
 public:
  LogCapture();
  ~LogCapture();
  const std::string& text() const { return text_; }
  void append(const char* line);

 private:
  LogCapture* previous_;
  std::string text_;
};

}  // namespace loadscope::decode::ffmpeg
