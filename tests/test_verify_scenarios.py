"""Whole-accelerator scenarios (bpsa.verify.scenarios) on the native transport."""

import pytest

from bpsa.config import load_config

SMALL = load_config("small")
#: Forward only: the loss and gradient phases are not generated.
FORWARD_ONLY = SMALL.replace(dataflows=("os",), buf_a_depth=64, buf_b_depth=64,
                             buf_p_depth=64, name="small_forward_only")


@pytest.mark.verilator
@pytest.mark.parametrize("config", [SMALL, pytest.param(FORWARD_ONLY, marks=pytest.mark.long)],
                         ids=lambda c: c.name)
def test_illegal_descriptors_verilator(config):
    """Every refusal answered with its code, nothing read or written, no hang; good layers of
    every generated phase still right afterwards; phases not generated refused (PHASE)
    (:func:`bpsa.verify.scenarios.illegal_descriptors` on the native transport)."""
    from bpsa.verify import scenarios
    from bpsa.sim.native import JOB_MEMORY, run_with_driver

    async def body(drv, t):
        await scenarios.illegal_descriptors(config, drv, lambda: t.cycles, JOB_MEMORY)
        return t.cycles

    assert run_with_driver(config, body) > 0
