#pragma once
// The tile IR with its layout plan, for people (`tilec ir --stage layouts`), in
// the manner of Triton's #blocked encodings: a legend of the layouts in tile
// dims, then the print of ir/printer.h with each op's layouts. From matmul:
//
//   // layouts of @matmul for num_warps=4: 8 layouts, 0 conversions
//   #L0 = blocked<size_per_thread=[1,4], threads_per_warp=[4,8], warps_per_block=[4,1], order=[1,0]>
//   #L1 = slice<dim=0, parent=#L0>
//   ...
//     %6 = arange 0 : tile<32xi32>  : #L1 | #L3 | #L5
//     %7 = program_id 0 : i32  : scalar
//     %19 = for %20 = %17 to %k step %18 iter_args(%21 = %16) -> (tile<32x32xf32>) {  : #L2
//     ...
//     store %77, %19, %70  : #L2
//
// An op line shows the layout of each result: `scalar` for values every thread
// holds alike, `#L1 | #L3` for a value computed once in each layout its users
// need, and for a store the layout it writes from. Each conversion the plan
// inserts is a line where the lowering emits it: after the value's definition,
// at the top of a loop body for a loop-carried value, and for a reshape that
// moves elements, after the reshape:
//
//     %66 = load %65, %59 : tile<32xi32>  : #L7
//     convert_layout %66 : #L7 -> #L6
//     %15 = reshape %14 : tile<32x16xf32>  : #L3
//     convert_layout %14 : #L0 -> #L3 (reshape %15)
#include <string>

#include "codegen/compile.h"
#include "ir/ir.h"

namespace tilec::codegen {

struct LayoutsPrint {
  std::string text;
  int layouts = 0;     // entries of the legend
  int conversions = 0; // convert_layout lines (LayoutPlan::conversions)
};

// `wgmma`: the arch's dots may run as warpgroup MMAs (wgmma_enabled).
LayoutsPrint print_layouts(const ir::Function& fn, int num_warps, bool wgmma = false);

// The pipeline plan (codegen/pipeline_plan.h) of `fn` compiled with `opts`, for people: what
// `tilec ir --stage layouts` prints after the layouts; empty for a kernel with no loop that
// asks for stages and no operand copied by cp.async. Values are named as the IR's print names
// them. From paged attention (bf16, head_dim=128, block_n=64, num_stages=2; the lists cut
// short here, tests/codegen/test_pipeline_plan.cpp pins it whole):
//
//   // pipelines of @paged_attention for num_warps=4: 1 of 1 loop with stages pipelined, 2 operands copied by cp.async
//   // for %52 (2 stages): pipelined: each iteration's copies issued 1 iteration ahead, into 2 rotating buffers of 34816 bytes: shared memory [0, 69632)
//   //   slot 0 at +0: B of %89 = dot, copied from %86 = load through %87 = permute: 64 rows of 272 bytes, one per n (17408 bytes)
//   //   slot 1 at +17408: B of %113 = dot, copied from %111 = load: 64 rows of 272 bytes, one per k (17408 bytes)
//   //   issued ahead, in body order: %56 %57 ... %110; of these, emitted in the body too: %56 %57 %58 %59 %60
//   //   not copied ahead: A of %89 = dot: %35 is loaded outside the dot's block
//   //   not copied ahead: A of %113 = dot: %112 is a cast, not a load
//
// A loop that asks for stages and is not pipelined says why; an operand copied by cp.async
// outside a pipeline is listed as copied by its dot, one group waited for at once.
std::string print_pipelines(const ir::Function& fn, const CompileOptions& opts);

} // namespace tilec::codegen
