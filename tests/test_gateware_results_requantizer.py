"""The store path's requantization against ``bpsa.models.golden.requantize`` (numpy, Python
ints): random and edge accumulators (extremes, exact halves either side of zero, values at
the saturation bounds) for every shift, signed and unsigned operands, and the pass-through;
with the ReLU (RELU) on and off."""

import random

import numpy as np
import pytest
from amaranth.sim import Simulator

from bpsa.config import Config
from bpsa.gateware.results.requantizer import LATENCY, Requantizer
from bpsa.models.golden import requantize


def _edges(acc_bits, shift, op_bits):
    lo, hi = -(1 << (acc_bits - 1)), (1 << (acc_bits - 1)) - 1
    vals = {lo, hi, 0, 1, -1}
    if shift:
        half = 1 << (shift - 1)
        vals |= {half, -half, half - 1, -half - 1, 3 * half, -3 * half}
    for bound in ((1 << (op_bits - 1)) - 1, -(1 << (op_bits - 1)), (1 << op_bits) - 1):
        for d in (-1, 0, 1):
            vals.add((bound << shift) + d)
    return [v for v in vals if lo <= v <= hi]


@pytest.mark.parametrize("signed", [True, False])
def test_requantize_matches_golden(signed):
    cfg = Config(name="rq", rows=2, cols=3, operand_width=6, operand_signed=signed,
                 acc_width=14, buf_p_depth=16)
    dut = Requantizer(cfg)
    rng = random.Random(4 + signed)
    checked = saturated = 0

    async def bench(ctx):
        nonlocal checked, saturated
        for shift in range(cfg.acc_width):
            vals = _edges(cfg.acc_width, shift, cfg.operand_width)
            vals += [rng.randint(-(1 << 13), (1 << 13) - 1) for _ in range(30)]
            ctx.set(dut.shift, shift)
            for i in range(0, len(vals), cfg.cols):
                word = (vals[i:i + cfg.cols] + [0] * cfg.cols)[:cfg.cols]
                for j, v in enumerate(word):
                    ctx.set(dut.word[j], v)
                ctx.set(dut.enable, 0)
                await ctx.tick().repeat(LATENCY)
                raw = ctx.get(dut.out)
                assert [(raw >> (14 * j)) & 0x3FFF for j in range(3)] == [v & 0x3FFF
                                                                         for v in word]
                ctx.set(dut.enable, 1)
                await ctx.tick().repeat(LATENCY)
                raw = ctx.get(dut.out)
                want = requantize(np.array(word), shift, 6, signed)
                got = [(raw >> (6 * j)) & 0x3F for j in range(3)]
                assert got == [int(v) & 0x3F for v in want], (shift, word, got, want)
                assert raw >> 18 == 0                 # lanes packed from bit 0, rest zero
                # the store path's ReLU: max(0, v) after the requantization, and of the
                # accumulators without it
                ctx.set(dut.relu, 1)
                await ctx.tick().repeat(LATENCY)
                raw = ctx.get(dut.out)
                got = [(raw >> (6 * j)) & 0x3F for j in range(3)]
                assert got == [int(max(v, 0)) & 0x3F for v in want], (shift, word, got)
                ctx.set(dut.enable, 0)
                await ctx.tick().repeat(LATENCY)
                raw = ctx.get(dut.out)
                assert [(raw >> (14 * j)) & 0x3FFF for j in range(3)] == [max(v, 0) & 0x3FFF
                                                                         for v in word]
                ctx.set(dut.relu, 0)
                checked += 3
                saturated += sum(int(v) in (-32, 31, 0, 63) for v in want)

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert checked > 600 and saturated > 50


def test_golden_requantize_by_hand():
    # halves round up (towards +infinity); saturation at the operand range
    assert requantize(np.array([5, -5, 6, -6, 7, 1000, -1000]), 1, 8).tolist() == [
        3, -2, 3, -3, 4, 127, -128]
    assert requantize(np.array([-1, 300, 255]), 0, 8, signed=False).tolist() == [0, 255, 255]
    assert requantize(np.array([2 ** 40 + 2 ** 39]), 40, 4).tolist() == [2]


@pytest.mark.parametrize("fmt", ["bf16", "fp16"])
def test_float_store_rounds_to_the_operand_format(fmt):
    """Floating point: each fp32 sum rounded to the operand format by the contract's conversion
    (floating.store: floating.convert, checked against SoftFloat, with the sum read as an
    accumulator, a subnormal as zero), or passed as fp32; the contract's ReLU
    (floating.relu) on either; corner cases (ties, the smallest normals, overflow, NaN,
    infinities, zeros, subnormals) and random encodings."""
    from bpsa.models import floating
    from bpsa.spec.numeric import FLOAT_FORMATS
    from bpsa.verify.float_operands import corner_accumulators
    cfg = Config(rows=2, cols=3, arithmetic=fmt, operand_width=16, acc_width=32,
                 dataflows=["os"])
    f = FLOAT_FORMATS[fmt]
    rng = random.Random(9)
    # around the format's smallest normal and largest finite, ties at its significand
    special = [((f.emin + 127) << 23) + d for d in (-2, -1, 0, 1)] + \
        [((f.emin + 127 - 1) << 23) | (1 << 22) | s for s in (0, 1)] + \
        [((f.emax + 127) << 23) | (((1 << f.man_bits) - 1) << (23 - f.man_bits)) | t
         for t in (0, (1 << (22 - f.man_bits)), (1 << (22 - f.man_bits)) - 1)] + \
        [(127 << 23) | (1 << (22 - f.man_bits)) | (k << (23 - f.man_bits)) for k in (0, 1)]
    values = corner_accumulators() + special + [v | 0x80000000 for v in special] + \
        [rng.randrange(1 << 32) for _ in range(600)] + \
        [((127 + rng.randrange(-40, 41)) << 23) | rng.randrange(1 << 23) for _ in range(300)]
    values += [0] * (-len(values) % cfg.cols)
    words = [values[i:i + cfg.cols] for i in range(0, len(values), cfg.cols)]
    dut = Requantizer(cfg)
    got = {}

    async def bench(ctx):
        for enable in (0, 1):
            for relu in (0, 1):
                ctx.set(dut.enable, enable)
                ctx.set(dut.relu, relu)
                # a word a cycle: word i leaves LATENCY cycles after it came
                for i in range(len(words) + LATENCY - 1):
                    if i < len(words):
                        ctx.set(dut.word, words[i])
                    await ctx.tick()
                    if i < LATENCY - 1:
                        continue
                    out = ctx.get(dut.out)
                    w = f.bits if enable else 32
                    got[enable, relu, i - LATENCY + 1] = [(out >> (j * w)) & ((1 << w) - 1)
                                                          for j in range(cfg.cols)]

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    for (enable, relu, i), lanes in got.items():
        for v, g in zip(words[i], lanes):
            want = floating.store(v, fmt) if enable else v
            if relu:
                want = floating.relu(want, fmt if enable else "fp32")
            assert g == want, (enable, relu, hex(v), hex(g), hex(want))
