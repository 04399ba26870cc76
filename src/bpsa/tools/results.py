"""The results pages (``docs/results/``): the shared writer every measuring tool stamps its
page with, and the renderers of the pages whose data are committed reports.

Every page starts with its title and the line ``Written by `<command>` at commit <commit> on
<date>.``: the command that measured (or rendered) it, the commit (``git rev-parse --short
HEAD``, ``-dirty`` when the tree has uncommitted changes) and the date (UTC).
:func:`write_page` writes it, and the JSON twin next to it (``<page>.json``, the data with
``command``, ``commit`` and ``date``) when the tool has data to keep.

The renderers (``python -m bpsa.tools.results <page>``, cheap: they read committed files)::

    python -m bpsa.tools.results area        # docs/synth/**.json -> docs/results/area.md
    python -m bpsa.tools.results boards [--add build/bitstream/ulx3s/report.json --command CMD]
    python -m bpsa.tools.results training [--add FILE.json --command CMD]
    python -m bpsa.tools.results index       # docs/results/index.md

``make area``, ``make bitstream``, ``make train*``, ``make roofline``, ``make energy``, ``make
rtl-layers`` and ``make bench-*`` run them after their measurement (see :data:`PAGES`).
"""

import argparse
import datetime
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

__all__ = ["PAGES", "RESULTS", "current_command", "file_stamp", "git_commit", "header",
           "render_area", "render_boards", "render_index", "render_training", "add_board",
           "add_training", "stamp", "today", "write_page", "main"]

#: Where the pages live.
RESULTS = Path("docs/results")

#: The pages of ``index.md``: file, title, what it measures, the make target that writes it.
PAGES = (
    ("area", "Area and timing per block",
     "ECP5 LUTs, FFs, DSPs, block RAMs and Fmax (nextpnr out of context) of every block "
     "synthesized, a table per configuration", "make area"),
    ("boards", "FPGA boards",
     "the latest bitstream build per board and configuration: resources, routed Fmax, "
     "clock, timing met, build time", "make bitstream"),
    ("roofline", "Training steps against their roofline",
     "the cycle model's training step of five networks against their roofline at 64- and "
     "128-bit DMA buses", "make roofline"),
    ("energy", "Energy per training step",
     "the cycle model's training step of five networks priced at 45 nm per-action energies, "
     "and the source papers' energy claims", "make energy"),
    ("grouped", "Grouped and depthwise convolutions",
     "MobileNetV2 and ResNeXt-50 training steps on the cycle model: dense, grouped and "
     "depthwise layers per phase against their roofline, packed and a group at a time",
     "make grouped"),
    ("zigzag", "ZigZag next to the energy model",
     "ZigZag (KU Leuven) and this project's energy model on ten forward layers with the same "
     "array, buffers and per-action energies", "make compare-zigzag"),
    ("rtl_layers", "Full-size layers through the RTL",
     "seven full-size ResNet-50 layer phases through the RTL (Verilator), bit-exact, cycles and "
     "DMA bytes against the cycle model", "make rtl-layers"),
    ("training", "Training curves",
     "final accuracies and cycles of the digits networks trained on the accelerator's model, "
     "the RTL and PyTorch", "make train-float, make train-torch, make train"),
    ("simulation_speed", "Simulation speed",
     "simulated cycles per second of the native (Verilator) model per build", "make bench-sim"),
    ("bench_pool", "Pooling layers",
     "every pooling layer of the workload: cycle model at full size, RTL scaled",
     "make bench-pool"),
    ("bench_frontends", "Forward front ends",
     "data feeder against channel-first forward on every workload layer: cycle model at full "
     "size, RTL scaled", "make bench-frontends"),
    ("bench_array", "Array dataflows and the interleave",
     "every dataflow's utilization on a large GEMM and the interleaved FC backward against WS "
     "and OS run separately, on the RTL", "make bench-array"),
    ("mx", "MX formats against independent implementations",
     "the MX quantizer, decoding and block dot product against gfloat, ml_dtypes and exact "
     "rationals on 100,000 blocks per format", "make mx-check"),
    ("bench_backward", "Backward phases: BP-im2col against the baseline",
     "buffer words, cycles and footprint of the loss and gradient, BP-im2col against explicit "
     "reorganization, on the RTL", "make bench-backward"),
)


# The stamp -------------------------------------------------------------------------------------

def _git(*args, cwd=None):
    try:
        out = subprocess.run(["git", *args], capture_output=True, text=True, cwd=cwd,
                             check=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip()


#: Where measurements write (outside the code they measure): a change there does not make a
#: checkout's code differ from its commit.
RESULT_DIRS = ("docs/results", "docs/synth", "docs/figures")


def git_commit(cwd=None):
    """``git rev-parse --short HEAD`` of the checkout holding ``cwd`` (default: the current
    directory), with ``-dirty`` when tracked files other than :data:`RESULT_DIRS`' differ from
    it (a measurement run beside another one's written results still measures the commit);
    ``unknown`` outside git."""
    head = _git("rev-parse", "--short", "HEAD", cwd=cwd)
    if not head:
        return "unknown"
    dirty = _git("status", "--porcelain", "--untracked-files=no", "--", ":(top)",
                 *(f":(top,exclude){d}" for d in RESULT_DIRS), cwd=cwd)
    return head + ("-dirty" if dirty else "")


def today():
    """Today's date (UTC), ISO."""
    return datetime.datetime.now(datetime.timezone.utc).date().isoformat()


def stamp(cwd=None):
    """``(commit, date)`` of a measurement made now."""
    return git_commit(cwd), today()


def file_stamp(path):
    """``(commit, date)`` of the last commit of ``path`` (``git log -1``), or ``None`` when it
    was never committed or has uncommitted changes."""
    path = Path(path)
    cwd = path.parent if path.parent.exists() else None
    if _git("status", "--porcelain", "--", path.name, cwd=cwd):
        return None
    line = _git("log", "-1", "--format=%h,%cs", "--", path.name, cwd=cwd)
    if not line:
        return None
    commit, date = line.split(",")
    return commit, date


def current_command(argv=None):
    """The command line this process was started with, as one would type it again:
    ``bpsa ...`` for the CLI, ``python -m <module> ...`` for a tool's ``main``."""
    argv = list(sys.argv if argv is None else argv) or ["python"]
    path = Path(argv[0])
    if path.suffix == ".py" and "bpsa" in path.parts:     # python -m bpsa.tools.x
        parts = path.with_suffix("").parts
        prog = "python -m " + ".".join(parts[len(parts) - 1 - parts[::-1].index("bpsa"):])
    else:
        prog = path.name
    return " ".join([prog] + [shlex.quote(a) for a in argv[1:]])


def header(title, command, commit, date):
    """The first lines of a page: its title and where it comes from."""
    return f"# {title}\n\nWritten by `{command}` at commit {commit} on {date}.\n"


def write_page(path, title, command, body, *, data=None, commit=None, date=None):
    """Write the page ``path`` (Markdown): :func:`header` and ``body``; and, when ``data`` (a
    dict) is given, its JSON twin ``path`` with ``.json``: ``command``, ``commit``, ``date``
    and ``data``. ``commit`` and ``date`` default to now (:func:`stamp`); give them for a page
    rendered again from an earlier measurement. Returns the page's path."""
    path = Path(path)
    if commit is None or date is None:
        now_commit, now_date = stamp()
        commit, date = commit or now_commit, date or now_date
    path.parent.mkdir(parents=True, exist_ok=True)
    text = header(title, command, commit, date) + "\n" + body.strip("\n") + "\n"
    path.write_text(text)
    if data is not None:
        twin = {"command": command, "commit": commit, "date": date, **data}
        path.with_suffix(".json").write_text(json.dumps(twin, indent=1) + "\n")
    return path


def _stamp_of(data, path):
    """``(command, commit, date)`` recorded in a report's JSON ``data``, else the last commit of
    its file (``git log -1``), else ``not committed``."""
    got = file_stamp(path) or ("not committed", "")
    return (data.get("command"), data.get("commit") or got[0], data.get("date") or got[1])


def _table(header_cells, rows, align):
    lines = ["| " + " | ".join(header_cells) + " |",
             "|" + "|".join("---:" if a == "r" else "---" for a in align) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _when(commit, date):
    return f"{commit}, {date}" if date else commit


def _n(x):
    return "" if x is None else f"{x:,}"


# Area ------------------------------------------------------------------------------------------

def _synth_command(data, folder, synth_dir):
    """The ``bpsa synth`` command of a report that did not record it: the preset (or the
    configuration file next to the reports), its targets, ``--timing`` when it has a timing
    estimate, and the folder it was written to."""
    name = data["config"]["name"]
    toml = Path(synth_dir) / f"{name}.toml"
    config = toml.as_posix() if toml.exists() else name
    return (f"bpsa synth --config {config} --top {data['top']} --targets "
            f"{' '.join(data['targets'])}{' --timing' if 'timing' in data else ''} "
            f"-o {folder.as_posix()}")


def area_rows(synth_dir="docs/synth"):
    """Every ECP5 report under ``synth_dir``: ``(rows, other)``; a row a block and
    configuration (``config``, ``block``, ``luts``, ``ffs``, ``dsps``, ``brams``, ``fmax``
    (MHz, or ``None``), ``report`` (its path), ``command``, ``commit``, ``date``); ``other``:
    the reports without ECP5 figures (``(path, commit, date)``)."""
    synth_dir = Path(synth_dir)
    rows, other = [], []
    for path in sorted(synth_dir.rglob("*.json")):
        if path.name.endswith(".report.json"):     # nextpnr's timing reports: the JSON's
            continue
        data = json.loads(path.read_text())
        command, commit, date = _stamp_of(data, path)
        config = data.get("config")
        config = config.get("name") if isinstance(config, dict) else config
        ecp5 = (data.get("targets") or {}).get("ecp5") if isinstance(data.get("targets"),
                                                                        dict) else None
        row = {"report": path.as_posix(), "commit": commit, "date": date}
        if "top" in data and ecp5:                 # one block: bpsa synth --top T
            s = ecp5["summary"]
            fmax = ((data.get("timing") or {}).get("fmax_mhz") or {})
            rows.append({**row, "config": config, "block": data["top"], "luts": s["luts"],
                         "ffs": s["ffs"], "dsps": s["dsps"], "brams": s.get("brams"),
                         "fmax": min(fmax.values()) if fmax else None,
                         "command": command or _synth_command(data, path.parent, synth_dir)})
        elif "blocks" in data and "ecp5" in data.get("targets", ()):   # bpsa synth --report
            for block, b in data["blocks"].items():
                s = (b.get("targets") or {}).get("ecp5", {}).get("summary")
                if not s:
                    continue
                rows.append({**row, "config": config, "block": f"{block} (hierarchy kept)",
                             "luts": s["luts"], "ffs": s["ffs"], "dsps": s["dsps"],
                             "brams": s.get("brams"), "fmax": None,
                             "command": command or (
                                 f"bpsa synth --config {config} --report --targets ecp5 "
                                 f"--blocks {block} -o {path.parent.as_posix()}")})
        elif str(data.get("invocation")).strip() == "stat -json":    # Yosys's stat alone
            cells = data["design"].get("num_cells_by_type", {})
            top = next(iter(data.get("modules", {"?": 0}))).lstrip("\\")
            rows.append({**row, "config": "not recorded", "block": f"{top} (synthesis only)",
                         "luts": cells.get("LUT4", 0) + 2 * cells.get("CCU2C", 0),
                         "ffs": cells.get("TRELLIS_FF", 0), "dsps": cells.get("MULT18X18D", 0),
                         "brams": cells.get("DP16KD", 0), "fmax": None,
                         "command": command or ("Yosys stat -json after synth_ecp5 (the "
                                                "command not recorded)")})
        else:
            other.append((path.as_posix(), commit, date))
    return rows, other


def render_area(synth_dir="docs/synth", out=RESULTS / "area.md", *, command=None):
    """``area.md``: :func:`area_rows` of ``synth_dir``, a table per configuration; returns the
    rows."""
    rows, other = area_rows(synth_dir)
    command = command or f"python -m bpsa.tools.results area --synth {synth_dir} -o {out}"
    body = ["ECP5 resources after `synth_ecp5` (LUTs = LUT4 + 2 x CCU2C, FFs = TRELLIS_FF, "
            "DSPs = MULT18X18D, BRAM = DP16KD) and Fmax routed by nextpnr out of context on the "
            "ECP5-85F at a 100 MHz constraint (the block alone, without the rest of a design; "
            "blank: not placed, or no path between registers). One row a report under "
            "`docs/synth/`, with the command that wrote it and its commit and date. `make "
            "area` runs the board configuration's blocks again and renders this page.", ""]
    by_config = {}
    for r in rows:
        by_config.setdefault(r["config"], []).append(r)
    for config in sorted(by_config, key=lambda c: (c == "not recorded", c)):
        body += [f"## {config}", "", _table(
            ["block", "LUTs", "FFs", "DSPs", "BRAM", "Fmax (MHz)", "command", "commit, date"],
            [(r["block"], _n(r["luts"]), _n(r["ffs"]), _n(r["dsps"]), _n(r["brams"]),
              "" if r["fmax"] is None else f"{r['fmax']:.1f}", f"`{r['command']}`",
              _when(r["commit"], r["date"]))
             for r in sorted(by_config[config], key=lambda r: r["block"])],
            "lrrrrrll"), ""]
    if other:
        body += ["Other reports (no ECP5 figures of one block: feature overheads, generic "
                 "cells):", ""]
        body += [f"- `{p}` ({_when(c, d)})" for p, c, d in other]
    write_page(out, "Area and timing per block", command, "\n".join(body))
    return rows


# Boards ----------------------------------------------------------------------------------------

def _board_row(data, path):
    command, commit, date = _stamp_of(data, path)
    cells = data.get("synth_cells", {})
    cap = data.get("capacity", {})
    util = data.get("utilization", {})
    placed = util.get("TRELLIS_COMB") or util.get("ICESTORM_LC")
    luts = f"{cells['lut']:,} / {cap['lut']:,}" if "lut" in cells else ""
    if placed:
        luts += f" ({placed['used']:,} placed, {placed['used'] / placed['available']:.0%})"
    fmax = data.get("fmax_mhz") or {}
    if data.get("fit") is False:
        routed, met = "", "refused before P&R (does not fit)"
    elif fmax:
        routed = ", ".join(f"{f:.2f}" for f in fmax.values())
        met = "met" if data.get("timing_met") else "not met"
    else:
        routed, met = "", data.get("outcome", "not routed")
    times = data.get("times_s", {})
    total = times.get("total")
    parts = ", ".join(f"{k} {v:,.0f} s" for k, v in times.items() if k != "total")
    wall = (f"{total:,.0f} s ({parts})" if total and parts else
            f"{total:,.0f} s" if total else parts)
    clock = data.get("clock_mhz")
    return (data["board"], f"`{data['config']}`", luts, _n(cells.get("ff")),
            f"{cells['dsp']:,} / {cap['dsp']:,}" if "dsp" in cells else "",
            f"{cells['bram']:,} / {cap['bram']:,}" if "bram" in cells else "",
            routed, "" if clock is None else f"{clock:g}", met, wall,
            f"`{command}`" if command else "", _when(commit, date), data.get("note", ""))


def render_boards(boards_dir=RESULTS / "boards", out=RESULTS / "boards.md", *, command=None):
    """``boards.md``: a row a build JSON in ``boards_dir`` (the latest build of a board and
    configuration, :func:`add_board`); returns the number of rows."""
    boards_dir = Path(boards_dir)
    paths = sorted(boards_dir.glob("*.json"))
    rows = [_board_row(json.loads(p.read_text()), p) for p in paths]
    command = command or f"python -m bpsa.tools.results boards --dir {boards_dir} -o {out}"
    body = ["The latest build of each board and configuration (`make bitstream` adds or "
            "replaces its row: `build/bitstream/<board>/report.json` copied to "
            f"`{boards_dir.as_posix()}/<board>_<config>.json`). LUTs after synthesis against "
            "the device (placed in parentheses), Fmax after routing (MHz; blank when not "
            "routed), the design clock (MHz), timing met at that clock, and the wall time of "
            "each step.", "",
            _table(["board", "configuration", "LUTs", "FFs", "DSPs", "BRAM", "Fmax routed",
                    "clock", "timing", "build time", "command", "commit, date", "note"],
                   rows, "llrrrrrrlllll")]
    write_page(out, "FPGA boards", command, "\n".join(body))
    return len(rows)


def add_board(report, boards_dir=RESULTS / "boards", *, command):
    """Copy a build's ``report.json`` (:func:`bpsa.platform.board.build_bitstream`) into
    ``boards_dir/<board>_<config>.json`` with ``command``, the commit and the date (replacing
    the previous build of that board and configuration), and its ``timing_paths.md`` (every
    failing path, :mod:`bpsa.platform.timing_paths`) beside it as
    ``<board>_<config>_timing_paths.md``; returns the new path."""
    data = json.loads(Path(report).read_text())
    commit, date = stamp()
    path = Path(boards_dir) / f"{data['board']}_{data['config']}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"command": command, "commit": commit, "date": date, **data},
                               indent=2) + "\n")
    paths_md = Path(report).with_name("timing_paths.md")     # every failing path, by block
    if paths_md.is_file():
        path.with_name(f"{path.stem}_timing_paths.md").write_text(paths_md.read_text())
    return path


# Training --------------------------------------------------------------------------------------

def _acc(x):
    return "" if x is None else f"{x:.2%}"


def _training_rows(data, path):
    """Rows of one training JSON (``bpsa train --json``, or ``float_training``'s runs)."""
    command, commit, date = _stamp_of(data, path)
    where = _when(commit, date)
    runs = []
    if "history" in data:
        runs.append((path.stem, data))
    for key, run in data.items():
        if isinstance(run, dict) and "history" in run:
            runs.append((f"{path.stem}: {key}", run))
    rows = []
    for name, run in runs:
        rows.append((name, f"`{run.get('config', '')}`", run.get("backend", ""),
                     run.get("epochs", len(run["history"])), _acc(run.get("test_accuracy")),
                     _acc(run.get("reference_accuracy")),
                     _n(run.get("cycles_per_step")), f"`{command}`" if command else "", where))
    for key, curve in data.items():        # float_training's PyTorch references
        if (key not in ("history", "reference") and isinstance(curve, list) and curve
                and "test_accuracy" in curve[-1]):
            rows.append((f"{path.stem}: {key}", "PyTorch", "", len(curve),
                         _acc(curve[-1]["test_accuracy"]), "", "",
                         f"`{command}`" if command else "", where))
    return rows


def _format_of(data):
    """``(model, format)`` of a ``bpsa train --model`` JSON: the model's factory name and the
    arithmetic (with an MX scale rule), read from the summary or, for a summary without them,
    from its stamped command and configuration; ``None`` for another kind of JSON."""
    if "history" not in data or not data.get("reference_accuracy"):
        return None
    command = data.get("command", "")
    model = data.get("model")
    if model is None:
        found = re.search(r"--model (\S+)", command)
        model = found.group(1) if found else "bpsa.torch.models:digits_cnn"
    arithmetic = data.get("arithmetic")
    if arithmetic is None:
        try:
            from bpsa.config import load_config
            arithmetic = load_config(data.get("config")).arithmetic
        except ValueError:
            return None
    rule = data.get("mx_scale_rule")
    return model.rpartition(":")[2], arithmetic + (f" ({rule})" if rule else "")


def format_table(train_dir=RESULTS / "training"):
    """The number-format table of ``training.md``: a row a model, a column a format, each
    cell the final test accuracy and its difference in points from the PyTorch float32 run
    trained beside it (the same initial weights, batches and hyperparameters); the float32
    column lists those references (one value when every run of the model agrees)."""
    cells, references, formats = {}, {}, []
    for path in sorted(Path(train_dir).glob("*.json")):
        data = json.loads(path.read_text())
        key = _format_of(data)
        if key is None:
            continue
        model, fmt = key
        ref = data["reference_accuracy"]
        references.setdefault(model, [])
        references[model] += [ref] if ref not in references[model] else []
        cells[model, fmt] = (data["test_accuracy"], ref)
        formats += [fmt] if fmt not in formats else []
    order = ["int", "bf16", "fp16"]
    formats.sort(key=lambda f: (order.index(f) if f in order else len(order), f))
    rows = []
    for model in sorted(references):
        rows.append([f"`{model}`", " / ".join(_acc(r) for r in sorted(references[model]))] + [
            "" if (model, f) not in cells else
            f"{cells[model, f][0]:.2%} ({(cells[model, f][0] - cells[model, f][1]) * 100:+.1f})"
            for f in formats])
    return _table(["model", "PyTorch float32"] + formats, rows, "l" + "r" * (len(formats) + 1))


def render_training(train_dir=RESULTS / "training", out=RESULTS / "training.md", *,
                    command=None):
    """``training.md``: a row a run of each JSON in ``train_dir``; returns the rows."""
    train_dir = Path(train_dir)
    rows = []
    for path in sorted(train_dir.glob("*.json")):
        rows += _training_rows(json.loads(path.read_text()), path)
    command = command or f"python -m bpsa.tools.results training --dir {train_dir} -o {out}"
    body = ["Networks trained on the digits data set: final test accuracy on the accelerator "
            "(its cycle model, bit-identical to the RTL, or the RTL) and of the same network "
            "in plain PyTorch (reference), and the cycles of a training step. The histories "
            f"are in `{train_dir.as_posix()}/*.json`, the curves in `docs/figures/`.", "",
            _table(["run", "configuration", "backend", "epochs", "test accuracy",
                    "reference", "cycles / step", "command", "commit, date"],
                   rows, "lllrrrrll"), "",
            "## Number formats", "",
            "The same networks (`bpsa train --model ...`: the same initial weights, batches and "
            "hyperparameters) in each arithmetic: the final test accuracy and, in brackets, its "
            "difference in points from the PyTorch float32 run trained beside it (the float32 "
            "column lists those runs' accuracies; two values mean the runs were made at commits "
            "whose float32 runs differ). MX runs are the golden model of the MX "
            "contract (`docs/architecture/mx.md`; the scale rule in brackets) in the orders "
            "of the MX engines (runs stamped from commit 9936231 on: the channel-first "
            "order for the forward and the loss, the zero-free walker's for the gradient); "
            "`int` is the integer configuration's power-of-two scaling.", "",
            format_table(train_dir)]
    write_page(out, "Training curves", command, "\n".join(body))
    return rows


def add_training(path, *, command):
    """Stamp a training JSON (``bpsa train --json`` output) with ``command``, the commit and
    the date."""
    path = Path(path)
    data = json.loads(path.read_text())
    commit, date = stamp()
    data = {"command": command, "commit": commit, "date": date,
            **{k: v for k, v in data.items() if k not in ("command", "commit", "date")}}
    path.write_text(json.dumps(data, indent=1, sort_keys=False) + "\n")
    return path


# Index -----------------------------------------------------------------------------------------

def render_index(out=RESULTS / "index.md"):
    """``index.md``: a line a page (what it measures, the make target) and the toctree."""
    lines = ["# Results", "",
             "Every page is written by the `make` target that measures it; the line under "
             "its title names the command, the commit and the date. Measure again to update "
             "a page; git keeps the earlier ones.", ""]
    lines += [f"- [{title}]({name}.md): {what} ("
              + ", ".join(f"`{t}`" for t in target.split(", ")) + ")"
              for name, title, what, target in PAGES]
    lines += ["", "```{toctree}", ":hidden:", ""] + [name for name, *_ in PAGES] + ["```", ""]
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text("\n".join(lines))
    return Path(out)


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m bpsa.tools.results",
                                description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="page", required=True)
    a = sub.add_parser("area", help="docs/results/area.md from the reports under docs/synth/")
    a.add_argument("--synth", default="docs/synth")
    a.add_argument("-o", "--out", default=str(RESULTS / "area.md"))
    b = sub.add_parser("boards", help="docs/results/boards.md from the builds' JSON")
    b.add_argument("--add", metavar="REPORT.json", help="a build's report.json to add first")
    b.add_argument("--command", help="--add: the command that built it")
    b.add_argument("--dir", default=str(RESULTS / "boards"))
    b.add_argument("-o", "--out", default=str(RESULTS / "boards.md"))
    t = sub.add_parser("training", help="docs/results/training.md from the training JSON")
    t.add_argument("--add", metavar="FILE.json", help="a training JSON to stamp first")
    t.add_argument("--command", help="--add: the command that wrote it")
    t.add_argument("--dir", default=str(RESULTS / "training"))
    t.add_argument("-o", "--out", default=str(RESULTS / "training.md"))
    i = sub.add_parser("index", help="docs/results/index.md")
    i.add_argument("-o", "--out", default=str(RESULTS / "index.md"))
    args = p.parse_args(argv)
    command = current_command() if argv is None else " ".join(
        ["python -m bpsa.tools.results"] + [shlex.quote(a) for a in argv])
    if getattr(args, "add", None) and not args.command:
        p.error("--add needs --command")
    if args.page == "area":
        rows = render_area(args.synth, args.out, command=command)
        print(f"wrote {args.out} ({len(rows)} rows)")
    elif args.page == "boards":
        if args.add:
            print(f"wrote {add_board(args.add, args.dir, command=args.command)}")
        print(f"wrote {args.out} ({render_boards(args.dir, args.out, command=command)} rows)")
    elif args.page == "training":
        if args.add:
            add_training(args.add, command=args.command)
        rows = render_training(args.dir, args.out, command=command)
        print(f"wrote {args.out} ({len(rows)} rows)")
    else:
        print(f"wrote {render_index(args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
