// The extension module: the one layer that knows Python (this folder). module.cc turns C++
// exceptions into loadscope's Python exceptions and registers each area's bindings, one file
// per area (register_*.cc); binding.h holds what they share.
//
// Note [no libtorch here]
// Batches leave C++ as objects implementing the buffer protocol; python/loadscope wraps them
// with torch.frombuffer, which shares the memory and keeps the object (and through it the
// batch block) alive for as long as the tensor lives. Not linking libtorch means the module
// does not depend on the C++ ABI of the torch it runs with: the same build works with
// Debian's torch 1.13 and a pip-installed torch 2.x, and it compiles in seconds.

#include "loadscope/python/binding.h"

namespace py = pybind11;
using namespace loadscope;
using namespace loadscope::binding;

namespace {

py::object error_class(const char* name) {
  return py::module_::import("loadscope._errors").attr(name);
}

void raise_python(const char* cls_name, py::tuple args) {
  py::object cls = error_class(cls_name);
  py::object instance = cls(*args);
  PyErr_SetObject(cls.ptr(), instance.ptr());
}

}  // namespace

PYBIND11_MODULE(_native, m) {
  m.doc() = "loadscope's native engine (internal; use the loadscope package)";

  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const SampleError& e) {
      const char* cls = e.kind() == FailureKind::kRead     ? "ReadError"
                        : e.kind() == FailureKind::kDecode ? "DecodeError"
                                                           : "FieldError";
      raise_python(cls, py::make_tuple(fs_str(e.key()), fs_str(e.reason())));
    } catch (const Failure& e) {
      // A binding that forgot to name the sample (binding::naming): still the right class.
      raise_python(e.kind() == FailureKind::kRead ? "ReadError" : "DecodeError",
                   py::make_tuple(fs_str(e.what())));
    } catch (const BudgetError& e) {
      raise_python("ErrorBudgetExceeded", py::make_tuple(fs_str(e.what())));
    } catch (const ConfigError& e) {
      raise_python("ConfigError", py::make_tuple(fs_str(e.what())));
    } catch (const Error& e) {
      raise_python("LoadscopeError", py::make_tuple(fs_str(e.what())));
    }
  });

  register_fields(m);
  register_video(m);
  register_sources(m);
  register_engine(m);
  register_telemetry(m);
  register_remote(m);
  register_bench(m);
}
