"""The store path's requantization: a P word of accumulators to the word the DMA stores.

With ``enable`` (the descriptor's REQUANT), each of the ``cols`` accumulators of a P word
becomes an ``operand_width``-bit operand (:meth:`bpsa.gateware.array.arith.IntArith.requantize`:
shifted right by ``shift``, rounded half up, saturated) packed from bit 0, lane ``j`` at bits
``[j operand_width, (j + 1) operand_width)``, as the DMA reads operands from a buffer word;
without it, the word passes unchanged. With ``relu`` (the descriptor's RELU on a forward
phase) every element that leaves is ``max(0, v)`` (after the requantization). The word and
its controls are registered on their way in (they come from the P buffer's read and the
descriptor's registers, placed apart) and the result on its way out: a word leaves two cycles
after it came (:data:`LATENCY`), on the store path between the P buffer's registered read and
the DMA.

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
LATENCY = 2


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
        # the inputs through a register (the first of LATENCY's two cycles)
        word, enable, shift, relu = (Signal.like(p, name=f"{n}_in") for p, n in (
            (self.word, "word"), (self.enable, "enable"), (self.shift, "shift"),
            (self.relu, "relu")))
        m.d.sync += [word.eq(self.word), enable.eq(self.enable), shift.eq(self.shift),
                     relu.eq(self.relu)]
        if self.config.is_float:
            return self._float(m, word, enable, relu)
        if self.config.is_mx:
            lanes = [Mux(relu, fp32_relu(word[j], "fp32"), word[j])
                     for j in range(self.config.cols)]
            m.d.sync += self.out.eq(Cat(*lanes))
            return m
        ar = arith_for(self.config)
        ow = ar.operand_shape.width
        lanes_q, lanes_a = [], []
        for j in range(self.config.cols):
            q = ar.requantize(word[j], shift)
            if ar.operand_shape.signed:
                q = Mux(relu & q[ow - 1], 0, q)
            lanes_q.append(q)
            a = word[j]
            lanes_a.append(Mux(relu & (a < 0), 0, a))
        m.d.sync += self.out.eq(Mux(enable, Cat(*lanes_q), Cat(*lanes_a)))
        return m

    def _float(self, m, word, enable, relu):
        """Floating point: fp32 sums, or rounded to the operand format; the contract's ReLU."""
        fmt = self.config.arithmetic
        lanes_q, lanes_a = [], []
        for j in range(self.config.cols):
            lanes_q.append(Mux(relu, fp32_relu(fp32_to(m, word[j], fmt, f"q{j}"), fmt),
                               fp32_to(m, word[j], fmt, f"r{j}")))
            lanes_a.append(Mux(relu, fp32_relu(word[j], "fp32"), word[j]))
        m.d.sync += self.out.eq(Mux(enable, Cat(*lanes_q), Cat(*lanes_a)))
        return m
