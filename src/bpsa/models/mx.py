"""OCP MX block formats (``docs/architecture/mx.md``): the public quantizer and the golden
model of the block dot product, in integers.

:func:`quantize` converts ``float32`` values to element codes and E8M0 scale codes, blocks of
:data:`~bpsa.spec.numeric.MX_BLOCK` along one axis, per OCP MX v1.0 section 6.3 (the
``"floor"`` scale) or with the scale rounded up (``"ceil"``, a named option); :func:`dequantize`
inverts it exactly. :func:`matmul` is the contract's block dot product: each block's products
summed exactly in integers, the block's sum scaled by its two exponents and added into an fp32
accumulator, rounded once per block, blocks in order along the reduction axis.

The conversion in short (the document has the reasons):

- a block's scale ``X``: ``floor(log2(amax)) - emax`` of the element type (``"floor"``), or the
  smallest ``X`` with ``amax <= max_value * 2**X`` (``"ceil"``); clamped to ``[-127, 127]``;
  an all-zero block has ``X = -127`` (code 0);
- each element ``x / 2**X`` rounded to nearest even on the element's grid (its subnormals
  included), saturated to the element's largest finite magnitude (``int8``: +-127 steps);
  a result that rounds to zero keeps the sign in FP8 (``-0`` is ``0x80``);
- a block with a NaN or an infinity: scale code 255 (NaN), element codes 0;
- ``float32`` subnormal inputs are read exactly; other inputs are first cast to ``float32``.
"""

import numpy as np

from bpsa.models.floating import round_to
from bpsa.spec.layer import conv_params, output_hw
from bpsa.spec.numeric import (FLOAT_FORMATS, MX_BLOCK, MX_SCALE_BIAS, MX_SCALE_NAN,
                               MX_SCALE_RULES, mx_format)

__all__ = ["accumulate_block", "accumulate_blocks", "block_values", "conv_forward", "conv_gradient", "conv_loss",
           "dequantize", "element_ints", "matmul", "quantize", "walker_segments"]

_F32 = FLOAT_FORMATS["fp32"]


def _blocked(x, axis):
    """``x`` moved so that ``axis`` is last, zero-padded to whole blocks and split: shape
    ``(..., blocks, MX_BLOCK)``; and the unpadded length."""
    x = np.moveaxis(x, axis, -1)
    n = x.shape[-1]
    nb = -(-n // MX_BLOCK)
    pad = np.zeros(x.shape[:-1] + (nb * MX_BLOCK - n,), dtype=x.dtype)
    return np.concatenate([x, pad], axis=-1).reshape(x.shape[:-1] + (nb, MX_BLOCK)), n


def _floor_log2(a):
    """``floor(log2(a))`` of positive float64 values, exactly (``frexp``)."""
    return np.frexp(a)[1].astype(np.int64) - 1


def _scales(blocks, f, rule):
    """Per block: the scale exponent ``X`` (int64) and whether the block has a NaN or inf."""
    special = ~np.isfinite(blocks).all(axis=-1)
    amax = np.where(special, 0.0, np.abs(np.where(np.isfinite(blocks), blocks, 0.0)).max(axis=-1))
    zero = amax == 0
    safe = np.where(zero, 1.0, amax)
    x = _floor_log2(safe) - f.emax
    if rule == "ceil":
        x = x + (safe > f.max_value * np.ldexp(1.0, x)).astype(np.int64)
    x = np.clip(np.where(zero, -MX_SCALE_BIAS, x), -MX_SCALE_BIAS, MX_SCALE_BIAS)
    return x, special


def _round_elements(v, f):
    """``v`` (float64, already divided by the scale) rounded to nearest even on the element
    grid and saturated: the signed integer number of steps ``2**quantum_exp`` (int64)."""
    if f.is_int:
        q = np.full(v.shape, f.quantum_exp, dtype=np.int64)
    else:
        mag = np.where(v == 0, 1.0, np.abs(v))
        q = np.maximum(_floor_log2(mag), f.emin) - f.man_bits
    n = np.rint(np.ldexp(v, -q))                    # exact: v has <= 24 significant bits
    steps = np.ldexp(np.abs(n), q - f.quantum_exp)  # in units of 2**quantum_exp, exact
    steps = np.minimum(steps, float(f.max_int)).astype(np.int64)
    return np.where(n < 0, -steps, steps)


def _encode(ints, negative, f):
    """Element codes (uint8) of signed step counts; ``negative`` keeps FP8's ``-0``."""
    if f.is_int:
        return (ints & 0xFF).astype(np.uint8)
    mag = np.abs(ints)
    # mag = M << (E - 1) with M in [2**m, 2**(m+1)) for E >= 1, or mag = M (E = 0)
    top = np.where(mag == 0, 0, np.frexp(np.maximum(mag, 1).astype(np.float64))[1] - 1)
    e_field = np.maximum(top - f.man_bits + 1, 0)
    man = np.where(e_field > 0, (mag >> np.maximum(e_field - 1, 0)) - (1 << f.man_bits), mag)
    code = (e_field << f.man_bits) | man
    sign = np.where(mag == 0, negative, ints < 0)
    return (code | (sign.astype(np.int64) << 7)).astype(np.uint8)


def quantize(x, fmt, axis=-1, *, scale_rule="floor"):
    """``(codes, scales)``: ``x`` in the MX format ``fmt`` (a name of
    :data:`~bpsa.spec.numeric.MX_FORMATS`), blocks of 32 along ``axis`` (a shorter last block
    is padded with zeros for its scale).

    ``codes`` are the element codes (``uint8``, the shape of ``x``); ``scales`` the E8M0 codes
    (``uint8``, the shape of ``x`` with ``axis`` of length ``ceil(n / 32)``). ``scale_rule``:
    ``"floor"`` (OCP MX 6.3, the default) or ``"ceil"`` (:data:`MX_SCALE_RULES`)."""
    f = mx_format(fmt)
    if scale_rule not in MX_SCALE_RULES:
        raise ValueError(f"scale_rule must be one of {list(MX_SCALE_RULES)}, not {scale_rule!r}")
    x = np.asarray(x)
    if x.ndim == 0:
        raise ValueError("quantize takes an array of at least one dimension")
    blocks, n = _blocked(x.astype(np.float32).astype(np.float64), axis)
    xs, special = _scales(blocks, f, scale_rule)
    v = np.where(np.isfinite(blocks), blocks, 0.0)
    v = np.ldexp(v, -xs[..., None])
    v = np.where(special[..., None], 0.0, v)
    codes = _encode(_round_elements(v, f), np.signbit(v), f)
    codes = codes.reshape(codes.shape[:-2] + (-1,))[..., :n]
    scales = np.where(special, MX_SCALE_NAN, xs + MX_SCALE_BIAS).astype(np.uint8)
    return np.moveaxis(codes, -1, axis), np.moveaxis(scales, -1, axis)


def element_ints(codes, fmt):
    """``(ints, nan, inf)``: each element code's value in steps of ``2**quantum_exp``
    (int64, signed), and masks of the codes that are NaN or infinite (their ``ints`` are 0)."""
    f = mx_format(fmt)
    c = np.asarray(codes).astype(np.int64)
    if f.is_int:
        return np.where(c >= 128, c - 256, c), np.zeros(c.shape, bool), np.zeros(c.shape, bool)
    mag, neg = c & 0x7F, c >> 7
    e_field, man = mag >> f.man_bits, mag & ((1 << f.man_bits) - 1)
    top = (1 << f.exp_bits) - 1
    if f.name == "mxfp8_e4m3":
        nan, inf = mag == 0x7F, np.zeros(c.shape, bool)
    else:
        nan, inf = (e_field == top) & (man != 0), (e_field == top) & (man == 0)
    ints = np.where(e_field > 0, (man | (1 << f.man_bits)) << np.maximum(e_field - 1, 0), man)
    ints = np.where(nan | inf, 0, ints)
    return np.where(neg == 1, -ints, ints), nan, inf


def dequantize(codes, scales, fmt, axis=-1):
    """The values of MX ``codes`` with their ``scales`` (as :func:`quantize` returns them),
    exactly, as float64: NaN where the scale or the element is NaN, +-inf for E5M2's
    infinities."""
    f = mx_format(fmt)
    codes, scales = np.asarray(codes), np.asarray(scales)
    ints, nan, inf = element_ints(codes, f)
    s = np.repeat(np.moveaxis(scales, axis, -1).astype(np.int64), MX_BLOCK, axis=-1)
    s = np.moveaxis(s[..., :codes.shape[axis]], -1, axis)
    val = np.ldexp(ints.astype(np.float64), s - MX_SCALE_BIAS + f.quantum_exp)
    neg = (codes.astype(np.int64) >> 7) == 1
    val = np.where(inf, np.where(neg, -np.inf, np.inf), val)
    return np.where(nan | (s == MX_SCALE_NAN), np.nan, val)


def _zero_codes(codes, f):
    """Masks of the element codes that are zeros (FP8: of either sign)."""
    c = np.asarray(codes).astype(np.int64)
    return c == 0 if f.is_int else (c & 0x7F) == 0


def block_values(codes, scales, fmt):
    """Per block of a blocked operand (last axis the elements, ``(..., blocks, 32)`` codes and
    ``(..., blocks)`` scales): the element step counts, the block exponent ``X + quantum_exp``
    and whether the block is NaN (a NaN scale, or a NaN or infinite element)."""
    f = mx_format(fmt)
    ints, nan, inf = element_ints(codes, f)
    scales = np.asarray(scales).astype(np.int64)
    bad = (scales == MX_SCALE_NAN) | (nan | inf).any(axis=-1)
    return ints, scales - MX_SCALE_BIAS + f.quantum_exp, bad


def accumulate_block(acc, s, e, bad):
    """One block into an fp32 encoding under the contract: NaN block -> canonical NaN; a zero
    block sum leaves ``acc``; otherwise ``acc + s * 2**e`` exactly, rounded once."""
    if bad:
        return _F32.nan
    if s == 0:
        return acc
    exp_field, frac, sign = (acc >> 23) & 0xFF, acc & 0x7FFFFF, acc >> 31
    if exp_field == 0xFF:
        return _F32.nan if frac else acc
    if exp_field == 0:                                   # zero (or a subnormal: zero)
        return round_to(int(s < 0), abs(s), e, _F32)
    ma, ea = frac | (1 << 23), exp_field - 127 - 23
    e0 = min(ea, e)
    total = (-1) ** sign * (ma << (ea - e0)) + s * (1 << (e - e0))
    if total == 0:
        return 0
    return round_to(int(total < 0), abs(total), e0, _F32)


def accumulate_blocks(acc, s, e, bad):
    """:func:`accumulate_block` on arrays (broadcast): the same encodings, computed in float64.

    ``acc`` (an fp32 encoding) and ``s * 2**e`` (``|s| < 2**53``) are exact float64 values;
    their sum is taken with TwoSum (rounded sum and its exact error) and rounded to odd at 53
    bits, which then rounds to nearest even at 24 bits exactly as the exact sum would (53 >=
    24 + 2). The unbounded-exponent rounding, the flush below 2^-126, the overflow to infinity
    and the specials follow :func:`accumulate_block`, which the tests hold this equal to."""
    acc = np.asarray(acc, dtype=np.uint32)
    s, e, bad = np.asarray(s, dtype=np.int64), np.asarray(e, dtype=np.int64), np.asarray(bad)
    acc, s, e, bad = np.broadcast_arrays(acc, s, e, bad)
    exp_field, frac = (acc >> 23) & 0xFF, acc & 0x7FFFFF
    with np.errstate(all="ignore"):         # specials are replaced below
        a = np.where((exp_field == 0) | (exp_field == 0xFF), 0.0,
                     np.ascontiguousarray(acc).view(np.float32).astype(np.float64))
        b = np.ldexp(s.astype(np.float64), e)
        total = a + b
        bb = total - a
        err = (a - (total - bb)) + (b - bb)
        odd = (total.view(np.uint64) & 1) == 1
        toward = np.where(err > 0, np.inf, -np.inf)
        total = np.where((err != 0) & ~odd, np.nextafter(total, toward), total)
        mant, ex = np.frexp(total)
        r = np.ldexp(np.rint(np.ldexp(mant, 24)), ex - 24)
    tiny, huge = 2.0 ** -126, 2.0 ** 128
    sign = np.signbit(total).astype(np.uint32) << 31
    out = np.where(np.abs(r) < tiny, sign,
                   np.where(np.abs(r) >= huge, sign | np.uint32(0x7F800000),
                            np.where(np.abs(r) >= huge, 0.0, r).astype(np.float32)
                            .view(np.uint32)))
    out = np.where(total == 0, np.uint32(0), out)
    out = np.where(exp_field == 0xFF, np.where(frac != 0, np.uint32(_F32.nan), acc), out)
    out = np.where(s == 0, acc, out)
    return np.where(bad, np.uint32(_F32.nan), out).astype(np.uint32)


def matmul(a_codes, a_scales, b_codes, b_scales, fmt, acc=None):
    """The contract's block dot product of ``A`` (``M x K`` codes, ``M x ceil(K/32)`` scales,
    blocked along K) and ``B`` (``K x N`` codes, ``ceil(K/32) x N`` scales, blocked along K):
    the ``M x N`` fp32 encodings (``uint32``). Blocks are added in order of K, each one
    rounding, into ``acc`` (fp32 encodings; ``+0`` when not given). A block's sum is exact in
    integers (Python integers where int64 could overflow); the blocks are folded by
    :func:`accumulate_blocks` (or :func:`accumulate_block` when a sum can exceed 2^53)."""
    f = mx_format(fmt)
    a_codes, b_codes = np.asarray(a_codes), np.asarray(b_codes)
    m, k = a_codes.shape
    k2, n = b_codes.shape
    if k != k2:
        raise ValueError(f"A is {m} x {k} but B is {k2} x {n}")
    nb = -(-k // MX_BLOCK)
    if np.shape(a_scales) != (m, nb) or np.shape(b_scales) != (nb, n):
        raise ValueError(f"scales must be {m} x {nb} (A) and {nb} x {n} (B), not "
                         f"{np.shape(a_scales)} and {np.shape(b_scales)}")
    a_blocks, b_blocks = _blocked(a_codes, 1)[0], _blocked(b_codes, 0)[0]
    ai, ae, _ = block_values(a_blocks, a_scales, f)
    bi, be, _ = block_values(b_blocks, np.asarray(b_scales).T, f)
    # a NaN or infinite element makes its block NaN unless its partner element is a zero
    # (a product with a zero element is skipped); a NaN scale always does
    _, an, ainf = element_ints(a_blocks, f)
    _, bn, binf = element_ints(b_blocks, f)
    azero, bzero = _zero_codes(a_blocks, f), _zero_codes(b_blocks, f)
    special = (np.einsum("mjk,njk->mnj", (an | ainf).astype(np.int64), (~bzero).astype(np.int64))
               + np.einsum("mjk,njk->mnj", (~azero).astype(np.int64), (bn | binf).astype(np.int64))) > 0
    abad = np.asarray(a_scales) == MX_SCALE_NAN
    bbad = np.asarray(b_scales).T == MX_SCALE_NAN
    wide = 2 * f.max_int.bit_length() + 6 > 62
    if wide:
        ai, bi = ai.astype(object), bi.astype(object)
    sums = np.einsum("mjk,njk->mnj", ai, bi) if not wide else np.array(
        [[(ai[r] * bi[c]).sum(axis=-1) for c in range(n)] for r in range(m)], dtype=object)
    out = np.zeros((m, n), np.uint32) if acc is None else np.array(acc, np.uint32)
    if wide:
        for r in range(m):
            for c in range(n):
                v = int(out[r, c])
                for j in range(nb):
                    v = accumulate_block(v, int(sums[r, c, j]), int(ae[r, j] + be[c, j]),
                                         bool(abad[r, j] or bbad[c, j] or special[r, c, j]))
                out[r, c] = v
        return out
    for j in range(nb):             # the sums fit float64 exactly: accumulate_blocks
        out = accumulate_blocks(out, sums[:, :, j], ae[:, None, j] + be[None, :, j],
                                abad[:, None, j] | bbad[None, :, j] | special[:, :, j])
    return out


# --- the convolution phases (docs/architecture/mx.md, "Each phase's blocks") ---------------

def _float_tensor(a, name):
    a = np.asarray(a)
    if a.ndim != 4 or a.dtype.kind != "f":
        raise ValueError(f"{name} must be a 4-dimensional floating-point array, not "
                         f"{a.dtype} of shape {a.shape}")
    return a.astype(np.float32)


def _pad_axis(a, axis, to):
    """``a`` zero-padded along ``axis`` to length ``to``."""
    pad = [(0, 0)] * a.ndim
    pad[axis] = (0, to - a.shape[axis])
    return np.pad(a, pad)


def _tap_major(codes, scales, axis):
    """A blocked axis split into whole blocks: codes padded to ``32 * blocks`` along ``axis``."""
    return _pad_axis(codes, axis, scales.shape[axis] * MX_BLOCK), scales


def _tap_view(a, r, q, s, d, out_hw):
    """The positions of a padded N x C x H x W array that tap ``(r, q)`` reads for an
    ``out_hw`` output at stride ``s`` and dilation ``d``."""
    oh, ow = out_hw
    return a[:, :, r * d[0]:r * d[0] + s[0] * (oh - 1) + 1:s[0],
             q * d[1]:q * d[1] + s[1] * (ow - 1) + 1:s[1]]


def _geometry(stride, padding, dilation):
    return conv_params(stride, padding, dilation)


def conv_forward(x, w, fmt, stride=1, padding=0, dilation=1, *, scale_rule="floor",
                 part=None):
    """The forward ``Y`` (N x K x OH x OW fp32 encodings, ``uint32``) of ``x`` (N x C x H x W)
    by ``w`` (K x C x R x S) under the MX contract: X quantized along C at every pixel, W along
    C at every ``(k, r, s)``; each output's blocks are the channel blocks of each tap, taps in
    raster order.

    ``part`` (1 to 32): the channel-first front end's order instead. Each block's channels
    are folded in consecutive parts of ``part`` channels (a block's last part holds what is
    left of it), part after part in channel order and, for each part, tap after tap in
    raster order: a part's exact sum at one tap, scaled by the block's two scale codes, is one
    fold (one rounding)."""
    x, w = _float_tensor(x, "x"), _float_tensor(w, "w")
    (s, p, d) = _geometry(stride, padding, dilation)
    n, c, h, wd = x.shape
    k, c2, r_n, q_n = w.shape
    if c2 != c:
        raise ValueError(f"x has {c} channels but w has {c2}")
    oh, ow = output_hw((h, wd), (r_n, q_n), s, p, d)
    xc, xs = _tap_major(*quantize(x, fmt, axis=1, scale_rule=scale_rule), 1)
    wc, ws = _tap_major(*quantize(w, fmt, axis=1, scale_rule=scale_rule), 1)
    xc = np.pad(xc, ((0, 0), (0, 0), (p[0], p[0]), (p[1], p[1])))
    xs = np.pad(xs, ((0, 0), (0, 0), (p[0], p[0]), (p[1], p[1])))
    if part is not None:
        return _forward_in_parts(xc, xs, wc, ws, fmt, part, (s, d), (n, c, k, oh, ow))
    a_codes, a_scales, b_codes, b_scales = [], [], [], []
    for r in range(r_n):
        for q in range(q_n):
            for dst, src in ((a_codes, xc), (a_scales, xs)):
                dst.append(_tap_view(src, r, q, s, d, (oh, ow)).transpose(0, 2, 3, 1)
                           .reshape(n * oh * ow, -1))
            b_codes.append(wc[:, :, r, q].T)
            b_scales.append(ws[:, :, r, q].T)
    y = matmul(np.concatenate(a_codes, 1), np.concatenate(a_scales, 1),
               np.concatenate(b_codes, 0), np.concatenate(b_scales, 0), fmt)
    return np.ascontiguousarray(y.reshape(n, oh, ow, k).transpose(0, 3, 1, 2))


def _check_part(part):
    if not isinstance(part, (int, np.integer)) or isinstance(part, bool) \
            or not 1 <= part <= MX_BLOCK:
        raise ValueError(f"part must be an integer from 1 to {MX_BLOCK}, not {part!r}")


def _forward_in_parts(xc, xs, wc, ws, fmt, part, sd, dims):
    """:func:`conv_forward` with ``part``: the padded, blocked codes and scales of X and W
    folded part by part, tap by tap."""
    _check_part(part)
    (s, d), (n, c, k, oh, ow) = sd, dims
    out = np.zeros((n * oh * ow, k), np.uint32)
    for b in range(xs.shape[1]):
        for c0 in range(b * MX_BLOCK, min((b + 1) * MX_BLOCK, c), part):
            c1 = min(c0 + part, (b + 1) * MX_BLOCK, c)
            for r in range(wc.shape[2]):
                for q in range(wc.shape[3]):
                    a = _tap_view(xc[:, c0:c1], r, q, s, d, (oh, ow))
                    a_s = _tap_view(xs[:, b:b + 1], r, q, s, d, (oh, ow))
                    out = matmul(a.transpose(0, 2, 3, 1).reshape(-1, c1 - c0),
                                 a_s.transpose(0, 2, 3, 1).reshape(-1, 1),
                                 wc[:, c0:c1, r, q].T, ws[:, b:b + 1, r, q].T, fmt, acc=out)
    return np.ascontiguousarray(out.reshape(n, oh, ow, k).transpose(0, 3, 1, 2))


def conv_loss(dy, w, fmt, input_hw, stride=1, padding=0, dilation=1, *, scale_rule="floor",
              part=None):
    """The loss ``dX`` (N x C x H x W fp32 encodings) from ``dy`` (N x K x OH x OW) and ``w``
    (K x C x R x S) under the MX contract: dY quantized along K at every pixel, W along K at
    every ``(c, r, s)``; each input pixel's blocks are the K blocks of each tap, taps in raster
    order, a tap that reaches no dY position (off the stride grid, or outside dY) a zero
    block (which leaves the accumulator as it is).

    ``part`` (1 to 32): the channel-first order instead (the loss as the forwards of its
    stride classes, :mod:`bpsa.plan.loss_classes`): each K block folded in parts of ``part``
    channels (a block's last part holds what is left of it), part after part and, for each
    part, the taps in the order of the dY pixel they read (raster order of ``(oh, ow)``: ``r``
    and ``q`` decreasing)."""
    dy, w = _float_tensor(dy, "dy"), _float_tensor(w, "w")
    (s, p, d) = _geometry(stride, padding, dilation)
    h, wd = (input_hw, input_hw) if np.ndim(input_hw) == 0 else input_hw
    n, k, oh, ow = dy.shape
    k2, c, r_n, q_n = w.shape
    if k2 != k or output_hw((h, wd), (r_n, q_n), s, p, d) != (oh, ow):
        raise ValueError(f"dy {dy.shape} is not the output of a {h} x {wd} input by w "
                         f"{w.shape} at stride {s}, padding {p}, dilation {d}")
    gc, gs = _tap_major(*quantize(dy, fmt, axis=1, scale_rule=scale_rule), 1)
    wc, ws = _tap_major(*quantize(w, fmt, axis=0, scale_rule=scale_rule), 0)
    iy, ix = np.arange(h), np.arange(wd)
    a_codes, a_scales, b_codes, b_scales = [], [], [], []
    for r in range(r_n):
        for q in range(q_n):
            ty, tx = iy + p[0] - r * d[0], ix + p[1] - q * d[1]
            vy = (ty % s[0] == 0) & (ty >= 0) & (ty // s[0] < oh)
            vx = (tx % s[1] == 0) & (tx >= 0) & (tx // s[1] < ow)
            yy, xx = np.clip(ty // s[0], 0, oh - 1), np.clip(tx // s[1], 0, ow - 1)
            ok = (vy[:, None] & vx[None, :])[None, None]
            codes = np.where(ok, gc[:, :, yy][:, :, :, xx], 0)
            a_codes.append(codes.transpose(0, 2, 3, 1).reshape(n * h * wd, -1))
            scales = np.where(ok, gs[:, :, yy][:, :, :, xx], 0)      # never a NaN there
            a_scales.append(scales.transpose(0, 2, 3, 1).reshape(n * h * wd, -1))
            b_codes.append(wc[:, :, r, q])
            b_scales.append(ws[:, :, r, q])
    if part is None:
        dx = matmul(np.concatenate(a_codes, 1), np.concatenate(a_scales, 1),
                    np.concatenate(b_codes, 0), np.concatenate(b_scales, 0), fmt)
    else:
        _check_part(part)
        dx = np.zeros((n * h * wd, c), np.uint32)
        for b in range(gs.shape[1]):
            for k0 in range(b * MX_BLOCK, min((b + 1) * MX_BLOCK, k), part):
                k1 = min(k0 + part, (b + 1) * MX_BLOCK, k)
                for t in reversed(range(r_n * q_n)):    # the dY pixel read: raster order
                    dx = matmul(a_codes[t][:, k0:k1],
                                a_scales[t][:, b:b + 1], b_codes[t][k0:k1],
                                b_scales[t][b:b + 1], fmt, acc=dx)
    return np.ascontiguousarray(dx.reshape(n, h, wd, c).transpose(0, 3, 1, 2))


def conv_gradient(x, dy, fmt, kernel_hw, stride=1, padding=0, dilation=1, *,
                  scale_rule="floor", walker=False):
    """The gradient ``dW`` (K x C x R x S fp32 encodings) from ``x`` (N x C x H x W) and
    ``dy`` (N x K x OH x OW) under the MX contract: dY quantized along the flattened ``(n, oh,
    ow)`` for every ``k``; each tap's view of X (``X[n, c, oh s + r d - p, ow s + q d - p]``,
    zeros in the padding) quantized along the same axis for every ``c``.

    ``walker=True``: the zero-free gradient walker's variant instead (one quantized copy of
    X): X quantized along W in each row ``(n, c, h)``, dY along OW in each row ``(n, k,
    oh)``; each output's folds are the *segments* of :func:`walker_segments` of every dY row
    in raster order ``(n, oh)``, a segment's exact sum scaled by its dY block's and its X
    block's codes; a dY row whose X row (``oh s + r d - p``) lies in the padding folds
    nothing."""
    x, dy = _float_tensor(x, "x"), _float_tensor(dy, "dy")
    (s, p, d) = _geometry(stride, padding, dilation)
    r_n, q_n = (kernel_hw, kernel_hw) if np.ndim(kernel_hw) == 0 else kernel_hw
    n, c, h, wd = x.shape
    n2, k, oh, ow = dy.shape
    if n2 != n or output_hw((h, wd), (r_n, q_n), s, p, d) != (oh, ow):
        raise ValueError(f"dy {dy.shape} is not the output of x {x.shape} by a {r_n} x {q_n} "
                         f"kernel at stride {s}, padding {p}, dilation {d}")
    if walker:
        return _gradient_by_segments(x, dy, fmt, (r_n, q_n), (s, p, d), scale_rule)
    gc, gs = quantize(dy.transpose(1, 0, 2, 3).reshape(k, -1), fmt, axis=1,
                      scale_rule=scale_rule)
    xp = np.pad(x, ((0, 0), (0, 0), (p[0], p[0]), (p[1], p[1])))
    dw = np.zeros((k, c, r_n, q_n), np.uint32)
    for r in range(r_n):
        for q in range(q_n):
            view = _tap_view(xp, r, q, s, d, (oh, ow)).transpose(1, 0, 2, 3).reshape(c, -1)
            vc, vs = quantize(view, fmt, axis=1, scale_rule=scale_rule)
            dw[:, :, r, q] = matmul(gc, gs, vc.T, vs.T, fmt)
    return dw


def walker_segments(out_width, width, stride_w, x0):
    """The segments of one dY row at one kernel column for the zero-free gradient walker:
    ``(ow0, ow1, x_block)`` for the positions ``ow0 .. ow1 - 1``, in order. Position ``ow``
    reads X column ``xc = ow stride_w + x0`` (``x0 = q d_w - p_w``); its *X block* is
    ``min(max(xc, 0), width - 1) // 32`` (a column in the padding counts as the nearest
    column of the row). A segment ends at the row's last position, at the last position of a
    32-position dY block (``ow % 32 == 31``) and where the next position's X block differs;
    its ``x_block`` is its first position's."""
    def block(xc):
        return min(max(xc, 0), width - 1) // MX_BLOCK
    segments, start = [], 0
    for ow in range(out_width):
        xc = ow * stride_w + x0
        if ow == out_width - 1 or ow % MX_BLOCK == MX_BLOCK - 1 or \
                block(xc) != block(xc + stride_w):
            segments.append((start, ow + 1, block(start * stride_w + x0)))
            start = ow + 1
    return segments


def _gradient_by_segments(x, dy, fmt, kernel, geometry, scale_rule):
    """:func:`conv_gradient` with ``walker=True``: every segment's exact sums at once
    (integers), then the folds in order, each over every output of the tap at once."""
    (s, p, d), (r_n, q_n) = geometry, kernel
    f = mx_format(fmt)
    n, c, h, wd = x.shape
    _, k, oh, ow = dy.shape
    xc, xs = quantize(x, fmt, axis=3, scale_rule=scale_rule)
    gc, gs = quantize(dy, fmt, axis=3, scale_rule=scale_rule)
    xi, xnan, xinf = element_ints(xc, f)
    gi, gnan, ginf = element_ints(gc, f)
    xz, gz = _zero_codes(xc, f), _zero_codes(gc, f)
    wide = 2 * f.max_int.bit_length() + 6 > 62
    if wide:
        xi, gi = xi.astype(object), gi.astype(object)
    taps = []                            # per tap (raster order): its folds
    for r in range(r_n):
        rows = np.arange(oh) * s[0] + r * d[0] - p[0]
        live = np.flatnonzero((rows >= 0) & (rows < h))      # dY rows whose X row exists
        xr = rows[live]
        for q in range(q_n):
            x0 = q * d[1] - p[1]
            cols = np.arange(ow) * s[1] + x0
            inside = ((cols >= 0) & (cols < wd))[None, None, None, :]
            cols = np.clip(cols, 0, wd - 1)

            def view(a, fill):           # n x c x rows x ow: X at the tap's positions
                return np.where(inside, a[:, :, xr][:, :, :, cols], fill)
            xv, xbad = view(xi, 0), view(xnan | xinf, False)
            xnz = view(~xz, False)
            g, gbad, gnz = gi[:, :, live], (gnan | ginf)[:, :, live], ~gz[:, :, live]
            folds = []                   # per segment: (sums, exponents, bad), n x rows x k x c
            for a, b, xb in walker_segments(ow, wd, s[1], x0):
                sums = np.einsum("nkol,ncol->nokc", g[..., a:b], xv[..., a:b])
                special = (np.einsum("nkol,ncol->nokc", gbad[..., a:b].astype(np.int64),
                                     xnz[..., a:b].astype(np.int64))
                           + np.einsum("nkol,ncol->nokc", gnz[..., a:b].astype(np.int64),
                                       xbad[..., a:b].astype(np.int64))) > 0
                gsc = gs[:, :, live, a // MX_BLOCK].astype(np.int64)        # n k rows
                xsc = xs[:, :, xr, xb].astype(np.int64)                     # n c rows
                e = (gsc.transpose(0, 2, 1)[..., None] + xsc.transpose(0, 2, 1)[:, :, None, :]
                     - 2 * MX_SCALE_BIAS + 2 * f.quantum_exp)
                bad = special | (gsc == MX_SCALE_NAN).transpose(0, 2, 1)[..., None] \
                    | (xsc == MX_SCALE_NAN).transpose(0, 2, 1)[:, :, None, :]
                folds.append((sums, e, bad))
            # the tap's folds in order: dY rows in raster order, then segments
            taps.append(tuple(np.stack([f[j] for f in folds], 2).reshape((-1, k, c))
                              for j in range(3)) if folds and len(live) else None)
    # every tap's folds side by side (a tap with fewer padded with folds that leave the
    # accumulator: a zero sum), one fold of every output at a time
    length = max((t[0].shape[0] for t in taps if t is not None), default=0)

    def stacked(j, dtype):
        out = np.zeros((len(taps), length, k, c), dtype)
        for i, t in enumerate(taps):
            if t is not None:
                out[i, :t[0].shape[0]] = t[j]
        return out
    sums, e, bad = stacked(0, object if wide else np.int64), stacked(1, np.int64), \
        stacked(2, bool)
    acc = np.zeros((len(taps), k, c), np.uint32)
    for j in range(length):
        if wide:
            acc = np.vectorize(lambda a, v, x, b: accumulate_block(int(a), int(v), int(x),
                                                                   bool(b)),
                               otypes=[np.uint32])(acc, sums[:, j], e[:, j], bad[:, j])
        else:
            acc = accumulate_blocks(acc, sums[:, j], e[:, j], bad[:, j])
    dw = acc.reshape(r_n, q_n, k, c).transpose(2, 3, 0, 1)
    return dw
