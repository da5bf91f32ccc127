// JSON lines manifests: one object per line, checked as strictly as Python's json module.
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "loadscope/core/error.h"
#include "loadscope/io/manifest_rows.h"
#include "loadscope/io/text.h"

namespace loadscope::io::manifest_rows {

namespace {

bool json_space(char c) {
  return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

class JsonRow {
 public:
  JsonRow(const char* line, const char* end, std::string& scratch)
      : p_(line), end_(end), scratch_(scratch) {}

  void skip_space() {
    while (p_ < end_ && json_space(*p_)) ++p_;
  }
  bool at_end() {
    skip_space();
    return p_ == end_;
  }
  char peek() { return p_ < end_ ? *p_ : '\0'; }
  void expect(char c, const char* what) {
    skip_space();
    if (p_ == end_ || *p_ != c) bad(std::string("not JSON: expected ") + what + where());
    ++p_;
  }
  std::string where() const {
    if (p_ == end_) return " at the end of the line";
    const unsigned char c = static_cast<unsigned char>(*p_);
    char buf[48];
    if (c >= 0x20 && c < 0x7f) {
      std::snprintf(buf, sizeof buf, " at column %zu ('%c')", static_cast<size_t>(col()), c);
    } else {
      std::snprintf(buf, sizeof buf, " at column %zu", static_cast<size_t>(col()));
    }
    return buf;
  }
  size_t col() const { return static_cast<size_t>(p_ - begin_) + 1; }
  void set_begin(const char* b) { begin_ = b; }
  const char* pos() const { return p_; }

  // A string at p_ ('"'): its bytes undecoded when it has no escapes, else decoded into scratch.
  Val string(const char* input) {
    ++p_;  // the opening quote
    const char* start = p_;
    while (p_ < end_) {
      const unsigned char c = static_cast<unsigned char>(*p_);
      if (c == '"') {
        Val v{false, static_cast<size_t>(start - input), static_cast<size_t>(p_ - start)};
        ++p_;
        return v;
      }
      if (c == '\\') break;
      if (c < 0x20) bad("not JSON: a control character inside a string" + where());
      ++p_;
    }
    if (p_ == end_) bad("not JSON: unterminated string");
    // Escapes: decode the whole string into scratch.
    Val v{true, scratch_.size(), 0};
    scratch_.append(start, static_cast<size_t>(p_ - start));
    while (true) {
      if (p_ == end_) bad("not JSON: unterminated string");
      const unsigned char c = static_cast<unsigned char>(*p_);
      if (c == '"') {
        ++p_;
        break;
      }
      if (c < 0x20) bad("not JSON: a control character inside a string" + where());
      if (c != '\\') {
        scratch_ += static_cast<char>(c);
        ++p_;
        continue;
      }
      if (end_ - p_ < 2) bad("not JSON: unterminated string");
      const char e = p_[1];
      p_ += 2;
      switch (e) {
        case '"': scratch_ += '"'; break;
        case '\\': scratch_ += '\\'; break;
        case '/': scratch_ += '/'; break;
        case 'b': scratch_ += '\b'; break;
        case 'f': scratch_ += '\f'; break;
        case 'n': scratch_ += '\n'; break;
        case 'r': scratch_ += '\r'; break;
        case 't': scratch_ += '\t'; break;
        case 'u': {
          uint32_t cp = hex4();
          if (cp >= 0xD800 && cp <= 0xDBFF) {  // a surrogate pair gives one code point
            if (end_ - p_ < 6 || p_[0] != '\\' || p_[1] != 'u')
              bad("not JSON: a lone surrogate (\\u escape)" + where());
            p_ += 2;
            const uint32_t lo = hex4();
            if (lo < 0xDC00 || lo > 0xDFFF)
              bad("not JSON: a lone surrogate (\\u escape)" + where());
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            bad("not JSON: a lone surrogate (\\u escape)" + where());
          }
          text::append_utf8(scratch_, cp);
          break;
        }
        default: bad("not JSON: invalid escape" + where());
      }
    }
    v.n = scratch_.size() - v.off;
    return v;
  }

  // Any value, validated; returns where it starts (p_ then points past it). *is_string: a
  // string, decoded into *str.
  const char* value(int depth, const char* input, bool* is_string, Val* str) {
    skip_space();
    if (p_ == end_) bad("not JSON: a value is missing" + where());
    const char* start = p_;
    if (is_string) *is_string = false;
    switch (*p_) {
      case '"': {
        Val v = string(input);
        if (is_string) {
          *is_string = true;
          *str = v;
        }
        return start;
      }
      case '{':
      case '[': {
        if (depth >= kMaxDepth) bad("not JSON: nested deeper than 512 levels");
        const bool obj = *p_ == '{';
        ++p_;
        skip_space();
        if (peek() == (obj ? '}' : ']')) {
          ++p_;
          return start;
        }
        while (true) {
          if (obj) {
            skip_space();
            if (peek() != '"') bad("not JSON: expected a key" + where());
            const size_t mark = scratch_.size();
            string(input);
            scratch_.resize(mark);  // nested keys are validated, not kept
            expect(':', "':'");
          }
          const size_t mark = scratch_.size();
          value(depth + 1, input, nullptr, nullptr);
          scratch_.resize(mark);
          skip_space();
          if (peek() == ',') {
            ++p_;
            continue;
          }
          expect(obj ? '}' : ']', obj ? "',' or '}'" : "',' or ']'");
          return start;
        }
      }
      case 't': literal("true"); return start;
      case 'f': literal("false"); return start;
      case 'n': literal("null"); return start;
      case 'N': literal("NaN"); return start;  // Python's json reads these three
      case 'I': literal("Infinity"); return start;
      default: number(); return start;
    }
  }

 private:
  uint32_t hex4() {
    if (end_ - p_ < 4) bad("not JSON: a short \\u escape");
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = *p_++;
      v <<= 4;
      if (c >= '0' && c <= '9')
        v |= static_cast<uint32_t>(c - '0');
      else if (c >= 'a' && c <= 'f')
        v |= static_cast<uint32_t>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F')
        v |= static_cast<uint32_t>(c - 'A' + 10);
      else
        bad("not JSON: invalid \\u escape" + where());
    }
    return v;
  }
  void literal(const char* word) {
    const size_t n = std::strlen(word);
    if (static_cast<size_t>(end_ - p_) < n || std::memcmp(p_, word, n) != 0)
      bad("not JSON: unexpected token" + where());
    p_ += n;
  }
  void number() {
    if (peek() == '-') {
      ++p_;
      if (peek() == 'I') {
        literal("Infinity");
        return;
      }
    }
    auto digits = [&] {
      const char* s = p_;
      while (p_ < end_ && *p_ >= '0' && *p_ <= '9') ++p_;
      return p_ > s;
    };
    if (peek() == '0') {
      ++p_;
    } else if (!digits()) {
      bad("not JSON: unexpected token" + where());
    }
    if (peek() == '.') {
      ++p_;
      if (!digits()) bad("not JSON: a digit must follow '.'" + where());
    }
    if (peek() == 'e' || peek() == 'E') {
      ++p_;
      if (peek() == '+' || peek() == '-') ++p_;
      if (!digits()) bad("not JSON: an exponent needs digits" + where());
    }
  }

  const char* p_;
  const char* end_;
  const char* begin_ = nullptr;
  std::string& scratch_;
};

}  // namespace

void parse_jsonl(const char* input, const char* b, const char* e, const ManifestOptions& o,
                 Part& part) {
  RowWriter writer(part, o);
  // Room for what the chunk can hold, so that the arrays never move while growing (reserved
  // pages that stay unused are never touched).
  part.path_text.reserve(static_cast<size_t>(e - b));
  part.path_ends.reserve(static_cast<size_t>(e - b) / 16 + 1);
  std::string scratch;
  std::vector<Val> vals;
  std::vector<char> have;
  const std::string& key = o.path_key;
  while (b < e) {
    const char* nl = static_cast<const char*>(std::memchr(b, '\n', static_cast<size_t>(e - b)));
    const char* line_end = nl ? nl : e;
    const uint64_t line = ++part.lines;
    const char* line_start = b;
    b = nl ? nl + 1 : e;
    // A lone \r ends a line too, as Python reads text with newline="" (a \r\n is one end).
    const char* cr = static_cast<const char*>(
        std::memchr(line_start, '\r', static_cast<size_t>(line_end - line_start)));
    if (cr && cr + 1 < line_end) {
      line_end = cr;
      b = cr + 1;
    }
    if (blank(line_start, line_end)) continue;
    try {
      const size_t len = static_cast<size_t>(line_end - line_start);
      if (len > kMaxRowBytes) {
        bad("the row is " + std::to_string(len) + " bytes, over the " +
            std::to_string(kMaxRowBytes >> 20) + " MiB a manifest row may have");
      }
      if (!text::valid_utf8(std::string_view(line_start, len))) {
        bad("the row is not UTF-8");
      }
      scratch.clear();
      std::fill(have.begin(), have.end(), 0);
      JsonRow row(line_start, line_end, scratch);
      row.set_begin(line_start);
      row.skip_space();
      if (row.peek() != '{') {
        row.value(0, input, nullptr,
                  nullptr);  // a valid non-object is "not an object", not "not JSON"
        if (!row.at_end()) bad("not JSON: extra data after the value" + row.where());
        bad("the row is not a JSON object");
      }
      row.expect('{', "'{'");
      Val path;
      bool have_path = false;
      bool path_not_string = false;
      size_t k = 0;
      row.skip_space();
      if (row.peek() == '}') {
        row.expect('}', "'}'");
      } else {
        while (true) {
          row.skip_space();
          if (row.peek() != '"') bad("not JSON: expected a key" + row.where());
          const Val name = row.string(input);
          row.expect(':', "':'");
          const char* name_bytes = (name.scratch ? scratch.data() : input) + name.off;
          bool is_string = false;
          Val str;
          const char* start = row.value(1, input, &is_string, &str);
          // Re-read the name: value() may have grown scratch (the pointer moved, not the offset).
          name_bytes = (name.scratch ? scratch.data() : input) + name.off;
          if (name.n == key.size() && std::memcmp(name_bytes, key.data(), name.n) == 0) {
            have_path = true;  // a repeated key: the last one counts, as in Python's json
            path_not_string = !is_string;
            path = str;
          } else {
            const size_t c = writer.column(name_bytes, name.n, k);
            if (have.size() < part.cols.size()) {
              have.resize(part.cols.size(), 0);
              vals.resize(part.cols.size());
            }
            have[c] = 1;
            vals[c] = is_string ? str
                                : Val{false, static_cast<size_t>(start - input),
                                      static_cast<size_t>(row.pos() - start)};
          }
          ++k;
          row.skip_space();
          if (row.peek() == ',') {
            row.expect(',', "','");
            continue;
          }
          row.expect('}', "',' or '}'");
          break;
        }
      }
      if (!row.at_end()) bad("not JSON: extra data after the object" + row.where());
      if (!have_path) {
        std::string found;
        for (size_t c = 0; c < have.size(); ++c) {
          if (have[c]) found += (found.empty() ? "'" : ", '") + part.cols[c].name + "'";
        }
        bad("the row has no '" + key + "' field (found: " + (found.empty() ? "nothing" : found) +
            ")");
      }
      if (path_not_string) bad("'" + key + "' must be a string");
      writer.write((path.scratch ? scratch.data() : input) + path.off, path.n, vals, have, input,
                   scratch);
    } catch (const BadRow& r) {
      note(part, line, r.reason, o.skip_bad_rows);
      if (part.failed) return;
    }
  }
}

}  // namespace loadscope::io::manifest_rows
