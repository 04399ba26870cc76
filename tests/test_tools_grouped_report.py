"""The grouped page: a model's figures are the cycle model's step of its traced network, split
by kind of convolution and phase; the group-at-a-time cycles are a group's layer times the
groups; the page and its JSON are written."""

import json

import pytest

from bpsa.config import load_config
from bpsa.models.perf import layer_cycles
from bpsa.spec.layer import ConvLayer
from bpsa.tools import grouped_report
from bpsa.tools.grouped_report import _markdown, grouped_figures

SMALL_CF = load_config("small_cf")


NET = """layer,op,C,H,W,K,R,S,stride,pad,dilation,groups
stem,conv,3,16,16,8,3,3,2,1,1,1
dw,conv,8,8,8,8,3,3,1,1,1,8
pw,conv,8,8,8,16,1,1,1,0,1,1
gr,conv,16,8,8,16,3,3,1,1,1,4
"""


def test_figures_by_kind_and_phase(tmp_path):
    path = tmp_path / "net.csv"
    path.write_text(NET)
    got = grouped_figures(SMALL_CF, str(path), batch=2)
    kinds = got["kinds"]
    assert {k: sorted(v) for k, v in kinds.items()} == {
        k: ["forward", "gradient", "loss"] for k in ("dense", "depthwise", "grouped")}
    assert kinds["dense"]["forward"]["layers"] == 2 and kinds["dense"]["loss"]["layers"] == 1
    dw = ConvLayer.conv(2, 8, 8, 8, 8, 3, 3, 1, 1, groups=8)
    gr = ConvLayer.conv(2, 16, 8, 8, 16, 3, 3, 1, 1, groups=4)
    for phase in ("forward", "loss", "gradient"):
        for kind, lay in (("depthwise", dw), ("grouped", gr)):
            k, m = kinds[kind][phase], layer_cycles(SMALL_CF, phase, lay)
            assert (k["macs"], k["roofline_cycles"]) == (lay.macs, m.roofline_cycles)
            fronts = [m.cycles] + ([layer_cycles(SMALL_CF, phase, lay,
                                                 frontend="channel_first").cycles]
                                   if phase == "forward" else [])
            assert k["cycles"] == min(fronts)         # the faster front end
        # a group at a time: the depthwise layer's 8 one-channel convolutions
        one = layer_cycles(SMALL_CF, "gradient", dw.group_layer()).cycles
        assert kinds["depthwise"]["gradient"]["one_group_cycles"] == 8 * one
    assert got["step"]["cycles"] == sum(k["cycles"] for kind in kinds.values()
                                        for k in kind.values())
    assert "| net | depthwise | loss | 1 |" in _markdown(SMALL_CF, [dict(got, model="net")])


def test_page_is_written(tmp_path, monkeypatch):
    fake = {"model": "m", "batch": 8, "step": {"cycles": 300, "roofline_cycles": 200},
            "kinds": {"grouped": {"forward": {"layers": 2, "macs": 1600, "cycles": 100,
                                              "roofline_cycles": 50,
                                              "one_group_cycles": 400}}}}
    monkeypatch.setattr(grouped_report, "MODELS", ("m",))
    monkeypatch.setattr(grouped_report, "grouped_figures", lambda config, m, batch: fake)
    grouped_report.main(["--config", "small", "-o", str(tmp_path)])
    md = (tmp_path / "grouped.md").read_text()
    # small: 4 x 4; 1,600 MACs in 100 cycles: 1.0, at the roofline 2.0; packing 4x
    assert "| m | 300 | 200 | 1.50 |" in md
    assert "| m | grouped | forward | 2 | 100 | 1.000 | 2.000 | 2.00 | 400 | 4.0x |" in md
    assert json.loads((tmp_path / "grouped.json").read_text())["models"] == [fake]
