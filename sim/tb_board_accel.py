"""cocotb testbench of the board system with the real accelerator (``hw.board.SocTop`` around
``hw.accelerator.Accelerator``): the host driver :class:`sim.driver.Driver`, over the serial
protocol on a simulated UART line (``sim.serial_transport``), loads tensors into the on-chip
SRAM, runs forward, loss and gradient of a strided layer and gets the golden results, exactly
as it would over a real serial port to a board."""

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles

from hw.config import Config
from sim import golden
from sim.board_tops import SIM_DIVISOR, SIM_SRAM_BYTES
from sim.driver import Driver
from sim.runner import load_config_json
from sim.serial_transport import AsyncTransport, SimSerialLine


def _wrap(t, bits):
    t = np.asarray(t, dtype=object) % (1 << bits)
    return np.where(t >= 1 << (bits - 1), t - (1 << bits), t).astype(np.int64)


@cocotb.test()
async def layer_over_serial(dut):
    cfg = Config.from_dict(load_config_json())
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    line = SimSerialLine(dut.clk, dut.uart_rx, dut.uart_tx, SIM_DIVISOR)
    dut.rst.value = 1
    await ClockCycles(dut.clk, 3)
    dut.rst.value = 0
    await ClockCycles(dut.clk, 2)
    host = AsyncTransport(line)
    await host.sync()
    drv = Driver(host, cfg, mem_size=SIM_SRAM_BYTES)
    await drv.open()
    rng = np.random.default_rng(5)
    x = rng.integers(-100, 100, (1, 2, 5, 5))
    w = rng.integers(-100, 100, (3, 2, 3, 3))
    dy = rng.integers(-100, 100, (1, 3, 3, 3))
    y = await drv.forward(x, w, 2, 1)
    assert np.array_equal(y, _wrap(golden.conv2d(x, w, 2, 1), cfg.acc_width))
    assert drv.counters["dma_read_bytes"] > 0
    dx = await drv.loss(dy, w, (5, 5), 2, 1)
    assert np.array_equal(dx, _wrap(golden.conv2d_input_grad(dy, w, (5, 5), 2, 1),
                                    cfg.acc_width))
    dw = await drv.gradient(x, dy, (3, 3), 2, 1)
    assert np.array_equal(dw, _wrap(golden.conv2d_weight_grad(x, dy, (3, 3), 2, 1),
                                    cfg.acc_width))
    assert int(dut.irq.value) == 1
