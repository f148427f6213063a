#!/usr/bin/env python3
"""Compile time of paged attention, tilec against Triton: cold (a fresh process) and warm
(a space's configs compiled one after another in one process, as an autotuner does).

The configuration: bf16, Hq=32, Hkv=8, D=128, page 16, block_n=64, head_group=4, 4 warps,
2 stages, sm_90. Cold: tilec's side runs `tilec compile … --json` RUNS times, each a new
process (nothing cached between them: `tilec compile` always compiles), and reports the
median of each phase it times (DSL build, tile passes and lowering, LLVM passes, NVPTX code
generation, ptxas), DSL->PTX (the four before ptxas, in-process) and the whole process's wall
time.

Warm: the space block_n in {32, 64, 128} x num_warps in {4, 8} (head_group 4, 2 stages; the
cold configuration is one of its six). tilec's side runs `tilec autotune -j 1` over it (the
interpreter then times the candidates on a one-sequence problem, outside what is reported;
the compiled kernel does not depend on the sequence lengths) WARM_RUNS times and reads the compile stage's line: the median
candidate's compile, DSL->PTX and ptxas, each the median over its candidates, compiled one
after another on one thread of the running tuner. Triton's side (with --triton) runs
bench/triton_paged_decode.py compile-warm: triton.compile of the same kernel for each config of
the same space in one process, a fresh empty cache each time, ptxas timed apart.

Triton's side is opt-in (it needs Triton, which tilec does not): with --triton it runs
bench/triton_paged_decode.py compile-bench (the same kernel in Triton, tl.dot, compiled for
sm_90 without a GPU, a fresh process and an empty cache per run) and compile-warm under
--python, or under a temporary virtual environment it creates and `pip install triton`s into
with --install-triton. Nothing is installed otherwise, and never by the tests.

Both sides count ptxas (tilec the CUDA toolkit's it finds, Triton the one it ships) and show
it apart. The ratios are Triton's time over tilec's: cold, the whole process; warm, the median
config's compile.

  python3 bench/compile_bench.py [--tilec build/tools/tilec] [--runs 5] [--warm-runs 3] [--json]
                                 [--triton [--python PY | --install-triton]]

Prints a table; with --json one JSON object as the last line. Times are this machine's: run
it on a quiet machine (they are printed, never asserted).
"""

import argparse
import json
import os
import re
import shutil
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
# The warm space, the same on both sides (Triton's kernel always holds the 4 query heads of a KV head).
WARM_BLOCK_N = [32, 64, 128]
WARM_NUM_WARPS = [4, 8]
WARM_SPACE = f"""kernel = "paged_attention"
[params]
block_n = {WARM_BLOCK_N}
head_group = [4]
num_warps = {WARM_NUM_WARPS}
num_stages = [2]
[measure]
warmup = 0
repeats = 1
"""
# The compile stage's line `tilec autotune` prints for a key (autotune/tuner.cpp, compile_summary).
WARM_LINE = re.compile(
    r"compiled (?P<configs>\d+) candidates on (?P<threads>\d+) threads? in (?P<wall_ms>[\d.]+) ms; "
    r"median per candidate (?P<config_ms>[\d.]+) ms: DSL->PTX (?P<dsl_to_ptx_ms>[\d.]+) ms "
    r"\(DSL build (?P<build_ms>[\d.]+), tile passes and lowering (?P<lower_ms>[\d.]+), "
    r"LLVM passes (?P<optimize_ms>[\d.]+), NVPTX (?P<codegen_ms>[\d.]+)\), ptxas (?P<ptxas_ms>[\d.]+) ms, "
    r"other (?P<other_ms>[\d.]+) ms(?P<rest>.*)")


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


def tilec_warm(tilec, runs):
    """`tilec autotune -j 1` over the warm space, `runs` processes: the medians of its compile line."""
    rows = []
    with tempfile.TemporaryDirectory(prefix="tilec_compile_bench_") as tmp:
        space = os.path.join(tmp, "space.toml")
        with open(space, "w") as f:
            f.write(WARM_SPACE)
        for i in range(runs):
            db = os.path.join(tmp, f"db{i}.toml")
            cmd = [tilec, "autotune", "paged_attention", "--space", space, "--shape", *[a for a in SHAPE if a != "--shape"],
                   "batch=1", "ctx=64", "--backend", "interpret", "--arch", "sm_90", "-j", "1", "-o", db]
            p = subprocess.run(cmd, capture_output=True, text=True)
            if p.returncode != 0:
                fail(f"{' '.join(cmd)} exited {p.returncode}:\n{p.stdout}{p.stderr}")
            m = next((WARM_LINE.search(line) for line in p.stdout.splitlines() if WARM_LINE.search(line)), None)
            if not m:
                fail(f"tilec autotune printed no compile-stage line (is this tilec older than the bench?):\n{p.stdout}")
            if m["rest"].strip():
                print(f"compile_bench: warning: tilec autotune says{m['rest']}: no ptxas here, so the warm "
                      "numbers leave it out", file=sys.stderr)
            j = {k: float(v) for k, v in m.groupdict().items() if k != "rest"}
            rows.append(j)
            print(f"  tilec warm run {i + 1}/{runs}: {int(j['configs'])} configs, median {j['config_ms']:.1f} ms "
                  f"(DSL->PTX {j['dsl_to_ptx_ms']:.1f}, ptxas {j['ptxas_ms']:.1f})", file=sys.stderr)
    med = {k: statistics.median(r[k] for r in rows) for k in rows[0] if k not in ("configs", "threads")}
    med.update({"configs": int(rows[0]["configs"]), "runs": runs})
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


def triton_warm(py, runs):
    """compile-warm in `runs` fresh processes: the medians of each process's medians."""
    script = os.path.join(ROOT, "bench", "triton_paged_decode.py")
    rows = []
    for i in range(runs):
        cmd = [py, script, "compile-warm", "--block-n", ",".join(map(str, WARM_BLOCK_N)),
               "--num-warps", ",".join(map(str, WARM_NUM_WARPS))]
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            fail(f"{script} compile-warm failed:\n{p.stdout}{p.stderr}")
        j = json.loads(p.stdout.strip().splitlines()[-1])
        rows.append(j)
        print(f"  Triton warm run {i + 1}/{runs}: {len(j['configs'])} configs, median {j['median_compile_s'] * 1e3:.0f} ms "
              f"(ptxas {j['median_ptxas_s'] * 1e3:.0f})", file=sys.stderr)
    return {"triton_version": rows[0]["triton_version"], "configs": len(rows[0]["configs"]), "runs": runs,
            "compile_s": statistics.median(r["median_compile_s"] for r in rows),
            "ptxas_s": statistics.median(r["median_ptxas_s"] for r in rows)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tilec", default=os.path.join(ROOT, "build", "tools", "tilec"))
    ap.add_argument("--runs", type=int, default=5, help="cold processes per side")
    ap.add_argument("--warm-runs", type=int, default=3, help="warm processes per side (each compiles the space)")
    ap.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    ap.add_argument("--triton", action="store_true", help="also time Triton compiling the same kernel")
    ap.add_argument("--python", help="a Python that has triton (for --triton)")
    ap.add_argument("--install-triton", action="store_true",
                    help="for --triton: pip install triton into a temporary venv first")
    args = ap.parse_args()
    if args.runs < 1 or args.warm_runs < 1:
        fail("--runs and --warm-runs must be at least 1")
    if not os.access(args.tilec, os.X_OK):
        fail(f"{args.tilec} not found: build tilec first (scripts/setup.sh) or pass --tilec")

    t = tilec_runs(args.tilec, args.runs)
    print(f"tilec paged_attention bf16 32/8/128 block_n=64 head_group=4 sm_90, median of {args.runs} cold processes:")
    print(f"  DSL build {t['build_ms']:.2f} ms | tile passes + lowering {t['lower_ms']:.2f} ms | "
          f"LLVM passes {t['optimize_ms']:.2f} ms | NVPTX {t['codegen_ms']:.2f} ms | ptxas {t['ptxas_ms']:.2f} ms")
    print(f"  DSL->PTX {t['dsl_to_ptx_ms']:.1f} ms in-process; whole process {t['process_ms']:.0f} ms "
          f"({t['registers']} registers, {t['loop_instructions']} PTX instructions per K/V step)")
    w = tilec_warm(args.tilec, args.warm_runs)
    print(f"tilec warm: `tilec autotune -j 1` compiling {w['configs']} configs (block_n {WARM_BLOCK_N} x num_warps "
          f"{WARM_NUM_WARPS}) one after another, median of {args.warm_runs} processes' median config:")
    print(f"  {w['config_ms']:.1f} ms per config: DSL->PTX {w['dsl_to_ptx_ms']:.1f} ms (DSL build {w['build_ms']:.2f}, "
          f"tile passes + lowering {w['lower_ms']:.2f}, LLVM passes {w['optimize_ms']:.2f}, NVPTX {w['codegen_ms']:.2f}), "
          f"ptxas {w['ptxas_ms']:.1f} ms, other {w['other_ms']:.1f} ms (each the median over configs)")
    result = {"tilec": t, "tilec_warm": w}
    if args.triton:
        py, venv = triton_python(args)
        try:
            tr = triton_runs(py, args.runs)
            result["triton"] = tr
            ratio = tr["process_s"] * 1e3 / t["process_ms"]
            result["speedup_whole"] = ratio
            print(f"Triton {tr['triton_version']}, median of {tr['runs']} cold processes: import {tr['import_s'] * 1e3:.0f} ms, "
                  f"first compile {tr['first_compile_s'] * 1e3:.0f} ms (ptxas {tr['ptxas_s'] * 1e3:.0f} ms), "
                  f"whole process {tr['process_s'] * 1e3:.0f} ms")
            tw = triton_warm(py, args.warm_runs)
            result["triton_warm"] = tw
            warm = tw["compile_s"] * 1e3 / w["config_ms"]
            warm_no_ptxas = (tw["compile_s"] - tw["ptxas_s"]) * 1e3 / w["dsl_to_ptx_ms"]
            result["speedup_warm"] = warm
            result["speedup_warm_without_ptxas"] = warm_no_ptxas
            print(f"Triton {tw['triton_version']} warm: triton.compile of each of the {tw['configs']} configs in one process, "
                  f"a fresh cache each, median of {tw['runs']} processes' median config: {tw['compile_s'] * 1e3:.0f} ms "
                  f"(ptxas {tw['ptxas_s'] * 1e3:.0f} ms)")
            print(f"tilec DSL->PTX median {t['dsl_to_ptx_ms']:.1f} ms cold, {w['dsl_to_ptx_ms']:.1f} ms warm; against Triton: "
                  f"cold {ratio:.1f}x (whole process; first compile alone {tr['first_compile_s'] * 1e3 / t['process_ms']:.1f}x), "
                  f"warm {warm:.1f}x per config (ptxas included; {warm_no_ptxas:.1f}x without it)")
        finally:
            if venv:  # the temporary venv --install-triton made (a few GB)
                shutil.rmtree(venv, ignore_errors=True)
    else:
        print(f"tilec DSL->PTX median {t['dsl_to_ptx_ms']:.1f} ms cold, {w['dsl_to_ptx_ms']:.1f} ms warm "
              "(--triton to measure Triton beside it)")
    if args.json:
        print(json.dumps(result))


if __name__ == "__main__":
    main()
