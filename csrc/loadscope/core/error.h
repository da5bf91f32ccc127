#pragma once
// The small exception hierarchy of the engine. The binding layer maps each class to a Python
// exception of the same name (python/loadscope/_errors.py).
//
//   Error                  anything loadscope reports
//   ├── ConfigError        bad arguments or data layout, raised before any thread starts
//   ├── SampleError        one sample (or a shard) could not be used; carries its key
//   └── BudgetError        under on_error="skip", more samples failed than the budget allows

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

// Thrown by decoders and readers that do not know the sample's key; the pipeline catches it
// and rethrows a SampleError naming the sample.
class DecodeFailure : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class ReadFailure : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace loadscope
