"""cocotb testbench of the instruction dispatcher (generated Verilog of the top ``dispatcher``
under Verilator) against the instruction set's model (:func:`bpsa.spec.isa.execute`): random
well-formed programs with gaps in the instruction stream and stand-ins of the load unit and the
step scheduler that answer after random delays, then each malformed word and order."""

import os
import random

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ReadOnly, RisingEdge

from bpsa.config import Config
from bpsa.sim.runner import load_config_json
from bpsa.spec import isa
from bpsa.spec.errors import ERROR_PROGRAM, ProgramError

OP = isa.Opcode
#: The structs each instruction hands on, and their Verilog port prefixes.
SEEN = {OP.LOAD: ("load",), OP.RUN: ("layer", "run", "zrun", "prun", "geometry"),
        OP.SAVE: ("save",), OP.SAVE2: ("save2",), OP.STEP: (), OP.END: ()}
PORT = {"load": "load__payload", "save": "save_step", "save2": "save2_step"}


def random_ops(rng, table, groups):
    """A random well-formed program: steps of groups (loads, a run), saves, END."""
    def values(*structs):
        return {f.key: rng.choice([0, (1 << f.bits) - 1, rng.getrandbits(f.bits)])
                for f in table if f.struct in structs and rng.random() < 0.5}
    ops = []
    for g in range(groups):
        if g == 0 or rng.random() < 0.4:
            ops.append((OP.STEP, {}, 0))
        for _ in range(rng.randint(0, 2)):
            slot = rng.randint(0, 1)
            ops.append((OP.LOAD, values(("load", "load1")[slot]), slot))
        ops.append((OP.RUN, values("layer", "run", "zrun", "prun", "geometry"),
                    rng.choice([0, isa.RUN_HOLD])))
        if rng.random() < 0.5:
            ops.append((OP.SAVE, values("save"), rng.randint(0, 1)))
            if rng.random() < 0.3:
                ops.append((OP.SAVE2, values("save2"), 0))
    return ops + [(OP.END, {}, 0)]


def snapshot(dut, table, structs):
    """The fields of ``structs`` on the dispatcher's ports (a port a struct, its fields from
    bit 0 in table order)."""
    out = {}
    for struct in structs:
        bits, lsb = int(getattr(dut, PORT.get(struct, struct)).value), 0
        for f in table:
            if f.struct == struct:
                out[f.key] = (bits >> lsb) & ((1 << f.bits) - 1)
                lsb += f.bits
    return out


async def run_program(dut, table, words, rng):
    """The dispatcher's trace of ``words`` and the code it ends with."""
    dut.start.value = 1
    await RisingEdge(dut.clk)
    dut.start.value = 0
    trace, pos, load_wait, run_wait = [], 0, None, None
    for _ in range(20000):
        give = pos < len(words) and rng.random() < 0.7
        dut.insn__valid.value = int(give)
        dut.insn__payload.value = words[pos] if give else 0
        dut.insn_end.value = int(pos >= len(words))
        for name in ("load__ready", "load_done", "started", "finished",
                     "load_error", "sched_fail", "sched_code"):
            getattr(dut, name).value = 0
        await ReadOnly()
        load_valid, run_req, last = (int(dut.load__valid.value), int(dut.run_req.value),
                                     int(dut.last.value))
        events, code = [], None
        if int(dut.new_step.value):
            events.append((OP.STEP, {}, 0))
        if int(dut.save.value):
            events.append((OP.SAVE, snapshot(dut, table, SEEN[OP.SAVE]), int(dut.final_step.value)))
        if int(dut.save2.value):
            events.append((OP.SAVE2, snapshot(dut, table, SEEN[OP.SAVE2]), 0))
        if int(dut.fail.value):
            code = int(dut.fail_code.value)
        taken = give and int(dut.insn__ready.value)
        load_snap = snapshot(dut, table, SEEN[OP.LOAD]) if load_valid else None
        run_snap = snapshot(dut, table, SEEN[OP.RUN]) if run_req else None
        run_hold = int(dut.run_hold.value)
        await RisingEdge(dut.clk)
        # stand-ins answer in the next cycle, from what they saw (the dispatcher holds its
        # requests until answered)
        trace += events
        pos += taken
        if code is not None:
            return trace, code
        answers = {}
        if load_valid and load_wait is None and rng.random() < 0.5:
            answers["load__ready"] = 1
            trace.append((OP.LOAD, load_snap, 0))
            # a hit answers the next cycle, a DMA load after a while
            load_wait = 1 if rng.random() < 0.3 else rng.randint(1, 3)
        elif load_wait is not None:
            load_wait -= 1
            if load_wait == 0:
                answers["load_done"] = 1
                load_wait = None
        if (run_req or last) and rng.random() < 0.4:
            answers["started" if run_req else "finished"] = 1
            if run_req:
                trace.append((OP.RUN, run_snap, run_hold))
        if answers:
            # hold the answers for one cycle with the instruction stream idle
            dut.insn__valid.value = 0
            for name, v in answers.items():
                getattr(dut, name).value = v
            await ReadOnly()
            done, fail = int(dut.done.value), int(dut.fail.value)
            code = int(dut.fail_code.value) if fail else (0 if done else None)
            if done:
                trace.append((OP.END, {}, 0))
            await RisingEdge(dut.clk)
            if code is not None:
                return trace, code
    raise AssertionError("the dispatcher neither finished nor failed")


def seen(op, state, flags):
    """What the dispatcher hands on for an instruction (a LOAD: its slot's fields, as the
    ``load`` payload)."""
    if op == OP.LOAD:
        slot = "load1." if flags & isa.LOAD_SLOT else "load."
        return {"load." + k[len(slot):]: v for k, v in state.items() if k.startswith(slot)}
    return {k: v for k, v in state.items() if k.split(".")[0] in SEEN[op]}


def expected(cfg, words):
    trace, code = isa.execute(cfg, words)
    return [(op, seen(op, state, flags), 0 if op == OP.LOAD else flags)
            for op, state, flags in trace], code


@cocotb.test()
async def programs_match_the_model(dut):
    cfg = Config.from_dict(load_config_json())
    table = isa.fields(cfg)
    rng = random.Random(int(os.environ.get("BPSA_SEED", "1")))
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    dut.rst.value = 1
    dut.start.value = 0
    dut.insn__valid.value = 0
    await RisingEdge(dut.clk)
    await RisingEdge(dut.clk)
    dut.rst.value = 0
    narrow = next(i for i, f in enumerate(table) if f.bits < isa.VALUE_BITS)
    programs = [isa.assemble(cfg, random_ops(rng, table, rng.randint(1, 6))) for _ in range(8)]
    programs += [[0], [isa.encode(OP.STEP) | 1 << 49], [isa.encode(OP.RUN)],
                 [isa.encode(OP.SET, len(table), 1)],
                 [isa.encode(OP.SET, narrow, 1 << table[narrow].bits)],
                 [isa.encode(OP.STEP), isa.encode(OP.END)], programs[0][:-1]]
    for words in programs:
        got = await run_program(dut, table, words, rng)
        want = expected(cfg, words)
        assert got == want, (words, got, want)
    assert want[1] == ERROR_PROGRAM | ProgramError.END
