"""Whole-accelerator benchmark: forward, loss and gradient of scaled-down stride >= 2 layers
through the accelerator top under Verilator (driver, AXI RAM, DMA, tiling controller).

    python -m bpsa.tools.bench_accelerator [--config paper16] [--max-channels 32] [--max-size 32]
                                    [--batch 1] [--only NAME,..] [--all-strides]
                                    [--phases forward,loss,gradient]
                                    [--pauses] [--json]

The layers are the stride >= 2 layers (every layer with ``--all-strides``) of
``src/bpsa/workloads/conv_layers.csv`` with channels
capped at ``--max-channels`` and the input at ``--max-size`` (batch ``--batch``); the
controller tiles them over the buffers. (``bpsa.tools.bench_backward`` compares BP-im2col with the
baseline mode at engine level, on shapes small enough for the baseline's zero-spaced copies.) Every
result is checked against the golden model. Per layer and phase it prints cycles, array utilization
(useful MACs over ``cycles * rows * cols``), the cycles over the layer's roofline bound
(:func:`bpsa.models.perf.roofline_cycles`), DMA bytes read and written, buffer words (A, B, P:
reads + writes), the DMA busy cycles, how much of them overlapped compute, and the Verilator speed.
With ``--baseline``, loss and gradient also run the traditional way (rows marked ``*``): the driver
builds the zero-inserted / zero-padded tensors in memory and the accelerator runs them as
forward convolutions, zeros and all.
"""

import argparse
import csv
import json
import sys
import time

from bpsa.config import load_config
from bpsa.spec.layer import ConvLayer
from bpsa.tools.zero_report import DEFAULT_CSV
from bpsa.sim.accel_run import check_job, job, run_jobs, summary

PHASES = ("forward", "loss", "gradient")


def accel_layers(cfg, csv_path, max_channels, max_size, batch, baseline=False, *,
                 all_strides=False, phases=PHASES):
    """The stride >= 2 layers (every layer with ``all_strides``), capped, that the
    accelerator runs in all of ``phases``: a list of (layer, [source layer names]), identical
    shapes once."""
    out, seen = [], {}
    with open(csv_path) as f:
        rows = list(csv.DictReader(f))
    for row in rows:
        if int(row["stride"]) < 2 and not all_strides:
            continue
        R, S, s, p, d = (int(row[k]) for k in ("R", "S", "stride", "pad", "dilation"))
        c, k = min(int(row["C"]), max_channels), min(int(row["K"]), max_channels)
        h = min(int(row["H"]), max_size)
        layer = ConvLayer.conv(batch, c, h, h, k, R, S, stride=s, pad=p, dil=d)
        try:
            for phase in phases:
                check_job(cfg, layer, phase)
            if baseline:
                for phase in phases:
                    if phase == "forward":
                        continue
                    check_job(cfg, layer, phase, baseline=True)
        except ValueError:
            continue
        name = f"{row['network']}.{row['layer']}"
        if layer.text() in seen:
            seen[layer.text()][1].append(name)
        else:
            seen[layer.text()] = (layer, [name])
            out.append(seen[layer.text()])
    return out


def _roofline(cfg, layer, phase):
    """The layer's roofline bound in cycles (:func:`bpsa.models.perf.roofline_cycles`)."""
    from bpsa.models.perf import roofline_cycles
    oh, ow = layer.out_hw
    macs = layer.batch * layer.out_channels * oh * ow * layer.crs
    return roofline_cycles(cfg, phase, layer, macs=macs)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", default="paper16")
    ap.add_argument("--csv", default=str(DEFAULT_CSV))
    ap.add_argument("--max-channels", type=int, default=32)
    ap.add_argument("--max-size", type=int, default=32)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--only", default=None, metavar="NAME,NAME",
                    help="run only the layers whose source names contain one of these")
    ap.add_argument("--pauses", action="store_true",
                    help="random ready/valid pauses on every AXI channel of the memory")
    ap.add_argument("--baseline", action="store_true",
                    help="also run loss and gradient the traditional way (zero-spaced tensors "
                         "built by the driver, run as forward convolutions) for comparison")
    ap.add_argument("--all-strides", action="store_true",
                    help="every layer of the workload, not only the stride >= 2 ones")
    ap.add_argument("--phases", default=",".join(PHASES), metavar="PHASE,PHASE",
                    help=f"phases to run (of {', '.join(PHASES)}; default all)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    cfg = load_config(args.config)
    phases = tuple(args.phases.split(","))
    if not phases or any(p not in PHASES for p in phases):
        ap.error(f"--phases must name some of {', '.join(PHASES)}, not {args.phases!r}")
    layers = accel_layers(cfg, args.csv, args.max_channels, args.max_size, args.batch,
                          args.baseline, all_strides=args.all_strides, phases=phases)
    if args.only:
        keys = args.only.split(",")
        layers = [(lay, names) for lay, names in layers
                  if any(k in n for k in keys for n in names)]
    kinds = [(p, False) for p in phases]
    if args.baseline:
        kinds += [(p, True) for p in phases if p != "forward"]
    jobs = [job(layer, p, seed=i + 1, pauses=args.pauses, baseline=b)
            for i, (layer, _) in enumerate(layers) for p, b in kinds]
    t0 = time.perf_counter()
    results = run_jobs(cfg, jobs, tag="bench", progress=not args.json)
    wall = time.perf_counter() - t0
    rows = []
    per = len(kinds)
    for (layer, names), i in zip(layers, range(0, len(results), per)):
        for res in results[i:i + per]:
            s = summary(cfg, res)
            s.update(layer=layer.text(), sources=names, sim_cycles=res["sim_cycles"],
                     sim_seconds=res["sim_seconds"])
            s["roofline_cycles"] = _roofline(cfg, layer, s["phase"])
            s["over_roofline"] = s["cycles"] / s["roofline_cycles"]
            rows.append(s)
    total_cycles = sum(r["sim_cycles"] for r in rows)
    total_sim = sum(r["sim_seconds"] for r in rows)
    out = {"config": cfg.name, "rows": rows, "wall_seconds": wall,
           "verilator_cycles_per_second": total_cycles / max(total_sim, 1e-9)}
    if args.json:
        print(json.dumps(out, indent=1))
    else:
        print(f"# {cfg.name}: {len(layers)} layers, {len(rows)} runs, all checked against the "
              f"golden model")
        print(f"{'layer':<44} {'phase':<9} {'cycles':>8} {'util':>6} {'x roof':>6} {'dma_rd_B':>9} "
              f"{'dma_wr_B':>9} {'bufA':>7} {'bufB':>7} {'bufP':>7} {'dma_cyc':>8} "
              f"{'overlap':>7}")
        for r in rows:
            phase = r["phase"] + ("*" if r["baseline"] else "")
            print(f"{r['layer']:<44} {phase:<9} {r['cycles']:>8} "
                  f"{r['utilization']:>6.3f} {r['over_roofline']:>6.2f} {r['dma_read_bytes']:>9} "
                  f"{r['dma_write_bytes']:>9} {r['buf_a_words']:>7} {r['buf_b_words']:>7} "
                  f"{r['buf_p_words']:>7} {r['dma_busy_cycles']:>8} "
                  f"{r['dma_overlap']:>7.3f}")
        for p, b in kinds:
            sel = [r for r in rows if r["phase"] == p and r["baseline"] == b]
            dma = sum(r["dma_busy_cycles"] for r in sel)
            cyc = sum(r["cycles"] for r in sel)
            rd = sum(r["dma_read_bytes"] for r in sel)
            hidden = sum(r["overlap_cycles"] for r in sel)
            p = p + (" (baseline)" if b else "")
            print(f"{p}: {cyc} cycles in all, {rd} bytes read, DMA busy {dma} ({dma / max(cyc, 1):.1%} of the "
                  f"cycles, {hidden / max(dma, 1):.1%} of it hidden behind compute), mean "
                  f"utilization "
                  f"{sum(r['utilization'] for r in sel) / max(len(sel), 1):.3f}")
        print(f"Verilator: {out['verilator_cycles_per_second']:.0f} simulated cycles per second "
              f"(testbench included); wall time {wall:.0f} s")
    return 0 if all(r["match"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
