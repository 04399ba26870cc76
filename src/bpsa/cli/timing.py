"""``bpsa timing``: every failing path of a nextpnr run, grouped by source and destination
block (:mod:`bpsa.platform.timing_paths`)."""

import json
from pathlib import Path

from bpsa.cli.args import UserError, parent_dir

__all__ = ["register", "run"]


def register(sub):
    """Add the ``timing`` sub-parser to ``sub``."""
    sp = sub.add_parser(
        "timing", help="every endpoint with negative slack in a nextpnr run, grouped by source "
                       "and destination block (one run lists every failing path class)",
        epilog="examples: bpsa timing build/bitstream/ulx3s (a `bpsa bitstream` build); "
               "bpsa timing --netlist top.json --report top.report.json. nextpnr must have "
               "run with --report FILE --detailed-timing-report (bpsa synth --timing and "
               "bpsa bitstream do).")
    sp.add_argument("build", nargs="?", default=None,
                    help="a `bpsa bitstream` build directory (its top.json and "
                         "top.report.json) or a `bpsa synth --timing` output directory (its "
                         "<top>_ecp5_timing.json and .detailed.json)")
    sp.add_argument("--netlist", default=None,
                    help="the Yosys JSON netlist nextpnr placed (instead of a directory)")
    sp.add_argument("--report", default=None,
                    help="nextpnr's JSON report with --detailed-timing-report")
    sp.add_argument("--depth", type=int, default=2,
                    help="levels of the instance hierarchy a block name keeps (default 2: "
                         "forward.feeder)")
    sp.add_argument("--root", default=None,
                    help="an instance path the block names start below (default: soc.core "
                         "for a bpsa bitstream build, none otherwise)")
    sp.add_argument("-o", "--output", default=None,
                    help="write <OUTPUT>.md and <OUTPUT>.json as well")
    sp.set_defaults(func=run)


def _find(build):
    """The netlist and detailed report in a build directory."""
    d = Path(build)
    if not d.is_dir():
        raise UserError(f"{build}: not a directory")
    for netlist, report in [(d / "top.json", d / "top.report.json")] + [
            (p.with_name(p.name.replace(".detailed.json", ".json")), p)
            for p in sorted(d.glob("*_ecp5_timing.detailed.json"))]:
        if netlist.is_file() and report.is_file():
            return netlist, report
    raise UserError(f"{build}: no top.json and top.report.json (bpsa bitstream) nor "
                    f"<top>_ecp5_timing.json and .detailed.json (bpsa synth --timing)")


def run(args):
    """Print the groups as Markdown (and write them with ``-o``)."""
    from bpsa.platform.timing_paths import failing_paths, markdown, write_report
    if args.depth < 1:
        raise UserError(f"--depth must be at least 1, not {args.depth}")
    if args.build is not None and (args.netlist or args.report):
        raise UserError("give a build directory or --netlist and --report, not both")
    root = args.root
    if args.build is not None:
        netlist, report = _find(args.build)
        if root is None and netlist.name == "top.json":       # a board top
            from bpsa.platform.board import BOARD_CORE_PATH
            root = BOARD_CORE_PATH
    elif args.netlist and args.report:
        netlist, report = Path(args.netlist), Path(args.report)
    else:
        raise UserError("give a build directory, or both --netlist and --report")
    for path in (netlist, report):
        if not path.is_file():
            raise UserError(f"{path}: no such file")
    try:
        if args.output:
            parent_dir(Path(args.output))
            result = write_report(netlist, report, args.output, depth=args.depth, root=root)
        else:
            result = failing_paths(netlist, report, depth=args.depth, root=root)
    except (ValueError, KeyError, json.JSONDecodeError) as e:
        raise UserError(f"{report}: {e}") from None
    print(markdown(result))
    if args.output:
        print(f"wrote {args.output}.md and {args.output}.json")
