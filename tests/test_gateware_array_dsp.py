"""The ECP5 multiplier block as the PEs instantiate it (bpsa.gateware.array.dsp): the
MULT18X18D's input registers loaded by the slot's fire bit, its output register reset by a
flip-flop when the slot did not fire, signed or unsigned as asked; the product itself is checked through the PEs
built for the ECP5 under Verilator with the primitive's model
(tests/test_gateware_array_pe.py::test_pe_ecp5_dsp_verilator)."""

import pytest
from amaranth.hdl import Fragment, Instance, Module, Signal

from bpsa.gateware.array.dsp import is_ecp5, mult18x18d


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
