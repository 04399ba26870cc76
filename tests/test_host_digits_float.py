"""The digits CNN in floating point (bpsa.host.digits_float): the host's pooling by hand, the
model learns, and the simulated accelerator gives the same fp32 master weights as the model
step after step (bit-exact)."""

import numpy as np
import pytest

from bpsa.config import load_config
from bpsa.host import digits, digits_float

CFG = load_config("small_bf16")


def test_max_pool_and_its_backward_route_to_the_first_maximum():
    x = np.array([[[[1, 3, 0, 0], [3, 2, 0, -1], [5, 5, 1, 1], [5, 4, 1, 2]]]], np.float32)
    p, first = digits_float._max_pool(x)
    assert p.tolist() == [[[[3, 0], [5, 2]]]]
    dx = digits_float._max_pool_backward(np.array([[[[1, 2], [3, 4]]]], np.float32), first,
                                         x.shape)
    assert dx.tolist() == [[[[0, 1, 2, 0], [0, 0, 0, 0], [3, 0, 0, 0], [0, 0, 0, 4]]]]


def test_model_learns_and_refuses_integer_configurations():
    ops = digits_float.FloatModelOps(CFG)
    _, history = digits_float.train(ops, epochs=2, batch=32)
    assert history[1]["test_accuracy"] > 0.6 and history[1]["loss"] < history[0]["loss"]
    with pytest.raises(ValueError, match="is not floating point"):
        digits_float.FloatModelOps(load_config("ecp5_train"))


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
