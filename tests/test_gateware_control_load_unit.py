"""The load unit against a Python model: DMA commands of multi-run loads, slices a bank holds
skipped, invalidation, DMA errors, under random DMA back-pressure and latency."""

import random

import pytest

from amaranth.sim import Simulator

from bpsa.config import Config
from bpsa.gateware.control.load_unit import Cache, LoadUnit, Target
from bpsa.gateware.bus.dma import DmaError, Direction, ElementKind

CFG = Config(name="load", rows=2, cols=2, buf_a_depth=64, buf_b_depth=32, buf_pool_depth=128,
             pool_kinds=["max"], forward_frontends=["feeder", "channel_first"],
             buf_cf_depth=256)
HALF = {Cache.A: 32, Cache.B: 16, Cache.W: 16, Cache.POOL_X: 64, Cache.POOL_DY: 64,
        Cache.CF: 128}
# MX: the channel-first X banks' scale bank has its own slice record
CFG_MX = CFG.replace(name="load_mx", arithmetic="mxint8", operand_width=8, acc_width=21,
                     backward_modes=["zero_free"])
HALF_MX = {**HALF, Cache.CF_XS: 128}


@pytest.mark.parametrize("cfg, half", [(CFG, HALF), (CFG_MX, HALF_MX)], ids=["int", "mx"])
def test_loads_skips_and_errors(cfg, half):
    dut = LoadUnit(cfg)
    rng = random.Random(4)
    held = {}                 # (cache, bank) -> (addr, length): what each bank holds
    stats = {"hits": 0, "commands": 0, "errors": 0}

    async def bench(ctx):
        prev = None
        for i in range(150):
            if rng.random() < 0.05:
                ctx.set(dut.invalidate, 1)
                await ctx.tick()
                ctx.set(dut.invalidate, 0)
                held.clear()
            cache, bank = rng.choice(list(half)), rng.randrange(2)
            addr = rng.choice([0x100, 0x200, 0x300])
            count, run_len, stride = rng.randint(1, 3), rng.randint(1, 5), rng.choice([8, 64])
            lanes = rng.choice([1, 1, 4])       # several lanes a word: runs every run_words
            run_words = run_len if lanes == 1 else -(-run_len // lanes)
            length = count * run_len if rng.random() < 0.8 else count * run_len + 1
            offset = rng.randrange(4)
            load = {"target": rng.choice(list(Target)), "cache": cache, "bank": bank,
                    "offset": offset, "addr": addr, "length": length, "lanes": lanes,
                    "count": count, "run_len": run_len, "run_words": run_words,
                    "stride": stride}
            if prev and rng.random() < 0.4:       # the same slice again
                load = prev
                cache, bank, addr, length = load["cache"], load["bank"], load["addr"], \
                    load["length"]
                count, run_len, stride, offset = load["count"], load["run_len"], \
                    load["stride"], load["offset"]
                run_words = load["run_words"]
            prev = load
            for name, v in load.items():
                ctx.set(getattr(dut.load.payload, name), v)
            ctx.set(dut.load.valid, 1)
            # the pooling buffer's dY slice also names its offset (it follows X's)
            key = (addr, length, offset) if cache == Cache.POOL_DY else (addr, length)
            hit = held.get((cache, bank)) == key
            want = [(addr + j * stride, bank * half[cache] + offset + j * run_words, run_len)
                    for j in range(count)]
            fail_at = rng.randrange(count) if rng.random() < 0.1 else None
            got = []
            # the load is taken at once (the unit is idle), checked the next cycle: a hit
            # ends there, a miss offers its first command
            assert ctx.get(dut.load.ready)
            await ctx.tick()
            ctx.set(dut.load.valid, 0)
            for name, v in load.items():              # the unit keeps its own copy
                ctx.set(getattr(dut.load.payload, name), 0)
            assert ctx.get(dut.done) == hit and ctx.get(dut.hit) == hit
            assert ctx.get(dut.claim) == (not hit)    # a miss: the DMA is wanted next cycle
            assert not ctx.get(dut.dma.valid)
            if hit:
                stats["hits"] += 1
                assert ctx.get(dut.error) == DmaError.NONE
                await ctx.tick()
                continue
            held.pop((cache, bank), None)
            await ctx.tick()
            while True:                               # the first run's command
                ready = rng.random() < 0.6
                ctx.set(dut.dma.ready, ready)
                assert ctx.get(dut.dma.valid) and not ctx.get(dut.load.ready)
                if ready:
                    break
                await ctx.tick()
            while True:
                assert ctx.get(dut.dma.valid) and ctx.get(dut.dma.ready)
                c = dut.dma.payload
                assert ctx.get(c.direction) == Direction.LOAD
                assert ctx.get(c.kind) == ElementKind.OPERAND
                got.append((ctx.get(c.addr), ctx.get(c.buf_addr), ctx.get(c.length)))
                await ctx.tick()
                ctx.set(dut.dma.ready, 0)
                assert ctx.get(dut.target) == load["target"]
                for _ in range(rng.randint(0, 3)):        # the DMA works
                    assert not ctx.get(dut.dma.valid) and not ctx.get(dut.done)
                    await ctx.tick()
                failed = fail_at == len(got) - 1
                ctx.set(dut.dma_done, 1)
                ctx.set(dut.dma_error, DmaError.SLVERR if failed else DmaError.NONE)
                last = failed or len(got) == count
                assert ctx.get(dut.done) == last
                if last:
                    assert ctx.get(dut.error) == (DmaError.SLVERR if failed else DmaError.NONE)
                await ctx.tick()
                ctx.set(dut.dma_done, 0)
                if last:
                    break
                while True:                  # the next run's command
                    ready = rng.random() < 0.6
                    ctx.set(dut.dma.ready, ready)
                    assert ctx.get(dut.dma.valid)
                    if ready:
                        break
                    await ctx.tick()
            stats["commands"] += len(got)
            if fail_at is None:
                assert got == want
                held[cache, bank] = key
            else:
                stats["errors"] += 1
                assert got == want[:fail_at + 1]

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert stats["hits"] > 5 and stats["errors"] > 3 and stats["commands"] > 100
