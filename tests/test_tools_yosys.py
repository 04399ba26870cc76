"""The Yosys flow (src/bpsa/tools/yosys.py): real synthesis runs through YoWASP Yosys, its
scripts and the parsing of its output."""

import pytest

from bpsa.config import load_config
from bpsa.platform.verilog import write_verilog
from bpsa.tools.yosys import synthesize


@pytest.fixture(scope="module")
def small():
    return load_config("small")


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
    from bpsa.tools.yosys import _identical_modules
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
    from bpsa.tools.yosys import _script
    assert _script("a.v", "a", "ice40", "a").splitlines()[1:] == [
        "synth_ice40 -dsp -top a -run :map_luts", "splitnets",
        "synth_ice40 -dsp -top a -run map_luts:", "tee -q -o a_ice40.stat.json stat -json"]
    assert _script("a.v", "a", "ecp5", "a", flatten=False, merged={"m": ["n"]},
                   balance=True).splitlines()[1:] == [
        "chtype -map n m", "synth_ecp5 -noflatten -top a -run :map_luts", "splitnets",
        "extract_reduce", "simplemap", "synth_ecp5 -noflatten -top a -run map_luts:",
        "tee -q -o a_ecp5.stat.json stat -json"]


def test_yosys_error(small, tmp_path):
    """A failed synthesis is a ToolError: one summary line naming the step, the first ERROR
    and the log, the log's last lines in the message."""
    from bpsa.tools.yosys import ToolError
    v_path = write_verilog(small, "pe", tmp_path)
    with pytest.raises(ToolError, match=r"'bogus' for generic.*Module `bogus' not found") as e:
        synthesize(v_path, "bogus", "generic")
    assert "not found" in (tmp_path / "pe_generic.log").read_text()
    assert "\n" not in e.value.summary and e.value.log == tmp_path / "pe_generic.log"
    assert e.value.summary.endswith(f"; log: {tmp_path / 'pe_generic.log'}")
    assert "synthesis of 'bogus' for generic failed (exit status" in e.value.summary
    assert "last lines of the log:" in str(e.value)


def test_cli_reports_a_tool_failure_in_one_line(monkeypatch, capsys, tmp_path):
    """``bpsa synth`` turns a tool's failure into one line naming the step and its log, and
    exit status 1 (not a traceback)."""
    from bpsa.cli import main
    from bpsa.tools import synth
    from bpsa.tools.yosys import ToolError

    def fail(*args, **kwargs):
        raise ToolError("Yosys 0.70 synthesis of 'array' for ecp5", 1,
                        log=tmp_path / "array_ecp5.log", detail="wasm trap: call stack")
    monkeypatch.setattr(synth, "synth_report", fail)
    with pytest.raises(SystemExit) as e:
        main(["synth", "--top", "array", "--targets", "ecp5", "-o", str(tmp_path)])
    assert e.value.code == 1
    err = capsys.readouterr().err
    assert err == (f"bpsa: error: Yosys 0.70 synthesis of 'array' for ecp5 failed (exit status "
                   f"1); log: {tmp_path / 'array_ecp5.log'}\n")


def test_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="target must be one of"):
        synthesize(tmp_path / "pe.v", "pe", "xilinx")


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
    from bpsa.tools.yosys import _script
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
