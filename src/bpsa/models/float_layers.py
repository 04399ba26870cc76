"""The convolution phases in floating point, in the accumulation order of the accelerator's
front ends (``docs/architecture/floating_point.md``, "Order").

Every output is one output-stationary context (:func:`bpsa.models.floating.os_output`): its
slots are the front end's K order, a slot's product folded into partial ``k mod 6``, the six
partials reduced as ``((p0 + p1) + (p2 + p3)) + (p4 + p5)``. The operand sequences come from the
explicit lowerings of :mod:`bpsa.models.golden` (index maps only: no arithmetic of the integer
model is used); the arithmetic is the contract's (:mod:`bpsa.models.floating`).
"""

import numpy as np

from bpsa.models import floating, golden

__all__ = ["accelerator_forward", "accelerator_gradient", "accelerator_loss",
           "accelerator_run", "accelerator_strips", "conv2d", "conv2d_input_grad",
           "conv2d_weight_grad"]


def conv2d(x, w, fmt, stride=1, padding=0, dilation=1):
    """The forward convolution of ``fmt`` encodings ``x`` (N x C x H x W) and ``w`` (K x C x R
    x S) as the data feeder runs it: each output's slots in the order ``(c, r, q)``, every
    kernel tap one slot, a tap in the padding a zero slot (skipped, but counted). Returns the
    fp32 encodings of Y (N x K x OH x OW, ``uint32``)."""
    low = golden.lower_forward(np.asarray(x, dtype=np.int64), np.asarray(w, dtype=np.int64),
                               stride, padding, dilation)
    return low.result(floating.gemm_os(low.a, low.b, fmt)).astype(np.uint32)


def _taps(size, kernel, s, d, p):
    """Per-axis input index ``o s + r d - p`` (out x kernel) and whether it is inside."""
    out = (size + 2 * p - d * (kernel - 1) - 1) // s + 1
    idx = np.arange(out)[:, None] * s + np.arange(kernel)[None, :] * d - p
    return idx, (idx >= 0) & (idx < size)


def _pair(v):
    return (v, v) if np.isscalar(v) else tuple(v)


def conv2d_input_grad(dy, w, input_hw, fmt, stride=1, padding=0, dilation=1):
    """dX (N x C x H x W, fp32 encodings) of ``fmt`` encodings ``dy`` (N x K x OH x OW) and
    ``w`` (K x C x R x S) as the zero-free loss walker runs it. Input pixel ``(h, x)`` belongs
    to the stride class ``(h mod s_h, x mod s_w)``; the class's taps are the ``(r, q)``, in
    raster order, with ``h + p_h - r d_h`` and ``x + p_w - q d_w`` divisible by the strides
    (the other taps meet only inserted zeros and are never slots). The pixel's context has,
    for each of its class's taps in order, the output channels ``k = 0 .. K-1`` as slots:
    ``dY[n, k, (h + p_h - r d_h) / s_h, (x + p_w - q d_w) / s_w]`` (a zero slot where that is
    outside dY) times ``W[k, c, r, q]``. A pixel whose class has no tap is ``+0``."""
    dy, w = np.asarray(dy, dtype=np.int64), np.asarray(w, dtype=np.int64)
    (sh, sw), (ph, pw), (dh, dw) = _pair(stride), _pair(padding), _pair(dilation)
    n_n, k_n, oh_n, ow_n = dy.shape
    _, c_n, r_n, s_n = w.shape
    h_n, w_n = input_hw
    out = np.zeros((n_n, c_n, h_n, w_n), dtype=np.uint32)
    for a in range(min(sh, h_n)):
        for b in range(min(sw, w_n)):
            taps = [(r, q) for r in range(r_n) for q in range(s_n)
                    if (a + ph - r * dh) % sh == 0 and (b + pw - q * dw) % sw == 0]
            if not taps:
                continue
            hs, xs = np.arange(a, h_n, sh), np.arange(b, w_n, sw)
            # rows: (n, h, x) of the class; columns: (tap, k)
            rows = []
            for r, q in taps:
                oh = (hs + ph - r * dh) // sh
                ow = (xs + pw - q * dw) // sw
                ok = ((oh >= 0) & (oh < oh_n))[:, None] & ((ow >= 0) & (ow < ow_n))[None, :]
                vals = dy[:, :, np.clip(oh, 0, oh_n - 1)][:, :, :, np.clip(ow, 0, ow_n - 1)]
                rows.append(np.where(ok[None, None], vals, 0))      # n, k, h, x
            a_mat = np.stack(rows, axis=1)                           # n, tap, k, h, x
            a_mat = a_mat.transpose(0, 3, 4, 1, 2).reshape(-1, len(taps) * k_n)
            b_mat = np.stack([w[:, :, r, q] for r, q in taps]).reshape(len(taps) * k_n, c_n)
            res = floating.gemm_os(a_mat, b_mat, fmt)
            out[:, :, a::sh, b::sw] = res.reshape(n_n, len(hs), len(xs), c_n) \
                .transpose(0, 3, 1, 2)
    return out


def conv2d_weight_grad(x, dy, kernel_hw, fmt, stride=1, padding=0, dilation=1, *,
                       rows=None):
    """dW (K x C x R x S, fp32 encodings) of one image, ``fmt`` encodings ``x`` (1 x C x H x
    W) and ``dy`` (1 x K x OH x OW), as the zero-free gradient walker runs it: each weight
    ``(k, c, r, q)`` one context whose slots are dY's pixels ``(oh, ow)`` in raster order,
    ``X[c, oh s_h + r d_h - p_h, ow s_w + q d_w - p_w]`` (a zero slot in the padding) times
    ``dY[k, oh, ow]``; ``rows``: ``(first, end)``, only dY's rows in that range (a band). A
    batch's images and the bands are added in the P buffer (:func:`accelerator_gradient`):
    ``N`` must be 1."""
    x, dy = np.asarray(x, dtype=np.int64), np.asarray(dy, dtype=np.int64)
    if x.shape[0] != 1 or dy.shape[0] != 1:
        raise ValueError(f"one image (N = 1), not x {x.shape} and dy {dy.shape}")
    (sh, sw), (ph, pw), (dh, dw) = _pair(stride), _pair(padding), _pair(dilation)
    _, c_n, h_n, w_n = x.shape
    _, k_n, oh_n, ow_n = dy.shape
    r_n, s_n = kernel_hw
    ys, y_ok = _taps(h_n, r_n, sh, dh, ph)                   # oh x r
    xs, x_ok = _taps(w_n, s_n, sw, dw, pw)                   # ow x q
    if ys.shape[0] != oh_n or xs.shape[0] != ow_n:
        raise ValueError(f"dy's {oh_n} x {ow_n} is not the output of x {h_n} x {w_n}")
    # a: rows (c, r, q), columns (oh, ow)
    vals = x[0][:, np.clip(ys, 0, h_n - 1)][:, :, :, np.clip(xs, 0, w_n - 1)]  # c,oh,r,ow,q
    ok = y_ok[:, :, None, None] & x_ok[None, None]                             # oh,r,ow,q
    lo, hi = rows if rows is not None else (0, oh_n)
    a_mat = np.where(ok[None], vals, 0)[:, lo:hi].transpose(0, 2, 4, 1, 3).reshape(
        c_n * r_n * s_n, (hi - lo) * ow_n)
    b_mat = dy[0, :, lo:hi].reshape(k_n, (hi - lo) * ow_n).T
    res = floating.gemm_os(a_mat, b_mat, fmt)                # (c, r, q) x k
    return res.reshape(c_n, r_n, s_n, k_n).transpose(3, 0, 1, 2)


def accelerator_forward(x, w, fmt, stride=1, padding=0, dilation=1, *, group, requant=False,
                        relu=False):
    """Y as the whole accelerator computes it (fp32 encodings, or ``fmt``'s with
    ``requant``): the forward engine runs the input channels in groups of ``group`` (the
    plan's ``group``), each group's partial Y (:func:`conv2d` of its channels) is added into
    the P buffer, which starts at ``+0``, in group order (``floating.add``); the store rounds
    P to ``fmt`` with ``requant`` (``floating.store``) and applies the ReLU with ``relu``."""
    x, w = np.asarray(x, dtype=np.int64), np.asarray(w, dtype=np.int64)
    parts = [conv2d(x[:, g:g + group], w[:, g:g + group], fmt, stride, padding, dilation)
             for g in range(0, x.shape[1], group)]
    return _stored(_in_p(parts), fmt, requant, relu)


def accelerator_loss(dy, w, input_hw, fmt, stride=1, padding=0, dilation=1, *, group,
                     requant=False):
    """dX as the whole accelerator computes it with the zero-free loss walker: the output
    channels in groups of ``group`` (the plan's ``group``), each group's partial dX
    (:func:`conv2d_input_grad` of its channels) added into P (from ``+0``) in group order;
    the store's rounding to ``fmt`` with ``requant``."""
    dy, w = np.asarray(dy, dtype=np.int64), np.asarray(w, dtype=np.int64)
    parts = [conv2d_input_grad(dy[:, g:g + group], w[g:g + group], input_hw, fmt, stride,
                               padding, dilation) for g in range(0, w.shape[0], group)]
    return _stored(_in_p(parts), fmt, requant, False)


def accelerator_gradient(x, dy, kernel_hw, fmt, stride=1, padding=0, dilation=1, *, band,
                         images=1):
    """dW as the whole accelerator computes it with the zero-free gradient walker: for each
    run of ``images`` images in order (the plan's ``images``; the last run the rest), for
    each band of ``band`` dY rows in order (the plan's ``band``), the run's partial dW added
    into P (from ``+0``); stored as fp32. A run's partial dW is one context a weight whose
    slots are its images' band pixels, image after image (the walker's stacked images)."""
    x, dy = np.asarray(x, dtype=np.int64), np.asarray(dy, dtype=np.int64)
    oh = dy.shape[2]
    rows = [(o0, min(oh, o0 + band)) for o0 in range(0, oh, band)]
    parts = _weight_grad_bands(x, dy, kernel_hw, fmt, stride, padding, dilation, rows, images)
    return _stored(_in_p(list(parts)), fmt, False, False)


def accelerator_strips(phase, ops, fmt, stride=1, padding=0, dilation=1, *, hw, cut,
                       requant=False, relu=False):
    """A layer too wide for the controller as the driver runs it, in column strips: ``cut``
    is the driver's ``{"strips": [...], "plans": [...]}``
    (:func:`bpsa.plan.tiling.column_strips`), each strip one layer ``engine_w`` wide with
    ``pad_w = 0`` whose padding columns are zero operands, run by :func:`accelerator_forward`,
    :func:`accelerator_loss` or :func:`accelerator_gradient` with its own plan's group or band.
    Forward and loss strips each give their own output columns (a loss strip no dY column
    reaches gives ``+0``); the gradient's strips' partial dW are added on the host in strip
    order from ``+0`` (``floating.add``). ``ops``: the phase's operands by name (``x``, ``w``,
    ``dy``); ``hw``: the loss's input size or the gradient's kernel size."""
    (sh, sw), (ph, pw), (dh, dw) = _pair(stride), _pair(padding), _pair(dilation)
    sub = dict(stride=(sh, sw), padding=(ph, 0), dilation=(dh, dw))
    if phase != "loss":
        x = np.asarray(ops["x"], dtype=np.int64)
        xp = np.pad(x, ((0, 0), (0, 0), (0, 0), (pw, pw)))
    out = None
    for st, p in zip(cut["strips"], cut["plans"]):
        if phase == "forward":
            part = accelerator_forward(xp[..., st.in0 + pw:st.in0 + pw + st.in_cols],
                                       ops["w"], fmt, group=p["group"], requant=requant,
                                       relu=relu, **sub)
            if out is None:
                out = np.zeros(part.shape[:3] + (sum(s.out_cols for s in cut["strips"]),),
                               dtype=np.int64)
            out[..., st.out0:st.out0 + st.out_cols] = part
        elif phase == "loss":
            if out is None:
                dy = np.asarray(ops["dy"], dtype=np.int64)
                out = np.zeros((dy.shape[0], np.shape(ops["w"])[1]) + tuple(hw), dtype=np.int64)
            if st.in_cols == 0:
                continue
            part = accelerator_loss(dy[..., st.in0:st.in0 + st.in_cols], ops["w"],
                                    (hw[0], st.engine_w), fmt, group=p["group"],
                                    requant=requant, **sub)
            keep = part[..., st.skip:st.skip + st.out_cols]
            out[..., st.out0:st.out0 + keep.shape[-1]] = keep
        else:
            dy = np.asarray(ops["dy"], dtype=np.int64)
            if out is None:
                out = np.zeros((dy.shape[1], x.shape[1]) + tuple(hw), dtype=np.uint32)
            out = floating.add_fast(out, accelerator_gradient(
                xp[..., st.in0 + pw:st.in0 + pw + st.in_cols],
                dy[..., st.out0:st.out0 + st.out_cols], hw, fmt, band=p["band"],
                images=p.get("images", 1), **sub))
    return out


def accelerator_run(phase, plan, ops, fmt, hw, stride=1, padding=0, dilation=1, *,
                    requant=False, relu=False):
    """One phase as the driver runs it with its tiling ``plan`` (:func:`bpsa.plan.tiling.
    plan_or_strips`: a plan's ``group`` or ``band``, or column strips), whose runs fix the
    order of the fp32 sums: :func:`accelerator_strips`, :func:`accelerator_forward`,
    :func:`accelerator_loss` or :func:`accelerator_gradient`. ``ops``: the operands by name;
    ``hw``: the loss's input size or the gradient's kernel size."""
    geo = (stride, padding, dilation)
    if "strips" in plan:
        return accelerator_strips(phase, ops, fmt, *geo, hw=hw, cut=plan, requant=requant,
                                  relu=relu)
    if phase == "forward":
        return accelerator_forward(ops["x"], ops["w"], fmt, *geo, group=plan["group"],
                                   requant=requant, relu=relu)
    if phase == "loss":
        return accelerator_loss(ops["dy"], ops["w"], hw, fmt, *geo, group=plan["group"],
                                requant=requant)
    return accelerator_gradient(ops["x"], ops["dy"], hw, fmt, *geo, band=plan["band"],
                                images=plan.get("images", 1))


def _weight_grad_bands(x, dy, kernel_hw, fmt, stride, padding, dilation, rows, images=1):
    """:func:`conv2d_weight_grad` of every run (``images`` images, the last the rest) and
    every band of ``rows``, run-major, a run's images' pixels one after the other in a
    context; runs of one shape in one batched :func:`bpsa.models.floating.gemm_os`."""
    (sh, sw), (ph, pw), (dh, dw) = _pair(stride), _pair(padding), _pair(dilation)
    n_n, c_n, h_n, w_n = x.shape
    k_n, oh_n, ow_n = dy.shape[1:]
    r_n, s_n = kernel_hw
    ys, y_ok = _taps(h_n, r_n, sh, dh, ph)
    xs, x_ok = _taps(w_n, s_n, sw, dw, pw)
    vals = x[:, :, np.clip(ys, 0, h_n - 1)][:, :, :, :, np.clip(xs, 0, w_n - 1)]
    a_all = np.where((y_ok[:, :, None, None] & x_ok[None, None])[None, None], vals, 0)
    a_mats, b_mats = [], []
    for n0 in range(0, n_n, images):
        run = range(n0, min(n_n, n0 + images))
        for lo, hi in rows:
            a_mats.append(np.concatenate([a_all[n][:, lo:hi].transpose(0, 2, 4, 1, 3).reshape(
                c_n * r_n * s_n, (hi - lo) * ow_n) for n in run], axis=1))
            b_mats.append(np.concatenate([dy[n, :, lo:hi].reshape(k_n, (hi - lo) * ow_n).T
                                          for n in run]))
    out = [None] * len(a_mats)
    by_shape = {}
    for i, a in enumerate(a_mats):
        by_shape.setdefault(a.shape, []).append(i)
    for which in by_shape.values():
        res = floating.gemm_os(np.stack([a_mats[i] for i in which]),
                               np.stack([b_mats[i] for i in which]), fmt)
        for i, r in zip(which, res):
            out[i] = r.reshape(c_n, r_n, s_n, k_n).transpose(3, 0, 1, 2)
    return out


def _in_p(parts):
    """The P buffer's sums of ``parts`` (fp32 encodings, one shape), added in order from
    ``+0`` (``floating.add``)."""
    p = np.zeros_like(parts[0], dtype=np.uint32)
    for part in parts:
        p = floating.add_fast(p, part)
    return p


def _stored(p, fmt, requant, relu):
    """What a store writes of P: fp32, or rounded to ``fmt`` with ``requant``
    (``floating.store``); ReLU'd with ``relu`` (``floating.relu``)."""
    f = floating.float_format(fmt if requant else "fp32")
    p = np.asarray(floating.store_fast(p, fmt) if requant else p, dtype=np.int64)
    if relu:            # floating.relu: a set sign bit gives +0, a NaN the canonical NaN
        nan = (((p >> f.man_bits) & ((1 << f.exp_bits) - 1)) == (1 << f.exp_bits) - 1) & \
            ((p & ((1 << f.man_bits) - 1)) != 0)
        p = np.where(nan, f.nan, np.where((p >> (f.bits - 1)) & 1, 0, p))
    return p
