#include "ir/param_access.h"

#include <algorithm>
#include <functional>

namespace tilec::ir {

const Value* root_param(const Function& fn, const Value* v) {
  while (v->def) {
    const Op* d = v->def;
    switch (d->kind) {
    case OpKind::AddPtr:
    case OpKind::Splat:
    case OpKind::Broadcast:
    case OpKind::ExpandDims:
    case OpKind::Permute:
    case OpKind::Reshape: v = d->operands[0]; break;
    default: return nullptr;
    }
  }
  return std::find(fn.params.begin(), fn.params.end(), v) != fn.params.end() ? v : nullptr;
}

std::vector<ParamAccess> param_access(const Function& fn) {
  std::vector<ParamAccess> r;
  for (const Value* p : fn.params) r.push_back(p->type.is_ptr() ? ParamAccess::read : ParamAccess::none);
  bool unknown = false;
  std::function<void(const Block&)> visit = [&](const Block& b) {
    for (const auto& op : b.ops) {
      if (op->kind == OpKind::Store || op->kind == OpKind::DescStore || is_atomic(op->kind)) {
        const Value* p = root_param(fn, op->operands[0]);
        if (!p) unknown = true;
        else r[size_t(std::find(fn.params.begin(), fn.params.end(), p) - fn.params.begin())] = ParamAccess::write;
      }
      for (const auto& region : op->regions) visit(*region);
    }
  };
  visit(fn.body);
  if (unknown)
    for (ParamAccess& a : r)
      if (a == ParamAccess::read) a = ParamAccess::write;
  return r;
}

} // namespace tilec::ir
