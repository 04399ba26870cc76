"""cocotb testbench of the DMA engine (generated Verilog under Verilator) against cocotbext-axi's
``AxiRam``, with random pauses on all five AXI channels, and a Python model of the buffer
memory on the engine's read / write ports.

Random loads and stores (both element kinds, random alignments, lanes and lengths, long ones
across 4 KiB boundaries) are checked bit-exactly against ``bpsa.gateware.bus.dma.reference`` on both the
RAM and the buffer; commands outside the window, misaligned or overrunning the buffer end with
their error and no bus traffic; SLVERR read beats and write responses (injected into the RAM
model) end the command with SLVERR and no hang; counters add up.

cocotbext-axi 0.1.28 under cocotb 2 works unchanged: the bus is found with
``AxiBus.from_prefix(dut, "axi", bus_separator="__")``; the ``DeprecationWarning`` of its
``setimmediatevalue`` calls is filtered for the ``cocotbext.axi`` modules only (below).
"""

import os
import random
import warnings

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge, ReadOnly, RisingEdge

warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"cocotbext\.axi(\..*)?")

from cocotbext.axi import AxiBus, AxiRam  # noqa: E402

from bpsa.config import Config  # noqa: E402
from bpsa.gateware.bus.dma import (  # noqa: E402
    Direction,
    DmaError,
    ElementKind,
    command_layout,
    default_geometry,
    element_kinds,
    reference,
)
from bpsa.sim.runner import load_config_json  # noqa: E402

RAM_SIZE = 1 << 20
TIMEOUT_CYCLES = 200_000


class Harness:
    """Clock, reset, the AXI RAM, the buffer model, the command driver and the done monitor."""

    def __init__(self, dut, *, pauses, seed=1):
        self.dut = dut
        self.cfg = Config.from_dict(load_config_json())
        self.word_width, self.depth = default_geometry(self.cfg)
        self.kinds = element_kinds(self.cfg, self.word_width)
        self.layout = command_layout(word_width=self.word_width, depth=self.depth,
                                     operand_width=self.cfg.operand_width)
        self.rng = random.Random(int(os.environ.get("BPSA_SEED", "1")) * 1000 + seed)
        self.buffer = [self.rng.getrandbits(self.word_width) for _ in range(self.depth)]
        self.window = (0, RAM_SIZE - 1)
        self.dones = []
        self.bus_beats = 0
        cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
        self.ram = AxiRam(AxiBus.from_prefix(dut, "axi", bus_separator="__"), dut.clk, dut.rst,
                          size=RAM_SIZE)
        self.ram.write(0, bytes(self.rng.getrandbits(8) for _ in range(RAM_SIZE)))
        if pauses:
            w, r = self.ram.write_if, self.ram.read_if
            for i, ch in enumerate((w.aw_channel, w.w_channel, w.b_channel, r.ar_channel,
                                    r.r_channel)):
                ch.set_pause_generator(self._pauses(i))

    def _pauses(self, i):
        rng = random.Random(self.rng.random() + i)
        while True:
            if rng.random() < 0.1:
                for _ in range(rng.randint(5, 30)):       # an occasional long stall
                    yield True
            yield rng.random() < 0.4

    def inject_errors(self, lo, hi):
        """Reads and writes of the RAM model touching ``[lo, hi]`` answer SLVERR."""
        read, write = self.ram.read_if._read, self.ram.write_if._write

        async def faulty_read(address, length):
            if address <= hi and address + length > lo:
                raise OSError("injected read error")
            return await read(address, length)

        async def faulty_write(address, data):
            if address <= hi and address + len(data) > lo:
                raise OSError("injected write error")
            await write(address, data)

        self.ram.read_if._read = faulty_read
        self.ram.write_if._write = faulty_write

    async def reset(self):
        dut = self.dut
        dut.rst.value = 1
        dut.cmd__valid.value = 0
        dut.cmd__payload.value = 0
        dut.clear_counters.value = 0
        dut.window_lo.value = self.window[0]
        dut.window_hi.value = self.window[1]
        dut.buf_read__data.value = 0
        dut.buf_read_ready.value = 1
        for _ in range(3):
            await RisingEdge(dut.clk)
        dut.rst.value = 0
        cocotb.start_soon(self._buffer_model())
        cocotb.start_soon(self._monitor())
        await RisingEdge(dut.clk)

    async def _buffer_model(self):
        """A synchronous memory on the buffer ports: write on the edge, read data after it."""
        dut = self.dut
        while True:
            await FallingEdge(dut.clk)
            ren, raddr = int(dut.buf_read__en.value), int(dut.buf_read__addr.value)
            wen = int(dut.buf_write__en.value)
            waddr, wdata = int(dut.buf_write__addr.value), int(dut.buf_write__data.value)
            await RisingEdge(dut.clk)
            if wen:
                self.buffer[waddr] = wdata
            if ren:
                dut.buf_read__data.value = self.buffer[raddr]

    async def _monitor(self):
        dut = self.dut
        names = [f"axi__{c}valid" for c in ("aw", "w", "b", "ar", "r")]
        while True:
            await RisingEdge(dut.clk)
            await ReadOnly()
            if int(dut.done.value):
                self.dones.append(DmaError(int(dut.error.value)))
            for name in names:
                ready = getattr(dut, name.replace("valid", "ready"))
                if int(getattr(dut, name).value) and int(ready.value):
                    self.bus_beats += 1

    def pack(self, cmd):
        raw = 0
        for name, value in cmd.items():
            field = self.layout[name]
            raw |= int(getattr(value, "value", value)) << field.offset
        return raw

    async def issue(self, cmd):
        """Send one command, wait for its done pulse, return its error."""
        dut = self.dut
        count = len(self.dones)
        dut.cmd__payload.value = self.pack(cmd)
        dut.cmd__valid.value = 1
        while True:
            await ReadOnly()                  # ready before the edge decides the handshake
            ready = int(dut.cmd__ready.value)
            await RisingEdge(dut.clk)
            if ready:
                break
        dut.cmd__valid.value = 0
        for _ in range(TIMEOUT_CYCLES):
            if len(self.dones) > count:
                assert len(self.dones) == count + 1, "more than one done pulse"
                return self.dones[-1]
            await RisingEdge(dut.clk)
        raise AssertionError(f"no done after {TIMEOUT_CYCLES} cycles for {cmd}")

    def model(self, cmd, buffer=None):
        return reference(self.cfg, self.word_width, self.depth, cmd, self.ram,
                         self.buffer if buffer is None else buffer, self.window)

    def random_command(self, max_len):
        rng = self.rng
        kind = rng.choice([k for k, *_, ml in self.kinds if ml > 0])
        _, _, nb, _, max_lanes = self.kinds[kind.value]
        lanes = rng.choice([0, rng.randint(1, max_lanes)])
        length = rng.randint(1, max_len)
        words = -(-length // (lanes or max_lanes))
        if words > self.depth:
            length = self.depth * (lanes or max_lanes)
            words = self.depth
        return {
            "direction": rng.choice(list(Direction)),
            "kind": kind,
            "addr": rng.randrange(0, RAM_SIZE - length * nb, nb),
            "buf_addr": rng.randrange(0, self.depth - words + 1),
            "length": length,
            "lanes": lanes,
        }

    async def run_checked(self, cmd):
        """Run ``cmd`` on the hardware and the model; compare RAM and buffer bit-exactly."""
        nb = self.kinds[ElementKind(cmd["kind"]).value][2]
        lo, hi = cmd["addr"] - 16, cmd["addr"] + cmd["length"] * nb + 16
        lo = max(lo, 0)
        before = bytearray(self.ram.read(lo, hi - lo))
        expected_buf = list(self.buffer)

        class Shadow:          # the model's memory: a copy of the RAM around the command
            def read(_, addr, n):
                return bytes(before[addr - lo:addr - lo + n])

            def write(_, addr, data):
                before[addr - lo:addr - lo + len(data)] = data

        ref_error = reference(self.cfg, self.word_width, self.depth, cmd, Shadow(),
                              expected_buf, self.window)
        error = await self.issue(cmd)
        assert error == ref_error == DmaError.NONE, f"{cmd}: {error}, model {ref_error}"
        assert self.ram.read(lo, hi - lo) == bytes(before), f"RAM differs after {cmd}"
        bad = [i for i, (a, b) in enumerate(zip(self.buffer, expected_buf)) if a != b]
        assert not bad, f"buffer words {bad[:8]} differ after {cmd}"
        return nb * cmd["length"]


@cocotb.test()
@cocotb.parametrize(pauses=[False, True])
async def random_commands(dut, pauses):
    """Random loads and stores, bit-exact against the reference model; counters add up."""
    h = Harness(dut, pauses=pauses, seed=int(pauses))
    await h.reset()
    moved = {Direction.LOAD: 0, Direction.STORE: 0}
    for _ in range(80):
        cmd = h.random_command(max_len=200)
        moved[cmd["direction"]] += await h.run_checked(cmd)
    await RisingEdge(dut.clk)
    assert int(dut.read_bytes.value) == moved[Direction.LOAD]
    assert int(dut.write_bytes.value) == moved[Direction.STORE]
    busy = int(dut.busy_cycles.value)
    assert busy >= sum(moved.values()) // 8, busy
    dut.clear_counters.value = 1
    await RisingEdge(dut.clk)
    dut.clear_counters.value = 0
    await RisingEdge(dut.clk)
    assert int(dut.read_bytes.value) == int(dut.write_bytes.value) == 0


@cocotb.test()
async def long_commands(dut):
    """Long commands (many bursts, 4 KiB boundaries; the RAM model asserts the rule) with
    random pauses."""
    h = Harness(dut, pauses=True, seed=2)
    await h.reset()
    for direction in Direction:
        for kind, _, nb, _, lanes in h.kinds:
            if lanes == 0:
                continue
            length = min(h.depth * lanes, 6000 // nb)
            addr = 4096 * h.rng.randint(1, 8) - nb * h.rng.randint(1, 5)
            cmd = {"direction": direction, "kind": kind, "addr": addr, "buf_addr": 0,
                   "length": length, "lanes": 0}
            await h.run_checked(cmd)


@cocotb.test()
async def refused_and_bus_errors(dut):
    """Out-of-window, misaligned and buffer-overrunning commands end with their error and no
    bus traffic; SLVERR read beats and write responses end the command with SLVERR; the
    engine stays correct afterwards."""
    h = Harness(dut, pauses=True, seed=3)
    h.window = (0x1000, 0x7FFFF)
    await h.reset()
    kind, _, nb, _, lanes = h.kinds[1] if h.kinds[1][4] else h.kinds[0]
    base = {"direction": Direction.LOAD, "kind": kind, "addr": 0x2000, "buf_addr": 0,
            "length": 10, "lanes": 0}
    cases = [
        dict(addr=0x1000 - nb),
        dict(addr=0x80000 - 4 * nb, length=5),
        dict(direction=Direction.STORE, addr=0x90000),
        dict(direction=Direction.STORE, addr=0x1000 - nb, length=1),
        dict(addr=0x2001) if nb > 1 else dict(addr=0x0),
        dict(lanes=lanes + 1) if lanes + 1 < 2 ** h.layout["lanes"].shape.width
        else dict(addr=0),
        dict(buf_addr=h.depth - 1, length=lanes + 1),
    ]
    for change in cases:
        cmd = dict(base, **change)
        expected = h.model(cmd, list(h.buffer))
        assert expected != DmaError.NONE, change
        beats = h.bus_beats
        assert await h.issue(cmd) == expected, change
        assert h.bus_beats == beats, f"{change}: bus traffic on a refused command"
    h.inject_errors(0x3000, 0x3007)
    for direction in Direction:
        cmd = dict(base, direction=direction, addr=0x3000 - 16 * nb, length=64)
        assert await h.issue(cmd) == DmaError.SLVERR, direction
        await h.run_checked(dict(base, direction=direction))
    # The window's last byte is reachable.
    await h.run_checked(dict(base, addr=0x80000 - 4 * nb, length=4))
