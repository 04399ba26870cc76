"""One MX block into an fp32 sum (bpsa.gateware.results.mx_accumulate) against the golden
model's accumulate_block (bpsa.models.mx), on random and corner-case sums, scales and
accumulators, in the Amaranth simulator and as Verilog under Verilator."""

import numpy as np
import pytest
from amaranth.sim import Simulator

from bpsa.config import MX_WIDTHS, Config
from bpsa.gateware.results.mx_accumulate import MxBlockAccumulator
from bpsa.sim.testbenches.tb_mx_accumulate import LATENCY, cases, golden
from bpsa.spec.numeric import MX_FORMATS

FORMATS = ["mxint8", "mxfp8_e4m3"]


@pytest.mark.parametrize("fmt", FORMATS)
def test_blocks_match_the_golden_model(fmt):
    dut = MxBlockAccumulator(fmt)
    stim = cases(fmt, 3000, seed=len(fmt))
    want = [golden(fmt, *c) for c in stim]
    lat = MxBlockAccumulator.LATENCY
    assert lat == LATENCY
    signed_sum = MX_FORMATS[fmt].is_int
    bits = MX_WIDTHS[fmt][1]

    async def tb(ctx):
        for k, (word, sa, sb, acc) in enumerate(stim + [(0, 0, 0, 0)] * lat):
            value = word - (1 << bits) if signed_sum and word >> (bits - 1) else word
            ctx.set(dut.sum, value)
            ctx.set(dut.scale_a, sa)
            ctx.set(dut.scale_b, sb)
            ctx.set(dut.acc, acc)
            await ctx.tick()
            if k >= lat - 1 and k - (lat - 1) < len(stim):
                i = k - (lat - 1)
                got = ctx.get(dut.result)
                assert got == want[i], (f"block {i}: sum {stim[i][0]:#x} scales {stim[i][1:3]} "
                                        f"acc {stim[i][3]:#010x}: {got:#010x}, want {want[i]:#010x}")

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()


# in make test: a small build (about 20 s cold)
@pytest.mark.cocotb
def test_verilog_under_verilator():
    """The generated Verilog (top ``mx_accumulate``, ``mxfp8_e4m3``: the widest sum) against
    the golden model, a block every cycle (cocotb ``bpsa.sim.testbenches.tb_mx_accumulate``)."""
    from bpsa.sim.runner import run_cocotb
    cfg = Config(name="mx_accumulate", arithmetic="mxfp8_e4m3", operand_width=8,
                 operand_signed=False, acc_width=43, dataflows=["os"])
    tests, failures = run_cocotb(cfg, "bpsa.sim.testbenches.tb_mx_accumulate",
                                 top="mx_accumulate")
    assert tests >= 1 and failures == 0


def test_refuses_a_configuration_without_mx():
    from bpsa.config import ConfigError
    with pytest.raises(ConfigError, match="needs an MX arithmetic"):
        MxBlockAccumulator(Config(name="int"))
