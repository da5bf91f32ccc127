#include "loadscope/pipeline/plain_fields.h"

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "loadscope/core/error.h"
#include "loadscope/io/text.h"

namespace loadscope::pipeline {

namespace {
bool parse_int(const std::string& text, int64_t& out) {
  size_t b = 0, e = text.size();
  while (b < e && std::isspace(static_cast<unsigned char>(text[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(text[e - 1]))) --e;
  if (b == e) return false;
  std::string t = text.substr(b, e - b);
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(t.c_str(), &end, 10);
  if (errno != 0 || end != t.c_str() + t.size()) return false;
  out = v;
  return true;
}

}  // namespace

std::vector<Output> PlainField::outputs() const {
  switch (kind_) {
    case PlainKind::kInt: return {{"", OutputType::kInt64, {}}};
    case PlainKind::kText: return {{"", OutputType::kText, {}}};
    case PlainKind::kJson: return {{"", OutputType::kJson, {}}};
    case PlainKind::kBytes: break;
  }
  return {{"", OutputType::kBytes, {}}};
}

void PlainField::fill(FieldCall& call) const {
  const std::string& bytes = call.bytes;
  const std::string& member = call.member.name;
  if (kind_ == PlainKind::kBytes) {
    *call.strings[0] = bytes;
    return;
  }
  telemetry::StageTimer timer(call.ctx.telemetry, call.ctx.slot, telemetry::Stage::kDecode, kind());
  switch (kind_) {
    case PlainKind::kInt: {
      int64_t v = 0;
      if (!parse_int(bytes, v)) {
        throw SampleError(call.where, member + ": not an integer: '" + preview(bytes) + "'",
                          FailureKind::kField);
      }
      std::memcpy(call.fixed[0], &v, sizeof v);
      break;
    }
    case PlainKind::kText:
      if (!io::text::valid_utf8(bytes)) {
        throw SampleError(call.where, member + ": text is not valid UTF-8", FailureKind::kField);
      }
      *call.strings[0] = bytes;
      break;
    case PlainKind::kJson: {
      const std::string reason = io::text::check_json(bytes);
      if (!reason.empty()) {
        throw SampleError(call.where, member + ": invalid JSON: " + reason, FailureKind::kField);
      }
      *call.strings[0] = bytes;
      break;
    }
    case PlainKind::kBytes: break;
  }
}

}  // namespace loadscope::pipeline
