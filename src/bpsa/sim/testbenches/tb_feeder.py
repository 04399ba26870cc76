"""cocotb testbench of the DataFeeder (generated Verilog under Verilator) against
``bpsa.models.feeder_model``.

The testbench models the SRAM behind the ``sram`` read port (synchronous: ``data`` is the word
at the address of the previous cycle's ``en``, held otherwise), drives the layer descriptor, and
takes the ``feed`` stream with a random ``ready``. Every run's vectors must equal the golden
im2col rows (``expected_streams``), context ends must carry ``last``, and ``words_read`` must
equal the model's count. An illegal descriptor must raise ``error`` without reading.
"""

import os

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge, RisingEdge

from bpsa.config import Config
from bpsa.gateware.frontends.feeder.feeder import feed_layout, layer_layout
from bpsa.models.feeder_model import (
    FeederDescriptor,
    expected_streams,
    random_descriptor,
    sram_words,
    traffic,
)
from bpsa.sim.runner import load_config_json
from bpsa.spec.layer import ConvLayer

SEED = int(os.environ.get("BPSA_SEED", "1"))

#: Directed runs: (descriptor, probability of ready).
LAYERS = [
    (FeederDescriptor.of(ConvLayer.conv(1, 2, 7, 9, 1, 3, 3, 1, 1, 1)), 1.0),
    (FeederDescriptor.of(ConvLayer.conv(1, 1, 19, 23, 1, 11, 11, 4, 2, 1)), 0.7),
    (FeederDescriptor.of(ConvLayer.conv(2, 2, 13, 11, 1, 7, 7, 2, 3, 1), base=11), 1.0),
    (FeederDescriptor.of(ConvLayer.conv(1, 3, 9, 12, 1, 3, 3, (3, 2), (2, 1), (2, 3))), 0.5),
    (FeederDescriptor.of(ConvLayer.conv(1, 9, 5, 6, 1, 1, 1, 1, 0, 1)), 1.0),
    (FeederDescriptor.of(ConvLayer.conv(1, 1, 8, 9, 1, 5, 2, 4, 3, (1, 2))), 1.0),
]


def _pack(layout, values):
    """Flatten a dict of field values into the integer of a ``StructLayout`` port."""
    v = 0
    for name, field in layout:
        v |= (values[name] & ((1 << field.width) - 1)) << field.offset
    return v


def _signed(v, width):
    return v - (1 << width) if v >> (width - 1) else v


class FeederEnv:
    def __init__(self, dut, cfg):
        self.dut = dut
        self.cfg = cfg
        self.llayout = layer_layout(cfg)
        self.flayout = feed_layout(cfg)
        self.mem = np.zeros((cfg.buf_a_depth, cfg.feeder_bus_width), dtype=np.int64)

    def load(self, layer, x):
        self.mem = sram_words(self.cfg, layer, x)

    def word(self, addr):
        ow = self.cfg.operand_width
        return sum(int(v) << (j * ow) for j, v in enumerate(self.mem[addr]))

    def unpack(self, value):
        cfg, ow = self.cfg, self.cfg.operand_width
        data_f = self.flayout["data"]
        raw = [(value >> (data_f.offset + i * ow)) & ((1 << ow) - 1) for i in range(cfg.rows)]
        elems = [_signed(v, ow) if cfg.operand_signed else v for v in raw]
        mask = (value >> self.flayout["mask"].offset) & ((1 << cfg.rows) - 1)
        last = (value >> self.flayout["last"].offset) & 1
        return elems, mask, last

    async def run(self, layer, ready_prob, rng, max_cycles=100000):
        """Start ``layer`` and collect the feed vectors until ``busy`` falls."""
        dut = self.dut
        await RisingEdge(dut.clk)
        dut.layer.value = _pack(self.llayout, layer.fields())
        dut.start.value = 1
        await RisingEdge(dut.clk)
        dut.start.value = 0
        got = []
        pending = None
        for _ in range(max_cycles):
            ready = int(rng.random() < ready_prob)
            dut.feed__ready.value = ready
            await FallingEdge(dut.clk)
            busy = int(dut.busy.value)
            if int(dut.feed__valid.value) and ready:
                got.append(self.unpack(int(dut.feed__payload.value)))
            pending = int(dut.sram__addr.value) if int(dut.sram__en.value) else None
            await RisingEdge(dut.clk)
            if pending is not None:
                dut.sram__data.value = self.word(pending)
            if not busy:
                break
        else:
            raise AssertionError(f"{layer}: feeder still busy after {max_cycles} cycles")
        return got


async def _reset(dut):
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    dut.rst.value = 1
    dut.start.value = 0
    dut.layer.value = 0
    dut.feed__ready.value = 0
    dut.sram__data.value = 0
    await RisingEdge(dut.clk)
    await RisingEdge(dut.clk)
    dut.rst.value = 0


def _check(cfg, layer, x, got):
    exp, mask = expected_streams(cfg, layer, x)
    crs = layer.channels * layer.kernel_h * layer.kernel_w
    assert len(got) == exp.shape[0] * crs, \
        f"{layer}: {len(got)} vectors, expected {exp.shape[0] * crs}"
    data = np.array([g[0] for g in got], dtype=np.int64).reshape(-1, crs, cfg.rows)
    assert np.array_equal(data.transpose(0, 2, 1), exp), f"{layer}: streams differ"
    masks = np.array([g[1] for g in got]).reshape(-1, crs)
    exp_masks = (mask * (1 << np.arange(cfg.rows))).sum(axis=1)
    assert (masks == exp_masks[:, None]).all(), f"{layer}: masks differ"
    lasts = np.array([g[2] for g in got]).reshape(-1, crs)
    assert (lasts[:, -1] == 1).all() and (lasts[:, :-1] == 0).all(), f"{layer}: last flags"


def _random_x(cfg, layer, rng):
    w = cfg.operand_width
    lo, hi = (-(1 << (w - 1)), 1 << (w - 1)) if cfg.operand_signed else (0, 1 << w)
    return rng.integers(lo, hi, (layer.batch, layer.channels, layer.height, layer.width))


@cocotb.test()
async def streams_match_golden_im2col(dut):
    """Directed and random layers: streams, masks, last flags and SRAM words read."""
    cfg = Config.from_dict(load_config_json())
    rng = np.random.default_rng(SEED)
    await _reset(dut)
    env = FeederEnv(dut, cfg)
    layers = LAYERS + [(random_descriptor(cfg, rng, max_vectors=3000),
                        float(rng.choice([1.0, 0.6]))) for _ in range(12)]
    for layer, ready_prob in layers:
        x = _random_x(cfg, layer, rng)
        env.load(layer, x)
        got = await env.run(layer, ready_prob, rng)
        assert int(dut.error.value) == 0, f"{layer}: error"
        _check(cfg, layer, x, got)
        words = int(dut.words_read.value)
        model = traffic(cfg, layer)
        assert words == model["words_read"], f"{layer}: {words} words read, model {model}"
        dut._log.info(f"{layer}: {len(got)} vectors match; words read {words}, explicit im2col "
                      f"{model['im2col_elements']} elements; stall cycles "
                      f"{int(dut.stall_cycles.value)} ({int(dut.fifo_stall_cycles.value)} "
                      f"backpressure), busy {int(dut.busy_cycles.value)}")


@cocotb.test()
async def illegal_descriptor_raises_error(dut):
    """A kernel wider than the pattern: ``error``, no SRAM read, no output, back to idle."""
    cfg = Config.from_dict(load_config_json())
    await _reset(dut)
    env = FeederEnv(dut, cfg)
    layer = FeederDescriptor.of(ConvLayer.conv(1, 1, 40, 40, 1, 3, cfg.feeder_pattern_width + 1))
    got = await env.run(layer, 1.0, np.random.default_rng(0), max_cycles=100)
    assert got == [] and int(dut.error.value) == 1 and int(dut.words_read.value) == 0
