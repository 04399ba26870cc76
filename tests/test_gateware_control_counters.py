"""The accelerator's counters against counts kept in Python, on random events: after the events
stop, every counter read through the read port equals its count (the read's timing is the
counter bank's test, tests/test_gateware_control_counter_bank.py). The generated Verilog under
Verilator: every read exact, its timing included (``bpsa.sim.testbenches.tb_counters``)."""

import random

import pytest
from amaranth.sim import Simulator

from bpsa.config import Config
from bpsa.gateware.control.counters import Counters
from bpsa.spec.regmap import COUNTERS

EVENTS = ("busy", "compute", "dma_busy", "a_write", "b_write")
STATS = {"fired": "macs", "gated": "gated_macs", "stall_cycles": "stall_cycles",
         "a_words": "buf_a_reads", "b_words": "buf_b_reads"}


@pytest.mark.parametrize("seed,p_clear", [(9, 0.02), (3, 0.0)])
def test_counts_follow_events(seed, p_clear):
    dut = Counters(Config(name="c", dma_data_width=128))
    rng = random.Random(seed)
    names = [name for name, _ in COUNTERS]
    want = dict.fromkeys(names, 0)
    got = {}

    async def bench(ctx):
        for cycle in range(400):
            clear = cycle < 300 and rng.random() < p_clear     # none in the last 100
            ev = {name: rng.random() < 0.5 for name in EVENTS}
            p_read, p_write = rng.randrange(3), rng.randrange(3)
            dma_read, dma_write = rng.randrange(32), rng.randrange(32)
            done = rng.random() < 0.1
            stats = {name: rng.choice([rng.randrange(1 << 20), (1 << 48) - 1])
                     for name in STATS}
            prog = rng.getrandbits(35)
            ctx.set(dut.clear, clear)
            for name, v in ev.items():
                ctx.set(getattr(dut, name), v)
            ctx.set(dut.p_read, p_read)
            ctx.set(dut.p_write, p_write)
            ctx.set(dut.dma_read, dma_read)
            ctx.set(dut.dma_write, dma_write)
            ctx.set(dut.run_done, done)
            for name, v in stats.items():
                ctx.set(getattr(dut.run_stats, name), v)
            ctx.set(dut.prog_read_bytes, prog)
            await ctx.tick()
            want["prog_read_bytes"] = prog          # a total, not counted here
            if clear:                               # the clearing cycle's events are dropped
                want.update({n: 0 for n in names if n != "prog_read_bytes"})
                continue
            want["cycles"] += 1
            for name, counter in (("busy", "busy_cycles"), ("compute", "compute_cycles"),
                                  ("dma_busy", "dma_busy_cycles"), ("a_write", "buf_a_writes"),
                                  ("b_write", "buf_b_writes")):
                want[counter] += ev[name]
            want["overlap_cycles"] += ev["compute"] and ev["dma_busy"]
            want["buf_p_reads"] += p_read
            want["buf_p_writes"] += p_write
            want["dma_read_bytes"] += dma_read
            want["dma_write_bytes"] += dma_write
            if done:
                for name, counter in STATS.items():
                    want[counter] += stats[name]
        # the events stop (cycles and busy still count: hold busy low and count cycles)
        for name in EVENTS:
            ctx.set(getattr(dut, name), 0)
        for sig in (dut.p_read, dut.p_write, dut.dma_read, dut.dma_write, dut.run_done,
                    dut.clear):
            ctx.set(sig, 0)
        start = cycle_count = 0
        for i, name in enumerate(names):
            ctx.set(dut.read.req, 1)
            ctx.set(dut.read.index, i)
            await ctx.tick()
            cycle_count += 1
            ctx.set(dut.read.req, 0)
            while not ctx.get(dut.read.valid):
                await ctx.tick()
                cycle_count += 1
            got[name] = ctx.get(dut.read.value)
            if name == "cycles":
                start = cycle_count
        # "cycles" kept counting while it was read: its value lies in the read's window
        assert want["cycles"] <= got["cycles"] <= want["cycles"] + start
        got["cycles"] = want["cycles"]

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert got == want
    assert want["macs"] > 0 and want["overlap_cycles"] > 0


# --- generated Verilog under Verilator -----------------------------------------------------

# in make test: the build is small (about 20 s cold, a few seconds of simulation)
@pytest.mark.cocotb
def test_counters_verilog_under_verilator():
    """The generated Verilog of the ``counters`` top (Counters around its CounterBank) against
    64-bit counts kept in Python (cocotb module ``bpsa.sim.testbenches.tb_counters``): random
    events, bursts at the widest increments, clears with events in their cycle (some on the
    cycles around a read's visit), a 64-bit wrap; every read answers, within ``max(N, 3) + 3``
    cycles, exactly the count at the counter's next visit after the request (one sweep phase
    explains every answer), reads after the events stop equal the counts, and requests while a
    read is outstanding are ignored. A 256-bit DMA bus: the widest byte increments."""
    from bpsa.sim.runner import run_cocotb
    cfg = Config(name="counters", dma_data_width=256)
    tests, failures = run_cocotb(cfg, "bpsa.sim.testbenches.tb_counters", top="counters")
    assert tests >= 1 and failures == 0
