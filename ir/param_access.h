#pragma once
// Which pointer parameters a kernel may write: a store's or atomic's address traced back
// through pointer arithmetic and views to the parameter it starts from. The compiler marks
// the others read-only (and every pointer parameter noalias, which the launchers guarantee
// by refusing a written buffer that overlaps another); manifests record it per parameter.
#include <vector>

#include "ir/ir.h"

namespace tilec::ir {

enum class ParamAccess { none, read, write }; // none: not a pointer

// The parameter a pointer value is computed from (through pointer arithmetic and views), or
// null when it is not one parameter.
const Value* root_param(const Function& fn, const Value* v);

// One entry per parameter of `fn`. A store whose address cannot be traced to one parameter
// (a select between two, say) makes every pointer parameter `write`.
std::vector<ParamAccess> param_access(const Function& fn);

} // namespace tilec::ir
