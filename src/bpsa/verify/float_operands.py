"""Floating-point stimulus for the tests of the golden model and the units: corner-case and
random encodings (``docs/architecture/floating_point.md``)."""

import numpy as np

from bpsa.models import floating as fl
from bpsa.spec.numeric import FLOAT_FORMATS

__all__ = ["corner_operands", "corner_accumulators", "random_operands", "random_accumulators"]

F32 = FLOAT_FORMATS["fp32"]


def _kind(bits, name):
    return fl.decode(bits, name)[0]


def corner_operands(name):
    """Zeros of both signs, a subnormal, the smallest and largest normals, one, values whose
    products overflow or flush, infinities, a quiet and a signalling NaN."""
    f = FLOAT_FORMATS[name]
    top = ((1 << f.exp_bits) - 2) << f.man_bits
    vals = [0, 1, 1 << f.man_bits, (1 << f.man_bits) | 1, f.bias << f.man_bits,
            (f.bias << f.man_bits) | 1, top | ((1 << f.man_bits) - 1), top,
            (f.bias - 1) << f.man_bits, f.inf, f.nan, f.inf | 1]
    return sorted({v | s for v in vals for s in (0, 1 << (f.bits - 1))})


def corner_accumulators():
    """fp32 zeros, a subnormal, the smallest normal and its neighbour, one and its
    neighbour, the largest finite numbers, small powers of two, infinity and NaN, both signs."""
    vals = [0, 1, 0x00800000, 0x00800001, 0x3F800000, 0x3F800001, 0x7F7FFFFF, 0x7F000000,
            0x33800000, F32.inf, F32.nan, 0x0D800000, 0x01000000]
    return sorted({v | s for v in vals for s in (0, 0x80000000)})


def random_operands(rng, name, n):
    """A third uniform encodings, a third with exponents near the bias (sums that cancel), a
    third near the smallest normal (products that flush or round up to it)."""
    f = FLOAT_FORMATS[name]
    frac = rng.integers(0, 1 << f.man_bits, n)
    sign = rng.integers(0, 2, n)
    third = n // 3
    e = np.concatenate([rng.integers(0, 1 << f.exp_bits, third),
                        f.bias + rng.integers(-3, 4, third),
                        rng.integers(1, max(2, f.bias // 2), n - 2 * third)])
    return [int(x) for x in (sign << (f.bits - 1)) | (e << f.man_bits) | frac]


def random_accumulators(rng, a, b, name):
    """fp32 accumulators near minus the product (cancellation), near it, and uniform."""
    out = []
    for x, y in zip(a, b):
        p = fl.mac(0, x, y, name)                 # the product rounded (0 when skipped)
        mode = rng.integers(0, 3)
        if mode == 0 or _kind(p, "fp32") != fl.NORMAL:
            out.append(int(rng.integers(0, 1 << 32)))
        else:
            delta = int(rng.integers(-(1 << 20), 1 << 20))
            out.append(((p ^ (0x80000000 if mode == 1 else 0)) + delta) & 0xFFFFFFFF)
    return out
