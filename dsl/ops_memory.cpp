// Memory ops: masked loads and stores through pointer tiles, and tensor descriptors
// (make_tensor_desc, and the loads and stores of whole blocks through them).
#include <fmt/format.h>

#include "dsl/internal.h"

namespace tilec::dsl {

using namespace detail;

Tile load(const Tile& ptr, Loc loc) {
  return at(loc).load(need(ptr, loc, "load"));
}
Tile load(const Tile& ptr, Operand mask, Loc loc) {
  Shape s = memory_shape(ptr, {&mask}, loc, "load");
  ir::Value* m = as_mask(mask, s, loc, "load");
  return at(loc).load(broadcast_value(ptr.value(), s, loc), m);
}
Tile load(const Tile& ptr, Operand mask, Operand other, Loc loc) {
  Shape s = memory_shape(ptr, {&mask, &other}, loc, "load");
  ir::Value* m = as_mask(mask, s, loc, "load");
  ir::Value* o = as_value(other, {ptr.type().dtype(), false}, s, loc);
  return at(loc).load(broadcast_value(ptr.value(), s, loc), m, o);
}

void store(const Tile& ptr, Operand value, Loc loc) {
  Shape s = memory_shape(ptr, {&value}, loc, "store");
  ir::Value* v = as_value(value, {ptr.type().dtype(), false}, s, loc);
  at(loc).store(broadcast_value(ptr.value(), s, loc), v);
}
void store(const Tile& ptr, Operand value, Operand mask, Loc loc) {
  Shape s = memory_shape(ptr, {&value, &mask}, loc, "store");
  ir::Value* v = as_value(value, {ptr.type().dtype(), false}, s, loc);
  ir::Value* m = as_mask(mask, s, loc, "store");
  at(loc).store(broadcast_value(ptr.value(), s, loc), v, m);
}

namespace {

// An integer scalar operand of a descriptor (a number: i32).
ir::Value* desc_int(const Operand& o, const Loc& loc, const char* what) {
  if (o.is_literal) {
    if (o.lit.is_float) fail(loc, fmt::format("{}: needs an integer, got {}", what, o.lit.f));
    return at(loc).constant(ir::scalar_type(DType::i32), o.lit);
  }
  if (!o.v) fail(loc, fmt::format("{}: the operand has no value", what));
  const ir::Type& t = o.v->type;
  if (!t.is_scalar() || t.is_ptr() || !ir::is_int(t.dtype()) || t.dtype() == DType::i1)
    fail(loc, fmt::format("{}: needs an integer scalar, got {}", what, t.str()));
  return o.v;
}

std::vector<ir::Value*> desc_operands(const TensorDesc& d, const std::vector<Operand>& offsets, const Loc& loc,
                                      const char* what) {
  if (!d.base.value()) fail(loc, fmt::format("{}: the descriptor has no base (default-constructed)", what));
  if (offsets.size() != d.block.size())
    fail(loc, fmt::format("{}: {} offsets for a rank-{} descriptor", what, offsets.size(), d.block.size()));
  std::vector<ir::Value*> ops{d.base.value()};
  for (const Tile& t : d.shape) ops.push_back(t.value());
  for (const Tile& t : d.strides) ops.push_back(t.value());
  for (const Operand& o : offsets) ops.push_back(desc_int(o, loc, fmt::format("{} offset", what).c_str()));
  return ops;
}

} // namespace

TensorDesc make_tensor_desc(const Tile& base, std::vector<Operand> shape, std::vector<Operand> strides, Shape block,
                            Loc loc) {
  ir::Value* b = need(base, loc, "make_tensor_desc");
  if (!b->type.is_ptr() || !b->type.is_scalar())
    fail(loc, fmt::format("make_tensor_desc: the base must be a scalar pointer, got {}", b->type.str()));
  if (block.empty() || block.size() > 5 || shape.size() != block.size() || strides.size() != block.size())
    fail(loc, fmt::format("make_tensor_desc: {} sizes, {} strides and a block of rank {}: one of each per dim, 1 to 5 "
                          "dims", shape.size(), strides.size(), block.size()));
  for (int64_t d : block)
    if (d < 1 || (d & (d - 1)) != 0)
      fail(loc, fmt::format("make_tensor_desc: block dim {} is not a power of two", d));
  const Operand& inner = strides.back();
  if (!inner.is_literal || inner.lit.is_float || inner.lit.i != 1)
    fail(loc, "make_tensor_desc: the last stride must be the number 1 (the innermost dim is contiguous)");
  TensorDesc d{base, {}, {}, std::move(block)};
  for (const Operand& o : shape) d.shape.emplace_back(desc_int(o, loc, "make_tensor_desc size"));
  for (const Operand& o : strides) d.strides.emplace_back(desc_int(o, loc, "make_tensor_desc stride"));
  return d;
}

Tile load(const TensorDesc& desc, std::vector<Operand> offsets, Loc loc) {
  std::vector<ir::Value*> ops = desc_operands(desc, offsets, loc, "load (descriptor)");
  ir::Type t = ir::tile_type(desc.base.type().dtype(), desc.block);
  return at(loc).create(ir::OpKind::DescLoad, std::move(ops), {t})->result();
}

Tile load_gather(const TensorDesc& desc, std::vector<Operand> rows, std::vector<Operand> offsets, Loc loc) {
  const int64_t boxes = int64_t(rows.size());
  if (boxes < 1 || (boxes & (boxes - 1)) != 0 || desc.block.empty() || desc.block[0] % boxes != 0)
    fail(loc, fmt::format("load_gather: {} row offsets: a power of two of them that divides the block's {} rows", boxes,
                          desc.block.empty() ? 0 : desc.block[0]));
  std::vector<Operand> first{rows[0]};
  first.insert(first.end(), offsets.begin(), offsets.end());
  std::vector<ir::Value*> ops = desc_operands(desc, first, loc, "load_gather");
  std::vector<ir::Value*> more;
  for (size_t i = 1; i < rows.size(); ++i) more.push_back(desc_int(rows[i], loc, "load_gather row offset"));
  const size_t at0 = 1 + 2 * desc.block.size() + 1; // after dim 0's first offset
  ops.insert(ops.begin() + ptrdiff_t(at0), more.begin(), more.end());
  ir::Type t = ir::tile_type(desc.base.type().dtype(), desc.block);
  ir::Attrs a;
  a.boxes = boxes;
  return at(loc).create(ir::OpKind::DescLoad, std::move(ops), {t}, std::move(a))->result();
}

void store(const TensorDesc& desc, std::vector<Operand> offsets, Operand value, Loc loc) {
  std::vector<ir::Value*> ops = desc_operands(desc, offsets, loc, "store (descriptor)");
  ops.push_back(as_value(value, {desc.base.type().dtype(), false}, desc.block, loc));
  at(loc).create(ir::OpKind::DescStore, std::move(ops), {});
}

} // namespace tilec::dsl
