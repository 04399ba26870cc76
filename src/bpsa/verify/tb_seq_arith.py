"""cocotb testbench of the controller's sequential multiplier / divider (generated Verilog of
the top ``setup_alu`` under Verilator) against Python integers: edge operands and random ones,
both operations, the overflow flag and the cycle bound."""

import os
import random

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, ReadOnly, RisingEdge

from bpsa.gateware.seq_arith import SETUP_WIDTH

MUL, DIV = 0, 1


async def run(dut, op, a, b):
    dut.op.value, dut.a.value, dut.b.value, dut.start.value = op, a, b, 1
    await RisingEdge(dut.clk)
    dut.start.value = 0
    for cycles in range(SETUP_WIDTH + 2):
        await ReadOnly()
        if int(dut.done.value):
            result, ovf = int(dut.result.value), int(dut.overflow.value)
            await RisingEdge(dut.clk)
            return result, ovf, cycles
        await RisingEdge(dut.clk)
    raise AssertionError(f"no done for op {op} {a} {b}")


@cocotb.test()
async def random_and_edges(dut):
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    dut.rst.value = 1
    dut.start.value = 0
    await ClockCycles(dut.clk, 2)
    dut.rst.value = 0
    await RisingEdge(dut.clk)
    w = SETUP_WIDTH
    top = (1 << w) - 1
    rng = random.Random(int(os.environ.get("BPSA_SEED", "1")))
    edge = [0, 1, 2, 3, top, top - 1, 1 << (w - 1), (1 << (w // 2)) - 1]
    cases = [(op, a, b) for op in (MUL, DIV) for a in edge for b in edge]
    cases += [(rng.choice([MUL, DIV]), rng.getrandbits(rng.randint(1, w)),
               rng.getrandbits(rng.randint(1, w))) for _ in range(300)]
    for op, a, b in cases:
        res, ovf, cycles = await run(dut, op, a, b)
        if op == MUL:
            assert (res, ovf) == ((a * b) & top, int(a * b > top)), (a, b, res, ovf)
            assert cycles <= max(1, b.bit_length()), (a, b, cycles)
        elif b == 0:
            assert ovf == 1 and res == top, (a, res)
        else:
            assert (res, ovf) == (a // b, 0), (a, b, res)
