"""cocotb testbench of ConvForward (generated Verilog under Verilator) against
``bpsa.models.golden.conv2d``.

For each layer: random X and W, written into the X SRAM and the W buffer through the write
ports; the descriptor and ``start``; every ``y`` row collected until ``done``; Y assembled and
compared bit-exactly with ``bpsa.models.golden.conv2d`` wrapped to ``acc_width``; ``error`` must
stay low and the X SRAM words read must equal the feeder model's count.

Environment: ``BPSA_LAYERS`` (JSON list of :class:`bpsa.spec.layer.ConvLayer` fields)
or ``BPSA_LAYER`` (one layer string, ``C=..,H=..``), ``BPSA_SEED``, ``BPSA_RANDOM_BASE`` (non-empty:
X and W at random buffer offsets), ``BPSA_SUMMARY`` (a path: the JSON list of the layers'
summaries is written there, also when a layer mismatches).
"""

import json
import os

import cocotb
import numpy as np
from cocotb.triggers import ReadOnly, RisingEdge

from bpsa.config import Config
from bpsa.gateware.frontends.conv_forward import COUNTERS, conv_layer_layout
from bpsa.gateware.frontends.drain import y_layout
from bpsa.spec.layer import ConvLayer
from bpsa.sim.conv_forward_run import (
    assemble,
    descriptor,
    expected_y,
    pack_struct,
    random_operands,
    summary,
    unpack_struct,
    w_image,
    x_image,
)
from bpsa.sim.runner import load_config_json
from bpsa.sim.testbenches.tb_util import layers_from_env, reset, write_words


def _layers():
    return layers_from_env("C=2,H=6,W=7,K=5,R=3")


async def _reset(dut):
    await reset(dut, ("x_write", "w_write"))


def _max_cycles(cfg, layer):
    """A generous bound on a run's cycles (a hang fails instead of running forever)."""
    oh_n, ow_n = layer.out_hw
    tiles = -(-layer.out_channels // cfg.cols)
    ctxs = layer.batch * oh_n * -(-ow_n // cfg.rows)
    span = (cfg.rows - 1) * layer.stride_w + (layer.kernel_w - 1) * layer.dil_w + 1
    words = layer.channels * layer.kernel_h * (span // cfg.feeder_bus_width + 2)
    per_ctx = 2 * (layer.crs + words) + 2 * cfg.rows
    return tiles * (ctxs * per_ctx + 100) + 4 * (cfg.rows + cfg.cols) + 1000


async def run_layer(dut, cfg, desc, max_cycles):
    """Start the descriptor ``desc`` and collect the ``y`` rows until ``done``. Returns
    ``(rows, counters, error, cycles)``."""
    ylay = y_layout(cfg)
    arrays = {"data": (cfg.acc_width, cfg.cols, not cfg.is_float)}
    await RisingEdge(dut.clk)
    dut.layer.value = pack_struct(conv_layer_layout(cfg), desc)
    dut.start.value = 1
    await RisingEdge(dut.clk)
    dut.start.value = 0
    rows = []
    for cycle in range(max_cycles):
        await RisingEdge(dut.clk)
        await ReadOnly()
        if int(dut.y__valid.value):
            f = unpack_struct(ylay, int(dut.y__payload.value), arrays)
            rows.append((f["n"], f["k0"], f["oh"], f["ow0"], f["row"], f["data"]))
        if int(dut.done.value):
            break
    else:
        raise AssertionError(f"{desc}: not done after {max_cycles} cycles")
    counters = {c: int(getattr(dut, c).value) for c in COUNTERS}
    error = int(dut.error.value)
    await RisingEdge(dut.clk)
    return rows, counters, error, cycle


@cocotb.test()
async def forward_matches_golden(dut):
    """Every layer of the environment: Y equals the golden convolution, no error, the model's
    X SRAM word count."""
    cfg = Config.from_dict(load_config_json())
    rng = np.random.default_rng(int(os.environ.get("BPSA_SEED", "1")))
    random_base = bool(os.environ.get("BPSA_RANDOM_BASE"))
    await _reset(dut)
    results, failures = [], []
    for layer in _layers():
        x, w = random_operands(cfg, layer, rng)
        wwords = w_image(cfg, layer, w)
        x_size = int(np.prod(layer.x_shape))
        x_base = w_base = 0
        if random_base:
            x_base = int(rng.integers(0, min(3 * cfg.feeder_bus_width,
                                             cfg.buf_a_depth * cfg.feeder_bus_width
                                             - x_size) + 1))
            w_base = int(rng.integers(0, min(5, cfg.buf_b_depth - len(wwords)) + 1))
        desc = descriptor(cfg, layer, x_base, w_base)
        first, xwords = x_image(cfg, layer, x, x_base)
        await write_words(dut, "x_write", first, xwords, cfg.operand_width)
        await write_words(dut, "w_write", w_base, wwords, cfg.operand_width)
        rows, counters, error, cycles = await run_layer(dut, cfg, desc,
                                                        _max_cycles(cfg, layer))
        want = expected_y(cfg, layer, x, w)
        try:
            got = assemble(cfg, layer, rows)
            problem = None
        except AssertionError as e:
            got, problem = None, str(e)
        result = summary(cfg, layer, got, want, counters, x_base)
        result["error"] = error
        result["x_base"], result["w_base"] = x_base, w_base
        if error:
            result["match"] = False
            problem = "error raised"
        elif got is not None and not result["match"]:
            bad = np.argwhere(got != want)
            problem = f"{len(bad)} of {want.size} Y values differ, first at {tuple(bad[0])}"
        elif result["sram_words_read"] != result["model_words_read"]:
            problem = (f"{result['sram_words_read']} X words read, model "
                       f"{result['model_words_read']}")
        results.append(result)
        dut._log.info(f"{layer.text()}: {'match' if problem is None else problem}; "
                      f"{result['cycles']} cycles, utilization {result['utilization']:.3f}, "
                      f"X words {result['sram_words_read']} (im2col {result['im2col_words']}), "
                      f"stalls {result['stall_cycles']}")
        if problem is not None:
            failures.append(f"{layer.text()} (x_base {x_base}, w_base {w_base}): {problem}")
    if os.environ.get("BPSA_SUMMARY"):
        with open(os.environ["BPSA_SUMMARY"], "w") as f:
            json.dump(results, f)
    assert not failures, "; ".join(failures)


@cocotb.test()
async def illegal_layers_raise_error(dut):
    """Descriptors the hardware must refuse (W not fitting the W buffer, a kernel wider than
    the pattern, X not fitting the X SRAM, no output channel): ``error`` and ``done`` within a
    few dozen cycles, no Y row, no SRAM read; a legal layer afterwards runs."""
    cfg = Config.from_dict(load_config_json())
    await _reset(dut)
    big = ConvLayer.conv(1, 1, 4, 4, 1, 1, 1)
    cases = [
        dict(vars(ConvLayer.conv(1, 16, 8, 8, 8 * cfg.cols, 3, 3))),          # W too large
        dict(vars(ConvLayer.conv(1, 1, 8, cfg.feeder_pattern_width + 4, 1, 1,
                                 cfg.feeder_pattern_width + 1))),            # pattern width
        dict(vars(big), width=64,
             height=cfg.buf_a_depth * cfg.feeder_bus_width // 64 + 1),     # X too large
        dict(vars(big), out_channels=0),                                     # no output
    ]
    for fields in cases:
        fields.update(x_base=0, w_base=0, pad_bottom=fields["pad_h"])
        rows, counters, error, cycles = await run_layer(dut, cfg, fields, 200)
        assert error == 1 and rows == [], f"{fields}: error {error}, {len(rows)} rows"
        assert counters["words_read"] == 0 and counters["vectors"] == 0, f"{fields}: {counters}"
    layer = ConvLayer.conv(1, 2, 5, 6, cfg.cols + 1, 2, 3, pad=1)
    x, w = random_operands(cfg, layer, np.random.default_rng(0))
    await write_words(dut, "x_write", *x_image(cfg, layer, x), cfg.operand_width)
    await write_words(dut, "w_write", 0, w_image(cfg, layer, w), cfg.operand_width)
    rows, _, error, _ = await run_layer(dut, cfg, descriptor(cfg, layer), 5000)
    assert error == 0
    np.testing.assert_array_equal(assemble(cfg, layer, rows), expected_y(cfg, layer, x, w))
