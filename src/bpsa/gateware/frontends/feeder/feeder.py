"""The data feeder: on-the-fly im2col for the output-stationary forward convolution.

Source: Fornt et al., Sec. II-B and Figs. 3-4. The input feature map X (N x C x H x W) sits in an
SRAM of ``B = feeder_bus_width`` elements per word, flattened ``[N, C, Y, X]`` (X contiguous)
from element address ``base``; no im2col matrix and no padding zero is ever stored.

Mapping onto the array (``R = rows`` feed lanes, lane ``i`` feeds array row ``i``)
    Output pixels are taken in the order ``(n, oh, ow)``. One *context* holds ``R``
    consecutive pixels ``ow0 .. ow0+R-1`` of one output row ``(n, oh)``; lane ``i`` computes
    pixel ``ow0 + i``. A row's contexts start at ``ow0 = 0`` (the first context of a run at
    ``ctx_ow``) and step by ``R``, so the last context of a row may have lanes past ``OW - 1``:
    those lanes are *masked* (mask bit 0, elements 0). Over one context every lane receives its
    pixel's im2col row: ``X[n, c, oh*s + r*d - p, ow*s + q*d - p]`` (0 in the padding) for
    ``c``, then ``r``, then ``q`` (the order of the columns of
    :func:`bpsa.models.golden.lower_forward`), ``C*R*S`` elements.

Pieces (each a small component)
    :class:`StepCounter` one counter with a coordinate and a pointer step and a limit (the
    plain form of the counters);
    :class:`IndexCounters` six counters: the paper's five (x, y, channel over the interest
    region; x, y moving the region) and an image counter after the region's y (the batch), the
    pointer split into SRAM word address and global word offset; pipelined for one word a
    cycle (registered ``last`` flags, a pointer register per level, rows through pipeline
    registers to the word counter), steps presented from registers;
    :class:`KernelPatternShifter` the kernel pattern shifted by a lane's word offset (the
    counters present every lane's shift amount with each step);
    :class:`FeedLane` selection into M intermediate registers, pushed as one FIFO entry when
    full or when they hold the context's last element (entries never straddle contexts, so the
    entries of all lanes stay aligned: entry ``k`` of a context holds elements ``kM ..
    kM+M-1`` in every lane); made of :class:`LaneSelect` (the pattern's shift),
    :class:`LaneTaps` (the first selected position and their count) and
    :class:`LaneRegisters` (each register addresses the word at ``first + rank * d``);
    :class:`DataFeeder` setup of a layer descriptor, the pipeline (counters; stage 0: step,
    every lane's shifted pattern, SRAM address; stage 1: data word, every lane's first
    selected position and count, and the lanes), lane FIFOs and the lane-aligned output
    stream.

Differences from the paper
    The feed registers do not skew the rows: the output is lane-aligned (the array skews
    internally). Words that hold no element of an active lane inside the tensor (padding rows
    and columns) are stepped over without an SRAM read; their elements are zeros made here.
    Lanes past the end of an output row still select (so that all lanes stay in step) but are
    masked at the output.
"""

from types import SimpleNamespace

from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value, signed, unsigned
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.memory import ReadPort
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2, exact_log2

from bpsa.config import require_config
from bpsa.gateware.array.arith import arith_for

__all__ = [
    "LAYER_FIELDS", "layer_layout", "entry_layout", "feed_layout", "counter_setup_layout",
    "step_layout", "check_layer", "layer_value", "counter_setup", "FeederState",
    "StepCounter", "IndexCounters", "KernelPatternShifter", "LaneSelect", "LaneTaps",
    "LaneRegisters", "FeedLane", "DataFeeder",
]

#: Fields of the layer descriptor (:func:`layer_layout`), also the attribute names that
#: :func:`check_layer` reads (``bpsa.models.feeder_model.FeederDescriptor`` has exactly these).
LAYER_FIELDS = ("batch", "channels", "height", "width", "kernel_h", "kernel_w",
                "stride_h", "stride_w", "pad_h", "pad_w", "dil_h", "dil_w",
                "base", "ctx_n", "ctx_oh", "ctx_ow", "ctx_count", "pad_bottom")

_SHAPE_FIELDS = LAYER_FIELDS[:12] + ("ctx_n", "ctx_oh", "ctx_ow", "pad_bottom")
_NONZERO_FIELDS = ("batch", "channels", "height", "width", "kernel_h", "kernel_w",
                   "stride_h", "stride_w", "dil_h", "dil_w")


# --- widths and layouts --------------------------------------------------------------------

def addr_width(config):
    """Bits of an SRAM word address (the SRAM is ``buf_a_depth`` words deep)."""
    return ceil_log2(config.buf_a_depth)


def ptr_width(config):
    """Bits of an element address; pointer arithmetic is modulo ``2**ptr_width``."""
    return addr_width(config) + exact_log2(config.feeder_bus_width)


def coord_width(config):
    """Bits of the (signed) coordinates and counter values: room for ``rows * 2**dim_width``
    plus padding and the pattern width."""
    return config.dim_width + ceil_log2(config.rows + 1) + 4


def _counter_widths(config):
    """Bits ``(uw, sw)`` of the :class:`IndexCounters`' internal unsigned and signed values.

    The counters run only layers that :func:`check_layer` accepts (the :class:`DataFeeder`
    starts them after its legality check), whose values are bounded by the configuration.
    With ``M = 2**dim_width - 1``, ``R`` rows, ``PW = feeder_pattern_width`` and ``B =
    feeder_bus_width``:

    * unsigned values are at most ``U = max(3M, R*M, (R-1)*M + PW)``: ``span_all = (R-1)*s_w
      + span_w <= (R-1)*M + PW`` (``span_w <= PW``), ``cx_step = R*s_w <= R*M``, the limits
      (``y_limit = span_h - 1 < H + p_h + p_bottom <= 3M``, ``cx_limit = W + 2p_w - span_w <
      3M``, ``cy_limit < 3M``, ``c_limit``, ``n_limit < M``) and the rooms and inits (at most
      their limits), the steps ``d_h``, ``s_h <= M``, ``lane_off <= (R-1)*M``, ``lane_end <=
      span_all`` and a row's word count ``<= span_all``;
    * signed values are within ``[-S, S]``, ``S = (R+3)*M + PW + 2B``: ``x0 = cx - p_w`` in
      ``[-M, 3M]``, ``yrow`` and ``ybase`` in ``[-M, 3M]``, the window ends (``a_hw = W - x0
      >= span_w - p_w``, ``b_end <= span_all + B``), the word counter's values (``goff -
      k*B``, the window ends less ``k*B`` with ``k*B <= goff + span_all - 1``) and a lane's
      offset plus ``PW`` (``<= B + (R-1)*M + PW``).

    Neither is wider than the layouts' :func:`coord_width` (and ``+ 2`` for the signed
    values) that the counters used before: a configuration where the bound needs more keeps
    those widths, values identical."""
    big = (1 << config.dim_width) - 1
    r_n, pwid, bw = config.rows, config.feeder_pattern_width, config.feeder_bus_width
    u = max(3 * big, r_n * big, (r_n - 1) * big + pwid)
    s = (r_n + 3) * big + pwid + 2 * bw
    cw = coord_width(config)
    return min(u.bit_length(), cw), min(s.bit_length() + 1, cw + 2)


#: The :func:`counter_setup_layout` fields of ``coord_width`` bits (the lane arrays included).
_COORD_SETUP_FIELDS = ("span_all", "span_w", "y_limit", "cx_step", "cx_limit", "cy_limit",
                       "cx_init", "cy_init", "lane_off", "lane_end")


def _narrow_setup(setup, uw):
    """The fields of a :func:`counter_setup_layout` value with the coordinate fields cut to
    ``uw`` bits (:func:`_counter_widths`: no legal value needs more)."""
    fields = {}
    for name, shape in setup.shape().members.items():
        value = getattr(setup, name)
        if name in ("lane_off", "lane_end"):
            fields[name] = [value[i][:uw] for i in range(shape.length)]
        elif name in _COORD_SETUP_FIELDS:
            fields[name] = value[:uw]
        else:
            fields[name] = value
    return SimpleNamespace(**fields)


def layer_layout(config):
    """Layout of the layer descriptor (``FeederLayer``).

    All fields unsigned. ``batch`` .. ``dil_w``, ``ctx_n``, ``ctx_oh``, ``ctx_ow`` and
    ``pad_bottom``: ``dim_width`` bits. ``pad_h`` pads the top of the input, ``pad_bottom`` its
    bottom (asymmetric padding; the Python helpers take ``pad_bottom = pad_h`` when it is
    missing), so ``OH = (H + pad_h + pad_bottom - d_h(R-1) - 1) // s_h + 1``. ``base``: element
    address of ``X[0, 0, 0, 0]`` (``log2(buf_a_depth *
    feeder_bus_width)`` bits). ``ctx_count``: ``2 * dim_width`` bits, 0 means "to the end of
    the layer".
    """
    dim = unsigned(config.dim_width)
    fields = {name: dim for name in _SHAPE_FIELDS}
    fields["base"] = unsigned(ptr_width(config))
    fields["ctx_count"] = unsigned(2 * config.dim_width)
    return data.StructLayout({name: fields[name] for name in LAYER_FIELDS})


def entry_layout(config):
    """Layout of one lane FIFO entry: ``data`` (M elements), ``count`` (1..M elements valid,
    from index 0), ``last`` (the entry ends a context), ``active`` (the lane's pixel exists)."""
    op = arith_for(config).operand_shape
    m = config.feeder_lane_regs
    return data.StructLayout({
        "data": data.ArrayLayout(op, m), "count": unsigned(ceil_log2(m + 1)),
        "last": unsigned(1), "active": unsigned(1),
    })


def feed_layout(config):
    """Payload of the feeder's output stream: one element for every lane.

    ``data[i]``: lane ``i``'s element (0 when masked); ``mask`` bit ``i``: lane ``i``'s pixel
    exists in this context; ``last``: the vector is the context's last (element ``C*R*S-1``).
    """
    op = arith_for(config).operand_shape
    return data.StructLayout({
        "data": data.ArrayLayout(op, config.rows), "mask": unsigned(config.rows),
        "last": unsigned(1),
    })


def counter_setup_layout(config):
    """Per-layer values of :class:`IndexCounters`, derived from the descriptor by
    :func:`counter_setup` (Python) or the :class:`DataFeeder`'s setup (hardware)."""
    cw, pw, dim = coord_width(config), ptr_width(config), config.dim_width
    cu, pu, du = unsigned(cw), unsigned(pw), unsigned(dim)
    return data.StructLayout({
        "span_all": cu,      # (R-1)*s_w + (S-1)*d_w + 1: columns of an interest-region row
        "span_w": cu,        # (S-1)*d_w + 1
        "stride_w": du,      # local offset step between lanes
        "y_step": du, "y_limit": cu, "y_pstep": pu,           # d_h; (R-1)*d_h; d_h*W
        "c_limit": du, "c_pstep": pu,                         # C-1; H*W
        "cx_step": cu, "cx_limit": cu,                        # rows*s_w; W + 2p_w - span_w
        "cy_step": du, "cy_limit": cu, "cy_pstep": pu,        # s_h; H + p_h + p_bottom - span_h; s_h*W
        "n_limit": du, "n_pstep": pu,                         # N-1; C*H*W
        "ptr0": pu,                                           # base - p_h*W - p_w
        "pad_h": du, "pad_w": du, "height": du, "width": du,
        "cx_init": cu, "cy_init": cu, "cy_pinit": pu,         # ow0*s_w; oh0*s_h; oh0*s_h*W
        "n_init": du, "n_pinit": pu,                          # n0; n0*C*H*W
        "ctx_count": unsigned(2 * dim),
        "lane_off": data.ArrayLayout(cu, config.rows),   # i*s_w, lane i's local offset
        "lane_end": data.ArrayLayout(cu, config.rows),   # i*s_w + span_w
    })


def step_layout(config):
    """One step of :class:`IndexCounters`: one SRAM word of an interest-region row.

    ``addr``: word address (meaningful when ``read``); ``goff``: global word offset;
    ``offset``: lane 0's word offset, ``goff - k*B`` for the ``k``-th word of the row (lane
    ``i`` adds ``i*s_w``); ``read``: the word holds data of an active lane and is read;
    ``lo``, ``hi``: positions ``[lo, hi)`` of the word hold real data, the rest is padding
    (both 0 when not read); ``row_last``, ``ctx_last_row`` (last channel and kernel row),
    ``ctx_last``, ``last`` (of the run); ``active``: the context's lane mask.
    """
    bw = config.feeder_bus_width
    return data.StructLayout({
        "addr": unsigned(addr_width(config)), "goff": unsigned(exact_log2(bw)),
        "offset": signed(coord_width(config)), "read": unsigned(1),
        "lo": unsigned(ceil_log2(bw + 1)), "hi": unsigned(ceil_log2(bw + 1)),
        "row_last": unsigned(1), "ctx_last_row": unsigned(1), "ctx_last": unsigned(1),
        "last": unsigned(1), "active": unsigned(config.rows),
    })


# --- the Python view: checks and derived values ----------------------------------------------

def _fields(layer):
    if isinstance(layer, dict):
        get = layer.get
    else:
        def get(name):
            return getattr(layer, name, None)
    values = {}
    for name in LAYER_FIELDS:
        v = get(name)
        if v is None and name in ("pad_h", "pad_w", "base", "ctx_n", "ctx_oh", "ctx_ow",
                                  "ctx_count"):
            v = 0
        if v is None and name == "pad_bottom":
            v = values["pad_h"]
        if isinstance(v, bool) or not isinstance(v, int):
            raise ValueError(f"layer field {name} must be an integer, not {v!r}")
        values[name] = v
    return values


def check_layer(config, layer):
    """Raise :exc:`ValueError` with the reason when the feeder generated for ``config`` cannot
    run ``layer`` (an object with the attributes :data:`LAYER_FIELDS`, or a dict; missing
    ``pad_*``, ``base`` and ``ctx_*`` mean 0). The hardware refuses the same descriptors with
    its ``error`` output, except those whose values do not fit the descriptor's fields."""
    f = _fields(layer)
    layout = layer_layout(config)
    for name in LAYER_FIELDS:
        width = layout.members[name].width
        if not 0 <= f[name] < 1 << width:
            raise ValueError(f"layer field {name} must be in [0, {(1 << width) - 1}] "
                             f"({width} bits), not {f[name]}")
    for name in _NONZERO_FIELDS:
        if f[name] == 0:
            raise ValueError(f"layer field {name} must be at least 1, not 0")
    span_w = (f["kernel_w"] - 1) * f["dil_w"] + 1
    span_h = (f["kernel_h"] - 1) * f["dil_h"] + 1
    if span_w > config.feeder_pattern_width:
        raise ValueError(
            f"kernel width {f['kernel_w']} with dilation {f['dil_w']} spans {span_w} columns, "
            f"more than feeder_pattern_width {config.feeder_pattern_width}")
    padded_h = f["height"] + f["pad_h"] + f["pad_bottom"]
    if span_h > padded_h or span_w > f["width"] + 2 * f["pad_w"]:
        raise ValueError(
            f"dilated kernel {span_h} x {span_w} does not fit the padded input "
            f"{padded_h} x {f['width'] + 2 * f['pad_w']}")
    size = f["batch"] * f["channels"] * f["height"] * f["width"]
    capacity = config.buf_a_depth * config.feeder_bus_width
    if f["base"] + size > capacity:
        raise ValueError(f"X ({size} elements from element {f['base']}) does not fit the "
                         f"SRAM of {capacity} elements")
    oh_n = (padded_h - span_h) // f["stride_h"] + 1
    ow_n = (f["width"] + 2 * f["pad_w"] - span_w) // f["stride_w"] + 1
    if f["ctx_n"] >= f["batch"] or f["ctx_oh"] >= oh_n or f["ctx_ow"] >= ow_n:
        raise ValueError(f"first context (n, oh, ow) = ({f['ctx_n']}, {f['ctx_oh']}, "
                         f"{f['ctx_ow']}) is outside the output ({f['batch']}, {oh_n}, {ow_n})")


def layer_value(config, layer):
    """The descriptor value (a dict for ``Simulator.set`` / a ``Const`` of :func:`layer_layout`)
    of a checked layer."""
    check_layer(config, layer)
    return _fields(layer)


def counter_setup(config, layer):
    """The :func:`counter_setup_layout` values of a checked layer, as a dict (the hardware
    derives the same values in its setup)."""
    f = layer_value(config, layer)
    pmask = (1 << ptr_width(config)) - 1
    span_w = (f["kernel_w"] - 1) * f["dil_w"] + 1
    span_h = (f["kernel_h"] - 1) * f["dil_h"] + 1
    h, w = f["height"], f["width"]
    chw = f["channels"] * h * w
    return {
        "span_all": (config.rows - 1) * f["stride_w"] + span_w, "span_w": span_w,
        "stride_w": f["stride_w"],
        "y_step": f["dil_h"], "y_limit": span_h - 1, "y_pstep": (f["dil_h"] * w) & pmask,
        "c_limit": f["channels"] - 1, "c_pstep": (h * w) & pmask,
        "cx_step": config.rows * f["stride_w"], "cx_limit": w + 2 * f["pad_w"] - span_w,
        "cy_step": f["stride_h"], "cy_limit": h + f["pad_h"] + f["pad_bottom"] - span_h,
        "cy_pstep": (f["stride_h"] * w) & pmask,
        "n_limit": f["batch"] - 1, "n_pstep": chw & pmask,
        "ptr0": (f["base"] - f["pad_h"] * w - f["pad_w"]) & pmask,
        "pad_h": f["pad_h"], "pad_w": f["pad_w"], "height": h, "width": w,
        "cx_init": f["ctx_ow"] * f["stride_w"], "cy_init": f["ctx_oh"] * f["stride_h"],
        "cy_pinit": (f["ctx_oh"] * f["stride_h"] * w) & pmask,
        "n_init": f["ctx_n"], "n_pinit": (f["ctx_n"] * chw) & pmask,
        "ctx_count": f["ctx_count"],
        "lane_off": [i * f["stride_w"] for i in range(config.rows)],
        "lane_end": [i * f["stride_w"] + span_w for i in range(config.rows)],
    }


# --- index counters ------------------------------------------------------------------------

class StepCounter(wiring.Component):
    """A counter with a coordinate and a pointer contribution.

    ``value`` takes ``0, step, 2*step, ..`` while it is at most ``limit``, then wraps to 0;
    ``pvalue`` moves with it by ``pstep`` (modulo ``2**pwidth``) and wraps with it.

    Members
    -------
    step, limit, pstep : In
        Static while counting.
    load, init, pinit : In
        ``load`` sets ``value``/``pvalue`` to ``init``/``pinit`` (it has priority over ``en``).
    en : In(1)
        Advance by one step (or wrap).
    value, pvalue : Out
        The registered state.
    last : Out(1)
        Combinational: ``value + step > limit``; with ``en`` the counter wraps.
    """

    def __init__(self, *, width, pwidth):
        if not isinstance(width, int) or width < 1:
            raise TypeError(f"width must be a positive integer, not {width!r}")
        if not isinstance(pwidth, int) or pwidth < 1:
            raise TypeError(f"pwidth must be a positive integer, not {pwidth!r}")
        self.width = width
        self.pwidth = pwidth
        super().__init__({
            "step": In(width), "limit": In(width), "pstep": In(pwidth),
            "load": In(1), "init": In(width), "pinit": In(pwidth), "en": In(1),
            "value": Out(width), "pvalue": Out(pwidth), "last": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        m.d.comb += self.last.eq(self.value + self.step > self.limit)
        with m.If(self.load):
            m.d.sync += [self.value.eq(self.init), self.pvalue.eq(self.pinit)]
        with m.Elif(self.en):
            with m.If(self.last):
                m.d.sync += [self.value.eq(0), self.pvalue.eq(0)]
            with m.Else():
                m.d.sync += [self.value.eq(self.value + self.step),
                             self.pvalue.eq(self.pvalue + self.pstep)]
        return m


def _below(value, step, times=1):
    """``value < times * step``; for a constant power-of-two bound a test of the high bits
    (no comparator)."""
    if isinstance(step, Const):
        assert not Value.cast(value).shape().signed     # (the high bits of an unsigned value)
        bound = step.value * times
        if bound > 0 and bound & (bound - 1) == 0:
            lb = exact_log2(bound)
            return value[lb:] == 0 if lb < len(value) else Const(1, 1)
        return value < bound
    return value < (step << exact_log2(times))


def _one_hot(choices):
    """The value of the one true condition of ``(condition, value)`` pairs (an AND-OR, 0 when
    none is true)."""
    out = 0
    for cond, value in choices:
        out = out | Mux(cond, value, 0)
    return out


class IndexCounters(wiring.Component):
    """The index counters: the sequence of SRAM words of a run, one :func:`step_layout` step
    per advance, presented from registers.

    The counters of the paper, innermost first: ``x`` (``k*B`` along an interest-region row,
    up to the row's last interest element), ``y`` (kernel row ``r*d_h``), ``c`` (channel),
    then ``cx`` (context x, ``ow0*s_w`` by ``R*s_w``), ``cy`` (output row ``oh*s_h``) and
    ``n`` (image) moving the region. With ``ctx_count`` non-zero the run ends after that many
    contexts.

    Built for one row a cycle with short paths: the row counters (all but ``x``) keep each
    ``limit - value`` and their ``last`` flags in registers (the flag of the next value is
    compared when the value is computed), and the pointer as registers, one a level (the
    pointer where the level's counter last moved): a row's pointer is the level's pointer plus
    its step, the level the registered flags select, never a sum of six terms. A row then goes
    through three pipeline registers (word address, global word offset and word count; the
    lane mask and the real-data window) to the word counter (``x``), which writes its words
    into two output registers in turn while they are not both full; ``en`` moves only their
    read pointer and count.

    Latency: the first step is presented 6 cycles after ``start``; then one a cycle while
    ``en`` is high (a step taken in every cycle keeps ``valid`` high to the run's last step).

    Members
    -------
    setup : In(counter_setup_layout)
        Static from ``start`` to the end of the run.
    start : In(1)
        Load the first context (``*_init``) and start presenting steps (clears the pipeline).
    valid : Out(1)
        A step is presented.
    step : Out(step_layout)
        From registers (one of the two output registers).
    en : In(1)
        Take the presented step (only with ``valid``); after the ``last`` step ``valid`` falls.
    busy : Out(1)
        From ``start`` until the run's last step is taken.
    lane_shift, lane_tap : Out
        With ``step``, from registers: every lane's :class:`LaneSelect` ``shift`` and
        ``tap_last`` for the lane's word offset ``step.offset + i*s_w`` (and ``last_tap =
        span_w - 1``), computed in the word counter's stage from per-lane constants.
    """

    def __init__(self, config):
        self.config = require_config(config)
        super().__init__({
            "setup": In(counter_setup_layout(config)), "start": In(1), "en": In(1),
            "valid": Out(1), "step": Out(step_layout(config)), "busy": Out(1),
            "lane_shift": Out(data.ArrayLayout(
                range(config.feeder_bus_width + config.feeder_pattern_width + 1), config.rows)),
            "lane_tap": Out(config.rows),
        })

    def elaborate(self, platform):
        cfg = self.config
        m = Module()
        lb = exact_log2(cfg.feeder_bus_width)
        uw, sw = _counter_widths(cfg)
        # the setup (coordinates cut to the widths legal layers need), the widths and the
        # signals the methods below share
        s = SimpleNamespace(su=_narrow_setup(self.setup, uw), cw=uw, pw=ptr_width(cfg),
                            bw=cfg.feeder_bus_width, lb=lb, r_n=cfg.rows, sc=signed(sw))
        self._layer_constants(m, s)
        self._row_registers(m, s)
        self._row_advance(m, s)
        with m.If(self.start):
            self._first_row(m, s)
        with m.Elif(s.row_adv & s.running):
            self._next_row(m, s)
        self._row_pipeline(m, s)
        wstep = self._word_counter(m, s)
        lshift, ltap = self._lane_shifts(m, s)
        self._output(m, s, wstep, lshift, ltap)
        return m

    def _layer_constants(self, m, s):
        """Per-layer constants derived from the setup (registered; valid from the cycle after
        start, the setup being static from the start cycle on). Sets ``s.sa_m1`` (span_all -
        1), ``s.levels`` (the row counters' (step, limit) by name), ``s.names`` and
        ``s.wrap_last`` (a level's last flag after it wraps)."""
        su, cw = s.su, s.cw
        sa_m1 = Signal(cw)          # span_all - 1
        levels = {                  # name: (step, limit)
            "y": (su.y_step, su.y_limit), "c": (Const(1, 1), su.c_limit),
            "cx": (su.cx_step, su.cx_limit), "cy": (su.cy_step, su.cy_limit),
            "n": (Const(1, 1), su.n_limit),
        }
        names = tuple(levels)
        wrap_last = {k: Signal(name=f"{k}_wrap_last") for k in names}
        m.d.sync += sa_m1.eq(su.span_all - 1)
        for k, (step, limit) in levels.items():
            m.d.sync += wrap_last[k].eq(_below(limit, step))
        s.sa_m1, s.levels, s.names, s.wrap_last = sa_m1, levels, names, wrap_last

    def _row_registers(self, m, s):
        """The row counters: room (limit - value) and registered last flag per level, the
        pointer per level (and its sum with the level's pointer step), the region's x and y,
        the context count; the level a step moves (``s.moves``, one-hot over y, c, cx, cy, n;
        the others wrap to 0), ``s.ctx_end`` and ``s.run_end``. Sets each in ``s`` under its
        name."""
        su, cw, pw, sc, names = s.su, s.cw, s.pw, s.sc, s.names
        room = {k: Signal(cw, name=f"{k}_room") for k in names}
        last = {k: Signal(name=f"{k}_last") for k in names}
        ptr = {k: Signal(pw, name=f"{k}_ptr") for k in ("row",) + names[1:]}
        pstep = {"row": su.y_pstep, "c": su.c_pstep, "cx": su.cx_step, "cy": su.cy_pstep,
                 "n": su.n_pstep}
        psum = {}
        for k in ptr:
            psum[k] = Signal(pw, name=f"{k}_ptr_next")
            m.d.comb += psum[k].eq(ptr[k] + pstep[k])
        x0 = Signal(sc)             # cx - pad_w: x of the interest region's first column
        yrow = Signal(sc)           # cy + y - pad_h: the row's y in X
        ybase = Signal(sc)          # cy - pad_h
        ctx_left = Signal.like(su.ctx_count)
        ctx_one = Signal()
        limited = Signal()
        running = Signal()

        # The level a step moves (one-hot over y, c, cx, cy, n; the others wrap to 0).
        moves = [~last["y"],
                 last["y"] & ~last["c"],
                 last["y"] & last["c"] & ~last["cx"],
                 last["y"] & last["c"] & last["cx"] & ~last["cy"],
                 last["y"] & last["c"] & last["cx"] & last["cy"]]
        ctx_end = last["y"] & last["c"]
        run_end = ctx_end & ((last["cx"] & last["cy"] & last["n"]) | (limited & ctx_one))
        s.room, s.last, s.ptr, s.psum, s.x0, s.yrow, s.ybase = (room, last, ptr, psum, x0, yrow,
                                                                ybase)
        s.ctx_left, s.ctx_one, s.limited, s.running = ctx_left, ctx_one, limited, running
        s.moves, s.ctx_end, s.run_end = moves, ctx_end, run_end

    def _row_advance(self, m, s):
        """Row pipeline: state -> A -> B -> C -> word counter; all move together. Sets the
        stages' valid flags (``s.a_valid``, ``s.b_valid``, ``s.c_valid``, ``s.w_valid``),
        ``s.w_last``, ``s.full`` (both output registers full), ``s.word_adv`` (the word
        counter moves) and ``s.row_adv`` (a row moves into A)."""
        a_valid, b_valid, c_valid = Signal(), Signal(), Signal()
        w_valid, w_last = Signal(), Signal()
        full = Signal()
        word_adv = Signal()
        row_adv = Signal()
        m.d.comb += [
            word_adv.eq(~full),
            row_adv.eq((word_adv & (~w_valid | w_last)) | ~c_valid),
        ]
        s.a_valid, s.b_valid, s.c_valid, s.w_valid, s.w_last = (a_valid, b_valid, c_valid,
                                                                w_valid, w_last)
        s.full, s.word_adv, s.row_adv = full, word_adv, row_adv

    def _first_row(self, m, s):
        """At start: the first context's row, by sums of at most two levels of adders."""
        su, cw, ptr, room, last = s.su, s.cw, s.ptr, s.room, s.last
        init = {"y": 0, "c": 0, "cx": su.cx_init, "cy": su.cy_init, "n": su.n_init}
        p_n = su.ptr0 + su.n_pinit
        p_cy = p_n + su.cy_pinit
        first = p_n + (su.cy_pinit + su.cx_init)
        m.d.sync += [
            s.running.eq(1),
            s.x0.eq(su.cx_init - su.pad_w),
            s.ybase.eq(su.cy_init - su.pad_h), s.yrow.eq(su.cy_init - su.pad_h),
            ptr["n"].eq(p_n), ptr["cy"].eq(p_cy),
            ptr["cx"].eq(first), ptr["c"].eq(first), ptr["row"].eq(first),
            s.ctx_left.eq(su.ctx_count), s.limited.eq(su.ctx_count != 0),
            s.ctx_one.eq(su.ctx_count == 1),
        ]
        for k, (step, limit) in s.levels.items():
            r0 = Signal(cw, name=f"{k}_room_init")
            m.d.comb += r0.eq(limit - init[k])
            m.d.sync += [room[k].eq(r0), last[k].eq(_below(r0, step))]

    def _next_row(self, m, s):
        """A row moves into A: the rooms and flags, the pointers, the context count and the
        region's x and y step to the next row (the run ends after its last)."""
        su, sc, room, last, ptr, moves = s.su, s.sc, s.room, s.last, s.ptr, s.moves
        x0, yrow, ybase, ctx_left = s.x0, s.yrow, s.ybase, s.ctx_left
        with m.If(s.run_end):
            m.d.sync += s.running.eq(0)
        # rooms and flags: a level steps when all inner levels are last
        inner = Const(1, 1)
        for k, (step, limit) in s.levels.items():
            with m.If(inner):
                with m.If(last[k]):
                    m.d.sync += [room[k].eq(limit), last[k].eq(s.wrap_last[k])]
                with m.Else():
                    m.d.sync += [room[k].eq(room[k] - step),
                                 last[k].eq(_below(room[k], step, 2))]
            inner = inner & last[k]
        # pointers: the moving level's pointer plus its step, copied to all inner levels
        # (one-hot selections of sums computed apart: no adder after a selection)
        order = ("row", "c", "cx", "cy", "n")
        for lvl, k in enumerate(order):
            m.d.sync += ptr[k].eq(_one_hot(
                (moves[sel], ptr[k] if sel < lvl else s.psum[order[sel]])
                for sel in range(len(order))))
        with m.If(s.ctx_end):
            m.d.sync += [ctx_left.eq(ctx_left - 1), s.ctx_one.eq(ctx_left == 2)]
            with m.If(last["cx"]):
                m.d.sync += x0.eq(-su.pad_w)
            with m.Else():
                m.d.sync += x0.eq(x0 + su.cx_step)
        y_next, ybase_next = Signal(sc), Signal(sc)
        m.d.comb += [y_next.eq(yrow + su.y_step), ybase_next.eq(ybase + su.cy_step)]
        m.d.sync += [
            yrow.eq(_one_hot([(moves[0], y_next), (moves[1] | moves[2], ybase),
                              (moves[3], ybase_next), (moves[4], -su.pad_h)])),
            ybase.eq(_one_hot([(moves[0] | moves[1] | moves[2], ybase),
                               (moves[3], ybase_next), (moves[4], -su.pad_h)])),
        ]

    def _row_pipeline(self, m, s):
        """The row's pipeline registers. A: word address, global word offset, words - 1, lane
        mask, window ends; B: window in word positions of the row's first word; C: the
        window's end. Sets C's registers in ``s`` under their names (``s.c_addr`` ...
        ``s.c_hi``) and ``s.a_addr``."""
        cfg, su, cw, sc, lb, r_n = self.config, s.su, s.cw, s.sc, s.lb, s.r_n
        ptr, yrow, x0 = s.ptr, s.yrow, s.x0
        a_valid, b_valid = s.a_valid, s.b_valid
        # --- A: word address, global word offset, words - 1, lane mask, window ends --------
        a_addr, a_goff = Signal(addr_width(cfg)), Signal(lb)
        a_wm1 = Signal(cw)
        a_active = Signal(r_n)
        a_row_ok, a_ctx_last_row, a_last = Signal(), Signal(), Signal()
        a_lo, a_hw = Signal(sc), Signal(sc)     # max(0, -x0); W - x0
        # --- B: window in word positions of the row's first word --------------------------
        b_addr, b_goff, b_wm1 = Signal.like(a_addr), Signal.like(a_goff), Signal.like(a_wm1)
        b_active = Signal(r_n)
        b_row_ok, b_ctx_last_row, b_last, b_one = Signal(), Signal(), Signal(), Signal()
        b_lo, b_hw, b_end = Signal(sc), Signal(sc), Signal(sc)
        # --- C: the window's end ------------------------------------------------------------
        c_addr, c_goff, c_wm1 = Signal.like(a_addr), Signal.like(a_goff), Signal.like(a_wm1)
        c_active = Signal(r_n)
        c_row_ok, c_ctx_last_row, c_last, c_one = Signal(), Signal(), Signal(), Signal()
        c_lo, c_hi = Signal(sc), Signal(sc)

        highest = Signal(r_n)       # the last active lane (lane 0 always is)
        for i in range(r_n):
            above = a_active[i + 1] if i + 1 < r_n else 0
            m.d.comb += highest[i].eq(a_active[i] & ~above)
        end_sel = 0
        for i in range(r_n):
            end_sel = end_sel | Mux(highest[i], su.lane_end[i], 0)

        with m.If(s.row_adv):
            m.d.sync += [
                a_valid.eq(s.running),
                a_addr.eq(ptr["row"][lb:]), a_goff.eq(ptr["row"][:lb]),
                a_wm1.eq((ptr["row"][:lb] + s.sa_m1) >> lb),
                a_row_ok.eq((yrow >= 0) & (yrow < su.height)),
                a_ctx_last_row.eq(s.ctx_end), a_last.eq(s.run_end),
                a_lo.eq(Mux(x0 < 0, -x0, 0)), a_hw.eq(su.width - x0),
                b_valid.eq(a_valid), b_addr.eq(a_addr), b_goff.eq(a_goff), b_wm1.eq(a_wm1),
                b_active.eq(a_active), b_row_ok.eq(a_row_ok),
                b_ctx_last_row.eq(a_ctx_last_row), b_last.eq(a_last), b_one.eq(a_wm1 == 0),
                b_lo.eq(a_lo + a_goff), b_hw.eq(a_hw + a_goff), b_end.eq(end_sel + a_goff),
                s.c_valid.eq(b_valid), c_addr.eq(b_addr), c_goff.eq(b_goff), c_wm1.eq(b_wm1),
                c_active.eq(b_active), c_row_ok.eq(b_row_ok),
                c_ctx_last_row.eq(b_ctx_last_row), c_last.eq(b_last), c_one.eq(b_one),
                c_lo.eq(b_lo), c_hi.eq(Mux(b_hw < b_end, b_hw, b_end)),
            ]
            for i in range(r_n):
                m.d.sync += a_active[i].eq(su.lane_off[i] <= s.room["cx"])
        s.a_addr = a_addr
        s.c_addr, s.c_goff, s.c_wm1, s.c_active, s.c_row_ok = (c_addr, c_goff, c_wm1, c_active,
                                                               c_row_ok)
        s.c_ctx_last_row, s.c_last, s.c_one, s.c_lo, s.c_hi = (c_ctx_last_row, c_last, c_one,
                                                               c_lo, c_hi)

    def _word_counter(self, m, s):
        """The word counter: k*B along the row, from stage C. Sets ``s.w_off`` (goff - k*B);
        returns the step it presents (a :func:`step_layout` signal)."""
        cfg, cw, sc, bw, lb, r_n = self.config, s.cw, s.sc, s.bw, s.lb, s.r_n
        w_valid, w_last, a_addr = s.w_valid, s.w_last, s.a_addr
        w_addr = Signal.like(a_addr)
        w_off = Signal(sc)                  # goff - k*B
        w_offp = Signal(sc)                 # goff - k*B + feeder_pattern_width
        w_lo, w_hi = Signal(sc), Signal(sc)  # window - k*B
        w_left = Signal(cw)
        w_active = Signal(r_n)
        w_row_ok, w_ctx_last_row, w_run_last = Signal(), Signal(), Signal()
        with m.If(s.word_adv):
            with m.If(~w_valid | w_last):
                m.d.sync += [
                    w_valid.eq(s.c_valid), w_addr.eq(s.c_addr), w_off.eq(s.c_goff),
                    w_offp.eq(s.c_goff + cfg.feeder_pattern_width),
                    w_lo.eq(s.c_lo), w_hi.eq(s.c_hi), w_left.eq(s.c_wm1), w_last.eq(s.c_one),
                    w_active.eq(s.c_active), w_row_ok.eq(s.c_row_ok),
                    w_ctx_last_row.eq(s.c_ctx_last_row), w_run_last.eq(s.c_last),
                ]
            with m.Else():
                m.d.sync += [
                    w_addr.eq(w_addr + 1), w_off.eq(w_off - bw), w_offp.eq(w_offp - bw),
                    w_lo.eq(w_lo - bw), w_hi.eq(w_hi - bw),
                    w_left.eq(w_left - 1), w_last.eq(w_left == 1),
                ]

        def clamp(v):
            return Mux(v < 0, 0, Mux(v > bw, bw, v))
        lo, hi = Signal(range(bw + 1)), Signal(range(bw + 1))
        read = Signal()
        m.d.comb += [lo.eq(clamp(w_lo)), hi.eq(clamp(w_hi)), read.eq(w_row_ok & (lo < hi))]
        wstep = Signal(step_layout(cfg))
        m.d.comb += [
            wstep.addr.eq(w_addr), wstep.goff.eq(w_off[:lb]), wstep.offset.eq(w_off),
            wstep.read.eq(read), wstep.lo.eq(Mux(read, lo, 0)), wstep.hi.eq(Mux(read, hi, 0)),
            wstep.row_last.eq(w_last), wstep.ctx_last_row.eq(w_ctx_last_row),
            wstep.ctx_last.eq(w_ctx_last_row & w_last), wstep.last.eq(w_run_last & w_last),
            wstep.active.eq(w_active),
        ]
        s.w_off, s.w_offp = w_off, w_offp
        return wstep

    def _lane_shifts(self, m, s):
        """Every lane's pattern shift (:class:`LaneSelect`'s, for the lane's word offset ``o =
        w_off + i*s_w``) and ``tap_last`` flag, from one sum a lane: ``z = o + PW`` (the word
        counter keeps ``w_off + PW``). Both depend on ``o`` only inside the window ``-PW <= o
        <= B`` (``0 <= z <= B + PW``): below it the shift is ``B + PW``, above it 0, and the
        last tap ``o + span_w - 1`` (``span_w <= PW``) is outside the word on both sides;
        inside it the shift is ``B - o = B + PW - z`` and the tap test runs on ``z``'s low
        bits. Returns the lanes' shifts and ``tap_last`` flags."""
        cfg, su, bw, r_n = self.config, s.su, s.bw, s.r_n
        pwid = cfg.feeder_pattern_width
        top = bw + pwid
        kb = ceil_log2(top + 1)             # bits of z inside the window
        span_w = su.span_w[:ceil_log2(pwid + 1)]        # at most PW in a legal layer
        lshift = Signal(data.ArrayLayout(range(top + 1), r_n))
        ltap = Signal(r_n)
        for i in range(r_n):
            z = Signal(s.sc, name=f"lane{i}_z")             # w_off + i*s_w + PW
            below, above = Signal(name=f"lane{i}_below"), Signal(name=f"lane{i}_above")
            zl = Signal(kb, name=f"lane{i}_zl")
            tap = Signal(range(top + pwid), name=f"lane{i}_tap")   # zl + span_w - 1
            m.d.comb += [
                z.eq(s.w_offp + su.lane_off[i]), zl.eq(z[:kb]),
                below.eq(z < 0),
                above.eq(~below & ((z[kb:] != 0) | (zl > top))),
                tap.eq(zl + span_w - 1),
                lshift[i].eq(Mux(below, top, Mux(above, 0, top - zl))),
                ltap[i].eq(~below & ~above & (tap >= pwid) & (tap < top)),
            ]
        return lshift, ltap

    def _output(self, m, s, wstep, lshift, ltap):
        """Output: two entries written in turn while not both full, read in turn (``en``
        moves only the read pointer and the count); a start clears the pipeline."""
        cfg, r_n, full = self.config, s.r_n, s.full
        a_valid, b_valid, c_valid, w_valid = s.a_valid, s.b_valid, s.c_valid, s.w_valid
        entries = [Signal(step_layout(cfg), name=f"out{e}") for e in range(2)]
        e_shift = [Signal.like(lshift, name=f"out{e}_shift") for e in range(2)]
        e_tap = [Signal(r_n, name=f"out{e}_tap") for e in range(2)]
        wp, rp = Signal(), Signal()
        count = Signal(range(3))
        write = Signal()
        read = Signal()
        m.d.comb += [write.eq(s.word_adv & w_valid), read.eq(self.en & (count != 0))]
        for e in range(2):
            with m.If(write & (wp == e)):
                m.d.sync += [entries[e].eq(wstep), e_shift[e].eq(lshift), e_tap[e].eq(ltap)]
        with m.If(write):
            m.d.sync += wp.eq(~wp)
        with m.If(read):
            m.d.sync += rp.eq(~rp)
        m.d.sync += [count.eq(count + write - read), full.eq(count + write - read == 2)]

        with m.If(self.start):
            m.d.sync += [a_valid.eq(0), b_valid.eq(0), c_valid.eq(0), w_valid.eq(0),
                         wp.eq(0), rp.eq(0), count.eq(0), full.eq(0)]
        m.d.comb += [
            self.valid.eq(count != 0),
            self.step.eq(Mux(rp, entries[1], entries[0])),
            self.lane_shift.eq(Mux(rp, e_shift[1], e_shift[0])),
            self.lane_tap.eq(Mux(rp, e_tap[1], e_tap[0])),
            self.busy.eq(s.running | a_valid | b_valid | c_valid | w_valid | (count != 0)),
        ]


# --- feed lanes ----------------------------------------------------------------------------

def _shift_amount(m, offset, bw, pw):
    """The pattern's shift for a word offset: ``u = B - offset`` clamped to ``[0, B + PW]`` (bit
    ``j`` of the selection is bit ``u + j`` of the pattern with B zeros at both ends; both ends of
    the clamp select only zeros)."""
    u = Signal(range(bw + pw + 1))
    v = Signal(signed(len(offset) + 2))
    m.d.comb += [v.eq(bw - offset), u.eq(Mux(v < 0, 0, Mux(v > bw + pw, bw + pw, v)))]
    return u


def _window(pattern, u, bw):
    """The ``bw`` pattern bits that :func:`_shift_amount`'s ``u`` selects."""
    return (Cat(Const(0, bw), pattern, Const(0, bw)) >> u)[:bw]


def _check_offset_width(offset_width):
    if not isinstance(offset_width, int) or offset_width < 2:
        raise TypeError(f"offset_width must be an integer of at least 2, not "
                        f"{offset_width!r}")


class KernelPatternShifter(wiring.Component):
    """The kernel pattern aligned with the data word (combinational).

    ``sel`` bit ``j`` is ``pattern`` bit ``j - offset`` (0 outside the pattern): the pattern
    shifted right by ``offset`` word positions, left when ``offset`` is negative.

    Members
    -------
    pattern : In(feeder_pattern_width)
        Bit ``b``: the kernel has a tap ``b`` columns after its first (``0, d, .., (S-1)d``).
    offset : In(signed(offset_width))
        The lane's word offset.
    sel : Out(feeder_bus_width)
        The word positions holding the lane's interest elements.
    """

    def __init__(self, config, *, offset_width):
        _check_offset_width(offset_width)
        self.config = require_config(config)
        super().__init__({
            "pattern": In(config.feeder_pattern_width), "offset": In(signed(offset_width)),
            "sel": Out(config.feeder_bus_width),
        })

    def elaborate(self, platform):
        m = Module()
        bw, pw = self.config.feeder_bus_width, self.config.feeder_pattern_width
        u = _shift_amount(m, self.offset, bw, pw)
        m.d.comb += self.sel.eq(_window(self.pattern, u, bw))
        return m


class LaneSelect(wiring.Component):
    """A lane's word offset turned into what the lane takes of the word (combinational), in two
    steps that the :class:`DataFeeder` registers apart: the offset to the pattern's shift
    (``shift``, ``tap_last``), the shift to the first selected position and their count
    (:class:`LaneTaps`).

    Members
    -------
    offset : In(signed(offset_width))
        The lane's word offset (global word offset + local offset - bus widths already read).
    last_tap : In
        The position of the pattern's last bit, ``(S-1)*d``.
    shift : Out
        The pattern's shift, ``B - offset`` clamped to ``[0, B + feeder_pattern_width]``
        (:class:`KernelPatternShifter`'s).
    tap_last : Out(1)
        Word position ``offset + last_tap`` is in the word.
    """

    def __init__(self, config, *, offset_width):
        _check_offset_width(offset_width)
        self.config = require_config(config)
        self.offset_width = offset_width
        bw, pw = config.feeder_bus_width, config.feeder_pattern_width
        super().__init__({
            "offset": In(signed(offset_width)), "last_tap": In(range(pw)),
            "shift": Out(range(bw + pw + 1)), "tap_last": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        bw, pw = self.config.feeder_bus_width, self.config.feeder_pattern_width
        m.d.comb += self.shift.eq(_shift_amount(m, self.offset, bw, pw))
        tap = Signal(signed(self.offset_width + 1))
        m.d.comb += [tap.eq(self.offset + self.last_tap),
                     self.tap_last.eq((tap >= 0) & (tap < bw))]
        return m


class LaneTaps(wiring.Component):
    """The selected word positions (the shifted kernel pattern) reduced to what the lane's
    registers address the word with (combinational): the first selected position and how
    many there are. The selected positions are an arithmetic progression (the kernel's taps,
    ``d_w`` apart), so ``first`` and the count name all of them.

    Members
    -------
    sel : In(feeder_bus_width)
        The selected word positions (:class:`KernelPatternShifter`'s ``sel``).
    first : Out(range(B + 1))
        The first selected position (``B`` when there is none).
    count : Out(range(B + 1))
        The number of selected positions.
    """

    def __init__(self, config):
        self.config = require_config(config)
        bw = config.feeder_bus_width
        super().__init__({
            "sel": In(bw), "first": Out(range(bw + 1)), "count": Out(range(bw + 1)),
        })

    def elaborate(self, platform):
        m = Module()
        bw, sel = self.config.feeder_bus_width, self.sel
        # population count by a balanced adder tree; first position by priority (last wins)
        level = [sel[j] for j in range(bw)]
        while len(level) > 1:
            level = [level[i] + level[i + 1] if i + 1 < len(level) else level[i]
                     for i in range(0, len(level), 2)]
        m.d.comb += [self.count.eq(level[0]), self.first.eq(bw)]
        for j in reversed(range(bw)):
            with m.If(sel[j]):
                m.d.comb += self.first.eq(j)
        return m


class LaneRegisters(wiring.Component):
    """A lane's M intermediate registers: places the word's selected elements and pushes them,
    M at a time, as FIFO entries (the part of :class:`FeedLane` after :class:`LaneTaps`).

    The elements of the word placed so far are the first ``t`` selected ones (a register);
    ``done`` (``count - t`` at most the free registers) comes from registers and the FIFO's
    ``ready``, which only selects among precomputed cases. Each register *addresses* the word:
    the selected element of rank ``q`` sits at ``first + q * dil`` (a register keeps
    ``t * dil``, advanced by adding ``placed * dil``), so a register reads one position of the
    word through one ``B``-way multiplexer.

    Members
    -------
    word, word_valid, active, next, done, blocked, empty, entries
        As :class:`FeedLane`'s.
    first, count : In(range(B + 1))
        :class:`LaneTaps`'s: the first word position holding one of the lane's interest
        elements and how many there are.
    dil : In(range(feeder_pattern_width + 1))
        The positions' spacing (the kernel's column dilation).
    closes : In(1)
        The word holds the lane's last element of the context (the context's last row and
        :class:`LaneSelect`'s ``tap_last``).
    """

    def __init__(self, config):
        self.config = require_config(config)
        op = arith_for(config).operand_shape
        super().__init__({
            "word": In(data.ArrayLayout(op, config.feeder_bus_width)), "word_valid": In(1),
            "first": In(range(config.feeder_bus_width + 1)),
            "count": In(range(config.feeder_bus_width + 1)),
            "dil": In(range(config.feeder_pattern_width + 1)),
            "closes": In(1), "active": In(1), "next": In(1),
            "done": Out(1), "blocked": Out(1), "empty": Out(1),
            "entries": Out(stream.Signature(entry_layout(config))),
        })

    def elaborate(self, platform):
        cfg = self.config
        m = Module()
        bw, mr = cfg.feeder_bus_width, cfg.feeder_lane_regs

        regs = Signal(data.ArrayLayout(arith_for(cfg).operand_shape, mr))
        fill = Signal(range(mr + 1))
        close = Signal()
        act = Signal()
        out = self.entries
        push = out.valid & out.ready
        m.d.comb += [
            out.valid.eq((fill == mr) | close),
            out.p.data.eq(regs), out.p.count.eq(fill), out.p.last.eq(close),
            out.p.active.eq(act),
            self.empty.eq((fill == 0) & ~close),
        ]

        # Fill level the new elements start from: offered registers take elements only in the
        # cycle they are pushed (then all are free).
        accept = Signal()
        base = Signal(range(mr + 1))
        free = Signal(range(mr + 1))
        m.d.comb += [accept.eq(~out.valid | out.ready), base.eq(Mux(out.valid, 0, fill)),
                     free.eq(Mux(accept, mr - base, 0))]

        # The first t selected elements of the word are placed; register k >= base takes the
        # selected element of rank t + k - base, if there is one: the word position
        # pos[k - base] (both cases of base computed apart, the registers' state selecting
        # last).
        t = Signal(range(bw + 1))
        cnt = Signal(range(bw + 1))         # selected elements left
        total = self.count
        m.d.comb += cnt.eq(Mux(self.word_valid, total - t, 0))
        placed = Signal(range(mr + 1))
        m.d.comb += placed.eq(Mux(cnt < free, cnt, free))
        pos = self._positions(m, placed)
        for k in range(mr):
            open_pos = pos[k]
            for f in range(1, k + 1):
                open_pos = Mux(fill == f, pos[k - f], open_pos)
            idx = Signal(range(bw), name=f"idx{k}")
            m.d.comb += idx.eq(Mux(out.valid, pos[k], open_pos))
            take_pushed = t + k < total
            take_open = (k >= fill) & (t + k - fill < total)
            with m.If(self.word_valid & Mux(out.valid, out.ready & take_pushed, take_open)):
                m.d.sync += regs[k].eq(self.word[idx])

        # done is cnt <= free, i.e. count <= t + free: the bounds t + M and t + M - fill are
        # kept in registers (no subtraction before the comparisons), the cases of the
        # registers' state compared apart and selected last (the FIFO's ready arrives late)
        t_mr = Signal(range(bw + mr + 1), init=mr)          # t + M
        t_room = Signal(range(bw + mr + 1), init=mr)        # t + M - fill
        m.d.comb += [
            self.done.eq(~self.word_valid | Mux(out.valid,
                                                Mux(out.ready, total <= t_mr, total == t),
                                                total <= t_room)),
            self.blocked.eq(self.word_valid & (total != t) & out.valid & ~out.ready),
        ]
        with m.If(accept):
            m.d.sync += fill.eq(base + placed)
        with m.If(placed != 0):
            m.d.sync += act.eq(self.active)
        with m.If(self.next):
            m.d.sync += [t.eq(0), t_mr.eq(mr),
                         t_room.eq(Mux(accept, mr - base - placed, mr - fill))]
        with m.Else():
            m.d.sync += [t.eq(t + placed), t_mr.eq(t_mr + placed),
                         t_room.eq(Mux(accept, t_mr - base, t_room))]

        # The lane's last element of the context is in this word when its last tap is.
        closes = self.closes & (cnt != 0) & self.done
        m.d.sync += close.eq(closes | (close & ~push))
        return m

    def _positions(self, m, placed):
        """The word positions of the selected elements of ranks ``t .. t + M - 1``
        (``first + (t + k) * dil``; meaningful where such an element exists, truncated to
        the word's position bits); keeps ``t * dil`` in a register, advanced by
        ``placed * dil``."""
        bw, mr, pw = self.config.feeder_bus_width, self.config.feeder_lane_regs, \
            self.config.feeder_pattern_width
        dk = [Const(0, 1)]
        for k in range(1, mr + 1):
            v = Signal(range(k * pw + 1), name=f"dil_x{k}")
            m.d.comb += v.eq(dk[-1] + self.dil)
            dk.append(v)
        tp = Signal(range(bw + pw + 1))     # t * dil (at most first + count * dil < B + dil)
        base = Signal(range(2 * bw + pw + 1))
        m.d.comb += base.eq(self.first + tp)
        pos = []
        for k in range(mr):
            p = Signal(range(bw), name=f"pos{k}")
            m.d.comb += p.eq(base + dk[k])
            pos.append(p)
        step = dk[0]
        for k in range(1, mr + 1):
            step = Mux(placed == k, dk[k], step)
        with m.If(self.next):
            m.d.sync += tp.eq(0)
        with m.Else():
            m.d.sync += tp.eq(tp + step)
        return pos


class FeedLane(wiring.Component):
    """One feed lane: selects its interest elements from the data words into M intermediate
    registers and pushes them, M at a time, as FIFO entries (:class:`LaneSelect`,
    :class:`LaneRanks` and :class:`LaneRegisters`; the :class:`DataFeeder` puts a register
    after each of the first two).

    Per cycle the lane places, in word order, as many of the word's not yet taken interest
    elements as it has free registers. Registers that are full, or that hold the context's
    last element (*closed*), are offered on ``entries`` from the next cycle; while offered they
    take nothing, except in the cycle they are accepted, when all M are free again. ``done``
    says that all remaining interest elements of the word are placed this cycle; the feeder
    holds the word (a stall) until every lane is done, then asserts ``next``.

    Members
    -------
    word : In(ArrayLayout(operand, B))
        The data word, padding positions already 0.
    word_valid : In(1)
        ``word`` and the controls below are meaningful.
    offset : In(signed)
        The lane's word offset (global word offset + local offset - bus widths already read).
    pattern : In(feeder_pattern_width), last_tap : In, dil : In
        Kernel pattern, the position of its last bit, ``(S-1)*d``, and its spacing ``d``.
    ctx_end : In(1)
        The word belongs to the context's last interest-region row.
    active : In(1)
        The lane's pixel exists in this context (carried into the entries).
    next : In(1)
        The word is replaced at the end of this cycle.
    done : Out(1)
        Combinational: the lane has nothing left of this word after this cycle.
    blocked : Out(1)
        Combinational: interest elements wait while the registers wait for the FIFO.
    empty : Out(1)
        No element in the registers.
    entries : Out(stream.Signature(entry_layout))
        ``valid`` is registered and never depends on ``ready``.
    """

    def __init__(self, config, *, offset_width):
        _check_offset_width(offset_width)
        self.config = require_config(config)
        self.offset_width = offset_width
        op = arith_for(config).operand_shape
        pw = config.feeder_pattern_width
        super().__init__({
            "word": In(data.ArrayLayout(op, config.feeder_bus_width)), "word_valid": In(1),
            "offset": In(signed(offset_width)), "pattern": In(pw), "last_tap": In(range(pw)),
            "dil": In(range(pw + 1)), "ctx_end": In(1), "active": In(1), "next": In(1),
            "done": Out(1), "blocked": Out(1), "empty": Out(1),
            "entries": Out(stream.Signature(entry_layout(config))),
        })

    def elaborate(self, platform):
        m = Module()
        sel = m.submodules.select = LaneSelect(self.config, offset_width=self.offset_width)
        taps = m.submodules.taps = LaneTaps(self.config)
        regs = m.submodules.regs = LaneRegisters(self.config)
        m.d.comb += [
            sel.offset.eq(self.offset), sel.last_tap.eq(self.last_tap),
            taps.sel.eq(_window(self.pattern, sel.shift, self.config.feeder_bus_width)),
            regs.word.eq(self.word), regs.word_valid.eq(self.word_valid),
            regs.first.eq(taps.first), regs.count.eq(taps.count), regs.dil.eq(self.dil),
            regs.closes.eq(self.ctx_end & sel.tap_last), regs.active.eq(self.active),
            regs.next.eq(self.next),
            self.done.eq(regs.done), self.blocked.eq(regs.blocked), self.empty.eq(regs.empty),
        ]
        wiring.connect(m, wiring.flipped(self.entries), regs.entries)
        return m


# --- the feeder ----------------------------------------------------------------------------

class FeederState(enum.Enum, shape=3):
    """State of the :class:`DataFeeder`'s control."""
    IDLE = 0
    SETUP = 1
    CHECK = 2
    PATTERN = 3
    RUN = 4


class DataFeeder(wiring.Component):
    """The data feeder for the output-stationary forward convolution.

    Accepts a layer descriptor with ``start`` when idle; derives the index-counter values and
    the kernel pattern (``SETUP``: ``max(15, 6 + rows)`` cycles, ``CHECK``: 1, ``PATTERN``:
    ``kernel_w``; the index counters start in ``CHECK`` and present their first step 6 cycles
    later, so the first SRAM read comes ``max(7, kernel_w + 2)`` cycles after ``CHECK``), then
    reads every SRAM word of each context's interest region once, in the order of
    ``bpsa.models.feeder_model.index_steps``, and produces the lane streams on ``feed`` (see the
    module docstring for the pixel mapping and element order). ``busy`` stays high until the last
    element has been accepted on ``feed``.

    Output timing: lane-aligned (no row skew): every ``feed`` transfer carries element ``e`` of
    the current context for all lanes at once; the array skews internally.

    Illegal descriptors (what :func:`check_layer` refuses, except out-of-range field values,
    which the fields cannot hold) raise ``error`` after ``CHECK``: the feeder returns to idle
    without reading or producing anything. ``error`` holds until the next ``start``.

    Pipeline: the index counters' step (registered) goes to stage 0 with every lane's shifted
    pattern; stage 0 addresses the SRAM (``sram.en`` with the word's address) and moves to
    stage 1 with every lane's first selected position and count; the word arrives there
    (synchronous read port; ``data`` holds while ``en`` is low), padding positions are zeroed, and every lane places
    its elements. Both stages move together; the word is held (a *stall*) until all lanes have
    placed their interest elements. Every cycle's logic starts at registers: one word a cycle
    in steady state.

    Members
    -------
    layer : In(layer_layout)
        Sampled with ``start``.
    start : In(1)
    busy, error : Out(1)
    sram : In(ReadPort.Signature(addr_width=log2(buf_a_depth), shape=ArrayLayout(operand, B)))
        A synchronous read port (connect ``Memory.read_port()``).
    feed : Out(stream.Signature(feed_layout))
        The lane streams; ``valid`` never depends on ``ready``; nothing is lost while
        ``ready`` is low.
    words_read, stall_cycles, fifo_stall_cycles, busy_cycles : Out(32)
        Counters of the current (or last) run, cleared by ``start``: SRAM words read; cycles a
        word is held because a lane has not placed all its interest elements; of those, cycles
        in which a lane waits for FIFO space (backpressure); cycles busy. The first three
        count an event the cycle after it (all have landed when ``busy`` falls).
    """

    def __init__(self, config):
        self.config = require_config(config)
        op = arith_for(config).operand_shape
        super().__init__({
            "layer": In(layer_layout(config)), "start": In(1),
            "busy": Out(1), "error": Out(1),
            "sram": In(ReadPort.Signature(addr_width=addr_width(config),
                                          shape=data.ArrayLayout(op, config.feeder_bus_width))),
            "feed": Out(stream.Signature(feed_layout(config))),
            "words_read": Out(32), "stall_cycles": Out(32), "fifo_stall_cycles": Out(32),
            "busy_cycles": Out(32),
        })

    def elaborate(self, platform):
        cfg = self.config
        m = Module()
        state = Signal(FeederState)
        lay = Signal(layer_layout(cfg))
        ic = m.submodules.counters = IndexCounters(cfg)
        # the widths and the signals the methods below share
        s = SimpleNamespace(bw=cfg.feeder_bus_width, r_n=cfg.rows, mr=cfg.feeder_lane_regs,
                            pwid=cfg.feeder_pattern_width, cw=coord_width(cfg),
                            ptrw=ptr_width(cfg), dim=cfg.dim_width, state=state, lay=lay,
                            ic=ic)
        self._setup_products(m, s)
        self._lane_ends(m, s)
        self._counter_setup(m, s)
        self._legality(m, s)
        # Kernel pattern: bits 0, d_w, .., (S-1)*d_w, one a cycle at pat_pos (S cycles; in a
        # legal layer (S-1)*d_w < feeder_pattern_width, so every one is in the pattern).
        pwid, dim = s.pwid, s.dim
        pattern = Signal(pwid)
        pat_left = Signal(dim)
        pat_pos = Signal(range(2 * pwid + 1))
        d_clamped = Signal(range(pwid + 1))
        m.d.comb += d_clamped.eq(Mux(lay.dil_w > pwid, pwid, lay.dil_w))
        s.pattern, s.pat_left, s.pat_pos, s.d_clamped = pattern, pat_left, pat_pos, d_clamped
        self._stages(m, s)
        fifos = self._lanes(m, s)
        self._output(m, s, fifos)
        self._counters(m, s)
        self._control(m, s)
        return m

    def _setup_products(self, m, s):
        """Setup: products on one shared multiplier, pipelined (operands, product), one a
        cycle; a product that uses another comes at least 3 places after it. Sets each
        product's register in ``s`` under its name (``s.hw_`` ... ``s.n0p``), the flags
        ``s.big`` (by name), ``s.kw``, ``s.setup_idx`` and ``s.setup_cycles`` (SETUP's).

        A product is kept modulo ``2**kw``, ``kw = max(ptr_width + 1, dim_width + 2,
        bits(feeder_pattern_width) + 1)``, with a flag "at least ``2**kw``" where legality
        needs more (``big``: a product with a flagged operand is flagged too; exact when the
        operands are not 0, and a zero field makes the descriptor illegal anyway). ``2**kw``
        exceeds the SRAM's elements, ``3 * (2**dim_width - 1)`` (a padded extent, so every
        legal limit) and the pattern width, so a flagged product makes the descriptor
        illegal, as its exact value did; the pointer products need only ``ptr_width``
        bits."""
        dim, ptrw, r_n, lay, state = s.dim, s.ptrw, s.r_n, s.lay, s.state
        kw = max(ptrw + 1, dim + 2, s.pwid.bit_length() + 1)
        assert (1 << kw) > max(self.config.buf_a_depth * s.bw, 3 * ((1 << dim) - 1), s.pwid)
        hw_, chw, total = Signal(kw), Signal(kw), Signal(kw)
        span_w_m1, span_h_m1 = Signal(kw), Signal(kw)
        cx0, cy0 = Signal(kw), Signal(kw)
        pad_row, dil_row, stride_row = Signal(ptrw), Signal(ptrw), Signal(ptrw)
        cy0p = Signal(ptrw)
        n0p = Signal(ptrw)
        big = {name: Signal(name=f"{name}_big")
               for name in ("hw", "chw", "total", "span_w", "span_h", "cx0", "cy0")}
        products = [        # (product, a, b, its flag, b's flag)
            (hw_, lay.height, lay.width, "hw", None),
            (stride_row, lay.stride_h, lay.width, None, None),
            (span_w_m1, lay.kernel_w - 1, lay.dil_w, "span_w", None),
            (chw, lay.channels, hw_, "chw", "hw"),
            (cy0p, lay.ctx_oh, stride_row, None, None),
            (span_h_m1, lay.kernel_h - 1, lay.dil_h, "span_h", None),
            (total, lay.batch, chw, "total", "chw"),
            (n0p, lay.ctx_n, chw, None, None),
            (dil_row, lay.dil_h, lay.width, None, None),
            (pad_row, lay.pad_h, lay.width, None, None),
            (cx0, lay.ctx_ow, lay.stride_w, "cx0", None),
            (cy0, lay.ctx_oh, lay.stride_h, "cy0", None),
        ]
        mul_a = Signal(max(dim, ceil_log2(r_n + 1)))
        mul_b = Signal(kw)
        mul_p = Signal(len(mul_a) + kw)
        # SETUP's cycles: the products' and the lane ends' (span_w - 1 lands in cycle 5), and
        # one more for the counters' setup registered from them (values derived from the
        # products land two cycles after them: none of those products comes last)
        setup_cycles = max(len(products) + 3, 6 + r_n)
        setup_idx = Signal(range(setup_cycles))
        m.d.sync += mul_p.eq(mul_a * mul_b)
        for i, (dest, a, b, flag, b_flag) in enumerate(products):
            with m.If((state == FeederState.SETUP) & (setup_idx == i)):
                m.d.sync += [mul_a.eq(a), mul_b.eq(b)]
            with m.If((state == FeederState.SETUP) & (setup_idx == i + 2)):
                m.d.sync += dest.eq(mul_p)
                if flag is not None:
                    m.d.sync += big[flag].eq((mul_p[kw:] != 0)
                                             | (big[b_flag] if b_flag else 0))
        s.hw_, s.chw, s.total, s.span_w_m1, s.span_h_m1, s.pad_row = (hw_, chw, total,
                                                                      span_w_m1, span_h_m1,
                                                                      pad_row)
        s.cx0, s.cy0, s.dil_row, s.stride_row, s.cy0p, s.n0p = (cx0, cy0, dil_row, stride_row,
                                                                cy0p, n0p)
        s.big, s.kw = big, kw
        s.setup_idx, s.setup_cycles = setup_idx, setup_cycles

    def _lane_ends(self, m, s):
        """Lane offsets i*s_w, ends i*s_w + span_w and rows*s_w: each register adds s_w to
        its neighbour's every cycle, right r_n cycles after its first term. Sets ``s.rs``,
        ``s.lane_off`` and ``s.lane_end``."""
        cw, lay = s.cw, s.lay
        rs = Signal(cw)
        lane_off = [Const(0, cw)]
        lane_end = [Signal(cw, name="lane_end0")]
        m.d.comb += lane_end[0].eq(s.span_w_m1 + 1)
        for i in range(1, s.r_n):
            o = Signal(cw, name=f"lane_off{i}")
            e = Signal(cw, name=f"lane_end{i}")
            m.d.sync += [o.eq(lane_off[-1] + lay.stride_w), e.eq(lane_end[-1] + lay.stride_w)]
            lane_off.append(o)
            lane_end.append(e)
        m.d.sync += rs.eq(lane_off[-1] + lay.stride_w)
        s.rs, s.lane_off, s.lane_end = rs, lane_off, lane_end

    def _counter_setup(self, m, s):
        """Derived values, registered in every cycle (final two cycles after their
        products), and the counters' setup: the held descriptor's fields, the products and
        the derived values, all static from their last write in SETUP (the descriptor from the
        start) to the end of the run, so none is copied: final in CHECK, where the counters
        start. Sets ``s.span_w``, ``s.lim_x``, ``s.lim_y`` and ``s.x_end``."""
        dim, lay, su, lane_off, lane_end = s.dim, s.lay, s.ic.setup, s.lane_off, s.lane_end
        kw = s.kw
        # (the products modulo 2**kw: exact unless their flags make the descriptor illegal)
        span_w = Signal(kw + 1)
        span_h = Signal(kw + 1)
        lim_x = Signal(signed(kw + 2))      # W + 2p_w < 2**kw; span_w <= 2**kw
        lim_y = Signal(signed(kw + 2))
        x_end = Signal(kw + 1)              # base + N*C*H*W
        ptr0 = Signal(s.ptrw)               # base - p_h*W - p_w
        c_lim, n_lim = Signal(dim), Signal(dim)
        m.d.sync += [
            span_w.eq(s.span_w_m1 + 1), span_h.eq(s.span_h_m1 + 1),
            lim_x.eq(lay.width + 2 * lay.pad_w - span_w),
            lim_y.eq(lay.height + lay.pad_h + lay.pad_bottom - span_h),
            x_end.eq(lay.base + s.total),
            ptr0.eq(lay.base - s.pad_row - lay.pad_w),
            c_lim.eq(lay.channels - 1), n_lim.eq(lay.batch - 1),
        ]
        m.d.comb += [
            su.span_all.eq(lane_end[-1]), su.span_w.eq(span_w),
            su.stride_w.eq(lay.stride_w),
            su.y_step.eq(lay.dil_h), su.y_limit.eq(s.span_h_m1), su.y_pstep.eq(s.dil_row),
            su.cy_pstep.eq(s.stride_row), su.cy_pinit.eq(s.cy0p), su.n_pinit.eq(s.n0p),
            su.c_limit.eq(c_lim), su.c_pstep.eq(s.hw_),
            su.cx_step.eq(s.rs), su.cx_limit.eq(lim_x),
            su.cy_step.eq(lay.stride_h), su.cy_limit.eq(lim_y),
            su.n_limit.eq(n_lim), su.n_pstep.eq(s.chw),
            su.ptr0.eq(ptr0),
            su.pad_h.eq(lay.pad_h), su.pad_w.eq(lay.pad_w),
            su.height.eq(lay.height), su.width.eq(lay.width),
            su.cx_init.eq(s.cx0), su.cy_init.eq(s.cy0), su.n_init.eq(lay.ctx_n),
            su.ctx_count.eq(lay.ctx_count),
        ]
        for i in range(s.r_n):
            m.d.comb += [su.lane_off[i].eq(lane_off[i]), su.lane_end[i].eq(lane_end[i])]
        s.span_w, s.lim_x, s.lim_y, s.x_end = span_w, lim_x, lim_y, x_end

    def _legality(self, m, s):
        """Legality (from registered products; final in CHECK). Sets ``s.illegal``."""
        cfg, lay, lim_x, lim_y = self.config, s.lay, s.lim_x, s.lim_y
        zero = 0
        for name in _NONZERO_FIELDS:
            zero = zero | (getattr(lay, name) == 0)
        big = s.big
        illegal = Signal()      # registered in SETUP
        # a flagged product (at least 2**kw) makes its comparison true, as its exact value:
        # 2**kw exceeds the pattern width, the SRAM and every padded extent (lim_x and lim_y
        # are below it and exact unless span_w's or span_h's flag already refuses)
        with m.If(s.state == FeederState.SETUP):
            m.d.sync += illegal.eq(
                zero
                | big["span_w"] | (s.span_w > s.pwid)
                | (lim_x < 0) | big["span_h"] | (lim_y < 0)
                | big["total"] | (s.x_end > cfg.buf_a_depth * s.bw)
                | (lay.ctx_n >= lay.batch)
                | big["cy0"] | (s.cy0 > lim_y) | big["cx0"] | (s.cx0 > lim_x))
        s.illegal = illegal

    def _stages(self, m, s):
        """The pipeline's stages. Stage 0: the counters' step and every lane's shifted
        pattern (its selected word positions); it addresses the SRAM. Stage 1: the word (read), what each lane takes of it and its
        real-data positions. Both move together (``s.adv``), when stage 1 is free or all
        lanes are done with its word (``s.all_done``, driven by :meth:`_lanes`). Sets
        ``s.s0_valid``, ``s.s1_valid``, ``s.s1``, ``s.s1_first``, ``s.s1_count``,
        ``s.s1_closes``, ``s.s1_keep``, ``s.all_done`` and ``s.adv``."""
        cfg, bw, r_n, ic = self.config, s.bw, s.r_n, s.ic
        s0_valid = Signal()
        s0 = Signal(step_layout(cfg))
        s0_sel = Signal(data.ArrayLayout(bw, r_n))     # every lane's shifted pattern
        s0_tap = Signal(r_n)
        s1_valid = Signal()
        s1 = Signal(step_layout(cfg))
        all_done = Signal()
        adv = Signal()
        running = Signal()      # state RUN (the counters start earlier, in CHECK)
        m.d.comb += [running.eq(s.state == FeederState.RUN),
                     adv.eq((~s1_valid | all_done) & running)]
        m.d.comb += [
            ic.en.eq(adv),
            self.sram.addr.eq(s0.addr),
            self.sram.en.eq(adv & s0_valid & s0.read),
        ]
        s1_first = Signal(data.ArrayLayout(range(bw + 1), r_n))
        s1_count = Signal(data.ArrayLayout(range(bw + 1), r_n))
        s1_closes = Signal(r_n)
        s1_keep = Signal(bw)
        with m.If(adv):
            m.d.sync += [s0_valid.eq(ic.valid), s0.eq(ic.step),
                         s1_valid.eq(s0_valid), s1.eq(s0)]
            for j in range(bw):
                m.d.sync += s1_keep[j].eq((s0.lo <= j) & (j < s0.hi))
        for i in range(r_n):
            taps = LaneTaps(cfg)
            m.submodules[f"taps{i}"] = taps
            m.d.comb += taps.sel.eq(s0_sel[i])
            with m.If(adv):
                m.d.sync += [s0_sel[i].eq(_window(s.pattern, ic.lane_shift[i], bw)),
                             s0_tap[i].eq(ic.lane_tap[i]),
                             s1_first[i].eq(taps.first), s1_count[i].eq(taps.count),
                             s1_closes[i].eq(s0.ctx_last_row & s0_tap[i])]
        s.s0_valid, s.s1_valid, s.s1, s.s1_first, s.s1_count, s.s1_closes, s.s1_keep = (
            s0_valid, s1_valid, s1, s1_first, s1_count, s1_closes, s1_keep)
        s.all_done, s.adv = all_done, adv

    def _lanes(self, m, s):
        """Stage 1's word (padding positions zeroed) into every lane's registers, and each
        lane's FIFO. Drives ``s.all_done``; sets ``s.blocks`` (a lane waits for FIFO space)
        and ``s.empties`` (a lane and its FIFO are empty); returns the FIFOs."""
        cfg, bw, s1_valid, s1_keep = self.config, s.bw, s.s1_valid, s.s1_keep
        fifos = []
        word = Signal(data.ArrayLayout(arith_for(cfg).operand_shape, bw))
        for j in range(bw):
            m.d.comb += word[j].eq(Mux(s1_keep[j], self.sram.data[j], 0))

        dones, blocks, empties = [], [], []
        for i in range(s.r_n):
            lane = LaneRegisters(cfg)
            m.submodules[f"lane{i}"] = lane
            fifo = SyncFIFOBuffered(width=entry_layout(cfg).size, depth=cfg.feeder_fifo_depth)
            m.submodules[f"fifo{i}"] = fifo
            m.d.comb += [
                lane.word.eq(word), lane.word_valid.eq(s1_valid),
                lane.first.eq(s.s1_first[i]), lane.count.eq(s.s1_count[i]),
                lane.dil.eq(s.d_clamped),
                lane.closes.eq(s.s1_closes[i]),
                lane.active.eq(s.s1.active[i]),
                lane.next.eq(s.adv),
                fifo.w_data.eq(lane.entries.payload), fifo.w_en.eq(lane.entries.valid),
                lane.entries.ready.eq(fifo.w_rdy),
            ]
            dones.append(lane.done)
            blocks.append(lane.blocked)
            empties.append(lane.empty & (fifo.level == 0))
            fifos.append(fifo)
        m.d.comb += s.all_done.eq(Cat(dones).all())
        s.blocks, s.empties = blocks, empties
        return fifos

    def _output(self, m, s, fifos):
        """Output: one element of every lane per transfer, from the FIFOs' head entries."""
        cfg, mr = self.config, s.mr
        heads = [data.View(entry_layout(cfg), f.r_data) for f in fifos]
        idx = Signal(range(mr))
        at_end = Signal()
        m.d.comb += [
            self.feed.valid.eq(Cat(f.r_rdy for f in fifos).all()),
            at_end.eq(idx == heads[0].count - 1),
            self.feed.p.last.eq(heads[0].last & at_end),
        ]
        for i, h in enumerate(heads):
            m.d.comb += [
                self.feed.p.data[i].eq(Mux(h.active, h.data[idx], 0)),
                self.feed.p.mask[i].eq(h.active),
            ]
        take = self.feed.valid & self.feed.ready
        for f in fifos:
            m.d.comb += f.r_en.eq(take & at_end)
        with m.If(take):
            m.d.sync += idx.eq(Mux(at_end, 0, idx + 1))

    def _counters(self, m, s):
        """``busy`` and the run's counters (``words_read``, ``stall_cycles``,
        ``fifo_stall_cycles``, ``busy_cycles``)."""
        m.d.comb += self.busy.eq(s.state != FeederState.IDLE)
        stall = s.s1_valid & ~s.all_done
        # The run's counters count a cycle late (registered events; all land before idle).
        ev_read, ev_stall, ev_fifo = Signal(), Signal(), Signal()
        m.d.sync += [ev_read.eq(self.sram.en), ev_stall.eq(stall),
                     ev_fifo.eq(stall & Cat(s.blocks).any())]
        with m.If(self.busy):
            m.d.sync += [
                self.busy_cycles.eq(self.busy_cycles + 1),
                self.words_read.eq(self.words_read + ev_read),
                self.stall_cycles.eq(self.stall_cycles + ev_stall),
                self.fifo_stall_cycles.eq(self.fifo_stall_cycles + ev_fifo),
            ]

    def _control(self, m, s):
        """The control's states: IDLE (a start takes the descriptor and clears the
        counters), SETUP, CHECK (an illegal descriptor raises ``error``; else the counters
        start), PATTERN (the kernel pattern, one tap a cycle) and RUN (until the counters,
        the stages, the lanes and the FIFOs are empty)."""
        state, lay, setup_idx = s.state, s.lay, s.setup_idx
        pattern, pat_left, pat_pos = s.pattern, s.pat_left, s.pat_pos
        with m.Switch(state):
            with m.Case(FeederState.IDLE):
                with m.If(self.start):
                    m.d.sync += [
                        lay.eq(self.layer), setup_idx.eq(0), self.error.eq(0),
                        self.words_read.eq(0), self.stall_cycles.eq(0),
                        self.fifo_stall_cycles.eq(0), self.busy_cycles.eq(0),
                        state.eq(FeederState.SETUP),
                    ]
            with m.Case(FeederState.SETUP):
                m.d.sync += setup_idx.eq(setup_idx + 1)
                with m.If(setup_idx == s.setup_cycles - 1):
                    m.d.sync += state.eq(FeederState.CHECK)
            with m.Case(FeederState.CHECK):
                with m.If(s.illegal):
                    m.d.sync += [self.error.eq(1), state.eq(FeederState.IDLE)]
                with m.Else():
                    m.d.sync += [pattern.eq(0), pat_left.eq(lay.kernel_w), pat_pos.eq(0),
                                 state.eq(FeederState.PATTERN)]
                    m.d.comb += s.ic.start.eq(1)
            with m.Case(FeederState.PATTERN):
                m.d.sync += [pat_left.eq(pat_left - 1), pat_pos.eq(pat_pos + s.d_clamped)]
                for b in range(s.pwid):
                    with m.If(pat_pos == b):
                        m.d.sync += pattern[b].eq(1)
                with m.If(pat_left == 1):
                    m.d.sync += state.eq(FeederState.RUN)
            with m.Case(FeederState.RUN):
                with m.If(~s.ic.busy & ~s.s0_valid & ~s.s1_valid & Cat(s.empties).all()):
                    m.d.sync += state.eq(FeederState.IDLE)
