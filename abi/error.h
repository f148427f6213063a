#pragma once
// tilec's errors, at the bottom layer so every folder throws the same ones.
//
// UserError: a mistake in a kernel, its inputs or a command line (exit code 2), carrying where
// it happened when that is known; InternalError: a broken invariant of tilec itself (exit 1).
// The runtime's own (tilec::rt) say what failed at run time; callers map them to exit codes:
// BackendUnavailable → 3, ManifestError and LaunchArgumentError → 2 (bad input), CudaError → 1.
#include <source_location>
#include <stdexcept>
#include <string>

namespace tilec {

// A source position in the user's kernel code (or in a parsed IR file).
struct SourceLoc {
  std::string file;
  int line = 0;
  int column = 0;

  static SourceLoc from(const std::source_location& l) {
    return {l.file_name(), static_cast<int>(l.line()), static_cast<int>(l.column())};
  }
  bool known() const { return line > 0; }
  // "file:line:col" (or "file:line" without a column), or "<unknown>".
  std::string str() const {
    if (!known()) return "<unknown>";
    return file + ":" + std::to_string(line) + (column > 0 ? ":" + std::to_string(column) : "");
  }
  bool operator==(const SourceLoc&) const = default;
};

class UserError : public std::runtime_error {
public:
  explicit UserError(const std::string& msg) : std::runtime_error(msg) {}
  UserError(const SourceLoc& loc, const std::string& msg)
      : std::runtime_error(loc.known() ? loc.str() + ": " + msg : msg) {}
};

class InternalError : public std::logic_error {
public:
  explicit InternalError(const std::string& msg) : std::logic_error("internal compiler error: " + msg) {}
};

} // namespace tilec

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
