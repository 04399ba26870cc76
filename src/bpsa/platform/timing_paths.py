"""Every failing path of a nextpnr run, grouped by block (``bpsa timing``, and the failing-path
section of ``bpsa synth --timing`` and ``bpsa bitstream``).

nextpnr's log names one critical path per clock. Its JSON report with
``--detailed-timing-report`` also gives, for every timing endpoint (a flip-flop's data, enable
or reset input, a block RAM's or DSP's registered input), the arrival time of its latest
signal. This module reads that report with the Yosys netlist nextpnr placed (``write_json``
after ``synth_ecp5`` or ``synth_ice40``) and lists the endpoints with negative slack grouped by
**source and destination block**, so that a developer fixes a whole class of paths per run.

- **Slack** of an endpoint: the clock period at the constraint minus its arrival time (nextpnr's
  arrival includes the launching register's clock-to-output delay; the ECP5 and iCE40 flip-flop
  models' setup time is zero, so for flip-flops this is nextpnr's slack).
- **Destination block**: the hierarchy of the endpoint cell's name (Yosys names each cell after
  the net it drives, with the flattened instance path: ``forward.feeder.cursor[3]_TRELLIS_FF_Q``
  is in block ``forward.feeder``), cut to ``depth`` levels. A name without a hierarchy is the
  top's own logic, ``(top)``.
- **Source block** and **logic levels**: nextpnr does not say where an endpoint's latest signal
  starts, so the netlist is walked backwards from the endpoint through combinational cells to
  the registers, block RAMs and DSPs that launch it. The source block is that of the launching
  cell with the most logic cells between it and the endpoint (a LUT counts one level, a carry
  chain one where a signal enters it; the PFUMX / L6MUX21 wide-function muxes count none, they
  are part of a LUT5-7), and the logic levels are that count (ties: the last block by name).
  This is a structural estimate: the deepest cone is usually, not always, the slowest one (long
  routes count in the arrival, not in the levels), so every group also names the other blocks
  its endpoints' cones start in.

The critical path nextpnr reports for each clock is given as well, with its blocks, as a check
of the estimate.
"""

import json
import re
from collections import defaultdict
from pathlib import Path

__all__ = ["COMBINATIONAL", "block_of", "failing_paths", "markdown", "summary",
           "write_report"]


#: Combinational cell types: type -> (input ports, output ports, logic levels the cell adds).
#: A carry chain counts one level where a signal enters it: its carry input adds none.
#: Every other cell launches and captures (a register, block RAM or DSP), except a DSP with no
#: register (:func:`_combinational_dsp`) and the distributed RAM's read port.
COMBINATIONAL = {
    "LUT4": (("A", "B", "C", "D"), ("Z",), 1),
    "CCU2C": (("A0", "B0", "C0", "D0", "A1", "B1", "C1", "D1", "CIN"), ("S0", "S1", "COUT"), 1),
    "PFUMX": (("ALUT", "BLUT", "C0"), ("Z",), 0),
    "L6MUX21": (("D0", "D1", "SD"), ("Z",), 0),
    "SB_LUT4": (("I0", "I1", "I2", "I3"), ("O",), 1),
    "SB_CARRY": (("I0", "I1", "CI"), ("CO",), 1),
}

#: Carry inputs: a signal on them stays in its carry chain.
_CARRY_IN = ("CIN", "CI")

#: Cells whose read data follows a read address combinationally (distributed RAM): type ->
#: (address inputs, data outputs). The RAM is also a launching cell (its stored data).
_ASYNC_READ = {"TRELLIS_DPR16X4": (("RAD0", "RAD1", "RAD2", "RAD3"),
                                   ("DO0", "DO1", "DO2", "DO3"))}

#: ECP5 DSP cells and the parameters that register them.
_DSP_REGS = {"MULT18X18D": ("REG_INPUTA_CLK", "REG_INPUTB_CLK", "REG_INPUTC_CLK",
                            "REG_PIPELINE_CLK", "REG_OUTPUT_CLK")}

#: The name of the top's own logic in the tables.
TOP = "(top)"


def block_of(cell_name, depth=2, root=None):
    """The block of a cell from its name: the flattened instance path, without the instance
    path ``root`` when it starts with it (a board top's core: ``soc.core``), cut to ``depth``
    levels (``(top)`` for the top's own cells).

    >>> block_of("forward.feeder.cursor[3]_TRELLIS_FF_Q")
    'forward.feeder'
    >>> block_of("$flatten\\\\backward.\\\\loss.$procdff$12", depth=1)
    'backward'
    >>> block_of("busy_TRELLIS_FF_Q")
    '(top)'
    """
    name = cell_name.lstrip("\\")
    if name.startswith("$flatten"):
        parts = [p.lstrip("\\") for p in name[len("$flatten"):].split(".")][:-1]
    else:
        base = re.split(r"[\[$]", name, maxsplit=1)[0]
        parts = base.split(".")[:-1]
    parts = [p for p in parts if p]
    if root:
        prefix = root.split(".")
        if parts[:len(prefix)] == prefix:
            parts = parts[len(prefix):]
    return ".".join(parts[:depth]) if parts else TOP


def _combinational_dsp(cell):
    regs = _DSP_REGS.get(cell["type"])
    if regs is None:
        return False
    return all(str(cell.get("parameters", {}).get(r, "NONE")).strip() == "NONE" for r in regs)


class _Netlist:
    """The cells of a flattened Yosys JSON netlist and the driver of every net bit."""

    def __init__(self, netlist, top=None):
        modules = netlist["modules"]
        if top is None:
            tops = [n for n, m in modules.items()
                    if str(m.get("attributes", {}).get("top", "0")).strip("0") != ""]
            if len(tops) != 1:
                raise ValueError(f"the netlist has {len(tops)} top modules; name the top")
            top = tops[0]
        self.cells = {name.lstrip("\\"): c for name, c in modules[top]["cells"].items()}
        self.driver = {}
        for name, c in self.cells.items():
            for port, bits in c["connections"].items():
                if c["port_directions"].get(port) == "output":
                    for bit in bits:
                        if isinstance(bit, int):
                            self.driver[bit] = (name, port)
        self._memo = {}

    def fanin(self, name, ports):
        """The launching cells of the bits on ``ports`` of cell ``name``: launching cell name ->
        the most logic levels between it and those ports."""
        cell = self.cells[name]
        found = {}
        for port in ports:
            for bit in cell["connections"].get(port, ()):
                if not isinstance(bit, int) or bit not in self.driver:
                    continue                        # a constant or an input of the design
                for src, levels in self.cone(*self.driver[bit]).items():
                    if levels > found.get(src, -1):
                        found[src] = levels
        return found

    def cone(self, name, port):
        """Launching cell -> logic levels up to and including cell ``name`` (driving ``port``)."""
        key = (name, port)
        if key in self._memo:
            return self._memo[key]
        self._memo[key] = {}                        # a combinational loop ends here
        cell = self.cells[name]
        kind = cell["type"]
        if kind in COMBINATIONAL:
            inputs, _, level = COMBINATIONAL[kind]
            result = {s: n + level for s, n in
                      self.fanin(name, [p for p in inputs if p not in _CARRY_IN]).items()}
            for s, n in self.fanin(name, [p for p in inputs if p in _CARRY_IN]).items():
                result[s] = max(result.get(s, 0), n)
        elif kind in _ASYNC_READ and port in _ASYNC_READ[kind][1]:
            result = self.fanin(name, _ASYNC_READ[kind][0])
            result[name] = max(result.get(name, 0), 0)
        elif _combinational_dsp(cell):
            inputs = [p for p, d in cell["port_directions"].items() if d == "input"]
            result = {s: n + 1 for s, n in self.fanin(name, inputs).items()}
        else:
            result = {name: 0}                      # a register, block RAM or registered DSP
        self._memo[key] = result
        return result


def _endpoint_ports(cell, port):
    """The netlist ports behind a port nextpnr names: its flip-flops' ``M`` (the slice's bypass
    input) is the netlist's ``DI``."""
    if port in cell["connections"]:
        return (port,)
    if port == "M" and "DI" in cell["connections"]:
        return ("DI",)
    return ()


def failing_paths(netlist, report, *, depth=2, root=None, top=None, limit=None):
    """The failing endpoints of nextpnr ``report`` (its JSON with ``--detailed-timing-report``;
    a dict or a path) on Yosys ``netlist`` (the JSON nextpnr placed; a dict or a path), grouped
    by source and destination block (see the module docstring; ``depth`` and ``root`` as in
    :func:`block_of`), per clock.

    Returns ``{"clocks": {clock: {"constraint_mhz", "achieved_mhz", "period_ns", "endpoints",
    "failing", "worst_slack_ns", "groups": [...], "critical_path": {...}}}, "depth", "root"}``;
    each group is ``{"source", "destination", "endpoints", "worst_slack_ns", "max_levels",
    "worst_endpoint", "also_from"}`` (``also_from``: the other source blocks in the endpoints'
    cones, with their most levels, the deepest first), the groups in order of worst slack;
    ``limit`` keeps that many groups a clock. Raises :exc:`ValueError` when the report has no
    detailed net timings.
    """
    if not isinstance(report, dict):
        report = json.loads(Path(report).read_text())
    if not isinstance(netlist, dict):
        netlist = json.loads(Path(netlist).read_text())
    if "detailed_net_timings" not in report:
        raise ValueError("the nextpnr report has no detailed net timings: run nextpnr with "
                         "--report FILE --detailed-timing-report")
    nets = _Netlist(netlist, top)
    clocks = {}
    for clock, f in report.get("fmax", {}).items():
        clocks[clock] = {"constraint_mhz": f["constraint"],
                         "achieved_mhz": round(f["achieved"], 2),
                         "period_ns": round(1000.0 / f["constraint"], 3),
                         "endpoints": 0, "failing": 0, "worst_slack_ns": None}
    groups = defaultdict(dict)
    for net in report["detailed_net_timings"]:
        for ep in net["endpoints"]:
            clock = ep["event"].split(" ", 1)[-1]
            if clock not in clocks:
                continue                            # an unconstrained or asynchronous event
            c = clocks[clock]
            delay = ep["delay"]
            arrival = delay[-1] if isinstance(delay, list) else delay
            slack = c["period_ns"] - arrival
            c["endpoints"] += 1
            if slack >= 0:
                continue
            c["failing"] += 1
            cell_name = ep["cell"].lstrip("\\")
            cell = nets.cells.get(cell_name)
            sources = nets.fanin(cell_name, _endpoint_ports(cell, ep["port"])) if cell else {}
            by_block = {}                           # source block -> most levels
            for src, n in sources.items():
                b = block_of(src, depth, root)
                by_block[b] = max(by_block.get(b, 0), n)
            if by_block:
                source, levels = max(by_block.items(), key=lambda s: (s[1], s[0]))
            else:
                source, levels = "(unknown)", 0
            key = (source, block_of(cell_name, depth, root))
            g = groups[clock].setdefault(key, {
                "source": key[0], "destination": key[1], "endpoints": 0,
                "worst_slack_ns": 0.0, "max_levels": 0, "worst_endpoint": None,
                "also_from": {}})
            g["endpoints"] += 1
            g["max_levels"] = max(g["max_levels"], levels)
            for b, n in by_block.items():
                if b != source:
                    g["also_from"][b] = max(g["also_from"].get(b, 0), n)
            if slack < g["worst_slack_ns"] or g["worst_endpoint"] is None:
                g["worst_slack_ns"] = round(slack, 3)
                g["worst_endpoint"] = f"{cell_name}.{ep['port']}"
    for clock, c in clocks.items():
        for g in groups[clock].values():             # the deepest first
            g["also_from"] = dict(sorted(g["also_from"].items(), key=lambda b: (-b[1], b[0])))
        ordered = sorted(groups[clock].values(), key=lambda g: (g["worst_slack_ns"],
                                                                 -g["endpoints"]))
        c["worst_slack_ns"] = ordered[0]["worst_slack_ns"] if ordered else None
        c["groups"] = ordered[:limit] if limit else ordered
        c["critical_path"] = _critical_path(report, clock, depth, root)
    return {"clocks": clocks, "depth": depth, "root": root}


def _critical_path(report, clock, depth, root):
    """nextpnr's critical path of ``clock``: its start and end cells, their blocks, the logic
    cells on it and its delay."""
    for p in report.get("critical_paths", ()):
        if p["to"].split(" ", 1)[-1] != clock or not p["path"]:
            continue
        start = p["path"][0]["from"]["cell"].lstrip("\\")
        end = p["path"][-1]["to"]["cell"].lstrip("\\")
        return {"from": start, "to": end, "source": block_of(start, depth, root),
                "destination": block_of(end, depth, root),
                "logic_cells": sum(s["type"] == "logic" for s in p["path"]),
                "delay_ns": round(sum(s["delay"] for s in p["path"]), 3)}
    return None


def markdown(result, title="Failing paths"):
    """The Markdown of a :func:`failing_paths` result: per clock a table of the groups."""
    below = f" below `{result['root']}`" if result.get("root") else ""
    md = [f"## {title}", "",
          f"Endpoints with negative slack at the constraint, grouped by source and destination "
          f"block ({result['depth']} levels of hierarchy{below}; source: the launching register "
          f"of the deepest logic cone, levels: its LUT and carry cells; "
          f"`bpsa.platform.timing_paths`).", ""]
    for clock, c in result["clocks"].items():
        md.append(f"Clock `{clock}`: {c['achieved_mhz']:g} MHz at a {c['constraint_mhz']:g} MHz "
                  f"constraint; {c['failing']:,} of {c['endpoints']:,} endpoints fail"
                  + (f", worst slack {c['worst_slack_ns']:.3f} ns." if c["failing"] else "."))
        cp = c.get("critical_path")
        if cp:
            md.append(f"nextpnr's critical path: `{cp['from']}` ({cp['source']}) to `{cp['to']}` "
                      f"({cp['destination']}), {cp['logic_cells']} logic cells, "
                      f"{cp['delay_ns']:.3f} ns.")
        md.append("")
        if c["groups"]:
            md += ["| source block | destination block | failing endpoints | worst slack (ns) "
                   "| max levels | worst endpoint | also from (levels) |",
                   "|---|---|---:|---:|---:|---|---|"]
            md += [f"| `{g['source']}` | `{g['destination']}` | {g['endpoints']:,} | "
                   f"{g['worst_slack_ns']:.3f} | {g['max_levels']} | `{g['worst_endpoint']}` | "
                   + ", ".join(f"`{b}` ({n})" for b, n in list(g["also_from"].items())[:3])
                   + " |" for g in c["groups"]]
            md.append("")
    return "\n".join(md)


def summary(result, groups):
    """Per clock of a :func:`failing_paths` result: its endpoints, how many fail, the worst
    slack and the first ``groups`` groups (for a report that points at the whole table)."""
    return {clk: {"endpoints": c["endpoints"], "failing": c["failing"],
                  "worst_slack_ns": c["worst_slack_ns"], "groups": c["groups"][:groups]}
            for clk, c in result["clocks"].items()}


def write_report(netlist, report, out_stem, *, depth=2, root=None, top=None):
    """:func:`failing_paths` written to ``<out_stem>.json`` and ``<out_stem>.md``; returns the
    result."""
    result = failing_paths(netlist, report, depth=depth, root=root, top=top)
    out_stem = Path(out_stem)
    (out_stem.parent / f"{out_stem.name}.json").write_text(json.dumps(result, indent=2) + "\n")
    (out_stem.parent / f"{out_stem.name}.md").write_text(markdown(result) + "\n")
    return result
