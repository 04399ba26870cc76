"""The accelerator's event counters (the register file's COUNTERS, but for the DMA's own)."""

from amaranth.hdl import Module, Signal, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["COUNTED", "Counters", "run_stats_layout"]

#: The counters kept here, in :data:`bpsa.spec.regmap.COUNTERS` order.
COUNTED = ("cycles", "busy_cycles", "compute_cycles", "stall_cycles", "macs", "gated_macs",
           "buf_a_reads", "buf_a_writes", "buf_b_reads", "buf_b_writes", "buf_p_reads",
           "buf_p_writes", "overlap_cycles")


def run_stats_layout():
    """What an engine reports for a run: MACs ``fired`` and ``gated``, ``stall_cycles``,
    buffer A and B words read."""
    return data.StructLayout({name: unsigned(48) for name in (
        "fired", "gated", "stall_cycles", "a_words", "b_words")})


class Counters(wiring.Component):
    """64-bit event counters.

    Members
    -------
    clear : In(1)
        Zero every counter; the counters a run's statistics add to are instead left at their
        old value plus the statistics when the run ends in the same cycle (the host clears
        while the accelerator is idle).
    busy, compute, dma_busy : In(1)
        A descriptor runs; an engine computes; the DMA has a command in flight.
    a_write, b_write : In(1), p_read, p_write : In(2)
        A word of buffer A / B is written; the words of P read / written (one a half).
    run_done : In(1), run_stats : In(run_stats_layout())
        An engine run ended; its statistics are added.
    counts : Out(data.StructLayout({name: 64 for name in COUNTED}))
    """

    clear: In(1)
    busy: In(1)
    compute: In(1)
    dma_busy: In(1)
    a_write: In(1)
    b_write: In(1)
    p_read: In(2)
    p_write: In(2)
    run_done: In(1)
    run_stats: In(run_stats_layout())
    counts: Out(data.StructLayout({name: unsigned(64) for name in COUNTED}))

    def elaborate(self, platform):
        m = Module()
        cnt = {name: Signal(64, name=f"count_{name}") for name in COUNTED}
        for name, sig in cnt.items():
            m.d.comb += getattr(self.counts, name).eq(sig)

        def inc(name, by=1):
            m.d.sync += cnt[name].eq(cnt[name] + by)

        with m.If(self.clear):
            for sig in cnt.values():
                m.d.sync += sig.eq(0)
        with m.Else():
            inc("cycles")
            with m.If(self.busy):
                inc("busy_cycles")
            with m.If(self.p_write != 0):
                inc("buf_p_writes", self.p_write)
            with m.If(self.p_read != 0):
                inc("buf_p_reads", self.p_read)
            with m.If(self.a_write):
                inc("buf_a_writes")
            with m.If(self.b_write):
                inc("buf_b_writes")
            with m.If(self.compute):
                inc("compute_cycles")
                with m.If(self.dma_busy):
                    inc("overlap_cycles")
        s = self.run_stats
        with m.If(self.run_done):
            for name, value in (("macs", s.fired), ("gated_macs", s.gated),
                                ("stall_cycles", s.stall_cycles), ("buf_a_reads", s.a_words),
                                ("buf_b_reads", s.b_words)):
                inc(name, value)
        return m
