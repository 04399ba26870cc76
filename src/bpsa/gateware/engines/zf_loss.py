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
by ``s_h``, which the controller supplies).

Array row ``i`` holds the tile's ``i``-th class pixel (``rows`` consecutive pixels of the class
in raster order, across class rows), column ``j`` input channel ``j`` of the run's block. One
*context* per tile: for every tap of the class and every block of ``cols`` output channels k,
one vector per k. The dY buffer holds channel-blocked words (``cols`` output channels of one
pixel); the walker reads the ``rows`` tile pixels' words of one block into a transposer (one
word a cycle) and sends its columns (one output channel each) while it loads the next block,
so one vector leaves a cycle when ``rows <= cols``. The W buffer holds ``W[k, c, r, q]`` with
the block's input channels as lanes, word ``k R S + r S + q``.

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
from bpsa.gateware.arith import arith_for
from bpsa.gateware.engines.zf_gradient import feed_layout

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
        lay = Signal(zf_loss_layout(cfg))
        sd = signed(dim + 2)
        wide = unsigned(2 * dim + 2)

        # --- the transposer: SLOTS slots of rows x cols operands, with their block data -----
        S = SLOTS
        slot_data = [[Signal(data.ArrayLayout(op, C), name=f"slot{s}_row{i}")
                      for i in range(R)] for s in range(S)]
        slot_full = [Signal(name=f"slot{s}_full") for s in range(S)]
        slot_w = [Signal(wide, name=f"slot{s}_w") for s in range(S)]      # W word of t = 0
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
        ctx_slot = Signal(range(TAG_SLOTS))       # slot of the context being loaded

        # --- loader ----------------------------------------------------------------------------
        setup, scan, load = Signal(), Signal(), Signal()
        loader_done = Signal(init=1)
        a, b = Signal(dim), Signal(dim)          # class
        ra_rem, ra_quo = Signal(sd), Signal(sd)  # (a + pad_top) = quo s_h + rem
        rb_rem, rb_quo = Signal(sd), Signal(sd)
        r, q = Signal(dim), Signal(dim)          # tap
        rr_rem, rr_quo = Signal(sd), Signal(sd)  # (a + pad_top - r d_h) by s_h
        rq_rem, rq_quo = Signal(sd), Signal(sd)
        taps = Signal(2 * dim)                   # valid taps of the class
        tap_n = Signal(2 * dim)                  # valid taps done in this context
        tidx = Signal(2 * dim)                   # r S + q
        kb = Signal(dim)
        kb_base, w_kb = Signal(wide), Signal(wide)
        # tile start and pixel cursor: class row / column index, dX row / column
        t_i, t_j, t_h, t_w = (Signal(dim, name=f"tile_{n}") for n in ("i", "j", "h", "w"))
        p_i, p_j, p_h, p_w = (Signal(dim, name=f"pix_{n}") for n in ("i", "j", "h", "w"))
        lane = Signal(range(R))
        first_block = Signal()
        fill = Signal(range(S))                  # slot the loader fills
        # the read issued last cycle lands in the transposer this cycle
        wr_en, wr_inb, wr_lane = Signal(), Signal(), Signal(range(R))
        wr_slot = Signal(range(SLOTS))
        wr_done = Signal()                       # ... and completes the block
        rs = Signal(2 * dim)
        crs = Signal(wide)

        exists = p_h < lay.height
        ol = Signal(sd)
        oc = Signal(sd)
        tap_ok, pos_h, pos_w = dy_position(p_i, p_j, rr_rem, rr_quo, rq_rem, rq_quo)
        m.d.comb += [ol.eq(pos_h), oc.eq(pos_w)]
        inb = exists & (ol >= 0) & (ol < lay.out_height) & (oc >= 0) & (oc < lay.out_width)
        can_load = load & ~pick(slot_full, fill)
        tag_room = ctx_in_flight < TAG_SLOTS
        step = Signal()                          # one pixel read this cycle
        m.d.comb += [
            step.eq(can_load & tap_ok & (tag_room | ~first_block | (lane != 0))),
            self.x_mem.addr.eq(lay.x_base + kb_base + ol * lay.out_width + oc),
            self.x_mem.en.eq(step & inb),
        ]
        m.d.sync += [wr_en.eq(step), wr_inb.eq(inb), wr_lane.eq(lane), wr_slot.eq(fill)]
        for s in range(S):
            for i in range(R):
                with m.If(wr_en & (wr_slot == s) & (wr_lane == i)):
                    for j in range(C):
                        m.d.sync += slot_data[s][i][j].eq(Mux(wr_inb, self.x_mem.data[j], 0))
        with m.If(wr_done):
            for s in range(S):
                with m.If(wr_slot == s):
                    m.d.sync += slot_full[s].eq(1)
        m.d.sync += wr_done.eq(0)

        def next_tap_rows():
            """(rem, quo) of ``a + pad_top - (r + 1) d_h`` from those of ``r``."""
            rem, quo = sub_divmod(rr_rem, rr_quo, lay.dh_r, lay.dh_q, lay.stride_h)
            return [rr_rem.eq(rem), rr_quo.eq(quo)]

        def next_tap_cols(rem_src, quo_src):
            rem, quo = sub_divmod(rem_src, quo_src, lay.dw_r, lay.dw_q, lay.stride_w)
            return [rq_rem.eq(rem), rq_quo.eq(quo)]

        def first_tap():
            return [r.eq(0), q.eq(0), tidx.eq(0), rr_rem.eq(ra_rem), rr_quo.eq(ra_quo),
                    rq_rem.eq(rb_rem), rq_quo.eq(rb_quo)]

        # advance the tap (r, q) by one; sets wrapped when it was the last
        def advance_tap(wrapped):
            with m.If(q + 1 < lay.kernel_w):
                m.d.sync += [q.eq(q + 1), tidx.eq(tidx + 1)] + next_tap_cols(rq_rem, rq_quo)
            with m.Elif(r + 1 < lay.kernel_h):
                m.d.sync += [q.eq(0), r.eq(r + 1), tidx.eq(tidx + 1),
                             rq_rem.eq(rb_rem), rq_quo.eq(rb_quo)] + next_tap_rows()
            with m.Else():
                m.d.comb += wrapped.eq(1)

        def class_start(na, nb, rem_a, quo_a, rem_b, quo_b):
            """Start class (na, nb) with the (rem, quo) of na + pad_top, nb + pad_w."""
            m.d.sync += [a.eq(na), b.eq(nb), ra_rem.eq(rem_a), ra_quo.eq(quo_a),
                         rb_rem.eq(rem_b), rb_quo.eq(quo_b), scan.eq(1), load.eq(0),
                         taps.eq(0), r.eq(0), q.eq(0), tidx.eq(0),
                         rr_rem.eq(rem_a), rr_quo.eq(quo_a), rq_rem.eq(rem_b),
                         rq_quo.eq(quo_b),
                         t_i.eq(0), t_j.eq(0), t_h.eq(na), t_w.eq(nb),
                         p_i.eq(0), p_j.eq(0), p_h.eq(na), p_w.eq(nb)]

        wrapped = Signal()
        with m.If(self.start & ~self.busy):
            m.d.sync += [lay.eq(self.layer), setup.eq(1), loader_done.eq(0)]
        with m.Elif(setup):
            zero = ((lay.height == 0) | (lay.width == 0) | (lay.out_height == 0)
                    | (lay.out_width == 0) | (lay.kernel_h == 0) | (lay.kernel_w == 0)
                    | (lay.kblocks == 0) | (lay.stride_h == 0) | (lay.stride_w == 0))
            m.d.sync += [setup.eq(0), rs.eq(lay.kernel_h * lay.kernel_w),
                         crs.eq(lay.kernel_h * lay.kernel_w * C), fill.eq(0),
                         ctx_slot.eq(0)]
            with m.If(zero):
                m.d.sync += loader_done.eq(1)
            with m.Else():
                class_start(0, 0, lay.pt_r.as_signed(), lay.pt_q.as_signed(),
                            lay.pw_r.as_signed(), lay.pw_q.as_signed())
        with m.Elif(scan):                   # count the class's valid taps, one a cycle
            with m.If(tap_ok):
                m.d.sync += taps.eq(taps + 1)
            advance_tap(wrapped)
            with m.If(wrapped):
                m.d.sync += [scan.eq(0), tap_n.eq(0), kb.eq(0), kb_base.eq(0), w_kb.eq(0),
                             lane.eq(0), first_block.eq(1)] + first_tap()
                # a class with no tap or no pixel has no context
                with m.If((taps + tap_ok == 0) | (a >= lay.height) | (b >= lay.width)):
                    m.d.sync += load.eq(0)
                with m.Else():
                    m.d.sync += load.eq(1)
        # next class after an empty one (in the scan state's wrap) or after the last tile
        next_class = Signal()
        with m.If(scan & wrapped & ((taps + tap_ok == 0) | (a >= lay.height)
                                    | (b >= lay.width))):
            m.d.comb += next_class.eq(1)

        with m.If(load & ~tap_ok & ~setup & ~scan):   # skip a tap the class does not have
            advance_tap(Signal(name="skip_wrap"))
        with m.Elif(step):
            m.d.sync += lane.eq(lane + 1)
            with m.If(first_block):
                for c in range(TAG_SLOTS):
                    for i in range(R):
                        with m.If((ctx_slot == c) & (lane == i)):
                            m.d.sync += [tags[c][i].ok.eq(exists),
                                         tags[c][i].addr.eq(p_h * lay.width + p_w)]
            # the pixel cursor: next pixel of the class in raster order
            with m.If(p_w + lay.stride_w < lay.width):
                m.d.sync += [p_w.eq(p_w + lay.stride_w), p_j.eq(p_j + 1)]
            with m.Else():
                m.d.sync += [p_w.eq(b), p_j.eq(0), p_h.eq(p_h + lay.stride_h),
                             p_i.eq(p_i + 1)]
            with m.If(lane == R - 1):           # the block is read: hand the slot over
                last_kb = kb + 1 == lay.kblocks
                last_tap = tap_n + 1 == taps
                for s in range(S):
                    with m.If(fill == s):
                        m.d.sync += [slot_w[s].eq(lay.w_base + w_kb + tidx),
                                     slot_kv[s].eq(Mux(last_kb, lay.kvalid, C)),
                                     slot_last[s].eq(last_kb & last_tap)]
                m.d.sync += [wr_done.eq(1), fill.eq(succ(fill)), lane.eq(0),
                             first_block.eq(0)]
                with m.If(~last_kb):             # same pixels, next block of k
                    m.d.sync += [kb.eq(kb + 1), kb_base.eq(kb_base + lay.plane),
                                 w_kb.eq(w_kb + crs),
                                 p_i.eq(t_i), p_j.eq(t_j), p_h.eq(t_h), p_w.eq(t_w)]
                with m.Elif(~last_tap):          # next valid tap, same pixels
                    m.d.sync += [kb.eq(0), kb_base.eq(0), w_kb.eq(0), tap_n.eq(tap_n + 1),
                                 p_i.eq(t_i), p_j.eq(t_j), p_h.eq(t_h), p_w.eq(t_w)]
                    advance_tap(Signal(name="tap_wrap"))
                with m.Else():                   # the context is loaded: next tile
                    m.d.sync += [kb.eq(0), kb_base.eq(0), w_kb.eq(0), tap_n.eq(0),
                                 first_block.eq(1), ctx_slot.eq(ctx_slot + 1)] + first_tap()
                    # the cursor after this step is the next tile's first pixel
                    nh = Mux(p_w + lay.stride_w < lay.width, p_h, p_h + lay.stride_h)
                    nw = Mux(p_w + lay.stride_w < lay.width, p_w + lay.stride_w, b)
                    ni = Mux(p_w + lay.stride_w < lay.width, p_i, p_i + 1)
                    nj = Mux(p_w + lay.stride_w < lay.width, p_j + 1, 0)
                    m.d.sync += [t_h.eq(nh), t_w.eq(nw), t_i.eq(ni), t_j.eq(nj)]
                    with m.If(nh >= lay.height):
                        m.d.sync += load.eq(0)
                        m.d.comb += next_class.eq(1)
        with m.If(next_class):
            nrem_b, nquo_b = inc_divmod(rb_rem, rb_quo, lay.stride_w)
            nrem_a, nquo_a = inc_divmod(ra_rem, ra_quo, lay.stride_h)
            with m.If(b + 1 < lay.stride_w):
                class_start(a, b + 1, ra_rem, ra_quo, nrem_b, nquo_b)
            with m.Elif(a + 1 < lay.stride_h):
                class_start(a + 1, 0, nrem_a, nquo_a, lay.pw_r.as_signed(),
                            lay.pw_q.as_signed())
            with m.Else():
                m.d.sync += [loader_done.eq(1), scan.eq(0), load.eq(0)]

        # contexts whose tags are held: +1 when a context's first block starts, -1 when one
        # has drained
        ctx_start = step & first_block & (lane == 0)
        m.d.sync += ctx_in_flight.eq(ctx_in_flight + ctx_start - self.ctx_done)
        with m.If(self.start & ~self.busy):
            m.d.sync += ctx_in_flight.eq(0)

        # --- emitter: the slot's columns with their W words ----------------------------------
        emit = Signal(range(S))                  # slot the emitter drains
        t = Signal(range(C + 1))
        valid, last = Signal(), Signal()
        out_a = Signal(data.ArrayLayout(op, R))
        full = pick(slot_full, emit)
        kv = pick(slot_kv, emit)
        fetch = Signal()
        m.d.comb += [
            fetch.eq(full & (~valid | self.feed.ready)),
            self.w_mem.addr.eq(pick(slot_w, emit) + t * rs),
            self.w_mem.en.eq(fetch),
            self.feed.valid.eq(valid), self.feed.p.a.eq(out_a), self.feed.p.b.eq(self.w_mem.data),
            self.feed.p.last.eq(last),
        ]
        with m.If(fetch):
            end = t + 1 == kv
            for i in range(R):
                col = 0
                for j in range(C):
                    col = Mux(t == j, pick([slot_data[k][i][j] for k in range(S)], emit),
                              col)
                m.d.sync += out_a[i].eq(col)
            m.d.sync += [valid.eq(1),
                         last.eq(end & pick(slot_last, emit)),
                         t.eq(Mux(end, 0, t + 1))]
            with m.If(end):
                for s in range(S):
                    with m.If(emit == s):
                        m.d.sync += slot_full[s].eq(0)
                m.d.sync += emit.eq(succ(emit))
        with m.Elif(self.feed.ready):
            m.d.sync += valid.eq(0)
        with m.If(self.start & ~self.busy):
            m.d.sync += [emit.eq(0), t.eq(0), valid.eq(0)]
            m.d.sync += [f.eq(0) for f in slot_full]

        any_full = 0
        for f in slot_full:
            any_full = any_full | f
        m.d.comb += self.busy.eq(setup | scan | load | ~loader_done | wr_en | any_full | valid)
        return m


# --- the index map's arithmetic (proved against floor division in the walker's tests) -------

def sub_divmod(rem, quo, d_rem, d_quo, stride):
    """``(rem', quo')`` with ``quo' stride + rem' = quo stride + rem - (d_quo stride + d_rem)``
    and ``0 <= rem' < stride``, given ``0 <= rem, d_rem < stride``: floor division of ``v - d``
    from those of ``v`` and ``d``, without a divider."""
    diff = rem - d_rem
    return Mux(diff < 0, diff + stride, diff), quo - d_quo - Mux(diff < 0, 1, 0)


def inc_divmod(rem, quo, stride):
    """``(rem', quo')``: floor division of ``v + 1`` by ``stride`` from that of ``v``."""
    nxt = rem + 1
    return Mux(nxt >= stride, nxt - stride, nxt), quo + Mux(nxt >= stride, 1, 0)


def dy_position(i, j, rr_rem, rr_quo, rq_rem, rq_quo):
    """Class pixel ``(i, j)`` (dX ``(a + s_h i, b + s_w j)``) under tap ``(r, q)``, given
    ``(rr_quo, rr_rem)`` = floor division of ``a + pad_top - r d_h`` by ``s_h`` and
    ``(rq_quo, rq_rem)`` that of ``b + pad_w - q d_w`` by ``s_w``: ``(tap_ok, oh, ow)``, where
    ``tap_ok`` says the tap meets a dY pixel (no stride zero) and ``(oh, ow)`` is that pixel
    (maybe outside dY: padding)."""
    return (rr_rem == 0) & (rq_rem == 0), i + rr_quo, j + rq_quo
