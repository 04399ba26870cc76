"""The loop walker against the host's plan: for random layers of every phase, the walker
(with the shared multiplier / divider, and stand-ins for the load unit and the step scheduler
that answer after random delays) asks for as many runs and saves as many steps as
:func:`bpsa.plan.tiling.plan` / ``fc_plan`` count, and every load lies inside its tensor."""

import random

from amaranth.hdl import Module
from amaranth.sim import Simulator

from bpsa.config import Config
from bpsa.gateware.controller.walker import LoopWalker
from bpsa.gateware.seq_arith import SeqMulDiv
from bpsa.plan import setup, tiling
from bpsa.plan.grammar import Refusal
from bpsa.spec.layer import ConvLayer
from bpsa.spec.regmap import Phase

CFG = Config(name="walk", rows=2, cols=3, buf_a_depth=128, buf_b_depth=128, buf_p_depth=64,
             feeder_bus_width=4, dim_width=8, pool_kinds=("max", "avg"), buf_pool_depth=128,
             forward_frontends=("feeder", "channel_first"), buf_cf_depth=64)
ADDR = {"addr_x": 0x10000, "addr_w": 0x20000, "addr_dy": 0x30000, "addr_out": 0x40000}


def _ceil(a, b):
    return -(-a // b)


def random_layer(rng):
    """A descriptor the controller plans, with its run and step counts."""
    while True:
        phase = rng.choice(list(Phase))
        if phase == Phase.FC_BACKWARD:
            n, c, k = rng.randint(1, 9), rng.randint(1, 40), rng.randint(1, 20)
            desc = dict(phase=phase, n=n, c=c, h=1, w=1, k=k, r=1, s=1, stride_h=1,
                        stride_w=1, pad_h=0, pad_w=0, dil_h=1, dil_w=1, **ADDR)
            try:
                p = tiling.fc_plan(CFG, n, c, k)
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
                p = tiling.pool_plan(CFG, phase.name.lower(), desc["n"], desc["c"], desc["h"],
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
            p = tiling.plan(CFG, name, layer,
                            mode="channel_first" if desc.get("mode") == 2 else "bp_im2col")
        except ValueError:
            continue
        n, c, k = desc["n"], desc["c"], desc["k"]
        oh = setup.run(CFG, desc)["oh"]
        if name == "forward":
            steps = n * p["kblocks"] * _ceil(oh, p["band"])
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
        kt = _ceil(k, CFG.cols)
        cl = min(c, CFG.rows)           # channel-first: X channel-blocked HWC
        xsize = n * _ceil(c, cl) * h * w * cl if desc.get("mode") == 2 else n * c * h * w
        sizes = {"addr_x": xsize, "addr_dy": n * k * ohow,
                 "addr_w": kt * crs * CFG.cols if desc["phase"] == Phase.FORWARD else k * crs}
    return [(ADDR[name], ADDR[name] + size) for name, size in sizes.items()]


def test_walker_runs_and_steps_match_the_plan():
    m = Module()
    walker = m.submodules.walker = LoopWalker(CFG, tuple(Phase))
    alu = m.submodules.alu = SeqMulDiv(setup.UNIT_WIDTH)
    m.d.comb += [alu.start.eq(walker.alu.start), alu.op.eq(walker.alu.op),
                 alu.a.eq(walker.alu.a), alu.b.eq(walker.alu.b),
                 walker.alu.busy.eq(alu.busy), walker.alu.done.eq(alu.done),
                 walker.alu.result.eq(alu.result), walker.alu.overflow.eq(alu.overflow)]
    rng = random.Random(8)
    layers = [random_layer(rng) for _ in range(56)]
    seen, banded = set(), []
    cf = 0

    async def bench(ctx):
        nonlocal cf
        for desc, want_runs, want_steps in layers:
            try:
                regs = setup.run(CFG, desc)
            except Refusal as e:
                raise AssertionError(f"{desc} refused: {e}")
            for f, v in desc.items():
                if f == "phase":
                    ctx.set(walker.desc.phase.as_value(), int(v))
                elif not f.startswith("window"):
                    ctx.set(getattr(walker.desc, f), v)
            for name in setup.PLAN_REGISTERS:
                ctx.set(getattr(walker.plan, name), regs[name])
            ctx.set(walker.go, 1)
            await ctx.tick()
            ctx.set(walker.go, 0)
            runs = saves = 0
            load_wait = run_wait = None
            ranges = tensor_bytes(desc, regs)
            for cycle in range(200000):
                ctx.set(walker.load.ready, 0)
                ctx.set(walker.load_done, 0)
                ctx.set(walker.started, 0)
                ctx.set(walker.finished, 0)
                if ctx.get(walker.load.valid) and load_wait is None:
                    p = walker.load.payload
                    first, count = ctx.get(p.addr), ctx.get(p.count)
                    run_len, stride = ctx.get(p.run_len), ctx.get(p.stride)
                    last = first + (count - 1) * stride + run_len
                    assert any(lo <= first and last <= hi for lo, hi in ranges), \
                        (desc, hex(first), hex(last))
                    ctx.set(walker.load.ready, 1)
                    load_wait = rng.randint(0, 3)
                elif load_wait is not None:
                    if load_wait == 0:
                        ctx.set(walker.load_done, 1)
                        load_wait = None
                    else:
                        load_wait -= 1
                if ctx.get(walker.run_req) or ctx.get(walker.last):
                    if run_wait is None:
                        run_wait = rng.randint(0, 4)
                    elif run_wait == 0:
                        ctx.set(walker.started if ctx.get(walker.run_req) else walker.finished,
                                1)
                        runs += ctx.get(walker.run_req)
                        run_wait = None
                    else:
                        run_wait -= 1
                saves += ctx.get(walker.save)
                assert not ctx.get(walker.fail), desc
                done = ctx.get(walker.done)
                await ctx.tick()
                if done:
                    break
            else:
                raise AssertionError(f"the walker did not finish {desc}")
            assert (runs, saves) == (want_runs, want_steps), desc
            seen.add(int(desc["phase"]))
            cf += desc.get("mode") == 2
            banded.append(regs["banded"] and desc["phase"] != Phase.FC_BACKWARD)

    sim = Simulator(m)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert seen == {int(p) for p in Phase} and sum(banded) >= 3 and cf >= 3
