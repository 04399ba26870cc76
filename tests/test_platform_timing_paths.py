"""The failing-path report (:mod:`bpsa.platform.timing_paths`) on a hand-written netlist and
nextpnr report, whose sources, levels and slacks are worked out by hand in the comments."""

import json

import pytest

from bpsa.platform.timing_paths import (block_of, failing_paths, markdown, summary,
                                        write_report)


def _cell(kind, **ports):
    """A netlist cell: ports named in lower case are inputs, the rest outputs."""
    outputs = {"Q", "Z", "S0", "S1", "COUT", "DO0", "O", "P0"}
    return {"type": kind, "parameters": {},
            "port_directions": {p: "output" if p in outputs else "input" for p in ports},
            "connections": {p: bits for p, bits in ports.items()}}


def _netlist():
    # a.r --> x (LUT) --> y (LUT) --> c1 (CCU2C, A0) --CIN--> c2 (CCU2C) --> c.d.t (FF)
    # b.s -------------> y
    # b.s --------------------------------------------------------------> c.u (FF, M port)
    # a.r --> a.r (its own D input: a register loop, no logic)
    cells = {
        "\\a.r[0]_TRELLIS_FF_Q": _cell("TRELLIS_FF", CLK=[2], DI=[10], Q=[10]),
        "\\b.s[0]_TRELLIS_FF_Q": _cell("TRELLIS_FF", CLK=[2], DI=[11], Q=[11]),
        "\\x_LUT4_Z": _cell("LUT4", A=[10], B=["0"], C=["0"], D=["0"], Z=[12]),
        "\\y_LUT4_Z": _cell("LUT4", A=[12], B=[11], C=["1"], D=["0"], Z=[13]),
        "\\c1_CCU2C": _cell("CCU2C", A0=[13], B0=["0"], C0=["0"], D0=["0"], A1=["0"], B1=["0"],
                            C1=["0"], D1=["0"], CIN=["0"], S0=[20], S1=[21], COUT=[14]),
        "\\c2_CCU2C": _cell("CCU2C", A0=["0"], B0=["0"], C0=["0"], D0=["0"], A1=["0"],
                            B1=["0"], C1=["0"], D1=["0"], CIN=[14], S0=[15], S1=[22],
                            COUT=[23]),
        "\\c.d.t[0]_TRELLIS_FF_Q": _cell("TRELLIS_FF", CLK=[2], DI=[15], Q=[16]),
        "\\c.u_TRELLIS_FF_Q": _cell("TRELLIS_FF", CLK=[2], DI=[11], Q=[17]),
    }
    for c in cells.values():
        c["port_directions"].update({p: "input" for p in ("CLK", "DI", "A", "B", "C", "D",
                                                          "A0", "B0", "C0", "D0", "A1", "B1",
                                                          "C1", "D1", "CIN") if p in c[
                                                              "connections"]})
    return {"modules": {"top": {"attributes": {"top": "00000000000000000000000000000001"},
                                "cells": cells}}}


def _endpoint(cell, port, arrival):
    return {"cell": cell, "port": port, "event": "posedge clk", "delay": [0.5, arrival]}


def _report():
    # 100 MHz: a 10 ns period. t arrives at 12.0 ns (slack -2.0), u at 10.5 (-0.5); a.r at
    # 3.0 and b.s at 9.0 meet it.
    return {
        "fmax": {"clk": {"achieved": 83.3, "constraint": 100}},
        "critical_paths": [{"from": "posedge clk", "to": "posedge clk", "path": [
            {"type": "clk-to-q", "delay": 0.5, "from": {"cell": "a.r[0]_TRELLIS_FF_Q"},
             "to": {"cell": "a.r[0]_TRELLIS_FF_Q"}},
            {"type": "logic", "delay": 0.3, "from": {"cell": "x_LUT4_Z"},
             "to": {"cell": "x_LUT4_Z"}},
            {"type": "routing", "delay": 11.2, "from": {"cell": "x_LUT4_Z"},
             "to": {"cell": "c.d.t[0]_TRELLIS_FF_Q"}}]}],
        "detailed_net_timings": [
            {"net": "n15", "driver": "c2_CCU2C", "event": "posedge clk",
             "endpoints": [_endpoint("c.d.t[0]_TRELLIS_FF_Q", "DI", 12.0)]},
            {"net": "n11", "driver": "b.s[0]_TRELLIS_FF_Q", "event": "posedge clk",
             "endpoints": [_endpoint("c.u_TRELLIS_FF_Q", "M", 10.5),
                           _endpoint("b.s[0]_TRELLIS_FF_Q", "DI", 9.0)]},
            {"net": "n10", "driver": "a.r[0]_TRELLIS_FF_Q", "event": "posedge clk",
             "endpoints": [_endpoint("a.r[0]_TRELLIS_FF_Q", "DI", 3.0)]},
        ],
    }


def test_groups_by_source_and_destination():
    """t's deepest source is a.r (x, y and the carry chain's first cell: 3 levels; b.s reaches
    it through y and the chain: 2), u's is b.s with no logic (nextpnr's M is the netlist's
    DI). Depth 2 keeps c.d, depth 1 folds both endpoints into block c."""
    r = failing_paths(_netlist(), _report(), depth=2)
    c = r["clocks"]["clk"]
    assert (c["endpoints"], c["failing"], c["worst_slack_ns"]) == (4, 2, -2.0)
    assert c["period_ns"] == 10.0 and c["achieved_mhz"] == 83.3
    assert c["groups"] == [
        {"source": "a", "destination": "c.d", "endpoints": 1, "worst_slack_ns": -2.0,
         "max_levels": 3, "worst_endpoint": "c.d.t[0]_TRELLIS_FF_Q.DI", "also_from": {"b": 2}},
        {"source": "b", "destination": "c", "endpoints": 1, "worst_slack_ns": -0.5,
         "max_levels": 0, "worst_endpoint": "c.u_TRELLIS_FF_Q.M", "also_from": {}}]
    assert c["critical_path"] == {"from": "a.r[0]_TRELLIS_FF_Q", "to": "c.d.t[0]_TRELLIS_FF_Q",
                                  "source": "a", "destination": "c.d", "logic_cells": 1,
                                  "delay_ns": 12.0}
    assert summary(r, 1) == {"clk": {"endpoints": 4, "failing": 2, "worst_slack_ns": -2.0,
                                     "groups": c["groups"][:1]}}
    folded = failing_paths(_netlist(), _report(), depth=1)["clocks"]["clk"]["groups"]
    assert [(g["source"], g["destination"]) for g in folded] == [("a", "c"), ("b", "c")]
    md = markdown(r)
    assert "2 of 4 endpoints fail, worst slack -2.000 ns" in md
    assert "| `a` | `c.d` | 1 | -2.000 | 3 | `c.d.t[0]_TRELLIS_FF_Q.DI` | `b` (2) |" in md


def test_async_read_ram_and_loops():
    """A distributed RAM's read data follows its read address (the address register is a
    source two levels back, the RAM itself one level back); a combinational loop ends."""
    n = _netlist()
    cells = n["modules"]["top"]["cells"]
    ram = _cell("TRELLIS_DPR16X4", RAD0=[12], RAD1=["0"], RAD2=["0"], RAD3=["0"], DO0=[30])
    ram["port_directions"].update({f"RAD{i}": "input" for i in range(4)})
    cells["\\m.mem_TRELLIS_DPR16X4"] = ram
    loop = _cell("LUT4", A=[31], B=[30], C=["0"], D=["0"], Z=[31])
    loop["port_directions"].update({p: "input" for p in "ABCD"})
    cells["\\m.loop_LUT4_Z"] = loop
    cells["\\e.v_TRELLIS_FF_Q"] = _cell("TRELLIS_FF", DI=[31], Q=[32])
    cells["\\e.v_TRELLIS_FF_Q"]["port_directions"]["DI"] = "input"
    report = _report()
    report["detailed_net_timings"].append(
        {"net": "n31", "driver": "m.loop_LUT4_Z", "event": "posedge clk",
         "endpoints": [_endpoint("e.v_TRELLIS_FF_Q", "DI", 10.25)]})
    groups = failing_paths(n, report)["clocks"]["clk"]["groups"]
    # a.r -> x (1) -> RAM (0) -> loop LUT (1): 2 levels; the RAM itself: 1
    assert {"source": "a", "destination": "e", "endpoints": 1, "worst_slack_ns": -0.25,
            "max_levels": 2, "worst_endpoint": "e.v_TRELLIS_FF_Q.DI",
            "also_from": {"m": 1}} in groups


def test_block_names():
    assert block_of("forward.feeder.cursor[3]_TRELLIS_FF_Q") == "forward.feeder"
    assert block_of("forward.feeder.lane.x_TRELLIS_FF_Q", depth=3) == "forward.feeder.lane"
    assert block_of("$flatten\\backward.\\loss.$procdff$12", depth=1) == "backward"
    assert block_of("\\busy_TRELLIS_FF_Q") == "(top)"
    assert block_of("$abc$123$lut$aiger") == "(top)"


def test_refuses_a_report_without_net_timings(tmp_path):
    report = _report()
    del report["detailed_net_timings"]
    with pytest.raises(ValueError, match="--detailed-timing-report"):
        failing_paths(_netlist(), report)


def test_written_files_and_cli(tmp_path, capsys):
    from bpsa.cli import main
    (tmp_path / "top.json").write_text(json.dumps(_netlist()))
    (tmp_path / "top.report.json").write_text(json.dumps(_report()))
    result = write_report(tmp_path / "top.json", tmp_path / "top.report.json",
                          tmp_path / "paths")
    assert json.loads((tmp_path / "paths.json").read_text()) == result
    assert (tmp_path / "paths.md").read_text().startswith("## Failing paths")
    assert main(["timing", str(tmp_path), "--depth", "1"]) == 0
    assert "| `a` | `c` | 1 | -2.000 | 3 |" in capsys.readouterr().out
    assert main(["timing", str(tmp_path / "nowhere")]) == 2
    assert "not a directory" in capsys.readouterr().err
    assert main(["timing", "--netlist", str(tmp_path / "top.json")]) == 2
    assert "both --netlist and --report" in capsys.readouterr().err


def test_a_board_tops_blocks_are_named_below_its_core():
    assert block_of("soc.core.forward.feeder.x_TRELLIS_FF_Q", root="soc.core") == \
        "forward.feeder"
    assert block_of("soc.bridge.rx_TRELLIS_FF_Q", root="soc.core") == "soc.bridge"
    assert block_of("soc.core.busy_TRELLIS_FF_Q", root="soc.core") == "(top)"
