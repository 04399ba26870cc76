"""The layer types, their text form and the output-size formula."""

import itertools

import numpy as np
import pytest

from bpsa.spec.layer import (
    ConvLayer,
    FcLayer,
    out_size,
    output_hw,
    pair,
    parse_fc,
    parse_layer,
)


def _windows(size, kernel, stride, pad, dil):
    """Output positions counted one by one: windows whose taps lie in the padded axis."""
    return sum(1 for o in range(size + 2 * pad)
               if o * stride + dil * (kernel - 1) < size + 2 * pad)


def test_out_size_counts_windows():
    for size, kernel, stride, pad, dil in itertools.product(range(1, 9), range(1, 4),
                                                            range(1, 4), range(3), range(1, 3)):
        if dil * (kernel - 1) + 1 <= size + 2 * pad:
            assert out_size(size, kernel, stride, pad, dil) == \
                _windows(size, kernel, stride, pad, dil)


def test_out_size_asymmetric_padding():
    # top 1, bottom 0: 11 rows, windows of 3 at rows 0, 2, 4, 6, 8
    assert out_size(10, 3, 2, 1, 1, pad_end=0) == 5
    assert out_size(10, 3, 2, 1, 1, pad_end=2) == 6


def test_output_hw_checks():
    assert output_hw((224, 224), (7, 7), 2, 3) == (112, 112)
    assert output_hw((5, 7), (3, 2), (2, 1), (0, 1), (1, 2)) == (2, 7)
    with pytest.raises(ValueError, match="stride must be >= 1"):
        output_hw((5, 5), (3, 3), 0)
    with pytest.raises(ValueError, match="padding must be >= 0"):
        output_hw((5, 5), (3, 3), 1, -1)
    with pytest.raises(ValueError, match="dilation must be >= 1"):
        output_hw((5, 5), (3, 3), 1, 0, 0)
    with pytest.raises(ValueError, match="input_hw must be >= 1"):
        output_hw((0, 5), (3, 3))
    with pytest.raises(ValueError, match="spans 5 in axis 0"):
        output_hw((4, 6), (3, 3), dilation=(2, 1))
    with pytest.raises(TypeError, match="stride must be an integer"):
        output_hw((5, 5), (3, 3), 1.5)


def test_parse_layer_defaults_and_text_round_trip():
    layer = parse_layer("C=3,H=32,K=8,R=7,stride=2,pad=3")
    assert layer == ConvLayer(1, 3, 32, 32, 8, 7, 7, 2, 2, 3, 3, 1, 1)
    assert layer.out_hw == (16, 16)
    assert parse_layer(layer.text()) == layer
    rect = parse_layer("C=2,H=9,W=11,K=5,R=2,S=3,stride=2x1,pad=1x0,dilation=1x2,N=2")
    assert (rect.stride, rect.pad, rect.dil, rect.batch) == ((2, 1), (1, 0), (1, 2), 2)
    assert parse_layer(rect.text()) == rect


@pytest.mark.parametrize("text,match", [
    ("C=3,H=8,K=2", "layer needs R"),
    ("C=3,H=8,K=2,R=3,Q=1", "unknown layer key 'Q'"),
    ("C=3,H=8,K=2,R=3,C=4", "given twice"),
    ("C=3,H=8,K=2,R=3,stride=0", "stride must be at least 1"),
    ("C=3,H=8,K=2,R=3,pad=1x2x3", "pad must be a non-negative integer or HxW"),
    ("C=3,H=2,K=2,R=5", "spans 5"),
    ("C3,H=8,K=2,R=3", "is not KEY=VALUE"),
])
def test_parse_layer_errors(text, match):
    with pytest.raises(ValueError, match=match):
        parse_layer(text)


def test_padded_rows_and_asymmetric_out_hw():
    layer = ConvLayer(1, 1, 4, 3, 1, 3, 3, pad_h=2, pad_bottom=0)
    assert layer.padded_rows([[[[1] * 3] * 4]]).shape == (1, 1, 6, 3)
    assert layer.out_hw == (4, 1)


def test_pair():
    """Ints and pairs of ints (tuple, list, array) as two Python ints; errors name the value."""
    assert pair(3) == (3, 3) and pair((2, 5)) == (2, 5) and pair([1, 4]) == (1, 4)
    assert pair(np.array([2, 3])) == (2, 3) and type(pair(np.int64(2))[0]) is int
    with pytest.raises(ValueError, match=r"stride must be an integer or an \(h, w\) pair"):
        pair((1, 2, 3), "stride")
    for bad in ("22", 1.0, True, (1, 2.5)):
        with pytest.raises(TypeError, match="padding must be an integer"):
            pair(bad, "padding")


def test_dilated_out_hw():
    """The dilated output: ``stride (OH - 1) + 1`` per axis; refused like ``out_hw``."""
    layer = ConvLayer.conv(1, 1, 9, 8, 1, 3, 2, (2, 3), (1, 0), 1)
    assert layer.out_hw == (5, 3) and layer.dilated_out_hw == (9, 7)
    with pytest.raises(ValueError, match="padded input"):
        ConvLayer.conv(1, 1, 2, 2, 1, 3, 3).dilated_out_hw


def test_parse_fc():
    assert parse_fc("N=8,I=20,O=10") == FcLayer(8, 20, 10)
    assert parse_fc("i=3, o=2") == FcLayer(1, 3, 2)
    assert parse_fc(FcLayer(4, 5, 6).text()) == FcLayer(4, 5, 6)
    for text, match in (("I=3", "has no O="), ("N=1,I=3,O=x", "is not N=, I= or O="),
                        ("N=0,I=3,O=2", "batch = 0")):
        with pytest.raises(ValueError, match=match):
            parse_fc(text)


def test_parse_pool():
    from bpsa.spec.layer import parse_pool
    p = parse_pool("C=64,H=112,R=3,stride=2,pad=1,kind=max")
    assert (p.batch, p.channels, p.height, p.width, p.kernel, p.stride, p.pad, p.relu) == (
        1, 64, 112, 112, (3, 3), (2, 2), (1, 1), False)
    assert p.out_hw == (56, 56)
    assert parse_pool(p.text()) == p
    q = parse_pool("C=8,H=6,W=4,R=2,S=1,kind=avg,N=2,relu=1")
    assert (q.kernel, q.stride, q.relu, q.out_hw) == ((2, 1), (2, 1), True, (3, 4))
    g = parse_pool("C=2048,H=7,kind=global_avg")
    assert (g.kernel, g.stride, g.pad, g.out_hw) == ((7, 7), (7, 7), (0, 0), (1, 1))
    for text, msg in [("C=8,H=7,R=2", "needs kind"), ("C=8,H=7,kind=mean,R=2", "one of max"),
                      ("C=8,H=7,kind=max", "needs R"), ("C=8,H=7,kind=max,R=2,stride=0",
                                                        "stride must be at least 1"),
                      ("C=8,H=7,kind=max,R=3,pad=2", "more than kernel // 2"),
                      ("C=8,H=2,kind=max,R=5,pad=1", "larger than the padded input"),
                      ("C=8,H=7,kind=global_avg,R=2", "drop R"),
                      ("C=8,H=7,kind=max,R=2,K=3", "unknown pooling layer key 'K'"),
                      ("C=8,H=7,kind=max,R=2,relu=2", "relu must be 0 or 1"),
                      ("C=0,H=7,kind=max,R=2", "C must be at least 1"),
                      ("C=8,H=7,kind=max,R=2,R=3", "given twice")]:
        with pytest.raises(ValueError, match=msg):
            parse_pool(text)


def test_dict_round_trip():
    """A job carries its layer as a dict: missing optional fields take their defaults, keys
    that are not fields (a pooling job's kind and relu) are left out."""
    from bpsa.spec.layer import ConvLayer
    layer = ConvLayer.conv(2, 3, 9, 7, 4, 3, 2, stride=(2, 1), pad=1, dil=(1, 2), pad_bottom=0)
    assert ConvLayer.from_dict(layer.to_dict()) == layer
    d = {"batch": 1, "channels": 2, "height": 5, "width": 6, "out_channels": 2, "kernel_h": 3,
         "kernel_w": 3, "stride_h": 2, "kind": "max", "relu": True}
    assert ConvLayer.from_dict(d) == ConvLayer(1, 2, 5, 6, 2, 3, 3, stride_h=2)


def test_conv_operands_check_shapes_against_each_other():
    """The layer of a phase's operands, or the first disagreement named (the golden model
    and the host driver share the check)."""
    from bpsa.spec.layer import conv_operands
    x, w, dy = np.zeros((2, 4, 12, 12)), np.zeros((6, 4, 3, 3)), np.zeros((2, 6, 6, 6))
    geo = dict(stride=2, padding=1)
    want = ConvLayer.conv(2, 4, 12, 12, 6, 3, 3, 2, 1)
    assert conv_operands("forward", x=x, w=w, **geo) == want
    assert conv_operands("loss", dy=dy, w=w, input_hw=12, **geo) == want
    assert conv_operands("gradient", x=x, dy=dy, kernel_hw=(3, 3), **geo) == want
    for call, msg in [
        (lambda: conv_operands("forward", x=x, w=np.zeros((6, 5, 3, 3))),
         "w has 5 input channels but x has 4"),
        (lambda: conv_operands("forward", x=x), r"the forward needs w \(K x C x R x S\)"),
        (lambda: conv_operands("loss", dy=dy[0], w=w, input_hw=12),
         r"dy must have 4 dimensions \(N x K x OH x OW\), not shape \(6, 6, 6\)"),
        (lambda: conv_operands("loss", dy=dy[:, :5], w=w, input_hw=12, **geo),
         "dy has 5 channels but w has 6 output channels"),
        (lambda: conv_operands("loss", dy=dy, w=w, input_hw=0, **geo),
         "input_hw must be >= 1 in both axes, not 0"),
        (lambda: conv_operands("gradient", x=x[:1], dy=dy, kernel_hw=3, **geo),
         "dy has batch 2 but x has 1"),
        (lambda: conv_operands("gradient", x=x, dy=dy, kernel_hw=3),
         r"dy must have shape \(N, 6, 10, 10\) for input_hw \(12, 12\), kernel_hw \(3, 3\)"),
        (lambda: conv_operands("forward", x=x, w=np.zeros((6, 4, 15, 3))),
         "kernel_hw .* spans 15"),
        (lambda: conv_operands("pool", x=x), "phase must be one of forward, loss, gradient"),
    ]:
        with pytest.raises(ValueError, match=msg):
            call()
    # fit=False: a kernel larger than the input passes (the hardware refuses it)
    assert conv_operands("forward", x=x, w=np.zeros((6, 4, 15, 3)), fit=False).kernel_h == 15


def test_check_fields_names_what_does_not_fit():
    lay = ConvLayer.conv(1, 4, 8, 5000, 3, 3, 3)
    with pytest.raises(ValueError, match=r"^layer W = 5000 does not fit the descriptor's "
                                         r"12-bit fields \(dim_width 12: at most 4095\)$"):
        lay.check_fields(12)
    lay.check_fields(13)
    with pytest.raises(ValueError, match="^FC layer O = 5000 does not fit"):
        FcLayer(2, 3, 5000).check_fields(12)


def test_grouped_layer():
    from bpsa.spec.layer import ConvLayer, parse_layer
    lay = parse_layer("C=32,H=14,K=64,R=3,pad=1,stride=2,N=2,groups=8")
    assert lay.groups == 8 and lay.w_shape == (64, 4, 3, 3) and lay.crs == 36
    assert lay.macs == 2 * 64 * 7 * 7 * 4 * 9
    assert parse_layer(lay.text()) == lay and "groups=8" in lay.text()
    one = lay.group_layer()
    assert (one.channels, one.out_channels, one.groups) == (4, 8, 1)
    assert one.macs * 8 == lay.macs and one.group_layer() is one
    assert "groups" not in ConvLayer.conv(1, 4, 8, 8, 4, 3, 3).text()
    dw = ConvLayer.conv(1, 16, 8, 8, 16, 3, 3, groups=16)
    assert dw.w_shape == (16, 1, 3, 3) and ConvLayer.from_dict(dw.to_dict()) == dw
    with pytest.raises(ValueError, match=r"groups = 3 must be a positive integer that divides "
                       r"the input channels \(16\) and the output channels \(16\)"):
        ConvLayer.conv(1, 16, 8, 8, 16, 3, 3, groups=3)
    with pytest.raises(ValueError, match="layer key groups must be at least 1"):
        parse_layer("C=4,H=8,K=4,R=3,groups=0")
    # the descriptor fields are the group's: 2^16 channels in 2 groups fit 16-bit fields
    ConvLayer.conv(1, 1 << 16, 1, 1, 2, 1, 1, groups=2).check_fields(16)
    with pytest.raises(ValueError, match="a descriptor runs an ordinary convolution"):
        from bpsa.plan.tiling import setup_descriptor
        from bpsa.spec.regmap import Phase
        setup_descriptor(Phase.FORWARD, dw)
