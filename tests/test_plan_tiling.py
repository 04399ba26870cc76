"""The controller's row bands (:mod:`bpsa.plan.tiling`) against :mod:`bpsa.models.golden` alone:
every band run as its own asymmetrically padded layer (padding made explicit with ``np.pad``) and
the pieces put together equal the whole layer, for random shapes and band heights."""

import numpy as np
import pytest

from bpsa.config import load_config
from bpsa.models import golden
from bpsa.plan import tiling
from bpsa.plan.tiling import bands, column_strips, plan, plan_or_strips
from bpsa.spec.layer import ConvLayer


def _layer(rng):
    while True:
        r, s = (int(v) for v in rng.integers(1, 5, 2))
        st = (int(rng.integers(1, 4)), int(rng.integers(1, 3)))
        dl = (int(rng.integers(1, 3)), int(rng.integers(1, 3)))
        h, w = int(rng.integers(1, 20)), int(rng.integers(1, 9))
        drh = dl[0] * (r - 1)
        pd = (int(rng.integers(0, drh + 1)), int(rng.integers(0, 3)))
        try:
            golden.output_hw((h, w), (r, s), st, pd, dl)
        except ValueError:
            continue
        return dict(n=int(rng.integers(1, 3)), c=int(rng.integers(1, 4)), h=h, w=w,
                    k=int(rng.integers(1, 4)), r=r, s=s, stride=st, pad=pd, dil=dl)


def _check_bands(phase, L, band, rng):
    x = rng.integers(-8, 8, (L["n"], L["c"], L["h"], L["w"]))
    wt = rng.integers(-8, 8, (L["k"], L["c"], L["r"], L["s"]))
    kw = dict(stride=L["stride"], dilation=L["dil"])
    y = golden.conv2d(x, wt, padding=L["pad"], **kw)
    dy = rng.integers(-8, 8, y.shape)
    pw = (0, L["pad"][1])
    bl = bands(phase, L["h"], L["w"], L["r"], L["s"], L["stride"], L["pad"], L["dil"], band)
    covered = sum(b.out_rows for b in bl)
    if phase == "forward":
        assert covered == y.shape[2]
        for b in bl:
            xb = np.pad(x[:, :, b.in0:b.in0 + b.in_rows],
                        ((0, 0), (0, 0), (b.pad_top, b.pad_bottom), (0, 0)))
            got = golden.conv2d(xb, wt, padding=pw, **kw)
            assert got.shape[2] == b.engine_oh == b.out_rows
            assert np.array_equal(got, y[:, :, b.out0:b.out0 + b.out_rows]), b
    elif phase == "gradient":
        assert covered == y.shape[2]
        want = golden.conv2d_weight_grad(x, dy, (L["r"], L["s"]), padding=L["pad"], **kw)
        total = np.zeros_like(want)
        for b in bl:
            xb = np.pad(x[:, :, b.in0:b.in0 + b.in_rows],
                        ((0, 0), (0, 0), (b.pad_top, b.pad_bottom), (0, 0)))
            total += golden.conv2d_weight_grad(xb, dy[:, :, b.out0:b.out0 + b.out_rows],
                                               (L["r"], L["s"]), padding=pw, **kw)
        assert np.array_equal(total, want)
    else:
        assert covered == L["h"]
        want = golden.conv2d_input_grad(dy, wt, (L["h"], L["w"]), padding=L["pad"], **kw)
        for b in bl:
            assert b.in_rows >= 1 and b.pad_top >= 0 and b.pad_bottom >= 0
            hp = b.engine_h + b.pad_top + b.pad_bottom
            # the engine's shape check: OH is the forward output height of the band
            assert (hp - L["dil"][0] * (L["r"] - 1) - 1) // L["stride"][0] + 1 == b.engine_oh
            got = golden.conv2d_input_grad(dy[:, :, b.in0:b.in0 + b.in_rows], wt,
                                           (hp, L["w"]), padding=pw, **kw)
            got = got[:, :, b.pad_top:b.pad_top + b.engine_h]
            assert np.array_equal(got, want[:, :, b.out0:b.out0 + b.out_rows]), b


@pytest.mark.parametrize("phase", ["forward", "loss", "gradient"])
@pytest.mark.parametrize("seed", range(6))
def test_bands_add_up_to_the_layer(phase, seed):
    rng = np.random.default_rng([seed, len(phase)])
    for _ in range(12):
        L = _layer(rng)
        _check_bands(phase, L, int(rng.integers(1, 6)), rng)


@pytest.mark.parametrize("phase", ["forward", "loss", "gradient"])
def test_one_band_is_the_layer(phase):
    """Unbanded: one band, the layer's own padding on both sides."""
    bl = bands(phase, 9, 7, 3, 3, (2, 2), (1, 1), (1, 1), 0, banded=False)
    assert len(bl) == 1 and bl[0].pad_top == bl[0].pad_bottom == 1
    assert bl[0].engine_h == 9 and bl[0].engine_oh == 5


def test_plan_bands_layers_larger_than_the_buffers():
    cfg = load_config("small")
    big = ConvLayer.conv(1, 3, 128, 128, 8, 3, 3, stride=2, pad=1)
    for phase in ("forward", "loss", "gradient"):
        p = plan(cfg, phase, big)
        assert p["banded"] and p["bands"] > 1, (phase, p)
        bl = bands(phase, 128, 128, 3, 3, (2, 2), (1, 1), (1, 1), p["band"])
        assert len(bl) == p["bands"]
    small = ConvLayer.conv(1, 3, 8, 8, 8, 3, 3, stride=2, pad=1)
    for phase in ("forward", "loss", "gradient"):
        assert not plan(cfg, phase, small)["banded"]


def test_plan_refuses_what_cannot_be_banded():
    cfg = load_config("small")
    # a padding beyond the kernel's reach, on a layer that must be banded
    with pytest.raises(ValueError, match="padding"):
        plan(cfg, "forward", ConvLayer.conv(1, 1, 80, 80, 4, 1, 1, pad=1))
    # a row wider than a bank
    with pytest.raises(ValueError, match="not even one row band"):
        plan(cfg, "gradient", ConvLayer.conv(1, 1, 8, 4000, 4, 3, 3))


def test_fc_plan_blocks_equal_golden():
    """The FC backward tiling (PHASE 3): on random layers and buffer sizes every run's blocks
    fit their banks and P, and the blocks' products, put together the way the controller does
    (dX rows summed over output blocks, dW summed over batch chunks), equal
    ``bpsa.models.golden.gemm``."""
    from bpsa.plan.tiling import fc_plan
    rng = np.random.default_rng(8)
    small = load_config("small")
    for _ in range(60):
        depth = int(2 ** rng.integers(5, 9))
        cfg = small.replace(buf_a_depth=depth, buf_b_depth=depth, buf_p_depth=depth,
                            name=f"fc_{depth}")
        n, i = (int(v) for v in rng.integers(1, 40, 2))
        o = int(rng.integers(1, depth))
        p = fc_plan(cfg, n, i, o)
        fib, fob, fnb, fq = p["fib"], p["fob"], p["fnb"], p["fq"]
        assert fq == -(-fib // cfg.cols) and fnb >= 1 and fob >= 1 and fib >= 1
        assert fnb * fob <= depth // 2 and (fnb + fob) * fib <= depth // 2
        assert (fnb + o) * fq <= cfg.buf_p_depth
        x, w, dy = rng.integers(-8, 8, (n, i)), rng.integers(-8, 8, (o, i)), \
            rng.integers(-8, 8, (n, o))
        dx, dw, runs = np.zeros((n, i), np.int64), np.zeros((o, i), np.int64), 0
        for c0 in range(0, i, fib):
            for n0 in range(0, n, fnb):
                for k0 in range(0, o, fob):
                    cs, ns, ks = slice(c0, c0 + fib), slice(n0, n0 + fnb), slice(k0, k0 + fob)
                    dx[ns, cs] += dy[ns, ks] @ w[ks, cs]
                    dw[ks, cs] += dy[ns, ks].T @ x[ns, cs]
                    runs += 1
        assert runs == p["runs"]
        np.testing.assert_array_equal(dx, golden.gemm(dy, w))
        np.testing.assert_array_equal(dw, golden.gemm(dy.T, x))
    with pytest.raises(ValueError, match="P"):
        fc_plan(small, 4, 4, small.buf_p_depth)


def _plan_or_none(cfg, phase, c, h, w, k, r):
    """The plan of a square layer with kernel ``r`` and "same" padding, or None when it is
    refused for a size that does not fit."""
    try:
        return plan(cfg, phase, ConvLayer.conv(1, c, h, w, k, r, r, pad=r // 2))
    except ValueError as e:
        assert "band" in str(e) or "fit" in str(e)
        return None


def test_plan_channel_blocks():
    """Channel blocks: the loss cuts the dX channels into blocks whose W (one output channel)
    fits a bank of A and whose dX rows fit P; the gradient cuts the output channels into
    blocks whose dW rows fit P. Layers that fit keep one block (the plans of before)."""
    rng = np.random.default_rng(11)
    small = load_config("small")
    ceil = lambda a, b: -(-a // b)     # noqa: E731
    seen = set()
    for _ in range(300):
        depth = int(2 ** rng.integers(6, 11))
        cfg = small.replace(buf_a_depth=depth, buf_b_depth=depth, buf_p_depth=depth,
                            name=f"cb_{depth}")
        acap, pcap, cols = depth // 2, depth, cfg.cols
        c, k = (int(v) for v in rng.integers(1, 600, 2))
        r = s = int(rng.choice([1, 3, 5]))
        h = w = int(rng.integers(r, 20))
        lp, gp = (_plan_or_none(cfg, phase, c, h, w, k, r) for phase in ("loss", "gradient"))
        if lp is not None:
            cb = lp["cblock"]
            assert cb * r * s <= acap and cb * ceil(w, cols) <= pcap
            assert (cb == c) == (lp["cblocks"] == 1) and lp["cblocks"] == ceil(c, cb)
            assert lp["group"] * cb * r * s <= acap
            seen.add(("loss", lp["cblocks"] > 1))
        if gp is not None:
            kb = gp["kblock"]
            assert kb * ceil(r * s, cols) <= pcap and gp["kblocks"] == ceil(k, kb)
            assert (kb == k) == (gp["kblocks"] == 1)
            assert gp["group"][1] <= kb
            seen.add(("gradient", gp["kblocks"] > 1))
    assert seen == {("loss", True), ("loss", False), ("gradient", True), ("gradient", False)}


def _workload_refusals(cfg):
    """The (network, layer, phase) of sim/workloads/conv_layers.csv (batch 1) the controller
    refuses on ``cfg``; each refusal must be a row too wide for a bank, and the driver's
    column strips must plan it."""
    import csv

    from bpsa.tools.zero_report import DEFAULT_CSV as path
    refused = []
    for row in csv.DictReader(path.read_text().splitlines()):
        c, h, w, k, r, s, st, p, d = (int(row[x]) for x in
                                      "C H W K R S stride pad dilation".split())
        layer = ConvLayer.conv(1, c, h, w, k, r, s, st, p, d)
        for phase in ("forward", "loss", "gradient"):
            try:
                plan(cfg, phase, layer)
            except ValueError as e:
                assert "not even one row band fits" in str(e), (row, phase, e)
                strips, _ = column_strips(cfg, phase, layer)
                assert len(strips) >= 2
                refused.append((row["network"], row["layer"], phase))
    return refused


def test_real_layers_plan_on_paper16():
    """With channel blocks, every layer of the workloads runs all three phases on the 16x16
    preset in one descriptor, but AlexNet's first gradient (11 X rows of 224 do not fit a
    bank), which runs as column strips."""
    assert _workload_refusals(load_config("paper16")) == [("alexnet", "features.0",
                                                           "gradient")]


def test_real_layers_run_on_small():
    """On the 1024-word ``small`` preset the 224- and 299-wide first layers' loss and
    gradient need column strips; every other layer and phase runs in one descriptor."""
    refused = _workload_refusals(load_config("small"))
    assert {net for net, _, _ in refused} == {"alexnet", "vgg16", "resnet50", "squeezenet1_0",
                                              "squeezenet1_1", "inception_v3"}
    assert sorted(phase for _, _, phase in refused) == ["gradient"] * 7 + ["loss"] * 4


def test_plan_or_strips():
    """A layer that fits gets the controller's plan; a too wide one column strips; when even
    one-column strips are refused for another reason than the whole layer, the error names
    both (here: a tall 1-row kernel with pad_h 2 cannot be cut into row bands)."""
    cfg = load_config("small").replace(buf_a_depth=128, buf_b_depth=128, buf_p_depth=128)
    assert "strips" not in plan_or_strips(cfg, "gradient", ConvLayer.conv(1, 1, 6, 6, 4, 1, 4))
    assert len(plan_or_strips(cfg, "gradient",
                              ConvLayer.conv(1, 1, 6, 100, 4, 1, 4))["strips"]) == 2
    with pytest.raises(ValueError, match=r"one X plane \(880\).*; cut into column strips: not "
                       r"even strips of one column fit \(one dY plane \(26\)"):
        plan_or_strips(cfg, "gradient", ConvLayer.conv(1, 1, 22, 40, 4, 1, 4, pad=(2, 0)))


@pytest.mark.parametrize("phase", ["pool_forward", "pool_backward"])
def test_pool_runs_cover_every_plane_and_row(phase):
    """The pooling runs of :func:`bpsa.plan.tiling.pool_plan` (whole planes a step, or row
    bands of one plane) cover every output (forward) or dX (backward) row of every plane once;
    a band's loaded X rows hold its windows' rows and its own, its dY rows the windows that
    cover it; and its operands fit a bank and its output half of P."""
    from bpsa.config import Config
    cfg = Config(name="pt", rows=2, cols=3, buf_p_depth=32, buf_pool_depth=256,
                 pool_kinds=("max", "avg"), dim_width=8)
    rng = np.random.default_rng(3)
    seen_banded = 0
    for _ in range(150):
        r, s = int(rng.integers(1, 5)), int(rng.integers(1, 5))
        st = (int(rng.integers(1, 4)), int(rng.integers(1, 4)))
        pad = (int(rng.integers(0, r // 2 + 1)), int(rng.integers(0, s // 2 + 1)))
        n, c = 2, int(rng.integers(1, 4))
        h, w = int(rng.integers(r, 30)), int(rng.integers(s, 20))
        kind, relu = str(rng.choice(["max", "avg"])), bool(rng.integers(0, 2))
        try:
            p = tiling.pool_plan(cfg, phase, n, c, h, w, r, s, st, pad, kind, relu)
        except ValueError as e:
            assert "not even one row band fits" in str(e)
            continue
        oh, ow = p["oh"], p["ow"]
        out_rows = h if phase == "pool_backward" else oh
        covered = np.zeros((n * c, out_rows), dtype=int)
        for run in p["runs"]:
            covered[run["i0"]:run["i0"] + run["planes"], run["y0"]:run["y0"] + run["rows"]] += 1
            assert run["planes"] * (run["x_plane"] + run["d_plane"]) <= 128
            assert run["planes"] * run["p_row"] <= 16
            y0, y1 = run["y0"], run["y0"] + run["rows"]
            if phase == "pool_forward":
                lo, hi = max(0, y0 * st[0] - pad[0]), min(h, (y1 - 1) * st[0] - pad[0] + r)
            else:
                wins = [o for o in range(oh) if o * st[0] - pad[0] + r > y0
                        and o * st[0] - pad[0] < y1]
                if wins:
                    assert (run["dlo"], run["drows"]) == (wins[0], len(wins))
                else:
                    assert run["drows"] == 0
                lo = min([y0] + [max(0, o * st[0] - pad[0]) for o in wins])
                hi = max([y1] + [min(h, o * st[0] - pad[0] + r) for o in wins])
            if run["x_plane"]:
                assert run["xlo"] <= lo and hi <= run["xlo"] + run["xrows"] <= h
        assert (covered == 1).all()
        seen_banded += bool(p["banded"])
    assert seen_banded > 10


def test_zero_free_loss_takes_images_where_w_is_the_larger_operand():
    """The host's search asks for images a step (one input block, W loaded once for them) on
    small planes, where W outweighs dY; on a large plane it keeps input-channel blocks (dY
    loaded once for them). The model's DMA bytes follow (W read once, not once an image)."""
    from bpsa.models.perf import layer_cycles
    cfg = load_config("paper16")
    small = ConvLayer.conv(8, 256, 7, 7, 256, 3, 3, stride=2, pad=1)
    p = plan(cfg, "loss", small, mode="zero_free")
    assert (p["cstep"], p["images"], p["cblocks"]) == (1, 8, 16)
    w_bytes = 256 * 256 * 9 * 2
    assert layer_cycles(cfg, "loss", small).dma_read_bytes < 2 * w_bytes
    big = ConvLayer.conv(8, 64, 56, 56, 64, 3, 3, stride=2, pad=1)
    assert plan(cfg, "loss", big, mode="zero_free")["images"] == 1
