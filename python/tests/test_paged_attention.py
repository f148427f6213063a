"""Paged attention through the tilec package on the emulator, against a NumPy reference.

Runs from the folder $TILEC_DEPLOY (tests/hosts/make_deploy.sh: `tilec autotune paged_attention
--export` for batch=3 hq=8 hkv=2 sq=1 head_dim=32 block_size=8 max_blocks=8, f32 with and
without ALiBi, with sinks, and f16, each tuned to split-KV) with the library $TILEC_LIBRARY.
"""
import os
import sys
import threading

import numpy as np
import pytest

import tilec

DEPLOY = os.environ.get("TILEC_DEPLOY")
if not DEPLOY:
    raise RuntimeError("set TILEC_DEPLOY to a folder from tests/hosts/make_deploy.sh (scripts/test.sh does)")

B, HQ, HKV, SQ, D, BS, MB, NB = 3, 8, 2, 1, 32, 8, 8, 30


def inputs(dtype=np.float32, alibi=False, seed=0, table_dtype=np.uint32, sinks=False):
    rng = np.random.default_rng(seed)
    q = rng.uniform(-1, 1, (B, HQ, SQ, D)).astype(dtype)
    k = rng.uniform(-1, 1, (NB, BS, HKV, D)).astype(dtype)
    v = rng.uniform(-1, 1, (NB, BS, HKV, D)).astype(dtype)
    table = rng.permutation(NB)[: B * MB].reshape(B, MB).astype(table_dtype)
    lens = np.array([MB * BS, 19, 0], dtype=table_dtype)
    table[1, 3:] = table_dtype(2**31 - 1)  # past the live pages: never read
    table[2, :] = table_dtype(2**31 - 1)
    args = dict(q=q, k_cache=k, v_cache=v, block_table=table, context_lens=lens, softmax_scale=1 / np.sqrt(D))
    if alibi:
        args["alibi_slopes"] = (2.0 ** (-8.0 * np.arange(1, HQ + 1) / HQ)).astype(np.float32)
    if sinks:
        args["sinks"] = rng.uniform(-1, 3, HQ).astype(np.float32)
        args["sinks"][-1] = -np.inf  # no sink for the last head
    return args


def reference(q, k_cache, v_cache, block_table, context_lens, softmax_scale, alibi_slopes=None, sinks=None):
    """out[b, h, i] = softmax_j(scale q.k_j + slope_h (j - i)) v_j over j < context_lens[b]; a sink
    joins the softmax's denominator: e^(sinks[h] - m) more, m the max of it and the scores."""
    q, k_cache, v_cache = (x.astype(np.float64) for x in (q, k_cache, v_cache))
    out = np.zeros(q.shape)
    group = HQ // HKV
    for b in range(B):
        n = int(context_lens[b])
        if n == 0:
            continue
        pages = block_table[b, (np.arange(n) // BS)].astype(np.int64)
        k = k_cache[pages, np.arange(n) % BS]  # [n, hkv, d]
        v = v_cache[pages, np.arange(n) % BS]
        for h in range(HQ):
            s = q[b, h] @ k[:, h // group].T * softmax_scale  # [sq, n]
            if alibi_slopes is not None:
                s = s + alibi_slopes[h] * (np.arange(n)[None, :] - np.arange(SQ)[:, None])
            sink = -np.inf if sinks is None else float(sinks[h])
            m = np.maximum(s.max(axis=1, keepdims=True), sink)
            p = np.exp(s - m)
            out[b, h] = (p / (p.sum(axis=1, keepdims=True) + np.exp(sink - m))) @ v[:, h // group]
    return out


@pytest.fixture(scope="module")
def store():
    return tilec.load(DEPLOY, backend="emulate")


def test_store(store):
    assert store.ops == ["paged_attention"]
    assert store.arch == "host" and not store.on_gpu
    args = store.arguments("paged_attention")
    assert args["outputs"] == ["out"]
    assert "alibi_slopes" in args["inputs"] and "softmax_scale" in args["scalars"] and "ctx" in args["sizes"]


@pytest.mark.parametrize("alibi", [False, True])
def test_split_kv_matches_reference(store, alibi):
    a = inputs(alibi=alibi)
    call = store.prepare("paged_attention", **a)
    assert call.config["num_splits"] == 2, call.note  # the tuned config, not the card's default (1)
    assert [k for k, _ in call.launches] == ["paged_attention", "paged_attention_combine"]
    assert call.launches[0][1] == (B, HKV * (HQ // HKV // call.config["head_group"]), 2)
    assert call.launches[1][1] == (B * HQ * SQ, 1, 1)
    assert call.workspace_bytes >= B * HQ * SQ * 2 * (D + 2) * 4
    assert call.value("batch") == B and call.value("ctx") == MB * BS
    out = call.run()
    assert out.shape == (B, HQ, SQ, D) and out.dtype == np.float32
    np.testing.assert_allclose(out, reference(**a), atol=1e-5, rtol=1e-5)
    assert not out[2].any()  # an empty context gives zeros


def test_sinks(store):
    a = inputs(sinks=True, seed=4)
    call = store.prepare("paged_attention", **a)
    assert call.config["num_splits"] == 2, call.note  # the combine adds each row's sink once
    out = call.run()
    np.testing.assert_allclose(out, reference(**a), atol=1e-5, rtol=1e-5)
    assert not out[2].any()  # no key: zeros, sink or not
    without = dict(a)
    del without["sinks"]
    assert np.abs(out - reference(**without)).max() > 1e-2  # the sinks changed the answer


def test_fills_out_and_takes_i32_tables(store):
    a = inputs(table_dtype=np.int32)
    out = np.full((B, HQ, SQ, D), np.nan, dtype=np.float32)
    got = store.run("paged_attention", out=out, **a)
    assert got is out
    np.testing.assert_allclose(out, reference(**a), atol=1e-5, rtol=1e-5)


def test_f16(store):
    a = inputs(dtype=np.float16)
    out = store.run("paged_attention", **a)
    assert out.dtype == np.float16
    np.testing.assert_allclose(out.astype(np.float64), reference(**a), atol=4e-3, rtol=4e-3)


def test_runs_from_threads(store):
    a = inputs(seed=3)
    want = reference(**a)
    results, errors = [], []

    def work():
        try:
            results.append(store.run("paged_attention", **a))
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for r in results:
        np.testing.assert_allclose(r, want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("change, words", [
    (lambda a: a.update(v_cache=a["v_cache"].astype(np.float16)), ["v_cache", "f16", "expected f32"]),
    (lambda a: a.update(v_cache=a["v_cache"][:, :, :, :16]), ["v_cache"]),
    (lambda a: a.update(q=np.asfortranarray(a["q"])), ["q", "contiguous"]),
    (lambda a: a.update(block_table=a["block_table"].astype(np.float32)), ["block_table", "f32"]),
    (lambda a: a.pop("softmax_scale"), ["softmax_scale", "missing"]),
    (lambda a: a.pop("context_lens"), ["context_lens", "missing"]),
    (lambda a: a.update(q=a["q"][:, :4]), ["q", "[3, 4, 1, 32]"]),
    (lambda a: a.update(q=[1.0, 2.0]), ["q", "__dlpack__"]),
])
def test_errors_name_the_argument(store, change, words):
    a = inputs()
    change(a)
    with pytest.raises(tilec.TilecError) as e:
        store.run("paged_attention", **a)
    for w in words:
        assert w in str(e.value), str(e.value)


def test_unknown_argument_and_op(store):
    with pytest.raises(TypeError, match="'qq'"):
        store.run("paged_attention", qq=1, **inputs())
    with pytest.raises(tilec.NotFoundError, match="paged_attention"):
        store.run("no_such_op", **inputs())


def test_missing_module_says_how_to_build_it(store):
    with pytest.raises(tilec.NotFoundError, match="tilec compile paged_attention"):
        store.run("paged_attention", causal=1, **inputs())


def test_torch_through_dlpack(store):
    torch = pytest.importorskip("torch")
    a = inputs(alibi=True)
    t = {k: (torch.from_numpy(v.astype(np.int32) if v.dtype == np.uint32 else v) if isinstance(v, np.ndarray) else v)
         for k, v in a.items()}
    out = store.run("paged_attention", **t)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float32
    np.testing.assert_allclose(out.numpy(), reference(**a), atol=1e-5, rtol=1e-5)


def test_gil_is_released_during_a_run(store):
    # ctypes releases the GIL around every foreign call: a Python thread keeps running while
    # the emulator works. Count its iterations during one run.
    a = inputs(seed=5)
    stop, count = threading.Event(), [0]

    def spin():
        while not stop.is_set():
            count[0] += 1

    t = threading.Thread(target=spin)
    t.start()
    before = sys.getswitchinterval()
    sys.setswitchinterval(1.0)  # a thread holding the GIL would keep it for a whole second
    try:
        c = count[0]
        store.run("paged_attention", **a)
        ran = count[0] - c
    finally:
        sys.setswitchinterval(before)
        stop.set()
        t.join()
    assert ran > 0
