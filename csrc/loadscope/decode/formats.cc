#include "loadscope/decode/formats.h"

extern "C" {
#include <libavformat/avformat.h>
}

#include <algorithm>
#include <cstring>
#include <set>
#include <sstream>
#include <stdexcept>

namespace loadscope::decode {

namespace {

const uint8_t kPngSignature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};

bool is_jpeg(const uint8_t* d, size_t n) {
  return n >= 3 && d[0] == 0xFF && d[1] == 0xD8 && d[2] == 0xFF;
}
bool is_png(const uint8_t* d, size_t n) {
  return n >= 8 && std::memcmp(d, kPngSignature, 8) == 0;
}
bool is_gif(const uint8_t* d, size_t n) {
  return n >= 6 && (std::memcmp(d, "GIF87a", 6) == 0 || std::memcmp(d, "GIF89a", 6) == 0);
}
bool is_bmp(const uint8_t* d, size_t n) {
  return n >= 2 && d[0] == 'B' && d[1] == 'M';
}
bool is_webp(const uint8_t* d, size_t n) {
  return n >= 12 && std::memcmp(d, "RIFF", 4) == 0 && std::memcmp(d + 8, "WEBP", 4) == 0;
}
bool is_tiff(const uint8_t* d, size_t n) {
  return n >= 4 && (std::memcmp(d, "II*\0", 4) == 0 || std::memcmp(d, "MM\0*", 4) == 0);
}
// Netpbm: "P" and the type's digit (plain text, then raw), then whitespace (netpbm's own rule).
bool is_pnm(const uint8_t* d, size_t n, char text, char raw) {
  return n >= 3 && d[0] == 'P' && (d[1] == text || d[1] == raw) &&
         (d[2] == ' ' || d[2] == '\t' || d[2] == '\n' || d[2] == '\r');
}
bool is_ppm(const uint8_t* d, size_t n) {
  return is_pnm(d, n, '3', '6');
}
bool is_pgm(const uint8_t* d, size_t n) {
  return is_pnm(d, n, '2', '5');
}
bool is_pbm(const uint8_t* d, size_t n) {
  return is_pnm(d, n, '1', '4');
}

}  // namespace

const std::vector<ImageFormatInfo>& image_formats() {
  // Member names are tried in this order when a sample holds several images: torchvision's
  // IMG_EXTENSIONS order first (jpg jpeg png ppm bmp pgm tif tiff webp), then the rest.
  static const std::vector<ImageFormatInfo> rows = {
      {ImageFormat::kJpeg, "JPEG", ImageBackend::kJpeg, nullptr, "jpg jpeg", is_jpeg},
      {ImageFormat::kPng, "PNG", ImageBackend::kFfmpeg, "png", "png", is_png},
      {ImageFormat::kPpm, "PPM", ImageBackend::kFfmpeg, "ppm", "ppm pnm", is_ppm},
      {ImageFormat::kBmp, "BMP", ImageBackend::kFfmpeg, "bmp", "bmp", is_bmp},
      {ImageFormat::kPgm, "PGM", ImageBackend::kFfmpeg, "pgm", "pgm", is_pgm},
      {ImageFormat::kTiff, "TIFF", ImageBackend::kFfmpeg, "tiff", "tif tiff", is_tiff},
      {ImageFormat::kWebp, "WebP", ImageBackend::kWebp, nullptr, "webp", is_webp},
      {ImageFormat::kGif, "GIF", ImageBackend::kFfmpeg, "gif", "gif", is_gif},
      {ImageFormat::kPbm, "PBM", ImageBackend::kFfmpeg, "pbm", "pbm", is_pbm},
  };
  return rows;
}

const ImageFormatInfo& image_format(ImageFormat format) {
  for (const auto& row : image_formats()) {
    if (row.format == format) return row;
  }
  throw std::logic_error(std::string("image_format: no decoder for ") + format_name(format));
}

ImageFormat sniff(const uint8_t* d, size_t n) {
  for (const auto& row : image_formats()) {
    if (row.matches(d, n)) return row.format;
  }
  // A PNG whose 8-byte signature is cut short or damaged after "\x89PNG".
  if (n > 0 && std::memcmp(d, kPngSignature, std::min<size_t>(n, 4)) == 0)
    return ImageFormat::kPngTruncated;
  return ImageFormat::kUnknown;
}

const char* format_name(ImageFormat format) {
  if (format == ImageFormat::kPngTruncated) return "PNG (damaged signature)";
  for (const auto& row : image_formats()) {
    if (row.format == format) return row.name;
  }
  return "unknown";
}

std::string supported_image_formats() {
  std::string out;
  for (const auto& row : image_formats()) out += (out.empty() ? "" : ", ") + std::string(row.name);
  return out;
}

const std::vector<ContainerInfo>& containers() {
  // Extensions in the order a field tries members; containers without one are still opened
  // when a file or member is named as a video (a raw .h264 stream named "mp4" is probed).
  static const std::vector<ContainerInfo> rows = {
      {"mov,mp4,m4a,3gp,3g2,mj2", true, "mp4 m4v mov 3gp", "m4a"},
      {"matroska,webm", true, "mkv webm", ""},
      {"avi", true, "avi", ""},
      {"mpeg", true, "mpg mpeg", ""},
      {"mpegts", true, "ts mts m2ts", ""},
      {"flv", true, "flv", ""},
      {"ogg", true, "ogv", "ogg opus oga"},
      {"asf", true, "wmv", ""},
      {"mpegvideo,ivf,h264,hevc,m4v,mxf,nut,rm,yuv4mpegpipe,dv", true, "", ""},
      {"wav", false, "", "wav"},
      {"w64", false, "", "w64"},
      {"mp3", false, "", "mp3"},
      {"flac", false, "", "flac"},
      {"aac", false, "", "aac"},
      {"aiff", false, "", "aiff aif"},
      {"caf", false, "", "caf"},
      {"au", false, "", "au"},
  };
  return rows;
}

namespace {
std::string join_demuxers(bool audio) {
  std::string out;
  for (const auto& row : containers()) {
    if (row.video || audio) out += (out.empty() ? "" : ",") + std::string(row.demuxers);
  }
  return out;
}
}  // namespace

const char* video_demuxers() {
  static const std::string list = join_demuxers(false);
  return list.c_str();
}

const char* audio_demuxers() {
  static const std::string list = join_demuxers(true);
  return list.c_str();
}

std::vector<std::string> missing_demuxers() {
  std::set<std::string> have;  // every name of every demuxer ("mov,mp4,...": six names)
  void* it = nullptr;
  while (const AVInputFormat* f = av_demuxer_iterate(&it)) {
    std::istringstream names(f->name);
    for (std::string n; std::getline(names, n, ',');) have.insert(n);
  }
  std::vector<std::string> out;
  std::istringstream wanted(audio_demuxers());
  for (std::string n; std::getline(wanted, n, ',');) {
    if (!have.count(n)) out.push_back(n);
  }
  return out;
}

}  // namespace loadscope::decode
