"""A network's training step from the cycle model: every layer and phase is listed (run,
refused with the reason, or skipped), the MACs are the layers' own (counted here from the
network file), the totals add up, an FC layer is the 1 x 1 convolution of the batch, and a
configuration without a phase's engine refuses it by name."""

import dataclasses

import pytest

from bpsa.config import load_config
from bpsa.models.network_perf import POOLS, network_step
from bpsa.models.perf import layer_cycles, pool_cycles
from bpsa.spec.layer import ConvLayer
from bpsa.spec.network import load_network


def _macs(lay, batch):
    if lay.op == "fc":
        return batch * lay.c * lay.k
    oh = (lay.h + 2 * lay.pad - lay.dilation * (lay.r - 1) - 1) // lay.stride + 1
    ow = (lay.w + 2 * lay.pad - lay.dilation * (lay.s - 1) - 1) // lay.stride + 1
    return batch * lay.k * oh * ow * lay.c * lay.r * lay.s


@pytest.mark.parametrize("name,batch", [("resnet18", 2), ("squeezenet1_1", 1), ("digits", 8)])
def test_every_layer_phase_is_listed(name, batch):
    cfg = load_config("paper16")
    net = load_network(name)
    step = network_step(cfg, net, batch=batch)
    assert len(step.rows) == 3 * len(net.layers)
    for i, (lay, rows) in enumerate(zip(net, zip(*[iter(step.rows)] * 3))):
        assert [r["phase"] for r in rows] == ["forward", "loss", "gradient"]
        for r in rows:
            assert r["layer"] == lay.name
            if lay.op.endswith("pool") and r["phase"] == "gradient":
                assert r["status"] == "skipped" and "no weights" in r["reason"]
            elif lay.op.endswith("pool"):       # the pooling unit: no MACs, its own bound
                assert r["status"] == "run" and r["macs"] == 0 and r["cycles"] > 0
                assert r["bound"] in ("pool", "dma", "P", "set-up")
                want = pool_cycles(cfg, {"forward": "pool_forward",
                                         "loss": "pool_backward"}[r["phase"]], n=batch,
                                   c=lay.c, h=lay.h, w=lay.w, r=lay.r, s=lay.s,
                                   stride=(lay.stride,) * 2, pad=(lay.pad,) * 2,
                                   kind={"max_pool": "max", "avg_pool": "avg",
                                         "global_avg_pool": "global_avg"}[lay.op],
                                   requant=r["phase"] == "forward")
                assert r["cycles"] == want.cycles
            elif r["phase"] == "loss" and i == 0:
                assert r["status"] == "skipped"
            elif r["status"] == "run":
                assert r["macs"] == _macs(lay, batch)
                assert 0 < r["utilization"] <= 1
                assert r["cycles"] >= r["roofline_cycles"]
                assert r["bound"] in ("array", "dma", "P", "set-up")
            else:
                assert r["reason"]
    ran = [r for r in step.rows if r["status"] == "run"]
    t = step.totals
    assert t["cycles"] == sum(r["cycles"] for r in ran)
    assert t["macs"] == sum(r["macs"] for r in ran)
    assert t["utilization"] == pytest.approx(t["macs"] / (256 * t["cycles"]))
    assert t["seconds"] == pytest.approx(t["cycles"] / 100e6)
    assert sum(p["cycles"] for p in step.by_phase.values()) == t["cycles"]


def test_fc_is_the_batch_as_a_row_of_pixels():
    cfg = load_config("small")
    net = load_network("digits")
    step = network_step(cfg, net, batch=6, phases=("forward", "gradient"))
    fc = [r for r in step.rows if r["layer"] == "fc"]
    for r in fc:
        want = layer_cycles(cfg, r["phase"], ConvLayer.conv(1, 32, 1, 6, 10, 1, 1))
        assert r["cycles"] == want.cycles and r["macs"] == 6 * 32 * 10


def test_missing_engines_are_refused_by_name():
    cfg = load_config("small").replace(backward_modes=("bp_im2col",))
    step = network_step(cfg, load_network("digits"), batch=2)
    conv2 = {r["phase"]: r for r in step.rows if r["layer"] == "conv2"}
    assert conv2["forward"]["status"] == "run"
    for phase in ("loss", "gradient"):
        assert conv2[phase]["status"] == "refused"
        assert "does not generate the zero-free mode" in conv2[phase]["reason"]
    assert step.totals["refused"] == len(step.refused) > 0


def test_pooling_without_the_unit_is_refused_by_name():
    cfg = load_config("small").replace(pool_kinds=("max",))
    step = network_step(cfg, load_network("digits"), batch=2)
    rows = {(r["layer"], r["phase"]): r for r in step.rows}
    assert rows["pool1", "forward"]["status"] == "run"
    gap = rows["gap", "loss"]
    assert gap["status"] == "refused" and "generates no global_avg pooling" in gap["reason"]


def test_bad_arguments():
    cfg, net = load_config("small"), load_network("digits")
    with pytest.raises(ValueError, match="batch must be >= 1"):
        network_step(cfg, net, batch=0)
    with pytest.raises(ValueError, match="phase 'backward' is not one of"):
        network_step(cfg, net, phases=("backward",))


def test_processes_give_the_same_step():
    cfg, net = load_config("paper16"), load_network("squeezenet1_1")
    assert network_step(cfg, net, jobs=2).rows == network_step(cfg, net).rows


def test_forward_front_ends():
    """``frontend``: every forward row on the front end asked; ``best`` takes per layer the
    faster of the two (ties to the feeder), so its forward is never slower than either; the
    other phases do not change; a configuration without the channel-first front end refuses
    it by name. ResNet-18's layer2 (where ``best`` takes each front end; the whole network
    takes 25 s here)."""
    cfg = load_config("small_cf")
    full = load_network("resnet18")
    names = [lay.name for lay in full]
    net = dataclasses.replace(full, layers=tuple(
        full.layers[names.index("layer2.0.conv1"):names.index("layer3.0.conv1")]))
    steps = {fe: network_step(cfg, net, frontend=fe)
             for fe in ("feeder", "channel_first", "best")}
    rows = {fe: {(r["layer"], r["phase"]): r for r in s.rows} for fe, s in steps.items()}
    for key, best in rows["best"].items():
        f, c = rows["feeder"][key], rows["channel_first"][key]
        if best["status"] != "run" or key[1] != "forward" or best["op"] in POOLS:
            assert best.get("cycles") == f.get("cycles") == c.get("cycles")
            continue
        ran = [r for r in (f, c) if r["status"] == "run"]      # one may refuse the layer
        assert best["cycles"] == min(r["cycles"] for r in ran)
        assert best["frontend"] == min(ran, key=lambda r: r["cycles"])["frontend"]
        assert all(r["frontend"] == fe for r, fe in ((f, "feeder"), (c, "channel_first"))
                   if r["status"] == "run")
    # the totals count the rows that run: best runs every row the feeder runs, faster
    fwd = {fe: s.by_phase["forward"]["cycles"] for fe, s in steps.items()}
    ran = {fe: sum(r["status"] == "run" for r in s.rows) for fe, s in steps.items()}
    assert ran["best"] == max(ran.values()) and fwd["best"] <= fwd["feeder"]
    with pytest.raises(ValueError, match="does not generate the channel-first"):
        network_step(load_config("ecp5_train"), net, frontend="best")
    with pytest.raises(ValueError, match="frontend must be"):
        network_step(cfg, net, frontend="im2col")
