// The emulator on hand-written emu-ABI kernels (C, built with cc): scheduling, barriers,
// shuffles, atomics under many OS threads, and the errors it must report instead of
// crashing or hanging.
#include <catch2/catch.hpp>

#include "abi/float16.h"
#include "runtime/emulator/emulator.h"
#include "tests/runtime/helpers.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <vector>

using namespace tilec::rt;
using namespace tilec::rt::test;

namespace {

const char* kKernels = R"C(
#include "abi/emu_abi.h"

#define ARG(T, i) (*(T const*)args[i])

/* out[block * threads + tid] = block id x,y,z and thread id packed; checks the ids. */
void ids(tilec_emu_thread* c, void* const* args) {
  int32_t* out = ARG(int32_t*, 0);
  uint32_t nx = tilec_emu_num_blocks(c, 0), ny = tilec_emu_num_blocks(c, 1);
  uint32_t b = tilec_emu_block_id(c, 0) + nx * (tilec_emu_block_id(c, 1) + ny * tilec_emu_block_id(c, 2));
  uint32_t i = b * tilec_emu_block_dim(c) + tilec_emu_thread_id(c);
  int32_t v = (int32_t)(b * 10000 + tilec_emu_thread_id(c));
  tilec_emu_store(c, &out[i], 4, &v);
}

/* Reverses each block's values through shared memory (needs the barrier), then a warp
   sum by shuffle-xor and a broadcast of lane 3 by shuffle-idx. */
void shared_and_shuffles(tilec_emu_thread* c, void* const* args) {
  const int32_t* in = ARG(int32_t*, 0);
  int32_t* rev = ARG(int32_t*, 1);
  int32_t* sums = ARG(int32_t*, 2);
  int32_t* lane3 = ARG(int32_t*, 3);
  uint32_t t = tilec_emu_thread_id(c), n = tilec_emu_block_dim(c), b = tilec_emu_block_id(c, 0);
  int32_t* smem = (int32_t*)tilec_emu_shared_base(c);
  int32_t v;
  tilec_emu_load(c, &in[b * n + t], 4, &v);
  smem[t] = v;
  tilec_emu_barrier(c, 0);
  int32_t r = smem[n - 1 - t];
  tilec_emu_barrier(c, 1);
  smem[t] = 0;
  tilec_emu_store(c, &rev[b * n + t], 4, &r);
  uint32_t s = (uint32_t)v;
  for (uint32_t m = 16; m; m >>= 1) s += tilec_emu_shfl_xor(c, s, m);
  int32_t si = (int32_t)s;
  tilec_emu_store(c, &sums[b * n + t], 4, &si);
  int32_t l3 = (int32_t)tilec_emu_shfl_idx(c, (uint32_t)v, 3);
  tilec_emu_store(c, &lane3[b * n + t], 4, &l3);
}

/* Every thread of every block adds 1 to one counter (i32 and f32). */
void atomics(tilec_emu_thread* c, void* const* args) {
  tilec_emu_atomic_add_i32(c, ARG(int32_t*, 0), 1);
  tilec_emu_atomic_add_f32(c, ARG(float*, 1), 1.0f);
}

/* Thread t stores to out[t + offset]: out of bounds when offset pushes past the end. */
void store_at(tilec_emu_thread* c, void* const* args) {
  float* out = ARG(float*, 0);
  int64_t offset = ARG(int64_t, 1);
  float v = 1.0f;
  tilec_emu_store(c, out + (int64_t)tilec_emu_thread_id(c) + offset, 4, &v);
}

/* shfl.sync.bfly as the nvptx lowering emits it, with the member mask and c operand given:
   out[tid] = the value of lane tid ^ 1. */
void shfl_sync_bfly(tilec_emu_thread* c, void* const* args) {
  int32_t* out = ARG(int32_t*, 0);
  uint32_t t = tilec_emu_thread_id(c);
  int32_t v = (int32_t)tilec_emu_shfl_sync(c, 1, ARG(uint32_t, 1), t, 1, ARG(uint32_t, 2));
  tilec_emu_store(c, &out[t], 4, &v);
}

/* One warp MMA with fragments gathered by PTX's ownership from a (16x16 f16 bits, row-major),
   b (16x8) and c (16x8 f32); each lane writes its d fragment back by the same ownership. */
void mma_ref(tilec_emu_thread* c, void* const* args) {
  const uint16_t* A = ARG(uint16_t*, 0);
  const uint16_t* B = ARG(uint16_t*, 1);
  const float* C = ARG(float*, 2);
  float* D = ARG(float*, 3);
  uint32_t lane = tilec_emu_thread_id(c), g = lane / 4, t2 = 2 * (lane % 4);
  uint16_t h[2];
  uint32_t a[4], b[2];
  float cf[4], d[4];
#define PAIR(dst, p0, p1) do { tilec_emu_load(c, p0, 2, &h[0]); tilec_emu_load(c, p1, 2, &h[1]); \
    dst = (uint32_t)h[0] | (uint32_t)h[1] << 16; } while (0)
  PAIR(a[0], &A[g * 16 + t2], &A[g * 16 + t2 + 1]);
  PAIR(a[1], &A[(g + 8) * 16 + t2], &A[(g + 8) * 16 + t2 + 1]);
  PAIR(a[2], &A[g * 16 + t2 + 8], &A[g * 16 + t2 + 9]);
  PAIR(a[3], &A[(g + 8) * 16 + t2 + 8], &A[(g + 8) * 16 + t2 + 9]);
  PAIR(b[0], &B[t2 * 8 + g], &B[(t2 + 1) * 8 + g]);
  PAIR(b[1], &B[(t2 + 8) * 8 + g], &B[(t2 + 9) * 8 + g]);
  tilec_emu_load(c, &C[g * 8 + t2], 4, &cf[0]);
  tilec_emu_load(c, &C[g * 8 + t2 + 1], 4, &cf[1]);
  tilec_emu_load(c, &C[(g + 8) * 8 + t2], 4, &cf[2]);
  tilec_emu_load(c, &C[(g + 8) * 8 + t2 + 1], 4, &cf[3]);
  tilec_emu_mma_m16n8k16(c, 2, a, b, cf, d);
  tilec_emu_store(c, &D[g * 8 + t2], 4, &d[0]);
  tilec_emu_store(c, &D[g * 8 + t2 + 1], 4, &d[1]);
  tilec_emu_store(c, &D[(g + 8) * 8 + t2], 4, &d[2]);
  tilec_emu_store(c, &D[(g + 8) * 8 + t2 + 1], 4, &d[3]);
}

/* Four 8x8 b16 matrices at rows of 16 bytes in shared memory (matrix m, row r: shared row
   8m + r, values 64m + 8r + col); one ldmatrix.x4 (trans when args[1] is 1); lane writes its
   four registers to out[4 lane ..]. */
void ldmatrix_ref(tilec_emu_thread* c, void* const* args) {
  uint32_t* out = ARG(uint32_t*, 0);
  uint32_t trans = ARG(uint32_t, 1);
  uint32_t lane = tilec_emu_thread_id(c);
  uint16_t* sm = (uint16_t*)tilec_emu_shared_base(c);
  for (uint32_t i = 0; i < 8; ++i) {
    uint16_t v = (uint16_t)(lane * 8 + i);
    tilec_emu_shared_store(c, &sm[lane * 8 + i], 2, &v, "ldmatrix_ref write", 0);
  }
  tilec_emu_barrier(c, 0);
  uint32_t r[4];
  tilec_emu_ldmatrix(c, 4, trans, &sm[lane * 8], r, "ldmatrix_ref read");
  tilec_emu_store(c, &out[4 * lane], 16, r);
}

/* Thread t copies in[4t .. 4t+3] (16 bytes) into shared memory with cp.async (zero-filled for
   odd t when args[2] says so), then, by args[1]: 0 commit, wait, barrier, read the
   neighbour's copy; 1 no wait at all; 2 read its own copy before the wait; 3 wait but no
   barrier before reading the neighbour's. out[t] = the neighbour's first value. */
void cp_async_ref(tilec_emu_thread* c, void* const* args) {
  const float* in = ARG(float*, 0);
  int32_t mode = ARG(int32_t, 1), zero_odd = ARG(int32_t, 2);
  float* out = ARG(float*, 3);
  uint32_t t = tilec_emu_thread_id(c), n = tilec_emu_block_dim(c);
  float* sm = (float*)tilec_emu_shared_base(c);
  tilec_emu_cp_async(c, &sm[4 * t], &in[4 * t], zero_odd && (t & 1) ? 0 : 16, "cp_async_ref copy");
  tilec_emu_cp_async_commit(c);
  float v;
  if (mode == 1) return;
  if (mode == 2) tilec_emu_shared_load(c, &sm[4 * t], 4, &v, "cp_async_ref early read");
  tilec_emu_cp_async_wait(c, 0);
  if (mode != 3) tilec_emu_barrier(c, 0);
  tilec_emu_shared_load(c, &sm[4 * ((t + 1) % n)], 4, &v, "cp_async_ref read");
  tilec_emu_store(c, &out[t], 4, &v);
}

/* The refill of a pipeline buffer. Every thread copies into its slot, waits, barriers and
   reads its neighbour's slot; then copies into its own slot again, by args[1]:
   0 after a barrier (correct), then waits, barriers, reads the neighbour's;
   1 with no barrier (the neighbour may still be reading it);
   2 with no barrier, then a barrier, then the wait (the copy may land before the barrier);
   3 after a barrier, then reads its own slot before the wait. out[t] = the last value read. */
void cp_async_refill(tilec_emu_thread* c, void* const* args) {
  const float* in = ARG(float*, 0);
  int32_t mode = ARG(int32_t, 1);
  float* out = ARG(float*, 2);
  uint32_t t = tilec_emu_thread_id(c), n = tilec_emu_block_dim(c);
  float* sm = (float*)tilec_emu_shared_base(c);
  float v;
  tilec_emu_cp_async(c, &sm[4 * t], &in[4 * t], 16, "refill first copy");
  tilec_emu_cp_async_commit(c);
  tilec_emu_cp_async_wait(c, 0);
  tilec_emu_barrier(c, 0);
  tilec_emu_shared_load(c, &sm[4 * ((t + 1) % n)], 4, &v, "refill first read");
  if (mode == 0 || mode == 3) tilec_emu_barrier(c, 0);
  tilec_emu_cp_async(c, &sm[4 * t], &in[4 * n + 4 * t], 16, "refill second copy");
  tilec_emu_cp_async_commit(c);
  if (mode == 3) tilec_emu_shared_load(c, &sm[4 * t], 4, &v, "refill early own read");
  if (mode == 2) tilec_emu_barrier(c, 0);
  tilec_emu_cp_async_wait(c, 0);
  tilec_emu_barrier(c, 0);
  tilec_emu_shared_load(c, &sm[4 * ((t + 1) % n)], 4, &v, "refill second read");
  tilec_emu_store(c, &out[t], 4, &v);
}

/* A 16-byte load from a 4-byte aligned address. */
void misaligned(tilec_emu_thread* c, void* const* args) {
  const float* in = ARG(float*, 0);
  char tmp[16];
  tilec_emu_load(c, in + 1, 16, tmp);
}

/* The first 16 threads wait at a barrier the others never reach. */
void divergent_barrier(tilec_emu_thread* c, void* const* args) {
  if (tilec_emu_thread_id(c) < 16) tilec_emu_barrier(c, 0);
}

/* Two warps at two different barriers. */
void different_barriers(tilec_emu_thread* c, void* const* args) {
  if (tilec_emu_thread_id(c) < 32) {
    tilec_emu_barrier(c, 0);
  } else {
    tilec_emu_barrier(c, 1);
    tilec_emu_barrier(c, 2);
  }
}

/* Shared memory through the checked hooks, in a pattern chosen by `mode`:
   0 correct (write, barrier, read a neighbour's, barrier, overwrite);
   1 read after write with no barrier; 2 write after read with no barrier;
   3 two threads write different values to one slot; 4 every thread writes the same value
   to one slot (replicated owners: fine); 5 a read past the shared size; 6 a read of a slot
   nobody wrote. out[tid] = the value read. */
void shared_checked(tilec_emu_thread* c, void* const* args) {
  int32_t* out = ARG(int32_t*, 0);
  int32_t mode = ARG(int32_t, 1);
  uint32_t t = tilec_emu_thread_id(c), n = tilec_emu_block_dim(c);
  char* smem = (char*)tilec_emu_shared_base(c);
  int32_t v = (int32_t)t * 10, r = -1, same = 7;
  if (mode == 3 || mode == 4) {
    tilec_emu_shared_store(c, smem, 4, mode == 3 ? &v : &same, "site:one slot", 0);
  } else if (mode == 5) {
    tilec_emu_shared_load(c, smem + 4 * n, 4, &r, "site:past the end");
  } else if (mode == 6) {
    if (t == 0) tilec_emu_shared_store(c, smem, 4, &v, "site:slot 0", 0);
    tilec_emu_barrier(c, 0);
    tilec_emu_shared_load(c, smem + 4, 4, &r, "site:slot 1");
  } else {
    tilec_emu_shared_store(c, smem + 4 * t, 4, &v, "site:write own", 0);
    if (mode != 1) tilec_emu_barrier(c, 0);
    tilec_emu_shared_load(c, smem + 4 * ((t + 1) % n), 4, &r, "site:read neighbour");
    if (mode != 2) tilec_emu_barrier(c, 1);
    int32_t z = 0;
    tilec_emu_shared_store(c, smem + 4 * t, 4, &z, "site:overwrite own", 0);
  }
  tilec_emu_store(c, &out[t], 4, &r);
}

/* out[order++] = tid: the order the threads first run in. */
void run_order(tilec_emu_thread* c, void* const* args) {
  int32_t* out = ARG(int32_t*, 0);
  int32_t* next = ARG(int32_t*, 1);
  int32_t at = tilec_emu_atomic_add_i32(c, next, 1);
  int32_t t = (int32_t)tilec_emu_thread_id(c);
  tilec_emu_store(c, &out[at], 4, &t);
}

/* Lane 0 of each warp skips a shuffle the other lanes wait in. */
void divergent_shuffle(tilec_emu_thread* c, void* const* args) {
  if (tilec_emu_thread_id(c) % 32 != 0) tilec_emu_shfl_xor(c, 1, 1);
}
/* Warpgroup MMA, 128 threads: A (64 x 16) and B (16 x 16, as B[n][k]) f16 bits from args[0],
   args[1] staged in shared memory by swizzle args[2] (0: none, in 8 x 16-byte core matrices;
   32, 64 or 128 bytes: chunk c of row r at c ^ ((r / (128 / s)) % (s / 16))), then one
   wgmma m64n16k16; out (args[4]) = D as [64][16]. args[3] is the mistake to make: 0 none,
   1 no fence.proxy.async, 2 a write to A before the wait, 3 no wgmma.fence, 4 no wait,
   5 thread 5 passes another descriptor, 6 the fence after the barrier instead of before,
   7 B's descriptor starting 128 bytes into its swizzle pattern. */
static uint32_t staged(int32_t swz, uint32_t rows, uint32_t row, uint32_t kb) {
  if (swz == 0) return (kb / 16) * (rows * 16) + row * 16 + kb % 16;
  uint32_t per = 128 / (uint32_t)swz, chunks = (uint32_t)swz / 16;
  return row * (uint32_t)swz + 16 * ((kb / 16) ^ ((row / per) % chunks)) + kb % 16;
}
static uint64_t descriptor(int32_t swz, uint32_t start, uint32_t rows) {
  uint64_t lbo = swz == 0 ? rows * 16 : 16, sbo = swz == 0 ? 128 : 8 * (uint64_t)swz;
  uint64_t mode = swz == 128 ? 1 : swz == 64 ? 2 : swz == 32 ? 3 : 0;
  return (uint64_t)(start >> 4) | (lbo >> 4) << 16 | (sbo >> 4) << 32 | mode << 62;
}
void wgmma_ref(tilec_emu_thread* c, void* const* args) {
  const uint16_t* a = ARG(uint16_t*, 0);
  const uint16_t* b = ARG(uint16_t*, 1);
  int32_t swz = ARG(int32_t, 2), mode = ARG(int32_t, 3);
  float* out = ARG(float*, 4);
  uint32_t t = tilec_emu_thread_id(c);
  uint8_t* sm = (uint8_t*)tilec_emu_shared_base(c);
  for (uint32_t i = t; i < 64 * 16 + 16 * 16; i += 128) {
    int is_b = i >= 64 * 16;
    uint32_t e = is_b ? i - 64 * 16 : i, row = e / 16, k = e % 16;
    uint16_t v;
    tilec_emu_load(c, is_b ? &b[e] : &a[e], 2, &v);
    tilec_emu_shared_store(c, sm + (is_b ? 8192 : 0) + staged(swz, is_b ? 16 : 64, row, 2 * k), 2, &v, "wgmma_ref stage", 2);
  }
  if (mode != 1 && mode != 6) tilec_emu_fence_proxy_async(c);
  tilec_emu_barrier(c, 0);
  if (mode == 6) tilec_emu_fence_proxy_async(c); /* too late: after the barrier */
  float acc[8] = {0};
  if (mode != 3) tilec_emu_wgmma_fence(c);
  uint64_t da = descriptor(swz, 0, 64), db = descriptor(swz, 8192, 16);
  if (mode == 5 && t == 5) da += 1;
  if (mode == 7) db += 128 >> 4;
  tilec_emu_wgmma(c, 2, 16, da, db, 0, 0, acc, "wgmma_ref mma");
  tilec_emu_wgmma_commit(c);
  if (mode == 2 && t == 0) {
    uint16_t z = 0;
    tilec_emu_shared_store(c, sm + 16, 2, &z, "wgmma_ref early write", 2);
  }
  if (mode == 4) return;
  tilec_emu_wgmma_wait(c, 0);
  uint32_t w = t / 32, g = (t % 32) / 4, q = t % 4;
  for (uint32_t i = 0; i < 8; ++i) {
    uint32_t row = 16 * w + g + 8 * ((i / 2) % 2), col = 8 * (i / 4) + 2 * q + i % 2;
    tilec_emu_store(c, &out[row * 16 + col], 4, &acc[i]);
  }
}

/* A TMA copy of the 16 x 64 box at (r0, c0) of a rows x cols u16 tensor (the launch's tensor
   map, after the parameters) into shared memory at 1024, 128-byte swizzled, completing on the
   mbarrier at 0; every thread then reads the box back (unswizzled) into out. Modes: 0 right;
   1 reads before the wait; 2 waits for the wrong parity; 3 arms the mbarrier for more bytes
   than come (the wait never returns); 4 arms it for more and never waits (the block ends with
   the phase begun); 5 a second copy over the first while thread 0 reads it, no barrier; 6 the
   issuer writes the box before waiting; 7 an ordinary write of the box, unfenced, before the
   barrier ahead of the copy. */
static uint32_t unswizzled(uint32_t off) { return off ^ (((off >> 7) & 7) << 4); }
void tma_ref(tilec_emu_thread* c, void* const* args) {
  int32_t r0 = ARG(int32_t, 3), c0 = ARG(int32_t, 4), mode = ARG(int32_t, 5);
  uint16_t* out = ARG(uint16_t*, 6);
  const tilec_emu_tensor_map* map = (const tilec_emu_tensor_map*)args[7];
  uint32_t t = tilec_emu_thread_id(c);
  uint8_t* sm = (uint8_t*)tilec_emu_shared_base(c);
  uint16_t mark = 0xbeef;
  if (t == 0) tilec_emu_mbarrier_init(c, sm, 1);
  if (t == 0 && mode == 7) tilec_emu_shared_store(c, sm + 1024, 2, &mark, "tma_ref early write", 0);
  tilec_emu_barrier(c, 0);
  if (t == 0) {
    tilec_emu_mbarrier_arrive_expect_tx(c, sm, 16 * 128 + (mode == 3 || mode == 4 ? 16 : 0), "tma_ref arm");
    tilec_emu_tma_load(c, sm + 1024, map, 2, c0, r0, 0, 0, 0, sm, "tma_ref copy");
    if (mode == 6) tilec_emu_shared_store(c, sm + 1024, 2, &mark, "tma_ref write before the wait", 0);
  }
  if (mode == 4 || (mode == 1 && t != 0)) return; /* mode 1: the issuer alone reads, in any schedule */
  if (mode != 1) tilec_emu_mbarrier_wait(c, sm, mode == 2 ? 1 : 0, "tma_ref wait");
  for (uint32_t i = t; i < 16 * 64; i += tilec_emu_block_dim(c)) {
    uint16_t v;
    tilec_emu_shared_load(c, sm + unswizzled(1024 + 2 * i), 2, &v, "tma_ref read");
    tilec_emu_store(c, &out[i], 2, &v);
  }
  if (mode == 5 && t == 1) {
    tilec_emu_mbarrier_arrive_expect_tx(c, sm, 16 * 128, "tma_ref arm again");
    tilec_emu_tma_load(c, sm + 1024, map, 2, c0 + 8, r0, 0, 0, 0, sm, "tma_ref copy again");
    tilec_emu_mbarrier_wait(c, sm, 1, "tma_ref wait again");
  }
}

/* A TMA store of a 16 x 64 u16 box at (r0, c0) written by every thread into shared memory at
   1024 (128-byte swizzled) from src's values, by thread 0. Modes: 0 right; 1 no
   fence.proxy.async before the barrier; 2 thread 3 overwrites the staging before thread 0's
   wait, after a barrier; 3 thread 0 never waits. */
void tma_store_ref(tilec_emu_thread* c, void* const* args) {
  const uint16_t* src = ARG(uint16_t*, 0);
  int32_t r0 = ARG(int32_t, 3), c0 = ARG(int32_t, 4), mode = ARG(int32_t, 5);
  const tilec_emu_tensor_map* map = (const tilec_emu_tensor_map*)args[7];
  uint32_t t = tilec_emu_thread_id(c);
  uint8_t* sm = (uint8_t*)tilec_emu_shared_base(c);
  for (uint32_t i = t; i < 16 * 64; i += tilec_emu_block_dim(c)) {
    uint16_t v;
    tilec_emu_load(c, &src[i], 2, &v);
    tilec_emu_shared_store(c, sm + unswizzled(1024 + 2 * i), 2, &v, "tma_store_ref stage", 0);
  }
  if (mode != 1) tilec_emu_fence_proxy_async(c);
  tilec_emu_barrier(c, 0);
  if (t == 0) {
    tilec_emu_tma_store(c, sm + 1024, map, 2, c0, r0, 0, 0, 0, "tma_store_ref store");
    tilec_emu_bulk_commit(c);
  }
  if (mode == 2) {
    tilec_emu_barrier(c, 1);
    uint16_t z = 1;
    if (t == 3) tilec_emu_shared_store(c, sm + 1024, 2, &z, "tma_store_ref overwrite", 0);
  }
  if (t == 0 && mode != 3) tilec_emu_bulk_wait(c, 0);
}
)C";

// Builds the kernels above once per process (at -O0, so branches keep their own barriers).
const std::filesystem::path& kernel_library() {
  static TempDir dir;
  static std::filesystem::path lib = [] {
    std::ofstream(dir.path / "kernels.c") << kKernels;
    std::filesystem::path so = dir.path / "kernels.so";
    Output o = run_command("cc -O0 -shared -fPIC -I " + quoted(TILEC_SOURCE_DIR) + " -o " + quoted(so) + " " +
                           quoted(dir.path / "kernels.c"));
    INFO(o.text);
    REQUIRE(o.status == 0);
    return so;
  }();
  return lib;
}

Manifest manifest(const std::string& symbol, std::vector<ModuleParam> params, int threads, int shared = 0) {
  Manifest m;
  m.kernel = symbol;
  m.symbol = symbol;
  m.arch = "host";
  m.emulator = kernel_library();
  m.params = std::move(params);
  m.threads_per_block = threads;
  m.shared_bytes = shared;
  return m;
}

ParamType ptr(ScalarType t) { return {t, true}; }
ParamType scalar(ScalarType t) { return {t, false}; }

template <class T> Arg buf(std::vector<T>& v) {
  return Arg::buffer(reinterpret_cast<std::uint64_t>(v.data()), v.size() * sizeof(T));
}

std::string error_of(const EmuModule& m, Dim3 grid, std::vector<Arg> args,
                     std::vector<std::string> names = {}) {
  try {
    m.launch(grid, args, names);
  } catch (const EmulationError& e) {
    return e.what();
  }
  return "";
}

} // namespace

TEST_CASE("emulator: block and thread ids over a 3-d grid on several workers", "[emulator]") {
  EmuModule m(manifest("ids", {{"out", ptr(ScalarType::i32)}}, 64));
  Dim3 grid{3, 2, 4};
  std::vector<std::int32_t> out(3 * 2 * 4 * 64, -1);
  for (int workers : {1, 3}) {
    EmuOptions o;
    o.workers = workers;
    std::vector<Arg> args{buf(out)};
    EmuLaunchStats st = m.launch(grid, args, {}, o);
    for (std::size_t i = 0; i < out.size(); ++i) REQUIRE(out[i] == std::int32_t(i / 64 * 10000 + i % 64));
    CHECK(st.bytes_stored == std::int64_t(out.size() * 4));
    CHECK(st.bytes_loaded == 0);
    CHECK(st.unique_bytes == std::int64_t(out.size() * 4));
    REQUIRE(st.buffers.size() == 1);
    CHECK(st.buffers[0].name == "out");
  }
}

TEST_CASE("emulator: shared memory, barriers and warp shuffles", "[emulator]") {
  const int threads = 96, blocks = 5; // a partial warp count is fine: 3 full warps
  EmuModule m(manifest("shared_and_shuffles",
                       {{"in", ptr(ScalarType::i32)},
                        {"rev", ptr(ScalarType::i32)},
                        {"sums", ptr(ScalarType::i32)},
                        {"lane3", ptr(ScalarType::i32)}},
                       threads, threads * 4));
  std::vector<std::int32_t> in(threads * blocks), rev(in.size()), sums(in.size()), lane3(in.size());
  for (std::size_t i = 0; i < in.size(); ++i) in[i] = std::int32_t(i * 7 % 101);
  std::vector<Arg> args{buf(in), buf(rev), buf(sums), buf(lane3)};
  m.launch({blocks, 1, 1}, args);
  for (int b = 0; b < blocks; ++b)
    for (int t = 0; t < threads; ++t) {
      int i = b * threads + t;
      REQUIRE(rev[i] == in[b * threads + threads - 1 - t]);
      int warp = b * threads + t / 32 * 32, sum = 0;
      for (int l = 0; l < 32; ++l) sum += in[warp + l];
      REQUIRE(sums[i] == sum);
      REQUIRE(lane3[i] == in[warp + 3]);
    }
}

TEST_CASE("emulator: atomics are exact with blocks on many OS threads", "[emulator]") {
  EmuModule m(manifest("atomics", {{"count", ptr(ScalarType::i32)}, {"fcount", ptr(ScalarType::f32)}}, 128));
  std::vector<std::int32_t> count(1, 0);
  std::vector<float> fcount(1, 0.0f);
  EmuOptions o;
  o.workers = 8;
  std::vector<Arg> args{buf(count), buf(fcount)};
  EmuLaunchStats st = m.launch({200, 1, 1}, args, {}, o);
  CHECK(count[0] == 200 * 128);
  CHECK(fcount[0] == 200.0f * 128);
  CHECK(st.bytes_loaded == 2 * 4 * 200 * 128);
  CHECK(st.bytes_stored == 2 * 4 * 200 * 128);
  CHECK(st.unique_bytes == 64);
}

TEST_CASE("emulator: an out-of-bounds store names the kernel, buffer and offset", "[emulator]") {
  EmuModule m(manifest("store_at", {{"out", ptr(ScalarType::f32)}, {"offset", scalar(ScalarType::i64)}}, 32));
  std::vector<float> out(40), other(8);
  // Thread 31 writes element 40 of a 40-element buffer.
  std::string e = error_of(m, {1, 1, 1}, {buf(out), Arg(std::int64_t(9))}, {"results", ""});
  INFO(e);
  CHECK(e.find("kernel 'store_at'") != std::string::npos);
  CHECK(e.find("'results'") != std::string::npos);
  CHECK(e.find("store of 4 bytes") != std::string::npos);
  CHECK(e.find("element 40") != std::string::npos);
  CHECK(e.find("byte offset 160") != std::string::npos);
  // Far before the buffer: in no buffer at all; the message names the nearest.
  e = error_of(m, {1, 1, 1}, {buf(out), Arg(std::int64_t(-1000000))});
  INFO(e);
  CHECK(e.find("out of bounds of every buffer") != std::string::npos);
  CHECK(e.find("nearest is 'out'") != std::string::npos);
  // Every thread is out of bounds; which reports first depends on the schedule (element
  // -1000000 for thread 0 up to -999969 for thread 31).
  CHECK((e.find("element -1000000") != std::string::npos || e.find("element -9999") != std::string::npos));
  // In bounds: fine, and the emulator is usable after errors.
  CHECK(error_of(m, {2, 1, 1}, {buf(out), Arg(std::int64_t(8))}) == "");
}

TEST_CASE("emulator: a misaligned access is an error", "[emulator]") {
  EmuModule m(manifest("misaligned", {{"in", ptr(ScalarType::f32)}}, 32));
  std::vector<float> in(64);
  std::string e = error_of(m, {1, 1, 1}, {buf(in)});
  INFO(e);
  CHECK(e.find("misaligned load of 16 bytes") != std::string::npos);
  CHECK(e.find("byte offset 4 (element 1) of buffer 'in'") != std::string::npos);
}

TEST_CASE("emulator: shfl.sync takes the whole warp, another member mask or c operand is an error naming it",
          "[emulator][nvptx]") {
  EmuModule m(manifest("shfl_sync_bfly",
                       {{"out", ptr(ScalarType::i32)}, {"mask", ScalarType::i32}, {"c", ScalarType::i32}}, 64));
  std::vector<std::int32_t> out(64);
  CHECK(error_of(m, {1, 1, 1}, {buf(out), Arg(std::int32_t(-1)), Arg(std::int32_t(0x1f))}) == "");
  for (int t = 0; t < 64; ++t) CHECK(out[size_t(t)] == (t ^ 1));
  std::string e = error_of(m, {1, 1, 1}, {buf(out), Arg(std::int32_t(0xffff)), Arg(std::int32_t(0x1f))});
  INFO(e);
  CHECK(e.find("shfl.sync.bfly with member mask 0x0000ffff") != std::string::npos);
  e = error_of(m, {1, 1, 1}, {buf(out), Arg(std::int32_t(-1)), Arg(std::int32_t(0))});
  CHECK(e.find("c = 0x0") != std::string::npos);
}

TEST_CASE("emulator: a warp MMA takes its lanes' fragments by PTX's ownership", "[emulator][mma]") {
  EmuModule m(manifest("mma_ref", {{"a", ptr(ScalarType::f16)}, {"b", ptr(ScalarType::f16)},
                                   {"c", ptr(ScalarType::f32)}, {"d", ptr(ScalarType::f32)}}, 32));
  std::vector<std::uint16_t> a(256), b(128);
  std::vector<float> c(128), d(128, -1.0f);
  // Distinct small integers: every product and sum exact, and a misplaced element shows.
  for (int i = 0; i < 256; ++i) a[size_t(i)] = tilec::f32_to_f16_bits(float((i * 7) % 13 - 6));
  for (int i = 0; i < 128; ++i) b[size_t(i)] = tilec::f32_to_f16_bits(float((i * 5) % 11 - 5));
  for (int i = 0; i < 128; ++i) c[size_t(i)] = float(i % 9);
  REQUIRE(error_of(m, {1, 1, 1}, {buf(a), buf(b), buf(c), buf(d)}) == "");
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 8; ++j) {
      float want = c[size_t(i * 8 + j)];
      for (int k = 0; k < 16; ++k)
        want += tilec::f16_bits_to_f32(a[size_t(i * 16 + k)]) * tilec::f16_bits_to_f32(b[size_t(k * 8 + j)]);
      INFO("D[" << i << "][" << j << "]");
      CHECK(d[size_t(i * 8 + j)] == want);
    }
}

TEST_CASE("emulator: ldmatrix hands out rows by PTX's ownership, transposed or not", "[emulator][mma]") {
  EmuModule m(manifest("ldmatrix_ref", {{"out", ptr(ScalarType::i32)}, {"trans", ScalarType::i32}}, 32, 512));
  for (int trans : {0, 1}) {
    std::vector<std::uint32_t> out(128);
    REQUIRE(error_of(m, {1, 1, 1}, {buf(out), Arg(std::int32_t(trans))}) == "");
    for (int lane = 0; lane < 32; ++lane)
      for (int mat = 0; mat < 4; ++mat) {
        int g = lane / 4, t2 = 2 * (lane % 4);
        // Element (row, col) of matrix mat holds 64 mat + 8 row + col.
        auto elem = [&](int row, int col) { return std::uint32_t(64 * mat + 8 * row + col); };
        std::uint32_t lo = trans ? elem(t2, g) : elem(g, t2), hi = trans ? elem(t2 + 1, g) : elem(g, t2 + 1);
        INFO("trans " << trans << " lane " << lane << " matrix " << mat);
        CHECK(out[size_t(4 * lane + mat)] == (lo | hi << 16));
      }
  }
}

TEST_CASE("emulator: cp.async copies land at the wait, a read before it or without the barrier is an error",
          "[emulator][cp_async]") {
  EmuModule m(manifest("cp_async_ref", {{"in", ptr(ScalarType::f32)}, {"mode", ScalarType::i32},
                                        {"zero_odd", ScalarType::i32}, {"out", ptr(ScalarType::f32)}}, 64, 64 * 16));
  std::vector<float> in(256), out(64);
  for (int i = 0; i < 256; ++i) in[size_t(i)] = float(i + 1);
  for (int zero_odd : {0, 1}) {
    REQUIRE(error_of(m, {1, 1, 1}, {buf(in), Arg(std::int32_t(0)), Arg(std::int32_t(zero_odd)), buf(out)}) == "");
    for (int t = 0; t < 64; ++t) {
      int nb = (t + 1) % 64;
      CHECK(out[size_t(t)] == (zero_odd && (nb & 1) ? 0.0f : in[size_t(4 * nb)]));
    }
  }
  std::string e = error_of(m, {1, 1, 1}, {buf(in), Arg(std::int32_t(1)), Arg(std::int32_t(0)), buf(out)});
  INFO(e);
  CHECK(e.find("never waited for (cp.async at cp_async_ref copy)") != std::string::npos);
  e = error_of(m, {1, 1, 1}, {buf(in), Arg(std::int32_t(2)), Arg(std::int32_t(0)), buf(out)});
  CHECK(e.find("(at cp_async_ref early read) reads the destination of an asynchronous copy this thread issued and "
               "has not waited for") != std::string::npos);
  e = error_of(m, {1, 1, 1}, {buf(in), Arg(std::int32_t(3)), Arg(std::int32_t(0)), buf(out)});
  CHECK((e.find("shared-memory race") != std::string::npos || e.find("no thread of the block has written") != std::string::npos));
}

TEST_CASE("emulator: a buffer refilled by cp.async while others may read it, or read before its wait, is an error",
          "[emulator][cp_async]") {
  EmuModule m(manifest("cp_async_refill", {{"in", ptr(ScalarType::f32)}, {"mode", ScalarType::i32},
                                           {"out", ptr(ScalarType::f32)}}, 64, 64 * 16));
  std::vector<float> in(512), out(64);
  for (int i = 0; i < 512; ++i) in[size_t(i)] = float(i + 1);
  auto run = [&](int mode) { return error_of(m, {1, 1, 1}, {buf(in), Arg(std::int32_t(mode)), buf(out)}); };
  REQUIRE(run(0) == "");
  for (int t = 0; t < 64; ++t) CHECK(out[size_t(t)] == in[size_t(256 + 4 * ((t + 1) % 64))]);
  // Which side of the race is reported depends on the order the threads run in (the suite
  // also runs with TILEC_EMU_SCHEDULE=reverse): the copy at its issue or landing, or the read.
  for (int mode : {1, 2}) {
    std::string e = run(mode);
    INFO(e);
    CHECK(e.find("shared-memory race") != std::string::npos);
    CHECK(e.find("refill second copy") != std::string::npos);
  }
  std::string e;
  e = run(3);
  INFO(e);
  CHECK(e.find("reads the destination of an asynchronous copy this thread issued and has not waited for (cp.async "
               "at refill second copy; cp.async.wait_group missing)") != std::string::npos);
}

TEST_CASE("emulator: barriers not reached by every thread are reported, not hung", "[emulator]") {
  std::vector<float> unused(1);
  {
    EmuModule m(manifest("divergent_barrier", {{"x", ptr(ScalarType::f32)}}, 64));
    std::string e = error_of(m, {2, 1, 1}, {buf(unused)});
    INFO(e);
    // Both blocks fail alike; which worker reports first is a race between OS threads.
    CHECK((e.find("kernel 'divergent_barrier', block (0, 0, 0)") != std::string::npos ||
           e.find("kernel 'divergent_barrier', block (1, 0, 0)") != std::string::npos));
    CHECK(e.find("barrier not reached by every thread") != std::string::npos);
    CHECK(e.find("threads 0-15 wait at a barrier") != std::string::npos);
    CHECK(e.find("threads 16-63 finished") != std::string::npos);
  }
  {
    EmuModule m(manifest("different_barriers", {{"x", ptr(ScalarType::f32)}}, 64));
    std::string e = error_of(m, {1, 1, 1}, {buf(unused)});
    INFO(e);
    CHECK(e.find("threads wait at different barriers") != std::string::npos);
    CHECK(e.find("threads 0-31 wait at barrier #0; threads 32-63 wait at barrier #1") != std::string::npos);
  }
  {
    EmuModule m(manifest("divergent_shuffle", {{"x", ptr(ScalarType::f32)}}, 64));
    std::string e = error_of(m, {1, 1, 1}, {buf(unused)});
    INFO(e);
    CHECK(e.find("warp shuffle not reached by every lane") != std::string::npos);
  }
}

TEST_CASE("emulator: arguments are checked against the manifest", "[emulator]") {
  EmuModule m(manifest("store_at", {{"out", ptr(ScalarType::f32)}, {"offset", scalar(ScalarType::i64)}}, 32));
  std::vector<float> out(32);
  std::vector<Arg> args{buf(out), Arg(std::int32_t(0))};
  CHECK_THROWS_AS(m.launch({1, 1, 1}, args), LaunchArgumentError);
  Manifest bad = manifest("nosuchsymbol", {}, 32);
  CHECK_THROWS_WITH(EmuModule(bad), Catch::Contains("no kernel symbol 'nosuchsymbol'"));
}

TEST_CASE("emulator: shared-memory races, bounds and unwritten reads are errors naming both sides", "[emulator][race]") {
  EmuModule m(manifest("shared_checked", {{"out", ptr(ScalarType::i32)}, {"mode", scalar(ScalarType::i32)}}, 64,
                       64 * 4));
  for (EmuSchedule order : {EmuSchedule::forward, EmuSchedule::reverse, EmuSchedule::random}) {
    INFO("schedule " << int(order));
    EmuOptions o;
    o.schedule.order = order;
    auto run = [&](int32_t mode) -> std::string {
      std::vector<std::int32_t> out(64, -1);
      try {
        std::vector<Arg> args{buf(out), Arg(mode)};
        m.launch({2, 1, 1}, args, {}, o);
      } catch (const EmulationError& e) {
        return e.what();
      }
      for (int t = 0; t < 64; ++t)
        if (mode == 0) CHECK(out[size_t(t)] == ((t + 1) % 64) * 10);
      return "";
    };
    CHECK(run(0) == "");
    CHECK(run(4) == ""); // every thread writes the value already there
    // A missing barrier is caught in every order: as a race when the writer ran first, as a
    // read of a slot not yet written when the reader did.
    std::string e = run(1);
    CHECK_THAT(e, Catch::Contains("kernel 'shared_checked'") && Catch::Contains("site:read neighbour") &&
                      ((Catch::Contains("read after write") && Catch::Contains("site:write own")) ||
                       Catch::Contains("which no thread of the block has written")));
    e = run(2); // the overwrite races the neighbour's read, whichever comes first
    CHECK_THAT(e, (Catch::Contains("write after read") || Catch::Contains("read after write")) &&
                      Catch::Contains("site:overwrite own") && Catch::Contains("site:read neighbour"));
    e = run(3);
    CHECK_THAT(e, Catch::Contains("write after write") && Catch::Contains("byte offset 0"));
    e = run(5);
    CHECK_THAT(e, Catch::Contains("shared-memory load of 4 bytes at byte offset 256 is outside the kernel's 256 "
                                  "bytes of shared memory") && Catch::Contains("site:past the end"));
    e = run(6);
    CHECK_THAT(e, Catch::Contains("which no thread of the block has written") && Catch::Contains("site:slot 1"));
  }
}

TEST_CASE("emulator: the schedule orders the threads of a block", "[emulator][race]") {
  EmuModule m(manifest("run_order", {{"out", ptr(ScalarType::i32)}, {"next", ptr(ScalarType::i32)}}, 64));
  auto order_of = [&](EmuScheduleChoice s) {
    std::vector<std::int32_t> out(64, -1), next(1, 0);
    EmuOptions o;
    o.schedule = s;
    std::vector<Arg> args{buf(out), buf(next)};
    m.launch({1, 1, 1}, args, {}, o);
    return out;
  };
  std::vector<std::int32_t> forward = order_of({EmuSchedule::forward, 1}), reverse = order_of({EmuSchedule::reverse, 1});
  CHECK(forward.front() == 0);
  CHECK(forward.back() == 63);
  CHECK(reverse.front() == 63);
  CHECK(reverse.back() == 0);
  std::vector<std::int32_t> random = order_of({EmuSchedule::random, 5});
  CHECK(random != forward);
  CHECK(random != reverse);
  CHECK(order_of({EmuSchedule::random, 5}) == random); // seeded: repeatable
  std::sort(random.begin(), random.end());
  CHECK(random == forward); // every thread ran once
}

TEST_CASE("emulator: a warpgroup MMA decodes every swizzle and reports fence, overwrite and wait misuse",
          "[emulator][wgmma]") {
  EmuModule m(manifest("wgmma_ref", {{"a", ptr(ScalarType::u16)}, {"b", ptr(ScalarType::u16)}, {"swz", ScalarType::i32},
                                     {"mode", ScalarType::i32}, {"out", ptr(ScalarType::f32)}}, 128, 8192 + 16 * 128));
  std::vector<std::uint16_t> a(64 * 16), b(16 * 16);
  std::vector<float> fa(a.size()), fb(b.size()), out(64 * 16);
  for (size_t i = 0; i < a.size(); ++i) fa[i] = float(int(i * 7 % 13) - 6) * 0.25f, a[i] = tilec::f32_to_f16_bits(fa[i]);
  for (size_t i = 0; i < b.size(); ++i) fb[i] = float(int(i * 5 % 11) - 5) * 0.5f, b[i] = tilec::f32_to_f16_bits(fb[i]);
  auto run = [&](int swz, int mode) {
    std::fill(out.begin(), out.end(), -1.0f);
    return error_of(m, {1, 1, 1}, {buf(a), buf(b), Arg(std::int32_t(swz)), Arg(std::int32_t(mode)), buf(out)});
  };
  for (int swz : {0, 32, 64, 128}) {
    INFO("swizzle " << swz);
    REQUIRE(run(swz, 0) == "");
    for (int r = 0; r < 64; ++r)
      for (int n = 0; n < 16; ++n) {
        float want = 0;
        for (int k = 0; k < 16; ++k) want += fa[size_t(16 * r + k)] * fb[size_t(16 * n + k)];
        CHECK(out[size_t(16 * r + n)] == want);
      }
  }
  std::string e = run(128, 1);
  CHECK_THAT(e, Catch::Contains("with no fence.proxy.async since: the async proxy may not see it"));
  e = run(128, 2);
  CHECK_THAT(e, Catch::Contains("(at wgmma_ref early write) while a warpgroup MMA of warpgroup 0 still reads it "
                                "(wgmma at wgmma_ref mma)"));
  e = run(64, 3);
  CHECK_THAT(e, Catch::Contains("with no wgmma.fence since the thread's last wgmma.wait_group"));
  e = run(32, 4);
  CHECK_THAT(e, Catch::Contains("warpgroup MMA never waited for (wgmma at wgmma_ref mma"));
  e = run(0, 5);
  CHECK_THAT(e, Catch::Contains("thread 5 passes other operands than thread 0"));
  e = run(128, 6);
  CHECK_THAT(e, Catch::Contains("with no fence.proxy.async since: the async proxy may not see it"));
  e = run(128, 7);
  CHECK_THAT(e, Catch::Contains("inside a 128-byte swizzle pattern that does not start at a multiple of 1024 bytes"));
}

TEST_CASE("emulator: a TMA copy fills its box (zeros outside the tensor, 128-byte swizzle) and reports mbarrier misuse",
          "[emulator][tma]") {
  Manifest man = manifest("tma_ref", {{"src", ptr(ScalarType::u16)}, {"rows", ScalarType::i32}, {"cols", ScalarType::i32},
                                      {"r0", ScalarType::i32}, {"c0", ScalarType::i32}, {"mode", ScalarType::i32},
                                      {"out", ptr(ScalarType::u16)}}, 64, 1024 + 16 * 128);
  man.tensor_maps = {{"src", {std::string("rows"), std::string("cols")}, {std::string("cols"), std::int64_t(1)}, {16, 64}, 128}};
  EmuModule m(man);
  const int rows = 20, cols = 96;
  std::vector<std::uint16_t> src(size_t(rows * cols)), out(16 * 64);
  for (size_t i = 0; i < src.size(); ++i) src[i] = std::uint16_t(i + 1);
  auto run = [&](int r0, int c0, int mode) {
    std::fill(out.begin(), out.end(), 0xffff);
    return error_of(m, {1, 1, 1}, {buf(src), Arg(std::int32_t(rows)), Arg(std::int32_t(cols)), Arg(std::int32_t(r0)),
                                   Arg(std::int32_t(c0)), Arg(std::int32_t(mode)), buf(out)});
  };
  for (auto [r0, c0] : {std::pair{0, 0}, {-3, 40}, {10, -8}, {19, 95}, {-16, 0}}) {
    INFO("box at row " << r0 << ", column " << c0);
    REQUIRE(run(r0, c0, 0) == "");
    for (int r = 0; r < 16; ++r)
      for (int col = 0; col < 64; ++col) {
        const int gr = r0 + r, gc = c0 + col;
        const bool inside = gr >= 0 && gr < rows && gc >= 0 && gc < cols;
        CHECK(out[size_t(64 * r + col)] == (inside ? src[size_t(gr * cols + gc)] : 0));
      }
  }
  CHECK_THAT(run(0, 0, 1), Catch::Contains("reads what a TMA copy (at tma_ref copy) writes in phase 0 of the mbarrier at "
                                           "byte offset 0, which this thread has not waited for"));
  CHECK_THAT(run(0, 0, 2), Catch::Contains("mbarrier phase error (at tma_ref wait): the thread waits for parity 1"));
  CHECK_THAT(run(0, 0, 3), Catch::Contains("an mbarrier phase that never completes"));
  CHECK_THAT(run(0, 0, 4), Catch::Contains("the block ends with phase 0 of the mbarrier at byte offset 0 begun and not "
                                           "completed (0 of 1 arrivals and 16 transaction bytes still to come)"));
  CHECK_THAT(run(0, 0, 6), Catch::Contains("write of byte offset 1024 (at tma_ref write before the wait) that a TMA "
                                           "copy (at tma_ref copy) writes in phase 0"));
  CHECK_THAT(run(0, 0, 7), Catch::Contains("TMA copy (at tma_ref copy) overwrites byte offset 1024, which thread 0 "
                                           "wrote (at tma_ref early write) with no fence.proxy.async since"));
  // (Thread 1 waited for the first copy, so its copy is ordered after that one; not after
  // thread 0's reads.)
  CHECK_THAT(run(0, 0, 5), Catch::Contains("shared-memory race (write after read, no barrier between): thread 1 "
                                           "writes byte offset 1024 that thread 0 read"));
  // The launch refuses arguments no tensor map can describe.
  std::vector<std::uint16_t> small(size_t(rows * cols - 1));
  CHECK_THROWS_WITH(m.launch({1, 1, 1}, std::vector<Arg>{buf(small), Arg(std::int32_t(rows)), Arg(std::int32_t(cols)),
                                                        Arg(std::int32_t(0)), Arg(std::int32_t(0)), Arg(std::int32_t(0)),
                                                        buf(out)}),
                    Catch::Contains("the tensor map of 'src' (a TMA copy's): its sizes and strides reach element 1919, "
                                    "past the buffer's 1919 elements"));
  CHECK_THROWS_WITH(m.launch({1, 1, 1}, std::vector<Arg>{buf(src), Arg(std::int32_t(rows)), Arg(std::int32_t(60)),
                                                        Arg(std::int32_t(0)), Arg(std::int32_t(0)), Arg(std::int32_t(0)),
                                                        buf(out)}),
                    Catch::Contains("dim 0 has stride 60 (120 bytes): outer strides are multiples of 16 bytes"));
}

TEST_CASE("emulator: a TMA store writes its box clipped to the tensor and reports fence, overwrite and wait misuse",
          "[emulator][tma]") {
  Manifest man = manifest("tma_store_ref", {{"src", ptr(ScalarType::u16)}, {"rows", ScalarType::i32},
                                            {"cols", ScalarType::i32}, {"r0", ScalarType::i32}, {"c0", ScalarType::i32},
                                            {"mode", ScalarType::i32}, {"dst", ptr(ScalarType::u16)}}, 64, 1024 + 16 * 128);
  man.tensor_maps = {{"dst", {std::string("rows"), std::string("cols")}, {std::string("cols"), std::int64_t(1)}, {16, 64}, 128}};
  EmuModule m(man);
  const int rows = 20, cols = 96;
  std::vector<std::uint16_t> src(16 * 64), dst(size_t(rows * cols));
  for (size_t i = 0; i < src.size(); ++i) src[i] = std::uint16_t(i + 1);
  auto run = [&](int r0, int c0, int mode) {
    std::fill(dst.begin(), dst.end(), 0);
    return error_of(m, {1, 1, 1}, {buf(src), Arg(std::int32_t(rows)), Arg(std::int32_t(cols)), Arg(std::int32_t(r0)),
                                   Arg(std::int32_t(c0)), Arg(std::int32_t(mode)), buf(dst)});
  };
  for (auto [r0, c0] : {std::pair{0, 0}, {-3, 40}, {10, -8}}) {
    INFO("box at row " << r0 << ", column " << c0);
    REQUIRE(run(r0, c0, 0) == "");
    for (int gr = 0; gr < rows; ++gr)
      for (int gc = 0; gc < cols; ++gc) {
        const int r = gr - r0, col = gc - c0;
        const bool in_box = r >= 0 && r < 16 && col >= 0 && col < 64;
        CHECK(dst[size_t(gr * cols + gc)] == (in_box ? src[size_t(64 * r + col)] : 0));
      }
  }
  CHECK_THAT(run(0, 0, 1), Catch::Contains("TMA store (at tma_store_ref store) reads byte offset 1024, which thread 0 "
                                           "wrote (at tma_store_ref stage) with no fence.proxy.async since"));
  CHECK_THAT(run(0, 0, 2), Catch::Contains("(at tma_store_ref overwrite) while a TMA store of thread 0 still reads it"));
  CHECK_THAT(run(0, 0, 3), Catch::Contains("finished with a TMA store never waited for (at tma_store_ref store"));
}
