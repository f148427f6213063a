#!/usr/bin/env python3
"""How evenly paged attention's split-KV spreads a ragged decode batch over its programs.

One batch, a few long sequences beside short ones (contexts 1, 17, 64, 900, 31000, 4096, 2,
12000 by default), Hq 32, Hkv 8, head_dim 128, bf16, pages of 16: written as .npy inputs, then
run on the CPU emulator with `tilec run paged_attention --inputs DIR --json` under each
config: the uniform split (num_splits pieces of every walk), the split by size
(split_tokens keys a piece, a program each) and the planned split (those pieces shared by
plan_programs programs; 132 is an H100's SMs). For the attention kernel's launch the emulator counts what each
program moved in warp requests (K/V rows, page entries, q, partials); the table prints the
grid, the programs that did more than the least, and the busiest program against the mean
over the busy ones and over the whole grid. Counts, not times: the same on any machine.

  python3 bench/ragged_split.py [--tilec build/tools/tilec] [--contexts 1,17,...] [--json]

Needs NumPy. Every run is checked against the reference by `tilec run` (exit 1 on a mismatch).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

CONFIGS = [
    ("uniform, 1 split", ["num_splits=1"]),
    ("uniform, 4 splits", ["num_splits=4"]),
    ("uniform, 16 splits", ["num_splits=16"]),
    ("by size, 1024 keys", ["split_tokens=1024"]),
    ("by size, 512 keys", ["split_tokens=512"]),
    ("by size, 256 keys", ["split_tokens=256"]),
    ("planned, 512 x 132", ["split_tokens=512", "plan_programs=132"]),
    ("planned, 256 x 132", ["split_tokens=256", "plan_programs=132"]),
    ("planned, 256 x 264", ["split_tokens=256", "plan_programs=264"]),
]


def write_inputs(folder, contexts, hq, hkv, head_dim, block_size, seed=1):
    rng = np.random.default_rng(seed)
    batch = len(contexts)
    pages = [-(-c // block_size) for c in contexts]
    max_blocks = max(max(pages), 1)
    num_blocks = max(sum(pages), 1)
    table = np.zeros((batch, max_blocks), dtype=np.int32)
    order = rng.permutation(num_blocks).astype(np.int32)  # pages scattered over the cache
    at = 0
    for b, n in enumerate(pages):
        table[b, :n] = order[at:at + n]
        at += n

    def bf16(shape):  # uniform in [-1, 1), as bf16 bits (round to nearest even)
        x = rng.uniform(-1, 1, size=shape).astype(np.float32).view(np.uint32)
        return ((x + 0x7FFF + ((x >> 16) & 1)) >> 16).astype(np.uint16)

    np.save(os.path.join(folder, "q.npy"), bf16((batch, hq, 1, head_dim)))
    np.save(os.path.join(folder, "k_cache.npy"), bf16((num_blocks, block_size, hkv, head_dim)))
    np.save(os.path.join(folder, "v_cache.npy"), bf16((num_blocks, block_size, hkv, head_dim)))
    np.save(os.path.join(folder, "block_table.npy"), table)
    np.save(os.path.join(folder, "context_lens.npy"), np.array(contexts, dtype=np.int32))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tilec", default="build/tools/tilec")
    ap.add_argument("--contexts", default="1,17,64,900,31000,4096,2,12000")
    ap.add_argument("--hq", type=int, default=32)
    ap.add_argument("--hkv", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    contexts = [int(c) for c in args.contexts.split(",")]
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        write_inputs(folder, contexts, args.hq, args.hkv, args.head_dim, 16)
        print(f"contexts {contexts}, Hq {args.hq}, Hkv {args.hkv}, head_dim {args.head_dim}, bf16, pages of 16",
              file=sys.stderr)
        for name, sets in CONFIGS:
            cmd = [args.tilec, "run", "paged_attention", "--backend", "emulate", "--inputs", folder,
                   "--shape", "dtype=bf16", "--set", "block_n=64", *sets, "--json"]
            print(f"  {name} ...", file=sys.stderr, flush=True)
            done = subprocess.run(cmd, capture_output=True, text=True)
            if done.returncode != 0:
                sys.exit(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stdout}{done.stderr}")
            result = json.loads(done.stdout.strip().splitlines()[-1])
            work = next(w for w in result["programs"] if w["kernel"] == "paged_attention")
            rows.append({"config": name, "set": " ".join(sets), "programs": work["programs"], "busy": work["busy"],
                         "max_bytes": work["max_bytes"], "busy_mean_bytes": work["busy_mean_bytes"],
                         "mean_bytes": work["mean_bytes"], "request_bytes": result["request_bytes"]})
    print(f"{'config':<20} {'programs':>8} {'busy':>6} {'busiest (B)':>12} {'/ busy mean':>11} {'/ mean':>8} "
          f"{'all requests (B)':>17}")
    for r in rows:
        print(f"{r['config']:<20} {r['programs']:>8} {r['busy']:>6} {r['max_bytes']:>12} "
              f"{r['max_bytes'] / r['busy_mean_bytes']:>11.2f} {r['max_bytes'] / r['mean_bytes']:>8.2f} "
              f"{r['request_bytes']:>17}")
    if args.json:
        print(json.dumps({"contexts": contexts, "rows": rows}))


if __name__ == "__main__":
    main()
