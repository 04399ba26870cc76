"""The host's instruction stream against the RTL loop walker: for random layers of every phase
and mode the walker runs (banded ones, several images, strides 1-3, padding, dilation,
rectangular shapes), :func:`bpsa.plan.program.layer_program` equals, event for event, the
trace of :class:`bpsa.gateware.controller.walker.LoopWalker` (with the shared multiplier /
divider, a load unit that answers after random delays or at once with ``hit``, and a step
scheduler that starts and finishes after random delays and toggles its bank at each start)."""

import random
from dataclasses import fields

import pytest
from amaranth.hdl import Module
from amaranth.sim import Simulator

from bpsa.config import Config, load_config
from bpsa.gateware.controller.load_unit import Cache, Target
from bpsa.gateware.controller.walker import LoopWalker
from bpsa.gateware.seq_arith import SeqMulDiv
from bpsa.plan import program, setup
from bpsa.plan.grammar import Refusal
from bpsa.plan.program import (RUN_FIELDS, Last, Load, Run, Save, Save2, Step, layer_program,
                               layer_program_state, program_key)
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


def _run_signals(walker):
    """Run field -> the walker's output signal."""
    out = {}
    for f in fields(Run):
        for group in (walker.run, walker.zrun, walker.prun, walker.geometry):
            if f.name in group.shape().members:
                out[f.name] = getattr(group, f.name)
                break
        else:
            assert f.name == "xbank"
            out[f.name] = walker.xbank
    return out


def _int(v):
    return v.value if isinstance(v, (Target, Cache)) else int(v)


def walker_traces(cfg, layers, seed, hit_rate=0.3):
    """Simulate the walker on ``layers`` one after the other: for each, ``(xbank, events,
    xbank_after, hits)``: its X bank register at the start, the trace, and at the end."""
    m = Module()
    walker = m.submodules.walker = LoopWalker(cfg, setup.generated_phases(cfg))
    alu = m.submodules.alu = SeqMulDiv(setup.UNIT_WIDTH)
    m.d.comb += [alu.start.eq(walker.alu.start), alu.op.eq(walker.alu.op),
                 alu.a.eq(walker.alu.a), alu.b.eq(walker.alu.b),
                 walker.alu.busy.eq(alu.busy), walker.alu.done.eq(alu.done),
                 walker.alu.result.eq(alu.result), walker.alu.overflow.eq(alu.overflow)]
    rng = random.Random(seed)
    run_sig = _run_signals(walker)
    p = walker.load.payload
    out = []

    async def bench(ctx):
        for desc in layers:
            regs = setup.run(cfg, desc)
            key = program_key(desc)
            for f, v in desc.items():
                if f == "phase":
                    ctx.set(walker.desc.phase.as_value(), int(v))
                else:
                    ctx.set(getattr(walker.desc, f), int(v))
            for name in setup.PLAN_REGISTERS:
                ctx.set(getattr(walker.plan, name), regs[name])
            xbank0 = ctx.get(walker.xbank)
            bank = 0                       # the scheduler's: 0 at the layer's start
            ctx.set(walker.bank, bank)
            ctx.set(walker.go, 1)
            await ctx.tick()
            ctx.set(walker.go, 0)
            events, hits, seen_last = [], 0, False
            load_wait = run_wait = None
            for cycle in range(400000):
                ctx.set(walker.bank, bank)
                ctx.set(walker.load.ready, 0)
                ctx.set(walker.load_hit, 0)
                ctx.set(walker.load_done, 0)
                ctx.set(walker.started, 0)
                ctx.set(walker.finished, 0)
                if ctx.get(walker.new_step):
                    events.append(Step())
                if ctx.get(walker.load.valid) and load_wait is None:
                    ctx.set(walker.load.ready, 1)
                    events.append(Load(**{f.name: _int(ctx.get(getattr(p, f.name)))
                                          for f in fields(Load)}))
                    if rng.random() < hit_rate:
                        ctx.set(walker.load_hit, 1)      # the bank holds the slice: no wait
                        hits += 1
                    else:
                        load_wait = rng.randint(0, 3)
                elif load_wait is not None:
                    if load_wait == 0:
                        ctx.set(walker.load_done, 1)
                        load_wait = None
                    else:
                        load_wait -= 1
                started = False
                if ctx.get(walker.run_req) or ctx.get(walker.last):
                    if run_wait is None:
                        run_wait = rng.randint(0, 4)
                    elif run_wait == 0:
                        started = bool(ctx.get(walker.run_req))
                        ctx.set(walker.started if started else walker.finished, 1)
                        run_wait = None
                    else:
                        run_wait -= 1
                if started:
                    events.append(Run(**{f: int(ctx.get(run_sig[f]))
                                         for f in RUN_FIELDS[key]}))
                save, final = ctx.get(walker.save), ctx.get(walker.final)
                if save:
                    s = walker.save_step
                    events.append(Save(rows=ctx.get(s.rows), length=ctx.get(s.length),
                                       nb=ctx.get(s.nb), stride=ctx.get(s.stride),
                                       addr=ctx.get(s.addr), final=bool(final)))
                elif final:
                    events.append("final without save")
                if ctx.get(walker.save2):
                    assert save, "save2 without save"
                    s2 = walker.save2_step
                    events.append(Save2(rows=ctx.get(s2.rows), p0=ctx.get(s2.p0),
                                        addr=ctx.get(s2.addr)))
                if ctx.get(walker.last) and not seen_last:
                    events.append(Last())
                    seen_last = True
                assert not ctx.get(walker.fail), desc
                done = ctx.get(walker.done)
                await ctx.tick()
                if started:
                    bank ^= 1                # the scheduler toggles its bank as a run starts
                if done:
                    break
            else:
                raise AssertionError(f"the walker did not finish {desc}")
            out.append((xbank0, events, ctx.get(walker.xbank), hits))

    sim = Simulator(m)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    return out


def _check(cfg, layers, traces):
    for desc, (xbank0, got, xbank1, _) in zip(layers, traces):
        want, want_xbank = layer_program_state(cfg, desc, xbank=xbank0)
        if got != want:
            for i, (a, b) in enumerate(zip(got, want)):
                if a != b:
                    raise AssertionError(f"{desc}: event {i}: walker {a}, program {b}")
            raise AssertionError(f"{desc}: walker {len(got)} events, program {len(want)}")
        assert xbank1 == want_xbank, desc


def test_program_equals_the_walker_on_random_layers():
    rng = random.Random(11)
    layers = random_layers(rng, CFG, program.PHASES, 5)
    traces = walker_traces(CFG, layers, seed=3)
    _check(CFG, layers, traces)
    keys = {program_key(d) for d in layers}
    assert keys == set(program.PHASES)
    plans = [setup.run(CFG, d) for d in layers]
    banded = [program_key(d) for d, p in zip(layers, plans)
              if p["banded"] and d["phase"] != Phase.FC_BACKWARD]
    assert len(banded) >= 8 and len(set(banded)) >= 6, banded
    pools = {(d["phase"], d["pool_kind"], d["relu"]) for d in layers
             if program_key(d).startswith("pool")}
    assert {(k, r) for _, k, r in pools} >= {(0, 0), (1, 0), (0, 1)}, pools
    assert any(d["n"] > 1 for d in layers) and any(d["h"] != d["w"] for d in layers)
    assert {d["stride_h"] for d in layers} >= {1, 2, 3}
    assert any(d["dil_h"] > 1 for d in layers) and any(d["pad_h"] for d in layers)
    assert sum(t[3] for t in traces) > 20          # loads answered with hit
    # the traces hold every kind of event, and each layer ends with its final save and Last
    kinds = {type(e) for _, ev, _, _ in traces for e in ev}
    assert kinds == {Step, Load, Run, Save, Save2, Last}
    for _, ev, _, _ in traces:
        assert isinstance(ev[-1], Last)
        saves = [e for e in ev if isinstance(e, Save)]
        assert saves[-1].final and not any(s.final for s in saves[:-1])


def test_hits_do_not_change_the_trace():
    rng = random.Random(5)
    layers = random_layers(rng, CFG, ("forward", "zf_loss", "fc", "pool_backward"), 1,
                           max_runs=12)
    never = walker_traces(CFG, layers, seed=1, hit_rate=0.0)
    always = walker_traces(CFG, layers, seed=1, hit_rate=1.0)
    assert [t[1] for t in never] == [t[1] for t in always]
    assert sum(t[3] for t in always) > 0 and sum(t[3] for t in never) == 0


def test_program_equals_the_walker_in_a_larger_config():
    cfg = load_config("small_cf")              # 4 x 4, 1,024-word buffers, both front ends
    rng = random.Random(2)
    layers = random_layers(rng, cfg, program.PHASES, 2, max_runs=16, scale=2)
    _check(cfg, layers, walker_traces(cfg, layers, seed=4))
    assert {program_key(d) for d in layers} == set(program.PHASES)
    assert sum(setup.run(cfg, d)["banded"] for d in layers
               if d["phase"] != Phase.FC_BACKWARD) >= 4


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
