#pragma once
// The compiler's error channels: UserError for mistakes in a kernel or its inputs (carrying
// where it happened), InternalError for broken compiler invariants (both in abi/error.h, the
// bottom layer), and the assertions that raise the latter.
#include <source_location>
#include <string>

#include "abi/error.h"

namespace tilec {

[[noreturn]] void internal_fail(const std::string& msg,
                                std::source_location where = std::source_location::current());

inline void internal_assert(bool cond, const char* what,
                            std::source_location where = std::source_location::current()) {
  if (!cond) internal_fail(what, where);
}

} // namespace tilec
