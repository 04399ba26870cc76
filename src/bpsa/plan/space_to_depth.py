"""Space-to-depth: the driver's rewrite of a strided layer as a stride-1 layer of phase planes,
for the layers a stride leaves the array poorly used on: the weight gradient of few input
channels (a network's first layer: ``C = 3`` fills 3 of 16 rows) and the layers whose taps
read a fraction of the input (a 1 x 1 stride-2 layer reads a quarter of X): the weight
gradient and the forward.

A stride ``s`` convolution reads input column ``x = s ow + q - p`` for output column ``ow``
and tap ``q``. Write ``q - p + e = s u + b`` (``0 <= b < s``; ``e``, ``0 <= e < s``, an offset
of the host's choosing): then ``x = s (ow + u) + b - e``. Only the *phases* ``b`` some tap
has are read; with their planes (``B_h``, ``B_w`` the phases, ``i``, ``j`` a phase's index)::

    X'[n, (c |B_h| + i) |B_w| + j, y', x'] = X[n, c, s_h y' + B_h[i] - e_h,
                                                  s_w x' + B_w[j] - e_w]     (zero outside X)

the layer is a stride-1 convolution of ``X'`` (``C |B_h| |B_w|`` channels) with ``R' x S'``
taps ``u - u_min``, padding ``-u_min``, and the *same* output grid: the same Y and dY.

- Gradient: ``dW'`` holds every ``dW[k, c, r, q]`` at channel ``(c |B_h| + i) |B_w| + j``
  (``b = B_w[j]`` the tap's phase), tap ``(u_r - u_min, u_q - u_min)``; its other taps are
  products with positions no tap of the layer reads, and the host drops them.
- Forward (only where the rewrite is *dense*: every tap of ``W'`` is a tap of ``W``,
  ``|B| R' = R`` on both axes, so ``W'`` holds no zero; a 1 x 1 kernel with any stride, a
  kernel of a multiple of the stride): ``W'`` is ``W`` permuted, Y the inner layer's as it
  is. The loss is not rewritten (:data:`MODES`).

``X'`` is a permutation of the elements of ``X`` the taps read (no element repeated, no
stride zero inserted; only a plane's border may hold zeros where ``H + e_h`` is not a multiple
of ``s_h``, or ``e > 0``). Every result is the sum of the same products as the layer's own:
in integer arithmetic bit-exact to it. In floating point the result is the accelerator's
contract for the inner layer as the controller tiles it (the float golden model of the inner
layer, :func:`bpsa.sim.jobs.run_job` checks it): a weight gradient's context walks the same
pixels in the same order, but the inner layer's tiling (images a run, row bands) groups its
fp32 additions in P its own way, which may round differently from the layer's.

ResNet-50's ``conv1`` gradient (``C = 3``, 7 x 7, stride 2, pad 3): 12 channels, 4 x 4
taps, pad 1: 16 contexts of 12 rows instead of 49 of 3 (TPU ResNet-50 training applies the
same transform to ``conv1``). Its 1 x 1 stride-2 downsamples' forward and gradient: 1 x 1
stride-1 layers of the even rows and columns, X' a quarter of X.
"""

from dataclasses import dataclass, replace

import numpy as np

from bpsa.spec.layer import ConvLayer

__all__ = ["Axis", "MODES", "SpaceToDepth", "rewrite"]


@dataclass(frozen=True)
class Axis:
    """One axis of the rewrite: ``stride`` (``s``), ``offset`` (``e``), ``low`` (``u_min <=
    0``: the new padding is ``-low``), ``taps`` (``R'``), ``size`` (the phase planes' rows or
    columns) and ``phases`` (the phases ``b`` a tap has, ascending)."""
    stride: int
    offset: int
    low: int
    taps: int
    size: int
    phases: tuple

    def of_taps(self, kernel, pad):
        """``(phase index, u - low)`` of every tap ``0 .. kernel - 1``."""
        t = np.arange(kernel) - pad + self.offset
        index = np.searchsorted(np.array(self.phases), t % self.stride)
        return index, t // self.stride - self.low


def _read(out, kernel, stride, pad):
    """The input elements along an axis that taps read: ``[0, stride (out - 1) + kernel -
    pad)`` (or none)."""
    return max(0, stride * (out - 1) + kernel - pad)


def _axis(size, kernel, stride, pad, out):
    """The :class:`Axis` with the fewest taps (then phases, then the smallest offset) whose
    planes hold every input element a tap reads and whose symmetric padding gives ``out``
    outputs; ``None`` when none does."""
    size = min(size, _read(out, kernel, stride, pad))
    best = None
    for e in range(stride):
        low, high = (e - pad) // stride, (kernel - 1 - pad + e) // stride
        new = out + high + low             # out + taps - 1 - 2 (-low)
        if new < 1 or stride * new < size + e:
            continue
        phases = tuple(sorted({(q - pad + e) % stride for q in range(kernel)}))
        ax = Axis(stride, e, low, high - low + 1, new, phases)
        if best is None or (ax.taps, len(ax.phases)) < (best.taps, len(best.phases)):
            best = ax
    return best


@dataclass(frozen=True)
class SpaceToDepth:
    """The rewrite of ``layer`` (a :class:`bpsa.spec.layer.ConvLayer`): ``inner`` is the
    stride-1 layer the accelerator runs, ``h`` and ``w`` its :class:`Axis` pair."""
    layer: ConvLayer
    inner: ConvLayer
    h: Axis
    w: Axis

    @property
    def dense(self):
        """``W'`` is a permutation of ``W`` (the forward needs it)."""
        lay = self.layer
        return (len(self.h.phases) * self.h.taps == lay.kernel_h
                and len(self.w.phases) * self.w.taps == lay.kernel_w)

    def _planes(self):
        """``(slices of X inside the planes, plane grid shape)``."""
        lay = self.layer
        (oh, ow), (ph, pw) = lay.out_hw, lay.pad
        hh = min(lay.height, _read(oh, lay.kernel_h, lay.stride_h, ph))
        ww = min(lay.width, _read(ow, lay.kernel_w, lay.stride_w, pw))
        return ((slice(self.h.offset, self.h.offset + hh), slice(self.w.offset,
                                                                   self.w.offset + ww)),
                (hh, ww))

    def x(self, x):
        """``X'`` of ``x`` (``N x C x H x W``; see the module docstring)."""
        x = np.asarray(x)
        n, c = x.shape[:2]
        (ys, xs), (hh, ww) = self._planes()
        sh, sw = self.h.stride, self.w.stride
        planes = np.zeros((n, c, sh * self.h.size, sw * self.w.size), dtype=x.dtype)
        planes[:, :, ys, xs] = x[..., :hh, :ww]
        planes = planes.reshape(n, c, self.h.size, sh, self.w.size, sw)
        planes = planes.transpose(0, 1, 3, 5, 2, 4)[:, :, list(self.h.phases)]
        planes = planes[:, :, :, list(self.w.phases)]
        return planes.reshape(n, self.inner.channels, self.h.size, self.w.size)

    def _taps(self):
        lay = self.layer
        i, ur = self.h.of_taps(lay.kernel_h, lay.pad_h)
        j, uq = self.w.of_taps(lay.kernel_w, lay.pad_w)
        return i[:, None], j[None, :], ur[:, None], uq[None, :]

    def weights(self, w):
        """``W'`` (``K x C' x R' x S'``) of ``w`` (``K x C x R x S``); :exc:`ValueError` for a
        rewrite that is not :attr:`dense` (its ``W'`` would hold zeros)."""
        if not self.dense:
            raise ValueError(f"the space-to-depth rewrite of {self.layer.text()} is not dense: "
                             f"its W' would hold zero taps (the forward runs dense rewrites "
                             f"only)")
        w = np.asarray(w)
        k, c = w.shape[:2]
        out = np.zeros((k, c, len(self.h.phases), len(self.w.phases), self.h.taps,
                        self.w.taps), dtype=w.dtype)
        out[(slice(None), slice(None)) + self._taps()] = w
        return out.reshape(k, self.inner.channels, self.h.taps, self.w.taps)

    def dw(self, dw_inner):
        """``dW`` (``K x C x R x S``) of the inner layer's ``dW'``."""
        lay = self.layer
        d = np.asarray(dw_inner).reshape(lay.out_channels, lay.channels, len(self.h.phases),
                                         len(self.w.phases), self.h.taps, self.w.taps)
        return d[(slice(None), slice(None)) + self._taps()]


def _contexts(channels, taps, rows):
    return -(-channels // rows) * taps


#: The modes a phase's rewrite runs in (the zero-free gradient walker; the forward's front
#: ends, the feeder also by its MODE name ``bp_im2col``). The loss is not rewritten: its dX'
#: would leave the elements no tap reaches (a 1 x 1 stride-2 layer's three quarters) to the
#: host to zero, bytes the accelerator's output must still hold.
MODES = {"forward": ("feeder", "bp_im2col", "channel_first"), "gradient": ("zero_free",)}


def rewrite(layer, rows=None, phase="gradient", mode="zero_free"):
    """The :class:`SpaceToDepth` the driver runs ``phase`` of ``layer`` as, in ``mode``
    (:data:`MODES`), on an array of ``rows`` rows, or ``None``. Strided layers only (no
    dilation, symmetric padding). The gradient: when it needs no more contexts (row groups of
    ``rows`` channels times taps; a context's depth, ``N OH OW``, is the same) and either at
    most 3/4 of them or at most 3/4 of the input elements; the forward: a dense
    rewrite (:attr:`SpaceToDepth.dense`) that reads at most 3/4 of the input elements. A
    smaller gain is not worth the host's permutation. ``rows`` ``None``: whenever it applies
    (dense for the forward), gain or not. (The driver and the cycle model ask
    :func:`bpsa.plan.tiling.rewrite_of`, which also checks that the inner layer runs.)"""
    if (mode not in MODES.get(phase, ()) or layer.stride == (1, 1) or layer.dil != (1, 1)
            or layer.pad_bottom is not None):
        return None
    oh, ow = layer.out_hw
    h = _axis(layer.height, layer.kernel_h, layer.stride_h, layer.pad_h, oh)
    w = _axis(layer.width, layer.kernel_w, layer.stride_w, layer.pad_w, ow)
    if h is None or w is None:
        return None
    channels = layer.channels * len(h.phases) * len(w.phases)
    inner = replace(layer, channels=channels, height=h.size, width=w.size, kernel_h=h.taps,
                    kernel_w=w.taps, stride_h=1, stride_w=1, pad_h=-h.low, pad_w=-w.low)
    assert inner.out_hw == (oh, ow)
    sd = SpaceToDepth(layer, inner, h, w)
    if phase != "gradient" and not sd.dense:
        return None
    if rows is None:
        return sd
    fewer = 4 * inner.channels * inner.height * inner.width <= 3 * layer.channels * \
        layer.height * layer.width
    if phase != "gradient":
        return sd if fewer else None
    new = _contexts(channels, h.taps * w.taps, rows)
    old = _contexts(layer.channels, layer.kernel_h * layer.kernel_w, rows)
    return sd if new <= old and (4 * new <= 3 * old or fewer) else None
