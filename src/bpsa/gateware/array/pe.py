"""The systolic processing element: a pipelined MAC with zero gating, reserve register and mode
switch.

Sources: Fornt et al. Sec. II-A (zero gating, reserve register swapped with the accumulator at the
end of a context and chained to shift results out and preloads in), InterGrad Sec. II-E and IV-A
(per-cycle WS/OS interleave: the vertical channel carries the activation in one phase and the
partial sum in the other; the held weight and the gradient accumulator live in the same PE).

The multiply-accumulate is pipelined the way an FPGA's DSP block is (ECP5 ``MULT18X18D``,
iCE40 ``SB_MAC16``): the operands are registered into the multiplier, the product is registered,
and the accumulator (or the partial sum) adds a registered product. Every multiplexer (dataflow,
zero gating, held operand) sits before the operand registers, off the multiply-accumulate path.
"""

from amaranth.hdl import Module, Mux, Signal, signed
from amaranth.lib import enum, wiring
from amaranth.lib.wiring import In, Out

from bpsa.gateware.array.arith import arith_for

__all__ = ["PE", "PEMode", "vertical_shape"]


def vertical_shape(config):
    """Shape of the array's top edge and bottom partial sums: the accumulator width when any
    held-operand dataflow is generated (partial sums travel down), else the operand shape."""
    if config.has_held_operand:
        return signed(config.vertical_width)
    return arith_for(config).operand_shape


class PEMode(enum.Enum, shape=2):
    """What the PE does with its operands.

    ``OS``: output-stationary; ``acc += h * v`` and ``v`` passes down.
    ``HOLD``: a held operand ``w`` (weight- and input-stationary dataflows);
    ``p_out = p_in + h * w``: the partial-sum channel carries the sums down.
    ``INTERLEAVED``: InterGrad; the vertical tag bit selects OS (tag 0, ``v`` is an activation)
    or HOLD (tag 1, the partial sum of this slot arrives on ``p_in``) for the current cycle.
    """
    OS = 0
    HOLD = 1
    INTERLEAVED = 2


class PE(wiring.Component):
    """One processing element of the systolic array.

    **Pipeline** (``L = config.mac_latency``, 4 for integers). A *slot* is the set of inputs
    presented in one cycle ``t`` (stage 0). The multiplier's operands are registered in the
    fabric at the end of ``t`` (``mul_a``, ``mul_b``), in the multiplier's input registers at
    the end of ``t + 1``, the product at the end of ``t + 2`` and again, in the fabric next to
    the adders, at the end of ``t + 3`` (a DSP block is far from the logic: the registers on
    both sides take the long routes off the logic's paths), and the product is added at the
    end of ``t + L`` (stage L, "the add stage"): into the accumulator, or into the partial sum
    ``p_in`` presented in cycle ``t + L``, giving ``p_out`` in cycle ``t + L + 1``.
    Everything else the PE passes on (``h_out``, ``v_out``, valid, last and tag bits)
    is a one-cycle registered copy of its input, as in a plain systolic array, so the operand
    channels keep one cycle a hop and the partial sums of a column, entering ``L`` cycles
    behind their slots, arrive at every PE exactly when its product is ready.

    A slot is *active* when ``h_valid_in & v_valid_in``. With zero gating, an active slot with a
    zero operand is *gated*: the multiplier's operand registers keep their previous values and
    the slot adds nothing. An active slot that is not gated *fires*. The product register holds
    zero for a slot that does not fire. ``fired`` and ``gated`` report a slot one cycle after it
    was presented.

    Context ends (a slot with ``h_valid_in & h_last_in``):
        * OS: in the add stage, after the slot's product is added, the accumulator
          and the reserve register swap: the result goes to the reserve register, the preload
          that was shifted into the reserve register becomes the new accumulator.
        * HOLD: in stage 0 (cycle ``t``), after the slot's operands are taken, the held operand
          is replaced by the low bits of the reserve register (the next tile's operand, shifted
          in while this tile computed).
        * INTERLEAVED (a tag-1 slot): in stage 0 the held operand takes the next weights from the
          reserve register and the context's weights go to the weight chain register
          (``wchain``); in the add stage the accumulator (the gradient G)
          goes to the reserve register and clears. The weights and G leave on their two chains
          side by side; the array computes the SGD update ``w - (G >> sgd_shift)`` once per
          column as they leave, not in every PE.

    An add-stage action and a stage-0 action of different slots may fall in the same cycle: both
    apply. ``shift`` moves ``chain_in`` into the reserve register, except in a cycle in which an
    add-stage context end writes it, and ``wchain_in`` into the weight chain register, except in
    an interleaved end slot; ``load`` copies the reserve register into the held operand (as a
    held-operand end slot does).

    Without reserve registers (a plain OS PE), the accumulator is the chain register: ``shift``
    moves ``chain_in`` into it (the stage-2 addition of that cycle is lost) and ``h_last_in`` has
    no effect.

    Members
    -------
    mode : In(PEMode)
        Static while a tile runs. Only the modes of the configured dataflows are decoded; with
        one generated, the input is ignored.
    h_in, h_valid_in, h_last_in : In
        Horizontal operand from the left neighbour, its valid bit and end-of-context flag.
    h_out, h_valid_out, h_last_out : Out
        The same, registered, to the right neighbour.
    h_zero_in, h_zero_out, v_zero_in, v_zero_out
        (zero gating) 1 when the operand on ``h_in`` / ``v_in`` is zero, presented with it (the
        PE computes its outputs' flags, registered with them).
    v_valid_in[, v_in][, v_tag_in] : In
        Vertical slot channel from the upper neighbour: its valid bit, the operand (OS and
        interleaved dataflows) and the tag (interleaved).
    v_valid_out[, v_out][, v_tag_out] : Out
        The same, registered, to the lower neighbour.
    p_in : In, p_out : Out
        (held-operand dataflows) Partial sums, accumulator wide, ``L`` cycles behind the slot
        channel: ``p_out`` is ``p_in`` plus the product of the slot presented ``L`` cycles
        before.
    chain_in : In, chain_out : Out, shift : In
        The reserve-register shift chain.
    wchain_in : In, wchain_out : Out
        (interleaved) The weight chain: a finished context's weights, shifted with the reserve
        chain.
    load : In
        (held-operand dataflows) copy the reserve register into the held operand.
    fired, gated : Out
        Registered flags: the previous cycle's active slot multiplied / was gated.
    """

    def __init__(self, config):
        if config.is_float:
            raise ValueError(f"PE is the integer PE; arithmetic {config.arithmetic!r} builds "
                             f"bpsa.gateware.array.pe_float.FloatPE")
        if config.mac_latency < 4:
            raise ValueError(f"the PE's pipeline needs mac_latency >= 4, not "
                             f"{config.mac_latency}")
        self.config = config
        self.arith = arith_for(config)
        op = self.arith.operand_shape
        acc = self.arith.acc_shape
        members = {
            "mode": In(PEMode),
            "h_in": In(op), "h_valid_in": In(1), "h_last_in": In(1),
            "h_out": Out(op), "h_valid_out": Out(1), "h_last_out": Out(1),
            "v_valid_in": In(1), "v_valid_out": Out(1),
            "chain_in": In(acc), "chain_out": Out(acc), "shift": In(1),
            "fired": Out(1), "gated": Out(1),
        }
        if config.has_accumulator:
            members.update({"v_in": In(op), "v_out": Out(op)})
        if config.zero_gating:
            members.update({"h_zero_in": In(1), "h_zero_out": Out(1)})
            if config.has_accumulator:
                members.update({"v_zero_in": In(1), "v_zero_out": Out(1)})
        if config.has_held_operand:
            members.update({"p_in": In(acc), "p_out": Out(acc), "load": In(1)})
        if config.has("interleaved"):
            members.update({
                "v_tag_in": In(1), "v_tag_out": Out(1),
                "wchain_in": In(op), "wchain_out": Out(op),
            })
        super().__init__(members)
        #: The multiplier's operand registers in the fabric (internal; observable in
        #: simulation).
        self.mul_a = Signal(op)
        self.mul_b = Signal(op)

    def elaborate(self, platform):
        cfg, ar = self.config, self.arith
        m = Module()

        is_os, is_hold, il_os, il_hold = self._decode_mode()
        accumulate = is_os | il_os           # the product goes into the accumulator
        use_w = is_hold | il_hold            # the product of h and the held operand joins p

        acc = Signal(ar.acc_shape) if cfg.has_accumulator else None
        res = Signal(ar.acc_shape) if cfg.reserve_registers else None
        w = Signal(ar.operand_shape) if cfg.has_held_operand else None

        a = self.h_in
        if w is not None and acc is not None:
            b = Mux(use_w, w, self.v_in)
        else:
            b = w if w is not None else self.v_in
        fire, w_zero = self._zero_gating(m, use_w, acc, w)
        m.d.sync += self.fired.eq(fire)

        # Stage 0 -> 1: the operand registers (clock-enabled by fire: operand isolation);
        # then the product registers, zero for a slot that did not fire.
        product, operands = ar.multiplier(m, a, b, fire, latency=cfg.mac_latency,
                                          platform=platform)
        m.d.comb += [self.mul_a.eq(operands[0]), self.mul_b.eq(operands[1])]

        self._pass_through(m, acc)
        # Add stage: the partial sum adds the registered product (zero unless the slot fired).
        if w is not None:
            m.d.sync += self.p_out.eq(ar.add(self.p_in, product))
        acc_en, acc_sum, acc_next = self._accumulator_update(m, accumulate, acc, product)

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
            with m.If(acc_en):
                m.d.sync += acc.eq(acc_sum)
        self._context_ends(m, end, is_os, il_hold, use_w, acc, res, acc_next, w, w_zero)
        return m

    def _decode_mode(self):
        """Stage 0: which behaviour this slot has, ``(is_os, is_hold, il_os, il_hold)``; modes
        that are not generated are constant 0, and with one mode generated it is constant 1
        (the mode input is not decoded)."""
        cfg = self.config
        generated = {PEMode.OS: cfg.has("os"), PEMode.HOLD: cfg.has("ws") or cfg.has("is"),
                     PEMode.INTERLEAVED: cfg.has("interleaved")}

        def decode(mode):
            if not generated[mode]:
                return 0
            return 1 if sum(generated.values()) == 1 else self.mode == mode
        is_os, is_hold = decode(PEMode.OS), decode(PEMode.HOLD)
        if cfg.has("interleaved"):
            is_il = decode(PEMode.INTERLEAVED)
            il_os = is_il & ~self.v_tag_in
            il_hold = is_il & self.v_tag_in
        else:
            il_os = il_hold = 0
        return is_os, is_hold, il_os, il_hold

    def _zero_gating(self, m, use_w, acc, w):
        """Stage 0: whether the slot fires (active and, with zero gating, no zero operand) and
        the held operand's zero flag (``None`` without zero gating or a held operand); drives
        the registered zero flags and ``gated``."""
        cfg, ar = self.config, self.arith
        active = self.h_valid_in & self.v_valid_in
        w_zero = None
        if cfg.zero_gating:
            # The operands' zero flags travel with them, computed a cycle ahead (the
            # neighbours', the held operand's when it is written): no zero test on this path.
            m.d.sync += self.h_zero_out.eq(ar.zero(self.h_in))
            if acc is not None:
                m.d.sync += self.v_zero_out.eq(ar.zero(self.v_in))
            if w is not None:
                w_zero = Signal(init=1)
                m.d.sync += w_zero.eq(w_zero)
            if w is not None and acc is not None:
                b_zero = Mux(use_w, w_zero, self.v_zero_in)
            else:
                b_zero = w_zero if w is not None else self.v_zero_in
            zero = self.h_zero_in | b_zero
            fire = active & ~zero
            m.d.sync += self.gated.eq(active & zero)
        else:
            fire = active
        return fire, w_zero

    def _add_stage(self, m, value, name):
        """``value`` of a slot, delayed to the slot's add stage (L registers)."""
        for k in range(1, self.config.mac_latency + 1):
            nxt = Signal(name=f"{name}_s{k}")
            m.d.sync += nxt.eq(value)
            value = nxt
        return value

    def _pass_through(self, m, acc):
        """Systolic pass-through (one cycle a hop)."""
        m.d.sync += [
            self.h_out.eq(self.h_in),
            self.h_valid_out.eq(self.h_valid_in),
            self.h_last_out.eq(self.h_last_in),
            self.v_valid_out.eq(self.v_valid_in),
        ]
        if acc is not None:
            m.d.sync += self.v_out.eq(self.v_in)
        if self.config.has("interleaved"):
            m.d.sync += self.v_tag_out.eq(self.v_tag_in)

    def _accumulator_update(self, m, accumulate, acc, product):
        """Add stage: the accumulator's update, ``(acc_en, acc_sum, acc_next)`` (all ``None``
        without an accumulator); clock-enabled: no multiplexer after the adder's carry chain
        when only the accumulating dataflow is generated."""
        if acc is None:
            return None, None, None
        ar = self.arith
        acc_en = self._add_stage(m, accumulate, "acc_en") if not isinstance(accumulate, int) \
            else accumulate
        acc_sum = Signal(ar.acc_shape)
        acc_next = Signal(ar.acc_shape)
        m.d.comb += [acc_sum.eq(ar.add(acc, product)),
                     acc_next.eq(Mux(acc_en, acc_sum, acc))]
        return acc_en, acc_sum, acc_next

    def _context_ends(self, m, end, is_os, il_hold, use_w, acc, res, acc_next, w, w_zero):
        """Context ends and the chains. Add stage (OS, interleaved): the result goes to the
        reserve register; the accumulator takes the preload (OS) or clears (interleaved).
        Stage 0 (held operand, interleaved): the held operand takes the next operand from the
        reserve register; an interleaved context's weights go to the weight chain."""
        cfg, ar = self.config, self.arith
        late = []
        if cfg.has("os"):
            late.append((self._add_stage(m, end & is_os, "os_end"), res))
        if cfg.has("interleaved"):
            late.append((self._add_stage(m, end & il_hold, "il_end"), 0))
        for i, (cond, start) in enumerate(late):
            with (m.If if i == 0 else m.Elif)(cond):
                m.d.sync += [res.eq(acc_next), acc.eq(start)]
        if late:
            late_any = _any(cond for cond, _ in late)
            with m.If(~late_any & self.shift):
                m.d.sync += res.eq(self.chain_in)
        else:
            with m.If(self.shift):
                m.d.sync += res.eq(self.chain_in)
        if w is not None:
            early = end & use_w
            with m.If(early | self.load):
                m.d.sync += w.eq(ar.as_operand(res))
                if cfg.zero_gating:
                    m.d.sync += w_zero.eq(ar.zero(ar.as_operand(res)))
        if cfg.has("interleaved"):
            wchain = Signal(ar.operand_shape)
            m.d.comb += self.wchain_out.eq(wchain)
            with m.If(end & il_hold):
                m.d.sync += wchain.eq(w)
            with m.Elif(self.shift):
                m.d.sync += wchain.eq(self.wchain_in)


def _any(conds):
    """OR of 1-bit values (0 for none)."""
    result = 0
    for cond in conds:
        result = result | cond
    return result
