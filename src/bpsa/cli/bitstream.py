"""``bpsa bitstream``: the FPGA bitstream of a board top (:mod:`bpsa.platform.board`)."""

import time

from bpsa.cli.args import UserError, out_dir

__all__ = ["register", "run"]


def register(sub):
    """Add the ``bitstream`` sub-parser to ``sub``."""
    sp = sub.add_parser("bitstream", help="FPGA bitstream of the board top (core + UART "
                                           "bridge + SRAM): Yosys, fit check, nextpnr, pack")
    sp.add_argument("--board", required=True, choices=["icebreaker", "ulx3s"])
    sp.add_argument("--config", default=None,
                    help="preset name or TOML path; 'auto': the largest preset that fits "
                         "and stays within the board's measured routable share (route_limit) "
                         "(default: the board's preset in bpsa/platform/boards/<board>.toml)")
    sp.add_argument("--core", default=None,
                    help="core as module:Class (default bpsa.gateware.accelerator:Accelerator)")
    sp.add_argument("-o", "--output", default=None,
                    help="output directory (default: build/bitstream/<board>)")
    sp.add_argument("--fit-only", action="store_true",
                    help="stop after synthesis and the fit check (no place and route)")
    sp.add_argument("--seeds", type=int, nargs="+", default=None, metavar="SEED",
                    help="place and route once a seed and keep the run that meets the clock "
                         "best (default: the board's one seed)")
    sp.add_argument("--jobs", type=int, default=2,
                    help="--seeds: nextpnr runs at once (default 2; each takes a core)")
    sp.add_argument("--router", choices=["router1", "router2"], default=None,
                    help="nextpnr's router instead of the board's (router2 routes congested "
                         "ECP5 designs where router1 stalls)")
    sp.add_argument("--clock", type=float, default=None, metavar="MHZ",
                    help="the design clock instead of the board's clock_hz (ECP5: made by "
                         "the PLL from the oscillator, exactly, or refused with a frequency "
                         "it can make)")
    sp.set_defaults(func=run)


def run(args):
    """Build the bitstream (``--config auto``: of the largest preset that fits) and print the
    report."""
    from bpsa.config import ConfigError, load_config
    from bpsa.platform import board
    t0 = time.monotonic()
    settings = board.load_board(args.board)
    out = out_dir(args.output or f"build/bitstream/{args.board}")
    try:
        core = board.load_core(args.core)
    except (ImportError, AttributeError) as e:
        raise UserError(f"core {args.core or board.DEFAULT_CORE!r} is not available ({e}); "
                        f"give --core module:Class (e.g. bpsa.platform.board_tops:StandInCore)"
                        ) from None
    if args.jobs < 1:
        raise UserError(f"--jobs must be at least 1, not {args.jobs}")
    clock_hz = None
    if args.clock is not None:
        clock_hz = round(args.clock * 1e6)
        if args.clock <= 0 or abs(clock_hz - args.clock * 1e6) > 1e-3:
            raise UserError(f"--clock must be a positive frequency in MHz with a whole number "
                            f"of Hz, not {args.clock:g}")
        try:                     # refused before anything is built
            board.with_clock(settings, clock_hz)
        except ValueError as e:
            raise UserError(f"--clock {args.clock:g}: {e}") from None
    spec = args.config or settings.config
    try:
        candidates = (board.presets_largest_first() if spec == "auto"
                      else [load_config(spec)])
    except ConfigError as e:
        raise UserError(f"invalid configuration: {e}") from None
    try:
        report = board.build_first_fit(args.board, candidates, out, core=core,
                                       fit_only=args.fit_only, route_check=spec == "auto",
                                       seeds=args.seeds, router=args.router, jobs=args.jobs,
                                       clock_hz=clock_hz)
    except board.FitError as e:
        raise UserError(str(e)) from None
    print(board.format_report(report))
    print(f"total wall time {time.monotonic() - t0:.1f} s; report {out / 'report.json'}")
