"""A small sequential multiplier / divider for the controller's per-layer set-up arithmetic.

The controller computes a handful of products and quotients per layer (output sizes, tile
sizes, tensor sizes in bytes). They are not on any critical path, so one shared unit that
takes a bit per cycle is enough and costs a few adders instead of wide combinational
multipliers and dividers.

Operations (``op``; both operands and the result ``width`` bits, unsigned)
    ``MUL``: ``a * b``; shift-and-add over the bits of ``b``, low first, ending when the
    remaining bits of ``b`` are zero (``bit_length(b)`` cycles, at least 1). ``overflow``
    when the product does not fit ``width`` bits (``result`` is then the low bits).
    ``DIV``: ``a // b``, restoring division, ``width`` cycles. ``overflow`` when ``b`` is 0
    (``result`` is then all ones).

Handshake
    ``start`` (while ``busy`` is low) samples ``op``, ``a`` and ``b``; ``done`` pulses for one
    cycle when ``result`` and ``overflow`` are valid; they hold until the next ``start``.
"""

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import enum, wiring
from amaranth.lib.wiring import In, Out

from bpsa.gateware.checked import CheckedComponent
from bpsa.plan.setup import UNIT_WIDTH

__all__ = ["SETUP_WIDTH", "ArithOp", "SeqMulDiv", "alu_signature", "setup_alu"]

#: Width of the accelerator controller's set-up unit (sizes in elements and bytes).
SETUP_WIDTH = UNIT_WIDTH


class ArithOp(enum.Enum, shape=1):
    MUL = 0
    DIV = 1


def alu_signature(width):
    """The unit as its user sees it: ``start``, ``op``, ``a``, ``b`` out; ``busy``, ``done``,
    ``result``, ``overflow`` in (:class:`SeqMulDiv` has the same members, flipped)."""
    return wiring.Signature({"start": Out(1), "op": Out(ArithOp), "a": Out(width),
                             "b": Out(width), "busy": In(1), "done": In(1),
                             "result": In(width), "overflow": In(1)})


class SeqMulDiv(CheckedComponent):
    """Sequential unsigned multiply / divide (see the module docstring).

    Parameters
    ----------
    width : int
        Bits of the operands and the result, in [2, 64].
    """

    @classmethod
    def check_parameters(cls, width):
        if not isinstance(width, int) or not 2 <= width <= 64:
            raise ValueError(f"width must be an integer in [2, 64], not {width!r}")

    def __init__(self, width):
        self.width = width
        super().__init__({
            "start": In(1), "op": In(ArithOp), "a": In(width), "b": In(width),
            "busy": Out(1), "done": Out(1), "result": Out(width), "overflow": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        w = self.width
        op = Signal(ArithOp)
        acc = Signal(w)              # MUL: running product; DIV: remainder
        x = Signal(2 * w)            # MUL: shifted multiplicand; DIV: dividend / quotient (low w)
        y = Signal(w)                # MUL: remaining multiplier bits; DIV: divisor
        n = Signal(range(w + 1))     # DIV: bits left
        ovf = Signal()
        busy = Signal()
        m.d.comb += [self.busy.eq(busy), self.result.eq(Mux(op, x[:w], acc)),
                     self.overflow.eq(ovf)]
        m.d.sync += self.done.eq(0)

        with m.If(~busy):
            with m.If(self.start):
                m.d.sync += [op.eq(self.op), busy.eq(1), ovf.eq(0), n.eq(w)]
                m.d.sync += [acc.eq(0), x.eq(self.a), y.eq(self.b)]
        with m.Elif(op == ArithOp.MUL):
            total = acc + x
            nxt = Signal(2 * w + 1)
            m.d.comb += nxt.eq(Mux(y[0], total, acc))
            m.d.sync += [acc.eq(nxt[:w]), x.eq(x << 1), y.eq(y >> 1)]
            with m.If(nxt[w:].any()):
                m.d.sync += ovf.eq(1)
            with m.If((y >> 1) == 0):
                m.d.sync += [busy.eq(0), self.done.eq(1)]
        with m.Else():
            # restoring division: shift the next dividend bit into the remainder
            rem = Cat(x[w - 1], acc)                # (acc << 1) | next bit, w + 1 bits
            fits = rem >= y
            m.d.sync += [acc.eq(Mux(fits, rem - y, rem)),
                         x.eq(Cat(fits, x[:w - 1])), n.eq(n - 1)]
            with m.If(n == 1):
                m.d.sync += [busy.eq(0), self.done.eq(1)]
                with m.If(y == 0):
                    m.d.sync += ovf.eq(1)
        return m


def setup_alu(config):
    """The accelerator controller's unit (``SETUP_WIDTH`` bits; ``config`` is not needed, it is
    taken so that ``bpsa.platform.verilog`` can generate the unit alone as the top
    ``setup_alu``)."""
    return SeqMulDiv(SETUP_WIDTH)
