"""The partials' reducer (bpsa.gateware.array.float_reduce) in the Amaranth simulator against the
golden model's reduction (bpsa.models.floating.reduce_partials): an output a cycle with random
gaps, random and corner-case fp32 partials."""

import numpy as np
import pytest
from amaranth.sim import Simulator

from bpsa.config import FLOAT_PARTIALS, FLOAT_REDUCE_LATENCY
from bpsa.gateware.array.float_reduce import PartialReducer
from bpsa.models import floating as fl
from bpsa.verify.float_operands import corner_accumulators


def _groups(rng, n, corner_share):
    """Outputs' five partials: encodings near 1 of both signs (their sums cancel and round),
    corner cases, uniform encodings."""
    corners = corner_accumulators()
    out = []
    for _ in range(n):
        g = []
        for _ in range(FLOAT_PARTIALS):
            u = rng.random()
            if u < corner_share:
                g.append(int(corners[rng.integers(len(corners))]))
            elif u < 0.6:
                g.append(int((rng.integers(0, 2) << 31) | ((127 + rng.integers(-3, 4)) << 23)
                             | rng.integers(0, 1 << 23)))
            else:
                g.append(int(rng.integers(0, 1 << 32)))
        out.append(g)
    return out


def run_reducer(groups, idle):
    """Present each group (``idle[i]`` idle cycles before group ``i``); collect the sums and
    the cycles they leave in, counted from their group's."""
    dut = PartialReducer()
    got, lat, busy = [], [], []

    async def bench(ctx):
        stream = []
        for g, n in zip(groups, idle):
            stream += [None] * n + [g]
        stream += [None] * (FLOAT_REDUCE_LATENCY + 2)
        sent = []
        for t, g in enumerate(stream):
            ctx.set(dut.valid, int(g is not None))
            for k in range(FLOAT_PARTIALS):
                ctx.set(dut.partials[k], g[k] if g else 0)
            if g is not None:
                sent.append(t)
            await ctx.tick()
            busy.append(ctx.get(dut.busy))
            if ctx.get(dut.result_valid):
                got.append(ctx.get(dut.result))
                lat.append(t + 1 - sent[len(got) - 1])

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return got, lat, busy


@pytest.mark.parametrize("seed,corner_share", [(1, 0.0), (2, 0.3), (3, 0.1)])
def test_sums_of_five_match_the_golden_model(seed, corner_share):
    rng = np.random.default_rng(seed)
    groups = _groups(rng, 300, corner_share)
    idle = [int(rng.integers(0, 3)) if rng.random() < 0.3 else 0 for _ in groups]
    got, lat, busy = run_reducer(groups, idle)
    want = [fl.reduce_partials(g) for g in groups]
    assert len(got) == len(want)
    bad = [(i, hex(g), hex(w)) for i, (g, w) in enumerate(zip(got, want)) if g != w]
    assert not bad, f"{len(bad)} of {len(want)} differ, e.g. {bad[:4]}"
    assert set(lat) == {FLOAT_REDUCE_LATENCY}
    # busy from the first group to the last sum, and not after
    first = idle[0]
    assert all(busy[first:first + FLOAT_REDUCE_LATENCY]) and busy[-1] == 0


def test_the_order_of_the_additions_is_the_contracts():
    # 2**24, 1, 1, -2**24, 0, 0: ((2**24 + 1) + (1 - 2**24)) + (0 + 0) = 1, left to right 0
    got, _, _ = run_reducer([[0x4B800000, 0x3F800000, 0x3F800000, 0xCB800000, 0, 0]], [0])
    assert got == [0x3F800000]
