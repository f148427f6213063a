"""Element types as DLPack, tilec (runtime/tilec.h's tilec_dtype), NumPy and ml_dtypes spell them,
and .npy files of ml_dtypes arrays in the layout tilec's CLI reads and writes.

NumPy has no bfloat16 or float8 of its own; the `ml_dtypes` package adds them as NumPy dtypes
(`ml_dtypes.bfloat16`, `float8_e4m3fn`, `float8_e5m2`), which NumPy's DLPack export refuses. An
ndarray of one is therefore taken as a view of its bits (uint16, uint8) with the element type
named here. ml_dtypes is an optional dependency, imported only when an output of one of these
types is allocated or a .npy file is read as one.
"""

# (DLPack type code, bits) -> tilec_dtype. DLPack's codes: 0 int, 1 uint, 2 float, 4 bfloat,
# 6 bool, 10 float8_e4m3fn, 12 float8_e5m2.
FROM_DLPACK = {(2, 32): 0, (2, 16): 1, (4, 16): 2, (10, 8): 3, (12, 8): 4, (0, 8): 5, (0, 16): 6,
               (0, 32): 7, (0, 64): 8, (1, 8): 9, (1, 16): 10, (1, 32): 11, (1, 64): 12, (6, 8): 13}
# tilec_dtype -> the name in tilec's messages (the IR's), and the name NumPy, ml_dtypes and PyTorch use.
NAMES = ["f32", "f16", "bf16", "f8e4m3", "f8e5m2", "i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64", "i1"]
LIBRARY_NAMES = ["float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2", "int8", "int16", "int32",
                 "int64", "uint8", "uint16", "uint32", "uint64", "bool"]
ITEM_BYTES = [4, 2, 2, 1, 1, 1, 2, 4, 8, 1, 2, 4, 8, 1]
# The tilec_dtypes NumPy holds only through ml_dtypes, by ml_dtypes' name.
ML_DTYPES = {"bfloat16": 2, "float8_e4m3fn": 3, "float8_e5m2": 4}

_DLPACK_CODES = {0: "int", 1: "uint", 2: "float", 4: "bfloat", 5: "complex", 6: "bool", 10: "float8_e4m3fn",
                 12: "float8_e5m2"}


def dlpack_name(code, bits, lanes):
    """A DLPack dtype as NumPy would name it: (2, 64, 1) -> "float64"."""
    base = _DLPACK_CODES.get(code)
    name = f"{base}{bits}" if base and code < 10 and code != 6 else base or f"(DLPack code {code}, {bits} bits)"
    return name if lanes == 1 else f"{name} x{lanes} lanes"


def ml_dtype_of(array):
    """(tilec_dtype or None, ml_dtypes' name) for a NumPy array of an ml_dtypes type; None when the
    array's type is not one of ml_dtypes'. Does not import ml_dtypes."""
    dtype = getattr(array, "dtype", None)
    scalar = getattr(dtype, "type", None)
    if type(array).__module__.split(".")[0] != "numpy" or \
            not str(getattr(scalar, "__module__", "")).startswith("ml_dtypes"):
        return None
    return ML_DTYPES.get(dtype.name), dtype.name


def bits_view(array):
    """The array's bits as NumPy's unsigned integer of its width (the same memory)."""
    return array.view(f"u{array.dtype.itemsize}")


def ml_dtype(dtype, why):
    """ml_dtypes' NumPy type for tilec_dtype `dtype`; `why` says what needs it, for the error."""
    try:
        import ml_dtypes
    except ImportError as e:
        from . import ArgumentError
        raise ArgumentError(f"{why} needs ml_dtypes for NumPy's {LIBRARY_NAMES[dtype]}: pip install ml_dtypes "
                            f"(or tilec[ml_dtypes])") from e
    return getattr(ml_dtypes, LIBRARY_NAMES[dtype])


def save_npy(path, array):
    """numpy.save, except that an array of an ml_dtypes type (bfloat16, float8_e4m3fn,
    float8_e5m2) is written as its bits ('<u2', '|u1'): what tilec's CLI reads for a bf16 or fp8
    .npy (`tilec run --inputs DIR`), where numpy.save would write the opaque '<V2' it refuses."""
    import numpy
    found = ml_dtype_of(array)
    if found is not None:
        if found[0] is None:
            from . import ArgumentError
            raise ArgumentError(f"{path}: tilec has no element type for ml_dtypes.{found[1]}")
        array = bits_view(numpy.ascontiguousarray(array))
    numpy.save(path, array)


def load_npy(path, dtype=None):
    """numpy.load, and with dtype="bfloat16" (or "float8_e4m3fn", "float8_e5m2", or the ml_dtypes
    type itself) the file's bits ('<u2', '|u1': what tilec's CLI writes for such outputs, or a
    '<V2' from numpy.save of an ml_dtypes array) as an array of that ml_dtypes type."""
    import numpy
    array = numpy.load(path)
    if dtype is None:
        return array
    from . import ArgumentError
    name = dtype if isinstance(dtype, str) else numpy.dtype(dtype).name
    if name not in ML_DTYPES:
        raise ArgumentError(f"{path}: dtype={dtype!r}: load_npy reads bfloat16, float8_e4m3fn or float8_e5m2 bits; "
                            "numpy.load reads the rest")
    code = ML_DTYPES[name]
    if array.dtype.itemsize != ITEM_BYTES[code] or array.dtype.kind not in "uiV":
        raise ArgumentError(f"{path}: holds {array.dtype.str} elements, not the {ITEM_BYTES[code]}-byte bits of {name}")
    return array.view(ml_dtype(code, f"load_npy({path!r}, dtype={name!r})"))
