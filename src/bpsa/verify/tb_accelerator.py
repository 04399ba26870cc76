"""cocotb testbench of the whole accelerator (generated Verilog under Verilator), driven through
the host driver :class:`bpsa.host.driver.Driver` over cocotbext-axi: an ``AxiLiteMaster`` on the
register port ``axil`` and an ``AxiRam`` on the memory port ``mem``.

Tests (each resets the design)
    ``layers``: the jobs of ``BPSA_JOBS`` (a JSON list of ``{"phase", "layer": ConvLayer
    fields, "seed", "pauses", "zero_prob", "expect", "baseline"}``; default: one small layer
    per phase; ``baseline`` runs loss / gradient the traditional way, zero-spaces built by the
    driver and run as a forward convolution),
    each checked bit-exactly against :mod:`bpsa.models.golden` (or, with ``expect``, refused by the
    hardware with that error name); with ``pauses`` every AXI channel of the
    RAM gets random ready/valid pauses. A summary per job (cycles, DMA bytes, buffer words,
    utilization) goes to the JSON file ``BPSA_RESULTS`` when set.
    ``illegal_descriptors``: zero sizes, stride 0, kernel larger than the padded input, phases
    not generated or reserved, tensors outside the DMA window or misaligned; each answered
    with its error code and no hang, then a good layer still runs right.
    ``training``: three SGD steps of a two-layer CNN (conv, ReLU in software, strided conv),
    every convolution of the forward and backward passes on the accelerator, the weights after
    each step equal to a numpy-only loop (:func:`bpsa.host.training.train`).
Run one with ``bpsa.verify.runner.run_cocotb(..., testcase=name)``.
"""

import json
import logging
import os
import random
import warnings

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge
from cocotb.utils import get_sim_time

warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"cocotbext\.axi(\..*)?")

from cocotbext.axi import AxiBus, AxiLiteBus, AxiLiteMaster, AxiRam  # noqa: E402

from bpsa.config import Config  # noqa: E402
from bpsa.host.driver import AcceleratorError, Driver  # noqa: E402
from bpsa.host.training import train  # noqa: E402
from bpsa.verify.jobs import run_job, run_jobs  # noqa: E402
from bpsa.verify.runner import load_config_json  # noqa: E402

RAM_SIZE = 1 << 20
#: Default jobs: one small layer per phase (stride 2, padding 1).
DEFAULT_JOBS = [{"phase": p, "layer": {"batch": 1, "channels": 2, "height": 5, "width": 5,
                                       "out_channels": 3, "kernel_h": 3, "kernel_w": 3,
                                       "stride_h": 2, "stride_w": 2, "pad_h": 1, "pad_w": 1},
                 "seed": 1} for p in ("forward", "loss", "gradient")]


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


GOOD = {"PHASE": 0, "N": 1, "C": 1, "H": 4, "W": 4, "K": 1, "R": 3, "S": 3, "STRIDE_H": 1,
        "STRIDE_W": 1, "PAD_H": 0, "PAD_W": 0, "DIL_H": 1, "DIL_W": 1, "ADDR_X": 0x1000,
        "ADDR_W": 0x2000, "ADDR_DY": 0x3000, "ADDR_OUT": 0x4000}


@cocotb.test()
async def illegal_descriptors(dut):
    h = Harness(dut)
    await h.reset()
    cfg, drv = h.cfg, h.driver
    sentinel = bytes([0xA5]) * 4096
    generated = {0: cfg.has("os"), 1: cfg.has("is"), 2: cfg.has("is")}
    cases = [
        ({"N": 0}, 2), ({"C": 0}, 2), ({"H": 0}, 2), ({"K": 0}, 2), ({"R": 0}, 2),
        ({"STRIDE_H": 0}, 3), ({"STRIDE_W": 0}, 3), ({"DIL_W": 0}, 3),
        ({"R": 5}, 4), ({"S": 3, "W": 2}, 4), ({"R": 3, "DIL_H": 2, "H": 4}, 4),
        # PHASE 3 (FC backward) needs H = W = R = S = 1 and no padding: SHAPE
        ({"PHASE": 3}, 9 if cfg.has("interleaved") and cfg.has("is") else 1),
        ({"PHASE": 7}, 1), ({"PHASE": 15}, 1),
        ({"ADDR_X": RAM_SIZE - 4}, 8), ({"ADDR_OUT": RAM_SIZE - 8}, 8),
        ({"ADDR_X": 0xFFFF_FFF0}, 8),
    ]
    for phase in (1, 2):
        cases.append(({"PHASE": phase, "ADDR_DY": RAM_SIZE - 2}, 8 if generated[phase] else 1))
        cases.append(({"PHASE": phase, "N": 0}, 2 if generated[phase] else 1))
    if not generated[0]:
        cases = [(c, 1 if c.get("PHASE", 0) == 0 else e) for c, e in cases]
    if cfg.acc_width > 8:
        cases.append(({"ADDR_OUT": 0x4001}, 7))
    for i, (change, code) in enumerate(cases):
        desc = dict(GOOD, **change)
        out = desc["ADDR_OUT"]
        if out + len(sentinel) <= RAM_SIZE:
            h.ram.write(out, sentinel)
        got = await drv.start(desc)
        assert got == code, f"case {i} {change}: error {got:#x}, expected {code:#x}"
        after = await drv.read_counters()
        assert after["dma_read_bytes"] == 0 and after["dma_write_bytes"] == 0, \
            f"case {i} {change}: the refused layer moved data"
        if out + len(sentinel) <= RAM_SIZE:
            assert h.ram.read(out, len(sentinel)) == sentinel, \
                f"case {i} {change}: memory written"
    # still right on the next good layer of every generated phase
    for phase in ("forward", "loss", "gradient"):
        if generated[("forward", "loss", "gradient").index(phase)]:
            job = {"phase": phase, "layer": DEFAULT_JOBS[0]["layer"], "seed": 7}
            got, want, _ = await run_job(h.cfg, h.driver, job, h.clock)
            assert np.array_equal(got, want), f"{phase} after the refusals differs"
    # the driver raises the hardware's refusal as an exception with the code's name
    try:
        await drv.forward(np.ones((1, 1, 2, 2), dtype=np.int64),
                          np.ones((1, 1, 3, 3), dtype=np.int64))
    except AcceleratorError as e:
        assert e.name == ("KERNEL_TOO_LARGE" if generated[0] else "PHASE"), e
    else:
        raise AssertionError("a 3x3 kernel on a 2x2 input was not refused")


@cocotb.test()
async def training(dut):
    h = Harness(dut)
    await h.reset()
    log = await train(h.driver, h.cfg, steps=3)
    dut._log.info("training: %s", log)
    if os.environ.get("BPSA_RESULTS"):
        with open(os.environ["BPSA_RESULTS"], "w") as f:
            json.dump(log, f, indent=1)
