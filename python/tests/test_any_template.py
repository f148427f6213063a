"""vector_add and softmax through the tilec package on the emulator, against NumPy.

Neither template writes a run description: the one in their kernel cards is generated from
the template (templates/run_generation.h), so any kernel that declares its grid as expressions
runs from Python. The folder is made here with `tilec compile --target emu`; the `tilec` used
is $TILEC_BINARY, else tools/tilec in the build folder that holds $TILEC_DEPLOY
(scripts/test_hosts.sh's layout), else `tilec` on the PATH.
"""
import os
import subprocess

import numpy as np
import pytest

import tilec
from tilec_cli import tilec_binary



@pytest.fixture(scope="module")
def store(tmp_path_factory):
    folder = tmp_path_factory.mktemp("deploy")
    env = dict(os.environ, TILEC_CACHE_DIR=str(tmp_path_factory.mktemp("cache")))
    for args in (["vector_add", "-o", folder],                           # the defaults: block=1024
                 ["vector_add", "--set", "block=256", "-o", folder / "block256"],
                 ["softmax", "-o", folder]):                             # block=1024: rows of up to 1024 columns
        subprocess.run([tilec_binary(), "compile", "--target", "emu", *map(str, args)], check=True, env=env,
                       stdout=subprocess.DEVNULL)
    return tilec.load(str(folder), backend="emulate")


def test_ops_and_arguments(store):
    assert store.ops == ["softmax", "vector_add"]
    args = store.arguments("vector_add")
    assert args["inputs"] == ["x", "y"] and args["outputs"] == ["out"] and args["sizes"] == ["n"]
    assert store.arguments("softmax")["sizes"] == ["rows", "cols"]


@pytest.mark.parametrize("n", [1, 1000, 4099])
def test_vector_add(store, n):
    rng = np.random.default_rng(n)
    x, y = (rng.uniform(-1, 1, n).astype(np.float32) for _ in range(2))
    call = store.prepare("vector_add", x=x, y=y)
    assert call.config["block"] == 1024, call.note  # nothing tuned: the card's defaults
    assert call.launches == [("vector_add", (-(-n // 1024), 1, 1))]
    out = call.run()
    assert out.shape == (n,) and out.dtype == np.float32
    np.testing.assert_array_equal(out, x + y)


def test_vector_add_with_another_config(store):
    x = np.arange(1001, dtype=np.float32)
    call = store.prepare("vector_add", x=x, y=x, config={"block": 256})
    assert call.launches == [("vector_add", (4, 1, 1))]  # cdiv(1001, 256): this config's own grid
    np.testing.assert_array_equal(call.run(), 2 * x)


def test_softmax(store):
    rng = np.random.default_rng(7)
    x = rng.uniform(-4, 4, (5, 257)).astype(np.float32)
    out = store.run("softmax", x=x)
    e = np.exp(x.astype(np.float64) - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(out, e / e.sum(axis=1, keepdims=True), atol=1e-6, rtol=1e-5)


def test_errors_name_the_argument(store):
    x = np.zeros(10, dtype=np.float32)
    with pytest.raises(tilec.ArgumentError, match="tensor 'y' has dtype f16, expected f32"):
        store.run("vector_add", x=x, y=np.zeros(10, dtype=np.float16))
    with pytest.raises(tilec.ArgumentError, match="tensor 'y' has shape"):
        store.run("vector_add", x=x, y=np.zeros(11, dtype=np.float32))
