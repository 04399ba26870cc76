"""The layouts of what the output-stationary front ends drain: a row of Y (the forward's
feeder and channel-first, the zero-free loss) and a row of dW (the zero-free gradient), which
:mod:`bpsa.gateware.control.result_addressing` turns into P-buffer accumulations."""

from amaranth.hdl import unsigned
from amaranth.lib import data
from amaranth.utils import ceil_log2

from bpsa.gateware.array.arith import arith_for

__all__ = ["y_layout", "zg_layout"]


def y_layout(config):
    """Payload of the ``y`` port: one drained row of a context.

    ``data[j]``: ``Y[n, k0 + j, oh, ow0 + row]`` (accumulator shape, wrapped; columns with
    ``k0 + j >= K`` carry what the zero-padded W words give, 0); ``n``, ``k0``, ``oh``,
    ``ow0``: the context; ``row``: the array row (the pixel is ``ow0 + row``).
    """
    ar = arith_for(config)
    dim = unsigned(config.dim_width)
    return data.StructLayout({
        "data": data.ArrayLayout(ar.acc_shape, config.cols),
        "n": dim, "k0": dim, "oh": dim, "ow0": dim,
        "row": unsigned(max(1, ceil_log2(config.rows))),
    })


def zg_layout(config):
    """Payload of the ``zg`` port (zero-free gradient): one drained row of a context,
    ``data[j]`` = ``dW[k0 + j, c, r, q]`` of the run's dY block, at ``addr`` = ``c' R S + r S +
    q`` (``c'``: the channel within the run's X block)."""
    ar = arith_for(config)
    return data.StructLayout({"data": data.ArrayLayout(ar.acc_shape, config.cols),
                              "addr": unsigned(2 * (config.dim_width + 2))})
