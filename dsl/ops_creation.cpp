// Creation ops: program ids, arange, and tiles filled with one value (full, zeros, scalar).
#include <fmt/format.h>

#include "dsl/internal.h"

namespace tilec::dsl {

using namespace detail;

Tile program_id(int axis, Loc loc) { return at(loc).program_id(axis); }
Tile num_programs(int axis, Loc loc) { return at(loc).num_programs(axis); }

Tile arange(int64_t start, int64_t end, Loc loc) {
  if (!ir::is_pow2(end - start))
    fail(loc, fmt::format("arange({}, {}): the length {} must be a power of two", start, end, end - start));
  return at(loc).arange(start, end);
}

Tile full(Shape shape, Operand value, ElemType type, Loc loc) {
  for (int64_t d : shape)
    if (!ir::is_pow2(d)) fail(loc, fmt::format("full: dimension {} of {} is not a power of two", d, ir::shape_str(shape)));
  if (!value.is_literal) return broadcast_value(as_scalar(value, type.dtype, loc, "full"), shape, loc);
  value.loc = loc;
  return literal(value, type, shape);
}

Tile zeros(Shape shape, ElemType type, Loc loc) { return full(std::move(shape), 0, type, loc); }
Tile scalar(Operand value, ElemType type, Loc loc) { return full({}, value, type, loc); }

} // namespace tilec::dsl
