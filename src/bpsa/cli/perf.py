"""``bpsa perf``: the cycle model (:mod:`bpsa.models.perf`) of a layer or of every layer of
the workload, and a whole network's training step (:mod:`bpsa.models.network_perf`)."""

import csv
import json
import os
import sys
import time

from bpsa.cli.args import (UserError, add_config, config_of, float_above, int_at_least,
                           network_names, parent_dir, plot_path)

__all__ = ["register", "run"]


def register(sub):
    """Add the ``perf`` sub-parser to ``sub``."""
    sp = sub.add_parser("perf", help="cycle model of the forward pass and the zero-free loss "
                                     "and gradient: cycles, utilization, roofline, DMA and "
                                     "what bounds a layer, or every layer of the workload, in "
                                     "seconds without RTL")
    add_config(sp)
    sp.add_argument("--phase", choices=["forward", "loss", "gradient", "both", "all"],
                    default="all",
                    help="both: loss and gradient; all (default): forward, loss and gradient")
    sp.add_argument("--layer", metavar="C=..,H=..,K=..,R=..,stride=..,pad=..,N=..",
                    help="one layer (as for bpsa sim)")
    sp.add_argument("--workload", action="store_true",
                    help="every layer of src/bpsa/workloads/conv_layers.csv")
    sp.add_argument("--network", metavar="NAME|FILE.csv",
                    help="a training step of a whole network: one of "
                         + ", ".join(network_names()) + ", or a network file "
                         "(docs/guides/dse.md)")
    sp.add_argument("--model", metavar="PKG.MODULE:FACTORY",
                    help="a training step of a PyTorch model (needs the torch extra): the "
                         "nn.Module FACTORY() returns, traced on --input (e.g. "
                         "torchvision.models:resnet50); the layers the accelerator runs, as "
                         "--network does, and the host operations listed (docs/guides/pytorch.md)")
    sp.add_argument("--input", metavar="N,C,H,W",
                    help="with --model: the example input's shape (N is the batch)")
    sp.add_argument("--phases", metavar="forward,loss,gradient",
                    help="with --network: the phases of the step (default: all three)")
    sp.add_argument("--clock", type=float_above(0), default=None, metavar="MHZ",
                    help="with --network: the clock for the time a step takes (default: 100)")
    sp.add_argument("--frontend", choices=["feeder", "channel_first", "best"],
                    default=None, type=lambda v: v.replace("-", "_"),
                    help="with --network: the forward's front end; best: per layer the "
                         "faster (the descriptor's MODE; configurations with forward_frontends "
                         "channel_first)")
    sp.add_argument("--csv", action="store_true", help="with --network: CSV on stdout")
    sp.add_argument("--plot", metavar="FILE.png|.svg",
                    help="with --network: utilization, time per layer and the roofline")
    sp.add_argument("--batch", type=int_at_least(1), default=None,
                    help="batch (default: the layer's N, or 1 for --workload)")
    sp.add_argument("--baseline", action="store_true",
                    help="loss and gradient the traditional way: the forward convolution of "
                         "the zero-spaced operands (utilization of the layer's own MACs)")
    sp.add_argument("--requant", action="store_true",
                    help="the forward's and the loss's outputs leave requantized, as operands "
                         "(the descriptor's REQUANT), instead of as accumulators")
    sp.add_argument("--energy", action="store_true",
                    help="the energy too (45 nm per-action energies: every MAC fired, buffer "
                         "word and DRAM byte the model counts; bpsa.models.energy)")
    sp.add_argument("--zero-fraction", type=float, default=None, metavar="F",
                    help="with --energy: the fraction of the MACs with a zero operand, which "
                         "zero gating skips (default 0)")
    sp.add_argument("--json", action="store_true", help="print one JSON object")
    sp.set_defaults(func=run)


def run(args):
    """The model of ``--layer`` or ``--workload`` in the zero-free loss and gradient (and the
    forward), or of a ``--network``'s training step: a table, or one JSON object."""
    from dataclasses import replace

    from bpsa.models.perf import phase_table, workload_layers
    from bpsa.spec.layer import parse_layer
    config = config_of(args, mx=True)
    phases = {"both": ["loss", "gradient"],
              "all": ["forward", "loss", "gradient"]}.get(args.phase, [args.phase])
    if args.baseline:
        if "forward" in phases and args.phase != "all":
            raise UserError("--baseline applies to the loss and the gradient, not --phase "
                            "forward")
        phases = [p for p in phases if p != "forward"]
    if args.requant and args.baseline:
        raise UserError("--requant applies to the zero-free model, not --baseline")
    if args.zero_fraction is not None and not args.energy:
        raise UserError("--zero-fraction applies with --energy")
    if args.zero_fraction is not None and not 0 <= args.zero_fraction <= 1:
        raise UserError(f"--zero-fraction {args.zero_fraction}: give a fraction in [0, 1]")
    if args.energy and args.baseline:
        raise UserError("--energy applies to the zero-free model, not --baseline")
    if sum((args.layer is not None, args.workload, args.network is not None,
            args.model is not None)) != 1:
        raise UserError("give one of --layer C=..,H=..,K=.., --workload, --network NAME or "
                        "--model PKG.MODULE:FACTORY")
    if (args.input is None) != (args.model is None):
        raise UserError("--model and --input N,C,H,W go together")
    if args.network is not None or args.model is not None:
        if args.phase != "all":
            raise UserError("--phase applies to --layer and --workload; a --network or "
                            "--model step takes --phases")
        args.clock = 100.0 if args.clock is None else args.clock
        args.frontend = args.frontend or "feeder"
        return _network(args, config)
    if args.plot or args.csv or args.phases or args.clock is not None or args.frontend:
        raise UserError("--plot, --csv, --phases, --clock and --frontend apply to --network "
                        "and --model")
    if args.layer is not None:
        try:
            lay = parse_layer(args.layer)
        except ValueError as e:
            raise UserError(f"--layer {args.layer!r}: {e}") from None
        layers = [("-", args.layer, replace(lay, batch=args.batch or lay.batch))]
    else:
        layers = workload_layers(args.batch or 1)
    t0 = time.perf_counter()
    try:
        out = phase_table(config, layers, phases, baseline=args.baseline,
                          requant=args.requant, refusals=args.layer is None)
    except ValueError as e:
        raise UserError(f"cannot model layer {args.layer!r} on {config.name!r}: {e}") from None
    seconds = time.perf_counter() - t0
    totals = _network_totals(config, out) if args.workload else {}
    energy = _energy(args, config, out)
    if args.json:
        print(json.dumps({"config": config.name, "seconds": seconds, "layers": out,
                          **({"totals": totals} if args.workload else {}),
                          **({"energy": energy} if energy else {})}, sort_keys=True))
        return
    print(f"{'network':14s} {'layer':22s} {'phase':8s} {'cycles':>11s} {'util':>6s} "
          f"{'roofline':>11s} {'x roof':>6s} {'DMA busy':>10s}  bound")
    for e in out:
        if "refused" in e:
            print(f"{e['network']:14s} {e['layer']:22s} {e['phase']:8s} refused: "
                  f"{e['refused']}")
            continue
        print(f"{e['network']:14s} {e['layer']:22s} {e['phase']:8s} {e['cycles']:11,d} "
              f"{e['utilization']:6.3f} {e['roofline_cycles']:11,d} {e['over_roofline']:6.2f} "
              f"{e['dma_busy_cycles']:10,d}  {e['bound']}")
    for network, t in totals.items():
        print(f"{network:14s} {'total':22s} {'':8s} {t['cycles']:11,d} "
              f"{t['utilization']:6.3f}  {t['macs']:,d} MACs in {t['layer_phases']} layer "
              f"phases" + (f", {t['refused']} refused (not counted)" if t["refused"] else ""))
    _print_energy(energy)
    print(f"({len(out)} layer phases on {config.name} in {seconds:.2f} s)")


def _network_totals(config, rows):
    """Per network of ``rows`` (:func:`bpsa.models.perf.phase_table`'s): the cycles and MACs
    of the layer phases it runs, their utilization (MACs over cycles times the array's PEs,
    as a row's), how many ran and how many were refused."""
    totals = {}
    for e in rows:
        t = totals.setdefault(e["network"], {"cycles": 0, "macs": 0, "layer_phases": 0,
                                             "refused": 0})
        if "refused" in e:
            t["refused"] += 1
            continue
        t["cycles"] += e["cycles"]
        t["macs"] += e["macs"]
        t["layer_phases"] += 1
    for t in totals.values():
        t["utilization"] = t["macs"] / max(t["cycles"] * config.rows * config.cols, 1)
    return totals


def _network(args, config):
    """``bpsa perf --network``: a training step of a whole network
    (:func:`bpsa.models.network_perf.network_step`), a table, CSV or JSON, and a plot."""
    from bpsa.models.network_perf import PHASES, network_step
    from bpsa.spec.network import NetworkError, load_network
    if args.baseline:
        raise UserError("--baseline applies to --layer and --workload, not --network")
    phases = args.phases.split(",") if args.phases else list(PHASES)
    bad = [p for p in phases if p not in PHASES]
    if bad or not phases:
        raise UserError(f"--phases {args.phases!r}: give a comma list of "
                        f"{', '.join(PHASES)}")
    if args.plot:
        parent_dir(plot_path(args.plot))
    traced = None
    if args.model is not None:
        traced = _trace_model(args)
        net = traced.network
    else:
        try:
            net = load_network(args.network)
        except NetworkError as e:
            raise UserError(str(e)) from None
    t0 = time.perf_counter()
    try:
        step = network_step(config, net, batch=args.batch or 1, phases=phases,
                            clock_mhz=args.clock, requant=args.requant,
                            jobs=os.cpu_count() or 1, frontend=args.frontend)
    except ValueError as e:
        raise UserError(f"--frontend {args.frontend}: {e}") from None
    seconds = time.perf_counter() - t0
    energy = _energy(args, config, step.rows)
    if args.plot:
        from bpsa.tools.perf_plots import plot_step
        plot_step(step, config, args.plot)
    if args.json:
        out = dict(step.as_dict(), model_seconds=seconds)
        if energy:
            out["energy"] = energy
        if traced is not None:
            out.update(host_ops=[vars(h) for h in traced.host_ops],
                       relus=[{"name": n, "elements": e} for n, e in traced.relus])
        print(json.dumps(out, sort_keys=True))
        return
    if args.csv:
        fields = ["layer", "op", "phase", "batch", "status", "frontend", "cycles",
                  "utilization", "macs",
                  "dma_read_bytes", "dma_write_bytes", "a_words", "b_words", "p_words",
                  "bound", "roofline_cycles", "reason"]
        w = csv.DictWriter(sys.stdout, fields, extrasaction="ignore", lineterminator="\n")
        w.writeheader()
        for r in step.rows:
            w.writerow(r)
        return
    print(f"{'layer':22s} {'op':6s} {'phase':8s} {'cycles':>13s} {'util':>6s} "
          f"{'DMA read':>13s} {'DMA write':>12s} {'A/B/P words':>17s}  bound")
    for r in step.rows:
        head = f"{r['layer']:22s} {r['op']:6s} {r['phase']:8s}"
        if r["status"] != "run":
            print(f"{head} {r['status']}: {r['reason']}")
            continue
        words = f"{r['a_words']}/{r['b_words']}/{r['p_words']}"
        print(f"{head} {r['cycles']:13,d} {r['utilization']:6.3f} {r['dma_read_bytes']:13,d} "
              f"{r['dma_write_bytes']:12,d} {words:>17s}  {r['bound']}")
    t = step.totals
    print(f"\n{net.name} on {config.name} ({config.rows}x{config.cols}), batch {step.batch}: "
          f"{t['cycles']:,d} cycles a training step, utilization {t['utilization']:.3f}, "
          f"{t['seconds'] * 1e3:,.2f} ms at {args.clock:g} MHz; DMA "
          f"{t['dma_read_bytes'] + t['dma_write_bytes']:,d} bytes")
    for phase, pt in step.by_phase.items():
        print(f"  {phase:8s} {pt['cycles']:15,d} cycles  utilization {pt['utilization']:.3f}"
              f"  ({pt['layers_run']} layers run, {pt['refused']} not run, "
              f"{pt['skipped']} skipped)")
    if step.refused:
        print(f"not run on {config.name}: {len(step.refused)} layer phases (listed above)")
    _print_energy(energy)
    if traced is not None:
        _print_host_ops(traced)
    print(f"(the cycle model in {seconds:.2f} s"
          + (f"; plot: {args.plot})" if args.plot else ")"))


def _energy(args, config, rows):
    """With ``--energy``: :func:`bpsa.models.energy.rows_energy` of ``rows`` (each row's
    ``energy_pj`` set), else ``None``."""
    if not args.energy:
        return None
    from bpsa.models.energy import TECH_45NM, rows_energy
    out = rows_energy(config, rows, zero_fraction=args.zero_fraction or 0.0)
    return dict(out, technology=TECH_45NM.name, zero_fraction=args.zero_fraction or 0.0)


def _print_energy(energy):
    """The energy summary lines of :func:`_energy`'s result."""
    if not energy:
        return
    total = energy["pj"]
    shares = ", ".join(f"{k} {v / total:.1%}" for k, v in sorted(
        energy["parts"].items(), key=lambda kv: -kv[1])) if total else ""
    print(f"energy ({energy['technology']}, {energy['zero_fraction']:g} of the MACs gated): "
          f"{total / 1e6:,.3f} uJ, {energy['pj_per_mac']:.2f} pJ a MAC; {shares}")
    for phase, pj in energy["phases"].items():
        print(f"  {phase:8s} {pj / 1e6:15,.3f} uJ")


def _trace_model(args):
    """``--model`` traced on ``--input``: :class:`bpsa.torch.trace.Traced`."""
    try:
        import torch  # noqa: F401 (the extra's presence)
    except ImportError:
        raise UserError("--model needs PyTorch: pip install 'backprop-systolic[torch]' (make "
                        "install does)") from None
    from bpsa.torch.trace import load_factory, parse_input, trace
    try:
        shape = parse_input(args.input)
        if args.batch is not None and args.batch != shape[0]:
            raise ValueError(f"--batch {args.batch} differs from --input's N {shape[0]}")
        args.batch = shape[0]
        return trace(load_factory(args.model), shape, name=args.model.rpartition(":")[2])
    except ValueError as e:
        raise UserError(str(e)) from None


def _print_host_ops(traced):
    """The traced model's ReLUs and host operations, by kind, with their elements an image."""
    kinds = {}
    for h in traced.host_ops:
        n, e, why = kinds.get(h.op, (0, 0, h.reason))
        kinds[h.op] = (n + 1, e + h.elements, why)
    relu_elems = sum(e for _, e in traced.relus)
    print(f"ReLUs fused: {len(traced.relus)} ({relu_elems:,d} elements an image; the store "
          f"path's RELU of the layer before each, bpsa.torch.fusion)")
    print(f"host operations: {len(traced.host_ops)}")
    for op, (n, e, why) in sorted(kinds.items()):
        print(f"  {op:20s} x{n:<4d} {e:13,d} elements an image  ({why})")
