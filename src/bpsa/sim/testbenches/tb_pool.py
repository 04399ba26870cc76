"""cocotb testbench of the pooling unit (generated Verilog of the top ``pool`` under Verilator)
against the golden models: :mod:`bpsa.models.float_pool` on a floating-point configuration,
:mod:`bpsa.models.golden` on an integer one. Random layers of both kinds, forward and backward
(with and without the ReLU's mask), overlapping windows and padding, run by run as the
controller drives the unit (:class:`bpsa.sim.testbenches.pool_runs.PoolRuns`); floating-point
operands with zeros of both signs, subnormals, infinities and NaNs."""

import os

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import ReadOnly, RisingEdge

from bpsa.config import Config
from bpsa.gateware.results.psum_buffer import accumulate_layout
from bpsa.gateware.frontends.pool.pool import pool_run_layout
from bpsa.models import float_pool, golden
from bpsa.sim.gemm import random_float_operands
from bpsa.sim.runner import load_config_json
from bpsa.sim.testbenches.pool_runs import PoolRuns


def _layer(rng, cfg):
    r, s = int(rng.integers(1, 4)), int(rng.integers(1, 4))
    return dict(n=int(rng.integers(1, 3)), c=int(rng.integers(1, 3 * cfg.pool_lanes + 1)),
                h=int(rng.integers(r, 11)), w=int(rng.integers(s, 11)), r=r, s=s,
                stride=(int(rng.integers(1, 4)), int(rng.integers(1, 4))),
                pad=(int(rng.integers(0, r // 2 + 1)), int(rng.integers(0, s // 2 + 1))),
                kind=str(rng.choice(cfg.pool_kinds)))


def _tensor(rng, cfg, shape):
    if cfg.is_float:
        return random_float_operands(cfg.arithmetic, shape, rng, 0.15, 0.03)
    top = (1 << (cfg.operand_width - 1)) - 1
    return rng.integers(-top - 1, top + 1, shape)


def _want(cfg, phase, x, dy, lay, relu):
    args = (lay["kind"], (lay["r"], lay["s"]), lay["stride"], lay["pad"])
    if cfg.is_float:
        if phase == "pool_forward":     # P's contents: fp32, before the store
            return float_pool.pool2d(x, *args, cfg.arithmetic, requant=False)
        return float_pool.pool2d_backward(dy, x, *args, cfg.arithmetic, relu=relu)
    if phase == "pool_forward":
        return golden.pool2d(x, *args)
    dx = golden.pool2d_backward(dy, x, *args)
    return dx * (x > 0) if relu else dx


async def _run(dut, cfg, runs):
    """Every run of ``runs`` through the unit: the output tensor."""
    lay_shape, acc = pool_run_layout(cfg), accumulate_layout(cfg)
    aw, dw = acc["addr"].shape.width, cfg.acc_width
    for run in runs.runs:
        for a, v in enumerate(runs.words(run)):
            dut.write__addr.value, dut.write__data.value, dut.write__en.value = a, v, 1
            await RisingEdge(dut.clk)
        dut.write__en.value = 0
        dut.layer.value = lay_shape.const(runs.layer(run)).as_bits()
        dut.start.value = 1
        await RisingEdge(dut.clk)
        dut.start.value = 0
        got = {}
        for _ in range(200_000):
            await ReadOnly()
            valid, busy = int(dut.acc__valid.value), int(dut.busy.value)
            if valid:
                bits = int(dut.acc__payload.value)
                addr = bits & ((1 << aw) - 1)
                vec = []
                for j in range(cfg.cols):
                    v = (bits >> (aw + j * dw)) & ((1 << dw) - 1)
                    vec.append(v - (1 << dw) if v >> (dw - 1) and not cfg.is_float else v)
                got[addr] = [runs.add(a, b) for a, b in zip(got.get(addr, [0] * cfg.cols),
                                                            vec)]
            await RisingEdge(dut.clk)
            if not busy and not valid:
                break
        else:
            raise AssertionError("the run did not end")
        runs.gather(run, got)
    return runs.result()


@cocotb.test()
async def random_layers_match_the_golden_model(dut):
    cfg = Config.from_dict(load_config_json())
    rng = np.random.default_rng(int(os.environ.get("BPSA_SEED", "1")))
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    dut.rst.value, dut.start.value, dut.write__en.value = 1, 0, 0
    dut.acc__ready.value = 1
    for _ in range(3):
        await RisingEdge(dut.clk)
    dut.rst.value = 0
    await RisingEdge(dut.clk)
    await RisingEdge(dut.clk)                  # the unit's own reset cycle
    kinds = set()
    for _ in range(int(os.environ.get("BPSA_LAYERS", "8"))):
        lay = _layer(rng, cfg)
        x = _tensor(rng, cfg, (lay["n"], lay["c"], lay["h"], lay["w"]))
        runs = PoolRuns(cfg, "pool_forward", x, None, lay, False)
        got = await _run(dut, cfg, runs)
        want = _want(cfg, "pool_forward", x, None, lay, False)
        mask = 0xFFFFFFFF if cfg.is_float else -1
        assert np.array_equal(got & mask, want), ("forward", lay)
        dy = _tensor(rng, cfg, want.shape)
        relu = bool(rng.integers(0, 2))
        runs = PoolRuns(cfg, "pool_backward", x, dy, lay, relu)
        got = await _run(dut, cfg, runs)
        assert np.array_equal(got & mask, _want(cfg, "pool_backward", x, dy, lay, relu)), \
            ("backward", lay, relu)
        kinds.add(lay["kind"])
    assert kinds == set(cfg.pool_kinds)
