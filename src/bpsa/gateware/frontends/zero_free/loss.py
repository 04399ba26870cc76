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

from amaranth.hdl import Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import ReadPort
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
        R, C = cfg.rows, cfg.cols
        op = arith_for(cfg).operand_shape
        dim = cfg.dim_width + 2
        xa, wa = ceil_log2(cfg.buf_a_depth), ceil_log2(cfg.buf_b_depth)
        lay = Signal(zf_loss_layout(cfg))
        sd = signed(dim + 2)                     # remainders and quotients
        sb = signed(dim + 4)                     # dY row / column bounds of a tap
        ta = 2 * dim                             # tag (P offset) bits

        # --- the transposer: SLOTS slots of rows x cols operands, with their block data -----
        S = SLOTS
        slot_data = [[Signal(data.ArrayLayout(op, C), name=f"slot{s}_row{i}")
                      for i in range(R)] for s in range(S)]
        slot_full = [Signal(name=f"slot{s}_full") for s in range(S)]
        slot_w = [Signal(wa, name=f"slot{s}_w") for s in range(S)]        # W word of t = 0
        slot_kv = [Signal(range(C + 1), name=f"slot{s}_kv") for s in range(S)]
        slot_last = [Signal(name=f"slot{s}_last") for s in range(S)]

        def pick(signals, index):
            out = signals[0]
            for k in range(1, S):
                out = Mux(index == k, signals[k], out)
            return out

        def succ(index):
            return Mux(index == S - 1, 0, index + 1)

        # --- tags ------------------------------------------------------------------------------
        tags = [[Signal(tag_layout(cfg), name=f"tag{c}_{i}") for i in range(R)]
                for c in range(TAG_SLOTS)]
        for c in range(TAG_SLOTS):
            for i in range(R):
                with m.If((self.tag_ctx == c) & (self.tag_row == i)):
                    m.d.comb += self.tag.eq(tags[c][i])
        ctx_in_flight = Signal(range(TAG_SLOTS + 1))
        ctx_slot = Signal(range(TAG_SLOTS))       # tag slot of the context being issued

        # --- run constants (the set-up's two cycles; products here only) ---------------------
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

        # --- class (a, b): (rem, quo) of a + pad_top by s_h and of b + pad_w by s_w ---------
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

        # --- the tap (r, q), walked in raster order ------------------------------------------
        # remainders and quotients of a + pad_top - r d_h (rr) and b + pad_w - q d_w (rq), and
        # what follows from the quotients: the dY offset toff = rr_quo out_width + rq_quo
        # (roff: that of q = 0) and the class pixels (i, j) whose dY pixel (i + rr_quo,
        # j + rq_quo) lies in dY: lo_i <= i < hi_i, lo_j <= j < hi_j
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
        nq_rem, _ = sub_divmod(rq_rem, 0, lay.dw_r, 0, lay.stride_w, stride_less_d=sw_dwr,
                               borrow=bq)
        nr_rem, _ = sub_divmod(rr_rem, 0, lay.dh_r, 0, lay.stride_h, stride_less_d=sh_dhr,
                               borrow=br)
        n_roff = Mux(br, roff - ow_dhq1, roff - ow_dhq)
        n_toff = Signal(xa)                        # the offset of the next tap
        m.d.comb += n_toff.eq(Mux(q_last, n_roff, Mux(bq, toff - dwq1, toff - lay.dw_q)))

        def tap_first():
            """The class's first tap (0, 0)."""
            return [r_left.eq(khm1), r_last.eq(kh1), q_left.eq(kwm1), q_last.eq(kw1),
                    rr_rem.eq(ra_rem), rq_rem.eq(rb_rem),
                    rr_zero.eq(f_rrzero), rq_zero.eq(c_rbzero), bq.eq(c_bq0), br.eq(f_br0),
                    toff.eq(f_toff), roff.eq(f_toff), lo_i.eq(f_loi), hi_i.eq(f_hii),
                    lo_j.eq(c_loj), hi_j.eq(c_hij), wtap.eq(lay.w_base)]

        def tap_next():
            """The next tap in raster order (never past the last)."""
            with m.If(~q_last):
                m.d.sync += [q_left.eq(q_left - 1), q_last.eq(q_left == 1),
                             rq_rem.eq(nq_rem),
                             rq_zero.eq(rq_rem == lay.dw_r),
                             bq.eq(Mux(bq, rq_rem < bq_lt1, rq_rem < bq_lt2)),
                             lo_j.eq(Mux(bq, lo_j + dwq1, lo_j + lay.dw_q)),
                             hi_j.eq(Mux(bq, hi_j + dwq1, hi_j + lay.dw_q))]
            with m.Else():
                m.d.sync += [q_left.eq(kwm1), q_last.eq(kw1), rq_rem.eq(rb_rem),
                             rq_zero.eq(c_rbzero), bq.eq(c_bq0), lo_j.eq(c_loj),
                             hi_j.eq(c_hij),
                             r_left.eq(r_left - 1), r_last.eq(r_left == 1),
                             rr_rem.eq(nr_rem),
                             rr_zero.eq(rr_rem == lay.dh_r), roff.eq(n_roff),
                             br.eq(Mux(br, rr_rem < br_lt1, rr_rem < br_lt2)),
                             lo_i.eq(Mux(br, lo_i + dhq1, lo_i + lay.dh_q)),
                             hi_i.eq(Mux(br, hi_i + dhq1, hi_i + lay.dh_q))]
            m.d.sync += [toff.eq(n_toff), wtap.eq(wtap + 1)]

        # --- the pixel cursor: class pixel (i, j), dX row ph2 - s_h, column pw2 - s_w ----------
        # col_last: pw2 >= width (registered: the next pixel's is pw2 >= width - s_w);
        # exists: ph < height; tag: the P offset ph width + pw; trow2: that of the next class
        # row's first pixel; xpix = x_base + i out_width + j, xrow2 that of (i + 1, 0)
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
            "pw2": Mux(col_last, c_bsw, p["pw2"] + lay.stride_w),
            "col_last": Mux(col_last, c_col1, p["pw2"] >= w_less_sw),
            "ph2": Mux(col_last, p["ph2"] + lay.stride_h, p["ph2"]),
            "exists": Mux(col_last, p["ph2"] < lay.height, p["exists"]),
            "tag": Mux(col_last, p["trow2"], p["tag"] + lay.stride_w),
            "trow2": Mux(col_last, p["trow2"] + shw, p["trow2"]),
            "xpix": Mux(col_last, p["xrow2"], p["xpix"] + 1),
            "xrow2": Mux(col_last, p["xrow2"] + ow_x, p["xrow2"]),
        }

        def cursor_first():
            """The class's first pixel (a, b), into the cursor and the tile start."""
            first = {"i": 0, "j": 0, "pw2": b + lay.stride_w, "col_last": b >= w_less_sw,
                     "ph2": a + lay.stride_h,
                     "exists": a < lay.height, "tag": a_w + b, "trow2": a_shw + b,
                     "xpix": lay.x_base, "xrow2": xrow0}
            return [p[n].eq(v) for n, v in first.items()] + [t[n].eq(v)
                                                             for n, v in first.items()]

        # --- loader (stage A): one pixel a cycle into the item register ----------------------
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

        # --- item register (stage B): one read, issued when its slot is free ----------------
        bv = Signal()
        b_addr, b_wk = Signal(xa, name="b_addr"), Signal(wa, name="b_wk")
        b_inb, b_first, b_end, b_exists, b_last = (Signal(name=f"item_{n}") for n in
                                                   ("inb", "first", "end", "exists", "last"))
        b_slot, b_lane = Signal(range(S), name="b_slot"), Signal(range(R), name="b_lane")
        b_tag = Signal(ta)
        b_kv = Signal(range(C + 1))
        tag_room = ctx_in_flight < TAG_SLOTS
        b_ctx_start = b_first & (b_lane == 0)
        issue, adv = Signal(name="issue"), Signal(name="adv")
        m.d.comb += [
            issue.eq(bv & ~pick(slot_full, b_slot) & (tag_room | ~b_ctx_start)),
            adv.eq(~bv | issue),
            self.x_mem.addr.eq(b_addr),
            self.x_mem.en.eq(issue & b_inb),
        ]

        # the read issued last cycle lands in the transposer this cycle
        wr_en, wr_inb = Signal(name="wr_en"), Signal(name="wr_inb")
        wr_lane = Signal(range(R), name="wr_lane")
        wr_slot = Signal(range(SLOTS))
        wr_done = Signal()                        # ... and completes the block
        m.d.sync += [wr_en.eq(issue), wr_inb.eq(b_inb), wr_lane.eq(b_lane),
                     wr_slot.eq(b_slot), wr_done.eq(issue & b_end)]
        for s in range(S):
            for i in range(R):
                with m.If(wr_en & (wr_slot == s) & (wr_lane == i)):
                    for j in range(C):
                        m.d.sync += slot_data[s][i][j].eq(Mux(wr_inb, self.x_mem.data[j], 0))
        with m.If(wr_done):
            for s in range(S):
                with m.If(wr_slot == s):
                    m.d.sync += slot_full[s].eq(1)

        with m.If(issue):
            with m.If(b_first):
                for c in range(TAG_SLOTS):
                    for i in range(R):
                        with m.If((ctx_slot == c) & (b_lane == i)):
                            m.d.sync += [tags[c][i].ok.eq(b_exists), tags[c][i].addr.eq(b_tag)]
            with m.If(b_end):
                for s in range(S):
                    with m.If(b_slot == s):
                        m.d.sync += [slot_w[s].eq(b_wk), slot_kv[s].eq(b_kv),
                                     slot_last[s].eq(b_last)]
                with m.If(b_first):
                    m.d.sync += ctx_slot.eq(ctx_slot + 1)

        # the item of the pixel p under the tap: its dY word and whether it is inside dY
        produce = Signal()
        m.d.comb += produce.eq(load & tap_ok & ~(new_tile & ~p["exists"]))
        with m.If(adv):
            m.d.sync += [
                bv.eq(produce),
                b_addr.eq(p["xpix"] + koff),
                b_inb.eq(p["exists"] & (p["i"] >= lo_i) & (p["i"] < hi_i)
                         & (p["j"] >= lo_j) & (p["j"] < hi_j)),
                b_first.eq(first_block), b_end.eq(lane == R - 1), b_exists.eq(p["exists"]),
                b_last.eq(kb_last & tap_last), b_slot.eq(fill), b_lane.eq(lane),
                b_tag.eq(p["tag"]), b_wk.eq(wk), b_kv.eq(Mux(kb_last, lay.kvalid, C)),
            ]

        def class_next():
            """The next class (b fastest), or the run's end."""
            with m.If(~c_blast):
                n_rem, n_quo = inc_divmod(rb_rem, rb_quo, lay.stride_w, wraps=c_rbwrap)
                m.d.sync += [b.eq(b + 1), rb_rem.eq(n_rem), rb_quo.eq(n_quo), cinit.eq(1)]
            with m.Elif(~c_alast):
                n_rem, n_quo = inc_divmod(ra_rem, ra_quo, lay.stride_h, wraps=c_rawrap)
                m.d.sync += [a.eq(a + 1), b.eq(0), ra_rem.eq(n_rem), ra_quo.eq(n_quo),
                             rb_rem.eq(lay.pw_r), rb_quo.eq(lay.pw_q),
                             a_w.eq(a_w + lay.width), a_shw.eq(a_shw + lay.width),
                             ra_ow.eq(Mux(c_rawrap, ra_ow + ow_x, ra_ow)), cinit.eq(1)]
            with m.Else():
                m.d.sync += loader_done.eq(1)

        def block_start(first_tap):
            """kb 0 of the tap (the first tap's after a scan or a context)."""
            stmts = [kb_left.eq(kbm1), kb_last.eq(kb1)]
            if first_tap:
                return stmts + [koff.eq(f_toff), wk.eq(lay.w_base)]
            return stmts + [koff.eq(n_toff), wk.eq(wtap + 1)]

        with m.If(self.start & ~self.busy):
            m.d.sync += [lay.eq(self.layer), setup.eq(1), loader_done.eq(0)]
        with m.Elif(setup):
            zero = ((lay.height == 0) | (lay.width == 0) | (lay.out_height == 0)
                    | (lay.out_width == 0) | (lay.kernel_h == 0) | (lay.kernel_w == 0)
                    | (lay.kblocks == 0) | (lay.stride_h == 0) | (lay.stride_w == 0))
            m.d.sync += [
                setup.eq(0), setup2.eq(~zero), loader_done.eq(zero),
                rs_w.eq(lay.kernel_h[:wa] * lay.kernel_w[:wa]),
                ow_x.eq(lay.out_width), plane_x.eq(lay.plane),
                ow_dhq.eq(lay.dh_q[:xa] * lay.out_width[:xa]),
                pt_ow.eq(lay.pt_q[:xa] * lay.out_width[:xa]),
                xrow0.eq(lay.x_base + lay.out_width),
                shw.eq(lay.stride_h * lay.width), w_less_sw.eq(lay.width - lay.stride_w),
                swm1.eq(lay.stride_w - 1), shm1.eq(lay.stride_h - 1),
                kwm1.eq(lay.kernel_w - 1), khm1.eq(lay.kernel_h - 1),
                kbm1.eq(lay.kblocks - 1),
                kw1.eq(lay.kernel_w == 1), kh1.eq(lay.kernel_h == 1),
                kb1.eq(lay.kblocks == 1),
                sw_dwr.eq(lay.stride_w - lay.dw_r), sh_dhr.eq(lay.stride_h - lay.dh_r),
                dwq1.eq(lay.dw_q + 1), dhq1.eq(lay.dh_q + 1),
                bq_lt1.eq(2 * lay.dw_r - lay.stride_w), bq_lt2.eq(2 * lay.dw_r),
                br_lt1.eq(2 * lay.dh_r - lay.stride_h), br_lt2.eq(2 * lay.dh_r),
                fill.eq(0),
            ]
        with m.Elif(setup2):                      # class (0, 0)
            m.d.sync += [
                setup2.eq(0), crs_w.eq(rs_w * C), ow_dhq1.eq(ow_dhq + ow_x),
                a.eq(0), b.eq(0), ra_rem.eq(lay.pt_r), ra_quo.eq(lay.pt_q),
                rb_rem.eq(lay.pw_r), rb_quo.eq(lay.pw_q), a_w.eq(0), a_shw.eq(shw),
                ra_ow.eq(pt_ow), cinit.eq(1),
            ]
        with m.Elif(cinit):                       # the class's constants, its first tap and pixel
            m.d.sync += [
                cinit.eq(0), scan.eq(1), taps.eq(0),
                c_blast.eq(b == swm1), c_alast.eq(a == shm1), c_rawrap.eq(ra_rem == shm1),
                c_rbwrap.eq(rb_rem == swm1),
                c_has.eq((a < lay.height) & (b < lay.width)),
                c_rbzero.eq(rb_rem == 0), f_rrzero.eq(ra_rem == 0),
                c_bq0.eq(rb_rem < lay.dw_r), f_br0.eq(ra_rem < lay.dh_r),
                bq.eq(rb_rem < lay.dw_r), br.eq(ra_rem < lay.dh_r),
                c_loj.eq(-rb_quo), c_hij.eq(lay.out_width - rb_quo),
                f_loi.eq(-ra_quo), f_hii.eq(lay.out_height - ra_quo),
                f_toff.eq(ra_ow + rb_quo), c_bsw.eq(b + lay.stride_w),
                c_col1.eq(b >= w_less_sw),
                # the first tap, from the class registers directly
                r_left.eq(khm1), r_last.eq(kh1), q_left.eq(kwm1), q_last.eq(kw1),
                rr_rem.eq(ra_rem), rq_rem.eq(rb_rem),
                rr_zero.eq(ra_rem == 0), rq_zero.eq(rb_rem == 0),
                toff.eq(ra_ow + rb_quo), roff.eq(ra_ow + rb_quo),
                lo_i.eq(-ra_quo), hi_i.eq(lay.out_height - ra_quo),
                lo_j.eq(-rb_quo), hi_j.eq(lay.out_width - rb_quo), wtap.eq(lay.w_base),
            ] + cursor_first()
        with m.Elif(scan):                        # count the class's valid taps, one a cycle
            m.d.sync += taps.eq(taps + tap_ok)
            with m.If(~(q_last & r_last)):
                tap_next()
            with m.Else():
                m.d.sync += tap_first()
                m.d.sync += [scan.eq(0), lane.eq(0), first_block.eq(1), new_tile.eq(0),
                             taps_m1.eq(Mux(tap_ok, taps, taps - 1)),
                             tap_left.eq(Mux(tap_ok, taps, taps - 1)),
                             taps_one.eq(Mux(tap_ok, taps == 0, taps == 1)),
                             tap_last.eq(Mux(tap_ok, taps == 0, taps == 1))]
                m.d.sync += block_start(True)
                # a class with no tap or no pixel has no context
                with m.If(~c_has | ((taps == 0) & ~tap_ok)):
                    class_next()
                with m.Else():
                    m.d.sync += load.eq(1)
        with m.Elif(load & adv):
            with m.If(new_tile & ~p["exists"]):   # the class's pixels are done
                m.d.sync += load.eq(0)
                class_next()
            with m.Elif(~tap_ok):                 # skip a tap the class does not have
                m.d.sync += new_tile.eq(0)
                tap_next()
                m.d.sync += block_start(False)
            with m.Else():                        # one pixel read
                m.d.sync += new_tile.eq(0)
                with m.If(lane != R - 1):
                    m.d.sync += lane.eq(lane + 1)
                    m.d.sync += [p[n].eq(v) for n, v in p_next.items()]
                with m.Else():                    # the block is read: next slot
                    m.d.sync += [lane.eq(0), fill.eq(succ(fill)), first_block.eq(0)]
                    with m.If(~kb_last):          # same pixels, next block of k
                        m.d.sync += [kb_left.eq(kb_left - 1), kb_last.eq(kb_left == 1),
                                     koff.eq(koff + plane_x), wk.eq(wk + crs_w)]
                        m.d.sync += [p[n].eq(t[n]) for n in cur_names]
                    with m.Elif(~tap_last):       # next tap, same pixels
                        m.d.sync += [tap_left.eq(tap_left - 1), tap_last.eq(tap_left == 1)]
                        tap_next()
                        m.d.sync += block_start(False)
                        m.d.sync += [p[n].eq(t[n]) for n in cur_names]
                    with m.Else():                # the context is loaded: next tile
                        m.d.sync += [tap_left.eq(taps_m1), tap_last.eq(taps_one),
                                     first_block.eq(1), new_tile.eq(1)]
                        m.d.sync += tap_first()
                        m.d.sync += block_start(True)
                        m.d.sync += [p[n].eq(v) for n, v in p_next.items()]
                        m.d.sync += [t[n].eq(v) for n, v in p_next.items()]

        # contexts whose tags are held: +1 when a context's first read issues, -1 when one
        # has drained
        m.d.sync += ctx_in_flight.eq(ctx_in_flight + (issue & b_ctx_start) - self.ctx_done)
        with m.If(self.start & ~self.busy):
            m.d.sync += [ctx_in_flight.eq(0), ctx_slot.eq(0)]

        # --- emitter: the slot's columns with their W words ----------------------------------
        emit = Signal(range(S))                  # slot the emitter drains
        t_col = Signal(range(C + 1))
        valid, last = Signal(name="valid"), Signal(name="last")
        out_a = Signal(data.ArrayLayout(op, R))
        full = pick(slot_full, emit)
        kv = pick(slot_kv, emit)
        fetch = Signal()
        # W word of column t_col; that of t_col + 1
        w_addr, w_next = Signal(wa, name="w_addr"), Signal(wa, name="w_next")
        m.d.comb += [
            fetch.eq(full & (~valid | self.feed.ready)),
            w_addr.eq(Mux(t_col == 0, pick(slot_w, emit), w_next)),
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
                    col = Mux(t_col == j, pick([slot_data[k][i][j] for k in range(S)], emit),
                              col)
                m.d.sync += out_a[i].eq(col)
            m.d.sync += [valid.eq(1),
                         last.eq(end & pick(slot_last, emit)),
                         t_col.eq(Mux(end, 0, t_col + 1)),
                         w_next.eq(w_addr + rs_w)]
            with m.If(end):
                for s in range(S):
                    with m.If(emit == s):
                        m.d.sync += slot_full[s].eq(0)
                m.d.sync += emit.eq(succ(emit))
        with m.Elif(self.feed.ready):
            m.d.sync += valid.eq(0)
        with m.If(self.start & ~self.busy):
            m.d.sync += [emit.eq(0), t_col.eq(0), valid.eq(0)]
            m.d.sync += [f.eq(0) for f in slot_full]

        any_full = 0
        for f in slot_full:
            any_full = any_full | f
        m.d.comb += self.busy.eq(setup | setup2 | cinit | scan | load | ~loader_done | bv
                                 | wr_en | any_full | valid)
        return m


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
