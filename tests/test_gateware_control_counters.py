"""The event counters against a count kept in Python, on random events."""

import random

from amaranth.sim import Simulator

from bpsa.gateware.control.counters import COUNTED, Counters

EVENTS = ("busy", "compute", "dma_busy", "a_write", "b_write", "p_read", "p_write")
STATS = {"fired": "macs", "gated": "gated_macs", "stall_cycles": "stall_cycles",
         "a_words": "buf_a_reads", "b_words": "buf_b_reads"}


def test_counts_follow_events():
    dut = Counters()
    rng = random.Random(9)
    want = dict.fromkeys(COUNTED, 0)

    async def bench(ctx):
        for cycle in range(400):
            clear = rng.random() < 0.02
            ev = {name: rng.random() < 0.5 for name in EVENTS}
            done = rng.random() < 0.1
            stats = {name: rng.randrange(1 << 20) for name in STATS}
            ctx.set(dut.clear, clear)
            for name, v in ev.items():
                ctx.set(getattr(dut, name), v)
            ctx.set(dut.run_done, done)
            for name, v in stats.items():
                ctx.set(getattr(dut.run_stats, name), v)
            await ctx.tick()
            old = dict(want)
            if clear:
                want.update(dict.fromkeys(COUNTED, 0))
            else:
                want["cycles"] += 1
                for name, counter in (("busy", "busy_cycles"), ("compute", "compute_cycles"),
                                      ("a_write", "buf_a_writes"), ("b_write", "buf_b_writes"),
                                      ("p_read", "buf_p_reads"), ("p_write", "buf_p_writes")):
                    want[counter] += ev[name]
                want["overlap_cycles"] += ev["compute"] and ev["dma_busy"]
            if done:    # a run ending in a clearing cycle adds to the uncleared value
                for name, counter in STATS.items():
                    want[counter] = old[counter] + stats[name]
            got = {name: ctx.get(getattr(dut.counts, name)) for name in COUNTED}
            assert got == want, cycle

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert want["macs"] > 0 and want["overlap_cycles"] > 0
