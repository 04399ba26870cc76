"""What every ``bpsa`` command shares: the one-line user error, the parser, argument types and
the checks of paths and configurations.

A command module (:mod:`bpsa.cli.verilog`, ...) adds its sub-parser with ``register(sub)``
and does its work in ``run(args)``; it raises :class:`UserError` for a bad input, which
:func:`bpsa.cli.main` prints as one line with exit status 2.
"""

import argparse
import dataclasses
import sys
from pathlib import Path

from bpsa.config import (ARITHMETICS, FLOAT_WIDTHS, MX_TOP_NAMES, MX_WIDTHS, ConfigError,
                         load_config)

__all__ = ["PLOT_SUFFIXES", "Parser", "UserError", "add_config", "bounded", "config_of",
           "float_above", "int_at_least", "network_names", "out_dir", "parent_dir",
           "plot_path", "preset_list", "version"]

#: The suffixes a ``--plot`` file may have (matplotlib picks the format by them).
PLOT_SUFFIXES = (".png", ".svg", ".pdf")


class UserError(Exception):
    """An error caused by the user's input: printed as one line, exit status 2."""


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors (``bpsa <command>: error: ...``, exit status 2), like
    :class:`UserError`'s."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def bounded(cast, lo, strict):
    """An argparse ``type``: a ``cast`` value (int, float) >= ``lo`` (above it, ``strict``)."""
    noun = "an integer" if cast is int else "a number"

    def parse(text):
        try:
            value = cast(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {noun}") from None
        if value < lo or (strict and value == lo):
            raise argparse.ArgumentTypeError(
                f"{value:g} is {'not above' if strict else 'below'} {lo:g}")
        return value
    return parse


def int_at_least(lo):
    """An argparse ``type``: an integer >= ``lo``."""
    return bounded(int, lo, strict=False)


def float_above(lo):
    """An argparse ``type``: a number above ``lo``."""
    return bounded(float, lo, strict=True)


def network_names():
    """The names of the networks the package ships (for ``--network``'s help)."""
    from bpsa.spec.network import network_names
    return network_names()


def preset_list():
    """The preset names, comma-separated (for ``--config``'s help)."""
    from bpsa.config import preset_names
    return ", ".join(preset_names())


def add_config(sp):
    """Add ``--config`` (a preset or a TOML file, default ``small``) and ``--arithmetic`` (its
    number format replaced) to the sub-parser ``sp``."""
    sp.add_argument("--config", default="small",
                    help=f"preset name ({preset_list()}) or path to a TOML file "
                         "(default: small)")
    sp.add_argument("--arithmetic", choices=ARITHMETICS, default=None,
                    help="the configuration's number format replaced: int, or bf16 / fp16 "
                         "operands with fp32 accumulators (operand_width 16, acc_width 32; "
                         "docs/architecture/floating_point.md; the dataflows and front ends not "
                         "built in floating point yet are left out, with a note), or an OCP MX "
                         "format (docs/architecture/mx.md; built in the tops "
                         f"{'|'.join(MX_TOP_NAMES)} so far: bpsa verilog and bpsa synth). "
                         "Default: the configuration's own")


def out_dir(path):
    """``path`` as a directory the command can write (created when missing), or
    :class:`UserError` naming why not."""
    out = Path(path)
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / ".bpsa_write_test"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        raise UserError(f"-o {path}: cannot write there ({e.strerror or e})") from None
    return out


def parent_dir(path):
    """Make sure the directory of the file ``path`` can be written (:func:`out_dir`)."""
    parent = Path(path).parent
    return out_dir(parent if str(parent) else ".")


def plot_path(text):
    """``--plot`` ``text`` as a :class:`~pathlib.Path`, or :class:`UserError` when its suffix
    is not one of :data:`PLOT_SUFFIXES`."""
    path = Path(text)
    if path.suffix not in PLOT_SUFFIXES:
        raise UserError(f"--plot {text!r}: the file must end in .png, .svg or .pdf")
    return path


def version():
    """The installed ``backprop-systolic`` version, ``unknown`` in a source tree without an
    install."""
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("backprop-systolic")
    except PackageNotFoundError:          # running from a source tree without install
        return "unknown"


def config_of(args, *, mx=False):
    """The configuration of ``args.config`` (:func:`bpsa.config.load_config`), or
    :class:`UserError` ``invalid configuration: ...``. An MX configuration is refused unless
    ``mx`` (the commands that generate the blocks built in MX)."""
    config = _config_of(args)
    if config.is_mx and not mx:
        raise UserError(f"arithmetic {config.arithmetic!r} is built in the tops "
                        f"{', '.join(MX_TOP_NAMES)} only so far: bpsa verilog, bpsa synth, "
                        f"bpsa regmap, bpsa sim --gemm, bpsa sim --phase forward|loss|gradient|"
                        f"step (the accelerator), bpsa sim --engine --phase forward --im2col "
                        f"channel_first, bpsa sim --engine --phase gradient --mode zero_free "
                        f"and bpsa fuzz take it, and bpsa train --model on the golden model "
                        f"(docs/architecture/mx.md)")
    return config


def _config_of(args):
    try:
        config = load_config(args.config)
    except ConfigError as e:
        raise UserError(f"invalid configuration: {e}") from None
    arithmetic = getattr(args, "arithmetic", None)
    if arithmetic is None or arithmetic == config.arithmetic:
        return config
    changes = {"arithmetic": arithmetic, "name": f"{config.name}_{arithmetic}"}
    if arithmetic in MX_WIDTHS:
        changes.update(zip(("operand_width", "acc_width"), MX_WIDTHS[arithmetic]))
        changes.update(operand_signed=arithmetic == "mxint8")
        # the accelerator in MX runs the front ends built in MX (bpsa.gateware.accelerator.
        # check_mx): the channel-first front end and the zero-free gradient, and said so
        if "ws" in config.dataflows and "os" in config.dataflows and (
                not config.has_frontend("channel_first")
                or config.backward_modes != ("zero_free",)):
            changes.update(forward_frontends=("feeder", "channel_first"),
                           backward_modes=("zero_free",))
            print(f"bpsa: --arithmetic {arithmetic}: the accelerator in MX generates the "
                  f"channel-first front end and the zero-free gradient (forward_frontends "
                  f"feeder, channel_first; backward_modes zero_free)", file=sys.stderr)
    elif arithmetic in FLOAT_WIDTHS:
        changes.update(zip(("operand_width", "acc_width"), FLOAT_WIDTHS[arithmetic]))
        # what floating point does not build yet is left out, and said so
        dropped = [d for d in config.dataflows if d != "os"] + \
            [f for f in config.forward_frontends if f != "feeder"]
        if dropped:
            changes.update(dataflows=("os",), forward_frontends=("feeder",),
                           backward_modes=None)
            print(f"bpsa: --arithmetic {arithmetic}: {config.name}'s "
                  f"{', '.join(dropped)} not built in floating point yet; left out",
                  file=sys.stderr)
    elif config.is_float or config.is_mx:
        changes.update(operand_width=16, acc_width=32, operand_signed=True)
    try:
        return dataclasses.replace(config, **changes)
    except ConfigError as e:
        raise UserError(f"--arithmetic {arithmetic} with --config {args.config}: {e}") from None
