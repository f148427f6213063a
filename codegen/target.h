#pragma once
// Target hooks: everything the SIMT lowering needs that differs between the
// GPU (nvptx) and the CPU emulator (emu). The lowering branches on the target
// nowhere else. Internal to codegen/ (includes LLVM headers).
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Module.h>

#include <array>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "abi/device_print.h"
#include "codegen/compile.h"
#include "ir/error.h"
#include "ir/types.h"

namespace tilec::codegen {

class TargetHooks {
public:
  using Builder = llvm::IRBuilder<>;
  virtual ~TargetHooks() = default;

  // The kernel function for `params` (tile IR parameter types, lowered);
  // kernel_params() then gives their values, read in the entry block.
  // `tensor_maps` more parameters follow `params`: the tensor maps of the kernel's TMA copies
  // (128 bytes each, by value on the GPU; kernel_params gives a pointer to each).
  virtual llvm::Function* create_kernel(llvm::Module& m, const std::string& name,
                                        const std::vector<llvm::Type*>& params, int threads, int tensor_maps) = 0;
  virtual std::vector<llvm::Value*> kernel_params(Builder& b) = 0;

  virtual llvm::Value* thread_id(Builder& b) = 0; // i32, 0 .. threads-1
  virtual llvm::Value* block_id(Builder& b, int axis) = 0;
  virtual llvm::Value* num_blocks(Builder& b, int axis) = 0;
  virtual void barrier(Builder& b) = 0;
  virtual llvm::Value* shared_base(Builder& b) = 0; // pointer to the dynamic shared region
  // Every access to shared memory (`ptr` points into the region shared_base gives). `site`
  // names it for the emulator's checks (bounds, reads of unwritten bytes, races between
  // barriers): the op's source location and what the access is for.
  virtual llvm::Value* shared_load(Builder& b, llvm::Value* ptr, llvm::Type* ty, const std::string& site) = 0;
  // `float_type`: what `v` holds when floats (1 f32, 2 f16, 3 bf16; f16/bf16 as i16 bits), else 0.
  virtual void shared_store(Builder& b, llvm::Value* ptr, llvm::Value* v, const std::string& site,
                            unsigned float_type) = 0;
  virtual llvm::Value* shfl_xor(Builder& b, llvm::Value* i32, int lane_mask) = 0;
  virtual llvm::Value* shfl_idx(Builder& b, llvm::Value* i32, llvm::Value* lane) = 0;

  // mma.sync.aligned.m16n8k16.row.col.f32.T.T.f32 (T: `operands`, f16 or bf16) for the calling
  // lane: `a` (4 x i32) and `b` (2 x i32) hold its operand fragments (two 16-bit values
  // each, the lower-numbered element in the low half), `c` (4 x f32) its accumulator
  // fragment, as the PTX ISA assigns them to lanes; returns its part of D = A B + C. Every
  // lane of the warp calls it together.
  virtual std::array<llvm::Value*, 4> mma_m16n8k16(Builder& b, ir::DType operands, const std::array<llvm::Value*, 4>& a,
                                                   const std::array<llvm::Value*, 2>& bf,
                                                   const std::array<llvm::Value*, 4>& c) = 0;

  // ldmatrix.sync.aligned.m8n8.x{count}{.trans}.shared.b16 for the calling lane (count 1, 2
  // or 4): `row` (into shared memory) is the 16-byte row this lane addresses, row lane % 8 of
  // matrix lane / 8; returns one i32 per matrix: elements (lane / 4, 2 (lane % 4) + {0, 1})
  // of it, or with `trans` elements (2 (lane % 4) + {0, 1}, lane / 4). Every lane of the
  // warp calls it together. `site` names the access for the emulator's checks.
  virtual std::vector<llvm::Value*> ldmatrix(Builder& b, llvm::Value* row, int count, bool trans,
                                             const std::string& site) = 0;

  // cp.async.cg.shared.global [dst], [src], 16, src_size: copies 16 bytes from global to
  // shared memory asynchronously; with `pred` false (null: always true) it reads nothing and
  // fills the 16 bytes with zeros. The copy lands by the wait for its group.
  virtual void cp_async_16(Builder& b, llvm::Value* dst, llvm::Value* src, llvm::Value* pred,
                           const std::string& site) = 0;
  virtual void cp_async_commit(Builder& b) = 0;      // closes the group of copies issued since the last
  virtual void cp_async_wait(Builder& b, int groups) = 0; // waits until at most `groups` groups are pending

  // Hopper's warpgroup MMA (sm_90a), every thread of a warpgroup (4 warps) calling together.
  // wgmma.mma_async.sync.aligned.m64n{n}k16.f32.T.T for the calling thread: D = A B + (scale_d
  // ? C : 0) for a 64 x n tile, A (64 x 16) and B (16 x n) in shared memory as the 64-bit
  // matrix descriptors `desc_a`, `desc_b` describe them (K-major, or M- / N-major with
  // `trans_a` / `trans_b`: the instruction's imm-trans-a and imm-trans-b), `acc` the thread's
  // n / 2 accumulator registers (PTX's ownership: register i holds row 16 (warp % 4) + lane / 4
  // + 8 ((i / 2) % 2), column 8 (i / 4) + 2 (lane % 4) + i % 2). Returns the thread's part of
  // D, which it may read only after a wgmma_wait that retires its group; a later wgmma may
  // take it as its `acc` before that (the hardware orders the two). With `a_regs` (four i32,
  // 16-bit operands) A comes from registers instead: the thread's mma.m16n8k16 A fragments of
  // its warp's 16 rows (register r: row lane / 4 + 8 (r % 2), columns 8 (r / 2) + 2 (lane % 4)
  // and the next, the lower half first); desc_a is then unused and trans_a false.
  virtual std::vector<llvm::Value*> wgmma(Builder& b, ir::DType operands, int n, llvm::Value* desc_a,
                                          const std::vector<llvm::Value*>& a_regs, llvm::Value* desc_b,
                                          const std::vector<llvm::Value*>& acc, bool scale_d, bool trans_a,
                                          bool trans_b, const std::string& site) {
    internal_fail("this target has no warpgroup MMA");
  }
  virtual void wgmma_fence(Builder& b) {}         // wgmma.fence.sync.aligned: registers written before are seen
  virtual void wgmma_commit(Builder& b) {}        // wgmma.commit_group.sync.aligned
  virtual void wgmma_wait(Builder& b, int groups) {} // wgmma.wait_group.sync.aligned `groups`
  // Passes accumulator registers through a point no code moves across: before wgmma_fence
  // (their last writes) and after wgmma_wait (their first reads), what CUTLASS calls fencing
  // an operand. The identity where nothing reorders.
  virtual std::vector<llvm::Value*> fence_operands(Builder& b, const std::vector<llvm::Value*>& regs) { return regs; }
  // fence.proxy.async.shared::cta: the calling thread's shared-memory writes so far are seen by
  // the async proxy (wgmma's operand reads).
  virtual void fence_proxy_async(Builder& b) {}
  // Hopper's tensor memory accelerator (TMA, sm_90) and the mbarriers its copies complete on.
  // `bar` points at an 8-byte mbarrier in shared memory.
  // mbarrier.init.shared::cta.b64 [bar], count (one thread; then mbarrier_init_fence and a barrier).
  virtual void mbarrier_init(Builder& b, llvm::Value* bar, int count) { internal_fail("this target has no mbarrier"); }
  // fence.mbarrier_init.release.cluster: the inits are seen by the copy engine.
  virtual void mbarrier_init_fence(Builder& b) {}
  // mbarrier.arrive.expect_tx.shared::cta.b64 _, [bar], bytes: one arrival, and `bytes` more
  // the phase waits for (the copies issued next complete them).
  virtual void mbarrier_arrive_expect_tx(Builder& b, llvm::Value* bar, int64_t bytes, const std::string& site) {
    internal_fail("this target has no mbarrier");
  }
  // Waits until the phase of `bar` whose parity is `parity` (an i32, 0 or 1) has completed: a
  // loop of mbarrier.try_wait.parity. After it, the phase's copies are in shared memory.
  virtual void mbarrier_wait(Builder& b, llvm::Value* bar, llvm::Value* parity, const std::string& site) {
    internal_fail("this target has no mbarrier");
  }
  // mbarrier.arrive.shared::cta.b64 _, [bar]: one arrival (release: the thread's accesses
  // before it are seen by whoever waits for the phase).
  virtual void mbarrier_arrive(Builder& b, llvm::Value* bar, const std::string& site) {
    internal_fail("this target has no mbarrier");
  }
  // Warp specialization (sm_90a). setmaxnreg.{inc,dec}.sync.aligned.u32 count: every warp of
  // the calling warpgroup sets its per-thread register ceiling to `count` (a multiple of 8 in
  // [24, 256]); `launch_count` is the ceiling the kernel starts with (what the emulator checks
  // the CTA's total against).
  virtual void setmaxnreg(Builder& b, bool inc, int count, int launch_count, const std::string& site) {
    internal_fail("this target has no setmaxnreg");
  }
  // bar.sync 1, threads: a barrier among `threads` threads (a multiple of 32; the consumer
  // warps of a warp-specialized kernel, once the producer has gone its own way).
  virtual void barrier_among(Builder& b, int threads) { internal_fail("this target has no named barrier"); }
  // cp.async.bulk.tensor.{rank}d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [dst],
  // [tensor_map, {coords}], [bar]: the copy engine moves the box at `coords` (i32, innermost
  // first) of the tensor `tensor_map` describes into shared memory at `dst` (swizzled as the
  // map says; zeros outside the tensor) and completes its bytes on `bar`.
  virtual void tma_load(Builder& b, llvm::Value* dst, llvm::Value* tensor_map, const std::vector<llvm::Value*>& coords,
                        llvm::Value* bar, const std::string& site) {
    internal_fail("this target has no TMA");
  }
  // cp.async.bulk.tensor.{rank}d.global.shared::cta.bulk_group [tensor_map, {coords}], [src]:
  // the copy engine writes the box at `coords` from shared memory at `src` (laid out as
  // tma_load writes it) to the tensor, the elements outside it dropped; it joins the thread's
  // bulk group. bulk_commit closes the group (cp.async.bulk.commit_group); bulk_wait waits
  // until all but `groups` closed groups are complete, their shared memory read and their
  // global writes done (cp.async.bulk.wait_group).
  virtual void tma_store(Builder& b, llvm::Value* src, llvm::Value* tensor_map, const std::vector<llvm::Value*>& coords,
                         const std::string& site) {
    internal_fail("this target has no TMA");
  }
  virtual void bulk_commit(Builder& b) { internal_fail("this target has no TMA"); }
  virtual void bulk_wait(Builder& b, int groups) { internal_fail("this target has no TMA"); }
  // The 32-bit shared-memory address of `ptr` (into the region shared_base gives), as a
  // matrix descriptor encodes it: the shared window's address on the GPU, the offset from the
  // region's start in the emulator.
  virtual llvm::Value* shared_address(Builder& b, llvm::Value* ptr) = 0;

  // f32 math; may be approximate (a few ulp), per ir/SEMANTICS.md.
  virtual llvm::Value* exp2(Builder& b, llvm::Value* x) = 0;
  virtual llvm::Value* log2(Builder& b, llvm::Value* x) = 0;
  virtual llvm::Value* sqrt(Builder& b, llvm::Value* x) = 0;
  virtual llvm::Value* rsqrt(Builder& b, llvm::Value* x) = 0;
  virtual llvm::Value* tanh(Builder& b, llvm::Value* x) = 0;

  // A C math library function on f32 (sinf, cosf, erff, powf): libdevice's __nv_NAME on the
  // GPU (linked in by compile), the C library's NAME in the emulator.
  virtual llvm::Value* libm(Builder& b, const std::string& name, const std::vector<llvm::Value*>& args) = 0;

  // The upper half of the unsigned double-width product of two integers of one width. The
  // default widens, multiplies and shifts (umulhi_ir); the GPU has mul.hi.
  virtual llvm::Value* umulhi(Builder& b, llvm::Value* x, llvm::Value* y);

  // How f16/bf16 live in registers and memory, and their f32 conversions.
  virtual llvm::Type* half_type(llvm::LLVMContext& c, ir::DType t) = 0;
  virtual llvm::Value* to_f32(Builder& b, llvm::Value* v, ir::DType t) = 0;
  virtual llvm::Value* from_f32(Builder& b, llvm::Value* v, ir::DType t) = 0;

  // 8-bit floats (ir::is_fp8) live as their i8 bits. The default converts in plain IR
  // (fp8_to_f32_ir); a target with instructions for it overrides.
  virtual llvm::Value* fp8_to_f32(Builder& b, llvm::Value* bits, ir::DType t);
  virtual llvm::Value* f32_to_fp8(Builder& b, llvm::Value* x, ir::DType t);
  // Two f32 values rounded to nearest into a pair of f16 or bf16 (<2 x half_type>, `lo` the
  // first), where one instruction does it (cvt.rn.{f16,bf16}x2.f32); else nullopt and the
  // lowering rounds them one at a time.
  virtual std::optional<llvm::Value*> f32x2_to_half2(Builder& b, llvm::Value* lo, llvm::Value* hi, ir::DType t) {
    return std::nullopt;
  }
  // Two fp8 values to f16 (half_type) at once, where one instruction does it; else nullopt
  // and the lowering converts one at a time through f32.
  virtual std::optional<std::array<llvm::Value*, 2>> fp8x2_to_f16(Builder& b, llvm::Value* lo, llvm::Value* hi,
                                                                   ir::DType t) {
    return std::nullopt;
  }

  // Stops the launch: a device_assert failed. `where` is "file:line: message".
  virtual void assert_fail(Builder& b, const std::string& where) = 0;
  // device_print of one element: element `linear` (i64, row-major) of a tile of `shape`
  // (dims joined by 'x'; "" for a scalar) holds `v` (f32 for PrintedValue::float_, else
  // i64). The emulator prints it; the GPU drops it (the default).
  virtual void print(Builder& b, const std::string& prefix, const std::string& shape, llvm::Value* linear,
                     llvm::Value* v, PrintedValue kind) {}
  // Once per print op, by every thread, before its elements.
  virtual void print_op(Builder& b) {}

  virtual unsigned global_address_space() const = 0;
  // Global memory; `pred` (i1, may be null) guards the access: when false,
  // memory is not touched and the load yields zero.
  virtual llvm::Value* load(Builder& b, llvm::Value* ptr, llvm::Type* ty, unsigned align,
                            llvm::Value* pred) = 0;
  virtual void store(Builder& b, llvm::Value* ptr, llvm::Value* v, unsigned align,
                     llvm::Value* pred) = 0;
  // An atomic read-modify-write of global memory (abi/atomic_ops.h says what `op` stores;
  // `cmp` is cas's compare value, null otherwise); returns the old value. `pred` guards it:
  // when false, memory is not touched and the result is zero.
  virtual llvm::Value* atomic(Builder& b, AtomicOp op, llvm::Value* ptr, llvm::Value* v, llvm::Value* cmp,
                              llvm::Value* pred) = 0;

  // Annotations once the kernel body is complete.
  // `min_blocks`: ir::Function::min_blocks_per_sm (0: none); `max_registers`: the kernel's or
  // the compile options' ceiling (0: none); `shared_bytes`: what one block of the kernel takes.
  virtual void finish_kernel(llvm::Module& m, llvm::Function* f, int threads, int min_blocks, int max_registers,
                             int64_t shared_bytes) {}
};

// `sm`: the arch's number (80, 86, 89, 90): sm_89 and later convert fp8 with cvt.
std::unique_ptr<TargetHooks> make_nvptx_hooks(int sm);
std::unique_ptr<TargetHooks> make_emu_hooks();

// The emulator's warp-wide MMA call (tilec_emu_mma_m16n8k16): fragments through stack
// arrays allocated once per kernel (`scratch`). Shared by the emu hooks and the nvptx
// rewrite.
struct MmaScratch {
  llvm::AllocaInst *a = nullptr, *b = nullptr, *c = nullptr, *d = nullptr, *ldm = nullptr;
};
// Emitting calls into the emulator from one kernel function (the emu hooks and the nvptx
// rewrite both do): tilec_emu_NAME(ctx, args...) declared on first use, one C string per
// access site, one 16-byte aligned stack slot per type in the entry block.
class EmuCalls {
public:
  // The function the calls go into and the calling thread's context, its first argument.
  void bind(llvm::Function* fn) { fn_ = fn; }
  llvm::Value* ctx() const { return fn_->getArg(0); }
  // Barriers and warp-wide calls are convergent, as on the GPU: LLVM must not duplicate them
  // into divergent paths (the emulator checks every thread waits at one site).
  llvm::Value* call(llvm::IRBuilder<>& b, const char* name, llvm::Type* ret, std::vector<llvm::Value*> args,
                    bool convergent = false);
  llvm::Value* site(llvm::IRBuilder<>& b, const std::string& s);
  llvm::Value* scratch(llvm::Type* ty);
  unsigned bytes(llvm::Type* ty) const;
  MmaScratch& mma() { return mma_; }

private:
  llvm::Function* fn_ = nullptr;
  std::map<std::string, llvm::Value*> sites_;
  std::map<llvm::Type*, llvm::AllocaInst*> scratch_;
  MmaScratch mma_;
};

std::array<llvm::Value*, 4> emu_mma(llvm::IRBuilder<>& b, llvm::Value* ctx, unsigned dtype,
                                    const std::array<llvm::Value*, 4>& a, const std::array<llvm::Value*, 2>& bf,
                                    const std::array<llvm::Value*, 4>& c, MmaScratch& scratch);

// The emulator's warp-wide ldmatrix call (tilec_emu_ldmatrix), results through a stack
// array allocated once per kernel.
std::vector<llvm::Value*> emu_ldmatrix(llvm::IRBuilder<>& b, llvm::Value* ctx, llvm::Value* row, int count, bool trans,
                                       llvm::Value* site, MmaScratch& scratch);

// The emulator's warpgroup MMA call (tilec_emu_wgmma): the accumulator through a stack array,
// in place. Shared by the emu hooks and the nvptx rewrite.
// `trans`: bit 0 A is M-major, bit 1 B is N-major.
// With `a_regs` (four i32), A from registers (tilec_emu_wgmma_rs) and desc_a unused.
std::vector<llvm::Value*> emu_wgmma(llvm::IRBuilder<>& b, EmuCalls& emu, unsigned dtype, int n, llvm::Value* desc_a,
                                    const std::vector<llvm::Value*>& a_regs, llvm::Value* desc_b, llvm::Value* scale_d,
                                    unsigned trans,
                                    const std::vector<llvm::Value*>& acc, llvm::Value* site);

// The emulator's operand fence (tilec_emu_wgmma_fence_operands): float registers through a
// stack array, where a wgmma result retired by a wait replaces the tags that stood for it
// (the emulator delivers wgmma results asynchronously). Shared by the emu hooks and the nvptx
// rewrite.
std::vector<llvm::Value*> emu_fence_operands(llvm::IRBuilder<>& b, EmuCalls& emu, const std::vector<llvm::Value*>& regs);

// The emulator's TMA copy call (tilec_emu_tma_load): `coords` innermost first, up to 5.
// Shared by the emu hooks and the nvptx rewrite.
void emu_tma_load(llvm::IRBuilder<>& b, EmuCalls& emu, llvm::Value* dst, llvm::Value* tensor_map,
                  const std::vector<llvm::Value*>& coords, llvm::Value* bar, llvm::Value* site);
// And its TMA store (tilec_emu_tma_store).
void emu_tma_store(llvm::IRBuilder<>& b, EmuCalls& emu, llvm::Value* src, llvm::Value* tensor_map,
                   const std::vector<llvm::Value*>& coords, llvm::Value* site);

// Rewrites a module lowered with the nvptx hooks (not yet optimized) into one for the CPU
// emulator: every NVVM intrinsic, shared and global access and f16/bf16 conversion becomes
// the emulator call with PTX's semantics (codegen/nvptx_on_cpu.cpp). The module's triple and
// data layout are the caller's to set.
void retarget_nvptx_for_emulator(llvm::Module& m);

// fp8 <-> f32 with abi/float8.h's semantics (round to nearest even, saturating; NaN 0x7f)
// in integer and f32 IR only (codegen/float8_ir.cpp).
llvm::Value* fp8_to_f32_ir(llvm::IRBuilder<>& b, llvm::Value* bits, ir::DType t);
llvm::Value* f32_to_fp8_ir(llvm::IRBuilder<>& b, llvm::Value* x, ir::DType t);

// A call of the f32 function `name` (declared on first use: f32 (f32, ...)), marked as not
// touching memory, so LLVM may move or drop it.
llvm::Value* call_float_function(llvm::IRBuilder<>& b, const std::string& name, const std::vector<llvm::Value*>& args);

llvm::Value* umulhi_ir(llvm::IRBuilder<>& b, llvm::Value* x, llvm::Value* y);

// Runs `body` only where `pred` holds (no branch when pred is null or true);
// returns `body`'s value there and zero elsewhere (null if body returns null).
llvm::Value* guarded(llvm::IRBuilder<>& b, llvm::Value* pred,
                     const std::function<llvm::Value*()>& body);

} // namespace tilec::codegen
