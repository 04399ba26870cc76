"""The drain layouts of the output-stationary front ends: a Y row holds ``cols`` accumulators
and the context that places them; a dW row ``cols`` accumulators and the address in the run's
dW block; both follow the configuration's widths, integer and floating point."""

import pytest
from amaranth.hdl import Shape

from bpsa.config import load_config
from bpsa.gateware.frontends.drain import y_layout, zg_layout


@pytest.mark.parametrize("name,acc_bits", [("small", 32), ("paper16", 32), ("small_bf16", 32)])
def test_y_row(name, acc_bits):
    config = load_config(name)
    lay = y_layout(config)
    data = lay["data"].shape
    assert data.length == config.cols
    assert Shape.cast(data.elem_shape).width == acc_bits
    for field in ("n", "k0", "oh", "ow0"):
        assert Shape.cast(lay[field].shape).width == config.dim_width
    # the row index reaches every row of the array (at least one bit)
    row_bits = Shape.cast(lay["row"].shape).width
    assert 2 ** row_bits >= config.rows and row_bits >= 1


@pytest.mark.parametrize("name", ["small", "paper16", "ecp5_train"])
def test_dw_row(name):
    config = load_config(name)
    lay = zg_layout(config)
    assert lay["data"].shape.length == config.cols
    # the address c' R S + r S + q: a channel of the block (a dimension) times a kernel plane
    # (R S, a dimension) plus one more plane fits
    dim = 2 ** config.dim_width - 1
    assert 2 ** Shape.cast(lay["addr"].shape).width > (dim + 1) * dim
