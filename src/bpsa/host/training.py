"""Integer SGD training of a two-layer CNN, on the accelerator and in numpy alone.

Network (NCHW, integer tensors in the operand range)::

    y1 = conv(x, W1, stride 1, pad 1)          accelerator: forward
    a1 = clip(relu(y1) >> A_SHIFT, 0, hi)      host
    y2 = conv(a1, W2, stride 2, pad 1)         accelerator: forward
    e2 = clip((y2 >> E_SHIFT) - target)        host: dL/dy2 of 0.5 * sum((y2' - target)^2)
    dW2 = conv_weight_grad(a1, e2)             accelerator: gradient
    da1 = conv_input_grad(e2, W2)              accelerator: loss
    e1 = clip((da1 >> D_SHIFT) * (y1 > 0))     host: ReLU backward
    dW1 = conv_weight_grad(x, e1)              accelerator: gradient
    W  <- clip(W - (dW >> LR_SHIFT))           host

:func:`reference_step` computes the same step with :mod:`bpsa.models.golden` only; :func:`train`
runs both and checks that the weights agree after every step.
"""

import numpy as np

from bpsa.models import golden
from bpsa.spec.numeric import wrap_array

__all__ = ["A_SHIFT", "D_SHIFT", "E_SHIFT", "LR_SHIFT", "initial", "reference_step", "train"]

A_SHIFT, E_SHIFT, D_SHIFT, LR_SHIFT = 3, 6, 3, 10


def _range(cfg):
    if cfg.operand_signed:
        return -(1 << (cfg.operand_width - 1)) + 1, (1 << (cfg.operand_width - 1)) - 1
    return 0, (1 << cfg.operand_width) - 1


def initial(cfg, seed=3, batch=2, size=8):
    """Input, target and initial weights (small values, so the first steps do not saturate)."""
    rng = np.random.default_rng(seed)
    lo, hi = _range(cfg)
    small = min(hi, 15)
    x = rng.integers(max(lo, -small), small + 1, (batch, 2, size, size))
    w1 = rng.integers(max(lo, -7), 8, (4, 2, 3, 3))
    w2 = rng.integers(max(lo, -7), 8, (3, 4, 3, 3))
    out = (size + 2 - 3) // 2 + 1
    target = rng.integers(max(lo, -small), small + 1, (batch, 3, out, out))
    return x, target, w1, w2


def _host(cfg):
    lo, hi = _range(cfg)

    def clip(t):
        return np.clip(t, lo, hi).astype(np.int64)

    return clip, hi


async def _step(conv, cfg, x, target, w1, w2):
    """One step with the convolutions of ``conv`` (an object with ``forward``, ``loss``,
    ``gradient`` coroutines or functions); returns the new weights and the step's tensors."""
    clip, hi = _host(cfg)
    y1 = await conv.forward(x, w1, 1, 1)
    a1 = np.clip(np.maximum(y1, 0) >> A_SHIFT, 0, hi).astype(np.int64)
    y2 = await conv.forward(a1, w2, 2, 1)
    e2 = clip((y2 >> E_SHIFT) - target)
    dw2 = await conv.gradient(a1, e2, (3, 3), 2, 1)
    da1 = await conv.loss(e2, w2, a1.shape[2:], 2, 1)
    e1 = clip((da1 >> D_SHIFT) * (y1 > 0))
    dw1 = await conv.gradient(x, e1, (3, 3), 1, 1)
    return clip(w1 - (dw1 >> LR_SHIFT)), clip(w2 - (dw2 >> LR_SHIFT)), {
        "loss": int(np.sum(e2.astype(np.int64) ** 2)), "dw1_nonzero": int(np.count_nonzero(dw1)),
        "dw2_nonzero": int(np.count_nonzero(dw2))}


class _Golden:
    """The convolutions of :mod:`bpsa.models.golden`, with the driver's argument order."""

    def __init__(self, cfg):
        self.bits = cfg.acc_width

    def _wrap(self, t):
        return wrap_array(t, self.bits)

    async def forward(self, x, w, stride, pad):
        return self._wrap(golden.conv2d(x, w, stride, pad))

    async def loss(self, dy, w, input_hw, stride, pad):
        return self._wrap(golden.conv2d_input_grad(dy, w, tuple(input_hw), stride, pad))

    async def gradient(self, x, dy, kernel_hw, stride, pad):
        return self._wrap(golden.conv2d_weight_grad(x, dy, kernel_hw, stride, pad))


async def reference_step(cfg, x, target, w1, w2):
    """One step in numpy alone: ``(w1, w2, info)``."""
    return await _step(_Golden(cfg), cfg, x, target, w1, w2)


async def train(driver, cfg, steps=3, seed=3):
    """``steps`` SGD steps on the accelerator behind ``driver`` and in numpy; raises
    :exc:`AssertionError` when the weights differ after any step or a step changes nothing.
    Returns a list of per-step dicts (loss, non-zero gradients, accelerator cycles)."""
    x, target, w1, w2 = initial(cfg, seed)
    r1, r2 = w1.copy(), w2.copy()
    log = []
    for step in range(steps):
        cycles = {}

        class Accel:
            async def forward(self, x_, w_, s, p):
                out = await driver.forward(x_, w_, s, p)
                cycles.setdefault("forward", 0)
                cycles["forward"] += driver.counters["busy_cycles"]
                return out

            async def loss(self, dy, w_, hw, s, p):
                out = await driver.loss(dy, w_, hw, s, p)
                cycles["loss"] = driver.counters["busy_cycles"]
                return out

            async def gradient(self, x_, dy, k, s, p):
                out = await driver.gradient(x_, dy, k, s, p)
                cycles.setdefault("gradient", 0)
                cycles["gradient"] += driver.counters["busy_cycles"]
                return out

        n1, n2, info = await _step(Accel(), cfg, x, target, w1, w2)
        m1, m2, rinfo = await reference_step(cfg, x, target, r1, r2)
        assert np.array_equal(n1, m1) and np.array_equal(n2, m2), \
            f"step {step}: weights differ from the numpy-only loop"
        assert info == rinfo, f"step {step}: {info} != {rinfo}"
        assert not (np.array_equal(n1, w1) and np.array_equal(n2, w2)), \
            f"step {step}: the weights did not change"
        w1, w2, r1, r2 = n1, n2, m1, m2
        log.append(dict(info, step=step, cycles=cycles))
    return log
