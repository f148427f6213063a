#!/usr/bin/env python3
"""Plants realistic single-point bugs in the lowering (55 of them), one at a time, and reports which of
tilec's CPU-only checks catch each: the promise that CI without a GPU catches code-generation
bugs, measured.

Each mutation replaces one exact snippet of one source file (it must occur exactly once, or
the mutation is reported stale). The tree is copied to a scratch folder (tracked and
untracked-but-not-ignored files, so uncommitted work is included), configured once, and for
each mutant rebuilt and checked:

  suite        ctest, as `scripts/test.sh` runs it first (emulator lowering, forward order)
  suite-nvptx  ctest with TILEC_EMU_SCHEDULE=reverse TILEC_EMU_LOWERING=nvptx (test.sh's
               second run: the GPU's own lowering on the emulator, threads in reverse)
  fuzz         tilec fuzz --count 300 (interpreter against the emulator)

By default a mutant stops at the first check that catches it; --all-checks runs every check.

  scripts/mutation_test.py                    # every mutation
  scripts/mutation_test.py --only butterfly-skip --all-checks
  scripts/mutation_test.py --list
  scripts/mutation_test.py --check-snippets   # every snippet still applies (scripts/test.sh runs it)

Needs what the build needs (scripts/setup.sh) and about 2 minutes per mutant on 2 cores.
Exit status 0 when every mutant is caught, 1 otherwise.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# (name, file, what the bug is, old snippet, new snippet)
MUTATIONS = [
    ("barrier-share-owners",
     "codegen/lower.cpp",
     "owners share an element through shared memory without the barrier between the owners' writes and everyone's reads",
     '    return nullptr;\n  });\n  barrier();\n  Elems r = load_runs(ty, l, s, dim, vb, at, "share from owners read");',
     '    return nullptr;\n  });\n  Elems r = load_runs(ty, l, s, dim, vb, at, "share from owners read");'),
    ("barrier-reduce-war",
     "codegen/lower.cpp",
     "an exchange takes the lowest scratch region even when an access since the last barrier conflicts with it (a write after other threads' reads)",
     '    if (!conflicts_with_touched({kScratch, at, at + bytes, true})) {',
     '    if (true) {'),
    ("barrier-reduce-raw", "codegen/lower_reduce.cpp",
     "no barrier between writing the reduction partials and combining them",
     "ir::is_float(dt) ? DType::f32 : DType::i64);\n    barrier();",
     "ir::is_float(dt) ? DType::f32 : DType::i64);"),
    ("barrier-convert",
     "codegen/lower.cpp",
     'a layout conversion reads shared memory without the barrier after the writes',
     '"layout conversion write");\n  barrier();',
     '"layout conversion write");'),
    ("barrier-dot", "codegen/lower_dot.cpp",
     "no barrier between staging the dot operands and the K loop",
     "  }\n  barrier();\n  const ir::Shape& rs = res->type.shape;",
     "  }\n  const ir::Shape& rs = res->type.shape;"),
    ("barrier-loop-carried",
     "codegen/lower.cpp",
     "a loop body's first accesses never wait at the top for the previous trip's conflicting last ones",
     '  if (std::any_of(fence.exposed.begin(), fence.exposed.end(), [&](const Access& a) { return conflicts_with_touched(a); })) {',
     '  if (false) {'),
    ("smem-stride", "codegen/lower_dot.cpp",
     "the dot's B operand is read with a wrong shared-memory row stride",
     "llvm::Value* kb = b_.CreateMul(kk, b_.getInt32(static_cast<uint32_t>(sb)));",
     "llvm::Value* kb = b_.CreateMul(kk, b_.getInt32(static_cast<uint32_t>(sb - 1)));"),
    ("smem-undersized",
     "codegen/lower.cpp",
     "a layout conversion's scratch region is sized without the bank-conflict padding",
     '  scratch_begin((n + n / 32 + p) * eb);',
     '  scratch_begin(n * eb);'),
    ("butterfly-skip", "codegen/lower_reduce.cpp",
     "the warp reduction skips its first butterfly step",
     "for (int k = 0; k < log2i(lanes); ++k)",
     "for (int k = 1; k < log2i(lanes); ++k)"),
    ("load-mask-dropped", "codegen/lower_memory.cpp",
     "scalar loads ignore their mask",
     "out[j0 + k] = hooks_.load(b_, P[j0 + k], ty, eb, M ? (*M)[j0 + k] : nullptr);",
     "out[j0 + k] = hooks_.load(b_, P[j0 + k], ty, eb, nullptr);"),
    ("lane-warp-swap", "codegen/lower.cpp",
     "a thread's position in a layout takes the lane and warp coordinates swapped",
     "llvm::Value* lc = pb_.CreateAnd(pb_.CreateLShr(lane_, lane_shift(bl, d)), tpw - 1);\n"
     "    llvm::Value* wc = pb_.CreateAnd(pb_.CreateLShr(warp_, warp_shift(bl, d)), wpb - 1);",
     "llvm::Value* lc = pb_.CreateAnd(pb_.CreateLShr(warp_, lane_shift(bl, d)), tpw - 1);\n"
     "    llvm::Value* wc = pb_.CreateAnd(pb_.CreateLShr(lane_, warp_shift(bl, d)), wpb - 1);"),
    ("cross-warp-skip", "codegen/lower_reduce.cpp",
     "a reduction across warps never combines the warps' partials",
     "  if (warps > 1) {\n    int cb =",
     "  if (warps > 1 && false) {\n    int cb ="),
    ("over-wide-vector", "codegen/lower_memory.cpp",
     "vector loads read twice the bytes they use",
     "auto* vty = llvm::FixedVectorType::get(ty, vec);",
     "auto* vty = llvm::FixedVectorType::get(ty, 2 * vec);"),
    ("mma-a-fragment-order",
     "codegen/lower_dot_mma.cpp",
     "the tensor-core dot hands A's fragment registers to mma in the wrong order (rows and k halves swapped)",
     '    for (int i : need) mats.push_back({(i & 1) * dot.half, (i >> 1) * 8});',
     '    for (int i : need) mats.push_back({(i >> 1) * 8, (i & 1) * dot.half});'),
    ("ldmatrix-trans-flipped", "codegen/lower_dot_mma.cpp",
     "ldmatrix loads operands stored along M or N without .trans (and the others with it)",
     "hooks_.ldmatrix(b_, p, count, !kmajor, site(what));",
     "hooks_.ldmatrix(b_, p, count, kmajor, site(what));"),
    ("cp-async-no-wait",
     "codegen/lower_dot_mma.cpp",
     'the dot reads operands copied with cp.async without waiting for the copies',
     '    hooks_.cp_async_commit(b_);\n    cp_async_wait(0);\n  }\n  // A late pipeline slot',
     '    hooks_.cp_async_commit(b_);\n  }\n  // A late pipeline slot'),
    ("pipeline-wait-late",
     "codegen/lower.cpp",
     "a pipelined loop waits for one group too few: this trip's copies may not have landed",
     'cp_async_wait(int(pl->has_late() ? 2 * S - 3 : S - 2));',
     'cp_async_wait(int(pl->has_late() ? 2 * S - 2 : S - 1));'),
    ("pipeline-refill-current", "codegen/lower.cpp",
     "a pipelined loop refills the buffer this trip reads instead of the one the last trip read",
     "b_.CreateSub(stage, b_.getInt32(1)));",
     "stage);"),
    ("pipeline-ahead-unguarded", "codegen/lower_pipeline.cpp",
     "copies (and the block-table loads) issued ahead are not guarded by the loop's end",
     "ahead_pred_ = b_.CreateICmpSLT(iv, get(pl.loop->operands[1], kScalar)[0]);",
     "ahead_pred_ = b_.getTrue();"),
    ("pipeline-written-buffer",
     "codegen/pipeline_plan.cpp",
     'a load from a buffer the loop writes is copied ahead (it misses the writes)',
     '  if (!read_only(x.load->operands[0])) {',
     '  if (false) {'),
    ("nvptx-shfl-mask", "codegen/target_nvptx.cpp",
     "the nvptx target's butterfly shuffle has member mask 0xffff (half the warp)",
     "{b.getInt32(0xffffffffu), v, b.getInt32(lane_mask), b.getInt32(0x1f)}",
     "{b.getInt32(0xffffu), v, b.getInt32(lane_mask), b.getInt32(0x1f)}"),
    ("nvptx-bf16-truncate", "codegen/target_nvptx.cpp",
     "the nvptx target converts f32 to bf16 by truncation instead of rounding",
     "    return b.CreateFPTrunc(v, half_type(b.getContext(), t));",
     "    if (t == ir::DType::bf16)\n"
     "      return b.CreateBitCast(b.CreateTrunc(b.CreateLShr(b.CreateBitCast(v, b.getInt32Ty()), 16), b.getInt16Ty()),\n"
     "                             half_type(b.getContext(), t));\n"
     "    return b.CreateFPTrunc(v, half_type(b.getContext(), t));"),
    ("fp8-round-away", "codegen/float8_ir.cpp",
     "the IR fp8 conversion (emulator, sm_80/86) rounds ties away from zero instead of to even",
     "llvm::Intrinsic::roundeven, b.CreateFMul(a, inv_quantum)",
     "llvm::Intrinsic::round, b.CreateFMul(a, inv_quantum)"),
    ("fp8-pair-swap", "codegen/target_nvptx.cpp",
     "sm_89+ fp8 widening hands back the two halves of cvt.rn.f16x2 swapped",
     "return std::array<llvm::Value*, 2>{half(0), half(16)};",
     "return std::array<llvm::Value*, 2>{half(16), half(0)};"),
    ("shift-unclamped", "codegen/lower_elementwise.cpp",
     "shl/lshr by the width or more are not clamped to 0 (LLVM poison; x86 masks the amount)",
     "llvm::Value* in_range = b_.CreateICmpULT(y, width);",
     "llvm::Value* in_range = b_.getTrue();"),
    ("umulhi-signed", "codegen/target.cpp",
     "umulhi multiplies the operands sign-extended instead of zero-extended",
     "llvm::Value* p = b.CreateMul(b.CreateZExt(x, wide), b.CreateZExt(y, wide));",
     "llvm::Value* p = b.CreateMul(b.CreateSExt(x, wide), b.CreateSExt(y, wide));"),
    ("widen-offsets-no-mul", "ir/widen_offsets.cpp",
     "offsets into a buffer past 2^31 elements keep their products in i32 (only adds widened)",
     "    case OpKind::Add:\n    case OpKind::Sub:\n    case OpKind::Mul: {\n      Value* x = widen(",
     "    case OpKind::Add:\n    case OpKind::Sub: {\n      Value* x = widen("),
    ("atomic-max-as-min", "codegen/target_nvptx.cpp",
     "the GPU's integer atomic_max is atom.min",
     "k = f ? llvm::AtomicRMWInst::FMax : llvm::AtomicRMWInst::Max;",
     "k = f ? llvm::AtomicRMWInst::FMax : llvm::AtomicRMWInst::Min;"),
    ("print-replicas", "codegen/lower.cpp",
     "device_print lets every thread holding an element print it, not only its owner",
     "  llvm::Value* own = owner(l, s);\n  hooks_.print_op(b_);",
     "  llvm::Value* own = nullptr;\n  hooks_.print_op(b_);"),
    ("combine-args-swapped", "codegen/lower_reduce.cpp",
     "a user's combine function gets its operands in the wrong order (the later segment first)",
     "    define(fn.args[0], kScalar, {to_dtype(x)});\n    define(fn.args[1], kScalar, {to_dtype(y)});",
     "    define(fn.args[0], kScalar, {to_dtype(y)});\n    define(fn.args[1], kScalar, {to_dtype(x)});"),
    ("unsigned-div-signed", "codegen/lower_elementwise.cpp",
     "unsigned division and remainder compiled as signed",
     "    return k == OpKind::Div ? b_.CreateUDiv(x, y) : b_.CreateURem(x, y);",
     "    return k == OpKind::Div ? b_.CreateSDiv(x, y) : b_.CreateSRem(x, y);"),
    ("unsigned-widen-signed", "codegen/lowering.h",
     "an unsigned value widened with its sign (reductions, casts, offsets)",
     "    return from == DType::i1 || ir::is_unsigned(from) ? b_.CreateZExtOrTrunc(v, ty) : b_.CreateSExtOrTrunc(v, ty);",
     "    return from == DType::i1 ? b_.CreateZExtOrTrunc(v, ty) : b_.CreateSExtOrTrunc(v, ty);"),
    ("wgmma-swizzle-unstaged",
     "codegen/lower_dot_mma.cpp",
     'operands for a warpgroup MMA are staged without the XOR swizzle its descriptors declare',
     '  return b_.CreateXor(logical, bits);',
     '  return logical;'),
    ("wgmma-stride-offset",
     "codegen/lower_dot_wgmma.cpp",
     'wgmma descriptors give the 8-row groups half their stride',
     '(uint64_t(8 * s >> 4) << 32)',
     '(uint64_t(4 * s >> 4) << 32)'),
    ("wgmma-no-wait",
     "codegen/lower_dot_wgmma.cpp",
     'the accumulator of a warpgroup MMA is read with no wgmma.wait_group',
     '  if (!lazy) hooks_.wgmma_wait(b_, in_flight ? 1 : 0);\n',
     ''),
    ("wgmma-in-flight-no-final-wait",
     "codegen/lower.cpp",
     "a K loop that keeps one wgmma group in flight lets the epilogue read the accumulator with no wgmma.wait_group 0",
     '    hooks_.wgmma_wait(b_, 0);\n    Elems& acc = results',
     '    Elems& acc = results'),
    ("wgmma-in-flight-scratch-operand",
     "codegen/pipeline_plan.cpp",
     "a wgmma group stays in flight while one of its operands is staged in scratch, which the next step overwrites",
     '    if (all && mine == 2) {',
     '    if (all) {'),
    ("wgmma-no-proxy-fence",
     "codegen/lowering.h",
     'generic-proxy shared-memory writes are not fenced to the async proxy before wgmma reads them',
     '    if (has_wgmma_ && proxy_unfenced_) hooks_.fence_proxy_async(b_);\n',
     ''),
    ("wgmma-warp-rows",
     "codegen/layout.cpp",
     "the wgmma accumulator's layout gives each warp rows 8 apart in two warps' spans (no repeat inside a warp)",
     '  b.warp_repeat = {2, 1};\n',
     ''),
    ("wgmma-pass-rows",
     "codegen/lower_dot_wgmma.cpp",
     "a warpgroup's second pass of A rows starts half a pass too early",
     'step_start(st_a, p * pass_rows, kk, eb)',
     'step_start(st_a, p * pass_rows / 2, kk, eb)'),
    ("a-fragment-rows",
     "codegen/lower_dot_mma.cpp",
     "an A fragment from registers takes its two row halves in the wrong registers (P as mma.sync's A and as wgmma's register A)",
     'tile_rows * tm + half_rows * (r % 2), 16 * ks',
     'tile_rows * tm + half_rows * (1 - r % 2), 16 * ks'),
    ("wgmma-lazy-wait-shallow",
     "codegen/lower.cpp",
     "a result's first read waits for one group too few: the newest group before it may still run",
     '  hooks_.wgmma_wait(b_, int(wgmma_commits_ - group));',
     '  hooks_.wgmma_wait(b_, int(wgmma_commits_ - group + 1));'),
    ("wgmma-in-flight-early-refill",
     "codegen/lower.cpp",
     "a K loop that keeps one wgmma group in flight refills at the top of the trip the buffer the previous trip's group still reads",
     '    if (!pl->wgmma_in_flight) issue_ahead(*pl, ahead, fill, true);\n',
     '    issue_ahead(*pl, ahead, fill, true);\n'),
    ("tma-no-wait",
     "codegen/lower.cpp",
     "a pipelined trip reads its stage without waiting for the TMA copies' mbarrier phase",
     '    if (pl->mbarriers >= 0) wait_tma(pl->mbarriers, stage);\n',
     ''),
    ("tma-parity-stuck",
     "codegen/lower_pipeline.cpp",
     "the mbarrier parity a thread waits for never flips after a wait",
     '  b_.CreateStore(b_.CreateXor(bits, b_.CreateShl(b_.getInt32(1), index)), phases);\n',
     ''),
    ("tma-panel-column",
     "codegen/lower_pipeline.cpp",
     "the TMA copy of a staging's second panel starts at the first panel's columns",
     'coords[i].push_back({p ? b_.CreateAdd(inner, b_.getInt32(uint32_t(p * per_panel))) : inner,',
     'coords[i].push_back({inner,'),
    ("tma-gather-box-smem",
     "codegen/lower_pipeline.cpp",
     "every box of a gathered TMA load (paged K/V, kv_tma=1) lands at its panel's first rows",
     'uint64_t(p * st.rows * st.row_bytes + box * h * st.row_bytes)),',
     'uint64_t(p * st.rows * st.row_bytes)),'),
    ("tma-expect-short",
     "codegen/lower_pipeline.cpp",
     "the mbarrier is armed for one operand's bytes too few (the phase completes before the last copy)",
     '  for (const AsyncOperand* x : xs) bytes += x->staging.rows * x->staging.row_bytes * x->staging.panels;',
     '  for (const AsyncOperand* x : xs) bytes = x->staging.rows * x->staging.row_bytes * x->staging.panels;'),
    ("tma-store-no-fence",
     "codegen/lower_pipeline.cpp",
     "a TMA store's staging is written without fence.proxy.async before the copy engine reads it",
     '  hooks_.fence_proxy_async(b_);\n  proxy_unfenced_ = false;\n  barrier();\n',
     '  proxy_unfenced_ = false;\n  barrier();\n'),
    ("desc-no-lower-bound",
     "ir/expand_descriptors.cpp",
     "a descriptor block at a negative offset reads the elements before the tensor instead of zeros",
     '    if (!nonnegative)',
     '    if (false)'),
    ("desc-gather-box-start",
     "ir/expand_descriptors.cpp",
     "a gathered descriptor load's rows all start at the last box's row offset",
     '        start = b.select(b.binary(OpKind::Lt, r, end), offset(i), start);',
     '        start = b.select(b.binary(OpKind::Lt, r, end), start, start);'),
    ("mma-b-pair-same-k",
     "codegen/lower_dot_mma.cpp",
     "an 8-column product's paired B load takes the second k step's matrices at the first's k",
     '        std::vector<llvm::Value*> bfs = mma_frag_b(dot, n0, kk, 2, 0, 16);',
     '        std::vector<llvm::Value*> bfs = mma_frag_b(dot, n0, kk, 2, 0, 0);'),
    ("late-slot-wide-result",
     "codegen/pipeline_plan.cpp",
     "late slots only for a result thin both ways: the transposed decode tile's V is double-buffered again (3 blocks an SM by shared memory, not 4)",
     '                        std::min(res[0], res[1]) <= Pipeline::kMaxLateRows;',
     '                        std::max(res[0], res[1]) <= Pipeline::kMaxLateRows;'),
    ("ws-refill-unwaited",
     "codegen/lower_warp_specialize.cpp",
     "a warp-specialized producer refills a stage without waiting for its empty mbarrier",
     '    wait_tma(pl.empty_mbarriers, stage, "stage emptied, waited for by the producer");\n',
     ''),
    ("ws-release-first-trip",
     "codegen/lower_warp_specialize.cpp",
     "the consumers arrive on an empty mbarrier on the first trip too, which retired no group: a stage is handed back early",
     'guarded(b_, b_.CreateICmpNE(iv, lb), [&]() -> llvm::Value* {',
     'guarded(b_, b_.getTrue(), [&]() -> llvm::Value* {'),
]


def run(cmd, cwd, env=None, log=None):
    t0 = time.time()
    p = subprocess.run(cmd, cwd=cwd, env=env, shell=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, errors="replace")
    if log:
        with open(log, "a") as f:
            f.write(f"$ {cmd}\n{p.stdout}\n")
    return p.returncode, p.stdout, time.time() - t0


def failed_tests(out):
    m = re.search(r"The following tests FAILED:\n((?:\s+\d+ - .*\n?)+)", out)
    if not m:
        return []
    return [re.sub(r"^\s*\d+ - ", "", l).strip() for l in m.group(1).splitlines() if l.strip()]


def first_error(out):
    for pat in (r"shared-memory race[^\n]*", r"shared-memory (load|store)[^\n]*(past|no thread)[^\n]*",
                r"shfl\.sync[^\n]*member mask[^\n]*", r"bytes?[^\n]*ideal[^\n]*", r"\b(load|store) of [^\n]*",
                r"value bits [^\n]*", r"mismatch[^\n]*", r"FAILED:[^\n]*"):
        m = re.search(pat, out)
        if m:
            return m.group(0)[:220]
    return ""


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", action="append", help="run only this mutation (repeatable)")
    ap.add_argument("--all-checks", action="store_true", help="run every check, not only up to the first catch")
    ap.add_argument("--scratch", default="/tmp/tilec-mutants", help="scratch folder (default %(default)s)")
    ap.add_argument("--list", action="store_true", help="list the mutations and exit")
    ap.add_argument("--check-snippets", action="store_true",
                    help="only check that every mutation's snippet occurs exactly once in its file (what "
                         "scripts/test.sh runs, in a second); exit 1 naming the stale ones")
    ap.add_argument("--fuzz-count", type=int, default=300)
    a = ap.parse_args()

    def occurrences(rel, old):
        return open(os.path.join(ROOT, rel)).read().count(old)

    if a.list:
        for name, f, what, old, _ in MUTATIONS:
            print(f"{name:24} {f:30} {what}{'' if occurrences(f, old) == 1 else '  [STALE]'}")
        return 0
    if a.check_snippets:
        stale = [(name, f, occurrences(f, old)) for name, f, _, old, _ in MUTATIONS if occurrences(f, old) != 1]
        for name, f, n in stale:
            print(f"mutation_test: {name}: its snippet occurs {n} times in {f} (once expected): update it")
        print(f"mutation_test: {len(MUTATIONS) - len(stale)} of {len(MUTATIONS)} mutations apply")
        return 1 if stale else 0
    chosen = [m for m in MUTATIONS if not a.only or m[0] in a.only]
    unknown = set(a.only or []) - {m[0] for m in MUTATIONS}
    if unknown:
        print(f"unknown mutation(s): {', '.join(sorted(unknown))}; --list names them", file=sys.stderr)
        return 2

    src = os.path.join(a.scratch, "src")
    build = os.path.join(a.scratch, "build")
    log = os.path.join(a.scratch, "log.txt")
    os.makedirs(a.scratch, exist_ok=True)
    if os.path.exists(log):
        os.remove(log)
    # A fresh copy of the working tree (tracked + untracked, not ignored files).
    if os.path.exists(src):
        shutil.rmtree(src)
    files = subprocess.run("git ls-files -co --exclude-standard -z", cwd=ROOT, shell=True, stdout=subprocess.PIPE,
                           check=True).stdout.split(b"\0")
    for f in files:
        if not f:
            continue
        rel = f.decode()
        s = os.path.join(ROOT, rel)
        if not os.path.isfile(s):
            continue
        d = os.path.join(src, rel)
        os.makedirs(os.path.dirname(d), exist_ok=True)
        shutil.copyfile(s, d)  # a fresh mtime: ninja must not trust an older build in the scratch folder
        shutil.copymode(s, d)
    print(f"==> configuring {build} (log: {log})", flush=True)
    rc, out, _ = run(f"cmake -G Ninja -B {build} -S {src} -DCMAKE_BUILD_TYPE=Release", ROOT, log=log)
    if rc:
        print(out)
        return 2
    env = dict(os.environ)
    checks = [
        ("suite", f"ctest --test-dir {build} -j2 --stop-on-failure --output-on-failure", {}),
        ("suite-nvptx", f"ctest --test-dir {build} -j2 --stop-on-failure --output-on-failure",
         {"TILEC_EMU_SCHEDULE": "reverse", "TILEC_EMU_LOWERING": "nvptx"}),
        ("fuzz", f"{build}/tools/tilec fuzz --count {a.fuzz_count} --seed 11 --no-shrink "
                 f"--save-dir {a.scratch}/fuzz-failures", {}),
    ]
    print("==> the unmutated tree must build and pass every check", flush=True)
    rc, out, _ = run(f"ninja -C {build}", ROOT, log=log)
    if rc:
        print(out[-3000:])
        return 2
    for cname, cmd, extra in checks:
        rc, out, secs = run(cmd, ROOT, env={**env, **extra}, log=log)
        print(f"    {cname}: {'ok' if rc == 0 else 'FAILED'} ({secs:.0f} s)", flush=True)
        if rc:
            print(out[-3000:])
            return 2

    results = []
    for name, rel, what, old, new in chosen:
        path = os.path.join(src, rel)
        text = open(path).read()
        if text.count(old) != 1:
            print(f"--- {name}: STALE (the snippet occurs {text.count(old)} times in {rel})", flush=True)
            results.append((name, None, []))
            continue
        open(path, "w").write(text.replace(old, new))
        caught = []
        try:
            rc, out, secs = run(f"ninja -C {build}", ROOT, log=log)
            if rc:
                caught.append(("build", "the mutant does not compile"))
            else:
                for cname, cmd, extra in checks:
                    rc, out, secs = run(cmd, ROOT, env={**env, **extra}, log=log)
                    if rc:
                        tests = failed_tests(out)
                        detail = f"{len(tests)} test(s): {tests[0]}" if tests else ""
                        err = first_error(out)
                        caught.append((cname, "; ".join(x for x in (detail, err) if x)))
                        if not a.all_checks:
                            break
        finally:
            open(path, "w").write(text)
        status = "caught" if caught else "ESCAPED"
        print(f"--- {name}: {status} -- {what}", flush=True)
        for cname, why in caught:
            print(f"      by {cname}: {why}", flush=True)
        results.append((name, bool(caught), caught))

    run(f"ninja -C {build}", ROOT, log=log)  # leave the scratch build unmutated
    n = sum(1 for _, c, _ in results if c)
    stale = [r[0] for r in results if r[1] is None]
    print(f"==> {n} of {len(results)} planted bugs caught" + (f"; stale: {', '.join(stale)}" if stale else ""))
    for name, c, _ in results:
        if c is False:
            print(f"    escaped: {name}")
    return 0 if n == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
