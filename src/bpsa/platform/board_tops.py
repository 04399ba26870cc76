"""Simulation tops of the board blocks and a stand-in accelerator core (until
``bpsa.gateware.accelerator.Accelerator`` exists), for the cocotb testbenches and for trial
bitstreams.

``StandInCore(config)`` has the accelerator's interface (``axil``, ``mem``, ``irq``): the real
register file (:class:`bpsa.gateware.bus.axi_lite.RegisterFile`) and the real DMA engine
(:class:`bpsa.gateware.bus.dma.DmaEngine`) with a buffer of the default geometry. START copies
PROG_WORDS operand elements from PROG_ADDR to PROG_ADDR + :data:`STANDIN_COPY_OFFSET` through
the buffer (a DMA load, then a store; it runs no program); DONE and
ERROR (the first DMA error) show in STATUS, the accelerator's counters
(:class:`bpsa.gateware.control.counters.Counters`: cycles, busy cycles, the DMA's bytes and busy
cycles; the rest stay 0) in the counter registers, and ``irq`` is STATUS.DONE.

:func:`register_tops` adds the tops below to ``bpsa.platform.verilog.TOPS`` (in this process), so
``bpsa.sim.runner.run_cocotb`` builds them like any other top.
"""

from amaranth.hdl import Cat, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from bpsa.gateware.bus.axi_lite import ADDR_WIDTH, RegisterFile, axi_lite_signature
from bpsa.gateware.bus.axi_sram import AxiSram
from bpsa.gateware.bus.dma import (
    Direction,
    DmaEngine,
    DmaError,
    ElementKind,
    axi4_signature,
)
from bpsa.gateware.control.counters import Counters

__all__ = ["SIM_DIVISOR", "SIM_SRAM_BYTES", "SIM_TIMEOUT", "STANDIN_COPY_OFFSET", "StandInCore",
           "register_tops"]

#: UART bit time of the simulation tops (clock cycles).
SIM_DIVISOR = 8
#: SRAM of the simulation tops (bytes).
SIM_SRAM_BYTES = 4096
#: Bridge timeout of the simulation tops (cycles).
SIM_TIMEOUT = 4000
#: Where the stand-in core's copy lands: this many bytes above its source (PROG_ADDR).
STANDIN_COPY_OFFSET = 0x800


class StandInCore(wiring.Component):
    """A core with the accelerator's interface (see the module docstring)."""

    def __init__(self, config):
        self.config = config
        super().__init__({
            "axil": In(axi_lite_signature(ADDR_WIDTH)),
            "mem": Out(axi4_signature(data_width=config.dma_data_width)),
            "irq": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.regs = regs = RegisterFile(self.config)
        m.submodules.dma = dma = DmaEngine(self.config)
        m.submodules.buf = buf = Memory(shape=dma.word_width, depth=dma.depth, init=[])
        wiring.connect(m, wiring.flipped(self.axil), regs.axil)
        wiring.connect(m, dma.axi, wiring.flipped(self.mem))
        wiring.connect(m, dma.buf_read, buf.read_port())
        wiring.connect(m, dma.buf_write, buf.write_port())

        m.submodules.counters = counters = Counters(self.config)
        wiring.connect(m, regs.counter, counters.read)
        m.d.comb += [
            dma.window_lo.eq(regs.window_lo), dma.window_hi.eq(regs.window_hi),
            dma.clear_counters.eq(regs.clear), counters.clear.eq(regs.clear),
            counters.busy.eq(regs.busy), counters.dma_busy.eq(dma.busy),
            counters.dma_read.eq(dma.read_inc), counters.dma_write.eq(dma.write_inc),
        ]

        src = Signal(32)
        length = Signal.like(dma.cmd.payload.length)
        error = Signal(8)
        done = Signal()
        irq = Signal()
        m.d.comb += [regs.done.eq(done), regs.error.eq(error), self.irq.eq(irq)]
        m.d.sync += done.eq(0)
        with m.If(regs.start | regs.clear):
            m.d.sync += irq.eq(0)
        with m.If(done):
            m.d.sync += irq.eq(1)
        cmd = dma.cmd.payload
        m.d.comb += [cmd.kind.eq(ElementKind.OPERAND), cmd.buf_addr.eq(0), cmd.lanes.eq(0),
                     cmd.length.eq(length)]
        with m.FSM():
            with m.State("IDLE"):
                with m.If(regs.start):
                    m.d.sync += [error.eq(0), src.eq(regs.prog_addr), length.eq(regs.prog_words)]
                    m.next = "LOAD"
            with m.State("LOAD"):
                m.d.comb += [regs.busy.eq(1), dma.cmd.valid.eq(1),
                             cmd.direction.eq(Direction.LOAD), cmd.addr.eq(src)]
                with m.If(dma.cmd.ready):
                    m.next = "LOAD_WAIT"
            with m.State("LOAD_WAIT"):
                m.d.comb += regs.busy.eq(1)
                with m.If(dma.done):
                    with m.If(dma.error != DmaError.NONE):
                        m.d.sync += [error.eq(dma.error.as_value()), done.eq(1)]
                        m.next = "IDLE"
                    with m.Else():
                        m.next = "STORE"
            with m.State("STORE"):
                m.d.comb += [regs.busy.eq(1), dma.cmd.valid.eq(1),
                             cmd.direction.eq(Direction.STORE), cmd.addr.eq(src + STANDIN_COPY_OFFSET)]
                with m.If(dma.cmd.ready):
                    m.next = "STORE_WAIT"
            with m.State("STORE_WAIT"):
                m.d.comb += regs.busy.eq(1)
                with m.If(dma.done):
                    m.d.sync += [error.eq(dma.error.as_value()), done.eq(1)]
                    m.next = "IDLE"
        return m


def uart_bridge_top(config):
    """The UART bridge alone (its buses become ports)."""
    from bpsa.gateware.bus.uart_bridge import UartBridge
    return UartBridge(divisor=SIM_DIVISOR, mem_addr_width=9, timeout=SIM_TIMEOUT)


def axi_sram_top(config):
    """The SRAM alone."""
    return AxiSram(SIM_SRAM_BYTES)


def soc_top(config):
    """The board system with the stand-in core."""
    from bpsa.platform.board import SocTop
    return SocTop(config, core=StandInCore, sram_bytes=SIM_SRAM_BYTES, divisor=SIM_DIVISOR,
                  timeout=SIM_TIMEOUT)


def soc_accel_top(config):
    """The board system with the real accelerator (``bpsa.gateware.accelerator.Accelerator``)."""
    from bpsa.platform.board import SocTop
    return SocTop(config, core="bpsa.gateware.accelerator:Accelerator", sram_bytes=SIM_SRAM_BYTES,
                  divisor=SIM_DIVISOR, timeout=SIM_TIMEOUT)


SIM_TOPS = {
    "uart_bridge": "bpsa.platform.board_tops:uart_bridge_top",
    "axi_sram": "bpsa.platform.board_tops:axi_sram_top",
    "soc_standin": "bpsa.platform.board_tops:soc_top",
    "soc_accel": "bpsa.platform.board_tops:soc_accel_top",
}


def register_tops():
    """Add :data:`SIM_TOPS` to ``bpsa.platform.verilog.TOPS`` in this process."""
    from bpsa.platform.verilog import TOPS
    for k, v in SIM_TOPS.items():
        TOPS.setdefault(k, v)


class MultiplierCore(StandInCore):
    """A core with the accelerator's interface and ``rows * cols`` multipliers of
    ``operand_width`` bits (and little else): a quick stand-in for a configuration that is too
    large for a device (fit-check tests)."""

    def elaborate(self, platform):
        m = Module()
        cfg, bus = self.config, self.axil
        w = cfg.operand_width
        seed = Signal(32)
        m.d.comb += [bus.awready.eq(1), bus.wready.eq(1), bus.bvalid.eq(1), bus.arready.eq(1),
                     bus.rvalid.eq(1), bus.rdata.eq(seed)]
        with m.If(bus.wvalid):
            m.d.sync += seed.eq(bus.wdata)
        bits = []
        for i in range(cfg.rows * cfg.cols):
            p = Signal(2 * w, name=f"p{i}")
            m.d.sync += p.eq((seed + i)[:w] * (seed ^ (i * 0x9E3779B1 & 0xFFFFFFFF))[:w])
            bits.append(p.xor())
        r = Signal()
        # One wide reduction (Yosys balances it): a chain of 256 XORs overflows the stack of
        # YoWASP Yosys's abc9 pass.
        m.d.sync += r.eq(Cat(*bits).xor())
        m.d.comb += self.irq.eq(r)
        return m
