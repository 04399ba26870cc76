"""The accelerator's performance counters (the register map's COUNTERS): the events of a cycle
become increments of a :class:`~bpsa.gateware.control.counter_bank.CounterBank`, which keeps
the 64-bit counts in a RAM and answers the register file's reads."""

from amaranth.hdl import Module, Signal, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In
from amaranth.utils import exact_log2

from bpsa.config import require_config
from bpsa.gateware.bus.axi_lite import counter_port_signature
from bpsa.gateware.control.counter_bank import CounterBank
from bpsa.spec.regmap import COUNTERS

__all__ = ["RUN_STAT_BITS", "Counters", "run_stats_layout"]

#: Bits of a run's statistics (:func:`run_stats_layout`).
RUN_STAT_BITS = 48


def run_stats_layout():
    """What an engine reports for a run: MACs ``fired`` and ``gated``, ``stall_cycles``,
    buffer A and B words read."""
    return data.StructLayout({name: unsigned(RUN_STAT_BITS) for name in (
        "fired", "gated", "stall_cycles", "a_words", "b_words")})


class Counters(wiring.Component):
    """The 64-bit event counters of :data:`bpsa.spec.regmap.COUNTERS`.

    Parameters
    ----------
    config : Config
        The DMA's bus width sets the bits of its bytes a cycle (``read_inc`` / ``write_inc`` of
        :class:`~bpsa.gateware.bus.dma.DmaEngine`: a beat's bytes).

    Members
    -------
    clear : In(1)
        Zero every counter; the events of the clearing cycle are dropped (the host clears
        while the accelerator is idle). Events and ``clear`` are registered on their way in, so
        a count lands (and a clear takes effect) a cycle later.
    busy, compute, dma_busy : In(1)
        A layer runs; an engine computes; the DMA has a command in flight.
    a_write, b_write : In(1), p_read, p_write : In(2)
        A word of buffer A / B is written; the words of P read / written (one a half).
    dma_read, dma_write : In(log2(dma_data_width / 8) + 1)
        Payload bytes the DMA moved this cycle.
    run_done : In(1), run_stats : In(run_stats_layout())
        An engine run ended; its statistics are added.
    prog_read_bytes : In(64)
        Bytes of the program fetched since START (a total kept by the fetch unit).
    read : In(counter_port_signature())
        The register file's reads, in COUNTERS order.
    """

    def __init__(self, config):
        self.config = require_config(config)
        self.dma_inc_width = exact_log2(config.dma_data_width // 8) + 1
        dma_inc_width = self.dma_inc_width
        super().__init__({
            "clear": In(1), "busy": In(1), "compute": In(1), "dma_busy": In(1),
            "a_write": In(1), "b_write": In(1), "p_read": In(2), "p_write": In(2),
            "dma_read": In(dma_inc_width), "dma_write": In(dma_inc_width),
            "run_done": In(1), "run_stats": In(run_stats_layout()),
            "prog_read_bytes": In(64),
            "read": In(counter_port_signature()),
        })

    def increments(self):
        """Counter name -> (increment width, its value this cycle); ``None`` for a total."""
        s, done = self.run_stats, self.run_done
        stat = RUN_STAT_BITS
        return {
            "cycles": (1, 1),
            "busy_cycles": (1, self.busy),
            "compute_cycles": (1, self.compute),
            "stall_cycles": (stat, done.replicate(stat) & s.stall_cycles),
            "macs": (stat, done.replicate(stat) & s.fired),
            "gated_macs": (stat, done.replicate(stat) & s.gated),
            "dma_read_bytes": (self.dma_inc_width, self.dma_read),
            "dma_write_bytes": (self.dma_inc_width, self.dma_write),
            "dma_busy_cycles": (1, self.dma_busy),
            "buf_a_reads": (stat, done.replicate(stat) & s.a_words),
            "buf_a_writes": (1, self.a_write),
            "buf_b_reads": (stat, done.replicate(stat) & s.b_words),
            "buf_b_writes": (1, self.b_write),
            "buf_p_reads": (2, self.p_read),
            "buf_p_writes": (2, self.p_write),
            "overlap_cycles": (1, self.compute & self.dma_busy),
            "prog_read_bytes": None,
        }

    def elaborate(self, platform):
        m = Module()
        incs = self.increments()
        assert list(incs) == [name for name, _ in COUNTERS]
        spec = [(name, None if inc is None else inc[0]) for name, inc in incs.items()]
        m.submodules.bank = bank = CounterBank(spec)
        # the events and ``clear`` are registered on their way in (they come from every block
        # of the accelerator): a count lands a cycle after its event
        for name, inc in incs.items():
            if inc is not None:
                staged = Signal(inc[0], name=f"{name}_inc")
                m.d.sync += staged.eq(inc[1])
                m.d.comb += getattr(bank.inc, name).eq(staged)
        clear = Signal()
        m.d.sync += clear.eq(self.clear)
        m.d.comb += [bank.clear.eq(clear),
                     bank.totals.prog_read_bytes.eq(self.prog_read_bytes)]
        wiring.connect(m, wiring.flipped(self.read), bank.read)
        return m
