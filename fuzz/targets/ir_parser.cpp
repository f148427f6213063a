// Input fuzzing of the tile IR reader (ir/parser.h): any bytes either parse or raise
// UserError naming `fuzz-input:line:column`. What parses must pass the verifier or be
// rejected by it with a UserError, and must print, parse back and print the same text.
// What verifies must still verify, and still round-trip, after the default passes.
#include "fuzz/targets/fuzz_target.h"

#include "ir/error.h"
#include "ir/parser.h"
#include "ir/passes.h"
#include "ir/printer.h"
#include "ir/verifier.h"

using namespace tilec;
using namespace tilec::fuzz_targets;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto kernel = read_or_reject<UserError>(kSource, [&] { return ir::parse(as_text(data, size), kSource); });
  if (!kernel) return 0;
  bool verified = passes_or_rejects<UserError>("verify(parsed IR)", [&] { ir::verify(**kernel); });

  std::string printed = must("print(parsed IR)", [&] { return ir::print(**kernel); });
  ir::Kernel again = must("parse(print(parsed IR))", [&] { return ir::parse(printed, "printed"); });
  std::string reprinted = must("print(parse(print(parsed IR)))", [&] { return ir::print(*again); });
  require(reprinted == printed, "print -> parse -> print is not stable",
          "first:\n" + printed + "\nsecond:\n" + reprinted);
  bool reverified = passes_or_rejects<UserError>("verify(reparsed IR)", [&] { ir::verify(*again); });
  require(verified == reverified, "the verifier judges the IR and its printed form differently", printed);
  if (!verified) return 0;

  must("run_default_passes(verified IR)", [&] { ir::run_default_passes(*again); });
  must("verify(IR after the default passes)", [&] { ir::verify(*again); });
  std::string optimized = must("print(IR after the default passes)", [&] { return ir::print(*again); });
  ir::Kernel reread = must("parse(print(IR after the default passes))", [&] { return ir::parse(optimized, "optimized"); });
  require(must("print(parse(print(IR after the default passes)))", [&] { return ir::print(*reread); }) == optimized,
          "print -> parse -> print is not stable after the default passes", optimized);
  return 0;
}
