// Clip sampling and the video decoder without Python: index facts from the data README, seeks
// that land on the same frames as a sequential decode, memory input equal to file input,
// corrupt files failing with FFmpeg's reason.
#include <algorithm>
#include <cstring>
#include <set>

#include "helpers.h"
#include "loadscope/core/error.h"
#include "loadscope/decode/video/video_decoder.h"
#include "loadscope/decode/video/video_parts.h"
#include "loadscope/pipeline/clips.h"

using namespace loadscope;
using namespace testing;
using decode::VideoDecoder;

namespace {

std::vector<int64_t> cfr(int n, int64_t step = 1001) {
  std::vector<int64_t> pts;
  for (int i = 0; i < n; ++i) pts.push_back(i * step);
  return pts;
}

std::vector<uint8_t> frames(VideoDecoder& dec, const std::vector<int64_t>& targets, int w, int h) {
  decode::FrameOutput out;
  out.x1 = w;
  out.y1 = h;
  out.out_w = w;
  out.out_h = h;
  out.chw = false;
  std::vector<uint8_t> pixels(targets.size() * w * h * 3);
  std::vector<VideoDecoder::Request> req;
  for (size_t i = 0; i < targets.size(); ++i)
    req.push_back({targets[i], pixels.data() + i * w * h * 3, &out});
  dec.decode(req);
  return pixels;
}

}  // namespace

TEST_CASE("clips by stride: span, positions, padding", "[clips]") {
  pipeline::ClipSpec spec;
  spec.frames = 4;
  spec.stride = 3;  // span 10 frames
  const auto pts = cfr(100);
  Rng rng(1);
  spec.position = pipeline::ClipPosition::kUniform;
  spec.clips = 3;
  auto t = pipeline::plan_clips(pts, 1.0 / 30000, spec, rng);
  REQUIRE(t.size() == 12);
  CHECK(t[0] == 0);
  CHECK(t[4] == 45 * 1001);  // (100 - 10) / 2
  CHECK(t[8] == 90 * 1001);  // the last start that fits
  CHECK(t[11] == 99 * 1001);
  for (int k = 0; k < 3; ++k) {
    for (int j = 1; j < 4; ++j) CHECK(t[k * 4 + j] - t[k * 4 + j - 1] == 3 * 1001);
  }
  spec.position = pipeline::ClipPosition::kRandom;
  spec.clips = 1;
  std::set<int64_t> starts;
  for (int i = 0; i < 500; ++i) {
    Rng r(7, 0, RngStream::kAugment, i);
    auto c = pipeline::plan_clips(pts, 1.0 / 30000, spec, r);
    starts.insert(c[0] / 1001);
    CHECK(c.back() / 1001 <= 99);
  }
  CHECK(*starts.begin() == 0);
  CHECK(*starts.rbegin() == 90);  // every start 0..90 is possible
  CHECK(starts.size() == 91);
  // Too short: padded with the last frame, or a failure.
  auto short_pts = cfr(5);
  auto padded = pipeline::plan_clips(short_pts, 1.0 / 30000, spec, rng);
  CHECK(padded == std::vector<int64_t>{0, 3 * 1001, 4 * 1001, 4 * 1001});
  spec.short_video = pipeline::ShortVideo::kFail;
  CHECK_THROWS_WITH(pipeline::plan_clips(short_pts, 1.0 / 30000, spec, rng),
                    Catch::Contains("video too short: 5 frames, a clip spans 10"));
}

TEST_CASE("clips by time show the frame on screen at each sampled time", "[clips]") {
  // Variable frame rate: frames at 0, 40, 70, 130, 140, 200, ... ms.
  std::vector<int64_t> pts = {0, 40, 70, 130, 140, 200, 260, 300, 390, 400, 500};
  pipeline::ClipSpec spec;
  spec.frames = 4;
  spec.fps = 10;  // every 100 ms
  spec.position = pipeline::ClipPosition::kCenter;
  Rng rng(0);
  // The video lasts until 600 ms (its last frame shows for one more step, 100 ms); a clip
  // spans 300 ms, so the room is 300 and the centre start 150: times 150, 250, 350, 450.
  auto t = pipeline::plan_clips(pts, 0.001, spec, rng);
  CHECK(t == std::vector<int64_t>{140, 200, 300, 400});
  // A 3-frame 30 fps video lasts 0.1 s: a 3-frame clip at 20 fps (spanning 0.1 s) fits.
  pipeline::ClipSpec tight;
  tight.frames = 3;
  tight.fps = 20;
  tight.short_video = pipeline::ShortVideo::kFail;
  CHECK(pipeline::plan_clips({0, 1001, 2002}, 1.0 / 30000, tight, rng).size() == 3);
}

TEST_CASE("video index facts match the data README", "[video]") {
  REQUIRE_SHARED_DATA();
  VideoDecoder dec;
  struct Fact {
    const char* path;
    int stream, width, height, rotation;
    size_t frames;
    const char* codec;
  };
  for (const Fact& f : {
           Fact{"torchcodec/test/resources/nasa_13013.mp4", 3, 480, 270, 0, 390, "h264"},
           Fact{"vision/test/assets/videos/R6llTwEh07w.mp4", 0, 340, 256, 0, 303, "h264"},
           Fact{"torchcodec/test/resources/av1_video.mkv", 0, 640, 360, 0, 125, "av1"},
           Fact{"torchcodec/test/resources/h265_video.mp4", 0, 128, 128, 0, 10, "hevc"},
           Fact{"decord/tests/test_data/video_90.mov", 0, 320, 568, 90, 3, "h264"},
           Fact{"imageio/test.webm", 0, 640, 480, 0, 94, "h264"},
       }) {
    INFO(f.path);
    const auto& info = dec.open_file(real(f.path), -1, true, 1);
    CHECK(info.stream == f.stream);
    CHECK(info.width == f.width);
    CHECK(info.height == f.height);
    CHECK(info.rotation == f.rotation);
    CHECK(dec.pts().size() == f.frames);
    CHECK(info.codec == f.codec);
    CHECK(std::is_sorted(dec.pts().begin(), dec.pts().end()));
  }
}

TEST_CASE("seeking decodes the same frames as a sequential decode", "[video]") {
  REQUIRE_SHARED_DATA();
  // B-frames (pts out of decode order) and keyframes at 0 and 240 (torchcodec's test).
  const std::string path = real("torchcodec/test/resources/nasa_13013.mp4");
  VideoDecoder dec;
  dec.open_file(path, -1, true, 1);
  const auto pts = dec.pts();
  std::vector<int64_t> all(pts.begin(), pts.begin() + 260);
  const auto sequential = frames(dec, all, 96, 54);
  const size_t frame = 96 * 54 * 3;
  for (size_t i : {size_t(7), size_t(150), size_t(239), size_t(240), size_t(241), size_t(259)}) {
    INFO("frame " << i);
    dec.open_file(path, -1, true, 1);
    const auto one = frames(dec, {pts[i]}, 96, 54);
    CHECK(std::memcmp(one.data(), sequential.data() + i * frame, frame) == 0);
  }
  // Several clips far apart, in any order, in one call.
  dec.open_file(path, -1, true, 1);
  const auto scattered = frames(dec, {pts[250], pts[3], pts[120], pts[3]}, 96, 54);
  CHECK(std::memcmp(scattered.data(), sequential.data() + 250 * frame, frame) == 0);
  CHECK(std::memcmp(scattered.data() + frame, sequential.data() + 3 * frame, frame) == 0);
  CHECK(std::memcmp(scattered.data() + 2 * frame, sequential.data() + 120 * frame, frame) == 0);
  CHECK(std::memcmp(scattered.data() + 3 * frame, sequential.data() + 3 * frame, frame) == 0);
}

TEST_CASE("in-memory input decodes like the file", "[video]") {
  REQUIRE_SHARED_DATA();
  for (const char* rel : {"decord/examples/flipping_a_pancake.mkv",
                          "vision/test/assets/videos/v_SoccerJuggling_g23_c01.avi"}) {
    INFO(rel);
    const std::string data = read_all(real(rel));
    VideoDecoder a, b;
    a.open_file(real(rel), -1, true, 1);
    b.open_memory(reinterpret_cast<const uint8_t*>(data.data()), data.size(), -1, true, 1);
    REQUIRE(a.pts() == b.pts());
    std::vector<int64_t> t = {a.pts()[5], a.pts()[a.pts().size() / 2], a.pts().back()};
    CHECK(frames(a, t, 64, 48) == frames(b, t, 64, 48));
    CHECK(b.bytes_read() > 0);
  }
}

TEST_CASE("corrupt and truncated videos fail with FFmpeg's reason", "[video]") {
  REQUIRE_SHARED_DATA();
  VideoDecoder dec;
  // An MP4 is indexed from its tables without reading its frames (Note [index from the
  // container's tables]): the damage shows where a clip decodes it.
  dec.open_file(real("decord/tests/test_data/corrupted.mp4"), -1, true, 1);
  CHECK_THROWS_WITH(frames(dec, dec.pts(), 32, 32), Catch::Contains("Invalid NAL unit size"));
  CHECK_THROWS_WITH(dec.open_file(real("torchcodec/test/resources/missing.mp4"), -1, true, 1),
                    Catch::Contains("No such file"));
  const std::string mkv = read_all(real("decord/examples/flipping_a_pancake.mkv"));
  const std::string cut = mkv.substr(0, mkv.size() / 2);
  CHECK_THROWS_WITH(
      dec.open_memory(reinterpret_cast<const uint8_t*>(cut.data()), cut.size(), -1, true, 1),
      Catch::Contains("truncated"));
  const std::string not_video = "this is not a video";
  CHECK_THROWS_AS(dec.open_memory(reinterpret_cast<const uint8_t*>(not_video.data()),
                                  not_video.size(), -1, true, 1),
                  DecodeFailure);
}

TEST_CASE("NVDEC's NV12 frames, made planar on the host, convert to the CPU path's bytes",
          "[video][nvdec]") {
  // What VideoClip(hwaccel="cuda") does with a frame copied back from the GPU, without a GPU:
  // NV12 as swscale interleaves a planar 4:2:0 frame (the reference), made planar again by
  // nv12_to_planar, must be that frame exactly, and convert as it does, at the frame's size
  // (swscale's unscaled converter) and resized. Odd sizes: the last chroma column and row.
  using decode::ffmpeg::FramePtr;
  for (const auto& [w, h] : {std::pair{341, 257}, std::pair{64, 48}}) {
    INFO(w << "x" << h);
    FramePtr yuv{av_frame_alloc()}, nv12{av_frame_alloc()}, back{av_frame_alloc()};
    yuv->format = AV_PIX_FMT_YUV420P, yuv->width = w, yuv->height = h;
    nv12->format = AV_PIX_FMT_NV12, nv12->width = w, nv12->height = h;
    REQUIRE(av_frame_get_buffer(yuv.get(), 0) == 0);
    REQUIRE(av_frame_get_buffer(nv12.get(), 0) == 0);
    uint32_t x = 12345;  // a fixed pseudo-random picture: every byte value, no structure
    for (int p = 0; p < 3; ++p) {
      for (int y = 0; y < (p ? (h + 1) / 2 : h); ++y) {
        for (int i = 0; i < (p ? (w + 1) / 2 : w); ++i) {
          x = x * 1664525u + 1013904223u;
          yuv->data[p][y * yuv->linesize[p] + i] = static_cast<uint8_t>(x >> 24);
        }
      }
    }
    SwsContext* sws = sws_getContext(w, h, AV_PIX_FMT_YUV420P, w, h, AV_PIX_FMT_NV12, SWS_POINT,
                                     nullptr, nullptr, nullptr);
    REQUIRE(sws != nullptr);
    REQUIRE(sws_scale(sws, yuv->data, yuv->linesize, 0, h, nv12->data, nv12->linesize) == h);
    sws_freeContext(sws);
    decode::video_parts::nv12_to_planar(nv12.get(), back.get());
    REQUIRE(back->format == AV_PIX_FMT_YUV420P);
    for (int p = 0; p < 3; ++p) {
      for (int y = 0; y < (p ? (h + 1) / 2 : h); ++y) {
        INFO("plane " << p << " row " << y);
        REQUIRE(std::memcmp(back->data[p] + y * back->linesize[p],
                            yuv->data[p] + y * yuv->linesize[p], p ? (w + 1) / 2 : w) == 0);
      }
    }
    for (const auto& [ow, oh] : {std::pair{w, h}, std::pair{32, 24}}) {
      decode::FrameOutput out;
      out.x1 = w, out.y1 = h, out.out_w = ow, out.out_h = oh;
      decode::ffmpeg::SwsPtr s1, s2;
      std::vector<uint8_t> scratch, a(ow * oh * 3), b(ow * oh * 3);
      decode::video_parts::convert(s1, scratch, yuv.get(), 0, out, a.data());
      decode::video_parts::convert(s2, scratch, back.get(), 0, out, b.data());
      CHECK(a == b);
    }
  }
}
