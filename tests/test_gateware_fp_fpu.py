"""The floating-point units (bpsa.gateware.fp.fpu) in the Amaranth simulator against the golden
model (bpsa.models.floating), on random and corner-case operands in every format."""

import gc
import warnings

import numpy as np
import pytest
from amaranth.hdl import UnusedElaboratable
from amaranth.sim import Simulator

from bpsa.gateware.fp.fpu import FloatAdder, FloatMac, FloatMultiplier
from bpsa.models import floating as fl
from bpsa.verify.float_operands import (corner_accumulators, corner_operands,
                                        random_accumulators, random_operands)

FORMATS = ("bf16", "fp16", "fp32")


def run_macs(fmt, triples):
    mac = FloatMac(fmt)
    got = []

    async def bench(ctx):
        lat = FloatMac.LATENCY
        for t in range(len(triples) + lat):
            if t < len(triples):
                acc, a, b = triples[t]
                ctx.set(mac.acc, acc)
                ctx.set(mac.a, a)
                ctx.set(mac.b, b)
            await ctx.tick()
            if t >= lat - 1 and len(got) < len(triples):
                got.append(ctx.get(mac.result))

    sim = Simulator(mac)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return got


@pytest.mark.parametrize("fmt", FORMATS)
def test_mac_units_match_the_golden_model(fmt):
    rng = np.random.default_rng(5)
    ops = corner_operands(fmt)
    triples = [(acc, a, b) for acc in corner_accumulators()[::2] for a in ops for b in ops[::5]]
    a, b = random_operands(rng, fmt, 2500), random_operands(rng, fmt, 2500)[::-1]
    triples += list(zip(random_accumulators(rng, a, b, fmt), a, b))
    got = run_macs(fmt, triples)
    want = [fl.mac(acc, x, y, fmt) for acc, x, y in triples]
    bad = [(hex(c), hex(x), hex(y), hex(g), hex(w))
           for (c, x, y), g, w in zip(triples, got, want) if g != w]
    assert len(got) == len(triples)
    assert not bad, f"{len(bad)} of {len(triples)} differ, e.g. {bad[:4]}"


def test_unknown_format_is_refused():
    # the half-built component is never elaborated: collect it while that is expected
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnusedElaboratable)
        for unit in (FloatAdder, FloatMultiplier, FloatMac):
            with pytest.raises(ValueError, match="floating-point format must be one of"):
                unit("fp8")
        gc.collect()
