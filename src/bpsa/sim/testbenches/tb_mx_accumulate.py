"""cocotb testbench of the MX block accumulator (generated Verilog of the ``mx_accumulate`` top
under Verilator) against the golden model's :func:`bpsa.models.mx.accumulate_block`: random
and corner-case block sums, scales and fp32 accumulators, a block every cycle, every result
compared ``LATENCY`` cycles after its inputs. ``BPSA_SEED`` (default 1) seeds the cases; the
Amaranth-simulator test draws its cases from :func:`cases` too."""

import os

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge, ReadOnly, RisingEdge

from bpsa.config import MX_WIDTHS
from bpsa.models.mx import accumulate_block
from bpsa.sim.runner import load_config_json
from bpsa.spec.numeric import MX_FORMATS

#: Cycles from a block's inputs to its result (``MxBlockAccumulator.LATENCY``: two stages and
#: the fp32 adder's five); the Amaranth test checks the class's constant equals it.
LATENCY = 7


def cases(fmt, n, seed):
    """``n`` (sum word, scale_a, scale_b, acc) with corner cases: zero, the extreme sums, the
    NaN flag (FP8), NaN scales, the smallest and largest scales, accumulators of every kind."""
    rng = np.random.default_rng(seed)
    f = MX_FORMATS[fmt]
    bits = MX_WIDTHS[fmt][1]
    w = bits if f.is_int else bits - 1
    out = []
    for _ in range(n):
        kind = rng.integers(0, 6)
        if kind == 0:
            s = 0
        elif kind == 1:
            s = int(rng.choice([-(1 << (w - 1)), (1 << (w - 1)) - 1, 1, -1]))
        else:
            s = int(rng.integers(-(1 << int(rng.integers(1, w))), 1 << int(rng.integers(1, w))))
        word = s % (1 << w)
        if not f.is_int and rng.random() < 0.05:
            word |= 1 << w                                  # the NaN flag
        sa, sb = (int(rng.choice([0, 1, 127, 253, 254, 255])) if rng.random() < 0.15
                  else int(rng.integers(60, 195)) for _ in range(2))
        r = rng.random()
        if r < 0.1:
            acc = int(rng.choice([0, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0x00000001,
                                  0x00800000, 0x7F7FFFFF, 0xFF7FFFFF]))
        elif r < 0.55:      # near the block's own magnitude: cancellation and rounding
            e = sa + sb - 254 + 2 * f.quantum_exp + max(abs(s).bit_length(), 1)
            mant = int(rng.integers(0, 1 << 23))
            ex = min(max(e + int(rng.integers(-30, 3)) + 127, 1), 254)
            acc = (int(rng.integers(0, 2)) << 31) | (ex << 23) | mant
        else:
            acc = int(rng.integers(0, 1 << 32))
        out.append((word, sa, sb, acc))
    return out


def golden(fmt, word, sa, sb, acc):
    f = MX_FORMATS[fmt]
    bits = MX_WIDTHS[fmt][1]
    w = bits if f.is_int else bits - 1
    s = word % (1 << w)
    s = s - (1 << w) if s >> (w - 1) else s
    flag = 0 if f.is_int else word >> w
    return accumulate_block(acc, s, sa + sb - 254 + 2 * f.quantum_exp,
                            bool(flag or sa == 255 or sb == 255))


@cocotb.test()
async def blocks_match_the_golden_model(dut):
    fmt = load_config_json()["arithmetic"]
    stim = cases(fmt, 4000, int(os.environ.get("BPSA_SEED", "1")))
    want = [golden(fmt, *c) for c in stim]
    bits = MX_WIDTHS[fmt][1]
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    dut.rst.value = 1
    await RisingEdge(dut.clk)
    dut.rst.value = 0
    for k, (word, sa, sb, acc) in enumerate(stim + [(0, 0, 0, 0)] * LATENCY):
        await FallingEdge(dut.clk)
        dut.sum.value = word % (1 << bits)
        dut.scale_a.value, dut.scale_b.value, dut.acc.value = sa, sb, acc
        await RisingEdge(dut.clk)
        await ReadOnly()
        i = k - (LATENCY - 1)
        if 0 <= i < len(stim):
            got = int(dut.result.value)
            assert got == want[i], f"block {i} {stim[i]}: {got:#010x}, want {want[i]:#010x}"
