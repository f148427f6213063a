#pragma once
// Errors the runtime raises. Callers map them to exit codes: BackendUnavailable → 3,
// ManifestError and LaunchArgumentError → 2 (bad input), CudaError → 1.
#include <stdexcept>
#include <string>

namespace tilec::rt {

class Error : public std::runtime_error {
public:
  explicit Error(const std::string& msg) : std::runtime_error(msg) {}
};

// A manifest that cannot be read, parsed or is missing a field; the message names the file,
// the line:column when known, and the key.
class ManifestError : public Error {
public:
  using Error::Error;
};

// Arguments that do not match a kernel's parameter list; the message names the parameter.
class LaunchArgumentError : public Error {
public:
  using Error::Error;
};

// No CUDA driver, a driver too old, or no device: one line saying what is missing.
class BackendUnavailable : public Error {
public:
  using Error::Error;
};

// A driver call that failed: "cuMemAlloc failed: CUDA_ERROR_OUT_OF_MEMORY (out of memory)".
class CudaError : public Error {
public:
  CudaError(const std::string& msg, int code) : Error(msg), code_(code) {}
  int code() const { return code_; }

private:
  int code_;
};

} // namespace tilec::rt
