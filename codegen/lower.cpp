// The SIMT lowering: one program = one thread block of num_warps * 32 threads;
// every tile value becomes, per thread, the list of elements its layout gives
// that thread (docs/ARCHITECTURE.md). One handler per op; elementwise ops share one
// element loop and the trivial ones are table rows. The Lowering class (codegen/lowering.h)
// is defined across codegen/lower*.cpp by op family; this file holds the driver, types and
// constants, layouts at run time, values and their layout conversions, shared memory, and
// control flow.
#include "codegen/lower.h"

#include <fmt/format.h>

#include "abi/float16.h"
#include "abi/float8.h"
#include "abi/limits.h"
#include "codegen/lowering.h"
#include "ir/op_rules.h"

namespace tilec::codegen::detail {

namespace {

// The last dim of a tile longer than 1 (0 if none): the one along which row-major indices of
// neighbouring elements are consecutive.
int row_major_fast_dim(const ir::Shape& s) {
  for (int d = int(s.size()) - 1; d > 0; --d)
    if (s[size_t(d)] > 1) return d;
  return 0;
}

} // namespace

LoweringStats Lowering::run() {
  const int threads = block_threads();
  stats_.threads_per_block = threads;
  std::vector<llvm::Type*> params;
  for (const Value* p : fn_.params) {
    if (!p->type.is_scalar())
      throw UserError(fmt::format("kernel {}: parameter {} is a tile ({}); parameters must be scalars or pointers",
                                  fn_.name, p->name, p->type.str()));
    params.push_back(mem_type(p->type.elem));
  }
  kernel_ = hooks_.create_kernel(m_, fn_.name, params, threads, int(pipes_.tensor_maps().size()));
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
  tensor_maps_.assign(args.begin() + std::ptrdiff_t(fn_.params.size()), args.end());
  // What the launch encodes for each: the parameters' names, or numbers.
  for (const TensorMapPlan& t : pipes_.tensor_maps()) {
    auto spec = [](const Value* v) -> rt::SpecValue {
      if (v->def) return v->def->attrs.value.i; // a constant (tma_unfit)
      return v->name;
    };
    rt::ModuleTensorMap mt;
    mt.base = t.base->name;
    for (const Value* v : t.sizes) mt.sizes.push_back(spec(v));
    for (const Value* v : t.strides) mt.strides.push_back(spec(v));
    mt.box = t.box;
    mt.swizzle = t.swizzle;
    stats_.tensor_maps.push_back(std::move(mt));
  }
  for (const AsyncOperand& x : pipes_.async_operands()) stats_.tma_loads += x.tma();
  tid_ = hooks_.thread_id(pb_);
  lane_ = pb_.CreateAnd(tid_, 31, "lane");
  warp_ = pb_.CreateLShr(tid_, 5, "warp");
  read_stage_.assign(pipes_.pipelines().size(), nullptr);
  need_smem(0); // the pipelines' buffers
  init_mbarriers();
  emit_block(fn_.body);
  for (const Pipeline& pl : pipes_.pipelines()) {
    ++stats_.pipelined_loops;
    stats_.pipeline_stages = std::max<int>(stats_.pipeline_stages, int(pl.stages));
    stats_.pipeline_stage_bytes = std::max<int>(stats_.pipeline_stage_bytes, int(pl.stage_bytes));
    stats_.pipeline_late_bytes = std::max<int>(stats_.pipeline_late_bytes, int(pl.late_bytes));
  }
  if (!b_.GetInsertBlock()->getTerminator()) b_.CreateRetVoid();
  pb_.CreateBr(body);
  stats_.shared_bytes = (stats_.shared_bytes + 15) / 16 * 16;
  // The compile's own ceiling replaces both of the kernel's asks.
  // A warp-specialized kernel starts at the register split's launch ceiling (its setmaxnreg
  // counts are checked against it) unless the compile or the kernel asks for less.
  int max_registers = opts_.max_registers ? opts_.max_registers : fn_.max_registers;
  if (pipes_.warp_specialized())
    max_registers = max_registers ? std::min(max_registers, register_split().launch) : register_split().launch;
  hooks_.finish_kernel(m_, kernel_, threads, opts_.max_registers ? 0 : fn_.min_blocks_per_sm, max_registers,
                       stats_.shared_bytes);
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
    if (bl.repeat(d) == 1) {
      llvm::Value* pos = pb_.CreateAdd(pb_.CreateMul(wc, pb_.getInt32(tpw)), lc);
      base.push_back(pb_.CreateMul(pos, pb_.getInt32(bl.size_per_thread[d])));
    } else { // the warp's span holds its lanes' pattern repeat(d) times
      base.push_back(pb_.CreateAdd(pb_.CreateMul(wc, pb_.getInt32(bl.warp_span(d))),
                                   pb_.CreateMul(lc, pb_.getInt32(bl.size_per_thread[d]))));
    }
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

void Lowering::scratch_begin(int64_t bytes, int64_t align) {
  bytes = std::max<int64_t>(16, (bytes + 15) / 16 * 16);
  auto aligned = [&](int64_t at) { return (at + align - 1) / align * align; };
  // The lowest region at or above the floor that nothing touched since the last barrier: the
  // floor or the end of a touched region.
  std::vector<int64_t> starts{aligned(scratch_floor_)};
  for (const Access& t : touched_)
    if (t.space == kScratch && t.hi > scratch_floor_) starts.push_back(aligned(t.hi)); // regions are whole 16 bytes
  std::sort(starts.begin(), starts.end());
  int64_t lo = -1;
  for (int64_t at : starts)
    if (!conflicts_with_touched({kScratch, at, at + bytes, true})) {
      lo = at;
      break;
    }
  // Outside loops, a region that would raise the kernel's shared memory enough to fit fewer
  // blocks on an SM, where the floor would not, waits at a barrier for the floor instead: one
  // barrier costs less than a block of occupancy. (An SM runs at most 32 blocks.)
  auto blocks = [&](int64_t scratch_top) {
    const int64_t total = std::max<int64_t>(stats_.shared_bytes, pipes_.buffer_bytes() + scratch_top);
    return std::min<int64_t>(32, blocks_by_shared_memory(opts_.arch, (total + 15) / 16 * 16));
  };
  const bool grows = lo >= 0 && loops_open_ == 0 && blocks(lo + bytes) < blocks(aligned(scratch_floor_) + bytes);
  // Outside every loop, with no copies in flight, the pipelines' buffers are free once a
  // barrier follows their last reads and copies: a region that would raise the kernel's
  // shared memory (or wait at a barrier anyway) starts at their beginning instead (a loop's
  // loop-invariant operand staged before its copies begin, an epilogue's exchange after them).
  const int64_t in_buffers = -pipes_.buffer_bytes();
  const int64_t top = stats_.shared_bytes - pipes_.buffer_bytes();
  const bool waits = lo < 0 || grows || lo - scratch_floor_ > std::max(kScratchSpread, align);
  if (loops_open_ == 0 && !copies_in_flight_ && in_buffers < 0 && pipes_.buffer_bytes() % align == 0 &&
      (pipes_.mbarrier_count() == 0 || bytes <= pipes_.buffers_end()) &&
      (waits || lo + bytes > top) && !conflicts_with_touched({kScratch, in_buffers, in_buffers + bytes, true})) {
    if (pipe_read_unfenced_ || pipe_written_unfenced_ || pipe_landed_unfenced_) barrier();
    lo = in_buffers;
  } else if (waits) {
    barrier();
    lo = aligned(scratch_floor_);
  }
  region_ = {kScratch, lo, lo + bytes, true};
  need_smem(region_.hi);
  touch(region_);
}

void Lowering::global_access(const Value* ptr, LayoutId l, bool write) {
  const Value* root = ir::root_param(fn_, ptr);
  int space = kAnyBuffer;
  if (root) {
    const size_t i = size_t(std::find(fn_.params.begin(), fn_.params.end(), root) - fn_.params.begin());
    if (i < param_access_.size() && param_access_[i] != ir::ParamAccess::write) return; // read-only
    space = int(i);
  }
  // A thread holds the same elements of the pointer tile for each access in one layout, and
  // alone, unless the layout replicates them (a store writes from one owner, a load reads
  // in every replica) or the pointer is a scalar (stored by one thread, loaded by all).
  bool private_elems = !ptr->type.is_scalar();
  if (private_elems)
    for (bool r : elems_of(l, ptr->type.shape).replicated) private_elems = private_elems && !r;
  const Access a{space, 0, 0, write, private_elems ? ptr : nullptr, l};
  if (conflicts_with_touched(a)) barrier();
  touch(a);
}

Lowering::SyncState Lowering::sync_state() const {
  SyncState s{touched_, pipe_read_unfenced_, pipe_landed_unfenced_, pipe_written_unfenced_, proxy_unfenced_, {}};
  for (const LoopFence& f : loop_fences_) s.loop_fenced.push_back(f.fenced);
  return s;
}

void Lowering::set_sync_state(const SyncState& s) {
  touched_ = s.touched;
  pipe_read_unfenced_ = s.pipe_read;
  pipe_landed_unfenced_ = s.pipe_landed;
  pipe_written_unfenced_ = s.pipe_written;
  proxy_unfenced_ = s.proxy;
  for (size_t i = 0; i < s.loop_fenced.size(); ++i) loop_fences_[i].fenced = s.loop_fenced[i];
}

void Lowering::join_sync(SyncState& s, const SyncState& o) {
  s.touched.insert(s.touched.end(), o.touched.begin(), o.touched.end());
  s.pipe_read = s.pipe_read || o.pipe_read;
  s.pipe_landed = s.pipe_landed || o.pipe_landed;
  s.pipe_written = s.pipe_written || o.pipe_written;
  s.proxy = s.proxy || o.proxy;
  for (size_t i = 0; i < s.loop_fenced.size(); ++i) s.loop_fenced[i] = s.loop_fenced[i] && o.loop_fenced[i];
}

llvm::Value* Lowering::smem_at(llvm::Type* ty, llvm::Value* index, int64_t byte_offset) {
  if (!smem_base_) smem_base_ = hooks_.shared_base(pb_);
  llvm::Value* p = smem_base_;
  byte_offset += pipes_.buffer_bytes();
  internal_assert(pipes_.buffer_bytes() % 16 == 0, "scratch shared memory starts 16-byte aligned");
  if (byte_offset) p = b_.CreateConstGEP1_64(b_.getInt8Ty(), p, byte_offset);
  return b_.CreateGEP(ty, p, index);
}

const Elems& Lowering::get(const Value* v, LayoutId l) {
  if (v->type.is_scalar()) l = kScalar;
  if (!pending_wgmma_.empty() &&
      std::any_of(pending_wgmma_.begin(), pending_wgmma_.end(), [&](const PendingWgmma& p) { return p.res == v; }))
    retire_wgmma(v);
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
  scratch_begin((n + n / 32 + p) * eb);
  auto at = [&](LayoutId l) {
    return [this, l, &s, &padded, ty](size_t j) { return smem(ty, padded(linear_index(coord_of(l, s, j), s))); };
  };
  Elems vals(src.size());
  for (size_t j = 0; j < src.size(); ++j) vals[j] = to_mem(src[j], e);
  store_runs(vals, from, s, dim, vb, e.is_ptr ? DType::i64 : e.dtype, at(from), "layout conversion write");
  barrier();
  Elems r = load_runs(ty, to, s, dim, vb, at(to), "layout conversion read");
  for (auto& x : r) x = from_mem(x, e);
  scratch_end();
  return r;
}

Elems Lowering::share_from_owners(const Elems& src, LayoutId l, const ir::Shape& s,
                                  const ir::ElemType& e, llvm::Value* owner_pred) {
  llvm::Type* ty = mem_type(e);
  int eb = mem_bytes(e);
  scratch_begin((ir::num_elements(s) + 1) * eb);
  DType held = e.is_ptr ? DType::i64 : e.dtype;
  if (l == kScalar) {
    llvm::Value* at = smem(ty, b_.getInt32(0));
    guarded(b_, owner_pred, [&]() -> llvm::Value* {
      smem_store(to_mem(src[0], e), at, "share from owners write", held);
      return nullptr;
    });
    barrier();
    llvm::Value* r = from_mem(smem_load(ty, at, "share from owners read"), e);
    scratch_end();
    return {r};
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
  scratch_end();
  return r;
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
    smem_store(n > 1 ? vector_of(vals, j, n) : vals[j], addr(j), what, held);
  }
}

llvm::Value* Lowering::vector_of(const Elems& vals, size_t j, int n) {
  llvm::Type* et = vals[j]->getType();
  // f16 or bf16 values just rounded from f32 round two at a time, where one instruction does it.
  auto from_f32 = [&](llvm::Value* v) -> llvm::Value* {
    auto* t = llvm::dyn_cast<llvm::FPTruncInst>(v);
    return t && t->getSrcTy()->isFloatTy() ? t->getOperand(0) : nullptr;
  };
  std::vector<llvm::Value*> pairs;
  if (n % 2 == 0 && (et->isHalfTy() || et->isBFloatTy()))
    for (int k = 0; k < n; k += 2) {
      llvm::Value *lo = from_f32(vals[j + size_t(k)]), *hi = from_f32(vals[j + size_t(k) + 1]);
      std::optional<llvm::Value*> p;
      if (lo && hi) p = hooks_.f32x2_to_half2(b_, lo, hi, et->isBFloatTy() ? DType::bf16 : DType::f16);
      if (!p) {
        pairs.clear();
        break;
      }
      pairs.push_back(*p);
    }
  if (!pairs.empty()) { // concatenated, two vectors at a time
    while (pairs.size() > 1) {
      std::vector<llvm::Value*> next;
      for (size_t k = 0; k < pairs.size(); k += 2) {
        const unsigned w = llvm::cast<llvm::FixedVectorType>(pairs[k]->getType())->getNumElements();
        std::vector<int> mask(2 * w);
        for (unsigned e = 0; e < 2 * w; ++e) mask[e] = int(e);
        next.push_back(b_.CreateShuffleVector(pairs[k], pairs[k + 1], mask));
      }
      pairs = std::move(next);
    }
    return pairs[0];
  }
  llvm::Value* x = llvm::PoisonValue::get(llvm::FixedVectorType::get(et, unsigned(n)));
  for (int k = 0; k < n; ++k) x = b_.CreateInsertElement(x, vals[j + size_t(k)], uint64_t(k));
  return x;
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

void Lowering::emit_block(const ir::Block& blk) {
  for (const auto& op : blk.ops) {
    // A warpgroup MMA result is waited for in the block that issued it, before any region.
    const bool ends_straight_code = op->kind == OpKind::For || op->kind == OpKind::If ||
                                    op->kind == OpKind::Yield || op->kind == OpKind::Return;
    if (ends_straight_code && !pending_wgmma_.empty()) retire_wgmma(nullptr);
    emit_op(*op);
  }
  if (!pending_wgmma_.empty()) retire_wgmma(nullptr);
}

void Lowering::retire_wgmma(const Value* v) {
  uint64_t group = 0;
  for (const PendingWgmma& p : pending_wgmma_)
    if (!v || p.res == v) group = std::max(group, p.group);
  internal_assert(group > 0, "a pending warpgroup MMA result is retired once");
  hooks_.wgmma_wait(b_, int(wgmma_commits_ - group));
  std::vector<PendingWgmma> still;
  for (PendingWgmma& p : pending_wgmma_) {
    if (p.group > group) {
      still.push_back(std::move(p));
      continue;
    }
    Elems& e = vals_.at({p.res, p.layout});
    e = hooks_.fence_operands(b_, e);
    hooks_.fence_operands(b_, p.a_regs); // live until here: the MMA reads them asynchronously
  }
  pending_wgmma_ = std::move(still);
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
  if (pipes_.deferred(&op) && !emitting_ahead_) return;
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
  case OpKind::DescLoad: internal_fail("a descriptor load is a TMA copy its dot issues (prepare_descriptors)");
  case OpKind::DescStore: return emit_tma_store(op);
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
  // A loop the pipeline plan pipelines first issues the copies of its first stages - 1
  // iterations, one group each, into buffers 0, 1, ... (after a barrier if an earlier loop's
  // dots may still read them, or its last copies, issued past its end and landed by each
  // thread's own wait, wrote them: the buffers are shared).
  const Pipeline* pl = pipes_.pipeline_of(&op);
  const int64_t S = pl ? pl->stages : 1;
  // Each thread keeps its warp's fragments of a dot's loop-invariant A in registers, loaded
  // once here (through scratch, which may be the buffers the copies below fill).
  for (const Op* dot : held_a_dots(op)) hold_a_fragments(*dot);
  if (pl) {
    // The copy engine writes through the async proxy: the generic accesses before the barrier
    // are fenced to it first. Scratch in the buffers is done with first too.
    const int64_t in_buffers = -pipes_.buffer_bytes();
    if (pipe_read_unfenced_ || pipe_written_unfenced_ ||
        conflicts_with_touched({kScratch, in_buffers, in_buffers + pipes_.buffers_end(), true})) {
      if (pl->mbarriers >= 0) proxy_unfenced_ = true;
      barrier();
    }
    copies_in_flight_ = true;
    if (pl->warp_specialized) { // the producer warpgroup issues every copy; the consumers go on
      emit_producer(*pl, lb, ub, step);
    } else {
      for (int64_t s = 0; s + 1 < S; ++s)
        issue_ahead(*pl, b_.CreateAdd(lb, b_.CreateMul(step, llvm::ConstantInt::get(lb->getType(), uint64_t(s)))),
                    b_.getInt32(uint32_t(s)), false);
    }
  }
  // Dot operands that do not change in the loop are staged once, here.
  const int64_t floor_before = scratch_floor_;
  const std::vector<Access> resident = stage_resident(op);
  ++loops_open_;
  // The bookkeeping as the body's first trip finds it (and as zero trips leave it).
  const SyncState before = sync_state();
  llvm::BasicBlock* pre = b_.GetInsertBlock();
  llvm::BasicBlock* header = llvm::BasicBlock::Create(c_, "for.header", kernel_);
  llvm::BasicBlock* body_bb = llvm::BasicBlock::Create(c_, "for.body", kernel_);
  llvm::BasicBlock* exit = llvm::BasicBlock::Create(c_, "for.end", kernel_);
  b_.CreateBr(header);
  b_.SetInsertPoint(header);
  llvm::PHINode* iv = b_.CreatePHI(lb->getType(), 2, "iv");
  iv->addIncoming(lb, pre);
  llvm::PHINode* stage = nullptr; // the buffer this iteration reads: its count modulo S
  llvm::Value *fill = nullptr, *ahead = nullptr; // the buffer the copies issued ahead fill, and their iteration
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
  loop_fences_.push_back({});
  proxy_unfenced_ = true; // the previous trip's last writes may be unfenced (emitted once for both)
  if (pl) {
    // This iteration's group has landed once at most the S - 2 newer ones are pending; the
    // barrier before its dot's first read shows it to every thread. Then the copies of
    // iteration + S - 1 go into the buffer the previous iteration read (every read of it was
    // followed by a barrier: pipe_read_unfenced_).
    // With late slots the group after this iteration's is its late one (2 S - 3 = 1).
    if (pl->cp_async) {
      cp_async_wait(int(pl->has_late() ? 2 * S - 3 : S - 2));
      pipe_landed_unfenced_ = true;
    }
    // TMA copies land for the threads that wait for their phase: no barrier needed.
    if (pl->mbarriers >= 0) wait_tma(pl->mbarriers, stage);
    fill = b_.CreateSelect(b_.CreateICmpEQ(stage, b_.getInt32(0)), b_.getInt32(uint32_t(S - 1)),
                           b_.CreateSub(stage, b_.getInt32(1)));
    ahead = b_.CreateAdd(iv, b_.CreateMul(step, llvm::ConstantInt::get(lb->getType(), uint64_t(S - 1))));
    // A wgmma group kept in flight reads this trip's buffer past the trip: the copies wait for
    // the trip's end (Pipeline::wgmma_in_flight), when the previous trip's group has retired.
    if (!pl->wgmma_in_flight) issue_ahead(*pl, ahead, fill, true);
    read_stage_[size_t(pl - pipes_.pipelines().data())] = stage;
  }
  vals_[{body.args[0], kScalar}] = {iv};
  for (size_t i = 0; i < n; ++i) define(body.args[i + 1], cl[i], Elems(phis[i].begin(), phis[i].end()));
  emit_block(body);
  // The next trip's copies (or a nested pipelined loop's first ones) may refill a buffer only
  // after a barrier follows every read of it and every copy a nested loop landed in it.
  if (pl && pl->warp_specialized) {
    // The group of the previous trip, which read buffer `fill`, has retired: its stage is
    // empty. Nothing else of the body may need a barrier (the plan admits no other op).
    internal_assert(!pipe_written_unfenced_, "a warp-specialized loop's body writes no pipeline buffer");
    pipe_read_unfenced_ = false;
    release_stage(*pl, iv, lb, fill);
  }
  if (pipe_read_unfenced_ || pipe_written_unfenced_) barrier();
  if (pl && pl->has_late()) issue_late(*pl);
  if (pl && pl->wgmma_in_flight && !pl->warp_specialized) issue_ahead(*pl, ahead, fill, true);
  // The next trip's first accesses must wait for this trip's last ones they conflict with: a
  // barrier at the top of the body (before the first trip too, where it costs nothing).
  const LoopFence fence = loop_fences_.back();
  loop_fences_.pop_back();
  if (std::any_of(fence.exposed.begin(), fence.exposed.end(), [&](const Access& a) { return conflicts_with_touched(a); })) {
    llvm::IRBuilder<>::InsertPointGuard guard(b_);
    b_.SetInsertPoint(body_bb, body_bb->getFirstInsertionPt());
    if (has_wgmma_) hooks_.fence_proxy_async(b_); // the previous trip's writes reach the async proxy
    block_barrier();
    ++stats_.barriers;
  }
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
  // A barrier in the body fences nothing when the loop runs no trip: after the loop, the
  // bookkeeping joins the body's end with what was before it.
  SyncState after = sync_state();
  join_sync(after, before);
  after.touched.insert(after.touched.end(), resident.begin(), resident.end()); // read by the last trip
  set_sync_state(after);
  // A later loop of the block that stages one of these operands alike (the same value, as the
  // walk's whole steps and its partial last one do with q) finds it where it is: the floor
  // stays up until no later loop does, and the value need not be held in registers between.
  bool keep = false;
  for (const auto& [key, at] : resident_)
    if (at >= floor_before && later_loop_stages(op, key.first->operands[size_t(key.second)])) keep = true;
  if (keep) {
    if (kept_resident_.empty()) kept_floor_ = floor_before;
    for (const auto& [key, at] : resident_)
      if (at >= floor_before) {
        const Value* v = key.first->operands[size_t(key.second)];
        kept_resident_[v] = {at, mma_operand_staging(*key.first, key.second).bytes()};
        kept_how_[v] = key;
      }
  } else {
    scratch_floor_ = kept_resident_.empty() ? floor_before : std::max(floor_before, kept_floor_);
    if (!kept_resident_.empty() && !std::any_of(kept_resident_.begin(), kept_resident_.end(), [&](const auto& k) {
          return later_loop_stages(op, k.first);
        })) {
      scratch_floor_ = kept_floor_;
      kept_resident_.clear();
      kept_how_.clear();
    }
  }
  --loops_open_;
  for (auto it = resident_.begin(); it != resident_.end();)
    it = it->second >= floor_before ? resident_.erase(it) : std::next(it);
  if (pl && pl->cp_async) {
    cp_async_wait(0); // the copies issued past the end (all masked off: zero-filled)
    pipe_written_unfenced_ = true;
  }
  // TMA copies issued past the end may still land (a producer issues none: the consumers
  // waited for every copy it issued).
  if (pl) copies_in_flight_ = pl->mbarriers >= 0 && !pl->warp_specialized;
  std::vector<Elems> results(n);
  for (size_t i = 0; i < n; ++i) results[i] = Elems(phis[i].begin(), phis[i].end());
  if (pl && pl->wgmma_in_flight) { // the last group retires; its buffer is read until then
    hooks_.wgmma_wait(b_, 0);
    Elems& acc = results[size_t(pl->in_flight_result)];
    for (size_t j = 0; j < acc.size(); j += 64) {
      Elems part(acc.begin() + long(j), acc.begin() + long(std::min(acc.size(), j + 64)));
      part = hooks_.fence_operands(b_, part);
      std::copy(part.begin(), part.end(), acc.begin() + long(j));
    }
    pipe_read_unfenced_ = true;
  }
  for (size_t i = 0; i < n; ++i) define(op.results[i], cl[i], std::move(results[i]));
}

void Lowering::emit_if(const Op& op) {
  llvm::Value* cond = get(op.operands[0], kScalar)[0];
  llvm::BasicBlock* then_bb = llvm::BasicBlock::Create(c_, "if.then", kernel_);
  llvm::BasicBlock* else_bb = llvm::BasicBlock::Create(c_, "if.else", kernel_);
  llvm::BasicBlock* merge = llvm::BasicBlock::Create(c_, "if.end", kernel_);
  b_.CreateCondBr(cond, then_bb, else_bb);
  // What a barrier in one branch fenced, the other branch may not have: after the if, the
  // bookkeeping joins what both branches leave (join_sync).
  const SyncState before = sync_state();
  SyncState after;
  std::vector<Elems> out[2];
  llvm::BasicBlock* ends[2];
  llvm::BasicBlock* starts[2] = {then_bb, else_bb};
  for (int r = 0; r < 2; ++r) {
    b_.SetInsertPoint(starts[r]);
    set_sync_state(before);
    emit_block(op.region(r));
    out[r] = yielded_;
    ends[r] = b_.GetInsertBlock();
    b_.CreateBr(merge);
    if (r == 0) after = sync_state();
    else join_sync(after, sync_state());
  }
  b_.SetInsertPoint(merge);
  set_sync_state(after);
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

std::vector<std::pair<const Op*, int>> Lowering::invariant_operands(const Op& loop) {
  std::vector<std::pair<const Op*, int>> found;
  if (!opts_.tensor_cores) return found;
  // The value is defined outside `loop`: no op or block of it produces it.
  auto outside = [&](const Value* v) {
    const ir::Block* blk = v->def ? v->def->parent : v->owner;
    for (; blk; blk = blk->parent ? blk->parent->parent : nullptr)
      if (blk->parent == &loop) return false;
    return true;
  };
  // The loop's own dots, and those in its ifs (a nested loop has its own).
  std::function<void(const ir::Block&)> scan = [&](const ir::Block& blk) {
    for (const auto& o : blk.ops) {
      if (o->kind == OpKind::If)
        for (const auto& r : o->regions) scan(*r);
      if (o->kind != OpKind::Dot || !mma_eligible(*o)) continue;
      for (int idx = 0; idx < 2; ++idx)
        if (!pipes_.async_operand(o.get(), idx) && outside(o->operands[size_t(idx)])) found.push_back({o.get(), idx});
    }
  };
  scan(loop.region(0));
  return found;
}

std::vector<const Op*> Lowering::held_a_dots(const Op& loop) {
  std::vector<const Op*> held;
  for (auto [dot, idx] : invariant_operands(loop))
    if (idx == 0 && a_fragments_fit(*dot)) held.push_back(dot);
  return held;
}

std::vector<Lowering::Access> Lowering::stage_resident(const Op& loop) {
  struct Candidate {
    const Op* dot;
    int idx;
    MmaStaging st;
  };
  std::vector<Candidate> found;
  int64_t total = 0;
  for (auto [dot, idx] : invariant_operands(loop)) {
    if (idx == 0 && a_fragments_fit(*dot)) continue; // held in registers (held_a_dots)
    found.push_back({dot, idx, mma_operand_staging(*dot, idx)});
    total += found.back().st.bytes() + (found.back().st.swizzle ? MmaStaging::kSwizzleAlign : 0);
  }
  if (found.empty() || total > (has_wgmma_ ? kResidentBytesWgmma : kResidentBytes)) return {};
  std::vector<Access> regions;
  // Those an earlier loop of the block staged alike and kept (kept_resident_) are there.
  std::vector<Candidate> fresh;
  for (const Candidate& c : found) {
    auto k = kept_resident_.find(c.dot->operands[size_t(c.idx)]);
    if (k != kept_resident_.end() && k->second.second == c.st.bytes() && same_resident_staging(k->first, c.dot, c.idx)) {
      resident_[{c.dot, c.idx}] = k->second.first;
      regions.push_back({kScratch, k->second.first, k->second.first + c.st.bytes(), false});
    } else {
      fresh.push_back(c);
    }
  }
  if (fresh.empty()) return regions;
  // Written under the floor, so wait for any access there since the last barrier, and then
  // at a barrier of their own before the loop reads them.
  if (conflicts_with_touched({kScratch, scratch_floor_, scratch_floor_ + total, true})) barrier();
  for (const Candidate& c : fresh) {
    const int64_t align = c.st.swizzle ? MmaStaging::kSwizzleAlign : 16;
    const int64_t lo = (scratch_floor_ + align - 1) / align * align;
    const Access r{kScratch, lo, lo + c.st.bytes(), true};
    stage_mma_operand(*c.dot, c.idx, c.st, smem_at(b_.getInt8Ty(), b_.getInt32(0), r.lo));
    resident_[{c.dot, c.idx}] = r.lo;
    regions.push_back({kScratch, r.lo, r.hi, false}); // read by the loop
    scratch_floor_ = r.hi;
    touch(r);
  }
  need_smem(scratch_floor_);
  barrier();
  return regions;
}

bool Lowering::later_loop_stages(const Op& loop, const Value* v) {
  if (!loop.parent) return false;
  const auto& ops = loop.parent->ops;
  auto it = std::find_if(ops.begin(), ops.end(), [&](const auto& o) { return o.get() == &loop; });
  for (++it; it != ops.end(); ++it)
    if ((*it)->kind == OpKind::For)
      for (auto [dot, idx] : invariant_operands(**it))
        if (dot->operands[size_t(idx)] == v && !(idx == 0 && a_fragments_fit(*dot))) return true;
  return false;
}

bool Lowering::same_resident_staging(const Value* v, const Op* dot, int idx) {
  auto h = kept_how_.find(v);
  if (h == kept_how_.end()) return false;
  const MmaStaging a = mma_operand_staging(*h->second.first, h->second.second), b = mma_operand_staging(*dot, idx);
  return h->second.second == idx && a.kmajor == b.kmajor && a.rows == b.rows && a.row_bytes == b.row_bytes &&
         a.swizzle == b.swizzle && a.panels == b.panels;
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
  scratch_begin(n * mem_bytes(e));
  const Elems& in = get(src, from);
  auto cf = coords(from, src->type.shape);
  for (size_t j = 0; j < in.size(); ++j)
    smem_store(to_mem(in[j], e), smem(ty, linear_index(cf[j], src->type.shape)), "reshape write", e.dtype);
  barrier();
  Elems r;
  for (auto& c : coords(to, res->type.shape))
    r.push_back(from_mem(smem_load(ty, smem(ty, linear_index(c, res->type.shape)), "reshape read"), e));
  scratch_end();
  define(res, to, std::move(r));
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

} // namespace tilec::codegen::detail

namespace tilec::codegen {

LoweringStats lower_kernel(const ir::Function& fn, const CompileOptions& opts, TargetHooks& hooks,
                           llvm::Module& m) {
  detail::Lowering l(fn, opts, hooks, m);
  return l.run();
}

} // namespace tilec::codegen
