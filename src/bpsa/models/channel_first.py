"""Channel-first implicit im2col (Zhou et al., Sec. III-IV): a numpy model of the algorithm
and of its mapping onto a weight-stationary array, ahead of the front end's hardware.

The input is laid out HWC (channel first: one word holds a pixel's channels). A convolution
is the sum over the ``R x S`` taps ``(r, q)`` of *decomposed* 1 x 1 convolutions: tap
``(r, q)`` multiplies the input pixel ``(oh s_h - p_h + r d_h, ow s_w - p_w + q d_w)`` of
every output pixel by ``W[:, :, r, q]`` (padding pixels are zeros, never stored). Its cost
depends on the output pixels, not on the stride: a stride skips pixels, it reads none of
them.

Mapping (Sec. IV) onto a ``rows x cols`` weight-stationary array: input channels on the
array rows (one SRAM bank a row, its address skewed one cycle a row), output channels on
the columns. A *pass* holds the weights of ``cols`` output channels for ``rows`` (channel,
tap) pairs and streams every output pixel of a batch image through them, one a cycle; the
taps of a pass accumulate in place. With few input channels (``C < rows``, first layers) a
pass holds ``t = min(rows // C, S)`` taps of one kernel row side by side (the paper's
multi-tile, ``min(rows / C_in, W_f)``), so the array's rows are not idle.

:func:`conv2d_channel_first` computes a layer this way (no code shared with
:mod:`bpsa.models.golden`); :func:`passes` lists a layer's passes and :func:`row_addresses`
the skewed word addresses each array row reads, from which :func:`gather` rebuilds the
operands the array sees (the walker's naive model); :func:`cycles` is the mapping's cycle
model.
"""

from dataclasses import dataclass

import numpy as np

from bpsa.spec.layer import out_size, pair

__all__ = ["Pass", "conv2d_channel_first", "cycles", "gather", "multi_tile", "passes",
           "row_addresses", "to_hwc"]


def to_hwc(x):
    """``N x C x H x W`` as ``N x H x W x C`` (the layout the front end reads)."""
    return np.ascontiguousarray(np.asarray(x).transpose(0, 2, 3, 1))


def _out(size, k, s, p, d):
    return (size + 2 * p - d * (k - 1) - 1) // s + 1


def conv2d_channel_first(x, w, stride=1, padding=0, dilation=1):
    """Y (``N x K x OH x OW`` int64) of ``x`` (``N x C x H x W``) by ``w`` (``K x C x R x S``)
    as the sum of the decomposed 1 x 1 convolutions of the HWC input."""
    (sh, sw), (ph, pw), (dh, dw) = (pair(stride, "stride"), pair(padding, "padding"),
                                    pair(dilation, "dilation"))
    xh = to_hwc(np.asarray(x, dtype=np.int64))
    w = np.asarray(w, dtype=np.int64)
    n, h, wd, c = xh.shape
    k, _, r, s = w.shape
    oh, ow = _out(h, r, sh, ph, dh), _out(wd, s, sw, pw, dw)
    if oh < 1 or ow < 1:
        raise ValueError(f"the dilated kernel is larger than the padded input ({h} x {wd}, "
                         f"kernel {r} x {s}, dilation {dh} x {dw}, padding {ph} x {pw})")
    y = np.zeros((n, oh, ow, k), dtype=np.int64)
    for tr in range(r):
        rows = np.arange(oh) * sh - ph + tr * dh
        rin = (rows >= 0) & (rows < h)
        for tq in range(s):
            cols = np.arange(ow) * sw - pw + tq * dw
            cin = (cols >= 0) & (cols < wd)
            slab = np.zeros((n, oh, ow, c), dtype=np.int64)
            oi, oj = np.nonzero(rin)[0], np.nonzero(cin)[0]
            slab[:, oi[:, None], oj[None, :]] = xh[:, rows[rin][:, None], cols[cin][None, :]]
            y += slab @ w[:, :, tr, tq].T          # the 1 x 1 convolution of tap (tr, tq)
    return y.transpose(0, 3, 1, 2)


def multi_tile(rows, c, s):
    """Taps a pass holds side by side: ``min(rows // C, S)`` when ``C < rows``, else 1."""
    return max(1, min(rows // c, s)) if c < rows else 1


@dataclass(frozen=True)
class Pass:
    """One pass: output channels ``[k0, k0 + kn)`` on the columns; on the rows, channels
    ``[c0, c0 + cn)`` of the taps ``taps`` (``(r, q)`` pairs, ``len(taps) * cn <= rows``)."""
    k0: int
    kn: int
    c0: int
    cn: int
    taps: tuple


def passes(rows, cols, c, k, r, s):
    """The passes of a layer, in order: output-channel blocks, channel blocks, then tap groups
    (``multi_tile`` taps of one kernel row a pass)."""
    t = multi_tile(rows, c, s)
    out = []
    for k0 in range(0, k, cols):
        for c0 in range(0, c, rows):
            cn = min(rows, c - c0)
            for tr in range(r):
                for q0 in range(0, s, t):
                    out.append(Pass(k0, min(cols, k - k0), c0, cn,
                                    tuple((tr, q) for q in range(q0, min(s, q0 + t)))))
    return out


def row_addresses(p, h, w, c, oh, ow, stride=1, padding=0, dilation=1):
    """For pass ``p``: per array row ``i`` (tap ``i // cn``, channel ``c0 + i % cn``) the
    sequence of HWC word addresses it reads, one an output pixel in raster order, ``-1``
    for a padding pixel (a zero, not read); row ``i`` reads its ``j``-th address in cycle
    ``j + i`` (the skew). A word address ``(y W + x) C + ch`` names element ``ch`` of pixel
    ``(y, x)``."""
    (sh, sw), (ph, pw), (dh, dw) = (pair(stride, "stride"), pair(padding, "padding"),
                                    pair(dilation, "dilation"))
    oy, ox = np.meshgrid(np.arange(oh), np.arange(ow), indexing="ij")
    out = []
    for tr, tq in p.taps:
        y, x = oy * sh - ph + tr * dh, ox * sw - pw + tq * dw
        inside = (y >= 0) & (y < h) & (x >= 0) & (x < w)
        for ch in range(p.c0, p.c0 + p.cn):
            out.append(np.where(inside, (y * w + x) * c + ch, -1).ravel())
    return out


def gather(x_hwc_image, addresses):
    """The operands a row receives: the image's HWC elements at ``addresses`` (0 where -1)."""
    flat = np.asarray(x_hwc_image).ravel()
    a = np.asarray(addresses)
    return np.where(a >= 0, flat[np.maximum(a, 0)], 0)


def cycles(rows, cols, layer):
    """The mapping's cycles for ``layer`` (a :class:`bpsa.spec.layer.ConvLayer`) on a ``rows x
    cols`` array, ``{"cycles", "passes", "pixels", "utilization",
    "weight_loads"}``: per pass and image, the output pixels streamed one a cycle plus the
    array's fill and drain (``rows + cols``), and per pass the weights preloaded (``rows``
    cycles, hidden behind the previous pass's stream when it is at least that long). No DMA
    or SRAM port limits: the front end's own bound (Sec. IV's TPU model)."""
    n, c, h, w = layer.x_shape
    k, r, s = layer.out_channels, layer.kernel_h, layer.kernel_w
    (sh, sw), (ph, pw), (dh, dw) = layer.stride, layer.pad, layer.dil
    oh, ow = out_size(h, r, sh, ph, dh, layer.pad_b), _out(w, s, sw, pw, dw)
    ps = passes(rows, cols, c, k, r, s)
    stream = oh * ow
    total = 0
    for i, _ in enumerate(ps):
        total += n * (stream + rows + cols)
        if i == 0 or n * stream < rows:
            total += rows                       # the weight preload that is not hidden
    macs = n * k * oh * ow * c * r * s
    return {"cycles": total, "passes": len(ps), "pixels": oh * ow,
            "utilization": macs / (rows * cols * total), "weight_loads": len(ps) * rows}
