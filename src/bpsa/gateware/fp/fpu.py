"""Floating-point units of the numeric contract (``docs/architecture/floating_point.md``): the
exact product
of two operands and its addition into an fp32 sum, rounded once.

:class:`FloatMultiplier` decodes two operands (``bf16``, ``fp16`` or ``fp32``) and registers
their exact product as a :func:`product_layout` (sign, the exponent of its leading bit, the
significand with its leading bit set, a kind). :class:`FloatAdder` adds such a product to an
fp32 encoding in five pipeline stages (order, align, add, normalize, round) and is the MAC's
adder: a product of kind ``ZERO`` passes the sum through unchanged (the contract's skip).
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import data, enum, wiring
from amaranth.lib.wiring import In, Out

from bpsa.spec.numeric import FLOAT_FORMATS, float_format

__all__ = ["EXP_SHAPE", "FloatAdder", "FloatKind", "FloatMac", "FloatMultiplier", "addend_layout",
           "fp32_addend", "fp32_relu", "fp32_to", "is_positive", "order_key", "product_layout",
           "widen"]

#: Exponents inside the units: a product's leading bit lies in ``[2**-252, 2**256)``.
EXP_SHAPE = signed(11)

F32 = FLOAT_FORMATS["fp32"]


class FloatKind(enum.Enum, shape=2):
    ZERO = 0        # zero or subnormal: the MAC is skipped
    NORMAL = 1
    INF = 2
    NAN = 3


def addend_layout(width):
    """What :class:`FloatAdder` adds to an fp32 sum: ``sig * 2**(exp - (width - 1))`` with the
    significand's leading bit (bit ``width - 1``) set, and a kind."""
    return data.StructLayout({"kind": FloatKind, "sign": 1, "exp": EXP_SHAPE, "sig": width})


def product_layout(fmt):
    """An exact product of two ``fmt`` operands (:func:`addend_layout` of ``2 (man_bits +
    1)`` bits)."""
    return addend_layout(2 * (float_format(fmt).man_bits + 1))


def fp32_addend(m, bits, name):
    """An fp32 encoding ``bits`` as an :func:`addend_layout` of 24 bits (a zero or subnormal
    is of kind ``ZERO``: added, it leaves the sum unchanged, as a skipped product does)."""
    kind, sign, exp, sig = _decode(m, bits, F32, name)
    out = Signal(addend_layout(24), name=name)
    m.d.comb += [out.kind.eq(kind), out.sign.eq(sign), out.exp.eq(exp), out.sig.eq(sig)]
    return out


def _decode(m, bits, f, name):
    """(kind, sign, unbiased exponent, significand with the hidden bit) of an operand."""
    e = bits[f.man_bits:f.man_bits + f.exp_bits]
    frac = bits[:f.man_bits]
    kind = Signal(FloatKind, name=f"{name}_kind")
    with m.If(e == 0):
        m.d.comb += kind.eq(FloatKind.ZERO)
    with m.Elif(e == (1 << f.exp_bits) - 1):
        m.d.comb += kind.eq(Mux(frac.any(), FloatKind.NAN, FloatKind.INF))
    with m.Else():
        m.d.comb += kind.eq(FloatKind.NORMAL)
    exp = Signal(EXP_SHAPE, name=f"{name}_exp")
    m.d.comb += exp.eq(e - f.bias)
    return kind, bits[f.bits - 1], exp, Cat(frac, Const(1, 1))


class FloatMultiplier(wiring.Component):
    """The exact product of ``a`` and ``b`` (``fmt`` encodings), registered: ``product`` holds
    the product of the operands presented in the cycle before (two registers: the
    significands' product, then its one-bit normalization and the kind)."""

    LATENCY = 2

    def __init__(self, fmt):
        self.fmt = float_format(fmt)
        f = self.fmt
        super().__init__({"a": In(f.bits), "b": In(f.bits),
                          "product": Out(product_layout(f))})

    def elaborate(self, platform):
        m = Module()
        f = self.fmt
        p = f.man_bits + 1
        ka, sa, ea, ma = _decode(m, self.a, f, "a")
        kb, sb, eb, mb = _decode(m, self.b, f, "b")
        # stage 1: the significands' product, the exponents' sum, the kind
        sig = Signal(2 * p)
        exp = Signal(EXP_SHAPE)
        sign = Signal()
        kind = Signal(FloatKind)
        m.d.sync += [sig.eq(ma * mb), exp.eq(ea + eb), sign.eq(sa ^ sb)]
        with m.If((ka == FloatKind.ZERO) | (kb == FloatKind.ZERO)):
            m.d.sync += kind.eq(FloatKind.ZERO)
        with m.Elif((ka == FloatKind.NAN) | (kb == FloatKind.NAN)):
            m.d.sync += kind.eq(FloatKind.NAN)
        with m.Elif((ka == FloatKind.INF) | (kb == FloatKind.INF)):
            m.d.sync += kind.eq(FloatKind.INF)
        with m.Else():
            m.d.sync += kind.eq(FloatKind.NORMAL)
        # stage 2: the leading bit to the top (the product of two [1, 2) values is in [1, 4))
        top = sig[2 * p - 1]
        m.d.sync += [
            self.product.kind.eq(kind), self.product.sign.eq(sign),
            self.product.exp.eq(exp + top),
            self.product.sig.eq(Mux(top, sig, sig << 1)),
        ]
        return m


def _leading_zeros(m, x, name):
    """The number of leading zeros of ``x`` (``len(x)`` when it is zero): a tree of halves,
    each level choosing between its upper half's count and half plus its lower half's."""
    n = len(x)
    size = 1 << max(0, (n - 1).bit_length())
    padded = Cat(Const(0, size - n), x) if size > n else x      # zeros below the LSB

    def tree(v):
        """(all zero, leading zeros) of v, a power-of-two width."""
        w = len(v)
        if w == 1:
            return ~v[0], Const(0, 0)
        zl, cl = tree(v[:w // 2])
        zh, ch = tree(v[w // 2:])
        return zl & zh, Mux(zh, Cat(cl, Const(1, 1)), Cat(ch, Const(0, 1)))

    zero, count = tree(padded)
    out = Signal(range(n + 1), name=name)
    # the padding zeros sit below the LSB: they count only when x is zero
    m.d.comb += out.eq(Mux(zero, n, count))
    return out


class FloatAdder(wiring.Component):
    """``sum + product`` rounded once (``docs/architecture/floating_point.md``), in ``LATENCY`` = 5
    pipeline
    stages: ``result`` is the sum of the ``acc`` and ``product`` presented five cycles before.

    Stage 1 orders the two by magnitude and works out the special cases; stage 2 aligns the
    smaller to the larger (a right shift that keeps a sticky bit); stage 3 adds or subtracts
    and counts the leading zeros; stage 4 normalizes and checks the exponent's range for both
    outcomes of the rounding; stage 5 rounds to nearest even at 24 bits, flushes below
    ``2**-126``, saturates to infinity above the largest finite number, and applies the special
    cases (skip, NaN, infinities).
    """

    LATENCY = 5

    def __init__(self, fmt=None, *, addend_width=None):
        """``fmt``: the operands' format, the addend a product of two (:func:`product_layout`);
        or ``addend_width`` bits of significand (24: an fp32 number, :func:`fp32_addend`)."""
        if (fmt is None) == (addend_width is None):
            raise ValueError("FloatAdder takes a format or an addend_width, one of them")
        self.width = addend_width if fmt is None else 2 * (float_format(fmt).man_bits + 1)
        super().__init__({"acc": In(32), "product": In(addend_layout(self.width)),
                          "result": Out(32)})

    def elaborate(self, platform):
        m = Module()
        q = max(24, self.width)                  # both left-aligned in q bits
        fw = q + 3                               # and guard, round, sticky below
        cap = fw + 1                 # a shift this far leaves only the sticky bit
        # each stage registers its own values and the ones carried on to the later stages:
        # (sign, exponent, special case, sign of the infinity, acc)
        big, small, amount, sub, carried = self._order(m, q, fw, cap)
        big, small, sub, carried = self._align(m, fw, cap, big, small, amount, sub, carried)
        total, lz, carried = self._add(m, fw, big, small, sub, carried)
        self._round(m, *self._normalize(m, fw, total, lz, carried))
        return m

    def _order(self, m, q, fw, cap):
        """Stage 1: decode, special cases, order by magnitude. Returns the stage's registers:
        the larger and the smaller significand, the shift that aligns the smaller, whether
        they subtract, and the carried values."""
        pw = self.width                          # the addend's significand
        prod = self.product
        ka, sa, ea, ma = _decode(m, self.acc, F32, "acc")
        a_val = Signal(q)
        b_val = Signal(q)
        m.d.comb += [a_val.eq(ma << (q - 24)), b_val.eq(prod.sig << (q - pw))]
        a_zero = ka == FloatKind.ZERO
        diff = Signal(signed(EXP_SHAPE.width + 1))
        m.d.comb += diff.eq(ea - prod.exp)
        a_big = Signal()
        m.d.comb += a_big.eq(~a_zero & ((diff > 0) | ((diff == 0) & (a_val >= b_val))))
        big, small = Signal(q), Signal(q)
        s_big, s_small = Signal(), Signal()
        e_big = Signal(EXP_SHAPE)
        # the shift, clamped to cap: both differences and their comparisons with cap side by
        # side (four short carry chains), chosen by a_big last
        w = EXP_SHAPE.width + 1
        ndiff = Signal(signed(w))
        far, nfar = Signal(), Signal()
        m.d.comb += [ndiff.eq(prod.exp - ea), far.eq(diff > cap), nfar.eq(ndiff > cap)]
        amount = Signal(range(cap + 1))
        m.d.comb += [
            big.eq(Mux(a_big, a_val, b_val)),
            small.eq(Mux(a_big, b_val, Mux(a_zero, 0, a_val))),
            s_big.eq(Mux(a_big, sa, prod.sign)), s_small.eq(Mux(a_big, prod.sign, sa)),
            e_big.eq(Mux(a_big, ea, prod.exp)),
            amount.eq(Mux(a_big, Mux(far, cap, diff), Mux(nfar, cap, ndiff))),
        ]
        special, inf_sign = self._special_cases(m, ka, sa)

        o_big, o_small = Signal(q), Signal(q)
        o_amount = Signal(range(cap + 1))
        o_sub, o_sign, o_exp = Signal(), Signal(), Signal(EXP_SHAPE)
        o_special, o_inf_sign, o_acc = Signal(2), Signal(), Signal(32)
        m.d.sync += [
            o_big.eq(big), o_small.eq(small), o_amount.eq(amount),
            o_sub.eq(s_big ^ s_small), o_sign.eq(s_big), o_exp.eq(e_big),
            o_special.eq(special), o_inf_sign.eq(inf_sign), o_acc.eq(self.acc),
        ]
        return o_big, o_small, o_amount, o_sub, (o_sign, o_exp, o_special, o_inf_sign, o_acc)

    def _special_cases(self, m, ka, sa):
        """Special cases, decided in stage 1, applied in stage 5: ``(special, inf_sign)``,
        ``special`` 0 none, 1 pass acc, 2 NaN, 3 infinity of ``inf_sign``."""
        prod = self.product
        special = Signal(2)         # 0 none, 1 pass acc, 2 NaN, 3 infinity of inf_sign
        inf_sign = Signal()
        with m.If(prod.kind == FloatKind.ZERO):
            m.d.comb += special.eq(1)
        with m.Elif((prod.kind == FloatKind.NAN) | (ka == FloatKind.NAN)):
            m.d.comb += special.eq(2)
        with m.Elif(prod.kind == FloatKind.INF):
            m.d.comb += [special.eq(Mux((ka == FloatKind.INF) & (sa != prod.sign), 2, 3)),
                         inf_sign.eq(prod.sign)]
        with m.Elif(ka == FloatKind.INF):
            m.d.comb += special.eq(1)
        return special, inf_sign

    def _align(self, m, fw, cap, o_big, o_small, o_amount, o_sub, carried):
        """Stage 2: align the smaller one; what falls off is the sticky bit. Returns the
        stage's registers: the two ``fw``-bit operands, whether they subtract, and the carried
        values."""
        o_sign, o_exp, o_special, o_inf_sign, o_acc = carried
        wide = Signal(fw + cap)
        m.d.comb += wide.eq(Cat(Const(0, cap), Const(0, 3), o_small) >> o_amount)
        aligned = Signal(fw)
        m.d.comb += aligned.eq(wide[cap:] | wide[:cap].any())
        s1_big, s1_small = Signal(fw), Signal(fw)
        s1_sub, s1_sign, s1_exp = Signal(), Signal(), Signal(EXP_SHAPE)
        s1_special, s1_inf_sign, s1_acc = Signal(2), Signal(), Signal(32)
        m.d.sync += [
            s1_big.eq(Cat(Const(0, 3), o_big)), s1_small.eq(aligned),
            s1_sub.eq(o_sub), s1_sign.eq(o_sign), s1_exp.eq(o_exp),
            s1_special.eq(o_special), s1_inf_sign.eq(o_inf_sign), s1_acc.eq(o_acc),
        ]
        return s1_big, s1_small, s1_sub, (s1_sign, s1_exp, s1_special, s1_inf_sign, s1_acc)

    def _add(self, m, fw, s1_big, s1_small, s1_sub, carried):
        """Stage 3: add or subtract, count leading zeros. Returns the stage's registers: the
        sum, its leading zeros, and the carried values."""
        s1_sign, s1_exp, s1_special, s1_inf_sign, s1_acc = carried
        total = Signal(fw + 1)
        m.d.comb += total.eq(Mux(s1_sub, s1_big - s1_small, s1_big + s1_small))
        lz = _leading_zeros(m, total, "lz")
        s2_total, s2_lz = Signal(fw + 1), Signal(range(fw + 2))
        s2_sign, s2_exp = Signal(), Signal(EXP_SHAPE)
        s2_special, s2_inf_sign, s2_acc = Signal(2), Signal(), Signal(32)
        m.d.sync += [
            s2_total.eq(total), s2_lz.eq(lz), s2_sign.eq(s1_sign), s2_exp.eq(s1_exp),
            s2_special.eq(s1_special), s2_inf_sign.eq(s1_inf_sign), s2_acc.eq(s1_acc),
        ]
        return s2_total, s2_lz, (s2_sign, s2_exp, s2_special, s2_inf_sign, s2_acc)

    def _normalize(self, m, fw, s2_total, s2_lz, carried):
        """Stage 4: normalize; the exponent and its range checks for both roundings. Returns
        the stage's registers, in :meth:`_round`'s order."""
        s2_sign, s2_exp, s2_special, s2_inf_sign, s2_acc = carried
        norm = Signal(fw + 1)
        m.d.comb += norm.eq(s2_total << s2_lz)          # leading one at bit fw
        # bit fw of total weighs 2**(e_big + 1): the leading bit's exponent is e_big + 1 - lz,
        # one more when the rounding carries out
        exp = Signal(signed(EXP_SHAPE.width + 2))
        m.d.comb += exp.eq(s2_exp + 1 - s2_lz)
        n_keep, n_guard, n_sticky = Signal(24), Signal(), Signal()
        n_exp = Signal(8)
        n_tiny, n_tiny_up, n_huge, n_huge_up, n_zero = (Signal(name=f"n_{k}") for k in (
            "tiny", "tiny_up", "huge", "huge_up", "zero"))
        n_sign, n_special, n_inf_sign, n_acc = Signal(), Signal(2), Signal(), Signal(32)
        m.d.sync += [
            n_keep.eq(norm[fw + 1 - 24:]), n_guard.eq(norm[fw - 24]),
            n_sticky.eq(norm[:fw - 24].any()), n_exp.eq((exp + F32.bias)[:8]),
            n_tiny.eq(exp < F32.emin), n_tiny_up.eq(exp + 1 < F32.emin),
            n_huge.eq(exp > F32.emax), n_huge_up.eq(exp + 1 > F32.emax),
            n_zero.eq(s2_total == 0), n_sign.eq(s2_sign), n_special.eq(s2_special),
            n_inf_sign.eq(s2_inf_sign), n_acc.eq(s2_acc),
        ]
        return (n_keep, n_guard, n_sticky, n_exp, n_tiny, n_tiny_up, n_huge, n_huge_up, n_zero,
                n_sign, n_special, n_inf_sign, n_acc)

    def _round(self, m, n_keep, n_guard, n_sticky, n_exp, n_tiny, n_tiny_up, n_huge, n_huge_up,
               n_zero, n_sign, n_special, n_inf_sign, n_acc):
        """Stage 5: round to nearest even, pack, apply the special cases; registers
        ``result``."""
        rounded = Signal(25)
        m.d.comb += rounded.eq(n_keep + (n_guard & (n_sticky | n_keep[0])))
        carry = rounded[24]
        frac = Mux(carry, rounded[1:24], rounded[:23])
        res = Signal(32)
        with m.If(n_special == 1):
            m.d.comb += res.eq(n_acc)
        with m.Elif(n_special == 2):
            m.d.comb += res.eq(F32.nan)
        with m.Elif(n_special == 3):
            m.d.comb += res.eq(Cat(Const(0, 23), Const(0xFF, 8), n_inf_sign))
        with m.Elif(n_zero):
            m.d.comb += res.eq(0)
        with m.Elif(Mux(carry, n_tiny_up, n_tiny)):
            m.d.comb += res.eq(Cat(Const(0, 31), n_sign))
        with m.Elif(Mux(carry, n_huge_up, n_huge)):
            m.d.comb += res.eq(Cat(Const(0, 23), Const(0xFF, 8), n_sign))
        with m.Else():
            m.d.comb += res.eq(Cat(frac, (n_exp + carry)[:8], n_sign))
        m.d.sync += self.result.eq(res)


class FloatMac(wiring.Component):
    """A multiply-add of the contract: :class:`FloatMultiplier` feeding :class:`FloatAdder`,
    the sum delayed to meet the product. ``result`` is ``acc + a * b`` of the inputs presented
    :attr:`LATENCY` cycles before."""

    LATENCY = FloatMultiplier.LATENCY + FloatAdder.LATENCY

    def __init__(self, fmt):
        self.fmt = float_format(fmt)
        super().__init__({"a": In(self.fmt.bits), "b": In(self.fmt.bits), "acc": In(32),
                          "result": Out(32)})

    def elaborate(self, platform):
        m = Module()
        mul = m.submodules.mul = FloatMultiplier(self.fmt)
        add = m.submodules.add = FloatAdder(self.fmt)
        acc = self.acc
        for k in range(FloatMultiplier.LATENCY):
            later = Signal(32, name=f"acc_d{k + 1}")
            m.d.sync += later.eq(acc)
            acc = later
        m.d.comb += [mul.a.eq(self.a), mul.b.eq(self.b), add.acc.eq(acc),
                     add.product.eq(mul.product), self.result.eq(add.result)]
        return m


def fp32_to(m, bits, fmt, name):
    """An fp32 encoding ``bits`` rounded to ``fmt`` (combinational): the contract's conversion
    (``floating.convert``): RNE at ``fmt``'s significand with an unbounded exponent; a rounded
    magnitude below ``fmt``'s smallest normal a zero of the sign, above its largest finite an
    infinity; NaN the canonical NaN; a zero or subnormal fp32 a zero of its sign."""
    f = float_format(fmt)
    kind, sign, exp, sig = _decode(m, bits, F32, f"{name}_in")
    out = Signal(f.bits, name=name)
    drop = 24 - (f.man_bits + 1)                   # fp32 significand bits below fmt's
    keep = sig[drop:]
    if drop:
        guard, sticky = sig[drop - 1], sig[:drop - 1].any() if drop > 1 else 0
        rounded = Signal(f.man_bits + 2, name=f"{name}_rounded")
        m.d.comb += rounded.eq(keep + (guard & (sticky | keep[0])))
    else:
        rounded = Signal(f.man_bits + 2, name=f"{name}_rounded")
        m.d.comb += rounded.eq(keep)
    carry = rounded[f.man_bits + 1]
    e = Signal(EXP_SHAPE, name=f"{name}_exp")
    m.d.comb += e.eq(exp + carry)
    frac = Mux(carry, rounded[1:f.man_bits + 1], rounded[:f.man_bits])
    with m.If(kind == FloatKind.NAN):
        m.d.comb += out.eq(f.nan)
    with m.Elif(kind == FloatKind.INF):
        m.d.comb += out.eq(Cat(Const(0, f.man_bits), Const(-1, f.exp_bits), sign))
    with m.Elif((kind == FloatKind.ZERO) | (e < f.emin)):
        m.d.comb += out.eq(Cat(Const(0, f.bits - 1), sign))
    with m.Elif(e > f.emax):
        m.d.comb += out.eq(Cat(Const(0, f.man_bits), Const(-1, f.exp_bits), sign))
    with m.Else():
        m.d.comb += out.eq(Cat(frac, (e + f.bias)[:f.exp_bits], sign))
    return out


def fp32_relu(bits, fmt):
    """ReLU of an encoding of ``fmt`` (the contract's ``floating.relu``): a set sign bit (a
    negative number or ``-0``) gives ``+0``; a NaN gives the canonical NaN."""
    f = float_format(fmt)
    e = bits[f.man_bits:f.man_bits + f.exp_bits]
    nan = (e == (1 << f.exp_bits) - 1) & bits[:f.man_bits].any()
    return Mux(nan, f.nan, Mux(bits[f.bits - 1], 0, bits))


def widen(m, bits, fmt, name):
    """An encoding of ``fmt`` as the fp32 encoding of its value (combinational; the
    contract's reading of an operand: a zero or subnormal is a zero of its sign, a NaN the
    canonical fp32 NaN)."""
    f = float_format(fmt)
    kind, sign, exp, sig = _decode(m, bits, f, f"{name}_in")
    out = Signal(32, name=name)
    with m.Switch(kind):
        with m.Case(FloatKind.ZERO):
            m.d.comb += out.eq(Cat(Const(0, 31), sign))
        with m.Case(FloatKind.NAN):
            m.d.comb += out.eq(F32.nan)
        with m.Case(FloatKind.INF):
            m.d.comb += out.eq(Cat(Const(0, 23), Const(0xFF, 8), sign))
        with m.Default():
            m.d.comb += out.eq(Cat(Const(0, 23 - f.man_bits), sig[:f.man_bits],
                                   (exp + F32.bias)[:8], sign))
    return out


def order_key(m, bits, fmt, name):
    """The pooling unit's order of ``fmt`` encodings as an unsigned ``bits + 1``-bit key
    (combinational): a NaN above every number, then the numbers by value, ``-0`` below
    ``+0``, a subnormal a zero of its sign."""
    f = float_format(fmt)
    kind, sign, _, _ = _decode(m, bits, f, f"{name}_in")
    mag = Signal(f.bits - 1, name=f"{name}_mag")
    m.d.comb += mag.eq(Mux(kind == FloatKind.ZERO, 0, bits[:f.bits - 1]))
    key = Signal(f.bits + 1, name=name)
    m.d.comb += key.eq(Mux(kind == FloatKind.NAN, 1 << f.bits,
                           Mux(sign, (1 << (f.bits - 1)) - 1 - mag,
                               (1 << (f.bits - 1)) + mag)))
    return key


def is_positive(bits, fmt):
    """``x > 0`` of an encoding of ``fmt`` (a NaN, a zero and a subnormal are not)."""
    f = float_format(fmt)
    e = bits[f.man_bits:f.man_bits + f.exp_bits]
    nan = (e == (1 << f.exp_bits) - 1) & bits[:f.man_bits].any()
    return ~bits[f.bits - 1] & (e != 0) & ~nan
