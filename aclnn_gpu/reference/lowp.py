"""Fast float16 <-> float32 conversions for the NumPy reference paths (the `cpu` device).

NumPy's float16 casts run a scalar loop (about 1.4 ns/element for float16 -> float32 and 1.7 for
float32 -> float16 on a Zen core, against ~0.1 ns for a float32 ufunc pass), which dominated the
half-precision backward operators. These helpers give the same bits as NumPy's `astype`:

- f16 -> f32: a 65536-entry float32 table indexed by the uint16 bits (`np.take`, a gather over a
  256 KiB table that stays in L2): exact by construction (every half value, NaN payloads included).
- f32 -> f16, round to nearest even: a handful of SIMD ufunc passes on the float32 / uint32 views.
  |x| is clamped to 65536 (so overflow and inf give inf), rounded to the half grid of its binade
  with the float adder ((a + c) - c, c = 2^(max(E, -14) + 13): the sum's ulp is the half ulp, the
  FPU rounds to nearest even; the clamp at 2^-14 gives the subnormal grid 2^-24), then scaled by
  2^-112 so that the float32 bits shifted right by 13 are the half's exponent and mantissa
  (half subnormals become float32 subnormals whose bits are exactly m << 13). The sign is or-ed
  back; NaNs (rare) are patched with NumPy's own cast, so payloads match too.
  Checked bit for bit against `astype(np.float16)` over all 2^32 float32 bit patterns.

bfloat16 needs nothing here: ml_dtypes' casts to and from float32 are already vectorised.
Work on cache-sized chunks: the functions take scratch buffers to avoid allocating temporaries.
"""
from __future__ import annotations

import numpy as np

_F32 = np.float32
_U32 = np.uint32
_U16 = np.uint16

_LUT = None


def _lut() -> np.ndarray:
    global _LUT
    if _LUT is None:
        _LUT = np.arange(65536, dtype=np.uint32).astype(_U16).view(np.float16).astype(_F32)
    return _LUT


def f16_to_f32(src: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """float16 array -> float32 (same shape), bit-identical to `src.astype(np.float32)`.
    `out`: a float32 array of src's shape to write into."""
    src = np.asarray(src)
    if out is None:
        out = np.empty(src.shape, _F32)
    bits = src.view(_U16)
    if out.flags.c_contiguous:
        np.take(_lut(), bits, out=out, mode="clip")
    else:
        np.copyto(out, np.take(_lut(), bits, mode="clip"))
    return out


_TWO_M14 = _F32(2.0 ** -14)
_TWO_13 = _F32(2.0 ** 13)
_TWO_M112 = _F32(2.0 ** -112)
_CLAMP = _F32(65536.0)


def f32_to_f16_bits(x: np.ndarray, out_bits: np.ndarray, scratch_a: np.ndarray | None = None,
                    scratch_c: np.ndarray | None = None) -> np.ndarray:
    """Round float32 `x` to float16 (nearest even, NumPy's rules, NaN payloads included) and write
    the half bits into the uint16 array `out_bits` (x's shape, any strides). `scratch_a` /
    `scratch_c`: optional C-contiguous float32 arrays of x.size elements (or more) to reuse."""
    x = np.asarray(x, dtype=_F32)
    n = x.size
    shape = x.shape
    a = np.empty(shape, _F32) if scratch_a is None else scratch_a.reshape(-1)[:n].reshape(shape)
    c = np.empty(shape, _F32) if scratch_c is None else scratch_c.reshape(-1)[:n].reshape(shape)
    xu, au, cu = x.view(_U32), a.view(_U32), c.view(_U32)
    np.bitwise_and(xu, _U32(0x7FFFFFFF), out=au)          # |x|
    np.minimum(a, _CLAMP, out=a)                          # overflow / inf -> 65536 -> inf; NaN stays
    np.bitwise_and(au, _U32(0x7F800000), out=cu)          # 2^E (0 for float32 subnormals)
    np.maximum(c, _TWO_M14, out=c)
    c *= _TWO_13                                          # ulp(a + c) == half ulp of a
    with np.errstate(invalid="ignore"):                   # signalling NaNs: patched below
        a += c                                            # the FPU rounds to nearest even here
        a -= c                                            # exact
    a *= _TWO_M112                                        # exact: half subnormals -> f32 subnormals
    np.right_shift(au, _U32(13), out=out_bits, casting="unsafe")
    nan = bool(out_bits.max(initial=0) > 0x7C00) if n else False   # NaN only can exceed inf's bits
    s = c.reshape(-1).view(_U16)[:n].reshape(shape)       # c is free now: the sign bits
    np.right_shift(xu, _U32(16), out=s, casting="unsafe")
    np.bitwise_and(s, _U16(0x8000), out=s)
    np.bitwise_or(out_bits, s, out=out_bits)
    if nan:
        where = np.isnan(x)
        out_bits[where] = x[where].astype(np.float16).view(_U16)
    return out_bits


def f32_to_f16(x: np.ndarray, out: np.ndarray | None = None, scratch_a: np.ndarray | None = None,
               scratch_c: np.ndarray | None = None) -> np.ndarray:
    """float32 -> float16, bit-identical to `x.astype(np.float16)`; writes into `out` if given."""
    x = np.asarray(x, dtype=_F32)
    if out is None:
        out = np.empty(x.shape, np.float16)
    f32_to_f16_bits(x, out.view(_U16), scratch_a, scratch_c)
    return out


def to_f32(src: np.ndarray, out: np.ndarray) -> np.ndarray:
    """Any float array -> the float32 array `out` (same shape), exactly like a NumPy cast; float16
    through the table."""
    if src.dtype == np.float16:
        return f16_to_f32(src, out)
    np.copyto(out, src, casting="unsafe")
    return out


def from_f32(src: np.ndarray, out: np.ndarray, scratch_a: np.ndarray | None = None,
             scratch_c: np.ndarray | None = None) -> np.ndarray:
    """float32 `src` -> `out` of any float dtype, rounded like NumPy's cast (nearest even)."""
    if out.dtype == np.float16:
        f32_to_f16_bits(src, out.view(_U16), scratch_a, scratch_c)
    else:
        np.copyto(out, src, casting="unsafe")
    return out


__all__ = ["f16_to_f32", "f32_to_f16", "f32_to_f16_bits", "to_f32", "from_f32"]
