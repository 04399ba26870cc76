"""How far whole training steps are from their roofline (``make roofline``,
``python -m bpsa.tools.roofline``): the cycle model's step (:func:`bpsa.models.network_perf.
network_step`, the faster forward front end per layer) of each network on one configuration at
several DMA bus widths, against the sum of its rows' roofline cycles (``max(MACs / (rows
cols), compulsory bytes / bus bytes a cycle)``, :func:`bpsa.models.perf.roofline_cycles`), per
phase, and its DMA bytes against the compulsory traffic (every input read once, every output
written once); where the cycles over the roofline go (:func:`over_parts`: overlap, compute,
DMA) and the layers furthest over; and the zero-free loss and gradient of 3 x 3 stride-2
layers on small planes (:func:`small_planes`), where a stride leaves the least work a pixel.
Writes ``roofline.md`` and ``roofline.json`` (``docs/results/``, stamped by
:func:`bpsa.tools.results.write_page`).
"""

import argparse
import os
import time
from pathlib import Path

from bpsa.config import load_config
from bpsa.models.network_perf import PHASES, network_step
from bpsa.models.perf import layer_cycles
from bpsa.spec.layer import ConvLayer
from bpsa.spec.network import load_network
from bpsa.tools.results import current_command, write_page

__all__ = ["NETWORKS", "PLANES", "TOP", "network_roofline", "over_parts", "roofline_report",
           "small_planes"]

#: The networks of the table (:func:`bpsa.spec.network.network_names`, not the digits CNN).
NETWORKS = ("resnet50", "resnet18", "vgg16", "alexnet", "squeezenet1_1")


def network_roofline(config, network, *, batch, jobs=1):
    """The figures of one network's step on ``config``: cycles, the summed roofline and their
    ratio (in all and per phase), DMA bytes read and written and the compulsory bytes,
    utilization (MACs over rows x cols x cycles); ``refused``: the rows the configuration
    cannot run (with the reason), which the figures leave out."""
    step = network_step(config, load_network(network), batch=batch, frontend="best",
                        jobs=jobs)
    ran = [r for r in step.rows if r["status"] == "run"]
    out = {"network": network, "bus_bits": config.dma_data_width, "batch": batch,
           "cycles": step.totals["cycles"],
           "roofline_cycles": sum(r["roofline_cycles"] for r in ran),
           "dma_bytes": step.totals["dma_read_bytes"] + step.totals["dma_write_bytes"],
           "min_bytes": step.totals["min_bytes"],
           "utilization": step.totals["utilization"], "phases": {},
           "refused": [f"{r['layer']} {r['phase']}: {r['reason'].split('; ')[0]}"
                       for r in step.refused]}
    out["over_roofline"] = out["cycles"] / out["roofline_cycles"]
    out["over_min_bytes"] = out["dma_bytes"] / out["min_bytes"]
    for phase in PHASES:
        rows = [r for r in ran if r["phase"] == phase]
        cycles = sum(r["cycles"] for r in rows)
        roof = sum(r["roofline_cycles"] for r in rows)
        out["phases"][phase] = {"cycles": cycles, "roofline_cycles": roof,
                                "over_roofline": cycles / roof, **over_parts(rows)}
    out["top"] = [{"layer": r["layer"], "phase": r["phase"], "bound": r["bound"],
                   "over": r["cycles"] - r["roofline_cycles"],
                   "over_roofline": r["cycles"] / r["roofline_cycles"],
                   "over_min_bytes": (r["dma_read_bytes"] + r["dma_write_bytes"])
                   / r["min_bytes"], **over_parts([r])}
                  for r in sorted(ran, key=lambda r: r["roofline_cycles"] - r["cycles"])[:TOP]]
    return out


#: Rows of each network's table of the layers furthest over their roofline.
TOP = 8


def over_parts(rows):
    """Where ``rows``' cycles beyond their roofline go (they add up to it): ``overlap``, the
    cycles beyond the busier of the array and the DMA (neither hides the other: loads a run
    waits for, a step waiting for P's store, set-up); ``compute``, the array's busy cycles
    beyond the roofline on layers it bounds (runs' fill and drain, partial tiles, zero
    slots); ``dma``, the DMA's busy cycles beyond the roofline on the others (bytes beyond
    the compulsory ones: re-reads, and each command's cycles beyond its data)."""
    parts = {"overlap": 0, "compute": 0, "dma": 0}
    for r in rows:
        busy = max(r["compute_cycles"], r["dma_busy_cycles"])
        parts["overlap"] += r["cycles"] - busy
        side = "compute" if r["compute_cycles"] >= r["dma_busy_cycles"] else "dma"
        parts[side] += busy - r["roofline_cycles"]
    return parts


#: Planes and channel counts (C = K) of :func:`small_planes`.
PLANES = ((7, 14, 28), (64, 128, 256))


def small_planes(config, *, batch):
    """The cycle model's zero-free loss and gradient of each 3 x 3 stride-2, pad-1 layer of
    :data:`PLANES` (``batch`` images): a dict a layer and phase with its cycles, utilization
    (MACs over rows x cols x cycles), ratio to its roofline, MAC slots fed beyond its MACs
    (zero slots) and bound, or ``refused`` with the reason."""
    out = []
    for plane in PLANES[0]:
        for ch in PLANES[1]:
            layer = ConvLayer.conv(batch, ch, plane, plane, ch, 3, 3, stride=2, pad=1)
            for phase in ("loss", "gradient"):
                row = {"plane": plane, "channels": ch, "phase": phase}
                try:
                    m = layer_cycles(config, phase, layer)
                except ValueError as e:
                    out.append(dict(row, refused=str(e)))
                    continue
                out.append(dict(row, cycles=m.cycles, utilization=m.utilization,
                                over_roofline=m.over_roofline,
                                zero_slots=m.array_slots - m.macs, bound=m.bound))
    return out


def _planes_markdown(config_name, batch, rows):
    lines = ["", "## Stride-2 layers on small planes", "",
             f"The zero-free loss and gradient of 3 x 3 stride-2 layers (pad 1, C = K, batch "
             f"{batch}) on {config_name} at its own bus, by the cycle model (`bpsa perf "
             f"--config {config_name} --phase loss|gradient --layer C=..,H=..,K=..,R=3,"
             f"stride=2,pad=1,N={batch}`): utilization (the layer's MACs over rows x cols x "
             f"cycles), the ratio to its roofline, the MAC slots fed beyond the MACs.", "",
             "| plane | channels | loss util. | loss x roofline | gradient util. "
             "| gradient x roofline | zero slots (loss + gradient) | bound (loss, gradient) |",
             "|---:|---:|---:|---:|---:|---:|---:|---|"]
    def cells(r):
        if "refused" in r:
            return ["refused", "", "", "-"]
        return [f"{r['utilization']:.2f}", f"{r['over_roofline']:.2f}",
                f"{r['zero_slots']:,}", r["bound"]]

    for i in range(0, len(rows), 2):
        (lu, lx, lz, lb), (gu, gx, gz, gb) = cells(rows[i]), cells(rows[i + 1])
        zero = " + ".join(z for z in (lz, gz) if z)
        lines.append(f"| {rows[i]['plane']}x{rows[i]['plane']} | {rows[i]['channels']} "
                     f"| {lu} | {lx} | {gu} | {gx} | {zero} | {lb}, {gb} |")
    return "\n".join(lines) + "\n"


def _over_markdown(results):
    """Where each network's cycles over its roofline go, at the first bus width: per phase
    (:func:`over_parts`) and its layers furthest over."""
    width = results[0]["bus_bits"]
    lines = ["", f"## Where the cycles over the roofline go ({width}-bit bus)", "",
             "Per phase, the cycles beyond the roofline split three ways (they add up to "
             "cycles - roofline): **overlap**, the cycles beyond the busier of the array and "
             "the DMA (loads a run waits for, steps waiting for P's store, set-up); "
             "**compute**, the array's busy cycles beyond the roofline on the layers it bounds; "
             "**DMA**, the DMA's busy cycles beyond the roofline on the others (bytes beyond "
             "the compulsory ones, and each command's cycles beyond its data). Then the layers "
             f"furthest over, {TOP} a network, with their DMA bytes over the compulsory ones.",
             "", "| network | phase | over roofline | overlap | compute | DMA |",
             "|---|---|---:|---:|---:|---:|"]
    for r in results:
        if r["bus_bits"] != width:
            continue
        for phase, p in r["phases"].items():
            lines.append(f"| {r['network']} | {phase} | {p['cycles'] - p['roofline_cycles']:,} "
                         f"| {p['overlap']:,} | {p['compute']:,} | {p['dma']:,} |")
    lines += ["", "| network | layer | phase | bound | over roofline | x roofline "
              "| DMA / compulsory | overlap | compute | DMA |",
              "|---|---|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        if r["bus_bits"] != width:
            continue
        for t in r["top"]:
            lines.append(f"| {r['network']} | {t['layer']} | {t['phase']} | {t['bound']} "
                         f"| {t['over']:,} | {t['over_roofline']:.2f} "
                         f"| {t['over_min_bytes']:.2f} | {t['overlap']:,} | {t['compute']:,} "
                         f"| {t['dma']:,} |")
    return "\n".join(lines) + "\n"


def _markdown(config_name, batch, results):
    head = ("| network | bus | cycles | roofline | x roofline | forward | loss | gradient "
            "| DMA bytes / compulsory | utilization | refused |")
    lines = ["The cycle model's training step (`bpsa perf --network N --config "
             f"{config_name} --batch {batch} --frontend best`) against the sum of its layers' "
             "roofline cycles, `max(MACs / (rows cols), compulsory bytes / bus bytes a "
             "cycle)`, in all and per phase; DMA bytes (read and written) against the "
             "compulsory traffic (every input read once, every output written once, results as "
             "accumulators).", "", head,
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        ph = r["phases"]
        lines.append(
            f"| {r['network']} | {r['bus_bits']} | {r['cycles']:,} | {r['roofline_cycles']:,} "
            f"| {r['over_roofline']:.2f} | {ph['forward']['over_roofline']:.2f} "
            f"| {ph['loss']['over_roofline']:.2f} | {ph['gradient']['over_roofline']:.2f} "
            f"| {r['over_min_bytes']:.2f} | {r['utilization']:.3f} | {len(r['refused'])} |")
    refused = sorted({f"{r['network']}: {why.split(' (configuration')[0]}" for r in results
                      for why in r["refused"]})
    if refused:
        lines += ["", "Rows left out (refused by the configuration, with the reason):", ""]
        lines += [f"- {why}" for why in refused]
    return "\n".join(lines) + "\n"


def roofline_report(out_dir="docs/results", *, config_name="paper16", networks=NETWORKS,
                    widths=(64, 128), batch=8, jobs=None, command=None):
    """The table of :func:`network_roofline` for ``networks`` at each of ``widths`` (DMA bus
    bits) into ``out_dir/roofline.md`` and ``.json``, stamped with ``command`` (default: the
    equivalent ``python -m bpsa.tools.roofline``), the commit and the date; returns the
    results."""
    jobs = jobs or os.cpu_count() or 1
    base = load_config(config_name)
    results = []
    for width in widths:
        config = base.replace(dma_data_width=width, name=f"{config_name}_bus{width}")
        for network in networks:
            results.append(network_roofline(config, network, batch=batch, jobs=jobs))
    planes = small_planes(base, batch=batch)
    command = command or (
        f"python -m bpsa.tools.roofline --config {config_name} --batch {batch} --widths "
        f"{','.join(map(str, widths))} --networks {','.join(networks)} -o {out_dir}")
    write_page(Path(out_dir) / "roofline.md",
               f"Training steps against their roofline ({config_name}, batch {batch})",
               command, _markdown(config_name, batch, results) + _over_markdown(results)
               + _planes_markdown(config_name, batch, planes),
               data={"config": config_name, "batch": batch, "results": results,
                     "small_planes": planes})
    return results


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default="paper16")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--widths", default="64,128", help="DMA bus bits, a comma list")
    parser.add_argument("--networks", default=",".join(NETWORKS))
    parser.add_argument("-o", "--out", default="docs/results")
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    results = roofline_report(args.out, config_name=args.config,
                              networks=tuple(args.networks.split(",")),
                              widths=tuple(int(w) for w in args.widths.split(",")),
                              batch=args.batch, command=current_command())
    for r in results:
        print(f"{r['network']:>14} {r['bus_bits']:>4} bits: {r['over_roofline']:.2f}x its "
              f"roofline (forward {r['phases']['forward']['over_roofline']:.2f}, loss "
              f"{r['phases']['loss']['over_roofline']:.2f}, gradient "
              f"{r['phases']['gradient']['over_roofline']:.2f}), DMA "
              f"{r['over_min_bytes']:.2f}x compulsory")
    print(f"wrote {args.out}/roofline.md, roofline.json ({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
