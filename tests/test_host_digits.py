"""The digits CNN in integer arithmetic: the layer shapes are the network file's, the
integer softmax and the weight operands by hand, the numpy model learns, and the simulated
accelerator gives the same weights as the numpy model step after step (bit-exact)."""

import numpy as np
import pytest

from bpsa.config import load_config
from bpsa.host import digits
from bpsa.spec.network import load_network

CFG = load_config("ecp5_train")


def test_layers_are_the_network_files():
    net = {lay.name: lay for lay in load_network("digits")}
    for name, (k, c, r, s) in digits.LAYERS.items():
        lay = net[name]
        assert (lay.k, lay.c, lay.r, lay.s) == (k, c, r, s)


def test_softmax_grad_by_hand():
    # equal logits: p = 1024 // 10 = 102 each in Q10
    dz, p = digits.softmax_grad(np.zeros((1, 10), dtype=np.int64), np.array([3]))
    assert p.tolist() == [[102] * 10]
    assert dz[0, 3] == 102 - 1024 and dz[0, 0] == 102
    # one logit 8 (Q8 2048, Q20 2048 << 12) above the rest: e = 65536 vs 65536 exp(-8)
    logits = np.zeros((1, 10), dtype=np.int64)
    logits[0, 1] = 2048 << 12
    _, p = digits.softmax_grad(logits, np.array([1]))
    small = round(65536 * np.exp(-8))
    assert p[0, 1] == (65536 << 10) // (65536 + 9 * small)


def test_operands_round_and_saturate():
    master = {"w": np.array([0, 2047, 2048, -2048, -2049, 40000 << 12, -(40000 << 12)])}
    assert digits.operands(master)["w"].tolist() == [0, 0, 1, 0, -1, 32767, -32768]


def test_model_learns_and_refuses_narrow_operands():
    _, history = digits.train(digits.ModelOps(CFG), epochs=3)
    assert history[-1]["test_accuracy"] > 0.8       # measured: 0.856 after 3 epochs
    assert history[-1]["loss"] < history[0]["loss"]
    with pytest.raises(ValueError, match="signed 16-bit operands"):
        digits.ModelOps(load_config("small"))
    with pytest.raises(ValueError, match="batch must be a power of two"):
        master = digits.init_master()
        x, y, _, _ = digits.load_digits_split()
        digits.train_step(digits.ModelOps(CFG), master, x[:6], y[:6], 2)


@pytest.mark.verilator
@pytest.mark.long       # make test keeps the same check on the RTL: test_torch_offload's
def test_accelerator_and_model_train_alike():   # RTL and model backends, int8 and bf16
    import bpsa
    x, y, _, _ = digits.load_digits_split()
    on_rtl, in_numpy = digits.init_master(), digits.init_master()
    with bpsa.simulate(CFG) as acc:
        ops = digits.AcceleratorOps(acc, CFG)
        for step in range(3):
            b = slice(8 * step, 8 * step + 8)
            start = {k: v.copy() for k, v in on_rtl.items()}
            assert digits.train_step(ops, on_rtl, x[b], y[b], 2) == \
                digits.train_step(digits.ModelOps(CFG), in_numpy, x[b], y[b], 2)
            for k in on_rtl:
                assert np.array_equal(on_rtl[k], in_numpy[k]), (step, k)
                assert not np.array_equal(on_rtl[k], start[k]), (step, k)
        assert ops.cycles > 0
