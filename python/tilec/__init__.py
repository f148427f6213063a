"""Run tilec's exported, tuned ops from Python on any array that speaks DLPack.

    import numpy as np, tilec
    store = tilec.load("deploy/")                      # a folder from `tilec autotune ... --export deploy/`
    out = store.run("paged_attention", q=q, k_cache=k, v_cache=v, block_table=bt,
                    context_lens=cl, softmax_scale=0.125)

The package is ctypes over tilec's C ABI (runtime/tilec.h, the library libtilec.so, which
`pip install ./python` builds into the package; nothing else is compiled), and every rule (the
sizes, the config the tuning database selects, the argument checks, the grids, the workspace,
the launches) is the C++ runtime's, read from the op's kernel card; this file knows no op by
name. Arrays are taken through `__dlpack__` without copies: NumPy (or any CPU array) on the
emulator, PyTorch CUDA tensors (any CUDA array) on the GPU, launched on the current PyTorch
stream unless `stream=` names another. ctypes releases the GIL for every call into the library,
so no launch holds it. NumPy's bfloat16 and float8 are ml_dtypes' types (an optional dependency):
such arrays go in as what they are, and bf16 outputs allocated for NumPy inputs are
ml_dtypes.bfloat16 arrays (_dtypes.py; save_npy and load_npy for their .npy files).

The library is found through $TILEC_LIBRARY, else libtilec.so beside this file, else the
loader's search path. docs/HOST_PYTHON.md has the whole story.
"""

import ctypes
import ctypes.util
import os
import sys

__all__ = ["load", "Store", "Call", "TilecError", "ArgumentError", "NotFoundError", "ABI_VERSION", "save_npy",
           "load_npy"]

ABI_VERSION = 1


class TilecError(RuntimeError):
    """A failed tilec call; `status` is the C ABI's tilec_status."""

    def __init__(self, message, status=None):
        super().__init__(message)
        self.status = status


class ArgumentError(TilecError, ValueError):
    """An argument that does not fit the op (the message names it)."""


class NotFoundError(TilecError, LookupError):
    """No such folder, op or module (the message says where tilec looked)."""


_STATUS = {1: ArgumentError, 2: NotFoundError}

from . import _dtypes  # noqa: E402 (after the errors, which it raises)
from ._dtypes import load_npy, save_npy  # noqa: E402,F401


class _Tensor(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("data", ctypes.c_void_p), ("dtype", ctypes.c_int),
                ("ndim", ctypes.c_int), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64))]


class _Scalar(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("value", ctypes.c_double)]


class _Value(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("value", ctypes.c_int64), ("string", ctypes.c_char_p)]


class _Args(ctypes.Structure):
    _fields_ = [("tensors", ctypes.POINTER(_Tensor)), ("num_tensors", ctypes.c_size_t),
                ("scalars", ctypes.POINTER(_Scalar)), ("num_scalars", ctypes.c_size_t),
                ("sizes", ctypes.POINTER(_Value)), ("num_sizes", ctypes.c_size_t),
                ("config", ctypes.POINTER(_Value)), ("num_config", ctypes.c_size_t)]


# DLPack (dlpack.h): the unversioned capsule every producer gives when no max_version is asked.
class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int), ("device_id", ctypes.c_int)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


_KDL_CPU, _KDL_CUDA, _KDL_CUDA_HOST = 1, 2, 3

_lib = None


def _library():
    global _lib
    if _lib is not None:
        return _lib
    # $TILEC_LIBRARY overrides; else the copy pip built into this package; else the loader's path.
    path = os.environ.get("TILEC_LIBRARY")
    if path and not os.path.isfile(path):
        raise TilecError(f"TILEC_LIBRARY={path}: no such file (a tilec build has build/libtilec.so; unset "
                         "TILEC_LIBRARY to use the library this package carries)")
    if not path:
        beside = os.path.join(os.path.dirname(os.path.abspath(__file__)), "libtilec.so")
        path = beside if os.path.exists(beside) else ctypes.util.find_library("tilec")
    if not path:
        raise TilecError("libtilec.so not found: this package was not installed with it (pip install ./python "
                         "from a tilec checkout builds it in), so set TILEC_LIBRARY to one (a tilec build has "
                         "build/libtilec.so) or put it on the loader's path")
    lib = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)  # emulated modules call the runtime's tilec_emu_*
    c = ctypes
    sigs = {
        "tilec_abi_version": (c.c_int, []),
        "tilec_last_error": (c.c_char_p, []),
        "tilec_store_open": (c.c_int, [c.c_char_p, c.c_char_p, c.POINTER(c.c_void_p)]),
        "tilec_store_close": (None, [c.c_void_p]),
        "tilec_store_arch": (c.c_char_p, [c.c_void_p]),
        "tilec_store_device": (c.c_char_p, [c.c_void_p]),
        "tilec_store_num_ops": (c.c_size_t, [c.c_void_p]),
        "tilec_store_op_name": (c.c_char_p, [c.c_void_p, c.c_size_t]),
        "tilec_store_op": (c.c_int, [c.c_void_p, c.c_char_p, c.POINTER(c.c_void_p)]),
        "tilec_op_tensor": (c.c_char_p, [c.c_void_p, c.c_size_t, c.POINTER(c.c_int)]),
        "tilec_op_scalar": (c.c_char_p, [c.c_void_p, c.c_size_t]),
        "tilec_op_size": (c.c_char_p, [c.c_void_p, c.c_size_t]),
        "tilec_op_tensor_shape": (c.c_int, [c.c_void_p, c.POINTER(_Args), c.c_char_p, c.POINTER(c.c_int64), c.c_int,
                                            c.POINTER(c.c_int), c.POINTER(c.c_int)]),
        "tilec_op_prepare": (c.c_int, [c.c_void_p, c.POINTER(_Args), c.POINTER(c.c_void_p)]),
        "tilec_call_destroy": (None, [c.c_void_p]),
        "tilec_call_workspace_bytes": (c.c_size_t, [c.c_void_p]),
        "tilec_call_num_params": (c.c_int, [c.c_void_p]),
        "tilec_call_param": (c.c_int, [c.c_void_p, c.c_int, c.POINTER(c.c_char_p), c.POINTER(c.c_int64)]),
        "tilec_call_value": (c.c_int, [c.c_void_p, c.c_char_p, c.POINTER(c.c_int64)]),
        "tilec_call_note": (c.c_char_p, [c.c_void_p]),
        "tilec_call_num_launches": (c.c_int, [c.c_void_p]),
        "tilec_call_launch": (c.c_int, [c.c_void_p, c.c_int, c.POINTER(c.c_char_p), c.POINTER(c.c_uint32)]),
        "tilec_call_run": (c.c_int, [c.c_void_p, c.c_void_p, c.c_size_t, c.c_void_p]),
    }
    for name, (res, args) in sigs.items():
        f = getattr(lib, name)
        f.restype, f.argtypes = res, args
    version = lib.tilec_abi_version()
    if version != ABI_VERSION:
        raise TilecError(f"{path}: C ABI version {version}, this package speaks version {ABI_VERSION}")
    _lib = lib
    return lib


# For a refusal of an integer array where tilec wants a type NumPy holds only through ml_dtypes.
_BITS_HINTS = {"u16, expected bf16": "bfloat16", "u8, expected f8e4m3": "float8_e4m3fn",
               "u8, expected f8e5m2": "float8_e5m2"}


def _check(status, hint=False):
    if status != 0:
        message = _library().tilec_last_error().decode()
        for text, name in _BITS_HINTS.items() if hint else ():
            if f"has dtype {text}" in message:
                message += (f" (an array of {name} bits in NumPy's unsigned integers: pass it as "
                            f"array.view(ml_dtypes.{name}))")
        raise _STATUS.get(status, TilecError)(message, status)


_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


class _Array:
    """One argument seen through DLPack; holds the capsule (and so the producer's memory).
    dtype is its tilec_dtype, None for a type tilec has not (`foreign` names it)."""

    def __init__(self, name, array, on_gpu, dlpack_stream):
        if not hasattr(array, "__dlpack__"):
            raise ArgumentError(f"{name}: expected an array with __dlpack__ (a NumPy array, a PyTorch tensor, ...), "
                                f"got {type(array).__name__}")
        self.name, self.array = name, array
        # An ndarray of ml_dtypes' bfloat16 or float8, which NumPy's DLPack refuses: its bits.
        ml = _dtypes.ml_dtype_of(array)
        self.source = _dtypes.bits_view(array) if ml else array
        device_type = array.__dlpack_device__()[0] if hasattr(array, "__dlpack_device__") else None
        try:
            if device_type == _KDL_CUDA:
                self.capsule = self.source.__dlpack__(stream=dlpack_stream)
            else:
                self.capsule = self.source.__dlpack__()
        except (BufferError, TypeError, RuntimeError) as e:
            raise ArgumentError(f"{name}: cannot be taken through DLPack without a copy: {e}") from e
        dl = _DLTensor.from_address(_capsule_pointer(self.capsule, b"dltensor"))
        where = {_KDL_CPU: "the CPU", _KDL_CUDA: f"cuda:{dl.device.device_id}"}.get(dl.device.device_type,
                                                                                   f"device type {dl.device.device_type}")
        if on_gpu and not (dl.device.device_type == _KDL_CUDA and dl.device.device_id == 0):
            raise ArgumentError(f"{name}: is on {where}; this store runs on the GPU (cuda:0)")
        if not on_gpu and dl.device.device_type not in (_KDL_CPU, _KDL_CUDA_HOST):
            raise ArgumentError(f"{name}: is on {where}; this store runs on the CPU emulator (host memory)")
        key = (dl.dtype.code, dl.dtype.bits)
        self.dtype = _dtypes.FROM_DLPACK.get(key) if dl.dtype.lanes == 1 else None
        if ml:
            self.dtype = ml[0]
        if self.dtype is None:
            self.foreign = ml[1] if ml else _dtypes.dlpack_name(*key, dl.dtype.lanes)
        self.shape = [dl.shape[i] for i in range(dl.ndim)]
        self.strides = [dl.strides[i] for i in range(dl.ndim)] if dl.strides else None
        self.data = (dl.data or 0) + dl.byte_offset

    def fill(self, t):
        t.name = self.name.encode()
        t.data = self.data
        t.dtype = self.dtype
        t.ndim = len(self.shape)
        self._shape = (ctypes.c_int64 * max(1, len(self.shape)))(*self.shape)
        t.shape = self._shape
        if self.strides is not None:
            self._strides = (ctypes.c_int64 * max(1, len(self.strides)))(*self.strides)
            t.strides = self._strides


def _tensor_shape(handle, packed, name):
    """(shape, tilec_dtype) of tensor `name` for the arguments `packed`, as the op works them out."""
    shape, ndim, dtype = (ctypes.c_int64 * 16)(), ctypes.c_int(), ctypes.c_int()
    _check(_library().tilec_op_tensor_shape(handle, ctypes.byref(packed.args), name.encode(), shape, 16,
                                            ctypes.byref(ndim), ctypes.byref(dtype)), hint=True)
    return tuple(shape[i] for i in range(ndim.value)), dtype.value


def _expected_dtype(handle, op, bad, arrays, scalars, sizes, config):
    """"expected f32" for array `bad`, whose type tilec has not: the dtype the op works out
    without it, else with it as f32 and as f16 when both agree (its dtype does not follow its
    own); else the element types tilec has."""
    def attempt(given):
        try:
            return _tensor_shape(handle, _Packed(op, given, scalars, sizes, config), bad.name)[1]
        except TilecError:
            return None

    others = [a for a in arrays if a is not bad and a.dtype is not None]
    want = attempt(others)
    if want is None:
        bad.dtype = 0
        as_f32 = attempt(others + [bad])
        bad.dtype = 1
        as_f16 = attempt(others + [bad])
        bad.dtype = None
        want = as_f32 if as_f32 == as_f16 else None
    if want is None:
        return f"which tilec does not take (its element types: {', '.join(_dtypes.NAMES)})"
    return f"expected {_dtypes.NAMES[want]}"


def _cuda_stream(stream):
    """The CUstream to launch on: `stream` (a handle or an object with .cuda_stream), else
    PyTorch's current stream when PyTorch is loaded, else the legacy default stream (0)."""
    if stream is not None:
        return int(getattr(stream, "cuda_stream", stream))
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        return torch.cuda.current_stream().cuda_stream
    return 0


class _Packed:
    """The C struct of one set of arguments, and what keeps its memory alive."""

    def __init__(self, op, arrays, scalars, sizes, config):
        self.arrays = arrays
        self.tensors = (_Tensor * max(1, len(arrays)))()
        for t, a in zip(self.tensors, arrays):
            a.fill(t)
        self.scalars = (_Scalar * max(1, len(scalars)))(*[_Scalar(k.encode(), float(v)) for k, v in scalars.items()])

        def values(d, what):
            out = (_Value * max(1, len(d)))()
            for slot, (k, v) in zip(out, d.items()):
                slot.name = k.encode()
                if isinstance(v, str):
                    slot.string = v.encode()
                elif isinstance(v, bool) or isinstance(v, int) or hasattr(v, "__index__"):
                    v = int(v)
                    if what == "size" and v < 0:
                        raise ArgumentError(f"{op}: size '{k}' = {v}: a size is not negative")
                    if not -(1 << 63) <= v < (1 << 63):
                        raise ArgumentError(f"{op}: {what} '{k}' = {v}: past a 64-bit integer")
                    slot.value = v
                else:
                    raise ArgumentError(f"{op}: {what} '{k}' = {v!r}: expected an integer"
                                        f"{' or a string' if what == 'size' else ''}")
            return out

        self.sizes, self.config = values(sizes, "size"), values(config, "config")
        self.args = _Args(self.tensors, len(arrays), self.scalars, len(scalars), self.sizes, len(sizes), self.config,
                          len(config))


class Call:
    """One prepared run of an op: its sizes, selected config, launches and workspace. It keeps
    the arrays it was given alive; run() may be called again (the same arrays, new contents)."""

    def __init__(self, store, op_name, handle, packed, outputs, on_gpu, stream):
        self._store, self.op, self._handle, self._packed = store, op_name, handle, packed
        self.outputs, self._on_gpu, self._stream = outputs, on_gpu, stream
        lib = _library()
        self.workspace_bytes = lib.tilec_call_workspace_bytes(handle)
        self.note = lib.tilec_call_note(handle).decode()
        self.config = {}
        for i in range(lib.tilec_call_num_params(handle)):
            name, value = ctypes.c_char_p(), ctypes.c_int64()
            _check(lib.tilec_call_param(handle, i, ctypes.byref(name), ctypes.byref(value)))
            self.config[name.value.decode()] = value.value
        self.launches = []
        for i in range(lib.tilec_call_num_launches(handle)):
            kernel, grid = ctypes.c_char_p(), (ctypes.c_uint32 * 3)()
            _check(lib.tilec_call_launch(handle, i, ctypes.byref(kernel), grid))
            self.launches.append((kernel.value.decode(), tuple(grid)))

    def value(self, name):
        """A size, config parameter or let of this call, by name."""
        v = ctypes.c_int64()
        _check(_library().tilec_call_value(self._handle, name.encode(), ctypes.byref(v)))
        return v.value

    def run(self, workspace=None):
        """Runs every launch; returns the output (the single output array, else a dict by name;
        an op without outputs returns the arrays it updated in place, the caller's own).
        On the GPU the launches are queued on the stream the call was prepared with."""
        ws_ptr, ws_bytes, ws_hold = None, 0, None
        if self.workspace_bytes:
            if workspace is None and self._on_gpu:
                torch = sys.modules.get("torch")
                if torch is None:
                    raise ArgumentError(f"{self.op}: this call needs {self.workspace_bytes} bytes of device workspace: "
                                        "pass workspace= (a CUDA array of at least that many bytes)")
                workspace = torch.empty(self.workspace_bytes, dtype=torch.uint8, device="cuda:0")
            if workspace is not None:
                ws_hold = _Array("workspace", workspace, self._on_gpu, self._stream or 1)
                ws_ptr = ws_hold.data
                ws_bytes = ws_hold.shape and int(_prod(ws_hold.shape)) * _dtypes.ITEM_BYTES[ws_hold.dtype]
        _check(_library().tilec_call_run(self._handle, ws_ptr, ws_bytes, self._stream or None))
        # Keep the workspace alive until the queued launches are done with it: on the GPU the
        # caching allocator of PyTorch reuses it only after work queued on the stream so far.
        del ws_hold
        if len(self.outputs) == 1:
            return next(iter(self.outputs.values()))
        return dict(self.outputs)

    def __del__(self):
        if getattr(self, "_handle", None):
            _library().tilec_call_destroy(self._handle)
            self._handle = None


def _prod(xs):
    p = 1
    for x in xs:
        p *= x
    return p


# The most elements a tensor may have, as the C ABI has it (2^48).
_MAX_ELEMENTS = 1 << 48


def _empty_like(op, name, proto, shape, dtype, sizes):
    """A new array for output `name`, from the library of the input `proto`: PyTorch's, else
    NumPy's (bfloat16 and float8 as ml_dtypes' types)."""
    type_name = _dtypes.LIBRARY_NAMES[dtype]
    if any(d < 0 for d in shape) or _prod(shape) > _MAX_ELEMENTS:
        given = " ".join(f"{k}={v}" for k, v in sizes.items())
        raise ArgumentError(f"{op}: output '{name}' would have shape {list(shape)}"
                            f"{f' (the sizes given: {given})' if given else ''}, "
                            f"{'a negative dimension' if any(d < 0 for d in shape) else 'past 2^48 elements'}")
    module = type(proto).__module__.split(".")[0]
    try:
        if module == "torch":
            torch = sys.modules["torch"]
            return torch.empty(shape, dtype=getattr(torch, type_name), device=proto.device)
        if module == "numpy":
            import numpy
            np_type = _dtypes.ml_dtype(dtype, f"{op}: output '{name}'") if type_name in _dtypes.ML_DTYPES else type_name
            return numpy.empty(shape, dtype=np_type)
    except (ValueError, MemoryError, RuntimeError) as e:
        if isinstance(e, ArgumentError):
            raise
        raise ArgumentError(f"{op}: cannot allocate output '{name}', {type_name} of shape {list(shape)} "
                            f"({_prod(shape) * _dtypes.ITEM_BYTES[dtype]} bytes): {e}") from e
    raise ArgumentError(f"{op}: output '{name}' is not given, and tilec cannot allocate a {type_name} array like the "
                        f"{type(proto).__name__} inputs: pass {name}=")


class Store:
    """A folder of exported modules, opened for one backend (see load)."""

    def __init__(self, path, backend="auto"):
        lib = _library()
        handle = ctypes.c_void_p()
        _check(lib.tilec_store_open(os.fspath(path).encode(), backend.encode(), ctypes.byref(handle)))
        self._handle = handle
        self.path = os.fspath(path)
        self.arch = lib.tilec_store_arch(handle).decode()
        self.device = lib.tilec_store_device(handle).decode()
        self.on_gpu = self.arch != "host"
        self.ops = [lib.tilec_store_op_name(handle, i).decode() for i in range(lib.tilec_store_num_ops(handle))]
        self._ops = {}

    def __repr__(self):
        return f"tilec.Store({self.path!r}, arch={self.arch!r}, ops={self.ops})"

    def _op(self, name):
        if name not in self._ops:
            lib = _library()
            op = ctypes.c_void_p()
            _check(lib.tilec_store_op(self._handle, name.encode(), ctypes.byref(op)))

            # role: a tensor's is_output (0 input, 1 output, 2 inout: updated in place on the caller's array)
            def names(fn, role=None):
                out, i = [], 0
                while True:
                    flag = ctypes.c_int()
                    n = fn(op, i, ctypes.byref(flag)) if role is not None else fn(op, i)
                    if n is None:
                        return out
                    if role is None or flag.value == role:
                        out.append(n.decode())
                    i += 1

            self._ops[name] = (op, {"inputs": names(lib.tilec_op_tensor, 0), "outputs": names(lib.tilec_op_tensor, 1),
                                    "inouts": names(lib.tilec_op_tensor, 2),
                                    "scalars": names(lib.tilec_op_scalar), "sizes": names(lib.tilec_op_size)})
        return self._ops[name]

    def arguments(self, op):
        """The op's arguments by kind: inputs, outputs, inouts (arrays the op updates in place),
        scalars, sizes."""
        return dict(self._op(op)[1])

    def prepare(self, op, *, config=None, stream=None, **kwargs):
        """Checks the arguments, selects the config and finds the modules; returns a Call.
        Outputs that are not given are allocated like the inputs (NumPy or PyTorch); inouts
        (reshape_and_cache's caches) are always the caller's arrays, updated in place."""
        handle, names = self._op(op)
        tensors, scalars, sizes = {}, {}, {}
        for k, v in kwargs.items():
            if k in names["inputs"] or k in names["outputs"] or k in names["inouts"]:
                tensors[k] = v
            elif k in names["scalars"]:
                if not isinstance(v, (int, float)) and not hasattr(v, "__float__"):
                    raise ArgumentError(f"{op}: {k} = {v!r}: expected a number")
                scalars[k] = float(v)
            elif k in names["sizes"]:
                sizes[k] = v
            else:
                raise TypeError(f"{op}() got an unexpected argument '{k}'; it takes tensors "
                                f"{', '.join(names['inputs'] + names['inouts'] + names['outputs'])}, "
                                f"scalars {', '.join(names['scalars'])}"
                                f" and sizes {', '.join(names['sizes'])}")
        cuda_stream = _cuda_stream(stream) if self.on_gpu else 0
        dl_stream = cuda_stream or 1  # DLPack spells the legacy default stream 1
        arrays = [_Array(k, v, self.on_gpu, dl_stream) for k, v in tensors.items()]
        config = config or {}
        for a in arrays:
            if a.dtype is None:
                raise ArgumentError(f"{op}: tensor '{a.name}' has dtype {a.foreign}, "
                                    f"{_expected_dtype(handle, op, a, arrays, scalars, sizes, config)}")
        outputs = {k: tensors[k] for k in names["outputs"] if k in tensors}
        missing = [k for k in names["outputs"] if k not in tensors]
        if not names["outputs"]:  # an op that only updates arrays in place returns them
            outputs = {k: tensors[k] for k in names["inouts"] if k in tensors}
        if missing:
            if not arrays:
                raise ArgumentError(f"{op}: no tensor arguments")
            packed = _Packed(op, arrays, scalars, sizes, config)
            for k in missing:
                shape, dtype = _tensor_shape(handle, packed, k)
                out = _empty_like(op, k, arrays[0].array, shape, dtype, sizes)
                outputs[k] = out
                arrays.append(_Array(k, out, self.on_gpu, dl_stream))
        packed = _Packed(op, arrays, scalars, sizes, config)
        call = ctypes.c_void_p()
        _check(_library().tilec_op_prepare(handle, ctypes.byref(packed.args), ctypes.byref(call)), hint=True)
        return Call(self, op, call, packed, outputs, self.on_gpu, cuda_stream)

    def run(self, op, *, config=None, stream=None, workspace=None, **kwargs):
        """Runs the whole op on the given arrays and returns its output (allocated when not
        given as out=...; an op without outputs, such as reshape_and_cache, updates the inout
        arrays given and returns them). On the GPU it returns once the launches are queued on
        the stream."""
        return self.prepare(op, config=config, stream=stream, **kwargs).run(workspace=workspace)

    def close(self):
        if getattr(self, "_handle", None):
            _library().tilec_store_close(self._handle)
            self._handle = None

    def __del__(self):
        self.close()


def load(path, backend="auto"):
    """Opens a folder written by `tilec autotune ... --export` (or `tilec compile -o`).
    backend: "emulate" (the CPU emulator, host arrays), "cuda" (the GPU, device 0), or "auto"
    (the GPU when there is one, else the emulator)."""
    return Store(path, backend)
