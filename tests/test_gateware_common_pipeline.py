"""Pipeline registers (bpsa.gateware.common.pipeline): a value delayed n cycles."""

import pytest
from amaranth.hdl import Module, Signal
from amaranth.sim import Simulator

from bpsa.gateware.common.pipeline import delayed


@pytest.mark.parametrize("n", [0, 1, 3])
def test_value_comes_out_n_cycles_later(n):
    m = Module()
    x, tick = Signal(8), Signal()
    m.d.sync += tick.eq(~tick)                 # a sync domain even when n is 0
    y = delayed(m, x, n, name="x")
    assert (y is x) == (n == 0)
    seen = []

    async def tb(ctx):
        for k in range(12):
            ctx.set(x, 10 + k)
            await ctx.tick()
            seen.append(ctx.get(y))

    sim = Simulator(m)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()
    # after tick k the output holds the input of cycle k + 1 - n (n registers; 0: the input)
    assert seen[n:] == [10 + k + 1 - n if n else 10 + k for k in range(n, 12)]
