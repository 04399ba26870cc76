"""cocotb testbench of ConvBackward (generated Verilog under Verilator) against
``bpsa.models.golden.conv2d_input_grad`` / ``conv2d_weight_grad``.

For each layer: random dY, W and X; the phase's operands written into buffers A and B through
the write ports; the descriptor and ``start``; every ``out`` vector collected until ``done``;
dX / dW assembled (the K-tile partial sums added on this side) and compared bit-exactly with
the golden model wrapped to ``acc_width``; ``error`` must stay low.

``fc_matches_golden`` does the same for FC layers (the interleaved phase): ``BPSA_FC_LAYERS``
(JSON list of :class:`bpsa.spec.layer.FcLayer` fields), ``BPSA_SGD_SHIFT`` (empty: dW,
else the updated weights); dX from ``out`` and dW from ``drain`` against
:func:`bpsa.models.golden.gemm`.

Environment: ``BPSA_LAYERS`` (JSON list of :class:`bpsa.spec.layer.ConvLayer` fields)
or ``BPSA_LAYER`` (one layer string), ``BPSA_PHASE`` (``loss`` or ``gradient``), ``BPSA_SEED``,
``BPSA_BASELINE`` (non-empty: baseline mode), ``BPSA_SUMMARY`` (a path: the JSON list of the
layers' summaries is written there, also when a layer mismatches).
"""

import json
import os

import cocotb
import numpy as np
from cocotb.triggers import ReadOnly, RisingEdge

from bpsa.config import Config
from bpsa.gateware.frontends.bp_im2col.conv_backward import (
    COUNTERS,
    backward_layout,
    drain_layout,
    out_layout,
)
from bpsa.sim.conv_backward_run import (
    assemble,
    descriptor,
    expected,
    geometry,
    images,
    random_tensors,
    summary,
)
from bpsa.sim.conv_forward_run import pack_struct, unpack_struct
from bpsa.sim.runner import load_config_json
from bpsa.sim.testbenches.tb_util import layers_from_env, reset, write_words


def _layers():
    return layers_from_env("C=2,H=6,W=7,K=3,R=3,stride=2,pad=1")


def _finish(results, failures):
    """Write the summaries to ``BPSA_SUMMARY`` (when set), then fail on any failure."""
    if os.environ.get("BPSA_SUMMARY"):
        with open(os.environ["BPSA_SUMMARY"], "w") as f:
            json.dump(results, f)
    assert not failures, "; ".join(failures)


async def _reset(dut):
    await reset(dut, ("a_write", "b_write"))


def _max_cycles(cfg, layer, phase):
    """A generous bound on a run's cycles (a hang fails instead of running forever)."""
    g = geometry(cfg, layer, phase)
    beats = g["m"] * (1 + g["kg"] // max(1, g["hd"] * g["wd"]))
    return 4 * (g["za"] + g["zb"]) + g["tiles"] * (beats + 4 * cfg.rows + cfg.cols + 8) + 1000


async def run_layer(dut, cfg, desc, max_cycles, drains=None):
    """Start ``desc`` and collect the ``out`` vectors until ``done`` (and the ``drain`` rows
    into the list ``drains``, when given). Returns ``(outputs, counters, error)``."""
    olay = out_layout(cfg)
    arrays = {"data": (cfg.vertical_width, cfg.cols, True)}
    dlay = drain_layout(cfg) if drains is not None else None
    darrays = {"data": (cfg.acc_width, cfg.cols, True)}
    await RisingEdge(dut.clk)
    dut.layer.value = pack_struct(backward_layout(cfg), desc)
    dut.start.value = 1
    await RisingEdge(dut.clk)
    dut.start.value = 0
    outs = []
    for _ in range(max_cycles):
        await RisingEdge(dut.clk)
        await ReadOnly()
        if int(dut.out__valid.value):
            f = unpack_struct(olay, int(dut.out__payload.value), arrays)
            outs.append((f["row"], f["tile"], f["data"]))
        if dlay is not None and int(dut.drain__valid.value):
            f = unpack_struct(dlay, int(dut.drain__payload.value), darrays)
            drains.append((f["row"], f["tile"], f["data"]))
        if int(dut.done.value):
            break
    else:
        raise AssertionError(f"{desc}: not done after {max_cycles} cycles")
    counters = {c: int(getattr(dut, c).value) for c in COUNTERS}
    error = int(dut.error.value)
    await RisingEdge(dut.clk)
    return outs, counters, error


@cocotb.test()
async def backward_matches_golden(dut):
    """Every layer of the environment: dX / dW equals the golden model, no error."""
    cfg = Config.from_dict(load_config_json())
    rng = np.random.default_rng(int(os.environ.get("BPSA_SEED", "1")))
    baseline = bool(os.environ.get("BPSA_BASELINE"))
    phase = os.environ.get("BPSA_PHASE", "loss")
    await _reset(dut)
    results, failures = [], []
    for layer in _layers():
        tensors = random_tensors(cfg, layer, rng)
        for side, (first, words) in images(cfg, layer, phase, tensors,
                                           baseline=baseline).items():
            await write_words(dut, f"{side}_write", first, [[w] for w in words],
                              cfg.operand_width)
        desc = descriptor(cfg, layer, phase, baseline=baseline)
        outs, counters, error = await run_layer(dut, cfg, desc,
                                                _max_cycles(cfg, layer, phase))
        want = expected(cfg, layer, phase, tensors)
        try:
            got, problem = assemble(cfg, layer, phase, outs), None
        except AssertionError as e:
            got, problem = None, str(e)
        result = summary(cfg, layer, phase, got, want, counters, baseline=baseline)
        result["error"] = error
        if error:
            result["match"] = False
            problem = "error raised"
        elif got is not None and not result["match"]:
            bad = np.argwhere(got != want)
            problem = f"{len(bad)} of {want.size} values differ, first at {tuple(bad[0])}"
        results.append(result)
        dut._log.info(f"{layer.text()} ({phase}, {result['mode']}): "
                      f"{'match' if problem is None else problem}; {result['cycles']} cycles "
                      f"(prologue {result['cycles_prologue']}, reorg {result['cycles_reorg']}), "
                      f"words read {result['buffer_words_read']}")
        if problem is not None:
            failures.append(f"{layer.text()}: {problem}")
    _finish(results, failures)


@cocotb.test()
async def fc_matches_golden(dut):
    """Every FC layer of the environment: dX and dW (or the updated W) equal the golden model,
    no error."""
    from bpsa.spec.layer import FcLayer
    from bpsa.sim.fc_backward_run import assemble as fc_assemble
    from bpsa.sim.fc_backward_run import descriptor as fc_descriptor
    from bpsa.sim.fc_backward_run import expected as fc_expected
    from bpsa.sim.fc_backward_run import geometry as fc_geometry
    from bpsa.sim.fc_backward_run import images as fc_images
    from bpsa.sim.fc_backward_run import random_tensors as fc_random_tensors
    from bpsa.sim.fc_backward_run import summary as fc_summary
    cfg = Config.from_dict(load_config_json())
    rng = np.random.default_rng(int(os.environ.get("BPSA_SEED", "1")))
    sgd = os.environ.get("BPSA_SGD_SHIFT") or None
    sgd = None if sgd is None else int(sgd)
    layers = [FcLayer(**d) for d in json.loads(os.environ.get(
        "BPSA_FC_LAYERS", '[{"batch": 3, "inputs": 7, "outputs": 5}]'))]
    await _reset(dut)
    results, failures = [], []
    for layer in layers:
        tensors = fc_random_tensors(cfg, layer, rng)
        for side, (first, words) in fc_images(cfg, layer, tensors).items():
            await write_words(dut, f"{side}_write", first, [[w] for w in words],
                              cfg.operand_width)
        g = fc_geometry(cfg, layer)
        drains = []
        outs, counters, error = await run_layer(
            dut, cfg, fc_descriptor(cfg, layer, sgd),
            g["tiles"] * (2 * layer.batch + 4 * cfg.rows + 8) + 1000, drains)
        want = fc_expected(cfg, layer, tensors, sgd)
        try:
            got, problem = fc_assemble(cfg, layer, outs, drains), None
        except AssertionError as e:
            got, problem = None, str(e)
        result = fc_summary(cfg, layer, got, want, counters, sgd_shift=sgd)
        result["error"] = error
        if error:
            result["match"], problem = False, "error raised"
        elif got is not None and not result["match"]:
            problem = "dX or dW differs from the golden model"
        results.append(result)
        dut._log.info(f"{layer.text()} (fc, sgd_shift {sgd}): "
                      f"{'match' if problem is None else problem}; {result['cycles']} cycles")
        if problem is not None:
            failures.append(f"{layer.text()}: {problem}")
    _finish(results, failures)
