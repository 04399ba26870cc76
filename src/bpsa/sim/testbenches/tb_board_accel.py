"""cocotb testbench of the board system with the real accelerator (``bpsa.platform.board.SocTop``
around ``bpsa.gateware.accelerator.Accelerator``): the host driver :class:`bpsa.host.driver.Driver`,
over the serial protocol on a simulated UART line (``bpsa.host.serial_transport``), loads tensors
into the on-chip SRAM, runs a strided forward layer and gets the golden result, exactly as it would
over a real serial port to a board (loss and gradient take the same path; they are run over AXI in
``bpsa.sim.testbenches.tb_accelerator``, which is 20 times faster to simulate than the UART)."""

import cocotb
import numpy as np

from bpsa.config import Config
from bpsa.host.driver import Driver
from bpsa.models import golden
from bpsa.spec.numeric import wrap_array
from bpsa.platform.board_tops import SIM_SRAM_BYTES
from bpsa.sim.runner import load_config_json
from bpsa.sim.testbenches.tb_board import setup


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
    assert np.array_equal(y, wrap_array(golden.conv2d(x, w, 2, 1), cfg.acc_width))
    assert drv.counters["dma_read_bytes"] > 0
    assert int(dut.irq.value) == 1
