"""The output-stationary floating-point PE: ``bf16`` or ``fp16`` operands, fp32 partial sums, the
numeric contract of ``docs/architecture/floating_point.md``.

An fp32 addition that rounds takes five pipeline stages at the clocks the integer PE reaches
(:class:`bpsa.gateware.fp.fpu.FloatAdder`); an accumulator that adds into its own result of the
cycle before closes at 25 MHz on an ECP5. So the PE keeps :data:`bpsa.config.FLOAT_PARTIALS`
(six) partial sums per output: the product of a context's slot ``k`` (counting the active slots
of the context from 0, gated ones included) is added to partial ``k mod 6``, which its previous
product left at least six cycles before: its sum is out of the adder by the time the partial
is read (a cycle before it enters the adder, into a register: the adder's input comes from a
register alone). The order of the additions inside each partial is the slot order, and it
does not depend on stalls: bubbles between slots change when a partial is read, never which.
At the context's end the six partials move to six reserve registers and leave down the
column's reserve chain, six words wide (:func:`chain_layout`); the array adds them as they
leave (:mod:`bpsa.gateware.array.float_reduce`).
"""

from amaranth.hdl import Module, Mux, Signal, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from bpsa.config import FLOAT_PARTIALS
from bpsa.gateware.array.arith import arith_for
from bpsa.gateware.fp.fpu import FloatAdder, FloatKind, FloatMultiplier
from bpsa.gateware.array.pe import PEMode

__all__ = ["FloatPE", "chain_layout"]


def chain_layout():
    """The floating-point reserve chain between PEs: the six partials of an output side by
    side (element ``k`` is partial ``k``), so a drain shifts once a row, as an integer one."""
    return data.ArrayLayout(unsigned(32), FLOAT_PARTIALS)


class FloatPE(wiring.Component):
    """One output-stationary PE of a floating-point array (``config.arithmetic`` ``bf16`` or
    ``fp16``), with zero gating and reserve registers as the configuration says.

    **Pipeline** (``L = config.mac_latency`` = 8). A slot presented in cycle ``t`` (stage 0) has
    its operands registered at the end of ``t`` (clock-enabled by ``fire``), its exact product
    in the multiplier's registers at the ends of ``t + 1`` and ``t + 2``, its partial read
    (into a register) at the end of ``t + 2``, and the adder's five stages from ``t + 3``: the
    sum is in the adder's result register during ``t + 8`` and written back to its partial at
    the end of that cycle (of a context's end slot: to the reserve registers, as every other
    partial). A partial's next slot comes six or more cycles later and reads it at the end of
    ``t + 8`` at the earliest: from the adder's output then (a bypass into the read
    register), from the partial register after.

    A slot that is active but gated (a zero operand) or does not fire enters the adder as a
    product of kind ``ZERO``: the partial passes through unchanged (the contract's skip).

    **Context end** (``h_valid_in & h_last_in``): eight cycles after the end slot, the six
    partials (the end slot's sum included) go to the six reserve registers, and the partials
    take the reserve registers' old values, the *preload* shifted in while the context ran
    (the array preloads partial 0 and zeros the others). The next context's first six slots
    may come before that swap: they read their partial's starting value straight from the
    reserve register (while the swap is pending) or from the partial (after it), so contexts
    must end at least ``2 rows + 5`` cycles apart in an array (``Config.context_gap``).
    ``shift`` moves ``chain_in`` (six words) into the reserve registers, except in a swap
    cycle; ``chain_out`` is the reserve registers.

    Members are :class:`bpsa.gateware.array.pe.PE`'s for an ``os``-only configuration with reserve
    registers: ``mode`` (ignored), ``h_*``, ``v_*``, zero flags, ``chain_in``, ``chain_out``
    (:func:`chain_layout`), ``shift``, ``fired``, ``gated``.
    """

    def __init__(self, config):
        if not config.is_float:
            raise ValueError(f"FloatPE needs a floating-point arithmetic, not "
                             f"{config.arithmetic!r}")
        self.config = config
        self.arith = arith_for(config)
        op = self.arith.operand_shape
        members = {
            "mode": In(PEMode),
            "h_in": In(op), "h_valid_in": In(1), "h_last_in": In(1),
            "h_out": Out(op), "h_valid_out": Out(1), "h_last_out": Out(1),
            "v_in": In(op), "v_valid_in": In(1), "v_out": Out(op), "v_valid_out": Out(1),
            "chain_in": In(chain_layout()), "chain_out": Out(chain_layout()), "shift": In(1),
            "fired": Out(1), "gated": Out(1),
        }
        if config.zero_gating:
            members.update({"h_zero_in": In(1), "h_zero_out": Out(1),
                            "v_zero_in": In(1), "v_zero_out": Out(1)})
        super().__init__(members)
        #: The multiplier's operand registers (internal; observable in simulation).
        self.mul_a = Signal(op)
        self.mul_b = Signal(op)

    def elaborate(self, platform):
        cfg, ar = self.config, self.arith
        P = FLOAT_PARTIALS
        m = Module()
        mul = m.submodules.mul = FloatMultiplier(cfg.arithmetic)
        add = m.submodules.add = FloatAdder(cfg.arithmetic)
        if FloatMultiplier.LATENCY != 2 or FloatAdder.LATENCY + 1 != P \
                or cfg.mac_latency != 1 + FloatMultiplier.LATENCY + FloatAdder.LATENCY:
            raise ValueError("FloatPE's schedule is written for a 2-cycle multiplier, a "
                             "5-stage adder and six partials (mac_latency 8)")

        # Systolic pass-through (one cycle a hop).
        m.d.sync += [
            self.h_out.eq(self.h_in), self.h_valid_out.eq(self.h_valid_in),
            self.h_last_out.eq(self.h_last_in),
            self.v_out.eq(self.v_in), self.v_valid_out.eq(self.v_valid_in),
        ]

        # Stage 0: the slot, its fire decision and its partial's index.
        active = self.h_valid_in & self.v_valid_in
        end = self.h_valid_in & self.h_last_in
        if cfg.zero_gating:
            m.d.sync += [self.h_zero_out.eq(ar.zero(self.h_in)),
                         self.v_zero_out.eq(ar.zero(self.v_in))]
            zero = self.h_zero_in | self.v_zero_in
            fire = active & ~zero
            m.d.sync += self.gated.eq(active & zero)
        else:
            fire = active
        m.d.sync += self.fired.eq(fire)

        idx = Signal(range(P))          # the next slot's partial: its count in the context mod P
        first = Signal(init=1)          # the next slot is among the context's first P
        with m.If(end):
            m.d.sync += [idx.eq(0), first.eq(1)]
        with m.Elif(active):
            m.d.sync += [idx.eq(Mux(idx == P - 1, 0, idx + 1)),
                         first.eq(first & (idx != P - 1))]

        with m.If(fire):
            m.d.sync += [self.mul_a.eq(self.h_in), self.mul_b.eq(self.v_in)]
        m.d.comb += [mul.a.eq(self.mul_a), mul.b.eq(self.mul_b)]

        def line(value, n, name):
            """``value`` of a slot and its copies 1..n cycles later: a list, index = delay."""
            out = [value]
            for k in range(1, n + 1):
                nxt = Signal.like(value, name=f"{name}_d{k}") if isinstance(value, Signal) \
                    else Signal(len(value), name=f"{name}_d{k}")
                m.d.sync += nxt.eq(out[-1])
                out.append(nxt)
            return out

        act_l = line(active, 8, "act")
        fire_l = line(fire, 3, "fire")
        end_l = line(end, 8, "end")
        idx_l = line(idx, 8, "idx")
        first_l = line(first, 2, "first")

        partial = [Signal(32, name=f"partial{k}") for k in range(P)]
        res = [Signal(32, name=f"res{k}") for k in range(P)]

        # The sum leaving the adder in this cycle: of the slot 8 cycles before.
        out_valid, out_idx = act_l[8], idx_l[8]

        def select(regs, index):
            value = regs[0]
            for k in range(1, P):
                value = Mux(index == k, regs[k], value)
            return value

        # Cycle t + 2: read the slot's starting value. A first-round slot starts from its
        # reserve register while the previous context's swap is pending (an end slot among the
        # six before it), else from its partial (the swap copied the reserve register there);
        # a later slot from its partial, or from the adder when its last sum leaves now (its
        # previous slot was six or more before: that sum has left the adder by now).
        k2 = idx_l[2]
        pending = Signal()
        m.d.comb += pending.eq(end_l[3] | end_l[4] | end_l[5] | end_l[6] | end_l[7] | end_l[8])
        from_res = select(res, k2)
        from_partial = Mux(out_valid & (out_idx == k2), add.result, select(partial, k2))
        acc_pre = Signal(32)
        m.d.sync += acc_pre.eq(Mux(first_l[2] & pending, from_res, from_partial))
        # Cycle t + 3: into the adder, straight from registers.
        m.d.comb += [add.acc.eq(acc_pre), add.product.eq(mul.product)]
        with m.If(~fire_l[3]):
            m.d.comb += add.product.kind.eq(FloatKind.ZERO)

        # Cycle t + 8: the sum back to its partial; at a context's end slot, the swap.
        swap = end_l[8]
        with m.If(swap):
            for k in range(P):
                m.d.sync += [
                    res[k].eq(Mux(out_valid & (out_idx == k), add.result, partial[k])),
                    partial[k].eq(res[k]),
                ]
        with m.Else():
            for k in range(P):
                with m.If(out_valid & (out_idx == k)):
                    m.d.sync += partial[k].eq(add.result)
            with m.If(self.shift):
                m.d.sync += [res[k].eq(self.chain_in[k]) for k in range(P)]
        m.d.comb += [self.chain_out[k].eq(res[k]) for k in range(P)]
        return m

