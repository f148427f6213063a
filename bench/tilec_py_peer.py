#!/usr/bin/env python3
"""tilec's paged attention through its Python package (python/tilec: ctypes over libtilec.so),
the call a serving engine makes: `store.run("paged_attention", q=..., ...)` on the engine's own
arrays, the config selected from the folder's tuning database, the output allocated like q.

scripts/gpu_check.sh exports a folder from the check's plan (the modules tilec-measure timed,
its tuning.toml as the database, paged attention's kernel card) and times this path beside
PyTorch's SDPA and the Triton kernel: `gpu_peers.py peers --tilec-deploy DIR` calls
make_runner() on the same torch CUDA tensors (CUDA events, the L2 flushed before each run).
On the dry run (no GPU) this script's command line runs the same calls on NumPy arrays on the
CPU emulator and checks them against the float64 reference:

  python3 bench/tilec_py_peer.py --deploy DIR --inputs DIR [--backend emulate|cuda|auto]
      [--repeats N] [--name NAME] [--json-out FILE] [--save-output OUT.npy]
      [--expect-config "block_n=32 ..."] [--tilec-output OUT.npy]

(inputs as gpu_peers.py writes them). It prints one line and appends one JSON line (impl
"tilec_py") for gpu_peers.py summary. TILEC_LIBRARY names libtilec.so; the package is imported
from python/ beside this script when it is not installed. Exit status: 0 ok, 1 a check failed,
2 an error.
"""

import argparse
import ctypes
import json
import math
import os
import statistics
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gpu_peers  # noqa: E402  (the inputs, reference, checks and CUDA timing the peers share)


def import_tilec():
    try:
        import tilec
    except ImportError:
        sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))
        import tilec
    return tilec


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensorHead(ctypes.Structure):  # dlpack.h's DLTensor up to its dtype
    _fields_ = [("data", ctypes.c_void_p), ("device_type", ctypes.c_int), ("device_id", ctypes.c_int),
                ("ndim", ctypes.c_int), ("dtype", _DLDataType)]


_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_KDL_UINT, _KDL_BFLOAT = 1, 4


class Bf16Bits:
    """A NumPy array of bfloat16 bit patterns (uint16, gpu_peers' storage form) that DLPack
    exports as bfloat16: NumPy has no bfloat16, and tilec takes the dtype from DLPack."""

    def __init__(self, bits):
        if bits.dtype != np.uint16:
            raise gpu_peers.ToolError(f"internal error: bf16 bits must be uint16, got {bits.dtype}")
        self.bits = np.ascontiguousarray(bits)

    def __dlpack_device__(self):
        return self.bits.__dlpack_device__()

    def __dlpack__(self, stream=None):
        capsule = self.bits.__dlpack__()
        head = _DLTensorHead.from_address(_capsule_pointer(capsule, b"dltensor"))
        if (head.dtype.code, head.dtype.bits) != (_KDL_UINT, 16):
            raise BufferError(f"expected a uint16 DLPack tensor, got code {head.dtype.code}, {head.dtype.bits} bits")
        head.dtype.code = _KDL_BFLOAT
        return capsule


def config_text(config):
    return " ".join(f"{k}={v}" for k, v in sorted(config.items()))


def make_runner(store, q, k_cache, v_cache, block_table, context_lens, scale, ctx, out=None):
    """(run, call): run() is one `store.run` of paged attention on these arrays (PyTorch CUDA
    tensors on a GPU store, host arrays on the emulator) and returns its output; call is the
    same arguments prepared once, for the config, launches and note the store selected."""
    args = dict(q=q, k_cache=k_cache, v_cache=v_cache, block_table=block_table, context_lens=context_lens,
                softmax_scale=scale, ctx=ctx)
    if out is not None:
        args["out"] = out
    call = store.prepare("paged_attention", **args)

    def run():
        return store.run("paged_attention", **args)

    return run, call


def host_us(fn, repeats, sync=None):
    """Median microseconds the host spends in fn() (queuing only on the GPU: nothing waits)."""
    us = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        us.append((time.perf_counter() - t0) * 1e6)
    if sync:
        sync()
    return statistics.median(us)


def describe_call(call, expect_config):
    """The row fields that say what the store selected, and a note when it is not the config the
    plan measured fastest (expect_config, "name=value ..."), which the check's tilec row ran."""
    chosen = config_text(call.config)
    fields = {"config": chosen, "launches": [f"{k} {list(g)}" for k, g in call.launches], "note": call.note}
    if expect_config:
        want = dict(kv.split("=", 1) for kv in expect_config.split())
        got = {k: str(v) for k, v in call.config.items()}
        fields["same_config_as_tilec"] = all(got.get(k) == v for k, v in want.items())
    return fields


def cmd_main(args):
    if args.repeats < 1:
        raise gpu_peers.ToolError(f"--repeats must be >= 1, got {args.repeats}")
    tilec = import_tilec()
    a, info = gpu_peers.load_inputs(args.inputs)
    store = tilec.load(args.deploy, backend=args.backend)
    name = args.name or os.path.basename(os.path.normpath(args.inputs))
    dt = info["dtype"]
    scale = 1.0 / math.sqrt(info["head_dim"])
    ctx = info["ctx_max"]
    nbytes = gpu_peers.ideal_bytes(info)
    if store.on_gpu:
        torch = gpu_peers._import_torch()
        dev = torch.device("cuda")
        arrays = [gpu_peers._to_torch(torch, a[n], dev) for n in gpu_peers.INPUT_FILES]
        run, call = make_runner(store, *arrays, scale, ctx)
        t = gpu_peers.time_cuda(torch, run, args.repeats)
        h = host_us(run, args.repeats, torch.cuda.synchronize)
        out = gpu_peers._to_numpy_storage(torch, run())
        device = torch.cuda.get_device_name()
    else:
        wrap = (lambda x: Bf16Bits(x)) if dt == "bf16" else (lambda x: x)
        out_holder = wrap(np.empty(a["q"].shape, dtype=a["q"].dtype))
        run, call = make_runner(store, wrap(a["q"]), wrap(a["k_cache"]), wrap(a["v_cache"]), a["block_table"],
                                a["context_lens"], scale, ctx, out=out_holder)
        run()  # warm-up: the emulator loads its modules
        us = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            run()
            us.append((time.perf_counter() - t0) * 1e6)
        t = {"median_us": statistics.median(us), "min_us": min(us), "max_us": max(us)}
        h = None
        out = out_holder.bits if dt == "bf16" else out_holder
        device = f"{store.device} (dry run)"
    ref = gpu_peers.paged_reference(gpu_peers.to_f64(a["q"], dt), gpu_peers.to_f64(a["k_cache"], dt),
                                    gpu_peers.to_f64(a["v_cache"], dt), a["block_table"], a["context_lens"], scale)
    atol, rtol = gpu_peers.TOLERANCES[dt]
    ok, err, text = gpu_peers.compare(gpu_peers.to_f64(out, dt), ref, atol, rtol)
    row = {"name": name, "impl": "tilec_py", "median_us": t["median_us"], "min_us": t["min_us"], "max_us": t["max_us"],
           "gbps": nbytes / (t["median_us"] * 1e-6) / 1e9, "host_us": h, "ok": ok, "ref_ok": ok, "max_abs_err": err,
           "atol": atol, "rtol": rtol, "ideal_bytes": nbytes, "shape": gpu_peers.shape_text(info), "device": device,
           "repeats": args.repeats, "deploy": os.path.abspath(args.deploy), **describe_call(call, args.expect_config)}
    if args.tilec_output:
        other = gpu_peers.load_output(args.tilec_output, info, a["q"].dtype.str)
        vs_ok, vs_err, _ = gpu_peers.compare(gpu_peers.to_f64(out, dt), gpu_peers.to_f64(other, dt), atol, rtol)
        row["vs"] = {"tilec": vs_err}
        row["ok"] = ok and vs_ok
    if args.save_output:
        np.save(args.save_output, out, allow_pickle=False)
    if args.json_out:
        with open(args.json_out, "a") as f:
            f.write(json.dumps(row) + "\n")
    parts = [f"{t['median_us']:.1f} us (median of {args.repeats}"
             + ("" if h is None else f"; {h:.1f} us of host time a call") + ")",
             f"max_abs_err {err:.3g}"]
    if "vs" in row:
        parts.append(f"vs tilec {row['vs']['tilec']:.3g}")
    same = row.get("same_config_as_tilec")
    note = "" if same is None else " (the plan's winner)" if same else f" (NOT the plan's winner, {args.expect_config})"
    parts.append(f"config {row['config']}{note}")
    print(f"tilec_py {name}: {gpu_peers.shape_text(info)} on {device}: {'ok' if row['ok'] else 'MISMATCH'} "
          + ", ".join(parts) + f"; {text}")
    return 0 if row["ok"] else 1


def main(argv=None):
    p = argparse.ArgumentParser(prog="tilec_py_peer.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--deploy", required=True, help="exported folder (kernel card, modules, tuning database)")
    p.add_argument("--inputs", required=True, help="input folder (gpu_peers.py inputs)")
    p.add_argument("--backend", default="auto", choices=("auto", "cuda", "emulate"))
    p.add_argument("--repeats", type=int, default=50, help="timed runs; the median is reported (default 50)")
    p.add_argument("--name", help="problem name in the JSON line (default: the input folder's name)")
    p.add_argument("--json-out", help="append the JSON line to this file")
    p.add_argument("--save-output", help="write the output .npy here")
    p.add_argument("--expect-config", help="the config the check's tilec row ran (\"name=value ...\"), to compare")
    p.add_argument("--tilec-output", help="the output of tilec's other path on these inputs, compared")
    args = p.parse_args(argv)
    try:
        return cmd_main(args)
    except gpu_peers.ToolError as e:
        print(f"tilec_py_peer: error: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # tilec.TilecError and the like: name it, exit 2
        if type(e).__module__.split(".")[0] != "tilec":
            raise
        print(f"tilec_py_peer: error: {type(e).__name__}: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
