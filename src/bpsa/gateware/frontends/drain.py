"""The layouts of what the output-stationary front ends drain: a row of Y (the forward's
feeder and channel-first, the zero-free loss) and a row of dW (the zero-free gradient), which
:mod:`bpsa.gateware.control.result_addressing` turns into P-buffer accumulations."""

from amaranth.hdl import Signal, unsigned
from amaranth.lib import data
from amaranth.utils import ceil_log2

from bpsa.gateware.array.arith import arith_for

__all__ = ["context_spacing", "y_layout", "zg_layout"]


def y_layout(config):
    """Payload of the ``y`` port: one drained row of a context.

    ``data[j]``: ``Y[n, k0 + j, oh, ow0 + row]`` (accumulator shape, wrapped; columns with
    ``k0 + j >= K`` carry what the zero-padded W words give, 0); ``n``, ``k0``, ``oh``,
    ``ow0``: the context; ``row``: the array row (the pixel is ``ow0 + row``). MX: ``data``
    holds block sums (or parts of blocks), with their E8M0 scale codes ``scale_row`` (the
    array-row operand's, one a vector) and ``scale_cols`` (one a column), as P's
    :func:`~bpsa.gateware.results.psum_buffer.accumulate_layout` takes them.
    """
    ar = arith_for(config)
    dim = unsigned(config.dim_width)
    fields = {
        "data": data.ArrayLayout(ar.acc_shape, config.cols),
        "n": dim, "k0": dim, "oh": dim, "ow0": dim,
        "row": unsigned(max(1, ceil_log2(config.rows))),
    }
    if config.is_mx:
        fields.update(scale_row=unsigned(8),
                      scale_cols=data.ArrayLayout(unsigned(8), config.cols))
    return data.StructLayout(fields)


def zg_layout(config):
    """Payload of the ``zg`` port (zero-free gradient): one drained row of a context,
    ``data[j]`` = ``dW[k0 + j, c, r, q]`` of the run's dY block, at ``addr`` = ``c' R S + r S +
    q`` (``c'``: the channel within the run's X block). MX: ``data`` holds a segment's block
    sums, with the E8M0 scale codes ``scale_row`` (X's, of the row's channel) and
    ``scale_cols`` (dY's, one a column), as P's
    :func:`~bpsa.gateware.results.psum_buffer.accumulate_layout` takes them."""
    ar = arith_for(config)
    fields = {"data": data.ArrayLayout(ar.acc_shape, config.cols),
              "addr": unsigned(2 * (config.dim_width + 2))}
    if config.is_mx:
        fields.update(scale_row=unsigned(8),
                      scale_cols=data.ArrayLayout(unsigned(8), config.cols))
    return data.StructLayout(fields)


def context_spacing(m, ended, cycles):
    """Output-stationary contexts ``cycles`` apart: ``ended`` is high the cycle after a
    context's last vector entered the array (registered). Returns ``(gap, may_end)``: the
    cycles since (saturating at ``cycles``; an engine resets it to ``cycles`` at a run's
    start) and whether a context's last vector may enter now."""
    gap = Signal(range(cycles + 1), init=cycles)
    with m.If(ended):
        m.d.sync += gap.eq(1)
    with m.Elif(gap != cycles):
        m.d.sync += gap.eq(gap + 1)
    return gap, ~ended & (gap >= cycles - 1)
