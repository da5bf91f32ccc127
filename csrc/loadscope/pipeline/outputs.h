#pragma once
// The seam between a field kind and the batch: every kind declares its outputs up front (name
// suffix, element type, per-sample shape), the batch layout is made from the declarations, and
// Python builds its tensors and lists from them (Pipeline.outputs), knowing no kind.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace loadscope::pipeline {

enum class OutputType {
  // fixed-size, in the batch block: a tensor [B, *shape]
  kUint8,
  kBool,
  kInt64,
  kFloat16,
  kBFloat16,
  kFloat32,
  kFloat64,
  // one string per sample: a list
  kText,
  kBytes,
  kJson
};

struct Output {
  Output(std::string suffix, OutputType type, std::vector<int64_t> shape = {}, std::string key = {})
      : suffix(std::move(suffix)), type(type), shape(std::move(shape)), key(std::move(key)) {}
  std::string suffix;  // appended to the field's name: "" (the field's own), ".time", ...
  OutputType type;
  std::vector<int64_t> shape;  // per sample; fixed types only
  // Non-empty: one entry of a record. The outputs sharing a suffix, each with its key, are one
  // dict per sample in Python ({key: value} in declaration order; None where an optional field
  // is absent): typed metadata with no text format between C++ and Python.
  std::string key;
  bool fixed() const { return type < OutputType::kText; }
  size_t bytes_per_sample() const;
};

const char* type_name(OutputType t);  // torch's dtype names, and "text", "bytes", "json"

}  // namespace loadscope::pipeline
