"""Grouped and depthwise convolutions on the array (``make grouped``, ``python -m
bpsa.tools.grouped_report``): MobileNetV2 and ResNeXt-50 (32x4d) (the network files traced
from torchvision, :mod:`bpsa.tools.gen_networks`) at batch 8 through the cycle model's
training step on a configuration (the faster
forward front end per layer), per kind of convolution (dense, grouped, depthwise) and phase:
layers, MACs, cycles, utilization, the utilization the layers would have at their roofline
(a DMA-bound layer cannot do better), cycles over the roofline, and the cycles of the same
layers run a group at a time (no packing: :mod:`bpsa.plan.groups`). Writes ``grouped.md`` and
``grouped.json`` (``docs/results/``)."""

import argparse
import time
from pathlib import Path

from bpsa.config import load_config
from bpsa.models.network_perf import network_step
from bpsa.models.perf import layer_cycles
from bpsa.spec.layer import ConvLayer
from bpsa.spec.network import load_network
from bpsa.tools.results import current_command, write_page

__all__ = ["MODELS", "grouped_figures", "main"]

#: The torchvision models of the page.
MODELS = ("mobilenet_v2", "resnext50_32x4d")

_PHASES = ("forward", "loss", "gradient")


def _kind(lay):
    if lay.groups == 1:
        return "dense"
    return "depthwise" if lay.groups == lay.c else "grouped"


def grouped_figures(config, model_name, *, batch=8):
    """One model's step (see the module docstring): ``{"model", "step": {cycles, roofline},
    "kinds": {kind: {phase: {layers, macs, cycles, roofline_cycles, one_group_cycles}}}}``;
    ``one_group_cycles``: the grouped rows run a group at a time."""
    net = load_network(model_name)
    by_name = {lay.name: lay for lay in net}
    rows = network_step(config, net, batch=batch, frontend="best").rows
    kinds, step = {}, {"cycles": 0, "roofline_cycles": 0}
    for r in rows:
        if r.get("status") != "run":
            continue
        step["cycles"] += r["cycles"]
        step["roofline_cycles"] += r["roofline_cycles"]
        lay = by_name[r["layer"]]
        if lay.op != "conv":
            continue
        k = kinds.setdefault(_kind(lay), {}).setdefault(r["phase"], dict.fromkeys(
            ("layers", "macs", "cycles", "roofline_cycles", "one_group_cycles"), 0))
        k["layers"] += 1
        for key in ("macs", "cycles", "roofline_cycles"):
            k[key] += r[key]
        if lay.groups > 1:
            conv = ConvLayer.conv(batch, lay.c, lay.h, lay.w, lay.k, lay.r, lay.s, lay.stride,
                                  lay.pad, lay.dilation, groups=lay.groups)
            one = layer_cycles(config, r["phase"], conv.group_layer(),
                               frontend=r.get("frontend") or None)
            k["one_group_cycles"] += one.cycles * lay.groups
        else:
            k["one_group_cycles"] += r["cycles"]
    return {"model": model_name, "batch": batch, "step": step, "kinds": kinds}


def _markdown(config, results):
    peak = config.rows * config.cols
    lines = [f"The networks traced from torchvision at batch {results[0]['batch']} through "
             f"the cycle model's training step on `{config.name}` ({config.rows}x"
             f"{config.cols}, {config.dma_data_width}-bit DMA; `bpsa perf --network NAME "
             f"--batch 8 --config {config.name} --frontend best`). A grouped layer "
             "runs in packs of groups side by side (`bpsa.plan.groups`); *a group at a time*: "
             "the same layers without packing. *At its roofline*: the MACs over the array's "
             "peak for the roofline's cycles (a layer bound by its DMA bytes cannot do "
             "better).", "",
             "| model | step (cycles) | roofline | x roofline |", "|---|---:|---:|---:|"]
    for res in results:
        s = res["step"]
        lines.append(f"| {res['model']} | {s['cycles']:,} | {s['roofline_cycles']:,} | "
                     f"{s['cycles'] / s['roofline_cycles']:.2f} |")
    lines += ["", "| model | convolutions | phase | layers | cycles | utilization | at its "
              "roofline | x roofline | a group at a time (cycles) | packing's gain |",
              "|---|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for res in results:
        for kind in ("dense", "grouped", "depthwise"):
            for phase in _PHASES:
                k = res["kinds"].get(kind, {}).get(phase)
                if not k:
                    continue
                lines.append(
                    f"| {res['model']} | {kind} | {phase} | {k['layers']} | {k['cycles']:,} | "
                    f"{k['macs'] / (peak * k['cycles']):.3f} | "
                    f"{k['macs'] / (peak * k['roofline_cycles']):.3f} | "
                    f"{k['cycles'] / k['roofline_cycles']:.2f} | {k['one_group_cycles']:,} | "
                    f"{k['one_group_cycles'] / k['cycles']:.1f}x |")
    lines += ["", "A depthwise layer does `R S` MACs for each element it reads and writes: "
              "at a 64-bit bus its roofline is its DMA bytes, and its utilization at the "
              "roofline is a few percent of the array. Packing shares the fixed costs a "
              "one-channel group pays a descriptor (set-up, loads, fill and drain) among the "
              "pack's groups; the zero weights between packed groups are gated slots, so the "
              "array's time of a pack is its groups' run one after the other.", ""]
    return "\n".join(lines) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default="paper16")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("-o", "--out", default="docs/results")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    config = load_config(args.config)
    results = [grouped_figures(config, m, batch=args.batch) for m in MODELS]
    write_page(Path(args.out) / "grouped.md", "Grouped and depthwise convolutions",
               current_command(), _markdown(config, results),
               data={"config": config.name, "models": results})
    for res in results:
        s = res["step"]
        print(f"{res['model']}: {s['cycles']:,} cycles a step, "
              f"{s['cycles'] / s['roofline_cycles']:.2f}x its roofline")
    print(f"wrote {args.out}/grouped.md, grouped.json ({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
