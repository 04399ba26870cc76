"""``bpsa zeros``: the zero fraction of the explicitly lowered loss and gradient matrices
(:mod:`bpsa.tools.zero_report`)."""

import sys

__all__ = ["register", "run"]


def register(sub):
    """Add the ``zeros`` sub-parser to ``sub``."""
    sp = sub.add_parser("zeros", help="zero fraction of explicitly lowered loss/gradient "
                                      "matrices for the stride>=2 workload layers")
    sp.add_argument("--json", action="store_true")
    sp.set_defaults(func=run)


def run(args):
    """Print the report; exits with :func:`bpsa.tools.zero_report.main`'s status."""
    from bpsa.tools import zero_report
    sys.exit(zero_report.main(["--json"] if args.json else []))
