// Shape ops: broadcast_to, expand_dims, reshape, permute and trans, and multiple_of (a promise
// about a parameter).
#include <fmt/format.h>

#include "dsl/internal.h"

namespace tilec::dsl {

using namespace detail;

Tile broadcast_to(const Tile& t, Shape shape, Loc loc) {
  return broadcast_value(need(t, loc, "broadcast_to"), shape, loc);
}
Tile expand_dims(const Tile& t, int axis, Loc loc) {
  return at(loc).expand_dims(need(t, loc, "expand_dims"), axis);
}
Tile reshape(const Tile& t, Shape shape, Loc loc) {
  ir::Value* v = need(t, loc, "reshape");
  if (ir::num_elements(shape) != ir::num_elements(v->type.shape))
    fail(loc, fmt::format("reshape: {} has {} elements, {} has {}", v->type.str(),
                          ir::num_elements(v->type.shape), ir::shape_str(shape), ir::num_elements(shape)));
  return at(loc).reshape(v, std::move(shape));
}
Tile permute(const Tile& t, std::vector<int64_t> perm, Loc loc) {
  return at(loc).permute(need(t, loc, "permute"), std::move(perm));
}
Tile trans(const Tile& t, Loc loc) {
  if (need(t, loc, "trans")->type.rank() != 2)
    fail(loc, fmt::format("trans: needs a 2-d tile, got {}", t.type().str()));
  return at(loc).permute(t.value(), {1, 0});
}

Tile multiple_of(const Tile& param, int64_t n, Loc loc) {
  ir::Value* v = need(param, loc, "multiple_of");
  if (v->def || (v->owner && v->owner->parent)) // a loop's block argument has a parent op
    fail(loc, "multiple_of: only a kernel parameter (KernelBuilder::arg) takes the promise");
  if (!v->type.is_scalar() || v->type.is_ptr() || !ir::is_int(v->type.dtype()) || v->type.dtype() == ir::DType::i1)
    fail(loc, fmt::format("multiple_of: needs an integer scalar parameter, got {}", v->type.str()));
  if (n < 2 || (n & (n - 1)) != 0) fail(loc, fmt::format("multiple_of: {} is not a power of two from 2", n));
  v->multiple_of = n;
  return param;
}

} // namespace tilec::dsl
