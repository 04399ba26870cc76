"""Array benchmark: utilization of every dataflow on a large GEMM, and the InterGrad interleave
against WS and OS run separately on an FC layer's backward pass. Every figure comes from a run of
the generated RTL under Verilator (results checked against numpy).

    python -m bpsa.tools.bench_array [--config paper16] [--gemm 256,256,256] \
        [--fc 256,64,256] [--json] [--page docs/results/bench_array.md]

``--fc O,Bt,I``: W is O x I, batch Bt. The separate baseline computes dA = W^T delta holding the
weights (ws) and G = delta a^T (os).
"""

import argparse
import json
import sys
import time

from bpsa.config import load_config
from bpsa.sim.simcmd import run_gemm
from bpsa.tools.results import current_command, write_page

__all__ = ["main", "markdown"]


def _dims(text):
    return tuple(int(x) for x in text.split(","))


def _fc_line(fc, o, i):
    """The interleaved FC backward against WS and OS run separately, or ``None``."""
    if not {"il", "ws", "os"} <= set(fc):
        return None
    sep_c = fc["ws"]["cycles"] + fc["os"]["cycles"]
    sep_r = fc["ws"]["total_reads"] + fc["os"]["total_reads"]
    sep_w = fc["ws"]["writes"] + fc["os"]["writes"]
    il = fc["il"]
    return (f"FC backward, interleaved vs ws + os separately: cycles {il['cycles']} vs "
            f"{sep_c} ({sep_c / il['cycles']:.2f}x), buffer reads {il['total_reads']} vs "
            f"{sep_r} ({sep_r / il['total_reads']:.2f}x), writes {il['writes']} vs "
            f"{sep_w}; with the in-place SGD update the separate flow would also read W "
            f"and G and write W ({2 * o * i + o * i} more accesses)")


def markdown(cfg, rows, fc_line=None):
    """The runs as a Markdown table (and the FC comparison's line)."""
    out = [f"Runs of the generated RTL of `{cfg.name}` ({cfg.rows}x{cfg.cols}, "
           f"int{cfg.operand_width}) under Verilator, each result checked against numpy.", "",
           "| run | cycles | utilization | buffer reads | writes | gated | wall (s) |",
           "|---|---:|---:|---:|---:|---:|---:|"]
    out += [f"| {r['label']} | {r['cycles']:,} | {r['utilization']:.3f} | "
            f"{r['total_reads']:,} | {r['writes']:,} | {r['gated']:,} | {r['wall_s']} |"
            for r in rows]
    if fc_line:
        out += ["", fc_line + "."]
    return "\n".join(out) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m bpsa.tools.bench_array", description=__doc__)
    p.add_argument("--config", default="paper16")
    p.add_argument("--gemm", default="256,256,256", type=_dims)
    p.add_argument("--fc", default="256,64,256", type=_dims)
    p.add_argument("--json", action="store_true")
    p.add_argument("--page", metavar="FILE.md", help="also write a results page (and JSON)")
    args = p.parse_args(argv)
    cfg = load_config(args.config)
    rows = []

    def run(label, flow, dims, **kw):
        t = time.time()
        r = run_gemm(cfg, flow, dims, **kw)
        r["label"], r["wall_s"] = label, round(time.time() - t, 1)
        rows.append(r)
        if not r["match"]:
            raise SystemExit(f"{label}: result differs from numpy")
        return r

    m, k, n = args.gemm
    for flow in ("os", "ws", "is"):
        if cfg.has(flow):
            run(f"gemm {m}x{k}x{n} {flow}", flow, args.gemm)
    o, bt, i = args.fc
    fc = {}
    if cfg.has("interleaved"):
        fc["il"] = run(f"fc {o}x{i} b{bt} interleaved", "interleaved", args.fc)
        fc["il_sgd"] = run(f"fc {o}x{i} b{bt} interleaved+sgd", "interleaved", args.fc,
                           sgd_shift=4)
    if cfg.has("ws") and cfg.has("os"):
        fc["ws"] = run(f"fc {o}x{i} b{bt} dA by ws", "ws", (i, o, bt))
        fc["os"] = run(f"fc {o}x{i} b{bt} G by os", "os", (o, bt, i))

    if args.json:
        print(json.dumps(rows, indent=1, sort_keys=True))
    else:
        print(f"config {cfg.name}: {cfg.rows}x{cfg.cols}, int{cfg.operand_width}")
        print(f"{'run':<34} {'cycles':>9} {'util':>7} {'reads':>10} {'writes':>9} "
              f"{'gated':>9} {'wall s':>7}")
        for r in rows:
            print(f"{r['label']:<34} {r['cycles']:>9} {r['utilization']:>7.3f} "
                  f"{r['total_reads']:>10} {r['writes']:>9} {r['gated']:>9} {r['wall_s']:>7}")
        if _fc_line(fc, o, i):
            print(_fc_line(fc, o, i))
    if args.page:
        command = (current_command() if argv is None
                   else " ".join(["python -m bpsa.tools.bench_array", *argv]))
        write_page(args.page, "Array dataflows and the interleave", command,
                   markdown(cfg, rows, _fc_line(fc, o, i)),
                   data={"config": cfg.name, "rows": rows})
        print(f"wrote {args.page}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
