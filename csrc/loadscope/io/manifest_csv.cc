// CSV manifests, read as Python's csv module reads them.
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "loadscope/core/error.h"
#include "loadscope/io/manifest_rows.h"
#include "loadscope/io/text.h"

namespace loadscope::io::manifest_rows {

namespace {

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

}  // namespace

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

}  // namespace loadscope::io::manifest_rows
