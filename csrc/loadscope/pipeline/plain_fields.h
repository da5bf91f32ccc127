#pragma once
// The plain field kinds: Int (decimal text as int64), Text (UTF-8), Json (validated here,
// parsed in Python) and Bytes (passed through).

#include <string>
#include <vector>

#include "loadscope/pipeline/field.h"

namespace loadscope::pipeline {

enum class PlainKind { kInt, kText, kJson, kBytes };

class PlainField : public Field {
 public:
  explicit PlainField(PlainKind kind) : kind_(kind) {}
  PlainKind plain_kind() const { return kind_; }
  std::vector<Output> outputs() const override;
  telemetry::Kind kind() const override { return telemetry::Kind::other(); }
  void validate(const std::string&) const override {}
  void fill(FieldCall& call) const override;

 private:
  PlainKind kind_;
};

}  // namespace loadscope::pipeline
