"""The multipliers as the PEs build them (bpsa.gateware.array.dsp): the ECP5
MULT18X18D's input registers loaded by the slot's fire bit, its output register reset by a
flip-flop when the slot did not fire, signed or unsigned as asked; the product itself is checked through the PEs
built for the ECP5 under Verilator with the primitive's model
(tests/test_gateware_array_pe.py::test_pe_ecp5_dsp_verilator)."""

import pytest
from amaranth.hdl import Fragment, Instance, Module, Signal

from bpsa.gateware.array.dsp import is_ecp5, mult18x18d, registered_multiply


class _Family:
    def __init__(self, family):
        self.family = family


def _instance(signed):
    m = Module()
    a, b, load = Signal(18), Signal(18), Signal()
    p = mult18x18d(m, a, b, load=load, signed=signed)
    frag = Fragment.get(m, None)
    insts = [sub for sub, *_ in frag.subfragments if isinstance(sub, Instance)]
    return p, insts


@pytest.mark.parametrize("signed", [True, False])
def test_mult18x18d_registers_and_sign(signed):
    p, insts = _instance(signed)
    assert len(p) == 36 and len(insts) == 1
    inst = insts[0]
    assert inst.type == "MULT18X18D"
    params = inst.parameters
    assert params["REG_INPUTA_CE"] == "CE0" and params["REG_INPUTB_CE"] == "CE0"
    assert params["REG_OUTPUT_CLK"] == "CLK0" and params["REG_OUTPUT_RST"] == "RST1"
    assert params["REG_PIPELINE_CLK"] == "NONE" and params["RESETMODE"] == "SYNC"
    ports = inst.ports
    assert int(ports["SIGNEDA"][0].value) == int(signed) == int(ports["SIGNEDB"][0].value)
    assert all(f"A{k}" in ports and f"B{k}" in ports for k in range(18))
    assert all(f"P{k}" in ports for k in range(36))
    # the output register's reset straight from a flip-flop (no gate before the pin)
    assert isinstance(ports["RST1"][0], Signal) and ports["RST1"][0].init == 1


def test_is_ecp5():
    assert is_ecp5(_Family("ecp5")) and not is_ecp5(_Family("ice40")) and not is_ecp5(None)


@pytest.mark.parametrize("signed", [True, False])
def test_registered_multiply_portable(signed):
    """Away from the ECP5 the product registered the cycle after its operands load, zero when the
    slot did not keep it, exact at the operands' extremes."""
    import random

    from amaranth.hdl import signed as s_shape
    from amaranth.sim import Simulator

    shape = s_shape(12) if signed else 12
    lo, hi = (-2 ** 11, 2 ** 11 - 1) if signed else (0, 2 ** 12 - 1)
    m = Module()
    a, b, load, keep = Signal(shape), Signal(shape), Signal(), Signal()
    m.d.sync += keep.eq(load)
    p = registered_multiply(m, a, b, load=load, keep=keep, platform=None)
    assert len(p) == 24 and p.shape().signed == signed
    rng = random.Random(5)
    slots = [(lo, lo, 1), (hi, hi, 1), (lo, hi, 1), (0, hi, 1), (hi, lo, 0)]
    slots += [(rng.randint(lo, hi), rng.randint(lo, hi), rng.random() < 0.7) for _ in range(200)]
    got = []

    async def bench(ctx):
        for x, y, fire in slots + [(0, 0, 0)] * 2:
            ctx.set(a, x)
            ctx.set(b, y)
            ctx.set(load, fire)
            await ctx.tick()
            got.append(ctx.get(p))

    sim = Simulator(m)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    want = [x * y if fire else 0 for x, y, fire in slots]
    assert got[1:1 + len(slots)] == want     # read after the edge that registers the product


def test_registered_multiply_picks_the_block_and_checks_signedness():
    from amaranth.hdl import signed as s_shape
    m = Module()
    a, b = Signal(s_shape(18)), Signal(s_shape(18))
    p = registered_multiply(m, a, b, load=Signal(), keep=Signal(), platform=_Family("ecp5"))
    frag = Fragment.get(m, None)
    assert len(p) == 36 and [sub.type for sub, *_ in frag.subfragments
                              if isinstance(sub, Instance)] == ["MULT18X18D"]
    wide = Module()
    registered_multiply(wide, Signal(s_shape(20)), Signal(s_shape(20)), load=Signal(),
                        keep=Signal(), platform=_Family("ecp5"))
    assert not any(isinstance(sub, Instance)
                   for sub, *_ in Fragment.get(wide, None).subfragments)
    mixed = Module()
    with pytest.raises(ValueError, match="signedness"):
        registered_multiply(mixed, Signal(s_shape(8)), Signal(8), load=Signal(),
                            keep=Signal(), platform=None)
    Fragment.get(mixed, None)
