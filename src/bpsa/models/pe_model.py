"""Cycle model of the processing element, written from its contract (no Amaranth imports).

The model is a plain Python object: :meth:`PEModel.step` takes one cycle's inputs and returns the
outputs visible after the clock edge. Testbenches (Amaranth simulator and cocotb/Verilator) drive
the RTL and this model with the same stimulus and compare every output every cycle.
"""

from dataclasses import dataclass

import numpy as np

from bpsa.config import FLOAT_WIDTHS, MAC_LATENCY, context_gap, os_partials
from bpsa.spec.numeric import wrap, wrap_array

__all__ = ["MODES", "OUTPUTS", "PORTS", "PEModel", "PEParams", "pe_matmul", "random_stimulus",
           "with_zero_flags", "wrap"]

#: PE mode encodings (the RTL's ``PEMode``).
MODES = {"os": 0, "hold": 1, "interleaved": 2}

#: Model input name -> PE port name.
PORTS = {"mode": "mode", "h": "h_in", "h_valid": "h_valid_in", "h_last": "h_last_in",
         "v": "v_in", "v_valid": "v_valid_in", "v_tag": "v_tag_in", "p": "p_in",
         "h_zero": "h_zero_in", "v_zero": "v_zero_in",
         "chain_in": "chain_in", "wchain": "wchain_in", "shift": "shift", "load": "load"}

#: PE output ports compared every cycle.
OUTPUTS = ("h_out", "h_valid_out", "h_last_out", "v_out", "v_valid_out", "v_tag_out",
           "h_zero_out", "v_zero_out", "p_out", "chain_out", "wchain_out", "fired", "gated")


def with_zero_flags(p, c):
    """The inputs ``c`` of a cycle with the operands' zero flags a zero-gating PE takes beside
    them (``h_zero``, ``v_zero``: 1 when ``h`` / ``v`` is zero)."""
    if p.zero_gating:
        c["h_zero"] = int(p.zero(c.get("h", 0)))
        if "os" in p.dataflows or "interleaved" in p.dataflows:
            c["v_zero"] = int(p.zero(c.get("v", 0)))
    return c


@dataclass(frozen=True)
class PEParams:
    """What the model needs to know of a configuration (read from the config JSON or object)."""
    operand_width: int
    operand_signed: bool
    acc_width: int
    dataflows: tuple
    zero_gating: bool
    reserve_registers: bool
    arithmetic: str = "int"

    @classmethod
    def of(cls, cfg):
        get = (lambda k: cfg[k]) if isinstance(cfg, dict) else (lambda k: getattr(cfg, k))
        return cls(get("operand_width"), get("operand_signed"), get("acc_width"),
                   tuple(get("dataflows")), get("zero_gating"), get("reserve_registers"),
                   get("arithmetic"))

    @property
    def mac_latency(self):
        """Cycles from a slot's operands to its product's addition (``MAC_LATENCY``)."""
        return MAC_LATENCY[self.arithmetic]

    @property
    def is_float(self):
        return self.arithmetic in FLOAT_WIDTHS

    @property
    def fp8_blocks(self):
        """MX with FP8 elements (``docs/architecture/mx.md``): operands are element codes, an
        accumulator a block's exact sum in ``acc_width - 1`` bits with a NaN flag above it
        (unsigned as a whole)."""
        return self.arithmetic == "mxfp8_e4m3"

    def zero(self, x):
        """Whether the operand ``x`` is a zero (an FP8 code of either sign)."""
        return (x & 0x7F) == 0 if self.fp8_blocks else x == 0

    def mul(self, a, b):
        """The product the multiplier gives for the operands ``a`` and ``b``."""
        if not self.fp8_blocks:
            return a * b
        return int(self.matmul(np.array([[a]]), np.array([[b]]))[0, 0])

    def matmul(self, a, b):
        """The accumulators of ``a @ b`` as the PEs hold them (:func:`pe_matmul`)."""
        return pe_matmul(a, b, self.arithmetic, self.acc_width)

    def add(self, x, y):
        """``x + y`` as the accumulator adds (FP8 blocks: the sums wrapped below the NaN
        flags, which are or-ed; the result unsigned)."""
        if not self.fp8_blocks:
            return wrap(x + y, self.acc_width)
        w = self.acc_width - 1
        x, y = x % (1 << self.acc_width), y % (1 << self.acc_width)
        total = (wrap(x, w) + wrap(y, w)) % (1 << w)
        return total | ((x | y) >> w << w)

    @property
    def os_partials(self):
        """Words an output-stationary PE drains (``bpsa.config.os_partials``)."""
        return os_partials(self.arithmetic)

    @property
    def held(self):
        return any(d in self.dataflows for d in ("ws", "is", "interleaved"))

    @property
    def vertical_width(self):
        return self.acc_width if self.held else self.operand_width

    @property
    def vertical_signed(self):
        return (not self.fp8_blocks) if self.held else self.operand_signed

    @property
    def acc_signed(self):
        """Accumulators read as signed integers, or (floating point, FP8 blocks) unsigned
        encodings."""
        return not (self.is_float or self.fp8_blocks)


class PEModel:
    """The PE's registers and its pipelined multiply-accumulate (the contract in
    ``bpsa.gateware.array.pe.PE``): a slot's operands are taken in stage 0, its product is added in
    the add stage, ``L = mac_latency`` cycles later."""

    def __init__(self, cfg):
        self.p = PEParams.of(cfg)
        L = self.p.mac_latency
        if L < 2:
            raise ValueError(f"the PE model needs mac_latency >= 2, not {L}")
        self.acc = 0
        self.res = 0
        self.w = 0
        self.wchain = 0
        # the products of the slots in stages 0 .. L - 1 on their way to the add stage, the
        # oldest first (0 where the slot did not fire)
        self.products = [0] * L
        # per stage 1 .. L, the last first: (accumulate, OS end, interleaved end) of the slot
        self.flags = [(False, False, False)] * L
        self.out = {k: 0 for k in OUTPUTS}

    def _op(self, x):
        return wrap(x, self.p.operand_width, self.p.operand_signed)

    def step(self, i):
        """Advance one clock. ``i`` holds the inputs (missing ones are 0): mode, h, h_valid,
        h_last, v, v_valid, v_tag, p, chain_in, wchain, shift, load. Returns the outputs after
        the edge."""
        p = self.p
        g = lambda k: i.get(k, 0)
        mode = g("mode")
        has = lambda d: d in p.dataflows
        generated = {"os": has("os"), "hold": has("ws") or has("is"),
                     "interleaved": has("interleaved")}
        only = sum(generated.values()) == 1      # then the mode input is not decoded
        is_os, is_hold, is_il = (generated[k] and (only or mode == MODES[k])
                                 for k in ("os", "hold", "interleaved"))
        il_hold = is_il and g("v_tag") == 1
        il_os = is_il and not il_hold
        use_w = is_hold or il_hold

        # Stage 0: the slot presented now.
        a = g("h")
        b = self.w if use_w else self._op(g("v"))
        active = bool(g("h_valid") and g("v_valid"))
        zero = p.zero_gating and (p.zero(a) or p.zero(b))
        fire = active and not zero
        end = bool(g("h_valid") and g("h_last"))
        flags0 = (is_os or il_os, end and is_os, end and il_hold)

        # The add stage: the slot presented L cycles ago, its product in the last register.
        accumulate2, os_end2, il_end2 = self.flags[0]
        product = self.products[0]

        out = dict(self.out)
        out["h_out"], out["h_valid_out"], out["h_last_out"] = a, g("h_valid"), g("h_last")
        out["v_valid_out"] = g("v_valid")
        out["v_out"] = self._op(g("v")) if (has("os") or has("interleaved")) else 0
        out["v_tag_out"] = g("v_tag") if has("interleaved") else 0
        out["h_zero_out"] = int(p.zero(a)) if p.zero_gating else 0
        out["v_zero_out"] = int(p.zero(self._op(g("v")))) if p.zero_gating else 0
        out["p_out"] = wrap(p.add(g("p"), product), p.acc_width, not p.fp8_blocks) \
            if p.held else 0
        out["fired"] = int(fire)
        out["gated"] = int(active and zero)

        acc_next = p.add(self.acc, product) if accumulate2 else self.acc

        # The pipeline registers.
        self.products = self.products[1:] + [p.mul(a, b) if fire else 0]
        self.flags = self.flags[1:] + [flags0]

        if not p.reserve_registers:
            self.acc = g("chain_in") if g("shift") else acc_next
            out["chain_out"] = self.acc
            self.out = out
            return out

        acc, res, w, wchain = acc_next, self.res, self.w, self.wchain
        if os_end2:
            acc, res = self.res, acc_next
        elif il_end2:
            acc, res = 0, acc_next
        elif g("shift"):
            res = g("chain_in")
        if p.held and ((end and use_w) or g("load")):
            w = self._op(self.res)
        if end and il_hold:
            wchain = self.w
        elif g("shift"):
            wchain = g("wchain")
        self.acc, self.res, self.w, self.wchain = acc, res, w, wchain
        out["chain_out"] = self.res
        out["wchain_out"] = self.wchain if has("interleaved") else 0
        self.out = out
        return out


def _fp8_ints(codes, arithmetic):
    from bpsa.models.mx import element_ints
    codes = np.asarray(codes, dtype=np.int64)
    ints, nan, _ = element_ints(codes, arithmetic)
    # a NaN code (S.1111.111) multiplies as its bits read, +-15 << 14, and sets the flag:
    # the block is NaN whatever its sum
    return np.where(nan, np.where(codes >> 7 == 1, -1, 1) * (15 << 14), ints), nan


def pe_matmul(a, b, arithmetic, acc_width):
    """The accumulators of ``a @ b`` as the PEs hold them (``a``: M x K and ``b``: K x N
    operands): integer sums wrapped to ``acc_width`` bits; in ``mxfp8_e4m3`` each a block's
    sum of element integers in ``acc_width - 1`` bits (wrapped) with the NaN flag above it,
    set by a product of a NaN code with a non-zero element (a product with a zero element is
    skipped)."""
    if arithmetic != "mxfp8_e4m3":
        return wrap_array(np.asarray(a, np.int64) @ np.asarray(b, np.int64), acc_width)
    (ia, na), (ib, nb) = _fp8_ints(a, arithmetic), _fp8_ints(b, arithmetic)
    w = acc_width - 1
    total = (ia.astype(object) @ ib.astype(object)) % (1 << w)
    live = (ia != 0)[:, :, None] & (ib != 0)[None, :, :]
    nan = ((na[:, :, None] | nb[None, :, :]) & live).any(axis=1)
    return (total | (nan.astype(object) << w)).astype(np.int64)


def random_stimulus(cfg, mode, n, rng, *, zero_prob=0.25, last_prob=0.15):
    """``n`` cycles of random inputs for ``mode`` (a key of :data:`MODES`), with zeros in the
    operands at ``zero_prob`` and context ends at ``last_prob``. ``rng`` is a
    ``numpy.random.Generator``. Values stay inside the port widths."""
    p = PEParams.of(cfg)
    ow = p.operand_width
    lo, hi = (-(1 << (ow - 1)), (1 << (ow - 1))) if p.operand_signed else (0, 1 << ow)
    alo, ahi = -(1 << (p.acc_width - 1)), 1 << (p.acc_width - 1)
    clo, chi = (0, 1 << p.acc_width) if p.fp8_blocks else (alo, ahi)   # the chain: acc_shape

    def operand():
        return 0 if rng.random() < zero_prob else int(rng.integers(lo, hi))

    cycles = []
    tag = 0
    for _ in range(n):
        c = {"mode": MODES[mode]}
        c["h"] = operand()
        c["h_valid"] = int(rng.random() < 0.85)
        c["h_last"] = int(rng.random() < last_prob)
        if "os" in p.dataflows or "interleaved" in p.dataflows:
            c["v"] = operand()
        if p.held:
            c["p"] = int(rng.integers(alo, ahi)) if rng.random() > zero_prob else 0
        c["v_valid"] = int(rng.random() < 0.85)
        if "interleaved" in p.dataflows:
            c["v_tag"] = tag
            c["wchain"] = operand()
        c["chain_in"] = int(rng.integers(clo, chi))
        c["shift"] = int(rng.random() < 0.3)
        if p.held:
            c["load"] = int(rng.random() < 0.1)
        if mode == "interleaved":
            tag ^= 1
        cycles.append(with_zero_flags(p, c))
    return cycles
