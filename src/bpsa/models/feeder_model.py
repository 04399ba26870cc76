"""Naive model of the data feeder (Fornt et al., Sec. II-B): numpy only, no Amaranth.

The feeder lowers the input feature map X (N x C x H x W, stored in an SRAM of ``B`` =
``feeder_bus_width`` elements per word, flattened ``[N, C, Y, X]`` with X contiguous, starting at
element ``base``) on the fly for the output-stationary forward convolution of an array of ``R``
= ``rows`` rows. This module models it with plain loops, independently of the hardware:

* **contexts** (:func:`contexts`): output pixels are taken in the order ``(n, oh, ow)``; one
  context holds ``R`` consecutive pixels ``ow0 .. ow0+R-1`` of one output row ``(n, oh)``; lane
  ``i`` (array row ``i``) computes pixel ``ow0 + i``. A row's contexts start at ``ow0 = 0`` (or
  at ``ctx_ow`` for the first context of a run) and step by ``R``; lanes whose pixel is past
  ``OW - 1`` are *masked* (their elements are zero and their mask bit is 0).
* **index sequence** (:func:`index_steps`): per context, per channel ``c``, per kernel row
  ``r``, the SRAM words covering the *interest region* row ``[x0, x0 + span_all)``, with
  ``x0 = ow0*s - p`` and ``span_all = (R-1)*s + (S-1)*d + 1``, read from the word holding the
  first interest element. Words that hold no element of an active lane inside the tensor (rows
  and columns of padding) are not read.
* **kernel pattern** (:func:`kernel_pattern`, :func:`shift_pattern`): bits ``0, d, ..,
  (S-1)d``, shifted right by the lane's word offset ``g + i*s - k*B`` (left when negative).
* **lane streams** (:func:`feeder_streams`): what each lane selects; equal to the golden
  im2col rows (:func:`expected_streams`, from :func:`bpsa.models.golden.lower_forward`).
* **stalls** (:func:`lane_word_cycles`, :func:`register_stalls`): cycles a word is held because
  a lane has more interest elements than free intermediate registers (no FIFO backpressure).
* **traffic** (:func:`traffic`): SRAM words read by the feeder, and the elements / words that
  reading the explicit im2col matrix would take.

The functions take the run as a :class:`FeederDescriptor` (their ``layer`` argument), made from
a :class:`~bpsa.spec.layer.ConvLayer` by :meth:`FeederDescriptor.of`.
"""

from dataclasses import asdict, dataclass

import numpy as np

from bpsa.models import golden
from bpsa.spec.layer import ConvLayer, LayerGeometry

__all__ = [
    "LAYER_FIELDS", "FeederDescriptor", "Step", "contexts", "kernel_pattern", "shift_pattern",
    "index_steps", "sram_words", "lane_offsets", "feeder_streams", "expected_streams",
    "lane_word_cycles", "register_stalls", "traffic", "random_descriptor",
]

#: Fields of a feeder layer descriptor, in the order of the hardware ``FeederLayer`` layout.
LAYER_FIELDS = ("batch", "channels", "height", "width", "kernel_h", "kernel_w",
                "stride_h", "stride_w", "pad_h", "pad_w", "dil_h", "dil_w",
                "base", "ctx_n", "ctx_oh", "ctx_ow", "ctx_count", "pad_bottom")


@dataclass(frozen=True)
class FeederDescriptor(LayerGeometry):
    """The feeder's layer descriptor (the Python view of the hardware's, field for field):
    one forward run of a :class:`~bpsa.spec.layer.ConvLayer`, built by :meth:`of`.

    The layer's X and kernel shapes (the feeder never sees the output channels): ``batch`` N,
    ``channels`` C, ``height`` H, ``width`` W, kernel ``kernel_h`` x ``kernel_w`` (R x S),
    stride / padding / dilation per axis, ``pad_h`` the top padding and ``pad_bottom`` the
    bottom one (``None``: ``pad_h``). The run: ``base``, element address of X[0, 0, 0, 0] in the
    SRAM; ``ctx_n``, ``ctx_oh``, ``ctx_ow``, output pixel of the first context; ``ctx_count``,
    number of contexts to run (0: to the end of the layer).
    """
    batch: int
    channels: int
    height: int
    width: int
    kernel_h: int
    kernel_w: int
    stride_h: int = 1
    stride_w: int = 1
    pad_h: int = 0
    pad_w: int = 0
    dil_h: int = 1
    dil_w: int = 1
    base: int = 0
    ctx_n: int = 0
    ctx_oh: int = 0
    ctx_ow: int = 0
    ctx_count: int = 0
    pad_bottom: int | None = None

    @classmethod
    def of(cls, layer, base=0, ctx_n=0, ctx_oh=0, ctx_ow=0, ctx_count=0):
        """The descriptor of a run of ``layer`` (a :class:`~bpsa.spec.layer.ConvLayer`) with X
        from element ``base``, from the context at output pixel ``(ctx_n, ctx_oh, ctx_ow)``,
        ``ctx_count`` contexts (0: to the end). Checks nothing (see
        :func:`bpsa.gateware.frontends.feeder.feeder.check_layer`)."""
        if not isinstance(layer, ConvLayer):
            raise TypeError(f"layer must be a ConvLayer, not {type(layer).__name__}")
        return cls(layer.batch, layer.channels, layer.height, layer.width, layer.kernel_h,
                   layer.kernel_w, layer.stride_h, layer.stride_w, layer.pad_h, layer.pad_w,
                   layer.dil_h, layer.dil_w, base, ctx_n, ctx_oh, ctx_ow, ctx_count,
                   layer.pad_b)

    def fields(self):
        """The descriptor fields as a dict (keys :data:`LAYER_FIELDS`)."""
        out = asdict(self)
        out["pad_bottom"] = self.pad_b
        return out

    @property
    def span_w(self):
        """Columns covered by one dilated kernel row: ``(S-1)*d + 1``."""
        return (self.kernel_w - 1) * self.dil_w + 1


@dataclass(frozen=True)
class Step:
    """One step of the index counters: one SRAM word (read or not) of one interest-region row.

    ``addr``: word address (meaningful when ``read``); ``goff``: global word offset (position
    of lane 0's first interest element in the row's first word); ``k``: read index in the row;
    ``offset = goff - k*B``: lane 0's word offset (lane ``i`` adds ``i*s``); ``read``: the word
    is read from the SRAM; ``lo``, ``hi``: word positions ``[lo, hi)`` that hold real data (the
    rest is padding, supplied as 0; ``lo == hi == 0`` when not read); ``row_last``: last word of
    the row; ``ctx_last_row``: the row is the context's last (last channel, last kernel row);
    ``ctx_last``, ``last``: last step of the context / of the run; ``active``: lane mask of the
    context (bit ``i``: pixel ``ow0 + i`` exists); ``ctx``: ``(n, oh, ow0)``.
    """
    addr: int
    goff: int
    k: int
    offset: int
    read: bool
    lo: int
    hi: int
    row_last: bool
    ctx_last_row: bool
    ctx_last: bool
    last: bool
    active: int
    ctx: tuple


def contexts(config, layer):
    """The contexts of a run, in order: a list of ``(n, oh, ow0)``."""
    oh_n, ow_n = layer.out_hw
    r = config.rows
    out = []
    n, oh, ow0 = layer.ctx_n, layer.ctx_oh, layer.ctx_ow
    while n < layer.batch:
        out.append((n, oh, ow0))
        if layer.ctx_count and len(out) == layer.ctx_count:
            break
        ow0 += r
        if ow0 >= ow_n:
            ow0, oh = 0, oh + 1
            if oh >= oh_n:
                oh, n = 0, n + 1
    return out


def kernel_pattern(kernel_w, dil_w):
    """The kernel pattern as an int: bits ``0, d, 2d, .., (S-1)d``."""
    return sum(1 << (q * dil_w) for q in range(kernel_w))


def shift_pattern(pattern, offset, bus_width, pattern_width):
    """Selection mask (``bus_width`` bits) of the pattern shifted right by ``offset`` word
    positions (left when negative): bit ``j`` is pattern bit ``j - offset``."""
    sel = 0
    for j in range(bus_width):
        b = j - offset
        if 0 <= b < pattern_width and (pattern >> b) & 1:
            sel |= 1 << j
    return sel


def lane_offsets(config, layer):
    """Local offsets ``[0, s, 2s, ..]`` of the lanes."""
    return [i * layer.stride_w for i in range(config.rows)]


def index_steps(config, layer):
    """The index-counter sequence of a run (list of :class:`Step`), from nested loops."""
    bw, r_n = config.feeder_bus_width, config.rows
    ptr_mod = config.buf_a_depth * bw
    _, ow_n = layer.out_hw
    c_n, h, w = layer.channels, layer.height, layer.width
    span_w = layer.span_w
    span_all = (r_n - 1) * layer.stride_w + span_w
    ctxs = contexts(config, layer)
    steps = []
    for t, (n, oh, ow0) in enumerate(ctxs):
        x0 = ow0 * layer.stride_w - layer.pad_w
        act = [ow0 + i < ow_n for i in range(r_n)]
        n_act = sum(act)
        active = sum(1 << i for i in range(r_n) if act[i])
        x_lo = max(0, x0)
        x_hi = min(w, x0 + (n_act - 1) * layer.stride_w + span_w)
        for c in range(c_n):
            for r in range(layer.kernel_h):
                y = oh * layer.stride_h - layer.pad_h + r * layer.dil_h
                row_ok = 0 <= y < h
                p0 = layer.base + ((n * c_n + c) * h + y) * w + x0
                goff = p0 % bw
                n_words = -(-(goff + span_all) // bw)
                ctx_last_row = c == c_n - 1 and r == layer.kernel_h - 1
                for k in range(n_words):
                    xb = x0 - goff + k * bw          # x of word position 0
                    lo = min(max(x_lo - xb, 0), bw)
                    hi = min(max(x_hi - xb, 0), bw)
                    read = row_ok and lo < hi
                    if not read:
                        lo = hi = 0
                    row_last = k == n_words - 1
                    steps.append(Step(
                        addr=((p0 + k * bw) % ptr_mod) // bw, goff=goff, k=k,
                        offset=goff - k * bw, read=read, lo=lo, hi=hi, row_last=row_last,
                        ctx_last_row=ctx_last_row, ctx_last=ctx_last_row and row_last,
                        last=ctx_last_row and row_last and t == len(ctxs) - 1,
                        active=active, ctx=(n, oh, ow0)))
    return steps


def sram_words(config, layer, x):
    """The SRAM image: ``buf_a_depth`` words of ``B`` elements (int64, as stored: the raw
    ``operand_width``-bit two's-complement pattern), X flattened from element ``base``."""
    bw = config.feeder_bus_width
    flat = np.zeros(config.buf_a_depth * bw, dtype=np.int64)
    xs = np.asarray(x, dtype=np.int64).ravel()
    flat[layer.base:layer.base + xs.size] = xs & ((1 << config.operand_width) - 1)
    return flat.reshape(config.buf_a_depth, bw)


def _signed(v, width, signed):
    return v - (1 << width) if signed and v >> (width - 1) else v


def feeder_streams(config, layer, x, steps=None):
    """What the feeder's lanes select, by the kernel-pattern algorithm on the SRAM image.

    Returns ``(data, mask)``: ``data`` int64 of shape (contexts, R, C*R*S) in element order
    ``(c, r, q)``, zero for masked lanes; ``mask`` bool (contexts, R).
    """
    bw, r_n = config.feeder_bus_width, config.rows
    pw = config.feeder_pattern_width
    steps = index_steps(config, layer) if steps is None else steps
    mem = sram_words(config, layer, x)
    pattern = kernel_pattern(layer.kernel_w, layer.dil_w)
    offs = lane_offsets(config, layer)
    lanes = [[] for _ in range(r_n)]
    data, mask = [], []
    for st in steps:
        word = [int(mem[st.addr, j]) if st.read and st.lo <= j < st.hi else 0
                for j in range(bw)]
        for i in range(r_n):
            sel = shift_pattern(pattern, st.offset + offs[i], bw, pw)
            lanes[i] += [word[j] for j in range(bw) if (sel >> j) & 1]
        if st.ctx_last:
            act = [(st.active >> i) & 1 == 1 for i in range(r_n)]
            data.append([lanes[i] if act[i] else [0] * len(lanes[i]) for i in range(r_n)])
            mask.append(act)
            lanes = [[] for _ in range(r_n)]
    data = np.array([[[_signed(v, config.operand_width, config.operand_signed) for v in lane]
                      for lane in ctx] for ctx in data], dtype=np.int64)
    return data, np.array(mask, dtype=bool)


def expected_streams(config, layer, x):
    """The lane streams the array needs, from the golden explicit im2col
    (:func:`bpsa.models.golden.lower_forward`): ``(data, mask)`` as in :func:`feeder_streams`."""
    x = np.asarray(x, dtype=np.int64)
    x = np.pad(x, ((0, 0), (0, 0), (layer.pad_h, layer.pad_b), (0, 0)))   # rows: explicit
    w = np.zeros((1, layer.channels, layer.kernel_h, layer.kernel_w), dtype=np.int64)
    a = golden.lower_forward(x, w, layer.stride, (0, layer.pad_w), layer.dil).a
    oh_n, ow_n = layer.out_hw
    ctxs = contexts(config, layer)
    data = np.zeros((len(ctxs), config.rows, a.shape[1]), dtype=np.int64)
    mask = np.zeros((len(ctxs), config.rows), dtype=bool)
    for t, (n, oh, ow0) in enumerate(ctxs):
        for i in range(config.rows):
            if ow0 + i < ow_n:
                data[t, i] = a[(n * oh_n + oh) * ow_n + ow0 + i]
                mask[t, i] = True
    return data, mask


def lane_word_cycles(fill, close, elems, lane_regs, closes):
    """Cycles one lane needs for one word, with ``lane_regs`` (M) intermediate registers and a
    FIFO that always has room.

    ``fill``: registers holding elements, ``close``: they end a context (both from the previous
    word); ``elems``: interest elements of the lane in this word; ``closes``: the lane's last
    element of the context is in this word. Full or closed registers are pushed into the FIFO
    in the first cycle, which then takes up to M elements; each further cycle pushes and takes
    up to M more. Returns ``(cycles, fill, close)`` after the word.
    """
    f = 0 if fill == lane_regs or close else fill
    cycles = 1
    take = min(elems, lane_regs - f)
    f += take
    rem = elems - take
    while rem:
        cycles += 1
        f = min(rem, lane_regs)
        rem -= f
    return cycles, f, closes and elems > 0


def register_stalls(config, layer, steps=None):
    """Stall cycles of a run from the intermediate registers alone (the FIFOs never full): for
    every word, the slowest lane's :func:`lane_word_cycles` minus one."""
    bw, r_n, m = config.feeder_bus_width, config.rows, config.feeder_lane_regs
    pw = config.feeder_pattern_width
    steps = index_steps(config, layer) if steps is None else steps
    pattern = kernel_pattern(layer.kernel_w, layer.dil_w)
    offs = lane_offsets(config, layer)
    last_tap = layer.span_w - 1
    state = [(0, False)] * r_n
    stalls = 0
    for st in steps:
        worst = 1
        for i in range(r_n):
            off = st.offset + offs[i]
            sel = shift_pattern(pattern, off, bw, pw)
            closes = st.ctx_last_row and 0 <= off + last_tap < bw
            cycles, f, close = lane_word_cycles(*state[i], bin(sel).count("1"), m, closes)
            state[i] = (f, close)
            worst = max(worst, cycles)
        stalls += worst - 1
    return stalls


def traffic(config, layer, steps=None):
    """Traffic of a run: ``words_read`` (SRAM words the feeder reads); for the same output
    pixels, ``im2col_elements`` of the explicit im2col matrix (rows of masked lanes excluded)
    and ``im2col_words`` (those elements packed ``B`` to a word); ``x_elements``, the size of
    X, which is all the feeder needs loaded (the DRAM-side figure to set against
    ``im2col_elements``)."""
    steps = index_steps(config, layer) if steps is None else steps
    pixels = sum(bin(a).count("1") for _, a in {(st.ctx, st.active) for st in steps})
    elements = pixels * layer.channels * layer.kernel_h * layer.kernel_w
    bw = config.feeder_bus_width
    x_elements = layer.batch * layer.channels * layer.height * layer.width
    return {"words_read": sum(st.read for st in steps), "im2col_elements": elements,
            "im2col_words": -(-elements // bw), "x_elements": x_elements}


def random_descriptor(config, rng, *, max_vectors=2000, max_kernel=8, max_stride=4, max_pad=3,
                      max_dil=3):
    """The descriptor of a random layer's whole run (any ``base``) that the feeder generated
    for ``config`` runs (kernel within the pattern width, output not empty, X within the SRAM;
    half of them with a bottom padding different from the top one) and that is at most
    ``max_vectors`` feed vectors (contexts times ``C*R*S``)."""
    while True:
        r, s = (int(v) for v in rng.integers(1, max_kernel + 1, 2))
        sh, sw = (int(v) for v in rng.integers(1, max_stride + 1, 2))
        ph, pw = (int(v) for v in rng.integers(0, max_pad + 1, 2))
        dh, dw = (int(v) for v in rng.integers(1, max_dil + 1, 2))
        pb = ph if rng.random() < 0.5 else int(rng.integers(0, max_pad + 1))
        conv = ConvLayer.conv(int(rng.integers(1, 3)), int(rng.integers(1, 4)),
                              int(rng.integers(3, 14)), int(rng.integers(3, 18)), 1, r, s,
                              (sh, sw), (ph, pw), (dh, dw), pad_bottom=pb)
        layer = FeederDescriptor.of(conv, base=int(rng.integers(0, 40)))
        if layer.span_w > config.feeder_pattern_width:
            continue
        try:
            layer.out_hw
        except ValueError:
            continue
        size = layer.batch * layer.channels * layer.height * layer.width
        if layer.base + size > config.buf_a_depth * config.feeder_bus_width:
            continue
        if len(contexts(config, layer)) * layer.channels * r * s <= max_vectors:
            return layer
