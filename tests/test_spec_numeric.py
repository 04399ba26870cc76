"""Element sizes, operand ranges and wrap-around at the hardware/host boundary."""

import random

import numpy as np
import pytest

from bpsa.config import Config
from bpsa.spec.numeric import element_bytes, operand_range, wrap, wrap_array


def test_element_bytes():
    assert [element_bytes(b) for b in (1, 2, 8, 9, 16, 17, 32, 33, 40, 64)] == \
        [1, 1, 1, 2, 2, 4, 4, 8, 8, 8]
    for bad in (0, 65, 8.0, True):
        with pytest.raises(ValueError, match="element width"):
            element_bytes(bad)


@pytest.mark.parametrize("width,signed,want", [
    (8, True, (-128, 127)), (8, False, (0, 255)), (2, True, (-2, 1)), (16, False, (0, 65535)),
    (32, True, (-2 ** 31, 2 ** 31 - 1)),
])
def test_operand_range(width, signed, want):
    cfg = Config(operand_width=width, operand_signed=signed, acc_width=max(2 * width, 16))
    assert operand_range(cfg) == want


def test_wrap_known_values():
    assert wrap(127, 8) == 127
    assert wrap(128, 8) == -128
    assert wrap(-129, 8) == 127
    assert wrap(256 + 5, 8, signed=False) == 5
    assert wrap(-1, 8, signed=False) == 255
    assert wrap(2 ** 63, 64) == -2 ** 63


@pytest.mark.parametrize("bits,signed", [(8, True), (8, False), (32, True), (48, True),
                                         (64, True), (64, False)])
def test_wrap_array_is_wrap_elementwise(bits, signed):
    """Two's complement by definition: the value modulo 2**bits, shifted into the range."""
    rng = random.Random(bits * 2 + signed)
    values = [rng.randint(-2 ** 70, 2 ** 70) for _ in range(200)] + [0, -1, 2 ** bits - 1]
    got = wrap_array(np.array(values, dtype=object), bits, signed)
    for v, g in zip(values, got):
        m = v % (2 ** bits)
        want = m - 2 ** bits if signed and m >= 2 ** (bits - 1) else m
        assert int(g) == want == wrap(v, bits, signed)
    assert got.dtype == (np.uint64 if bits == 64 and not signed else np.int64)


def test_pool_division_is_exact_up_to_the_window_limit():
    """floor(a / d) = (a m) >> 47 with m = floor(2**47 / d) + 1 for every numerator the
    average pooling can make (below d (2**operand_width + 1.5)) and every divisor 2 R S up to
    the limit: at the extremes, around multiples of d, and at random."""
    import random

    from bpsa.config import Config
    from bpsa.spec.numeric import POOL_RECIP_SHIFT, pool_window_limit
    rng = random.Random(3)
    for bits in (8, 16):
        cfg = Config(operand_width=bits, acc_width=32)
        limit = pool_window_limit(cfg)
        for rs in [1, 2, 3, 4, 9, 49, 3136, limit - 1, limit] + [rng.randint(1, limit)
                                                                for _ in range(40)]:
            d = 2 * rs
            m = (1 << POOL_RECIP_SHIFT) // d + 1
            top = rs * ((1 << (bits + 1)) + 3)
            cands = {0, 1, top - 1} | {k * d + e for k in (1, 2, top // d - 1)
                                       for e in (-1, 0, 1)}
            cands |= {rng.randrange(top) for _ in range(200)}
            for a in cands:
                if 0 <= a < top:
                    assert (a * m) >> POOL_RECIP_SHIFT == a // d, (bits, rs, a)
    # one past the limit the product may exceed 2**47 (so the set-up refuses it)
    cfg = Config(operand_width=16, acc_width=32)
    rs = pool_window_limit(cfg) + 1
    assert rs * ((1 << 17) + 3) * 2 * rs >= 1 << POOL_RECIP_SHIFT
