"""The digits CNN in floating point (bpsa.host.digits_float): the model learns, and the
simulated accelerator (convolutions and the pooling unit) gives the same fp32 master weights as
the model step after step (bit-exact)."""

import numpy as np
import pytest

from bpsa.config import load_config
from bpsa.host import digits, digits_float

CFG = load_config("small_bf16")


def test_model_learns_and_refuses_integer_configurations():
    ops = digits_float.FloatModelOps(CFG)
    _, history = digits_float.train(ops, epochs=2, batch=32)
    assert history[1]["test_accuracy"] > 0.6 and history[1]["loss"] < history[0]["loss"]
    with pytest.raises(ValueError, match="is not floating point"):
        digits_float.FloatModelOps(load_config("ecp5_train"))


@pytest.mark.long               # the bf16 accelerator's build: make test-long
@pytest.mark.verilator
def test_accelerator_and_model_train_alike():
    import bpsa
    xtr, ytr, _, _ = digits.load_digits_split()
    x, y = digits_float._images(xtr[:24]), ytr[:24]
    on_rtl, in_numpy = digits_float.init_master(), digits_float.init_master()
    with bpsa.simulate(CFG, progress=False) as acc:
        ops = digits_float.FloatAcceleratorOps(acc, CFG)
        model = digits_float.FloatModelOps(CFG)
        for step in range(3):
            b = slice(8 * step, 8 * step + 8)
            start = {k: v.copy() for k, v in on_rtl.items()}
            assert digits_float.train_step(ops, on_rtl, x[b], y[b], 0.25) == \
                digits_float.train_step(model, in_numpy, x[b], y[b], 0.25)
            for k in on_rtl:
                assert np.array_equal(on_rtl[k].view(np.uint32), in_numpy[k].view(np.uint32)), \
                    (step, k)
                assert not np.array_equal(on_rtl[k], start[k]), (step, k)
    assert ops.cycles > 0
