"""``bpsa verilog``: the Verilog of a component and its configuration JSON
(:func:`bpsa.platform.verilog.write_verilog`)."""

import sys

from bpsa.cli.args import UserError, add_config, config_of, out_dir

__all__ = ["register", "run"]


def register(sub):
    """Add the ``verilog`` sub-parser to ``sub``."""
    from bpsa.platform.tops import TOPS
    sp = sub.add_parser("verilog", help="write Verilog and the configuration JSON")
    add_config(sp)
    sp.add_argument("--top", default="pe", choices=sorted(TOPS),
                    help="component to generate (default: pe)")
    sp.add_argument("-o", "--output", default=None,
                    help="output directory (default: build/<configuration name>, so two "
                         "presets never overwrite each other)")
    sp.set_defaults(func=run)


def run(args):
    """Write ``<top>.v`` and ``<top>.json`` to ``-o`` (default ``build/<config>``)."""
    from bpsa.platform.verilog import TOPS, write_verilog
    if args.top not in TOPS:
        raise UserError(f"--top must be one of {sorted(TOPS)}, not {args.top!r}")
    config = config_of(args, mx=True)
    out = out_dir(args.output or f"build/{config.name}")
    # elaborating the accelerator takes a minute: say what is going on
    print(f"bpsa: generating the Verilog of {args.top} for {config.name} ({config.rows}x"
          f"{config.cols}) into {out}/ ...", file=sys.stderr, flush=True)
    path = write_verilog(config, args.top, out)
    print(f"wrote {path} and {path.with_suffix('.json')} ({config.name}: "
          f"{config.rows}x{config.cols}, dataflows {', '.join(config.dataflows)})")
