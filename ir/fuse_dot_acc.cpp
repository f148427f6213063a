#include <algorithm>
#include <vector>

#include "ir/passes.h"

namespace tilec::ir {

namespace {

size_t index_of(const Block& b, const Op* op) {
  auto it = std::find_if(b.ops.begin(), b.ops.end(), [&](const auto& p) { return p.get() == op; });
  internal_assert(it != b.ops.end(), "an op is held by its parent block");
  return size_t(it - b.ops.begin());
}

bool fuse_in(Block& b, Function& f, std::vector<int>& uses) {
  bool changed = false;
  for (size_t i = 0; i < b.ops.size(); ++i) {
    Op& add = *b.ops[i];
    for (auto& r : add.regions) changed |= fuse_in(*r, f, uses);
    if (add.kind != OpKind::Add) continue;
    for (int side = 0; side < 2; ++side) {
      Value* d = add.operands[size_t(side)];
      Value* c = add.operands[size_t(1 - side)];
      Op* dot = d->def;
      // The dot is the add's to absorb: its only use, in the same block (so moving it down to
      // the add keeps its operands defined before it), with a +0 accumulator of the add's type.
      if (!dot || dot->kind != OpKind::Dot || dot->parent != &b || uses.at(size_t(d->id)) != 1 ||
          !is_positive_zero(dot->operands[2]) || c->type != add.result()->type || d->type != c->type)
        continue;
      // A product of at most 8 columns (decode's transposed tile, whose query rows are the 8
      // columns) keeps its add: accumulating into c held c's registers through the product and
      // spilled at that tile's 96-register ceiling (tests/codegen/test_mma.cpp, with ALiBi).
      if (d->type.shape.size() == 2 && d->type.shape[1] <= 8) continue;
      // dot(a, b, c) in place of the add (c is defined before it there), and the add's users
      // read the dot.
      Value* sum = add.result();
      const size_t at = index_of(b, dot); // before the add
      uses.at(size_t(dot->operands[2]->id))--;
      uses.at(size_t(d->id)) = uses.at(size_t(sum->id));
      dot->operands[2] = c;
      std::unique_ptr<Op> moved = std::move(b.ops[at]);
      b.ops[i] = std::move(moved); // the add goes
      b.ops.erase(b.ops.begin() + std::ptrdiff_t(at));
      --i;
      replace_all_uses(f.body, sum, d);
      changed = true;
      break;
    }
  }
  return changed;
}

} // namespace

bool fuse_dot_accumulate(Function& f) {
  std::vector<int> uses = count_uses(f);
  return fuse_in(f.body, f, uses);
}

} // namespace tilec::ir
