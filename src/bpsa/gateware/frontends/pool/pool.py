"""The pooling unit: max and average pooling, forward and backward, beside the array (no MAC).

It owns one operand buffer (``buf_pool_depth`` words; the load unit fills two banks of it)
and writes its results into P in the raster order of the band it computes. With
``pool_lanes`` 1 a word holds one element, and a result leaves one element a vector (the
other lanes 0): plane ``i`` of a run from P word ``i p_row``, element ``e`` of the plane band
in lane ``e % cols`` of word ``e // cols``. With ``pool_lanes = cols`` (``L``) the unit
computes ``L`` planes at once: a buffer word holds the same element of each (lane ``j`` in
bits ``j w`` up; the host lays the tensors out channel-blocked by ``L``), every register of
the datapath below is one a lane (the maximum and where it is, the sums, the division, the
ReLU mask), the walk is the one plane's, and a result leaves a vector of the ``L`` planes:
block ``i`` of a run from P word ``i p_row``, element ``e`` in word ``e``, plane ``j`` of the
block in lane ``j``. Max backward then adds each lane's dY at its own maximum, a lane a cycle
(SCATTER takes ``L`` cycles a window); in floating point the lanes whose maxima are the same
element leave as one vector (P's fp32 adders need a word's vectors
:data:`bpsa.gateware.results.psum_buffer.FLOAT_SPACING` cycles apart).

Forward (im2col order, Rohwedder Ch. 4)
    For each plane of the run, output row of the band and output column: the window's taps
    ``(r, q)`` in row-major order (``r`` outer) are read from the buffer, one a cycle; taps
    in the padding are skipped. ``max`` keeps the first largest value (and where it was);
    ``avg`` sums the taps and divides the sum by ``R S`` (padding counted as zeros), rounded
    to nearest, halves up: ``floor((2 sum + R S) / (2 R S))``, exactly, as ``(a m) >> 47``
    with ``m = floor(2**47 / (2 R S)) + 1`` (the set-up's division; exact while ``a 2 R S <
    2**47``, which the set-up checks through ``R S <=``
    :func:`bpsa.spec.numeric.pool_window_limit`).
Backward, max (col2im order, scattered)
    For each window of the dY rows the band loaded: its taps are scanned again from X (one a
    cycle) for the first largest (ties to the first in window order), and the window's dY is
    added into P at that element, when the element is in the band's dX rows (a window that
    straddles two bands adds in the band holding its maximum) and, with ``relu``, positive.
    Overlapping windows (stride < kernel) add up in P; elements that are no window's maximum
    keep the 0 P was cleared to. The element's P word and lane are ``e // cols`` and ``e %
    cols`` of its place ``e`` in the band, by a multiplication with a constant.
Backward, avg (col2im order, gathered)
    For each element ``(y, x)`` of the band's dX rows: the windows that cover it (``oh =
    (y + pad_h) // stride_h - t`` while the element's row offset in the window ``(y + pad_h)
    % stride_h + t stride_h < R``, and the same across) are visited and their dY summed, then
    divided by ``R S`` as in the forward. With ``relu``, dX is 0 where X is not positive (the
    ReLU's backward, X being the ReLU's output). Elements no window covers get 0.

Geometry of a run (:func:`pool_run_layout`): X rows ``[xlo, xlo + rows loaded)`` of each
plane from buffer word ``x_base + i x_plane``, dY rows ``[dlo, ...)`` from ``d_base + i
d_plane``; the band's first output (forward) or dX (backward) row ``y0`` and its ``rows``;
``drows`` dY rows loaded; ``q0 = (y0 + pad_h) // stride_h``, ``rem0`` its remainder, ``qw0``, ``remw0`` the same of
``pad_w`` by ``stride_w`` (backward). The run's layer is latched at ``start``.

Timing (every path from a register to a register short; the cycles are
:func:`bpsa.models.perf.pool_cycles`'s): the buffer's read data is registered, so a read's
data is used two cycles after its address (a window's scan ends two cycles after its last
tap; an average's dY is added at the CAND_COL after its CAND_D; the element's X for the
``relu`` mask is read as the element starts). The run's set-up products (the band's first
window row and buffer words, the strides' rows) are made on one multiplier, registered on
both sides, one a cycle (eleven cycles a run). The loops' tests (last column, last row, a
row or column inside the plane) are registered with the values they test. The division
takes :func:`bpsa.spec.numeric.pool_divide_cycles` cycles (five with 16-bit operands): the
products of 17-bit pieces, then their sum, a level of pairs a cycle.
"""

from functools import partial

from amaranth.hdl import (Array, Cat, Const, Module, Mux, ResetInserter, Shape, Signal, signed,
                          unsigned)
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory, WritePort
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from bpsa.config import require_config
from bpsa.gateware.array.arith import arith_for
from bpsa.gateware.common.checked import CheckedComponent
from bpsa.gateware.results.psum_buffer import accumulate_layout
from bpsa.gateware.fp.fpu import FloatMac, is_positive, order_key, widen
from bpsa.spec.numeric import (POOL_DIVIDE_CHUNK, POOL_FLOAT_MAC_LATENCY, POOL_RECIP_SHIFT,
                               pool_divide_widths)

__all__ = ["PoolEngine", "pool_run_layout"]

#: Width of counts and of the reciprocal.
_W = 48


def _lanes_of(config, word):
    """The operands of a buffer word, lane by lane (lane ``j`` in bits ``j w`` up)."""
    op = Shape.cast(arith_for(config).operand_shape)
    if config.pool_lanes == 1:
        return [word]
    lanes = [word.word_select(j, op.width) for j in range(config.pool_lanes)]
    return [v.as_signed() for v in lanes] if op.signed else lanes


def _per_lane(config, shape, name, **kw):
    """A register a lane (``name`` with one lane, ``name0``, ``name1``, ... with several)."""
    one = config.pool_lanes == 1
    return [Signal(shape, name=name if one else f"{name}{j}", **kw)
            for j in range(config.pool_lanes)]


def pool_run_layout(config):
    """One run of the pooling unit (see the module docstring)."""
    dim = config.dim_width + 2
    aw = exact_log2(config.buf_pool_depth) + 1
    return data.StructLayout({
        "backward": 1, "avg": 1, "relu": 1, "planes": unsigned(32),
        **{name: unsigned(dim) for name in (
            "h", "w", "r", "s", "stride_h", "stride_w", "pad_h", "pad_w", "oh", "ow",
            "y0", "rows", "xlo", "dlo", "drows", "q0", "rem0", "qw0", "remw0")},
        "x_base": unsigned(aw), "d_base": unsigned(aw), "x_plane": unsigned(aw),
        "d_plane": unsigned(aw), "p_row": unsigned(_W), "rs": unsigned(2 * dim),
        "recip": unsigned(_W),
    })


class PoolEngine(CheckedComponent):
    """See the module docstring.

    Members
    -------
    write : Out(WritePort.Signature): the DMA's writes into the buffer (one operand a word,
        in the low bits of ``data``).
    layer : In(pool_run_layout(config)), start : In(1)
        (Not seen in the unit's first cycle after configuration, while it resets itself.)
    busy : Out(1)
        From the cycle after ``start`` until the run's last result left.
    error : Out(1)
        Always 0 (the set-up refuses what the unit cannot run).
    acc : Out(stream.Signature(accumulate_layout(config)))
        Result vectors for P (words relative to the step's part of P; always taken).
    words_read : Out(32)
        Buffer words the run read.
    """

    @classmethod
    def check_parameters(cls, config):
        if not require_config(config).has_pool():
            raise ValueError(f"PoolEngine needs pool_kinds (configuration {config.name!r} has "
                             f"none)")

    def __init__(self, config):
        self.config = config
        aw = exact_log2(config.buf_pool_depth)
        super().__init__({
            "write": Out(WritePort.Signature(addr_width=aw, shape=self.word_shape(config))),
            "layer": In(pool_run_layout(config)), "start": In(1),
            "busy": Out(1), "error": Out(1),
            "acc": Out(stream.Signature(accumulate_layout(config))),
            "words_read": Out(32),
        })

    @staticmethod
    def word_shape(config):
        """A buffer word: an operand, or ``pool_lanes`` of them (lane ``j`` in bits ``j w``
        up)."""
        op = arith_for(config).operand_shape
        if config.pool_lanes == 1:
            return op
        return unsigned(config.pool_lanes * Shape.cast(op).width)

    def elaborate(self, platform):
        cfg = self.config
        m = Module()
        rp, rword = self._buffer(m)      # the read's data registered: two cycles after its address
        L = Signal(pool_run_layout(cfg))          # the run's layer, latched at start
        v = self._registers(m, L, rp, rword)
        setup = self._setup_multiplier(m, L, v)
        pend1, pend2, paddr1, paddr2, xget, apend, xval = (v[n] for n in (
            "pend1", "pend2", "paddr1", "paddr2", "xget", "apend", "xval"))
        m.d.sync += [pend2.eq(pend1), paddr2.eq(paddr1), pend1.eq(0), xget.eq(0),
                     apend.eq(0)]
        with m.If(xget):
            m.d.sync += [xv.eq(d) for xv, d in zip(xval, v["lanes_of"](rp.data))]
        v["mac"], v["scaling"] = self._tap_data(m, L, v)

        with m.FSM(name="pool") as fsm:
            self._run_states(m, L, v, setup)
            self._candidates(m, L, v)
            # --- backward, max: the windows of the band's dY rows, scattered -----------------
            if v["has_max"]:
                self._scatter(m, L, v)
            self._pixel_end(m, L, v)
            self._window_scan(m, L, v)
            self._emit(m, L, v)
        m.d.comb += self.busy.eq(~fsm.ongoing("IDLE"))
        return self._one_hot_self_reset(m, fsm)

    def _registers(self, m, L, rp, rword):
        """The run's registers and the values the states share: the configuration's (``cfg``,
        ``op``, ``has_avg``, ``has_max``, ``fp``), the buffer's read (``rp``, ``rdata``, a
        word's lanes), the loop, window-scan and result registers, ``start_scan`` (the
        statements that start a window's scan) and ``put`` / ``emit`` (:meth:`_results`).
        Returns them by name (this method's locals): the ``v`` the state methods take, to
        which :meth:`elaborate` adds ``mac`` and ``scaling`` (:meth:`_tap_data`)."""
        cfg = self.config
        ar = arith_for(cfg)
        op = ar.operand_shape
        has_avg, has_max = cfg.has_pool("avg"), cfg.has_pool("max")
        fp = cfg.is_float
        lanes_of, per_lane = partial(_lanes_of, cfg), partial(_per_lane, cfg)
        rdata = lanes_of(rword)

        co = signed(cfg.dim_width + 4)             # coordinates (padding makes them negative)
        ad = signed(2 * cfg.dim_width + 8)         # buffer addresses and their offsets
        acc_w = cfg.acc_width + 2

        # loop registers
        pl = Signal(32)
        more = Signal()                            # a plane after this one (pl + 1 < planes)
        xpb, dpb = Signal(ad, name="xpb"), Signal(ad, name="dpb")  # the plane's X, dY words
        ppb = Signal(_W)                           # this plane's first P word
        word, lane = Signal(_W), Signal(range(cfg.cols))
        oy = Signal(co)                            # row in the band
        ox = Signal(co)                            # column
        # forward: the window of output (y0 + oy, ox)
        top0, shw, wrow0, wtop, wrow, left = (Signal(ad, name=n) for n in (
            "top0", "shw", "wrow0", "wtop", "wrow", "left"))
        # backward: the element (y, x), its covering windows
        xrow0, drow0, remhw0 = (Signal(ad, name=n) for n in ("xrow0", "drow0", "remhw0"))
        xrow, drow, remhw = (Signal(ad, name=n) for n in ("xrow", "drow", "remhw"))
        qh, remh, qw, remw = (Signal(co, name=n) for n in ("qh", "remh", "qw", "remw"))
        offh, ohc, offw, owc = (Signal(co, name=n) for n in ("offh", "ohc", "offw", "owc"))
        dro = Signal(ad)
        # the candidate loops' tests, registered with the values they test: the row loop ends
        # (offh >= R or ohc < 0), the row is below dY (ohc >= OH), the same across
        rend, rout, cend, cout = (Signal(name=n) for n in ("rend", "rout", "cend", "cout"))
        # the plane's constants: R - stride_h, S - stride_w, the loops' last indices less one
        # (``rm2``: R - 2), the limits less one, whether a loop has a single pass
        rmsh, smsw, rm2, sm2, xm2, hm1, wm1, shm1, swm1 = (Signal(co, name=n) for n in (
            "rmsh", "smsw", "rm2", "sm2", "xm2", "hm1", "wm1", "shm1", "swm1"))
        rone, sone, xone = Signal(), Signal(), Signal()
        xlast = Signal()                           # ox is the row's last column
        ymore, ym1 = Signal(), Signal(co)          # oy is a row of the band; its limit less one
        dsave = per_lane(op, "dsave", reset_less=True)
        acc = per_lane(signed(acc_w), "acc")       # the element's sum (backward)
        apend = Signal()                           # a dY read two cycles before: add it to acc
        xget = Signal()                            # the element's X (relu), read in PIXEL
        xval = per_lane(op, "xval", reset_less=True)
        mask = per_lane(unsigned(1), "mask")
        # the window scan: the tap's row and column, its word, the row's word at the window's
        # left column, whether the row is inside the plane
        crow, ccol, sleft = Signal(co), Signal(co), Signal(co)
        taddr, rstart = Signal(ad), Signal(ad)
        rowok, colok, lok = Signal(), Signal(), Signal()   # the tap's row, column; the left
        qlast, rlast = Signal(), Signal()          # the window's last column, row
        tr, tq = Signal(co), Signal(co)
        pend1, pend2 = Signal(), Signal()          # a tap read one, two cycles before
        paddr1, paddr2 = Signal(ad), Signal(ad)    # and its word
        best = per_lane(op, "best")
        first = Signal()
        amaddr = per_lane(ad, "amaddr")            # the first largest tap's buffer word
        dtop0, dwrow0, xband = Signal(ad), Signal(ad), Signal(ad)
        xbend0, xbend = Signal(ad), Signal(ad)     # the band's end word (plane 0, this plane)
        total = per_lane(signed(acc_w), "total")   # the window's sum (forward avg)
        wait = Signal(range(16))                   # floating point: cycles left in a wait
        scan_done = Signal()                       # the window's last tap was read
        # the result and the division
        value = per_lane(signed(acc_w), "value")
        reads = Signal(32)
        m.d.comb += self.words_read.eq(reads)

        def start_scan(top, lft, row_addr):
            inside = (lft >= 0) & (lft < L.w)           # the window's left column
            return [crow.eq(top), ccol.eq(lft), sleft.eq(lft),
                    rowok.eq((top >= 0) & (top < L.h)), colok.eq(inside), lok.eq(inside),
                    qlast.eq(sone), rlast.eq(rone),
                    taddr.eq(row_addr + lft), rstart.eq(row_addr + lft), tr.eq(0), tq.eq(0),
                    first.eq(1), *(t.eq(0) for t in total), scan_done.eq(0)]

        put, emit = self._results(m, ppb, word, lane)
        return locals()

    def _setup_multiplier(self, m, L, v):
        """The set-up's products on one multiplier, registered on both sides. Returns ``(mk,
        ma, mb, mp, products)``: the product's index, the multiplier's operand and product
        registers, and the products ``(a, b, the register that gets a b + add, add)``; an
        operand may be an earlier product (two cycles on)."""
        cfg = self.config
        top0, dtop0, shw, wrow0, dwrow0, remhw0, xrow0, drow0, xbend0 = (v[n] for n in (
            "top0", "dtop0", "shw", "wrow0", "dwrow0", "remhw0", "xrow0", "drow0", "xbend0"))
        mw = cfg.dim_width + 4
        mk = Signal(range(16))
        ma, mb = Signal(signed(mw)), Signal(signed(mw))
        mp = Signal(signed(2 * mw))
        m.d.sync += mp.eq(ma * mb)
        products = [
            (L.y0, L.stride_h, top0, -L.pad_h.as_signed()),
            (L.dlo, L.stride_h, dtop0, -L.pad_h.as_signed()),
            (L.stride_h, L.w, shw, 0),
            (top0 - L.xlo, L.w, wrow0, 0),
            (dtop0 - L.xlo, L.w, dwrow0, 0),
            (L.rem0, L.w, remhw0, 0),
            (L.y0.as_signed() - L.xlo, L.w, xrow0, 0),
            (L.q0.as_signed() - L.dlo, L.ow, drow0, 0),
            (L.rows, L.w, xbend0, xrow0),
        ]
        return mk, ma, mb, mp, products

    def _run_states(self, m, L, v, setup):
        """The run's outer states: IDLE (takes the layer at ``start``), SETUP (the plane's
        constant products, :meth:`_setup_multiplier`), PLANE, ROW and PIXEL (starts an
        element's candidate windows, backward, or an output's window scan, forward)."""
        mk, ma, mb, mp, products = setup
        (has_max, reads, pl, xpb, dpb, ppb, word, lane, oy, ymore, ym1, rmsh, smsw, rm2, sm2,
         xm2, hm1, wm1, shm1, swm1, rone, sone, xone, more, wtop, wrow, top0, wrow0, qh, remh,
         xrow, xrow0, drow, drow0, remhw, remhw0, xband, xbend, xbend0, dtop0, dwrow0, dro, ox,
         xlast, left, qw, remw, mask, acc, offh, ohc, rend, rout, rp, xget,
         start_scan) = (v[n] for n in (
            "has_max", "reads", "pl", "xpb", "dpb", "ppb", "word", "lane", "oy", "ymore", "ym1",
            "rmsh", "smsw", "rm2", "sm2", "xm2", "hm1", "wm1", "shm1", "swm1", "rone", "sone",
            "xone", "more", "wtop", "wrow", "top0", "wrow0", "qh", "remh", "xrow", "xrow0",
            "drow", "drow0", "remhw", "remhw0", "xband", "xbend", "xbend0", "dtop0", "dwrow0",
            "dro", "ox", "xlast", "left", "qw", "remw", "mask", "acc", "offh", "ohc", "rend",
            "rout", "rp", "xget", "start_scan"))
        with m.State("IDLE"):
            with m.If(self.start):
                m.d.sync += [L.eq(self.layer), reads.eq(0), mk.eq(0)]
                m.next = "SETUP"
        with m.State("SETUP"):           # the run's constant products, one a cycle
            m.d.sync += mk.eq(mk + 1)
            with m.Switch(mk):
                for i, (a, b, _, _) in enumerate(products):
                    with m.Case(i):
                        m.d.sync += [ma.eq(a), mb.eq(b)]
            with m.Switch(mk):
                for i, (_, _, dest, add) in enumerate(products):
                    with m.Case(i + 2):
                        m.d.sync += dest.eq(mp + add)
            with m.If(mk == len(products) + 1):
                m.d.sync += [pl.eq(0), xpb.eq(L.x_base), dpb.eq(L.d_base), ppb.eq(0)]
                m.next = "PLANE"
        with m.State("PLANE"):
            m.d.sync += [word.eq(0), lane.eq(0), oy.eq(0)]
            xlim = Mux(L.backward & L.avg, L.w, L.ow)   # the columns ox counts
            ylim = Mux(L.backward & ~L.avg, L.drows, L.rows)  # the rows oy counts
            m.d.sync += [ymore.eq(ylim > 0), ym1.eq(ylim - 1)]
            m.d.sync += [rmsh.eq(L.r - L.stride_h), smsw.eq(L.s - L.stride_w),
                         rm2.eq(L.r - 2), sm2.eq(L.s - 2), xm2.eq(xlim - 2),
                         hm1.eq(L.h - 1), wm1.eq(L.w - 1), shm1.eq(L.stride_h - 1),
                         swm1.eq(L.stride_w - 1), rone.eq(L.r <= 1), sone.eq(L.s <= 1),
                         xone.eq(xlim <= 1), more.eq(pl + 1 < L.planes)]
            m.d.sync += [wtop.eq(top0), wrow.eq(xpb + wrow0),
                         qh.eq(L.q0), remh.eq(L.rem0), xrow.eq(xpb + xrow0),
                         drow.eq(dpb + drow0), remhw.eq(remhw0),
                         xband.eq(xpb + xrow0), xbend.eq(xpb + xbend0)]
            with m.If(L.planes == 0):
                m.next = "IDLE"
            with m.Elif(L.backward & ~L.avg):
                m.d.sync += [wtop.eq(dtop0), wrow.eq(xpb + dwrow0), dro.eq(dpb), oy.eq(0)]
                m.next = "SROW" if has_max else "IDLE"
            with m.Else():
                m.next = "ROW"
        with m.State("ROW"):
            m.d.sync += [ox.eq(0), xlast.eq(xone), left.eq(-L.pad_w.as_signed()),
                         qw.eq(L.qw0), remw.eq(L.remw0)]
            m.next = "PIXEL"
        with m.State("PIXEL"):
            m.d.sync += [mk_.eq(0) for mk_ in mask]
            with m.If(L.backward):
                m.d.sync += [*(a.eq(0) for a in acc), offh.eq(remh), ohc.eq(qh),
                             dro.eq(drow), rend.eq((remh >= L.r) | (qh < 0)),
                             rout.eq(qh >= L.oh)]
                with m.If(L.relu):       # the element's X, for the mask at PIXEL_END
                    m.d.comb += [rp.addr.eq(xrow + ox), rp.en.eq(1)]
                    m.d.sync += [reads.eq(reads + 1), xget.eq(1)]
                m.next = "CAND_ROW"
            with m.Else():
                m.d.sync += start_scan(wtop, left, wrow)
                m.next = "SCAN"

    def _pixel_end(self, m, L, v):
        """Backward: the element's mask (relu) and value (PIXEL_END), then its division (avg)
        or straight to EMIT (PIXEL_VAL)."""
        cfg = self.config
        xval, mask, value, acc, op, fp, has_avg = (v[n] for n in (
            "xval", "mask", "value", "acc", "op", "fp", "has_avg"))
        with m.State("PIXEL_END"):
            for xv, mk_, va, a in zip(xval, mask, value, acc):
                positive = (is_positive(xv, cfg.arithmetic) if fp else
                            (xv > 0) if op.signed else (xv != 0))
                m.d.sync += [mk_.eq(L.relu & ~positive), va.eq(a)]
            m.next = "PIXEL_VAL"
        with m.State("PIXEL_VAL"):       # backward: divide (avg), mask (relu)
            m.next = "EMIT"
            if has_avg:
                with m.If(L.avg):
                    m.next = "SCALE" if fp else "DIV0"

    def _buffer(self, m):
        """The operand buffer: the DMA's writes, a read port and its data registered.
        Returns ``(read port, registered word)``."""
        cfg = self.config
        mem = m.submodules.buf = Memory(shape=self.word_shape(cfg), depth=cfg.buf_pool_depth,
                                        init=[])
        wp = mem.write_port()
        m.d.comb += [wp.en.eq(self.write.en), wp.addr.eq(self.write.addr),
                     wp.data.eq(self.write.data)]
        rp = mem.read_port()
        rword = Signal(self.word_shape(cfg), reset_less=True)
        m.d.sync += rword.eq(rp.data)
        return rp, rword

    def _results(self, m, ppb, word, lane):
        """``(put, emit)``: ``put(v, at_word, at_lane)`` adds ``v`` into one lane of P word
        ``ppb + at_word``; ``emit(vs)`` the element's results (a lane each) into P: one element
        a vector in the band's raster order (one lane), or the element's word (``pool_lanes``:
        a lane a plane), then the next element's place."""
        cfg = self.config

        def put(v, at_word, at_lane):
            m.d.comb += [self.acc.valid.eq(1), self.acc.payload.addr.eq(ppb + at_word)]
            for j in range(cfg.cols):
                m.d.comb += self.acc.payload.data[j].eq(Mux(at_lane == j, v, 0))

        def emit(vs):
            if cfg.pool_lanes == 1:
                put(vs[0], word, lane)
                with m.If(lane == cfg.cols - 1):
                    m.d.sync += [lane.eq(0), word.eq(word + 1)]
                with m.Else():
                    m.d.sync += lane.eq(lane + 1)
                return
            m.d.comb += [self.acc.valid.eq(1), self.acc.payload.addr.eq(ppb + word)]
            for j in range(cfg.cols):
                m.d.comb += self.acc.payload.data[j].eq(vs[j])
            m.d.sync += word.eq(word + 1)
        return put, emit

    @staticmethod
    def _one_hot_self_reset(m, fsm):
        """``m`` inside a module that resets it in its first cycle, its FSM one-hot.

        One-hot states in synthesis: a state's test is one flip-flop, not a decoder in front
        of every enable (Yosys's FSM pass leaves Amaranth's binary state register alone
        unless told; Amaranth 0.5 has no public name for that register, hence _data). Yosys
        ignores the register's initial value then, so the unit resets itself in its first
        cycle after configuration (``alive`` 0: its initial value), also in a domain
        without a reset; a ``start`` in that cycle is not seen."""
        state = getattr(fsm, "_data", {}).get("signal")
        if state is not None:
            state.attrs["fsm_encoding"] = "one-hot"
        top = Module()
        alive = Signal(reset_less=True)           # 0 in the unit's first cycle only
        top.d.sync += alive.eq(1)
        top.submodules.core = ResetInserter({"sync": ~alive})(m)
        return top

    def _tap_data(self, m, L, v):
        """A tap's data, two cycles after its read (``pend2``): the first largest (max, by
        the FP order in floating point) and the sum (integer average; floating point: into
        the MAC, :meth:`_float_mac`). Returns ``(mac, scaling)`` (None in integers)."""
        cfg = self.config
        rdata, best, first, amaddr, paddr2, total, pend2 = (v[n] for n in (
            "rdata", "best", "first", "amaddr", "paddr2", "total", "pend2"))
        mac = scaling = None
        if cfg.is_float:
            mac, scaling = self._float_mac(m, L, v)
        sfx = [""] if len(best) == 1 else [str(j) for j in range(len(best))]
        if cfg.is_float:
            larger = [order_key(m, d, cfg.arithmetic, f"key_tap{sfx[j]}")
                      > order_key(m, b, cfg.arithmetic, f"key_best{sfx[j]}")
                      for j, (d, b) in enumerate(zip(rdata, best))]
        else:
            larger = [d > b for d, b in zip(rdata, best)]
        with m.If(pend2):                         # the data of a tap read two cycles before
            for d, b, am, t, lg in zip(rdata, best, amaddr, total, larger):
                with m.If(first | lg):
                    m.d.sync += [b.eq(d), am.eq(paddr2)]
                if not cfg.is_float:
                    m.d.sync += t.eq(t + d)
            m.d.sync += first.eq(0)
        return mac, scaling

    def _candidates(self, m, L, v):
        """Backward: the windows covering each element (CAND_ROW, CAND_COL, CAND_D;
        floating point CAND_WAIT), their dY summed. ``v``: the shared values
        (:meth:`_registers`)."""
        (acc, apend, cend, cout, dro, fp, mac, offh, offw, ohc, owc, qw, rdata, reads,
         remw, rend, rmsh, rout, rp, smsw, wait) = (v.get(n) for n in (
            'acc', 'apend', 'cend', 'cout', 'dro', 'fp', 'mac', 'offh', 'offw', 'ohc',
            'owc', 'qw', 'rdata', 'reads', 'remw', 'rend', 'rmsh', 'rout', 'rp', 'smsw',
            'wait'))
        # --- backward: the windows covering (y, x) ----------------------------------------
        def next_row():
            """The next window up: its row's tests from the values before the step."""
            m.d.sync += [offh.eq(offh + L.stride_h), ohc.eq(ohc - 1), dro.eq(dro - L.ow),
                         rend.eq((offh >= rmsh) | (ohc <= 0)), rout.eq(ohc > L.oh)]

        def next_col():
            m.d.sync += [offw.eq(offw + L.stride_w), owc.eq(owc - 1),
                         cend.eq((offw >= smsw) | (owc <= 0)), cout.eq(owc > L.ow)]

        with m.State("CAND_ROW"):
            with m.If(rend):
                m.next = "PIXEL_END"
            with m.Elif(rout):
                next_row()
            with m.Else():
                m.d.sync += [offw.eq(remw), owc.eq(qw),
                             cend.eq((remw >= L.s) | (qw < 0)), cout.eq(qw >= L.ow)]
                m.next = "CAND_COL"
        def cand_col():
            with m.If(cend):
                next_row()
                m.next = "CAND_ROW"
            with m.Elif(cout):
                next_col()
            with m.Else():
                m.d.comb += [rp.addr.eq(dro + owc), rp.en.eq(1)]
                m.d.sync += reads.eq(reads + 1)
                m.next = "CAND_D"

        with m.State("CAND_COL"):
            if fp:                       # the dY read two cycles before: into the adder,
                with m.If(apend):        # and wait for its sum (CAND_WAIT)
                    m.d.sync += wait.eq(POOL_FLOAT_MAC_LATENCY - 1)
                    m.next = "CAND_WAIT"
                with m.Else():
                    cand_col()
            else:
                with m.If(apend):        # the dY read two cycles before
                    m.d.sync += [a.eq(a + d) for a, d in zip(acc, rdata)]
                cand_col()
        if fp:
            with m.State("CAND_WAIT"):
                m.d.sync += wait.eq(wait - 1)
                with m.If(wait == 0):
                    m.d.sync += [a.eq(mc.result) for a, mc in zip(acc, mac)]
                    m.next = "CAND_COL"
        with m.State("CAND_D"):          # avg: sum the covering windows' dY (at CAND_COL)
            m.d.sync += apend.eq(1)
            next_col()
            m.next = "CAND_COL"


    def _window_scan(self, m, L, v):
        """The window scan, one tap a cycle (SCAN to FWD_VAL; floating point SCAN_WAIT,
        SCAN_END3), and the average's division (DIV*) or scaling (SCALE, SCALE_WAIT).
        ``v``: the shared values (:meth:`_registers`)."""
        (best, ccol, cfg, colok, crow, fp, has_avg, hm1, lok, mac, paddr1, pend1, qlast,
         reads, rlast, rm2, rowok, rp, rstart, scaling, scan_done, sleft, sm2, sone,
         taddr, total, tq, tr, value, wait, wm1) = (v.get(n) for n in (
            'best', 'ccol', 'cfg', 'colok', 'crow', 'fp', 'has_avg', 'hm1', 'lok',
            'mac', 'paddr1', 'pend1', 'qlast', 'reads', 'rlast', 'rm2', 'rowok', 'rp',
            'rstart', 'scaling', 'scan_done', 'sleft', 'sm2', 'sone', 'taddr', 'total',
            'tq', 'tr', 'value', 'wait', 'wm1'))
        # --- the window scan: one tap a cycle, the read's data two cycles on (taken in
        # SCAN, SCAN_END and SCAN_END2, outside the states: only SCAN reads taps) ---------
        with m.State("SCAN"):
            ok = rowok & colok
            m.d.comb += [rp.addr.eq(taddr), rp.en.eq(ok)]
            m.d.sync += [pend1.eq(ok), paddr1.eq(taddr)]
            with m.If(ok):
                m.d.sync += reads.eq(reads + 1)
            if fp:                       # avg: one tap in the adder at a time
                with m.If(L.avg & ~L.backward):
                    m.d.sync += wait.eq(self.FLOAT_TAP - 2)
                    m.next = "SCAN_WAIT"
            with m.If(~qlast):           # the next column: its tests from the values before
                m.d.sync += [tq.eq(tq + 1), ccol.eq(ccol + 1), taddr.eq(taddr + 1),
                             colok.eq((ccol >= -1) & (ccol < wm1)), qlast.eq(tq >= sm2)]
            with m.Else():
                m.d.sync += [tq.eq(0), tr.eq(tr + 1), ccol.eq(sleft), crow.eq(crow + 1),
                             colok.eq(lok), qlast.eq(sone),
                             rowok.eq((crow >= -1) & (crow < hm1)), rlast.eq(tr >= rm2),
                             taddr.eq(rstart + L.w), rstart.eq(rstart + L.w)]
                with m.If(rlast):
                    m.d.sync += scan_done.eq(1)
                    if fp:
                        with m.If(~L.avg | L.backward):
                            m.next = "SCAN_END"
                    else:
                        m.next = "SCAN_END"
        if fp:
            with m.State("SCAN_WAIT"):   # until the tap's sum is in total
                m.d.sync += wait.eq(wait - 1)
                with m.If(wait == 0):
                    m.next = "SCAN"
                    with m.If(scan_done):
                        m.next = "SCAN_END"
        with m.State("SCAN_END"):
            m.next = "SCAN_END2"
        if fp:
            with m.State("SCAN_END2"):   # P's adders: a word's vectors FLOAT_SPACING apart
                m.next = "SCAN_END3"
        with m.State("SCAN_END3" if fp else "SCAN_END2"):
            with m.If(L.backward):
                m.next = "SCATTER"
            with m.Else():
                m.next = "FWD_VAL"
        with m.State("FWD_VAL"):
            for j, (va, b) in enumerate(zip(value, best)):
                name = "best32" if len(best) == 1 else f"best32_{j}"
                m.d.sync += va.eq(widen(m, b, cfg.arithmetic, name) if fp else b)
            m.next = "EMIT"
            if has_avg:
                with m.If(L.avg):
                    m.d.sync += [va.eq(t) for va, t in zip(value, total)]
                    m.next = "SCALE" if fp else "DIV0"

        # --- round(value / (R S)), halves up: floor((2 v + R S) / (2 R S)); floating
        # point: value times fp32(1 / (R S)), rounded once ---------------------------------
        if has_avg and not fp:
            self._divide(m, L, value)
        if has_avg and fp:
            with m.State("SCALE"):       # value x recip into the MAC (_float_mac)
                m.d.comb += scaling.eq(1)
                m.d.sync += wait.eq(POOL_FLOAT_MAC_LATENCY - 1)
                m.next = "SCALE_WAIT"
            with m.State("SCALE_WAIT"):
                m.d.sync += wait.eq(wait - 1)
                with m.If(wait == 0):
                    m.d.sync += [va.eq(mc.result) for va, mc in zip(value, mac)]
                    m.next = "EMIT"


    def _emit(self, m, L, v):
        """A result into P (EMIT) and the next element, output or row (NEXT_ROW). ``v``: the
        shared values (:meth:`_registers`)."""
        (dpb, drow, emit, left, mask, more, ox, oy, pl, ppb, qh, qw, remh, remhw, remw,
         shm1, shw, swm1, value, wrow, wtop, xlast, xm2, xpb, xrow, ym1,
         ymore) = (v.get(n) for n in (
            'dpb', 'drow', 'emit', 'left', 'mask', 'more', 'ox', 'oy', 'pl', 'ppb',
            'qh', 'qw', 'remh', 'remhw', 'remw', 'shm1', 'shw', 'swm1', 'value', 'wrow',
            'wtop', 'xlast', 'xm2', 'xpb', 'xrow', 'ym1', 'ymore'))
        with m.State("EMIT"):
            emit([Mux(mk_, 0, va) for mk_, va in zip(mask, value)])
            with m.If(L.backward):       # the next element of the dX band
                with m.If(~xlast):
                    m.d.sync += [ox.eq(ox + 1), xlast.eq(ox >= xm2)]
                    with m.If(remw == swm1):
                        m.d.sync += [remw.eq(0), qw.eq(qw + 1)]
                    with m.Else():
                        m.d.sync += remw.eq(remw + 1)
                    m.next = "PIXEL"
                with m.Else():
                    m.d.sync += [oy.eq(oy + 1), ymore.eq(oy < ym1), xrow.eq(xrow + L.w)]
                    with m.If(remh == shm1):
                        m.d.sync += [remh.eq(0), qh.eq(qh + 1), drow.eq(drow + L.ow),
                                     remhw.eq(0)]
                    with m.Else():
                        m.d.sync += [remh.eq(remh + 1), remhw.eq(remhw + L.w)]
                    m.next = "NEXT_ROW"
            with m.Else():               # the next output of the band
                with m.If(~xlast):
                    m.d.sync += [ox.eq(ox + 1), xlast.eq(ox >= xm2),
                                 left.eq(left + L.stride_w)]
                    m.next = "PIXEL"
                with m.Else():
                    m.d.sync += [oy.eq(oy + 1), ymore.eq(oy < ym1),
                                 wtop.eq(wtop + L.stride_h),
                                 wrow.eq(wrow + shw)]
                    m.next = "NEXT_ROW"
        with m.State("NEXT_ROW"):
            with m.If(ymore):
                m.next = "ROW"
            with m.Elif(more):
                m.d.sync += [pl.eq(pl + 1), xpb.eq(xpb + L.x_plane),
                             dpb.eq(dpb + L.d_plane), ppb.eq(ppb + L.p_row)]
                m.next = "PLANE"
            with m.Else():
                m.next = "IDLE"

    #: Floating point, forward average: cycles a tap (its sum through the MAC before the next).
    FLOAT_TAP = POOL_FLOAT_MAC_LATENCY + 1

    def _float_mac(self, m, L, v):
        """Floating point: the unit's one fp32 :class:`FloatMac` (``acc + a b`` rounded once)
        behind a register of its inputs, ``POOL_FLOAT_MAC_LATENCY`` cycles in all, for the
        average's sums (``a`` the tap or dY widened to fp32, ``b`` one: the contract's
        addition) and its scaling (in state SCALE: the sum times ``recip``, fp32(1 / (R S)),
        added to ``+0``). A forward tap's sum lands in ``total`` ``POOL_FLOAT_MAC_LATENCY``
        cycles after the tap's data (SCAN_WAIT waits for it)."""
        assert FloatMac.LATENCY + 1 == POOL_FLOAT_MAC_LATENCY, \
            "bpsa.spec.numeric's latency is the model's"
        scaling = Signal()                          # driven by state SCALE
        macs = []
        one = len(v["rdata"]) == 1
        for j, (d, va, ac, tot) in enumerate(zip(v["rdata"], v["value"], v["acc"],
                                                 v["total"])):
            sfx = "" if one else f"_{j}"
            mac = FloatMac("fp32")
            m.submodules["mac" if one else f"mac{j}"] = mac
            tap = widen(m, d, self.config.arithmetic, f"tap32{sfx}")
            a, b, s = (Signal(32, name=f"mac_a{sfx}"), Signal(32, name=f"mac_b{sfx}"),
                       Signal(32, name=f"mac_s{sfx}"))
            m.d.sync += [a.eq(Mux(scaling, va[:32], tap)),
                         b.eq(Mux(scaling, L.recip[:32], 0x3F800000)),
                         s.eq(Mux(scaling, 0, Mux(L.backward, ac, tot)))]
            m.d.comb += [mac.a.eq(a), mac.b.eq(b), mac.acc.eq(s)]
            macs.append(mac)
        land = v["pend2"] & L.avg & ~L.backward
        for k in range(POOL_FLOAT_MAC_LATENCY):
            later = Signal(name=f"sum_d{k + 1}")
            m.d.sync += later.eq(land)
            land = later
        with m.If(land):
            m.d.sync += [t.eq(mc.result) for t, mc in zip(v["total"], macs)]
        return macs, scaling

    def _divide(self, m, L, values):
        """States DIV0, DIV1, ...: each lane's ``value`` becomes ``floor((2 value + R S) / (2 R
        S))`` (exact: the module docstring), then EMIT; :func:`bpsa.spec.numeric.
        pool_divide_cycles` cycles. DIV0 makes the numerator positive; DIV1 multiplies the
        pieces of its magnitude and of the reciprocal (one hardware multiplier a pair); each
        state on adds the products in pairs, the last also shifting. A negative numerator's
        quotient ``q`` becomes ``-q = ~(q - 1)``: one more term, ``-2**POOL_RECIP_SHIFT``
        (all ones from that bit, modulo the quotient's bits), and the last state's
        complement."""
        cfg = self.config
        acc_w = cfg.acc_width + 2
        mag_w, rec_w = pool_divide_widths(cfg)
        c = POOL_DIVIDE_CHUNK
        qw = cfg.operand_width + 2               # the quotient's bits (|average| bound)
        sfx = [""] if len(values) == 1 else [f"_{j}" for j in range(len(values))]
        negs = [Signal(name=f"neg{x}") for x in sfx]
        mags = [Signal(unsigned(mag_w), name=f"mag{x}") for x in sfx]
        with m.State("DIV0"):
            for x, value, neg, mag in zip(sfx, values, negs, mags):
                num = Signal(signed(acc_w + 1), name=f"num{x}")
                alt = Signal(signed(acc_w + 2), name=f"alt{x}")
                # a negative numerator's magnitude less one, + 2 R S: -num + 2 R S - 1 =
                # ~2 v + R S
                m.d.comb += [num.eq((value << 1) + L.rs), alt.eq(~(value << 1) + L.rs)]
                m.d.sync += [neg.eq(num < 0), mag.eq(Mux(num < 0, alt, num))]
            m.next = "DIV1"
        # terms (shift, register) of each lane, the products first
        lane_terms = []
        with m.State("DIV1"):
            for x, neg, mag in zip(sfx, negs, mags):
                terms = []
                for i in range(0, mag_w, c):
                    for j in range(0, rec_w, c):
                        a, b = mag[i:min(i + c, mag_w)], L.recip[j:min(j + c, rec_w)]
                        t = Signal(unsigned(len(a) + len(b)), name=f"pp_{i // c}_{j // c}{x}")
                        m.d.sync += t.eq(a * b)
                        terms.append((i + j, t))
                t = Signal(unsigned(qw), name=f"pp_neg{x}")
                m.d.sync += t.eq(Mux(neg, (1 << qw) - 1, 0))
                terms.append((POOL_RECIP_SHIFT, t))
                lane_terms.append(terms)
            m.next = "DIV2"
        level = 2
        while True:
            last = len(lane_terms[0]) <= 2
            with m.State(f"DIV{level}"):
                for li, (x, value, neg) in enumerate(zip(sfx, values, negs)):
                    terms = sorted(lane_terms[li], key=lambda st: st[0])
                    sums = []
                    for k in range(0, len(terms), 2):
                        (s0, t0), rest = terms[k], terms[k + 1:k + 2]
                        if rest:             # t0 + t1 << d: t0's low d bits stand alone
                            s1, t1 = rest[0]
                            d = s1 - s0
                            e = (Cat(t0[:d], t0[d:] + t1) if d < len(t0) else
                                 Cat(t0, Const(0, d - len(t0)), t1))
                        else:
                            e = t0
                        if last:
                            quo = Signal(unsigned(qw), name=f"quo{x}")
                            m.d.comb += quo.eq(Cat(Const(0, s0), e)[POOL_RECIP_SHIFT:])
                            m.d.sync += value.eq(Mux(neg, ~quo, quo).as_signed())
                        else:
                            t = Signal(unsigned(len(e)), name=f"ps{level}_{k // 2}{x}")
                            m.d.sync += t.eq(e)
                            sums.append((s0, t))
                    lane_terms[li] = sums
                m.next = "EMIT" if last else f"DIV{level + 1}"
            if last:
                break
            level += 1

    def _scatter(self, m, L, v):
        """Backward, max: states SROW (a row of windows), SPIX (read its dY), SPIX_D (scan the
        window), SCATTER (add dY at the maximum when it lies in the band; with
        ``pool_lanes``, a lane a cycle, each at its own maximum), SNEXT.

        Floating point with ``pool_lanes``: P's fp32 adders do not forward a word's sum to
        the next vector for it (:data:`bpsa.gateware.results.psum_buffer.FLOAT_SPACING`), so
        the lanes whose maxima are the same element (the same P word) go into P as one
        vector, in the cycle of the first of them (:meth:`_float_lanes_put`); SCATTER still
        takes ``L`` cycles."""
        cfg = self.config
        NL = cfg.pool_lanes
        rp = v["rp"]
        wtop, wrow, dro, left, oy, ox = (v[n] for n in ("wtop", "wrow", "dro", "left", "oy",
                                                         "ox"))
        dsave, best, amaddr, xband = v["dsave"], v["best"], v["amaddr"], v["xband"]
        op = arith_for(cfg).operand_shape
        fp = cfg.is_float
        if NL == 1:
            am, bst, dsv = amaddr[0], best[0], dsave[0]
        elif fp:                         # the lane whose cycle it is: its maximum
            sl = Signal(range(NL))
            am = Signal.like(amaddr[0], name="am_sel")
            m.d.comb += am.eq(Array(amaddr)[sl])
        else:                            # the lane SCATTER adds: its maximum, dY
            sl = Signal(range(NL))
            am, bst, dsv = Signal.like(amaddr[0], name="am_sel"), Signal(op, name="best_sel"), \
                Signal(op, name="dsave_sel")
            m.d.comb += [am.eq(Array(amaddr)[sl]), bst.eq(Array(best)[sl]),
                         dsv.eq(Array(dsave)[sl])]
        # P word and lane of the maximum's element e of the band: e // cols and e % cols as
        # (e M) >> K (exact for 0 <= e < 2**nb: the band's elements fit P); with pool_lanes,
        # word e, the plane's lane
        nb = exact_log2(cfg.buf_p_depth) + max(1, (cfg.cols - 1).bit_length()) + 1
        lb = max(0, (cfg.cols - 1).bit_length())
        K = nb + lb
        M = -(-(1 << K) // cfg.cols)
        e = Signal(unsigned(nb))
        m.d.comb += e.eq(am - xband)
        if NL == 1:
            wq = Signal(unsigned(nb))
            m.d.comb += wq.eq((e * M) >> K)
            ln = Signal(range(cfg.cols))
            m.d.comb += ln.eq(e - wq * cfg.cols)
        else:
            wq, ln = e, sl
        if fp and NL > 1:
            lanes_put = self._float_lanes_put(m, L, v, sl, am, wq)
        else:
            inside = (am >= xband) & (am < v["xbend"])
            positive = (is_positive(bst, cfg.arithmetic) if fp else
                        (bst > 0) if op.signed else (bst != 0))
        with m.State("SROW"):
            with m.If(~v["ymore"]):          # the plane's windows are done
                with m.If(v["more"]):
                    m.d.sync += [v["pl"].eq(v["pl"] + 1), v["xpb"].eq(v["xpb"] + L.x_plane),
                                 v["dpb"].eq(v["dpb"] + L.d_plane),
                                 v["ppb"].eq(v["ppb"] + L.p_row)]
                    m.next = "PLANE"
                with m.Else():
                    m.next = "IDLE"
            with m.Else():
                m.d.sync += [ox.eq(0), v["xlast"].eq(v["xone"]), left.eq(-L.pad_w.as_signed())]
                m.next = "SPIX"
        with m.State("SPIX"):
            m.d.comb += [rp.addr.eq(dro + ox), rp.en.eq(1)]
            m.d.sync += v["reads"].eq(v["reads"] + 1)
            m.next = "SPIX_D"
        with m.State("SPIX_D"):
            m.d.sync += [*(d.eq(x) for d, x in zip(dsave, v["lanes_of"](rp.data))),
                         *v["start_scan"](wtop, left, wrow)]
            m.next = "SCAN"
        with m.State("SCATTER"):
            if fp and NL > 1:
                lanes_put()
            else:
                with m.If(inside & (~L.relu | positive)):
                    v["put"](widen(m, dsv, cfg.arithmetic, "dy32") if fp else dsv, wq, ln)
            def next_window():
                with m.If(~v["xlast"]):
                    m.d.sync += [ox.eq(ox + 1), v["xlast"].eq(ox >= v["xm2"]),
                                 left.eq(left + L.stride_w)]
                    m.next = "SPIX"
                with m.Else():
                    m.d.sync += [oy.eq(oy + 1), v["ymore"].eq(oy < v["ym1"]),
                                 wtop.eq(wtop + L.stride_h),
                                 wrow.eq(wrow + v["shw"]), dro.eq(dro + L.ow)]
                    m.next = "SROW"
            if NL == 1:
                next_window()
            else:                        # the last lane: the next window
                m.d.sync += sl.eq(sl + 1)
                with m.If(sl == NL - 1):
                    m.d.sync += sl.eq(0)
                    next_window()

    def _float_lanes_put(self, m, L, v, sl, am, wq):
        """Floating point with ``pool_lanes``: SCATTER's vector in its cycle ``sl`` (a
        function adding it, called in the state). Lane ``j`` adds (``ok``) when its maximum
        lies in the band and, with ``relu``, is positive. The cycle of lane ``sl`` puts one
        vector into P word ``wq`` (``sl``'s maximum, ``am``) when ``sl`` adds and no earlier
        lane adding has the same maximum: every lane adding at that element, its dY in its
        own lane (the others 0). Each P word so gets at most one vector a window (P's fp32
        adders need a word's vectors ``FLOAT_SPACING`` cycles apart; the next window's come
        seven cycles after the last lane's), and each lane's additions keep their order. (The
        function widens the dY in the state: :func:`widen` switches, which an FSM takes only
        inside a state.)"""
        cfg = self.config
        NL = cfg.pool_lanes
        amaddr, best, dsave = v["amaddr"], v["best"], v["dsave"]
        ok = [Signal(name=f"sok{j}") for j in range(NL)]
        same = [Signal(name=f"ssame{j}") for j in range(NL)]
        for j in range(NL):
            inside = (amaddr[j] >= v["xband"]) & (amaddr[j] < v["xbend"])
            m.d.comb += [ok[j].eq(inside & (~L.relu | is_positive(best[j], cfg.arithmetic))),
                         same[j].eq(amaddr[j] == am)]
        lead = Signal(name="slead")      # lane sl adds, and no earlier lane at its element
        m.d.comb += lead.eq(Array(ok)[sl] & ~Cat(*(ok[i] & same[i] & (i < sl)
                                                   for i in range(NL))).any())

        def put():
            dy32 = [widen(m, d, cfg.arithmetic, f"dy32_{j}") for j, d in enumerate(dsave)]
            with m.If(lead):
                m.d.comb += [self.acc.valid.eq(1),
                             self.acc.payload.addr.eq(v["ppb"] + wq)]
                for j in range(NL):
                    m.d.comb += self.acc.payload.data[j].eq(Mux(ok[j] & same[j], dy32[j], 0))
        return put
