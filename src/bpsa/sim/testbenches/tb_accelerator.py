"""cocotb testbench of the whole accelerator (generated Verilog under Verilator), driven through
the host driver :class:`bpsa.host.driver.Driver` over cocotbext-axi: an ``AxiLiteMaster`` on the
register port ``axil`` and an ``AxiRam`` on the memory port ``mem``.

Test
    ``layers``: the jobs of ``BPSA_JOBS`` (a JSON list of ``{"phase", "layer": ConvLayer
    fields, "seed", "pauses", "zero_prob", "expect", "baseline"}``; default:
    :data:`bpsa.sim.jobs.DEFAULT_JOBS`, one small layer per phase; ``baseline`` runs loss /
    gradient the traditional way, zero-spaces built by the driver and run as a forward
    convolution),
    each checked bit-exactly against :mod:`bpsa.models.golden` (or, with ``expect``, refused by the
    hardware with that error name); with ``pauses`` every AXI channel of the
    RAM gets random ready/valid pauses. A summary per job (cycles, DMA bytes, buffer words,
    utilization) goes to the JSON file ``BPSA_RESULTS`` when set.
Run it with :func:`bpsa.sim.accel_run.run_jobs` (``harness="cocotb"``; ``bpsa sim --harness
cocotb``). The other whole-accelerator scenarios (:mod:`bpsa.verify.scenarios`, training) run
on the native transport, which is 100 times faster.
"""

import json
import logging
import os
import random
import warnings

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge
from cocotb.utils import get_sim_time

warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"cocotbext\.axi(\..*)?")

from cocotbext.axi import AxiBus, AxiLiteBus, AxiLiteMaster, AxiRam  # noqa: E402

from bpsa.config import Config  # noqa: E402
from bpsa.host.driver import Driver  # noqa: E402
from bpsa.sim.jobs import DEFAULT_JOBS, run_jobs  # noqa: E402
from bpsa.sim.runner import load_config_json  # noqa: E402

RAM_SIZE = 1 << 20


class CocotbTransport:
    """The driver's transport on the simulated design (see :mod:`bpsa.host.driver`)."""

    def __init__(self, dut, axil, ram):
        self.dut, self.axil, self.ram = dut, axil, ram

    async def read32(self, offset):
        return await self.axil.read_dword(offset)

    async def write32(self, offset, value):
        await self.axil.write_dword(offset, value)

    async def read_mem(self, addr, nbytes):
        return self.ram.read(addr, nbytes)

    async def write_mem(self, addr, data):
        self.ram.write(addr, data)

    async def idle(self, cycles):
        await ClockCycles(self.dut.clk, cycles)


class Harness:
    def __init__(self, dut):
        self.dut = dut
        self.cfg = Config.from_dict(load_config_json())
        cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
        self.axil = AxiLiteMaster(AxiLiteBus.from_prefix(dut, "axil", bus_separator="__"),
                                  dut.clk, dut.rst)
        self.ram = AxiRam(AxiBus.from_prefix(dut, "mem", bus_separator="__"), dut.clk, dut.rst,
                          size=RAM_SIZE)
        self.driver = Driver(CocotbTransport(dut, self.axil, self.ram), self.cfg,
                             mem_size=RAM_SIZE)
        # cocotbext-axi logs every transfer at INFO: megabytes of log per layer
        for bus in ("axil", "mem"):
            logging.getLogger(f"cocotb.{dut._name}.{bus}").setLevel(logging.WARNING)

    def pauses(self, on, seed=0):
        w, r = self.ram.write_if, self.ram.read_if
        for i, ch in enumerate((w.aw_channel, w.w_channel, w.b_channel, r.ar_channel,
                                r.r_channel)):
            if on:
                rng = random.Random(seed * 10 + i)
                ch.set_pause_generator(iter(lambda rng=rng: rng.random() < 0.35, None))
            else:
                ch.clear_pause_generator()
                ch.pause = False      # clearing the generator keeps its last value

    def clock(self):
        """Simulated clock cycles so far."""
        return get_sim_time("ns") // 10

    async def reset(self):
        self.dut.rst.value = 1
        await ClockCycles(self.dut.clk, 3)
        self.dut.rst.value = 0
        await RisingEdge(self.dut.clk)
        await self.driver.open()


@cocotb.test()
async def layers(dut):
    h = Harness(dut)
    await h.reset()
    jobs = json.loads(os.environ["BPSA_JOBS"]) if os.environ.get("BPSA_JOBS") else DEFAULT_JOBS
    summaries = await run_jobs(
        h.cfg, h.driver, jobs, h.clock, before=lambda i, job: h.pauses(bool(job.get("pauses")),
                                                                       seed=i),
        log=lambda i, s: dut._log.info("job %d %s %s: %d cycles, match", i, s["phase"],
                                       s["layer"], s["cycles"]))
    h.pauses(False)
    if os.environ.get("BPSA_RESULTS"):
        with open(os.environ["BPSA_RESULTS"], "w") as f:
            json.dump(summaries, f, indent=1)
