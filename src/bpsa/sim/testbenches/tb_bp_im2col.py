"""cocotb testbench of the BP-im2col address generators (generated Verilog under Verilator).

The phase comes from ``BPSA_BP_PHASE`` (``loss``: top ``bp_loss_addr``, ``grad``: top
``bp_grad_addr``). Whole layers run with random ``ready`` on both streams; every beat of both
streams is compared with ``bpsa.models.bp_im2col_model`` (in order), the counters with the model's
counts, and the payload of a stalled beat must hold until it is taken. A refused descriptor
must raise ``error`` without any beat, and the generator must then run the next layer.
"""

import os
import random

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ReadOnly, RisingEdge, Timer

from bpsa.models.bp_im2col_model import (
    DESC_FIELDS,
    beats,
    counters,
    desc_fields,
    normalize,
    pack_desc,
    unpack_beat,
)
from bpsa.sim.runner import load_config_json
from bpsa.spec.layer import ConvLayer

LAYERS = [
    ConvLayer.conv(1, 2, 7, 5, 2, 3, 3, stride=2, pad=1),
    ConvLayer.conv(2, 1, 6, 9, 2, 2, 3, stride=(2, 3), pad=(1, 2), dil=(1, 2)),
    ConvLayer.conv(1, 1, 11, 8, 1, 7, 7, stride=2, pad=3),
    ConvLayer.conv(1, 2, 5, 6, 1, 1, 1, stride=2, pad=1),       # padding > d(R-1): crops dY
    ConvLayer.conv(2, 1, 9, 7, 2, 3, 2, stride=4, pad=(3, 0), dil=2),
]


def _bad_layer():
    """A descriptor with stride 0 (refused with ZERO_STEP)."""
    f = desc_fields(LAYERS[0])
    f["stride_w"] = 0
    return f


async def _reset(dut):
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    dut.rst.value = 1
    dut.desc__valid.value = 0
    dut.a__ready.value = 0
    dut.b__ready.value = 0
    await RisingEdge(dut.clk)
    await RisingEdge(dut.clk)
    dut.rst.value = 0


async def _send(dut, fields, dim_width):
    """Offer a descriptor until it is taken (handshake at a rising edge)."""
    dut.desc__payload.value = pack_desc(fields, dim_width)
    dut.desc__valid.value = 1
    while True:
        await ReadOnly()
        taken = int(dut.desc__ready.value)
        await RisingEdge(dut.clk)
        if taken:
            break
    dut.desc__valid.value = 0


async def _run_layer(dut, cfg, phase, rng, fields, ready_p):
    """Drive random ready until ``done`` or ``error``; returns (beats per side, counters,
    error, error_code). Each cycle: sample the outputs after the edge, then choose ready; a
    beat is taken at the next edge when it was valid and ready."""
    aw = {"a": (cfg["buf_a_depth"] - 1).bit_length(), "b": (cfg["buf_b_depth"] - 1).bit_length()}
    await _send(dut, fields, cfg["dim_width"])
    got = {"a": [], "b": []}
    stalled = {"a": None, "b": None}
    stalls = {"a": 0, "b": 0}
    for _ in range(200000):
        await ReadOnly()
        done, error, busy = int(dut.done.value), int(dut.error.value), int(dut.busy.value)
        shown = {}
        for side in "ab":
            valid = int(getattr(dut, f"{side}__valid").value)
            payload = int(getattr(dut, f"{side}__payload").value)
            if stalled[side] is not None:
                assert valid and payload == stalled[side], \
                    f"{side}: a stalled beat changed or vanished before it was taken"
            shown[side] = payload if valid else None
        if done or (error and not busy):
            break
        await Timer(1, unit="ns")
        for side in "ab":
            ready = rng.random() < ready_p
            getattr(dut, f"{side}__ready").value = int(ready)
            stalled[side] = None
            if shown[side] is not None:
                if ready:
                    got[side].append(unpack_beat(f"{phase}_{side}", shown[side],
                                                 cfg["rows"], cfg["cols"], aw[side]))
                else:
                    stalled[side] = shown[side]
                    stalls[side] += 1
        await RisingEdge(dut.clk)
    else:
        raise AssertionError("the generator hung")
    cnt = {name: int(getattr(dut, f"count_{name}").value)
           for name in ("prologue", "a_beats", "a_addrs", "a_words", "a_zeros", "a_stalls",
                        "b_beats", "b_addrs", "b_words", "b_zeros", "b_stalls")}
    for side in "ab":
        assert cnt[f"{side}_stalls"] == stalls[side], f"{side}: stall count"
    await Timer(1, unit="ns")
    return got, cnt, error, int(dut.error_code.value)


@cocotb.test()
async def layers_match_model(dut):
    """Whole layers with random backpressure: every beat equals the model; counters match."""
    cfg = load_config_json()
    phase = os.environ["BPSA_BP_PHASE"]
    rows, cols = cfg["rows"], cfg["cols"]
    rng = random.Random(int(os.environ.get("BPSA_SEED", "1")))
    await _reset(dut)
    for idx, layer in enumerate(LAYERS):
        ready_p = (1.0, 0.6, 0.3)[idx % 3]
        text = layer.text()
        got, cnt, error, _ = await _run_layer(dut, cfg, phase, rng, desc_fields(layer), ready_p)
        assert not error, f"{text}: refused"
        for side in "ab":
            stream = f"{phase}_{side}"
            expected = beats(layer, stream, rows, cols)
            seen = [normalize(stream, b, rows, cols) for b in got[side]]
            assert len(seen) == len(expected), \
                f"{text} {stream}: {len(seen)} beats, model {len(expected)}"
            for i, (g, e) in enumerate(zip(seen, expected)):
                assert g == e, f"{text} {stream} beat {i}: {g} != model {e}"
            want = counters(layer, stream, rows, cols, expected)
            for name, value in want.items():
                assert cnt[f"{side}_{name}"] == value, \
                    f"{text} {stream}: count {name} = {cnt[side + '_' + name]}, model {value}"
        dut._log.info(f"{phase} {text}: {len(got['a'])} a beats and {len(got['b'])} b beats "
                      f"match, prologue {cnt['prologue']} cycles, ready {ready_p}")


@cocotb.test()
async def bad_descriptor_flagged(dut):
    """A refused descriptor raises error (ZERO_STEP = 2) with no beat; the next layer runs."""
    cfg = load_config_json()
    phase = os.environ["BPSA_BP_PHASE"]
    rng = random.Random(2)
    await _reset(dut)
    assert set(DESC_FIELDS) == set(desc_fields(LAYERS[0]))
    got, _, error, code = await _run_layer(dut, cfg, phase, rng, _bad_layer(), 1.0)
    assert error and code == 2 and not got["a"] and not got["b"]
    layer = LAYERS[0]
    got, _, error, _ = await _run_layer(dut, cfg, phase, rng, desc_fields(layer), 1.0)
    assert not error
    for side in "ab":
        stream = f"{phase}_{side}"
        assert [normalize(stream, b, cfg["rows"], cfg["cols"]) for b in got[side]] \
            == beats(layer, stream, cfg["rows"], cfg["cols"])
