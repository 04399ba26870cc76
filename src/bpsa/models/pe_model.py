"""Cycle model of the processing element, written from its contract (no Amaranth imports).

The model is a plain Python object: :meth:`PEModel.step` takes one cycle's inputs and returns the
outputs visible after the clock edge. Testbenches (Amaranth simulator and cocotb/Verilator) drive
the RTL and this model with the same stimulus and compare every output every cycle.
"""

from dataclasses import dataclass

from bpsa.spec.numeric import wrap

__all__ = ["MODES", "OUTPUTS", "PORTS", "PEModel", "PEParams", "random_stimulus", "wrap"]

#: PE mode encodings (the RTL's ``PEMode``).
MODES = {"os": 0, "hold": 1, "interleaved": 2}

#: Model input name -> PE port name.
PORTS = {"mode": "mode", "h": "h_in", "h_valid": "h_valid_in", "h_last": "h_last_in",
         "v": "v_in", "v_valid": "v_valid_in", "v_tag": "v_tag_in", "chain_in": "chain_in",
         "shift": "shift", "load": "load", "sgd_en": "sgd_en", "sgd_shift": "sgd_shift"}

#: PE output ports compared every cycle.
OUTPUTS = ("h_out", "h_valid_out", "h_last_out", "v_out", "v_valid_out", "v_tag_out",
           "chain_out", "fired", "gated")


@dataclass(frozen=True)
class PEParams:
    """What the model needs to know of a configuration (read from the config JSON or object)."""
    operand_width: int
    operand_signed: bool
    acc_width: int
    dataflows: tuple
    zero_gating: bool
    reserve_registers: bool

    @classmethod
    def of(cls, cfg):
        get = (lambda k: cfg[k]) if isinstance(cfg, dict) else (lambda k: getattr(cfg, k))
        return cls(get("operand_width"), get("operand_signed"), get("acc_width"),
                   tuple(get("dataflows")), get("zero_gating"), get("reserve_registers"))

    @property
    def held(self):
        return any(d in self.dataflows for d in ("ws", "is", "interleaved"))

    @property
    def vertical_width(self):
        return self.acc_width if self.held else self.operand_width

    @property
    def vertical_signed(self):
        return True if self.held else self.operand_signed


class PEModel:
    def __init__(self, cfg):
        self.p = PEParams.of(cfg)
        self.acc = 0
        self.res = 0
        self.w = 0
        self.out = {k: 0 for k in OUTPUTS}

    def _op(self, x):
        return wrap(x, self.p.operand_width, self.p.operand_signed)

    def step(self, i):
        """Advance one clock. ``i`` holds the inputs (missing ones are 0): mode, h, h_valid,
        h_last, v, v_valid, v_tag, chain_in, shift, load, sgd_en, sgd_shift. Returns the
        outputs after the edge."""
        p = self.p
        g = lambda k: i.get(k, 0)
        mode = g("mode")
        has = lambda d: d in p.dataflows
        is_os = has("os") and mode == MODES["os"]
        is_hold = (has("ws") or has("is")) and mode == MODES["hold"]
        is_il = has("interleaved") and mode == MODES["interleaved"]
        il_hold = is_il and g("v_tag") == 1
        il_os = is_il and not il_hold
        use_w = is_hold or il_hold

        a = g("h")
        v = g("v")
        b = self.w if use_w else self._op(v)
        active = bool(g("h_valid") and g("v_valid"))
        zero = p.zero_gating and (a == 0 or b == 0)
        fire = active and not zero
        product = a * b if fire else 0

        out = dict(self.out)
        out["h_out"], out["h_valid_out"], out["h_last_out"] = a, g("h_valid"), g("h_last")
        out["v_valid_out"] = g("v_valid")
        out["v_tag_out"] = g("v_tag") if has("interleaved") else 0
        if fire and use_w:
            out["v_out"] = wrap(v + product, p.vertical_width, p.vertical_signed)
        else:
            out["v_out"] = v
        out["fired"] = int(fire)
        out["gated"] = int(active and zero)

        acc_next = self.acc
        if fire and (is_os or il_os):
            acc_next = wrap(self.acc + product, p.acc_width)

        if not p.reserve_registers:
            self.acc = g("chain_in") if g("shift") else acc_next
            out["chain_out"] = self.acc
            self.out = out
            return out

        end = g("h_valid") and g("h_last")
        acc, res, w = acc_next, self.res, self.w
        if end and is_os:
            acc, res = self.res, acc_next
        elif end and is_hold:
            w = self._op(self.res)
        elif end and il_hold:
            if g("sgd_en"):
                w_new = self._op(self.w - (acc_next >> g("sgd_shift")))
                res = w_new
            else:
                res = acc_next
            acc = 0
            w = self._op(self.res)
        else:
            if g("shift"):
                res = g("chain_in")
            if p.held and g("load"):
                w = self._op(self.res)
        self.acc, self.res, self.w = acc, res, w
        out["chain_out"] = self.res
        self.out = out
        return out


def random_stimulus(cfg, mode, n, rng, *, zero_prob=0.25, last_prob=0.15):
    """``n`` cycles of random inputs for ``mode`` (a key of :data:`MODES`), with zeros in the
    operands at ``zero_prob`` and context ends at ``last_prob``. ``rng`` is a
    ``numpy.random.Generator``. Values stay inside the port widths."""
    p = PEParams.of(cfg)
    ow = p.operand_width
    lo, hi = (-(1 << (ow - 1)), (1 << (ow - 1))) if p.operand_signed else (0, 1 << ow)
    vw = p.vertical_width
    vlo, vhi = (-(1 << (vw - 1)), 1 << (vw - 1)) if p.vertical_signed else (0, 1 << vw)
    alo, ahi = -(1 << (p.acc_width - 1)), 1 << (p.acc_width - 1)

    def operand():
        return 0 if rng.random() < zero_prob else int(rng.integers(lo, hi))

    cycles = []
    tag = 0
    for _ in range(n):
        c = {"mode": MODES[mode]}
        c["h"] = operand()
        c["h_valid"] = int(rng.random() < 0.85)
        c["h_last"] = int(rng.random() < last_prob)
        if mode == "os" or (mode == "interleaved" and tag == 0):
            c["v"] = operand()
        else:
            c["v"] = int(rng.integers(vlo, vhi)) if rng.random() > zero_prob else 0
        c["v_valid"] = int(rng.random() < 0.85)
        if "interleaved" in p.dataflows:
            c["v_tag"] = tag
            c["sgd_en"] = int(rng.random() < 0.5)
            c["sgd_shift"] = int(rng.integers(0, 8))
        c["chain_in"] = int(rng.integers(alo, ahi))
        c["shift"] = int(rng.random() < 0.3)
        if p.held:
            c["load"] = int(rng.random() < 0.1)
        if mode == "interleaved":
            tag ^= 1
        cycles.append(c)
    return cycles
