#include "loadscope/io/manifest.h"

#include <sys/mman.h>

#include <cstdio>
#include <cstring>
#include <vector>

#include <tbb/parallel_for.h>

#include "loadscope/core/error.h"
#include "loadscope/core/parallel.h"
#include "loadscope/io/file.h"
#include "loadscope/io/manifest_cache.h"
#include "loadscope/io/manifest_rows.h"
#include "loadscope/io/remote.h"
#include "loadscope/io/tar_index.h"

namespace loadscope::io {

using manifest_rows::canonical_int;
using manifest_rows::kMaxNotes;
using manifest_rows::parse_csv;
using manifest_rows::parse_jsonl;
using manifest_rows::Part;
using manifest_rows::PartColumn;

namespace {

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
  b.join = has_scheme(o.root.data(), o.root.size()) ? SampleTable::Join::kUrl
                                                    : SampleTable::Join::kLocal;
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

namespace {

// Rows that are URLs are read with the settings the manifest (or its root) was named with: the
// tag of its scheme, "s3+r1f2e3d4c5://" (loadscope.Remote).
void tag_rows(Manifest& m, const ManifestOptions& o) {
  std::string tag = o.scheme_tag;
  for (const std::string* name : {&o.root, &o.manifest}) {
    const std::string scheme = scheme_of(*name);
    const size_t plus = scheme.find('+');
    if (tag.empty() && plus != std::string::npos) tag = scheme.substr(plus);
  }
  if (tag.empty()) return;
  auto t = std::make_shared<SampleTable>(*m.table);  // views and the storage they point into
  t->scheme_tag = tag;
  m.table = std::move(t);
}

Manifest read_uncached(const ManifestOptions& o);

}  // namespace

Manifest read_manifest(const ManifestOptions& o) {
  Manifest m = read_uncached(o);
  tag_rows(m, o);
  return m;
}

namespace {

Manifest read_uncached(const ManifestOptions& o) {
  const ManifestFormat format = manifest_format(o.manifest);
  const bool remote = is_remote(o.manifest);
  // What the table depends on; a cache file written under another identity is stale.
  uint64_t size = 0;
  std::string version;
  try {
    const ObjectInfo info = storage_for(o.manifest).stat(o.manifest);
    size = info.size;
    version = info.version;
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
    if (read_cache(map, identity, cached)) {
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
      m.cache_pending = write_cache_in_background(cache_path, m, identity);
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

}  // namespace

}  // namespace loadscope::io
