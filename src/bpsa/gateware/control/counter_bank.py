"""64-bit event counters kept in a RAM, swept one a cycle, read by request.

A bank of ``N`` counters would cost ``N`` 64-bit adders and, to read them, a 64-bit
``N``-input multiplexer in the fabric (on the ECP5 a 17-input one alone maps to 1,600-3,200
LUT4s). Here each counter has only a short *pending* register that adds its events, and one
64-bit word in a RAM. A sweeper visits one counter a cycle, in order: it reads the counter's
word, takes its pending count (the pending register restarts from the cycle's events), and a
cycle later writes the word plus the pending count back. Every counter is visited every ``N``
cycles, so a pending register needs only ``log2(N + 1)`` bits more than its increments (a
few more when ``N < 3``).

The write-back takes two cycles (the low half's carry into the high half is registered), so
the sweep has at least three slots: a word is written before it is read again.

Reading: a request names a counter; the answer is the word the sweeper writes at its next
visit that starts after the request (``max(N, 3) + 3`` cycles at most), so the value counts
every event before the request and none after the answer. Counters given as *totals* (kept elsewhere, 64
bits) are answered the cycle after the request.

Clearing: ``clear`` drops every pending count (the clear cycle's events too) and marks every
word stale; the sweeper writes a stale word as its pending count alone. A read in between
already sees the cleared value.
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from bpsa.gateware.bus.axi_lite import counter_port_signature

__all__ = ["CounterBank"]


class CounterBank(wiring.Component):
    """Counters swept through a RAM (see the module docstring).

    Parameters
    ----------
    spec : sequence of (name, width)
        The counters in index order (the index a read names): ``width`` is the bits of the
        counter's increment a cycle, or ``None`` for a total kept elsewhere.

    Members
    -------
    inc : In(StructLayout)
        Each swept counter's increment this cycle.
    totals : In(StructLayout)
        Each total's 64-bit value (a member only when ``spec`` has totals).
    clear : In(1)
        Zero every swept counter (the events of this cycle are dropped too).
    read : In(counter_port_signature(len(spec)))
        The read port: ``req`` with ``index``; ``valid`` pulses with ``value``. One read at a
        time: a request while one is outstanding is ignored.
    """

    def __init__(self, spec):
        spec = tuple(spec)
        if not spec or len({name for name, _ in spec}) != len(spec):
            raise ValueError(f"spec must name distinct counters, not {spec!r}")
        for name, width in spec:
            if width is not None and not (isinstance(width, int) and 1 <= width <= 63):
                raise ValueError(f"counter {name!r}: increment width must be an integer in "
                                 f"[1, 63] or None (a total), not {width!r}")
        self.spec = spec
        self.swept = [(name, width) for name, width in spec if width is not None]
        self.totals_names = [name for name, width in spec if width is None]
        if not self.swept:
            raise ValueError("spec must have at least one swept counter")
        members = {
            "inc": In(data.StructLayout({name: unsigned(w) for name, w in self.swept})),
            "clear": In(1),
            "read": In(counter_port_signature(len(spec))),
        }
        if self.totals_names:
            members["totals"] = In(data.StructLayout(
                {name: unsigned(64) for name in self.totals_names}))
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        n = len(self.swept)
        slots = max(n, 3)           # the sweep's length: a word is written before it is read
        pend_extra = (slots + 1).bit_length()
        width = max(w for _, w in self.swept) + pend_extra
        m.submodules.mem = mem = Memory(shape=64, depth=slots, init=[])
        wr = mem.write_port()
        rd = mem.read_port(transparent_for=())

        # --- stage A: read slot k, take its pending count and whether its word is stale --
        k = Signal(range(slots), name="sweep_slot")
        k_b = Signal(range(slots), name="add_slot")
        k_c = Signal(range(slots), name="write_slot")
        valid_b, valid_c = Signal(), Signal()
        pend_b = Signal(width)
        stale = Signal(slots, init=(1 << slots) - 1)
        stale_b = Signal()
        m.d.comb += [rd.addr.eq(k), rd.en.eq(1)]
        m.d.sync += [k.eq(Mux(k == slots - 1, 0, k + 1)), k_b.eq(k), valid_b.eq(1),
                     k_c.eq(k_b), valid_c.eq(valid_b), stale_b.eq(stale.bit_select(k, 1))]
        pend = []
        for slot, (name, w) in enumerate(self.swept):
            p = Signal(w + pend_extra, name=f"pend_{name}")
            pend.append(p)
            inc = getattr(self.inc, name)
            with m.If(self.clear):
                m.d.sync += p.eq(0)
            with m.Elif(k == slot):
                m.d.sync += p.eq(inc)
            with m.Else():
                m.d.sync += p.eq(p + inc)
        with m.Switch(k):
            for slot, p in enumerate(pend):
                with m.Case(slot):
                    m.d.sync += pend_b.eq(p)
            with m.Default():               # the slots past the counters: nothing pends
                m.d.sync += pend_b.eq(0)

        # --- stage B: the two halves of word + pending, the low half's carry kept --------
        base = Signal(64)
        lo_c = Signal(33)
        hi_c = Signal(32)
        m.d.comb += base.eq(Mux(stale_b, 0, rd.data))
        m.d.sync += [lo_c.eq(base[:32] + pend_b[:32]), hi_c.eq(base[32:] + pend_b[32:])]
        with m.If(valid_b):
            m.d.sync += stale.eq(stale & ~(Const(1, slots) << k_b))
        with m.If(self.clear):
            m.d.sync += [pend_b.eq(0), stale_b.eq(1), stale.eq((1 << slots) - 1)]

        # --- stage C: the carry into the high half; the word goes back ------------------
        word = Signal(64)
        m.d.comb += [word.eq(Cat(lo_c[:32], hi_c + lo_c[32])),
                     wr.addr.eq(k_c), wr.data.eq(word), wr.en.eq(valid_c)]

        self._reads(m, k, word)
        return m

    def _reads(self, m, k, word):
        """A read waits for its counter's next visit: stage A after the request arms it, and
        stage C two cycles later answers with the word written back; a total answers at
        once."""
        port = self.read
        slot_of = {name: slot for slot, (name, _) in enumerate(self.swept)}
        index = Signal.like(port.index)
        waiting = Signal()
        arm_b, arm_c = Signal(), Signal()   # the armed slot is in stage B / C
        hit = Signal()
        is_total = Signal()
        total = Signal(64)
        m.d.sync += [port.valid.eq(0), arm_b.eq(0), arm_c.eq(arm_b)]
        with m.Switch(index):
            for i, (name, width) in enumerate(self.spec):
                with m.Case(i):
                    if width is None:
                        m.d.comb += [is_total.eq(1),
                                     total.eq(getattr(self.totals, name))]
                    else:
                        m.d.comb += hit.eq(k == slot_of[name])
        with m.If(port.req & ~waiting):
            m.d.sync += [index.eq(port.index), waiting.eq(1)]
        with m.If(waiting & is_total):
            m.d.sync += [port.value.eq(total), port.valid.eq(1), waiting.eq(0)]
        with m.Elif(waiting & arm_c):
            m.d.sync += [port.value.eq(word), port.valid.eq(1), waiting.eq(0)]
        with m.Elif(waiting & hit & ~arm_b):
            m.d.sync += arm_b.eq(1)
