"""Verilog generation flow: reproducible Verilog plus the configuration as JSON."""

import importlib
import json
import re
from pathlib import Path

from amaranth.back import verilog

from bpsa.config import MX_TOP_NAMES, Config
from bpsa.platform.tops import FLOAT_TOPS, TOPS

__all__ = ["DEVICE_TARGETS", "TOPS", "TRIGGER", "describe", "elaborate_top", "executable_constants",
           "generate_verilog", "verilog_ports", "write_verilog"]

def elaborate_top(config, top):
    """The component for ``top`` (a key of :data:`TOPS`) built for ``config``; a
    floating-point configuration builds only the :data:`FLOAT_TOPS` (others raise
    :class:`~bpsa.config.ConfigError`)."""
    if top not in TOPS:
        raise ValueError(f"top must be one of {sorted(TOPS)}, not {top!r}")
    if config.is_float and top not in FLOAT_TOPS:
        config.require_int(f"{top} top")
    if config.is_mx and top not in MX_TOP_NAMES:
        config.require_not_mx(f"{top} top")
    module, cls = (FLOAT_TOPS if config.is_float else TOPS)[top].split(":")
    return getattr(importlib.import_module(module), cls)(config)


class _Device:
    """What a component's ``elaborate(platform)`` learns of the FPGA family it is built for
    when no board platform is given: the ``family`` attribute of Amaranth's vendor platforms
    (``"ecp5"``). The PE instantiates the family's DSP block with its registers
    (:meth:`bpsa.gateware.array.arith.IntArith.multiplier`)."""

    def __init__(self, family):
        self.family = family


#: Targets whose Verilog differs from the portable one: the family's DSP blocks are instantiated
#: with their registers. Everything else (simulation, generic and iCE40 synthesis) takes the
#: portable Verilog.
DEVICE_TARGETS = ("ecp5",)


def generate_verilog(config, top="pe", *, name=None, target=None):
    """Verilog text of ``top`` for ``config``. No source locations or absolute paths are
    emitted, so the text is the same on every machine and from every working directory, and
    every ``always`` block executes at time zero in every simulator
    (:func:`executable_constants`). ``target`` (one of :data:`DEVICE_TARGETS`, or ``None``
    for the portable Verilog) builds it for one FPGA family's DSP blocks."""
    if not isinstance(config, Config):
        raise TypeError(f"config must be a Config, not {config!r}")
    if target is not None and target not in DEVICE_TARGETS:
        raise ValueError(f"target must be one of {list(DEVICE_TARGETS)} or None, "
                         f"not {target!r}")
    component = elaborate_top(config, top)
    platform = _Device(target) if target else None
    return executable_constants(verilog.convert(component, name=name or top, platform=platform,
                                                emit_src=False, strip_internal_attrs=True))


#: A combinational block that only assigns a constant (Yosys writes one for a constant field
#: of a signal that processes drive, e.g. a set-up plan's zero fields).
_CONST_ALWAYS = re.compile(r"^  always @\*\n    ([^\n;=]+?) = (\d+'[hbdo][0-9a-fA-FxzXZ_]+);\n",
                           re.M)
#: The net the rewritten blocks read: 0 from time zero (a net's declaration assignment).
TRIGGER = "\\$bpsa$const_trigger "
#: Yosys's own zero register that its combinational blocks read (``dump_module$N``).
_YOSYS_TRIGGER = re.compile(r"^  reg (\\\$auto\$verilog_backend\.cc:\d+:dump_module\$\d+ ) = 0;$",
                            re.M)


def executable_constants(text):
    """``text`` with every combinational ``always @*`` block made to execute at time zero in
    an event-driven simulator, as it does in Verilator.

    An ``always @*`` runs when something it reads changes. A block that reads nothing (Yosys
    writes one for each constant field of a signal that processes drive, e.g. a set-up plan's
    zero fields) never runs (IEEE 1364; Icarus Verilog warns "@* found no sensitivities so
    it will never trigger", Verilator's ``ALWNEVER``) and its bits stay ``x``. Yosys gives
    its other blocks a read of a register declared ``= 0`` (``dump_module$N``), but under
    SystemVerilog semantics (Icarus ``-g2012``, as cocotb runs it) a variable's initializer
    is no event either, so a block that reads only such registers never runs (the DMA's
    ``rready`` stayed ``x``). Here the constant blocks read :data:`TRIGGER`, and every trigger
    is a *net* declared ``= 1'h0``, whose declaration assignment is an event at time zero in
    both semantics. The logic is unchanged: the reads select nothing
    (amaranth-lang/amaranth#1629)."""
    out, pos = [], 0
    for start in [m.start() for m in re.finditer(r"^module ", text, re.M)] + [len(text)]:
        chunk = text[pos:start]
        if _CONST_ALWAYS.search(chunk):
            chunk = _CONST_ALWAYS.sub(
                lambda m: f"  always @* begin\n    if ({TRIGGER}) begin end\n"
                          f"    {m.group(1)} = {m.group(2)};\n  end\n", chunk)
            header = chunk.index(");\n") + 3
            chunk = chunk[:header] + f"  wire {TRIGGER}= 1'h0;\n" + chunk[header:]
        out.append(chunk)
        pos = start
    return _YOSYS_TRIGGER.sub(lambda m: f"  wire {m.group(1)} = 1'h0;", "".join(out))


def verilog_ports(text, name):
    """The ports of module ``name`` in Verilog ``text``, in the module header's order:
    ``[{"name", "dir" ("in" / "out"), "width"}]``."""
    start = text.index(f"module {name}(")
    header = text[start + len(f"module {name}("):text.index(");", start)]
    body = text[start:text.index("endmodule", start)]
    decls = {n: (d, int(hi) - int(lo) + 1 if hi else 1) for d, hi, lo, n in re.findall(
        r"^\s*(input|output)\s+(?:wire\s+|reg\s+)?(?:signed\s+)?(?:\[(\d+):(\d+)\]\s+)?"
        r"(\S+);", body, re.M)}
    order = [p.strip() for p in header.replace("\n", " ").split(",") if p.strip()]
    return [{"name": p, "dir": "out" if decls[p][0] == "output" else "in",
             "width": decls[p][1]} for p in order]


def describe(config, top, name, text):
    """What the JSON next to a Verilog file says: the top and its module name, the ports, the
    generator and register-map versions and the configuration."""
    from importlib.metadata import PackageNotFoundError, version

    from bpsa.spec.regmap import MAP_VERSION
    try:
        gen = version("backprop-systolic")
    except PackageNotFoundError:
        gen = "unknown"
    return {"top": top, "module": name, "generator_version": gen,
            "register_map_version": f"{MAP_VERSION[0]}.{MAP_VERSION[1]}",
            "ports": verilog_ports(text, name), "config": config.to_dict()}


def write_verilog(config, top="pe", out_dir="build", *, name=None, target=None):
    """Write ``<name>.v`` and ``<name>.json`` (:func:`describe`: top, ports, versions and the
    configuration) into ``out_dir``; return the path of the Verilog file. With ``target``
    (:func:`generate_verilog`) the files are ``<name>.<target>.v`` and ``<name>.<target>.json``,
    the module still ``<name>``."""
    name = name or top
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    stem = f"{name}.{target}" if target else name
    v_path = out / f"{stem}.v"
    text = generate_verilog(config, top, name=name, target=target)
    v_path.write_text(text)
    (out / f"{stem}.json").write_text(
        json.dumps(describe(config, top, name, text), indent=2, sort_keys=True) + "\n")
    return v_path
