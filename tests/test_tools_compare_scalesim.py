"""The SCALE-Sim comparison's inputs: the configuration file SCALE-Sim reads (every key its
reader asks for, our array and buffer sizes), the topology line (padding added to H and W,
as SCALE-Sim has no padding field), and the table's sentence for a layer more than 10 % off.
SCALE-Sim itself runs in ``make compare-scalesim`` (its own environment, minutes a layer)."""

import configparser

from bpsa.config import load_config
from bpsa.tools.compare_scalesim import markdown, scalesim_config, topology_row


def test_config_file():
    cp = configparser.ConfigParser()
    cp.read_string(scalesim_config(load_config("paper16"), "run"))
    arch = cp["architecture_presets"]
    assert (int(arch["ArrayHeight"]), int(arch["ArrayWidth"]), arch["Dataflow"]) == (16, 16, "os")
    # X: 4096 words of 16 int16 = 128 kB; W: 4096 x 16 x 2 B = 128 kB; P: 4096 x 16 x 4 B
    assert (int(arch["IfmapSramSzkB"]), int(arch["FilterSramSzkB"]),
            int(arch["OfmapSramSzkB"])) == (128, 128, 256)
    assert cp["run_presets"]["InterfaceBandwidth"] == "CALC"
    for key in ("IfmapCustomLayout", "FilterSRAMBankPort"):
        assert key in cp["layout"]
    assert cp["sparsity"]["SparsitySupport"] == "false"


def test_topology_row_pads_the_input():
    row = {"network": "resnet50", "layer": "conv1", "C": "3", "H": "224", "W": "224",
           "K": "64", "R": "7", "S": "7", "stride": "2", "pad": "3", "dilation": "1"}
    assert topology_row(row) == "resnet50.conv1, 230, 230, 7, 7, 3, 64, 2,"


def test_table_sentences():
    table = [{"layer": "a", "macs": 2560, "ideal": 10, "model": 12, "model_compute": 11,
              "scalesim": 11},
             {"layer": "b", "macs": 2560, "ideal": 10, "model": 30, "model_compute": 20,
              "scalesim": 15},
             {"layer": "c", "macs": 9, "ideal": 1, "model": 5, "model_compute": 4,
              "reason": "over --max-macs"}]
    text = markdown(load_config("paper16"), table)
    assert "| a | 2,560 | 10 | 11 | 12 | 1.09 |" in text
    assert "- b: the model is 100% above SCALE-Sim" in text and "- a:" not in text
    assert "| c | 9 | 1 | not run: over --max-macs | 5 | |" in text
