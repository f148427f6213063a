#!/usr/bin/env python3
"""The prefill tile's K/V loop in PTX, tilec against a Triton flash-attention forward kernel.

The tile: 128 query rows x 64 keys per trip, head_dim 128, bf16, 8 warps, 2 pipeline stages, on
sm_80 (mma.sync m16n8k16 on both sides) and on sm_90 (sm_90a: both sides' dots take wgmma, two
warpgroups of 64 rows). tilec's side is paged attention's prefill tile,
`tilec compile paged_attention --arch sm_80|sm_90 --set block_n=64 num_warps=8 block_m=128 head_group=4
--shape batch=1 hq=32 hkv=8 sq=512 head_dim=128 block_size=16 max_blocks=64 dtype=bf16 causal=C`
(tests/codegen/test_prefill.cpp pins it at causal=0): its 128 rows are 4 query heads x 32
positions of one KV head, and each trip gathers 64 keys through the block table. Triton's side
is the flash-attention forward kernel below (dense [Z, H, N, D] q/k/v, one head's 128 rows per
program, BLOCK_M=128, BLOCK_N=64), compiled for sm_80 without a GPU (triton.compile of an
ASTSource for GPUTarget("cuda", 80, 32), pointers and strides declared multiples of 16 as
Triton's launcher would specialize them). The per-trip math is the same on both sides:
S = Q K^T (128 x 64 x 128), an online softmax, O += P V (128 x 128 x 64).

Both PTX files go through one loop finder (the rules of codegen/ptx_loops.cpp: a loop is a
label and the last backward branch to it; a multi-line instruction counts once; an opcode is
its first three dotted parts; here comments are dropped first, as Triton's PTX puts one after
a label), and every outermost loop that reads global memory is listed:
one K/V loop without a causal mask, two with it (the unmasked trips, then the masked diagonal
ones). Registers come from one ptxas (-v) run on both PTX files. On sm_90 the table adds the
trip's wgmma.mma_async, wgmma.wait_group, TMA copies (cp.async.bulk) and mbarrier waits.

  python3 bench/prefill_vs_triton.py [--arch 80|90|all] [--tilec build/tools/tilec] [--ptxas PTXAS]
                                     [--num-stages 2] [--keep DIR] [--json]

Needs Triton (pip install triton; 3.6 was used), no GPU and no CUDA driver. A benchmark: not
run by the tests or CI. Prints a table; --json adds one JSON object as the last line.
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BLOCK_M, BLOCK_N, HEAD_DIM, NUM_WARPS = 128, 64, 128, 8


def tilec_args(arch):
    return ["compile", "paged_attention", "--arch", f"sm_{arch}",
            "--set", "block_n=64", "num_warps=8", "block_m=128", "head_group=4",
            "--shape", "batch=1", "hq=32", "hkv=8", "sq=512", "head_dim=128", "block_size=16",
            "max_blocks=64", "dtype=bf16"]


COLUMNS = [("instr", None), ("mma", "mma"), ("ldmatrix", "ldmatrix"), ("cp.async", "cp.async.cg"),
           ("cp.async.ca", "cp.async.ca"), ("bar.sync", "bar.sync"), ("ld.global", "ld.global"),
           ("ld.shared", "ld.shared"), ("st.shared", "st.shared"), ("ex2", "ex2"), ("shfl", "shfl")]
# sm_90's asynchronous machinery, added to its table.
COLUMNS_90 = [("wgmma", "wgmma.mma_async"), ("wait", "wgmma.wait_group"), ("bulk", "cp.async.bulk"),
              ("mbar", "mbarrier")]


def fail(msg):
    print(f"prefill_vs_triton: error: {msg}", file=sys.stderr)
    sys.exit(2)


# --------------------------------------------------------------------------------------------
# PTX loops (codegen/ptx_loops.cpp's rules, in Python, so both kernels are counted alike)
# --------------------------------------------------------------------------------------------

def _is_instruction(line):
    return bool(line) and line[0] not in "$./{}" and line.endswith(";")


def _opcode(line):
    if line.startswith("@"):
        line = line.split(None, 1)[1].strip()
    op = re.split(r"[ \t;]", line, maxsplit=1)[0]
    return ".".join(op.split(".")[:3])


def ptx_loops(ptx):
    """Every loop of the PTX as a dict: first/last line (1-based), instructions, opcodes."""
    lines, open_at = [], -1
    for raw in ptx.splitlines():
        # Triton's PTX names a block after its LLVM IR label in a comment: `$L__BB0_2: // %x`.
        line = raw.split("//", 1)[0].strip()
        if open_at >= 0:
            lines[open_at] += " " + line
            lines.append("")
            if line.endswith(";"):
                open_at = -1
            continue
        lines.append(line)
        if line and line[0] not in "$./{}" and not line.endswith(";") and not line.endswith(":"):
            open_at = len(lines) - 1
    labels = {ln[:-1]: i for i, ln in enumerate(lines) if len(ln) > 1 and ln[0] == "$" and ln.endswith(":")}
    end_of = {}
    for i, ln in enumerate(lines):
        if not _is_instruction(ln) or not _opcode(ln).startswith("bra"):
            continue
        d = ln.find("$")
        if d < 0:
            continue
        target = ln[d:ln.find(";", d)]
        head = labels.get(target)
        if head is not None and head < i:
            end_of[head] = max(end_of.get(head, i), i)
    loops = []
    for head in sorted(end_of):
        ops = {}
        for ln in lines[head:end_of[head] + 1]:
            if _is_instruction(ln):
                op = _opcode(ln)
                ops[op] = ops.get(op, 0) + 1
        loops.append({"first_line": head + 1, "last_line": end_of[head] + 1,
                      "instructions": sum(ops.values()), "opcodes": ops})
    for a in loops:
        a["inner_loops"] = sum(1 for b in loops if b is not a and b["first_line"] >= a["first_line"]
                               and b["last_line"] <= a["last_line"])
    return loops


def count(loop, prefix):
    return sum(c for op, c in loop["opcodes"].items() if op.startswith(prefix))


def kv_loops(ptx):
    """The outermost loops that read global memory (loads, cp.async or TMA copies), in program order."""
    loops = ptx_loops(ptx)

    def reads_global(lp):
        return count(lp, "ld.global") + count(lp, "cp.async.cg") + count(lp, "cp.async.ca") + count(lp, "cp.async.bulk") > 0

    return [lp for lp in loops if reads_global(lp) and not any(
        o is not lp and o["first_line"] <= lp["first_line"] and o["last_line"] >= lp["last_line"] and reads_global(o)
        for o in loops)]


def ptxas_registers(ptxas, ptx_path, kernel_name, arch):
    """(registers, spill bytes) from ptxas -v, or (None, None) when there is no ptxas. A PTX
    file naming a newer ISA version than this ptxas reads (Triton's may) is assembled with its
    version line lowered to the ptxas's, which is said on stdout."""
    if not ptxas:
        return None, None
    p = subprocess.run([ptxas, f"-arch={arch}", "-v", ptx_path, "-o", os.devnull], capture_output=True, text=True)
    m = re.search(r"Unsupported \.version ([\d.]+); current version is '([\d.]+)'", p.stderr)
    if p.returncode != 0 and m:
        with open(ptx_path) as f:
            text = f.read()
        lowered = ptx_path + f".v{m.group(2)}.ptx"
        with open(lowered, "w") as f:
            f.write(re.sub(r"^\.version [\d.]+", f".version {m.group(2)}", text, count=1, flags=re.M))
        print(f"({ptxas} reads PTX {m.group(2)}, {ptx_path} says {m.group(1)}: assembled as {m.group(2)})")
        p = subprocess.run([ptxas, f"-arch={arch}", "-v", lowered, "-o", os.devnull], capture_output=True, text=True)
    if p.returncode != 0:
        fail(f"{ptxas} -v {ptx_path} exited {p.returncode}:\n{p.stderr}")
    regs = spills = None
    current = None
    for line in p.stderr.splitlines():
        m = re.search(r"Compiling entry function '([^']+)'", line)
        if m:
            current = m.group(1)
        if current and kernel_name in current:
            m = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", line)
            if m:
                spills = int(m.group(1)) + int(m.group(2))
            m = re.search(r"Used (\d+) registers", line)
            if m:
                regs = int(m.group(1))
    return regs, spills


# --------------------------------------------------------------------------------------------
# tilec's side
# --------------------------------------------------------------------------------------------

def tilec_side(tilec, arch, causal, out):
    cmd = [tilec, *tilec_args(arch), f"causal={causal}", "-o", out, "--json"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        fail(f"{' '.join(cmd)} exited {p.returncode}:\n{p.stdout}{p.stderr}")
    report = json.loads(p.stdout.strip().splitlines()[-1])
    with open(report["ptx"]) as f:
        ptx = f.read()
    loops = kv_loops(ptx)
    if not loops:
        fail(f"no K/V loop found in {report['ptx']}")
    # tilec reports the first of them; the finder here must agree with codegen/ptx_loops.cpp.
    if loops[0]["instructions"] != report.get("loop_instructions"):
        fail(f"this script's loop finder counts {[lp['instructions'] for lp in loops]} instructions in "
             f"{report['ptx']}; tilec compile reports {report.get('loop_instructions')} for its main loop")
    entry = re.search(r"\.entry\s+(\w+)", ptx).group(1)
    return {"ptx_path": report["ptx"], "entry": entry, "loops": loops, "shared_bytes": report.get("shared_bytes"),
            "tilec_registers": report.get("registers"), "command": "tilec " + " ".join(tilec_args(arch)) + f" causal={causal}"}


# --------------------------------------------------------------------------------------------
# Triton's side: a flash-attention forward kernel
# --------------------------------------------------------------------------------------------

def define_triton_kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def _online_softmax_trip(acc, row_max, row_sum, q, k_rows, v_rows, key0, q_pos, key_offs, scale_log2,
                             DIAGONAL: tl.constexpr):
        # One trip over BLOCK_N keys: scores, the running max and sum, the rescaled accumulator.
        k = tl.load(k_rows)                                   # [BLOCK_N, HEAD_DIM]
        scores = tl.dot(q, tl.trans(k)) * scale_log2          # [BLOCK_M, BLOCK_N], log2 units
        if DIAGONAL:
            visible = q_pos[:, None] >= (key0 + key_offs)[None, :]
            scores = tl.where(visible, scores, float("-inf"))
        new_max = tl.maximum(row_max, tl.max(scores, axis=1))
        probs = tl.math.exp2(scores - new_max[:, None])
        shrink = tl.math.exp2(row_max - new_max)
        row_sum = row_sum * shrink + tl.sum(probs, axis=1)
        v = tl.load(v_rows)                                   # [BLOCK_N, HEAD_DIM]
        acc = acc * shrink[:, None]
        acc = tl.dot(probs.to(v.dtype), v, acc)
        return acc, new_max, row_sum

    @triton.jit
    def flash_attention_forward(Q, K, V, O, softmax_scale,
                                q_sz, q_sh, q_sm, k_sz, k_sh, k_sn, v_sz, v_sh, v_sn, o_sz, o_sh, o_sm,
                                num_heads, seq_len,
                                HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                                CAUSAL: tl.constexpr):
        # One program: BLOCK_M query rows of one (sequence, head); seq_len a multiple of BLOCK_M.
        m_tile = tl.program_id(0)
        seq = tl.program_id(1) // num_heads
        head = tl.program_id(1) % num_heads
        q_pos = m_tile * BLOCK_M + tl.arange(0, BLOCK_M)
        dims = tl.arange(0, HEAD_DIM)
        key_offs = tl.arange(0, BLOCK_N)
        q = tl.load(Q + seq * q_sz + head * q_sh + q_pos[:, None] * q_sm + dims[None, :])
        k_head = K + seq * k_sz + head * k_sh
        v_head = V + seq * v_sz + head * v_sh
        row_max = tl.full([BLOCK_M], float("-inf"), tl.float32)
        row_sum = tl.zeros([BLOCK_M], tl.float32)
        acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
        scale_log2 = softmax_scale * 1.4426950408889634
        # Unmasked trips: every key (no mask), or with CAUSAL the keys before the tile's first row.
        unmasked_end = m_tile * BLOCK_M if CAUSAL else seq_len
        for key0 in range(0, unmasked_end, BLOCK_N):
            key0 = tl.multiple_of(key0, BLOCK_N)
            rows = key0 + key_offs
            acc, row_max, row_sum = _online_softmax_trip(
                acc, row_max, row_sum, q, k_head + rows[:, None] * k_sn + dims[None, :],
                v_head + rows[:, None] * v_sn + dims[None, :], key0, q_pos, key_offs, scale_log2, DIAGONAL=False)
        if CAUSAL:
            # The diagonal trips: keys of the tile's own rows, masked above the diagonal.
            for key0 in range(unmasked_end, unmasked_end + BLOCK_M, BLOCK_N):
                key0 = tl.multiple_of(key0, BLOCK_N)
                rows = key0 + key_offs
                acc, row_max, row_sum = _online_softmax_trip(
                    acc, row_max, row_sum, q, k_head + rows[:, None] * k_sn + dims[None, :],
                    v_head + rows[:, None] * v_sn + dims[None, :], key0, q_pos, key_offs, scale_log2,
                    DIAGONAL=True)
        out = acc / row_sum[:, None]
        tl.store(O + seq * o_sz + head * o_sh + q_pos[:, None] * o_sm + dims[None, :], out.to(O.dtype.element_ty))

    return triton, flash_attention_forward


def triton_side(arch, causal, num_stages, out):
    triton, fn = define_triton_kernel()
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    constexprs = {"HEAD_DIM": HEAD_DIM, "BLOCK_M": BLOCK_M, "BLOCK_N": BLOCK_N, "CAUSAL": bool(causal)}
    signature, attrs = {}, {}
    for i, name in enumerate(fn.arg_names):
        if name in constexprs:
            signature[name] = "constexpr"
        elif name in ("Q", "K", "V", "O"):
            signature[name] = "*bf16"
        elif name == "softmax_scale":
            signature[name] = "fp32"
        else:
            signature[name] = "i32"
        # Triton's launcher marks pointers and integers that are multiples of 16 (every stride
        # and size here at N=512, D=128) "D": divisible by 16, which allows 16-byte accesses.
        if name not in constexprs and name != "softmax_scale":
            attrs[(i,)] = [["tt.divisibility", 16]]
    src = ASTSource(fn=fn, signature=signature, constexprs=constexprs, attrs=attrs)
    kernel = triton.compile(src, target=GPUTarget("cuda", arch, 32),
                            options={"num_warps": NUM_WARPS, "num_stages": num_stages})
    ptx = kernel.asm["ptx"]
    path = os.path.join(out, f"flash_attention_forward_sm{arch}_causal{causal}.ptx")
    with open(path, "w") as f:
        f.write(ptx)
    loops = kv_loops(ptx)
    if not loops:
        fail(f"no K/V loop found in Triton's PTX ({path})")
    entry = re.search(r"\.entry\s+(\w+)", ptx).group(1)
    return {"ptx_path": path, "entry": entry, "loops": loops, "shared_bytes": kernel.metadata.shared,
            "triton_version": triton.__version__}


# --------------------------------------------------------------------------------------------
# the table
# --------------------------------------------------------------------------------------------

def table(arch, args, ptxas, out, triton):
    """Compiles both sides for sm_<arch> without and with a causal mask, prints the table; returns
    the JSON kernels."""
    # sm_90's PTX targets sm_90a (wgmma) on both sides: ptxas assembles it as that.
    ptxas_arch = "sm_90a" if arch == 90 else f"sm_{arch}"
    columns = COLUMNS + (COLUMNS_90 if arch == 90 else [])
    rows, kernels = [], []
    for causal in (0, 1):
        sides = [("tilec", tilec_side(args.tilec, arch, causal, os.path.join(out, f"tilec_sm{arch}_causal{causal}"))),
                 (f"triton {triton.__version__}", triton_side(arch, causal, args.num_stages, out))]
        for who, side in sides:
            regs, spills = ptxas_registers(ptxas, side["ptx_path"], side["entry"], ptxas_arch)
            side["registers"], side["spill_bytes"] = regs, spills
            # Without a mask tilec walks whole steps, then the partial last one in a loop of its own.
            names = ["K/V loop"] if len(side["loops"]) == 1 else \
                (["unmasked", "diagonal"] if causal else ["whole", "last"]) + \
                [f"loop {i}" for i in range(3, len(side["loops"]) + 1)]
            for name, lp in zip(names, side["loops"]):
                rows.append((f"{'causal' if causal else 'full'}", who, name, lp, regs, spills, side["shared_bytes"]))
            kernels.append({"arch": f"sm_{arch}", "impl": who, "causal": causal, "registers": regs,
                            "spill_bytes": spills, "shared_bytes": side["shared_bytes"], "ptx": side["ptx_path"],
                            "loops": [{"name": n, "instructions": lp["instructions"],
                                       **{c: count(lp, p) for c, p in columns if p},
                                       "inner_loops": lp["inner_loops"]}
                                      for n, lp in zip(names, side["loops"])],
                            "opcodes": [lp["opcodes"] for lp in side["loops"]]})

    dots = "wgmma" if arch == 90 else "mma.sync"
    print(f"Prefill tile, PTX per K/V trip (128 query rows x 64 keys, D=128, bf16, 8 warps, sm_{arch}, {dots}; "
          f"tilec 2 stages, Triton num_stages={args.num_stages}; registers: {ptxas} -v -arch={ptxas_arch})")
    width = [max(len(c) + 1, 6) for c, _ in columns]
    head = f"{'mask':<7} {'impl':<13} {'loop':<9}" + "".join(f"{c:>{w}}" for (c, _), w in zip(columns, width)) + \
        f"{'regs':>6}{'spill':>6}{'smem B':>8}"
    print(head)
    print("-" * len(head))
    for mask, who, name, lp, regs, spills, smem in rows:
        cells = [lp["instructions"]] + [count(lp, p) for _, p in columns[1:]]
        if lp["inner_loops"]:
            name += f"+{lp['inner_loops']}"
        print(f"{mask:<7} {who:<13} {name:<9}" + "".join(f"{c:>{w}}" for c, w in zip(cells, width)) +
              f"{'-' if regs is None else regs:>6}{'-' if spills is None else spills:>6}{smem or '-':>8}")
    # Where the unmasked trips differ, opcode by opcode.
    full = [r for r in rows if r[0] == "full"]
    full = [next(r for r in full if r[1] == "tilec"), next(r for r in full if r[1] != "tilec")]
    a, b = full[0][3]["opcodes"], full[1][3]["opcodes"]
    diff = sorted(set(a) | set(b), key=lambda k: (-abs(a.get(k, 0) - b.get(k, 0)), k))
    diff = [k for k in diff if a.get(k, 0) != b.get(k, 0)][:args.top]
    print(f"\nsm_{arch} unmasked trip, the {len(diff)} opcodes whose counts differ most (tilec / {full[1][1]}):")
    for i in range(0, len(diff), 4):
        print("  " + "".join(f"{k:<24}{a.get(k, 0):>4} /{b.get(k, 0):>4}    " for k in diff[i:i + 4]).rstrip())
    print()
    return kernels


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--arch", choices=["80", "90", "all"], default="all",
                    help="sm_80 (mma.sync), sm_90 (wgmma) or both (default)")
    ap.add_argument("--tilec", default=os.path.join(ROOT, "build", "tools", "tilec"))
    ap.add_argument("--ptxas", help="ptxas for the register counts of both sides (default: Triton's own, "
                                    "else the one on PATH)")
    ap.add_argument("--num-stages", type=int, default=2, help="Triton's pipeline stages (default 2, as tilec's)")
    ap.add_argument("--keep", help="write both PTX files into this folder (default: a temporary one)")
    ap.add_argument("--top", type=int, default=20, help="opcodes to list whose counts differ most (default 20)")
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
        ptxas = bundled if os.access(bundled, os.X_OK) else shutil.which("ptxas")

    out = args.keep or tempfile.mkdtemp(prefix="prefill_vs_triton_")
    os.makedirs(out, exist_ok=True)
    os.environ.setdefault("TRITON_CACHE_DIR", os.path.join(out, "triton_cache"))
    result = {"triton_version": triton.__version__, "ptxas": ptxas, "num_stages_triton": args.num_stages, "kernels": []}
    for arch in ([80, 90] if args.arch == "all" else [int(args.arch)]):
        result["kernels"] += table(arch, args, ptxas, out, triton)
    print(f"(PTX in {out}; tilec: {' '.join(tilec_args(80)[:2])} ... --arch sm_80|sm_90 ... causal=0|1, see --help)")
    if args.json:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
