// Sample lists: in-memory lists, folders and manifests as tables, tar shards and their indexes,
// mixes.
#include "loadscope/python/binding.h"

#include "loadscope/core/engine.h"
#include "loadscope/io/faults.h"
#include "loadscope/io/folder.h"
#include "loadscope/io/manifest.h"
#include "loadscope/io/sources.h"
#include "loadscope/io/table.h"
#include "loadscope/io/tar_index.h"

namespace loadscope::binding {

void register_sources(py::module_& m) {
  py::class_<Source, std::shared_ptr<Source>>(m, "Source")
      .def_property_readonly("size", &Source::size);

  py::class_<io::ListSource, Source, std::shared_ptr<io::ListSource>>(m, "ListSource")
      .def(py::init([](const py::list& samples) {
             // samples: [(key, [(name, is_path, value: str|bytes), ...]), ...]
             std::vector<Sample> out;
             out.reserve(samples.size());
             for (const auto& item : samples) {
               auto t = item.cast<py::tuple>();
               Sample s;
               s.key = t[0].cast<std::string>();
               for (const auto& mm : t[1].cast<py::list>()) {
                 auto mt = mm.cast<py::tuple>();
                 Member member;
                 member.name = mt[0].cast<std::string>();
                 member.is_path = mt[1].cast<bool>();
                 (member.is_path ? member.path : member.data) = mt[2].cast<std::string>();
                 s.members.push_back(std::move(member));
               }
               out.push_back(std::move(s));
             }
             return std::make_shared<io::ListSource>(std::move(out));
           }),
           py::arg("samples"));

  // Folders and manifests as columns (io/table.h); rows become samples only in the planner.
  py::class_<io::SampleTable, std::shared_ptr<io::SampleTable>>(m, "SampleTable")
      .def_property_readonly("rows", &io::SampleTable::rows)
      .def_property_readonly("nbytes", &io::SampleTable::bytes)
      .def("digest",
           [](const io::SampleTable& t) {
             py::gil_scoped_release release;
             return t.digest();
           })
      .def(
          "sample",
          [](const io::SampleTable& t, int64_t row) {
            if (row < 0 || row >= t.rows()) throw py::index_error("row out of range");
            Sample s;
            t.sample(static_cast<size_t>(row), s);
            py::list members;
            for (const auto& mm : s.members) {
              members.append(py::make_tuple(fs_str(mm.name), mm.is_path,
                                            py::bytes(mm.is_path ? mm.path : mm.data)));
            }
            return py::make_tuple(py::bytes(s.key), members);
          },
          "Row `row` as (key, [(member, is_path, path or value), ...]), all bytes but the names.");
  m.def(
      "table_of_files",
      [](const py::bytes& paths, const py::buffer& labels, const std::string& member) {
        const py::buffer_info l = labels.request();
        if (l.size && (l.itemsize != 8 || l.format != py::format_descriptor<int64_t>::format()))
          throw ConfigError("table_of_files: labels are an int64 buffer");
        const std::string_view text(paths);
        py::gil_scoped_release release;
        return std::const_pointer_cast<io::SampleTable>(io::table_of_files(
            text, static_cast<const int64_t*>(l.ptr), static_cast<size_t>(l.size), member));
      },
      py::arg("paths"), py::arg("labels"), py::arg("member"),
      "A SampleTable of files named one by one ('\\0'-separated paths, the key of each), with "
      "an int64 label each (an empty buffer: none) as the member `member` (io/table.h).");
  m.def(
      "tables_first_difference",
      [](const io::SampleTable& a, const io::SampleTable& b, const std::string& member) {
        py::gil_scoped_release release;
        return io::first_difference(a, b, member);
      },
      py::arg("a"), py::arg("b"), py::arg("member"),
      "The first row where the tables' keys or `member` differ; the shorter's size when only "
      "the counts do; -1 when they list the same samples.");
  m.def(
      "read_manifest",
      [](const std::string& manifest, const std::string& root, const std::string& path_key,
         bool skip_bad_rows, const std::string& cache_dir, const std::string& scheme_tag) {
        io::ManifestOptions o{manifest, root, path_key, skip_bad_rows, cache_dir, scheme_tag};
        io::Manifest r;
        {
          py::gil_scoped_release release;
          r = io::read_manifest(o);
        }
        py::dict d;
        d["table"] = std::const_pointer_cast<io::SampleTable>(r.table);
        d["skipped"] = r.skipped;
        d["notes"] = fs_list(r.notes);
        d["cache_path"] = fs_str(r.cache_path);
        d["from_cache"] = r.from_cache;
        d["cache_error"] = fs_str(r.cache_error);
        d["cache_pending"] = r.cache_pending;
        d["source"] = py::bytes(r.source);
        return d;
      },
      py::arg("manifest"), py::arg("root"), py::arg("path_key"), py::arg("skip_bad_rows"),
      py::arg("cache_dir"), py::arg("scheme_tag") = "",
      "Parses a JSONL/CSV manifest into a SampleTable, or maps its current cache file "
      "(io/manifest.h).");
  m.def(
      "scan_folder",
      [](const std::string& root, const std::vector<std::string>& extensions,
         const std::string& labels) {
        io::FolderScan r;
        {
          py::gil_scoped_release release;
          r = io::scan_folder(root, extensions, labels);
        }
        py::dict d;
        d["table"] = std::const_pointer_cast<io::SampleTable>(r.table);
        d["labels"] = r.labels;
        d["classes"] = fs_list(r.classes);
        d["ignored_files"] = r.ignored_files;
        return d;
      },
      py::arg("root"), py::arg("extensions"), py::arg("labels"),
      "Scans a folder like torchvision's ImageFolder into a SampleTable (io/folder.h).");
  py::class_<io::TableSource, Source, std::shared_ptr<io::TableSource>>(m, "TableSource")
      .def(py::init([](const std::shared_ptr<io::SampleTable>& t) {
             return std::make_shared<io::TableSource>(t);
           }),
           py::arg("table"));

  py::class_<io::TarSource, Source, std::shared_ptr<io::TarSource>>(m, "TarSource")
      .def(py::init<std::vector<std::string>, size_t>(), py::arg("shards"),
           py::arg("shuffle_buffer"))
      .def_property_readonly("bytes_read", &io::TarSource::bytes_read);

  // Shard indexes (tar_index.h): made by scanning headers or read from `<shard>.idx`.
  py::class_<io::ShardIndex, std::shared_ptr<io::ShardIndex>>(m, "ShardIndex")
      .def_property_readonly("path", [](const io::ShardIndex& i) { return fs_str(i.path); })
      .def_readonly("tar_bytes", &io::ShardIndex::tar_bytes)
      .def_property_readonly("samples", [](const io::ShardIndex& i) { return i.samples.size(); })
      .def_property_readonly("member_bytes", &io::ShardIndex::member_bytes)
      .def("keys",
           [](const io::ShardIndex& i) {
             std::vector<std::string> keys;
             for (const auto& s : i.samples) keys.push_back(s.key);
             return fs_list(keys);
           })
      .def("members",
           [](const io::ShardIndex& i, size_t k) {
             py::list out;
             for (const auto& mm : i.samples.at(k).members)
               out.append(py::make_tuple(mm.name, mm.offset, mm.size));
             return out;
           })
      .def(
          "write",
          [](const io::ShardIndex& i, const std::string& path) {
            naming(path, [&] { io::write_index(i, path); });
          },
          py::call_guard<py::gil_scoped_release>());
  // A shard that cannot be indexed is a ReadError naming it.
  m.def(
      "index_shard",
      [](const std::string& tar_path) {
        return naming(tar_path,
                      [&] { return std::make_shared<io::ShardIndex>(io::index_shard(tar_path)); });
      },
      py::arg("tar_path"), py::call_guard<py::gil_scoped_release>(),
      "Indexes a tar shard by reading its headers only.");
  m.def(
      "read_index",
      [](const std::string& idx_path, const std::string& tar_path) {
        return naming(idx_path, [&] {
          return std::make_shared<io::ShardIndex>(io::read_index(idx_path, tar_path));
        });
      },
      py::arg("idx_path"), py::arg("tar_path"), py::call_guard<py::gil_scoped_release>(),
      "Reads `<shard>.idx`, checked against the shard's size and fingerprint (ConfigError if stale "
      "or damaged).");

  py::class_<io::IndexedTarSource, Source, std::shared_ptr<io::IndexedTarSource>>(
      m, "IndexedTarSource")
      .def(py::init([](const std::vector<std::shared_ptr<io::ShardIndex>>& shards,
                       size_t shuffle_buffer) {
             return std::make_shared<io::IndexedTarSource>(
                 std::vector<std::shared_ptr<const io::ShardIndex>>(shards.begin(), shards.end()),
                 shuffle_buffer);
           }),
           py::arg("shards"), py::arg("shuffle_buffer"));

  // Test hook (tests/python/test_faults.py): [(path substring, "eio"|"short"|"vanished", times
  // [, after])]: `times` reads fail (-1: all) after `after` reads that succeed (default 0).
  m.def(
      "_set_read_faults",
      [](const std::vector<py::tuple>& faults) {
        std::vector<io::ReadFault> out;
        for (const py::tuple& t : faults) {
          if (t.size() != 3 && t.size() != 4)
            throw ConfigError("a fault is (match, kind, times[, after])");
          io::ReadFault f;
          f.match = t[0].cast<std::string>();
          const auto kind = t[1].cast<std::string>();
          f.times = t[2].cast<int64_t>();
          f.after = t.size() == 4 ? t[3].cast<int64_t>() : 0;
          if (kind == "eio") {
            f.kind = io::FaultKind::kIoError;
          } else if (kind == "short") {
            f.kind = io::FaultKind::kShortRead;
          } else if (kind == "vanished") {
            f.kind = io::FaultKind::kVanished;
          } else {
            throw ConfigError("fault kind '" + kind + "': allowed are 'eio', 'short', 'vanished'");
          }
          out.push_back(std::move(f));
        }
        io::set_read_faults(std::move(out));
      },
      py::arg("faults"));

  py::class_<io::MixSource, Source, std::shared_ptr<io::MixSource>>(m, "MixSource")
      .def(py::init<std::vector<std::shared_ptr<Source>>, std::vector<double>, int64_t>(),
           py::arg("sources"), py::arg("weights"), py::arg("samples_per_epoch"));
}

}  // namespace loadscope::binding
