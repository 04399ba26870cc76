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
"""

from amaranth.hdl import Cat, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import ReadPort
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

from bpsa.config import require_config
from bpsa.gateware.array.arith import arith_for

__all__ = ["ZF_FIELDS", "ZeroFreeGradientWalker", "cursor_layout", "cursor_origin", "cursor_step",
           "ends_layout", "ends_next", "ends_of", "feed_layout", "product_layout",
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
    (the context's last)."""
    op = arith_for(config).operand_shape
    return data.StructLayout({"a": data.ArrayLayout(op, config.rows),
                              "b": data.ArrayLayout(op, config.cols), "last": unsigned(1)})


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

        with m.If(self.start & ~self.busy):
            m.d.sync += [lay.eq(self.layer), setup.eq(1)]
        with m.Elif(setup):                   # the products, from registers to registers
            m.d.sync += [setup.eq(0), setup2.eq(1)]
            m.d.sync += product_values(lay, prod)
        with m.Elif(setup2):
            zero = ((lay.channels == 0) | (lay.out_height == 0) | (lay.out_width == 0)
                    | (lay.kernel_h == 0) | (lay.kernel_w == 0))
            m.d.sync += [setup2.eq(0), running.eq(~zero), g_ch.eq(0), g_idx.eq(0),
                         g_end.eq(lay.channels - R)]
            m.d.sync += step_values(lay, steps, prod)
            m.d.sync += cursor_origin(lay, cur, prod)
            m.d.sync += [ends.ow.eq(lay.out_width == 1), ends.oh.eq(lay.out_height == 1),
                         ends.q.eq(lay.kernel_w == 1), ends.r.eq(lay.kernel_h == 1)]
        with m.Elif(running & adv):
            m.d.sync += cur.eq(nxt)
            m.d.sync += ends.eq(ends_next(steps, cur, ends))
            with m.If(wrapped):               # the group's last vector: next row group
                with m.If(g_ch < g_end):
                    m.d.sync += [g_ch.eq(g_ch + R), g_idx.eq(g_idx + 1)]
                with m.Else():
                    m.d.sync += running.eq(0)
        return m


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


def product_values(lay, prod):
    """Statements that set ``prod`` (:func:`product_layout`) for the run ``lay``."""
    pt = lay.pad_top.as_signed()
    return [prod.shw.eq(lay.stride_h * lay.width), prod.dhw.eq(lay.dil_h * lay.width),
            prod.ptw.eq(pt * lay.width)]


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
