"""Feature-overhead studies (``bpsa synth --pe-overheads`` / ``--array-overheads``): the PE
and the whole array synthesized in the variants of :data:`bpsa.tools.synth.PE_VARIANTS` /
:data:`~bpsa.tools.synth.ARRAY_VARIANTS`, each adding a feature to the one before, and their
counts and overheads over the plain variant (:func:`pe_overhead_report`,
:func:`array_overhead_report`). The variants, their overheads and their tables are
:mod:`bpsa.tools.synth`'s, which the whole-design report shares.
"""

import time
from pathlib import Path

from bpsa.config import Config
from bpsa.tools.synth import (ARRAY_VARIANTS, PE_VARIANTS, _config_summary, _variant_markdown,
                              _variant_overheads, _variant_plan, _write)
from bpsa.tools.yosys import TARGETS, _check_targets, _run_all, _write_verilogs, yosys_version

__all__ = ["array_overhead_report", "pe_overhead_report"]


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


def pe_overhead_report(config, out_dir="build/synth", targets=tuple(TARGETS), *, jobs=None):
    """Synthesize the PE variants of :data:`bpsa.tools.synth.PE_VARIANTS` (with the widths and
    arithmetic of ``config``) on each of ``targets`` and write ``pe_overheads.md`` and
    ``pe_overheads.json`` into ``out_dir``: per target and variant the counts and their overhead
    in percent over the plain MAC PE. Each variant's Verilog and configuration are
    ``pe_<key>.v`` / ``.json``.

    The JSON holds ``config`` (the base configuration), ``yosys``, ``variants`` (key ->
    ``label``, ``changes`` and per-target results as in :func:`bpsa.tools.synth.synth_report`)
    and ``overheads`` (target -> variant -> count -> percent, ``null`` where the plain PE has
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
    """Synthesize the whole array (top ``array``) in the variants of
    :data:`bpsa.tools.synth.ARRAY_VARIANTS`, at the size, widths and arithmetic of ``config``,
    on each of ``targets`` and write ``array_overheads.md`` and ``array_overheads.json`` into
    ``out_dir``: per target and variant the counts and their overhead in percent over the plain
    OS array. Each variant's Verilog and configuration are ``array_<key>.v`` / ``.json``.

    By default the hierarchy is kept and identical PEs are synthesized once (see
    :mod:`bpsa.tools.yosys`): a 16x16 array takes minutes instead of hours. ``flatten=True``
    flattens the array as :func:`bpsa.tools.synth.synth_report` does: each run synthesizes every
    PE, 15-20 minutes per variant and target at 16x16, and gives somewhat smaller totals.

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
                    "those of a flat run (1-15 % in the runs measured in "
                    "`src/bpsa/tools/yosys.py`).")
    method += (" iCE40 and ECP5 runs balance gate chains before ABC9 (see "
               "`src/bpsa/tools/yosys.py`).")
    md = ["# Array area overheads", "",
          f"Base {_config_summary(config)}; the size and the operand and accumulator formats "
          f"are taken from it.", "",
          method, "",
          *_variant_markdown(variants, overheads, targets, "array", flatten)]
    elapsed = time.monotonic() - start
    return _write(out, "array_overheads", data, "\n".join(md), elapsed)
