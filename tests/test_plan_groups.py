"""Packs of groups: the packed layer's forward, loss and gradient (diagonal blocks) of a
block-diagonal W equal the grouped golden model, on grouped and depthwise layers; the packing
fills the columns and leaves MX alone."""

import numpy as np
import pytest

from bpsa.config import load_config
from bpsa.models import golden
from bpsa.plan.groups import block_weights, diagonal_blocks, packed_layer, packing, packs
from bpsa.spec.layer import ConvLayer

SMALL, PAPER16 = load_config("small"), load_config("paper16")


def test_packing_fills_the_columns():
    dw = ConvLayer.conv(1, 32, 8, 8, 32, 3, 3, groups=32)          # depthwise
    assert packing(PAPER16, dw) == 16 and packing(SMALL, dw) == SMALL.cols
    assert packing(PAPER16, ConvLayer.conv(1, 32, 8, 8, 64, 3, 3, groups=32)) == 8   # x2
    assert packing(PAPER16, ConvLayer.conv(1, 128, 8, 8, 128, 3, 3, groups=32)) == 4
    assert packing(PAPER16, ConvLayer.conv(1, 1024, 8, 8, 1024, 3, 3, groups=32)) == 1
    assert packing(PAPER16, ConvLayer.conv(1, 8, 8, 8, 8, 3, 3)) == 1
    assert packing(load_config("small_mxint8"), dw) == 1
    assert packs(ConvLayer.conv(1, 6, 4, 4, 6, 3, 3, groups=6), 4) == [(0, 4), (4, 2)]
    with pytest.raises(ValueError, match="at least one group"):
        packs(dw, 0)


@pytest.mark.parametrize("c,k,groups,stride", [(6, 6, 6, 2), (6, 12, 6, 1), (8, 12, 4, 1),
                                               (9, 3, 3, 2)])
def test_packs_compute_the_grouped_layer(c, k, groups, stride):
    rng = np.random.default_rng(c * 100 + k)
    layer = ConvLayer.conv(2, c, 7, 6, k, 3, 3, stride, 1, groups=groups)
    x = rng.integers(-9, 9, layer.x_shape)
    w = rng.integers(-9, 9, layer.w_shape)
    oh, ow = layer.out_hw
    dy = rng.integers(-9, 9, (2, k, oh, ow))
    kw = dict(stride=stride, padding=1, groups=groups)
    want = (golden.conv2d(x, w, **kw), golden.conv2d_input_grad(dy, w, (7, 6), **kw),
            golden.conv2d_weight_grad(x, dy, (3, 3), **kw))
    cg, kg = c // groups, k // groups
    for p in (1, 2, groups):
        got = [[], [], []]
        for first, count in packs(layer, p):
            one = packed_layer(layer, count)
            assert (one.channels, one.out_channels, one.groups) == (count * cg, count * kg, 1)
            wp = block_weights(w, layer, first, count)
            xs, dys = x[:, first * cg:(first + count) * cg], dy[:, first * kg:(first + count) * kg]
            got[0].append(golden.conv2d(xs, wp, stride, 1))
            got[1].append(golden.conv2d_input_grad(dys, wp, (7, 6), stride, 1))
            got[2].append(diagonal_blocks(golden.conv2d_weight_grad(xs, dys, (3, 3), stride, 1),
                                          layer, count))
        for g, wnt, axis in zip(got, want, (1, 1, 0)):
            assert np.array_equal(np.concatenate(g, axis), wnt), p
    # the blocks off the diagonal are zero
    wp = block_weights(w, layer, 0, groups)
    mask = np.zeros(wp.shape[:2], bool)
    for g in range(groups):
        mask[g * kg:(g + 1) * kg, g * cg:(g + 1) * cg] = True
    assert not wp[~mask].any() and np.array_equal(diagonal_blocks(wp, layer, groups), w)
