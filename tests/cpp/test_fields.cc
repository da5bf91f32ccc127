// The field seam's declarations (pipeline/outputs.h): a suffix names one output, or one record
// whose entries carry distinct keys; anything else is refused when the processor is made, not
// discovered as values silently overwriting each other in Python.
#include <memory>

#include "helpers.h"
#include "loadscope/pipeline/fields.h"

using namespace loadscope;
using pipeline::Output;
using pipeline::OutputType;

namespace {

struct Declares : pipeline::Field {
  explicit Declares(std::vector<Output> o) : outs(std::move(o)) {}
  std::vector<Output> outputs() const override { return outs; }
  telemetry::Kind kind() const override { return telemetry::Kind::other(); }
  void validate(const std::string&) const override {}
  void fill(pipeline::FieldCall&) const override {}
  std::vector<Output> outs;
};

void make(std::vector<Output> outputs) {
  pipeline::FieldProcessor p(
      {pipeline::FieldSpec{"f", {"f"}, true, std::make_shared<Declares>(std::move(outputs))}});
}

}  // namespace

TEST_CASE("a suffix names one output, or one record of distinct keys", "[fields]") {
  CHECK_NOTHROW(make({{"", OutputType::kUint8, {2}},
                      {".m", OutputType::kInt64, {}, "a"},
                      {".m", OutputType::kText, {}, "b"}}));
  CHECK_THROWS_WITH(
      make({{".m", OutputType::kInt64, {}, "a"}, {".m", OutputType::kFloat64, {}, "a"}}),
      Catch::Contains("output 'f.m' declared twice"));
  CHECK_THROWS_WITH(make({{".m", OutputType::kInt64}, {".m", OutputType::kInt64, {}, "a"}}),
                    Catch::Contains("declared twice"));
  CHECK_THROWS_WITH(make({{"", OutputType::kUint8}, {"", OutputType::kText}}),
                    Catch::Contains("output 'f' declared twice"));
  // ".present", which the processor adds to an optional field, is a name the kind cannot take.
  CHECK_THROWS_WITH(make({{".present", OutputType::kBool}}),
                    Catch::Contains("output 'f.present' declared twice"));
}
