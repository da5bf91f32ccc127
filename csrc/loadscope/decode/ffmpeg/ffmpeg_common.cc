#include "loadscope/decode/ffmpeg/ffmpeg_common.h"

#include <cstdarg>
#include <cstdio>
#include <mutex>

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

LogCapture::LogCapture() : previous_(g_capture) {
  static std::once_flag once;
  std::call_once(once, [] { av_log_set_callback(&log_callback); });
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
