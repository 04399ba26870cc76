"""cocotb testbench of the systolic array (generated Verilog under Verilator).

Runs one random problem per test through :mod:`bpsa.sim.gemm` and compares every result with
numpy (floating point: the golden model, :func:`bpsa.models.floating.gemm_os`). Parameters come
from the environment: ``BPSA_FLOW`` (os, ws, is, interleaved), ``BPSA_DIMS`` ("M,K,N" or
"O,Bt,I"), ``BPSA_SEED``, ``BPSA_SGD`` (shift, interleaved only), ``BPSA_STALL`` (os only: the
probability of an idle cycle before each slot) and ``BPSA_SUMMARY`` (a path: write the run's
JSON summary there).
"""

import json
import os

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge, RisingEdge

from bpsa.sim.gemm import (
    ArrayShape,
    collect_outputs,
    expected,
    program,
    random_problem,
    summary,
)
from bpsa.sim.runner import load_config_json

OUT_PORTS = ("drain_valid", "drain_row", "drain_data", "psum_valid", "psum_data")
COUNTERS = ("cycles", "a_words", "b_words", "drained", "psums", "fired", "gated")


async def run_program(dut, prog):
    shape = prog.shape
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    dut.rst.value = 1
    for port in prog.port_values({}):
        if hasattr(dut, port):
            getattr(dut, port).value = 0
    dut.dataflow.value = prog.static["dataflow"]
    if hasattr(dut, "sgd_en"):
        dut.sgd_en.value = prog.static.get("sgd_en", 0)
        dut.sgd_shift.value = prog.static.get("sgd_shift", 0)
    dut.clear.value = 1
    await RisingEdge(dut.clk)
    dut.rst.value = 0
    await RisingEdge(dut.clk)
    dut.clear.value = 0
    ports = {p: getattr(dut, p) for p in OUT_PORTS if hasattr(dut, p)}
    inputs = {p: getattr(dut, p) for p in prog.port_values({}) if hasattr(dut, p)}
    drains, psums = [], []
    last = {}
    # One trigger per cycle: at each falling edge, read what the rising edge before it produced
    # and set the inputs the next rising edge samples.
    await FallingEdge(dut.clk)
    for cycle in prog.cycles:
        # Write only the ports that change: every write is a simulator call.
        for port, value in prog.port_values(cycle).items():
            if port in inputs and last.get(port) != value:
                inputs[port].value = value
                last[port] = value
        await FallingEdge(dut.clk)
        values = {}
        for valid, fields in (("drain_valid", ("drain_row", "drain_data")),
                              ("psum_valid", ("psum_data",))):
            if valid in ports and int(ports[valid].value):
                values[valid] = 1
                values.update({f: int(ports[f].value) for f in fields})
        drain, psum = collect_outputs(shape, values)
        if drain is not None:
            drains.append(drain)
        if psum is not None:
            psums.append(psum)
    assert int(dut.error.value) == 0, "array flagged a protocol error"
    counters = {c: int(getattr(dut, c).value) for c in COUNTERS}
    return prog.assemble(drains, psums), counters


@cocotb.test()
async def gemm_matches_numpy(dut):
    cfg = load_config_json()
    shape = ArrayShape.of(cfg)
    flow = os.environ.get("BPSA_FLOW", "os")
    dims = tuple(int(x) for x in os.environ.get("BPSA_DIMS", "5,9,6").split(","))
    seed = int(os.environ.get("BPSA_SEED", "1"))
    sgd = os.environ.get("BPSA_SGD")
    sgd = int(sgd) if sgd not in (None, "") else None
    rng = np.random.default_rng(seed)
    ops = random_problem(shape, flow, dims, rng)
    kw = {"sgd_shift": sgd} if flow == "interleaved" else {}
    stall = float(os.environ.get("BPSA_STALL") or 0)
    prog = program(flow, shape, **kw, **ops, **({"stalls": (stall, rng)} if stall else {}))
    got, counters = await run_program(dut, prog)
    want = expected(flow, shape, **kw, **ops)
    result = summary(prog, got, want, counters)
    if os.environ.get("BPSA_SUMMARY"):
        with open(os.environ["BPSA_SUMMARY"], "w") as f:
            json.dump(result, f)
    for name, mat in want.items():
        np.testing.assert_array_equal(got[name], mat, err_msg=f"{flow} {dims}: {name}")
    dut._log.info(f"{flow} {dims}: match, {result['cycles']} cycles, "
                  f"utilization {result['utilization']:.3f}")
