"""``bpsa``: the command-line front end (generation, simulation, synthesis, reports)."""

import sys

from bpsa.cli import (bitstream, fuzz, perf, regmap, sim, sweep, synth, timing, train,
                      verilog, zeros)
from bpsa.cli.args import Parser, UserError, version
from bpsa.config import ConfigError

__all__ = ["COMMANDS", "build_parser", "main"]

#: ``bpsa --help``'s description (plain text: the module docstring is reStructuredText).
DESCRIPTION = ("bpsa: the command-line front end of backprop-systolic (generation, simulation, "
               "synthesis, reports).")

#: The command modules, in the order of ``bpsa --help``: each adds its sub-parser with
#: ``register(sub)`` and does its work in ``run(args)``.
COMMANDS = (verilog, synth, timing, sim, bitstream, fuzz, perf, regmap, sweep, train, zeros)


def build_parser():
    """The ``bpsa`` parser: ``--version`` and one sub-parser a module of :data:`COMMANDS`,
    each setting ``func`` to its ``run``."""
    p = Parser(prog="bpsa", description=DESCRIPTION,
               epilog="examples: bpsa verilog --config paper16 --top accelerator; "
                      "bpsa sim --phase loss --layer C=8,H=16,K=8,R=3,stride=2,pad=1; "
                      "bpsa perf --config paper16 --workload; bpsa regmap --format c. "
                      "Every command has its own --help.")
    p.add_argument("--version", action="version", version=f"bpsa {version()}")
    sub = p.add_subparsers(dest="command", required=True, parser_class=Parser)
    for command in COMMANDS:
        command.register(sub)
    return p


def main(argv=None):
    """Run the command of ``argv`` (default ``sys.argv[1:]``). Returns the exit status: 0, or
    2 after printing a :class:`~bpsa.cli.args.UserError` or a
    :class:`~bpsa.config.ConfigError` as one line; argparse's errors and
    the commands' failures (status 1) exit through :exc:`SystemExit`."""
    args = build_parser().parse_args(argv)
    try:
        args.func(args)
    except (UserError, ConfigError) as e:
        # ConfigError: a configuration a block refuses when it is built (e.g. a top not built
        # in the configuration's arithmetic)
        print(f"bpsa: error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:             # the reader (head, less) stopped reading
        sys.stderr.close()
        return 0
    return 0
