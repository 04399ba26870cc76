"""The zero-free gradient engine (the walker on its own output-stationary array) against the
golden models in the Amaranth simulator, run by run with the testbench's helpers
(:mod:`bpsa.sim.testbenches.tb_zf_gradient`): integers (``bpsa.models.golden``) and MX
(``bpsa.models.mx.conv_gradient(..., walker=True)``), bit for bit, and the run's cycles
against the cycle model. The Verilog runs under Verilator in ``test_verify_native.py``."""

import numpy as np
import pytest
from amaranth.sim import Simulator

from bpsa.config import Config
from bpsa.gateware.frontends.zero_free.gradient_engine import ZeroFreeGradientEngine
from bpsa.sim.testbenches import tb_zf_gradient as tb
from bpsa.spec.layer import parse_layer

#: rows < B (two row groups an X word), non-square.
CFG_INT = Config(name="zg_r2_c3_b4", rows=2, cols=3, feeder_bus_width=4, dim_width=7,
                 buf_a_depth=1024, buf_b_depth=512, dataflows=["os"])
CFG_MXINT8 = Config(name="zg_r2_c3_b4_mxint8", rows=2, cols=3, feeder_bus_width=4, dim_width=7,
                    buf_a_depth=1024, buf_b_depth=512, dataflows=["os"], arithmetic="mxint8",
                    operand_width=8, acc_width=21)
CFG_MXFP8 = Config(name="zg_r4_c2_b4_mxfp8", rows=4, cols=2, feeder_bus_width=4, dim_width=7,
                   buf_a_depth=1024, buf_b_depth=512, dataflows=["os"],
                   arithmetic="mxfp8_e4m3", operand_width=8, operand_signed=False,
                   acc_width=43)


def run_layer(cfg, layer, seed, bands=1, specials=False):
    """dW of ``layer`` on the engine, the golden dW, and the engine's and the model's
    cycles. ``specials`` (MX): a NaN in X, a NaN in dY's first row (whose X row is in the
    padding for the first kernel row), values that saturate E4M3 under the floor scale."""
    rng = np.random.default_rng(seed)
    x, dy = tb.random_operands(cfg, layer, rng)
    if specials:
        x[0, 0, 1, 10], dy[0, 0, 0, 5] = np.nan, np.nan
        x[0, 1, 0, :32] = 500.0 * (1 - 2 * (np.arange(32) % 2))
    want = tb.expected(cfg, x, dy, layer)
    ops = tb.operands(cfg, x, dy)
    got = np.zeros(want.shape, want.dtype)
    dut = ZeroFreeGradientEngine(cfg)
    cycles = []

    async def bench(ctx):
        for run in tb.runs(cfg, layer, bands):
            desc = tb.descriptor(layer, run)
            xw, dw = tb.run_words(cfg, ops, run)
            for port, base, words in ((dut.x_write, desc["x_base"], xw),
                                      (dut.dy_write, desc["dy_base"], dw)):
                for i, word in enumerate(words):
                    ctx.set(port.en, 1)
                    ctx.set(port.addr, base + i)
                    ctx.set(port.data, word)
                    await ctx.tick()
                ctx.set(port.en, 0)
            ctx.set(dut.layer, desc)
            ctx.set(dut.start, 1)
            await ctx.tick()
            ctx.set(dut.start, 0)
            rows, busy = [], 1
            for _ in range(200_000):
                busy += ctx.get(dut.busy)
                if ctx.get(dut.zg.valid):
                    p = ctx.get(dut.zg.payload)
                    rows.append((int(p.addr), [int(v) for v in p.data],
                                 int(p.scale_row) if cfg.is_mx else None,
                                 [int(v) for v in p.scale_cols] if cfg.is_mx else None))
                if ctx.get(dut.done):
                    break
                await ctx.tick()
            else:
                raise AssertionError(f"not done: {desc}")
            await ctx.tick()
            tb.add_rows(cfg, got, layer, run, rows)
            cycles.append((busy, tb.model_cycles(cfg, desc)))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return got, want, cycles


LAYERS = ["N=2,C=3,H=2,W=36,K=4,R=2,S=3,pad=1",      # X blocks cut the rows; two images
          "N=2,C=5,H=4,W=40,K=4,R=3,pad=1",           # two X blocks a word, two bands
          "C=3,H=5,W=70,K=3,R=3,S=2,stride=2,pad=1",  # stride 2: X blocks every 16 positions
          "C=6,H=3,W=9,K=5,R=2,dilation=2,pad=2",         # rows shorter than the spacing
          "C=2,H=2,W=36,K=2,R=1,S=3,stride=1x3,pad=0x2"]


@pytest.mark.parametrize("cfg", [CFG_INT, CFG_MXINT8, CFG_MXFP8], ids=lambda c: c.name)
@pytest.mark.parametrize("index", [0, *(pytest.param(i, marks=pytest.mark.long)
                                       for i in range(1, len(LAYERS)))])
def test_engine_equals_golden(cfg, index):
    """dW of the layer (its runs, 1 or 2 row bands) equals the golden model's bit for bit,
    and every run's cycles the cycle model's (the first layer in make test, every one in
    make test-long)."""
    layer = tb.check_layer(cfg, parse_layer(LAYERS[index]))
    got, want, cycles = run_layer(cfg, layer, 40 + index, bands=1 + index % 2)
    bad = np.argwhere(got != want)
    assert not len(bad), f"{len(bad)} of {got.size} differ, first {tuple(bad[0])}"
    assert [c for c, _ in cycles] == [m for _, m in cycles]


@pytest.mark.long           # a Verilator build each (make test keeps under its budget)
@pytest.mark.cocotb
@pytest.mark.parametrize("preset", ["small_mxint8", "small_mxfp8", "small"])
def test_engine_verilog_equals_golden(preset):
    """The engine's Verilog (top ``zg_engine``) under Verilator (``tb_zf_gradient``): dW of
    random layers equals the golden model's and each layer's cycles the cycle model's
    (make test-long; ``bpsa fuzz`` in MX runs it on random gradient layers)."""
    from bpsa.config import load_config
    from bpsa.sim.simcmd import run_zg_layers
    layers = [parse_layer(t) for t in ("N=2,C=5,H=3,W=40,K=6,R=3,pad=1",
                                       "C=4,H=5,W=70,K=3,R=3,S=2,stride=2,pad=1")]
    res = run_zg_layers(load_config(preset), layers, seed=3, progress=False)
    assert [r["match"] for r in res] == [True, True]
    assert [r["cycles"] for r in res] == [r["model_cycles"] for r in res]


@pytest.mark.parametrize("cfg", [CFG_MXINT8, CFG_MXFP8], ids=lambda c: c.name)
def test_engine_specials_equal_golden(cfg):
    """NaN in X and in dY (a NaN dY block met by a padding row folds nothing), saturating
    blocks: bit for bit, NaN where the contract puts it."""
    layer = tb.check_layer(cfg, parse_layer("C=3,H=4,W=40,K=2,R=3,pad=1"))
    got, want, _ = run_layer(cfg, layer, 7, specials=True)
    nan = np.uint32(0x7FC00000)
    assert (want == nan).any() and not (want == nan).all()
    assert np.array_equal(got, want)


@pytest.mark.parametrize("field", ["channels", "out_width", "kernel_h"])
def test_engine_flags_a_zero_size(field):
    """A descriptor with a zero size ends at once with ``error`` (no vector, no hang), and
    the next run is right."""
    cfg = CFG_MXINT8
    layer = tb.check_layer(cfg, parse_layer("C=2,H=2,W=5,K=2,R=1"))
    run = next(tb.runs(cfg, layer))
    dut = ZeroFreeGradientEngine(cfg)
    seen = []

    async def bench(ctx):
        for bad in (True, False):
            ctx.set(dut.layer, {**tb.descriptor(layer, run), **({field: 0} if bad else {})})
            ctx.set(dut.start, 1)
            await ctx.tick()
            ctx.set(dut.start, 0)
            for cycle in range(200):
                if ctx.get(dut.done):
                    seen.append((bad, cycle, ctx.get(dut.error)))
                    break
                await ctx.tick()
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert [(bad, err) for bad, _, err in seen] == [(True, 1), (False, 0)]
    assert seen[0][1] < 20
