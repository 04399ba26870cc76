"""The partial-sum buffer P: result vectors added into it, a clear pass, and the DMA's reads."""

from amaranth.hdl import Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from bpsa.config import Config

__all__ = ["PsumBuffer", "accumulate_layout"]


def accumulate_layout(config):
    """One result vector for P: ``addr`` (a P word) and ``data`` (``cols`` accumulators)."""
    return data.StructLayout({
        "addr": unsigned(exact_log2(config.buf_p_depth)),
        "data": data.ArrayLayout(signed(config.acc_width), config.cols),
    })


class PsumBuffer(wiring.Component):
    """``buf_p_depth`` words of ``cols`` accumulators (``acc_width`` bits, wrapping).

    A vector taken from ``acc`` (or, in a cycle without one, from ``fill``) is added into its
    word in three stages (address, read, add and write); a later vector for the same word
    sees the earlier one's sum (the read port is transparent to the write port).

    Members
    -------
    acc : In(stream.Signature(accumulate_layout(config)))
        Result vectors; always taken (``ready`` is 1).
    fill : In(stream.Signature(accumulate_layout(config)))
        More vectors, taken in the cycles ``acc`` has none.
    clear : In(1), clear_words : In(48), clear_base : In(log2(buf_p_depth)),
    clear_last : Out(1)
        While ``clear`` is high, one word a cycle from word ``clear_base`` is zeroed;
        ``clear_last`` is high in the cycle that zeroes word ``clear_base + clear_words - 1``
        (the count then restarts).
    read_addr, read_en : In, read_data : Out
        A read port for the DMA's stores, used in cycles without an accumulation (``read_ready``;
        a read in another cycle is not served); data in the next cycle, held until the next
        read even while accumulations use the memory.
    busy : Out(1)
        An accumulation is in flight or waiting in ``fill``.
    read_event, write_event : Out(1)
        A word is read / written this cycle (for the counters).
    """

    def __init__(self, config):
        if not isinstance(config, Config):
            raise TypeError(f"config must be a Config, not {config!r}")
        self.config = config
        layout = accumulate_layout(config)
        aw = exact_log2(config.buf_p_depth)
        super().__init__({
            "acc": In(stream.Signature(layout)),
            "fill": In(stream.Signature(layout)),
            "clear": In(1), "clear_words": In(48), "clear_base": In(aw), "clear_last": Out(1),
            "read_addr": In(aw), "read_en": In(1), "read_ready": Out(1),
            "read_data": Out(data.ArrayLayout(signed(config.acc_width), config.cols)),
            "busy": Out(1), "read_event": Out(1), "write_event": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        aw = exact_log2(cfg.buf_p_depth)
        mem = m.submodules.mem = Memory(shape=data.ArrayLayout(signed(cfg.acc_width), cfg.cols),
                                        depth=cfg.buf_p_depth, init=[])
        wp = mem.write_port()
        rp = mem.read_port(transparent_for=(wp,))

        # stage 1 (address), stage 2 (read), stage 3 (add, write)
        v1, v2 = Signal(), Signal()
        a1, a2 = Signal(aw), Signal(aw)
        x1 = Signal(data.ArrayLayout(signed(cfg.acc_width), cfg.cols))
        x2 = Signal.like(x1)
        m.d.sync += [v1.eq(0), v2.eq(v1), a2.eq(a1), x2.eq(x1)]
        m.d.comb += [self.acc.ready.eq(1), self.fill.ready.eq(~self.acc.valid)]
        with m.If(self.acc.valid):
            m.d.sync += [v1.eq(1), a1.eq(self.acc.payload.addr), x1.eq(self.acc.payload.data)]
        with m.Elif(self.fill.valid):
            m.d.sync += [v1.eq(1), a1.eq(self.fill.payload.addr),
                         x1.eq(self.fill.payload.data)]
        sums = Signal.like(x1)
        for j in range(cfg.cols):
            m.d.comb += sums[j].eq(rp.data[j] + x2[j])

        clr_addr = Signal(aw + 1)
        with m.If(self.clear):
            m.d.sync += clr_addr.eq(clr_addr + 1)
            with m.If(clr_addr + 1 >= self.clear_words):
                m.d.comb += self.clear_last.eq(1)
                m.d.sync += clr_addr.eq(0)

        # ports: the accumulation first, then the clear pass / the DMA's reads
        with m.If(v1):
            m.d.comb += [rp.addr.eq(a1), rp.en.eq(1)]
        with m.Else():
            m.d.comb += [rp.addr.eq(self.read_addr), rp.en.eq(self.read_en)]
        with m.If(v2):
            m.d.comb += [wp.addr.eq(a2), wp.data.eq(sums), wp.en.eq(1)]
        with m.Elif(self.clear):
            m.d.comb += [wp.addr.eq(self.clear_base + clr_addr), wp.data.eq(0), wp.en.eq(1)]
        # the DMA's word: fresh the cycle after its read, then held (accumulations reuse rp)
        dma_read, held = Signal(), Signal.like(self.read_data)
        m.d.sync += dma_read.eq(~v1 & self.read_en)
        with m.If(dma_read):
            m.d.sync += held.eq(rp.data)
        m.d.comb += [self.read_data.eq(Mux(dma_read, rp.data, held)), self.read_ready.eq(~v1),
                     self.busy.eq(v1 | v2 | self.fill.valid),
                     self.read_event.eq(rp.en), self.write_event.eq(wp.en)]
        return m
