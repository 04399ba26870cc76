"""The loss as stride-1 forward convolutions of its stride classes
(:mod:`bpsa.plan.loss_classes`), with :func:`bpsa.models.golden.conv2d` standing in for the
hardware's forward, against the golden loss :func:`bpsa.models.golden.conv2d_input_grad` (a
scatter over the taps, no class split): random layers with strides 1-4, dilations 1-3,
padding up to the dilated kernel's reach, rectangular kernels, kernels smaller than the
stride (classes no tap reaches), batch 1-2."""

import numpy as np
import pytest

from bpsa.plan.loss_classes import axis_classes, loss_by_classes
from bpsa.models.golden import conv2d, conv2d_input_grad


def _out(size, k, s, p, d):
    return (size + 2 * p - d * (k - 1) - 1) // s + 1


@pytest.mark.parametrize("seed", range(60))
def test_loss_by_classes_equals_golden(seed):
    rng = np.random.default_rng(seed)
    while True:
        r, s = int(rng.integers(1, 5)), int(rng.integers(1, 5))
        st = (int(rng.integers(1, 5)), int(rng.integers(1, 5)))
        dil = (int(rng.integers(1, 4)), int(rng.integers(1, 4)))
        pad = (int(rng.integers(0, dil[0] * (r - 1) + 1)), int(rng.integers(0, dil[1] * (s - 1) + 1)))
        h, w = int(rng.integers(1, 14)), int(rng.integers(1, 14))
        if _out(h, r, st[0], pad[0], dil[0]) >= 1 and _out(w, s, st[1], pad[1], dil[1]) >= 1:
            break
    n, c, k = int(rng.integers(1, 3)), int(rng.integers(1, 5)), int(rng.integers(1, 5))
    oh, ow = _out(h, r, st[0], pad[0], dil[0]), _out(w, s, st[1], pad[1], dil[1])
    dy = rng.integers(-50, 50, (n, k, oh, ow))
    wt = rng.integers(-50, 50, (k, c, r, s))
    got, jobs = loss_by_classes(dy, wt, (h, w), st, pad, dil, conv2d)
    np.testing.assert_array_equal(got, conv2d_input_grad(dy, wt, (h, w), st, pad, dil))
    # every call is a stride-1 forward; the classes' taps are the kernel's, each once
    assert len(jobs) <= st[0] * st[1]
    assert sum(j.w.shape[2] * j.w.shape[3] for j in jobs) <= r * s
    for axis, size, out, kk, ss, pp, dd in ((0, h, oh, r, st[0], pad[0], dil[0]),
                                            (1, w, ow, s, st[1], pad[1], dil[1])):
        cl = axis_classes(size, out, kk, ss, pp, dd)
        taps = sorted(t for x in cl for t in x.taps)
        assert len(taps) == len(set(taps)) and set(taps) <= set(range(kk))


def test_axis_classes_of_a_stride_2_layer():
    """3 x 3 / 2, pad 1 on 8 rows (4 dY rows): class 0 (even rows) takes tap 1 alone, class 1
    taps 2 and 0 (offsets 0 and 1), no output cropped."""
    a0, a1 = axis_classes(8, 4, 3, 2, 1, 1)
    assert (a0.taps, a0.count, a0.lo, a0.pad, a0.crop) == ((1,), 4, 0, 0, 0)
    assert (a1.taps, a1.dil, a1.count, a1.lo, a1.pad, a1.extra) == ((2, 0), 1, 4, 0, 1, 1)
