"""A Python host for rmsnorm (docs/TUTORIAL.md, "7. From C and Python"): runs the kernel by name
from an exported folder on NumPy arrays (the emulator here; a GPU store takes CUDA arrays) and
checks it against NumPy.

    python3 host.py DEPLOY_DIR ROWS COLS      exit 0 when every value agrees
"""
import sys

import numpy as np

import tilec

deploy, rows, cols = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
store = tilec.load(deploy, backend="emulate")
rng = np.random.default_rng(0)
x = rng.uniform(-2, 2, (rows, cols)).astype(np.float16)
w = rng.uniform(0.5, 1.5, cols).astype(np.float16)
y = store.run("rmsnorm", x=x, w=w, eps=1e-5)  # rows and cols from the shapes; the tuned config

x64 = x.astype(np.float64)
want = x64 / np.sqrt((x64 * x64).mean(axis=1, keepdims=True) + 1e-5) * w.astype(np.float64)
err = np.abs(y.astype(np.float64) - want)
ok = bool((err <= 1e-3 + 4e-3 * np.abs(want)).all())
print(f"rmsnorm [{rows}, {cols}] from {deploy} through the tilec package: "
      f"{'ok' if ok else 'MISMATCH'} (max |y - reference| = {err.max():.3g})")
sys.exit(0 if ok else 1)
