/* The C ABI between code generated for the `emu` target and the CPU emulator
 * that runs it (runtime/emulator/, which implements every function declared here).
 * Plain C: includable without LLVM, from C or C++.
 *
 * The emulator runs each GPU thread of a block as a fiber. Generated code never
 * touches globals or thread-locals; every call takes first the calling GPU
 * thread's context, an opaque pointer the emulator passed to the kernel.
 *
 * Kernel entry. A kernel named S (CompiledKernel::symbol) is exported as
 *
 *     void S(tilec_emu_thread* ctx, void* const* args);
 *
 * args[i] points at the value of kernel parameter i, in the order of the
 * function's parameters, stored as: pointers `void*`; i1 `uint8_t` (0 or 1);
 * i8/i16/i32/i64 `int8_t`..`int64_t`, u8..u64 `uint8_t`..`uint64_t`; f32 `float`; f16 and bf16 `uint16_t`
 * (their bit patterns). Each thread of each block calls S once. Shared memory
 * is the dynamic size CompiledKernel::shared_bytes, 16-byte aligned, one
 * region per block.
 *
 * Math (exp2f, log2f, sqrtf, tanhf) comes from the C library: link with -lm.
 */
#ifndef TILEC_ABI_EMU_ABI_H
#define TILEC_ABI_EMU_ABI_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tilec_emu_thread tilec_emu_thread;

/* The functions are exported (default visibility) even though the emulator hides its own types,
 * tilec_emu_thread among them (runtime/emulator/internal.h): GCC would otherwise give a function
 * taking a hidden type hidden visibility too. */
#if defined(__GNUC__)
#pragma GCC visibility push(default)
#endif

/* Thread index within the block (x only; blocks are 1-d), and block size. */
uint32_t tilec_emu_thread_id(tilec_emu_thread* ctx);
uint32_t tilec_emu_block_dim(tilec_emu_thread* ctx);
/* Block index and grid size along axis 0, 1 or 2. */
uint32_t tilec_emu_block_id(tilec_emu_thread* ctx, uint32_t axis);
uint32_t tilec_emu_num_blocks(tilec_emu_thread* ctx, uint32_t axis);

/* Block-wide barrier (__syncthreads): every thread of the block must reach the barrier
 * numbered `id` (the lowering numbers a kernel's barriers; a back end that copies a call
 * into both arms of a branch keeps its number, so the copies are one barrier). */
void tilec_emu_barrier(tilec_emu_thread* ctx, uint32_t id);
/* A barrier among `threads` threads of the block (bar.sync 1, threads; a multiple of 32): it
 * completes when that many wait at the barrier numbered `id`, the others running on (a
 * warp-specialized kernel's consumers, while its producer warpgroup waits elsewhere or has
 * finished). More threads than that at it, or fewer when no other thread can still come, is
 * an error. */
void tilec_emu_barrier_among(tilec_emu_thread* ctx, uint32_t id, uint32_t threads);
/* setmaxnreg.{inc (inc = 1), dec}.sync.aligned.u32 count: the per-thread register ceiling of the
 * calling warp. `count` must be a multiple of 8 in [24, 256], dec must not raise the warp's
 * ceiling nor inc lower it (the kernel starts at `launch_count`), every thread of the warpgroup
 * must run it as often and with the same count, and when the block ends the warps' ceilings
 * must fit the 64K-register file (32 registers per ceiling unit and warp); each is a named
 * error. */
void tilec_emu_setmaxnreg(tilec_emu_thread* ctx, uint32_t count, uint32_t inc, uint32_t launch_count,
                          const char* site);
/* The block's shared memory. */
void* tilec_emu_shared_base(tilec_emu_thread* ctx);

/* Shared memory, through the emulator's checks: `addr` points into the block's shared region
 * (tilec_emu_shared_base), `bytes` is 1, 2, 4, 8 or 16 and addr is aligned to it, `site` names
 * the access (the op's source location and what it is for). The emulator reports, naming the
 * kernel, block, both threads, the byte offset and both sites: an access past the kernel's
 * shared size; a read of bytes no thread of the block has written; and a race: a read or a
 * write of a byte another thread wrote since the last barrier, or a write of a byte another
 * thread read since then. Shuffles are not barriers. A write of the value already there is
 * not a race (replicated owners of one element all write its value); for float data,
 * `float_type` (0 not floats, 1 f32, 2 f16, 3 bf16, 4 f8e4m3, 5 f8e5m2) makes +0 and -0 one value and every NaN
 * one value, as ir/SEMANTICS.md leaves the sign of a zero from min/max and NaN payloads open. */
void tilec_emu_shared_load(tilec_emu_thread* ctx, const void* addr, uint32_t bytes, void* dst, const char* site);
void tilec_emu_shared_store(tilec_emu_thread* ctx, void* addr, uint32_t bytes, const void* src, const char* site,
                            uint32_t float_type);

/* Warp shuffles over the 32 lanes of the caller's warp (lane = thread_id % 32);
 * every lane of the warp calls them together, like shfl.sync with a full mask.
 * xor: returns `value` of lane (lane ^ lane_mask). idx: of lane `src_lane`. */
uint32_t tilec_emu_shfl_xor(tilec_emu_thread* ctx, uint32_t value, uint32_t lane_mask);
uint32_t tilec_emu_shfl_idx(tilec_emu_thread* ctx, uint32_t value, uint32_t src_lane);
/* PTX's shfl.sync.{idx,bfly}.b32 d, value, b, c, member_mask, as the nvptx target emits it,
 * for the nvptx lowering run on the emulator (codegen/nvptx_on_cpu.cpp): mode 0 idx (b is
 * the source lane), 1 bfly (b is the lane mask). The lowering's rule is a full-warp shuffle:
 * member_mask must be 0xffffffff and c 0x1f (one 32-lane segment, no clamping); anything else
 * is an error naming the operand, since lanes outside the mask would read undefined values
 * on the GPU. */
uint32_t tilec_emu_shfl_sync(tilec_emu_thread* ctx, uint32_t mode, uint32_t member_mask, uint32_t value, uint32_t b,
                             uint32_t c);

/* mma.sync.aligned.m16n8k16.row.col.f32.T.T.f32, T = f16 (dtype 2) or bf16 (dtype 3), for the
 * calling lane; every lane of the warp calls it together (a warp-wide sync point, like a
 * shuffle). a[4] and b[2] are the lane's A and B fragment registers (two 16-bit values each,
 * the lower-numbered element in the low half), c[4] its accumulator fragment; d[4] receives
 * its part of D = A B + C. Ownership is PTX's, with g = lane / 4 and t = lane % 4:
 *   A (16 x 16, row-major): a[0] = A[g][2t..2t+1], a[1] = A[g+8][2t..], a[2] = A[g][2t+8..],
 *                           a[3] = A[g+8][2t+8..]
 *   B (16 x 8): b[0] = B[2t..2t+1][g], b[1] = B[2t+8..2t+9][g]
 *   C, D (16 x 8 f32): [0] = (g, 2t), [1] = (g, 2t+1), [2] = (g+8, 2t), [3] = (g+8, 2t+1)
 * Each D element is C + the 16 exact products (an f16 or bf16 product is exact in f32) added
 * in f32 in k order, each rounded to nearest even (ir/SEMANTICS.md states the bound a GPU's
 * order satisfies). */
void tilec_emu_mma_m16n8k16(tilec_emu_thread* ctx, uint32_t dtype, const uint32_t* a, const uint32_t* b,
                            const float* c, float* d);

/* ldmatrix.sync.aligned.m8n8.x{count}{.trans}.shared.b16 (count 1, 2 or 4) for the calling lane;
 * every lane of the warp calls it together. Lane 8m + r gives in `row` the address of row r
 * of matrix m (16 bytes, 16-byte aligned, in shared memory; lanes 8 count and up give
 * anything) and reads it through the shared-memory checks as its own access at `site`. The
 * lane receives in dst[m], for each matrix m: elements (lane / 4, 2 (lane % 4)) and
 * (lane / 4, 2 (lane % 4) + 1) of the matrix, low half first; with trans, elements
 * (2 (lane % 4), lane / 4) and (2 (lane % 4) + 1, lane / 4). */
void tilec_emu_ldmatrix(tilec_emu_thread* ctx, uint32_t count, uint32_t trans, const void* row, uint32_t* dst,
                        const char* site);

/* cp.async.cg.shared.global [dst], [src], 16, src_bytes (0 or 16): an asynchronous copy of 16
 * bytes from global memory at `src` (checked and counted like tilec_emu_load when src_bytes
 * is 16; with 0 it reads nothing and the 16 bytes become zeros) to shared memory at `dst`
 * (16-byte aligned). It belongs to the calling thread's open group until
 * tilec_emu_cp_async_commit closes it. tilec_emu_cp_async_wait(n) (cp.async.wait_group n)
 * lands the copies of every closed group but the newest n, each as a shared-memory store by
 * the issuing thread at that moment, through the race and bounds checks: a read of the bytes
 * before the wait (and the barrier after it, for other threads) is an error, as on a GPU it
 * would read stale data. A thread that finishes with copies never waited for is an error. */
void tilec_emu_cp_async(tilec_emu_thread* ctx, void* dst, const void* src, uint32_t src_bytes, const char* site);
void tilec_emu_cp_async_commit(tilec_emu_thread* ctx);
void tilec_emu_cp_async_wait(tilec_emu_thread* ctx, uint32_t groups);

/* Hopper's warpgroup MMA, for the threads of one warpgroup (threads 128 q .. 128 q + 127) calling
 * together. wgmma.mma_async.sync.aligned.m64n{n}k16.f32.T.T (T = f16, dtype 2, or bf16, 3; n a
 * multiple of 8 up to 256), or m64n{n}k32 with 8-bit floats (e4m3, dtype 4; e5m2, 5; K-major
 * only, and 32 in place of 16 below): D = A B + (scale_d ? C : +0), A 64 x 16 and B 16 x n in shared
 * memory as the 64-bit matrix descriptors desc_a and desc_b describe them (PTX ISA, "Matrix
 * Descriptor Format": start address, leading and stride byte offsets, no swizzle or a 32-,
 * 64- or 128-byte one; the start address is the byte offset in the block's region, which the
 * GPU places at a multiple of 1024), K-major or, with bit 0 (A) or 1 (B) of `trans` (the
 * instruction's imm-trans-a, imm-trans-b), M- or N-major, acc[n / 2] the thread's accumulator in and its part of D out, owned as PTX says:
 * acc[i] is row 16 (warp % 4) + lane / 4 + 8 ((i / 2) % 2), column 8 (i / 4) + 2 (lane % 4) + i % 2.
 * Each element is C + the 16 exact products added in f32 in k order, as tilec_emu_mma_m16n8k16.
 * Every thread of the warpgroup must pass the same dtype, n, descriptors and scale_d. The
 * operands are read through the shared-memory checks (bounds, unwritten bytes, races) as the
 * warpgroup's first thread; a byte written by a thread that has not run fence_proxy_async
 * since is an error (wgmma reads through the async proxy), as is a wgmma with no wgmma_fence
 * since the thread's last wgmma_wait (or its start), a shared-memory write to bytes a wgmma
 * reads before a wgmma_wait retires it, and a thread that finishes with wgmmas not waited for.
 * wgmma_commit closes the thread's group of wgmmas; wgmma_wait(n) retires all but the newest n
 * closed groups. The result is delivered asynchronously, as on the GPU: until a wgmma_wait
 * retires its group, the accumulator's registers hold tags (NaNs whose payload names the
 * result and register), which a later wgmma takes as its accumulator (chaining) and which a
 * store, shared-memory store, conversion, shuffle or atomic reports as a read before the wait;
 * the wait writes the result into `acc` (which must still be there). A kernel that copies the
 * registers out (as generated code does) passes the copies through
 * tilec_emu_wgmma_fence_operands after the wait: it replaces the tags of retired results by
 * their values and leaves the others. */
void tilec_emu_wgmma(tilec_emu_thread* ctx, uint32_t dtype, uint32_t n, uint64_t desc_a, uint64_t desc_b,
                     uint32_t scale_d, uint32_t trans, float* acc, const char* site);
/* The same with A (64 x 16, 16-bit) from registers rather than shared memory: `a` holds the
 * thread's four 32-bit A fragment registers, each two elements, the lower half first, as
 * mma.m16n8k16's A fragments are for warp (tid / 32) % 4's 16 rows: register r holds row
 * 16 (warp % 4) + lane / 4 + 8 (r % 2), columns 8 (r / 2) + 2 (lane % 4) and the next one.
 * `trans` bit 1 says B is N-major (A in registers has no transpose). Every thread of the
 * warpgroup must call the same one of the two. */
void tilec_emu_wgmma_rs(tilec_emu_thread* ctx, uint32_t dtype, uint32_t n, const uint32_t* a, uint64_t desc_b,
                        uint32_t scale_d, uint32_t trans, float* acc, const char* site);
void tilec_emu_wgmma_fence(tilec_emu_thread* ctx);
void tilec_emu_wgmma_commit(tilec_emu_thread* ctx);
void tilec_emu_wgmma_wait(tilec_emu_thread* ctx, uint32_t groups);
void tilec_emu_wgmma_fence_operands(tilec_emu_thread* ctx, float* regs, uint32_t count);
/* fence.proxy.async.shared::cta: the calling thread's shared-memory writes so far become
 * visible to the async proxy (wgmma's operand reads). */
void tilec_emu_fence_proxy_async(tilec_emu_thread* ctx);

/* Hopper's TMA and mbarriers. A tensor map is what the launch passes for each of the module's
 * [[tensor_maps]], after its parameters (args[i] points at the map itself): */
typedef struct tilec_emu_tensor_map {
  uint64_t base;        /* the tensor's first element */
  uint64_t sizes[5];    /* elements, innermost first */
  uint64_t strides[5];  /* bytes, innermost first ([0]: the element's size) */
  uint32_t box[5];      /* the box a copy moves, innermost first */
  uint32_t rank;        /* 1 to 5 */
  uint32_t swizzle;     /* 0, 32, 64 or 128 */
} tilec_emu_tensor_map;
/* An mbarrier is 8 bytes of shared memory (8-byte aligned) that mbarrier_init (one thread)
 * gives an arrival count; a phase completes when that many arrivals and every byte they
 * expect (arrive_expect_tx) have come, and the next begins. mbarrier_wait(parity) blocks until
 * the phase of that parity has completed: the calling thread's phases must be waited in order
 * (an error otherwise, as is waiting for a phase a later one has already overtaken). tma_load
 * copies the box of `map` at `coords` (rank of them, innermost first; coordinates outside the
 * tensor give zeros, as do negative ones) into shared memory at `dst` in the map's swizzle
 * (16-byte chunk c of each 128-byte line of the region XOR-ed with the line's row within the
 * pattern, by absolute offset), the global reads checked and counted like tilec_emu_load, and
 * completes its bytes on `bar` at once. Its bytes belong to the phase: reading them (a load,
 * ldmatrix or wgmma) before waiting for it is an error, as is writing them while another
 * thread may read them, or a block that ends with a phase begun and not completed. */
void tilec_emu_mbarrier_init(tilec_emu_thread* ctx, void* bar, uint32_t count);
void tilec_emu_mbarrier_arrive_expect_tx(tilec_emu_thread* ctx, void* bar, uint32_t bytes, const char* site);
void tilec_emu_mbarrier_wait(tilec_emu_thread* ctx, void* bar, uint32_t parity, const char* site);
/* One arrival on `bar` (mbarrier.arrive): the calling thread's shared-memory reads and retired
 * warpgroup MMAs before it are ordered before the accesses of any thread that then waits for
 * the phase (a producer refilling the stage its consumers arrived on). */
void tilec_emu_mbarrier_arrive(tilec_emu_thread* ctx, void* bar, const char* site);
void tilec_emu_tma_load(tilec_emu_thread* ctx, void* dst, const tilec_emu_tensor_map* map, uint32_t rank, int32_t c0,
                        int32_t c1, int32_t c2, int32_t c3, int32_t c4, void* bar, const char* site);
/* A TMA store: the box of `map` at `coords` from shared memory at `src` (laid out as tma_load
 * writes it), the elements inside the tensor written to global memory (checked and counted
 * like tilec_emu_store), the others dropped. Each byte read must have been fenced by its writer
 * (fence_proxy_async) and ordered by a barrier, as the shared-memory checks say. The store joins
 * the thread's open bulk group, which bulk_commit closes; bulk_wait(n) waits until all but
 * the newest n closed groups have completed (read their shared memory, written the global
 * elements): writing those bytes before, or finishing without the wait, is an error. */
void tilec_emu_tma_store(tilec_emu_thread* ctx, const void* src, const tilec_emu_tensor_map* map, uint32_t rank,
                         int32_t c0, int32_t c1, int32_t c2, int32_t c3, int32_t c4, const char* site);
void tilec_emu_bulk_commit(tilec_emu_thread* ctx);
void tilec_emu_bulk_wait(tilec_emu_thread* ctx, uint32_t groups);

/* Global memory. `bytes` is 1, 2, 4, 8 or 16, and addr is aligned to it. The
 * emulator checks [addr, addr + bytes) against the launch's buffers (an error
 * names the kernel, the buffer and the offset) and counts the bytes. Masked-off
 * lanes never call these. */
void tilec_emu_load(tilec_emu_thread* ctx, const void* addr, uint32_t bytes, void* dst);
void tilec_emu_store(tilec_emu_thread* ctx, void* addr, uint32_t bytes, const void* src);
/* Atomic read-modify-write; returns the old value. `op` is a tilec::AtomicOp code
 * (abi/atomic_ops.h: 0 add, 1 max, 2 min, 3 and, 4 or, 5 xor, 6 xchg, 7 cas), which also
 * defines what is stored; `cmp` is cas's compare value (unused otherwise). The add forms are
 * op 0. */
float tilec_emu_atomic_f32(tilec_emu_thread* ctx, float* addr, int32_t op, float value, float cmp);
int32_t tilec_emu_atomic_i32(tilec_emu_thread* ctx, int32_t* addr, int32_t op, int32_t value, int32_t cmp);
float tilec_emu_atomic_add_f32(tilec_emu_thread* ctx, float* addr, float value);
int32_t tilec_emu_atomic_add_i32(tilec_emu_thread* ctx, int32_t* addr, int32_t value);

/* f16 / bf16 <-> f32, round to nearest even (see abi/float16.h). They never use ctx, which
 * may be null. */
float tilec_emu_f16_to_f32(tilec_emu_thread* ctx, uint16_t bits);
uint16_t tilec_emu_f32_to_f16(tilec_emu_thread* ctx, float value);
float tilec_emu_bf16_to_f32(tilec_emu_thread* ctx, uint16_t bits);
uint16_t tilec_emu_f32_to_bf16(tilec_emu_thread* ctx, float value);
/* A device_assert failed: stops the launch with `where` ("file:line: message"), the block
 * and the thread. */
void tilec_emu_assert_fail(tilec_emu_thread* ctx, const char* where);
/* device_print: every thread calls print_op once per print op it runs, then print for each
 * element it owns: its row-major index in a tile of `shape` ("4x8"; "" for a scalar) and its
 * value (kind, tilec::PrintedValue: 1 fvalue, 0 ivalue as signed, 2 as unsigned). The lines are written, in (block, op, element)
 * order, when the launch ends (abi/device_print.h). */
void tilec_emu_print_op(tilec_emu_thread* ctx);
void tilec_emu_print(tilec_emu_thread* ctx, const char* prefix, const char* shape, int64_t element,
                     int32_t kind, int64_t ivalue, float fvalue);
/* PTX's fp8 pair conversions (format 0 e4m3, 1 e5m2; see abi/float8.h), for the nvptx
 * lowering run on the CPU: cvt.rn.f16x2.{e4m3x2,e5m2x2} (the byte at bits 8k..8k+7 gives
 * the f16 at bits 16k..16k+15) and cvt.rn.satfinite.{e4m3x2,e5m2x2}.f32 (`hi` lands in the
 * upper byte, `lo` in the lower). */
uint32_t tilec_emu_fp8x2_to_f16x2(tilec_emu_thread* ctx, uint16_t pair, uint32_t format);
uint16_t tilec_emu_f32x2_to_fp8x2(tilec_emu_thread* ctx, float hi, float lo, uint32_t format);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif

#endif
