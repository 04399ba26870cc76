"""The convolution phases in floating point, in the accumulation order of the accelerator's
front ends (``docs/floating_point.md``, "Order").

Every output is one output-stationary context (:func:`bpsa.models.floating.os_output`): its
slots are the front end's K order, a slot's product folded into partial ``k mod 5``, the five
partials reduced as ``((p0 + p1) + (p2 + p3)) + p4``. The operand sequences come from the
explicit lowerings of :mod:`bpsa.models.golden` (index maps only: no arithmetic of the integer
model is used); the arithmetic is the contract's (:mod:`bpsa.models.floating`).
"""

import numpy as np

from bpsa.models import floating, golden

__all__ = ["conv2d"]


def conv2d(x, w, fmt, stride=1, padding=0, dilation=1):
    """The forward convolution of ``fmt`` encodings ``x`` (N x C x H x W) and ``w`` (K x C x R
    x S) as the data feeder runs it: each output's slots in the order ``(c, r, q)``, every
    kernel tap one slot, a tap in the padding a zero slot (skipped, but counted). Returns the
    fp32 encodings of Y (N x K x OH x OW, ``uint32``)."""
    low = golden.lower_forward(np.asarray(x, dtype=np.int64), np.asarray(w, dtype=np.int64),
                               stride, padding, dilation)
    return low.result(floating.gemm_os(low.a, low.b, fmt)).astype(np.uint32)
