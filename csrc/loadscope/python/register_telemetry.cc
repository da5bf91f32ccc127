// Telemetry: a pipeline's snapshot as a dict, histograms, process statistics, the clock.
#include "loadscope/python/binding.h"

#include "loadscope/telemetry/histogram.h"

namespace loadscope::binding {

py::dict snapshot_dict(const telemetry::Snapshot& s) {
  using namespace telemetry;
  py::dict stages;
  for (int st = 0; st < kStages; ++st) {
    py::dict kinds;
    for (int k = 0; k < Kind::count(); ++k) {
      const StageTotals& t = s.stages[st][k];
      if (t.items == 0 && t.failures == 0) continue;
      py::dict c;
      c["items"] = t.items;
      c["bytes"] = t.bytes;
      c["failures"] = t.failures;
      c["busy"] = histogram_dict(t.busy, 1e-9);
      kinds[Kind::name_of(k)] = c;
    }
    if (!kinds.empty()) stages[stage_name(static_cast<Stage>(st))] = kinds;
  }
  py::list threads;
  uint64_t scratch = 0;
  for (const auto& v : s.slots) {
    if (v.role == "consumer") continue;  // its only work is the collate stage
    py::dict t;
    t["role"] = v.role;
    t["cpu_seconds"] = v.cpu;
    t["scratch_bytes"] = v.scratch_bytes;
    scratch += v.scratch_bytes;
    threads.append(t);
  }
  py::dict queue;
  queue["consumer_wait"] = histogram_dict(s.consumer_wait, 1e-9);
  queue["planner_wait"] = histogram_dict(s.producer_block, 1e-9);
  queue["back_pressure_seconds"] = s.back_pressure_seconds;
  queue["prefetch"] = s.prefetch;
  queue["mean_ready"] = s.active_seconds > 0 ? s.ready_integral / s.active_seconds : 0.0;
  queue["mean_in_flight"] = s.active_seconds > 0 ? s.inflight_integral / s.active_seconds : 0.0;
  queue["ready_batch_seconds"] = s.ready_integral;  // integrals: interval means from deltas
  queue["in_flight_batch_seconds"] = s.inflight_integral;
  py::list depth;
  for (const auto& row : s.depth) depth.append(py::make_tuple(row[0], row[1], row[2]));
  queue["depth"] = depth;
  py::dict d;
  d["enabled"] = s.enabled;
  d["uptime"] = s.uptime;
  d["active_seconds"] = s.active_seconds;
  d["stages"] = stages;
  d["threads"] = threads;
  d["queue"] = queue;
  d["batches"] = s.batches;
  d["samples"] = s.samples;
  d["failures"] = s.failures;
  d["warnings"] = s.warnings;
  py::dict memory;
  memory["pool_bytes"] = s.pool_bytes;
  memory["pinned_bytes"] = s.pinned_bytes;
  memory["scratch_bytes"] = scratch;
  memory["source_buffer_bytes"] = s.source_buffer_bytes;
  d["engine_memory"] = memory;
  d["first_batch_after_create"] = s.first_batch_after_create;
  d["first_batch_last_epoch"] = s.first_batch_last_epoch;
  d["spans_dropped"] = s.spans_dropped;
  // Counters "<kind>.<what>" as sections: d["video"]["clips"]; "_ns" ones in seconds.
  for (const auto& [name, value] : s.counters) {
    const size_t dot = name.find('.');
    const std::string section = name.substr(0, dot), what = name.substr(dot + 1);
    if (!d.contains(section.c_str())) d[section.c_str()] = py::dict();
    py::dict sec = d[section.c_str()];
    const bool ns = what.size() > 3 && what.compare(what.size() - 3, 3, "_ns") == 0;
    if (ns)
      sec[(what.substr(0, what.size() - 3) + "_seconds").c_str()] = value * 1e-9;
    else
      sec[what.c_str()] = value;
  }
  return d;
}

void register_telemetry(py::module_& m) {
  py::class_<telemetry::Histogram>(m, "Histogram")
      .def(py::init<>())
      .def(
          "record",
          [](telemetry::Histogram& h, int64_t v) {
            h.record(v < 0 ? 0 : static_cast<uint64_t>(v));
          },
          py::arg("value"))
      .def(
          "summary",
          [](const telemetry::Histogram& h, double unit) { return histogram_dict(h.data(), unit); },
          py::arg("unit") = 1e-9);

  m.def(
      "process_stats",
      [](bool pss) {
        const telemetry::ProcessStats p = telemetry::read_process_stats(pss);
        py::dict d;
        auto opt = [](int64_t v) -> py::object {
          if (v < 0) return py::none();
          return py::int_(v);
        };
        d["rss"] = opt(p.rss);
        d["pss"] = opt(p.pss);
        d["rss_peak"] = opt(p.rss_peak);
        d["cgroup_current"] = opt(p.cgroup_current);
        d["cgroup_peak"] = opt(p.cgroup_peak);
        d["mem_available"] = opt(p.mem_available);
        d["cpu_user"] = p.cpu_user;
        d["cpu_system"] = p.cpu_system;
        d["io_rchar"] = opt(p.io_rchar);
        d["io_read_bytes"] = opt(p.io_read_bytes);
        d["io_syscr"] = opt(p.io_syscr);
        d["threads"] = p.threads;
        return d;
      },
      py::arg("pss") = true);
  m.def("now_ns", [] { return telemetry::now_ns(); });
}

}  // namespace loadscope::binding
