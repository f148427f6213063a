#include "ir/passes.h"

namespace tilec::ir {

void run_default_passes(Function& f) {
  // Each pass can expose work for the others (a fold leaves duplicate
  // constants for cse, a merge leaves dead ops for dce, dce removes carried
  // values that kept folds out). The bound is only a guard: every round that
  // changes something removes an op or turns one into a constant.
  for (int round = 0; round < 100; ++round) {
    bool changed = fold_constants(f);
    changed |= fuse_dot_accumulate(f);
    changed |= cse(f);
    changed |= dce(f);
    if (!changed) return;
  }
}

} // namespace tilec::ir
