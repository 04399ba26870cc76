"""On-chip memory: an AXI4 slave (for the accelerator's DMA master) plus a simple word port (for
the UART bridge), over one ``amaranth.lib.memory.Memory`` of 64-bit words.

AXI4 slave (``axi``)
    :func:`bpsa.gateware.bus.dma.axi4_signature` flipped: 32-bit addresses, 64-bit data.
    Byte addresses ``0 .. size - 1``. FIXED and INCR bursts of up to 256 beats, any ``AxSIZE``
    up to 8 bytes (narrow beats: the master places its bytes on their lanes and sets ``wstrb``,
    as AXI requires; the address advances by ``2**AxSIZE`` per INCR beat). ``wstrb`` selects the
    bytes written. A beat outside the memory (address ``>= size``) is answered DECERR: reads
    return 0, writes are dropped, and a write burst's single B response is DECERR if any of its
    beats was. WRAP bursts are answered SLVERR and neither read nor write. One write burst and
    one read burst are handled at a time, independently; the ID is echoed. Crossing 4 KiB is the
    master's business (the memory does not care). Reads deliver one beat per cycle when
    ``rready`` stays high; writes take one beat per cycle.

Word port (``port``, :func:`mem_port_signature`, flipped)
    Word addresses (``size // 8`` words), ``valid`` / ``ready`` request handshake, ``we`` with
    ``wdata`` / ``wstrb`` for a write, otherwise a read whose ``rdata`` is valid in the cycle
    ``rvalid`` is high (the cycle after the request was taken). The port has priority over the
    AXI side: its write takes the memory's write port and holds the AXI W channel for that
    cycle; its read is taken as soon as no AXI read beat is waiting on the read port's output.

The memory has one read port and one write port (what iCE40 and ECP5 block RAMs offer); a read
of a word written in the same cycle returns the old value.
"""

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from bpsa.gateware.common.checked import CheckedComponent
from bpsa.gateware.bus.axi_lite import AxiResp
from bpsa.gateware.bus.dma import ADDR_WIDTH, DATA_WIDTH, AxiBurst, axi4_signature

__all__ = ["AxiSram", "SIZE_RANGE", "check_size", "mem_port_signature", "word_addr_width"]

#: Allowed memory sizes in bytes (powers of two).
SIZE_RANGE = (64, 1 << 24)
_BEAT_BYTES = DATA_WIDTH // 8


def mem_port_signature(addr_width, data_width=DATA_WIDTH):
    """A simple memory port as seen by its master (flip it for the memory): ``addr`` (word
    address), ``we``, ``wdata``, ``wstrb``, ``valid`` / ``ready`` (request handshake), and
    ``rdata`` / ``rvalid`` (read data, the cycle after the request)."""
    if not isinstance(addr_width, int) or not 1 <= addr_width <= 32:
        raise ValueError(f"addr_width must be an integer in [1, 32], not {addr_width!r}")
    return wiring.Signature({
        "addr": Out(addr_width), "we": Out(1), "wdata": Out(data_width),
        "wstrb": Out(data_width // 8), "valid": Out(1), "ready": In(1),
        "rdata": In(data_width), "rvalid": In(1),
    })


def word_addr_width(size):
    """Word-address bits of a memory of ``size`` bytes (64-bit words)."""
    return exact_log2(check_size(size) // _BEAT_BYTES)


def check_size(size):
    """``size`` if it is a power of two in :data:`SIZE_RANGE`, else ``ValueError``."""
    lo, hi = SIZE_RANGE
    if isinstance(size, bool) or not isinstance(size, int) or not lo <= size <= hi \
            or size & (size - 1):
        raise ValueError(f"size must be a power of two in [{lo}, {hi}] bytes, not {size!r}")
    return size


class AxiSram(CheckedComponent):
    """On-chip memory of ``size`` bytes with an AXI4 slave and a word port (see the module
    docstring).

    Members
    -------
    axi : In(axi4_signature(id_width=id_width))
        Verilog ports ``axi__awaddr`` ...
    port : In(mem_port_signature(log2(size // 8)))
        Verilog ports ``port__addr`` ...
    """

    @classmethod
    def check_parameters(cls, size, *, id_width=1, init=()):
        check_size(size)

    def __init__(self, size, *, id_width=1, init=()):
        self.size = size
        self.depth = size // _BEAT_BYTES
        self.word_addr_width = word_addr_width(size)
        self.init = list(init)
        super().__init__({
            "axi": In(axi4_signature(id_width=id_width)),
            "port": In(mem_port_signature(self.word_addr_width)),
        })

    def elaborate(self, platform):
        m = Module()
        axi, port = self.axi, self.port
        m.submodules.mem = mem = Memory(shape=DATA_WIDTH, depth=self.depth, init=self.init)
        wp = mem.write_port(granularity=8)
        rp = mem.read_port()
        high = exact_log2(self.size)       # byte-address bits inside the memory

        def in_range(addr):
            return addr[high:] == 0

        def next_addr(addr, size, burst):
            return Mux(burst == AxiBurst.FIXED, addr, addr + (1 << size))

        # --- word port: priority ------------------------------------------------------------
        port_write = port.valid & port.we
        port_read = port.valid & ~port.we
        r_hold = Signal()            # an AXI read beat sits on the read port's output
        port_rvalid = Signal()
        m.d.sync += port_rvalid.eq(port_read & port.ready)
        m.d.comb += [port.rvalid.eq(port_rvalid), port.rdata.eq(rp.data)]

        # --- AXI write ----------------------------------------------------------------------
        w_active = Signal()
        w_addr = Signal(ADDR_WIDTH)
        w_size = Signal(3)
        w_burst = Signal(AxiBurst)
        w_id = Signal.like(axi.awid)
        w_err = Signal(AxiResp)
        b_valid = Signal()
        m.d.comb += [
            axi.awready.eq(~w_active & ~b_valid),
            axi.wready.eq(w_active & ~port_write),
            axi.bvalid.eq(b_valid), axi.bid.eq(w_id), axi.bresp.eq(w_err),
        ]
        with m.If(axi.awvalid & axi.awready):
            m.d.sync += [w_active.eq(1), w_addr.eq(axi.awaddr), w_size.eq(axi.awsize),
                         w_burst.eq(axi.awburst), w_id.eq(axi.awid),
                         w_err.eq(Mux(axi.awburst == AxiBurst.WRAP, AxiResp.SLVERR,
                                      AxiResp.OKAY))]
        w_beat = axi.wvalid & axi.wready
        w_ok = in_range(w_addr) & (w_burst != AxiBurst.WRAP)
        with m.If(w_beat):
            m.d.sync += w_addr.eq(next_addr(w_addr, w_size, w_burst))
            with m.If(~in_range(w_addr) & (w_err == AxiResp.OKAY)):
                m.d.sync += w_err.eq(AxiResp.DECERR)
            with m.If(axi.wlast):
                m.d.sync += [w_active.eq(0), b_valid.eq(1)]
        with m.If(b_valid & axi.bready):
            m.d.sync += b_valid.eq(0)
        with m.If(port_write):
            m.d.comb += [wp.addr.eq(port.addr), wp.data.eq(port.wdata), wp.en.eq(port.wstrb)]
        with m.Else():
            m.d.comb += [wp.addr.eq(w_addr[3:high]), wp.data.eq(axi.wdata),
                         wp.en.eq(Mux(w_beat & w_ok, axi.wstrb, 0))]

        # --- AXI read -----------------------------------------------------------------------
        ar_left = Signal(9)          # beats still to issue
        ar_addr = Signal(ADDR_WIDTH)
        ar_size = Signal(3)
        ar_burst = Signal(AxiBurst)
        ar_id = Signal.like(axi.arid)
        r_valid = Signal()
        r_last = Signal()
        r_resp = Signal(AxiResp)
        m.d.comb += [
            axi.arready.eq(ar_left == 0),
            axi.rvalid.eq(r_valid), axi.rlast.eq(r_last), axi.rresp.eq(r_resp),
            axi.rid.eq(ar_id),
            axi.rdata.eq(Mux(r_resp == AxiResp.OKAY, rp.data, 0)),
            r_hold.eq(r_valid & ~axi.rready),
            port.ready.eq(Mux(port.we, 1, ~r_hold)),
        ]
        with m.If(axi.arvalid & axi.arready):
            m.d.sync += [ar_left.eq(axi.arlen + 1), ar_addr.eq(axi.araddr),
                         ar_size.eq(axi.arsize), ar_burst.eq(axi.arburst), ar_id.eq(axi.arid)]
        issue = Signal()
        m.d.comb += issue.eq((ar_left != 0) & (~r_valid | axi.rready) & ~port_read)
        with m.If(issue):
            m.d.sync += [
                r_valid.eq(1), r_last.eq(ar_left == 1),
                r_resp.eq(Mux(ar_burst == AxiBurst.WRAP, AxiResp.SLVERR,
                              Mux(in_range(ar_addr), AxiResp.OKAY, AxiResp.DECERR))),
                ar_left.eq(ar_left - 1),
                ar_addr.eq(next_addr(ar_addr, ar_size, ar_burst)),
            ]
        with m.Elif(r_valid & axi.rready):
            m.d.sync += r_valid.eq(0)
        with m.If(port_read & port.ready):
            m.d.comb += [rp.addr.eq(port.addr), rp.en.eq(1)]
        with m.Else():
            m.d.comb += [rp.addr.eq(ar_addr[3:high]), rp.en.eq(issue)]
        return m
