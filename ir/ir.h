#pragma once
// The tile IR: SSA values holding statically shaped tiles, ops with optional
// regions (structured for/if), blocks and kernel functions.
//
// Ownership: a Function owns every Value; a Block owns its Ops; an Op owns its
// region Blocks. Ops and Values refer to each other by plain pointers.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "abi/atomic_ops.h"
#include "ir/error.h"
#include "ir/ops.def"
#include "ir/types.h"

namespace tilec::ir {

enum class OpKind : uint8_t {
#define TILEC_X(E, N) E,
  TILEC_OPS(TILEC_X)
#undef TILEC_X
};

// `case` labels for a group of ops: `switch (k) { TILEC_ATOMIC_RMW_OPS(TILEC_OP_CASE) ... }`.
#define TILEC_OP_CASE(E, N) case ::tilec::ir::OpKind::E:

#define TILEC_X(E, N) +1
inline constexpr int kNumOpKinds = 0 TILEC_OPS(TILEC_X);
#undef TILEC_X

std::string_view op_name(OpKind k);
bool parse_op_name(std::string_view name, OpKind& out);

bool is_unary(OpKind k);
bool is_binary(OpKind k);
bool is_compare(OpKind k);
inline bool is_elementwise(OpKind k) { return is_unary(k) || is_binary(k) || is_compare(k); }
bool is_atomic_rmw(OpKind k);     // atomic_add, atomic_max, ... atomic_xchg
inline bool is_atomic(OpKind k) { return is_atomic_rmw(k) || k == OpKind::AtomicCas; }
AtomicOp atomic_op(OpKind k); // of an atomic op (is_atomic)
bool has_side_effects(OpKind k); // store, atomics, assert, yield, return
bool is_terminator(OpKind k);
// Ops whose regions end in yield: for, if, and reduce/scan with a combine function.
inline bool has_yield_regions(OpKind k) {
  return k == OpKind::For || k == OpKind::If || k == OpKind::Reduce || k == OpKind::Scan;
}

// combine: the op's one region, (a, b) -> yield a op b on scalars, is the user's function.
enum class ReduceKind : uint8_t { sum, max, min, prod, combine };
std::string_view reduce_kind_name(ReduceKind k);
bool parse_reduce_kind(std::string_view name, ReduceKind& out);

class Op;
class Block;

class Value {
public:
  int id = -1;     // unique within its function; printed as %id
  Type type;
  Op* def = nullptr;       // the op that produced it, or null for a block argument
  Block* owner = nullptr;  // for block arguments: the block
  std::string name;        // a hint kept for kernel parameters ("x", "n")
  // Integer kernel parameters: a power of two the caller promises divides the argument
  // (dsl::multiple_of; printed `multiple_of N`); 0: no promise. Launches check it.
  int64_t multiple_of = 0;
};

// Constant payload: ints are kept exactly, floats as double.
struct ConstValue {
  bool is_float = false;
  int64_t i = 0;
  double f = 0.0;
  static ConstValue of_int(int64_t v) { return {false, v, static_cast<double>(v)}; }
  static ConstValue of_float(double v) {
    // Casting inf, nan or a double beyond int64 is undefined behaviour.
    bool fits = v >= -0x1p63 && v < 0x1p63;
    return {true, fits ? static_cast<int64_t>(v) : 0, v};
  }
  bool operator==(const ConstValue& o) const;
};

// All attributes any op may carry; each op uses the few that apply.
// The most stages a for op's software pipeline may have.
inline constexpr int64_t kMaxPipelineStages = 8;

struct Attrs {
  int64_t axis = 0;              // program_id, num_programs, expand_dims, reduce
  int64_t start = 0;             // arange
  std::vector<int64_t> perm;     // permute
  ConstValue value;              // constant
  ReduceKind reduce = ReduceKind::sum;
  // for: stages of the software pipeline of its asynchronous copies (1: none). A hint:
  // loads the lowering cannot issue ahead keep their place (docs/ARCHITECTURE.md).
  int64_t num_stages = 1;
  // for: its pipeline's TMA copies issued by a producer warpgroup of their own, the kernel's
  // warps consuming them (docs/ARCHITECTURE.md, "Warp specialization"). A hint like stages.
  bool warp_specialize = false;
  // desc_load: its block's rows (dim 0) come in this many boxes of equal height, each from a
  // row offset of its own (a gather: paged attention's pages); 1: one box, one offset per dim.
  int64_t boxes = 1;
  std::string message; // assert; print (its prefix)
  bool operator==(const Attrs&) const = default;
};

class Block {
public:
  Op* parent = nullptr; // the op owning this region, or null for a function body
  std::vector<Value*> args;
  std::vector<std::unique_ptr<Op>> ops;

  Op* terminator() const { return ops.empty() ? nullptr : ops.back().get(); }
};

class Op {
public:
  OpKind kind;
  std::vector<Value*> operands;
  std::vector<Value*> results;
  Attrs attrs;
  std::vector<std::unique_ptr<Block>> regions;
  SourceLoc loc;
  Block* parent = nullptr;

  Value* result() const {
    internal_assert(results.size() == 1, "op has exactly one result");
    return results[0];
  }
  Block& region(size_t i) const { return *regions.at(i); }
  // Operands of load/store/atomics that are optional.
  Value* mask() const;  // nullptr if absent
  Value* other() const; // load only; nullptr if absent
  // for: the loop-carried initial values and the body's block args.
  std::vector<Value*> for_inits() const;
};

// What an atomic op does to memory, by its kind and dtype (u32 max/min: umax/umin).
AtomicOp atomic_op(const Op& op);
// A desc_load's or desc_store's rank, and the operand holding dim d's offset (for dim 0 of a
// gather, box `box`'s): base, sizes, strides, dim 0's offsets (one per box), the other dims'.
size_t desc_rank(const Op& op);
size_t desc_offset_index(const Op& op, size_t d, int64_t box = 0);

class Function {
public:
  explicit Function(std::string name) : name(std::move(name)) {}
  Function(const Function&) = delete;
  Function& operator=(const Function&) = delete;

  std::string name;
  std::vector<Value*> params; // each has a name
  Block body;
  // The blocks per SM the kernel asks to fit by registers (CUDA's __launch_bounds__ second
  // argument; printed `min_blocks_per_sm N` after the parameters): the GPU compiler keeps
  // registers within 64 K / (N * threads), N lowered to the blocks the kernel's shared memory
  // lets share an SM of the arch. 0: no ask, every register one block can have.
  int min_blocks_per_sm = 0;
  // A ceiling on registers per thread (Triton's maxnreg; printed `max_registers N`): the GPU
  // compiler keeps within it, and within what min_blocks_per_sm gives. 0: none.
  int max_registers = 0;
  static constexpr int kMinRegisters = 24, kMaxRegisters = 255;
  // Why `n` cannot be a register ceiling ("" when it can): the DSL, the parser and the compile
  // options give the same message.
  static std::string max_registers_error(int64_t n) {
    if (n >= kMinRegisters && n <= kMaxRegisters) return "";
    return "max_registers " + std::to_string(n) + " must be from " + std::to_string(kMinRegisters) + " to " +
           std::to_string(kMaxRegisters);
  }

  Value* new_value(Type t, Op* def = nullptr, Block* owner = nullptr);
  Value* add_param(std::string name, Type t);
  int num_values() const { return static_cast<int>(values_.size()); }
  // Renumbers every value in definition order (params first); keeps printing stable.
  void renumber();

private:
  std::vector<std::unique_ptr<Value>> values_;
};

using Kernel = std::shared_ptr<Function>;

// A deep copy: the same params, ops, attributes and source locations over new values.
Kernel clone(const Function& f);

// Walks every op in pre-order (an op before the ops of its regions).
template <class F> void walk(Block& b, F&& f) {
  for (auto& op : b.ops) {
    f(*op);
    for (auto& r : op->regions) walk(*r, f);
  }
}

// A tile or scalar that is the constant +0 (integer 0, or float +0.0, not -0.0) through
// splats, broadcasts, dimension changes and casts.
bool is_positive_zero(const Value* v);

// Replaces every use of `from` by `to` in `b` and nested regions.
void replace_all_uses(Block& b, Value* from, Value* to);
// Number of uses of each value id (for DCE), counted over `b` and nested regions.
std::vector<int> count_uses(const Function& f);

} // namespace tilec::ir
