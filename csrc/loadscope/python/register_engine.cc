// The engine: a pipeline (source, fields, telemetry), its epochs and their batches.
#include "loadscope/python/binding.h"

#include <chrono>
#include <optional>
#include "loadscope/core/engine.h"
#include "loadscope/pipeline/fields.h"

namespace loadscope::binding {

namespace {

// One loader configuration: a source, what to make of each sample, and its telemetry.
struct Pipeline {
  std::shared_ptr<Source> source;
  std::shared_ptr<pipeline::FieldProcessor> processor;
  std::shared_ptr<telemetry::Telemetry> telemetry;
};

// The engine's choices under the names users write, one table each: the parsers read them, and
// Python's declaration of the Loader's options (_options.py) takes its allowed values from
// them (_native.PARTITIONS, _native.ON_ERROR), so each list is written here only.
template <class E>
struct Named {
  const char* name;
  E value;
};
constexpr Named<Partition> kPartitions[] = {{"interleave", Partition::kInterleave},
                                            {"contiguous", Partition::kContiguous}};
constexpr Named<ErrorPolicy> kOnError[] = {{"raise", ErrorPolicy::kRaise},
                                           {"skip", ErrorPolicy::kSkip}};

template <class E, size_t N>
E named(const char* what, const Named<E> (&table)[N], const std::string& s) {
  std::string allowed;
  for (const Named<E>& n : table) {
    if (s == n.name) return n.value;
    allowed += std::string(allowed.empty() ? "'" : ", '") + n.name + "'";
  }
  throw ConfigError(std::string(what) + "='" + s + "': allowed are " + allowed);
}

template <class E, size_t N>
py::tuple names(const Named<E> (&table)[N]) {
  py::tuple out(N);
  for (size_t i = 0; i < N; ++i) out[i] = py::str(table[i].name);
  return out;
}

// drop_last as users write it (Python's _options.DROP_LAST): False, True, or "uneven".
DropLast drop_last_arg(const py::handle& v) {
  if (py::isinstance<py::bool_>(v)) return v.cast<bool>() ? DropLast::kSteps : DropLast::kNone;
  if (py::isinstance<py::str>(v) && v.cast<std::string>() == "uneven") return DropLast::kUneven;
  throw ConfigError("drop_last=" + py::repr(v).cast<std::string>() +
                    ": not a value of the Loader's drop_last (see loadscope.Loader)");
}

Partition partition_arg(const std::string& s) {
  return named("partition", kPartitions, s);
}

}  // namespace

void register_engine(py::module_& m) {
  py::class_<BlockView>(m, "BlockView", py::buffer_protocol())
      .def_buffer([](BlockView& v) {
        return py::buffer_info(v.data, 1, py::format_descriptor<uint8_t>::format(), 1,
                               {static_cast<py::ssize_t>(v.bytes)}, {1});
      })
      .def_property_readonly("nbytes", [](const BlockView& v) { return v.bytes; });

  m.def(
      "_forked_during_epoch", [](bool value) { forked_during_epoch().store(value); },
      py::arg("value") = true,
      "Marks this process as forked while an epoch ran: samples run on the planner thread.");
  m.def("_is_forked_during_epoch", [] { return forked_during_epoch().load(); });

  m.attr("PARTITIONS") = names(kPartitions);
  m.attr("ON_ERROR") = names(kOnError);

  m.def(
      "epoch_geometry",
      [](int64_t n, int64_t batch, int64_t row, const py::object& drop_last, int64_t rank) {
        EpochGeometry g(n, batch, row, drop_last_arg(drop_last));
        return py::make_tuple(g.batches(), g.length(), g.padding(), g.rank_length(rank),
                              g.rank_samples(rank));
      },
      py::arg("n"), py::arg("batch"), py::arg("row"), py::arg("drop_last"), py::arg("rank") = 0,
      "(batches of all ranks, samples drawn, padded samples, samples rank draws, of which not "
      "padding) of an epoch of n samples; drop_last as the Loader takes it (see "
      "EpochGeometry).");
  m.def(
      "batch_of_slot",
      [](int64_t n, int64_t batch, int64_t row, const py::object& drop_last, int64_t slot,
         const std::string& partition) {
        return EpochGeometry(n, batch, row, drop_last_arg(drop_last))
            .batch_of_slot(slot, partition_arg(partition));
      },
      py::arg("n"), py::arg("batch"), py::arg("row"), py::arg("drop_last"), py::arg("slot"),
      py::arg("partition"),
      "The epoch's batch that slot k reads (rank k % row's (k // row)-th batch) under a "
      "partition.");

  py::class_<Batch>(m, "Batch")
      .def_readonly("index", &Batch::index)
      .def_readonly("size", &Batch::size)
      .def_property_readonly("keys", [](const Batch& b) { return fs_list(b.keys); })
      .def_readonly("positions", &Batch::positions)
      .def_property_readonly("skipped", [](const Batch& b) { return notes_to_list(b.skipped); })
      .def_property_readonly("warnings", [](const Batch& b) { return notes_to_list(b.warnings); })
      .def("fixed",
           [](const Batch& b, size_t slot) {
             if (slot >= b.layout->fixed.size()) throw py::index_error("no such fixed field");
             return BlockView{b.block, b.fixed_data(slot),
                              b.layout->fixed[slot].bytes_per_sample * b.size};
           })
      .def(
          "strings",
          [](const Batch& b, size_t slot, bool as_bytes) {
            if (slot >= b.strings.size()) throw py::index_error("no such string field");
            py::list out;
            for (const auto& s : b.strings[slot]) {
              if (as_bytes) {
                out.append(py::bytes(s));
              } else {
                out.append(py::str(s));  // validated UTF-8 by the engine
              }
            }
            return out;
          },
          py::arg("slot"), py::arg("as_bytes"));

  py::class_<EpochRun, std::shared_ptr<EpochRun>>(m, "EpochRun")
      .def(
          "next",
          [](EpochRun& run, int timeout_ms) -> py::object {
            std::unique_ptr<Batch> batch;
            EpochRun::Status status;
            {
              py::gil_scoped_release release;
              status = run.next(batch, std::chrono::milliseconds(timeout_ms));
            }
            if (status == EpochRun::Status::kTimeout) return py::str("timeout");
            if (status == EpochRun::Status::kEnd) return py::none();
            return py::cast(std::move(batch));
          },
          py::arg("timeout_ms"))
      .def("stop", &EpochRun::stop, py::call_guard<py::gil_scoped_release>())
      .def("stats", [](const EpochRun& run) {
        EpochStats s = run.stats();
        py::dict d;
        d["batches"] = s.batches;
        d["samples"] = s.samples;
        d["failures"] = s.failures;
        d["warnings"] = s.warnings;
        d["bytes_read"] = s.bytes_read;
        d["process_seconds"] = s.process_seconds;
        d["skipped"] = notes_to_list(s.skipped);
        d["warning_notes"] = notes_to_list(s.warning_notes);
        return d;
      });

  py::class_<Tuner, std::shared_ptr<Tuner>>(m, "Tuner")
      .def(
          py::init(
              [](int max_threads, int threads, bool auto_threads, int prefetch, int max_prefetch,
                 bool auto_prefetch, bool auto_decoder_threads, double cores, int64_t memory_limit,
                 int window_batches, double window_seconds,
                 std::optional<std::vector<std::pair<int, int>>> script) -> std::shared_ptr<Tuner> {
                TunerSettings s;
                s.max_threads = max_threads;
                s.threads = threads;
                s.auto_threads = auto_threads;
                s.prefetch = prefetch;
                s.max_prefetch = max_prefetch;
                s.auto_prefetch = auto_prefetch;
                s.auto_decoder_threads = auto_decoder_threads;
                s.cores = cores;
                s.memory_limit = memory_limit;
                s.window_batches = window_batches;
                s.window_seconds = window_seconds;
                if (script) return std::make_shared<ScriptedTuner>(s, *script);
                return std::make_shared<Tuner>(s);
              }),
          py::arg("max_threads"), py::arg("threads"), py::arg("auto_threads"), py::arg("prefetch"),
          py::arg("max_prefetch"), py::arg("auto_prefetch"), py::arg("auto_decoder_threads"),
          py::arg("cores"), py::arg("memory_limit"), py::arg("window_batches") = 8,
          py::arg("window_seconds") = 0.25, py::arg("script") = py::none(),
          "The auto controller of threads, prefetch and decoder threads (core/tuner.h). "
          "script: (threads, prefetch) per window instead of the policy (tests).")
      .def_property_readonly("threads", &Tuner::threads)
      .def_property_readonly("max_threads", [](const Tuner& t) { return t.settings().max_threads; })
      .def_property_readonly("prefetch", &Tuner::prefetch)
      .def_property_readonly("decoder_threads", &Tuner::decoder_threads)
      .def_property_readonly("changes", &Tuner::changes)
      .def("decisions", [](const Tuner& t) {
        py::list out;
        for (const auto& d : t.decisions()) {
          py::dict row;
          row["epoch"] = d.epoch;
          row["batch"] = d.batch;
          row["knob"] = d.knob;
          row["from"] = d.from;
          row["to"] = d.to;
          row["reason"] = d.reason;
          row["text"] = d.text();
          row["at_ns"] = d.at_ns;
          out.append(row);
        }
        return out;
      });

  py::class_<Pipeline>(m, "Pipeline")
      .def(py::init([](std::shared_ptr<Source> source, std::vector<pipeline::FieldSpec> fields,
                       bool telemetry) {
             return Pipeline{std::move(source),
                             std::make_shared<pipeline::FieldProcessor>(std::move(fields)),
                             std::make_shared<telemetry::Telemetry>(telemetry)};
           }),
           py::arg("source"), py::arg("fields"), py::arg("telemetry") = true)
      .def(
          "telemetry_snapshot",
          [](const Pipeline& p, bool depth) { return snapshot_dict(p.telemetry->snapshot(depth)); },
          py::arg("depth") = false)
      .def("take_trace_depth",
           [](Pipeline& p) {
             py::list out;
             for (const auto& row : p.telemetry->take_trace_depth())
               out.append(py::make_tuple(row[0], row[1], row[2]));
             return out;
           })
      .def("telemetry_created_ns", [](const Pipeline& p) { return p.telemetry->created_ns(); })
      .def(
          "set_tracing",
          [](Pipeline& p, bool on, size_t max_spans) { p.telemetry->set_tracing(on, max_spans); },
          py::arg("on"), py::arg("max_spans") = 500000)
      .def("take_spans",
           [](Pipeline& p) {
             py::list out;
             for (auto& [role, spans] : p.telemetry->take_spans()) {
               py::list items;
               for (const auto& sp : spans)
                 items.append(py::make_tuple(sp.name, sp.start_ns, sp.dur_ns, sp.arg));
               out.append(py::make_tuple(role, items));
             }
             return out;
           })
      .def(
          "outputs",
          [](const Pipeline& p, size_t i) {
            const auto& sl = p.processor->slots(i);
            py::list out;
            for (size_t k = 0; k < sl.outputs.size(); ++k) {
              const auto& o = sl.outputs[k];
              out.append(py::make_tuple(o.suffix, pipeline::type_name(o.type),
                                        py::tuple(py::cast(o.shape)), sl.at[k], o.key));
            }
            return out;
          },
          "Field i's outputs: (suffix, type, per-sample shape, index into the batch's fixed or "
          "string area, record key or ''), as the field declares them (pipeline/outputs.h).")
      .def(
          "start",
          [](Pipeline& p, int threads, int batch_size, int prefetch, const py::object& drop_last,
             const std::string& on_error, int64_t max_errors, double max_error_rate, uint64_t seed,
             int64_t epoch, bool shuffle, int64_t batch_offset, int64_t batch_stride, int64_t row,
             int64_t start_batch, uintptr_t pin, uintptr_t unpin, const std::string& partition,
             std::optional<std::shared_ptr<Tuner>> tuner) {
            EngineOptions o;
            o.threads = threads;
            o.batch_size = batch_size;
            o.prefetch = prefetch;
            o.drop_last = drop_last_arg(drop_last);
            o.on_error = named("on_error", kOnError, on_error);
            o.max_errors = max_errors;
            o.max_error_rate = max_error_rate;
            o.order = EpochOrder{seed, epoch, shuffle};
            o.batch_offset = batch_offset;
            o.batch_stride = batch_stride;
            o.row = row;
            o.start_batch = start_batch;
            o.partition = partition_arg(partition);
            if (tuner) o.tuner = std::move(*tuner);
            EpochGeometry(p.source->size(), batch_size, row, o.drop_last);  // fails early, here
            // Addresses of cudaHostRegister / cudaHostUnregister, found by Python (or 0).
            o.pin.pin = reinterpret_cast<int (*)(void*, size_t, unsigned)>(pin);
            o.pin.unpin = reinterpret_cast<int (*)(void*)>(unpin);
            auto run = std::make_shared<EpochRun>(p.source, p.processor, o, p.telemetry);
            run->start();
            return run;
          },
          py::arg("threads"), py::arg("batch_size"), py::arg("prefetch"), py::arg("drop_last"),
          py::arg("on_error"), py::arg("max_errors"), py::arg("max_error_rate"), py::arg("seed"),
          py::arg("epoch"), py::arg("shuffle"), py::arg("batch_offset"), py::arg("batch_stride"),
          py::arg("row") = 1, py::arg("start_batch") = 0, py::arg("pin") = 0, py::arg("unpin") = 0,
          py::arg("partition") = "interleave", py::arg("tuner") = py::none());
}

}  // namespace loadscope::binding
