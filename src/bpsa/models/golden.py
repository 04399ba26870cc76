"""Golden model of one training step of a convolution layer (numpy only).

Everything here is exact integer arithmetic in ``int64`` on NCHW tensors, computed from the
definitions in ``DESIGN.md`` (stride ``s``, padding ``p``, dilation ``d``; X: N x C x H x W,
W: K x C x R x S, Y and dY: N x K x OH x OW)::

    Y[n,k,oh,ow] = sum_{c,r,q} X[n,c, oh*s + r*d - p, ow*s + q*d - p] * W[k,c,r,q]
    dX[n,c,h,w]  = sum_{k,r,q,oh,ow : oh*s + r*d - p = h, ow*s + q*d - p = w}
                       dY[n,k,oh,ow] * W[k,c,r,q]
    dW[k,c,r,q]  = sum_{n,oh,ow} dY[n,k,oh,ow] * X[n,c, oh*s + r*d - p, ow*s + q*d - p]

with ``OH = (H + 2p - d(R-1) - 1) // s + 1`` (likewise ``OW``,
:func:`bpsa.spec.layer.output_hw`); X outside ``[0,H) x [0,W)`` reads 0. With ``groups`` G,
W is K x C/G x R x S and the sum over ``c`` runs over output channel ``k``'s group only:
input channels ``g C/G + c'`` for ``k`` in ``[g K/G, (g+1) K/G)`` (each group an ordinary
convolution of its slices).
``stride``, ``padding`` and ``dilation`` are each an ``int`` or an ``(h, w)`` pair.

Two independent views are provided:

- direct functions (:func:`conv2d`, :func:`conv2d_input_grad`, :func:`conv2d_weight_grad`), which
  loop over the kernel taps only and never build lowered matrices;
- explicit im2col lowerings (:func:`lower_forward`, :func:`lower_input_grad`,
  :func:`lower_weight_grad`), which build the GEMM operands *with* their zero-spaces, exactly as
  a traditional (baseline) accelerator would hold them, following BP-im2col (Yang et al.) for
  the orientation of the two backpropagation phases. Each returns a :class:`Lowering` whose
  :meth:`Lowering.result` turns ``gemm(a, b)`` back into the direct result, and whose masks and
  source-index maps say which operand elements are structural zeros (inserted or padding
  zeros, independent of the data) and where every other element comes from.

Results are exact as long as no intermediate sum overflows ``int64``.
"""

from dataclasses import dataclass

import numpy as np

from bpsa.spec.layer import conv_operands, conv_params, output_hw, pair, size_pair

__all__ = [
    "output_hw", "conv2d", "conv2d_input_grad", "conv2d_weight_grad", "gemm",
    "Lowering", "lower_forward", "lower_input_grad", "lower_weight_grad",
    "zero_fraction", "structural_zero_counts", "requantize", "POOL_KINDS", "pool2d",
    "pool2d_backward",
]


# --- parameter checking --------------------------------------------------------------------------

def _int(value, name):
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an integer, not {value!r}")
    return int(value)


def _params(stride, padding, dilation):
    return conv_params(stride, padding, dilation)


def _tensor(array, name, ndim=4):
    array = np.asarray(array)
    if array.dtype.kind not in "biu":
        raise TypeError(f"{name} must be an integer array, not of dtype {array.dtype}")
    if array.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dimensions, not shape {array.shape}")
    return array.astype(np.int64)


def _out_hw(input_hw, kernel_hw, s, p, d):
    return output_hw(input_hw, kernel_hw, s, p, d)


def _taps(size, s, d):
    """Slice of a padded axis read by kernel tap ``r`` for ``size`` outputs: r*d, r*d + s, ..."""
    return lambda r: slice(r * d, r * d + s * (size - 1) + 1, s)


# --- direct functions ----------------------------------------------------------------------------

def _groups(groups, phase, **operands):
    """The layer of ``operands`` with ``groups`` (checked) and each group's channel slices
    ``(input channels, output channels)``."""
    layer = conv_operands(phase, groups=groups, **operands)
    return layer, layer.group_slices()


def conv2d(x, w, stride=1, padding=0, dilation=1, groups=1):
    """Forward convolution ``Y`` (N x K x OH x OW, int64) of ``x`` (N x C x H x W) by ``w``
    (K x C/groups x R x S)."""
    x = _tensor(x, "x")
    w = _tensor(w, "w")
    if groups != 1:
        _, slices = _groups(groups, "forward", x=x, w=w, stride=stride, padding=padding,
                            dilation=dilation)
        return np.concatenate([conv2d(x[:, c], w[k], stride, padding, dilation)
                               for c, k in slices], axis=1)
    layer = conv_operands("forward", x=x, w=w, stride=stride, padding=padding,
                          dilation=dilation)
    s, p, d = layer.stride, layer.pad, layer.dil
    (n, c, h, wd), (k, _, r_n, s_n), (oh, ow) = x.shape, w.shape, layer.out_hw
    xp = np.pad(x, ((0, 0), (0, 0), (p[0], p[0]), (p[1], p[1])))
    rows, cols = _taps(oh, s[0], d[0]), _taps(ow, s[1], d[1])
    y = np.zeros((n, k, oh, ow), dtype=np.int64)
    for r in range(r_n):
        for q in range(s_n):
            y += np.einsum("nchw,kc->nkhw", xp[:, :, rows(r), cols(q)], w[:, :, r, q])
    return y


def conv2d_input_grad(dy, w, input_hw, stride=1, padding=0, dilation=1, groups=1):
    """Loss ``dX`` (N x C x H x W, int64) from ``dy`` (N x K x OH x OW) and ``w``
    (K x C/groups x R x S).

    ``input_hw`` is ``(H, W)`` (an int means square); ``dy`` must have the output size of that
    forward convolution. Input pixels that no window reaches get 0.
    """
    dy = _tensor(dy, "dy")
    w = _tensor(w, "w")
    if groups != 1:
        _, slices = _groups(groups, "loss", dy=dy, w=w, input_hw=input_hw, stride=stride,
                            padding=padding, dilation=dilation)
        return np.concatenate([conv2d_input_grad(dy[:, k], w[k], input_hw, stride, padding,
                                                 dilation) for _, k in slices], axis=1)
    layer = conv_operands("loss", dy=dy, w=w, input_hw=input_hw, stride=stride,
                          padding=padding, dilation=dilation)
    s, p, d = layer.stride, layer.pad, layer.dil
    (h, wd), (k, c, r_n, s_n), (oh, ow) = (layer.height, layer.width), w.shape, layer.out_hw
    n = dy.shape[0]
    dxp = np.zeros((n, c, h + 2 * p[0], wd + 2 * p[1]), dtype=np.int64)
    rows, cols = _taps(oh, s[0], d[0]), _taps(ow, s[1], d[1])
    for r in range(r_n):
        for q in range(s_n):
            dxp[:, :, rows(r), cols(q)] += np.einsum("nkhw,kc->nchw", dy, w[:, :, r, q])
    return np.ascontiguousarray(dxp[:, :, p[0]:p[0] + h, p[1]:p[1] + wd])


def conv2d_weight_grad(x, dy, kernel_hw, stride=1, padding=0, dilation=1, groups=1):
    """Gradient ``dW`` (K x C/groups x R x S, int64) from ``x`` (N x C x H x W) and ``dy``
    (N x K x OH x OW); ``kernel_hw`` is ``(R, S)`` (an int means square)."""
    x = _tensor(x, "x")
    dy = _tensor(dy, "dy")
    if groups != 1:
        _, slices = _groups(groups, "gradient", x=x, dy=dy, kernel_hw=kernel_hw,
                            stride=stride, padding=padding, dilation=dilation)
        return np.concatenate([conv2d_weight_grad(x[:, c], dy[:, k], kernel_hw, stride,
                                                  padding, dilation) for c, k in slices],
                              axis=0)
    layer = conv_operands("gradient", x=x, dy=dy, kernel_hw=kernel_hw, stride=stride,
                          padding=padding, dilation=dilation)
    s, p, d = layer.stride, layer.pad, layer.dil
    (n, c, h, wd), k, (oh, ow) = x.shape, layer.out_channels, layer.out_hw
    r_n, s_n = layer.kernel_h, layer.kernel_w
    xp = np.pad(x, ((0, 0), (0, 0), (p[0], p[0]), (p[1], p[1])))
    rows, cols = _taps(oh, s[0], d[0]), _taps(ow, s[1], d[1])
    dw = np.zeros((k, c, r_n, s_n), dtype=np.int64)
    for r in range(r_n):
        for q in range(s_n):
            dw[:, :, r, q] = np.einsum("nkhw,nchw->kc", dy, xp[:, :, rows(r), cols(q)])
    return dw


def gemm(a, b):
    """Exact int64 matrix product ``a @ b`` of an M x K and a K x N integer matrix."""
    a = _tensor(a, "a", ndim=2)
    b = _tensor(b, "b", ndim=2)
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"gemm operands do not chain: a is {a.shape}, b is {b.shape}")
    return a @ b


def requantize(acc, shift, bits, signed=True):
    """Accumulators to ``bits``-bit operands, as a layer's output leaves for the next layer:
    ``round(acc / 2**shift)`` with halves rounded up (towards +infinity), then saturated to
    ``[-2**(bits-1), 2**(bits-1) - 1]`` (``[0, 2**bits - 1]`` unsigned). Exact for any
    integers (Python ints inside)."""
    shift, bits = _int(shift, "shift"), _int(bits, "bits")
    if shift < 0 or bits < 1:
        raise ValueError(f"shift must be >= 0 and bits >= 1, not {shift} and {bits}")
    lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
    a = np.asarray(acc, dtype=object)
    q = (a + ((1 << shift) // 2)) // (1 << shift)     # floor division: rounds half up
    return np.clip(q, lo, hi).astype(np.int64)


# --- pooling -------------------------------------------------------------------------------------

POOL_KINDS = ("max", "avg", "global_avg")


def _pool_params(x_shape, kind, kernel, stride, padding):
    """``(kernel, stride, padding, (oh, ow))`` as pairs, checked; ``global_avg`` takes the
    whole input as its window (its ``kernel``, ``stride`` and ``padding`` are ignored)."""
    if kind not in POOL_KINDS:
        raise ValueError(f"kind must be one of {', '.join(POOL_KINDS)}, not {kind!r}")
    h, w = x_shape[2], x_shape[3]
    if kind == "global_avg":
        return (h, w), (1, 1), (0, 0), (1, 1)
    k = size_pair(kernel, "kernel")
    st = k if stride is None else pair(stride, "stride")
    p = pair(padding, "padding")
    if min(st) < 1:
        raise ValueError(f"stride must be >= 1, not {stride!r}")
    if min(p) < 0 or p[0] > k[0] // 2 or p[1] > k[1] // 2:
        raise ValueError(f"padding must be in [0, kernel // 2] per axis, not {padding!r} for "
                         f"kernel {k}")
    if k[0] > h + 2 * p[0] or k[1] > w + 2 * p[1]:
        raise ValueError(f"the {k[0]} x {k[1]} window is larger than the {h} x {w} input "
                         f"padded by {p}")
    out = ((h + 2 * p[0] - k[0]) // st[0] + 1, (w + 2 * p[1] - k[1]) // st[1] + 1)
    return k, st, p, out


def _round_div(num, den):
    """``num / den`` rounded to the nearest integer, halves up (exact, integers)."""
    return (2 * num + den) // (2 * den)


def _windows(x, kind, k, st, p, out):
    """The padded input's windows, N x C x OH x OW x (R S) in window order (row-major), with
    a mask of the taps inside the input."""
    n, c, h, w = x.shape
    fill = np.iinfo(np.int64).min if kind == "max" else 0
    xp = np.full((n, c, h + 2 * p[0], w + 2 * p[1]), fill, dtype=np.int64)
    xp[:, :, p[0]:p[0] + h, p[1]:p[1] + w] = x
    inside = np.zeros((h + 2 * p[0], w + 2 * p[1]), dtype=bool)
    inside[p[0]:p[0] + h, p[1]:p[1] + w] = True
    taps, masks = [], []
    for r in range(k[0]):
        for q in range(k[1]):
            rows = slice(r, r + st[0] * (out[0] - 1) + 1, st[0])
            cols = slice(q, q + st[1] * (out[1] - 1) + 1, st[1])
            taps.append(xp[:, :, rows, cols])
            masks.append(inside[rows, cols])
    return np.stack(taps, axis=-1), np.stack(masks, axis=-1)


def pool2d(x, kind, kernel=None, stride=None, padding=0):
    """Pooling of ``x`` (N x C x H x W integers) by ``kind``:

    - ``"max"``: the window's maximum; padding never wins (it is not an element);
    - ``"avg"``: the window's sum over ``R x S`` divided by ``R S``, rounded to nearest with
      halves up; padding counts as zeros in the ``R S`` (PyTorch's default
      ``count_include_pad=True``), so the result is PyTorch's ``avg_pool2d`` rounded;
    - ``"global_avg"``: the sum of each ``H x W`` plane over ``H W``, rounded likewise.

    ``stride`` defaults to the kernel; ``padding`` is at most ``kernel // 2`` per axis. Returns
    N x C x OH x OW int64."""
    x = _tensor(x, "x")
    k, st, p, out = _pool_params(x.shape, kind, kernel, stride, padding)
    win, _ = _windows(x, kind, k, st, p, out)
    if kind == "max":
        return win.max(axis=-1)
    return _round_div(win.sum(axis=-1), k[0] * k[1])


def pool2d_backward(dy, x, kind, kernel=None, stride=None, padding=0, tie="first"):
    """dX (N x C x H x W int64) of :func:`pool2d` for the output gradient ``dy``:

    - ``"max"``: each dY goes to its window's maximum in ``x``; with ``tie="first"`` to the
      first maximum in window order (row-major, what the major frameworks do), with
      ``tie="all"`` to every maximum (the rule of Rohwedder's thesis);
    - ``"avg"``, ``"global_avg"``: every input element receives the sum of the dY of the
      windows that cover it (col2im, overlaps summed), divided by ``R S`` and rounded to
      nearest with halves up, once (so the result is PyTorch's float gradient rounded).

    Overlapping windows (stride < kernel) add up; padding taps receive nothing."""
    x = _tensor(x, "x")
    dy = _tensor(dy, "dy")
    if tie not in ("first", "all"):
        raise ValueError(f"tie must be 'first' or 'all', not {tie!r}")
    k, st, p, out = _pool_params(x.shape, kind, kernel, stride, padding)
    n, c, h, w = x.shape
    if dy.shape != (n, c) + out:
        raise ValueError(f"dy must have shape {(n, c) + out}, not {dy.shape}")
    win, mask = _windows(x, kind, k, st, p, out)
    if kind == "max":
        hit = win == win.max(axis=-1, keepdims=True)
        if tie == "first":
            first = hit.argmax(axis=-1)
            hit = np.arange(k[0] * k[1]) == first[..., None]
        share = np.where(hit & mask, dy[..., None], 0)
    else:
        share = np.where(mask, dy[..., None], 0)
    dxp = np.zeros((n, c, h + 2 * p[0], w + 2 * p[1]), dtype=np.int64)
    for t in range(k[0] * k[1]):                       # col2im: each tap's slice, summed
        r, q = divmod(t, k[1])
        rows = slice(r, r + st[0] * (out[0] - 1) + 1, st[0])
        cols = slice(q, q + st[1] * (out[1] - 1) + 1, st[1])
        dxp[:, :, rows, cols] += share[..., t]
    dx = dxp[:, :, p[0]:p[0] + h, p[1]:p[1] + w]
    if kind != "max":
        dx = _round_div(dx, k[0] * k[1])
    return dx


# --- explicit im2col lowerings -------------------------------------------------------------------

@dataclass(frozen=True, eq=False)
class Lowering:
    """The two GEMM operands of one phase, lowered by explicit im2col with their zero-spaces.

    ``c = gemm(a, b)`` followed by :meth:`result` gives the direct result of the phase.

    Members
    -------
    phase : str
        ``"forward"``, ``"loss"`` (input gradient dX) or ``"gradient"`` (weight gradient dW).
    a, b : int64 ndarray
        The operands, M x Kg and Kg x Ng, zero-spaces included.
    a_src, b_src : int64 ndarray
        Same shapes as ``a`` / ``b``: the flat (C-order) index of each element in its source
        tensor (named by ``a_from`` / ``b_from``: ``"x"``, ``"w"`` or ``"dy"``), or -1 where the
        element is a structural zero. This is the golden model of an address generator:
        ``a == where(a_src < 0, 0, source.ravel()[a_src])``.
    a_from, b_from : str
        The source tensor of ``a`` / ``b``.
    a_zero, b_zero : bool ndarray
        True where the element is a structural zero-space element (inserted or padding zero,
        independent of the data): ``a_src < 0`` / ``b_src < 0``.
    out_shape : tuple
        Shape of the direct result (NCHW for Y and dX, KCRS for dW).
    """
    phase: str
    a: np.ndarray
    b: np.ndarray
    a_src: np.ndarray
    b_src: np.ndarray
    a_from: str
    b_from: str
    out_shape: tuple
    _grid: tuple       # shape that c is reshaped into before transposing
    _axes: tuple       # transposition from _grid to out_shape

    @property
    def a_zero(self):
        return self.a_src < 0

    @property
    def b_zero(self):
        return self.b_src < 0

    @property
    def a_zero_fraction(self):
        """Fraction of ``a`` that is structural zeros."""
        return zero_fraction(self.a_zero)

    @property
    def b_zero_fraction(self):
        """Fraction of ``b`` that is structural zeros."""
        return zero_fraction(self.b_zero)

    @property
    def zero_fraction(self):
        """Fraction of the elements of ``a`` and ``b`` together that are structural zeros."""
        return zero_fraction(self.a_zero, self.b_zero)

    def result(self, c):
        """Reshape the GEMM product ``c`` (``a.shape[0]`` x ``b.shape[1]``) into ``out_shape``."""
        c = np.asarray(c)
        if c.shape != (self.a.shape[0], self.b.shape[1]):
            raise ValueError(f"c must have shape {(self.a.shape[0], self.b.shape[1])}, "
                             f"not {c.shape}")
        return np.ascontiguousarray(c.reshape(self._grid).transpose(self._axes))


def _gather(source, src):
    """``source.ravel()[src]`` with 0 where ``src == -1``, as a read-only int64 array."""
    flat = np.concatenate([source.ravel(), np.zeros(1, dtype=np.int64)])
    out = flat[src]          # index -1 reads the appended zero
    out.setflags(write=False)
    return out


def _lowering(phase, a_source, a_src, a_from, b_source, b_src, b_from, out_shape, grid, axes):
    a_src = a_src.astype(np.int64)
    b_src = b_src.astype(np.int64)
    a_src.setflags(write=False)
    b_src.setflags(write=False)
    return Lowering(phase=phase, a=_gather(a_source, a_src), b=_gather(b_source, b_src),
                    a_src=a_src, b_src=b_src, a_from=a_from, b_from=b_from,
                    out_shape=tuple(out_shape), _grid=tuple(grid), _axes=tuple(axes))


def _ix(*vectors):
    """Open mesh of index vectors (like ``np.ix_``) for broadcasting."""
    return np.ix_(*[np.asarray(v, dtype=np.int64) for v in vectors])


def _window_rows(out, kernel, s, d, p, size):
    """Per-axis input index ``o*s + r*d - p`` (shape out x kernel) or -1 outside ``[0, size)``."""
    idx = np.arange(out)[:, None] * s + np.arange(kernel)[None, :] * d - p
    return np.where((idx >= 0) & (idx < size), idx, -1)


def _flat4(shape, i0, i1, i2, i3):
    """Flat C-order index into a 4-D tensor; -1 where the axis-2 or axis-3 index is -1."""
    flat = ((i0 * shape[1] + i1) * shape[2] + i2) * shape[3] + i3
    return np.where((i2 < 0) | (i3 < 0), -1, flat)


def lower_forward(x, w, stride=1, padding=0, dilation=1):
    """Explicit im2col of the forward convolution.

    - ``a``: (N*OH*OW) x (C*R*S), rows ``(n, oh, ow)``, columns ``(c, r, q)``; element
      ``X[n, c, oh*s + r*d - p, ow*s + q*d - p]``, structural zero in the padding.
    - ``b``: (C*R*S) x K, ``W`` reshaped: ``b[(c, r, q), k] = W[k, c, r, q]``; no zeros.
    - ``result(c)``: (N*OH*OW) x K -> N x K x OH x OW.
    """
    x = _tensor(x, "x")
    w = _tensor(w, "w")
    layer = conv_operands("forward", x=x, w=w, stride=stride, padding=padding,
                          dilation=dilation)
    s, p, d = layer.stride, layer.pad, layer.dil
    (n, c, h, wd), (k, _, r_n, s_n), (oh, ow) = x.shape, w.shape, layer.out_hw
    hh = _window_rows(oh, r_n, s[0], d[0], p[0], h)     # [oh, r]
    ww = _window_rows(ow, s_n, s[1], d[1], p[1], wd)    # [ow, q]
    i_n, i_oh, i_ow, i_c, i_r, i_q = _ix(range(n), range(oh), range(ow), range(c), range(r_n),
                                        range(s_n))
    a_src = _flat4(x.shape, i_n, i_c, hh[i_oh, i_r], ww[i_ow, i_q])
    a_src = a_src.reshape(n * oh * ow, c * r_n * s_n)
    j_c, j_r, j_q, j_k = _ix(range(c), range(r_n), range(s_n), range(k))
    b_src = (((j_k * c + j_c) * r_n + j_r) * s_n + j_q).reshape(c * r_n * s_n, k)
    return _lowering("forward", x, a_src, "x", w, b_src, "w", (n, k, oh, ow),
                     (n, oh, ow, k), (0, 3, 1, 2))


def _virtual_map(out, kernel, size, s, d, p):
    """Per-axis loss mapping: dY index read by output ``h`` and rotated tap ``r``, or -1.

    The virtual map is dY with ``s-1`` zeros inserted between pixels, ``d(R-1) - p`` zeros
    padded before it (cropped instead when negative) and as many after it as make its length
    ``size + d(R-1)``; output ``h`` and tap ``r`` read virtual position ``h + r*d``.
    """
    pad_lo = d * (kernel - 1) - p
    z = np.arange(size)[:, None] + np.arange(kernel)[None, :] * d - pad_lo   # [h, r]
    ok = (z >= 0) & (z <= s * (out - 1)) & (z % s == 0)
    return np.where(ok, z // s, -1)


def lower_input_grad(dy, w, input_hw, stride=1, padding=0, dilation=1):
    """Explicit im2col of the loss ``dX`` as a traditional accelerator builds it (BP-im2col).

    The loss is a stride-1 convolution, with dilation ``d``, of the *virtual map* by the
    180-degree-rotated, channel-transposed kernel. The virtual map is dY with ``s-1`` zeros
    inserted between its pixels, ``d(R-1) - p`` zeros padded above/left (cropped when
    ``p > d(R-1)``) and ``d(R-1) - p + (H + 2p - d(R-1) - 1) % s`` below/right, so that it is
    ``H + d(R-1)`` by ``W + d(S-1)`` and the output is exactly H x W.

    - ``a``: C x (K*R*S), the rotated, channel-transposed kernel:
      ``a[c, (k, r, q)] = W[k, c, R-1-r, S-1-q]``; no zeros ("dynamic matrix A").
    - ``b``: (K*R*S) x (N*H*W), rows ``(k, r, q)``, columns ``(n, h, w)``:
      ``b[(k, r, q), (n, h, w)] = V[n, k, h + r*d, w + q*d]`` for the virtual map V; structural
      zero at every inserted or padding zero ("stationary matrix B").
    - ``result(c)``: C x (N*H*W) -> N x C x H x W.
    """
    dy = _tensor(dy, "dy")
    w = _tensor(w, "w")
    layer = conv_operands("loss", dy=dy, w=w, input_hw=input_hw, stride=stride,
                          padding=padding, dilation=dilation)
    s, p, d = layer.stride, layer.pad, layer.dil
    (h, wd), (k, c, r_n, s_n), (oh, ow) = (layer.height, layer.width), w.shape, layer.out_hw
    n = dy.shape[0]
    i_c, i_k, i_r, i_q = _ix(range(c), range(k), range(r_n), range(s_n))
    a_src = (((i_k * c + i_c) * r_n + (r_n - 1 - i_r)) * s_n + (s_n - 1 - i_q))
    a_src = a_src.reshape(c, k * r_n * s_n)
    vh = _virtual_map(oh, r_n, h, s[0], d[0], p[0])     # [h, r]
    vw = _virtual_map(ow, s_n, wd, s[1], d[1], p[1])    # [w, q]
    j_k, j_r, j_q, j_n, j_h, j_w = _ix(range(k), range(r_n), range(s_n), range(n), range(h),
                                      range(wd))
    b_src = _flat4(dy.shape, j_n, j_k, vh[j_h, j_r], vw[j_w, j_q])
    b_src = b_src.reshape(k * r_n * s_n, n * h * wd)
    return _lowering("loss", w, a_src, "w", dy, b_src, "dy", (n, c, h, wd),
                     (c, n, h, wd), (1, 0, 2, 3))


def lower_weight_grad(x, dy, kernel_hw, stride=1, padding=0, dilation=1):
    """Explicit im2col of the gradient ``dW`` as a traditional accelerator builds it (BP-im2col).

    The gradient is a stride-1 convolution of the zero-padded X by the *dilated dY* (dY with
    ``s-1`` zeros inserted between pixels, ``Hd = s(OH-1) + 1`` by ``Wd = s(OW-1) + 1``), whose
    windows are ``d`` apart.

    - ``a``: K x (N*Hd*Wd), rows ``k``, columns ``(n, i, j)``: ``a[k, (n, i, j)] =
      dY[n, k, i/s, j/s]`` when ``s`` divides ``i`` and ``j``, else a structural (inserted) zero
      ("dynamic matrix A").
    - ``b``: (N*Hd*Wd) x (C*R*S), rows ``(n, i, j)``, columns ``(c, r, q)``: ``b[(n, i, j),
      (c, r, q)] = X[n, c, i + r*d - p, j + q*d - p]``; structural zero in the padding.
    - ``result(c)``: K x (C*R*S) -> K x C x R x S.
    """
    x = _tensor(x, "x")
    dy = _tensor(dy, "dy")
    layer = conv_operands("gradient", x=x, dy=dy, kernel_hw=kernel_hw, stride=stride,
                          padding=padding, dilation=dilation)
    s, p, d = layer.stride, layer.pad, layer.dil
    (n, c, h, wd), k, (oh, ow) = x.shape, layer.out_channels, layer.out_hw
    r_n, s_n = layer.kernel_h, layer.kernel_w
    hd, wdd = s[0] * (oh - 1) + 1, s[1] * (ow - 1) + 1
    ih = np.where(np.arange(hd) % s[0] == 0, np.arange(hd) // s[0], -1)
    iw = np.where(np.arange(wdd) % s[1] == 0, np.arange(wdd) // s[1], -1)
    i_k, i_n, i_i, i_j = _ix(range(k), range(n), range(hd), range(wdd))
    a_src = _flat4(dy.shape, i_n, i_k, ih[i_i], iw[i_j]).reshape(k, n * hd * wdd)
    # The window of tap r at dilated-dY row i reads padded X row i + r*d.
    xh = _window_rows(hd, r_n, 1, d[0], p[0], h)     # [i, r]
    xw = _window_rows(wdd, s_n, 1, d[1], p[1], wd)   # [j, q]
    j_n, j_i, j_j, j_c, j_r, j_q = _ix(range(n), range(hd), range(wdd), range(c), range(r_n),
                                      range(s_n))
    b_src = _flat4(x.shape, j_n, j_c, xh[j_i, j_r], xw[j_j, j_q])
    b_src = b_src.reshape(n * hd * wdd, c * r_n * s_n)
    return _lowering("gradient", dy, a_src, "dy", x, b_src, "x", (k, c, r_n, s_n),
                     (k, c, r_n, s_n), (0, 1, 2, 3))


# --- zero-space statistics -----------------------------------------------------------------------

def zero_fraction(*masks):
    """Fraction of True elements over all the given boolean masks together (0.0 if empty)."""
    total = sum(np.size(m) for m in masks)
    if total == 0:
        return 0.0
    return sum(int(np.count_nonzero(m)) for m in masks) / total


def _axis_hits(out, kernel, size, s, d, p):
    """Number of (output, tap) pairs of one axis whose input index ``o*s + r*d - p`` is inside
    ``[0, size)``, in closed form per tap."""
    hits = 0
    for r in range(kernel):
        lo = max(0, -(-(p - r * d) // s))              # ceil((p - r*d) / s)
        hi = min(out - 1, (size - 1 + p - r * d) // s)
        hits += max(0, hi - lo + 1)
    return hits


def _axis_covered(length, kernel, size, d, p):
    """Number of (position i in [0, length), tap r) pairs with ``p <= i + r*d < p + size``."""
    return sum(max(0, min(length, p + size - r * d) - max(0, p - r * d)) for r in range(kernel))


def structural_zero_counts(phase, input_hw, kernel_hw, stride=1, padding=0, dilation=1, *,
                           in_channels=1, out_channels=1, batch=1):
    """Closed-form sizes and structural-zero counts of the lowered operands of one phase.

    ``phase`` is ``"forward"``, ``"loss"`` or ``"gradient"``, with the operand orientations of
    :func:`lower_forward`, :func:`lower_input_grad` and :func:`lower_weight_grad`. Returns a dict
    with integer ``a_size``, ``a_zeros``, ``b_size``, ``b_zeros``. Computed without building
    any matrix, so it works for full-size layers.
    """
    s, p, d = _params(stride, padding, dilation)
    hw = size_pair(input_hw, "input_hw")
    rs = size_pair(kernel_hw, "kernel_hw")
    oh, ow = _out_hw(hw, rs, s, p, d)
    c, k, n = (_int(in_channels, "in_channels"), _int(out_channels, "out_channels"),
               _int(batch, "batch"))
    if min(c, k, n) < 1:
        raise ValueError(f"in_channels, out_channels and batch must be >= 1, not {(c, k, n)}")
    taps = rs[0] * rs[1]
    # Per (n, c) pair: how many (output pixel, tap) pairs read a real input pixel.
    hits = (_axis_hits(oh, rs[0], hw[0], s[0], d[0], p[0])
            * _axis_hits(ow, rs[1], hw[1], s[1], d[1], p[1]))
    if phase == "forward":
        a_size = n * oh * ow * c * taps
        a_zeros = a_size - n * c * hits
        b_size, b_zeros = c * taps * k, 0
    elif phase == "loss":
        # Every non-zero of B is a (dY pixel, tap) pair that lands inside X: the same pairs.
        a_size, a_zeros = c * k * taps, 0
        b_size = k * taps * n * hw[0] * hw[1]
        b_zeros = b_size - n * k * hits
    elif phase == "gradient":
        hd, wd = s[0] * (oh - 1) + 1, s[1] * (ow - 1) + 1
        a_size = k * n * hd * wd
        a_zeros = a_size - k * n * oh * ow
        b_size = n * hd * wd * c * taps
        covered = (_axis_covered(hd, rs[0], hw[0], d[0], p[0])
                   * _axis_covered(wd, rs[1], hw[1], d[1], p[1]))
        b_zeros = b_size - n * c * covered
    else:
        raise ValueError(f"phase must be 'forward', 'loss' or 'gradient', not {phase!r}")
    return {"a_size": a_size, "a_zeros": a_zeros, "b_size": b_size, "b_zeros": b_zeros}
