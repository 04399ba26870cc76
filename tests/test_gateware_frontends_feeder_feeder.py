"""The data feeder: each piece against the naive model in ``bpsa.models.feeder_model`` (Amaranth
simulator), the whole feeder's lane streams against the golden explicit im2col, and the generated
Verilog under Verilator through cocotb."""

import dataclasses
import gc
import warnings

import numpy as np
import pytest
from amaranth.hdl import Module, ResetInserter, Signal, UnusedElaboratable
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.sim import Simulator

from bpsa.config import Config
from bpsa.gateware.frontends.feeder.feeder import (
    DataFeeder,
    FeedLane,
    IndexCounters,
    KernelPatternShifter,
    StepCounter,
    check_layer,
    counter_setup,
    layer_layout,
    layer_value,
)
from bpsa.models.feeder_model import (
    FeederDescriptor,
    expected_streams,
    index_steps,
    kernel_pattern,
    lane_offsets,
    lane_word_cycles,
    random_descriptor,
    register_stalls,
    shift_pattern,
    sram_words,
    traffic,
)
from bpsa.spec.layer import ConvLayer

#: The main configuration: the paper's M = 3 on a 4-row array with an 8-element bus.
CFG = Config(name="feeder_r4_b8_m3", rows=4, feeder_bus_width=8, feeder_lane_regs=3,
             feeder_pattern_width=16, feeder_fifo_depth=4, dim_width=8, buf_a_depth=256)
#: A narrow bus, two registers, three lanes, deeper FIFOs.
CFG_NARROW = Config(name="feeder_r3_b4_m2", rows=3, feeder_bus_width=4, feeder_lane_regs=2,
                    feeder_pattern_width=12, feeder_fifo_depth=6, dim_width=8, buf_a_depth=512,
                    operand_width=6, operand_signed=False, acc_width=16)
#: A wide bus with more registers than a 3x3 kernel needs, one FIFO entry deep.
CFG_WIDE = Config(name="feeder_r5_b16_m4", rows=5, feeder_bus_width=16, feeder_lane_regs=4,
                  feeder_pattern_width=24, feeder_fifo_depth=1, dim_width=8, buf_a_depth=128)


def _desc(n, c, h, w, r, s, stride=1, pad=0, dil=1, pad_bottom=None, **run):
    """The descriptor of a run (``run``: ``base``, ``ctx_*``) of the forward layer
    ``ConvLayer.conv(n, c, h, w, 1, r, s, stride, pad, dil, pad_bottom)`` (the feeder does not
    see the output channels)."""
    layer = ConvLayer.conv(n, c, h, w, 1, r, s, stride, pad, dil, pad_bottom)
    return FeederDescriptor.of(layer, **run)


def run(dut, testbench, *, clock=True):
    sim = Simulator(dut)
    if clock:
        sim.add_clock(1e-8)
    sim.add_testbench(testbench)
    sim.run()


# --- kernel pattern and shifter ------------------------------------------------------------

@pytest.mark.parametrize("cfg", [CFG, CFG_NARROW, CFG_WIDE], ids=lambda c: c.name)
def test_kernel_pattern_shifter_all_offsets(cfg):
    """Every offset from beyond the left end to beyond the right end, for every kernel width and
    dilation that fits the pattern, every one-hot pattern (for a fixed offset each ``sel`` bit
    is one pattern bit or 0, so the one-hot patterns pin the shifter down completely) and random
    patterns: ``sel`` equals the naive shift."""
    bw, pw = cfg.feeder_bus_width, cfg.feeder_pattern_width
    dut = KernelPatternShifter(cfg, offset_width=10)
    rng = np.random.default_rng(pw)
    patterns = {kernel_pattern(s, d) for s in range(1, pw + 1) for d in range(1, pw)
                if (s - 1) * d + 1 <= pw}
    patterns |= {int(v) for v in rng.integers(0, 1 << pw, 20)} | {0, (1 << pw) - 1}
    patterns |= {1 << b for b in range(pw)}

    async def tb(ctx):
        for pattern in sorted(patterns):
            ctx.set(dut.pattern, pattern)
            for offset in range(-pw - 3, bw + 4):
                ctx.set(dut.offset, offset)
                expected = shift_pattern(pattern, offset, bw, pw)
                assert ctx.get(dut.sel) == expected, f"pattern {pattern:b}, offset {offset}"
        for offset in (-512, -300, 300, 511):     # far outside: nothing selected
            ctx.set(dut.offset, offset)
            assert ctx.get(dut.sel) == 0

    run(dut, tb, clock=False)


def test_kernel_pattern_model():
    """The pattern has bits 0, d, .., (S-1)d; the naive shift moves it right (left when
    negative)."""
    assert kernel_pattern(3, 2) == 0b10101
    assert kernel_pattern(1, 5) == 1
    assert shift_pattern(0b10101, 2, 8, 16) == 0b1010100
    assert shift_pattern(0b10101, -2, 8, 16) == 0b101
    assert shift_pattern(0b10101, 6, 8, 16) == 0b1000000
    assert shift_pattern(0b10101, -5, 8, 16) == 0


# --- index counters ------------------------------------------------------------------------

def test_step_counter_against_naive():
    """Random steps, limits, enables and loads: value, pvalue and last follow the definition."""
    dut = StepCounter(width=8, pwidth=6)
    rng = np.random.default_rng(5)

    async def tb(ctx):
        v = pv = 0
        for trial in range(30):
            step, limit, pstep = (int(rng.integers(1, 20)), int(rng.integers(0, 200)),
                                  int(rng.integers(0, 64)))
            ctx.set(dut.step, step)
            ctx.set(dut.limit, limit)
            ctx.set(dut.pstep, pstep)
            for _ in range(40):
                load, en = rng.random() < 0.05, rng.random() < 0.8
                init, pinit = int(rng.integers(0, 256)), int(rng.integers(0, 64))
                ctx.set(dut.load, load)
                ctx.set(dut.en, en)
                ctx.set(dut.init, init)
                ctx.set(dut.pinit, pinit)
                assert ctx.get(dut.last) == (v + step > limit)
                await ctx.tick()
                if load:
                    v, pv = init, pinit
                elif en:
                    v, pv = (0, 0) if v + step > limit else (v + step, (pv + pstep) % 64)
                assert (ctx.get(dut.value), ctx.get(dut.pvalue)) == (v, pv)

    run(dut, tb)


COUNTER_LAYERS = [
    _desc(1, 2, 7, 9, 3, 3, 1, 1, 1),
    _desc(2, 3, 9, 12, 3, 5, (1, 2), (2, 1), (3, 2), base=37),
    _desc(1, 1, 23, 23, 11, 11, 4, 2, 1),
    _desc(1, 2, 13, 11, 7, 7, 2, 3, 1, base=5),
    _desc(1, 3, 5, 6, 1, 1, 1, 3, 1),
    _desc(2, 2, 10, 10, 3, 3, 3, 0, 1, ctx_n=0, ctx_oh=1, ctx_ow=2, ctx_count=5),
    _desc(2, 1, 6, 17, 2, 4, 1, (0, 2), (2, 3), ctx_n=1, ctx_oh=2, ctx_ow=1),
]


def _step_fields(cfg, st):
    """The fields of a step that the hardware must reproduce (``addr`` only when read)."""
    return {"addr": st["addr"] if st["read"] else None, "goff": st["goff"],
            "offset": st["offset"], "read": st["read"], "lo": st["lo"], "hi": st["hi"],
            "row_last": st["row_last"], "ctx_last_row": st["ctx_last_row"],
            "ctx_last": st["ctx_last"], "last": st["last"], "active": st["active"]}


#: Layers at the bounds of :data:`CFG` (``dim_width`` 8): strides, paddings and row dilations
#: of 255, the widest kernel row (span 16), the largest coordinates and lane offsets that the
#: counters' narrowed widths must hold.
EXTREME_LAYERS = [
    _desc(1, 1, 8, 255, 2, 2, 255, 255, (255, 15)),
    _desc(1, 1, 255, 8, 2, 2, 255, 255, (255, 15), pad_bottom=100, ctx_oh=1, ctx_ow=1),
    _desc(1, 2, 4, 255, 2, 2, (64, 255), (0, 255), (3, 15), pad_bottom=255, base=7),
]


@pytest.mark.parametrize("cfg,layers", [(CFG, COUNTER_LAYERS), (CFG_NARROW, COUNTER_LAYERS),
                                        (CFG, EXTREME_LAYERS)], ids=["r4", "r3", "extreme"])
def test_index_counter_sequence_whole_layers(cfg, layers):
    """For whole layers and partial runs (start position, context count), with random holds,
    the counters present exactly the model's sequence of steps from 6 cycles after start, with
    no gap, then stop (``busy`` falls with the last step)."""
    dut = IndexCounters(cfg)
    rng = np.random.default_rng(len(cfg.name))

    async def tb(ctx):
        for layer in layers:
            expected = [_step_fields(cfg, vars(st)) for st in index_steps(cfg, layer)]
            ctx.set(dut.setup, counter_setup(cfg, layer))
            ctx.set(dut.start, 1)
            await ctx.tick()
            ctx.set(dut.start, 0)
            for _ in range(6 - 1):          # the first step 6 cycles after start
                assert not ctx.get(dut.valid) and ctx.get(dut.busy)
                await ctx.tick()
            got = []
            while ctx.get(dut.valid):
                en = rng.random() < 0.8
                ctx.set(dut.en, en)
                if en:
                    st = ctx.get(dut.step)
                    got.append(_step_fields(cfg, {k: int(getattr(st, k)) for k in (
                        "addr", "goff", "offset", "read", "lo", "hi", "row_last",
                        "ctx_last_row", "ctx_last", "last", "active")}))
                await ctx.tick()
                assert len(got) <= len(expected), f"{layer}: more steps than the model"
            ctx.set(dut.en, 0)
            assert not ctx.get(dut.busy)
            assert len(got) == len(expected), f"{layer}: {len(got)} of {len(expected)} steps"
            for i, (g, e) in enumerate(zip(got, expected)):
                assert g == {k: int(v) if v is not None else None for k, v in e.items()}, \
                    f"{layer}: step {i}"

    run(dut, tb)


# --- feed lane -----------------------------------------------------------------------------

LANE_LAYERS = [
    (CFG, _desc(1, 2, 7, 9, 3, 3, 1, 1, 1)),                      # 3x3: no stall
    (CFG, _desc(1, 1, 11, 14, 11, 11, 1, 0, 1)),                  # 8 per word > M
    (CFG_NARROW, _desc(1, 2, 9, 9, 5, 5, 1, 2, 1)),               # 4 per word > M = 2
    (CFG_WIDE, _desc(1, 1, 8, 22, 1, 7, 1, 0, (1, 2))),           # 1 x 7 dilated
]


@pytest.mark.parametrize("cfg,layer", LANE_LAYERS, ids=lambda v: getattr(v, "name", None))
@pytest.mark.parametrize("lane", [0, -1])
@pytest.mark.parametrize("ready", ["always", "random"])
def test_feed_lane_selection_and_stalls(cfg, layer, lane, ready):
    """A lane fed the word sequence of a layer: its FIFO entries carry exactly the elements its
    shifted pattern selects, M to an entry, a context ending each ``last`` entry; with a FIFO
    that is always ready, every word takes the cycles of the naive register model (a stall
    while interest elements exceed the free registers)."""
    bw, mr, pw = cfg.feeder_bus_width, cfg.feeder_lane_regs, cfg.feeder_pattern_width
    lane = lane % cfg.rows
    dut = FeedLane(cfg, offset_width=16)
    rng = np.random.default_rng([lane, len(ready), mr])
    steps = index_steps(cfg, layer)
    pattern = kernel_pattern(layer.kernel_w, layer.dil_w)
    off = lane_offsets(cfg, layer)[lane]
    lo, hi = (-(1 << (cfg.operand_width - 1)), 1 << (cfg.operand_width - 1)) \
        if cfg.operand_signed else (0, 1 << cfg.operand_width)
    words = rng.integers(lo, hi, (len(steps), bw))
    expected_ctx, cur = [], []
    for st, w in zip(steps, words):
        sel = shift_pattern(pattern, st.offset + off, bw, pw)
        cur += [int(w[j]) for j in range(bw) if (sel >> j) & 1]
        if st.ctx_last:
            expected_ctx.append(cur)
            cur = []

    async def tb(ctx):
        ctx.set(dut.pattern, pattern)
        ctx.set(dut.last_tap, layer.span_w - 1)
        ctx.set(dut.dil, min(layer.dil_w, pw))
        ctx.set(dut.active, 1)
        entries = []
        state = (0, False)
        for st, w in zip(steps, words):
            ctx.set(dut.word, [int(v) for v in w])
            ctx.set(dut.word_valid, 1)
            ctx.set(dut.offset, st.offset + off)
            ctx.set(dut.ctx_end, st.ctx_last_row)
            sel = shift_pattern(pattern, st.offset + off, bw, pw)
            closes = st.ctx_last_row and 0 <= st.offset + off + layer.span_w - 1 < bw
            cycles, *state = lane_word_cycles(*state, bin(sel).count("1"), mr, closes)
            n = 0
            while True:
                n += 1
                ctx.set(dut.entries.ready, ready == "always" or rng.random() < 0.4)
                done = ctx.get(dut.done)
                ctx.set(dut.next, done)
                if ctx.get(dut.entries.valid) and ctx.get(dut.entries.ready):
                    entries.append(ctx.get(dut.entries.payload))
                await ctx.tick()
                if done:
                    break
                assert n < 100, "lane never done"
            if ready == "always":
                assert n == cycles, f"word {st}: {n} cycles, model {cycles}"
        ctx.set(dut.word_valid, 0)
        ctx.set(dut.next, 1)
        for _ in range(20):
            ctx.set(dut.entries.ready, 1)
            if ctx.get(dut.entries.valid):
                entries.append(ctx.get(dut.entries.payload))
            await ctx.tick()
        assert ctx.get(dut.empty)
        got_ctx, cur = [], []
        for e in entries:
            assert 1 <= e.count <= mr and (e.count == mr or e.last), "short entry not last"
            cur += [int(e.data[k]) for k in range(e.count)]
            if e.last:
                got_ctx.append(cur)
                cur = []
        assert not cur
        assert got_ctx == expected_ctx

    run(dut, tb)


# --- the whole feeder ----------------------------------------------------------------------

class FeederTop(wiring.Component):
    """A :class:`DataFeeder` reading a :class:`Memory` through its read port."""

    def __init__(self, cfg, words):
        self.cfg = cfg
        self.words = words
        self.feeder = DataFeeder(cfg)
        super().__init__({})

    def elaborate(self, platform):
        m = Module()
        m.submodules.feeder = self.feeder
        shape = self.feeder.sram.signature.shape
        m.submodules.mem = mem = Memory(shape=shape, depth=self.cfg.buf_a_depth,
                                        init=self.words)
        wiring.connect(m, self.feeder.sram, mem.read_port())
        return m


def _sram_init(cfg, layer, x):
    width = cfg.operand_width
    words = sram_words(cfg, layer, x)
    if cfg.operand_signed:
        words = np.where(words >> (width - 1) != 0, words - (1 << width), words)
    return [[int(v) for v in w] for w in words]


def _random_x(cfg, layer, rng):
    lo, hi = (-(1 << (cfg.operand_width - 1)), 1 << (cfg.operand_width - 1)) \
        if cfg.operand_signed else (0, 1 << cfg.operand_width)
    shape = (layer.batch, layer.channels, layer.height, layer.width)
    return rng.integers(lo, hi, shape)


async def _feed_run(ctx, cfg, feeder, layer, rng, ready_prob=1.0, max_cycles=40000):
    """Start ``layer``, collect the feed stream under random ``ready``; return the
    vectors, the counters and the cycle count. Checks the stream rules on the way."""
    ctx.set(feeder.layer, layer_value(cfg, layer))
    ctx.set(feeder.start, 1)
    await ctx.tick()
    ctx.set(feeder.start, 0)
    got = []
    held = None
    cycles = 0
    while ctx.get(feeder.busy):
        ready = rng.random() < ready_prob
        ctx.set(feeder.feed.ready, ready)
        valid = ctx.get(feeder.feed.valid)
        payload = ctx.get(feeder.feed.payload)
        vec = ([int(v) for v in payload.data], int(payload.mask), int(payload.last))
        if held is not None:
            assert valid and vec == held, "valid fell or payload changed before the transfer"
        held = None
        if valid and ready:
            got.append(vec)
        elif valid:
            held = vec
        await ctx.tick()
        cycles += 1
        assert cycles < max_cycles, "feeder hangs"
    counters = {n: ctx.get(getattr(feeder, n)) for n in (
        "words_read", "stall_cycles", "fifo_stall_cycles", "busy_cycles")}
    return got, counters, cycles


def _check_streams(cfg, layer, x, got):
    """The collected vectors equal the golden im2col rows, context by context."""
    exp, mask = expected_streams(cfg, layer, x)
    crs = layer.channels * layer.kernel_h * layer.kernel_w
    assert len(got) == exp.shape[0] * crs, f"{len(got)} vectors, expected {exp.shape[0] * crs}"
    data = np.array([g[0] for g in got], dtype=np.int64).reshape(-1, crs, cfg.rows)
    assert np.array_equal(data.transpose(0, 2, 1), exp)
    masks = np.array([g[1] for g in got]).reshape(-1, crs)
    lasts = np.array([g[2] for g in got]).reshape(-1, crs)
    exp_masks = (mask * (1 << np.arange(cfg.rows))).sum(axis=1)
    assert (masks == exp_masks[:, None]).all()
    assert (lasts[:, -1] == 1).all() and (lasts[:, :-1] == 0).all()


FEEDER_LAYERS = [
    # (config, layer, probability of ready)
    (CFG, _desc(1, 2, 7, 9, 3, 3, 1, 1, 1), 1.0),                 # 3x3, M = 3
    (CFG, _desc(1, 1, 8, 10, 3, 3, 2, 1, 1), 0.5),                # stride 2
    (CFG, _desc(1, 2, 9, 11, 3, 3, 3, 2, 2), 1.0),                # stride 3, dilation 2
    (CFG, _desc(1, 1, 10, 13, 3, 3, 4, 3, 3), 1.0),               # stride 4, dilation 3
    (CFG, _desc(1, 1, 5, 6, 1, 1, 1, 0, 1), 1.0),                 # 1x1
    (CFG, _desc(1, 1, 6, 7, 1, 1, 2, 3, 1), 1.0),                 # 1x1, padding 3
    (CFG, _desc(1, 1, 11, 9, 5, 5, 1, 2, 1, base=13), 0.7),       # 5x5
    (CFG, _desc(1, 1, 11, 13, 7, 7, 2, 3, 1), 1.0),               # 7x7 stride 2
    (CFG, _desc(1, 1, 15, 19, 11, 11, 4, 2, 1), 1.0),             # 11x11 stride 4
    (CFG, _desc(2, 3, 5, 7, 2, 3, (2, 1), (1, 0), (1, 2)), 0.6),  # non-square, batch 2
    (CFG, _desc(1, 9, 4, 4, 3, 3, 1, 1, 1), 1.0),                 # C = 9 > B
    (CFG, _desc(2, 2, 6, 6, 3, 3, 1, 1, 1, ctx_n=0, ctx_oh=3, ctx_ow=4,
                     ctx_count=4), 1.0),                                # partial run
    (CFG, _desc(1, 2, 6, 7, 3, 3, 2, 1, 1, pad_bottom=0), 0.8),   # bottom pad 0
    (CFG, _desc(1, 1, 5, 6, 3, 3, 1, 0, 2, pad_bottom=3), 1.0),   # bottom pad only
    (CFG_NARROW, _desc(1, 3, 7, 8, 3, 3, 1, 1, 1), 0.8),          # C = 3 on B = 4
    (CFG_NARROW, _desc(1, 1, 9, 10, 3, 4, (1, 3), (0, 2), (2, 3)), 1.0),
    (CFG_NARROW, _desc(1, 2, 8, 9, 5, 5, 2, 2, 1, base=7), 1.0),
    (CFG_WIDE, _desc(1, 3, 6, 9, 3, 3, 1, 1, 1), 1.0),            # one-deep FIFOs
    (CFG_WIDE, _desc(1, 1, 7, 26, 1, 9, 1, (0, 1), (1, 2)), 0.5), # 1x9 dilated
] + [(CFG, layer, 0.8) for layer in EXTREME_LAYERS]                 # at the bounds


@pytest.mark.parametrize("cfg,layer,ready", FEEDER_LAYERS,
                         ids=[f"{c.name}-{i}" for i, (c, _, _) in enumerate(FEEDER_LAYERS)])
def test_feeder_streams_equal_golden_im2col(cfg, layer, ready):
    """The lane streams equal the golden im2col rows (padding zeros made by the feeder, masked
    lanes zero), ``last`` ends every context, nothing is lost or changed under random
    ``ready``, and the SRAM words read equal the model's count."""
    rng = np.random.default_rng(layer.kernel_w * 31 + layer.channels)
    x = _random_x(cfg, layer, rng)
    top = FeederTop(cfg, _sram_init(cfg, layer, x))
    result = {}

    async def tb(ctx):
        result["run"] = await _feed_run(ctx, cfg, top.feeder, layer, rng, ready)
        result["error"] = ctx.get(top.feeder.error)

    run(top, tb)
    got, counters, _ = result["run"]
    assert result["error"] == 0
    _check_streams(cfg, layer, x, got)
    assert counters["words_read"] == traffic(cfg, layer)["words_read"]


@pytest.mark.parametrize("cfg", [CFG, CFG_NARROW, CFG_WIDE], ids=lambda c: c.name)
@pytest.mark.parametrize("seed", range(2))
def test_feeder_random_layers(cfg, seed):
    """Random legal layers (kernels up to 8x8, strides up to 4, padding up to 3, dilations up to
    3, batch 1-2, any base address), run back to back on one feeder under random ``ready``."""
    rng = np.random.default_rng([seed, cfg.rows])
    layers = [random_descriptor(cfg, rng, max_vectors=700) for _ in range(3)]
    xs = [_random_x(cfg, layer, rng) for layer in layers]
    words = np.zeros((cfg.buf_a_depth, cfg.feeder_bus_width), dtype=np.int64)
    # Each layer in its own part of the SRAM, so that all run on one memory image.
    placed, start = [], 0
    for layer, x in zip(layers, xs):
        layer = dataclasses.replace(layer, base=start)
        check_layer(cfg, layer)
        words.ravel()[start:start + x.size] = x.ravel()
        start += x.size
        placed.append(layer)
    assert start <= words.size
    top = FeederTop(cfg, [[int(v) for v in w] for w in words])
    results = []

    async def tb(ctx):
        for layer in placed:
            results.append(await _feed_run(ctx, cfg, top.feeder, layer, rng, 0.7))

    run(top, tb)
    for layer, x, (got, counters, _) in zip(placed, xs, results):
        _check_streams(cfg, layer, x, got)
        assert counters["words_read"] == traffic(cfg, layer)["words_read"], layer


def test_constructors_check_parameters():
    """Bad parameters are refused at once, naming the parameter."""
    cases = [(lambda: DataFeeder({"rows": 4}), "config must be a Config"),
             (lambda: FeedLane(CFG, offset_width=1), "offset_width must be an integer"),
             (lambda: StepCounter(width=0, pwidth=4), "width must be a positive integer")]
    # The half-built components are never elaborated: collect them while that is expected.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnusedElaboratable)
        for make, match in cases:
            with pytest.raises(TypeError, match=match):
                make()
        gc.collect()


def test_feeder_stalls_match_register_model():
    """With FIFOs deep enough never to fill, the stall cycles are those of the register model
    (an 11x11 kernel puts up to 8 interest elements of a lane in a word, M = 3), none of them
    from backpressure; a 3x3 kernel with M = 3 never stalls."""
    cfg = CFG.replace(name="deep", feeder_fifo_depth=64)
    layers = [_desc(1, 1, 11, 13, 11, 11, 1, 0, 1), _desc(1, 1, 3, 6, 3, 3, 1, 0, 1),
              _desc(1, 1, 9, 14, 5, 5, 2, (0, 1), (2, 1))]
    rng = np.random.default_rng(3)
    results = []
    for layer in layers:
        x = _random_x(cfg, layer, rng)
        top = FeederTop(cfg, _sram_init(cfg, layer, x))

        async def tb(ctx, top=top, layer=layer):
            results.append(await _feed_run(ctx, cfg, top.feeder, layer, rng))

        run(top, tb)
        got, counters, _ = results[-1]
        _check_streams(cfg, layer, x, got)
        assert counters["fifo_stall_cycles"] == 0
        assert counters["stall_cycles"] == register_stalls(cfg, layer), layer
    assert results[0][1]["stall_cycles"] > 0 and results[1][1]["stall_cycles"] == 0


# --- refused layers ------------------------------------------------------------------------

REFUSED = [
    (_desc(1, 1, 20, 20, 3, 17, 1, 0, 1), "feeder_pattern_width"),   # 17 > 16 columns
    (_desc(1, 1, 20, 20, 3, 3, 1, 0, (1, 8)), "feeder_pattern_width"),  # span 17
    (_desc(1, 1, 4, 4, 5, 5, 1, 0, 1), "padded input"),
    (_desc(1, 1, 4, 4, 3, 3, 1, 0, (3, 1)), "padded input"),
    (_desc(1, 0, 4, 4, 3, 3, 1, 0, 1), "channels"),
    (_desc(1, 1, 4, 4, 3, 3, 0, 0, 1), "stride_h"),
    (_desc(1, 1, 4, 4, 3, 3, 1, 0, 0), "dil_h"),
    (_desc(4, 8, 16, 16, 3, 3, 1, 0, 1), "does not fit the SRAM"),
    (_desc(1, 1, 8, 8, 3, 3, 1, 0, 1, base=2040), "does not fit the SRAM"),
    (_desc(1, 1, 8, 8, 3, 3, 1, 0, 1, ctx_oh=6), "first context"),
    (_desc(2, 1, 8, 8, 3, 3, 1, 0, 1, ctx_n=2), "first context"),
    (_desc(1, 1, 8, 8, 3, 3, 1, 0, 1, ctx_ow=6), "first context"),
]


@pytest.mark.parametrize("layer,reason", REFUSED)
def test_check_layer_refuses(layer, reason):
    with pytest.raises(ValueError, match=reason):
        check_layer(CFG, layer)


def test_descriptor_of_a_layer():
    """A run's descriptor carries the layer's fields (the bottom padding resolved), its run
    fields, and nothing of a non-layer."""
    layer = ConvLayer.conv(2, 3, 9, 12, 5, 3, 4, (1, 2), (2, 1), (3, 2))
    d = FeederDescriptor.of(layer, base=7, ctx_oh=1, ctx_count=3)
    assert d.fields() == {
        "batch": 2, "channels": 3, "height": 9, "width": 12, "kernel_h": 3, "kernel_w": 4,
        "stride_h": 1, "stride_w": 2, "pad_h": 2, "pad_w": 1, "dil_h": 3, "dil_w": 2,
        "base": 7, "ctx_n": 0, "ctx_oh": 1, "ctx_ow": 0, "ctx_count": 3, "pad_bottom": 2}
    assert d.out_hw == layer.out_hw
    with pytest.raises(TypeError, match="layer must be a ConvLayer"):
        FeederDescriptor.of(d)


@pytest.mark.parametrize("layer,reason", [
    (_desc(1, 1, 256, 4, 3, 3), "height must be in"),
    (_desc(1, 1, 4, 4, 3, 3, pad=-1), "pad_h must be in"),
    (_desc(1, 1, 4, 4, 3, 3.0), "kernel_w must be an integer"),
    ({"batch": 1, "channels": 1, "height": 4, "width": 4, "kernel_h": 3, "kernel_w": 3,
      "stride_h": 1, "stride_w": 1, "dil_h": 1}, "dil_w must be an integer"),
])
def test_check_layer_refuses_unrepresentable(layer, reason):
    with pytest.raises(ValueError, match=reason):
        check_layer(CFG, layer)


def test_hardware_refuses_illegal_descriptors():
    """Every refused descriptor raises ``error`` and returns to idle without reading the SRAM
    or producing an element; a legal layer afterwards runs normally."""
    top = FeederTop(CFG, [[0] * CFG.feeder_bus_width] * CFG.buf_a_depth)
    f = top.feeder
    legal = _desc(1, 1, 3, 6, 3, 3)
    check_layer(CFG, legal)

    async def tb(ctx):
        ctx.set(f.feed.ready, 1)
        for layer, _ in REFUSED:
            ctx.set(f.layer, layer.fields())
            ctx.set(f.start, 1)
            await ctx.tick()
            ctx.set(f.start, 0)
            for cycle in range(40):
                assert not ctx.get(f.sram.en) and not ctx.get(f.feed.valid)
                if not ctx.get(f.busy):
                    break
                await ctx.tick()
            assert not ctx.get(f.busy), f"{layer}: still busy"
            assert ctx.get(f.error) == 1, f"{layer}: no error"
            assert ctx.get(f.words_read) == 0
        got, counters, _ = await _feed_run(ctx, CFG, f, legal, np.random.default_rng(0))
        assert ctx.get(f.error) == 0 and len(got) == 9
        assert counters["words_read"] == traffic(CFG, legal)["words_read"]

    run(top, tb)


def _raw_descriptors(cfg, rng, n):
    """``n`` descriptors as field dicts, each field within its width: values near 0, small,
    anywhere and near the largest, and legal layers with one field moved a little (across
    the limits: pattern width, padded input, SRAM size, first context)."""
    widths = {name: shape.width for name, shape in layer_layout(cfg).members.items()}
    out = []
    while len(out) < n:
        if rng.random() < 0.5:
            f = {}
            for name, w in widths.items():
                r = rng.random()
                top = (1 << w) - 1
                f[name] = int(rng.integers(0, 4) if r < 0.3 else rng.integers(1, 24) if r < 0.6
                              else rng.integers(0, top + 1) if r < 0.85
                              else top - rng.integers(0, 3))
        else:
            f = random_descriptor(cfg, rng, max_kernel=12, max_stride=200, max_pad=200,
                                  max_dil=16).fields()
            for name in rng.choice(list(widths), int(rng.integers(1, 3))):
                top = (1 << widths[name]) - 1
                f[name] = int(top - rng.integers(0, 3) if rng.random() < 0.3 else
                              min(max(f[name] + int(rng.integers(-3, 4)) * int(
                                  rng.choice([1, 1, 7, 64])), 0), top))
        out.append(f)
    return out


@pytest.mark.parametrize("cfg", [CFG, CFG_NARROW], ids=lambda c: c.name)
def test_hardware_legality_equals_check_layer(cfg):
    """On random descriptors (any field values, legal layers moved across a limit) the
    feeder raises ``error`` exactly when :func:`check_layer` refuses the descriptor; a legal one
    goes on to run (the feeder is reset after its check)."""
    rng = np.random.default_rng(cfg.rows)
    descs = _raw_descriptors(cfg, rng, 400)
    legal = []
    for f in descs:
        try:
            check_layer(cfg, f)
            legal.append(True)
        except ValueError:
            legal.append(False)
    assert 30 < sum(legal) < len(legal) - 30
    rst = Signal()
    feeder = DataFeeder(cfg)
    dut = Module()
    dut.submodules.feeder = ResetInserter(rst)(feeder)

    async def tb(ctx):
        for i, (f, ok) in enumerate(zip(descs, legal)):
            ctx.set(feeder.layer, f)
            ctx.set(feeder.start, 1)
            await ctx.tick()
            ctx.set(feeder.start, 0)
            for _ in range(21):
                if not ctx.get(feeder.busy):
                    break
                await ctx.tick()
            assert (ctx.get(feeder.error), ctx.get(feeder.busy)) == (int(not ok), int(ok)), \
                f"descriptor {i}: {f}, legal {ok}"
            ctx.set(rst, 1)
            await ctx.tick()
            ctx.set(rst, 0)

    run(dut, tb)


# --- generated Verilog under Verilator -----------------------------------------------------

# make test-long: the block's own Verilog with its cocotb testbench (its modules run under
# Verilator inside the accelerator's native tests in make test; the build is what costs)
@pytest.mark.cocotb
@pytest.mark.long
def test_feeder_verilog_under_verilator():
    """The generated Verilog of DataFeeder, with an SRAM modelled by the testbench, produces
    the golden im2col streams for a set of layers (random ``ready``), the model's SRAM word
    count, and refuses an illegal descriptor (cocotb module ``bpsa.sim.testbenches.tb_feeder``)."""
    from bpsa.sim.runner import run_cocotb
    tests, failures = run_cocotb(CFG, "bpsa.sim.testbenches.tb_feeder", top="feeder")
    assert tests >= 1 and failures == 0
