// The plan of asynchronous copies and software pipelines (codegen/pipeline_plan.h): which
// tensor-core dot operands are copied by cp.async, which loops copy them ahead, their
// buffers in shared memory, and why an operand or a loop that asks for stages is not
// pipelined. Every decision is taken in IR walk order.
#include "codegen/pipeline_plan.h"

#include "ir/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>

namespace tilec::codegen {

using ir::Op;
using ir::OpKind;
using ir::Value;

namespace {

// Every op in pre-order (an op before the ops of its regions).
void walk(const ir::Block& b, const std::function<void(const Op&)>& f) {
  for (const auto& op : b.ops) {
    f(*op);
    for (const auto& r : op->regions) walk(*r, f);
  }
}

// Ops whose value for a later iteration can be computed ahead: pure, moving no data.
bool pure(const Op& o) {
  switch (o.kind) {
#define TILEC_X(E, N) case OpKind::E:
    TILEC_VIEW_OR_ELEMENTWISE_OPS(TILEC_X)
#undef TILEC_X
  case OpKind::ProgramId:
  case OpKind::NumPrograms:
    return o.kind != OpKind::Reshape || is_trivial_reshape(o.operands[0]->type.shape, o.results[0]->type.shape);
  default: return false;
  }
}

// The for loop that asks for stages and holds `dot` directly in its body, or null.
const Op* staged_loop_of(const Op& dot) {
  const Op* loop = dot.parent->parent;
  return loop && loop->kind == OpKind::For && loop->attrs.num_stages > 1 ? loop : nullptr;
}

} // namespace


namespace {
int64_t align_up(int64_t v, int64_t a) { return (v + a - 1) / a * a; }

// The dot of `loop` (a pipeline's, every operand a TMA copy) whose wgmma group may stay in
// flight over the next trip (Pipeline::wgmma_in_flight), and the loop result it accumulates:
// the body's only dot, in a body with no loop or if, a warpgroup MMA whose accumulator is a
// loop-carried argument used by nothing else and whose result is yielded in its place and
// used by nothing else: registers no other op reads or writes, which wgmma.wait_group 1 may
// leave in flight. Any other shape waits for each group.
std::pair<const Op*, int> in_flight_dot(const Op& loop, const LayoutPlan& layouts,
                                        const std::map<const Value*, int>& uses) {
  const ir::Block& body = loop.region(0);
  const Op* dot = nullptr;
  for (const auto& o : body.ops) {
    if (!o->regions.empty()) return {nullptr, -1}; // no nested loop or if (their dots would wait anyway)
    if (o->kind == OpKind::Dot) {
      if (dot) return {nullptr, -1};
      dot = o.get();
    }
  }
  if (!dot || !layouts.is_wgmma(dot) || body.ops.empty() || body.ops.back()->kind != OpKind::Yield)
    return {nullptr, -1};
  const Op& yield = *body.ops.back();
  auto uses_of = [&](const Value* v) { return uses.count(v) ? uses.at(v) : 0; };
  for (size_t i = 0; i + 1 < body.args.size() && i < yield.operands.size(); ++i)
    if (body.args[i + 1] == dot->operands[2] && yield.operands[i] == dot->results[0] &&
        uses_of(dot->operands[2]) == 1 && uses_of(dot->results[0]) == 1)
      return {dot, int(i)};
  return {nullptr, -1};
}
} // namespace

MmaStaging mma_staging(const Op& dot, int idx, bool kmajor) {
  const ir::Shape& a = dot.operands[0]->type.shape;
  const int64_t M = a[0], K = a[1], N = dot.operands[1]->type.shape[1];
  const int64_t mn = idx == 0 ? M : N;
  return {kmajor, ((kmajor ? K : mn) + 8) * 2, kmajor ? mn : K};
}

MmaStaging wgmma_staging(const Op& dot, int idx, bool kmajor) {
  const ir::Shape& a = dot.operands[0]->type.shape;
  const int64_t M = a[0], K = a[1], N = dot.operands[1]->type.shape[1];
  const int64_t mn = idx == 0 ? M : N, eb = ir::dtype_bytes(dot.operands[0]->type.dtype());
  const int64_t bytes = (kmajor ? K : mn) * eb; // of the contiguous dim
  MmaStaging st;
  st.kmajor = kmajor;
  st.rows = kmajor ? mn : K;
  st.swizzle = wgmma_swizzle(bytes);
  st.row_bytes = st.swizzle;
  st.panels = bytes / st.swizzle;
  return st;
}

int64_t staged_offset(const MmaStaging& st, int64_t row, int64_t col_byte) {
  if (!st.swizzle) return row * st.row_bytes + col_byte;
  const int64_t s = st.swizzle;
  const int64_t logical = (col_byte / s) * st.rows * s + row * s + col_byte % s;
  return logical ^ (((logical >> 7) & (s / 16 - 1)) << 4);
}

const PipelinePlan::AsyncOperand* PipelinePlan::async_operand(const Op* dot, int idx) const {
  auto it = async_index_.find({dot, idx});
  return it == async_index_.end() ? nullptr : &async_[size_t(it->second)];
}

const PipelinePlan::Pipeline* PipelinePlan::pipeline_of(const Op* loop) const {
  auto it = pipeline_index_.find(loop);
  return it == pipeline_index_.end() ? nullptr : &pipelines_[size_t(it->second)];
}

const PipelinePlan::Pipeline* PipelinePlan::warp_specialized() const {
  for (const Pipeline& pl : pipelines_)
    if (pl.warp_specialized) return &pl;
  return nullptr;
}

PipelinePlan::PipelinePlan(const ir::Function& fn, const LayoutPlan& layouts, bool tensor_cores)
    : fn_(fn), layouts_(layouts), access_(ir::param_access(fn)) {
  std::map<const Value*, int> uses;
  std::map<const Value*, std::vector<const Op*>> users;
  std::vector<const Op*> dots; // the tensor-core dots
  walk(fn.body, [&](const Op& op) {
    for (const Value* v : op.operands) {
      ++uses[v];
      users[v].push_back(&op);
    }
    if (op.kind == OpKind::Dot && tensor_cores && (dot_on_tensor_cores(op) || layouts_.is_wgmma(&op)))
      dots.push_back(&op);
    if (op.kind == OpKind::For && op.attrs.num_stages > 1) staged_.push_back(&op);
  });
  std::map<std::pair<const Op*, int>, Failure> failed; // lookups only

  // The operands copied by cp.async, then those of them the loop holding their dot copies
  // ahead: per loop, the slots in walk order and the union of their slices.
  for (const Op* dot : dots)
    for (int idx = 0; idx < 2; ++idx) {
      Failure f;
      if (!plan_async(*dot, idx, uses, f)) failed[{dot, idx}] = f;
    }
  std::map<const Op*, std::set<const Op*>> slices; // per loop
  std::map<const Op*, std::vector<int>> ahead;     // per loop: its operands, by slot
  for (size_t i = 0; i < async_.size(); ++i) {
    const AsyncOperand& x = async_[i];
    const Op* loop = staged_loop_of(*x.dot);
    if (!loop) continue;
    std::set<const Op*> slice;
    Failure f;
    if (!plan_ahead(x, slice, f)) {
      failed[{x.dot, x.idx}] = f;
      continue;
    }
    slices[loop].insert(slice.begin(), slice.end());
    ahead[loop].push_back(int(i));
  }

  // The loops' buffers: a loop's start where the buffers of the pipelined loop around it end
  // (offset 0 for an outermost one), so loops one after another share the same memory (the
  // next one's first copies wait for a barrier after the last reads of the previous one).
  std::map<const Op*, int64_t> buffers_end; // per pipelined loop
  for (const Op* loop : staged_) {
    auto it = ahead.find(loop);
    if (it == ahead.end()) continue;
    Pipeline pl;
    pl.loop = loop;
    pl.stages = loop->attrs.num_stages;
    for (const Op* up = loop->parent ? loop->parent->parent : nullptr; up; up = up->parent ? up->parent->parent : nullptr)
      if (auto e = buffers_end.find(up); e != buffers_end.end()) {
        pl.base = e->second;
        break;
      }
    // The body's first dot among the pipelined operands' (in body order).
    const Op* first_dot = nullptr;
    for (const auto& o : loop->region(0).ops)
      for (int i : it->second)
        if (!first_dot && async_[size_t(i)].dot == o.get()) first_dot = o.get();
    bool swizzled = false;
    for (int i : it->second) swizzled = swizzled || async_[size_t(i)].staging.swizzle != 0;
    for (int i : it->second) {
      AsyncOperand& x = async_[size_t(i)];
      x.pipeline = int(pipelines_.size());
      x.slot = int(pl.operands.size());
      pl.operands.push_back(i);
      // Late only for a thin result (decode's few query rows, as [rows, D] or transposed
      // [D, rows]): it leaves registers to spare for the next iteration's slice values the trip
      // then holds; a large tile (prefill) is already at the register file's limit.
      const ir::Shape& res = x.dot->results[0]->type.shape;
      const bool late = pl.stages == 2 && !x.tma() && x.dot != first_dot &&
                        std::min(res[0], res[1]) <= Pipeline::kMaxLateRows;
      pl.late.push_back(late);
      if (!x.tma()) pl.cp_async = true;
      int64_t& at = late ? pl.late_bytes : pl.stage_bytes;
      if (x.staging.swizzle) at = align_up(at, MmaStaging::kSwizzleAlign);
      pl.offsets.push_back(at);
      at += x.staging.bytes();
    }
    if (swizzled) { // every buffer at a multiple of the swizzle's alignment
      pl.base = align_up(pl.base, MmaStaging::kSwizzleAlign);
      pl.stage_bytes = align_up(pl.stage_bytes, MmaStaging::kSwizzleAlign);
    }
    buffers_end[loop] = pl.end();
    buffers_end_ = std::max(buffers_end_, pl.end());
    buffer_bytes_ = std::max(buffer_bytes_, buffers_end[loop]);
    // Scratch starts where the buffers end: a wgmma operand staged there (or kept resident)
    // is swizzled by address, so the buffers end at a multiple of the pattern too.
    if (swizzled || layouts_.has_wgmma()) buffer_bytes_ = align_up(buffer_bytes_, MmaStaging::kSwizzleAlign);
    const std::set<const Op*>& in_slice = slices[loop];
    for (const auto& o : loop->region(0).ops) // the slices of all its operands, in body order
      if (in_slice.count(o.get())) pl.slice.push_back(o.get());
    // Ops of the slice whose results only the pipelined loads (or other such ops) use are
    // not emitted in the body any more: the copies issued ahead are their only users.
    std::set<const Op*> loads;
    for (int i : pl.operands) loads.insert(async_[size_t(i)].load);
    for (auto s = pl.slice.rbegin(); s != pl.slice.rend(); ++s) {
      bool only_ahead = true;
      for (const Value* r : (*s)->results)
        for (const Op* u : users[r])
          only_ahead = only_ahead && (loads.count(u) || (deferred_.count(u) && in_slice.count(u)));
      if (only_ahead) deferred_.insert(*s);
    }
    pipeline_index_[loop] = int(pipelines_.size());
    pipelines_.push_back(std::move(pl));
  }

  // The TMA stores' tensor maps, after the loads'.
  walk(fn.body, [&](const Op& op) {
    if (op.kind != OpKind::DescStore) return;
    TensorMapPlan t = tensor_map_plan_store(op);
    auto same = std::find(tensor_maps_.begin(), tensor_maps_.end(), t);
    store_maps_[&op] = int(same - tensor_maps_.begin());
    if (same == tensor_maps_.end()) tensor_maps_.push_back(t);
  });

  // The TMA copies' mbarriers, after every buffer: one per stage of a pipeline with TMA
  // operands, one per TMA operand its dot copies itself.
  mbar_base_ = align_up(buffer_bytes_, 8);
  for (Pipeline& pl : pipelines_) {
    bool tma = false;
    for (int i : pl.operands) tma = tma || async_[size_t(i)].tma();
    if (!tma) continue;
    pl.mbarriers = mbar_base_ + 8 * mbar_count_;
    mbar_count_ += pl.stages;
  }
  for (AsyncOperand& x : async_)
    if (x.tma() && x.pipeline < 0) x.mbarrier = mbar_base_ + 8 * mbar_count_++;
  // One wgmma group in flight where every copy is TMA's (Pipeline::wgmma_in_flight): the trip
  // issues its copies after its wait, which retires the group that read their buffer. A
  // cp.async pipeline keeps its copies at the top of the trip, where its group counts assume
  // them.
  for (Pipeline& pl : pipelines_) {
    if (pl.mbarriers < 0 || pl.cp_async || pl.has_late()) continue;
    auto [dot, result] = in_flight_dot(*pl.loop, layouts_, uses);
    // Both of the dot's operands in this pipeline's buffers (one staged in scratch would be
    // overwritten by the next trip while the group still reads it), and nothing else.
    int mine = 0;
    bool all = dot != nullptr;
    for (int i : pl.operands) {
      all = all && async_[size_t(i)].dot == dot;
      mine += async_[size_t(i)].dot == dot;
    }
    if (all && mine == 2) {
      pl.wgmma_in_flight = dot;
      pl.in_flight_result = result;
    }
  }
  // Warp specialization: the first loop that asks for it and keeps a group in flight, at the
  // kernel's top level after ops that neither touch memory nor exchange through shared memory
  // (the producer warpgroup runs them too, with warp numbers no layout has), gets S empty
  // mbarriers after the others.
  for (Pipeline& pl : pipelines_) {
    // (A block holds at most 1024 threads: 28 warps and the producer's 4.)
    if (!pl.loop->attrs.warp_specialize || !pl.wgmma_in_flight || pl.loop->parent != &fn.body || warp_specialized() ||
        32 * layouts_.num_warps() + 128 > 1024)
      continue;
    bool quiet = true;
    for (const auto& o : fn.body.ops) {
      if (o.get() == pl.loop) break;
      // Constants (the accumulator's zeros), and scalar arithmetic (the tile's offsets).
      bool scalar = std::all_of(o->results.begin(), o->results.end(), [](const Value* r) { return r->type.is_scalar(); });
      quiet = quiet && (o->kind == OpKind::Constant ||
                        (scalar && (ir::is_elementwise(o->kind) || o->kind == OpKind::ProgramId ||
                                    o->kind == OpKind::NumPrograms || o->kind == OpKind::Cast ||
                                    o->kind == OpKind::Select || o->kind == OpKind::Bitcast)));
    }
    if (!quiet) continue;
    pl.warp_specialized = true;
    pl.empty_mbarriers = mbar_base_ + 8 * mbar_count_;
    mbar_count_ += pl.stages;
  }
  if (mbar_count_) buffer_bytes_ = mbar_base_ + 8 * mbar_count_;
  // Scratch (where a TMA store stages its block, or a wgmma operand is staged) starts on the
  // swizzle pattern.
  if ((mbar_count_ && layouts_.has_wgmma()) || !tensor_maps_.empty())
    buffer_bytes_ = align_up(buffer_bytes_, MmaStaging::kSwizzleAlign);

  // Why the loops that ask for stages, and the operands of their dots, are not pipelined.
  for (const Op* loop : staged_) {
    std::vector<const Op*> body_dots;
    for (const auto& o : loop->region(0).ops)
      if (std::find(dots.begin(), dots.end(), o.get()) != dots.end()) body_dots.push_back(o.get());
    if (!pipeline_of(loop))
      not_pipelined_.push_back(
          {loop, nullptr, 0, nullptr,
           body_dots.empty() ? tensor_cores ? "has no tensor-core dot directly in its body"
                                            : "has no tensor-core dot: the tensor cores are off"
                             : "can copy no operand of the tensor-core dots directly in its body ahead"});
    for (const Op* dot : body_dots)
      for (int idx = 0; idx < 2; ++idx) {
        const AsyncOperand* x = async_operand(dot, idx);
        if (x && x->pipeline >= 0) continue;
        const Failure& f = failed.at({dot, idx});
        not_pipelined_.push_back({loop, dot, idx, f.value, f.why});
      }
  }
}

// An operand of a tensor-core dot that is a load used by nothing but this dot (possibly
// through a transpose), in its block, with nothing that writes memory between the two,
// zero where masked off, taken by the dot in the layout it is loaded in, in whole aligned
// 16-byte chunks with one mask bit per chunk.
bool PipelinePlan::plan_async(const Op& dot, int idx, const std::map<const Value*, int>& uses, Failure& fail) {
  auto fails = [&](const Value* v, std::string why) {
    fail = {v, std::move(why)};
    return false;
  };
  auto uses_of = [&](const Value* v) { return uses.count(v) ? uses.at(v) : 0; };
  const Value* x = dot.operands[size_t(idx)];
  const Op* view = nullptr;
  const Op* load = x->def;
  if (load && load->kind == OpKind::Permute && load->attrs.perm == std::vector<int64_t>{1, 0}) {
    view = load;
    load = load->operands[0]->def;
  }
  if (load && load->kind == OpKind::DescLoad) return plan_tma(dot, idx, view, *load, uses, fail);
  if (!load || load->kind != OpKind::Load) {
    const Value* v = view ? view->operands[0] : x;
    return fails(v, v->def ? fmt::format("is a {}, not a load", ir::op_name(v->def->kind)) : "is not a load");
  }
  const Value* lv = load->results[0];
  // A load that warpgroup MMAs of its block read as B with one staging (MLA's K tile: the
  // scores' K^T and P.V's V) is copied once, for the first; the others read that copy.
  auto reads_b = [&](const Op& o) { // o's B is the load's value, or its transpose
    const Value* b = o.operands[1];
    return b == lv || (b->def && b->def->kind == OpKind::Permute && b->def->operands[0] == lv);
  };
  int shared = 0;
  if (idx == 1 && load && load->kind == OpKind::Load)
    for (const auto& o : load->parent->ops)
      if (o->kind == OpKind::Dot && o.get() != &dot && reads_b(*o) && o->operands[0] != lv &&
          layouts_.wgmma_same_b_staging(dot, *o) && !writes_between(*load, *o))
        ++shared;
  for (size_t i = 0; i < async_.size(); ++i)
    if (shared && async_[i].load == load && async_[i].idx == 1) {
      async_index_[{&dot, idx}] = int(i);
      return true;
    }
  if (uses_of(x) != 1 && !(shared && !view)) return fails(x, "has other users than the dot");
  if (view && uses_of(lv) != 1 + shared) return fails(lv, "has other users than the transpose");
  if (load->parent != dot.parent) return fails(lv, "is loaded outside the dot's block");
  if (view && view->parent != dot.parent) return fails(x, "is transposed outside the dot's block");
  if (load->other() && !is_positive_zero(load->other())) return fails(lv, "is not +0 where masked off");
  // Nothing between the load and the dot may write memory.
  if (const Op* w = writes_between(*load, dot))
    return fails(lv, fmt::format("is followed by a {} that may write memory before the dot", ir::op_name(w->kind)));
  // The load's own layout, used by nothing else, in whole aligned 16-byte chunks, one mask
  // bit per chunk; the dot takes the operand in that layout (no conversion planned).
  LayoutId ll = layouts_.op_layouts(load)[0];
  LayoutId want = layouts_.op_layouts(&dot)[size_t(idx)];
  if (layouts_.requests(lv).size() != 1) return fails(lv, "is wanted in more than one layout");
  if (view && layouts_.requests(x).size() != 1) return fails(x, "is wanted in more than one layout");
  if ((!view && want != ll) || (view && layouts_.requests(x)[0] != want))
    return fails(lv, "is taken by the dot in another layout than it is loaded in");
  LayoutPlan::VectorAccess va = layouts_.vector_access(*load, ll);
  const int bytes = va.vec * ir::dtype_bytes(lv->type.dtype());
  if (bytes != 16) return fails(lv, fmt::format("is loaded {} bytes at a time, not 16", bytes));
  if (!va.aligned) return fails(lv, "is not known to be 16-byte aligned");
  if (load->mask() && !va.mask_uniform) return fails(lv, "has a mask not known to be constant over each 16 bytes");
  // Staged along the load's contiguous dimension (through the transpose, if any): k-major
  // when that dimension is K.
  int rd = thread_elems(layouts_.layout(ll), lv->type.shape).run_dim;
  int contig = view ? 1 - rd : rd; // in the dot's [M, K] or [K, N] coordinates
  bool kmajor = idx == 0 ? contig == 1 : contig == 0;
  async_index_[{&dot, idx}] = int(async_.size());
  if (layouts_.is_wgmma(&dot))
    internal_assert(kmajor == layouts_.wgmma_kmajor(&dot, idx), "a warpgroup MMA's operand is staged as it is read");
  async_.push_back({&dot, idx, load, view,
                    layouts_.is_wgmma(&dot) ? wgmma_staging(dot, idx, kmajor) : mma_staging(dot, idx, kmajor), -1, -1});
  deferred_.insert(load);
  if (view) deferred_.insert(view);
  return true;
}

// A descriptor load left unexpanded (prepare_descriptors kept it: it fits TMA and its dot runs
// on wgmma, reading it along its innermost dim) is copied by TMA, into the staging the dot
// reads, with nothing that writes memory between the two.
bool PipelinePlan::plan_tma(const Op& dot, int idx, const Op* view, const Op& load, const std::map<const Value*, int>& uses,
                            Failure& fail) {
  const Value* x = dot.operands[size_t(idx)];
  auto uses_of = [&](const Value* v) { return uses.count(v) ? uses.at(v) : 0; };
  internal_assert(layouts_.is_wgmma(&dot) && uses_of(x) == 1 && (!view || uses_of(load.results[0]) == 1) &&
                      load.parent == dot.parent && (!view || view->parent == dot.parent),
                  "a TMA load feeds a warpgroup MMA's operand alone, in its block (prepare_descriptors)");
  internal_assert(!writes_between(load, dot), "nothing writes memory between a TMA load and its dot (tma_unfit)");
  (void)fail;
  const bool kmajor = idx == 0 ? view == nullptr : view != nullptr;
  internal_assert(kmajor == layouts_.wgmma_kmajor(&dot, idx), "a TMA operand is staged as its wgmma reads it");
  TensorMapPlan t = tensor_map_plan(load, dot, idx, kmajor);
  auto same = std::find(tensor_maps_.begin(), tensor_maps_.end(), t);
  const int map = int(same - tensor_maps_.begin());
  if (same == tensor_maps_.end()) tensor_maps_.push_back(t);
  async_index_[{&dot, idx}] = int(async_.size());
  AsyncOperand a{&dot, idx, &load, view, wgmma_staging(dot, idx, kmajor), -1, -1};
  a.tensor_map = map;
  async_.push_back(a);
  deferred_.insert(&load);
  if (view) deferred_.insert(view);
  return true;
}

// The loop of a dot's asynchronous operand pipelines it when the loop asks for stages, the
// dot and the load sit in its body (not deeper), its step is a positive constant, and the
// load's address and mask can be computed for a later iteration: from the induction
// variable, values defined outside the loop, pure ops, and loads of parameters the kernel
// never writes (a block table, say: it is read ahead too). The K/V data must be read-only
// as well, since it is copied before the iteration that uses it. `slice`: the body's ops
// the address and mask need.
bool PipelinePlan::plan_ahead(const AsyncOperand& x, std::set<const Op*>& slice, Failure& fail) const {
  auto fails = [&](const Value* v, std::string why) {
    fail = {v, std::move(why)};
    return false;
  };
  auto read_only = [&](const Value* ptr) {
    const Value* p = ir::root_param(fn_, ptr);
    if (!p) return false;
    size_t i = size_t(std::find(fn_.params.begin(), fn_.params.end(), p) - fn_.params.begin());
    return access_[i] == ir::ParamAccess::read;
  };
  const ir::Block* body = x.dot->parent;
  const Op* loop = body->parent;
  if (!read_only(x.load->operands[0])) {
    const Value* p = ir::root_param(fn_, x.load->operands[0]);
    return p ? fails(p, "is written by the kernel: it cannot be copied before the iteration that reads it")
             : fails(x.load->operands[0], "does not point into one parameter the kernel only reads");
  }
  const Op* step = loop->operands[2]->def;
  if (!step || step->kind != OpKind::Constant || step->attrs.value.is_float || step->attrs.value.i <= 0)
    return fails(loop->operands[2], "is the loop's step, not a positive constant");
  std::function<bool(const Value*)> ahead = [&](const Value* v) {
    if (v == body->args[0]) return true;
    if (std::find(body->args.begin() + 1, body->args.end(), v) != body->args.end())
      return fails(v, "is loop-carried: the address or mask cannot be computed for a later iteration");
    const Op* d = v->def;
    if (!d || d->parent != body || slice.count(d)) return true; // defined outside the loop
    if (deferred_.count(d))
      return fails(v, "is copied asynchronously itself: the address or mask cannot be computed ahead");
    if (d->kind == OpKind::Load && !read_only(d->operands[0]))
      return fails(v, "is a load of a buffer the kernel writes: it cannot be read ahead");
    if (!pure(*d) && d->kind != OpKind::Load)
      return fails(v, fmt::format("is a {}: the address or mask cannot be computed ahead", ir::op_name(d->kind)));
    for (const Value* o : d->operands)
      if (!ahead(o)) return false;
    slice.insert(d);
    return true;
  };
  for (size_t i = 1; i < x.load->operands.size(); ++i)
    if (!ahead(x.load->operands[i])) return false;
  return ahead(x.load->operands[0]);
}

} // namespace tilec::codegen
