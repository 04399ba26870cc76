"""The driver's space-to-depth rewrite (:mod:`bpsa.plan.space_to_depth`) against
:mod:`bpsa.models.golden` alone: the inner stride-1 layer's weight gradient on ``X'`` gives
every ``dW`` of the layer, for random strided shapes (odd sizes, every padding, unread
trailing rows and columns), and the rewrite is chosen only where it saves contexts."""

import numpy as np
import pytest

from bpsa.models import golden
from bpsa.plan.space_to_depth import rewrite
from bpsa.spec.layer import ConvLayer


def _layer(rng):
    while True:
        r, s = (int(v) for v in rng.integers(1, 8, 2))
        st = (int(rng.integers(1, 5)), int(rng.integers(1, 5)))
        if st == (1, 1):
            continue
        h, w = int(rng.integers(1, 24)), int(rng.integers(1, 24))
        pd = (int(rng.integers(0, r + 1)), int(rng.integers(0, s + 1)))
        try:
            layer = ConvLayer.conv(int(rng.integers(1, 3)), int(rng.integers(1, 4)), h, w,
                                   int(rng.integers(1, 4)), r, s, st, pd)
            layer.out_hw
        except ValueError:
            continue
        return layer


def _check(layer, rng):
    sd = rewrite(layer)
    assert sd is not None, layer
    x = rng.integers(-9, 10, layer.x_shape)
    oh, ow = layer.out_hw
    dy = rng.integers(-9, 10, (layer.batch, layer.out_channels, oh, ow))
    want = golden.conv2d_weight_grad(x, dy, (layer.kernel_h, layer.kernel_w), layer.stride,
                                     layer.pad)
    inner = sd.inner
    xi = sd.x(x)
    assert xi.shape == inner.x_shape
    assert inner.stride == (1, 1) and inner.out_hw == (oh, ow)
    got = golden.conv2d_weight_grad(xi, dy, (inner.kernel_h, inner.kernel_w), 1, inner.pad)
    np.testing.assert_array_equal(sd.dw(got), want)
    # X' is a permutation of the elements taps read, with zeros around them
    assert np.count_nonzero(xi) <= np.count_nonzero(x)


def test_random_layers():
    rng = np.random.default_rng(37)
    for _ in range(300):
        _check(_layer(rng), rng)


@pytest.mark.parametrize("layer", [
    ConvLayer.conv(2, 3, 32, 32, 4, 7, 7, 2, 3),      # ResNet's conv1, small
    ConvLayer.conv(1, 3, 35, 35, 2, 11, 11, 4, 2),    # AlexNet's conv1 shape, odd size
    ConvLayer.conv(1, 3, 33, 30, 2, 3, 3, 2, 0),      # SqueezeNet's conv1, odd height
    ConvLayer.conv(1, 2, 9, 9, 2, 1, 1, 3, 0),        # 1 x 1, unread trailing columns
    ConvLayer.conv(1, 1, 5, 5, 1, 2, 2, (2, 1), 2),   # stride on one axis, pad > kernel / 2
])
def test_edge_layers(layer):
    _check(layer, np.random.default_rng(1))


def test_shapes_of_first_layers():
    """ResNet-50's conv1: 12 channels of 113 x 113 planes, 4 x 4 taps, pad 1; AlexNet's: 48
    channels, 3 x 3 taps, no padding."""
    sd = rewrite(ConvLayer.conv(8, 3, 224, 224, 64, 7, 7, 2, 3), rows=16)
    i = sd.inner
    assert (i.channels, i.height, i.width, i.kernel_h, i.kernel_w, i.pad) == (
        12, 113, 113, 4, 4, (1, 1))
    sd = rewrite(ConvLayer.conv(8, 3, 224, 224, 64, 11, 11, 4, 2), rows=16)
    i = sd.inner
    assert (i.channels, i.height, i.kernel_h, i.pad) == (48, 57, 3, (0, 0))


def test_chosen_only_when_it_saves_a_quarter_of_the_contexts():
    # 1 x 1 stride 2: one tap either way, four times the channels
    assert rewrite(ConvLayer.conv(1, 3, 16, 16, 4, 1, 1, 2), rows=16) is None
    # many channels: row groups grow as fast as taps shrink
    assert rewrite(ConvLayer.conv(1, 64, 16, 16, 4, 3, 3, 2, 1), rows=16) is None
    # stride 1, dilation, asymmetric padding: not applicable
    assert rewrite(ConvLayer.conv(1, 3, 16, 16, 4, 3, 3, 1, 1)) is None
    assert rewrite(ConvLayer.conv(1, 3, 16, 16, 4, 3, 3, 2, 1, dil=2)) is None
    assert rewrite(ConvLayer.conv(1, 3, 16, 16, 4, 3, 3, 2, 1, pad_bottom=0)) is None
    assert rewrite(ConvLayer.conv(1, 3, 16, 16, 4, 3, 3, 2, 1), rows=16) is not None
    # 4 rows: C = 3 fills three; 12 channels of 4 x 4 taps are 48 contexts, not 49
    assert rewrite(ConvLayer.conv(1, 3, 32, 32, 4, 7, 7, 2, 3), rows=4) is None
    # 13 channels, 2 x 2 stride 2 on 4 rows: 13 contexts of 1 tap against 16: not enough
    assert rewrite(ConvLayer.conv(1, 13, 4, 4, 4, 2, 2, 2), rows=4) is None
    assert rewrite(ConvLayer.conv(1, 1, 32, 32, 4, 7, 7, 2, 3), rows=4) is not None
