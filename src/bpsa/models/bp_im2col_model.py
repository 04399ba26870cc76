"""Naive software model of BP-im2col address generation (Yang et al., Algorithms 1 and 2,
generalized), numpy and plain Python only.

For one layer (a :class:`bpsa.spec.layer.ConvLayer` with symmetric padding) and an ``rows`` x
``cols`` input-stationary array it yields, beat by beat, the exact address streams that
``bpsa.gateware.frontends.bp_im2col.generators`` must produce. Every address is computed from scratch by division
and modulo (the paper's formulation), so the model shares nothing with the incremental counters
of the RTL. Its addresses are checked element by element against the
explicit lowerings of :mod:`bpsa.models.golden` (``b_src`` / ``a_src``).

The GEMM of a phase is ``Cmat = A @ B`` with A: ``M x Kg`` and B: ``Kg x Ng``:

=========== ======================  ==========================  ===========================
phase       A (streamed)            B (held in the PEs)         M, Kg, Ng
=========== ======================  ==========================  ===========================
loss dX     rotated, channel-       virtual zero-spaced dY,     C, K*R*S, N*H*W
            transposed W            rows (k,r,q), cols (n,h,w)
gradient dW virtual dilated dY,     im2col of X, rows (n,i,j),  K, N*Hd*Wd, C*R*S
            rows k, cols (n, i, j)  cols (c, r, q)
=========== ======================  ==========================  ===========================

Tiles are walked column tile outer, row tile inner: ``for nt in range(ceil(Ng/cols)): for kt in
range(ceil(Kg/rows))``. For each tile, stream ``b`` carries ``rows`` beats (B rows ``kt*rows +
i``, ``cols`` lanes each); stream ``a`` carries the ``M`` column slices ``A[m, kt*rows :
kt*rows + rows]`` (``rows`` lanes each). Lanes past the matrix edge are masked.

Beat formats (:class:`Beat`):

- ``loss_b``, ``loss_a``, ``grad_b``: one address per lane; ``mask`` bit ``j`` set when lane
  ``j`` is read (non-zero, inside the matrix). Masked lanes carry address 0 here; the RTL's
  masked-lane addresses are unspecified.
- ``grad_a`` (dilated mode): ``addr`` is one address, that of the first non-zero lane; the
  buffer returns consecutive compact elements from it, one per set ``mask`` bit, in lane
  order. Non-zero lanes of one batch image are consecutive in the compact NCHW dY, but an image
  boundary breaks the run, so a slice whose lanes span several images is sent as one beat per
  image that has a non-zero lane (``slice_end`` on the slice's last beat); a slice without any
  non-zero lane is one beat with an empty mask.

``last`` marks the last beat of a tile, ``end`` the last beat of the layer.

The functions that take a whole layer (:func:`gemm_dims` and all that use it,
:func:`desc_fields`) raise :exc:`ValueError` for a layer whose dilated kernel does not fit the
padded input or whose bottom padding differs from the top one; the per-element functions
(``*_src``) expect such a checked layer.
"""

from typing import NamedTuple

import numpy as np

from bpsa.spec.layer import ConvLayer

__all__ = [
    "DESC_FIELDS", "Beat", "STREAMS", "check_layer", "desc_fields",
    "loss_b_src", "loss_a_src", "grad_a_src", "grad_b_src", "gemm_dims",
    "beats", "counters", "matrix_from_beats", "gemm_from_beats", "layer_result",
    "pack_desc", "beat_layout", "unpack_beat", "normalize",
]

#: Descriptor fields in the order of the RTL's ``data.StructLayout`` (first field at bit 0),
#: each ``dim_width`` bits.
DESC_FIELDS = ("n", "c", "h", "w", "k", "r", "s", "oh", "ow",
               "stride_h", "stride_w", "pad_h", "pad_w", "dil_h", "dil_w", "pad_bottom")

#: Streams: (phase, side).
STREAMS = ("loss_a", "loss_b", "grad_a", "grad_b")


def check_layer(L):
    """Raise :exc:`ValueError` unless the model can run ``L`` (a :class:`ConvLayer`): its
    dilated kernel fits the padded input, and its padding is symmetric (``pad_bottom`` unset
    or ``pad_h``)."""
    L.out_hw                          # raises when the kernel does not fit
    if L.pad_b != L.pad_h:
        raise ValueError(f"BP-im2col takes symmetric padding, not pad_h {L.pad_h} and "
                         f"pad_bottom {L.pad_b}")


def desc_fields(L):
    """The generators' descriptor of layer ``L`` as field values (see :data:`DESC_FIELDS`);
    raises like :func:`check_layer`."""
    check_layer(L)
    oh, ow = L.out_hw
    return {"n": L.batch, "c": L.channels, "h": L.height, "w": L.width, "k": L.out_channels,
            "r": L.kernel_h, "s": L.kernel_w, "oh": oh, "ow": ow,
            "stride_h": L.stride_h, "stride_w": L.stride_w, "pad_h": L.pad_h, "pad_w": L.pad_w,
            "dil_h": L.dil_h, "dil_w": L.dil_w, "pad_bottom": L.pad_b}


class Beat(NamedTuple):
    addr: object          # tuple of per-lane addresses, or one int (grad_a)
    mask: int             # bit j: lane j is read
    last: bool            # last beat of a tile
    end: bool             # last beat of the layer
    slice_end: bool = True  # (grad_a) last beat of a column slice


# --- Algorithms 1 and 2, generalized: one element, from scratch ----------------------------------

def loss_b_src(L, kg, ng):
    """Algorithm 1 (transposed mode): flat dY index of virtual B element ``(kg, ng)`` of the
    loss, or -1 for a zero-space (area 0: top/left padding; area 1: inserted zeros and the
    bottom/right padding and remainder)."""
    k, t = divmod(kg, L.kernel_h * L.kernel_w)
    r, q = divmod(t, L.kernel_w)
    n, hw = divmod(ng, L.height * L.width)
    h, w = divmod(hw, L.width)
    (sh, sw), (ph, pw), (dh, dw) = L.stride, L.pad, L.dil
    oh, ow = L.out_hw
    zh = h + r * dh - (dh * (L.kernel_h - 1) - ph)      # row in the virtual zero-spaced map
    zw = w + q * dw - (dw * (L.kernel_w - 1) - pw)
    if zh < 0 or zw < 0:                          # area 0
        return -1
    if zh % sh or zw % sw or zh > sh * (oh - 1) or zw > sw * (ow - 1):   # area 1
        return -1
    return ((n * L.out_channels + k) * oh + zh // sh) * ow + zw // sw


def loss_a_src(L, m, kg):
    """Flat W index of ``A[m, kg]`` of the loss: W rotated by 180 degrees, channel-transposed:
    ``A[c, (k, r, q)] = W[k, c, R-1-r, S-1-q]``."""
    r_n, s_n = L.kernel_h, L.kernel_w
    k, t = divmod(kg, r_n * s_n)
    r, q = divmod(t, s_n)
    return ((k * L.channels + m) * r_n + r_n - 1 - r) * s_n + s_n - 1 - q


def grad_a_src(L, m, kg):
    """Algorithm 2 (dilated mode): flat dY index of virtual A element ``(m, kg)`` of the
    gradient (Eq. 4), or -1 for an inserted zero."""
    hd, wd = L.dilated_out_hw
    n, ij = divmod(kg, hd * wd)
    i, j = divmod(ij, wd)
    if i % L.stride_h or j % L.stride_w:
        return -1
    oh, ow = L.out_hw
    return ((n * L.out_channels + m) * oh + i // L.stride_h) * ow + j // L.stride_w


def grad_b_src(L, kg, ng):
    """Flat X index of ``B[kg, ng]`` of the gradient (plain im2col), or -1 in the padding."""
    hd, wd = L.dilated_out_hw
    n, ij = divmod(kg, hd * wd)
    i, j = divmod(ij, wd)
    c, t = divmod(ng, L.kernel_h * L.kernel_w)
    r, q = divmod(t, L.kernel_w)
    xh = i + r * L.dil_h - L.pad_h
    xw = j + q * L.dil_w - L.pad_w
    if not (0 <= xh < L.height and 0 <= xw < L.width):
        return -1
    return ((n * L.channels + c) * L.height + xh) * L.width + xw


def gemm_dims(L, phase):
    """``(M, Kg, Ng)`` of the phase's GEMM; raises like :func:`check_layer`."""
    check_layer(L)
    if phase == "loss":
        return L.channels, L.out_channels * L.kernel_h * L.kernel_w, L.batch * L.height * L.width
    if phase == "grad":
        hd, wd = L.dilated_out_hw
        return L.out_channels, L.batch * hd * wd, L.crs
    raise ValueError(f"phase must be 'loss' or 'grad', not {phase!r}")


# --- beat sequences ------------------------------------------------------------------------------

def _ceil(a, b):
    return -(-a // b)


def _b_beats(L, phase, rows, cols, src):
    _, kg_n, ng_n = gemm_dims(L, phase)
    nts, kts = _ceil(ng_n, cols), _ceil(kg_n, rows)
    for nt in range(nts):
        for kt in range(kts):
            for i in range(rows):
                kg = kt * rows + i
                addr, mask = [], 0
                for j in range(cols):
                    ng = nt * cols + j
                    a = src(L, kg, ng) if kg < kg_n and ng < ng_n else -1
                    addr.append(max(a, 0))
                    mask |= (a >= 0) << j
                last = i == rows - 1
                yield Beat(tuple(addr), mask, last, last and nt == nts - 1 and kt == kts - 1)


def _loss_a_beats(L, rows, cols):
    m_n, kg_n, ng_n = gemm_dims(L, "loss")
    nts, kts = _ceil(ng_n, cols), _ceil(kg_n, rows)
    for nt in range(nts):
        for kt in range(kts):
            for m in range(m_n):
                addr, mask = [], 0
                for i in range(rows):
                    kg = kt * rows + i
                    a = loss_a_src(L, m, kg) if kg < kg_n else -1
                    addr.append(max(a, 0))
                    mask |= (a >= 0) << i
                last = m == m_n - 1
                yield Beat(tuple(addr), mask, last, last and nt == nts - 1 and kt == kts - 1)


def _grad_a_beats(L, rows, cols):
    m_n, kg_n, ng_n = gemm_dims(L, "grad")
    nts, kts = _ceil(ng_n, cols), _ceil(kg_n, rows)
    hd, wd = L.dilated_out_hw
    for nt in range(nts):
        for kt in range(kts):
            for m in range(m_n):
                # Non-zero lanes grouped by batch image: one beat per image.
                groups = {}
                for i in range(rows):
                    kg = kt * rows + i
                    if kg < kg_n:
                        a = grad_a_src(L, m, kg)
                        if a >= 0:
                            groups.setdefault(kg // (hd * wd), []).append((i, a))
                segs = [groups[n] for n in sorted(groups)] or [[]]
                for g, seg in enumerate(segs):
                    mask = sum(1 << i for i, _ in seg)
                    if seg:
                        first = seg[0][1]
                        assert [a for _, a in seg] == list(range(first, first + len(seg))), \
                            "non-zero lanes of one image must be consecutive in compact dY"
                    slice_end = g == len(segs) - 1
                    last = slice_end and m == m_n - 1
                    yield Beat(seg[0][1] if seg else 0, mask, last,
                               last and nt == nts - 1 and kt == kts - 1, slice_end)


def beats(L, stream, rows, cols):
    """The list of :class:`Beat` of ``stream`` (one of :data:`STREAMS`) for layer ``L`` on a
    ``rows`` x ``cols`` array."""
    if stream == "loss_b":
        return list(_b_beats(L, "loss", rows, cols, loss_b_src))
    if stream == "grad_b":
        return list(_b_beats(L, "grad", rows, cols, grad_b_src))
    if stream == "loss_a":
        return list(_loss_a_beats(L, rows, cols))
    if stream == "grad_a":
        return list(_grad_a_beats(L, rows, cols))
    raise ValueError(f"stream must be one of {STREAMS}, not {stream!r}")


def _lanes(stream, rows, cols):
    return cols if stream.endswith("_b") else rows


def counters(L, stream, rows, cols, seq=None):
    """Expected counters of a stream: ``beats``, ``addrs`` (addresses sent to the buffer),
    ``words`` (elements read), ``zeros`` (lanes inside the matrix masked as zero-spaces, never
    read)."""
    seq = beats(L, stream, rows, cols) if seq is None else seq
    words = sum(bin(b.mask).count("1") for b in seq)
    addrs = sum(1 for b in seq if b.mask) if stream == "grad_a" else words
    phase = stream[:4]
    m_n, kg_n, ng_n = gemm_dims(L, phase)
    nts, kts = _ceil(ng_n, cols), _ceil(kg_n, rows)
    # Each matrix element inside the matrix appears once per visit: B once, A once per nt.
    inside = kg_n * ng_n if stream.endswith("_b") else m_n * kg_n * nts
    return {"beats": len(seq), "addrs": addrs, "words": words, "zeros": inside - words}


# --- reconstruction: the matrices and the GEMM from beats ----------------------------------------

def matrix_from_beats(L, stream, rows, cols, seq, fill=-1):
    """Rebuild the lowered operand's source-index matrix (like ``golden``'s ``a_src`` /
    ``b_src``) from a beat sequence; raises ``AssertionError`` if an element is produced twice
    or the sequence does not follow the tile order. Elements never produced stay ``fill``."""
    phase = stream[:4]
    m_n, kg_n, ng_n = gemm_dims(L, phase)
    nts, kts = _ceil(ng_n, cols), _ceil(kg_n, rows)
    if stream.endswith("_b"):
        out = np.full((kg_n, ng_n), fill, dtype=np.int64)
        seen = np.zeros((kg_n, ng_n), dtype=bool)
        it = iter(seq)
        for nt in range(nts):
            for kt in range(kts):
                for i in range(rows):
                    b = next(it)
                    assert b.last == (i == rows - 1)
                    kg = kt * rows + i
                    for j in range(cols):
                        ng = nt * cols + j
                        inside = kg < kg_n and ng < ng_n
                        if b.mask >> j & 1:
                            assert inside, f"lane {j} of B row {kg} read outside the matrix"
                            out[kg, ng] = b.addr[j]
                        if inside:
                            assert not seen[kg, ng]
                            seen[kg, ng] = True
        assert next(it, None) is None, "extra beats"
        return out
    out = np.full((m_n, kg_n), fill, dtype=np.int64)
    it = iter(seq)
    for nt in range(nts):
        for kt in range(kts):
            for m in range(m_n):
                lanes = {}
                while True:
                    b = next(it)
                    got = _a_lanes(stream, b, rows)
                    assert not set(got) & set(lanes), "lane produced twice in one slice"
                    lanes.update(got)
                    if b.slice_end:
                        break
                assert b.last == (m == m_n - 1)
                for i, a in lanes.items():
                    kg = kt * rows + i
                    assert kg < kg_n, f"lane {i} of A slice read outside the matrix"
                    if nt == 0:
                        out[m, kg] = a
                    else:
                        assert out[m, kg] == a, "A slices differ between column tiles"
    assert next(it, None) is None, "extra beats"
    return out


def _a_lanes(stream, b, rows):
    """{lane: address} of one A beat."""
    if stream == "grad_a":
        lanes, rank = {}, 0
        for i in range(rows):
            if b.mask >> i & 1:
                lanes[i] = b.addr + rank
                rank += 1
        return lanes
    return {i: b.addr[i] for i in range(rows) if b.mask >> i & 1}


def gemm_from_beats(L, phase, rows, cols, a_seq, b_seq, a_tensor, b_tensor):
    """The phase's GEMM ``Cmat`` (M x Ng, int64) computed tile by tile from the beat streams
    alone, as the input-stationary array does: each B tile is gathered from the compact
    ``b_tensor`` by the addresses of its ``rows`` beats (zeros where masked), each of its A
    slices from ``a_tensor``, multiplied, and summed over the row tiles. No zero-spaced copy is
    built."""
    m_n, kg_n, ng_n = gemm_dims(L, phase)
    nts, kts = _ceil(ng_n, cols), _ceil(kg_n, rows)
    a_flat = np.asarray(a_tensor, dtype=np.int64).ravel()
    b_flat = np.asarray(b_tensor, dtype=np.int64).ravel()
    a_stream = "loss_a" if phase == "loss" else "grad_a"
    c = np.zeros((m_n, nts * cols), dtype=np.int64)
    ai, bi = iter(a_seq), iter(b_seq)
    for nt in range(nts):
        for kt in range(kts):
            bt = np.zeros((rows, cols), dtype=np.int64)
            for i in range(rows):
                b = next(bi)
                for j in range(cols):
                    if b.mask >> j & 1:
                        bt[i, j] = b_flat[b.addr[j]]
            at = np.zeros((m_n, rows), dtype=np.int64)
            for m in range(m_n):
                while True:
                    b = next(ai)
                    for i, a in _a_lanes(a_stream, b, rows).items():
                        at[m, i] = a_flat[a]
                    if b.slice_end:
                        break
            c[:, nt * cols:(nt + 1) * cols] += at @ bt
    return c[:, :ng_n]


def layer_result(L, phase, cmat):
    """Reshape the GEMM result: loss ``C x (N*H*W)`` -> dX ``N x C x H x W``; gradient
    ``K x (C*R*S)`` -> dW ``K x C x R x S``."""
    if phase == "loss":
        return cmat.reshape(L.channels, L.batch, L.height, L.width).transpose(1, 0, 2, 3)
    return cmat.reshape(L.w_shape)


# --- packing for the generated Verilog (flat ports) ----------------------------------------------

def pack_desc(L, dim_width):
    """The descriptor of ``L`` (a :class:`ConvLayer`, or a dict of :data:`DESC_FIELDS`) as
    one integer (field order :data:`DESC_FIELDS`, first field at bit 0). Raises
    :exc:`ValueError` for a field wider than ``dim_width``."""
    fields = desc_fields(L) if isinstance(L, ConvLayer) else L
    value = 0
    for i, name in enumerate(DESC_FIELDS):
        v = fields[name]
        if not 0 <= v < (1 << dim_width):
            raise ValueError(f"descriptor field {name} = {v} does not fit in dim_width = "
                             f"{dim_width} bits")
        value |= v << (i * dim_width)
    return value


def beat_layout(stream, rows, cols, addr_width):
    """``[(field, width)]`` of a stream's payload, first field at bit 0 (mirrors the RTL)."""
    lanes = _lanes(stream, rows, cols)
    if stream == "grad_a":
        return [("addr", addr_width), ("mask", lanes), ("slice_end", 1), ("last", 1),
                ("end", 1)]
    return [("addr", addr_width * lanes), ("mask", lanes), ("last", 1), ("end", 1)]


def unpack_beat(stream, value, rows, cols, addr_width):
    """A :class:`Beat` from the flat payload integer of ``stream``."""
    f, pos = {}, 0
    for name, width in beat_layout(stream, rows, cols, addr_width):
        f[name] = (value >> pos) & ((1 << width) - 1)
        pos += width
    if stream != "grad_a":
        mask_a = (1 << addr_width) - 1
        f["addr"] = tuple((f["addr"] >> (i * addr_width)) & mask_a
                          for i in range(_lanes(stream, rows, cols)))
    return Beat(f["addr"], f["mask"], bool(f["last"]), bool(f["end"]),
                bool(f.get("slice_end", 1)))


def normalize(stream, b, rows, cols):
    """A beat with masked lanes' addresses set to 0 (the RTL leaves them unspecified)."""
    if stream == "grad_a":
        return b._replace(addr=b.addr if b.mask else 0)
    return b._replace(addr=tuple(a if b.mask >> i & 1 else 0 for i, a in enumerate(b.addr)))
