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

from amaranth.hdl import Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import ReadPort
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

from bpsa.config import require_config
from bpsa.gateware.arith import arith_for

__all__ = ["ZF_FIELDS", "ZeroFreeGradientWalker", "feed_layout", "zf_gradient_layout"]

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

    ``start`` samples ``layer`` when idle; one set-up cycle, then one vector a cycle while
    ``feed`` is taken. ``busy`` is high from ``start`` until the last vector has been taken.
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
        lay = Signal(zf_gradient_layout(cfg))
        sc = signed(dim + 2)                  # coordinates (may be negative: padding)
        sa = signed(2 * dim + 3)              # row addresses y * width
        shw, dhw, ptw = Signal(sa), Signal(sa), Signal(sa)
        g_ch = Signal(dim)                    # first channel of the row group
        r, q, oh, ow = (Signal(dim, name=n) for n in ("r", "q", "oh", "ow"))
        xr0, xc0, xr, xc = (Signal(sc, name=n) for n in ("xr0", "xc0", "xr", "xc"))
        ra0, ra = Signal(sa), Signal(sa)
        dyi = Signal(2 * dim)                 # dY word of the context
        setup, running = Signal(), Signal()
        valid, last, inb_r = Signal(), Signal(), Signal()
        g_r = Signal(dim)

        fetch = Signal()
        inb = Signal()
        m.d.comb += [
            fetch.eq(running & (~valid | self.feed.ready)),
            inb.eq((xr >= 0) & (xr < lay.height) & (xc >= 0) & (xc < lay.width)),
            self.x_mem.addr.eq(lay.x_base + ra + xc), self.x_mem.en.eq(fetch & inb),
            self.dy_mem.addr.eq(lay.dy_base + dyi), self.dy_mem.en.eq(fetch),
            self.busy.eq(setup | running | valid),
            self.feed.valid.eq(valid), self.feed.p.last.eq(last),
            self.feed.p.b.eq(self.dy_mem.data),
        ]
        # row i of group g: lane g + i of the X word (zero past the word or outside the band)
        for i in range(R):
            choice = 0
            for g in range(0, B, R):
                if g + i < B:
                    choice = Mux(g_r == g, self.x_mem.data[g + i], choice)
            m.d.comb += self.feed.p.a[i].eq(Mux(inb_r, choice, 0))

        with m.If(fetch):
            m.d.sync += [valid.eq(1), inb_r.eq(inb), g_r.eq(g_ch),
                         last.eq((ow == lay.out_width - 1) & (oh == lay.out_height - 1))]
        with m.Elif(self.feed.ready):
            m.d.sync += valid.eq(0)

        pw, pt = lay.pad_w.as_signed(), lay.pad_top.as_signed()
        with m.If(self.start & ~self.busy):
            m.d.sync += [lay.eq(self.layer), setup.eq(1)]
        with m.Elif(setup):
            zero = ((lay.channels == 0) | (lay.out_height == 0) | (lay.out_width == 0)
                    | (lay.kernel_h == 0) | (lay.kernel_w == 0))
            m.d.sync += [
                setup.eq(0), running.eq(~zero),
                shw.eq(lay.stride_h * lay.width), dhw.eq(lay.dil_h * lay.width),
                ptw.eq(-(pt * lay.width)),
                g_ch.eq(0), r.eq(0), q.eq(0), oh.eq(0), ow.eq(0), dyi.eq(0),
                xr0.eq(-pt), xr.eq(-pt), xc0.eq(-pw), xc.eq(-pw),
                ra0.eq(-(pt * lay.width)), ra.eq(-(pt * lay.width)),
            ]
        with m.Elif(fetch):
            with m.If(ow != lay.out_width - 1):
                m.d.sync += [ow.eq(ow + 1), xc.eq(xc + lay.stride_w), dyi.eq(dyi + 1)]
            with m.Elif(oh != lay.out_height - 1):
                m.d.sync += [ow.eq(0), oh.eq(oh + 1), xc.eq(xc0), xr.eq(xr + lay.stride_h),
                             ra.eq(ra + shw), dyi.eq(dyi + 1)]
            with m.Else():                    # the context's last vector: next tap
                m.d.sync += [ow.eq(0), oh.eq(0), dyi.eq(0)]
                with m.If(q != lay.kernel_w - 1):
                    m.d.sync += [q.eq(q + 1), xc0.eq(xc0 + lay.dil_w),
                                 xc.eq(xc0 + lay.dil_w), xr.eq(xr0), ra.eq(ra0)]
                with m.Else():
                    m.d.sync += [q.eq(0), xc0.eq(-pw), xc.eq(-pw)]
                    with m.If(r != lay.kernel_h - 1):
                        m.d.sync += [r.eq(r + 1), xr0.eq(xr0 + lay.dil_h),
                                     xr.eq(xr0 + lay.dil_h), ra0.eq(ra0 + dhw),
                                     ra.eq(ra0 + dhw)]
                    with m.Else():
                        m.d.sync += [r.eq(0), xr0.eq(-pt), xr.eq(-pt), ra0.eq(ptw),
                                     ra.eq(ptw)]
                        with m.If(g_ch + R < lay.channels):
                            m.d.sync += g_ch.eq(g_ch + R)
                        with m.Else():
                            m.d.sync += running.eq(0)
        return m
