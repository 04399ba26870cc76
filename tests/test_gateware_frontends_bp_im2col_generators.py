"""BP-im2col address generators: the naive model against the golden lowerings, the RTL (Amaranth
simulator) against the model beat by beat over whole layers, end-to-end numerics from the RTL's
addresses, backpressure, refused descriptors, the buffer-side blocks with modelled buffers, and
the generated Verilog under Verilator through cocotb; a bounded formal check of the coordinate
maps (NZ detection and mapping) against their division-based definitions (bounded model checks
with yowasp-sby and Yices 2, marked ``formal``)."""

import functools
import random

import numpy as np
import pytest
from amaranth.hdl import (
    Assert,
    Assume,
    Elaboratable,
    Module,
    Mux,
    Signal,
    signed,
    unsigned,
)
from amaranth.lib import data, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In
from amaranth.sim import Simulator

from bpsa.config import Config, load_config
from bpsa.gateware.array.arith import arith_for
from bpsa.gateware.frontends.bp_im2col.generators import (
    COUNTERS,
    DESC_FIELDS,
    BPError,
    CrossbarRecovery,
    DilatedAddressGenerator,
    DilatedMap,
    MaskExpander,
    TransposedAddressGenerator,
    TransposedMap,
)
from bpsa.models import bp_im2col_model as model
from bpsa.models import golden
from bpsa.spec.layer import ConvLayer
from bpsa.verify.formal import prove

ARRAYS = {
    "4x4": Config(name="bp4x4", rows=4, cols=4),
    "3x5": Config(name="bp3x5", rows=3, cols=5),
}
GENERATORS = {"loss": TransposedAddressGenerator, "grad": DilatedAddressGenerator}

#: ConvLayer.conv(n, c, h, w, k, r, s, stride, pad, dil): strides 1-4, padding 0-3 and beyond
#: d(R-1), kernels 1x1 to 7x7 (square and rectangular), dilation 1-2, batch 1-2, non-square.
LAYERS = [
    ConvLayer.conv(1, 2, 7, 5, 2, 3, 3, 2, 1, 1),                # 3x3 stride 2, non-square input
    ConvLayer.conv(2, 1, 6, 9, 2, 2, 3, (2, 3), (1, 2), (1, 2)), # rectangular, per-axis everything
    ConvLayer.conv(1, 1, 11, 8, 1, 7, 7, 2, 3, 1),               # 7x7 stride 2 padding 3
    ConvLayer.conv(1, 2, 5, 6, 1, 1, 1, 2, 1, 1),                # 1x1 stride 2, p > d(R-1) crops dY
    ConvLayer.conv(1, 3, 6, 6, 2, 1, 1, 2, 0, 1),                # 1x1 stride 2
    ConvLayer.conv(2, 1, 9, 7, 2, 3, 2, 4, (3, 0), 2),           # stride 4, dilation 2
    ConvLayer.conv(1, 1, 9, 9, 2, 3, 3, 3, 0, 1),                # stride 3, no padding
    ConvLayer.conv(1, 2, 8, 7, 1, 3, 3, 1, 3, 1),                # stride 1, p = 3 > d(R-1) = 2
    ConvLayer.conv(1, 1, 10, 6, 1, 5, 5, 2, 2, 1),               # 5x5 stride 2
    ConvLayer.conv(2, 2, 5, 4, 1, 3, 3, 1, 1, 2),                # dilation 2, p < d(R-1)
    ConvLayer.conv(1, 1, 7, 12, 2, 1, 7, (1, 3), (0, 3), 1),     # 1x7
    ConvLayer.conv(1, 1, 12, 5, 1, 7, 1, (4, 1), (3, 0), 1),     # 7x1 stride 4
    ConvLayer.conv(1, 2, 6, 6, 2, 2, 2, 2, 0, 1),                # 2x2 stride 2
    ConvLayer.conv(1, 1, 13, 11, 1, 3, 3, 4, 2, 1),              # stride 4, far-edge remainder rows
    ConvLayer.conv(2, 1, 4, 5, 3, 2, 2, 1, 0, 2),                # dilation 2, stride 1
    ConvLayer.conv(1, 1, 5, 5, 1, 3, 3, 2, 3, 2),                # p = 3 < d(R-1) = 4, dilation 2
    ConvLayer.conv(1, 1, 3, 3, 1, 3, 3, 1, 3, 1),                # p > d(R-1) on a tiny input
    ConvLayer.conv(1, 1, 1, 1, 1, 1, 1),                         # the smallest layer
    ConvLayer.conv(2, 1, 2, 3, 1, 2, 2, 2, 1, 1),                # tiny images: slices span images
    ConvLayer.conv(2, 1, 3, 3, 2, 3, 3, 1, 0, 1),                # 1x1 dY: one image per A lane
    ConvLayer.conv(1, 1, 7, 7, 1, 4, 4, 3, 2, 1),                # even kernel, stride 3
    ConvLayer.conv(2, 2, 6, 5, 2, 3, 3, (3, 2), (2, 1), (2, 1)), # mixed per-axis, batch 2
]


def _ids(layers):
    return [layer.text() for layer in layers]


def _params(layer):
    """``(stride, padding, dilation)``, as golden's functions take them."""
    return layer.stride, layer.pad, layer.dil


# --- the model against the golden lowerings ------------------------------------------------------

def _tensors(layer, seed):
    rng = np.random.default_rng(seed)
    dy = rng.integers(-8, 8, (layer.batch, layer.out_channels, *layer.out_hw))
    w = rng.integers(-8, 8, layer.w_shape)
    x = rng.integers(-8, 8, layer.x_shape)
    return dy, w, x


@pytest.mark.parametrize("array", sorted(ARRAYS))
@pytest.mark.parametrize("layer", LAYERS, ids=_ids(LAYERS))
def test_model_matches_golden_lowering(layer, array):
    """Every element of every stream of the naive model equals golden's a_src / b_src, each
    produced once; the model's tiled GEMM equals the direct loss and gradient."""
    cfg = ARRAYS[array]
    dy, w, x = _tensors(layer, 1)
    lo = golden.lower_input_grad(dy, w, (layer.height, layer.width), *_params(layer))
    lg = golden.lower_weight_grad(x, dy, (layer.kernel_h, layer.kernel_w), *_params(layer))
    seqs = {}
    for stream, ref in (("loss_a", lo.a_src), ("loss_b", lo.b_src),
                        ("grad_a", lg.a_src), ("grad_b", lg.b_src)):
        seqs[stream] = model.beats(layer, stream, cfg.rows, cfg.cols)
        got = model.matrix_from_beats(layer, stream, cfg.rows, cfg.cols, seqs[stream])
        np.testing.assert_array_equal(got, ref, err_msg=stream)
    for phase, a, b, ref in (
            ("loss", w, dy, golden.conv2d_input_grad(dy, w, (layer.height, layer.width),
                                                     *_params(layer))),
            ("grad", dy, x, golden.conv2d_weight_grad(x, dy, (layer.kernel_h, layer.kernel_w),
                                                      *_params(layer)))):
        cmat = model.gemm_from_beats(layer, phase, cfg.rows, cfg.cols, seqs[f"{phase}_a"],
                                     seqs[f"{phase}_b"], a, b)
        np.testing.assert_array_equal(model.layer_result(layer, phase, cmat), ref)


def test_layouts_match_model():
    """The RTL's descriptor and payload layouts are the ones the model packs and unpacks."""
    cfg = ARRAYS["3x5"]
    assert DESC_FIELDS == model.DESC_FIELDS
    for phase, cls in GENERATORS.items():
        dut = cls(cfg)
        dut._MustUse__silence = True                  # inspected, not simulated
        layout = dut.desc.payload.shape()
        assert [(name, layout[name].offset) for name in DESC_FIELDS] == \
            [(name, i * cfg.dim_width) for i, name in enumerate(DESC_FIELDS)]
        for side, aw in (("a", dut.aw_a), ("b", dut.aw_b)):
            layout = getattr(dut, side).payload.shape()
            offset = 0
            for name, width in model.beat_layout(f"{phase}_{side}", cfg.rows, cfg.cols, aw):
                assert layout[name].offset == offset and layout[name].width == width
                offset += width
            assert layout.size == offset


def test_refusals():
    with pytest.raises(TypeError, match="config must be a Config"):
        TransposedAddressGenerator({"rows": 4})
    with pytest.raises(TypeError, match="config must be a Config"):
        CrossbarRecovery(None)
    with pytest.raises(ValueError, match="does not fit in dim_width"):
        model.pack_desc(ConvLayer.conv(1, 1, 300, 4, 1, 1, 1), 8)
    with pytest.raises(ValueError, match="padded input"):
        model.desc_fields(ConvLayer.conv(1, 1, 3, 3, 1, 3, 3, dil=2))
    with pytest.raises(ValueError, match="symmetric padding"):
        model.beats(ConvLayer.conv(1, 1, 5, 5, 1, 3, 3, pad=1, pad_bottom=0), "loss_b", 4, 4)


# --- the RTL in the Amaranth simulator -----------------------------------------------------------

def _ready(policy, rng, cycle):
    if callable(policy):
        return policy(cycle)
    return rng.random() < policy


def simulate(phase, cfg, jobs, *, seed=0, max_cycles=100000):
    """Run descriptors through a generator. ``jobs``: list of (fields, ready_a, ready_b), a
    ready policy being a probability or a function of the cycle within the job. Returns per
    job a dict: beats (side -> list of Beat), counters, error, code, cycles. Checks on the
    way that a stalled beat holds its payload until it is taken."""
    dut = GENERATORS[phase](cfg)
    aw = {"a": dut.aw_a, "b": dut.aw_b}
    rng = random.Random(seed)
    results = []

    async def tb(ctx):
        for fields, *policy in jobs:
            ctx.set(dut.desc.payload, fields)
            ctx.set(dut.desc.valid, 1)
            await ctx.tick().until(dut.desc.ready)
            ctx.set(dut.desc.valid, 0)
            got = {"a": [], "b": []}
            stalled = {"a": None, "b": None}
            stalls = {"a": 0, "b": 0}
            for cycle in range(max_cycles):
                if ctx.get(dut.done) or (ctx.get(dut.error) and not ctx.get(dut.busy)):
                    break
                for side, pol in zip("ab", policy):
                    port = getattr(dut, side)
                    valid = ctx.get(port.valid)
                    payload = ctx.get(port.payload.as_value())
                    if stalled[side] is not None:
                        assert valid and payload == stalled[side], \
                            f"{side}: a stalled beat changed or vanished"
                        stalled[side] = None
                    ready = _ready(pol, rng, cycle)
                    ctx.set(port.ready, ready)
                    if valid and ready:
                        got[side].append(model.unpack_beat(f"{phase}_{side}", payload,
                                                           cfg.rows, cfg.cols, aw[side]))
                    elif valid:
                        stalled[side] = payload
                        stalls[side] += 1
                await ctx.tick()
            else:
                raise AssertionError("the generator hung")
            results.append({
                "beats": got, "error": ctx.get(dut.error), "code": ctx.get(dut.error_code),
                "counters": {n: ctx.get(getattr(dut, f"count_{n}")) for n in COUNTERS},
                "cycles": cycle, "stalls": stalls,
            })
            for side in "ab":
                ctx.set(getattr(dut, side).ready, 0)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()
    return results


READY = (1.0, 0.5, 0.8, 0.3)


@functools.lru_cache(maxsize=None)
def _sweep(phase, array):
    """All of LAYERS through one generator, with alternating random backpressure."""
    jobs = [(model.desc_fields(layer), READY[i % 4], READY[(i + 1) % 4])
            for i, layer in enumerate(LAYERS)]
    return simulate(phase, ARRAYS[array], jobs, seed=len(phase))


CASES = [(phase, array) for phase in GENERATORS for array in sorted(ARRAYS)]


def check_beats(phase, cfg, layer, res):
    """Every beat and counter of one simulated layer equals the model."""
    assert not res["error"], f"{layer.text()}: refused with {res['code']}"
    for side in "ab":
        stream = f"{phase}_{side}"
        expected = model.beats(layer, stream, cfg.rows, cfg.cols)
        got = [model.normalize(stream, b, cfg.rows, cfg.cols) for b in res["beats"][side]]
        assert len(got) == len(expected), f"{layer.text()} {stream}: beat count"
        for i, (g, e) in enumerate(zip(got, expected)):
            assert g == e, f"{layer.text()} {stream} beat {i}: RTL {g}, model {e}"
        want = model.counters(layer, stream, cfg.rows, cfg.cols, expected)
        want["stalls"] = res["stalls"][side]
        for name, value in want.items():
            assert res["counters"][f"{side}_{name}"] == value, f"{layer.text()} {stream} {name}"


def check_numerics(phase, cfg, layer, res, seed):
    """End to end: gather every tile's operands from random compact dY / W / X through the
    RTL's addresses and masks only, multiply the tiles, sum: bit-exact dX / dW."""
    dy, w, x = _tensors(layer, seed)
    if phase == "loss":
        a, b = w, dy
        ref = golden.conv2d_input_grad(dy, w, (layer.height, layer.width), *_params(layer))
    else:
        a, b = dy, x
        ref = golden.conv2d_weight_grad(x, dy, (layer.kernel_h, layer.kernel_w), *_params(layer))
    cmat = model.gemm_from_beats(layer, phase, cfg.rows, cfg.cols, res["beats"]["a"],
                                 res["beats"]["b"], a, b)
    np.testing.assert_array_equal(model.layer_result(layer, phase, cmat), ref,
                                  err_msg=layer.text())


@pytest.mark.parametrize("phase,array", CASES)
def test_rtl_matches_model_over_whole_layers(phase, array):
    """Every beat (address of each read lane, mask, last, end) of both streams and every
    counter equal the naive model, over all tiles of every layer, under random backpressure."""
    for layer, res in zip(LAYERS, _sweep(phase, array)):
        check_beats(phase, ARRAYS[array], layer, res)


@pytest.mark.parametrize("phase,array", CASES)
def test_rtl_addresses_compute_the_layer(phase, array):
    """The RTL's address streams compute every layer bit-exactly (see check_numerics)."""
    for i, (layer, res) in enumerate(zip(LAYERS, _sweep(phase, array))):
        check_numerics(phase, ARRAYS[array], layer, res, 100 + i)


#: Fields at the limit of dim_width = 4 (values up to 15): huge kernels, strides, padding,
#: dilation, batch and channels relative to the field width.
LIMIT_CFG = Config(name="bp_dw4", rows=4, cols=4, dim_width=4)
LIMIT_LAYERS = [
    ConvLayer.conv(1, 1, 15, 4, 1, 15, 2, 1, 0, 1),
    ConvLayer.conv(1, 1, 15, 14, 1, 3, 3, 15, 15, 1),
    ConvLayer.conv(1, 1, 13, 15, 1, 8, 5, (1, 15), (7, 2), (2, 3)),
    ConvLayer.conv(1, 1, 15, 15, 1, 2, 2, 1, 0, 14),
    ConvLayer.conv(15, 1, 4, 4, 1, 1, 1),
    ConvLayer.conv(1, 15, 2, 2, 15, 1, 1),
    ConvLayer.conv(2, 1, 15, 15, 1, 1, 1, 15, 0, 1),
]


@pytest.mark.parametrize("phase", sorted(GENERATORS))
def test_rtl_at_field_limits(phase):
    """Descriptor fields at the top of dim_width: beats, counters and numerics still exact."""
    jobs = [(model.desc_fields(layer), 1.0, 0.7) for layer in LIMIT_LAYERS]
    for i, (layer, res) in enumerate(zip(LIMIT_LAYERS, simulate(phase, LIMIT_CFG, jobs))):
        check_beats(phase, LIMIT_CFG, layer, res)
        check_numerics(phase, LIMIT_CFG, layer, res, 200 + i)


@pytest.mark.parametrize("phase", sorted(GENERATORS))
def test_rtl_on_16x16_array(phase):
    """The paper's 16x16 array (preset paper16): a scaled-down stride-2 layer, exact."""
    cfg = load_config("paper16")
    layer = ConvLayer.conv(2, 3, 9, 8, 3, 3, 3, 2, 1)
    res = simulate(phase, cfg, [(model.desc_fields(layer), 0.9, 0.9)])[0]
    check_beats(phase, cfg, layer, res)
    check_numerics(phase, cfg, layer, res, 300)
    assert res["counters"]["prologue"] == (5 if phase == "loss" else 4)


def _quotient_steps(layer):
    """Prologue division steps of the transposed mode: |floor((p - d(R-1)) / s)| and
    |floor(d / s)| per axis, the largest."""
    steps = []
    for ax, kern in ((0, layer.kernel_h), (1, layer.kernel_w)):
        s, p, d = layer.stride[ax], layer.pad[ax], layer.dil[ax]
        steps += [abs((p - d * (kern - 1)) // s), d // s]
    return max(steps)


@pytest.mark.parametrize("phase,array", CASES)
def test_prologue(phase, array):
    """The prologue is 4 cycles (checks) plus, in the transposed mode, the largest quotient of
    the per-layer normalizations, stepped one per cycle; never the paper's 68."""
    for layer, res in zip(LAYERS, _sweep(phase, array)):
        expected = 4 + (_quotient_steps(layer) if phase == "loss" else 0)
        assert res["counters"]["prologue"] == expected, layer.text()


@pytest.mark.parametrize("phase", sorted(GENERATORS))
def test_streams_are_independent(phase):
    """One stream blocked for hundreds of cycles does not stop or corrupt the other; nothing is
    lost when it resumes; the layer ends only after both."""
    cfg = ARRAYS["3x5"]
    layer = LAYERS[1]
    jobs = [(model.desc_fields(layer), lambda c: c > 600, 1.0),
            (model.desc_fields(layer), 1.0, lambda c: c > 600 and c % 3 == 0)]
    for res in simulate(phase, cfg, jobs):
        for side in "ab":
            stream = f"{phase}_{side}"
            assert [model.normalize(stream, b, cfg.rows, cfg.cols)
                    for b in res["beats"][side]] == \
                model.beats(layer, stream, cfg.rows, cfg.cols)
        assert res["cycles"] > 600


def _bad(**changes):
    f = model.desc_fields(LAYERS[0])
    f.update(changes)
    return f


BAD = [
    (_bad(n=0), BPError.ZERO_SIZE),
    (_bad(s=0), BPError.ZERO_SIZE),
    (_bad(oh=0), BPError.ZERO_SIZE),
    (_bad(stride_h=0), BPError.ZERO_STEP),
    (_bad(dil_w=0), BPError.ZERO_STEP),
    (_bad(r=10), BPError.KERNEL_TOO_LARGE),                # 10 > 7 + 2*1
    (_bad(dil_w=3, s=4), BPError.KERNEL_TOO_LARGE),        # 3*3 + 1 > 5 + 2*1
    (_bad(oh=5), BPError.SHAPE_MISMATCH),                  # is 4
    (_bad(ow=2), BPError.SHAPE_MISMATCH),                  # is 3
    (_bad(stride_w=3), BPError.SHAPE_MISMATCH),            # ow would be 2
]


@pytest.mark.parametrize("phase", sorted(GENERATORS))
def test_bad_descriptors_are_flagged(phase):
    """Each bad descriptor raises error with its code within a few cycles, sends no beat and
    leaves the generator idle; a good layer after each runs correctly."""
    cfg = ARRAYS["4x4"]
    big = ConvLayer.conv(2, 8, 12, 12, 8, 3, 3, 1, 1)       # dY, W and X beyond 1024 words
    over = ConvLayer.conv(1, 1, 12, 12, 1, 3, 3, 1, 1)
    small_a = cfg.replace(buf_a_depth=64)           # over's W fits, dY (144) does not
    small_b = cfg.replace(buf_b_depth=64)
    cases = BAD + [(model.desc_fields(big),
                    BPError.B_OVERFLOW if phase == "loss" else BPError.A_OVERFLOW)]
    jobs = []
    for fields, _ in cases:
        jobs += [(fields, 1.0, 1.0), (model.desc_fields(LAYERS[0]), 1.0, 1.0)]
    results = simulate(phase, cfg, jobs)
    for i, (fields, code) in enumerate(cases):
        bad, good = results[2 * i], results[2 * i + 1]
        assert bad["error"] and bad["code"] == code, (fields, bad["code"])
        assert bad["beats"] == {"a": [], "b": []} and bad["cycles"] <= 4
        assert not good["error"]
        for side in "ab":
            stream = f"{phase}_{side}"
            assert [model.normalize(stream, b, cfg.rows, cfg.cols)
                    for b in good["beats"][side]] == \
                model.beats(LAYERS[0], stream, cfg.rows, cfg.cols)
    # Which buffer overflows: loss reads W from A and dY from B; gradient dY from A, X from B.
    for c, expect in ((small_a, {"loss": BPError.NONE, "grad": BPError.A_OVERFLOW}),
                      (small_b, {"loss": BPError.B_OVERFLOW, "grad": BPError.B_OVERFLOW})):
        res = simulate(phase, c, [(model.desc_fields(over), 1.0, 0.5)])[0]
        assert res["code"] == expect[phase] and res["error"] == (expect[phase] != BPError.NONE)
        if not res["error"]:        # address width 6 < dim_width 12: still exact
            check_beats(phase, c, over, res)


# --- buffer-side blocks with modelled buffers ----------------------------------------------------

def _mem(cfg, depth, values):
    init = np.zeros(depth, dtype=np.int64)
    init[:len(values)] = values
    return Memory(shape=arith_for(cfg).operand_shape, depth=depth, init=[int(v) for v in init])


class _Fetch(Elaboratable):
    """Generator stream -> buffer (``Memory``, one read port per lane) -> buffer-side block.

    Loss: ``b`` addresses, lane ``j`` reads ``addr[j]`` only when its mask bit is set (masked
    lanes are never read), then :class:`MaskExpander`. Gradient: ``a`` addresses, port ``l``
    reads ``addr + l`` (one contiguous read), then :class:`CrossbarRecovery`. ``reads`` counts
    the elements the buffer delivered to used lanes."""

    def __init__(self, phase, cfg, tensor):
        self.phase, self.cfg = phase, cfg
        self.gen = GENERATORS[phase](cfg)
        if phase == "loss":
            self.mem = _mem(cfg, cfg.buf_b_depth, np.ravel(tensor))
            self.blk = MaskExpander(cfg)
            self.src = self.gen.b
        else:
            self.mem = _mem(cfg, cfg.buf_a_depth, np.ravel(tensor))
            self.blk = CrossbarRecovery(cfg)
            self.src = self.gen.a
        self.reads = Signal(32)

    def elaborate(self, platform):
        m = Module()
        m.submodules.gen, m.submodules.mem, m.submodules.blk = self.gen, self.mem, self.blk
        src, blk = self.src, self.blk
        lanes = len(src.payload.mask)
        ports = [self.mem.read_port() for _ in range(lanes)]
        take = src.valid & src.ready
        pending = Signal()
        held = Signal.like(src.payload)
        m.d.comb += src.ready.eq(~pending | blk.i.ready)
        with m.If(take):
            m.d.sync += [pending.eq(1), held.eq(src.payload)]
        with m.Elif(blk.i.ready):
            m.d.sync += pending.eq(0)
        mask = src.payload.mask
        for j, port in enumerate(ports):
            if self.phase == "loss":
                m.d.comb += [port.addr.eq(src.payload.addr[j]), port.en.eq(take & mask[j])]
            else:
                m.d.comb += [port.addr.eq(src.payload.addr + j), port.en.eq(take)]
            m.d.comb += blk.i.payload.data[j].eq(port.data)
        m.d.comb += [blk.i.valid.eq(pending), blk.i.payload.mask.eq(held.mask),
                     blk.i.payload.last.eq(held.last), blk.i.payload.end.eq(held.end)]
        if self.phase == "grad":
            m.d.comb += blk.i.payload.slice_end.eq(held.slice_end)
        with m.If(take):
            m.d.sync += self.reads.eq(self.reads + sum(mask[j] for j in range(lanes)))
        return m


@pytest.mark.parametrize("phase,array", CASES)
def test_buffer_path(phase, array):
    """Through modelled buffers: the rows leaving MaskExpander (loss, B tiles) / the slices
    leaving CrossbarRecovery (gradient, A slices) equal the explicit lowering's tiles, zeros
    included, while the buffer delivers only the non-zero elements."""
    cfg = ARRAYS[array]
    layer = LAYERS[5] if phase == "loss" else LAYERS[19]
    dy, w, x = _tensors(layer, 7)
    if phase == "loss":
        mat = golden.lower_input_grad(dy, w, (layer.height, layer.width), *_params(layer)).b
        top = _Fetch(phase, cfg, dy)
    else:
        mat = golden.lower_weight_grad(x, dy, (layer.kernel_h, layer.kernel_w), *_params(layer)).a
        top = _Fetch(phase, cfg, dy)
    m_n, kg_n, ng_n = model.gemm_dims(layer, phase)
    rows, cols = cfg.rows, cfg.cols
    expected = []
    for nt in range(-(-ng_n // cols)):
        for kt in range(-(-kg_n // rows)):
            if phase == "loss":
                for i in range(rows):
                    expected.append([int(mat[kt * rows + i, nt * cols + j])
                                     if kt * rows + i < kg_n and nt * cols + j < ng_n else 0
                                     for j in range(cols)])
            else:
                for mm in range(m_n):
                    expected.append([int(mat[mm, kt * rows + i]) if kt * rows + i < kg_n else 0
                                     for i in range(rows)])
    got = []
    rng = random.Random(3)
    other = top.gen.a if phase == "loss" else top.gen.b

    async def tb(ctx):
        ctx.set(other.ready, 1)
        ctx.set(top.gen.desc.payload, model.desc_fields(layer))
        ctx.set(top.gen.desc.valid, 1)
        await ctx.tick().until(top.gen.desc.ready)
        ctx.set(top.gen.desc.valid, 0)
        while len(got) < len(expected):
            ready = rng.random() < 0.6
            ctx.set(top.blk.o.ready, ready)
            if ready and ctx.get(top.blk.o.valid):
                got.append([ctx.get(top.blk.o.payload.data[j]) for j in range(len(expected[0]))])
            await ctx.tick()
        for _ in range(5):
            assert not ctx.get(top.blk.o.valid)
            await ctx.tick()
        stream = f"{phase}_{'b' if phase == 'loss' else 'a'}"
        assert ctx.get(top.reads) == model.counters(layer, stream, rows, cols)["words"]

    sim = Simulator(top)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()
    assert got == expected


# --- bounded formal check of the NZ-detection / mapping blocks ----------------------------------
#
# TransposedMap and DilatedMap (the counters the generators step, their NZ tests and compact
# addresses) against their definitions by floor division, for every layer whose fields fit in
# FORMAL_DW bits and every coordinate: each property is combinational, so a depth-1 BMC
# proves it for all values of those widths (addresses modulo 2**FORMAL_AW). The proofs take
# tens of seconds; the solver comes from a wheel (a dev dependency: bpsa.verify.formal).

FORMAL_DW, FORMAL_AW = 3, 6
FORMAL_PROPS = [("loss", "origin"), ("loss", "row_step"), ("loss", "lane_step"),
                # the longest proof (about 20 s): make test-long
                pytest.param("loss", "output", marks=pytest.mark.long),
                ("grad", "origin"), ("grad", "lane_step"), ("grad", "output")]


class _FormalHarness(wiring.Component):
    """Free layer descriptor and coordinates; Assume a valid layer, Assert one property."""

    def __init__(self, phase, prop):
        self.phase, self.prop = phase, prop
        dw = FORMAL_DW
        super().__init__({
            "d": In(data.StructLayout({f: unsigned(dw) for f in DESC_FIELDS})),
            "c": In(data.StructLayout({x: unsigned(dw + 2) for x in "nhwkrqm"})),
        })

    def elaborate(self, platform):
        m = Module()
        d, aw = self.d, FORMAL_AW
        spans = [d.dil_h * (d.r - 1), d.dil_w * (d.s - 1)]
        oh = (d.h + 2 * d.pad_h - spans[0] - 1) // d.stride_h + 1
        ow = (d.w + 2 * d.pad_w - spans[1] - 1) // d.stride_w + 1
        m.d.comb += Assume(
            (d.n > 0) & (d.c > 0) & (d.h > 0) & (d.w > 0) & (d.k > 0) & (d.r > 0) & (d.s > 0)
            & (d.stride_h > 0) & (d.stride_w > 0) & (d.dil_h > 0) & (d.dil_w > 0)
            & (spans[0] < d.h + 2 * d.pad_h) & (spans[1] < d.w + 2 * d.pad_w)
            & (d.oh == oh) & (d.ow == ow))
        ohow = (d.oh * d.ow)[:aw]
        kohow = (d.k * ohow)[:aw]
        if self.phase == "loss":
            self._loss(m, d, ohow, kohow)
        else:
            self._grad(m, d, ohow, kohow)
        return m

    @staticmethod
    def _sig(m, shape, value, name):
        sig = Signal(shape, name=name)
        m.d.comb += sig.eq(value)
        return sig

    def _check_step(self, m, layout, step, state_of, coords, limits, name):
        """step(state_of(coords)) == state_of(coords + 1) in mixed radix ``limits`` (last
        fastest); only ``valid`` past the end."""
        start = state_of(*coords, f"{name}_cur")
        stepped = Signal(layout, name=f"{name}_stepped")
        step(m, stepped, start)
        nxt, carry = [], 1
        for x, lim in reversed(list(zip(coords[1:], limits[1:]))):
            wrap = carry & (x + 1 == lim)
            nxt.insert(0, Mux(wrap, 0, x + carry))
            carry = wrap
        nxt.insert(0, coords[0] + carry)
        succ = state_of(*nxt, f"{name}_succ")
        m.d.comb += Assert(stepped.valid == succ.valid, f"{name} valid")
        with m.If(succ.valid):
            m.d.comb += Assert(stepped.as_value() == succ.as_value(), f"{name} step")

    def _loss(self, m, d, ohow, kohow):
        dw, aw, c = FORMAL_DW, FORMAL_AW, self.c
        sig = functools.partial(self._sig, m)
        pad_lo = [d.dil_h * (d.r - 1) - d.pad_h, d.dil_w * (d.s - 1) - d.pad_w]
        vs = signed(dw + 4)
        vh0 = sig(vs, (-pad_lo[0]) // d.stride_h, "vh0")
        dqh = sig(vs, d.dil_h // d.stride_h, "dqh")
        tm = TransposedMap(
            d, dw=dw, aw=aw, ohow=ohow, kohow=kohow,
            org_h=(vh0, sig(dw, (-pad_lo[0]) % d.stride_h, "ph0"), sig(aw, vh0 * d.ow, "v0")),
            org_w=(sig(vs, (-pad_lo[1]) // d.stride_w, "vw0"),
                   sig(dw, (-pad_lo[1]) % d.stride_w, "pw0")),
            tap_h=(dqh, sig(dw, d.dil_h % d.stride_h, "drh"), sig(aw, dqh * d.ow, "dq")),
            tap_w=(sig(vs, d.dil_w // d.stride_w, "dqw"), sig(dw, d.dil_w % d.stride_w, "drw")))

        def lane_of(n, h, w, name):
            o = Signal(tm.lane_layout, name=name)
            zh, zw = h - pad_lo[0], w - pad_lo[1]
            npart = (n * kohow)[:aw]
            m.d.comb += [o.valid.eq(n < d.n), o.n.eq(n), o.h.eq(h), o.w.eq(w),
                         o.vh.eq(zh // d.stride_h), o.ph.eq(zh % d.stride_h),
                         o.vw.eq(zw // d.stride_w), o.pw.eq(zw % d.stride_w),
                         o.npart.eq(npart), o.hpart.eq(npart + (zh // d.stride_h * d.ow)[:aw])]
            return o

        def row_of(k, r, q, name):
            o = Signal(tm.row_layout, name=name)
            th, tw = r * d.dil_h, q * d.dil_w
            kpart = (k * ohow)[:aw]
            m.d.comb += [o.valid.eq(k < d.k), o.k.eq(k), o.r.eq(r), o.q.eq(q),
                         o.vr.eq(th // d.stride_h), o.pr.eq(th % d.stride_h),
                         o.vq.eq(tw // d.stride_w), o.pq.eq(tw % d.stride_w),
                         o.kpart.eq(kpart), o.rpart.eq(kpart + (th // d.stride_h * d.ow)[:aw])]
            return o

        m.d.comb += Assume((c.n < d.n) & (c.h < d.h) & (c.w < d.w) & (c.k < d.k) & (c.r < d.r)
                           & (c.q < d.s))
        if self.prop == "origin":
            lane0, row0 = Signal(tm.lane_layout), Signal(tm.row_layout)
            tm.lane_origin(m, lane0)
            tm.row_origin(m, row0)
            m.d.comb += [Assert(lane0.as_value() == lane_of(0, 0, 0, "l0").as_value()),
                         Assert(row0.as_value() == row_of(0, 0, 0, "r0").as_value())]
        elif self.prop == "lane_step":
            self._check_step(m, tm.lane_layout, tm.lane_step, lane_of, (c.n, c.h, c.w),
                             (d.n, d.h, d.w), "lane")
        elif self.prop == "row_step":
            self._check_step(m, tm.row_layout, tm.row_step, row_of, (c.k, c.r, c.q),
                             (d.k, d.r, d.s), "row")
        else:
            addr, nz, inside = tm.lane_output(m, row_of(c.k, c.r, c.q, "row"),
                                              lane_of(c.n, c.h, c.w, "lane"), "x")
            zh = c.h + c.r * d.dil_h - pad_lo[0]
            zw = c.w + c.q * d.dil_w - pad_lo[1]
            nz_ref = ((zh >= 0) & (zw >= 0) & (zh % d.stride_h == 0) & (zw % d.stride_w == 0)
                      & (zh <= d.stride_h * (d.oh - 1)) & (zw <= d.stride_w * (d.ow - 1)))
            row_ref = ((c.n * d.k + c.k)[:aw] * d.oh + zh // d.stride_h)[:aw]
            addr_ref = sig(aw, row_ref * d.ow + zw // d.stride_w, "addr_ref")
            m.d.comb += [Assert(inside), Assert(nz == nz_ref, "NZ detection"),
                         Assert(~nz | (addr == addr_ref), "compact address")]

    def _grad(self, m, d, ohow, kohow):
        dw, aw, c = FORMAL_DW, FORMAL_AW, self.c
        hd = self._sig(m, dw + 2, d.stride_h * (d.oh - 1) + 1, "hd")
        wd = self._sig(m, dw + 2, d.stride_w * (d.ow - 1) + 1, "wd")
        dm = DilatedMap(d, dw=dw, aw=aw, hd=hd, wd=wd, kohow=kohow)

        def lane_of(n, i, j, name):
            o = Signal(dm.lane_layout, name=name)
            npart = (n * kohow)[:aw]
            hpart = (npart + (i // d.stride_h * d.ow)[:aw])[:aw]
            m.d.comb += [o.valid.eq(n < d.n), o.n.eq(n), o.i.eq(i), o.j.eq(j),
                         o.pi.eq(i % d.stride_h), o.pj.eq(j % d.stride_w), o.npart.eq(npart),
                         o.hpart.eq(hpart), o.laddr.eq(hpart + j // d.stride_w)]
            return o

        # c.h / c.w stand for the dilated-dY coordinates i / j, c.m for the slice (channel k).
        m.d.comb += Assume((c.n < d.n) & (c.h < hd) & (c.w < wd) & (c.m < d.k))
        if self.prop == "origin":
            lane0 = Signal(dm.lane_layout)
            dm.lane_origin(m, lane0)
            m.d.comb += Assert(lane0.as_value() == lane_of(0, 0, 0, "l0").as_value())
        elif self.prop == "lane_step":
            self._check_step(m, dm.lane_layout, dm.lane_step, lane_of, (c.n, c.h, c.w),
                             (d.n, hd, wd), "lane")
        else:
            lane = lane_of(c.n, c.h, c.w, "lane")
            nz = dm.lane_nz(lane)
            nz_ref = (c.h % d.stride_h == 0) & (c.w % d.stride_w == 0)
            addr = self._sig(m, aw, lane.laddr + c.m * ohow, "addr")
            row_ref = ((c.n * d.k + c.m)[:aw] * d.oh + c.h // d.stride_h)[:aw]
            addr_ref = self._sig(m, aw, row_ref * d.ow + c.w // d.stride_w, "addr_ref")
            m.d.comb += [Assert(nz == nz_ref, "Eq. 4"),
                         Assert(~nz | (addr == addr_ref), "compact address")]


@pytest.mark.formal
@pytest.mark.parametrize("phase,prop", FORMAL_PROPS)
def test_maps_formally_equal_their_definitions(phase, prop, tmp_path):
    """For every layer with fields below 2**FORMAL_DW and every coordinate: the stepped
    counters equal their division-based definitions (origin, one step), and NZ detection and
    compact addresses equal Algorithm 1 (loss) / Eq. 4 and Algorithm 2 (gradient)."""
    passed, log = prove(_FormalHarness(phase, prop), f"{phase}_{prop}", tmp_path)
    assert passed, log


# --- generated Verilog ---------------------------------------------------------------------------

@pytest.mark.parametrize("preset", ["small", "nonsquare", "paper16"])
def test_verilog_generates(preset):
    from bpsa.platform.verilog import generate_verilog
    cfg = load_config(preset)
    for top in ("bp_loss_addr", "bp_grad_addr"):
        text = generate_verilog(cfg, top)
        assert f"module {top}" in text and "/work" not in text


# make test-long: the block's own Verilog with its cocotb testbench (its modules run under
# Verilator inside the accelerator's native tests in make test; the build is what costs)
@pytest.mark.cocotb
@pytest.mark.long
@pytest.mark.parametrize("phase,top", [("loss", "bp_loss_addr"), ("grad", "bp_grad_addr")])
def test_generators_verilator(phase, top):
    """The generated Verilog under Verilator: whole layers with random backpressure against the
    model (every beat, counters), and a refused descriptor
    (src/bpsa/sim/testbenches/tb_bp_im2col.py)."""
    from bpsa.sim.runner import run_cocotb
    tests, failures = run_cocotb(ARRAYS["3x5"], "bpsa.sim.testbenches.tb_bp_im2col", top=top,
                                 extra_env={"BPSA_BP_PHASE": phase})
    assert tests == 2 and failures == 0
