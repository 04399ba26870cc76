"""The floating-point phases (bpsa.models.float_layers): equal to the integer golden model where
nothing rounds (small integers), and, on random encodings, to each output's context written
out slot by slot from the front end's order and folded by the contract's os_output."""

import numpy as np
import pytest

from bpsa.models import float_layers as fls
from bpsa.models import floating, golden
from bpsa.sim.gemm import random_float_operands


def _enc(v):
    return floating.from_float32(np.asarray(v, np.float32), "bf16").astype(np.int64)


def _dec(bits):
    return floating.to_float32(bits, "fp32")


def _shapes(rng, n):
    """Random layers: stride, padding, dilation, kernel, plane and channel counts."""
    out = []
    while len(out) < n:
        sh, sw = (int(v) for v in rng.integers(1, 4, 2))
        ph, pw = (int(v) for v in rng.integers(0, 3, 2))
        dh, dw = (int(v) for v in rng.integers(1, 3, 2))
        r, s = (int(v) for v in rng.integers(1, 4, 2))
        h, w = (int(v) for v in rng.integers(2, 8, 2))
        k, c = (int(v) for v in rng.integers(1, 4, 2))
        oh = (h + 2 * ph - dh * (r - 1) - 1) // sh + 1
        ow = (w + 2 * pw - dw * (s - 1) - 1) // sw + 1
        if oh >= 1 and ow >= 1:
            out.append(((sh, sw), (ph, pw), (dh, dw), r, s, h, w, k, c, oh, ow))
    return out


def test_exact_where_nothing_rounds():
    rng = np.random.default_rng(1)
    for st, pad, dil, r, s, h, w, k, c, oh, ow in _shapes(rng, 25):
        x = rng.integers(-3, 4, (1, c, h, w))
        wt = rng.integers(-3, 4, (k, c, r, s))
        dy = rng.integers(-3, 4, (1, k, oh, ow))
        np.testing.assert_array_equal(
            _dec(fls.conv2d(_enc(x), _enc(wt), "bf16", st, pad, dil)),
            golden.conv2d(x, wt, st, pad, dil))
        np.testing.assert_array_equal(
            _dec(fls.conv2d_input_grad(_enc(dy), _enc(wt), (h, w), "bf16", st, pad, dil)),
            golden.conv2d_input_grad(dy, wt, (h, w), stride=st, padding=pad, dilation=dil))
        np.testing.assert_array_equal(
            _dec(fls.conv2d_weight_grad(_enc(x), _enc(dy), (r, s), "bf16", st, pad, dil)),
            golden.conv2d_weight_grad(x, dy, (r, s), stride=st, padding=pad, dilation=dil))


@pytest.mark.parametrize("fmt", ["bf16", "fp16"])
def test_each_output_is_its_context_written_out(fmt):
    rng = np.random.default_rng(2)
    for st, pad, dil, r, s, h, w, k, c, oh, ow in _shapes(rng, 6):
        x = random_float_operands(fmt, (1, c, h, w), rng, 0.2, 0.02)
        wt = random_float_operands(fmt, (k, c, r, s), rng, 0.2, 0.02)
        dy = random_float_operands(fmt, (1, k, oh, ow), rng, 0.2, 0.02)
        (sh, sw), (ph, pw), (dh, dw) = st, pad, dil

        def xat(ci, y, xx):
            return int(x[0, ci, y, xx]) if 0 <= y < h and 0 <= xx < w else 0

        y = fls.conv2d(x, wt, fmt, st, pad, dil)
        for kk, o1, o2 in np.ndindex(k, oh, ow):
            seq = [(xat(ci, o1 * sh + rr * dh - ph, o2 * sw + q * dw - pw), int(wt[kk, ci, rr, q]))
                   for ci in range(c) for rr in range(r) for q in range(s)]
            assert y[0, kk, o1, o2] == floating.os_output(*zip(*seq), fmt)
        dx = fls.conv2d_input_grad(dy, wt, (h, w), fmt, st, pad, dil)
        for ci, hh, xx in np.ndindex(c, h, w):
            taps = [(rr, q) for rr in range(r) for q in range(s)
                    if (hh % sh + ph - rr * dh) % sh == 0 and (xx % sw + pw - q * dw) % sw == 0]
            seq = []
            for rr, q in taps:
                o1, o2 = (hh + ph - rr * dh) // sh, (xx + pw - q * dw) // sw
                for kk in range(k):
                    v = int(dy[0, kk, o1, o2]) if 0 <= o1 < oh and 0 <= o2 < ow else 0
                    seq.append((v, int(wt[kk, ci, rr, q])))
            want = floating.os_output(*zip(*seq), fmt) if seq else 0
            assert dx[0, ci, hh, xx] == want, (ci, hh, xx)
        dw_ = fls.conv2d_weight_grad(x, dy, (r, s), fmt, st, pad, dil)
        for kk, ci, rr, q in np.ndindex(k, c, r, s):
            seq = [(xat(ci, o1 * sh + rr * dh - ph, o2 * sw + q * dw - pw), int(dy[0, kk, o1, o2]))
                   for o1 in range(oh) for o2 in range(ow)]
            assert dw_[kk, ci, rr, q] == floating.os_output(*zip(*seq), fmt)


def test_weight_grad_takes_one_image():
    with pytest.raises(ValueError, match=r"one image \(N = 1\)"):
        fls.conv2d_weight_grad(np.zeros((2, 1, 3, 3)), np.zeros((2, 1, 1, 1)), (3, 3), "bf16")


@pytest.mark.parametrize("fmt", ["bf16", "fp16"])
def test_accelerator_store_rounds_and_relus_as_the_contract(fmt):
    """The accelerator models' store (fp32 sums rounded to the operand format, the ReLU)
    equals floating.store and floating.relu one value at a time, NaNs and zeros included."""
    rng = np.random.default_rng(4)
    x = random_float_operands(fmt, (1, 3, 5, 5), rng, 0.2, 0.05)
    w = random_float_operands(fmt, (4, 3, 3, 3), rng, 0.2, 0.05)
    raw = fls.accelerator_forward(x, w, fmt, 1, 1, group=2)
    for requant in (False, True):
        got = fls.accelerator_forward(x, w, fmt, 1, 1, group=2, requant=requant, relu=True)
        f = fmt if requant else "fp32"
        want = [floating.relu(floating.store(int(v), fmt) if requant else int(v), f)
                for v in raw.ravel()]
        assert [int(v) for v in got.ravel()] == want


def test_accelerator_gradient_adds_images_then_bands_in_p():
    """accelerator_gradient (its bands computed as one batched GEMM) equals the fold, in P's
    order (images, then bands of dY rows), of each band's conv2d_weight_grad."""
    rng = np.random.default_rng(6)
    x = random_float_operands("bf16", (3, 2, 11, 7), rng, 0.2, 0.02)
    dy = random_float_operands("bf16", (3, 4, 11, 4), rng, 0.2, 0.02)
    geo = dict(stride=(1, 2), padding=1, dilation=1)
    for band in (1, 3, 4, 11):
        p = np.zeros((4, 2, 3, 3), dtype=np.uint32)
        for n in range(3):
            for o0 in range(0, 11, band):
                part = fls.conv2d_weight_grad(x[n:n + 1], dy[n:n + 1], (3, 3), "bf16",
                                              rows=(o0, min(o0 + band, 11)), **geo)
                p = np.array([[[[floating.add(int(u), int(v)) for u, v in zip(r1, r2)]
                                for r1, r2 in zip(q1, q2)] for q1, q2 in zip(o1, o2)]
                              for o1, o2 in zip(p, part)], dtype=np.uint32)
        got = fls.accelerator_gradient(x, dy, (3, 3), "bf16", band=band, **geo)
        np.testing.assert_array_equal(got, p.astype(np.int64), err_msg=f"band {band}")


@pytest.mark.parametrize("phase", ["forward", "loss", "gradient"])
def test_column_strips_are_the_whole_layer_where_the_order_is_the_same(phase):
    """accelerator_strips of a layer cut into column strips (bpsa.plan.tiling.strips, pad_w
    0, padding columns as zero operands): the forward's and the loss's strips give every
    output's own context, so they equal the whole layer bit for bit on random encodings
    (specials and zeros included); the gradient's strips add their partial dW on the host,
    another order, which equals the whole layer where nothing rounds (small integers)."""
    from bpsa.plan.tiling import strips
    rng = np.random.default_rng(12)
    geo = dict(stride=(2, 4), padding=(1, 2), dilation=(1, 2))     # dX columns no tap reaches
    n, c, h, w, k, r, s = 2, 3, 7, 23, 4, 3, 2
    oh, ow = golden.output_hw((h, w), (r, s), *geo.values())
    x = random_float_operands("bf16", (n, c, h, w), rng, 0.2, 0.02)
    wt = random_float_operands("bf16", (k, c, r, s), rng, 0.2, 0.02)
    dy = random_float_operands("bf16", (n, k, oh, ow), rng, 0.2, 0.02)
    ints = {"x": rng.integers(-3, 4, x.shape), "dy": rng.integers(-3, 4, dy.shape)}
    if phase == "gradient":
        x, dy = _enc(ints["x"]), _enc(ints["dy"])
    for width in (1, 4, 9):
        cut = strips(phase, w, s, 4, 2, 2, width)
        plans = [{"group": 2, "band": 3}] * len(cut)
        hw = {"forward": None, "loss": (h, w), "gradient": (r, s)}[phase]
        got = fls.accelerator_strips(phase, {"x": x, "w": wt, "dy": dy}, "bf16", **geo, hw=hw,
                                     cut={"strips": cut, "plans": plans}, requant=False)
        if phase == "forward":
            want = fls.accelerator_forward(x, wt, "bf16", **geo, group=2)
        elif phase == "loss":
            want = fls.accelerator_loss(dy, wt, hw, "bf16", **geo, group=2)
        else:
            want = golden.conv2d_weight_grad(ints["x"], ints["dy"], hw, *geo.values())
            got = _dec(got)
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want),
                                      err_msg=f"{phase}, strips of {width}")
