"""The load unit: operand tiles from external memory into a buffer bank, through the DMA,
skipping a load whose bank already holds the same slice."""

from amaranth.hdl import Module, Signal, unsigned
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.wiring import In, Out

from bpsa.config import Config
from bpsa.gateware.dma import DmaError, Direction, ElementKind, command_layout, default_geometry

__all__ = ["Cache", "LoadUnit", "Target", "load_layout"]

#: Width of lengths, counts and strides.
_W = 48


class Target(enum.Enum, shape=3):
    """Which buffer a load writes."""
    FWD_X = 0
    FWD_W = 1
    BWD_A = 2
    BWD_B = 3
    POOL = 4
    CF_X = 5


class Cache(enum.Enum, shape=3):
    """Which slice record a load checks and updates: the A buffer's, the B buffer's, the
    FC weights' (a second slice in buffer B), the pooling buffer's X and dY, or the
    channel-first X banks'."""
    A = 0
    B = 1
    W = 2
    POOL_X = 3
    POOL_DY = 4
    CF = 5


def dma_command_layout(config):
    """The DMA engine's command layout for ``config`` (its default geometry)."""
    word_width, depth = default_geometry(config)
    return command_layout(word_width=word_width, depth=depth, operand_width=config.operand_width)


def load_layout(config):
    """One load: ``count`` runs of ``run_len`` elements, ``stride`` bytes apart from ``addr``,
    packed one after the other into bank ``bank`` of the ``cache``'s buffer from word
    ``offset``, a run every ``run_words`` words; ``length`` (their total) and ``addr`` name the
    slice; ``lanes`` elements a buffer word; ``target`` says which buffer the words go to."""
    cmd = dma_command_layout(config)
    return data.StructLayout({
        "target": Target, "cache": Cache, "bank": 1, "offset": unsigned(_W),
        "addr": unsigned(33), "length": unsigned(_W), "lanes": cmd["lanes"].shape,
        "count": unsigned(_W), "run_len": unsigned(_W), "run_words": unsigned(_W),
        "stride": unsigned(_W),
    })


class LoadUnit(wiring.Component):
    """Runs one load at a time (see :func:`load_layout`).

    A load is taken (``load.ready``) either at once, when its bank already holds the slice
    (same address and length since ``invalidate``; ``hit`` is high with ``ready``), or when
    the DMA takes its first command; ``done`` pulses in the cycle the DMA finishes its last
    run, with ``error`` (:class:`bpsa.gateware.dma.DmaError`) set when a run failed (the rest
    is not loaded).

    Members
    -------
    load : In(stream.Signature(load_layout(config)))
    hit, done : Out(1)
    error : Out(DmaError)
    invalidate : In(1)
        Forget every slice (a new layer).
    target : Out(Target)
        The buffer the DMA's writes go to.
    dma : Out(stream.Signature(DMA command))
    dma_done : In(1), dma_error : In(DmaError)
        The DMA engine's end of a command.
    """

    def __init__(self, config):
        if not isinstance(config, Config):
            raise TypeError(f"config must be a Config, not {config!r}")
        self.config = config
        super().__init__({
            "load": In(stream.Signature(load_layout(config))),
            "hit": Out(1), "done": Out(1), "error": Out(DmaError),
            "invalidate": In(1), "target": Out(Target),
            "dma": Out(stream.Signature(dma_command_layout(config))),
            "dma_done": In(1), "dma_error": In(DmaError),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        p = self.load.payload
        halves = {Cache.A: cfg.buf_a_depth // 2, Cache.B: cfg.buf_b_depth // 2,
                  Cache.W: cfg.buf_b_depth // 2}
        if cfg.has_pool():
            halves.update({Cache.POOL_X: cfg.buf_pool_depth // 2,
                           Cache.POOL_DY: cfg.buf_pool_depth // 2})
        if cfg.has_frontend("channel_first"):
            halves[Cache.CF] = cfg.buf_cf_depth // 2
        # the slice each bank of each buffer holds: (address, length, valid); the pooling
        # buffer's dY also its offset (it follows X, whose length varies)
        slices = {(c, b): (Signal(33, name=f"cache_{c.name.lower()}{b}_addr"),
                           Signal(_W, name=f"cache_{c.name.lower()}{b}_len"),
                           Signal(name=f"cache_{c.name.lower()}{b}_valid"))
                  for c in halves for b in (0, 1)}
        dy_offset = {b: Signal(_W, name=f"cache_pool_dy{b}_offset") for b in (0, 1)}
        hit = Signal()
        first = Signal(_W)
        for c in halves:
            with m.If(p.cache == c):
                m.d.comb += first.eq(p.bank * halves[c] + p.offset)
                for b in (0, 1):
                    addr, length, valid = slices[c, b]
                    same = valid & (addr == p.addr) & (length == p.length)
                    if c == Cache.POOL_DY:
                        same = same & (dy_offset[b] == p.offset)
                    with m.If(p.bank == b):
                        m.d.comb += hit.eq(same)
        ld_ptr, ld_buf, ld_left = Signal(33), Signal(_W), Signal(_W)
        run_len, run_words, stride = Signal(_W), Signal(_W), Signal(_W)
        lanes = Signal.like(p.lanes)
        ld_cache, ld_bank = Signal(Cache), Signal()
        cmd = self.dma.payload
        m.d.comb += [cmd.direction.eq(Direction.LOAD), cmd.kind.eq(ElementKind.OPERAND)]
        target = Signal(Target)
        m.d.comb += self.target.eq(target)

        with m.If(self.invalidate):
            for _, _, valid in slices.values():
                m.d.sync += valid.eq(0)

        with m.FSM(name="load"):
            with m.State("IDLE"):
                with m.If(self.load.valid):
                    with m.If(hit):
                        m.d.comb += [self.load.ready.eq(1), self.hit.eq(1)]
                    with m.Else():
                        m.d.comb += [self.dma.valid.eq(1), cmd.addr.eq(p.addr),
                                     cmd.buf_addr.eq(first), cmd.length.eq(p.run_len),
                                     cmd.lanes.eq(p.lanes)]
                        m.d.sync += target.eq(p.target)
                        with m.If(self.dma.ready):
                            m.d.comb += self.load.ready.eq(1)
                            for (c, b), (addr, length, valid) in slices.items():
                                with m.If((p.cache == c) & (p.bank == b)):
                                    m.d.sync += [valid.eq(0), addr.eq(p.addr),
                                                 length.eq(p.length)]
                                    if c == Cache.POOL_DY:
                                        m.d.sync += dy_offset[b].eq(p.offset)
                            m.d.sync += [ld_ptr.eq(p.addr + p.stride),
                                         ld_buf.eq(first + p.run_words),
                                         ld_left.eq(p.count - 1), run_len.eq(p.run_len),
                                         run_words.eq(p.run_words), stride.eq(p.stride),
                                         lanes.eq(p.lanes), ld_cache.eq(p.cache),
                                         ld_bank.eq(p.bank)]
                            m.next = "WAIT"
            with m.State("MORE"):
                m.d.comb += [self.dma.valid.eq(1), cmd.addr.eq(ld_ptr), cmd.buf_addr.eq(ld_buf),
                             cmd.length.eq(run_len), cmd.lanes.eq(lanes)]
                with m.If(self.dma.ready):
                    m.d.sync += [ld_ptr.eq(ld_ptr + stride), ld_buf.eq(ld_buf + run_words),
                                 ld_left.eq(ld_left - 1)]
                    m.next = "WAIT"
            with m.State("WAIT"):
                with m.If(self.dma_done):
                    with m.If(self.dma_error != DmaError.NONE):
                        m.d.comb += [self.done.eq(1), self.error.eq(self.dma_error)]
                        m.next = "IDLE"
                    with m.Elif(ld_left != 0):
                        m.next = "MORE"
                    with m.Else():
                        for (c, b), (_, _, valid) in slices.items():
                            with m.If((ld_cache == c) & (ld_bank == b)):
                                m.d.sync += valid.eq(1)
                        m.d.comb += self.done.eq(1)
                        m.next = "IDLE"
        return m
