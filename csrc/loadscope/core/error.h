#pragma once
// The small exception hierarchy of the engine. The binding layer maps each class to a Python
// exception of the same name (python/loadscope/_errors.py).
//
//   Error                  anything loadscope reports
//   ├── ConfigError        bad arguments or data layout, raised before any thread starts
//   ├── SampleError        one sample (or a shard) could not be used; carries its key
//   ├── BudgetError        under on_error="skip", more samples failed than the budget allows
//   └── Failure            a read or decode by code that does not know the sample's key;
//       ├── ReadFailure    whoever knows the key rethrows it as the SampleError naming it
//       └── DecodeFailure  (`named`), so Python sees ReadError / DecodeError with the key
#include <stdexcept>
#include <string>

namespace loadscope {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class ConfigError : public Error {
 public:
  using Error::Error;
};

// What went wrong with a sample: where it failed decides the Python subclass.
enum class FailureKind { kRead, kDecode, kField };

const char* failure_kind_name(FailureKind kind);

class SampleError : public Error {
 public:
  SampleError(std::string key, std::string reason, FailureKind kind)
      : Error("sample '" + key + "': " + reason),
        key_(std::move(key)),
        reason_(std::move(reason)),
        kind_(kind) {}

  const std::string& key() const { return key_; }
  const std::string& reason() const { return reason_; }
  FailureKind kind() const { return kind_; }

 private:
  std::string key_;
  std::string reason_;
  FailureKind kind_;
};

class BudgetError : public Error {
 public:
  using Error::Error;
};

// Thrown by decoders and readers that do not know the sample's key; the pipeline (or the
// binding) catches it and rethrows the SampleError naming the sample.
class Failure : public Error {
 public:
  Failure(const std::string& what, FailureKind kind) : Error(what), kind_(kind) {}
  FailureKind kind() const { return kind_; }
  // The same failure, of the sample `key`.
  SampleError named(std::string key) const { return SampleError(std::move(key), what(), kind_); }

 private:
  FailureKind kind_;
};

class DecodeFailure : public Failure {
 public:
  explicit DecodeFailure(const std::string& what) : Failure(what, FailureKind::kDecode) {}
};

class ReadFailure : public Failure {
 public:
  explicit ReadFailure(const std::string& what) : Failure(what, FailureKind::kRead) {}
};

}  // namespace loadscope
