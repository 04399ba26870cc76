"""The zero-free loss walker: operands of ``dX`` for the output-stationary array as ``s_h x s_w``
stride classes, each a stride-1 correlation of the compact dY with the class's sub-kernel; no
zero-spaced dY exists, no inserted zero is read or multiplied.

In the band's frame (dX rows ``0 .. height - 1``, dY rows ``0 .. out_height - 1`` in the buffer,
``pad_top`` the padding that puts them where the layer does)::

    dX[c, h, w] = sum over k and the taps (r, q) with h + pad_top - r d_h = oh s_h and
                  w + pad_w - q d_w = ow s_w of dY[k, oh, ow] * W[k, c, r, q]

A class ``(a, b)`` holds the pixels ``h = a + s_h i'``, ``w = b + s_w j'``; its taps are those
with ``(a + pad_top - r d_h) mod s_h = 0`` and ``(b + pad_w - q d_w) mod s_w = 0``, and for them
``oh = i' + (a + pad_top - r d_h) / s_h`` exactly (no division at run time: the walker keeps
quotient and remainder of ``a + pad_top - r d_h`` by ``s_h``, from ``pad_top`` and ``d_h`` divided
by ``s_h``, which the controller supplies; per tap it keeps the remainders, whose zeros say
which taps the class has, and what the quotients give: the dY word offset
``quo_h out_width + quo_w`` and the class pixels whose dY pixel lies inside dY).

Array row ``i`` holds the tile's ``i``-th class pixel (``rows`` consecutive pixels of the class
in raster order, across class rows), column ``j`` input channel ``j`` of the run's block. One
*context* per tile: for every tap of the class and every block of ``cols`` output channels k,
one vector per k. The dY buffer holds channel-blocked words (``cols`` output channels of one
pixel); the walker reads the ``rows`` tile pixels' words of one block into a transposer (one
word a cycle) and sends its columns (one output channel each) while it loads the next block,
so one vector leaves a cycle when ``rows <= cols``. The W buffer holds ``W[k, c, r, q]`` with
the block's input channels as lanes, word ``k R S + r S + q``.

Pipeline
    The loader walks class, tile, tap, block and pixel; every address it needs is kept by
    additions (products only in the run's two set-up cycles), every decision comes from a
    register (the pixel's end of class row, the last block, the last tap, ...). It hands each
    pixel read to an item register (the dY word address, whether it is inside dY, the slot
    and tag data), which issues the read when the pixel's slot is free: the X memory's
    address comes from a register. Per class one set-up cycle precedes the tap scan and one
    cycle after its last tile finds its pixels done; the first read issues a cycle after the
    loader's first pixel.

Buffers (word addresses)
    dY: ``x_base + (kb out_height + oh) out_width + ow``, lanes ``0 .. cols - 1`` (block ``kb``
    of the run, ``kblocks`` blocks; the last holds ``kvalid`` output channels). W:
    ``w_base + k R S + r S + q`` (``k`` counts the run's output channels from 0).

Tags
    For every context the walker writes, per row, the P offset ``h width + w`` of its pixel
    (``ok`` low for rows past the class's last pixel) into one of ``TAG_SLOTS`` slots; the
    consumer reads them while the context drains (``tag_ctx``, ``tag_row``) and pulses
    ``ctx_done`` when a context has drained, which frees its slot.
"""

from types import SimpleNamespace

from amaranth.hdl import Cat, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory, ReadPort
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

from bpsa.config import require_config
from bpsa.gateware.array.arith import arith_for
from bpsa.gateware.frontends.zero_free.gradient import feed_layout

__all__ = ["SLOTS", "TAG_SLOTS", "ZF_LOSS_FIELDS", "ZeroFreeLossWalker", "dy_position",
           "inc_divmod", "sub_divmod", "zf_loss_layout"]

#: Contexts whose P offsets are held at once (the walker waits for a free slot).
TAG_SLOTS = 8

#: Blocks the transposer holds: the loader fills one while the emitter sends another and a
#: third waits, so one vector leaves a cycle when ``rows <= cols`` (with two, the hand-over
#: costs a cycle a block).
SLOTS = 3

#: Fields of the walker's run descriptor (:func:`zf_loss_layout`).
ZF_LOSS_FIELDS = ("height", "width", "out_height", "out_width", "kernel_h", "kernel_w",
                  "stride_h", "stride_w", "pad_top", "pad_w", "pt_q", "pt_r", "pw_q", "pw_r",
                  "dh_q", "dh_r", "dw_q", "dw_r", "kblocks", "kvalid", "plane", "x_base",
                  "w_base")


def zf_loss_layout(config):
    """One run: ``height`` / ``width`` (the band's dX rows, W), ``out_height`` /
    ``out_width`` (dY rows and columns in the buffer), the kernel and strides, ``pad_top`` /
    ``pad_w``, their quotients and remainders by the strides (``pt_q``, ``pt_r``, ``pw_q``,
    ``pw_r``) and those of the dilations (``dh_q``, ``dh_r``, ``dw_q``, ``dw_r``),
    ``kblocks`` (blocks of ``cols`` output channels), ``kvalid`` (channels of the last block,
    1..cols), ``plane`` (``out_height out_width``), ``x_base`` / ``w_base``: word addresses."""
    dim = unsigned(config.dim_width + 2)
    fields = {name: dim for name in ZF_LOSS_FIELDS[:-3]}
    fields["plane"] = unsigned(2 * (config.dim_width + 2))
    fields["x_base"] = unsigned(ceil_log2(config.buf_a_depth))
    fields["w_base"] = unsigned(ceil_log2(config.buf_b_depth))
    return data.StructLayout(fields)


def tag_layout(config):
    """A row's tag: ``ok`` (the row holds a pixel) and ``addr`` (its P offset)."""
    return data.StructLayout({"ok": unsigned(1),
                              "addr": unsigned(2 * (config.dim_width + 2))})


class ZeroFreeLossWalker(wiring.Component):
    """See the module docstring.

    ``start`` samples ``layer`` when idle; ``busy`` stays high until the last vector has been
    taken. A run with a zero size ends at once with no vector.

    Members
    -------
    layer : In(zf_loss_layout(config)), start : In(1), busy : Out(1)
    x_mem : In(ReadPort.Signature(log2(buf_a_depth), ArrayLayout(op, B))), B >= cols
    w_mem : In(ReadPort.Signature(log2(buf_b_depth), ArrayLayout(op, cols)))
    feed : Out(stream.Signature(feed_layout(config)))
    tag_ctx : In(range(TAG_SLOTS)), tag_row : In(range(rows)), tag : Out(tag_layout)
    ctx_done : In(1)
    """

    def __init__(self, config):
        self.config = require_config(config)
        if config.feeder_bus_width < config.cols:
            raise ValueError(f"the zero-free loss needs feeder_bus_width >= cols (dY words of "
                             f"cols channels in the X SRAM), not feeder_bus_width "
                             f"{config.feeder_bus_width} with cols {config.cols}")
        op = arith_for(config).operand_shape
        super().__init__({
            "layer": In(zf_loss_layout(config)), "start": In(1), "busy": Out(1),
            "x_mem": In(ReadPort.Signature(
                addr_width=ceil_log2(config.buf_a_depth),
                shape=data.ArrayLayout(op, config.feeder_bus_width))),
            "w_mem": In(ReadPort.Signature(
                addr_width=ceil_log2(config.buf_b_depth),
                shape=data.ArrayLayout(op, config.cols))),
            "feed": Out(stream.Signature(feed_layout(config))),
            "tag_ctx": In(range(TAG_SLOTS)), "tag_row": In(range(config.rows)),
            "tag": Out(tag_layout(config)), "ctx_done": In(1),
        })

    def elaborate(self, platform):
        cfg = self.config
        m = Module()
        dim = cfg.dim_width + 2
        lay = Signal(zf_loss_layout(cfg))
        # the signals the methods below share, and the widths they take them with
        s = SimpleNamespace(lay=lay, dim=dim, op=arith_for(cfg).operand_shape,
                            xa=ceil_log2(cfg.buf_a_depth), wa=ceil_log2(cfg.buf_b_depth),
                            sd=signed(dim + 2),    # remainders and quotients
                            sb=signed(dim + 4),    # dY row / column bounds of a tap
                            ta=2 * dim)            # tag (P offset) bits
        s.slot_data, s.slot_full, s.slot_w, s.slot_kv, s.slot_last = self._transposer(s.op, s.wa)
        self._tags(m, s)
        self._run_constant_registers(s)
        self._class_registers(s)
        self._tap_registers(m, s)
        self._pixel_cursor(s)
        self._loader_registers(s)
        self._item_register(m, s)
        self._transposer_write(m, s)
        self._item_load(m, s)
        self._loader(m, s)
        self._context_count(m, s)
        self._emitter(m, s)

        any_full = 0
        for f in s.slot_full:
            any_full = any_full | f
        m.d.comb += self.busy.eq(s.setup | s.setup2 | s.cinit | s.scan | s.load | ~s.loader_done
                                 | s.bv | s.wr_en | any_full | s.valid)
        return m

    def _transposer(self, op, wa):
        """The transposer: ``SLOTS`` slots of rows x cols operands, with their block data (the
        W word of t = 0, the block's channels, the run's last block). Returns the slots' data,
        full flags, W words, channel counts and last flags."""
        R, C = self.config.rows, self.config.cols
        S = SLOTS
        slot_data = [[Signal(data.ArrayLayout(op, C), name=f"slot{s}_row{i}")
                      for i in range(R)] for s in range(S)]
        slot_full = [Signal(name=f"slot{s}_full") for s in range(S)]
        slot_w = [Signal(wa, name=f"slot{s}_w") for s in range(S)]        # W word of t = 0
        slot_kv = [Signal(range(C + 1), name=f"slot{s}_kv") for s in range(S)]
        slot_last = [Signal(name=f"slot{s}_last") for s in range(S)]
        return slot_data, slot_full, slot_w, slot_kv, slot_last

    @staticmethod
    def _pick(signals, index):
        """``signals[index]``, one signal per transposer slot."""
        out = signals[0]
        for k in range(1, SLOTS):
            out = Mux(index == k, signals[k], out)
        return out

    @staticmethod
    def _succ(index):
        """The transposer slot after ``index``."""
        return Mux(index == SLOTS - 1, 0, index + 1)

    def _tags(self, m, s):
        """The tags, ``TAG_SLOTS`` contexts of one per row, in a small RAM (LUT RAM: one
        write a cycle, read asynchronously at ``tag_ctx``, ``tag_row``; a tag is read only
        after its context was issued). Sets ``s.tags`` (the write port), ``s.ctx_in_flight``,
        ``s.ctx_slot``."""
        cfg, R = self.config, self.config.rows
        rb = ceil_log2(R)
        m.submodules.tag_ram = ram = Memory(shape=tag_layout(cfg), depth=TAG_SLOTS << rb,
                                            init=[])
        tags = ram.write_port()
        read = ram.read_port(domain="comb")
        m.d.comb += [read.addr.eq(Cat(self.tag_row, self.tag_ctx)), self.tag.eq(read.data)]
        ctx_in_flight = Signal(range(TAG_SLOTS + 1))
        ctx_slot = Signal(range(TAG_SLOTS))       # tag slot of the context being issued
        s.tags, s.ctx_in_flight, s.ctx_slot = tags, ctx_in_flight, ctx_slot

    def _run_constant_registers(self, s):
        """The run constants' registers, set in the run's two set-up cycles (``setup``,
        ``setup2``; products there only). Sets ``s.setup``, ``s.setup2`` and each constant in
        ``s`` under its name (``s.rs_w``, ``s.crs_w``, ``s.ow_x``, ... ``s.dwq1``,
        ``s.dhq1``)."""
        dim, xa, wa, ta = s.dim, s.xa, s.wa, s.ta
        setup, setup2 = Signal(name="setup"), Signal(name="setup2")
        # R S, C R S (W words, modulo the buffer)
        rs_w, crs_w = Signal(wa, name="rs_w"), Signal(wa, name="crs_w")
        # out_width, plane (X words, modulo)
        ow_x, plane_x = Signal(xa, name="ow_x"), Signal(xa, name="plane_x")
        # dh_q out_width, (dh_q + 1) out_width
        ow_dhq, ow_dhq1 = Signal(xa, name="ow_dhq"), Signal(xa, name="ow_dhq1")
        pt_ow = Signal(xa)                        # pt_q out_width
        xrow0 = Signal(xa)                        # x_base + out_width
        shw = Signal(ta)                          # s_h width
        w_less_sw = Signal(signed(dim + 2))       # width - s_w
        swm1, shm1 = Signal(dim, name="swm1"), Signal(dim, name="shm1")     # s_w - 1, s_h - 1
        kwm1, khm1, kbm1 = (Signal(dim, name=n) for n in ("kwm1", "khm1", "kbm1"))
        # kernel_w == 1, ...
        kw1, kh1, kb1 = (Signal(name=n) for n in ("kw1", "kh1", "kb1"))
        # s_w - dw_r, s_h - dh_r
        sw_dwr, sh_dhr = Signal(dim, name="sw_dwr"), Signal(dim, name="sh_dhr")
        # 2 dw_r - s_w, 2 dw_r, 2 dh_r - s_h, 2 dh_r (the borrows' steps)
        bq_lt1, bq_lt2, br_lt1, br_lt2 = (Signal(signed(dim + 3), name=n)
                                          for n in ("bq_lt1", "bq_lt2", "br_lt1", "br_lt2"))
        # dw_q + 1, dh_q + 1
        dwq1, dhq1 = Signal(dim + 1, name="dwq1"), Signal(dim + 1, name="dhq1")
        s.setup, s.setup2, s.rs_w, s.crs_w, s.ow_x, s.plane_x = (
            setup, setup2, rs_w, crs_w, ow_x, plane_x)
        s.ow_dhq, s.ow_dhq1, s.pt_ow, s.xrow0, s.shw, s.w_less_sw = (
            ow_dhq, ow_dhq1, pt_ow, xrow0, shw, w_less_sw)
        s.swm1, s.shm1, s.kwm1, s.khm1, s.kbm1, s.kw1, s.kh1, s.kb1 = (
            swm1, shm1, kwm1, khm1, kbm1, kw1, kh1, kb1)
        s.sw_dwr, s.sh_dhr, s.bq_lt1, s.bq_lt2, s.br_lt1, s.br_lt2, s.dwq1, s.dhq1 = (
            sw_dwr, sh_dhr, bq_lt1, bq_lt2, br_lt1, br_lt2, dwq1, dhq1)

    def _class_registers(self, s):
        """The class (a, b): (rem, quo) of a + pad_top by s_h and of b + pad_w by s_w, what
        the class's set-up cycle (``cinit``) derives from them (``c_*``, and ``f_*`` for its
        first tap), and the loader's phases (``loader_done``, ``cinit``, ``scan``, ``load``).
        Sets each in ``s`` under its name."""
        dim, xa, sd, sb, ta = s.dim, s.xa, s.sd, s.sb, s.ta
        loader_done = Signal(init=1)
        cinit, scan, load = (Signal(name=n) for n in ("cinit", "scan", "load"))
        a, b = Signal(dim, name="a"), Signal(dim, name="b")
        ra_rem, ra_quo = Signal(sd, name="ra_rem"), Signal(sd, name="ra_quo")
        rb_rem, rb_quo = Signal(sd, name="rb_rem"), Signal(sd, name="rb_quo")
        # a width, (a + s_h) width
        a_w, a_shw = Signal(ta, name="a_w"), Signal(ta, name="a_shw")
        ra_ow = Signal(xa)                        # ra_quo out_width
        # set by cinit from the class registers
        c_blast, c_alast, c_has = (Signal(name=n) for n in ("c_blast", "c_alast", "c_has"))
        # ra_rem + 1 = s_h, rb_rem + 1 = s_w
        c_rawrap, c_rbwrap = Signal(name="c_rawrap"), Signal(name="c_rbwrap")
        c_rbzero = Signal()
        c_bq0, f_br0 = Signal(name="c_bq0"), Signal(name="f_br0")  # rb_rem < dw_r, ra_rem < dh_r
        # the first tap column's dY column bounds
        c_loj, c_hij = Signal(sb, name="c_loj"), Signal(sb, name="c_hij")
        c_bsw = Signal(dim + 1)                   # b + s_w
        c_col1 = Signal()                         # b + s_w >= width: one pixel a class row
        f_toff = Signal(xa)
        f_loi, f_hii = Signal(sb, name="f_loi"), Signal(sb, name="f_hii")
        f_rrzero = Signal()
        s.loader_done, s.cinit, s.scan, s.load = loader_done, cinit, scan, load
        s.a, s.b, s.ra_rem, s.ra_quo, s.rb_rem, s.rb_quo = a, b, ra_rem, ra_quo, rb_rem, rb_quo
        s.a_w, s.a_shw, s.ra_ow = a_w, a_shw, ra_ow
        s.c_blast, s.c_alast, s.c_has, s.c_rawrap, s.c_rbwrap, s.c_rbzero = (
            c_blast, c_alast, c_has, c_rawrap, c_rbwrap, c_rbzero)
        s.c_bq0, s.f_br0, s.c_loj, s.c_hij, s.c_bsw, s.c_col1 = (
            c_bq0, f_br0, c_loj, c_hij, c_bsw, c_col1)
        s.f_toff, s.f_loi, s.f_hii, s.f_rrzero = f_toff, f_loi, f_hii, f_rrzero

    def _tap_registers(self, m, s):
        """The tap (r, q), walked in raster order: remainders and quotients of a + pad_top -
        r d_h (rr) and b + pad_w - q d_w (rq), and what follows from the quotients: the dY
        offset toff = rr_quo out_width + rq_quo (roff: that of q = 0) and the class pixels
        (i, j) whose dY pixel (i + rr_quo, j + rq_quo) lies in dY: lo_i <= i < hi_i, lo_j <=
        j < hi_j; the next column / row step's borrows (``bq``, ``br``) and remainders
        (``nq_rem``, ``nr_rem``), ``n_roff`` and ``n_toff`` (the offset of the next tap).
        Sets each in ``s`` under its name."""
        dim, xa, wa, sd, sb, lay = s.dim, s.xa, s.wa, s.sd, s.sb, s.lay
        rr_rem, rq_rem = Signal(sd, name="rr_rem"), Signal(sd, name="rq_rem")
        rr_zero, rq_zero = Signal(name="rr_zero"), Signal(name="rq_zero")
        # taps left in the row / rows left
        r_left, q_left = Signal(dim, name="r_left"), Signal(dim, name="q_left")
        r_last, q_last = Signal(name="r_last"), Signal(name="q_last")
        toff, roff = Signal(xa, name="toff"), Signal(xa, name="roff")
        lo_i, hi_i, lo_j, hi_j = (Signal(sb, name=n) for n in ("lo_i", "hi_i", "lo_j", "hi_j"))
        wtap = Signal(wa)                          # w_base + r S + q
        tap_ok = Signal()
        m.d.comb += tap_ok.eq(rr_zero & rq_zero)

        # the next column / row step borrows (rq_rem < dw_r, rr_rem < dh_r), registered: after
        # a step of rem to rem - d (+ s on a borrow) it is rem < 2 d (- s)
        bq, br = Signal(name="bq"), Signal(name="br")
        nq_rem, _ = sub_divmod(rq_rem, 0, lay.dw_r, 0, lay.stride_w, stride_less_d=s.sw_dwr,
                               borrow=bq)
        nr_rem, _ = sub_divmod(rr_rem, 0, lay.dh_r, 0, lay.stride_h, stride_less_d=s.sh_dhr,
                               borrow=br)
        n_roff = Mux(br, roff - s.ow_dhq1, roff - s.ow_dhq)
        n_toff = Signal(xa)                        # the offset of the next tap
        m.d.comb += n_toff.eq(Mux(q_last, n_roff, Mux(bq, toff - s.dwq1, toff - lay.dw_q)))
        s.rr_rem, s.rq_rem, s.rr_zero, s.rq_zero = rr_rem, rq_rem, rr_zero, rq_zero
        s.r_left, s.q_left, s.r_last, s.q_last = r_left, q_left, r_last, q_last
        s.toff, s.roff, s.lo_i, s.hi_i, s.lo_j, s.hi_j = toff, roff, lo_i, hi_i, lo_j, hi_j
        s.wtap, s.tap_ok, s.bq, s.br = wtap, tap_ok, bq, br
        s.nq_rem, s.nr_rem, s.n_roff, s.n_toff = nq_rem, nr_rem, n_roff, n_toff

    def _tap_first(self, s):
        """The class's first tap (0, 0)."""
        return [s.r_left.eq(s.khm1), s.r_last.eq(s.kh1), s.q_left.eq(s.kwm1),
                s.q_last.eq(s.kw1), s.rr_rem.eq(s.ra_rem), s.rq_rem.eq(s.rb_rem),
                s.rr_zero.eq(s.f_rrzero), s.rq_zero.eq(s.c_rbzero), s.bq.eq(s.c_bq0),
                s.br.eq(s.f_br0), s.toff.eq(s.f_toff), s.roff.eq(s.f_toff), s.lo_i.eq(s.f_loi),
                s.hi_i.eq(s.f_hii), s.lo_j.eq(s.c_loj), s.hi_j.eq(s.c_hij),
                s.wtap.eq(s.lay.w_base)]

    def _tap_next(self, m, s):
        """The next tap in raster order (never past the last)."""
        lay, bq, br, rq_rem, rr_rem = s.lay, s.bq, s.br, s.rq_rem, s.rr_rem
        lo_i, hi_i, lo_j, hi_j = s.lo_i, s.hi_i, s.lo_j, s.hi_j
        with m.If(~s.q_last):
            m.d.sync += [s.q_left.eq(s.q_left - 1), s.q_last.eq(s.q_left == 1),
                         rq_rem.eq(s.nq_rem),
                         s.rq_zero.eq(rq_rem == lay.dw_r),
                         bq.eq(Mux(bq, rq_rem < s.bq_lt1, rq_rem < s.bq_lt2)),
                         lo_j.eq(Mux(bq, lo_j + s.dwq1, lo_j + lay.dw_q)),
                         hi_j.eq(Mux(bq, hi_j + s.dwq1, hi_j + lay.dw_q))]
        with m.Else():
            m.d.sync += [s.q_left.eq(s.kwm1), s.q_last.eq(s.kw1), rq_rem.eq(s.rb_rem),
                         s.rq_zero.eq(s.c_rbzero), bq.eq(s.c_bq0), lo_j.eq(s.c_loj),
                         hi_j.eq(s.c_hij),
                         s.r_left.eq(s.r_left - 1), s.r_last.eq(s.r_left == 1),
                         rr_rem.eq(s.nr_rem),
                         s.rr_zero.eq(rr_rem == lay.dh_r), s.roff.eq(s.n_roff),
                         br.eq(Mux(br, rr_rem < s.br_lt1, rr_rem < s.br_lt2)),
                         lo_i.eq(Mux(br, lo_i + s.dhq1, lo_i + lay.dh_q)),
                         hi_i.eq(Mux(br, hi_i + s.dhq1, hi_i + lay.dh_q))]
        m.d.sync += [s.toff.eq(s.n_toff), s.wtap.eq(s.wtap + 1)]

    def _pixel_cursor(self, s):
        """The pixel cursor: class pixel (i, j), dX row ph2 - s_h, column pw2 - s_w;
        col_last: pw2 >= width (registered: the next pixel's is pw2 >= width - s_w); exists:
        ph < height; tag: the P offset ph width + pw; trow2: that of the next class row's
        first pixel; xpix = x_base + i out_width + j, xrow2 that of (i + 1, 0). Sets ``s.p``
        (the pixel being loaded), ``s.t`` (the tile's first pixel), ``s.p_next`` (the next
        pixel of the class, raster order) and ``s.cur_names``."""
        dim, xa, ta, lay = s.dim, s.xa, s.ta, s.lay
        cur_names = ("i", "j", "pw2", "col_last", "ph2", "exists", "tag", "trow2", "xpix",
                     "xrow2")
        cur_shapes = (dim, dim, dim + 1, 1, dim + 1, 1, ta, ta, xa, xa)

        def cursor(prefix):
            return {n: Signal(sh, name=f"{prefix}{n}") for n, sh in zip(cur_names, cur_shapes)}

        p = cursor("pix_")                        # the pixel being loaded
        t = cursor("tile_")                       # the tile's first pixel
        col_last = p["col_last"]                  # p is its class row's last pixel: pw2 >= W
        p_next = {                                # the next pixel of the class, raster order
            "i": Mux(col_last, p["i"] + 1, p["i"]),
            "j": Mux(col_last, 0, p["j"] + 1),
            "pw2": Mux(col_last, s.c_bsw, p["pw2"] + lay.stride_w),
            "col_last": Mux(col_last, s.c_col1, p["pw2"] >= s.w_less_sw),
            "ph2": Mux(col_last, p["ph2"] + lay.stride_h, p["ph2"]),
            "exists": Mux(col_last, p["ph2"] < lay.height, p["exists"]),
            "tag": Mux(col_last, p["trow2"], p["tag"] + lay.stride_w),
            "trow2": Mux(col_last, p["trow2"] + s.shw, p["trow2"]),
            "xpix": Mux(col_last, p["xrow2"], p["xpix"] + 1),
            "xrow2": Mux(col_last, p["xrow2"] + s.ow_x, p["xrow2"]),
        }
        s.cur_names, s.p, s.t, s.p_next = cur_names, p, t, p_next

    def _cursor_first(self, s):
        """The class's first pixel (a, b), into the cursor and the tile start."""
        a, b, lay = s.a, s.b, s.lay
        first = {"i": 0, "j": 0, "pw2": b + lay.stride_w, "col_last": b >= s.w_less_sw,
                 "ph2": a + lay.stride_h,
                 "exists": a < lay.height, "tag": s.a_w + b, "trow2": s.a_shw + b,
                 "xpix": lay.x_base, "xrow2": s.xrow0}
        return [s.p[n].eq(v) for n, v in first.items()] + [s.t[n].eq(v)
                                                           for n, v in first.items()]

    def _loader_registers(self, s):
        """The loader's (stage A: one pixel a cycle into the item register) walk of lane,
        slot, block and tap. Sets each in ``s`` under its name (``s.lane`` ... ``s.wk``)."""
        R, dim, xa, wa = self.config.rows, s.dim, s.xa, s.wa
        S = SLOTS
        lane = Signal(range(R))
        fill = Signal(range(S))                   # slot the loader fills
        first_block = Signal()                    # the context's first block (tap 0, kb 0)
        new_tile = Signal()                       # p is the next tile's first pixel: exists?
        kb_left, tap_left = Signal(dim, name="kb_left"), Signal(2 * dim, name="tap_left")
        kb_last, tap_last = Signal(name="kb_last"), Signal(name="tap_last")
        taps = Signal(2 * dim)                    # valid taps of the class (the scan counts)
        taps_m1, taps_one = Signal(2 * dim, name="taps_m1"), Signal(name="taps_one")
        koff = Signal(xa)                         # kb plane + toff
        wk = Signal(wa)                           # w_base + kb C R S + r S + q
        s.lane, s.fill, s.first_block, s.new_tile = lane, fill, first_block, new_tile
        s.kb_left, s.tap_left, s.kb_last, s.tap_last = kb_left, tap_left, kb_last, tap_last
        s.taps, s.taps_m1, s.taps_one, s.koff, s.wk = taps, taps_m1, taps_one, koff, wk

    def _item_register(self, m, s):
        """The item register (stage B): one read, issued when its slot is free (and, for a
        context's first read, a tag slot). Sets the item's fields ``s.bv``, ``s.b_addr`` ...
        ``s.b_kv``, ``s.b_ctx_start``, ``s.issue`` and ``s.adv`` (the item register takes
        the next item)."""
        R, C, xa, wa, ta = self.config.rows, self.config.cols, s.xa, s.wa, s.ta
        S = SLOTS
        bv = Signal()
        b_addr, b_wk = Signal(xa, name="b_addr"), Signal(wa, name="b_wk")
        b_inb, b_first, b_end, b_exists, b_last = (Signal(name=f"item_{n}") for n in
                                                   ("inb", "first", "end", "exists", "last"))
        b_slot, b_lane = Signal(range(S), name="b_slot"), Signal(range(R), name="b_lane")
        b_tag = Signal(ta)
        b_kv = Signal(range(C + 1))
        tag_room = s.ctx_in_flight < TAG_SLOTS
        b_ctx_start = b_first & (b_lane == 0)
        issue, adv = Signal(name="issue"), Signal(name="adv")
        m.d.comb += [
            issue.eq(bv & ~self._pick(s.slot_full, b_slot) & (tag_room | ~b_ctx_start)),
            adv.eq(~bv | issue),
            self.x_mem.addr.eq(b_addr),
            self.x_mem.en.eq(issue & b_inb),
        ]
        s.bv, s.b_addr, s.b_wk, s.b_inb, s.b_first, s.b_end = (
            bv, b_addr, b_wk, b_inb, b_first, b_end)
        s.b_exists, s.b_last, s.b_slot, s.b_lane, s.b_tag, s.b_kv = (
            b_exists, b_last, b_slot, b_lane, b_tag, b_kv)
        s.b_ctx_start, s.issue, s.adv = b_ctx_start, issue, adv

    def _transposer_write(self, m, s):
        """The read issued last cycle lands in the transposer this cycle (the block's last
        fills its slot); an issue writes the context's tags (its first block) and the slot's
        block data (the block's last read). Sets ``s.wr_en``."""
        R, C = self.config.rows, self.config.cols
        S = SLOTS
        slot_data, slot_full, issue = s.slot_data, s.slot_full, s.issue
        b_first, b_end, b_slot, b_lane = s.b_first, s.b_end, s.b_slot, s.b_lane
        wr_en, wr_inb = Signal(name="wr_en"), Signal(name="wr_inb")
        wr_lane = Signal(range(R), name="wr_lane")
        wr_slot = Signal(range(SLOTS))
        wr_done = Signal()                        # ... and completes the block
        m.d.sync += [wr_en.eq(issue), wr_inb.eq(s.b_inb), wr_lane.eq(b_lane),
                     wr_slot.eq(b_slot), wr_done.eq(issue & b_end)]
        for slot in range(S):
            for i in range(R):
                with m.If(wr_en & (wr_slot == slot) & (wr_lane == i)):
                    for j in range(C):
                        m.d.sync += slot_data[slot][i][j].eq(Mux(wr_inb, self.x_mem.data[j], 0))
        with m.If(wr_done):
            for slot in range(S):
                with m.If(wr_slot == slot):
                    m.d.sync += slot_full[slot].eq(1)

        m.d.comb += s.tags.addr.eq(Cat(b_lane, s.ctx_slot))
        with m.If(issue):
            with m.If(b_first):
                m.d.comb += [s.tags.en.eq(1), s.tags.data.ok.eq(s.b_exists),
                             s.tags.data.addr.eq(s.b_tag)]
            with m.If(b_end):
                for slot in range(S):
                    with m.If(b_slot == slot):
                        m.d.sync += [s.slot_w[slot].eq(s.b_wk), s.slot_kv[slot].eq(s.b_kv),
                                     s.slot_last[slot].eq(s.b_last)]
                with m.If(b_first):
                    m.d.sync += s.ctx_slot.eq(s.ctx_slot + 1)
        s.wr_en = wr_en

    def _item_load(self, m, s):
        """The item of the pixel p under the tap, into the item register when it advances:
        its dY word and whether it is inside dY."""
        R, C, lay, p = self.config.rows, self.config.cols, s.lay, s.p
        produce = Signal()
        m.d.comb += produce.eq(s.load & s.tap_ok & ~(s.new_tile & ~p["exists"]))
        with m.If(s.adv):
            m.d.sync += [
                s.bv.eq(produce),
                s.b_addr.eq(p["xpix"] + s.koff),
                s.b_inb.eq(p["exists"] & (p["i"] >= s.lo_i) & (p["i"] < s.hi_i)
                           & (p["j"] >= s.lo_j) & (p["j"] < s.hi_j)),
                s.b_first.eq(s.first_block), s.b_end.eq(s.lane == R - 1),
                s.b_exists.eq(p["exists"]),
                s.b_last.eq(s.kb_last & s.tap_last), s.b_slot.eq(s.fill), s.b_lane.eq(s.lane),
                s.b_tag.eq(p["tag"]), s.b_wk.eq(s.wk),
                s.b_kv.eq(Mux(s.kb_last, lay.kvalid, C)),
            ]

    def _class_next(self, m, s):
        """The next class (b fastest), or the run's end."""
        lay, a, b, ra_rem, ra_quo, rb_rem, rb_quo = (s.lay, s.a, s.b, s.ra_rem, s.ra_quo,
                                                     s.rb_rem, s.rb_quo)
        with m.If(~s.c_blast):
            n_rem, n_quo = inc_divmod(rb_rem, rb_quo, lay.stride_w, wraps=s.c_rbwrap)
            m.d.sync += [b.eq(b + 1), rb_rem.eq(n_rem), rb_quo.eq(n_quo), s.cinit.eq(1)]
        with m.Elif(~s.c_alast):
            n_rem, n_quo = inc_divmod(ra_rem, ra_quo, lay.stride_h, wraps=s.c_rawrap)
            m.d.sync += [a.eq(a + 1), b.eq(0), ra_rem.eq(n_rem), ra_quo.eq(n_quo),
                         rb_rem.eq(lay.pw_r), rb_quo.eq(lay.pw_q),
                         s.a_w.eq(s.a_w + lay.width), s.a_shw.eq(s.a_shw + lay.width),
                         s.ra_ow.eq(Mux(s.c_rawrap, s.ra_ow + s.ow_x, s.ra_ow)), s.cinit.eq(1)]
        with m.Else():
            m.d.sync += s.loader_done.eq(1)

    def _block_start(self, s, first_tap):
        """kb 0 of the tap (the first tap's after a scan or a context)."""
        stmts = [s.kb_left.eq(s.kbm1), s.kb_last.eq(s.kb1)]
        if first_tap:
            return stmts + [s.koff.eq(s.f_toff), s.wk.eq(s.lay.w_base)]
        return stmts + [s.koff.eq(s.n_toff), s.wk.eq(s.wtap + 1)]

    def _loader(self, m, s):
        """The loader's phases: a run's start, its two set-up cycles, then per class its
        set-up cycle (``cinit``), the tap scan and the load."""
        with m.If(self.start & ~self.busy):
            m.d.sync += [s.lay.eq(self.layer), s.setup.eq(1), s.loader_done.eq(0)]
        # the phases below are idle when a run starts (``busy`` covers each): a chain of their
        # own, so the start is not in the enable of every register they write
        with m.If(s.setup):
            self._setup_first(m, s)
        with m.Elif(s.setup2):                    # class (0, 0)
            lay = s.lay
            m.d.sync += [
                s.setup2.eq(0), s.crs_w.eq(s.rs_w * self.config.cols),
                s.ow_dhq1.eq(s.ow_dhq + s.ow_x),
                s.a.eq(0), s.b.eq(0), s.ra_rem.eq(lay.pt_r), s.ra_quo.eq(lay.pt_q),
                s.rb_rem.eq(lay.pw_r), s.rb_quo.eq(lay.pw_q), s.a_w.eq(0), s.a_shw.eq(s.shw),
                s.ra_ow.eq(s.pt_ow), s.cinit.eq(1),
            ]
        with m.Elif(s.cinit):                     # the class's constants, its first tap and pixel
            self._class_init(m, s)
        with m.Elif(s.scan):                      # count the class's valid taps, one a cycle
            self._scan(m, s)
        with m.Elif(s.load & s.adv):
            self._load(m, s)

    def _setup_first(self, m, s):
        """The run's first set-up cycle: a run with a zero size ends; the run constants."""
        lay, xa, wa = s.lay, s.xa, s.wa
        zero = ((lay.height == 0) | (lay.width == 0) | (lay.out_height == 0)
                | (lay.out_width == 0) | (lay.kernel_h == 0) | (lay.kernel_w == 0)
                | (lay.kblocks == 0) | (lay.stride_h == 0) | (lay.stride_w == 0))
        m.d.sync += [
            s.setup.eq(0), s.setup2.eq(~zero), s.loader_done.eq(zero),
            s.rs_w.eq(lay.kernel_h[:wa] * lay.kernel_w[:wa]),
            s.ow_x.eq(lay.out_width), s.plane_x.eq(lay.plane),
            s.ow_dhq.eq(lay.dh_q[:xa] * lay.out_width[:xa]),
            s.pt_ow.eq(lay.pt_q[:xa] * lay.out_width[:xa]),
            s.xrow0.eq(lay.x_base + lay.out_width),
            s.shw.eq(lay.stride_h * lay.width), s.w_less_sw.eq(lay.width - lay.stride_w),
            s.swm1.eq(lay.stride_w - 1), s.shm1.eq(lay.stride_h - 1),
            s.kwm1.eq(lay.kernel_w - 1), s.khm1.eq(lay.kernel_h - 1),
            s.kbm1.eq(lay.kblocks - 1),
            s.kw1.eq(lay.kernel_w == 1), s.kh1.eq(lay.kernel_h == 1),
            s.kb1.eq(lay.kblocks == 1),
            s.sw_dwr.eq(lay.stride_w - lay.dw_r), s.sh_dhr.eq(lay.stride_h - lay.dh_r),
            s.dwq1.eq(lay.dw_q + 1), s.dhq1.eq(lay.dh_q + 1),
            s.bq_lt1.eq(2 * lay.dw_r - lay.stride_w), s.bq_lt2.eq(2 * lay.dw_r),
            s.br_lt1.eq(2 * lay.dh_r - lay.stride_h), s.br_lt2.eq(2 * lay.dh_r),
            s.fill.eq(0),
        ]

    def _class_init(self, m, s):
        """The class's set-up cycle: its constants, its first tap and pixel."""
        lay, a, b, ra_rem, ra_quo, rb_rem, rb_quo = (s.lay, s.a, s.b, s.ra_rem, s.ra_quo,
                                                     s.rb_rem, s.rb_quo)
        m.d.sync += [
            s.cinit.eq(0), s.scan.eq(1), s.taps.eq(0),
            s.c_blast.eq(b == s.swm1), s.c_alast.eq(a == s.shm1),
            s.c_rawrap.eq(ra_rem == s.shm1),
            s.c_rbwrap.eq(rb_rem == s.swm1),
            s.c_has.eq((a < lay.height) & (b < lay.width)),
            s.c_rbzero.eq(rb_rem == 0), s.f_rrzero.eq(ra_rem == 0),
            s.c_bq0.eq(rb_rem < lay.dw_r), s.f_br0.eq(ra_rem < lay.dh_r),
            s.bq.eq(rb_rem < lay.dw_r), s.br.eq(ra_rem < lay.dh_r),
            s.c_loj.eq(-rb_quo), s.c_hij.eq(lay.out_width - rb_quo),
            s.f_loi.eq(-ra_quo), s.f_hii.eq(lay.out_height - ra_quo),
            s.f_toff.eq(s.ra_ow + rb_quo), s.c_bsw.eq(b + lay.stride_w),
            s.c_col1.eq(b >= s.w_less_sw),
            # the first tap, from the class registers directly
            s.r_left.eq(s.khm1), s.r_last.eq(s.kh1), s.q_left.eq(s.kwm1), s.q_last.eq(s.kw1),
            s.rr_rem.eq(ra_rem), s.rq_rem.eq(rb_rem),
            s.rr_zero.eq(ra_rem == 0), s.rq_zero.eq(rb_rem == 0),
            s.toff.eq(s.ra_ow + rb_quo), s.roff.eq(s.ra_ow + rb_quo),
            s.lo_i.eq(-ra_quo), s.hi_i.eq(lay.out_height - ra_quo),
            s.lo_j.eq(-rb_quo), s.hi_j.eq(lay.out_width - rb_quo), s.wtap.eq(lay.w_base),
        ] + self._cursor_first(s)

    def _scan(self, m, s):
        """The tap scan: count the class's valid taps, one a cycle; at its end the first tap
        again, and the load (or the next class, for a class with no context)."""
        taps, tap_ok = s.taps, s.tap_ok
        m.d.sync += taps.eq(taps + tap_ok)
        with m.If(~(s.q_last & s.r_last)):
            self._tap_next(m, s)
        with m.Else():
            m.d.sync += self._tap_first(s)
            m.d.sync += [s.scan.eq(0), s.lane.eq(0), s.first_block.eq(1), s.new_tile.eq(0),
                         s.taps_m1.eq(Mux(tap_ok, taps, taps - 1)),
                         s.tap_left.eq(Mux(tap_ok, taps, taps - 1)),
                         s.taps_one.eq(Mux(tap_ok, taps == 0, taps == 1)),
                         s.tap_last.eq(Mux(tap_ok, taps == 0, taps == 1))]
            m.d.sync += self._block_start(s, True)
            # a class with no tap or no pixel has no context
            with m.If(~s.c_has | ((taps == 0) & ~tap_ok)):
                self._class_next(m, s)
            with m.Else():
                m.d.sync += s.load.eq(1)

    def _load(self, m, s):
        """The load, when the item register advances: the class's end, a tap the class does
        not have, or one pixel read (then the next pixel, block, tap or tile)."""
        R, p, t, p_next, cur_names = self.config.rows, s.p, s.t, s.p_next, s.cur_names
        lane, kb_left, tap_left = s.lane, s.kb_left, s.tap_left
        with m.If(s.new_tile & ~p["exists"]):   # the class's pixels are done
            m.d.sync += s.load.eq(0)
            self._class_next(m, s)
        with m.Elif(~s.tap_ok):                 # skip a tap the class does not have
            m.d.sync += s.new_tile.eq(0)
            self._tap_next(m, s)
            m.d.sync += self._block_start(s, False)
        with m.Else():                          # one pixel read
            m.d.sync += s.new_tile.eq(0)
            with m.If(lane != R - 1):
                m.d.sync += lane.eq(lane + 1)
                m.d.sync += [p[n].eq(v) for n, v in p_next.items()]
            with m.Else():                      # the block is read: next slot
                m.d.sync += [lane.eq(0), s.fill.eq(self._succ(s.fill)), s.first_block.eq(0)]
                with m.If(~s.kb_last):          # same pixels, next block of k
                    m.d.sync += [kb_left.eq(kb_left - 1), s.kb_last.eq(kb_left == 1),
                                 s.koff.eq(s.koff + s.plane_x), s.wk.eq(s.wk + s.crs_w)]
                    m.d.sync += [p[n].eq(t[n]) for n in cur_names]
                with m.Elif(~s.tap_last):       # next tap, same pixels
                    m.d.sync += [tap_left.eq(tap_left - 1), s.tap_last.eq(tap_left == 1)]
                    self._tap_next(m, s)
                    m.d.sync += self._block_start(s, False)
                    m.d.sync += [p[n].eq(t[n]) for n in cur_names]
                with m.Else():                  # the context is loaded: next tile
                    m.d.sync += [tap_left.eq(s.taps_m1), s.tap_last.eq(s.taps_one),
                                 s.first_block.eq(1), s.new_tile.eq(1)]
                    m.d.sync += self._tap_first(s)
                    m.d.sync += self._block_start(s, True)
                    m.d.sync += [p[n].eq(v) for n, v in p_next.items()]
                    m.d.sync += [t[n].eq(v) for n, v in p_next.items()]

    def _context_count(self, m, s):
        """Contexts whose tags are held: +1 when a context's first read issues, -1 when one
        has drained."""
        ctx_in_flight = s.ctx_in_flight
        m.d.sync += ctx_in_flight.eq(ctx_in_flight + (s.issue & s.b_ctx_start) - self.ctx_done)
        with m.If(self.start & ~self.busy):
            m.d.sync += [ctx_in_flight.eq(0), s.ctx_slot.eq(0)]

    def _emitter(self, m, s):
        """The emitter: the slot's columns with their W words. Sets ``s.valid``."""
        R, C, op, wa = self.config.rows, self.config.cols, s.op, s.wa
        S, pick, slot_full = SLOTS, self._pick, s.slot_full
        emit = Signal(range(S))                  # slot the emitter drains
        t_col = Signal(range(C + 1))
        valid, last = Signal(name="valid"), Signal(name="last")
        out_a = Signal(data.ArrayLayout(op, R))
        full = pick(slot_full, emit)
        kv = pick(s.slot_kv, emit)
        fetch = Signal()
        # W word of column t_col; that of t_col + 1
        w_addr, w_next = Signal(wa, name="w_addr"), Signal(wa, name="w_next")
        m.d.comb += [
            fetch.eq(full & (~valid | self.feed.ready)),
            w_addr.eq(Mux(t_col == 0, pick(s.slot_w, emit), w_next)),
            self.w_mem.addr.eq(w_addr),
            self.w_mem.en.eq(fetch),
            self.feed.valid.eq(valid), self.feed.p.a.eq(out_a), self.feed.p.b.eq(self.w_mem.data),
            self.feed.p.last.eq(last),
        ]
        with m.If(fetch):
            end = t_col + 1 == kv
            for i in range(R):
                col = 0
                for j in range(C):
                    col = Mux(t_col == j, pick([s.slot_data[k][i][j] for k in range(S)], emit),
                              col)
                m.d.sync += out_a[i].eq(col)
            m.d.sync += [valid.eq(1),
                         last.eq(end & pick(s.slot_last, emit)),
                         t_col.eq(Mux(end, 0, t_col + 1)),
                         w_next.eq(w_addr + s.rs_w)]
            with m.If(end):
                for slot in range(S):
                    with m.If(emit == slot):
                        m.d.sync += slot_full[slot].eq(0)
                m.d.sync += emit.eq(self._succ(emit))
        with m.Elif(self.feed.ready):
            m.d.sync += valid.eq(0)
        with m.If(self.start & ~self.busy):
            m.d.sync += [emit.eq(0), t_col.eq(0), valid.eq(0)]
            m.d.sync += [f.eq(0) for f in slot_full]
        s.valid = valid


# --- the index map's arithmetic (proved against floor division in the walker's tests) -------

def sub_divmod(rem, quo, d_rem, d_quo, stride, *, stride_less_d=None, borrow=None):
    """``(rem', quo')`` with ``quo' stride + rem' = quo stride + rem - (d_quo stride + d_rem)``
    and ``0 <= rem' < stride``, given ``0 <= rem, d_rem < stride``: floor division of ``v - d``
    from those of ``v`` and ``d``, without a divider. The two candidates of ``rem'`` are formed
    side by side and chosen by the borrow ``rem < d_rem`` (no addition after a subtraction);
    ``stride_less_d`` may give ``stride - d_rem`` from a register (the walker's run constant),
    ``borrow`` the borrow from a register (the walker's, kept with ``rem``).
    ``rem' = 0`` exactly when ``rem = d_rem``."""
    if borrow is None:
        borrow = rem < d_rem
    if stride_less_d is None:
        stride_less_d = stride - d_rem
    return (Mux(borrow, rem + stride_less_d, rem - d_rem),
            quo - d_quo - Mux(borrow, 1, 0))


def inc_divmod(rem, quo, stride, *, wraps=None):
    """``(rem', quo')``: floor division of ``v + 1`` by ``stride`` from that of ``v``, given
    ``0 <= rem < stride``; ``wraps`` may give ``rem + 1 = stride`` from a register (the
    walker's, set when the class began)."""
    if wraps is None:
        wraps = rem + 1 == stride
    return Mux(wraps, 0, rem + 1), quo + Mux(wraps, 1, 0)


def dy_position(i, j, rr_rem, rr_quo, rq_rem, rq_quo):
    """Class pixel ``(i, j)`` (dX ``(a + s_h i, b + s_w j)``) under tap ``(r, q)``, given
    ``(rr_quo, rr_rem)`` = floor division of ``a + pad_top - r d_h`` by ``s_h`` and
    ``(rq_quo, rq_rem)`` that of ``b + pad_w - q d_w`` by ``s_w``: ``(tap_ok, oh, ow)``, where
    ``tap_ok`` says the tap meets a dY pixel (no stride zero) and ``(oh, ow)`` is that pixel
    (maybe outside dY: padding)."""
    return (rr_rem == 0) & (rq_rem == 0), i + rr_quo, j + rq_quo
