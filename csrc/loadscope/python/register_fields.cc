// Field declarations (Image, VideoClip, Int, Text, Json, Bytes) and one-image decodes for tests.
#include "loadscope/python/binding.h"

#include <sstream>

#include "loadscope/augment/color.h"
#include "loadscope/augment/ops.h"
#include "loadscope/augment/randaugment.h"
#include "loadscope/core/rng.h"
#include "loadscope/decode/formats.h"
#include "loadscope/decode/limits.h"
#include "loadscope/pipeline/audio_field.h"
#include "loadscope/pipeline/fields.h"
#include "loadscope/pipeline/image_field.h"
#include "loadscope/pipeline/plain_fields.h"
#include "loadscope/pipeline/video_field.h"

namespace loadscope::binding {

namespace {

pipeline::PlainKind parse_kind(const std::string& kind) {
  if (kind == "int") return pipeline::PlainKind::kInt;
  if (kind == "text") return pipeline::PlainKind::kText;
  if (kind == "json") return pipeline::PlainKind::kJson;
  if (kind == "bytes") return pipeline::PlainKind::kBytes;
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

void register_fields(py::module_& m) {
  // Pillow's decompression-bomb limit, declared once (pipeline::ImageSpec): the Python fields'
  // default.
  m.attr("DEFAULT_MAX_PIXELS") = pipeline::ImageSpec{}.max_pixels;

  m.def(
      "option_bounds",
      [] {
        py::dict d;
        for (const auto& b : pipeline::kIntBounds) d[b.name] = py::make_tuple(b.min, b.max);
        return d;
      },
      "{option: (min, max)}: the integer options' ranges the field kinds enforce "
      "(pipeline/field.h).");
  m.def(
      "decode_limits",
      [] {
        py::dict d;
        d["sample_rate"] = decode::kMaxSampleRate;
        d["channels"] = decode::kMaxChannels;
        d["resample_ratio"] = decode::kMaxResampleRatio;
        d["video_pixels"] = decode::kMaxVideoPixels;
        d["video_side"] = decode::kMaxVideoSide;
        return d;
      },
      "What a header may claim before anything is decoded (decode/limits.h): audio sample rate "
      "and channels, the resampling ratio either way, video frame pixels and side.");
  m.def(
      "formats",
      [] {
        auto words = [](const char* list) {
          py::list out;
          std::istringstream in(list);
          for (std::string w; in >> w;) out.append(w);
          return out;
        };
        py::list image, video, audio;
        for (const auto& row : decode::image_formats()) {
          image.append(py::make_tuple(row.name, words(row.extensions)));
        }
        for (const auto& row : decode::containers()) {
          for (auto e : words(row.video_extensions)) video.append(e);
          for (auto e : words(row.audio_extensions)) audio.append(e);
        }
        py::dict d;
        d["image"] = image;
        d["video"] = video;
        d["audio"] = audio;
        d["missing_demuxers"] = decode::missing_demuxers();
        return d;
      },
      "{'image': [(name, [extension, ...]), ...], 'video': [extension, ...], 'audio': [...], "
      "'missing_demuxers': [the table's demuxers this FFmpeg lacks]}: "
      "the format table (decode/formats.h) the fields' member names and the messages come from.");
  py::class_<pipeline::FieldSpec>(m, "FieldSpec")
      .def_readonly("name", &pipeline::FieldSpec::name)
      .def_readonly("keys", &pipeline::FieldSpec::keys)
      .def_property_readonly(
          "entries",
          [](const pipeline::FieldSpec& f) {
            std::vector<std::string> out;  // a record's entries repeat its name
            for (const auto& o : pipeline::outputs_of(f)) out.push_back(f.name + o.suffix);
            return out;
          },
          "The batch entries the field declares (its name, then e.g. '.time'), in order: known "
          "before any data is read.");

  py::class_<augment::OpCall>(m, "Augmentation",
                              "One augmentation with its parameters resolved (augment/ops.h).")
      .def_property_readonly("name", [](const augment::OpCall& c) { return c.decl->name; })
      .def_property_readonly(
          "stage",
          [](const augment::OpCall& c) {
            return c.decl->stage == augment::OpStage::kPixels ? "pixels" : "output";
          },
          "'pixels': on the uint8 image after the crop; 'output': after the dtype conversion.")
      .def_property_readonly("params", [](const augment::OpCall& c) {
        py::dict d;  // {name: value or tuple}, in the declaration's order
        for (size_t i = 0; i < c.params.size(); ++i) {
          const auto& p = c.decl->params[i];
          const auto& v = c.params[i];
          if (p.kind == augment::ParamKind::kInteger)
            d[p.name] = static_cast<int64_t>(v[0]);
          else if (p.kind == augment::ParamKind::kNumber)
            d[p.name] = v[0];
          else
            d[p.name] = py::tuple(py::cast(v));
        }
        return d;
      });
  m.def("augmentation", &augment::make_op, py::arg("name"), py::arg("params"),
        "Checks an augmentation's parameters against its declaration and makes it; ConfigError "
        "says what is allowed.");
  m.def("augmentation_order", &augment::check_order, py::arg("ops"),
        "\"\" when a list of augmentations may run in its order, else why not.");
  m.def(
      "augmentations",
      [] {
        static const char* kKinds[] = {"number", "integer", "range", "rgb"};
        py::list out;
        for (const auto& d : augment::op_table()) {
          py::list params;
          for (const auto& p : d.params) {
            params.append(py::dict(
                py::arg("name") = p.name, py::arg("kind") = kKinds[static_cast<int>(p.kind)],
                py::arg("min") = p.lo, py::arg("max") = p.hi, py::arg("min_open") = p.lo_open,
                py::arg("default") = p.fallback, py::arg("doc") = p.doc));
          }
          out.append(py::dict(
              py::arg("name") = d.name, py::arg("doc") = d.doc,
              py::arg("stage") = d.stage == augment::OpStage::kPixels ? "pixels" : "output",
              py::arg("params") = params));
        }
        return out;
      },
      "The augmentation table (augment/ops.cc): [{'name', 'doc', 'stage', 'params': [{'name', "
      "'kind', 'min', 'max', 'min_open', 'default', 'doc'}]}].");

  m.def(
      "image_field",
      [](std::string name, std::vector<std::string> keys, int height, int width,
         const std::string& crop, std::pair<double, double> scale, std::pair<double, double> ratio,
         int resize, double flip, bool channels_last, bool exif, bool dct_scaling,
         int64_t max_pixels, bool optional, const std::string& dtype, std::array<double, 3> mean,
         std::array<double, 3> std, std::vector<augment::OpCall> ops) {
        pipeline::ImageSpec image =
            geometry(height, width, crop, scale, ratio, resize, flip, channels_last, max_pixels);
        image.exif = exif;
        image.dct_scaling = dct_scaling;
        image.dtype = pixel_type(dtype);
        image.mean = mean;
        image.std = std;
        image.ops = std::move(ops);
        pipeline::FieldSpec f{std::move(name), std::move(keys), optional,
                              std::make_shared<pipeline::ImageField>(image)};
        pipeline::validate({f});
        return f;
      },
      py::arg("name"), py::arg("keys"), py::arg("height"), py::arg("width"), py::arg("crop"),
      py::arg("scale"), py::arg("ratio"), py::arg("resize"), py::arg("flip"),
      py::arg("channels_last"), py::arg("exif"), py::arg("dct_scaling"), py::arg("max_pixels"),
      py::arg("optional"), py::arg("dtype") = "uint8",
      py::arg("mean") = std::array<double, 3>{0, 0, 0},
      py::arg("std") = std::array<double, 3>{1, 1, 1},
      py::arg("ops") = std::vector<augment::OpCall>{});

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
         std::string start, int cuda_device) {
        pipeline::VideoSpec video;
        auto& c = video.clip;
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
        video.stream = stream;
        video.decoder_threads = decoder_threads;
        video.rotate = rotate;
        video.color_tags = color_tags;
        video.start_key = std::move(start);
        video.cuda_device = cuda_device;
        pipeline::ImageSpec frame =
            geometry(height, width, crop, scale, ratio, resize, flip, channels_last, max_pixels);
        frame.dct_scaling = false;
        pipeline::FieldSpec f{std::move(name), std::move(keys), optional,
                              std::make_shared<pipeline::VideoField>(video, frame)};
        pipeline::validate({f});
        return f;
      },
      py::arg("name"), py::arg("keys"), py::arg("frames"), py::arg("stride"), py::arg("fps"),
      py::arg("position"), py::arg("clips"), py::arg("short"), py::arg("height"), py::arg("width"),
      py::arg("crop"), py::arg("scale"), py::arg("ratio"), py::arg("resize"), py::arg("flip"),
      py::arg("channels_last"), py::arg("stream"), py::arg("decoder_threads"), py::arg("rotate"),
      py::arg("color_tags"), py::arg("optional"),
      py::arg("max_pixels") = pipeline::ImageSpec{}.max_pixels, py::arg("start") = "",
      py::arg("cuda_device") = -1);

  m.def(
      "audio_field",
      [](std::string name, std::vector<std::string> keys, int sample_rate, int channels,
         double seconds, double max_seconds, const std::string& position, int stream,
         std::string align, bool optional) {
        pipeline::AudioSpec a;
        a.sample_rate = sample_rate;
        a.channels = channels;
        a.seconds = seconds;
        a.max_seconds = max_seconds;
        if (position == "random") {
          a.position = pipeline::AudioPosition::kRandom;
        } else if (position == "center") {
          a.position = pipeline::AudioPosition::kCenter;
        } else if (position == "start") {
          a.position = pipeline::AudioPosition::kStart;
        } else {
          throw ConfigError("unknown audio position '" + position +
                            "' (allowed: random, center, start)");
        }
        a.stream = stream;
        a.align = std::move(align);
        pipeline::FieldSpec f{std::move(name), std::move(keys), optional,
                              std::make_shared<pipeline::AudioField>(a)};
        pipeline::validate({f});  // align= names another field: checked by the Pipeline
        return f;
      },
      py::arg("name"), py::arg("keys"), py::arg("sample_rate"), py::arg("channels"),
      py::arg("seconds"), py::arg("max_seconds"), py::arg("position"), py::arg("stream"),
      py::arg("align"), py::arg("optional"));

  m.def(
      "plain_field",
      [](std::string name, std::vector<std::string> keys, const std::string& kind, bool optional) {
        return pipeline::FieldSpec{std::move(name), std::move(keys), optional,
                                   std::make_shared<pipeline::PlainField>(parse_kind(kind))};
      },
      py::arg("name"), py::arg("keys"), py::arg("kind"), py::arg("optional") = false);

  m.def(
      "decode_image",
      [](const py::bytes& data, const pipeline::FieldSpec& field, uint64_t seed, int64_t epoch,
         int64_t position) {
        // One image through the same path as the loader (tests, debugging).
        std::string bytes = data;
        const auto* image = dynamic_cast<const pipeline::ImageField*>(field.field.get());
        if (image == nullptr)
          throw ConfigError("decode_image: field '" + field.name + "' is not an Image");
        const auto& spec = image->spec();
        std::string out(static_cast<size_t>(spec.height) * spec.width * 3, '\0');
        std::string warning;
        {
          py::gil_scoped_release release;
          Rng rng(seed, static_cast<uint64_t>(epoch), RngStream::kAugment,
                  static_cast<uint64_t>(position));
          warning = naming("<bytes>", [&] {
            return pipeline::decode_image(reinterpret_cast<const uint8_t*>(bytes.data()),
                                          bytes.size(), spec, rng,
                                          reinterpret_cast<uint8_t*>(out.data()));
          });
        }
        return py::make_tuple(py::bytes(out), warning);
      },
      py::arg("data"), py::arg("field"), py::arg("seed") = 0, py::arg("epoch") = 0,
      py::arg("position") = 0);
}

}  // namespace loadscope::binding
