"""The forward convolution (data feeder + weight fetcher + OS array): Y against
``bpsa.models.golden.conv2d`` in the Amaranth simulator and, as generated Verilog, under Verilator;
the weight fetcher against a naive model; counters against the feeder model and closed forms;
refused layers; the host-side helpers and ``bpsa sim --phase forward``."""

import gc
import warnings

import numpy as np
import pytest
from amaranth.hdl import Module, UnusedElaboratable
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.sim import Simulator

from bpsa.config import Config, load_config
from bpsa.gateware.frontends.conv_forward import (
    COUNTERS,
    ConvForward,
    WeightFetcher,
    conv_layer_layout,
    check_layer,
)
from bpsa.spec.layer import ConvLayer, parse_layer
from bpsa.sim.conv_forward_run import (
    assemble,
    descriptor,
    expected_y,
    random_operands,
    traffic,
    w_image,
    x_image,
)

#: Two rows, three columns, a four-element bus: short contexts and K tiles come cheap.
CFG_TINY = Config(name="cf_r2_c3_b4", rows=2, cols=3, feeder_bus_width=4, feeder_lane_regs=2,
                  feeder_pattern_width=12, dim_width=6, buf_a_depth=64, buf_b_depth=64,
                  dataflows=["os"])
#: Four rows, one column, unsigned operands, every dataflow generated (wide vertical channel).
CFG_COL = Config(name="cf_r4_c1_b8", rows=4, cols=1, feeder_bus_width=8, operand_width=6,
                 operand_signed=False, acc_width=20, dim_width=6, buf_a_depth=32,
                 buf_b_depth=128)


#: CFG_TINY in floating point: bf16 operands, fp32 accumulators, contexts 2R + 5 apart.
CFG_TINY_BF16 = Config(name="cf_r2_c3_b4_bf16", rows=2, cols=3, feeder_bus_width=4,
                       feeder_lane_regs=2, feeder_pattern_width=12, dim_width=6,
                       buf_a_depth=64, buf_b_depth=64, dataflows=["os"], arithmetic="bf16",
                       operand_width=16, acc_width=32)
CFG_COL_FP16 = Config(name="cf_r4_c1_b8_fp16", rows=4, cols=1, feeder_bus_width=8,
                      arithmetic="fp16", operand_width=16, acc_width=32, dim_width=6,
                      buf_a_depth=32, buf_b_depth=128, dataflows=["os"])


def simulate(cfg, runs, max_cycles=20000):
    """Run ``runs`` (a list of ``(layer, x, w, x_base, w_base)``, or of raw descriptor dicts
    for refused layers) back to back on one ConvForward in the Amaranth simulator. Returns, per
    run, ``(rows, counters, error)``."""
    dut = ConvForward(cfg)
    results = []

    async def tb(ctx):
        for run in runs:
            if isinstance(run, dict):     # the layout's fields of a raw descriptor
                desc = {name: run[name] for name, _ in conv_layer_layout(cfg)}
            else:
                layer, x, w, x_base, w_base = run
                first, xw = x_image(cfg, layer, x, x_base)
                for port, base, words in ((dut.x_write, first, xw),
                                          (dut.w_write, w_base, w_image(cfg, layer, w))):
                    for i, word in enumerate(words):
                        ctx.set(port.en, 1)
                        ctx.set(port.addr, base + i)
                        ctx.set(port.data, [int(v) for v in word])
                        await ctx.tick()
                    ctx.set(port.en, 0)
                desc = descriptor(cfg, layer, x_base, w_base)
            ctx.set(dut.layer, desc)
            ctx.set(dut.start, 1)
            await ctx.tick()
            ctx.set(dut.start, 0)
            rows = []
            for _ in range(max_cycles):
                if ctx.get(dut.y.valid):
                    p = ctx.get(dut.y.payload)
                    rows.append((p.n, p.k0, p.oh, p.ow0, p.row, [int(v) for v in p.data]))
                if ctx.get(dut.done):
                    break
                assert ctx.get(dut.busy)
                await ctx.tick()
            else:
                raise AssertionError(f"{desc}: not done after {max_cycles} cycles")
            assert not ctx.get(dut.busy)
            results.append((rows, {c: ctx.get(getattr(dut, c)) for c in COUNTERS},
                            ctx.get(dut.error)))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()
    return results


def _closed_form(cfg, layer):
    oh_n, ow_n = layer.out_hw
    tiles = -(-layer.out_channels // cfg.cols)
    ctxs = layer.batch * oh_n * -(-ow_n // cfg.rows)
    return tiles, ctxs


def _check_run(cfg, layer, x, w, x_base, result):
    """Y equals the golden convolution and the counters their closed forms."""
    rows, c, error = result
    assert error == 0
    np.testing.assert_array_equal(assemble(cfg, layer, rows), expected_y(cfg, layer, x, w),
                                  err_msg=layer.text())
    tiles, ctxs = _closed_form(cfg, layer)
    oh_n, ow_n = layer.out_hw
    assert c["words_read"] == traffic(cfg, layer, x_base)["model_words_read"]
    assert c["vectors"] == tiles * ctxs * layer.crs
    assert c["y_vectors"] == len(rows) == tiles * layer.batch * oh_n * ow_n
    assert c["drained"] == tiles * ctxs * cfg.rows
    assert c["fired"] + c["gated"] == c["vectors"] * cfg.rows * cfg.cols
    assert c["vectors"] <= c["w_words_read"] <= c["vectors"] + tiles
    assert c["fifo_stall_cycles"] <= c["stall_cycles"]
    assert c["vectors"] + c["gap_cycles"] < c["cycles"]


SIM_LAYERS = [
    (CFG_TINY, ConvLayer.conv(1, 2, 4, 5, 4, 3, 3, pad=1)),                 # K > cols
    (CFG_TINY, ConvLayer.conv(1, 1, 3, 5, 2, 1, 1)),                        # CRS = 1 < 2R
    (CFG_TINY, ConvLayer.conv(2, 3, 5, 6, 7, 2, 3, (2, 1), (1, 0), (1, 2))),  # batch 2
    (CFG_TINY, ConvLayer.conv(1, 1, 9, 9, 3, 3, 3, 3, 2, 3)),               # s 3, d 3
    (CFG_TINY, ConvLayer.conv(1, 5, 4, 4, 3, 1, 1, 2, 0)),                  # 1x1 stride 2
    (CFG_COL, ConvLayer.conv(1, 3, 5, 9, 2, 2, 4, 1, (0, 2), (1, 2))),      # cols = 1
    (load_config("nonsquare"), ConvLayer.conv(1, 2, 4, 7, 6, 3, 3, 1, 1)),  # a preset
    (CFG_TINY, ConvLayer.conv(1, 2, 6, 5, 3, 3, 3, 2, 1, pad_bottom=0)),    # bottom pad 0
    (CFG_TINY, ConvLayer.conv(2, 1, 4, 5, 2, 3, 2, 1, 0, pad_bottom=2)),    # bottom pad only
    # floating point: each output's slots in (c, r, q) order, padding taps zero slots
    (CFG_TINY_BF16, ConvLayer.conv(1, 2, 4, 5, 4, 3, 3, pad=1)),            # K > cols, CRS 18
    (CFG_TINY_BF16, ConvLayer.conv(1, 1, 3, 5, 2, 1, 1)),                   # CRS = 1
    (CFG_TINY_BF16, ConvLayer.conv(2, 3, 5, 6, 7, 2, 3, (2, 1), (1, 0), (1, 2))),  # batch 2
    (CFG_COL_FP16, ConvLayer.conv(1, 3, 5, 9, 2, 2, 4, 1, (0, 2), (1, 2))),  # cols = 1
]


@pytest.mark.parametrize("cfg,layer", SIM_LAYERS,
                         ids=[f"{c.name}-{i}" for i, (c, _) in enumerate(SIM_LAYERS)])
def test_forward_matches_golden(cfg, layer):
    """Y equals ``bpsa.models.golden.conv2d`` (wrapped), at an unaligned X base and a W base other
    than 0, with the counters' closed forms and the feeder model's X word count."""
    rng = np.random.default_rng(layer.crs)
    x, w = random_operands(cfg, layer, rng)
    (result,) = simulate(cfg, [(layer, x, w, 3, 1)])
    _check_run(cfg, layer, x, w, 3, result)


def test_back_to_back_layers_and_short_contexts():
    """Layers run one after the other on one top (the reserve chains and counters start
    clean each time); contexts of 1 and 3 vectors on a 2-row array are spaced to 2R = 4
    cycles by holding their last vector (``gap_cycles``), never refused."""
    cfg = CFG_TINY
    rng = np.random.default_rng(7)
    layers = [ConvLayer.conv(1, 1, 3, 4, 3, 1, 1), ConvLayer.conv(1, 3, 3, 5, 4, 1, 1),
              ConvLayer.conv(2, 2, 4, 4, 2, 2, 2)]
    runs = [(layer, *random_operands(cfg, layer, rng), 0, 0) for layer in layers]
    results = simulate(cfg, runs)
    for (layer, x, w, xb, _), result in zip(runs, results):
        _check_run(cfg, layer, x, w, xb, result)
    assert results[0][1]["gap_cycles"] > 0 and results[1][1]["gap_cycles"] > 0
    tiles, ctxs = _closed_form(cfg, layers[0])
    # One vector per context, contexts 2R apart: the array time is about 2R per context.
    assert results[0][1]["array_cycles"] <= tiles * ctxs * 2 * cfg.rows + 4 * cfg.rows + cfg.cols


# --- refusals ------------------------------------------------------------------------------

REFUSED = [
    (dict(vars(ConvLayer.conv(1, 4, 4, 4, 12, 3, 3))), "does not fit the W buffer"),
    (dict(vars(ConvLayer.conv(1, 1, 4, 4, 9, 1, 1)), w_base=62), "does not fit the W buffer"),
    (dict(vars(ConvLayer.conv(1, 1, 6, 20, 1, 1, 13))), "feeder_pattern_width"),
    (dict(vars(ConvLayer.conv(1, 1, 6, 20, 1, 1, 4, dil=4))), "feeder_pattern_width"),
    (dict(vars(ConvLayer.conv(2, 2, 8, 9, 1, 1, 1))), "does not fit the SRAM"),
    (dict(vars(ConvLayer.conv(1, 1, 4, 4, 1, 1, 1)), x_base=250), "does not fit the SRAM"),
    (dict(vars(ConvLayer.conv(1, 1, 4, 4, 0, 1, 1))), "out_channels must be at least 1"),
    (dict(vars(ConvLayer.conv(1, 1, 4, 4, 1, 5, 1))), "padded input"),
    (dict(vars(ConvLayer.conv(1, 0, 4, 4, 1, 1, 1))), "channels must be at least 1"),
    (dict(vars(ConvLayer.conv(1, 1, 4, 4, 1, 1, 1, stride=0))), "stride_h must be at least 1"),
]


@pytest.mark.parametrize("fields,reason", REFUSED)
def test_check_layer_refuses(fields, reason):
    with pytest.raises(ValueError, match=reason):
        check_layer(CFG_TINY, fields)


def test_check_layer_refuses_unrepresentable():
    with pytest.raises(ValueError, match="out_channels must be in"):
        check_layer(CFG_TINY, dict(vars(ConvLayer.conv(1, 1, 4, 4, 64, 1, 1))))
    with pytest.raises(ValueError, match="w_base must be in"):
        check_layer(CFG_TINY, dict(vars(ConvLayer.conv(1, 1, 4, 4, 1, 1, 1)), w_base=64))
    with pytest.raises(ValueError, match="height must be an integer"):
        check_layer(CFG_TINY, dict(vars(ConvLayer.conv(1, 1, 4, 4, 1, 1, 1)), height=None))


def test_hardware_refuses_illegal_layers():
    """Every refused descriptor raises ``error`` and ``done`` within a few dozen cycles, with
    no Y row, no X SRAM read and no vector into the array (the W fetcher, started with the
    feeder, may have read its first word); a legal layer afterwards runs."""
    cfg = CFG_TINY
    legal = ConvLayer.conv(1, 2, 4, 4, 4, 2, 2)
    x, w = random_operands(cfg, legal, np.random.default_rng(1))
    runs = [dict({"pad_h": 0, "pad_w": 0, "x_base": 0, "w_base": 0}, **f) for f, _ in REFUSED]
    for f in runs:
        f["pad_bottom"] = f["pad_h"] if f.get("pad_bottom") is None else f["pad_bottom"]
    results = simulate(cfg, runs + [(legal, x, w, 0, 0)])
    for desc, (rows, c, error) in zip(runs, results):
        assert error == 1 and rows == [], desc
        assert c["words_read"] == c["vectors"] == 0 and c["w_words_read"] <= 1, desc
        assert c["cycles"] < 40, desc
    _check_run(cfg, legal, x, w, 0, results[-1])


def test_constructor_checks():
    """Configurations that cannot run a convolution are refused at once, naming the reason."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnusedElaboratable)
        with pytest.raises(TypeError, match="config must be a Config"):
            ConvForward({"rows": 4})
        with pytest.raises(ValueError, match="reserve_registers"):
            ConvForward(load_config("plain_os"))
        with pytest.raises(ValueError, match="'os' dataflow"):
            ConvForward(Config(dataflows=["ws"]))
        with pytest.raises(TypeError, match="config must be a Config"):
            WeightFetcher(None)
        gc.collect()


# --- weight fetcher ------------------------------------------------------------------------

class FetcherTop(wiring.Component):
    """A :class:`WeightFetcher` reading a :class:`Memory` through its read port."""

    def __init__(self, cfg, words):
        self.cfg = cfg
        self.words = words
        self.fetcher = WeightFetcher(cfg)
        super().__init__({})

    def elaborate(self, platform):
        m = Module()
        m.submodules.fetcher = self.fetcher
        m.submodules.mem = mem = Memory(shape=self.fetcher.mem.signature.shape,
                                        depth=self.cfg.buf_b_depth, init=self.words)
        wiring.connect(m, self.fetcher.mem, mem.read_port())
        return m


def test_weight_fetcher_against_naive():
    """Random tiles (base, length) started at random points, random ``ready``: the words
    taken are ``base, .., base + length - 1`` over and over from the last start, ``last`` on
    every ``length``-th, the payload holds while not taken, and ``length = 0`` stops."""
    cfg = CFG_TINY
    rng = np.random.default_rng(11)
    words = [[int(v) for v in rng.integers(-128, 128, cfg.cols)]
             for _ in range(cfg.buf_b_depth)]
    top = FetcherTop(cfg, words)
    f = top.fetcher

    async def tb(ctx):
        for trial in range(12):
            base = int(rng.integers(0, cfg.buf_b_depth))
            length = int(rng.integers(1, cfg.buf_b_depth - base + 1))
            if trial == 11:
                length = 0
            ctx.set(f.base, base)
            ctx.set(f.length, length)
            ctx.set(f.start, 1)
            ctx.set(f.b.ready, 0)
            await ctx.tick()
            ctx.set(f.start, 0)
            taken, held = [], None
            for _ in range(int(rng.integers(5, 3 * length + 10))):
                ready = bool(rng.random() < 0.6)
                ctx.set(f.b.ready, ready)
                valid = ctx.get(f.b.valid)
                p = ctx.get(f.b.payload)
                vec = ([int(v) for v in p.data], int(p.last))
                if held is not None:
                    assert valid and vec == held, "payload changed before the transfer"
                held = vec if valid and not ready else None
                if valid and ready:
                    taken.append(vec)
                await ctx.tick()
            want = [(words[base + i % length], int(i % length == length - 1))
                    for i in range(len(taken))] if length else []
            assert taken == want, f"base {base}, length {length}"
            assert length == 0 or len(taken) > 0

    sim = Simulator(top)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()


# --- host-side helpers ---------------------------------------------------------------------

def test_parse_layer():
    layer = parse_layer("C=3,H=32,W=30,K=8,R=7,S=5,stride=2,pad=3,dilation=1,N=2")
    assert layer == ConvLayer.conv(2, 3, 32, 30, 8, 7, 5, 2, 3, 1)
    assert parse_layer("C=2, H=9, K=4, R=3") == ConvLayer.conv(1, 2, 9, 9, 4, 3, 3)
    assert parse_layer("C=1,H=9,W=12,K=1,R=3,stride=1x2,pad=0x1,dilation=2x1") == \
        ConvLayer.conv(1, 1, 9, 12, 1, 3, 3, (1, 2), (0, 1), (2, 1))
    assert parse_layer(layer.text()) == layer
    for text, reason in [("C=1,H=4,K=1,R=1,Q=2", "unknown layer key 'Q'"),
                         ("C=1,H=4,K=1", "layer needs R"),
                         ("C=1,H=4,K=1,R=1,C=2", "given twice"),
                         ("C=1,H=4,K=1,R=x", "R must be a non-negative integer"),
                         ("C=1,H=4,K=1,R=1,stride=0", "stride must be at least 1"),
                         ("C=0,H=4,K=1,R=1", "C must be at least 1"),
                         ("C=1,H=4,K=1,R=5", "kernel_hw"),
                         ("C=1,H4,K=1,R=1", "not KEY=VALUE")]:
        with pytest.raises(ValueError, match=reason):
            parse_layer(text)


def test_buffer_images_and_assembly():
    """W words are ``W[k0 + j, c, r, q]`` lane by lane (0 past K); X words hold X flattened
    from ``x_base``; assembly refuses missing, repeated and stray rows."""
    cfg = CFG_TINY
    layer = ConvLayer.conv(1, 2, 3, 3, 4, 2, 2)
    w = np.arange(4 * 8).reshape(4, 2, 2, 2)
    img = w_image(cfg, layer, w)
    assert img.shape == (2 * 8, 3)
    assert list(img[5]) == [w[0, 1, 0, 1], w[1, 1, 0, 1], w[2, 1, 0, 1]]
    assert list(img[8 + 5]) == [w[3, 1, 0, 1], 0, 0]
    x = np.arange(18).reshape(1, 2, 3, 3) + 1
    first, xw = x_image(cfg, layer, x, 6)
    assert first == 1 and xw.ravel()[2] == 1 and xw.ravel()[2 + 17] == 18
    y = np.arange(4 * 2 * 2).reshape(1, 4, 2, 2)
    rows = [(0, k0, oh, 0, r, list(y[0, k0:k0 + 3, oh, r]) + [0] * (3 - len(y[0, k0:k0 + 3])))
            for k0 in (0, 3) for oh in range(2) for r in range(2)]
    np.testing.assert_array_equal(assemble(cfg, layer, rows), y)
    with pytest.raises(AssertionError, match="missing or repeated"):
        assemble(cfg, layer, rows[:-1])
    with pytest.raises(AssertionError, match="missing or repeated"):
        assemble(cfg, layer, rows + rows[:1])
    with pytest.raises(AssertionError, match="outside Y"):
        assemble(cfg, layer, rows + [(0, 0, 2, 0, 0, [0, 0, 0])])


def test_traffic_counts_explicit_im2col():
    """``im2col_words``: the explicit im2col matrix (N*OH*OW x C*R*S) packed B to a word,
    once per output-channel tile."""
    cfg = CFG_TINY
    layer = ConvLayer.conv(2, 3, 6, 7, 4, 3, 3, 2, 1)
    t = traffic(cfg, layer)
    oh, ow = layer.out_hw
    assert t["im2col_elements"] == 2 * (2 * oh * ow * 27)
    assert t["im2col_words"] == 2 * -(-(2 * oh * ow * 27) // 4)
    assert t["x_words"] == -(-2 * 3 * 6 * 7 // 4) and t["w_words"] == 2 * 27


def test_cli_refuses_bad_layers(capsys):
    """``bpsa sim --engine --phase forward``: a bad layer string or a layer the hardware cannot run
    is one ``bpsa: error:`` line and exit status 2 (nothing is built)."""
    from bpsa.cli import main
    for args, reason in [
        (["--layer", "C=1,H=4,K=1,R=1,bogus=1"], "unknown layer key 'bogus'"),
        (["--layer", "C=3,H=40,K=8,R=3,S=17"], "feeder_pattern_width"),
        (["--layer", "C=64,H=9,K=64,R=3"], "does not fit the W buffer"),
        ([], "--layer"),
        (["--layer", "C=1,H=4,K=1,R=1", "--gemm", "4,4,4"], "--gemm"),
    ]:
        assert main(["sim", "--engine", "--phase", "forward", *args]) == 2
        err = capsys.readouterr().err
        assert err.startswith("bpsa: error: ") and reason in err and err.count("\n") == 1


# --- generated Verilog under Verilator -----------------------------------------------------

VERILATOR_LAYERS = {
    "small_bf16": [
        ConvLayer.conv(1, 3, 13, 15, 6, 7, 7, 2, 3),               # 7x7 stride 2, padding 3
        ConvLayer.conv(2, 9, 6, 7, 4, 3, 3, 1, 1),                 # C = 9 on an 8 bus, batch 2
        ConvLayer.conv(1, 3, 5, 6, 4, 1, 1),                       # 1x1, CRS 3 < the gap
        ConvLayer.conv(2, 5, 7, 11, 9, 2, 5, (1, 2), (0, 2), (2, 1)),  # non-square, 3 tiles
    ],
    "small": [
        ConvLayer.conv(1, 3, 19, 21, 5, 11, 11, 4, 2),             # 11x11 stride 4, K > cols
        ConvLayer.conv(1, 3, 13, 15, 6, 7, 7, 2, 3),               # 7x7 stride 2, padding 3
        ConvLayer.conv(2, 9, 6, 7, 4, 3, 3, 1, 1),                 # C = 9 on an 8 bus, batch 2
        ConvLayer.conv(1, 11, 7, 9, 5, 1, 1, 2, 0),                # 1x1 stride 2
        ConvLayer.conv(1, 3, 5, 6, 4, 1, 1),                       # 1x1, CRS 3 < 2R
        ConvLayer.conv(1, 2, 14, 13, 3, 3, 3, 3, 3, 3),            # stride 3, dilation 3
        ConvLayer.conv(2, 5, 7, 11, 9, 2, 5, (1, 2), (0, 2), (2, 1)),  # non-square, 3 tiles
        ConvLayer.conv(1, 1, 9, 10, 4, 5, 5, 1, 2, 2),             # 5x5 dilation 2
        ConvLayer.conv(1, 2, 13, 17, 4, 3, 3, 4, 0),               # stride 4
        ConvLayer.conv(1, 2, 9, 8, 5, 3, 3, 2, 2, pad_bottom=0),   # asymmetric padding
    ],
    "nonsquare": [
        ConvLayer.conv(1, 1, 15, 15, 7, 11, 11, 4, 0),             # 11x11 stride 4
        ConvLayer.conv(1, 2, 9, 9, 6, 7, 7, 2, 3),                 # 7x7 stride 2
        ConvLayer.conv(2, 3, 5, 8, 5, 3, 3, 1, 1),                 # 3x3, batch 2
        ConvLayer.conv(1, 1, 3, 4, 11, 1, 1, 1, 1),                # 1x1 padded, CRS 1, 3 tiles
        ConvLayer.conv(1, 2, 10, 9, 4, 3, 3, 2, 2, 2),             # dilation 2 stride 2
        ConvLayer.conv(1, 3, 8, 10, 10, 4, 2, (3, 1), (3, 0), (1, 3)),  # non-square kernel
    ],
}


@pytest.mark.cocotb
@pytest.mark.long
@pytest.mark.parametrize("preset", sorted(VERILATOR_LAYERS))
def test_forward_verilator(preset):
    # make test-long: the engine's own Verilog (its modules run under Verilator inside the
    # accelerator's native tests in make test, the bf16 one inside the bf16 accelerator's)
    """The generated Verilog of ConvForward: every layer's Y equals ``bpsa.models.golden.conv2d``
    bit-exactly and the X SRAM words read equal the feeder model's (the testbench asserts
    both), X and W at random buffer offsets; one build and one simulation per preset."""
    from bpsa.sim.simcmd import run_forward_layers
    cfg = load_config(preset)
    layers = VERILATOR_LAYERS[preset]
    results = run_forward_layers(cfg, layers, seed=5, random_base=True)
    assert [r["match"] for r in results] == [True] * len(layers)
    for layer, r in zip(layers, results):
        tiles, ctxs = _closed_form(cfg, layer)
        assert r["vectors"] == tiles * ctxs * layer.crs
        assert r["sram_words_read"] == r["model_words_read"]


@pytest.mark.cocotb
@pytest.mark.long
def test_illegal_layers_verilator():
    """Under Verilator, refused descriptors raise ``error`` without hanging or reading."""
    from bpsa.sim.runner import run_cocotb
    tests, failures = run_cocotb(load_config("small"), "bpsa.sim.testbenches.tb_conv_forward",
                                 top="conv_forward", testcase="illegal_layers_raise_error")
    assert tests == 1 and failures == 0


@pytest.mark.cocotb
@pytest.mark.long
def test_cli_forward(capsys):
    """``bpsa sim --engine --phase forward --layer ...`` prints the summary (reusing the
    build)."""
    from bpsa.cli import main
    assert main(["sim", "--engine", "--phase", "forward", "--layer", "C=2,H=7,K=5,R=3,pad=1",
                 "--seed", "4"]) == 0
    out = capsys.readouterr().out
    fields = dict(line.split(None, 1) for line in out.strip().splitlines())
    assert fields["match"] == "True" and fields["phase"] == "forward"
    for key in ("cycles", "utilization", "stall_cycles", "sram_words_read", "im2col_words"):
        assert key in fields
