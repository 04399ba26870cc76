"""The on-chip SRAM: parameter checks, a quick Amaranth-simulator check of the word port, and
the generated Verilog under Verilator with cocotbext-axi's AxiMaster (INCR / FIXED / narrow
bursts with wstrb, errors, the word port under AXI traffic;
``src/bpsa/sim/testbenches/tb_axi_sram.py``)."""

import gc
import warnings

import pytest
from amaranth.hdl import UnusedElaboratable
from amaranth.sim import Simulator

from bpsa.gateware.bus.axi_sram import AxiSram, mem_port_signature


def test_parameters():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnusedElaboratable)
        for bad in (0, 100, 32, 1 << 25, 4096.0, True):
            with pytest.raises(ValueError, match=r"size must be a power of two in \[64, "
                                                 r"16777216\] bytes, not"):
                AxiSram(bad)
        with pytest.raises(ValueError, match=r"addr_width must be an integer in \[1, 32\]"):
            mem_port_signature(0)
        assert AxiSram(4096).word_addr_width == 9
        gc.collect()


def test_word_port():
    """Word-port writes with strobes and reads (AXI idle) in the Amaranth simulator."""
    dut = AxiSram(256, init=[i * 0x0101010101010101 for i in range(32)])

    async def tb(ctx):
        async def access(word, wdata=None, wstrb=0xFF):
            ctx.set(dut.port.addr, word)
            ctx.set(dut.port.we, wdata is not None)
            ctx.set(dut.port.wdata, wdata or 0)
            ctx.set(dut.port.wstrb, wstrb)
            ctx.set(dut.port.valid, 1)
            assert ctx.get(dut.port.ready)
            await ctx.tick()
            ctx.set(dut.port.valid, 0)
            if wdata is None:
                assert ctx.get(dut.port.rvalid)
                return ctx.get(dut.port.rdata)

        assert await access(5) == 0x0505050505050505
        await access(5, 0x1122334455667788, 0b10000001)
        assert await access(5) == 0x1105050505050588
        assert await access(31) == 31 * 0x0101010101010101

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()


@pytest.mark.cocotb
def test_axi_sram_verilator():
    from bpsa.config import load_config
    from bpsa.platform.board_tops import register_tops
    from bpsa.sim.runner import run_cocotb
    register_tops()
    tests, failures = run_cocotb(load_config("small"), "bpsa.sim.testbenches.tb_axi_sram",
                                 top="axi_sram")
    assert tests == 4 and failures == 0
