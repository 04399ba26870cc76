"""Layer jobs (bpsa.sim.jobs): the default jobs the cocotb accelerator testbench and the
scenarios run."""

from bpsa.sim.jobs import DEFAULT_JOBS


def test_default_jobs_cover_every_phase():
    assert [j["phase"] for j in DEFAULT_JOBS] == ["forward", "loss", "gradient"]
    assert all(j["layer"]["stride_h"] == 2 and j["layer"]["pad_h"] == 1 for j in DEFAULT_JOBS)
