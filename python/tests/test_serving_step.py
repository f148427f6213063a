"""A serving loop from Python (docs/PAGED_ATTENTION.md, "A serving step: write, then attend"):
each step writes its new tokens' K and V into the paged caches with reshape_and_cache, in
place, then attends over them with paged_attention (gpt-oss's sink layer); every step is held to
attention computed with NumPy from the tokens given, never read back from the caches.

Compiles its own folder with `tilec compile ... -o DIR` for both ops; the `tilec` used is
$TILEC_BINARY, else tools/tilec in the build folder that holds $TILEC_LIBRARY.
"""
import os
import subprocess

import numpy as np
import pytest

import tilec
from tilec_cli import tilec_binary

HQ, HKV, D, BS, NB, MAX_BLOCKS, BATCH = 8, 2, 32, 4, 12, 6, 2



@pytest.fixture(scope="module")
def store(tmp_path_factory):
    d = tmp_path_factory.mktemp("serving")
    env = dict(os.environ, TILEC_CACHE_DIR=str(tmp_path_factory.mktemp("cache")))
    cache = f"hkv={HKV} head_dim={D} num_blocks={NB} block_size={BS} dtype=f16"
    attention = f"batch={BATCH} hq={HQ} sq=1 max_blocks={MAX_BLOCKS} sinks=1 {cache}"
    for op, shape in (("reshape_and_cache", cache), ("paged_attention", attention)):
        subprocess.run([tilec_binary(), "compile", op, "--target", "emu", "--shape", *shape.split(), "-o", str(d)],
                       check=True, capture_output=True, env=env)
    return tilec.load(d, backend="emulate")


def attention(q, keys, values, sinks, scale):
    """One decode row per (sequence, head) over that sequence's tokens; the sink joins the
    softmax's denominator."""
    out = np.zeros((BATCH, HQ, 1, D))
    for b in range(BATCH):
        k, v = np.asarray(keys[b], np.float64), np.asarray(values[b], np.float64)  # [tokens, HKV, D]
        for h in range(HQ):
            kvh = h // (HQ // HKV)
            s = k[:, kvh] @ q[b, h, 0].astype(np.float64) * scale
            m = max(s.max(), sinks[h])
            e = np.exp(s - m)
            out[b, h, 0] = e @ v[:, kvh] / (e.sum() + np.exp(sinks[h] - m))
    return out


def test_write_then_attend(store):
    rng = np.random.default_rng(7)
    k_cache = np.full((NB, BS, HKV, D), np.nan, dtype=np.float16)  # NaN until written
    v_cache = np.full_like(k_cache, np.nan)
    block_table = np.zeros((BATCH, MAX_BLOCKS), dtype=np.int32)
    free_pages = [7, 2, 10, 0, 5, 9, 3, 11, 1, 6, 4, 8]
    sinks = np.linspace(-1.0, 2.0, HQ).astype(np.float32)
    scale = D ** -0.5
    keys, values = [[], []], [[], []]  # each sequence's tokens as given
    for step, new in enumerate([(5, 9), (1, 1), (1, 1), (1, 1)]):  # the prompts, then decode steps
        # Write: one padding token (slot -1) first, then each sequence's new tokens.
        slots = [-1]
        for b, n in enumerate(new):
            for _ in range(n):
                pos = len(keys[b])
                if pos % BS == 0:
                    block_table[b, pos // BS] = free_pages.pop(0)
                slots.append(block_table[b, pos // BS] * BS + pos % BS)
                keys[b].append(None)
                values[b].append(None)
        T = len(slots)
        key = rng.uniform(-1, 1, (T, HKV, D)).astype(np.float16)
        value = rng.uniform(-1, 1, (T, HKV, D)).astype(np.float16)
        key[0] = value[0] = 1000  # the padding token: lands nowhere
        t = 1
        for b, n in enumerate(new):
            for i in range(len(keys[b]) - n, len(keys[b])):
                keys[b][i], values[b][i] = key[t], value[t]
                t += 1
        store.run("reshape_and_cache", key=key, value=value, slot_mapping=np.array(slots, dtype=np.int64),
                  k_cache=k_cache, v_cache=v_cache)

        # Attend: each sequence's newest token asks.
        q = rng.uniform(-1, 1, (BATCH, HQ, 1, D)).astype(np.float16)
        context_lens = np.array([len(keys[0]), len(keys[1])], dtype=np.int32)
        out = store.run("paged_attention", q=q, k_cache=k_cache, v_cache=v_cache, block_table=block_table,
                        context_lens=context_lens, sinks=sinks, softmax_scale=scale)
        want = attention(q, keys, values, sinks, scale)
        assert out.dtype == np.float16 and out.shape == (BATCH, HQ, 1, D)
        np.testing.assert_allclose(out.astype(np.float64), want, atol=2e-3, rtol=1e-2, err_msg=f"step {step}")
    assert sorted(len(k) for k in keys) == [8, 12]
