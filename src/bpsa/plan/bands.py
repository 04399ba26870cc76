"""The row-band programs: which input rows a band of output rows reads and the padding its
sub-layer runs with, written once in the step grammar of :mod:`bpsa.plan.grammar`.

The loop walker (:mod:`bpsa.gateware.controller.walker`) compiles them into its band states;
:func:`bpsa.plan.tiling.bands` evaluates them on integers.

forward, gradient (:func:`output_band`)
    A band of ``obh`` output rows from row ``o0`` reads the rows ``[o0 s - p, (o0 + obh - 1) s
    - p + d(R-1)]`` of the padded input: the rows inside the image, from ``y0`` (``eh`` of
    them, ``yoff = y0 W`` elements in), are loaded; the rest are its top / bottom padding
    ``pt`` / ``pb``.
loss (:func:`loss_band`)
    A band of ``obh`` dX rows from row ``o0`` needs the dY rows ``[lo, hi]``, ``lo = max(0,
    o0 + p - d(R-1)) // s``, ``hi = min(OH - 1, (o0 + obh - 1 + p) // s)``; with top padding
    ``pt = p + o0 - lo s`` its transposed convolution puts every dY row where the whole
    layer's does; ``pb`` makes ``eoh = hi - lo + 1`` its output height.
pooling forward
    :func:`output_band` with ``d(R-1) = R - 1``.
pooling backward (:func:`pool_backward_band`)
    A band of ``obh`` dX rows from ``o0`` is covered by the windows of dY rows ``[lo, hi]``,
    ``lo = max(0, ceil((o0 + p - (R - 1)) / s))``, ``hi = min(OH - 1, (o0 + obh - 1 + p) //
    s)`` (``eoh = hi - lo + 1`` of them, or 0); it loads the X rows from ``y0 = max(0, min(o0,
    lo s - p))`` to ``max(o0 + obh, hi s - p + R)`` (``eh`` rows inside the image: the windows'
    rows and its own, for the ReLU mask); ``pq = (o0 + p) // s`` and ``pr`` its remainder
    start the pooling unit's walk over the covering windows.
"""

from bpsa.plan.grammar import Div, Mul, Set, minimum, select, var

__all__ = ["BAND_REGISTERS", "loss_band", "output_band", "pool_backward_band",
           "register_widths"]

#: Registers the band programs write: name -> ``"unit"`` (48 bits) or ``"dim"``
#: (``dim_width + 2`` bits).
BAND_REGISTERS = {**{name: "unit" for name in ("t", "u", "yoff", "blen", "dyoff", "eohow")},
                  **{name: "dim" for name in ("y0", "pt", "yend", "eh", "pb", "lo", "hi",
                                              "eoh", "pq", "pr")}}

o0, obh, h, w, stride_h, pad_h, drh, oh, ow = (
    var(n) for n in ("o0", "obh", "h", "w", "stride_h", "pad_h", "drh", "oh", "ow"))
t, u, y0, yend, eh, lo, hi, eoh, pq = (
    var(n) for n in ("t", "u", "y0", "yend", "eh", "lo", "hi", "eoh", "pq"))


def register_widths(dim_width):
    bits = {"unit": 48, "dim": dim_width + 2}
    return {name: bits[kind] for name, kind in BAND_REGISTERS.items()}


def output_band():
    """Forward and gradient: the input rows and padding of output rows ``[o0, o0 + obh)``."""
    p = pad_h
    return [
        Mul("t", o0, stride_h),
        Mul("u", obh - 1, stride_h),
        Set((("y0", select(t > p, t - p, 0)), ("pt", select(t > p, 0, p - t)),
             ("yend", t + u + drh + 1 - p))),
        Set((("eh", minimum(h, yend) - y0), ("pb", select(yend > h, yend - h, 0)))),
        Mul("yoff", y0, w),
        Mul("blen", eh, w),
    ]


def loss_band():
    """Loss: the dY rows ``[lo, hi]`` and padding of dX rows ``[o0, o0 + obh)``."""
    p = pad_h
    return [
        Set((("t", select(o0 + p > drh, o0 + p - drh, 0)), ("eh", obh))),
        Div("lo", t, stride_h),
        Div("hi", o0 + obh - 1 + p, stride_h),
        Set((("hi", minimum(hi, oh - 1)),)),
        Mul("t", lo, stride_h),
        Mul("u", hi, stride_h),
        Set((("pt", p + o0 - t), ("eoh", hi - lo + 1),
             ("pb", select(u + drh + 1 > p + o0 + obh, u + drh + 1 - (p + o0 + obh), 0)))),
        Mul("dyoff", lo, ow),
        Mul("eohow", eoh, ow),
        Mul("yoff", o0, w),
        Mul("blen", obh, w),
    ]


def pool_backward_band():
    """Pooling backward: the dY rows ``[lo, lo + eoh)``, the X rows ``[y0, y0 + eh)`` and the
    walk's start ``pq``, ``pr`` of dX rows ``[o0, o0 + obh)`` (``drh = R - 1``)."""
    p = pad_h
    return [
        Set((("t", select(o0 + p > drh, o0 + p - drh + stride_h - 1, 0)),)),
        Div("lo", t, stride_h),
        Div("hi", o0 + obh - 1 + p, stride_h),
        Set((("hi", minimum(hi, oh - 1)),)),
        Set((("eoh", select(hi + 1 > lo, hi + 1 - lo, 0)),)),
        Mul("t", lo, stride_h),
        Mul("u", hi, stride_h),
        Set((("y0", select(t > p, minimum(o0, t - p), 0)),
             ("yend", select(u + drh + 1 > p + o0 + obh, u + drh + 1 - p, o0 + obh)))),
        Set((("eh", minimum(h, yend) - y0),)),
        Div("pq", o0 + p, stride_h),
        Mul("t", pq, stride_h),
        Set((("pr", o0 + p - t),)),
    ]
