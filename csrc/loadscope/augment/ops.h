#pragma once
// The per-sample augmentations an image field applies after its crop and flip, as an ordered list
// of operations. Each operation is declared once, in the table of ops.cc: its name, its
// parameters with their bounds and defaults, any rule between them, the Rng stream it draws from,
// and whether it works on the uint8 pixels or on the output element type. Python binds them by
// name (loadscope.Op), and the documentation and messages come from the same table.
//
// Note [augmentation draws]
// An op draws its random parameters when it runs, from its stream's generator, which the field
// creates once per sample from (seed, epoch, position, field). Ops sharing a stream draw in list
// order; RandAugment has a stream of its own, so that adding it left every other op's draws as
// they were. Draws never depend on pixel values, so the same list gives the same output for any
// thread count, and Image(...)'s keyword arguments, which build the list
// [RandAugment, ColorJitter, RandomGrayscale, RandomErasing], give what they gave before the
// list existed.

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "loadscope/augment/pixels.h"
#include "loadscope/core/rng.h"

namespace loadscope::augment {

// What an op's parameter holds, each value a double.
enum class ParamKind {
  kNumber,   // one number
  kInteger,  // one whole number
  kRange,    // (min, max), min <= max
  kRgb,      // one value per channel (R, G, B); one number means all three
};

struct ParamDecl {
  const char* name;
  ParamKind kind;
  double lo, hi;  // every value in [lo, hi] ((lo, hi] with lo_open); all values finite
  bool lo_open;
  std::vector<double> fallback;  // the default
  const char* doc;
};

// Where an op runs: on the uint8 RGB image after the crop, or on the output's element type
// after the dtype conversion (values in output units). The list must give every kPixels op
// before the first kOutput op.
enum class OpStage { kPixels, kOutput };

// The image an op works on, laid out [3, H, W] (chw) or [H, W, 3], elements of `type`.
struct OpImage {
  void* data;
  PixelType type;
  int height, width;
  bool chw;
  std::vector<uint8_t>* scratch;  // the thread's, for ops that read neighbours
};

// One op with its parameters resolved: draws with `rng` and changes `image` in place.
class Op {
 public:
  virtual ~Op() = default;
  virtual void apply(const OpImage& image, Rng& rng) const = 0;
};

// The parameters of one op, in the order of its declaration.
using OpParams = std::vector<std::vector<double>>;

struct OpDecl {
  const char* name;  // torchvision's class name where the op is one of its transforms
  const char* doc;
  OpStage stage;
  RngStream stream;  // kPixels or kRandAugment (Note [augmentation draws])
  std::vector<ParamDecl> params;
  // A rule between parameters: "" when they satisfy it, else what it requires.
  std::string (*check)(const OpParams&);
  std::unique_ptr<Op> (*make)(const OpParams&);
};

// Every op, in the order the documentation lists them.
const std::vector<OpDecl>& op_table();

// An op ready to run, with the values it was made from (for repr and equality).
struct OpCall {
  const OpDecl* decl = nullptr;
  OpParams params;
  std::shared_ptr<const Op> op;
};

// Checks `given` (parameter name -> values) against the op's declaration, fills the defaults and
// makes the op. Throws ConfigError saying what is allowed: the op names, the parameter names, or
// the bound, as "ColorJitter.hue=(-0.7, 0.7): must satisfy -0.5 <= min <= max <= 0.5".
OpCall make_op(const std::string& name, const std::map<std::string, std::vector<double>>& given);

// "" when the list's order is allowed (every kPixels op before the first kOutput op), else why.
std::string check_order(const std::vector<OpCall>& ops);

// Runs `ops` in order on `pixels` (uint8, after the crop), converting into `out` with `convert`
// where the first kOutput op is (or at the end): `convert` is null when the output is uint8, in
// which case pixels == out. `streams` gives each op's generator (Note [augmentation draws]).
struct OpStreams {
  Rng pixels;
  Rng randaugment;
  Rng& of(RngStream stream) { return stream == RngStream::kRandAugment ? randaugment : pixels; }
};
void run_ops(const std::vector<OpCall>& ops, uint8_t* pixels, void* out, PixelType out_type,
             const PixelConverter* convert, int height, int width, bool chw, OpStreams& streams,
             std::vector<uint8_t>& scratch);

}  // namespace loadscope::augment
