"""Helpers shared by the cocotb testbenches of the convolution tops."""

import json
import os

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import RisingEdge

from bpsa.spec.layer import ConvLayer, parse_layer
from bpsa.sim.lanes import pack

__all__ = ["layers_from_env", "reset", "write_words"]


def layers_from_env(default):
    """The layers to run: ``BPSA_LAYERS`` (a JSON list of ConvLayer fields) or ``BPSA_LAYER``
    (one layer string), else ``default``."""
    if os.environ.get("BPSA_LAYERS"):
        return [ConvLayer(**d) for d in json.loads(os.environ["BPSA_LAYERS"])]
    return [parse_layer(os.environ.get("BPSA_LAYER", default))]


async def reset(dut, write_ports):
    """Start the clock, hold reset for two cycles with ``start``, ``layer`` and the memory write
    ports ``write_ports`` (names of ``<port>__en/addr/data`` groups) at zero."""
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    dut.rst.value = 1
    dut.start.value = 0
    dut.layer.value = 0
    for port in write_ports:
        for field in ("en", "addr", "data"):
            getattr(dut, f"{port}__{field}").value = 0
    await RisingEdge(dut.clk)
    await RisingEdge(dut.clk)
    dut.rst.value = 0


async def write_words(dut, port, first, words, width):
    """Write ``words`` (each a list of lane values of ``width`` bits) through the memory write
    port ``port`` from word address ``first``, one word per cycle."""
    for i, word in enumerate(words):
        getattr(dut, f"{port}__en").value = 1
        getattr(dut, f"{port}__addr").value = first + i
        getattr(dut, f"{port}__data").value = pack(word, width)
        await RisingEdge(dut.clk)
    getattr(dut, f"{port}__en").value = 0
