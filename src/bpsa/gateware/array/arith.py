"""Arithmetic behind one interface, so that PEs and arrays never touch number formats.

A format supplies the shapes of operands and accumulators and builds the expressions the PE
needs (product, accumulate, zero test, scaled update). Integer formats exist now; a
floating-point format is a second class with the same methods.
"""

from amaranth.hdl import Cat, Const, Mux, Shape, Signal, signed, unsigned

from bpsa.gateware.array.dsp import registered_multiply
from bpsa.gateware.common.pipeline import delayed
from bpsa.spec.numeric import float_format

__all__ = ["FloatArith", "IntArith", "arith_for"]




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

    def multiplier(self, m, a, b, fire, *, latency=4, platform=None):
        """The PE's pipelined multiplier, built into ``m``. The operands ``a`` and ``b`` are
        taken into fabric registers at the end of a cycle in which ``fire`` is high (they keep
        their values otherwise: operand isolation), one cycle later into the multiplier's
        input registers, and their product is registered one cycle after that, zero when the
        slot did not fire, then delayed by ``latency - 3`` more registers in the fabric (the
        fabric registers on both sides of the DSP block take the long routes to and from it
        off the logic's paths). Returns ``(product, (mul_a, mul_b))``: the last product
        register (the product of the operands presented ``latency`` cycles before) and the
        operands' fabric registers.

        On an ECP5 (``platform.family == "ecp5"``, as Amaranth's ``LatticePlatform`` and the
        synthesis flow's target say) with operands of at most 18 bits, the input and product
        registers are the ``MULT18X18D``'s own: its input registers clock-enabled by the
        slot's fire bit, its output register reset synchronously when the slot did not fire.
        Yosys maps an inferred multiply to a ``MULT18X18D`` without its registers, so the
        block is instantiated. Elsewhere all registers are flip-flops around an inferred
        multiply."""
        if latency < 3:
            raise ValueError(f"latency must be at least 3 (operand, input and product "
                             f"registers), not {latency}")
        width = self.operand_shape.width
        mul_a, mul_b = Signal(self.operand_shape), Signal(self.operand_shape)
        fire0, fire1 = Signal(), Signal()
        with m.If(fire):
            m.d.sync += [mul_a.eq(a), mul_b.eq(b)]
        m.d.sync += [fire0.eq(fire), fire1.eq(fire0)]
        product = Signal(signed(2 * width + 1))
        m.d.comb += product.eq(registered_multiply(m, mul_a, mul_b, load=fire0, keep=fire1,
                                                   platform=platform))
        return delayed(m, product, latency - 3), (mul_a, mul_b)

    def add(self, acc, x):
        """``acc + x``, wrapped to the accumulator shape (the caller assigns it to one)."""
        return acc + x

    def requantize(self, acc, shift):
        """An accumulator to an operand: ``acc`` shifted right by ``shift`` (arithmetic),
        rounded half up, saturated to the operand range (``bpsa.models.golden.requantize``).

        Built that narrow: ``acc`` plus half an output step, then a logarithmic shifter that
        keeps only the ``operand_width`` bits the result can take, and the saturation from a
        thermometer mask of ``shift``: the result fits when the sum's bits from ``shift +
        operand_width - 1`` up all equal its sign bit (unsigned operands: the sum is not
        negative and its bits from ``shift + operand_width`` up are 0). No comparison of the
        shifted value, no shifter of the accumulator's width. The same as
        :meth:`requantize_last` of :meth:`requantize_first` (a pipeline registers between).
        """
        half, above = self.requantize_masks(shift)
        return self.requantize_last(*self.requantize_first(acc, shift, half, above), shift)

    def requantize_masks(self, shift):
        """``(half, above)`` of :meth:`requantize`, from ``shift`` alone: half an output step
        (``2 ** (shift - 1)``, 0 for ``shift`` 0) and the thermometer mask of the sum's bits
        that must equal its sign (unsigned operands: be 0)."""
        aw, w = self.acc_shape.width, self.operand_shape.width
        half = (Const(1, aw + 1) << shift)[1:]
        # from shift + (w - 1 if signed else w) up
        first = shift + (w - 1 if self.operand_shape.signed else w)
        above = Cat(*[(Const(j, len(first) + 1) >= first) for j in range(aw + 1)])
        return half, above

    def requantize_split(self, shift):
        """The shift bits :meth:`requantize_first` applies (the upper half, from this index)."""
        return len(shift) // 2

    def requantize_first(self, acc, shift, half, above):
        """The first half of :meth:`requantize`: the rounded sum shifted by the upper bits of
        ``shift`` (from :meth:`requantize_split`), whether the result saturates, and the sum's
        sign: ``(x, saturates, sign)``."""
        aw = self.acc_shape.width
        total = acc.as_signed() + half
        x = total.as_signed()
        for k in reversed(range(self.requantize_split(shift), len(shift))):
            x = self._shift_stage(x, shift, k)
        sign = total.as_signed()[aw]
        bits = total.as_unsigned()[:aw + 1]
        if self.operand_shape.signed:
            saturates = ((bits ^ sign.replicate(aw + 1)) & above).any()
        else:                   # a negative result is 0, any bit above the range saturates
            saturates = (bits & above).any()
        return x, saturates, sign

    def requantize_last(self, x, saturates, sign, shift):
        """The second half of :meth:`requantize`: ``x`` shifted by the lower bits of
        ``shift``, or the bound it saturates to."""
        w = self.operand_shape.width
        for k in reversed(range(self.requantize_split(shift))):
            x = self._shift_stage(x, shift, k)
        low = x[:w]
        if self.operand_shape.signed:
            lo, hi = -(1 << (w - 1)), (1 << (w - 1)) - 1
            return Mux(saturates, Mux(sign, Const(lo, signed(w)), Const(hi, signed(w))),
                       low)[:w]
        return Mux(sign, 0, Mux(saturates, (1 << w) - 1, low))[:w]

    def _shift_stage(self, x, shift, k):
        """One stage of the logarithmic shifter: ``x >> 2 ** k`` where ``shift[k]``, keeping
        the bits later stages can still bring into the operand."""
        keep = min(self.acc_shape.width + 1, self.operand_shape.width + (1 << k) - 1)
        return Mux(shift[k], x >> (1 << k), x)[:keep].as_signed()

    def scaled_gradient(self, g, shift):
        """The low operand-width bits of ``g >> shift`` (arithmetic), the part of the scaled
        gradient an SGD step uses (its result wraps to the operand width), built that wide: a
        logarithmic shifter that keeps only the bits later stages can reach, not a barrel
        shifter of the accumulator's width."""
        width = self.operand_shape.width
        x = g.as_signed()
        for k in reversed(range(len(shift))):
            # after this stage at most 2**k - 1 more bits shift in: keep what they can reach
            keep = min(len(x), width + (1 << k) - 1)
            x = Mux(shift[k], x >> (1 << k), x)[:keep].as_signed()
        return x[:width]

    def step(self, w, scaled):
        """``w - scaled`` wrapped to the operand shape (``scaled`` from
        :meth:`scaled_gradient`)."""
        return (w - scaled)[:self.operand_shape.width]

    def update(self, w, g, shift):
        """SGD step ``w - (g >> shift)`` with an arithmetic shift, wrapped to the operand
        shape."""
        return self.step(w, self.scaled_gradient(g, shift))


class FloatArith:
    """Floating-point operands (``bf16``, ``fp16``) with fp32 accumulators, as encodings
    (``docs/architecture/floating_point.md``): operands and accumulators are unsigned bit patterns;
    the
    arithmetic itself is :mod:`bpsa.gateware.fp.fpu`'s."""

    def __init__(self, fmt):
        self.fmt = float_format(fmt)
        self.operand_shape = unsigned(self.fmt.bits)
        self.acc_shape = unsigned(32)
        #: the descriptors' shift fields keep their width (an integer's requantization and
        #: SGD shifts; not used in floating point)
        self.shift_shape = unsigned(5)

    def zero(self, x):
        """1 when the operand ``x`` reads as zero: a zero of either sign or a subnormal (its
        exponent field is 0)."""
        f = self.fmt
        return x[f.man_bits:f.man_bits + f.exp_bits] == 0

    def as_operand(self, x):
        """The low bits of a wider value as an operand encoding."""
        return x.as_unsigned()[:self.operand_shape.width]


def arith_for(config):
    """The arithmetic object for a :class:`~bpsa.config.Config`."""
    if config.arithmetic == "mxfp8_e4m3":
        from bpsa.gateware.array.mx_arith import MxArith
        return MxArith(config.arithmetic)
    if config.arithmetic in ("int", "mxint8"):
        # mxint8: the element codes are the integers, a block's sum an integer sum
        return IntArith(operand_width=config.operand_width,
                        operand_signed=config.operand_signed,
                        acc_width=config.acc_width)
    return FloatArith(config.arithmetic)
