"""ZigZag's inputs describe our hardware (the buffers' sizes and widths, the per-action energies
of bpsa.models.energy, the array) and the layer; the page puts both models' figures side by
side. ZigZag itself runs in its own environment (make compare-zigzag), not here."""

from math import prod

import yaml

from bpsa.config import load_config
from bpsa.models.energy import TECH_45NM, mac_pj, sram_pj
from bpsa.spec.layer import ConvLayer
from bpsa.plan import setup, tiling
from bpsa.spec.regmap import Mode, Phase
from bpsa.tools.compare_zigzag import (_markdown, _ours, accelerator_yaml, mapping_yaml,
                                       plan_ordering, workload_yaml)

PAPER16 = load_config("paper16")


def test_accelerator_is_our_hardware_at_our_energies():
    acc = yaml.safe_load(accelerator_yaml(PAPER16, ConvLayer.conv(1, 3, 32, 32, 8, 5, 5, 2, 2)))
    mem = acc["memories"]
    # paper16: A 4,096 words of 16 x 16 bits (128 KB), B the same, P 4,096 of 16 x 32 bits
    assert (mem["sram_A"]["size"], mem["sram_B"]["size"], mem["sram_P"]["size"]) == (
        4096 * 256, 4096 * 256, 4096 * 512)
    assert mem["sram_A"]["r_cost"] == sram_pj(128 * 1024, 256)
    assert mem["sram_P"]["w_cost"] == sram_pj(256 * 1024, 512)
    assert mem["dram"]["r_cost"] == PAPER16.dma_data_width // 8 * TECH_45NM.dram_byte
    assert all(mem[r]["r_cost"] == 0 for r in ("reg_X", "reg_W", "reg_P"))
    assert mem["reg_P"]["size"] == PAPER16.acc_width
    assert acc["operational_array"]["sizes"] == [16, 16]
    # the lane registers: 16 output pixels at stride 2 and a 5-wide kernel span 35 elements
    assert mem["reg_lane"]["size"] == 35 * 16 and mem["reg_lane"]["r_cost"] == 0
    assert list(mem).index("reg_lane") < list(mem).index("sram_A")
    assert acc["operational_array"]["unit_energy"] == sum(mac_pj(PAPER16))
    names = [p["name"] for m in mem.values() for p in m["ports"]]
    assert all(n.split("_port_")[0] in ("r", "w", "rw") for n in names)


def test_workload_and_mapping_of_a_layer():
    layer = ConvLayer.conv(2, 64, 27, 27, 192, 5, 5, 1, 2)
    w = yaml.safe_load(workload_yaml(PAPER16, layer))[0]
    assert w["loop_sizes"] == [2, 192, 64, 27, 27, 5, 5]
    assert w["padding"] == [[2, 2], [2, 2]]
    assert w["operand_precision"] == {"I": 16, "W": 16, "O": 32, "O_final": 32}
    m = yaml.safe_load(mapping_yaml(PAPER16, ConvLayer.conv(1, 3, 12, 12, 8, 3, 3, 2, 1)))[0]
    assert m["spatial_mapping"] == {"D1": ["K, 8"], "D2": ["OX, 6"]}


def test_plan_ordering_is_the_drivers_tiling_divided_evenly():
    for layer in (ConvLayer.conv(1, 64, 27, 27, 192, 5, 5, 1, 2),
                  ConvLayer.conv(2, 3, 224, 224, 64, 3, 3, 1, 1),
                  ConvLayer.conv(1, 128, 56, 56, 256, 3, 3, 1, 1)):
        e = setup.run(PAPER16, tiling.setup_descriptor(Phase.FORWARD, layer, Mode.BP_IM2COL),
                      addresses=False)
        order = plan_ordering(PAPER16, layer)
        dims = [d for d, _ in order]
        # innermost the taps, then a group's channels; each dimension's loops make the layer
        # (the spatial unrolling takes 16 output channels and 16 pixels of a row)
        assert dims[:2] == ["FX", "FY"]
        oh, ow = layer.out_hw
        whole = {"FX": layer.kernel_w, "FY": layer.kernel_h, "C": layer.channels,
                 "K": layer.out_channels // 16, "OY": oh, "OX": -(-ow // 16), "B": layer.batch}
        for d, size in whole.items():
            assert prod(s for dd, s in order if dd == d) == size, (layer, d)
        # no fewer groups, steps and bands than the plan runs
        inner_c = order[2][1] if order[2][0] == "C" else 1     # a group's, after the taps
        assert inner_c <= e["cg"] and -(-layer.channels // e["cg"]) <= layer.channels // inner_c
    # AlexNet's second layer: the plan's groups of 44 of 64 channels become 2 of 32, its 12
    # output-channel blocks in steps of 5 become 3 steps of 4
    assert plan_ordering(PAPER16, ConvLayer.conv(1, 64, 27, 27, 192, 5, 5, 1, 2)) == [
        ("FX", 5), ("FY", 5), ("C", 32), ("OX", 2), ("OY", 27), ("K", 4), ("C", 2), ("K", 3)]
    m = yaml.safe_load(mapping_yaml(PAPER16, ConvLayer.conv(1, 3, 12, 12, 8, 3, 3, 2, 1),
                                    [("FX", 3), ("C", 3)]))[0]
    assert m["temporal_ordering"] == [["FX", 3], ["C", 3]]


def test_page_puts_both_side_by_side():
    layer = ConvLayer.conv(1, 3, 16, 16, 8, 3, 3, 1, 1)
    ours = _ours(PAPER16, layer)
    zz = {"macs": ours["macs"], "pj": ours["pj"] * 2,
          "levels": {k: {"words": v * 2, "pj": 0.0} for k, v in ours["words"].items()}}
    own = {"pj": ours["pj"] / 2}
    md = _markdown(PAPER16, [{"layer": "x", "ours": ours, "zigzag": zz, "search": own,
                              "ordering": [("FX", 3), ("C", 3)]},
                             {"layer": "y", "ours": ours, "search": own, "ordering": [],
                              "zigzag": {"reason": "ZigZag failed: boom"}}])
    assert "| x | FX3 C3 | True |" in md and "| 0.50 | 0.50 | 0.50 | 0.50 | 0.50 |" in md
    assert md.rstrip().count("| 2.00 |") >= 1
    assert "| y |  | not run: ZigZag failed: boom |" in md
