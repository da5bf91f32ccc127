#include "loadscope/python/binding.h"

namespace loadscope::binding {

py::str fs_str(const std::string& s) {
  PyObject* o =
      PyUnicode_DecodeUTF8(s.data(), static_cast<Py_ssize_t>(s.size()), "surrogateescape");
  if (o == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::str>(o);
}

py::list fs_list(const std::vector<std::string>& items) {
  py::list out;
  for (const auto& s : items) out.append(fs_str(s));
  return out;
}

py::list notes_to_list(const std::vector<SampleNote>& notes) {
  py::list out;
  for (const auto& n : notes) {
    py::dict d;
    d["key"] = fs_str(n.key);
    d["reason"] = fs_str(n.reason);
    d["kind"] = n.kind;
    d["position"] = n.position;
    out.append(d);
  }
  return out;
}

py::dict histogram_dict(const telemetry::HistogramData& h, double unit) {
  py::dict d;
  d["count"] = h.count;
  d["total"] = static_cast<double>(h.sum) * unit;
  d["mean"] = h.mean() * unit;
  d["p50"] = h.quantile(0.50) * unit;
  d["p90"] = h.quantile(0.90) * unit;
  d["p99"] = h.quantile(0.99) * unit;
  d["max"] = static_cast<double>(h.max) * unit;
  return d;
}

}  // namespace loadscope::binding
