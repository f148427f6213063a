#pragma once
// What dsl/'s source files share and users never include (not installed): the per-kernel
// state (Tracker, kernel_builder.cpp) and the rules every op applies (rules.cpp).
#include <initializer_list>
#include <string>
#include <vector>

#include "dsl/dsl.h"

namespace tilec::dsl::detail {

// Per-kernel DSL state: the IR builder and the list of live Tile variables.
struct Tracker {
  ir::Builder builder;
  Tile* head = nullptr;
  uint64_t next_serial = 1;
  std::string kernel_name;

  Tracker(ir::Function& f, std::string name) : builder(f), kernel_name(std::move(name)) {}

  void link(Tile* t) {
    t->serial_ = next_serial++;
    t->prev_ = nullptr;
    t->next_ = head;
    if (head) head->prev_ = t;
    head = t;
  }
  void unlink(Tile* t) {
    if (t->prev_) t->prev_->next_ = t->next_;
    else head = t->next_;
    if (t->next_) t->next_->prev_ = t->prev_;
    t->prev_ = t->next_ = nullptr;
  }
  template <class F> void for_each_live(F&& f) {
    for (Tile* t = head; t; t = t->next_)
      if (t->v_) f(*t);
  }
};

// The state of the kernel being built on this thread (a UserError outside a kernel).
Tracker& current(const Loc& loc);

// --- the rules (rules.cpp)
// The builder, with `loc` stamped on the ops it is about to create.
ir::Builder& at(const Loc& loc);
[[noreturn]] void fail(const Loc& loc, const std::string& msg);
// t's value; a UserError naming `what` if it has none (a default-constructed Tile).
ir::Value* need(const Tile& t, const Loc& loc, const char* what);
// The dtype two operands meet at.
DType promote(DType a, DType b);
// NumPy broadcasting: of two shapes (a UserError naming `what` if they do not broadcast),
// and of a value to a shape.
Shape broadcast_shape(const Shape& a, const Shape& b, const Loc& loc, const char* what);
ir::Value* broadcast_value(ir::Value* v, const Shape& to, const Loc& loc);
// A C++ number as a constant of dtype `t` and shape `shape`.
ir::Value* literal(const Operand& o, ElemType t, const Shape& shape);
ir::Value* cast_to(ir::Value* v, DType t, const Loc& loc);
// Brings operands to one dtype (unless `keep_dtypes`) and one shape.
std::vector<ir::Value*> unify(std::vector<Operand> ops, const char* what, bool keep_dtypes = false);
// Elementwise ops on unified operands; unary ones compute integers in f32 (but abs and neg).
Tile binary(ir::OpKind k, const Operand& a, const Operand& b);
Tile unary(ir::OpKind k, const Tile& a, const Loc& loc);
// Operand checks: a mask (i1) and a value of `elem`, each broadcast to `shape`; a scalar
// (of control flow) cast to `dt`.
ir::Value* as_mask(const Operand& m, const Shape& shape, const Loc& loc, const char* what);
ir::Value* as_value(const Operand& o, ElemType elem, const Shape& shape, const Loc& loc);
ir::Value* as_scalar(const Operand& o, DType dt, const Loc& loc, const char* what);
// The shape a memory op works on: the address tile's, grown by its operands'.
Shape memory_shape(const Tile& ptr, std::initializer_list<const Operand*> ops, const Loc& loc,
                   const char* what);
// `axis` of `v` (negative: from the end), checked; `what` names the call in the error.
int checked_axis(const ir::Value* v, int axis, const Loc& loc, const std::string& what);

} // namespace tilec::dsl::detail
