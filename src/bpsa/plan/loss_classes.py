"""The loss (dX) as stride-1 forward convolutions, one per stride class: how the channel-first
front end runs the zero-free loss.

The zero-free loss splits dX by ``(y mod s_h, x mod s_w) = (a, b)``: in class ``a`` (one
axis), output ``y = Y s + a`` receives ``dY[Y + e_r] W[r]`` from exactly the taps ``r`` with
``(a + p - r d) mod s = 0``, at ``e_r = (a + p - r d) / s``. Those offsets are evenly spaced
(``D = d s' / s``, ``s' = s / gcd(s, d)``), so the class is a forward convolution of dY with
stride 1, dilation ``D``, the class's taps in increasing ``e`` (the kernel flipped) and W's
channels transposed (``K`` in, ``C`` out): no inserted zero is read, sent or multiplied, and
every dX element comes from one class. The forward's padding is symmetric, so a class whose
dY window needs more padding on one side than the other computes a few more outputs and
:func:`loss_by_classes` crops them (counted in :attr:`AxisClass.extra`).

:func:`axis_classes` is the per-axis plan, :func:`loss_by_classes` the whole loss through any
forward convolution (the driver's channel-first forward, or :func:`bpsa.models.golden.conv2d`
in the tests).
"""

from dataclasses import dataclass
from math import gcd

import numpy as np

__all__ = ["AxisClass", "ClassJob", "axis_classes", "class_jobs", "class_layers",
           "loss_by_classes", "place"]


@dataclass(frozen=True)
class AxisClass:
    """Class ``a`` of one axis: its outputs ``y = Y s + a`` (``count`` of them), the kernel
    taps ``taps`` (indices into W's axis, in the forward convolution's order), its dilation
    ``dil``, the dY slice ``[lo, out)`` it reads, the forward's symmetric ``pad`` and the
    leading outputs to crop (``crop``); ``extra``: outputs computed and cropped."""
    a: int
    count: int
    taps: tuple
    dil: int
    lo: int
    pad: int
    crop: int
    extra: int

    @property
    def empty(self):
        """No dY element reaches the class: its dX is zero, nothing runs."""
        return self.count == 0 or not self.taps


def axis_classes(size, out, k, stride, pad, dil):
    """The classes of one axis of a loss: input ``size`` (H or W), dY ``out`` (OH or OW),
    kernel ``k``, ``stride``, ``pad``, ``dil``; a list of :class:`AxisClass`, one per ``a`` in
    ``range(stride)``."""
    s, p, d = stride, pad, dil
    res = []
    for a in range(s):
        count = max(0, -(-(size - a) // s))
        taps = [r for r in range(k) if (a + p - r * d) % s == 0]
        offs = {r: (a + p - r * d) // s for r in taps}
        # only taps whose dY rows exist for some output of the class matter
        taps = [r for r in taps if offs[r] + count - 1 >= 0 and offs[r] <= out - 1]
        if count == 0 or not taps:
            res.append(AxisClass(a, count, (), 1, 0, 0, 0, 0))
            continue
        taps.sort(key=lambda r: offs[r])          # increasing offset: the kernel flipped
        step = s // gcd(s, d)
        spacing = d * step // s if len(taps) > 1 else 1
        e_min, e_max = offs[taps[0]], offs[taps[-1]]
        if len(taps) > 1:
            assert all(offs[taps[i + 1]] - offs[taps[i]] == spacing
                       for i in range(len(taps) - 1))
        lo = max(0, e_min)
        top = lo - e_min                           # padding the first output needs
        bottom = max(0, count - 1 + e_max - (out - 1))
        pd = max(top, bottom)
        res.append(AxisClass(a, count, tuple(taps), spacing, lo, pd, pd - top,
                             2 * pd - top - bottom))
    return res


@dataclass(frozen=True)
class ClassJob:
    """One stride class ``(a, b)`` as a forward convolution: input ``x`` (a slice of dY),
    weights ``w`` (``C x K x R' x S'``), ``padding``, ``dilation`` (stride 1); its outputs
    ``[crop_h, crop_h + count_h) x [crop_w, crop_w + count_w)`` are dX's pixels ``a::s_h,
    b::s_w``."""
    a: int
    b: int
    x: np.ndarray
    w: np.ndarray
    padding: tuple
    dilation: tuple
    crop: tuple
    count: tuple


def _triple(v):
    return tuple(v) if isinstance(v, (tuple, list)) else (v, v)


def class_jobs(dy, w, input_hw, stride, padding, dilation):
    """The :class:`ClassJob` of every stride class a dY element reaches (the others' dX is
    zero)."""
    dy, w = np.asarray(dy), np.asarray(w)
    _, _, oh, ow = dy.shape
    _, _, r, s = w.shape
    h, wd = input_hw
    (sh, sw), (ph, pw), (dh, dw) = (_triple(v) for v in (stride, padding, dilation))
    jobs = []
    for ca in axis_classes(h, oh, r, sh, ph, dh):
        for cb in axis_classes(wd, ow, s, sw, pw, dw):
            if ca.empty or cb.empty:
                continue
            x = np.ascontiguousarray(dy[:, :, ca.lo:, cb.lo:])
            wt = np.ascontiguousarray(
                w[:, :, list(ca.taps)][:, :, :, list(cb.taps)].transpose(1, 0, 2, 3))
            jobs.append(ClassJob(ca.a, cb.a, x, wt, (ca.pad, cb.pad), (ca.dil, cb.dil),
                                 (ca.crop, cb.crop), (ca.count, cb.count)))
    return jobs


def class_layers(layer):
    """The forward convolution (a :class:`bpsa.spec.layer.ConvLayer`) of every stride class of
    the loss of ``layer`` that :func:`class_jobs` runs, in its order: dY's ``K`` channels in,
    ``C`` out, stride 1, the class's taps, padding and dilation."""
    from bpsa.spec.layer import ConvLayer
    oh, ow = layer.out_hw
    out = []
    for ca in axis_classes(layer.height, oh, layer.kernel_h, layer.stride[0], layer.pad[0],
                           layer.dil[0]):
        for cb in axis_classes(layer.width, ow, layer.kernel_w, layer.stride[1],
                               layer.pad[1], layer.dil[1]):
            if not (ca.empty or cb.empty):
                out.append(ConvLayer.conv(layer.batch, layer.out_channels, oh - ca.lo,
                                          ow - cb.lo, layer.channels, len(ca.taps),
                                          len(cb.taps), 1, (ca.pad, cb.pad),
                                          (ca.dil, cb.dil)))
    return out


def place(dx, job, y, stride):
    """Put class ``job``'s forward output ``y`` into ``dx`` (N x C x H x W)."""
    sh, sw = _triple(stride)
    (ch, cw), (nh, nw) = job.crop, job.count
    dx[:, :, job.a::sh, job.b::sw] = y[:, :, ch:ch + nh, cw:cw + nw]


def loss_by_classes(dy, w, input_hw, stride, padding, dilation, forward):
    """dX (N x C x H x W) of ``dy`` (N x K x OH x OW) and ``w`` (K x C x R x S) as one
    ``forward(x, w, stride=1, padding=(ph, pw), dilation=(dh, dw))`` call per
    :func:`class_jobs` job; returns ``(dx, jobs)``."""
    n, _, _, _ = np.shape(dy)
    c = np.shape(w)[1]
    dx = np.zeros((n, c, *input_hw), dtype=np.int64)
    jobs = class_jobs(dy, w, input_hw, stride, padding, dilation)
    for job in jobs:
        place(dx, job, forward(job.x, job.w, stride=1, padding=job.padding,
                               dilation=job.dilation), stride)
    return dx, jobs
