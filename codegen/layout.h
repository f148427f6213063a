#pragma once
// Layouts: which thread of a program (a thread block) holds which element of a
// tile. See docs/ARCHITECTURE.md "The lowering in depth".
#include <cstdint>
#include <string>
#include <vector>

#include "ir/ir.h"
#include "ir/types.h"

namespace tilec::codegen {

// Triton's blocked layout over `rank()` base dims. One pass of it covers
// size_per_thread * threads_per_warp * warps_per_block elements per base dim; a
// larger tile repeats the pattern, a smaller one is replicated across threads.
struct BlockedLayout {
  std::vector<int> size_per_thread;
  std::vector<int> threads_per_warp; // product 32
  std::vector<int> warps_per_block;  // product num_warps
  std::vector<int> order;            // base dims, fastest varying first
  // Per base dim, how often a warp's lanes repeat their pattern before the next warp's
  // (empty: 1 everywhere). Blocked layouts place a thread's repeats above the warps; a
  // repeat below them is what Hopper's warpgroup MMA accumulator needs (wgmma_layout: warp w
  // holds rows 16w + g and 16w + g + 8).
  std::vector<int> warp_repeat;
  // The base dims in the order the warp id's bits go to them, fastest first (empty: `order`).
  // Lanes and warps may run differently: a wgmma accumulator with its warpgroups along N takes
  // the lane bits along N first and the warp bits along M first (warp w of warpgroup q holds
  // rows 16 (w % 4) + g and 8 more, in q's columns).
  std::vector<int> warp_order;

  int rank() const { return static_cast<int>(order.size()); }
  int repeat(int b) const { return warp_repeat.empty() ? 1 : warp_repeat[size_t(b)]; }
  // Elements one warp's lanes cover along base dim b, before the next warp's begin.
  int warp_span(int b) const { return size_per_thread[b] * threads_per_warp[b] * repeat(b); }
  int pass(int b) const { return warp_span(b) * warps_per_block[b]; }
  bool operator==(const BlockedLayout&) const = default;
};

// A tile's layout: a blocked layout and, for each tile dim, the base dim it
// maps to. Base dims that no tile dim maps to have extent 1: the threads along
// them hold the same elements. That makes reduce (unmap a dim), expand_dims
// (map a free base dim), broadcast (same layout) and permute (reorder `dims`)
// free of data movement.
struct Layout {
  BlockedLayout base;
  std::vector<int> dims;

  bool operator==(const Layout&) const = default;
  std::string str() const;
};

// The coordinates a thread owns, for a layout applied to a tile shape. Element
// j of a thread's register list sits at tile coordinate
//   coord[d] = (thread_base[dims[d]] mod base_shape[dims[d]]) + offset[j][d]
// where thread_base[b] = warp_coord[b] * warp_span(b) + lane_coord[b] * size_per_thread[b].
// The list runs along order[0] fastest, so runs of `run` consecutive elements
// are contiguous along the tile dim mapped to order[0] (if any).
struct ThreadElems {
  std::vector<int64_t> base_shape; // per base dim: the tile dim's extent, or 1
  std::vector<int64_t> per_dim;    // per base dim: elements a thread holds
  int64_t count = 1;               // elements per thread
  int64_t run = 1;                 // contiguous run length along order[0]
  int run_dim = -1;                // tile dim mapped to order[0], or -1
  std::vector<std::vector<int64_t>> offset; // [element][tile dim]
  // Base dims along which several threads hold the same elements.
  std::vector<bool> replicated;
};

ThreadElems thread_elems(const Layout& l, const ir::Shape& shape);

// Lane/warp bit positions of a base dim in the lane and warp ids.
int lane_shift(const BlockedLayout& b, int dim);
int warp_shift(const BlockedLayout& b, int dim);

// A layout for accessing memory contiguous along `contig_dim` with `vec`
// elements per thread there: lanes fill the contiguous dim first, warps go to
// the slowest dims first (so row reductions stay inside a warp).
Layout access_layout(const ir::Shape& shape, int contig_dim, int vec, int num_warps);
// The layout for a value with no memory access to anchor it.
Layout default_layout(const ir::Shape& shape, int elem_bytes, int num_warps);
// The output layout of dot [M, N]: a small 2-d block of outputs per thread.
// Whether a dot runs on the tensor cores (f16 x f16 or bf16 x bf16 with its f32
// accumulator, K at least 2) when CompileOptions::tensor_cores is on; else on CUDA cores.
bool dot_on_tensor_cores(const ir::Op& dot);
Layout dot_layout(int64_t m, int64_t n, int num_warps);
// The layout of an mma.sync.m16n8k16 accumulator [M, N]. Lane (g, t) = (lane / 4, lane % 4)
// holds columns 2t, 2t + 1 of 8-column tiles and rows 8 apart:
// - warps along M (M >= 16 W, a multiple of it; N a multiple of 8): warp w holds rows
//   8w + g + 8W k of every column tile, blocked<[1, 2], [8, 4], [W, 1]>. Its 16-row MMA tiles
//   pair rows r and r + 8W (tile rows g and g + 8): each warp owns whole rows, so row
//   reductions stay in the warp and no warp loads another's A rows (FlashAttention-2's split).
// - warps along N otherwise (N a multiple of 8 W): warp w holds rows g, g + 8, g + 16, ... of
//   the 8-column tiles w, w + W, w + 2W, ...: blocked<[1, 2], [8, 4], [1, W]>. Below 16 rows
//   the pattern wraps (rows g mod M), so the rows the padded MMA computes past M are replicas.
bool mma_warps_along_m(int64_t m, int64_t n, int num_warps);
bool mma_layout_fits(int64_t m, int64_t n, int num_warps);
Layout mma_layout(int64_t m, int64_t n, int num_warps);

// Hopper's warpgroup MMA (wgmma.mma_async.m64nNk16, sm_90): the warps of a program form
// warpgroups of 4 (G = num_warps / 4 of them), which split the result along M or along N:
// - along M (M a multiple of 16 num_warps, N a multiple of 8 up to 256): warpgroup q computes
//   rows [64 q, 64 q + 64) of every 16 W-row pass, all N columns;
// - along N otherwise (M a multiple of 64 below 16 num_warps, FlashMLA's 64 query heads on 8
//   warps; N / G a multiple of 8 up to 256): warpgroup q computes all M rows (M / 64 passes)
//   of columns [q N / G, (q + 1) N / G), its B descriptors starting at its slice.
// A dot's shape fits when one of them does and K is a multiple of 16 (32 for 8-bit operands:
// check that with wgmma_k_step).
bool wgmma_fits(int64_t m, int64_t n, int64_t k, int num_warps);
// The warpgroups along N of a wgmma dot [M, N] (1: along M; wgmma_fits holds).
int wgmma_groups_along_n(int64_t m, int64_t n, int num_warps);
// The dtypes a warpgroup MMA takes besides mma.sync's f16 and bf16: the 8-bit floats (f8e4m3,
// f8e5m2; both operands of one, k steps of 32, both operands k-major).
bool dot_on_wgmma_only(const ir::Op& dot);
// The k step of one wgmma for operands of `elem_bytes` bytes: 32 bytes' worth (16 or 32).
inline int64_t wgmma_k_step(int elem_bytes) { return 32 / elem_bytes; }
// Whether an operand with `mn` rows (M or N) and `k` columns of `elem_bytes`-byte elements can
// be staged for it read along K (k-major) or along M or N (MN-major, 16-bit types only): the
// contiguous dimension's bytes are 32 or 64 or a multiple of 128, the widths of the swizzled
// shared layouts (wgmma_swizzle).
bool wgmma_operand_fits(bool kmajor, int64_t mn, int64_t k, int elem_bytes);
// Whether the warpgroups of a wgmma dot [M, N] each read their slice of B from whole rows of
// its staging: always with warpgroups along M or a k-major B (a slice is whole 8-row
// groups); an N-major B's slices must be whole panels (N / G elements a multiple of the
// swizzle's width).
bool wgmma_b_slices_fit(int64_t m, int64_t n, bool b_kmajor, int elem_bytes, int num_warps);
// The bytes of the swizzle pattern for an operand whose contiguous dimension takes `bytes`
// bytes: 32, 64 or 128 (longer ones are staged in 128-byte panels).
int wgmma_swizzle(int64_t bytes);
// The layout of a wgmma accumulator [M, N]: lane (g, t) of warp w holds columns 2t, 2t + 1
// of every 8-column tile, in rows 16w + g and 16w + g + 8 of every 16 W-row block:
// blocked<[1, 2], [8, 4], [W, 1]> with the lanes repeating twice along M inside a warp.
// With G warpgroups along N (wgmma_groups_along_n), warp w = 4 q + r holds rows 16 r + g and
// 16 r + g + 8 of every 64-row pass in columns 2t, 2t + 1 of each 8-column tile of
// [q N / G, (q + 1) N / G): blocked<[1, 2], [8, 4], [4, G]>, the lanes repeating twice along M
// and N / (8 G) times along N inside a warp, the warp bits along M first.
Layout wgmma_layout(int64_t m, int64_t n, int num_warps);

// The layout of `l` with tile dim `dim` dropped (what reduce produces).
Layout slice_layout(const Layout& l, int dim);
// The layout of `l` with a size-1 tile dim inserted at `axis`.
Layout expand_layout(const Layout& l, int axis);
// Result dim i is operand dim perm[i].
Layout permute_layout(const Layout& l, const std::vector<int64_t>& perm);
// Removes base dims that no tile dim maps to and that hold no threads.
Layout canonical(Layout l);

} // namespace tilec::codegen
