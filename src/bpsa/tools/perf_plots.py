"""Pictures of a network's training step (:class:`bpsa.models.network_perf.NetworkStep`):
utilization per layer and phase, the time of each layer by phase (stacked), and the
configuration's roofline with the layers on it. matplotlib without a screen (Agg); the file's
suffix picks the format (``.png``, ``.svg``, ``.pdf``).
"""

import matplotlib

matplotlib.use("Agg")
matplotlib.rcParams["svg.hashsalt"] = "bpsa"    # the same SVG bytes on every run
import matplotlib.pyplot as plt  # noqa: E402

__all__ = ["KINDS", "plot_step", "plot_pareto", "plot_training"]

KINDS = ("utilization", "breakdown", "roofline")
_COLOURS = {"forward": "tab:blue", "loss": "tab:orange", "gradient": "tab:green"}


def _layers(step):
    """Layer names in network order, only those with a phase that ran."""
    names = []
    for r in step.rows:
        if r["status"] == "run" and r["layer"] not in names:
            names.append(r["layer"])
    return names


def _ran(step, phase):
    return {r["layer"]: r for r in step.rows if r["phase"] == phase and r["status"] == "run"}


def _phases(step):
    return list(dict.fromkeys(r["phase"] for r in step.rows))


def _utilization(ax, step, config):
    names = _layers(step)
    phases = _phases(step)
    width = 0.8 / len(phases)
    for i, phase in enumerate(phases):
        ran = _ran(step, phase)
        xs = [j + (i - (len(phases) - 1) / 2) * width for j, n in enumerate(names) if n in ran]
        ax.bar(xs, [ran[n]["utilization"] for n in names if n in ran], width,
               label=phase, color=_COLOURS.get(phase))
    ax.set_xticks(range(len(names)), names, rotation=90, fontsize=6)
    ax.set_ylim(0, 1)
    ax.set_ylabel("utilization")
    ax.set_title(f"{step.network} on {config.name} ({config.rows}x{config.cols}), batch "
                 f"{step.batch}: utilization (MACs / rows x cols x cycles)")
    ax.legend(fontsize=7)


def _breakdown(ax, step, config):
    names = _layers(step)
    bottom = [0.0] * len(names)
    scale = 1e3 / (step.clock_mhz * 1e6)          # cycles to milliseconds
    for phase in _phases(step):
        ran = _ran(step, phase)
        ms = [ran[n]["cycles"] * scale if n in ran else 0.0 for n in names]
        ax.bar(range(len(names)), ms, 0.8, bottom=bottom, label=phase,
               color=_COLOURS.get(phase))
        bottom = [b + m for b, m in zip(bottom, ms)]
    ax.set_xticks(range(len(names)), names, rotation=90, fontsize=6)
    ax.set_ylabel(f"ms at {step.clock_mhz:g} MHz")
    ax.set_title(f"time per layer, {step.totals['seconds'] * 1e3:,.1f} ms a training step "
                 f"(model)")
    ax.legend(fontsize=7)


def _roofline(ax, step, config):
    peak = config.rows * config.cols                    # MACs a cycle
    bus = config.dma_data_width / 8                     # bytes a cycle
    rows = [r for r in step.rows if r["status"] == "run" and r["min_bytes"]]
    intensity = [r["macs"] / r["min_bytes"] for r in rows]
    lo = min(intensity + [peak / bus]) / 4
    hi = max(intensity + [peak / bus]) * 4
    ridge = peak / bus
    ax.loglog([lo, ridge, hi], [lo * bus, peak, peak], color="black", lw=1.2,
              label=f"roofline: {peak} MACs/cycle, {bus:g} B/cycle")
    for phase in _phases(step):
        pts = [(r["macs"] / r["min_bytes"], r["macs"] / r["cycles"])
               for r in rows if r["phase"] == phase]
        if pts:
            ax.scatter(*zip(*pts), s=12, label=phase, color=_COLOURS.get(phase), alpha=0.8)
    ax.set_xlabel("MACs per byte (inputs read once, output written once)")
    ax.set_ylabel("MACs per cycle")
    ax.set_title(f"roofline of {config.name} with the layers of {step.network}")
    ax.legend(fontsize=7)


_DRAW = {"utilization": _utilization, "breakdown": _breakdown, "roofline": _roofline}


def plot_step(step, config, path, kinds=KINDS):
    """Draw ``kinds`` (of :data:`KINDS`) of ``step``, one panel each, into ``path``."""
    unknown = [k for k in kinds if k not in _DRAW]
    if unknown:
        raise ValueError(f"plot kind {unknown[0]!r} is not one of {', '.join(KINDS)}")
    wide = max(8.0, 0.16 * len(_layers(step)) + 2)
    fig, axes = plt.subplots(len(kinds), 1, figsize=(wide, 4.2 * len(kinds)), squeeze=False)
    for ax, kind in zip(axes[:, 0], kinds):
        _DRAW[kind](ax, step, config)
    fig.tight_layout()
    fig.savefig(path, dpi=110, metadata={"Date": None} if str(path).endswith(".svg")
                else None)
    plt.close(fig)


def plot_pareto(points, front, path, title):
    """Step time against area: ``points`` and the Pareto ``front`` as lists of dicts with
    ``area``, ``seconds``, ``label`` and ``layers_run`` (points that run fewer layer phases
    than the most are marked apart); points with ``energy_uj`` are coloured by it (a step's
    energy, a colour bar)."""
    fig, ax = plt.subplots(figsize=(8, 5.5))
    most = max((p.get("layers_run", 0) for p in points), default=0)
    full = [p for p in points if p.get("layers_run", 0) == most]
    short = [p for p in points if p.get("layers_run", 0) != most]
    xs, ys = [p["area"] for p in full], [p["seconds"] * 1e3 for p in full]
    if full and all("energy_uj" in p for p in full):
        dots = ax.scatter(xs, ys, s=16, c=[p["energy_uj"] for p in full], cmap="viridis",
                          label="configurations (colour: energy a step)")
        fig.colorbar(dots, ax=ax, label="uJ a training step (45 nm)")
    else:
        ax.scatter(xs, ys, s=14, color="tab:gray", label="configurations")
    if short:
        ax.scatter([p["area"] for p in short], [p["seconds"] * 1e3 for p in short], s=20,
                   marker="x", color="tab:blue",
                   label="refuses a layer the others run (step time incomplete)")
    front = sorted(front, key=lambda p: p["area"])
    ax.plot([p["area"] for p in front], [p["seconds"] * 1e3 for p in front], "o-",
            color="tab:red", ms=5, label="Pareto front")
    for p in front:
        ax.annotate(p["label"], (p["area"], p["seconds"] * 1e3), fontsize=6,
                    xytext=(3, 3), textcoords="offset points")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("area: Yosys generic cells of the accelerator, buffers as flip-flops")
    ax.set_ylabel("ms a training step")
    ax.set_title(title)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110, metadata={"Date": None} if str(path).endswith(".svg")
                else None)
    plt.close(fig)


def plot_training(history, reference, path, backend, others=()):
    """The training curves of :func:`bpsa.host.digits.train`'s ``history`` (the loss; the
    test and train accuracy) next to the PyTorch ``reference``'s test accuracy (None: no
    reference), into ``path``; ``backend`` names the accelerator's curve. ``others``: more
    ``(label, history)`` curves (their loss where they have one, their test accuracy)."""
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
    epochs = [h["epoch"] for h in history]
    a.plot(epochs, [h["loss"] for h in history], "o-", label=f"accelerator ({backend})")
    a.set_xlabel("epoch")
    a.set_ylabel("training loss")
    b.plot(epochs, [h["test_accuracy"] for h in history], "o-", label=f"accelerator ({backend})")
    b.plot(epochs, [h["train_accuracy"] for h in history], ".--", label="train (accelerator)")
    if reference:
        b.plot(epochs, [r["test_accuracy"] for r in reference], "s-", label="PyTorch float32")
    for label, other in others:
        if all("loss" in h for h in other):
            a.plot(epochs, [h["loss"] for h in other], "^-", label=label)
        b.plot(epochs, [h["test_accuracy"] for h in other], "^-", label=label)
    if others:
        a.legend(fontsize=7)
    b.set_xlabel("epoch")
    b.set_ylabel("accuracy")
    b.set_ylim(0, 1)
    b.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv=None):
    """``python -m bpsa.tools.perf_plots``: each kind of picture of a network's step as its
    own PNG and SVG (``make figures``)."""
    import argparse
    from pathlib import Path

    from bpsa.config import load_config
    from bpsa.models.network_perf import network_step
    from bpsa.spec.network import load_network
    ap = argparse.ArgumentParser(description=main.__doc__.split("\n")[0])
    ap.add_argument("--network", default="resnet50")
    ap.add_argument("--config", default="paper16")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--clock", type=float, default=100.0)
    ap.add_argument("-o", "--output", default="docs/figures")
    args = ap.parse_args(argv)
    config = load_config(args.config)
    step = network_step(config, load_network(args.network), batch=args.batch,
                        clock_mhz=args.clock)
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    for kind in KINDS:
        for suffix in (".png", ".svg"):
            path = out / f"{args.network}_{config.name}_b{args.batch}_{kind}{suffix}"
            plot_step(step, config, path, kinds=(kind,))
            print(f"wrote {path}")


if __name__ == "__main__":
    main()
