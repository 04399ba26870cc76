"""cocotb testbench of the partial-sum buffer P in an MX format (generated Verilog of the
``psum_buffer`` top under Verilator) against a golden built from the golden model's
:func:`bpsa.models.mx.accumulate_block` alone: rounds of a clear pass, random result vectors
(block sums and scale codes of every kind) added into random words, several a word, and every
word read back through the DMA read port and compared bit for bit. ``BPSA_SEED`` (default 1)
seeds the rounds; the Amaranth-simulator test draws its rounds from :func:`rounds` and its
expected words from :func:`golden` too.

A vector is ``(addr, lanes, scale_row, scale_cols)``: ``lanes`` the block sums as the PE
drains them, as unsigned bit patterns of ``acc_width`` bits (``mxint8``: 21-bit two's
complement; ``mxfp8_e4m3``: the 42-bit two's-complement sum and the NaN flag above it)."""

import os

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge, RisingEdge

from bpsa.config import MX_WIDTHS
from bpsa.models.mx import accumulate_block
from bpsa.sim.runner import load_config_json
from bpsa.spec.numeric import MX_FORMATS, MX_SCALE_BIAS, MX_SCALE_NAN

#: The fewest cycles between two vectors for one word (``psum_buffer.MX_SPACING``: two stages
#: and the block accumulator's seven); the Amaranth test checks the module's constant equals it.
SPACING = 9
#: Cycles from a DMA read to its data (``psum_buffer.READ_LATENCY``).
READ_LATENCY = 2


def _sum_bits(fmt):
    """The block sum's two's-complement bits (below the NaN flag for FP8 elements)."""
    bits = MX_WIDTHS[fmt][1]
    return bits if MX_FORMATS[fmt].is_int else bits - 1


def _scales(rng, cols):
    """``scale_row`` and ``scale_cols`` of one vector, from one of four regimes: near the
    bias (sums of comparable magnitude), high (sums overflow to infinity), low (sums below
    2^-126: zero), and special codes (0, 1, 127, 253, 254, 255: NaN)."""
    r = rng.random()
    if r < 0.82:
        lo, hi = 112, 143
    elif r < 0.87:
        lo, hi = 232, 255
    elif r < 0.94:
        lo, hi = 0, 16
    else:
        codes = [0, 1, 127, 253, 254, MX_SCALE_NAN]
        return int(rng.choice(codes)), [int(rng.choice(codes)) for _ in range(cols)]
    return int(rng.integers(lo, hi)), [int(rng.integers(lo, hi)) for _ in range(cols)]


def _lane(rng, fmt):
    """One block sum (a bit pattern): zero, the extremes, +-1, or a random magnitude of a
    random length, either sign; FP8 elements: the NaN flag now and then."""
    w = _sum_bits(fmt)
    kind = rng.integers(0, 8)
    if kind == 0:
        s = 0
    elif kind == 1:
        s = int(rng.choice([-(1 << (w - 1)), (1 << (w - 1)) - 1, 1, -1]))
    else:
        s = int(rng.integers(1, 1 << int(rng.integers(1, w)))) * int(rng.choice([-1, 1]))
    word = s % (1 << w)
    if not MX_FORMATS[fmt].is_int and rng.random() < 0.03:
        word |= 1 << w                                  # the NaN flag
    return word


def rounds(fmt, cols, depth, n_rounds, cycles, seed):
    """``n_rounds`` rounds, each a list of ``cycles`` entries, one a cycle: ``None`` or a vector
    for a word whose previous vector came :data:`SPACING` or more cycles before (a third of
    them exactly :data:`SPACING` when one such word exists). A tenth of the vectors cancel an
    earlier vector for their word (the same scales, the sums negated)."""
    rng = np.random.default_rng(seed)
    w = _sum_bits(fmt)
    out = []
    for _ in range(n_rounds):
        last, sent, entries = {}, {}, []
        for t in range(cycles):
            free = [a for a in range(depth) if t - last.get(a, -SPACING) >= SPACING]
            edge = [a for a in free if t - last.get(a, -1) == SPACING]
            if not free or rng.random() < 0.2:
                entries.append(None)
                continue
            addr = int(rng.choice(edge if edge and rng.random() < 0.33 else free))
            if sent.get(addr) and rng.random() < 0.1:
                _, lanes, sr, scs = sent[addr][int(rng.integers(0, len(sent[addr])))]
                lanes = [(-(x % (1 << w))) % (1 << w) | (x >> w << w) for x in lanes]
            else:
                sr, scs = _scales(rng, cols)
                lanes = [_lane(rng, fmt) for _ in range(cols)]
            vector = (addr, lanes, sr, scs)
            last[addr] = t
            sent.setdefault(addr, []).append(vector)
            entries.append(vector)
        out.append(entries)
    return out


def golden(fmt, cols, depth, entries):
    """Every word of P after one round (cleared to +0 first): each lane folded with
    :func:`accumulate_block` over the round's vectors for its word, in the order sent."""
    w = _sum_bits(fmt)
    quantum = MX_FORMATS[fmt].quantum_exp
    words = {a: [0] * cols for a in range(depth)}
    for v in entries:
        if v is None:
            continue
        addr, lanes, sr, scs = v
        for j in range(cols):
            s = lanes[j] % (1 << w)
            s = s - (1 << w) if s >> (w - 1) else s
            flag = lanes[j] >> w
            e = sr + scs[j] - 2 * MX_SCALE_BIAS + 2 * quantum
            words[addr][j] = accumulate_block(words[addr][j], s, e, bool(
                flag or sr == MX_SCALE_NAN or scs[j] == MX_SCALE_NAN))
    return words


def pack(cfg, vector):
    """A vector as the ``acc`` stream's payload bits (the layout in field order, from bit 0:
    ``addr``, ``data`` (``cols`` lanes of ``acc_width`` bits), ``scale_row``, ``scale_cols``
    (``cols`` codes of 8 bits))."""
    addr, lanes, sr, scs = vector
    aw = (cfg["buf_p_depth"] - 1).bit_length()
    acc, cols = cfg["acc_width"], cfg["cols"]
    bits, pos = addr, aw
    for x in lanes:
        bits |= x << pos
        pos += acc
    bits |= sr << pos
    pos += 8
    for j, c in enumerate(scs):
        bits |= c << (pos + 8 * j)
    return bits


@cocotb.test()
async def words_match_the_golden_model(dut):
    cfg = load_config_json()
    fmt, cols, depth = cfg["arithmetic"], cfg["cols"], cfg["buf_p_depth"]
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    for name in ("acc__valid", "fill__valid", "clear", "clear_base", "read_en", "read_addr"):
        getattr(dut, name).value = 0
    dut.acc__payload.value = 0
    dut.fill__payload.value = 0
    dut.clear_words.value = depth
    dut.rst.value = 1
    await RisingEdge(dut.clk)
    dut.rst.value = 0
    compared = 0
    for r, entries in enumerate(rounds(fmt, cols, depth, 6, 8 * depth, int(
            os.environ.get("BPSA_SEED", "1")))):
        await FallingEdge(dut.clk)
        dut.clear.value = 1
        for _ in range(depth):
            await FallingEdge(dut.clk)
        dut.clear.value = 0
        for v in entries:
            dut.acc__valid.value = v is not None
            if v is not None:
                dut.acc__payload.value = pack(cfg, v)
            await FallingEdge(dut.clk)
        dut.acc__valid.value = 0
        while int(dut.busy.value):
            await FallingEdge(dut.clk)
        want = golden(fmt, cols, depth, entries)
        for a in range(depth):
            dut.read_addr.value = a
            dut.read_en.value = 1
            await FallingEdge(dut.clk)
            dut.read_en.value = 0
            for _ in range(READ_LATENCY - 1):
                await FallingEdge(dut.clk)
            flat = int(dut.read_data.value)
            got = [(flat >> (32 * j)) & 0xFFFFFFFF for j in range(cols)]
            assert got == want[a], (f"round {r} word {a}: {[hex(x) for x in got]}, want "
                                    f"{[hex(x) for x in want[a]]}")
            compared += cols
    assert compared == 6 * depth * cols
