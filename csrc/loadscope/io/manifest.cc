#include "loadscope/io/manifest.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <system_error>
#include <thread>

#include <tbb/parallel_for.h>

#include "loadscope/core/error.h"
#include "loadscope/core/parallel.h"
#include "loadscope/io/file.h"
#include "loadscope/io/remote.h"
#include "loadscope/io/tar_index.h"
#include "loadscope/io/text.h"

namespace loadscope::io {

namespace {

constexpr size_t kMaxNotes = 8;
constexpr int kMaxDepth = 512;

struct BadRow {
  std::string reason;
};

[[noreturn]] void bad(std::string reason) {
  throw BadRow{std::move(reason)};
}

// An integer written as Python writes one (no sign but '-', no leading zeros, not "-0") that
// fits int64: such a column is kept as numbers and gives back the same text.
bool canonical_int(const char* p, size_t n, int64_t* value) {
  if (n == 0 || n > 20) return false;
  size_t i = 0;
  const bool neg = p[0] == '-';
  if (neg) ++i;
  if (i == n) return false;
  if (p[i] == '0' && (n - i > 1 || neg)) return false;
  unsigned __int128 v = 0;
  for (; i < n; ++i) {
    if (p[i] < '0' || p[i] > '9') return false;
    v = v * 10 + static_cast<unsigned>(p[i] - '0');
  }
  if (neg ? v > (static_cast<unsigned __int128>(1) << 63)
          : v > static_cast<unsigned __int128>(INT64_MAX))
    return false;
  if (value)
    *value = neg ? static_cast<int64_t>(-static_cast<__int128>(v)) : static_cast<int64_t>(v);
  return true;
}

// ---- the parsed rows of one chunk ---------------------------------------------------------

// A value of the row being parsed: bytes of the input, or of the row's scratch (decoded escapes).
struct Val {
  bool scratch = false;
  size_t off = 0, n = 0;
};

struct PartColumn {
  std::string name;    // as written (after unescaping)
  std::string member;  // lower-case
  std::vector<uint64_t> ends;
  std::string text;
  std::vector<uint64_t> absent;  // bitmap over the part's rows; empty: none absent yet
  bool all_int = true;
  bool any_present = false;

  void mark_absent(size_t row) {
    if (absent.size() * 64 <= row) absent.resize(row / 64 + 1, 0);
    absent[row >> 6] |= uint64_t{1} << (row & 63);
  }
};

struct Part {
  std::vector<uint64_t> path_ends;
  std::string path_text;
  std::vector<PartColumn> cols;
  uint64_t lines = 0;  // lines the part covers
  int64_t skipped = 0;
  std::vector<std::pair<uint64_t, std::string>> notes;  // (line within the part, reason)
  bool failed = false;                                  // raise mode: stopped at notes[0]

  size_t rows() const { return path_ends.size(); }
};

// Checks a row's path and appends the row: the path, then each column's value or absence.
class RowWriter {
 public:
  RowWriter(Part& part, const ManifestOptions& o) : part_(part), opt_(o) {}

  // Column index for a name (new columns get absent marks for the part's earlier rows).
  size_t column(const char* name, size_t n, size_t guess) {
    auto& cols = part_.cols;
    if (guess < cols.size() && cols[guess].name.size() == n &&
        std::memcmp(cols[guess].name.data(), name, n) == 0) {
      return guess;
    }
    for (size_t i = 0; i < cols.size(); ++i) {
      if (cols[i].name.size() == n && std::memcmp(cols[i].name.data(), name, n) == 0) return i;
    }
    PartColumn c;
    c.name.assign(name, n);
    c.member = c.name;
    for (auto& ch : c.member) ch = static_cast<char>(ch >= 'A' && ch <= 'Z' ? ch - 'A' + 'a' : ch);
    const size_t rows = part_.rows();
    c.ends.assign(rows, 0);
    for (size_t r = 0; r < rows; ++r) c.mark_absent(r);
    cols.push_back(std::move(c));
    return cols.size() - 1;
  }

  // vals[i]/have[i]: this row's value of column i. Throws BadRow.
  void write(const char* path, size_t path_n, const std::vector<Val>& vals,
             const std::vector<char>& have, const char* input, const std::string& scratch) {
    const std::string ext = check_path(path, path_n);
    auto bytes = [&](const Val& v) { return (v.scratch ? scratch.data() : input) + v.off; };
    for (size_t i = 0; i < part_.cols.size(); ++i) {
      if (i < have.size() && have[i] && part_.cols[i].member == ext) {
        bad("column '" + part_.cols[i].name + "' has the name of the file's own member ('" + ext +
            "')");
      }
    }
    const size_t row = part_.rows();
    part_.path_text.append(path, path_n);
    part_.path_ends.push_back(part_.path_text.size());
    for (size_t i = 0; i < part_.cols.size(); ++i) {
      PartColumn& c = part_.cols[i];
      if (i < have.size() && have[i]) {
        const char* b = bytes(vals[i]);
        c.text.append(b, vals[i].n);
        c.any_present = true;
        if (c.all_int && !canonical_int(b, vals[i].n, nullptr)) c.all_int = false;
      } else {
        c.mark_absent(row);
      }
      c.ends.push_back(c.text.size());
    }
  }

 private:
  // The file's member name; throws BadRow for a path that cannot be a sample's.
  std::string check_path(const char* p, size_t n) {
    if (n == 0) bad("the path in '" + opt_.path_key + "' is empty");
    if (std::memchr(p, '\0', n)) bad("the path contains a NUL byte");
    if (is_url(p, n)) {
      const char* host = static_cast<const char*>(std::memchr(p, ':', n)) + 3;
      const char* host_end =
          static_cast<const char*>(std::memchr(host, '/', static_cast<size_t>(p + n - host)));
      if (!host_end) host_end = p + n;
      if (std::memchr(p, '?', n) || std::memchr(p, '#', n)) {
        bad("a URL with a query string or fragment (a presigned URL) is not supported: name "
            "objects "
            "s3://bucket/key and give credentials in the environment (docs/remote.md)");
      }
      if (std::memchr(host, '@', static_cast<size_t>(host_end - host))) {
        bad("credentials in a URL are refused (they would appear in errors and logs); use the "
            "environment");
      }
    } else if (std::search(p, p + n, "://", "://" + 3) != p + n) {
      bad("'" + std::string(p, std::min<size_t>(n, 200)) +
          "': only s3://, http://, https:// URLs and local paths are supported");
    }
    std::string ext = member_name(p, n);
    if (ext.empty())
      bad("'" + std::string(p, std::min<size_t>(n, 200)) + "' has no extension to name its member");
    return ext;
  }

  Part& part_;
  const ManifestOptions& opt_;
};

// ---- JSON lines ---------------------------------------------------------------------------

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

void note(Part& part, uint64_t line, std::string reason, bool skip) {
  if (part.notes.size() < kMaxNotes) part.notes.emplace_back(line, std::move(reason));
  if (skip) {
    ++part.skipped;
  } else {
    part.failed = true;
  }
}

// Blank for Python's str.strip(): ASCII whitespace and separators, and Unicode's spaces.
bool blank(const char* b, const char* e) {
  const auto* p = reinterpret_cast<const unsigned char*>(b);
  const auto* end = reinterpret_cast<const unsigned char*>(e);
  while (p < end) {
    const unsigned c = *p;
    if (c == ' ' || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F)) {
      ++p;
    } else if (c == 0xC2 && end - p >= 2 && (p[1] == 0x85 || p[1] == 0xA0)) {  // NEL, NBSP
      p += 2;
    } else if (end - p >= 3 && ((c == 0xE1 && p[1] == 0x9A && p[2] == 0x80) ||  // U+1680
                                (c == 0xE2 && p[1] == 0x80 &&
                                 (p[2] <= 0x8A || p[2] == 0xA8 || p[2] == 0xA9 ||
                                  p[2] == 0xAF)) ||  // U+2000-200A, 2028, 2029, 202F
                                (c == 0xE2 && p[1] == 0x81 && p[2] == 0x9F) ||   // U+205F
                                (c == 0xE3 && p[1] == 0x80 && p[2] == 0x80))) {  // U+3000
      p += 3;
    } else {
      return false;
    }
  }
  return true;
}

// Parses the JSON lines in [b, e) (whole lines) into `part`.
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

// ---- CSV ------------------------------------------------------------------------------------

// One record of RFC 4180 CSV as Python's csv module reads it: fields split at commas, a field
// that starts with '"' is quoted ("" inside is a quote, newlines are kept), records end at
// \n, \r\n or \r outside quotes. Returns false at the end of the input.
struct CsvReader {
  CsvReader(const char* b, const char* e) : p(b), end(e) {}
  const char* p;
  const char* end;
  uint64_t line = 0;  // the line the last record started on
  uint64_t next_line = 1;
  std::vector<std::string> fields;
  bool empty_line = false;  // the record was a line with nothing on it (a quoted "" is not)

  bool next() {
    fields.clear();
    if (p >= end) return false;
    line = next_line;
    const char* record_start = p;
    std::string field;
    bool at_start = true;  // of a field: only there does a quote open a quoted field
    empty_line = false;
    // Past kMaxRowBytes the record is still read to its end (so that the next one starts where
    // it should) but no longer kept: a 1 GB line costs a scan, not a gigabyte.
    auto keep = [&] { return static_cast<uint64_t>(p - record_start) <= kMaxRowBytes; };
    auto finish = [&] {
      if (!keep())
        bad("the row is over the " + std::to_string(kMaxRowBytes >> 20) +
            " MiB a manifest row may have");
      fields.push_back(std::move(field));
      return true;
    };
    while (true) {
      if (p == end) return finish();
      const char c = *p;
      if (c == ',') {
        fields.push_back(std::move(field));
        field.clear();
        at_start = true;
        ++p;
      } else if (c == '\n' || c == '\r') {
        empty_line = p == record_start;
        ++p;
        if (c == '\r' && p < end && *p == '\n') ++p;
        ++next_line;
        return finish();
      } else if (c == '"' && at_start) {
        at_start = false;
        ++p;
        while (true) {
          if (p == end) bad("a quoted field is not closed before the end of the file");
          if (*p == '"') {
            if (p + 1 < end && p[1] == '"') {
              if (keep()) field += '"';
              p += 2;
              continue;
            }
            ++p;
            break;
          }
          if (*p == '\n' || (*p == '\r' && !(p + 1 < end && p[1] == '\n'))) ++next_line;
          if (keep()) field += *p;
          ++p;
        }
        if (p < end && *p != ',' && *p != '\n' && *p != '\r') {
          skip_to_line_end();
          bad("a quoted field is followed by more text before the next comma");
        }
      } else {
        if (keep()) field += c;
        at_start = false;
        ++p;
      }
    }
  }

  void skip_to_line_end() {
    while (p < end && *p != '\n' && *p != '\r') ++p;
    if (p < end) {
      if (*p == '\r' && p + 1 < end && p[1] == '\n') ++p;
      ++p;
      ++next_line;
    }
  }
};

void parse_csv(const char* b, const char* e, const ManifestOptions& o, Part& part) {
  if (e - b >= 3 && std::memcmp(b, "\xEF\xBB\xBF", 3) == 0) b += 3;  // Excel's BOM
  CsvReader r(b, e);
  std::vector<std::string> header;
  size_t path_col = 0;
  std::vector<size_t> col_of;  // field index -> part column (path_col: unused)
  RowWriter writer(part, o);
  std::vector<Val> vals;
  std::vector<char> have;
  std::string scratch;
  while (true) {
    try {
      if (!r.next()) break;
      if (r.empty_line) continue;  // as csv.DictReader
      for (const auto& f : r.fields) {
        if (!text::valid_utf8(f)) {
          bad("the row is not UTF-8");
        }
      }
      if (header.empty()) {
        header = r.fields;
        auto it = std::find(header.begin(), header.end(), o.path_key);
        if (it == header.end()) {
          std::string found;
          for (const auto& h : header) found += (found.empty() ? "'" : ", '") + h + "'";
          throw ConfigError("FileList: " + o.manifest + ":" + std::to_string(r.line) +
                            ": the header has no '" + o.path_key + "' column (found: " + found +
                            ")");
        }
        for (size_t i = 0; i < header.size(); ++i) {
          for (size_t j = 0; j < i; ++j) {
            if (header[i] == header[j]) {
              throw ConfigError("FileList: " + o.manifest + ":" + std::to_string(r.line) +
                                ": column '" + header[i] + "' appears twice in the header");
            }
          }
        }
        path_col = static_cast<size_t>(it - header.begin());
        col_of.assign(header.size(), 0);
        for (size_t i = 0; i < header.size(); ++i) {
          if (i != path_col)
            col_of[i] = writer.column(header[i].data(), header[i].size(), part.cols.size());
        }
        vals.assign(part.cols.size(), Val{});
        have.assign(part.cols.size(), 1);
        continue;
      }
      if (r.fields.size() != header.size()) {
        bad("the row has " + std::to_string(r.fields.size()) + " fields, the header " +
            std::to_string(header.size()));
      }
      scratch.clear();
      for (size_t i = 0; i < header.size(); ++i) {
        if (i == path_col) continue;
        vals[col_of[i]] = Val{true, scratch.size(), r.fields[i].size()};
        scratch += r.fields[i];
      }
      writer.write(r.fields[path_col].data(), r.fields[path_col].size(), vals, have, nullptr,
                   scratch);
    } catch (const BadRow& bad_row) {
      if (header.empty()) {  // no row can be read without its header
        throw ConfigError("FileList: " + o.manifest + ":" + std::to_string(r.line) + ": " +
                          bad_row.reason);
      }
      note(part, r.line, bad_row.reason, o.skip_bad_rows);
      if (part.failed) break;
    }
  }
  part.lines = r.next_line;
}

// ---- parts into one table ----------------------------------------------------------------

Manifest merge(std::vector<Part>& parts, const ManifestOptions& o) {
  Manifest out;
  uint64_t line0 = 0;
  for (const Part& p : parts) {
    for (const auto& n : p.notes) {
      const std::string where =
          "FileList: " + o.manifest + ":" + std::to_string(line0 + n.first) + ": ";
      if (p.failed) throw ConfigError(where + n.second);
      if (out.notes.size() < kMaxNotes) out.notes.push_back(where + n.second);
    }
    out.skipped += p.skipped;
    line0 += p.lines;
  }
  TableBuilder b;
  b.join = remote::is_url(o.root) ? SampleTable::Join::kUrl : SampleTable::Join::kLocal;
  std::string prefix = o.root;
  if (b.join == SampleTable::Join::kUrl) {
    while (!prefix.empty() && prefix.back() == '/') prefix.pop_back();
    prefix += '/';
  } else if (!prefix.empty() && prefix.back() != '/') {
    prefix += '/';
  }
  b.prefixes.push_back(prefix);
  // Where each part's rows and bytes go; the parts are then copied in parallel into arrays
  // sized once (NoInit: their pages are first touched by the copying threads).
  const size_t n_parts = parts.size();
  std::vector<size_t> row0(n_parts + 1, 0), text0(n_parts + 1, 0);
  for (size_t k = 0; k < n_parts; ++k) {
    row0[k + 1] = row0[k] + parts[k].rows();
    text0[k + 1] = text0[k] + parts[k].path_text.size();
  }
  const size_t rows = row0[n_parts];
  if (rows == 0) {
    throw ConfigError(
        "FileList: " + o.manifest + " lists no samples" +
        (out.skipped ? " (" + std::to_string(out.skipped) + " bad rows skipped)" : std::string()));
  }
  if (rows > UINT32_MAX) throw ConfigError("FileList: " + o.manifest + ": more than 2^32 rows");
  b.path_ends.resize(rows);
  b.path_text.resize(text0[n_parts]);
  tbb::parallel_for(size_t{0}, n_parts, [&](size_t k) {
    Part& p = parts[k];
    std::copy(p.path_text.begin(), p.path_text.end(),
              b.path_text.begin() + static_cast<ptrdiff_t>(text0[k]));
    for (size_t r = 0; r < p.rows(); ++r) b.path_ends[row0[k] + r] = text0[k] + p.path_ends[r];
    std::string().swap(p.path_text);
  });
  // Columns in the order they first appear; a part without one has it absent in all its rows.
  std::vector<std::string> names;
  for (const Part& p : parts) {
    for (const auto& c : p.cols) {
      if (std::find(names.begin(), names.end(), c.name) == names.end()) names.push_back(c.name);
    }
  }
  for (const std::string& name : names) {
    TableBuilder::Col col;
    std::vector<const PartColumn*> of(n_parts, nullptr);
    bool all_int = true, any = false, absent_any = false;
    std::vector<size_t> byte0(n_parts + 1, 0);
    for (size_t k = 0; k < n_parts; ++k) {
      for (const auto& c : parts[k].cols) {
        if (c.name == name) of[k] = &c;
      }
      const PartColumn* c = of[k];
      if (c) {
        col.member = c->member;
        any = any || c->any_present;
        all_int = all_int && c->all_int;
      }
      absent_any = absent_any || !c || !c->absent.empty();
      byte0[k + 1] = byte0[k] + (c ? c->text.size() : 0);
    }
    col.is_int = all_int && any;
    if (col.is_int) {
      col.ints.resize(rows);
    } else {
      col.ends.resize(rows);
      col.text.resize(byte0[n_parts]);
    }
    tbb::parallel_for(size_t{0}, n_parts, [&](size_t k) {
      const PartColumn* c = of[k];
      const size_t n = row0[k + 1] - row0[k];
      if (col.is_int) {  // absent rows hold 0; their bit says they are absent
        for (size_t r = 0; r < n; ++r) {
          int64_t v = 0;
          if (c) {
            const uint64_t s0 = r ? c->ends[r - 1] : 0;
            if (c->ends[r] > s0) canonical_int(c->text.data() + s0, c->ends[r] - s0, &v);
          }
          col.ints[row0[k] + r] = v;
        }
      } else {
        if (c)
          std::copy(c->text.begin(), c->text.end(),
                    col.text.begin() + static_cast<ptrdiff_t>(byte0[k]));
        for (size_t r = 0; r < n; ++r) col.ends[row0[k] + r] = byte0[k] + (c ? c->ends[r] : 0);
      }
    });
    if (absent_any) {  // bits of neighbouring parts share words: set in one thread
      col.absent.assign((rows + 63) / 64, 0);
      for (size_t k = 0; k < n_parts; ++k) {
        const PartColumn* c = of[k];
        for (size_t r = 0; r < row0[k + 1] - row0[k]; ++r) {
          if (c && (r / 64 >= c->absent.size() || !((c->absent[r >> 6] >> (r & 63)) & 1))) continue;
          const size_t row = row0[k] + r;
          col.absent[row >> 6] |= uint64_t{1} << (row & 63);
        }
      }
    }
    b.columns.push_back(std::move(col));
  }
  out.table = TableBuilder::finish(std::move(b));
  return out;
}

// ---- the cache file -----------------------------------------------------------------------

constexpr char kMagic[8] = {'L', 'S', 'T', 'A', 'B', 'L', 'E', '1'};

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// Writes the cache file's sections straight from the table's arrays (no copy of the table).
class Writer {
 public:
  explicit Writer(int fd) : fd_(fd) {}
  void u64(uint64_t v) { raw(&v, 8); }
  void str(const std::string& s) { bytes(s.data(), s.size()); }
  template <typename T>
  void array(View<T> v) {
    bytes(v.data, v.size * sizeof(T));
  }
  void bytes(const void* p, size_t n) {
    u64(n);
    raw(p, n);
    static const char zeros[8] = {};
    raw(zeros, (8 - n % 8) % 8);
  }

 private:
  void raw(const void* p, size_t n) {
    const char* c = static_cast<const char*>(p);
    while (n > 0) {
      const ssize_t k = ::write(fd_, c, std::min<size_t>(n, size_t{1} << 30));
      if (k < 0 && errno == EINTR) continue;
      if (k <= 0) throw ReadFailure(std::string("write: ") + std::strerror(errno));
      c += k;
      n -= static_cast<size_t>(k);
    }
  }
  int fd_;
};

class Reader {
 public:
  Reader(const char* p, size_t n) : p_(p), end_(p + n) {}
  uint64_t u64() {
    need(8);
    uint64_t v;
    std::memcpy(&v, p_, 8);
    p_ += 8;
    return v;
  }
  std::string str() {
    const auto v = array<char>();
    return std::string(v.data, v.size);
  }
  template <typename T>
  View<T> array() {
    const uint64_t n = u64();
    if (n % sizeof(T) || n > (uint64_t{1} << 62)) throw BadRow{"bad array"};
    need(n + (8 - n % 8) % 8);  // the padding too, before the pointer moves past it
    View<T> v(reinterpret_cast<const T*>(p_), n / sizeof(T));
    p_ += n + (8 - n % 8) % 8;
    return v;
  }
  bool done() const { return p_ == end_; }

 private:
  void need(uint64_t n) {
    if (static_cast<uint64_t>(end_ - p_) < n) throw BadRow{"truncated"};
  }
  const char* p_;
  const char* end_;
};

struct Mapping {
  void* data = MAP_FAILED;
  size_t size = 0;
  ~Mapping() {
    if (data != MAP_FAILED) munmap(data, size);
  }
};

// Maps a local file read-only; nullptr when it cannot be opened. Throws ReadFailure for other
// errors. populate: fault every page in now (one batched pass in the kernel instead of a fault per
// 4 KiB page in the parser's threads) — for a manifest read whole, not for a cache file read
// lazily.
std::shared_ptr<Mapping> map_file(const std::string& path, bool must_exist, bool populate = false) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (!must_exist && errno == ENOENT) return nullptr;
    throw ReadFailure(path + ": " + std::strerror(errno));
  }
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw ReadFailure(path + ": not a regular file");
  }
  auto m = std::make_shared<Mapping>();
  m->size = static_cast<size_t>(st.st_size);
  if (m->size > 0) {
    m->data = mmap(nullptr, m->size, PROT_READ, MAP_PRIVATE | (populate ? MAP_POPULATE : 0), fd, 0);
    if (m->data == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      throw ReadFailure(path + ": mmap: " + std::strerror(err));
    }
  }
  ::close(fd);
  return m;
}

bool monotonic(const Strings& s) {
  uint64_t prev = 0;
  for (size_t i = 0; i < s.ends.size; ++i) {
    if (s.ends[i] < prev) return false;
    prev = s.ends[i];
  }
  return prev == s.text.size;
}

void serialize(Writer& w, const Manifest& m, const std::string& identity) {
  const SampleTable& t = *m.table;
  w.u64(0);  // replaced by the magic once everything else is written
  w.str(identity);
  w.u64(static_cast<uint64_t>(m.skipped));
  w.u64(m.notes.size());
  for (const auto& n : m.notes) w.str(n);
  w.u64(t.prefixes.size());
  for (const auto& p : t.prefixes) w.str(p);
  w.u64(static_cast<uint64_t>(t.join));
  w.array(t.prefix);
  w.array(t.paths.ends);
  w.array(t.paths.text);
  w.array(t.extras.rows);
  w.array(t.extras.names.ends);
  w.array(t.extras.names.text);
  w.u64(t.columns.size());
  for (const auto& c : t.columns) {
    w.str(c.member);
    w.u64(c.is_int);
    w.array(c.ints);
    w.array(c.strings.ends);
    w.array(c.strings.text);
    w.array(c.absent);
  }
}

// The table in a cache file, or nothing when the file is missing, stale or damaged.
bool deserialize(const std::shared_ptr<Mapping>& map, const std::string& identity, Manifest& out) {
  if (!map || map->size < 8 || std::memcmp(map->data, kMagic, 8) != 0) return false;
  try {
    Reader r(static_cast<const char*>(map->data) + 8, map->size - 8);
    if (r.str() != identity) return false;
    auto t = std::make_shared<SampleTable>();
    out.skipped = static_cast<int64_t>(r.u64());
    const uint64_t notes = r.u64();
    if (notes > kMaxNotes) return false;
    out.notes.clear();
    for (uint64_t i = 0; i < notes; ++i) out.notes.push_back(r.str());
    const uint64_t prefixes = r.u64();
    if (prefixes == 0 || prefixes > UINT32_MAX) return false;
    for (uint64_t i = 0; i < prefixes; ++i) t->prefixes.push_back(r.str());
    t->join = r.u64() ? SampleTable::Join::kUrl : SampleTable::Join::kLocal;
    t->prefix = r.array<uint32_t>();
    t->paths.ends = r.array<uint64_t>();
    t->paths.text = r.array<char>();
    t->extras.rows = r.array<uint32_t>();
    t->extras.names.ends = r.array<uint64_t>();
    t->extras.names.text = r.array<char>();
    const size_t rows = t->paths.ends.size;
    if (!monotonic(t->paths) || !monotonic(t->extras.names) || rows == 0) return false;
    if (!t->prefix.empty()) return false;  // a manifest has one prefix
    if (t->extras.rows.size != t->extras.names.ends.size || !t->extras.rows.empty()) return false;
    const uint64_t cols = r.u64();
    if (cols > (uint64_t{1} << 20)) return false;
    for (uint64_t i = 0; i < cols; ++i) {
      Column c;
      c.member = r.str();
      c.is_int = r.u64() != 0;
      c.ints = r.array<int64_t>();
      c.strings.ends = r.array<uint64_t>();
      c.strings.text = r.array<char>();
      c.absent = r.array<uint64_t>();
      if (c.is_int ? c.ints.size != rows : (c.strings.ends.size != rows || !monotonic(c.strings)))
        return false;
      if (!c.absent.empty() && c.absent.size != (rows + 63) / 64) return false;
      t->columns.push_back(std::move(c));
    }
    if (!r.done()) return false;
    t->storage = map;
    out.table = t;
    return true;
  } catch (const BadRow&) {
    return false;
  }
}

// Writes the cache file under a temporary name and renames it into place, so that a reader
// (another rank) sees the old file, no file, or the whole new one. Temporary files that
// processes of this host left when they died are removed first (the host is in the name: on a
// shared file system another node's live writer must not lose its file). Throws ReadFailure.
void write_cache(const std::string& path, const Manifest& m, const std::string& identity) {
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0) std::strcpy(host, "host");
  for (char* c = host; *c; ++c) {
    if (*c == '.' || *c == '/') *c = '_';
  }
  const size_t slash = path.find_last_of('/');
  const std::string dir = path.substr(0, slash);
  const std::string ours = path.substr(slash + 1) + ".tmp." + host + ".";
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      const std::string name = e->d_name;
      if (name.compare(0, ours.size(), ours) != 0) continue;
      const long pid = std::strtol(name.c_str() + ours.size(), nullptr, 10);
      if (pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH)
        ::unlink((dir + "/" + name).c_str());
    }
    closedir(d);
  }
  static std::atomic<uint64_t> counter{0};
  const std::string tmp =
      dir + "/" + ours + std::to_string(getpid()) + "." + std::to_string(counter++);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) throw ReadFailure(tmp + ": " + std::strerror(errno));
  try {
    Writer w(fd);
    serialize(w, m, identity);
    // The magic goes in last: a file cut short by a crash never looks complete.
    if (::pwrite(fd, kMagic, 8, 0) != 8)
      throw ReadFailure(std::string("write: ") + std::strerror(errno));
  } catch (const ReadFailure& e) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw ReadFailure(tmp + ": " + e.what());
  }
  ::close(fd);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw ReadFailure(path + ": " + std::strerror(err));
  }
}

// Cache files being written in the background. The process waits for them when it exits (a
// short script, a benchmark's probe or a crash-looping job would otherwise never leave one);
// a forked child, which has none of its parent's threads, does not.
class BackgroundWrites {
 public:
  // Runs fn in a thread; false when no thread could be started (the caller writes itself).
  template <typename F>
  bool start(F&& fn) {
    std::lock_guard<std::mutex> lock(mu_);
    reap();
    auto done = std::make_shared<std::atomic<bool>>(false);
    try {
      writers_.push_back(Writer{std::thread([fn = std::forward<F>(fn), done] {
                                  fn();
                                  done->store(true);
                                }),
                                getpid(), done});
    } catch (const std::system_error&) {
      return false;
    }
    return true;
  }
  ~BackgroundWrites() {
    for (auto& w : writers_) finish(w, true);
  }

 private:
  struct Writer {
    std::thread thread;
    pid_t pid;  // the process that started it: a forked child has none of its threads
    std::shared_ptr<std::atomic<bool>> done;
  };
  static void finish(Writer& w, bool wait) {
    if (!w.thread.joinable()) return;
    if (w.pid != getpid()) {
      w.thread.detach();
    } else if (wait || w.done->load()) {
      w.thread.join();
    }
  }
  void reap() {  // joins finished writers, so that a long job does not collect them
    for (auto& w : writers_) finish(w, false);
    writers_.erase(std::remove_if(writers_.begin(), writers_.end(),
                                  [](const Writer& w) { return !w.thread.joinable(); }),
                   writers_.end());
  }
  std::mutex mu_;
  std::vector<Writer> writers_;
};

BackgroundWrites& background_writes() {
  static BackgroundWrites writes;
  return writes;
}

}  // namespace

ManifestFormat manifest_format(const std::string& manifest) {
  const size_t dot = manifest.rfind('.');
  std::string ext = dot == std::string::npos ? "" : manifest.substr(dot + 1);
  for (auto& c : ext) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  if (ext == "jsonl" || ext == "ndjson") return ManifestFormat::kJsonl;
  if (ext == "csv") return ManifestFormat::kCsv;
  throw ConfigError("FileList: " + manifest + ": a manifest must end in .jsonl, .ndjson or .csv");
}

namespace {

Manifest parse_in_arena(const char* data, size_t size, ManifestFormat format,
                        const ManifestOptions& o) {
  std::vector<Part> parts;
  if (format == ManifestFormat::kCsv) {
    parts.resize(1);
    parse_csv(data, data + size, o, parts[0]);
  } else {
    const char* b = data;
    const char* e = data + size;
    if (size >= 3 && std::memcmp(b, "\xEF\xBB\xBF", 3) == 0) b += 3;
    // Chunks of about 4 MiB that end at line ends, parsed in parallel.
    std::vector<const char*> cuts{b};
    constexpr size_t kChunk = size_t{4} << 20;
    while (static_cast<size_t>(e - cuts.back()) > kChunk) {
      const char* at = cuts.back() + kChunk;
      const char* nl = static_cast<const char*>(std::memchr(at, '\n', static_cast<size_t>(e - at)));
      if (!nl || nl + 1 >= e) break;
      cuts.push_back(nl + 1);
    }
    cuts.push_back(e);
    parts.resize(cuts.size() - 1);
    tbb::parallel_for(size_t{0}, parts.size(),
                      [&](size_t i) { parse_jsonl(data, cuts[i], cuts[i + 1], o, parts[i]); });
  }
  return merge(parts, o);
}

}  // namespace

Manifest parse_manifest(const char* data, size_t size, ManifestFormat format,
                        const ManifestOptions& o) {
  return run_parallel([&] { return parse_in_arena(data, size, format, o); });
}

Manifest read_manifest(const ManifestOptions& o) {
  const ManifestFormat format = manifest_format(o.manifest);
  const bool remote = remote::is_url(o.manifest);
  // What the table depends on; a cache file written under another identity is stale.
  uint64_t size = 0;
  std::string version;
  try {
    RandomAccess file(o.manifest);
    size = file.size();
    version = file.version();
  } catch (const ReadFailure& e) {
    throw ConfigError("FileList: " + (remote ? remote::redact(o.manifest) : o.manifest) + ": " +
                      e.what());
  }
  uint32_t fingerprint = 0;
  try {
    fingerprint = shard_fingerprint(o.manifest, size);
  } catch (const ReadFailure& e) {
    throw ConfigError("FileList: " + (remote ? remote::redact(o.manifest) : o.manifest) + ": " +
                      e.what());
  }
  // kParser changes whenever what a row becomes changes, so that older cache files are stale.
  constexpr const char* kParser = "parser 1";
  const std::string options =
      o.manifest + '\n' + o.root + '\n' + o.path_key + '\n' + (o.skip_bad_rows ? "skip" : "raise");
  const std::string source =
      std::to_string(size) + '\n' + version + '\n' + std::to_string(fingerprint);
  const std::string identity = std::string(kParser) + '\n' + options + '\n' + source;
  std::string cache_path;
  // A remote object without an ETag has no version to key a cache file by.
  if (!o.cache_dir.empty() && !(remote && version.empty())) {
    const size_t slash = o.manifest.find_last_of('/');
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(fnv1a(options)));
    cache_path = o.cache_dir + "/" + hex + "-" +
                 o.manifest.substr(slash == std::string::npos ? 0 : slash + 1) + ".table";
    Manifest cached;
    std::shared_ptr<Mapping> map;
    try {
      map = map_file(cache_path, false);
    } catch (const ReadFailure&) {
      map = nullptr;  // unreadable: parse and try to replace it
    }
    if (deserialize(map, identity, cached)) {
      cached.cache_path = cache_path;
      cached.from_cache = true;
      cached.source = source;
      return cached;
    }
  }
  Manifest m;
  if (remote) {
    std::string bytes;
    try {
      read_file(o.manifest, bytes);
    } catch (const ReadFailure& e) {
      throw ConfigError("FileList: " + remote::redact(o.manifest) + ": " + e.what());
    }
    m = parse_manifest(bytes.data(), bytes.size(), format, o);
  } else {
    std::shared_ptr<Mapping> map;
    try {
      map = map_file(o.manifest, true, true);
    } catch (const ReadFailure& e) {
      throw ConfigError("FileList: " + std::string(e.what()));
    }
    if (map->size) madvise(map->data, map->size, MADV_SEQUENTIAL);
    m = parse_manifest(static_cast<const char*>(map->size ? map->data : nullptr), map->size, format,
                       o);
  }
  m.source = source;
  if (!cache_path.empty()) {
    m.cache_path = cache_path;
    if (m.table->bytes() < kSyncCacheBytes) {
      try {
        write_cache(cache_path, m, identity);
      } catch (const ReadFailure& e) {
        m.cache_path.clear();
        m.cache_error = e.what();
      }
    } else {
      // A large table is written behind the caller's back: the loader is ready now, and the
      // next start finds the file (a failure is only reported, on stderr: the next start parses
      // again). The thread holds the table, so the arrays outlive the caller's.
      m.cache_pending = background_writes().start([m, cache_path, identity] {
        try {
          write_cache(cache_path, m, identity);
        } catch (const ReadFailure& e) {
          std::fprintf(stderr, "loadscope: could not write the manifest cache: %s\n", e.what());
        }
      });
      if (!m.cache_pending) {
        try {
          write_cache(cache_path, m, identity);
        } catch (const ReadFailure& e) {
          m.cache_path.clear();
          m.cache_error = e.what();
        }
      }
    }
  }
  return m;
}

}  // namespace loadscope::io
