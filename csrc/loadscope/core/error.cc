#include "loadscope/core/error.h"

namespace loadscope {

const char* failure_kind_name(FailureKind kind) {
  switch (kind) {
    case FailureKind::kRead: return "read";
    case FailureKind::kDecode: return "decode";
    case FailureKind::kField: return "field";
  }
  return "unknown";
}

}  // namespace loadscope
