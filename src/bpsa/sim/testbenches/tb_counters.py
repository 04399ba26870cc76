"""cocotb testbench of the performance counters (generated Verilog of the ``counters`` top: the
:class:`~bpsa.gateware.control.counters.Counters` wrapper of a
:class:`~bpsa.gateware.control.counter_bank.CounterBank`, under Verilator) against 64-bit counts
kept in Python.

The model is written from the documented contracts, not from the implementation:

* Each counter of :data:`bpsa.spec.regmap.COUNTERS` adds its events of a cycle (the
  ``Counters`` docstring: ``cycles`` every cycle, ``overlap_cycles`` when ``compute`` and
  ``dma_busy``, the run statistics when ``run_done``, ...), modulo 2**64; ``clear`` zeroes them
  all and drops the events of its own cycle; ``prog_read_bytes`` is a total, read as given.
  The events and ``clear`` are registered on their way in: the counters see those of the cycle
  before, so everything below about a cycle's events means the events driven a cycle earlier.
* A read of a total is answered the cycle after the request: its value is the total of that
  cycle (the answer at most two cycles after the request).
* A read of a swept counter is answered with the word the sweeper writes at the counter's next
  visit that starts after the request, within ``max(N, 3) + 3`` cycles (``N`` swept counters).
  The sweeper visits one counter a cycle, in index order, every ``max(N, 3)`` cycles; a visit
  takes the count of the events before its cycle (the visit cycle's events go to the next one);
  a clear in the visit cycle drops the pending count taken too (the word is then 0).
  The sweep's phase is not visible at the ports: the testbench keeps every phase that explains
  all the answers so far, bit-exactly, and requires exactly one at the end. So every answer is
  checked against one exact value (the count at the start of the visit cycle), which is
  stronger than "a count the counter held between the request and the answer" and implies it.
* Once the events stop, every read equals the count (checked on its own, phase-free).
* One read at a time: requests while a read is outstanding are ignored (the testbench drives
  some, with other indices); ``valid`` is a one-cycle pulse per accepted request.

The stimulus: reads right after reset (the words start stale), about 6,000 cycles of random
events (quiet cycles, random values, bursts with every counter at its widest increment in the
same cycle), random clears and clears placed on the cycles around an outstanding read's visit
(the cycle before, the visit, and the two write-back cycles) with events in the clearing cycle,
reads of random counters during all of it; then a clear and a hold of about 2**16 cycles at
the widest increments, so that the 48-bit statistics wrap their 64-bit counters while reads are
outstanding; then the events stop and every counter is read; then a clear (the widest events
in its cycle) and every counter again.

``BPSA_SEED`` (default 1) seeds the stimulus.
"""

import os
import random

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, FallingEdge

from bpsa.config import Config
from bpsa.gateware.control.counters import RUN_STAT_BITS, run_stats_layout
from bpsa.sim.runner import load_config_json
from bpsa.spec.regmap import COUNTERS

SEED = int(os.environ.get("BPSA_SEED", "1"))
MASK64 = (1 << 64) - 1
NAMES = [name for name, _ in COUNTERS]
TOTALS = ("prog_read_bytes",)               # kept by the fetch unit, answered as given
SWEPT = [name for name in NAMES if name not in TOTALS]
SLOTS = max(len(SWEPT), 3)                  # the sweep's length
MAX_WAIT = SLOTS + 3                        # a swept read's answer, cycles after the request
STATS = ("fired", "gated", "stall_cycles", "a_words", "b_words")
ONE_BIT = ("busy", "compute", "dma_busy", "a_write", "b_write")


def increments(ev):
    """Each swept counter's increment for a cycle of events ``ev`` (the Counters contract)."""
    done = ev["run_done"]
    stat = {name: ev["run_stats"][name] if done else 0 for name in STATS}
    return {
        "cycles": 1,
        "busy_cycles": ev["busy"],
        "compute_cycles": ev["compute"],
        "stall_cycles": stat["stall_cycles"],
        "macs": stat["fired"],
        "gated_macs": stat["gated"],
        "dma_read_bytes": ev["dma_read"],
        "dma_write_bytes": ev["dma_write"],
        "dma_busy_cycles": ev["dma_busy"],
        "buf_a_reads": stat["a_words"],
        "buf_a_writes": ev["a_write"],
        "buf_b_reads": stat["b_words"],
        "buf_b_writes": ev["b_write"],
        "buf_p_reads": ev["p_read"],
        "buf_p_writes": ev["p_write"],
        "overlap_cycles": int(ev["compute"] and ev["dma_busy"]),
    }


class Bench:
    """Drives the ``counters`` top a cycle at a time (inputs and samples at the falling edge)
    and checks every answer against the counts kept here."""

    def __init__(self, dut, cfg, rng):
        self.dut, self.cfg, self.rng = dut, cfg, rng
        self.dma_bits = (cfg.dma_data_width // 8).bit_length()     # log2(bytes) + 1
        assert len(dut.dma_read) == self.dma_bits, (len(dut.dma_read), self.dma_bits)
        self.layout = run_stats_layout()
        self.t = 0                                  # the current cycle (0: first after reset)
        self.count = dict.fromkeys(SWEPT, 0)        # at the start of cycle t
        self.hist = {}                              # cycle -> counts at its start
        self.clears = {}                            # cycle -> clear driven
        self.totals = {}                            # cycle -> prog_read_bytes driven
        self.total = 0
        self.outstanding = None                     # (index, request cycle)
        # the events and clear of cycle t - 1 (none before the first cycle: not even "cycles")
        self.delayed = (None, False)
        self.phases = set(range(SLOTS))             # sweep phases that explain every answer
        self.answers = []                           # (index, request, answer, value)
        self.swept_answers = []                     # (index, request, answer, value)
        self.ignored = 0
        self.wrapped = False

    # --- the events ------------------------------------------------------------------------
    def idle(self):
        return {**dict.fromkeys(ONE_BIT, 0), "p_read": 0, "p_write": 0, "dma_read": 0,
                "dma_write": 0, "run_done": 0, "run_stats": dict.fromkeys(STATS, 0)}

    def widest(self):
        """Every counter at its widest increment in the same cycle."""
        dma = (1 << self.dma_bits) - 1
        return {**dict.fromkeys(ONE_BIT, 1), "p_read": 3, "p_write": 3, "dma_read": dma,
                "dma_write": dma, "run_done": 1,
                "run_stats": dict.fromkeys(STATS, (1 << RUN_STAT_BITS) - 1)}

    def random_events(self):
        rng = self.rng
        mode = rng.random()
        if mode < 0.15:
            return self.idle()
        if mode < 0.27:
            return self.widest()

        def pick(bits):
            return rng.choice([0, 1, (1 << bits) - 1, rng.getrandbits(bits)])
        return {**{name: rng.getrandbits(1) for name in ONE_BIT},
                "p_read": pick(2), "p_write": pick(2), "dma_read": pick(self.dma_bits),
                "dma_write": pick(self.dma_bits), "run_done": int(rng.random() < 0.4),
                "run_stats": {name: pick(RUN_STAT_BITS) for name in STATS}}

    def _drive(self, ev, clear, req, index):
        dut = self.dut
        for name in ONE_BIT:
            getattr(dut, name).value = ev[name]
        for name in ("p_read", "p_write", "dma_read", "dma_write", "run_done"):
            getattr(dut, name).value = ev[name]
        stats = 0
        for name, field in self.layout:
            stats |= ev["run_stats"][name] << field.offset
        dut.run_stats.value = stats
        dut.prog_read_bytes.value = self.total
        dut.clear.value = int(clear)
        dut.read__req.value = int(req)
        dut.read__index.value = index

    # --- the answers -------------------------------------------------------------------------
    def visit(self, phase, index, request):
        """The first cycle after ``request`` in which the sweeper with ``phase`` visits counter
        ``index`` (the swept counters in index order, one a cycle: the ``k``-th is visited in
        the cycles ``phase + k`` modulo SLOTS)."""
        k = SWEPT.index(NAMES[index])
        return request + 1 + (phase + k - request - 1) % SLOTS

    def word(self, index, v):
        """The word the sweeper writes at its visit of ``index`` in cycle ``v``: the count before
        ``v``'s events; 0 when ``v`` clears (the pending count taken is dropped too)."""
        return 0 if self.clears[v] else self.hist[v][NAMES[index]]

    def _sample(self):
        """The read port at cycle t (registered outputs, sampled at the falling edge)."""
        dut = self.dut
        valid = int(dut.read__valid.value)
        if not valid:
            if self.outstanding is not None:
                index, r = self.outstanding
                limit = 2 if NAMES[index] in TOTALS else MAX_WAIT
                assert self.t - r < limit, \
                    f"read of {NAMES[index]} at cycle {r}: no answer by cycle {self.t}"
            return
        value = int(dut.read__value.value)
        assert self.outstanding is not None, \
            f"cycle {self.t}: valid without an outstanding read (value {value:#x})"
        index, r = self.outstanding
        a, name = self.t, NAMES[index]
        self.outstanding = None
        self.answers.append((index, r, a, value))
        if name in TOTALS:
            assert a - r <= 2, f"{name} read at {r}: answered at {a}"
            assert value == self.totals[r + 1], \
                f"{name} read at {r}: {value:#x}, the total of cycle {r + 1} was " \
                f"{self.totals[r + 1]:#x}"
            return
        assert a - r <= MAX_WAIT, f"{name} read at {r}: answered at {a}"
        keep = {phase for phase in self.phases
                if self.visit(phase, index, r) < a
                and self.word(index, self.visit(phase, index, r)) == value}
        if not keep:
            window = [(t, self.hist[t][name], self.clears[t]) for t in range(r, a + 1)
                      if t in self.hist]
            expect = {p: (self.visit(p, index, r), self.word(index, self.visit(p, index, r)))
                      for p in sorted(self.phases) if self.visit(p, index, r) < a}
            raise AssertionError(
                f"{name} (index {index}) requested at cycle {r}, answered at {a}: {value:#x}; "
                f"phases left {sorted(self.phases)} expect (visit, word) {expect}; "
                f"(cycle, count at its start, clear) {window}")
        self.phases = keep
        self.swept_answers.append((index, r, a, value))

    # --- a cycle -----------------------------------------------------------------------------
    async def cycle(self, ev, clear=False, read=None, cycles=1):
        """Cycle t: check the read port, drive ``ev`` (``clear``; ``read``: an index to request,
        ignored by the counters while a read is outstanding), add the events to the counts.
        ``cycles`` > 1: hold the same events that many cycles (no read may be outstanding)."""
        self._sample()
        req = read is not None
        if req and self.outstanding is None:
            self.outstanding = (read, self.t)
        elif req:
            self.ignored += 1
        if cycles > 1:
            assert self.outstanding is None and not clear and not req
        if self.rng.random() < 0.5:
            self.total = self.rng.getrandbits(64)
        self._drive(ev, clear, req, read if req else self.rng.randrange(len(NAMES)))
        self.hist[self.t] = dict(self.count)
        self.totals[self.t] = self.total
        # the counters see the events and the clear of the cycle before (registered inputs)
        seen, seen_clear = self.delayed
        self.clears[self.t] = seen_clear
        self._add(seen, seen_clear, 1)
        self._add(ev, False, cycles - 1)
        self.delayed = (ev, bool(clear))
        self.t += cycles
        if cycles > 1:
            await ClockCycles(self.dut.clk, cycles)
        await FallingEdge(self.dut.clk)

    def _add(self, ev, clear, cycles):
        """``cycles`` cycles of the events ``ev`` as the counters see them (``clear``: zeroed,
        the events dropped)."""
        if clear:
            self.count = dict.fromkeys(SWEPT, 0)
            return
        if ev is None:
            return
        for name, inc in increments(ev).items():
            full = self.count[name] + cycles * inc
            self.wrapped |= full > MASK64
            self.count[name] = full & MASK64

    async def finish_read(self, ev_fn):
        """Run cycles (events from ``ev_fn``) until the outstanding read is answered."""
        for _ in range(MAX_WAIT + 2):
            if self.outstanding is None:
                return
            await self.cycle(ev_fn())
        assert self.outstanding is None

    async def read_all_exact(self, label):
        """With the events stopped: read every counter; each equals its count (``cycles`` still
        counts: checked through the sweep model only)."""
        count, self.count = self.count, dict(self.count)
        self._add(*self.delayed, 1)        # the last events driven, not yet counted
        stopped, self.count = self.count, count
        for index, name in enumerate(NAMES):
            await self.cycle(self.idle(), read=index)
            await self.finish_read(self.idle)
            got = self.answers[-1]
            assert got[0] == index, (label, got, index)
            if name in TOTALS or name == "cycles":
                continue
            assert got[3] == stopped[name], \
                f"{label}: {name} reads {got[3]:#x} after the events stopped, " \
                f"count {stopped[name]:#x}"


@cocotb.test()
async def counters_follow_events(dut):
    """Random events, bursts, clears, a 64-bit wrap and reads, bit-exact against the model."""
    cfg = Config.from_dict(load_config_json())
    rng = random.Random(SEED)
    bench = Bench(dut, cfg, rng)
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    dut.rst.value = 1
    bench._drive(bench.idle(), False, False, 0)
    for _ in range(3):
        await FallingEdge(dut.clk)
    dut.rst.value = 0

    # reads right after reset (every word starts stale), events running
    for index in (0, 0, 1, len(NAMES) - 1, 5):
        await bench.cycle(bench.random_events(), read=index)
        await bench.finish_read(bench.random_events)
    assert len(bench.phases) == 1, f"phases after the first reads: {sorted(bench.phases)}"

    # random events with reads and clears; clears placed around outstanding reads' visits
    clear_offsets = {o: 0 for o in (-1, 0, 1, 2)}
    visit_waits = set()
    for _ in range(6000):
        ev = bench.random_events()
        clear = rng.random() < 0.004
        read = None
        if bench.outstanding is None:
            if rng.random() < 0.35:
                read = rng.randrange(len(NAMES))
        else:
            index, r = bench.outstanding
            if rng.random() < 0.2:
                read = rng.randrange(len(NAMES))            # ignored: one read at a time
            if NAMES[index] not in TOTALS:
                (phase,) = bench.phases
                v = bench.visit(phase, index, r)
                # (a clear driven now reaches the counters in the next cycle)
                if bench.t + 1 - v in clear_offsets and rng.random() < 0.03:
                    clear = True
        await bench.cycle(ev, clear=clear, read=read)
    await bench.finish_read(bench.random_events)
    for index, r, a, value in bench.swept_answers:
        (phase,) = bench.phases
        v = bench.visit(phase, index, r)
        visit_waits.add(v - r)
        for o in clear_offsets:
            clear_offsets[o] += bench.clears.get(v + o, False)
    assert visit_waits == set(range(1, SLOTS + 1)), sorted(visit_waits)
    assert all(n >= 3 for n in clear_offsets.values()), clear_offsets
    assert sum(bench.clears.values()) >= 30
    assert bench.ignored >= 100
    read_indices = {index for index, *_ in bench.answers}
    assert read_indices == set(range(len(NAMES))), sorted(read_indices)

    # the widest increments for 2**16 cycles: the 48-bit statistics wrap their counters,
    # reads outstanding across the wrap
    hold = (1 << 16) - 40
    await bench.cycle(bench.widest(), clear=True)
    await bench.cycle(bench.widest(), cycles=hold)
    assert not bench.wrapped
    for _ in range(200):
        read = rng.randrange(len(NAMES)) if bench.outstanding is None else None
        await bench.cycle(bench.widest(), read=read)
    await bench.finish_read(bench.widest)
    assert bench.wrapped

    # the events stop: every counter reads exactly
    await bench.read_all_exact("after the events stopped")
    # a clear (with the widest events in its cycle, dropped), then every counter again
    await bench.cycle(bench.widest(), clear=True)
    await bench.read_all_exact("after a clear")

    assert len(bench.phases) == 1
    (phase,) = bench.phases
    lat = sorted({a - bench.visit(phase, i, r) for i, r, a, _ in bench.swept_answers})
    dut._log.info(f"{len(bench.answers)} reads checked ({len(bench.swept_answers)} swept), "
                  f"{bench.ignored} ignored requests, {sum(bench.clears.values())} clears, "
                  f"clears at visit offsets {clear_offsets}, sweep phase {phase}, "
                  f"answer cycles after the visit {lat}, {bench.t} cycles")
