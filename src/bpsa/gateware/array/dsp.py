"""The FPGA's multiplier blocks as the PEs use them: an ECP5 ``MULT18X18D`` with its input
and output registers (Yosys maps an inferred multiply to the block without its registers,
a 4 ns path, so the block is instantiated)."""

from amaranth.hdl import ClockSignal, Instance, Mux, ResetSignal, Signal, signed as signed_shape

__all__ = ["is_ecp5", "mult18x18d", "registered_multiply"]


def is_ecp5(platform):
    """Whether ``platform`` is an ECP5 (``platform.family``, as Amaranth's ``LatticePlatform``
    and the synthesis flow's target say): the multipliers are instantiated ``MULT18X18D``."""
    return getattr(platform, "family", None) == "ecp5"


def mult18x18d(m, a18, b18, *, load, signed):
    """An ECP5 ``MULT18X18D`` with its input and output registers, built into ``m``: the
    18-bit operands ``a18`` and ``b18`` taken into its input registers when ``load``, their
    36-bit product (two's complement with ``signed``, else unsigned) registered one cycle
    later, or zero when nothing was loaded (the output register's synchronous reset, driven
    straight from a flip-flop that is set by the system reset: no gate between the flip-flop
    and the block's reset pin). Returns the product (36 bits). Yosys maps an inferred
    multiply to the block without its registers, hence the instance."""
    p36 = Signal(36)
    drop = Signal(init=1)                 # nothing loaded in the cycle before: reset the output
    m.d.sync += drop.eq(~load)
    ports = {f"i_A{k}": a18[k] for k in range(18)}
    ports.update({f"i_B{k}": b18[k] for k in range(18)})
    ports.update({f"i_C{k}": 0 for k in range(18)})
    ports.update({f"o_P{k}": p36[k] for k in range(36)})
    m.submodules.dsp = Instance(
        "MULT18X18D",
        p_REG_INPUTA_CLK="CLK0", p_REG_INPUTA_CE="CE0", p_REG_INPUTA_RST="RST0",
        p_REG_INPUTB_CLK="CLK0", p_REG_INPUTB_CE="CE0", p_REG_INPUTB_RST="RST0",
        p_REG_INPUTC_CLK="NONE", p_REG_PIPELINE_CLK="NONE",
        p_REG_OUTPUT_CLK="CLK0", p_REG_OUTPUT_CE="CE1", p_REG_OUTPUT_RST="RST1",
        p_GSR="DISABLED", p_RESETMODE="SYNC", p_MULT_BYPASS="DISABLED",
        p_CAS_MATCH_REG="FALSE", p_SOURCEB_MODE="B_SHIFT",
        i_CLK0=ClockSignal(), i_CLK1=0, i_CLK2=0, i_CLK3=0,
        i_CE0=load, i_CE1=1, i_CE2=0, i_CE3=0,
        i_RST0=ResetSignal(), i_RST1=drop, i_RST2=0, i_RST3=0,
        i_SIGNEDA=int(signed), i_SIGNEDB=int(signed), i_SOURCEA=0, i_SOURCEB=0,
        **ports)
    return p36


def registered_multiply(m, a, b, *, load, keep, platform):
    """The exact product of ``a`` and ``b`` (values of one signedness) with the multiplier's
    two register levels, built into ``m``: the operands registered when ``load``, their
    product registered a cycle later, zero unless ``keep`` (high the cycle after ``load``).
    On an ECP5 with operands that fit 18 bits (17 unsigned when signed, 18 either way) the
    registers are a :func:`mult18x18d`'s own (there the product is zero whenever nothing was
    loaded the cycle before, which ``keep`` then says); elsewhere flip-flops around an
    inferred multiply. Returns the product register, as wide as the exact product."""
    sa, sb = a.shape(), b.shape()
    if sa.signed != sb.signed:
        raise ValueError(f"the operands must share a signedness, not {sa} and {sb}")
    width = sa.width + sb.width
    product = Signal(signed_shape(width) if sa.signed else width)
    if is_ecp5(platform) and max(sa.width, sb.width) <= 18:
        a18 = Signal(signed_shape(18) if sa.signed else 18)
        b18 = Signal(signed_shape(18) if sa.signed else 18)
        m.d.comb += [a18.eq(a), b18.eq(b)]
        p36 = mult18x18d(m, a18, b18, load=load, signed=sa.signed)
        m.d.comb += product.eq(p36[:width])
        return product
    in_a, in_b = Signal(sa), Signal(sb)
    with m.If(load):
        m.d.sync += [in_a.eq(a), in_b.eq(b)]
    m.d.sync += product.eq(Mux(keep, in_a * in_b, 0))
    return product
