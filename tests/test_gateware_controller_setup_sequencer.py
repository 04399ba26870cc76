"""The set-up sequencer against the host's evaluation of the same programs
(:func:`bpsa.plan.setup.run`), in the Amaranth simulator, on random layers of every phase:
fitting, banded, blocked, refused for size, shape, phase, alignment and window."""

import random

import pytest
from amaranth.hdl import Module
from amaranth.sim import Simulator

from bpsa.config import Config, load_config
from bpsa.gateware.controller.setup_sequencer import SetupSequencer
from bpsa.gateware.seq_arith import SeqMulDiv
from bpsa.plan import setup
from bpsa.plan.grammar import Refusal
from bpsa.spec.errors import AccelError
from bpsa.spec.regmap import Mode, Phase

TINY = Config(name="tiny", rows=2, cols=3, buf_a_depth=64, buf_b_depth=64, buf_p_depth=32,
              dim_width=8, dataflows=("os", "is", "interleaved"))


def random_descriptor(rng, config):
    """A descriptor: mostly layers that fit or need bands, some that are refused."""
    lim = (1 << config.dim_width) - 1
    kind = rng.random()
    phase = rng.choice(list(Phase) + [7])            # 7: a reserved phase
    big = rng.random() < 0.4
    d = {"phase": int(phase), "n": rng.randint(1, 3), "c": rng.randint(1, 200 if big else 6),
         "h": rng.randint(1, 200 if big else 14), "w": rng.randint(1, 200 if big else 14),
         "k": rng.randint(1, 300 if big else 6), "r": rng.randint(1, 7), "s": rng.randint(1, 7),
         "stride_h": rng.randint(1, 3), "stride_w": rng.randint(1, 3),
         "pad_h": rng.randint(0, 3), "pad_w": rng.randint(0, 3),
         "dil_h": rng.randint(1, 2), "dil_w": rng.randint(1, 2),
         "mode": rng.choice([0, 1, 1, 2, 3]),     # 2: channel-first forward; 3: not a mode
         "requant": int(rng.random() < 0.25),     # refused but for forward / zero-free loss
         "relu": int(rng.random() < 0.15),        # refused but for forward / pooling
         "pool_kind": rng.choice([0, 1, 1, 2])}   # 2: not a kind
    if phase == Phase.FORWARD:                    # mostly the feeder (0), some channel-first
        d["mode"] = rng.choice([0, 0, 0, 2, 2, 1])
    if phase in (Phase.POOL_FORWARD, Phase.POOL_BACKWARD) and kind < 0.8:
        d.update(dil_h=1, dil_w=1, pad_h=min(d["pad_h"], d["r"] // 2),
                 pad_w=min(d["pad_w"], d["s"] // 2), pool_kind=rng.choice([0, 1]))
    if phase == Phase.FC_BACKWARD and kind < 0.9:
        d.update(h=1, w=1, r=1, s=1, pad_h=0, pad_w=0, stride_h=1, stride_w=1, dil_h=1,
                 dil_w=1, c=rng.randint(1, 400 if big else 40))
    if kind > 0.95:
        d[rng.choice(["n", "c", "h", "k", "s", "stride_w", "dil_h"])] = 0
    d = {f: min(v, lim) for f, v in d.items()}
    base = rng.choice([0, 0x1000, 0x10000])
    d.update(addr_x=base, addr_w=base + 0x40000, addr_dy=base + 0x80000, addr_out=base + 0xC0000)
    if rng.random() < 0.15:     # misaligned (operands of 8 bits are never misaligned)
        d[rng.choice(["addr_x", "addr_w", "addr_dy", "addr_out", "addr_out"])] += \
            rng.choice([1, 2, 3])
    window = (0, (1 << 32) - 1) if rng.random() < 0.8 else (base, base + rng.randint(0, 1 << 21))
    d.update(window_lo=window[0], window_hi=window[1])
    return d


def host(config, phases, desc):
    """``(error, registers)`` by the host's evaluation."""
    try:
        return AccelError.NONE, setup.run(config, desc, phases=phases)
    except Refusal as e:
        return AccelError(e.code), None


@pytest.mark.parametrize("config,count", [(load_config("small_cf"), 320), (TINY, 160)])
def test_sequencer_equals_host_plan(config, count):
    phases = setup.generated_phases(config)
    if config is TINY:
        phases = (Phase.FORWARD, Phase.GRADIENT)       # some phases not generated
    m = Module()
    seq = m.submodules.seq = SetupSequencer(config, phases)
    alu = m.submodules.alu = SeqMulDiv(setup.UNIT_WIDTH)
    m.d.comb += [alu.start.eq(seq.alu.start), alu.op.eq(seq.alu.op), alu.a.eq(seq.alu.a),
                 alu.b.eq(seq.alu.b), seq.alu.busy.eq(alu.busy), seq.alu.done.eq(alu.done),
                 seq.alu.result.eq(alu.result), seq.alu.overflow.eq(alu.overflow)]
    rng = random.Random(7 if config is TINY else 5)
    descs = [random_descriptor(rng, config) for _ in range(count)]
    # every refusal at least once, whatever the random draw
    plain = dict(phase=int(Phase.GRADIENT), n=1, c=2, h=5, w=5, k=2, r=3, s=3, stride_h=1,
                 stride_w=1, pad_h=1, pad_w=1, dil_h=1, dil_w=1, mode=1, requant=0, relu=0, pool_kind=0,
                 addr_x=0,
                 addr_w=0x1000, addr_dy=0x2000, addr_out=0x3000, window_lo=0,
                 window_hi=(1 << 32) - 1)
    descs += [{**plain, "c": 0}, {**plain, "mode": 3}, {**plain, "phase": 7},
              {**plain, "requant": 1}, {**plain, "relu": 1},
              {**plain, "phase": int(Phase.POOL_FORWARD), "pad_h": 2},
              # requantized outputs are operands: aligned to the operand size only
              {**plain, "phase": int(Phase.FORWARD), "requant": 1, "addr_out": 0x3002}]
    seen = {"refused": set(), "banded": 0, "phases": set(), "programs": set()}

    async def bench(ctx):
        for desc in descs:
            for f in setup.DESCRIPTOR:
                if f in ("window_lo", "window_hi"):
                    ctx.set(getattr(seq, f), desc[f])
                elif f == "phase":
                    ctx.set(seq.desc.payload.phase.as_value(), desc[f])
                else:
                    ctx.set(getattr(seq.desc.payload, f), desc[f])
            ctx.set(seq.desc.valid, 1)
            await ctx.tick()
            ctx.set(seq.desc.valid, 0)
            for _ in range(20000):
                if ctx.get(seq.plan.valid):
                    break
                await ctx.tick()
            else:
                raise AssertionError(f"no plan for {desc}")
            error = AccelError(ctx.get(seq.plan.payload.error.as_value()))
            await ctx.tick()
            want_error, want = host(config, phases, desc)
            assert error == want_error, (desc, error, want_error)
            if error == AccelError.NONE:
                payload = seq.plan.payload
                key = Phase(desc["phase"])
                if key in (Phase.LOSS, Phase.GRADIENT) and desc["mode"] == Mode.ZERO_FREE:
                    key = setup.ZF_LOSS if key == Phase.LOSS else setup.ZF_GRADIENT
                if key == Phase.FORWARD and desc["mode"] == Mode.CHANNEL_FIRST:
                    key = setup.CF_FORWARD
                for name in setup.OUTPUTS[key]:
                    assert ctx.get(getattr(payload, name)) == want[name], (name, desc)
                seen["banded"] += want["banded"]
                seen["phases"].add(desc["phase"])
                seen["programs"].add(key)
            else:
                seen["refused"].add(error)
            assert not ctx.get(seq.busy)

    sim = Simulator(m)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    # the random layers did reach every case
    assert seen["phases"] == {int(p) for p in phases}
    assert seen["banded"] >= (1 if config is TINY else 5)
    assert {AccelError.TOO_LARGE, AccelError.PHASE, AccelError.ZERO_SIZE,
            AccelError.MODE, AccelError.REQUANT} <= seen["refused"]
    assert {setup.ZF_GRADIENT} | ({setup.ZF_LOSS} if Phase.LOSS in phases else set()) \
        <= seen["programs"]
    if config.has_frontend("channel_first"):
        assert setup.CF_FORWARD in seen["programs"]
    if config is not TINY:
        assert {AccelError.ALIGN, AccelError.WINDOW, AccelError.SHAPE, AccelError.POOL,
                AccelError.RELU} <= seen["refused"]
