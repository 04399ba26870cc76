"""The stream register slice (bpsa.gateware.common.skid) in the Amaranth simulator: order, no loss,
full throughput, and a ``ready`` that does not follow the consumer's within a cycle."""

import random

import pytest
from amaranth.sim import Simulator

from bpsa.gateware.common.skid import SkidBuffer


def run(dut, bench):
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()


@pytest.mark.parametrize("p_valid,p_ready", [(1.0, 1.0), (0.5, 0.5), (0.9, 0.3), (0.3, 0.9)])
def test_items_leave_in_order_under_random_handshakes(p_valid, p_ready):
    rng = random.Random(int(p_valid * 10 + p_ready * 100))
    dut = SkidBuffer(16)
    items = [rng.randrange(1 << 16) for _ in range(400)]
    got, cycles = [], []

    async def bench(ctx):
        k = 0
        for t in range(3000):
            valid = k < len(items) and rng.random() < p_valid
            ready = rng.random() < p_ready
            ctx.set(dut.i.valid, valid)
            ctx.set(dut.i.payload, items[k] if k < len(items) else 0)
            ctx.set(dut.o.ready, ready)
            in_ready = ctx.get(dut.i.ready)
            # i.ready is the skid register's: the consumer's ready does not reach it
            ctx.set(dut.o.ready, not ready)
            assert ctx.get(dut.i.ready) == in_ready
            ctx.set(dut.o.ready, ready)
            if ctx.get(dut.o.valid) and ready:
                got.append(ctx.get(dut.o.payload))
                cycles.append(t)
            if valid and in_ready:
                k += 1
            await ctx.tick()
            if len(got) == len(items):
                break

    run(dut, bench)
    assert got == items
    if p_valid == 1.0 and p_ready == 1.0:
        assert cycles == list(range(1, len(items) + 1))     # one a cycle, one cycle late


def test_valid_is_low_only_when_empty():
    dut = SkidBuffer(8)

    async def bench(ctx):
        ctx.set(dut.o.ready, 0)
        for v in (5, 6):                  # fill main, then skid
            ctx.set(dut.i.valid, 1)
            ctx.set(dut.i.payload, v)
            assert ctx.get(dut.i.ready)
            await ctx.tick()
        ctx.set(dut.i.valid, 0)
        assert not ctx.get(dut.i.ready) and ctx.get(dut.o.valid)
        ctx.set(dut.o.ready, 1)
        seen = []
        for _ in range(4):
            if ctx.get(dut.o.valid):
                seen.append(ctx.get(dut.o.payload))
            await ctx.tick()
        assert seen == [5, 6] and not ctx.get(dut.o.valid)

    run(dut, bench)
