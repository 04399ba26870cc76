"""The full-size RTL layer table's core on a few tiny layers of ``small`` (the native build the
other Verilator tests use): every row is bit-exact against the golden model and holds the
RTL's counters next to :func:`bpsa.models.perf.layer_cycles` of the same layer. ``make
rtl-layers`` runs it on seven full-size ResNet-50 layers (paper16)."""

import pytest

from bpsa.config import load_config
from bpsa.models.perf import layer_cycles
from bpsa.spec.layer import ConvLayer
from bpsa.tools.rtl_layers import (BUFFER_COUNTS, LAYERS, TOLERANCE, Case, layer_cases,
                                   measure)

SMALL = load_config("small")

CASES = [
    Case("a", "forward", "feeder", ConvLayer.conv(1, 3, 11, 11, 5, 3, 3, 2, 1)),
    Case("b", "gradient", "zero_free", ConvLayer.conv(2, 6, 8, 8, 5, 1, 1, 2, 0)),
    Case("c", "loss", "zero_free", ConvLayer.conv(1, 5, 8, 8, 6, 3, 3, 2, 1)),
]


@pytest.mark.verilator
def test_rows_match_golden_and_hold_model_and_rtl():
    rows = measure(SMALL, CASES, progress=False)
    # (b: a 1 x 1 stride-2 gradient, run as the driver's space-to-depth)
    assert [(r["layer"], r["phase"], r["frontend"]) for r in rows] == [
        (c.name, c.phase, c.frontend + (" (space-to-depth)" if c.name == "b" else ""))
        for c in CASES]
    for case, r in zip(CASES, rows):
        assert r["match"] and r["dma_equal"] and r["buffers_equal"], r
        m = layer_cycles(SMALL, case.phase, case.layer,
                         frontend=case.frontend if case.phase == "forward" else "feeder")
        assert (r["model_cycles"], r["model_dma_read_bytes"], r["model_dma_write_bytes"]) == (
            m.cycles, m.dma_read_bytes, m.dma_write_bytes)
        assert r["rtl_cycles"] > 0 and r["rtl_dma_read_bytes"] > 0
        assert r["error"] == pytest.approx(r["model_cycles"] / r["rtl_cycles"] - 1)
        assert r["within"] == (abs(r["error"]) <= TOLERANCE)
        assert r["dma_equal"] == ((r["rtl_dma_read_bytes"], r["rtl_dma_write_bytes"])
                                  == (r["model_dma_read_bytes"], r["model_dma_write_bytes"]))
        assert r["model_buffer_words"] == {k: getattr(m, k) for k in BUFFER_COUNTS}
        assert r["buffers_equal"] == (r["rtl_buffer_words"] == r["model_buffer_words"])
        assert r["sim_cycles"] >= r["rtl_cycles"] and r["seconds"] > 0
        assert r["batch"] == case.layer.batch and "banded" in r["plan"]


def test_the_table_layers_on_paper16():
    cases = layer_cases(load_config("paper16"))
    assert len(cases) == len(LAYERS) == 7
    assert {(c.name, c.phase) for c in cases} >= {("conv1", "forward"),
                                                  ("layer3.0.downsample.0", "gradient"),
                                                  ("layer2.0.downsample.0", "forward")}
    assert [c.frontend for c in cases if c.phase != "forward"] == ["zero_free"] * 3
    stacked = [c for c in cases if c.name == "layer4.1.conv1"][0]
    assert stacked.layer.batch == 2 and stacked.frontend == "channel_first"
