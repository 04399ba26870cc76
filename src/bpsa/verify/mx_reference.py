"""Independent references for the MX contract (``docs/architecture/mx.md``), sharing no code
with :mod:`bpsa.models.mx`: Graphcore's ``gfloat`` for the conversion, ``ml_dtypes`` for the
element and scale decodings, and exact rationals for the block dot product. Used by the tests
and by ``make mx-check`` (:mod:`bpsa.verify.mx_check`)."""

from fractions import Fraction

import numpy as np

__all__ = ["gfloat_quantize", "mldtypes_dequantize", "rational_matmul", "conversion_blocks"]

_GFLOAT = {"mxint8": "format_info_ocp_int8", "mxfp8_e4m3": "format_info_ocp_e4m3",
           "mxfp8_e5m2": "format_info_ocp_e5m2"}
_MLD = {"mxfp8_e4m3": "float8_e4m3fn", "mxfp8_e5m2": "float8_e5m2"}


def gfloat_quantize(blocks, name):
    """``(codes, scale_codes)`` of finite ``float32`` blocks (``(n, 32)``) by gfloat: the
    scale from ``compute_scale_amax`` (OCP 6.3's floor rule, clamped, ``2**-127`` for a zero
    block), each element divided by it, rounded to nearest even with saturation
    (``round_ndarray(..., sat=True)``) and encoded. ``mxint8``: the scaled values are first
    clipped to +-127/64 (the contract's symmetric range; gfloat's INT8 also holds -2)."""
    from gfloat import encode_ndarray, round_ndarray
    from gfloat import formats
    from gfloat.block import compute_scale_amax
    fi = getattr(formats, _GFLOAT[name])
    codes = np.empty(blocks.shape, np.int64)
    scales = np.empty(len(blocks), np.int64)
    for i, b in enumerate(np.asarray(blocks, np.float32).astype(np.float64)):
        scale = compute_scale_amax(fi.emax, b)
        v = b / scale
        if name == "mxint8":
            v = np.clip(v, -127 / 64, 127 / 64)
        codes[i] = encode_ndarray(fi, round_ndarray(fi, v, sat=True))
        scales[i] = round(np.log2(scale)) + 127
    return codes, scales


def mldtypes_dequantize(codes, scales, name):
    """Values of ``(n, 32)`` element codes with their ``n`` E8M0 scale codes, decoded by
    ml_dtypes (``float8_e4m3fn`` / ``float8_e5m2`` / ``float8_e8m0fnu``; ``int8`` by numpy),
    as float64."""
    import ml_dtypes
    codes = np.asarray(codes, np.uint8)
    if name == "mxint8":
        elem = codes.view(np.int8).astype(np.float64) / 64
    else:
        elem = codes.view(getattr(ml_dtypes, _MLD[name])).astype(np.float64)
    scale = np.asarray(scales, np.uint8).view(ml_dtypes.float8_e8m0fnu).astype(np.float64)
    return elem * scale[:, None]


def _fp32_round(q):
    """The contract's rounding of the exact rational ``q`` to an fp32 encoding: nearest even
    at 24 bits with an unbounded exponent, below 2**-126 a zero of ``q``'s sign, above the
    largest finite an infinity."""
    if q == 0:
        return 0
    sign = 1 if q < 0 else 0
    a = abs(q)
    e = a.numerator.bit_length() - a.denominator.bit_length()
    if Fraction(2) ** e > a:
        e -= 1
    elif Fraction(2) ** (e + 1) <= a:
        e += 1
    m = round(a / Fraction(2) ** (e - 23))       # round half to even
    if m == 1 << 24:
        m, e = 1 << 23, e + 1
    if e < -126:
        return sign << 31
    if e > 127:
        return (sign << 31) | 0x7F800000
    return (sign << 31) | ((e + 127) << 23) | (m - (1 << 23))


def _fp32_value(bits):
    exp, frac = (bits >> 23) & 0xFF, bits & 0x7FFFFF
    if exp == 0:
        return Fraction(0)
    v = Fraction(frac | (1 << 23)) * Fraction(2) ** (exp - 150)
    return -v if bits >> 31 else v


def rational_matmul(a, b, block=32):
    """The contract's block dot product from decoded values: ``a`` (``M x K``) and ``b``
    (``K x N``) as float64 arrays of finite MX values (:func:`mldtypes_dequantize`), each
    block of ``block`` along K summed exactly as rationals and added into an fp32 accumulator
    (from +0) with one :func:`_fp32_round` per block whose sum is not zero. Returns fp32
    encodings (``uint32``). Finite, NaN-free operands only."""
    m, k = a.shape
    n = b.shape[1]
    out = np.zeros((m, n), np.uint32)
    fa = [[Fraction(float(v)) for v in row] for row in a]
    fb = [[Fraction(float(v)) for v in row] for row in b]
    for r in range(m):
        for c in range(n):
            acc = 0
            for j0 in range(0, k, block):
                s = sum(fa[r][j] * fb[j][c] for j in range(j0, min(k, j0 + block)))
                if s != 0:
                    exp = (acc >> 23) & 0xFF
                    if exp == 0xFF:
                        continue
                    acc = _fp32_round(_fp32_value(acc) + s)
            out[r, c] = acc
    return out


def conversion_blocks(rng, n):
    """``n`` finite float32 blocks of 32 that exercise the conversion: random encodings
    (subnormals included), normal values spread over 24 binades around a random exponent,
    all-zero blocks, one non-zero element, exact rounding ties on the element grid, values
    just below a power of two (they round up and saturate), mixed signs and negative
    zeros."""
    bits = rng.integers(0, 1 << 32, size=(n, 32), dtype=np.uint64).astype(np.uint32)
    raw = bits.view(np.float32).copy()
    raw[~np.isfinite(raw)] = 0
    top = rng.integers(-150, 128, size=(n, 1))
    spread = np.ldexp(rng.uniform(1, 2, size=(n, 32)), top - rng.integers(0, 24, size=(n, 32)))
    spread = np.where(rng.random((n, 32)) < 0.5, -spread, spread)
    with np.errstate(over="ignore"):
        spread = spread.astype(np.float32)
    spread[~np.isfinite(spread)] = np.float32(3.0e38)
    ties = np.ldexp(rng.integers(-512, 512, size=(n, 32)) + 0.5,
                    rng.integers(-20, 20, size=(n, 1))).astype(np.float32)
    near = (np.ldexp(1.0, rng.integers(-120, 120, size=(n, 1))) *
            (1 - np.ldexp(1.0, -rng.integers(1, 24, size=(n, 32))))).astype(np.float32)
    kind = rng.integers(0, 6, size=(n, 1))
    out = np.select([kind == 0, kind == 1, kind == 2, kind == 3, kind == 4],
                    [raw, spread, ties, near, np.zeros((n, 32), np.float32)], spread)
    one = kind[:, 0] == 5
    out[one] = 0
    out[one, rng.integers(0, 32, size=one.sum())] = spread[one, 0]
    neg0 = rng.random((n, 32)) < 0.02
    out[neg0] = np.float32(-0.0)
    return out.astype(np.float32)
