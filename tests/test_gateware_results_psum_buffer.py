"""The partial-sum buffer against a dict of words: random accumulations from both inputs
(``fill`` under random competition from ``acc``), the clear pass and the read port."""

import random

import pytest
from amaranth.sim import Simulator

from bpsa.config import Config
from bpsa.gateware.results.psum_buffer import READ_LATENCY, PsumBuffer
from bpsa.spec.numeric import wrap

CFG = Config(name="pbuf", rows=2, cols=3, acc_width=16, buf_p_depth=16)


def _vector(rng):
    return [rng.randint(-(1 << 15), (1 << 15) - 1) for _ in range(CFG.cols)]


def test_accumulate_clear_and_read():
    dut = PsumBuffer(CFG)
    rng = random.Random(3)
    words = {a: [0] * CFG.cols for a in range(CFG.buf_p_depth)}
    log = {"fill_waits": 0}

    async def read_all(ctx):
        out = {}
        for a in range(CFG.buf_p_depth):
            ctx.set(dut.read_addr, a)
            ctx.set(dut.read_en, 1)
            await ctx.tick()
            ctx.set(dut.read_en, 0)
            await ctx.tick().repeat(READ_LATENCY - 1)      # the word, registered
            out[a] = [ctx.get(dut.read_data[j]) for j in range(CFG.cols)]
        return out

    async def bench(ctx):
        # clear every word (the memory starts undefined in hardware)
        ctx.set(dut.clear_words, CFG.buf_p_depth)
        ctx.set(dut.clear, 1)
        for i in range(CFG.buf_p_depth):
            assert ctx.get(dut.clear_last) == (i == CFG.buf_p_depth - 1)
            await ctx.tick()
        ctx.set(dut.clear, 0)
        assert await read_all(ctx) == words
        fill = None
        for _ in range(300):
            acc = (rng.randrange(CFG.buf_p_depth), _vector(rng)) if rng.random() < 0.4 else None
            if fill is None and rng.random() < 0.5:
                fill = (rng.randrange(4), _vector(rng))     # few words: overlaps in flight
            ctx.set(dut.acc.valid, acc is not None)
            if acc:
                ctx.set(dut.acc.payload.addr, acc[0])
                ctx.set(dut.acc.payload.data, acc[1])
            ctx.set(dut.fill.valid, fill is not None)
            if fill:
                ctx.set(dut.fill.payload.addr, fill[0])
                ctx.set(dut.fill.payload.data, fill[1])
            assert ctx.get(dut.acc.ready) == 1
            if acc:
                words[acc[0]] = [wrap(x + y, 16) for x, y in zip(words[acc[0]], acc[1])]
            if fill and ctx.get(dut.fill.ready):
                words[fill[0]] = [wrap(x + y, 16) for x, y in zip(words[fill[0]], fill[1])]
                fill = None
            elif fill:
                log["fill_waits"] += 1
            await ctx.tick()
        ctx.set(dut.acc.valid, 0)
        ctx.set(dut.fill.valid, 0)
        while ctx.get(dut.busy):
            await ctx.tick()
        assert await read_all(ctx) == words
        # clear the first 5 words only
        ctx.set(dut.clear_words, 5)
        ctx.set(dut.clear, 1)
        for i in range(5):
            assert ctx.get(dut.write_event) and ctx.get(dut.clear_last) == (i == 4)
            await ctx.tick()
        ctx.set(dut.clear, 0)
        for a in range(5):
            words[a] = [0] * CFG.cols
        assert await read_all(ctx) == words

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert log["fill_waits"] > 10


def test_store_reads_one_half_while_the_other_accumulates():
    """P's halves are separate banks: a DMA read of the half a double-buffered step has
    finished is served (``read_ready``) in the cycles a result accumulates into the other
    half, and returns that word; a read of the half being accumulated waits."""
    dut = PsumBuffer(CFG)
    half = CFG.buf_p_depth // 2

    async def bench(ctx):
        ctx.set(dut.clear_words, CFG.buf_p_depth)
        ctx.set(dut.clear, 1)
        await ctx.tick().repeat(CFG.buf_p_depth)
        ctx.set(dut.clear, 0)
        ctx.set(dut.acc.valid, 1)                  # word 3 (first half) := [7, 8, 9]
        ctx.set(dut.acc.payload.addr, 3)
        ctx.set(dut.acc.payload.data, [7, 8, 9])
        await ctx.tick()
        ctx.set(dut.acc.valid, 0)
        await ctx.tick().repeat(3)
        served = []
        for i in range(6):                         # accumulate into the second half ...
            ctx.set(dut.acc.valid, 1)
            ctx.set(dut.acc.payload.addr, half + i)
            ctx.set(dut.acc.payload.data, [1, 1, 1])
            ctx.set(dut.read_addr, 3)              # ... while the store reads word 3
            ctx.set(dut.read_en, 1)
            await ctx.tick()
            served.append(ctx.get(dut.read_ready))
        assert all(served[1:])                     # from the first accumulation in flight on
        assert READ_LATENCY == 2                   # the word of the read before the last
        assert [ctx.get(dut.read_data[j]) for j in range(CFG.cols)] == [7, 8, 9]
        ctx.set(dut.read_addr, half)               # the half in use: not served
        await ctx.tick()
        assert not ctx.get(dut.read_ready)
        ctx.set(dut.acc.valid, 0)
        ctx.set(dut.read_en, 0)

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()


CFG_FP = Config(name="pbuf_bf16", rows=2, cols=3, buf_p_depth=16, arithmetic="bf16",
                operand_width=16, acc_width=32, dataflows=["os"])


def test_float_accumulation_matches_the_golden_model():
    """Floating point: each word is the contract's fp32 sum of its vectors in arrival order
    (floating.add from +0), vectors for one word FLOAT_SPACING or more cycles apart, others
    back to back; the P words read back through the DMA port."""
    from bpsa.gateware.results.psum_buffer import FLOAT_SPACING
    from bpsa.models import floating
    from bpsa.verify.float_operands import corner_accumulators
    dut = PsumBuffer(CFG_FP)
    rng = random.Random(5)
    corners = corner_accumulators()
    words = {a: [0] * CFG_FP.cols for a in range(CFG_FP.buf_p_depth)}
    last = {}

    def value():
        if rng.random() < 0.15:
            return rng.choice(corners)
        return (rng.randrange(2) << 31) | ((127 + rng.randrange(-4, 5)) << 23) | \
            rng.randrange(1 << 23)

    async def bench(ctx):
        ctx.set(dut.clear_words, CFG_FP.buf_p_depth)
        ctx.set(dut.clear, 1)
        await ctx.tick().repeat(CFG_FP.buf_p_depth)
        ctx.set(dut.clear, 0)
        for t in range(600):
            free = [a for a in range(CFG_FP.buf_p_depth) if t - last.get(a, -99) >= FLOAT_SPACING]
            acc = None
            if free and rng.random() < 0.7:
                acc = (rng.choice(free), [value() for _ in range(CFG_FP.cols)])
                last[acc[0]] = t
                words[acc[0]] = [floating.add(x, y) for x, y in zip(words[acc[0]], acc[1])]
            ctx.set(dut.acc.valid, acc is not None)
            if acc:
                ctx.set(dut.acc.payload.addr, acc[0])
                ctx.set(dut.acc.payload.data, acc[1])
            await ctx.tick()
        ctx.set(dut.acc.valid, 0)
        while ctx.get(dut.busy):
            await ctx.tick()
        for a in range(CFG_FP.buf_p_depth):
            ctx.set(dut.read_addr, a)
            ctx.set(dut.read_en, 1)
            await ctx.tick()
            ctx.set(dut.read_en, 0)
            await ctx.tick().repeat(READ_LATENCY - 1)
            got = [ctx.get(dut.read_data[j]) & 0xFFFFFFFF for j in range(CFG_FP.cols)]
            assert got == words[a], (a, [hex(v) for v in got], [hex(v) for v in words[a]])

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()


#: MX (docs/architecture/mx.md): a vector's lanes are block sums, its scale codes ride along,
#: and P's words are fp32 sums of blocks.
CFG_MX = {
    "mxint8": Config(name="pbuf_mxint8", rows=2, cols=3, buf_p_depth=16, arithmetic="mxint8",
                     operand_width=8, operand_signed=True, acc_width=21, dataflows=["os"]),
    "mxfp8_e4m3": Config(name="pbuf_mxfp8", rows=2, cols=3, buf_p_depth=16,
                         arithmetic="mxfp8_e4m3", operand_width=8, operand_signed=False,
                         acc_width=43, dataflows=["os"]),
}


@pytest.mark.parametrize("fmt", list(CFG_MX))
def test_mx_accumulation_matches_the_golden_model(fmt):
    """MX: rounds of a clear pass, random vectors (block sums: zero, the extremes, either
    sign, the NaN flag; scale codes near the bias, high enough to overflow, low enough to
    flush, and 0, 254, 255) added into random words, several a word, MX_SPACING or more
    cycles apart for one word (often exactly) and back to back for others; every word read
    back through the DMA port equals the golden fold of accumulate_block in arrival order."""
    from bpsa.gateware.results.psum_buffer import MX_SPACING, accumulate_layout, p_word_width
    from bpsa.sim.testbenches import tb_psum_buffer as tb
    cfg = CFG_MX[fmt]
    assert MX_SPACING == tb.SPACING and READ_LATENCY == tb.READ_LATENCY
    assert p_word_width(cfg) == 32 and p_word_width(CFG) == CFG.acc_width
    # the payload's bits in the order the Verilator testbench packs them
    assert accumulate_layout(cfg).size == 4 + 3 * cfg.acc_width + 8 + 3 * 8
    assert accumulate_layout(cfg)._fields["scale_cols"].offset == 4 + 3 * cfg.acc_width + 8
    dut = PsumBuffer(cfg)
    depth, cols = cfg.buf_p_depth, cfg.cols
    plan = tb.rounds(fmt, cols, depth, 16, 5 * depth, seed=len(fmt))
    wants = [tb.golden(fmt, cols, depth, entries) for entries in plan]
    signed_lanes = fmt == "mxint8"
    bits = cfg.acc_width
    log = {"compared": 0, "vectors": 0, "edge": 0}

    def lane(x):
        return x - (1 << bits) if signed_lanes and x >> (bits - 1) else x

    async def bench(ctx):
        for r, entries in enumerate(plan):
            ctx.set(dut.clear_words, depth)
            ctx.set(dut.clear, 1)
            await ctx.tick().repeat(depth)
            ctx.set(dut.clear, 0)
            last = {}
            for t, v in enumerate(entries):
                ctx.set(dut.acc.valid, v is not None)
                assert ctx.get(dut.acc.ready) == 1
                if v is not None:
                    addr, lanes, sr, scs = v
                    log["vectors"] += 1
                    log["edge"] += t - last.get(addr, -99) == MX_SPACING
                    last[addr] = t
                    ctx.set(dut.acc.payload.addr, addr)
                    ctx.set(dut.acc.payload.data, [lane(x) for x in lanes])
                    ctx.set(dut.acc.payload.scale_row, sr)
                    ctx.set(dut.acc.payload.scale_cols, scs)
                await ctx.tick()
            ctx.set(dut.acc.valid, 0)
            while ctx.get(dut.busy):
                await ctx.tick()
            for a in range(depth):
                ctx.set(dut.read_addr, a)
                ctx.set(dut.read_en, 1)
                await ctx.tick()
                ctx.set(dut.read_en, 0)
                await ctx.tick().repeat(READ_LATENCY - 1)
                got = [ctx.get(dut.read_data[j]) for j in range(cols)]
                want = wants[r][a]
                assert got == want, (r, a, [hex(x) for x in got], [hex(x) for x in want])
                log["compared"] += cols

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert log["compared"] == len(plan) * depth * cols
    assert log["vectors"] > 3 * len(plan) * depth and log["edge"] > 20
    # the lanes a non-zero block reached end in every kind: finite non-zero, +0 and -0
    # (cancelled, flushed below 2^-126), both infinities (overflowed), the canonical NaN
    kinds = _kinds_reached(fmt, plan, wants)
    for code in (0, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000):
        assert kinds.count(code) >= 2, hex(code)
    assert kinds.count(1) > len(kinds) // 2


def _kinds_reached(fmt, plan, wants):
    """The final encodings of the lanes that at least one non-zero block sum reached, the
    finite non-zero ones as 1."""
    w = CFG_MX[fmt].acc_width - (0 if fmt == "mxint8" else 1)
    out = []
    for entries, want in zip(plan, wants):
        hit = {(v[0], j) for v in entries if v for j, x in enumerate(v[1]) if x % (1 << w)}
        out += [want[a][j] if want[a][j] & 0x7FFFFFFF in (0, 0x7F800000) or
                want[a][j] == 0x7FC00000 else 1 for a, j in sorted(hit)]
    return out


@pytest.mark.cocotb
# make test-long (the Amaranth simulator checks both formats in make test, and P's MXINT8
# Verilog runs inside the MX accelerator's test)
@pytest.mark.long
@pytest.mark.parametrize("fmt", list(CFG_MX))
def test_mx_verilog_under_verilator(fmt):
    """The generated Verilog of the MX ``psum_buffer`` against the same golden (cocotb
    ``bpsa.sim.testbenches.tb_psum_buffer``: six rounds of a clear pass, random vectors and a
    read-back of every word)."""
    from bpsa.sim.runner import run_cocotb
    cfg = CFG_MX[fmt].replace(cols=4, buf_p_depth=32)
    tests, failures = run_cocotb(cfg, "bpsa.sim.testbenches.tb_psum_buffer", top="psum_buffer")
    assert tests >= 1 and failures == 0
