"""The store path's requantization: a P word of accumulators to the word the DMA stores.

With ``enable`` (the descriptor's REQUANT), each of the ``cols`` accumulators of a P word
becomes an ``operand_width``-bit operand (:meth:`bpsa.gateware.array.arith.IntArith.requantize`:
shifted right by ``shift``, rounded half up, saturated) packed from bit 0, lane ``j`` at bits
``[j operand_width, (j + 1) operand_width)``, as the DMA reads operands from a buffer word;
without it, the word passes unchanged. With ``relu`` (the descriptor's RELU on a forward
phase) every element that leaves is ``max(0, v)`` (after the requantization). A word leaves
three cycles after it came (:data:`LATENCY`), on the store path between the P buffer's
registered read and the DMA: the word and its controls are registered on their way in (they
come from the P buffer's read and the descriptor's registers, placed apart; the shift's
masks beside them), then the rounded sum shifted by the shift's upper bits and whether it
saturates (:meth:`~bpsa.gateware.array.arith.IntArith.requantize_first`), then the result.

Floating point: with ``enable`` each fp32 sum is rounded to the operand format
(:func:`bpsa.gateware.fp.fpu.fp32_to`, the contract's conversion; ``shift`` is not used), and
``relu`` is the contract's ReLU (a set sign bit gives ``+0``, a NaN stays).

MX: the P word's lanes are fp32 sums (:attr:`bpsa.config.Config.result_width`); they leave as
they are, with the same ReLU. ``enable`` is not used: the planner refuses REQUANT in MX (the
driver quantizes a layer's operands, ``docs/architecture/mx.md``).
"""

from amaranth.hdl import Cat, Module, Mux, Signal, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from bpsa.config import require_config
from bpsa.gateware.array.arith import arith_for
from bpsa.gateware.fp.fpu import fp32_relu, fp32_to

__all__ = ["LATENCY", "Requantizer"]

#: Cycles from ``word`` (and ``enable``, ``shift``, ``relu``) to ``out``.
LATENCY = 3


class Requantizer(wiring.Component):
    """See the module docstring.

    Members
    -------
    word : In(ArrayLayout(acc_shape, cols))
        A P word (MX: :func:`bpsa.gateware.results.psum_buffer.p_word_layout`).
    enable : In(1)
    shift : In(IntArith.shift_shape)
    relu : In(1)
    out : Out(cols * result_width)
        The word to store.
    """

    def __init__(self, config):
        require_config(config)
        self.config = config
        ar = arith_for(config)
        lane = unsigned(config.result_width) if config.is_mx else ar.acc_shape
        super().__init__({"word": In(data.ArrayLayout(lane, config.cols)),
                          "enable": In(1), "shift": In(ar.shift_shape), "relu": In(1),
                          "out": Out(config.cols * config.result_width)})

    def elaborate(self, platform):
        m = Module()
        # the inputs through a register (the first of LATENCY's cycles)
        word, enable, shift, relu = (Signal.like(p, name=f"{n}_in") for p, n in (
            (self.word, "word"), (self.enable, "enable"), (self.shift, "shift"),
            (self.relu, "relu")))
        m.d.sync += [word.eq(self.word), enable.eq(self.enable), shift.eq(self.shift),
                     relu.eq(self.relu)]
        if self.config.is_float or self.config.is_mx:
            out = Signal.like(self.out)      # the result, then a register to LATENCY
            m.d.sync += self.out.eq(out)
            if self.config.is_float:
                self._float(m, out, word, enable, relu)
            else:
                m.d.sync += out.eq(Cat(*[Mux(relu, fp32_relu(word[j], "fp32"), word[j])
                                         for j in range(self.config.cols)]))
            return m
        return self._int(m, word, enable, shift, relu)

    def _int(self, m, word, enable, shift, relu):
        """Integers: the shift's masks registered with the inputs, the first half of the
        requantization registered, then the second."""
        ar = arith_for(self.config)
        cols, ow = self.config.cols, ar.operand_shape.width
        half, above = ar.requantize_masks(self.shift)
        half_in, above_in = Signal.like(half, name="half_in"), Signal.like(above, name="above_in")
        m.d.sync += [half_in.eq(half), above_in.eq(above)]
        # the second stage: every lane's first half and the controls
        word_b = Signal.like(word, name="word_b")
        shift_b, enable_b, relu_b = (Signal.like(v, name=f"{n}_b") for v, n in (
            (shift, "shift"), (enable, "enable"), (relu, "relu")))
        m.d.sync += [word_b.eq(word), shift_b.eq(shift), enable_b.eq(enable), relu_b.eq(relu)]
        lanes_q, lanes_a = [], []
        for j in range(cols):
            x, sat, sign = ar.requantize_first(word[j], shift, half_in, above_in)
            x_b = Signal.like(x, name=f"x{j}_b")
            sat_b, sign_b = Signal(name=f"sat{j}_b"), Signal(name=f"sign{j}_b")
            m.d.sync += [x_b.eq(x), sat_b.eq(sat), sign_b.eq(sign)]
            q = ar.requantize_last(x_b, sat_b, sign_b, shift_b)
            if ar.operand_shape.signed:
                q = Mux(relu_b & q[ow - 1], 0, q)
            lanes_q.append(q)
            a = word_b[j]
            lanes_a.append(Mux(relu_b & (a < 0), 0, a))
        m.d.sync += self.out.eq(Mux(enable_b, Cat(*lanes_q), Cat(*lanes_a)))
        return m

    def _float(self, m, out, word, enable, relu):
        """Floating point: fp32 sums, or rounded to the operand format; the contract's ReLU."""
        fmt = self.config.arithmetic
        lanes_q, lanes_a = [], []
        for j in range(self.config.cols):
            lanes_q.append(Mux(relu, fp32_relu(fp32_to(m, word[j], fmt, f"q{j}"), fmt),
                               fp32_to(m, word[j], fmt, f"r{j}")))
            lanes_a.append(Mux(relu, fp32_relu(word[j], "fp32"), word[j]))
        m.d.sync += out.eq(Mux(enable, Cat(*lanes_q), Cat(*lanes_a)))
