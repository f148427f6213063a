#!/usr/bin/env python3
"""Compile time of paged attention, tilec against Triton, one fresh process per run.

The configuration: bf16, Hq=32, Hkv=8, D=128, page 16, block_n=64, head_group=4, 4 warps,
2 stages, sm_90. tilec's side runs `tilec compile … --json` RUNS times, each a new process
(nothing cached between them: `tilec compile` always compiles), and reports the median of
each phase it times (DSL build, tile passes and lowering, LLVM passes, NVPTX code generation,
ptxas), DSL->PTX (the four before ptxas, in-process) and the whole process's wall time.

Triton's side is opt-in (it needs Triton, which tilec does not): with --triton it runs
bench/triton_paged_decode.py compile-bench (the same kernel in Triton, tl.dot, compiled for
sm_90 without a GPU, a fresh process and an empty cache per run) under --python, or under a
temporary virtual environment it creates and `pip install triton`s into with
--install-triton. Nothing is installed otherwise, and never by the tests.

  python3 bench/compile_bench.py [--tilec build/tools/tilec] [--runs 5] [--json]
                                 [--triton [--python PY | --install-triton]]

Prints a table; with --json one JSON object as the last line. Times are this machine's: run
it on a quiet machine (they are printed, never asserted).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHAPE = ["--shape", "dtype=bf16", "--shape", "hq=32", "--shape", "hkv=8", "--shape", "head_dim=128",
         "--shape", "block_size=16"]
CONFIG = ["--set", "block_n=64", "--set", "head_group=4", "--set", "num_warps=4", "--set", "num_stages=2"]
PHASES = ["build_ms", "lower_ms", "optimize_ms", "codegen_ms", "ptxas_ms"]


def fail(msg):
    print(f"compile_bench: error: {msg}", file=sys.stderr)
    sys.exit(2)


def tilec_runs(tilec, runs):
    rows = []
    with tempfile.TemporaryDirectory(prefix="tilec_compile_bench_") as tmp:
        for i in range(runs):
            out = os.path.join(tmp, f"run{i}")
            cmd = [tilec, "compile", "paged_attention", *SHAPE, *CONFIG, "--arch", "sm_90", "-o", out, "--json"]
            t0 = time.perf_counter()
            p = subprocess.run(cmd, capture_output=True, text=True)
            wall = time.perf_counter() - t0
            if p.returncode != 0:
                fail(f"{' '.join(cmd)} exited {p.returncode}:\n{p.stdout}{p.stderr}")
            j = json.loads(p.stdout.strip().splitlines()[-1])
            j["process_ms"] = wall * 1e3
            j["dsl_to_ptx_ms"] = sum(j[k] for k in PHASES[:4])
            rows.append(j)
            print(f"  tilec run {i + 1}/{runs}: DSL->PTX {j['dsl_to_ptx_ms']:.1f} ms, process {wall * 1e3:.0f} ms",
                  file=sys.stderr)
    med = {k: statistics.median(r[k] for r in rows) for k in PHASES + ["dsl_to_ptx_ms", "process_ms"]}
    last = rows[-1]
    med.update({"registers": last.get("registers"), "loop_instructions": last.get("loop_instructions"),
                "runs": runs})
    return med


def triton_python(args):
    if args.python:
        return args.python, None
    if not args.install_triton:
        fail("--triton needs --python PY (a Python with triton) or --install-triton (a temporary venv)")
    venv = tempfile.mkdtemp(prefix="tilec_triton_venv_")
    print(f"compile_bench: creating {venv} and installing triton into it (pip)", file=sys.stderr)
    subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    py = os.path.join(venv, "bin", "python")
    r = subprocess.run([py, "-m", "pip", "install", "--quiet", "triton"])
    if r.returncode != 0:
        fail("pip install triton failed (no network or no wheel for this platform?)")
    return py, venv


def triton_runs(py, runs):
    script = os.path.join(ROOT, "bench", "triton_paged_decode.py")
    p = subprocess.run([py, script, "compile-bench", "--runs", str(runs)], capture_output=True, text=True)
    if p.returncode != 0:
        fail(f"{script} compile-bench failed:\n{p.stdout}{p.stderr}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tilec", default=os.path.join(ROOT, "build", "tools", "tilec"))
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    ap.add_argument("--triton", action="store_true", help="also time Triton compiling the same kernel")
    ap.add_argument("--python", help="a Python that has triton (for --triton)")
    ap.add_argument("--install-triton", action="store_true",
                    help="for --triton: pip install triton into a temporary venv first")
    args = ap.parse_args()
    if args.runs < 1:
        fail("--runs must be at least 1")
    if not os.access(args.tilec, os.X_OK):
        fail(f"{args.tilec} not found: build tilec first (scripts/setup.sh) or pass --tilec")

    t = tilec_runs(args.tilec, args.runs)
    print(f"tilec paged_attention bf16 32/8/128 block_n=64 head_group=4 sm_90, median of {args.runs} cold processes:")
    print(f"  DSL build {t['build_ms']:.2f} ms | tile passes + lowering {t['lower_ms']:.2f} ms | "
          f"LLVM passes {t['optimize_ms']:.2f} ms | NVPTX {t['codegen_ms']:.2f} ms | ptxas {t['ptxas_ms']:.2f} ms")
    print(f"  DSL->PTX {t['dsl_to_ptx_ms']:.1f} ms in-process; whole process {t['process_ms']:.0f} ms "
          f"({t['registers']} registers, {t['loop_instructions']} PTX instructions per K/V step)")
    result = {"tilec": t}
    if args.triton:
        py, _ = triton_python(args)
        tr = triton_runs(py, args.runs)
        result["triton"] = tr
        ratio = tr["process_s"] * 1e3 / t["process_ms"]
        result["speedup_whole"] = ratio
        print(f"Triton {tr['triton_version']}, median of {tr['runs']} cold processes: import {tr['import_s'] * 1e3:.0f} ms, "
              f"first compile {tr['first_compile_s'] * 1e3:.0f} ms, whole process {tr['process_s'] * 1e3:.0f} ms")
        print(f"  tilec's whole compile is {ratio:.1f}x faster "
              f"(compile alone: {tr['first_compile_s'] * 1e3 / t['process_ms']:.1f}x)")
    if args.json:
        print(json.dumps(result))


if __name__ == "__main__":
    main()
