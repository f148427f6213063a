#include "fuzz/runner.h"

#include <fmt/format.h>

#include "fuzz/compare.h"
#include "interp/interpreter.h"
#include "abi/error.h"

namespace tilec::fuzz {

Outcome run_program(const Program& p, launch::Launcher& launcher) {
  const ir::Function& fn = *p.kernel;
  std::vector<launch::Buffer> want = make_buffers(p), got = want;
  try {
    interp::interpret(fn, p.grid, make_args(p, want));
  } catch (const UserError& e) {
    return {Verdict::invalid, fmt::format("the interpreter rejected the program: {}", e.what())};
  }
  try {
    launcher.launch(p.kernel, p.num_warps, p.grid, make_args(p, got));
  } catch (const UserError& e) {
    return {Verdict::disagree, fmt::format("the {} backend failed: {}", launcher.backend(), e.what())};
  } catch (const InternalError& e) {
    return {Verdict::disagree, fmt::format("the {} backend failed: {}", launcher.backend(), e.what())};
  } catch (const rt::Error& e) {
    return {Verdict::disagree, fmt::format("the {} backend failed: {}", launcher.backend(), e.what())};
  }
  std::vector<std::optional<ir::DType>> inexact = inexact_dtypes(fn);
  std::vector<bool> zero_sign = zero_sign_params(fn);
  Outcome out;
  for (size_t i = 0; i < fn.params.size(); ++i) {
    if (!fn.params[i]->type.is_ptr()) continue;
    BufferDiff d = compare_buffers(want[i], got[i], inexact[i], zero_sign[i]);
    if (!d.mismatches) continue;
    out.verdict = Verdict::disagree;
    out.message += fmt::format("{}{} of {} elements of '{}' differ ({}); first: {}", out.message.empty() ? "" : "\n",
                               d.mismatches, want[i].count(), want[i].name,
                               inexact[i]     ? fmt::format("inexact, {} ulps{} allowed", ulp_bound(*inexact[i]),
                                                              *inexact[i] == want[i].dtype ? "" : " of " + std::string(ir::dtype_name(*inexact[i])))
                               : zero_sign[i] ? "bitwise but for the sign of zero"
                                              : "bitwise",
                               d.first);
  }
  return out;
}

} // namespace tilec::fuzz
