"""The energy page: a network's figures are the energy model's on the cycle model's step
(dense and gated), its shares and TOPS/W follow from them; the interleave's comparison adds up
from the array's RTL runs; both files are written."""

import json

import pytest

from bpsa.config import load_config
from bpsa.models.energy import rows_energy
from bpsa.models.network_perf import network_step
from bpsa.spec.network import load_network
from bpsa.tools.energy_report import (GATED, energy_report, interleave_energy, loss_energy,
                                      measured_gating, network_energy)

SMALL_CF = load_config("small_cf")


def test_network_figures_follow_from_the_step():
    got = network_energy(SMALL_CF, "digits", batch=2)
    step = network_step(SMALL_CF, load_network("digits"), batch=2, frontend="best")
    dense = rows_energy(SMALL_CF, step.rows)
    gated = rows_energy(SMALL_CF, step.rows, zero_fraction=GATED)
    assert got["pj"] == pytest.approx(dense["pj"]) and got["macs"] == step.totals["macs"]
    assert got["pj_gated"] == pytest.approx(gated["pj"])
    assert got["pj_gated"] < got["pj"]
    assert got["dram_share"] + got["sram_share"] + got["mac_share"] == pytest.approx(1)
    assert got["tops_per_w"] == pytest.approx(2 * got["macs"] / got["pj"])
    assert got["gating_saving"] == pytest.approx(1 - got["pj_gated"] / got["pj"])


@pytest.mark.verilator
def test_interleave_adds_up_and_the_page_is_written(tmp_path):
    small = load_config("small")
    il = interleave_energy(small, fc=(8, 4, 8))
    sep, inter = il["separate"], il["interleaved"]
    assert inter["fired"] > 0 and sep["fired"] > 0
    assert il["energy_saving"] == pytest.approx(1 - inter["pj"] / sep["pj"])
    assert il["accesses_saving"] == pytest.approx(1 - inter["accesses"] / sep["accesses"])
    data = energy_report(tmp_path, config_name="small_cf", networks=("digits",), batch=1,
                         il_config="small", jobs=1)
    saved = json.loads((tmp_path / "energy.json").read_text())
    assert {k: saved[k] for k in data} == json.loads(json.dumps(data))
    md = (tmp_path / "energy.md").read_text()
    assert md.count("| digits |") == 1 and "## The source papers' energy claims" in md
    assert "## Zero gating on measured data" in md and md.count("| resblock_digits |") == 5


def test_measured_gating_prices_the_measured_fractions():
    """One epoch of the digits CNN: each layer's fractions in [0, 1], ReLU zeros in the
    second convolution's X, the phase figures the layers' MAC-weighted means, and the gated
    energy the energy model's on the step with each row's fraction."""
    from bpsa.torch.models import digits_cnn
    from bpsa.torch.trace import trace
    (got,) = measured_gating(SMALL_CF, batch=4, epochs=1, batches=2, models=("digits_cnn",))
    assert set(got["layers"]) == {"conv1", "conv2", "fc"}
    assert all(0 <= f <= 1 for ph in got["layers"].values() for f in ph.values())
    assert got["layers"]["conv2"]["forward"] > 0.2          # ReLU and pooling outputs
    rows = network_step(SMALL_CF, trace(digits_cnn(), (4, 1, 8, 8)).network, batch=4,
                        frontend="best").rows
    ran = [r for r in rows if r.get("status", "run") == "run" and r.get("macs")]
    for phase in ("forward", "loss", "gradient"):
        mine = [r for r in ran if r["phase"] == phase]
        want = (sum(r["macs"] * got["layers"][r["layer"]][phase] for r in mine)
                / sum(r["macs"] for r in mine))
        assert got["phases"][phase] == pytest.approx(want)
    for r in rows:
        r["zero_fraction"] = got["layers"].get(r.get("layer"), {}).get(r["phase"], 0.0)
    assert got["pj_gated"] == pytest.approx(rows_energy(SMALL_CF, rows)["pj"])
    dense = [dict(r, zero_fraction=0.0) for r in rows]
    assert got["pj"] == pytest.approx(rows_energy(SMALL_CF, dense)["pj"])
    assert got["pj"] > got["pj_gated"]
    assert 0 < got["gating_saving"] < 1 and 0 <= got["test_accuracy"] <= 1


def test_loss_energy_by_stride():
    from bpsa.models.energy import actions_from_model, energy
    from bpsa.models.perf import layer_cycles, traditional_cycles
    from bpsa.spec.layer import ConvLayer
    got = loss_energy(SMALL_CF, "digits", batch=1)
    assert got["strides"] and got["strides"][2]["layers"] == 1      # its 3x3 stride-2 conv
    layers = [lay for i, lay in enumerate(load_network("digits"))
              if i and lay.op == "conv"]
    assert sum(s["layers"] for s in got["strides"].values()) + len(got["refused"]) == len(layers)
    for stride, s in got["strides"].items():
        pj = [0.0, 0.0]
        for lay in (lay for lay in layers if lay.stride == stride):
            conv = ConvLayer.conv(1, lay.c, lay.h, lay.w, lay.k, lay.r, lay.s, lay.stride,
                                  lay.pad, lay.dilation)
            for j, m in enumerate((layer_cycles(SMALL_CF, "loss", conv),
                                   traditional_cycles(SMALL_CF, "loss", conv))):
                pj[j] += energy(SMALL_CF, actions_from_model(
                    SMALL_CF, dict(m.as_dict(), phase="loss")))["pj"]
        assert s["pj_saving"] == pytest.approx(1 - pj[0] / pj[1])
