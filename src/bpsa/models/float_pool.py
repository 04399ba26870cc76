"""The pooling unit's phases in floating point, as the accelerator computes them
(``docs/architecture/floating_point.md``, "Pooling").

Operands are ``fmt`` encodings; a tap is read as its fp32 value (:func:`widen`: exact, a
subnormal a zero of its sign, a NaN the canonical NaN). The window geometry comes from
:mod:`bpsa.models.golden` (index maps only); the arithmetic is the contract's
(:mod:`bpsa.models.floating`):

- **max**: the window's taps inside the input in row-major order, the first largest by
  :func:`order_key` (a NaN above everything, ``-0`` below ``+0``);
- **avg**: ``S = +0``, then ``S <- add(S, tap)`` for each tap inside the input in row-major
  order (padding counts only in ``R S``), and ``S`` times :func:`reciprocal` (``fp32(1 /
  (R S))``, correctly rounded) rounded once;
- **max backward**: each window's dY (raster order of the windows) added into P at the
  window's first largest X (``relu``: only where that X is positive);
- **avg backward**: for each input element, the dY of the windows covering it added from
  ``+0`` (bottom window row first, right column first: the unit's walk), times the
  reciprocal, rounded once; ``relu``: ``+0`` where X is not positive.

Every result is added into P (cleared to ``+0``; a zero addend leaves P unchanged, so a
``-0`` result is stored as ``+0``) and then stored as fp32 or rounded to ``fmt``
(``requant``), with the forward's ReLU on the way out.
"""

import numpy as np

from bpsa.models import floating, golden

__all__ = ["order_key", "pool2d", "pool2d_backward", "reciprocal", "widen"]


def _fields(bits, fmt):
    f = floating.float_format(fmt)
    bits = np.asarray(bits, dtype=np.int64)
    return (f, (bits >> (f.bits - 1)) & 1, (bits >> f.man_bits) & ((1 << f.exp_bits) - 1),
            bits & ((1 << f.man_bits) - 1))


def widen(bits, fmt):
    """The fp32 encodings of ``fmt`` operands: exact; a zero or subnormal is a zero of its
    sign, a NaN the canonical fp32 NaN."""
    f, sign, exp, man = _fields(bits, fmt)
    top = (1 << f.exp_bits) - 1
    normal = (sign << 31) | ((exp - f.bias + 127) << 23) | (man << (23 - f.man_bits))
    out = np.where(exp == 0, sign << 31, normal)
    out = np.where((exp == top) & (man == 0), (sign << 31) | (0xFF << 23), out)
    return np.where((exp == top) & (man != 0), 0x7FC00000, out).astype(np.int64)


def order_key(bits, fmt):
    """The max pooling's order of ``fmt`` operands as integers: a NaN above every number,
    then the numbers by value with ``-0 < +0`` (a subnormal a zero of its sign)."""
    f, sign, exp, man = _fields(bits, fmt)
    mag = np.where(exp == 0, 0, (exp << f.man_bits) | man)
    key = np.where(sign == 1, (1 << (f.bits - 1)) - 1 - mag, (1 << (f.bits - 1)) + mag)
    nan = (exp == (1 << f.exp_bits) - 1) & (man != 0)
    return np.where(nan, 1 << f.bits, key)


def positive(bits, fmt):
    """``x > 0`` of ``fmt`` operands (a NaN, a zero and a subnormal are not)."""
    f, sign, exp, man = _fields(bits, fmt)
    nan = (exp == (1 << f.exp_bits) - 1) & (man != 0)
    return (sign == 0) & (exp != 0) & ~nan


def reciprocal(rs):
    """``1 / rs`` as an fp32 encoding, rounded to nearest even (IEEE float32 division)."""
    return int((np.float32(1) / np.float32(rs)).view(np.uint32))


def _scaled(s, rs):
    """``s * fp32(1 / rs)`` rounded once (fp32 encodings)."""
    return floating.mac_fast(np.zeros_like(s, dtype=np.uint32), s,
                             np.uint32(reciprocal(rs)), "fp32").astype(np.int64)


def _stored(p, fmt, requant, relu):
    p = np.asarray(floating.store_fast(p, fmt) if requant else p, dtype=np.int64)
    if relu:
        f = fmt if requant else "fp32"
        p = np.array([floating.relu(int(v), f) for v in p.ravel()],
                     dtype=np.int64).reshape(p.shape)
    return p


def pool2d(x, kind, kernel, stride, padding, fmt, *, requant=True, relu=False):
    """The pooling forward of ``fmt`` encodings ``x`` (N x C x H x W) as the unit computes
    it (``kind``: ``max``, ``avg`` or ``global_avg``); rounded to ``fmt`` with ``requant``
    (the driver's pooling forward always is), fp32 otherwise; ``relu`` on the way out."""
    x = np.asarray(x, dtype=np.int64)
    k, st, p, out = golden._pool_params(x.shape, kind, kernel, stride, padding)
    win, inside = golden._windows(x, "avg", k, st, p, out)
    taps = inside.shape[-1]
    if kind == "max":
        key = np.where(inside, order_key(win, fmt), -1)
        first = key.argmax(axis=-1)
        best = np.take_along_axis(win, first[..., None], axis=-1)[..., 0]
        y = widen(best, fmt)
    else:
        s = np.zeros(win.shape[:-1], dtype=np.uint32)
        for t in range(taps):
            if inside[..., t].any():
                s = np.where(inside[..., t], floating.add_fast(s, widen(win[..., t], fmt)), s)
        y = _scaled(s, k[0] * k[1])
    y = floating.add_fast(np.zeros(y.shape, np.uint32), y)        # into P, cleared to +0
    return _stored(y, fmt, requant, relu)


def pool2d_backward(dy, x, kind, kernel, stride, padding, fmt, *, relu=False, requant=False):
    """dX (N x C x H x W) of :func:`pool2d` for ``dy`` as the unit computes it; fp32
    encodings, or rounded to ``fmt`` with ``requant``. ``relu``: the ReLU's backward too
    (``x`` being the ReLU's output)."""
    x, dy = np.asarray(x, dtype=np.int64), np.asarray(dy, dtype=np.int64)
    k, st, p, out = golden._pool_params(x.shape, kind, kernel, stride, padding)
    n, c, h, w = x.shape
    pad_p = np.zeros((n, c, h + 2 * p[0], w + 2 * p[1]), dtype=np.uint32)
    if kind == "max":
        win, inside = golden._windows(x, "avg", k, st, p, out)
        key = np.where(inside, order_key(win, fmt), -1)
        first = key.argmax(axis=-1)                                 # n, c, oh, ow
        best = np.take_along_axis(win, first[..., None], axis=-1)[..., 0]
        ok = positive(best, fmt) if relu else np.ones(best.shape, bool)
        add = widen(dy, fmt)
        ni, ci = np.meshgrid(np.arange(n), np.arange(c), indexing="ij")
        for oy in range(out[0]):
            for ox in range(out[1]):
                r, q = np.divmod(first[:, :, oy, ox], k[1])
                ys, xs = oy * st[0] + r, ox * st[1] + q
                cur = pad_p[ni, ci, ys, xs]
                pad_p[ni, ci, ys, xs] = np.where(ok[:, :, oy, ox],
                                                 floating.add_fast(cur, add[:, :, oy, ox]),
                                                 cur)
        dx = pad_p[:, :, p[0]:p[0] + h, p[1]:p[1] + w].astype(np.int64)
    else:
        d32 = widen(dy, fmt)
        acc = np.zeros((n, c, h, w), dtype=np.uint32)
        # the windows covering (y, x): rows (y + pad) // stride - t while the offset
        # (y + pad) % stride + t stride < R, bottom first; the same across, right first
        for th in range(-(-k[0] // st[0])):
            for tw in range(-(-k[1] // st[1])):
                ys, xs = np.arange(h) + p[0], np.arange(w) + p[1]
                oh, ow = ys // st[0] - th, xs // st[1] - tw
                okh = (ys % st[0] + th * st[0] < k[0]) & (oh >= 0) & (oh < out[0])
                okw = (xs % st[1] + tw * st[1] < k[1]) & (ow >= 0) & (ow < out[1])
                vals = d32[:, :, np.clip(oh, 0, out[0] - 1)][:, :, :, np.clip(ow, 0,
                                                                            out[1] - 1)]
                both = okh[:, None] & okw[None, :]
                acc = np.where(both, floating.add_fast(acc, vals), acc)
        dx = _scaled(acc, k[0] * k[1])
        if relu:
            dx = np.where(positive(x, fmt), dx, 0)
        dx = floating.add_fast(np.zeros(dx.shape, np.uint32), dx).astype(np.int64)
    return _stored(dx, fmt, requant, False)
