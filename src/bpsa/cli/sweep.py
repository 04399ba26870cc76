"""``bpsa sweep``: a grid of configurations on a network with the cycle model, on Dask
(:mod:`bpsa.tools.sweep`): a CSV and a Pareto plot of step time against area."""

import json
import sys
import time
from pathlib import Path

from bpsa.cli.args import (UserError, config_of, float_above, int_at_least, network_names,
                           parent_dir, plot_path, preset_list)

__all__ = ["register", "run"]


def register(sub):
    """Add the ``sweep`` sub-parser to ``sub``."""
    sp = sub.add_parser("sweep", help="a grid of configurations on a whole network with the "
                                      "cycle model, in parallel on Dask: CSV and a Pareto plot "
                                      "of step time against area",
                        epilog="example: bpsa sweep --config paper16 --network resnet50 --grid "
                               "rows=8,16,32 cols=4,8,16 buf_a_depth=1024,4096,16384")
    sp.add_argument("--config", default="paper16",
                    help=f"the base configuration, a preset ({preset_list()}) or a TOML file "
                         "(default: paper16)")
    sp.add_argument("--grid", nargs="+", required=True, metavar="FIELD=V1,V2",
                    help="configuration fields and their values (tuple fields join values "
                         "with +: dataflows=os+ws)")
    sp.add_argument("--network", default="resnet50", metavar="NAME|FILE.csv",
                    help="one of " + ", ".join(network_names()) + ", or a network file "
                         "(default: resnet50)")
    sp.add_argument("--batch", type=int_at_least(1), default=1, help="batch (default: 1)")
    sp.add_argument("--phases", default="forward,loss,gradient",
                    help="phases of the training step (default: all three)")
    sp.add_argument("--clock", type=float_above(0), default=100.0, metavar="MHZ",
                    help="clock for the step time (default: 100)")
    sp.add_argument("--scheduler", metavar="ADDRESS",
                    help="a running Dask scheduler (tcp://host:8786); default: a LocalCluster "
                         "on this machine")
    sp.add_argument("--workers", type=int_at_least(1), default=2,
                    help="LocalCluster worker processes (default: 2)")
    sp.add_argument("-o", "--output", metavar="FILE.csv",
                    help="the CSV (default: build/sweep/<network>_<config>.csv); rows are "
                         "appended as points finish, and a rerun skips the points in it")
    sp.add_argument("--plot", metavar="FILE.png|.svg",
                    help="the Pareto plot (default: the CSV's name with .png)")
    sp.add_argument("--synth", action="store_true",
                    help="area from Yosys (generic cells of each configuration, minutes "
                         "each) instead of the area model")
    sp.add_argument("--rtl-sample", type=int_at_least(0), default=0, metavar="K",
                    help="re-run K random (configuration, layer, phase) points, layers capped "
                         "to 32 channels and 16 x 16, through the RTL and report the model's "
                         "error (a Verilator build a configuration)")
    sp.add_argument("--quiet", action="store_true", help="no progress bar")
    sp.add_argument("--json", action="store_true", help="print one JSON object")
    sp.set_defaults(func=run)


def run(args):
    """Run the grid's points (resuming the CSV), plot the Pareto front and print it; exit
    status 1 when a point failed or the RTL sample differs from the golden model."""
    from bpsa.models.network_perf import PHASES
    from bpsa.spec.network import NetworkError, load_network
    from bpsa.tools import sweep
    base = config_of(args)
    phases = args.phases.split(",")
    if not phases or any(p not in PHASES for p in phases):
        raise UserError(f"--phases {args.phases!r}: give a comma list of {', '.join(PHASES)}")
    try:
        net = load_network(args.network)
        points = sweep.parse_grid(args.grid, base)
    except (NetworkError, sweep.GridError) as e:
        raise UserError(str(e)) from None
    out = Path(args.output or f"build/sweep/{net.name}_{base.name}.csv")
    if out.suffix != ".csv":
        raise UserError(f"-o {str(out)!r}: the sweep writes a .csv file")
    parent_dir(out)
    plot = plot_path(str(Path(args.plot) if args.plot else out.with_suffix(".png")))
    t0 = time.perf_counter()
    try:
        rows, failed = sweep.run_sweep(
            base, points, net, out, batch=args.batch, phases=phases, clock_mhz=args.clock,
            scheduler=args.scheduler, workers=args.workers,
            synth_dir=out.with_suffix("") if args.synth else None, progress=not args.quiet)
    except sweep.GridError as e:
        raise UserError(str(e)) from None
    wall = time.perf_counter() - t0
    rows, front = sweep.grid_front(rows, points, plot, base=base, network=net,
                                   batch=args.batch)
    sample = []
    if args.rtl_sample:
        sample = sweep.rtl_sample(base, points, net, args.rtl_sample, batch=1,
                                  progress=not args.quiet)
    if args.json:
        print(json.dumps({"points": len(points), "rows": rows, "pareto": front,
                          "failed": failed, "rtl_sample": sample, "seconds": wall,
                          "csv": str(out), "plot": str(plot)}, sort_keys=True, default=str))
    else:
        print(f"{len(rows)} of {len(points)} configurations of {net.name} in {wall:.1f} s: "
              f"{out}, Pareto plot {plot}")
        print(f"Pareto front (step time against area, {len(front)} points):")
        for r in front:
            print(f"  {r['label']:48s} {r['seconds'] * 1e3:12,.2f} ms  util "
                  f"{r['utilization']:.3f}  area {r['area']:14,.0f}  "
                  f"{r['energy_uj'] / 1e3:10,.1f} mJ")
        for r in sample:
            print(f"RTL sample: {r['label']}, {r['layer']} {r['phase']}: model {r['model']:,d}, "
                  f"RTL {r['rtl']:,d} ({r['error']:+.1%}), results "
                  f"{'match' if r['match'] else 'DIFFER'}")
        if sample:
            err = [abs(r["error"]) for r in sample]
            print(f"model error on the RTL sample: mean {sum(err) / len(err):.1%}, worst "
                  f"{max(err):.1%}")
    if failed:
        for label, why in failed:
            print(f"bpsa: point {label} failed: {why}", file=sys.stderr)
        print("bpsa: finished points are in the CSV; run the same command again to resume",
              file=sys.stderr)
        sys.exit(1)
    if sample and not all(r["match"] for r in sample):
        sys.exit(1)
