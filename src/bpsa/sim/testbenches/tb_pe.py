"""cocotb testbench of the PE (generated Verilog under Verilator) against ``bpsa.models.pe_model``.

Every mode of the generated configuration runs a random operand stream (zeros, invalid slots,
context ends, chain shifts, loads); every output is compared with the cycle model every cycle,
and the number of gated MACs is compared with the count of active slots that have a zero
operand.
"""

import os

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import ReadOnly, RisingEdge, Timer

from bpsa.config import MX_WIDTHS
from bpsa.models.pe_model import OUTPUTS, PORTS, PEModel, random_stimulus
from bpsa.sim.testbenches.pe_streams import directed_stream
from bpsa.sim.runner import load_config_json

CYCLES = int(os.environ.get("BPSA_PE_CYCLES", "2000"))


def modes_of(cfg):
    modes = []
    if "os" in cfg["dataflows"]:
        modes.append("os")
    if "ws" in cfg["dataflows"] or "is" in cfg["dataflows"]:
        modes.append("hold")
    if "interleaved" in cfg["dataflows"]:
        modes.append("interleaved")
    return modes


async def reset(dut):
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    dut.rst.value = 1
    for name in PORTS.values():
        if hasattr(dut, name):
            getattr(dut, name).value = 0
    await RisingEdge(dut.clk)
    await RisingEdge(dut.clk)
    dut.rst.value = 0


@cocotb.test()
async def random_streams_match_model(dut):
    cfg = load_config_json()
    seed = int(os.environ.get("BPSA_SEED", "1"))
    await reset(dut)
    for mode in modes_of(cfg):
        rng = np.random.default_rng([seed, len(mode)])
        stim = random_stimulus(cfg, mode, CYCLES, rng)
        model = PEModel(cfg)
        # Start from the RTL's reset state: all registers zero, like the model.
        dut.rst.value = 1
        await RisingEdge(dut.clk)
        dut.rst.value = 0
        gated_rtl = 0
        for cycle, c in enumerate(stim):
            for k, v in c.items():
                getattr(dut, PORTS[k]).value = v
            await RisingEdge(dut.clk)
            await ReadOnly()
            expected = model.step(c)
            for name in OUTPUTS:
                if not hasattr(dut, name):
                    continue
                got = _read(dut, cfg, name)
                assert got == expected[name], \
                    f"mode {mode}, cycle {cycle}: {name} = {got}, expected {expected[name]}"
            gated_rtl += int(dut.gated.value)
            await _after_readonly(dut)
        dut._log.info(f"mode {mode}: {CYCLES} cycles match, {gated_rtl} gated MACs")


def _signed(cfg, name):
    """Accumulator-wide outputs are signed (but for an FP8 MX format's: a 42-bit sum with the
    NaN flag above it, unsigned as a whole); operand outputs follow the operand format."""
    if name in ("chain_out", "p_out"):
        return cfg["operand_signed"] or cfg["arithmetic"] not in MX_WIDTHS
    return cfg["operand_signed"]


async def _after_readonly(dut):
    # Leave the read-only phase before driving the next cycle's inputs.
    await Timer(1, unit="ns")


def _read(dut, cfg, name):
    handle = getattr(dut, name)
    if name in ("h_out", "v_out", "p_out", "chain_out", "wchain_out") and _signed(cfg, name):
        return handle.value.to_signed()
    return int(handle.value)


async def _run_directed(dut, cfg, stream, label):
    dut.rst.value = 1
    await RisingEdge(dut.clk)
    dut.rst.value = 0
    gated = 0
    for cycle, c in enumerate(stream.cycles):
        for name in PORTS.values():
            if hasattr(dut, name):
                getattr(dut, name).value = 0
        for k, v in c.items():
            getattr(dut, PORTS[k]).value = v
        await RisingEdge(dut.clk)
        await ReadOnly()
        for name, value in stream.checks.get(cycle, {}).items():
            got = _read(dut, cfg, name)
            assert got == value, f"{label}, cycle {cycle}: {name} = {got}, expected {value}"
        gated += int(dut.gated.value)
        await _after_readonly(dut)
    # The gated flag is registered: it reports the last cycle one edge later.
    for name in PORTS.values():
        if hasattr(dut, name):
            getattr(dut, name).value = 0
    await RisingEdge(dut.clk)
    await ReadOnly()
    gated += int(dut.gated.value)
    await _after_readonly(dut)
    assert gated == stream.gated, f"{label}: {gated} gated MACs, numpy counts {stream.gated}"
    return gated


@cocotb.test()
async def directed_streams_match_numpy(dut):
    """Dot products, preload, partial sums, interleaved G / SGD update and the gated-MAC count,
    with expectations computed by numpy over whole streams."""
    cfg = load_config_json()
    seed = int(os.environ.get("BPSA_SEED", "1"))
    await reset(dut)
    rng = np.random.default_rng(seed)
    for mode in modes_of(cfg):
        for trial in range(6):
            kw = {}
            if mode == "os":
                kw["preload"] = int(rng.integers(-1000, 1000))
            else:
                kw["held"] = 0 if trial == 0 else None      # a zero held operand gates all
            n = int(rng.integers(2, 200))
            stream = directed_stream(cfg, mode, n, rng, **kw)
            gated = await _run_directed(dut, cfg, stream, f"{mode} trial {trial}")
            dut._log.info(f"{mode} trial {trial}: {n} slots, {gated} gated MACs match numpy")


