"""The zero-free gradient walker: operands of ``dW = sum over (n, oh, ow) of dY x X`` for the
output-stationary array, read straight from channel-blocked buffers, with no dilated dY and no
zero test.

For one tap ``(r, q)`` the gradient is a matrix product over the compact output grid::

    dW[k, c, r, q] = sum over (oh, ow) of
                     dY[k, oh, ow] * X[c, oh s_h + r d_h - p_h, ow s_w + q d_w - p_w]

Array row ``i`` holds input channel ``g rows + i`` of the block, column ``j`` output channel
``j`` of the dY block: one *context* (an output-stationary tile) per (row group ``g``, tap), its
depth the band's ``OH' OW`` pixels. Every vector is one X word (``B = feeder_bus_width``
channels of one pixel; lanes ``g rows .. g rows + rows - 1`` go to the rows) and one dY word
(``cols`` channels of one pixel). X positions outside the band (the layer's padding) give zero
operands without a read; an inserted (stride) zero never exists.

Buffers (word addresses; the controller loads them)
    X: the band's ``height`` rows of ``width`` pixels, word ``x_base + y width + x`` (``y`` from
    the band's first row). dY: the band's ``out_height`` rows of ``out_width`` pixels, word
    ``dy_base + oh out_width + ow``.

Order
    Contexts ``g`` (row groups of the block's ``channels`` channels), then ``r``, then ``q``;
    within a context ``oh`` then ``ow``. ``last`` marks a context's last vector. ``G R S``
    contexts, ``out_height out_width`` vectors each, one a cycle while ``feed`` is ready.

MX (``arithmetic`` an OCP MX format)
    The contract's zero-free walker order (``docs/architecture/mx.md``). X is quantized along W in each row and dY along OW in each row, and each buffer row is
    its pixels' words followed by the row's scale words (``ceil(width / 32)`` after an X row,
    lane ``l`` the scale of channel ``l``; ``ceil(out_width / 32)`` after a dY row): X word
    ``x_base + y P + x`` with the pitch ``P = width + ceil(width / 32)``, dY word ``dy_base +
    oh P' + ow`` with ``P' = out_width + ceil(out_width / 32)``. A context is cut into the
    *segments* of :func:`bpsa.models.mx.walker_segments` (at a row's end, a dY block's end
    and where the next position's X block differs), each an output-stationary context of its
    own (``last``; ``end`` on a tap's last), and each is preceded by one ``scale`` beat (a
    cycle of both read ports) carrying its blocks' scale codes: its X block's in ``a`` (zeros
    when its X row is in the padding) and its dY block's in ``b`` (zeros then too).
"""

from types import SimpleNamespace

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import ReadPort
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

from bpsa.config import require_config
from bpsa.gateware.array.arith import arith_for

__all__ = ["ZF_FIELDS", "ZeroFreeGradientWalker", "cursor_layout", "cursor_origin", "cursor_step",
           "drain_offsets", "ends_layout", "ends_next", "ends_of", "feed_layout", "product_layout",
           "product_values", "step_layout", "step_values", "zf_gradient_layout"]

#: Fields of the walker's run descriptor (:func:`zf_gradient_layout`).
ZF_FIELDS = ("channels", "width", "height", "out_height", "out_width", "kernel_h", "kernel_w",
             "stride_h", "stride_w", "dil_h", "dil_w", "pad_top", "pad_w", "x_base", "dy_base")


def zf_gradient_layout(config):
    """One run: ``channels`` (valid input channels of the X block, 1..``B``), ``width`` (W),
    ``height`` (X rows in the buffer), ``out_height`` / ``out_width`` (dY rows and columns in
    the buffer), the kernel, strides and dilations, ``pad_top`` (padding rows above the
    buffer's first X row) and ``pad_w``: ``dim_width + 2`` bits; ``x_base`` / ``dy_base``:
    word addresses in the X and dY buffers."""
    dim = unsigned(config.dim_width + 2)
    fields = {name: dim for name in ZF_FIELDS[:-2]}
    fields["x_base"] = unsigned(ceil_log2(config.buf_a_depth))
    fields["dy_base"] = unsigned(ceil_log2(config.buf_b_depth))
    return data.StructLayout(fields)


def feed_layout(config):
    """One vector for the array: ``a`` (``rows`` operands), ``b`` (``cols`` operands), ``last``
    (the context's last). MX: ``last`` ends a segment, ``end`` the context (a tap's last
    segment), and a beat with ``scale`` is no vector but the next segment's scale codes
    (``a``: X's, one a row; ``b``: dY's, one a column)."""
    op = arith_for(config).operand_shape
    fields = {"a": data.ArrayLayout(op, config.rows), "b": data.ArrayLayout(op, config.cols),
              "last": unsigned(1)}
    if config.is_mx:
        fields.update(scale=unsigned(1), end=unsigned(1))
    return data.StructLayout(fields)


class ZeroFreeGradientWalker(wiring.Component):
    """See the module docstring.

    ``start`` samples ``layer`` when idle; two set-up cycles (the run's products, registered,
    then the cursor's origin and steps), then one vector a cycle while ``feed`` is taken. Three stages, each a register: the cursor (:func:`cursor_step`; only
    equality tests and additions decide its step), the item (the position's X and dY word
    addresses, whether X is inside the band, ``last``: the memories' addresses come straight
    from registers) and the vector (the words read); the first vector is valid three cycles
    after the set-up cycles. ``busy`` is high from ``start`` until the last vector has been
    taken.
    A run with a zero size (channels, out_height, out_width, kernel) ends at once with no
    vector (the controller never sends one).

    Members
    -------
    layer : In(zf_gradient_layout(config)), start : In(1), busy : Out(1)
    x_mem : In(ReadPort.Signature(addr_width=log2(buf_a_depth), shape=ArrayLayout(op, B)))
    dy_mem : In(ReadPort.Signature(addr_width=log2(buf_b_depth), shape=ArrayLayout(op, cols)))
        Synchronous read ports of the X SRAM and the W / dY buffer; ``data`` must hold while
        ``en`` is low.
    feed : Out(stream.Signature(feed_layout(config)))
        ``valid`` never depends on ``ready``.
    """

    def __init__(self, config):
        self.config = require_config(config)
        op = arith_for(config).operand_shape
        super().__init__({
            "layer": In(zf_gradient_layout(config)), "start": In(1), "busy": Out(1),
            "x_mem": In(ReadPort.Signature(
                addr_width=ceil_log2(config.buf_a_depth),
                shape=data.ArrayLayout(op, config.feeder_bus_width))),
            "dy_mem": In(ReadPort.Signature(
                addr_width=ceil_log2(config.buf_b_depth),
                shape=data.ArrayLayout(op, config.cols))),
            "feed": Out(stream.Signature(feed_layout(config))),
        })

    def elaborate(self, platform):
        cfg = self.config
        m = Module()
        R, B = cfg.rows, cfg.feeder_bus_width
        dim = cfg.dim_width + 2
        xa, da = ceil_log2(cfg.buf_a_depth), ceil_log2(cfg.buf_b_depth)
        lay = Signal(zf_gradient_layout(cfg))
        pitch = Signal(dim + 1)               # X's row pitch (MX: the scale words after)
        prod = Signal(product_layout(cfg))    # the run's products (first set-up cycle)
        steps = Signal(step_layout(cfg))      # products and limits fixed for the run
        cur = Signal(cursor_layout(cfg))
        nxt = Signal(cursor_layout(cfg))
        ends = Signal(ends_layout())          # cur's last indices, registered
        wrapped = cursor_step(m, lay, steps, cur, nxt, ends)
        groups = -(-B // R)
        g_ch = Signal(dim)                    # first channel of the row group
        g_idx = Signal(range(groups + 1))     # its index (the lanes it takes)
        g_end = Signal(signed(dim + 1))       # channels - rows: the last group starts past it
        setup, setup2, running = Signal(), Signal(), Signal()

        # stage 1, the cursor: one position a cycle while the item register takes it
        # stage 2, the item: the position's word addresses and flags, registered
        iv, i_inb, i_last = Signal(), Signal(), Signal()
        i_xa, i_da = Signal(xa), Signal(da)
        i_g = Signal(range(groups + 1))
        # stage 3, the vector: the words read from the item's addresses
        valid, last, inb_r = Signal(), Signal(), Signal()
        g_r = Signal(range(groups + 1))

        fetch = Signal()
        adv = Signal()
        m.d.comb += [
            fetch.eq(iv & (~valid | self.feed.ready)),
            adv.eq(~iv | fetch),
            self.x_mem.addr.eq(i_xa), self.x_mem.en.eq(fetch & i_inb),
            self.dy_mem.addr.eq(i_da), self.dy_mem.en.eq(fetch),
            self.busy.eq(setup | setup2 | running | iv | valid),
            self.feed.valid.eq(valid), self.feed.p.last.eq(last),
            self.feed.p.b.eq(self.dy_mem.data),
        ]
        move = Signal()                       # the cursor moves on (MX: not for a scale beat)
        m.d.comb += move.eq(running & adv)
        # row i of group g: lane g rows + i of the X word (zero past the word or outside the
        # band)
        for i in range(R):
            choice = 0
            for gi, g in enumerate(range(0, B, R)):
                if g + i < B:
                    choice = Mux(g_r == gi, self.x_mem.data[g + i], choice)
            m.d.comb += self.feed.p.a[i].eq(Mux(inb_r, choice, 0))

        with m.If(fetch):
            m.d.sync += [valid.eq(1), inb_r.eq(i_inb), g_r.eq(i_g), last.eq(i_last)]
        with m.Elif(self.feed.ready):
            m.d.sync += valid.eq(0)

        with m.If(adv):
            m.d.sync += [
                iv.eq(running),
                i_inb.eq((cur.xr >= 0) & (cur.xr < lay.height) & (cur.xc >= 0)
                         & (cur.xc < lay.width)),
                i_xa.eq(lay.x_base + cur.ra[:xa] + cur.xc[:xa]),
                i_da.eq(lay.dy_base + cur.dyi[:da]),
                i_last.eq(ends.ow & ends.oh),
                i_g.eq(g_idx),
            ]
        if cfg.is_mx:
            self._mx_segments(m, SimpleNamespace(
                lay=lay, cur=cur, nxt=nxt, ends=ends, adv=adv, move=move, fetch=fetch,
                running=running, setup2=setup2, valid=valid, inb_r=inb_r, pitch=pitch,
                i_inb=i_inb, i_xa=i_xa, i_da=i_da, i_last=i_last, xa=xa, da=da))

        with m.If(self.start & ~self.busy):
            m.d.sync += [lay.eq(self.layer), setup.eq(1)]
            width = self.layer.width
            m.d.sync += pitch.eq(width + ((width + 31) >> 5) if cfg.is_mx else width)
        with m.Elif(setup):                   # the products, from registers to registers
            m.d.sync += [setup.eq(0), setup2.eq(1)]
            m.d.sync += product_values(lay, prod, pitch)
        with m.Elif(setup2):
            zero = ((lay.channels == 0) | (lay.out_height == 0) | (lay.out_width == 0)
                    | (lay.kernel_h == 0) | (lay.kernel_w == 0))
            m.d.sync += [setup2.eq(0), running.eq(~zero), g_ch.eq(0), g_idx.eq(0),
                         g_end.eq(lay.channels - R)]
            m.d.sync += step_values(lay, steps, prod)
            m.d.sync += cursor_origin(lay, cur, prod)
            m.d.sync += [ends.ow.eq(lay.out_width == 1), ends.oh.eq(lay.out_height == 1),
                         ends.q.eq(lay.kernel_w == 1), ends.r.eq(lay.kernel_h == 1)]
        with m.Elif(move):
            m.d.sync += cur.eq(nxt)
            m.d.sync += ends.eq(ends_next(steps, cur, ends))
            with m.If(wrapped):               # the group's last vector: next row group
                with m.If(g_ch < g_end):
                    m.d.sync += [g_ch.eq(g_ch + R), g_idx.eq(g_idx + 1)]
                with m.Else():
                    m.d.sync += running.eq(0)
        return m

    def _mx_segments(self, m, s):
        """MX: the cuts into segments and the scale beats (the module docstring). ``s``: the
        walker's signals; ``move`` is narrowed to the vectors' cycles, and the item of a
        scale beat overrides the vector's."""
        lay, cur, ends = s.lay, s.cur, s.ends
        dim = self.config.dim_width + 2
        need = Signal()                       # the next item is a segment's scale beat
        dyr = Signal(2 * dim)                 # the dY row's first word (from dy_base)
        pd = Signal(dim + 1)                  # dY's row pitch
        lastb = Signal(dim)                   # the last X block of a row
        xbw = Signal(s.xa + 2)                # x_base + width: a row's scale words
        dbw = Signal(s.da + 2)                # dy_base + out_width
        i_scale, i_end, scale_r, end_r = Signal(), Signal(), Signal(), Signal()
        # the next position's X column in the row (cur.xc + stride_w), kept by additions
        # beside the cursor: no adder before the block test
        xcn, sdw = Signal(signed(dim + 3)), Signal(dim + 1)
        with m.If(s.setup2):
            ow = lay.out_width
            m.d.sync += [need.eq(1), dyr.eq(0), pd.eq(ow + ((ow + 31) >> 5)),
                         lastb.eq((lay.width - 1) >> 5), xbw.eq(lay.x_base + lay.width),
                         dbw.eq(lay.dy_base + ow), sdw.eq(lay.stride_w + lay.dil_w),
                         xcn.eq(lay.stride_w - lay.pad_w.as_signed())]
        with m.If(s.move):
            with m.If(~ends.ow):
                m.d.sync += xcn.eq(xcn + lay.stride_w)
            with m.Elif(~ends.oh):
                m.d.sync += xcn.eq(cur.xc0 + lay.stride_w)
            with m.Elif(~ends.q):
                m.d.sync += xcn.eq(cur.xc0 + sdw)
            with m.Else():
                m.d.sync += xcn.eq(lay.stride_w - lay.pad_w.as_signed())

        def block(v):                         # the X block of column v, clamped into the row:
            q = v >> 5                        # v < 0 gives q < 0, v >= width q >= lastb
            return Mux(q < 0, 0, Mux(q > lastb, lastb, q[:dim]))
        seg_end = Signal()
        m.d.comb += seg_end.eq(ends.ow | (cur.ow[:5] == 31) | (block(cur.xc) != block(xcn)))
        m.d.comb += s.move.eq(s.running & s.adv & ~need)
        with m.If(ends.ow & ~ends.oh):        # the next dY row: past this row's scale words
            m.d.comb += s.nxt.dyi.eq(dyr + pd)
        with m.If(s.running & s.adv):
            m.d.sync += need.eq(~need & seg_end)
            with m.If(need):
                m.d.sync += [i_scale.eq(1), i_end.eq(0), s.i_last.eq(0),
                             s.i_inb.eq((cur.xr >= 0) & (cur.xr < lay.height)),
                             s.i_xa.eq(xbw + cur.ra[:s.xa] + block(cur.xc)),
                             s.i_da.eq(dbw + dyr + cur.ow[5:])]
            with m.Else():
                m.d.sync += [i_scale.eq(0), i_end.eq(ends.ow & ends.oh), s.i_last.eq(seg_end)]
                with m.If(ends.ow):
                    m.d.sync += dyr.eq(Mux(ends.oh, 0, dyr + pd))
        with m.If(s.fetch):
            m.d.sync += [scale_r.eq(i_scale), end_r.eq(i_end)]
        m.d.comb += [self.feed.p.scale.eq(scale_r), self.feed.p.end.eq(end_r)]
        with m.If(scale_r & ~s.inb_r):        # a segment in a padding row: zero scales
            m.d.comb += self.feed.p.b.eq(0)


def step_layout(config):
    """Values the cursor uses, fixed for a run: the products it adds, ``shw = s_h width``,
    ``dhw = d_h width``, ``ptw = -pad_top width``; the last index of each loop,
    ``owm1 = out_width - 1``, ``ohm1``, ``kwm1 = kernel_w - 1``, ``khm1`` (compared for
    equality, no subtraction on the cursor's path), the one before it (``owm2 =
    out_width - 2``, ...) and whether the loop has one index (``ow1 = out_width == 1``, ...),
    for :func:`ends_next`."""
    dim = config.dim_width + 2
    sa = signed(2 * dim + 3)
    fields = {"shw": sa, "dhw": sa, "ptw": sa}
    for n in ("ow", "oh", "kw", "kh"):
        fields.update({f"{n}m1": unsigned(dim), f"{n}m2": unsigned(dim), f"{n}1": unsigned(1)})
    return data.StructLayout(fields)


def ends_layout():
    """Whether the cursor is at the last index of each loop: ``ow`` (``ow = out_width - 1``),
    ``oh``, ``q``, ``r``."""
    return data.StructLayout({"ow": 1, "oh": 1, "q": 1, "r": 1})


def ends_of(steps, cur):
    """The :func:`ends_layout` value of ``cur``, by equality tests."""
    return Cat(cur.ow == steps.owm1, cur.oh == steps.ohm1, cur.q == steps.kwm1,
               cur.r == steps.khm1)


def ends_next(steps, cur, ends):
    """The :func:`ends_layout` value of the cursor after ``cur`` (:func:`cursor_step`), from
    ``cur`` and its ``ends``: an index that steps is last when it was the one before the last,
    one that wraps when its loop has one index; equality tests on registers only."""
    carry_oh = ends.ow
    carry_q = carry_oh & ends.oh
    carry_r = carry_q & ends.q
    return Cat(Mux(ends.ow, steps.ow1, cur.ow == steps.owm2),
               Mux(carry_oh, Mux(ends.oh, steps.oh1, cur.oh == steps.ohm2), ends.oh),
               Mux(carry_q, Mux(ends.q, steps.kw1, cur.q == steps.kwm2), ends.q),
               Mux(carry_r, Mux(ends.r, steps.kh1, cur.r == steps.khm2), ends.r))


def cursor_layout(config):
    """The walker's position: tap ``(r, q)``, dY pixel ``(oh, ow)``, and the X coordinates and
    addresses that go with them: ``xr0 = r d_h - pad_top``, ``xc0 = q d_w - pad_w``,
    ``ra0 = xr0 width``, ``xr = xr0 + oh s_h``, ``xc = xc0 + ow s_w``, ``ra = xr width``,
    ``dyi = oh out_width + ow`` (kept by additions only)."""
    dim = config.dim_width + 2
    sc, sa = signed(dim + 2), signed(2 * dim + 3)
    return data.StructLayout({"r": unsigned(dim), "q": unsigned(dim), "oh": unsigned(dim),
                              "ow": unsigned(dim), "xr0": sc, "xc0": sc, "xr": sc, "xc": sc,
                              "ra0": sa, "ra": sa, "dyi": unsigned(2 * dim)})


def product_layout(config):
    """The run's products, registered a set-up cycle before :func:`step_values` and
    :func:`cursor_origin` use them: ``shw = s_h width``, ``dhw = d_h width``,
    ``ptw = pad_top width``."""
    sa = signed(2 * (config.dim_width + 2) + 3)
    return data.StructLayout({"shw": sa, "dhw": sa, "ptw": sa})


def product_values(lay, prod, pitch=None):
    """Statements that set ``prod`` (:func:`product_layout`) for the run ``lay``; ``pitch``
    (X's row pitch in words) is ``lay.width`` unless given."""
    pt = lay.pad_top.as_signed()
    pitch = lay.width if pitch is None else pitch
    return [prod.shw.eq(lay.stride_h * pitch), prod.dhw.eq(lay.dil_h * pitch),
            prod.ptw.eq(pt * pitch)]


def step_values(lay, steps, prod=None):
    """Statements that set ``steps`` (:func:`step_layout`) for the run ``lay``; the products
    from ``prod`` (:func:`product_layout`, registered) when given, else multiplied here."""
    pt = lay.pad_top.as_signed()
    shw = lay.stride_h * lay.width if prod is None else prod.shw
    dhw = lay.dil_h * lay.width if prod is None else prod.dhw
    ptw = pt * lay.width if prod is None else prod.ptw
    return [steps.shw.eq(shw), steps.dhw.eq(dhw), steps.ptw.eq(-ptw)] + [st for n, v in (("ow", lay.out_width), ("oh", lay.out_height),
                         ("kw", lay.kernel_w), ("kh", lay.kernel_h))
         for st in (steps[f"{n}m1"].eq(v - 1), steps[f"{n}m2"].eq(v - 2),
                    steps[f"{n}1"].eq(v == 1))]


def cursor_origin(lay, cur, prod=None):
    """Statements that put ``cur`` at the run's first vector (tap 0, pixel 0); ``pad_top
    width`` from ``prod`` (:func:`product_layout`) when given."""
    pw, pt = lay.pad_w.as_signed(), lay.pad_top.as_signed()
    ptw = pt * lay.width if prod is None else prod.ptw
    return [cur.r.eq(0), cur.q.eq(0), cur.oh.eq(0), cur.ow.eq(0), cur.dyi.eq(0),
            cur.xr0.eq(-pt), cur.xr.eq(-pt), cur.xc0.eq(-pw), cur.xc.eq(-pw),
            cur.ra0.eq(-ptw), cur.ra.eq(-ptw)]


def cursor_step(m, lay, steps, cur, nxt, ends=None):
    """Drive ``nxt`` (comb) with the cursor after ``cur``: ``ow`` fastest, then ``oh``, ``q``,
    ``r``; returns a signal that is high when ``cur`` is the last tap's last pixel (``nxt`` is
    then the origin again). ``ends`` (:func:`ends_layout`) may give which indices of ``cur``
    are last from registers (:func:`ends_next`); else they are tested here
    (:func:`ends_of`)."""
    pw, pt = lay.pad_w.as_signed(), lay.pad_top.as_signed()
    if ends is None:
        ends = Signal(ends_layout())
        m.d.comb += ends.eq(ends_of(steps, cur))
    wrapped = Signal()
    m.d.comb += nxt.eq(cur)
    with m.If(~ends.ow):
        m.d.comb += [nxt.ow.eq(cur.ow + 1), nxt.xc.eq(cur.xc + lay.stride_w),
                     nxt.dyi.eq(cur.dyi + 1)]
    with m.Elif(~ends.oh):
        m.d.comb += [nxt.ow.eq(0), nxt.oh.eq(cur.oh + 1), nxt.xc.eq(cur.xc0),
                     nxt.xr.eq(cur.xr + lay.stride_h), nxt.ra.eq(cur.ra + steps.shw),
                     nxt.dyi.eq(cur.dyi + 1)]
    with m.Else():                            # the context's last vector: next tap
        m.d.comb += [nxt.ow.eq(0), nxt.oh.eq(0), nxt.dyi.eq(0)]
        with m.If(~ends.q):
            m.d.comb += [nxt.q.eq(cur.q + 1), nxt.xc0.eq(cur.xc0 + lay.dil_w),
                         nxt.xc.eq(cur.xc0 + lay.dil_w), nxt.xr.eq(cur.xr0),
                         nxt.ra.eq(cur.ra0)]
        with m.Else():
            m.d.comb += [nxt.q.eq(0), nxt.xc0.eq(-pw), nxt.xc.eq(-pw)]
            with m.If(~ends.r):
                m.d.comb += [nxt.r.eq(cur.r + 1), nxt.xr0.eq(cur.xr0 + lay.dil_h),
                             nxt.xr.eq(cur.xr0 + lay.dil_h), nxt.ra0.eq(cur.ra0 + steps.dhw),
                             nxt.ra.eq(cur.ra0 + steps.dhw)]
            with m.Else():
                m.d.comb += [nxt.r.eq(0), nxt.xr0.eq(-pt), nxt.xr.eq(-pt),
                             nxt.ra0.eq(steps.ptw), nxt.ra.eq(steps.ptw), wrapped.eq(1)]
    return wrapped


def drain_offsets(m, config, load, layer, drained, tap_end, row):
    """The P offsets of a run's drained rows (:func:`~bpsa.gateware.frontends.drain.zg_layout`):
    the row ``row`` of row group ``g`` and tap ``t`` goes to P word ``(g rows + row) R S + t``
    = ``tbase + rowoff[row]``, by additions (``rowoff[i] = i R S`` builds up by one addition a
    cycle after the run's start, long before its first drain). ``load`` (high for one cycle at
    a run's start, with ``layer``) resets the count; ``drained`` marks the cycle a context's
    row 0 drains and ``tap_end`` whether that context is its tap's last (always, but for MX
    segments). Returns ``(addr, keep, all_drained)``: ``row``'s offset, whether its channel
    is in the block, and (registered) whether every context of the run has drained."""
    R, dim = config.rows, config.dim_width
    zl = Signal(zf_gradient_layout(config))
    zw = 2 * (dim + 2)
    zrs = Signal(zw)                  # R S of the run (registered from zl)
    dtap = Signal(zw)
    tbase, gbase = Signal(zw + dim + 2), Signal(zw + dim + 2)  # g R S + t; g R S
    crem = Signal(signed(dim + 3))    # channels - g rows: the group's rows with a channel
    rowoff = [Const(0, zw + ceil_log2(R + 1))] + [
        Signal(zw + ceil_log2(R + 1), name=f"zg_rowoff{i}") for i in range(1, R + 1)]
    all_drained = Signal()
    m.d.sync += zrs.eq(zl.kernel_h * zl.kernel_w)
    m.d.sync += [rowoff[i].eq(rowoff[i - 1] + zrs) for i in range(1, R + 1)]
    with m.If(load):
        m.d.sync += [zl.eq(layer), dtap.eq(0), tbase.eq(0), gbase.eq(0),
                     crem.eq(layer.channels), all_drained.eq(0)]
    with m.Elif(drained & tap_end):
        with m.If(dtap + 1 == zrs):
            m.d.sync += [dtap.eq(0), tbase.eq(gbase + rowoff[R]), gbase.eq(gbase + rowoff[R]),
                         crem.eq(crem - R)]
            with m.If(crem <= R):
                m.d.sync += all_drained.eq(1)
        with m.Else():
            m.d.sync += [dtap.eq(dtap + 1), tbase.eq(tbase + 1)]
    addr, keep = Signal(zw), Signal()
    m.d.comb += [addr.eq(tbase + Array(rowoff[:R])[row]), keep.eq(crem > row)]
    return addr, keep, all_drained
