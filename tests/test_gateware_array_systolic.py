"""The systolic array: GEMMs through every dataflow against numpy (Amaranth simulator and
cocotb/Verilator), the no-stall drain against its closed form, and protocol errors."""

import numpy as np
import pytest
from amaranth.hdl import Elaboratable, Module, Signal
from amaranth.lib.wiring import Out
from amaranth.sim import Simulator

from bpsa.config import DRAIN_REGISTERS, FLOAT_REDUCE_LATENCY, Config, load_config
from bpsa.gateware.array.systolic import SystolicArray, array_signature, share_array
from bpsa.sim.gemm import (
    ArrayShape,
    collect_outputs,
    expected,
    program,
    random_problem,
)

OUT_PORTS = ("drain_valid", "drain_row", "drain_data", "psum_valid", "psum_data")
COUNTERS = ("cycles", "a_words", "b_words", "drained", "psums", "fired", "gated")


def _raw(port):
    """The flat signal behind a port (lane-vector ports are views)."""
    return port.as_value() if hasattr(port, "as_value") else port


class _SharedArray(Elaboratable):
    """One array driven by two users through :func:`share_array`; ``owner`` picks the user."""

    def __init__(self, cfg):
        self.array = SystolicArray(cfg)
        self.users = [array_signature(cfg).flip().create(path=(f"user{i}",)) for i in range(2)]
        self.owner = Signal()

    def elaborate(self, platform):
        m = Module()
        m.submodules.array = self.array
        share_array(m, self.array, [(u, self.owner == i) for i, u in enumerate(self.users)])
        return m


EVENTS = ("drain_valid", "psum_valid", "drain_shift", "busy", "error")


def run_program(cfg, prog, shared_owner=None, timeline=None):
    """Run ``prog`` on the array in the Amaranth simulator; returns (results, counters).
    With ``shared_owner`` (0 or 1) the array is shared by two users and ``prog`` drives user
    ``shared_owner`` while the other user's inputs carry random noise; the other user must see
    no event. ``timeline``: a dict that gets, per event output (``drain_shift``,
    ``drain_valid``, ``psum_valid``), the cycles (indices into ``prog.cycles``) it is high in."""
    if shared_owner is None:
        top = dut = SystolicArray(cfg)
    else:
        top = _SharedArray(cfg)
        dut, idle = top.users[shared_owner], top.users[1 - shared_owner]
        noise = np.random.default_rng(shared_owner)
    shape = ArrayShape.of(cfg)
    drains, psums, counters, seen = [], [], {}, []

    async def tb(ctx):
        if shared_owner is not None:
            ctx.set(top.owner, shared_owner)
        ctx.set(dut.dataflow, prog.static["dataflow"])
        if hasattr(dut, "sgd_en"):
            ctx.set(dut.sgd_en, prog.static.get("sgd_en", 0))
            ctx.set(dut.sgd_shift, prog.static.get("sgd_shift", 0))
        ctx.set(dut.clear, 1)
        await ctx.tick()
        ctx.set(dut.clear, 0)
        for cycle in prog.cycles:
            for port, value in prog.port_values(cycle).items():
                if hasattr(dut, port):
                    ctx.set(_raw(getattr(dut, port)), value)
            if shared_owner is not None:
                for name, member in idle.signature.members.items():
                    if member.flow == Out:        # the array's inputs, seen from a user
                        sig = _raw(getattr(idle, name))
                        ctx.set(sig, int.from_bytes(noise.bytes(len(sig) // 8 + 1), "little")
                                % (1 << len(sig)))
            await ctx.tick()
            if timeline is not None:
                # after the edge that ends cycle k: the registered outputs of cycle k + 1
                for name in ("drain_shift", "drain_valid", "psum_valid"):
                    if hasattr(dut, name) and ctx.get(getattr(dut, name)):
                        timeline.setdefault(name, []).append(len(seen) + 1)
            seen.append(cycle)
            if shared_owner is not None:
                for name in EVENTS:
                    if hasattr(idle, name):
                        assert ctx.get(getattr(idle, name)) == 0, f"idle user saw {name}"
            values = {}
            for p in OUT_PORTS:
                if hasattr(dut, p):
                    values[p] = ctx.get(_raw(getattr(dut, p)))
            drain, psum = collect_outputs(shape, values)
            if drain is not None:
                drains.append(drain)
            if psum is not None:
                psums.append(psum)
        assert ctx.get(dut.error) == 0, "array flagged a protocol error"
        for c in COUNTERS:
            counters[c] = ctx.get(getattr(dut, c))

    sim = Simulator(top)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()
    return prog.assemble(drains, psums), counters


CASES = [
    ("small", "os", (4, 8, 4)), ("small", "os", (7, 5, 9)), ("small", "os", (1, 1, 1)),
    ("small", "ws", (8, 4, 4)), ("small", "ws", (9, 7, 6)), ("small", "ws", (3, 2, 1)),
    ("small", "is", (4, 4, 8)), ("small", "is", (6, 9, 5)),
    ("nonsquare", "os", (7, 11, 12)), ("nonsquare", "ws", (10, 7, 11)),
    ("nonsquare", "is", (5, 8, 13)),
    # floating point: contexts shorter and longer than the context gap, K below five
    ("small_bf16", "os", (7, 23, 9)), ("small_bf16", "os", (4, 3, 4)),
    ("small_fp16", "os", (5, 40, 6)), ("small_fp16", "os", (1, 1, 1)),
]


@pytest.mark.parametrize("preset,flow,dims", CASES)
def test_gemm_matches_numpy(preset, flow, dims):
    cfg = load_config(preset)
    shape = ArrayShape.of(cfg)
    rng = np.random.default_rng(hash((preset, flow, dims)) % 2**32)
    ops = random_problem(shape, flow, dims, rng)
    prog = program(flow, shape, **ops)
    got, counters = run_program(cfg, prog)
    want = expected(flow, shape, **ops)
    for name, mat in want.items():
        np.testing.assert_array_equal(got[name], mat, err_msg=f"{flow} {dims}: {name}")
    assert counters["fired"] + counters["gated"] >= 1


# the floating-point arrays in make test-long (their GEMMs run in make test above and as
# Verilog below)
@pytest.mark.parametrize("preset", ["small", "nonsquare",
                                    *(pytest.param(p, marks=pytest.mark.long)
                                      for p in ("small_bf16", "small_fp16"))])
def test_os_results_do_not_depend_on_bubbles(preset):
    """A feeder that stalls: random idle cycles between the slots of every context change
    when the PEs add, never what (integers trivially; floating point because a slot's
    partial is its count in the context, not its cycle)."""
    cfg = load_config(preset)
    shape = ArrayShape.of(cfg)
    rng = np.random.default_rng(len(preset))
    dims = (cfg.rows + 1, 3 * cfg.rows + 2, cfg.cols + 2)
    ops = random_problem(shape, "os", dims, rng)
    want = expected("os", shape, **ops)
    for p in (0.3, 0.7):
        prog = program("os", shape, stalls=(p, rng), **ops)
        got, counters = run_program(cfg, prog)
        np.testing.assert_array_equal(got["c"], want["c"], err_msg=f"stall probability {p}")
        assert counters["fired"] + counters["gated"] == prog.tiles * dims[1] * cfg.rows * cfg.cols


@pytest.mark.parametrize("owner", [0, 1])
@pytest.mark.parametrize("flow,dims", [("os", (7, 5, 9)), ("is", (6, 9, 5)),
                                       ("interleaved", (4, 5, 4))])
def test_shared_array_serves_its_owner_only(owner, flow, dims):
    """Two front ends share one array (the accelerator's engines): the owner's GEMM comes out
    exact while the other user drives noise, and the other user sees no drain, partial sum,
    busy or error."""
    cfg = load_config("small")
    shape = ArrayShape.of(cfg)
    rng = np.random.default_rng(sum(dims) + owner)
    ops = random_problem(shape, flow, dims, rng)
    prog = program(flow, shape, **ops)
    got, counters = run_program(cfg, prog, shared_owner=owner)
    for name, mat in expected(flow, shape, **ops).items():
        np.testing.assert_array_equal(got[name], mat, err_msg=f"{flow} {dims}: {name}")
    assert counters["fired"] + counters["gated"] >= 1


@pytest.mark.parametrize("preset", ["small", "nonsquare"])
@pytest.mark.parametrize("dims,sgd", [((4, 5, 4), None), ((6, 3, 7), 2), ((2, 9, 3), 0)])
def test_interleaved_matches_numpy(preset, dims, sgd):
    cfg = load_config(preset)
    shape = ArrayShape.of(cfg)
    rng = np.random.default_rng(sum(dims) + (sgd or 0))
    ops = random_problem(shape, "interleaved", dims, rng)
    prog = program("interleaved", shape, sgd_shift=sgd, **ops)
    got, _ = run_program(cfg, prog)
    want = expected("interleaved", shape, sgd_shift=sgd, **ops)
    np.testing.assert_array_equal(got["da_t"], want["da_t"])
    np.testing.assert_array_equal(got["g"], want["g"])


LATENCY_CASES = [(preset, flow) for preset in ("small", "nonsquare")
                 for flow in ("os", "ws", "is", "interleaved")] + [
    pytest.param("small_bf16", "os", marks=pytest.mark.long)]      # make test-long


@pytest.mark.parametrize("preset,flow", LATENCY_CASES)
# the second seed in make test-long (the same checks on more random streams)
@pytest.mark.parametrize("seed", [1, pytest.param(2, marks=pytest.mark.long)])
def test_latency_contract(preset, flow, seed):
    """The array's documented latency on random problems of several tiles, in every dataflow:
    each context's drain begins R + LATENCY cycles after its a_last cycle and its first vector
    leaves C + DRAIN_REGISTERS - 1 cycles later (floating point: FLOAT_REDUCE_LATENCY + C); each partial-sum vector leaves R + C - 1 + LATENCY cycles after its
    slot (interleaved: the tag-1 slot); the results equal numpy."""
    cfg = load_config(preset)
    R, C, L = cfg.rows, cfg.cols, cfg.mac_latency
    shape = ArrayShape.of(cfg)
    rng = np.random.default_rng([seed, len(flow), R, C])
    if flow == "os":
        dims = (int(rng.integers(1, 2 * R + 1)), int(rng.integers(1, 3 * R)),
                int(rng.integers(1, 2 * C + 1)))
    elif flow == "interleaved":
        dims = (int(rng.integers(1, 2 * R + 1)), int(rng.integers(1, 2 * R)),
                int(rng.integers(1, 2 * C + 1)))
    else:
        dims = (int(rng.integers(1, 3 * R)), int(rng.integers(1, 2 * R + 1)),
                int(rng.integers(1, 2 * C + 1)))
    ops = random_problem(shape, flow, dims, rng)
    prog = program(flow, shape, sgd_shift=1 if flow == "interleaved" else None, **ops)
    timeline = {}
    got, _ = run_program(cfg, prog, timeline=timeline)
    for name, mat in expected(flow, shape, sgd_shift=1 if flow == "interleaved" else None,
                              **ops).items():
        np.testing.assert_array_equal(got[name], mat, err_msg=f"{flow} {dims}: {name}")

    def starts(cycles):
        return [t for t in cycles if t - 1 not in cycles]

    ends = [t for t, c in enumerate(prog.cycles)
            if c.get("a_valid") and c.get("a_last") and c.get("b_tag", 1)]
    slots = [t for t, c in enumerate(prog.cycles) if c.get("b_valid") and c.get("b_tag", 1)]
    out = FLOAT_REDUCE_LATENCY + C if cfg.is_float else C + DRAIN_REGISTERS - 1
    if flow in ("os", "interleaved"):
        assert starts(timeline["drain_shift"]) == [t + R + L for t in ends]
        assert starts(timeline["drain_valid"]) == [t + R + L + out for t in ends]
        assert len(timeline["drain_shift"]) == len(timeline["drain_valid"]) == len(ends) * R
    if flow != "os":
        assert timeline["psum_valid"] == [t + R + C - 1 + L for t in slots]


@pytest.mark.parametrize("preset", ["small", "nonsquare",
                                    pytest.param("small_bf16", marks=pytest.mark.long)])
def test_os_back_to_back_tiles_do_not_stall(preset):
    """N tiles of depth K >= the context gap (2R for integers) take R (chain priming) + N K +
    the last drain busy cycles: the drain of every tile overlaps the next tile. The last
    drain: its first shift R + LATENCY cycles after the last a_last, R shifts, and the last
    vector out C + DRAIN_REGISTERS - 1 cycles after its shift (floating point:
    FLOAT_REDUCE_LATENCY + C)."""
    cfg = load_config(preset)
    shape = ArrayShape.of(cfg)
    R, C = cfg.rows, cfg.cols
    K = cfg.context_gap + 3
    out = FLOAT_REDUCE_LATENCY + C if cfg.is_float else C + DRAIN_REGISTERS - 1
    last = R + cfg.mac_latency + R - 1 + out
    for m_tiles, n_tiles in [(1, 1), (2, 3)]:
        ops = random_problem(shape, "os", (m_tiles * R, K, n_tiles * C),
                             np.random.default_rng(5))
        prog = program("os", shape, **ops)
        got, counters = run_program(cfg, prog)
        np.testing.assert_array_equal(got["c"], expected("os", shape, **ops)["c"])
        n = m_tiles * n_tiles
        assert counters["cycles"] == R + n * K + last
        assert counters["drained"] == n * R
        assert counters["fired"] + counters["gated"] == n * K * R * C


def test_hold_back_to_back_tiles_do_not_stall():
    """Held-operand tiles streaming M >= 2R vectors each: every extra tile costs exactly M
    cycles (the next tile's operand is shifted in while the current one streams)."""
    cfg = load_config("small")
    shape = ArrayShape.of(cfg)
    M = 2 * cfg.rows + 1
    cycles = {}
    for k in (cfg.rows, 3 * cfg.rows):
        ops = random_problem(shape, "is", (M, k, cfg.cols), np.random.default_rng(k))
        got, counters = run_program(cfg, program("is", shape, **ops))
        np.testing.assert_array_equal(got["c"], expected("is", shape, **ops)["c"])
        cycles[k] = counters["cycles"]
    assert cycles[3 * cfg.rows] - cycles[cfg.rows] == 2 * M


@pytest.mark.parametrize("preset", ["small", pytest.param("small_bf16", marks=pytest.mark.long)])
def test_contexts_too_close_set_error_and_clear_resets_it(preset):
    cfg = load_config(preset)
    dut = SystolicArray(cfg)
    seen = {}

    async def tb(ctx):
        ctx.set(dut.dataflow, 0)
        for gap in (3, cfg.context_gap):
            ctx.set(dut.clear, 1)
            await ctx.tick()
            ctx.set(dut.clear, 0)
            for t in range(gap + 1):
                ctx.set(dut.a_valid, 1)
                ctx.set(dut.b_valid, 1)
                ctx.set(dut.a_last, int(t in (0, gap)))
                await ctx.tick()
            ctx.set(dut.a_valid, 0)
            ctx.set(dut.b_valid, 0)
            ctx.set(dut.a_last, 0)
            for _ in range(2 * cfg.context_gap):
                await ctx.tick()
            seen[gap] = ctx.get(dut.error)
        # A chain command during an automatic drain is refused too.
        ctx.set(dut.clear, 1)
        await ctx.tick()
        ctx.set(dut.clear, 0)
        ctx.set(dut.a_valid, 1)
        ctx.set(dut.a_last, 1)
        await ctx.tick()
        ctx.set(dut.a_valid, 0)
        ctx.set(dut.a_last, 0)
        while not ctx.get(dut.drain_shift):
            await ctx.tick()
        ctx.set(dut.chain_shift, 1)
        await ctx.tick()
        ctx.set(dut.chain_shift, 0)
        await ctx.tick()
        seen["collision"] = ctx.get(dut.error)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()
    assert seen == {3: 1, cfg.context_gap: 0, "collision": 1}


def test_program_refuses_bad_problems():
    shape = ArrayShape.of(Config(dataflows=["os"]))
    with pytest.raises(ValueError, match="do not chain"):
        program("os", shape, a=np.ones((2, 3)), b=np.ones((4, 2)))
    with pytest.raises(ValueError, match="'ws' is not generated"):
        program("ws", shape, a=np.ones((2, 3)), b=np.ones((3, 2)))
    with pytest.raises(ValueError, match="dataflow must be one of"):
        program("rs", shape, a=np.ones((2, 3)), b=np.ones((3, 2)))


VERILATOR_CASES = [
    ("small", "os", (9, 13, 7), None), ("small", "ws", (9, 13, 7), None),
    ("small", "is", (9, 13, 7), None), ("small", "interleaved", (6, 9, 5), 2),
    # the bf16 array's Verilog: the one floating-point Verilator run of make test (the
    # floating-point accelerators' builds are make test-long's)
    ("small_bf16", "os", (9, 31, 7), None),
    # make test-long: the non-square and fp16 arrays' own Verilog (the Amaranth-simulator
    # tests above run both)
    *(pytest.param(*case, marks=pytest.mark.long) for case in (
        ("nonsquare", "os", (7, 10, 11), None), ("nonsquare", "ws", (4, 6, 12), None),
        ("nonsquare", "is", (8, 5, 9), None), ("nonsquare", "interleaved", (7, 4, 8), None),
        ("small_fp16", "os", (6, 3, 5), None))),
    # the 16x16 builds take one to three minutes each: make test-long
    pytest.param("paper16", "os", (20, 40, 33), None, marks=pytest.mark.long),
    pytest.param("paper16", "ws", (40, 20, 17), None, marks=pytest.mark.long),
    pytest.param("paper16", "is", (17, 18, 40), None, marks=pytest.mark.long),
    pytest.param("paper16", "interleaved", (20, 16, 18), 3, marks=pytest.mark.long),
]


@pytest.mark.cocotb
@pytest.mark.long
@pytest.mark.parametrize("preset", ["small_bf16", "small_fp16"])
def test_float_array_verilator_under_stalls(preset):
    """The floating-point array as Verilog under Verilator, a feeder that stalls (an idle
    cycle before a slot with probability 0.4), zeros, infinities and NaNs among the operands:
    every result equal to the golden model's."""
    from bpsa.sim.simcmd import run_gemm
    result = run_gemm(load_config(preset), "os", (11, 37, 6), seed=5, stall=0.4)
    assert result["match"] is True
    assert result["fired"] + result["gated"] == 3 * 2 * 37 * 16


@pytest.mark.cocotb
@pytest.mark.parametrize("preset,flow,dims,sgd", VERILATOR_CASES)
def test_array_verilator(preset, flow, dims, sgd):
    """The generated Verilog under Verilator: random problems of shapes that do and do not fit
    the array, every result equal to numpy (the testbench asserts it)."""
    from bpsa.sim.simcmd import run_gemm
    cfg = load_config(preset)
    result = run_gemm(cfg, flow, dims, seed=3, sgd_shift=sgd)
    assert result["match"] is True
    assert result["useful_macs"] == (2 if flow == "interleaved" else 1) * np.prod(dims)
    if flow == "os" and dims[1] >= 2 * cfg.rows and not cfg.is_float:
        # No stall between tiles: chain priming + tiles * K + one fill/drain.
        R, C = cfg.rows, cfg.cols
        tiles = -(-dims[0] // R) * -(-dims[2] // C)
        assert result["cycles"] == (R + tiles * dims[1] + 2 * R + C - 1 + cfg.mac_latency
                                    + DRAIN_REGISTERS - 1)
