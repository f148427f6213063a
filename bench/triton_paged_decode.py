#!/usr/bin/env python3
"""A Triton paged-attention decode kernel: the Triton peer that bench/gpu_peers.py times
against tilec's paged_attention modules, plus a compile-time benchmark.

Layouts (the same as tilec's paged_attention op):
  q            [B, Hq, 1, D]                    f16 or bf16
  k_cache      [num_blocks, page_size, Hkv, D]  same dtype as q
  v_cache      [num_blocks, page_size, Hkv, D]  same dtype as q
  block_table  [B, max_blocks] int32            page ids; token t of sequence b lives at
                                                page block_table[b, t // page_size], slot t % page_size
  context_lens [B] int32                        tokens of each sequence
  out          [B, Hq, 1, D]                    dtype of q
Query head h reads KV head h // (Hq // Hkv) (grouped-query attention); softmax over the
sequence's context_lens[b] tokens (a decode step: one query, no causal mask).

Kernel design: one program per (sequence, KV head, split). The program loads all Hq/Hkv query
heads of its group at once (rows padded to at least 16, the smallest tl.dot M), walks its range
of tokens BLOCK_N at a time (gathering each token's K/V row through the block table), and keeps
an online softmax in fp32 (exp2 with log2(e) folded into the scale); QK^T and PV use tl.dot.
With NUM_SPLITS > 1 (flash-decoding) each split writes a normalized partial output and its
log-sum-exp, and a second small kernel combines the splits; this is for few sequences with long
contexts (B=1, 65536 tokens, 8 KV heads is only 8 programs without splitting).

Python API:
  paged_decode(q, k_cache, v_cache, block_table, context_lens, scale,
               num_splits=1, block_n=64, num_warps=4, num_stages=2) -> out
  auto_num_splits(batch, num_kv_heads, max_context, block_n, num_sms) -> int

Command line (no GPU needed; Triton must be installed):
  python3 bench/triton_paged_decode.py compile-bench [--runs 5]
      compiles the kernel for sm_90 (bf16, BLOCK_N=64, group 4, D=128, num_warps=4) in a fresh
      process per run, each with its own empty TRITON_CACHE_DIR, and prints the medians as one
      JSON line: {"triton_version", "import_s", "first_compile_s", "ptxas_s", "process_s", "runs"}.
  python3 bench/triton_paged_decode.py compile-once
      one such process: prints {"triton_version", "import_s", "define_s", "first_compile_s", "ptxas_s"}.
  python3 bench/triton_paged_decode.py compile-warm [--block-n 32,64,128] [--num-warps 4,8]
      one process compiling the kernel for every (BLOCK_N, num_warps) given, one after another
      as an autotuner does, each with a fresh empty TRITON_CACHE_DIR; prints one JSON line with
      each config's compile_s and ptxas_s and their medians. ptxas_s is the time in Triton's
      cubin stage (CUDABackend.make_cubin, which runs ptxas).
"""

import time

# Measure the cost of importing Triton (compile-once reports it), before anything else runs.
_IMPORT_T0 = time.perf_counter()
try:
    import triton
    import triton.language as tl

    _TRITON_IMPORT_ERROR = None
except ImportError as _e:  # the command line (--help, compile-bench's parent) works without it
    triton = None
    tl = None
    _TRITON_IMPORT_ERROR = _e
_TRITON_IMPORT_S = time.perf_counter() - _IMPORT_T0

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

LOG2E = 1.4426950408889634


def _require_triton():
    if triton is None:
        raise RuntimeError(
            f"triton is not importable ({_TRITON_IMPORT_ERROR}); install it (pip install triton) "
            "to run the Triton paged-decode kernel")


_DEFINE_T0 = time.perf_counter()
if triton is not None:

    @triton.jit
    def _paged_decode_kernel(
            Q, K, V, BlockTable, ContextLens, Out, OPart, LSE, scale,
            stride_qb, stride_qh,
            stride_kb, stride_ks, stride_kh,
            stride_vb, stride_vs, stride_vh,
            stride_btb,
            stride_ob, stride_oh,
            stride_pb, stride_ph, stride_ps,
            stride_lb, stride_lh,
            GROUP: tl.constexpr,  # query heads per KV head (Hq // Hkv)
            GROUP_PAD: tl.constexpr,  # GROUP rounded up to a power of two >= 16 (tl.dot's M)
            HEAD_DIM: tl.constexpr,  # D, a power of two >= 16
            PAGE_SIZE: tl.constexpr,  # tokens per page (block_size)
            BLOCK_N: tl.constexpr,  # tokens per step, a multiple of PAGE_SIZE
            NUM_SPLITS: tl.constexpr,  # 1: write out directly; > 1: write partials for the combine kernel
    ):
        pid_b = tl.program_id(0)
        pid_kh = tl.program_id(1)
        pid_s = tl.program_id(2)

        ctx = tl.load(ContextLens + pid_b)
        # This split's token range [start, end): whole BLOCK_N chunks, spread evenly over the splits.
        n_chunks = tl.cdiv(ctx, BLOCK_N)
        chunks_per_split = tl.cdiv(n_chunks, NUM_SPLITS)
        start = pid_s * chunks_per_split * BLOCK_N
        end = tl.minimum(start + chunks_per_split * BLOCK_N, ctx)

        offs_g = tl.arange(0, GROUP_PAD)
        offs_d = tl.arange(0, HEAD_DIM)
        offs_n = tl.arange(0, BLOCK_N)
        g_mask = offs_g < GROUP
        q_heads = pid_kh * GROUP + offs_g

        # The group's query rows [GROUP_PAD, D]; padding rows are zero and never stored.
        q_ptrs = Q + pid_b * stride_qb + q_heads[:, None] * stride_qh + offs_d[None, :]
        q = tl.load(q_ptrs, mask=g_mask[:, None], other=0.0)
        qk_scale = scale * 1.4426950408889634  # log2(e): the softmax runs in base 2

        m_i = tl.full([GROUP_PAD], float("-inf"), dtype=tl.float32)
        l_i = tl.zeros([GROUP_PAD], dtype=tl.float32)
        acc = tl.zeros([GROUP_PAD, HEAD_DIM], dtype=tl.float32)

        bt_row = BlockTable + pid_b * stride_btb
        for n0 in range(start, end, BLOCK_N):
            tok = n0 + offs_n
            tok_mask = tok < end
            # Page id and slot of every token of this step (pages are scattered in the cache).
            page = tl.load(bt_row + tok // PAGE_SIZE, mask=tok_mask, other=0).to(tl.int64)
            slot = tok % PAGE_SIZE
            k_row = page * stride_kb + slot * stride_ks + pid_kh * stride_kh  # [BLOCK_N]
            v_row = page * stride_vb + slot * stride_vs + pid_kh * stride_vh
            # K^T as [D, BLOCK_N] so that QK^T is a plain dot.
            kt = tl.load(K + k_row[None, :] + offs_d[:, None], mask=tok_mask[None, :], other=0.0)
            s = tl.dot(q, kt) * qk_scale  # [GROUP_PAD, BLOCK_N] fp32, base-2 logits
            s = tl.where(tok_mask[None, :], s, float("-inf"))
            # Online softmax. Every step has at least one live token, so m_new is finite.
            m_new = tl.maximum(m_i, tl.max(s, 1))
            alpha = tl.exp2(m_i - m_new)  # 0 on the first step (m_i = -inf)
            p = tl.exp2(s - m_new[:, None])
            l_i = l_i * alpha + tl.sum(p, 1)
            v = tl.load(V + v_row[:, None] + offs_d[None, :], mask=tok_mask[:, None], other=0.0)
            acc = acc * alpha[:, None]
            acc = tl.dot(p.to(v.dtype), v, acc)
            m_i = m_new

        # l_i is 0 only for an empty range (context 0, or a split past the end of a short context).
        l_safe = tl.where(l_i > 0.0, l_i, 1.0)
        o = acc / l_safe[:, None]
        if NUM_SPLITS == 1:
            o_ptrs = Out + pid_b * stride_ob + q_heads[:, None] * stride_oh + offs_d[None, :]
            tl.store(o_ptrs, o.to(Out.dtype.element_ty), mask=g_mask[:, None])
        else:
            p_ptrs = OPart + pid_b * stride_pb + q_heads[:, None] * stride_ph + pid_s * stride_ps + offs_d[None, :]
            tl.store(p_ptrs, o, mask=g_mask[:, None])
            # Base-2 log-sum-exp of this split; -inf marks an empty split (weight 0 in the combine).
            lse = tl.where(l_i > 0.0, m_i + tl.log2(l_safe), float("-inf"))
            tl.store(LSE + pid_b * stride_lb + q_heads * stride_lh + pid_s, lse, mask=g_mask)

    @triton.jit
    def _combine_splits_kernel(
            OPart, LSE, Out,
            stride_pb, stride_ph, stride_ps,
            stride_lb, stride_lh,
            stride_ob, stride_oh,
            NUM_SPLITS: tl.constexpr,
            SPLITS_P2: tl.constexpr,  # NUM_SPLITS rounded up to a power of two (tl.arange)
            HEAD_DIM: tl.constexpr,
    ):
        # One program per (sequence, query head): out = sum_s w_s o_s / sum_s w_s, w_s = 2^(lse_s - max lse).
        pid_b = tl.program_id(0)
        pid_h = tl.program_id(1)
        offs_s = tl.arange(0, SPLITS_P2)
        offs_d = tl.arange(0, HEAD_DIM)
        s_mask = offs_s < NUM_SPLITS
        lse = tl.load(LSE + pid_b * stride_lb + pid_h * stride_lh + offs_s, mask=s_mask, other=float("-inf"))
        m = tl.max(lse, 0)
        m = tl.where(m == float("-inf"), 0.0, m)  # every split empty: all weights 0, output 0
        w = tl.exp2(lse - m)
        denom = tl.sum(w, 0)
        o = tl.load(OPart + pid_b * stride_pb + pid_h * stride_ph + offs_s[:, None] * stride_ps + offs_d[None, :],
                    mask=s_mask[:, None], other=0.0)
        res = tl.sum(o * w[:, None], 0) / tl.where(denom > 0.0, denom, 1.0)
        tl.store(Out + pid_b * stride_ob + pid_h * stride_oh + offs_d, res.to(Out.dtype.element_ty))

_DEFINE_S = time.perf_counter() - _DEFINE_T0


def _next_pow2(n):
    p = 1
    while p < n:
        p *= 2
    return p


def auto_num_splits(batch, num_kv_heads, max_context, block_n, num_sms):
    """Splits per (sequence, KV head) so that about two programs run per SM, and each split
    keeps at least one BLOCK_N chunk. 1 when there are already enough programs."""
    programs = batch * num_kv_heads
    if programs >= num_sms:
        return 1
    chunks = max(1, -(-max_context // block_n))
    want = -(-2 * num_sms // programs)
    return max(1, min(want, chunks, 256))


def paged_decode(q, k_cache, v_cache, block_table, context_lens, scale,
                 num_splits=1, block_n=64, num_warps=4, num_stages=2):
    """Paged-attention decode with the Triton kernel above; returns out [B, Hq, 1, D] (q's dtype).
    Raises ValueError for inputs outside what the kernel handles."""
    _require_triton()
    import torch

    if q.dim() != 4 or q.shape[2] != 1:
        raise ValueError(f"q must be [B, Hq, 1, D] (decode, Sq=1); got {tuple(q.shape)}")
    if k_cache.dim() != 4 or v_cache.shape != k_cache.shape:
        raise ValueError(f"k_cache and v_cache must both be [num_blocks, page_size, Hkv, D]; got "
                         f"{tuple(k_cache.shape)} and {tuple(v_cache.shape)}")
    batch, num_q_heads, _, head_dim = q.shape
    _, page_size, num_kv_heads, kv_dim = k_cache.shape
    if kv_dim != head_dim:
        raise ValueError(f"head dim of q ({head_dim}) and of the caches ({kv_dim}) differ")
    if head_dim < 16 or head_dim & (head_dim - 1):
        raise ValueError(f"head dim must be a power of two >= 16 (tl.dot, tl.arange); got {head_dim}")
    if num_q_heads % num_kv_heads:
        raise ValueError(f"Hq ({num_q_heads}) must be a multiple of Hkv ({num_kv_heads})")
    if block_n < 16 or block_n & (block_n - 1) or block_n % page_size:
        raise ValueError(f"block_n must be a power of two >= 16 and a multiple of the page size ({page_size}); "
                         f"got {block_n}")
    if q.dtype not in (torch.float16, torch.bfloat16) or k_cache.dtype != q.dtype or v_cache.dtype != q.dtype:
        raise ValueError(f"q, k_cache, v_cache must all be float16 or all bfloat16; got {q.dtype}, "
                         f"{k_cache.dtype}, {v_cache.dtype}")
    if block_table.dtype != torch.int32 or context_lens.dtype != torch.int32:
        raise ValueError(f"block_table and context_lens must be int32; got {block_table.dtype}, {context_lens.dtype}")
    if block_table.dim() != 2 or block_table.shape[0] != batch or tuple(context_lens.shape) != (batch,):
        raise ValueError(f"block_table must be [B={batch}, max_blocks] and context_lens [B={batch}]; got "
                         f"{tuple(block_table.shape)} and {tuple(context_lens.shape)}")
    for name, t in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache)):
        if t.stride(-1) != 1:
            raise ValueError(f"{name} must have a contiguous last dimension (stride 1); got strides {t.stride()}")
    if block_table.stride(1) != 1 or not context_lens.is_contiguous():
        raise ValueError("block_table rows and context_lens must be contiguous")
    devices = {t.device for t in (q, k_cache, v_cache, block_table, context_lens)}
    if len(devices) != 1 or next(iter(devices)).type != "cuda":
        raise ValueError(f"all inputs must be on the same CUDA device; got {sorted(str(d) for d in devices)}")
    num_splits = int(num_splits)
    if num_splits < 1:
        raise ValueError(f"num_splits must be >= 1; got {num_splits}")

    group = num_q_heads // num_kv_heads
    group_pad = max(16, _next_pow2(group))
    out = torch.empty_like(q)
    if num_splits == 1:
        # The partial-output arguments are unused in this mode (a constexpr branch); pass out.
        o_part, lse = out, out
        p_strides = (0, 0, 0)
        l_strides = (0, 0)
    else:
        o_part = torch.empty((batch, num_q_heads, num_splits, head_dim), device=q.device, dtype=torch.float32)
        lse = torch.empty((batch, num_q_heads, num_splits), device=q.device, dtype=torch.float32)
        p_strides = (o_part.stride(0), o_part.stride(1), o_part.stride(2))
        l_strides = (lse.stride(0), lse.stride(1))

    grid = (batch, num_kv_heads, num_splits)
    _paged_decode_kernel[grid](
        q, k_cache, v_cache, block_table, context_lens, out, o_part, lse, float(scale),
        q.stride(0), q.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2),
        block_table.stride(0),
        out.stride(0), out.stride(1),
        *p_strides, *l_strides,
        GROUP=group, GROUP_PAD=group_pad, HEAD_DIM=head_dim, PAGE_SIZE=page_size,
        BLOCK_N=block_n, NUM_SPLITS=num_splits,
        num_warps=num_warps, num_stages=num_stages)
    if num_splits > 1:
        _combine_splits_kernel[(batch, num_q_heads)](
            o_part, lse, out,
            *p_strides, *l_strides,
            out.stride(0), out.stride(1),
            NUM_SPLITS=num_splits, SPLITS_P2=_next_pow2(num_splits), HEAD_DIM=head_dim,
            num_warps=4, num_stages=1)
    return out


# --------------------------------------------------------------------------------------------
# Compile-time benchmark (no GPU needed)
# --------------------------------------------------------------------------------------------

# The configuration compile-bench compiles: bf16, page size 16, BLOCK_N 64, group 4 (Hq 32 / Hkv 8).
BENCH_CONSTEXPRS = {"GROUP": 4, "GROUP_PAD": 16, "HEAD_DIM": 128, "PAGE_SIZE": 16, "BLOCK_N": 64, "NUM_SPLITS": 1}
BENCH_OPTIONS = {"num_warps": 4, "num_stages": 2}
BENCH_ARCH = 90


def _bench_arg_types(arg_names, constexprs, elem="bf16"):
    """Triton signature type of every non-constexpr argument of _paged_decode_kernel; elem is
    Triton's name of the q/K/V/out element type ("bf16" or "fp16")."""
    types = {}
    for name in arg_names:
        if name in constexprs:
            continue
        if name in ("Q", "K", "V", "Out"):
            types[name] = "*" + elem
        elif name in ("BlockTable", "ContextLens"):
            types[name] = "*i32"
        elif name in ("OPart", "LSE"):
            types[name] = "*fp32"
        elif name == "scale":
            types[name] = "fp32"
        elif name.startswith("stride_"):
            types[name] = "i32"
        else:
            raise RuntimeError(f"compile-bench: no signature type for kernel argument '{name}'; update _bench_arg_types")
    return types


def _make_ast_source(fn, arg_types, constexprs):
    """An ASTSource for fn across Triton 3.x spellings. Triton >= 3.3 (3.6 included): the signature
    names every argument in order, constexprs typed "constexpr", and constexprs= is keyed by name.
    Earlier 3.x: constants= instead of constexprs=."""
    from triton.compiler import ASTSource

    arg_names = list(getattr(fn, "arg_names", None) or [])
    if not arg_names:
        raise RuntimeError("compile-bench: the JIT function has no arg_names; this Triton version's "
                           "JITFunction API differs from 3.x")
    missing = [n for n in constexprs if n not in arg_names]
    if missing:
        raise RuntimeError(f"compile-bench: constexprs {missing} are not arguments of {fn.__name__}")
    full_sig = {n: ("constexpr" if n in constexprs else arg_types[n]) for n in arg_names}
    attempts = [
        ("signature with 'constexpr' entries, constexprs=", lambda: ASTSource(fn=fn, signature=full_sig,
                                                                             constexprs=dict(constexprs))),
        ("signature with 'constexpr' entries, constants=", lambda: ASTSource(fn=fn, signature=full_sig,
                                                                            constants=dict(constexprs))),
        ("signature without constexprs, constants=", lambda: ASTSource(
            fn=fn, signature={n: arg_types[n] for n in arg_names if n not in constexprs}, constants=dict(constexprs))),
    ]
    errors = []
    for what, make in attempts:
        try:
            return make()
        except TypeError as e:
            errors.append(f"{what}: {e}")
    raise RuntimeError("compile-bench: triton.compiler.ASTSource accepts none of the known Triton 3.x "
                       "call forms:\n  " + "\n  ".join(errors))


def _gpu_target(arch):
    try:
        from triton.backends.compiler import GPUTarget
    except ImportError:
        try:
            from triton.compiler import GPUTarget
        except ImportError as e:
            raise RuntimeError(f"compile-bench: GPUTarget is in neither triton.backends.compiler nor "
                               f"triton.compiler ({e}); this Triton is not 3.x") from e
    return GPUTarget("cuda", arch, 32)


class _PtxasTimer:
    """Times Triton's cubin stage (CUDABackend.make_cubin: ptxas, run as a subprocess) while it
    lives; total_s is the time spent there since the last reset."""

    def __init__(self):
        from triton.backends.nvidia.compiler import CUDABackend

        self._cls = CUDABackend
        self._orig = CUDABackend.make_cubin
        self.total_s = 0.0
        timer = self

        def timed(backend, *a, **kw):
            t0 = time.perf_counter()
            try:
                return timer._orig(backend, *a, **kw)
            finally:
                timer.total_s += time.perf_counter() - t0

        CUDABackend.make_cubin = timed

    def take(self):
        t, self.total_s = self.total_s, 0.0
        return t


def _compile_bench_kernel(target, constexprs, options, ptxas):
    """triton.compile of _paged_decode_kernel with these constexprs and options into the current
    (empty) cache; returns (compile seconds, ptxas seconds)."""
    fn = _paged_decode_kernel
    src = _make_ast_source(fn, _bench_arg_types(fn.arg_names, constexprs), constexprs)
    ptxas.take()
    t0 = time.perf_counter()
    kernel = triton.compile(src, target=target, options=dict(options))
    compile_s = time.perf_counter() - t0
    asm = getattr(kernel, "asm", {}) or {}
    if "cubin" not in asm:
        raise RuntimeError(f"compile-bench: triton.compile produced no cubin (stages: {sorted(asm)})")
    return compile_s, ptxas.take()


def cmd_compile_once(_args):
    """One fresh process: import (timed at module load), define, and compile once; print JSON."""
    _require_triton()
    cache = os.environ.get("TRITON_CACHE_DIR")
    if not cache:
        print("triton_paged_decode: warning: TRITON_CACHE_DIR is not set; a cached kernel would make "
              "the compile time meaningless (compile-bench sets a fresh one per run)", file=sys.stderr)
    target = _gpu_target(BENCH_ARCH)
    compile_s, ptxas_s = _compile_bench_kernel(target, BENCH_CONSTEXPRS, BENCH_OPTIONS, _PtxasTimer())
    print(json.dumps({"triton_version": triton.__version__, "import_s": _TRITON_IMPORT_S, "define_s": _DEFINE_S,
                      "first_compile_s": compile_s, "ptxas_s": ptxas_s, "arch": f"sm_{BENCH_ARCH}"}))
    return 0


def _int_list(text):
    try:
        values = [int(v) for v in text.split(",") if v]
    except ValueError:
        raise SystemExit(f"triton_paged_decode: expected integers separated by commas, got '{text}'")
    if not values:
        raise SystemExit("triton_paged_decode: an empty list of values")
    return values


def cmd_compile_warm(args):
    """One process: each (BLOCK_N, num_warps) compiled in turn, each into a fresh empty cache."""
    _require_triton()
    target = _gpu_target(BENCH_ARCH)
    ptxas = _PtxasTimer()
    rows = []
    for block_n in _int_list(args.block_n):
        for warps in _int_list(args.num_warps):
            cache = tempfile.mkdtemp(prefix="triton_cache_")
            os.environ["TRITON_CACHE_DIR"] = cache
            knobs = getattr(triton, "knobs", None)  # Triton >= 3.4 reads the cache dir through its knobs
            if knobs is not None and hasattr(knobs, "cache"):
                knobs.cache.dir = cache
            try:
                constexprs = dict(BENCH_CONSTEXPRS, BLOCK_N=block_n)
                compile_s, ptxas_s = _compile_bench_kernel(target, constexprs, dict(BENCH_OPTIONS, num_warps=warps), ptxas)
                if not os.listdir(cache):
                    raise SystemExit(f"triton_paged_decode: the compile of BLOCK_N={block_n} num_warps={warps} wrote "
                                     f"nothing into its fresh cache {cache}: it was not compiled there")
            finally:
                shutil.rmtree(cache, ignore_errors=True)
            rows.append({"block_n": block_n, "num_warps": warps, "compile_s": compile_s, "ptxas_s": ptxas_s})
            print(f"  BLOCK_N={block_n} num_warps={warps}: compile {compile_s:.3f} s, ptxas {ptxas_s:.3f} s",
                  file=sys.stderr)
    print(json.dumps({"triton_version": triton.__version__, "arch": f"sm_{BENCH_ARCH}", "configs": rows,
                      "median_compile_s": statistics.median(r["compile_s"] for r in rows),
                      "median_ptxas_s": statistics.median(r["ptxas_s"] for r in rows)}))
    return 0


def cmd_compile_bench(args):
    """Runs compile-once args.runs times, each in a fresh Python process with an empty cache."""
    if args.runs < 1:
        raise SystemExit(f"triton_paged_decode: --runs must be >= 1, got {args.runs}")
    rows = []
    for i in range(args.runs):
        cache = tempfile.mkdtemp(prefix="triton_cache_")
        env = dict(os.environ, TRITON_CACHE_DIR=cache)
        env.pop("TRITON_ALWAYS_COMPILE", None)
        env.pop("TRITON_INTERPRET", None)
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, os.path.abspath(__file__), "compile-once"], env=env,
                              capture_output=True, text=True)
        process_s = time.perf_counter() - t0
        shutil.rmtree(cache, ignore_errors=True)
        if proc.returncode != 0:
            sys.stderr.write(proc.stdout + proc.stderr)
            raise SystemExit(f"triton_paged_decode: compile-once run {i + 1} failed (exit {proc.returncode})")
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
        if not lines:
            raise SystemExit(f"triton_paged_decode: compile-once run {i + 1} printed no JSON line:\n{proc.stdout}")
        row = json.loads(lines[-1])
        row["process_s"] = process_s
        rows.append(row)
        print(f"  run {i + 1}: import {row['import_s']:.3f} s, compile {row['first_compile_s']:.3f} s, "
              f"process {process_s:.3f} s", file=sys.stderr)
    result = {"triton_version": rows[0]["triton_version"], "runs": len(rows), "arch": rows[0]["arch"]}
    for key in ("import_s", "first_compile_s", "ptxas_s", "process_s"):
        result[key] = round(statistics.median(r[key] for r in rows), 4)
    print(json.dumps(result))
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("compile-bench", help="median import/compile/process times over fresh processes (no GPU)")
    p.add_argument("--runs", type=int, default=5, help="fresh processes to run (default 5)")
    p.set_defaults(func=cmd_compile_bench)
    p = sub.add_parser("compile-once", help="one process of compile-bench: prints one JSON line")
    p.set_defaults(func=cmd_compile_once)
    p = sub.add_parser("compile-warm", help="each config compiled in turn in one process, a fresh cache each (no GPU)")
    p.add_argument("--block-n", default="32,64,128", help="BLOCK_N values, comma-separated")
    p.add_argument("--num-warps", default="4,8", help="num_warps values, comma-separated")
    p.set_defaults(func=cmd_compile_warm)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
