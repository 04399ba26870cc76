"""Simulation speed of the native transport: build seconds and simulated cycles per wall-clock
second of the whole accelerator, per C++ optimisation level and Verilator thread count.

    python -m bpsa.tools.bench_sim [--config small[,paper16]] [--opt 0,1,2] [--threads 1,2]
                                   [--layer C=16,H=32,K=16,R=3,pad=1] [--phase forward] [--json]
                                   [--page docs/results/simulation_speed.md]

Each build is timed from scratch (in a temporary build root, so a cached build does not count);
the run is the layer's ``--phase`` through the driver, timed from START to DONE (the Python
driver's share included), once the model is loaded. Every result is checked against the golden
model. ``--page`` writes the table as a results page (and its JSON twin;
:func:`bpsa.tools.results.write_page`), which ``make bench-sim`` does.
"""

import argparse
import json
import sys
import tempfile
import time

from bpsa.config import load_config
from bpsa.spec.layer import parse_layer
from bpsa.tools.results import current_command, write_page

__all__ = ["measure", "markdown", "write"]

TITLE = "Simulation speed"


def measure(config, opt, threads, layer, phase, *, build_root):
    """``{"opt", "threads", "build_seconds", "cycles", "run_seconds", "cycles_per_second"}``
    of one build of ``config`` running ``phase`` of ``layer``."""
    from bpsa.sim.native import build_native, run_jobs
    t0 = time.perf_counter()
    build_native(config, opt=opt, threads=threads, build_root=build_root)
    build = time.perf_counter() - t0
    job = {"phase": phase, "layer": layer.to_dict(), "seed": 1}
    res = run_jobs(config, [job], opt=opt, threads=threads, build_root=build_root)[0]
    if not res["match"]:
        raise AssertionError(f"{phase} of {layer.text()} differs from the golden model")
    return {"opt": opt, "threads": threads, "build_seconds": round(build, 1),
            "cycles": res["sim_cycles"], "run_seconds": round(res["sim_seconds"], 3),
            "cycles_per_second": round(res["sim_cycles"] / res["sim_seconds"])}


def markdown(data):
    """The page's body: a row a build of ``data["builds"]`` (each with its ``config``; with
    ``commit`` and ``date`` when the rows come from different measurements)."""
    dated = any("commit" in r for r in data["builds"])
    lines = [f"Simulated cycles per wall-clock second of the whole accelerator under Verilator "
             f"(the native transport), running the {data['phase']} of layer "
             f"`{data['layer']}` through the driver (its share included), per C++ optimisation "
             "level and Verilator thread count; each build timed from scratch, each result "
             "checked against the golden model. The default build is `-O2`, one thread.", "",
             "| configuration | build | build (s) | cycles | cycles / s |"
             + (" commit, date |" if dated else ""),
             "|---|---|---:|---:|---:|" + ("---|" if dated else "")]
    for r in data["builds"]:
        threads = f"{r['threads']} thread{'s' if r['threads'] > 1 else ''}"
        cells = [f"`{r['config']}`", f"`{r['opt']}`, {threads}",
                 "" if r.get("build_seconds") is None else f"{r['build_seconds']:.0f}",
                 "" if r.get("cycles") is None else f"{r['cycles']:,}",
                 f"{r['cycles_per_second']:,}"]
        if dated:
            cells.append(f"{r.get('commit', '')}, {r.get('date', '')}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def write(path, data, command, **when):
    """Write the results page ``path`` and its JSON twin from ``data`` (``layer``, ``phase``,
    ``builds``); ``when``: ``commit`` and ``date`` of an earlier measurement."""
    return write_page(path, TITLE, command, markdown(data), data=data, **when)


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m bpsa.tools.bench_sim", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default="small", help="a preset, or a comma-separated list")
    p.add_argument("--opt", default="0,1,2",
                   help="C++ optimisation levels, comma-separated (default 0,1,2: -O0 -O1 -O2)")
    p.add_argument("--threads", default="1,2", help="comma-separated (default 1,2)")
    p.add_argument("--layer", default="C=16,H=32,K=16,R=3,pad=1")
    p.add_argument("--phase", default="forward", choices=["forward", "loss", "gradient"])
    p.add_argument("--json", action="store_true")
    p.add_argument("--page", metavar="FILE.md", help="also write the table as a results page")
    args = p.parse_args(argv)
    configs = [load_config(name) for name in args.config.split(",")]
    layer = parse_layer(args.layer)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bpsa_bench_sim_") as root:
        for config in configs:
            for opt in (f"-O{level.strip().lstrip('-O')}" for level in args.opt.split(",")):
                for threads in (int(t) for t in args.threads.split(",")):
                    row = measure(config, opt, threads, layer, args.phase, build_root=root)
                    rows.append({"config": config.name, **row})
                    if not args.json:
                        print(f"{config.name:>8} {opt} {threads} thread(s): build "
                              f"{row['build_seconds']:6.1f} s, {row['cycles']:,} cycles in "
                              f"{row['run_seconds']:.2f} s = {row['cycles_per_second']:,} "
                              "cycles/s", flush=True)
    data = {"layer": layer.text(), "phase": args.phase, "builds": rows}
    if args.json:
        print(json.dumps(data))
    if args.page:
        command = (current_command() if argv is None
                   else " ".join(["python -m bpsa.tools.bench_sim", *argv]))
        print(f"wrote {write(args.page, data, command)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
