"""Energy per training step and the source papers' energy claims (``make energy``,
``python -m bpsa.tools.energy_report``): the cycle model's action counts of each network's step
priced by :mod:`bpsa.models.energy` (45 nm), with every MAC fired and with half of them gated
(zero gating at an assumed 50 % zero fraction), TOPS/W at two operations a MAC; zero gating
on measured data (:func:`measured_gating`: the digits models trained in PyTorch, each layer's
zero fractions measured in a training step); and the papers' claims: InterGrad's
interleaved WS/OS FC backward against the two passes run separately, from runs of the array's
RTL, and the zero-free loss against the traditional flow of zero-inserted operands, from the
cycle model (:func:`loss_energy`). Writes
``energy.md`` and ``energy.json`` (``docs/results/``, :func:`bpsa.tools.results.write_page`).
"""

import argparse
import itertools
import os
import time
from pathlib import Path

from bpsa.config import load_config
from bpsa.models.energy import TECH_45NM, mac_pj, rows_energy, sram_pj
from bpsa.models.network_perf import network_step
from bpsa.spec.network import load_network
from bpsa.tools.results import current_command, write_page

__all__ = ["DIGITS_MODELS", "GATED", "energy_report", "interleave_energy", "loss_energy",
           "measured_gating", "network_energy"]

#: The zero fraction of the second column (the MACs zero gating skips).
GATED = 0.5

#: The models :func:`measured_gating` trains and measures (:mod:`bpsa.torch.models`).
DIGITS_MODELS = ("digits_cnn", "lenet_digits", "resblock_digits")


def network_energy(config, network, *, batch, jobs=1):
    """One network's step on ``config`` (the faster forward front end per layer): energy
    (pJ) dense and with :data:`GATED` of the MACs gated, pJ a MAC, the parts' shares (dense)
    and TOPS/W (two operations a MAC of the layers)."""
    step = network_step(config, load_network(network), batch=batch, frontend="best",
                        jobs=jobs)
    dense = rows_energy(config, step.rows)
    gated = rows_energy(config, step.rows, zero_fraction=GATED)
    macs = step.totals["macs"]
    sram = sum(v for k, v in dense["parts"].items() if k.startswith("sram_"))
    return {"network": network, "batch": batch, "macs": macs, "pj": dense["pj"],
            "pj_gated": gated["pj"], "pj_per_mac": dense["pj_per_mac"],
            "dram_share": dense["parts"]["dram"] / dense["pj"],
            "sram_share": sram / dense["pj"], "mac_share": dense["parts"]["mac"] / dense["pj"],
            "tops_per_w": 2 * macs / (dense["pj"] * 1e-12) / 1e12,
            "gating_saving": 1 - gated["pj"] / dense["pj"]}


def measured_gating(config, *, batch, epochs=10, batches=8, models=DIGITS_MODELS):
    """Zero gating on measured data: each of ``models`` trained ``epochs`` on the digits in
    plain PyTorch, then each convolution's and linear layer's zero fractions per phase
    measured in training steps on ``batches`` test batches of ``batch`` images (their mean:
    :func:`bpsa.torch.sparsity.zero_fractions`), and the traced network's step on
    ``config`` priced dense and with those fractions gated. A dict a model: its test
    accuracy, ``layers`` (name -> phase -> fraction), the MAC-weighted fraction a phase, the
    energies (pJ) and the saving."""
    from torch.utils.data import DataLoader

    from bpsa.torch import models as zoo
    from bpsa.torch.sparsity import zero_fractions
    from bpsa.torch.trace import trace
    from bpsa.torch.train import digits_datasets, train_float
    train_set, test_set = digits_datasets()
    out = []
    for name in models:
        model = getattr(zoo, name)()
        history = train_float(model, train_set, test_set, epochs=epochs)
        model.train()
        sums = {}
        for x, y in itertools.islice(DataLoader(test_set, batch_size=batch), batches):
            for layer, phases in zero_fractions(model, x, y).items():
                for phase, f in phases.items():
                    key = (layer, phase)
                    sums[key] = sums.get(key, 0.0) + f / batches
        shape = (batch, *test_set[0][0].shape)
        rows = network_step(config, trace(model, shape).network, batch=batch,
                            frontend="best").rows
        measured = [dict(r, zero_fraction=sums.get((r.get("layer"), r["phase"]), 0.0))
                    for r in rows]
        dense = rows_energy(config, [dict(r, zero_fraction=0.0) for r in rows])
        gated = rows_energy(config, measured)
        by_phase = {}
        for r in measured:
            if r.get("status", "run") == "run" and r.get("macs"):
                m, z = by_phase.get(r["phase"], (0, 0.0))
                by_phase[r["phase"]] = (m + r["macs"], z + r["macs"] * r["zero_fraction"])
        layers = {}
        for (layer, phase), f in sums.items():
            layers.setdefault(layer, {})[phase] = f
        out.append({"model": name, "test_accuracy": history[-1]["test_accuracy"],
                    "layers": layers,
                    "phases": {p: z / m for p, (m, z) in by_phase.items() if m},
                    "pj": dense["pj"], "pj_gated": gated["pj"],
                    "mac_share": dense["parts"]["mac"] / dense["pj"],
                    "gating_saving": 1 - gated["pj"] / dense["pj"]})
    return out


def _gating_lines(measured, config_name, batch):
    """The page's section of :func:`measured_gating`."""
    lines = ["", "## Zero gating on measured data", "",
             f"The digits models ({', '.join(DIGITS_MODELS)}) trained in PyTorch float32, "
             "then each layer's share of MACs with a zero operand measured in training steps "
             f"(batches of {batch} test images; `bpsa.torch.sparsity.zero_fractions`: "
             "ReLU zeros and padding in X, zeros of dY behind a ReLU, zero weights) and the "
             f"traced step on `{config_name}` priced with them. Float zeros only: integer "
             "arithmetic rounds more values to zero, so these are lower bounds. Gating saves at most "
             "the MACs' share of a step's energy (the MAC column, dense): on these small "
             "layers the DMA and the buffers spend most of it.", "",
             "| model | test accuracy | zero fraction: forward | loss | gradient "
             "| energy (uJ) | MAC | gated (uJ) | saving |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for m in measured:
        ph = m["phases"]
        lines.append(f"| {m['model']} | {m['test_accuracy']:.3f} | "
                     + " | ".join(f"{ph[p]:.1%}" if p in ph else "-"
                                  for p in ("forward", "loss", "gradient"))
                     + f" | {m['pj'] / 1e6:,.2f} | {m['mac_share']:.1%} "
                     f"| {m['pj_gated'] / 1e6:,.2f} "
                     f"| {m['gating_saving']:.1%} |")
    lines += ["", "Each layer's fractions:", "", "| model | layer | forward | loss | gradient |",
              "|---|---|---:|---:|---:|"]
    for m in measured:
        for layer, ph in m["layers"].items():
            lines.append(f"| {m['model']} | {layer} | " + " | ".join(
                f"{ph[p]:.1%}" if p in ph else "-" for p in ("forward", "loss", "gradient"))
                + " |")
    return lines


def loss_energy(config, network, *, batch):
    """The zero-free loss against the traditional flow (the zero-inserted dY the driver lays
    out in memory, run as a forward on the same array: :func:`bpsa.models.perf.
    traditional_cycles`) on ``network``'s convolutions (not its first), by stride: layers,
    and the zero-free flow's savings in energy, cycles and DMA bytes; ``refused``: the layers
    either flow cannot run, left out."""
    from bpsa.models.energy import energy, actions_from_model
    from bpsa.models.perf import layer_cycles, traditional_cycles
    from bpsa.spec.layer import ConvLayer
    from bpsa.spec.network import POOLS
    sums, refused = {}, []
    for i, lay in enumerate(load_network(network)):
        if i == 0 or lay.op in POOLS or lay.op == "fc":
            continue
        conv = ConvLayer.conv(batch, lay.c, lay.h, lay.w, lay.k, lay.r, lay.s, lay.stride,
                              lay.pad, lay.dilation)
        try:
            pair = (layer_cycles(config, "loss", conv), traditional_cycles(config, "loss", conv))
        except ValueError as e:
            refused.append(f"{lay.name}: {e}")
            continue
        s = sums.setdefault(lay.stride, {"layers": 0, "pj": [0.0, 0.0], "cycles": [0, 0],
                                         "dma": [0, 0]})
        s["layers"] += 1
        for j, m in enumerate(pair):
            row = dict(m.as_dict(), phase="loss")
            s["pj"][j] += energy(config, actions_from_model(config, row))["pj"]
            s["cycles"][j] += m.cycles
            s["dma"][j] += m.dma_read_bytes + m.dma_write_bytes
    out = {"network": network, "batch": batch, "refused": refused, "strides": {}}
    for stride, s in sorted(sums.items()):
        out["strides"][stride] = {"layers": s["layers"], **{
            f"{k}_saving": 1 - s[k][0] / s[k][1] for k in ("pj", "cycles", "dma")}}
    return out


def interleave_energy(config, fc=(64, 16, 64)):
    """InterGrad's comparison on the array's RTL (:func:`bpsa.sim.simcmd.run_gemm`): an FC
    layer's backward (W ``O x I``, batch ``Bt``: ``fc = (O, Bt, I)``) interleaved against dA by
    WS and G by OS run separately: cycles, the harness's buffer reads and writes, MACs fired,
    and their energy (a MAC fired at :func:`bpsa.models.energy.mac_pj`, a buffer access as a
    word of B: :func:`bpsa.models.energy.sram_pj` of B's capacity and width)."""
    from bpsa.models.area import memories
    from bpsa.sim.simcmd import run_gemm
    o, bt, i = fc
    runs = {"interleaved": run_gemm(config, "interleaved", fc),
            "ws": run_gemm(config, "ws", (i, o, bt)), "os": run_gemm(config, "os", (o, bt, i))}
    if not all(r["match"] for r in runs.values()):
        raise RuntimeError("an FC backward run differs from numpy")
    words, bits = memories(config)["B"]
    word = sram_pj(words * bits / 8, bits)
    mult, add = mac_pj(config)

    def figures(parts):
        cycles = sum(r["cycles"] for r in parts)
        accesses = sum(r["total_reads"] + r["writes"] for r in parts)
        fired = sum(r["fired"] for r in parts)
        return {"cycles": cycles, "accesses": accesses, "fired": fired,
                "pj": fired * (mult + add) + accesses * word}
    il = figures([runs["interleaved"]])
    sep = figures([runs["ws"], runs["os"]])
    return {"fc": list(fc), "interleaved": il, "separate": sep,
            "cycles_saving": 1 - il["cycles"] / sep["cycles"],
            "accesses_saving": 1 - il["accesses"] / sep["accesses"],
            "energy_saving": 1 - il["pj"] / sep["pj"]}


def _loss_rows(loss):
    """The claims table's rows of :func:`loss_energy`: its strided layers (at stride 1 there
    are no zeros to insert; the two flows differ there by their front ends)."""
    out = []
    for stride, s in loss["strides"].items():
        if stride < 2:
            continue
        out.append(
            f"| BP-im2col (Yang et al.): the backward without zero-spaced matrices | "
            f"{loss['network']}'s {s['layers']} stride-{stride} losses, batch {loss['batch']}: "
            f"the zero-free loss against the traditional flow (the zero-inserted dY in memory, "
            f"run as a forward on the same array) | runtime -34.9 %, off-chip bandwidth "
            f"-22.7 %, buffer bandwidth -70.6 % (against explicit reorganization) "
            f"| {s['pj_saving']:.1%} less energy, {s['cycles_saving']:.1%} fewer cycles, "
            f"{s['dma_saving']:.1%} fewer DMA bytes | the cycle model's counts, 45 nm |")
    return out


def _markdown(config_name, batch, rows, il, il_config, loss, measured):
    lines = [f"The cycle model's training step (`bpsa perf --network N --config {config_name} "
             f"--batch {batch} --frontend best --energy`) priced at {TECH_45NM.name} "
             "(`bpsa.models.energy`: Horowitz, ISSCC 2014; EIE, ISCA 2016): every MAC fired, "
             "each buffer's words read and written, every DRAM byte. Dense: every MAC fires; "
             f"gated: {GATED:.0%} of the MACs have a zero operand and zero gating skips them "
             "(an assumed fraction, not measured on data). TOPS/W: two operations a MAC of "
             "the layers, dense.", "",
             "| network | MACs | energy (mJ) | pJ / MAC | DRAM | SRAM | MAC | TOPS/W "
             f"| gated at {GATED:.0%} (mJ) | saving |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['network']} | {r['macs']:,} | {r['pj'] / 1e9:,.1f} "
                     f"| {r['pj_per_mac']:.2f} | {r['dram_share']:.1%} | {r['sram_share']:.1%} "
                     f"| {r['mac_share']:.1%} | {r['tops_per_w']:.3f} "
                     f"| {r['pj_gated'] / 1e9:,.1f} | {r['gating_saving']:.1%} |")
    o, bt, i = il["fc"]
    lines += ["", "## The source papers' energy claims", "",
              "| claim (paper) | comparison | their figure | this project | how measured |",
              "|---|---|---|---|---|",
              f"| InterGrad (Unnikrishnan and Parhi): interleaved WS/OS gradients | FC "
              f"backward {o}x{i}, batch {bt}: interleaved against dA by WS and G by OS run "
              f"separately | up to 25 % fewer cycles and memory accesses, 16 % less energy "
              f"| {il['cycles_saving']:.1%} fewer cycles, {il['accesses_saving']:.1%} fewer "
              f"buffer accesses, {il['energy_saving']:.1%} less energy | the array's RTL on "
              f"`{il_config}` (`bpsa.sim.simcmd.run_gemm`); MACs and accesses at 45 nm, an "
              f"access as a word of B; no DRAM, no SGD step |",
              "| Fornt et al.: zero gating in the PE | a step's energy with half the MACs "
              "gated against none | (switching energy saved; no figure) "
              f"| {rows[0]['gating_saving']:.1%} on {rows[0]['network']} (table above) | the "
              "cycle model's counts, zero fraction assumed |",
              "| Fornt et al.: zero gating in the PE | a step's energy with the measured zero "
              "fractions gated against none (below) | (no figure) | "
              + ", ".join(f"{m['gating_saving']:.1%} on {m['model']}" for m in measured)
              + " | the cycle model's counts, zero fractions measured in PyTorch |",
              *_loss_rows(loss), ""]
    if loss["refused"]:
        lines += [f"Left out of the loss comparison (refused by a flow): "
                  f"{len(loss['refused'])} layers, the first: {loss['refused'][0]}.", ""]
    lines += _gating_lines(measured, config_name, batch) + [""]
    return "\n".join(lines) + "\n"


def energy_report(out_dir="docs/results", *, config_name="paper16", networks=None, batch=8,
                  il_config="small", jobs=None, command=None):
    """The tables of :func:`network_energy` and :func:`interleave_energy` into
    ``out_dir/energy.md`` and ``.json``; returns the data."""
    from bpsa.tools.roofline import NETWORKS
    networks = networks or NETWORKS
    jobs = jobs or os.cpu_count() or 1
    config = load_config(config_name)
    rows = [network_energy(config, n, batch=batch, jobs=jobs) for n in networks]
    il = interleave_energy(load_config(il_config))
    loss = loss_energy(config, networks[0], batch=batch)
    measured = measured_gating(config, batch=batch)
    command = command or (f"python -m bpsa.tools.energy_report --config {config_name} "
                          f"--batch {batch} --networks {','.join(networks)} -o {out_dir}")
    data = {"config": config_name, "batch": batch, "technology": TECH_45NM.name,
            "gated": GATED, "networks": rows, "interleave": dict(il, config=il_config),
            "loss": loss, "measured_gating": measured}
    write_page(Path(out_dir) / "energy.md",
               f"Energy per training step ({config_name}, batch {batch}, {TECH_45NM.name})",
               command, _markdown(config_name, batch, rows, il, il_config, loss, measured),
               data=data)
    return data


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default="paper16")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--networks", default=None, help="a comma list (default: make "
                        "roofline's five)")
    parser.add_argument("-o", "--out", default="docs/results")
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    data = energy_report(args.out, config_name=args.config, batch=args.batch,
                         networks=tuple(args.networks.split(",")) if args.networks else None,
                         command=current_command())
    for r in data["networks"]:
        print(f"{r['network']:>14}: {r['pj'] / 1e9:,.1f} mJ a step, {r['pj_per_mac']:.2f} pJ a "
              f"MAC, DRAM {r['dram_share']:.1%}, {r['tops_per_w']:.3f} TOPS/W; "
              f"{r['gating_saving']:.1%} less with {GATED:.0%} of the MACs gated")
    il = data["interleave"]
    print(f"InterGrad's interleave (FC backward on {il['config']}'s RTL): "
          f"{il['cycles_saving']:.1%} fewer cycles, {il['accesses_saving']:.1%} fewer buffer "
          f"accesses, {il['energy_saving']:.1%} less energy than the two passes")
    for stride, st in data["loss"]["strides"].items():
        print(f"zero-free loss against the traditional flow, {data['loss']['network']}'s "
              f"{st['layers']} stride-{stride} layers: {st['pj_saving']:.1%} less energy, "
              f"{st['cycles_saving']:.1%} fewer cycles, {st['dma_saving']:.1%} fewer DMA bytes")
    for m in data["measured_gating"]:
        print(f"{m['model']}: measured zero fractions "
              + ", ".join(f"{p} {f:.1%}" for p, f in m["phases"].items())
              + f"; gating saves {m['gating_saving']:.1%} of the step's energy")
    print(f"wrote {args.out}/energy.md, energy.json ({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
