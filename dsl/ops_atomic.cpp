// Atomic read-modify-write ops (atomic_add ... atomic_xchg, atomic_cas), masked or not.
#include <fmt/format.h>

#include "dsl/internal.h"

namespace tilec::dsl {

using namespace detail;

namespace {

// One atomic read-modify-write of kind `k` (a mask, when given, in `mask`).
Tile atomic(ir::OpKind k, const Tile& ptr, const Operand& value, const Operand* mask, const Loc& loc) {
  const char* what = ir::op_name(k).data();
  Shape s = mask ? memory_shape(ptr, {&value, mask}, loc, what) : memory_shape(ptr, {&value}, loc, what);
  ir::Value* v = as_value(value, {ptr.type().dtype(), false}, s, loc);
  ir::Value* m = mask ? as_mask(*mask, s, loc, what) : nullptr;
  return at(loc).atomic_rmw(k, broadcast_value(ptr.value(), s, loc), v, m);
}

} // namespace

#define TILEC_DSL_ATOMIC(name, kind)                                                               \
  Tile name(const Tile& ptr, Operand value, Loc loc) { return atomic(ir::OpKind::kind, ptr, value, nullptr, loc); } \
  Tile name(const Tile& ptr, Operand value, Operand mask, Loc loc) {                                \
    return atomic(ir::OpKind::kind, ptr, value, &mask, loc);                                      \
  }
TILEC_DSL_ATOMIC(atomic_add, AtomicAdd)
TILEC_DSL_ATOMIC(atomic_max, AtomicMax)
TILEC_DSL_ATOMIC(atomic_min, AtomicMin)
TILEC_DSL_ATOMIC(atomic_and, AtomicAnd)
TILEC_DSL_ATOMIC(atomic_or, AtomicOr)
TILEC_DSL_ATOMIC(atomic_xor, AtomicXor)
TILEC_DSL_ATOMIC(atomic_xchg, AtomicXchg)
#undef TILEC_DSL_ATOMIC

Tile atomic_cas(const Tile& ptr, Operand cmp, Operand value, Loc loc) {
  Shape s = memory_shape(ptr, {&cmp, &value}, loc, "atomic_cas");
  ir::Value* c = as_value(cmp, {ptr.type().dtype(), false}, s, loc);
  ir::Value* v = as_value(value, {ptr.type().dtype(), false}, s, loc);
  return at(loc).atomic_cas(broadcast_value(ptr.value(), s, loc), c, v);
}
Tile atomic_cas(const Tile& ptr, Operand cmp, Operand value, Operand mask, Loc loc) {
  Shape s = memory_shape(ptr, {&cmp, &value, &mask}, loc, "atomic_cas");
  ir::Value* c = as_value(cmp, {ptr.type().dtype(), false}, s, loc);
  ir::Value* v = as_value(value, {ptr.type().dtype(), false}, s, loc);
  ir::Value* m = as_mask(mask, s, loc, "atomic_cas");
  return at(loc).atomic_cas(broadcast_value(ptr.value(), s, loc), c, v, m);
}

} // namespace tilec::dsl
