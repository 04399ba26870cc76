"""The instruction fetch unit with a stand-in DMA that answers after random delays and writes
the ring as the DMA engine packs elements: programs of every length up to several rings
taken in order under random back-pressure, ``insn_end`` after the last word, a DMA error, and
the element choice."""

import random

import pytest
from amaranth.sim import Simulator

from bpsa.config import Config, load_config
from bpsa.gateware.control.fetch import FETCH_DEPTH, Fetch, fetch_element
from bpsa.gateware.bus.dma import DmaError, ElementKind

CFG = load_config("small")


def run(programs, *, seed, error_at=None, config=CFG):
    """Each ``(base, words)`` of ``programs`` through the unit: the words taken, whether
    ``insn_end`` rose after them, and the error code seen (None)."""
    dut = Fetch(config)
    rng = random.Random(seed)
    kind, bits, parts = fetch_element(config)
    lanes = 64 // bits // parts
    part = 64 // parts
    results = []

    async def bench(ctx):
        commands = 0
        for base, words in programs:
            memory = b"".join(w.to_bytes(8, "little") for w in words)
            ctx.set(dut.prog_addr, base)
            ctx.set(dut.prog_words, len(words))
            ctx.set(dut.start, 1)
            await ctx.tick()
            ctx.set(dut.start, 0)
            taken, pending, error = [], None, None
            for _ in range(5000):
                ctx.set(dut.dma.ready, 0)
                ctx.set(dut.dma_done, 0)
                ctx.set(dut.write_en, 0)
                ctx.set(dut.dma_error, 0)
                ready = rng.random() < 0.6
                ctx.set(dut.insn.ready, ready)
                if ctx.get(dut.dma.valid) and pending is None and rng.random() < 0.5:
                    p = dut.dma.payload
                    assert ctx.get(p.kind) == kind and ctx.get(p.lanes) == lanes
                    assert ctx.get(p.length) % lanes == 0
                    pending = [ctx.get(p.addr), ctx.get(p.buf_addr), ctx.get(p.length) // lanes,
                               rng.randint(0, 3)]
                    ctx.set(dut.dma.ready, 1)
                    commands += 1
                elif pending is not None:
                    assert ctx.get(dut.fetching)
                    addr, buf, n, wait = pending
                    if wait:
                        pending[3] -= 1
                    elif n:
                        ctx.set(dut.write_en, 1)
                        ctx.set(dut.write_addr, buf)
                        at = addr - base
                        ctx.set(dut.write_data, int.from_bytes(memory[at:at + part // 8],
                                                               "little"))
                        pending[:3] = [addr + part // 8, buf + 1, n - 1]
                    else:
                        ctx.set(dut.dma_done, 1)
                        if commands == error_at:
                            ctx.set(dut.dma_error, 3)
                        pending = None
                if ctx.get(dut.error):
                    error = ctx.get(dut.error_code)
                if ready and ctx.get(dut.insn.valid):
                    taken.append(ctx.get(dut.insn.payload))
                end = ctx.get(dut.insn_end)
                await ctx.tick()
                if end and pending is None or error is not None:
                    break
            else:
                raise AssertionError("the fetch unit hung")
            results.append((taken, end, error))
            for _ in range(3):             # nothing more comes
                assert not ctx.get(dut.insn.valid) and not ctx.get(dut.dma.valid)
                await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    return results


@pytest.mark.parametrize("config", [CFG, load_config("ice40")], ids=["word", "halves"])
def test_programs_of_every_length_arrive_in_order(config):
    rng = random.Random(1)
    lengths = [1, 2, FETCH_DEPTH // 2 - 1, FETCH_DEPTH // 2, FETCH_DEPTH // 2 + 1, FETCH_DEPTH,
               FETCH_DEPTH + 3, 3 * FETCH_DEPTH + 5]
    programs = [(0x1000 + 8 * rng.randint(0, 64), [rng.getrandbits(64) for _ in range(n)])
                for n in lengths]
    assert fetch_element(config)[2] == (1 if config is CFG else 2)
    for (_, words), (taken, end, error) in zip(programs, run(programs, seed=2, config=config)):
        assert taken == words and end and error is None


def test_an_empty_program_ends_at_once():
    ((taken, end, error),) = run([(0x100, [])], seed=3)
    assert taken == [] and end and error is None


def test_a_dma_error_stops_the_fetch():
    words = [random.Random(4).getrandbits(64) for _ in range(2 * FETCH_DEPTH)]
    ((taken, end, error),) = run([(0x2000, words)], seed=5, error_at=2)
    assert error == DmaError.WINDOW and not end and taken == words[:len(taken)]
    assert len(taken) <= FETCH_DEPTH // 2


def test_fetch_element_needs_whole_bytes():
    assert fetch_element(CFG)[0] == ElementKind.OPERAND
    odd = Config(name="odd", operand_width=12, acc_width=32)
    assert fetch_element(odd) == (ElementKind.ACCUMULATOR, 32, 1)
    with pytest.raises(ValueError, match="operand_width 12 or acc_width 30"):
        fetch_element(Config(name="odd2", operand_width=12, acc_width=30))


def test_fetch_through_the_dma_engine():
    """The unit on the real DMA engine and an AXI memory model (random pauses): a program of
    several rings arrives word for word under back-pressure."""
    from amaranth.hdl import Module
    from amaranth.lib import wiring
    from test_gateware_bus_dma import AxiRamModel, ByteMemory

    from bpsa.gateware.bus.dma import DmaEngine

    rng = random.Random(9)
    words = [rng.getrandbits(64) for _ in range(5 * FETCH_DEPTH + 3)]
    base = 0x4_0000 + 64 * 3
    memory = ByteMemory(1)
    for i, w in enumerate(words):
        memory.write(base + 8 * i, list(w.to_bytes(8, "little")))
    m = Module()
    fetch = m.submodules.fetch = Fetch(CFG)
    dma = m.submodules.dma = DmaEngine(CFG)
    wiring.connect(m, fetch.dma, dma.cmd)
    m.d.comb += [fetch.dma_done.eq(dma.done), fetch.dma_error.eq(dma.error),
                 fetch.write_addr.eq(dma.buf_write.addr), fetch.write_data.eq(dma.buf_write.data),
                 fetch.write_en.eq(dma.buf_write.en), dma.window_lo.eq(0),
                 dma.window_hi.eq(0xFFFF_FFFF)]
    ram = AxiRamModel(dma.axi, memory, rng, 0.3, None, None)
    taken = []

    async def bench(ctx):
        ctx.set(fetch.prog_addr, base)
        ctx.set(fetch.prog_words, len(words))
        ctx.set(fetch.start, 1)
        await ctx.tick()
        ctx.set(fetch.start, 0)
        for _ in range(20000):
            ready = rng.random() < 0.5
            ctx.set(fetch.insn.ready, ready)
            if ready and ctx.get(fetch.insn.valid):
                taken.append(ctx.get(fetch.insn.payload))
            if ctx.get(fetch.insn_end):
                break
            assert not ctx.get(fetch.error)
            await ctx.tick()
        assert taken == words

    sim = Simulator(m)
    sim.add_clock(1e-8)
    sim.add_testbench(ram.run, background=True)
    sim.add_testbench(bench)
    sim.run()
