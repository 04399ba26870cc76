"""The zero-free loss walker: its vector stream and its P-offset tags against a naive model of
the stride classes under random back-pressure, and a whole run on the forward engine's
output-stationary array against ``bpsa.models.golden.conv2d_input_grad``, in the Amaranth
simulator. The Verilog runs under Verilator through the whole accelerator
(``tests/test_gateware_accelerator.py``, ``bpsa sim --phase loss --mode zero_free``)."""

import numpy as np
import pytest
from amaranth.hdl import Assert, Assume, Module, Signal, signed, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In
from amaranth.lib.memory import Memory
from amaranth.sim import Simulator

from bpsa.config import Config
from bpsa.gateware.array.arith import arith_for
from bpsa.gateware.frontends.conv_forward import ConvForward
from bpsa.gateware.frontends.zero_free.loss import (
    TAG_SLOTS,
    ZeroFreeLossWalker,
    dy_position,
    inc_divmod,
    sub_divmod,
)
from bpsa.models import float_layers
from bpsa.models.golden import conv2d_input_grad
from bpsa.sim.gemm import random_float_operands
from bpsa.spec.numeric import operand_range, wrap_array
from bpsa.verify.formal import prove

#: rows < cols, B > cols.
CFG_A = Config(name="zl_r2_c3_b4", rows=2, cols=3, feeder_bus_width=4, dim_width=6,
               buf_a_depth=512, buf_b_depth=256, dataflows=["os"])
#: rows > cols (the transposer loads slower than it sends), unsigned operands.
CFG_B = Config(name="zl_r4_c2_b2", rows=4, cols=2, feeder_bus_width=2, dim_width=6,
               operand_width=5, operand_signed=False, acc_width=16,
               buf_a_depth=512, buf_b_depth=256, dataflows=["os", "is"])


#: CFG_A in floating point (bf16 operands, fp32 sums).
CFG_A_BF16 = Config(name="zl_r2_c3_b4_bf16", rows=2, cols=3, feeder_bus_width=4, dim_width=6,
                    buf_a_depth=512, buf_b_depth=256, dataflows=["os"], arithmetic="bf16",
                    operand_width=16, acc_width=32)


def _layer(rng, cfg):
    """A random band: any kernel, stride (also above the kernel), dilation, padding."""
    C = cfg.cols
    while True:
        r, s = int(rng.integers(1, 4)), int(rng.integers(1, 4))
        sh, sw = int(rng.integers(1, 4)), int(rng.integers(1, 4))
        dh, dw = int(rng.integers(1, 3)), int(rng.integers(1, 3))
        ph, pw = int(rng.integers(0, 3)), int(rng.integers(0, 3))
        h, w = int(rng.integers(1, 8)), int(rng.integers(1, 8))
        oh = (h + 2 * ph - dh * (r - 1) - 1) // sh + 1
        ow = (w + 2 * pw - dw * (s - 1) - 1) // sw + 1
        if oh >= 1 and ow >= 1:
            break
    k = int(rng.integers(1, 2 * C + 2))
    kblocks = -(-k // C)
    return dict(height=h, width=w, out_height=oh, out_width=ow, kernel_h=r, kernel_w=s,
                stride_h=sh, stride_w=sw, pad_top=ph, pad_w=pw, pt_q=ph // sh, pt_r=ph % sh,
                pw_q=pw // sw, pw_r=pw % sw, dh_q=dh // sh, dh_r=dh % sh, dw_q=dw // sw,
                dw_r=dw % sw, kblocks=kblocks, kvalid=k - (kblocks - 1) * C,
                plane=oh * ow), (k, dh, dw)


def _operands(rng, cfg, lay, k):
    C = cfg.cols
    if cfg.is_float:
        return (random_float_operands(cfg.arithmetic, (k, lay["out_height"], lay["out_width"]),
                                      rng, 0.1, 0.01),
                random_float_operands(cfg.arithmetic, (k, C, lay["kernel_h"], lay["kernel_w"]),
                                      rng, 0.1, 0.01))
    lo, hi = operand_range(cfg)
    dy = rng.integers(lo, hi + 1, size=(k, lay["out_height"], lay["out_width"]))
    w = rng.integers(lo, hi + 1, size=(k, C, lay["kernel_h"], lay["kernel_w"]))
    return dy, w


def _buffers(cfg, lay, k, dy, w, xb, wb):
    """The dY and W buffer words (lists) from word 0."""
    C, B = cfg.cols, cfg.feeder_bus_width
    kbl = lay["kblocks"]
    dyb = np.zeros((kbl * C, lay["out_height"], lay["out_width"]), dtype=np.int64)
    dyb[:k] = dy
    x_words = [[0] * B] * xb
    for kb in range(kbl):
        for oh in range(lay["out_height"]):
            for ow in range(lay["out_width"]):
                word = [int(v) for v in dyb[kb * C:(kb + 1) * C, oh, ow]]
                x_words.append(word + [0] * (B - C))
    w_words = [[0] * C] * wb
    for kk in range(k):
        for r in range(lay["kernel_h"]):
            for q in range(lay["kernel_w"]):
                w_words.append([int(v) for v in w[kk, :, r, q]])
    return x_words, w_words


def naive(cfg, lay, k, dh, dw, dy, w):
    """``(vectors, contexts)``: the walker's vectors ``(a, b, last)`` and, per context, its
    tags ``[(ok, addr)]``, from the stride classes written out."""
    R, C = cfg.rows, cfg.cols
    H, W = lay["height"], lay["width"]
    sh, sw, pt, pw = lay["stride_h"], lay["stride_w"], lay["pad_top"], lay["pad_w"]
    vectors, contexts = [], []
    for a in range(sh):
        for b in range(sw):
            pixels = [(h, x) for h in range(a, H, sh) for x in range(b, W, sw)]
            taps = [(r, q) for r in range(lay["kernel_h"]) for q in range(lay["kernel_w"])
                    if (a + pt - r * dh) % sh == 0 and (b + pw - q * dw) % sw == 0]
            if not pixels or not taps:
                continue
            for start in range(0, len(pixels), R):
                tile = pixels[start:start + R]
                contexts.append([(1, h * W + x) for h, x in tile] + [(0, None)] * (R - len(tile)))
                for ti, (r, q) in enumerate(taps):
                    for kb in range(lay["kblocks"]):
                        kv = lay["kvalid"] if kb == lay["kblocks"] - 1 else C
                        for t in range(kv):
                            kk = kb * C + t
                            avec = []
                            for h, x in tile:
                                oh, ow = (h + pt - r * dh) // sh, (x + pw - q * dw) // sw
                                inside = 0 <= oh < lay["out_height"] and 0 <= ow < lay["out_width"]
                                avec.append(int(dy[kk, oh, ow]) if inside else 0)
                            avec += [0] * (R - len(tile))
                            last = ti == len(taps) - 1 and kb == lay["kblocks"] - 1 and t == kv - 1
                            vectors.append((avec, [int(v) for v in w[kk, :, r, q]], int(last)))
    return vectors, contexts


class _WalkerTop(wiring.Component):
    def __init__(self, cfg, x_words, w_words):
        self.cfg, self.x_words, self.w_words = cfg, x_words, w_words
        self.walker = ZeroFreeLossWalker(cfg)
        super().__init__({})

    def elaborate(self, platform):
        m = Module()
        op = arith_for(self.cfg).operand_shape
        xm = m.submodules.x = Memory(shape=data.ArrayLayout(op, self.cfg.feeder_bus_width),
                                     depth=self.cfg.buf_a_depth, init=self.x_words)
        wm = m.submodules.w = Memory(shape=data.ArrayLayout(op, self.cfg.cols),
                                     depth=self.cfg.buf_b_depth, init=self.w_words)
        m.submodules.walker = self.walker
        wiring.connect(m, self.walker.x_mem, xm.read_port())
        wiring.connect(m, self.walker.w_mem, wm.read_port())
        return m


@pytest.mark.parametrize("cfg", [CFG_A, CFG_B], ids=lambda c: c.name)
@pytest.mark.parametrize("seed", range(8))
def test_walker_stream_and_tags_equal_naive_classes(cfg, seed):
    rng = np.random.default_rng(seed)
    lay, (k, dh, dw) = _layer(rng, cfg)
    dy, w = _operands(rng, cfg, lay, k)
    xb, wb = int(rng.integers(0, 5)), int(rng.integers(0, 5))
    top = _WalkerTop(cfg, *_buffers(cfg, lay, k, dy, w, xb, wb))
    wk = top.walker
    want, want_ctx = naive(cfg, lay, k, dh, dw, dy, w)
    ready_p = [1.0, 0.4][seed % 2]
    got, got_ctx = [], []

    async def tb(ctx):
        ctx.set(wk.layer, {**lay, "x_base": xb, "w_base": wb})
        ctx.set(wk.start, 1)
        await ctx.tick()
        ctx.set(wk.start, 0)
        for _ in range(40 * len(want) + 400):
            ready = int(rng.random() < ready_p)
            ctx.set(wk.feed.ready, ready)
            ctx.set(wk.ctx_done, 0)
            if ctx.get(wk.feed.valid) and ready:
                p = ctx.get(wk.feed.payload)
                got.append(([int(v) for v in p.a], [int(v) for v in p.b], int(p.last)))
                if p.last:          # the context is complete: read its tags, free its slot
                    tags = []
                    for row in range(cfg.rows):
                        ctx.set(wk.tag_ctx, len(got_ctx) % TAG_SLOTS)
                        ctx.set(wk.tag_row, row)
                        tg = ctx.get(wk.tag)
                        tags.append((int(tg.ok), int(tg.addr) if tg.ok else None))
                    got_ctx.append(tags)
                    ctx.set(wk.ctx_done, 1)
            if not ctx.get(wk.busy):
                break
            await ctx.tick()
        assert not ctx.get(wk.busy)

    sim = Simulator(top)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()
    assert got == want, lay
    assert got_ctx == want_ctx, lay


def _zl_run(cfg, lay, k, dy, w, max_cycles=60000):
    """One zero-free loss run on a ConvForward: ``{P offset: data}`` of its rows, counters."""
    dut = ConvForward(cfg)
    x_words, w_words = _buffers(cfg, lay, k, dy, w, 0, 0)
    out, counts = {}, {}

    async def tb(ctx):
        for port, words in ((dut.x_write, x_words), (dut.w_write, w_words)):
            for i, word in enumerate(words):
                ctx.set(port.en, 1)
                ctx.set(port.addr, i)
                ctx.set(port.data, word)
                await ctx.tick()
            ctx.set(port.en, 0)
        ctx.set(dut.zl_layer, {**lay, "x_base": 0, "w_base": 0})
        ctx.set(dut.zl_start, 1)
        await ctx.tick()
        ctx.set(dut.zl_start, 0)
        for _ in range(max_cycles):
            if ctx.get(dut.zl.valid):
                p = ctx.get(dut.zl.payload)
                assert p.addr not in out, f"P word {p.addr} drained twice"
                out[p.addr] = [int(v) for v in p.data]
            if ctx.get(dut.done):
                break
            await ctx.tick()
        else:
            raise AssertionError(f"not done after {max_cycles} cycles")
        assert not ctx.get(dut.error)
        for name in ("vectors", "fired", "gated", "cycles"):
            counts[name] = ctx.get(getattr(dut, name))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()
    return out, counts


# seeds past the first ones in make test-long (the same checks on more random layers)
@pytest.mark.parametrize("cfg", [CFG_A, CFG_B, CFG_A_BF16], ids=lambda c: c.name)
@pytest.mark.parametrize("seed", [*range(3), *(pytest.param(s, marks=pytest.mark.long)
                                               for s in range(3, 5))])
def test_zero_free_loss_run_equals_golden(cfg, seed):
    """dX of the run's channel block: every pixel of the band once, equal to the golden
    transposed convolution (wrapped to the accumulator; floating point: the walker's order,
    :func:`bpsa.models.float_layers.conv2d_input_grad`)."""
    rng = np.random.default_rng(200 + seed)
    lay, (k, dh, dw) = _layer(rng, cfg)
    dy, w = _operands(rng, cfg, lay, k)
    out, counts = _zl_run(cfg, lay, k, dy, w)
    H, W = lay["height"], lay["width"]
    geometry = dict(stride=(lay["stride_h"], lay["stride_w"]),
                    padding=(lay["pad_top"], lay["pad_w"]), dilation=(dh, dw))
    if cfg.is_float:
        want = float_layers.conv2d_input_grad(dy[None], w, (H, W), cfg.arithmetic,
                                              **geometry)[0]
    else:
        want = wrap_array(conv2d_input_grad(dy[None], w, (H, W), **geometry)[0], cfg.acc_width)
    vectors, contexts = naive(cfg, lay, k, dh, dw, dy, w)
    covered = {addr for ctx in contexts for ok, addr in ctx if ok}
    assert sorted(out) == sorted(covered)
    for h in range(H):
        for x in range(W):
            got = out.get(h * W + x, [0] * cfg.cols)   # no tap reaches it: dX is 0
            assert got == [int(v) for v in want[:, h, x]], (h, x)
    assert counts["vectors"] == len(vectors)
    assert counts["fired"] + counts["gated"] == counts["vectors"] * cfg.rows * cfg.cols


# --- bounded formal check of the walker's index map ---------------------------------------------
#
# The walker finds a class pixel's dY pixel under a tap without a divider: it keeps the floor
# division of ``a + pad - r d`` by the stride, steps it by ``sub_divmod`` (next tap, with the
# dilation's quotient and remainder from the controller) and ``inc_divmod`` (next class), and
# reads the position with ``dy_position``. Each is proved against floor division for every
# value of FORMAL_DW-bit fields: combinational properties, depth-1 BMCs. With them,
# by induction over the walker's taps and classes, a tap is sent only where the zero-spaced dY
# holds a real dY pixel (no stride zero is read or multiplied), and it is that pixel.

FORMAL_DW = 3


class _DivmodProof(wiring.Component):
    """Free stride, values and coordinates; Assert one property."""

    def __init__(self, prop):
        self.prop = prop
        w = FORMAL_DW
        super().__init__({"s": In(unsigned(w)), "v": In(signed(w + 3)), "d": In(unsigned(w)),
                          "a": In(unsigned(w)), "i": In(unsigned(w)), "r": In(unsigned(w)),
                          "pad": In(unsigned(w))})

    def elaborate(self, platform):
        m = Module()
        s, v, d = self.s, self.v, self.d
        m.d.comb += Assume(s > 0)
        wide = signed(FORMAL_DW + 8)

        def floor_divmod(value, name):
            val = Signal(wide, name=f"{name}_v")
            rem, quo = Signal(wide, name=f"{name}_rem"), Signal(wide, name=f"{name}_quo")
            m.d.comb += [val.eq(value), rem.eq(val % s), quo.eq(val // s)]
            return rem, quo

        if self.prop == "sub":
            rem, quo = floor_divmod(v, "v")
            want_rem, want_quo = floor_divmod(v - d, "vd")
            got_rem, got_quo = sub_divmod(rem, quo, d % s, d // s, s)
            m.d.comb += [Assert(got_rem == want_rem, "remainder"),
                         Assert(got_quo == want_quo, "quotient")]
        elif self.prop == "inc":
            rem, quo = floor_divmod(v, "v")
            want_rem, want_quo = floor_divmod(v + 1, "v1")
            got_rem, got_quo = inc_divmod(rem, quo, s)
            m.d.comb += [Assert(got_rem == want_rem, "remainder"),
                         Assert(got_quo == want_quo, "quotient")]
        else:
            # class a, class pixel i (dX row a + s i), tap r with dilation d, padding pad:
            # the zero-spaced dY row is h + pad - r d; a real dY row where it is a multiple of s
            a, i, r, pad = self.a, self.i, self.r, self.pad
            m.d.comb += Assume(a < s)
            rem, quo = floor_divmod(a + pad - r * d, "tap")
            zrow = Signal(wide)
            m.d.comb += zrow.eq(a + s * i + pad - r * d)
            ok, oh, _ = dy_position(i, 0, rem, quo, 0, 0)
            m.d.comb += [Assert(ok == (zrow % s == 0), "a real dY pixel, never a stride zero"),
                         Assert(~ok | (oh * s == zrow), "that pixel")]
        return m


@pytest.mark.formal
@pytest.mark.parametrize("prop", ["sub", "inc", "position"])
def test_index_map_formally_equals_floor_division(prop, tmp_path):
    """Every stride, value and coordinate of FORMAL_DW bits: the walker's divider-free steps
    and positions equal floor division (see above)."""
    passed, log = prove(_DivmodProof(prop), f"zf_loss_{prop}", tmp_path)
    assert passed, log
