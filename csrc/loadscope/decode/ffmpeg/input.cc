#include "loadscope/decode/ffmpeg/input.h"

#include <algorithm>
#include <cstring>

#include "loadscope/core/error.h"
#include "loadscope/io/file.h"

namespace loadscope::decode::ffmpeg {

Input::Input() = default;
Input::~Input() = default;
Input::Input(Input&&) noexcept = default;
Input& Input::operator=(Input&&) noexcept = default;

std::string Input::set_path(const std::string& path) {
  reader = io::open_seekable(path);  // throws ReadFailure
  size = reader->size();
  return path + '\n' + reader->version();
}

void Input::set_memory(const uint8_t* bytes, size_t n) {
  data = bytes;
  size = n;
}

uint64_t Input::fetched() const {
  return reader ? reader->fetched() : memory_read;
}

namespace {

int input_read(void* opaque, uint8_t* buf, int n) {
  auto* in = static_cast<Input*>(opaque);
  if (in->pos >= in->size) return AVERROR_EOF;
  size_t k = static_cast<size_t>(std::min<uint64_t>(in->size - in->pos, static_cast<uint64_t>(n)));
  if (in->skip) {  // the bytes are left as they are: nothing looks at them
    in->pos += k;
    return static_cast<int>(k);
  }
  try {
    if (in->data != nullptr) {
      std::memcpy(buf, in->data + in->pos, k);
      in->memory_read += k;
    } else {
      k = in->reader->read_at(in->pos, buf, k);
      if (k == 0) return AVERROR_EOF;  // the file shrank since it was opened
    }
  } catch (const std::exception& e) {
    in->error = e.what();
    return AVERROR(EIO);
  }
  in->pos += k;
  return static_cast<int>(k);
}

int64_t input_seek(void* opaque, int64_t offset, int whence) {
  auto* in = static_cast<Input*>(opaque);
  const auto size = static_cast<int64_t>(in->size);
  if (whence & AVSEEK_SIZE) return size;
  whence &= ~AVSEEK_FORCE;
  int64_t p = whence == SEEK_SET   ? offset
              : whence == SEEK_CUR ? static_cast<int64_t>(in->pos) + offset
              : whence == SEEK_END ? size + offset
                                   : -1;
  if (p < 0 || p > size) return AVERROR(EINVAL);
  in->pos = static_cast<uint64_t>(p);
  return p;
}

}  // namespace

bool header_states_codecs(const AVFormatContext* fmt) {
  const char* name = fmt->iformat->name;
  return std::strstr(name, "mov") != nullptr || std::strstr(name, "matroska") != nullptr;
}

std::string with_log(std::string what, const LogCapture& log) {
  if (!log.text().empty()) what += " (" + log.text() + ")";
  return what;
}

FormatInputPtr open_input(Input& in, AvioPtr& avio, const char* url, const char* formats,
                          const std::string& what) {
  LogCapture log;
  constexpr int kBuffer = 1 << 16;
  auto* buffer = static_cast<uint8_t*>(av_malloc(kBuffer));
  if (buffer == nullptr) throw std::bad_alloc();
  AVIOContext* io = avio_alloc_context(buffer, kBuffer, 0, &in, &input_read, nullptr, &input_seek);
  if (io == nullptr) {
    av_free(buffer);
    throw std::bad_alloc();
  }
  avio.reset(io);
  AVFormatContext* fmt = avformat_alloc_context();
  if (fmt == nullptr) throw std::bad_alloc();
  fmt->pb = io;
  fmt->flags |= AVFMT_FLAG_CUSTOM_IO;
  AVDictionary* opts = nullptr;
  av_dict_set(&opts, "protocol_whitelist", "file", 0);
  av_dict_set(&opts, "format_whitelist", formats, 0);
  const int rc = avformat_open_input(&fmt, url, nullptr, &opts);  // frees fmt when it fails
  av_dict_free(&opts);
  if (rc < 0) {
    if (!in.error.empty()) throw ReadFailure(in.error);
    const char* article = what == "audio" ? "an " : "a ";
    throw DecodeFailure(with_log(what + ": cannot open (not " + article + what +
                                     " container loadscope reads?): " + error_string(rc),
                                 log));
  }
  return FormatInputPtr(fmt);
}

}  // namespace loadscope::decode::ffmpeg
