// Tensor-core dot operands copied straight from global memory to their shared-memory
// staging (16-byte cp.async), and the software pipelining of the loops that hold such dots:
// which loads qualify, where their buffers go, and the copies issued ahead.
#include "codegen/lowering.h"
#include "ir/param_access.h"

namespace tilec::codegen::detail {

void Lowering::plan_async_copies() {
  if (!opts_.tensor_cores) return;
  std::function<void(const ir::Block&, const std::function<void(const Op&)>&)> walk =
      [&](const ir::Block& b, const std::function<void(const Op&)>& f) {
        for (const auto& op : b.ops) {
          f(*op);
          for (const auto& r : op->regions) walk(*r, f);
        }
      };
  std::map<const Value*, int> uses;
  walk(fn_.body, [&](const Op& op) {
    for (const Value* v : op.operands) ++uses[v];
  });
  walk(fn_.body, [&](const Op& dot) {
    if (dot.kind != OpKind::Dot || !mma_eligible(dot)) return;
    for (int idx = 0; idx < 2; ++idx) {
      const Value* x = dot.operands[size_t(idx)];
      const Op* view = nullptr;
      const Op* load = x->def;
      if (load && load->kind == OpKind::Permute && load->attrs.perm == std::vector<int64_t>{1, 0}) {
        view = load;
        load = load->operands[0]->def;
      }
      if (!load || load->kind != OpKind::Load || uses[x] != 1 || (view && uses[load->results[0]] != 1)) continue;
      if (load->parent != dot.parent || (view && view->parent != dot.parent)) continue;
      if (load->other() && !is_positive_zero(load->other())) continue;
      // Nothing between the load and the dot may write memory.
      bool between = false, clobber = false;
      for (const auto& o : dot.parent->ops) {
        if (o.get() == load) between = true;
        else if (o.get() == &dot) break;
        else if (between && (o->kind == OpKind::Store || ir::is_atomic(o->kind) || o->kind == OpKind::For ||
                             o->kind == OpKind::If))
          clobber = true;
      }
      if (clobber) continue;
      // The load's own layout, used by nothing else, in whole aligned 16-byte chunks, one mask
      // bit per chunk; the dot takes the operand in that layout (no conversion planned).
      LayoutId ll = plan_.op_layouts(load)[0];
      const Value* lv = load->results[0];
      LayoutId want = plan_.op_layouts(&dot)[size_t(idx)];
      if (plan_.requests(lv).size() != 1 || (view && plan_.requests(x).size() != 1)) continue;
      if (!view && want != ll) continue;
      if (view && plan_.requests(x)[0] != want) continue;
      AccessPlan ap = plan_access(*load, ll);
      if (ap.vec * ir::dtype_bytes(lv->type.dtype()) != 16 || !ap.aligned || (load->mask() && !ap.mask_uniform))
        continue;
      async_operands_[{&dot, idx}] = {load, view != nullptr};
      deferred_ops_.insert(load);
      if (view) deferred_ops_.insert(view);
    }
  });
}

Lowering::Staging Lowering::staging(const Op& dot, int idx, bool kmajor) const {
  const ir::Shape& a = dot.operands[0]->type.shape;
  const int64_t M = a[0], K = a[1], N = dot.operands[1]->type.shape[1];
  const int64_t mn = idx == 0 ? M : N;
  return {kmajor, ((kmajor ? K : mn) + 8) * 2, kmajor ? mn : K};
}

// An operand copied straight from global memory is staged along the load's contiguous
// dimension (through the transpose, if any): k-major when that dimension is K.
bool Lowering::async_kmajor(const AsyncOperand& x, int idx) {
  int rd = elems_of(plan_.op_layouts(x.load)[0], x.load->results[0]->type.shape).run_dim;
  int contig = x.transposed ? 1 - rd : rd; // in the dot's [M, K] or [K, N] coordinates
  return idx == 0 ? contig == 1 : contig == 0;
}

// The loop of a dot's asynchronous operand pipelines it when the loop asks for stages, the
// dot and the load sit in its body (not deeper), its step is a positive constant, and the
// load's address and mask can be computed for a later iteration: from the induction
// variable, values defined outside the loop, pure ops, and loads of parameters the kernel
// never writes (a block table, say: it is read ahead too). The K/V data must be read-only
// as well, since it is copied before the iteration that uses it.
void Lowering::plan_pipelines() {
  std::vector<ir::ParamAccess> access = ir::param_access(fn_);
  auto read_only = [&](const Value* ptr) {
    const Value* p = ir::root_param(fn_, ptr);
    if (!p) return false;
    size_t i = size_t(std::find(fn_.params.begin(), fn_.params.end(), p) - fn_.params.begin());
    return access[i] == ir::ParamAccess::read;
  };
  auto pure = [](const Op& o) {
    switch (o.kind) {
#define TILEC_X(E, N) case OpKind::E:
      TILEC_VIEW_OR_ELEMENTWISE_OPS(TILEC_X)
#undef TILEC_X
    case OpKind::ProgramId:
    case OpKind::NumPrograms: return o.kind != OpKind::Reshape ||
                                     is_trivial_reshape(o.operands[0]->type.shape, o.results[0]->type.shape);
    default: return false;
    }
  };
  std::map<const Value*, std::vector<const Op*>> users;
  std::function<void(const ir::Block&)> index = [&](const ir::Block& b) {
    for (const auto& op : b.ops) {
      for (const Value* v : op->operands) users[v].push_back(op.get());
      for (const auto& r : op->regions) index(*r);
    }
  };
  index(fn_.body);
  std::map<const Op*, std::set<const Op*>> slices; // per loop
  for (auto& [key, x] : async_operands_) {
    const Op& dot = *key.first;
    const ir::Block* body = dot.parent;
    const Op* loop = body->parent;
    if (!loop || loop->kind != OpKind::For || loop->attrs.num_stages < 2 || !read_only(x.load->operands[0])) continue;
    const Op* step = loop->operands[2]->def;
    if (!step || step->kind != OpKind::Constant || step->attrs.value.is_float || step->attrs.value.i <= 0) continue;
    // The ops of the body the load's operands need, or failure.
    std::set<const Op*> slice;
    std::function<bool(const Value*)> ahead = [&](const Value* v) {
      if (v == body->args[0]) return true;
      if (std::find(body->args.begin() + 1, body->args.end(), v) != body->args.end()) return false; // carried
      const Op* d = v->def;
      if (!d || d->parent != body || slice.count(d)) return true; // defined outside the loop
      if (deferred_ops_.count(d)) return false;
      if (!pure(*d) && !(d->kind == OpKind::Load && read_only(d->operands[0]))) return false;
      for (const Value* o : d->operands)
        if (!ahead(o)) return false;
      slice.insert(d);
      return true;
    };
    bool ok = true;
    for (size_t i = 1; i < x.load->operands.size(); ++i) ok = ok && ahead(x.load->operands[i]);
    if (!ok || !ahead(x.load->operands[0])) continue;
    Pipeline& pl = pipelines_[loop];
    pl.loop = loop;
    pl.stages = loop->attrs.num_stages;
    slices[loop].insert(slice.begin(), slice.end());
    Staging st = staging(dot, key.second, async_kmajor(x, key.second));
    x.pipe = &pl;
    x.slot = pl.operands.size();
    pl.operands.push_back({x.load, x.transposed, key.second == 0, st, pl.stage_bytes});
    pl.stage_bytes += st.bytes();
  }
  for (auto& [loop, pl] : pipelines_) {
    for (const auto& o : loop->region(0).ops) // the slices of all its operands, in body order
      if (slices[loop].count(o.get())) pl.slice.push_back(o.get());
    pl.base = pipe_bytes_;
    pipe_bytes_ += pl.stages * pl.stage_bytes;
    // Ops of the slice whose results only the pipelined loads (or other such ops) use are
    // not emitted in the body any more: the copies issued ahead are their only users.
    std::set<const Op*> loads;
    for (const auto& o : pl.operands) loads.insert(o.load);
    const std::set<const Op*>& in_slice = slices[loop];
    for (auto it = pl.slice.rbegin(); it != pl.slice.rend(); ++it) {
      bool only_ahead = true;
      for (const Value* r : (*it)->results)
        for (const Op* u : users[r])
          only_ahead = only_ahead && (loads.count(u) || (deferred_ops_.count(u) && in_slice.count(u)));
      if (only_ahead) deferred_ops_.insert(*it);
    }
  }
  need_smem(0);
}

llvm::Value* Lowering::pipe_buffer(const Pipeline& pl, llvm::Value* stage, size_t slot) {
  if (!smem_base_) smem_base_ = hooks_.shared_base(pb_);
  llvm::Value* off = b_.CreateAdd(b_.CreateMul(stage, b_.getInt32(uint32_t(pl.stage_bytes)), "", true, true),
                                  b_.getInt32(uint32_t(pl.base + pl.operands[slot].offset)), "", true, true);
  return b_.CreateGEP(b_.getInt8Ty(), smem_base_, off);
}

// One 16-byte cp.async per chunk `load` would have read, into the operand's staging at
// `base` (zero-filled where the load's mask, or ahead_pred_, is off).
void Lowering::issue_copies(const Op& load, bool transposed, const Staging& st, bool is_a, llvm::Value* base,
                            const char* what) {
  LayoutId ll = plan_.op_layouts(&load)[0];
  const Value* ptr = load.operands[0];
  const Elems& P = get(ptr, ll);
  const Elems* mask = load.mask() ? &get(load.mask(), ll) : nullptr;
  AccessPlan ap = plan_access(load, ll);
  auto cs = coords(ll, ptr->type.shape);
  std::string where = site(what);
  for (size_t j0 = 0; j0 < P.size(); j0 += size_t(ap.vec)) {
    llvm::Value* d0 = transposed ? cs[j0][1] : cs[j0][0]; // the dot's (m, k) or (k, n)
    llvm::Value* d1 = transposed ? cs[j0][0] : cs[j0][1];
    llvm::Value* mn = is_a ? d0 : d1, *k = is_a ? d1 : d0;
    llvm::Value* row = st.kmajor ? mn : k, *col = st.kmajor ? k : mn;
    llvm::Value* byte = b_.CreateAdd(b_.CreateMul(row, b_.getInt32(uint32_t(st.row_bytes)), "", true, true),
                                     b_.CreateMul(col, b_.getInt32(2), "", true, true), "", true, true);
    llvm::Value* pred = and_pred(mask ? (*mask)[j0] : nullptr, ahead_pred_);
    hooks_.cp_async_16(b_, b_.CreateGEP(b_.getInt8Ty(), base, byte), P[j0], pred, where);
  }
}

// The copies of iteration `iv` (the induction variable's value) into buffer `stage`: the
// slice is emitted again with the induction variable replaced, its loads guarded by iv <
// the loop's end, then one cp.async group is committed.
void Lowering::issue_ahead(Pipeline& pl, llvm::Value* iv, llvm::Value* stage, bool in_loop) {
  const ir::Block& body = pl.loop->region(0);
  auto saved = vals_;
  vals_[{body.args[0], kScalar}] = {iv};
  ahead_pred_ = b_.CreateICmpSLT(iv, get(pl.loop->operands[1], kScalar)[0]);
  emitting_ahead_ = true;
  for (const Op* o : pl.slice) {
    // The layout plan lists each conversion of the body once: those of ops only the copies
    // need are counted where the loop issues them, and nowhere else.
    int conversions = stats_.conversions;
    emit_op(*o);
    if (!in_loop || !deferred_ops_.count(o)) stats_.conversions = conversions;
  }
  emitting_ahead_ = false;
  for (size_t i = 0; i < pl.operands.size(); ++i) {
    const Pipeline::Operand& x = pl.operands[i];
    const char* what = x.is_a ? "dot (mma) operand A, asynchronous copy issued ahead"
                              : "dot (mma) operand B, asynchronous copy issued ahead";
    const Op* outer = cur_op_;
    cur_op_ = x.load;
    issue_copies(*x.load, x.transposed, x.st, x.is_a, pipe_buffer(pl, stage, i), what);
    cur_op_ = outer;
  }
  ahead_pred_ = nullptr;
  vals_ = std::move(saved);
  hooks_.cp_async_commit(b_);
}

} // namespace tilec::codegen::detail
