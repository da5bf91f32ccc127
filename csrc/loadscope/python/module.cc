// The only translation unit that knows Python. It exposes the engine to python/loadscope and
// turns C++ exceptions into loadscope's Python exceptions.
//
// Note [no libtorch here]
// Batches leave C++ as objects implementing the buffer protocol; python/loadscope wraps them
// with torch.frombuffer, which shares the memory and keeps the object (and through it the
// batch block) alive for as long as the tensor lives. Not linking libtorch means the module
// does not depend on the C++ ABI of the torch it runs with: the same build works with
// Debian's torch 1.13 and a pip-installed torch 2.x, and it compiles in seconds.

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <memory>

#include "loadscope/bench/decode_only.h"
#include "loadscope/bench/versions.h"
#include "loadscope/core/engine.h"
#include "loadscope/core/error.h"
#include "loadscope/decode/video/video_decoder.h"
#include "loadscope/io/cache.h"
#include "loadscope/io/faults.h"
#include "loadscope/io/folder.h"
#include "loadscope/io/manifest.h"
#include "loadscope/io/remote.h"
#include "loadscope/io/sources.h"
#include "loadscope/io/tar_index.h"
#include "loadscope/pipeline/fields.h"

namespace py = pybind11;
using namespace loadscope;

namespace {

// A span of a batch block that Python can wrap without copying.
struct BlockView {
  std::shared_ptr<uint8_t> block;
  uint8_t* data;
  size_t bytes;
};

// One loader configuration: a source, what to make of each sample, and its telemetry.
struct Pipeline {
  std::shared_ptr<Source> source;
  std::shared_ptr<pipeline::FieldProcessor> processor;
  std::shared_ptr<telemetry::Telemetry> telemetry;
};

py::dict histogram_dict(const telemetry::HistogramData& h, double unit) {
  py::dict d;
  d["count"] = h.count;
  d["total"] = static_cast<double>(h.sum) * unit;
  d["mean"] = h.mean() * unit;
  d["p50"] = h.quantile(0.50) * unit;
  d["p90"] = h.quantile(0.90) * unit;
  d["p99"] = h.quantile(0.99) * unit;
  d["max"] = static_cast<double>(h.max) * unit;
  return d;
}

py::dict snapshot_dict(const telemetry::Snapshot& s) {
  using namespace telemetry;
  py::dict stages;
  for (int st = 0; st < kStages; ++st) {
    py::dict kinds;
    for (int k = 0; k < kKinds; ++k) {
      const StageTotals& t = s.stages[st][k];
      if (t.items == 0 && t.failures == 0) continue;
      py::dict c;
      c["items"] = t.items;
      c["bytes"] = t.bytes;
      c["failures"] = t.failures;
      c["busy"] = histogram_dict(t.busy, 1e-9);
      kinds[kind_name(static_cast<Kind>(k))] = c;
    }
    if (!kinds.empty()) stages[stage_name(static_cast<Stage>(st))] = kinds;
  }
  py::list threads;
  uint64_t scratch = 0;
  for (const auto& v : s.slots) {
    if (v.role == "consumer") continue;  // its only work is the collate stage
    py::dict t;
    t["role"] = v.role;
    t["cpu_seconds"] = v.cpu;
    t["scratch_bytes"] = v.scratch_bytes;
    scratch += v.scratch_bytes;
    threads.append(t);
  }
  py::dict queue;
  queue["consumer_wait"] = histogram_dict(s.consumer_wait, 1e-9);
  queue["planner_wait"] = histogram_dict(s.producer_block, 1e-9);
  queue["back_pressure_seconds"] = s.back_pressure_seconds;
  queue["prefetch"] = s.prefetch;
  queue["mean_ready"] = s.active_seconds > 0 ? s.ready_integral / s.active_seconds : 0.0;
  queue["mean_in_flight"] = s.active_seconds > 0 ? s.inflight_integral / s.active_seconds : 0.0;
  queue["ready_batch_seconds"] = s.ready_integral;  // integrals: interval means from deltas
  queue["in_flight_batch_seconds"] = s.inflight_integral;
  py::list depth;
  for (const auto& row : s.depth) depth.append(py::make_tuple(row[0], row[1], row[2]));
  queue["depth"] = depth;
  py::dict d;
  d["enabled"] = s.enabled;
  d["uptime"] = s.uptime;
  d["active_seconds"] = s.active_seconds;
  d["stages"] = stages;
  d["threads"] = threads;
  d["queue"] = queue;
  d["batches"] = s.batches;
  d["samples"] = s.samples;
  d["failures"] = s.failures;
  d["warnings"] = s.warnings;
  py::dict memory;
  memory["pool_bytes"] = s.pool_bytes;
  memory["pinned_bytes"] = s.pinned_bytes;
  memory["scratch_bytes"] = scratch;
  memory["source_buffer_bytes"] = s.source_buffer_bytes;
  d["engine_memory"] = memory;
  d["first_batch_after_create"] = s.first_batch_after_create;
  d["first_batch_last_epoch"] = s.first_batch_last_epoch;
  d["spans_dropped"] = s.spans_dropped;
  py::dict video;
  video["clips"] = s.video.clips;
  video["frames_shown"] = s.video.frames_shown;
  video["frames_decoded"] = s.video.frames_decoded;
  video["packets"] = s.video.packets;
  video["seeks"] = s.video.seeks;
  video["open_seconds"] = s.video.open_ns * 1e-9;
  d["video"] = video;
  return d;
}

// Keys and reasons may hold file names that are not UTF-8: decode them the way os.fsdecode
// does (undecodable bytes become surrogates), so a key can always be used to open its file.
py::str fs_str(const std::string& s) {
  PyObject* o =
      PyUnicode_DecodeUTF8(s.data(), static_cast<Py_ssize_t>(s.size()), "surrogateescape");
  if (o == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::str>(o);
}

py::list fs_list(const std::vector<std::string>& items) {
  py::list out;
  for (const auto& s : items) out.append(fs_str(s));
  return out;
}

py::list notes_to_list(const std::vector<SampleNote>& notes) {
  py::list out;
  for (const auto& n : notes) {
    py::dict d;
    d["key"] = fs_str(n.key);
    d["reason"] = fs_str(n.reason);
    d["kind"] = n.kind;
    d["position"] = n.position;
    out.append(d);
  }
  return out;
}

py::object error_class(const char* name) {
  return py::module_::import("loadscope._errors").attr(name);
}

void raise_python(const char* cls_name, py::tuple args) {
  py::object cls = error_class(cls_name);
  py::object instance = cls(*args);
  PyErr_SetObject(cls.ptr(), instance.ptr());
}

pipeline::FieldKind parse_kind(const std::string& kind) {
  if (kind == "int") return pipeline::FieldKind::kInt;
  if (kind == "text") return pipeline::FieldKind::kText;
  if (kind == "json") return pipeline::FieldKind::kJson;
  if (kind == "bytes") return pipeline::FieldKind::kBytes;
  throw ConfigError("unknown field kind '" + kind + "' (allowed: int, text, json, bytes)");
}

pipeline::CropMode parse_crop(const std::string& crop) {
  if (crop == "random_resized") return pipeline::CropMode::kRandomResized;
  if (crop == "center") return pipeline::CropMode::kCenter;
  if (crop == "resize") return pipeline::CropMode::kResize;
  throw ConfigError("unknown crop '" + crop + "' (allowed: random_resized, center, resize)");
}

augment::PixelType pixel_type(const std::string& dtype) {
  if (dtype == "uint8") return augment::PixelType::kUint8;
  if (dtype == "float32") return augment::PixelType::kFloat32;
  if (dtype == "float16") return augment::PixelType::kFloat16;
  if (dtype == "bfloat16") return augment::PixelType::kBFloat16;
  throw ConfigError("unknown dtype '" + dtype + "' (allowed: uint8, float32, float16, bfloat16)");
}

// The frame geometry images and video clips share.
pipeline::ImageSpec geometry(int height, int width, const std::string& crop,
                             std::pair<double, double> scale, std::pair<double, double> ratio,
                             int resize, double flip, bool channels_last, int64_t max_pixels) {
  pipeline::ImageSpec s;
  s.height = height;
  s.width = width;
  s.crop = parse_crop(crop);
  s.scale_min = scale.first;
  s.scale_max = scale.second;
  s.ratio_min = ratio.first;
  s.ratio_max = ratio.second;
  s.resize = resize;
  s.flip = flip;
  s.channels_last = channels_last;
  s.max_pixels = max_pixels;
  return s;
}

}  // namespace

PYBIND11_MODULE(_native, m) {
  m.doc() = "loadscope's native engine (internal; use the loadscope package)";

  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const SampleError& e) {
      const char* cls = e.kind() == FailureKind::kRead     ? "ReadError"
                        : e.kind() == FailureKind::kDecode ? "DecodeError"
                                                           : "FieldError";
      raise_python(cls, py::make_tuple(fs_str(e.key()), fs_str(e.reason())));
    } catch (const BudgetError& e) {
      raise_python("ErrorBudgetExceeded", py::make_tuple(fs_str(e.what())));
    } catch (const ConfigError& e) {
      raise_python("ConfigError", py::make_tuple(fs_str(e.what())));
    } catch (const Error& e) {
      raise_python("LoadscopeError", py::make_tuple(fs_str(e.what())));
    }
  });

  py::class_<BlockView>(m, "BlockView", py::buffer_protocol())
      .def_buffer([](BlockView& v) {
        return py::buffer_info(v.data, 1, py::format_descriptor<uint8_t>::format(), 1,
                               {static_cast<py::ssize_t>(v.bytes)}, {1});
      })
      .def_property_readonly("nbytes", [](const BlockView& v) { return v.bytes; });

  py::class_<pipeline::FieldSpec>(m, "FieldSpec")
      .def_readonly("name", &pipeline::FieldSpec::name)
      .def_readonly("keys", &pipeline::FieldSpec::keys);

  m.def(
      "image_field",
      [](std::string name, std::vector<std::string> keys, int height, int width,
         const std::string& crop, std::pair<double, double> scale, std::pair<double, double> ratio,
         int resize, double flip, bool channels_last, bool exif, bool dct_scaling,
         int64_t max_pixels, bool optional, const std::string& dtype, std::array<double, 3> mean,
         std::array<double, 3> std, double color_p, std::array<double, 8> color_ranges,
         double grayscale, double erase_p, std::array<double, 4> erase_geometry,
         std::array<double, 3> erase_value, std::array<int, 3> randaugment) {
        pipeline::FieldSpec f;
        f.name = std::move(name);
        f.keys = std::move(keys);
        f.kind = pipeline::FieldKind::kImage;
        f.image =
            geometry(height, width, crop, scale, ratio, resize, flip, channels_last, max_pixels);
        f.image.exif = exif;
        f.image.dct_scaling = dct_scaling;
        f.image.dtype = pixel_type(dtype);
        f.image.mean = mean;
        f.image.std = std;
        f.image.color.p = color_p;
        for (int k = 0; k < 4; ++k) {
          f.image.color.lo[k] = color_ranges[2 * k];
          f.image.color.hi[k] = color_ranges[2 * k + 1];
        }
        f.image.grayscale = grayscale;
        f.image.erase.p = erase_p;
        f.image.erase.scale_min = erase_geometry[0];
        f.image.erase.scale_max = erase_geometry[1];
        f.image.erase.ratio_min = erase_geometry[2];
        f.image.erase.ratio_max = erase_geometry[3];
        f.image.erase.value = erase_value;
        f.image.randaugment.num_ops = randaugment[0];
        f.image.randaugment.magnitude = randaugment[1];
        f.image.randaugment.bins = randaugment[2];
        f.optional = optional;
        pipeline::validate({f});
        return f;
      },
      py::arg("name"), py::arg("keys"), py::arg("height"), py::arg("width"), py::arg("crop"),
      py::arg("scale"), py::arg("ratio"), py::arg("resize"), py::arg("flip"),
      py::arg("channels_last"), py::arg("exif"), py::arg("dct_scaling"), py::arg("max_pixels"),
      py::arg("optional"), py::arg("dtype") = "uint8",
      py::arg("mean") = std::array<double, 3>{0, 0, 0},
      py::arg("std") = std::array<double, 3>{1, 1, 1}, py::arg("color_p") = 0.0,
      py::arg("color_ranges") = std::array<double, 8>{1, 1, 1, 1, 1, 1, 0, 0},
      py::arg("grayscale") = 0.0, py::arg("erase_p") = 0.0,
      py::arg("erase_geometry") = std::array<double, 4>{0.02, 0.33, 0.3, 3.3},
      py::arg("erase_value") = std::array<double, 3>{0, 0, 0},
      py::arg("randaugment") = std::array<int, 3>{0, 9, 31});

  // The colour ops on one uint8 image, [3, H, W] or [H, W, 3] (contiguous), in place: for
  // parity tests against torchvision's functional ops. ops: (name, factor) pairs in order,
  // names brightness, contrast, saturation, hue, grayscale.
  m.def("_randaugment_magnitude", [](int op, int magnitude, int bins, int height, int width) {
    return augment::magnitude_of(static_cast<augment::RandOp>(op), magnitude, bins, height, width);
  });
  m.def("_color_ops",
        [](py::buffer image, bool chw, std::vector<std::pair<std::string, double>> ops) {
          py::buffer_info info = image.request(true);
          if (info.itemsize != 1 || info.ndim != 3)
            throw ConfigError("_color_ops: a uint8 [3, H, W] or [H, W, 3] buffer");
          const size_t pixels = static_cast<size_t>(info.size / 3);
          const auto rgb = augment::RgbView::of(static_cast<uint8_t*>(info.ptr), pixels, chw);
          for (const auto& [name, factor] : ops) {
            if (name == "brightness")
              augment::adjust_brightness(rgb, factor);
            else if (name == "contrast")
              augment::adjust_contrast(rgb, factor);
            else if (name == "saturation")
              augment::adjust_saturation(rgb, factor);
            else if (name == "hue")
              augment::adjust_hue(rgb, factor);
            else if (name == "grayscale")
              augment::to_grayscale(rgb);
            else if (name.rfind("ra:", 0) == 0) {  // a RandAugment op by index, with its magnitude
              static std::vector<uint8_t> scratch;
              const int h = chw ? static_cast<int>(info.shape[1]) : static_cast<int>(info.shape[0]);
              const int w = chw ? static_cast<int>(info.shape[2]) : static_cast<int>(info.shape[1]);
              augment::apply_op(static_cast<uint8_t*>(info.ptr), h, w, chw,
                                {static_cast<augment::RandOp>(std::stoi(name.substr(3))), factor},
                                scratch);
            } else
              throw ConfigError("_color_ops: unknown op '" + name + "'");
          }
        });

  m.def(
      "video_field",
      [](std::string name, std::vector<std::string> keys, int frames, int stride, double fps,
         const std::string& position, int clips, const std::string& short_video, int height,
         int width, const std::string& crop, std::pair<double, double> scale,
         std::pair<double, double> ratio, int resize, double flip, bool channels_last, int stream,
         int decoder_threads, bool rotate, bool color_tags, bool optional, int64_t max_pixels,
         std::string start) {
        pipeline::FieldSpec f;
        f.name = std::move(name);
        f.keys = std::move(keys);
        f.kind = pipeline::FieldKind::kVideo;
        f.optional = optional;
        auto& c = f.video.clip;
        c.frames = frames;
        c.stride = stride;
        c.fps = fps;
        if (position == "random") {
          c.position = pipeline::ClipPosition::kRandom;
        } else if (position == "uniform") {
          c.position = pipeline::ClipPosition::kUniform;
        } else if (position == "center") {
          c.position = pipeline::ClipPosition::kCenter;
        } else {
          throw ConfigError("unknown clip position '" + position +
                            "' (allowed: random, uniform, center)");
        }
        c.clips = clips;
        if (short_video == "pad") {
          c.short_video = pipeline::ShortVideo::kPad;
        } else if (short_video == "fail") {
          c.short_video = pipeline::ShortVideo::kFail;
        } else {
          throw ConfigError("unknown short-video policy '" + short_video +
                            "' (allowed: pad, fail)");
        }
        f.video.stream = stream;
        f.video.decoder_threads = decoder_threads;
        f.video.rotate = rotate;
        f.video.color_tags = color_tags;
        f.video.start_key = std::move(start);
        f.image =
            geometry(height, width, crop, scale, ratio, resize, flip, channels_last, max_pixels);
        f.image.dct_scaling = false;
        pipeline::validate({f});
        return f;
      },
      py::arg("name"), py::arg("keys"), py::arg("frames"), py::arg("stride"), py::arg("fps"),
      py::arg("position"), py::arg("clips"), py::arg("short"), py::arg("height"), py::arg("width"),
      py::arg("crop"), py::arg("scale"), py::arg("ratio"), py::arg("resize"), py::arg("flip"),
      py::arg("channels_last"), py::arg("stream"), py::arg("decoder_threads"), py::arg("rotate"),
      py::arg("color_tags"), py::arg("optional"), py::arg("max_pixels") = 178956970,
      py::arg("start") = "");

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
          try {
            info = dec.open_file(path, stream, rotate, 1);
          } catch (const DecodeFailure& e) {
            throw SampleError(path, e.what(), FailureKind::kDecode);
          }
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
         bool channels_last, int stream, bool rotate, bool color_tags, int threads) {
        // Frames shown at the given timestamps, whole frame resized to height x width, through
        // the loader's decoder (tests, tools). source: a path (str) or the file's bytes.
        decode::VideoDecoder dec;
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
          try {
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
          } catch (const DecodeFailure& e) {
            throw SampleError(in_memory ? "<bytes>" : path, e.what(), FailureKind::kDecode);
          }
        }
        return py::bytes(out);
      },
      py::arg("source"), py::arg("pts"), py::arg("height"), py::arg("width"),
      py::arg("channels_last") = true, py::arg("stream") = -1, py::arg("rotate") = true,
      py::arg("color_tags") = true, py::arg("threads") = 1);

  m.def(
      "plain_field",
      [](std::string name, std::vector<std::string> keys, const std::string& kind, bool optional) {
        pipeline::FieldSpec f;
        f.name = std::move(name);
        f.keys = std::move(keys);
        f.kind = parse_kind(kind);
        f.optional = optional;
        return f;
      },
      py::arg("name"), py::arg("keys"), py::arg("kind"), py::arg("optional") = false);

  py::class_<Source, std::shared_ptr<Source>>(m, "Source")
      .def_property_readonly("size", &Source::size);

  py::class_<io::ListSource, Source, std::shared_ptr<io::ListSource>>(m, "ListSource")
      .def(py::init([](const py::list& samples) {
             // samples: [(key, [(name, is_path, value: str|bytes), ...]), ...]
             std::vector<Sample> out;
             out.reserve(samples.size());
             for (const auto& item : samples) {
               auto t = item.cast<py::tuple>();
               Sample s;
               s.key = t[0].cast<std::string>();
               for (const auto& mm : t[1].cast<py::list>()) {
                 auto mt = mm.cast<py::tuple>();
                 Member member;
                 member.name = mt[0].cast<std::string>();
                 member.is_path = mt[1].cast<bool>();
                 (member.is_path ? member.path : member.data) = mt[2].cast<std::string>();
                 s.members.push_back(std::move(member));
               }
               out.push_back(std::move(s));
             }
             return std::make_shared<io::ListSource>(std::move(out));
           }),
           py::arg("samples"));

  // Folders and manifests as columns (io/table.h); rows become samples only in the planner.
  py::class_<io::SampleTable, std::shared_ptr<io::SampleTable>>(m, "SampleTable")
      .def_property_readonly("rows", &io::SampleTable::rows)
      .def_property_readonly("nbytes", &io::SampleTable::bytes)
      .def("digest",
           [](const io::SampleTable& t) {
             py::gil_scoped_release release;
             return t.digest();
           })
      .def(
          "sample",
          [](const io::SampleTable& t, int64_t row) {
            if (row < 0 || row >= t.rows()) throw py::index_error("row out of range");
            Sample s;
            t.sample(static_cast<size_t>(row), s);
            py::list members;
            for (const auto& mm : s.members) {
              members.append(py::make_tuple(fs_str(mm.name), mm.is_path,
                                            py::bytes(mm.is_path ? mm.path : mm.data)));
            }
            return py::make_tuple(py::bytes(s.key), members);
          },
          "Row `row` as (key, [(member, is_path, path or value), ...]), all bytes but the names.");
  m.def(
      "read_manifest",
      [](const std::string& manifest, const std::string& root, const std::string& path_key,
         bool skip_bad_rows, const std::string& cache_dir) {
        io::ManifestOptions o{manifest, root, path_key, skip_bad_rows, cache_dir};
        io::Manifest r;
        {
          py::gil_scoped_release release;
          r = io::read_manifest(o);
        }
        py::dict d;
        d["table"] = std::const_pointer_cast<io::SampleTable>(r.table);
        d["skipped"] = r.skipped;
        d["notes"] = fs_list(r.notes);
        d["cache_path"] = fs_str(r.cache_path);
        d["from_cache"] = r.from_cache;
        d["cache_error"] = fs_str(r.cache_error);
        d["cache_pending"] = r.cache_pending;
        d["source"] = py::bytes(r.source);
        return d;
      },
      py::arg("manifest"), py::arg("root"), py::arg("path_key"), py::arg("skip_bad_rows"),
      py::arg("cache_dir"),
      "Parses a JSONL/CSV manifest into a SampleTable, or maps its current cache file "
      "(io/manifest.h).");
  m.def(
      "scan_folder",
      [](const std::string& root, const std::vector<std::string>& extensions,
         const std::string& labels) {
        io::FolderScan r;
        {
          py::gil_scoped_release release;
          r = io::scan_folder(root, extensions, labels);
        }
        py::dict d;
        d["table"] = std::const_pointer_cast<io::SampleTable>(r.table);
        d["labels"] = r.labels;
        d["classes"] = fs_list(r.classes);
        d["ignored_files"] = r.ignored_files;
        return d;
      },
      py::arg("root"), py::arg("extensions"), py::arg("labels"),
      "Scans a folder like torchvision's ImageFolder into a SampleTable (io/folder.h).");
  py::class_<io::TableSource, Source, std::shared_ptr<io::TableSource>>(m, "TableSource")
      .def(py::init([](const std::shared_ptr<io::SampleTable>& t) {
             return std::make_shared<io::TableSource>(t);
           }),
           py::arg("table"));

  py::class_<io::TarSource, Source, std::shared_ptr<io::TarSource>>(m, "TarSource")
      .def(py::init<std::vector<std::string>, size_t>(), py::arg("shards"),
           py::arg("shuffle_buffer"))
      .def_property_readonly("bytes_read", &io::TarSource::bytes_read);

  // Shard indexes (tar_index.h): made by scanning headers or read from `<shard>.idx`.
  py::class_<io::ShardIndex, std::shared_ptr<io::ShardIndex>>(m, "ShardIndex")
      .def_property_readonly("path", [](const io::ShardIndex& i) { return fs_str(i.path); })
      .def_readonly("tar_bytes", &io::ShardIndex::tar_bytes)
      .def_property_readonly("samples", [](const io::ShardIndex& i) { return i.samples.size(); })
      .def_property_readonly("member_bytes", &io::ShardIndex::member_bytes)
      .def("keys",
           [](const io::ShardIndex& i) {
             std::vector<std::string> keys;
             for (const auto& s : i.samples) keys.push_back(s.key);
             return fs_list(keys);
           })
      .def("members",
           [](const io::ShardIndex& i, size_t k) {
             py::list out;
             for (const auto& mm : i.samples.at(k).members)
               out.append(py::make_tuple(mm.name, mm.offset, mm.size));
             return out;
           })
      .def(
          "write",
          [](const io::ShardIndex& i, const std::string& path) {
            try {
              io::write_index(i, path);
            } catch (const ReadFailure& e) {
              throw SampleError(path, e.what(), FailureKind::kRead);
            }
          },
          py::call_guard<py::gil_scoped_release>());
  // A shard that cannot be indexed is a ReadError naming it.
  m.def(
      "index_shard",
      [](const std::string& tar_path) {
        try {
          return std::make_shared<io::ShardIndex>(io::index_shard(tar_path));
        } catch (const ReadFailure& e) {
          throw SampleError(tar_path, e.what(), FailureKind::kRead);
        }
      },
      py::arg("tar_path"), py::call_guard<py::gil_scoped_release>(),
      "Indexes a tar shard by reading its headers only.");
  m.def(
      "read_index",
      [](const std::string& idx_path, const std::string& tar_path) {
        try {
          return std::make_shared<io::ShardIndex>(io::read_index(idx_path, tar_path));
        } catch (const ReadFailure& e) {
          throw SampleError(idx_path, e.what(), FailureKind::kRead);
        }
      },
      py::arg("idx_path"), py::arg("tar_path"), py::call_guard<py::gil_scoped_release>(),
      "Reads `<shard>.idx`, checked against the shard's size and fingerprint (ConfigError if stale "
      "or damaged).");

  py::class_<io::IndexedTarSource, Source, std::shared_ptr<io::IndexedTarSource>>(
      m, "IndexedTarSource")
      .def(py::init([](const std::vector<std::shared_ptr<io::ShardIndex>>& shards,
                       size_t shuffle_buffer) {
             return std::make_shared<io::IndexedTarSource>(
                 std::vector<std::shared_ptr<const io::ShardIndex>>(shards.begin(), shards.end()),
                 shuffle_buffer);
           }),
           py::arg("shards"), py::arg("shuffle_buffer"));

  m.def(
      "_forked_during_epoch", [](bool value) { forked_during_epoch().store(value); },
      py::arg("value") = true,
      "Marks this process as forked while an epoch ran: samples run on the planner thread.");
  m.def("_is_forked_during_epoch", [] { return forked_during_epoch().load(); });

  // Test hook (tests/python/test_faults.py): [(path substring, "eio"|"short"|"vanished", times)].
  m.def(
      "_set_read_faults",
      [](const std::vector<std::tuple<std::string, std::string, int64_t>>& faults) {
        std::vector<io::ReadFault> out;
        for (const auto& [match, kind, times] : faults) {
          io::ReadFault f;
          f.match = match;
          f.times = times;
          if (kind == "eio") {
            f.kind = io::FaultKind::kIoError;
          } else if (kind == "short") {
            f.kind = io::FaultKind::kShortRead;
          } else if (kind == "vanished") {
            f.kind = io::FaultKind::kVanished;
          } else {
            throw ConfigError("fault kind '" + kind + "': allowed are 'eio', 'short', 'vanished'");
          }
          out.push_back(std::move(f));
        }
        io::set_read_faults(std::move(out));
      },
      py::arg("faults"));

  m.def(
      "epoch_geometry",
      [](int64_t n, int64_t batch, int64_t row, bool drop_last) {
        EpochGeometry g(n, batch, row, drop_last);
        return py::make_tuple(g.batches(), g.length(), g.padding());
      },
      py::arg("n"), py::arg("batch"), py::arg("row"), py::arg("drop_last"),
      "(batches of all ranks, samples drawn, padded samples) of an epoch of n samples (see "
      "EpochGeometry).");

  py::class_<io::MixSource, Source, std::shared_ptr<io::MixSource>>(m, "MixSource")
      .def(py::init<std::vector<std::shared_ptr<Source>>, std::vector<double>, int64_t>(),
           py::arg("sources"), py::arg("weights"), py::arg("samples_per_epoch"));

  py::class_<Batch>(m, "Batch")
      .def_readonly("index", &Batch::index)
      .def_readonly("size", &Batch::size)
      .def_property_readonly("keys", [](const Batch& b) { return fs_list(b.keys); })
      .def_readonly("positions", &Batch::positions)
      .def_property_readonly("skipped", [](const Batch& b) { return notes_to_list(b.skipped); })
      .def_property_readonly("warnings", [](const Batch& b) { return notes_to_list(b.warnings); })
      .def("fixed",
           [](const Batch& b, size_t slot) {
             if (slot >= b.layout->fixed.size()) throw py::index_error("no such fixed field");
             return BlockView{b.block, b.fixed_data(slot),
                              b.layout->fixed[slot].bytes_per_sample * b.size};
           })
      .def(
          "strings",
          [](const Batch& b, size_t slot, bool as_bytes) {
            if (slot >= b.strings.size()) throw py::index_error("no such string field");
            py::list out;
            for (const auto& s : b.strings[slot]) {
              if (as_bytes) {
                out.append(py::bytes(s));
              } else {
                out.append(py::str(s));  // validated UTF-8 by the engine
              }
            }
            return out;
          },
          py::arg("slot"), py::arg("as_bytes"));

  py::class_<EpochRun, std::shared_ptr<EpochRun>>(m, "EpochRun")
      .def(
          "next",
          [](EpochRun& run, int timeout_ms) -> py::object {
            std::unique_ptr<Batch> batch;
            EpochRun::Status status;
            {
              py::gil_scoped_release release;
              status = run.next(batch, std::chrono::milliseconds(timeout_ms));
            }
            if (status == EpochRun::Status::kTimeout) return py::str("timeout");
            if (status == EpochRun::Status::kEnd) return py::none();
            return py::cast(std::move(batch));
          },
          py::arg("timeout_ms"))
      .def("stop", &EpochRun::stop, py::call_guard<py::gil_scoped_release>())
      .def("stats", [](const EpochRun& run) {
        EpochStats s = run.stats();
        py::dict d;
        d["batches"] = s.batches;
        d["samples"] = s.samples;
        d["failures"] = s.failures;
        d["warnings"] = s.warnings;
        d["bytes_read"] = s.bytes_read;
        d["process_seconds"] = s.process_seconds;
        d["skipped"] = notes_to_list(s.skipped);
        d["warning_notes"] = notes_to_list(s.warning_notes);
        return d;
      });

  py::class_<telemetry::Histogram>(m, "Histogram")
      .def(py::init<>())
      .def(
          "record",
          [](telemetry::Histogram& h, int64_t v) {
            h.record(v < 0 ? 0 : static_cast<uint64_t>(v));
          },
          py::arg("value"))
      .def(
          "summary",
          [](const telemetry::Histogram& h, double unit) { return histogram_dict(h.data(), unit); },
          py::arg("unit") = 1e-9);

  m.def(
      "process_stats",
      [](bool pss) {
        const telemetry::ProcessStats p = telemetry::read_process_stats(pss);
        py::dict d;
        auto opt = [](int64_t v) -> py::object {
          if (v < 0) return py::none();
          return py::int_(v);
        };
        d["rss"] = opt(p.rss);
        d["pss"] = opt(p.pss);
        d["rss_peak"] = opt(p.rss_peak);
        d["cgroup_current"] = opt(p.cgroup_current);
        d["cgroup_peak"] = opt(p.cgroup_peak);
        d["mem_available"] = opt(p.mem_available);
        d["cpu_user"] = p.cpu_user;
        d["cpu_system"] = p.cpu_system;
        d["io_rchar"] = opt(p.io_rchar);
        d["io_read_bytes"] = opt(p.io_read_bytes);
        d["io_syscr"] = opt(p.io_syscr);
        d["threads"] = p.threads;
        return d;
      },
      py::arg("pss") = true);
  // Object storage (io/remote.h). A failure is a ReadError naming the URL (redacted).
  auto remote_call = [](const std::string& url, auto&& fn) {
    try {
      return fn();
    } catch (const ReadFailure& e) {
      throw SampleError(io::remote::redact(url), e.what(), FailureKind::kRead);
    }
  };
  m.def("is_url", &io::remote::is_url, py::arg("name"));
  m.def("redact_url", &io::remote::redact, py::arg("url"));
  m.def(
      "remote_stat",
      [remote_call](const std::string& url) {
        const auto info = remote_call(url, [&] {
          py::gil_scoped_release release;
          return io::remote::stat(url);
        });
        return py::make_tuple(info.size, info.etag);
      },
      py::arg("url"), "HEAD: (size, etag).");
  m.def(
      "remote_probe",
      [remote_call](const std::string& url, bool absent_if_denied) -> py::object {
        io::remote::ObjectInfo info;
        try {
          py::gil_scoped_release release;
          info = io::remote::stat(url);
        } catch (const io::remote::HttpError& e) {
          // Not there: a 404 of the key (a missing bucket is an error worth reporting), or a
          // 403 AccessDenied where the caller knows S3 hides missing keys from roles that may
          // not list the bucket.
          if ((e.status() == 404 && e.code() != "NoSuchBucket") ||
              (absent_if_denied && e.status() == 403 && e.code() == "AccessDenied")) {
            return py::none();
          }
          throw SampleError(io::remote::redact(url), e.what(), FailureKind::kRead);
        } catch (const ReadFailure& e) {
          throw SampleError(io::remote::redact(url), e.what(), FailureKind::kRead);
        }
        return py::make_tuple(info.size, info.etag);
      },
      py::arg("url"), py::arg("absent_if_denied") = false,
      "HEAD: (size, etag), or None when the object does not exist; other failures are a "
      "ReadError.");
  m.def(
      "read_bytes",
      [remote_call](const std::string& path, uint64_t offset, int64_t length,
                    const std::string& etag) {
        if (length < 0 && offset != 0) throw ConfigError("read_bytes: an offset needs a length");
        std::string out;
        remote_call(path, [&] {
          py::gil_scoped_release release;
          if (!etag.empty())
            return io::remote::get(path, offset, length, out, etag);  // pinned to that version
          return length < 0 ? io::read_file(path, out)
                            : io::read_range(path, offset, static_cast<uint64_t>(length), out);
        });
        return py::bytes(out);
      },
      py::arg("path"), py::arg("offset") = 0, py::arg("length") = -1, py::arg("etag") = "",
      "A whole file or object, or a byte range of it (a local path or a URL); etag: an object that "
      "no longer has it is an error.");
  m.def("remote_reload_environment", &io::remote::reload_environment,
        "Re-reads AWS_* and LOADSCOPE_REMOTE_* (call from the thread that changes os.environ).");
  m.def(
      "remote_put_file",
      [remote_call](const std::string& url, const std::string& path) {
        remote_call(url, [&] {
          py::gil_scoped_release release;
          io::remote::put_file(url, path);
          return 0;
        });
      },
      py::arg("url"), py::arg("path"), "Uploads a local file (read as it is sent).");
  m.def(
      "remote_list",
      [remote_call](const std::string& prefix) {
        return remote_call(prefix, [&] {
          py::gil_scoped_release release;
          return io::remote::list(prefix);
        });
      },
      py::arg("prefix"), "The keys under an s3:// prefix, as sorted s3:// URLs.");
  m.def("remote_environment", [] {
    py::dict d;
    d["s3_endpoint"] = io::remote::s3_endpoint();
    d["s3_region"] = io::remote::s3_region();
    d["s3_credentials"] = io::remote::credentials_source();
    const auto o = io::remote::options();
    d["max_attempts"] = o.max_attempts;
    d["stall_seconds"] = o.stall_seconds;
    d["ca_bundle"] = o.ca_bundle;
    return d;
  });
  m.def(
      "remote_configure",
      [](int max_attempts, double backoff_base, double backoff_cap, double stall_seconds,
         double connect_timeout) {
        io::remote::Options o = io::remote::options();
        o.max_attempts = max_attempts;
        o.backoff_base = backoff_base;
        o.backoff_cap = backoff_cap;
        o.stall_seconds = stall_seconds;
        o.connect_timeout = connect_timeout;
        io::remote::configure(o);
      },
      py::arg("max_attempts"), py::arg("backoff_base"), py::arg("backoff_cap"),
      py::arg("stall_seconds"), py::arg("connect_timeout"));
  m.def(
      "remote_configure_ca",
      [](const std::string& ca_bundle) {
        io::remote::Options o = io::remote::options();
        o.ca_bundle = ca_bundle;
        o.ca_bundle_set = true;
        io::remote::configure(o);
      },
      py::arg("ca_bundle"), "The CA bundle TLS peers are verified against (empty: the system's).");
  m.def("network_stats", [] {
    const io::remote::Stats st = io::remote::stats();
    py::dict d;
    d["requests"] = st.requests;
    d["bytes"] = st.bytes;
    d["failures"] = st.failures;
    d["retries_server"] = st.retries_server;
    d["retries_network"] = st.retries_network;
    d["resumed"] = st.resumed;
    d["busy_s"] = static_cast<double>(st.busy_ns) * 1e-9;
    const io::cache::Stats c = io::cache::stats();
    d["cache_hits"] = c.hits;
    d["cache_misses"] = c.misses;
    d["cache_evictions"] = c.evictions;
    d["cache_bytes_fetched"] = c.bytes_fetched;
    d["first_byte"] = histogram_dict(st.first_byte_ns, 1e-9);
    d["request"] = histogram_dict(st.request_ns, 1e-9);
    return d;
  });
  m.def("reset_network_stats", [] {
    io::remote::reset_stats();
    io::cache::reset_stats();
  });
  m.def(
      "remote_cache",
      [](const std::string& dir, uint64_t limit) {
        io::cache::configure(io::cache::Settings{dir, limit});
      },
      py::arg("dir"), py::arg("limit") = 0,
      "The node-local cache of remote objects (io/cache.h); dir='' turns it off. Process-wide.");
  m.def("remote_cache_settings", [] {
    const auto s = io::cache::settings();
    return py::make_tuple(s.dir, s.limit);
  });

  m.def("now_ns", [] { return telemetry::now_ns(); });
  m.def("library_versions", [] {
    py::dict d;
    for (const auto& [name, version] : bench::library_versions()) d[py::str(name)] = version;
    return d;
  });

  py::class_<Pipeline>(m, "Pipeline")
      .def(py::init([](std::shared_ptr<Source> source, std::vector<pipeline::FieldSpec> fields,
                       bool telemetry) {
             return Pipeline{std::move(source),
                             std::make_shared<pipeline::FieldProcessor>(std::move(fields)),
                             std::make_shared<telemetry::Telemetry>(telemetry)};
           }),
           py::arg("source"), py::arg("fields"), py::arg("telemetry") = true)
      .def(
          "telemetry_snapshot",
          [](const Pipeline& p, bool depth) { return snapshot_dict(p.telemetry->snapshot(depth)); },
          py::arg("depth") = false)
      .def("take_trace_depth",
           [](Pipeline& p) {
             py::list out;
             for (const auto& row : p.telemetry->take_trace_depth())
               out.append(py::make_tuple(row[0], row[1], row[2]));
             return out;
           })
      .def("telemetry_created_ns", [](const Pipeline& p) { return p.telemetry->created_ns(); })
      .def(
          "set_tracing",
          [](Pipeline& p, bool on, size_t max_spans) { p.telemetry->set_tracing(on, max_spans); },
          py::arg("on"), py::arg("max_spans") = 500000)
      .def("take_spans",
           [](Pipeline& p) {
             py::list out;
             for (auto& [role, spans] : p.telemetry->take_spans()) {
               py::list items;
               for (const auto& sp : spans)
                 items.append(py::make_tuple(sp.name, sp.start_ns, sp.dur_ns, sp.arg));
               out.append(py::make_tuple(role, items));
             }
             return out;
           })
      .def("slots",
           [](const Pipeline& p, size_t i) {
             const auto& sl = p.processor->slots(i);
             return py::make_tuple(sl.fixed, sl.strings);
           })
      .def(
          "start",
          [](Pipeline& p, int threads, int batch_size, int prefetch, bool drop_last,
             const std::string& on_error, int64_t max_errors, double max_error_rate, uint64_t seed,
             int64_t epoch, bool shuffle, int64_t batch_offset, int64_t batch_stride, int64_t row,
             int64_t start_batch, uintptr_t pin, uintptr_t unpin) {
            EngineOptions o;
            o.threads = threads;
            o.batch_size = batch_size;
            o.prefetch = prefetch;
            o.drop_last = drop_last;
            if (on_error == "raise") {
              o.on_error = ErrorPolicy::kRaise;
            } else if (on_error == "skip") {
              o.on_error = ErrorPolicy::kSkip;
            } else {
              throw ConfigError("on_error must be 'raise' or 'skip'");
            }
            o.max_errors = max_errors;
            o.max_error_rate = max_error_rate;
            o.order = EpochOrder{seed, epoch, shuffle};
            o.batch_offset = batch_offset;
            o.batch_stride = batch_stride;
            o.row = row;
            o.start_batch = start_batch;
            EpochGeometry(p.source->size(), batch_size, row, drop_last);  // fails early, here
            // Addresses of cudaHostRegister / cudaHostUnregister, found by Python (or 0).
            o.pin.pin = reinterpret_cast<int (*)(void*, size_t, unsigned)>(pin);
            o.pin.unpin = reinterpret_cast<int (*)(void*)>(unpin);
            auto run = std::make_shared<EpochRun>(p.source, p.processor, o, p.telemetry);
            run->start();
            return run;
          },
          py::arg("threads"), py::arg("batch_size"), py::arg("prefetch"), py::arg("drop_last"),
          py::arg("on_error"), py::arg("max_errors"), py::arg("max_error_rate"), py::arg("seed"),
          py::arg("epoch"), py::arg("shuffle"), py::arg("batch_offset"), py::arg("batch_stride"),
          py::arg("row") = 1, py::arg("start_batch") = 0, py::arg("pin") = 0, py::arg("unpin") = 0);

  m.def(
      "decode_image",
      [](const py::bytes& data, const pipeline::FieldSpec& field, uint64_t seed, int64_t epoch,
         int64_t position) {
        // One image through the same path as the loader (tests, debugging).
        std::string bytes = data;
        const auto& spec = field.image;
        std::string out(static_cast<size_t>(spec.height) * spec.width * 3, '\0');
        std::string warning;
        {
          py::gil_scoped_release release;
          Rng rng(seed, static_cast<uint64_t>(epoch), RngStream::kAugment,
                  static_cast<uint64_t>(position));
          try {
            warning =
                pipeline::decode_image(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(),
                                       spec, rng, reinterpret_cast<uint8_t*>(out.data()));
          } catch (const DecodeFailure& e) {
            throw SampleError("<bytes>", e.what(), FailureKind::kDecode);
          }
        }
        return py::make_tuple(py::bytes(out), warning);
      },
      py::arg("data"), py::arg("field"), py::arg("seed") = 0, py::arg("epoch") = 0,
      py::arg("position") = 0);

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
