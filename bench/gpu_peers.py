#!/usr/bin/env python3
"""Peers for tilec's paged-attention decode op on the GPU check: input generation, PyTorch SDPA
and Triton baselines (timed and checked against a float32 reference, and tilec's output against
all of them), device copy bandwidth, a roofline-style SVG, and a CPU-only check of tilec's output.

Layouts (tilec's paged_attention op, .npy files; bf16 stored as raw uint16 bits '<u2', f16 as
'<f2', int32 as '<i4'):
  q.npy            [B, Hq, 1, D]
  k_cache.npy      [num_blocks, block_size, Hkv, D]
  v_cache.npy      [num_blocks, block_size, Hkv, D]
  block_table.npy  [B, max_blocks] int32 page ids
  context_lens.npy [B] int32
  output           [B, Hq, 1, D], the dtype of q
Query head h reads KV head h // (Hq // Hkv); token t of sequence b is at page
block_table[b, t // block_size], slot t % block_size; scale 1/sqrt(D); softmax over the
context_lens[b] tokens (Sq = 1: no causal mask).

Subcommands (see --help of each):
  inputs       generate an input folder (numpy on cpu, torch on cuda)
  peers        time and check torch SDPA, the Triton kernel, tilec through its Python package
               (--tilec-deploy, bench/tilec_py_peer.py) and tilec's output (CUDA)
  copybw       device-to-device copy bandwidth (CUDA)
  roofline     bar chart SVG of GB/s per problem and implementation (CPU)
  check-tilec  float64 numpy reference check of tilec's output (CPU, small inputs)

Exit status: 0 all good; 1 a correctness check failed; 2 an error (bad arguments or inputs,
missing CUDA/torch/triton, ...), with a message on stderr.
"""

import argparse
import json
import math
import os
import statistics
import sys
import time
from xml.sax.saxutils import escape

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
INPUT_FILES = ("q", "k_cache", "v_cache", "block_table", "context_lens")
# (atol, rtol) per dtype: |x - ref| <= atol + rtol * |ref| elementwise.
TOLERANCES = {"bf16": (3e-2, 1e-2), "f16": (4e-3, 1e-2)}
NPY_DESCR = {"bf16": "<u2", "f16": "<f2"}
WARMUP = 5


class ToolError(Exception):
    """An error that ends the command with exit status 2 and this message."""


# --------------------------------------------------------------------------------------------
# dtype helpers (numpy)
# --------------------------------------------------------------------------------------------

def f32_to_bf16_bits(x):
    """float32 array -> bfloat16 bit patterns (uint16), round to nearest even; NaN stays NaN."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    u = x.view(np.uint32).astype(np.uint64)
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(x), np.uint16(0x7FC0), rounded).astype(np.uint16)


def bf16_bits_to_f32(bits):
    """bfloat16 bit patterns (uint16) -> float32 (exact)."""
    bits = np.ascontiguousarray(bits, dtype=np.uint16)
    return (bits.astype(np.uint32) << 16).view(np.float32)


def dtype_of(arr, what):
    """tilec's dtype name of a 16-bit .npy array: uint16 bits are bf16, float16 is f16."""
    if arr.dtype == np.uint16:
        return "bf16"
    if arr.dtype == np.float16:
        return "f16"
    raise ToolError(f"{what}: dtype {arr.dtype.str} is neither '<u2' (bfloat16 bits) nor '<f2' (float16)")


def to_f64(arr, dtype):
    """A bf16-bits or f16 array as float64."""
    if dtype == "bf16":
        return bf16_bits_to_f32(arr).astype(np.float64)
    return arr.astype(np.float64)


def from_f32(x, dtype):
    """float32 values rounded to dtype, in the .npy storage form ('<u2' bits or '<f2')."""
    return f32_to_bf16_bits(x) if dtype == "bf16" else np.asarray(x, dtype=np.float32).astype(np.float16)


# --------------------------------------------------------------------------------------------
# .npy I/O and validation
# --------------------------------------------------------------------------------------------

def save_npy(path, arr, descr):
    """np.save with a check that the file gets exactly the layout tilec expects."""
    arr = np.ascontiguousarray(arr)
    if arr.dtype.str != descr:
        raise ToolError(f"internal error: {path} would be written as {arr.dtype.str}, expected {descr}")
    np.save(path, arr, allow_pickle=False)


def load_npy(path):
    if not os.path.isfile(path):
        raise ToolError(f"{path}: no such file")
    try:
        return np.load(path, allow_pickle=False)
    except (ValueError, OSError) as e:
        raise ToolError(f"{path}: not a readable .npy file ({e})") from e


def load_inputs(folder):
    """Reads and validates an input folder; returns (dict of numpy arrays, shape info dict)."""
    if not os.path.isdir(folder):
        raise ToolError(f"{folder}: no such folder")
    a = {name: load_npy(os.path.join(folder, name + ".npy")) for name in INPUT_FILES}
    q, k, v, bt, cl = (a[n] for n in INPUT_FILES)
    dtype = dtype_of(q, "q.npy")
    for name in ("k_cache", "v_cache"):
        if a[name].dtype != q.dtype:
            raise ToolError(f"{name}.npy: dtype {a[name].dtype.str} differs from q.npy's {q.dtype.str}")
    for name in ("block_table", "context_lens"):
        if a[name].dtype.str != "<i4":
            raise ToolError(f"{name}.npy: dtype {a[name].dtype.str}, expected '<i4' (int32)")
    if q.ndim != 4:
        raise ToolError(f"q.npy: shape {q.shape}, expected [B, Hq, Sq, D]")
    batch, hq, sq, d = q.shape
    if sq != 1:
        raise ToolError(f"q.npy: Sq = {sq}; these tools handle decode only (Sq = 1)")
    if k.ndim != 4 or k.shape != v.shape:
        raise ToolError(f"k_cache.npy {k.shape} and v_cache.npy {v.shape} must both be "
                        "[num_blocks, block_size, Hkv, D]")
    num_blocks, block_size, hkv, kd = k.shape
    if kd != d:
        raise ToolError(f"head dim of q.npy ({d}) and of the caches ({kd}) differ")
    if hkv < 1 or hq % hkv:
        raise ToolError(f"Hq = {hq} is not a multiple of Hkv = {hkv}")
    if bt.ndim != 2 or bt.shape[0] != batch:
        raise ToolError(f"block_table.npy: shape {bt.shape}, expected [B={batch}, max_blocks]")
    if cl.shape != (batch,):
        raise ToolError(f"context_lens.npy: shape {cl.shape}, expected [B={batch}]")
    if (cl < 0).any():
        raise ToolError(f"context_lens.npy: negative length {int(cl.min())}")
    max_blocks = bt.shape[1]
    if (cl > max_blocks * block_size).any():
        raise ToolError(f"context_lens.npy: a length of {int(cl.max())} tokens needs more than the "
                        f"block table's {max_blocks} pages of {block_size}")
    for b in range(batch):
        used = bt[b, :-(-int(cl[b]) // block_size)]
        if used.size and (used.min() < 0 or used.max() >= num_blocks):
            raise ToolError(f"block_table.npy: sequence {b} uses page id {int(used.min())}..{int(used.max())}, "
                            f"outside [0, {num_blocks})")
    info = {"batch": batch, "hq": hq, "hkv": hkv, "head_dim": d, "block_size": block_size,
            "num_blocks": num_blocks, "max_blocks": max_blocks, "dtype": dtype,
            "ctx_min": int(cl.min()), "ctx_max": int(cl.max()), "ctx_total": int(cl.sum())}
    return a, info


def load_output(path, info, q_descr, what="tilec output"):
    out = load_npy(path)
    expect = (info["batch"], info["hq"], 1, info["head_dim"])
    if out.shape != expect:
        raise ToolError(f"{what} {path}: shape {out.shape}, expected {expect} (the shape of q)")
    if out.dtype.str != q_descr:
        raise ToolError(f"{what} {path}: dtype {out.dtype.str}, expected {q_descr} (the dtype of q)")
    return out


def shape_text(info):
    ctx = str(info["ctx_max"]) if info["ctx_min"] == info["ctx_max"] else f"{info['ctx_min']}..{info['ctx_max']}"
    return (f"B={info['batch']} Hq={info['hq']} Hkv={info['hkv']} D={info['head_dim']} ctx={ctx} "
            f"block={info['block_size']} {info['dtype']}")


def ideal_bytes(info):
    """q + out + the live K and V rows + block_table + context_lens (16-bit q/K/V/out)."""
    elem = 2
    qo = info["batch"] * info["hq"] * info["head_dim"] * elem
    kv = info["ctx_total"] * info["hkv"] * info["head_dim"] * elem
    return 2 * qo + 2 * kv + info["batch"] * info["max_blocks"] * 4 + info["batch"] * 4


# --------------------------------------------------------------------------------------------
# numpy reference and comparison
# --------------------------------------------------------------------------------------------

def paged_reference(q, k, v, block_table, context_lens, scale):
    """float64 paged decode attention on float arrays q [B,Hq,1,D], k/v [NB,BS,Hkv,D].
    A sequence of length 0 gives zeros."""
    batch, hq, _, d = q.shape
    _, bs, hkv, _ = k.shape
    group = hq // hkv
    out = np.zeros((batch, hq, 1, d), dtype=np.float64)
    for b in range(batch):
        n = int(context_lens[b])
        if n == 0:
            continue
        pages = block_table[b, :-(-n // bs)]
        kb = k[pages].reshape(-1, hkv, d)[:n]  # [n, Hkv, D]
        vb = v[pages].reshape(-1, hkv, d)[:n]
        qb = q[b, :, 0, :].reshape(hkv, group, d)  # query head h = kv * group + g
        s = np.einsum("hgd,thd->hgt", qb, kb) * scale
        s -= s.max(axis=-1, keepdims=True)
        p = np.exp(s)
        p /= p.sum(axis=-1, keepdims=True)
        out[b, :, 0, :] = np.einsum("hgt,thd->hgd", p, vb).reshape(hq, d)
    return out


def compare(got, ref, atol, rtol):
    """(ok, max_abs_err, text about the worst element relative to its tolerance)."""
    got = np.asarray(got, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if got.shape != ref.shape:
        raise ToolError(f"internal error: comparing shapes {got.shape} and {ref.shape}")
    finite = np.isfinite(got)
    if not finite.all():
        idx = tuple(int(i) for i in np.argwhere(~finite)[0])
        return False, float("inf"), f"{int((~finite).sum())} non-finite values, first at {idx}"
    err = np.abs(got - ref)
    excess = err - (atol + rtol * np.abs(ref))
    worst = np.unravel_index(int(np.argmax(excess)), excess.shape)
    ok = bool((excess <= 0).all())
    idx = tuple(int(i) for i in worst)
    text = (f"{'closest to its tolerance' if ok else 'worst'} at {idx}: got {got[worst]:.6g}, "
            f"expected {ref[worst]:.6g}"
            + ("" if ok else f" ({int((excess > 0).sum())} of {excess.size} outside tolerance)"))
    return ok, float(err.max()) if err.size else 0.0, text


# --------------------------------------------------------------------------------------------
# inputs
# --------------------------------------------------------------------------------------------

def cmd_inputs(args):
    for name in ("batch", "hq", "hkv", "head_dim", "ctx", "block_size"):
        if getattr(args, name) < 1:
            raise ToolError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.hq % args.hkv:
        raise ToolError(f"--hq {args.hq} is not a multiple of --hkv {args.hkv}")
    max_blocks = -(-args.ctx // args.block_size)
    num_blocks = args.batch * max_blocks
    q_shape = (args.batch, args.hq, 1, args.head_dim)
    kv_shape = (num_blocks, args.block_size, args.hkv, args.head_dim)
    os.makedirs(args.out, exist_ok=True)
    if args.device == "cuda":
        arrays = _inputs_torch(args, q_shape, kv_shape, num_blocks, max_blocks)
    else:
        rng = np.random.default_rng(args.seed)
        arrays = {
            "q": from_f32(rng.standard_normal(q_shape, dtype=np.float32), args.dtype),
            "k_cache": from_f32(rng.standard_normal(kv_shape, dtype=np.float32), args.dtype),
            "v_cache": from_f32(rng.standard_normal(kv_shape, dtype=np.float32), args.dtype),
            "block_table": rng.permutation(num_blocks).astype(np.int32).reshape(args.batch, max_blocks),
        }
    arrays["context_lens"] = np.full((args.batch,), args.ctx, dtype=np.int32)
    descr = NPY_DESCR[args.dtype]
    for name in INPUT_FILES:
        save_npy(os.path.join(args.out, name + ".npy"), arrays[name],
                 "<i4" if name in ("block_table", "context_lens") else descr)
    size = sum(arrays[n].nbytes for n in INPUT_FILES)
    print(f"gpu_peers inputs: B={args.batch} Hq={args.hq} Hkv={args.hkv} D={args.head_dim} ctx={args.ctx} "
          f"block={args.block_size} {args.dtype} seed={args.seed} on {args.device}: {num_blocks} pages, "
          f"{size / 2**20:.1f} MiB in {args.out}")
    return 0


def _import_torch(need_cuda=True):
    try:
        import torch
    except ImportError as e:
        raise ToolError(f"torch is not importable ({e}); this subcommand needs PyTorch") from e
    if need_cuda and not torch.cuda.is_available():
        raise ToolError("torch.cuda.is_available() is False: this subcommand needs a CUDA GPU")
    return torch


def _torch_dtype(torch, dtype):
    return torch.bfloat16 if dtype == "bf16" else torch.float16


def _to_numpy_storage(torch, t):
    """A torch f16/bf16/int32 tensor -> numpy array in tilec's .npy storage form."""
    t = t.detach().contiguous().cpu()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(np.uint16)
    return t.numpy()


def _inputs_torch(args, q_shape, kv_shape, num_blocks, max_blocks):
    torch = _import_torch()
    dev = torch.device("cuda")
    gen = torch.Generator(device=dev)
    gen.manual_seed(args.seed)
    dt = _torch_dtype(torch, args.dtype)
    q = torch.randn(q_shape, generator=gen, device=dev, dtype=dt)
    k = torch.randn(kv_shape, generator=gen, device=dev, dtype=dt)
    v = torch.randn(kv_shape, generator=gen, device=dev, dtype=dt)
    bt = torch.randperm(num_blocks, generator=gen, device=dev).to(torch.int32).view(args.batch, max_blocks)
    return {"q": _to_numpy_storage(torch, q), "k_cache": _to_numpy_storage(torch, k),
            "v_cache": _to_numpy_storage(torch, v), "block_table": _to_numpy_storage(torch, bt)}


# --------------------------------------------------------------------------------------------
# check-tilec (CPU)
# --------------------------------------------------------------------------------------------

def cmd_check_tilec(args):
    a, info = load_inputs(args.inputs)
    out = load_output(args.tilec_output, info, a["q"].dtype.str)
    dt = info["dtype"]
    scale = 1.0 / math.sqrt(info["head_dim"])
    ref = paged_reference(to_f64(a["q"], dt), to_f64(a["k_cache"], dt), to_f64(a["v_cache"], dt),
                          a["block_table"], a["context_lens"], scale)
    atol, rtol = TOLERANCES[dt]
    ok, err, text = compare(to_f64(out, dt), ref, atol, rtol)
    print(f"check-tilec {shape_text(info)}: {'ok' if ok else 'MISMATCH'} max_abs_err={err:.3g} "
          f"(atol {atol:g}, rtol {rtol:g}; float64 numpy reference); {text}")
    return 0 if ok else 1


# --------------------------------------------------------------------------------------------
# peers (CUDA)
# --------------------------------------------------------------------------------------------

def time_cuda(torch, fn, repeats, warmup=WARMUP):
    """Median/min/max microseconds of fn() over repeats, each bracketed by CUDA events.
    Before each timed run a 256 MiB buffer is zeroed: this evicts the 50 MB L2 (every run starts
    cold) and keeps the GPU busy while the host enqueues fn, so host-side launch overhead (Python
    argument checks, Triton's launcher) is not counted as GPU time."""
    flush = torch.empty(256 * 2**20, dtype=torch.uint8, device="cuda")
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
    for i in range(repeats):
        flush.zero_()
        starts[i].record()
        fn()
        ends[i].record()
    torch.cuda.synchronize()
    us = [s.elapsed_time(e) * 1000.0 for s, e in zip(starts, ends)]
    del flush
    return {"median_us": statistics.median(us), "min_us": min(us), "max_us": max(us)}


def _load_triton_module():
    import importlib.util
    path = os.path.join(ROOT, "bench", "triton_paged_decode.py")
    spec = importlib.util.spec_from_file_location("triton_paged_decode", path)
    if spec is None or spec.loader is None:
        raise ToolError(f"cannot load {path}")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    if mod.triton is None:
        raise ToolError(f"triton is not importable ({mod._TRITON_IMPORT_ERROR}); peers needs Triton")
    return mod


def _load_tilec_py_peer():
    import importlib.util
    path = os.path.join(ROOT, "bench", "tilec_py_peer.py")
    spec = importlib.util.spec_from_file_location("tilec_py_peer", path)
    if spec is None or spec.loader is None:
        raise ToolError(f"cannot load {path}")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _time_tilec_py(torch, args, q, k_cache, v_cache, block_table, context_lens, scale, ctx):
    """tilec through python/tilec on these tensors: (output, timing, row fields), or (None, None,
    {"error": ...}) when that path fails, so the other peers are still measured and reported."""
    try:
        tpp = _load_tilec_py_peer()
        store = tpp.import_tilec().load(args.tilec_deploy, backend="cuda")
        run, call = tpp.make_runner(store, q, k_cache, v_cache, block_table, context_lens, scale, ctx)
        run()
        t = time_cuda(torch, run, args.repeats)
        fields = tpp.describe_call(call, args.tilec_config)
        fields["host_us"] = tpp.host_us(run, args.repeats, torch.cuda.synchronize)
        out = run()
        torch.cuda.synchronize()
        return out, t, fields
    except Exception as e:  # the library, the folder, the selection or a launch: reported in the row
        return None, None, {"error": f"{type(e).__name__}: {e}"}


def _to_torch(torch, arr, dev):
    if arr.dtype == np.uint16:  # bf16 bits
        return torch.from_numpy(np.ascontiguousarray(arr).view(np.int16)).to(dev).view(torch.bfloat16)
    return torch.from_numpy(np.ascontiguousarray(arr)).to(dev)


def cmd_peers(args):
    if args.repeats < 1:
        raise ToolError(f"--repeats must be >= 1, got {args.repeats}")
    a, info = load_inputs(args.inputs)
    tilec_np = load_output(args.tilec_output, info, a["q"].dtype.str) if args.tilec_output else None
    torch = _import_torch()
    torch.backends.cuda.matmul.allow_tf32 = False  # the float32 reference must be true fp32
    tpd = _load_triton_module()
    if info["ctx_min"] != info["ctx_max"]:
        raise ToolError(f"{args.inputs}: context lengths differ ({info['ctx_min']}..{info['ctx_max']}); "
                        "peers gathers K/V into one dense [B, Hkv, ctx, D] tensor for SDPA and needs "
                        "equal lengths (the inputs subcommand makes them equal)")
    if info["ctx_max"] == 0:
        raise ToolError(f"{args.inputs}: every context length is 0; nothing to measure")
    os.makedirs(args.out, exist_ok=True)
    name = args.name or os.path.basename(os.path.normpath(args.inputs))
    dt = info["dtype"]
    dev = torch.device("cuda")
    B, hq, hkv, d, bs, ctx = (info[k] for k in ("batch", "hq", "hkv", "head_dim", "block_size", "ctx_max"))
    group = hq // hkv
    scale = 1.0 / math.sqrt(d)
    q = _to_torch(torch, a["q"], dev)
    k_cache = _to_torch(torch, a["k_cache"], dev)
    v_cache = _to_torch(torch, a["v_cache"], dev)
    block_table = _to_torch(torch, a["block_table"], dev)
    context_lens = _to_torch(torch, a["context_lens"], dev)
    nbytes = ideal_bytes(info)
    gpu = torch.cuda.get_device_name()
    print(f"gpu_peers peers {name}: {shape_text(info)} on {gpu}; ideal bytes {nbytes} "
          f"({nbytes / 2**20:.1f} MiB); median of {args.repeats} after {WARMUP} warm-up runs, L2 flushed before each")

    # (a) torch SDPA on K/V gathered through the block table into dense [B, Hkv, ctx, D].
    pages = block_table[:, :-(-ctx // bs)].long()

    def gather():
        kd = k_cache[pages].reshape(B, -1, hkv, d)[:, :ctx].permute(0, 2, 1, 3).contiguous()
        vd = v_cache[pages].reshape(B, -1, hkv, d)[:, :ctx].permute(0, 2, 1, 3).contiguous()
        return kd, vd

    gather_t = time_cuda(torch, gather, args.repeats)
    k_dense, v_dense = gather()
    sdpa = torch.nn.functional.scaled_dot_product_attention
    try:
        sdpa(q, k_dense, v_dense, scale=scale, enable_gqa=True)
        sdpa_note = "enable_gqa=True"

        def run_sdpa():
            return sdpa(q, k_dense, v_dense, scale=scale, enable_gqa=True)
    except TypeError:  # a torch without enable_gqa: expand the KV heads beforehand (not timed)
        k_rep = k_dense.repeat_interleave(group, dim=1)
        v_rep = v_dense.repeat_interleave(group, dim=1)
        sdpa_note = "KV heads repeated beforehand (no enable_gqa)"

        def run_sdpa():
            return sdpa(q, k_rep, v_rep, scale=scale)
    sdpa_t = time_cuda(torch, run_sdpa, args.repeats)
    sdpa_out = run_sdpa()

    # (b) the Triton kernel on the paged cache.
    num_splits = args.num_splits
    if num_splits == 0:
        sms = torch.cuda.get_device_properties(dev).multi_processor_count
        num_splits = tpd.auto_num_splits(B, hkv, ctx, args.block_n, sms)

    def run_triton():
        return tpd.paged_decode(q, k_cache, v_cache, block_table, context_lens, scale, num_splits=num_splits,
                                block_n=args.block_n, num_warps=args.num_warps, num_stages=args.num_stages)
    try:
        triton_out = run_triton()  # compiles on the first call
    except ValueError as e:
        raise ToolError(f"triton paged_decode: {e}") from e
    triton_t = time_cuda(torch, run_triton, args.repeats)
    triton_out = run_triton()
    torch.cuda.synchronize()

    # (c) tilec through its Python package: the call a serving engine makes, on the same tensors.
    tilec_py_out, tilec_py_t, tilec_py = None, None, {}
    if args.tilec_deploy:
        tilec_py_out, tilec_py_t, tilec_py = _time_tilec_py(torch, args, q, k_cache, v_cache, block_table,
                                                             context_lens, scale, ctx)

    # float32 reference: math on the gathered K/V, queries grouped per KV head (no head expansion).
    qf = q.float().reshape(B, hkv, group, d)
    s = torch.matmul(qf, k_dense.float().transpose(-1, -2)) * scale  # [B, Hkv, G, ctx]
    ref = torch.matmul(torch.softmax(s, dim=-1), v_dense.float()).reshape(B, hq, 1, d)

    outs = {"torch_sdpa": sdpa_out.float(), "triton": triton_out.float()}
    timings = {"torch_sdpa": sdpa_t, "triton": triton_t}
    if tilec_py_out is not None:
        outs["tilec_py"] = tilec_py_out.float()
        timings["tilec_py"] = tilec_py_t
    if tilec_np is not None:
        outs["tilec"] = _to_torch(torch, tilec_np, dev).float()
    atol, rtol = TOLERANCES[dt]

    def check(x, r):
        if not bool(torch.isfinite(x).all()):
            return False, float("inf")
        err = (x - r).abs()
        ok = bool((err <= atol + rtol * r.abs()).all())
        return ok, float(err.max())

    ref_check = {impl: check(o, ref) for impl, o in outs.items()}
    pair = {}
    for i, x in enumerate(outs):
        for y in list(outs)[i + 1:]:
            pair[(x, y)] = pair[(y, x)] = check(outs[x], outs[y])

    for impl, o in outs.items():
        np.save(os.path.join(args.out, f"out_{impl}.npy"), _to_numpy_storage(torch, o.to(q.dtype)))
    np.save(os.path.join(args.out, "ref_f32.npy"), ref.cpu().numpy())

    lines = []
    failures = []
    if "error" in tilec_py:
        lines.append({"name": name, "impl": "tilec_py", "median_us": None, "gbps": None, "ok": False,
                      "error": tilec_py["error"], "shape": shape_text(info), "device": gpu})
        failures.append(f"tilec_py: {tilec_py['error']}")
        print(f"  {'tilec_py':<11} FAILED   {tilec_py['error']}")
    for impl in outs:
        ref_ok, err = ref_check[impl]
        vs = {other: pair[(impl, other)][1] for other in outs if other != impl}
        vs_ok = all(pair[(impl, other)][0] for other in vs)
        t = timings.get(impl)
        row = {"name": name, "impl": impl, "median_us": None, "gbps": None, "ok": ref_ok and vs_ok,
               "ref_ok": ref_ok, "max_abs_err": err, "vs": vs, "atol": atol, "rtol": rtol,
               "ideal_bytes": nbytes, "shape": shape_text(info), "device": gpu, "repeats": args.repeats}
        if t is not None:
            row.update(median_us=t["median_us"], min_us=t["min_us"], max_us=t["max_us"],
                       gbps=nbytes / (t["median_us"] * 1e-6) / 1e9)
        if impl == "torch_sdpa":
            row.update(gather_us=gather_t["median_us"], note=sdpa_note)
        if impl == "triton":
            row.update(num_splits=num_splits, block_n=args.block_n, num_warps=args.num_warps,
                       num_stages=args.num_stages, triton_version=tpd.triton.__version__)
        if impl == "tilec":
            row.update(note="timed by gpu_bench; checked here", output=os.path.abspath(args.tilec_output))
        if impl == "tilec_py":
            row.update(tilec_py, deploy=os.path.abspath(args.tilec_deploy))
        lines.append(row)
        if not ref_ok:
            failures.append(f"{impl} vs float32 reference: max_abs_err {err:.3g}")
        for other in vs:
            if not pair[(impl, other)][0] and impl < other:
                failures.append(f"{impl} vs {other}: max_abs_diff {pair[(impl, other)][1]:.3g}")
        timing = (f"{row['median_us']:9.2f} us {row['gbps']:8.1f} GB/s" if t is not None
                  else f"{'-':>12} {'-':>13}")
        extra = {"torch_sdpa": f"  (+ gather {gather_t['median_us']:.2f} us; {sdpa_note})",
                 "triton": f"  (splits {num_splits}, block_n {args.block_n}, warps {args.num_warps}, "
                           f"stages {args.num_stages})",
                 "tilec": "  (output checked only)",
                 "tilec_py": f"  (python/tilec store.run; {tilec_py.get('host_us', 0):.1f} us host time a call; "
                             f"{tilec_py.get('config')}"
                             f"{'' if tilec_py.get('same_config_as_tilec', True) else ', NOT the plan winner'})"}[impl]
        vs_text = ", ".join(f"vs {o} {e:.2g}" for o, e in vs.items())
        print(f"  {impl:<11} {'ok' if row['ok'] else 'MISMATCH':<8} {timing}  max_abs_err {err:.3g}; "
              f"{vs_text}{extra}")

    text = "".join(json.dumps(row) + "\n" for row in lines)
    with open(os.path.join(args.out, "peers.jsonl"), "a") as f:
        f.write(text)
    if args.json_out:
        with open(args.json_out, "a") as f:
            f.write(text)
    for msg in failures:
        print(f"gpu_peers: FAILED: {msg} (atol {atol:g}, rtol {rtol:g})", file=sys.stderr)
    return 1 if failures else 0


# --------------------------------------------------------------------------------------------
# copybw (CUDA)
# --------------------------------------------------------------------------------------------

def cmd_copybw(args):
    if args.mib < 1 or args.repeats < 1:
        raise ToolError(f"--mib and --repeats must be >= 1, got {args.mib} and {args.repeats}")
    if args.device == "cpu":  # the dry run's stand-in: host memory, numpy, wall time
        size = args.mib * 2**20
        src = np.ones(size, dtype=np.uint8)
        dst = np.empty_like(src)
        np.copyto(dst, src)
        us = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            np.copyto(dst, src)
            us.append((time.perf_counter() - t0) * 1e6)
        med = statistics.median(us)
        gbps = 2 * size / (med * 1e-6) / 1e9
        row = {"name": "copy", "impl": "copy", "gbps": gbps, "median_us": med, "min_us": min(us), "max_us": max(us),
               "bytes": 2 * size, "mib": args.mib, "repeats": args.repeats, "device": "cpu (host memcpy)"}
        print(f"gpu_peers copybw: {args.mib} MiB host-to-host (dry run, no GPU): {med:.1f} us, {gbps:.1f} GB/s")
        if args.json_out:
            with open(args.json_out, "a") as f:
                f.write(json.dumps(row) + "\n")
        return 0
    torch = _import_torch()
    size = args.mib * 2**20
    src = torch.empty(size, dtype=torch.uint8, device="cuda")
    src.fill_(1)
    dst = torch.empty_like(src)
    t = time_cuda(torch, lambda: dst.copy_(src), args.repeats)
    gbps = 2 * size / (t["median_us"] * 1e-6) / 1e9
    gpu = torch.cuda.get_device_name()
    row = {"name": "copy", "impl": "copy", "gbps": gbps, "median_us": t["median_us"], "min_us": t["min_us"],
           "max_us": t["max_us"], "bytes": 2 * size, "mib": args.mib, "repeats": args.repeats, "device": gpu}
    print(f"gpu_peers copybw: {args.mib} MiB device-to-device on {gpu}: {t['median_us']:.1f} us, "
          f"{gbps:.1f} GB/s (read + write bytes, median of {args.repeats})")
    if args.json_out:
        with open(args.json_out, "a") as f:
            f.write(json.dumps(row) + "\n")
    return 0


# --------------------------------------------------------------------------------------------
# roofline (CPU): hand-written SVG
# --------------------------------------------------------------------------------------------

PALETTE = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#b07aa1", "#edc948", "#9c755f")


def read_results(paths, default_impl=None):
    """(copy GB/s, ordered problems, ordered impls, {(problem, impl): gbps}) from JSON-lines files.
    A line names its problem with "name" (or gpu_bench's "module") and its implementation with
    "impl" (or default_impl). Lines without a GB/s figure are reported on stderr and left out."""
    copies, problems, impls, values = [], [], [], {}
    for path in paths:
        if not os.path.isfile(path):
            raise ToolError(f"{path}: no such file")
        with open(path) as f:
            for lineno, line in enumerate(f, 1):
                line = line.strip()
                if not line:
                    continue
                where = f"{path}:{lineno}"
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as e:
                    raise ToolError(f"{where}: not JSON ({e})") from e
                if not isinstance(obj, dict):
                    raise ToolError(f"{where}: expected a JSON object")
                impl = obj.get("impl", default_impl)
                if impl is None:
                    raise ToolError(f"{where}: no \"impl\" field (pass --default-impl for files such as "
                                    "gpu_bench.jsonl whose lines have none)")
                gbps = obj.get("gbps")
                if impl == "copy":
                    if not isinstance(gbps, (int, float)) or gbps <= 0:
                        raise ToolError(f"{where}: copy line without a positive \"gbps\"")
                    copies.append(float(gbps))
                    continue
                name = obj.get("name", obj.get("module"))
                if name is None:
                    raise ToolError(f"{where}: no \"name\" (or \"module\") field")
                if gbps is None:
                    print(f"gpu_peers roofline: note: {where}: {name}/{impl} has no GB/s (gbps null); "
                          "not drawn", file=sys.stderr)
                    continue
                if not isinstance(gbps, (int, float)) or gbps < 0 or not math.isfinite(gbps):
                    raise ToolError(f"{where}: \"gbps\" is {gbps!r}, not a non-negative number")
                name, impl = str(name), str(impl)
                if (name, impl) in values:
                    print(f"gpu_peers roofline: note: {where}: {name}/{impl} appears again; the later "
                          "line is drawn", file=sys.stderr)
                if name not in problems:
                    problems.append(name)
                if impl not in impls:
                    impls.append(impl)
                values[(name, impl)] = float(gbps)
    if not copies:
        raise ToolError("no line with \"impl\": \"copy\" (run the copybw subcommand with --json-out into "
                        "one of the results files): the chart needs the copy bandwidth")
    if len(copies) > 1:
        print(f"gpu_peers roofline: note: {len(copies)} copy lines; drawing the highest, "
              f"{max(copies):.1f} GB/s", file=sys.stderr)
    if not values:
        raise ToolError("no problem line with a GB/s figure in " + ", ".join(paths))
    return max(copies), problems, impls, values


def _nice_step(span, ticks=6):
    raw = span / ticks
    mag = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 2.5, 5, 10):
        if raw <= m * mag:
            return m * mag
    return 10 * mag


def render_svg(copy_gbps, problems, impls, values, title):
    bar_w, bar_gap, group_pad = 44, 4, 28
    left, right, top, bottom = 78, 24, 64, 92
    plot_h = 360
    groups_w = []
    for name in problems:
        n = sum(1 for i in impls if (name, i) in values)
        groups_w.append(max(n * (bar_w + bar_gap) - bar_gap, 7.0 * len(name)) + group_pad)
    # Wide enough for the title (15 px bold, about 9 px a character) and the footnote.
    plot_w = max(sum(groups_w), 420, 9.0 * len(title) - left - right + 20, 560 - left - right)
    width, height = left + plot_w + right, top + plot_h + bottom
    ymax_data = max(max(values.values()), copy_gbps)
    step = _nice_step(ymax_data * 1.12)
    ymax = step * math.ceil(ymax_data * 1.12 / step)

    def y(v):
        return top + plot_h - v / ymax * plot_h

    colour = {impl: PALETTE[i % len(PALETTE)] for i, impl in enumerate(impls)}
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
           f'viewBox="0 0 {width:.0f} {height:.0f}" font-family="sans-serif" font-size="11">',
           f'<rect x="0" y="0" width="{width:.0f}" height="{height:.0f}" fill="white"/>',
           f'<text x="{width / 2:.1f}" y="24" text-anchor="middle" font-size="15" '
           f'font-weight="bold">{escape(title)}</text>']
    # y axis, grid and ticks
    v = 0.0
    while v <= ymax + 1e-9:
        out.append(f'<line x1="{left}" y1="{y(v):.1f}" x2="{left + plot_w:.1f}" y2="{y(v):.1f}" '
                   f'stroke="#e0e0e0" stroke-width="1"/>')
        out.append(f'<text x="{left - 6}" y="{y(v) + 4:.1f}" text-anchor="end">{v:g}</text>')
        v += step
    out.append(f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + plot_h}" stroke="black"/>')
    out.append(f'<line x1="{left}" y1="{top + plot_h}" x2="{left + plot_w:.1f}" y2="{top + plot_h}" stroke="black"/>')
    out.append(f'<text transform="translate(18,{top + plot_h / 2:.1f}) rotate(-90)" text-anchor="middle" '
               f'font-size="12">GB/s (ideal bytes / median time)</text>')
    # bars
    x0 = left
    for name, gw in zip(problems, groups_w):
        present = [i for i in impls if (name, i) in values]
        bars_w = len(present) * (bar_w + bar_gap) - bar_gap
        bx = x0 + (gw - bars_w) / 2
        for impl in present:
            val = values[(name, impl)]
            pct = 100.0 * val / copy_gbps
            out.append(f'<rect x="{bx:.1f}" y="{y(val):.1f}" width="{bar_w}" height="{y(0) - y(val):.1f}" '
                       f'fill="{colour[impl]}"><title>{escape(f"{name} {impl}: {val:.1f} GB/s, {pct:.0f}% of copy")}'
                       f'</title></rect>')
            cx = bx + bar_w / 2
            out.append(f'<text x="{cx:.1f}" y="{y(val) - 16:.1f}" text-anchor="middle" font-size="10">{val:.0f}</text>')
            out.append(f'<text x="{cx:.1f}" y="{y(val) - 5:.1f}" text-anchor="middle" font-size="10" '
                       f'fill="#555">{pct:.0f}%</text>')
            bx += bar_w + bar_gap
        out.append(f'<text x="{x0 + gw / 2:.1f}" y="{top + plot_h + 18}" text-anchor="middle">{escape(name)}</text>')
        x0 += gw
    # copy ceiling
    cy = y(copy_gbps)
    out.append(f'<line x1="{left}" y1="{cy:.1f}" x2="{left + plot_w:.1f}" y2="{cy:.1f}" stroke="#c00" '
               f'stroke-width="1.5" stroke-dasharray="6,4"/>')
    out.append(f'<text x="{left + plot_w - 4:.1f}" y="{cy - 6:.1f}" text-anchor="end" fill="#c00">'
               f'device-to-device copy {copy_gbps:.0f} GB/s</text>')
    # legend
    lx, ly = left, top + plot_h + 44
    for impl in impls:
        out.append(f'<rect x="{lx}" y="{ly - 10}" width="12" height="12" fill="{colour[impl]}"/>')
        out.append(f'<text x="{lx + 17}" y="{ly}">{escape(impl)}</text>')
        lx += 30 + 7 * len(impl)
    out.append(f'<text x="{left}" y="{ly + 24}" fill="#555" font-size="10">Bars: GB/s and % of the copy '
               f'bandwidth; bytes = q + out + live K/V + block table + context lengths.</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def cmd_summary(args):
    """The table gpu_check.sh prints: per problem and implementation, us, GB/s and % of the copy
    bandwidth, and whether its check passed. Exit 1 when a line says it failed."""
    copy_gbps, rows, failed = None, [], []
    for path in args.results:
        if not os.path.isfile(path):
            raise ToolError(f"{path}: no such file")
        with open(path) as f:
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    j = json.loads(line)
                except json.JSONDecodeError as e:
                    raise ToolError(f"{path}:{lineno}: not JSON: {e}")
                if j.get("impl") == "copy":
                    copy_gbps = max(copy_gbps or 0.0, float(j["gbps"]))
                    continue
                rows.append(j)
                if j.get("ok") is False:
                    failed.append(f"{j.get('name', j.get('module', '?'))} {j.get('impl', '?')}: "
                                  f"{j.get('error') or j.get('first_mismatch') or 'check failed'}")
    if copy_gbps is None:
        raise ToolError("no copy-bandwidth line (impl \"copy\") among the results")
    print(f"{'problem':<14} {'impl':<11} {'us':>10} {'GB/s':>9} {'% copy':>7}  check")
    for j in rows:
        us, gbps = j.get("median_us"), j.get("gbps")
        pct = f"{100 * gbps / copy_gbps:6.1f}%" if gbps else "      -"
        print(f"{j.get('name', '?'):<14} {j.get('impl', '?'):<11} {us if us is None else f'{us:10.1f}':>10} "
              f"{'-' if gbps is None else f'{gbps:9.1f}':>9} {pct:>7}  {'ok' if j.get('ok') else 'FAILED'}")
    print(f"(device-to-device copy: {copy_gbps:.1f} GB/s, measured in the same run)")
    for f in failed:
        print(f"FAILED: {f}")
    return 1 if failed else 0


def cmd_roofline(args):
    copy_gbps, problems, impls, values = read_results(args.results, args.default_impl)
    svg = render_svg(copy_gbps, problems, impls, values, args.title)
    with open(args.out, "w") as f:
        f.write(svg)
    print(f"gpu_peers roofline: {len(problems)} problems x {len(impls)} implementations "
          f"({', '.join(impls)}), copy {copy_gbps:.1f} GB/s -> {args.out}")
    return 0


# --------------------------------------------------------------------------------------------
# command line
# --------------------------------------------------------------------------------------------

def build_parser():
    parser = argparse.ArgumentParser(prog="gpu_peers.py", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="Exit status: 0 ok, 1 a check failed, 2 an error.")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("inputs", help="write q/k_cache/v_cache/block_table/context_lens .npy files")
    p.add_argument("--out", required=True, help="folder to write (created if missing)")
    p.add_argument("--batch", type=int, required=True, help="B")
    p.add_argument("--hq", type=int, required=True, help="query heads")
    p.add_argument("--hkv", type=int, required=True, help="KV heads (divides --hq)")
    p.add_argument("--head-dim", type=int, required=True, help="D")
    p.add_argument("--ctx", type=int, required=True, help="tokens of every sequence")
    p.add_argument("--block-size", type=int, default=16, help="tokens per page (default 16)")
    p.add_argument("--dtype", choices=("bf16", "f16"), required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="generate with numpy (cpu) or torch on the GPU (cuda; fast for big sizes)")
    p.set_defaults(func=cmd_inputs)

    p = sub.add_parser("peers", help="time and check torch SDPA, Triton and tilec's output on CUDA")
    p.add_argument("--inputs", required=True, help="input folder (from the inputs subcommand)")
    p.add_argument("--out", required=True, help="folder for out_<impl>.npy, ref_f32.npy and peers.jsonl")
    p.add_argument("--tilec-output", help="tilec's output .npy for these inputs (checked, not timed)")
    p.add_argument("--tilec-deploy", help="exported folder: also time and check tilec through its Python "
                                          "package (bench/tilec_py_peer.py; TILEC_LIBRARY names libtilec.so)")
    p.add_argument("--tilec-config", help="the config tilec's own row ran (\"name=value ...\"), to compare with "
                                          "what the Python path selects")
    p.add_argument("--repeats", type=int, default=50, help="timed runs; the median is reported (default 50)")
    p.add_argument("--json-out", help="also append the JSON lines to this file")
    p.add_argument("--name", help="problem name in the JSON lines (default: the input folder's name)")
    p.add_argument("--num-splits", type=int, default=0, help="Triton split-KV factor; 0 = automatic (default)")
    p.add_argument("--block-n", type=int, default=64, help="Triton tokens per step (default 64)")
    p.add_argument("--num-warps", type=int, default=4, help="Triton warps (default 4)")
    p.add_argument("--num-stages", type=int, default=2, help="Triton pipeline stages (default 2)")
    p.set_defaults(func=cmd_peers)

    p = sub.add_parser("copybw", help="device-to-device copy bandwidth on CUDA")
    p.add_argument("--mib", type=int, default=1024, help="buffer size in MiB (default 1024)")
    p.add_argument("--repeats", type=int, default=20, help="timed copies (default 20)")
    p.add_argument("--json-out", help="append the JSON line to this file")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                   help="cuda (default), or cpu: a host memcpy with numpy, the dry run's stand-in")
    p.set_defaults(func=cmd_copybw)

    p = sub.add_parser("summary", help="table of us, GB/s and %% of the copy bandwidth (CPU)")
    p.add_argument("--results", nargs="+", required=True, help="JSON-lines files (copybw, gpu_bench, peers)")
    p.set_defaults(func=cmd_summary)

    p = sub.add_parser("roofline", help="SVG bar chart of GB/s against the copy bandwidth (CPU)")
    p.add_argument("--results", nargs="+", required=True, help="JSON-lines files (peers, copybw, gpu_bench)")
    p.add_argument("--out", required=True, help="SVG file to write")
    p.add_argument("--title", default="Paged decode attention: achieved bandwidth")
    p.add_argument("--default-impl", help="impl for lines without an \"impl\" field (e.g. tilec for gpu_bench.jsonl)")
    p.set_defaults(func=cmd_roofline)

    p = sub.add_parser("check-tilec", help="float64 numpy check of tilec's output (CPU, small inputs)")
    p.add_argument("--inputs", required=True, help="input folder")
    p.add_argument("--tilec-output", required=True, help="tilec's output .npy")
    p.set_defaults(func=cmd_check_tilec)
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except ToolError as e:
        print(f"gpu_peers {args.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
