#!/usr/bin/env python3
"""The GPU check's GEMM step: C = A B with A [M, K] and B [K, N] in bf16 and f32 accumulation,
tilec's matmul through its Python package (python/tilec over libtilec.so; one folder per config,
each written by `tilec compile matmul ... -o DIR`: its module and kernel card) against
torch.matmul and a Triton matmul (bench/matmul_vs_triton.py's kernel, the same tile source the
PTX side-by-side compiles), each timed and checked against an fp32 product; prints us, TFLOP/s
and % of the GPU's dense bf16 peak (H100/H200 SXM: 989.4 TFLOP/s). Where two configs differ only
in warp_specialize it prints a line comparing them (the speedup warp specialization gives).

  bench/gpu_gemm.py --deploy DIR [--deploy DIR ...] --size N [--backend cuda|emulate]
                      [--repeats R] [--json-out FILE]

--backend emulate is the dry run (scripts/gpu_check.sh --dry-run, CI): NumPy inputs, tilec on
the CPU emulator, NumPy's float64 product as the reference, no peers and no timing claims.
Exit status: 0 every result right; 1 a result wrong; 2 an error (message on stderr).
"""

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gpu_peers  # noqa: E402  (timing, bf16 helpers, ToolError)
import tilec_py_peer  # noqa: E402  (import_tilec, Bf16Bits)

PEAK_TFLOPS = {"H100": 989.4, "H200": 989.4}  # dense bf16, SXM


def peak_of(device):
    return next((v for k, v in PEAK_TFLOPS.items() if k in device), None)


def check(got, ref, k):
    """(ok, max abs error, atol): f32 sums of k exact products of values in [-1, 1]."""
    atol, rtol = 1e-5 * k, 1e-5
    err = float(np.max(np.abs(got - ref))) if got.size else 0.0
    return bool(np.all(np.abs(got - ref) <= atol + rtol * np.abs(ref))), err, atol


def read_spec(deploy, kernel, keys):
    """The values of `keys` in the [specialization] of DEPLOY/KERNEL.toml (a module's manifest):
    the config the folder's module was compiled for."""
    try:
        text = open(os.path.join(deploy, kernel + ".toml")).read()
    except OSError as e:
        raise gpu_peers.ToolError(f"{deploy}: no {kernel}.toml ({e}); write it with tilec compile {kernel} -o {deploy}")
    section, vals = "", {}
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("["):
            section = line
            continue
        name, _, value = line.partition("=")
        if section == "[specialization]" and name.strip() in keys and value.strip().isdigit():
            vals[name.strip()] = int(value.strip())
    if set(vals) != set(keys):
        raise gpu_peers.ToolError(f"{deploy}/{kernel}.toml: its [specialization] lacks {sorted(set(keys) - set(vals))}")
    return vals


CONFIG_KEYS = ("block_m", "block_n", "block_k", "num_warps", "num_stages", "warp_specialize")


def config_of(deploy):
    return read_spec(deploy, "matmul", CONFIG_KEYS)


def host_times(call, repeats):
    """median_us and min_us of `call` by the host clock (the emulator: nothing is asynchronous)."""
    us = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        call()
        us.append((time.perf_counter() - t0) * 1e6)
    return {"median_us": statistics.median(us), "min_us": min(us)}


def report(title, rows, json_out):
    """Prints the table of `rows` (impl, median_us, tflops, pct_peak, ok, max_abs_err) under
    `title`, appends them to json_out as JSON lines; returns whether every row is right."""
    width = max(len(r["impl"]) for r in rows) + 2
    print(title)
    print(f"{'implementation':<{width}}{'us':>10}{'TFLOP/s':>10}{'% peak':>8}  check")
    for r in rows:
        tf = f"{r['tflops']:.1f}" if r["tflops"] is not None else "-"
        pk = f"{r['pct_peak']:.1f}" if r["pct_peak"] is not None else "-"
        print(f"{r['impl']:<{width}}{r['median_us']:>10.1f}{tf:>10}{pk:>8}  "
              f"{'ok' if r['ok'] else 'WRONG'} (max abs err {r['max_abs_err']:.2e}, atol {r['atol']:.2e})")
    if json_out:
        with open(json_out, "a") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
    return all(r["ok"] for r in rows)


def config_text(config):
    return " ".join(f"{k}={config[k]}" for k in config)


def warp_specialize_pairs(rows):
    """Lines comparing each config with warp_specialize=1 to the same config with 0 (both in
    `rows`, with their "config"): TFLOP/s and the speedup on a GPU, the times on the emulator
    (no claim). A config with warp_specialize=1 and no partner is an error: the check exists to
    time the two side by side."""
    lines = []
    for ws in (r for r in rows if r.get("config", {}).get("warp_specialize") == 1):
        plain_cfg = dict(ws["config"], warp_specialize=0)
        plain = next((r for r in rows if r.get("config") == plain_cfg), None)
        if plain is None:
            raise gpu_peers.ToolError(f"no config {config_text(plain_cfg)} to compare {ws['impl']} with")
        tile = config_text({k: v for k, v in plain_cfg.items() if k != "warp_specialize"})
        if ws["tflops"] is not None and plain["tflops"] is not None:
            lines.append(f"warp specialization at {tile}: {ws['tflops']:.1f} TFLOP/s against {plain['tflops']:.1f} "
                         f"without ({plain['median_us'] / ws['median_us']:.3f}x)")
        else:
            lines.append(f"warp specialization at {tile}: {ws['median_us']:.0f} us against {plain['median_us']:.0f} "
                         f"without on the emulator (not a GPU timing)")
    return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--deploy", action="append", required=True, help="a folder of one compiled matmul config")
    ap.add_argument("--size", type=int, required=True, help="M = N = K")
    ap.add_argument("--backend", choices=("cuda", "emulate"), default="cuda")
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--json-out", help="append one JSON line per implementation")
    args = ap.parse_args()
    try:
        return run(args)
    except gpu_peers.ToolError as e:
        print(f"gpu_gemm: error: {e}", file=sys.stderr)
        return 2


def run(args):
    if args.size < 1 or args.repeats < 1:
        raise gpu_peers.ToolError("--size and --repeats must be positive")
    tilec = tilec_py_peer.import_tilec()
    n = args.size
    flop = 2.0 * n * n * n
    rng = np.random.default_rng(7)
    a_bits = gpu_peers.f32_to_bf16_bits(rng.uniform(-1, 1, (n, n)).astype(np.float32))
    b_bits = gpu_peers.f32_to_bf16_bits(rng.uniform(-1, 1, (n, n)).astype(np.float32))
    rows = []
    if args.backend == "cuda":
        torch = gpu_peers._import_torch()
        torch.backends.cuda.matmul.allow_tf32 = False  # the fp32 reference must be fp32
        dev = torch.device("cuda")
        a = torch.from_numpy(a_bits.view(np.int16)).to(dev).view(torch.bfloat16)
        b = torch.from_numpy(b_bits.view(np.int16)).to(dev).view(torch.bfloat16)
        ref = (a.float() @ b.float()).cpu().numpy().astype(np.float64)
        device = torch.cuda.get_device_name()
        peak = peak_of(device)
        impls = []
        impls.append(("torch.matmul", lambda: torch.matmul(a, b), True, None))
        import matmul_vs_triton as mvt
        _, gemm_tile = mvt.define_triton_kernel()
        c_triton = torch.empty((n, n), dtype=torch.float32, device=dev)

        def triton_run():
            grid = ((n + mvt.BM - 1) // mvt.BM, (n + mvt.BN - 1) // mvt.BN)
            gemm_tile[grid](a, b, c_triton, n, n, n, n, n, n, BLOCK_M=mvt.BM, BLOCK_N=mvt.BN, BLOCK_K=mvt.BK,
                            num_warps=mvt.WARPS, num_stages=mvt.STAGES)
            return c_triton
        impls.append((f"triton (tile {mvt.BM}x{mvt.BN}x{mvt.BK})", triton_run, False, None))
        for d in args.deploy:
            store = tilec.load(d, backend="cuda")
            cfg = config_of(d)
            impls.append((f"tilec {config_text(cfg)}", (lambda s=store, c=cfg: s.run("matmul", config=c, a=a, b=b)),
                          False, cfg))
        for name, fn, bf16_out, cfg in impls:
            t = gpu_peers.time_cuda(torch, fn, args.repeats)
            got = fn().float().cpu().numpy().astype(np.float64)
            if bf16_out:  # torch's bf16 output is rounded to bf16: 2^-8 relative
                err = float(np.max(np.abs(got - ref)))
                ok = bool(np.all(np.abs(got - ref) <= 1e-5 * n + 8e-3 * np.abs(ref)))
                atol = 1e-5 * n
            else:
                ok, err, atol = check(got, ref, n)
            tflops = flop / (t["median_us"] * 1e-6) / 1e12
            rows.append({"name": f"gemm_bf16_{n}", "impl": name, **({"config": cfg} if cfg else {}),
                         "median_us": t["median_us"], "min_us": t["min_us"], "tflops": tflops, "pct_peak": 100 * tflops / peak if peak else None, "ok": ok,
                         "max_abs_err": err, "atol": atol, "device": device, "repeats": args.repeats})
    else:
        ref = gpu_peers.to_f64(a_bits, "bf16") @ gpu_peers.to_f64(b_bits, "bf16")
        device = "CPU emulator (dry run)"
        for d in args.deploy:
            store = tilec.load(d, backend="emulate")
            out = np.empty((n, n), dtype=np.float32)
            cfg = config_of(d)
            call = lambda s=store, c=cfg: s.run("matmul", config=c, a=tilec_py_peer.Bf16Bits(a_bits),
                                                b=tilec_py_peer.Bf16Bits(b_bits), c=out)
            call()  # warm-up: the emulator loads the module
            t = host_times(call, args.repeats)
            ok, err, atol = check(out.astype(np.float64), ref, n)
            rows.append({"name": f"gemm_bf16_{n}", "impl": f"tilec {config_text(cfg)}", "config": cfg, **t, "tflops": None,
                         "pct_peak": None, "ok": ok, "max_abs_err": err, "atol": atol, "device": device,
                         "repeats": args.repeats})
    ok = report(f"GEMM C = A B, bf16 {n}x{n}x{n}, f32 accumulation, on {device} (median of {args.repeats})", rows,
                args.json_out)
    for line in warp_specialize_pairs(rows):
        print(line)
    return 0 if ok else 1

if __name__ == "__main__":
    sys.exit(main())
