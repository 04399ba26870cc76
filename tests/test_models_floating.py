"""The floating-point golden model (bpsa.models.floating) against Berkeley SoftFloat 3e
(softfloatpy) and against its own float64 fast path, on random and corner-case encodings."""

import numpy as np
import pytest
import softfloatpy as sf

from bpsa.models import floating as fl
from bpsa.spec.numeric import FLOAT_FORMATS
from bpsa.verify.float_operands import (corner_accumulators, corner_operands,
                                        random_accumulators, random_operands)

FORMATS = ("bf16", "fp16", "fp32")
F32 = FLOAT_FORMATS["fp32"]


# --- the reference: SoftFloat with the contract's flush and skip rules on top -------------------

def _sf(bits, name):
    f = FLOAT_FORMATS[name]
    raw = int(bits).to_bytes(f.bits // 8, "big")
    return {"bf16": sf.BFloat16, "fp16": sf.Float16, "fp32": sf.Float32}[name].from_bytes(raw)


def _bits(x):
    return int.from_bytes(x.to_bytes(), "big")


def _kind(bits, name):
    f = FLOAT_FORMATS[name]
    e = (int(bits) >> f.man_bits) & ((1 << f.exp_bits) - 1)
    frac = int(bits) & ((1 << f.man_bits) - 1)
    if e == (1 << f.exp_bits) - 1:
        return "nan" if frac else "inf"
    return "zero" if e == 0 else "normal"       # zero or subnormal: zero


def _to_f32(x, name):
    return {"bf16": sf.bf16_to_f32, "fp16": sf.f16_to_f32, "fp32": lambda v: v}[name](x)


def _flushed(result, name):
    """SoftFloat's result (tininess after rounding) under the contract: a NaN is the canonical
    NaN; a subnormal, or a result whose rounding with an unbounded exponent was tiny (the
    underflow flag), is a zero of its sign."""
    f = FLOAT_FORMATS[name]
    r = _bits(result)
    if _kind(r, name) == "nan":
        return f.nan
    sign = r >> (f.bits - 1)
    if (r >> f.man_bits) & ((1 << f.exp_bits) - 1) == 0 \
            or sf.test_exception_flags(sf.ExceptionFlag.UNDERFLOW):
        return sign << (f.bits - 1)
    return r


def reference_mac(acc, a, b, name):
    if "zero" in (_kind(a, name), _kind(b, name)):
        return int(acc)
    if _kind(acc, "fp32") == "zero":              # a subnormal accumulator reads as zero
        acc = int(acc) & 0x80000000
    sf.set_tininess_mode(sf.TininessMode.AFTER_ROUNDING)
    sf.set_exception_flags(0)
    r = sf.f32_mul_add(_to_f32(_sf(a, name), name), _to_f32(_sf(b, name), name), _sf(acc, "fp32"))
    return _flushed(r, "fp32")


def reference_convert(bits32, name):
    sf.set_tininess_mode(sf.TininessMode.AFTER_ROUNDING)
    sf.set_exception_flags(0)
    x = _sf(bits32, "fp32")
    r = {"bf16": sf.f32_to_bf16, "fp16": sf.f32_to_f16, "fp32": lambda v: v}[name](x)
    out = _flushed(r, name)
    if name == "fp32" and _kind(bits32, "fp32") == "zero":     # fp32 -> fp32: subnormals flush
        out = int(bits32) & 0x80000000
    return out


@pytest.mark.parametrize("name", FORMATS)
def test_mac_matches_softfloat_on_corner_cases(name):
    cases = 0
    for acc in corner_accumulators():
        for a in corner_operands(name):
            for b in corner_operands(name):
                assert fl.mac(acc, a, b, name) == reference_mac(acc, a, b, name), \
                    (hex(acc), hex(a), hex(b))
                cases += 1
    assert cases > 1000


@pytest.mark.parametrize("name", FORMATS)
def test_mac_matches_softfloat_on_random_operands(name):
    rng = np.random.default_rng(7)
    a, b = random_operands(rng, name, 6000), random_operands(rng, name, 6000)[::-1]
    accs = random_accumulators(rng, a, b, name)
    flushed = 0
    for acc, x, y in zip(accs, a, b):
        got = fl.mac(acc, x, y, name)
        assert got == reference_mac(acc, x, y, name), (hex(acc), hex(x), hex(y))
        flushed += (got & 0x7FFFFFFF) == 0 and _kind(acc, "fp32") != "zero"
    # the random set reaches the flush boundary (fp16 products, 2**-28 or more, cannot)
    assert flushed > 0 or name == "fp16"


def test_mac_rounds_ties_to_even_and_flushes_at_the_boundary():
    one = 0x3F800000
    # 1 + 2**-24 (bf16 operands 2**-12 * 2**-12) is a tie: stays 1 (even); 1 + 3 * 2**-24
    # rounds up to 1 + 2**-22 (its neighbours 1 + 2**-23 odd and 1 + 2**-22 even)
    b12 = (127 - 12) << 7
    assert fl.mac(one, b12, b12, "bf16") == one
    b3 = ((127 - 12) << 7) | (1 << 6)                          # 1.5 * 2**-12
    assert fl.mac(0x3F800001, b3, b12, "bf16") == 0x3F800002   # 1 + 2**-23 + 1.5 * 2**-24
    # the product 2**-127 alone rounds to itself: below 2**-126, a zero of its sign
    half_min = (127 - 63) << 7                                  # 2**-63
    assert fl.mac(0, half_min, (127 - 64) << 7, "bf16") == 0
    assert fl.mac(0, half_min | 0x8000, (127 - 64) << 7, "bf16") == 0x80000000
    # around the smallest normal 2**-126 (fp32 operands, accumulator 2**-126 + 2**-149):
    # minus 1.125 * 2**-149 leaves 2**-126 - 2**-152, which rounds up to 2**-126 and stays;
    # minus 1.5 * 2**-149 leaves 2**-126 - 2**-150, exact at 24 bits and below 2**-126:
    # flushed (IEEE's subnormal rounding would give 2**-126 here: a tie, the even neighbour)
    b74 = (127 - 74) << 23
    a1125 = 0x80000000 | (127 - 75) << 23 | 1 << 20
    a15 = 0x80000000 | (127 - 75) << 23 | 1 << 22
    assert fl.mac(0x00800001, a1125, b74, "fp32") == 0x00800000
    assert fl.mac(0x00800001, a15, b74, "fp32") == 0
    # x + (-x) is +0
    assert fl.mac(0xBF800000, one >> 16, one >> 16, "bf16") == 0


def test_zero_operands_are_skipped_whatever_the_other_is():
    for name in FORMATS:
        f = FLOAT_FORMATS[name]
        for acc in (0x80000000, 0x3F800000, F32.inf):
            for other in (f.inf, f.nan, f.inf | (1 << (f.bits - 1))):
                assert fl.mac(acc, 0, other, name) == acc
                assert fl.mac(acc, other, 1, name) == acc       # a subnormal is zero


@pytest.mark.parametrize("name", ("bf16", "fp16"))
def test_convert_matches_softfloat(name):
    rng = np.random.default_rng(3)
    vals = [int(v) for v in rng.integers(0, 1 << 32, 20000, dtype=np.uint64)]
    f = FLOAT_FORMATS[name]
    # around the target's smallest normal and largest finite number, and ties
    for e in (f.emin - 1, f.emin, f.emax):
        for frac in range(0, 1 << 23, 1 << 23 - 9):
            vals += [((e + 127) << 23) | frac | s for s in (0, 0x80000000)]
    vals += [((f.emin + 126) << 23) | 0x7FFFFF, 0x7F800000, 0x7FC00001, 0xFF800000, 1]
    for v in vals:
        assert fl.convert(v, "fp32", name) == reference_convert(v, name), hex(v)


def test_convert_to_fp32_flushes_subnormals():
    for v in (1, 0x007FFFFF, 0x80000001):
        assert fl.convert(v, "fp32", "fp32") == v & 0x80000000
    assert fl.convert(0x3F800001, "fp32", "fp32") == 0x3F800001


@pytest.mark.parametrize("name", FORMATS)
def test_fast_path_equals_the_integer_model(name):
    rng = np.random.default_rng(11)
    a = random_operands(rng, name, 20000) + corner_operands(name) * 2
    b = random_operands(rng, name, 20000)[::-1] + corner_operands(name)[::-1] * 2
    accs = random_accumulators(rng, a, b, name)
    dt = fl.storage_dtype(name)
    got = fl.mac_fast(np.array(accs, np.uint32), np.array(a, dt), np.array(b, dt), name)
    want = [fl.mac(c, x, y, name) for c, x, y in zip(accs, a, b)]
    bad = [(hex(c), hex(x), hex(y)) for c, x, y, g, w in zip(accs, a, b, got, want) if g != w]
    assert not bad, bad[:5]


def test_dot_folds_in_order():
    # 2**24 + 1 - 2**24: in this order the 1 is lost to rounding; the other order keeps it
    big, one = (127 + 12) << 7, 127 << 7                        # 2**12, 1 (bf16)
    neg = big | 0x8000
    assert fl.dot(0, [big, one, neg], [big, one, big], "bf16") == 0
    assert fl.dot(0, [big, neg, one], [big, big, one], "bf16") == 0x3F800000


def test_relu_and_float32_round_trips():
    assert fl.relu(0x8000, "bf16") == 0 and fl.relu(0x3F80, "bf16") == 0x3F80
    assert fl.relu(0xFFC1, "bf16") == FLOAT_FORMATS["bf16"].nan
    x = np.array([1.0, -2.5, 3e38, 1e-40, np.inf, -0.0, 65504.0, 7e4], np.float32)
    bf = fl.from_float32(x, "bf16")
    assert bf.dtype == np.uint16 and bf.shape == x.shape
    back = fl.to_float32(bf, "bf16")
    assert back[0] == 1.0 and back[1] == -2.5 and back[3] == 0 and np.isinf(back[4])
    h = fl.to_float32(fl.from_float32(x, "fp16"), "fp16")
    assert h[6] == 65504.0 and np.isinf(h[7]) and np.isinf(h[2])
    assert np.signbit(h[5]) and h[5] == 0


def test_unknown_format_is_refused():
    with pytest.raises(ValueError, match="floating-point format must be one of"):
        fl.mac(0, 0, 0, "fp8")


# --- the output-stationary order: five partials, reduced ((p0 + p1) + (p2 + p3)) + p4 --------

def reference_add(x, y):
    """fp32 ``x + y`` by SoftFloat (``f32_add``) with the contract's rules: a zero or
    subnormal ``y`` leaves ``x``; a subnormal ``x`` reads as zero."""
    if _kind(y, "fp32") == "zero":
        return int(x)
    if _kind(x, "fp32") == "zero":
        x = int(x) & 0x80000000
    sf.set_tininess_mode(sf.TininessMode.AFTER_ROUNDING)
    sf.set_exception_flags(0)
    return _flushed(sf.f32_add(_sf(x, "fp32"), _sf(y, "fp32")), "fp32")


def test_add_matches_softfloat():
    rng = np.random.default_rng(12)
    xs = corner_accumulators() + [int(v) for v in rng.integers(0, 1 << 32, 3000)]
    ys = corner_accumulators()[::-1] + [int(v) for v in rng.integers(0, 1 << 32, 3000)]
    # and sums that cancel: y near -x
    xs += xs[:500]
    ys += [(x ^ 0x80000000) + int(d) & 0xFFFFFFFF
           for x, d in zip(xs[:500], rng.integers(-64, 64, 500))]
    bad = [(hex(x), hex(y)) for x, y in zip(xs, ys) if fl.add(x, y) != reference_add(x, y)]
    assert not bad, bad[:5]
    got = fl.add_fast(np.array(xs, np.uint32), np.array(ys, np.uint32))
    assert [int(v) for v in got] == [fl.add(x, y) for x, y in zip(xs, ys)]


def test_os_output_folds_slot_k_into_partial_k_mod_6_then_reduces_in_order():
    f = FLOAT_FORMATS["bf16"]
    one = f.bias << f.man_bits
    rng = np.random.default_rng(13)
    a = random_operands(rng, "bf16", 23)
    b = random_operands(rng, "bf16", 23)
    start = [int(v) for v in rng.integers(0, 1 << 31, 6)]
    parts = fl.os_partials(a, b, "bf16", start)
    assert fl.PARTIALS == 6
    for k in range(6):        # partial k: its own slots, in slot order, from start[k]
        assert parts[k] == fl.dot(start[k], a[k::6], b[k::6], "bf16")
    r = [reference_add(x, y) for x, y in ((parts[0], parts[1]), (parts[2], parts[3]),
                                          (parts[4], parts[5]))]
    assert fl.os_output(a, b, "bf16", start) == reference_add(reference_add(r[0], r[1]), r[2])
    # the order is visible: 2**24, 1, 1, -2**24 in partials 0 to 3: (2**24 + 1) rounds to
    # 2**24 and (1 - 2**24) is exact, so the sum is 1; folded left to right it is 0
    big = (f.bias + 12) << f.man_bits                       # 2**12
    a = [big, one, one, big | 0x8000]
    b = [big, one, one, big]
    assert fl.os_output(a, b, "bf16") == 0x3F800000
    assert fl.dot(0, a, b, "bf16") == 0


@pytest.mark.parametrize("name", ("bf16", "fp16"))
def test_gemm_fast_path_equals_the_integer_model(name):
    from bpsa.sim.gemm import random_float_operands
    rng = np.random.default_rng(14)
    for m, k, n in ((3, 1, 2), (4, 7, 5), (2, 23, 3)):
        a = random_float_operands(name, (m, k), rng, special_prob=0.05)
        b = random_float_operands(name, (k, n), rng, special_prob=0.05)
        np.testing.assert_array_equal(fl.gemm_os(a, b, name),
                                      fl.gemm_os(a, b, name, fast=False))
    # stacks of GEMMs
    a = random_float_operands(name, (3, 4, 9), rng, special_prob=0.05)
    b = random_float_operands(name, (3, 9, 2), rng, special_prob=0.05)
    np.testing.assert_array_equal(fl.gemm_os(a, b, name), fl.gemm_os(a, b, name, fast=False))


@pytest.mark.parametrize("name", ["bf16", "fp16"])
def test_array_conversions_equal_the_integer_model(name):
    """from_float32 / store_fast / to_float32 (numpy, the fast paths the driver and the layer
    models use) equal convert / store one encoding at a time: random encodings, values near
    the format's smallest normal, its largest finite and its ties, specials, subnormals."""
    rng = np.random.default_rng(15)
    f = FLOAT_FORMATS[name]
    drop = 23 - f.man_bits
    near = [((e + 127) << 23) | int(m) for e in (f.emin - 1, f.emin, f.emax, f.emax + 1, 0)
            for m in rng.integers(0, 1 << 23, 300)]
    ties = [((127 + int(e)) << 23) | (int(m) << drop) | (1 << (drop - 1)) | t
            for e, m in zip(rng.integers(-20, 20, 300), rng.integers(0, 1 << f.man_bits, 300))
            for t in (0, 1)]
    u = np.array(near + ties + corner_accumulators() + list(rng.integers(0, 1 << 32, 20000))
                 + [1, 5, 0x7FFFFF, 0x80000003], dtype=np.uint32)
    u = np.concatenate([u, u ^ 0x80000000])
    got = fl.from_float32(u.view(np.float32), name)
    assert [int(v) for v in got] == [fl.convert(int(v), "fp32", name) for v in u]
    assert [int(v) for v in fl.store_fast(u, name)] == [fl.store(int(v), name) for v in u]
    enc = np.arange(1 << 16)
    back = fl.to_float32(enc, name).view(np.uint32)
    assert [int(v) for v in back] == [fl.convert(int(v), name, "fp32") for v in enc]
    back32 = fl.to_float32(u, "fp32").view(np.uint32)
    assert [int(v) for v in back32] == [fl.convert(int(v), "fp32", "fp32") for v in u]
