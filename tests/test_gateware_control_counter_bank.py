"""The counter bank against counts kept in Python: random increments, clears and reads; every
read's value is a count the counter held between the request and the answer, and the answer
comes within ``max(N, 3) + 3`` cycles; once the events stop, reads are exact."""

import gc
import random
import warnings

import pytest
from amaranth.hdl import UnusedElaboratable
from amaranth.sim import Simulator

from bpsa.gateware.control.counter_bank import CounterBank

SPEC = [("cycles", 1), ("wide", 48), ("total", None), ("pair", 2), ("bytes", 5), ("last", 1)]


def _run(spec, seed, cycles=1500, p_clear=0.01, p_read=0.15):
    dut = CounterBank(spec)
    rng = random.Random(seed)
    swept = [name for name, width in spec if width is not None]
    n = len(swept)
    log = {"reads": 0, "max_wait": 0}

    async def bench(ctx):
        count = {name: 0 for name in swept}     # the count before this cycle's events
        history = []                            # count at the start of each cycle
        total = rng.getrandbits(64)
        totals = []
        pending = None                          # (index, request cycle)
        for cycle in range(cycles):
            quiet = cycle >= cycles - 3 * n - 20     # the last cycles: no events
            clear = not quiet and rng.random() < p_clear
            incs = {}
            for name, width in spec:
                if width is not None:
                    incs[name] = 0 if quiet else rng.choice(
                        [0, 1, (1 << width) - 1, rng.getrandbits(width)])
                    ctx.set(getattr(dut.inc, name), incs[name])
            if not quiet and rng.random() < 0.3:
                total = rng.getrandbits(64)
            if "totals" in dut.signature.members:
                ctx.set(dut.totals.total, total)
            ctx.set(dut.clear, clear)
            history.append(dict(count))
            totals.append(total)
            req = pending is None and rng.random() < p_read
            index = rng.randrange(len(spec)) if req else 0
            ctx.set(dut.read.req, req)
            ctx.set(dut.read.index, index)
            if req:
                pending = (index, cycle)
            await ctx.tick()
            if ctx.get(dut.read.valid):
                i, at = pending
                name, width = spec[i]
                got = ctx.get(dut.read.value)
                if width is None:
                    seen = totals[at:cycle + 1]
                else:
                    seen = [h[name] for h in history[at:cycle + 1]] + [count[name]]
                assert got in seen, (name, at, cycle, got, seen[:3], seen[-3:])
                log["reads"] += 1
                log["max_wait"] = max(log["max_wait"], cycle + 1 - at)
                pending = None
            # the counts after this cycle
            if clear:
                count = {name: 0 for name in swept}
            else:
                for name in swept:
                    count[name] = (count[name] + incs[name]) % (1 << 64)
        ctx.set(dut.read.req, 0)
        for _ in range(max(n, 3) + 4):              # the last random read's answer
            if pending is None or ctx.get(dut.read.valid):
                break
            await ctx.tick()
        # after the quiet cycles every counter reads exactly
        for i, (name, width) in enumerate(spec):
            if width is None:
                continue
            ctx.set(dut.read.req, 1)
            ctx.set(dut.read.index, i)
            await ctx.tick()
            ctx.set(dut.read.req, 0)
            for _ in range(max(n, 3) + 4):
                if ctx.get(dut.read.valid):
                    break
                await ctx.tick()
            assert ctx.get(dut.read.valid), name
            assert ctx.get(dut.read.value) == count[name], name

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    return log


@pytest.mark.parametrize("seed", [1, 2])
def test_reads_see_counts_between_request_and_answer(seed):
    log = _run(SPEC, seed)
    assert log["reads"] > 100
    # a swept counter is visited every N cycles: request, arm, two stages, answer
    assert 2 <= log["max_wait"] <= len([s for s in SPEC if s[1] is not None]) + 3


def test_one_counter_and_no_clears():
    log = _run([("only", 3)], seed=5, p_clear=0.0)
    assert log["reads"] > 100 and log["max_wait"] <= 3 + 3     # the sweep has three slots


@pytest.mark.parametrize("spec,match", [
    ([], "distinct"), ([("a", 1), ("a", 2)], "distinct"), ([("a", 0)], r"\[1, 63\]"),
    ([("a", 64)], r"\[1, 63\]"), ([("t", None)], "at least one swept"),
])
def test_bad_spec(spec, match):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnusedElaboratable)
        with pytest.raises(ValueError, match=match):
            CounterBank(spec)
        gc.collect()
