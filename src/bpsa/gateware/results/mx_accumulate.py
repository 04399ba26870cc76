"""One MX block into an fp32 sum (``docs/architecture/mx.md``, the block dot product's steps 2
to 5): the block's exact sum, as the array drains it, scaled by the block's two E8M0 scales
and added into an fp32 accumulator with one rounding.

This is the part of the MX contract outside the per-MAC loop: one unit a result lane, beside
the P buffer, where the floating-point path adds a run's sums into P. Its adder is the
floating-point contract's (:class:`bpsa.gateware.fp.fpu.FloatAdder` with a wide addend), so
the rounding, the flush below 2^-126, the overflow to infinity and the specials are the same
bits as the bf16 path's.
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from bpsa.config import MX_WIDTHS, ConfigError
from bpsa.gateware.fp.fpu import EXP_SHAPE, FloatAdder, FloatKind, _leading_zeros, addend_layout
from bpsa.spec.numeric import MX_SCALE_BIAS, MX_SCALE_NAN, mx_format

__all__ = ["MxBlockAccumulator"]


class MxBlockAccumulator(wiring.Component):
    """``result = acc + sum * 2**(scale_a + scale_b - 254 + 2 quantum)``, rounded once, in
    :attr:`LATENCY` cycles (a pipeline: a new block every cycle).

    Members
    -------
    sum : In(MxArith.acc_shape)
        A block's exact sum as the PE holds it (``mxint8``: 21-bit two's complement;
        ``mxfp8_e4m3``: 42-bit two's complement with the NaN flag above).
    scale_a, scale_b : In(8)
        The block's two E8M0 scale codes (255: NaN).
    acc : In(32)
        The fp32 sum to add the block to, presented with ``sum``.
    result : Out(32)
        ``LATENCY`` cycles later.

    Stage 1 registers the sum's sign and magnitude, the block's exponent and its kind (NaN
    for a NaN scale or flag, zero for a zero sum: added, it leaves ``acc`` unchanged); stage 2
    normalizes the magnitude (leading-zero count and shift) into the adder's addend; the
    adder's five stages follow.
    """

    LATENCY = 2 + FloatAdder.LATENCY

    def __init__(self, config):
        """``config``: a :class:`~bpsa.config.Config` in an MX arithmetic (the ``mx_accumulate``
        top), or the MX format's name."""
        fmt = getattr(config, "arithmetic", config)
        if isinstance(fmt, str) and fmt not in MX_WIDTHS:
            self._MustUse__silence = True         # refused: never elaborated
            raise ConfigError(f"the MX block accumulator needs an MX arithmetic "
                              f"({', '.join(MX_WIDTHS)}), not {fmt!r}")
        self.fmt = mx_format(fmt)
        self.sum_width = MX_WIDTHS[self.fmt.name][1] - (0 if self.fmt.is_int else 1)
        acc = MX_WIDTHS[self.fmt.name][1]
        super().__init__({"sum": In(signed(acc) if self.fmt.is_int else acc),
                          "scale_a": In(8), "scale_b": In(8), "acc": In(32),
                          "result": Out(32)})

    def elaborate(self, platform):
        m = Module()
        w = self.sum_width
        m.submodules.adder = adder = FloatAdder(addend_width=w)
        mag, neg, base, kind, acc1 = self._stage1(m, w)
        addend = Signal(addend_layout(w))
        lz = _leading_zeros(m, mag, "lz")
        acc2 = Signal(32)
        m.d.sync += [addend.kind.eq(kind), addend.sign.eq(neg),
                     addend.exp.eq(base - lz), addend.sig.eq((mag << lz)[:w]), acc2.eq(acc1)]
        m.d.comb += [adder.product.eq(addend), adder.acc.eq(acc2), self.result.eq(adder.result)]
        return m

    def _stage1(self, m, w):
        """The sum's magnitude and sign, the exponent of its top bit before normalization,
        the block's kind, and ``acc``: registered."""
        s = self.sum[:w].as_signed()
        flag = Const(0, 1) if self.fmt.is_int else self.sum[w]
        nan = (self.scale_a == MX_SCALE_NAN) | (self.scale_b == MX_SCALE_NAN) | flag
        mag, neg = Signal(w), Signal()
        base = Signal(EXP_SHAPE)
        kind = Signal(FloatKind)
        acc = Signal(32)
        # the value is mag * 2**(scale_a + scale_b - 254 + 2q): with its top bit at w - 1
        # after the shift, the addend's exponent is that plus w - 1 (less the shift)
        offset = 2 * self.fmt.quantum_exp - 2 * MX_SCALE_BIAS + (w - 1)
        m.d.sync += [
            mag.eq(Mux(s < 0, -s, s)[:w]), neg.eq(s < 0),
            base.eq(self.scale_a + self.scale_b + offset),
            kind.eq(Mux(nan, FloatKind.NAN, Mux(s == 0, FloatKind.ZERO, FloatKind.NORMAL))),
            acc.eq(self.acc),
        ]
        return mag, neg, base, kind, acc
