"""Golden model of the floating-point arithmetic (``docs/architecture/floating_point.md``): numbers
as
encodings (``uint16`` / ``uint32`` arrays), arithmetic in Python integers.

Every value is decoded into a sign, an integer significand and a power of two, summed
exactly, and rounded once, to nearest even, by :func:`round_to`. No floating-point arithmetic
is used here; :func:`mac_fast` (float64 arithmetic rounded once) is the quick path for whole
layers, equal to :func:`mac` wherever the tests compare them (random and corner-case
operands, every format).

The contract in short (the document has the reasons):

- operands ``bf16`` / ``fp16`` / ``fp32``, accumulators ``fp32``;
- an operand whose encoding is zero or subnormal is zero, and a multiply-accumulate with a
  zero operand is skipped: the accumulator keeps its encoding, whatever the other operand is
  (``0 x inf`` and ``0 x NaN`` add nothing, as in the zero-gated and zero-free hardware);
- otherwise the exact product is added to the accumulator and the exact sum rounded once:
  RNE to the format's significand with an unbounded exponent; a rounded magnitude below the
  smallest normal becomes a zero of the sum's sign, one above the largest finite an infinity;
  an exact zero sum is ``+0``;
- NaN operands, ``inf - inf``: the canonical NaN (:attr:`FloatFormat.nan`);
- conversions (the driver's rounding of float32 inputs, the store's rounding of fp32 sums to
  the operand format) round the same way (:func:`convert`).
"""

import numpy as np

from bpsa.spec.numeric import FLOAT_FORMATS, float_format

__all__ = ["ZERO", "NORMAL", "INF", "NAN", "PARTIALS", "add", "add_fast", "convert", "decode",
           "dot", "from_float32", "gemm_os", "mac", "mac_fast", "os_output", "os_partials", "reduce_partials",
           "reduce_partials_fast", "relu", "round_to", "storage_dtype", "store", "store_fast",
           "convert_fast", "to_float32",
           "float_format"]

ZERO, NORMAL, INF, NAN = "zero", "normal", "inf", "nan"


def storage_dtype(fmt):
    """The unsigned numpy dtype holding ``fmt``'s encodings."""
    return np.uint16 if float_format(fmt).bits == 16 else np.uint32


def decode(bits, fmt, *, subnormals=False):
    """``(kind, sign, significand, exponent)`` of one encoding: the value is ``(-1)**sign *
    significand * 2**exponent`` for ``NORMAL``; subnormal encodings are ``ZERO`` (operands)
    unless ``subnormals`` (the exact value, for conversions from float32)."""
    f = float_format(fmt)
    bits = int(bits)
    sign = bits >> (f.bits - 1)
    e = (bits >> f.man_bits) & ((1 << f.exp_bits) - 1)
    frac = bits & ((1 << f.man_bits) - 1)
    if e == (1 << f.exp_bits) - 1:
        return (NAN if frac else INF), sign, 0, 0
    if e == 0:
        if frac == 0 or not subnormals:
            return ZERO, sign, 0, 0
        return NORMAL, sign, frac, f.emin - f.man_bits
    return NORMAL, sign, frac | (1 << f.man_bits), e - f.bias - f.man_bits


def _pack(f, sign, e_field, frac):
    return (sign << (f.bits - 1)) | (e_field << f.man_bits) | frac


def round_to(sign, significand, exponent, fmt):
    """The encoding of ``(-1)**sign * significand * 2**exponent`` (``significand`` a
    non-negative Python int) in ``fmt``: rounded to nearest even at ``man_bits + 1``
    significant bits with an unbounded exponent, then a magnitude below ``2**emin`` is a zero
    of ``sign`` and one above the largest finite number an infinity of ``sign``."""
    f = float_format(fmt)
    p = f.man_bits + 1
    if significand == 0:
        return _pack(f, sign, 0, 0)
    r = significand.bit_length() - p
    if r > 0:
        q, rem, half = significand >> r, significand & ((1 << r) - 1), 1 << (r - 1)
        if rem > half or (rem == half and q & 1):
            q += 1
            if q >> p:
                q >>= 1
                r += 1
    else:
        q = significand << -r
    e = exponent + r + p - 1             # q * 2**(exponent + r), q in [2**(p-1), 2**p)
    if e < f.emin:
        return _pack(f, sign, 0, 0)
    if e > f.emax:
        return _pack(f, sign, (1 << f.exp_bits) - 1, 0)
    return _pack(f, sign, e + f.bias, q - (1 << (p - 1)))


def convert(bits, src, dst, *, subnormals=True):
    """One encoding of ``src`` rounded to ``dst`` (:func:`round_to`; ``src`` subnormals read
    exactly, or as a zero of their sign without ``subnormals``; NaN to ``dst``'s canonical
    NaN)."""
    s, d = float_format(src), float_format(dst)
    kind, sign, m, e = decode(bits, s, subnormals=subnormals)
    if kind == NAN:
        return d.nan
    if kind == INF:
        return _pack(d, sign, (1 << d.exp_bits) - 1, 0)
    return round_to(sign, m, e, d)


def mac(acc, a, b, fmt):
    """One multiply-accumulate of the contract: the fp32 encoding ``acc`` plus the product of
    the ``fmt`` encodings ``a`` and ``b``, rounded once; skipped (``acc`` returned) when ``a``
    or ``b`` is zero or subnormal."""
    f, f32 = float_format(fmt), FLOAT_FORMATS["fp32"]
    ka, sa, ma, ea = decode(a, f)
    kb, sb, mb, eb = decode(b, f)
    if ZERO in (ka, kb):
        return int(acc)
    kc, sc, mc, ec = decode(acc, f32)
    sp = sa ^ sb
    if NAN in (ka, kb, kc):
        return f32.nan
    if INF in (ka, kb):
        if kc == INF and sc != sp:
            return f32.nan
        return _pack(f32, sp, (1 << f32.exp_bits) - 1, 0)
    if kc == INF:
        return int(acc)
    mp, ep = ma * mb, ea + eb
    if kc == ZERO:
        return round_to(sp, mp, ep, f32)
    e0 = min(ec, ep)
    total = (-1) ** sc * (mc << (ec - e0)) + (-1) ** sp * (mp << (ep - e0))
    if total == 0:
        return 0
    return round_to(int(total < 0), abs(total), e0, f32)


def dot(acc, a, b, fmt):
    """``acc`` (fp32 encoding) folded with the products of the sequences ``a`` and ``b``, in
    their order: one :func:`mac` each."""
    for x, y in zip(a, b):
        acc = mac(acc, x, y, fmt)
    return acc


#: Partial sums of an output-stationary PE: the product of a context's slot ``k`` is added to
#: partial ``k mod PARTIALS`` (the PE reads a partial a cycle before its five-stage fp32 adder).
PARTIALS = 6

#: fp32 one: ``mac(x, y, ONE, "fp32")`` is ``x + y`` under the contract.
_ONE32 = 0x3F800000


def add(x, y):
    """``x + y`` of two fp32 encodings under the contract: the sum rounded once; a zero or
    subnormal ``y`` leaves ``x`` unchanged (as a skipped product does)."""
    return mac(x, y, _ONE32, "fp32")


def reduce_partials(p):
    """The sum of an output's six partials, in the contract's order
    ``((p0 + p1) + (p2 + p3)) + (p4 + p5)``."""
    if len(p) != PARTIALS:
        raise ValueError(f"an output has {PARTIALS} partials, not {len(p)}")
    return add(add(add(p[0], p[1]), add(p[2], p[3])), add(p[4], p[5]))


def os_partials(a, b, fmt, start=None):
    """The six partials of one output of an output-stationary context: the products of the
    sequences ``a`` and ``b`` (``fmt`` encodings, slot order), slot ``k`` folded into partial
    ``k mod 6`` by :func:`mac`, each partial starting from ``start[k]`` (default ``+0``)."""
    p = [int(x) for x in start] if start is not None else [0] * PARTIALS
    for k, (x, y) in enumerate(zip(a, b)):
        p[k % PARTIALS] = mac(p[k % PARTIALS], x, y, fmt)
    return p


def os_output(a, b, fmt, start=None):
    """One output of an output-stationary context: :func:`os_partials`, then
    :func:`reduce_partials`."""
    return reduce_partials(os_partials(a, b, fmt, start))


def store(bits, fmt):
    """A store's rounding of an fp32 sum to ``fmt`` (the requantization of floating point):
    :func:`convert`, the sum read as an accumulator (a subnormal encoding is a zero of its
    sign, rule 5; the adders never make one)."""
    return convert(bits, "fp32", fmt, subnormals=False)


def relu(bits, fmt):
    """ReLU of one encoding: a negative number or ``-0`` is ``+0``; a NaN stays the canonical
    NaN."""
    f = float_format(fmt)
    kind, sign, _, _ = decode(bits, f, subnormals=True)
    if kind == NAN:
        return f.nan
    return 0 if sign else int(bits)


# --- arrays ---------------------------------------------------------------------------------

def from_float32(x, fmt):
    """A float32 array (float64 is cast to float32 first) as ``fmt`` encodings
    (:func:`convert`, float32 subnormals read exactly)."""
    x32 = np.ascontiguousarray(np.asarray(x, dtype=np.float32))
    return convert_fast(x32.view(np.uint32), fmt, subnormals=True)


def store_fast(bits, fmt):
    """:func:`store` on an array of fp32 encodings."""
    return convert_fast(bits, fmt, subnormals=False)


def convert_fast(bits, fmt, *, subnormals):
    """:func:`convert` from fp32 on an array of encodings, in numpy integers: the significand
    rounded to nearest even at ``fmt``'s precision, the exponent checked after the rounding
    (flush below the smallest normal, infinity above the largest finite); fp32 subnormals, with
    ``subnormals``, through :func:`convert` one by one (they are rare)."""
    f = float_format(fmt)
    u = np.asarray(bits, dtype=np.uint32).astype(np.int64)
    sign = (u >> 31) & 1
    e_field = (u >> 23) & 0xFF
    frac = u & 0x7FFFFF
    sig = frac | (1 << 23)
    drop = 23 - f.man_bits
    if drop:
        keep = sig >> drop
        guard = (sig >> (drop - 1)) & 1
        sticky = (sig & ((1 << (drop - 1)) - 1)) != 0
        keep = keep + (guard & (sticky | (keep & 1)))
    else:
        keep = sig
    carry = keep >> (f.man_bits + 1)
    keep = np.where(carry == 1, keep >> 1, keep)
    e = e_field - 127 + carry
    out = (sign << (f.bits - 1)) | ((e + f.bias) << f.man_bits) | (keep & ((1 << f.man_bits) - 1))
    zero = sign << (f.bits - 1)
    inf = zero | f.inf
    out = np.where(e < f.emin, zero, out)
    out = np.where(e > f.emax, inf, out)
    out = np.where(e_field == 0, zero, out)
    out = np.where((e_field == 0xFF) & (frac == 0), inf, out)
    out = np.where((e_field == 0xFF) & (frac != 0), f.nan, out)
    out = out.astype(storage_dtype(f))
    if subnormals:
        sub = (e_field == 0) & (frac != 0)
        if sub.any():
            out[sub] = [convert(int(v), "fp32", f) for v in np.asarray(bits).ravel()[
                sub.ravel()]] if out.ndim else convert(int(bits), "fp32", f)
    return out


def to_float32(bits, fmt):
    """``fmt`` encodings as float32 values (:func:`convert` to fp32: exact, every format here
    fits float32; fp32 subnormals flush, NaNs are the canonical NaN)."""
    f = float_format(fmt)
    b = np.asarray(bits).astype(np.int64)
    if f.name == "bf16":
        raw = b << 16
    elif f.name == "fp16":
        raw = b.astype(np.uint16).view(np.float16).astype(np.float32).view(np.uint32) \
            .astype(np.int64)
    else:
        raw = b & 0xFFFFFFFF
    # below fp32's smallest normal (bf16 and fp32 subnormals): a zero of the sign
    raw = np.where((raw & 0x7F800000) == 0, raw & 0x80000000, raw)
    e = (b >> f.man_bits) & ((1 << f.exp_bits) - 1)
    nan = (e == (1 << f.exp_bits) - 1) & ((b & ((1 << f.man_bits) - 1)) != 0)
    raw = np.where(nan, FLOAT_FORMATS["fp32"].nan, raw)
    return raw.astype(np.uint32).view(np.float32).reshape(b.shape)


def mac_fast(acc, a, b, fmt):
    """:func:`mac` on arrays (broadcast), in float64 arithmetic: the product of two operands
    of at most 24 significant bits is exact in float64, and the float64 sum of it and an fp32
    accumulator rounded to float32 is the sum rounded once (float64 has more than ``2 p + 2``
    bits for ``p = 24``), so only the flush, the skip and the NaN rules are added here."""
    f = float_format(fmt)
    a_bits, b_bits = np.asarray(a), np.asarray(b)
    with np.errstate(over="ignore", invalid="ignore"):
        prod = _operand_values(a_bits, f) * _operand_values(b_bits, f)
    return _mac_values(acc, prod, _is_zero(a_bits, f) | _is_zero(b_bits, f))


def _mac_values(acc, prod, skip):
    """:func:`mac_fast` from the float64 products ``prod`` (exact) and the ``skip`` mask."""
    acc = np.asarray(acc, dtype=np.uint32)
    with np.errstate(over="ignore", invalid="ignore"):
        cv = acc.view(np.float32).astype(np.float64)
        cv = np.where((acc & 0x7F800000) == 0, 0.0, cv)    # a subnormal accumulator reads 0
        s64 = cv + prod
        s32 = s64.astype(np.float32)
    out = s32.view(np.uint32).copy()
    # a rounded result below the smallest normal: a zero of the sum's sign; the unbounded-
    # exponent rounding can also round up to 2**-126 from below where the float32 cast gave
    # a subnormal, and down where it gave 2**-126
    tiny = 2.0 ** -126
    near = np.abs(s64) < tiny
    if near.any():
        r = _round24(np.abs(s64[near]))
        keep = r >= tiny
        fixed = np.where(keep, np.float32(tiny), np.float32(0)).view(np.uint32)
        out[near] = fixed | (np.signbit(s64[near]).astype(np.uint32) << 31)
    out = np.where(s64 == 0, np.uint32(0), out)
    out = np.where(np.isnan(s64), np.uint32(FLOAT_FORMATS["fp32"].nan), out)
    return np.where(skip, acc, out).astype(np.uint32)


def add_fast(x, y):
    """:func:`add` on arrays (:func:`mac_fast` with an fp32 one)."""
    return mac_fast(x, y, np.uint32(_ONE32), "fp32")


def reduce_partials_fast(p):
    """:func:`reduce_partials` on arrays: ``p`` has the six partials on its first axis."""
    return add_fast(add_fast(add_fast(p[0], p[1]), add_fast(p[2], p[3])),
                    add_fast(p[4], p[5]))


def gemm_os(a, b, fmt, *, fast=True):
    """``a @ b`` (``fmt`` encodings, M x K and K x N, or stacks of them: ``... x M x K`` and
    ``... x K x N``) as the output-stationary floating-point array computes it: every output
    one context over ``k = 0 .. K-1`` in order (:func:`os_output`). ``fast``: the float64
    path (:func:`mac_fast`'s arithmetic), else the integer model, one output at a time."""
    a, b = np.asarray(a), np.asarray(b)
    M, K = a.shape[-2:]
    N = b.shape[-1]
    if not fast:
        if a.ndim != 2:
            return np.stack([gemm_os(x, y, fmt, fast=False) for x, y in zip(a, b)])
        out = np.zeros((M, N), dtype=np.uint32)
        for i in range(M):
            for j in range(N):
                out[i, j] = os_output(a[i], b[:, j], fmt)
        return out
    f = float_format(fmt)
    with np.errstate(over="ignore", invalid="ignore"):
        av, bv = _operand_values(a, f), _operand_values(b, f)
    za, zb = _is_zero(a, f), _is_zero(b, f)
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    p = np.zeros((PARTIALS, *batch, M, N), dtype=np.uint32)
    with np.errstate(over="ignore", invalid="ignore"):
        for k in range(K):
            prod = av[..., :, k, None] * bv[..., None, k, :]
            skip = za[..., :, k, None] | zb[..., None, k, :]
            p[k % PARTIALS] = _mac_values(p[k % PARTIALS], prod, skip)
    return reduce_partials_fast(p)


def _round24(x):
    """Positive float64 values below ``2**-126`` rounded to 24 significant bits (RNE), in
    float64 (exact: float64 has the range)."""
    m, e = np.frexp(x)                  # x = m * 2**e, m in [0.5, 1)
    return np.ldexp(np.rint(np.ldexp(m, 24)), e - 24)


def _is_zero(bits, f):
    return ((bits.astype(np.uint32) >> f.man_bits) & ((1 << f.exp_bits) - 1)) == 0


def _operand_values(bits, f):
    """float64 values of operand encodings, zero and subnormal encodings as zero, NaN and
    infinity kept."""
    b = bits.astype(np.uint64)
    sign = (b >> (f.bits - 1)) & 1
    e = ((b >> f.man_bits) & ((1 << f.exp_bits) - 1)).astype(np.int64)
    frac = (b & ((1 << f.man_bits) - 1)).astype(np.float64)
    special = e == (1 << f.exp_bits) - 1
    with np.errstate(over="ignore"):
        mag = np.ldexp(1.0 + frac / (1 << f.man_bits), e - f.bias)
    mag = np.where(special, np.where(frac == 0, np.inf, np.nan), mag)
    mag = np.where(e == 0, 0.0, mag)
    return np.where(sign == 1, -mag, mag)
