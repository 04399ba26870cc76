"""The host register interface: an AXI4-Lite slave with control, status, the DMA window, the
layer's program and the performance counters, decoding the register map of
:mod:`bpsa.spec.regmap` (a layer's fields reach the hardware as its program, not here).

Control and status
    Writing CONTROL with START = 1 (byte lane 0 enabled) while ``busy`` is low raises ``start``
    for one cycle (in the cycle after the write) and clears DONE and ERROR. While ``busy`` is
    high START is ignored, so the host may write the next program while a layer runs. CLEAR =
    1 clears DONE and ERROR and raises ``clear`` for one cycle (the counter owners reset their counters on it).
    DONE is set by a ``done`` pulse and stays set; ERROR holds the ``error`` input sampled at
    that pulse. BUSY is the ``busy`` input. WINDOW_LO / WINDOW_HI drive the ``window_lo`` /
    ``window_hi`` outputs directly, as PROG_ADDR / PROG_WORDS drive ``prog_addr`` /
    ``prog_words`` (the fetch unit takes them at ``start``).

Counters
    The counters (:data:`COUNTERS`, 64 bits each) live elsewhere (a
    :class:`~bpsa.gateware.control.counter_bank.CounterBank`): the register file asks for one
    through its ``counter`` port (:func:`counter_port_signature`) and answers the read when
    the value comes. They are read as two halves: reading ``<name>_LO`` latches the high half
    of the same sample, and ``<name>_HI`` read right after it returns the latched half, so the
    pair is one consistent 64-bit sample. A ``_HI`` read without a preceding ``_LO`` read of
    the same counter asks for a new sample.

Bus behaviour
    Responses are OKAY except for an address that names no register: reads return 0 with
    SLVERR, writes are dropped with SLVERR. Writes to read-only registers are dropped with
    OKAY. Address bits [1:0] are ignored (word access). ``wstrb`` selects the byte lanes
    written. AWPROT/ARPROT are not ports (the slave would ignore them). One write and one read
    are handled at a time; the two run independently. A read's address is registered before
    it is decoded: a register's RVALID rises two cycles after the AR handshake.
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import enum, wiring
from amaranth.lib.wiring import In, Out

from bpsa.config import require_config
from bpsa.gateware.common.enums import hw_enum
from bpsa.spec import regmap
from bpsa.spec.regmap import (
    ADDR_WIDTH,
    CONTROL_BITS,
    COUNTERS,
    REGISTERS,
    config_words,
    field_bits,
)

__all__ = ["ADDR_WIDTH", "AxiResp", "Phase", "RegisterFile", "axi_lite_signature",
           "counter_port_signature"]

#: The PHASE descriptor field (:class:`bpsa.spec.regmap.Phase`) as a hardware enum.
Phase = hw_enum(regmap.Phase, regmap.PHASE_BITS)


class AxiResp(enum.Enum, shape=2):
    """AXI response codes (BRESP / RRESP)."""
    OKAY = 0
    EXOKAY = 1
    SLVERR = 2
    DECERR = 3


def axi_lite_signature(addr_width, data_width=32):
    """An AXI4-Lite bus as seen by the master (flip it for a slave).

    Members use the AXI names in lower case (``awaddr``, ``awvalid``, ``awready``, ``wdata``,
    ``wstrb``, ``wvalid``, ``wready``, ``bresp``, ``bvalid``, ``bready``, ``araddr``,
    ``arvalid``, ``arready``, ``rdata``, ``rresp``, ``rvalid``, ``rready``), so an interface
    member ``axil`` becomes the Verilog ports ``axil__awaddr`` and so on, which cocotbext-axi
    finds with ``AxiLiteBus.from_prefix(dut, "axil", bus_separator="__")``. No PROT signals.
    """
    if not isinstance(addr_width, int) or not 1 <= addr_width <= 64:
        raise TypeError(f"addr_width must be an integer in [1, 64], not {addr_width!r}")
    if data_width not in (32, 64):
        raise TypeError(f"data_width must be 32 or 64, not {data_width!r}")
    return wiring.Signature({
        "awaddr": Out(addr_width), "awvalid": Out(1), "awready": In(1),
        "wdata": Out(data_width), "wstrb": Out(data_width // 8), "wvalid": Out(1),
        "wready": In(1),
        "bresp": In(AxiResp), "bvalid": In(1), "bready": Out(1),
        "araddr": Out(addr_width), "arvalid": Out(1), "arready": In(1),
        "rdata": In(data_width), "rresp": In(AxiResp), "rvalid": In(1), "rready": Out(1),
    })


def counter_port_signature(count=len(COUNTERS)):
    """The counter read port as the reader sees it: ``index`` (``count`` counters) and a
    one-cycle ``req`` out; ``valid`` (a one-cycle pulse, any number of cycles later) and the
    64-bit ``value`` in. One read at a time."""
    return wiring.Signature({"index": Out(range(count)), "req": Out(1), "valid": In(1),
                             "value": In(64)})


# --- the hardware ----------------------------------------------------------------------------

class RegisterFile(wiring.Component):
    """AXI4-Lite slave with the register map of this module (see the module docstring for
    every register and for the bus behaviour).

    Members
    -------
    axil : In(axi_lite_signature(ADDR_WIDTH, 32))
        The host bus (Verilog ports ``axil__awaddr`` ...). ``bvalid`` and ``rvalid`` are
        registers and never depend on ``bready`` / ``rready``.
    start : Out(1)
        One-cycle pulse in the cycle after an accepted START.
    clear : Out(1)
        One-cycle pulse in the cycle after a CLEAR write.
    busy : In(1)
        The controller runs a layer. It must rise no later than the cycle after ``start``.
    done : In(1)
        One-cycle pulse: the layer finished (successfully or not).
    error : In(8)
        Error code, sampled with ``done`` (0 = no error).
    counter : Out(counter_port_signature())
        Reads a performance counter (:data:`COUNTERS` order).
    window_lo, window_hi : Out(32)
        The WINDOW_LO / WINDOW_HI registers (for the DMA engine's address window).
    prog_addr, prog_words : Out(32)
        The PROG_ADDR / PROG_WORDS registers (the layer's program, taken at START).
    """

    def __init__(self, config):
        self.config = require_config(config)
        super().__init__({
            "axil": In(axi_lite_signature(ADDR_WIDTH, 32)),
            "start": Out(1),
            "clear": Out(1),
            "busy": In(1),
            "done": In(1),
            "error": In(8),
            "counter": Out(counter_port_signature()),
            **{r.field: Out(field_bits(config, r.width)) for r in REGISTERS
               if r.kind == "setting"},
        })

    def elaborate(self, platform):
        cfg = self.config
        bus = self.axil
        m = Module()
        consts = config_words(cfg)

        # The settings: read-write registers that drive their outputs.
        regs = {}
        for r in REGISTERS:
            if r.kind == "setting":
                regs[r.field] = Signal(field_bits(cfg, r.width), init=r.reset,
                                       name=f"reg_{r.field}")
        m.d.comb += [getattr(self, f).eq(reg) for f, reg in regs.items()]

        done_flag = Signal()
        error_code = Signal(8)

        m.d.sync += [self.start.eq(0), self.clear.eq(0)]
        with m.If(self.done):
            m.d.sync += [done_flag.eq(1), error_code.eq(self.error)]

        # --- write channel: AW and W are taken independently, then the write is done -------
        aw_held = Signal()
        aw_word = Signal(ADDR_WIDTH - 2)
        w_held = Signal()
        w_data = Signal(32)
        w_strb = Signal(4)
        b_valid = Signal()
        b_resp = Signal(AxiResp)
        m.d.comb += [
            bus.awready.eq(~aw_held), bus.wready.eq(~w_held),
            bus.bvalid.eq(b_valid), bus.bresp.eq(b_resp),
        ]
        with m.If(bus.awvalid & ~aw_held):
            m.d.sync += [aw_held.eq(1), aw_word.eq(bus.awaddr[2:])]
        with m.If(bus.wvalid & ~w_held):
            m.d.sync += [w_held.eq(1), w_data.eq(bus.wdata), w_strb.eq(bus.wstrb)]
        with m.If(b_valid & bus.bready):
            m.d.sync += b_valid.eq(0)

        with m.If(aw_held & w_held & ~b_valid):
            m.d.sync += [aw_held.eq(0), w_held.eq(0), b_valid.eq(1), b_resp.eq(AxiResp.OKAY)]
            with m.Switch(aw_word):
                for r in REGISTERS:
                    with m.Case(r.offset >> 2):
                        if r.kind == "setting":
                            reg = regs[r.field]
                            for lane in range(4):
                                lo, hi = 8 * lane, min(8 * lane + 8, len(reg))
                                if lo >= hi:
                                    continue
                                with m.If(w_strb[lane]):
                                    m.d.sync += reg[lo:hi].eq(w_data[lo:hi])
                        elif r.kind == "control":
                            with m.If(w_strb[0]):
                                with m.If(w_data[CONTROL_BITS["START"]] & ~self.busy):
                                    m.d.sync += [self.start.eq(1), done_flag.eq(0),
                                                 error_code.eq(0)]
                                with m.If(w_data[CONTROL_BITS["CLEAR"]]):
                                    m.d.sync += [self.clear.eq(1), done_flag.eq(0),
                                                 error_code.eq(0)]
                with m.Default():
                    m.d.sync += b_resp.eq(AxiResp.SLVERR)

        self._read_channel(m, consts, regs, Cat(self.busy, done_flag, Const(0, 6), error_code))
        return m

    def _read_channel(self, m, consts, regs, status):
        """Reads: AR's address is registered, then a register answers the next cycle; a counter
        half asks the counter port and answers when its value comes (a ``_HI`` right after its
        ``_LO`` answers at once from the latched half)."""
        bus = self.axil
        port = self.counter
        r_valid = Signal()
        r_data = Signal(32)
        r_resp = Signal(AxiResp)
        ar_held = Signal()                  # an address taken, decoded this cycle
        ar_word = Signal(ADDR_WIDTH - 2)
        waiting = Signal()                  # a counter half asked for, not yet answered
        want_hi = Signal()
        snap_hi = Signal(32)
        snap_idx = Signal(range(len(COUNTERS) + 1), init=len(COUNTERS))
        m.d.comb += [
            bus.arready.eq(~ar_held & ~r_valid & ~waiting),
            bus.rvalid.eq(r_valid), bus.rdata.eq(r_data), bus.rresp.eq(r_resp),
        ]
        with m.If(r_valid & bus.rready):
            m.d.sync += r_valid.eq(0)
        # AR: the address is taken and a counter half decoded (which counter, which half,
        # whether its high half is the latched one); the next cycle answers or asks
        counter_words = [r.offset >> 2 for r in REGISTERS if r.kind == "counter_lo"]
        base = counter_words[0]
        assert counter_words == list(range(base, base + 2 * len(COUNTERS), 2))
        in_word = bus.araddr[2:]
        in_offset = Signal(ADDR_WIDTH - 2)
        m.d.comb += in_offset.eq(in_word - base)
        c_hit, c_hi, c_latched = Signal(), Signal(), Signal()
        c_index = Signal(range(len(COUNTERS)))
        with m.If(bus.arvalid & bus.arready):
            m.d.sync += [ar_held.eq(1), ar_word.eq(in_word),
                         c_hit.eq((in_word >= base) & (in_offset < 2 * len(COUNTERS))),
                         c_hi.eq(in_offset[0]), c_index.eq(in_offset[1:]),
                         c_latched.eq(snap_idx == in_offset[1:])]
        with m.If(ar_held):
            m.d.sync += [ar_held.eq(0), r_valid.eq(1), r_resp.eq(AxiResp.OKAY), r_data.eq(0),
                         snap_idx.eq(len(COUNTERS))]
            with m.If(c_hit & c_hi & c_latched):
                m.d.sync += r_data.eq(snap_hi)
            with m.Elif(c_hit):
                m.d.comb += [port.req.eq(1), port.index.eq(c_index)]
                m.d.sync += [r_valid.eq(0), waiting.eq(1), want_hi.eq(c_hi)]
                with m.If(~c_hi):
                    m.d.sync += snap_idx.eq(c_index)
            with m.Else():
                with m.Switch(ar_word):
                    for r in REGISTERS:
                        if r.kind in ("counter_lo", "counter_hi"):
                            continue
                        with m.Case(r.offset >> 2):
                            if r.kind == "const":
                                m.d.sync += r_data.eq(Const(consts[r.name], 32))
                            elif r.kind == "status":
                                m.d.sync += r_data.eq(status)
                            elif r.kind == "setting":
                                m.d.sync += r_data.eq(regs[r.field])
                            # "control" (write-only) reads 0.
                    with m.Default():
                        m.d.sync += r_resp.eq(AxiResp.SLVERR)
        with m.If(waiting & port.valid):
            m.d.sync += [waiting.eq(0), r_valid.eq(1),
                         r_data.eq(Mux(want_hi, port.value[32:], port.value[:32])),
                         snap_hi.eq(port.value[32:])]
            with m.If(want_hi):
                m.d.sync += snap_idx.eq(len(COUNTERS))
