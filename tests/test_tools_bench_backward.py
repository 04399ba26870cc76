"""The backward benchmark's results page from made-up rows (the runs themselves need Verilator
and minutes: ``make bench-backward``): a row a layer and phase, the means a phase."""

from bpsa.config import load_config
from bpsa.tools.bench_backward import markdown


def _row(phase, change):
    return {"phase": phase, "layer": "C=4,H=8,W=8,K=4,R=3,S=3,stride=2,pad=1,dilation=1,N=1",
            "words_a": [10, 20], "words_b": [30, 40], "words_change": change, "b_change": -25.0,
            "cycles": [100, 150], "reorg_cycles": 40, "cycles_change": -33.3,
            "footprint": [50, 80], "footprint_change": -37.5, "prologue": [3, 5]}


def test_markdown_a_row_a_layer_and_the_means():
    text = markdown(load_config("small"), [_row("loss", -40.0), _row("loss", -20.0),
                                           _row("gradient", -10.0)])
    assert ("| loss | C=4,H=8,W=8,K=4,R=3,S=3,stride=2,pad=1 | 10 / 20 | 30 / 40 | -40.0% "
            "| 100 / 150 | 40 | -33.3% | 50 / 80 | -37.5% | 3 / 5 |") in text
    assert "- loss: buffer words -30.0% (B -25.0%), runtime -33.3%" in text
    assert "- gradient: buffer words -10.0%" in text
