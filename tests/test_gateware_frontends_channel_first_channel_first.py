"""The channel-first front end alone (:mod:`bpsa.gateware.frontends.channel_first.channel_first`) with the
array weight-stationary, in the Amaranth simulator (the whole accelerator runs it as Verilog
under Verilator in ``tests/test_gateware_accelerator.py``), and a bounded formal check of its
address cursor:

- the operands each array row receives, cycle by cycle, against the naive address model
  :func:`bpsa.models.channel_first.row_addresses` (X filled with each element's HWC address
  plus one, so a row's operand names the word it read; 0 is padding), on random layers and
  both array shapes' multi-tile cases;
- Y against :func:`bpsa.models.golden.conv2d` on random layers: strides 1-4, dilations 1-3,
  padding 0-2, rectangular kernels, C from 1 to three times the rows (channel blocks), K
  past the columns, batch 1-2, row bands, nonzero bank and W bases, operands at the range's
  edges.
"""

import gc
import warnings

import numpy as np
import pytest
from amaranth.hdl import UnusedElaboratable
from amaranth.lib import wiring
from amaranth.sim import Simulator

from bpsa.config import MX_WIDTHS, Config, ConfigError, load_config
from bpsa.gateware.frontends.channel_first.channel_first import (ChannelFirst,
                                                                 ChannelFirstEngine,
                                                                 lane_of_bank)
from bpsa.models import channel_first as cfm
from bpsa.models import mx
from bpsa.sim.testbenches import tb_channel_first as tbcf
from bpsa.spec.numeric import mx_format
from bpsa.models.golden import conv2d

CFG = Config(name="cf_test", rows=4, cols=3, dataflows=["os", "ws"], dim_width=8,
             buf_a_depth=64, buf_b_depth=256, buf_p_depth=64, buf_cf_depth=256,
             forward_frontends=["feeder", "channel_first"])
#: 16-bit operands: X elements can carry their own address.
CFG16 = CFG.replace(name="cf_test16", rows=8, cols=2, operand_width=16, acc_width=40)


def _simulate(cfg, x, w, stride, pad, dil, *, bands=1, x_base=0, w_base=0, trace=None):
    """Every run of the layer through the engine (:class:`ChannelFirstEngine`), with the
    testbench's run helpers (:mod:`bpsa.sim.testbenches.tb_channel_first`); Y (N x K x OH x
    OW: integers, or in MX fp32 encodings folded from the vectors in the order they come).
    ``trace``: a list that receives, per run, the vectors the array's left edge received."""
    n, c, h, wd = x.shape
    k, _, r, s = w.shape
    geometry = tuple(tuple(int(v) for v in (t if isinstance(t, tuple) else (t, t)))
                     for t in (stride, pad, dil))
    shape = (n, c, h, wd, k, r, s)
    oh = tbcf.out_size(h, r, geometry[0][0], geometry[1][0], geometry[2][0])
    ow = tbcf.out_size(wd, s, geometry[0][1], geometry[1][1], geometry[2][1])
    y = np.zeros((n, k, oh, ow), dtype=np.uint32 if cfg.is_mx else np.int64)
    ops = tbcf.operands(cfg, x, w)
    add = tbcf.accumulator(cfg)
    dut = ChannelFirstEngine(cfg)
    sim = Simulator(dut)
    sim.add_clock(1e-6)

    async def write(ctx, port, first, words):
        for i, word in enumerate(words):
            ctx.set(port.addr, first + i)
            ctx.set(port.data, word)
            ctx.set(port.en, 1)
            await ctx.tick()
        ctx.set(port.en, 0)

    async def bench(ctx):
        cf = dut.cf
        for run in tbcf.runs(cfg, shape, geometry, bands):
            for name, v in tbcf.descriptor(run, shape, geometry, x_base, w_base).items():
                ctx.set(getattr(dut.layer, name), v)
            await ctx.tick().repeat(cfg.rows + 1)        # the banks' lane rule settles
            ww, xw, scales = tbcf.run_words(cfg, ops, run)
            await write(ctx, dut.w_write, w_base, ww)
            await write(ctx, dut.x_write, x_base, xw)
            if cfg.is_mx:
                await write(ctx, dut.xs_write, x_base, scales)
            ctx.set(dut.start, 1)
            await ctx.tick()
            ctx.set(dut.start, 0)
            edge = []
            for _ in range(200000):
                if ctx.get(dut.y.valid):
                    p = dut.y.payload
                    oy, ox = ctx.get(p.oh), ctx.get(p.ow0)
                    for j in range(min(cfg.cols, k - run["k0"])):
                        at = (run["n"], run["k0"] + j, run["o0"] + oy, ox)
                        sr, sc = ((ctx.get(p.scale_row), ctx.get(p.scale_cols[j]))
                                  if cfg.is_mx else (None, None))
                        y[at] = add(int(y[at]), ctx.get(p.data[j]), sr, sc)
                if trace is not None and ctx.get(cf.array.a_valid):
                    edge.append([ctx.get(cf.array.a_data[i]) for i in range(cfg.rows)])
                assert not ctx.get(dut.error)
                if ctx.get(dut.done):
                    break
                await ctx.tick()
            else:
                raise AssertionError("the front end did not finish")
            assert not ctx.get(dut.array.error)
            if trace is not None:
                trace.append((run, edge))

    sim.add_testbench(bench)
    sim.run()
    return y


def _layer(rng, cfg, *, cmax=None):
    while True:
        r, s = int(rng.integers(1, 4)), int(rng.integers(1, 4))
        sh, sw = int(rng.integers(1, 5)), int(rng.integers(1, 5))
        dh, dw = int(rng.integers(1, 4)), int(rng.integers(1, 4))
        ph, pw = int(rng.integers(0, 3)), int(rng.integers(0, 3))
        h, wd = int(rng.integers(1, 10)), int(rng.integers(1, 10))
        c = int(rng.integers(1, cmax or 3 * cfg.rows + 1))
        k = int(rng.integers(1, 2 * cfg.cols + 2))
        n = int(rng.integers(1, 3))
        if tbcf.out_size(h, r, sh, ph, dh) >= 1 and tbcf.out_size(wd, s, sw, pw, dw) >= 1:
            return dict(n=n, c=c, h=h, w=wd, k=k, r=r, s=s, stride=(sh, sw), pad=(ph, pw),
                        dil=(dh, dw))


def _operands(rng, cfg, lay, edge=False):
    lo, hi = (-(1 << (cfg.operand_width - 1)), 1 << (cfg.operand_width - 1))
    if not edge:
        lo, hi = -8, 8
    x = rng.integers(lo, hi, size=(lay["n"], lay["c"], lay["h"], lay["w"]))
    w = rng.integers(lo, hi, size=(lay["k"], lay["c"], lay["r"], lay["s"]))
    if edge:                                  # the range's ends and zeros
        x.flat[::3] = lo
        w.flat[::2] = lo
        x.flat[1::5] = 0
    return x, w


def test_lane_of_bank():
    """Bank i keeps lane i mod C: every lane of a word once in the first C banks."""
    assert [lane_of_bank(i, 3) for i in range(8)] == [0, 1, 2, 0, 1, 2, 0, 1]
    assert [lane_of_bank(i, 9) for i in range(8)] == list(range(8))


@pytest.mark.parametrize("seed", range(10))
def test_rows_read_the_model_addresses(seed):
    """Each row's operand in each streamed cycle is the element the naive model's
    ``row_addresses`` names (X holds its HWC address + 1; padding and idle rows are 0),
    through channel blocks and multi-tile."""
    rng = np.random.default_rng(100 + seed)
    cfg = CFG16
    lay = _layer(rng, cfg, cmax=cfg.rows + 4 if seed % 2 else 4)
    lay["n"], lay["k"] = 1, 1
    n, c, h, wd = 1, lay["c"], lay["h"], lay["w"]
    x = (np.arange(h * wd * c).reshape(h, wd, c).transpose(2, 0, 1) + 1)[None]
    w = np.ones((1, c, lay["r"], lay["s"]), dtype=np.int64)
    trace = []
    _simulate(cfg, x, w, lay["stride"], lay["pad"], lay["dil"], trace=trace)
    oh = tbcf.out_size(h, lay["r"], lay["stride"][0], lay["pad"][0], lay["dil"][0])
    ow = tbcf.out_size(wd, lay["s"], lay["stride"][1], lay["pad"][1], lay["dil"][1])
    passes = cfm.passes(cfg.rows, cfg.cols, c, 1, lay["r"], lay["s"])
    streamed = [v for _, edge in trace for v in edge]
    pix = oh * ow
    assert len(streamed) == len(passes) * pix
    for t, p in enumerate(passes):
        rows = cfm.row_addresses(p, h, wd, c, oh, ow, lay["stride"], lay["pad"], lay["dil"])
        for i in range(cfg.rows):
            want = (np.asarray(rows[i]) + 1) if i < len(rows) else np.zeros(pix, dtype=int)
            got = [streamed[t * pix + j][i] for j in range(pix)]
            assert got == list(want), (lay, t, i)


# seeds past the first ones in make test-long (the same checks on more random layers)
@pytest.mark.parametrize("seed", [*range(8), *(pytest.param(s, marks=pytest.mark.long)
                                               for s in range(8, 16))])
def test_forward_equals_golden(seed):
    """Y of random layers (every run: images, output-channel blocks, channel blocks, bands)
    equals the golden convolution."""
    rng = np.random.default_rng(seed)
    lay = _layer(rng, CFG)
    x, w = _operands(rng, CFG, lay, edge=seed % 4 == 3)
    got = _simulate(CFG, x, w, lay["stride"], lay["pad"], lay["dil"], bands=1 + seed % 3,
                    x_base=(seed % 2) * 128, w_base=(seed % 3) * 80)
    want = conv2d(x, w, lay["stride"], lay["pad"], lay["dil"])
    assert np.array_equal(got, want), lay


#: The MX configurations: CFG's shape (4 rows, 3 columns) in each MX format.
CFG_MX = {fmt: CFG.replace(name=f"cf_test_{fmt}", arithmetic=fmt, operand_width=8,
                           acc_width=MX_WIDTHS[fmt][1], operand_signed=mx_format(fmt).is_int)
          for fmt in MX_WIDTHS}


def _mx_operands(rng, lay, special):
    """float32 X and W of many magnitudes (a scale per channel and pixel group), zeros, and
    with ``special`` the cases the contract names: an all-zero channel block of X at a pixel,
    values that saturate E4M3, a NaN in X (its block's outputs NaN) and a negative zero."""
    x = rng.standard_normal((lay["n"], lay["c"], lay["h"], lay["w"]))
    x *= np.exp2(rng.integers(-6, 6, (lay["n"], lay["c"], 1, lay["w"])))
    w = rng.standard_normal((lay["k"], lay["c"], lay["r"], lay["s"]))
    w *= np.exp2(rng.integers(-6, 6, (lay["k"], lay["c"], 1, 1)))
    x.flat[::7] = 0
    if special:
        x[0, :, 0, 0] = 0
        x.flat[3] = 1e6
        x.flat[-1] = np.nan
        w.flat[1] = -0.0
    return x.astype(np.float32), w.astype(np.float32)


# MX: every vector's block-part sums and scale codes, folded in the order they come, equal
# the contract's channel-first order (conv_forward with part = rows); more seeds in test-long
@pytest.mark.parametrize("fmt", sorted(MX_WIDTHS))
@pytest.mark.parametrize("seed", [*range(3), *(pytest.param(s, marks=pytest.mark.long)
                                               for s in range(3, 10))])
def test_mx_forward_equals_golden(fmt, seed):
    """Y of random layers in an MX format (every run: images, output-channel blocks, the
    parts of each 32-channel block, bands; C past one block in seed 0), folded from the
    front end's vectors (block-part sums, ``scale_row`` from the scale bank, ``scale_cols``
    from the tile's W scale word), equals ``bpsa.models.mx.conv_forward(..., part=rows)``
    bit for bit, NaN and saturation included."""
    cfg = CFG_MX[fmt]
    rng = np.random.default_rng(100 + seed)
    lay = _layer(rng, cfg, cmax=40 if seed == 0 else 3 * cfg.rows)
    if seed == 0:
        lay["c"] = 37
    x, w = _mx_operands(rng, lay, special=seed % 2 == 1)
    got = _simulate(cfg, x, w, lay["stride"], lay["pad"], lay["dil"], bands=1 + seed % 2,
                    x_base=(seed % 2) * 128, w_base=(seed % 3) * 40)
    want = mx.conv_forward(x, w, fmt, lay["stride"], lay["pad"], lay["dil"], part=cfg.rows)
    assert np.array_equal(got, want), (lay, np.argwhere(got != want)[:4])


@pytest.mark.long
def test_mx_short_tiles_on_wide_columns():
    """MX with 2 rows and 32 columns: tiles of 9 cycles whose sums drain longer, so the W
    scale words of four tiles wait at once (a queue of three loses one); W's scales differ
    from tap to tap. Y still equals the contract's channel-first order."""
    cfg = CFG_MX["mxint8"].replace(name="cf_test_mx_wide", rows=2, cols=32, backward_modes=[])
    rng = np.random.default_rng(7)
    lay = dict(n=1, c=34, h=2, w=2, k=30, r=2, s=2, stride=(1, 1), pad=(1, 0), dil=(1, 1))
    x, w = _mx_operands(rng, lay, special=False)
    w *= np.exp2(rng.integers(-8, 8, (lay["k"], 1, lay["r"], lay["s"]))).astype(np.float32)
    got = _simulate(cfg, x, w, lay["stride"], lay["pad"], lay["dil"])
    want = mx.conv_forward(x, w, "mxint8", lay["stride"], lay["pad"], lay["dil"], part=2)
    assert np.array_equal(got, want)


# make test-long: the loss's stride classes run through the whole MX accelerator in make test
# (tests/test_gateware_accelerator.py::test_mx_training_phases_verilator)
@pytest.mark.long
@pytest.mark.parametrize("fmt", ["mxint8", "mxfp8_e4m3"])
def test_mx_loss_by_classes_equals_golden(fmt):
    """The loss in an MX format as the stride-1 forwards of its stride classes on the engine
    (:mod:`bpsa.plan.loss_classes`, dY and W^T quantized along K by the run helpers) equals
    ``bpsa.models.mx.conv_loss(..., part=rows)`` bit for bit: K past one block, stride 2 and
    3, dilation, padding."""
    from bpsa.plan.loss_classes import loss_by_classes
    cfg = CFG_MX[fmt]
    rng = np.random.default_rng(41)
    for (n, c, h, wd), (k, r, s), st, pad, dil in (((1, 5, 7, 6), (34, 3, 3), (2, 2), 1, 1),
                                                    ((1, 3, 8, 7), (6, 2, 3), (3, 2), (0, 1),
                                                     (2, 1))):
        oh = tbcf.out_size(h, r, *(v if isinstance(v, int) else v[0] for v in (st, pad, dil)))
        ow = tbcf.out_size(wd, s, *(v if isinstance(v, int) else v[1] for v in (st, pad, dil)))
        dy = rng.standard_normal((n, k, oh, ow)) * np.exp2(rng.integers(-6, 6, (n, k, 1, ow)))
        w = rng.standard_normal((k, c, r, s)) * np.exp2(rng.integers(-6, 6, (k, c, 1, 1)))
        dy, w = dy.astype(np.float32), w.astype(np.float32)

        def forward(x, wt, stride, padding, dilation):
            return _simulate(cfg, x, wt, stride, padding, dilation)
        got, jobs = loss_by_classes(dy, w, (h, wd), st, pad, dil, forward)
        want = mx.conv_loss(dy, w, fmt, (h, wd), st, pad, dil, part=cfg.rows)
        assert len(jobs) > 1 and np.array_equal(got.astype(np.uint32), want)


# make test-long: the channel-first front end's Verilog runs in MX through the whole MX
# accelerator in make test (tests/test_gateware_accelerator.py)
@pytest.mark.long
@pytest.mark.cocotb
@pytest.mark.parametrize("fmt", ["int", "mxint8", "mxfp8_e4m3"])
def test_engine_verilator(fmt):
    """The engine's generated Verilog (top ``cf_engine``) under Verilator, run by run, against
    the golden models (:mod:`bpsa.sim.testbenches.tb_channel_first`): C past one 32-channel
    block, strides, padding, dilation, K past the columns, two row bands."""
    import json

    from bpsa.sim.runner import run_cocotb
    from bpsa.spec.layer import ConvLayer
    cfg = CFG if fmt == "int" else CFG_MX[fmt]
    layers = [ConvLayer.conv(1, 37, 5, 6, 4, 3, 2, stride=(2, 1), pad=1),
              ConvLayer.conv(2, 6, 7, 5, 3, 2, 3, stride=1, pad=(0, 2), dil=(2, 1))]
    env = {"BPSA_LAYERS": json.dumps([lay.to_dict() for lay in layers]), "BPSA_BANDS": "2"}
    assert run_cocotb(cfg, "bpsa.sim.testbenches.tb_channel_first", top="cf_engine",
                      extra_env=env) == (1, 0)


# make test-long: the channel-first front end runs in MX through the whole accelerator in make
# test (tests/test_gateware_accelerator.py::test_mx_training_phases_verilator)
@pytest.mark.long
@pytest.mark.cocotb
def test_cli_engine(capsys, tmp_path):
    """``bpsa sim --engine --phase forward --im2col channel_first`` runs a layer on the engine
    under Verilator in an MX format (the build of :func:`test_engine_verilator`) and prints
    its summary; what the engine cannot run is refused in one line with the reason."""
    import json

    from bpsa.cli import main
    cfg = CFG_MX["mxfp8_e4m3"]
    toml = tmp_path / "cf_mx.toml"
    toml.write_text("".join(f"{k} = {json.dumps(v)}\n" for k, v in cfg.to_dict().items()
                            if v != getattr(Config(), k)))
    assert Config.from_dict(load_config(str(toml)).to_dict()) == cfg
    base = ["sim", "--config", str(toml), "--engine", "--phase", "forward"]
    assert main([*base, "--im2col", "channel_first", "--layer", "C=35,H=5,K=4,R=3,pad=1",
                 "--json"]) in (None, 0)
    out = json.loads(capsys.readouterr().out)
    assert out["match"] is True and out["runs"] == 18 and out["macs"] == 35 * 25 * 4 * 9
    assert 0 < out["utilization"] < 1 and out["cycles"] == out["model_cycles"]
    for argv, reason in (
            (["--im2col", "channel_first", "--layer", "C=3,H=30,K=2,R=3"],
             "does not fit the X banks (256 words, buf_cf_depth)"),
            (["--im2col", "channel_first", "--layer", "C=3,H=4,K=2,R=9"], "more than the padded input"),
            (["--im2col", "feeder", "--layer", "C=3,H=4,K=2,R=3"], "--im2col channel_first"),
            (["--layer", "C=3,H=4,K=2,R=3"], "--engine --phase forward --im2col channel_first")):
        assert main([*base, *argv]) == 2
        err = capsys.readouterr().err
        assert reason in err and len(err.strip().splitlines()) == 1, err


def test_mx_refusals():
    """MX builds the front end only where a run's channels share one block's scale (at most
    32 rows), and never in bf16 / fp16; a layer an MX run cannot take is refused by the
    planner, not here."""
    with warnings.catch_warnings():           # the refused objects are never elaborated
        warnings.simplefilter("ignore", UnusedElaboratable)
        with pytest.raises(ValueError, match="rows must be at most 32 for the channel-first"):
            ChannelFirst(CFG_MX["mxint8"].replace(rows=64))
        with pytest.raises(ConfigError, match="integer only"):
            ChannelFirst(CFG.replace(name="cf_bf16", arithmetic="bf16", operand_width=16,
                                     acc_width=32, dataflows=["os"]))
        gc.collect()


def test_first_layer_multi_tile():
    """C = 3 on 8 rows with a 7 x 7 / 2 kernel (ResNet-50's conv1 shape, scaled): two taps a
    tile, and Y equals the golden convolution."""
    rng = np.random.default_rng(7)
    x = rng.integers(-8, 8, size=(1, 3, 11, 11))
    w = rng.integers(-8, 8, size=(2, 3, 7, 7))
    trace = []
    got = _simulate(CFG16, x, w, 2, 3, 1, trace=trace)
    assert np.array_equal(got, conv2d(x, w, 2, 3, 1))
    assert len(cfm.passes(8, 2, 3, 2, 7, 7)) == 7 * 4           # 28 tiles, not 49
    assert sum(len(e) for _, e in trace) == 28 * 6 * 6


def test_short_tiles_are_spaced():
    """One output pixel a tile (fewer than 2 rows of cycles): the next tile's weights still
    arrive before the switch."""
    rng = np.random.default_rng(3)
    x = rng.integers(-8, 8, size=(1, 6, 3, 3))
    w = rng.integers(-8, 8, size=(4, 6, 3, 3))
    got = _simulate(CFG, x, w, 1, 0, 1)
    assert np.array_equal(got, conv2d(x, w, 1, 0, 1))


# --- bounded formal check of the address cursor ------------------------------------------------
#
# The cursor (tile, output pixel, and the input coordinates and bank address it keeps by
# additions only) against its definition by multiplication, for every run whose fields are
# below 2**FORMAL_DW and every position: the origin is position 0, and one step from any
# position but the run's last is the next position of the loop nest (ow fastest, then oh, then
# q0 by T, then r). Each property is combinational, so a depth-1 BMC proves it for all
# values. By induction over the stream, row i of every vector reads input pixel (oh s_h + r d_h
# - pad_top, ow s_w + (q0 + g_i) d_w - pad_w) at bank word x_base + y W + x: the naive model of
# `bpsa.models.channel_first.row_addresses`.

CFG_F = Config(name="cf_formal", rows=2, cols=2, dim_width=4, buf_a_depth=16, buf_b_depth=16,
               buf_p_depth=16, buf_cf_depth=16, dataflows=["os", "ws"],
               forward_frontends=["feeder", "channel_first"])
FORMAL_DW = 3


class _CursorProof(wiring.Component):
    """Free run, products and position; Assume a valid run and position, Assert one
    property (``origin`` / ``step``)."""

    def __init__(self, prop):
        from amaranth.lib.wiring import In
        from amaranth.hdl import unsigned
        from amaranth.lib import data
        from bpsa.gateware.frontends.channel_first.channel_first import cf_run_layout, products_layout
        self.prop = prop
        super().__init__({
            "run": In(cf_run_layout(CFG_F)), "k": In(products_layout(CFG_F)),
            "pos": In(data.StructLayout({x: unsigned(FORMAL_DW) for x in ("r", "q", "oh",
                                                                          "ow")})),
        })

    def elaborate(self, platform):
        from amaranth.hdl import Assert, Assume, Module, Mux, Signal
        from bpsa.gateware.frontends.channel_first.channel_first import (cursor_layout, cursor_origin,
                                                         cursor_step)
        m = Module()
        run, k, pos = self.run, self.k, self.pos
        lim = 2 ** FORMAL_DW
        for name in ("out_rows", "out_width", "kernel_h", "kernel_w", "stride_h", "stride_w",
                     "dil_h", "dil_w", "width"):
            m.d.comb += Assume((getattr(run, name) > 0) & (getattr(run, name) < lim))
        m.d.comb += Assume((run.pad_top < lim) & (run.pad_w < lim) & (k.taps > 0)
                           & (k.taps <= run.kernel_w)
                           & (k.sh_w == run.stride_h * run.width)
                           & (k.dh_w == run.dil_h * run.width)
                           & (k.t_dw == k.taps * run.dil_w)
                           & (k.ptw == run.pad_top * run.width))
        # the position: q0 a multiple of T below S
        q0 = Signal(2 * FORMAL_DW + 2)
        m.d.comb += [q0.eq(pos.q * k.taps),
                     Assume((pos.r < run.kernel_h) & (q0 < run.kernel_w)
                            & (pos.oh < run.out_rows) & (pos.ow < run.out_width))]

        def state_of(r, qq, oh, ow, name):
            st = Signal(cursor_layout(CFG_F), name=name)
            y0 = r * run.dil_h - run.pad_top
            xq0 = qq * run.dil_w - run.pad_w
            m.d.comb += [st.r.eq(r), st.q0.eq(qq), st.oh.eq(oh), st.ow.eq(ow),
                         st.y0.eq(y0), st.ra0.eq(y0 * run.width), st.xq0.eq(xq0),
                         st.y.eq(y0 + oh * run.stride_h),
                         st.ra.eq((y0 + oh * run.stride_h) * run.width),
                         st.xq.eq(xq0 + ow * run.stride_w)]
            return st

        if self.prop == "origin":
            org = Signal(cursor_layout(CFG_F))
            m.d.comb += cursor_origin(run, k, org)
            m.d.comb += Assert(org.as_value() == state_of(0, 0, 0, 0, "zero").as_value())
            return m
        cur = state_of(pos.r, q0, pos.oh, pos.ow, "cur")
        nxt = Signal(cursor_layout(CFG_F))
        tile_end, last_tile = cursor_step(m, run, k, cur, nxt)
        row_end = pos.ow + 1 == run.out_width
        t_end = row_end & (pos.oh + 1 == run.out_rows)
        q_wrap = q0 + k.taps >= run.kernel_w
        last = t_end & q_wrap & (pos.r + 1 == run.kernel_h)
        succ = (Mux(t_end & q_wrap, pos.r + 1, pos.r),
                Mux(t_end, Mux(q_wrap, 0, q0 + k.taps), q0),
                Mux(row_end, Mux(t_end, 0, pos.oh + 1), pos.oh),
                Mux(row_end, 0, pos.ow + 1))
        m.d.comb += [Assert(tile_end == t_end, "tile end"),
                     Assert(last_tile == (q_wrap & (pos.r + 1 == run.kernel_h)), "last tile")]
        with m.If(~last):
            m.d.comb += Assert(nxt.as_value() == state_of(*succ, "succ").as_value(), "step")
        return m


@pytest.mark.formal
@pytest.mark.parametrize("prop", ["origin", "step"])
def test_cursor_formally_equals_its_definition(prop, tmp_path):
    """Every run with fields below 2**FORMAL_DW, every position: the cursor's origin and its
    step equal the index map by multiplication (see above)."""
    from bpsa.verify.formal import prove
    passed, log = prove(_CursorProof(prop), f"channel_first_{prop}", tmp_path)
    assert passed, log
