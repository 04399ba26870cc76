"""The simulation-speed bench: one build's figures, checked against the golden model."""

import pytest

from bpsa.config import load_config
from bpsa.spec.layer import parse_layer


@pytest.mark.verilator
def test_measure_reports_one_build():
    from bpsa.tools.bench_sim import measure
    from bpsa.sim.runner import sim_build_root
    from bpsa.sim.native import default_build
    layer = parse_layer("C=3,H=10,K=4,R=3,stride=2,pad=1")
    # the default build (make test's: -O1), which the other tests build anyway
    opt, _ = default_build(load_config("small"))
    row = measure(load_config("small"), opt, 1, layer, "loss", build_root=sim_build_root())
    assert row["opt"] == opt and row["threads"] == 1 and row["build_seconds"] >= 0
    assert row["cycles"] > 100 and row["cycles_per_second"] > 0
    # run_seconds is rounded to the millisecond
    assert abs(row["cycles_per_second"] - row["cycles"] / row["run_seconds"]) \
        < 0.1 * row["cycles_per_second"]


def test_page_a_row_a_build(tmp_path):
    """``--page``: the results page of made-up builds, its header (command, commit, date) and
    a row a build; rows from earlier measurements carry their own commit and date."""
    import json
    from bpsa.tools.bench_sim import write
    from bpsa.tools.results import git_commit, today
    data = {"layer": "C=16,H=32", "phase": "forward", "builds": [
        {"config": "small", "opt": "-O2", "threads": 1, "build_seconds": 42.4,
         "cycles": 161560, "run_seconds": 0.4, "cycles_per_second": 404598},
        {"config": "paper16", "opt": "-O0", "threads": 2, "build_seconds": 177.0,
         "cycles": 23749, "run_seconds": 3.2, "cycles_per_second": 7378}]}
    page = write(tmp_path / "s.md", data, "make bench-sim")
    lines = page.read_text().splitlines()
    assert lines[:3] == ["# Simulation speed", "",
                         f"Written by `make bench-sim` at commit {git_commit()} on {today()}."]
    assert "| `small` | `-O2`, 1 thread | 42 | 161,560 | 404,598 |" in lines
    assert "| `paper16` | `-O0`, 2 threads | 177 | 23,749 | 7,378 |" in lines
    assert json.loads(page.with_suffix(".json").read_text())["builds"] == data["builds"]
    data["builds"][1].update(commit="0f9bb8f", date="2026-11-24")
    lines = write(tmp_path / "s.md", data, "x", commit="25f501b", date="2026-11-26") \
        .read_text().splitlines()
    assert lines[2] == "Written by `x` at commit 25f501b on 2026-11-26."
    assert "| `paper16` | `-O0`, 2 threads | 177 | 23,749 | 7,378 | 0f9bb8f, 2026-11-24 |" \
        in lines
