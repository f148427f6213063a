#pragma once
// The loops of a PTX kernel and what their bodies issue: found from the backward branches
// (a `bra` to a label above it), counted instruction by instruction. Plain text processing,
// no LLVM: tests and `tilec compile --json` use it to pin the cost of a kernel's hot loop.
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "ir/ir.h"

namespace tilec::codegen {

struct PtxLoop {
  int first_line = 0, last_line = 0; // 1-based, the label through the backward branch
  int instructions = 0;              // in the body, inner loops' bodies counted once
  int inner_loops = 0;               // loops nested inside it
  // By opcode with up to two modifiers (`mma.sync.aligned`, `ld.global.v4`, `cp.async.cg`,
  // `cp.async.wait_group`, ...); count() sums those starting with a prefix.
  std::map<std::string, int> opcodes;
  int count(const std::string& opcode_prefix) const;
};

// Every loop, outermost first (by first line). A label reached by several backward branches
// is one loop ending at the last of them.
std::vector<PtxLoop> ptx_loops(const std::string& ptx);

// The first outermost loop that reads global memory, with loads or asynchronous copies (a
// kernel's main loop: the K/V loop of paged attention), or nullptr when there is none. A
// kernel that peels its masked steps into loops after the main one (paged attention's
// partial last step, its causal diagonal) runs most of its trips in the first. When that loop
// only issues TMA copies and another outermost loop issues the MMAs without reading global
// memory (a warp-specialized kernel: the producer's loop and the consumers'), the main loop is
// the consumers'.
const PtxLoop* main_loop(const std::vector<PtxLoop>& loops);

// The producer's loop of a warp-specialized kernel (the copy-only loop main_loop passes over),
// or nullptr when the kernel has none.
const PtxLoop* producer_loop(const std::vector<PtxLoop>& loops);

// The main loop of `kernel`'s PTX: one of the kernel's own `for` loops, so a kernel without
// one has none, whatever loops its math functions bring (libdevice's sin/cos range reduction
// loops over a table in global memory). Empty when there is none.
std::optional<PtxLoop> kernel_main_loop(const ir::Function& kernel, const std::string& ptx);

// The producer's loop of `kernel`'s PTX (producer_loop), under the same rule; empty when none.
std::optional<PtxLoop> kernel_producer_loop(const ir::Function& kernel, const std::string& ptx);

} // namespace tilec::codegen
