"""The load unit: operand tiles from external memory into a buffer bank, through the DMA,
skipping a load whose bank already holds the same slice."""

from amaranth.hdl import Module, Signal, unsigned
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.wiring import In, Out

from bpsa.config import Config
from bpsa.gateware.bus.dma import DmaError, Direction, ElementKind, command_layout, default_geometry
from bpsa.spec import isa

__all__ = ["Cache", "LoadUnit", "Target", "load_layout"]

class Target(enum.Enum, shape=3):
    """Which buffer a load writes."""
    FWD_X = 0
    FWD_W = 1
    BWD_A = 2
    BWD_B = 3
    POOL = 4
    CF_X = 5
    CF_XS = 6          #: MX: the channel-first X banks' scale bank (a byte a pixel)


class Cache(enum.Enum, shape=3):
    """Which slice record a load checks and updates: the A buffer's, the B buffer's, the
    FC weights' (a second slice in buffer B), the pooling buffer's X and dY, or the
    channel-first X banks' (and, in MX, their scale bank's)."""
    A = 0
    B = 1
    W = 2
    POOL_X = 3
    POOL_DY = 4
    CF = 5
    CF_XS = 6


def dma_command_layout(config):
    """The DMA engine's command layout for ``config`` (its default geometry)."""
    word_width, depth = default_geometry(config)
    return command_layout(word_width=word_width, depth=depth, operand_width=config.operand_width)


def load_layout(config):
    """One load (the instruction set's ``load`` fields, :mod:`bpsa.spec.isa`, with their
    widths): ``count`` runs of ``run_len`` elements, ``stride`` bytes apart from ``addr``,
    packed one after the other into bank ``bank`` of the ``cache``'s buffer from word
    ``offset``, a run every ``run_words`` words; ``length`` (their total) and ``addr`` name the
    slice; ``lanes`` elements a buffer word; ``target`` says which buffer the words go to."""
    bits = {f.name: f.bits for f in isa.fields(config) if f.struct == "load"}
    types = {"target": Target, "cache": Cache}
    return data.StructLayout({name: types.get(name, unsigned(b)) for name, b in bits.items()})


class LoadUnit(wiring.Component):
    """Runs one load at a time (see :func:`load_layout`).

    A load is taken (``load.ready``) whenever the unit is idle and kept in a register with
    whether its bank holds its slice (same address and length since ``invalidate``): the
    next cycle a hit ends the load (``done`` with ``hit``), else the DMA gets its runs one
    command at a time. ``done`` pulses in the cycle the DMA finishes the last
    run, with ``error`` (:class:`bpsa.gateware.bus.dma.DmaError`) set when a run failed (the rest
    is not loaded). Every decision but the slice comparison reads registers only: the
    load's fields, the comparison's result, the run counters.

    Members
    -------
    load : In(stream.Signature(load_layout(config)))
    hit, done : Out(1)
    error : Out(DmaError)
    claim : Out(1)
        A load that missed is being checked: its first DMA command comes the next cycle
        (the accelerator keeps the instruction fetch off the DMA meanwhile).
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
            "hit": Out(1), "done": Out(1), "error": Out(DmaError), "claim": Out(1),
            "invalidate": In(1), "target": Out(Target),
            "dma": Out(stream.Signature(dma_command_layout(config))),
            "dma_done": In(1), "dma_error": In(DmaError),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        q = Signal(load_layout(cfg))             # the load being checked and run
        halves = {Cache.A: cfg.buf_a_depth // 2, Cache.B: cfg.buf_b_depth // 2,
                  Cache.W: cfg.buf_b_depth // 2}
        if cfg.has_pool():
            halves.update({Cache.POOL_X: cfg.buf_pool_depth // 2,
                           Cache.POOL_DY: cfg.buf_pool_depth // 2})
        if cfg.has_frontend("channel_first"):
            halves[Cache.CF] = cfg.buf_cf_depth // 2
            if cfg.is_mx:
                halves[Cache.CF_XS] = cfg.buf_cf_depth // 2
        # the slice each bank of each buffer holds: (address, length, valid); the pooling
        # buffer's dY also its offset (it follows X, whose length varies)
        lw = q.length.shape().width
        slices = {(c, b): (Signal(q.addr.shape(), name=f"cache_{c.name.lower()}{b}_addr"),
                           Signal(lw, name=f"cache_{c.name.lower()}{b}_len"),
                           Signal(name=f"cache_{c.name.lower()}{b}_valid"))
                  for c in halves for b in (0, 1)}
        dy_offset = {b: Signal.like(q.offset, name=f"cache_pool_dy{b}_offset") for b in (0, 1)}
        # the offered load against its bank's slice, registered with the load
        p = self.load.payload
        hit, hit_now = Signal(), Signal()
        first = Signal(q.offset.shape().width + 1)   # the load's first buffer word
        for c in halves:
            with m.If(p.cache == c):
                for b in (0, 1):
                    addr, length, valid = slices[c, b]
                    same = valid & (addr == p.addr) & (length == p.length)
                    if c == Cache.POOL_DY:
                        same = same & (dy_offset[b] == p.offset)
                    with m.If(p.bank == b):
                        m.d.comb += hit_now.eq(same)
            with m.If(q.cache == c):
                m.d.comb += first.eq(q.bank * halves[c] + q.offset)
        ld_ptr, ld_buf, ld_left = Signal.like(q.addr), Signal.like(first), Signal.like(q.count)
        cmd = self.dma.payload
        m.d.comb += [cmd.direction.eq(Direction.LOAD), cmd.kind.eq(ElementKind.OPERAND),
                     cmd.addr.eq(ld_ptr), cmd.buf_addr.eq(ld_buf), cmd.length.eq(q.run_len),
                     cmd.lanes.eq(q.lanes), self.target.eq(q.target)]

        with m.If(self.invalidate):
            for _, _, valid in slices.values():
                m.d.sync += valid.eq(0)

        with m.FSM(name="load"):
            with m.State("IDLE"):
                m.d.comb += self.load.ready.eq(1)
                with m.If(self.load.valid):
                    m.d.sync += [q.eq(p), hit.eq(hit_now & ~self.invalidate)]
                    m.next = "CHECK"
            with m.State("CHECK"):
                with m.If(hit):
                    m.d.comb += [self.done.eq(1), self.hit.eq(1)]
                    m.next = "IDLE"
                with m.Else():
                    m.d.comb += self.claim.eq(1)
                    for (c, b), (addr, length, valid) in slices.items():
                        with m.If((q.cache == c) & (q.bank == b)):
                            m.d.sync += [valid.eq(0), addr.eq(q.addr), length.eq(q.length)]
                            if c == Cache.POOL_DY:
                                m.d.sync += dy_offset[b].eq(q.offset)
                    m.d.sync += [ld_ptr.eq(q.addr), ld_buf.eq(first), ld_left.eq(q.count)]
                    m.next = "RUN"
            with m.State("RUN"):
                m.d.comb += self.dma.valid.eq(1)
                with m.If(self.dma.ready):
                    m.d.sync += [ld_ptr.eq(ld_ptr + q.stride), ld_buf.eq(ld_buf + q.run_words),
                                 ld_left.eq(ld_left - 1)]
                    m.next = "WAIT"
            with m.State("WAIT"):
                with m.If(self.dma_done):
                    with m.If(self.dma_error != DmaError.NONE):
                        m.d.comb += [self.done.eq(1), self.error.eq(self.dma_error)]
                        m.next = "IDLE"
                    with m.Elif(ld_left != 0):
                        m.next = "RUN"
                    with m.Else():
                        for (c, b), (_, _, valid) in slices.items():
                            with m.If((q.cache == c) & (q.bank == b)):
                                m.d.sync += valid.eq(1)
                        m.d.comb += self.done.eq(1)
                        m.next = "IDLE"
        return m
