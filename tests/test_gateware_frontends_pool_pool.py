"""The pooling unit alone, in the Amaranth simulator: every run of :func:`bpsa.plan.tiling.pool_plan`
(whole planes and row bands) with its operands written into the unit's buffer, the result
vectors gathered from its P stream, against :func:`bpsa.models.golden.pool2d` and
``pool2d_backward`` (ReLU's backward masked by ``x > 0``), on random shapes: kernels 1-3 per
axis, strides 1-3 (overlapping and non-overlapping windows), padding up to kernel // 2, values
from a narrow range so ties are frequent. The whole accelerator runs the same phases in
``tests/test_gateware_accelerator_pool.py`` (Amaranth) and under Verilator."""

import numpy as np
import pytest
from amaranth.sim import Simulator

from bpsa.config import Config
from bpsa.gateware.frontends.pool.pool import PoolEngine
from bpsa.gateware.results.psum_buffer import FLOAT_SPACING
from bpsa.models import float_pool, floating
from bpsa.models.golden import pool2d, pool2d_backward
from bpsa.sim.testbenches.pool_runs import PoolRuns

#: Three lanes (not a power of two), a small buffer and P so that layers cut into bands.
CFG = Config(name="pool_test", rows=2, cols=3, dataflows=["os"], dim_width=8,
             buf_a_depth=64, buf_b_depth=64, buf_p_depth=32, buf_pool_depth=256,
             pool_kinds=("max", "avg"))
#: bf16 operands, fp32 P.
CFG_BF16 = CFG.replace(name="pool_test_bf16", arithmetic="bf16", operand_width=16,
                       acc_width=32)
#: Unsigned operands, max only.
CFG_U = CFG.replace(name="pool_test_u", operand_width=6, operand_signed=False, acc_width=16,
                    pool_kinds=("max",))
#: Three planes at once (``pool_lanes = cols``): a buffer word and a P word a pixel of each.
CFG_L = CFG.replace(name="pool_test_lanes", pool_lanes=3)
#: The same in bf16.
CFG_BF16_L = CFG_BF16.replace(name="pool_test_bf16_lanes", pool_lanes=3)
#: And in fp16.
CFG_FP16_L = CFG_BF16_L.replace(name="pool_test_fp16_lanes", arithmetic="fp16")


def _layer(rng, cfg):
    while True:
        r, s = int(rng.integers(1, 4)), int(rng.integers(1, 4))
        sh, sw = int(rng.integers(1, 4)), int(rng.integers(1, 4))
        ph, pw = int(rng.integers(0, r // 2 + 1)), int(rng.integers(0, s // 2 + 1))
        h, w = int(rng.integers(r, 11)), int(rng.integers(s, 11))
        n, c = int(rng.integers(1, 3)), int(rng.integers(1, 3 * cfg.pool_lanes))
        kind = str(rng.choice(cfg.pool_kinds))
        return dict(n=n, c=c, h=h, w=w, r=r, s=s, stride=(sh, sw), pad=(ph, pw), kind=kind)


def _run_engine(cfg, phase, x, dy, lay, relu):
    """Every run of the layer's plan through the engine; the output tensor."""
    runs = PoolRuns(cfg, phase, x, dy, lay, relu)
    dut = PoolEngine(cfg)
    sim = Simulator(dut)
    sim.add_clock(1e-6)

    async def bench(ctx):
        for run in runs.runs:
            for a, v in enumerate(runs.words(run)):
                ctx.set(dut.write.addr, a)
                ctx.set(dut.write.data, v)
                ctx.set(dut.write.en, 1)
                await ctx.tick()
            ctx.set(dut.write.en, 0)
            ctx.set(dut.layer, runs.layer(run))
            ctx.set(dut.start, 1)
            await ctx.tick()
            ctx.set(dut.start, 0)
            got, last = {}, {}
            for cycle in range(200_000):
                if ctx.get(dut.acc.valid):
                    addr = ctx.get(dut.acc.payload.addr)
                    if cfg.is_float:     # P's fp32 adders do not forward a word's sum
                        assert cycle - last.get(addr, -FLOAT_SPACING) >= FLOAT_SPACING, \
                            f"two vectors for P word {addr} {cycle - last[addr]} cycles apart"
                        last[addr] = cycle
                    vec = [ctx.get(dut.acc.payload.data[j]) for j in range(cfg.cols)]
                    if cfg.pool_lanes == 1:
                        assert sum(v != 0 for v in vec) <= 1, "one element a vector"
                    got[addr] = [runs.add(a, b)
                                 for a, b in zip(got.get(addr, [0] * cfg.cols), vec)]
                await ctx.tick()
                if not ctx.get(dut.busy) and not ctx.get(dut.acc.valid):
                    break
            else:
                raise AssertionError("the run did not end")
            runs.gather(run, got)

    sim.add_testbench(bench)
    sim.run()
    return runs.result(), runs.plan


def _operands(rng, cfg, lay):
    lo, hi = (-3, 3) if cfg.operand_signed else (0, 5)
    x = rng.integers(lo, hi + 1, (lay["n"], lay["c"], lay["h"], lay["w"]))
    y = pool2d(x, lay["kind"], (lay["r"], lay["s"]), lay["stride"], lay["pad"])
    top = (1 << (cfg.operand_width - 1)) - 1 if cfg.operand_signed else (1 << cfg.operand_width) - 1
    dy = rng.integers(-top if cfg.operand_signed else 0, top + 1, y.shape)
    return x, y, dy


# seeds past the first ones in make test-long (the same checks on more random layers)
@pytest.mark.parametrize("cfg", [CFG, CFG_U, CFG_L], ids=lambda c: c.name)
@pytest.mark.parametrize("seed", [*range(8), *(pytest.param(s, marks=pytest.mark.long)
                                               for s in range(8, 16))])
def test_pool_forward_backward_random(cfg, seed):
    rng = np.random.default_rng(seed)
    lay = _layer(rng, cfg)
    x, y, dy = _operands(rng, cfg, lay)
    got, plan = _run_engine(cfg, "pool_forward", x, None, lay, False)
    np.testing.assert_array_equal(got, y, err_msg=f"forward {lay}")
    relu = bool(rng.integers(0, 2))
    want = pool2d_backward(dy, x, lay["kind"], (lay["r"], lay["s"]), lay["stride"], lay["pad"])
    if relu:
        want = want * (x > 0)
    got, _ = _run_engine(cfg, "pool_backward", x, dy, lay, relu)
    np.testing.assert_array_equal(got, want, err_msg=f"backward {lay} relu {relu}")


@pytest.mark.parametrize("cfg", [CFG, CFG_L], ids=lambda c: c.name)
def test_pool_bands(cfg):
    """A plane too large for the buffer: the forward and the backward run in row bands (with
    lanes: four planes, two blocks of three, the second one plane short)."""
    rng = np.random.default_rng(7)
    for kind in ("max", "avg"):
        lay = dict(n=1, c=1 if cfg.pool_lanes == 1 else 4, h=13, w=10, r=3, s=3,
                   stride=(2, 2), pad=(1, 1), kind=kind)
        x, y, dy = _operands(rng, cfg, lay)
        got, plan = _run_engine(cfg, "pool_forward", x, None, lay, False)
        assert plan["banded"] and len(plan["runs"]) > 1
        np.testing.assert_array_equal(got, y)
        got, plan = _run_engine(cfg, "pool_backward", x, dy, lay, True)
        assert plan["banded"] and len(plan["runs"]) > 1
        want = pool2d_backward(dy, x, kind, 3, 2, 1) * (x > 0)
        np.testing.assert_array_equal(got, want)


def test_pool_average_rounding_extremes():
    """Averages of the largest and smallest operands, and halves, round like the golden model
    (the divider's exactness at its bound is :func:`bpsa.spec.numeric.pool_window_limit`'s
    test)."""
    lay = dict(n=1, c=2, h=3, w=5, r=3, s=5, stride=(1, 1), pad=(0, 0), kind="avg")
    x = np.array([np.full((3, 5), 127), np.full((3, 5), -128)]).reshape(1, 2, 3, 5)
    x[0, 0, 0, 0] = 126
    got, _ = _run_engine(CFG, "pool_forward", x, None, lay, False)
    np.testing.assert_array_equal(got, pool2d(x, "avg", (3, 5), 1, 0))
    lay = dict(n=1, c=1, h=2, w=2, r=2, s=2, stride=(2, 2), pad=(0, 0), kind="avg")
    for v in (2, -2, 6, -6, 127, -128):           # v / 4: halves and quarters
        x = np.zeros((1, 1, 2, 2), dtype=np.int64)
        dy = np.full((1, 1, 1, 1), v)
        got, _ = _run_engine(CFG, "pool_backward", x, dy, lay, False)
        np.testing.assert_array_equal(got, pool2d_backward(dy, x, "avg", 2, 2, 0))


def _float_operands(rng, fmt, shape):
    """Encodings from a small set (ties are frequent): both zeros, a subnormal, small
    integers and halves of both signs, values 2**28 apart (their fp32 sums round, so the
    order of the additions shows), and now and then an infinity or a NaN."""
    vals = np.array([0.0, -0.0, 1.0, -1.0, 2.0, -2.0, 0.5, -0.5, 3.0, 1.5, -3.0, 2.0 ** 28,
                     -2.0 ** 28, 3 * 2.0 ** 27], dtype=np.float32)
    f = floating.float_format(fmt)
    pool = list(floating.from_float32(vals, fmt)) + [1, (1 << (f.bits - 1)) | 1]  # subnormals
    t = rng.choice(np.array(pool, dtype=np.int64), shape)
    specials = np.array([f.inf, f.inf | (1 << (f.bits - 1)), f.nan], dtype=np.int64)
    odd = rng.random(shape) < 0.03
    t[odd] = rng.choice(specials, int(odd.sum()))
    return t


# seeds past the first ones in make test-long (the same checks on more random layers)
@pytest.mark.parametrize("cfg", [CFG_BF16, CFG_BF16_L], ids=lambda c: c.name)
@pytest.mark.parametrize("seed", [*range(3), *(pytest.param(s, marks=pytest.mark.long)
                                               for s in range(3, 10))])
def test_float_pool_forward_backward_random(cfg, seed):
    """bf16: the unit's results in P equal bpsa.models.float_pool (max by the FP order, the
    first largest; the average's fp32 sum in window order times fp32(1 / (R S)), rounded
    once; max backward's dY added into P at the first largest; avg backward's sums of the
    covering windows' dY, scaled), zeros of both signs, subnormals, infinities and NaNs
    included."""
    rng = np.random.default_rng(100 + seed)
    lay = _layer(rng, cfg)
    x = _float_operands(rng, "bf16", (lay["n"], lay["c"], lay["h"], lay["w"]))
    args = (lay["kind"], (lay["r"], lay["s"]), lay["stride"], lay["pad"], "bf16")
    y = float_pool.pool2d(x, *args, requant=False)
    got, _ = _run_engine(cfg, "pool_forward", x, None, lay, False)
    np.testing.assert_array_equal(got & 0xFFFFFFFF, y, err_msg=f"forward {lay}")
    dy = _float_operands(rng, "bf16", y.shape)
    relu = bool(rng.integers(0, 2))
    want = float_pool.pool2d_backward(dy, x, *args, relu=relu)
    got, _ = _run_engine(cfg, "pool_backward", x, dy, lay, relu)
    np.testing.assert_array_equal(got & 0xFFFFFFFF, want, err_msg=f"backward {lay} relu {relu}")


@pytest.mark.parametrize("cfg", [CFG_BF16_L, CFG_FP16_L], ids=lambda c: c.name)
def test_float_pool_backward_lanes(cfg):
    """Floating point with ``pool_lanes``, max backward: the lanes whose maxima are the same
    element reach P as one vector (P's fp32 adders take a word's vectors FLOAT_SPACING cycles
    apart, which _run_engine checks; the unit used to send a lane a cycle, so P kept only the
    last lane's dY of a word). 1 x 1 windows (every lane's maximum the same element, the
    fuzzer's layer that found it: dX was 0 but in the last lane), then 2 x 2 windows whose
    lanes' maxima differ, overlapping (stride 1) and not, with and without ReLU, against
    bpsa.models.float_pool."""
    fmt = cfg.arithmetic
    rng = np.random.default_rng(514377414)
    for lay, relu in ((dict(n=2, c=5, h=14, w=1, r=1, s=1, stride=(1, 2), pad=(0, 0)), True),
                      (dict(n=1, c=4, h=3, w=4, r=1, s=1, stride=(1, 1), pad=(0, 0)), False),
                      (dict(n=1, c=3, h=4, w=5, r=2, s=2, stride=(1, 1), pad=(1, 0)), True),
                      (dict(n=2, c=3, h=5, w=4, r=2, s=2, stride=(2, 2), pad=(0, 1)), False)):
        lay["kind"] = "max"
        x = _float_operands(rng, fmt, (lay["n"], lay["c"], lay["h"], lay["w"]))
        args = ("max", (lay["r"], lay["s"]), lay["stride"], lay["pad"], fmt)
        dy = _float_operands(rng, fmt, float_pool.pool2d(x, *args, requant=False).shape)
        want = float_pool.pool2d_backward(dy, x, *args, relu=relu)
        got, _ = _run_engine(cfg, "pool_backward", x, dy, lay, relu)
        np.testing.assert_array_equal(got & 0xFFFFFFFF, want,
                                      err_msg=f"backward {lay} relu {relu}")


def test_float_pool_sums_in_the_documented_order():
    """The order of the fp32 additions shows where the sums round: a forward average's
    window ``[2**28, 1, -2**28]`` in row-major order sums to 0 (1 is lost), in any order
    starting with the two large values to 1; a dX element covered by three windows whose dY
    are ``[1, 2**28, -2**28]`` (top to bottom) sums bottom window first: 1. Both equal
    float_pool and differ from the other order."""
    enc = (lambda v: floating.from_float32(np.asarray(v, np.float32), "bf16")
           .astype(np.int64))
    big = 2.0 ** 28
    lay = dict(n=1, c=1, h=1, w=3, r=1, s=3, stride=(1, 1), pad=(0, 0), kind="avg")
    x = enc([[[[big, 1.0, -big]]]])
    got, _ = _run_engine(CFG_BF16, "pool_forward", x, None, lay, False)
    want = float_pool.pool2d(x, "avg", (1, 3), 1, 0, "bf16", requant=False)
    assert got[0, 0, 0, 0] & 0xFFFFFFFF == want[0, 0, 0, 0] == 0     # (2**28 + 1) - 2**28
    lay = dict(n=1, c=1, h=5, w=1, r=3, s=1, stride=(1, 1), pad=(0, 0), kind="avg")
    x = enc(np.ones((1, 1, 5, 1)))
    dy = enc([[[[1.0], [big], [-big]]]])
    got, _ = _run_engine(CFG_BF16, "pool_backward", x, dy, lay, False)
    want = float_pool.pool2d_backward(dy, x, "avg", (3, 1), 1, 0, "bf16")
    np.testing.assert_array_equal(got & 0xFFFFFFFF, want)
    third = floating.to_float32(np.uint32(want[0, 0, 2, 0]), "fp32")
    assert third == np.float32(1) / np.float32(3)        # (-2**28 + 2**28) + 1, scaled


# make test-long: the block's own Verilog with its cocotb testbench (its modules run under
# Verilator inside the accelerator's native tests in make test; the build is what costs)
@pytest.mark.cocotb
@pytest.mark.long
@pytest.mark.parametrize("preset, lanes", [("small_bf16", 1), ("small", 4), ("small_bf16", 4)])
def test_pool_verilator(preset, lanes):
    """The generated Verilog under Verilator (bpsa.sim.testbenches.tb_pool): random layers of
    both kinds, forward and backward, against the golden models (bf16 with one lane and int8
    with four, small's, in make test; bf16 with four lanes in make test-long)."""
    from bpsa.config import load_config
    from bpsa.sim.runner import run_cocotb
    cfg = load_config(preset).replace(pool_lanes=lanes)
    if lanes != load_config(preset).pool_lanes:
        cfg = cfg.replace(name=f"{preset}_lanes{lanes}")
    tests, failures = run_cocotb(cfg, "bpsa.sim.testbenches.tb_pool", top="pool")
    assert tests == 1 and failures == 0
