"""Traditional im2col address generator (the dense matrix walker of
src/bpsa/gateware/frontends/bp_im2col/im2col_addr.py): every beat of both streams against a naive Python model of the
tiled GEMM walk, under random backpressure, on 4x4 and 3x5 arrays; refused descriptors; the Verilog
top."""

import random
from typing import NamedTuple

import numpy as np
import pytest
from amaranth.sim import Simulator

from bpsa.config import Config, load_config
from bpsa.gateware.frontends.bp_im2col.im2col_addr import (
    COUNTERS,
    DESC_FIELDS,
    Im2colAddressGenerator,
    Im2colError,
    mat_width,
)

ARRAYS = {
    "4x4": Config(name="im4x4", rows=4, cols=4),
    "3x5": Config(name="im3x5", rows=3, cols=5),
}


class Gemm(NamedTuple):
    m: int
    k: int
    n: int
    lda: int = None
    ldb: int = None
    base_a: int = 0
    base_b: int = 0

    def fields(self):
        return {"m": self.m, "k": self.k, "n": self.n, "lda": self.lda or self.k,
                "ldb": self.ldb or self.n, "base_a": self.base_a, "base_b": self.base_b}


#: Shapes: exact and ragged tiles on both axes, single tiles, padded leading dimensions, bases
#: (including ones that wrap the 1024-word buffers), one-element matrices.
GEMMS = [
    Gemm(1, 1, 1),
    Gemm(3, 4, 4),
    Gemm(5, 7, 9),
    Gemm(2, 12, 10, 13, 11, 5, 7),
    Gemm(7, 3, 2, 3, 2, 1000, 1020),           # wraps modulo 2**10
    Gemm(1, 9, 16, 9, 20, 100, 200),
    Gemm(4, 1, 13),
    Gemm(6, 8, 1, 8, 3, 17, 0),
]


class Beat(NamedTuple):
    addr: tuple         # read lanes only (masked lanes: 0)
    mask: int
    last: bool
    end: bool


def model_beats(g, side, rows, cols, aw):
    """The naive walk: column tile outer, row tile inner; see the module docstring."""
    f = g.fields()
    M, K, N = f["m"], f["k"], f["n"]
    wrap = (1 << aw) - 1
    tiles = [(n0, k0) for n0 in range(0, N, cols) for k0 in range(0, K, rows)]
    out = []
    for t, (n0, k0) in enumerate(tiles):
        final = t == len(tiles) - 1
        if side == "b":
            for r in range(rows):
                addr, mask = [], 0
                for j in range(cols):
                    ok = k0 + r < K and n0 + j < N
                    mask |= ok << j
                    addr.append((f["base_b"] + (k0 + r) * f["ldb"] + n0 + j) & wrap if ok else 0)
                out.append(Beat(tuple(addr), mask, r == rows - 1, final and r == rows - 1))
        else:
            for mi in range(M):
                addr, mask = [], 0
                for i in range(rows):
                    ok = k0 + i < K
                    mask |= ok << i
                    addr.append((f["base_a"] + mi * f["lda"] + k0 + i) & wrap if ok else 0)
                out.append(Beat(tuple(addr), mask, mi == M - 1, final and mi == M - 1))
    return out


def test_model_computes_the_gemm():
    """The model's tiles, read from dense row-major buffers, multiply to A @ B."""
    rng = np.random.default_rng(0)
    for cfg in ARRAYS.values():
        for g in GEMMS:
            f = g.fields()
            buf_a = rng.integers(-8, 8, 1024)
            buf_b = rng.integers(-8, 8, 1024)
            A = np.array([[buf_a[(f["base_a"] + i * f["lda"] + k) % 1024] for k in range(g.k)]
                          for i in range(g.m)])
            B = np.array([[buf_b[(f["base_b"] + k * f["ldb"] + n) % 1024] for n in range(g.n)]
                          for k in range(g.k)])
            C = np.zeros((g.m, g.n), dtype=np.int64)
            a_beats = model_beats(g, "a", cfg.rows, cfg.cols, 10)
            b_beats = model_beats(g, "b", cfg.rows, cfg.cols, 10)
            tiles_b = [b_beats[i:i + cfg.rows] for i in range(0, len(b_beats), cfg.rows)]
            tiles_a = [a_beats[i:i + g.m] for i in range(0, len(a_beats), g.m)]
            assert len(tiles_a) == len(tiles_b)
            n0s = [n0 for n0 in range(0, g.n, cfg.cols) for _ in range(0, g.k, cfg.rows)]
            for n0, ta, tb in zip(n0s, tiles_a, tiles_b):
                held = np.array([[buf_b[a] if bt.mask >> j & 1 else 0
                                  for j, a in enumerate(bt.addr)] for bt in tb])
                for mi, at in enumerate(ta):
                    vec = np.array([buf_a[a] if at.mask >> i & 1 else 0
                                    for i, a in enumerate(at.addr)])
                    part = vec @ held
                    w = min(cfg.cols, g.n - n0)
                    C[mi, n0:n0 + w] += part[:w]
            np.testing.assert_array_equal(C, A @ B)


# --- the RTL in the Amaranth simulator -----------------------------------------------------------

def _unpack(value, lanes, aw):
    addr = tuple((value >> (i * aw)) & ((1 << aw) - 1) for i in range(lanes))
    pos = lanes * aw
    mask = (value >> pos) & ((1 << lanes) - 1)
    last = bool(value >> (pos + lanes) & 1)
    end = bool(value >> (pos + lanes + 1) & 1)
    return Beat(tuple(a if mask >> i & 1 else 0 for i, a in enumerate(addr)), mask, last, end)


def simulate(cfg, jobs, *, seed=0, max_cycles=20000):
    """Run descriptors ``(fields, p_ready_a, p_ready_b)``; per job the beats of both streams,
    the counters, error state and cycle count. Checks that a stalled beat holds its payload."""
    dut = Im2colAddressGenerator(cfg)
    lanes = {"a": cfg.rows, "b": cfg.cols}
    aw = {"a": dut.aw_a, "b": dut.aw_b}
    rng = random.Random(seed)
    results = []

    async def tb(ctx):
        for fields, *policy in jobs:
            ctx.set(dut.desc.payload, fields)
            ctx.set(dut.desc.valid, 1)
            await ctx.tick().until(dut.desc.ready)
            ctx.set(dut.desc.valid, 0)
            got = {"a": [], "b": []}
            stalled = {"a": None, "b": None}
            stalls = {"a": 0, "b": 0}
            for cycle in range(max_cycles):
                if ctx.get(dut.done) or (ctx.get(dut.error) and not ctx.get(dut.busy)):
                    break
                for side, p in zip("ab", policy):
                    port = getattr(dut, side)
                    valid = ctx.get(port.valid)
                    payload = ctx.get(port.payload.as_value())
                    if stalled[side] is not None:
                        assert valid and payload == stalled[side], \
                            f"{side}: a stalled beat changed or vanished"
                        stalled[side] = None
                    if not valid:
                        assert _unpack(payload, lanes[side], aw[side]).mask == 0
                    ready = rng.random() < p
                    ctx.set(port.ready, ready)
                    if valid and ready:
                        got[side].append(_unpack(payload, lanes[side], aw[side]))
                    elif valid:
                        stalled[side] = payload
                        stalls[side] += 1
                await ctx.tick()
            else:
                raise AssertionError("the generator hung")
            results.append({
                "beats": got, "stalls": stalls, "cycles": cycle,
                "error": ctx.get(dut.error), "code": ctx.get(dut.error_code),
                "busy": ctx.get(dut.busy),
                "counters": {n: ctx.get(getattr(dut, f"count_{n}")) for n in COUNTERS},
            })
            for side in "ab":
                ctx.set(getattr(dut, side).ready, 0)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()
    return results


READY = (1.0, 0.5, 0.8, 0.3)


@pytest.mark.parametrize("array", sorted(ARRAYS))
def test_rtl_matches_model(array):
    """Every beat (read lanes' addresses, mask, last, end) of both streams and every counter
    equal the model, for every shape, back to back, under random backpressure."""
    cfg = ARRAYS[array]
    jobs = [(g.fields(), READY[i % 4], READY[(i + 1) % 4]) for i, g in enumerate(GEMMS)]
    for g, res in zip(GEMMS, simulate(cfg, jobs, seed=len(array))):
        assert not res["error"], f"{g}: refused with {res['code']}"
        for side, aw in (("a", 10), ("b", 10)):
            want = model_beats(g, side, cfg.rows, cfg.cols, aw)
            got = res["beats"][side]
            assert len(got) == len(want), f"{g} {side}: beat count"
            for i, (x, y) in enumerate(zip(got, want)):
                assert x == y, f"{g} {side} beat {i}: RTL {x}, model {y}"
            c = res["counters"]
            words = sum(bin(b.mask).count("1") for b in want)
            assert c[f"{side}_beats"] == len(want)
            assert c[f"{side}_addrs"] == c[f"{side}_words"] == words
            assert c[f"{side}_zeros"] == 0
            assert c[f"{side}_stalls"] == res["stalls"][side]
        assert c["prologue"] == 1
        assert c["cycles"] > 0


def test_full_throughput():
    """Always ready: one beat per cycle on each stream, no bubble between tiles."""
    cfg = ARRAYS["3x5"]
    g = Gemm(5, 7, 9)
    (res,) = simulate(cfg, [(g.fields(), 1.0, 1.0)])
    longest = max(len(model_beats(g, s, cfg.rows, cfg.cols, 10)) for s in "ab")
    assert res["counters"]["cycles"] == 1 + longest + 1


def test_valid_without_ready():
    """valid rises and holds with ready low (it never waits for ready)."""
    cfg = ARRAYS["4x4"]
    dut = Im2colAddressGenerator(cfg)

    async def tb(ctx):
        ctx.set(dut.desc.payload, Gemm(3, 5, 6).fields())
        ctx.set(dut.desc.valid, 1)
        await ctx.tick().until(dut.desc.ready)
        ctx.set(dut.desc.valid, 0)
        await ctx.tick().repeat(3)
        for _ in range(10):
            assert ctx.get(dut.a.valid) and ctx.get(dut.b.valid)
            assert ctx.get(dut.busy) and not ctx.get(dut.desc.ready)
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()


def test_bad_descriptors_are_refused():
    """Zero sizes and too-small leading dimensions are refused without a beat; the generator
    then runs the next descriptor normally."""
    cfg = ARRAYS["3x5"]
    good = Gemm(2, 4, 6)
    bad = [(Gemm(0, 4, 6), Im2colError.ZERO_SIZE), (Gemm(2, 0, 6), Im2colError.ZERO_SIZE),
           (Gemm(2, 4, 0), Im2colError.ZERO_SIZE), (Gemm(2, 4, 6, lda=3), Im2colError.BAD_LD),
           (Gemm(2, 4, 6, ldb=5), Im2colError.BAD_LD)]
    jobs = [(g.fields(), 0.5, 0.5) for g, _ in bad] + [(good.fields(), 0.5, 0.5)]
    results = simulate(cfg, jobs)
    for (g, code), res in zip(bad, results):
        assert res["error"] and res["code"] == code, g
        assert not res["busy"] and res["beats"] == {"a": [], "b": []}
    last = results[-1]
    assert not last["error"]
    assert last["beats"]["b"] == model_beats(good, "b", cfg.rows, cfg.cols, 10)
    assert last["beats"]["a"] == model_beats(good, "a", cfg.rows, cfg.cols, 10)


def test_wide_fields():
    """Sizes use mat_width = 2*dim_width bits; the largest values pass through the check."""
    cfg = Config(name="im_dw4", rows=4, cols=4, dim_width=4)
    assert mat_width(cfg) == 8
    g = Gemm(2, 3, 5, lda=255, ldb=255, base_a=1023, base_b=1)
    (res,) = simulate(cfg, [(g.fields(), 0.7, 0.7)])
    assert not res["error"]
    for side in "ab":
        assert res["beats"][side] == model_beats(g, side, 4, 4, 10)


def test_refusals_and_layout():
    with pytest.raises(TypeError, match="config must be a Config"):
        Im2colAddressGenerator({"rows": 4})
    dut = Im2colAddressGenerator(ARRAYS["3x5"])
    dut._MustUse__silence = True
    assert list(dut.desc.payload.shape().members) == list(DESC_FIELDS)


@pytest.mark.parametrize("preset", ["small", "paper16"])
def test_verilog_generates(preset):
    from bpsa.platform.verilog import generate_verilog
    text = generate_verilog(load_config(preset), "im2col_addr")
    assert "module im2col_addr" in text and "/work" not in text
