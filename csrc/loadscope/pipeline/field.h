#pragma once
// The seam every field kind implements. A kind is one class (Image, VideoClip, Audio, Int,
// Text, Json, Bytes) that declares its outputs up front — name suffix, element type, per-sample
// shape (outputs.h) — and fills them for one sample at a time. The FieldProcessor (fields.h)
// does everything kinds share: finding the member, reading it, optional fields, naming
// failures, telemetry of failures; the batch layout and the Python tensors are made from the
// declarations. Adding a kind: docs/architecture.md, "Adding a field kind".

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "loadscope/core/engine.h"
#include "loadscope/core/rng.h"
#include "loadscope/core/sample.h"
#include "loadscope/decode/limits.h"
#include "loadscope/pipeline/outputs.h"
#include "loadscope/telemetry/telemetry.h"

namespace loadscope::pipeline {

// A clip's time span, which a video field leaves for an aligned audio field.
struct ClipSpan {
  double start = 0, end = 0;  // seconds
  bool set = false;
};

// One sample's call of one field.
struct FieldCall {
  const Member& member;
  const std::string& bytes;  // the member's content (empty for a whole file read by path)
  Sample& sample;
  SampleContext& ctx;
  const std::string& name;            // the field's name
  size_t index;                       // the field's position: its random streams
  std::vector<uint8_t*> fixed;        // per fixed-size output, in order: this sample's slot
  std::vector<std::string*> strings;  // per string output, in order
  std::vector<ClipSpan>& spans;       // per field: the clips video fields left this sample
  int follows = -1;                   // the index of the field named by follows(), if any
  std::string where;                  // names the sample in errors
  bool optional = false;              // the field's optional=
  // Set by a kind when the member holds no such content (a video without an audio stream):
  // for an optional field the processor then gives zeros and presence 0.
  bool absent = false;

  // Rng(seed, epoch, `stream` + index, position): this field's draws, a function of where the
  // sample is and never of which thread runs it.
  Rng rng(RngStream stream) const {
    return Rng(ctx.order->seed, static_cast<uint64_t>(ctx.order->epoch),
               static_cast<RngStream>(static_cast<uint64_t>(stream) + index),
               static_cast<uint64_t>(sample.position));
  }
};

class Field {
 public:
  virtual ~Field() = default;
  // What the kind puts into a batch, in order; the first has suffix "" (the field's own name).
  // The processor adds ".present" for optional fields.
  virtual std::vector<Output> outputs() const = 0;
  virtual telemetry::Kind kind() const = 0;
  // Checks the options; throws ConfigError naming the field.
  virtual void validate(const std::string& name) const = 0;
  // Whole files (not byte ranges) this kind opens by path itself: FFmpeg reads only what it
  // needs. Other members are read by the processor first.
  virtual bool reads_by_path() const { return false; }
  // A field this one needs the output of in the same sample (align=), else "". It runs after.
  virtual std::string follows() const { return ""; }
  // How many clips a field leaves in FieldCall::spans (video fields), else 0.
  virtual int clips() const { return 0; }
  // Fills this sample's outputs. Records its own stage times. Throws SampleError, or
  // DecodeFailure / ReadFailure, which the processor names with the sample and member.
  virtual void fill(FieldCall& call) const = 0;
  // Bytes this kind's per-thread scratch holds on the calling thread (telemetry).
  virtual size_t scratch_bytes() const { return 0; }
};

// The integer options of fields and their allowed ranges, inclusive. Kinds enforce them with
// check_bound, and the Python field classes check arguments against the same table
// (_native.option_bounds), so that both say the same and a bad argument fails where it is given.
struct IntBound {
  const char* name;
  int64_t min, max;
};
inline constexpr IntBound kIntBounds[] = {
    {"size", 1, 16384},                          // each side of an output image or frame
    {"frames", 1, 100000},                       // frames per clip
    {"clips", 1, 1000},                          // clips per video
    {"decoder_threads", 0, 64},                  // FFmpeg threads per video (0: FFmpeg's choice)
    {"max_pixels", 1, INT64_MAX},                // decoded pixels an image or frame may have
    {"sample_rate", 1, decode::kMaxSampleRate},  // an audio output's rate (decode/limits.h)
};
const IntBound& int_bound(const char* name);
// "field 'x': frames must be 1..100000" when `value` is outside its bound.
void check_bound(const std::string& field, const char* option, int64_t value);

// Helpers the kinds share (fields.cc).
// The bytes of a member named by path (a whole file, or a byte range such as an indexed tar's
// member): from the span fetched ahead, else read now. Returns the bytes read. Throws
// ReadFailure.
uint64_t read_member(const Member& m, std::string& out);
std::string member_list(const Sample& s);   // "jpg, cls" or "none"
std::string preview(const std::string& s);  // the first 40 bytes, printable

}  // namespace loadscope::pipeline
