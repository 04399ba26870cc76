"""cocotb testbench of the on-chip SRAM (``bpsa.gateware.bus.axi_sram.AxiSram``, generated Verilog under
Verilator): cocotbext-axi's ``AxiMaster`` with random pauses on every channel and a word-port
driver, both checked against a ``bytearray`` model.

* random INCR bursts of random (unaligned) addresses and lengths, which ``AxiMaster`` turns
  into partial first / last beats with ``wstrb``; narrow (1, 2, 4 byte) and FIXED bursts;
  read back through AXI and through the word port;
* the word port writing and reading its own region while AXI traffic runs on another region
  (the port has priority; neither side may lose or corrupt data);
* beats outside the memory answered DECERR (reads return zeros), WRAP bursts SLVERR.
"""

import os
import random
import warnings

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ReadOnly, RisingEdge

warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"cocotbext\.axi(\..*)?")

from cocotbext.axi import AxiBurstType, AxiBus, AxiMaster, AxiResp  # noqa: E402

from bpsa.platform.board_tops import SIM_SRAM_BYTES  # noqa: E402

SIZE = SIM_SRAM_BYTES


class Harness:
    def __init__(self, dut, seed):
        self.dut = dut
        self.rng = random.Random(int(os.environ.get("BPSA_SEED", "1")) * 100 + seed)
        self.model = bytearray(SIZE)
        cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
        self.axi = AxiMaster(AxiBus.from_prefix(dut, "axi", bus_separator="__"), dut.clk,
                             dut.rst)
        for i, ch in enumerate((self.axi.write_if.aw_channel, self.axi.write_if.w_channel,
                                self.axi.write_if.b_channel, self.axi.read_if.ar_channel,
                                self.axi.read_if.r_channel)):
            ch.set_pause_generator(self._pauses(i))
        for name in ("valid", "we", "addr", "wdata", "wstrb"):
            getattr(dut, f"port__{name}").value = 0

    def _pauses(self, i):
        rng = random.Random(self.rng.random() + i)
        while True:
            yield rng.random() < 0.3

    async def reset(self):
        self.dut.rst.value = 1
        for _ in range(3):
            await RisingEdge(self.dut.clk)
        self.dut.rst.value = 0
        await RisingEdge(self.dut.clk)
        # Start from known contents: write the model's zeros through AXI.
        resp = await self.axi.write(0, bytes(SIZE))
        assert resp.resp == AxiResp.OKAY

    async def port_access(self, word, *, wdata=None, wstrb=0xFF):
        """One word-port request; returns the read data (for a read)."""
        dut = self.dut
        dut.port__addr.value = word
        dut.port__we.value = wdata is not None
        dut.port__wdata.value = wdata or 0
        dut.port__wstrb.value = wstrb
        dut.port__valid.value = 1
        while True:
            await ReadOnly()
            ready = int(dut.port__ready.value)
            await RisingEdge(dut.clk)
            if ready:
                break
        dut.port__valid.value = 0
        if wdata is not None:
            return None
        await ReadOnly()
        assert int(dut.port__rvalid.value) == 1, "rvalid not the cycle after the read request"
        data = int(dut.port__rdata.value)
        await RisingEdge(dut.clk)
        return data

    def model_write_word(self, word, data, strb):
        for b in range(8):
            if strb >> b & 1:
                self.model[8 * word + b] = data >> (8 * b) & 0xFF

    def model_word(self, word):
        return int.from_bytes(self.model[8 * word:8 * word + 8], "little")


@cocotb.test()
async def test_bursts_with_strobes(dut):
    """Random INCR bursts at unaligned addresses (partial beats via wstrb), read back."""
    h = Harness(dut, 1)
    await h.reset()
    rng = h.rng
    for _ in range(60):
        addr = rng.randrange(SIZE - 1)
        n = rng.randint(1, min(SIZE - addr, 300))
        data = bytes(rng.getrandbits(8) for _ in range(n))
        resp = await h.axi.write(addr, data)
        assert resp.resp == AxiResp.OKAY
        h.model[addr:addr + n] = data
        if rng.random() < 0.5:
            a = rng.randrange(SIZE - 1)
            m = rng.randint(1, min(SIZE - a, 300))
            r = await h.axi.read(a, m)
            assert r.resp == AxiResp.OKAY and r.data == bytes(h.model[a:a + m]), (a, m)
    r = await h.axi.read(0, SIZE)
    assert r.data == bytes(h.model)


@cocotb.test()
async def test_narrow_and_fixed(dut):
    """Narrow beats (1, 2, 4 bytes per beat) and FIXED bursts."""
    h = Harness(dut, 2)
    await h.reset()
    rng = h.rng
    for size in (0, 1, 2):
        for _ in range(10):
            nb = 1 << size
            addr = rng.randrange(0, SIZE - 64, nb)
            n = nb * rng.randint(1, 16)
            data = bytes(rng.getrandbits(8) for _ in range(n))
            resp = await h.axi.write(addr, data, size=size)
            assert resp.resp == AxiResp.OKAY
            h.model[addr:addr + n] = data
            r = await h.axi.read(addr, n, size=size)
            assert r.data == data, (size, addr, n)
    # FIXED: every beat goes to the same word; the last one stays.
    beats = [bytes(rng.getrandbits(8) for _ in range(8)) for _ in range(4)]
    resp = await h.axi.write(0x100, b"".join(beats), burst=AxiBurstType.FIXED)
    assert resp.resp == AxiResp.OKAY
    h.model[0x100:0x108] = beats[-1]
    r = await h.axi.read(0x100, 32, burst=AxiBurstType.FIXED)
    assert r.data == beats[-1] * 4
    r = await h.axi.read(0, SIZE)
    assert r.data == bytes(h.model)


@cocotb.test()
async def test_errors(dut):
    """Beats past the end: DECERR, reads zero, writes dropped; WRAP: SLVERR, no effect."""
    h = Harness(dut, 3)
    await h.reset()
    data = bytes(range(1, 33))
    # The burst straddles the end: the first two beats are inside, the rest outside.
    resp = await h.axi.write(SIZE - 16, data)
    assert resp.resp == AxiResp.DECERR
    h.model[SIZE - 16:SIZE] = data[:16]
    r = await h.axi.read(SIZE - 16, 32)
    assert r.resp == AxiResp.DECERR
    assert r.data == data[:16] + bytes(16)
    r = await h.axi.read(SIZE * 4 + 8, 8)
    assert r.resp == AxiResp.DECERR and r.data == bytes(8)
    resp = await h.axi.write(0x200, bytes(range(32)), burst=AxiBurstType.WRAP)
    assert resp.resp == AxiResp.SLVERR
    r = await h.axi.read(0x200, 32, burst=AxiBurstType.WRAP)
    assert r.resp == AxiResp.SLVERR
    r = await h.axi.read(0, SIZE)
    assert r.resp == AxiResp.OKAY and r.data == bytes(h.model)


@cocotb.test()
async def test_port_with_axi_traffic(dut):
    """The word port works its region (first quarter) while AXI bursts run on the rest; then
    each side reads the other's data."""
    h = Harness(dut, 4)
    await h.reset()
    rng = h.rng
    port_words = SIZE // 8 // 4

    async def axi_traffic():
        for _ in range(40):
            addr = rng.randrange(SIZE // 4, SIZE - 1)
            n = rng.randint(1, min(SIZE - addr, 256))
            data = bytes(rng.getrandbits(8) for _ in range(n))
            assert (await h.axi.write(addr, data)).resp == AxiResp.OKAY
            h.model[addr:addr + n] = data
            r = await h.axi.read(addr, n)
            assert r.data == data

    task = cocotb.start_soon(axi_traffic())
    prng = random.Random(rng.random())
    while not task.done():
        word = prng.randrange(port_words)
        if prng.random() < 0.6:
            value, strb = prng.getrandbits(64), prng.getrandbits(8)
            await h.port_access(word, wdata=value, wstrb=strb)
            h.model_write_word(word, value, strb)
        else:
            got = await h.port_access(word)
            assert got == h.model_word(word), (word, hex(got), hex(h.model_word(word)))
        for _ in range(prng.randrange(3)):
            await RisingEdge(dut.clk)
    await task
    for word in range(SIZE // 8):
        assert await h.port_access(word) == h.model_word(word), word
    r = await h.axi.read(0, SIZE)
    assert r.data == bytes(h.model)
