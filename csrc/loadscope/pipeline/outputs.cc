#include "loadscope/pipeline/outputs.h"

namespace loadscope::pipeline {

size_t Output::bytes_per_sample() const {
  size_t n = 1;
  for (int64_t d : shape) n *= static_cast<size_t>(d);
  switch (type) {
    case OutputType::kUint8:
    case OutputType::kBool: return n;
    case OutputType::kFloat16:
    case OutputType::kBFloat16: return 2 * n;
    case OutputType::kFloat32: return 4 * n;
    case OutputType::kInt64:
    case OutputType::kFloat64: return 8 * n;
    default: return 0;
  }
}

const char* type_name(OutputType t) {
  switch (t) {
    case OutputType::kUint8: return "uint8";
    case OutputType::kBool: return "bool";
    case OutputType::kInt64: return "int64";
    case OutputType::kFloat16: return "float16";
    case OutputType::kBFloat16: return "bfloat16";
    case OutputType::kFloat32: return "float32";
    case OutputType::kFloat64: return "float64";
    case OutputType::kText: return "text";
    case OutputType::kBytes: return "bytes";
    case OutputType::kJson: return "json";
  }
  return "?";
}

}  // namespace loadscope::pipeline
