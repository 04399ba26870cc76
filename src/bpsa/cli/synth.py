"""``bpsa synth``: Yosys area reports (:mod:`bpsa.tools.synth`) as Markdown and JSON."""

import sys

from bpsa.cli.args import UserError, add_config, config_of, out_dir

__all__ = ["register", "run"]


def register(sub):
    """Add the ``synth`` sub-parser to ``sub``."""
    from bpsa.platform.tops import TOPS
    sp = sub.add_parser("synth", help="Yosys area report (Markdown and JSON)")
    add_config(sp)
    sp.add_argument("--top", default="pe", choices=sorted(TOPS),
                    help="component to synthesize (default: pe)")
    sp.add_argument("-o", "--output", default=None,
                    help="output directory (default: build/synth/<configuration name>, so "
                         "two configurations never overwrite each other's report)")
    sp.add_argument("--targets", nargs="+", default=["generic", "ice40", "ecp5"],
                    choices=["generic", "ice40", "ecp5"], help="synthesis targets")
    sp.add_argument("--timing", action="store_true",
                    help="also a timing estimate: Fmax of the block on the ECP5-85F, nextpnr "
                         "out of context at a 100 MHz constraint (the block alone; minutes "
                         "for an array, longer for the accelerator)")
    sp.add_argument("--pe-overheads", action="store_true",
                    help="synthesize PE variants (plain MAC, + zero gating, + reserve "
                         "registers, + held-operand dataflows, + interleave) and report "
                         "overheads over the plain PE")
    sp.add_argument("--array-overheads", action="store_true",
                    help="synthesize the whole array (--config size) in the same variants, "
                         "keeping the hierarchy and synthesizing identical PEs once, and report "
                         "overheads over the plain OS array")
    sp.add_argument("--report", action="store_true",
                    help="whole-design report: every block (pe ... accelerator, --top is "
                         "ignored), hierarchical, with shares of the accelerator, composite "
                         "blocks' parts and the feature-overhead table (PE and array variants, "
                         "feeder, BP-im2col vs im2col) next to the papers' figures; writes "
                         "design_report.md and design_report.json")
    sp.add_argument("--blocks", nargs="+", default=None, metavar="BLOCK",
                    help="--report: only these blocks (default: pe array feeder bp_loss_addr "
                         "bp_grad_addr im2col_addr conv_forward conv_backward axil_regs dma "
                         "controller accelerator)")
    sp.set_defaults(func=run)


def run(args):
    """Synthesize one block (or ``--report``, ``--pe-overheads``, ``--array-overheads``) and
    print the Markdown report."""
    from bpsa.platform.verilog import TOPS
    from bpsa.tools import overheads, synth
    from bpsa.tools.yosys import ToolError
    if args.top not in TOPS:
        raise UserError(f"--top must be one of {sorted(TOPS)}, not {args.top!r}")
    config = config_of(args, mx=True)
    if args.pe_overheads + args.array_overheads + args.report > 1:
        raise UserError("give only one of --report, --pe-overheads and --array-overheads")
    if args.blocks and not args.report:
        raise UserError("--blocks applies only to --report")
    if args.timing and (args.report or args.pe_overheads or args.array_overheads):
        raise UserError("--timing applies to one block's report (not --report or the "
                        "overhead tables)")
    args.output = str(out_dir(args.output or f"build/synth/{config.name}"))
    try:
        if args.report:
            report = synth.design_report(config, args.output, targets=args.targets,
                                         blocks=args.blocks or synth.DESIGN_BLOCKS)
        elif args.pe_overheads:
            report = overheads.pe_overhead_report(config, args.output, targets=args.targets)
        elif args.array_overheads:
            report = overheads.array_overhead_report(config, args.output,
                                                     targets=args.targets)
        else:
            report = synth.synth_report(config, args.top, args.output, targets=args.targets,
                                        timing=args.timing)
    except ToolError as e:          # a tool's failure: one line naming the step and its log
        print(f"bpsa: error: {e.summary}", file=sys.stderr)
        sys.exit(1)
    print(report.markdown_path.read_text(), end="")
    print(f"wrote {report.markdown_path} and {report.json_path}")
