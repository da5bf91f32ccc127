// The benchmarks' decode-only ceilings and the codec libraries' versions.
#include "loadscope/python/binding.h"

#include "loadscope/bench/decode_only.h"
#include "loadscope/bench/versions.h"
#include "loadscope/io/remote.h"

namespace loadscope::binding {

void register_bench(py::module_& m) {
  m.def("library_versions", [] {
    py::dict d;
    for (const auto& [name, version] : bench::library_versions()) d[py::str(name)] = version;
    d["libcurl"] = io::remote::library_version();  // io/'s (bench/ does not reach it)
    return d;
  });

  m.def(
      "turbojpeg_decode_only",
      [](const std::vector<std::string>& jpegs, int threads, int repeat) {
        bench::DecodeOnlyResult r;
        {
          py::gil_scoped_release release;
          r = bench::turbojpeg_decode_only(jpegs, threads, repeat);
        }
        return py::make_tuple(r.seconds, r.images, r.failures);
      },
      py::arg("jpegs"), py::arg("threads"), py::arg("repeat") = 1);

  m.def(
      "webp_decode_only",
      [](const std::vector<std::string>& webps, const std::vector<std::array<int, 4>>& crops,
         int threads) {
        if (webps.size() != crops.size()) throw ConfigError("webps and crops differ in length");
        bench::DecodeOnlyResult r;
        {
          py::gil_scoped_release release;
          r = bench::webp_decode_only(webps, crops, threads);
        }
        return py::make_tuple(r.seconds, r.images, r.failures);
      },
      py::arg("webps"), py::arg("crops"), py::arg("threads"));

  m.def(
      "ffmpeg_decode_only",
      [](const std::vector<std::string>& paths, const std::vector<double>& starts, int frames,
         int stride, int threads, int decoder_threads, bool least) {
        if (paths.size() != starts.size()) throw ConfigError("paths and starts differ in length");
        bench::DecodeOnlyResult r;
        {
          py::gil_scoped_release release;
          r = bench::ffmpeg_decode_only(paths, starts, frames, stride, threads, decoder_threads,
                                        least);
        }
        return py::make_tuple(r.seconds, r.images, r.failures, r.frames, r.shown);
      },
      py::arg("paths"), py::arg("starts"), py::arg("frames"), py::arg("stride"), py::arg("threads"),
      py::arg("decoder_threads") = 1, py::arg("least") = false);
}

}  // namespace loadscope::binding
