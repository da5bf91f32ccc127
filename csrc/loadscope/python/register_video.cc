// The video decoder on its own: what an open learns, frames at given times (tests, tools).
#include "loadscope/python/binding.h"

#include "loadscope/decode/video/video_decoder.h"

namespace loadscope::binding {

void register_video(py::module_& m) {
  m.def(
      "video_index",
      [](const std::string& path, int stream, bool rotate) {
        // Opens a video as the loader does and returns what it learned (tests, tools).
        decode::VideoDecoder dec;
        decode::VideoInfo info;
        std::vector<int64_t> pts;
        uint64_t bytes_read = 0;
        {
          py::gil_scoped_release release;
          info = naming(path, [&] { return dec.open_file(path, stream, rotate, 1); });
          pts = dec.pts();
          bytes_read = dec.bytes_read();
        }
        py::dict d;
        d["stream"] = info.stream;
        d["width"] = info.width;
        d["height"] = info.height;
        d["rotation"] = info.rotation;
        d["time_base"] = info.time_base;
        d["duration"] = info.duration;
        d["fps"] = info.fps;
        d["header_frames"] = info.header_frames;
        d["codec"] = info.codec;
        d["pts"] = pts;
        d["bytes_read"] = bytes_read;  // by opening and indexing
        return d;
      },
      py::arg("path"), py::arg("stream") = -1, py::arg("rotate") = true);

  m.def(
      "decode_video_frames",
      [](const py::object& source, const std::vector<int64_t>& pts, int height, int width,
         bool channels_last, int stream, bool rotate, bool color_tags, int threads,
         int cuda_device) {
        // Frames shown at the given timestamps, whole frame resized to height x width, through
        // the loader's decoder (tests, tools). source: a path (str) or the file's bytes.
        // cuda_device >= 0: on NVDEC, every frame, else a DecodeError saying why not.
        decode::VideoDecoder dec;
        dec.set_hwaccel(cuda_device);
        std::string data, path;
        const bool in_memory = py::isinstance<py::bytes>(source);
        if (in_memory) {
          data = source.cast<std::string>();
        } else {
          path = source.cast<std::string>();
        }
        const size_t frame = static_cast<size_t>(height) * width * 3;
        std::string out(frame * pts.size(), '\0');
        {
          py::gil_scoped_release release;
          naming(in_memory ? "<bytes>" : path, [&] {
            const auto& info = in_memory
                                   ? dec.open_memory(reinterpret_cast<const uint8_t*>(data.data()),
                                                     data.size(), stream, rotate, threads)
                                   : dec.open_file(path, stream, rotate, threads);
            decode::FrameOutput o;
            o.x1 = info.width;
            o.y1 = info.height;
            o.out_w = width;
            o.out_h = height;
            o.chw = !channels_last;
            o.color_tags = color_tags;
            std::vector<decode::VideoDecoder::Request> requests;
            for (size_t i = 0; i < pts.size(); ++i) {
              requests.push_back({pts[i], reinterpret_cast<uint8_t*>(out.data()) + i * frame, &o});
            }
            dec.decode(requests);
            if (const std::string why = dec.cpu_fallback(); !why.empty()) throw DecodeFailure(why);
          });
        }
        return py::bytes(out);
      },
      py::arg("source"), py::arg("pts"), py::arg("height"), py::arg("width"),
      py::arg("channels_last") = true, py::arg("stream") = -1, py::arg("rotate") = true,
      py::arg("color_tags") = true, py::arg("threads") = 1, py::arg("cuda_device") = -1);

  m.def(
      "video_nvdec_decoder",
      [](const std::string& codec) {
        // The FFmpeg decoder that VideoClip(hwaccel="cuda") uses for `codec` ("h264", "av1"),
        // "" where it falls back to the CPU (tests, tools).
        return decode::VideoDecoder::nvdec_decoder(codec);
      },
      py::arg("codec"));
}

}  // namespace loadscope::binding
