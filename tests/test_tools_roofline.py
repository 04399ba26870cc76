"""The roofline table: a step's figures add up from the network's rows (cycles, roofline and
bytes summed over the rows that ran, the ratios of those sums), and both files are written,
stamped with the command, the commit and the date."""

import json

from bpsa.config import load_config
from bpsa.models.network_perf import network_step
from bpsa.spec.network import load_network
from bpsa.tools.results import git_commit, today
from bpsa.tools.roofline import TOP, network_roofline, roofline_report


def test_figures_add_up_from_the_rows():
    config = load_config("small_cf")
    got = network_roofline(config, "digits", batch=2)
    step = network_step(config, load_network("digits"), batch=2, frontend="best")
    ran = [r for r in step.rows if r["status"] == "run"]
    assert got["cycles"] == sum(r["cycles"] for r in ran)
    assert got["roofline_cycles"] == sum(r["roofline_cycles"] for r in ran)
    assert got["over_roofline"] == got["cycles"] / got["roofline_cycles"] >= 1
    assert got["dma_bytes"] == sum(r["dma_read_bytes"] + r["dma_write_bytes"] for r in ran)
    assert got["over_min_bytes"] >= 1
    forward = [r for r in ran if r["phase"] == "forward"]
    assert got["phases"]["forward"]["cycles"] == sum(r["cycles"] for r in forward)
    assert got["refused"] == []
    # the cycles over the roofline, split three ways, add up per phase and per layer
    for phase, p in got["phases"].items():
        assert p["overlap"] + p["compute"] + p["dma"] == p["cycles"] - p["roofline_cycles"]
        assert min(p["overlap"], p["compute"], p["dma"]) >= 0, (phase, p)
    overs = sorted((r["cycles"] - r["roofline_cycles"] for r in ran), reverse=True)
    assert [t["over"] for t in got["top"]] == overs[:len(got["top"])]
    assert len(got["top"]) == min(TOP, len(ran))
    for t in got["top"]:
        assert t["overlap"] + t["compute"] + t["dma"] == t["over"]


def test_report_writes_both_files(tmp_path):
    results = roofline_report(tmp_path, config_name="small_cf", networks=("digits",),
                              widths=(64, 128), batch=1, jobs=1)
    assert [r["bus_bits"] for r in results] == [64, 128]
    # a wider bus never makes the compulsory traffic's roofline longer
    assert results[1]["roofline_cycles"] <= results[0]["roofline_cycles"]
    data = json.loads((tmp_path / "roofline.json").read_text())
    assert data["results"] == results
    md = (tmp_path / "roofline.md").read_text()
    assert md.count("| digits | 64 |") == 1 and md.count("| digits | 128 |") == 1
    assert "## Where the cycles over the roofline go (64-bit bus)" in md
    assert md.count("| digits | forward |") == 1       # the phases at the first width only
    # the small planes' stride-2 layers: the model's figures, a row a plane and width
    from bpsa.config import load_config
    from bpsa.models.perf import layer_cycles
    from bpsa.spec.layer import ConvLayer
    planes = data["small_planes"]
    assert len(planes) == 2 * 9 and "## Stride-2 layers on small planes" in md
    first = planes[0]
    m = layer_cycles(load_config("small_cf"), first["phase"],
                     ConvLayer.conv(1, 64, 7, 7, 64, 3, 3, stride=2, pad=1))
    assert (first["plane"], first["channels"], first["cycles"]) == (7, 64, m.cycles)
    assert f"| 7x7 | 64 | {m.utilization:.2f} | {m.over_roofline:.2f} |" in md
    # the page's header and the JSON name the command, the commit and the date
    command = (f"python -m bpsa.tools.roofline --config small_cf --batch 1 --widths 64,128 "
               f"--networks digits -o {tmp_path}")
    stamp = f"at commit {git_commit()} on {today()}."
    assert md.startswith("# Training steps against their roofline (small_cf, batch 1)\n\n"
                         f"Written by `{command}` {stamp}\n")
    assert (data["command"], data["commit"], data["date"]) == (command, git_commit(), today())
