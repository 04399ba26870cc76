"""UART receiver and transmitter in the Amaranth simulator against a bit-level Python model of
an 8N1 line: bytes sent by the model at the nominal and at a few per cent off rates, a glitch,
a framing error (break), overrun; the transmitter's waveform decoded by the model; parameter
errors."""

import pytest
from amaranth.hdl import Module
from amaranth.sim import Simulator

from bpsa.gateware.bus.uart import UartRx, UartTx, uart_divisor


def line_bits(data):
    """The 8N1 bits of ``data``: start 0, LSB first, stop 1."""
    for b in data:
        yield 0
        for i in range(8):
            yield b >> i & 1
        yield 1


def test_divisor():
    assert uart_divisor(12_000_000, 115200) == 104
    assert uart_divisor(25e6, 115200) == 217
    assert uart_divisor(48_000_000, 12_000_000) == 4
    with pytest.raises(ValueError, match=r"baud must be in \[300, 12000000\], not 100"):
        uart_divisor(12e6, 100)
    with pytest.raises(ValueError, match=r"clk_freq must be in \[1000, 1000000000\], not 0"):
        uart_divisor(0, 9600)
    with pytest.raises(ValueError, match=r"baud must be in \[300, 3000000\] at clk_freq"):
        uart_divisor(12_000_000, 4_000_000)
    with pytest.raises(ValueError, match=r"error must be in \[0, 2\] %"):
        uart_divisor(12_000_000, 2_000_000 * 1.3)
    with pytest.raises(ValueError, match="baud must be a number"):
        uart_divisor(12e6, "fast")
    with pytest.raises(ValueError, match=r"divisor must be an integer in \[4, "):
        UartTx(3)
    with pytest.raises(ValueError, match=r"divisor must be an integer in \[4, "):
        UartRx(2.5)


@pytest.mark.parametrize("divisor", [4, 7, 16])
def test_tx(divisor):
    """The transmitter's line, sampled by the model in each bit's middle."""
    dut = UartTx(divisor)
    data = [0x00, 0xFF, 0x55, 0xA3, 0x81]
    got = []

    async def feeder(ctx):
        for b in data:
            ctx.set(dut.i.valid, 1)
            ctx.set(dut.i.payload, b)
            await ctx.tick().until(dut.i.ready)
            ctx.set(dut.i.valid, 0)

    async def decoder(ctx):
        for _ in data:
            while ctx.get(dut.tx):
                await ctx.tick()
            await ctx.tick().repeat(divisor // 2)
            assert ctx.get(dut.tx) == 0
            b = 0
            for i in range(8):
                await ctx.tick().repeat(divisor)
                b |= ctx.get(dut.tx) << i
            await ctx.tick().repeat(divisor)
            assert ctx.get(dut.tx) == 1, "stop bit"
            got.append(b)

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(feeder, background=True)
    sim.add_testbench(decoder)
    sim.run()
    assert got == data


def _run_rx(divisor, levels, ready_after=0):
    """Drive ``rx`` with ``levels`` (one per clock cycle); return (bytes, frame errors,
    overruns). The output is taken ``ready_after`` cycles after it becomes valid (None: never)."""
    dut = UartRx(divisor)
    got, stats = [], {"frame": 0, "overrun": 0}

    async def drive(ctx):
        for v in levels:
            ctx.set(dut.rx, v)
            await ctx.tick()
        ctx.set(dut.rx, 1)
        await ctx.tick().repeat(4 * divisor)

    async def sink(ctx):
        wait = 0
        while True:
            await ctx.tick()
            stats["frame"] += ctx.get(dut.frame_error)
            stats["overrun"] += ctx.get(dut.overrun)
            if ctx.get(dut.o.valid) and ready_after is not None:
                if wait == ready_after:
                    ctx.set(dut.o.ready, 1)
                    got.append(ctx.get(dut.o.payload))
                    await ctx.tick()
                    ctx.set(dut.o.ready, 0)
                    stats["frame"] += ctx.get(dut.frame_error)
                    stats["overrun"] += ctx.get(dut.overrun)
                    wait = 0
                else:
                    wait += 1

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(drive)
    sim.add_testbench(sink, background=True)
    sim.run()
    return got, stats["frame"], stats["overrun"]


def _levels(bits, cycles_per_bit):
    """Per-clock levels of ``bits`` at a (fractional) bit time, idle before."""
    out = [1] * 5
    t = 0.0
    for b in bits:
        t += cycles_per_bit
        out += [b] * (round(t) - (len(out) - 5))
    return out


@pytest.mark.parametrize("divisor,rate", [(8, 1.0), (16, 1.0), (16, 1.04), (16, 0.96),
                                          (5, 1.0)])
def test_rx(divisor, rate):
    data = [0x00, 0xFF, 0x5A, 0x01, 0x80, 0x3C]
    got, frame, overrun = _run_rx(divisor, _levels(line_bits(data), divisor * rate))
    assert got == data and frame == 0 and overrun == 0


def test_rx_glitch_break_overrun():
    div = 16
    # A low glitch shorter than half a bit is ignored; then a byte.
    levels = [1] * 10 + [0] * 3 + [1] * 40 + _levels(line_bits([0x42]), div)
    got, frame, _ = _run_rx(div, levels)
    assert got == [0x42] and frame == 0
    # A break (line low for two byte times) is one framing error and no byte; the next byte
    # after the line returns high is received.
    levels = [1] * 10 + [0] * (20 * div) + [1] * (2 * div) + _levels(line_bits([0x17]), div)
    got, frame, _ = _run_rx(div, levels)
    assert got == [0x17] and frame == 1
    # Nobody takes the bytes: the second replaces the first and overrun pulses.
    got, frame, overrun = _run_rx(div, _levels(line_bits([1, 2]), div), ready_after=None)
    assert got == [] and overrun == 1


def test_loopback():
    """Transmitter into receiver."""
    div = 6
    m = Module()
    m.submodules.tx = tx = UartTx(div)
    m.submodules.rx = rx = UartRx(div)
    m.d.comb += rx.rx.eq(tx.tx)
    data = list(range(0, 256, 17))
    got = []

    async def tb(ctx):
        ctx.set(rx.o.ready, 1)
        for b in data:
            ctx.set(tx.i.valid, 1)
            ctx.set(tx.i.payload, b)
            await ctx.tick().until(tx.i.ready)
        ctx.set(tx.i.valid, 0)

    async def sink(ctx):
        while True:
            await ctx.tick()
            if ctx.get(rx.o.valid):
                got.append(ctx.get(rx.o.payload))

    sim = Simulator(m)
    sim.add_clock(1e-6)
    sim.add_testbench(sink, background=True)
    sim.add_testbench(tb)
    sim.run_until(1e-6 * div * 10 * (len(data) + 2))
    assert got == data
