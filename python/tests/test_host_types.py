"""The package speaks the caller's types: errors that name a tensor's rank and dtype, sizes that
are ArgumentErrors, bf16 and fp8 as ml_dtypes arrays (in, out, in place, and .npy files tilec's
CLI reads and writes), bf16 through DLPack, and a NotFoundError that proposes no config the
template may refuse.

Needs ml_dtypes (scripts/test_hosts.sh installs it); its absence fails the import below. The
folder is made here with `tilec compile --target emu` (the `tilec` test_any_template.py finds).
"""
import ctypes
import os
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest

import tilec
from tilec_cli import tilec_binary

BF16 = ml_dtypes.bfloat16
B, HQ, HKV, D, BS, MB, NB = 2, 4, 2, 16, 8, 3, 7     # paged attention, bf16
T, H, RD, RNB, RBS = 7, 2, 16, 3, 4                  # reshape_and_cache, bf16
RAC = {"block_t": 4, "block_hd": 16, "num_warps": 2}  # the config its modules are compiled for


def tilec_env(folder):
    """The environment of a `tilec` run, its module cache beside the folder `folder`."""
    return dict(os.environ, TILEC_CACHE_DIR=str(folder.parent / "cache"))


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    d = tmp_path_factory.mktemp("types") / "deploy"

    def compile_to(out, kernel, *args):
        subprocess.run([tilec_binary(), "compile", kernel, "--target", "emu", *args, "-o", str(out)], check=True,
                       stdout=subprocess.DEVNULL, env=tilec_env(d))
    compile_to(d, "vector_add")
    compile_to(d, "softmax")
    compile_to(d, "paged_attention", "--shape", f"batch={B}", f"hq={HQ}", f"hkv={HKV}", "sq=1", f"head_dim={D}",
               f"block_size={BS}", f"max_blocks={MB}", f"ctx={MB * BS}", "dtype=bf16")
    rac = ["--set", *(f"{k}={v}" for k, v in RAC.items())]
    compile_to(d / "rac", "reshape_and_cache", *rac, "--shape", f"num_tokens={T}", f"hkv={H}", f"head_dim={RD}",
               f"num_blocks={RNB}", f"block_size={RBS}", "dtype=bf16")
    compile_to(d / "rac_fp8", "reshape_and_cache", *rac, "--shape", "num_tokens=6", "hkv=1", "head_dim=32",
               "num_blocks=2", "block_size=4", "dtype=f32", "kv_dtype=f8e4m3", "slot_dtype=i32", "latent=1")
    return d


@pytest.fixture(scope="module")
def store(folder):
    return tilec.load(folder, backend="emulate")


def test_rank_is_named(store):
    for shape in [(10,), (2, 3, 4)]:
        x = np.zeros(shape, dtype=np.float32)
        with pytest.raises(tilec.ArgumentError) as e:
            store.run("softmax", x=x)
        dims = f"{len(shape)} dimension{'s' if len(shape) > 1 else ''} (shape {list(shape)})"
        assert str(e.value) == f"softmax: tensor 'x' has {dims}, expected 2 ([rows, cols])"


def test_dtype_is_named(store):
    x = np.zeros(10, dtype=np.float32)
    with pytest.raises(tilec.ArgumentError, match=r"^softmax: tensor 'x' has dtype float64, expected f32$"):
        store.run("softmax", x=np.zeros((2, 3)))
    with pytest.raises(tilec.ArgumentError, match=r"^vector_add: tensor 'y' has dtype float64, expected f32$"):
        store.run("vector_add", x=x, y=np.zeros(10))
    with pytest.raises(tilec.ArgumentError, match=r"^vector_add: tensor 'x' has dtype complex64, expected f32$"):
        store.run("vector_add", x=np.zeros(10, dtype=np.complex64), y=x)
    with pytest.raises(tilec.ArgumentError, match=r"^vector_add: tensor 'y' has dtype bf16, expected f32$"):
        store.run("vector_add", x=x, y=x.astype(BF16))
    with pytest.raises(tilec.ArgumentError, match=r"^vector_add: tensor 'y' has dtype int4, expected f32$"):
        store.run("vector_add", x=x, y=np.zeros(10, dtype=ml_dtypes.int4))
    # q's dtype is the op's dtype: no single one is expected, so the message lists tilec's.
    a = attention_inputs()
    a["q"] = a["q"].astype(np.float64)
    with pytest.raises(tilec.ArgumentError, match=r"tensor 'q' has dtype float64, which tilec does not take "
                                                  r"\(its element types: f32, f16, bf16, "):
        store.run("paged_attention", **a)


def test_sizes_are_argument_errors(store):
    x = np.zeros((2, 3), dtype=np.float32)
    with pytest.raises(tilec.ArgumentError, match=r"^softmax: size 'rows' = -1: a size is not negative$"):
        store.run("softmax", x=x, rows=-1)
    v = np.zeros(10, dtype=np.float32)
    with pytest.raises(tilec.ArgumentError, match="size 'n' = -3"):
        store.run("vector_add", x=v, y=v, out=v.copy(), n=-3)
    with pytest.raises(tilec.ArgumentError, match=r"output 'out' would have shape \[1099511627776, 1099511627776\] "
                                                  r"\(the sizes given: rows=1099511627776 cols=1099511627776\), "
                                                  r"past 2\^48 elements"):
        store.run("softmax", x=x, rows=2**40, cols=2**40)
    with pytest.raises(tilec.ArgumentError, match="cannot allocate output 'out'"):  # NumPy's refusal, as ours
        store.run("softmax", x=x, rows=2**30, cols=2**17)
    with pytest.raises(tilec.ArgumentError, match="past a 64-bit integer"):
        store.run("softmax", x=x, rows=2**70)
    with pytest.raises(tilec.ArgumentError, match="past a 64-bit integer"):
        store.run("softmax", x=x, config={"block": -2**64})


def test_not_found_proposes_no_config_of_the_callers(store):
    x = np.zeros(10, dtype=np.float32)
    with pytest.raises(tilec.NotFoundError) as e:
        store.run("vector_add", x=x, y=x, config={"block": 3})  # not a power of two: tilec compile refuses it
    message = str(e.value)
    assert "the caller set block=3" in message
    assert "this call uses the kernel card's defaults (block=1024 num_warps=4)" in message
    assert "--set block=3" not in message and "build the module with" not in message


def attention_inputs(seed=0):
    rng = np.random.default_rng(seed)
    q = rng.uniform(-1, 1, (B, HQ, 1, D)).astype(BF16)
    k = rng.uniform(-1, 1, (NB, BS, HKV, D)).astype(BF16)
    v = rng.uniform(-1, 1, (NB, BS, HKV, D)).astype(BF16)
    table = rng.permutation(NB)[: B * MB].reshape(B, MB).astype(np.int32)
    lens = np.array([MB * BS, 11], dtype=np.int32)
    return dict(q=q, k_cache=k, v_cache=v, block_table=table, context_lens=lens, softmax_scale=0.25)


def attention_reference(q, k_cache, v_cache, block_table, context_lens, softmax_scale):
    q, k_cache, v_cache = (x.astype(np.float64) for x in (q, k_cache, v_cache))
    out = np.zeros(q.shape)
    for b in range(B):
        n = int(context_lens[b])
        pages = block_table[b, np.arange(n) // BS]
        k, v = k_cache[pages, np.arange(n) % BS], v_cache[pages, np.arange(n) % BS]
        for h in range(HQ):
            s = q[b, h] @ k[:, h // (HQ // HKV)].T * softmax_scale
            p = np.exp(s - s.max(axis=1, keepdims=True))
            out[b, h] = (p / p.sum(axis=1, keepdims=True)) @ v[:, h // (HQ // HKV)]
    return out


def test_bf16_arrays_in_and_out(store):
    a = attention_inputs()
    out = store.run("paged_attention", **a)
    assert isinstance(out, np.ndarray) and out.dtype == BF16 and out.shape == (B, HQ, 1, D)
    np.testing.assert_allclose(out.astype(np.float64), attention_reference(**a), atol=2e-2, rtol=2e-2)
    mine = np.zeros((B, HQ, 1, D), dtype=BF16)
    assert store.run("paged_attention", out=mine, **a) is mine
    assert np.array_equal(mine.view(np.uint16), out.view(np.uint16))


def test_uint16_is_not_bf16(store):
    a = attention_inputs()
    with pytest.raises(tilec.ArgumentError, match=r"tensor 'out' has dtype u16, expected bf16 \(an array of bfloat16 "
                                                  r"bits .*array\.view\(ml_dtypes\.bfloat16\)"):
        store.run("paged_attention", out=np.zeros((B, HQ, 1, D), dtype=np.uint16), **a)


def test_bf16_output_without_ml_dtypes(store, monkeypatch):
    monkeypatch.setitem(sys.modules, "ml_dtypes", None)  # `import ml_dtypes` fails
    with pytest.raises(tilec.ArgumentError, match=r"paged_attention: output 'out' needs ml_dtypes for NumPy's "
                                                  r"bfloat16: pip install ml_dtypes"):
        store.run("paged_attention", **attention_inputs())


# A DLPack producer of bf16 (DLPack's kDLBfloat, as PyTorch's bfloat16 tensors export): NumPy
# cannot make one, so this one hands out a DLManagedTensor over a uint16 array's memory.
class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device_type", ctypes.c_int), ("device_id", ctypes.c_int),
                ("ndim", ctypes.c_int), ("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype, _capsule_new.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_DLTENSOR = b"dltensor"


class BF16Producer:
    def __init__(self, bits):
        self.bits = np.ascontiguousarray(bits, dtype=np.uint16)
        self.shape = (ctypes.c_int64 * self.bits.ndim)(*self.bits.shape)
        self.managed = _DLManagedTensor(_DLTensor(self.bits.ctypes.data, 1, 0, self.bits.ndim, 4, 16, 1, self.shape,
                                                  None, 0), None, None)

    def __dlpack_device__(self):
        return (1, 0)

    def __dlpack__(self, stream=None):
        return _capsule_new(ctypes.addressof(self.managed), _DLTENSOR, None)


def test_bf16_through_dlpack(store):
    a = attention_inputs(seed=5)
    want = store.run("paged_attention", **a)
    given = dict(a, **{k: BF16Producer(a[k].view(np.uint16)) for k in ("q", "k_cache", "v_cache")})
    out = np.zeros(want.shape, dtype=BF16)
    store.run("paged_attention", out=out, **given)
    assert np.array_equal(out.view(np.uint16), want.view(np.uint16))
    # tilec allocates outputs only like NumPy and PyTorch inputs.
    with pytest.raises(tilec.ArgumentError, match="cannot allocate a bfloat16 array like the BF16Producer inputs: "
                                                  "pass out="):
        store.run("paged_attention", **given)


def test_torch_bf16(store):
    """PyTorch's own bf16 CPU tensors, where PyTorch is installed (it is not where scripts/test.sh
    runs; test_bf16_through_dlpack covers the same DLPack path there)."""
    torch = pytest.importorskip("torch")
    a = attention_inputs(seed=6)
    want = store.run("paged_attention", **a)
    given = dict(a, **{k: torch.from_numpy(a[k].view(np.int16)).view(torch.bfloat16)
                       for k in ("q", "k_cache", "v_cache")})
    out = store.run("paged_attention", **given)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.bfloat16
    assert np.array_equal(out.view(torch.int16).numpy().view(np.uint16), want.view(np.uint16))


def test_bf16_caches_in_place(folder):
    store = tilec.load(folder / "rac", backend="emulate")
    rng = np.random.default_rng(1)
    key, value = (rng.uniform(-2, 2, (T, H, RD)).astype(BF16) for _ in range(2))
    slots = np.array([5, -1, 0, 11, 3, -1, 8], dtype=np.int64)
    k_cache, v_cache = (rng.uniform(-1, 1, (RNB, RBS, H, RD)).astype(BF16) for _ in range(2))
    want_k, want_v = (c.copy().reshape(-1, H, RD) for c in (k_cache, v_cache))
    for t, s in enumerate(slots):
        if s >= 0:
            want_k[s], want_v[s] = key[t], value[t]
    got = store.run("reshape_and_cache", key=key, value=value, slot_mapping=slots, k_cache=k_cache, v_cache=v_cache,
                    config=RAC)
    assert got["k_cache"] is k_cache and got["v_cache"] is v_cache
    assert np.array_equal(k_cache.reshape(want_k.shape).view(np.uint16), want_k.view(np.uint16))
    assert np.array_equal(v_cache.reshape(want_v.shape).view(np.uint16), want_v.view(np.uint16))


def test_fp8_cache_as_ml_dtypes(folder):
    """An ml_dtypes float8_e4m3fn cache is the fp8 cache that uint8 bits with kv_dtype name."""
    store = tilec.load(folder / "rac_fp8", backend="emulate")
    rng = np.random.default_rng(2)
    key = rng.uniform(-600, 600, (6, 1, 32)).astype(np.float32)
    slots = np.array([7, 2, -1, 0, 5, -1], dtype=np.int32)
    bits = rng.integers(0, 256, (2, 4, 1, 32), dtype=np.uint8)
    typed = bits.copy().view(ml_dtypes.float8_e4m3fn)
    store.run("reshape_and_cache", key=key, slot_mapping=slots, k_cache=bits, k_scale=1.25, kv_dtype="f8e4m3",
              config=RAC)
    assert store.run("reshape_and_cache", key=key, slot_mapping=slots, k_cache=typed, k_scale=1.25,
                     config=RAC) is typed
    assert np.array_equal(typed.view(np.uint8), bits)


def test_npy_files_the_cli_reads_and_writes(folder, tmp_path):
    """save_npy writes ml_dtypes arrays as the bits `tilec run --inputs` reads; load_npy reads the
    bf16 bits `tilec run --out` writes; both agree with the package's own run."""
    rng = np.random.default_rng(3)
    inputs = {"key": rng.uniform(-2, 2, (T, H, RD)).astype(BF16), "value": rng.uniform(-2, 2, (T, H, RD)).astype(BF16),
              "slot_mapping": np.array([5, -1, 0, 11, 3, -1, 8], dtype=np.int64),
              "k_cache": rng.uniform(-1, 1, (RNB, RBS, H, RD)).astype(BF16),
              "v_cache": rng.uniform(-1, 1, (RNB, RBS, H, RD)).astype(BF16)}
    (tmp_path / "in").mkdir()
    for name, array in inputs.items():
        tilec.save_npy(tmp_path / "in" / f"{name}.npy", array)
    assert np.load(tmp_path / "in" / "key.npy").dtype == np.dtype("<u2")  # bits, not numpy.save's '<V2'
    back = tilec.load_npy(tmp_path / "in" / "key.npy", dtype="bfloat16")
    assert back.dtype == BF16 and np.array_equal(back.view(np.uint16), inputs["key"].view(np.uint16))
    np.save(tmp_path / "v2.npy", inputs["key"])  # numpy.save's own '<V2' file reads back too
    assert np.array_equal(tilec.load_npy(tmp_path / "v2.npy", dtype=BF16).view(np.uint16), back.view(np.uint16))
    with pytest.raises(tilec.ArgumentError, match="not the 2-byte bits of bfloat16"):
        tilec.load_npy(tmp_path / "in" / "slot_mapping.npy", dtype="bfloat16")

    subprocess.run([tilec_binary(), "run", "reshape_and_cache", "--backend", "emulate", "--inputs",
                    str(tmp_path / "in"), "--out", str(tmp_path / "out")], check=True, stdout=subprocess.DEVNULL,
                   env=tilec_env(folder))
    store = tilec.load(folder / "rac", backend="emulate")
    got = store.run("reshape_and_cache", config=RAC, **inputs)
    for name in ("k_cache", "v_cache"):
        cli = tilec.load_npy(tmp_path / "out" / f"{name}.npy", dtype="bfloat16")
        assert cli.dtype == BF16 and np.array_equal(cli.view(np.uint16), got[name].view(np.uint16))
