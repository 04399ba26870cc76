"""The PE and array feature-overhead studies (src/bpsa/tools/overheads.py): real synthesis
runs of the variants through YoWASP Yosys."""

import json

import pytest

from bpsa.config import load_config
from bpsa.tools.overheads import array_overhead_report, pe_overhead_report
from bpsa.tools.synth import ARRAY_VARIANTS, PE_VARIANTS


@pytest.fixture(scope="module")
def small():
    return load_config("small")


@pytest.mark.long               # Yosys on five PE variants: make test-long
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
    # The plain PE: accumulator, h and v output registers, the multiplier's operand
    # registers in the fabric and its input registers, its product registers (mac_latency - 2
    # of them, 2w + 1 bits, of which Yosys may merge the sign bit's copy), and up to six 1-bit
    # flags (h valid and last, v valid, fired, the fired slot in stages 1 and 2).
    w, products = small.operand_width, small.mac_latency - 2
    assert (small.acc_width + 6 * w + products * 2 * w <= ffs[0]
            <= small.acc_width + 6 * w + products * (2 * w + 1) + 6)

    overheads = report.data["overheads"]
    assert overheads["ice40"]["plain"] == {"luts": 0.0, "ffs": 0.0, "dsps": 0.0}
    il, plain = summary("il", "ice40")["luts"], summary("plain", "ice40")["luts"]
    assert overheads["ice40"]["il"]["luts"] == round(100 * (il - plain) / plain, 1)
    md = report.markdown_path.read_text()
    for _, label, _ in PE_VARIANTS:
        assert f"| {label} |" in md
    assert (tmp_path / "pe_plain.v").is_file()
    plain = json.loads((tmp_path / "pe_plain.json").read_text())["config"]
    assert plain["reserve_registers"] is False


@pytest.mark.long       # Yosys on every array variant; test_pe_overheads covers the flow
def test_array_overheads(small, tmp_path):
    """A 2x3 array in every variant, hierarchical with identical PEs merged, on generic gates:
    the interleaved array is larger than the plain OS array."""
    config = small.replace(rows=2, cols=3)
    report = array_overhead_report(config, tmp_path, targets="generic")
    assert report.markdown_path.name == "array_overheads.md"
    assert json.loads(report.json_path.read_text()) == report.data
    assert report.data["flatten"] is False
    variants = report.data["variants"]
    assert list(variants) == [key for key, _, _ in ARRAY_VARIANTS]
    generic = {key: v["targets"]["generic"] for key, v in variants.items()}
    assert generic["plain"]["summary"]["cells"] < generic["il"]["summary"]["cells"]
    # Six PEs: one multiplier each.
    assert all(g["summary"]["multipliers"] >= 6 for g in generic.values())
    ffs = [g["summary"]["ff_bits"] for g in generic.values()]
    assert ffs == sorted(set(ffs))
    # Leaf cells only: the PE instances are not counted as cells.
    for g in generic.values():
        assert g["summary"]["cells"] == sum(g["cells_by_type"].values())
        assert not any("pe_" in cell for cell in g["cells_by_type"])
    # 2x3: the PEs that pass both operands on ((0, 0), (0, 1)) are merged, and so are those
    # of the last row that pass h on ((1, 0), (1, 1)); the last column's PEs differ (no h
    # out, and at the bottom no v out).
    assert generic["il"]["merged_modules"] == {
        "\\array_il.pe_0_0": 2, "\\array_il.pe_0_2": 1, "\\array_il.pe_1_0": 2,
        "\\array_il.pe_1_2": 1}
    script = (tmp_path / "array_il_generic.ys").read_text()
    assert "chtype -map \\array_il.pe_0_1 \\array_il.pe_0_0" in script
    assert "-flatten" not in script
    md = report.markdown_path.read_text()
    assert "2x3 array" in md and "Hierarchical synthesis" in md
    for _, label, _ in ARRAY_VARIANTS:
        assert f"| {label} |" in md
    assert json.loads((tmp_path / "array_plain.json").read_text())["config"]["rows"] == 2


def test_bad_arguments(tmp_path):
    with pytest.raises(TypeError, match="config must be a Config"):
        pe_overhead_report({"rows": 4}, tmp_path)
    with pytest.raises(TypeError, match="config must be a Config"):
        array_overhead_report({"rows": 4}, tmp_path)
