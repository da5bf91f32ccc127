#pragma once
// The fuzz targets' bodies (tests/fuzz/README.md). Each takes arbitrary bytes through one of
// loadscope's input paths the way a sample takes it, and must return normally: bad input may
// only surface as the documented exceptions, which are caught here. Anything else — a crash, a
// sanitizer report, an uncaught exception, a hang — is a bug. The fuzzers (fuzz_main.cc) and
// the regression test replaying saved inputs (tests/cpp/test_fuzz_regressions.cc) share them.

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "loadscope/core/error.h"
#include "loadscope/core/rng.h"
#include "loadscope/decode/audio/audio_decoder.h"
#include "loadscope/decode/ffmpeg/image_decoder.h"
#include "loadscope/decode/video/video_decoder.h"
#include "loadscope/decode/webp/webp_decoder.h"
#include "loadscope/io/file.h"
#include "loadscope/io/manifest.h"
#include "loadscope/io/tar.h"
#include "loadscope/io/tar_index.h"
#include "loadscope/pipeline/clips.h"
#include "loadscope/pipeline/image_field.h"

namespace loadscope::fuzz {

// Images are bounded by max_pixels (Pillow's 178956970 in use), not by time; the fuzzer's cap
// is what an instrumented decode and resample do within its timeout. At 2^24 a 140-byte
// animated WebP whose canvas is 720897x16 (11.5M pixels) took 3.5 s a pass under ASan+UBSan
// (the webp target makes three), against 0.15 s of CPU in the release build: a cost of the
// sanitizers, kept as tests/fuzz/regressions/webp/timeout-canvas-720897x16. (It also keeps a
// claimed 60000x60000 image from eating the fuzzer's memory.)
constexpr int64_t kFuzzMaxPixels = 1 << 21;

// Options from the first byte, so that one input explores crops, DCT scaling and sizes.
inline pipeline::ImageSpec image_spec(uint8_t b) {
  pipeline::ImageSpec spec;
  spec.height = spec.width = 8 + 8 * (b & 3);
  spec.crop = static_cast<pipeline::CropMode>((b >> 2) % 3);
  spec.dct_scaling = (b >> 4) & 1;
  spec.exif = (b >> 5) & 1;
  spec.flip = (b >> 6) & 1 ? 1.0 : 0.0;
  spec.channels_last = (b >> 7) & 1;
  spec.max_pixels = kFuzzMaxPixels;
  return spec;
}

inline void decode_with(const uint8_t* data, size_t size, uint8_t options) {
  const pipeline::ImageSpec spec = image_spec(options);
  std::vector<uint8_t> out(static_cast<size_t>(spec.height) * spec.width * 3);
  Rng rng(1, 2, RngStream::kAugment, size);
  try {
    pipeline::decode_image(data, size, spec, rng, out.data());
  } catch (const DecodeFailure&) {
  } catch (const SampleError&) {
  }
}

// JPEG: the whole image path (sniff, header, EXIF, crop plan, region decode, resample).
inline int jpeg(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  decode_with(data + 1, size - 1, data[0]);
  return 0;
}

// PNG: FFmpeg's PNG decoder directly, then the image path (which also takes BMP, GIF, TIFF).
inline int png(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  try {
    static thread_local decode::FfmpegImageDecoder dec(decode::ImageFormat::kPng);
    dec.decode(data + 1, size - 1);
  } catch (const DecodeFailure&) {
  }
  decode_with(data + 1, size - 1, data[0]);
  return 0;
}

// WebP: libwebp through WebpDecoder directly (headers, EXIF, the whole image and a region),
// then the image path.
inline int webp(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  try {
    static thread_local decode::WebpDecoder dec;
    const decode::WebpInfo info = dec.open(data + 1, size - 1);
    if (static_cast<int64_t>(info.width) * info.height <= kFuzzMaxPixels) {
      dec.decode(decode::Rect{0, 0, info.width, info.height});
      dec.open(data + 1, size - 1);  // one decode per open
      dec.decode(decode::Rect{info.width / 3, info.height / 3, info.width / 2 + 1,
                              info.height / 2 + 1});
    }
  } catch (const DecodeFailure&) {
  }
  decode_with(data + 1, size - 1, data[0]);
  return 0;
}

// A file holding `size` bytes, in memory (memfd), for the readers that take paths.
struct MemFile {
  int fd = -1;
  std::string path;
  MemFile(const uint8_t* data, size_t size) {
    fd = memfd_create("loadscope-fuzz", MFD_CLOEXEC);
    if (fd < 0) return;
    size_t done = 0;
    while (done < size) {
      ssize_t n = ::write(fd, data + done, size - done);
      if (n <= 0) break;
      done += static_cast<size_t>(n);
    }
    path = "/proc/self/fd/" + std::to_string(fd);
  }
  ~MemFile() {
    if (fd >= 0) ::close(fd);
  }
};

// Tar: the sequential reader (plain and gzip), the header scan, indexing and reading every
// indexed member back, and the same bytes parsed as an index file.
inline int tar(const uint8_t* data, size_t size) {
  MemFile f(data, size);
  if (f.fd < 0) return 0;
  try {
    io::TarReader reader(f.path);
    io::TarEntry e;
    while (reader.next(e)) {
    }
  } catch (const ReadFailure&) {
  }
  try {
    io::ShardIndex index = io::index_shard(f.path);
    std::string bytes;
    for (const auto& s : index.samples)
      for (const auto& m : s.members) io::read_range(f.path, m.offset, m.size, bytes);
  } catch (const ReadFailure&) {
  }
  try {  // the same bytes as an index file's text
    io::parse_index(std::string(reinterpret_cast<const char*>(data), size), "fuzz.idx", "fuzz.tar");
  } catch (const ConfigError&) {
  }
  return 0;
}

// Video: demux and index from memory, plan two clips, decode and convert their frames.
inline int video(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  try {
    decode::VideoDecoder dec;
    const decode::VideoInfo& info = dec.open_memory(data + 1, size - 1, -1, true, 1);
    if (static_cast<int64_t>(info.width) * info.height > (1 << 22)) return 0;  // as check_pixels
    pipeline::ClipSpec clip;
    clip.frames = 4;
    clip.stride = 1 + (data[0] & 3);
    clip.clips = 2;
    Rng rng(3, 0, RngStream::kAugment, size);
    const std::vector<int64_t> targets = pipeline::plan_clips(dec.pts(), info.time_base, clip, rng);
    decode::FrameOutput o;
    o.x1 = info.width, o.y1 = info.height;
    o.out_w = o.out_h = 16;
    o.flip = data[0] & 4;
    std::vector<uint8_t> pixels(targets.size() * 16 * 16 * 3);
    std::vector<decode::VideoDecoder::Request> requests;
    for (size_t t = 0; t < targets.size(); ++t) requests.push_back({targets[t], pixels.data() + t * 768, &o});
    dec.decode(requests);
  } catch (const DecodeFailure&) {
  }
  return 0;
}

// Audio: demux from memory, then a window at the start (from open()'s frames), one after a
// seek, and one past the end, each resampled (rate and channels from the options byte).
inline int audio(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  try {
    decode::AudioDecoder dec;
    const decode::AudioInfo& info = dec.open_memory(data + 1, size - 1, -1, true);
    if (info.stream < 0) return 0;
    const int rate = (data[0] & 1) ? 16000 : info.sample_rate;
    const int channels = 1 + ((data[0] >> 1) & 1);
    const int64_t n = 4000;
    std::vector<float> out(static_cast<size_t>(n) * channels);
    dec.read(0, n, rate, channels, out.data());
    const int64_t later = (data[0] >> 2) * 977;  // 0 .. 61551 samples in
    try {
      dec.read(later, n, rate, channels, out.data());
    } catch (const DecodeFailure&) {  // past the real end, or damaged there
    }
    dec.read(-n / 2, n, rate, channels, out.data());  // half before the start: zeros
  } catch (const DecodeFailure&) {
  }
  return 0;
}

// Manifest: the JSON-lines (in parallel chunks) and CSV parsers, raising and skipping, then
// every row made into a sample. First byte: bit 0 CSV, bit 1 skip bad rows, bit 2 a URL root.
inline int manifest(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  io::ManifestOptions o;
  o.manifest = "fuzz";
  o.root = data[0] & 4 ? "http://h/r" : "/r";
  o.skip_bad_rows = data[0] & 2;
  const auto format = data[0] & 1 ? io::ManifestFormat::kCsv : io::ManifestFormat::kJsonl;
  try {
    const io::Manifest m = io::parse_manifest(reinterpret_cast<const char*>(data + 1), size - 1, format, o);
    Sample s;
    for (int64_t r = 0; r < m.table->rows(); ++r) m.table->sample(static_cast<size_t>(r), s);
  } catch (const ConfigError&) {
  }
  return 0;
}

}  // namespace loadscope::fuzz
