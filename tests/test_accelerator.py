"""The accelerator top: elaboration checks, and the generated Verilog under Verilator driven
through the host driver (sim.tb_accelerator) against the golden model."""

import json

import pytest

from hw.accelerator import Accelerator
from hw.config import Config, load_config

SMALL = load_config("small")


def test_refuses_config_without_engines():
    cfg = Config(rows=2, cols=2, dataflows=("ws",), name="ws_only")
    with pytest.raises(ValueError, match="'os' dataflow .* or the 'is' dataflow"):
        Accelerator(cfg)


def test_refuses_non_config():
    with pytest.raises(TypeError, match="config must be a Config"):
        Accelerator({"rows": 4})


@pytest.mark.cocotb
def test_default_jobs_verilator(tmp_path):
    from sim.runner import run_cocotb
    out = tmp_path / "res.json"
    run_cocotb(SMALL, "sim.tb_accelerator", top="accelerator", testcase="layers",
               extra_env={"BPSA_RESULTS": str(out)}, tag="default")
    res = json.loads(out.read_text())
    assert [r["phase"] for r in res] == ["forward", "loss", "gradient"]
    assert all(r["match"] for r in res)
