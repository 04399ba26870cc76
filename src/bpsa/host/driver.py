"""Host driver of the accelerator: numpy tensors in, numpy tensors out, over a transport.

A *transport* moves 32-bit register words and bytes of external memory; the driver does not
care how. It has four coroutines::

    async read32(offset) -> int          # a register, by byte offset (regmap.REGISTER_MAP)
    async write32(offset, value)
    async read_mem(addr, nbytes) -> bytes
    async write_mem(addr, data)

``bpsa.sim.testbenches.tb_accelerator.CocotbTransport`` is the cocotb/Verilator one (AXI4-Lite
master and AXI RAM of cocotbext-axi); the serial transport for a board has the same four
methods.

The driver lays tensors out as :mod:`bpsa.gateware.accelerator` documents (forward W and Y blocked
by ``cols`` output channels, everything else dense NCHW / KCRS), places them one after the other
in a memory region, writes the layer's program (its descriptor planned into instructions)
and PROG_ADDR / PROG_WORDS, starts the layer, waits for DONE, raises
:exc:`AcceleratorError` when STATUS.ERROR is set, reads the result and the counters.
A layer whose rows are too wide for the controller (one row band must fit a bank) runs as
column strips, one descriptor each (:func:`bpsa.plan.tiling.column_strips`).

Integers only: operands are ``operand_width``-bit (signed or not, per the configuration),
results ``acc_width``-bit two's complement (they wrap exactly as the hardware's accumulators
do). Values out of the operand range are refused with :exc:`ValueError` before anything runs.
"""

import numbers

import numpy as np

from bpsa.models import floating
from bpsa.plan import capability, tiling
from bpsa.plan.grammar import Refusal
from bpsa.spec import isa
from bpsa.host import mx_layout
from bpsa.spec.errors import error_name
from bpsa.spec.layer import (ConvLayer, check_fields, conv_operands, conv_params,
                             global_avg_window, out_size, pair, size_pair)
from bpsa.spec.numeric import element_bytes, operand_range, wrap_array
from bpsa.spec.regmap import (
    arithmetic_of,
    CONTROL_BITS,
    LAYER_FIELDS,
    COUNTERS,
    ID_VALUE,
    MAP_VERSION,
    POOL_LANES_BIT,
    REGISTER_MAP,
    POOL_KIND_NAMES,
    Mode,
    Phase,
)

__all__ = ["AcceleratorError", "BUDGET_FACTOR", "Driver", "baseline_gradient_operands",
           "baseline_loss_operands", "cycle_budget", "expected_cycles", "expected_pool_cycles",
           "plan"]


class AcceleratorError(RuntimeError):
    """The hardware refused or aborted a layer; ``code`` is STATUS.ERROR."""

    def __init__(self, code, what):
        self.code = code
        self.name = error_name(code)
        super().__init__(f"accelerator refused {what}: error {code:#04x} ({self.name})")


def _out_hw(h, w, r, s, stride, pad, dil):
    """``(OH, OW)``, 0 or negative when the dilated kernel does not fit (the hardware then
    refuses the layer with KERNEL_TOO_LARGE)."""
    return (out_size(h, r, stride[0], pad[0], dil[0]), out_size(w, s, stride[1], pad[1], dil[1]))


def plan(config, phase, layer, mode=None):
    """The controller's tiling of ``phase`` of ``layer`` (a :class:`bpsa.spec.layer.ConvLayer`;
    :func:`bpsa.plan.tiling.plan`: group sizes, row bands, run counts), or :exc:`ValueError`
    naming what does not fit (the hardware refuses the same layers with TOO_LARGE). ``mode``:
    the backward mode (default: the driver's, :func:`bpsa.plan.tiling.default_mode`)."""
    mode = mode or tiling.default_mode(config, phase)
    return tiling.plan(config, phase, layer, mode=mode)


#: Utilization below which :func:`expected_cycles` does not expect a phase to fall (measured
#: on the regression layers: forward 0.06-0.73, loss and gradient 0.016-0.18 with BP-im2col).
_FLOOR = {"forward": 0.05, "loss": 0.015, "gradient": 0.015, "fc_backward": 0.05}

#: How many times its :func:`expected_cycles` a layer may run before the driver gives up.
BUDGET_FACTOR = 20


def _layer_out_hw(layer):
    """``(OH, OW)`` of ``layer``, 0 where the dilated kernel does not fit (no exception)."""
    oh = out_size(layer.height, layer.kernel_h, layer.stride_h, layer.pad_h, layer.dil_h,
                  layer.pad_b)
    ow = out_size(layer.width, layer.kernel_w, layer.stride_w, layer.pad_w, layer.dil_w)
    return max(oh, 0), max(ow, 0)


def expected_cycles(config, phase, layer, *, baseline=False):
    """A generous estimate of the cycles of ``phase`` of ``layer`` (a
    :class:`bpsa.spec.layer.ConvLayer`; ``fc_backward``: batch N, C inputs, K outputs, 1 x 1):
    its MACs at the phase's lowest measured utilization (the traditional flow's a third of
    it) plus its tensors moved once by the DMA (progress bars; :func:`cycle_budget`). A kernel
    that does not fit counts no output (no exception). A grouped layer: its groups' (run one
    after the other)."""
    if getattr(layer, "groups", 1) > 1:
        return layer.groups * expected_cycles(config, phase, layer.group_layer(),
                                              baseline=baseline)
    n, c, h, w = layer.x_shape
    k, r, s = layer.out_channels, layer.kernel_h, layer.kernel_w
    oh, ow = _layer_out_hw(layer)
    rs = r * s
    macs = n * k * oh * ow * c * rs * (2 if phase == "fc_backward" else 1)
    elements = n * c * h * w + k * c * rs + n * k * oh * ow
    floor = _FLOOR[phase] * (0.3 if baseline else 1.0)
    return int(macs / (config.rows * config.cols * floor) + elements * 2 + 2000)


def cycle_budget(config, phase, layer, *, baseline=False):
    """The cycles the driver waits for the DONE of ``phase`` of ``layer`` (a
    :class:`bpsa.spec.layer.ConvLayer`; a pooling phase: its window as the kernel, ``K = C``):
    :data:`BUDGET_FACTOR` times :func:`expected_cycles` (:func:`expected_pool_cycles` for the
    pooling phases)."""
    if phase in ("pool_forward", "pool_backward"):
        n, c, h, w = layer.x_shape
        return BUDGET_FACTOR * expected_pool_cycles(phase, n, c, h, w, layer.kernel_h,
                                                    layer.kernel_w, *_layer_out_hw(layer))
    return BUDGET_FACTOR * expected_cycles(config, phase, layer, baseline=baseline)


def expected_pool_cycles(phase, n, c, h, w, r, s, oh, ow, stride=(1, 1)):
    """A generous estimate of a pooling layer's cycles: the pooling unit reads a window's
    taps one a cycle (forward), or for every dX element the dY of each window covering it and
    that window's taps again (backward, max), plus the tensors moved once."""
    planes, rs = n * c, r * s
    if phase == "pool_forward":
        work = oh * ow * (rs + 8)
    else:
        cover = -(-r // stride[0]) * -(-s // stride[1])
        work = h * w * (cover * (rs + 4) + 8)
    return int(planes * (work + 2 * (h * w + oh * ow)) + 2000)


def baseline_loss_operands(dy, w, input_hw, stride=1, padding=0, dilation=1):
    """``(z, wt, dil)``: the traditional loss as a forward convolution. ``z`` (N x K x (H +
    d(R-1)) x (W + d(S-1))) is dY with ``s - 1`` zeros between its pixels, shifted by
    ``d(R-1) - p`` (rows and columns outside ``z`` cropped); ``wt`` (C x K x R x S) is W turned
    by 180 degrees with its channel axes swapped: ``conv2d(z, wt, 1, 0, dil)`` is dX."""
    (sh, sw), (ph, pw), (dh, dw) = pair(stride), pair(padding), pair(dilation)
    dy, w = np.asarray(dy, dtype=np.int64), np.asarray(w, dtype=np.int64)
    n, k, oh, ow = dy.shape
    _, _, r, s = w.shape
    h, wd = input_hw
    drh, drw = dh * (r - 1), dw * (s - 1)
    z = np.zeros((n, k, h + drh, wd + drw), dtype=np.int64)
    rows = [(drh - ph + i * sh, i) for i in range(oh) if 0 <= drh - ph + i * sh < h + drh]
    cols = [(drw - pw + j * sw, j) for j in range(ow) if 0 <= drw - pw + j * sw < wd + drw]
    for zr, i in rows:
        for zc, j in cols:
            z[:, :, zr, zc] = dy[:, :, i, j]
    return z, np.ascontiguousarray(w[:, :, ::-1, ::-1].transpose(1, 0, 2, 3)), (dh, dw)


def baseline_gradient_operands(x, dy, kernel_hw, stride=1, padding=0, dilation=1):
    """``(xt, dd, stride)``: the traditional gradient as a forward convolution. ``xt`` (C x N
    x Hc x Wc) is X zero-padded and cropped to what the gradient reads, channels as the batch;
    ``dd`` (K x N x Hd x Wd, ``Hd = s(OH-1)+1``) is dY with ``s - 1`` zeros between its pixels:
    ``conv2d(xt, dd, dil, 0, 1)`` is dW with its first two axes swapped."""
    (sh, sw), (ph, pw), (dh, dw) = pair(stride), pair(padding), pair(dilation)
    x, dy = np.asarray(x, dtype=np.int64), np.asarray(dy, dtype=np.int64)
    n, k, oh, ow = dy.shape
    r, s = kernel_hw
    hd, wdd = sh * (oh - 1) + 1, sw * (ow - 1) + 1
    dd = np.zeros((n, k, hd, wdd), dtype=np.int64)
    dd[:, :, ::sh, ::sw] = dy
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    xp = xp[:, :, :hd + dh * (r - 1), :wdd + dw * (s - 1)]
    return (np.ascontiguousarray(xp.transpose(1, 0, 2, 3)),
            np.ascontiguousarray(dd.transpose(1, 0, 2, 3)), (dh, dw))


class Driver:
    """Runs layers on the accelerator behind ``transport`` (see the module docstring).

    Parameters
    ----------
    transport : object with ``read32``, ``write32``, ``read_mem``, ``write_mem`` coroutines
    config : bpsa.config.Config
        The configuration the hardware was generated for (checked against CFG_ARRAY at
        :meth:`open`).
    mem_base, mem_size : int
        The external memory region the driver may use for tensors; the DMA window is set to
        it, so the hardware cannot touch anything else.
    check : bool
        Refuse layers the buffers cannot hold (:func:`plan`) before touching the hardware;
        ``False`` sends them anyway (the hardware then answers TOO_LARGE).
    poll_interval, max_polls : int
        STATUS is read every ``poll_interval`` cycles (when the transport has ``idle``); a
        layer call gives up after its :func:`cycle_budget` (such a transport) or ``max_polls``
        reads without DONE (:exc:`TimeoutError` naming STATUS and BUSY_CYCLES).

    Attributes
    ----------
    space_to_depth : bool
        Run the layers :func:`bpsa.plan.tiling.rewrite_of` picks as their stride-1 layer
        (default; :attr:`rewrite` is then the last layer's rewrite); ``False`` runs every
        layer as given (the walkers' own strided runs).
    """

    def __init__(self, transport, config, *, mem_base=0, mem_size=1 << 20, poll_interval=64,
                 check=True, max_polls=1_000_000):
        self.t = transport
        self.config = config
        self.mem_base = mem_base
        self.mem_size = mem_size
        self.poll_interval = poll_interval
        self.ob = element_bytes(config.operand_width)
        self.ab = element_bytes(config.result_width)
        self.counters = {}
        self.check = check
        self.max_polls = max_polls
        self.plan = None
        self.mode = None
        self.rewrite = None                   # the last layer's space-to-depth rewrite
        self.space_to_depth = True            # False: no layer rewritten (the walkers' own)
        self._tensor_end = mem_base           # end of the last call's tensors
        self.program = []                     # the last layer's instruction words
        self.mx_scale_rule = "floor"          # MX: the quantizer's scale rule (quantize's)

    # --- registers ----------------------------------------------------------------------------
    async def open(self):
        """Check ID, VERSION and the array geometry; set the DMA window."""
        ident = await self.t.read32(REGISTER_MAP["ID"])
        if ident != ID_VALUE:
            raise AcceleratorError(0, f"ID register {ident:#x}, expected {ID_VALUE:#x}")
        version = await self.t.read32(REGISTER_MAP["VERSION"])
        if version >> 16 != MAP_VERSION[0]:
            raise RuntimeError(f"register map version {version >> 16}.{version & 0xFFFF}, "
                               f"driver speaks {MAP_VERSION[0]}.x")
        geo = await self.t.read32(REGISTER_MAP["CFG_ARRAY"])
        cfg = self.config
        want = cfg.rows | cfg.cols << 8 | cfg.operand_width << 16 | cfg.acc_width << 24
        if geo != want:
            raise RuntimeError(f"hardware CFG_ARRAY {geo:#010x} is not configuration "
                               f"{cfg.name!r} ({want:#010x})")
        features = await self.t.read32(REGISTER_MAP["CFG_FEATURES"])
        hw = arithmetic_of(features)
        if hw != cfg.arithmetic:
            raise RuntimeError(f"the hardware computes in {hw or 'an unknown format'}, "
                               f"configuration {cfg.name!r} in {cfg.arithmetic}")
        lanes = cfg.cols if features >> POOL_LANES_BIT & 1 else 1
        if cfg.has_pool() and lanes != cfg.pool_lanes:
            raise RuntimeError(f"the hardware's pooling unit has {lanes} lane(s), configuration "
                               f"{cfg.name!r} {cfg.pool_lanes}")
        await self.set_window(self.mem_base, self.mem_base + self.mem_size - 1)
        await self.t.write32(REGISTER_MAP["CONTROL"], 1 << CONTROL_BITS["CLEAR"])

    async def set_window(self, lo, hi):
        await self.t.write32(REGISTER_MAP["WINDOW_LO"], lo)
        await self.t.write32(REGISTER_MAP["WINDOW_HI"], hi)

    async def read_counters(self):
        out = {}
        for name, _ in COUNTERS:
            lo = await self.t.read32(REGISTER_MAP[f"{name.upper()}_LO"])
            hi = await self.t.read32(REGISTER_MAP[f"{name.upper()}_HI"])
            out[name] = hi << 32 | lo
        return out

    async def start(self, desc, budget=None):
        """Plan the layer ``desc`` (key of :data:`~bpsa.spec.regmap.LAYER_FIELDS` -> value)
        into its program (:func:`bpsa.plan.program.program_words`), write it to the top of the memory region
        (above the tensors), clear DONE, ERROR and the counters, START, wait for DONE. Returns
        STATUS.ERROR (0: success), or the planner's refusal code without touching the
        hardware; the counters then describe this layer alone. ``budget``: the cycles to wait
        at most (:func:`cycle_budget`; on a transport that counts cycles), else ``max_polls``
        STATUS reads; then :exc:`TimeoutError` with STATUS and the BUSY_CYCLES counter."""
        from bpsa.plan.instructions import program_words
        # the counters describe this layer alone (nothing, when it is refused)
        await self.t.write32(REGISTER_MAP["CONTROL"], 1 << CONTROL_BITS["CLEAR"])
        # a field a descriptor leaves out must not keep an earlier layer's value
        desc = {"REQUANT": 0, "OUT_SHIFT": 0, "RELU": 0, "POOL_KIND": 0, "MODE": 0, **desc}
        fields = {key: field for field, key, *_ in LAYER_FIELDS}
        layer = {fields[name]: int(value) for name, value in desc.items()}
        layer.update(window_lo=self.mem_base, window_hi=self.mem_base + self.mem_size - 1)
        try:
            words = program_words(self.config, layer)
        except Refusal as e:
            self.program = []
            return int(e.code)
        self.program = words
        nbytes = len(words) * isa.INSN_BYTES
        addr = (self.mem_base + self.mem_size - nbytes) // 64 * 64
        if addr < self._tensor_end:
            raise ValueError(f"the layer's tensors and its program ({len(words)} instructions) "
                             f"need {self._tensor_end - self.mem_base + nbytes} bytes, the "
                             f"memory region has {self.mem_size}")
        await self.t.write_mem(addr, b"".join(w.to_bytes(8, "little") for w in words))
        await self.t.write32(REGISTER_MAP["PROG_ADDR"], addr)
        await self.t.write32(REGISTER_MAP["PROG_WORDS"], len(words))
        await self.t.write32(REGISTER_MAP["CONTROL"], 1 << CONTROL_BITS["START"])
        cycled = hasattr(self.t, "idle")
        polls = self.max_polls
        if budget is not None and cycled:
            polls = max(1, -(-int(budget) // self.poll_interval))
        for _ in range(polls):
            status = await self.t.read32(REGISTER_MAP["STATUS"])
            if status & 2:
                return (status >> 8) & 0xFF
            if cycled:
                await self.t.idle(self.poll_interval)
        busy = (await self.read_counters())["busy_cycles"]
        waited = (f"{polls * self.poll_interval:,} cycles" if cycled
                  else f"{polls:,} STATUS reads")
        raise TimeoutError(f"no DONE after {waited} (STATUS {status:#x}: BUSY {status & 1}, "
                           f"ERROR {(status >> 8) & 0xFF}; BUSY_CYCLES {busy:,}); descriptor "
                           f"{desc}")

    # --- memory ---------------------------------------------------------------------------------
    def _check_operand(self, name, t):
        if self.config.is_float:
            return self._float_operand(name, t)
        if self.config.is_mx:           # quantized per phase by the layouts (bpsa.host.mx_layout)
            t = np.asarray(t)
            if t.dtype.kind not in "fiu":
                raise ValueError(f"{name} must hold real numbers (float32) for arithmetic "
                                 f"{self.config.arithmetic!r}, not {t.dtype}")
            return t.astype(np.float32)
        t = np.asarray(t)
        if t.dtype.kind not in "iu":
            raise ValueError(f"{name} must hold integers, not {t.dtype}")
        bits, signed = self.config.operand_width, self.config.operand_signed
        lo, hi = operand_range(self.config)
        if t.size and (t.min() < lo or t.max() > hi):
            raise ValueError(f"{name} has values outside the {bits}-bit "
                             f"{'signed' if signed else 'unsigned'} operand range [{lo}, {hi}]")
        return t.astype(np.int64)

    def _float_operand(self, name, t):
        """A floating-point configuration's operand as ``arithmetic`` encodings (int64):
        float32 (or float64, cast to float32) values rounded by the contract's conversion
        (:func:`bpsa.models.floating.from_float32`), ``ml_dtypes`` arrays of the format as
        they are, or integer arrays taken as encodings."""
        fmt = self.config.arithmetic
        t = np.asarray(t)
        if t.dtype.name in ("bfloat16", "float16") and t.dtype.itemsize == 2:
            if t.dtype.name != {"bf16": "bfloat16", "fp16": "float16"}[fmt]:
                raise ValueError(f"{name} holds {t.dtype.name}, the configuration's operands "
                                 f"are {fmt}")
            return t.view(np.uint16).astype(np.int64)
        if t.dtype.kind == "f":
            return floating.from_float32(t, fmt).astype(np.int64)
        if t.dtype.kind not in "iu":
            raise ValueError(f"{name} must hold {fmt} values (float32, ml_dtypes) or "
                             f"encodings (integers), not {t.dtype}")
        if t.size and (t.min() < 0 or t.max() >= 1 << 16):
            raise ValueError(f"{name} holds integers outside the 16-bit {fmt} encodings")
        return t.astype(np.int64)

    def _to_bytes(self, t, nbytes):
        return (np.asarray(t, dtype=np.int64).ravel() & ((1 << (8 * nbytes)) - 1)) \
            .astype(f"<u{nbytes}").tobytes()

    def _from_bytes(self, raw, shape):
        if self.config.is_mx:           # float32 results
            return np.frombuffer(raw, dtype="<f4").reshape(shape).copy()
        return self._wrap(np.frombuffer(raw, dtype=f"<u{self.ab}")).reshape(shape)

    def _place(self, sizes):
        """Byte addresses for regions of ``sizes`` bytes, 64-byte aligned, from mem_base."""
        addrs, at = [], self.mem_base
        for size in sizes:
            addrs.append(at)
            at += -(-size // 64) * 64
        if at > self.mem_base + self.mem_size:
            raise ValueError(f"tensors need {at - self.mem_base} bytes, the memory region has "
                             f"{self.mem_size}")
        self._tensor_end = at
        return addrs

    def blocked_w(self, w):
        """Forward W (``K x C x R x S``) as ``KT x C x R x S x cols`` (lanes past K zero)."""
        k, c, r, s = w.shape
        cols = self.config.cols
        kt = -(-k // cols)
        out = np.zeros((kt * cols, c, r, s), dtype=np.int64)
        out[:k] = w
        return out.reshape(kt, cols, c, r, s).transpose(0, 2, 3, 4, 1)

    def input_blocked_w(self, w):
        """W (``K x C x R x S``) for the zero-free loss: ``CT x K x R x S x cols``, the input
        channels as lanes (lanes past C zero)."""
        return self.channel_blocked(w, self.config.cols).transpose(1, 0, 2, 3, 4)

    def _mx_operands(self, phase, x, w, dy):
        """MX: the phase's operands quantized along its reduction axis and laid out
        (:mod:`bpsa.host.mx_layout`), as ``[(address register, flat uint8 array), ...]``."""
        from bpsa.models.mx import quantize
        cfg, rule = self.config, self.mx_scale_rule

        def q(t, axis):
            return quantize(t, cfg.arithmetic, axis=axis, scale_rule=rule)
        if phase == "forward":            # channel-first: X and W along C
            return [("ADDR_X", mx_layout.cf_x(*q(x, 1), cfg.rows)),
                    ("ADDR_W", mx_layout.cf_w(*q(w, 1), cfg.rows, cfg.cols))]
        if phase == "gradient":           # the zero-free walker's: X and dY along their rows
            return [("ADDR_DY", mx_layout.row_pitched(*q(dy, 3), cfg.cols)),
                    ("ADDR_X", mx_layout.row_pitched(*q(x, 3), cfg.feeder_bus_width))]
        raise ValueError(f"arithmetic {cfg.arithmetic!r} runs the loss as channel-first "
                         f"stride classes (Driver.loss)")

    @staticmethod
    def channel_blocked(t, lanes):
        """``N x C x H x W`` as ``N x ceil(C / lanes) x H x W x lanes`` (lanes past C zero):
        the zero-free gradient's X (``lanes = feeder_bus_width``) and dY (``lanes = cols``)."""
        n, c, h, w = t.shape
        ct = -(-c // lanes)
        out = np.zeros((n, ct * lanes, h, w), dtype=np.int64)
        out[:, :c] = t
        return out.reshape(n, ct, lanes, h, w).transpose(0, 1, 3, 4, 2)

    # --- phases ---------------------------------------------------------------------------------
    async def run(self, phase, *, x=None, w=None, dy=None, input_hw=None, kernel_hw=None,
                  stride=1, padding=0, dilation=1, mode=None, requant=None, relu=False,
                  plan=None):
        """Run one phase; returns its result (Y, dX or dW as int64 numpy arrays of the golden
        model's shapes) and keeps the counters in :attr:`counters`.

        forward: ``x`` (N x C x H x W), ``w`` (K x C x R x S); loss: ``dy`` (N x K x OH x OW),
        ``w``, ``input_hw``; gradient: ``x``, ``dy``, ``kernel_hw``. ``mode`` (loss,
        gradient): ``"zero_free"`` or ``"bp_im2col"``; default
        :func:`bpsa.plan.tiling.default_mode` (zero-free for the gradient when generated);
        forward: the front end, ``"feeder"`` (default) or ``"channel_first"`` (X goes out
        channel-blocked HWC, ``N x CT x H x W x L`` with ``L = min(C, rows)``, MODE 2).
        A mode the configuration does not generate for the phase is refused
        (:exc:`ValueError`). ``requant`` (forward, zero-free loss): a shift; the output
        leaves as operands, :func:`bpsa.models.golden.requantize` of the accumulators (the
        descriptor's REQUANT and OUT_SHIFT). ``relu`` (forward): the output leaves as
        ``max(0, y)`` (the descriptor's RELU, after the requantization). ``plan``: the
        layer's tiling as :func:`bpsa.plan.tiling.plan_or_strips` gives it for this phase and
        mode, when the caller has it already (:func:`bpsa.sim.accel_run.check_job` checks a
        layer before the run and hands its plan on); computed here when ``None``."""
        if phase not in capability.PHASES:
            raise ValueError(f"phase must be one of forward, loss, gradient (fc_backward has "
                             f"its own method), not {phase!r}")
        mode = capability.check(self.config, phase, mode=mode, requant=requant, relu=relu)
        self.rewrite = None
        zf = phase == "gradient" and mode == "zero_free"
        zl = phase == "loss" and mode == "zero_free"
        cfx = phase == "forward" and mode == "channel_first"
        self.mode = mode if phase != "forward" or cfx else None
        cols = self.config.cols
        x, w, dy = (None if t is None else self._check_operand(name, t)
                    for name, t in (("x", x), ("w", w), ("dy", dy)))
        # the operands' shapes against each other; a kernel larger than the padded input
        # goes to the hardware, which refuses it (KERNEL_TOO_LARGE)
        layer = conv_operands(phase, x=x, w=w, dy=dy, input_hw=input_hw, kernel_hw=kernel_hw,
                              stride=stride, padding=padding, dilation=dilation, fit=False)
        (n, c, h, wd), (k, _, r, s) = layer.x_shape, layer.w_shape
        stride, pad, dil = layer.stride, layer.pad, layer.dil
        oh, ow = _out_hw(h, wd, r, s, stride, pad, dil)
        sd = (tiling.rewrite_of(self.config, phase, layer, mode)
              if self.check and self.space_to_depth and oh > 0 < ow
              and not self.config.is_mx else None)
        if sd is not None:
            return await self._run_space_to_depth(phase, sd, x, w, dy, mode, requant, relu, plan)
        if oh > 0 and ow > 0 and self.check:
            p = plan
            if p is None:
                try:
                    p = tiling.plan_or_strips(self.config, phase, layer, mode=mode)
                except ValueError as e:
                    raise ValueError(f"{phase} layer does not fit configuration "
                                     f"{self.config.name!r}: {e}") from None
            if "strips" in p:
                if self.config.is_mx:
                    raise ValueError(f"{phase} layer does not fit configuration "
                                     f"{self.config.name!r}: it needs column strips, which "
                                     f"are not built in {self.config.arithmetic!r} yet")
                return await self._run_strips(phase, p, x, w, dy, layer, mode, requant,
                                              relu)
            self.plan = p
        try:
            layer.check_fields(self.config.dim_width)
        except ValueError as e:
            raise ValueError(f"{phase} layer does not fit configuration "
                             f"{self.config.name!r}: {e}") from None
        kt = -(-k // cols)
        ins, out_shape = [], None
        if self.config.is_mx:
            ins = self._mx_operands(phase, x, w, dy)
            out_elems = (n * kt * max(oh, 0) * max(ow, 0) * cols if cfx
                         else kt * c * r * s * cols)
        elif cfx:
            ins = [("ADDR_X", self.channel_blocked(x, min(c, self.config.rows))),
                   ("ADDR_W", self.blocked_w(w))]
            out_elems = n * kt * max(oh, 0) * max(ow, 0) * cols
        elif phase == "forward":
            ins = [("ADDR_X", x), ("ADDR_W", self.blocked_w(w))]
            out_elems = n * kt * max(oh, 0) * max(ow, 0) * cols
        elif zl:
            ins = [("ADDR_W", self.input_blocked_w(w)),
                   ("ADDR_DY", self.channel_blocked(dy, cols))]
            out_elems = n * -(-c // cols) * h * wd * cols
        elif phase == "loss":
            ins = [("ADDR_W", w), ("ADDR_DY", dy)]
            out_elems, out_shape = n * c * h * wd, (n, c, h, wd)
        elif zf:
            ins = [("ADDR_DY", self.channel_blocked(dy, cols)),
                   ("ADDR_X", self.channel_blocked(x, self.config.feeder_bus_width))]
            out_elems = kt * c * r * s * cols
        else:
            ins = [("ADDR_DY", dy), ("ADDR_X", x)]
            out_elems, out_shape = k * c * r * s, (k, c, r, s)
        eb = self.ab if requant is None else self.ob        # bytes of an output element
        sizes = [t.size * self.ob for _, t in ins] + [max(out_elems, 1) * eb]
        addrs = self._place(sizes)
        for (_, t), addr in zip(ins, addrs):
            await self.t.write_mem(addr, self._to_bytes(t, self.ob))
        desc = {"PHASE": Phase[phase.upper()], "N": n, "C": c, "H": h, "W": wd, "K": k, "R": r,
                "S": s, "STRIDE_H": stride[0], "STRIDE_W": stride[1], "PAD_H": pad[0],
                "PAD_W": pad[1], "DIL_H": dil[0], "DIL_W": dil[1],
                "MODE": (Mode.ZERO_FREE if zf or zl else
                         Mode.CHANNEL_FIRST if cfx else Mode.BP_IM2COL),
                "REQUANT": int(requant is not None), "OUT_SHIFT": requant or 0,
                "RELU": int(relu)}
        desc.update({name: addr for (name, _), addr in zip(ins, addrs)})
        desc["ADDR_OUT"] = addrs[-1]
        error = await self.start(desc, budget=cycle_budget(self.config, phase, layer))
        self.counters = await self.read_counters()
        if error:
            raise AcceleratorError(error, f"{phase} layer {desc}")
        raw = await self.t.read_mem(addrs[-1], out_elems * eb)
        if requant is not None:         # operands
            vals = np.frombuffer(raw, dtype=f"<u{self.ob}")
            conv = vals.astype(np.int64) if self.config.is_float else \
                wrap_array(vals, self.config.operand_width, self.config.operand_signed)
        if phase == "forward":             # channel-first: K-block major (a run's images)
            shape = (kt, n, oh, ow, cols) if cfx else (n, kt, oh, ow, cols)
            y = conv.reshape(shape) if requant is not None else self._from_bytes(raw, shape)
            y = y.transpose(1, 0, 4, 2, 3) if cfx else y.transpose(0, 1, 4, 2, 3)
            return y.reshape(n, kt * cols, oh, ow)[:, :k]
        if zf:
            dw = self._from_bytes(raw, (kt, c, r, s, cols))
            return dw.transpose(0, 4, 1, 2, 3).reshape(kt * cols, c, r, s)[:k]
        if zl:
            ct = -(-c // cols)
            dx = (conv.reshape(n, ct, h, wd, cols) if requant is not None
                  else self._from_bytes(raw, (n, ct, h, wd, cols)))
            return dx.transpose(0, 1, 4, 2, 3).reshape(n, ct * cols, h, wd)[:, :c]
        return self._from_bytes(raw, out_shape)

    async def _run_space_to_depth(self, phase, sd, x, w, dy, mode, requant, relu, plan):
        """Run the forward or the zero-free gradient of a layer as
        :func:`bpsa.plan.space_to_depth.rewrite` rewrites it: the stride-1 layer of the phase
        planes ``X'`` (one descriptor; ``plan``, when given, is the inner layer's, as
        :func:`bpsa.plan.tiling.plan_or_strips` gives it): the forward's Y as it comes, the
        gradient's ``dW`` gathered from ``dW'``. :attr:`counters` and :attr:`plan` are the
        inner run's, :attr:`rewrite` is ``sd``. (A driver without checks, ``check=False``,
        sends every layer as it is.)"""
        i = sd.inner
        args = dict(stride=1, padding=i.pad, mode=mode, plan=plan)
        if phase == "forward":
            out = await self.run("forward", x=sd.x(x), w=sd.weights(w), requant=requant,
                                 relu=relu, **args)
        else:
            out = sd.dw(await self.run("gradient", x=sd.x(x), dy=dy,
                                       kernel_hw=(i.kernel_h, i.kernel_w), **args))
        self.rewrite = sd
        return out

    async def _run_strips(self, phase, cut, x, w, dy, layer, mode, requant, relu=False):
        """Run a layer too wide for the controller as :func:`bpsa.plan.tiling.column_strips`, one
        descriptor a strip: gather each strip's operands on the host (padding columns as
        zeros, ``pad_w = 0``), put the pieces together (the gradient's partial dW added in
        strip order with ``acc_width``-bit wrap-around, as the hardware's accumulators do;
        floating point: from ``+0`` with the contract's fp32 addition,
        :func:`bpsa.models.floating.add_fast`, as the P buffer adds). :attr:`counters`
        are the sums of every strip's; :attr:`plan` is ``{"strips": [...], "plans": [...]}``.
        ``layer``: the whole layer's :class:`bpsa.spec.layer.ConvLayer`."""
        (n, c, h, wd), (k, _, r, s) = layer.x_shape, layer.w_shape
        stride, pad, dil = layer.stride, layer.pad, layer.dil
        pw, sub = pad[1], {"stride": stride, "padding": (pad[0], 0), "dilation": dil}
        oh, ow = _out_hw(h, wd, r, s, stride, pad, dil)
        if phase != "loss":
            xp = np.pad(x, ((0, 0), (0, 0), (0, 0), (pw, pw)))
        out = np.zeros({"forward": (n, k, oh, ow), "loss": (n, c, h, wd),
                        "gradient": (k, c, r, s)}[phase], dtype=np.int64)
        total = {}
        for st in cut["strips"]:
            if st.in_cols == 0:         # a loss strip no dY column reaches: dX is zero
                continue
            if phase == "forward":
                part = await self.run("forward", x=xp[..., st.in0 + pw:][..., :st.in_cols],
                                      w=w, requant=requant, relu=relu, mode=mode, **sub)
                out[..., st.out0:st.out0 + st.out_cols] = part
            elif phase == "loss":
                part = await self.run("loss", dy=dy[..., st.in0:st.in0 + st.in_cols], w=w,
                                      input_hw=(h, st.engine_w), mode=mode,
                                      requant=requant, **sub)
                keep = part[..., st.skip:st.skip + st.out_cols]
                out[..., st.out0:st.out0 + keep.shape[-1]] = keep
            else:
                part = await self.run("gradient", x=xp[..., st.in0 + pw:][..., :st.in_cols],
                                      dy=dy[..., st.out0:st.out0 + st.out_cols],
                                      kernel_hw=(r, s), mode=mode, **sub)
                out = (floating.add_fast(out, part).astype(np.int64) if self.config.is_float
                       else self._wrap(out + part))
            total = {name: v + total.get(name, 0) for name, v in self.counters.items()}
        self.counters = total
        self.plan = cut
        return out

    def _wrap(self, v):
        """``v`` as ``acc_width``-bit two's complement values (floating point: the fp32
        encodings, unsigned)."""
        if self.config.is_float:
            return np.asarray(v, dtype=np.int64) & 0xFFFFFFFF
        return wrap_array(v, self.config.acc_width)

    async def fc_backward(self, x, w, dy, interleaved=None):
        """Backward pass of a fully connected layer ``y = x w^T`` (``x``: N x C, ``w``: K x C,
        ``dy``: N x K): ``(dx, dw)`` with ``dx = dy w`` (N x C) and ``dw = dy^T x`` (K x C).

        ``interleaved`` (default: when the configuration generates the ``interleaved`` and
        ``is`` dataflows and the layer fits :func:`bpsa.plan.tiling.fc_plan`): one PHASE 3
        descriptor; the backward engine computes dX and dW in one pass in InterGrad's
        interleaved dataflow, and ADDR_OUT receives dX (N x C) then dW (K x C) as accumulators.
        Otherwise (also for layers with ``K >= buf_p_depth`` outputs, which PHASE 3 refuses)
        the loss and the gradient of the equivalent 1x1 convolution on 1x1 images, two
        descriptors one after the other (the counters are then the sums of both runs')."""
        x, w, dy = (self._check_operand(name, t) for name, t in (("x", x), ("w", w),
                                                                 ("dy", dy)))
        if x.ndim != 2 or w.ndim != 2 or dy.ndim != 2:
            raise ValueError(f"fc_backward takes matrices x (N x C), w (K x C), dy (N x K), "
                             f"not shapes {x.shape}, {w.shape}, {dy.shape}")
        (n, c), (k, c2), (n2, k2) = x.shape, w.shape, dy.shape
        if c2 != c or n2 != n or k2 != k:
            raise ValueError(f"fc_backward shapes do not chain: x {x.shape}, w {w.shape}, "
                             f"dy {dy.shape}")
        try:
            check_fields(self.config.dim_width, "FC layer", N=n, I=c, O=k)
        except ValueError as e:
            raise ValueError(f"fc_backward does not fit configuration {self.config.name!r}: "
                             f"{e}") from None
        if interleaved is None:
            interleaved = self.config.has("interleaved") and self.config.has("is")
            if interleaved and n and c and k:
                try:
                    tiling.fc_plan(self.config, n, c, k)
                except ValueError:
                    interleaved = False
        if not interleaved:
            dy4, w4, x4 = dy.reshape(n, k, 1, 1), w.reshape(k, c, 1, 1), x.reshape(n, c, 1, 1)
            dx = await self.loss(dy4, w4, (1, 1))
            first = dict(self.counters)
            dw = await self.gradient(x4, dy4, (1, 1))
            self.counters = {name: v + first.get(name, 0) for name, v in self.counters.items()}
            return dx.reshape(n, c), dw.reshape(k, c)
        if self.check and n and c and k:
            try:
                self.plan = tiling.fc_plan(self.config, n, c, k)
            except ValueError as e:
                raise ValueError(f"FC layer does not fit configuration {self.config.name!r}: "
                                 f"{e}") from None
        ins = [("ADDR_X", x), ("ADDR_W", w), ("ADDR_DY", dy)]
        sizes = [t.size * self.ob for _, t in ins] + [max((n + k) * c, 1) * self.ab]
        addrs = self._place(sizes)
        for (_, t), addr in zip(ins, addrs):
            await self.t.write_mem(addr, self._to_bytes(t, self.ob))
        desc = {"PHASE": Phase.FC_BACKWARD, "N": n, "C": c, "H": 1, "W": 1, "K": k,
                "R": 1, "S": 1, "STRIDE_H": 1, "STRIDE_W": 1, "PAD_H": 0, "PAD_W": 0,
                "DIL_H": 1, "DIL_W": 1, "ADDR_OUT": addrs[-1]}
        desc.update({name: addr for (name, _), addr in zip(ins, addrs)})
        error = await self.start(desc, budget=cycle_budget(
            self.config, "fc_backward", ConvLayer.conv(n, c, 1, 1, k, 1, 1)))
        self.counters = await self.read_counters()
        if error:
            raise AcceleratorError(error, f"fc_backward layer {desc}")
        raw = await self.t.read_mem(addrs[-1], (n + k) * c * self.ab)
        out = self._from_bytes(raw, ((n + k) * c,))
        return out[:n * c].reshape(n, c), out[n * c:].reshape(k, c)

    # --- pooling -----------------------------------------------------------------------------------
    def _pool_args(self, x, kind, kernel, stride, padding):
        """``(x, kind name for the hardware, (r, s), stride, pad)`` checked; global average
        pooling is ``avg`` over the whole plane."""
        x = self._check_operand("x", x)
        if x.ndim != 4:
            raise ValueError(f"x must be N x C x H x W, not shape {x.shape}")
        kinds = ("max", "avg", "global_avg")
        if kind not in kinds:
            raise ValueError(f"pooling kind must be one of {', '.join(kinds)}, not {kind!r}")
        hw_kind = "avg" if kind == "global_avg" else kind
        if not self.config.has_pool(hw_kind):
            raise ValueError(f"pooling kind {kind!r} is not generated by configuration "
                             f"{self.config.name!r} (its pool_kinds: "
                             f"{list(self.config.pool_kinds) or 'none'})")
        if kind == "global_avg":
            return (x, hw_kind, *global_avg_window(*x.shape[2:]))
        if kernel is None:
            raise ValueError(f"{kind} pooling needs a kernel")
        rs = size_pair(kernel, "kernel")
        st, pad, _ = conv_params(rs if stride is None else stride, padding, 1)
        return x, hw_kind, rs, st, pad

    async def _pool_run(self, phase, x, dy, kind, kernel, stride, padding, relu, requant):
        x, hw_kind, (r, s), st, pad = self._pool_args(x, kind, kernel, stride, padding)
        n, c, h, wd = x.shape
        oh, ow = _out_hw(h, wd, r, s, st, pad, (1, 1))
        limit = capability.requant_limit(self.config)
        if requant is not None and (isinstance(requant, bool) or not isinstance(
                requant, numbers.Integral) or not 0 <= requant <= limit):
            raise ValueError(f"requant (a shift) must be an integer in [0, {limit}], not "
                             f"{requant!r}")
        try:
            check_fields(self.config.dim_width, f"{phase} layer", N=n, C=c, H=h, W=wd, R=r,
                         S=s, stride=st, pad=pad)
        except ValueError as e:
            raise ValueError(f"{phase} layer does not fit configuration "
                             f"{self.config.name!r}: {e}") from None
        self.plan = None
        if self.check:          # check off: the hardware refuses what does not fit
            try:
                self.plan = tiling.pool_plan(self.config, phase, n, c, h, wd, r, s, st, pad,
                                             hw_kind, relu)
            except ValueError as e:
                raise ValueError(f"{phase} layer does not fit configuration "
                                 f"{self.config.name!r}: {e}") from None
        # with pool_lanes, the tensors channel-blocked by them (planes past C zero)
        lanes = self.config.pool_lanes
        blocked = (lambda t: t) if lanes == 1 else (lambda t: self.channel_blocked(t, lanes))
        ins = [("ADDR_X", blocked(x))]
        if phase == "pool_backward":
            dy = self._check_operand("dy", dy)
            if dy.shape != (n, c, oh, ow):
                raise ValueError(f"dy must have the pooling's output shape {(n, c, oh, ow)}, "
                                 f"not {dy.shape}")
            ins.append(("ADDR_DY", blocked(dy)))
            out_shape = (n, c, h, wd)
        else:
            out_shape = (n, c, oh, ow)
        eb = self.ab if requant is None else self.ob
        cb = -(-c // lanes) * lanes                  # the planes in memory
        count = int(np.prod(out_shape)) // c * cb
        sizes = [t.size * self.ob for _, t in ins] + [max(count, 1) * eb]
        addrs = self._place(sizes)
        for (_, t), addr in zip(ins, addrs):
            await self.t.write_mem(addr, self._to_bytes(t, self.ob))
        by_name = {name: k for k, name in POOL_KIND_NAMES.items()}
        desc = {"PHASE": Phase[phase.upper()], "N": n, "C": c, "H": h, "W": wd, "K": c,
                "R": r, "S": s, "STRIDE_H": st[0], "STRIDE_W": st[1], "PAD_H": pad[0],
                "PAD_W": pad[1], "DIL_H": 1, "DIL_W": 1, "MODE": 0,
                "REQUANT": int(requant is not None), "OUT_SHIFT": requant or 0,
                "RELU": int(relu), "POOL_KIND": by_name[hw_kind], "ADDR_OUT": addrs[-1]}
        desc.update({name: addr for (name, _), addr in zip(ins, addrs)})
        error = await self.start(desc, budget=cycle_budget(
            self.config, phase, ConvLayer.conv(n, c, h, wd, c, r, s, st, pad)))
        self.counters = await self.read_counters()
        if error:
            raise AcceleratorError(error, f"{phase} layer {desc}")
        raw = await self.t.read_mem(addrs[-1], count * eb)
        mem_shape = ((n, cb) + out_shape[2:] if lanes == 1 else
                     (n, cb // lanes) + out_shape[2:] + (lanes,))
        if requant is not None:
            vals = np.frombuffer(raw, dtype=f"<u{self.ob}")
            if self.config.is_float:        # the operand format's encodings
                out = vals.astype(np.int64).reshape(mem_shape)
            else:
                out = wrap_array(vals, self.config.operand_width,
                                 self.config.operand_signed).reshape(mem_shape)
        else:
            out = self._from_bytes(raw, mem_shape)
        if lanes > 1:                       # N x CB x H x W x lanes -> N x C x H x W
            out = out.transpose(0, 1, 4, 2, 3).reshape((n, cb) + out_shape[2:])
        return out[:, :c]

    async def pool(self, x, kind, kernel=None, stride=None, padding=0, relu=False):
        """Pooling forward (PHASE 4) of ``x`` (N x C x H x W operands): ``kind`` ``"max"``,
        ``"avg"`` or ``"global_avg"`` (``avg`` over the whole plane), :func:`bpsa.models.
        golden.pool2d`'s semantics; ``stride`` defaults to the kernel. Returns N x C x OH x OW
        operands (the unit's results leave requantized with shift 0, which changes nothing).
        ``relu``: ``max(0, y)`` on the store path."""
        return await self._pool_run("pool_forward", x, None, kind, kernel, stride, padding,
                                    relu, 0)

    async def pool_backward(self, dy, x, kind, kernel=None, stride=None, padding=0,
                            relu=False, requant=None):
        """Pooling backward (PHASE 5): dX (N x C x H x W) of :meth:`pool` for ``dy``, as
        :func:`bpsa.models.golden.pool2d_backward` (max: to the first maximum of each window;
        avg: col2im of dY divided by ``R S``, rounded), accumulators; ``requant`` (a shift):
        operands instead. ``relu``: dX is 0 where ``x`` is not positive (the ReLU's backward
        when ``x`` is the ReLU's output; a 1 x 1 max pooling with ``relu`` is the ReLU's
        backward alone)."""
        return await self._pool_run("pool_backward", x, dy, kind, kernel, stride, padding,
                                    relu, requant)

    # --- the traditional flow, for comparison ----------------------------------------------------
    async def loss_baseline(self, dy, w, input_hw, stride=1, padding=0, dilation=1,
                            plan=None):
        """dX the traditional way: :func:`baseline_loss_operands` builds the zero-inserted,
        padded dY (zeros stored in memory) and the rotated, channel-transposed W on the host,
        and the accelerator runs their stride-1 *forward* convolution. Same result as
        :meth:`loss`; the counters show what the zero-spaces cost. ``plan``: that forward's
        (see :meth:`run`)."""
        dy, w = self._check_operand("dy", dy), self._check_operand("w", w)
        conv_operands("loss", dy=dy, w=w, input_hw=input_hw, stride=stride, padding=padding,
                      dilation=dilation)
        zp, wt, d = baseline_loss_operands(dy, w, input_hw, stride, padding, dilation)
        return await self.forward(zp, wt, 1, 0, d, plan=plan)

    async def gradient_baseline(self, x, dy, kernel_hw, stride=1, padding=0, dilation=1,
                                plan=None):
        """dW the traditional way: :func:`baseline_gradient_operands` builds the padded X and
        the zero-inserted (dilated) dY on the host; the accelerator runs the forward
        convolution of X (channels as the batch) by dY (the kernel, stride = dilation).
        ``plan``: that forward's (see :meth:`run`)."""
        x, dy = self._check_operand("x", x), self._check_operand("dy", dy)
        conv_operands("gradient", x=x, dy=dy, kernel_hw=kernel_hw, stride=stride,
                      padding=padding, dilation=dilation)
        xt, dd, d = baseline_gradient_operands(x, dy, kernel_hw, stride, padding, dilation)
        out = await self.forward(xt, dd, d, 0, 1, plan=plan)
        return out.transpose(1, 0, 2, 3)

    async def forward(self, x, w, stride=1, padding=0, dilation=1, requant=None, relu=False,
                      frontend=None, plan=None):
        return await self.run("forward", x=x, w=w, stride=stride, padding=padding,
                              dilation=dilation, requant=requant, relu=relu, mode=frontend,
                              plan=plan)

    async def loss(self, dy, w, input_hw, stride=1, padding=0, dilation=1, mode=None,
                   requant=None, plan=None):
        """The loss dX; ``mode``: ``"zero_free"``, ``"bp_im2col"`` (see :meth:`run`) or
        ``"channel_first"``: each stride class as a stride-1 forward convolution of dY on the
        channel-first front end (:mod:`bpsa.plan.loss_classes`; one descriptor a class, no
        inserted zero read or multiplied; ``plan``: ``{"classes": [plan, ...]}``, a class's
        forward plan each, in the order of :func:`bpsa.plan.loss_classes.class_jobs`)."""
        if capability.resolve_mode(self.config, "loss", mode) == "channel_first":
            return await self._loss_channel_first(dy, w, input_hw, stride, padding, dilation,
                                                  requant, plan)
        return await self.run("loss", dy=dy, w=w, input_hw=input_hw, stride=stride,
                              padding=padding, dilation=dilation, mode=mode, requant=requant,
                              plan=plan)

    async def _loss_channel_first(self, dy, w, input_hw, stride, padding, dilation, requant,
                                  plan=None):
        from bpsa.plan.loss_classes import class_jobs, place
        capability.check(self.config, "loss", mode="channel_first", requant=requant)
        dy, w = self._check_operand("dy", dy), self._check_operand("w", w)
        layer = conv_operands("loss", dy=dy, w=w, input_hw=input_hw, stride=stride,
                              padding=padding, dilation=dilation)
        stride, pad, dil = layer.stride, layer.pad, layer.dil
        h, wd, c = layer.height, layer.width, layer.channels
        dx = np.zeros((dy.shape[0], c, h, wd), dtype=np.float32 if self.config.is_mx else np.int64)
        total, runs = {}, []
        jobs = class_jobs(dy, w, (h, wd), stride, pad, dil)
        plans = plan["classes"] if plan is not None else [None] * len(jobs)
        if len(plans) != len(jobs):
            raise ValueError(f"the plan has {len(plans)} stride classes, the layer {len(jobs)}")
        for job, class_plan in zip(jobs, plans):
            y = await self.run("forward", x=job.x, w=job.w, stride=1, padding=job.padding,
                               dilation=job.dilation, requant=requant, mode="channel_first",
                               plan=class_plan)
            place(dx, job, y, stride)
            total = {name: v + total.get(name, 0) for name, v in self.counters.items()}
            runs.append({"class": (job.a, job.b), "plan": self.plan})
        # (no class at all: every dY element lands in the padding, dX is zero)
        self.counters = total or {name: 0 for name, _ in COUNTERS}
        self.plan, self.mode = {"classes": runs}, "channel_first"
        return dx

    async def gradient(self, x, dy, kernel_hw, stride=1, padding=0, dilation=1, mode=None,
                       plan=None):
        return await self.run("gradient", x=x, dy=dy, kernel_hw=kernel_hw, stride=stride,
                              padding=padding, dilation=dilation, mode=mode, plan=plan)
