#pragma once
// Note [the format table]
// Every format loadscope reads, in one place. An image is recognised by its first bytes (never
// by its name) and decoded by the backend its row names; a video or audio file is opened by
// the FFmpeg demuxers its row allows (Note [demuxer whitelist] in ffmpeg/input.h). The file
// extensions and WebDataset member names a field picks its members by come from the same rows,
// and Python reads them (`_native.formats()`), so `IMAGE_MEMBERS`, `VIDEO_EXTENSIONS`,
// `AUDIO_MEMBERS` and the "supported:" messages cannot drift from what decodes. A new image
// format decoded by FFmpeg is a row and its sniff here, plus its decoder enabled in
// scripts/build-ffmpeg.sh (the wheel's FFmpeg has only the decoders it names).

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace loadscope::decode {

enum class ImageFormat {
  kUnknown,
  kJpeg,
  kPng,
  kPngTruncated,
  kGif,
  kBmp,
  kWebp,
  kTiff,
  kPpm,
  kPgm,
  kPbm
};
inline constexpr size_t kImageFormatCount = static_cast<size_t>(ImageFormat::kPbm) + 1;

enum class ImageBackend { kJpeg, kWebp, kFfmpeg };

struct ImageFormatInfo {
  ImageFormat format;
  const char* name;  // in messages
  ImageBackend backend;
  const char* ffmpeg_decoder;  // libavcodec's decoder, for kFfmpeg
  const char* extensions;      // file extensions and member names, space-separated, lower case
  bool (*matches)(const uint8_t* data, size_t size);  // the first bytes say it is this format
};

// The image formats that decode, in the order sniffing tries them.
const std::vector<ImageFormatInfo>& image_formats();
// The row of a format that decodes; std::logic_error for kUnknown and kPngTruncated.
const ImageFormatInfo& image_format(ImageFormat format);

// Recognises a format from its first bytes (never from a file name). kPngTruncated: "\x89PNG"
// with the rest of the 8-byte signature cut short or damaged (reported as such, not unknown).
ImageFormat sniff(const uint8_t* data, size_t size);
const char* format_name(ImageFormat format);
// "JPEG, PNG, ...": every image format that decodes, for messages.
std::string supported_image_formats();

// A container FFmpeg may open: the demuxers allowed for it and the extensions its files carry.
struct ContainerInfo {
  const char* demuxers;          // FFmpeg's names (AVInputFormat::name), comma-separated
  bool video;                    // false: an audio-only file, for the Audio field alone
  const char* video_extensions;  // files a VideoClip reads (an Audio field reads them too)
  const char* audio_extensions;  // files named as audio (.m4a, .opus): an Audio field's only
};
const std::vector<ContainerInfo>& containers();
// The demuxer whitelists: the video containers', and those plus the audio-only files'.
const char* video_demuxers();
const char* audio_demuxers();
// The table's demuxer names the linked libavformat lacks: none for the system's FFmpeg, and none
// for the wheel's, whose build (scripts/build-ffmpeg.sh) enables them (check-wheel asserts it).
std::vector<std::string> missing_demuxers();

}  // namespace loadscope::decode
