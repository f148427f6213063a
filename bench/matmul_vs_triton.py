#!/usr/bin/env python3
"""A bf16 GEMM tile's K loop in PTX on sm_90 and sm_80, tilec's matmul against Triton's.

The tile: 128 x 128 of C per program, K steps of 64, bf16 A [M, K] and B [K, N] row-major, f32
accumulation, 4 warps (one warpgroup), 3 pipeline stages, M = N = K = 4096. tilec's side is
`tilec compile matmul --arch ARCH --set block_m=128 block_n=128 block_k=64 num_warps=4
num_stages=3 --shape m=4096 n=4096 k=4096 dtype=bf16` (on sm_90 its dot runs as wgmma.mma_async
fed by TMA copies of its A and B descriptors, one wgmma group kept in flight, and C leaves by a
TMA store; on sm_80 mma.sync fed by cp.async). Triton's side is two matmul kernels below, the
same tile: the usual blocked GEMM over pointers with tl.dot, and the same through
tl.make_tensor_descriptor (TMA on sm_90, C through a descriptor too), each compiled for
GPUTarget("cuda", 90 or 80, 32) without a GPU, their pointers and sizes declared multiples of
16 as Triton's launcher would specialize them.

Every PTX file goes through bench/prefill_vs_triton.py's loop finder (codegen/ptx_loops.cpp's
rules); the K loop is the outermost loop reading global memory. Per K step: PTX instructions,
wgmma.mma_async / mma.sync, copies (cp.async, TMA), mbarrier operations, barriers, the
wgmma.wait_group count and its operands (1: one group kept in flight over the next step's
issue; 0: each step's MMAs waited for), loads. Registers and spills come from one ptxas -v run
per file (-arch sm_90a or sm_80), shared memory from tilec's report and Triton's metadata.

  python3 bench/matmul_vs_triton.py [--arch sm_90|sm_80|both] [--tilec build/tools/tilec]
                                    [--ptxas PTXAS] [--keep DIR] [--json]

Needs Triton (pip install triton), no GPU and no CUDA driver. A benchmark: not run by the tests
or CI. Prints a table per arch; --json adds one JSON object as the last line.
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import prefill_vs_triton as pvt  # noqa: E402  (the shared PTX loop finder)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BM, BN, BK, WARPS, STAGES, SIZE = 128, 128, 64, 4, 3, 4096
ARCHS = {"sm_90": (90, "sm_90a"), "sm_80": (80, "sm_80")}  # Triton's capability, ptxas's -arch


def tilec_args(arch):
    return ["compile", "matmul", "--arch", arch,
            "--set", f"block_m={BM}", f"block_n={BN}", f"block_k={BK}", f"num_warps={WARPS}", f"num_stages={STAGES}",
            "--shape", f"m={SIZE}", f"n={SIZE}", f"k={SIZE}", "dtype=bf16"]


COLUMNS = [("instr", None), ("wgmma", "wgmma.mma_async"), ("mma.sync", "mma.sync"), ("cp.async", "cp.async.cg"),
           ("bulk", "cp.async.bulk"), ("mbarrier", "mbarrier"), ("bar.sync", "bar.sync"),
           ("wait", "wgmma.wait_group"), ("ldmatrix", "ldmatrix"), ("ld.global", "ld.global"),
           ("ld.shared", "ld.shared"), ("st.shared", "st.shared")]


def fail(msg):
    print(f"matmul_vs_triton: error: {msg}", file=sys.stderr)
    sys.exit(2)


def k_loop(ptx, path):
    loops = pvt.kv_loops(ptx)
    if not loops:
        fail(f"no loop reading global memory in {path}")
    loop = loops[0]
    # The operands of the loop's wgmma.wait_group instructions, in order ("1": a group kept in
    # flight; "0": every group waited for; "-": none).
    body = ptx.splitlines()[loop["first_line"] - 1:loop["last_line"]]
    waits = [m.group(1) for ln in body for m in [re.search(r"wgmma\.wait_group(?:\.sync\.aligned)?\s+(\d+)", ln)] if m]
    loop["wait_groups"] = ",".join(waits) or "-"
    return loop


def tilec_side(tilec, arch, out):
    cmd = [tilec, *tilec_args(arch), "-o", out, "--json"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        fail(f"{' '.join(cmd)} exited {p.returncode}:\n{p.stdout}{p.stderr}")
    report = json.loads(p.stdout.strip().splitlines()[-1])
    with open(report["ptx"]) as f:
        ptx = f.read()
    loop = k_loop(ptx, report["ptx"])
    if loop["instructions"] != report.get("loop_instructions"):
        fail(f"the loop finder counts {loop['instructions']} instructions in {report['ptx']}; tilec compile reports "
             f"{report.get('loop_instructions')}")
    entry = re.search(r"\.entry\s+(\w+)", ptx).group(1)
    return {"ptx_path": report["ptx"], "entry": entry, "loop": loop, "shared_bytes": report.get("shared_bytes")}


def define_triton_kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def gemm_tile(A, B, C, M, N, K, stride_am, stride_bk, stride_cm,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
        # One BLOCK_M x BLOCK_N tile of C = A B per program, A [M, K] and B [K, N] row-major.
        rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
        cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
        ks = tl.arange(0, BLOCK_K)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):
            a = tl.load(A + rows[:, None] * stride_am + (k0 + ks)[None, :],
                        mask=(rows[:, None] < M) & ((k0 + ks)[None, :] < K), other=0.0)
            b = tl.load(B + (k0 + ks)[:, None] * stride_bk + cols[None, :],
                        mask=((k0 + ks)[:, None] < K) & (cols[None, :] < N), other=0.0)
            acc = tl.dot(a, b, acc)
        tl.store(C + rows[:, None] * stride_cm + cols[None, :], acc, mask=(rows[:, None] < M) & (cols[None, :] < N))

    @triton.jit
    def gemm_tile_desc(A, B, C, M, N, K, stride_am, stride_bk, stride_cm,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
        # The same through tensor descriptors (C's too), which Triton lowers to TMA on sm_90.
        a_desc = tl.make_tensor_descriptor(A, shape=[M, K], strides=[stride_am, 1], block_shape=[BLOCK_M, BLOCK_K])
        b_desc = tl.make_tensor_descriptor(B, shape=[K, N], strides=[stride_bk, 1], block_shape=[BLOCK_K, BLOCK_N])
        c_desc = tl.make_tensor_descriptor(C, shape=[M, N], strides=[stride_cm, 1], block_shape=[BLOCK_M, BLOCK_N])
        m0 = tl.program_id(0) * BLOCK_M
        n0 = tl.program_id(1) * BLOCK_N
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):
            acc = tl.dot(a_desc.load([m0, k0]), b_desc.load([k0, n0]), acc)
        c_desc.store([m0, n0], acc)

    return triton, gemm_tile, gemm_tile_desc


def triton_side(arch, out, descriptors=False):
    triton, pointers, desc = define_triton_kernel()
    fn = desc if descriptors else pointers
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    constexprs = {"BLOCK_M": BM, "BLOCK_N": BN, "BLOCK_K": BK}
    signature, attrs = {}, {}
    for i, name in enumerate(fn.arg_names):
        if name in constexprs:
            signature[name] = "constexpr"
            continue
        signature[name] = {"A": "*bf16", "B": "*bf16", "C": "*fp32"}.get(name, "i32")
        attrs[(i,)] = [["tt.divisibility", 16]]  # every pointer and size here is a multiple of 16
    src = ASTSource(fn=fn, signature=signature, constexprs=constexprs, attrs=attrs)
    kernel = triton.compile(src, target=GPUTarget("cuda", ARCHS[arch][0], 32),
                            options={"num_warps": WARPS, "num_stages": STAGES})
    ptx = kernel.asm["ptx"]
    path = os.path.join(out, f"gemm_tile{'_desc' if descriptors else ''}.{arch}.ptx")
    with open(path, "w") as f:
        f.write(ptx)
    entry = re.search(r"\.entry\s+(\w+)", ptx).group(1)
    return {"ptx_path": path, "entry": entry, "loop": k_loop(ptx, path), "shared_bytes": kernel.metadata.shared}


def table(arch, sides, ptxas, result):
    print(f"GEMM tile {BM}x{BN}, K step {BK}, bf16, {WARPS} warps, {STAGES} stages, {arch}: PTX per K step "
          f"(registers: {ptxas} -v -arch={ARCHS[arch][1]})")
    width = [max(len(c) + 1, 6) for c, _ in COLUMNS]
    head = (f"{'impl':<14}" + "".join(f"{c:>{w}}" for (c, _), w in zip(COLUMNS, width)) +
            f"{'waits':>7}{'regs':>6}{'spill':>6}{'smem B':>8}")
    print(head)
    print("-" * len(head))
    for who, side in sides:
        regs, spills = pvt.ptxas_registers(ptxas, side["ptx_path"], side["entry"], ARCHS[arch][1])
        lp = side["loop"]
        cells = [lp["instructions"]] + [pvt.count(lp, p) for _, p in COLUMNS[1:]]
        print(f"{who:<14}" + "".join(f"{c:>{w}}" for c, w in zip(cells, width)) + f"{lp['wait_groups']:>7}" +
              f"{'-' if regs is None else regs:>6}{'-' if spills is None else spills:>6}{side['shared_bytes'] or '-':>8}")
        result["kernels"].append({"arch": arch, "impl": who, "registers": regs, "spill_bytes": spills,
                                  "shared_bytes": side["shared_bytes"], "ptx": side["ptx_path"],
                                  "loop": {c: (lp["instructions"] if p is None else pvt.count(lp, p)) for c, p in COLUMNS},
                                  "wait_groups": lp["wait_groups"], "opcodes": lp["opcodes"]})
    print()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--arch", choices=["sm_90", "sm_80", "both"], default="both", help="which GPU targets to compare")
    ap.add_argument("--tilec", default=os.path.join(ROOT, "build", "tools", "tilec"))
    ap.add_argument("--ptxas", help="ptxas for both sides' registers (default: the CUDA toolkit's, which must read "
                                    "Triton's PTX version, else Triton's own)")
    ap.add_argument("--keep", help="write both PTX files into this folder (default: a temporary one)")
    ap.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    args = ap.parse_args()
    if not os.access(args.tilec, os.X_OK):
        fail(f"{args.tilec} not found: build tilec first (scripts/setup.sh) or pass --tilec")
    try:
        import triton
    except ImportError as e:
        fail(f"triton is not importable ({e}): pip install triton (no GPU needed)")
    ptxas = args.ptxas
    if not ptxas:
        bundled = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "ptxas")
        toolkit = shutil.which("ptxas") or ("/usr/local/cuda/bin/ptxas" if os.access("/usr/local/cuda/bin/ptxas", os.X_OK)
                                            else None)
        ptxas = toolkit or (bundled if os.access(bundled, os.X_OK) else None)
    out = args.keep or tempfile.mkdtemp(prefix="matmul_vs_triton_")
    os.makedirs(out, exist_ok=True)
    os.environ.setdefault("TRITON_CACHE_DIR", os.path.join(out, "triton_cache"))

    result = {"triton_version": triton.__version__, "ptxas": ptxas, "kernels": []}
    for arch in (["sm_90", "sm_80"] if args.arch == "both" else [args.arch]):
        sides = [("tilec", tilec_side(args.tilec, arch, os.path.join(out, f"tilec.{arch}"))),
                 (f"triton {triton.__version__}", triton_side(arch, out)),
                 ("triton desc", triton_side(arch, out, descriptors=True))]
        table(arch, sides, ptxas, result)
    print(f"(PTX in {out})")
    if args.json:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
