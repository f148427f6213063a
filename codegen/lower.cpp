// The SIMT lowering: one program = one thread block of num_warps * 32 threads;
// every tile value becomes, per thread, the list of elements its layout gives
// that thread (docs/ARCHITECTURE.md). One handler per op; elementwise ops share one
// element loop and the trivial ones are table rows.
#include "codegen/lower.h"

#include <fmt/format.h>
#include <llvm/IR/Intrinsics.h>

#include <bit>
#include <cmath>
#include <map>
#include <set>
#include <numbers>

#include "codegen/axis_info.h"
#include "codegen/layout_plan.h"
#include "abi/float16.h"
#include "abi/float8.h"
#include "ir/op_rules.h"
#include "ir/param_access.h"

namespace tilec::codegen {

using ir::DType;
using ir::Op;
using ir::OpKind;
using ir::Value;

namespace {

using Elems = std::vector<llvm::Value*>;

int log2i(int64_t v) { return std::countr_zero(static_cast<uint64_t>(v)); }

// A tile or scalar that is the constant +0 (integer 0, or float +0.0) through splats,
// broadcasts, dimension changes and casts.
bool is_positive_zero(const Value* v) {
  const Op* d = v->def;
  while (d && (d->kind == OpKind::Splat || d->kind == OpKind::Broadcast || d->kind == OpKind::ExpandDims ||
               d->kind == OpKind::Cast))
    d = d->operands[0]->def;
  if (!d || d->kind != OpKind::Constant) return false;
  const ir::ConstValue& c = d->attrs.value;
  return c.is_float ? c.f == 0.0 && !std::signbit(c.f) : c.i == 0;
}

struct ArithRow {
  OpKind op;
  llvm::Instruction::BinaryOps int_op, float_op;
};
constexpr llvm::Instruction::BinaryOps kNoOp = llvm::Instruction::BinaryOpsEnd;
constexpr ArithRow kArith[] = {
    {OpKind::Add, llvm::Instruction::Add, llvm::Instruction::FAdd},
    {OpKind::Sub, llvm::Instruction::Sub, llvm::Instruction::FSub},
    {OpKind::Mul, llvm::Instruction::Mul, llvm::Instruction::FMul},
    {OpKind::Div, llvm::Instruction::SDiv, llvm::Instruction::FDiv},
    {OpKind::Rem, llvm::Instruction::SRem, llvm::Instruction::FRem},
    {OpKind::And, llvm::Instruction::And, kNoOp},
    {OpKind::Or, llvm::Instruction::Or, kNoOp},
    {OpKind::Xor, llvm::Instruction::Xor, kNoOp},
};

struct CompareRow {
  OpKind op;
  llvm::CmpInst::Predicate sint, uint, flt;
};
constexpr CompareRow kCompare[] = {
    {OpKind::Eq, llvm::CmpInst::ICMP_EQ, llvm::CmpInst::ICMP_EQ, llvm::CmpInst::FCMP_OEQ},
    {OpKind::Ne, llvm::CmpInst::ICMP_NE, llvm::CmpInst::ICMP_NE, llvm::CmpInst::FCMP_UNE},
    {OpKind::Lt, llvm::CmpInst::ICMP_SLT, llvm::CmpInst::ICMP_ULT, llvm::CmpInst::FCMP_OLT},
    {OpKind::Le, llvm::CmpInst::ICMP_SLE, llvm::CmpInst::ICMP_ULE, llvm::CmpInst::FCMP_OLE},
    {OpKind::Gt, llvm::CmpInst::ICMP_SGT, llvm::CmpInst::ICMP_UGT, llvm::CmpInst::FCMP_OGT},
    {OpKind::Ge, llvm::CmpInst::ICMP_SGE, llvm::CmpInst::ICMP_UGE, llvm::CmpInst::FCMP_OGE},
};

class Lowering {
public:
  Lowering(const ir::Function& fn, const CompileOptions& opts, TargetHooks& hooks, llvm::Module& m)
      : fn_(fn), opts_(opts), hooks_(hooks), m_(m), c_(m.getContext()), axis_(fn, opts.int_arg_divisibility, opts.int_arg_values),
        plan_(fn, axis_, opts.num_warps, opts.tensor_cores), b_(c_), pb_(c_) {}

  LoweringStats run();

private:
  // --- types and constants
  llvm::Type* reg_type(const ir::ElemType& e);
  // An integer of dtype `from` to the integer type `ty`: extended by its signedness (i1 and
  // unsigned dtypes with zeros), or truncated.
  llvm::Value* int_resize(llvm::Value* v, llvm::Type* ty, DType from) {
    return from == DType::i1 || ir::is_unsigned(from) ? b_.CreateZExtOrTrunc(v, ty) : b_.CreateSExtOrTrunc(v, ty);
  }
  static llvm::Intrinsic::ID int_minmax(bool max, DType t) {
    if (ir::is_unsigned(t)) return max ? llvm::Intrinsic::umax : llvm::Intrinsic::umin;
    return max ? llvm::Intrinsic::smax : llvm::Intrinsic::smin;
  }
  llvm::Type* mem_type(const ir::ElemType& e);
  int mem_bytes(const ir::ElemType& e) { return e.is_ptr ? 8 : ir::dtype_bytes(e.dtype); }
  llvm::Value* constant(const ir::ElemType& e, const ir::ConstValue& v);
  llvm::Value* to_f32(llvm::Value* v, DType t) {
    return t == DType::f32 ? v : ir::is_fp8(t) ? hooks_.fp8_to_f32(b_, v, t) : hooks_.to_f32(b_, v, t);
  }
  llvm::Value* from_f32(llvm::Value* v, DType t) {
    return t == DType::f32 ? v : ir::is_fp8(t) ? hooks_.f32_to_fp8(b_, v, t) : hooks_.from_f32(b_, v, t);
  }
  llvm::Value* to_mem(llvm::Value* v, const ir::ElemType& e) {
    return !e.is_ptr && e.dtype == DType::i1 ? b_.CreateZExt(v, b_.getInt8Ty()) : v;
  }
  llvm::Value* from_mem(llvm::Value* v, const ir::ElemType& e) {
    return !e.is_ptr && e.dtype == DType::i1 ? b_.CreateICmpNE(v, b_.getInt8(0)) : v;
  }

  // --- layouts at run time
  const ThreadElems& elems_of(LayoutId l, const ir::Shape& s);
  int64_t count(LayoutId l, const ir::Shape& s) { return l == kScalar ? 1 : elems_of(l, s).count; }
  const std::vector<llvm::Value*>& thread_base(LayoutId l);
  // Per element, per tile dim: the coordinate (i32).
  std::vector<std::vector<llvm::Value*>> coords(LayoutId l, const ir::Shape& s);
  std::vector<llvm::Value*> coord_of(LayoutId l, const ir::Shape& s, size_t j); // element j's alone
  std::vector<llvm::Value*> coord_starts(LayoutId l, const ir::Shape& s);
  llvm::Value* owner(LayoutId l, const ir::Shape& s); // null: every thread owns its elements
  llvm::Value* linear_index(const std::vector<llvm::Value*>& coord, const ir::Shape& s);

  // --- values
  const Elems& get(const Value* v, LayoutId l);
  void define(const Value* v, LayoutId native, Elems e);
  Elems convert(const Elems& src, LayoutId from, LayoutId to, const ir::Shape& s, const ir::ElemType& e);
  Elems share_from_owners(const Elems& src, LayoutId l, const ir::Shape& s, const ir::ElemType& e,
                          llvm::Value* owner_pred);

  // --- shared memory
  llvm::Value* smem(llvm::Type* ty, llvm::Value* index, int64_t byte_offset = 0);
  // Shared-memory accesses go through the target (the emulator checks them); `what` says
  // what the access is for, after the current op's source location.
  llvm::Value* smem_load(llvm::Type* ty, llvm::Value* ptr, const char* what) {
    count_smem(ty);
    return hooks_.shared_load(b_, ptr, ty, site(what));
  }
  void count_smem(llvm::Type* ty) {
    ++stats_.shared_accesses;
    stats_.shared_vector_accesses += ty->isVectorTy();
    stats_.shared_access_bytes += int(m_.getDataLayout().getTypeStoreSize(ty));
  }
  // `e`: the element type held, so the emulator treats +0 and -0 of floats alike.
  void smem_store(llvm::Value* v, llvm::Value* ptr, const char* what, DType e) {
    unsigned float_type = e == DType::f32      ? 1
                          : e == DType::f16    ? 2
                          : e == DType::bf16   ? 3
                          : e == DType::f8e4m3 ? 4
                          : e == DType::f8e5m2 ? 5
                                               : 0;
    count_smem(v->getType());
    hooks_.shared_store(b_, ptr, v, site(what), float_type);
  }
  std::string site(const char* what) const;
  // Scratch shared memory (everything but the pipelines' buffers) starts at pipe_bytes_.
  void need_smem(int64_t bytes) { stats_.shared_bytes = std::max<int64_t>(stats_.shared_bytes, pipe_bytes_ + bytes); }
  void barrier() {
    hooks_.barrier(b_);
    ++stats_.barriers;
    smem_dirty_ = false;
    pipe_read_unfenced_ = false;
  }
  void before_smem_write() {
    if (smem_dirty_) barrier();
  }

  // --- ops
  void emit_block(const ir::Block& blk);
  void emit_op(const Op& op);
  Elems compute(const Op& op, LayoutId l);
  Elems view(const Op& op, LayoutId l);
  llvm::Value* unary(OpKind k, DType t, llvm::Value* x);
  llvm::Value* binary(OpKind k, const ir::ElemType& e, llvm::Value* x, llvm::Value* y);
  llvm::Value* cast(llvm::Value* x, DType from, DType to);
  // x op y for a reduce or scan, on the values it carries (floats as f32, integers as i32 or
  // i64); kind combine runs the op's region on them, in its dtype.
  llvm::Value* combine(const Op& op, llvm::Value* x, llvm::Value* y);
  llvm::Value* shuffle_xor(llvm::Value* v, int mask);
  void emit_load(const Op& op);
  void emit_store(const Op& op);
  void emit_atomic(const Op& op);
  void emit_reduce(const Op& op);
  void emit_scan(const Op& op);
  void emit_assert(const Op& op);
  void emit_print(const Op& op);
  void emit_dot(const Op& op);
  bool mma_eligible(const Op& op) const;
  // A dot's K loop, run at least once: k = 0, step, ... while below `end`, carrying the f32
  // values `init` through `body`, which returns their next values. Returns the last ones.
  Elems k_loop(const char* name, int64_t end, int64_t step, const Elems& init,
               const std::function<Elems(llvm::Value* k, const Elems& carried)>& body);
  // Loads that feed a tensor-core dot's operand and nothing else, and can go straight to
  // its shared-memory staging as 16-byte cp.async copies (plan_async_copies): per (dot,
  // operand index), the load and whether the dot sees it transposed. The loads, and the
  // transposes between them and the dot, are not emitted where they stand.
  struct Pipeline;
  struct AsyncOperand {
    const Op* load;
    bool transposed;
    Pipeline* pipe = nullptr; // software-pipelined: copied ahead into pipe->operands[slot]
    size_t slot = 0;
  };
  std::map<std::pair<const Op*, int>, AsyncOperand> async_operands_;
  std::set<const Op*> deferred_ops_;
  void plan_async_copies();
  // How a tensor-core dot stages operand `idx` (0: A [M, K], 1: B [K, N]) in shared memory:
  // rows of `row_bytes` bytes (padded by 16), `rows` of them; k-major: the rows are M (or N)
  // and each holds K elements, else the rows are K.
  struct Staging {
    bool kmajor;
    int64_t row_bytes, rows;
    int64_t bytes() const { return (rows * row_bytes + 15) / 16 * 16; }
  };
  Staging staging(const Op& dot, int idx, bool kmajor) const;
  bool async_kmajor(const AsyncOperand& x, int idx);
  // A for loop with num_stages > 1 whose tensor-core operand loads are issued num_stages - 1
  // iterations ahead (plan_pipelines): each iteration's copies go to one of num_stages
  // rotating buffers at [base, base + stages * stage_bytes) of shared memory, below every
  // other use of it. `slice`: the body's ops the copies' addresses and masks need, emitted
  // again for the iteration ahead (issue_ahead).
  struct Pipeline {
    const Op* loop = nullptr;
    int64_t stages = 1;
    std::vector<const Op*> slice;
    struct Operand {
      const Op* load;
      bool transposed;
      bool is_a; // the dot's A (else its B)
      Staging st;
      int64_t offset; // within a stage
    };
    std::vector<Operand> operands;
    int64_t base = 0, stage_bytes = 0;
    llvm::Value* read_stage = nullptr; // while the body is lowered: the stage this iteration reads
  };
  std::map<const Op*, Pipeline> pipelines_;
  int64_t pipe_bytes_ = 0;           // shared memory the pipelines' buffers take, from offset 0
  llvm::Value* ahead_pred_ = nullptr; // while issue_ahead emits a slice: the iteration exists
  bool emitting_ahead_ = false;
  bool pipe_read_unfenced_ = false;   // a dot read a pipeline buffer since the last barrier
  void plan_pipelines();
  llvm::Value* pipe_buffer(const Pipeline& pl, llvm::Value* stage, size_t slot);
  void issue_ahead(Pipeline& pl, llvm::Value* iv, llvm::Value* stage, bool in_loop);
  void issue_copies(const Op& load, bool transposed, const Staging& st, bool is_a, llvm::Value* base,
                    const char* what);
  // Runs of a thread's elements of a tile in layout `l` that are contiguous along `dim`:
  // (first element, count), each count a power of two of at most 16 bytes, its first
  // element's coordinate along `dim` a multiple of the count.
  std::vector<std::pair<size_t, int>> runs_along(LayoutId l, const ir::Shape& s, int dim, int elem_bytes);
  // A thread's elements of a tile in layout `l` stored to / loaded from shared memory (values
  // in their memory type) with one vector access per run along `dim` (runs_along): runs of at
  // most 16 / `vec_bytes` elements (the element's size: vectors of up to 16 bytes; 16: one
  // element at a time; more: shorter vectors). `addr(j)` is the address of element j, a run's
  // first, which the caller guarantees is aligned to the run's bytes when the run's first
  // coordinate along `dim` is a multiple of its length.
  using AddrFn = std::function<llvm::Value*(size_t)>;
  void store_runs(const Elems& mem_vals, LayoutId l, const ir::Shape& s, int dim, int vec_bytes, DType held,
                  const AddrFn& addr, const char* what);
  Elems load_runs(llvm::Type* ty, LayoutId l, const ir::Shape& s, int dim, int vec_bytes, const AddrFn& addr,
                  const char* what);
  void emit_dot_mma(const Op& op);
  void emit_for(const Op& op);
  void emit_if(const Op& op);
  void emit_reshape(const Op& op);

  // Vector width, static alignment and mask uniformity of a memory access.
  struct AccessPlan {
    int vec = 1;
    bool aligned = true;
    bool mask_uniform = true;
  };
  AccessPlan plan_access(const Op& op, LayoutId l);
  llvm::Value* all_of(const Elems& preds, size_t from, size_t n);
  llvm::Value* and_pred(llvm::Value* a, llvm::Value* b) { return !a ? b : !b ? a : b_.CreateAnd(a, b); }

  const ir::Function& fn_;
  const CompileOptions& opts_;
  TargetHooks& hooks_;
  llvm::Module& m_;
  llvm::LLVMContext& c_;
  AxisAnalysis axis_;
  LayoutPlan plan_;
  llvm::IRBuilder<> b_;  // the body
  llvm::IRBuilder<> pb_; // the entry block (values every block can use)
  llvm::Function* kernel_ = nullptr;
  llvm::Value* tid_ = nullptr;
  llvm::Value* lane_ = nullptr;
  llvm::Value* warp_ = nullptr;
  llvm::Value* smem_base_ = nullptr;
  std::map<std::pair<const Value*, LayoutId>, Elems> vals_;
  std::map<std::pair<LayoutId, ir::Shape>, ThreadElems> elems_cache_;
  std::map<LayoutId, std::vector<llvm::Value*>> base_cache_;
  std::map<std::pair<LayoutId, ir::Shape>, std::vector<llvm::Value*>> starts_cache_;
  std::vector<Elems> yielded_;
  bool smem_dirty_ = false;
  const Op* cur_op_ = nullptr; // the op being lowered, for shared-memory access sites
  LoweringStats stats_;
};

LoweringStats Lowering::run() {
  int threads = 32 * opts_.num_warps;
  stats_.threads_per_block = threads;
  std::vector<llvm::Type*> params;
  for (const Value* p : fn_.params) {
    if (!p->type.is_scalar())
      throw UserError(fmt::format("kernel {}: parameter {} is a tile ({}); parameters must be scalars or pointers",
                                  fn_.name, p->name, p->type.str()));
    params.push_back(mem_type(p->type.elem));
  }
  kernel_ = hooks_.create_kernel(m_, fn_.name, params, threads);
  llvm::BasicBlock* entry = llvm::BasicBlock::Create(c_, "entry", kernel_);
  llvm::BasicBlock* body = llvm::BasicBlock::Create(c_, "body", kernel_);
  pb_.SetInsertPoint(entry);
  b_.SetInsertPoint(body);
  std::vector<llvm::Value*> args = hooks_.kernel_params(pb_);
  for (size_t i = 0; i < fn_.params.size(); ++i) {
    llvm::Value* a = args[i];
    if (!fn_.params[i]->type.is_ptr() && fn_.params[i]->type.dtype() == DType::i1)
      a = pb_.CreateICmpNE(a, pb_.getInt8(0));
    // A parameter compiled in with one value (CompileOptions::int_arg_values) is that constant.
    if (auto it = opts_.int_arg_values.find(fn_.params[i]->name);
        it != opts_.int_arg_values.end() && !fn_.params[i]->type.is_ptr() && ir::is_int(fn_.params[i]->type.dtype()))
      a = llvm::ConstantInt::get(a->getType(), uint64_t(it->second), true);
    vals_[{fn_.params[i], kScalar}] = {a};
  }
  tid_ = hooks_.thread_id(pb_);
  lane_ = pb_.CreateAnd(tid_, 31, "lane");
  warp_ = pb_.CreateLShr(tid_, 5, "warp");
  plan_async_copies();
  plan_pipelines();
  emit_block(fn_.body);
  for (const auto& [loop, pl] : pipelines_) {
    ++stats_.pipelined_loops;
    stats_.pipeline_stages = std::max<int>(stats_.pipeline_stages, int(pl.stages));
    stats_.pipeline_stage_bytes = std::max<int>(stats_.pipeline_stage_bytes, int(pl.stage_bytes));
  }
  if (!b_.GetInsertBlock()->getTerminator()) b_.CreateRetVoid();
  pb_.CreateBr(body);
  hooks_.finish_kernel(m_, kernel_, threads);
  stats_.shared_bytes = (stats_.shared_bytes + 15) / 16 * 16;
  // `tilec ir --stage layouts` prints the plan's list: it must be what was emitted.
  internal_assert(stats_.conversions == static_cast<int>(plan_.conversions().size()),
                  "the lowering emits the layout plan's conversions");
  return stats_;
}

llvm::Type* Lowering::reg_type(const ir::ElemType& e) {
  if (e.is_ptr) return llvm::PointerType::get(c_, hooks_.global_address_space());
  switch (e.dtype) {
  case DType::i1: return b_.getInt1Ty();
  case DType::i8:
  case DType::u8: return b_.getInt8Ty();
  case DType::i16:
  case DType::u16: return b_.getInt16Ty();
  case DType::i32:
  case DType::u32: return b_.getInt32Ty();
  case DType::i64:
  case DType::u64: return b_.getInt64Ty();
  case DType::f16:
  case DType::bf16: return hooks_.half_type(c_, e.dtype);
  case DType::f32: return b_.getFloatTy();
  case DType::f8e4m3:
  case DType::f8e5m2: return b_.getInt8Ty(); // its bits
  }
  internal_fail("bad dtype");
}

llvm::Type* Lowering::mem_type(const ir::ElemType& e) {
  return !e.is_ptr && e.dtype == DType::i1 ? b_.getInt8Ty() : reg_type(e);
}

llvm::Value* Lowering::constant(const ir::ElemType& e, const ir::ConstValue& v) {
  internal_assert(!e.is_ptr, "no pointer constants");
  switch (e.dtype) {
  case DType::f32: return llvm::ConstantFP::get(b_.getFloatTy(), static_cast<float>(v.is_float ? v.f : double(v.i)));
  case DType::f16:
  case DType::bf16: {
    float f = static_cast<float>(v.is_float ? v.f : double(v.i));
    uint16_t bits = e.dtype == DType::f16 ? f32_to_f16_bits(f) : f32_to_bf16_bits(f);
    return llvm::ConstantExpr::getBitCast(b_.getInt16(bits), hooks_.half_type(c_, e.dtype));
  }
  case DType::f8e4m3:
  case DType::f8e5m2: {
    float f = static_cast<float>(v.is_float ? v.f : double(v.i));
    return b_.getInt8(e.dtype == DType::f8e4m3 ? f32_to_f8e4m3_bits(f) : f32_to_f8e5m2_bits(f));
  }
  case DType::i1: return b_.getInt1(v.i != 0);
  default: return llvm::ConstantInt::get(reg_type(e), static_cast<uint64_t>(v.i), true);
  }
}

const ThreadElems& Lowering::elems_of(LayoutId l, const ir::Shape& s) {
  auto key = std::make_pair(l, s);
  auto it = elems_cache_.find(key);
  if (it != elems_cache_.end()) return it->second;
  return elems_cache_.emplace(key, thread_elems(plan_.layout(l), s)).first->second;
}

const std::vector<llvm::Value*>& Lowering::thread_base(LayoutId l) {
  auto it = base_cache_.find(l);
  if (it != base_cache_.end()) return it->second;
  const BlockedLayout& bl = plan_.layout(l).base;
  std::vector<llvm::Value*> base;
  for (int d = 0; d < bl.rank(); ++d) {
    int tpw = bl.threads_per_warp[d], wpb = bl.warps_per_block[d];
    llvm::Value* lc = pb_.CreateAnd(pb_.CreateLShr(lane_, lane_shift(bl, d)), tpw - 1);
    llvm::Value* wc = pb_.CreateAnd(pb_.CreateLShr(warp_, warp_shift(bl, d)), wpb - 1);
    llvm::Value* pos = pb_.CreateAdd(pb_.CreateMul(wc, pb_.getInt32(tpw)), lc);
    base.push_back(pb_.CreateMul(pos, pb_.getInt32(bl.size_per_thread[d])));
  }
  return base_cache_[l] = base;
}

// The thread's first coordinate along each tile dim (in the entry block).
std::vector<llvm::Value*> Lowering::coord_starts(LayoutId l, const ir::Shape& s) {
  auto key = std::make_pair(l, s);
  if (auto it = starts_cache_.find(key); it != starts_cache_.end()) return it->second;
  const ThreadElems& te = elems_of(l, s);
  const Layout& lay = plan_.layout(l);
  const auto& base = thread_base(l);
  std::vector<llvm::Value*> start(s.size());
  for (size_t d = 0; d < s.size(); ++d) {
    int bd = lay.dims[d];
    start[d] = te.base_shape[bd] >= lay.base.pass(bd) ? base[bd]
                                                       : pb_.CreateAnd(base[bd], static_cast<uint64_t>(s[d] - 1));
  }
  return starts_cache_[key] = start;
}

std::vector<llvm::Value*> Lowering::coord_of(LayoutId l, const ir::Shape& s, size_t j) {
  const ThreadElems& te = elems_of(l, s);
  std::vector<llvm::Value*> c = coord_starts(l, s);
  for (size_t d = 0; d < s.size(); ++d)
    // No wrap (coordinates are below the tile's size): LLVM may then fold the constant into
    // the addressing of each element instead of keeping one address register per element.
    if (te.offset[j][d] != 0) c[d] = b_.CreateAdd(c[d], b_.getInt32(static_cast<uint32_t>(te.offset[j][d])), "", true, true);
  return c;
}

std::vector<std::vector<llvm::Value*>> Lowering::coords(LayoutId l, const ir::Shape& s) {
  std::vector<std::vector<llvm::Value*>> r(size_t(elems_of(l, s).count));
  for (size_t j = 0; j < r.size(); ++j) r[j] = coord_of(l, s, j);
  return r;
}

llvm::Value* Lowering::owner(LayoutId l, const ir::Shape& s) {
  if (l == kScalar) return pb_.CreateICmpEQ(tid_, pb_.getInt32(0));
  const ThreadElems& te = elems_of(l, s);
  const auto& base = thread_base(l);
  llvm::Value* r = nullptr;
  for (size_t d = 0; d < te.replicated.size(); ++d)
    if (te.replicated[d]) {
      llvm::Value* own = pb_.CreateICmpULT(base[d], pb_.getInt32(static_cast<uint32_t>(te.base_shape[d])));
      r = r ? pb_.CreateAnd(r, own) : own;
    }
  return r;
}

llvm::Value* Lowering::linear_index(const std::vector<llvm::Value*>& coord, const ir::Shape& s) {
  llvm::Value* idx = nullptr; // no x * 1, no 0 + x: fewer instructions for LLVM to fold away
  int64_t stride = 1;
  for (int d = static_cast<int>(s.size()) - 1; d >= 0; --d) {
    if (s[size_t(d)] > 1) {
      llvm::Value* term = stride == 1 ? coord[d] : b_.CreateMul(coord[d], b_.getInt32(static_cast<uint32_t>(stride)));
      idx = idx ? b_.CreateAdd(idx, term) : term;
    }
    stride *= s[d];
  }
  return idx ? idx : b_.getInt32(0);
}

llvm::Value* Lowering::smem(llvm::Type* ty, llvm::Value* index, int64_t byte_offset) {
  if (!smem_base_) smem_base_ = hooks_.shared_base(pb_);
  llvm::Value* p = smem_base_;
  byte_offset += pipe_bytes_;
  internal_assert(pipe_bytes_ % 16 == 0, "scratch shared memory starts 16-byte aligned");
  if (byte_offset) p = b_.CreateConstGEP1_64(b_.getInt8Ty(), p, byte_offset);
  return b_.CreateGEP(ty, p, index);
}

const Elems& Lowering::get(const Value* v, LayoutId l) {
  if (v->type.is_scalar()) l = kScalar;
  auto it = vals_.find({v, l});
  if (it == vals_.end())
    internal_fail(fmt::format("value {} was not lowered in layout {}", ir::describe(v),
                              l >= 0 ? plan_.layout(l).str() : std::string("scalar")));
  return it->second;
}

void Lowering::define(const Value* v, LayoutId native, Elems e) {
  if (v->type.is_scalar()) {
    vals_[{v, kScalar}] = std::move(e);
    return;
  }
  vals_[{v, native}] = e;
  for (LayoutId l : plan_.requests(v))
    if (l != native) vals_[{v, l}] = convert(e, native, l, v->type.shape, v->type.elem);
}

// The last dim of a tile longer than 1 (0 if none): the one along which row-major indices of
// neighbouring elements are consecutive.
int row_major_fast_dim(const ir::Shape& s) {
  for (int d = int(s.size()) - 1; d > 0; --d)
    if (s[size_t(d)] > 1) return d;
  return 0;
}

// Every thread writes the elements it holds to shared memory at their row-major index, then
// reads the ones the destination layout gives it; runs of elements contiguous in that order go
// as one vector access each (up to 16 bytes). The index is padded by p slots per 32 * p (p the
// longest run, 1 if none) to spread banks while keeping every run aligned to its size.
Elems Lowering::convert(const Elems& src, LayoutId from, LayoutId to, const ir::Shape& s,
                        const ir::ElemType& e) {
  ++stats_.conversions;
  llvm::Type* ty = mem_type(e);
  int eb = mem_bytes(e), vb = e.is_ptr ? 16 : eb, dim = row_major_fast_dim(s);
  int p = 1;
  for (LayoutId l : {from, to})
    for (auto [j, len] : runs_along(l, s, dim, vb)) p = std::max(p, len);
  const uint32_t lp = uint32_t(log2i(p));
  auto padded = [&](llvm::Value* i) {
    llvm::Value* pad = b_.CreateLShr(i, 5 + lp);
    return b_.CreateAdd(i, lp ? b_.CreateShl(pad, lp) : pad);
  };
  int64_t n = ir::num_elements(s);
  need_smem((n + n / 32 + p) * eb);
  before_smem_write();
  auto at = [&](LayoutId l) {
    return [this, l, &s, &padded, ty](size_t j) { return smem(ty, padded(linear_index(coord_of(l, s, j), s))); };
  };
  Elems vals(src.size());
  for (size_t j = 0; j < src.size(); ++j) vals[j] = to_mem(src[j], e);
  store_runs(vals, from, s, dim, vb, e.is_ptr ? DType::i64 : e.dtype, at(from), "layout conversion write");
  barrier();
  Elems r = load_runs(ty, to, s, dim, vb, at(to), "layout conversion read");
  for (auto& x : r) x = from_mem(x, e);
  smem_dirty_ = true;
  return r;
}

Elems Lowering::share_from_owners(const Elems& src, LayoutId l, const ir::Shape& s,
                                  const ir::ElemType& e, llvm::Value* owner_pred) {
  llvm::Type* ty = mem_type(e);
  int eb = mem_bytes(e);
  need_smem((ir::num_elements(s) + 1) * eb);
  before_smem_write();
  DType held = e.is_ptr ? DType::i64 : e.dtype;
  if (l == kScalar) {
    llvm::Value* at = smem(ty, b_.getInt32(0));
    guarded(b_, owner_pred, [&]() -> llvm::Value* {
      smem_store(to_mem(src[0], e), at, "share from owners write", held);
      return nullptr;
    });
    barrier();
    smem_dirty_ = true;
    return {from_mem(smem_load(ty, at, "share from owners read"), e)};
  }
  // The same layout writes and reads: each run's address is computed once, before the branch.
  int dim = row_major_fast_dim(s), vb = e.is_ptr ? 16 : eb;
  std::map<size_t, llvm::Value*> addrs;
  for (auto [j, n] : runs_along(l, s, dim, vb)) addrs[j] = smem(ty, linear_index(coord_of(l, s, j), s));
  Elems vals(src.size());
  for (size_t j = 0; j < src.size(); ++j) vals[j] = to_mem(src[j], e);
  auto at = [&](size_t j) { return addrs.at(j); };
  guarded(b_, owner_pred, [&]() -> llvm::Value* {
    store_runs(vals, l, s, dim, vb, held, at, "share from owners write");
    return nullptr;
  });
  barrier();
  Elems r = load_runs(ty, l, s, dim, vb, at, "share from owners read");
  for (auto& x : r) x = from_mem(x, e);
  smem_dirty_ = true;
  return r;
}

void Lowering::emit_block(const ir::Block& blk) {
  for (const auto& op : blk.ops) emit_op(*op);
}

std::string Lowering::site(const char* what) const {
  if (!cur_op_) return what;
  std::string loc = cur_op_->loc.known()
                        ? fmt::format("{}:{}:{} ", cur_op_->loc.file, cur_op_->loc.line, cur_op_->loc.column)
                        : std::string();
  return fmt::format("{}({}: {})", loc, ir::op_name(cur_op_->kind), what);
}

void Lowering::emit_op(const Op& op) {
  const Op* outer = cur_op_;
  cur_op_ = &op;
  struct Restore {
    const Op*& cur;
    const Op* outer;
    ~Restore() { cur = outer; }
  } restore{cur_op_, outer};
  const Value* res = op.results.empty() ? nullptr : op.results[0];
  // A load the dot that uses it issues as cp.async, or an op only copies issued ahead need.
  if (deferred_ops_.count(&op) && !emitting_ahead_) return;
  switch (op.kind) {
  case OpKind::ProgramId: define(res, kScalar, {hooks_.block_id(b_, static_cast<int>(op.attrs.axis))}); return;
  case OpKind::NumPrograms:
    define(res, kScalar, {hooks_.num_blocks(b_, static_cast<int>(op.attrs.axis))});
    return;
  case OpKind::Reshape:
    if (!is_trivial_reshape(op.operands[0]->type.shape, res->type.shape)) return emit_reshape(op);
    [[fallthrough]];
#define TILEC_X(E, N) case OpKind::E:
    TILEC_VIEW_OR_ELEMENTWISE_OPS(TILEC_X)
#undef TILEC_X
    if (res->type.is_scalar()) vals_[{res, kScalar}] = compute(op, kScalar);
    else
      for (LayoutId l : plan_.requests(res)) vals_[{res, l}] = compute(op, l);
    return;
  case OpKind::Load: return emit_load(op);
  case OpKind::Store: return emit_store(op);
  TILEC_ATOMIC_RMW_OPS(TILEC_OP_CASE)
  case OpKind::AtomicCas: return emit_atomic(op);
  case OpKind::Dot: return emit_dot(op);
  case OpKind::Reduce: return emit_reduce(op);
  case OpKind::Scan: return emit_scan(op);
  case OpKind::Assert: return emit_assert(op);
  case OpKind::Print: return emit_print(op);
  case OpKind::For: return emit_for(op);
  case OpKind::If: return emit_if(op);
  case OpKind::Yield: {
    const Op* parent = op.parent->parent;
    yielded_.clear();
    for (size_t i = 0; i < op.operands.size(); ++i)
      yielded_.push_back(get(op.operands[i], plan_.native(parent->results[i])));
    return;
  }
  case OpKind::Return: b_.CreateRetVoid(); return;
  }
  internal_fail(fmt::format("no lowering for op {}", ir::op_name(op.kind)));
}

Elems Lowering::compute(const Op& op, LayoutId l) {
  const Value* res = op.results[0];
  const ir::Shape& s = res->type.shape;
  int64_t n = count(l, s);
  switch (op.kind) {
  case OpKind::Arange: {
    Elems r;
    for (auto& c : coords(l, s)) r.push_back(b_.CreateAdd(c[0], b_.getInt32(static_cast<uint32_t>(op.attrs.start))));
    return r;
  }
  case OpKind::Constant: return Elems(n, constant(res->type.elem, op.attrs.value));
  case OpKind::Splat: return Elems(n, get(op.operands[0], kScalar)[0]);
  case OpKind::Broadcast:
  case OpKind::ExpandDims:
  case OpKind::Permute:
  case OpKind::Reshape: return view(op, l);
  default: break;
  }
  // Elementwise: the same scalar code for each element the thread holds.
  std::vector<const Elems*> in;
  for (const Value* v : op.operands) in.push_back(&get(v, v->type.is_scalar() ? kScalar : l));
  const ir::ElemType& e0 = op.operands[0]->type.elem;
  Elems r(n);
  // fp8 to a float: two elements per conversion where the target has one instruction for it.
  // (The hook emits nothing when it answers nullopt, which it does for every pair or none.)
  if (const DType to = res->type.dtype();
      op.kind == OpKind::Cast && ir::is_fp8(e0.dtype) && ir::is_float(to) && !ir::is_fp8(to) && n >= 2) {
    int64_t j = 0;
    for (; j + 1 < n; j += 2) {
      auto h = hooks_.fp8x2_to_f16(b_, (*in[0])[size_t(j)], (*in[0])[size_t(j + 1)], e0.dtype);
      if (!h) break;
      for (int k = 0; k < 2; ++k)
        r[size_t(j + k)] = to == DType::f16 ? (*h)[size_t(k)] : from_f32(hooks_.to_f32(b_, (*h)[size_t(k)], DType::f16), to);
    }
    if (j > 0) {
      if (j < n) r[size_t(j)] = cast((*in[0])[size_t(j)], e0.dtype, to);
      return r;
    }
  }
  for (int64_t j = 0; j < n; ++j) {
    auto x = [&](size_t i) { return (*in[i])[j]; };
    switch (op.kind) {
    case OpKind::AddPtr: {
      llvm::Value* off = int_resize(x(1), b_.getInt64Ty(), op.operands[1]->type.dtype());
      r[j] = b_.CreateGEP(mem_type({e0.dtype, false}), x(0), off);
      break;
    }
    case OpKind::Select: r[j] = b_.CreateSelect(x(0), x(1), x(2)); break;
    case OpKind::Fma: {
      DType t = e0.dtype;
      r[j] = from_f32(b_.CreateIntrinsic(llvm::Intrinsic::fma, {b_.getFloatTy()},
                                         {to_f32(x(0), t), to_f32(x(1), t), to_f32(x(2), t)}),
                      t);
      break;
    }
    case OpKind::Cast: r[j] = cast(x(0), e0.dtype, res->type.dtype()); break;
    case OpKind::Bitcast: r[j] = b_.CreateBitCast(x(0), reg_type(res->type.elem)); break;
    default:
      r[j] = ir::is_unary(op.kind) ? unary(op.kind, e0.dtype, x(0)) : binary(op.kind, e0, x(0), x(1));
    }
  }
  return r;
}

Elems Lowering::view(const Op& op, LayoutId l) {
  const Value* src = op.operands[0];
  const Value* res = op.results[0];
  int64_t n = count(l, res->type.shape);
  if (src->type.is_scalar()) return Elems(n, get(src, kScalar)[0]);
  LayoutId sl = plan_.operand_layout(op, src, l);
  const Elems& in = get(src, sl);
  const ThreadElems& ts = elems_of(sl, src->type.shape);
  std::map<std::vector<int64_t>, size_t> index;
  for (size_t j = 0; j < ts.offset.size(); ++j) index[ts.offset[j]] = j;
  const ThreadElems& tr = elems_of(l, res->type.shape);
  const ir::Shape &ss = src->type.shape, &rs = res->type.shape;
  Elems r(n);
  for (int64_t j = 0; j < n; ++j) {
    const std::vector<int64_t>& ro = tr.offset[j];
    std::vector<int64_t> so;
    switch (op.kind) {
    case OpKind::Broadcast:
      so = ro;
      for (size_t d = 0; d < ss.size(); ++d)
        if (ss[d] != rs[d]) so[d] = 0;
      break;
    case OpKind::ExpandDims:
      so = ro;
      so.erase(so.begin() + op.attrs.axis);
      break;
    case OpKind::Permute:
      so.resize(ro.size());
      for (size_t i = 0; i < ro.size(); ++i) so[op.attrs.perm[i]] = ro[i];
      break;
    default: { // trivial reshape: drop the result's size-1 dims, insert the operand's
      std::vector<int64_t> core;
      for (size_t d = 0; d < rs.size(); ++d)
        if (rs[d] != 1) core.push_back(ro[d]);
      size_t k = 0;
      for (size_t d = 0; d < ss.size(); ++d) so.push_back(ss[d] == 1 ? 0 : core[k++]);
    }
    }
    auto it = index.find(so);
    internal_assert(it != index.end(), "view: the operand layout holds the element");
    r[j] = in[it->second];
  }
  return r;
}

llvm::Value* Lowering::unary(OpKind k, DType t, llvm::Value* x) {
  if (ir::is_int(t)) {
    if (k == OpKind::Abs)
      return ir::is_unsigned(t) ? x : b_.CreateBinaryIntrinsic(llvm::Intrinsic::abs, x, b_.getFalse());
    if (k == OpKind::Neg) return b_.CreateNeg(x);
    internal_fail("float-only unary op on an integer");
  }
  x = to_f32(x, t);
  auto f = [&](double v) { return llvm::ConstantFP::get(b_.getFloatTy(), v); };
  llvm::Value* r = nullptr;
  switch (k) {
  case OpKind::Exp: r = hooks_.exp2(b_, b_.CreateFMul(x, f(std::numbers::log2e))); break;
  case OpKind::Exp2: r = hooks_.exp2(b_, x); break;
  case OpKind::Log: r = b_.CreateFMul(hooks_.log2(b_, x), f(std::numbers::ln2)); break;
  case OpKind::Tanh: r = hooks_.tanh(b_, x); break;
  case OpKind::Sqrt: r = hooks_.sqrt(b_, x); break;
  case OpKind::Rsqrt: r = hooks_.rsqrt(b_, x); break;
  case OpKind::Abs: r = b_.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, x); break;
  case OpKind::Neg: r = b_.CreateFNeg(x); break;
  case OpKind::Log2: r = hooks_.log2(b_, x); break;
  case OpKind::Sigmoid: // 1 / (1 + 2^(-x log2 e))
    r = b_.CreateFDiv(f(1.0), b_.CreateFAdd(f(1.0), hooks_.exp2(b_, b_.CreateFMul(x, f(-std::numbers::log2e)))));
    break;
  case OpKind::Floor: r = b_.CreateUnaryIntrinsic(llvm::Intrinsic::floor, x); break;
  case OpKind::Ceil: r = b_.CreateUnaryIntrinsic(llvm::Intrinsic::ceil, x); break;
  case OpKind::Round: r = b_.CreateUnaryIntrinsic(llvm::Intrinsic::roundeven, x); break;
  case OpKind::Sin: r = hooks_.libm(b_, "sinf", {x}); break;
  case OpKind::Cos: r = hooks_.libm(b_, "cosf", {x}); break;
  case OpKind::Erf: r = hooks_.libm(b_, "erff", {x}); break;
  default: internal_fail("not a unary op");
  }
  return from_f32(r, t);
}

llvm::Value* Lowering::binary(OpKind k, const ir::ElemType& e, llvm::Value* x, llvm::Value* y) {
  bool flt = !e.is_ptr && ir::is_float(e.dtype);
  for (const CompareRow& row : kCompare)
    if (row.op == k) {
      if (flt) return b_.CreateFCmp(row.flt, to_f32(x, e.dtype), to_f32(y, e.dtype));
      bool unsigned_cmp = e.is_ptr || e.dtype == DType::i1 || ir::is_unsigned(e.dtype);
      return b_.CreateICmp(unsigned_cmp ? row.uint : row.sint, x, y);
    }
  if (k == OpKind::Min || k == OpKind::Max) {
    if (!flt) return b_.CreateBinaryIntrinsic(int_minmax(k == OpKind::Max, e.dtype), x, y);
    llvm::Value* r = b_.CreateBinaryIntrinsic(k == OpKind::Min ? llvm::Intrinsic::minnum : llvm::Intrinsic::maxnum,
                                              to_f32(x, e.dtype), to_f32(y, e.dtype));
    return from_f32(r, e.dtype);
  }
  if (k == OpKind::Pow) return from_f32(hooks_.libm(b_, "powf", {to_f32(x, e.dtype), to_f32(y, e.dtype)}), e.dtype);
  if (k == OpKind::Shl || k == OpKind::LShr || k == OpKind::AShr) {
    // Amounts are unsigned; from the width on: 0, or for ashr the sign (ir/int_ops.h).
    unsigned bits = x->getType()->getIntegerBitWidth();
    llvm::Value* width = llvm::ConstantInt::get(y->getType(), bits);
    if (k == OpKind::AShr)
      return b_.CreateAShr(x, b_.CreateBinaryIntrinsic(llvm::Intrinsic::umin, y, llvm::ConstantInt::get(y->getType(), bits - 1)));
    llvm::Value* in_range = b_.CreateICmpULT(y, width);
    llvm::Value* safe = b_.CreateSelect(in_range, y, llvm::ConstantInt::get(y->getType(), 0));
    llvm::Value* shifted = k == OpKind::Shl ? b_.CreateShl(x, safe) : b_.CreateLShr(x, safe);
    return b_.CreateSelect(in_range, shifted, llvm::ConstantInt::get(x->getType(), 0));
  }
  if (k == OpKind::UMulHi) return hooks_.umulhi(b_, x, y);
  if (!flt && ir::is_unsigned(e.dtype) && (k == OpKind::Div || k == OpKind::Rem))
    return k == OpKind::Div ? b_.CreateUDiv(x, y) : b_.CreateURem(x, y);
  if (!flt && (k == OpKind::Div || k == OpKind::Rem)) {
    // The minimum value divided by -1 overflows: undefined in LLVM, a trap on x86. The IR
    // wraps (SEMANTICS.md): x / -1 is -x, x % -1 is 0. Divide by 1 instead and fix up.
    llvm::Value* minus_one = b_.CreateICmpEQ(y, llvm::ConstantInt::getSigned(y->getType(), -1));
    llvm::Value* safe = b_.CreateSelect(minus_one, llvm::ConstantInt::get(y->getType(), 1), y);
    if (k == OpKind::Rem) return b_.CreateSRem(x, safe);
    return b_.CreateSelect(minus_one, b_.CreateNeg(x), b_.CreateSDiv(x, safe));
  }
  for (const ArithRow& row : kArith)
    if (row.op == k) {
      if (!flt) return b_.CreateBinOp(row.int_op, x, y);
      internal_assert(row.float_op != kNoOp, "float binary op has an instruction");
      return from_f32(b_.CreateBinOp(row.float_op, to_f32(x, e.dtype), to_f32(y, e.dtype)), e.dtype);
    }
  internal_fail(fmt::format("no lowering for binary op {}", ir::op_name(k)));
}

llvm::Value* Lowering::cast(llvm::Value* x, DType from, DType to) {
  if (from == to) return x;
  llvm::Type* ty = reg_type({to, false});
  if (ir::is_int(from) && ir::is_int(to)) {
    if (to == DType::i1) return b_.CreateICmpNE(x, llvm::ConstantInt::get(x->getType(), 0));
    return int_resize(x, ty, from);
  }
  if (ir::is_int(from)) {
    llvm::Value* f = from == DType::i1 || ir::is_unsigned(from) ? b_.CreateUIToFP(x, b_.getFloatTy())
                                                                : b_.CreateSIToFP(x, b_.getFloatTy());
    return from_f32(f, to);
  }
  llvm::Value* f = to_f32(x, from);
  if (ir::is_float(to)) return from_f32(f, to);
  if (to == DType::i1) return b_.CreateFCmpUNE(f, llvm::ConstantFP::get(b_.getFloatTy(), 0.0));
  // To unsigned: saturating (NaN and negatives give 0), as the interpreter does; to signed,
  // out of range is undefined (ir/SEMANTICS.md).
  if (ir::is_unsigned(to)) return b_.CreateIntrinsic(llvm::Intrinsic::fptoui_sat, {ty, b_.getFloatTy()}, {f});
  return b_.CreateFPToSI(f, ty);
}

Lowering::AccessPlan Lowering::plan_access(const Op& op, LayoutId l) {
  AccessPlan p;
  if (l == kScalar) return p;
  const Value* ptr = op.operands[0];
  LayoutPlan::Access acc = plan_.access(ptr);
  const ThreadElems& te = elems_of(l, ptr->type.shape);
  if (te.run_dim == acc.contig_dim) p.vec = static_cast<int>(std::min<int64_t>(te.run, acc.vec));
  if (p.vec > 1) {
    p.aligned = axis_.at(ptr).divisibility[acc.contig_dim] >= p.vec;
    if (const Value* m = op.mask()) p.mask_uniform = axis_.at(m).constancy[acc.contig_dim] >= p.vec;
  }
  return p;
}

llvm::Value* Lowering::all_of(const Elems& preds, size_t from, size_t n) {
  llvm::Value* r = preds[from];
  for (size_t k = 1; k < n; ++k) r = b_.CreateAnd(r, preds[from + k]);
  return r;
}

// A chunk of `vec` elements contiguous in memory is one vector access when
// its address is aligned and its mask is all-true; when neither is known at
// compile time, both are checked at run time and the chunk falls back to one
// guarded access per element.
void Lowering::emit_load(const Op& op) {
  const Value* ptr = op.operands[0];
  const Value* res = op.results[0];
  const ir::ElemType e = res->type.elem;
  LayoutId l = res->type.is_scalar() ? kScalar : plan_.op_layouts(&op)[0];
  const Elems& P = get(ptr, l);
  const Elems* M = op.mask() ? &get(op.mask(), l) : nullptr;
  const Elems* O = op.other() ? &get(op.other(), l) : nullptr;
  llvm::Type* ty = mem_type(e);
  unsigned eb = static_cast<unsigned>(mem_bytes(e));
  AccessPlan ap = plan_access(op, l);
  size_t n = P.size();
  Elems ahead_mask; // issued ahead (issue_ahead): nothing is read for an iteration past the end
  if (ahead_pred_) {
    for (size_t j = 0; j < n; ++j) ahead_mask.push_back(M ? b_.CreateAnd((*M)[j], ahead_pred_) : ahead_pred_);
    M = &ahead_mask;
  }
  int vec = ap.vec;
  Elems r(n);
  for (size_t j0 = 0; j0 < n; j0 += vec) {
    auto scalar_loads = [&](Elems& out) {
      for (int k = 0; k < vec; ++k)
        out[j0 + k] = hooks_.load(b_, P[j0 + k], ty, eb, M ? (*M)[j0 + k] : nullptr);
    };
    if (vec == 1) {
      scalar_loads(r);
      continue;
    }
    auto* vty = llvm::FixedVectorType::get(ty, vec);
    auto vector_load = [&](Elems& out, llvm::Value* pred) {
      llvm::Value* v = hooks_.load(b_, P[j0], vty, eb * vec, pred);
      for (int k = 0; k < vec; ++k) out[j0 + k] = b_.CreateExtractElement(v, k);
    };
    llvm::Value* fast = nullptr;
    if (!ap.aligned)
      fast = b_.CreateICmpEQ(b_.CreateAnd(b_.CreatePtrToInt(P[j0], b_.getInt64Ty()), eb * vec - 1), b_.getInt64(0));
    if (M && !ap.mask_uniform) fast = and_pred(fast, all_of(*M, j0, vec));
    llvm::Value* upred = M && ap.mask_uniform ? (*M)[j0] : nullptr;
    if (!fast) {
      vector_load(r, upred);
      continue;
    }
    llvm::BasicBlock* fast_bb = llvm::BasicBlock::Create(c_, "ld.vec", kernel_);
    llvm::BasicBlock* slow_bb = llvm::BasicBlock::Create(c_, "ld.scalar", kernel_);
    llvm::BasicBlock* join = llvm::BasicBlock::Create(c_, "ld.join", kernel_);
    b_.CreateCondBr(fast, fast_bb, slow_bb);
    Elems fv(n), sv(n);
    b_.SetInsertPoint(fast_bb);
    vector_load(fv, upred);
    llvm::BasicBlock* fast_end = b_.GetInsertBlock();
    b_.CreateBr(join);
    b_.SetInsertPoint(slow_bb);
    scalar_loads(sv);
    llvm::BasicBlock* slow_end = b_.GetInsertBlock();
    b_.CreateBr(join);
    b_.SetInsertPoint(join);
    for (int k = 0; k < vec; ++k) {
      llvm::PHINode* phi = b_.CreatePHI(ty, 2);
      phi->addIncoming(fv[j0 + k], fast_end);
      phi->addIncoming(sv[j0 + k], slow_end);
      r[j0 + k] = phi;
    }
  }
  // A masked-off element already reads as zero (the target's guarded load): an `other` of
  // +0 needs no select.
  bool other_is_zero = O && is_positive_zero(op.other());
  for (size_t j = 0; j < n; ++j) {
    r[j] = from_mem(r[j], e);
    if (O && !other_is_zero) r[j] = b_.CreateSelect((*M)[j], r[j], (*O)[j]);
  }
  define(res, l, std::move(r));
}

void Lowering::emit_store(const Op& op) {
  const Value* ptr = op.operands[0];
  const Value* val = op.operands[1];
  const ir::ElemType e = val->type.elem;
  LayoutId l = plan_.op_layouts(&op)[0];
  const Elems& P = get(ptr, l);
  const Elems& V = get(val, l);
  const Elems* M = op.mask() ? &get(op.mask(), l) : nullptr;
  llvm::Value* own = owner(l, ptr->type.shape);
  llvm::Type* ty = mem_type(e);
  unsigned eb = static_cast<unsigned>(mem_bytes(e));
  AccessPlan ap = plan_access(op, l);
  int vec = ap.vec;
  for (size_t j0 = 0; j0 < P.size(); j0 += vec) {
    auto scalar_stores = [&] {
      for (int k = 0; k < vec; ++k)
        hooks_.store(b_, P[j0 + k], to_mem(V[j0 + k], e), eb, and_pred(own, M ? (*M)[j0 + k] : nullptr));
    };
    if (vec == 1) {
      scalar_stores();
      continue;
    }
    auto vector_store = [&](llvm::Value* pred) {
      llvm::Value* v = llvm::PoisonValue::get(llvm::FixedVectorType::get(ty, vec));
      for (int k = 0; k < vec; ++k) v = b_.CreateInsertElement(v, to_mem(V[j0 + k], e), k);
      hooks_.store(b_, P[j0], v, eb * vec, pred);
    };
    llvm::Value* fast = nullptr;
    if (!ap.aligned)
      fast = b_.CreateICmpEQ(b_.CreateAnd(b_.CreatePtrToInt(P[j0], b_.getInt64Ty()), eb * vec - 1), b_.getInt64(0));
    if (M && !ap.mask_uniform) fast = and_pred(fast, all_of(*M, j0, vec));
    llvm::Value* upred = and_pred(own, M && ap.mask_uniform ? (*M)[j0] : nullptr);
    if (!fast) {
      vector_store(upred);
      continue;
    }
    llvm::BasicBlock* fast_bb = llvm::BasicBlock::Create(c_, "st.vec", kernel_);
    llvm::BasicBlock* slow_bb = llvm::BasicBlock::Create(c_, "st.scalar", kernel_);
    llvm::BasicBlock* join = llvm::BasicBlock::Create(c_, "st.join", kernel_);
    b_.CreateCondBr(fast, fast_bb, slow_bb);
    b_.SetInsertPoint(fast_bb);
    vector_store(upred);
    b_.CreateBr(join);
    b_.SetInsertPoint(slow_bb);
    scalar_stores();
    b_.CreateBr(join);
    b_.SetInsertPoint(join);
  }
}

void Lowering::emit_atomic(const Op& op) {
  const Value* ptr = op.operands[0];
  const Value* res = op.results[0];
  LayoutId l = res->type.is_scalar() ? kScalar : plan_.op_layouts(&op)[0];
  const bool cas = op.kind == OpKind::AtomicCas;
  const Elems& P = get(ptr, l);
  const Elems& V = get(op.operands[cas ? 2 : 1], l);
  const Elems* C = cas ? &get(op.operands[1], l) : nullptr;
  const Elems* M = op.mask() ? &get(op.mask(), l) : nullptr;
  llvm::Value* own = owner(l, ptr->type.shape);
  Elems r(P.size());
  for (size_t j = 0; j < P.size(); ++j)
    r[j] = hooks_.atomic(b_, ir::atomic_op(op), P[j], V[j], C ? (*C)[j] : nullptr,
                         and_pred(own, M ? (*M)[j] : nullptr));
  // Threads that share an element got no old value: the owner hands it over.
  if (own) r = share_from_owners(r, l, ptr->type.shape, res->type.elem, own);
  define(res, l, std::move(r));
}

llvm::Value* Lowering::combine(const Op& op, llvm::Value* x, llvm::Value* y) {
  bool flt = x->getType()->isFloatTy();
  switch (op.attrs.reduce) {
  case ir::ReduceKind::combine: {
    const ir::Block& fn = op.region(0);
    const ir::ElemType& e = op.operands[0]->type.elem;
    auto to_dtype = [&](llvm::Value* v) { return flt ? from_f32(v, e.dtype) : b_.CreateTrunc(v, reg_type(e)); };
    define(fn.args[0], kScalar, {to_dtype(x)});
    define(fn.args[1], kScalar, {to_dtype(y)});
    for (const auto& inner : fn.ops)
      if (inner->kind != OpKind::Yield) emit_op(*inner);
    llvm::Value* r = get(fn.terminator()->operands[0], kScalar)[0];
    return flt ? to_f32(r, e.dtype) : int_resize(r, x->getType(), e.dtype);
  }
  case ir::ReduceKind::sum: return flt ? b_.CreateFAdd(x, y) : b_.CreateAdd(x, y);
  case ir::ReduceKind::max:
    return b_.CreateBinaryIntrinsic(flt ? llvm::Intrinsic::maxnum : int_minmax(true, op.operands[0]->type.dtype()), x, y);
  case ir::ReduceKind::min:
    return b_.CreateBinaryIntrinsic(flt ? llvm::Intrinsic::minnum : int_minmax(false, op.operands[0]->type.dtype()), x, y);
  case ir::ReduceKind::prod: return flt ? b_.CreateFMul(x, y) : b_.CreateMul(x, y);
  }
  internal_fail("bad reduce kind");
}

// device_assert: when any element of the condition this thread holds is false, the target's
// assert_fail with the op's source location and message (compiled out without
// CompileOptions::device_asserts).
void Lowering::emit_assert(const Op& op) {
  if (!opts_.device_asserts) return;
  const Value* c = op.operands[0];
  const Elems& in = get(c, c->type.is_scalar() ? kScalar : plan_.op_layouts(&op)[0]);
  llvm::Value* bad = nullptr;
  for (llvm::Value* v : in) bad = bad ? b_.CreateOr(bad, b_.CreateNot(v)) : b_.CreateNot(v);
  std::string where = fmt::format("{}: {}", op.loc.str(), op.attrs.message);
  guarded(b_, bad, [&]() -> llvm::Value* {
    hooks_.assert_fail(b_, where);
    return nullptr;
  });
}

// device_print: each element printed once, by the thread that owns it, with its row-major
// index; the target prints it (the emulator) or drops it (the GPU).
void Lowering::emit_print(const Op& op) {
  const Value* v = op.operands[0];
  const ir::Shape& s = v->type.shape;
  const LayoutId l = v->type.is_scalar() ? kScalar : plan_.op_layouts(&op)[0];
  const Elems& in = get(v, l);
  const auto cs = l == kScalar ? std::vector<std::vector<llvm::Value*>>{{}} : coords(l, s);
  std::string shape;
  for (int64_t d : s) shape += (shape.empty() ? "" : "x") + std::to_string(d);
  const DType t = v->type.dtype();
  const bool fl = ir::is_float(t);
  llvm::Value* own = owner(l, s);
  hooks_.print_op(b_);
  for (size_t j = 0; j < in.size(); ++j) {
    llvm::Value* linear = b_.getInt64(0);
    int64_t stride = 1;
    for (size_t d = s.size(); d-- > 0;) {
      linear = b_.CreateAdd(linear, b_.CreateMul(b_.CreateSExt(cs[j][d], b_.getInt64Ty()), b_.getInt64(stride)));
      stride *= s[d];
    }
    llvm::Value* x = fl ? to_f32(in[j], t)
                        : int_resize(in[j], b_.getInt64Ty(), t);
    guarded(b_, own, [&]() -> llvm::Value* {
      hooks_.print(b_, op.attrs.message, shape, linear, x,
                   fl ? PrintedValue::float_ : ir::is_unsigned(t) ? PrintedValue::unsigned_int : PrintedValue::signed_int);
      return nullptr;
    });
  }
}

// An inclusive scan along one axis, Hillis-Steele through shared memory: the owners write the
// elements at their row-major index; each of log2(n) steps adds (combines) the element d
// places back along the axis (d = 1, 2, 4, ...) from one buffer into the other, with a
// barrier between steps. Every thread then holds its elements' prefixes, replicas included.
// Floats combine in f32 and round to the dtype once; integers in i32 (i64), wrapping.
void Lowering::emit_scan(const Op& op) {
  const Value* src = op.operands[0];
  const Value* res = op.results[0];
  const ir::Shape& s = src->type.shape;
  const int axis = static_cast<int>(op.attrs.axis);
  const LayoutId l = plan_.op_layouts(&op)[0];
  const DType dt = src->type.dtype();
  llvm::Type* ct = ir::is_float(dt) ? b_.getFloatTy() : ir::dtype_bits(dt) == 64 ? b_.getInt64Ty() : b_.getInt32Ty();
  const DType cdt = ir::is_float(dt) ? DType::f32 : ir::dtype_bits(dt) == 64 ? DType::i64 : DType::i32;
  const int64_t n = s[size_t(axis)], total = ir::num_elements(s), cb = ct->isIntegerTy(64) ? 8 : 4;
  int64_t stride = 1;
  for (size_t d = size_t(axis) + 1; d < s.size(); ++d) stride *= s[d];
  const Elems& in = get(src, l);
  Elems cur(in.size());
  for (size_t j = 0; j < in.size(); ++j) cur[j] = ir::is_float(dt) ? to_f32(in[j], dt) : int_resize(in[j], ct, dt);
  if (n > 1) {
    auto cs = coords(l, s);
    std::vector<llvm::Value*> idx, along;
    for (auto& c : cs) {
      idx.push_back(linear_index(c, s));
      along.push_back(c[size_t(axis)]);
    }
    llvm::Value* own = owner(l, s);
    need_smem(2 * total * cb);
    before_smem_write();
    auto write = [&](int buf) {
      guarded(b_, own, [&]() -> llvm::Value* {
        for (size_t j = 0; j < cur.size(); ++j)
          smem_store(cur[j], smem(ct, idx[j], buf * total * cb), "scan write", cdt);
        return nullptr;
      });
      barrier();
    };
    int buf = 0;
    write(buf);
    for (int64_t d = 1; d < n; d *= 2) {
      for (size_t j = 0; j < cur.size(); ++j) {
        llvm::Value* has = b_.CreateICmpSGE(along[j], b_.getInt32(uint32_t(d)));
        // Elements less than d from the start read themselves (in bounds) and keep their value.
        llvm::Value* from = b_.CreateSelect(has, b_.CreateSub(idx[j], b_.getInt32(uint32_t(d * stride))), idx[j]);
        llvm::Value* prev = smem_load(ct, smem(ct, from, buf * total * cb), "scan read");
        cur[j] = b_.CreateSelect(has, combine(op, prev, cur[j]), cur[j]);
      }
      if (2 * d < n) write(buf = 1 - buf);
    }
    smem_dirty_ = true;
  }
  Elems out(cur.size());
  for (size_t j = 0; j < cur.size(); ++j)
    out[j] = ir::is_float(dt) ? from_f32(cur[j], dt) : b_.CreateTrunc(cur[j], reg_type(res->type.elem));
  define(res, l, std::move(out));
}

llvm::Value* Lowering::shuffle_xor(llvm::Value* v, int mask) {
  llvm::Type* t = v->getType();
  if (t->isIntegerTy(64)) {
    llvm::Value* lo = hooks_.shfl_xor(b_, b_.CreateTrunc(v, b_.getInt32Ty()), mask);
    llvm::Value* hi = hooks_.shfl_xor(b_, b_.CreateTrunc(b_.CreateLShr(v, 32), b_.getInt32Ty()), mask);
    return b_.CreateOr(b_.CreateZExt(lo, t), b_.CreateShl(b_.CreateZExt(hi, t), 32));
  }
  if (t->isFloatTy()) return b_.CreateBitCast(hooks_.shfl_xor(b_, b_.CreateBitCast(v, b_.getInt32Ty()), mask), t);
  return hooks_.shfl_xor(b_, v, mask);
}

// Within the thread, then across lanes by shuffle-xor, then across warps
// through shared memory; only positions holding distinct data take part.
void Lowering::emit_reduce(const Op& op) {
  const Value* src = op.operands[0];
  const Value* res = op.results[0];
  const ir::Shape& s = src->type.shape;
  const ir::Shape& rs = res->type.shape;
  int axis = static_cast<int>(op.attrs.axis);
  LayoutId pl = plan_.op_layouts(&op)[0];
  Layout lay = plan_.layout(pl);
  int bd = lay.dims[axis];
  DType dt = src->type.dtype();
  llvm::Type* ct = ir::is_float(dt) ? b_.getFloatTy() : ir::dtype_bits(dt) == 64 ? b_.getInt64Ty() : b_.getInt32Ty();
  const Elems& in = get(src, pl);
  const ThreadElems& te = elems_of(pl, s);
  LayoutId rl = res->type.is_scalar() ? kScalar : plan_.native(res);
  size_t nres = 1;
  std::map<std::vector<int64_t>, size_t> index;
  if (rl != kScalar) {
    const ThreadElems& tr = elems_of(rl, rs);
    nres = tr.count;
    for (size_t i = 0; i < nres; ++i) index[tr.offset[i]] = i;
  }
  Elems acc(nres, nullptr);
  for (size_t j = 0; j < in.size(); ++j) {
    size_t i = 0;
    if (rl != kScalar) {
      std::vector<int64_t> key = te.offset[j];
      key.erase(key.begin() + axis);
      auto it = index.find(key);
      internal_assert(it != index.end(), "reduce: result layout holds the element");
      i = it->second;
    }
    llvm::Value* v = ir::is_float(dt) ? to_f32(in[j], dt) : int_resize(in[j], ct, dt);
    acc[i] = acc[i] ? combine(op, acc[i], v) : v;
  }
  int64_t extent = s[axis];
  int64_t tpw = lay.base.threads_per_warp[bd], wpb = lay.base.warps_per_block[bd];
  int64_t spt_eff = std::min<int64_t>(lay.base.size_per_thread[bd], extent);
  int64_t distinct = std::min<int64_t>(tpw * wpb, std::max<int64_t>(1, extent / spt_eff));
  int64_t lanes = std::min<int64_t>(tpw, distinct);
  int64_t warps = lanes == tpw ? distinct / tpw : 1;
  for (int k = 0; k < log2i(lanes); ++k)
    for (auto& a : acc) a = combine(op, a, shuffle_xor(a, 1 << (lane_shift(lay.base, bd) + k)));
  if (warps > 1) {
    int cb = ct->isIntegerTy(64) ? 8 : 4;
    need_smem(std::max<int64_t>(1, ir::num_elements(rs)) * warps * cb);
    before_smem_write();
    llvm::Value* wc = b_.CreateAnd(b_.CreateLShr(warp_, warp_shift(lay.base, bd)), static_cast<uint64_t>(warps - 1));
    std::vector<llvm::Value*> lin;
    if (rl == kScalar) lin.push_back(b_.getInt32(0));
    else
      for (auto& c : coords(rl, rs)) lin.push_back(linear_index(c, rs));
    // Result i's partials at [lin * warps, lin * warps + warps): the warp's offset added to the
    // pointer, not the index, so that the constant offsets of the reads fold into their addresses.
    std::vector<llvm::Value*> slots(nres);
    for (size_t i = 0; i < nres; ++i)
      slots[i] = smem(ct, b_.CreateMul(lin[i], b_.getInt32(static_cast<uint32_t>(warps)), "", true, true));
    for (size_t i = 0; i < nres; ++i) smem_store(acc[i], b_.CreateInBoundsGEP(ct, slots[i], wc), "reduction partial write",
                                                    ir::is_float(dt) ? DType::f32 : DType::i64);
    barrier();
    // A result's partials are consecutive (warps a power of two): read as vectors of up to 16 bytes.
    const int64_t per_load = std::min<int64_t>(warps, 16 / cb);
    for (size_t i = 0; i < nres; ++i) {
      llvm::Value* v = nullptr;
      for (int64_t w = 0; w < warps; w += per_load) {
        llvm::Value* at = w ? b_.CreateConstInBoundsGEP1_32(ct, slots[i], unsigned(w)) : slots[i];
        llvm::Value* x = smem_load(per_load > 1 ? llvm::FixedVectorType::get(ct, unsigned(per_load)) : ct, at,
                                   "reduction partial read");
        for (int64_t k = 0; k < per_load; ++k) {
          llvm::Value* part = per_load > 1 ? b_.CreateExtractElement(x, uint64_t(k)) : x;
          v = v ? combine(op, v, part) : part;
        }
      }
      acc[i] = v;
    }
    smem_dirty_ = true;
  }
  for (auto& a : acc) a = ir::is_float(dt) ? from_f32(a, dt) : b_.CreateTrunc(a, reg_type(res->type.elem));
  define(res, rl, std::move(acc));
}

std::vector<std::pair<size_t, int>> Lowering::runs_along(LayoutId l, const ir::Shape& s, int dim, int elem_bytes) {
  const ThreadElems& te = elems_of(l, s);
  int v = te.run_dim == dim ? int(std::min<int64_t>(te.run, 16 / elem_bytes)) : 1;
  while (v > 1 && te.count % v != 0) v /= 2;
  std::vector<std::pair<size_t, int>> r;
  for (size_t j = 0; j < size_t(te.count);) {
    int n = v;
    auto contiguous = [&](int len) {
      if (te.offset[j][size_t(dim)] % len != 0 || j + size_t(len) > size_t(te.count)) return false;
      for (int k = 1; k < len; ++k)
        for (size_t d = 0; d < s.size(); ++d)
          if (te.offset[j + size_t(k)][d] != te.offset[j][d] + (int(d) == dim ? k : 0)) return false;
      return true;
    };
    while (n > 1 && !contiguous(n)) n /= 2;
    r.push_back({j, n});
    j += size_t(n);
  }
  return r;
}

void Lowering::store_runs(const Elems& vals, LayoutId l, const ir::Shape& s, int dim, int vec_bytes, DType held,
                          const AddrFn& addr, const char* what) {
  for (auto [j, n] : runs_along(l, s, dim, vec_bytes)) {
    llvm::Value* x = vals[j];
    if (n > 1) {
      x = llvm::PoisonValue::get(llvm::FixedVectorType::get(vals[j]->getType(), unsigned(n)));
      for (int k = 0; k < n; ++k) x = b_.CreateInsertElement(x, vals[j + size_t(k)], uint64_t(k));
    }
    smem_store(x, addr(j), what, held);
  }
}

Elems Lowering::load_runs(llvm::Type* ty, LayoutId l, const ir::Shape& s, int dim, int vec_bytes, const AddrFn& addr,
                          const char* what) {
  Elems out(size_t(elems_of(l, s).count));
  for (auto [j, n] : runs_along(l, s, dim, vec_bytes)) {
    llvm::Value* x = smem_load(n > 1 ? llvm::FixedVectorType::get(ty, unsigned(n)) : ty, addr(j), what);
    for (int k = 0; k < n; ++k) out[j + size_t(k)] = n > 1 ? b_.CreateExtractElement(x, uint64_t(k)) : x;
  }
  return out;
}

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

Elems Lowering::k_loop(const char* name, int64_t end, int64_t step, const Elems& init,
                       const std::function<Elems(llvm::Value* k, const Elems& carried)>& body) {
  llvm::BasicBlock* pre = b_.GetInsertBlock();
  llvm::BasicBlock* loop = llvm::BasicBlock::Create(c_, std::string(name) + ".k", kernel_);
  llvm::BasicBlock* exit = llvm::BasicBlock::Create(c_, std::string(name) + ".end", kernel_);
  b_.CreateBr(loop);
  b_.SetInsertPoint(loop);
  llvm::PHINode* k = b_.CreatePHI(b_.getInt32Ty(), 2, "k");
  k->addIncoming(b_.getInt32(0), pre);
  std::vector<llvm::PHINode*> phis;
  for (llvm::Value* v : init) {
    phis.push_back(b_.CreatePHI(v->getType(), 2));
    phis.back()->addIncoming(v, pre);
  }
  Elems next = body(k, Elems(phis.begin(), phis.end()));
  llvm::Value* k_next = b_.CreateAdd(k, b_.getInt32(uint32_t(step)));
  llvm::BasicBlock* latch = b_.GetInsertBlock();
  k->addIncoming(k_next, latch);
  for (size_t i = 0; i < phis.size(); ++i) phis[i]->addIncoming(next[i], latch);
  b_.CreateCondBr(b_.CreateICmpULT(k_next, b_.getInt32(uint32_t(end))), loop, exit);
  b_.SetInsertPoint(exit);
  return next;
}

// f16 x f16 or bf16 x bf16 with an f32 accumulator takes the tensor cores (emit_dot_mma)
// unless CompileOptions::tensor_cores is off; everything else runs on CUDA cores.
bool Lowering::mma_eligible(const Op& op) const {
  return opts_.tensor_cores && dot_on_tensor_cores(op);
}

// dot on the tensor cores, mma.sync.m16n8k16 with f32 accumulators. The operands are staged
// in shared memory, A row-major [M][K] and B column-major [N][K], so each lane's fragment
// registers are 32-bit loads of two consecutive k; the accumulator goes through shared
// memory too, [M][N] f32. Warp w computes the 16x8 output tiles w, w + W, ... of the
// operands padded to whole tiles (M to 16, N to 8, K to 16): it loads its accumulator
// fragments, runs the K loop of MMAs, and writes them back; after a barrier every thread
// reads its elements of the result in the dot's blocked layout. Padding never touches
// memory: a fragment register past M, N or K is zero (its address clamped into the tile, its
// value replaced), and results past M or N are not stored. Rows are padded by 16 bytes (8
// halves, 4 floats) so the eight rows one fragment load touches fall in different banks.
// Fragment ownership (PTX ISA, m16n8k16, g = lane / 4, t = lane % 4):
//   A: reg 0 (g, 2t..2t+1), reg 1 (g+8, 2t..), reg 2 (g, 2t+8..), reg 3 (g+8, 2t+8..)
//   B: reg 0 (k 2t..2t+1, n g), reg 1 (k 2t+8.., n g)
//   C, D: 0, 1 (g, 2t, 2t+1), 2, 3 (g+8, 2t, 2t+1)
void Lowering::emit_dot_mma(const Op& op) {
  const Value* a = op.operands[0];
  const Value* bv = op.operands[1];
  const Value* res = op.results[0];
  std::vector<LayoutId> ls = plan_.op_layouts(&op);
  const int64_t M = a->type.shape[0], K = a->type.shape[1], N = bv->type.shape[1];
  const int64_t Mp = std::max<int64_t>(M, 16), Np = std::max<int64_t>(N, 8), Kp = std::max<int64_t>(K, 16);
  const DType dt = a->type.dtype();
  // Each operand is staged along the dimension its layout holds contiguously in a thread,
  // so the stores vectorize: A as [M][K] (k-major) or [K][M], B as [N][K] (k-major) or
  // [K][N]. A k-major operand's fragment register is one 32-bit load of two consecutive k;
  // the other kind takes two 16-bit loads.
  auto async_of = [&](int idx) -> const AsyncOperand* {
    auto it = async_operands_.find({&op, idx});
    return it == async_operands_.end() ? nullptr : &it->second;
  };
  const AsyncOperand* async_a = async_of(0);
  const AsyncOperand* async_b = async_of(1);
  const bool a_kmajor = async_a ? async_kmajor(*async_a, 0) : elems_of(ls[0], a->type.shape).run_dim != 0;
  const bool b_kmajor = async_b ? async_kmajor(*async_b, 1) : elems_of(ls[1], bv->type.shape).run_dim != 1;
  const Staging st_a = staging(op, 0, a_kmajor), st_b = staging(op, 1, b_kmajor);
  const int64_t sa = st_a.row_bytes, sb = st_b.row_bytes, sc = (N + 4) * 4; // row strides
  // An operand copied ahead by its loop's pipeline is read from this iteration's buffer; the
  // others are staged in scratch shared memory.
  const bool pipe_a = async_a && async_a->pipe, pipe_b = async_b && async_b->pipe;
  // The plan put the result (and the accumulator) in the MMA accumulator's own layout: the
  // fragments are the elements, so neither goes through shared memory.
  const bool direct = plan_.is_mma(ls[2]);
  // A zero accumulator (dot(a, b)) is not staged: the fragments start at zero. The result
  // area has the padded rows and columns too, so every lane stores its fragments without a
  // branch (the padding is never read).
  const bool zero_acc = is_positive_zero(op.operands[2]);
  const int64_t scp = (Np + 4) * 4;
  const int64_t off_a = 0, off_b = pipe_a ? 0 : st_a.bytes(), off_c = off_b + (pipe_b ? 0 : st_b.bytes());
  // 16 zero bytes: the row an ldmatrix lane addresses for a row of A past M or of B past N,
  // so the padding reads as zeros without a select per register.
  const int64_t off_z = off_c + (direct ? 0 : (std::max(M * sc, Mp * scp) + 15) / 16 * 16);
  need_smem(off_z + 16);
  before_smem_write();
  llvm::Value* base_a = pipe_a ? pipe_buffer(*async_a->pipe, async_a->pipe->read_stage, async_a->slot)
                               : smem(b_.getInt8Ty(), b_.getInt32(0), off_a);
  llvm::Value* base_b = pipe_b ? pipe_buffer(*async_b->pipe, async_b->pipe->read_stage, async_b->slot)
                               : smem(b_.getInt8Ty(), b_.getInt32(0), off_b);
  llvm::Value* base_c = smem(b_.getInt8Ty(), b_.getInt32(0), off_c);
  auto at = [&](llvm::Value* base, int64_t stride, llvm::Value* row, llvm::Value* col_bytes) { // offsets never wrap
    llvm::Value* byte = b_.CreateAdd(b_.CreateMul(row, b_.getInt32(uint32_t(stride)), "", true, true), col_bytes, "",
                                     true, true);
    return b_.CreateGEP(b_.getInt8Ty(), base, byte);
  };
  auto bytes = [&](llvm::Value* v, int eb) { return b_.CreateMul(v, b_.getInt32(uint32_t(eb)), "", true, true); };
  // Element (m, k) of A and (k, n) of B in shared memory.
  auto a_at = [&](llvm::Value* m, llvm::Value* k) {
    return a_kmajor ? at(base_a, sa, m, bytes(k, 2)) : at(base_a, sa, k, bytes(m, 2));
  };
  auto b_at = [&](llvm::Value* k, llvm::Value* n) {
    return b_kmajor ? at(base_b, sb, n, bytes(k, 2)) : at(base_b, sb, k, bytes(n, 2));
  };
  // A thread's runs of elements contiguous in shared memory go as one vector store each (the
  // row strides and offsets are multiples of 16 bytes, the runs aligned to their size).
  auto stage = [&](const Value* v, LayoutId l, int contig_dim, int eb, DType held,
                   const std::function<llvm::Value*(const std::vector<llvm::Value*>&)>& addr, const char* what) {
    const ir::Shape& sh = v->type.shape;
    store_runs(get(v, l), l, sh, contig_dim, eb, held, [&](size_t j) { return addr(coord_of(l, sh, j)); }, what);
  };
  // An operand loaded from global memory for this dot alone goes there directly, as 16-byte
  // cp.async copies, unless its loop's pipeline copied it already.
  if (async_a && !pipe_a)
    issue_copies(*async_a->load, async_a->transposed, st_a, true, base_a, "dot (mma) operand A, asynchronous copy");
  else if (!async_a)
    stage(a, ls[0], a_kmajor ? 1 : 0, 2, dt, [&](const auto& c) { return a_at(c[0], c[1]); }, "dot (mma) operand A write");
  if (async_b && !pipe_b)
    issue_copies(*async_b->load, async_b->transposed, st_b, false, base_b, "dot (mma) operand B, asynchronous copy");
  else if (!async_b)
    stage(bv, ls[1], b_kmajor ? 0 : 1, 2, dt, [&](const auto& c) { return b_at(c[0], c[1]); }, "dot (mma) operand B write");
  if (M < 8 || N < 8) // every thread writes the same zeros: no branch, and no race
    smem_store(llvm::Constant::getNullValue(llvm::FixedVectorType::get(b_.getInt32Ty(), 4)),
               smem(b_.getInt8Ty(), b_.getInt32(0), off_z), "dot (mma) zero row", DType::i32);
  if (!zero_acc && !direct)
    stage(op.operands[2], ls[2], 1, 4, DType::f32, [&](const auto& c) { return at(base_c, sc, c[0], bytes(c[1], 4)); },
          "dot (mma) accumulator write");
  if ((async_a && !pipe_a) || (async_b && !pipe_b)) { // one group, waited for at once: the copies land before the barrier
    hooks_.cp_async_commit(b_);
    hooks_.cp_async_wait(b_, 0);
  }
  barrier();
  const int64_t tiles_n = Np / 8, W = opts_.num_warps;
  llvm::Value* g = b_.CreateLShr(lane_, 2);
  llvm::Value* t2 = b_.CreateShl(b_.CreateAnd(lane_, 3), 1); // 2t
  // A row, B row (n) or k index `v` past `limit`: clamped to 0 for the address, and the value
  // replaced by zero (null when the padding cannot reach it).
  // `always`: the index is past the limit in every lane (rows g + 8 when M <= 8, k pairs
  // 2t + 8 when K <= 8): the constant true, and those fragments never touch memory.
  auto past = [&](llvm::Value* v, int64_t limit, int64_t padded, bool always = false) -> llvm::Value* {
    if (always) return b_.getTrue();
    return padded > limit ? b_.CreateICmpUGE(v, b_.getInt32(uint32_t(limit))) : nullptr;
  };
  auto is_true = [](llvm::Value* p) {
    auto* c = llvm::dyn_cast_or_null<llvm::ConstantInt>(p);
    return c && c->isOne();
  };
  auto clamp = [&](llvm::Value* v, llvm::Value* out) { return out ? b_.CreateSelect(out, b_.getInt32(0), v) : v; };
  auto either = [&](llvm::Value* x, llvm::Value* y) { return x && y ? b_.CreateOr(x, y) : x ? x : y; };
  auto zero_if = [&](llvm::Value* v, llvm::Value* out) {
    return out ? b_.CreateSelect(out, llvm::Constant::getNullValue(v->getType()), v) : v;
  };
  // A fragment register without ldmatrix: elements (k, k + 1) at ptr(k), ptr(k + 1), one 32-bit
  // load when k-major, else two 16-bit ones; zero where `out` holds.
  auto frag_word = [&](bool kmajor, const std::function<llvm::Value*(llvm::Value*)>& ptr, llvm::Value* k,
                       llvm::Value* out, const char* what) -> llvm::Value* {
    if (is_true(out)) return b_.getInt32(0);
    llvm::Value* v;
    if (kmajor) {
      v = smem_load(b_.getInt32Ty(), ptr(k), what);
    } else {
      llvm::Type* h = hooks_.half_type(c_, dt);
      llvm::Value* lo = b_.CreateBitCast(smem_load(h, ptr(k), what), b_.getInt16Ty());
      llvm::Value* hi = b_.CreateBitCast(smem_load(h, ptr(b_.CreateAdd(k, b_.getInt32(1))), what), b_.getInt16Ty());
      v = b_.CreateOr(b_.CreateZExt(lo, b_.getInt32Ty()), b_.CreateShl(b_.CreateZExt(hi, b_.getInt32Ty()), 16));
    }
    return zero_if(v, out);
  };
  // Operands whose stored rows hold at least 8 elements (16 bytes) load their fragments with
  // ldmatrix, one instruction for up to four 8x8 matrices (.trans for the operands stored
  // along M or N); the others with 32-bit loads (k-major) or pairs of 16-bit loads.
  const bool a_ldm = a_kmajor ? K >= 8 : M >= 8 && K >= 8;
  const bool b_ldm = b_kmajor ? K >= 8 : N >= 8 && K >= 8;
  llvm::Value* mi = b_.CreateLShr(lane_, 3); // the matrix whose row this lane addresses
  llvm::Value* mr = b_.CreateAnd(lane_, 7);  // and the row
  // One ldmatrix of the matrices `mats` ((row, col) offsets of each 8x8 block in the
  // operand's [m or n][k] coordinates); `addr(mn, k)` addresses an element. Returns a register
  // per matrix.
  auto ldm = [&](const std::vector<std::pair<int64_t, int64_t>>& mats, bool kmajor, llvm::Value* mn0, llvm::Value* k0,
                 int64_t mn_limit, const std::function<llvm::Value*(llvm::Value*, llvm::Value*)>& addr,
                 const char* what, bool wrap_rows = false) {
    int count = mats.size() == 3 ? 4 : int(mats.size());
    llvm::Value* q = count > 1 ? b_.CreateAnd(mi, uint64_t(count - 1)) : b_.getInt32(0);
    llvm::Value* dmn = b_.getInt32(uint32_t(mats[0].first)), *dk = b_.getInt32(uint32_t(mats[0].second));
    for (size_t i = 1; i < mats.size(); ++i) {
      llvm::Value* is = b_.CreateICmpUGE(q, b_.getInt32(uint32_t(i)));
      dmn = b_.CreateSelect(is, b_.getInt32(uint32_t(mats[i].first)), dmn);
      dk = b_.CreateSelect(is, b_.getInt32(uint32_t(mats[i].second)), dk);
    }
    llvm::Value* p;
    if (kmajor) { // stored rows are m (or n): this lane's row, or the zero row past the tile
      llvm::Value* row = b_.CreateAdd(b_.CreateAdd(mn0, dmn), mr);
      p = addr(row, b_.CreateAdd(k0, dk));
      if (mn_limit < 8 && wrap_rows) // rows past M repeat rows mod M (the result's replicas)
        p = addr(b_.CreateAnd(row, b_.getInt32(uint32_t(mn_limit - 1))), b_.CreateAdd(k0, dk));
      else if (mn_limit < 8)
        p = b_.CreateSelect(b_.CreateICmpUGE(row, b_.getInt32(uint32_t(mn_limit))),
                            smem(b_.getInt8Ty(), b_.getInt32(0), off_z), p);
    } else { // stored rows are k
      p = addr(b_.CreateAdd(mn0, dmn), b_.CreateAdd(b_.CreateAdd(k0, dk), mr));
    }
    std::vector<llvm::Value*> regs = hooks_.ldmatrix(b_, p, count, !kmajor, site(what));
    regs.resize(mats.size());
    return regs;
  };
  // A's fragment registers for row tile m0 at k step kk (zeros where the padding is).
  auto load_a = [&](llvm::Value* m0, llvm::Value* kk) {
    std::array<llvm::Value*, 4> r;
    std::vector<int> need;
    for (int i = 0; i < 4; ++i) {
      r[size_t(i)] = b_.getInt32(0);
      if (!((i & 1) && M <= 8) && !((i & 2) && K <= 8)) need.push_back(i);
    }
    if (a_ldm) {
      std::vector<std::pair<int64_t, int64_t>> mats;
      for (int i : need) mats.push_back({(i & 1) * 8, (i >> 1) * 8});
      // Rows past M read zeros, or (direct) repeat rows mod M.
      auto v = ldm(mats, a_kmajor, m0, kk, M, a_at, "dot (mma) operand A read", direct);
      for (size_t j = 0; j < need.size(); ++j) r[size_t(need[j])] = v[j];
      return r;
    }
    llvm::Value* row_out = M < 8 && !direct ? b_.CreateICmpUGE(g, b_.getInt32(uint32_t(M))) : nullptr; // rows g >= M
    for (int i : need) {
      llvm::Value* row = b_.CreateAdd(b_.CreateAdd(m0, g), b_.getInt32(uint32_t((i & 1) * 8)));
      if (direct && M < 8) row = b_.CreateAnd(row, b_.getInt32(uint32_t(M - 1))); // replicas of rows mod M
      llvm::Value* k = b_.CreateAdd(b_.CreateAdd(kk, t2), b_.getInt32(uint32_t((i >> 1) * 8)));
      llvm::Value* k_out = K < 16 ? b_.CreateICmpUGE(k, b_.getInt32(uint32_t(K))) : nullptr;
      r[size_t(i)] = frag_word(a_kmajor, [&](llvm::Value* kx) { return a_at(clamp(row, row_out), kx); }, clamp(k, k_out),
                               either(row_out, k_out), "dot (mma) operand A read");
    }
    return r;
  };
  // B's fragment registers for `ntiles` adjacent column tiles from n0 at k step kk.
  auto load_b = [&](llvm::Value* n0, llvm::Value* kk, int ntiles, int64_t tile_stride = 8) {
    std::vector<llvm::Value*> r(size_t(2 * ntiles), b_.getInt32(0));
    std::vector<int> need; // 2 q + h: tile q, k half h
    for (int i = 0; i < 2 * ntiles; ++i)
      if (!((i & 1) && K <= 8)) need.push_back(i);
    if (b_ldm) {
      std::vector<std::pair<int64_t, int64_t>> mats;
      for (int i : need) mats.push_back({(i >> 1) * tile_stride, (i & 1) * 8});
      auto v = ldm(mats, b_kmajor, n0, kk, N, [&](llvm::Value* n, llvm::Value* k) { return b_at(k, n); },
                   "dot (mma) operand B read");
      for (size_t j = 0; j < need.size(); ++j) r[size_t(need[j])] = v[j]; // columns past N read zeros
      return r;
    }
    llvm::Value* n_out = N < 8 ? b_.CreateICmpUGE(g, b_.getInt32(uint32_t(N))) : nullptr; // columns g >= N
    for (int i : need) {
      llvm::Value* n = b_.CreateAdd(b_.CreateAdd(n0, g), b_.getInt32(uint32_t((i >> 1) * tile_stride)));
      llvm::Value* k = b_.CreateAdd(b_.CreateAdd(kk, t2), b_.getInt32(uint32_t((i & 1) * 8)));
      llvm::Value* k_out = K < 16 ? b_.CreateICmpUGE(k, b_.getInt32(uint32_t(K))) : nullptr;
      r[size_t(i)] = frag_word(b_kmajor, [&](llvm::Value* kx) { return b_at(kx, clamp(n, n_out)); }, clamp(k, k_out),
                               either(n_out, k_out), "dot (mma) operand B read");
    }
    return r;
  };
  // Which tiles a warp computes. With at least as many 8-column tiles as warps, warp w takes
  // columns [w cpw, (w + 1) cpw) of every row tile, two adjacent ones at a time (one B
  // ldmatrix serves both); otherwise W / tiles_n warps share a column and take every
  // (W / tiles_n)-th row tile.
  if (direct) {
    // Warp w computes the 8-column tiles w, w + W, ... of every row tile, two at a time (one B
    // ldmatrix serves both): exactly the elements mma_layout gives its lanes. A thread's
    // element at offset (8 pm, 8 W pn + e) from its base is row tile pm / 2, fragment
    // register 2 (pm % 2) + e of its pn-th column tile; below 16 rows only pm = 0 exists.
    const ThreadElems& te = elems_of(ls[2], res->type.shape);
    std::map<std::array<int64_t, 3>, size_t> elem;
    for (size_t j = 0; j < size_t(te.count); ++j)
      elem[{te.offset[j][0] / 8, te.offset[j][1] / (8 * W), te.offset[j][1] % 2}] = j;
    internal_assert(int64_t(elem.size()) == te.count, "the MMA layout's elements map to fragments");
    const Elems* acc = zero_acc ? nullptr : &get(op.operands[2], ls[2]);
    Elems out(size_t(te.count), nullptr);
    const int64_t tpw = tiles_n / W; // column tiles per warp
    llvm::Value* nw = b_.CreateMul(warp_, b_.getInt32(8));
    for (int64_t tm = 0; tm < Mp / 16; ++tm)
      for (int64_t j = 0; j < tpw; j += 2) {
        const int nt = int(std::min<int64_t>(2, tpw - j));
        llvm::Value* n0 = b_.CreateAdd(nw, b_.getInt32(uint32_t(j * 8 * W)));
        auto slot = [&](int q, int r) -> const size_t* {
          auto it = elem.find({tm * 2 + r / 2, j + q, r % 2});
          return it == elem.end() ? nullptr : &it->second;
        };
        Elems c;
        for (int q = 0; q < nt; ++q)
          for (int r = 0; r < 4; ++r) {
            const size_t* s = slot(q, r);
            c.push_back(acc && s ? (*acc)[*s] : llvm::ConstantFP::get(b_.getFloatTy(), 0.0));
          }
        Elems d = k_loop("mma", Kp, 16, c, [&](llvm::Value* kk, const Elems& cur) {
          std::array<llvm::Value*, 4> af = load_a(b_.getInt32(uint32_t(tm * 16)), kk);
          std::vector<llvm::Value*> bfs = load_b(n0, kk, nt, 8 * W);
          Elems next;
          for (int q = 0; q < nt; ++q) {
            std::array<llvm::Value*, 4> cin;
            for (int r = 0; r < 4; ++r) cin[size_t(r)] = cur[size_t(4 * q + r)];
            auto dq = hooks_.mma_m16n8k16(b_, dt, af, {bfs[size_t(2 * q)], bfs[size_t(2 * q + 1)]}, cin);
            next.insert(next.end(), dq.begin(), dq.end());
          }
          return next;
        });
        for (int q = 0; q < nt; ++q)
          for (int r = 0; r < 4; ++r)
            if (const size_t* s = slot(q, r)) out[*s] = d[size_t(4 * q + r)];
      }
    for (llvm::Value* v : out) internal_assert(v != nullptr, "every element of the MMA layout is computed");
    if (pipe_a || pipe_b) pipe_read_unfenced_ = true; // no barrier of its own follows the reads
    smem_dirty_ = true;
    define(res, ls[2], std::move(out));
    return;
  }
  struct Group {
    llvm::Value *m0, *n0;
    int ntiles;
    llvm::Value* active; // null: every warp has this group
  };
  std::vector<Group> groups;
  const int64_t tiles_m = Mp / 16;
  if (tiles_n >= W) {
    const int64_t cpw = tiles_n / W;
    llvm::Value* nb = b_.CreateMul(warp_, b_.getInt32(uint32_t(cpw * 8)));
    for (int64_t tm = 0; tm < tiles_m; ++tm)
      for (int64_t j = 0; j < cpw; j += 2)
        groups.push_back({b_.getInt32(uint32_t(tm * 16)), b_.CreateAdd(nb, b_.getInt32(uint32_t(j * 8))),
                          int(std::min<int64_t>(2, cpw - j)), nullptr});
  } else {
    const int64_t w2 = W / tiles_n;
    llvm::Value* n0 = b_.CreateMul(b_.CreateURem(warp_, b_.getInt32(uint32_t(tiles_n))), b_.getInt32(8));
    llvm::Value* mb = b_.CreateUDiv(warp_, b_.getInt32(uint32_t(tiles_n)));
    for (int64_t i = 0; i * w2 < tiles_m; ++i) {
      llvm::Value* tm = b_.CreateAdd(mb, b_.getInt32(uint32_t(i * w2)));
      llvm::Value* active = (i + 1) * w2 <= tiles_m ? nullptr : b_.CreateICmpULT(tm, b_.getInt32(uint32_t(tiles_m)));
      groups.push_back({b_.CreateMul(tm, b_.getInt32(16)), n0, 1, active});
    }
  }
  for (const Group& gr : groups) {
    auto body = [&]() -> llvm::Value* {
      llvm::Value* row0 = b_.CreateAdd(gr.m0, g);
      llvm::Value* row1 = b_.CreateAdd(row0, b_.getInt32(8));
      llvm::Value* out_r0 = past(row0, M, Mp);
      llvm::Value* out_r1 = past(row1, M, Mp, M <= 8);
      llvm::Value* r0 = clamp(row0, out_r0);
      llvm::Value* r1 = clamp(row1, out_r1);
      // Per tile: this lane's accumulator elements, (row0 | row1) x (2t, 2t + 1).
      std::vector<std::array<llvm::Value*, 4>> cptr(size_t(gr.ntiles)), c_out(size_t(gr.ntiles));
      std::vector<llvm::Value*> c;
      for (int q = 0; q < gr.ntiles; ++q) {
        llvm::Value* ccol = b_.CreateAdd(b_.CreateAdd(gr.n0, b_.getInt32(uint32_t(8 * q))), t2);
        llvm::Value* out_c = past(ccol, N, Np);
        llvm::Value* cb = bytes(clamp(ccol, out_c), 4);
        cptr[size_t(q)] = {at(base_c, sc, r0, cb), at(base_c, sc, r0, b_.CreateAdd(cb, b_.getInt32(4))),
                           at(base_c, sc, r1, cb), at(base_c, sc, r1, b_.CreateAdd(cb, b_.getInt32(4)))};
        // Element (row, 2t) is past N exactly when out_c; (row, 2t + 1) too unless N == 1.
        llvm::Value* out_c1 = N == 1 ? b_.getTrue() : out_c;
        c_out[size_t(q)] = {either(out_r0, out_c), either(out_r0, out_c1), either(out_r1, out_c),
                            either(out_r1, out_c1)};
        // A lane's accumulator elements past M or N are zero and never touch memory: clamped
        // to an element another lane writes back after the MMA, a read would race with it.
        for (int r = 0; r < 4; ++r) {
          if (zero_acc || is_true(c_out[size_t(q)][size_t(r)])) {
            c.push_back(llvm::ConstantFP::get(b_.getFloatTy(), 0.0));
            continue;
          }
          llvm::Value* keep = c_out[size_t(q)][size_t(r)] ? b_.CreateNot(c_out[size_t(q)][size_t(r)]) : nullptr;
          c.push_back(guarded(b_, keep, [&]() -> llvm::Value* {
            return smem_load(b_.getFloatTy(), cptr[size_t(q)][size_t(r)], "dot (mma) accumulator read");
          }));
        }
      }
      Elems d = k_loop("mma", Kp, 16, c, [&](llvm::Value* kk, const Elems& acc) {
        std::array<llvm::Value*, 4> af = load_a(gr.m0, kk);
        std::vector<llvm::Value*> bfs = load_b(gr.n0, kk, gr.ntiles);
        Elems next;
        for (int q = 0; q < gr.ntiles; ++q) {
          std::array<llvm::Value*, 4> cin;
          for (int r = 0; r < 4; ++r) cin[size_t(r)] = acc[size_t(4 * q + r)];
          auto dq = hooks_.mma_m16n8k16(b_, dt, af, {bfs[size_t(2 * q)], bfs[size_t(2 * q + 1)]}, cin);
          next.insert(next.end(), dq.begin(), dq.end());
        }
        return next;
      });
      for (int q = 0; q < gr.ntiles; ++q) {
        if (zero_acc) { // the padded result area: (row0 | row1) x (2t, 2t + 1), a pair at a time
          llvm::Value* col = bytes(b_.CreateAdd(b_.CreateAdd(gr.n0, b_.getInt32(uint32_t(8 * q))), t2), 4);
          auto* v2 = llvm::FixedVectorType::get(b_.getFloatTy(), 2);
          for (int h = 0; h < 2; ++h) {
            if (h == 1 && M <= 8) continue; // rows g + 8: padding no one reads
            llvm::Value* v = llvm::PoisonValue::get(v2);
            v = b_.CreateInsertElement(v, d[size_t(4 * q + 2 * h)], uint64_t(0));
            v = b_.CreateInsertElement(v, d[size_t(4 * q + 2 * h + 1)], uint64_t(1));
            smem_store(v, at(base_c, scp, h ? row1 : row0, col), "dot (mma) result write", DType::f32);
          }
          continue;
        }
        for (int r = 0; r < 4; ++r) {
          llvm::Value* out = c_out[size_t(q)][size_t(r)];
          if (is_true(out)) continue;
          guarded(b_, out ? b_.CreateNot(out) : nullptr, [&]() -> llvm::Value* {
            smem_store(d[size_t(4 * q + r)], cptr[size_t(q)][size_t(r)], "dot (mma) result write", DType::f32);
            return nullptr;
          });
        }
      }
      return nullptr;
    };
    if (gr.active) guarded(b_, gr.active, body); // warp-uniform
    else body();
  }
  if (pipe_a || pipe_b) pipe_read_unfenced_ = true; // until the barrier: the buffer may not be refilled
  barrier();
  Elems out = load_runs(b_.getFloatTy(), ls[2], res->type.shape, 1, 4, [&](size_t j) {
    auto c = coord_of(ls[2], res->type.shape, j);
    return at(base_c, zero_acc ? scp : sc, c[0], bytes(c[1], 4));
  }, "dot (mma) result read");
  smem_dirty_ = true;
  define(res, ls[2], std::move(out));
}

// dot on CUDA cores: A (transposed) and B staged in shared memory, then each
// thread runs the K loop with FMAs into its f32 accumulators.
void Lowering::emit_dot(const Op& op) {
  if (mma_eligible(op)) return emit_dot_mma(op);
  const Value* a = op.operands[0];
  const Value* bv = op.operands[1];
  const Value* res = op.results[0];
  std::vector<LayoutId> ls = plan_.op_layouts(&op);
  int64_t m = a->type.shape[0], k = a->type.shape[1], n = bv->type.shape[1];
  const ir::ElemType e = a->type.elem;
  llvm::Type* ty = mem_type(e);
  int eb = mem_bytes(e);
  constexpr int64_t kPad = 4;
  int64_t sa = m + kPad, sb = n + kPad;
  int64_t off_b = (k * sa * eb + 15) / 16 * 16;
  need_smem(off_b + k * sb * eb);
  before_smem_write();
  // Vector accesses of up to 16 bytes, and no wider than the row strides keep aligned.
  const int64_t cap_a = std::min<int64_t>(16 / eb, sa & -sa), cap_b = std::min<int64_t>(16 / eb, sb & -sb);
  {
    const ir::Shape& sha = a->type.shape;
    store_runs(get(a, ls[0]), ls[0], sha, 0, int(16 / cap_a), e.dtype, [&](size_t j) {
      auto c = coord_of(ls[0], sha, j);
      return smem(ty, b_.CreateAdd(b_.CreateMul(c[1], b_.getInt32(static_cast<uint32_t>(sa))), c[0]));
    }, "dot operand A write");
    const ir::Shape& shb = bv->type.shape;
    store_runs(get(bv, ls[1]), ls[1], shb, 1, int(16 / cap_b), bv->type.elem.dtype, [&](size_t j) {
      auto c = coord_of(ls[1], shb, j);
      return smem(ty, b_.CreateAdd(b_.CreateMul(c[0], b_.getInt32(static_cast<uint32_t>(sb))), c[1]), off_b);
    }, "dot operand B write");
  }
  barrier();
  const ir::Shape& rs = res->type.shape;
  const ThreadElems& td = elems_of(ls[2], rs);
  auto cd = coords(ls[2], rs);
  Elems init = get(op.operands[2], ls[2]);
  std::map<int64_t, size_t> rows, cols;
  std::vector<llvm::Value*> row_coord, col_coord;
  std::vector<std::pair<size_t, size_t>> rc(td.count);
  for (int64_t j = 0; j < td.count; ++j) {
    auto [ri, rnew] = rows.try_emplace(td.offset[j][0], row_coord.size());
    if (rnew) row_coord.push_back(cd[j][0]);
    auto [ci, cnew] = cols.try_emplace(td.offset[j][1], col_coord.size());
    if (cnew) col_coord.push_back(cd[j][1]);
    rc[j] = {ri->second, ci->second};
  }
  // The thread's rows (columns) in groups of consecutive ones, one vector load per group and k:
  // (offset of the first, count), each count a power of two of at most `cap` dividing the first
  // offset (the thread's first row is a multiple of its rows per block, so the group is aligned).
  auto groups = [](const std::map<int64_t, size_t>& offs, int64_t cap) {
    std::vector<std::pair<int64_t, int64_t>> g;
    for (auto it = offs.begin(); it != offs.end();) {
      int64_t o = it->first, n = cap;
      auto consecutive = [&](int64_t len) {
        if (o % len != 0) return false;
        for (int64_t q = 1; q < len; ++q)
          if (!offs.count(o + q)) return false;
        return true;
      };
      while (n > 1 && !consecutive(n)) n /= 2;
      g.push_back({o, n});
      std::advance(it, n);
    }
    return g;
  };
  const auto row_groups = groups(rows, cap_a), col_groups = groups(cols, cap_b);
  // Loads group by group into per-row (per-column) values, as f32.
  auto load_groups = [&](const std::vector<std::pair<int64_t, int64_t>>& gs, const std::map<int64_t, size_t>& index,
                         const std::vector<llvm::Value*>& coord, llvm::Value* k_off, int64_t byte_off,
                         const char* what) {
    std::vector<llvm::Value*> vals(coord.size());
    for (auto [o, n] : gs) {
      llvm::Value* at = smem(ty, b_.CreateAdd(k_off, coord[index.at(o)]), byte_off);
      llvm::Value* x = smem_load(n > 1 ? llvm::FixedVectorType::get(ty, unsigned(n)) : ty, at, what);
      for (int64_t q = 0; q < n; ++q)
        vals[index.at(o + q)] = to_f32(n > 1 ? b_.CreateExtractElement(x, uint64_t(q)) : x, e.dtype);
    }
    return vals;
  };
  Elems out = k_loop("dot", k, 1, init, [&](llvm::Value* kk, const Elems& acc) {
    llvm::Value* ka = b_.CreateMul(kk, b_.getInt32(static_cast<uint32_t>(sa)));
    llvm::Value* kb = b_.CreateMul(kk, b_.getInt32(static_cast<uint32_t>(sb)));
    std::vector<llvm::Value*> av = load_groups(row_groups, rows, row_coord, ka, 0, "dot operand A read");
    std::vector<llvm::Value*> bvv = load_groups(col_groups, cols, col_coord, kb, off_b, "dot operand B read");
    Elems next(td.count);
    for (int64_t j = 0; j < td.count; ++j)
      next[j] = b_.CreateIntrinsic(llvm::Intrinsic::fmuladd, {b_.getFloatTy()},
                                   {av[rc[j].first], bvv[rc[j].second], acc[size_t(j)]});
    return next;
  });
  smem_dirty_ = true;
  define(res, ls[2], std::move(out));
}

void Lowering::emit_for(const Op& op) {
  if (op.attrs.num_stages > 1) ++stats_.staged_loops;
  const ir::Block& body = op.region(0);
  llvm::Value* lb = get(op.operands[0], kScalar)[0];
  llvm::Value* ub = get(op.operands[1], kScalar)[0];
  llvm::Value* step = get(op.operands[2], kScalar)[0];
  size_t n = op.results.size();
  std::vector<LayoutId> cl(n);
  std::vector<Elems> init(n);
  for (size_t i = 0; i < n; ++i) {
    cl[i] = op.results[i]->type.is_scalar() ? kScalar : plan_.native(op.results[i]);
    init[i] = get(op.operands[3 + i], cl[i]);
  }
  // A pipelined loop first issues the copies of its first stages - 1 iterations, one group
  // each, into buffers 0, 1, ... (after a barrier if an earlier loop's dots may still read them).
  auto pit = pipelines_.find(&op);
  Pipeline* pl = pit == pipelines_.end() ? nullptr : &pit->second;
  const int64_t S = pl ? pl->stages : 1;
  if (pl) {
    before_smem_write();
    for (int64_t s = 0; s + 1 < S; ++s)
      issue_ahead(*pl, b_.CreateAdd(lb, b_.CreateMul(step, llvm::ConstantInt::get(lb->getType(), uint64_t(s)))),
                  b_.getInt32(uint32_t(s)), false);
  }
  llvm::BasicBlock* pre = b_.GetInsertBlock();
  llvm::BasicBlock* header = llvm::BasicBlock::Create(c_, "for.header", kernel_);
  llvm::BasicBlock* body_bb = llvm::BasicBlock::Create(c_, "for.body", kernel_);
  llvm::BasicBlock* exit = llvm::BasicBlock::Create(c_, "for.end", kernel_);
  b_.CreateBr(header);
  b_.SetInsertPoint(header);
  llvm::PHINode* iv = b_.CreatePHI(lb->getType(), 2, "iv");
  iv->addIncoming(lb, pre);
  llvm::PHINode* stage = nullptr; // the buffer this iteration reads: its count modulo S
  if (pl) {
    stage = b_.CreatePHI(b_.getInt32Ty(), 2, "stage");
    stage->addIncoming(b_.getInt32(0), pre);
  }
  std::vector<std::vector<llvm::PHINode*>> phis(n);
  for (size_t i = 0; i < n; ++i)
    for (llvm::Value* v : init[i]) {
      phis[i].push_back(b_.CreatePHI(v->getType(), 2));
      phis[i].back()->addIncoming(v, pre);
    }
  b_.CreateCondBr(b_.CreateICmpSLT(iv, ub), body_bb, exit);
  b_.SetInsertPoint(body_bb);
  smem_dirty_ = true; // an earlier trip may still be reading shared memory
  if (pl) {
    // This iteration's group has landed once at most the S - 2 newer ones are pending; the
    // barrier before its dot's first read shows it to every thread. Then the copies of
    // iteration + S - 1 go into the buffer the previous iteration read (every read of it was
    // followed by a barrier: pipe_read_unfenced_).
    hooks_.cp_async_wait(b_, int(S - 2));
    llvm::Value* fill = b_.CreateSelect(b_.CreateICmpEQ(stage, b_.getInt32(0)), b_.getInt32(uint32_t(S - 1)),
                                        b_.CreateSub(stage, b_.getInt32(1)));
    issue_ahead(*pl, b_.CreateAdd(iv, b_.CreateMul(step, llvm::ConstantInt::get(lb->getType(), uint64_t(S - 1)))),
                fill, true);
    pl->read_stage = stage;
  }
  vals_[{body.args[0], kScalar}] = {iv};
  for (size_t i = 0; i < n; ++i) define(body.args[i + 1], cl[i], Elems(phis[i].begin(), phis[i].end()));
  // A barrier in the body fences nothing when the loop runs no trip: after the loop, a pipeline
  // buffer is read unfenced if it was before or is at the end of the body.
  const bool unfenced_before = pipe_read_unfenced_;
  emit_block(body);
  if (pipe_read_unfenced_) barrier();
  std::vector<Elems> next = yielded_;
  llvm::BasicBlock* latch = b_.GetInsertBlock();
  iv->addIncoming(b_.CreateAdd(iv, step), latch);
  if (pl) {
    llvm::Value* s1 = b_.CreateAdd(stage, b_.getInt32(1));
    stage->addIncoming(b_.CreateSelect(b_.CreateICmpEQ(s1, b_.getInt32(uint32_t(S))), b_.getInt32(0), s1), latch);
  }
  for (size_t i = 0; i < n; ++i)
    for (size_t j = 0; j < phis[i].size(); ++j) phis[i][j]->addIncoming(next[i][j], latch);
  b_.CreateBr(header);
  b_.SetInsertPoint(exit);
  smem_dirty_ = true;
  pipe_read_unfenced_ = pipe_read_unfenced_ || unfenced_before;
  if (pl) hooks_.cp_async_wait(b_, 0); // the copies issued past the end (all masked off)
  for (size_t i = 0; i < n; ++i) define(op.results[i], cl[i], Elems(phis[i].begin(), phis[i].end()));
}

void Lowering::emit_if(const Op& op) {
  llvm::Value* cond = get(op.operands[0], kScalar)[0];
  llvm::BasicBlock* then_bb = llvm::BasicBlock::Create(c_, "if.then", kernel_);
  llvm::BasicBlock* else_bb = llvm::BasicBlock::Create(c_, "if.else", kernel_);
  llvm::BasicBlock* merge = llvm::BasicBlock::Create(c_, "if.end", kernel_);
  b_.CreateCondBr(cond, then_bb, else_bb);
  // What a barrier in one branch fenced, the other branch may not have: after the if, shared
  // memory is dirty, or a pipeline buffer read unfenced, if either is so at the end of either.
  bool dirty = smem_dirty_, unfenced = pipe_read_unfenced_;
  std::vector<Elems> out[2];
  llvm::BasicBlock* ends[2];
  bool dirty_after = false, unfenced_after = false;
  llvm::BasicBlock* starts[2] = {then_bb, else_bb};
  for (int r = 0; r < 2; ++r) {
    b_.SetInsertPoint(starts[r]);
    smem_dirty_ = dirty;
    pipe_read_unfenced_ = unfenced;
    emit_block(op.region(r));
    out[r] = yielded_;
    ends[r] = b_.GetInsertBlock();
    b_.CreateBr(merge);
    dirty_after = dirty_after || smem_dirty_;
    unfenced_after = unfenced_after || pipe_read_unfenced_;
  }
  b_.SetInsertPoint(merge);
  smem_dirty_ = dirty_after;
  pipe_read_unfenced_ = unfenced_after;
  // Every phi first: defining a result may convert it to other layouts, which emits code.
  std::vector<Elems> vals(op.results.size());
  for (size_t i = 0; i < op.results.size(); ++i)
    for (size_t j = 0; j < out[0][i].size(); ++j) {
      llvm::PHINode* phi = b_.CreatePHI(out[0][i][j]->getType(), 2);
      phi->addIncoming(out[0][i][j], ends[0]);
      phi->addIncoming(out[1][i][j], ends[1]);
      vals[i].push_back(phi);
    }
  for (size_t i = 0; i < op.results.size(); ++i) {
    const Value* res = op.results[i];
    define(res, res->type.is_scalar() ? kScalar : plan_.native(res), std::move(vals[i]));
  }
}

// A reshape that moves elements: through shared memory, by row-major index.
void Lowering::emit_reshape(const Op& op) {
  const Value* src = op.operands[0];
  const Value* res = op.results[0];
  LayoutId from = src->type.is_scalar() ? kScalar : plan_.op_layouts(&op)[0];
  LayoutId to = plan_.native(res);
  const ir::ElemType e = res->type.elem;
  llvm::Type* ty = mem_type(e);
  ++stats_.conversions;
  int64_t n = ir::num_elements(res->type.shape);
  need_smem(n * mem_bytes(e));
  before_smem_write();
  const Elems& in = get(src, from);
  auto cf = coords(from, src->type.shape);
  for (size_t j = 0; j < in.size(); ++j)
    smem_store(to_mem(in[j], e), smem(ty, linear_index(cf[j], src->type.shape)), "reshape write", e.dtype);
  barrier();
  Elems r;
  for (auto& c : coords(to, res->type.shape))
    r.push_back(from_mem(smem_load(ty, smem(ty, linear_index(c, res->type.shape)), "reshape read"), e));
  smem_dirty_ = true;
  define(res, to, std::move(r));
}

LoweringStats lower_kernel_impl(const ir::Function& fn, const CompileOptions& opts, TargetHooks& hooks,
                                llvm::Module& m) {
  Lowering l(fn, opts, hooks, m);
  return l.run();
}

} // namespace

LoweringStats lower_kernel(const ir::Function& fn, const CompileOptions& opts, TargetHooks& hooks,
                           llvm::Module& m) {
  return lower_kernel_impl(fn, opts, hooks, m);
}

} // namespace tilec::codegen
