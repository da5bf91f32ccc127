// JSON lines manifests: one object per line, checked as strictly as Python's json module.
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "loadscope/core/error.h"
#include "loadscope/io/manifest_rows.h"
#include "loadscope/io/text.h"

namespace loadscope::io::manifest_rows {

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
      text::JsonScanner row(line_start, line_end, &scratch);
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
          const text::JsonString name = row.string(input);
          row.expect(':', "':'");
          const char* name_bytes = (name.scratch ? scratch.data() : input) + name.off;
          bool is_string = false;
          text::JsonString str;
          const char* start = row.value(1, input, &is_string, &str);
          // Re-read the name: value() may have grown scratch (the pointer moved, not the offset).
          name_bytes = (name.scratch ? scratch.data() : input) + name.off;
          if (name.n == key.size() && std::memcmp(name_bytes, key.data(), name.n) == 0) {
            have_path = true;  // a repeated key: the last one counts, as in Python's json
            path_not_string = !is_string;
            path = Val{str.scratch, str.off, str.n};
          } else {
            const size_t c = writer.column(name_bytes, name.n, k);
            if (have.size() < part.cols.size()) {
              have.resize(part.cols.size(), 0);
              vals.resize(part.cols.size());
            }
            have[c] = 1;
            vals[c] = is_string ? Val{str.scratch, str.off, str.n}
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
    } catch (const text::JsonError& e) {
      note(part, line, "not JSON: " + e.what, o.skip_bad_rows);
      if (part.failed) return;
    } catch (const BadRow& r) {
      note(part, line, r.reason, o.skip_bad_rows);
      if (part.failed) return;
    }
  }
}

}  // namespace loadscope::io::manifest_rows
