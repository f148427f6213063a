// Tensor descriptor loads and stores as the masked loads and stores they describe
// (ir/SEMANTICS.md, "Tensor descriptors"): the form every backend runs, and the one the GPU
// lowering takes wherever a descriptor load does not become a TMA copy.
#include <utility>

#include "ir/builder.h"
#include "ir/passes.h"

namespace tilec::ir {

namespace {

// The ops replacing one descriptor op, built into `scratch` (a block outside the function)
// with `b`: the address tile base + sum over dims (offset_d + arange) * stride_d and the mask
// 0 <= offset_d + arange < size_d, each dim broadcast to the block.
std::pair<Value*, Value*> address_and_mask(Builder& b, const Op& op) {
  const bool store = op.kind == OpKind::DescStore;
  const size_t rank = (op.operands.size() - (store ? 2 : 1)) / 3;
  const Shape& block = store ? op.operands.back()->type.shape : op.result()->type.shape;
  // Index arithmetic in the widest integer type among the scalars (i32 at least).
  DType it = DType::i32;
  for (size_t i = 1; i < 1 + 3 * rank; ++i)
    if (dtype_bits(op.operands[i]->type.dtype()) > 32) it = DType::i64;
  auto widen = [&](Value* v) { return v->type.dtype() == it ? v : b.cast(v, it); };
  Value* offset = nullptr;
  Value* mask = nullptr;
  for (size_t d = 0; d < rank; ++d) {
    Value* r = b.arange(0, block[d]);
    if (it != DType::i32) r = b.cast(r, it);
    Value* coord = b.binary(OpKind::Add, b.splat(widen(op.operands[1 + 2 * rank + d]), {block[d]}), r);
    // [block[d]] -> the block's rank, size 1 everywhere else, then broadcast.
    for (size_t e = 0; e < rank; ++e)
      if (e != d) coord = b.expand_dims(coord, int(e));
    coord = b.broadcast(coord, block);
    Value* zero = b.splat(b.constant(scalar_type(it), ConstValue::of_int(0)), block);
    Value* size = b.splat(widen(op.operands[1 + d]), block);
    Value* inside = b.binary(OpKind::And, b.binary(OpKind::Ge, coord, zero), b.binary(OpKind::Lt, coord, size));
    mask = mask ? b.binary(OpKind::And, mask, inside) : inside;
    Value* term = b.binary(OpKind::Mul, coord, b.splat(widen(op.operands[1 + rank + d]), block));
    offset = offset ? b.binary(OpKind::Add, offset, term) : term;
  }
  Value* ptr = b.addptr(b.splat(op.operands[0], block), offset);
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
