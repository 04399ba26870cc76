"""The store path's requantization: a P word of accumulators to the word the DMA stores.

With ``enable`` (the descriptor's REQUANT), each of the ``cols`` accumulators of a P word
becomes an ``operand_width``-bit operand (:meth:`bpsa.gateware.arith.IntArith.requantize`:
shifted right by ``shift``, rounded half up, saturated) packed from bit 0, lane ``j`` at bits
``[j operand_width, (j + 1) operand_width)``, as the DMA reads operands from a buffer word;
without it, the word passes unchanged. With ``relu`` (the descriptor's RELU on a forward
phase) every element that leaves is ``max(0, v)`` (after the requantization). The word
leaves registered, one cycle after it came (:data:`LATENCY`): on the store path between the
P buffer's registered read and the DMA.
"""

from amaranth.hdl import Cat, Module, Mux
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from bpsa.config import require_config
from bpsa.gateware.arith import arith_for

__all__ = ["LATENCY", "Requantizer"]

#: Cycles from ``word`` to ``out``.
LATENCY = 1


class Requantizer(wiring.Component):
    """See the module docstring.

    Members
    -------
    word : In(ArrayLayout(acc_shape, cols))
        A P word.
    enable : In(1)
    shift : In(IntArith.shift_shape)
    relu : In(1)
    out : Out(cols * acc_width)
        The word to store.
    """

    def __init__(self, config):
        require_config(config)
        self.config = config
        ar = arith_for(config)
        super().__init__({"word": In(data.ArrayLayout(ar.acc_shape, config.cols)),
                          "enable": In(1), "shift": In(ar.shift_shape), "relu": In(1),
                          "out": Out(config.cols * config.acc_width)})

    def elaborate(self, platform):
        m = Module()
        ar = arith_for(self.config)
        ow = ar.operand_shape.width
        lanes_q, lanes_a = [], []
        for j in range(self.config.cols):
            q = ar.requantize(self.word[j], self.shift)
            if ar.operand_shape.signed:
                q = Mux(self.relu & q[ow - 1], 0, q)
            lanes_q.append(q)
            a = self.word[j]
            lanes_a.append(Mux(self.relu & (a < 0), 0, a))
        m.d.sync += self.out.eq(Mux(self.enable, Cat(*lanes_q), Cat(*lanes_a)))
        return m
