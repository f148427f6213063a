// The machinery under every DSL call: Tile, the handle on the thread's list of live tiles
// (detail::Tracker), and KernelBuilder, which owns a kernel while it is built.
#include <fmt/format.h>

#include "dsl/internal.h"
#include "ir/passes.h"
#include "ir/verifier.h"

namespace tilec::dsl {

namespace detail {

namespace {
thread_local Tracker* g_current = nullptr;
}

Tracker& current(const Loc& loc) {
  if (!g_current)
    throw UserError(SourceLoc::from(loc), "DSL call outside a kernel: create a KernelBuilder first");
  return *g_current;
}

} // namespace detail

using namespace detail;

// --- Tile

Tile::Tile() { attach(); }
Tile::Tile(ir::Value* v) : v_(v) { attach(); }
Tile::Tile(const Tile& o) : v_(o.v_) { attach(); }
Tile& Tile::operator=(const Tile& o) {
  v_ = o.v_;
  return *this;
}
Tile::~Tile() { detach(); }

void Tile::attach() {
  tracker_ = detail::g_current;
  if (tracker_) tracker_->link(this);
}
void Tile::detach() {
  if (tracker_) tracker_->unlink(this);
  tracker_ = nullptr;
}

const ir::Type& Tile::type() const {
  if (!v_) throw UserError("a default-constructed Tile has no type");
  return v_->type;
}

Tile Tile::to(ElemType t, Loc loc) const {
  ir::Value* v = need(*this, loc, "to");
  if (t.is_ptr || v->type.is_ptr()) fail(loc, fmt::format("cannot cast {} to {}", v->type.str(), t.str()));
  return cast_to(v, t.dtype, loc);
}
Tile Tile::col(Loc loc) const { return expand_dims(*this, 1, loc); }
Tile Tile::row(Loc loc) const { return expand_dims(*this, 0, loc); }

// --- KernelBuilder

KernelBuilder::KernelBuilder(std::string name, Loc loc) : fn_(std::make_shared<ir::Function>(name)) {
  if (name.empty()) fail(loc, "a kernel needs a name");
  tracker_ = std::make_unique<detail::Tracker>(*fn_, std::move(name));
  tracker_->builder.loc = SourceLoc::from(loc);
  outer_ = nullptr;
  if (detail::g_current) fail(loc, "KernelBuilder: another kernel is being built on this thread");
  detail::g_current = tracker_.get();
}

KernelBuilder::~KernelBuilder() {
  // Tiles that outlive the kernel stop tracking.
  for (Tile* t = tracker_->head; t;) {
    Tile* next = t->next_;
    t->tracker_ = nullptr;
    t->prev_ = t->next_ = nullptr;
    t = next;
  }
  if (detail::g_current == tracker_.get()) detail::g_current = nullptr;
}

Tile KernelBuilder::arg(ElemType type, std::string name, Loc loc) {
  if (!fn_) fail(loc, "arg: the kernel is already finished");
  for (ir::Value* p : fn_->params)
    if (p->name == name) fail(loc, fmt::format("arg: a parameter named '{}' already exists", name));
  if (!fn_->body.ops.empty()) fail(loc, fmt::format("arg '{}': declare parameters before any op", name));
  return fn_->add_param(std::move(name), ir::Type{type, {}});
}

void KernelBuilder::min_blocks_per_sm(int n, Loc loc) {
  if (!fn_) fail(loc, "min_blocks_per_sm: the kernel is already finished");
  if (n < 1 || n > 32) fail(loc, fmt::format("min_blocks_per_sm {} must be from 1 to 32", n));
  fn_->min_blocks_per_sm = n;
}

void KernelBuilder::max_registers(int n, Loc loc) {
  if (!fn_) fail(loc, "max_registers: the kernel is already finished");
  if (std::string why = ir::Function::max_registers_error(n); !why.empty()) fail(loc, why);
  fn_->max_registers = n;
}

Kernel KernelBuilder::finish(Loc loc) {
  if (!fn_) fail(loc, "finish: the kernel is already finished");
  ir::Builder& b = tracker_->builder;
  if (b.block() != &fn_->body) fail(loc, "finish: called inside a loop or if body");
  b.loc = SourceLoc::from(loc);
  b.ret();
  ir::verify(*fn_);
  ir::run_default_passes(*fn_);
  fn_->renumber();
  Kernel k = std::move(fn_);
  fn_ = nullptr;
  return k;
}

} // namespace tilec::dsl