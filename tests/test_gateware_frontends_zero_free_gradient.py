"""The zero-free gradient walker: its vector stream against a naive loop model under random
back-pressure, and a whole run on the forward engine's output-stationary array against
``bpsa.models.golden.conv2d_weight_grad`` (dW of one X block and one dY block), in the Amaranth
simulator. The Verilog runs under Verilator through the whole accelerator
(``tests/test_verify_native.py``, ``bpsa sim --phase gradient --mode zero_free``)."""

import numpy as np
import pytest
from amaranth.hdl import Assert, Assume, Module, Mux, Signal, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In
from amaranth.lib.memory import Memory
from amaranth.sim import Simulator

from bpsa.config import Config
from bpsa.gateware.array.arith import arith_for
from bpsa.gateware.frontends.conv_forward import ConvForward
from bpsa.gateware.frontends.zero_free.gradient import (
    ZeroFreeGradientWalker,
    cursor_layout,
    cursor_origin,
    cursor_step,
    ends_layout,
    ends_next,
    ends_of,
    step_layout,
    step_values,
    zf_gradient_layout,
)
from bpsa.models import float_layers
from bpsa.models.golden import conv2d_weight_grad
from bpsa.sim.gemm import random_float_operands
from bpsa.spec.numeric import operand_range, wrap_array
from bpsa.verify.formal import prove

#: rows < B (two row groups a word), non-square.
CFG_A = Config(name="zf_r2_c3_b4", rows=2, cols=3, feeder_bus_width=4, dim_width=6,
               buf_a_depth=256, buf_b_depth=128, dataflows=["os"])
#: rows > B: one row group, rows past the word idle.
CFG_B = Config(name="zf_r4_c2_b2", rows=4, cols=2, feeder_bus_width=2, dim_width=6,
               operand_width=5, operand_signed=False, acc_width=16,
               buf_a_depth=256, buf_b_depth=128, dataflows=["os", "is"])


#: A floating-point configuration (fp16 operands, fp32 sums).
CFG_FP16 = Config(name="zf_r2_c3_b4_fp16", rows=2, cols=3, feeder_bus_width=4, dim_width=6,
                  buf_a_depth=256, buf_b_depth=128, dataflows=["os"], arithmetic="fp16",
                  operand_width=16, acc_width=32)


def _layer(rng, cfg, heights=9, widths=9, area=64):
    """A random run: one band of a layer (random top padding beyond the band's X rows),
    ``height < heights``, ``width < widths``, X and dY planes of at most ``area`` pixels."""
    r, s = int(rng.integers(1, 4)), int(rng.integers(1, 4))
    sh, sw = int(rng.integers(1, 4)), int(rng.integers(1, 4))
    dh, dw = int(rng.integers(1, 3)), int(rng.integers(1, 3))
    ph, pw = int(rng.integers(0, 3)), int(rng.integers(0, 3))
    while True:
        h, w = int(rng.integers(1, heights)), int(rng.integers(1, widths))
        oh = (h + 2 * ph - dh * (r - 1) - 1) // sh + 1
        ow = (w + 2 * pw - dw * (s - 1) - 1) // sw + 1
        if oh >= 1 and ow >= 1 and h * w <= area and oh * ow <= area:
            break
    ch = int(rng.integers(1, cfg.feeder_bus_width + 1))
    return dict(channels=ch, width=w, height=h, out_height=oh, out_width=ow, kernel_h=r,
                kernel_w=s, stride_h=sh, stride_w=sw, dil_h=dh, dil_w=dw, pad_top=ph,
                pad_w=pw, pad_bottom=ph)


def _operands(rng, cfg, lay):
    B, C = cfg.feeder_bus_width, cfg.cols
    if cfg.is_float:
        x = random_float_operands(cfg.arithmetic, (lay["height"], lay["width"], B), rng,
                                  0.1, 0.01)
        x[:, :, lay["channels"]:] = 0
        return x, random_float_operands(cfg.arithmetic,
                                        (lay["out_height"], lay["out_width"], C), rng, 0.1, 0.01)
    lo, hi = operand_range(cfg)
    x = rng.integers(lo, hi + 1, size=(lay["height"], lay["width"], B))
    x[:, :, lay["channels"]:] = 0
    dy = rng.integers(lo, hi + 1, size=(lay["out_height"], lay["out_width"], C))
    return x, dy


def naive_stream(cfg, lay, x, dy):
    """The walker's vectors, from the loops of the module docstring."""
    R = cfg.rows
    out = []
    for g in range(0, lay["channels"], R):
        for r in range(lay["kernel_h"]):
            for q in range(lay["kernel_w"]):
                for oh in range(lay["out_height"]):
                    for ow in range(lay["out_width"]):
                        y = oh * lay["stride_h"] + r * lay["dil_h"] - lay["pad_top"]
                        xc = ow * lay["stride_w"] + q * lay["dil_w"] - lay["pad_w"]
                        inside = 0 <= y < lay["height"] and 0 <= xc < lay["width"]
                        a = [int(x[y, xc, g + i]) if inside and g + i < x.shape[2] else 0
                             for i in range(R)]
                        last = oh == lay["out_height"] - 1 and ow == lay["out_width"] - 1
                        out.append((a, [int(v) for v in dy[oh, ow]], int(last)))
    return out


class _WalkerTop(wiring.Component):
    """The walker with its two buffers."""

    def __init__(self, cfg, x_words, dy_words):
        self.cfg = cfg
        self.x_words, self.dy_words = x_words, dy_words
        self.walker = ZeroFreeGradientWalker(cfg)
        super().__init__({})

    def elaborate(self, platform):
        m = Module()
        op = arith_for(self.cfg).operand_shape
        xm = m.submodules.x = Memory(shape=data.ArrayLayout(op, self.cfg.feeder_bus_width),
                                     depth=self.cfg.buf_a_depth, init=self.x_words)
        dm = m.submodules.dy = Memory(shape=data.ArrayLayout(op, self.cfg.cols),
                                      depth=self.cfg.buf_b_depth, init=self.dy_words)
        m.submodules.walker = self.walker
        wiring.connect(m, self.walker.x_mem, xm.read_port())
        wiring.connect(m, self.walker.dy_mem, dm.read_port())
        return m


@pytest.mark.parametrize("cfg", [CFG_A, CFG_B], ids=lambda c: c.name)
@pytest.mark.parametrize("seed", range(6))
def test_walker_stream_equals_naive_loops(cfg, seed):
    rng = np.random.default_rng(seed)
    lay = _layer(rng, cfg)
    x, dy = _operands(rng, cfg, lay)
    xb, db = int(rng.integers(0, 8)), int(rng.integers(0, 8))
    x_words = [[0] * cfg.feeder_bus_width] * xb + [list(map(int, v)) for v in
                                                    x.reshape(-1, x.shape[2])]
    dy_words = [[0] * cfg.cols] * db + [list(map(int, v)) for v in dy.reshape(-1, dy.shape[2])]
    top = _WalkerTop(cfg, x_words, dy_words)
    want = naive_stream(cfg, lay, x, dy)
    fields = {k: v for k, v in lay.items() if k != "pad_bottom"}
    got = _beats(top, {**fields, "x_base": xb, "dy_base": db}, [1.0, 0.5][seed % 2], rng,
                 20 * len(want) + 50)
    assert got == want, lay


def _beats(top, layer, ready_p, rng, max_cycles):
    """The walker's beats of one run (``layer``) under a random ``ready`` (high with
    probability ``ready_p``): ``(a, b, last)``, MX with ``scale`` and ``end``."""
    wk, mx = top.walker, top.cfg.is_mx
    got = []

    async def tb(ctx):
        ctx.set(wk.layer, layer)
        ctx.set(wk.start, 1)
        await ctx.tick()
        ctx.set(wk.start, 0)
        for _ in range(max_cycles):
            ready = int(rng.random() < ready_p)
            ctx.set(wk.feed.ready, ready)
            if ctx.get(wk.feed.valid) and ready:
                p = ctx.get(wk.feed.payload)
                got.append(([int(v) for v in p.a], [int(v) for v in p.b], int(p.last))
                           + ((int(p.scale), int(p.end)) if mx else ()))
            if not ctx.get(wk.busy):
                break
            await ctx.tick()
        assert not ctx.get(wk.busy)

    sim = Simulator(top)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()
    return got


def _zf_run(cfg, lay, x, dy, xb=0, db=0, max_cycles=30000):
    """One zero-free gradient run on a ConvForward: ``{addr: data}`` of its ``zg`` rows and the
    counters."""
    dut = ConvForward(cfg)
    out = {}
    counts = {}

    async def tb(ctx):
        for port, base, words in ((dut.x_write, xb, x.reshape(-1, x.shape[2])),
                                  (dut.w_write, db, dy.reshape(-1, dy.shape[2]))):
            for i, word in enumerate(words):
                ctx.set(port.en, 1)
                ctx.set(port.addr, base + i)
                ctx.set(port.data, [int(v) for v in word])
                await ctx.tick()
            ctx.set(port.en, 0)
        fields = {k: v for k, v in lay.items() if k != "pad_bottom"}
        ctx.set(dut.zg_layer, {**fields, "x_base": xb, "dy_base": db})
        ctx.set(dut.zg_start, 1)
        await ctx.tick()
        ctx.set(dut.zg_start, 0)
        for _ in range(max_cycles):
            if ctx.get(dut.zg.valid):
                p = ctx.get(dut.zg.payload)
                assert p.addr not in out, f"P word {p.addr} drained twice"
                out[p.addr] = [int(v) for v in p.data]
            if ctx.get(dut.done):
                break
            await ctx.tick()
        else:
            raise AssertionError(f"not done after {max_cycles} cycles")
        assert not ctx.get(dut.error)
        for name in ("vectors", "fired", "gated", "words_read", "w_words_read", "cycles"):
            counts[name] = ctx.get(getattr(dut, name))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()
    return out, counts


# seeds past the first ones in make test-long (the same checks on more random layers)
@pytest.mark.parametrize("cfg", [CFG_A, CFG_B, CFG_FP16], ids=lambda c: c.name)
@pytest.mark.parametrize("seed", [*range(2), *(pytest.param(s, marks=pytest.mark.long)
                                               for s in range(2, 4))])
def test_zero_free_run_equals_golden_weight_grad(cfg, seed):
    """dW of the run's X block and dY block: the band is the whole layer (its own padding);
    floating point: the walker's order, :func:`bpsa.models.float_layers.conv2d_weight_grad`."""
    rng = np.random.default_rng(100 + seed)
    lay = _layer(rng, cfg)
    x, dy = _operands(rng, cfg, lay)
    out, counts = _zf_run(cfg, lay, x, dy, xb=int(rng.integers(0, 4)),
                          db=int(rng.integers(0, 4)))
    r, s = lay["kernel_h"], lay["kernel_w"]
    ch = lay["channels"]
    # golden: X (1 x B x H x W), dY (1 x cols x OH x OW), padding (pad_top, pad_w) with the
    # bottom padding that gives the same OH
    xt = x.transpose(2, 0, 1)[None]
    dyt = dy.transpose(2, 0, 1)[None]
    ph, pw = lay["pad_top"], lay["pad_w"]
    xp = np.pad(xt, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    geometry = dict(stride=(lay["stride_h"], lay["stride_w"]), padding=0,
                    dilation=(lay["dil_h"], lay["dil_w"]))
    if cfg.is_float:
        want = float_layers.conv2d_weight_grad(xp, dyt, (r, s), cfg.arithmetic, **geometry)
    else:
        want = wrap_array(conv2d_weight_grad(xp, dyt, (r, s), **geometry), cfg.acc_width)
    assert sorted(out) == list(range(ch * r * s))
    for c in range(ch):
        for t in range(r * s):
            assert out[c * r * s + t] == [int(v) for v in want[:, c, t // s, t % s]], (c, t)
    groups = -(-ch // cfg.rows)
    assert counts["vectors"] == groups * r * s * lay["out_height"] * lay["out_width"]
    assert counts["fired"] + counts["gated"] == counts["vectors"] * cfg.rows * cfg.cols
    assert counts["w_words_read"] == counts["vectors"]


# --- bounded formal check of the walker's index map ---------------------------------------------
#
# The walker's cursor (tap, dY pixel and the X coordinates and addresses it keeps by additions
# only) against its definition by multiplication, for every run whose fields are below
# 2**FORMAL_DW and every position: the origin is position 0, and one step from any position is
# the next position of the loop nest (or, from the last, the origin with ``wrapped``). Each
# property is combinational, so a depth-1 BMC proves it for all values. By induction
# over the vectors, every X word the walker reads is X[oh s_h + r d_h - p_t, ow s_w + q d_w -
# p_w] and every dY word dY[oh, ow]: no stride zero is ever formed.

CFG_F = Config(name="zf_formal", rows=2, cols=2, feeder_bus_width=4, dim_width=4,
               buf_a_depth=64, buf_b_depth=64, buf_p_depth=64, dataflows=["os"])
FORMAL_DW = 3


class _CursorProof(wiring.Component):
    """Free run and position; Assume a valid run, Assert one property (``origin``/``step``)."""

    def __init__(self, prop):
        self.prop = prop
        super().__init__({
            "layer": In(zf_gradient_layout(CFG_F)),
            "c": In(data.StructLayout({x: unsigned(FORMAL_DW) for x in ("r", "q", "oh", "ow")})),
        })

    def elaborate(self, platform):
        m = Module()
        lay, c = self.layer, self.c
        for name in ("channels", "width", "height", "out_height", "out_width", "kernel_h",
                     "kernel_w", "stride_h", "stride_w", "dil_h", "dil_w"):
            m.d.comb += Assume((getattr(lay, name) > 0) & (getattr(lay, name) < 2 ** FORMAL_DW))
        m.d.comb += Assume((lay.pad_top < 2 ** FORMAL_DW) & (lay.pad_w < 2 ** FORMAL_DW)
                           & (c.r < lay.kernel_h) & (c.q < lay.kernel_w)
                           & (c.oh < lay.out_height) & (c.ow < lay.out_width))

        def state_of(r, q, oh, ow, name):
            """The cursor at position (r, q, oh, ow), by its definition."""
            st = Signal(cursor_layout(CFG_F), name=name)
            xr0 = r * lay.dil_h - lay.pad_top
            xc0 = q * lay.dil_w - lay.pad_w
            m.d.comb += [st.r.eq(r), st.q.eq(q), st.oh.eq(oh), st.ow.eq(ow),
                         st.xr0.eq(xr0), st.xc0.eq(xc0), st.ra0.eq(xr0 * lay.width),
                         st.xr.eq(xr0 + oh * lay.stride_h), st.xc.eq(xc0 + ow * lay.stride_w),
                         st.ra.eq((xr0 + oh * lay.stride_h) * lay.width),
                         st.dyi.eq(oh * lay.out_width + ow)]
            return st

        if self.prop == "origin":
            org = Signal(cursor_layout(CFG_F))
            m.d.comb += cursor_origin(lay, org)
            m.d.comb += Assert(org.as_value() == state_of(0, 0, 0, 0, "zero").as_value())
            return m
        steps = Signal(step_layout(CFG_F))
        m.d.comb += step_values(lay, steps)
        nxt = Signal(cursor_layout(CFG_F))
        cur = state_of(c.r, c.q, c.oh, c.ow, "cur")
        wrapped = cursor_step(m, lay, steps, cur, nxt)
        # the successor in mixed radix (r, q, oh, ow), ow fastest
        coords = [c.r, c.q, c.oh, c.ow]
        limits = [lay.kernel_h, lay.kernel_w, lay.out_height, lay.out_width]
        succ, carry = [], 1
        for x, lim in reversed(list(zip(coords, limits))):
            wrap = carry & (x + 1 == lim)
            succ.insert(0, Mux(wrap, 0, x + carry))
            carry = wrap
        succ_st = state_of(*succ, "succ")
        # the walker's registered ends (which indices are last) step with the cursor
        ends = Signal(ends_layout())
        m.d.comb += ends.eq(ends_of(steps, cur))
        m.d.comb += [Assert(wrapped == carry, "wrapped at the last position"),
                     Assert(nxt.as_value() == succ_st.as_value(), "step"),
                     Assert(ends_next(steps, cur, ends) == ends_of(steps, succ_st), "ends")]
        return m


@pytest.mark.formal
@pytest.mark.parametrize("prop", ["origin", "step"])
def test_cursor_formally_equals_its_definition(prop, tmp_path):
    """Every run with fields below 2**FORMAL_DW, every position: the cursor's origin and its
    step equal the index map by multiplication (see above), and the registered ends the
    walker decides the step with follow the step."""
    passed, log = prove(_CursorProof(prop), f"zf_gradient_{prop}", tmp_path)
    assert passed, log


#: MX, rows < B: two row groups a word; rows wide enough for several X and dY blocks.
CFG_MX = Config(name="zf_r2_c3_b4_mxfp8", rows=2, cols=3, feeder_bus_width=4, dim_width=7,
                buf_a_depth=1024, buf_b_depth=1024, dataflows=["os"], arithmetic="mxfp8_e4m3",
                operand_width=8, operand_signed=False, acc_width=43)


def mx_rows(words, scales):
    """A buffer image in the MX walker's layout: each row's words, then its scale words
    (``words``: rows x pixels x lanes codes; ``scales``: rows x blocks x lanes)."""
    out = []
    for row, srow in zip(words, scales):
        out += [[int(v) for v in px] for px in row] + [[int(v) for v in b] for b in srow]
    return out


def naive_mx_stream(cfg, lay, x, xs, dy, dys):
    """The MX walker's beats from the contract's loops: per context, per dY row, per
    segment (:func:`bpsa.models.mx.walker_segments`) a scale beat (X's block scales, dY's;
    zeros when the X row is in the padding) and the segment's vectors."""
    from bpsa.models.mx import walker_segments
    R, out = cfg.rows, []
    for g in range(0, lay["channels"], R):
        for r in range(lay["kernel_h"]):
            for q in range(lay["kernel_w"]):
                x0 = q * lay["dil_w"] - lay["pad_w"]
                segs = walker_segments(lay["out_width"], lay["width"], lay["stride_w"], x0)
                for oh in range(lay["out_height"]):
                    y = oh * lay["stride_h"] + r * lay["dil_h"] - lay["pad_top"]
                    row_in = 0 <= y < lay["height"]
                    for si, (a0, a1, xb) in enumerate(segs):
                        sa = [int(xs[y, xb, g + i]) if row_in and g + i < x.shape[2] else 0
                              for i in range(R)]
                        sb = [int(v) for v in dys[oh, a0 // 32]] if row_in else [0] * cfg.cols
                        out.append((sa, sb, 0, 1, 0))
                        for ow in range(a0, a1):
                            xc = ow * lay["stride_w"] + x0
                            inside = row_in and 0 <= xc < lay["width"]
                            a = [int(x[y, xc, g + i]) if inside and g + i < x.shape[2] else 0
                                 for i in range(R)]
                            end = oh == lay["out_height"] - 1 and ow == lay["out_width"] - 1
                            out.append((a, [int(v) for v in dy[oh, ow]], int(ow == a1 - 1), 0,
                                        int(end)))
    return out


@pytest.mark.parametrize("seed", range(6))
def test_mx_walker_stream_equals_naive_loops(seed):
    """MX: segments, their scale beats and the row-pitched buffers, under back-pressure."""
    cfg = CFG_MX
    rng = np.random.default_rng(300 + seed)
    lay = _layer(rng, cfg, heights=6, widths=91, area=600)
    del lay["pad_bottom"]
    h, w, oh, ow = lay["height"], lay["width"], lay["out_height"], lay["out_width"]
    B, C = cfg.feeder_bus_width, cfg.cols
    x = rng.integers(0, 256, size=(h, w, B))
    x[:, :, lay["channels"]:] = 0
    xs = rng.integers(0, 256, size=(h, -(-w // 32), B))
    dy = rng.integers(0, 256, size=(oh, ow, C))
    dys = rng.integers(0, 256, size=(oh, -(-ow // 32), C))
    xb, db = int(rng.integers(0, 8)), int(rng.integers(0, 8))
    top = _WalkerTop(cfg, [[0] * B] * xb + mx_rows(x, xs), [[0] * C] * db + mx_rows(dy, dys))
    want = naive_mx_stream(cfg, lay, x, xs, dy, dys)
    got = _beats(top, {**lay, "x_base": xb, "dy_base": db}, 0.6, rng, 4 * len(want) + 50)
    assert len(got) == len(want), lay
    for i, (g, e) in enumerate(zip(got, want)):
        assert g == e, (i, lay)
