#include "loadscope/io/table.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "loadscope/core/error.h"

namespace loadscope::io {

std::string member_name(const char* path, size_t n) {
  size_t base = n;
  while (base > 0 && path[base - 1] != '/') --base;
  size_t dot = n;
  while (dot > base && path[dot - 1] != '.') --dot;
  if (dot == base) return {};  // no dot in the last component
  --dot;                       // at the last dot
  size_t first = base;         // os.path.splitext: leading dots do not start an extension
  while (first < dot && path[first] == '.') ++first;
  if (first == dot) return {};
  std::string ext(path + dot + 1, n - dot - 1);
  for (auto& c : ext) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  return ext;
}

std::string SampleTable::path(size_t row) const {
  const char* p = paths.begin(row);
  size_t n = paths.length(row);
  if (has_scheme(p, n)) {
    std::string url(p, n);
    const size_t colon = url.find("://");
    const std::string scheme = url.substr(0, colon);
    if (!scheme_tag.empty() && (scheme == "s3" || scheme == "http" || scheme == "https")) {
      url.insert(colon, scheme_tag);
    }
    return url;
  }
  if (join == Join::kUrl) {
    while (n > 0 && *p == '/') ++p, --n;
  } else if (n > 0 && *p == '/') {
    return std::string(p, n);
  }
  const std::string& pre = prefixes[prefix.empty() ? 0 : prefix[row]];
  std::string out;
  out.reserve(pre.size() + n);
  out.append(pre).append(p, n);
  return out;
}

void SampleTable::sample(size_t row, Sample& out) const {
  out.key = path(row);
  out.members.clear();
  Member file;
  file.name = member_name(out.key.data(), out.key.size());
  file.is_path = true;
  file.path = out.key;
  out.members.push_back(std::move(file));
  if (!extras.rows.empty()) {
    const uint32_t* b = extras.rows.data;
    const uint32_t* e = b + extras.rows.size;
    const auto range = std::equal_range(b, e, static_cast<uint32_t>(row));
    const std::string& pre = prefixes[prefix.empty() ? 0 : prefix[row]];
    for (const uint32_t* it = range.first; it != range.second; ++it) {
      const size_t k = static_cast<size_t>(it - b);
      Member m;
      m.is_path = true;
      m.path = pre + extras.names.at(k);
      m.name = member_name(m.path.data(), m.path.size());
      out.members.push_back(std::move(m));
    }
  }
  for (const auto& c : columns) {
    if (!c.present(row)) continue;
    Member m;
    m.name = c.member;
    m.data = c.is_int ? std::to_string(c.ints[row]) : c.strings.at(row);
    out.members.push_back(std::move(m));
  }
}

uint64_t SampleTable::bytes() const {
  uint64_t total = prefix.size * 4 + paths.ends.size * 8 + paths.text.size + extras.rows.size * 4 +
                   extras.names.ends.size * 8 + extras.names.text.size;
  for (const auto& s : prefixes) total += s.size();
  for (const auto& c : columns) {
    total += c.ints.size * 8 + c.strings.ends.size * 8 + c.strings.text.size + c.absent.size * 8;
  }
  return total;
}

uint64_t SampleTable::digest() const {
  uint64_t h = 0x9e3779b97f4a7c15ull;
  auto add = [&h](const void* data, size_t n) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (; n >= 8; p += 8, n -= 8) {
      uint64_t w;
      std::memcpy(&w, p, 8);
      h = mix64(h ^ w);
    }
    uint64_t w = n;
    if (n) std::memcpy(&w, p, n);  // the tail and its length
    h = mix64(h ^ w ^ (uint64_t{n} << 56));
  };
  for (const auto& s : prefixes) add(s.data(), s.size() + 1);
  add(prefix.data, prefix.size * sizeof(uint32_t));
  add(paths.ends.data, paths.ends.size * sizeof(uint64_t));
  add(paths.text.data, paths.text.size);
  add(extras.rows.data, extras.rows.size * sizeof(uint32_t));
  add(extras.names.text.data, extras.names.text.size);
  return h;
}

std::shared_ptr<const SampleTable> TableBuilder::finish(TableBuilder&& b) {
  auto held = std::make_shared<TableBuilder>(std::move(b));
  auto t = std::make_shared<SampleTable>();
  t->prefixes = held->prefixes;
  t->prefix = View<uint32_t>(held->prefix);
  t->join = held->join;
  t->paths = Strings{View<uint64_t>(held->path_ends),
                     View<char>(held->path_text.data(), held->path_text.size())};
  t->extras.rows = View<uint32_t>(held->extra_rows);
  t->extras.names = Strings{View<uint64_t>(held->extra_ends),
                            View<char>(held->extra_text.data(), held->extra_text.size())};
  for (const auto& c : held->columns) {
    Column col;
    col.member = c.member;
    col.is_int = c.is_int;
    col.ints = View<int64_t>(c.ints);
    col.strings = Strings{View<uint64_t>(c.ends), View<char>(c.text.data(), c.text.size())};
    col.absent = View<uint64_t>(c.absent);
    t->columns.push_back(std::move(col));
  }
  if (t->prefixes.empty()) t->prefixes.emplace_back();
  t->storage = held;
  return t;
}

std::shared_ptr<const SampleTable> table_of_files(std::string_view paths, const int64_t* labels,
                                                  size_t n_labels, const std::string& member) {
  TableBuilder b;
  for (size_t start = 0; !paths.empty();) {
    const size_t end = std::min(paths.find('\0', start), paths.size());
    if (end == start) {
      throw ConfigError("file " + std::to_string(b.path_ends.size()) +
                        " of the list is an empty path");
    }
    b.add_path(paths.data() + start, end - start);
    if (end == paths.size()) break;
    start = end + 1;
  }
  if (b.path_ends.size() > UINT32_MAX) throw ConfigError("more than 2^32 files in one list");
  if (n_labels) {
    if (n_labels != b.path_ends.size()) {
      throw ConfigError(std::to_string(n_labels) + " labels for " +
                        std::to_string(b.path_ends.size()) + " files");
    }
    TableBuilder::Col col;
    col.member = member;
    col.is_int = true;
    col.ints.assign(labels, labels + n_labels);
    b.columns.push_back(std::move(col));
  }
  return TableBuilder::finish(std::move(b));
}

namespace {

// Row `row`'s value of `member` as the sample gives it ("" with a flag when absent).
std::pair<bool, std::string> member_value(const SampleTable& t, size_t row,
                                          const std::string& member) {
  for (const auto& c : t.columns) {
    if (c.member != member) continue;
    if (!c.present(row)) return {false, {}};
    return {true, c.is_int ? std::to_string(c.ints[row]) : c.strings.at(row)};
  }
  return {false, {}};
}

}  // namespace

int64_t first_difference(const SampleTable& a, const SampleTable& b, const std::string& member) {
  const int64_t n = std::min(a.rows(), b.rows());
  for (int64_t i = 0; i < n; ++i) {
    const auto row = static_cast<size_t>(i);
    if (a.path(row) != b.path(row) ||
        member_value(a, row, member) != member_value(b, row, member)) {
      return i;
    }
  }
  return a.rows() == b.rows() ? -1 : n;
}

TableSource::TableSource(std::shared_ptr<const SampleTable> table) : table_(std::move(table)) {
  if (!table_) throw ConfigError("TableSource needs a table");
}

void TableSource::start_epoch(const EpochOrder& order) {
  cursor_ = 0;
  order_ = Permutation(static_cast<uint64_t>(table_->rows()), order.shuffle, order.seed,
                       static_cast<uint64_t>(order.epoch), RngStream::kOrder);
}

bool TableSource::next(Sample& out) {
  if (cursor_ >= static_cast<uint64_t>(table_->rows())) return false;
  table_->sample(order_(cursor_), out);
  ++cursor_;
  return true;
}

int64_t TableSource::skip(int64_t n) {
  const int64_t left = table_->rows() - static_cast<int64_t>(cursor_);
  const int64_t done = std::max<int64_t>(0, std::min(n, left));
  cursor_ += static_cast<uint64_t>(done);
  return done;
}

}  // namespace loadscope::io
