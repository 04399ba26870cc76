"""cocotb testbench of the AXI4-Lite register file (generated Verilog under Verilator), driven by
cocotbext-axi's ``AxiLiteMaster`` with random pauses on every channel.

Checks every register's reset value, write / read-back of the read-write registers (field
widths), read-only registers ignoring writes, SLVERR on unmapped addresses (the descriptor
registers of map versions 1 and 2 among them), byte strobes, the START / CLEAR pulses (with
PROG_ADDR as ``start`` sees it), STATUS (busy, sticky done, error code) and the
64-bit counters read as consistent halves. Expectations come from ``bpsa.gateware.bus.axi_lite``'s
table.

cocotbext-axi 0.1.28 under cocotb 2: it works unchanged. Amaranth joins interface members with
``__``, so the bus is found with ``AxiLiteBus.from_prefix(dut, "axil", bus_separator="__")``.
Its stream and reset helpers call ``setimmediatevalue``, which cocotb 2 deprecates; the
resulting ``DeprecationWarning`` is filtered for the ``cocotbext.axi`` modules only (below).
"""

import os
import random
import warnings

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ReadOnly, RisingEdge

warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"cocotbext\.axi(\..*)?")

from cocotbext.axi import AxiLiteBus, AxiLiteMaster, AxiResp  # noqa: E402

from bpsa.config import Config  # noqa: E402
from bpsa.spec.regmap import (  # noqa: E402
    COUNTERS,
    REGISTER_MAP,
    REGISTERS,
    STATUS_FIELDS,
    config_words,
    register_map,
)
from bpsa.sim.runner import load_config_json  # noqa: E402

#: Addresses of no register: 0x040, 0x060 and 0x098 held the descriptor before map version 3.
UNMAPPED = (0x014, 0x01C, 0x038, 0x03C, 0x040, 0x060, 0x098, 0x0FC, 0x188, 0x7F0, 0xFFC)


def _config():
    return Config.from_dict(load_config_json())


class Harness:
    """Clock, reset, the bus master, and monitors of the ``start`` / ``clear`` pulses."""

    def __init__(self, dut, pauses):
        self.dut = dut
        self.cfg = _config()
        self.starts = []     # PROG_ADDR at each start pulse
        self.counters = [0] * len(COUNTERS)     # what the counter port answers
        self.clears = 0
        self.rng = random.Random(int(os.environ.get("BPSA_SEED", "1")))
        cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
        self.axil = AxiLiteMaster(AxiLiteBus.from_prefix(dut, "axil", bus_separator="__"),
                                  dut.clk, dut.rst)
        if pauses:
            for ch in (self.axil.write_if.aw_channel, self.axil.write_if.w_channel,
                       self.axil.write_if.b_channel, self.axil.read_if.ar_channel,
                       self.axil.read_if.r_channel):
                ch.set_pause_generator(self._pauses())

    def _pauses(self):
        rng = random.Random(self.rng.random())
        while True:
            yield rng.random() < 0.4

    async def reset(self):
        dut = self.dut
        dut.rst.value = 1
        dut.busy.value = 0
        dut.done.value = 0
        dut.error.value = 0
        dut.counter__valid.value = 0
        dut.counter__value.value = 0
        for _ in range(3):
            await RisingEdge(dut.clk)
        dut.rst.value = 0
        await RisingEdge(dut.clk)
        cocotb.start_soon(self._monitor())
        cocotb.start_soon(self._counter_port())

    async def _counter_port(self):
        """The counter port's other side: each request answered 1-5 cycles later with the
        counter's value in ``self.counters`` at that time."""
        dut = self.dut
        rng = random.Random(self.rng.random())
        while True:
            await RisingEdge(dut.clk)
            await ReadOnly()
            if int(dut.counter__req.value):
                index = int(dut.counter__index.value)
                for _ in range(1 + rng.randrange(5)):
                    await RisingEdge(dut.clk)
                dut.counter__value.value = self.counters[index]
                dut.counter__valid.value = 1
                await RisingEdge(dut.clk)
                dut.counter__valid.value = 0

    async def _monitor(self):
        dut = self.dut
        while True:
            await RisingEdge(dut.clk)
            await ReadOnly()
            if int(dut.start.value):
                self.starts.append(int(dut.prog_addr.value))
            if int(dut.clear.value):
                self.clears += 1

    async def read(self, offset):
        resp = await self.axil.read(offset, 4)
        return int.from_bytes(resp.data, "little"), resp.resp

    async def read_ok(self, offset):
        value, resp = await self.read(offset)
        assert resp == AxiResp.OKAY, f"read of 0x{offset:03x}: {resp!r}"
        return value

    async def write(self, offset, value, nbytes=4):
        resp = await self.axil.write(offset, value.to_bytes(nbytes, "little"))
        return resp.resp

    async def cycles(self, n):
        for _ in range(n):
            await RisingEdge(self.dut.clk)

    async def done(self, error):
        """Drive ``done`` with ``error`` for one cycle."""
        await RisingEdge(self.dut.clk)
        self.dut.done.value = 1
        self.dut.error.value = error
        await RisingEdge(self.dut.clk)
        self.dut.done.value = 0
        self.dut.error.value = 0


def _rw_masks(cfg):
    """Read-write register name -> mask of the bits it keeps."""
    regs = register_map(cfg)["registers"]
    return {r.name: (1 << regs[r.name]["bits"]) - 1 for r in REGISTERS if r.access == "rw"}


def _expected_reset(cfg):
    consts = config_words(cfg)
    return {r.name: consts.get(r.name, r.reset) for r in REGISTERS
            if r.kind not in ("counter_lo", "counter_hi")}


@cocotb.test()
@cocotb.parametrize(pauses=[False, True])
async def reset_values_and_unmapped(dut, pauses):
    """Every register reads its table reset value with OKAY; unmapped addresses read 0 with
    SLVERR and writes to them answer SLVERR."""
    h = Harness(dut, pauses)
    await h.reset()
    for name, value in _expected_reset(h.cfg).items():
        got = await h.read_ok(REGISTER_MAP[name])
        assert got == value, f"{name}: reset value 0x{got:08x}, expected 0x{value:08x}"
    for r in REGISTERS:
        if r.kind in ("counter_lo", "counter_hi"):
            assert await h.read_ok(r.offset) == 0, r.name
    for off in UNMAPPED:
        value, resp = await h.read(off)
        assert (value, resp) == (0, AxiResp.SLVERR), f"unmapped 0x{off:03x}: {value}, {resp!r}"
        assert await h.write(off, 0xFFFFFFFF) == AxiResp.SLVERR
    # A half-word read at byte 2 sees the upper half of the word that holds it.
    resp = await h.axil.read(REGISTER_MAP["ID"] + 2, 2)
    assert resp.data == (config_words(h.cfg)["ID"] >> 16).to_bytes(2, "little")


@cocotb.test()
@cocotb.parametrize(pauses=[False, True])
async def write_read_back(dut, pauses):
    """Read-write registers keep exactly their field's bits; read-only registers ignore writes
    (OKAY); CONTROL reads 0."""
    h = Harness(dut, pauses)
    await h.reset()
    masks = _rw_masks(h.cfg)
    expect = _expected_reset(h.cfg)
    for trial in range(3):
        for r in REGISTERS:
            value = h.rng.getrandbits(32)
            if trial == 1:
                value = 0xFFFFFFFF
            assert await h.write(r.offset, value) == AxiResp.OKAY, r.name
            if r.access == "rw":
                expect[r.name] = value & masks[r.name]
            if r.kind == "control":
                await h.write(r.offset, 2)         # CLEAR: undo a possible START
        for r in REGISTERS:
            if r.kind in ("counter_lo", "counter_hi"):
                assert await h.read_ok(r.offset) == 0, r.name
            else:
                got = await h.read_ok(r.offset)
                assert got == expect[r.name], \
                    f"trial {trial}, {r.name}: read 0x{got:08x}, expected 0x{expect[r.name]:08x}"
        assert int(dut.window_lo.value) == expect["WINDOW_LO"]
        assert int(dut.window_hi.value) == expect["WINDOW_HI"]


@cocotb.test()
@cocotb.parametrize(pauses=[False, True])
async def byte_strobes(dut, pauses):
    """Byte and half-word writes change only the enabled lanes."""
    h = Harness(dut, pauses)
    await h.reset()
    masks = _rw_masks(h.cfg)
    for r in [r for r in REGISTERS if r.access == "rw"]:
        mask = masks[r.name]
        value = h.rng.getrandbits(32) & mask
        await h.write(r.offset, value)
        for nbytes, lane in [(1, 0), (1, 1), (1, 2), (1, 3), (2, 0), (2, 2)]:
            part = h.rng.getrandbits(8 * nbytes)
            assert await h.write(r.offset + lane, part, nbytes) == AxiResp.OKAY
            lanes_mask = ((1 << (8 * nbytes)) - 1) << (8 * lane)
            value = ((value & ~lanes_mask) | (part << (8 * lane))) & mask
            got = await h.read_ok(r.offset)
            assert got == value, f"{r.name} after {nbytes} byte(s) at lane {lane}: " \
                                 f"0x{got:08x}, expected 0x{value:08x}"


@cocotb.test()
@cocotb.parametrize(pauses=[False, True])
async def start_clear_status(dut, pauses):
    """START pulses once with PROG_ADDR already written; START while busy is ignored; done
    with an error code sets the sticky DONE and ERROR; CLEAR and START clear them."""
    h = Harness(dut, pauses)
    await h.reset()
    status = REGISTER_MAP["STATUS"]
    done_bit = 1 << STATUS_FIELDS["DONE"][0]
    err_lsb = STATUS_FIELDS["ERROR"][0]
    first = h.rng.getrandbits(32) & ~7
    await h.write(REGISTER_MAP["PROG_ADDR"], first)
    await h.write(REGISTER_MAP["PROG_WORDS"], h.rng.getrandbits(12))
    assert await h.write(REGISTER_MAP["CONTROL"], 1) == AxiResp.OKAY
    await h.cycles(3)
    assert h.starts == [first], f"start pulses with PROG_ADDR {h.starts}"
    # The controller runs: START is ignored; the host may write the next program's address.
    dut.busy.value = 1
    await h.cycles(1)
    assert await h.read_ok(status) & 1 == 1
    staged = h.rng.getrandbits(32) & ~7
    await h.write(REGISTER_MAP["PROG_ADDR"], staged)
    await h.write(REGISTER_MAP["CONTROL"], 1)
    await h.cycles(3)
    assert h.starts == [first], "START while busy must be ignored"
    # Done with an error code.
    dut.busy.value = 0
    await h.done(0x5A)
    assert await h.read_ok(status) == done_bit | 0x5A << err_lsb
    await h.cycles(5)
    assert await h.read_ok(status) == done_bit | 0x5A << err_lsb, "DONE and ERROR are sticky"
    # CLEAR pulses once and clears DONE / ERROR.
    await h.write(REGISTER_MAP["CONTROL"], 2)
    await h.cycles(2)
    assert h.clears == 1
    assert await h.read_ok(status) == 0
    # START with the staged program, done without error, START again clears DONE.
    await h.done(0x33)
    assert await h.read_ok(status) == done_bit | 0x33 << err_lsb
    await h.write(REGISTER_MAP["CONTROL"], 1)
    await h.cycles(2)
    assert h.starts == [first, staged]
    assert await h.read_ok(status) == 0
    await h.done(0)
    assert await h.read_ok(status) == done_bit
    # A START bit in a disabled byte lane does nothing; other lanes do not start.
    await h.write(REGISTER_MAP["CONTROL"] + 1, 0xFF, 1)
    await h.cycles(3)
    assert len(h.starts) == 2 and h.clears == 1


@cocotb.test()
@cocotb.parametrize(pauses=[False, True])
async def counters_read_in_halves(dut, pauses):
    """Counters read as LO then HI give one consistent 64-bit sample even when the counter
    changes in between; HI alone asks the counter port for a new sample."""
    h = Harness(dut, pauses)
    await h.reset()
    width = 64
    for trial in range(3):
        values = [h.rng.getrandbits(width) for _ in COUNTERS]
        h.counters[:] = values
        for i, (name, _) in enumerate(COUNTERS):
            lo = await h.read_ok(REGISTER_MAP[f"{name.upper()}_LO"])
            changed = h.rng.getrandbits(width)
            h.counters[i] = changed
            hi = await h.read_ok(REGISTER_MAP[f"{name.upper()}_HI"])
            assert lo | hi << 32 == values[i], f"{name}: 0x{hi:08x}{lo:08x}, " \
                                               f"expected 0x{values[i]:016x}"
            # Without a preceding LO read, HI asks for a new sample.
            assert await h.read_ok(REGISTER_MAP[f"{name.upper()}_HI"]) == changed >> 32
            h.counters[i] = values[i]


@cocotb.test()
async def concurrent_traffic(dut):
    """Several tasks, each owning some read-write registers, write and read them at once
    through the master's queues (random pauses on every channel): every read returns the
    last value its task wrote."""
    h = Harness(dut, True)
    await h.reset()
    masks = _rw_masks(h.cfg)
    rw = [r for r in REGISTERS if r.access == "rw"]

    async def worker(regs, seed):
        rng = random.Random(seed)
        model = {r.name: r.reset for r in regs}
        for _ in range(40):
            r = rng.choice(regs)
            if rng.random() < 0.5:
                value = rng.getrandbits(32)
                assert await h.write(r.offset, value) == AxiResp.OKAY
                model[r.name] = value & masks[r.name]
            else:
                assert await h.read_ok(r.offset) == model[r.name], r.name

    tasks = [cocotb.start_soon(worker(rw[i::4], i)) for i in range(4)]
    for t in tasks:
        await t
