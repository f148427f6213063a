#pragma once
// Tile IR cleanup passes. Each rewrites a function in place, keeps it valid for
// the verifier and returns whether it changed anything.
#include <functional>
#include <set>
#include <string>

#include "ir/ir.h"

namespace tilec::ir {

// Evaluates ops whose operands are constants (elementwise ops, casts, splat,
// broadcast, expand_dims, reshape, permute), select with a constant condition
// and integer identities (x+0, x*1, x*0, ...), exactly as ir/SEMANTICS.md
// defines them. Leaves alone what would be an error or undefined at run time
// (integer division by zero, out-of-range float to int casts).
bool fold_constants(Function& f);

// Merges pure ops with the same kind, operands, attributes and result types
// when the earlier one dominates the later (same block, or an enclosing one).
// Loads, stores, atomics, for and if are never merged.
bool cse(Function& f);

// Removes ops whose results are unused and that have no side effects (loads
// included), for/if ops whose regions have none, and loop-carried values of
// for ops that feed nothing but themselves.
bool dce(Function& f);

// Folds an add of a dot's result into the dot's accumulator: `add(dot(a, b, +0), c)`, where
// the add is the dot's only use in the same block and c has the dot's type, becomes `dot(a,
// b, c)` (the dot moves to the add's place). The same sum with c first: the tensor cores then
// accumulate into c's registers instead of adding a separate product tile to it. A product of
// at most 8 columns keeps its add (fuse_dot_acc.cpp says why).
bool fuse_dot_accumulate(Function& f);

// Offsets into large buffers in 64 bits: every addptr whose pointer derives from one of the
// pointer parameters named in `large_params` (buffers of more than 2^31 elements) gets its
// offset's add/sub/mul chain (through views, select, constants and loop-carried values)
// recomputed in i64 from the same leaves sign-extended; the low 32 bits of each widened
// value are the i32 value's, so nothing changes where offsets fit in i32. Returns the
// number of addptr ops widened (then runs the default passes). ir/SEMANTICS.md.
int widen_offsets(Function& f, const std::set<std::string>& large_params);

// Rewrites every desc_load and desc_store into the masked load or store it describes (ops
// computing the block's addresses and its in-bounds mask), except those `keep` holds on to.
// Returns how many it rewrote.
int expand_descriptors(Function& f, const std::function<bool(const Op&)>& keep = {});

// fold_constants, fuse_dot_accumulate, cse and dce, repeated until none changes anything.
void run_default_passes(Function& f);

} // namespace tilec::ir
