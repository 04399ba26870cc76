"""``bpsa sweep``: the grid's points and its refusals, the Pareto front, and a sweep on a
local Dask cluster that writes rows as they finish and resumes where a crash left it."""

import csv

import pytest

from bpsa.config import load_config
from bpsa.models.energy import rows_energy
from bpsa.models.network_perf import network_step
from bpsa.spec.network import load_network
from bpsa.tools import sweep


def test_grid_points_and_refusals():
    base = load_config("paper16")
    points = sweep.parse_grid(["rows=4,8", "cols=8", "dataflows=os+ws,os"], base)
    assert [label for label, _ in points] == [
        "rows=4 cols=8 dataflows=os+ws", "rows=4 cols=8 dataflows=os",
        "rows=8 cols=8 dataflows=os+ws", "rows=8 cols=8 dataflows=os"]
    assert points[0][1] == {"rows": 4, "cols": 8, "dataflows": ("os", "ws")}
    for items, needle in [
        (["rows=8,99"], "grid point rows=99: rows must be in [1, 64], not 99"),
        (["buf_a_depth=1000"], "buf_a_depth must be a power of two in [16, 65536]"),
        (["colz=8"], "'colz' is not a configuration field"),
        (["rows"], "write FIELD=V1,V2"),
        (["rows="], "no values"),
        (["rows=x"], "rows='x': not an integer"),
        (["rows=4", "rows=8"], "rows is given twice"),
        ([], "give at least one grid item"),
    ]:
        with pytest.raises(sweep.GridError, match=needle.replace("[", r"\[").replace("]", r"\]")):
            sweep.parse_grid(items, base)


def test_pareto_front():
    rows = [{"label": "a", "area": 1, "seconds": 9, "layers_run": 5},
            {"label": "b", "area": 2, "seconds": 5, "layers_run": 5},
            {"label": "c", "area": 3, "seconds": 6, "layers_run": 5},   # dominated by b
            {"label": "d", "area": 4, "seconds": 1, "layers_run": 5},
            {"label": "e", "area": 0, "seconds": 0, "layers_run": 4}]   # runs fewer layers
    assert [r["label"] for r in sweep.pareto(rows)] == ["a", "b", "d"]


def test_sweep_on_a_local_cluster_resumes(tmp_path):
    base = load_config("small")
    net = load_network("digits")
    out = tmp_path / "sweep.csv"
    points = sweep.parse_grid(["rows=2,4", "cols=4"], base)
    rows, failed = sweep.run_sweep(base, points, net, out, batch=2, workers=1,
                                   progress=False)
    assert not failed and sorted(r["label"] for r in rows) == ["rows=2 cols=4", "rows=4 cols=4"]
    for r in rows:      # each row is the model's step of that configuration, and its energy
        cfg = base.replace(rows=int(r["rows"]), cols=4)
        step = network_step(cfg, net, batch=2)
        assert r["cycles"] == step.totals["cycles"]
        assert float(r["energy_uj"]) == pytest.approx(
            rows_energy(cfg, step.rows)["pj"] / 1e6, abs=1e-3)
        assert float(r["energy_uj"]) > 1
    # a crash after the first row: the rerun evaluates only the missing points
    lines = out.read_text().splitlines()
    out.write_text("\n".join(lines[:2]) + "\n")
    more = sweep.parse_grid(["rows=2,4,8", "cols=4"], base)
    rows, failed = sweep.run_sweep(base, more, net, out, batch=2, workers=1, progress=False)
    assert not failed
    text = out.read_text().splitlines()
    assert text[:2] == lines[:2] and len(text) == 4
    with out.open() as f:
        assert sorted(r["rows"] for r in csv.DictReader(f)) == ["2", "4", "8"]
    # a CSV of another grid is not appended to
    with pytest.raises(sweep.GridError, match="written by a different grid"):
        sweep.run_sweep(base, sweep.parse_grid(["cols=2,4"], base), net, out, workers=1,
                        progress=False)


def test_unreachable_scheduler():
    with pytest.raises(sweep.GridError, match="cannot reach the Dask scheduler at "
                                               "'tcp://127.0.0.1:9'"):
        sweep.connect("tcp://127.0.0.1:9", 1, timeout="2s")


def test_the_makefiles_default_grid_runs_every_point():
    """``make sweep``'s default grid (its fields and values, read from the Makefile) on its
    default base configuration: every point evaluates (the cycle model on the digits network
    for speed), with what depends on the swept fields derived again: ``pool_lanes`` follows
    ``cols`` (was: every point whose cols is not 16 failed)."""
    import re
    from pathlib import Path
    make = (Path(__file__).resolve().parent.parent / "Makefile").read_text()
    grid = re.search(r"^GRID\s*\?=\s*(.+)$", make, flags=re.M).group(1).split()
    base = load_config(re.search(r"^PERF_CONFIG\s*\?=\s*(\S+)", make, flags=re.M).group(1))
    assert base.pool_lanes == base.cols > 1
    points = sweep.parse_grid(grid, base)
    assert len(points) == 27 and {f for _, ch in points for f in ch} == {
        "rows", "cols", "buf_a_depth"}
    net = load_network("digits")
    base_dict = {k: v for k, v in base.to_dict().items() if k != "name"}
    for label, changes in points:
        row = sweep.evaluate(base_dict, label, changes, net, 1, ("forward", "loss",
                                                                  "gradient"), 100.0)
        assert row["label"] == label and row["cycles"] > 0, row
        assert sweep.point_config(base, changes).pool_lanes == changes["cols"]
