"""The simulation-speed bench: one build's figures, checked against the golden model."""

import pytest

from bpsa.config import load_config
from bpsa.spec.layer import parse_layer


@pytest.mark.verilator
def test_measure_reports_one_build():
    from bpsa.tools.bench_sim import measure
    from bpsa.sim.runner import sim_build_root
    layer = parse_layer("C=3,H=10,K=4,R=3,stride=2,pad=1")
    row = measure(load_config("small"), "-O2", 1, layer, "loss", build_root=sim_build_root())
    assert row["opt"] == "-O2" and row["threads"] == 1 and row["build_seconds"] >= 0
    assert row["cycles"] > 100 and row["cycles_per_second"] > 0
    # run_seconds is rounded to the millisecond
    assert abs(row["cycles_per_second"] - row["cycles"] / row["run_seconds"]) \
        < 0.1 * row["cycles_per_second"]
