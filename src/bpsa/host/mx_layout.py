"""The external-memory layouts of the accelerator's operands in an OCP MX format: element codes
and E8M0 scale codes as the driver writes them and the planner's loads read them
(``docs/architecture/mx.md``, "Who quantizes"; the address checks of
:func:`bpsa.plan.setup.address_program`).

The driver quantizes each phase's operands from its float32 copies along that phase's
reduction axis (:func:`bpsa.models.mx.quantize`, blocks of 32), then lays them out here; every
value is one byte (codes and scales alike), so a layout is a ``uint8`` array.

Channel-first forward (also each stride class of the channel-first loss)
    ``L = min(C, rows)`` channels a *part* (``rows`` divides 32, so a part lies in one
    block), ``CT = ceil(C / L)``. X: the codes ``N x CT x H x W x L`` (lanes past C hold 0),
    then the scale codes ``N x CT x H x W``: part ``t``'s byte at a pixel is X's scale of
    the block holding channel ``t L``.
    W: for each block of ``cols`` output channels (``KT = ceil(K / cols)``) and each part
    ``t``: its codes ``L_t x R x S x cols`` (``L_t`` the part's channels, lane ``j`` output
    channel ``kt cols + j``, lanes past K hold 0), then its ``R x S x cols`` scale codes (the
    scale of ``(k, r, s)`` in the part's block), which the front end reads after the part's W
    words (:class:`bpsa.gateware.frontends.channel_first.channel_first.ChannelFirst`).

Zero-free gradient (the walker's order)
    X quantized along W in each row ``(n, c, h)``, dY along OW in each row ``(n, k, oh)``.
    X: ``N x CT x H x (W + ceil(W / 32)) x B`` (``B = feeder_bus_width`` channels a word,
    ``CT = ceil(C / B)``): each row's ``W`` pixel words, then its ``ceil(W / 32)`` scale
    words, lane ``l`` of scale word ``b`` the scale code of channel ``t B + l`` at the row's
    ``b``-th block (lanes past C hold 0). dY: ``N x KT x OH x (OW + ceil(OW / 32)) x cols``
    in the same way (the buffer rows of
    :class:`~bpsa.gateware.frontends.zero_free.gradient.ZeroFreeGradientWalker`).
"""

import numpy as np

from bpsa.spec.numeric import MX_BLOCK

__all__ = ["cf_parts", "cf_w", "cf_x", "row_pitched"]


def cf_parts(channels, rows):
    """The channel-first parts ``(c0, c1)`` of ``channels`` channels on ``rows`` rows."""
    lanes = min(channels, rows)
    return [(c0, min(c0 + lanes, channels)) for c0 in range(0, channels, lanes)]


def cf_x(codes, scales, rows):
    """X's codes (``N x C x H x W``) and scales (``N x ceil(C / 32) x H x W``) as the
    channel-first layout (see the module docstring), flat."""
    n, c, h, w = codes.shape
    parts = cf_parts(c, rows)
    lanes = parts[0][1]
    blocked = np.zeros((n, len(parts) * lanes, h, w), dtype=np.uint8)
    blocked[:, :c] = codes
    blocked = blocked.reshape(n, len(parts), lanes, h, w).transpose(0, 1, 3, 4, 2)
    part_scales = scales[:, [c0 // MX_BLOCK for c0, _ in parts]]
    return np.concatenate([blocked.ravel(), part_scales.astype(np.uint8).ravel()])


def cf_w(codes, scales, rows, cols):
    """W's codes (``K x C x R x S``) and scales (``K x ceil(C / 32) x R x S``) as the
    channel-first layout (see the module docstring), flat."""
    k, c, r, s = codes.shape
    kt = -(-k // cols)
    wc = np.zeros((kt * cols, c, r, s), dtype=np.uint8)
    ws = np.zeros((kt * cols,) + scales.shape[1:], dtype=np.uint8)
    wc[:k], ws[:k] = codes, scales
    wc = wc.reshape(kt, cols, c, r, s).transpose(0, 2, 3, 4, 1)       # KT x C x R x S x cols
    ws = ws.reshape(kt, cols, -1, r, s).transpose(0, 2, 3, 4, 1)      # KT x CB x R x S x cols
    out = []
    for t in range(kt):
        for c0, c1 in cf_parts(c, rows):
            out += [wc[t, c0:c1].ravel(), ws[t, c0 // MX_BLOCK].ravel()]
    return np.concatenate(out)


def row_pitched(codes, scales, lanes):
    """A tensor's codes (``N x C x H x W``) and its scales along W (``N x C x H x
    ceil(W / 32)``) as the zero-free gradient's rows (see the module docstring), flat: ``N x
    ceil(C / lanes) x H x (W + ceil(W / 32)) x lanes``."""
    n, c, h, w = codes.shape
    ct = -(-c // lanes)
    rows = np.zeros((n, ct * lanes, h, w + scales.shape[3]), dtype=np.uint8)
    rows[:, :c, :, :w] = codes
    rows[:, :c, :, w:] = scales
    return rows.reshape(n, ct, lanes, h, -1).transpose(0, 1, 3, 4, 2).ravel()
