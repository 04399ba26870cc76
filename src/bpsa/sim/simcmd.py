"""``bpsa sim``: one random problem through the generated RTL under Verilator, checked against
numpy, with a summary of cycles, counters and utilization."""

import json
import tempfile
from pathlib import Path

from bpsa.sim.runner import run_cocotb

__all__ = ["run_gemm"]


def run_gemm(config, flow, dims, *, seed=1, sgd_shift=None, stall=0.0, progress=True):
    """Run a random GEMM (or, for ``interleaved``, an FC backward pass with dims (O, Bt, I))
    on the array generated for ``config``. Returns the summary dict; ``match`` tells whether
    every result equals numpy (floating point: the golden model). ``stall`` (``os`` only): the
    probability of an idle cycle before each slot (a stalling feeder). ``progress``: a first
    build says so on standard error."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "summary.json"
        env = {"BPSA_FLOW": flow, "BPSA_DIMS": ",".join(str(d) for d in dims),
               "BPSA_SEED": str(seed), "BPSA_SUMMARY": str(out),
               "BPSA_SGD": "" if sgd_shift is None else str(sgd_shift),
               "BPSA_STALL": str(stall)}
        tag = f"{flow}_{'x'.join(str(d) for d in dims)}_{seed}_{sgd_shift}_{stall}"
        try:
            run_cocotb(config, "bpsa.verify.tb_array", top="array", extra_env=env, tag=tag,
                       progress=progress)
        except AssertionError:
            if not out.exists():
                raise
        return json.loads(out.read_text())
