"""The floating-point PE (bpsa.gateware.array.pe_float) in the Amaranth simulator against the golden
model (bpsa.models.floating.os_partials): contexts of random lengths with bubbles between
slots (a stalling feeder), zero and special operands, contexts ending as close as an array of
one row allows (Config.context_gap), preloads shifted in while other contexts run, and the
five partials shifted out of the reserve chain side by side."""

import gc
import warnings

import numpy as np
import pytest
from amaranth.hdl import UnusedElaboratable
from amaranth.sim import Simulator

from bpsa.config import FLOAT_PARTIALS, Config
from bpsa.gateware.array.pe_float import FloatPE
from bpsa.models import floating as fl
from bpsa.sim.gemm import random_float_operands

P = FLOAT_PARTIALS


def _config(fmt, zero_gating=True):
    return Config(rows=1, cols=1, arithmetic=fmt, operand_width=16, acc_width=32,
                  dataflows=("os",), zero_gating=zero_gating)


def _stimulus(fmt, rng, n_ctx, bubble):
    """Per context: operands, the slots' cycles; a context ends at least ``context_gap``
    cycles after the one before, its drain shifts ``1 + mac_latency`` cycles after its end,
    as in an array of one row."""
    gap = _config(fmt).context_gap
    contexts, cycles, last_end = [], [], -100
    for _ in range(n_ctx):
        k = int(rng.integers(1, 18))
        a = [int(x) for x in random_float_operands(fmt, (k,), rng, 0.25, 0.03)]
        b = [int(x) for x in random_float_operands(fmt, (k,), rng, 0.25, 0.03)]
        slots = []
        for i in range(k):
            while rng.random() < bubble:
                cycles.append(None)
            if i == k - 1:
                while len(cycles) < last_end + gap:
                    cycles.append(None)
            slots.append(len(cycles))
            cycles.append((a[i], b[i], int(i == k - 1)))
        last_end = len(cycles) - 1
        preload = [int(x) for x in rng.integers(0, 1 << 32, P)]
        preload[int(rng.integers(P))] = 0
        contexts.append({"a": a, "b": b, "end": last_end, "preload": preload})
    cycles += [None] * 16
    return contexts, cycles


def run_pe(fmt, contexts, cycles, zero_gating=True):
    cfg = _config(fmt, zero_gating)
    dut = FloatPE(cfg)
    f = fl.float_format(fmt)
    shifts = {c["end"] + 1 + cfg.mac_latency: n for n, c in enumerate(contexts)}
    out = [None for _ in contexts]
    counts = {"fired": 0, "gated": 0}

    def zero(x):
        return int((x >> f.man_bits) & ((1 << f.exp_bits) - 1) == 0)

    async def bench(ctx):
        for t, slot in enumerate(cycles + [None] * 12):
            a, b, last = slot if slot is not None else (0, 0, 0)
            ctx.set(dut.h_in, a)
            ctx.set(dut.v_in, b)
            ctx.set(dut.h_valid_in, int(slot is not None))
            ctx.set(dut.v_valid_in, int(slot is not None))
            ctx.set(dut.h_last_in, last)
            if zero_gating:
                ctx.set(dut.h_zero_in, zero(a))
                ctx.set(dut.v_zero_in, zero(b))
            n = shifts.get(t)
            ctx.set(dut.shift, int(n is not None))
            for k in range(P):
                ctx.set(dut.chain_in[k], contexts[n]["preload"][k] if n is not None else 0)
            if n is not None:
                out[n] = [ctx.get(dut.chain_out[k]) for k in range(P)]
            await ctx.tick()
            counts["fired"] += ctx.get(dut.fired)
            counts["gated"] += ctx.get(dut.gated)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return out, counts


def _expected(contexts, fmt):
    want = []
    for n, c in enumerate(contexts):
        start = contexts[n - 2]["preload"] if n >= 2 else [0] * P
        want.append(fl.os_partials(c["a"], c["b"], fmt, start))
    return want


@pytest.mark.parametrize("fmt", ["bf16", "fp16"])
@pytest.mark.parametrize("bubble", [0.0, 0.3])
def test_partials_match_the_golden_model(fmt, bubble):
    rng = np.random.default_rng([len(fmt), int(bubble * 10)])
    contexts, cycles = _stimulus(fmt, rng, 30, bubble)
    got, counts = run_pe(fmt, contexts, cycles)
    want = _expected(contexts, fmt)
    bad = [(n, [hex(x) for x in g], [hex(x) for x in w])
           for n, (g, w) in enumerate(zip(got, want)) if g != w]
    assert not bad, f"{len(bad)} of {len(want)} contexts differ, e.g. {bad[:2]}"
    f = fl.float_format(fmt)

    def zero(x):
        return (x >> f.man_bits) & ((1 << f.exp_bits) - 1) == 0
    slots = [(x, y) for c in contexts for x, y in zip(c["a"], c["b"])]
    assert counts["gated"] == sum(zero(x) or zero(y) for x, y in slots)
    assert counts["fired"] + counts["gated"] == len(slots)


def test_without_zero_gating_every_slot_fires_and_zeros_still_skip():
    rng = np.random.default_rng(7)
    contexts, cycles = _stimulus("bf16", rng, 8, 0.2)
    got, counts = run_pe("bf16", contexts, cycles, zero_gating=False)
    assert got == _expected(contexts, "bf16")
    assert counts["gated"] == 0
    assert counts["fired"] == sum(len(c["a"]) for c in contexts)


def test_each_pe_refuses_the_other_arithmetic():
    from bpsa.gateware.array.pe import PE
    # the half-built components are never elaborated: collect them while that is expected
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnusedElaboratable)
        with pytest.raises(ValueError, match="FloatPE needs a floating-point arithmetic"):
            FloatPE(Config())
        with pytest.raises(ValueError, match="PE is the integer PE; arithmetic 'bf16'"):
            PE(_config("bf16"))
        gc.collect()
