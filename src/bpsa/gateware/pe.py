"""The systolic processing element: MAC with zero gating, reserve register and mode switch.

Sources: Fornt et al. Sec. II-A (zero gating, reserve register swapped with the accumulator at the
end of a context and chained to shift results out and preloads in), InterGrad Sec. II-E and IV-A
(per-cycle WS/OS interleave: the vertical channel carries the activation in one phase and the
partial sum in the other; the held weight and the gradient accumulator live in the same PE).
"""

from amaranth.hdl import Module, Mux, Signal, signed
from amaranth.lib import enum, wiring
from amaranth.lib.wiring import In, Out

from bpsa.gateware.arith import arith_for

__all__ = ["PE", "PEMode", "vertical_shape"]


def vertical_shape(config):
    """Shape of the vertical channel: partial sums need the accumulator width when any
    held-operand dataflow is generated; otherwise it carries operands."""
    if config.has_held_operand:
        return signed(config.vertical_width)
    return arith_for(config).operand_shape


class PEMode(enum.Enum, shape=2):
    """What the PE does with its operands.

    ``OS``: output-stationary; ``acc += h * v`` and ``v`` passes down.
    ``HOLD``: a held operand ``w`` (weight- and input-stationary dataflows);
    ``v_out = v_in + h * w``, the vertical channel carries partial sums.
    ``INTERLEAVED``: InterGrad; the vertical tag bit selects OS (tag 0, ``v`` is an activation)
    or HOLD (tag 1, ``v`` is a partial sum) for the current cycle.
    """
    OS = 0
    HOLD = 1
    INTERLEAVED = 2


class PE(wiring.Component):
    """One processing element of the systolic array.

    All ``*_out`` data ports are registered copies of the matching ``*_in`` ports (one cycle of
    systolic delay), except ``v_out`` in the HOLD phase, which is ``v_in + h_in * w``, and
    ``chain_out``, which is the reserve register itself.

    A MAC slot is *active* when ``h_valid_in & v_valid_in``. With zero gating, an active slot
    with a zero operand is *gated*: the multiplier's inputs keep their previous values and no
    register is updated by it. ``fired`` and ``gated`` report, one cycle later, whether the
    previous cycle's active slot multiplied or was gated.

    Context ends (``h_valid_in & h_last_in``):
        * OS: after this cycle's MAC the accumulator and the reserve register swap: the result
          goes to the reserve register, the preload value that was shifted into the reserve
          register becomes the new accumulator.
        * HOLD: after this cycle's MAC the held operand is replaced by the low bits of the
          reserve register (the next tile's operand, shifted in while this tile computed).
        * INTERLEAVED (only in the HOLD phase, the second cycle of a held ``h``): the gradient
          accumulator goes to the reserve register, or, with ``sgd_en``, the updated weight
          ``w - (G >> sgd_shift)``; the accumulator clears and ``w`` takes the reserve register.
    ``shift`` (when no context ends) moves ``chain_in`` into the reserve register. ``load``
    (when no context ends) copies the reserve register into the held operand.

    Without reserve registers (a plain OS PE), the accumulator is the chain register: ``shift``
    moves ``chain_in`` into it and ``h_last_in`` has no effect.

    Members
    -------
    mode : In(PEMode)
        Static while a tile runs. Only the modes of the configured dataflows are decoded.
    h_in, h_valid_in, h_last_in : In
        Horizontal operand from the left neighbour, its valid bit and end-of-context flag.
    h_out, h_valid_out, h_last_out : Out
        The same, registered, to the right neighbour.
    v_in, v_valid_in[, v_tag_in] : In
        Vertical channel from the upper neighbour: an operand (OS) or a partial sum (HOLD); it is
        ``acc_width`` bits wide when any held-operand dataflow is generated. The tag exists with
        the interleaved dataflow.
    v_out, v_valid_out[, v_tag_out] : Out
        To the lower neighbour.
    chain_in : In, chain_out : Out, shift : In
        The reserve-register shift chain.
    load : In
        (held-operand dataflows) copy the reserve register into the held operand.
    sgd_en, sgd_shift : In
        (interleaved) in-place SGD update at the end of an interleaved context.
    fired, gated : Out
        Registered flags: the previous cycle's active slot multiplied / was gated.
    """

    def __init__(self, config):
        self.config = config
        self.arith = arith_for(config)
        op = self.arith.operand_shape
        acc = self.arith.acc_shape
        vshape = vertical_shape(config)
        members = {
            "mode": In(PEMode),
            "h_in": In(op), "h_valid_in": In(1), "h_last_in": In(1),
            "h_out": Out(op), "h_valid_out": Out(1), "h_last_out": Out(1),
            "v_in": In(vshape), "v_valid_in": In(1),
            "v_out": Out(vshape), "v_valid_out": Out(1),
            "chain_in": In(acc), "chain_out": Out(acc), "shift": In(1),
            "fired": Out(1), "gated": Out(1),
        }
        if config.has_held_operand:
            members["load"] = In(1)
        if config.has("interleaved"):
            members.update({
                "v_tag_in": In(1), "v_tag_out": Out(1),
                "sgd_en": In(1), "sgd_shift": In(self.arith.shift_shape),
            })
        super().__init__(members)
        #: The multiplier's operands (internal; observable in simulation).
        self.mul_a = Signal(op)
        self.mul_b = Signal(op)

    def elaborate(self, platform):
        cfg, ar = self.config, self.arith
        m = Module()

        # Which behaviours this cycle; modes that are not generated are constant 0.
        is_os = (self.mode == PEMode.OS) if cfg.has("os") else 0
        is_hold = (self.mode == PEMode.HOLD) if (cfg.has("ws") or cfg.has("is")) else 0
        if cfg.has("interleaved"):
            is_il = self.mode == PEMode.INTERLEAVED
            il_os = is_il & ~self.v_tag_in
            il_hold = is_il & self.v_tag_in
        else:
            is_il = il_os = il_hold = 0
        accumulate = is_os | il_os           # product goes into the accumulator
        use_w = is_hold | il_hold            # product of h and the held operand joins v

        acc = Signal(ar.acc_shape) if cfg.has_accumulator else None
        res = Signal(ar.acc_shape) if cfg.reserve_registers else None
        w = Signal(ar.operand_shape) if cfg.has_held_operand else None

        # Operands of this cycle's MAC slot.
        a = self.h_in
        v_operand = ar.as_operand(self.v_in)
        b = Mux(use_w, w, v_operand) if w is not None else v_operand
        active = self.h_valid_in & self.v_valid_in
        if cfg.zero_gating:
            zero = ar.zero(a) | ar.zero(b)
            fire = active & ~zero
            # Operand isolation: the multiplier sees the last fired operands while gated.
            hold_a = Signal(ar.operand_shape)
            hold_b = Signal(ar.operand_shape)
            with m.If(fire):
                m.d.sync += [hold_a.eq(a), hold_b.eq(b)]
            m.d.comb += [self.mul_a.eq(Mux(fire, a, hold_a)),
                         self.mul_b.eq(Mux(fire, b, hold_b))]
            m.d.sync += self.gated.eq(active & zero)
        else:
            fire = active
            m.d.comb += [self.mul_a.eq(a), self.mul_b.eq(b)]
        product = Signal(signed(2 * ar.operand_shape.width + 1))
        m.d.comb += product.eq(ar.mul(self.mul_a, self.mul_b))
        m.d.sync += self.fired.eq(fire)

        # Systolic pass-through.
        m.d.sync += [
            self.h_out.eq(self.h_in),
            self.h_valid_out.eq(self.h_valid_in),
            self.h_last_out.eq(self.h_last_in),
            self.v_valid_out.eq(self.v_valid_in),
        ]
        if cfg.has("interleaved"):
            m.d.sync += self.v_tag_out.eq(self.v_tag_in)
        if w is not None:
            with m.If(fire & use_w):
                m.d.sync += self.v_out.eq(ar.add(self.v_in, product))
            with m.Else():
                m.d.sync += self.v_out.eq(self.v_in)
        else:
            m.d.sync += self.v_out.eq(self.v_in)

        # Accumulator update of this cycle (before any swap).
        if acc is not None:
            acc_next = Signal(ar.acc_shape)
            m.d.comb += acc_next.eq(Mux(fire & accumulate, ar.add(acc, product), acc))

        if not cfg.reserve_registers:
            # Plain OS PE: the accumulator is the chain register.
            m.d.comb += self.chain_out.eq(acc)
            with m.If(self.shift):
                m.d.sync += acc.eq(self.chain_in)
            with m.Else():
                m.d.sync += acc.eq(acc_next)
            return m

        m.d.comb += self.chain_out.eq(res)
        end = self.h_valid_in & self.h_last_in
        if acc is not None:
            m.d.sync += acc.eq(acc_next)
        # At most one context end applies: the mode decides which. Each case exists only when
        # its dataflow is generated.
        ends = []
        if cfg.has("os"):
            ends.append((end & is_os, [res.eq(acc_next), acc.eq(res)]))
        if cfg.has("ws") or cfg.has("is"):
            ends.append((end & is_hold, [w.eq(ar.as_operand(res))]))
        if cfg.has("interleaved"):
            w_new = Signal(ar.operand_shape)
            m.d.comb += w_new.eq(ar.update(w, acc_next, self.sgd_shift))
            ends.append((end & il_hold, [
                res.eq(Mux(self.sgd_en, w_new, acc_next)),
                acc.eq(0),
                w.eq(ar.as_operand(res)),
            ]))
        for i, (cond, stmts) in enumerate(ends):
            with (m.If if i == 0 else m.Elif)(cond):
                m.d.sync += stmts
        with m.Else():
            with m.If(self.shift):
                m.d.sync += res.eq(self.chain_in)
            if w is not None:
                with m.If(self.load):
                    m.d.sync += w.eq(ar.as_operand(res))
        return m
