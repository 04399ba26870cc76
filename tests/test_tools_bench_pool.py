"""The pooling benchmark's model table: every layer of ``workloads/pool_layers.csv`` (the
shared workload file) gets figures or a reason on ``paper16``, its scaled shapes keep the
window, and the plot is written. The RTL half runs in ``make bench-pool``; the pooling unit's
RTL is checked in tests/test_gateware_accelerator.py."""

import json

from bpsa.config import load_config
from bpsa.tools import bench_pool
from bpsa.tools.results import git_commit, today


def test_model_rows_cover_the_workload(tmp_path, capsys):
    rows = bench_pool.load_pool_layers()
    assert len(rows) == 14 and {r["kind"] for r in rows} == {"max", "avg", "global_avg"}
    model = bench_pool.model_rows(load_config("paper16"), rows)
    assert [m["layer"] for m in model] == [f"{r['network']}.{r['layer']}" for r in rows]
    for m in model:
        assert "refused" not in m, m
        assert m["fwd_cycles"] > 0 and m["bwd_cycles"] > 0
        assert m["fwd_bound"] in ("pool", "dma", "P", "set-up")
    small = bench_pool.model_rows(load_config("small"), rows)
    assert any("refused" in m for m in small)        # a 1,024-word buffer is too small
    for row in rows:
        sc = bench_pool.scaled(row, 4, 24)
        assert sc["C"] <= 4 and max(sc["H"], sc["W"]) <= max(24, row["R"])
        if row["kind"] != "global_avg":
            assert (sc["R"], sc["S"], sc["stride"], sc["pad"]) == (row["R"], row["S"],
                                                                  row["stride"], row["pad"])
    page = tmp_path / "bench_pool.md"
    argv = ["--no-rtl", "--plot", str(tmp_path / "p.png"), "--page", str(page)]
    assert bench_pool.main(argv) == 0
    assert (tmp_path / "p.png").stat().st_size > 1000
    assert "resnet50.maxpool" in capsys.readouterr().out
    # the results page: header (command, commit, date), the table, the JSON twin
    lines = page.read_text().splitlines()
    assert lines[:3] == ["# Pooling layers", "", "Written by `python -m bpsa.tools.bench_pool "
                         f"{' '.join(argv)}` at commit {git_commit()} on {today()}."]
    assert any(line.startswith("| resnet50.maxpool |") for line in lines)
    data = json.loads(page.with_suffix(".json").read_text())
    assert data["commit"] == git_commit() and data["rtl"] == [] and data["model"]
