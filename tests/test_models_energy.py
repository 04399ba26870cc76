"""The energy model (``bpsa.models.energy``) against the published figures it is built from,
typed here by hand (Horowitz, ISSCC 2014, 45 nm; Han et al., ISCA 2016), the rules it states
for the figures the papers do not give, and ``bpsa sim --energy`` on the accelerator's RTL
against the same formula applied by hand to the run's counters."""

import json
import math

import pytest

from bpsa.config import load_config
from bpsa.models.energy import (TECH_45NM, actions_from_counters, actions_from_model,
                                counted_memories, energy, mac_pj, rows_energy, sram_pj)

SMALL = load_config("small")
KB = 1024


def test_sram_energy_is_the_published_points_and_the_lines_through_them():
    # Horowitz: a 64-bit read of 8 KB 10 pJ, 32 KB 20 pJ, 1 MB 100 pJ
    assert sram_pj(8 * KB, 64) == pytest.approx(10.0)
    assert sram_pj(32 * KB, 64) == pytest.approx(20.0)
    assert sram_pj(1024 * KB, 64) == pytest.approx(100.0)
    # log-log between them (16 KB: the square root of 2 up from 8 KB), below 8 KB the same
    # slope, and in proportion to the width
    assert sram_pj(16 * KB, 64) == pytest.approx(10 * math.sqrt(2))
    assert sram_pj(2 * KB, 64) == pytest.approx(5.0)
    assert sram_pj(8 * KB, 16) == pytest.approx(2.5)
    assert sram_pj(256 * KB, 64) == pytest.approx(20 * 5 ** (math.log(8) / math.log(32)))
    with pytest.raises(ValueError, match="positive capacity"):
        sram_pj(0, 64)


def test_mac_energy_per_arithmetic():
    # int8 operands, 32-bit accumulators: 0.2 pJ multiply, 0.1 pJ add (published)
    assert mac_pj(SMALL) == pytest.approx((0.2, 0.1))
    # 16-bit operands: the geometric mean of the 8- and 32-bit multiplies; a 48-bit add on
    # the 16-32-bit line (0.05, 0.1) extended
    cfg = SMALL.replace(operand_width=16, acc_width=48)
    assert mac_pj(cfg) == pytest.approx((math.sqrt(0.2 * 3.1), 0.15))
    # floating point: fp16's multiply (bf16 priced as it), fp32's add
    assert mac_pj(load_config("small_bf16")) == pytest.approx((1.1, 0.9))
    # MX: an 8-bit multiply, the block sum's add at the accumulator width
    mx = load_config("small_mxint8")
    assert mac_pj(mx)[0] == pytest.approx(0.2)


def test_energy_adds_up_the_actions():
    actions = {"macs_fired": 1000, "macs_gated": 600,
               "memory": {"A": (300, 100), "B": (50, 50), "P": (10, 20)},
               "dram_bytes": 2000}
    got = energy(SMALL, actions)
    # small: A 1,024 words of 64 bits (8 KB: 10 pJ a word), B 1,024 of 32 bits (4 KB), P
    # 1,024 of 128 bits (16 KB)
    parts = {"mac": 1000 * 0.3, "sram_A": 400 * 10.0,
             "sram_B": 100 * 10 / math.sqrt(2) / 2, "sram_P": 30 * 10 * math.sqrt(2) * 2,
             "dram": 2000 * 160.0}
    assert got["parts"] == pytest.approx(parts)
    assert got["pj"] == pytest.approx(sum(parts.values()))
    assert got["pj_per_mac"] == pytest.approx(sum(parts.values()) / 1600)
    # a gated MAC costs nothing: gating 400 more of the same slots saves their energy
    fewer = energy(SMALL, {**actions, "macs_fired": 600, "macs_gated": 1000})
    assert got["pj"] - fewer["pj"] == pytest.approx(400 * 0.3)


def test_counters_map_to_the_memory_the_front_end_reads():
    counters = {"macs": 7, "gated_macs": 3, "buf_a_reads": 11, "buf_a_writes": 2,
                "buf_b_reads": 5, "buf_b_writes": 1, "buf_p_reads": 4, "buf_p_writes": 6,
                "dma_read_bytes": 40, "dma_write_bytes": 8}
    cf = actions_from_counters(load_config("small_cf"), "channel_first", counters)
    assert cf == {"macs_fired": 7, "macs_gated": 3, "dram_bytes": 48,
                  "memory": {"CF": (11, 2), "B": (5, 1), "P": (4, 6)}}
    assert counted_memories("zero_free") == ("A", "B")
    assert counted_memories("pool") == ("POOL", None)
    with pytest.raises(ValueError, match="mode must be one of"):
        counted_memories("traditional")
    assert TECH_45NM.dram_byte == 160.0         # 640 pJ a 32-bit word


@pytest.mark.verilator
def test_sim_energy_is_the_formula_on_the_runs_counters(capsys):
    from bpsa.cli import main
    main(["sim", "--config", "small", "--phase", "loss", "--layer",
          "C=6,H=7,W=9,K=5,R=3,pad=1", "--energy", "--json", "--quiet"])
    r = json.loads(capsys.readouterr().out)
    assert r["match"] and r["mode"] == "zero_free"
    # small, int8: a fired MAC 0.3 pJ; A 10 pJ a word, B 3.54, P 28.3; DRAM 160 pJ a byte
    parts = {"mac": r["macs"] * 0.3, "sram_A": r["buf_a_words"] * 10.0,
             "sram_B": r["buf_b_words"] * 10 / math.sqrt(2) / 2,
             "sram_P": r["buf_p_words"] * 10 * math.sqrt(2) * 2,
             "dram": (r["dma_read_bytes"] + r["dma_write_bytes"]) * 160.0}
    for name, pj in parts.items():
        assert r[f"energy_{name}_pj"] == pytest.approx(pj), name
    assert r["energy_pj"] == pytest.approx(sum(parts.values()))
    assert r["energy_pj_per_mac"] == pytest.approx(
        sum(parts.values()) / (r["macs"] + r["gated_macs"]))
    assert min(parts.values()) > 0



def test_model_actions_name_the_memories_the_counters_do():
    from bpsa.models.perf import layer_cycles
    from bpsa.spec.layer import ConvLayer
    cf_cfg = load_config("small_cf")
    layer = ConvLayer.conv(2, 6, 9, 9, 5, 3, 3, 1, 1)
    cf = layer_cycles(cf_cfg, "forward", layer, frontend="channel_first")
    row = dict(cf.as_dict(), phase="forward")
    acts = actions_from_model(cf_cfg, row)
    assert acts["memory"] == {"CF": (cf.a_reads, cf.a_writes), "B": (cf.b_reads, cf.b_writes),
                              "P": (cf.p_reads, cf.p_writes)}
    assert acts["dram_bytes"] == cf.dma_read_bytes + cf.dma_write_bytes
    # every MAC fired, the slots beyond them gated; a zero fraction gates that share
    assert (acts["macs_fired"], acts["macs_gated"]) == (cf.macs, cf.array_slots - cf.macs)
    half = actions_from_model(cf_cfg, row, zero_fraction=0.5)
    assert half["macs_fired"] == round(cf.macs / 2)
    assert half["macs_fired"] + half["macs_gated"] == cf.array_slots
    loss = layer_cycles(SMALL, "loss", layer)
    assert set(actions_from_model(SMALL, dict(loss.as_dict(), phase="loss"))["memory"]) == {
        "A", "B", "P"}
    with pytest.raises(ValueError, match="zero_fraction"):
        actions_from_model(SMALL, row, zero_fraction=1.5)


def test_rows_energy_sums_the_rows_that_ran():
    from bpsa.models.perf import layer_cycles
    from bpsa.spec.layer import ConvLayer
    layer = ConvLayer.conv(1, 4, 8, 8, 4, 3, 3, 1, 1)
    rows = [dict(layer_cycles(SMALL, p, layer).as_dict(), phase=p, status="run")
            for p in ("forward", "loss", "gradient")]
    rows.append({"phase": "loss", "status": "refused", "reason": "too large"})
    got = rows_energy(SMALL, rows, zero_fraction=0.25)
    each = [energy(SMALL, actions_from_model(SMALL, r, zero_fraction=0.25))["pj"]
            for r in rows[:3]]
    assert got["pj"] == pytest.approx(sum(each))
    assert [r["energy_pj"] for r in rows[:3]] == pytest.approx(each)
    assert got["phases"] == pytest.approx(dict(zip(("forward", "loss", "gradient"), each)))
    assert sum(got["parts"].values()) == pytest.approx(got["pj"])
    assert got["pj_per_mac"] == pytest.approx(sum(each) / sum(r["macs"] for r in rows[:3]))
    # a row's own (measured) zero fraction wins over the argument
    rows[1]["zero_fraction"] = 0.75
    mixed = rows_energy(SMALL, rows, zero_fraction=0.25)
    loss = energy(SMALL, actions_from_model(SMALL, rows[1], zero_fraction=0.75))["pj"]
    assert mixed["pj"] == pytest.approx(each[0] + loss + each[2]) and loss < each[1]


def test_perf_energy_on_a_layer(capsys):
    from bpsa.cli import main
    main(["perf", "--config", "small", "--layer", "C=4,H=8,K=4,R=3,pad=1", "--energy",
          "--zero-fraction", "0.5", "--json"])
    out = json.loads(capsys.readouterr().out)
    e = out["energy"]
    assert e["zero_fraction"] == 0.5 and e["technology"] == "45nm"
    assert e["pj"] == pytest.approx(sum(r["energy_pj"] for r in out["layers"]))
    assert set(e["phases"]) == {"forward", "loss", "gradient"}
    main(["perf", "--config", "small", "--layer", "C=4,H=8,K=4,R=3,pad=1", "--energy"])
    text = capsys.readouterr().out
    assert "energy (45nm, 0 of the MACs gated):" in text and "pJ a MAC" in text
