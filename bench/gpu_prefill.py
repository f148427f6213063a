#!/usr/bin/env python3
"""The GPU check's prefill step: causal attention over a whole prompt, Sq = ctx (2048 on the
GPU), bf16, D = 128, page 16. tilec's paged-attention prefill tile (one folder, written by
`tilec compile paged_attention ... causal=1 -o DIR`: its module and kernel card; on sm_90 both
of its dots run as wgmma) through its Python package on the paged cache, against PyTorch's
scaled-dot-product attention (FlashAttention where PyTorch picks it) on K/V gathered into
dense tensors beforehand (not timed); each timed and checked against an fp32 reference.
Prints us, TFLOP/s (causal: half of 4 B Hq Sq ctx D) and % of the dense bf16 peak.

  bench/gpu_prefill.py --deploy DIR --batch B --hq H --hkv G --head-dim D --sq S
                         [--backend cuda|emulate] [--repeats R] [--json-out FILE]

--backend emulate is the dry run: NumPy inputs, tilec on the CPU emulator, a float64 NumPy
reference, no peers. Exit status: 0 every result right; 1 a result wrong; 2 an error.
"""

import argparse
import math
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gpu_gemm  # noqa: E402  (peak_of, config reading)
import gpu_peers  # noqa: E402  (timing, bf16 helpers, compare, ToolError)
import tilec_py_peer  # noqa: E402  (import_tilec, Bf16Bits)

BLOCK_SIZE = 16
CONFIG_KEYS = ("block_n", "num_warps", "num_stages", "head_group", "num_splits", "block_m", "overlap")


def config_of(deploy):
    return gpu_gemm.read_spec(deploy, "paged_attention", CONFIG_KEYS)


def causal_reference(q, k, v, scale):
    """float64 causal attention, q [B, Hq, S, D], k/v dense [B, Hkv, S, D]: row i sees keys <= i."""
    batch, hq, s, d = q.shape
    group = hq // k.shape[1]
    out = np.zeros_like(q)
    mask = np.triu(np.ones((s, s), dtype=bool), 1)
    for b in range(batch):
        for h in range(hq):
            sc = q[b, h] @ k[b, h // group].T * scale
            sc[mask] = -np.inf
            sc -= sc.max(axis=-1, keepdims=True)
            p = np.exp(sc)
            p /= p.sum(axis=-1, keepdims=True)
            out[b, h] = p @ v[b, h // group]
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--deploy", required=True, help="a folder with one compiled paged_attention prefill config")
    for name in ("batch", "hq", "hkv", "head-dim", "sq"):
        ap.add_argument(f"--{name}", type=int, required=True)
    ap.add_argument("--backend", choices=("cuda", "emulate"), default="cuda")
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--json-out", help="append one JSON line per implementation")
    args = ap.parse_args()
    try:
        return run(args)
    except gpu_peers.ToolError as e:
        print(f"gpu_prefill: error: {e}", file=sys.stderr)
        return 2


def run(args):
    if min(args.batch, args.hq, args.hkv, args.head_dim, args.sq, args.repeats) < 1 or args.hq % args.hkv:
        raise gpu_peers.ToolError("sizes and --repeats must be positive, and --hq a multiple of --hkv")
    tilec = tilec_py_peer.import_tilec()
    cfg = config_of(args.deploy)
    b, hq, hkv, d, s = args.batch, args.hq, args.hkv, args.head_dim, args.sq
    pages = -(-s // BLOCK_SIZE)
    scale = 1.0 / math.sqrt(d)
    rng = np.random.default_rng(11)
    bits = lambda shape: gpu_peers.f32_to_bf16_bits(rng.uniform(-1, 1, shape).astype(np.float32))
    q_bits = bits((b, hq, s, d))
    k_bits = bits((b * pages, BLOCK_SIZE, hkv, d))
    v_bits = bits((b * pages, BLOCK_SIZE, hkv, d))
    block_table = rng.permutation(b * pages).astype(np.int32).reshape(b, pages)  # pages in any order
    context_lens = np.full((b,), s, dtype=np.int32)

    def dense(cache_bits):  # [B, Hkv, S, D] float64, through the block table
        c = gpu_peers.to_f64(cache_bits, "bf16")
        return c[block_table].reshape(b, pages * BLOCK_SIZE, hkv, d)[:, :s].transpose(0, 2, 1, 3)

    flop = 4.0 * b * hq * s * s * d / 2  # causal: half the scores and half of P V
    atol, rtol = gpu_peers.TOLERANCES["bf16"]
    rows = []
    tilec_args = dict(softmax_scale=scale, ctx=s, causal=1)
    if args.backend == "cuda":
        torch = gpu_peers._import_torch()
        torch.backends.cuda.matmul.allow_tf32 = False
        dev = torch.device("cuda")
        to_dev = lambda x: torch.from_numpy(x.view(np.int16)).to(dev).view(torch.bfloat16)
        q, k_cache, v_cache = to_dev(q_bits), to_dev(k_bits), to_dev(v_bits)
        bt, cl = torch.from_numpy(block_table).to(dev), torch.from_numpy(context_lens).to(dev)
        idx = bt.long()
        k_dense = k_cache[idx].reshape(b, -1, hkv, d)[:, :s].permute(0, 2, 1, 3).contiguous()
        v_dense = v_cache[idx].reshape(b, -1, hkv, d)[:, :s].permute(0, 2, 1, 3).contiguous()
        sdpa = torch.nn.functional.scaled_dot_product_attention
        ref = sdpa(q.float(), k_dense.float().repeat_interleave(hq // hkv, 1),
                   v_dense.float().repeat_interleave(hq // hkv, 1), is_causal=True, scale=scale).cpu().numpy()
        device = torch.cuda.get_device_name()
        peak = gpu_gemm.peak_of(device)
        store = tilec.load(args.deploy, backend="cuda")
        k_rep, v_rep = k_dense.repeat_interleave(hq // hkv, 1), v_dense.repeat_interleave(hq // hkv, 1)
        impls = [("torch SDPA (dense K/V, causal)", lambda: sdpa(q, k_rep, v_rep, is_causal=True, scale=scale)),
                 ("tilec " + gpu_gemm.config_text(cfg),
                  lambda: store.run("paged_attention", config=cfg, q=q, k_cache=k_cache, v_cache=v_cache,
                                    block_table=bt, context_lens=cl, **tilec_args))]
        for name, fn in impls:
            t = gpu_peers.time_cuda(torch, fn, args.repeats)
            ok, err, _ = gpu_peers.compare(fn().float().cpu().numpy(), ref, atol, rtol)
            tflops = flop / (t["median_us"] * 1e-6) / 1e12
            rows.append({"impl": name, "median_us": t["median_us"], "min_us": t["min_us"], "tflops": tflops,
                         "pct_peak": 100 * tflops / peak if peak else None, "ok": ok, "max_abs_err": err,
                         "device": device})
    else:
        ref = causal_reference(gpu_peers.to_f64(q_bits, "bf16"), dense(k_bits), dense(v_bits), scale)
        store = tilec.load(args.deploy, backend="emulate")
        out = tilec_py_peer.Bf16Bits(np.empty(q_bits.shape, dtype=np.uint16))
        call = lambda: store.run("paged_attention", config=cfg, q=tilec_py_peer.Bf16Bits(q_bits),
                                 k_cache=tilec_py_peer.Bf16Bits(k_bits), v_cache=tilec_py_peer.Bf16Bits(v_bits),
                                 block_table=block_table, context_lens=context_lens, out=out, **tilec_args)
        call()  # warm-up: the emulator loads the modules
        t = gpu_gemm.host_times(call, args.repeats)
        ok, err, _ = gpu_peers.compare(gpu_peers.to_f64(out.bits, "bf16"), ref, atol, rtol)
        rows.append({"impl": "tilec " + gpu_gemm.config_text(cfg), **t, "tflops": None, "pct_peak": None, "ok": ok,
                     "max_abs_err": err, "device": "CPU emulator (dry run)"})
    name = f"prefill_b{b}_hq{hq}_hkv{hkv}_d{d}_s{s}_causal"
    for r in rows:
        r.update(name=name, atol=atol, rtol=rtol, repeats=args.repeats)
    ok = gpu_gemm.report(f"prefill {name}: bf16, page {BLOCK_SIZE}, causal, on {rows[0]['device']} "
                         f"(median of {args.repeats})", rows, args.json_out)
    return 0 if ok else 1

if __name__ == "__main__":
    sys.exit(main())
