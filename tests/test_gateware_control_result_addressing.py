"""Where result vectors go in P: each addresser against the formula, written out per vector,
on random runs (tile order, run geometry, dropped pixels and rows, FIFO back-pressure)."""

import random

from amaranth.sim import Simulator

from bpsa.config import Config
from bpsa.gateware.control.result_addressing import (BackwardResults, FcDrainResults,
                                                        ForwardResults, ZeroFreeResults)

CFG = Config(name="addr", rows=3, cols=2, acc_width=16, operand_width=8, dim_width=8,
             buf_p_depth=256)


def _run(dut, bench, clock=True):
    sim = Simulator(dut)
    if clock:
        sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()


def test_forward_results():
    dut = ForwardResults(CFG)
    rng = random.Random(1)

    async def bench(ctx):
        dropped = bases = 0
        base = 0
        for i in range(300):
            if i % 20 == 0:             # a run starts: its block within the step
                row_base, p_row = rng.randint(0, 4), rng.randint(1, 40)
                ctx.set(dut.row_base, row_base)
                ctx.set(dut.p_row, p_row)
                ctx.set(dut.start, 1)
                ctx.set(dut.y.valid, 0)
                await ctx.tick()
                ctx.set(dut.start, 0)
                # the geometry is the run's: later changes do not move its results
                ctx.set(dut.row_base, rng.randint(0, 4))
                ctx.set(dut.p_row, rng.randint(1, 40))
                base = row_base * p_row
                bases += base > 0
            ow = rng.randint(1, 12)
            oh, ow0, row = rng.randint(0, 15), rng.randrange(0, ow, CFG.rows), rng.randrange(3)
            vec = [rng.randint(-99, 99) for _ in range(CFG.cols)]
            ctx.set(dut.ow, ow)
            ctx.set(dut.y.valid, 1)
            for name, v in (("oh", oh), ("ow0", ow0), ("row", row)):
                ctx.set(getattr(dut.y.payload, name), v)
            for j, v in enumerate(vec):
                ctx.set(dut.y.payload.data[j], v)
            inside = ow0 + row < ow
            assert ctx.get(dut.acc.valid) == inside
            dropped += not inside
            if inside:
                assert ctx.get(dut.acc.payload.addr) == (base + oh * ow + ow0 + row) % 256
                assert [ctx.get(dut.acc.payload.data[j]) for j in range(CFG.cols)] == vec
            await ctx.tick()
        assert dropped > 10 and bases > 5

    _run(dut, bench)


def _tiles(rng, kt_rows, count):
    """Tile tags of a run: each tile's rows in order; tags restart at 0 for every run."""
    out = []
    for t in range(count):
        for row in range(CFG.rows):
            out.append((t, row))
    return out


def test_backward_results():
    dut = BackwardResults(CFG)
    rng = random.Random(2)

    async def bench(ctx):
        for _ in range(12):
            kt_rows, row_base, p_row = rng.randint(1, 4), rng.randint(0, 5), rng.randint(1, 6)
            ctx.set(dut.kt_rows, kt_rows)
            ctx.set(dut.row_base, row_base)
            ctx.set(dut.p_row, p_row)
            ctx.set(dut.start, 1)
            await ctx.tick()
            ctx.set(dut.start, 0)
            # the geometry is the run's: later changes do not matter
            ctx.set(dut.row_base, 99)
            ctx.set(dut.p_row, 0)
            for t, row in _tiles(rng, kt_rows, rng.randint(1, 7)):
                while rng.random() < 0.3:           # gaps between vectors
                    ctx.set(dut.out.valid, 0)
                    await ctx.tick()
                vec = [rng.randint(-99, 99) for _ in range(CFG.cols)]
                ctx.set(dut.out.valid, 1)
                ctx.set(dut.out.payload.tile, t)
                ctx.set(dut.out.payload.row, row)
                for j, v in enumerate(vec):
                    ctx.set(dut.out.payload.data[j], v)
                blk = t // kt_rows                 # row tiles inner, column blocks outer
                assert ctx.get(dut.acc.valid)
                assert ctx.get(dut.acc.payload.addr) == ((row + row_base) * p_row
                                                         + blk) % 256
                assert [ctx.get(dut.acc.payload.data[j]) for j in range(CFG.cols)] == vec
                await ctx.tick()
            ctx.set(dut.out.valid, 0)

    _run(dut, bench)


def test_fc_drain_results():
    dut = FcDrainResults(CFG)
    rng = random.Random(3)

    async def bench(ctx):
        got, want = [], []
        for _ in range(10):
            kt_rows, o0, p_row = rng.randint(1, 3), rng.randint(0, 4), rng.randint(1, 4)
            dw_p0, k = rng.randint(0, 8), rng.randint(1, 12)
            for name, v in (("kt_rows", kt_rows), ("o0", o0), ("p_row", p_row),
                            ("dw_p0", dw_p0), ("k", k)):
                ctx.set(getattr(dut, name), v)
            ctx.set(dut.start, 1)
            ctx.set(dut.fill.ready, 0)
            await ctx.tick()
            ctx.set(dut.start, 0)
            pending = _tiles(rng, kt_rows, rng.randint(1, 6))
            cycle, sent = 0, False
            while pending or ctx.get(dut.fill.valid):
                # P takes a queued row at least every other cycle (result vectors of the
                # other stream come at most every other cycle), as fast as rows arrive
                cycle += 1
                ready = cycle % 2 == 0 or rng.random() < 0.5
                ctx.set(dut.fill.ready, ready)
                if ctx.get(dut.fill.valid) and ready:
                    got.append((ctx.get(dut.fill.payload.addr),
                                [ctx.get(dut.fill.payload.data[j]) for j in range(CFG.cols)]))
                # the engine drains at most one row every other cycle
                send = bool(pending) and rng.random() < 0.7 and not sent
                sent = send
                ctx.set(dut.drain.valid, send)
                if send:
                    t, row = pending.pop(0)
                    vec = [rng.randint(-99, 99) for _ in range(CFG.cols)]
                    ctx.set(dut.drain.payload.tile, t)
                    ctx.set(dut.drain.payload.row, row)
                    for j, v in enumerate(vec):
                        ctx.set(dut.drain.payload.data[j], v)
                    it, ot = divmod(t, kt_rows)     # output tiles inner, input tiles outer
                    drow = o0 + ot * CFG.rows + row
                    if drow < k:
                        want.append((((dw_p0 + drow) * p_row + it) % 256, vec))
                await ctx.tick()
                ctx.set(dut.drain.valid, 0)
        assert got == want and len(want) > 30

    _run(dut, bench)


def test_zero_free_results():
    """Every row to ``row_base p_row + addr``, the geometry taken at the run's start (changing
    it during the run moves nothing), rows without ``valid`` dropped."""
    dut = ZeroFreeResults(CFG)
    rng = random.Random(4)

    async def bench(ctx):
        seen = 0
        for _ in range(30):
            row_base, p_row = rng.randint(0, 3), rng.randint(1, 40)
            ctx.set(dut.row_base, row_base)
            ctx.set(dut.p_row, p_row)
            ctx.set(dut.start, 1)
            await ctx.tick()
            ctx.set(dut.start, 0)
            ctx.set(dut.row_base, rng.randint(0, 3))      # not the run's any more
            ctx.set(dut.p_row, rng.randint(1, 40))
            for _ in range(rng.randint(1, 8)):
                addr, valid = rng.randrange(p_row), rng.random() < 0.7
                vec = [rng.randint(-999, 999) for _ in range(CFG.cols)]
                ctx.set(dut.zg.valid, valid)
                ctx.set(dut.zg.payload.addr, addr)
                for j, v in enumerate(vec):
                    ctx.set(dut.zg.payload.data[j], v)
                assert ctx.get(dut.acc.valid) == valid
                if valid:
                    seen += 1
                    assert ctx.get(dut.acc.payload.addr) == row_base * p_row + addr
                    assert [ctx.get(dut.acc.payload.data[j]) for j in range(CFG.cols)] == vec
                await ctx.tick()
            ctx.set(dut.zg.valid, 0)
        assert seen > 50

    _run(dut, bench)
