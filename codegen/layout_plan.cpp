#include "codegen/layout_plan.h"

#include <algorithm>
#include <bit>

namespace tilec::codegen {

using ir::Op;
using ir::OpKind;
using ir::Value;

namespace {

int64_t pow2_floor(int64_t v) {
  return v <= 1 ? 1 : int64_t(1) << (63 - std::countl_zero(static_cast<uint64_t>(v)));
}

int mem_bytes(const ir::Type& t) { return t.is_ptr() ? 8 : ir::dtype_bytes(t.dtype()); }

const std::vector<LayoutId> kNoRequests;

} // namespace

bool is_view_or_elementwise(OpKind k) {
  switch (k) {
#define TILEC_X(E, N) case OpKind::E:
    TILEC_VIEW_OR_ELEMENTWISE_OPS(TILEC_X)
#undef TILEC_X
    return true;
  default: return false;
  }
}

bool is_trivial_reshape(const ir::Shape& from, const ir::Shape& to) {
  ir::Shape a, b;
  for (int64_t d : from)
    if (d != 1) a.push_back(d);
  for (int64_t d : to)
    if (d != 1) b.push_back(d);
  return a == b;
}

LayoutPlan::LayoutPlan(const ir::Function& fn, const AxisAnalysis& axis, int num_warps, bool tensor_cores, bool wgmma)
    : axis_(axis), num_warps_(num_warps), tensor_cores_(tensor_cores), wgmma_(wgmma) {
  forward(fn.body);
  backward(fn.body);
  collect_conversions(fn.body);
}

LayoutId LayoutPlan::intern(const Layout& l) {
  Layout c = canonical(l);
  for (size_t i = 0; i < layouts_.size(); ++i)
    if (layouts_[i] == c) return static_cast<LayoutId>(i);
  layouts_.push_back(std::move(c));
  return static_cast<LayoutId>(layouts_.size() - 1);
}

LayoutId LayoutPlan::native(const Value* v) const {
  auto it = native_.find(v);
  return it == native_.end() ? kNone : it->second;
}

const std::vector<LayoutId>& LayoutPlan::requests(const Value* v) const {
  auto it = requests_.find(v);
  return it == requests_.end() ? kNoRequests : it->second;
}

LayoutPlan::Access LayoutPlan::access(const Value* ptr) const {
  const ir::Shape& s = ptr->type.shape;
  if (s.empty()) return {0, 1};
  const AxisInfo& info = axis_.at(ptr);
  int best = static_cast<int>(s.size()) - 1;
  for (int d = static_cast<int>(s.size()) - 1; d >= 0; --d)
    if (info.contiguity[d] > info.contiguity[best]) best = d;
  int64_t vec = std::min<int64_t>({16 / ir::dtype_bytes(ptr->type.dtype()), info.contiguity[best], s[best]});
  return {best, static_cast<int>(pow2_floor(std::max<int64_t>(1, vec)))};
}

LayoutPlan::VectorAccess LayoutPlan::vector_access(const Op& op, LayoutId l) const {
  VectorAccess p;
  if (l == kScalar) return p;
  const Value* ptr = op.operands[0];
  Access acc = access(ptr);
  ThreadElems te = thread_elems(layout(l), ptr->type.shape);
  if (te.run_dim == acc.contig_dim) p.vec = static_cast<int>(std::min<int64_t>(te.run, acc.vec));
  if (p.vec > 1) {
    p.aligned = axis_.at(ptr).divisibility[acc.contig_dim] >= p.vec;
    if (const Value* m = op.mask()) p.mask_uniform = axis_.at(m).constancy[acc.contig_dim] >= p.vec;
  }
  return p;
}

LayoutId LayoutPlan::nat(const Value* v) const {
  if (v->type.is_scalar()) return kScalar;
  auto it = nat_.find(v);
  return it == nat_.end() ? kNone : it->second;
}

LayoutId LayoutPlan::nat_or_default(const Value* v) {
  LayoutId l = nat(v);
  if (l != kNone) return l;
  return intern(default_layout(v->type.shape, mem_bytes(v->type), num_warps_));
}

LayoutId LayoutPlan::derive_reshape(LayoutId id, const ir::Shape& from, const ir::Shape& to) {
  Layout l = layout(id);
  for (int d = static_cast<int>(from.size()) - 1; d >= 0; --d)
    if (from[d] == 1) l = slice_layout(l, d);
  for (size_t d = 0; d < to.size(); ++d)
    if (to[d] == 1) l = expand_layout(l, static_cast<int>(d));
  return intern(l);
}

void LayoutPlan::forward(const ir::Block& b) {
  for (const auto& op : b.ops) forward_op(*op);
}

// Which layout each op's result is produced in (native_ and nat_) and each op's access,
// operand or staging layouts (op_layouts_): views and elementwise ops follow their operands;
// the others get one of their own.
void LayoutPlan::forward_op(const Op& op) {
  const Value* res = op.results.empty() ? nullptr : op.results[0];
  if (is_view_or_elementwise(op.kind) && res && !res->type.is_scalar()) {
    forward_view_or_elementwise(op);
    return;
  }
  switch (op.kind) {
  case OpKind::Reshape: forward_reshape(op); return;
  case OpKind::Load: {
    if (res->type.is_scalar()) return;
    Access a = access(op.operands[0]);
    LayoutId l = intern(access_layout(res->type.shape, a.contig_dim, a.vec, num_warps_));
    op_layouts_[&op] = {l};
    set_native(res, l);
    return;
  }
  case OpKind::DescLoad: forward_desc_load(op); return;
  case OpKind::DescStore: // a TMA store (prepare_descriptors expands the others): staged from the value's layout
    op_layouts_[&op] = {nat_or_default(op.operands.back())};
    return;
  case OpKind::Store: forward_store(op); return;
  TILEC_ATOMIC_RMW_OPS(TILEC_OP_CASE)
  case OpKind::AtomicCas: {
    if (res->type.is_scalar()) {
      op_layouts_[&op] = {kScalar};
      return;
    }
    Access a = access(op.operands[0]);
    LayoutId l = intern(access_layout(res->type.shape, a.contig_dim, 1, num_warps_));
    op_layouts_[&op] = {l};
    set_native(res, l);
    return;
  }
  case OpKind::Assert:
  case OpKind::Print:
    if (!op.operands[0]->type.is_scalar()) op_layouts_[&op] = {nat_or_default(op.operands[0])};
    return;
  case OpKind::Scan: { // in the operand's layout
    LayoutId p = nat_or_default(op.operands[0]);
    op_layouts_[&op] = {p};
    set_native(res, p);
    return;
  }
  case OpKind::Reduce: {
    LayoutId p = nat_or_default(op.operands[0]);
    op_layouts_[&op] = {p};
    if (!res->type.is_scalar()) set_native(res, intern(slice_layout(layout(p), static_cast<int>(op.attrs.axis))));
    return;
  }
  case OpKind::Dot: forward_dot(op); return;
  case OpKind::For: forward_for(op); return;
  case OpKind::If: forward_if(op); return;
  default: return;
  }
}

void LayoutPlan::set_native(const Value* v, LayoutId l) {
  if (v->type.is_scalar()) return;
  native_[v] = l;
  nat_[v] = l;
}

// A view's or elementwise op's tile result follows its operands: broadcast, expand_dims and
// permute derive their operand's layout; the others take an MMA accumulator operand's, else
// the first operand's that has one, else none (computed wherever it is asked for).
void LayoutPlan::forward_view_or_elementwise(const Op& op) {
  const Value* res = op.results[0];
  LayoutId l = kNone;
  switch (op.kind) {
  case OpKind::Broadcast: l = nat(op.operands[0]); break;
  case OpKind::ExpandDims: {
    LayoutId s = nat(op.operands[0]);
    if (s >= 0) l = intern(expand_layout(layout(s), static_cast<int>(op.attrs.axis)));
    break;
  }
  case OpKind::Permute: {
    LayoutId s = nat(op.operands[0]);
    if (s >= 0) l = intern(permute_layout(layout(s), op.attrs.perm));
    break;
  }
  default:
    for (const Value* v : op.operands)
      if (nat(v) >= 0 && is_mma(nat(v))) { // keep an accumulator in its fragments
        l = nat(v);
        break;
      }
    if (l == kNone)
      for (const Value* v : op.operands)
        if (nat(v) >= 0) {
          l = nat(v);
          break;
        }
  }
  if (l != kNone) nat_[res] = l;
  else nat_.erase(res);
}

// A trivial reshape is a view of its operand's layout; another moves the elements from the
// operand's layout into a default one of the result.
void LayoutPlan::forward_reshape(const Op& op) {
  const Value* src = op.operands[0];
  const Value* res = op.results[0];
  if (res->type.is_scalar()) return;
  if (is_trivial_reshape(src->type.shape, res->type.shape)) {
    LayoutId s = nat(src);
    if (s >= 0) nat_[res] = derive_reshape(s, src->type.shape, res->type.shape);
    else if (s == kScalar) nat_.erase(res);
    return;
  }
  op_layouts_[&op] = {nat_or_default(src)};
  set_native(res, nat_or_default(res));
}

// A TMA copy (prepare_descriptors expands the others): laid out as a load along its
// contiguous innermost dim would be, which tells its dot how it is read.
void LayoutPlan::forward_desc_load(const Op& op) {
  const Value* res = op.results[0];
  const ir::Shape& s = res->type.shape;
  const int inner = int(s.size()) - 1;
  const int vec = int(std::min<int64_t>(s[size_t(inner)], 16 / ir::dtype_bytes(res->type.dtype())));
  LayoutId l = intern(access_layout(s, inner, vec, num_warps_));
  op_layouts_[&op] = {l};
  set_native(res, l);
}

// The coalesced access layout of the address tile, or the stored value's own layout where
// storing from it needs no conversion and loses no width.
void LayoutPlan::forward_store(const Op& op) {
  const Value* ptr = op.operands[0];
  if (ptr->type.is_scalar()) {
    op_layouts_[&op] = {kScalar};
    return;
  }
  Access a = access(ptr);
  LayoutId l = intern(access_layout(ptr->type.shape, a.contig_dim, a.vec, num_warps_));
  // Storing straight from the value's own layout saves a conversion when that
  // layout already runs along the contiguous dim with the full vector width.
  LayoutId v = nat(op.operands[1]);
  if (v >= 0) {
    const Layout& vl = layout(v);
    ThreadElems te = thread_elems(vl, ptr->type.shape);
    bool coalesced = te.run_dim == a.contig_dim && te.run >= a.vec &&
                     vl.base.threads_per_warp[vl.dims[a.contig_dim]] >= 4;
    // A tensor-core accumulator (2 consecutive elements a lane, 4 lanes along a row) writes
    // whole 32-byte sectors of f32 rows: stored as it is, with no trip through shared memory.
    const int eb = ir::dtype_bytes(op.operands[1]->type.dtype());
    bool whole_sectors = is_mma(v) && te.run_dim == a.contig_dim && te.run <= a.vec && te.run * eb >= 8 &&
                         te.run * eb * vl.base.threads_per_warp[vl.dims[a.contig_dim]] >= 32;
    if (coalesced || whole_sectors || a.vec == 1) l = v;
  }
  op_layouts_[&op] = {l};
}

// The operands in their own layouts; the result in a warpgroup MMA's accumulator layout
// (its warpgroups along M, or along N for a tile of fewer rows than 16 per warp) where the dot
// fits one (and pays), else an mma.sync accumulator's, else the CUDA-core one.
void LayoutPlan::forward_dot(const Op& op) {
  const Value* res = op.results[0];
  const ir::Shape& s = res->type.shape;
  LayoutId d;
  const LayoutId la = nat_or_default(op.operands[0]), lb = nat_or_default(op.operands[1]);
  // Each operand is staged along the dim it is read along (its layout's fastest dim): K
  // (k-major) or M / N (MN-major).
  auto along_k = [&](LayoutId l, const Value* v, int k_dim) {
    const Layout& x = layout(l);
    return v->type.shape[size_t(k_dim)] > 1 && x.dims[size_t(k_dim)] == x.base.order[0];
  };
  const int64_t kk = op.operands[0]->type.shape[1];
  const int eb = ir::dtype_bytes(op.operands[0]->type.dtype());
  const bool ka = along_k(la, op.operands[0], 1), kb = along_k(lb, op.operands[1], 0);
  // An 8-column product (a decode tile's few query rows as N) stays on mma.sync where it
  // can: a wgmma would do the same tensor work, with its operands in the swizzled layout and
  // a proxy fence per staged operand, where mma.sync reads them by ldmatrix from the
  // pipeline's padded rows (and a late slot can hold V).
  const bool wgmma_pays = s[1] >= 16 || dot_on_wgmma_only(op);
  if (tensor_cores_ && wgmma_ && wgmma_pays && (dot_on_tensor_cores(op) || dot_on_wgmma_only(op)) &&
      wgmma_fits(s[0], s[1], kk, num_warps_) && kk % wgmma_k_step(eb) == 0 && wgmma_operand_fits(ka, s[0], kk, eb) &&
      wgmma_operand_fits(kb, s[1], kk, eb) && wgmma_b_slices_fit(s[0], s[1], kb, eb, num_warps_)) {
    d = intern(wgmma_layout(s[0], s[1], num_warps_));
    mma_.insert(d);
    wgmma_dots_.insert(&op);
    if (!ka) wgmma_mn_major_.insert({&op, 0});
    if (!kb) wgmma_mn_major_.insert({&op, 1});
  } else if (tensor_cores_ && dot_on_tensor_cores(op) && mma_layout_fits(s[0], s[1], num_warps_)) {
    d = intern(mma_layout(s[0], s[1], num_warps_));
    mma_.insert(d);
  } else {
    d = intern(dot_layout(s[0], s[1], num_warps_));
  }
  op_layouts_[&op] = {la, lb, d};
  set_native(res, d);
}

bool LayoutPlan::wgmma_same_b_staging(const Op& a, const Op& b) const {
  // The value a B is staged from and its dim along the staging's rows: B [K, N] has its rows
  // along N (k-major) or K (N-major); a transpose swaps them. With the same rows the contiguous
  // dim is the same too, and so are the swizzle and the panels.
  auto source = [&](const Op& dot) {
    const Value* v = dot.operands[1];
    int64_t row_dim = wgmma_kmajor(&dot, 1) ? 1 : 0;
    if (v->def && v->def->kind == OpKind::Permute && v->def->attrs.perm == std::vector<int64_t>{1, 0}) {
      row_dim = 1 - row_dim;
      v = v->def->operands[0];
    }
    return std::pair{v, row_dim};
  };
  return &a != &b && is_wgmma(&a) && is_wgmma(&b) && a.operands[1]->type.dtype() == b.operands[1]->type.dtype() &&
         source(a) == source(b);
}

// The carried values keep their initial values' layouts; one without takes what the body
// yields for it (else a default), and the body is planned again with it.
void LayoutPlan::forward_for(const Op& op) {
  const ir::Block& body = op.region(0);
  size_t n = op.results.size();
  std::vector<LayoutId> carried(n);
  for (size_t i = 0; i < n; ++i) carried[i] = nat(op.operands[3 + i]);
  auto run_body = [&] {
    for (size_t i = 0; i < n; ++i) {
      if (carried[i] >= 0) set_native(body.args[i + 1], carried[i]);
      else {
        nat_.erase(body.args[i + 1]);
        native_.erase(body.args[i + 1]);
      }
    }
    forward(body);
  };
  run_body();
  bool changed = false;
  for (size_t i = 0; i < n; ++i) {
    if (carried[i] != kNone) continue;
    carried[i] = nat(body.terminator()->operands[i]);
    if (carried[i] == kNone) carried[i] = nat_or_default(op.results[i]);
    changed = true;
  }
  if (changed) run_body();
  for (size_t i = 0; i < n; ++i) set_native(op.results[i], carried[i]);
}

// Each result in the layout the then branch yields it in, else the else branch's, else a
// default.
void LayoutPlan::forward_if(const Op& op) {
  forward(op.region(0));
  forward(op.region(1));
  for (size_t i = 0; i < op.results.size(); ++i) {
    LayoutId l = nat(op.region(0).terminator()->operands[i]);
    if (l == kNone) l = nat(op.region(1).terminator()->operands[i]);
    if (l == kNone) l = nat_or_default(op.results[i]);
    set_native(op.results[i], l);
  }
}

LayoutId LayoutPlan::operand_layout(const Op& op, const Value* v, LayoutId l) {
  switch (op.kind) {
  case OpKind::ExpandDims: return intern(slice_layout(layout(l), static_cast<int>(op.attrs.axis)));
  case OpKind::Permute: {
    Layout src = layout(l);
    for (size_t i = 0; i < op.attrs.perm.size(); ++i) src.dims[op.attrs.perm[i]] = layout(l).dims[i];
    return intern(src);
  }
  case OpKind::Reshape: return derive_reshape(l, op.results[0]->type.shape, v->type.shape);
  default: return l;
  }
}

void LayoutPlan::request(const Value* v, LayoutId l) {
  if (v->type.is_scalar()) return;
  internal_assert(l >= 0, "a tile is requested in a layout");
  auto& r = requests_[v];
  if (std::find(r.begin(), r.end(), l) == r.end()) r.push_back(l);
}

void LayoutPlan::backward(const ir::Block& b) {
  for (auto it = b.ops.rbegin(); it != b.ops.rend(); ++it) backward_op(**it);
}

void LayoutPlan::backward_op(const Op& op) {
  const Value* res = op.results.empty() ? nullptr : op.results[0];
  if (is_view_or_elementwise(op.kind)) {
    if (res->type.is_scalar()) return;
    std::vector<LayoutId> ls = requests(res);
    for (LayoutId l : ls)
      for (const Value* v : op.operands)
        if (!v->type.is_scalar()) request(v, operand_layout(op, v, l));
    return;
  }
  switch (op.kind) {
  case OpKind::Reshape:
    if (res->type.is_scalar()) return;
    if (is_trivial_reshape(op.operands[0]->type.shape, res->type.shape)) {
      if (op.operands[0]->type.is_scalar()) return;
      std::vector<LayoutId> ls = requests(res);
      for (LayoutId l : ls) request(op.operands[0], operand_layout(op, op.operands[0], l));
      return;
    }
    request(op.operands[0], op_layouts(&op)[0]);
    return;
  case OpKind::DescLoad: return; // scalar operands
  case OpKind::DescStore: request(op.operands.back(), op_layouts(&op)[0]); return;
  case OpKind::Load:
  case OpKind::Store:
  TILEC_ATOMIC_RMW_OPS(TILEC_OP_CASE)
  case OpKind::AtomicCas: {
    if (op.operands[0]->type.is_scalar()) return;
    LayoutId l = op_layouts(&op)[0];
    for (const Value* v : op.operands) request(v, l);
    return;
  }
  case OpKind::Reduce:
  case OpKind::Scan: request(op.operands[0], op_layouts(&op)[0]); return;
  case OpKind::Assert:
  case OpKind::Print:
    if (!op.operands[0]->type.is_scalar()) request(op.operands[0], op_layouts(&op)[0]);
    return;
  case OpKind::Dot: {
    const auto& ls = op_layouts(&op);
    for (int i = 0; i < 3; ++i) request(op.operands[i], ls[i]);
    return;
  }
  case OpKind::Yield: {
    const Op* parent = op.parent->parent;
    for (size_t i = 0; i < op.operands.size(); ++i)
      if (!op.operands[i]->type.is_scalar()) request(op.operands[i], native(parent->results[i]));
    return;
  }
  case OpKind::For:
    backward(op.region(0));
    for (size_t i = 0; i < op.results.size(); ++i)
      if (!op.results[i]->type.is_scalar()) request(op.operands[3 + i], native(op.results[i]));
    return;
  case OpKind::If:
    backward(op.region(0));
    backward(op.region(1));
    return;
  default: return;
  }
}

// Mirrors where the lowering defines materialized values (Lowering::define) and
// emits reshapes, so that the list is what the lowering does.
void LayoutPlan::collect_conversions(const ir::Block& b) {
  for (const auto& op : b.ops) {
    if (op->kind == OpKind::Reshape && !op->results[0]->type.is_scalar() &&
        !is_trivial_reshape(op->operands[0]->type.shape, op->results[0]->type.shape))
      conversions_.push_back({op->operands[0], op.get(), op_layouts(op.get())[0], native(op->results[0])});
    if (op->kind == OpKind::For) {
      for (const Value* a : op->region(0).args) convert_if_asked(a);
      collect_conversions(op->region(0));
    } else {
      for (const auto& r : op->regions) collect_conversions(*r);
    }
    for (const Value* r : op->results) convert_if_asked(r);
  }
}

void LayoutPlan::convert_if_asked(const Value* v) {
  LayoutId n = native(v);
  if (n == kNone) return;
  for (LayoutId l : requests(v))
    if (l != n) conversions_.push_back({v, nullptr, n, l});
}

} // namespace tilec::codegen
