"""Forward front ends compared: the data feeder and the channel-first implicit im2col, on
every layer of ``workloads/conv_layers.csv``, by the cycle model.

    python -m bpsa.tools.bench_frontends [--config paper16] [--batch 1] [--json] \
        [--plot FILE.png] [--stride-layer NETWORK.LAYER]

For every layer at full size (:func:`bpsa.models.perf.layer_cycles` with ``frontend`` =
``feeder`` and ``channel_first``): cycles, utilization (the layer's MACs over ``rows x cols x
cycles``), X SRAM words read (feeder: words of ``feeder_bus_width`` operands; channel-first:
bank words of one operand), DMA bytes, the cycles the array waits for loads, and which front
end wins by how much. A layer whose rows are too wide for the controller is run as the
driver runs it, in column strips (the model sums them); a layer neither runs gets the
refusal's reason.

Two claims of the channel-first paper (Zhou et al.) on the model:
    *multi-tile*: on the layers with ``2 C <= rows`` (the ``C = 3`` first layers) the
    channel-first front end with multi-tile (``min(rows // C, S)`` taps a tile) against the
    same without (one tap a tile: ``layer_cycles(..., multi_tile=False)``).
    *stride insensitivity*: one layer (``--stride-layer``) at strides 1..4 with the same
    output size (the input grows with the stride), both front ends.

``--rtl-config small``: every layer also scaled down (at most ``--max-channels`` input and
output channels, inputs at most ``--max-size`` wide; kernel, stride, padding and dilation
kept) through the whole accelerator under Verilator on both front ends, checked against the
golden model, with the RTL's counters and the model's error on the same shape.
"""

import argparse
import csv
import io
import json
import sys
from importlib import resources
from pathlib import Path

from bpsa.config import load_config
from bpsa.models.perf import layer_cycles
from bpsa.spec.layer import ConvLayer, out_size
from bpsa.tools.results import current_command, write_page

__all__ = ["CONV_CSV", "FRONTENDS", "STRIDE_LAYER", "frontend_figures", "load_conv_layers",
           "main", "markdown", "model_rows", "multi_tile_rows", "plot", "row_layer",
           "rtl_markdown", "rtl_rows", "scaled", "stride_rows"]

#: The convolution layers shipped with the package (the shared workload).
CONV_CSV = resources.files("bpsa") / "workloads" / "conv_layers.csv"

#: The forward front ends, in table order.
FRONTENDS = ("feeder", "channel_first")

#: The default layer of the stride table: a 3 x 3 layer of 256 channels, 14 x 14 outputs.
STRIDE_LAYER = "resnet50.layer3.0.conv2"

_INT_FIELDS = ("C", "H", "W", "K", "R", "S", "stride", "pad", "dilation")
_SHORT = {"feeder": "F", "channel_first": "CF"}


def load_conv_layers(path=None):
    """The rows of ``conv_layers.csv`` as dicts with integer fields and ``name``
    (``network.layer``)."""
    text = CONV_CSV.read_text() if path is None else Path(path).read_text()
    rows = list(csv.DictReader(io.StringIO(text)))
    for row in rows:
        for k in _INT_FIELDS:
            row[k] = int(row[k])
        row["name"] = f"{row['network']}.{row['layer']}"
    return rows


def row_layer(row, batch=1):
    """The :class:`bpsa.spec.layer.ConvLayer` of a workload row, ``batch`` images."""
    return ConvLayer.conv(batch, row["C"], row["H"], row["W"], row["K"], row["R"], row["S"],
                          row["stride"], row["pad"], row["dilation"])


def _figures(m):
    return {"cycles": m.cycles, "compute_cycles": m.compute_cycles, "macs": m.macs,
            "utilization": m.utilization, "x_sram_words": m.x_sram_words,
            "x_word_operands": m.x_word_operands,
            "x_sram_operands": m.x_sram_words * m.x_word_operands,
            "dma_read_bytes": m.dma_read_bytes, "dma_write_bytes": m.dma_write_bytes,
            "dma_bytes": m.dma_read_bytes + m.dma_write_bytes,
            "load_wait_cycles": m.load_wait_cycles, "bound": m.bound, "runs": m.runs,
            "tiles": m.tiles, "strips": m.strips if m.strips > 1 else 0}


def frontend_figures(config, layer, frontend, *, multi_tile=True):
    """The model's figures of ``layer`` (a :class:`bpsa.spec.layer.ConvLayer`, as
    :func:`row_layer` gives it) on ``frontend``: a
    dict (:func:`bpsa.models.perf.layer_cycles`' cycles, utilization, X SRAM words and
    operands, DMA bytes, load waits, bound, runs, tiles; ``strips``: 0, or the column strips
    the driver cuts a layer too wide for the controller into, whose figures the model sums),
    or ``{"refused": reason}``."""
    kw = {"frontend": frontend}
    if frontend == "channel_first":
        kw["multi_tile"] = multi_tile
    try:
        return _figures(layer_cycles(config, "forward", layer, **kw))
    except ValueError as e:
        return {"refused": str(e)}


def _compare(rec):
    """Winner (fewer cycles) and by how much (the other's cycles over the winner's)."""
    f, c = rec["feeder"], rec["channel_first"]
    if "refused" in f or "refused" in c:
        rec["winner"] = None if "refused" in f and "refused" in c else (
            "channel_first" if "refused" in f else "feeder")
        rec["by"] = None
        return rec
    win, lose = (c, f) if c["cycles"] < f["cycles"] else (f, c)
    rec["winner"] = "channel_first" if win is c else "feeder"
    rec["by"] = lose["cycles"] / win["cycles"]
    return rec


def _shape(row):
    k = f"{row['R']}x{row['S']}/{row['stride']}"
    if row["pad"]:
        k += f" p{row['pad']}"
    if row["dilation"] != 1:
        k += f" d{row['dilation']}"
    return f"{row['C']}x{row['H']}x{row['W']} -> {row['K']}, {k}"


def model_rows(config, rows, batch=1):
    """Every layer of ``rows`` (:func:`load_conv_layers`) on both front ends: dicts with
    ``layer``, ``shape``, ``feeder`` and ``channel_first`` (:func:`frontend_figures`),
    ``winner`` and ``by``."""
    out = []
    for row in rows:
        layer = row_layer(row, batch)
        rec = {"layer": row["name"], "shape": _shape(row)}
        for fe in FRONTENDS:
            rec[fe] = frontend_figures(config, layer, fe)
        out.append(_compare(rec))
    return out


def multi_tile_rows(config, rows, batch=1):
    """The layers of ``rows`` where the channel-first engine applies multi-tile (``2 C <=
    rows``), with and without it: dicts with ``layer``, ``shape``, ``taps`` (a tile's),
    ``with`` / ``without`` (:func:`frontend_figures`) and ``gain`` (cycles without over
    with)."""
    out = []
    for row in rows:
        if 2 * row["C"] > config.rows:
            continue
        layer = row_layer(row, batch)
        rec = {"layer": row["name"], "shape": _shape(row),
               "taps": min(config.rows // row["C"], row["S"]),
               "with": frontend_figures(config, layer, "channel_first"),
               "without": frontend_figures(config, layer, "channel_first", multi_tile=False)}
        ok = "refused" not in rec["with"] and "refused" not in rec["without"]
        rec["gain"] = rec["without"]["cycles"] / rec["with"]["cycles"] if ok else None
        out.append(rec)
    return out


def stride_rows(config, row, strides=(1, 2, 3, 4), batch=1):
    """``row`` at each of ``strides`` with the output size it has (``OH x OW``; the input
    ``(O - 1) s + d (R - 1) + 1 - 2 p`` rows / columns): dicts with ``layer`` (its name),
    ``stride``, ``h``, ``w``, ``out``, ``feeder`` and ``channel_first``
    (:func:`frontend_figures`)."""
    st, p, d = row["stride"], row["pad"], row["dilation"]
    oh = out_size(row["H"], row["R"], st, p, d)
    ow = out_size(row["W"], row["S"], st, p, d)
    out = []
    for s in strides:
        h = (oh - 1) * s + d * (row["R"] - 1) + 1 - 2 * p
        w = (ow - 1) * s + d * (row["S"] - 1) + 1 - 2 * p
        lay = dict(row, H=h, W=w, stride=s)
        assert out_size(h, row["R"], s, p, d) == oh and out_size(w, row["S"], s, p, d) == ow
        layer = row_layer(lay, batch)
        out.append({"layer": row["name"], "stride": s, "h": h, "w": w, "out": (oh, ow),
                    **{fe: frontend_figures(config, layer, fe) for fe in FRONTENDS}})
    return out


def _n(v):
    return f"{v:,}"


def _pair(rec, key, fmt=_n):
    return " / ".join("-" if "refused" in rec[fe] else fmt(rec[fe][key]) for fe in FRONTENDS)


def _cyc(f):
    s = _n(f["cycles"])
    return s + (f" ({f['strips']} strips)" if f.get("strips") else "")


def markdown(config, model, multi, stride, *, batch=1):
    """The three tables as Markdown."""
    B = config.feeder_bus_width
    out = [f"Forward front ends on `{config.name}` ({config.rows}x{config.cols}), cycle model, "
           f"batch {batch}. F = data feeder, CF = channel-first. X SRAM words: the feeder's "
           f"are {B} operands wide, the channel-first banks' one operand (operands CF / F: "
           f"the operands those words hold, channel-first's over the feeder's). Load wait: "
           f"cycles the array waits for loads.", "",
           "| layer | C x H x W -> K, kernel | F cycles | CF cycles | winner | util F / CF | "
           "X SRAM words F / CF | operands CF / F | DMA bytes F / CF | load wait F / CF | "
           "bound F / CF |",
           "|---|---|---:|---:|---|---:|---:|---:|---:|---:|---|"]
    for r in model:
        f, c = r["feeder"], r["channel_first"]
        cells = [r["layer"], r["shape"]]
        for fe in (f, c):
            cells.append(f"refused: {fe['refused']}" if "refused" in fe else _cyc(fe))
        if r["by"] is not None:
            cells.append(f"{_SHORT[r['winner']]} {r['by']:.2f}x")
        else:
            cells.append(f"{_SHORT[r['winner']]} (only)" if r["winner"] else "-")
        ratio = "-" if r["by"] is None else \
            f"{c['x_sram_operands'] / f['x_sram_operands']:.2f}x"
        cells += [_pair(r, "utilization", lambda v: f"{v:.2f}"), _pair(r, "x_sram_words"),
                  ratio, _pair(r, "dma_bytes"), _pair(r, "load_wait_cycles"),
                  _pair(r, "bound", str)]
        out.append("| " + " | ".join(cells) + " |")
    runs = [r for r in model if r["by"] is not None]
    wins = sum(r["winner"] == "channel_first" for r in runs)
    if runs:
        tot = {fe: sum(r[fe]["cycles"] for r in runs) for fe in FRONTENDS}
        util = {fe: sum(r[fe]["utilization"] for r in runs) / len(runs) for fe in FRONTENDS}
        out += ["", f"Channel-first wins {wins} of {len(runs)} layers both run; over them "
                    f"the feeder takes {_n(tot['feeder'])} cycles, channel-first "
                    f"{_n(tot['channel_first'])} "
                    f"({tot['feeder'] / tot['channel_first']:.2f}x). Mean utilization over "
                    f"them {util['feeder']:.2f} (feeder) and {util['channel_first']:.2f} "
                    f"(channel-first)."]
    out += ["", f"Multi-tile (channel-first, layers with 2 C <= rows = {config.rows}): with "
                "and without.", "",
            "| layer | C x H x W -> K, kernel | taps a tile | tiles with / without | "
            "cycles with | cycles without | gain | compute with / without |",
            "|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in multi:
        w, wo = r["with"], r["without"]
        if r["gain"] is None:
            why = w.get("refused") or wo.get("refused")
            out.append(f"| {r['layer']} | {r['shape']} | {r['taps']} | refused: {why} | | | | |")
            continue
        out.append(f"| {r['layer']} | {r['shape']} | {r['taps']} | {_n(w['tiles'])} / "
                   f"{_n(wo['tiles'])} | {_cyc(w)} | {_cyc(wo)} | {r['gain']:.2f}x | "
                   f"{_n(w['compute_cycles'])} / {_n(wo['compute_cycles'])} |")
    if stride:
        oh, ow = stride[0]["out"]
        out += ["", f"Stride insensitivity: {stride[0]['layer']}'s kernel and channels, "
                    f"{oh} x {ow} outputs, at each stride (the input grows with it).", "",
                "| stride | input H x W | F cycles | CF cycles | F compute | CF compute | "
                "X SRAM words F / CF | DMA bytes F / CF |",
                "|---:|---|---:|---:|---:|---:|---:|---:|"]
        for r in stride:
            cells = [str(r["stride"]), f"{r['h']} x {r['w']}"]
            for key in ("cycles", "compute_cycles"):
                for fe in FRONTENDS:
                    f = r[fe]
                    cells.append("refused" if "refused" in f else
                                 (_cyc(f) if key == "cycles" else _n(f[key])))
            cells += [_pair(r, "x_sram_words"), _pair(r, "dma_bytes")]
            out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def plot(config, model, path, *, batch=1):
    """Cycles (log scale) and utilization of both front ends on every layer that runs."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    plt.rcParams["svg.hashsalt"] = "bpsa"
    rows = [r for r in model if any("refused" not in r[fe] for fe in FRONTENDS)]
    xs = np.arange(len(rows))
    fig, (ax, au) = plt.subplots(2, 1, figsize=(max(9.0, 0.33 * len(rows) + 2), 7.5),
                                 sharex=True)
    for i, (fe, label) in enumerate((("feeder", "data feeder (OS)"),
                                     ("channel_first", "channel-first (WS)"))):
        ys = [r[fe]["cycles"] if "refused" not in r[fe] else 0 for r in rows]
        us = [r[fe]["utilization"] if "refused" not in r[fe] else 0 for r in rows]
        ax.bar(xs + (i - 0.5) * 0.4, ys, 0.4, label=label)
        au.bar(xs + (i - 0.5) * 0.4, us, 0.4, label=label)
    ax.set_yscale("log")
    ax.set_ylabel(f"cycles (batch {batch})")
    ax.set_title(f"Forward front ends on {config.name} ({config.rows}x{config.cols}), "
                 f"cycle model")
    ax.legend(fontsize=8)
    au.set_ylabel("utilization")
    au.set_ylim(0, 1)
    labels = [r["layer"] + (" *" if any(r[fe].get("strips") for fe in FRONTENDS) else "")
              for r in rows]
    au.set_xticks(xs, labels, rotation=60, ha="right", fontsize=7)
    if labels != [r["layer"] for r in rows]:
        au.set_xlabel("* in column strips (one descriptor each; the layer alone does not fit)",
                      fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110, metadata={"Date": None} if str(path).endswith(".svg")
                else None)
    plt.close(fig)


def scaled(row, max_channels=8, max_size=24):
    """The layer with at most ``max_channels`` input and output channels and an input at
    most ``max_size`` wide (kernel, stride, padding and dilation kept; the input no smaller
    than the dilated kernel needs)."""
    def side(size, k):
        span = row["dilation"] * (k - 1) + 1
        return max(min(size, max_size), span - 2 * row["pad"], 1)
    return dict(row, C=min(row["C"], max_channels), K=min(row["K"], max_channels),
                H=side(row["H"], row["R"]), W=side(row["W"], row["S"]))


def rtl_rows(config, rows, *, max_channels=8, max_size=24, seed=1):
    """Every layer scaled down (:func:`scaled`) through the whole accelerator under Verilator
    on both front ends, checked against the golden model: per front end the RTL's cycles,
    utilization, X SRAM words read (``buf_a_reads``: the feeder's words of
    ``feeder_bus_width`` operands, the channel-first banks' words of one), DMA bytes, the
    feeder's stall cycles, the cycles no engine computed, and the model's error on the same
    shape (:func:`frontend_figures`)."""
    import numpy as np

    from bpsa.models import golden
    from bpsa.spec.numeric import wrap_array
    from bpsa.sim.native import run_with_driver
    rng = np.random.default_rng(seed)
    shapes = [scaled(row, max_channels, max_size) for row in rows]

    async def body(drv, t):
        out = []
        for row, sc in zip(rows, shapes):
            a = row_layer(sc)
            x = rng.integers(-128, 128, (1, sc["C"], sc["H"], sc["W"]))
            w = rng.integers(-128, 128, (sc["K"], sc["C"], sc["R"], sc["S"]))
            want = wrap_array(golden.conv2d(x, w, a.stride, a.pad, a.dil), config.acc_width)
            rec = {"layer": row["name"], "scaled": _shape(sc)}
            macs = int(want.size) * sc["C"] * sc["R"] * sc["S"]     # the layer's, dense
            for fe in FRONTENDS:
                y = await drv.forward(x, w, a.stride, a.pad, a.dil, frontend=fe)
                c = drv.counters
                m = frontend_figures(config, a, fe)
                rec[fe] = {"match": bool(np.array_equal(y, want)),
                           "cycles": c["busy_cycles"], "compute_cycles": c["compute_cycles"],
                           "utilization": macs / (config.rows * config.cols
                                                  * c["busy_cycles"]),
                           "x_sram_words": c["buf_a_reads"],
                           "dma_bytes": c["dma_read_bytes"] + c["dma_write_bytes"],
                           "stall_cycles": c["stall_cycles"],
                           "idle_cycles": c["busy_cycles"] - c["compute_cycles"],
                           "model_cycles": m.get("cycles"),
                           "model_error": (m["cycles"] / c["busy_cycles"] - 1
                                           if "cycles" in m else None),
                           "model_dma_bytes": m.get("dma_bytes")}
            out.append(_compare(rec))
        return out

    return run_with_driver(config, body, mem_bytes=1 << 22, seed=seed)


def rtl_markdown(config, rtl):
    """The RTL table (Markdown lines)."""
    lines = [f"scaled on the RTL ({config.name}, {config.rows} x {config.cols}, Verilator, "
             f"batch 1; model error = model / RTL - 1):", "",
             "| layer | scaled | match | F cycles | CF cycles | winner | util F / CF | "
             "X SRAM words F / CF | DMA bytes F / CF | stalls F / CF | idle F / CF | "
             "model error F / CF |",
             "|---|---|---|---:|---:|---|---:|---:|---:|---:|---:|---:|"]
    for r in rtl:
        f, c = r["feeder"], r["channel_first"]
        win = f"{_SHORT[r['winner']]} {r['by']:.2f}x"
        lines.append(
            f"| {r['layer']} | {r['scaled']} | {f['match'] and c['match']} | "
            f"{f['cycles']:,} | {c['cycles']:,} | {win} | "
            f"{f['utilization']:.2f} / {c['utilization']:.2f} | "
            f"{f['x_sram_words']:,} / {c['x_sram_words']:,} | "
            f"{f['dma_bytes']:,} / {c['dma_bytes']:,} | "
            f"{f['stall_cycles']:,} / {c['stall_cycles']:,} | "
            f"{f['idle_cycles']:,} / {c['idle_cycles']:,} | "
            f"{f['model_error']:+.1%} / {c['model_error']:+.1%} |")
    return lines


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m bpsa.tools.bench_frontends",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="paper16", help="configuration (default: paper16)")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--stride-layer", default=STRIDE_LAYER, metavar="NETWORK.LAYER",
                    help=f"the layer of the stride table (default: {STRIDE_LAYER})")
    ap.add_argument("--rtl-config", default=None, metavar="PRESET",
                    help="also run every layer scaled down on the RTL of this configuration "
                         "(Verilator; e.g. small)")
    ap.add_argument("--max-channels", type=int, default=8)
    ap.add_argument("--max-size", type=int, default=24)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--plot", metavar="FILE.png")
    ap.add_argument("--page", metavar="FILE.md",
                    help="also write the tables as a results page (and its JSON twin)")
    args = ap.parse_args(argv)
    config = load_config(args.config)
    if not config.has_frontend("channel_first"):
        print(f"configuration {config.name!r} does not generate the channel-first front end "
              f"(forward_frontends: {list(config.forward_frontends)})", file=sys.stderr)
        return 2
    rows = load_conv_layers()
    by_name = {r["name"]: r for r in rows}
    if args.stride_layer not in by_name:
        print(f"--stride-layer {args.stride_layer!r} is not a workload layer (one of "
              f"{', '.join(by_name)})", file=sys.stderr)
        return 2
    model = model_rows(config, rows, args.batch)
    multi = multi_tile_rows(config, rows, args.batch)
    stride = stride_rows(config, by_name[args.stride_layer], batch=args.batch)
    rtl, rtl_config = [], None
    if args.rtl_config:
        rtl_config = load_config(args.rtl_config)
        if not rtl_config.has_frontend("channel_first"):
            print(f"--rtl-config {rtl_config.name!r} does not generate the channel-first front "
                  f"end", file=sys.stderr)
            return 2
        rtl = rtl_rows(rtl_config, rows, max_channels=args.max_channels,
                       max_size=args.max_size)
    if args.plot:
        plot(config, model, args.plot, batch=args.batch)
    data = {"config": config.name, "batch": args.batch, "layers": model, "multi_tile": multi,
            "stride_layer": args.stride_layer, "stride": stride, "rtl": rtl}
    text = markdown(config, model, multi, stride, batch=args.batch) + (
        "\n" + "\n".join(rtl_markdown(rtl_config, rtl)) + "\n" if rtl else "")
    if args.json:
        print(json.dumps(data, indent=1))
    else:
        print(text, end="")
    if args.page:
        command = (current_command() if argv is None
                   else " ".join(["python -m bpsa.tools.bench_frontends", *argv]))
        write_page(args.page, "Forward front ends", command, text, data=data)
        print(f"wrote {args.page}")
    ok = all(r[fe]["match"] for r in rtl for fe in FRONTENDS)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
