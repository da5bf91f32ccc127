#include "loadscope/augment/ops.h"

#include <cmath>
#include <limits>
#include <sstream>

#include "loadscope/augment/color.h"
#include "loadscope/augment/randaugment.h"
#include "loadscope/core/error.h"

namespace loadscope::augment {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// --- The ops: each adapts the kernels of color.cc or randaugment.cc to one OpDecl. ---------------

class RandAugmentOp : public Op {
 public:
  explicit RandAugmentOp(const OpParams& p) {
    spec_.num_ops = static_cast<int>(p[0][0]);
    spec_.magnitude = static_cast<int>(p[1][0]);
    spec_.bins = static_cast<int>(p[2][0]);
  }
  void apply(const OpImage& im, Rng& rng) const override {
    auto* u8 = static_cast<uint8_t*>(im.data);
    for (const auto& op : draw_randaugment(spec_, im.height, im.width, rng)) {
      apply_op(u8, im.height, im.width, im.chw, op, *im.scratch);
    }
  }

 private:
  RandAugmentSpec spec_;
};

class ColorJitterOp : public Op {
 public:
  explicit ColorJitterOp(const OpParams& p) {
    spec_.p = p[0][0];
    for (int k = 0; k < 4; ++k) {
      spec_.lo[k] = p[1 + k][0];
      spec_.hi[k] = p[1 + k][1];
    }
  }
  void apply(const OpImage& im, Rng& rng) const override {
    const size_t pixels = static_cast<size_t>(im.height) * im.width;
    apply_color(RgbView::of(static_cast<uint8_t*>(im.data), pixels, im.chw),
                draw_color(spec_, rng));
  }

 private:
  ColorSpec spec_;
};

// Whether an op applied with probability p happens to this sample; p 0 or 1 draws nothing.
bool happens(double p, Rng& rng) {
  return p > 0 && (p >= 1 || rng.uniform() < p);
}

class GrayscaleOp : public Op {
 public:
  explicit GrayscaleOp(const OpParams& p) : p_(p[0][0]) {}
  void apply(const OpImage& im, Rng& rng) const override {
    if (!happens(p_, rng)) return;
    const size_t pixels = static_cast<size_t>(im.height) * im.width;
    to_grayscale(RgbView::of(static_cast<uint8_t*>(im.data), pixels, im.chw));
  }

 private:
  double p_;
};

// torchvision's RandomSolarize, RandomPosterize, RandomAutocontrast, RandomEqualize: one of
// RandAugment's kernels at a fixed strength (the row's first parameter, where it has one),
// applied with probability p (the last).
template <RandOp kOp>
class RandomApplyOp : public Op {
 public:
  explicit RandomApplyOp(const OpParams& p)
      : magnitude_(p.size() > 1 ? p[0][0] : 0.0), p_(p.back()[0]) {}
  void apply(const OpImage& im, Rng& rng) const override {
    if (!happens(p_, rng)) return;
    apply_op(static_cast<uint8_t*>(im.data), im.height, im.width, im.chw, {kOp, magnitude_},
             *im.scratch);
  }

 private:
  double magnitude_, p_;
};

// torchvision's RandomInvert: 255 - v in every channel (F.invert on uint8).
class InvertOp : public Op {
 public:
  explicit InvertOp(const OpParams& p) : p_(p[0][0]) {}
  void apply(const OpImage& im, Rng& rng) const override {
    if (!happens(p_, rng)) return;
    auto* v = static_cast<uint8_t*>(im.data);
    const size_t n = static_cast<size_t>(im.height) * im.width * 3;
    for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(255 - v[i]);
  }

 private:
  double p_;
};

class EraseOp : public Op {
 public:
  explicit EraseOp(const OpParams& p) {
    spec_.p = p[0][0];
    spec_.scale_min = p[1][0];
    spec_.scale_max = p[1][1];
    spec_.ratio_min = p[2][0];
    spec_.ratio_max = p[2][1];
    spec_.value = {p[3][0], p[3][1], p[3][2]};
  }
  void apply(const OpImage& im, Rng& rng) const override {
    erase(im.data, im.type, im.height, im.width, im.chw,
          draw_erase(spec_, im.height, im.width, rng), spec_.value);
  }

 private:
  EraseSpec spec_;
};

template <class T>
std::unique_ptr<Op> make(const OpParams& p) {
  return std::make_unique<T>(p);
}

std::string no_rule(const OpParams&) {
  return "";
}

std::string randaugment_rule(const OpParams& p) {
  if (p[1][0] < p[2][0]) return "";
  std::ostringstream out;
  out << "magnitude (" << p[1][0] << ") must be below num_magnitude_bins (" << p[2][0] << ")";
  return out.str();
}

ParamDecl probability(double fallback) {
  return {"p", ParamKind::kNumber, 0, 1, false, {fallback}, "the probability a sample gets the op"};
}

ParamDecl factor(const char* name, const char* doc) {
  return {name, ParamKind::kRange, 0, kInf, false, {1.0, 1.0}, doc};
}

}  // namespace

const std::vector<OpDecl>& op_table() {
  // To add an op: its kernel (a function of color.cc, or a file of its own), an Op subclass above
  // and one row here. Python binds it by name: loadscope.Op("Name", param=...).
  static const std::vector<OpDecl> table = {
      {"RandAugment",
       "torchvision's RandAugment: num_ops of its 14 ops per sample at bin magnitude of "
       "num_magnitude_bins, signed ops negated half the time; nearest-neighbour geometry, zero "
       "fill",
       OpStage::kPixels,
       RngStream::kRandAugment,
       {{"num_ops", ParamKind::kInteger, 0, 16, false, {2}, "ops applied to each sample"},
        {"magnitude", ParamKind::kInteger, 0, 999, false, {9}, "the bin of every op's strength"},
        {"num_magnitude_bins", ParamKind::kInteger, 2, 1000, false, {31}, "bins of strength"}},
       randaugment_rule,
       make<RandAugmentOp>},
      {"ColorJitter",
       "torchvision's ColorJitter (with RandomApply's p): brightness, contrast, saturation and hue "
       "in a random order, each factor uniform in its range; a range that is the identity is "
       "skipped",
       OpStage::kPixels,
       RngStream::kPixels,
       {probability(1.0),
        factor("brightness", "brightness factors (min, max)"),
        factor("contrast", "contrast factors (min, max)"),
        factor("saturation", "saturation factors (min, max)"),
        {"hue", ParamKind::kRange, -0.5, 0.5, false, {0.0, 0.0}, "hue shifts (min, max)"}},
       no_rule,
       make<ColorJitterOp>},
      {"RandomGrayscale",
       "torchvision's RandomGrayscale: the three channels set to the gray level",
       OpStage::kPixels,
       RngStream::kPixels,
       {probability(0.1)},
       no_rule,
       make<GrayscaleOp>},
      {"RandomSolarize",
       "torchvision's RandomSolarize: every value >= threshold becomes 255 - value",
       OpStage::kPixels,
       RngStream::kPixels,
       {{"threshold", ParamKind::kNumber, 0, 255, false, {128}, "in uint8 units"},
        probability(0.5)},
       no_rule,
       make<RandomApplyOp<RandOp::kSolarize>>},
      {"RandomPosterize",
       "torchvision's RandomPosterize: each value keeps its `bits` high bits",
       OpStage::kPixels,
       RngStream::kPixels,
       {{"bits", ParamKind::kInteger, 0, 8, false, {4}, "bits kept per channel"}, probability(0.5)},
       no_rule,
       make<RandomApplyOp<RandOp::kPosterize>>},
      {"RandomAutocontrast",
       "torchvision's RandomAutocontrast: each channel stretched to the full range",
       OpStage::kPixels,
       RngStream::kPixels,
       {probability(0.5)},
       no_rule,
       make<RandomApplyOp<RandOp::kAutoContrast>>},
      {"RandomEqualize",
       "torchvision's RandomEqualize: each channel's histogram equalised",
       OpStage::kPixels,
       RngStream::kPixels,
       {probability(0.5)},
       no_rule,
       make<RandomApplyOp<RandOp::kEqualize>>},
      {"RandomInvert",
       "torchvision's RandomInvert: every value becomes 255 - value",
       OpStage::kPixels,
       RngStream::kPixels,
       {probability(0.5)},
       no_rule,
       make<InvertOp>},
      {"RandomErasing",
       "torchvision's RandomErasing: a box of scale of the area and aspect ratio in ratio "
       "(log-uniform) filled with value, in the output's units (after dtype, mean and std)",
       OpStage::kOutput,
       RngStream::kPixels,
       {probability(0.5),
        {"scale", ParamKind::kRange, 0, 1, true, {0.02, 0.33}, "the box's share of the area"},
        {"ratio", ParamKind::kRange, 0, kInf, true, {0.3, 3.3}, "the box's aspect ratio"},
        {"value", ParamKind::kRgb, -kInf, kInf, false, {0, 0, 0}, "the fill, per channel"}},
       no_rule,
       make<EraseOp>},
  };
  return table;
}

namespace {

std::string text(const std::vector<double>& v) {
  std::ostringstream out;
  if (v.size() == 1) {
    out << v[0];
    return out.str();
  }
  out << "(";
  for (size_t i = 0; i < v.size(); ++i) out << (i ? ", " : "") << v[i];
  out << ")";
  return out.str();
}

std::string bounds(const ParamDecl& p) {
  std::ostringstream out;
  if (p.kind == ParamKind::kRgb) return "finite values, one number or three (R, G, B)";
  if (p.lo > -kInf) out << p.lo << (p.lo_open ? " < " : " <= ");
  out << (p.kind == ParamKind::kRange ? "min <= max" : p.name);
  if (p.hi < kInf) out << " <= " << p.hi;
  if (p.hi == kInf) out << " (finite)";
  if (p.kind == ParamKind::kInteger) out << ", a whole number";
  return out.str();
}

bool in_bounds(const ParamDecl& p, const std::vector<double>& v) {
  for (double x : v) {
    if (!std::isfinite(x) || x > p.hi || (p.lo_open ? x <= p.lo : x < p.lo)) return false;
    if (p.kind == ParamKind::kInteger && x != std::floor(x)) return false;
  }
  return p.kind != ParamKind::kRange || v[0] <= v[1];
}

std::string names(const std::vector<std::string>& all) {
  std::string out;
  for (const auto& n : all) out += (out.empty() ? "" : ", ") + n;
  return out;
}

}  // namespace

OpCall make_op(const std::string& name, const std::map<std::string, std::vector<double>>& given) {
  const OpDecl* decl = nullptr;
  std::vector<std::string> all;
  for (const auto& d : op_table()) {
    all.push_back(d.name);
    if (name == d.name) decl = &d;
  }
  if (!decl) throw ConfigError("unknown augmentation '" + name + "' (allowed: " + names(all) + ")");
  std::vector<std::string> params;
  for (const auto& p : decl->params) params.push_back(p.name);
  for (const auto& [key, value] : given) {
    bool known = false;
    for (const auto& p : decl->params) known = known || key == p.name;
    if (!known) {
      throw ConfigError(name + " has no parameter '" + key + "' (allowed: " + names(params) + ")");
    }
  }
  OpCall call;
  call.decl = decl;
  for (const auto& p : decl->params) {
    auto it = given.find(p.name);
    std::vector<double> v = it == given.end() ? p.fallback : it->second;
    const size_t want = p.kind == ParamKind::kRange ? 2 : p.kind == ParamKind::kRgb ? 3 : 1;
    if (p.kind == ParamKind::kRgb && v.size() == 1) v.assign(3, v[0]);
    if (v.size() != want) {
      const char* shape = want == 1   ? "one number"
                          : want == 2 ? "a pair (min, max)"
                                      : "one number or three (R, G, B)";
      throw ConfigError(name + "." + p.name + "=" + text(v) + ": must be " + shape);
    }
    if (!in_bounds(p, v)) {
      throw ConfigError(name + "." + p.name + "=" + text(v) + ": must satisfy " + bounds(p));
    }
    call.params.push_back(std::move(v));
  }
  if (std::string rule = decl->check(call.params); !rule.empty()) {
    throw ConfigError(name + ": " + rule);
  }
  call.op = decl->make(call.params);
  return call;
}

std::string check_order(const std::vector<OpCall>& ops) {
  const OpCall* output = nullptr;
  for (const auto& op : ops) {
    if (op.decl->stage == OpStage::kOutput && !output) output = &op;
    if (op.decl->stage == OpStage::kPixels && output) {
      return std::string(op.decl->name) + " works on the uint8 pixels and must come before " +
             output->decl->name + ", which works on the output dtype";
    }
  }
  return "";
}

void run_ops(const std::vector<OpCall>& ops, uint8_t* pixels, void* out, PixelType out_type,
             const PixelConverter* convert, int height, int width, bool chw, OpStreams& streams,
             std::vector<uint8_t>& scratch) {
  const size_t n = static_cast<size_t>(height) * width;
  OpImage image{pixels, PixelType::kUint8, height, width, chw, &scratch};
  bool at_output = false;
  for (const auto& op : ops) {
    if (op.decl->stage == OpStage::kOutput && !at_output) {
      if (convert) convert->convert(pixels, n, chw, out);  // Note [float output by table]
      at_output = true;
      image.data = out;
      image.type = out_type;
    }
    op.op->apply(image, streams.of(op.decl->stream));
  }
  if (convert && !at_output) convert->convert(pixels, n, chw, out);
}

}  // namespace loadscope::augment
