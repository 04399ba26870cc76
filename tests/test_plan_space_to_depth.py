"""The driver's space-to-depth rewrite (:mod:`bpsa.plan.space_to_depth`) against
:mod:`bpsa.models.golden` alone: the inner stride-1 layer on ``X'`` gives the layer's weight
gradient, and where the rewrite is dense its forward, for random strided shapes
(odd sizes, every padding, unread trailing rows and columns); the rewrite is chosen only
where it saves contexts or input reads."""

import numpy as np
import pytest

from bpsa.models import golden
from bpsa.plan.space_to_depth import rewrite
from bpsa.spec.layer import ConvLayer


def _layer(rng, dense=False):
    while True:
        st = (int(rng.integers(1, 5)), int(rng.integers(1, 5)))
        if st == (1, 1):
            continue
        if dense:       # a kernel of a multiple of the stride, or 1 x 1
            r, s = ((int(rng.integers(0, 3)) * f or 1) for f in st)
        else:
            r, s = (int(v) for v in rng.integers(1, 8, 2))
        h, w = int(rng.integers(1, 24)), int(rng.integers(1, 24))
        pd = (int(rng.integers(0, r + 1)), int(rng.integers(0, s + 1)))
        try:
            layer = ConvLayer.conv(int(rng.integers(1, 3)), int(rng.integers(1, 4)), h, w,
                                   int(rng.integers(1, 4)), r, s, st, pd)
            layer.out_hw
        except ValueError:
            continue
        return layer


def _tensors(layer, rng):
    oh, ow = layer.out_hw
    return (rng.integers(-9, 10, layer.x_shape), rng.integers(-9, 10, layer.w_shape),
            rng.integers(-9, 10, (layer.batch, layer.out_channels, oh, ow)))


def _check_gradient(layer, rng):
    sd = rewrite(layer)
    assert sd is not None, layer
    x, _, dy = _tensors(layer, rng)
    want = golden.conv2d_weight_grad(x, dy, (layer.kernel_h, layer.kernel_w), layer.stride,
                                     layer.pad)
    inner = sd.inner
    xi = sd.x(x)
    assert xi.shape == inner.x_shape
    assert inner.stride == (1, 1) and inner.out_hw == layer.out_hw
    got = golden.conv2d_weight_grad(xi, dy, (inner.kernel_h, inner.kernel_w), 1, inner.pad)
    np.testing.assert_array_equal(sd.dw(got), want)
    # X' is a permutation of the elements taps read, with zeros around them
    assert np.count_nonzero(xi) <= np.count_nonzero(x)


def _check_dense(layer, rng):
    """The forward of a dense rewrite."""
    sd = rewrite(layer, phase="forward", mode="feeder")
    assert sd is not None and sd.dense, layer
    x, w, _ = _tensors(layer, rng)
    inner = sd.inner
    wi = sd.weights(w)
    assert wi.shape == inner.w_shape
    assert sorted(wi.ravel()) == sorted(w.ravel())          # W permuted, no zero added
    np.testing.assert_array_equal(golden.conv2d(sd.x(x), wi, 1, inner.pad),
                                  golden.conv2d(x, w, layer.stride, layer.pad))


def test_random_gradients():
    rng = np.random.default_rng(37)
    for _ in range(300):
        _check_gradient(_layer(rng), rng)


def test_random_dense_layers():
    """(Padding wider than a plane's symmetric padding can hold, ``pad >= stride`` with a
    kernel of one phase's taps, has no rewrite: such layers are skipped, most are not.)"""
    rng = np.random.default_rng(38)
    ran = 0
    for _ in range(200):
        layer = _layer(rng, dense=True)
        if rewrite(layer, phase="forward", mode="feeder") is None:
            continue
        _check_gradient(layer, rng)
        _check_dense(layer, rng)
        ran += 1
    assert ran >= 150


@pytest.mark.parametrize("layer", [
    ConvLayer.conv(2, 3, 32, 32, 4, 7, 7, 2, 3),      # ResNet's conv1, small
    ConvLayer.conv(1, 3, 35, 35, 2, 11, 11, 4, 2),    # AlexNet's conv1 shape, odd size
    ConvLayer.conv(1, 3, 33, 30, 2, 3, 3, 2, 0),      # SqueezeNet's conv1, odd height
    ConvLayer.conv(1, 2, 9, 9, 2, 1, 1, 3, 0),        # 1 x 1, unread trailing columns
    ConvLayer.conv(1, 1, 5, 5, 1, 2, 2, (2, 1), 2),   # stride on one axis, pad > kernel / 2
])
def test_edge_gradients(layer):
    _check_gradient(layer, np.random.default_rng(1))


@pytest.mark.parametrize("layer", [
    ConvLayer.conv(2, 3, 9, 9, 4, 1, 1, 2, 0),        # a downsample, odd size
    ConvLayer.conv(1, 2, 10, 7, 3, 1, 1, (3, 2), 0),  # rectangular strides
    ConvLayer.conv(1, 2, 8, 8, 3, 2, 2, 2, 0),        # 2 x 2 stride 2: four phases, one tap
    ConvLayer.conv(1, 2, 9, 9, 3, 4, 4, 2, 1),        # 4 x 4 stride 2, padded
])
def test_edge_dense_layers(layer):
    _check_dense(layer, np.random.default_rng(2))


def test_shapes_of_resnet50_layers():
    """ResNet-50's conv1 gradient: 12 channels of 113 x 113 planes, 4 x 4 taps, pad 1;
    AlexNet's: 48 channels, 3 x 3 taps, no padding; a 1 x 1 stride-2 downsample in every
    forward and gradient: the even rows and columns, one phase (the loss is not rewritten)."""
    sd = rewrite(ConvLayer.conv(8, 3, 224, 224, 64, 7, 7, 2, 3), rows=16)
    i = sd.inner
    assert (i.channels, i.height, i.width, i.kernel_h, i.kernel_w, i.pad) == (
        12, 113, 113, 4, 4, (1, 1))
    sd = rewrite(ConvLayer.conv(8, 3, 224, 224, 64, 11, 11, 4, 2), rows=16)
    i = sd.inner
    assert (i.channels, i.height, i.kernel_h, i.pad) == (48, 57, 3, (0, 0))
    down = ConvLayer.conv(8, 512, 28, 28, 1024, 1, 1, 2)
    assert rewrite(down, rows=16, phase="loss") is None
    for phase, mode in (("forward", "channel_first"), ("gradient", "zero_free")):
        i = rewrite(down, rows=16, phase=phase, mode=mode).inner
        assert (i.channels, i.height, i.width, i.kernel_h, i.stride) == (512, 14, 14, 1,
                                                                         (1, 1))


def test_chosen_only_when_it_saves():
    # many channels: row groups grow as fast as taps shrink, and every element is read
    assert rewrite(ConvLayer.conv(1, 64, 16, 16, 4, 3, 3, 2, 1), rows=16) is None
    # stride 1, dilation, asymmetric padding, a mode the rewrite does not run in
    assert rewrite(ConvLayer.conv(1, 3, 16, 16, 4, 3, 3, 1, 1)) is None
    assert rewrite(ConvLayer.conv(1, 3, 16, 16, 4, 3, 3, 2, 1, dil=2)) is None
    assert rewrite(ConvLayer.conv(1, 3, 16, 16, 4, 3, 3, 2, 1, pad_bottom=0)) is None
    assert rewrite(ConvLayer.conv(1, 3, 16, 16, 4, 1, 1, 2), phase="loss") is None
    assert rewrite(ConvLayer.conv(1, 3, 16, 16, 4, 1, 1, 2), phase="gradient",
                   mode="bp_im2col") is None
    assert rewrite(ConvLayer.conv(1, 3, 16, 16, 4, 3, 3, 2, 1), rows=16) is not None
    # 4 rows: C = 3 fills three; 12 channels of 4 x 4 taps are 48 contexts, not 49
    assert rewrite(ConvLayer.conv(1, 3, 32, 32, 4, 7, 7, 2, 3), rows=4) is None
    # 13 channels, 2 x 2 stride 2 on 4 rows: 13 contexts of 1 tap against 16, all read
    assert rewrite(ConvLayer.conv(1, 13, 4, 4, 4, 2, 2, 2), rows=4) is None
    assert rewrite(ConvLayer.conv(1, 1, 32, 32, 4, 7, 7, 2, 3), rows=4) is not None
    # the forward: dense only (a 3 x 3 stride-2 W' would hold zeros)
    assert rewrite(ConvLayer.conv(1, 3, 16, 16, 4, 3, 3, 2, 1), phase="forward",
                   mode="feeder") is None
    # a rewrite that is not dense has no W'
    with pytest.raises(ValueError, match="not dense"):
        rewrite(ConvLayer.conv(1, 3, 16, 16, 4, 3, 3, 2, 1)).weights(np.ones((4, 3, 3, 3)))
    # every element read (2 x 2 stride 2): nothing to save in the forward
    assert rewrite(ConvLayer.conv(1, 3, 16, 16, 4, 2, 2, 2), rows=16, phase="forward",
                   mode="feeder") is None


def test_a_rewrite_whose_inner_layer_does_not_run_is_not_taken():
    """``tiling.rewrite_of``: the rewrite only when its inner layer runs on the configuration
    (its plan or column strips), else the layer runs as given: on buffers of 16 words a
    first layer's 12-channel inner layer has no plan, and the layer keeps its own."""
    from bpsa.config import load_config
    from bpsa.plan import tiling
    small = load_config("small")
    layer = ConvLayer.conv(1, 1, 32, 32, 4, 7, 7, 2, 3)
    assert tiling.rewrite_of(small, "gradient", layer, "zero_free") is not None
    tiny = small.replace(buf_a_depth=16, buf_b_depth=16, buf_p_depth=64, name="tiny16")
    sd = rewrite(layer, tiny.rows)
    assert sd is not None
    with pytest.raises(ValueError):
        tiling.plan_or_strips(tiny, "gradient", sd.inner, mode="zero_free")
    assert tiling.rewrite_of(tiny, "gradient", layer, "zero_free") is None
