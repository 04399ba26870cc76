"""The channel-first implicit im2col model (Zhou et al.) against bpsa.models.golden: the sum
of decomposed 1 x 1 convolutions equals the convolution on random layers (strides 1-4,
dilation 1-3, padding, rectangular kernels, C from 1 to several times the rows, batch); the
passes cover every (output channel, input channel, tap) once and use multi-tile for few
channels; the skewed row addresses rebuild the golden im2col operands; the cycle model is
insensitive to the stride per output pixel."""

import numpy as np
import pytest

from bpsa.models import channel_first as cf
from bpsa.models import golden
from bpsa.spec.layer import ConvLayer


def _layer(rng):
    r, s = int(rng.integers(1, 5)), int(rng.integers(1, 5))
    st = (int(rng.integers(1, 5)), int(rng.integers(1, 5)))
    dil = (int(rng.integers(1, 4)), int(rng.integers(1, 4)))
    pad = (int(rng.integers(0, 3)), int(rng.integers(0, 3)))
    while True:
        h, w = int(rng.integers(1, 14)), int(rng.integers(1, 14))
        try:
            golden.output_hw((h, w), (r, s), st, pad, dil)
        except ValueError:
            continue
        return dict(n=int(rng.integers(1, 3)), c=int(rng.integers(1, 20)), h=h, w=w,
                    k=int(rng.integers(1, 7)), r=r, s=s, st=st, pad=pad, dil=dil)


@pytest.mark.parametrize("seed", range(25))
def test_decomposed_1x1_convolutions_are_the_convolution(seed):
    rng = np.random.default_rng(seed)
    lay = _layer(rng)
    x = rng.integers(-128, 128, (lay["n"], lay["c"], lay["h"], lay["w"]))
    w = rng.integers(-128, 128, (lay["k"], lay["c"], lay["r"], lay["s"]))
    np.testing.assert_array_equal(
        cf.conv2d_channel_first(x, w, lay["st"], lay["pad"], lay["dil"]),
        golden.conv2d(x, w, lay["st"], lay["pad"], lay["dil"]))


def test_refuses_a_kernel_larger_than_the_input():
    with pytest.raises(ValueError, match="larger than the padded input"):
        cf.conv2d_channel_first(np.zeros((1, 1, 2, 2)), np.zeros((1, 1, 3, 3)))


@pytest.mark.parametrize("rows,c,s,want", [(16, 3, 7, 5), (16, 3, 3, 3), (16, 16, 3, 1),
                                           (16, 40, 3, 1), (4, 1, 7, 4), (8, 5, 2, 1)])
def test_multi_tile_is_min_rows_over_c_and_s(rows, c, s, want):
    assert cf.multi_tile(rows, c, s) == want


@pytest.mark.parametrize("seed", range(12))
def test_passes_cover_every_weight_once_and_rows_rebuild_the_operands(seed):
    rng = np.random.default_rng(100 + seed)
    lay = _layer(rng)
    rows, cols = int(rng.choice([2, 4, 8])), int(rng.choice([2, 3, 4]))
    n, c, h, w, k, r, s = (lay[x] for x in "nchwkrs")
    oh, ow = golden.output_hw((h, w), (r, s), lay["st"], lay["pad"], lay["dil"])
    seen = np.zeros((k, c, r, s), dtype=int)
    x = rng.integers(-9, 10, (1, c, h, w))
    xh = cf.to_hwc(x)[0]
    wt = rng.integers(-9, 10, (k, c, r, s))
    y = np.zeros((k, oh * ow), dtype=np.int64)
    for p in cf.passes(rows, cols, c, k, r, s):
        assert len(p.taps) * p.cn <= rows and p.kn <= cols
        assert len({tr for tr, _ in p.taps}) == 1           # one kernel row a pass
        for tr, tq in p.taps:
            seen[p.k0:p.k0 + p.kn, p.c0:p.c0 + p.cn, tr, tq] += 1
        addrs = cf.row_addresses(p, h, w, c, oh, ow, lay["st"], lay["pad"], lay["dil"])
        assert len(addrs) == len(p.taps) * p.cn
        for i, a in enumerate(addrs):                       # row i: tap i // cn, channel
            tr, tq = p.taps[i // p.cn]
            ch = p.c0 + i % p.cn
            ops = cf.gather(xh, a)
            y[p.k0:p.k0 + p.kn] += np.outer(wt[p.k0:p.k0 + p.kn, ch, tr, tq], ops)
    assert (seen == 1).all()
    np.testing.assert_array_equal(
        y.reshape(k, oh, ow), golden.conv2d(x, wt, lay["st"], lay["pad"], lay["dil"])[0])
    if c < rows:
        assert max(len(p.taps) for p in cf.passes(rows, cols, c, k, r, s)) == \
            min(cf.multi_tile(rows, c, s), s)


def test_cost_follows_the_output_pixels_not_the_stride():
    """Sec. III-B: the same output size costs the same at stride 1 and 2 (the stride only
    skips input pixels); multi-tile cuts a C = 3 first layer's passes by min(rows // 3, S)."""
    a = cf.cycles(16, 16, ConvLayer.conv(1, 64, 30, 30, 64, 3, 3, stride=1))   # 28 x 28 out
    b = cf.cycles(16, 16, ConvLayer.conv(1, 64, 57, 57, 64, 3, 3, stride=2))   # 28 x 28 out
    assert a["pixels"] == b["pixels"] and a["cycles"] == b["cycles"]
    first = cf.cycles(16, 16, ConvLayer.conv(1, 3, 224, 224, 64, 7, 7, stride=2, pad=3))
    # 4 blocks of 16 output channels x 7 kernel rows x ceil(7 / 5) tap groups (5 taps of 3
    # channels on 16 rows), where one tap a pass would take 4 x 49
    assert first["passes"] == 4 * 7 * 2
    assert 0 < first["utilization"] <= 1
