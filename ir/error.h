#pragma once
// Two error channels: UserError for mistakes in a kernel or its inputs (always
// carries where it happened), InternalError for broken compiler invariants.
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
  std::string str() const; // "file:line:col" or "<unknown>"
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
  explicit InternalError(const std::string& msg)
      : std::logic_error("internal compiler error: " + msg) {}
};

[[noreturn]] void internal_fail(const std::string& msg,
                                std::source_location where = std::source_location::current());

inline void internal_assert(bool cond, const char* what,
                            std::source_location where = std::source_location::current()) {
  if (!cond) internal_fail(what, where);
}

} // namespace tilec
