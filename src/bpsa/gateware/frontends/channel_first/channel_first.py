"""Channel-first implicit im2col (Zhou et al., Sec. III-IV): the second forward front end.

The input is laid out channel first (HWC): one X word holds one pixel's channels. The
convolution is the sum over the kernel taps ``(r, q)`` of 1 x 1 convolutions, computed on the
array weight-stationary: input channels on the rows, output channels on the columns. A
*tile* holds ``W[k0 + j, c, r, q]`` in PE ``(i, j)``; every output pixel of the run streams
through it, one a cycle, and the tiles' partial sums for a pixel add up in P (the taps
accumulate in place). No im2col matrix, no shifter: each row reads its own bank at an address
that moves by the stride, so the cost does not depend on the stride.

Buffers
    *X banks*: ``rows`` memories of ``buf_cf_depth`` words, one operand a word: word ``a`` of
    bank ``i`` holds channel ``c_i`` of the pixel whose band-relative index is ``a - x_base``
    (``y W + x``). A buffer write (``x_write``: one pixel, ``rows`` lanes, lane ``c`` = channel
    ``c`` of the run's channel block) goes to every bank at once, bank ``i`` taking lane
    ``c_i = i mod C`` (``C``: the layer's ``layer_channels``). With ``C >= rows`` that is lane
    ``i``; with fewer channels the banks hold copies, so that ``rows // C`` taps side by side
    read different pixels in the same cycle (the paper's *multi-tile*).
    *W buffer*: read through ``w_addr`` / ``w_data`` (a synchronous read port of the forward
    engine's W buffer, the feeder's layout): word ``w_base + (c R + r) S + q`` holds
    ``W[k0 + j, c, r, q]`` in lane ``j`` (``c`` relative to the run's block).

Rows and tiles
    Row ``i`` is channel ``c_i`` of tap column ``q0 + g_i`` (``g_i = i div C``). Multi-tile
    applies when the run's block is the whole layer (``channels == layer_channels``) and
    ``2 C <= rows``: ``T = min(rows // C, S)`` taps of one kernel row a tile, else ``T = 1``.
    Row ``i`` is active in tile ``(r, q0)`` when ``c_i < channels``, ``g_i < T`` and ``q0 +
    g_i < S``; an inactive row holds weight 0 and streams zeros. Tiles: ``r`` from 0, ``q0``
    from 0 by ``T``.

Addresses (the skew)
    Row ``i`` reads, for output pixel ``(oh, ow)`` of tile ``(r, q0)``, input pixel ``y = oh
    s_h + r d_h - pad_top``, ``x = ow s_w + (q0 + g_i) d_w - pad_w`` (nothing when outside the
    run's ``height x width`` rows: padding). The paper skews each row's address by one cycle
    a row; here every bank is read in the same cycle and the array's edge registers (row
    ``i`` delayed by ``i`` cycles, shared by every dataflow) apply the skew, so row ``i``
    sees its ``j``-th operand in cycle ``j + i`` exactly as in
    :func:`bpsa.models.channel_first.row_addresses`. Every step of the cursor is an addition
    (four products of run constants at the start, on one multiplier).

Schedule (deterministic: the banks are local, nothing stalls)
    SETUP (``rows + 7`` cycles), tile 0's weights shifted into the reserve chains (``rows`` cycles, the
    last row first) and copied into the PEs (``chain_load``), then each tile streams
    ``P = out_rows x out_width`` pixels in ``max(P, 2 rows)`` cycles; the next tile's weights
    are shifted in while the current one streams and the current tile's last vector
    (``a_last``) switches the PEs to them. The partial sums leave the array ``rows + cols -
    1`` cycles after their vector and go out on ``y``, one pixel a vector, in raster order.

MX (``arithmetic`` an OCP MX format; ``docs/architecture/mx.md``)
    The banks hold element codes and a *scale bank* (``buf_cf_depth`` bytes, written by
    ``xs_write`` at the pixel's bank address) X's E8M0 scale code of the run's channel block
    at each pixel. A run's channels lie in one 32-channel block (the planner cuts a block into
    parts of ``rows`` channels), so a row sum of a tile is the exact sum of one part of a
    block at one tap, and the array's column sums leave as such. Each vector carries
    ``scale_row`` (the scale bank's code at its pixel, read with row 0's bank, 0 in the
    padding) and ``scale_cols`` (the tile's W scale word: W buffer word ``w_base + channels R
    S + r S + q``, lane ``j`` the scale of output channel ``k0 + j``, read after the tile's
    weights), so that P folds it into fp32 (:mod:`bpsa.gateware.results.psum_buffer`). The
    fold order is the contract's channel-first order
    (:func:`bpsa.models.mx.conv_forward` with ``part = rows``): part by part, tap by tap.
    There is no multi-tile (the rows of a vector read one pixel, with one scale), and a tile
    streams at least :func:`min_tile_cycles` cycles (P's fold of a pixel's word is
    :data:`~bpsa.gateware.results.psum_buffer.MX_SPACING` cycles).

Refusals
    ``error`` (with ``done``) for a run with no channel or more than ``rows``, or no output
    pixel; the controller's set-up refuses the layers that cannot run
    (:mod:`bpsa.plan.setup`). MX: more than 32 rows at elaboration (:func:`check_config`).
"""

from types import SimpleNamespace

from amaranth.hdl import Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.fifo import SyncFIFO, SyncFIFOBuffered
from amaranth.lib.memory import Memory, WritePort
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

from bpsa.config import require_config
from bpsa.gateware.array.arith import arith_for
from bpsa.gateware.array.systolic import (COUNTER_WIDTH, Dataflow, SystolicArray,
                                          array_signature, share_array)
from bpsa.gateware.frontends.drain import y_layout
from bpsa.gateware.results.psum_buffer import MX_SPACING
from bpsa.spec.numeric import MX_BLOCK

__all__ = ["COUNTERS", "ChannelFirst", "ChannelFirstEngine", "cf_run_layout", "check_config", "cursor_layout",
           "cursor_origin", "cursor_step", "lane_of_bank", "min_tile_cycles", "products_layout"]

#: Counter outputs, all ``COUNTER_WIDTH`` bits: ``cycles`` (busy), ``words_read`` (X bank
#: words read: one a row and pixel that is not padding), ``w_words_read``, ``vectors`` (pixels
#: streamed), ``tiles``.
COUNTERS = ("cycles", "words_read", "w_words_read", "vectors", "tiles")


def check_config(config):
    """``config`` when a :class:`ChannelFirst` can be generated for it, else :exc:`ValueError`
    naming the parameter (the front end needs the ``ws`` dataflow; in an MX format at most 32
    rows, one block's channels)."""
    require_config(config)
    if not config.has("ws"):
        raise ValueError(f"the channel-first front end needs the 'ws' dataflow, not dataflows "
                         f"{list(config.dataflows)!r}")
    if config.is_mx and config.rows > MX_BLOCK:
        raise ValueError(f"rows must be at most {MX_BLOCK} for the channel-first front end in "
                         f"{config.arithmetic!r} (a run's channels share one block's scale), "
                         f"not {config.rows}")
    return config


def min_tile_cycles(config):
    """The fewest cycles a tile streams: ``2 rows`` (the weight preload of the next tile) and,
    in an MX format, :data:`~bpsa.gateware.results.psum_buffer.MX_SPACING` (P's fold of a
    pixel's word must finish before the next tile's vector for it)."""
    return max(2 * config.rows, MX_SPACING) if config.is_mx else 2 * config.rows


def lane_of_bank(i, layer_channels):
    """The lane of a written word bank ``i`` keeps (``i mod C``): the Python statement of the
    banks' write rule."""
    return i % layer_channels


def cf_run_layout(config):
    """One run: ``channels`` (the block's, 1..rows), ``layer_channels`` (C), the band's input
    rows ``height`` and output rows ``out_rows``, ``width`` / ``out_width``, the kernel,
    strides, dilations, ``pad_top`` (the band's) and ``pad_w``; ``x_base`` (bank word of the
    band's pixel 0) and ``w_base`` (W word of the block's channel 0, tap 0)."""
    dim = unsigned(config.dim_width + 2)
    fields = {name: dim for name in (
        "channels", "layer_channels", "height", "out_rows", "width", "out_width", "kernel_h",
        "kernel_w", "stride_h", "stride_w", "dil_h", "dil_w", "pad_top", "pad_w")}
    fields["x_base"] = unsigned(ceil_log2(config.buf_cf_depth))
    fields["w_base"] = unsigned(ceil_log2(config.buf_b_depth))
    return data.StructLayout(fields)


def cursor_layout(config):
    """The address cursor: tile ``(r, q0)``, output pixel ``(oh, ow)``, and the values it keeps
    by additions: ``y0 = r d_h - pad_top``, ``ra0 = y0 W``, ``xq0 = q0 d_w - pad_w`` (the
    tile's), ``y = y0 + oh s_h``, ``ra = y W``, ``xq = xq0 + ow s_w`` (row ``i`` reads pixel
    ``(y, xq + g_i d_w)``, bank word ``x_base + ra + xq + g_i d_w``)."""
    dim = config.dim_width + 2
    wide = signed(2 * dim + 2)
    return data.StructLayout({**{name: unsigned(dim) for name in ("r", "q0", "oh", "ow")},
                              **{name: wide for name in ("y0", "ra0", "xq0", "y", "ra", "xq")}})


def products_layout(config):
    """The run's products the cursor adds (computed once a run): ``sh_w = s_h W``, ``dh_w =
    d_h W``, ``t_dw = T d_w``, ``ptw = pad_top W``, and ``taps`` (``T``)."""
    dim = config.dim_width + 2
    return data.StructLayout({**{name: unsigned(2 * dim) for name in (
        "sh_w", "dh_w", "t_dw", "ptw")}, "taps": unsigned(dim)})


def cursor_origin(run, k, cur):
    """Statements setting ``cur`` to the run's first position (tile (0, 0), pixel (0, 0))."""
    return [cur.r.eq(0), cur.q0.eq(0), cur.oh.eq(0), cur.ow.eq(0),
            cur.y0.eq(-run.pad_top), cur.ra0.eq(-k.ptw), cur.xq0.eq(-run.pad_w),
            cur.y.eq(-run.pad_top), cur.ra.eq(-k.ptw), cur.xq.eq(-run.pad_w)]


def cursor_step(m, run, k, cur, nxt):
    """Drive ``nxt`` (comb) with the position after ``cur``: ``ow`` fastest, then ``oh``,
    then the tile (``q0`` by ``T``, then ``r``), by additions only. Returns ``(tile_end,
    last_tile)``: ``cur`` is its tile's last pixel; its tile is the run's last."""
    row_end = cur.ow + 1 == run.out_width
    tile_end = row_end & (cur.oh + 1 == run.out_rows)
    nq = cur.q0 + k.taps
    wrap = nq >= run.kernel_w
    last_tile = wrap & (cur.r + 1 == run.kernel_h)
    m.d.comb += nxt.eq(cur)
    with m.If(~row_end):
        m.d.comb += [nxt.ow.eq(cur.ow + 1), nxt.xq.eq(cur.xq + run.stride_w)]
    with m.Elif(~tile_end):
        m.d.comb += [nxt.ow.eq(0), nxt.oh.eq(cur.oh + 1), nxt.xq.eq(cur.xq0),
                     nxt.y.eq(cur.y + run.stride_h), nxt.ra.eq(cur.ra + k.sh_w)]
    with m.Elif(wrap):                         # the next kernel row
        y0, ra0 = cur.y0 + run.dil_h, cur.ra0 + k.dh_w
        m.d.comb += [nxt.ow.eq(0), nxt.oh.eq(0), nxt.q0.eq(0), nxt.r.eq(cur.r + 1),
                     nxt.y0.eq(y0), nxt.ra0.eq(ra0), nxt.xq0.eq(-run.pad_w),
                     nxt.y.eq(y0), nxt.ra.eq(ra0), nxt.xq.eq(-run.pad_w)]
    with m.Else():                             # the next taps of the kernel row
        xq0 = cur.xq0 + k.t_dw
        m.d.comb += [nxt.ow.eq(0), nxt.oh.eq(0), nxt.q0.eq(nq), nxt.xq0.eq(xq0),
                     nxt.y.eq(cur.y0), nxt.ra.eq(cur.ra0), nxt.xq.eq(xq0)]
    return tile_end, last_tile


class ChannelFirst(wiring.Component):
    """See the module docstring.

    Members
    -------
    run : In(cf_run_layout(config))
        Taken at ``start``; ``layer_channels`` and ``dil_w`` are the layer's and held from
        ``rows`` cycles before the first write of its X to its last run's end (the banks'
        lane rule and each row's channel and tap are computed from them).
    start : In(1)
    busy, done, error : Out(1)
    x_write : Out(WritePort.Signature(addr_width=log2(buf_cf_depth), shape=ArrayLayout(op,
    rows)))
    xs_write : Out(WritePort.Signature(addr_width=log2(buf_cf_depth), shape=unsigned(8)))
        MX only: the scale bank's write port.
    w_addr : Out(log2(buf_b_depth)), w_en : Out(1), w_data : In(ArrayLayout(op, cols))
        A synchronous read port of the W buffer.
    array : In(array_signature(config))
    y : Out(valid, payload: :func:`bpsa.gateware.frontends.drain.y_layout`)
        One output pixel a vector: ``data[j]`` adds to ``Y[k0 + j, oh, ow0]`` (``row`` 0);
        MX: with ``scale_row`` and ``scale_cols``.
    cycles, words_read, w_words_read, vectors, tiles : Out(COUNTER_WIDTH)
        Since the last ``start``.
    """

    def __init__(self, config):
        if not config.is_mx:
            config.require_int("channel-first engine")
        self.config = check_config(config)
        op = arith_for(config).operand_shape
        members = {
            "run": In(cf_run_layout(config)), "start": In(1),
            "busy": Out(1), "done": Out(1), "error": Out(1),
            "x_write": Out(WritePort.Signature(addr_width=ceil_log2(config.buf_cf_depth),
                                               shape=data.ArrayLayout(op, config.rows))),
            "w_addr": Out(ceil_log2(config.buf_b_depth)), "w_en": Out(1),
            "w_data": In(data.ArrayLayout(op, config.cols)),
            "array": In(array_signature(config)),
            "y": Out(wiring.Signature({"valid": Out(1), "payload": Out(y_layout(config))})),
        }
        if config.is_mx:
            members["xs_write"] = Out(WritePort.Signature(
                addr_width=ceil_log2(config.buf_cf_depth), shape=unsigned(8)))
        for name in COUNTERS:
            members[name] = Out(COUNTER_WIDTH)
        super().__init__(members)

    def elaborate(self, platform):
        cfg = self.config
        m = Module()
        run = Signal(cf_run_layout(cfg))       # the run's fields, taken at its start
        with m.If(self.start):
            m.d.sync += run.eq(self.run)
        # the signals the methods below share
        s = SimpleNamespace(run=run, live=self.run, dim=cfg.dim_width + 2)
        self._row_chain(m, s)
        banks = self._banks(m, s)
        self._run_constants(m, s)
        self._cursor(m, s)
        self._w_preload(m, s)
        reads = self._stream(m, s, banks)
        self._outputs(m, s)
        if cfg.is_mx:
            self._scales(m, s)
        self._counters(m, s, reads)
        with m.FSM(name="cf"):
            self._setup_states(m, s)
            self._tile_states(m, s)
        return m

    def _row_chain(self, m, s):
        """The banks' lane rule and each row's channel / tap column, from C (a chain): c[i] =
        i mod C, g[i] = i div C, off[i] = g[i] d_w: each stage registered from the previous
        row's, settled ``rows`` cycles after C and d_w are set; wr[i] = c[i] R S + g[i] (the
        row's W word in a tile) is computed at the run's start (SETUP, from ``rs`` = R S).
        Sets ``s.rs``, ``s.ci``, ``s.gi``, ``s.offi``, ``s.wri``."""
        R, dim, live = self.config.rows, s.dim, s.live
        rs = Signal(2 * dim)
        ci = [Signal(dim, name=f"c{i}") for i in range(R)]
        gi = [Signal(dim, name=f"g{i}") for i in range(R)]
        offi = [Signal(2 * dim, name=f"off{i}") for i in range(R)]
        wri = [Signal(3 * dim, name=f"wr{i}") for i in range(R)]
        for i in range(1, R):
            wrap = ci[i - 1] + 1 == live.layer_channels
            m.d.sync += [ci[i].eq(Mux(wrap, 0, ci[i - 1] + 1)), gi[i].eq(gi[i - 1] + wrap),
                         offi[i].eq(offi[i - 1] + Mux(wrap, live.dil_w, 0))]
        s.rs, s.ci, s.gi, s.offi, s.wri = rs, ci, gi, offi, wri

    def _banks(self, m, s):
        """The X banks: each takes its lane (``c[i]``) of every buffer write. Returns their
        read ports."""
        cfg = self.config
        ar = arith_for(cfg)
        banks = []
        for i in range(cfg.rows):
            mem = m.submodules[f"x_bank{i}"] = Memory(shape=ar.operand_shape,
                                                       depth=cfg.buf_cf_depth, init=[])
            wp = mem.write_port()
            lane = Signal(ar.operand_shape, name=f"wlane{i}")
            with m.Switch(s.ci[i]):
                for c in range(i + 1):
                    with m.Case(c):
                        m.d.comb += lane.eq(self.x_write.data[c])
            m.d.comb += [wp.en.eq(self.x_write.en), wp.addr.eq(self.x_write.addr),
                         wp.data.eq(lane)]
            banks.append(mem.read_port())
        return banks

    def _run_constants(self, m, s):
        """The run constants' registers (set in SETUP, one multiplier) and the multiplier.
        Sets ``s.kp`` (the cursor's products and T), ``s.pix``, ``s.taps``, ``s.complete``,
        ``s.mt_ok``, ``s.mul_a``, ``s.mul_b``, ``s.mul_p``, ``s.step``."""
        cfg = self.config
        R, dim, run, live = cfg.rows, s.dim, s.run, s.live
        kp = Signal(products_layout(cfg))      # the cursor's products and T
        pix = Signal(2 * dim)                  # P: pixels a tile
        taps = kp.taps
        complete = Signal(dim + 1)             # rows // C (complete channel groups)
        m.d.comb += complete.eq(s.gi[R - 1] + (s.ci[R - 1] + 1 == live.layer_channels))
        mt_ok = (run.channels == run.layer_channels) & (2 * run.channels <= R)
        if cfg.is_mx:                      # a vector's pixels share one X scale: one tap a tile
            mt_ok = Const(0)
        mul_a, mul_b = Signal(dim), Signal(2 * dim)
        mul_p = Signal(3 * dim)
        m.d.comb += mul_p.eq(mul_a * mul_b)
        step = Signal(range(8 + R))
        s.kp, s.pix, s.taps, s.complete, s.mt_ok = kp, pix, taps, complete, mt_ok
        s.mul_a, s.mul_b, s.mul_p, s.step = mul_a, mul_b, mul_p, step

    def _cursor(self, m, s):
        """The address cursor and the next tile (its weights are preloaded during this one's
        stream): ``r S + q0`` of both (``toff``, ``ntoff``), the tile's cycle count ``tc`` and
        its ``length``. Sets ``s.cur``, ``s.nxt``, ``s.tile_end``, ``s.last_tile``,
        ``s.has_next``, ``s.nq0``, ``s.toff``, ``s.ntoff``, ``s.tc``, ``s.length``."""
        cfg = self.config
        R, dim, run, kp, taps = cfg.rows, s.dim, s.run, s.kp, s.taps
        cur = Signal(cursor_layout(cfg))
        nxt = Signal(cursor_layout(cfg))
        tile_end, last_tile = cursor_step(m, run, kp, cur, nxt)
        has_next = ~last_tile
        # the next tile (its weights are preloaded during this one's stream); r S + q0 of both
        wrapq = cur.q0 + taps >= run.kernel_w
        nq0 = Mux(wrapq, 0, cur.q0 + taps)
        toff = Signal(3 * dim)
        ntoff = Signal(3 * dim)
        m.d.comb += ntoff.eq(Mux(wrapq, toff + run.kernel_w - cur.q0, toff + taps))
        tc = Signal(2 * dim + 1)               # cycles since the tile's first issue
        length = Signal(2 * dim + 1)           # max(P, min_tile_cycles)
        shortest = min_tile_cycles(cfg)
        m.d.comb += length.eq(Mux(s.pix > shortest, s.pix, shortest))
        s.cur, s.nxt, s.tile_end, s.last_tile, s.has_next = cur, nxt, tile_end, last_tile, \
            has_next
        s.nq0, s.toff, s.ntoff, s.tc, s.length = nq0, toff, ntoff, tc, length

    def _active(self, s, i, q0v):
        """Row ``i`` is active in a tile whose first tap column is ``q0v``."""
        return (s.ci[i] < s.run.channels) & (s.gi[i] < s.taps) & (q0v + s.gi[i] < s.run.kernel_w)

    def _w_preload(self, m, s):
        """The W preload (tile 0 before the stream, the next tile during it): the row
        ``wrow`` whose word is read (R-1 first) when ``wreq``, of the next tile when
        ``wnext``; stage B shifts it into the reserve chains. Sets ``s.wrow``, ``s.wreq``,
        ``s.wnext``, ``s.shift_b``."""
        cfg = self.config
        R, dim, run, arr = cfg.rows, s.dim, s.run, self.array
        wrow = Signal(range(R))                # the row whose word is read (R-1 first)
        wreq, wnext = Signal(), Signal()      # a W read; of the next tile (else the current)
        wtile_toff, wtile_q0 = Signal(3 * dim), Signal(dim)
        m.d.comb += [wtile_toff.eq(Mux(wnext, s.ntoff, s.toff)),
                     wtile_q0.eq(Mux(wnext, s.nq0, s.cur.q0))]
        waddr = Signal(3 * dim + 2)
        wact = Signal()
        with m.Switch(wrow):
            for i in range(R):
                with m.Case(i):
                    m.d.comb += [waddr.eq(run.w_base + s.wri[i] + wtile_toff),
                                 wact.eq(self._active(s, i, wtile_q0))]
        wsreq = Signal()                       # MX: read the tile's W scale word instead
        wsoff = Signal(3 * dim)                # MX: its offset, channels R S
        m.d.comb += [self.w_addr.eq(Mux(wsreq, run.w_base + wsoff + wtile_toff, waddr)),
                     self.w_en.eq(wreq | wsreq)]
        shift_b, act_b = Signal(), Signal()    # stage B: the word is on w_data
        m.d.sync += [shift_b.eq(wreq), act_b.eq(wact)]
        m.d.comb += arr.chain_shift.eq(shift_b)
        for j in range(cfg.cols):
            m.d.comb += arr.preload[j].eq(Mux(act_b, self.w_data[j], 0))
        s.wrow, s.wreq, s.wnext, s.shift_b = wrow, wreq, wnext, shift_b
        s.wsreq, s.wsoff = wsreq, wsoff

    def _stream(self, m, s, banks):
        """The stream: stage A reads the banks, stage B presents the vector. Sets
        ``s.issue``, ``s.last_a`` (driven by the STREAM state) and ``s.valid_b``; returns
        each row's read flag (a bank word read this cycle)."""
        cfg = self.config
        R, run, arr, cur = cfg.rows, s.run, self.array, s.cur
        xaw = ceil_log2(cfg.buf_cf_depth)
        wide = signed(2 * s.dim + 2)
        issue, last_a = Signal(), Signal()
        valid_b, last_b = Signal(), Signal()
        rowok_b = Signal(R)
        m.d.sync += [valid_b.eq(issue), last_b.eq(last_a)]
        yin = (cur.y >= 0) & (cur.y < run.height)
        reads = []
        for i in range(R):
            x = Signal(wide, name=f"x{i}")
            ok = Signal(name=f"rowok{i}")
            m.d.comb += [x.eq(cur.xq + s.offi[i]),
                         ok.eq(issue & self._active(s, i, cur.q0) & yin & (x >= 0)
                               & (x < run.width)),
                         banks[i].addr.eq((run.x_base + cur.ra + x)[:xaw]), banks[i].en.eq(1)]
            m.d.sync += rowok_b[i].eq(ok)
            m.d.comb += arr.a_data[i].eq(Mux(rowok_b[i], banks[i].data, 0))
            reads.append(ok)
            if i == 0:
                s.addr0 = banks[0].addr
        m.d.comb += [arr.dataflow.eq(Dataflow.WS), arr.a_valid.eq(valid_b),
                     arr.a_last.eq(last_b), arr.b_valid.eq(valid_b)]
        for j in range(cfg.cols):
            m.d.comb += arr.b_data[j].eq(0)
        s.issue, s.last_a, s.valid_b, s.rowok_b = issue, last_a, valid_b, rowok_b
        return reads

    def _outputs(self, m, s):
        """Outputs: one pixel a partial-sum vector, raster order. Sets ``s.ooh``, ``s.oow``
        (the next output pixel)."""
        run, arr = s.run, self.array
        ooh, oow = Signal(s.dim), Signal(s.dim)
        m.d.comb += [self.y.valid.eq(arr.psum_valid), self.y.payload.oh.eq(ooh),
                     self.y.payload.ow0.eq(oow)]
        for j in range(self.config.cols):
            m.d.comb += self.y.payload.data[j].eq(arr.psum_data[j])
        with m.If(arr.psum_valid):
            with m.If(oow + 1 == run.out_width):
                m.d.sync += [oow.eq(0), ooh.eq(Mux(ooh + 1 == run.out_rows, 0, ooh + 1))]
            with m.Else():
                m.d.sync += oow.eq(oow + 1)
        s.ooh, s.oow = ooh, oow
        s.out_tile_end = (oow + 1 == run.out_width) & (ooh + 1 == run.out_rows)

    def _scales(self, m, s):
        """MX: the scale codes each output vector carries. ``scale_row``: X's at the vector's
        pixel, from the scale bank (written by ``xs_write``, read with row 0's bank, 0 in the
        padding) into a queue at stage B, out with the vector's sums. ``scale_cols``: the
        tile's W scale word (read after the tile's weights: the W buffer's word ``w_base +
        channels R S + r S + q``, lane ``j`` the scale of output channel ``k0 + j``) into a
        queue, out with every vector of the tile."""
        cfg = self.config
        bank = m.submodules.xs_bank = Memory(shape=unsigned(8), depth=cfg.buf_cf_depth, init=[])
        wp, rp = bank.write_port(), bank.read_port()
        m.d.comb += [wp.en.eq(self.xs_write.en), wp.addr.eq(self.xs_write.addr),
                     wp.data.eq(self.xs_write.data), rp.addr.eq(s.addr0), rp.en.eq(1)]
        # vectors between stage B and their sums leaving the array: R + C - 1 + LATENCY + 1
        depth = 1 << ceil_log2(cfg.rows + cfg.cols + cfg.mac_latency + 2)
        xq = m.submodules.xs_queue = SyncFIFOBuffered(width=8, depth=depth)
        m.d.comb += [xq.w_en.eq(s.valid_b), xq.w_data.eq(Mux(s.rowok_b[0], rp.data, 0)),
                     xq.r_en.eq(self.y.valid), self.y.payload.scale_row.eq(xq.r_data)]
        # tiles whose scales are held: the next, the streaming one and those still draining
        # (a tile's last sums leave within R + C + LATENCY cycles of its last vector; tiles
        # are at least min_tile_cycles long: a bound, 4 on a 4 x 4 array)
        drain = cfg.rows + cfg.cols + cfg.mac_latency
        wq = m.submodules.ws_queue = SyncFIFO(
            width=8 * cfg.cols, depth=1 << ceil_log2(-(-drain // min_tile_cycles(cfg)) + 2))
        ws_b = Signal()                        # the W scale word is on w_data
        m.d.sync += ws_b.eq(s.wsreq)
        m.d.comb += [wq.w_en.eq(ws_b), wq.w_data.eq(self.w_data.as_value()),
                     wq.r_en.eq(self.y.valid & s.out_tile_end),
                     self.y.payload.scale_cols.as_value().eq(wq.r_data)]
    def _counters(self, m, s, reads):
        """The counters, cleared at ``start``. Sets ``s.tile_done`` (driven by the STREAM
        state: a tile's last vector)."""
        counts = {"cycles": self.busy, "words_read": sum(reads), "w_words_read": s.wreq,
                  "vectors": s.issue, "tiles": Const(0)}
        tile_done = Signal()
        counts["tiles"] = tile_done
        for name, inc in counts.items():
            ctr = getattr(self, name)
            with m.If(self.start):
                m.d.sync += ctr.eq(0)
            with m.Else():
                m.d.sync += ctr.eq(ctr + inc)
        s.tile_done = tile_done

    def _setup_states(self, m, s):
        """States IDLE (a run's start, refused or taken) and SETUP (the products of run
        constants, one a cycle, then the cursor's origin)."""
        R, run, live, arr = self.config.rows, s.run, s.live, self.array
        step, mul_a, mul_b, mul_p, kp, taps = s.step, s.mul_a, s.mul_b, s.mul_p, s.kp, s.taps
        with m.State("IDLE"):
            with m.If(self.start):
                bad = ((live.channels == 0) | (live.channels > R) | (live.out_rows == 0)
                       | (live.out_width == 0))
                with m.If(bad):
                    m.d.comb += [self.error.eq(1), self.done.eq(1)]
                with m.Else():
                    m.d.sync += [step.eq(0), s.ooh.eq(0), s.oow.eq(0)]
                    m.d.comb += arr.clear.eq(1)
                    m.next = "SETUP"
        with m.State("SETUP"):               # products of run constants, one a cycle
            m.d.comb += self.busy.eq(1)
            m.d.sync += step.eq(step + 1)
            with m.Switch(step):
                with m.Case(0):
                    m.d.comb += [mul_a.eq(run.kernel_h), mul_b.eq(run.kernel_w)]
                    m.d.sync += [s.rs.eq(mul_p),
                                 taps.eq(Mux(s.mt_ok & (s.complete > 1),
                                             Mux(s.complete < run.kernel_w, s.complete,
                                                 run.kernel_w), 1))]
                with m.Case(1):
                    m.d.comb += [mul_a.eq(run.stride_h), mul_b.eq(run.width)]
                    m.d.sync += kp.sh_w.eq(mul_p)
                with m.Case(2):
                    m.d.comb += [mul_a.eq(run.dil_h), mul_b.eq(run.width)]
                    m.d.sync += kp.dh_w.eq(mul_p)
                with m.Case(3):
                    m.d.comb += [mul_a.eq(taps), mul_b.eq(run.dil_w)]
                    m.d.sync += kp.t_dw.eq(mul_p)
                with m.Case(4):
                    m.d.comb += [mul_a.eq(run.out_rows), mul_b.eq(run.out_width)]
                    m.d.sync += s.pix.eq(mul_p)
                with m.Case(5):
                    m.d.comb += [mul_a.eq(run.pad_top), mul_b.eq(run.width)]
                    m.d.sync += kp.ptw.eq(mul_p)
                for i in range(R):       # each row's W word in a tile
                    with m.Case(6 + i):
                        m.d.comb += [mul_a.eq(s.ci[i]), mul_b.eq(s.rs)]
                        m.d.sync += s.wri[i].eq(mul_p + s.gi[i])
                with m.Case(6 + R):      # the first tile (MX: the W scale words' offset)
                    if self.config.is_mx:
                        m.d.comb += [mul_a.eq(run.channels), mul_b.eq(s.rs)]
                        m.d.sync += s.wsoff.eq(mul_p)
                    m.d.sync += cursor_origin(run, kp, s.cur)
                    m.d.sync += [s.toff.eq(0), s.tc.eq(0), s.wrow.eq(R - 1)]
                    m.next = "PRE"

    def _tile_states(self, m, s):
        """States PRE, PRE_END and LOAD (tile 0's weights), STREAM (the tiles' pixels, the
        next tile's weights alongside) and DRAIN (the last partial sums leave the array)."""
        R, arr = self.config.rows, self.array
        wrow, wreq, tc = s.wrow, s.wreq, s.tc
        with m.State("PRE"):                 # tile 0's weights, row R-1 first
            m.d.comb += [self.busy.eq(1), wreq.eq(1)]
            m.d.sync += wrow.eq(wrow - 1)
            with m.If(wrow == 0):
                m.next = "PRE_END"
        with m.State("PRE_END"):             # the last shift (stage B); MX: tile 0's scales
            m.d.comb += [self.busy.eq(1), s.wsreq.eq(self.config.is_mx)]
            m.next = "LOAD"
        with m.State("LOAD"):                # chain -> held weights; the next tile
            m.d.comb += [self.busy.eq(1), arr.chain_load.eq(1)]
            m.d.sync += wrow.eq(R - 1)
            m.next = "STREAM"
        with m.State("STREAM"):
            m.d.comb += self.busy.eq(1)
            m.d.sync += tc.eq(tc + 1)
            lastv = s.tile_end
            go = ~lastv | (tc + 1 >= s.length)
            # the next tile's weights: reads at tc in [R - 1, 2R - 1), row R-1 first
            m.d.comb += s.wnext.eq(1)
            with m.If(s.has_next & (tc >= R - 1) & (tc < 2 * R - 1)):
                m.d.comb += wreq.eq(1)
                m.d.sync += wrow.eq(wrow - 1)
            if self.config.is_mx:              # then the next tile's W scale word
                m.d.comb += s.wsreq.eq(s.has_next & (tc == 2 * R - 1))
            with m.If(go):
                m.d.comb += [s.issue.eq(1), s.last_a.eq(lastv)]
                m.d.sync += s.cur.eq(s.nxt)
                with m.If(lastv):
                    m.d.comb += s.tile_done.eq(1)
                    m.d.sync += [tc.eq(0), s.toff.eq(s.ntoff), wrow.eq(R - 1)]
                    with m.If(s.last_tile):
                        m.next = "DRAIN"
        with m.State("DRAIN"):               # the last partial sums leave the array
            m.d.comb += self.busy.eq(1)
            with m.If(~arr.busy & ~s.valid_b & ~s.shift_b):
                m.d.comb += self.done.eq(1)
                m.next = "IDLE"


class ChannelFirstEngine(wiring.Component):
    """The channel-first front end on its own array, with a W buffer: the engine a testbench
    runs layer by layer (top ``cf_engine``; the accelerator builds the same parts around its
    shared array and the forward engine's W buffer).

    Members
    -------
    layer : In(cf_run_layout(config))
        The run (:class:`ChannelFirst`'s ``run``), taken at ``start``.
    start : In(1)
    busy, done, error : Out(1)
    x_write, xs_write (MX only) : as :class:`ChannelFirst`'s
    w_write : Out(WritePort.Signature(addr_width=log2(buf_b_depth), shape=ArrayLayout(op,
    cols)))
        The W buffer's write port (its words as :class:`ChannelFirst` reads them).
    y : as :class:`ChannelFirst`'s
    """

    def __init__(self, config):
        self.cf, self.array = ChannelFirst(config), SystolicArray(config)
        self.config = config
        op = arith_for(config).operand_shape
        members = {name: value for name, value in self.cf.signature.members.items()
                   if name in ("start", "busy", "done", "error", "x_write", "xs_write", "y")}
        members["layer"] = In(cf_run_layout(config))
        members["w_write"] = Out(WritePort.Signature(addr_width=ceil_log2(config.buf_b_depth),
                                                     shape=data.ArrayLayout(op, config.cols)))
        super().__init__(members)

    def elaborate(self, platform):
        cfg, cf = self.config, self.cf
        m = Module()
        m.submodules.cf = cf
        arr = m.submodules.array = self.array
        share_array(m, arr, [(cf.array, Const(1))])
        w_mem = m.submodules.w_mem = Memory(shape=cf.w_data.shape(), depth=cfg.buf_b_depth,
                                            init=[])
        wp, rp = w_mem.write_port(), w_mem.read_port()
        m.d.comb += [wp.en.eq(self.w_write.en), wp.addr.eq(self.w_write.addr),
                     wp.data.eq(self.w_write.data), rp.addr.eq(cf.w_addr), rp.en.eq(cf.w_en),
                     cf.w_data.eq(rp.data), cf.run.eq(self.layer), cf.start.eq(self.start),
                     self.busy.eq(cf.busy), self.done.eq(cf.done), self.error.eq(cf.error),
                     self.y.valid.eq(cf.y.valid), self.y.payload.eq(cf.y.payload)]
        for name in ("x_write", "xs_write") if cfg.is_mx else ("x_write",):
            ours, theirs = getattr(self, name), getattr(cf, name)
            m.d.comb += [theirs.en.eq(ours.en), theirs.addr.eq(ours.addr),
                         theirs.data.eq(ours.data)]
        return m
