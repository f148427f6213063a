// Tensor descriptor loads as TMA copies (codegen/tma.h).
#include "codegen/tma.h"

#include <fmt/format.h>

#include <map>

#include "codegen/axis_info.h"
#include "codegen/layout.h"
#include "codegen/layout_plan.h"
#include "codegen/pipeline_plan.h"
#include "ir/param_access.h"
#include "ir/passes.h"

namespace tilec::codegen {

using ir::OpKind;
using ir::Value;

namespace {

bool is_param(const ir::Function& fn, const Value* v) {
  return std::find(fn.params.begin(), fn.params.end(), v) != fn.params.end();
}

// The constant a scalar is, if it is one.
std::optional<int64_t> constant_of(const Value* v) {
  if (v->def && v->def->kind == OpKind::Constant && !v->def->attrs.value.is_float) return v->def->attrs.value.i;
  return std::nullopt;
}

// The power of two the launches promise divides an integer parameter (1: none).
int64_t promised_multiple(const Value* p, const CompileOptions& o) {
  if (auto it = o.int_arg_values.find(p->name); it != o.int_arg_values.end())
    return it->second ? it->second & -it->second : int64_t(1) << 30;
  int64_t m = std::max<int64_t>(1, p->multiple_of);
  if (auto it = o.int_arg_divisibility.find(p->name); it != o.int_arg_divisibility.end()) m = std::max(m, it->second);
  return m;
}

// The dot a desc_load feeds and nothing else, directly or through a transpose: (dot, operand
// index, transposed), or a null dot with why not.
struct Consumer {
  const ir::Op* dot = nullptr;
  int idx = 0;
  bool transposed = false;
  std::string why;
};

Consumer consumer(const ir::Function& fn, const ir::Op& load) {
  std::map<const Value*, std::vector<const ir::Op*>> users;
  ir::walk(const_cast<ir::Block&>(fn.body), [&](ir::Op& op) {
    for (const Value* v : op.operands) users[v].push_back(&op);
  });
  Consumer c;
  const Value* v = load.results[0];
  auto only_user = [&](const Value* x) -> const ir::Op* {
    auto it = users.find(x);
    return it != users.end() && it->second.size() == 1 ? it->second[0] : nullptr;
  };
  const ir::Op* u = only_user(v);
  if (u && u->kind == OpKind::Permute && u->attrs.perm == std::vector<int64_t>{1, 0}) {
    c.transposed = true;
    v = u->results[0];
    u = only_user(v);
  }
  if (!u) {
    c.why = "it has more than one user, or none";
    return c;
  }
  if (u->kind != OpKind::Dot || (u->operands[0] != v && u->operands[1] != v) || u->operands[0] == u->operands[1]) {
    c.why = fmt::format("its user is a {}, not a dot's A or B", ir::op_name(u->kind));
    return c;
  }
  c.dot = u;
  c.idx = u->operands[0] == v ? 0 : 1;
  return c;
}

} // namespace

namespace {

// The swizzle pattern of a TMA store's staging for rows of `bytes` bytes (16 or more): 128 for
// rows of 128 bytes and more (in panels of 128), else as wide as the row, none for 16 bytes.
int store_swizzle(int64_t bytes) { return bytes >= 128 ? 128 : bytes >= 32 ? int(bytes) : 0; }

// What a descriptor op needs of its tensor for a tensor map: rank 2, a parameter as its base,
// parameters or numbers as sizes and strides, the outer stride 16-byte aligned. "" when so.
std::string map_unfit(const ir::Function& fn, const ir::Op& op, const CompileOptions& o) {
  if (!wgmma_enabled(o)) return o.arch != "sm_90" ? fmt::format("TMA needs sm_90, not {}", o.arch) : "wgmma is off";
  if (!o.tma) return "TMA is off (--no-tma)";
  const size_t rank = ir::desc_rank(op);
  if (rank != 2) return fmt::format("its rank is {}: tilec's TMA copies are 2-d", rank);
  if (!is_param(fn, op.operands[0])) return "its base is not a kernel parameter";
  const int64_t eb = ir::dtype_bytes(op.operands[0]->type.dtype());
  for (size_t i = 1; i < 1 + 2 * rank; ++i) {
    const Value* v = op.operands[i];
    if (!is_param(fn, v) && !constant_of(v))
      return fmt::format("its {} {} is neither a kernel parameter nor a number", i <= rank ? "size" : "stride",
                         i <= rank ? i - 1 : i - 1 - rank);
  }
  // The innermost dim contiguous (the DSL requires it; IR text might not), and the offsets
  // 32-bit: a copy's coordinates are signed 32-bit, which a wider offset would wrap into.
  if (constant_of(op.operands[2 * rank]) != std::optional<int64_t>(1))
    return "its innermost stride is not the number 1";
  for (size_t i = 1 + 2 * rank; i < op.operands.size() - (op.kind == OpKind::DescStore ? 1 : 0); ++i)
    if (ir::dtype_bits(op.operands[i]->type.dtype()) > 32)
      return fmt::format("its offset {} is {}: a copy's coordinates are 32-bit", i - 1 - 2 * rank,
                         ir::dtype_name(op.operands[i]->type.dtype()));
  for (size_t d = 0; d + 1 < rank; ++d) {
    const Value* s = op.operands[1 + rank + d];
    const int64_t multiple = constant_of(s) ? (*constant_of(s) ? *constant_of(s) & -*constant_of(s) : 1 << 30)
                                            : promised_multiple(s, o);
    if (multiple * eb % 16 != 0)
      return fmt::format("its stride {} is not known to be a multiple of 16 bytes (promise it: multiple_of)", d);
  }
  return "";
}

} // namespace

const ir::Op* writes_between(const ir::Op& from, const ir::Op& to) {
  bool between = false;
  for (const auto& o : to.parent->ops) {
    if (o.get() == &from) between = true;
    else if (o.get() == &to) break;
    else if (between && (o->kind == OpKind::Store || o->kind == OpKind::DescStore || ir::is_atomic(o->kind) ||
                         o->kind == OpKind::For || o->kind == OpKind::If))
      return o.get();
  }
  return nullptr;
}

std::string tma_unfit(const ir::Function& fn, const ir::Op& load, const CompileOptions& o) {
  if (load.kind != OpKind::DescLoad) return "it is not a descriptor load";
  if (std::string why = map_unfit(fn, load, o); !why.empty()) return why;
  // The copy engine reads through the async proxy: a buffer the kernel also writes would need
  // its writes fenced and ordered before every copy. Only buffers it never writes are copied.
  const std::vector<ir::ParamAccess> access = ir::param_access(fn);
  const size_t bi = size_t(std::find(fn.params.begin(), fn.params.end(), load.operands[0]) - fn.params.begin());
  if (access[bi] != ir::ParamAccess::read) return fmt::format("the kernel writes its buffer '{}'", fn.params[bi]->name);
  const int64_t eb = ir::dtype_bytes(load.operands[0]->type.dtype());
  const ir::Shape& block = load.results[0]->type.shape;
  Consumer c = consumer(fn, load);
  if (!c.dot) return c.why;
  const ir::Op& dot = *c.dot;
  if (dot.parent != load.parent) return "it is loaded outside its dot's block";
  // Nothing between the load and the dot may write memory (the copy is issued with the dot).
  if (const ir::Op* w = writes_between(load, dot))
    return fmt::format("it is followed by a {} that may write memory before its dot", ir::op_name(w->kind));
  // The staging's contiguous dim is the descriptor's innermost: K (k-major) or M / N.
  const bool kmajor = c.idx == 0 ? !c.transposed : c.transposed;
  const ir::Shape& a = dot.operands[0]->type.shape;
  const int64_t M = a[0], K = a[1], N = dot.operands[1]->type.shape[1];
  if (!(dot_on_tensor_cores(dot) || dot_on_wgmma_only(dot)) || !wgmma_fits(M, N, K, o.num_warps) ||
      K % wgmma_k_step(int(eb)) != 0 || !wgmma_operand_fits(kmajor, c.idx == 0 ? M : N, K, int(eb)) ||
      (c.idx == 1 && !wgmma_b_slices_fit(M, N, kmajor, int(eb), o.num_warps)))
    return "its dot does not run on wgmma with this operand staged along the descriptor's innermost dim";
  const MmaStaging st = wgmma_staging(dot, c.idx, kmajor);
  if (st.rows > 256) return fmt::format("its box would have {} rows (256 at most)", st.rows);
  // A gather's boxes split the staging's rows (the descriptor's dim 0): each lands a whole
  // number of swizzle patterns (8 rows) after the last, where the pattern of its absolute
  // address is the one the wgmma reads. A page of fewer rows is not a box (it is expanded).
  if (const int64_t boxes = load.attrs.boxes; boxes > 1 && (st.rows != block[0] || st.rows / boxes % 8 != 0))
    return fmt::format("it gathers boxes of {} rows: a gathered box takes a multiple of 8 rows", block[0] / boxes);
  (void)block;
  return "";
}


std::string tma_store_unfit(const ir::Function& fn, const ir::Op& store, const CompileOptions& o) {
  if (store.kind != OpKind::DescStore) return "it is not a descriptor store";
  if (std::string why = map_unfit(fn, store, o); !why.empty()) return why;
  // The copy engine writes through the async proxy: no other access of the kernel may touch
  // the buffer (it would need the store's completion fenced before it).
  const Value* base = store.operands[0];
  std::string other;
  ir::walk(const_cast<ir::Block&>(fn.body), [&](ir::Op& op) {
    if (&op == &store || !other.empty()) return;
    const bool memory = op.kind == OpKind::Load || op.kind == OpKind::Store || op.kind == OpKind::DescLoad ||
                        op.kind == OpKind::DescStore || ir::is_atomic(op.kind);
    if (memory && (op.operands[0] == base || ir::root_param(fn, op.operands[0]) == base ||
                   !ir::root_param(fn, op.operands[0])))
      other = std::string(ir::op_name(op.kind));
  });
  if (!other.empty()) return fmt::format("a {} of the kernel may touch its buffer '{}' too", other, base->name);
  const ir::Type& t = store.operands.back()->type;
  if (t.dtype() == ir::DType::i1) return "i1 blocks are stored element by element";
  const int64_t eb = ir::dtype_bytes(t.dtype()), row = t.shape[1] * eb;
  if (row < 16) return fmt::format("its rows are {} bytes: a TMA box row takes 16 or more", row);
  if (t.shape[0] > 256) return fmt::format("its block has {} rows (256 at most)", t.shape[0]);
  if (t.shape[0] * row > kMaxTmaStoreBytes) {
    const int64_t room = store.parent == &fn.body ? pipeline_room(fn, o) : 0;
    if (t.shape[0] * row > room)
      return fmt::format("its block takes {} bytes to stage ({} at most, or as much as the pipeline buffers of "
                         "the kernel's loops, {} bytes, for a store outside every loop)",
                         t.shape[0] * row, kMaxTmaStoreBytes, room);
  }
  return "";
}

int64_t pipeline_room(const ir::Function& fn, const CompileOptions& o) {
  int64_t room = 0;
  for (const auto& loop : fn.body.ops) {
    if (loop->kind != OpKind::For || loop->attrs.num_stages < 2) continue;
    int64_t stage = 0;
    for (const auto& op : loop->region(0).ops) {
      if (op->kind != OpKind::DescLoad || !tma_unfit(fn, *op, o).empty()) continue;
      Consumer c = consumer(fn, *op);
      const MmaStaging st = wgmma_staging(*c.dot, c.idx, c.idx == 0 ? !c.transposed : c.transposed);
      stage += (st.bytes() + MmaStaging::kSwizzleAlign - 1) / MmaStaging::kSwizzleAlign * MmaStaging::kSwizzleAlign;
    }
    room = std::max(room, stage * loop->attrs.num_stages);
  }
  return room;
}

TensorMapPlan tensor_map_plan_store(const ir::Op& store) {
  const ir::Type& t = store.operands.back()->type;
  const int64_t eb = ir::dtype_bytes(t.dtype());
  const int s = store_swizzle(t.shape[1] * eb);
  TensorMapPlan m;
  m.base = store.operands[0];
  for (size_t d = 0; d < 2; ++d) {
    m.sizes.push_back(store.operands[1 + d]);
    m.strides.push_back(store.operands[3 + d]);
  }
  m.box = {t.shape[0], s ? s / eb : t.shape[1]};
  m.swizzle = s;
  return m;
}

TensorMapPlan tensor_map_plan(const ir::Op& load, const ir::Op& dot, int idx, bool kmajor) {
  const MmaStaging st = wgmma_staging(dot, idx, kmajor);
  const int64_t eb = ir::dtype_bytes(load.operands[0]->type.dtype());
  TensorMapPlan t;
  t.base = load.operands[0];
  for (size_t d = 0; d < 2; ++d) {
    t.sizes.push_back(load.operands[1 + d]);
    t.strides.push_back(load.operands[3 + d]);
  }
  t.box = {st.rows / load.attrs.boxes, st.swizzle / eb};
  t.swizzle = st.swizzle;
  return t;
}

ir::Kernel prepare_descriptors(const ir::Function& fn, const CompileOptions& o) {
  bool any = false;
  ir::walk(const_cast<ir::Block&>(fn.body), [&](ir::Op& op) {
    any = any || op.kind == OpKind::DescLoad || op.kind == OpKind::DescStore;
  });
  if (!any) return nullptr;
  ir::Kernel k = ir::clone(fn);
  int expanded = ir::expand_descriptors(*k, [&](const ir::Op& op) {
    return (op.kind == OpKind::DescLoad ? tma_unfit(*k, op, o) : tma_store_unfit(*k, op, o)).empty();
  });
  // The layout plan has the last word: a kept load's dot must run on wgmma, reading the operand
  // along the descriptor's innermost dim. Those it does not are expanded after all.
  std::vector<const ir::Op*> undone;
  {
    AxisAnalysis axis(*k, o.int_arg_divisibility, o.int_arg_values);
    LayoutPlan plan(*k, axis, o.num_warps, o.tensor_cores, wgmma_enabled(o));
    ir::walk(k->body, [&](ir::Op& op) {
      if (op.kind != OpKind::DescLoad) return;
      Consumer c = consumer(*k, op);
      const bool kmajor = c.idx == 0 ? !c.transposed : c.transposed;
      if (!c.dot || !plan.is_wgmma(c.dot) || plan.wgmma_kmajor(c.dot, c.idx) != kmajor) undone.push_back(&op);
    });
  }
  if (!undone.empty())
    expanded += ir::expand_descriptors(*k, [&](const ir::Op& op) { return std::find(undone.begin(), undone.end(), &op) == undone.end(); });
  if (!expanded) return nullptr; // every descriptor op is a TMA load already
  ir::run_default_passes(*k);
  return k;
}

} // namespace tilec::codegen
