#pragma once
// What a loader produces per sample: a list of fields, each taken from one member of the
// sample (the first of `keys` that exists) and made into the outputs its kind declares
// (field.h): images, video clips, audio, integers, text, JSON, bytes.

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "loadscope/core/engine.h"
#include "loadscope/io/prefetch.h"
#include "loadscope/pipeline/field.h"
#include "loadscope/pipeline/outputs.h"

namespace loadscope::pipeline {

struct FieldSpec {
  std::string name;               // output name
  std::vector<std::string> keys;  // member names to try, in order
  // A missing member (or one the kind finds empty of its content: a video without an audio
  // stream) gives zeros, empty strings and presence 0, not an error.
  bool optional = false;
  std::shared_ptr<const Field> field;  // the kind: ImageField, VideoField, AudioField, ...
};

// What a field puts into a batch, in order: its kind's outputs, then ".present" (bool) when
// optional.
std::vector<Output> outputs_of(const FieldSpec& f);

// Where a field's outputs live in a batch: `at[k]` is output k's index into the batch's
// fixed-size or string area; `fixed` and `strings` list those indices in output order.
struct FieldSlots {
  std::vector<Output> outputs;
  std::vector<int> at;
  std::vector<int> fixed;
  std::vector<int> strings;
};

// Checks a field list (names, keys, each kind's options, what aligned fields follow); throws
// ConfigError naming the field and what is allowed.
void validate(const std::vector<FieldSpec>& fields);

// The SampleProcessor for a field list. Thread-safe: per-thread codec state lives in the
// kinds' thread-local scratch.
class FieldProcessor : public SampleProcessor {
 public:
  explicit FieldProcessor(std::vector<FieldSpec> fields);
  std::vector<size_t> fixed_bytes_per_sample() const override;
  size_t num_string_fields() const override { return num_strings_; }
  void process(Sample& sample, Batch& batch, int slot, SampleContext& ctx) override;
  // Remote members the fields will read are fetched ahead (io/prefetch.h).
  void prepare(std::vector<Sample>& samples, const std::atomic<bool>& stop,
               int64_t stride) override;
  void cancel() override;
  ~FieldProcessor() override;

  const std::vector<FieldSpec>& fields() const { return fields_; }
  const FieldSlots& slots(size_t field) const { return slots_[field]; }

 private:
  void process_field(size_t index, Sample& sample, Batch& batch, int slot, SampleContext& ctx,
                     std::vector<ClipSpan>& spans);

  std::vector<FieldSpec> fields_;
  std::vector<FieldSlots> slots_;
  std::vector<size_t> order_;  // processing order: a field after the one it follows
  std::vector<int> follows_;   // per field: the index of the field it follows, -1
  std::vector<size_t> fixed_bytes_;
  size_t num_strings_ = 0;
  std::mutex prefetcher_mutex_;
  std::unique_ptr<io::Prefetcher> prefetcher_;  // made on the first remote member
  int prefetcher_pid_ = 0;                      // by this process (a fork gets its own)
  int64_t batches_in_run_ = 0;                  // prepared since the run started
};

}  // namespace loadscope::pipeline
