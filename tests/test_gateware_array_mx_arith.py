"""The PE's arithmetic in an MX format (bpsa.gateware.array.mx_arith): its multiplier against
the MX golden model's element values, and the array built on it against the block sums, every
dataflow, in the Amaranth simulator and as Verilog under Verilator (the PE itself, every output
every cycle against its cycle model: tests/test_gateware_array_pe.py)."""

import numpy as np
import pytest
from amaranth.hdl import Module, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out
from amaranth.sim import Simulator

from bpsa.config import MX_TOP_NAMES, Config, ConfigError
from bpsa.gateware.array.arith import IntArith, arith_for
from bpsa.gateware.array.mx_arith import MxArith
from bpsa.models.mx import element_ints

MX_CONFIGS = {  # the 4x4 arrays of test_array_*
    "mxint8": Config(name="mxint8_pe", arithmetic="mxint8", operand_width=8, acc_width=21,
                     dataflows=["os", "ws", "is", "interleaved"]),
    "mxfp8_e4m3": Config(name="mxfp8_pe", arithmetic="mxfp8_e4m3", operand_width=8,
                         operand_signed=False, acc_width=43,
                         dataflows=["os", "ws", "is", "interleaved"]),
}


class _Multiplier(wiring.Component):
    def __init__(self, fmt):
        self.arith = arith_for(MX_CONFIGS[fmt])         # mxint8: IntArith at 8 bits
        shape = signed(21) if fmt == "mxint8" else self.arith.product_width + 2
        super().__init__({"a": In(8), "b": In(8), "fire": In(1), "product": Out(shape)})

    def elaborate(self, platform):
        m = Module()
        product, _ = self.arith.multiplier(m, self.a, self.b, self.fire)
        m.d.comb += self.product.eq(product)
        return m


@pytest.mark.parametrize("fmt", ["mxint8", "mxfp8_e4m3"])
def test_multiplier_gives_the_exact_element_products(fmt):
    """Random pairs of codes (every kind: zeros, NaN codes, the largest, subnormals), four
    registers later: the product of the two elements' integers (FP8: as a magnitude, its
    one's complement when negative, and a sign, and the NaN flag of a NaN code times a non-zero element); 0 when not fired."""
    dut = _Multiplier(fmt)
    rng = np.random.default_rng(31)
    pairs = rng.integers(0, 256, size=(4000, 2))
    pairs[:300] = [[c, d] for c in (0x00, 0x80, 0x7F, 0xFF, 0x7E, 0xFE, 0x01, 0x81, 0x08, 0x88)
                   for d in rng.integers(0, 256, size=30)]
    fires = rng.random(len(pairs)) < 0.8
    ints, nan, _ = element_ints(pairs, fmt)
    # a NaN code multiplies as its bits read (+-15 << 14) and sets the NaN flag
    ints = np.where(nan, np.where(pairs >> 7 == 1, -1, 1) * (15 << 14), ints)
    want = []
    for (x, y), f, n in zip(ints, fires, nan.any(axis=1)):
        live = f and x != 0 and y != 0
        want.append((int(x) * int(y) if f else 0, bool(n and live)))
    signed = fmt == "mxint8"

    async def tb(ctx):
        slots = list(zip(pairs, fires)) + [((0, 0), False)] * 3
        for k, ((a, b), f) in enumerate(slots):
            ctx.set(dut.a, int(np.int8(np.uint8(a))) if signed else int(a))
            ctx.set(dut.b, int(np.int8(np.uint8(b))) if signed else int(b))
            ctx.set(dut.fire, int(f))
            await ctx.tick()
            if k >= 3:                 # the slot of three cycles before, four registers on
                p = ctx.get(dut.product)
                if signed:
                    got = (p, False)
                else:        # the magnitude (one's complement when negative), sign, NaN flag
                    pw = dut.arith.product_width
                    low, neg = p & ((1 << pw) - 1), p >> pw & 1
                    got = (-(low ^ ((1 << pw) - 1)) if neg else low, bool(p >> (pw + 1) & 1))
                assert got == want[k - 3], f"slot {k - 3}: {pairs[k - 3]}"

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()


def test_arithmetic_of_each_format():
    assert isinstance(arith_for(MX_CONFIGS["mxfp8_e4m3"]), MxArith)
    ar = arith_for(MX_CONFIGS["mxint8"])
    assert isinstance(ar, IntArith) and ar.operand_shape == signed(8)
    assert ar.acc_shape == signed(21)
    with pytest.raises(ValueError, match="mxint8 is the integer arithmetic"):
        MxArith("mxint8")


def test_mx_configurations_are_checked():
    with pytest.raises(ConfigError, match="acc_width must be 43 with arithmetic 'mxfp8_e4m3'"):
        Config(arithmetic="mxfp8_e4m3", operand_width=8, operand_signed=False, acc_width=32)
    with pytest.raises(ConfigError, match="operand_signed must be False"):
        Config(arithmetic="mxfp8_e4m3", operand_width=8, acc_width=43)
    with pytest.raises(ConfigError, match="operand_width must be 8"):
        Config(arithmetic="mxint8", operand_width=16, acc_width=32, dataflows=["os"])
    cfg = MX_CONFIGS["mxint8"]
    with pytest.raises(ConfigError, match=f"MX builds the tops {', '.join(MX_TOP_NAMES)} so far"):
        cfg.require_int("feeder")


@pytest.mark.parametrize("name", sorted(MX_CONFIGS))
@pytest.mark.parametrize("flow,dims", [("os", (5, 32, 6)), ("os", (9, 7, 4)), ("ws", (8, 4, 5)),
                                       ("is", (6, 3, 5)), ("ws", (5, 2, 9)),
                                       ("interleaved", (4, 5, 6)), ("interleaved", (3, 32, 4)),
                                       ("interleaved", (2, 9, 7))])
def test_array_gemm_gives_block_sums(name, flow, dims):
    """The 4x4 array in an MX format, every dataflow: each output the exact block sum (FP8:
    with the NaN flag) of its row of A and column of B (random codes, NaN codes and zeros
    among them). An output-stationary context is one block (at most 32 products); the held
    dataflows sum at most ``rows`` products down a column in one pass (the harness adds the
    passes of a longer K as integers, which MX leaves to the block accumulation outside the
    array). Interleaved (InterGrad's FC backward, dims ``(O, Bt, I)``): the loss's W^T delta
    down the columns (``O <= rows``: one pass) and G, a block of ``Bt <= 32`` products, from
    the same PEs in alternate cycles; MX builds no SGD step (G leaves for the host's fp32
    step)."""
    from test_gateware_array_systolic import run_program
    from bpsa.sim.gemm import ArrayShape, expected, program, random_problem
    cfg = MX_CONFIGS[name]
    import dataclasses
    cfg = dataclasses.replace(cfg, rows=4, cols=4)
    shape = ArrayShape.of(cfg)
    rng = np.random.default_rng([len(name), dims[1]])
    ops = random_problem(shape, flow, dims, rng)
    first, second = ("a", "b") if flow != "interleaved" else ("delta", "act")
    if name == "mxfp8_e4m3":                # NaN codes beside non-zero and zero partners
        ops[first][0, 0], ops[first][-1, -1] = 0x7F, 0xFF
        ops[second][0, 0], ops[second][-1, :] = 0, 0x38
    got, counters = run_program(cfg, program(flow, shape, **ops))
    for key, mat in expected(flow, shape, **ops).items():
        np.testing.assert_array_equal(got[key], mat, err_msg=f"{name} {flow} {dims}: {key}")
    if name == "mxfp8_e4m3":                # some outputs carry the NaN flag, some not
        flags = np.concatenate([m.ravel() for m in got.values()]) >> 42 == 1
        assert flags.any() and not flags.all()


# make test-long (the Amaranth simulator runs every dataflow in make test, and the MXINT8
# array's Verilog runs inside the MX accelerator's test)
@pytest.mark.long
@pytest.mark.cocotb
@pytest.mark.parametrize("flow,dims", [("os", (9, 30, 7)), ("ws", (7, 4, 6))])
def test_array_verilator(flow, dims):
    """The MX array's generated Verilog under Verilator (cocotb tb_array; ``small_mxfp8``,
    whose build the CLI test below shares): random codes, every output equal to the block
    sums of bpsa.models.pe_model.pe_matmul (``mxint8`` is the integer PE at 8 bits, whose
    Verilog the integer array tests run)."""
    from bpsa.config import load_config
    from bpsa.sim.simcmd import run_gemm
    result = run_gemm(load_config("small_mxfp8"), flow, dims, seed=4, progress=False)
    assert result["match"] is True
    # the interleaved pass: the loss's and the gradient's MACs
    assert result["useful_macs"] == int(np.prod(dims)) * (2 if flow == "interleaved" else 1)


@pytest.mark.long       # the MXFP8 array's build: make test-long
@pytest.mark.cocotb
def test_cli_gemm(capsys):
    """``bpsa sim --gemm`` takes an MX configuration (the array's Verilog under Verilator, the
    interleaved pass against the block sums)."""
    import json

    from bpsa.cli import main
    assert main(["sim", "--config", "small_mxfp8", "--gemm", "4,20,7", "--dataflow",
                 "interleaved", "--json"]) in (None, 0)
    out = json.loads(capsys.readouterr().out)
    assert out["match"] is True and out["useful_macs"] == 2 * 4 * 20 * 7


def test_cli_refusals(capsys):
    """In MX, ``bpsa sim``'s SGD step of the interleaved pass and the pooling phase (no
    pooling unit in MX) are refused in one line."""
    from bpsa.cli import main
    for argv, match in ((["--gemm", "4,20,7", "--dataflow", "interleaved", "--sgd-shift", "2"],
                         "SGD step is not built in mxint8"),
                        (["--phase", "pool", "--layer", "C=4,H=6,K=4,R=3"],
                         "bpsa sim --phase forward|loss|gradient|step (the accelerator)")):
        assert main(["sim", "--config", "small_mxint8", *argv]) == 2
        err = capsys.readouterr().err
        assert match in err and len(err.strip().splitlines()) == 1, err


def test_cli_zero_free_gradient_engine_refusals(capsys):
    """``bpsa sim --engine --phase gradient --mode zero_free`` refuses, in one line, a layer
    whose band does not fit and a configuration without the os dataflow."""
    from bpsa.cli import main
    for argv, match in ((["--config", "small_mxint8", "--layer", "C=4,H=60,W=60,K=4,R=3"],
                         "does not fit the X buffer"),
                        (["--config", "small_mxint8", "--dataflow", "ws", "--layer",
                          "C=4,H=6,K=4,R=3"], "--dataflow and --sgd-shift do not apply")):
        assert main(["sim", "--engine", "--phase", "gradient", "--mode", "zero_free",
                     *argv]) == 2
        err = capsys.readouterr().err
        assert match in err and len(err.strip().splitlines()) == 1, err
