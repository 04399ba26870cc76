"""The step scheduler driven like a loop walker, against the order a layer's steps need:
every step's P rows stored (and FC's second store) before P is cleared for the next step,
each run started once its engine and P are free; engine refusals and store errors fail the
layer. With a double-buffered P, the steps alternate halves and a step's store overlaps the
next step's runs but never a clear of its half. Random engine run times, accumulate latencies
and DMA back-pressure; runs that HOLD read their predecessor's bank."""

import random

import pytest

from amaranth.sim import Simulator

from bpsa.config import Config
from bpsa.gateware.control.step_scheduler import STORE_CHUNK, StepScheduler
from bpsa.gateware.bus.dma import DmaError, Direction, ElementKind
from bpsa.spec.errors import ERROR_DMA_BUS, ERROR_ENGINE

CFG = Config(name="steps", rows=2, cols=2)


def layer(rng, double=False):
    """Steps of a layer: runs, the store of each step, P words, an optional second store (FC
    backward's, which never double-buffers P)."""
    steps = []
    for s in range(rng.randint(1, 4)):
        steps.append({"runs": rng.randint(1, 3), "words": rng.randint(1, 6),
                      "store": {"rows": rng.randint(1, 3),
                                "length": rng.choice([rng.randint(1, 9), rng.randint(1, 400)]),
                                "nb": rng.randint(1, 4), "stride": rng.choice([16, 64]),
                                "addr": 0x1000 * (s + 1)},
                      "store2": ({"rows": rng.randint(1, 2), "p0": rng.randint(5, 9),
                                  "addr": 0x8000 + 0x100 * s}
                                 if rng.random() < 0.3 and not double else None)})
    return steps


def _chunks(addr, word, length):
    """A row's store commands: chunks of at most STORE_CHUNK words (4-byte accumulators)."""
    chunk = STORE_CHUNK * CFG.cols
    return [("store", addr + 4 * off, word + off // CFG.cols, min(chunk, length - off))
            for off in range(0, length, chunk)]


def expected_stores(step, base=0):
    st, out = step["store"], []
    for i in range(st["rows"]):
        out += _chunks(st["addr"] + i * st["stride"], base + i * st["nb"], st["length"])
    if step["store2"]:
        s2 = step["store2"]
        for i in range(s2["rows"]):
            out += _chunks(s2["addr"] + i * st["stride"], s2["p0"] + i * st["nb"],
                           st["length"])
    return out


@pytest.mark.parametrize("double", [False, True])
def test_steps_in_order(double):
    dut = StepScheduler(CFG)
    rng = random.Random(6 + double)
    half = CFG.buf_p_depth // 2

    def base(s):            # the P half of step s (the first step takes half 1)
        return (half if s % 2 == 0 else 0) if double else 0
    events = []               # what the scheduler did, in order
    outcomes = []

    async def bench(ctx):
        for trial in range(40):
            steps = layer(rng, double)
            # an engine failure and a store failure each in one trial of 8 (fixed, so that
            # every outcome is seen whatever the random draws of the cycles before)
            fail_engine = trial % 8 == 3
            fail_store = trial % 8 == 6
            ctx.set(dut.layer_start, 1)
            ctx.set(dut.double, double)
            await ctx.tick()
            ctx.set(dut.layer_start, 0)
            store_half = None
            events.clear()
            busy, p_busy, clear_at, dma_wait, bank = 0, 0, 0, None, 0
            failed = None
            want = []
            run_count = sum(s["runs"] for s in steps)
            started_runs = 0

            async def cycle(**drive):
                """One clock edge of the walker's requests and the environment's answers."""
                nonlocal busy, p_busy, clear_at, dma_wait, failed, store_half
                for name, v in drive.items():
                    ctx.set(getattr(dut, name), v)
                ctx.set(dut.eng_busy, busy > 0)
                ctx.set(dut.eng_error, fail_engine and started_runs == run_count and busy == 0)
                ctx.set(dut.eng_code, 5)
                ctx.set(dut.p_busy, p_busy > 0)
                ctx.set(dut.p_clear_last, ctx.get(dut.p_clear)
                        and clear_at + 1 >= ctx.get(dut.p_clear_words))
                ready = rng.random() < 0.5
                ctx.set(dut.dma_ready, ready and dma_wait is None)
                ctx.set(dut.dma_done, dma_wait == 0)
                store_bad = fail_store and len(events) > 0 and dma_wait == 0
                ctx.set(dut.dma_error, DmaError.DECERR if store_bad else DmaError.NONE)
                out = {"started": ctx.get(dut.started), "finished": ctx.get(dut.finished),
                       "fail": ctx.get(dut.fail) and ctx.get(dut.fail_code)}
                if ctx.get(dut.eng_start):
                    # within a step, a run may start while the last one's sums still land
                    assert busy == 0
                    events.append(("start", ctx.get(dut.bank)))
                    busy = rng.randint(1, 6)
                    p_busy = max(p_busy, busy + rng.randint(0, 3))
                if ctx.get(dut.p_clear):
                    assert busy == 0 and p_busy == 0
                    # a store may run on with a double-buffered P, in the other half only: no
                    # store command of the cleared half is in flight
                    assert double or not ctx.get(dut.storing)
                    assert dma_wait is None or store_half != ctx.get(dut.p_base)
                    if clear_at == 0:
                        events.append(("clear", ctx.get(dut.p_clear_words),
                                       ctx.get(dut.p_base)))
                    clear_at = 0 if ctx.get(dut.p_clear_last) else clear_at + 1
                if ctx.get(dut.dma_valid) and ctx.get(dut.dma_ready):
                    c = dut.dma_cmd
                    assert ctx.get(dut.storing) and (double or p_busy == 0)
                    store_half = half if double and ctx.get(c.buf_addr) >= half else 0
                    assert ctx.get(c.direction) == Direction.STORE
                    assert ctx.get(c.kind) == ElementKind.ACCUMULATOR
                    events.append(("store", ctx.get(c.addr), ctx.get(c.buf_addr),
                                   ctx.get(c.length)))
                    dma_wait = rng.randint(1, 4)
                elif dma_wait is not None:
                    dma_wait = None if dma_wait == 0 else dma_wait - 1
                busy, p_busy = max(0, busy - 1), max(0, p_busy - 1)
                await ctx.tick()
                for name in drive:
                    ctx.set(getattr(dut, name), 0)
                return out

            for s, step in enumerate(steps):
                if s:
                    want += expected_stores(steps[s - 1], base(s - 1))
                want.append(("clear", step["words"], base(s)))
                for run in range(step["runs"]):
                    if failed:
                        break
                    # a run that holds reads its predecessor's bank and leaves the toggle
                    hold = int(started_runs > 0 and rng.random() < 0.3)
                    drive = {"clear_words": step["words"], "hold": hold}
                    if run == 0:
                        await cycle(new_step=1, clear_words=step["words"])
                    while True:
                        out = await cycle(run=1, **drive)
                        if out["fail"]:
                            failed = out["fail"]
                            break
                        if out["started"]:
                            break
                    if failed:
                        break
                    started_runs += 1
                    want.append(("start", bank ^ hold))
                    bank ^= 1 - hold
                    if run == step["runs"] - 1:      # the step's last group has started
                        ctx.set(dut.save, 1)
                        for k, v in step["store"].items():
                            ctx.set(getattr(dut.save_step, k), v)
                        if step["store2"]:
                            ctx.set(dut.save2, 1)
                            for k, v in step["store2"].items():
                                ctx.set(getattr(dut.save2_step, k), v)
                        last = s == len(steps) - 1
                        await cycle(final_save=int(last))
                        ctx.set(dut.save, 0)
                        ctx.set(dut.save2, 0)
            if not failed:
                want += expected_stores(steps[-1], base(len(steps) - 1))
                while True:
                    out = await cycle(last=1)
                    if out["fail"]:
                        failed = out["fail"]
                        break
                    if out["finished"]:
                        break
            outcomes.append("engine" if fail_engine else "store" if fail_store else "done")
            if double:      # stores overlap the next step: compare stores and the rest apart
                got_split = ([e for e in events if e[0] == "store"],
                             [e for e in events if e[0] != "store"])
                want_split = ([e for e in want if e[0] == "store"],
                              [e for e in want if e[0] != "store"])
            if fail_engine:
                assert failed == ERROR_ENGINE | 5, trial
            elif fail_store:
                assert failed == ERROR_DMA_BUS | DmaError.DECERR.value, trial
                if double:
                    assert got_split[0] == want_split[0][:len(got_split[0])]
                else:
                    assert events == want[:len(events)] and events[-1][0] == "store"
            elif double:
                assert not failed and got_split == want_split, trial
            else:
                assert not failed and events == want, trial
            for _ in range(8):           # let the engine finish before the next layer
                await cycle()

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert {"engine", "store", "done"} <= set(outcomes)
    assert sum(o == "done" for o in outcomes) > 15
