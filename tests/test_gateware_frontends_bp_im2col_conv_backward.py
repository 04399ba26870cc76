"""The backward convolution top (loss through BP-im2col or the zero-spaced baseline on the IS
array): dX against ``bpsa.models.golden.conv2d_input_grad`` in the Amaranth simulator and, as
generated Verilog, under Verilator; counters against closed forms; refused layers; the host
helpers and ``bpsa sim --phase loss``."""

import numpy as np
import pytest
from amaranth.sim import Simulator

from bpsa.config import Config, load_config
from bpsa.gateware.frontends.bp_im2col.conv_backward import COUNTERS, ConvBackward, backward_layout
from bpsa.models import golden
from bpsa.spec.layer import ConvLayer, FcLayer, parse_fc, parse_layer
from bpsa.sim.conv_backward_run import (
    assemble,
    check_layer,
    descriptor,
    expected,
    geometry,
    images,
    random_tensors,
)
from bpsa.sim.conv_forward_run import pack_struct
from bpsa.sim.fc_backward_run import assemble as fc_assemble
from bpsa.sim.fc_backward_run import check_layer as fc_check_layer
from bpsa.sim.fc_backward_run import descriptor as fc_descriptor
from bpsa.sim.fc_backward_run import expected as fc_expected
from bpsa.sim.fc_backward_run import geometry as fc_geometry
from bpsa.sim.fc_backward_run import images as fc_images
from bpsa.sim.fc_backward_run import random_tensors as fc_random_tensors

#: A 2x3 array (non-square, short tiles), small buffers.
CFG_TINY = Config(name="cb_r2_c3", rows=2, cols=3, dim_width=6, buf_a_depth=512,
                  buf_b_depth=512, dataflows=["is"])


def simulate(cfg, runs, max_cycles=40000):
    """Run ``runs`` (``(layer, phase, baseline, tensors)``, ``("fc", fc_layer, tensors,
    sgd_shift)`` or a raw descriptor dict) back to back on one ConvBackward in the Amaranth
    simulator. Returns per run ``(outputs, counters, error, error_code, drains)``."""
    dut = ConvBackward(cfg)
    has_drain = cfg.has("interleaved")
    layout = backward_layout(cfg)
    results = []

    async def tb(ctx):
        for run in runs:
            if isinstance(run, dict):
                desc, imgs = run, {}
            elif run[0] == "fc":
                _, layer, tensors, sgd = run
                imgs = fc_images(cfg, layer, tensors)
                desc = fc_descriptor(cfg, layer, sgd)
            else:
                layer, phase, baseline, tensors = run
                imgs = images(cfg, layer, phase, tensors, baseline=baseline)
                desc = descriptor(cfg, layer, phase, baseline=baseline)
            if imgs:
                for port, (base, words) in ((dut.a_write, imgs["a"]), (dut.b_write, imgs["b"])):
                    for i, word in enumerate(words):
                        ctx.set(port.en, 1)
                        ctx.set(port.addr, base + i)
                        ctx.set(port.data, word)
                        await ctx.tick()
                    ctx.set(port.en, 0)
            ctx.set(dut.layer.as_value(), pack_struct(layout, desc))    # phase 3 too
            ctx.set(dut.start, 1)
            await ctx.tick()
            ctx.set(dut.start, 0)
            outs, drains = [], []
            for _ in range(max_cycles):
                if ctx.get(dut.out.valid):
                    p = ctx.get(dut.out.payload)
                    outs.append((p.row, p.tile, [int(v) for v in p.data]))
                if has_drain and ctx.get(dut.drain.valid):
                    p = ctx.get(dut.drain.payload)
                    drains.append((p.row, p.tile, [int(v) for v in p.data]))
                if ctx.get(dut.done):
                    break
                await ctx.tick()
            else:
                raise AssertionError(f"{desc}: not done after {max_cycles} cycles")
            results.append((outs, {c: ctx.get(getattr(dut, c)) for c in COUNTERS},
                            ctx.get(dut.error), ctx.get(dut.error_code), drains))
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()
    return results


LAYERS = [
    ConvLayer.conv(1, 2, 5, 5, 3, 3, 3, stride=2, pad=1),
    ConvLayer.conv(1, 3, 6, 5, 2, 1, 1, stride=2),
    ConvLayer.conv(2, 1, 5, 7, 2, 2, 3, stride=(1, 3), pad=(0, 2)),
    ConvLayer.conv(1, 2, 7, 6, 1, 3, 2, stride=1, pad=(3, 1), dil=2),
    ConvLayer.conv(1, 1, 9, 9, 2, 3, 3, stride=3, pad=3),
]


def _kept(layer):
    """dY pixels inside the loss's zero-spaced copy (padding past ``d(R-1)`` crops some)."""
    oh, ow = layer.out_hw
    count = 1
    for size, out, k, s, p, d in ((layer.height, oh, layer.kernel_h, layer.stride_h,
                                   layer.pad_h, layer.dil_h),
                                  (layer.width, ow, layer.kernel_w, layer.stride_w,
                                   layer.pad_w, layer.dil_w)):
        first = d * (k - 1) - p
        count *= sum(0 <= first + o * s < size + d * (k - 1) for o in range(out))
    return count * layer.batch * layer.out_channels


def _kept_x(layer):
    """X pixels inside the gradient's padded, cropped copy."""
    g = geometry(CFG_TINY, layer, "gradient")
    h = min(layer.height, g["hd"] + layer.dil_h * (layer.kernel_h - 1) - layer.pad_h)
    w = min(layer.width, g["wd"] + layer.dil_w * (layer.kernel_w - 1) - layer.pad_w)
    return layer.batch * layer.channels * h * w


def _lowered(layer, phase, tensors):
    """The explicit (zero-spaced) GEMM operands ``(a, b)`` of ``bpsa.models.golden``."""
    args = (layer.stride, layer.pad, layer.dil)
    if phase == "loss":
        low = golden.lower_input_grad(tensors["dy"], tensors["w"],
                                      (layer.height, layer.width), *args)
    else:
        low = golden.lower_weight_grad(tensors["x"], tensors["dy"],
                                       (layer.kernel_h, layer.kernel_w), *args)
    return low.a, low.b


@pytest.mark.parametrize("baseline", [False, True], ids=["bp", "baseline"])
@pytest.mark.parametrize("phase", ["loss", "gradient"])
def test_matches_golden(phase, baseline):
    """Every layer back to back on one top: dX / dW equals the golden model; words read,
    zeros sent, vectors and tiles equal their closed forms."""
    rng = np.random.default_rng(3)
    runs = [(layer, phase, baseline, random_tensors(CFG_TINY, layer, rng)) for layer in LAYERS]
    for layer in LAYERS:
        check_layer(CFG_TINY, layer, phase, baseline)
    results = simulate(CFG_TINY, runs)
    R, C = CFG_TINY.rows, CFG_TINY.cols
    for (layer, _, _, tensors), (outs, counters, error, _, _) in zip(runs, results):
        assert not error, layer.text()
        np.testing.assert_array_equal(assemble(CFG_TINY, layer, phase, outs),
                                      expected(CFG_TINY, layer, phase, tensors),
                                      err_msg=layer.text())
        g = geometry(CFG_TINY, layer, phase)
        a, b = _lowered(layer, phase, tensors)
        blocks = -(-g["ng"] // C)
        assert counters["tiles"] == g["tiles"]
        assert counters["vectors"] == g["tiles"] * g["m"]
        # Random data without zeros: every zero sent is structural or past the matrix edge.
        assert counters["zeros_b"] == g["tiles"] * R * C - np.count_nonzero(b)
        assert counters["zeros_a"] == blocks * (g["m"] * g["kt"] * R - np.count_nonzero(a))
        dense_a = blocks * g["m"] * g["kg"]
        if phase == "loss":
            assert counters["a_words"] == dense_a
        if baseline:
            assert counters["reorg_writes"] == g["za"] + g["zb"]
            assert counters["cycles_reorg"] >= g["za"] + g["zb"]
            assert counters["b_words"] == g["kg"] * g["ng"]      # dense, zeros included
            kept = _kept(layer) if phase == "loss" else g["dy"] + _kept_x(layer)
            assert counters["reorg_reads"] == kept
            assert counters["a_words"] == dense_a
        else:
            assert counters["reorg_writes"] == 0 and counters["cycles_reorg"] == 0
            assert counters["b_words"] == np.count_nonzero(b)
            assert counters["a_words"] == blocks * np.count_nonzero(a)


ASYMMETRIC = [
    ConvLayer.conv(1, 2, 6, 5, 2, 3, 3, stride=2, pad=1, pad_bottom=0),
    ConvLayer.conv(1, 1, 5, 6, 3, 3, 2, stride=1, pad=(0, 1), dil=2, pad_bottom=3),
    ConvLayer.conv(2, 2, 7, 5, 2, 2, 3, stride=3, pad=(2, 1), pad_bottom=1),
]


@pytest.mark.parametrize("phase", ["loss", "gradient"])
def test_asymmetric_padding_matches_golden(phase):
    """Top and bottom padding differ (``pad_bottom``, what the accelerator's row bands use):
    dX / dW equal the golden model on the explicitly padded input."""
    rng = np.random.default_rng(7)
    runs = [(layer, phase, False, random_tensors(CFG_TINY, layer, rng)) for layer in ASYMMETRIC]
    for layer in ASYMMETRIC:
        check_layer(CFG_TINY, layer, phase, False)
    for (layer, _, _, tensors), (outs, _, error, _, _) in zip(runs,
                                                                simulate(CFG_TINY, runs)):
        assert not error, layer
        np.testing.assert_array_equal(assemble(CFG_TINY, layer, phase, outs),
                                      expected(CFG_TINY, layer, phase, tensors),
                                      err_msg=str(layer))


def test_refusals_and_recovery():
    """A dY too large for buffer B (loss) or A (gradient) raises ``error`` without output; a
    legal layer runs afterwards."""
    layer = LAYERS[0]
    tensors = random_tensors(CFG_TINY, layer, np.random.default_rng(0))
    big = ConvLayer.conv(2, 1, 40, 40, 1, 1, 1)       # dY: 3200 elements
    runs = [descriptor(CFG_TINY, big, "loss"), descriptor(CFG_TINY, big, "gradient"),
            (layer, "gradient", False, tensors)]
    results = simulate(CFG_TINY, runs)
    for outs, _, error, _, _ in results[:2]:
        assert error == 1 and outs == []
    assert results[2][2] == 0
    np.testing.assert_array_equal(assemble(CFG_TINY, layer, "gradient", results[2][0]),
                                  expected(CFG_TINY, layer, "gradient", tensors))


def test_check_layer():
    cfg = load_config("small")
    check_layer(cfg, parse_layer("C=2,H=8,K=3,R=3,stride=2,pad=1"))
    check_layer(cfg, parse_layer("C=2,H=8,K=3,R=3,stride=2,pad=1"), "gradient", True)
    with pytest.raises(ValueError, match="not one of"):
        check_layer(cfg, parse_layer("C=2,H=8,K=3,R=3"), "forward")
    with pytest.raises(ValueError, match="buffer B"):
        check_layer(cfg, parse_layer("C=2,H=30,K=8,R=3,pad=1"), "loss", True)
    with pytest.raises(ValueError, match="buffer A"):
        check_layer(cfg, parse_layer("C=2,H=30,K=8,R=3,pad=1"), "gradient", True)
    with pytest.raises(ValueError, match="dim_width"):
        check_layer(CFG_TINY, parse_layer("C=2,H=70,K=1,R=1,stride=4"))


def test_constructor_checks():
    with pytest.raises(TypeError, match="Config"):
        ConvBackward("small")
    with pytest.raises(ValueError, match="'is'"):
        ConvBackward(Config(name="os_only", dataflows=["os"]))


#: FC backward (interleaved): a non-square array with both backward dataflows.
CFG_FC = Config(name="cb_fc_r2_c3", rows=2, cols=3, dim_width=6, buf_a_depth=512,
                buf_b_depth=512, dataflows=["is", "interleaved"])

#: Edge cases: batch 1, below / at / above the array's rows (pad cycles or none), single
#: inputs / outputs, shapes that are and are not multiples of the array.
FC_LAYERS = [FcLayer(1, 1, 1), FcLayer(1, 3, 2), FcLayer(2, 6, 4), FcLayer(3, 5, 7),
             FcLayer(5, 1, 9), FcLayer(4, 13, 1), FcLayer(9, 8, 5), FcLayer(2, 6, 6),
             FcLayer(2, 7, 9)]


def _fc_check(cfg, layer, tensors, sgd, result):
    outs, counters, error, code, drains = result
    assert not error, (layer, code)
    got = fc_assemble(cfg, layer, outs, drains)
    want = fc_expected(cfg, layer, tensors, sgd)
    for k in ("dx", "dw"):
        np.testing.assert_array_equal(got[k], want[k], err_msg=f"{layer} {k} sgd {sgd}")
    return counters


def test_fc_matches_golden():
    """FC backward through the interleaved array: dX = dY W and dW = dY^T X (or, with
    ``sgd_shift``, W - (dW >> shift)) equal ``bpsa.models.golden.gemm`` bit-exactly on edge-case and
    random shapes, with and without zeros, at the operand extremes; a loss layer run between
    FC layers on the same top is still right; words read, vectors and tiles equal their closed
    forms."""
    cfg, R, C = CFG_FC, CFG_FC.rows, CFG_FC.cols
    rng = np.random.default_rng(11)
    runs = []
    for k, layer in enumerate(FC_LAYERS):
        runs.append(("fc", layer, fc_random_tensors(cfg, layer, rng), None if k % 3 else 2))
    for _ in range(6):
        layer = FcLayer(*(int(v) for v in rng.integers(1, 14, 3)))
        runs.append(("fc", layer, fc_random_tensors(cfg, layer, rng, zero_prob=0.3),
                     None if rng.random() < 0.5 else int(rng.integers(0, 8))))
    lo = -(1 << (cfg.operand_width - 1))
    ext = FcLayer(4, 5, 3)
    runs.append(("fc", ext, {"x": np.full((4, 5), lo), "w": np.full((3, 5), lo),
                             "dy": np.full((4, 3), lo)}, None))
    runs.append(("fc", ext, {"x": np.full((4, 5), lo), "w": np.full((3, 5), -lo - 1),
                             "dy": np.full((4, 3), lo)}, cfg.acc_width - 1))
    conv = LAYERS[0]
    conv_t = random_tensors(cfg, conv, rng)
    runs.insert(3, (conv, "loss", False, conv_t))
    for run in runs:
        if run[0] == "fc":
            fc_check_layer(cfg, run[1], run[3])
    results = simulate(cfg, runs)
    for run, result in zip(runs, results):
        if run[0] != "fc":
            assert not result[2]
            np.testing.assert_array_equal(assemble(cfg, conv, "loss", result[0]),
                                          expected(cfg, conv, "loss", conv_t))
            continue
        _, layer, tensors, sgd = run
        counters = _fc_check(cfg, layer, tensors, sgd, result)
        g = fc_geometry(cfg, layer)
        n, i, o = layer.batch, layer.inputs, layer.outputs
        assert counters["tiles"] == g["tiles"]
        assert counters["vectors"] == g["tiles"] * n
        assert counters["a_words"] == n * o * g["tiles_i"]           # dY once per tile
        assert counters["b_words"] == n * i * g["tiles_o"] + o * i   # X per tile, W once
        # at least 2R cycles a tile, and no more than a few cycles of overhead per tile
        assert counters["cycles"] >= g["tiles"] * max(2 * n, 2 * R)
        # interleaved contexts are 2R + mac_latency apart
        lat = cfg.mac_latency
        assert counters["cycles"] <= (g["tiles"] * max(2 * n, 2 * R + lat) + 4 * R + 2 * C
                                      + 16 + lat)


def test_fc_refusals_and_recovery():
    """Illegal FC descriptors set ``error`` with the right code and produce nothing; a good FC
    layer runs afterwards; a configuration without ``interleaved`` refuses the phase."""
    from bpsa.gateware.frontends.bp_im2col.generators import BPError
    cfg = CFG_FC
    good = FcLayer(3, 4, 5)
    tensors = fc_random_tensors(cfg, good, np.random.default_rng(2))
    zero = dict(fc_descriptor(cfg, good), n=0)
    a_over = fc_descriptor(cfg, FcLayer(60, 2, 10))                 # dY 600 > 512 words
    b_over = fc_descriptor(cfg, FcLayer(1, 30, 20))                 # X + W 630 > 512
    overlap = dict(fc_descriptor(cfg, good), src_base_b=11)         # W over X (12 words)
    phase3 = dict(fc_descriptor(cfg, good), phase=3)
    results = simulate(cfg, [zero, a_over, b_over, overlap, phase3,
                             ("fc", good, tensors, None)])
    codes = [BPError.ZERO_SIZE, BPError.A_OVERFLOW, BPError.B_OVERFLOW, BPError.B_OVERFLOW,
             BPError.NOT_GENERATED]
    for (outs, _, error, code, drains), want in zip(results, codes):
        assert (error, code, outs, drains) == (1, want, [], [])
    _fc_check(cfg, good, tensors, None, results[-1])
    # The phase is not generated without the interleaved dataflow.
    res = simulate(CFG_TINY, [fc_descriptor(CFG_TINY, good)])
    assert res[0][2:4] == (1, BPError.NOT_GENERATED)


def test_fc_check_layer():
    """The host-side checks and the layer parser name what is wrong."""
    fc_check_layer(CFG_FC, FcLayer(8, 20, 10), 3)
    assert parse_fc("N=8, I=20, O=10") == FcLayer(8, 20, 10)
    assert parse_fc("I=2,O=3") == FcLayer(1, 2, 3)
    for text, msg in (("N=2,I=3", "no O="), ("N=2,I=3,O=4,K=2", "K=2"), ("I=0,O=2", "at least 1")):
        with pytest.raises(ValueError, match=msg):
            parse_fc(text)
    for cfg, layer, sgd, msg in (
            (CFG_TINY, FcLayer(1, 2, 2), None, "interleaved"),
            (CFG_FC, FcLayer(64, 2, 2), None, "outside 1..63"),
            (CFG_FC, FcLayer(60, 2, 10), None, "buffer A"),
            (CFG_FC, FcLayer(1, 30, 20), None, "buffer B"),
            (CFG_FC, FcLayer(2, 2, 2), CFG_FC.acc_width, "sgd_shift")):
        with pytest.raises(ValueError, match=msg):
            fc_check_layer(cfg, layer, sgd)


#: Verilator layers per preset: strides 1-4, padding 0..3 (also past d(R-1), cropping dY),
#: kernels 1x1..11x11 (7x7 / 3x3 / 1x1 at stride 2), dilation 1-2, batch 1-2, non-square.
#: The engine's own Verilog under Verilator (make test-long: its modules run inside the
#: accelerator's native tests in make test, the build is what costs there).
VERILATOR_LAYERS = {
    "small": [
        ConvLayer.conv(1, 2, 9, 9, 2, 7, 7, stride=2, pad=3),
        ConvLayer.conv(2, 3, 6, 7, 3, 3, 3, stride=2, pad=1),
        ConvLayer.conv(1, 3, 6, 5, 4, 1, 1, stride=2),
        ConvLayer.conv(1, 2, 10, 9, 2, 5, 3, stride=(3, 4), pad=(2, 0)),
        ConvLayer.conv(1, 2, 6, 5, 2, 3, 3, pad=3, dil=2),
        ConvLayer.conv(2, 1, 8, 8, 2, 2, 2, stride=4),
    ],
    "nonsquare": [
        ConvLayer.conv(2, 2, 7, 6, 2, 3, 3, stride=2, pad=2, dil=2),
        ConvLayer.conv(1, 2, 6, 7, 3, 4, 2, stride=(2, 1), pad=(1, 3)),
        ConvLayer.conv(1, 1, 11, 10, 2, 3, 5, stride=(4, 3), pad=(0, 1), dil=(1, 2)),
        ConvLayer.conv(1, 4, 5, 5, 3, 1, 1, stride=1, pad=2),
        ConvLayer.conv(1, 1, 11, 12, 1, 11, 11, stride=4, pad=2),
    ],
}


@pytest.mark.cocotb
@pytest.mark.long
@pytest.mark.parametrize("preset", sorted(VERILATOR_LAYERS))
def test_verilator(preset):
    # the non-square preset's build runs in ``make test-long`` (``make test`` budget)
    """The generated Verilog of ConvBackward: every layer's dX and dW equal
    ``bpsa.models.golden.conv2d_input_grad`` / ``conv2d_weight_grad`` bit-exactly in both modes (one
    build per preset, four runs); the baseline reads more words, sends the same zeros to the
    array and stores the zero-spaced copies."""
    from bpsa.sim.simcmd import run_backward_layers
    cfg = load_config(preset)
    layers = VERILATOR_LAYERS[preset]
    for phase in ("loss", "gradient"):
        bp = run_backward_layers(cfg, layers, phase=phase, seed=7)
        base = run_backward_layers(cfg, layers, phase=phase, seed=7, baseline=True)
        assert [r["match"] for r in bp + base] == [True] * (2 * len(layers)), phase
        for layer, b, z in zip(layers, bp, base):
            g = geometry(cfg, layer, phase)
            rb, rz = b["buffer_words_read"], z["buffer_words_read"]
            assert rb["a"] + rb["b"] < rz["a"] + rz["b"], layer.text()
            assert b["zeros_sent"] == z["zeros_sent"]
            assert z["cycles_reorg"] > g["za"] + g["zb"] and b["cycles_reorg"] == 0
            assert z["extra_storage_words"] == g["za"] + g["zb"]
            assert b["extra_storage_words"] == 0
            if phase == "loss":
                assert rz["b"] == g["kg"] * g["ng"] + _kept(layer)


def test_cli_refuses_bad_layers(capsys):
    """One-line errors for what cannot run (no simulation is started)."""
    from bpsa.cli import main
    cases = [
        (["--phase", "gradient", "--baseline", "--layer", "C=2,H=30,K=8,R=3,pad=1"],
         "buffer A"),
        (["--phase", "forward", "--baseline", "--layer", "C=2,H=6,K=2,R=3"],
         "--baseline applies only"),
        (["--phase", "loss"], "give a layer"),
        (["--phase", "loss", "--baseline", "--layer", "C=2,H=30,K=8,R=3,pad=1"], "buffer B"),
        (["--phase", "loss", "--layer", "C=2,H=3,K=2,R=5"], "cannot run layer"),
        (["--baseline", "--gemm", "4,4,4"], "--baseline applies only"),
        (["--phase", "step", "--engine", "--layer", "C=2,H=6,K=2,R=3"],
         "--engine applies only"),
        (["--phase", "fc", "--layer", "N=2,I=3"], "no O="),
        (["--phase", "fc", "--layer", "N=2,I=3,O=4", "--dataflow", "ws"],
         "--dataflow does not apply"),
        (["--phase", "fc", "--layer", "N=999999,I=3,O=4"], "outside 1.."),
        (["--phase", "fc"], "give a layer"),
    ]
    for argv, message in cases:
        assert main(["sim", "--engine"] + argv if "--phase" in argv else ["sim"] + argv) == 2
        err = capsys.readouterr().err.strip()
        assert message in err and len(err.splitlines()) == 1, (argv, err)
    # through the accelerator: refused before any simulation
    assert main(["sim", "--phase", "fc", "--layer", "N=2,I=3,O=5000"]) == 2
    err = capsys.readouterr().err
    assert "every dW row" in err and "--baseline runs it as two descriptors" in err
    assert main(["sim", "--engine", "--baseline", "--phase", "fc", "--layer", "N=2,I=3,O=4"]) == 2
    assert "--baseline applies only" in capsys.readouterr().err


@pytest.mark.cocotb
@pytest.mark.long
def test_cli_backward(capsys):
    """``bpsa sim --engine --phase loss|gradient --layer ... [--baseline]`` prints the
    summary."""
    from bpsa.cli import main
    for phase, extra in (("loss", []), ("gradient", ["--baseline"])):
        assert main(["sim", "--engine", "--phase", phase, "--layer",
                     "C=2,H=7,K=3,R=3,stride=2,pad=1",
                     "--seed", "4"] + extra) == 0
        out = capsys.readouterr().out
        fields = dict(line.split(None, 1) for line in out.strip().splitlines())
        assert fields["match"] == "True" and fields["phase"] == phase
        for key in ("cycles", "cycles_prologue", "cycles_compute", "cycles_reorg",
                    "buffer_words_read", "zeros_sent", "footprint_words"):
            assert key in fields


@pytest.mark.cocotb
@pytest.mark.long
def test_cli_fc(capsys):
    """``bpsa sim --engine --phase fc --layer N=..,I=..,O=.. [--sgd-shift k] --json``."""
    import json

    from bpsa.cli import main
    assert main(["sim", "--engine", "--phase", "fc", "--layer", "N=5,I=9,O=6",
                 "--sgd-shift", "2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["match"] is True and out["phase"] == "fc" and out["sgd_shift"] == 2
    assert out["useful_macs"] == 2 * 5 * 9 * 6 and out["cycles"] > 0


@pytest.mark.cocotb
@pytest.mark.long
def test_asymmetric_padding_verilator():
    """The generated Verilog with top and bottom padding different (the accelerator's row
    bands): dX and dW equal the golden model on the explicitly padded input (reuses the
    ``small`` build)."""
    from bpsa.sim.simcmd import run_backward_layers
    for phase in ("loss", "gradient"):
        res = run_backward_layers(load_config("small"), ASYMMETRIC, phase=phase, seed=5)
        assert [r["match"] for r in res] == [True] * len(ASYMMETRIC), phase


@pytest.mark.cocotb
@pytest.mark.long
@pytest.mark.parametrize("preset", ["small", "nonsquare"])
def test_fc_verilator(preset):
    """The generated Verilog of ConvBackward runs FC layers in the interleaved dataflow: dX
    and dW (and, in a second run, the SGD-updated weights) equal ``bpsa.models.golden.gemm``
    (reuses the preset's ConvBackward build)."""
    from bpsa.sim.simcmd import run_fc_layers
    cfg = load_config(preset)
    layers = [FcLayer(1, 1, 1), FcLayer(2, 9, 7), FcLayer(11, 13, 10)]
    res = run_fc_layers(cfg, layers, seed=3)
    assert [r["match"] for r in res] == [True] * len(layers)
    res = run_fc_layers(cfg, [FcLayer(6, 12, 7)], sgd_shift=3, seed=4)
    assert res[0]["match"]
    if preset == "small":
        from bpsa.sim.simcmd import main
        assert main(["--config", "small", "3,5,6"]) == 0   # the comparison table
