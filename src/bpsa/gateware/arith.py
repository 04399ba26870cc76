"""Arithmetic behind one interface, so that PEs and arrays never touch number formats.

A format supplies the shapes of operands and accumulators and builds the expressions the PE
needs (product, accumulate, zero test, scaled update). Integer formats exist now; a
floating-point format is a second class with the same methods.
"""

from amaranth.hdl import Const, Mux, Shape, signed, unsigned

__all__ = ["IntArith", "arith_for"]


class IntArith:
    """Two's-complement integer arithmetic.

    Operands are ``operand_width`` bits, signed or unsigned; accumulators are ``acc_width`` bits,
    always signed, and wrap modulo ``2**acc_width``.
    """

    def __init__(self, *, operand_width, operand_signed, acc_width):
        self.operand_shape = Shape(operand_width, operand_signed)
        self.acc_shape = signed(acc_width)
        self.shift_shape = unsigned(max(1, (acc_width - 1).bit_length()))

    def zero(self, x):
        """1 when the operand ``x`` is zero."""
        return x == 0

    def as_operand(self, x):
        """The low bits of a wider value (for example a shared vertical channel) as an operand."""
        return x.as_unsigned()[:self.operand_shape.width].as_signed() \
            if self.operand_shape.signed else x.as_unsigned()[:self.operand_shape.width]

    def mul(self, a, b):
        """The exact product of two operands."""
        return a * b

    def add(self, acc, x):
        """``acc + x``, wrapped to the accumulator shape (the caller assigns it to one)."""
        return acc + x

    def requantize(self, acc, shift):
        """An accumulator to an operand: ``acc`` shifted right by ``shift`` (arithmetic),
        rounded half up, saturated to the operand range (``bpsa.models.golden.requantize``)."""
        half = (Const(1, self.acc_shape.width + 1) << shift)[1:]   # 2 ** (shift - 1) or 0
        q = ((acc.as_signed() + half).as_signed() >> shift)
        w = self.operand_shape.width
        lo, hi = ((-(1 << (w - 1)), (1 << (w - 1)) - 1) if self.operand_shape.signed
                  else (0, (1 << w) - 1))
        return Mux(q > hi, hi, Mux(q < lo, lo, q))[:w]

    def update(self, w, g, shift):
        """SGD step ``w - (g >> shift)`` with an arithmetic shift, wrapped to the operand shape.
        Only the operand's width of the shifted gradient matters (the result wraps), so the
        shifter is built that wide: a multiplexer per result bit, not a barrel shifter."""
        width = self.operand_shape.width
        x = g.as_signed()
        for k in reversed(range(len(shift))):
            # after this stage at most 2**k - 1 more bits shift in: keep what they can reach
            keep = min(len(x), width + (1 << k) - 1)
            x = Mux(shift[k], x >> (1 << k), x)[:keep].as_signed()
        return (w - x[:width])[:width]


def arith_for(config):
    """The arithmetic object for a :class:`~bpsa.config.Config`."""
    if config.arithmetic == "int":
        return IntArith(operand_width=config.operand_width,
                        operand_signed=config.operand_signed,
                        acc_width=config.acc_width)
    raise ValueError(f"arithmetic {config.arithmetic!r} is not implemented")
