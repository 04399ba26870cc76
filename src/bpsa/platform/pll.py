"""Board clock generation: the design clock (``sync``) from the board oscillator through a PLL.

ECP5 (:class:`Ecp5Pll`)
    An ``EHXPLLL`` with feedback from its ``CLKOP`` output, so ``f_out = f_in * CLKFB_DIV /
    CLKI_DIV`` and ``f_VCO = f_out * CLKOP_DIV``. :func:`ecp5_pll_dividers` picks the dividers
    that make ``f_out`` exactly (the ECP5 family data sheet's limits: input 8-400 MHz, phase
    detector 3.125-400 MHz, VCO 400-800 MHz, output 3.125-400 MHz, each divider 1-128; the
    largest phase-detector frequency first, then the VCO nearest 600 MHz) and refuses, with a
    ValueError, a frequency it cannot make. 25 MHz -> 12.5 MHz: ``CLKI_DIV=2, CLKFB_DIV=1,
    CLKOP_DIV=48`` (VCO 600 MHz).

    The domain (``sync``, defined by the parent) is held in reset until the PLL reports lock (a
    :class:`~amaranth.lib.cdc.ResetSynchronizer` on ``~LOCK``, whose output a ``DCCA`` puts on
    a global network: it reaches every flip-flop). The parent puts the clock
    constraint on the domain's clock (``platform.add_clock_constraint(cd.clk, clock_hz)``:
    ``FREQUENCY NET "clk"`` in the .lpf; a constraint on the PLL's own output net would be
    lost, since Yosys merges it into the top-level clock net). nextpnr checks timing against
    it (and derives the same figure from the PLL's dividers and the oscillator's ``FREQUENCY
    PORT`` constraint, which the platform's clock resource still writes).
"""

from fractions import Fraction

from amaranth.hdl import (
    ClockDomain,
    ClockSignal,
    Const,
    Elaboratable,
    Instance,
    Module,
    ResetSignal,
    Signal,
)
from amaranth.lib import io
from amaranth.lib.cdc import ResetSynchronizer

__all__ = ["ECP5_PLL_LIMITS", "Ecp5Pll", "ecp5_pll_dividers"]

#: ECP5 EHXPLLL limits in Hz (FPGA-DS-02012, sysCLOCK PLL timing) and divider ranges.
ECP5_PLL_LIMITS = {
    "input": (8e6, 400e6),
    "pfd": (3.125e6, 400e6),
    "vco": (400e6, 800e6),
    "output": (3.125e6, 400e6),
    "div": (1, 128),
}


def ecp5_pll_dividers(input_hz, clock_hz):
    """The ``EHXPLLL`` dividers that make ``clock_hz`` exactly from ``input_hz``: a dict with
    ``CLKI_DIV``, ``CLKFB_DIV``, ``CLKOP_DIV``, ``CLKOP_CPHASE`` and ``vco_hz``. Raises
    ValueError naming ``clock_hz`` when no divider setting within the limits makes it."""
    lim = ECP5_PLL_LIMITS
    fin = Fraction(input_hz)
    fout = Fraction(clock_hz)
    dmin, dmax = lim["div"]
    if not lim["input"][0] <= fin <= lim["input"][1]:
        raise ValueError(f"PLL input {float(fin):g} Hz is outside the ECP5 range "
                         f"{lim['input'][0]:g}-{lim['input'][1]:g} Hz")
    if not lim["output"][0] <= fout <= lim["output"][1]:
        raise ValueError(f"clock_hz {clock_hz} is outside the ECP5 PLL output range "
                         f"{lim['output'][0]:g}-{lim['output'][1]:g} Hz")
    best = None
    for clki, pfd in _phase_detector(fin):
        clkfb = fout / pfd
        if clkfb.denominator != 1 or not dmin <= clkfb <= dmax:
            continue
        for clkop in range(dmin, dmax + 1):
            vco = fout * clkop
            if not lim["vco"][0] <= vco <= lim["vco"][1]:
                continue
            key = (clki, abs(vco - 600_000_000))
            if best is None or key < best[0]:
                best = (key, clki, int(clkfb), clkop, vco)
        if best is not None:
            break               # the largest phase-detector frequency that works
    if best is None:
        raise ValueError(
            f"clock_hz {clock_hz} cannot be made exactly by the ECP5 PLL from "
            f"{float(fin) / 1e6:g} MHz (f = f_in * CLKFB_DIV / CLKI_DIV with VCO = f * "
            f"CLKOP_DIV in 400-800 MHz, phase detector f_in / CLKI_DIV >= 3.125 MHz, dividers "
            f"1-128); the nearest it makes: {_nearest(fin, fout)}")
    _, clki, clkfb, clkop, vco = best
    return {"CLKI_DIV": clki, "CLKFB_DIV": clkfb, "CLKOP_DIV": clkop,
            "CLKOP_CPHASE": clkop - 1, "vco_hz": int(vco) if vco.denominator == 1 else float(vco)}


def _phase_detector(fin):
    """``(CLKI_DIV, f_in / CLKI_DIV)`` for every input divider whose phase-detector frequency
    is within the limits, the largest frequency first."""
    lim = ECP5_PLL_LIMITS
    for clki in range(lim["div"][0], lim["div"][1] + 1):
        pfd = fin / clki
        if pfd < lim["pfd"][0]:
            return
        if pfd <= lim["pfd"][1]:
            yield clki, pfd


def _nearest(fin, fout):
    """The whole-Hz frequencies the PLL makes from ``fin`` nearest below and above ``fout``,
    as text (for the error of :func:`ecp5_pll_dividers`)."""
    lim = ECP5_PLL_LIMITS
    dmin, dmax = lim["div"]
    made = set()
    for _, pfd in _phase_detector(fin):
        for clkfb in range(dmin, dmax + 1):
            f = pfd * clkfb
            if (f.denominator == 1 and lim["output"][0] <= f <= lim["output"][1]
                    and any(lim["vco"][0] <= f * op <= lim["vco"][1]
                            for op in range(dmin, dmax + 1))):
                made.add(int(f))
    below = max((f for f in made if f < fout), default=None)
    above = min((f for f in made if f > fout), default=None)
    return " or ".join(f"{f} Hz" for f in (below, above) if f is not None)


class Ecp5Pll(Elaboratable):
    """Drives the clock and reset of ``domain`` (which the parent defines) at ``clock_hz`` from
    the platform's default clock resource through an ``EHXPLLL`` (see the module docstring).
    ``platform.default_clk_frequency`` is the PLL input. The PLL's output signal is
    :attr:`clk`, its lock :attr:`lock`."""

    def __init__(self, clock_hz, domain="sync"):
        self.clock_hz = int(clock_hz)
        self.domain = domain
        # keep: the net keeps this name through Yosys's flattening and clean-up, so the
        # FREQUENCY NET constraint on it reaches nextpnr.
        self.clk = Signal(name="clkop", attrs={"keep": 1})
        self.lock = Signal()

    def elaborate(self, platform):
        fin = platform.default_clk_frequency
        div = ecp5_pll_dividers(fin, self.clock_hz)
        m = Module()
        m.submodules.clk_buf = clk_buf = io.Buffer("i", platform.request(platform.default_clk,
                                                                           dir="-"))
        m.submodules.pll = Instance(
            "EHXPLLL",
            a_FREQUENCY_PIN_CLKI=f"{fin / 1e6:g}",
            a_FREQUENCY_PIN_CLKOP=f"{self.clock_hz / 1e6:g}",
            a_ICP_CURRENT="12", a_LPF_RESISTOR="8", a_MFG_ENABLE_FILTEROPAMP="1",
            a_MFG_GMCREF_SEL="2",
            p_PLLRST_ENA="DISABLED", p_INTFB_WAKE="DISABLED", p_STDBY_ENABLE="DISABLED",
            p_DPHASE_SOURCE="DISABLED", p_OUTDIVIDER_MUXA="DIVA", p_OUTDIVIDER_MUXB="DIVB",
            p_OUTDIVIDER_MUXC="DIVC", p_OUTDIVIDER_MUXD="DIVD",
            p_CLKI_DIV=div["CLKI_DIV"], p_CLKFB_DIV=div["CLKFB_DIV"],
            p_CLKOP_ENABLE="ENABLED", p_CLKOP_DIV=div["CLKOP_DIV"],
            p_CLKOP_CPHASE=div["CLKOP_CPHASE"], p_CLKOP_FPHASE=0,
            p_FEEDBK_PATH="CLKOP",
            i_CLKI=clk_buf.i, i_CLKFB=self.clk, i_RST=Const(0), i_STDBY=Const(0),
            i_PHASESEL0=Const(0), i_PHASESEL1=Const(0), i_PHASEDIR=Const(1),
            i_PHASESTEP=Const(1), i_PHASELOADREG=Const(1), i_PLLWAKESYNC=Const(0),
            i_ENCLKOP=Const(0),
            o_CLKOP=self.clk, o_LOCK=self.lock,
        )
        platform.add_clock_constraint(self.clk, self.clock_hz)
        m.d.comb += ClockSignal(self.domain).eq(self.clk)
        # The synchronised reset goes to the LSR input of every flip-flop of the design. On the
        # fabric's general routing that net was the most congested of the accelerator's
        # (router2's congestion-by-net heatmap); a DCCA puts it on a global network instead
        # (nextpnr routes DCCA outputs on the globals, fabric users on globals 0-7).
        m.domains.pll_rst = cd_rst = ClockDomain(local=True)
        m.d.comb += cd_rst.clk.eq(self.clk)
        m.submodules.reset_sync = ResetSynchronizer(~self.lock, domain="pll_rst")
        rst = Signal()
        m.submodules.reset_buf = Instance("DCCA", i_CLKI=cd_rst.rst, i_CE=Const(1),
                                          o_CLKO=rst)
        m.d.comb += ResetSignal(self.domain).eq(rst)
        return m
