"""The instruction dispatcher against the instruction set's model (:func:`bpsa.spec.isa.execute`):
random programs through stand-ins of the load unit and the step scheduler that answer after
random delays, with gaps in the instruction stream; every malformed instruction and order
refused with its code and nothing handed on after it; a load's DMA error; a program with no
END."""

import random

import pytest
from amaranth.sim import Simulator

from bpsa.config import Config
from bpsa.gateware.control.dispatcher import Dispatcher
from bpsa.spec import isa
from bpsa.spec.errors import ERROR_DMA_BUS, ERROR_PROGRAM, ProgramError
from bpsa.sim.testbenches.tb_dispatcher import SEEN, random_ops, seen

CFG = Config(name="disp", rows=2, cols=3, buf_a_depth=128, buf_b_depth=128, buf_p_depth=64,
             feeder_bus_width=4, dim_width=8, pool_kinds=("max", "avg"), buf_pool_depth=128)
OP = isa.Opcode
TABLE = isa.fields(CFG)


def random_program(rng, groups):
    """Ops of a random well-formed program (the testbench's generator)."""
    return random_ops(rng, TABLE, groups)


def _snapshot(ctx, dut, structs):
    out = {}
    for f in TABLE:
        if f.struct in structs:
            parent = dut.load.payload if f.struct == "load" else getattr(
                dut, {"save": "save_step", "save2": "save2_step"}.get(f.struct, f.struct))
            out[f.key] = ctx.get(getattr(parent, f.name))
    return out


def run_programs(programs, *, seed, dma_error_at=None, hit_rate=0.3):
    """Each of ``programs`` (``(words, end)``) through the dispatcher: its trace and code."""
    dut = Dispatcher(CFG)
    rng = random.Random(seed)
    results = []

    async def bench(ctx):
        for words, end in programs:
            ctx.set(dut.start, 1)
            await ctx.tick()
            ctx.set(dut.start, 0)
            trace, code, pos, loads = [], None, 0, 0
            load_wait = run_wait = None
            hit = False
            for _ in range(20000):
                # the fetch unit: words with gaps, insn_end when all are taken
                give = pos < end and rng.random() < 0.7
                ctx.set(dut.insn.valid, give)
                ctx.set(dut.insn.payload, words[pos] if give else 0)
                ctx.set(dut.insn_end, pos >= end)
                for sig in (dut.load.ready, dut.load_done, dut.started,
                            dut.finished):
                    ctx.set(sig, 0)
                ctx.set(dut.load_error, 0)
                # the load unit: takes a load after a delay, answers it with a done: a hit
                # the next cycle, a DMA load (which may fail) after a while
                if ctx.get(dut.load.valid) and load_wait is None:
                    if rng.random() < 0.5:
                        ctx.set(dut.load.ready, 1)
                        trace.append((OP.LOAD, _snapshot(ctx, dut, SEEN[OP.LOAD]), 0))
                        hit = rng.random() < hit_rate
                        load_wait = 0 if hit else rng.randint(0, 3)
                elif load_wait is not None:
                    if load_wait == 0:
                        ctx.set(dut.load_done, 1)
                        if not hit:
                            loads += 1
                            if dma_error_at == loads:
                                ctx.set(dut.load_error, 3)
                        load_wait = None
                    else:
                        load_wait -= 1
                # the step scheduler: starts a run, stores the last step, after delays
                if ctx.get(dut.run_req) or ctx.get(dut.last):
                    if run_wait is None:
                        run_wait = rng.randint(0, 4)
                    elif run_wait == 0:
                        if ctx.get(dut.run_req):
                            ctx.set(dut.started, 1)
                            trace.append((OP.RUN, _snapshot(ctx, dut, SEEN[OP.RUN]),
                                          ctx.get(dut.run_hold)))
                        else:
                            ctx.set(dut.finished, 1)
                        run_wait = None
                    else:
                        run_wait -= 1
                if ctx.get(dut.new_step):
                    trace.append((OP.STEP, {}, 0))
                if ctx.get(dut.save):
                    trace.append((OP.SAVE, _snapshot(ctx, dut, SEEN[OP.SAVE]),
                                  ctx.get(dut.final_step)))
                if ctx.get(dut.save2):
                    trace.append((OP.SAVE2, _snapshot(ctx, dut, SEEN[OP.SAVE2]), 0))
                if ctx.get(dut.done):
                    trace.append((OP.END, {}, 0))
                    code = 0
                if ctx.get(dut.fail):
                    code = ctx.get(dut.fail_code)
                taken = give and ctx.get(dut.insn.ready)
                await ctx.tick()
                pos += taken
                if code is not None:
                    break
            else:
                raise AssertionError("the dispatcher neither finished nor failed")
            assert not ctx.get(dut.busy)
            results.append((trace, code))

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    return results


def _expected(words, end):
    trace, code = isa.execute(CFG, words, end=end)
    return [(op, seen(op, state, flags), 0 if op == OP.LOAD else flags)
            for op, state, flags in trace], code


def test_random_programs_match_the_model():
    rng = random.Random(3)
    programs = []
    for _ in range(12):
        words = isa.assemble(CFG, random_program(rng, rng.randint(1, 6)))
        programs.append((words, len(words)))
    results = run_programs(programs, seed=4)
    for (words, end), got in zip(programs, results):
        want = _expected(words, end)
        assert want[1] == 0 and got == want


def _bad_programs():
    """(name, words, end, expected code): each malformed instruction or order."""
    rng = random.Random(5)
    good = isa.assemble(CFG, random_program(rng, 3))
    step_at = next(i for i, w in enumerate(good) if isa.decode(w)[0] == OP.STEP)
    run_at = next(i for i, w in enumerate(good) if isa.decode(w)[0] == OP.RUN)
    narrow = next(i for i, f in enumerate(TABLE) if f.bits < isa.VALUE_BITS)
    cases = [
        ("opcode 0", [0], ProgramError.OPCODE),
        ("opcode 9", [9 << isa.OPCODE_LSB], ProgramError.OPCODE),
        ("reserved bits", [isa.encode(OP.STEP) | 1 << 49], ProgramError.RESERVED),
        ("STEP with a value", [isa.encode(OP.STEP, 0, 2)], ProgramError.RESERVED),
        ("STEP with a field", [isa.encode(OP.STEP, 3)], ProgramError.RESERVED),
        ("SAVE flag past FINAL", [isa.encode(OP.STEP), isa.encode(OP.RUN),
                                  isa.encode(OP.SAVE, 0, 2)], ProgramError.RESERVED),
        ("LOAD flag past the slot", [isa.encode(OP.LOAD, 0, 2)], ProgramError.RESERVED),
        ("field past the table", [isa.encode(OP.SET, len(TABLE), 1)], ProgramError.FIELD),
        ("value too wide", [isa.encode(OP.SET, narrow, 1 << TABLE[narrow].bits)],
         ProgramError.RANGE),
        ("RUN before STEP", [isa.encode(OP.RUN)], ProgramError.ORDER),
        ("SAVE before RUN", [isa.encode(OP.STEP), isa.encode(OP.SAVE)], ProgramError.ORDER),
        ("SAVE2 before RUN", [isa.encode(OP.STEP), isa.encode(OP.SAVE2)], ProgramError.ORDER),
        ("END before RUN", [isa.encode(OP.STEP), isa.encode(OP.END)], ProgramError.ORDER),
        ("no END", good[:-1], ProgramError.END),
        ("a bad word mid-program", good[:run_at] + [0] + good[run_at:], ProgramError.OPCODE),
    ]
    assert step_at < run_at
    return [(name, words, len(words), ERROR_PROGRAM | code) for name, words, code in cases]


@pytest.mark.parametrize("name, words, end, code", _bad_programs(),
                         ids=[c[0] for c in _bad_programs()])
def test_malformed_programs_are_refused(name, words, end, code):
    (got,) = run_programs([(words, end)], seed=6)
    want = _expected(words, end)
    assert want[1] == code, name           # the model agrees with the case's code
    assert got == want, name               # nothing handed on after the bad instruction


def test_a_load_error_ends_the_layer():
    rng = random.Random(7)
    ops = [(OP.STEP, {}, 0), (OP.LOAD, {"load.addr": 64, "load.length": 8}, 0),
           (OP.LOAD, {"load1.addr": 128}, 1), (OP.RUN, {}, 0), (OP.SAVE, {}, 1),
           (OP.END, {}, 0)]
    words = isa.assemble(CFG, ops)
    for at in (1, 2):
        (got,) = run_programs([(words, len(words))], seed=rng.randint(0, 99), dma_error_at=at,
                              hit_rate=0)
        trace, code = got
        assert code == ERROR_DMA_BUS | 3
        assert [op for op, *_ in trace] == [OP.STEP] + [OP.LOAD] * at


def test_assemble_writes_only_changed_fields_and_checks_ranges():
    words = isa.assemble(CFG, [(OP.STEP, {}, 0), (OP.RUN, {"run.channels": 3}, 0),
                               (OP.RUN, {"run.channels": 3, "run.height": 0}, 0)])
    assert [isa.decode(w)[0] for w in words] == [OP.STEP, OP.SET, OP.RUN, OP.RUN]
    with pytest.raises(ValueError, match="run.channels"):
        isa.assemble(CFG, [(OP.RUN, {"run.channels": 1 << CFG.dim_width}, 0)])
    with pytest.raises(ValueError, match="no instruction field"):
        isa.assemble(CFG, [(OP.RUN, {"run.nothing": 1}, 0)])


# make test-long: the block's own Verilog with its cocotb testbench (its modules run under
# Verilator inside the accelerator's native tests in make test; the build is what costs)
@pytest.mark.cocotb
@pytest.mark.long
def test_dispatcher_verilator():
    """The generated Verilog under Verilator (bpsa.sim.testbenches.tb_dispatcher)."""
    from bpsa.config import load_config
    from bpsa.sim.runner import run_cocotb
    tests, failures = run_cocotb(load_config("small"), "bpsa.sim.testbenches.tb_dispatcher",
                                 top="dispatcher")
    assert tests == 1 and failures == 0
