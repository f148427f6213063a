#!/usr/bin/env python3
"""The decode K/V loop in SASS: tilec compiles paged attention at the serving engines'
decode configuration (bf16, Hq 32, Hkv 8, D 128, page 16, block_n 64, head_group 4, 4 warps,
2 stages, sm_90), nvdisasm lists the cubin, and the first loop that reads global memory (a
label and the last backward branch to it, issuing LDGSTS or LDG) must have at most 340
instructions, at most 8 barriers and 16 HMMA a 64-token trip (the transposed decode tile: 8 for
S^T = K q^T and 8 for O^T = V^T P^T). Prints the counts; exits 1 when a
bound is broken, 2 on a usage or set-up error (no tilec, no nvdisasm).

  python3 scripts/sass_check.py [--tilec build/tools/tilec] [--nvdisasm PATH] [--keep DIR]

nvdisasm is looked up in --nvdisasm, $NVDISASM, PATH, /usr/local/cuda/bin, then the Python
packages nvidia-cuda-nvdisasm (pip install nvidia-cuda-nvdisasm) and Triton ship it in.
scripts/test.sh runs this after the suite, installing nvidia-cuda-nvdisasm when nvdisasm is
missing. bench/decode_vs_triton.py uses the same loop finder.
"""

import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHAPE = ["batch=1", "hq=32", "hkv=8", "head_dim=128", "block_size=16", "dtype=bf16"]
CONFIG = ["block_n=64", "head_group=4", "num_warps=4", "num_stages=2"]
MAX_SASS, MAX_BAR, HMMA = 340, 8, 16


def find_nvdisasm(given=None):
    cands = [given, os.environ.get("NVDISASM"), shutil.which("nvdisasm"), "/usr/local/cuda/bin/nvdisasm"]
    for base in sys.path:  # pip's nvidia-cuda-nvdisasm, Triton's bundled copy
        cands += glob.glob(os.path.join(base, "nvidia", "*", "bin", "nvdisasm"))
        cands.append(os.path.join(base, "triton", "backends", "nvidia", "bin", "nvdisasm"))
    for c in cands:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    return None


def sass_loop(nvdisasm, cubin_path):
    """The first SASS loop that reads global memory: its instruction count and opcodes, or None."""
    text = subprocess.run([nvdisasm, "-c", cubin_path], check=True, capture_output=True, text=True).stdout
    ins, labels = [], {}
    for line in text.split("\n"):
        m = re.match(r"\s*(\.L_x_\d+):", line)
        if m:
            labels[m.group(1)] = len(ins)
            continue
        m = re.match(r"\s*/\*[0-9a-f]+\*/\s+(.*?)\s*;", line)
        if m:
            ins.append(m.group(1))
    loops = {}
    for i, t in enumerate(ins):
        m = re.search(r"BRA\s+`?\(?(\.L_x_\d+)", t)
        if m and labels.get(m.group(1), len(ins)) <= i:
            loops[labels[m.group(1)]] = i  # the last backward branch to the label
    for start in sorted(loops):
        body = ins[start:loops[start] + 1]
        ops = [re.sub(r"^@!?U?P\w+\s+", "", x).split()[0] for x in body]
        if any(o.startswith(("LDGSTS", "LDG")) for o in ops):
            return {"sass": len(body), "opcodes": Counter(o.split(".")[0] for o in ops),
                    "moves": sum(o.startswith(("MOV", "IMAD.MOV")) for o in ops)}
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tilec", default=os.path.join(ROOT, "build", "tools", "tilec"))
    ap.add_argument("--nvdisasm")
    ap.add_argument("--keep", help="keep the module in this folder")
    args = ap.parse_args()
    if not os.access(args.tilec, os.X_OK):
        print(f"sass_check: {args.tilec} is not executable (build tilec or pass --tilec)", file=sys.stderr)
        return 2
    nvdisasm = find_nvdisasm(args.nvdisasm)
    if not nvdisasm:
        print("sass_check: nvdisasm not found (pip install nvidia-cuda-nvdisasm, or pass --nvdisasm)", file=sys.stderr)
        return 2
    out = args.keep or tempfile.mkdtemp(prefix="sass_check.")
    try:
        p = subprocess.run([args.tilec, "compile", "paged_attention", "--arch", "sm_90", "--shape", *SHAPE, "--set",
                            *CONFIG, "-o", out], capture_output=True, text=True)
        if p.returncode != 0:
            print(f"sass_check: tilec compile exited {p.returncode}:\n{p.stdout}{p.stderr}", file=sys.stderr)
            return 2
        cubin = os.path.join(out, "paged_attention.cubin")
        if not os.path.exists(cubin):
            print("sass_check: tilec compile wrote no cubin (no ptxas?)", file=sys.stderr)
            return 2
        loop = sass_loop(nvdisasm, cubin)
    finally:
        if not args.keep:
            shutil.rmtree(out, ignore_errors=True)
    if not loop:
        print("sass_check: no loop reading global memory in the cubin", file=sys.stderr)
        return 1
    ops = loop["opcodes"]
    print(f"decode K/V loop, SASS per 64-token trip: {loop['sass']} instructions (at most {MAX_SASS}), "
          f"{ops['BAR']} BAR (at most {MAX_BAR}), {ops['HMMA']} HMMA ({HMMA}), {ops['LDSM']} LDSM, "
          f"{ops['LDGSTS']} LDGSTS, {loop['moves']} moves  [{nvdisasm}]")
    bad = []
    if loop["sass"] > MAX_SASS:
        bad.append(f"{loop['sass']} instructions > {MAX_SASS}")
    if ops["BAR"] > MAX_BAR:
        bad.append(f"{ops['BAR']} barriers > {MAX_BAR}")
    if ops["HMMA"] != HMMA:
        bad.append(f"{ops['HMMA']} HMMA != {HMMA}")
    if bad:
        print("sass_check: " + "; ".join(bad), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
