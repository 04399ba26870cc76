"""The AXI4-Lite register file: the register table, Amaranth-simulator tests through a tiny
Python bus master with random valid/ready delays, and the cocotb/Verilator testbench with
cocotbext-axi."""

import gc
import json
import random
import warnings

import pytest
from amaranth.hdl import UnusedElaboratable
from amaranth.sim import Simulator

from bpsa.config import Config
from bpsa.gateware.bus.axi_lite import (
    ADDR_WIDTH,
    AxiResp,
    Phase,
    RegisterFile,
)
from bpsa.spec.regmap import (
    COUNTERS,
    LAYER_FIELDS,
    MAP_VERSION,
    REGISTER_MAP,
    REGISTERS,
    STATUS_FIELDS,
    config_words,
    register_map,
)

CONFIGS = {
    "default": Config(name="default"),
    "wide": Config(name="wide", rows=16, cols=8, operand_width=16, acc_width=48,
                   dim_width=16, dataflows=["os", "is"], buf_a_depth=4096),
}


class LiteMaster:
    """A minimal AXI4-Lite master for the Amaranth simulator: one transaction at a time,
    random delays before each valid and each ready."""

    def __init__(self, ctx, bus, rng, delay=0.0):
        self.ctx, self.bus, self.rng, self.delay = ctx, bus, rng, delay

    def _wait(self):
        return self.rng.random() < self.delay

    async def write(self, addr, data, strb=0xF):
        ctx, bus = self.ctx, self.bus
        ctx.set(bus.awaddr, addr)
        ctx.set(bus.wdata, data)
        ctx.set(bus.wstrb, strb)
        aw_done = w_done = False
        while not (aw_done and w_done):
            aw = not aw_done and not self._wait()
            w = not w_done and not self._wait()
            ctx.set(bus.awvalid, aw)
            ctx.set(bus.wvalid, w)
            aw_ready, w_ready = ctx.get(bus.awready), ctx.get(bus.wready)
            await ctx.tick()
            aw_done |= aw and aw_ready
            w_done |= w and w_ready
        ctx.set(bus.awvalid, 0)
        ctx.set(bus.wvalid, 0)
        while True:
            ready = not self._wait()
            ctx.set(bus.bready, ready)
            valid, resp = ctx.get(bus.bvalid), ctx.get(bus.bresp)
            await ctx.tick()
            if ready and valid:
                break
        ctx.set(bus.bready, 0)
        return resp

    async def read(self, addr):
        ctx, bus = self.ctx, self.bus
        ctx.set(bus.araddr, addr)
        while True:
            valid = not self._wait()
            ctx.set(bus.arvalid, valid)
            ready = ctx.get(bus.arready)
            await ctx.tick()
            if valid and ready:
                break
        ctx.set(bus.arvalid, 0)
        while True:
            ready = not self._wait()
            ctx.set(bus.rready, ready)
            valid, data, resp = ctx.get(bus.rvalid), ctx.get(bus.rdata), ctx.get(bus.rresp)
            await ctx.tick()
            if ready and valid:
                break
        ctx.set(bus.rready, 0)
        return data, resp


def counter_responder(dut, live, asked=None, seed=7):
    """The counter port's other side, as a background testbench: answers each request 2-6
    cycles later with ``live[name]`` (0 when absent) at that time; the names asked go to
    ``asked``."""
    names = [name for name, _ in COUNTERS]

    async def responder(ctx):
        rng = random.Random(seed)
        while True:
            _, _, req, index = await ctx.tick().sample(dut.counter.req, dut.counter.index)
            if req:
                if asked is not None:
                    asked.append(names[index])
                await ctx.tick().repeat(rng.randrange(1, 6))
                ctx.set(dut.counter.value, live.get(names[index], 0))
                ctx.set(dut.counter.valid, 1)
                await ctx.tick()
                ctx.set(dut.counter.valid, 0)
    return responder


def run(dut, testbench):
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(counter_responder(dut, {}), background=True)
    sim.add_testbench(testbench)
    sim.run()


def test_register_table():
    """Offsets are unique, word aligned and inside the aperture; the host map agrees with the
    table and is JSON; the counters are complete; the layer's fields are not registers (map
    version 3: nothing between the program's registers and the counters)."""
    offsets = [r.offset for r in REGISTERS]
    assert len(set(offsets)) == len(offsets)
    assert all(o % 4 == 0 and o < 2 ** ADDR_WIDTH for o in offsets)
    assert REGISTER_MAP == {r.name: r.offset for r in REGISTERS}
    hmap = register_map(CONFIGS["default"])
    json.dumps(hmap)
    assert {k: v["offset"] for k, v in hmap["registers"].items()} == REGISTER_MAP
    assert hmap["registers"]["ID"]["reset"] == 0x42505341
    assert MAP_VERSION[0] == 3 and hmap["version"] == list(MAP_VERSION)
    assert not [r.name for r in REGISTERS if 0x038 <= r.offset < 0x100]
    assert {r.kind for r in REGISTERS} == {"const", "control", "status", "setting",
                                           "counter_lo", "counter_hi"}
    assert hmap["registers"]["PROG_WORDS"]["bits"] == 32
    assert hmap["descriptor"] == {field: key for field, key, *_ in LAYER_FIELDS}
    assert hmap["descriptor"]["stride_h"] == "STRIDE_H"
    assert hmap["registers"]["WINDOW_HI"]["reset"] == 0xFFFF_FFFF
    assert len(hmap["counters"]) == len(COUNTERS)
    for name, _ in COUNTERS:
        assert REGISTER_MAP[f"{name.upper()}_HI"] == REGISTER_MAP[f"{name.upper()}_LO"] + 4
    assert hmap["phases"] == {"forward": 0, "loss": 1, "gradient": 2, "fc_backward": 3,
                              "pool_forward": 4, "pool_backward": 5}
    assert hmap["pool_kinds"] == {"max": 0, "avg": 1}


def test_config_words():
    cfg = CONFIGS["wide"]
    words = config_words(cfg)
    assert words["CFG_ARRAY"] == 16 | 8 << 8 | 16 << 16 | 48 << 24
    # os + is: both backward modes (BP-im2col [20], zero-free [21])
    assert words["CFG_FEATURES"] == (0b101 | 1 << 4 | 1 << 5 | 1 << 6 | 16 << 8 | 3 << 16
                                     | 1 << 20 | 1 << 21)
    # log2(buf_pool_depth) in [31:27] (1,024 by default, generated or not)
    assert words["CFG_BUFFERS"] == 12 | 10 << 8 | 10 << 16 | 10 << 27
    # log2(dma_data_width / 64) in [25:24]
    assert config_words(cfg.replace(dma_data_width=256))["CFG_BUFFERS"] == \
        12 | 10 << 8 | 10 << 16 | 2 << 24 | 10 << 27
    # the pooling kinds generated in CFG_FEATURES [23:22]
    pooled = config_words(cfg.replace(pool_kinds=("avg",), buf_pool_depth=4096))
    assert pooled["CFG_FEATURES"] == words["CFG_FEATURES"] | 1 << 23
    assert pooled["CFG_BUFFERS"] >> 27 == 12


def test_bad_config():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnusedElaboratable)
        with pytest.raises(TypeError, match="config must be a Config"):
            RegisterFile({"rows": 4})
        gc.collect()


@pytest.mark.parametrize("name", sorted(CONFIGS))
@pytest.mark.parametrize("delay", [0.0, 0.5])
def test_registers(name, delay):
    """Reset values, write / read back with field widths, read-only writes ignored, SLVERR for
    unmapped addresses, byte strobes."""
    cfg = CONFIGS[name]
    dut = RegisterFile(cfg)
    consts = config_words(cfg)
    hmap = register_map(cfg)["registers"]

    async def tb(ctx):
        bus = LiteMaster(ctx, dut.axil, random.Random(3), delay)
        expect = {r.name: consts.get(r.name, r.reset) for r in REGISTERS}
        for r in REGISTERS:
            assert await bus.read(r.offset) == (expect[r.name], AxiResp.OKAY), r.name
        # 0x040, 0x088, 0x098: descriptor registers of map versions 1 and 2, gone in 3.0
        for off in (0x014, 0x038, 0x040, 0x088, 0x098, 0x0FC, 0x188, 0xFFC):
            assert await bus.read(off) == (0, AxiResp.SLVERR)
            assert await bus.write(off, 0x12345678) == AxiResp.SLVERR
        rng = random.Random(5)
        for r in REGISTERS:
            value = rng.getrandbits(32)
            assert await bus.write(r.offset, value) == AxiResp.OKAY
            if r.access == "rw":
                expect[r.name] = value & ((1 << hmap[r.name]["bits"]) - 1)
        for r in REGISTERS:
            if r.kind != "control":
                assert (await bus.read(r.offset))[0] == expect[r.name], r.name
        assert ctx.get(dut.window_lo) == expect["WINDOW_LO"]
        assert ctx.get(dut.window_hi) == expect["WINDOW_HI"]
        # Byte strobes on a 32-bit register.
        off = REGISTER_MAP["PROG_ADDR"]
        await bus.write(off, 0x11223344)
        await bus.write(off, 0xAABBCCDD, strb=0b0101)
        assert (await bus.read(off))[0] == 0x11BB33DD
        await bus.write(off, 0xAABBCCDD, strb=0b1000)
        assert (await bus.read(off))[0] == 0xAABB33DD
        assert ctx.get(dut.prog_addr) == 0xAABB33DD

    run(dut, tb)


def test_start_status_counters():
    """START pulses once (not while busy); done / error are sticky
    in STATUS until CLEAR or START; counters read as consistent halves."""
    cfg = CONFIGS["default"]
    dut = RegisterFile(cfg)
    starts, clears = [], []

    async def monitor(ctx):
        async for clk_edge, rst, start, clear, prog_addr in ctx.tick().sample(
                dut.start, dut.clear, dut.prog_addr):
            if start:
                starts.append(prog_addr)
            if clear:
                clears.append(1)

    async def tb(ctx):
        bus = LiteMaster(ctx, dut.axil, random.Random(1), 0.3)
        await bus.write(REGISTER_MAP["PROG_ADDR"], 0x8000_0040)
        await bus.write(REGISTER_MAP["CONTROL"], 1)
        await ctx.tick().repeat(2)
        assert starts == [0x8000_0040]
        ctx.set(dut.busy, 1)
        await bus.write(REGISTER_MAP["PROG_ADDR"], 0x40)
        await bus.write(REGISTER_MAP["CONTROL"], 1)
        await ctx.tick().repeat(2)
        assert starts == [0x8000_0040] and ctx.get(dut.prog_addr) == 0x40
        status = REGISTER_MAP["STATUS"]
        assert await bus.read(status) == (1, AxiResp.OKAY)
        ctx.set(dut.busy, 0)
        ctx.set(dut.done, 1)
        ctx.set(dut.error, 9)
        await ctx.tick()
        ctx.set(dut.done, 0)
        ctx.set(dut.error, 0)
        done = 1 << STATUS_FIELDS["DONE"][0]
        assert (await bus.read(status))[0] == done | 9 << STATUS_FIELDS["ERROR"][0]
        await bus.write(REGISTER_MAP["CONTROL"], 2)
        assert len(clears) == 1
        assert (await bus.read(status))[0] == 0
        ctx.set(dut.done, 1)
        await ctx.tick()
        ctx.set(dut.done, 0)
        assert (await bus.read(status))[0] == done
        await bus.write(REGISTER_MAP["CONTROL"], 1)
        assert (await bus.read(status))[0] == 0 and starts == [0x8000_0040, 0x40]
        # Counters: asked through the counter port, answered by ``responder``.
        values = {name: random.Random(i).getrandbits(64) for i, (name, _) in enumerate(COUNTERS)}
        live.update(values)
        for name, v in values.items():
            lo, resp = await bus.read(REGISTER_MAP[f"{name.upper()}_LO"])
            assert resp == AxiResp.OKAY
            live[name] = v ^ (0xFFFF << 32)             # the counter moves on
            hi, _ = await bus.read(REGISTER_MAP[f"{name.upper()}_HI"])
            assert lo | hi << 32 == v, name               # one sample
            hi, _ = await bus.read(REGISTER_MAP[f"{name.upper()}_HI"])
            assert hi == (v ^ (0xFFFF << 32)) >> 32, name  # a new sample
        assert asked == [name for name in values for _ in range(2)]

    live, asked = {}, []
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_process(monitor)
    sim.add_testbench(counter_responder(dut, live, asked), background=True)
    sim.add_testbench(tb)
    sim.run()


@pytest.mark.cocotb
@pytest.mark.parametrize("name", ["default", pytest.param("wide", marks=pytest.mark.long)])
def test_axi_lite_verilator(name):
    """The generated Verilog under Verilator, driven by cocotbext-axi's AxiLiteMaster."""
    from bpsa.sim.runner import run_cocotb
    tests, failures = run_cocotb(CONFIGS[name], "bpsa.sim.testbenches.tb_axi_lite", top="axil_regs")
    assert tests == 11 and failures == 0
