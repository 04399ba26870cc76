"""The PE's arithmetic in an OCP MX block format (``docs/architecture/mx.md``): element codes
in, a block's exact integer sum out.

The PE (:class:`bpsa.gateware.array.pe.PE`) is the integer PE: it multiplies, accumulates and
drains through :class:`MxArith` (FP8 elements) as it does through
:class:`~bpsa.gateware.array.arith.IntArith` (integers, and ``mxint8``). What the contract puts outside the per-MAC loop
(each block's two scales, and the block's sum added into an fp32 sum with one rounding) is
not here: one output-stationary context is one block, and its accumulator leaves as the
block's exact sum.

- ``mxint8`` needs no class of its own: the code is the element as a two's-complement
  integer (steps of 2^-6), so it is ``IntArith`` at 8 bits with a 21-bit sum (32 products of
  at most 2^14 each, the code -128 included).
- ``mxfp8_e4m3``: the code is decoded into a sign, a 4-bit significand ``M`` (the hidden bit
  set for a non-zero exponent field ``E``) and a shift ``max(E - 1, 0)``: the element is
  ``+-M << shift`` steps of 2^-9. The product is ``(Ma << shift_a) x (Mb << shift_b)``, one
  unsigned 18 x 18 multiply (a DSP block): an exact integer of 36 bits and a sign; the
  accumulator is 42 bits (32 products) with a NaN flag above them, set by the product of a
  NaN element code (``S.1111.111``, multiplied as its bits read: +-15 << 14) with a non-zero
  element, and kept until the context ends; a product with a zero element is skipped, as in
  the floating-point contract, NaN or not.
"""

from amaranth.hdl import Cat, Mux, Signal, unsigned

from bpsa.config import MX_WIDTHS
from bpsa.gateware.array.dsp import registered_multiply
from bpsa.gateware.common.pipeline import delayed
from bpsa.spec.numeric import mx_format

__all__ = ["MxArith"]


class MxArith:
    """Arithmetic of an MX format with FP8 elements behind the PE's interface (see the
    module docstring): operands are element codes, accumulators a block's exact sum with the
    NaN flag above it. (``mxint8`` is :class:`~bpsa.gateware.array.arith.IntArith` at 8 bits:
    ``bpsa.gateware.array.arith.arith_for``.)"""

    def __init__(self, fmt):
        self.fmt = mx_format(fmt)
        if self.fmt.is_int:
            raise ValueError(f"{self.fmt.name} is the integer arithmetic (IntArith at 8 bits, "
                             f"bpsa.gateware.array.arith.arith_for); MxArith is for FP8 elements")
        op, acc = MX_WIDTHS[self.fmt.name]
        self.operand_shape = unsigned(op)
        #: the exact sum's bits (below the NaN flag)
        self.sum_width = acc - 1
        #: a product's magnitude bits (the significands' product shifted by up to 28)
        self.product_width = 2 * (self.fmt.man_bits + 1) + 2 * ((1 << self.fmt.exp_bits) - 2)
        self.acc_shape = unsigned(acc)
        #: not used in MX (requantization and SGD steps are integer features)
        self.shift_shape = unsigned(5)

    def zero(self, x):
        """1 when the element code ``x`` is a zero (of either sign)."""
        return x[:7] == 0

    def as_operand(self, x):
        """The low 8 bits of a wider value as an element code."""
        return x.as_unsigned()[:8]

    def add(self, acc, x):
        """``acc + x``: the exact sums added, the NaN flags or-ed above them."""
        # x is a product (:meth:`multiplier`): its magnitude's one's complement when
        # negative, the sign and the NaN flag. The sign's +1 joins the add as one adder a bit
        # wider: (2 acc + neg) + (2 ~mag + neg) is 2 (acc - mag) + 2 neg, so its bits 1..w
        # are the signed sum
        w, pw = self.sum_width, self.product_width
        flipped, neg, nan = x[:pw], x[pw], x[pw + 1]
        total = Cat(neg, acc[:w]) + Cat(neg, flipped, neg.replicate(w - pw))
        return Cat(total[1:w + 1], acc[w] | nan)

    def multiplier(self, m, a, b, fire, *, latency=4, platform=None):
        """The PE's pipelined multiplier (the contract of
        :meth:`~bpsa.gateware.array.arith.IntArith.multiplier`): operands taken into fabric
        registers when ``fire``, the product of the operands presented ``latency`` cycles
        before out of the last register, zero for a slot that did not fire.

        Each code is decoded into its significand shifted by its own shift, ``M << max(E -
        1, 0)`` (at most 4 + 14 = 18 bits), so that one unsigned 18 x 18 multiply gives the
        shifted product exactly: ``(Ma << sa) (Mb << sb) = Ma Mb << (sa + sb)``, 36 bits. The
        decoded operands go into the multiplier's input registers (cycle 2; on an ECP5 a
        ``MULT18X18D``'s own, as the integer PE's), the product into its output register,
        zero when the slot did not fire (cycle 3), and the magnitude (its one's complement when
        negative), the sign and the NaN flag into fabric registers (cycle 4), then delayed;
        :meth:`add` adds the sign's +1 in the accumulator's adder."""
        if latency < 4:
            raise ValueError(f"latency must be at least 4 (operand, input, product and sign "
                             f"registers), not {latency}")
        f = self.fmt
        mul_a, mul_b = Signal(8), Signal(8)
        fire0, fire1 = Signal(), Signal()
        with m.If(fire):
            m.d.sync += [mul_a.eq(a), mul_b.eq(b)]
        m.d.sync += [fire0.eq(fire), fire1.eq(fire0)]
        shifted, flags = [], []
        for name, code in (("a", mul_a), ("b", mul_b)):
            e = code[f.man_bits:7]
            op = Signal(18, name=f"op_{name}")
            shift = Mux(e != 0, (e - 1)[:len(e)], 0)           # max(E - 1, 0)
            m.d.comb += op.eq(Cat(code[:f.man_bits], e != 0) << shift)
            neg, nan, nonzero = (Signal(name=f"{k}_{name}") for k in ("neg", "nan", "nz"))
            with m.If(fire0):           # beside the multiplier's input registers
                m.d.sync += [neg.eq(code[7]), nan.eq(code[:7] == 0x7F),
                             nonzero.eq(code[:7] != 0)]
            shifted.append(op)
            flags.append((neg, nan, nonzero))
        (na, xa, za), (nb, xb, zb) = flags
        mag = registered_multiply(m, *shifted, load=fire0, keep=fire1, platform=platform)
        neg, nan = Signal(), Signal()
        m.d.sync += [neg.eq(fire1 & (na ^ nb)), nan.eq(fire1 & (xa | xb) & za & zb)]
        product = Signal(self.product_width + 2)
        pw = self.product_width
        m.d.sync += product.eq(Cat(mag[:pw] ^ neg.replicate(pw), neg, nan))
        return delayed(m, product, latency - 4), (mul_a, mul_b)

