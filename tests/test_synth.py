"""Yosys area reports (hw/synth.py): real synthesis runs of the PE through YoWASP Yosys."""

import json

import pytest

from hw.config import load_config
from hw.synth import (PE_VARIANTS, TARGETS, SynthReport, pe_overhead_report, synth_report,
                      synthesize)
from hw.verilog import write_verilog


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
    assert json.loads((out / "pe.json").read_text()) == small.to_dict()
    assert "module pe(" in (out / "pe.v").read_text()
    md = small_report.markdown_path.read_text()
    assert "config `small`" in md
    for target in TARGETS:
        assert (out / f"pe_{target}.log").is_file()
        assert f"## {TARGETS[target].title}" in md
    # Nothing machine-specific in the report.
    assert str(out) not in small_report.json_path.read_text()


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
    # The same registers, whatever the target.
    assert ice40["ffs"] == ecp5["ffs"] == targets["generic"]["summary"]["ff_bits"]


def test_pe_overheads(small, tmp_path):
    report = pe_overhead_report(small, tmp_path, targets=("generic", "ice40"))
    assert report.markdown_path.name == "pe_overheads.md"
    assert json.loads(report.json_path.read_text()) == report.data
    variants = report.data["variants"]
    assert list(variants) == [key for key, _, _ in PE_VARIANTS]

    def summary(key, target):
        return variants[key]["targets"][target]["summary"]

    assert summary("plain", "generic")["cells"] < summary("il", "generic")["cells"]
    assert summary("plain", "ice40")["luts"] < summary("il", "ice40")["luts"]
    # Every step adds registers: hold registers, reserve register, held operand, tag.
    ffs = [summary(key, "generic")["ff_bits"] for key in variants]
    assert ffs == sorted(set(ffs))
    assert ffs == [summary(key, "ice40")["ffs"] for key in variants]
    # The plain PE: accumulator, h and v output registers, and four 1-bit flags.
    assert ffs[0] == small.acc_width + 2 * small.operand_width + 4

    overheads = report.data["overheads"]
    assert overheads["ice40"]["plain"] == {"luts": 0.0, "ffs": 0.0, "dsps": 0.0}
    il, plain = summary("il", "ice40")["luts"], summary("plain", "ice40")["luts"]
    assert overheads["ice40"]["il"]["luts"] == round(100 * (il - plain) / plain, 1)
    md = report.markdown_path.read_text()
    for _, label, _ in PE_VARIANTS:
        assert f"| {label} |" in md
    assert (tmp_path / "pe_plain.v").is_file()
    assert json.loads((tmp_path / "pe_plain.json").read_text())["reserve_registers"] is False


def test_reproducible(tmp_path):
    config = load_config("plain_os")
    a = synth_report(config, "pe", tmp_path / "a", targets=["generic"])
    b = synth_report(config, "pe", tmp_path / "b", targets=["generic"])
    assert a.json_path.read_bytes() == b.json_path.read_bytes()
    assert a.markdown_path.read_bytes() == b.markdown_path.read_bytes()


def test_yosys_error(small, tmp_path):
    v_path = write_verilog(small, "pe", tmp_path)
    with pytest.raises(RuntimeError, match=r"'bogus' for generic.*Module `bogus' not found"):
        synthesize(v_path, "bogus", "generic")
    assert "not found" in (tmp_path / "pe_generic.log").read_text()


def test_bad_arguments(small, tmp_path):
    with pytest.raises(ValueError, match="targets must be"):
        synth_report(small, "pe", tmp_path, targets=("asic",))
    with pytest.raises(ValueError, match="top must be one of"):
        synth_report(small, "no_such_top", tmp_path)
    with pytest.raises(ValueError, match="target must be one of"):
        synthesize(tmp_path / "pe.v", "pe", "xilinx")
    with pytest.raises(TypeError, match="config must be a Config"):
        pe_overhead_report({"rows": 4}, tmp_path)
