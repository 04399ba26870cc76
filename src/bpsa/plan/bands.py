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
"""

from bpsa.plan.grammar import Div, Mul, Set, minimum, select, var

__all__ = ["BAND_REGISTERS", "loss_band", "output_band", "register_widths"]

#: Registers the band programs write: name -> ``"unit"`` (48 bits) or ``"dim"``
#: (``dim_width + 2`` bits).
BAND_REGISTERS = {**{name: "unit" for name in ("t", "u", "yoff", "blen", "dyoff", "eohow")},
                  **{name: "dim" for name in ("y0", "pt", "yend", "eh", "pb", "lo", "hi",
                                              "eoh")}}

o0, obh, h, w, stride_h, pad_h, drh, oh, ow = (
    var(n) for n in ("o0", "obh", "h", "w", "stride_h", "pad_h", "drh", "oh", "ow"))
t, u, y0, yend, eh, lo, hi, eoh = (
    var(n) for n in ("t", "u", "y0", "yend", "eh", "lo", "hi", "eoh"))


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
