#pragma once
// The rows of a manifest chunk as its parser writes them (manifest_jsonl.cc, manifest_csv.cc),
// before manifest.cc merges the chunks into one table: internal to the manifest reader.

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "loadscope/io/manifest.h"
#include "loadscope/io/table.h"

namespace loadscope::io::manifest_rows {

constexpr size_t kMaxNotes = 8;

struct BadRow {
  std::string reason;
};

[[noreturn]] inline void bad(std::string reason) {
  throw BadRow{std::move(reason)};
}

// An integer written as Python writes one (no sign but '-', no leading zeros, not "-0") that
// fits int64: such a column is kept as numbers and gives back the same text.
inline bool canonical_int(const char* p, size_t n, int64_t* value) {
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
    if (has_scheme(p, n)) {
      const std::string head(p, std::min<size_t>(n, 64));  // holds the scheme
      if (!find_storage(head))
        bad("'" + std::string(p, std::min<size_t>(n, 200)) + "': " + no_storage(head));
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
    }
    std::string ext = member_name(p, n);
    if (ext.empty())
      bad("'" + std::string(p, std::min<size_t>(n, 200)) + "' has no extension to name its member");
    return ext;
  }

  Part& part_;
  const ManifestOptions& opt_;
};

inline void note(Part& part, uint64_t line, std::string reason, bool skip) {
  if (part.notes.size() < kMaxNotes) part.notes.emplace_back(line, std::move(reason));
  if (skip) {
    ++part.skipped;
  } else {
    part.failed = true;
  }
}

// Blank for Python's str.strip(): ASCII whitespace and separators, and Unicode's spaces.
inline bool blank(const char* b, const char* e) {
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

// Parses the JSON lines in [b, e) (whole lines; value offsets count from `input`) into `part`.
void parse_jsonl(const char* input, const char* b, const char* e, const ManifestOptions& o,
                 Part& part);
// Parses a whole CSV manifest into `part` (one pass: a quoted field may hold newlines).
void parse_csv(const char* b, const char* e, const ManifestOptions& o, Part& part);

}  // namespace loadscope::io::manifest_rows
