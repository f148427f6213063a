// Tensor descriptor loads and stores as the masked loads and stores they describe
// (ir/SEMANTICS.md, "Tensor descriptors"): the form every backend runs, and the one the GPU
// lowering takes wherever a descriptor load does not become a TMA copy.
#include <utility>

#include "ir/builder.h"
#include "ir/passes.h"

namespace tilec::ir {

namespace {

// Whether an integer scalar is known to be at least 0: a program id or count, a number from
// 0, a loop's induction variable from such a start by a positive step, or sums, products,
// minima and maxima of such values (index arithmetic is assumed not to overflow, as
// everywhere in a kernel's addressing). Those coordinates need no lower-bound check.
bool known_nonnegative(const Value* v, int depth = 0) {
  if (depth > 16) return false;
  if (const Block* owner = v->owner; owner && owner->parent && owner->parent->kind == OpKind::For &&
                                     !owner->args.empty() && owner->args[0] == v) {
    const Op& loop = *owner->parent;
    const Op* step = loop.operands[2]->def;
    return step && step->kind == OpKind::Constant && !step->attrs.value.is_float && step->attrs.value.i > 0 &&
           known_nonnegative(loop.operands[0], depth + 1);
  }
  const Op* d = v->def;
  if (!d) return false;
  switch (d->kind) {
  case OpKind::ProgramId:
  case OpKind::NumPrograms: return true;
  case OpKind::Constant: return !d->attrs.value.is_float && d->attrs.value.i >= 0;
  case OpKind::Add:
  case OpKind::Mul:
  case OpKind::Min:
  case OpKind::Max:
    return known_nonnegative(d->operands[0], depth + 1) && known_nonnegative(d->operands[1], depth + 1);
  default: return false;
  }
}

// The ops replacing one descriptor op, built into `scratch` (a block outside the function)
// with `b`: the address tile base + sum over dims (offset_d + arange) * stride_d and the mask
// 0 <= offset_d + arange < size_d, each dim broadcast to the block.
std::pair<Value*, Value*> address_and_mask(Builder& b, const Op& op) {
  const bool store = op.kind == OpKind::DescStore;
  const size_t rank = desc_rank(op);
  const Shape& block = store ? op.operands.back()->type.shape : op.result()->type.shape;
  // Index arithmetic in the widest integer type among the scalars (i32 at least).
  DType it = DType::i32;
  for (size_t i = 1; i < op.operands.size() - (store ? 1 : 0); ++i)
    if (dtype_bits(op.operands[i]->type.dtype()) > 32) it = DType::i64;
  auto widen = [&](Value* v) { return v->type.dtype() == it ? v : b.cast(v, it); };
  // Per dim, the coordinates as a tile of size 1 but along that dim, broadcast to the block
  // only where the dims' terms meet (as the DSL's operators broadcast): the arithmetic stays
  // at each dim's own size.
  // The address is built dim by dim, as a kernel writing base + rows * stride + cols would:
  // the outer dims' part is then the same for every trip of a loop over the inner offset.
  Value* ptr = nullptr;
  Value* mask = nullptr;
  auto combine = [&](Value* acc, Value* x, OpKind k) {
    if (!acc) return k == OpKind::AddPtr ? b.addptr(b.splat(op.operands[0], x->type.shape), x) : x;
    Shape s = acc->type.shape;
    for (size_t i = 0; i < s.size(); ++i) s[i] = std::max(s[i], x->type.shape[i]);
    if (acc->type.shape != s) acc = b.broadcast(acc, s);
    if (x->type.shape != s) x = b.broadcast(x, s);
    return k == OpKind::AddPtr ? b.addptr(acc, x) : b.binary(k, acc, x);
  };
  const int64_t boxes = op.attrs.boxes;
  bool nonnegative = true; // every offset of the dim
  for (size_t d = 0; d < rank; ++d) {
    Value* r = b.arange(0, block[d]);
    if (it != DType::i32) r = b.cast(r, it);
    auto offset = [&](int64_t box) { return b.splat(widen(op.operands[desc_offset_index(op, d, box)]), {block[d]}); };
    Value* coord;
    if (d == 0 && boxes > 1) {
      // A gather: row r is row r mod h of box r / h (h rows a box), which starts at that box's
      // offset, chosen by comparing r with the boxes' ends, last box first.
      const int64_t h = block[0] / boxes;
      Value* start = offset(boxes - 1);
      nonnegative = known_nonnegative(op.operands[desc_offset_index(op, 0, boxes - 1)]);
      for (int64_t i = boxes - 1; i-- > 0;) {
        Value* end = b.splat(b.constant(scalar_type(it), ConstValue::of_int((i + 1) * h)), {block[0]});
        start = b.select(b.binary(OpKind::Lt, r, end), offset(i), start);
        nonnegative = nonnegative && known_nonnegative(op.operands[desc_offset_index(op, 0, i)]);
      }
      Value* within = b.binary(OpKind::Rem, r, b.splat(b.constant(scalar_type(it), ConstValue::of_int(h)), {block[0]}));
      coord = b.binary(OpKind::Add, start, within);
    } else {
      coord = b.binary(OpKind::Add, offset(0), r);
      nonnegative = known_nonnegative(op.operands[desc_offset_index(op, d)]);
    }
    for (size_t e = 0; e < rank; ++e)
      if (e != d) coord = b.expand_dims(coord, int(e));
    const Shape& cs = coord->type.shape;
    Value* inside = b.binary(OpKind::Lt, coord, b.splat(widen(op.operands[1 + d]), cs));
    if (!nonnegative)
      inside = b.binary(OpKind::And, b.binary(OpKind::Ge, coord, b.splat(b.constant(scalar_type(it), ConstValue::of_int(0)), cs)),
                        inside);
    mask = combine(mask, inside, OpKind::And);
    ptr = combine(ptr, b.binary(OpKind::Mul, coord, b.splat(widen(op.operands[1 + rank + d]), cs)), OpKind::AddPtr);
  }
  if (ptr->type.shape != block) ptr = b.broadcast(ptr, block);
  if (mask->type.shape != block) mask = b.broadcast(mask, block);
  return {ptr, mask};
}

} // namespace

int expand_descriptors(Function& f, const std::function<bool(const Op&)>& keep) {
  std::vector<Op*> todo;
  walk(f.body, [&](Op& op) {
    if ((op.kind == OpKind::DescLoad || op.kind == OpKind::DescStore) && !(keep && keep(op))) todo.push_back(&op);
  });
  for (Op* op : todo) {
    Block scratch;
    Builder b(f);
    b.set_block(&scratch);
    b.loc = op->loc;
    auto [ptr, mask] = address_and_mask(b, *op);
    if (op->kind == OpKind::DescLoad) {
      Value* v = b.load(ptr, mask);
      replace_all_uses(f.body, op->result(), v);
    } else {
      b.store(ptr, op->operands.back(), mask);
    }
    Block& parent = *op->parent;
    auto at = std::find_if(parent.ops.begin(), parent.ops.end(), [&](const auto& o) { return o.get() == op; });
    for (auto& o : scratch.ops) o->parent = &parent;
    at = parent.ops.erase(at);
    parent.ops.insert(at, std::make_move_iterator(scratch.ops.begin()), std::make_move_iterator(scratch.ops.end()));
  }
  return int(todo.size());
}

} // namespace tilec::ir
