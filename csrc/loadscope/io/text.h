// Text checks shared by the readers of text: manifests (io/manifest_jsonl.cc) and the Text and
// Json fields (pipeline/plain_fields.cc). One UTF-8 validator and one JSON scanner, so that a row
// and a member are held to the same rules: those of Python's json module.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>

namespace loadscope::io::text {

// True when `s` is UTF-8 as RFC 3629 defines it: no overlong forms, no surrogates (U+D800 to
// U+DFFF), nothing above U+10FFFF, no truncated sequence. Eight ASCII bytes at a time.
bool valid_utf8(std::string_view s);

// Appends code point `cp` (at most U+10FFFF, not a surrogate: the caller checks) as UTF-8.
void append_utf8(std::string& out, uint32_t cp);

// Thrown by JsonScanner: what is wrong, where ("unexpected token at column 7 ('x')").
struct JsonError {
  std::string what;
};

// A string value: bytes of the input when it has no escapes, else of the scratch (decoded).
struct JsonString {
  bool scratch = false;
  size_t off = 0, n = 0;
};

constexpr int kJsonMaxDepth = 512;

// Scans JSON in [begin, end) as strictly as json.loads reads it, NaN, Infinity and -Infinity
// included (json.dumps writes them). The manifest reader walks a row's object with it, keeping
// the values it wants; a Json field checks a whole document with check_json().
class JsonScanner {
 public:
  // scratch: where strings with escapes are decoded; nullptr: they are only checked, and a lone
  // surrogate escape (which json.loads reads into a str, but UTF-8 cannot hold) is accepted.
  JsonScanner(const char* begin, const char* end, std::string* scratch);

  void skip_space();
  bool at_end();  // after spaces
  char peek() const { return p_ < end_ ? *p_ : '\0'; }
  const char* pos() const { return p_; }
  void expect(char c, const char* what);  // after spaces; `what` names it in the error
  std::string where() const;              // " at column 7 ('x')", " at the end of the line"

  // The string at pos() (a '"'), offsets relative to `input` (or to the scratch).
  JsonString string(const char* input);
  // Any value, checked; returns where it starts (pos() is then past it). *is_string: it is a
  // string, in *str.
  const char* value(int depth, const char* input, bool* is_string, JsonString* str);

 private:
  [[noreturn]] void fail(const std::string& what) const { throw JsonError{what}; }
  uint32_t hex4();
  void literal(const char* word);
  void number();
  void put(char c) {
    if (scratch_) *scratch_ += c;
  }

  const char* p_;
  const char* end_;
  const char* begin_;
  std::string* scratch_;
};

// "" when `doc` (all of it, spaces around allowed) is one JSON value json.loads reads, else why.
std::string check_json(std::string_view doc);

// The scanner's members, here so that the manifest reader's row loop inlines them: out of line
// they cost 17% of its parse time (a 3-million-row manifest, 0.68 s -> 0.80 s).

inline bool json_space(char c) {
  return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

inline JsonScanner::JsonScanner(const char* begin, const char* end, std::string* scratch)
    : p_(begin), end_(end), begin_(begin), scratch_(scratch) {}

inline void JsonScanner::skip_space() {
  while (p_ < end_ && json_space(*p_)) ++p_;
}

inline bool JsonScanner::at_end() {
  skip_space();
  return p_ == end_;
}

inline void JsonScanner::expect(char c, const char* what) {
  skip_space();
  if (p_ == end_ || *p_ != c) fail(std::string("expected ") + what + where());
  ++p_;
}

inline std::string JsonScanner::where() const {
  if (p_ == end_) return " at the end of the line";
  const unsigned char c = static_cast<unsigned char>(*p_);
  const size_t col = static_cast<size_t>(p_ - begin_) + 1;
  char buf[48];
  if (c >= 0x20 && c < 0x7f) {
    std::snprintf(buf, sizeof buf, " at column %zu ('%c')", col, c);
  } else {
    std::snprintf(buf, sizeof buf, " at column %zu", col);
  }
  return buf;
}

inline JsonString JsonScanner::string(const char* input) {
  ++p_;  // the opening quote
  const char* start = p_;
  while (p_ < end_) {  // the common case: no escapes, the bytes are the value
    const unsigned char c = static_cast<unsigned char>(*p_);
    if (c == '"') {
      JsonString v{false, static_cast<size_t>(start - input), static_cast<size_t>(p_ - start)};
      ++p_;
      return v;
    }
    if (c == '\\') break;
    if (c < 0x20) fail("a control character inside a string" + where());
    ++p_;
  }
  if (p_ == end_) fail("unterminated string");
  JsonString v{true, scratch_ ? scratch_->size() : 0, 0};
  if (scratch_) scratch_->append(start, static_cast<size_t>(p_ - start));
  while (true) {
    if (p_ == end_) fail("unterminated string");
    const unsigned char c = static_cast<unsigned char>(*p_);
    if (c == '"') {
      ++p_;
      break;
    }
    if (c < 0x20) fail("a control character inside a string" + where());
    if (c != '\\') {
      put(static_cast<char>(c));
      ++p_;
      continue;
    }
    if (end_ - p_ < 2) fail("unterminated string");
    const char e = p_[1];
    p_ += 2;
    switch (e) {
      case '"': put('"'); break;
      case '\\': put('\\'); break;
      case '/': put('/'); break;
      case 'b': put('\b'); break;
      case 'f': put('\f'); break;
      case 'n': put('\n'); break;
      case 'r': put('\r'); break;
      case 't': put('\t'); break;
      case 'u': {
        uint32_t cp = hex4();
        if (!scratch_) break;                // checked only: json.loads takes a lone surrogate too
        if (cp >= 0xD800 && cp <= 0xDBFF) {  // a surrogate pair gives one code point
          if (end_ - p_ < 6 || p_[0] != '\\' || p_[1] != 'u')
            fail("a lone surrogate (\\u escape)" + where());
          p_ += 2;
          const uint32_t lo = hex4();
          if (lo < 0xDC00 || lo > 0xDFFF) fail("a lone surrogate (\\u escape)" + where());
          cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
          fail("a lone surrogate (\\u escape)" + where());
        }
        append_utf8(*scratch_, cp);
        break;
      }
      default: fail("invalid escape" + where());
    }
  }
  v.n = scratch_ ? scratch_->size() - v.off : 0;
  return v;
}

inline const char* JsonScanner::value(int depth, const char* input, bool* is_string,
                                      JsonString* str) {
  skip_space();
  if (p_ == end_) fail("a value is missing" + where());
  const char* start = p_;
  if (is_string) *is_string = false;
  switch (*p_) {
    case '"': {
      const JsonString v = string(input);
      if (is_string) {
        *is_string = true;
        *str = v;
      }
      return start;
    }
    case '{':
    case '[': {
      if (depth >= kJsonMaxDepth) fail("nested deeper than 512 levels");
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
          if (peek() != '"') fail("expected a key" + where());
          const size_t mark = scratch_ ? scratch_->size() : 0;
          string(input);
          if (scratch_) scratch_->resize(mark);  // nested keys are checked, not kept
          expect(':', "':'");
        }
        const size_t mark = scratch_ ? scratch_->size() : 0;
        value(depth + 1, input, nullptr, nullptr);
        if (scratch_) scratch_->resize(mark);
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

inline uint32_t JsonScanner::hex4() {
  if (end_ - p_ < 4) fail("a short \\u escape");
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
      fail("invalid \\u escape" + where());
  }
  return v;
}

inline void JsonScanner::literal(const char* word) {
  const size_t n = std::strlen(word);
  if (static_cast<size_t>(end_ - p_) < n || std::memcmp(p_, word, n) != 0)
    fail("unexpected token" + where());
  p_ += n;
}

inline void JsonScanner::number() {
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
    fail("unexpected token" + where());
  }
  if (peek() == '.') {
    ++p_;
    if (!digits()) fail("a digit must follow '.'" + where());
  }
  if (peek() == 'e' || peek() == 'E') {
    ++p_;
    if (peek() == '+' || peek() == '-') ++p_;
    if (!digits()) fail("an exponent needs digits" + where());
  }
}

}  // namespace loadscope::io::text
