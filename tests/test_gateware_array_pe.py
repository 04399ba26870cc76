"""The PE: Amaranth-simulator tests against the cycle model and numpy, and the cocotb/Verilator
testbench of its generated Verilog."""

import numpy as np
import pytest
from amaranth.sim import Simulator

from bpsa.config import Config
from bpsa.gateware.array.pe import PE
from bpsa.models.pe_model import (OUTPUTS, PORTS, PEModel, PEParams, random_stimulus,
                                  with_zero_flags)
from bpsa.sim.testbenches.pe_streams import directed_stream

CONFIGS = {
    "all_int8": Config(name="all_int8"),
    "unsigned_int6": Config(name="unsigned_int6", operand_width=6, operand_signed=False,
                            acc_width=16),
    "plain_os": Config(name="plain_os", dataflows=["os"], zero_gating=False,
                       reserve_registers=False),
    "os_no_gating": Config(name="os_no_gating", dataflows=["os"], zero_gating=False),
    "ws_only": Config(name="ws_only", dataflows=["ws"]),
    "interleaved_int16": Config(name="interleaved_int16", dataflows=["interleaved"],
                                operand_width=16, acc_width=40),
}

#: MX PEs (docs/architecture/mx.md): element codes of every kind (zeros, NaN codes) against
#: the cycle model's block sums; the directed numpy streams are integer-only
MX_CONFIGS = {
    "mxint8": Config(name="mxint8_pe", arithmetic="mxint8", operand_width=8, acc_width=21,
                     dataflows=["os", "ws", "is", "interleaved"]),
    "mxfp8_e4m3": Config(name="mxfp8_pe", arithmetic="mxfp8_e4m3", operand_width=8,
                         operand_signed=False, acc_width=43,
                         dataflows=["os", "ws", "is", "interleaved"]),
}


def modes_of(cfg):
    modes = []
    if cfg.has("os"):
        modes.append("os")
    if cfg.has("ws") or cfg.has("is"):
        modes.append("hold")
    if cfg.has("interleaved"):
        modes.append("interleaved")
    return modes


CASES = [(name, mode) for name in sorted(CONFIGS) for mode in modes_of(CONFIGS[name])]
MX_CASES = [(name, mode) for name in sorted(MX_CONFIGS) for mode in modes_of(MX_CONFIGS[name])]


def run(dut, testbench):
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(testbench)
    sim.run()


def drive(ctx, dut, c):
    for name in PORTS.values():
        if hasattr(dut, name):
            ctx.set(getattr(dut, name), 0)
    for k, v in c.items():
        ctx.set(getattr(dut, PORTS[k]), v)


@pytest.mark.parametrize("name,mode", CASES + MX_CASES)
@pytest.mark.parametrize("seed", [1, 2])
def test_random_streams_match_model(name, mode, seed):
    """Every output, every cycle, equals the cycle model on a random stream."""
    cfg = {**CONFIGS, **MX_CONFIGS}[name]
    dut = PE(cfg)

    async def tb(ctx):
        model = PEModel(cfg)
        stim = random_stimulus(cfg, mode, 600, np.random.default_rng([seed, len(mode)]))
        for cycle, c in enumerate(stim):
            drive(ctx, dut, c)
            await ctx.tick()
            expected = model.step(c)
            for out in OUTPUTS:
                if hasattr(dut, out):
                    got = ctx.get(getattr(dut, out))
                    assert got == expected[out], \
                        f"{mode} cycle {cycle}: {out} = {got}, expected {expected[out]}"

    run(dut, tb)


@pytest.mark.parametrize("name,mode", CASES)
@pytest.mark.parametrize("trial", range(4))
def test_directed_streams_match_numpy(name, mode, trial):
    """Dot products with preload (OS), partial sums (HOLD), G and the context's weights on the
    chains (interleaved) and the number of gated MACs, against numpy over whole streams."""
    cfg = CONFIGS[name]
    rng = np.random.default_rng([trial, 7])
    kw = {}
    if mode == "os":
        kw["preload"] = int(rng.integers(-5000, 5000))
    else:
        kw["held"] = 0 if trial == 0 else None
    stream = directed_stream(cfg, mode, int(rng.integers(2, 150)), rng, **kw)
    dut = PE(cfg)

    async def tb(ctx):
        gated = 0
        for cycle, c in enumerate(stream.cycles + [{}]):
            drive(ctx, dut, c)
            await ctx.tick()
            gated += ctx.get(dut.gated)
            for out, value in stream.checks.get(cycle, {}).items():
                got = ctx.get(getattr(dut, out))
                assert got == value, f"cycle {cycle}: {out} = {got}, expected {value}"
        assert gated == stream.gated

    run(dut, tb)


def test_zero_gating_freezes_multiplier_inputs():
    """While gated, the multiplier's operand registers keep the last fired values."""
    cfg = Config(dataflows=["os"])
    dut = PE(cfg)
    seen = []

    async def tb(ctx):
        for a, b, valid in [(3, 5, 1), (0, 7, 1), (9, 0, 1), (4, 4, 0), (0, 0, 1), (2, -2, 1)]:
            drive(ctx, dut, with_zero_flags(PEParams.of(cfg),
                                            {"h": a, "h_valid": valid, "v": b, "v_valid": 1}))
            seen.append((ctx.get(dut.mul_a), ctx.get(dut.mul_b), ctx.get(dut.gated)))
            await ctx.tick()
        seen.append((ctx.get(dut.mul_a), ctx.get(dut.mul_b), ctx.get(dut.gated)))

    run(dut, tb)
    # The operand registers take a slot's operands at its clock edge, and only when it fires.
    operands = [s[:2] for s in seen]
    assert operands == [(0, 0), (3, 5), (3, 5), (3, 5), (3, 5), (3, 5), (2, -2)]
    # gated is registered: it reports the previous cycle; an invalid slot is not gated.
    assert [s[2] for s in seen[1:]] == [0, 1, 1, 0, 1, 0]


@pytest.mark.cocotb
# plain_os and interleaved_int16 in make test-long: the PE's Verilog runs inside every
# accelerator in make test, and the ECP5 builds below cover both the int8 and int16 PEs
@pytest.mark.parametrize("name", ["all_int8", *(pytest.param(n, marks=pytest.mark.long)
                                                for n in ("plain_os", "interleaved_int16"))])
def test_pe_verilator(name):
    """The generated Verilog under Verilator through cocotb: random streams against the cycle
    model, directed streams against numpy."""
    from bpsa.sim.runner import run_cocotb
    tests, failures = run_cocotb(CONFIGS[name], "bpsa.sim.testbenches.tb_pe", top="pe")
    assert tests == 2 and failures == 0


@pytest.mark.cocotb
# the MX PE's Verilog in make test-long (the MX arrays' and the MX accelerator's Verilog run
# under Verilator in make test)
@pytest.mark.parametrize("name", ["all_int8", pytest.param("interleaved_int16", marks=pytest.mark.long),
                                  pytest.param("mxfp8_e4m3", marks=pytest.mark.long)])
def test_pe_ecp5_dsp_verilator(name):
    """The Verilog built for the ECP5, its multiplier a MULT18X18D with input and output
    registers (MXFP8: unsigned, of the shifted significands), under Verilator with the
    primitive's model: the same random (MXFP8: random only, against the cycle model) and
    directed streams as the portable PE."""
    from bpsa.sim.runner import run_cocotb
    # the directed streams' expectations are integer numpy: not for FP8 element codes
    fp8 = name in MX_CONFIGS and not MX_CONFIGS[name].operand_signed
    tests, failures = run_cocotb({**CONFIGS, **MX_CONFIGS}[name], "bpsa.sim.testbenches.tb_pe",
                                 top="pe", device="ecp5",
                                 testcase="random_streams_match_model" if fp8 else None)
    assert tests == (1 if fp8 else 2) and failures == 0
