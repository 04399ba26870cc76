"""The FP multiply-add's timing tool (bpsa.tools.fpu_timing): its wrapper generates Verilog
with registered inputs, and an unknown format is refused before any tool runs (the
measurement itself, a minute of nextpnr, runs by hand: docs/architecture/floating_point.md)."""

import pytest
from amaranth.back import verilog

from bpsa.tools import fpu_timing


def test_wrapper_registers_the_inputs():
    text = verilog.convert(fpu_timing._Registered("fp16"), name="fp_mac_fp16")
    for decl in ("reg [15:0] a_in", "reg [15:0] b_in", "reg [31:0] acc_in"):
        assert decl in text
    assert "module fp_mac_fp16" in text


def test_unknown_format_is_refused(tmp_path):
    with pytest.raises(ValueError, match="floating-point format must be one of"):
        fpu_timing.measure("fp8", tmp_path)
    assert not any(tmp_path.iterdir())
