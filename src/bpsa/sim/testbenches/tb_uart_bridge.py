"""cocotb testbench of the UART bridge (``bpsa.gateware.bus.uart_bridge.UartBridge``, generated Verilog
under Verilator) through a simulated serial line (``bpsa.host.serial_transport.SimSerialLine``)
driven by the host protocol code (``AsyncTransport``), the same code that drives the board.

The register bus ends in cocotbext-axi's ``AxiLiteRam`` (random pauses; errors injected for an
address range), the memory port in a Python word memory with random ``ready``. Checked against
those models: register write / read round trips, bulk memory writes and reads of any alignment
and length (the transport's read-modify-write of partial words included), bad command bytes
answered BAD_CMD one by one, bad arguments answered BAD_ARG with nothing touched (MEM_WRITE's
data consumed), SLVERR passed through, a command cut short answered TIMEOUT, and the bridge
still answering SYNC after all of it.
"""

import os
import random
import warnings

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, ReadOnly, RisingEdge

warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"cocotbext\.axi(\..*)?")

from cocotbext.axi import AxiLiteBus, AxiLiteRam  # noqa: E402

from bpsa.host.serial_transport import AsyncTransport, BridgeError, SimSerialLine  # noqa: E402
from bpsa.spec.bridge import Command, Status, status_byte  # noqa: E402
from bpsa.platform.board_tops import SIM_DIVISOR, SIM_TIMEOUT  # noqa: E402

MEM_WORDS = 512                 # the top's mem_addr_width is 9
ERR_LO, ERR_HI = 0xF00, 0xFFF   # register addresses answering SLVERR


class Harness:
    def __init__(self, dut, seed):
        self.dut = dut
        self.rng = random.Random(int(os.environ.get("BPSA_SEED", "1")) * 100 + seed)
        self.mem = [self.rng.getrandbits(64) for _ in range(MEM_WORDS)]
        self.mem_requests = 0
        cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
        self.ram = AxiLiteRam(AxiLiteBus.from_prefix(dut, "axil", bus_separator="__"),
                              dut.clk, dut.rst, size=4096)
        for i, ch in enumerate((self.ram.write_if.aw_channel, self.ram.write_if.w_channel,
                                self.ram.write_if.b_channel, self.ram.read_if.ar_channel,
                                self.ram.read_if.r_channel)):
            ch.set_pause_generator(self._pauses(i))
        self._inject_errors()
        self.line = SimSerialLine(dut.clk, dut.rx, dut.tx, SIM_DIVISOR,
                                  timeout_bits=SIM_TIMEOUT // SIM_DIVISOR + 2000)
        self.host = AsyncTransport(self.line)

    def _pauses(self, i):
        rng = random.Random(self.rng.random() + i)
        while True:
            yield rng.random() < 0.3

    def _inject_errors(self):
        read, write = self.ram.read_if._read, self.ram.write_if._write

        async def faulty_read(address, length):
            if ERR_LO <= address <= ERR_HI:
                raise OSError("injected read error")
            return await read(address, length)

        async def faulty_write(address, data):
            if ERR_LO <= address <= ERR_HI:
                raise OSError("injected write error")
            return await write(address, data)

        self.ram.read_if._read = faulty_read
        self.ram.write_if._write = faulty_write

    async def _mem_model(self):
        dut, rng = self.dut, random.Random(self.rng.random())
        dut.mem__rvalid.value = 0
        dut.mem__rdata.value = 0
        while True:
            ready = rng.random() < 0.6
            dut.mem__ready.value = ready
            await ReadOnly()
            req = None
            if ready and int(dut.mem__valid.value):
                req = (int(dut.mem__we.value), int(dut.mem__addr.value),
                       int(dut.mem__wdata.value), int(dut.mem__wstrb.value))
            await RisingEdge(dut.clk)
            dut.mem__rvalid.value = 0
            if req:
                self.mem_requests += 1
                we, addr, wdata, wstrb = req
                if we:
                    mask = sum(0xFF << (8 * b) for b in range(8) if wstrb >> b & 1)
                    self.mem[addr] = self.mem[addr] & ~mask | wdata & mask
                else:
                    dut.mem__rvalid.value = 1
                    dut.mem__rdata.value = self.mem[addr]

    async def reset(self):
        self.dut.rst.value = 1
        await ClockCycles(self.dut.clk, 3)
        self.dut.rst.value = 0
        cocotb.start_soon(self._mem_model())
        await ClockCycles(self.dut.clk, 2)

    def mem_bytes(self):
        return b"".join(w.to_bytes(8, "little") for w in self.mem)


async def expect_error(coro, status):
    try:
        await coro
    except BridgeError as e:
        assert e.status == status, (e, status)
    else:
        raise AssertionError(f"expected {status.name}")


@cocotb.test()
async def test_registers(dut):
    """READ32 / WRITE32 round trips against the AXI-Lite RAM model; SLVERR passed through."""
    h = Harness(dut, 1)
    await h.reset()
    await h.host.sync()
    rng = h.rng
    for _ in range(12):
        addr = rng.randrange(0, ERR_LO, 4)
        value = rng.getrandbits(32)
        await h.host.write32(addr, value)
        assert h.ram.read_dword(addr) == value
        h.ram.write_dword(addr, value ^ 0xFFFF)
        assert await h.host.read32(addr) == value ^ 0xFFFF
    await expect_error(h.host.read32(ERR_LO + 8), Status.SLVERR)
    await expect_error(h.host.write32(ERR_LO + 8, 1), Status.SLVERR)
    # Unaligned or beyond the 12-bit register aperture: BAD_ARG, no bus traffic.
    await expect_error(h.host.read32(0x102), Status.BAD_ARG)
    await expect_error(h.host.write32(0x1000, 5), Status.BAD_ARG)
    assert await h.host.read32(0) == h.ram.read_dword(0)


@cocotb.test()
async def test_memory(dut):
    """Bulk writes and reads of any alignment and length against the word-memory model."""
    h = Harness(dut, 2)
    await h.reset()
    rng = h.rng
    model = bytearray(h.mem_bytes())
    for n, addr in ((64, 0), (8, 8 * (MEM_WORDS - 1)), (13, 3), (1, 4093), (100, 1001)):
        data = bytes(rng.getrandbits(8) for _ in range(n))
        await h.host.write_mem(addr, data)
        model[addr:addr + n] = data
        assert h.mem_bytes() == bytes(model), (addr, n)
        assert await h.host.read_mem(addr, n) == data
    assert h.mem_bytes() == bytes(model)
    assert await h.host.read_mem(0, 256) == bytes(model[:256])
    assert await h.host.read_mem(5, 0) == b""


@cocotb.test()
async def test_bad_commands(dut):
    """Bad command bytes, bad memory arguments and a truncated command never hang the bridge."""
    h = Harness(dut, 3)
    await h.reset()
    bad_cmd = status_byte(Status.BAD_CMD)
    # Every unknown byte gets its own BAD_CMD.
    junk = bytes([0x05, 0xFF, 0x80, 0x41, 0xA0])
    assert await h.host.raw(junk, len(junk)) == bytes([bad_cmd]) * len(junk)
    await h.host.sync()
    before = list(h.mem)
    requests = h.mem_requests
    # Unaligned / out-of-range memory commands: BAD_ARG, nothing touched.
    mem_read = Command.MEM_READ.value
    mem_write = Command.MEM_WRITE.value
    bad_arg = bytes([status_byte(Status.BAD_ARG)])
    assert await h.host.raw(bytes([mem_read]) + (4).to_bytes(4, "little")
                            + (1).to_bytes(2, "little"), 1) == bad_arg
    assert await h.host.raw(bytes([mem_read]) + (8 * MEM_WORDS - 8).to_bytes(4, "little")
                            + (2).to_bytes(2, "little"), 1) == bad_arg
    assert await h.host.raw(bytes([mem_read]) + (1 << 31).to_bytes(4, "little")
                            + (1).to_bytes(2, "little"), 1) == bad_arg
    # A bad MEM_WRITE still takes its data bytes, then answers BAD_ARG.
    payload = bytes(range(16))
    assert await h.host.raw(bytes([mem_write]) + (8 * MEM_WORDS).to_bytes(4, "little")
                            + (2).to_bytes(2, "little") + payload, 1) == bad_arg
    assert h.mem == before and h.mem_requests == requests
    await h.host.sync()
    # A command cut short: TIMEOUT after the timeout, then the bridge answers again.
    assert await h.host.raw(bytes([Command.WRITE32.value, 0x10, 0x00]), 1) == \
        bytes([status_byte(Status.TIMEOUT)])
    assert await h.host.raw(bytes([mem_write]) + (0).to_bytes(4, "little")
                            + (1).to_bytes(2, "little") + b"\x01\x02", 1) == \
        bytes([status_byte(Status.TIMEOUT)])
    await h.host.sync()
    await h.host.write32(0x10, 0x1234_5678)
    assert await h.host.read32(0x10) == 0x1234_5678
    assert await h.host.read_mem(0, 16) == h.mem_bytes()[:16]
    assert int(dut.frame_errors.value) == 0
