"""Pooling benchmark: every layer of ``workloads/pool_layers.csv`` on the pooling unit.

    python -m bpsa.tools.bench_pool [--config paper16] [--rtl-config small] [--batch 1] \
        [--max-channels 4] [--max-size 24] [--no-rtl] [--json] [--plot FILE]

At full size the cycle model (:func:`bpsa.models.perf.pool_cycles`) gives each layer's
forward and backward cycles, DMA bytes and bound on ``--config``. On the RTL (``--rtl-config``,
under Verilator through the driver) each layer runs scaled down (at most ``--max-channels``
planes, inputs at most ``--max-size`` wide, the kernel, stride and padding kept), forward and
backward, checked against the golden model; the table gives the RTL's cycles next to the
model's for the same scaled shape.
"""

import argparse
import csv
import io
import json
import sys
from importlib import resources
from pathlib import Path

import numpy as np

from bpsa.config import load_config
from bpsa.models import golden
from bpsa.models.perf import pool_cycles
from bpsa.tools.results import current_command, write_page

__all__ = ["POOL_CSV", "load_pool_layers", "main", "markdown", "model_rows", "rtl_rows", "scaled"]

#: The pooling layers shipped with the package.
POOL_CSV = resources.files("bpsa") / "workloads" / "pool_layers.csv"


def load_pool_layers(path=None):
    """The rows of ``pool_layers.csv`` as dicts with integer fields."""
    text = POOL_CSV.read_text() if path is None else Path(path).read_text()
    rows = list(csv.DictReader(io.StringIO(text)))
    for row in rows:
        for k in ("C", "H", "W", "R", "S", "stride", "pad"):
            row[k] = int(row[k])
    return rows


def _args(row):
    kind = row["kind"]
    if kind == "global_avg":
        return kind, None, None, 0
    return kind, (row["R"], row["S"]), row["stride"], row["pad"]


def model_rows(config, rows, batch=1):
    """Full-size model figures of every layer: dicts with forward / backward cycles, bytes and
    bounds, or the reason the configuration refuses it."""
    out = []
    for row in rows:
        kind, k, st, pad = _args(row)
        rec = {"layer": f"{row['network']}.{row['layer']}", "kind": kind,
               "shape": f"{row['C']}x{row['H']}x{row['W']}",
               "window": "plane" if k is None else f"{k[0]}x{k[1]}/{st}" + (f" p{pad}" if pad else "")}
        try:
            for phase, name in (("pool_forward", "fwd"), ("pool_backward", "bwd")):
                m = pool_cycles(config, phase, n=batch, c=row["C"], h=row["H"], w=row["W"],
                                r=k[0] if k else row["H"], s=k[1] if k else row["W"],
                                stride=(st, st) if st else None, pad=(pad, pad), kind=kind,
                                requant=phase == "pool_forward")
                rec.update({f"{name}_cycles": m.cycles, f"{name}_bytes":
                            m.dma_read_bytes + m.dma_write_bytes, f"{name}_bound": m.bound,
                            f"{name}_runs": m.runs})
        except ValueError as e:
            rec["refused"] = str(e)
        out.append(rec)
    return out


def scaled(row, max_channels, max_size):
    """The layer with at most ``max_channels`` planes and inputs at most ``max_size`` wide
    (its window, stride and padding kept)."""
    kind, k, st, pad = _args(row)
    h, w = min(row["H"], max_size), min(row["W"], max_size)
    if k is not None:
        h, w = max(h, k[0]), max(w, k[1])
    return dict(row, C=min(row["C"], max_channels), H=h, W=w,
                R=k[0] if k else h, S=k[1] if k else w)


def rtl_rows(config, rows, *, max_channels=4, max_size=24, seed=1):
    """Every layer scaled down, forward and backward on the RTL (Verilator), checked against
    the golden model, with the model's cycles for the same shape."""
    from bpsa.sim.native import run_with_driver
    rng = np.random.default_rng(seed)
    shapes = [scaled(row, max_channels, max_size) for row in rows]

    async def body(drv, t):
        out = []
        for row, sc in zip(rows, shapes):
            kind, k, st, pad = _args(sc)
            x = rng.integers(-100, 101, (1, sc["C"], sc["H"], sc["W"]))
            args = {} if k is None else {"kernel": k, "stride": st, "padding": pad}
            rec = {"layer": f"{row['network']}.{row['layer']}",
                   "scaled": f"{sc['C']}x{sc['H']}x{sc['W']}"}
            y = await drv.pool(x, kind, **args)
            want = golden.pool2d(x, kind, k, st, pad)
            rec["fwd_match"] = bool(np.array_equal(y, want))
            rec["fwd_rtl"] = drv.counters["busy_cycles"]
            dy = rng.integers(-100, 101, want.shape)
            dx = await drv.pool_backward(dy, x, kind, **args)
            rec["bwd_match"] = bool(np.array_equal(
                dx, golden.pool2d_backward(dy, x, kind, k, st, pad)))
            rec["bwd_rtl"] = drv.counters["busy_cycles"]
            for phase, name in (("pool_forward", "fwd"), ("pool_backward", "bwd")):
                m = pool_cycles(config, phase, n=1, c=sc["C"], h=sc["H"], w=sc["W"],
                                r=sc["R"], s=sc["S"],
                                stride=None if k is None else (st, st),
                                pad=(pad, pad), kind=kind, requant=phase == "pool_forward")
                rec[f"{name}_model"] = m.cycles
                rec[f"{name}_error"] = m.cycles / rec[f"{name}_rtl"] - 1
            out.append(rec)
        return out

    return run_with_driver(config, body, mem_bytes=1 << 22, seed=seed)


def plot(model, path):
    """Forward and backward cycles of every layer at full size (log scale)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rows = [r for r in model if "refused" not in r]
    fig, ax = plt.subplots(figsize=(9, 4.2))
    xs = np.arange(len(rows))
    ax.bar(xs - 0.2, [r["fwd_cycles"] for r in rows], 0.4, label="forward")
    ax.bar(xs + 0.2, [r["bwd_cycles"] for r in rows], 0.4, label="backward")
    ax.set_yscale("log")
    ax.set_xticks(xs, [r["layer"] for r in rows], rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("cycles (batch 1)")
    ax.set_title("Pooling layers on the pooling unit (cycle model)")
    ax.legend()
    fig.tight_layout()
    plt.rcParams["svg.hashsalt"] = "bpsa"
    fig.savefig(path, metadata={"Date": None} if str(path).endswith(".svg") else None)
    plt.close(fig)


def markdown(model, rtl, *, config, rtl_config, batch=1):
    """The tables as Markdown: the full-size layers on the cycle model (``model``) and, when
    ``rtl`` has rows, the scaled layers on the RTL."""
    out = [f"Full size on `{config}` (cycle model, batch {batch}):", "",
           "| layer | kind | C x H x W | window | forward cycles | backward cycles | "
           "bytes fwd / bwd | bound fwd / bwd |",
           "|---|---|---|---|---:|---:|---:|---|"]
    for r in model:
        if "refused" in r:
            out.append(f"| {r['layer']} | {r['kind']} | {r['shape']} | {r['window']} | "
                       f"refused: {r['refused']} | | | |")
            continue
        out.append(f"| {r['layer']} | {r['kind']} | {r['shape']} | {r['window']} | "
                   f"{r['fwd_cycles']:,} | {r['bwd_cycles']:,} | {r['fwd_bytes']:,} / "
                   f"{r['bwd_bytes']:,} | {r['fwd_bound']} / {r['bwd_bound']} |")
    if rtl:
        out += ["", f"Scaled on the RTL (`{rtl_config}`, Verilator; model error = model / "
                    "RTL - 1):", "",
                "| layer | scaled C x H x W | match | forward RTL | model error | backward RTL "
                "| model error |",
                "|---|---|---|---:|---:|---:|---:|"]
        for r in rtl:
            out.append(f"| {r['layer']} | {r['scaled']} | {r['fwd_match'] and r['bwd_match']} "
                       f"| {r['fwd_rtl']:,} | {r['fwd_error']:+.1%} | {r['bwd_rtl']:,} | "
                       f"{r['bwd_error']:+.1%} |")
    return "\n".join(out) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m bpsa.tools.bench_pool",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="paper16", help="configuration of the full-size model")
    ap.add_argument("--rtl-config", default="small", help="configuration run on the RTL")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--max-channels", type=int, default=4)
    ap.add_argument("--max-size", type=int, default=24)
    ap.add_argument("--no-rtl", action="store_true", help="the model only")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--plot", metavar="FILE.png")
    ap.add_argument("--page", metavar="FILE.md",
                    help="also write the tables as a results page (and its JSON twin)")
    args = ap.parse_args(argv)
    rows = load_pool_layers()
    model = model_rows(load_config(args.config), rows, args.batch)
    rtl = [] if args.no_rtl else rtl_rows(load_config(args.rtl_config), rows,
                                           max_channels=args.max_channels,
                                           max_size=args.max_size)
    if args.plot:
        plot(model, args.plot)
    if args.json:
        print(json.dumps({"model": model, "rtl": rtl}, indent=1))
    else:
        print(markdown(model, rtl, config=args.config, rtl_config=args.rtl_config,
                       batch=args.batch), end="")
    if args.page:
        command = (current_command() if argv is None
                   else " ".join(["python -m bpsa.tools.bench_pool", *argv]))
        write_page(args.page, "Pooling layers", command,
                   markdown(model, rtl, config=args.config, rtl_config=args.rtl_config,
                            batch=args.batch),
                   data={"config": args.config, "rtl_config": args.rtl_config,
                         "batch": args.batch, "model": model, "rtl": rtl})
        print(f"wrote {args.page}")
    ok = all(r["fwd_match"] and r["bwd_match"] for r in rtl)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
