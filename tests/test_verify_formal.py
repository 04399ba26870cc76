"""The BMC runner: a true property passes, a false one fails with the solver's counterexample
in the log (yowasp-sby, z3)."""

import pytest
from amaranth.hdl import Assert, Assume, Module, unsigned
from amaranth.lib import wiring
from amaranth.lib.wiring import In

from bpsa.verify.formal import prove


class _Sum(wiring.Component):
    """a + b == b + a always; a + b < 8 only when both are small."""

    def __init__(self, claim_small):
        self.claim_small = claim_small
        super().__init__({"a": In(unsigned(3)), "b": In(unsigned(3))})

    def elaborate(self, platform):
        m = Module()
        m.d.comb += Assume(self.a < 6)
        m.d.comb += Assert(self.a + self.b == self.b + self.a)
        if self.claim_small:
            m.d.comb += Assert(self.a + self.b < 8, "small")
        return m


@pytest.mark.formal
def test_true_property_passes(tmp_path):
    passed, log = prove(_Sum(False), "sum_true", tmp_path)
    assert passed, log


@pytest.mark.formal
def test_false_property_fails(tmp_path):
    passed, log = prove(_Sum(True), "sum_false", tmp_path)
    assert not passed
    assert "FAIL" in log
