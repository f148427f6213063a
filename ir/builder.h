#pragma once
// Builds tile IR into a function, appending at an insertion block. Every op is
// checked against its typing rule as it is made; a failure is a UserError at
// `loc`, the source location stamped on each op created.
#include <vector>

#include "ir/ir.h"

namespace tilec::ir {

class Builder {
public:
  explicit Builder(Function& f) : fn_(f), block_(&f.body) {}

  Function& function() { return fn_; }
  Block* block() const { return block_; }
  void set_block(Block* b) { block_ = b; }

  SourceLoc loc; // stamped on every op created

  // The generic entry point (the parser uses it): appends an op and checks it.
  // Ops with regions get `num_regions` empty blocks and are checked by
  // `check(op)` once their regions are filled.
  Op* create(OpKind kind, std::vector<Value*> operands, std::vector<Type> result_types,
             Attrs attrs = {}, int num_regions = 0);
  // Throws UserError at the op's location if it breaks its typing rule.
  void check(const Op& op) const;

  Value* program_id(int axis);
  Value* num_programs(int axis);
  Value* arange(int64_t start, int64_t end);
  Value* constant(Type type, ConstValue value);
  Value* splat(Value* scalar, Shape shape);
  Value* broadcast(Value* v, Shape shape);
  Value* expand_dims(Value* v, int axis);
  Value* reshape(Value* v, Shape shape);
  Value* permute(Value* v, std::vector<int64_t> perm);
  Value* addptr(Value* ptr, Value* offset);
  Value* load(Value* ptr, Value* mask = nullptr, Value* other = nullptr);
  void store(Value* ptr, Value* value, Value* mask = nullptr);
  Value* atomic_add(Value* ptr, Value* value, Value* mask = nullptr);
  Value* atomic_rmw(OpKind kind, Value* ptr, Value* value, Value* mask = nullptr); // is_atomic_rmw(kind)
  Value* atomic_cas(Value* ptr, Value* cmp, Value* value, Value* mask = nullptr);
  Value* unary(OpKind kind, Value* v);
  Value* binary(OpKind kind, Value* a, Value* b); // also comparisons
  Value* select(Value* cond, Value* a, Value* b);
  Value* fma(Value* a, Value* b, Value* c);
  Value* cast(Value* v, DType to);
  Value* bitcast(Value* v, DType to);
  void assert_true(Value* cond, std::string message);
  void print(Value* v, std::string prefix);
  Value* dot(Value* a, Value* b, Value* acc);
  Value* reduce(ReduceKind kind, Value* v, int axis);
  Value* scan(ReduceKind kind, Value* v, int axis); // inclusive
  // A reduce or scan (`kind`) with a user's combine function: the op, its region holding the
  // args (a, b) as scalars of v's dtype and no ops yet. Fill it, end it with yield, check(op).
  Op* combine_op(OpKind kind, Value* v, int axis);

  // A for op whose body block has args (iv, carried...) and no terminator yet.
  Op* for_op(Value* lb, Value* ub, Value* step, const std::vector<Value*>& inits);
  // An if op with empty then/else blocks and the given result types.
  Op* if_op(Value* cond, const std::vector<Type>& result_types);
  void yield(const std::vector<Value*>& values);
  void ret();

private:
  Function& fn_;
  Block* block_;
};

} // namespace tilec::ir
