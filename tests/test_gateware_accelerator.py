"""The accelerator top: elaboration checks, and the generated Verilog under Verilator driven
through the host driver (bpsa.sim.testbenches.tb_accelerator) against the golden model."""

import json

import numpy as np
import pytest

from bpsa.config import Config, load_config
from bpsa.gateware.accelerator import Accelerator
from bpsa.models import golden
from bpsa.spec.layer import ConvLayer

SMALL = load_config("small")


def test_refuses_config_without_engines():
    cfg = Config(rows=2, cols=2, dataflows=("ws",), name="ws_only")
    with pytest.raises(ValueError, match="'os' dataflow .* or the 'is' dataflow"):
        Accelerator(cfg)


def test_refuses_non_config():
    with pytest.raises(TypeError, match="config must be a Config"):
        Accelerator({"rows": 4})


@pytest.mark.long
@pytest.mark.cocotb
def test_default_jobs_verilator(tmp_path):
    """The cocotb harness (``bpsa sim --harness cocotb``: cocotbext-axi's bus models) still
    runs the default jobs bit-exactly (make test-long; the native transport runs
    every whole-accelerator test of make test)."""
    from bpsa.sim.runner import run_cocotb
    out = tmp_path / "res.json"
    run_cocotb(SMALL, "bpsa.sim.testbenches.tb_accelerator", top="accelerator", testcase="layers",
               extra_env={"BPSA_RESULTS": str(out)}, tag="default")
    res = json.loads(out.read_text())
    assert [r["phase"] for r in res] == ["forward", "loss", "gradient"]
    # the zero-free walkers (the driver's default) through cocotbext-axi's bus models too
    assert [r["mode"] for r in res] == [None, "zero_free", "zero_free"]
    assert all(r["match"] for r in res)


@pytest.mark.long
@pytest.mark.verilator
def test_training_verilator():
    """Three SGD steps of a two-layer CNN, every convolution on the accelerator, the weights
    equal to a numpy-only loop after each step (checked in :func:`bpsa.host.training.train`)."""
    from bpsa.host.training import train
    from bpsa.sim.native import run_with_driver

    async def body(drv, t):
        return await train(drv, SMALL, steps=3)

    log = run_with_driver(SMALL, body)
    assert [s["step"] for s in log] == [0, 1, 2]
    assert all(s["dw1_nonzero"] and s["dw2_nonzero"] for s in log)
    assert log[0]["loss"] > log[1]["loss"] > log[2]["loss"], "training does not learn"


#: Small buffers, so that random layers need several channel / image / output-channel groups.
#: Layers planned for 128-word buffers (bands, groups, strips on small layers), run on the
#: small build: its deeper buffers run the same programs (Config.check_runs_on)
TINY = SMALL.replace(buf_a_depth=128, buf_b_depth=128, buf_p_depth=128, name="small_tinybuf")


def random_jobs(config, count, seed):
    """Random layers of every phase that the controller can tile on ``config``, half of them
    with random AXI pauses; every third one has planes too large for the buffers (cut into
    row bands). Then the fixed jobs: a banded group of several channels, channel blocks,
    layers too wide for a bank that the driver runs as column strips, and the same width sent
    as one descriptor (refused by the hardware, one per phase)."""
    import random

    from bpsa.host.driver import plan
    rng = random.Random(seed)
    jobs = []
    phases = ["forward", "loss", "gradient"]
    while len(jobs) < count:
        r, s = rng.randint(1, 3), rng.randint(1, 3)
        big = len(jobs) % 3 == 2
        size = (12, 22) if big else (3, 11)
        lay = {"batch": rng.randint(1, 2 if big else 3), "channels": rng.randint(1, 9),
               "height": rng.randint(*size), "width": rng.randint(*size),
               "out_channels": rng.randint(1, 9), "kernel_h": r, "kernel_w": s,
               "stride_h": rng.randint(1, 3), "stride_w": rng.randint(1, 3),
               "pad_h": rng.randint(0, 2), "pad_w": rng.randint(0, 2),
               "dil_h": rng.randint(1, 2), "dil_w": rng.randint(1, 2)}
        if big:
            lay["channels"], lay["out_channels"] = rng.randint(1, 3), rng.randint(1, 5)
        st, pd, dl = ((lay["stride_h"], lay["stride_w"]), (lay["pad_h"], lay["pad_w"]),
                      (lay["dil_h"], lay["dil_w"]))
        try:
            oh, ow = golden.output_hw((lay["height"], lay["width"]), (r, s), st, pd, dl)
        except ValueError:      # the dilated kernel does not fit
            continue
        phase = phases[(len(jobs) // 3 if big else len(jobs)) % 3]
        # losses and gradients alternate between the zero-free walkers and BP-im2col
        mode = (None if phase == "forward" else
                ("zero_free", "bp_im2col")[sum(j["phase"] == phase for j in jobs) % 2])
        try:
            p = plan(config, phase, ConvLayer.from_dict(lay), mode=mode)
        except ValueError:
            continue
        if p["banded"] != big or p["runs"] > 200:
            continue
        jobs.append({"phase": phase, "layer": lay, "seed": rng.randint(0, 1 << 30),
                     "pauses": len(jobs) % 2 == 1, "groups": p["groups"],
                     "bands": p["bands"], "mode": mode})
    # banded with several output channels a group (a load of one DMA run per channel)
    jobs.append({"phase": "loss", "seed": 3, "pauses": True, "mode": "bp_im2col",
                 "layer": {"batch": 1, "channels": 8, "height": 40, "width": 4,
                           "out_channels": 5, "kernel_h": 1, "kernel_w": 1, "stride_h": 2,
                           "stride_w": 2}})
    # channel blocks: dX channels of the loss (W of an output channel wider than a bank;
    # P holding only a dX row of 42 channels, banded), output channels of the gradient (dW of
    # one input channel taller than P, banded)
    k3 = {"kernel_h": 3, "kernel_w": 3, "pad_h": 1, "pad_w": 1}
    jobs.append({"phase": "loss", "seed": 4, "mode": "bp_im2col", "layer": dict(
        k3, batch=1, channels=20, height=6, width=5, out_channels=3)})
    jobs.append({"phase": "loss", "seed": 5, "pauses": True, "mode": "bp_im2col", "layer": {
        "batch": 1, "channels": 50, "height": 6, "width": 12, "out_channels": 3,
        "kernel_h": 1, "kernel_w": 1}})
    jobs.append({"phase": "gradient", "seed": 6, "pauses": True, "mode": "bp_im2col",
                 "layer": dict(k3, batch=2, channels=2, height=12, width=12, out_channels=45,
                               stride_h=2, stride_w=2)})
    # rows wider than a bank: the driver runs them as column strips (bpsa.plan.tiling.column_strips)
    s2 = {"batch": 1, "kernel_h": 3, "kernel_w": 3, "stride_h": 2, "stride_w": 2, "pad_h": 1,
          "pad_w": 1}
    jobs.append({"phase": "loss", "seed": 7, "pauses": True, "layer": dict(
        s2, channels=2, height=3, width=70, out_channels=2)})
    jobs.append({"phase": "gradient", "seed": 8, "layer": dict(
        s2, channels=1, height=6, width=40, out_channels=2, stride_h=1)})
    jobs.append({"phase": "forward", "seed": 9, "layer": dict(
        s2, channels=1, height=3, width=300, out_channels=2)})
    # the same width sent as one descriptor: the hardware refuses it
    wide = {"batch": 1, "channels": 1, "height": 4, "width": 300, "out_channels": 1,
            "kernel_h": 3, "kernel_w": 3}
    jobs += [{"phase": p, "layer": wide, "expect": "TOO_LARGE"} for p in phases]
    # zero-free gradient: two input-channel blocks, three output-channel blocks (two a step:
    # half of P holds two blocks' B R S words), two images, row bands
    jobs.append({"phase": "gradient", "seed": 10, "pauses": True, "mode": "zero_free",
                 "layer": dict(batch=2, channels=10, height=20, width=12, out_channels=9,
                               kernel_h=2, kernel_w=2, pad_h=1, pad_w=1, stride_h=2,
                               stride_w=2)})
    return jobs


def test_random_jobs_need_tiling():
    """The random layers of the Verilator test do exercise multi-group tiling and row bands
    in every phase, bands of several channels a group, channel blocks in the loss and the
    gradient, and column strips in every phase."""
    from bpsa.host.driver import plan
    from bpsa.plan.tiling import column_strips, default_mode
    jobs = random_jobs(TINY, 18, seed=5)
    multi = []
    for j in jobs[18:19]:
        lay = j["layer"]
        p = plan(TINY, j["phase"], ConvLayer.conv(1, lay["channels"], lay["height"],
                                                  lay["width"], lay["out_channels"], 1, 1, 2),
                 mode=j.get("mode"))
        multi.append(p["banded"] and p["group"] > 1)
    assert multi == [True]
    blocks = []
    for j in jobs[19:22]:
        lay = j["layer"]
        p = plan(TINY, j["phase"], ConvLayer.from_dict(lay), mode=j.get("mode"))
        blocks.append((p.get("cblocks", 1), p.get("kblocks", 1), p["banded"]))
    assert blocks == [(3, 1, False), (2, 1, True), (1, 2, True)]
    zf = jobs[-1]
    lay = zf["layer"]
    p = plan(TINY, "gradient", ConvLayer.conv(lay["batch"], lay["channels"], lay["height"],
                                              lay["width"], lay["out_channels"], 2, 2, 2, 1),
             mode="zero_free")
    assert (p["kblock"], p["kblocks"], p["banded"], p["bands"] > 1) == (2, 2, True, True)
    for phase in ("loss", "gradient"):
        assert {j["mode"] for j in jobs if j["phase"] == phase and "groups" in j} == {
            "zero_free", "bp_im2col"}
    cuts = []
    for j in jobs[22:25]:
        lay = j["layer"]
        layer = ConvLayer.conv(lay["batch"], lay["channels"], lay["height"], lay["width"],
                               lay["out_channels"], 3, 3, (lay["stride_h"], 2), 1)
        with pytest.raises(ValueError, match="not even one row band"):
            plan(TINY, j["phase"], layer)
        cuts.append(len(column_strips(TINY, j["phase"], layer,
                                      mode=default_mode(TINY, j["phase"]))[0]))
    assert cuts == [2, 2, 3]            # the forward's P is double-buffered when banded
    for phase in ("forward", "loss", "gradient"):
        assert any(j["phase"] == phase and j.get("groups", 1) > 1 for j in jobs), phase
        assert any(j["phase"] == phase and j.get("bands", 1) > 1 for j in jobs), phase


@pytest.mark.verilator
@pytest.mark.long
def test_random_layers_tiled_verilator():
    """Random shapes of every phase, bigger than the buffers (several groups a layer), half
    of them with random ready/valid pauses on every AXI channel, bit-exact against the golden
    model; layers whose rows are too wide run as column strips through the driver, and are
    refused with TOO_LARGE when sent as one descriptor."""
    from bpsa.sim.native import run_jobs
    res = run_jobs(TINY, random_jobs(TINY, 18, seed=5), hardware=SMALL)
    assert sum(1 for r in res if r.get("match")) == 26
    assert [r["refused"] for r in res if "refused" in r] == ["TOO_LARGE"] * 3


@pytest.mark.long
@pytest.mark.verilator
def test_forward_output_blocks_share_x():
    """The forward loads X of a group once for a step's ``kb`` output-channel blocks: three
    layers (several steps of blocks with P single-buffered; one step with P double-buffered;
    row bands with two blocks a step, under memory stalls), bit-exact, and the bytes read are
    X once per step of blocks plus W once per run."""
    from bpsa.host.driver import plan
    from bpsa.sim.native import run_jobs
    shapes = [(2, 20, 6, 6, 14, 3, 3, (1, 1), (1, 1)), (2, 20, 6, 6, 11, 3, 3, (1, 1), (0, 0)),
              (1, 3, 20, 100, 9, 3, 3, (2, 8), (1, 0))]
    want = [(3, 2, False, False), (3, 1, True, False), (2, 2, True, True)]
    jobs = []
    for i, ((n, c, h, w, k, r, s, st, pad), shape) in enumerate(zip(shapes, want)):
        p = plan(TINY, "forward", ConvLayer.conv(n, c, h, w, k, r, s, st, pad))
        assert (p["kblock"], p["kblocks"], p["double"], p["banded"]) == shape
        jobs.append({"phase": "forward", "seed": 30 + i, "pauses": i == 2,
                     "layer": dict(batch=n, channels=c, height=h, width=w, out_channels=k,
                                   kernel_h=r, kernel_w=s, stride_h=st[0], stride_w=st[1],
                                   pad_h=pad[0], pad_w=pad[1])})
    res = run_jobs(TINY, jobs, hardware=SMALL)
    assert all(x["match"] for x in res)
    for (n, c, h, w, k, r, s, st, pad), x in zip(shapes[:2], res):
        p = plan(TINY, "forward", ConvLayer.conv(n, c, h, w, k, r, s, st, pad))
        kt = -(-k // TINY.cols)
        x_bytes = n * p["kblocks"] * c * h * w          # 8-bit operands
        w_bytes = n * kt * c * r * s * TINY.cols
        assert x["counters"]["dma_read_bytes"] == x_bytes + w_bytes


def _layer_dict(n, c, h, w, k, r, s, st, pad):
    """A job's layer fields from a ``(N, C, H, W, K, R, S, stride, pad)`` shape."""
    return dict(batch=n, channels=c, height=h, width=w, out_channels=k, kernel_h=r,
                kernel_w=s, stride_h=st[0], stride_w=st[1], pad_h=pad[0], pad_w=pad[1])


@pytest.mark.verilator
def test_zero_free_gradient_input_blocks_share_dy():
    """The zero-free gradient's steps of several input-channel blocks (X of the step's blocks
    in one bank of A, every dY block loaded once for them, the runs after the first HOLD) and
    its runs of several images (stacked OH s rows apart): a 1 x 1 stride-2 layer (two blocks a
    step, two images a run), the same cut into row bands (a shorter last step of one block,
    under memory stalls), a 1 x 1 layer of five images in runs of four and one, a 2 x 2
    stride-2 kernel on three images a run; bit-exact, and the first reads X once and dY once
    per step of blocks. (The walker's own stride-2 runs: the driver's space-to-depth rewrite,
    which would run the 1 x 1 stride-2 layers at stride 1, is off.)"""
    from bpsa.host.driver import plan
    from bpsa.sim.native import run_jobs
    shapes = [(2, 12, 4, 4, 9, 1, 1, (2, 2), (0, 0)), (2, 26, 6, 6, 10, 1, 1, (2, 2), (0, 0)),
              (5, 12, 4, 4, 5, 1, 1, (1, 1), (0, 0)), (3, 13, 4, 4, 9, 2, 2, (2, 2), (0, 0))]
    want = [(2, 2, False), (2, 1, True), (1, 4, False), (1, 3, False)]
    jobs = []
    for i, (shape, planned) in enumerate(zip(shapes, want)):
        p = plan(TINY, "gradient", ConvLayer.conv(*shape), mode="zero_free")
        assert (p["cstep"], p["images"], p["banded"]) == planned
        jobs.append({"phase": "gradient", "mode": "zero_free", "seed": 60 + i,
                     "pauses": i == 1, "layer": _layer_dict(*shape), "space_to_depth": False})
    res = run_jobs(TINY, jobs, hardware=SMALL)
    assert all(x["match"] for x in res)
    n, c, h, w, k = shapes[0][:5]
    B = TINY.feeder_bus_width
    kt, ct = -(-k // TINY.cols), -(-c // B)
    x_bytes = n * ct * h * w * B                        # 8-bit operands, X blocked by B
    dy_bytes = n * kt * 2 * 2 * TINY.cols               # one step of blocks: dY once
    assert res[0]["counters"]["dma_read_bytes"] == x_bytes + dy_bytes


@pytest.mark.verilator
def test_zero_free_loss_input_blocks_share_dy():
    """The zero-free loss loads dY of a group once for a step's input-channel blocks (their
    dX bands in P): a 3 x 3 layer with two blocks a step and two groups, a 1 x 1 stride-2
    layer with every block in one step (under memory stalls, requantized), a layer with one
    block a step; bit-exact, and the 1 x 1 layer reads dY once per image and W once per
    block and image; a 1 x 1 layer whose dX plane fits P is cut into bands of a third of P by
    the planner's search, so that its three blocks share each dY band. W of a step's blocks
    stays in a half of buffer B (the runs HOLD it): the 1 x 1 layers read it once."""
    from bpsa.host.driver import plan
    from bpsa.sim.native import run_jobs
    shapes = [(2, 10, 5, 5, 7, 3, 3, (1, 1), (1, 1)), (2, 12, 4, 4, 9, 1, 1, (2, 2), (0, 0)),
              (3, 12, 8, 8, 9, 3, 3, (2, 2), (1, 1)), (2, 12, 6, 6, 5, 1, 1, (1, 1), (0, 0))]
    want = [(2, 1, 2), (3, 1, 1), (1, 1, 3), (3, 1, 1)]
    jobs = []
    for i, (shape, planned) in enumerate(zip(shapes, want)):
        p = plan(TINY, "loss", ConvLayer.conv(*shape), mode="zero_free")
        assert (p["cstep"], p["images"], p["groups"]) == planned
        assert p["banded"] == (i == 3)
        jobs.append({"phase": "loss", "mode": "zero_free", "seed": 50 + i, "pauses": i == 1,
                     "requant": 6 if i == 1 else None, "layer": _layer_dict(*shape)})
    res = run_jobs(TINY, jobs, hardware=SMALL)
    assert all(x["match"] for x in res)
    n, c, h, w, k = shapes[1][:5]
    kt, ct = -(-k // TINY.cols), -(-c // TINY.cols)
    dy_bytes = n * kt * 2 * 2 * TINY.cols                # 8-bit operands, 2 x 2 dY
    w_bytes = ct * k * TINY.cols                         # W once
    assert res[1]["counters"]["dma_read_bytes"] == dy_bytes + w_bytes
    n, c, h, w, k = shapes[3][:5]
    dy_bytes = n * 2 * h * w * TINY.cols                 # dY's two blocks once
    assert res[3]["counters"]["dma_read_bytes"] == dy_bytes + ct * k * TINY.cols

@pytest.mark.verilator
def test_requantized_outputs():
    """REQUANT: the forward's Y and the zero-free loss's dX leave as operands (shift, round
    half up, saturate: ``bpsa.models.golden.requantize`` of the golden result), bit-exact for
    shifts from 0 (mostly saturated) to ``acc_width - 1`` (mostly 0 and -1), through steps of
    output-channel blocks, row bands, column strips and memory stalls; the DMA writes one
    operand a result instead of an accumulator."""
    from bpsa.sim.native import run_jobs
    from bpsa.spec.numeric import element_bytes
    base = dict(batch=2, channels=20, height=6, width=6, out_channels=14, kernel_h=3,
                kernel_w=3, stride_h=1, stride_w=1, pad_h=1, pad_w=1)
    banded = dict(batch=1, channels=3, height=20, width=100, out_channels=9, kernel_h=3,
                  kernel_w=3, stride_h=2, stride_w=8, pad_h=1, pad_w=0)
    strips = dict(batch=1, channels=2, height=6, width=160, out_channels=3, kernel_h=3,
                  kernel_w=3, stride_h=1, stride_w=2, pad_h=1, pad_w=1)
    lstrips = dict(strips, height=20, width=60, stride_h=2)
    loss = dict(batch=2, channels=6, height=9, width=7, out_channels=5, kernel_h=3,
                kernel_w=3, stride_h=2, stride_w=2, pad_h=1, pad_w=1)
    jobs = [{"phase": "forward", "layer": base, "seed": 40, "requant": 0},
            {"phase": "forward", "layer": base, "seed": 41, "requant": 9, "pauses": True},
            {"phase": "forward", "layer": banded, "seed": 42, "requant": 5},
            {"phase": "forward", "layer": strips, "seed": 43, "requant": 6},
            {"phase": "forward", "layer": base, "seed": 44, "requant": 31},
            {"phase": "loss", "layer": loss, "seed": 45, "requant": 3, "mode": "zero_free"},
            {"phase": "loss", "layer": loss, "seed": 46, "requant": 8, "mode": "zero_free",
             "pauses": True},
            {"phase": "loss", "layer": lstrips, "seed": 47, "requant": 7,
             "mode": "zero_free"}]
    res = run_jobs(TINY, jobs, hardware=SMALL)
    assert all(r["match"] and r["requant"] == j["requant"] for r, j in zip(res, jobs))
    assert res[3]["strips"] > 1 and res[7]["strips"] > 1
    ob = element_bytes(TINY.operand_width)
    for r in res[:2]:                   # Y blocked by cols channels: N KT OH OW cols operands
        assert r["counters"]["dma_write_bytes"] == 2 * 4 * 36 * TINY.cols * ob
    assert res[5]["counters"]["dma_write_bytes"] == 2 * 2 * 63 * TINY.cols * ob


@pytest.mark.verilator
@pytest.mark.long               # the floating-point accelerators' builds: make test-long
@pytest.mark.parametrize("preset", ["small_bf16", "small_fp16"])
def test_float_training_phases_verilator(preset):
    """Floating point through the whole accelerator (driver, program, DMA, forward engine
    and zero-free walkers, fp32 P buffer, store): every phase equals the accelerator's golden
    model (``bpsa.models.float_layers.accelerator_*``, ``run_jobs`` asserts it), whose runs
    add into P in the program's order: the forward's input-channel groups (three: the order
    shows), the loss's output-channel groups (three), the gradient's images and dY row bands
    (2 x 4), its runs of several images (three and two); the driver's space-to-depth
    rewrite (a first layer's gradient, a 1 x 1 stride-2 forward and gradient); batches,
    rectangular strides,
    stores as fp32 and rounded to the operand format
    (REQUANT), under memory back-pressure; the traditional flow's loss and gradient (the
    forward of the zero-spaced operands); layers too wide for a bank in column strips
    (``float_layers.accelerator_strips``); the pooling unit's phases
    (``float_pool``), the cycle model within 3 % of them; a requantization shift is refused
    by name."""
    from bpsa.models.perf import pool_cycles
    from bpsa.plan import capability
    from bpsa.plan.space_to_depth import rewrite
    from bpsa.plan.tiling import plan
    from bpsa.sim.native import run_jobs
    cfg = load_config(preset)
    one = dict(batch=2, channels=3, height=7, width=9, out_channels=6, kernel_h=2, kernel_w=3,
               stride_h=1, stride_w=2, pad_h=1, pad_w=1)
    fwd3 = dict(batch=1, channels=24, height=20, width=20, out_channels=4, kernel_h=3,
                kernel_w=3, stride_h=1, stride_w=1, pad_h=1, pad_w=1)
    loss3 = dict(batch=1, channels=4, height=8, width=8, out_channels=120, kernel_h=3,
                 kernel_w=3, stride_h=2, stride_w=2, pad_h=1, pad_w=1)
    grad8 = dict(batch=2, channels=3, height=40, width=40, out_channels=4, kernel_h=3,
                 kernel_w=3, stride_h=1, stride_w=1, pad_h=1, pad_w=1)
    assert plan(cfg, "forward", ConvLayer.from_dict(fwd3), mode="feeder")["groups"] == 3
    assert plan(cfg, "loss", ConvLayer.from_dict(loss3), mode="zero_free")["groups"] == 3
    assert plan(cfg, "gradient", ConvLayer.from_dict(grad8), mode="zero_free")["bands"] == 4
    first = _layer_dict(2, 1, 13, 14, 5, 7, 7, (2, 2), (3, 3))
    down = _layer_dict(2, 6, 9, 9, 5, 1, 1, (2, 2), (0, 0))
    assert rewrite(ConvLayer.from_dict(first), cfg.rows) is not None
    assert rewrite(ConvLayer.from_dict(down), cfg.rows, "forward", "feeder") is not None
    # five images in runs of three and two: a run's images one fp32 chain, runs added in P
    runs3 = dict(batch=5, channels=12, height=12, width=12, out_channels=5, kernel_h=1,
                 kernel_w=1)
    assert plan(cfg, "gradient", ConvLayer.from_dict(runs3), mode="zero_free")["images"] == 3
    # rows too wide for a bank: the driver's column strips (gradient: partial dW added on
    # the host in fp32)
    wide = {"forward": dict(batch=1, channels=2, height=3, width=550, out_channels=3,
                            kernel_h=2, kernel_w=3, stride_h=1, stride_w=1, pad_h=1, pad_w=1),
            "loss": dict(batch=1, channels=2, height=6, width=500, out_channels=3, kernel_h=3,
                         kernel_w=3, stride_h=2, stride_w=2, pad_h=1, pad_w=1),
            "gradient": dict(batch=2, channels=4, height=4, width=200, out_channels=3,
                             kernel_h=3, kernel_w=3, stride_h=1, stride_w=2, pad_h=1, pad_w=1)}
    jobs = [{"phase": "forward", "layer": one, "seed": 50},
            {"phase": "forward", "layer": one, "seed": 51, "requant": 0, "pauses": True},
            {"phase": "loss", "layer": one, "seed": 52, "pauses": True},
            {"phase": "gradient", "layer": one, "seed": 53},
            {"phase": "forward", "layer": fwd3, "seed": 54, "requant": 0},
            {"phase": "loss", "layer": loss3, "seed": 55, "requant": 0},
            {"phase": "gradient", "layer": grad8, "seed": 56, "pauses": True},
            # the traditional flow: the forward of the zero-spaced operands
            {"phase": "loss", "layer": one, "seed": 57, "baseline": True},
            {"phase": "gradient", "layer": one, "seed": 58, "baseline": True},
            {"phase": "gradient", "layer": runs3, "seed": 59},
            # the driver's space-to-depth (bpsa.plan.space_to_depth): a first layer's
            # gradient, a 1 x 1 stride-2 forward and gradient; the golden model runs the inner
            # layer, whose tiling orders the fp32 additions
            {"phase": "gradient", "layer": first, "seed": 63, "pauses": True},
            {"phase": "forward", "layer": down, "seed": 64},
            {"phase": "gradient", "layer": down, "seed": 65},
            {"phase": "forward", "layer": wide["forward"], "seed": 60, "requant": 0},
            {"phase": "loss", "layer": wide["loss"], "seed": 61, "pauses": True},
            {"phase": "gradient", "layer": wide["gradient"], "seed": 62, "pauses": True}]
    # the pooling unit: max by the FP order, averages' fp32 sums scaled by fp32(1 / (R S))
    # (bpsa.models.float_pool), overlapping windows, padding, the ReLU's backward, 1 x 1
    pool = dict(batch=2, channels=3, height=8, width=9, kernel_h=2, kernel_w=2, stride_h=2,
                stride_w=2, pad_h=0, pad_w=0, out_channels=3)
    pools = [("pool_forward", dict(kind="max")), ("pool_backward", dict(kind="max", relu=True)),
             ("pool_forward", dict(kind="avg", kernel_h=3, kernel_w=3, stride_w=1, pad_h=1,
                                   pad_w=1, relu=True)),
             ("pool_backward", dict(kind="avg", kernel_h=3, kernel_w=2, stride_h=1, pad_h=1)),
             ("pool_backward", dict(kind="max", kernel_h=3, kernel_w=3, stride_h=1,
                                    stride_w=1, pad_h=1, pad_w=1)),
             ("pool_backward", dict(kind="max", kernel_h=1, kernel_w=1, stride_h=1,
                                    stride_w=1, relu=True))]
    jobs += [{"phase": phase, "layer": {**pool, **lay}, "seed": 70 + i, "pauses": i % 2 == 1}
             for i, (phase, lay) in enumerate(pools)]
    res = run_jobs(cfg, jobs)
    assert [r["match"] for r in res] == [True] * len(jobs)
    assert [r["strips"] for r in res[-9:-6]] == [2, 2, 2]
    for r, (phase, lay), job in zip(res[-6:], pools, jobs[-6:]):
        if job["pauses"]:               # the cycle model follows the unit (without stalls)
            continue
        lay = {**pool, **lay}
        model = pool_cycles(cfg, phase, n=2, c=3, h=lay["height"], w=lay["width"],
                            r=lay["kernel_h"], s=lay["kernel_w"],
                            stride=(lay["stride_h"], lay["stride_w"]),
                            pad=(lay["pad_h"], lay["pad_w"]), kind=lay["kind"],
                            relu=lay.get("relu", False), requant=phase == "pool_forward")
        assert abs(model.cycles / r["cycles"] - 1) < 0.03, (phase, lay)
    # Y blocked by cols channels (N KT OH OW cols): fp32, then the operand format
    assert res[0]["counters"]["dma_write_bytes"] == 2 * 2 * 8 * 5 * cfg.cols * 4
    assert res[1]["counters"]["dma_write_bytes"] == 2 * 2 * 8 * 5 * cfg.cols * 2
    with pytest.raises(ValueError, match=r"requant rounds the fp32 sums to the operand format "
                                         r"and takes no shift \(give 0\), not 3"):
        capability.check(cfg, "forward", requant=3)


@pytest.mark.verilator
def test_pauses_change_cycles_not_results():
    """The same layer with and without memory-bus back-pressure (the native transport's
    random stalls): same result (checked by ``run_jobs``), more cycles."""
    from bpsa.sim.native import run_jobs
    lay = {"batch": 2, "channels": 3, "height": 7, "width": 7, "out_channels": 5,
           "kernel_h": 3, "kernel_w": 3, "stride_h": 2, "stride_w": 2, "pad_h": 1, "pad_w": 1}
    jobs = [{"phase": p, "layer": lay, "seed": 11, "pauses": pz}
            for p in ("forward", "loss", "gradient") for pz in (False, True)]
    # the traditional flow of the same loss and gradient, for comparison (bit-exact too)
    jobs += [{"phase": p, "layer": lay, "seed": 11, "baseline": True}
             for p in ("loss", "gradient")]
    # a fully connected layer's backward pass (dX and dW), under back-pressure
    jobs.append({"phase": "fc_backward", "seed": 12, "pauses": True,
                 "layer": {"batch": 6, "channels": 21, "height": 1, "width": 1,
                           "out_channels": 9, "kernel_h": 1, "kernel_w": 1}})
    res = run_jobs(TINY, jobs, hardware=SMALL)
    assert res[8]["match"] and res[8]["phase"] == "fc_backward"
    for bp, base in zip(res[2:6:2], res[6:8]):
        assert base["match"] and base["baseline"] and not bp["baseline"]
        # the zero-spaces travel over the bus and through the buffers
        assert base["counters"]["dma_read_bytes"] > bp["counters"]["dma_read_bytes"]
    res = res[:6]
    for plain, paused in zip(res[::2], res[1::2]):
        assert plain["match"] and paused["match"]
        assert paused["cycles"] > plain["cycles"], (plain["phase"], plain["cycles"],
                                                    paused["cycles"])
        assert paused["counters"]["dma_read_bytes"] == plain["counters"]["dma_read_bytes"]


def _fc_job(n, i, o, **kw):
    return dict({"phase": "fc_backward", "seed": n + i + o,
                 "layer": {"batch": n, "channels": i, "height": 1, "width": 1,
                           "out_channels": o, "kernel_h": 1, "kernel_w": 1}}, **kw)


@pytest.mark.verilator
def test_fc_backward_interleaved_verilator():
    """PHASE 3 through the controller: FC layers larger than the buffers (several input
    blocks, batch chunks and output blocks; ``bpsa.plan.tiling.fc_plan``) give dX and dW equal to
    numpy in one interleaved pass each, under back-pressure too; the same layer as two
    descriptors (loss and gradient of a 1x1 convolution) gives the same result; an FC layer
    with more outputs than P has words is refused with TOO_LARGE as PHASE 3, and the driver
    runs it as two descriptors by default (the gradient in output-channel blocks)."""
    from bpsa.plan.tiling import fc_plan
    from bpsa.sim.native import run_jobs
    shapes = [(40, 10, 20), (6, 21, 9), (1, 1, 1), (13, 5, 70)]
    assert all(fc_plan(TINY, *s)["runs"] > 1 for s in (shapes[0], shapes[1], shapes[3]))
    assert fc_plan(TINY, 40, 10, 20)["fnb"] < 40          # batch chunks
    jobs = [_fc_job(*s, pauses=k % 2 == 1) for k, s in enumerate(shapes)]
    jobs.append(_fc_job(40, 10, 20, interleaved=False))
    jobs.append(_fc_job(2, 3, 130, interleaved=True, expect="TOO_LARGE"))
    jobs.append(_fc_job(2, 3, 130, pauses=True))
    res = run_jobs(TINY, jobs, hardware=SMALL)
    assert [r.get("match") for r in res[:5]] == [True] * 5
    assert res[5]["refused"] == "TOO_LARGE"
    assert res[6]["match"]
    with pytest.raises(ValueError, match="P"):
        fc_plan(TINY, 2, 3, 130)
    # 1024-word buffers: input blocks of 16 (P rows of 4 words), rows loaded as one DMA run
    shapes = [(64, 32, 48), (16, 24, 16), (5, 37, 11)]
    assert [fc_plan(SMALL, *s)["fq"] for s in shapes] == [4, 4, 4]
    res = run_jobs(SMALL, [_fc_job(*s, pauses=k == 1) for k, s in enumerate(shapes)])
    assert [r["match"] for r in res] == [True] * 3


def test_baseline_operands_equal_golden():
    """The traditional flow's zero-spaced operands, convolved forward by ``bpsa.models.golden``,
    give the golden dX and dW (random shapes, strides, paddings, dilations)."""
    from bpsa.host.driver import baseline_gradient_operands, baseline_loss_operands
    rng = np.random.default_rng(4)
    done = 0
    while done < 60:
        n, c, k = (int(v) for v in rng.integers(1, 3, 3))
        h, w = (int(v) for v in rng.integers(1, 12, 2))
        r, s = (int(v) for v in rng.integers(1, 4, 2))
        st, pd, dl = (tuple(int(v) for v in rng.integers(lo, hi, 2))
                      for lo, hi in ((1, 4), (0, 3), (1, 3)))
        try:
            oh, ow = golden.output_hw((h, w), (r, s), st, pd, dl)
        except ValueError:
            continue
        x = rng.integers(-5, 5, (n, c, h, w))
        wt = rng.integers(-5, 5, (k, c, r, s))
        dy = rng.integers(-5, 5, (n, k, oh, ow))
        z, wr, d = baseline_loss_operands(dy, wt, (h, w), st, pd, dl)
        assert np.array_equal(golden.conv2d(z, wr, 1, 0, d),
                              golden.conv2d_input_grad(dy, wt, (h, w), st, pd, dl))
        xt, dd, d = baseline_gradient_operands(x, dy, (r, s), st, pd, dl)
        assert np.array_equal(golden.conv2d(xt, dd, d, 0, 1).transpose(1, 0, 2, 3),
                              golden.conv2d_weight_grad(x, dy, (r, s), st, pd, dl))
        done += 1


def test_cli_refuses_layers_it_cannot_tile(capsys):
    """``bpsa sim --phase ...`` through the accelerator: one-line errors, nothing built."""
    from bpsa.cli import main
    for argv, message in [
        (["--phase", "step"], "give a layer"),
        (["--phase", "loss", "--layer", "C=2,H=3,K=2,R=5"], "more than the padded input"),
        (["--phase", "loss", "--layer", "C=1,H=30,K=1,R=23"], "does not fit a bank"),
        (["--phase", "forward", "--baseline", "--layer", "C=1,H=8,K=1,R=3"],
         "--baseline applies only"),
        (["--phase", "gradient", "--baseline", "--layer", "C=1,H=40,K=1,R=3,stride=2"],
         "feeder_pattern_width"),
    ]:
        assert main(["sim"] + argv) == 2
        err = capsys.readouterr().err.strip()
        assert message in err and len(err.splitlines()) == 1, (argv, err)


@pytest.mark.cocotb
# small_bf16 in make test-long (bf16's three phases through the accelerator run in make test in
# test_float_training_phases_verilator)
@pytest.mark.parametrize("preset", ["small", pytest.param("small_bf16", marks=pytest.mark.long)])
def test_cli_step(capsys, preset):
    """``bpsa sim --phase step`` runs forward, loss and gradient through the top and prints
    cycles and DMA bytes per phase, in integers and in floating point."""
    from bpsa.cli import main
    assert main(["sim", "--config", preset, "--phase", "step", "--layer",
                 "C=3,H=9,K=5,R=3,stride=2,pad=1,N=2", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["match"] is True
    for p in ("forward", "loss", "gradient"):
        assert res[f"{p}_match"] is True
        assert res[f"{p}_dma_read_bytes"] > 0 and res[f"{p}_dma_write_bytes"] > 0
        assert 0 < res[f"{p}_utilization"] <= 1


def _pool_cases(rng, count):
    """Random pooling layers: kernels 1-3 per axis, strides 1-3 (overlapping, tiling and
    gapped windows), padding up to kernel // 2, narrow values (ties), ReLU on or off."""
    out = []
    for _ in range(count):
        r, s = int(rng.integers(1, 4)), int(rng.integers(1, 4))
        st = (int(rng.integers(1, 4)), int(rng.integers(1, 4)))
        pad = (int(rng.integers(0, r // 2 + 1)), int(rng.integers(0, s // 2 + 1)))
        shape = (int(rng.integers(1, 3)), int(rng.integers(1, 4)), int(rng.integers(r, 12)),
                 int(rng.integers(s, 12)))
        out.append((str(rng.choice(["max", "avg"])), (r, s), st, pad, shape,
                    bool(rng.integers(0, 2))))
    return out


@pytest.mark.verilator
def test_pooling_verilator():
    """Pooling forward and backward through the whole accelerator (the pooling unit, its
    descriptor phases, the walker's bands, the store path's ReLU) against the golden model:
    random layers, global average pooling, a plane cut into bands, requantized gradients, and
    the hardware's refusal (POOL) of a kind it does not generate."""
    from bpsa.models.perf import pool_cycles
    from bpsa.spec.errors import AccelError
    from bpsa.spec.regmap import Phase
    from bpsa.sim.native import run_with_driver

    rng = np.random.default_rng(21)
    errors = []

    def model_agrees(drv, phase, x, kind, k, st, pad, relu):
        """The cycle model's DMA bytes and buffer words are the RTL's; its cycles within
        12 %."""
        n, c, h, w = x.shape
        got = drv.counters
        m = pool_cycles(SMALL, phase, n=n, c=c, h=h, w=w, r=k[0], s=k[1], stride=st,
                        pad=pad, kind=kind, relu=relu, requant=phase == "pool_forward")
        assert (m.dma_read_bytes, m.dma_write_bytes) == (got["dma_read_bytes"],
                                                         got["dma_write_bytes"])
        # the buffer words: written by the loads, read by the forward's windows
        assert m.a_writes == got["buf_a_writes"], (phase, kind, k, st, pad, x.shape)
        if phase == "pool_forward":
            assert m.a_reads == got["buf_a_reads"], (kind, k, st, pad, x.shape)
        errors.append(m.cycles / got["busy_cycles"] - 1)
        assert abs(errors[-1]) < 0.12, (phase, kind, k, st, pad, x.shape, m.cycles,
                                        got["busy_cycles"])
    cases = _pool_cases(rng, 10)
    # a plane whose X and dY do not fit a bank of the 1,024-word buffer: row bands
    cases.append(("max", (3, 3), (2, 2), (1, 1), (1, 1, 40, 30), True))
    cases.append(("avg", (2, 2), (1, 1), (0, 0), (1, 2, 36, 20), False))

    async def body(drv, t):
        for kind, k, st, pad, shape, relu in cases:
            x = rng.integers(-3, 4, shape)
            y = await drv.pool(x, kind, k, st, pad, relu=relu)
            want = golden.pool2d(x, kind, k, st, pad)
            np.testing.assert_array_equal(y, np.maximum(want, 0) if relu else want,
                                          err_msg=f"forward {kind} {k} {st} {pad} {shape}")
            if not drv.plan["banded"]:                   # X read once (its blocks' planes)
                lanes = SMALL.pool_lanes
                assert drv.counters["dma_read_bytes"] == x.size // x.shape[1] * (
                    -(-x.shape[1] // lanes) * lanes)
            model_agrees(drv, "pool_forward", x, kind, k, st, pad, relu)
            dy = rng.integers(-100, 101, want.shape)
            dx = await drv.pool_backward(dy, x, kind, k, st, pad, relu=relu)
            gold = golden.pool2d_backward(dy, x, kind, k, st, pad)
            np.testing.assert_array_equal(dx, gold * (x > 0) if relu else gold,
                                          err_msg=f"backward {kind} {k} {st} {pad} {shape}")
            model_agrees(drv, "pool_backward", x, kind, k, st, pad, relu)
        x = rng.integers(-128, 128, (2, 3, 5, 7))
        np.testing.assert_array_equal(await drv.pool(x, "global_avg"),
                                      golden.pool2d(x, "global_avg"))
        dy = rng.integers(-128, 128, (2, 3, 1, 1))
        np.testing.assert_array_equal(await drv.pool_backward(dy, x, "global_avg"),
                                      golden.pool2d_backward(dy, x, "global_avg"))
        # a requantized gradient: operands, rounded and saturated
        x, dy = rng.integers(-3, 4, (1, 2, 6, 6)), rng.integers(-128, 128, (1, 2, 5, 5))
        got = await drv.pool_backward(dy, x, "max", 2, 1, 0, requant=1)
        np.testing.assert_array_equal(
            got, golden.requantize(golden.pool2d_backward(dy, x, "max", 2, 1, 0), 1, 8))
        # the hardware refuses a kind it does not generate (POOL_KIND 2) with POOL
        base = {"PHASE": Phase.POOL_FORWARD, "N": 1, "C": 1, "H": 4, "W": 4, "K": 1, "R": 2,
                "S": 2, "STRIDE_H": 2, "STRIDE_W": 2, "PAD_H": 0, "PAD_W": 0, "DIL_H": 1,
                "DIL_W": 1, "ADDR_X": 0, "ADDR_OUT": 4096, "POOL_KIND": 2}
        assert await drv.start(base, budget=10_000) == AccelError.POOL
        # padding above kernel // 2, and a dilation: POOL too
        assert await drv.start({**base, "POOL_KIND": 0, "PAD_H": 2}) == AccelError.POOL
        assert await drv.start({**base, "POOL_KIND": 0, "DIL_W": 2}) == AccelError.POOL
        # RELU on the loss: RELU
        assert await drv.start({**base, "PHASE": Phase.LOSS, "POOL_KIND": 0, "RELU": 1,
                                "ADDR_W": 0, "ADDR_DY": 0}) == AccelError.RELU
        # the driver refuses a layer the configuration cannot run before the hardware sees it
        with pytest.raises(ValueError, match="does not fit configuration"):
            await drv.pool(rng.integers(-3, 4, (1, 1, 4, 4)), "max", 5, 1, 0)
        return True

    assert run_with_driver(SMALL, body)


@pytest.mark.verilator
def test_pooling_under_memory_stalls_verilator():
    """``bpsa sim --phase pool``'s run (bpsa.sim.pool_run) with the memory stalling 30 % of
    its beats: no result is dropped (both phases equal the golden model), banded or not."""
    from bpsa.spec.layer import parse_pool
    from bpsa.sim.pool_run import run_pool
    for text in ("C=2,H=40,W=30,R=3,stride=2,pad=1,kind=max,relu=1",
                 "C=3,H=9,W=11,R=3,S=2,stride=1x2,kind=avg", "C=4,H=5,kind=global_avg,N=2"):
        out = run_pool(SMALL, parse_pool(text), stall=0.3, seed=5)
        assert out["forward_match"] and out["backward_match"], (text, out)


#: ``small`` with the channel-first front end.
SMALL_CF = load_config("small_cf")


def _cf_cases(rng, count):
    """Random forward layers for the channel-first front end on SMALL_CF (4 x 4): C from 1 to
    past two channel blocks, K past the columns, rectangular kernels, strides 1-4, dilations
    1-3, padding 0-2, batch 1-2."""
    out = []
    while len(out) < count:
        r, s = int(rng.integers(1, 4)), int(rng.integers(1, 4))
        st = (int(rng.integers(1, 5)), int(rng.integers(1, 5)))
        dil = (int(rng.integers(1, 4)), int(rng.integers(1, 4)))
        pad = (int(rng.integers(0, 3)), int(rng.integers(0, 3)))
        n, c, k = int(rng.integers(1, 3)), int(rng.integers(1, 11)), int(rng.integers(1, 10))
        h, w = int(rng.integers(2, 13)), int(rng.integers(2, 13))
        oh = (h + 2 * pad[0] - dil[0] * (r - 1) - 1) // st[0] + 1
        ow = (w + 2 * pad[1] - dil[1] * (s - 1) - 1) // st[1] + 1
        if oh >= 1 and ow >= 1:
            out.append(((n, c, h, w), (k, c, r, s), st, pad, dil))
    return out


@pytest.mark.verilator
def test_channel_first_forward_verilator():
    """The channel-first forward through the whole accelerator (MODE 2: its tiling program,
    the walker's channel-block loads of HWC X, the front end on the weight-stationary array,
    P, the store path) against the golden model: random layers, the multi-tile first-layer
    shape, a plane cut into row bands, a step's images stacked into a run or run one a run
    with W held, requantization with ReLU, 30 % memory stalls; the feeder gives the same Y on the same layers; the loss as its stride classes on the same
    front end (:mod:`bpsa.plan.loss_classes`); MODE 3 is refused (MODE)."""
    from bpsa.spec.errors import AccelError
    from bpsa.spec.regmap import Phase
    from bpsa.sim.native import run_with_driver

    rng = np.random.default_rng(22)
    cases = _cf_cases(rng, 4)
    cases.append(((1, 3, 15, 15), (5, 3, 7, 7), (2, 2), (3, 3), (1, 1)))   # conv1-like
    cases.append(((1, 2, 30, 40), (3, 2, 3, 3), (1, 1), (1, 1), (1, 1)))   # row bands
    # bands the planner's search asks for (a quarter, a half of P: X of a group serves more
    # output-channel blocks), on both front ends
    reuse = [((2, 4, 24, 24), (40, 4, 1, 1), (1, 1), (0, 0), (1, 1)),
             ((1, 1, 20, 64), (12, 1, 3, 3), (1, 1), (1, 1), (1, 1))]
    cases += reuse
    # images a step by the search: stacked into one run (1 x 1, 2 x 2 stride 2; the last
    # group shorter) or, padded, a run each with W held; Y of the step's images one row a
    # block (more shapes: make test-long's random tiled layers)
    stacked = [((4, 5, 6, 6), (9, 5, 1, 1), (1, 1), (0, 0), (1, 1)),
               ((5, 4, 6, 6), (6, 4, 2, 2), (2, 2), (0, 0), (1, 1)),
               ((9, 9, 4, 4), (10, 9, 1, 1), (1, 1), (0, 0), (1, 1)),
               # padded: a run an image from its X offset, W held for the step's images
               ((4, 6, 8, 8), (7, 6, 3, 3), (2, 2), (1, 1), (1, 1))]
    cases += stacked

    async def body(drv, t):
        for xs, ws, st, pad, dil in cases:
            x, w = rng.integers(-128, 128, xs), rng.integers(-128, 128, ws)
            want = wrap_acc(golden.conv2d(x, w, st, pad, dil))
            y = await drv.forward(x, w, st, pad, dil, frontend="channel_first")
            np.testing.assert_array_equal(y, want, err_msg=f"{xs} {ws} {st} {pad} {dil}")
            assert drv.mode == "channel_first"
            if (xs, ws, st, pad, dil) in reuse:
                assert drv.plan["banded"] and drv.plan["bands"] > 1
            if (xs, ws, st, pad, dil) in stacked:
                assert drv.plan["images"] > 1, drv.plan
            if not stalled and xs[1] <= SMALL_CF.rows and not drv.plan["banded"]:
                # HWC X once a step of output-channel blocks, W once or once an image
                kb, wb = drv.plan["kblocks"], -(-ws[0] // SMALL_CF.cols) * w[0].size * SMALL_CF.cols
                assert kb * x.size + wb <= drv.counters["dma_read_bytes"] <= \
                    kb * x.size + xs[0] * wb
            if dil[1] * (ws[3] - 1) + 1 <= SMALL_CF.feeder_pattern_width:
                np.testing.assert_array_equal(await drv.forward(x, w, st, pad, dil), want)
        x, w = rng.integers(-128, 128, (1, 5, 6, 6)), rng.integers(-128, 128, (6, 5, 3, 3))
        got = await drv.forward(x, w, 1, 1, requant=9, relu=True, frontend="channel_first")
        want = golden.requantize(wrap_acc(golden.conv2d(x, w, 1, 1)), 9, 8)
        np.testing.assert_array_equal(got, np.maximum(want, 0))
        # the loss as stride-1 forwards of its stride classes on the channel-first front end
        for (n, c, h, w), (k, r, s), st, pad, dil in (
                ((1, 6, 9, 9), (5, 3, 3), (2, 2), (1, 1), (1, 1)),
                ((2, 3, 8, 10), (4, 3, 2), (3, 2), (2, 0), (2, 1)),
                ((1, 9, 6, 6), (2, 1, 1), (2, 2), (0, 0), (1, 1)),
                ((1, 5, 7, 7), (3, 3, 3), (1, 1), (1, 1), (1, 1))):
            if stalled:
                break
            oh, ow = ((h + 2 * pad[0] - dil[0] * (r - 1) - 1) // st[0] + 1,
                      (w + 2 * pad[1] - dil[1] * (s - 1) - 1) // st[1] + 1)
            dy, wt = rng.integers(-128, 128, (n, k, oh, ow)), rng.integers(-128, 128, (k, c, r, s))
            want = wrap_acc(golden.conv2d_input_grad(dy, wt, (h, w), st, pad, dil))
            got = await drv.loss(dy, wt, (h, w), st, pad, dil, mode="channel_first")
            np.testing.assert_array_equal(got, want, err_msg=f"loss {dy.shape} {wt.shape} {st}")
            assert drv.mode == "channel_first" and len(drv.plan["classes"]) <= st[0] * st[1]
        base = {"PHASE": Phase.FORWARD, "N": 1, "C": 1, "H": 4, "W": 4, "K": 1, "R": 1,
                "S": 1, "STRIDE_H": 1, "STRIDE_W": 1, "PAD_H": 0, "PAD_W": 0, "DIL_H": 1,
                "DIL_W": 1, "ADDR_X": 0, "ADDR_W": 64, "ADDR_OUT": 4096, "MODE": 3}
        assert await drv.start(base, budget=10_000) == AccelError.MODE
        return True

    def wrap_acc(v):
        from bpsa.spec.numeric import wrap_array
        return wrap_array(v, SMALL_CF.acc_width)

    stalled = False
    assert run_with_driver(SMALL_CF, body)
    cases[:] = cases[:2] + cases[-1:]
    stalled = True
    assert run_with_driver(SMALL_CF, body, stall=0.3)


@pytest.mark.verilator
def test_programs_through_the_accelerator():
    """The driver's program runs as written and its fetches are counted apart
    (PROG_READ_BYTES, not in DMA_READ_BYTES); a malformed program (each kind of bad word, an
    order that cannot complete, a program that ends without END, one outside the DMA window)
    ends with its STATUS.ERROR code, nothing written to memory, and the next good layer
    still runs."""
    from bpsa.sim.native import run_with_driver
    from bpsa.spec import isa
    from bpsa.spec.errors import ERROR_DMA_BUS, ERROR_PROGRAM, DmaError, ProgramError
    from bpsa.spec.regmap import CONTROL_BITS, REGISTER_MAP

    rng = np.random.default_rng(3)
    x, w = rng.integers(-9, 9, (1, 3, 6, 6)), rng.integers(-9, 9, (5, 3, 3, 3))
    want = golden.conv2d(x, w, 1, 1)
    table = isa.fields(TINY)
    narrow = next(i for i, f in enumerate(table) if f.bits < isa.VALUE_BITS)
    step, run, end = (isa.encode(op) for op in (isa.Opcode.STEP, isa.Opcode.RUN,
                                                isa.Opcode.END))
    bad = [([0], ProgramError.OPCODE), ([step | 1 << 50], ProgramError.RESERVED),
           ([isa.encode(isa.Opcode.SET, len(table), 1)], ProgramError.FIELD),
           ([isa.encode(isa.Opcode.SET, narrow, 1 << table[narrow].bits)], ProgramError.RANGE),
           ([run], ProgramError.ORDER), ([step, end], ProgramError.ORDER),
           ([step, run], ProgramError.END)]

    async def start(drv, t, words, addr, count=None):
        await t.write_mem(addr, b"".join(v.to_bytes(8, "little") for v in words))
        await t.write32(REGISTER_MAP["CONTROL"], 1 << CONTROL_BITS["CLEAR"])
        await t.write32(REGISTER_MAP["PROG_ADDR"], addr)
        await t.write32(REGISTER_MAP["PROG_WORDS"], len(words) if count is None else count)
        await t.write32(REGISTER_MAP["CONTROL"], 1 << CONTROL_BITS["START"])
        for _ in range(200):
            status = await t.read32(REGISTER_MAP["STATUS"])
            if status & 2:
                return status >> 8 & 0xFF, await drv.read_counters()
            await t.idle(64)
        raise AssertionError(f"no DONE for {words}")

    async def body(drv, t):
        np.testing.assert_array_equal(await drv.forward(x, w, 1, 1), want)
        assert drv.counters["prog_read_bytes"] == 8 * len(drv.program) > 0
        top = drv.mem_base + drv.mem_size
        for words, code in bad:
            got, counters = await start(drv, t, words, top - 4096)
            assert got == ERROR_PROGRAM | code, (words, got)
            assert counters["dma_write_bytes"] == 0 and counters["dma_read_bytes"] == 0
        # a program outside the DMA window: the fetch's DMA command is refused
        await drv.set_window(0, top - 8192 - 1)
        got, counters = await start(drv, t, drv.program, top - 4096)
        assert got == ERROR_DMA_BUS | DmaError.WINDOW and counters["dma_write_bytes"] == 0
        await drv.set_window(drv.mem_base, top - 1)
        np.testing.assert_array_equal(await drv.forward(x, w, 1, 1), want)
        return True

    assert run_with_driver(TINY, body, hardware=SMALL)


@pytest.mark.long               # the bf16 accelerator's build: make test-long
@pytest.mark.verilator
def test_float_tensors_through_simulate():
    """``bpsa.simulate`` on a floating-point configuration: float32 (and ml_dtypes bfloat16)
    tensors in, rounded to bf16 by the contract, float32 out. Bit-exact to the accelerator's
    golden model, and against PyTorch (float64, on the same bf16-rounded inputs) within the
    fp32 accumulation's bound ``K 2^-24 sum|a b|`` for every output of each phase."""
    import ml_dtypes
    import torch

    import bpsa
    from bpsa.models import float_layers, float_pool, floating
    rng = np.random.default_rng(8)
    x = rng.standard_normal((2, 5, 9, 9)).astype(np.float32)
    w = rng.standard_normal((6, 5, 3, 3)).astype(np.float32)
    dy = rng.standard_normal((2, 6, 5, 5)).astype(np.float32)
    geo = dict(stride=2, padding=1)
    with bpsa.simulate("small_bf16", progress=False) as acc:
        y = acc.forward(x, w, **geo)
        y16 = acc.forward(x.astype(ml_dtypes.bfloat16), w, requant=0, **geo)
        dx = acc.loss(dy, w, (9, 9), **geo)
        dw = acc.gradient(x, dy, (3, 3), **geo)
        plans = {p: acc.driver.plan for p in ("gradient",)}
        ymax = acc.pool(x, "max", 3, 2, 1)
        dmax = acc.pool_backward(dy[:, :5], x, "max", 3, 2, 1)
        yavg = acc.pool(x, "avg", 3, 2, 1)
    assert y.dtype == dx.dtype == dw.dtype == y16.dtype == np.float32
    bits = {name: floating.from_float32(t, "bf16") for name, t in
            (("x", x), ("w", w), ("dy", dy))}
    want = float_layers.accelerator_forward(bits["x"], bits["w"], "bf16", group=5, **geo)
    np.testing.assert_array_equal(y.view(np.uint32), want.astype(np.uint32))
    want16 = float_layers.accelerator_forward(bits["x"], bits["w"], "bf16", group=5,
                                              requant=True, **geo)
    np.testing.assert_array_equal(y16, floating.to_float32(want16, "bf16"))
    np.testing.assert_array_equal(dw.view(np.uint32), float_layers.accelerator_gradient(
        bits["x"], bits["dy"], (3, 3), "bf16", band=plans["gradient"]["band"],
        **geo).astype(np.uint32))
    t = {k: torch.tensor(floating.to_float32(v, "bf16"), dtype=torch.float64)
         for k, v in bits.items()}
    f = torch.nn.functional
    # pooling: the maximum and its gradient are PyTorch's exactly; the average the golden's
    assert ymax.dtype == dmax.dtype == yavg.dtype == np.float32
    np.testing.assert_array_equal(ymax, f.max_pool2d(t["x"], 3, 2, 1).numpy())
    xg = t["x"].clone().requires_grad_()
    f.max_pool2d(xg, 3, 2, 1).backward(t["dy"][:, :5])
    np.testing.assert_array_equal(dmax, xg.grad.numpy())
    np.testing.assert_array_equal(yavg, floating.to_float32(float_pool.pool2d(
        bits["x"], "avg", 3, 2, 1, "bf16"), "bf16"))
    refs = {"forward": (y, f.conv2d(t["x"], t["w"], **geo),
                        f.conv2d(t["x"].abs(), t["w"].abs(), **geo), 5 * 9),
            "loss": (dx, f.conv_transpose2d(t["dy"], t["w"], output_padding=0, **geo),
                     f.conv_transpose2d(t["dy"].abs(), t["w"].abs(), **geo), 6 * 9),
            "gradient": (dw, torch.nn.grad.conv2d_weight(t["x"], (6, 5, 3, 3), t["dy"], **geo),
                         torch.nn.grad.conv2d_weight(t["x"].abs(), (6, 5, 3, 3),
                                                     t["dy"].abs(), **geo), 2 * 25)}
    for phase, (got, ref, mag, k) in refs.items():
        err = np.abs(got.astype(np.float64) - ref.numpy())
        assert (err <= k * 2.0 ** -24 * mag.numpy()).all(), phase


#: Space-to-depth cases: (phase, mode, layer, under memory stalls).
_S2D_DOWN = (2, 6, 13, 11, 5, 1, 1, (2, 2), (0, 0))
_S2D_CASES = [("gradient", "zero_free", (2, 1, 19, 22, 5, 7, 7, (2, 2), (3, 3)), False),
              ("forward", "feeder", _S2D_DOWN, True)]
_S2D_LONG = [("gradient", "zero_free", _S2D_DOWN, False),
             ("gradient", "zero_free", (1, 1, 12, 11, 6, 3, 3, (2, 2), (1, 1)), True),
             ("gradient", "zero_free", (1, 2, 27, 25, 3, 11, 11, (4, 4), (2, 2)), False)]


def _space_to_depth(cases):
    """Each case through the accelerator as the rewrite: bit-exact, the model's DMA bytes the
    RTL's, its MACs the layer's, its cycles within 3 % (without stalls)."""
    from bpsa.models.perf import layer_cycles
    from bpsa.plan.space_to_depth import rewrite
    from bpsa.sim.native import run_jobs
    layers = [ConvLayer.conv(*shape) for _, _, shape, _ in cases]
    assert all(rewrite(lay, SMALL.rows, phase, mode) is not None
               for lay, (phase, mode, _, _) in zip(layers, cases))
    jobs = [{"phase": phase, "mode": None if phase == "forward" else mode, "seed": 80 + i,
             "pauses": pauses, "layer": _layer_dict(*shape)}
            for i, (phase, mode, shape, pauses) in enumerate(cases)]
    res = run_jobs(SMALL, jobs)
    assert all(r["match"] for r in res)
    for r, lay, job in zip(res, layers, jobs):
        m = layer_cycles(SMALL, job["phase"], lay)
        c = r["counters"]
        assert m.space_to_depth
        assert (m.dma_read_bytes, m.dma_write_bytes) == (c["dma_read_bytes"],
                                                         c["dma_write_bytes"])
        assert m.macs == r["useful_macs"]
        if not job["pauses"]:
            assert abs(m.cycles / r["cycles"] - 1) < 0.03, (lay, m.cycles, r["cycles"])


@pytest.mark.verilator
def test_space_to_depth_verilator():
    """Layers the driver runs as the space-to-depth rewrite (:mod:`bpsa.plan.space_to_depth`:
    the stride-1 layer of the phase planes, one descriptor): the gradient of a 7 x 7 stride-2
    first layer of odd size and one input channel; a 1 x 1 stride-2 downsample of odd size,
    forward under memory stalls (the even rows and columns: X' a quarter of X).
    Bit-exact to the layer's own golden result; the model's DMA bytes equal the RTL's (X'
    moves, not X) and its cycles within 3 %, its MACs the layer's."""
    _space_to_depth(_S2D_CASES)


@pytest.mark.long
@pytest.mark.verilator
def test_space_to_depth_more_verilator():
    """As :func:`test_space_to_depth_verilator` (make test-long): the gradients of the
    downsample, of a 3 x 3 stride-2 layer under memory stalls and of an 11 x 11 stride-4 one
    of two channels (8 row groups of 3 x 3 taps for one of 121 taps)."""
    _space_to_depth(_S2D_LONG)


@pytest.mark.verilator
@pytest.mark.parametrize("preset", ["small_mxint8",
                                    pytest.param("small_mxfp8", marks=pytest.mark.long)])
def test_mx_training_phases_verilator(preset):
    """The accelerator's MX build (the channel-first front end for the forward and the loss's
    stride classes, the zero-free gradient walker, P's MX mode, float32 stores) runs every
    convolution phase bit-exactly to the contract in the front ends' orders
    (``bpsa.models.mx``: ``part = rows``, ``walker=True``; ``run_jobs`` asserts it): channels
    past one 32-channel block, output channels past the columns, strides, padding, dilation,
    a plane cut into row bands, images stacked into a run, rows past two 32-pixel blocks,
    under memory stalls; the cycle model's DMA bytes and load-written buffer words equal the
    counters and its cycles are
    within 3 % of them without stalls. What it does not build is refused: the feeder's forward and a
    requantized output by the driver, a forward descriptor in MODE 0 by the planner (MODE) and,
    its program sent anyway, by the hardware (an engine error, not a hang), the traditional
    flow's baseline by the job check."""
    from bpsa.models.perf import layer_cycles
    from bpsa.sim.accel_run import check_job, job
    from bpsa.sim.native import run_jobs, run_with_driver
    from bpsa.spec.errors import ERROR_ENGINE, AccelError
    from bpsa.spec.regmap import Phase

    cfg = load_config(preset)
    layers = [ConvLayer.conv(1, 40, 6, 6, 6, 3, 3, 1, 1),          # C: a block and a part
              ConvLayer.conv(2, 5, 9, 11, 7, 3, 2, (2, 1), (1, 0), (1, 2)),
              ConvLayer.conv(3, 4, 6, 6, 5, 1, 1),                 # images stacked
              ConvLayer.conv(1, 3, 36, 70, 3, 3, 3, 1, 1)]         # row bands, 3 X blocks
    jobs = [job(layer, phase, seed=i, pauses=i % 2 == 1)
            for i, (layer, phase) in enumerate((lay, p) for lay in layers
                                               for p in ("forward", "loss", "gradient"))]
    plans = [check_job(cfg, layer, phase) for layer in layers
             for phase in ("forward", "loss", "gradient")]
    assert plans[9]["banded"] and plans[11]["banded"] and plans[8]["images"] > 1, plans
    res = run_jobs(cfg, jobs, plans=plans)
    assert [r["mode"] for r in res[:3]] == ["channel_first", "channel_first", "zero_free"]
    assert all(r["match"] for r in res)
    # the cycle model in MX (the X scale loads, W's scale words, the loss's stride classes, the
    # gradient's row pitch and segments): DMA bytes exact, cycles within 3 %
    for j, r in zip(jobs, res):
        m = layer_cycles(cfg, j["phase"], ConvLayer.from_dict(j["layer"]))
        assert m.dma_read_bytes == r["counters"]["dma_read_bytes"], j
        assert m.dma_write_bytes == r["counters"]["dma_write_bytes"], j
        assert (m.a_writes, m.b_writes, m.p_writes, m.a_reads, m.b_reads) == tuple(
            r["counters"][f"buf_{x}"] for x in ("a_writes", "b_writes", "p_writes", "a_reads",
                                                "b_reads")), j
        if not j["pauses"]:             # (the model's memory answers at once)
            assert abs(m.cycles / r["cycles"] - 1) < 0.03, (j, m.cycles, r["cycles"])
    with pytest.raises(ValueError, match="baseline is not run"):
        check_job(cfg, layers[0], "loss", baseline=True)

    async def body(drv, t):
        x = np.ones((1, 2, 4, 4), np.float32)
        w = np.ones((3, 2, 1, 1), np.float32)
        with pytest.raises(ValueError, match="mode 'channel_first'"):
            await drv.forward(x, w, frontend="feeder")
        with pytest.raises(ValueError, match="requant must be None"):
            await drv.forward(x, w, requant=2)
        desc = {"PHASE": Phase.FORWARD, "N": 1, "C": 2, "H": 4, "W": 4, "K": 3, "R": 1,
                "S": 1, "STRIDE_H": 1, "STRIDE_W": 1, "PAD_H": 0, "PAD_W": 0, "DIL_H": 1,
                "DIL_W": 1, "ADDR_X": 0, "ADDR_W": 256, "ADDR_OUT": 4096, "MODE": 0}
        # the planner refuses the feeder's forward in MX; its program, planned for the integer
        # twin of the configuration (the same instruction fields), ends with an engine error
        assert await drv.start(desc, budget=20_000) == AccelError.MODE
        drv.config = cfg.replace(name="int_twin", arithmetic="int", operand_signed=True,
                                 acc_width=32)
        try:
            assert await drv.start(desc, budget=20_000) == ERROR_ENGINE
        finally:
            drv.config = cfg
        return True

    assert run_with_driver(cfg, body)
