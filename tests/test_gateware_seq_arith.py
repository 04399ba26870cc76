"""The controller's sequential multiplier / divider against Python integers (Amaranth
simulator; it also runs inside every Verilator test of the accelerator)."""

import random

import pytest
from amaranth.sim import Simulator

from bpsa.gateware.seq_arith import ArithOp, SeqMulDiv


def _run(width, cases):
    dut = SeqMulDiv(width)
    got = []

    async def tb(ctx):
        for op, a, b in cases:
            ctx.set(dut.op, op)
            ctx.set(dut.a, a)
            ctx.set(dut.b, b)
            ctx.set(dut.start, 1)
            await ctx.tick()
            ctx.set(dut.start, 0)
            cycles = 0
            while not ctx.get(dut.done):
                await ctx.tick()
                cycles += 1
                assert cycles <= width + 1, "no done"
            got.append((ctx.get(dut.result), ctx.get(dut.overflow), cycles))
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(tb)
    sim.run()
    return got


@pytest.mark.parametrize("width", [8, 48])
def test_random_and_edges(width):
    rng = random.Random(width)
    top = (1 << width) - 1
    edge = [0, 1, 2, 3, top, top - 1, 1 << (width - 1), (1 << (width // 2)) - 1]
    cases = [(op, a, b) for op in (ArithOp.MUL, ArithOp.DIV) for a in edge for b in edge]
    cases += [(rng.choice([ArithOp.MUL, ArithOp.DIV]), rng.getrandbits(rng.randint(1, width)),
               rng.getrandbits(rng.randint(1, width))) for _ in range(200)]
    for (op, a, b), (res, ovf, cycles) in zip(cases, _run(width, cases)):
        if op == ArithOp.MUL:
            assert res == (a * b) & top and ovf == (a * b > top), (a, b, res)
            assert cycles <= max(1, b.bit_length()), (a, b, cycles)
        elif b == 0:
            assert ovf and res == top
        else:
            assert res == a // b and not ovf, (a, b, res)


def test_width_is_checked():
    with pytest.raises(ValueError, match=r"width must be an integer in \[2, 64\], not 1"):
        SeqMulDiv(1)


@pytest.mark.cocotb
def test_setup_alu_verilator():
    """The generated Verilog under Verilator (bpsa.verify.tb_seq_arith)."""
    from bpsa.config import load_config
    from bpsa.sim.runner import run_cocotb
    tests, failures = run_cocotb(load_config("small"), "bpsa.verify.tb_seq_arith", top="setup_alu")
    assert tests == 1 and failures == 0
