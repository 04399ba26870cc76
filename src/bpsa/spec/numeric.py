"""Numbers at the hardware/host boundary: element sizes in memory, operand ranges and the
accumulators' wrap-around. Pure Python and numpy; no Amaranth."""

from dataclasses import dataclass

import numpy as np

__all__ = ["FLOAT_FORMATS", "FloatFormat", "float_format", "MX_BLOCK", "MX_FORMATS",
           "MX_SCALE_BIAS", "MX_SCALE_NAN", "MX_SCALE_RULES", "MxFormat", "mx_format", "POOL_DIVIDE_CHUNK",
           "POOL_FLOAT_MAC_LATENCY", "POOL_RECIP_SHIFT", "element_bytes", "operand_range",
           "pool_divide_cycles", "pool_divide_widths", "pool_window_limit", "wrap", "wrap_array"]


def element_bytes(bits):
    """Bytes an element of ``bits`` bits occupies in external memory: the smallest of 1, 2, 4,
    8 that holds it."""
    if isinstance(bits, bool) or not isinstance(bits, int) or not 1 <= bits <= 64:
        raise ValueError(f"element width must be an integer in [1, 64] bits, not {bits!r}")
    for n in (1, 2, 4, 8):
        if bits <= 8 * n:
            return n


def operand_range(config):
    """``(lo, hi)``, both inclusive: the values an ``operand_width``-bit operand of ``config``
    holds (two's complement when ``operand_signed``)."""
    bits = config.operand_width
    if config.operand_signed:
        return -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    return 0, (1 << bits) - 1


def wrap(x, bits, signed=True):
    """The integer ``x`` reduced modulo ``2**bits``, as a signed or unsigned integer: what a
    ``bits``-bit register holds after an overflow."""
    x &= (1 << bits) - 1
    if signed and x >> (bits - 1):
        x -= 1 << bits
    return x


def wrap_array(t, bits, signed=True):
    """:func:`wrap` of every element of the integer array ``t`` (exact for any Python ints),
    as int64 (uint64 for unsigned 64-bit values)."""
    t = np.asarray(t, dtype=object) % (1 << bits)
    if signed:
        t = np.where(t >= 1 << (bits - 1), t - (1 << bits), t)
    return t.astype(np.int64 if signed or bits < 64 else np.uint64)


#: The average pooling's division: ``floor(a / d) = (a m) >> POOL_RECIP_SHIFT`` with ``m =
#: floor(2**POOL_RECIP_SHIFT / d) + 1``, exact while ``a d < 2**POOL_RECIP_SHIFT``.
POOL_RECIP_SHIFT = 47


def pool_window_limit(config):
    """The largest window ``R S`` the average pooling divides by exactly: the numerator
    ``2 sum + R S`` (``|sum| <= R S 2**operand_width``) made positive is below ``R S
    (2**(operand_width + 1) + 3)``, the divisor is ``2 R S``, and their product must stay
    below ``2**POOL_RECIP_SHIFT``."""
    import math
    bound = (1 << POOL_RECIP_SHIFT) - 1
    return math.isqrt(bound // (2 * ((1 << (config.operand_width + 1)) + 3)))


#: Bits of a piece of the pooling unit's division product's operands: one piece of each
#: makes one hardware multiplier's product (an ECP5 MULT18X18D holds 17 x 17 unsigned).
POOL_DIVIDE_CHUNK = 17


def pool_divide_widths(config):
    """``(magnitude bits, reciprocal bits)`` of the pooling unit's division product: the
    numerator made positive is below ``R S (2**(operand_width + 1) + 3)`` with ``R S <=``
    :func:`pool_window_limit` (and fits ``acc_width + 3`` bits, the unit's numerator's); the
    reciprocal ``floor(2**POOL_RECIP_SHIFT / (2 R S)) + 1`` fits ``POOL_RECIP_SHIFT`` bits."""
    mag = pool_window_limit(config) * ((1 << (config.operand_width + 1)) + 3) - 1
    return min(config.acc_width + 3, mag.bit_length()), POOL_RECIP_SHIFT


def pool_divide_cycles(config):
    """Cycles of the pooling unit's division (:mod:`bpsa.gateware.frontends.pool.pool`): the
    numerator, the pieces' products (:data:`POOL_DIVIDE_CHUNK` bits each operand), their sum
    and the negative quotient's ``-1`` term in pairs (one level of the tree a cycle)."""
    a, b = pool_divide_widths(config)
    terms = -(-a // POOL_DIVIDE_CHUNK) * -(-b // POOL_DIVIDE_CHUNK) + 1
    return 2 + max(1, (terms - 1).bit_length())


#: Floating point: cycles of the pooling unit's fp32 multiply-add (its inputs registered, then
#: ``FloatMac``: a product in two, an addition in five). A forward average's tap takes one cycle
#: more than this (its sum is in the adder before the next tap's is), each dY summed by the
#: average's backward one more, and the scaling of an average one more.
POOL_FLOAT_MAC_LATENCY = 8


@dataclass(frozen=True)
class FloatFormat:
    """A binary floating-point format of the numeric contract
    (``docs/architecture/floating_point.md``):
    ``exp_bits`` exponent bits, ``man_bits`` stored significand bits (IEEE 754 layout: sign,
    biased exponent, fraction). Zeros and subnormal encodings read as zero; a NaN result is
    always :attr:`nan`, the canonical quiet NaN."""
    name: str
    exp_bits: int
    man_bits: int

    @property
    def bits(self):
        return 1 + self.exp_bits + self.man_bits

    @property
    def bias(self):
        return (1 << (self.exp_bits - 1)) - 1

    @property
    def emin(self):
        """The smallest normal number's exponent: ``2**emin``."""
        return 1 - self.bias

    @property
    def emax(self):
        return self.bias

    @property
    def inf(self):
        """The encoding of +infinity (``| 1 << (bits - 1)`` for -infinity)."""
        return ((1 << self.exp_bits) - 1) << self.man_bits

    @property
    def nan(self):
        """The canonical NaN: positive, quiet, only the fraction's top bit set."""
        return self.inf | (1 << (self.man_bits - 1))


#: The floating-point formats by name: operands ``bf16``, ``fp16`` (and ``fp32``), the
#: accumulators and the P buffer always ``fp32``.
FLOAT_FORMATS = {f.name: f for f in (FloatFormat("bf16", 8, 7), FloatFormat("fp16", 5, 10),
                                     FloatFormat("fp32", 8, 23))}


def float_format(fmt):
    """The :class:`FloatFormat` ``fmt`` (itself, or its name in :data:`FLOAT_FORMATS`);
    anything else is refused with the names allowed."""
    if isinstance(fmt, FloatFormat):
        return fmt
    try:
        return FLOAT_FORMATS[fmt]
    except (KeyError, TypeError):
        raise ValueError(f"floating-point format must be one of {list(FLOAT_FORMATS)}, "
                         f"not {fmt!r}") from None


#: Elements per block of an OCP MX (Microscaling v1.0) format: each block shares one scale.
MX_BLOCK = 32
#: The E8M0 scale: code ``c`` in ``[0, 254]`` is ``2**(c - MX_SCALE_BIAS)``; ``MX_SCALE_NAN``
#: makes the whole block NaN.
MX_SCALE_BIAS = 127
MX_SCALE_NAN = 255
#: How a block's scale is chosen (``docs/architecture/mx.md``): ``"floor"`` is OCP MX 6.3
#: (``floor(log2(amax)) - emax`` of the element type; the largest elements may saturate);
#: ``"ceil"`` is the smallest scale at which no element saturates (the scale "rounded up" of
#: NVIDIA's MXFP8 training recipe).
MX_SCALE_RULES = ("floor", "ceil")


@dataclass(frozen=True)
class MxFormat:
    """An OCP MX block format: :data:`MX_BLOCK` 8-bit elements sharing an E8M0 scale.

    An element's value is ``I * 2**quantum_exp`` with ``I`` an integer (:attr:`max_int` at
    most in magnitude): for ``int8`` the two's-complement code itself (an implicit scale of
    2^-6); for the FP8 elements ``(-1)**s * M << max(E - 1, 0)`` with ``M`` the significand
    (the stored fraction, plus the hidden bit when the exponent field ``E`` is not 0).
    ``exp_bits = 0`` marks the integer element."""
    name: str
    exp_bits: int
    man_bits: int
    #: the element's largest finite magnitude's code (sign bit clear)
    max_code: int

    bits = 8

    @property
    def is_int(self):
        return self.exp_bits == 0

    @property
    def bias(self):
        return (1 << (self.exp_bits - 1)) - 1 if self.exp_bits else 0

    @property
    def emin(self):
        """The exponent of the element's smallest normal number (``int8``: its one step's
        exponent plus its fraction bits, so that :attr:`quantum_exp` is ``-6``)."""
        return 1 - self.bias if self.exp_bits else 0

    @property
    def quantum_exp(self):
        """The exponent of the element's smallest step: every element is a multiple of
        ``2**quantum_exp``."""
        return self.emin - self.man_bits

    @property
    def max_int(self):
        """The largest element magnitude in steps of ``2**quantum_exp``."""
        if self.is_int:
            return self.max_code
        e, f = self.max_code >> self.man_bits, self.max_code & ((1 << self.man_bits) - 1)
        return (f | (1 << self.man_bits)) << (e - 1)

    @property
    def emax(self):
        """``floor(log2)`` of the largest finite element: OCP MX 6.3's ``emax_elem``."""
        return (self.max_int.bit_length() - 1) + self.quantum_exp

    @property
    def max_value(self):
        return self.max_int * 2.0 ** self.quantum_exp


#: The MX formats by name. ``mxint8``: elements -127..127 (two's complement, implicit scale
#: 2^-6; conversion saturates to +-127 steps, the code 0x80 reads as -2); ``mxfp8_e4m3``: OCP
#: FP8 E4M3 (bias 7, largest 448, S.1111.111 NaN, no infinities); ``mxfp8_e5m2``: OCP FP8
#: E5M2 (bias 15, largest 57344, IEEE-style infinities and NaNs).
MX_FORMATS = {f.name: f for f in (MxFormat("mxint8", 0, 6, 127),
                                  MxFormat("mxfp8_e4m3", 4, 3, 0x7E),
                                  MxFormat("mxfp8_e5m2", 5, 2, 0x7B))}


def mx_format(fmt):
    """The :class:`MxFormat` ``fmt`` (itself, or its name in :data:`MX_FORMATS`); anything
    else is refused with the names allowed."""
    if isinstance(fmt, MxFormat):
        return fmt
    try:
        return MX_FORMATS[fmt]
    except (KeyError, TypeError):
        raise ValueError(f"MX format must be one of {list(MX_FORMATS)}, not {fmt!r}") from None
