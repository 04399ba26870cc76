"""Space-to-depth: the driver's rewrite of a strided weight gradient whose few input channels
leave most array rows idle (a network's first layer: ``C = 3`` fills 3 of 16 rows).

A stride ``s`` convolution reads input column ``x = s ow + q - p`` for output column ``ow``
and tap ``q``. Write ``q - p + e = s u + b`` (``0 <= b < s``; ``e``, ``0 <= e < s``, an offset
of the host's choosing): then ``x = s (ow + u) + b - e``, and with the phase planes

    X'[n, (c s_h + a) s_w + b, y', x'] = X[n, c, s_h y' + a - e_h, s_w x' + b - e_w]
    (zero outside X)

the layer is a stride-1 convolution of ``X'`` (``C s_h s_w`` channels) with ``R' x S'`` taps
``u - u_min``, padding ``-u_min``, and the *same* dY: its weight gradient ``dW'`` holds every
``dW[k, c, r, q]`` at channel ``(c s_h + a) s_w + b``, tap ``(u_r - u_min, u_q - u_min)`` (the
other taps of ``dW'`` are products with positions no tap of the layer reads; the host drops
them). ``X'`` is a permutation of ``X`` (no element repeated, no stride zero inserted; only
the last phase row / column of a plane may hold border zeros where ``H + e_h`` is not a
multiple of ``s_h``, and the first where ``e > 0``). Every ``dW[k, c, r, q]`` is the sum of
the same products in the same (n, oh, ow) order as the layer's own zero-free gradient, so
the result is bit-exact to it, in floating point too.

ResNet-50's ``conv1`` (``C = 3``, 7 x 7, stride 2, pad 3): 12 channels, 4 x 4 taps, pad 1:
16 contexts of 12 rows instead of 49 of 3. The rewrite applies when it needs at most 3/4 of the
contexts (row groups of ``rows`` channels times taps; a context's depth, the ``N OH OW``
output pixels, is the same; a smaller gain is not worth the host's permutation and the
larger dW' it reads back); TPU ResNet-50 training applies the same transform to ``conv1``.
"""

from dataclasses import dataclass, replace

import numpy as np

from bpsa.spec.layer import ConvLayer

__all__ = ["Axis", "SpaceToDepth", "rewrite"]


@dataclass(frozen=True)
class Axis:
    """One axis of the rewrite: ``stride`` (the phase count ``s``), ``offset`` (``e``),
    ``low`` (``u_min <= 0``: the new padding is ``-low``), ``taps`` (``R'``) and ``size`` (the
    phase planes' rows or columns)."""
    stride: int
    offset: int
    low: int
    taps: int
    size: int

    def phases(self, kernel, pad):
        """``(a, u - low)`` of every tap ``0 .. kernel - 1``: its phase and its new tap."""
        t = np.arange(kernel) - pad + self.offset
        return t % self.stride, t // self.stride - self.low


def _read(out, kernel, stride, pad):
    """The input elements along an axis that taps read: ``[0, stride (out - 1) + kernel -
    pad)`` (or none)."""
    return max(0, stride * (out - 1) + kernel - pad)


def _axis(size, kernel, stride, pad, out):
    """The :class:`Axis` with the fewest taps (then the smallest offset) whose planes hold every
    input element a tap reads and whose symmetric padding gives ``out`` outputs; ``None`` when
    none does."""
    size = min(size, _read(out, kernel, stride, pad))
    best = None
    for e in range(stride):
        low, high = (e - pad) // stride, (kernel - 1 - pad + e) // stride
        new = out + high + low             # out + taps - 1 - 2 (-low)
        if new < 1 or stride * new < size + e:
            continue
        ax = Axis(stride, e, low, high - low + 1, new)
        if best is None or ax.taps < best.taps:
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

    def x(self, x):
        """``X'`` of ``x`` (``N x C x H x W``; see the module docstring)."""
        x = np.asarray(x)
        lay = self.layer
        (oh, ow), (ph, pw) = lay.out_hw, lay.pad
        x = x[..., :_read(oh, lay.kernel_h, lay.stride_h, ph),
              :_read(ow, lay.kernel_w, lay.stride_w, pw)]
        n, c, hh, ww = x.shape
        sh, sw = self.h.stride, self.w.stride
        planes = np.zeros((n, c, sh * self.h.size, sw * self.w.size), dtype=x.dtype)
        planes[:, :, self.h.offset:self.h.offset + hh, self.w.offset:self.w.offset + ww] = x
        planes = planes.reshape(n, c, self.h.size, sh, self.w.size, sw)
        return planes.transpose(0, 1, 3, 5, 2, 4).reshape(n, c * sh * sw, self.h.size,
                                                          self.w.size)

    def dw(self, dw_inner):
        """``dW`` (``K x C x R x S``) of the inner layer's ``dW'``."""
        lay = self.layer
        k, c = lay.out_channels, lay.channels
        d = np.asarray(dw_inner).reshape(k, c, self.h.stride, self.w.stride, self.h.taps,
                                         self.w.taps)
        a, ur = self.h.phases(lay.kernel_h, lay.pad_h)
        b, uq = self.w.phases(lay.kernel_w, lay.pad_w)
        return d[:, :, a[:, None], b[None, :], ur[:, None], uq[None, :]]


def _contexts(channels, taps, rows):
    return -(-channels // rows) * taps


def rewrite(layer, rows=None):
    """The :class:`SpaceToDepth` of ``layer``'s zero-free weight gradient on an array of
    ``rows`` rows when it needs at most 3/4 of the layer's contexts (a strided layer of few
    channels), else ``None`` (stride 1, dilation, asymmetric padding or no gain; ``rows``
    ``None``: whenever the rewrite applies, gain or not)."""
    if layer.stride == (1, 1) or layer.dil != (1, 1) or layer.pad_bottom is not None:
        return None
    oh, ow = layer.out_hw
    h = _axis(layer.height, layer.kernel_h, layer.stride_h, layer.pad_h, oh)
    w = _axis(layer.width, layer.kernel_w, layer.stride_w, layer.pad_w, ow)
    if h is None or w is None:
        return None
    channels = layer.channels * h.stride * w.stride
    if rows is not None and (4 * _contexts(channels, h.taps * w.taps, rows)
                             > 3 * _contexts(layer.channels, layer.kernel_h * layer.kernel_w,
                                             rows)):
        return None
    inner = replace(layer, channels=channels, height=h.size, width=w.size, kernel_h=h.taps,
                    kernel_w=w.taps, stride_h=1, stride_w=1, pad_h=-h.low, pad_w=-w.low)
    assert inner.out_hw == (oh, ow)
    return SpaceToDepth(layer, inner, h, w)
