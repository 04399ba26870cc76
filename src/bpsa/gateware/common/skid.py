"""A register slice for streams: cuts the ``ready`` path between two blocks.

A block that advances its pipeline on its output's ``ready`` puts the consumer's whole
``ready`` logic in front of its own registers. :class:`SkidBuffer` between them gives the
producer a ``ready`` straight from a register and the consumer a ``valid`` and payload
straight from registers, at one item a cycle and one cycle of latency.
"""

from amaranth.hdl import Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["SkidBuffer"]


class SkidBuffer(wiring.Component):
    """Two registers, *main* (the output) and *skid*.

    ``i.ready`` is high while the skid register is empty; an item accepted while the main
    register is held (its ``o.ready`` low) waits in the skid register. Order is kept, nothing is
    dropped or duplicated; an item accepted in cycle ``t`` can leave in cycle ``t + 1``.
    ``o.valid`` is low exactly when both registers are empty.

    Members
    -------
    i : In(stream.Signature(shape))
    o : Out(stream.Signature(shape))
    """

    def __init__(self, shape):
        super().__init__({"i": In(stream.Signature(shape)), "o": Out(stream.Signature(shape))})

    def elaborate(self, platform):
        m = Module()
        main = Signal.like(self.o.payload)
        skid = Signal.like(self.i.payload)
        main_valid, skid_valid = Signal(), Signal()
        m.d.comb += [self.o.valid.eq(main_valid), self.o.payload.eq(main),
                     self.i.ready.eq(~skid_valid)]
        accept = self.i.valid & ~skid_valid
        with m.If(~main_valid | self.o.ready):
            # the main register is free: the skid register's item first, else the input's
            with m.If(skid_valid):
                m.d.sync += [main.eq(skid), main_valid.eq(1), skid_valid.eq(0)]
            with m.Else():
                m.d.sync += [main.eq(self.i.payload), main_valid.eq(self.i.valid)]
        with m.Elif(accept):
            m.d.sync += [skid.eq(self.i.payload), skid_valid.eq(1)]
        return m
