"""A byte protocol over the UART to an AXI4-Lite master (32-bit registers) and to a word port
of the on-chip memory (bulk tensor loads and result reads).

The protocol (command bytes, arguments, status bytes) is :mod:`bpsa.spec.bridge`.
"""

from types import SimpleNamespace

from amaranth.hdl import Cat, Const, Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from bpsa.gateware.common.checked import CheckedComponent
from bpsa.gateware.bus.axi_lite import ADDR_WIDTH as AXIL_ADDR_WIDTH
from bpsa.gateware.bus.axi_lite import AxiResp, axi_lite_signature
from bpsa.gateware.bus.axi_sram import mem_port_signature
from bpsa.gateware.common.enums import hw_enum
from bpsa.gateware.bus.uart import UartRx, UartTx, check_divisor
from bpsa.spec import bridge

__all__ = ["Command", "Status", "UartBridge", "UartBridgeCore"]


#: Command bytes and status codes (:mod:`bpsa.spec.bridge`) as hardware enums.
Command = hw_enum(bridge.Command, 8)
Status = hw_enum(bridge.Status, 4)


class UartBridgeCore(CheckedComponent):
    """The protocol engine between byte streams and the two buses (no UART).

    Parameters
    ----------
    mem_addr_width : int
        Word-address bits of the memory port (the memory holds ``2**mem_addr_width`` 64-bit
        words).
    timeout : int
        Cycles without a byte after which a half-received command is dropped (TIMEOUT).
    axil_addr_width : int
        Address bits of the register bus (default 12, :data:`bpsa.gateware.bus.axi_lite.ADDR_WIDTH`).

    Members
    -------
    rx : In(stream.Signature(8))
        Bytes from the host.
    tx : Out(stream.Signature(8))
        Bytes to the host.
    axil : Out(axi_lite_signature(axil_addr_width))
        The register bus master (one transaction at a time).
    mem : Out(mem_port_signature(mem_addr_width))
        The memory's word port.
    """

    @classmethod
    def check_parameters(cls, *, mem_addr_width, timeout=1 << 20,
                         axil_addr_width=AXIL_ADDR_WIDTH):
        if isinstance(mem_addr_width, bool) or not isinstance(mem_addr_width, int) \
                or not 1 <= mem_addr_width <= 29:
            raise ValueError(f"mem_addr_width must be an integer in [1, 29], "
                             f"not {mem_addr_width!r}")
        if isinstance(timeout, bool) or not isinstance(timeout, int) \
                or not 16 <= timeout <= 1 << 32:
            raise ValueError(f"timeout must be an integer in [16, {1 << 32}] cycles, "
                             f"not {timeout!r}")
        if isinstance(axil_addr_width, bool) or not isinstance(axil_addr_width, int) \
                or not 3 <= axil_addr_width <= 32:
            raise ValueError(f"axil_addr_width must be an integer in [3, 32], "
                             f"not {axil_addr_width!r}")

    def __init__(self, *, mem_addr_width, timeout=1 << 20, axil_addr_width=AXIL_ADDR_WIDTH):
        self.mem_addr_width = mem_addr_width
        self.timeout = timeout
        self.axil_addr_width = axil_addr_width
        super().__init__({
            "rx": In(stream.Signature(8)),
            "tx": Out(stream.Signature(8)),
            "axil": Out(axi_lite_signature(axil_addr_width)),
            "mem": Out(mem_port_signature(mem_addr_width)),
        })

    def elaborate(self, platform):
        m = Module()
        rx, bus, mem = self.rx, self.axil, self.mem
        r = self._registers()

        m.d.comb += [
            bus.awaddr.eq(r.addr), bus.araddr.eq(r.addr), bus.wdata.eq(r.wdata),
            bus.wstrb.eq(0xF),
            mem.addr.eq(r.word), mem.wdata.eq(r.wbuf), mem.wstrb.eq(0xFF),
        ]
        rx_take = rx.valid & rx.ready
        timed_out = r.timer == self.timeout

        with m.FSM():
            self._command(m, r, rx_take, timed_out)
            self._register_access(m, r)
            self._memory_write(m, r, rx_take, timed_out)
            self._memory_read(m, r)
            self._answer(m, r)
        return m

    def _registers(self):
        """The engine's registers (and the argument fields, slices of ``args``), as a
        namespace the states share."""
        r = SimpleNamespace()
        r.cmd = Signal(8)
        r.args = args = Signal(64)          # argument bytes, first at bit 0
        r.idx = Signal(range(9))            # argument / data byte index
        r.nargs = Signal(range(9))
        r.addr = args[0:32]
        r.wdata = args[32:64]
        r.count = args[32:48]
        r.timer = Signal(range(self.timeout + 1))
        r.status = Signal(4)
        r.post = Signal(2)                  # after the status byte: 0 idle, 1 data, 2 mem read
        r.shreg = Signal(64)                # data bytes to send, first at bit 0
        r.left = Signal(range(9))           # of them still to send
        r.word = Signal(self.mem_addr_width + 17)
        r.words = Signal(17)                # words still to move
        r.bad = Signal()
        r.wbuf = Signal(64)
        return r

    def _command(self, m, r, rx_take, timed_out):
        """States IDLE (the command byte), ARGS (its argument bytes) and DISPATCH (the
        arguments checked, the command started)."""
        rx = self.rx
        addr, count = r.addr, r.count
        depth = 1 << self.mem_addr_width
        reg_bad = (addr[0:2] != 0) | (addr[self.axil_addr_width:] != 0) \
            if self.axil_addr_width < 32 else addr[0:2] != 0
        mem_bad = (addr[0:3] != 0) | (addr[3:] + count > depth)

        with m.State("IDLE"):
            m.d.comb += rx.ready.eq(1)
            m.d.sync += [r.idx.eq(0), r.timer.eq(0), r.post.eq(0), r.args.eq(0)]
            with m.If(rx.valid):
                m.d.sync += r.cmd.eq(rx.payload)
                with m.Switch(rx.payload):
                    with m.Case(Command.SYNC):
                        m.d.sync += r.status.eq(Status.OK)
                        m.next = "STATUS"
                    for c in (Command.READ32, Command.WRITE32, Command.MEM_READ,
                              Command.MEM_WRITE):
                        with m.Case(c):
                            m.d.sync += r.nargs.eq(bridge.ARG_BYTES[bridge.Command(c.value)])
                            m.next = "ARGS"
                    with m.Default():
                        m.d.sync += r.status.eq(Status.BAD_CMD)
                        m.next = "STATUS"

        with m.State("ARGS"):
            m.d.comb += rx.ready.eq(1)
            m.d.sync += r.timer.eq(r.timer + 1)
            with m.If(rx_take):
                m.d.sync += [r.timer.eq(0), r.idx.eq(r.idx + 1)]
                with m.Switch(r.idx):
                    for i in range(8):
                        with m.Case(i):
                            m.d.sync += r.args[8 * i:8 * i + 8].eq(rx.payload)
                with m.If(r.idx == r.nargs - 1):
                    m.next = "DISPATCH"
            with m.Elif(timed_out):
                m.d.sync += r.status.eq(Status.TIMEOUT)
                m.next = "STATUS"

        with m.State("DISPATCH"):
            m.d.sync += [r.idx.eq(0), r.timer.eq(0), r.word.eq(addr[3:]), r.words.eq(count),
                         r.bad.eq(mem_bad)]
            with m.Switch(r.cmd):
                with m.Case(Command.READ32):
                    with m.If(reg_bad):
                        m.d.sync += r.status.eq(Status.BAD_ARG)
                        m.next = "STATUS"
                    with m.Else():
                        m.next = "AR"
                with m.Case(Command.WRITE32):
                    with m.If(reg_bad):
                        m.d.sync += r.status.eq(Status.BAD_ARG)
                        m.next = "STATUS"
                    with m.Else():
                        m.next = "AW_W"
                with m.Case(Command.MEM_READ):
                    with m.If(mem_bad):
                        m.d.sync += r.status.eq(Status.BAD_ARG)
                    with m.Else():
                        m.d.sync += [r.status.eq(Status.OK), r.post.eq(2)]
                    m.next = "STATUS"
                with m.Default():         # MEM_WRITE
                    with m.If(count == 0):
                        m.d.sync += r.status.eq(_ok_or_bad(mem_bad))
                        m.next = "STATUS"
                    with m.Else():
                        m.next = "MW_DATA"

    def _register_access(self, m, r):
        """States AR, R (register read) and AW_W, B (register write)."""
        bus = self.axil
        # --- register read -------------------------------------------------------------------
        with m.State("AR"):
            m.d.comb += bus.arvalid.eq(1)
            with m.If(bus.arready):
                m.next = "R"
        with m.State("R"):
            m.d.comb += bus.rready.eq(1)
            with m.If(bus.rvalid):
                m.d.sync += [r.shreg.eq(bus.rdata), r.left.eq(4),
                             r.status.eq(_resp_status(bus.rresp)),
                             r.post.eq(bus.rresp == AxiResp.OKAY)]
                m.next = "STATUS"

        # --- register write ------------------------------------------------------------------
        aw_done = Signal()
        w_done = Signal()
        with m.State("AW_W"):
            m.d.comb += [bus.awvalid.eq(~aw_done), bus.wvalid.eq(~w_done)]
            aw_now = aw_done | bus.awready
            w_now = w_done | bus.wready
            m.d.sync += [aw_done.eq(aw_now), w_done.eq(w_now)]
            with m.If(aw_now & w_now):
                m.d.sync += [aw_done.eq(0), w_done.eq(0)]
                m.next = "B"
        with m.State("B"):
            m.d.comb += bus.bready.eq(1)
            with m.If(bus.bvalid):
                m.d.sync += r.status.eq(_resp_status(bus.bresp))
                m.next = "STATUS"

    def _memory_write(self, m, r, rx_take, timed_out):
        """States MW_DATA, MW_WRITE and MW_NEXT: collect 8 bytes, write the word."""
        rx, mem = self.rx, self.mem
        with m.State("MW_DATA"):
            m.d.comb += rx.ready.eq(1)
            m.d.sync += r.timer.eq(r.timer + 1)
            with m.If(rx_take):
                m.d.sync += [r.timer.eq(0), r.idx.eq(r.idx + 1),
                             r.wbuf.eq(Cat(r.wbuf[8:], rx.payload))]
                with m.If(r.idx == 7):
                    m.d.sync += r.idx.eq(0)
                    with m.If(r.bad):
                        m.next = "MW_NEXT"
                    with m.Else():
                        m.next = "MW_WRITE"
            with m.Elif(timed_out):
                m.d.sync += r.status.eq(Status.TIMEOUT)
                m.next = "STATUS"
        with m.State("MW_WRITE"):
            m.d.comb += [mem.valid.eq(1), mem.we.eq(1)]
            with m.If(mem.ready):
                m.next = "MW_NEXT"
        with m.State("MW_NEXT"):
            m.d.sync += [r.word.eq(r.word + 1), r.words.eq(r.words - 1)]
            with m.If(r.words == 1):
                m.d.sync += r.status.eq(_ok_or_bad(r.bad))
                m.next = "STATUS"
            with m.Else():
                m.next = "MW_DATA"

    def _memory_read(self, m, r):
        """States MR_REQ and MR_WAIT: read one word, then send its 8 bytes (DATA)."""
        mem = self.mem
        with m.State("MR_REQ"):
            with m.If(r.words == 0):
                m.next = "IDLE"
            with m.Else():
                m.d.comb += mem.valid.eq(1)
                with m.If(mem.ready):
                    m.next = "MR_WAIT"
        with m.State("MR_WAIT"):
            with m.If(mem.rvalid):
                m.d.sync += [r.shreg.eq(mem.rdata), r.left.eq(8), r.word.eq(r.word + 1),
                             r.words.eq(r.words - 1)]
                m.next = "DATA"

    def _answer(self, m, r):
        """States STATUS (the status byte) and DATA (the data bytes after it)."""
        tx = self.tx
        with m.State("STATUS"):
            m.d.comb += [tx.valid.eq(1), tx.payload.eq(Cat(r.status, Const(0xA, 4)))]
            with m.If(tx.ready):
                with m.Switch(r.post):
                    with m.Case(1):
                        m.next = "DATA"
                    with m.Case(2):
                        m.next = "MR_REQ"
                    with m.Default():
                        m.next = "IDLE"
        with m.State("DATA"):
            m.d.comb += [tx.valid.eq(1), tx.payload.eq(r.shreg[0:8])]
            with m.If(tx.ready):
                m.d.sync += [r.shreg.eq(r.shreg >> 8), r.left.eq(r.left - 1)]
                with m.If(r.left == 1):
                    with m.If(r.post == 2):
                        m.next = "MR_REQ"
                    with m.Else():
                        m.next = "IDLE"


def _resp_status(resp):
    """The status code of an AXI response (OKAY and EXOKAY are OK)."""
    return Cat(resp == AxiResp.SLVERR, resp == AxiResp.DECERR, Const(0, 2))


def _ok_or_bad(bad):
    """BAD_ARG if ``bad`` else OK, as a 4-bit value."""
    return Cat(Const(0, 2), bad, Const(0, 1))


class UartBridge(CheckedComponent):
    """The UART (:class:`bpsa.gateware.bus.uart.UartRx`, :class:`bpsa.gateware.bus.uart.UartTx`) and the
    protocol engine (:class:`UartBridgeCore`; see the module docstring for the protocol).

    Members
    -------
    rx : In(1)
        Serial line from the host (idle high).
    tx : Out(1)
        Serial line to the host (idle high).
    axil : Out(axi_lite_signature(axil_addr_width))
    mem : Out(mem_port_signature(mem_addr_width))
    frame_errors : Out(16)
        Bytes dropped for a low stop bit or overrun (saturating count).
    """

    @classmethod
    def check_parameters(cls, *, divisor, mem_addr_width, timeout=None,
                         axil_addr_width=AXIL_ADDR_WIDTH):
        check_divisor(divisor)
        UartBridgeCore.check_parameters(
            mem_addr_width=mem_addr_width, axil_addr_width=axil_addr_width,
            timeout=1000 * 10 * divisor if timeout is None else timeout)

    def __init__(self, *, divisor, mem_addr_width, timeout=None,
                 axil_addr_width=AXIL_ADDR_WIDTH):
        self.divisor = divisor
        self.timeout = 1000 * 10 * divisor if timeout is None else timeout
        self.core = UartBridgeCore(mem_addr_width=mem_addr_width, timeout=self.timeout,
                                   axil_addr_width=axil_addr_width)
        super().__init__({
            "rx": In(1, init=1),
            "tx": Out(1, init=1),
            "axil": Out(axi_lite_signature(axil_addr_width)),
            "mem": Out(mem_port_signature(mem_addr_width)),
            "frame_errors": Out(16),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.core = core = self.core
        m.submodules.urx = urx = UartRx(self.divisor)
        m.submodules.utx = utx = UartTx(self.divisor)
        wiring.connect(m, urx.o, core.rx)
        wiring.connect(m, core.tx, utx.i)
        wiring.connect(m, wiring.flipped(self.axil), core.axil)
        wiring.connect(m, wiring.flipped(self.mem), core.mem)
        m.d.comb += [urx.rx.eq(self.rx), self.tx.eq(utx.tx)]
        with m.If((urx.frame_error | urx.overrun) & (self.frame_errors != 0xFFFF)):
            m.d.sync += self.frame_errors.eq(self.frame_errors + 1)
        return m
