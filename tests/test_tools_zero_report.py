"""Tests of src/bpsa/tools/zero_report.py: one-channel mask counting scaled to real layers."""

import json

import numpy as np
import pytest

from bpsa.models import golden
from bpsa.tools import zero_report


def _nonzero(rng, shape):
    return rng.choice([-4, -3, -2, -1, 1, 2, 3, 4], size=shape)


TINY_LAYERS = [
    # Values as strings, as csv.DictReader gives them.
    {"network": "tiny", "layer": "a", "C": "2", "H": "7", "W": "6", "K": "3", "R": "3", "S": "2",
     "stride": "2", "pad": "1", "dilation": "1"},
    {"network": "tiny", "layer": "b", "C": 1, "H": 9, "W": 9, "K": 2, "R": 5, "S": 5,
     "stride": 3, "pad": 4, "dilation": 1},
    {"network": "tiny", "layer": "c", "C": 3, "H": 8, "W": 5, "K": 2, "R": 2, "S": 3,
     "stride": 2, "pad": 0, "dilation": 2},
    {"network": "tiny", "layer": "d", "C": 2, "H": 6, "W": 6, "K": 4, "R": 1, "S": 1,
     "stride": 2, "pad": 0, "dilation": 1},
]


@pytest.mark.parametrize("batch", [1, 2])
@pytest.mark.parametrize("row", TINY_LAYERS, ids=lambda row: row["layer"])
def test_zero_fractions_match_full_lowering(row, batch):
    # Build the full lowerings (all channels, the batch) from random nonzero data: every zero
    # of the lowered matrices is then a zero-space element, so counting == 0 is the truth.
    c, h, w, k, r, s, stride, pad, dil = (int(row[f]) for f in
                                          ("C", "H", "W", "K", "R", "S", "stride", "pad",
                                           "dilation"))
    oh, ow = golden.output_hw((h, w), (r, s), stride, pad, dil)
    rng = np.random.default_rng(c * 100 + h)
    x = _nonzero(rng, (batch, c, h, w))
    wt = _nonzero(rng, (k, c, r, s))
    dy = _nonzero(rng, (batch, k, oh, ow))
    loss = golden.lower_input_grad(dy, wt, (h, w), stride, pad, dil)
    grad = golden.lower_weight_grad(x, dy, (r, s), stride, pad, dil)

    def frac(*ms):
        return sum(int((m == 0).sum()) for m in ms) / sum(m.size for m in ms)

    res = zero_report.zero_fractions(row, batch=batch)
    assert res["network"] == "tiny" and res["layer"] == row["layer"]
    assert res["loss_b"] == frac(loss.b)
    assert res["loss_a"] == frac(loss.a) == 0.0
    assert res["loss_both"] == frac(loss.a, loss.b)
    assert res["grad_a"] == frac(grad.a)
    assert res["grad_b"] == frac(grad.b)
    assert res["grad_both"] == frac(grad.a, grad.b)
    assert res["loss_b_zeros"] == int((loss.b == 0).sum())
    assert res["loss_b_size"] == loss.b.size
    assert res["grad_a_zeros"] == int((grad.a == 0).sum())
    assert res["grad_a_size"] == grad.a.size
    assert res["grad_b_zeros"] == int((grad.b == 0).sum())
    assert res["grad_b_size"] == grad.b.size
    assert res["loss_b"] > 0.5 and res["grad_a"] > 0.3     # stride 2-3: many zero-spaces


def test_known_layer_fractions():
    rows = {(row["network"], row["layer"]): row for row in zero_report.load_layers()}
    # 1x1, stride 2, 56x56: dY 28x28 lands on every other pixel of every other row.
    res = zero_report.zero_fractions(rows["resnet50", "layer2.0.downsample"])
    assert res["loss_b"] == 0.75
    assert res["grad_a"] == 1 - 28 * 28 / 55 ** 2
    assert res["grad_b"] == 0.0
    # Loss B of a 3x3 / stride 2 / pad 1 layer: per axis, each of the 28 dY rows meets 3 taps,
    # of which only (oh = 0, r = 0) falls in the padding (row -1); per (k, n) the nonzeros of
    # B are these (dY pixel, tap) pairs, out of 9 * 56 * 56 elements.
    res = zero_report.zero_fractions(rows["resnet50", "layer2.0.conv2"])
    hits = 28 * 3 - 1
    assert res["loss_b"] == 1 - hits ** 2 / (9 * 56 * 56)


def test_default_csv_ships_in_the_package():
    assert zero_report.DEFAULT_CSV.name == "conv_layers.csv"
    assert zero_report.DEFAULT_CSV.is_file()
    rows = zero_report.load_layers()
    assert len(rows) == 30
    assert sum(row["stride"] >= 2 for row in rows) == 13
    assert all(isinstance(row[f], int) for row in rows for f in ("C", "H", "stride", "pad"))


def test_main_json(capsys):
    assert zero_report.main(["--json"]) == 0
    results = json.loads(capsys.readouterr().out)
    assert len(results) == 13
    for res in results:
        assert 0.74 < res["loss_b"] < 0.95
        assert 0.70 < res["grad_a"] < 0.94
        assert res["loss_a"] == 0.0
    alexnet = next(res for res in results if res["network"] == "alexnet")
    assert alexnet["loss_b"] > 0.93 and alexnet["grad_a"] > 0.93


def test_main_table(capsys, tmp_path):
    path = tmp_path / "layers.csv"
    path.write_text("network,layer,C,H,W,K,R,S,stride,pad,dilation\n"
                    "tiny,s1,2,6,6,2,3,3,1,1,1\n"
                    "tiny,s2,2,6,6,2,1,1,2,0,1\n")
    assert zero_report.main(["--csv", str(path)]) == 0
    out = capsys.readouterr().out
    assert "s2" in out and "s1" not in out
    assert "75.00%" in out                # 1x1 stride 2 on an even input: loss B is 3/4 zeros
    assert zero_report.main(["--csv", str(path), "--min-stride", "1"]) == 0
    assert "s1" in capsys.readouterr().out


def test_bad_batch():
    with pytest.raises(ValueError, match="batch"):
        zero_report.zero_fractions(TINY_LAYERS[0], batch=0)
