#pragma once
// Reads the textual tile IR that ir/printer.h writes (see there for the
// syntax). Values may also carry names (`%offs`) and `//` comments are
// skipped, so hand-written IR reads too.
#include <string_view>

#include "ir/ir.h"

namespace tilec::ir {

// Builds every op through ir::Builder, so each op's typing rule holds.
// Throws UserError naming `source_name:line:column` of the offending token on
// any malformed input; it never aborts, whatever the bytes.
Kernel parse(std::string_view text, std::string_view source_name = "<input>");

} // namespace tilec::ir
