"""Verilog generation flow: reproducible Verilog plus the configuration as JSON."""

import importlib
import json
import re
from pathlib import Path

from amaranth.back import verilog

from bpsa.config import Config
from bpsa.platform.tops import TOPS

__all__ = ["TOPS", "describe", "elaborate_top", "generate_verilog", "verilog_ports",
           "write_verilog"]

def elaborate_top(config, top):
    """The component for ``top`` (a key of :data:`TOPS`) built for ``config``."""
    if top not in TOPS:
        raise ValueError(f"top must be one of {sorted(TOPS)}, not {top!r}")
    module, cls = TOPS[top].split(":")
    return getattr(importlib.import_module(module), cls)(config)


def generate_verilog(config, top="pe", *, name=None):
    """Verilog text of ``top`` for ``config``. No source locations or absolute paths are
    emitted, so the text is the same on every machine and from every working directory."""
    if not isinstance(config, Config):
        raise TypeError(f"config must be a Config, not {config!r}")
    component = elaborate_top(config, top)
    return verilog.convert(component, name=name or top, emit_src=False,
                           strip_internal_attrs=True)


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


def write_verilog(config, top="pe", out_dir="build", *, name=None):
    """Write ``<name>.v`` and ``<name>.json`` (:func:`describe`: top, ports, versions and the
    configuration) into ``out_dir``; return the path of the Verilog file."""
    name = name or top
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    v_path = out / f"{name}.v"
    text = generate_verilog(config, top, name=name)
    v_path.write_text(text)
    (out / f"{name}.json").write_text(
        json.dumps(describe(config, top, name, text), indent=2, sort_keys=True) + "\n")
    return v_path
