"""The controller's row bands (:mod:`sim.tiling`) against :mod:`sim.golden` alone: every band
run as its own asymmetrically padded layer (padding made explicit with ``np.pad``) and the
pieces put together equal the whole layer, for random shapes and band heights."""

import numpy as np
import pytest

from hw.config import load_config
from sim import golden
from sim.tiling import bands, plan


def _layer(rng):
    while True:
        r, s = (int(v) for v in rng.integers(1, 5, 2))
        st = (int(rng.integers(1, 4)), int(rng.integers(1, 3)))
        dl = (int(rng.integers(1, 3)), int(rng.integers(1, 3)))
        h, w = int(rng.integers(1, 20)), int(rng.integers(1, 9))
        drh = dl[0] * (r - 1)
        pd = (int(rng.integers(0, drh + 1)), int(rng.integers(0, 3)))
        try:
            golden.output_hw((h, w), (r, s), st, pd, dl)
        except ValueError:
            continue
        return dict(n=int(rng.integers(1, 3)), c=int(rng.integers(1, 4)), h=h, w=w,
                    k=int(rng.integers(1, 4)), r=r, s=s, stride=st, pad=pd, dil=dl)


def _check_bands(phase, L, band, rng):
    x = rng.integers(-8, 8, (L["n"], L["c"], L["h"], L["w"]))
    wt = rng.integers(-8, 8, (L["k"], L["c"], L["r"], L["s"]))
    kw = dict(stride=L["stride"], dilation=L["dil"])
    y = golden.conv2d(x, wt, padding=L["pad"], **kw)
    dy = rng.integers(-8, 8, y.shape)
    pw = (0, L["pad"][1])
    bl = bands(phase, L["h"], L["w"], L["r"], L["s"], L["stride"], L["pad"], L["dil"], band)
    covered = sum(b.out_rows for b in bl)
    if phase == "forward":
        assert covered == y.shape[2]
        for b in bl:
            xb = np.pad(x[:, :, b.in0:b.in0 + b.in_rows],
                        ((0, 0), (0, 0), (b.pad_top, b.pad_bottom), (0, 0)))
            got = golden.conv2d(xb, wt, padding=pw, **kw)
            assert got.shape[2] == b.engine_oh == b.out_rows
            assert np.array_equal(got, y[:, :, b.out0:b.out0 + b.out_rows]), b
    elif phase == "gradient":
        assert covered == y.shape[2]
        want = golden.conv2d_weight_grad(x, dy, (L["r"], L["s"]), padding=L["pad"], **kw)
        total = np.zeros_like(want)
        for b in bl:
            xb = np.pad(x[:, :, b.in0:b.in0 + b.in_rows],
                        ((0, 0), (0, 0), (b.pad_top, b.pad_bottom), (0, 0)))
            total += golden.conv2d_weight_grad(xb, dy[:, :, b.out0:b.out0 + b.out_rows],
                                               (L["r"], L["s"]), padding=pw, **kw)
        assert np.array_equal(total, want)
    else:
        assert covered == L["h"]
        want = golden.conv2d_input_grad(dy, wt, (L["h"], L["w"]), padding=L["pad"], **kw)
        for b in bl:
            assert b.in_rows >= 1 and b.pad_top >= 0 and b.pad_bottom >= 0
            hp = b.engine_h + b.pad_top + b.pad_bottom
            # the engine's shape check: OH is the forward output height of the band
            assert (hp - L["dil"][0] * (L["r"] - 1) - 1) // L["stride"][0] + 1 == b.engine_oh
            got = golden.conv2d_input_grad(dy[:, :, b.in0:b.in0 + b.in_rows], wt,
                                           (hp, L["w"]), padding=pw, **kw)
            got = got[:, :, b.pad_top:b.pad_top + b.engine_h]
            assert np.array_equal(got, want[:, :, b.out0:b.out0 + b.out_rows]), b


@pytest.mark.parametrize("phase", ["forward", "loss", "gradient"])
@pytest.mark.parametrize("seed", range(6))
def test_bands_add_up_to_the_layer(phase, seed):
    rng = np.random.default_rng([seed, len(phase)])
    for _ in range(12):
        L = _layer(rng)
        _check_bands(phase, L, int(rng.integers(1, 6)), rng)


@pytest.mark.parametrize("phase", ["forward", "loss", "gradient"])
def test_one_band_is_the_layer(phase):
    """Unbanded: one band, the layer's own padding on both sides."""
    bl = bands(phase, 9, 7, 3, 3, (2, 2), (1, 1), (1, 1), 0, banded=False)
    assert len(bl) == 1 and bl[0].pad_top == bl[0].pad_bottom == 1
    assert bl[0].engine_h == 9 and bl[0].engine_oh == 5


def test_plan_bands_layers_larger_than_the_buffers():
    cfg = load_config("small")
    big = dict(n=1, c=3, h=128, w=128, k=8, r=3, s=3, stride=(2, 2), pad=(1, 1), dil=(1, 1))
    for phase in ("forward", "loss", "gradient"):
        p = plan(cfg, phase, **big)
        assert p["banded"] and p["bands"] > 1, (phase, p)
        bl = bands(phase, 128, 128, 3, 3, (2, 2), (1, 1), (1, 1), p["band"])
        assert len(bl) == p["bands"]
    small = dict(n=1, c=3, h=8, w=8, k=8, r=3, s=3, stride=(2, 2), pad=(1, 1), dil=(1, 1))
    for phase in ("forward", "loss", "gradient"):
        assert not plan(cfg, phase, **small)["banded"]


def test_plan_refuses_what_cannot_be_banded():
    cfg = load_config("small")
    # a padding beyond the kernel's reach, on a layer that must be banded
    with pytest.raises(ValueError, match="padding"):
        plan(cfg, "forward", 1, 1, 80, 80, 4, 1, 1, (1, 1), (1, 1), (1, 1))
    # a row wider than a bank
    with pytest.raises(ValueError, match="not even one row band"):
        plan(cfg, "gradient", 1, 1, 8, 1 << 14, 4, 3, 3)
