"""cocotb testbench of the board system (``bpsa.platform.board.SocTop`` with the stand-in core of
``bpsa.platform.board_tops``: the real register file and DMA engine), end to end through the simulated
serial line and the host protocol code.

The host reads the ID and configuration registers, loads a tensor into the on-chip SRAM,
programs a copy (PROG_WORDS elements from PROG_ADDR to ``STANDIN_COPY_OFFSET`` bytes above it),
starts it, waits for ``irq`` and
STATUS.DONE, and reads the result back: it must equal the tensor (the stand-in copies through
its DMA: AXI4 bursts into the SRAM's slave port while the bridge uses the word port). A DMA
window violation ends with the DMA's error code in STATUS; unmapped registers answer SLVERR.
"""

import os
import random
import warnings

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles

warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"cocotbext\.axi(\..*)?")

from bpsa.config import Config  # noqa: E402
from bpsa.gateware.bus.dma import DmaError  # noqa: E402
from bpsa.host.serial_transport import AsyncTransport, BridgeError, SimSerialLine  # noqa: E402
from bpsa.spec.bridge import Status  # noqa: E402
from bpsa.spec.regmap import ID_VALUE, REGISTER_MAP, STATUS_FIELDS, config_words  # noqa: E402
from bpsa.platform.board_tops import (  # noqa: E402
    SIM_DIVISOR,
    SIM_SRAM_BYTES,
    STANDIN_COPY_OFFSET,
)
from bpsa.sim.runner import load_config_json  # noqa: E402

R = REGISTER_MAP
DONE = 1 << STATUS_FIELDS["DONE"][0]


async def setup(dut):
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    line = SimSerialLine(dut.clk, dut.uart_rx, dut.uart_tx, SIM_DIVISOR)
    dut.rst.value = 1
    await ClockCycles(dut.clk, 3)
    dut.rst.value = 0
    await ClockCycles(dut.clk, 2)
    host = AsyncTransport(line)
    await host.sync()
    return host


async def run_copy(dut, host, n, src):
    """The stand-in core copies ``n`` elements from ``src`` to ``src + STANDIN_COPY_OFFSET``."""
    await host.write32(R["PROG_WORDS"], n)
    await host.write32(R["PROG_ADDR"], src)
    await host.write32(R["CONTROL"], 1)
    for _ in range(200):
        status = await host.read32(R["STATUS"])
        if status & DONE:
            break
    assert status & DONE, hex(status)
    assert int(dut.irq.value) == 1
    return status >> STATUS_FIELDS["ERROR"][0] & 0xFF


@cocotb.test()
async def test_end_to_end(dut):
    cfg = Config.from_dict(load_config_json())
    rng = random.Random(int(os.environ.get("BPSA_SEED", "1")))
    host = await setup(dut)
    assert await host.read32(R["ID"]) == ID_VALUE
    words = config_words(cfg)
    assert await host.read32(R["CFG_ARRAY"]) == words["CFG_ARRAY"]
    try:
        await host.read32(0x014)
    except BridgeError as e:
        assert e.status == Status.SLVERR
    else:
        raise AssertionError("unmapped register answered OK")

    n = 300                                      # int8 operands: 300 bytes
    src = 0x105                                  # unaligned source and copy: partial beats
    dst = src + STANDIN_COPY_OFFSET
    tensor = bytes(rng.getrandbits(8) for _ in range(n))
    await host.write_mem(src, tensor)
    await host.write_mem(dst - 8, bytes(n + 16))
    assert int(dut.irq.value) == 0
    assert await run_copy(dut, host, n, src) == 0
    assert await host.read_mem(dst, n) == tensor
    assert await host.read_mem(dst - 8, 8) == bytes(8)          # nothing outside written
    assert await host.read_mem(dst + n, 8) == bytes(8)
    lo = await host.read32(R["DMA_READ_BYTES_LO"])
    assert lo == n and await host.read32(R["DMA_WRITE_BYTES_LO"]) == n
    # CLEAR drops DONE and irq.
    await host.write32(R["CONTROL"], 2)
    assert await host.read32(R["STATUS"]) == 0 and int(dut.irq.value) == 0

    # The window stops a command that would leave it (the store, at 0x800).
    await host.write32(R["WINDOW_HI"], STANDIN_COPY_OFFSET - 1)
    assert await run_copy(dut, host, 16, 0) == DmaError.WINDOW.value
    await host.write32(R["WINDOW_HI"], 0xFFFF_FFFF)
    # Past the SRAM's end: the SRAM answers DECERR.
    assert await run_copy(dut, host, 16, SIM_SRAM_BYTES - 8) == DmaError.DECERR.value
