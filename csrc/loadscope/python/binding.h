#pragma once
// What the binding files share (module.cc registers them in order): string conversions that
// keep file names that are not UTF-8, the dict form of a histogram and a telemetry snapshot,
// and the one place a Failure that does not know its sample becomes a SampleError naming it.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "loadscope/core/batch.h"
#include "loadscope/core/error.h"
#include "loadscope/telemetry/telemetry.h"

namespace loadscope::binding {

namespace py = pybind11;

// A span of a batch block that Python can wrap without copying.
struct BlockView {
  std::shared_ptr<uint8_t> block;
  uint8_t* data;
  size_t bytes;
};

// Keys and reasons may hold file names that are not UTF-8: decoded the way os.fsdecode does
// (undecodable bytes become surrogates), so a key can always be used to open its file.
py::str fs_str(const std::string& s);
py::list fs_list(const std::vector<std::string>& items);
py::list notes_to_list(const std::vector<SampleNote>& notes);

py::dict histogram_dict(const telemetry::HistogramData& h, double unit);
py::dict snapshot_dict(const telemetry::Snapshot& s);

// Runs fn; a read or decode Failure (which does not know its sample) becomes the SampleError
// naming `key`, which Python sees as ReadError or DecodeError.
template <class Fn>
auto naming(const std::string& key, Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const Failure& e) {
    throw e.named(key);
  }
}

// One per area, called by module.cc in this order (a class is registered before a signature
// names it, so that docstrings and the generated stub show Python names).
void register_fields(py::module_& m);
void register_video(py::module_& m);
void register_sources(py::module_& m);
void register_engine(py::module_& m);
void register_telemetry(py::module_& m);
void register_remote(py::module_& m);
void register_bench(py::module_& m);

}  // namespace loadscope::binding
