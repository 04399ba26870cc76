"""Yosys area reports (src/bpsa/tools/synth.py): the report of a block and the whole-design
report, from real synthesis runs of the PE through YoWASP Yosys."""

import json

import pytest

from bpsa.config import load_config
from bpsa.tools.synth import (
    ARRAY_VARIANTS,
    PAPER_FIGURES,
    PE_VARIANTS,
    SynthReport,
    design_report,
    synth_report,
)
from bpsa.tools.yosys import TARGETS


@pytest.fixture(scope="module")
def small():
    return load_config("small")


@pytest.fixture(scope="module")
def small_report(small, tmp_path_factory):
    """The PE of the small preset (8-bit operands, 32-bit accumulators, every feature) on
    every target."""
    return synth_report(small, "pe", tmp_path_factory.mktemp("synth_small"))


def test_report_files(small, small_report):
    out = small_report.markdown_path.parent
    assert isinstance(small_report, SynthReport)
    assert small_report.markdown_path.name == "pe_area.md"
    assert small_report.json_path.name == "pe_area.json"
    assert json.loads(small_report.json_path.read_text()) == small_report.data
    assert json.loads((out / "pe.json").read_text())["config"] == small.to_dict()
    assert "module pe(" in (out / "pe.v").read_text()
    md = small_report.markdown_path.read_text()
    assert "config `small`" in md
    for target in TARGETS:
        assert (out / f"pe_{target}.log").is_file()
        assert f"## {TARGETS[target].title}" in md
    # Nothing machine-specific in the report.
    assert str(out) not in small_report.json_path.read_text()
    # Stamped for docs/results/area.md: the command, the commit and the date of the run.
    from bpsa.tools.results import git_commit, today
    assert (small_report.data["commit"], small_report.data["date"]) == (git_commit(), today())
    assert small_report.data["command"]


def test_generic_counts(small, small_report):
    generic = small_report.data["targets"]["generic"]
    s = generic["summary"]
    assert s["cells"] > 0
    assert s["cells"] == sum(generic["cells_by_type"].values())
    # At least the accumulator, the reserve register, the vertical output (acc_width wide with
    # held-operand dataflows) and the horizontal output register.
    assert s["ff_bits"] >= 3 * small.acc_width + small.operand_width
    assert s["multipliers"] == 1
    assert "latch_bits" not in s


def test_fpga_counts(small_report):
    targets = small_report.data["targets"]
    ice40, ecp5 = targets["ice40"]["summary"], targets["ecp5"]["summary"]
    # With -dsp the 8x8 multiplier goes into an SB_MAC16; ECP5 uses a MULT18X18D.
    assert ice40["dsps"] >= 1
    assert targets["ice40"]["cells_by_type"]["SB_MAC16"] == ice40["dsps"]
    assert ecp5["dsps"] >= 1
    assert ice40["luts"] > 0 and ecp5["lut4"] > 0
    assert ecp5["luts"] == ecp5["lut4"] + 2 * ecp5["ccu2c"]
    assert ice40["brams"] == ecp5["brams"] == 0
    # The same registers on iCE40 and generic gates; on the ECP5 the multiplier's input
    # registers (2 x 8 bits) and first product register (up to 17 bits, some of which Yosys
    # merges elsewhere as copies of the sign) are the MULT18X18D's own.
    assert ice40["ffs"] == targets["generic"]["summary"]["ff_bits"]
    assert 2 * 8 + 8 <= ice40["ffs"] - ecp5["ffs"] <= 2 * 8 + 17


def test_reproducible(tmp_path):
    config = load_config("plain_os")
    a = synth_report(config, "pe", tmp_path / "a", targets=["generic"])
    b = synth_report(config, "pe", tmp_path / "b", targets=["generic"])
    assert a.json_path.read_bytes() == b.json_path.read_bytes()
    assert a.markdown_path.read_bytes() == b.markdown_path.read_bytes()


def test_bad_arguments(small, tmp_path):
    with pytest.raises(ValueError, match="targets must be"):
        synth_report(small, "pe", tmp_path, targets=("asic",))
    with pytest.raises(ValueError, match="top must be one of"):
        synth_report(small, "no_such_top", tmp_path)
    with pytest.raises(TypeError, match="config must be a Config"):
        design_report({"rows": 4}, tmp_path)
    with pytest.raises(ValueError, match="targets must be"):
        design_report(small, tmp_path, targets=())


# Whole-design report ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def design_config(small):
    """The small preset with a 2 x 2 array: the report synthesizes the array in every variant,
    four times fewer PEs each than the 4 x 4."""
    return small.replace(rows=2, cols=2)


@pytest.fixture(scope="module")
def design(design_config, tmp_path_factory):
    """The design report of :func:`design_config` for a few blocks (and one name that is not
    a top), on generic gates, with the array as the total (the accelerator takes minutes)."""
    return design_report(design_config, tmp_path_factory.mktemp("design"), targets="generic",
                         blocks=("pe", "array", "no_such_block", "im2col_addr"), total="array")


def test_design_report_files(design):
    out = design.markdown_path.parent
    assert design.markdown_path.name == "design_report.md"
    assert design.json_path.name == "design_report.json"
    assert json.loads(design.json_path.read_text()) == design.data
    assert str(out) not in design.json_path.read_text()
    for block in ("pe", "array", "im2col_addr"):
        assert (out / f"{block}.v").is_file()
        assert (out / f"{block}_generic.log").is_file()
    md = design.markdown_path.read_text()
    assert "# Synthesis report: `small`" in md
    assert "skipped `no_such_block`: not registered in src/bpsa/platform/verilog.py TOPS" in md
    for heading in ("## Blocks", "## Feature overheads", "### Variants"):
        assert heading in md
    for block in ("pe", "array", "im2col_addr"):
        assert f"| `{block}` |" in md
    assert PAPER_FIGURES["reserve_registers"] in md


def test_design_report_blocks(design_config, design):
    data = design.data
    assert data["targets"] == ["generic"]
    assert data["total"] == "array"
    assert data["skipped"] == {"no_such_block":
                               "not registered in src/bpsa/platform/verilog.py TOPS"}
    assert data["failed"] == {}
    assert list(data["blocks"]) == ["pe", "array", "im2col_addr"]
    pes = design_config.rows * design_config.cols
    for name, block in data["blocks"].items():
        result = block["targets"]["generic"]
        s = result["summary"]
        assert s["cells"] > 0 and s["ff_bits"] > 0, name
        assert s["cells"] == sum(result["cells_by_type"].values())
        assert s["memory_bits"] == 0         # no buffers in these blocks
        assert "-flatten" not in result["command"]
    array = data["blocks"]["array"]["targets"]["generic"]
    assert array["summary"]["multipliers"] >= pes
    # The PEs below the array add up, with the array's own cells, to the array.
    assert sum(c["instances"] for c in array["children"].values()) == pes
    for key in ("cells", "ff_bits", "multipliers"):
        assert sum(c["summary"][key] for c in array["children"].values()) \
            + array["own"][key] == array["summary"][key]
    # Shares of the total, in generic cells.
    shares = data["shares"]["generic"]
    assert shares["array"] == 100.0
    for name in ("pe", "im2col_addr"):
        cells = data["blocks"][name]["targets"]["generic"]["summary"]["cells"]
        assert shares[name] == round(100 * cells / array["summary"]["cells"], 2)
        assert 0 < shares[name] < 100
    assert data["instances_in_total"]["generic"]["pe"] == pes
    assert data["instances_in_total"]["generic"]["im2col_addr"] == 0


def test_design_report_features(small, design):
    data = design.data
    pe_variants, array_variants = data["variants"]["pe"], data["variants"]["array"]
    assert list(pe_variants) == [key for key, _, _ in PE_VARIANTS]
    assert list(array_variants) == [key for key, _, _ in ARRAY_VARIANTS]
    # The small preset has every feature: its array is the last variant, synthesized once.
    assert array_variants["il"]["same_as"] == "array"
    assert array_variants["il"]["targets"] == data["blocks"]["array"]["targets"]
    assert "same_as" not in pe_variants["il"]
    rows = data["features"]["generic"]
    # Without the feeder, conv_forward and BP-im2col blocks only the variant steps are given.
    assert [r["feature"] for r in rows] == 2 * ["zero_gating", "reserve_registers", "held",
                                                "interleave"]
    total = data["blocks"]["array"]["targets"]["generic"]["summary"]["cells"]
    before = {"zg": "plain", "rr": "zg", "held": "rr", "il": "held"}
    steps = iter(before.items())
    for row in rows:
        key, prev = next(steps, (None, None))
        if key is None:
            steps = iter(before.items())
            key, prev = next(steps)
        variants = pe_variants if row["label"].endswith(", pe") else array_variants
        a = variants[key]["targets"]["generic"]["summary"]["cells"]
        b = variants[prev]["targets"]["generic"]["summary"]["cells"]
        assert row["delta"] == a - b
        assert row["share_of_total"] == round(100 * (a - b) / total, 2)
        assert row["paper"] == PAPER_FIGURES[row["feature"]]
    # The steps add up to the whole chain.
    for variants, level in ((pe_variants, "pe"), (array_variants, "array")):
        chain = [r["delta"] for r in rows if r["label"].endswith(f", {level}")]
        assert sum(chain) == (variants["il"]["targets"]["generic"]["summary"]["cells"]
                              - variants["plain"]["targets"]["generic"]["summary"]["cells"])
    # Zero gating and reserve registers add registers to the array.
    assert array_variants["plain"]["targets"]["generic"]["summary"]["ff_bits"] \
        < array_variants["zg"]["targets"]["generic"]["summary"]["ff_bits"] \
        < array_variants["rr"]["targets"]["generic"]["summary"]["ff_bits"]


def test_design_features_feeder_and_bp_im2col():
    """The feeder and BP-im2col rows, from made-up counts."""
    from bpsa.tools.synth import _design_features

    def block(cells, instances=None):
        result = {"summary": {"cells": cells}}
        if instances is not None:
            result["instances"] = instances
        return {"targets": {"generic": result}}

    blocks = {"feeder": block(70), "conv_forward": block(1000), "bp_loss_addr": block(300),
              "bp_grad_addr": block(200), "im2col_addr": block(100),
              "accelerator": block(5000, {"accelerator.forward": 1,
                                          "accelerator.forward.feeder": 1,
                                          "accelerator.backward.loss_gen": 1,
                                          "accelerator.backward.grad_gen": 1})}
    rows = {r["feature"]: r for r in _design_features(("generic",), blocks, {},
                                                      "accelerator")["generic"]}
    assert list(rows) == ["feeder", "bp_im2col"]
    assert rows["feeder"]["overhead"] == 7.0          # 70 of 1000 cells of conv_forward
    assert rows["feeder"]["share_of_total"] == 1.4    # 70 of 5000
    assert rows["bp_im2col"]["ratio"] == 5.0          # (300 + 200) / 100
    assert rows["bp_im2col"]["share_of_total"] == 10.0
    assert rows["bp_im2col"]["traditional_share_of_total"] == 2.0
    # Without a total, no shares.
    del blocks["accelerator"]
    rows = _design_features(("generic",), blocks, {}, None)["generic"]
    assert all(r["share_of_total"] is None for r in rows)


def test_cli_report_excludes_other_reports(capsys):
    from bpsa.cli import main
    assert main(["synth", "--report", "--pe-overheads"]) == 2
    assert "only one of --report" in capsys.readouterr().err


def test_timing_estimate_of_a_block(tmp_path):
    """``timing=True``: Yosys ``synth_ecp5`` then nextpnr-ecp5 out of context report the PE's
    Fmax (a real place and route, so a plausible band, not a figure), in the JSON and the
    Markdown."""
    report = synth_report(load_config("small"), "pe", tmp_path, targets=["ecp5"],
                          timing=True)
    t = report.data["timing"]
    assert t["constraint_mhz"] == 100 and set(t["fmax_mhz"]) == {"clk"}
    assert 5 < t["fmax_mhz"]["clk"] < 500
    assert "## Timing estimate (ECP5-85F, nextpnr out of context)" in \
        report.markdown_path.read_text()
    assert (tmp_path / "pe_ecp5_timing.report.json").is_file()
    # every endpoint's timing, grouped by block (none fails: the PE runs far above 100 MHz)
    failing = t["failing_paths"]["clk"]
    assert failing["endpoints"] > 50 and failing["failing"] == 0 and failing["groups"] == []
    assert "detailed_net_timings" not in json.loads(
        (tmp_path / "pe_ecp5_timing.report.json").read_text())
    assert "detailed_net_timings" in json.loads(
        (tmp_path / "pe_ecp5_timing.detailed.json").read_text())
    assert (tmp_path / "pe_ecp5_timing.paths.md").is_file()
    # The ECP5 runs read the Verilog built for the ECP5: the multiplier is a MULT18X18D with
    # its input and output registers, which Yosys keeps as the one DSP block.
    assert "MULT18X18D" in (tmp_path / "pe.ecp5.v").read_text()
    assert "MULT18X18D" not in (tmp_path / "pe.v").read_text()
    for script in ("pe_ecp5.ys", "pe_ecp5_timing.ys"):
        assert "read_verilog pe.ecp5.v" in (tmp_path / script).read_text()
    assert report.data["targets"]["ecp5"]["summary"]["dsps"] == 1


def test_cli_timing_applies_to_one_block(capsys):
    from bpsa.cli import main
    assert main(["synth", "--report", "--timing"]) == 2
    assert "--timing applies to one block's report" in capsys.readouterr().err
