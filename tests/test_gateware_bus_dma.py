"""The DMA engine: Amaranth-simulator tests against ``bpsa.gateware.bus.dma.reference`` through a tiny
Python AXI4 RAM (random ready/valid delays, protocol checks, error regions), and the
cocotb/Verilator testbench with cocotbext-axi's AXI RAM model."""

import gc
import random
import warnings
from collections import deque

import pytest
from amaranth.hdl import Module, Signal, UnusedElaboratable, unsigned
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.sim import Simulator

from bpsa.config import Config
from bpsa.gateware.bus.axi_lite import AxiResp
from bpsa.gateware.bus.dma import (
    ADDR_WIDTH,
    AxiBurst,
    Direction,
    DmaEngine,
    DmaError,
    ElementKind,
    reference,
)

CONFIGS = {
    "default": Config(name="default"),
    "int16_acc40": Config(name="int16_acc40", operand_width=16, acc_width=40, cols=3,
                          feeder_bus_width=4, buf_a_depth=64, buf_b_depth=64, buf_p_depth=64),
    "uint6": Config(name="uint6", operand_width=6, operand_signed=False, acc_width=16,
                    cols=5, buf_a_depth=64, buf_b_depth=64, buf_p_depth=64),
    # wider buses: 128-bit beats (a word of 16 int8 lanes is one beat), 256-bit beats wider
    # than the widest word (int16 x 4 = 64 bits, accumulators 4 x 32)
    "bus128": Config(name="bus128", feeder_bus_width=16, buf_a_depth=64, buf_b_depth=64,
                     buf_p_depth=64, dma_data_width=128),
    "bus256": Config(name="bus256", operand_width=16, feeder_bus_width=4, buf_a_depth=64,
                     buf_b_depth=64, buf_p_depth=64, dma_data_width=256),
}


class ByteMemory:
    """Sparse byte memory with the ``read`` / ``write`` interface of
    ``bpsa.gateware.bus.dma.reference``; bytes never written read as a fixed pseudo-random function of
    their address."""

    def __init__(self, seed):
        self.bytes = {}
        self.seed = seed

    def _fill(self, a):
        return (a * 2654435761 + self.seed * 40503) >> 11 & 0xFF

    def read(self, addr, n):
        return bytes(self.bytes.get(a, self._fill(a)) for a in range(addr, addr + n))

    def write(self, addr, data):
        for i, b in enumerate(data):
            self.bytes[addr + i] = b

    def copy(self):
        other = ByteMemory(self.seed)
        other.bytes = dict(self.bytes)
        return other


class AxiRamModel:
    """An AXI4 slave over a :class:`ByteMemory` for the Amaranth simulator. Ready signals and
    the start of each R / B response are delayed at random (probability ``pause`` per
    cycle); beats touching ``[err_lo, err_hi]`` answer ``err_resp`` (writes there are
    dropped). Checks the master: valid and payload held until the handshake, INCR bursts of
    full beats from aligned addresses within 4 KiB, WLAST on the last beat."""

    AR = ("araddr", "arlen", "arsize", "arburst")
    AW = ("awaddr", "awlen", "awsize", "awburst")
    W = ("wdata", "wstrb", "wlast")

    def __init__(self, axi, memory, rng, pause=0.0, err=None, err_resp=AxiResp.SLVERR):
        self.axi, self.mem, self.rng, self.pause = axi, memory, rng, pause
        self.beat = len(axi.wdata) // 8             # bytes a beat
        self.err, self.err_resp = err, err_resp
        self.handshakes = 0

    def _bad(self, addr):
        return (self.err is not None and self.err[0] <= addr + self.beat - 1
                and addr <= self.err[1])

    def _burst(self, addr, length, size, burst):
        beat = self.beat
        assert 1 << size == beat and burst == AxiBurst.INCR, f"burst size {size} type {burst}"
        assert addr % beat == 0, f"unaligned burst address 0x{addr:x}"
        assert addr // 4096 == (addr + beat * (length + 1) - 1) // 4096, \
            f"burst 0x{addr:x} + {length + 1} beats crosses 4 KiB"
        return [addr + beat * i for i in range(length + 1)]

    async def run(self, ctx):
        axi, rng = self.axi, self.rng
        r_q, b_q, aw_q, w_q = deque(), deque(), deque(), deque()
        r_cur = b_cur = None
        held = {}
        while True:
            ready = {name: rng.random() >= self.pause for name in ("ar", "aw", "w")}
            if r_cur is None and r_q and rng.random() >= self.pause:
                r_cur = r_q.popleft()
            if b_cur is None and b_q and rng.random() >= self.pause:
                b_cur = b_q.popleft()
            for name in ready:
                ctx.set(getattr(axi, f"{name}ready"), ready[name])
            ctx.set(axi.rvalid, r_cur is not None)
            if r_cur is not None:
                ctx.set(axi.rdata, r_cur[0])
                ctx.set(axi.rresp, r_cur[1])
                ctx.set(axi.rlast, r_cur[2])
            ctx.set(axi.bvalid, b_cur is not None)
            if b_cur is not None:
                ctx.set(axi.bresp, b_cur)
            sample = {}
            for ch, fields in (("ar", self.AR), ("aw", self.AW), ("w", self.W)):
                valid = ctx.get(getattr(axi, f"{ch}valid"))
                payload = tuple(ctx.get(getattr(axi, f)) for f in fields)
                if ch in held:
                    assert valid and payload == held[ch], \
                        f"{ch}: valid or payload changed before the handshake"
                sample[ch] = (valid, payload)
            rready, bready = ctx.get(axi.rready), ctx.get(axi.bready)
            await ctx.tick()
            for ch, (valid, payload) in sample.items():
                held.pop(ch, None)
                if valid and not ready[ch]:
                    held[ch] = payload
                elif valid:
                    self.handshakes += 1
                    if ch == "ar":
                        beats = self._burst(*payload)
                        for i, a in enumerate(beats):
                            bad = self._bad(a)
                            data = 0 if bad else int.from_bytes(self.mem.read(a, self.beat),
                                                                "little")
                            r_q.append((data, self.err_resp if bad else AxiResp.OKAY,
                                        i == len(beats) - 1))
                    elif ch == "aw":
                        aw_q.append([deque(self._burst(*payload)), AxiResp.OKAY])
                    else:
                        w_q.append(payload)
            if r_cur is not None and rready:
                r_cur = None
                self.handshakes += 1
            if b_cur is not None and bready:
                b_cur = None
                self.handshakes += 1
            while aw_q and w_q:
                data, strb, last = w_q.popleft()
                burst = aw_q[0]
                a = burst[0].popleft()
                assert last == (not burst[0]), f"wlast {last} with {len(burst[0])} beats left"
                if self._bad(a):
                    burst[1] = self.err_resp
                else:
                    for i in range(self.beat):
                        if strb >> i & 1:
                            self.mem.write(a + i, [data >> (8 * i) & 0xFF])
                if last:
                    aw_q.popleft()
                    b_q.append(burst[1])


class Harness(wiring.Component):
    """The engine with a buffer memory, the command stream and status at the top; with the
    engine's ``read_latency`` above 1, the memory's read data passes through that many more
    registers (free-running: the data does not hold)."""

    def __init__(self, engine):
        self.engine = engine
        self.mem = Memory(shape=unsigned(engine.word_width), depth=engine.depth, init=[])
        super().__init__({})

    def elaborate(self, platform):
        m = Module()
        m.submodules.dma = self.engine
        m.submodules.mem = self.mem
        rp = self.mem.read_port()
        m.d.comb += [rp.addr.eq(self.engine.buf_read.addr), rp.en.eq(self.engine.buf_read.en)]
        data = rp.data
        for i in range(self.engine.read_latency - 1):
            delayed = Signal.like(data, name=f"read_delay{i}")
            m.d.sync += delayed.eq(data)
            data = delayed
        m.d.comb += self.engine.buf_read.data.eq(data)
        wiring.connect(m, self.engine.buf_write, self.mem.write_port())
        return m


def model(engine, cmd, memory, buffer, window=(0, 2 ** ADDR_WIDTH - 1)):
    """``bpsa.gateware.bus.dma.reference`` for ``engine``'s parameters."""
    return reference(engine.config, engine.word_width, engine.depth, cmd, memory, buffer,
                     window)


def random_command(engine, rng, *, max_len=80):
    """A random legal command: direction, kind, alignment, lanes, length and buffer words."""
    kind = rng.choice([k for k, *_, ml in engine.kinds() if ml > 0])
    _, bits, nb, _, max_lanes = engine.kinds()[kind.value]
    lanes = rng.choice([0, 0, rng.randint(1, max_lanes)])
    eff = lanes or max_lanes
    length = rng.randint(1, min(max_len, engine.depth * eff))
    words = -(-length // eff)
    return {
        "direction": rng.choice(list(Direction)),
        "kind": kind,
        "addr": 0x1000_0000 + rng.randrange(0, 3 * 4096, nb),
        "buf_addr": rng.randrange(0, engine.depth - words + 1),
        "length": length,
        "lanes": lanes,
    }


async def issue(ctx, dut, cmd, timeout=20000):
    """Send one command and wait for its done pulse; returns the error."""
    for name, value in cmd.items():
        ctx.set(getattr(dut.cmd.payload, name), value)
    ctx.set(dut.cmd.valid, 1)
    while not ctx.get(dut.cmd.ready):
        await ctx.tick()
    await ctx.tick()
    ctx.set(dut.cmd.valid, 0)
    for _ in range(timeout):
        if ctx.get(dut.done):
            error = DmaError(ctx.get(dut.error))
            await ctx.tick()
            return error
        await ctx.tick()
    raise AssertionError(f"no done for {cmd}")


def run_dma(engine, body, *, pause=0.0, seed=0, err=None, err_resp=AxiResp.SLVERR):
    harness = Harness(engine)
    rng = random.Random(seed)
    memory = ByteMemory(seed)
    ram = AxiRamModel(engine.axi, memory, rng, pause, err, err_resp)

    async def tb(ctx):
        ctx.set(engine.window_lo, 0)
        ctx.set(engine.window_hi, 2 ** ADDR_WIDTH - 1)
        await body(ctx, harness, memory, ram)

    sim = Simulator(harness)
    sim.add_clock(1e-8)
    sim.add_testbench(ram.run, background=True)
    sim.add_testbench(tb)
    sim.run()


def read_buffer(ctx, harness):
    return [ctx.get(harness.mem.data[i]) for i in range(harness.engine.depth)]


@pytest.mark.parametrize("name", sorted(CONFIGS))
@pytest.mark.parametrize("pause", [0.0, 0.5])
@pytest.mark.parametrize("latency", [1, 3, 6])
def test_random_commands(name, pause, latency):
    """Random loads and stores (kinds, alignments, lanes, lengths) leave the buffer and the
    memory exactly as the reference model does; counters add up; with the buffer's read data
    1, 3 or 6 cycles after its read (the accelerator's store path: 5)."""
    engine = DmaEngine(CONFIGS[name], depth=64 if name == "default" else None,
                       read_latency=latency)
    rng = random.Random(7)

    async def body(ctx, harness, memory, ram):
        buf = [rng.getrandbits(engine.word_width) for _ in range(engine.depth)]
        for i, v in enumerate(buf):
            ctx.set(harness.mem.data[i], v)
        nbytes = {Direction.LOAD: 0, Direction.STORE: 0}
        for trial in range(30):
            cmd = random_command(engine, rng)
            model_mem = memory.copy()
            error = await issue(ctx, engine, cmd)
            assert error == DmaError.NONE, f"{cmd}: {error}"
            assert model(engine, cmd, model_mem, buf) == DmaError.NONE
            nbytes[cmd["direction"]] += cmd["length"] * engine.kinds()[cmd["kind"].value][2]
            assert read_buffer(ctx, harness) == buf, f"trial {trial}: buffer differs, {cmd}"
            assert memory.bytes == model_mem.bytes, f"trial {trial}: memory differs, {cmd}"
        assert ctx.get(engine.read_bytes) == nbytes[Direction.LOAD]
        assert ctx.get(engine.write_bytes) == nbytes[Direction.STORE]
        assert ctx.get(engine.busy_cycles) > 0
        ctx.set(engine.clear_counters, 1)
        await ctx.tick()
        ctx.set(engine.clear_counters, 0)
        assert ctx.get(engine.read_bytes) == ctx.get(engine.busy_cycles) == 0

    run_dma(engine, body, pause=pause, seed=hash(name) % 1000)


def test_long_bursts_and_4k():
    """Long commands across 4 KiB boundaries, with ``max_burst`` 16 and 256."""
    cfg = Config(name="default")
    for max_burst in (16, 256):
        engine = DmaEngine(cfg, depth=1024, max_burst=max_burst)

        async def body(ctx, harness, memory, ram):
            buf = [0] * engine.depth
            for cmd in [
                {"direction": Direction.LOAD, "kind": ElementKind.OPERAND, "addr": 0x0FF0 - 3,
                 "buf_addr": 0, "length": 4096 + 40, "lanes": 0},
                {"direction": Direction.STORE, "kind": ElementKind.ACCUMULATOR,
                 "addr": 0x2F00 + 4, "buf_addr": 0, "length": 700, "lanes": 3},
            ]:
                assert await issue(ctx, engine, cmd, timeout=40000) == DmaError.NONE
                expect_mem = memory.copy()
                model(engine, cmd, expect_mem, buf)
                assert memory.bytes == expect_mem.bytes
                assert read_buffer(ctx, harness) == buf

        run_dma(engine, body, pause=0.2, seed=max_burst)


@pytest.mark.parametrize("err_resp", [AxiResp.SLVERR, AxiResp.DECERR])
def test_bus_errors(err_resp):
    """A read beat or write response with an error ends the command with that error (no
    hang); the next command works."""
    engine = DmaEngine(Config(name="default"), depth=64)
    expected = DmaError.SLVERR if err_resp == AxiResp.SLVERR else DmaError.DECERR

    async def body(ctx, harness, memory, ram):
        buf = read_buffer(ctx, harness)
        for direction in Direction:
            cmd = {"direction": direction, "kind": ElementKind.OPERAND, "addr": 0x7F0,
                   "buf_addr": 0, "length": 100, "lanes": 0}
            assert await issue(ctx, engine, cmd) == expected, direction
            good = dict(cmd, addr=0x2000)
            assert await issue(ctx, engine, good) == DmaError.NONE
            expect_mem = memory.copy()
            model(engine, good, expect_mem, buf)
            assert read_buffer(ctx, harness) == buf and memory.bytes == expect_mem.bytes

    run_dma(engine, body, pause=0.3, err=(0x800, 0x80F), err_resp=err_resp)


def test_refused_commands():
    """Commands outside the window, misaligned or overrunning the buffer end at once with
    their error and no bus traffic; length 0 ends without error."""
    engine = DmaEngine(Config(name="default"), depth=64)

    async def body(ctx, harness, memory, ram):
        ctx.set(engine.window_lo, 0x1000)
        ctx.set(engine.window_hi, 0x1FFF)
        base = {"direction": Direction.LOAD, "kind": ElementKind.ACCUMULATOR, "addr": 0x1000,
                "buf_addr": 0, "length": 8, "lanes": 0}
        cases = [
            (dict(addr=0x0FFC), DmaError.WINDOW),
            (dict(addr=0x1FF0, length=5), DmaError.WINDOW),
            (dict(addr=0xFFFF_FFFC, length=2), DmaError.WINDOW),
            (dict(direction=Direction.STORE, addr=0x2000), DmaError.WINDOW),
            (dict(addr=0x1002), DmaError.ALIGN),
            (dict(addr=0x1001, kind=ElementKind.OPERAND, length=0), DmaError.NONE),
            (dict(lanes=5), DmaError.BUFFER),
            (dict(buf_addr=63, length=5), DmaError.BUFFER),
            (dict(buf_addr=62, length=5, lanes=2), DmaError.BUFFER),
            (dict(length=0), DmaError.NONE),
        ]
        for change, error in cases:
            cmd = dict(base, **change)
            assert model(engine, cmd, memory, [0] * 64, (0x1000, 0x1FFF)) == error
            assert await issue(ctx, engine, cmd, timeout=10) == error, change
        assert ram.handshakes == 0
        # In the window, the last word of the buffer and the last bytes of the window.
        cmd = dict(base, addr=0x1FE0, buf_addr=60, length=8, lanes=2)
        assert await issue(ctx, engine, cmd) == DmaError.NONE

    run_dma(engine, body)


def test_params():
    """Constructor checks name the parameter; defaults."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnusedElaboratable)
        with pytest.raises(ValueError, match="max_burst"):
            DmaEngine(Config(), max_burst=12)
        with pytest.raises(ValueError, match="depth"):
            DmaEngine(Config(), depth=100)
        with pytest.raises(ValueError, match="word_width"):
            DmaEngine(Config(), word_width=4)
        with pytest.raises(ValueError, match=r"read_latency must be an integer in \[1, 8\], not 0"):
            DmaEngine(Config(), read_latency=0)
        with pytest.raises(TypeError, match="config"):
            DmaEngine(None)
        assert DmaEngine(Config()).word_width == 128
        assert DmaEngine(Config()).depth == 1024
        assert DmaEngine(Config(), word_width=16).kinds()[1][4] == 0
        gc.collect()


@pytest.mark.cocotb
# int16_acc40 in make test-long: the 64-bit DMA's Verilog runs inside the accelerator's native
# tests in make test; the 256-bit bus is in no accelerator there
@pytest.mark.parametrize("name", [pytest.param("int16_acc40", marks=pytest.mark.long), "bus256"])
def test_dma_verilator(name):
    """The generated Verilog under Verilator against cocotbext-axi's AxiRam with random
    back-pressure on every channel."""
    from bpsa.sim.runner import run_cocotb
    tests, failures = run_cocotb(CONFIGS[name], "bpsa.sim.testbenches.tb_dma", top="dma")
    assert tests >= 3 and failures == 0


@pytest.mark.parametrize("direction", list(Direction))
@pytest.mark.parametrize("latency", [1, 3, 6])
def test_throughput(direction, latency):
    """Without back-pressure, beat-aligned commands move a beat per cycle when a word holds a
    beat's elements; any command moves at least one element per cycle; a buffer read latency
    of 3 cycles adds only its latency."""
    engine = DmaEngine(Config(name="default"), depth=1024, read_latency=latency)
    cases = [   # (kind, addr, length, lanes, most cycles)
        (ElementKind.OPERAND, 0x1000, 2000, 0, 2000 // 8 + 8),
        (ElementKind.ACCUMULATOR, 0x1000, 1000, 0, 1000 // 2 + 8),
        (ElementKind.OPERAND, 0x1003, 1000, 3, 1000 + 8),
        (ElementKind.ACCUMULATOR, 0x1004, 900, 1, 900 + 8),
    ]

    async def body(ctx, harness, memory, ram):
        for kind, addr, length, lanes, most in cases:
            ctx.set(engine.clear_counters, 1)
            await ctx.tick()
            ctx.set(engine.clear_counters, 0)
            cmd = {"direction": direction, "kind": kind, "addr": addr, "buf_addr": 0,
                   "length": length, "lanes": lanes}
            assert await issue(ctx, engine, cmd) == DmaError.NONE
            cycles = ctx.get(engine.busy_cycles)
            assert cycles <= most + latency - 1, f"{cmd}: {cycles} cycles"

    run_dma(engine, body)


@pytest.mark.parametrize("direction", list(Direction))
def test_wide_bus_throughput(direction):
    """A 128-bit bus moves 16 bytes a cycle when a word holds a beat (bus128: words of 16
    int8 operands or 4 int32 accumulators): twice the 64-bit bus's rate."""
    engine = DmaEngine(CONFIGS["bus128"], depth=1024)
    assert engine.word_width == 128 and len(engine.axi.wdata) == 128

    async def body(ctx, harness, memory, ram):
        for kind, length, most in ((ElementKind.OPERAND, 2000, 2000 // 16 + 8),
                                   (ElementKind.ACCUMULATOR, 1000, 1000 // 4 + 8)):
            ctx.set(engine.clear_counters, 1)
            await ctx.tick()
            ctx.set(engine.clear_counters, 0)
            cmd = {"direction": direction, "kind": kind, "addr": 0x1000, "buf_addr": 0,
                   "length": length, "lanes": 0}
            assert await issue(ctx, engine, cmd) == DmaError.NONE
            cycles = ctx.get(engine.busy_cycles)
            assert cycles <= most, f"{cmd}: {cycles} cycles"

    run_dma(engine, body)
