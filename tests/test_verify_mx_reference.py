"""The MX references themselves (bpsa.verify.mx_reference): the rational fp32 rounding
against numpy's float64 -> float32 cast (one correct rounding), and the test blocks cover the
cases they are meant to."""

from fractions import Fraction

import numpy as np

from bpsa.verify.mx_reference import _fp32_round, conversion_blocks


def test_fp32_round_equals_numpy_cast():
    rng = np.random.default_rng(21)
    # normal float32 results (the flush band is tested below): numpy rounds once, to nearest
    # even, as the contract does there
    x = rng.standard_normal(3000) * np.ldexp(1.0, rng.integers(-120, 127, size=3000))
    # exact ties on the float32 grid: 25-bit odd significands
    x[:500] = np.ldexp(rng.integers(1 << 23, 1 << 24, size=500) * 2 + 1.0,
                       rng.integers(-140, 100, size=500)) * rng.choice([-1, 1], size=500)
    with np.errstate(over="ignore"):
        ref = x.astype(np.float32)
    got = np.array([_fp32_round(Fraction(float(v))) for v in x], np.uint32)
    assert np.array_equal(got, ref.view(np.uint32))


def test_fp32_round_flush_and_overflow():
    assert _fp32_round(Fraction(2) ** -127) == 0
    assert _fp32_round(-Fraction(2) ** -127) == 0x80000000
    assert _fp32_round(Fraction(2) ** -126) == 0x00800000
    assert _fp32_round(Fraction(2) ** 128) == 0x7F800000
    assert _fp32_round(-(Fraction(2) ** 128 - Fraction(2) ** 103)) == 0xFF800000   # rounds up
    assert _fp32_round(Fraction(0)) == 0


def test_conversion_blocks_cover_the_cases():
    x = conversion_blocks(np.random.default_rng(22), 600)
    assert x.dtype == np.float32 and x.shape == (600, 32) and np.isfinite(x).all()
    assert (~x.any(axis=1)).sum() > 20                         # all-zero blocks
    assert ((x != 0).sum(axis=1) == 1).sum() > 20              # one non-zero element
    tiny = (np.abs(x) < np.float32(2.0 ** -126)) & (x != 0)
    assert tiny.any()                                         # float32 subnormals
    assert (np.signbit(x) & (x == 0)).any()                    # negative zeros
    assert (np.abs(x) > 1e37).any()                            # near float32's largest
