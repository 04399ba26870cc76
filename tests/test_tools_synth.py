"""Yosys area reports (src/bpsa/tools/synth.py): real synthesis runs of the PE through YoWASP
Yosys."""

import json

import pytest

from bpsa.config import load_config
from bpsa.platform.verilog import write_verilog
from bpsa.tools.synth import (
    ARRAY_VARIANTS,
    PAPER_FIGURES,
    PE_VARIANTS,
    TARGETS,
    SynthReport,
    array_overhead_report,
    design_report,
    pe_overhead_report,
    synth_report,
    synthesize,
)


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
    plain = json.loads((tmp_path / "pe_plain.json").read_text())["config"]
    assert plain["reserve_registers"] is False


def test_array_overheads(small, tmp_path):
    """A 2x2 array in every variant, hierarchical with identical PEs merged, on generic gates:
    the interleaved array is larger than the plain OS array."""
    config = small.replace(rows=2, cols=2)
    report = array_overhead_report(config, tmp_path, targets="generic")
    assert report.markdown_path.name == "array_overheads.md"
    assert json.loads(report.json_path.read_text()) == report.data
    assert report.data["flatten"] is False
    variants = report.data["variants"]
    assert list(variants) == [key for key, _, _ in ARRAY_VARIANTS]
    generic = {key: v["targets"]["generic"] for key, v in variants.items()}
    assert generic["plain"]["summary"]["cells"] < generic["il"]["summary"]["cells"]
    # Four PEs: one multiplier each.
    assert all(g["summary"]["multipliers"] >= 4 for g in generic.values())
    ffs = [g["summary"]["ff_bits"] for g in generic.values()]
    assert ffs == sorted(set(ffs))
    # Leaf cells only: the PE instances are not counted as cells.
    for g in generic.values():
        assert g["summary"]["cells"] == sum(g["cells_by_type"].values())
        assert not any("pe_" in cell for cell in g["cells_by_type"])
    # 2x2: inner PE (0, 0), last column (0, 1) and (1, 1) merged, last row (1, 0).
    assert generic["il"]["merged_modules"] == {
        "\\array_il.pe_0_0": 1, "\\array_il.pe_0_1": 2, "\\array_il.pe_1_0": 1}
    script = (tmp_path / "array_il_generic.ys").read_text()
    assert "chtype -map \\array_il.pe_1_1 \\array_il.pe_0_1" in script
    assert "-flatten" not in script
    md = report.markdown_path.read_text()
    assert "2x2 array" in md and "Hierarchical synthesis" in md
    for _, label, _ in ARRAY_VARIANTS:
        assert f"| {label} |" in md
    assert json.loads((tmp_path / "array_plain.json").read_text())["config"]["rows"] == 2


def test_flat_and_hierarchical(small, tmp_path):
    """The same array flat and hierarchical: the hierarchy keeps registers nothing reads, so it
    has at least as many; flattening leaves ``$scopeinfo`` cells, which are not counted."""
    config = small.replace(rows=2, cols=2, dataflows=("os",), zero_gating=False,
                           reserve_registers=False)
    v_path = write_verilog(config, "array", tmp_path)
    hier = synthesize(v_path, "array", "generic", flatten=False)
    flat = synthesize(v_path, "array", "generic", stem="flat")
    assert hier["command"] == "synth -top array"
    assert flat["command"] == "synth -flatten -top array"
    assert "merged_modules" not in flat
    assert "$scopeinfo" not in flat["cells_by_type"]
    assert flat["summary"]["cells"] == sum(flat["cells_by_type"].values())
    assert hier["summary"]["ff_bits"] >= flat["summary"]["ff_bits"] > 0


def test_identical_modules():
    """Only modules equal up to their names, port order and ``$auto$`` names are merged."""
    from bpsa.tools.synth import _identical_modules
    body = ("  input a;\n  output b;\n  reg \\$auto$verilog_backend.cc:1:dump_module${n} = 0;\n"
            "  assign b = {op}a;\nendmodule\n")
    text = "".join(f"module {name} ({ports});\n" + body.format(n=n, op=op)
                   for name, ports, n, op in [("top", "a, b", 1, ""),
                                              ("\\top.m0", "a, b", 2, "~"),
                                              ("\\top.m1", "b, a", 3, "~"),
                                              ("\\top.m2", "a, b", 4, "!"),
                                              ("\\top.m3", "a, b", 5, "~")])
    assert _identical_modules(text, "top") == {"\\top.m0": ["\\top.m1", "\\top.m3"],
                                               "\\top.m2": []}


def test_scripts():
    """The FPGA flows run in two halves around the steps before ABC9."""
    from bpsa.tools.synth import _script
    assert _script("a.v", "a", "ice40", "a").splitlines()[1:] == [
        "synth_ice40 -dsp -top a", "tee -q -o a_ice40.stat.json stat -json"]
    assert _script("a.v", "a", "ecp5", "a", flatten=False, merged={"m": ["n"]},
                   balance=True).splitlines()[1:] == [
        "chtype -map n m", "synth_ecp5 -noflatten -top a -run :map_luts", "splitnets",
        "extract_reduce", "simplemap", "synth_ecp5 -noflatten -top a -run map_luts:",
        "tee -q -o a_ecp5.stat.json stat -json"]


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
    with pytest.raises(TypeError, match="config must be a Config"):
        array_overhead_report({"rows": 4}, tmp_path)
    with pytest.raises(TypeError, match="config must be a Config"):
        design_report({"rows": 4}, tmp_path)
    with pytest.raises(ValueError, match="targets must be"):
        design_report(small, tmp_path, targets=())


# Whole-design report ---------------------------------------------------------------------------

#: Two instances of a module with a 32 x 8-bit memory (a buffer, kept as a macro by the
#: generic target) and a 4 x 8-bit memory in the top (a FIFO-sized one, mapped to flip-flops).
_MEMORY_VERILOG = """
module sub(input clk, input we, input [4:0] addr, input [7:0] d, output reg [7:0] q);
  reg [7:0] mem [0:31];
  always @(posedge clk) begin
    if (we) mem[addr] <= d;
    q <= mem[addr];
  end
endmodule
module top(input clk, input we, input [4:0] addr, input [7:0] d, output [7:0] q0,
           output [7:0] q1, output reg [7:0] r);
  sub a(clk, we, addr, d, q0);
  sub b(clk, ~we, addr, d, q1);
  reg [7:0] small [0:3];
  always @(posedge clk) begin
    small[addr[1:0]] <= d;
    r <= small[addr[1:0]];
  end
endmodule
"""


def test_keep_memories_and_parts(tmp_path):
    """Generic synthesis keeps memories of at least ``keep_memories`` words as ``$mem_v2``
    cells and counts their bits; a hierarchical run splits the counts into the top's children
    and its own cells, which add up to the whole."""
    v_path = tmp_path / "top.v"
    v_path.write_text(_MEMORY_VERILOG)
    kept = synthesize(v_path, "top", "generic", flatten=False, keep_memories=16)
    s = kept["summary"]
    assert s["memory_bits"] == 2 * 32 * 8
    assert kept["cells_by_type"]["$mem_v2"] == 2
    assert kept["instances"] == {"sub": 2}
    assert list(kept["children"]) == ["sub"]
    sub = kept["children"]["sub"]
    assert sub["module"] == "sub" and sub["instances"] == 2
    assert sub["summary"]["memory_bits"] == 2 * 32 * 8
    own = kept["own"]
    assert own["memory_bits"] == 0
    assert own["ff_bits"] >= 4 * 8         # the small memory, as flip-flops
    for key in ("cells", "ff_bits", "memory_bits"):
        assert sub["summary"][key] + own[key] == s[key]
    # Without keep_memories every memory becomes flip-flops.
    mapped = synthesize(v_path, "top", "generic", stem="mapped", flatten=False)
    assert "memory_bits" not in mapped["summary"]
    assert "$mem_v2" not in mapped["cells_by_type"]
    assert mapped["summary"]["ff_bits"] >= 2 * 32 * 8 + 4 * 8


def test_keep_memories_script():
    from bpsa.tools.synth import _script
    lines = _script("a.v", "a", "generic", "a", keep_memories=64).splitlines()
    assert lines[1:4] == ["synth -flatten -top a -run :fine",
                          "tee -q -o a_generic.coarse.json stat -json",
                          "setattr -set bpsa_sram 1 t:$mem_v2 r:SIZE>=64 %i"]
    assert "memory_map -attr !bpsa_sram" in lines
    assert not any(line.startswith("synth") and "fine:" in line for line in lines)
    assert lines[-2:] == ["memory_unpack", "tee -q -o a_generic.mem.json stat -json"]
    # The FPGA flows map memories to block RAM: unchanged.
    assert _script("a.v", "a", "ice40", "a", keep_memories=64) == _script("a.v", "a", "ice40",
                                                                           "a")


@pytest.fixture(scope="module")
def design(small, tmp_path_factory):
    """The design report of the small preset for a few blocks (and one name that is not a
    top), on generic gates, with the array as the total (the accelerator takes minutes)."""
    return design_report(small, tmp_path_factory.mktemp("design"), targets="generic",
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


def test_design_report_blocks(small, design):
    data = design.data
    assert data["targets"] == ["generic"]
    assert data["total"] == "array"
    assert data["skipped"] == {"no_such_block":
                               "not registered in src/bpsa/platform/verilog.py TOPS"}
    assert data["failed"] == {}
    assert list(data["blocks"]) == ["pe", "array", "im2col_addr"]
    pes = small.rows * small.cols
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


def test_cli_timing_applies_to_one_block(capsys):
    from bpsa.cli import main
    assert main(["synth", "--report", "--timing"]) == 2
    assert "--timing applies to one block's report" in capsys.readouterr().err
