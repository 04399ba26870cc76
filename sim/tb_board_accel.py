"""cocotb testbench of the board system with the real accelerator (``hw.board.SocTop`` around
``hw.accelerator.Accelerator``): the host driver :class:`sim.driver.Driver`, over the serial
protocol on a simulated UART line (``sim.serial_transport``), loads tensors into the on-chip
SRAM, runs a strided forward layer and gets the golden result, exactly as it would over a
real serial port to a board (loss and gradient take the same path; they are run over AXI in
``sim.tb_accelerator``, which is 20 times faster to simulate than the UART)."""

import cocotb
import numpy as np

from hw.config import Config
from sim import golden
from sim.board_tops import SIM_SRAM_BYTES
from sim.driver import Driver
from sim.runner import load_config_json
from sim.tb_board import setup


def _wrap(t, bits):
    t = np.asarray(t, dtype=object) % (1 << bits)
    return np.where(t >= 1 << (bits - 1), t - (1 << bits), t).astype(np.int64)


@cocotb.test()
async def layer_over_serial(dut):
    cfg = Config.from_dict(load_config_json())
    host = await setup(dut)
    drv = Driver(host, cfg, mem_size=SIM_SRAM_BYTES)
    await drv.open()
    rng = np.random.default_rng(5)
    x = rng.integers(-100, 100, (1, 2, 5, 5))
    w = rng.integers(-100, 100, (3, 2, 3, 3))
    y = await drv.forward(x, w, 2, 1)
    assert np.array_equal(y, _wrap(golden.conv2d(x, w, 2, 1), cfg.acc_width))
    assert drv.counters["dma_read_bytes"] > 0
    assert int(dut.irq.value) == 1
