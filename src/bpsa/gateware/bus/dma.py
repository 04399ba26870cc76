"""The DMA engine: an AXI4 master that moves tensors between external memory and an on-chip
buffer, one command at a time.

External memory
    Bus: AXI4, 32-bit addresses, ``Config.dma_data_width`` = 64 (default), 128 or 256-bit
    data, one ID (0), INCR bursts of full beats (``AxSIZE`` = log2 of the beat's bytes) from
    beat-aligned addresses, at most ``max_burst`` beats (16 by
    default, up to 256) and never across a 4 KiB boundary. Writes mark the bytes outside the
    command's range with ``wstrb`` = 0. AW / AR run ahead of the data channels (all bursts of a
    command may be outstanding, a burst issued at most every other cycle); ``bready`` is
    always high.
    Tensors are dense arrays of *elements* of a power of two of bytes, little endian:
    ``element_bytes(bits)`` = 1, 2, 4 or 8 for operands (``operand_width`` bits) and
    accumulators (``result_width`` bits: a P lane). A command moves ``length`` consecutive elements from
    byte address ``addr``, which must be a multiple of the element size.

Buffer
    Words of ``word_width`` bits, ``depth`` deep, accessed through a synchronous read port
    (data ``read_latency`` cycles after ``en``: 1 for an ``amaranth.lib.memory`` read port,
    more behind registers; the engine keeps the words it has asked for in a small queue, so
    ``data`` need not hold) and a write port. A command packs ``lanes``
    elements into a word, lane ``j`` at bits ``[j*b, (j+1)*b)`` for element width ``b``
    (``operand_width`` or ``result_width``): element ``i`` is lane ``i % lanes`` of word
    ``buf_addr + i // lanes``. ``lanes = 0`` means as many as fit (``word_width // b``).

Element conversion
    Loads keep the low ``b`` bits of each memory element; stores widen a buffer element to its
    memory size, sign-extending accumulators and signed operands, zero-extending unsigned
    operands. A load writes whole words: lanes past the end of the command in its last word
    are written as zeros.

Throughput
    Each cycle moves as many elements as are left in the current beat and the current buffer
    word (at most one beat): a full beat (``dma_data_width / 8`` bytes) per cycle when
    ``lanes`` is at least the elements per beat and the address is beat-aligned; splits at word and beat boundaries
    otherwise (at least one element per cycle).

Latency
    A command is taken in IDLE and checked in CHECK and the first cycle of RUN; the first
    burst's address goes out in the second cycle of RUN (its length is worked out in the
    first). A load's ``done`` pulses the cycle after its last buffer write; a store's the cycle
    after its last write response.

Errors (``error`` with the ``done`` pulse; a command is answered exactly once)
    Checked in this order, the first that applies is reported:
    ``ALIGN``: ``addr`` not a multiple of the element size.
    ``WINDOW``: any byte of the command outside ``[window_lo, window_hi]`` (inclusive).
    ``BUFFER``: ``lanes`` larger than a word holds, or the words run past the buffer's end.
    These are found before any bus traffic, ``ALIGN`` in CHECK, ``WINDOW`` and ``BUFFER`` in the
    first cycle of RUN (``done`` two cycles later than for ``ALIGN``); the command then ends
    without touching memory or buffer. ``SLVERR`` / ``DECERR``: a read beat or write response
    carried that response; the command still runs to its end on the bus (every beat and
    response is taken, so nothing hangs) and the buffer contents it wrote are unspecified. ``length = 0`` ends at
    once without error.
"""

from types import SimpleNamespace

from amaranth.hdl import Array, Cat, Module, Mux, Shape, Signal, unsigned
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.memory import ReadPort, WritePort
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2, exact_log2

from bpsa.config import Config
from bpsa.gateware.bus.axi_lite import AxiResp
from bpsa.gateware.common.enums import hw_enum
from bpsa.spec import errors
from bpsa.spec.numeric import element_bytes

__all__ = [
    "ADDR_WIDTH", "DATA_WIDTH", "AxiBurst", "Direction", "DmaEngine", "DmaError", "ElementKind",
    "axi4_signature", "command_layout", "default_geometry", "element_kinds",
    "reference",
]

#: AXI4 address bits.
ADDR_WIDTH = 32
#: AXI4 data bits of the default configuration (``Config.dma_data_width`` sets them).
DATA_WIDTH = 64


class AxiBurst(enum.Enum, shape=2):
    """AXI burst types (AxBURST)."""
    FIXED = 0
    INCR = 1
    WRAP = 2


class Direction(enum.Enum, shape=1):
    """Which way a command moves data."""
    LOAD = 0     #: external memory -> buffer (AXI reads)
    STORE = 1    #: buffer -> external memory (AXI writes)


class ElementKind(enum.Enum, shape=1):
    """Element width of a command."""
    OPERAND = 0        #: ``operand_width`` bits in the buffer
    ACCUMULATOR = 1    #: ``result_width`` bits in the buffer (a P lane)


#: How a command ended (:class:`bpsa.spec.errors.DmaError`; see the module docstring).
DmaError = hw_enum(errors.DmaError, 3)


def default_geometry(config):
    """The default ``(word_width, depth)`` of the buffer port for ``config``: the widest buffer
    word (``max(feeder_bus_width * operand_width, cols * operand_width, cols * result_width)``,
    and ``rows * operand_width`` with the channel-first front end) and the deepest buffer (the
    pooling unit's and the channel-first banks' too, when generated)."""
    cf = config.has_frontend("channel_first")
    return (max(config.feeder_bus_width * config.operand_width,
                config.cols * config.operand_width, config.cols * config.result_width,
                config.rows * config.operand_width if cf else 0),
            max(config.buf_a_depth, config.buf_b_depth, config.buf_p_depth,
                config.buf_pool_depth if config.has_pool() else 0,
                config.buf_cf_depth if cf else 0))


def element_kinds(config, word_width):
    """Per :class:`ElementKind`, in value order: ``(kind, buffer bits, memory bytes, signed,
    lanes per word)``."""
    return [
        (ElementKind.OPERAND, config.operand_width, element_bytes(config.operand_width),
         config.operand_signed, word_width // config.operand_width),
        (ElementKind.ACCUMULATOR, config.result_width, element_bytes(config.result_width), True,
         word_width // config.result_width),
    ]


def axi4_signature(addr_width=ADDR_WIDTH, data_width=DATA_WIDTH, id_width=1):
    """An AXI4 bus as seen by the master (flip it for a slave). Members use the AXI names in
    lower case (``awid``, ``awaddr``, ``awlen``, ``awsize``, ``awburst``, ``awlock``,
    ``awcache``, ``awprot``, ``awvalid``, ``awready``, ``wdata``, ``wstrb``, ``wlast``, ...,
    ``rready``), so an interface member ``axi`` becomes ``axi__awaddr`` and so on; cocotbext-axi
    finds them with ``AxiBus.from_prefix(dut, "axi", bus_separator="__")``."""
    members = {}
    for p in ("aw", "ar"):
        members.update({
            f"{p}id": Out(id_width), f"{p}addr": Out(addr_width), f"{p}len": Out(8),
            f"{p}size": Out(3), f"{p}burst": Out(AxiBurst), f"{p}lock": Out(1),
            f"{p}cache": Out(4), f"{p}prot": Out(3), f"{p}valid": Out(1), f"{p}ready": In(1),
        })
    members.update({
        "wdata": Out(data_width), "wstrb": Out(data_width // 8), "wlast": Out(1),
        "wvalid": Out(1), "wready": In(1),
        "bid": In(id_width), "bresp": In(AxiResp), "bvalid": In(1), "bready": Out(1),
        "rid": In(id_width), "rdata": In(data_width), "rresp": In(AxiResp), "rlast": In(1),
        "rvalid": In(1), "rready": Out(1),
    })
    return wiring.Signature(members)


def command_layout(*, word_width, depth, operand_width):
    """Payload of the command stream.

    ``direction`` (:class:`Direction`), ``kind`` (:class:`ElementKind`), ``addr`` (32-bit
    byte address), ``buf_addr`` (buffer word address), ``length`` (elements; up to
    ``depth * word_width // operand_width``), ``lanes`` (elements per buffer word, 0 = as many
    as fit)."""
    max_lanes = word_width // operand_width
    return data.StructLayout({
        "direction": Direction,
        "kind": ElementKind,
        "addr": unsigned(ADDR_WIDTH),
        "buf_addr": unsigned(ceil_log2(depth)),
        "length": unsigned((depth * max_lanes).bit_length()),
        "lanes": unsigned(max_lanes.bit_length()),
    })


class DmaEngine(wiring.Component):
    """AXI4 master DMA between external memory and one buffer (see the module docstring for
    the memory format, the buffer format, conversions and errors).

    Parameters
    ----------
    config : Config
        Operand / accumulator widths and signedness; buffer defaults.
    word_width : int
        Bits of a buffer word (default: the widest buffer word of ``config``: ``max(
        feeder_bus_width * operand_width, cols * operand_width, cols * result_width)``).
    depth : int
        Buffer words (default: the deepest of ``buf_a/b/p_depth``).
    max_burst : int
        Beats per burst, a power of two in [1, 256].
    read_latency : int
        Cycles from a buffer read's ``en`` to its ``data``, 1 to 8 (a store keeps up to
        ``read_latency + 2`` words asked for and not yet unpacked, so a word a cycle still
        streams).

    Members
    -------
    cmd : In(stream.Signature(command_layout(...)))
        Commands; taken one at a time (``ready`` only while idle).
    done : Out(1)
        One-cycle pulse when a command has ended: loads after the last buffer write, stores
        after the last write response.
    error : Out(DmaError)
        How the command ended; valid with ``done`` and held until the next command.
    busy : Out(1)
        A command is being checked or run.
    window_lo, window_hi : In(32)
        The external byte addresses commands may touch (inclusive); sampled when a command is
        checked.
    axi : Out(axi4_signature(data_width=config.dma_data_width))
        External memory (Verilog ports ``axi__awaddr`` ...). Every valid is a register that
        holds until its handshake.
    buf_read : In(ReadPort.Signature(addr_width=log2(depth), shape=word_width))
        Connect a synchronous ``Memory.read_port()``.
    buf_read_ready : In(1, init=1)
        The read port serves the engine this cycle (a store reads a word only then).
    buf_write : In(WritePort.Signature(addr_width=log2(depth), shape=word_width))
        Connect ``Memory.write_port()``.
    read_bytes, write_bytes : Out(64)
        Element bytes moved from / to external memory (the payload, not whole beats): read
        bytes counted as their beat arrives, written bytes as they are placed into a beat,
        each added the cycle after (a command's bytes are all counted when ``done`` pulses).
    read_inc, write_inc : Out(beat bytes' bits + 1)
        The bytes ``read_bytes`` / ``write_bytes`` add next: what a counter kept elsewhere (the
        accelerator's :class:`~bpsa.gateware.control.counters.Counters`) adds each cycle.
    busy_cycles : Out(64)
        Cycles with ``busy`` high.
    clear_counters : In(1)
        Zero the three counters.
    uncounted : In(1)
        The bytes read now are not added to ``read_bytes`` (the accelerator's instruction
        fetches, counted apart).
    """

    def __init__(self, config, *, word_width=None, depth=None, max_burst=16, read_latency=1):
        if not isinstance(config, Config):
            raise TypeError(f"config must be a Config, not {config!r}")
        default_width, default_depth = default_geometry(config)
        word_width = default_width if word_width is None else word_width
        depth = default_depth if depth is None else depth
        if not isinstance(word_width, int) or word_width < config.operand_width:
            raise ValueError(f"word_width must be an integer of at least operand_width "
                             f"({config.operand_width}) bits, not {word_width!r}")
        if not isinstance(depth, int) or depth < 2 or depth & (depth - 1):
            raise ValueError(f"depth must be a power of two of at least 2, not {depth!r}")
        if not isinstance(max_burst, int) or not 1 <= max_burst <= 256 \
                or max_burst & (max_burst - 1):
            raise ValueError(f"max_burst must be a power of two in [1, 256], not {max_burst!r}")
        if not isinstance(read_latency, int) or not 1 <= read_latency <= 8:
            raise ValueError(f"read_latency must be an integer in [1, 8], not {read_latency!r}")
        self.read_latency = read_latency
        self.config = config
        self.data_width = config.dma_data_width
        self.beat_bytes = self.data_width // 8
        self.beat_shift = exact_log2(self.beat_bytes)
        self.beats_4k = 4096 // self.beat_bytes
        self.word_width = word_width
        self.depth = depth
        self.max_burst = max_burst
        self.layout = command_layout(word_width=word_width, depth=depth,
                                     operand_width=config.operand_width)
        aw = exact_log2(depth)
        super().__init__({
            "cmd": In(stream.Signature(self.layout)),
            "done": Out(1),
            "error": Out(DmaError),
            "busy": Out(1),
            "window_lo": In(ADDR_WIDTH),
            "window_hi": In(ADDR_WIDTH),
            "axi": Out(axi4_signature(data_width=self.data_width)),
            "buf_read": In(ReadPort.Signature(addr_width=aw, shape=word_width)),
            "buf_read_ready": In(1, init=1),
            "buf_write": In(WritePort.Signature(addr_width=aw, shape=word_width)),
            "read_bytes": Out(64),
            "write_bytes": Out(64),
            "read_inc": Out(self.beat_shift + 1),
            "write_inc": Out(self.beat_shift + 1),
            "busy_cycles": Out(64),
            "clear_counters": In(1),
            "uncounted": In(1),
        })

    @property
    def _per_beat_max(self):
        """Elements of the narrowest kind in a beat (a power of two)."""
        return max(self.beat_bytes // nb for _, _, nb, _, _ in self.kinds())

    @property
    def _lanes_max(self):
        """Lanes of the narrowest kind in a word (at least 1)."""
        return max(lanes for _, _, _, _, lanes in self.kinds())

    def kinds(self):
        """:func:`element_kinds` of this engine."""
        return element_kinds(self.config, self.word_width)

    def elaborate(self, platform):
        m = Module()
        axi = self.axi
        lay = self.layout
        len_w = Shape.cast(lay["length"].shape).width
        beats_w = len_w + 1
        beat_w = ADDR_WIDTH - self.beat_shift
        s = SimpleNamespace()      # signals shared by the methods below

        max_lanes, lanes_in, end, before = self._command(m, s, beats_w, beat_w)
        self._address_state(m, s, beats_w, beat_w)
        init, init2 = self._setup(s, end, before, beats_w)
        m.d.comb += [axi.wvalid.eq(s.w_valid), axi.wdata.eq(s.w_data), axi.wstrb.eq(s.w_strb),
                     axi.wlast.eq(s.w_last), axi.bready.eq(1)]

        done = Signal()
        m.d.comb += [self.done.eq(done), self.error.eq(s.err)]
        m.d.sync += [done.eq(0), s.read_inc.eq(0), s.write_inc.eq(0)]

        self._control(m, s, done, init, init2, max_lanes, lanes_in)
        self._counters(m, s)
        return m

    def _command(self, m, s, beats_w, beat_w):
        """The command, its derived values and checks (into ``s``). Returns the command's
        most lanes (``max_lanes``), the offered command's (``lanes_in``), its last byte
        (``end``) and the elements the words before ``buf_addr`` hold (``before``)."""
        lay = self.layout
        s.c = c = Signal(lay)
        s.err = Signal(DmaError)
        s.lanes = Signal.like(c.lanes)          # effective lanes per word (taken with the command)
        s.nbytes = Signal(4)                    # bytes per element in memory
        s.first_slot = Signal(self.beat_shift + 1)  # element slot of the first element in its beat
        s.per_beat = Signal(self.beat_shift + 1)    # elements in a beat
        s.last_end = Signal(self.beat_shift + 1)    # the slot past the last element in its beat
        max_lanes = Signal.like(c.lanes)
        s.size = size = Signal(2)               # log2 of nbytes
        lanes_in = Signal.like(c.lanes)         # the offered command's most lanes
        with m.Switch(c.kind):
            for kind, _, nb, _, ml in self.kinds():
                with m.Case(kind):
                    m.d.comb += [size.eq(exact_log2(nb)), s.nbytes.eq(nb), max_lanes.eq(ml),
                                 s.per_beat.eq(self.beat_bytes // nb)]
        with m.Switch(self.cmd.payload.kind):
            for kind, _, _, _, ml in self.kinds():
                with m.Case(kind):
                    m.d.comb += lanes_in.eq(ml)
        # CHECK registers the command's last byte and the elements the words before
        # ``buf_addr`` hold; the first cycle of RUN compares them with the window and the
        # buffer's elements.
        end = Signal(ADDR_WIDTH + 2)            # the command's last byte
        before = Signal(len(c.buf_addr) + len(c.lanes))
        s.end_r = Signal.like(end)
        s.before_r = Signal.like(before)
        s.first_beat = Signal(beat_w)
        s.total_beats = Signal(beats_w)
        m.d.comb += [
            end.eq(c.addr + (c.length << size) - 1),
            before.eq(c.buf_addr * s.lanes),
            s.first_beat.eq(c.addr[self.beat_shift:]),
            s.total_beats.eq((c.addr[:self.beat_shift] + (self.beat_bytes - 1)
                              + (c.length << size)) >> self.beat_shift),
            s.first_slot.eq(c.addr[:self.beat_shift] >> size),
            s.last_end.eq((s.end_r[:self.beat_shift] >> size) + 1),
        ]
        s.is_store = c.direction == Direction.STORE
        return max_lanes, lanes_in, end, before

    def _address_state(self, m, s, beats_w, beat_w):
        """State of the address channel (AR for loads, AW for stores), into ``s``, and its
        AXI outputs."""
        axi = self.axi
        s.ax_valid = Signal()
        s.ax_addr = Signal(ADDR_WIDTH)
        s.ax_len = Signal(8)
        s.ax_beat = Signal(beat_w)
        s.ax_left = Signal(beats_w)
        s.ax_n = Signal(9)                      # beats of the next burst
        s.ax_n_ok = Signal()                    # ... worked out for ax_beat and ax_left
        s.bursts_sent = Signal(beats_w)
        s.bursts_acked = Signal(beats_w)
        for p, active in (("aw", s.is_store), ("ar", ~s.is_store)):
            m.d.comb += [
                getattr(axi, f"{p}id").eq(0),
                getattr(axi, f"{p}addr").eq(s.ax_addr),
                getattr(axi, f"{p}len").eq(s.ax_len),
                getattr(axi, f"{p}size").eq(self.beat_shift),
                getattr(axi, f"{p}burst").eq(AxiBurst.INCR),
                getattr(axi, f"{p}cache").eq(0b0011),     # normal, bufferable
                getattr(axi, f"{p}valid").eq(s.ax_valid & active),
            ]

    def _setup(self, s, end, before, beats_w):
        """Registers set in CHECK (``init``; harmless when the command is refused) and in the
        first cycle of RUN (``init2``, from those), before any beat can come or go; declares
        the load's and the store's state (into ``s``). Returns ``(init, init2)``."""
        s.first = Signal()                      # the first cycle of RUN
        s.refuse_r = Signal(DmaError)           # the window or buffer check failed
        s.ok = Signal()                         # ... did not fail (from the second cycle)
        s.go = Signal()                         # ... a buffer word may be read (the second)
        s.lanes_r = Signal.like(s.lanes)
        s.lanes_mask = Signal(self._lanes_max)  # lanes below lanes_r
        s.last_end_r = Signal.like(s.last_end)
        init = [
            s.ax_beat.eq(s.first_beat), s.ax_left.eq(s.total_beats),
            s.ax_n_ok.eq(0),
            s.bursts_sent.eq(0), s.bursts_acked.eq(0), s.first.eq(1),
            s.refuse_r.eq(DmaError.NONE),
            s.end_r.eq(end), s.before_r.eq(before), s.lanes_r.eq(s.lanes),
            s.lanes_mask.eq(Cat(j < s.lanes for j in range(self._lanes_max))),
        ]
        init2 = [s.first.eq(0), s.last_end_r.eq(s.last_end)]
        # the counts of bytes moved, added to the counters a cycle later
        s.read_inc = Signal(self.beat_shift + 1)
        s.write_inc = Signal(self.beat_shift + 1)
        for part in (self._declare_load(s, beats_w), self._declare_store(s, beats_w)):
            init += part[0]
            init2 += part[1]
        return init, init2

    def _control(self, m, s, done, init, init2, max_lanes, lanes_in):
        """The command's state machine: IDLE takes a command, CHECK sets it up (``init``) and
        ends an empty or misaligned one, RUN checks the window and the buffer and runs the
        load or the store until it ends (``done``)."""
        axi, c, err = self.axi, s.c, s.err
        with m.FSM():
            with m.State("IDLE"):
                m.d.comb += self.cmd.ready.eq(1)
                with m.If(self.cmd.valid):
                    m.d.sync += [c.eq(self.cmd.payload), err.eq(DmaError.NONE),
                                 s.lanes.eq(Mux(self.cmd.payload.lanes == 0, lanes_in,
                                                self.cmd.payload.lanes))]
                    m.next = "CHECK"

            with m.State("CHECK"):
                m.d.comb += self.busy.eq(1)
                m.d.sync += init
                with m.If(c.length == 0):
                    m.d.sync += done.eq(1)
                    m.next = "IDLE"
                with m.Elif((c.addr & (s.nbytes - 1)) != 0):
                    m.d.sync += [err.eq(DmaError.ALIGN), done.eq(1)]
                    m.next = "IDLE"
                with m.Else():
                    m.next = "RUN"

            with m.State("RUN"):
                m.d.comb += self.busy.eq(1)
                # The window and buffer checks, worked out in the first cycle of RUN and acted
                # on in the second: a refused command issues no address (a burst goes out in the
                # second cycle at the earliest, ``ok``) and reads no buffer word (``go``: a
                # store's first read is in the second cycle too, so the buffer's read enable
                # comes from the registered verdict, not from the checks' comparators).
                refuse = Signal(DmaError)
                with m.If(s.first):
                    m.d.sync += init2 + [s.refuse_r.eq(refuse)]
                    with m.If((c.addr < self.window_lo) | (s.end_r > self.window_hi)):
                        m.d.comb += refuse.eq(DmaError.WINDOW)
                    with m.Elif((max_lanes == 0) | (s.lanes_r > max_lanes)
                                | (c.length + s.before_r > s.lanes_r * self.depth)):
                        m.d.comb += refuse.eq(DmaError.BUFFER)
                m.d.comb += [s.ok.eq(s.refuse_r == DmaError.NONE),
                             s.go.eq(s.ok & ~s.first)]
                with m.If(~s.ok):
                    m.d.sync += [err.eq(s.refuse_r), done.eq(1)]
                    m.next = "IDLE"
                self._address_channel(m, s)
                with m.If(~s.is_store):
                    self._load(m, s)
                    with m.If(s.ld_fin):
                        m.d.sync += done.eq(1)
                        m.next = "IDLE"
                with m.Else():
                    self._store(m, s)
                    acked = s.bursts_acked + axi.bvalid
                    with m.If(s.st_done & ~s.w_valid & (s.ax_left == 0) & ~s.ax_valid
                              & (acked == s.bursts_sent)):
                        m.d.sync += done.eq(1)
                        m.next = "IDLE"

    def _counters(self, m, s):
        """Counters (a clear wins over a count in the same cycle; the bytes moved are added a
        cycle after they are counted, before ``done``)."""
        m.d.comb += [self.read_inc.eq(s.read_inc), self.write_inc.eq(s.write_inc)]
        m.d.sync += [self.read_bytes.eq(self.read_bytes + s.read_inc),
                     self.write_bytes.eq(self.write_bytes + s.write_inc)]
        with m.If(self.busy):
            m.d.sync += self.busy_cycles.eq(self.busy_cycles + 1)
        with m.If(self.clear_counters):
            m.d.sync += [self.read_bytes.eq(0), self.write_bytes.eq(0),
                         self.busy_cycles.eq(0), s.read_inc.eq(0), s.write_inc.eq(0)]

    def _burst_len(self, beat, left):
        """Beats of the next burst starting at beat address ``beat`` with ``left`` beats to go:
        at most ``max_burst`` and never across a 4 KiB boundary."""
        to_4k = self.beats_4k - beat[:exact_log2(self.beats_4k)]
        n = Mux(left < self.max_burst, left, self.max_burst)
        return Mux(to_4k < n, to_4k, n)

    def _record(self, m, s, resp):
        """Keep the first bus error of the command."""
        with m.If(s.err == DmaError.NONE):
            with m.If(resp == AxiResp.SLVERR):
                m.d.sync += s.err.eq(DmaError.SLVERR)
            with m.If(resp == AxiResp.DECERR):
                m.d.sync += s.err.eq(DmaError.DECERR)

    def _address_channel(self, m, s):
        """Issue the bursts of the command, one address beat at a time. The length of the next
        burst (``ax_n``) is worked out the cycle before it is issued (the first in the first
        cycle of RUN, while the command is checked), so a burst goes out at most every other
        cycle."""
        ready = Mux(s.is_store, self.axi.awready, self.axi.arready)
        with m.If(s.ax_valid & ready):
            m.d.sync += s.ax_valid.eq(0)
        with m.If(s.ax_n_ok & (~s.ax_valid | ready) & (s.ax_left != 0) & s.ok):
            m.d.sync += [
                s.ax_valid.eq(1), s.ax_addr.eq(s.ax_beat << self.beat_shift),
                s.ax_len.eq(s.ax_n - 1), s.ax_beat.eq(s.ax_beat + s.ax_n),
                s.ax_left.eq(s.ax_left - s.ax_n), s.bursts_sent.eq(s.bursts_sent + 1),
                s.ax_n_ok.eq(0),
            ]
        with m.Else():
            m.d.sync += [s.ax_n.eq(self._burst_len(s.ax_beat, s.ax_left)), s.ax_n_ok.eq(1)]

    # --- load: R beats -> elements -> buffer words ------------------------------------------
    #
    # Positions are kept so that a step's choices are a few comparisons of small registers:
    # ``rb_hi`` is the lane of the word being packed just past the held beat's last element of
    # the command (``pk_lane`` + the elements left in the beat), so a step writes the lanes
    # ``[pk_lane, min(rb_hi, lanes))``, lane ``j`` taking beat slot ``(j + rb_off) %
    # per_beat``; no element count is compared with a command-long counter.

    def _declare_load(self, s, beats_w):
        pmax, lmax = self._per_beat_max, self._lanes_max
        s.rb_valid = Signal()                    # a beat is held in rb_data
        s.rb_data = Signal(self.data_width)
        s.rb_last = Signal()                     # it is the command's last beat
        s.rb_hi = Signal(range(lmax + pmax + 1))
        s.rb_off = Signal(exact_log2(pmax))
        s.r_beats = Signal(beats_w)              # R beats still to come
        s.r_last = Signal()                      # the next R beat is the command's last
        s.r_slot = Signal(range(pmax))           # its slot of the command's first element
        s.r_n = Signal(range(pmax + 1))          # its elements of the command
        s.ld_fin = Signal()                      # the command's last element is packed now
        s.pk_word = Signal(self.word_width)      # the buffer word being packed
        s.pk_fresh = Signal()                    # ... is a new word: lanes not written are 0
        s.pk_lane = Signal(range(lmax))
        s.pk_from = Signal(lmax)                 # lanes from pk_lane on
        s.pk_addr = Signal.like(s.c.buf_addr)
        one = s.r_beats == 1
        return ([s.rb_valid.eq(0), s.r_beats.eq(s.total_beats), s.r_slot.eq(s.first_slot),
                 s.pk_fresh.eq(1), s.pk_from.eq(~0), s.pk_lane.eq(0), s.pk_addr.eq(s.c.buf_addr)],
                [s.r_last.eq(one), s.r_n.eq(Mux(one, s.last_end, s.per_beat) - s.first_slot)])

    def _load(self, m, s):
        axi, c, lanes = self.axi, s.c, s.lanes_r
        # Each step (a beat held) moves the beat's elements into the word being packed up to
        # the beat's or the word's end, whichever is first.
        en = Signal(self._lanes_max)             # the lanes written this step
        below_hi = Signal(self._lanes_max)       # lanes below rb_hi
        for j in range(self._lanes_max):
            m.d.comb += below_hi[j].eq(j < s.rb_hi)
        m.d.comb += en.eq(s.pk_from & s.lanes_mask & below_hi)
        word_next = Signal.like(s.pk_word)
        m.d.comb += word_next.eq(Mux(s.pk_fresh, 0, s.pk_word))
        with m.Switch(c.kind):
            for kind, bits, nb, _, max_lanes in self.kinds():
                per_beat = self.beat_bytes // nb
                elems = [s.rb_data[8 * nb * e:8 * nb * e + bits] for e in range(per_beat)]
                with m.Case(kind):
                    for j in range(max_lanes):
                        with m.If(en[j]):
                            m.d.comb += word_next[j * bits:(j + 1) * bits].eq(
                                _pick(elems, s.rb_off + j))
        step = s.rb_valid
        full = (s.rb_hi >= lanes) | s.rb_last       # the word is written this step
        beat_end = s.rb_hi <= lanes                 # the beat is used up this step
        take = ~s.rb_valid | beat_end
        lane_next = Signal.like(s.pk_lane)          # pk_lane after this cycle
        m.d.comb += [axi.rready.eq(take),
                     lane_next.eq(Mux(step & full, 0, Mux(step, s.rb_hi, s.pk_lane))),
                     self.buf_write.addr.eq(s.pk_addr), self.buf_write.data.eq(word_next),
                     self.buf_write.en.eq(step & full)]
        with m.If(step):
            m.d.sync += [s.pk_word.eq(word_next), s.pk_fresh.eq(full), s.pk_lane.eq(lane_next),
                         s.pk_from.eq(Mux(full, ~0, ~below_hi))]
            with m.If(full):
                m.d.sync += s.pk_addr.eq(s.pk_addr + 1)
            with m.If(beat_end):
                m.d.sync += s.rb_valid.eq(0)
                m.d.comb += s.ld_fin.eq(s.rb_last)
            with m.Else():      # the word is full, the beat goes on into the next word
                m.d.sync += [s.rb_hi.eq(s.rb_hi - lanes), s.rb_off.eq(s.rb_off + lanes)]
        with m.If(axi.rvalid & take):
            last_next = s.r_beats == 2
            m.d.sync += [
                s.rb_valid.eq(1), s.rb_data.eq(axi.rdata), s.rb_last.eq(s.r_last),
                s.rb_hi.eq(lane_next + s.r_n), s.rb_off.eq(s.r_slot - lane_next),
                s.r_beats.eq(s.r_beats - 1), s.r_last.eq(last_next), s.r_slot.eq(0),
                s.r_n.eq(Mux(last_next, s.last_end_r, s.per_beat)),
            ]
            with m.If(~self.uncounted):
                m.d.sync += s.read_inc.eq(s.r_n << s.size)
            self._record(m, s, axi.rresp)

    # --- store: buffer words -> elements -> W beats -----------------------------------------
    #
    # ``sh_hi`` is the slot of the beat being assembled just past the unpacked word's last
    # element (``wa_slot`` + the elements left in the word): a step fills the slots
    # ``[wa_slot, min(sh_hi, wa_end))``, slot ``i`` taking the word's lane ``i - wa_slot``.

    def _declare_store(self, s, beats_w):
        pmax, lmax = self._per_beat_max, self._lanes_max
        s.fetch_left = Signal.like(s.c.length)   # elements not yet covered by a word read
        s.rd_addr = Signal.like(s.c.buf_addr)
        s.rd_out = Signal(range(self.read_latency + 3))   # words asked for, not yet unpacked
        s.sh = Signal(self.word_width)           # the word being unpacked, next element in lane 0
        s.sh_valid = Signal()
        s.sh_hi = Signal(range(pmax + lmax + 1))
        s.wa_data = Signal(self.data_width)      # the beat being assembled
        s.wa_strb = Signal(self.beat_bytes)
        s.wa_fresh = Signal()                    # ... is a new beat: slots not filled are 0
        s.wa_slot = Signal(range(pmax + 1))
        s.wa_end = Signal(range(pmax + 1))       # the slot past its last element of the command
        s.wa_last = Signal()                     # it is the command's last beat
        s.wa_beats = Signal(beats_w)             # beats still to assemble
        s.wa_4k = Signal(exact_log2(self.beats_4k))  # its beat address in its 4 KiB page
        s.wb_count = Signal(range(self.max_burst))   # its beat number in its W burst
        s.st_done = Signal()                     # the command's last beat is assembled
        s.w_valid = Signal()                     # the W output register
        s.w_data = Signal(self.data_width)
        s.w_strb = Signal(self.beat_bytes)
        s.w_last = Signal()
        one = s.wa_beats == 1
        return ([s.fetch_left.eq(s.c.length), s.rd_addr.eq(s.c.buf_addr), s.rd_out.eq(0),
                 s.sh_valid.eq(0), s.wa_fresh.eq(1), s.wa_slot.eq(s.first_slot),
                 s.wa_beats.eq(s.total_beats), s.wa_4k.eq(s.first_beat), s.wb_count.eq(0),
                 s.st_done.eq(0)],
                [s.wa_end.eq(Mux(one, s.last_end, s.per_beat)), s.wa_last.eq(one)])

    def _store(self, m, s):
        axi, c = self.axi, s.c
        with m.If(s.w_valid & axi.wready):
            m.d.sync += s.w_valid.eq(0)
        with m.If(axi.bvalid):
            m.d.sync += s.bursts_acked.eq(s.bursts_acked + 1)
            self._record(m, s, axi.bresp)

        # Each step (a word held, the W register free) moves the word's elements into the
        # beat being assembled up to the word's or the beat's end, whichever is first.
        step = s.sh_valid & (~s.w_valid | axi.wready)
        beat_end = s.sh_hi >= s.wa_end           # the beat is finished this step
        word_end = s.sh_hi <= s.wa_end           # the word is used up this step
        en = Signal(self._per_beat_max)          # the slots filled this step
        for i in range(self._per_beat_max):
            m.d.comb += en[i].eq((s.wa_slot <= i) & (i < s.sh_hi) & (i < s.wa_end))
        data_next = Signal.like(s.wa_data)
        strb_next = Signal.like(s.wa_strb)
        sh_next = Signal.like(s.sh)              # the word with its lanes this step took dropped
        m.d.comb += [data_next.eq(Mux(s.wa_fresh, 0, s.wa_data)),
                     strb_next.eq(Mux(s.wa_fresh, 0, s.wa_strb))]
        with m.Switch(c.kind):
            for kind, bits, nb, is_signed, max_lanes in self.kinds():
                per_beat = self.beat_bytes // nb
                lane = [s.sh[j * bits:(j + 1) * bits] for j in range(max_lanes)]
                with m.Case(kind):
                    for i in range(per_beat if max_lanes else 0):
                        # slot i takes lane i - wa_slot
                        elem = _pick([lane[i - w] if i - w < max_lanes else lane[0]
                                      for w in range(i + 1)], s.wa_slot)
                        with m.If(en[i]):
                            m.d.comb += [
                                data_next[8 * nb * i:8 * nb * (i + 1)].eq(
                                    elem.as_signed() if is_signed else elem),
                                strb_next[nb * i:nb * (i + 1)].eq((1 << nb) - 1),
                            ]
                    m.d.comb += sh_next.eq(_pick([s.sh >> ((per_beat - w) * bits)
                                                  for w in range(per_beat)], s.wa_slot))

        # Buffer words, read up to read_latency + 2 ahead (a word a cycle: a read's credit
        # returns the cycle after the unpacking register took its word): each lands
        # read_latency cycles after its read in a queue (with its element count), the
        # unpacking register takes them from there. The reads in flight and the queue never
        # hold more than that.
        slot_next = Signal.like(s.wa_slot)       # wa_slot after this cycle
        m.d.comb += slot_next.eq(Mux(step & beat_end, 0, Mux(step, s.sh_hi, s.wa_slot)))
        queue = m.submodules.read_queue = SyncFIFO(
            width=self.word_width + len(s.lanes), depth=self.read_latency + 2)
        absorb = queue.r_rdy & (~s.sh_valid | (step & word_end))
        # (``go``: not in RUN's first cycle, nor for a refused command)
        fetch = ((s.fetch_left != 0) & (s.rd_out != self.read_latency + 2)
                 & self.buf_read_ready & s.go)
        n = _min(s.fetch_left, s.lanes_r)
        m.d.comb += [self.buf_read.addr.eq(s.rd_addr), self.buf_read.en.eq(fetch)]
        flight = Signal(self.read_latency)       # a read's data lands when its bit leaves
        counts = [Signal.like(s.lanes, name=f"rd_count{i}") for i in range(self.read_latency)]
        m.d.sync += [flight.eq(Cat(fetch, flight[:-1])), counts[0].eq(n)]
        m.d.sync += [counts[i].eq(counts[i - 1]) for i in range(1, self.read_latency)]
        m.d.comb += [queue.w_en.eq(flight[-1]),
                     queue.w_data.eq(Cat(self.buf_read.data, counts[-1])),
                     queue.r_en.eq(absorb)]
        with m.If(fetch):
            m.d.sync += [s.rd_addr.eq(s.rd_addr + 1), s.fetch_left.eq(s.fetch_left - n)]
        m.d.sync += s.rd_out.eq(s.rd_out + fetch - absorb)
        with m.If(absorb):
            m.d.sync += [s.sh.eq(queue.r_data[:self.word_width]), s.sh_valid.eq(1),
                         s.sh_hi.eq(slot_next + queue.r_data[self.word_width:])]
        with m.Elif(step & word_end):
            m.d.sync += s.sh_valid.eq(0)
        with m.Elif(step):      # the beat is finished, the word goes on into the next beat
            m.d.sync += [s.sh.eq(sh_next), s.sh_hi.eq(s.sh_hi - s.wa_end)]

        # A finished beat into the W register; WLAST where the AW side ends a burst (4 KiB,
        # ``max_burst`` beats, the command's last beat).
        burst_end = s.wa_last | (s.wa_4k == self.beats_4k - 1) | (s.wb_count == self.max_burst - 1)
        with m.If(step):
            m.d.sync += [s.wa_data.eq(data_next), s.wa_strb.eq(strb_next),
                         s.wa_fresh.eq(beat_end), s.wa_slot.eq(slot_next),
                         s.write_inc.eq((_min(s.sh_hi, s.wa_end) - s.wa_slot) << s.size)]
            with m.If(beat_end):
                last_next = s.wa_beats == 2
                m.d.sync += [s.w_valid.eq(1), s.w_data.eq(data_next), s.w_strb.eq(strb_next),
                             s.w_last.eq(burst_end), s.st_done.eq(s.wa_last),
                             s.wa_end.eq(Mux(last_next, s.last_end_r, s.per_beat)),
                             s.wa_last.eq(last_next), s.wa_beats.eq(s.wa_beats - 1),
                             s.wa_4k.eq(s.wa_4k + 1),
                             s.wb_count.eq(Mux(burst_end, 0, s.wb_count + 1))]


def _min(a, b):
    return Mux(a < b, a, b)


def _pick(options, index):
    """``options[index]``, ``index`` taken modulo the next power of two of ``len(options)``
    (past the options: the last one); one option needs no multiplexer."""
    if len(options) == 1:
        return options[0]
    bits = ceil_log2(len(options))
    return Array(options + options[-1:] * (2 ** bits - len(options)))[index[:bits]]


def reference(config, word_width, depth, cmd, memory, buffer,
              window=(0, 2 ** ADDR_WIDTH - 1)):
    """A naive model of one command of a :class:`DmaEngine` built with ``config``,
    ``word_width`` and ``depth``. ``cmd``: a dict of the :func:`command_layout` fields (enum
    members or ints);
    ``memory``: an object with ``read(addr, n) -> bytes`` and ``write(addr, data)``;
    ``buffer``: a list of ``depth`` words (ints), changed in place. Returns the
    :class:`DmaError` of a command that meets no bus error."""
    direction = Direction(cmd["direction"])
    kind = ElementKind(cmd["kind"])
    addr, buf_addr, length, lanes = cmd["addr"], cmd["buf_addr"], cmd["length"], cmd["lanes"]
    _, bits, nb, is_signed, max_lanes = element_kinds(config, word_width)[kind.value]
    lanes = lanes or max_lanes
    if length == 0:
        return DmaError.NONE
    if addr % nb:
        return DmaError.ALIGN
    if addr < window[0] or addr + length * nb - 1 > window[1]:
        return DmaError.WINDOW
    if max_lanes == 0 or lanes > max_lanes or length > (depth - buf_addr) * lanes:
        return DmaError.BUFFER
    mask = (1 << bits) - 1
    if direction == Direction.LOAD:
        raw = memory.read(addr, length * nb)
        elems = [int.from_bytes(raw[i * nb:(i + 1) * nb], "little") & mask
                 for i in range(length)]
        for w in range(0, length, lanes):
            buffer[buf_addr + w // lanes] = sum(e << (bits * j)
                                                for j, e in enumerate(elems[w:w + lanes]))
    else:
        out = bytearray()
        for i in range(length):
            e = buffer[buf_addr + i // lanes] >> (bits * (i % lanes)) & mask
            if is_signed and e >> (bits - 1):
                e -= 1 << bits
            out += (e % (1 << (8 * nb))).to_bytes(nb, "little")
        memory.write(addr, bytes(out))
    return DmaError.NONE
