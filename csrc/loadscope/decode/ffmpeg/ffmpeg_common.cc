#include "loadscope/decode/ffmpeg/ffmpeg_common.h"

#include <cstdarg>
#include <cstdio>

extern "C" {
#include <libavutil/error.h>
#include <libavutil/log.h>
}

namespace loadscope::decode::ffmpeg {

namespace {
thread_local LogCapture* g_capture = nullptr;

void log_callback(void* avcl, int level, const char* fmt, va_list args) {
  if (g_capture == nullptr) {
    av_log_default_callback(avcl, level, fmt, args);
    return;
  }
  if (level > AV_LOG_ERROR) return;
  char line[512];
  std::vsnprintf(line, sizeof line, fmt, args);
  g_capture->append(line);
}
}  // namespace

std::string error_string(int code) {
  char buf[AV_ERROR_MAX_STRING_SIZE] = {0};
  av_strerror(code, buf, sizeof buf);
  return buf;
}

// Note [log callback]
// FFmpeg has one log callback per process, and no way to read it back. PyAV (Debian's
// python3-av shares these libraries) installs its own at import: one that takes the GIL for
// every message, filtered ones too. Left in place, it halved loadscope's audio throughput while
// the main thread held the GIL (benchmarks/bench_audio.py: 70.6 windows/s before this change,
// 132.6 after, in two runs; docs/benchmarks.md), and FFmpeg's reasons went to Python logging
// instead of into loadscope's exceptions. So every capture installs loadscope's callback again:
// a store of the same pointer from any thread (FFmpeg's global is a plain pointer; the value
// never differs between loadscope's threads). Messages outside a capture still reach FFmpeg's
// default logger (stderr); PyAV's routing to `logging` does not survive loadscope's decodes.
LogCapture::LogCapture() : previous_(g_capture) {
  av_log_set_callback(&log_callback);
  g_capture = this;
}

LogCapture::~LogCapture() {
  g_capture = previous_;
}

void LogCapture::append(const char* line) {
  std::string s(line);
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  if (s.empty() || text_.size() > 400) return;
  if (!text_.empty()) text_ += "; ";
  text_ += s;
}

}  // namespace loadscope::decode::ffmpeg
