"""reshape_and_cache through the tilec package on the emulator: the caches are the caller's
NumPy arrays, updated in place, checked against a NumPy reference written from the definition.

Exports its own folder with `tilec autotune reshape_and_cache --export` (a one-config space) for
an f16 cache and a latent fp8 one; the `tilec` used is $TILEC_BINARY, else tools/tilec in the
build folder that holds $TILEC_LIBRARY (scripts/test_hosts.sh's layout).
"""
import os
import subprocess

import numpy as np
import pytest

import tilec
from tilec_cli import tilec_binary



F16 = dict(T=7, H=2, D=16, NB=3, BS=4)
LATENT = dict(T=6, H=1, D=32, NB=2, BS=4)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    d = tmp_path_factory.mktemp("rac")
    space = d / "space.toml"
    space.write_text('kernel = "reshape_and_cache"\n[params]\nblock_t = [4]\nblock_hd = [16]\nnum_warps = [2]\n'
                     "[measure]\nwarmup = 0\nrepeats = 1\n")
    f16 = "num_tokens={T} hkv={H} head_dim={D} num_blocks={NB} block_size={BS} dtype=f16".format(**F16)
    latent = ("num_tokens={T} hkv={H} head_dim={D} num_blocks={NB} block_size={BS} dtype=f32 kv_dtype=f8e4m3 "
              "slot_dtype=i32 latent=1").format(**LATENT)
    env = dict(os.environ, TILEC_CACHE_DIR=str(tmp_path_factory.mktemp("cache")))
    subprocess.run([tilec_binary(), "autotune", "reshape_and_cache", "--space", str(space), "--backend", "emulate", "--no-ptxas",
                    "--shape", *f16.split(), "--shape", *latent.split(), "-o", str(d / "db.toml"), "--export",
                    str(d / "deploy")], check=True, capture_output=True, env=env)
    return tilec.load(d / "deploy", backend="emulate")


def e4m3(x):
    """x to float8_e4m3fn bits: the nearest of the format's finite values (ties to the even
    encoding), saturated to +-448, NaN to 0x7f; by search over the 256 encodings."""
    bits = np.arange(128, dtype=np.uint8)
    exp, man = bits >> 3, (bits & 7).astype(np.float64)
    values = np.where(exp == 0, man * 2.0**-9, (8 + man) * 2.0 ** (exp.astype(np.float64) - 10))
    values[0x7F] = np.inf  # NaN: never the nearest
    out = np.empty(x.shape, dtype=np.uint8)
    for i, v in np.ndenumerate(x.astype(np.float64)):
        if np.isnan(v):
            out[i] = 0x7F
            continue
        a = min(abs(v), 448.0)
        d = np.abs(values - a)
        best = np.flatnonzero(d == d.min())
        b = best[0] if len(best) == 1 else best[best % 2 == 0][0]
        out[i] = b | (0x80 if np.signbit(v) else 0)
    return out


def test_arguments(store):
    args = store.arguments("reshape_and_cache")
    assert args["outputs"] == [] and args["inouts"] == ["k_cache", "v_cache"]
    assert args["inputs"] == ["key", "value", "slot_mapping"]


def test_f16_in_place(store):
    p = F16
    rng = np.random.default_rng(1)
    key = rng.uniform(-2, 2, (p["T"], p["H"], p["D"])).astype(np.float16)
    value = rng.uniform(-2, 2, key.shape).astype(np.float16)
    slots = np.array([5, -1, 0, 11, 3, -1, 8], dtype=np.int64)
    k_cache = rng.uniform(-1, 1, (p["NB"], p["BS"], p["H"], p["D"])).astype(np.float16)
    v_cache = rng.uniform(-1, 1, k_cache.shape).astype(np.float16)
    want_k, want_v = k_cache.copy().reshape(-1, p["H"], p["D"]), v_cache.copy().reshape(-1, p["H"], p["D"])
    for t, s in enumerate(slots):
        if s >= 0:
            want_k[s], want_v[s] = key[t], value[t]
    out = store.run("reshape_and_cache", key=key, value=value, slot_mapping=slots, k_cache=k_cache, v_cache=v_cache)
    assert out["k_cache"] is k_cache and out["v_cache"] is v_cache  # the caller's arrays, not new ones
    assert np.array_equal(k_cache.reshape(want_k.shape).view(np.uint16), want_k.view(np.uint16))
    assert np.array_equal(v_cache.reshape(want_v.shape).view(np.uint16), want_v.view(np.uint16))


def test_latent_fp8_in_place(store):
    p = LATENT
    rng = np.random.default_rng(2)
    key = rng.uniform(-600, 600, (p["T"], p["H"], p["D"])).astype(np.float32)  # some past 448 * scale
    key[0, 0, :4] = [np.nan, np.inf, -np.inf, -0.0]
    slots = np.array([7, 2, -1, 0, 5, -1], dtype=np.int32)
    k_cache = rng.integers(0, 256, (p["NB"], p["BS"], p["H"], p["D"]), dtype=np.uint8)  # fp8 bits
    want = k_cache.copy().reshape(-1, p["H"], p["D"])
    for t, s in enumerate(slots):
        if s >= 0:
            want[s] = e4m3(key[t] / np.float32(1.25))
    out = store.run("reshape_and_cache", key=key, slot_mapping=slots, k_cache=k_cache, k_scale=1.25,
                    kv_dtype="f8e4m3")  # uint8 arrays of fp8 bits name their format
    assert out is k_cache
    assert np.array_equal(k_cache.reshape(want.shape), want)


def test_refusals(store):
    p = F16
    key = np.zeros((p["T"], p["H"], p["D"]), dtype=np.float16)
    cache = np.zeros((p["NB"], p["BS"], p["H"], p["D"]), dtype=np.float16)
    slots = np.zeros(p["T"], dtype=np.int64)
    with pytest.raises(tilec.ArgumentError, match="tensor argument 'v_cache' is missing"):
        store.run("reshape_and_cache", key=key, value=key.copy(), slot_mapping=slots, k_cache=cache)
    with pytest.raises(tilec.ArgumentError, match="slot_mapping holds integer slots"):
        store.run("reshape_and_cache", key=key, value=key.copy(), slot_mapping=slots.astype(np.float32),
                  k_cache=cache, v_cache=cache.copy())
    with pytest.raises(tilec.ArgumentError, match="the caches' dtype is not the one kv_dtype names"):
        store.run("reshape_and_cache", key=key, value=key.copy(), slot_mapping=slots, k_cache=cache,
                  v_cache=cache.copy(), kv_dtype="f8e4m3", k_scale=1.0, v_scale=1.0)
