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


def test_mobilenet_figures_on_small():
    got = grouped_figures(SMALL_CF, "mobilenet_v2", batch=1)
    dw = got["kinds"]["depthwise"]
    assert {p: dw[p]["layers"] for p in dw} == {"forward": 17, "loss": 17, "gradient": 17}
    assert got["kinds"]["dense"]["forward"]["layers"] == 35
    assert "grouped" not in got["kinds"]
    # the first depthwise layer (32 channels, 112 x 112, 3 x 3) a group at a time
    one = layer_cycles(SMALL_CF, "gradient", ConvLayer.conv(1, 1, 112, 112, 1, 3, 3, 1, 1))
    assert dw["gradient"]["one_group_cycles"] >= 32 * one.cycles
    for kind in got["kinds"].values():
        for k in kind.values():
            assert k["cycles"] >= k["roofline_cycles"] > 0 and k["macs"] > 0
    assert got["step"]["cycles"] > sum(k["cycles"] for kind in got["kinds"].values()
                                       for k in kind.values())
    md = _markdown(SMALL_CF, [got])
    assert "| mobilenet_v2 | depthwise | loss | 17 |" in md


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
