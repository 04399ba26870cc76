"""Where each engine's result vectors go in P: one small component per result stream.

The P word of a result is a function of the run's geometry (given at the run's start) and of
the vector's place in the run (the engine's output tags).
"""

from amaranth.hdl import Cat, Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from bpsa.config import Config
from bpsa.gateware.results.psum_buffer import accumulate_layout
from bpsa.gateware.frontends.bp_im2col.conv_backward import TILE_WIDTH, drain_layout, out_layout
from bpsa.gateware.frontends.drain import y_layout, zg_layout

__all__ = ["BackwardResults", "FcDrainResults", "ForwardResults", "ZeroFreeResults"]

#: Width of the run geometry registers.
_W = 48


def _valid_stream(layout):
    return wiring.Signature({"valid": Out(1), "payload": Out(layout)})


def _copy(m, dst, src, cols):
    """The result's lanes (``data``) and, in MX, its scale codes (``scale_row``,
    ``scale_cols``) from the engine's payload ``src`` into P's ``dst``."""
    for j in range(cols):
        m.d.comb += dst.data[j].eq(src.data[j])
    if hasattr(src, "scale_row"):
        m.d.comb += [dst.scale_row.eq(src.scale_row), dst.scale_cols.eq(src.scale_cols)]


class ForwardResults(wiring.Component):
    """The forward engine's drained rows: ``Y[oh, ow0 + row]`` goes to P word ``row_base p_row
    + oh OW + ow0 + row`` (``row_base``: the run's output-channel block within the step,
    ``p_row``: the P words of a block); pixels past the row's end (``ow0 + row >= OW``) are
    dropped.

    Members
    -------
    y : In(valid / payload: :func:`bpsa.gateware.frontends.drain.y_layout`)
    ow : In(dim_width)
        The layer's OW.
    start : In(1)
        A run starts: ``row_base`` and ``p_row`` are taken for the run.
    row_base, p_row : In
    acc : Out(stream.Signature(accumulate_layout(config)))
    """

    def __init__(self, config):
        self.config = config
        super().__init__({"y": In(_valid_stream(y_layout(config))),
                          "ow": In(config.dim_width), "start": In(1),
                          "row_base": In(config.dim_width + 1), "p_row": In(_W),
                          "acc": Out(stream.Signature(accumulate_layout(config)))})

    def elaborate(self, platform):
        m = Module()
        y = self.y.payload
        base = Signal(exact_log2(self.config.buf_p_depth) + 1)
        with m.If(self.start):
            m.d.sync += base.eq(self.row_base * self.p_row)
        pix = Signal(self.config.dim_width + 1)
        m.d.comb += [pix.eq(y.ow0 + y.row),
                     self.acc.valid.eq(self.y.valid & (pix < self.ow)),
                     self.acc.payload.addr.eq(base + y.oh * self.ow + pix)]
        _copy(m, self.acc.payload, y, self.config.cols)
        return m


class ZeroFreeResults(wiring.Component):
    """A zero-free run's drained rows: offset ``addr`` goes to P word ``row_base p_row +
    addr`` (gradient: ``row_base`` the run's output-channel block within the step, ``p_row``
    the P words of a block, ``addr`` the channel and tap; loss: ``row_base`` the run's image
    within the step, ``p_row`` the P words of an image's band, ``addr`` the pixel in it).

    Members
    -------
    zg : In(valid / payload: :func:`bpsa.gateware.frontends.drain.zg_layout`)
        The engine's ``zg`` (gradient) or ``zl`` (loss) rows.
    start : In(1)
        A run starts: the geometry below is taken for the run.
    row_base, p_row : In
    acc : Out(stream.Signature(accumulate_layout(config)))
    """

    def __init__(self, config):
        if not isinstance(config, Config):
            raise TypeError(f"config must be a Config, not {config!r}")
        self.config = config
        super().__init__({"zg": In(_valid_stream(zg_layout(config))), "start": In(1),
                          "row_base": In(config.dim_width + 1), "p_row": In(_W),
                          "acc": Out(stream.Signature(accumulate_layout(config)))})

    def elaborate(self, platform):
        m = Module()
        base = Signal(exact_log2(self.config.buf_p_depth) + 1)
        with m.If(self.start):
            m.d.sync += base.eq(self.row_base * self.p_row)
        m.d.comb += [self.acc.valid.eq(self.zg.valid),
                     self.acc.payload.addr.eq(base + self.zg.payload.addr)]
        _copy(m, self.acc.payload, self.zg.payload, self.config.cols)
        return m


class BackwardResults(wiring.Component):
    """The backward engine's result vectors: row ``row`` of the run's ``t``-th tile goes to P
    word ``(row + row_base) p_row + blk``, where the tiles walk ``kt_rows`` row tiles for each
    column block ``blk``.

    Members
    -------
    out : In(valid / payload: :func:`bpsa.gateware.frontends.bp_im2col.conv_backward.out_layout`)
    start : In(1)
        A run starts: the tile count restarts, and the geometry below is taken for the run.
    row_base, p_row, kt_rows : In
        The run's first P row (gradient: output channel of the group), words per P row, row
        tiles per column block.
    acc : Out(stream.Signature(accumulate_layout(config)))
    """

    def __init__(self, config):
        if not isinstance(config, Config):
            raise TypeError(f"config must be a Config, not {config!r}")
        self.config = config
        paw = exact_log2(config.buf_p_depth)
        super().__init__({"out": In(_valid_stream(out_layout(config))), "start": In(1),
                          "row_base": In(config.dim_width + 1), "p_row": In(paw + 1),
                          "kt_rows": In(_W),
                          "acc": Out(stream.Signature(accumulate_layout(config)))})

    def elaborate(self, platform):
        m = Module()
        paw = exact_log2(self.config.buf_p_depth)
        o = self.out.payload
        run_row_base = Signal.like(self.row_base)
        run_p_row = Signal.like(self.p_row)
        run_kt_rows = Signal(_W)
        cur_tile = Signal(TILE_WIDTH)
        blk, tib = Signal(paw + 1), Signal(_W)
        blk_now, tib_now = Signal.like(blk), Signal.like(tib)
        m.d.comb += [blk_now.eq(blk), tib_now.eq(tib)]
        with m.If(o.tile != cur_tile):
            with m.If(tib + 1 == run_kt_rows):
                m.d.comb += [blk_now.eq(blk + 1), tib_now.eq(0)]
            with m.Else():
                m.d.comb += tib_now.eq(tib + 1)
        with m.If(self.out.valid):
            m.d.sync += [cur_tile.eq(o.tile), blk.eq(blk_now), tib.eq(tib_now)]
        with m.If(self.start):
            m.d.sync += [cur_tile.eq(0), blk.eq(0), tib.eq(0), run_kt_rows.eq(self.kt_rows),
                         run_row_base.eq(self.row_base), run_p_row.eq(self.p_row)]
        m.d.comb += [self.acc.valid.eq(self.out.valid),
                     self.acc.payload.addr.eq((o.row + run_row_base) * run_p_row + blk_now)]
        _copy(m, self.acc.payload, o, self.config.cols)
        return m


class FcDrainResults(wiring.Component):
    """FC backward: the dW rows the engine drains, queued (a FIFO of ``rows + 1``) for the
    accumulate pipeline's free cycles. Drained row ``row`` of the run's ``t``-th tile is dW row
    ``o0 + ot rows + row`` (output tiles inner, ``kt_rows`` of them, input tiles ``it``
    outer), P word ``(dw_p0 + dW row) p_row + it``; rows past ``k`` are dropped.

    Members
    -------
    drain : In(valid / payload: :func:`bpsa.gateware.frontends.bp_im2col.conv_backward.drain_layout`)
    start : In(1), o0 : In(48), kt_rows : In(48), p_row : In, dw_p0 : In, k : In(dim_width)
        A run starts, with its first output, output tiles, words a P row, P row of dW row 0,
        and the layer's outputs.
    fill : Out(stream.Signature(accumulate_layout(config)))
    """

    def __init__(self, config):
        if not isinstance(config, Config):
            raise TypeError(f"config must be a Config, not {config!r}")
        self.config = config
        paw = exact_log2(config.buf_p_depth)
        super().__init__({"drain": In(_valid_stream(drain_layout(config))), "start": In(1),
                          "o0": In(_W), "kt_rows": In(_W), "p_row": In(paw + 1),
                          "dw_p0": In(paw + 1), "k": In(config.dim_width),
                          "fill": Out(stream.Signature(accumulate_layout(config)))})

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        paw = exact_log2(cfg.buf_p_depth)
        dl = self.drain.payload
        q = m.submodules.fifo = SyncFIFOBuffered(width=paw + cfg.cols * cfg.acc_width,
                                                 depth=cfg.rows + 1)
        run_o0, run_kt_rows, run_p_row = Signal(_W), Signal(_W), Signal.like(self.p_row)
        d_cur = Signal(TILE_WIDTH)
        d_ot, d_it = Signal(_W), Signal(paw + 1)
        d_ot_now, d_it_now = Signal.like(d_ot), Signal.like(d_it)
        m.d.comb += [d_ot_now.eq(d_ot), d_it_now.eq(d_it)]
        with m.If(dl.tile != d_cur):
            with m.If(d_ot + 1 == run_kt_rows):
                m.d.comb += [d_ot_now.eq(0), d_it_now.eq(d_it + 1)]
            with m.Else():
                m.d.comb += d_ot_now.eq(d_ot + 1)
        with m.If(self.drain.valid):
            m.d.sync += [d_cur.eq(dl.tile), d_ot.eq(d_ot_now), d_it.eq(d_it_now)]
        with m.If(self.start):
            m.d.sync += [d_cur.eq(0), d_ot.eq(0), d_it.eq(0), run_o0.eq(self.o0),
                         run_kt_rows.eq(self.kt_rows), run_p_row.eq(self.p_row)]
        drow = Signal(_W)
        m.d.comb += [drow.eq(run_o0 + d_ot_now * cfg.rows + dl.row),
                     q.w_en.eq(self.drain.valid & (drow < self.k)),
                     q.w_data.eq(Cat(((self.dw_p0 + drow) * run_p_row + d_it_now)[:paw],
                                     dl.data.as_value())),
                     self.fill.valid.eq(q.r_rdy), q.r_en.eq(self.fill.ready),
                     self.fill.payload.addr.eq(q.r_data[:paw]),
                     self.fill.payload.data.as_value().eq(q.r_data[paw:])]
        return m
