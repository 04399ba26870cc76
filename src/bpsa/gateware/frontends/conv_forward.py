"""The forward convolution: data feeder + weight fetcher + output-stationary systolic array.

Source: Fornt et al., Sec. II (Fig. 1): the feeder lowers X on the fly for the array rows, the
weight fetcher streams W to the columns, the array holds the Y sums and drains them through
its reserve registers while the next context computes.

Buffers (written by the host through the write ports while the top is idle)
    *X SRAM*: ``buf_a_depth`` words of ``B = feeder_bus_width`` operands. X (N x C x H x W)
    is flattened ``[N, C, Y, X]`` (X contiguous) from element address ``x_base`` (word
    ``a // B``, position ``a % B``), as :mod:`bpsa.gateware.frontends.feeder.feeder` reads it.
    *W buffer*: ``buf_b_depth`` words of ``cols`` operands. Output-channel tile ``t`` (``k0 =
    t * cols``) occupies the ``CRS = C*R*S`` words from ``w_base + t * CRS``; word ``e = (c*R +
    r)*S + q`` (the feeder's element order) holds ``W[k0 + j, c, r, q]`` in lane ``j`` (0 for
    ``k0 + j >= K``). ``ceil(K / cols) * CRS`` words in all.

Schedule
    For each output-channel tile, in order ``k0 = 0, cols, ..``, the feeder runs the whole layer
    once: contexts ``(n, oh, ow0)`` in that order, ``ow0`` stepping by ``rows`` (see
    :mod:`bpsa.gateware.frontends.feeder.feeder`). A context is one output-stationary tile of depth ``CRS``: the
    feeder's vector ``e`` (element ``e`` of the context for every lane) meets W word ``e`` of the
    tile in the same cycle, and ``a_last`` marks ``e = CRS - 1``. Array row ``i`` computes pixel
    ``ow0 + i``, column ``j`` output channel ``k0 + j``. Contexts closer than ``2 * rows`` cycles
    (short contexts, ``CRS < 2 * rows``) are spaced by holding the context's last vector back (idle
    cycles, no refusal); feeder stalls become bubbles (valid bits travel with the data).

Refusals
    :func:`check_layer` names the reason; the hardware raises ``error`` (with ``done``) for the
    same descriptors, without computing: no output channel, W not fitting the W buffer (checked
    here, before the feeder starts) and everything the feeder refuses (X not fitting the X
    SRAM, a dilated kernel wider than ``feeder_pattern_width`` or larger than the padded input,
    zero sizes, strides or dilations).
"""

from types import SimpleNamespace

from amaranth.hdl import Array, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.memory import Memory, ReadPort, WritePort
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

from bpsa.gateware.array.arith import arith_for
from bpsa.gateware.array.systolic import COUNTER_WIDTH, Dataflow, SystolicArray, array_signature
from bpsa.config import require_config
from bpsa.gateware.frontends.feeder.feeder import DataFeeder, addr_width, coord_width, ptr_width
from bpsa.gateware.frontends.feeder.feeder import check_layer as feeder_check_layer
from bpsa.gateware.frontends.zero_free.gradient import (
    ZeroFreeGradientWalker,
    drain_offsets,
    zf_gradient_layout,
)
from bpsa.gateware.frontends.zero_free.loss import TAG_SLOTS, ZeroFreeLossWalker, zf_loss_layout
from bpsa.gateware.common.skid import SkidBuffer
from bpsa.gateware.frontends.drain import context_spacing, y_layout, zg_layout

__all__ = [
    "CONV_FIELDS", "COUNTERS", "conv_layer_layout", "weight_layout",
    "check_config", "check_layer", "layer_value", "feeder_fields", "weight_words", "ConvState",
    "WeightFetcher", "ConvForward",
]

#: Shape fields shared with the feeder's descriptor (same names and meaning).
_SHAPE_FIELDS = ("batch", "channels", "height", "width", "kernel_h", "kernel_w",
                 "stride_h", "stride_w", "pad_h", "pad_w", "dil_h", "dil_w", "pad_bottom")

#: Fields of the layer descriptor (:func:`conv_layer_layout`).
CONV_FIELDS = _SHAPE_FIELDS + ("out_channels", "x_base", "w_base")

#: Counter outputs of :class:`ConvForward`, all ``COUNTER_WIDTH`` bits.
COUNTERS = ("cycles", "words_read", "w_words_read", "stall_cycles", "fifo_stall_cycles",
            "vectors", "gap_cycles", "y_vectors", "array_cycles", "fired", "gated", "drained")


# --- layouts -------------------------------------------------------------------------------

def _waddr_width(config):
    """Bits of a W buffer word address."""
    return ceil_log2(config.buf_b_depth)


def conv_layer_layout(config):
    """Layout of the layer descriptor (``ConvLayer``), all fields unsigned.

    ``batch`` .. ``dil_w`` and ``pad_bottom`` (as in :func:`bpsa.gateware.frontends.feeder.feeder.layer_layout`:
    ``pad_h`` is the top padding, ``pad_bottom`` the bottom one) and ``out_channels`` (K):
    ``dim_width`` bits. ``x_base``: element address of ``X[0, 0, 0, 0]`` in the X SRAM.
    ``w_base``: word address of the first W word in the W buffer.
    """
    dim = unsigned(config.dim_width)
    fields = {name: dim for name in _SHAPE_FIELDS}
    fields["out_channels"] = dim
    fields["x_base"] = unsigned(ptr_width(config))
    fields["w_base"] = unsigned(_waddr_width(config))
    return data.StructLayout(fields)


def weight_layout(config):
    """Payload of the :class:`WeightFetcher` stream: one W word (``data``, ``cols`` operands)
    and ``last`` (the word is the context's last, ``e = CRS - 1``)."""
    op = arith_for(config).operand_shape
    return data.StructLayout({"data": data.ArrayLayout(op, config.cols), "last": unsigned(1)})


# --- the Python view: checks ---------------------------------------------------------------

def check_config(config):
    """Return ``config`` when a :class:`ConvForward` can be generated for it; otherwise raise
    :exc:`TypeError` (not a :class:`~bpsa.config.Config`) or :exc:`ValueError` naming the
    parameter: the ``os`` dataflow and the reserve registers are needed."""
    require_config(config)
    if not config.has("os"):
        raise ValueError(f"ConvForward needs the 'os' dataflow, not dataflows "
                         f"{list(config.dataflows)!r}")
    if not config.reserve_registers:
        raise ValueError("ConvForward needs reserve_registers (the drain overlaps the next "
                         "context), not reserve_registers = false")
    return config


def _fields(layer):
    if isinstance(layer, dict):
        get = layer.get
    else:
        def get(name):
            return getattr(layer, name, None)
    values = {}
    for name in CONV_FIELDS:
        v = get(name)
        if v is None and name in ("pad_h", "pad_w", "x_base", "w_base"):
            v = 0
        if v is None and name == "pad_bottom":
            v = values["pad_h"]
        if isinstance(v, bool) or not isinstance(v, int):
            raise ValueError(f"layer field {name} must be an integer, not {v!r}")
        values[name] = v
    return values


def feeder_fields(layer):
    """The :class:`~bpsa.gateware.frontends.feeder.feeder.DataFeeder` descriptor (a dict) that runs the whole
    layer."""
    f = _fields(layer)
    out = {name: f[name] for name in _SHAPE_FIELDS}
    out.update(base=f["x_base"], ctx_n=0, ctx_oh=0, ctx_ow=0, ctx_count=0)
    return out


def weight_words(config, layer):
    """``(tiles, crs)``: output-channel tiles ``ceil(K / cols)`` and words per tile
    ``C*R*S``; the layer occupies ``tiles * crs`` W buffer words from ``w_base``."""
    f = _fields(layer)
    crs = f["channels"] * f["kernel_h"] * f["kernel_w"]
    return -(-f["out_channels"] // config.cols), crs


def check_layer(config, layer):
    """Raise :exc:`ValueError` with the reason when the :class:`ConvForward` generated for
    ``config`` cannot run ``layer`` (an object with the attributes :data:`CONV_FIELDS`, or a
    dict; missing ``pad_h``, ``pad_w``, ``x_base`` and ``w_base`` mean 0, a missing
    ``pad_bottom`` means ``pad_h``). The hardware refuses the same
    descriptors with ``error``, except those whose values do not fit the descriptor fields."""
    require_config(config)
    f = _fields(layer)
    layout = conv_layer_layout(config)
    for name in CONV_FIELDS:
        width = layout.members[name].width
        if not 0 <= f[name] < 1 << width:
            raise ValueError(f"layer field {name} must be in [0, {(1 << width) - 1}] "
                             f"({width} bits), not {f[name]}")
    if f["out_channels"] == 0:
        raise ValueError("layer field out_channels must be at least 1, not 0")
    feeder_check_layer(config, feeder_fields(f))
    tiles, crs = weight_words(config, f)
    if f["w_base"] + tiles * crs > config.buf_b_depth:
        raise ValueError(f"W ({tiles} output-channel tiles x {crs} words from word "
                         f"{f['w_base']}) does not fit the W buffer of {config.buf_b_depth} "
                         f"words")


def layer_value(config, layer):
    """The descriptor value (a dict for ``Simulator.set``) of a checked layer."""
    check_layer(config, layer)
    return _fields(layer)


# --- the weight fetcher --------------------------------------------------------------------

class WeightFetcher(wiring.Component):
    """Streams the W words of one output-channel tile, context after context.

    ``start`` loads ``base`` and ``length`` (``CRS``, the words of a context); the fetcher then
    reads words ``base, base + 1, .., base + length - 1`` and starts again at ``base`` for the
    next context, until the next ``start`` (which drops a word not yet taken). Word ``e`` of a
    context is the ``b`` vector for the feeder's vector ``e``: the consumer takes both in the
    same cycle. ``length = 0`` stops the fetcher.

    Throughput: one word per cycle while ``ready``; the first word is valid two cycles after
    ``start``. ``valid`` never depends on ``ready``; the payload holds while not taken.

    Members
    -------
    start : In(1)
    base : In(log2(buf_b_depth)), length : In(range(buf_b_depth + 1))
        Sampled with ``start``.
    mem : In(ReadPort.Signature(addr_width=log2(buf_b_depth), shape=ArrayLayout(operand, cols)))
        A synchronous read port of the W buffer (connect ``Memory.read_port()``); ``data``
        must hold while ``en`` is low.
    b : Out(stream.Signature(weight_layout))
        The W words, ``last`` on the context's last.
    """

    def __init__(self, config):
        self.config = require_config(config)
        op = arith_for(config).operand_shape
        aw = _waddr_width(config)
        super().__init__({
            "start": In(1), "base": In(aw), "length": In(range(config.buf_b_depth + 1)),
            "mem": In(ReadPort.Signature(addr_width=aw,
                                         shape=data.ArrayLayout(op, config.cols))),
            "b": Out(stream.Signature(weight_layout(config))),
        })

    def elaborate(self, platform):
        m = Module()
        base = Signal.like(self.base)
        length = Signal.like(self.length)
        nxt = Signal.like(self.length)       # index of the next word to read
        running = Signal()
        valid = Signal()
        last = Signal()
        fetch = Signal()
        # (a read in a start's cycle is harmless: the start clears ``valid`` and the next read
        # replaces the word, so the read enable does not wait for the start's logic)
        m.d.comb += [
            fetch.eq(running & (~valid | self.b.ready)),
            self.mem.addr.eq(base + nxt), self.mem.en.eq(fetch),
            self.b.valid.eq(valid), self.b.p.data.eq(self.mem.data), self.b.p.last.eq(last),
        ]
        end = nxt == length - 1
        with m.If(self.start):
            m.d.sync += [base.eq(self.base), length.eq(self.length), nxt.eq(0),
                         running.eq(self.length != 0), valid.eq(0)]
        with m.Elif(fetch):
            m.d.sync += [valid.eq(1), last.eq(end), nxt.eq(Mux(end, 0, nxt + 1))]
        with m.Elif(self.b.ready):
            m.d.sync += valid.eq(0)
        return m


# --- the top -------------------------------------------------------------------------------

class ConvState(enum.Enum, shape=3):
    """State of the :class:`ConvForward` control (``PRIME``, ``RUN`` and ``DRAIN`` serve both
    the forward and the zero-free gradient)."""
    IDLE = 0
    SETUP = 1
    CHECK = 2
    PRIME = 3
    RUN = 4
    DRAIN = 5


class ConvForward(wiring.Component):
    """Forward convolution ``Y = conv2d(X, W)`` on the output-stationary array (see the module
    docstring for the buffer layouts and the schedule).

    Accepts a descriptor with ``start`` when idle. Setup (``SETUP``, ``CHECK``: 6 cycles)
    derives ``CRS``, the number of output-channel tiles and the W footprint and checks the W
    buffer; the reserve chains are then zeroed (``rows`` cycles) while the feeder sets up
    (``max(15, 6 + rows) + max(7, kernel_w + 2)`` cycles to its first X read, again for every
    output-channel tile), and the layer runs.
    ``busy`` stays high until the last Y row has left on ``y``; ``done`` then rises and holds
    until the next ``start``.

    A refused layer (see the module docstring) raises ``error`` and ``done`` without any Y
    output or X SRAM read (a layer the feeder refuses may have cost one W word read: the
    fetcher starts with the feeder). ``error`` also latches an array protocol error or a
    misalignment of the feeder and W streams (neither happens by construction); it holds until
    ``start``.

    Output: every drained row whose pixel exists (``ow0 + row < OW``) appears on ``y`` for one
    cycle (``valid``; no backpressure: the array cannot stall), rows ``rows - 1`` down to 0 of
    each context, contexts in the schedule's order. ``N * OH * OW * ceil(K / cols)`` rows in all.

    Members
    -------
    layer : In(conv_layer_layout)
        Sampled with ``start``.
    start : In(1)
    busy, done, error : Out(1)
    x_write : Out(WritePort.Signature(addr_width=log2(buf_a_depth), shape=ArrayLayout(op, B)))
        Write port of the X SRAM (``en``, ``addr``, ``data``).
    w_write : Out(WritePort.Signature(addr_width=log2(buf_b_depth), shape=ArrayLayout(op, C)))
        Write port of the W buffer.
    y : Out(Signature(valid: Out(1), payload: Out(y_layout)))
        The drained Y rows.
    zg_layer : In(zf_gradient_layout), zg_start : In(1), zg : Out(Signature(valid, payload:
    zg_layout))
        With the ``zero_free`` backward mode: a zero-free gradient run
        (:class:`bpsa.gateware.frontends.zero_free.gradient.ZeroFreeGradientWalker` feeds the array from
        the X SRAM, holding channel-blocked X, and the W buffer, holding channel-blocked dY),
        started by ``zg_start`` when idle; its drained rows of input channels inside the block
        leave on ``zg``. ``busy``, ``done`` and the counters as for a forward run.
    zl_layer : In(zf_loss_layout), zl_start : In(1), zl : Out(Signature(valid, payload:
    zg_layout))
        The same for a zero-free loss run
        (:class:`bpsa.gateware.frontends.zero_free.loss.ZeroFreeLossWalker`: dY channel-blocked in the X
        SRAM, W with the input channels as lanes in the W buffer); ``zl`` carries each drained
        pixel's ``cols`` input channels and its P offset ``h W + w`` in the band.
    cycles, words_read, w_words_read, stall_cycles, fifo_stall_cycles, vectors, gap_cycles,
    y_vectors, array_cycles, fired, gated, drained : Out(COUNTER_WIDTH)
        Counters of the current (or last) run, cleared by ``start``: busy cycles; X SRAM words
        read (all tiles); W words read (including one prefetch per tile past its last
        context); feeder stall cycles (a word held because a lane lacks free registers) and,
        of those, cycles a lane waited for FIFO space; vectors issued into the array; cycles a
        context's last vector waited for the ``2 * rows`` spacing; ``y`` rows; and the array's
        ``cycles``, ``fired``, ``gated``, ``drained`` counters.
    array : In(array_signature)
        With ``shared_array=True``: the engine drives an array outside it (the accelerator's
        one array, :func:`bpsa.gateware.array.systolic.share_array`) instead of holding its own.
    cfw_sel, cfw_addr, cfw_en : In, cfw_data : Out
        With the channel-first front end generated: while ``cfw_sel`` is high, the W buffer's
        read port serves :class:`bpsa.gateware.frontends.channel_first.channel_first.ChannelFirst`.
    """

    def __init__(self, config, *, shared_array=False):
        self.config = check_config(config)
        self.shared_array = shared_array
        op = arith_for(config).operand_shape
        members = {
            "layer": In(conv_layer_layout(config)), "start": In(1),
            "busy": Out(1), "done": Out(1), "error": Out(1),
            "x_write": Out(WritePort.Signature(
                addr_width=addr_width(config),
                shape=data.ArrayLayout(op, config.feeder_bus_width))),
            "w_write": Out(WritePort.Signature(
                addr_width=_waddr_width(config), shape=data.ArrayLayout(op, config.cols))),
            "y": Out(wiring.Signature({"valid": Out(1), "payload": Out(y_layout(config))})),
        }
        self.has_zf = config.has_mode("zero_free")
        if self.has_zf:
            members.update({
                "zg_layer": In(zf_gradient_layout(config)), "zg_start": In(1),
                "zg": Out(wiring.Signature({"valid": Out(1),
                                            "payload": Out(zg_layout(config))})),
                "zl_layer": In(zf_loss_layout(config)), "zl_start": In(1),
                "zl": Out(wiring.Signature({"valid": Out(1),
                                            "payload": Out(zg_layout(config))})),
            })
        self.has_cf = config.has_frontend("channel_first")
        if self.has_cf:
            members.update({"cfw_sel": In(1), "cfw_addr": In(_waddr_width(config)),
                            "cfw_en": In(1), "cfw_data": Out(data.ArrayLayout(op, config.cols))})
        for name in COUNTERS:
            members[name] = Out(COUNTER_WIDTH)
        if shared_array:
            members["array"] = In(array_signature(config))
        super().__init__(members)

    def elaborate(self, platform):
        cfg = self.config
        m = Module()
        # the blocks and signals the methods below share
        s = SimpleNamespace(dim=cfg.dim_width, cw=coord_width(cfg),
                            op=arith_for(cfg).operand_shape, G=cfg.context_gap)
        self._blocks(m, s)
        state = Signal(ConvState)
        lay = Signal(conv_layer_layout(cfg))
        for name in _SHAPE_FIELDS:
            m.d.comb += getattr(s.feeder.layer, name).eq(getattr(lay, name))
        m.d.comb += s.feeder.layer.base.eq(lay.x_base)
        s.state, s.lay = state, lay
        self._setup_products(m, s)
        self._drain_geometry(m, s)
        self._issue(m, s)
        self._drain(m, s)
        if self.has_zf:
            self._zf_gradient_drain(m, s)
            self._zf_loss_drain(m, s)
        self._counters(m, s)
        self._control(m, s)
        return m

    def _blocks(self, m, s):
        """The buffers (their host write ports) and the blocks: the feeder, the weight
        fetcher, the walkers (with the ``zero_free`` mode; the buffers' read ports go to the
        run's reader) and the array. Sets ``s.feeder``, ``s.fetch``, ``s.zmode``,
        ``s.lmode``, ``s.x_rp``, ``s.w_rp``, ``s.arr`` and, with the walkers, ``s.zf`` and
        ``s.zlw``."""
        cfg = self.config
        C, B, op = cfg.cols, cfg.feeder_bus_width, s.op
        xmem = m.submodules.x_sram = Memory(shape=data.ArrayLayout(op, B),
                                            depth=cfg.buf_a_depth, init=[])
        wmem = m.submodules.w_buf = Memory(shape=data.ArrayLayout(op, C),
                                           depth=cfg.buf_b_depth, init=[])
        for mem, port in ((xmem, self.x_write), (wmem, self.w_write)):
            wp = mem.write_port()
            m.d.comb += [wp.en.eq(port.en), wp.addr.eq(port.addr), wp.data.eq(port.data)]
        feeder = m.submodules.feeder = DataFeeder(cfg)
        fetch = m.submodules.weights = WeightFetcher(cfg)
        zmode = Signal()                      # the run is a zero-free gradient
        lmode = Signal()                      # the run is a zero-free loss
        x_rp, w_rp = xmem.read_port(), wmem.read_port()
        if self.has_zf:
            zf = m.submodules.zf_gradient = ZeroFreeGradientWalker(cfg)
            zlw = m.submodules.zf_loss = ZeroFreeLossWalker(cfg)
            for rp, a, b, c in ((x_rp, zf.x_mem, feeder.sram, zlw.x_mem),
                                (w_rp, zf.dy_mem, fetch.mem, zlw.w_mem)):
                m.d.comb += [rp.addr.eq(Mux(lmode, c.addr, Mux(zmode, a.addr, b.addr))),
                             rp.en.eq(Mux(lmode, c.en, Mux(zmode, a.en, b.en))),
                             a.data.eq(rp.data), b.data.eq(rp.data), c.data.eq(rp.data)]
            s.zf, s.zlw = zf, zlw
        else:
            wiring.connect(m, feeder.sram, x_rp)
            wiring.connect(m, fetch.mem, w_rp)
        if self.has_cf:            # the channel-first front end reads W through the same port
            m.d.comb += self.cfw_data.eq(w_rp.data)
            with m.If(self.cfw_sel):
                m.d.comb += [w_rp.addr.eq(self.cfw_addr), w_rp.en.eq(self.cfw_en)]
        if self.shared_array:
            arr = self.array
        else:
            arr = m.submodules.array = SystolicArray(cfg)
        m.d.comb += arr.dataflow.eq(Dataflow.OS)
        s.feeder, s.fetch, s.zmode, s.lmode, s.x_rp, s.w_rp, s.arr = (
            feeder, fetch, zmode, lmode, x_rp, w_rp, arr)

    def _setup_products(self, m, s):
        """Setup: products on one shared multiplier, three cycles each (operands registered,
        the product registered, then saturated into its register), saturated at ``pw`` bits: W words past the buffer are refused
        anyway, and the spans of a layer the feeder accepts fit its padded input; ``refused``
        (registered: ``wwords`` is set up six cycles before CHECK). Sets ``s.products``,
        ``s.crs``, ``s.span_w_m1``, ``s.span_h_m1``, ``s.setup_idx``, ``s.setup_mul`` and
        ``s.refused``."""
        cfg, dim, lay, state = self.config, s.dim, s.lay, s.state
        C = cfg.cols
        ktiles = Signal(dim + 1)
        if C & (C - 1) == 0:
            m.d.sync += ktiles.eq((lay.out_channels + (C - 1)) >> ceil_log2(C))
        else:
            m.d.sync += ktiles.eq((lay.out_channels + (C - 1)) // C)
        pw = max(cfg.buf_b_depth.bit_length() + 1, dim + 2)
        rs_k, crs, wwords, span_w_m1, span_h_m1 = (
            Signal(pw, name=n) for n in ("rs_k", "crs", "wwords", "span_w_m1", "span_h_m1"))
        products = [
            (rs_k, lay.kernel_h, lay.kernel_w),
            (crs, lay.channels, rs_k),
            (wwords, ktiles, crs),
            (span_w_m1, lay.kernel_w - 1, lay.dil_w),
            (span_h_m1, lay.kernel_h - 1, lay.dil_h),
        ]
        mul_a, mul_b = Signal(dim + 1), Signal(pw)
        mul_p = Signal(dim + 1 + pw)
        m.d.sync += mul_p.eq(mul_a * mul_b)
        saturated = Mux(mul_p[pw:].any(), (1 << pw) - 1, mul_p[:pw])
        setup_idx = Signal(range(len(products)))
        setup_mul = Signal(range(3))          # a product's cycle: operands, product, result
        for i, (dest, a, b) in enumerate(products):
            with m.If((state == ConvState.SETUP) & (setup_idx == i)):
                with m.If(setup_mul == 2):
                    m.d.sync += dest.eq(saturated)
                with m.Elif(setup_mul == 0):
                    m.d.sync += [mul_a.eq(a), mul_b.eq(b)]

        w_end = Signal(pw + 1)
        m.d.comb += w_end.eq(lay.w_base + wwords)
        refused = Signal()          # registered: wwords is set up six cycles before CHECK
        m.d.sync += refused.eq((lay.out_channels == 0) | (w_end > cfg.buf_b_depth))
        s.products, s.crs, s.span_w_m1, s.span_h_m1 = products, crs, span_w_m1, span_h_m1
        s.setup_idx, s.setup_mul, s.refused = setup_idx, setup_mul, refused

    def _drain_geometry(self, m, s):
        """Geometry of the drain side (valid once the feeder has accepted the layer),
        registered from the layer and the spans (set up before CHECK, used from the drain
        on). Sets ``s.sc`` (its signed shape), ``s.rs``, ``s.lim_x``, ``s.rs_m_s``,
        ``s.lim_xm``, ``s.lim_ym``, ``s.batch_m1`` and ``s.k_last``."""
        dim, cw, lay, R, C = s.dim, s.cw, s.lay, self.config.rows, self.config.cols
        sc = signed(cw + 2)
        rs = Signal(cw)                       # rows * s_w: x step between contexts
        lim_x, lim_y = Signal(sc), Signal(sc)  # last output pixel's x / y in padded coordinates
        # ... and the drain's end-of-row / column / image / block tests as compares of registers
        rs_m_s, lim_xm, lim_ym = Signal(sc), Signal(sc), Signal(sc)
        batch_m1, k_last = Signal(dim), Signal(signed(dim + 2))
        m.d.sync += [
            rs.eq(lay.stride_w * R),
            lim_x.eq(lay.width + 2 * lay.pad_w - s.span_w_m1 - 1),
            lim_y.eq(lay.height + lay.pad_h + lay.pad_bottom - s.span_h_m1 - 1),
            rs_m_s.eq(rs - lay.stride_w), lim_xm.eq(lim_x - lay.stride_w),
            lim_ym.eq(lim_y - lay.stride_h), batch_m1.eq(lay.batch - 1),
            k_last.eq(lay.out_channels - C),
        ]
        s.sc, s.rs, s.lim_x, s.rs_m_s, s.lim_xm, s.lim_ym = sc, rs, lim_x, rs_m_s, lim_xm, lim_ym
        s.batch_m1, s.k_last = batch_m1, k_last

    def _issue(self, m, s):
        """Issue: feeder vector e + W word e (or a walker's vector) -> array edge
        (registered), a context's last vector held back until the array's context gap has
        passed. Sets ``s.fv``, ``s.take``, ``s.src_valid``, ``s.src_last``, ``s.allow``,
        ``s.gap``, ``s.walker_mode`` and ``s.misaligned``."""
        R, C, op, G = self.config.rows, self.config.cols, s.op, s.G
        feeder, arr, state = s.feeder, s.arr, s.state
        # the feeder's vectors through a register slice: its FIFOs advance on a registered
        # ready (the W words stay direct: a tile's start drops the fetcher's word ahead)
        fskid = m.submodules.feeder_skid = SkidBuffer(feeder.feed.payload.shape())
        wiring.connect(m, feeder.feed, fskid.i)
        fv, bv = fskid.o, s.fetch.b
        a_r = Signal(data.ArrayLayout(op, R))
        b_r = Signal(data.ArrayLayout(op, C))
        iv = Signal()
        il = Signal()
        # cycles since a_last was presented, up to the array's context gap (2R; 2R + 5 in
        # floating point)
        gap, may_end = context_spacing(m, iv & il, G)
        allow = Signal()
        take = Signal()
        src_valid, src_last = Signal(), Signal()
        src_a = Signal(data.ArrayLayout(op, R))
        src_b = Signal(data.ArrayLayout(op, C))
        m.d.comb += [src_valid.eq(fv.valid & bv.valid), src_last.eq(fv.p.last),
                     src_a.eq(fv.p.data), src_b.eq(bv.p.data)]
        if self.has_zf:
            self._walker_feeds(m, s, src_valid, src_last, src_a, src_b)
        walker_mode = s.zmode | s.lmode
        m.d.comb += [
            allow.eq(~src_last | may_end),
            take.eq((state == ConvState.RUN) & src_valid & allow),
            fv.ready.eq(take & ~walker_mode), bv.ready.eq(take & ~walker_mode),
        ]
        if self.has_zf:
            m.d.comb += [s.zfeed.ready.eq(take & s.zmode), s.lfeed.ready.eq(take & s.lmode)]
        m.d.sync += [iv.eq(take), il.eq(take & src_last)]
        with m.If(take):
            m.d.sync += [a_r.eq(src_a), b_r.eq(src_b)]
        m.d.comb += [arr.a_data.eq(a_r), arr.a_valid.eq(iv), arr.a_last.eq(il),
                     arr.b_valid.eq(iv)]
        for j in range(C):
            m.d.comb += arr.b_data[j].eq(b_r[j])
        m.d.comb += arr.chain_shift.eq(state == ConvState.PRIME)   # preload is 0
        misaligned = take & ~walker_mode & (fv.p.last != bv.p.last)
        s.fv, s.take, s.src_valid, s.src_last, s.allow, s.gap = (fv, take, src_valid, src_last,
                                                                 allow, gap)
        s.walker_mode, s.misaligned = walker_mode, misaligned

    def _walker_feeds(self, m, s, src_valid, src_last, src_a, src_b):
        """The walkers' feeds through register slices (their pipelines advance on a ready
        from a register, not on this engine's issue logic), the issue's source in their
        modes. Sets ``s.zfeed`` and ``s.lfeed``."""
        zf, zlw = s.zf, s.zlw
        zskid = m.submodules.zf_gradient_skid = SkidBuffer(zf.feed.payload.shape())
        lskid = m.submodules.zf_loss_skid = SkidBuffer(zlw.feed.payload.shape())
        wiring.connect(m, zf.feed, zskid.i)
        wiring.connect(m, zlw.feed, lskid.i)
        zfeed, lfeed = zskid.o, lskid.o
        with m.If(s.zmode):
            m.d.comb += [src_valid.eq(zfeed.valid), src_last.eq(zfeed.p.last),
                         src_a.eq(zfeed.p.a), src_b.eq(zfeed.p.b)]
        with m.If(s.lmode):
            m.d.comb += [src_valid.eq(lfeed.valid), src_last.eq(lfeed.p.last),
                         src_a.eq(lfeed.p.a), src_b.eq(lfeed.p.b)]
        s.zfeed, s.lfeed = zfeed, lfeed

    def _drain(self, m, s):
        """Drain: the position of every drained row, and ``y``. Sets ``s.dk0``, ``s.dn``,
        ``s.doh``, ``s.dow0``, ``s.dcy``, ``s.xfirst`` and ``s.drained_all``."""
        R, C, dim, cw, sc = self.config.rows, self.config.cols, s.dim, s.cw, s.sc
        arr, lay = s.arr, s.lay
        dk0, dn, doh, dow0 = (Signal(dim, name=f"drain_{k}") for k in ("k0", "n", "oh", "ow0"))
        dcy = Signal(cw)                      # output row y (oh * s_h)
        xfirst = Signal(sc)                   # x of the context's first drained row: ow0 s_w +
        xrow = Signal(sc)                     # (R - 1) s_w
        xr = Signal(sc)                       # x of the drained row's pixel
        drained_all = Signal()
        first = arr.drain_row == R - 1
        m.d.comb += xr.eq(Mux(first, xfirst, xrow))
        with m.If(arr.drain_valid):
            m.d.sync += xrow.eq(xr - lay.stride_w)
        y = self.y
        m.d.comb += [
            y.valid.eq(arr.drain_valid & (xr <= s.lim_x) & ~s.walker_mode),
            y.payload.data.eq(arr.drain_data), y.payload.n.eq(dn), y.payload.k0.eq(dk0),
            y.payload.oh.eq(doh), y.payload.ow0.eq(dow0), y.payload.row.eq(arr.drain_row),
        ]
        with m.If(arr.drain_valid & (arr.drain_row == 0)):
            with m.If(xfirst > s.lim_xm):      # the next context's x, xfirst + s_w, is past
                m.d.sync += [xfirst.eq(s.rs_m_s), dow0.eq(0)]
                with m.If(dcy > s.lim_ym):
                    m.d.sync += [dcy.eq(0), doh.eq(0)]
                    with m.If(dn >= s.batch_m1):
                        m.d.sync += [dn.eq(0), dk0.eq(dk0 + C)]
                        with m.If(dk0 >= s.k_last):
                            m.d.sync += drained_all.eq(1)
                    with m.Else():
                        m.d.sync += dn.eq(dn + 1)
                with m.Else():
                    m.d.sync += [dcy.eq(dcy + lay.stride_h), doh.eq(doh + 1)]
            with m.Else():
                m.d.sync += [xfirst.eq(xfirst + s.rs), dow0.eq(dow0 + R)]
        s.dk0, s.dn, s.doh, s.dow0, s.dcy, s.xfirst = dk0, dn, doh, dow0, dcy, xfirst
        s.drained_all = drained_all

    def _zf_gradient_drain(self, m, s):
        """Zero-free gradient drain: the P offset of every drained row
        (:func:`~bpsa.gateware.frontends.zero_free.gradient.drain_offsets`; ``s.zload`` loads
        the run). Sets ``s.zload`` and ``s.zdrained_all``."""
        arr, zmode = s.arr, s.zmode
        zload = Signal()
        addr, keep, zdrained_all = drain_offsets(
            m, self.config, zload, self.zg_layer, arr.drain_valid & zmode & (arr.drain_row == 0),
            1, arr.drain_row)
        zg = self.zg
        m.d.comb += [zg.valid.eq(arr.drain_valid & zmode & keep),
                     zg.payload.data.eq(arr.drain_data), zg.payload.addr.eq(addr)]
        s.zload, s.zdrained_all = zload, zdrained_all

    def _zf_loss_drain(self, m, s):
        """Zero-free loss drain: the walker's tags give each drained row's P offset; the
        contexts issued and drained are counted (the run ends when they meet). Sets
        ``s.lctx``, ``s.l_issued`` and ``s.l_drained``."""
        arr, lmode, zlw = s.arr, s.lmode, s.zlw
        lctx = Signal(range(TAG_SLOTS))   # tag slot of the draining context
        l_issued, l_drained = Signal(32), Signal(32)
        zlo = self.zl
        m.d.comb += [zlw.tag_ctx.eq(lctx), zlw.tag_row.eq(arr.drain_row),
                     zlo.valid.eq(arr.drain_valid & lmode & zlw.tag.ok),
                     zlo.payload.data.eq(arr.drain_data),
                     zlo.payload.addr.eq(zlw.tag.addr)]
        l_ctx_end = arr.drain_valid & lmode & (arr.drain_row == 0)
        m.d.comb += zlw.ctx_done.eq(l_ctx_end)
        with m.If(l_ctx_end):
            m.d.sync += [lctx.eq(lctx + 1), l_drained.eq(l_drained + 1)]
        with m.If(s.take & s.src_last & lmode):
            m.d.sync += l_issued.eq(l_issued + 1)
        s.lctx, s.l_issued, s.l_drained = lctx, l_issued, l_drained

    def _counters(self, m, s):
        """The counters. Sets ``s.cnt`` (the outputs by name), ``s.incs`` (the counts kept
        here, by name: cleared at a start), ``s.folded``, ``s.fbase`` and ``s.fused`` (the
        feeder's counters, which it clears at every start, folded into bases)."""
        feeder, arr = s.feeder, s.arr
        cnt = {name: getattr(self, name) for name in COUNTERS}
        # The feeder clears its counters at every start (every tile): fold them into bases.
        folded = ("stall_cycles", "fifo_stall_cycles")
        fbase = {name: Signal(COUNTER_WIDTH, name=f"{name}_base") for name in folded}
        fused = Signal()
        for name in folded:
            m.d.comb += cnt[name].eq(fbase[name] + Mux(fused, getattr(feeder, name), 0))
        array_counts = {"array_cycles": arr.cycles, "fired": arr.fired, "gated": arr.gated,
                        "drained": arr.drained}
        for name, value in array_counts.items():
            m.d.comb += cnt[name].eq(value)
        # the buffers' read enables end long paths (the fetcher's start, the walkers'
        # addresses): counted a cycle late, from registers (the reads end before the drain)
        ev_x, ev_w = Signal(), Signal()
        m.d.sync += [ev_x.eq(s.x_rp.en), ev_w.eq(s.w_rp.en)]
        incs = {
            "cycles": self.busy,
            "words_read": ev_x,
            "w_words_read": ev_w,
            "vectors": s.take,
            "gap_cycles": (s.state == ConvState.RUN) & s.src_valid & ~s.allow,
            "y_vectors": self.y.valid,
        }
        with m.If(self.busy):
            for name, inc in incs.items():
                m.d.sync += cnt[name].eq(cnt[name] + inc)
        s.cnt, s.incs, s.folded, s.fbase, s.fused = cnt, incs, folded, fbase, fused

    def _start_feeder(self, m, s, base):
        """Start the feeder and the fetcher on the tile whose W words start at ``base``."""
        feeder, fetch, fused, fbase = s.feeder, s.fetch, s.fused, s.fbase
        m.d.comb += [feeder.start.eq(1), fetch.start.eq(1), fetch.base.eq(base),
                     fetch.length.eq(s.crs)]
        m.d.sync += fused.eq(1)
        for name in s.folded:
            m.d.sync += fbase[name].eq(fbase[name]
                                       + Mux(fused, getattr(feeder, name), 0))

    def _control(self, m, s):
        """The control: its registers, the error latch and the states (IDLE, SETUP, CHECK,
        PRIME, RUN, DRAIN). The next tile's first channel and W base, and whether it exists,
        are kept in registers a tile ahead (the feeder's set-up leaves many cycles between a
        start and the next). Sets ``s.k_next``, ``s.base_next``, ``s.more``, ``s.prime``,
        ``s.err`` and ``s.done``."""
        cfg, dim, arr, state = self.config, s.dim, s.arr, s.state
        R = cfg.rows
        k_next = Signal(dim + 2)
        base_next = Signal(_waddr_width(cfg) + 1)
        more = Signal()
        m.d.sync += more.eq(k_next < s.lay.out_channels)
        prime = Signal(range(R))
        err = Signal()
        done = Signal()
        m.d.comb += [self.busy.eq(state != ConvState.IDLE), self.error.eq(err),
                     self.done.eq(done)]
        running = (state == ConvState.PRIME) | (state == ConvState.RUN) \
            | (state == ConvState.DRAIN)
        with m.If(running & (arr.error | s.misaligned)):
            m.d.sync += err.eq(1)
        s.k_next, s.base_next, s.more, s.prime, s.err, s.done = (k_next, base_next, more, prime,
                                                                 err, done)

        with m.Switch(state):
            with m.Case(ConvState.IDLE):
                self._idle_state(m, s)
            with m.Case(ConvState.SETUP):
                m.d.sync += s.setup_mul.eq(Mux(s.setup_mul == 2, 0, s.setup_mul + 1))
                with m.If(s.setup_mul == 2):
                    m.d.sync += s.setup_idx.eq(s.setup_idx + 1)
                    with m.If(s.setup_idx == len(s.products) - 1):
                        m.d.sync += state.eq(ConvState.CHECK)
            with m.Case(ConvState.CHECK):
                self._check_state(m, s)
            with m.Case(ConvState.PRIME):
                m.d.sync += prime.eq(prime + 1)
                with m.If(prime == R - 1):
                    m.d.sync += state.eq(ConvState.RUN)
            with m.Case(ConvState.RUN):
                self._run_state(m, s)
            with m.Case(ConvState.DRAIN):
                with m.If(Mux(s.lmode, s.l_issued == s.l_drained,
                              Mux(s.zmode, s.zdrained_all, s.drained_all)) if self.has_zf
                          else s.drained_all):
                    m.d.sync += [done.eq(1), state.eq(ConvState.IDLE)]

    def _idle_state(self, m, s):
        """State IDLE: a forward run's start (its descriptor, then SETUP) or, with the
        ``zero_free`` mode, a walker run's (its walker started, the array cleared, then
        PRIME); the counters are cleared."""
        state, err, done, fused, zmode, lmode = s.state, s.err, s.done, s.fused, s.zmode, s.lmode
        cnt, incs, fbase, folded = s.cnt, s.incs, s.fbase, s.folded
        with m.If(self.start):
            m.d.sync += [s.lay.eq(self.layer), s.setup_idx.eq(0), s.setup_mul.eq(0),
                         err.eq(0), done.eq(0),
                         fused.eq(0), zmode.eq(0), lmode.eq(0),
                         state.eq(ConvState.SETUP)]
            m.d.sync += [cnt[name].eq(0) for name in incs]
            m.d.sync += [fbase[name].eq(0) for name in folded]
        if self.has_zf:
            with m.Elif(self.zg_start):
                zlay = self.zg_layer
                m.d.comb += [s.zf.start.eq(1), s.zf.layer.eq(zlay), s.arr.clear.eq(1),
                             s.zload.eq(1)]
                m.d.sync += [err.eq(0), done.eq(0), fused.eq(0), zmode.eq(1),
                             lmode.eq(0),
                             s.prime.eq(0), s.gap.eq(s.G), state.eq(ConvState.PRIME)]
                m.d.sync += [cnt[name].eq(0) for name in incs]
                m.d.sync += [fbase[name].eq(0) for name in folded]
            with m.Elif(self.zl_start):
                m.d.comb += [s.zlw.start.eq(1), s.zlw.layer.eq(self.zl_layer),
                             s.arr.clear.eq(1)]
                m.d.sync += [s.lctx.eq(0), s.l_issued.eq(0), s.l_drained.eq(0),
                             err.eq(0), done.eq(0), fused.eq(0), zmode.eq(0),
                             lmode.eq(1), s.prime.eq(0), s.gap.eq(s.G),
                             state.eq(ConvState.PRIME)]
                m.d.sync += [cnt[name].eq(0) for name in incs]
                m.d.sync += [fbase[name].eq(0) for name in folded]

    def _check_state(self, m, s):
        """State CHECK: a refused layer ends with ``error``; else the first tile starts, the
        drain's position is reset and the reserve chains are zeroed (PRIME)."""
        lay, state = s.lay, s.state
        with m.If(s.refused):
            m.d.sync += [s.err.eq(1), s.done.eq(1), state.eq(ConvState.IDLE)]
        with m.Else():
            self._start_feeder(m, s, lay.w_base)
            m.d.comb += s.arr.clear.eq(1)
            m.d.sync += [
                s.prime.eq(0), s.gap.eq(s.G),
                s.k_next.eq(self.config.cols), s.base_next.eq(lay.w_base + s.crs),
                s.dk0.eq(0), s.dn.eq(0), s.doh.eq(0), s.dow0.eq(0), s.xfirst.eq(s.rs_m_s),
                s.dcy.eq(0),
                s.drained_all.eq(0), state.eq(ConvState.PRIME),
            ]

    def _run_state(self, m, s):
        """State RUN: a walker run drains once its walker and feed are empty; a forward run
        starts the next tile when the feeder is done with one (or ends: refused by the
        feeder, or the last tile)."""
        state, C = s.state, self.config.cols
        if self.has_zf:
            with m.If(s.zmode & ~s.zf.busy & ~s.zfeed.valid
                      | s.lmode & ~s.zlw.busy & ~s.lfeed.valid):
                m.d.sync += state.eq(ConvState.DRAIN)
        with m.If(~s.feeder.busy & ~s.fv.valid & ~s.walker_mode):
            with m.If(s.feeder.error):
                m.d.sync += [s.err.eq(1), s.done.eq(1), state.eq(ConvState.IDLE)]
            with m.Elif(s.more):
                self._start_feeder(m, s, s.base_next)
                m.d.sync += [s.k_next.eq(s.k_next + C), s.base_next.eq(s.base_next + s.crs)]
            with m.Else():
                m.d.sync += state.eq(ConvState.DRAIN)
