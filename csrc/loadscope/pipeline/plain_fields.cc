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
      std::string reason;
      if (!is_valid_json(bytes, &reason)) {
        throw SampleError(call.where, member + ": invalid JSON: " + reason, FailureKind::kField);
      }
      *call.strings[0] = bytes;
      break;
    }
    case PlainKind::kBytes: break;
  }
}

namespace {

class JsonChecker {
 public:
  explicit JsonChecker(const std::string& s)
      : begin_(s.data()), p_(s.data()), end_(s.data() + s.size()) {}
  bool run(std::string* reason) {
    ws();
    bool ok = value(0);
    ws();
    if (ok && p_ != end_) ok = fail("trailing characters");
    if (!ok && reason) *reason = error_ + " at byte " + std::to_string(pos_);
    return ok;
  }

 private:
  bool fail(const char* what) {
    if (error_.empty()) {
      error_ = what;
      pos_ = static_cast<size_t>(p_ - begin_);
    }
    return false;
  }
  void ws() {
    while (p_ < end_ && (*p_ == ' ' || *p_ == '\t' || *p_ == '\n' || *p_ == '\r')) advance(1);
  }
  void advance(size_t n) { p_ += n; }
  bool literal(const char* word) {
    size_t n = std::strlen(word);
    if (static_cast<size_t>(end_ - p_) < n || std::memcmp(p_, word, n) != 0) {
      return fail("invalid literal");
    }
    advance(n);
    return true;
  }
  bool string() {
    advance(1);  // opening quote
    while (p_ < end_) {
      const unsigned char c = static_cast<unsigned char>(*p_);
      if (c == '"') {
        advance(1);
        return true;
      }
      if (c < 0x20) return fail("control character in string");
      if (c == '\\') {
        if (end_ - p_ < 2) return fail("unterminated escape");
        const char e = p_[1];
        if (e == 'u') {
          if (end_ - p_ < 6) return fail("short \\u escape");
          for (int i = 2; i < 6; ++i) {
            if (!std::isxdigit(static_cast<unsigned char>(p_[i]))) return fail("bad \\u escape");
          }
          advance(6);
          continue;
        }
        if (!std::strchr("\"\\/bfnrt", e)) return fail("bad escape");
        advance(2);
        continue;
      }
      advance(1);
    }
    return fail("unterminated string");
  }
  bool digits() {
    if (p_ >= end_ || !std::isdigit(static_cast<unsigned char>(*p_))) return fail("digit expected");
    while (p_ < end_ && std::isdigit(static_cast<unsigned char>(*p_))) advance(1);
    return true;
  }
  bool number() {
    if (*p_ == '-') {
      advance(1);
      if (p_ < end_ && *p_ == 'I') return literal("Infinity");
    }
    if (p_ < end_ && *p_ == '0') {
      advance(1);
    } else if (!digits()) {
      return false;
    }
    if (p_ < end_ && *p_ == '.') {
      advance(1);
      if (!digits()) return false;
    }
    if (p_ < end_ && (*p_ == 'e' || *p_ == 'E')) {
      advance(1);
      if (p_ < end_ && (*p_ == '+' || *p_ == '-')) advance(1);
      if (!digits()) return false;
    }
    return true;
  }
  bool value(int depth) {
    if (depth > 256) return fail("nested too deeply");
    if (p_ >= end_) return fail("value expected");
    switch (*p_) {
      case '{': {
        advance(1);
        ws();
        if (p_ < end_ && *p_ == '}') {
          advance(1);
          return true;
        }
        while (true) {
          ws();
          if (p_ >= end_ || *p_ != '"') return fail("object key expected");
          if (!string()) return false;
          ws();
          if (p_ >= end_ || *p_ != ':') return fail("':' expected");
          advance(1);
          ws();
          if (!value(depth + 1)) return false;
          ws();
          if (p_ < end_ && *p_ == ',') {
            advance(1);
            continue;
          }
          if (p_ < end_ && *p_ == '}') {
            advance(1);
            return true;
          }
          return fail("',' or '}' expected");
        }
      }
      case '[': {
        advance(1);
        ws();
        if (p_ < end_ && *p_ == ']') {
          advance(1);
          return true;
        }
        while (true) {
          ws();
          if (!value(depth + 1)) return false;
          ws();
          if (p_ < end_ && *p_ == ',') {
            advance(1);
            continue;
          }
          if (p_ < end_ && *p_ == ']') {
            advance(1);
            return true;
          }
          return fail("',' or ']' expected");
        }
      }
      case '"': return string();
      case 't': return literal("true");
      case 'f': return literal("false");
      case 'n': return literal("null");
      // Python's json module reads (and json.dumps writes, by default) these three, as the
      // manifest reader does: metadata written from Python holds them.
      case 'N': return literal("NaN");
      case 'I': return literal("Infinity");
      default:
        if (*p_ == '-' || std::isdigit(static_cast<unsigned char>(*p_))) return number();
        return fail("value expected");
    }
  }

  const char* begin_;
  const char* p_;
  const char* end_;
  std::string error_;
  size_t pos_ = 0;
};

}  // namespace

bool is_valid_json(const std::string& text, std::string* reason) {
  if (!io::text::valid_utf8(text)) {
    if (reason) *reason = "not valid UTF-8";
    return false;
  }
  return JsonChecker(text).run(reason);
}

}  // namespace loadscope::pipeline
