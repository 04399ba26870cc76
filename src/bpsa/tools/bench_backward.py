"""Loss and gradient benchmark: BP-im2col against the baseline (zero-spaced copies) on the RTL.

    python -m bpsa.tools.bench_backward [--config paper16] [--max-channels 4] \
        [--max-size 16] [--json] [--page docs/results/bench_backward.md]

The stride >= 2 layers of ``sim/workloads/conv_layers.csv`` are scaled down (channels and input
size) until both modes of both phases fit the configuration's buffers; layers that scale to the
same shape are run once. Every run goes through the generated ``conv_backward`` top under
Verilator and is checked against the golden model. Per layer it prints buffer words read (A/B),
cycles (with the baseline's reorganization pass), buffer footprint and prologue, and the mean
change of BP-im2col against the baseline.
"""

import argparse
import csv
import json
import statistics
import sys

from bpsa.config import load_config
from bpsa.spec.layer import ConvLayer
from bpsa.tools.results import current_command, write_page
from bpsa.tools.zero_report import DEFAULT_CSV
from bpsa.sim.conv_backward_run import check_layer
from bpsa.sim.simcmd import run_backward_layers


def scaled_layers(cfg, csv_path, max_channels, max_size):
    """The scaled-down stride >= 2 layers that run in both modes of both phases on ``cfg``:
    a list of (layer, [source layer names])."""
    out, seen = [], {}
    for row in csv.DictReader(open(csv_path)):
        if int(row["stride"]) < 2:
            continue
        R, S, s, p, d = (int(row[k]) for k in ("R", "S", "stride", "pad", "dilation"))
        found = None
        for k in range(min(int(row["K"]), max_channels), 0, -1):
            for c in range(min(int(row["C"]), max_channels), 0, -1):
                for h in range(max_size, 0, -1):
                    try:
                        layer = ConvLayer.conv(1, c, h, h, k, R, S, stride=s, pad=p, dil=d)
                        for phase in ("loss", "gradient"):
                            for baseline in (False, True):
                                check_layer(cfg, layer, phase, baseline)
                    except ValueError:
                        continue
                    found = layer
                    break
                if found:
                    break
            if found:
                break
        if found is None:
            continue
        name = f"{row['network']}.{row['layer']}"
        if found.text() in seen:
            seen[found.text()][1].append(name)
        else:
            seen[found.text()] = (found, [name])
            out.append(seen[found.text()])
    return out


def _summary(rows, phase):
    sel = [r for r in rows if r["phase"] == phase]

    def mean(key):
        return statistics.mean(r[key] for r in sel)
    return (f"{phase}: buffer words {mean('words_change'):+.1f}% (B {mean('b_change'):+.1f}%), "
            f"runtime {mean('cycles_change'):+.1f}%, footprint {mean('footprint_change'):+.1f}%"
            f", prologue {sorted({r['prologue'][0] for r in sel})} cycles")


def markdown(cfg, rows):
    """The rows as a Markdown table, each pair BP-im2col / baseline, and the means a phase."""
    out = [f"The backward phases of the workload's layers scaled to `{cfg.name}` "
           f"({cfg.rows}x{cfg.cols}) on the RTL (Verilator), each result checked against the "
           "golden model; each pair is BP-im2col / the baseline (explicit reorganization).", "",
           "| phase | layer | A words | B words | words change | cycles | reorg cycles "
           "| cycles change | footprint | footprint change | prologue |",
           "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        out.append(f"| {r['phase']} | {r['layer'].replace(',dilation=1,N=1', '')} "
                   f"| {r['words_a'][0]} / {r['words_a'][1]} "
                   f"| {r['words_b'][0]} / {r['words_b'][1]} | {r['words_change']:+.1f}% "
                   f"| {r['cycles'][0]} / {r['cycles'][1]} | {r['reorg_cycles']} "
                   f"| {r['cycles_change']:+.1f}% | {r['footprint'][0]} / {r['footprint'][1]} "
                   f"| {r['footprint_change']:+.1f}% | {r['prologue'][0]} / {r['prologue'][1]} |")
    out += [""] + [f"- {_summary(rows, phase)}" for phase in ("loss", "gradient")
                   if any(r["phase"] == phase for r in rows)]
    return "\n".join(out) + "\n"


def _change(new, old):
    return 100.0 * (new - old) / old if old else 0.0


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m bpsa.tools.bench_backward", description=__doc__)
    p.add_argument("--config", default="paper16")
    p.add_argument("--csv", default=str(DEFAULT_CSV))
    p.add_argument("--max-channels", type=int, default=4)
    p.add_argument("--max-size", type=int, default=16)
    p.add_argument("--seed", type=int, default=11)
    p.add_argument("--json", action="store_true")
    p.add_argument("--page", metavar="FILE.md", help="also write a results page (and JSON)")
    args = p.parse_args(argv)
    cfg = load_config(args.config)
    layers = scaled_layers(cfg, args.csv, args.max_channels, args.max_size)
    if not layers:
        raise SystemExit(f"no scaled layer fits configuration {cfg.name!r}")
    runs = {}
    for phase in ("loss", "gradient"):
        for baseline in (False, True):
            runs[phase, baseline] = run_backward_layers(cfg, [lay for lay, _ in layers],
                                                        phase=phase, baseline=baseline,
                                                        seed=args.seed)
    rows = []
    for phase in ("loss", "gradient"):
        for i, (layer, names) in enumerate(layers):
            bp, base = runs[phase, False][i], runs[phase, True][i]
            if not (bp["match"] and base["match"]):
                raise SystemExit(f"{phase} {layer.text()}: result differs from the golden model")
            rb, rz = bp["buffer_words_read"], base["buffer_words_read"]
            fb, fz = sum(bp["footprint_words"].values()), sum(base["footprint_words"].values())
            rows.append({
                "phase": phase, "layer": layer.text(), "sources": names,
                "words_a": [rb["a"], rz["a"]], "words_b": [rb["b"], rz["b"]],
                "words_change": _change(rb["a"] + rb["b"], rz["a"] + rz["b"]),
                "b_change": _change(rb["b"], rz["b"]),
                "cycles": [bp["cycles"], base["cycles"]], "reorg_cycles": base["cycles_reorg"],
                "cycles_change": _change(bp["cycles"], base["cycles"]),
                "footprint": [fb, fz], "footprint_change": _change(fb, fz),
                "prologue": [bp["cycles_prologue"], base["cycles_prologue"]],
            })
    if args.page:
        command = (current_command() if argv is None
                   else " ".join(["python -m bpsa.tools.bench_backward", *argv]))
        write_page(args.page, "Backward phases: BP-im2col against the baseline", command,
                   markdown(cfg, rows), data={"config": cfg.name, "rows": rows})
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    print(f"config {cfg.name}: {cfg.rows}x{cfg.cols}; each pair is BP-im2col / baseline")
    for r in rows:
        print(f"{r['phase']:<8} {r['layer'].replace(',dilation=1,N=1', ''):<44} "
              f"A {r['words_a'][0]}/{r['words_a'][1]} B {r['words_b'][0]}/{r['words_b'][1]} "
              f"({r['words_change']:+.1f}%) | cycles {r['cycles'][0]}/{r['cycles'][1]} "
              f"(reorg {r['reorg_cycles']}, {r['cycles_change']:+.1f}%) | footprint "
              f"{r['footprint'][0]}/{r['footprint'][1]} ({r['footprint_change']:+.1f}%) | "
              f"prologue {r['prologue'][0]}/{r['prologue'][1]}")
    for phase in ("loss", "gradient"):
        print(_summary(rows, phase))
    return 0


if __name__ == "__main__":
    sys.exit(main())
