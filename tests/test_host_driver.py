"""The host driver's own logic (:mod:`bpsa.host.driver`), numpy only: column strips for layers too
wide for the controller, run on a stand-in accelerator that answers descriptors with
:mod:`bpsa.models.golden` and refuses, as the hardware does, every layer
:func:`bpsa.plan.tiling.plan` refuses. The real hardware runs strips in
``tests/test_accelerator.py`` (Verilator)."""

import asyncio
import random

import numpy as np
import pytest

from bpsa.config import load_config
from bpsa.host.driver import Driver
from bpsa.models import golden
from bpsa.plan import tiling
from bpsa.spec.layer import ConvLayer
from bpsa.spec.numeric import element_bytes
from bpsa.spec import isa
from bpsa.spec.regmap import (CONTROL_BITS, LAYER_FIELDS,
                              REGISTER_MAP, config_words)

TINY = load_config("small").replace(buf_a_depth=128, buf_b_depth=128, buf_p_depth=128,
                                    name="small_tinybuf")
NAMES = {offset: name for name, offset in REGISTER_MAP.items()}


class GoldenTransport:
    """A stand-in accelerator behind the driver's four transport coroutines: memory is a
    bytearray, START reads the program's descriptor (its ``layer.*`` SETs, :mod:`bpsa.spec.isa`),
    decodes the descriptor's tensors, computes the phase with bpsa.models.golden
    and writes the result in the hardware's layout; a layer the controller's plan refuses is
    answered with TOO_LARGE (6). Counts the descriptors it ran in ``runs``."""

    def __init__(self, config, size=1 << 22):
        self.cfg, self.mem, self.regs, self.runs = config, bytearray(size), {}, []

    async def read32(self, offset):
        name = NAMES[offset]
        consts = config_words(self.cfg)             # ID, VERSION, CFG_*
        if name in consts:
            return consts[name]
        if name.endswith("_HI"):
            return 0
        if name.endswith("_LO"):
            return 7 if name[:-3] == "busy_cycles".upper() else 0
        return self.regs.get(name, 0)

    async def write32(self, offset, value):
        name = NAMES[offset]
        if name == "CONTROL" and value >> CONTROL_BITS["START"] & 1:
            self.regs.update(self._descriptor())
            self.regs["STATUS"] = 2 | self._run() << 8
        elif name != "CONTROL":
            self.regs[name] = value

    def _descriptor(self):
        """The descriptor registers' values, from the program at PROG_ADDR."""
        at, count = self.regs["PROG_ADDR"], self.regs["PROG_WORDS"]
        words = [int.from_bytes(self.mem[at + 8 * i:at + 8 * i + 8], "little")
                 for i in range(count)]
        trace, code = isa.execute(self.cfg, words)
        assert code == 0, code
        state = trace[0][1]
        return {reg: state[f"layer.{field}"] for field, reg, *_ in LAYER_FIELDS}

    async def read_mem(self, addr, nbytes):
        return bytes(self.mem[addr:addr + nbytes])

    async def write_mem(self, addr, data):
        self.mem[addr:addr + len(data)] = data

    def _tensor(self, name, shape):
        nb = element_bytes(self.cfg.operand_width)
        raw = self.mem[self.regs[name]:self.regs[name] + int(np.prod(shape)) * nb]
        v = np.frombuffer(bytes(raw), dtype=f"<i{nb}").astype(np.int64)
        return v.reshape(shape)

    def _run(self):
        d = {k: self.regs.get(k, 0) for k in ("PHASE", "N", "C", "H", "W", "K", "R", "S")}
        n, c, h, w, k, r, s = (d[k] for k in "N C H W K R S".split())
        st = (self.regs["STRIDE_H"], self.regs["STRIDE_W"])
        pad = (self.regs["PAD_H"], self.regs["PAD_W"])
        dil = (self.regs["DIL_H"], self.regs["DIL_W"])
        phase = ("forward", "loss", "gradient")[d["PHASE"]]
        zero_free = self.regs.get("MODE", 0) == 1 and phase != "forward"
        zf = phase == "gradient" and zero_free
        try:
            tiling.plan(self.cfg, phase, ConvLayer.conv(n, c, h, w, k, r, s, st, pad, dil),
                        mode="zero_free" if zero_free else "bp_im2col")
        except ValueError:
            return 6
        self.runs.append((phase, w, pad))
        oh, ow = layer_shapes(n, c, h, w, k, r, s, st, pad, dil)
        cols = self.cfg.cols
        if phase == "forward":
            kt = -(-k // cols)
            x = self._tensor("ADDR_X", (n, c, h, w))
            wb = self._tensor("ADDR_W", (kt, c, r, s, cols)).transpose(0, 4, 1, 2, 3)
            y = golden.conv2d(x, wb.reshape(kt * cols, c, r, s), st, pad, dil)
            out = y.reshape(n, kt, cols, oh, ow).transpose(0, 1, 3, 4, 2)
        elif phase == "loss" and zero_free:     # dY, dX blocked by cols; W input-blocked
            ct, kt = -(-c // cols), -(-k // cols)
            dyb = self._tensor("ADDR_DY", (n, kt, oh, ow, cols)).transpose(0, 1, 4, 2, 3)
            wb = self._tensor("ADDR_W", (ct, k, r, s, cols)).transpose(1, 0, 4, 2, 3)
            dx = golden.conv2d_input_grad(dyb.reshape(n, kt * cols, oh, ow)[:, :k],
                                          wb.reshape(k, ct * cols, r, s), (h, w), st, pad,
                                          dil)
            out = dx.reshape(n, ct, cols, h, w).transpose(0, 1, 3, 4, 2)
        elif phase == "loss":
            out = golden.conv2d_input_grad(self._tensor("ADDR_DY", (n, k, oh, ow)),
                                           self._tensor("ADDR_W", (k, c, r, s)), (h, w),
                                           st, pad, dil)
        elif zf:        # X blocked by B channels, dY by cols, dW blocked like forward W
            B = self.cfg.feeder_bus_width
            ct, kt = -(-c // B), -(-k // cols)
            xb = self._tensor("ADDR_X", (n, ct, h, w, B)).transpose(0, 1, 4, 2, 3)
            dyb = self._tensor("ADDR_DY", (n, kt, oh, ow, cols)).transpose(0, 1, 4, 2, 3)
            dw = golden.conv2d_weight_grad(xb.reshape(n, ct * B, h, w)[:, :c],
                                           dyb.reshape(n, kt * cols, oh, ow), (r, s),
                                           st, pad, dil)
            out = dw.reshape(kt, cols, c, r, s).transpose(0, 2, 3, 4, 1)
        else:
            out = golden.conv2d_weight_grad(self._tensor("ADDR_X", (n, c, h, w)),
                                            self._tensor("ADDR_DY", (n, k, oh, ow)), (r, s),
                                            st, pad, dil)
        at = self.regs["ADDR_OUT"]
        nb = element_bytes(self.cfg.acc_width)
        raw = (np.asarray(out).ravel() & ((1 << 8 * nb) - 1)).astype(f"<u{nb}").tobytes()
        self.mem[at:at + len(raw)] = raw
        return 0


def layer_shapes(n, c, h, w, k, r, s, stride, pad, dil):
    """``(OH, OW)`` by the golden model (:exc:`ValueError` when the kernel does not fit)."""
    return golden.output_hw((h, w), (r, s), stride, pad, dil)


def _run(cfg, phase, lay, rng, low=-128):
    n, c, h, w, k, r, s, st, pad, dil = lay
    oh, ow = layer_shapes(n, c, h, w, k, r, s, st, pad, dil)
    x = rng.integers(low, 128, (n, c, h, w))
    wt = rng.integers(low, 128, (k, c, r, s))
    dy = rng.integers(low, 128, (n, k, oh, ow))
    t = GoldenTransport(cfg)
    drv = Driver(t, cfg, mem_size=1 << 22)

    async def go():
        await drv.open()
        if phase == "forward":
            return await drv.forward(x, wt, st, pad, dil)
        if phase == "loss":
            return await drv.loss(dy, wt, (h, w), st, pad, dil)
        return await drv.gradient(x, dy, (r, s), st, pad, dil)

    got = asyncio.run(go())
    if phase == "forward":
        want = golden.conv2d(x, wt, st, pad, dil)
    elif phase == "loss":
        want = golden.conv2d_input_grad(dy, wt, (h, w), st, pad, dil)
    else:
        want = golden.conv2d_weight_grad(x, dy, (r, s), st, pad, dil)
    half = 1 << (cfg.acc_width - 1)
    t.unwrapped = want
    return got, (want + half) % (2 * half) - half, t, drv


def _wide_layers(count, seed):
    """Random layers of every phase that the controller refuses on TINY but column strips
    run: rows too wide for a bank, any stride, padding, dilation (stride above the dilated
    kernel's width too, which leaves dX columns no dY column reaches)."""
    rng = random.Random(seed)
    out = []
    while len(out) < count:
        phase = ("forward", "loss", "gradient")[len(out) % 3]
        r, s = rng.randint(1, 3), rng.randint(1, 4)
        st, pad, dil = ((rng.randint(1, 3), rng.randint(1, 4)), (rng.randint(0, 1),
                        rng.randint(0, 3)), (rng.randint(1, 2), rng.randint(1, 2)))
        lay = (rng.randint(1, 2), rng.randint(1, 4), rng.randint(2, 9), rng.randint(40, 200),
               rng.randint(1, 5), r, s, st, pad, dil)
        try:
            layer_shapes(*lay)
        except ValueError:      # the dilated kernel does not fit
            continue
        mode = tiling.default_mode(TINY, phase)
        try:        # (a space-to-depth gradient may fit where the layer does not)
            if "strips" in tiling.plan_or_strips(TINY, phase, ConvLayer.conv(*lay), mode=mode):
                out.append((phase, lay))
        except ValueError:
            pass
    return out


@pytest.mark.parametrize("phase,lay", _wide_layers(24, seed=11))
def test_wide_layer_runs_as_column_strips(phase, lay):
    """A layer too wide for the controller runs as several narrower descriptors (none of
    which the hardware refuses, all with pad_w = 0) and gives the golden result."""
    got, want, t, drv = _run(TINY, phase, lay, np.random.default_rng(lay[3]))
    assert np.array_equal(got, want)
    assert len(t.runs) >= 2 and all(p[1] == 0 for _, _, p in t.runs)
    strips = drv.plan["strips"]
    assert len(t.runs) == sum(st.in_cols > 0 for st in strips)
    assert drv.counters["busy_cycles"] == 7 * len(t.runs)


def test_strip_sums_wrap_like_the_accumulators():
    """With 16-bit accumulators and operands near the top of their range every dW sum
    overflows; the host's sum of the strips' partial dW wraps exactly as the whole layer's
    accumulators would."""
    cfg = TINY.replace(acc_width=16, name="small_tinybuf_acc16")
    lay = (2, 1, 9, 120, 2, 3, 3, (1, 1), (1, 1), (1, 1))
    got, want, t, drv = _run(cfg, "gradient", lay, np.random.default_rng(3), low=100)
    assert np.array_equal(got, want) and len(t.runs) >= 2
    assert t.unwrapped.min() >= 1 << 16         # every sum overflowed 16 bits


def test_strips_cover_the_output():
    """Strips tile the output columns exactly, in order, and read only the input columns the
    whole layer reads (forward, gradient: inside the padded image; loss: inside dY)."""
    for phase, (n, c, h, w, k, r, s, st, pad, dil) in _wide_layers(60, seed=12):
        strips, plans = tiling.column_strips(TINY, phase,
                                             ConvLayer.conv(n, c, h, w, k, r, s, st, pad, dil))
        _, ow = layer_shapes(n, c, h, w, k, r, s, st, pad, dil)
        cols = w if phase == "loss" else ow
        assert [x.out0 for x in strips] == list(np.cumsum([0] + [x.out_cols
                                                                 for x in strips[:-1]]))
        assert sum(x.out_cols for x in strips) == cols
        for x, p in zip(strips, plans):
            assert (p is None) == (x.in_cols == 0)
            if phase == "loss":
                assert 0 <= x.in0 and x.in0 + x.in_cols <= ow
            else:
                assert -pad[1] <= x.in0 and x.in0 + x.in_cols <= w + pad[1]


def test_narrow_layers_are_not_cut():
    """A layer the controller plans runs as one descriptor with its own padding."""
    lay = (1, 2, 5, 7, 3, 3, 3, (2, 2), (1, 1), (1, 1))
    for phase in ("forward", "loss", "gradient"):
        got, want, t, drv = _run(TINY, phase, lay, np.random.default_rng(1))
        assert np.array_equal(got, want)
        assert t.runs == [(phase, 7, (1, 1))]


def test_refusal_names_the_reason():
    """When even one-column strips do not fit for the same reason as the whole layer, the
    driver's error names it once; nothing runs."""
    t = GoldenTransport(TINY)
    drv = Driver(t, TINY)
    rng = np.random.default_rng(0)

    async def go(mode):  # a 9x9 loss: one kernel plane (81 words) is larger than a bank
        await drv.open()
        await drv.loss(rng.integers(-5, 5, (1, 1, 1, 52)), rng.integers(-5, 5, (1, 1, 9, 9)),
                       (9, 60), mode=mode)
    with pytest.raises(ValueError, match=r"kernel plane of W \(81 elements\) does not fit a "
                       r"bank of buffer A \(64 words\)$"):
        asyncio.run(go("bp_im2col"))
    # zero-free: W of a block of cols output channels (4 x 81 words) in a bank of B
    with pytest.raises(ValueError, match=r"W of 4 output channels \(324 words\) does not fit "
                       r"a bank of buffer B \(64 words\)$"):
        asyncio.run(go("zero_free"))
    assert t.runs == []


class HungTransport(GoldenTransport):
    """An accelerator that never finishes: STATUS stays BUSY, the cycles go on."""

    def __init__(self, config):
        super().__init__(config)
        self.cycles = 0

    async def write32(self, offset, value):
        if NAMES[offset] == "CONTROL" and value >> CONTROL_BITS["START"] & 1:
            self.regs["STATUS"] = 1                 # BUSY, no DONE
        elif NAMES[offset] != "CONTROL":
            self.regs[NAMES[offset]] = value

    async def read32(self, offset):
        if NAMES[offset] == "BUSY_CYCLES_LO":
            return self.cycles & 0xFFFF_FFFF
        return await super().read32(offset)

    async def idle(self, cycles):
        self.cycles += cycles


def test_a_hung_layer_times_out_after_its_budget():
    """The driver waits for a layer at most :func:`cycle_budget` cycles (20 times a generous
    estimate from the layer's MACs and tensors), then raises with STATUS and BUSY_CYCLES."""
    from bpsa.host.driver import BUDGET_FACTOR, cycle_budget, expected_cycles
    cfg = load_config("small")
    t = HungTransport(cfg)
    drv = Driver(t, cfg, poll_interval=256)
    x = np.ones((1, 2, 6, 6), dtype=np.int64)
    w = np.ones((3, 2, 3, 3), dtype=np.int64)

    async def go():
        await drv.open()
        await drv.forward(x, w, padding=1)

    with pytest.raises(TimeoutError, match=r"no DONE after [\d,]+ cycles \(STATUS 0x1: BUSY 1, "
                                           r"ERROR 0; BUSY_CYCLES [\d,]+\)"):
        asyncio.run(go())
    layer = ConvLayer.conv(1, 2, 6, 6, 3, 3, 3, pad=1)       # 6 x 6 out
    budget = cycle_budget(cfg, "forward", layer)
    # 1 x 3 x 6 x 6 outputs of 18 MACs at utilization 0.05 on 4 x 4, tensors twice, 2,000
    assert budget == BUDGET_FACTOR * expected_cycles(cfg, "forward", layer)
    assert expected_cycles(cfg, "forward", layer) == int(
        1944 / (16 * 0.05) + (72 + 54 + 108) * 2 + 2000)
    assert budget <= t.cycles < budget + 256


def test_pooling_arguments_are_checked_before_the_hardware():
    """A kind the configuration does not generate, an unknown kind, a dY of the wrong shape, a
    missing kernel and a layer the controller cannot tile are refused by the driver with the
    reason; nothing runs (the whole-accelerator pooling is tests/test_gateware_accelerator.py)."""
    rng = np.random.default_rng(0)
    x = rng.integers(-5, 5, (1, 2, 6, 6))
    cases = [
        (load_config("small").replace(pool_kinds=("max",)), lambda d: d.pool(x, "avg", 2),
         r"pooling kind 'avg' is not generated by configuration 'small' \(its pool_kinds: "
         r"\['max'\]\)"),
        (load_config("small").replace(pool_kinds=()), lambda d: d.pool(x, "global_avg"),
         r"its pool_kinds: none"),
        (load_config("small"), lambda d: d.pool(x, "mean", 2), r"one of max, avg, global_avg"),
        (load_config("small"), lambda d: d.pool(x, "max"), r"max pooling needs a kernel"),
        (load_config("small"), lambda d: d.pool_backward(np.zeros((1, 2, 2, 2), np.int64), x,
                                                         "max", 2),
         r"dy must have the pooling's output shape \(1, 2, 3, 3\)"),
        (load_config("small"), lambda d: d.pool(x, "max", 2, 1, 2),
         r"pool_forward layer does not fit configuration 'small': .*padding exceeds kernel"),
        (load_config("small"), lambda d: d.pool(rng.integers(0, 2, (1, 1, 600, 600)), "max", 3),
         r"does not fit configuration 'small': .*not even one row band fits"),
        (load_config("small"), lambda d: d.pool(x * 100, "max", 2), r"outside the 8-bit"),
    ]
    for cfg, call, msg in cases:
        t = GoldenTransport(cfg)
        drv = Driver(t, cfg)

        async def go():
            await drv.open()
            await call(drv)
        with pytest.raises(ValueError, match=msg):
            asyncio.run(go())
        assert t.runs == [] and "STATUS" not in t.regs


def test_pool_budget_covers_the_model():
    """The driver's pooling budget is above the cycle model's estimate of the layer."""
    from bpsa.host.driver import expected_pool_cycles
    from bpsa.models.perf import pool_cycles
    cfg = load_config("small")
    for phase in ("pool_forward", "pool_backward"):
        for kind, k, st, pad in (("max", 3, 2, 1), ("avg", 3, 1, 1), ("max", 2, 2, 0)):
            m = pool_cycles(cfg, phase, n=1, c=4, h=20, w=20, r=k, s=k, stride=(st, st),
                            pad=(pad, pad), kind=kind)
            oh = (20 + 2 * pad - k) // st + 1
            assert expected_pool_cycles(phase, 1, 4, 20, 20, k, k, oh, oh) > m.cycles


def test_open_refuses_hardware_of_another_arithmetic():
    """CFG_FEATURES [26:25] holds the arithmetic: a driver for a bf16 configuration refuses
    integer hardware of the same widths (and the reverse), before any layer runs."""
    import asyncio

    from bpsa.config import load_config
    from bpsa.host.driver import Driver
    from bpsa.spec.regmap import config_words

    class Regs:
        def __init__(self, hw):
            self.words = config_words(hw)

        async def read32(self, offset):
            name = NAMES[offset]
            return self.words.get(name, 0)

        async def write32(self, offset, value):
            pass

    bf16, int16 = load_config("small_bf16"), load_config("small_bf16").__class__(
        rows=4, cols=4, operand_width=16, acc_width=32, dataflows=["os"])
    asyncio.run(Driver(Regs(bf16), bf16).open())
    with pytest.raises(RuntimeError, match="the hardware computes in int, configuration "
                                           "'small_bf16' in bf16"):
        asyncio.run(Driver(Regs(int16), bf16).open())
    with pytest.raises(RuntimeError, match="the hardware computes in bf16, configuration "
                                           "'custom' in int"):
        asyncio.run(Driver(Regs(bf16), int16).open())
    small = load_config("small")                 # a pooling unit of four lanes
    asyncio.run(Driver(Regs(small), small).open())
    with pytest.raises(RuntimeError, match="the hardware's pooling unit has 1 lane\\(s\\), "
                                           "configuration 'small' 4"):
        asyncio.run(Driver(Regs(small.replace(pool_lanes=1)), small).open())


def test_operands_that_disagree_are_refused_before_the_hardware():
    """Every phase checks its operands' shapes against each other (the golden model's check,
    :func:`bpsa.spec.layer.conv_operands`), their values and the descriptor's field widths,
    and raises :exc:`ValueError` with the reason; nothing runs."""
    rng = np.random.default_rng(0)
    small, cf = load_config("small"), load_config("small_cf")

    def ints(*shape):
        return rng.integers(-5, 5, shape)

    x, w = ints(1, 4, 12, 12), ints(6, 4, 3, 3)
    dy = ints(1, 6, 6, 6)                                  # stride 2, padding 1
    cases = [
        (small, lambda d: d.forward(x, ints(6, 5, 3, 3), stride=2, padding=1),
         r"^w has 5 input channels but x has 4$"),
        (small, lambda d: d.forward(x[0], w), r"^x must have 4 dimensions \(N x C x H x W\), "
                                              r"not shape \(4, 12, 12\)$"),
        (small, lambda d: d.forward(x, w, stride=0), r"^stride must be >= 1, not 0$"),
        (small, lambda d: d.forward(x.astype(np.float32), w), r"^x must hold integers"),
        (small, lambda d: d.loss(ints(1, 5, 6, 6), w, (12, 12), 2, 1),
         r"^dy has 5 channels but w has 6 output channels$"),
        (small, lambda d: d.loss(ints(1, 6, 5, 6), w, (12, 12), 2, 1),
         r"^dy must have shape \(N, 6, 6, 6\) for input_hw \(12, 12\), kernel_hw \(3, 3\), "
         r"stride \(2, 2\), padding \(1, 1\), dilation \(1, 1\); not \(1, 6, 5, 6\)$"),
        (small, lambda d: d.gradient(x, ints(2, 6, 6, 6), (3, 3), 2, 1),
         r"^dy has batch 2 but x has 1$"),
        (small, lambda d: d.gradient(x, ints(1, 6, 7, 7), (3, 3), 2, 1),
         r"^dy must have shape \(N, 6, 6, 6\)"),
        (small, lambda d: d.loss_baseline(ints(1, 5, 6, 6), w, (12, 12), 2, 1),
         r"^dy has 5 channels but w has 6 output channels$"),
        (small, lambda d: d.gradient_baseline(x, ints(1, 6, 5, 5), (3, 3), 2, 1),
         r"^dy must have shape \(N, 6, 6, 6\)"),
        (cf, lambda d: d.loss(dy, ints(6, 4, 2, 3), (12, 12), 2, 1, mode="channel_first"),
         r"^dy must have shape \(N, 6, 7, 6\) for input_hw \(12, 12\), kernel_hw \(2, 3\)"),
        (small, lambda d: d.forward(ints(1, 1, 8, 8), ints(5000, 1, 1, 1)),
         r"^forward layer does not fit configuration 'small': layer K = 5000 does not fit "
         r"the descriptor's 12-bit fields \(dim_width 12: at most 4095\)$"),
        (small, lambda d: d.fc_backward(ints(2, 3), ints(5000, 3), ints(2, 5000)),
         r"^fc_backward does not fit configuration 'small': FC layer O = 5000 does not fit "
         r"the descriptor's 12-bit fields"),
        (small, lambda d: d.fc_backward(ints(2, 3) * 100, ints(4, 3), ints(2, 4)),
         r"^x has values outside the 8-bit signed operand range \[-128, 127\]$"),
        (small, lambda d: d.pool(x, "max", 2, stride=0), r"^stride must be >= 1, not 0$"),
        (small, lambda d: d.pool(x, "max", 0), r"^kernel must be >= 1 in both axes, not 0$"),
        (small, lambda d: d.pool_backward(ints(1, 4, 6, 6), x, "max", 2, requant=99),
         r"^requant \(a shift\) must be an integer in \[0, 31\], not 99$"),
    ]
    for cfg, call, msg in cases:
        t = GoldenTransport(cfg)
        drv = Driver(t, cfg, mem_size=1 << 22)

        async def go():
            await drv.open()
            await call(drv)
        with pytest.raises(ValueError, match=msg):
            asyncio.run(go())
        assert t.runs == [] and "STATUS" not in t.regs and "PROG_ADDR" not in t.regs, msg
