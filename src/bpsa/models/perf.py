"""Cycle model of the accelerator's forward pass and zero-free loss and gradient (``bpsa perf``).

It walks a layer the way its program does (:mod:`bpsa.plan.setup`'s tiling, the loop order of
:mod:`bpsa.plan.program`) and adds up, per engine run, the cycles of the engine
on the array (the forward: per context the slower of the array and the data feeder's SRAM
words; the zero-free walkers: closed forms of :mod:`bpsa.gateware.frontends.zero_free.gradient` and
:mod:`bpsa.gateware.frontends.zero_free.loss`), the DMA's loads into the two buffer banks (overlapped
with the previous run, skipped when the bank holds the slice), the P clears and the stores
(the zero-free phases' P is double-buffered, so their stores overlap the next step; the
forward's is when the set-up program's ``dbl`` says so). P is two memories, one a half, so a
double-buffered step's store reads its half while the next step accumulates in the other:
a store is never slowed by the engine's result vectors, only by the loads that take the DMA
first. The controller's own time is read from the layer's program, the instruction words the
RTL runs (:func:`bpsa.plan.instructions.program_words`; :func:`_dispatch`): the dispatcher
takes a word a cycle, and the fetch unit brings the words half a ring at a time through the
DMA, sharing it with the loads and stores (:func:`_timeline`). From the layer and the
configuration alone: no RTL, whole networks in seconds.

A load is its DMA commands, a command a run of the load: each its data segments
(:func:`_dma_segments`: a word or a beat, from where its address falls in a beat) plus
``cf_dma_command`` (:func:`_segment_load`), so the per-command cost follows the
configuration's bus, element and word widths instead of a fitted constant. The remaining
constants (:data:`TIMING`) were fitted on RTL runs of ``small`` and checked against the RTL's
counters on random layers (``tests/test_models_perf.py`` states the error it allows).
Not modelled: memory back-pressure (the model's memory answers at once, like the native
transport without stalls), the feeder's per-row bubbles and intermediate-register stalls
(the forward's kernels wider than ``feeder_lane_regs`` elements a word), BP-im2col and the
traditional flow.

Two forward front ends (``layer_cycles(..., frontend=...)``): the data feeder on the
output-stationary array (the default), and the channel-first implicit im2col on the
weight-stationary array (:mod:`bpsa.gateware.frontends.channel_first.channel_first`; the set-up program of
MODE 2, X channel-blocked HWC). The channel-first model counts the engine state by state
instead of fitting (:data:`_COUNTED`): its run is a closed form of its FSM (local banks, the
array never waits inside a run), a DMA command its data segments plus ``cf_dma_command``, a
store command its beats plus ``cf_dma_command`` and the store machine's hand-off
(:func:`_counted_store_row`; the zero-free loss's stores are counted the same way). Checked on
9 layers of ``small_cf`` (``tests/test_models_perf.py``): within 1.3 %.
"""

import collections
from dataclasses import dataclass, replace
from functools import lru_cache
from math import gcd, prod

import numpy as np

from bpsa.config import DRAIN_REGISTERS, FLOAT_REDUCE_LATENCY
from bpsa.models.feeder_model import lane_word_cycles
from bpsa.plan import capability, setup, tiling
from bpsa.plan import groups as grouping
from bpsa.plan.program import dy_piece
from bpsa.plan.setup import STORE_CHUNK
from bpsa.plan.grammar import Refusal
from bpsa.spec.layer import ConvLayer, global_avg_window, out_size
from bpsa.spec.numeric import POOL_FLOAT_MAC_LATENCY, element_bytes, pool_divide_cycles
from bpsa.spec.regmap import Mode, Phase

__all__ = ["TIMING", "LayerCycles", "layer_cycles", "min_bytes", "phase_table",
           "pool_cycles", "roofline_cycles", "traditional_cycles", "workload_layers"]

#: Fitted constants (cycles).
TIMING = {
    # the instruction dispatcher (bpsa.gateware.control.dispatcher): the program's first
    # words fetched after START; then a word a cycle (the fetch unit keeps ahead)
    "fetch": 2,            # START to the first fetch
    "fetch_chunk": 15,     # the fetch unit's DMA command for 8 words (FETCH_DEPTH / 2), fitted
    "dma_command": 12,     # a DMA command's latency beyond its beats (fitted: the feeder
                           # forward's stores, where the counted store measured further off)
    "pool_dma_command": 7,  # the same, fitted on pooling layers (a plane a command)
    # a store command beyond the fitted constants above (fitted when a store's first P word
    # took 3 cycles to the DMA): the DMA's first read after its checks (1), the requantizer's
    # input and middle registers (2)
    "store_path": 3,
    "step_flush": 6,       # a new step: the accumulations land
    "forward_run": 45,     # a forward run's set-up (five products, three cycles each), chain
                           # priming, feeder start and drain
    # a run of the channel-first engine: (rows + cf_setup) + (rows + cf_preload) + tiles
    # max(P, 2 rows) + (rows + cols + mac_latency + cf_drain) busy cycles, from its FSM (SETUP,
    # PRE, PRE_END + LOAD, STREAM, DRAIN; its start cycle in IDLE is not busy)
    "cf_setup": 7,         # SETUP beyond its rows steps: the run constants' products
    "cf_preload": 2,       # tile 0's last shift and the chain load, beyond its rows reads
    "cf_drain": 1,         # DRAIN beyond the array's rows + cols: the done cycle
    # MX: a channel-first tile streams at least this many cycles (P's fold of a word:
    # bpsa.gateware.results.psum_buffer.MX_SPACING), and holds one tap (no multi-tile)
    "mx_spacing": 9,
    "cf_dma_command": 6,   # a DMA command's cycles beyond its data (offer, CHECK, the address,
                           # the first beat, done; counted, the native memory answering at once;
                           # also the zero-free loss's stores, _counted_store_row)
    "cf_flush": 3,         # a run's end to its step's P clear (IDLE, FLUSH: the last
                           # accumulation lands)
    "store_read": 6,       # a store command's first P word: the DMA's read from the second
                           # cycle of RUN (after its checks), P's registered read (2), the
                           # requantizer (3), counted from the DMA's read queue (counted
                           # stores)
    # the zero-free gradient engine (bpsa.gateware.frontends.zero_free.gradient_engine):
    # start to its first beat max(rows, zg_fill) cycles (priming the chains, or the walker's
    # two set-up cycles and three stages), its last beat to done 2 rows + cols + mac_latency
    # + zg_drain
    "zg_fill": 5,
    "zg_drain": 4,
    # the zero-free loss walker (bpsa.gateware.frontends.zero_free.loss): its transposer's
    # slots (SLOTS there), a block's last word loaded to the emitter's first vector of it
    # (the item register, the dY buffer's read, the transposer's write), and a class's last
    # tile to the next class's set-up (the check that finds its pixels done)
    "zfl_slots": 3,
    "zfl_latency": 4,
    "zfl_class_end": 2,
}


@dataclass
class LayerCycles:
    """The model's figures for one layer and phase: ``cycles`` (BUSY_CYCLES), ``compute_cycles``
    (an engine busy), ``macs`` (the layer's multiply-accumulates), ``array_slots`` (MAC slots
    the array is fed: the RTL's MACS + GATED_MACS), ``utilization`` (``macs`` over rows x cols
    x ``cycles``), DMA bytes and busy cycles, engine runs, and what bounds the layer.
    ``roofline_cycles`` is the layer's lower bound on this configuration,
    ``max(macs / (rows cols), min_bytes / bus bytes a cycle)`` with ``min_bytes`` the phase's
    inputs read once (of X, the elements a tap reads) and its output written once (operands
    at operand width, results as accumulators; :func:`min_bytes`); ``over_roofline`` is
    ``cycles / roofline_cycles``. ``bound`` names the
    part busy longest: ``array`` (computing), ``dma`` (moving), ``P`` (cleared, or waited
    for while its one copy is stored) or ``set-up`` (the set-up and per-run programs).
    ``p_wait_cycles``: the cycles runs waited for P; ``a_words``, ``b_words``: the most words
    a run loads into a bank of A (channel-first: of the X banks, one pixel a word) and of B;
    ``p_words``: the most P words a step clears. ``load_wait_cycles``: the cycles the array
    waited for loads (a run ready to start whose loads were not done: the DMA's, beyond the
    dispatcher's hand-offs; the first run's loads included). ``a_writes``, ``b_writes``: the
    buffer words the loads write (the RTL's BUF_A_WRITES, BUF_B_WRITES; A's: X, dY of the
    loss, the channel-first banks and their MX scale codes, the pooling unit's buffer);
    ``p_writes``: P's words written, a result vector's accumulation each and each step's
    clear (BUF_P_WRITES; pooling: 0, its P traffic is not modelled); ``a_reads``,
    ``b_reads``: the words the engine reads from A (or the channel-first banks, or the pooling
    forward's buffer; the pooling backward's: 0, not modelled) and B (BUF_A_READS,
    BUF_B_READS); ``p_reads``: a result vector's accumulation each and each
    stored word once (the RTL's BUF_P_READS also counts the DMA's reads that an accumulation
    on P's port made it repeat: a few percent more).

    ``space_to_depth``: the driver runs the layer as :mod:`bpsa.plan.space_to_depth`
    rewrites it (the figures are the inner layer's but ``macs``, ``utilization`` and the
    roofline, the layer's; the forward and the zero-free gradient only, and X' holds only
    the elements taps read, as ``min_bytes`` counts them).

    Forward only: ``frontend`` (``feeder`` or ``channel_first``); ``x_sram_words``: the X
    buffer words the front end reads, of ``x_word_operands`` operands each (feeder: words of
    ``feeder_bus_width`` elements, every word of the index sequence that holds an element of
    an active lane inside the tensor, exactly :func:`bpsa.models.feeder_model.traffic`'s;
    channel-first: one operand a word, a word per tile, pixel and active row whose input pixel
    is not padding); ``tiles``: channel-first weight tiles, summed over the runs.

    ``strips``: the column strips the driver cuts the layer into (1: it runs whole); the
    figures are then the strips' summed (the largest of the bank and P words). A grouped
    layer runs in packs of groups (:mod:`bpsa.plan.groups`): the figures are the packs'
    summed (``strips``: a pack's), the MACs the layer's (not the packs' zero-weight slots)."""
    cycles: int
    compute_cycles: int
    macs: int
    array_slots: int
    utilization: float
    dma_read_bytes: int
    dma_write_bytes: int
    dma_busy_cycles: int
    runs: int
    bound: str
    roofline_cycles: int
    over_roofline: float
    p_wait_cycles: int = 0
    a_words: int = 0
    b_words: int = 0
    p_words: int = 0
    load_wait_cycles: int = 0
    a_writes: int = 0
    b_writes: int = 0
    p_writes: int = 0
    a_reads: int = 0
    b_reads: int = 0
    p_reads: int = 0
    space_to_depth: bool = False
    frontend: str = ""
    x_sram_words: int = 0
    x_word_operands: int = 0
    tiles: int = 0
    strips: int = 1

    def as_dict(self):
        return dict(self.__dict__)


def _dma(nbytes, commands, rate, command="dma_command"):
    """Cycles of ``commands`` DMA commands moving ``nbytes`` at ``rate`` bytes a cycle, each
    :data:`TIMING` ``[command]`` more."""
    if nbytes <= 0:
        return 0
    return -(-nbytes // rate) + TIMING[command] * commands


def _rate(config, lanes, nbytes):
    """Bytes the DMA moves a cycle into or out of buffer words of ``lanes`` elements of
    ``nbytes``: a beat (``dma_data_width / 8`` bytes), or a word if that is less."""
    return min(config.dma_data_width // 8, lanes * nbytes)


def _store_row(elements, nbytes, cols, rate, command="dma_command"):
    """The DMA commands of one stored row: chunks of ``STORE_CHUNK`` P words (the fitted
    ``command`` constant, plus ``store_path``)."""
    per = STORE_CHUNK * cols
    return [_dma(min(per, elements - off) * nbytes, 1, rate, command) + TIMING["store_path"]
            for off in range(0, elements, per)]


def _counted_store_row(elements, nbytes, cols, rate):
    """The DMA commands of one stored row, counted (channel-first forward, zero-free loss):
    chunks of ``STORE_CHUNK`` P words, each its data at ``rate`` bytes a cycle (a beat, or a P
    word if that is less: the store unpacks one word a cycle) plus ``cf_dma_command``,
    ``store_read`` (its first P word's way to the DMA) and the store machine's hand-off to the next chunk (S_WAIT to S_STORE), a row one more
    (S_STEP). P never slows a store: a double-buffered step's store reads its own half of P."""
    per = STORE_CHUNK * cols
    out = [-(-min(per, elements - off) * nbytes // rate) + TIMING["cf_dma_command"] + 1
           + TIMING["store_read"]
           for off in range(0, elements, per)]
    out[-1] += 1
    return out


def _float_drain(config):
    """The cycles a floating-point array's drain vector takes beyond an integer one's
    (``bpsa.gateware.array.systolic``): the partials' reduction, ``FLOAT_REDUCE_LATENCY`` instead of
    ``DRAIN_REGISTERS - 1``; 0 for integers. The floating-point front ends are not built:
    with it and ``config.context_gap`` the engines' fitted timing is a projection."""
    if not config.is_float:
        return 0
    return FLOAT_REDUCE_LATENCY - (DRAIN_REGISTERS - 1)


def _zf_gradient_compute(config, *, channels, obh, ow, r, s):
    """Busy cycles of one zero-free gradient run (fitted: the walker's contexts, a context at
    least ``2 rows`` cycles apart, plus fill and drain)."""
    R, C = config.rows, config.cols
    groups = -(-channels // R)
    d = obh * ow
    ctx = groups * r * s
    # + 2 beyond the fit: the walker's second set-up cycle (its products registered) and its
    # item register (the memories' addresses from registers)
    g = config.context_gap
    return (ctx * max(d, g) - max(0, g - d) + 3 * R + C + 3 + config.mac_latency
            + DRAIN_REGISTERS - 1 + _float_drain(config))


def _zf_loss_classes(*, height, width, r, s, sh, sw, pt, pw, dh, dw):
    """The stride classes of a zero-free loss run over a band of ``height`` dX rows: per
    class, its taps (indices ``r S + q``) and its pixels in the band."""
    out = []
    for a in range(sh):
        for b in range(sw):
            taps = tuple(ri * s + qi for ri in range(r) for qi in range(s)
                         if (a + pt - ri * dh) % sh == 0 and (b + pw - qi * dw) % sw == 0)
            pixels = 0 if a >= height or b >= width else \
                len(range(a, height, sh)) * len(range(b, width, sw))
            out.append((taps, pixels))
    return out


def _zf_reads(config, phase, layer):
    """The A words a zero-free phase's walker reads (BUF_A_READS): per tap, each pixel whose
    operand is inside the tensor (padding is not read), once an operand block. Loss: dY words
    (``cols`` output channels each) for the dX pixels of each stride class with the tap, once
    an input block; gradient: X words for each output pixel, once a block of ``rows``
    channels of each X word and an output block (MX: and a scale word a walker segment of
    each row inside)."""
    n, c, h, w = layer.x_shape
    (oh, ow), (sh, sw), (ph, pw), (dh, dw) = layer.out_hw, layer.stride, layer.pad, layer.dil
    R, C, B = config.rows, config.cols, config.feeder_bus_width
    kt = -(-layer.out_channels // C)
    if phase == "loss":
        def inside(a, size, out, stride, pad, dil, t):
            return sum(1 for i in range(a, size, stride)
                       if 0 <= (i + pad - t * dil) // stride < out)
        total = sum(inside(a, h, oh, sh, ph, dh, ri) * inside(b, w, ow, sw, pw, dw, qi)
                    for a in range(sh) for b in range(sw)
                    for ri in range(layer.kernel_h) for qi in range(layer.kernel_w)
                    if (a + ph - ri * dh) % sh == 0 and (b + pw - qi * dw) % sw == 0)
        return total * n * -(-c // C) * kt

    def inside(out, size, stride, pad, dil, t):
        return sum(1 for o in range(out) if 0 <= o * stride - pad + t * dil < size)
    total = sum(inside(oh, h, sh, ph, dh, ri) * inside(ow, w, sw, pw, dw, qi)
                for ri in range(layer.kernel_h) for qi in range(layer.kernel_w))
    if config.is_mx:                    # and a scale word a walker segment of a row inside
        from bpsa.models.mx import walker_segments
        total += sum(inside(oh, h, sh, ph, dh, ri) for ri in range(layer.kernel_h)) * sum(
            len(walker_segments(ow, w, sw, qi * dw - pw)) for qi in range(layer.kernel_w))
    blocks = sum(-(-min(B, c - cb) // R) for cb in range(0, c, B))
    return total * n * kt * blocks


def _zf_loss_compute(config, *, height, width, out_height, out_width, r, s, sh, sw, pt, pw,
                     dh, dw, k):
    """Busy cycles of one zero-free loss run (:class:`bpsa.gateware.frontends.zero_free.loss.
    ZeroFreeLossWalker` in the accelerator), from :func:`_zf_loss_walk`'s timeline of its
    loader, transposer and emitter, plus the run's set-up and the last context's drain."""
    R, C = config.rows, config.cols
    kblocks = -(-k // C)
    classes = [(taps, -(-pixels // R)) for taps, pixels in _zf_loss_classes(
        height=height, width=width, r=r, s=s, sh=sh, sw=sw, pt=pt, pw=pw, dh=dh, dw=dw)]
    blocks = (C,) * (kblocks - 1) + (k - (kblocks - 1) * C,)
    walk = _zf_loss_walk(tuple(classes), r * s, R, blocks, config.context_gap)
    # the run's set-up before the walk and the last context's drain after it (fitted on
    # 4 x 4, 3 x 5 and 16 x 16 arrays)
    return walk + 2 * R + C + config.mac_latency + 5 + _float_drain(config)


@lru_cache(maxsize=4096)
def _zf_loss_walk(classes, taps_all, rows, blocks, gap):
    """The zero-free loss walker's busy cycles up to its last vector, measured against the
    RTL (exact on every layer of the model's tests): per class (``classes``: its taps, as
    indices ``r S + q``, and its tiles) ``taps_all`` set-up cycles, then per tile the walk of
    the taps up to the class's last (a cycle a tap the class skips) and, per tap and block
    (``blocks``: each block's output channels), ``rows`` cycles loading the block's words
    into one of the transposer's slots (when the emitter has freed it; :data:`TIMING`
    ``zfl_slots``), ``zfl_latency`` cycles later the emitter's vectors, one a cycle; a
    context (tile) ends at least ``gap`` cycles after the one before (the array's context
    gap); ``zfl_class_end`` cycles after a class's last tile. Within a class the timeline is
    periodic once its state (relative to the emitter) repeats: whole periods are added at
    once."""
    t = e = 0                   # the loader's and the emitter's next free cycle
    slots, latency = TIMING["zfl_slots"], TIMING["zfl_latency"]
    free = [0] * slots          # the cycle each transposer slot is free from
    slot, prev_end = 0, -gap
    for taps, tiles in classes:
        t += taps_all
        if not taps or not tiles:
            continue
        last, seen, done = taps[-1], {}, 0
        while done < tiles:
            for idx in range(last + 1):
                if idx not in taps:
                    t += 1
                    continue
                for bi, kv in enumerate(blocks):
                    t = max(t, free[slot]) + rows
                    e = max(t + latency, e) + kv
                    if idx == last and bi == len(blocks) - 1:
                        e = max(e, prev_end + gap)
                        prev_end = e
                    free[slot] = e
                    slot = (slot + 1) % slots
            done += 1
            state = (t - e, prev_end - e, slot, tuple(f - e for f in free))
            if state in seen:           # periodic from here: skip whole periods
                before, e0 = seen[state]
                periods = (tiles - done) // (done - before)
                shift = periods * (e - e0)
                t, e, prev_end = t + shift, e + shift, prev_end + shift
                free = [f + shift for f in free]
                done += periods * (done - before)
                seen = {}
            else:
                seen[state] = (done, e)
        t += TIMING["zfl_class_end"]
    return max(t, e)


def _forward_compute(config, *, channels, in_rows, width, out_rows, ow, r, s, sh, sw, pt, pw,
                     dh, dw, cache):
    """Busy cycles of one forward run (one image, ``channels`` input channels, a band of
    ``out_rows`` output rows from ``in_rows`` X rows): per context (``rows`` pixels of an
    output row), the array's ``C R S`` vectors (at least ``2 rows`` cycles apart), or the
    feeder's time when it is longer by more than its FIFOs' lead (``feeder_fifo_depth``
    entries of ``M`` elements, earned on contexts it finished early). The feeder steps over
    every X SRAM word that covers the context's interest region in each (channel, kernel
    row): ``ceil((offset + span) / B)`` words, the offset being where the row starts in its
    word, a cycle each, more when a lane's interest elements in it overflow its ``M =
    feeder_lane_regs`` registers (full registers leave as a FIFO entry, the rest a cycle later;
    a lane's registers fill across kernel rows, ``S`` elements a row, and start empty a
    context: :func:`bpsa.models.feeder_model.lane_word_cycles`).

    Returns ``(cycles, words)``: ``words`` is the X SRAM words the feeder reads (the words of
    a (channel, kernel row) inside the band that hold an element of an active lane inside
    the row; :func:`bpsa.models.feeder_model.index_steps`' ``read``)."""
    key = (channels, in_rows, width, out_rows, ow, r, s, sh, sw, pt, pw, dh, dw)
    if key in cache:
        return cache[key]
    R, C, B, M = config.rows, config.cols, config.feeder_bus_width, config.feeder_lane_regs
    span = (R - 1) * sw + (s - 1) * dw + 1
    depth = channels * r * s
    # feeder cycles of one (channel, kernel row) by the row's offset in its word and by how
    # full each lane's M registers are as the row starts (``k``: S elements a row, so the
    # row's place in the context decides it; entries never straddle contexts): a cycle a
    # word, more when a lane's elements in it overflow its registers (one entry pushed, the
    # rest a cycle later, M a cycle)
    row_cycles = []
    for goff in range(B):
        by_fill = []
        for k0 in range(M):
            cycles, fill = 0, [k0] * R
            for word in range(-(-(goff + span) // B)):
                es = [sum(1 for q in range(s) if word * B <= goff + i * sw + q * dw
                          < (word + 1) * B) for i in range(R)]
                lanes = [lane_word_cycles(k, False, e, M, False) for e, k in zip(es, fill)]
                cycles += max(c for c, _, _ in lanes)
                fill = [f for _, f, _ in lanes]
            by_fill.append(cycles)
        row_cycles.append(by_fill)
    x0s = [ow0 * sw - pw for ow0 in range(0, ow, R)]
    # SRAM words read of one (channel, kernel row) inside the band, by context and offset
    span_w = (s - 1) * dw + 1
    row_reads = []
    for ow0, x0 in zip(range(0, ow, R), x0s):
        x_lo, x_hi = max(0, x0), min(width, x0 + (min(R, ow - ow0) - 1) * sw + span_w)
        reads = []
        for goff in range(B):
            last = min((x_hi - 1 - x0 + goff) // B, -(-(goff + span) // B) - 1)
            reads.append(max(0, last - (x_lo - x0 + goff) // B + 1) if x_hi > x_lo else 0)
        row_reads.append(reads)
    total = read = ahead = 0
    cap = config.feeder_fifo_depth * M          # the feeder's lead over the array, at most
    for o in range(out_rows):
        ys = [o * sh - pt + ri * dh for ri in range(r)]
        for x0, reads in zip(x0s, row_reads):
            words = 0
            for c in range(channels):
                for ri, y in enumerate(ys):
                    goff = ((c * in_rows + y) * width + x0) % B
                    words += row_cycles[goff][(c * r + ri) * s % M]
                    if 0 <= y < in_rows:
                        read += reads[goff]
            # the array's time of the context, or the feeder's beyond what its FIFOs hold
            # from contexts it finished early
            array = max(depth, config.context_gap)
            late = max(0, words - array - ahead)
            ahead = min(cap, max(0, ahead + array - words))
            total += array + late
    cycles = total + TIMING["forward_run"] + R + s + config.mac_latency + DRAIN_REGISTERS - 1 \
        + _float_drain(config)
    cache[key] = cycles, read
    return cycles, read


def _cf_taps(config, *, channels, layer_channels, s, multi_tile=True):
    """Taps of one kernel row a channel-first tile holds: ``min(rows // C, S)`` (multi-tile)
    when the run's block is the whole layer and ``2 C <= rows``, else 1."""
    R = config.rows
    if multi_tile and channels == layer_channels and 2 * channels <= R:
        return min(R // channels, s)
    return 1


def _cf_compute(config, *, channels, layer_channels, in_rows, width, out_rows, ow, r, s, sh,
                sw, pt, pw, dh, dw, multi_tile=True):
    """One channel-first engine run (one image, a block of ``channels`` input channels, one
    output-channel block, a band of ``out_rows`` output rows from ``in_rows`` X rows):
    ``(cycles, x_words, tiles)``. ``R * ceil(S / T)`` tiles (``T``: :func:`_cf_taps`),
    each streaming the run's ``P = out_rows * OW`` pixels in ``max(P, 2 rows)`` cycles (MX:
    at least ``TIMING["mx_spacing"]``, and one tap a tile), after the set-up and tile 0's
    weight preload, before the drain. X bank words: every
    (channel, tap) of the block once, for the output pixels whose input pixel is not
    padding."""
    R, C = config.rows, config.cols
    taps = _cf_taps(config, channels=channels, layer_channels=layer_channels, s=s,
                    multi_tile=multi_tile and not config.is_mx)
    tiles = r * -(-s // taps)
    pixels = out_rows * ow
    stream = tiles * max(pixels, 2 * R, TIMING["mx_spacing"] if config.is_mx else 0)
    cycles = (R + TIMING["cf_setup"] + R + TIMING["cf_preload"] + stream + R + C
              + config.mac_latency + TIMING["cf_drain"])
    rows_in = sum(1 for ri in range(r) for o in range(out_rows)
                  if 0 <= o * sh - pt + ri * dh < in_rows)
    cols_in = sum(1 for q in range(s) for x in range(ow) if 0 <= x * sw - pw + q * dw < width)
    return cycles, channels * rows_in * cols_in, tiles


def _dispatch(config, desc):
    """The dispatcher's cycles of the layer ``desc`` from its program (the words the RTL runs:
    :func:`bpsa.plan.instructions.layer_ops` as :func:`bpsa.spec.isa.assemble` writes them,
    counted by :func:`bpsa.spec.isa.set_counts`): its set-up (the first fetch,
    ``TIMING["fetch"]``) and, per run, the words before its RUN that are not loads (the SETs,
    STEP, SAVE, SAVE2) and the RUN itself, a cycle each, all its words since the last RUN and
    those up to its first LOAD (the fetch unit's share of the DMA, :func:`_timeline`)."""
    from bpsa.plan import program
    from bpsa.plan.instructions import layer_ops
    from bpsa.spec import isa
    desc = {**_ADDR, "window_lo": 0, "window_hi": (1 << 32) - 1, **desc}
    ops = layer_ops(config, desc)
    gaps, count, words, pre = [], 0, 0, None
    xloads, pending = [], []
    targets = (program.TARGET["FWD_X"], program.TARGET["CF_X"], program.TARGET["CF_XS"])
    for (opcode, sets), (_, fields, flags) in zip(isa.set_counts(config, ops), ops):
        words += sets + 1
        count += sets
        if opcode == isa.Opcode.RUN:
            gaps.append((count + 1, words, words if pre is None else pre))
            xloads.append(pending)
            count = words = 0
            pre, pending = None, []
        elif opcode != isa.Opcode.LOAD:
            count += 1
        else:
            if pre is None:
                pre = words
            slot = "load1." if flags & isa.LOAD_SLOT else "load."
            if fields.get(slot + "target") in targets:
                pending.append({k[len(slot):]: v for k, v in fields.items()
                                if k.startswith(slot)})
    return TIMING["fetch"], gaps, xloads


#: The tensors' addresses of the programs the model reads (:func:`_dispatch`).
_ADDR = {"addr_x": 0x1000_0000, "addr_w": 0x2000_0000, "addr_dy": 0x3000_0000,
         "addr_out": 0x4000_0000}


def _program_loads(cache, loads, ob):
    """The model's loads ``(cache, key, bytes, commands, bank)`` of the program's X-bank loads
    before a run (:func:`_dispatch`): keyed by address and length, the load unit's record (and
    the runs' stride, for their DMA segments). MX: the channel-first X scale bank's loads are
    cache ``"xs"`` (a byte a word)."""
    from bpsa.plan.program import TARGET
    return [("xs" if f.get("target") == TARGET["CF_XS"] else cache,
             ("x", f["addr"], f["length"], f.get("stride", 0)), f["length"] * ob,
             f["count"], f["bank"]) for f in loads]


def _dma_segments(elements, lanes, per_beat, slot):
    """Cycles the DMA moves ``elements`` into words of ``lanes`` elements, from element slot
    ``slot`` of its first beat of ``per_beat``: one a segment, a segment ending at a word's or
    a beat's end (:meth:`bpsa.gateware.bus.dma.DmaEngine._load`). Counts the elements ``i`` that
    start a word (``i % lanes == 0``) or a beat (``(slot + i) % per_beat == 0``)."""
    if elements <= 0:
        return 0
    words = -(-elements // lanes)
    beats = len(range((per_beat - slot) % per_beat, elements, per_beat))
    period = lanes * per_beat // gcd(lanes, per_beat)
    both = sum(1 for i in range(0, min(elements, period), lanes) if (slot + i) % per_beat == 0)
    full, rest = divmod(elements, period)
    if full:
        both = both * full + sum(1 for i in range(0, rest, lanes)
                                 if (slot + i) % per_beat == 0)
    return words + beats - both


def _zf_loss_vectors(*, height, width, r, s, sh, sw, pt, pw, dh, dw, k, rows):
    """Vectors a zero-free loss run sends: per tile of a class, ``k`` for each of its taps."""
    total = 0
    for a in range(min(sh, height)):
        for b in range(min(sw, width)):
            taps = sum(1 for ri in range(r) for qi in range(s)
                       if (a + pt - ri * dh) % sh == 0 and (b + pw - qi * dw) % sw == 0)
            pixels = len(range(a, height, sh)) * len(range(b, width, sw))
            total += -(-pixels // rows) * taps * k
    return total


@dataclass(frozen=True)
class _Boundary:
    """How :func:`_timeline` times a step boundary (P's flush, its clear, the finished step's
    store) and the layer's end. :data:`_FITTED`: the fitted model of the feeder forward, the
    zero-free phases and pooling; :data:`_COUNTED`: the channel-first forward's, state by
    state (the controller's FLUSH, the store machine's idle cycle, DRAIN and DONE)."""
    flush: str              # TIMING key: a run's end to its step's flush
    flush_state: int        # cycles the flush adds after the run's last load (FLUSH)
    store_idle: int         # a store's end to the store machine taking the next
    store_at_clear: bool    # a finished step's store is ready when the next step's flush
                            # ends (else: ``flush`` after the step's last run)
    done: int               # cycles from the last flush or store to the layer's end


_FITTED = _Boundary(flush="step_flush", flush_state=0, store_idle=0, store_at_clear=False,
                    done=4)
_COUNTED = _Boundary(flush="cf_flush", flush_state=1, store_idle=1, store_at_clear=True,
                     done=2)


def _fitted_load(rate, command="dma_command"):
    """A load's cycles under the fitted DMA (``load_cycles`` of :func:`_timeline`): its bytes at
    ``rate`` bytes a cycle plus :data:`TIMING` ``[command]`` a command (:func:`_dma`)."""
    return lambda key, nbytes, commands: _dma(nbytes, commands, rate, command)


def _segment_load(config, lanes, ob):
    """A load's cycles (``load_cycles`` of :func:`_timeline`) into words of ``lanes`` elements
    of ``ob`` bytes: a DMA command a run, each its segments (:func:`_dma_segments`, from the
    element slot of its address in the first beat) plus ``cf_dma_command``. A key with an
    address (the program's X-bank loads, :func:`_program_loads`) gives each run's slot; the
    other loads (blocks of W or dY, whole words of ``cols`` elements) start a beat."""
    per_beat = config.dma_data_width // 8 // ob

    def cycles(key, nbytes, commands):
        each = nbytes // ob // commands
        if key[0] == "x":
            first, stride = (key[1] - _ADDR["addr_x"]) // ob, key[3] // ob
            slots = [(first + j * stride) % per_beat for j in range(commands)]
        else:
            slots = [0] * commands
        return (sum(_dma_segments(each, lanes, per_beat, slot) for slot in slots)
                + TIMING["cf_dma_command"] * commands)
    return cycles


#: Instructions a refill of the fetch unit's ring brings (:data:`bpsa.gateware.controller.
#: fetch.FETCH_DEPTH` / 2).
_HALF = 8


def _timeline(runs, steps_store, store_final, clear_words, setup_cycles, load_cycles, *,
              double, boundary):
    """Cycles of a sequence of runs. ``runs`` is a list of ``(loads, compute, new_step,
    program[, hold])`` (``hold``: the RUN's HOLD, the scheduler's bank does not toggle):
    ``loads`` ``[(cache, key, nbytes, commands[, bank])]`` (the bank the run's by
    default), ``program`` the dispatcher's cycles before the run's first load (:func:`_dispatch`);
    ``load_cycles[cache](key, nbytes, commands)``: a load's cycles from its command to its
    ``done``. ``steps_store[i]``: the DMA commands (cycles each) of the store of the step that
    run ``i`` starts after, ``store_final``: the last step's, ``clear_words[i]``: P words
    cleared before run ``i`` when it starts a step; ``boundary`` (:class:`_Boundary`): how a
    step boundary and the end are timed.

    One DMA: a load is offered 2 cycles after the previous one's ``done`` (or 3 after the
    previous one was offered, when that one hit), its first command 2 cycles later,
    the run starts 2 cycles after the last (the scheduler's IDLE, RUN), or 2 after the previous
    run's end; a load is skipped when its bank holds its key. A new step's flush waits for the
    previous run's accumulations and the store before, then clears P and hands the finished
    step's store to the DMA. With ``double`` (P double-buffered:
    :class:`bpsa.gateware.results.psum_buffer.PsumBuffer`, a half a step) that store runs
    beside the next step's runs, its commands filling the time between loads; without, the next
    step waits for the store and the clear. Returns ``(cycles, compute, dma_busy, loads, P
    waits, load waits)``, ``loads`` the ones the DMA ran, ``(cache, bytes, commands)`` each;
    a run's load wait is how much later it starts than it would with every load already in
    its bank."""
    flush = TIMING[boundary.flush]
    idle = boundary.store_idle
    t_walk = setup_cycles
    load_wait = dma_free = dma_busy = store_free = 0
    end_prev = t_walk
    bank = 0
    held = {}
    compute = p_wait = 0
    loaded = []                     # the loads the DMA ran: (cache, bytes, commands)
    pending = []                    # store commands: [ready time, cycles]

    def stores_until(limit):
        """Run the store commands that can start before ``limit``."""
        nonlocal dma_free, dma_busy, store_free
        while pending and max(dma_free, pending[0][0]) < limit:
            ready, dur = pending.pop(0)
            dma_free = store_free = max(dma_free, ready) + dur
            dma_busy += dur

    landed, needed, chunk, lands = 0, 0, TIMING["fetch_chunk"], []

    def fetch(upto, after):
        """The fetch unit refills the ring half a ring at a time through the DMA, after
        ``after`` (the first two halves at once), until word ``upto`` has landed."""
        nonlocal landed, dma_free, dma_busy
        while landed < upto:
            stores_until(after)
            start = max(setup_cycles if landed < 2 * _HALF else after, dma_free)
            dma_free = start + chunk
            dma_busy += chunk
            lands.append(dma_free)
            landed += _HALF

    for i, (loads, cycles, new_step, (program, words, pre), *hold) in enumerate(runs):
        t = t_walk + program
        fetch(needed + pre, t_walk)         # the words up to the run's first load
        needed += words
        ready = max(t + 3 * len(loads), end_prev + 2)   # with every load a hit
        for cache, key, nbytes, commands, *fixed in loads:
            b = fixed[0] if fixed else bank
            if held.get((cache, b)) == key:
                t += 3
                continue
            stores_until(t + 2)
            start = max(t + 2, dma_free)       # the load unit takes it, checks it, runs it
            dur = load_cycles[cache](key, nbytes, commands)
            dma_free = start + dur
            dma_busy += dur
            loaded.append((cache, nbytes, commands))
            held[(cache, b)] = key
            t = dma_free + 2
        fetch(needed, t_walk)               # the rest, up to its RUN
        start = max(t, end_prev + 2, lands[(needed - 1) // _HALF] + 2)
        load_wait += start - ready
        if new_step:                    # the flush: P's accumulations, the store before
            start = max(start + boundary.flush_state, end_prev + flush)
            stores_until(float("inf"))
            if i:
                start = max(start, store_free + idle)
                kick = start if boundary.store_at_clear else end_prev + flush
                pending += [[kick, dur] for dur in steps_store[i]]
                if not double:          # P has one copy: its store, then the clear
                    stores_until(float("inf"))
                    p_wait += max(0, store_free + idle - start)
                    start = max(start, store_free + idle)
            start += clear_words[i]
            p_wait += clear_words[i]
        end_prev = start + cycles
        compute += cycles
        t_walk = start + 1
        if not (hold and hold[0]):      # a HOLD run reads its predecessor's bank
            bank ^= 1
    stores_until(float("inf"))          # the last flush, then the last step's store
    pending += [[max(end_prev + flush, store_free + idle), dur] for dur in store_final]
    stores_until(float("inf"))
    total = max(end_prev + flush, store_free) + boundary.done
    return total, compute, dma_busy, loaded, p_wait, load_wait


def _class_loss_cycles(config, layer, *, requant=False, multi_tile=True):
    """The loss of ``layer`` as the channel-first forwards of its stride classes
    (:func:`bpsa.plan.loss_classes.class_layers`), each a layer of its own (a descriptor each,
    as the driver runs them): their cycles, bytes and runs added; ``macs``, utilization and
    the roofline the loss's."""
    from bpsa.plan.loss_classes import class_layers
    parts = [layer_cycles(config, "forward", cl, requant=requant, frontend="channel_first",
                          multi_tile=multi_tile) for cl in class_layers(layer)]
    return _combined(config, "loss", layer, parts, requant=requant, frontend="channel_first")


def _combined(config, phase, layer, parts, *, requant, **fields):
    """The :class:`LayerCycles` of ``phase`` of ``layer`` run as the descriptors whose
    figures are ``parts`` (one after the other): their cycles, bytes and runs added, the
    largest bank and P words, ``bound`` the longest part's; ``macs``, utilization and the
    roofline ``layer``'s; ``fields`` set as given."""
    add = ("cycles", "compute_cycles", "array_slots", "dma_read_bytes", "dma_write_bytes",
           "dma_busy_cycles", "runs", "p_wait_cycles", "load_wait_cycles", "x_sram_words",
           "tiles", "a_writes", "b_writes", "p_writes", "a_reads", "b_reads", "p_reads")
    big = ("a_words", "b_words", "p_words")
    total = {name: sum(getattr(p, name) for p in parts) for name in add}
    total.update({name: max(getattr(p, name) for p in parts) for name in big})
    macs = layer.batch * layer.out_channels * prod(layer.out_hw) * layer.crs
    roof = roofline_cycles(config, phase, layer, macs=macs, requant=requant)
    return replace(parts[0], **total, macs=macs,
                   utilization=macs / (config.rows * config.cols * total["cycles"]),
                   roofline_cycles=roof, over_roofline=total["cycles"] / roof,
                   bound=max(parts, key=lambda p: p.cycles).bound, **fields)


def _strip_cycles(config, phase, layer, why, *, requant, frontend, multi_tile):
    """``phase`` of ``layer``, whose rows are too wide for the controller (``why``: its
    refusal), as the driver runs it: in column strips
    (:func:`bpsa.plan.tiling.column_strips`), a descriptor each (a loss strip no dY column
    reaches runs nothing); :exc:`ValueError` naming both reasons when strips do not fit
    either. The host's gathering of the strips' operands is not counted (the RTL's counters
    do not see it)."""
    mode = "zero_free" if phase != "forward" else (
        "channel_first" if frontend == "channel_first" else "bp_im2col")
    try:
        cut, _ = tiling.column_strips(config, phase, layer, mode=mode)
    except ValueError as e:
        reason = str(e)
        raise ValueError(why if reason.endswith(f"({why})") else
                         f"{why}; cut into column strips: {reason}") from None
    parts = [layer_cycles(config, phase, replace(layer, width=st.engine_w, pad_w=0),
                          requant=requant, frontend=frontend, multi_tile=multi_tile)
             for st in cut if st.in_cols]
    return _combined(config, phase, layer, parts, requant=requant, strips=len(cut))


def layer_cycles(config, phase, layer, *, requant=False, frontend=None, multi_tile=True):
    """The model's :class:`LayerCycles` of ``phase`` (``"forward"``, or ``"loss"`` or
    ``"gradient"``, zero-free) of ``layer`` (a :class:`bpsa.spec.layer.ConvLayer`, its
    ``batch`` the images modelled) on ``config``; :exc:`ValueError` with the controller's
    reason for a layer it refuses. ``requant`` (forward, loss): the output leaves
    as operands (the descriptor's REQUANT).

    ``frontend`` (forward): ``"feeder"`` (MODE 0, the data feeder on the output-stationary
    array; the default, MX: ``"channel_first"``, :data:`bpsa.plan.capability.MX_MODES`) or
    ``"channel_first"`` (MODE 2: the channel-first implicit im2col on the
    weight-stationary array; :exc:`ValueError` when ``config`` does not generate it). The
    channel-first walk is the feeder forward's (images, steps of ``kb`` output-channel blocks,
    bands, groups, the step's blocks) with groups of one channel block of ``L = min(C,
    rows)`` channels, X channel-blocked HWC (a group's band is one DMA run of ``eh W L``
    operands into the half of the channel-first banks of the group's parity, ``L`` lanes a
    word). ``multi_tile`` (channel-first): ``False`` models the engine without the paper's
    multi-tile (one tap a tile for every layer; a what-if, the hardware always applies it)."""
    if phase not in ("forward", "loss", "gradient"):
        raise ValueError(f"the model covers the forward and the zero-free loss and gradient, "
                         f"not {phase!r}")
    if layer.groups > 1:            # packs of groups one after the other (plan.groups)
        kw = dict(requant=requant, frontend=frontend, multi_tile=multi_tile)
        p = grouping.packing(config, layer)
        runs = collections.Counter(count for _, count in grouping.packs(layer, p))
        parts = [m for count, times in runs.items() for m in [layer_cycles(
            config, phase, grouping.packed_layer(layer, count), **kw)] * times]
        return _combined(config, phase, layer, parts, requant=requant)
    if frontend is None:            # (a backward phase's front end is its mode's)
        frontend = capability.resolve_mode(config, "forward") if phase == "forward" \
            else "feeder"
    if phase == "loss" and capability.resolve_mode(config, "loss") == "channel_first":
        return _class_loss_cycles(config, layer, requant=requant, multi_tile=multi_tile)
    if frontend not in ("feeder", "channel_first"):
        raise ValueError(f"the forward front end is 'feeder' or 'channel_first', not "
                         f"{frontend!r}")
    cf = frontend == "channel_first"
    if phase != "forward" and cf:
        raise ValueError(f"the channel-first front end runs the forward, not {phase!r}")
    if not multi_tile and not cf:
        raise ValueError("multi_tile applies to the channel-first front end only")
    # what the configuration generates, as the driver checks it (the model: zero-free)
    capability.check(config, phase, mode=frontend if phase == "forward" else "zero_free",
                     requant=0 if requant else None)
    sd = tiling.rewrite_of(config, phase, layer, frontend if phase == "forward" else "zero_free")
    if sd is not None:                  # the driver runs the inner stride-1 layer
        m = layer_cycles(config, phase, sd.inner, requant=requant, frontend=frontend,
                         multi_tile=multi_tile)
        macs = layer.batch * layer.out_channels * prod(layer.out_hw) * layer.crs
        roof = roofline_cycles(config, phase, layer, macs=macs, requant=requant)
        return replace(m, macs=macs, utilization=macs / (config.rows * config.cols * m.cycles),
                       roofline_cycles=roof, over_roofline=m.cycles / roof,
                       space_to_depth=True)
    n, c, h, w = layer.x_shape
    k, r, s = layer.out_channels, layer.kernel_h, layer.kernel_w
    stride, pad, dil = layer.stride, layer.pad, layer.dil
    (sh, sw), (ph, pw), (dh, dw) = stride, pad, dil
    phase_value = {"forward": Phase.FORWARD, "loss": Phase.LOSS, "gradient": Phase.GRADIENT}
    mode = Mode.ZERO_FREE if phase != "forward" else (
        Mode.CHANNEL_FIRST if cf else Mode.BP_IM2COL)
    desc = tiling.setup_descriptor(phase_value[phase], layer, mode)
    desc["requant"] = int(requant)
    try:
        e = setup.run(config, desc, addresses=False)
        setup_cycles, gaps, xloads = _dispatch(config, desc)
    except Refusal as err:          # the driver then cuts the layer into column strips
        return _strip_cycles(config, phase, layer, str(err), requant=requant,
                             frontend=frontend, multi_tile=multi_tile)
    R, C, B = config.rows, config.cols, config.feeder_bus_width
    ob, ab = element_bytes(config.operand_width), element_bytes(config.result_width)
    oh, ow = out_size(h, r, sh, ph, dh), out_size(w, s, sw, pw, dw)
    macs = n * k * oh * ow * c * r * s
    band = e["bh"]
    bands = tiling.bands(phase, h, w, r, s, stride, pad, dil, band, bool(e["banded"]))
    runs, stores = [], []
    kt = e["kt"]
    slots = 0
    if requant:                         # results leave as operands
        ab = ob
    store_rate = _rate(config, C, ab)
    # forward, gradient: X blocked by B into A; loss: dY by cols into A; W or dY by cols in B
    # (MX keeps the fitted constant: the segments measured a small_mxint8 gradient 3.4 % low,
    # not looked into yet)
    def load(lanes):
        return (_fitted_load(_rate(config, lanes, ob)) if config.is_mx
                else _segment_load(config, lanes, ob))

    rates = {"a": load(C if phase == "loss" else B), "b": load(C)}
    x_words = tiles = vectors = 0       # vectors: the result vectors P accumulates
    scale_reads = 0                     # MX gradient: B's scale words a walker segment
    if phase == "forward" and cf:
        cg, kt, kb = e["cg"], e["kt"], e["kb"]       # cg: L = min(C, rows), one block a group
        per_beat = config.dma_data_width // 8 // ob

        mx = config.is_mx               # a block's W words, then (MX) its R S scale words

        def w_load(key, nbytes, commands):
            """A block's W of a channel block: ``cols`` lanes a word."""
            _, t, c0 = key
            parts = -(-c // cg)
            first = (t * (e["crs"] + mx * parts * r * s) + (c0 + mx * (c0 // cg)) * r * s) * C
            return (_dma_segments(nbytes // ob, C, per_beat, first % per_beat)
                    + TIMING["cf_dma_command"] * commands)

        def xs_load(key, nbytes, commands):
            """MX: a band's X scale codes, a byte a word."""
            first, each, stride = key[1] - _ADDR["addr_x"], nbytes // commands, key[3]
            return (sum(_dma_segments(each, 1, per_beat, (first + j * stride) % per_beat)
                        for j in range(commands))
                    + TIMING["cf_dma_command"] * commands)

        # an X band (or a piece of one; or a run an image of stacked images): L lanes a word
        rates = {"cf": _segment_load(config, cg, ob), "b": w_load, "xs": xs_load}
        cache = {}
        store_step, clears = None, []
        xbank = 0                       # X of a group stays in the half of the group's parity
        zn = e["zn"]                    # images a step: stacked into one band of zn H rows
        for n0 in range(0, n, zn):      # (zs), or a run each with W held
            zng = min(zn, n - n0)
            held = zng if zng > 1 and not e["zs"] else 1
            run_bands = bands if zng == 1 or held > 1 else [replace(
                bands[0], in_rows=zng * h, out_rows=zng * oh, engine_h=zng * h,
                engine_oh=zng * oh)]
            for kb0 in range(0, kt, kb):
                kend = min(kb0 + kb, kt)
                for bd in run_bands:
                    first = True
                    for c0 in range(0, c, cg):
                        cgv = min(cg, c - c0)
                        xbank ^= 1
                        key = (cgv, bd.in_rows, bd.out_rows, bd.pad_top)
                        if key not in cache:
                            cache[key] = _cf_compute(
                                config, channels=cgv, layer_channels=c, in_rows=bd.in_rows,
                                width=w, out_rows=bd.out_rows, ow=ow, r=r, s=s, sh=sh, sw=sw,
                                pt=bd.pad_top, pw=pw, dh=dh, dw=dw, multi_tile=multi_tile)
                        comp, words, run_tiles = cache[key]
                        for t in range(kb0, kend):
                            for i in range(held):     # W of the block held for the images
                                # the block's band, L lanes a pixel (or its pieces: the
                                # program's), then W
                                loads = _program_loads("cf", xloads[len(runs)], ob) + (
                                    [] if i else [("b", ("w", t, c0),
                                                   (cgv + mx) * r * s * C * ob, 1)])
                                slots += run_tiles * bd.out_rows * ow * R * C
                                x_words += words
                                tiles += run_tiles
                                vectors += run_tiles * bd.out_rows * ow     # a pass a tile
                                runs.append((loads, comp, first, gaps[len(runs)], i > 0))
                                stores.append(store_step if first and len(runs) > 1 else [])
                                clears.append((kend - kb0) * held * bd.out_rows * ow)
                                first = False
                    store_step = _counted_store_row(held * bd.out_rows * ow * C, ab, C,
                                                    store_rate) * (kend - kb0)
        clear, store_final = clears, store_step
    elif phase == "forward":
        cg, kt, kb = e["cg"], e["kt"], e["kb"]
        rates = {"a": load(B), "b": load(C)}
        cache = {}
        store_step, clears = None, []
        xbank = 0                       # X of a group stays in the bank of the group's parity
        for ni in range(n):
            for kb0 in range(0, kt, kb):
                kend = min(kb0 + kb, kt)
                for bd in bands:
                    first = True
                    for c0 in range(0, c, cg):
                        cgv = min(cg, c - c0)
                        xbank ^= 1
                        comp, words = _forward_compute(
                            config, channels=cgv, in_rows=bd.in_rows, width=w,
                            out_rows=bd.out_rows, ow=ow, r=r, s=s, sh=sh, sw=sw, pt=bd.pad_top,
                            pw=pw, dh=dh, dw=dw, cache=cache)
                        for t in range(kb0, kend):
                            loads = _program_loads("a", xloads[len(runs)], ob) + [
                                ("b", ("w", t, c0), cgv * r * s * C * ob, 1)]
                            slots += bd.out_rows * -(-ow // R) * cgv * r * s * R * C
                            x_words += words
                            vectors += bd.out_rows * ow         # a vector an output pixel
                            runs.append((loads, comp, first, gaps[len(runs)]))
                            stores.append(store_step if first and len(runs) > 1 else [])
                            clears.append((kend - kb0) * bd.out_rows * ow)
                            first = False
                    store_step = _store_row(bd.out_rows * ow * C, ab, C, store_rate) * (
                        kend - kb0)
        clear, store_final = clears, store_step
    elif phase == "gradient":
        from bpsa.models.mx import walker_segments
        ct, kb, nb, cn, zn = e["ct"], e["kb"], e["nb"], e["cn"], e["zn"]
        store_step = None
        clears = []
        for kb0 in range(0, kt, kb):
            kend = min(kb0 + kb, kt)
            for cs in range(0, ct, cn):
                blocks = min(cn, ct - cs)
                chans = min(cn * B, c - cs * B)
                step_store = (_store_row if config.is_mx else _counted_store_row)(
                    chans * r * s * C, ab, C, store_rate) * (kend - kb0)
                first = True
                carry = []                      # dY pieces after a run: the next run's
                for n0 in range(0, n, zn):      # zn images a run, stacked
                    zng = min(zn, n - n0)
                    for bd in bands:
                        words = bd.out_rows * e["pd"]   # MX: a row's scale words too
                        for kk in range(kb0, kend):
                            for i in range(blocks):
                                cgv = min(B, c - (cs + i) * B)
                                # X of the step's blocks (or its pieces under the runs
                                # before: the program's), then dY
                                loads = _program_loads("a", xloads[len(runs)], ob) + carry
                                carry = []
                                # dY of the block serves the step's blocks; with several,
                                # the next block's comes a piece after each run
                                if i == 0 and (kk == kb0 or blocks == 1):
                                    loads.append(("b", ("dy", n0, kk, bd.out0, 0),
                                                  zng * words * C * ob, zng))
                                if config.is_mx:    # its own engine, segments
                                    comp = zg_engine_cycles(
                                        config, channels=cgv, width=w,
                                        out_height=zng * bd.out_rows, out_width=ow,
                                        kernel_h=r, kernel_w=s, stride_w=sw, dil_w=dw,
                                        pad_w=pw)
                                else:
                                    comp = _zf_gradient_compute(config, channels=cgv,
                                                                obh=zng * bd.out_rows, ow=ow,
                                                                r=r, s=s)
                                slots += (-(-cgv // R) * r * s * zng * bd.out_rows * ow
                                          * R * C)
                                # a dW row a channel and tap (MX: a row per segment of
                                # each output row, which P folds)
                                segs = zng * bd.out_rows * sum(
                                    len(walker_segments(ow, w, sw, q * dw - pw))
                                    for q in range(s)) if config.is_mx else 0
                                vectors += cgv * r * (segs if config.is_mx else s)
                                scale_reads += -(-cgv // R) * r * segs  # MX: dY's a segment
                                runs.append((loads, comp, first, gaps[len(runs)], i > 0))
                                stores.append(store_step if first and len(runs) > 1 else [])
                                clears.append((kend - kb0) * blocks * nb)
                                first = False
                                lo, hi = dy_piece(words, i, blocks)
                                if blocks > 1 and kk + 1 < kend and hi > lo:
                                    carry.append(("b", ("dy", n0, kk + 1, bd.out0, lo),
                                                  zng * (hi - lo) * C * ob, zng))
                store_step = step_store
        clear = clears
        store_final = store_step
    else:
        ct, kg, nb, zn, cn = e["ct"], e["kg"], e["nb"], e["zn"], e["cn"]
        store_step = None
        clears = []
        xbank = 0                       # dY of a group stays in the bank of its parity
        held = None                     # the W slice the runs read
        for cb0 in range(0, ct, cn):
            cbe = min(cb0 + cn, ct)
            for bd in bands:
                for n0 in range(0, n, zn):
                    zng = min(zn, n - n0)
                    first = True
                    for k0 in range(0, kt, kg):
                        kend = min((k0 + kg) * C, k)
                        kch = kend - k0 * C
                        blocks = min(kg, kt - k0)
                        comp = _zf_loss_compute(config, height=bd.out_rows, width=w,
                                                out_height=bd.in_rows, out_width=ow, r=r, s=s,
                                                sh=sh, sw=sw, pt=bd.pad_top, pw=pw, dh=dh,
                                                dw=dw, k=kch)
                        vec = _zf_loss_vectors(height=bd.out_rows, width=w, r=r, s=s, sh=sh,
                                               sw=sw, pt=bd.pad_top, pw=pw, dh=dh, dw=dw,
                                               k=kch, rows=R)
                        # a result vector a dX pixel of the classes with taps
                        reached = sum(p for taps, p in _zf_loss_classes(
                            height=bd.out_rows, width=w, r=r, s=s, sh=sh, sw=sw, pt=bd.pad_top,
                            pw=pw, dh=dh, dw=dw) if taps)
                        # W of the step's blocks stays in a half of B when it fits (one
                        # load when it changes, the runs after HOLD), else a block's a run
                        wwords = kch * r * s
                        bcap = config.buf_b_depth // 2
                        whole = (cbe - cb0) * k * r * s <= bcap     # every output channel's
                        resident = whole or (cbe - cb0) * wwords <= bcap
                        want = (cb0,) if whole else (cb0, k0)
                        for ni in range(n0, n0 + zng):
                            xbank ^= 1
                            for cb in range(cb0, cbe):
                                # dY of the group (or its pieces under the runs before:
                                # the program's), then W
                                loads = _program_loads("a", xloads[len(runs)], ob)
                                hold = resident and held == want
                                if not resident:
                                    loads.append(("b", ("w", cb, k0), wwords * C * ob, 1))
                                    held = None
                                elif not hold:
                                    loads.append(("b", ("w",) + want, (cbe - cb0) * (
                                        k * r * s if whole else wwords) * C * ob,
                                        1 if whole else cbe - cb0))
                                    held = want
                                runs.append((loads, comp, first, gaps[len(runs)], hold))
                                stores.append(store_step if first and len(runs) > 1 else [])
                                clears.append((cbe - cb0) * zng * bd.out_rows * w)
                                slots += vec * R * C
                                vectors += reached
                                first = False
                    # counted: the loss engine's result vectors no longer slow its store
                    store_step = _counted_store_row(bd.out_rows * w * C, ab, C, store_rate) * (
                        zng * (cbe - cb0))
        clear = clears
        store_final = store_step
    if len(runs) != len(gaps):
        raise AssertionError(f"the model's loops ran {len(runs)} runs, the program "
                             f"{len(gaps)}")
    clears = clear if isinstance(clear, list) else [clear] * len(runs)
    total, compute, dma_busy, ran, p_wait, load_wait = _timeline(
        runs, stores, store_final or [], clears, setup_cycles, rates,
        double=phase != "forward" or bool(e["dbl"]), boundary=_COUNTED if cf else _FITTED)
    reads = sum(nbytes for _, nbytes, _ in ran)
    # P's words written (BUF_P_WRITES): each result vector's accumulation, each step's clear
    p_writes = vectors + sum(words for words, run in zip(clears, runs) if run[2])
    # the buffers' words the engine reads (BUF_A_READS, BUF_B_READS): the feeder's X words
    # and a W word a slot row a context plus one a run; the channel-first engine's X words and
    # a tile's rows W words; the zero-free walkers' operands inside the tensors and a B word a
    # slot row
    if phase == "forward":
        a_reads = x_words
        b_reads = tiles * R if cf else slots // (R * C) + len(runs)
    else:
        a_reads, b_reads = _zf_reads(config, phase, layer), slots // (R * C) + scale_reads
    # the buffer words the loads write (the RTL's BUF_A_WRITES, BUF_B_WRITES): a run of a load
    # fills whole words of its buffer's lanes (MX's X scale codes: a byte a word, A's)
    lanes = {"a": C if phase == "loss" else B, "cf": e["cg"], "b": C}
    written = {"a": 0, "b": 0}
    for cache, nbytes, commands in ran:
        each, per = (nbytes // commands, 1) if cache == "xs" else (
            nbytes // ob // commands, lanes[cache])
        written["b" if cache == "b" else "a"] += commands * -(-each // per)
    util = macs / (R * C * total)
    # what bounds it: the part busy longest of the array computing, the DMA moving, P being
    # cleared or waited for (its store), and the set-up and per-run programs
    setup_time = setup_cycles + sum(run[3][0] for run in runs)
    bound = max([("array", compute), ("dma", dma_busy), ("P", p_wait),
                 ("set-up", setup_time)], key=lambda b: b[1])[0]
    words = {"a": 0, "b": 0}
    for loads, *_ in runs:
        for cache, _, nbytes, commands, *_ in loads:
            if cache == "xs":           # MX: the channel-first X scale bank
                continue
            lanes = {"a": C if phase == "loss" else B, "cf": e["cg"]}.get(cache, C)
            bank = "a" if cache == "cf" else cache
            words[bank] = max(words[bank], -(-nbytes // (lanes * ob)))
    p_words = max(clear) if isinstance(clear, list) and clear else clear
    writes = {"forward": lambda: n * e["kt"] * oh * ow * C * ab,
              "loss": lambda: n * e["ct"] * h * w * C * ab,
              "gradient": lambda: e["kt"] * c * r * s * C * ab}[phase]()
    roof = roofline_cycles(config, phase, layer, macs=macs, requant=requant)
    return LayerCycles(cycles=total, compute_cycles=compute, macs=macs, array_slots=slots,
                       utilization=util,
                       dma_read_bytes=reads, dma_write_bytes=writes,
                       dma_busy_cycles=dma_busy, runs=len(runs), bound=bound,
                       roofline_cycles=roof, over_roofline=total / roof,
                       p_wait_cycles=p_wait, a_words=words["a"], b_words=words["b"],
                       p_words=p_words or 0, load_wait_cycles=load_wait,
                       a_writes=written["a"], b_writes=written["b"],
                       p_writes=p_writes, a_reads=a_reads, b_reads=b_reads,
                       p_reads=vectors + writes // (C * ab),
                       frontend=frontend if phase == "forward" else "",
                       x_sram_words=x_words, x_word_operands=(
                           (1 if cf else B) if phase == "forward" else 0),
                       tiles=tiles)


def traditional_cycles(config, phase, layer):
    """The model's :class:`LayerCycles` of ``phase`` (``"loss"`` or ``"gradient"``) of
    ``layer`` (a :class:`bpsa.spec.layer.ConvLayer`) run the traditional way
    (``--baseline``): the forward convolution of the zero-inserted / zero-padded operands the
    driver builds (:meth:`bpsa.spec.layer.ConvLayer.baseline`),
    with ``macs``, ``utilization`` and the roofline of the layer itself (the zeros are work
    the traditional flow adds, not the layer's)."""
    if phase not in ("loss", "gradient"):
        raise ValueError(f"the traditional flow applies to loss and gradient, not {phase!r}")
    b = layer.baseline(phase)
    m = layer_cycles(config, "forward", b)
    oh, ow = layer.out_hw
    macs = layer.batch * layer.out_channels * oh * ow * layer.crs
    roof = roofline_cycles(config, phase, layer, macs=macs)
    return LayerCycles(**dict(m.as_dict(), macs=macs,
                              utilization=macs / (config.rows * config.cols * m.cycles),
                              roofline_cycles=roof, over_roofline=m.cycles / roof))


def roofline_cycles(config, phase, layer, *, macs, requant=False):
    """The roofline bound in cycles (see :class:`LayerCycles`) of ``phase`` of ``layer`` (a
    :class:`bpsa.spec.layer.ConvLayer`) doing ``macs`` MACs; ``requant``: the output leaves as
    operands."""
    moved = min_bytes(config, phase, layer, requant=requant)
    return max(-(-macs // (config.rows * config.cols)),
               -(-moved // (config.dma_data_width // 8)))


def min_bytes(config, phase, layer, *, requant=False):
    """Bytes ``phase`` of ``layer`` (a :class:`bpsa.spec.layer.ConvLayer`) must move at least:
    its inputs read once (of X, the elements a tap reads: a 1 x 1 stride-2 layer's quarter),
    its output written once (operands at operand width, results as accumulators, or as
    operands with ``requant``). The output size is
    :func:`bpsa.spec.layer.out_size`'s (no exception when the kernel does not fit)."""
    ob, ab = element_bytes(config.operand_width), element_bytes(config.result_width)
    if requant:
        ab = ob
    oh = out_size(layer.height, layer.kernel_h, layer.stride_h, layer.pad_h, layer.dil_h,
                  layer.pad_b)
    ow = out_size(layer.width, layer.kernel_w, layer.stride_w, layer.pad_w, layer.dil_w)
    n, k = layer.batch, layer.out_channels
    x, wt = n * layer.channels * layer.height * layer.width, k * layer.crs
    read = n * layer.channels * _read(layer.height, oh, layer.kernel_h, layer.stride_h,
                                      layer.pad_h, layer.dil_h) * _read(
        layer.width, ow, layer.kernel_w, layer.stride_w, layer.pad_w, layer.dil_w)
    y = n * k * max(oh, 0) * max(ow, 0)
    return {"forward": (read + wt) * ob + y * ab, "loss": (y + wt) * ob + x * ab,
            "gradient": (read + y) * ob + wt * ab}[phase]


def _read(size, out, kernel, stride, pad, dil):
    """Input positions along an axis that some tap of ``out`` outputs reads (a 1 x 1 stride-2
    layer reads every other one)."""
    pos = (np.arange(max(out, 0))[:, None] * stride + np.arange(kernel) * dil - pad).ravel()
    return len(np.unique(pos[(pos >= 0) & (pos < size)]))


def _pool_unit_cycles(*, bwd, avg, relu, planes, rows, drows, y0, h, w, oh, ow, r, s, sh, sw,
                      ph, pw, div, fp=False, lanes=1):
    """Busy cycles of one run of the pooling unit (:mod:`bpsa.gateware.frontends.pool.pool`), from
    its state sequence: eleven set-up cycles (the products one a cycle). Forward, an output:
    its window's ``R S`` taps one a cycle and five cycles around them (``div`` more to
    divide). Backward, max: a window of the band's ``drows`` dY rows, its dY read, its taps
    scanned and its scatter (``R S + 5``; with ``lanes`` planes at once, a cycle a lane's
    scatter: ``lanes - 1`` more). Backward, avg, a dX element: the covering windows'
    candidate rows (one cycle each), for each row inside dY the candidate columns (one cycle
    each, a window inside dY one more). Floating point (``fp``): a window scan one cycle more
    (P's adders), a forward average's tap ``POOL_FLOAT_MAC_LATENCY + 1`` cycles, a dY summed
    by the average's backward as many more, and the scaling (``div``) as many. ``planes``:
    blocks of ``lanes`` planes."""
    mac = POOL_FLOAT_MAC_LATENCY + 1
    div = (mac if fp else div) if avg else 0
    tap = mac if fp and avg else 1
    if not bwd:
        per_row = 2 + ow * (r * s * tap + 5 + fp + div)
        return 12 + planes * (1 + rows * per_row)
    if not avg:
        return 12 + planes * (2 + drows * (1 + ow * (r * s + 4 + lanes + fp)))

    def walk(first, count, stride, pad, kernel, outs):
        """Per coordinate: (cycles of its candidate loop, windows inside the output)."""
        visits, inside = [], []
        for y in range(first, first + count):
            q, rem = divmod(y + pad, stride)
            t = cyc = ins = 0
            while True:
                cyc += 1
                off, o = rem + t * stride, q - t
                if off >= kernel or o < 0:
                    break
                if o < outs:
                    ins += 1
                t += 1
            visits.append(cyc)
            inside.append(ins)
        return visits, inside

    rv, rin = walk(y0, rows, sh, ph, r, oh)
    cv, cin = walk(0, w, sw, pw, s, ow)
    col_cost = sum(cv) + sum(cin) * (1 + mac * fp)  # a valid row's column loops, all x
    per_elem = 1 + 1 + 1 + div + 1                 # PIXEL, END, VAL, EMIT
    plane = rows * (2 + w * per_elem) + w * sum(rv) + sum(rin) * col_cost
    return 12 + planes * (1 + plane)


def pool_cycles(config, phase, *, n, c, h, w, r, s, stride=None, pad=(0, 0), kind="max",
                relu=False, requant=True):
    """The model's :class:`LayerCycles` of a pooling layer (``phase``: ``"pool_forward"`` or
    ``"pool_backward"``; ``kind``: ``max``, ``avg`` or ``global_avg``) on ``config``: the
    program's runs (:func:`bpsa.plan.tiling.pool_plan`), the pooling unit's cycles of each,
    the loads into its buffer's two banks overlapped with the run before, and the stores
    (P is double-buffered). ``macs`` is 0 (no MAC), ``utilization`` 0; ``bound`` names
    ``pool`` for the unit. ``requant``: the output leaves as operands (the driver's pooling
    forward always does). :exc:`ValueError` with the controller's reason for a refused
    layer."""
    if kind == "global_avg":
        kind, ((r, s), stride, pad) = "avg", global_avg_window(h, w)
    stride = (r, s) if stride is None else tuple(stride)
    e = tiling.pool_plan(config, phase, n, c, h, w, r, s, stride, pad, kind, relu)
    bwd = phase == "pool_backward"
    C, NL = config.cols, config.pool_lanes      # NL planes a buffer word, channel-blocked
    ob = element_bytes(config.operand_width)
    ab = ob if requant else element_bytes(config.acc_width)
    rates = {"x": _fitted_load(_rate(config, NL, ob), "pool_dma_command"),
             "d": _fitted_load(_rate(config, NL, ob), "pool_dma_command")}
    out_w = w if bwd else e["ow"]
    runs, stores, clears = [], [], []
    reads = 0
    store = []
    pdesc = {"phase": Phase.POOL_BACKWARD if bwd else Phase.POOL_FORWARD, "n": n, "c": c,
             "h": h, "w": w, "k": c, "r": r, "s": s, "stride_h": stride[0],
             "stride_w": stride[1], "pad_h": pad[0], "pad_w": pad[1], "dil_h": 1, "dil_w": 1,
             "mode": 0, "requant": int(requant), "relu": int(relu),
             "pool_kind": int(kind == "avg")}
    setup_cycles, gaps, _ = _dispatch(config, pdesc)
    for i, run in enumerate(e["runs"]):
        loads = []
        if run["x_plane"]:
            loads.append(("x", ("x", run["i0"], run["xlo"], run["xrows"]),
                          run["planes"] * run["x_plane"] * NL * ob, run["planes"]))
        if bwd and run["drows"]:
            loads.append(("d", ("d", run["i0"], run["dlo"], run["drows"]),
                          run["planes"] * run["d_plane"] * NL * ob, run["planes"]))
        comp = _pool_unit_cycles(bwd=bwd, avg=kind == "avg", relu=relu, planes=run["planes"],
                                 rows=run["rows"], drows=run["drows"], y0=run["y0"], h=h, w=w,
                                 oh=e["oh"], ow=e["ow"], r=r, s=s, sh=stride[0], sw=stride[1],
                                 ph=pad[0], pw=pad[1], div=pool_divide_cycles(config),
                                 fp=config.is_float, lanes=NL)
        runs.append((loads, comp, True, gaps[i]))
        stores.append(store if i else [])
        clears.append(run["planes"] * run["p_row"])
        store = _store_row(run["rows"] * out_w * NL, ab, C, _rate(config, C, ab),
                           "pool_dma_command") * run["planes"]
        reads += sum(nbytes for _, _, nbytes, _ in loads)
    total, compute, dma_busy, ran, p_wait, load_wait = _timeline(
        runs, stores, store, clears, setup_cycles, rates, double=True,
        boundary=_FITTED)
    loaded = sum(nbytes for _, nbytes, _ in ran)
    outs = n * -(-c // NL) * NL * (h * w if bwd else e["oh"] * e["ow"])
    setup_time = setup_cycles + sum(g[0] for g in gaps)
    bound = max([("pool", compute), ("dma", dma_busy), ("P", p_wait), ("set-up", setup_time)],
                key=lambda b: b[1])[0]
    moved = loaded + outs * ab
    roof = max(1, -(-moved // (config.dma_data_width // 8)))
    return LayerCycles(cycles=total, compute_cycles=compute, macs=0, array_slots=0,
                       utilization=0.0, dma_read_bytes=loaded, dma_write_bytes=outs * ab,
                       dma_busy_cycles=dma_busy, runs=len(runs), bound=bound,
                       roofline_cycles=roof, over_roofline=total / roof,
                       p_wait_cycles=p_wait, load_wait_cycles=load_wait,
                       a_words=max((nb // (ob * NL) for ld, *_ in runs for _, _, nb, _ in ld),
                                   default=0),
                       p_words=max(clears, default=0),
                       a_writes=sum(cm * -(-(nb // ob // cm) // NL) for _, nb, cm in ran),
                       a_reads=0 if bwd else _pool_reads(n, c, h, w, r, s, stride, pad, NL))


def _pool_reads(n, c, h, w, r, s, stride, pad, lanes):
    """The pooling forward's buffer words read (BUF_A_READS): each window's elements inside
    the plane, a word of ``lanes`` planes (channel-blocked), bands or not."""
    def inside(size, k, st, p):
        return sum(1 for o in range(out_size(size, k, st, p, 1)) for i in range(k)
                   if 0 <= o * st - p + i < size)
    return n * -(-c // lanes) * inside(h, r, stride[0], pad[0]) * inside(w, s, stride[1], pad[1])


def workload_layers(batch=1):
    """Every layer of ``bpsa/workloads/conv_layers.csv`` as ``(network, name, layer)``,
    ``layer`` the :class:`bpsa.spec.layer.ConvLayer` of ``batch`` images."""
    import csv
    from importlib import resources
    with resources.files("bpsa.workloads").joinpath("conv_layers.csv").open() as f:
        rows = list(csv.DictReader(f))
    out = []
    for row in rows:
        c, h, w, k, r, s, st, p, d = (int(row[x]) for x in (
            "C", "H", "W", "K", "R", "S", "stride", "pad", "dilation"))
        out.append((row["network"], row["layer"],
                    ConvLayer.conv(batch, c, h, w, k, r, s, st, p, d)))
    return out


def phase_table(config, layers, phases, *, baseline=False, requant=False, refusals=True):
    """The cycle model of every ``(network, name, layer)`` of ``layers`` (as
    :func:`workload_layers` gives them) in every phase of ``phases``: a list of dicts, one a
    layer and phase, ``network``, ``layer``, ``phase``, ``batch``, ``baseline`` and
    :meth:`LayerCycles.as_dict`'s figures. ``baseline``: :func:`traditional_cycles` instead
    of :func:`layer_cycles`; ``requant``: the forward's and the loss's outputs leave
    requantized. A layer phase the configuration cannot run gets ``refused`` (the reason)
    with ``refusals``; without, its ValueError propagates."""
    model = traditional_cycles if baseline else layer_cycles
    out = []
    for network, name, layer in layers:
        for phase in phases:
            entry = {"network": network, "layer": name, "phase": phase, "batch": layer.batch,
                     "baseline": baseline}
            try:
                extra = {"requant": True} if requant and phase != "gradient" else {}
                entry.update(model(config, phase, layer, **extra).as_dict())
            except ValueError as e:
                if not refusals:
                    raise
                entry["refused"] = str(e)
            out.append(entry)
    return out



def zg_stream(config, *, channels, width, out_height, out_width, kernel_h, kernel_w,
              stride_w, dil_w, pad_w, **_):
    """The cycle (from 0) the zero-free gradient engine takes a run's last beat: the walker's
    beats one a cycle (its contexts in order; MX: each segment of
    :func:`bpsa.models.mx.walker_segments` a scale beat and its vectors), a context's last
    vector at least ``segment_cycles`` after the one before."""
    from bpsa.models.mx import walker_segments
    g = config.context_gap
    if config.is_mx:
        g = max(g, TIMING["mx_spacing"])
        rows = [[b - a for a, b, _ in walker_segments(out_width, width, stride_w,
                                                      q * dil_w - pad_w)]
                for q in range(kernel_w)]
    else:
        rows = [None] * kernel_w
    t, last = 0, -g
    for _ in range(-(-channels // config.rows) * kernel_h):
        for segs in rows:
            for length in (segs * out_height if segs else [out_height * out_width]):
                t += config.is_mx + length - 1            # the scale beat, the vectors
                t = max(t, last + g)                      # the last vector
                last = t
                t += 1
    return last


def zg_engine_cycles(config, **desc):
    """Cycles of one zero-free gradient engine run
    (:mod:`bpsa.gateware.frontends.zero_free.gradient_engine`; the cycle that takes
    ``start`` and the busy ones; ``desc``: the run's descriptor fields): the chains' priming
    or the walker's fill, whichever is longer, the beats (:func:`zg_stream`), and the last
    context's drain."""
    R = config.rows
    return (max(R, TIMING["zg_fill"]) + zg_stream(config, **desc) + 2 * R + config.cols
            + config.mac_latency + TIMING["zg_drain"])
