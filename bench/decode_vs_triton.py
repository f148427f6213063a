#!/usr/bin/env python3
"""The paged-attention decode loop, tilec against a Triton paged-decode kernel, per 64-token trip.

The configuration: bf16, Hq=32, Hkv=8, head_dim 128, page 16, 64 tokens per step, 4 warps,
2 pipeline stages, sm_90. tilec's side is
`tilec compile paged_attention --arch sm_90 --shape batch=1 hq=32 hkv=8 head_dim=128
block_size=16 dtype=bf16 --set block_n=64 head_group=4 num_warps=4 num_stages=2`; Triton's is the
decode kernel in bench/triton_paged_decode.py (the same layouts and math: one program per
sequence and KV head, the group's 4 query rows padded to 16 for tl.dot, an online softmax),
compiled for sm_90 without a GPU.

Per kernel it prints the main K/V loop's PTX instructions (the loop rules of
codegen/ptx_loops.cpp, through bench/prefill_vs_triton.py's finder: the first outermost loop that
reads global memory), its SASS instructions (the cubin through nvdisasm: the first loop, a
label and the last backward branch to it, that issues LDGSTS or LDG), barriers, mma and
ldmatrix per trip, registers (from the cubin) and shared memory per block, and how many blocks of
128 threads fit an H100/H200 SM by shared memory (228 KiB, 1 KiB reserved per block) and by
registers (64 Ki).

The public decode kernels of serving engines (vLLM, SGLang) are not vendored here; install
them and compile them the same way to extend the table.

  python3 bench/decode_vs_triton.py [--tilec build/tools/tilec] [--nvdisasm NVDISASM]
                                    [--keep DIR] [--json]

Needs Triton (pip install triton) and no GPU; nvdisasm comes with the CUDA toolkit, with Triton's
wheel (triton/backends/nvidia/bin) or from pip (nvidia-cuda-nvdisasm). A benchmark: not run by
the tests or CI.
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import prefill_vs_triton as pvt  # noqa: E402  (the PTX loop finder)

sys.path.insert(0, os.path.join(HERE, "..", "scripts"))
from sass_check import find_nvdisasm, sass_loop  # noqa: E402  (nvdisasm and the SASS loop finder)


SHAPE = ["batch=1", "hq=32", "hkv=8", "head_dim=128", "block_size=16", "dtype=bf16"]
CONFIG = ["block_n=64", "head_group=4", "num_warps=4", "num_stages=2"]
SMEM_PER_SM, SMEM_RESERVED, REGS_PER_SM, THREADS = 228 * 1024, 1024, 65536, 128


def cubin_registers(cubin_path, entry):
    """Registers of `entry` from the cubin itself (EIATTR_REGCOUNT in .nv.info, which
    cuobjdump --dump-resource-usage reads), so no ptxas has to accept the PTX."""
    import struct
    with open(cubin_path, "rb") as f:
        elf = f.read()
    shoff, = struct.unpack_from("<Q", elf, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", elf, 0x3A)

    def section(i):  # name, type, flags, addr, offset, size, link, info, align, entsize
        return struct.unpack_from("<IIQQQQIIQQ", elf, shoff + i * shentsize)

    def name_of(table, at):
        off = section(table)[4]
        return elf[off + at:elf.index(b"\0", off + at)].decode()

    secs = {name_of(shstrndx, section(i)[0]): section(i) for i in range(shnum)}
    symtab, strtab = secs.get(".symtab"), secs.get(".strtab")
    strndx = [i for i in range(shnum) if name_of(shstrndx, section(i)[0]) == ".strtab"][0]
    info = secs.get(".nv.info")
    if not (symtab and info and strtab):
        return None
    at, end = info[4], info[4] + info[5]
    while at < end:
        fmt, attr = elf[at], elf[at + 1]
        if fmt == 0x04:  # EIFMT_SVAL: u16 size, then the value
            size, = struct.unpack_from("<H", elf, at + 2)
            if attr == 0x2F:  # EIATTR_REGCOUNT: symbol index, count
                sym, regs = struct.unpack_from("<II", elf, at + 4)
                sym_name, = struct.unpack_from("<I", elf, symtab[4] + sym * 24)
                if name_of(strndx, sym_name) == entry:
                    return regs
            at += 4 + size
        elif fmt in (0x02, 0x03):  # EIFMT_BVAL / EIFMT_HVAL: a 2-byte value
            at += 4
        else:  # EIFMT_NVAL
            at += 2
    return None


def tilec_side(tilec, out):
    d = os.path.join(out, "tilec")
    subprocess.run([tilec, "compile", "paged_attention", "--arch", "sm_90", "--shape", *SHAPE, "--set", *CONFIG,
                    "-o", d], check=True, capture_output=True, text=True)
    with open(os.path.join(d, "paged_attention.toml")) as f:
        card = f.read()
    shared = int(re.search(r"shared_bytes\s*=\s*(\d+)", card).group(1))
    return {"name": "tilec paged_attention", "ptx_path": os.path.join(d, "paged_attention.ptx"),
            "cubin_path": os.path.join(d, "paged_attention.cubin"), "entry": "paged_attention", "shared": shared}


def triton_side(out):
    import triton
    import triton_paged_decode as tpd

    from triton.compiler import ASTSource

    fn = tpd._paged_decode_kernel
    cx = tpd.BENCH_CONSTEXPRS
    types = tpd._bench_arg_types(fn.arg_names, cx)
    # Triton's launcher specializes pointers and integers that are multiples of 16 ("D"): every
    # pointer here and the q/K/V strides (multiples of D = 128), which lets it copy K and V
    # rows 16 bytes at a time with cp.async, as it would on a GPU.
    aligned = {"Q", "K", "V", "Out", "BlockTable", "ContextLens", "OPart", "LSE", "stride_qb", "stride_qh",
               "stride_kb", "stride_ks", "stride_kh", "stride_vb", "stride_vs", "stride_vh"}
    signature = {n: ("constexpr" if n in cx else types[n]) for n in fn.arg_names}
    attrs = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(fn.arg_names) if n in aligned}
    src = ASTSource(fn=fn, signature=signature, constexprs=dict(cx), attrs=attrs)
    kernel = triton.compile(src, target=tpd._gpu_target(90), options=dict(tpd.BENCH_OPTIONS))
    d = os.path.join(out, "triton")
    os.makedirs(d, exist_ok=True)
    ptx_path, cubin_path = os.path.join(d, "decode.ptx"), os.path.join(d, "decode.cubin")
    with open(ptx_path, "w") as f:
        f.write(kernel.asm["ptx"])
    with open(cubin_path, "wb") as f:
        f.write(kernel.asm["cubin"])
    entry = re.search(r"\.entry\s+(\w+)", kernel.asm["ptx"]).group(1)
    return {"name": f"Triton {triton.__version__} decode (bench/triton_paged_decode.py)", "ptx_path": ptx_path,
            "cubin_path": cubin_path, "entry": entry, "shared": kernel.metadata.shared}


def measure(side, nvdisasm):
    with open(side["ptx_path"]) as f:
        ptx = f.read()
    loops = pvt.kv_loops(ptx)
    if not loops:
        pvt.fail(f"no K/V loop in {side['ptx_path']}")
    lp = loops[0]
    row = dict(side)
    row.update({"ptx": lp["instructions"], "bar": pvt.count(lp, "bar.sync") + pvt.count(lp, "barrier"),
                "mma": pvt.count(lp, "mma"), "ldmatrix": pvt.count(lp, "ldmatrix"),
                "registers": cubin_registers(side["cubin_path"], side["entry"])})
    if nvdisasm:
        s = sass_loop(nvdisasm, side["cubin_path"])
        if s:
            row.update({"sass": s["sass"], "sass_bar": s["opcodes"]["BAR"], "sass_hmma": s["opcodes"]["HMMA"],
                        "sass_moves": s["moves"]})
    regs = ((row["registers"] or 255) + 7) // 8 * 8
    row["blocks_by_smem"] = SMEM_PER_SM // (row["shared"] + SMEM_RESERVED)
    row["blocks_by_regs"] = REGS_PER_SM // (regs * THREADS)
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tilec", default=os.path.join(HERE, "..", "build", "tools", "tilec"))
    ap.add_argument("--nvdisasm", default=None)
    ap.add_argument("--keep", default=None, help="keep the PTX and cubins in this folder")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if not os.access(args.tilec, os.X_OK):
        pvt.fail(f"{args.tilec} is not executable (build tilec or pass --tilec)")
    try:
        import triton  # noqa: F401  (a clear error before anything runs)
    except ImportError as e:
        pvt.fail(f"triton is not importable ({e}): pip install triton (no GPU needed)")
    nvdisasm = find_nvdisasm(args.nvdisasm)
    out = args.keep or tempfile.mkdtemp(prefix="decode_vs_triton.")
    os.makedirs(out, exist_ok=True)
    rows = [measure(tilec_side(args.tilec, out), nvdisasm), measure(triton_side(out), nvdisasm)]
    print("decode K/V loop per 64-token trip: bf16 Hq 32 Hkv 8 D 128 page 16, 4 warps, 2 stages, sm_90")
    if not nvdisasm:
        print("(no nvdisasm: SASS columns empty; pip install nvidia-cuda-nvdisasm or pass --nvdisasm)")
    print(f"| kernel | PTX | SASS | bar (PTX/SASS) | mma | ldmatrix | SASS moves | registers | shared B | blocks/SM (smem, regs) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['name']} | {r['ptx']} | {r.get('sass', '')} | {r['bar']}/{r.get('sass_bar', '')} | {r['mma']} | "
              f"{r['ldmatrix']} | {r.get('sass_moves', '')} | {r['registers']} | {r['shared']} | "
              f"{r['blocks_by_smem']}, {r['blocks_by_regs']} |")
    if not args.keep:
        shutil.rmtree(out, ignore_errors=True)
    if args.json:
        print(json.dumps({"rows": [{k: v for k, v in r.items() if not k.endswith("_path")} for r in rows]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
