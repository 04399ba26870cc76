"""The MX quantizer and block dot product (bpsa.models.mx) against independent references:
Graphcore's gfloat (conversion), ml_dtypes (decoding) and exact rationals (the dot product),
bpsa.verify.mx_reference. `make mx-check` runs the same comparison on 100,000 blocks."""

import numpy as np
import pytest

from bpsa.models.mx import dequantize, element_ints, matmul, quantize
from bpsa.spec.numeric import MX_BLOCK, MX_FORMATS, MX_SCALE_NAN
from bpsa.verify.mx_reference import (conversion_blocks, gfloat_quantize, mldtypes_dequantize,
                                      rational_matmul)

FORMATS = list(MX_FORMATS)


@pytest.mark.parametrize("name", FORMATS)
def test_quantize_matches_gfloat(name):
    x = conversion_blocks(np.random.default_rng(11), 3000)
    codes, scales = quantize(x, name)
    ref_codes, ref_scales = gfloat_quantize(x, name)
    assert np.array_equal(scales[:, 0], ref_scales)
    assert np.array_equal(codes, ref_codes)


@pytest.mark.parametrize("name", FORMATS)
def test_dequantize_matches_ml_dtypes(name):
    rng = np.random.default_rng(12)
    codes = rng.integers(0, 256, size=(500, MX_BLOCK), dtype=np.uint8)
    scales = rng.integers(0, 256, size=(500, 1), dtype=np.uint8)
    got = dequantize(codes, scales, name)
    ref = mldtypes_dequantize(codes, scales[:, 0], name)
    if name == "mxint8":       # ml_dtypes has no int8 element: -2 is code 0x80 here as there
        assert got[codes == 0x80].size and np.all(got[(codes == 0x80) & (scales < 255)] < 0)
    assert np.array_equal(got, ref, equal_nan=True)


@pytest.mark.parametrize("name", FORMATS)
def test_round_trip_of_representable_values(name):
    """Values already in the format (one scale per block, every element code but NaN/inf and
    int8's -2) come back unchanged from dequantize(quantize(...))."""
    rng = np.random.default_rng(13)
    f = MX_FORMATS[name]
    codes = rng.integers(0, 256, size=(400, MX_BLOCK), dtype=np.uint8)
    ints, nan, inf = element_ints(codes, f)
    ok = ~(nan | inf) & (np.abs(ints) <= f.max_int)
    codes = np.where(ok, codes, 0).astype(np.uint8)
    codes[:, 0] = f.max_code                  # every block reaches the largest magnitude
    scales = rng.integers(100, 150, size=(400, 1), dtype=np.uint8)
    x = dequantize(codes, scales, name).astype(np.float32)
    c2, s2 = quantize(x, name)
    assert np.array_equal(s2, scales)
    assert np.array_equal(dequantize(c2, s2, name), dequantize(codes, scales, name))


def test_axis_and_padded_tail():
    rng = np.random.default_rng(14)
    x = rng.standard_normal((3, 70, 5)).astype(np.float32)
    codes, scales = quantize(x, "mxfp8_e4m3", axis=1)
    assert codes.shape == x.shape and codes.dtype == np.uint8
    assert scales.shape == (3, 3, 5) and scales.dtype == np.uint8
    flat = np.moveaxis(x, 1, -1).reshape(15, 70)
    padded = np.concatenate([flat, np.zeros((15, 26), np.float32)], axis=1).reshape(45, 32)
    ref_codes, ref_scales = gfloat_quantize(padded, "mxfp8_e4m3")
    assert np.array_equal(np.moveaxis(codes, 1, -1).reshape(15, 70),
                          ref_codes.reshape(15, 96)[:, :70])
    assert np.array_equal(np.moveaxis(scales, 1, -1).reshape(45), ref_scales)
    back = dequantize(codes, scales, "mxfp8_e4m3", axis=1)
    assert back.shape == x.shape
    # E4M3 keeps 4 significant bits (an error of |x| / 16); the floor scale saturates a
    # block's largest elements to 448 of up to 512 (|x| / 8); elements far below their
    # block's largest lose more (steps of 2^-17 of it)
    assert np.all(np.abs(back - x) <= np.abs(x) / 8 + np.abs(x).max() * 2.0 ** -17)


@pytest.mark.parametrize("name", FORMATS)
def test_nan_and_infinite_blocks(name):
    x = np.ones((4, MX_BLOCK), np.float32)
    x[0, 3], x[1, 7], x[2, 0] = np.nan, np.inf, -np.inf
    codes, scales = quantize(x, name)
    assert list(scales[:, 0]) == [MX_SCALE_NAN] * 3 + [127 - MX_FORMATS[name].emax]
    assert not codes[:3].any()
    back = dequantize(codes, scales, name)
    assert np.isnan(back[:3]).all() and np.array_equal(back[3], x[3])


@pytest.mark.parametrize("name", FORMATS)
def test_zero_block_and_negative_zero(name):
    x = np.zeros((2, MX_BLOCK), np.float32)
    x[1, 5] = np.float32(-0.0)
    codes, scales = quantize(x, name)
    assert list(scales[:, 0]) == [0, 0]
    assert codes[1, 5] == (0 if name == "mxint8" else 0x80) and codes.sum() == codes[1, 5]


@pytest.mark.parametrize("name", FORMATS)
def test_ceil_scale_never_saturates(name):
    f = MX_FORMATS[name]
    x = conversion_blocks(np.random.default_rng(15), 2000)
    _, floor_s = quantize(x, name)
    codes, ceil_s = quantize(x, name, scale_rule="ceil")
    d = ceil_s[:, 0].astype(int) - floor_s[:, 0].astype(int)
    assert set(np.unique(d)) <= {0, 1}
    amax = np.abs(x.astype(np.float64)).max(axis=1)
    xs = ceil_s[:, 0].astype(int) - 127
    live = (amax > 0) & (xs > -127) & (xs < 127)
    assert np.all(amax[live] <= f.max_value * np.ldexp(1.0, xs[live]))
    assert np.all(amax[live] > f.max_value * np.ldexp(1.0, xs[live] - 1))
    # and the elements are rounded at that scale as gfloat rounds them
    from gfloat import encode_ndarray, formats, round_ndarray
    fi = {"mxint8": formats.format_info_ocp_int8, "mxfp8_e4m3": formats.format_info_ocp_e4m3,
          "mxfp8_e5m2": formats.format_info_ocp_e5m2}[name]
    v = np.ldexp(x[live].astype(np.float64), -xs[live][:, None])
    assert np.abs(v).max() <= f.max_value
    ref = encode_ndarray(fi, round_ndarray(fi, v, sat=True))
    assert np.array_equal(codes[live], ref)


def test_bad_arguments():
    with pytest.raises(ValueError, match="MX format must be one of"):
        quantize(np.ones(4), "mxint4")
    with pytest.raises(ValueError, match="scale_rule must be one of"):
        quantize(np.ones(4), "mxint8", scale_rule="nearest")
    with pytest.raises(ValueError, match="at least one dimension"):
        quantize(np.float32(1), "mxint8")
    a, sa = quantize(np.ones((2, 40), np.float32), "mxint8", axis=1)
    b, sb = quantize(np.ones((30, 3), np.float32), "mxint8", axis=0)
    with pytest.raises(ValueError, match="A is 2 x 40 but B is 30 x 3"):
        matmul(a, sa, b, sb, "mxint8")
    b, sb = quantize(np.ones((40, 3), np.float32), "mxint8", axis=0)
    with pytest.raises(ValueError, match="scales must be"):
        matmul(a, sa, b, sb.T, "mxint8")


def _operands(rng, m, k, n):
    a = rng.standard_normal((m, k)) * np.ldexp(1.0, rng.integers(-125, 120, size=(m, 1)))
    b = rng.standard_normal((k, n)) * np.ldexp(1.0, rng.integers(-125, 120, size=(1, n)))
    a[rng.random(a.shape) < 0.2] = 0
    return a.astype(np.float32), b.astype(np.float32)


@pytest.mark.parametrize("name", FORMATS)
def test_matmul_matches_rationals(name):
    rng = np.random.default_rng(16)
    for _ in range(25):
        a, b = _operands(rng, *rng.integers(1, 5, size=1), rng.integers(1, 130),
                         *rng.integers(1, 5, size=1))
        ac, sa = quantize(a, name, axis=1)
        bc, sb = quantize(b, name, axis=0)
        got = matmul(ac, sa, bc, sb, name)
        ref = rational_matmul(dequantize(ac, sa, name, axis=1), dequantize(bc, sb, name, axis=0))
        assert np.array_equal(got, ref)


def test_matmul_one_block_is_one_float32_rounding():
    """With K <= 32 every output is one block: its exact sum (exact in float64 for 8-bit
    elements) rounded once to float32, flushed below 2^-126."""
    rng = np.random.default_rng(17)
    a, b = _operands(rng, 6, 29, 7)
    ac, sa = quantize(a, "mxint8", axis=1)
    bc, sb = quantize(b, "mxint8", axis=0)
    exact = dequantize(ac, sa, "mxint8", axis=1) @ dequantize(bc, sb, "mxint8", axis=0)
    with np.errstate(over="ignore"):
        ref = exact.astype(np.float32)
    tiny = np.abs(ref) < np.float32(2.0 ** -126)
    ref[tiny] = np.copysign(np.float32(0), exact[tiny])
    assert tiny.any() and np.isinf(ref).any()
    assert np.array_equal(matmul(ac, sa, bc, sb, "mxint8"), ref.view(np.uint32))


def test_matmul_nan_blocks_and_given_accumulator():
    a = np.ones((2, 64), np.float32)
    b = np.ones((64, 2), np.float32)
    a[1, 40] = np.nan
    ac, sa = quantize(a, "mxfp8_e4m3", axis=1)
    bc, sb = quantize(b, "mxfp8_e4m3", axis=0)
    out = matmul(ac, sa, bc, sb, "mxfp8_e4m3", acc=np.full((2, 2), 0x3F800000, np.uint32))
    assert list(out[0]) == [0x42820000] * 2            # 1 + 64 = 65
    assert list(out[1]) == [0x7FC00000] * 2            # a NaN block: the canonical NaN


# --- the convolution phases ---------------------------------------------------------------

from fractions import Fraction  # noqa: E402

from bpsa.models import golden  # noqa: E402
from bpsa.models.mx import conv_forward, conv_gradient, conv_loss, walker_segments  # noqa: E402
from bpsa.verify.mx_reference import _fp32_round, _fp32_value  # noqa: E402


def _fold(blocks):
    """The contract's accumulation of exact block sums (Fractions), in order, from +0."""
    acc = 0
    for s in blocks:
        if s != 0:
            acc = _fp32_round(_fp32_value(acc) + s)
    return acc


def _deq(a, name, axis):
    codes, scales = quantize(a, name, axis=axis)
    return dequantize(codes, scales, name, axis=axis)


@pytest.mark.parametrize("name", ["mxint8", "mxfp8_e4m3"])
def test_conv_phases_equal_exact_convolution_when_representable(name):
    """Small integers are exact in every format and their sums exact in fp32: each phase
    equals the integer golden model's convolution, strides, padding and dilation included."""
    rng = np.random.default_rng(18)
    for stride, pad, dil, kern in [(1, 1, 1, (3, 3)), (2, 1, 1, (3, 2)), (2, 0, 2, (2, 2)),
                                   ((1, 2), (0, 1), 1, (1, 3))]:
        x = rng.integers(-8, 9, size=(2, 37, 7, 6))
        w = rng.integers(-8, 9, size=(3, 37) + kern)
        y = conv_forward(x.astype(np.float32), w.astype(np.float32), name, stride, pad, dil)
        ref = golden.conv2d(x, w, stride, pad, dil)
        assert np.array_equal(y.view(np.float32), ref.astype(np.float32))
        dy = rng.integers(-8, 9, size=ref.shape)
        dx = conv_loss(dy.astype(np.float32), w.astype(np.float32), name, (7, 6), stride, pad,
                       dil)
        ref = golden.conv2d_input_grad(dy, w, (7, 6), stride, pad, dil)
        assert np.array_equal(dx.view(np.float32), ref.astype(np.float32))
        dw = conv_gradient(x.astype(np.float32), dy.astype(np.float32), name, kern, stride,
                           pad, dil)
        ref = golden.conv2d_weight_grad(x, dy, kern, stride, pad, dil)
        assert np.array_equal(dw.view(np.float32), ref.astype(np.float32))


def test_forward_in_parts_folds_as_the_contract_says():
    """``conv_forward(..., part=g)`` (the channel-first order) against a loop written from the
    contract: each block's channels in parts of ``g`` (a block's last part shorter), parts in
    channel order, the taps in raster order within a part, each part's exact sum at a tap
    one rounding; values of many magnitudes so that the order shows. ``part`` outside 1..32
    is refused."""
    name = "mxfp8_e4m3"
    rng = np.random.default_rng(23)
    n, c, h, wd, k, r_n, q_n, st, p, g = 2, 34, 5, 4, 5, 2, 3, 1, 1, 12
    x = (rng.standard_normal((n, c, h, wd)) * np.exp2(rng.integers(-20, 20, (n, c, h, wd))))
    w = (rng.standard_normal((k, c, r_n, q_n)) * np.exp2(rng.integers(-20, 20, (k, c, 1, 1))))
    x, w = x.astype(np.float32), w.astype(np.float32)
    oh, ow = (h + 2 * p - r_n) // st + 1, (wd + 2 * p - q_n) // st + 1
    xq, wq = _deq(x, name, 1), _deq(w, name, 1)
    y = conv_forward(x, w, name, st, p, part=g)
    parts = [(0, 12), (12, 24), (24, 32), (32, 34)]
    checked = 0
    for i in range(n):
        for kk in range(k):
            for yy in range(oh):
                for xx in range(ow):
                    folds = []
                    for c0, c1 in parts:
                        for r in range(r_n):
                            for q in range(q_n):
                                ih, iw = yy * st + r - p, xx * st + q - p
                                inside = 0 <= ih < h and 0 <= iw < wd
                                folds.append(sum(Fraction(float(xq[i, cc, ih, iw])) *
                                                 Fraction(float(wq[kk, cc, r, q]))
                                                 for cc in range(c0, c1)) if inside else 0)
                    assert y[i, kk, yy, xx] == _fold(folds), (i, kk, yy, xx)
                    checked += 1
    assert checked == y.size
    # the default order (taps outer, whole blocks) rounds differently on these values
    assert not np.array_equal(y, conv_forward(x, w, name, st, p))
    for bad in (0, 33, 2.0, True):
        with pytest.raises(ValueError, match="part must be an integer from 1 to 32"):
            conv_forward(x, w, name, st, p, part=bad)


def test_loss_in_parts_folds_as_the_contract_says():
    """``conv_loss(..., part=g)`` (the channel-first order of the loss's stride classes)
    against a loop written from the contract (K blocks in parts of ``g``, within a part the
    taps in the raster order of the dY pixel they read), and equal to the loss assembled from
    the stride classes' forwards in the channel-first order (:mod:`bpsa.plan.loss_classes`
    with ``conv_forward(..., part=g)``), as the channel-first front end computes it."""
    from bpsa.plan.loss_classes import loss_by_classes
    name = "mxfp8_e4m3"
    rng = np.random.default_rng(29)
    n, c, h, wd, k, r_n, q_n, st, p, g = 1, 3, 6, 5, 37, 3, 2, 2, 1, 12
    oh, ow = (h + 2 * p - r_n) // st + 1, (wd + 2 * p - q_n) // st + 1
    dy = (rng.standard_normal((n, k, oh, ow)) * np.exp2(rng.integers(-20, 20, (n, k, oh, ow))))
    w = (rng.standard_normal((k, c, r_n, q_n)) * np.exp2(rng.integers(-20, 20, (k, 1, 1, 1))))
    dy, w = dy.astype(np.float32), w.astype(np.float32)
    gq, wq = _deq(dy, name, 1), _deq(w, name, 0)
    dx = conv_loss(dy, w, name, (h, wd), st, p, part=g)
    parts = [(0, 12), (12, 24), (24, 32), (32, 37)]
    for i in range(n):
        for cc in range(c):
            for ih in range(h):
                for iw in range(wd):
                    folds = []
                    for k0, k1 in parts:
                        for r in reversed(range(r_n)):
                            for q in reversed(range(q_n)):
                                ty, tx = ih + p - r, iw + p - q
                                if ty % st or tx % st or not (0 <= ty // st < oh
                                                              and 0 <= tx // st < ow):
                                    continue
                                folds.append(sum(Fraction(float(gq[i, kk, ty // st, tx // st]))
                                                 * Fraction(float(wq[kk, cc, r, q]))
                                                 for kk in range(k0, k1)))
                    assert dx[i, cc, ih, iw] == _fold(folds), (i, cc, ih, iw)
    assert not np.array_equal(dx, conv_loss(dy, w, name, (h, wd), st, p))

    def forward(x, wt, stride, padding, dilation):
        return conv_forward(x, wt, name, stride, padding, dilation, part=g)
    by_classes, _ = loss_by_classes(dy, w, (h, wd), st, p, 1, forward)
    assert np.array_equal(by_classes.astype(np.uint32), dx)
    with pytest.raises(ValueError, match="part must be an integer from 1 to 32"):
        conv_loss(dy, w, name, (h, wd), st, p, part=64)


def test_conv_phases_block_and_round_as_the_contract_says():
    """Each phase against a loop written from the contract's table: operands quantized along
    the phase's blocks, one output's blocks in the stated order, each block's exact sum
    added with one rounding (values of many magnitudes, so the order and the blocks show)."""
    name = "mxfp8_e4m3"
    rng = np.random.default_rng(19)
    n, c, h, wd, k, r_n, q_n, st, p = 2, 34, 5, 4, 33, 2, 3, 2, 1
    x = (rng.standard_normal((n, c, h, wd)) * np.exp2(rng.integers(-20, 20, (n, c, h, wd))))
    w = (rng.standard_normal((k, c, r_n, q_n)) * np.exp2(rng.integers(-20, 20, (k, c, 1, 1))))
    x, w = x.astype(np.float32), w.astype(np.float32)
    oh, ow = (h + 2 * p - r_n) // st + 1, (wd + 2 * p - q_n) // st + 1
    dy = (rng.standard_normal((n, k, oh, ow)) * np.exp2(rng.integers(-20, 20, (n, k, oh, ow))))
    dy = dy.astype(np.float32)

    xq = _deq(x, name, 1)                      # forward: X along C, W along C
    wq = _deq(w, name, 1)
    y = conv_forward(x, w, name, st, p)
    for (i, kk, yy, xx) in [(0, 0, 0, 0), (1, 32, oh - 1, ow - 1), (0, 7, 1, 1)]:
        blocks = []
        for r in range(r_n):
            for q in range(q_n):
                ih, iw = yy * st + r - p, xx * st + q - p
                for c0 in range(0, c, 32):
                    if 0 <= ih < h and 0 <= iw < wd:
                        blocks.append(sum(Fraction(float(xq[i, cc, ih, iw])) *
                                          Fraction(float(wq[kk, cc, r, q]))
                                          for cc in range(c0, min(c, c0 + 32))))
        assert y[i, kk, yy, xx] == _fold(blocks)

    gq = _deq(dy, name, 1)                     # loss: dY along K, W along K
    wk = _deq(w, name, 0)
    dx = conv_loss(dy, w, name, (h, wd), st, p)
    for (i, cc, ih, iw) in [(0, 0, 0, 0), (1, 33, h - 1, wd - 1), (0, 5, 2, 1), (1, 3, 1, 2)]:
        blocks = []
        for r in range(r_n):
            for q in range(q_n):
                ty, tx = ih + p - r, iw + p - q
                if ty % st or tx % st or not (0 <= ty // st < oh and 0 <= tx // st < ow):
                    continue
                for k0 in range(0, k, 32):
                    blocks.append(sum(Fraction(float(gq[i, kk, ty // st, tx // st])) *
                                      Fraction(float(wk[kk, cc, r, q]))
                                      for kk in range(k0, min(k, k0 + 32))))
        assert dx[i, cc, ih, iw] == _fold(blocks)

    flat = dy.transpose(1, 0, 2, 3).reshape(k, -1)     # gradient: along (n, oh, ow)
    gf = _deq(flat, name, 1)
    dw = conv_gradient(x, dy, name, (r_n, q_n), st, p)
    xp = np.pad(x, ((0, 0), (0, 0), (p, p), (p, p)))
    for (kk, cc, r, q) in [(0, 0, 0, 0), (32, 33, r_n - 1, q_n - 1), (4, 9, 1, 0)]:
        view = xp[:, cc, r:r + st * (oh - 1) + 1:st, q:q + st * (ow - 1) + 1:st].reshape(1, -1)
        vq = _deq(view, name, 1)[0]
        length = n * oh * ow
        blocks = [sum(Fraction(float(gf[kk, j])) * Fraction(float(vq[j]))
                      for j in range(j0, min(length, j0 + 32)))
                  for j0 in range(0, length, 32)]
        assert dw[kk, cc, r, q] == _fold(blocks)


def test_conv_phases_refuse_bad_operands():
    x = np.ones((1, 3, 5, 5), np.float32)
    w = np.ones((2, 4, 3, 3), np.float32)
    with pytest.raises(ValueError, match="x has 3 channels but w has 4"):
        conv_forward(x, w, "mxint8")
    with pytest.raises(ValueError, match="floating-point array"):
        conv_forward(x.astype(np.int64), w, "mxint8")
    with pytest.raises(ValueError, match="is not the output of"):
        conv_loss(np.ones((1, 2, 4, 4), np.float32), w[:, :3], "mxint8", (5, 5))
    with pytest.raises(ValueError, match="is not the output of"):
        conv_gradient(x, np.ones((1, 2, 4, 4), np.float32), "mxint8", 3)


def test_conv_loss_nan_reaches_only_the_pixels_its_taps_reach():
    dy = np.ones((1, 2, 3, 3), np.float32)
    dy[0, 1, 1, 1] = np.nan
    w = np.ones((2, 1, 1, 1), np.float32)
    dx = conv_loss(dy, w, "mxint8", (5, 5), stride=2)
    nan = (dx == 0x7FC00000)
    assert nan[0, 0, 2, 2] and nan.sum() == 1
    assert (dx[0, 0, ::2, ::2].view(np.float32)[~nan[0, 0, ::2, ::2]] == 2).all()
    assert (dx[0, 0, 1::2, :] == 0).all() and (dx[0, 0, :, 1::2] == 0).all()


def test_matmul_nan_element_times_zero_is_skipped():
    """A NaN element code meets a zero in one product and a non-zero in another."""
    a = np.zeros((2, 32), np.uint8)
    a[:, 0] = 0x7F                                  # E4M3 NaN in every row
    a[:, 1] = 0x38                                  # 1.0
    b = np.zeros((32, 2), np.uint8)
    b[1, :] = 0x38
    b[0, 1] = 0x38                                  # column 1 meets the NaN with a 1.0
    scales = np.full((2, 1), 127, np.uint8)
    out = matmul(a, scales, b, scales.T.copy(), "mxfp8_e4m3")
    assert list(out[:, 0]) == [0x3F800000] * 2      # NaN x 0 skipped: 1 x 1 = 1
    assert list(out[:, 1]) == [0x7FC00000] * 2


def test_accumulate_blocks_equals_accumulate_block():
    """The vectorised fold (float64, rounded to odd) gives accumulate_block's encoding on random
    and corner-case accumulators, sums and exponents: ties at 24 bits, cancellation to zero,
    exponents far apart (the smaller term only a sticky bit), overflow to infinity, results
    just below and above 2^-126, infinite and NaN accumulators, NaN blocks, zero sums."""
    from bpsa.models.mx import accumulate_block, accumulate_blocks
    rng = np.random.default_rng(51)
    n = 40_000
    acc = rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32)
    # accumulators of every kind: zeros, subnormal encodings (read as zero), near 2^-126,
    # large, infinities, NaNs
    special = np.array([0, 0x80000000, 0x00000001, 0x007FFFFF, 0x00800000, 0x80800000,
                        0x7F7FFFFF, 0xFF7FFFFF, 0x7F800000, 0xFF800000, 0x7FC00000,
                        0x3F800000, 0xBF800000, 0x4B800000, 0x4B7FFFFF], np.uint32)
    acc[:3000] = rng.choice(special, 3000)
    bits = rng.integers(0, 43, n)
    s = rng.integers(0, 1 << 42, n, dtype=np.int64) >> (42 - bits)
    s = np.where(rng.random(n) < 0.5, -s, s)
    s[rng.random(n) < 0.03] = 0
    # exponents near the accumulator's (ties, cancellation), far from it, and at the edges
    acc_e = ((acc.astype(np.int64) >> 23) & 0xFF) - 127 - 23
    e = np.where(rng.random(n) < 0.6, acc_e + rng.integers(-45, 30, n),
                 rng.integers(-300, 250, n))
    # exact cancellations and half-ulp ties: s 2^e = -acc, and acc +- half an ulp
    k = np.arange(3000, 6000)
    mant = ((acc[k] & 0x7FFFFF) | 0x800000).astype(np.int64)
    sign = np.where(acc[k] >> 31 == 1, -1, 1)
    s[k[:1000]] = -sign[:1000] * mant[:1000]
    e[k[:1000]] = acc_e[k[:1000]]
    s[k[1000:]] = np.where(rng.random(2000) < 0.5, 1, -1) * (2 * rng.integers(0, 1 << 20, 2000)
                                                             + 1)
    e[k[1000:]] = acc_e[k[1000:]] - 1             # odd multiples of half an ulp: ties
    bad = rng.random(n) < 0.02
    got = accumulate_blocks(acc, s, e, bad)
    want = np.array([accumulate_block(int(a), int(v), int(x), bool(b))
                     for a, v, x, b in zip(acc, s, e, bad)], np.uint32)
    wrong = np.flatnonzero(got != want)
    assert wrong.size == 0, [(hex(acc[i]), int(s[i]), int(e[i]), hex(got[i]), hex(want[i]))
                             for i in wrong[:5]]


def test_walker_segments_cut_where_the_contract_says():
    """Segments end at the row's end, at each 32-position dY block's end and where the next
    position's (clamped) X block differs; a column in the padding counts as the nearest."""
    assert walker_segments(70, 200, 1, 0) == [(0, 32, 0), (32, 64, 1), (64, 70, 2)]
    # X column ow + 5: block 1 starts at ow 27
    assert walker_segments(40, 100, 1, 5) == [(0, 27, 0), (27, 32, 1), (32, 40, 1)]
    # stride 2 from column -1: columns -1, 1, .., 31 | 33 ..; the padding joins block 0
    assert walker_segments(20, 40, 2, -1) == [(0, 17, 0), (17, 20, 1)]
    # a row wholly in the padding columns is one segment
    assert walker_segments(1, 1, 1, -1) == [(0, 1, 0)]
    # a stride past a block cuts after every position
    assert walker_segments(3, 200, 40, 0) == [(0, 1, 0), (1, 2, 1), (2, 3, 2)]


def test_gradient_by_segments_folds_as_the_contract_says():
    """``conv_gradient(..., walker=True)`` (the zero-free walker's variant) against a loop
    written from the contract: X quantized along W in each row, dY along OW in each row; each
    output's folds the segments of every dY row in raster order, a segment's exact sum one
    rounding, rows whose X row is in the padding folding nothing; values of many magnitudes
    along the rows so that the blocks and the order show."""
    name = "mxfp8_e4m3"
    rng = np.random.default_rng(31)
    n, c, h, wd, k, r_n, q_n, st, p = 2, 3, 5, 70, 2, 3, 2, 2, 1
    oh, ow = (h + 2 * p - r_n) // st + 1, (wd + 2 * p - q_n) // st + 1
    x = rng.standard_normal((n, c, h, wd)) * np.exp2(rng.integers(-20, 20, (n, c, h, wd)))
    dy = rng.standard_normal((n, k, oh, ow)) * np.exp2(rng.integers(-20, 20, (n, k, oh, ow)))
    x, dy = x.astype(np.float32), dy.astype(np.float32)
    xq, gq = _deq(x, name, 3), _deq(dy, name, 3)
    dw = conv_gradient(x, dy, name, (r_n, q_n), st, p, walker=True)
    for kk in range(k):
        for cc in range(c):
            for r in range(r_n):
                for q in range(q_n):
                    folds = []
                    for i in range(n):
                        for o in range(oh):
                            xr = o * st + r - p
                            if not 0 <= xr < h:
                                continue
                            start = 0
                            for o2 in range(ow):
                                xc = o2 * st + q - p

                                def blk(v):
                                    return min(max(v, 0), wd - 1) // 32
                                if o2 == ow - 1 or o2 % 32 == 31 or blk(xc) != blk(xc + st):
                                    folds.append(sum(
                                        Fraction(float(gq[i, kk, o, j]))
                                        * Fraction(float(xq[i, cc, xr, j * st + q - p]))
                                        for j in range(start, o2 + 1)
                                        if 0 <= j * st + q - p < wd))
                                    start = o2 + 1
                    assert dw[kk, cc, r, q] == _fold(folds), (kk, cc, r, q)
    assert not np.array_equal(dw, conv_gradient(x, dy, name, (r_n, q_n), st, p))


@pytest.mark.parametrize("name", ["mxint8", "mxfp8_e4m3"])
def test_gradient_by_segments_is_exact_when_representable(name):
    """Small integers: the walker's variant equals the integer gradient too."""
    rng = np.random.default_rng(37)
    for stride, pad, dil, kern in [(1, 1, 1, (3, 3)), (2, 1, 1, (3, 2)), (2, 0, 2, (2, 2))]:
        x = rng.integers(-8, 9, size=(2, 5, 7, 40))
        ref_y = golden.conv2d(x, np.zeros((3, 5) + kern, np.int64), stride, pad, dil)
        dy = rng.integers(-8, 9, size=ref_y.shape)
        dw = conv_gradient(x.astype(np.float32), dy.astype(np.float32), name, kern, stride,
                           pad, dil, walker=True)
        ref = golden.conv2d_weight_grad(x, dy, kern, stride, pad, dil)
        assert np.array_equal(dw.view(np.float32), ref.astype(np.float32))
