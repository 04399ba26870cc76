"""The sum of a floating-point PE's partials, as they drain: a tree of fp32 adders at the bottom
of each column of the array.

An output-stationary floating-point PE keeps :data:`bpsa.config.FLOAT_PARTIALS` (six) partial
sums per output (:mod:`bpsa.gateware.array.pe_float`); its column's reserve chain brings them down
side by side, one output a cycle. :class:`PartialReducer` adds each output's six in the order
the numeric contract writes down (``docs/architecture/floating_point.md``)::

    ((p0 + p1) + (p2 + p3)) + (p4 + p5)

with five :class:`~bpsa.gateware.fp.fpu.FloatAdder` of an fp32 addend (a zero or subnormal
addend leaves the sum unchanged, as a skipped product does) in three levels: ``p0 + p1``,
``p2 + p3`` and ``p4 + p5`` side by side, the first two's sum, then that plus ``p4 + p5``
(delayed to meet it). The partials are registered first (the bottom PE's reserve registers are
far from the adders). Fully pipelined: an output a cycle, its sum
:data:`bpsa.config.FLOAT_REDUCE_LATENCY` (16) cycles later.
"""

from amaranth.hdl import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from bpsa.config import FLOAT_PARTIALS, FLOAT_REDUCE_LATENCY
from bpsa.gateware.fp.fpu import FloatAdder, fp32_addend
from bpsa.gateware.array.pe_float import chain_layout

__all__ = ["PartialReducer"]


class PartialReducer(wiring.Component):
    """Adds the six partials of ``partials`` (with ``valid``) into one: ``result`` with
    ``result_valid``, :attr:`LATENCY` cycles later. ``busy``: a sum is in flight."""

    #: Cycles from an output's partials to their sum on ``result``.
    LATENCY = FLOAT_REDUCE_LATENCY

    def __init__(self):
        super().__init__({"partials": In(chain_layout()), "valid": In(1),
                          "result": Out(32), "result_valid": Out(1), "busy": Out(1)})

    def elaborate(self, platform):
        m = Module()
        lat = FloatAdder.LATENCY
        if FLOAT_PARTIALS != 6 or self.LATENCY != 3 * lat + 1:
            raise ValueError("PartialReducer is a register and a three-level tree of six "
                             "partials")
        p = Signal.like(self.partials)
        m.d.sync += p.eq(self.partials)

        def delayed(value, n, name):
            for k in range(1, n + 1):
                nxt = Signal(len(value), name=f"{name}_d{k}")
                m.d.sync += nxt.eq(value)
                value = nxt
            return value

        def adder(name, acc, addend):
            add = m.submodules[name] = FloatAdder(addend_width=24)
            m.d.comb += [add.acc.eq(acc), add.product.eq(fp32_addend(m, addend, f"{name}_y"))]
            return add.result

        s01 = adder("add01", p[0], p[1])
        s23 = adder("add23", p[2], p[3])
        s45 = adder("add45", p[4], p[5])
        s03 = adder("add03", s01, s23)
        total = adder("add05", s03, delayed(s45, lat, "s45"))
        valid = [self.valid]
        for k in range(1, self.LATENCY + 1):
            nxt = Signal(name=f"valid_d{k}")
            m.d.sync += nxt.eq(valid[-1])
            valid.append(nxt)
        busy = 0
        for v in valid:
            busy = busy | v
        m.d.comb += [self.result.eq(total), self.result_valid.eq(valid[-1]),
                     self.busy.eq(busy)]
        return m
