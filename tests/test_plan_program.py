"""The host's loops (:func:`bpsa.plan.program.layer_program`) on random layers of every phase and
mode (banded ones, several images, strides 1-3, padding, dilation, rectangular shapes): as many
runs and steps as the planner counts, loads inside their tensors, well-formed programs that
assemble, refusals as the set-up's. Until the on-chip walker was removed, this file compared
the programs event for event with its RTL (at 399711c: 45 + 18 random layers of the nine
programs, loads answered with and without ``hit``); the whole-accelerator tests now check the
programs' results bit-exactly."""

import random
from dataclasses import fields

import pytest

from bpsa.config import Config, load_config
from bpsa.gateware.control.load_unit import Cache, Target
from bpsa.plan import program, setup
from bpsa.plan.grammar import Refusal
from bpsa.plan.program import (RUN_FIELDS, Last, Load, Run, Save, Save2, Step, layer_program,
                               layer_program_state, program_key)
from bpsa.plan import tiling
from bpsa.spec.layer import ConvLayer
from bpsa.spec.regmap import Mode, Phase, PoolKind

#: The walker test's configuration (every phase, both forward front ends; its default
#: backward_modes hold both modes: feeder_bus_width >= cols for the zero-free loss).
CFG = Config(name="walk", rows=2, cols=3, buf_a_depth=128, buf_b_depth=128, buf_p_depth=64,
             feeder_bus_width=4, dim_width=8, pool_kinds=("max", "avg"), buf_pool_depth=128,
             forward_frontends=("feeder", "channel_first"), buf_cf_depth=64)
ADDR = {"addr_x": 0x10000, "addr_w": 0x20000, "addr_dy": 0x30000, "addr_out": 0x40000}
#: Runs a layer may have at most (the simulator is slow).
MAX_RUNS = 40


def test_config_generates_every_program():
    assert set(CFG.backward_modes) == {"bp_im2col", "zero_free"}
    keys = {program_key({"phase": p, "mode": int(mo or 0)})
            for _, p, mo in setup.programs(CFG, setup.generated_phases(CFG))}
    assert keys == set(program.PHASES)


def test_load_enums_match_the_load_unit():
    assert program.TARGET == {t.name: t.value for t in Target}
    assert program.CACHE == {c.name: c.value for c in Cache}


def random_desc(rng, cfg, key, big, scale=1):
    """A descriptor of program ``key`` (any; it may be refused); ``big``: large planes (row
    bands in ``CFG``; ``scale`` times larger)."""
    base = dict(mode=0, requant=0, relu=0, pool_kind=0, dil_h=1, dil_w=1, **ADDR)
    if key == "fc":
        return dict(base, phase=Phase.FC_BACKWARD, n=rng.randint(1, 9), c=rng.randint(1, 40),
                    h=1, w=1, k=rng.randint(1, 20), r=1, s=1, stride_h=1, stride_w=1,
                    pad_h=0, pad_w=0)
    r, s = rng.randint(1, 3), rng.randint(1, 3)
    lo, hi = (8 * scale, 24 * scale) if big else (1, 8)
    if key.startswith("pool"):
        return dict(base, phase=Phase.POOL_FORWARD if key == "pool_forward"
                    else Phase.POOL_BACKWARD, n=rng.randint(1, 2), c=rng.randint(1, 4),
                    h=rng.randint(max(r, lo), hi), w=rng.randint(max(s, lo), hi), k=0, r=r,
                    s=s,
                    stride_h=rng.randint(1, 3), stride_w=rng.randint(1, 3),
                    pad_h=rng.randint(0, r // 2), pad_w=rng.randint(0, s // 2),
                    pool_kind=rng.choice([PoolKind.MAX, PoolKind.AVG]),
                    relu=int(rng.random() < 0.4))
    dil = (rng.choice([1, 1, 2]), rng.choice([1, 1, 2]))
    drh, drw = dil[0] * (r - 1), dil[1] * (s - 1)
    phase = {"forward": Phase.FORWARD, "cf_forward": Phase.FORWARD, "loss": Phase.LOSS,
             "gradient": Phase.GRADIENT, "zf_loss": Phase.LOSS,
             "zf_gradient": Phase.GRADIENT}[key]
    mode = (Mode.CHANNEL_FIRST if key == "cf_forward" else
            Mode.ZERO_FREE if key.startswith("zf") else 0)
    lo, hi = (10 * scale, 28 * scale) if big else (1, 7)
    return dict(base, phase=phase, mode=int(mode), n=rng.randint(1, 3), c=rng.randint(1, 6),
                h=rng.randint(max(drh + 1, lo), hi), w=rng.randint(max(drw + 1, lo), hi),
                k=rng.randint(1, 7), r=r, s=s, dil_h=dil[0], dil_w=dil[1],
                stride_h=rng.randint(1, 3), stride_w=rng.randint(1, 3),
                pad_h=rng.randint(0, max(0, min(drh, 2))), pad_w=rng.randint(0, min(drw + 1, 2)),
                requant=int(key in ("forward", "cf_forward", "zf_loss") and rng.random() < 0.4),
                relu=int(key in ("forward", "cf_forward") and rng.random() < 0.3))


def random_layers(rng, cfg, keys, per_key, max_runs=MAX_RUNS, scale=1):
    """``per_key`` descriptors of each program in ``keys`` that the set-up accepts and that
    have at most ``max_runs`` runs; every other one with large planes (:func:`random_desc`)."""
    out = []
    for i in range(per_key):
        for key in keys:
            while True:
                desc = random_desc(rng, cfg, key, big=i % 2 == 1, scale=scale)
                try:
                    events = layer_program(cfg, desc)
                except Refusal:
                    continue
                if sum(isinstance(e, Run) for e in events) <= max_runs:
                    out.append(desc)
                    break
    return out


#: The old walker test's configuration (plan counts below are for it).
PCFG = CFG


def _ceil(a, b):
    return -(-a // b)


def planned_layer(rng):
    """A descriptor the controller plans, with its run and step counts."""
    while True:
        phase = rng.choice(list(Phase))
        if phase == Phase.FC_BACKWARD:
            n, c, k = rng.randint(1, 9), rng.randint(1, 40), rng.randint(1, 20)
            desc = dict(phase=phase, n=n, c=c, h=1, w=1, k=k, r=1, s=1, stride_h=1,
                        stride_w=1, pad_h=0, pad_w=0, dil_h=1, dil_w=1, **ADDR)
            try:
                p = tiling.fc_plan(PCFG, n, c, k)
            except ValueError:
                continue
            return desc, p["runs"], _ceil(c, p["fib"]) * _ceil(n, p["fnb"])
        r, s = rng.randint(1, 3), rng.randint(1, 3)
        if phase in (Phase.POOL_FORWARD, Phase.POOL_BACKWARD):
            kind, relu = rng.choice(["max", "avg"]), rng.random() < 0.3
            st, pad = (rng.randint(1, 3), rng.randint(1, 3)), (rng.randint(0, r // 2),
                                                               rng.randint(0, s // 2))
            desc = dict(phase=phase, n=rng.randint(1, 2), c=rng.randint(1, 5),
                        h=rng.randint(r, 20), w=rng.randint(s, 14), k=0, r=r, s=s,
                        stride_h=st[0], stride_w=st[1], pad_h=pad[0], pad_w=pad[1], dil_h=1,
                        dil_w=1, pool_kind=int(kind == "avg"), relu=int(relu), **ADDR)
            try:
                p = tiling.pool_plan(PCFG, phase.name.lower(), desc["n"], desc["c"], desc["h"],
                                     desc["w"], r, s, st, pad, kind, relu)
            except ValueError:
                continue
            return desc, len(p["runs"]), len(p["runs"])
        desc = dict(phase=phase, n=rng.randint(1, 2), c=rng.randint(1, 5),
                    h=rng.randint(r, 14), w=rng.randint(s, 14), k=rng.randint(1, 7), r=r, s=s,
                    stride_h=rng.randint(1, 2), stride_w=rng.randint(1, 2),
                    pad_h=rng.randint(0, r - 1), pad_w=rng.randint(0, s - 1), dil_h=1,
                    dil_w=1, mode=0, **ADDR)
        layer = ConvLayer.conv(desc["n"], desc["c"], desc["h"], desc["w"], desc["k"], r, s,
                               (desc["stride_h"], desc["stride_w"]),
                               (desc["pad_h"], desc["pad_w"]))
        name = {Phase.FORWARD: "forward", Phase.LOSS: "loss", Phase.GRADIENT: "gradient"}[phase]
        if phase == Phase.FORWARD and rng.random() < 0.5:      # the channel-first front end
            desc["mode"] = 2
        try:
            p = tiling.plan(PCFG, name, layer,
                            mode="channel_first" if desc.get("mode") == 2 else "bp_im2col")
        except ValueError:
            continue
        n, c, k = desc["n"], desc["c"], desc["k"]
        oh = setup.run(PCFG, desc)["oh"]
        if name == "forward":
            steps = _ceil(n, p["images"]) * p["kblocks"] * _ceil(oh, p["band"])
        elif name == "loss":
            steps = n * p["bands"] * p["cblocks"]
        else:
            steps = p["kblocks"] * _ceil(c, p["group"][0])
        return desc, p["runs"], steps


def tensor_bytes(desc, regs):
    """(start, end) of the operand tensors of ``desc`` (1-byte operands)."""
    n, c, h, w, k = (desc[f] for f in "nchwk")
    ohow, crs = regs["oh"] * regs["ow"], c * desc["r"] * desc["s"]
    if desc["phase"] in (Phase.POOL_FORWARD, Phase.POOL_BACKWARD):
        sizes = {"addr_x": n * c * h * w, "addr_dy": n * c * ohow}
    elif desc["phase"] == Phase.FC_BACKWARD:
        sizes = {"addr_x": n * c, "addr_w": k * c, "addr_dy": n * k}
    else:
        kt = _ceil(k, PCFG.cols)
        cl = min(c, PCFG.rows)           # channel-first: X channel-blocked HWC
        xsize = n * _ceil(c, cl) * h * w * cl if desc.get("mode") == 2 else n * c * h * w
        sizes = {"addr_x": xsize, "addr_dy": n * k * ohow,
                 "addr_w": kt * crs * PCFG.cols if desc["phase"] == Phase.FORWARD else k * crs}
    return [(ADDR[name], ADDR[name] + size) for name, size in sizes.items()]


def test_programs_follow_the_plan():
    """For random layers of every phase the planner's loops (:func:`bpsa.plan.tiling.plan`
    etc.) count, the program runs as many groups and saves as many steps, and every load lies
    inside its tensor."""
    rng = random.Random(8)
    seen = set()
    for _ in range(120):
        desc, want_runs, want_steps = planned_layer(rng)
        events = layer_program(PCFG, desc)
        ranges = tensor_bytes(desc, setup.run(PCFG, desc))
        for e in events:
            if isinstance(e, Load):
                last = e.addr + (e.count - 1) * e.stride + e.run_len
                assert any(lo <= e.addr and last <= hi for lo, hi in ranges), (desc, e)
        runs = sum(isinstance(e, Run) for e in events)
        saves = sum(isinstance(e, Save) for e in events)
        assert (runs, saves) == (want_runs, want_steps), desc
        seen.add(int(desc["phase"]))
    assert seen == {int(p) for p in Phase}


def test_programs_are_well_formed_and_assemble():
    """Every program of every kind starts a step before its first run, saves each step after
    a run, marks only its last save final, ends with Last, and assembles into words that the
    instruction set's model runs to END with the same instructions."""
    from bpsa.plan.instructions import RUN_STRUCT, layer_ops, program_words
    from bpsa.spec import isa
    rng = random.Random(11)
    layers = random_layers(rng, CFG, program.PHASES, 4)
    assert {program_key(d) for d in layers} == set(program.PHASES)
    assert sum(setup.run(CFG, d)["banded"] for d in layers
               if d["phase"] != Phase.FC_BACKWARD) >= 4
    kinds = set()
    op_of = {Step: isa.Opcode.STEP, Load: isa.Opcode.LOAD, Run: isa.Opcode.RUN,
             Save: isa.Opcode.SAVE, Save2: isa.Opcode.SAVE2, Last: isa.Opcode.END}
    for desc in layers:
        events = layer_program(CFG, desc)
        kinds |= {type(e) for e in events}
        assert isinstance(events[0], Step) and isinstance(events[-1], Last), desc
        saves = [e for e in events if isinstance(e, Save)]
        assert saves[-1].final and not any(s.final for s in saves[:-1]), desc
        words = program_words(CFG, desc)
        trace, code = isa.execute(CFG, words)
        assert code == 0, desc
        assert [op for op, *_ in trace] == [op_of[type(e)] for e in events], desc
        # the runs see the fields of their phase as planned, and the layer's descriptor
        for (op, state, _), e in zip(trace, events):
            if isinstance(e, Run):
                for name in RUN_FIELDS[program_key(desc)]:
                    assert state[f"{RUN_STRUCT[name]}.{name}"] == getattr(e, name), (desc, name)
                for field in ("phase", "c", "h", "w", "k", "r", "s"):
                    assert state[f"layer.{field}"] == int(desc[field]), (desc, field)
        assert len(layer_ops(CFG, desc)) == len(events)
    assert kinds == {Step, Load, Run, Save, Save2, Last}


def test_walker_arithmetic_overflow_is_a_refusal():
    walk = program._Walk(CFG, {"phase": Phase.FORWARD, "requant": 0}, {}, 0)
    assert walk.mul(1 << 24, (1 << 24) - 1) == (1 << 48) - (1 << 24)
    with pytest.raises(Refusal):
        walk.mul(1 << 24, 1 << 24)
    with pytest.raises(Refusal):
        walk.div(5, 0)


@pytest.mark.parametrize("desc", [
    dict(phase=Phase.FORWARD, n=1, c=1, h=4, w=4, k=1, r=5, s=1, stride_h=1, stride_w=1,
         pad_h=0, pad_w=0, dil_h=1, dil_w=1),                  # kernel larger than the input
    dict(phase=Phase.FC_BACKWARD, n=1, c=4, h=2, w=1, k=3, r=1, s=1, stride_h=1, stride_w=1,
         pad_h=0, pad_w=0, dil_h=1, dil_w=1),                  # an FC layer with H = 2
    dict(phase=Phase.FC_BACKWARD, n=1, c=4, h=1, w=1, k=64, r=1, s=1, stride_h=1,
         stride_w=1, pad_h=0, pad_w=0, dil_h=1, dil_w=1),      # dW rows do not fit P
    dict(phase=Phase.LOSS, mode=3, n=1, c=1, h=4, w=4, k=1, r=1, s=1, stride_h=1,
         stride_w=1, pad_h=0, pad_w=0, dil_h=1, dil_w=1),      # no such mode
])
def test_a_refused_layer_raises_refusal(desc):
    with pytest.raises(Refusal) as want:
        setup.run(CFG, desc)
    with pytest.raises(Refusal) as got:
        layer_program(CFG, desc)
    assert got.value.code == want.value.code


def test_load_pieces_cover_every_element_once():
    """A load cut for the runs before it (``program._pieces``): every (bus address, buffer
    word) of the load in exactly one piece, for any number of pieces; one piece of a load of
    several runs is the load (a cut that dropped the first runs' words ran the zero-free
    gradient's second step of stacked images on stale X)."""
    def elements(ld):
        out = []
        for run in range(ld.count):
            for e in range(ld.run_len):
                out.append((ld.addr + run * ld.stride + e * 2,
                            ld.offset + run * ld.run_words + e // ld.lanes, e % ld.lanes))
        return out
    rng = random.Random(7)
    for _ in range(300):
        lanes = rng.choice((4, 8))
        words = rng.randint(1, 9)
        count = rng.randint(1, 4)
        run_len = words * lanes - rng.randint(0, lanes - 1)
        ld = Load(target=0, cache=0, bank=1, offset=rng.randint(0, 40), addr=rng.randint(0, 99) * 2,
                  length=count * run_len, lanes=lanes, count=count, run_len=run_len,
                  run_words=words, stride=2 * words * lanes * rng.randint(1, 3))
        parts = rng.randint(1, 12)
        pieces = program._pieces(ld, parts, 2)
        assert 1 <= len(pieces) <= parts
        assert sorted(e for p in pieces for e in elements(p)) == sorted(elements(ld))
    assert program._pieces(ld, 1, 2) == [ld]
