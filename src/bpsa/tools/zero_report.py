"""Zero-space report: how much of the explicitly lowered backpropagation matrices is zeros.

For every layer of a workloads CSV with ``stride >= 2`` (by default), this measures the fraction
of structural zero-space elements (inserted or padding zeros) in the operands that a traditional
im2col accelerator builds (orientations of :mod:`bpsa.models.golden`):

- loss (dX):     A = rotated, channel-transposed W, C x (K*R*S);
                 B = zero-spaced dY windows, (K*R*S) x (N*H*W)   <- BP-im2col's "matrix B"
- gradient (dW): A = dilated dY, K x (N*Hd*Wd)                   <- BP-im2col's "matrix A";
                 B = zero-padded X windows, (N*Hd*Wd) x (C*R*S)

Full-size layers are too big to materialise, but the zero pattern is the same for every channel
and batch element, so each lowering is built once with all-ones tensors and C = K = N = 1, its
masks counted, the counts scaled to the layer's channels, and checked against the closed form
:func:`bpsa.models.golden.structural_zero_counts`.

Usage: ``python -m bpsa.tools.zero_report [--csv PATH] [--json] [--batch N] [--min-stride S]``
"""

import argparse
import csv
import json
import sys
from importlib import resources
from pathlib import Path

import numpy as np

from bpsa.models import golden

__all__ = ["DEFAULT_CSV", "load_layers", "zero_fractions", "main"]

#: The layer shapes shipped inside the package (``bpsa/workloads/conv_layers.csv``).
DEFAULT_CSV = resources.files("bpsa") / "workloads" / "conv_layers.csv"

_INT_FIELDS = ("C", "H", "W", "K", "R", "S", "stride", "pad", "dilation")


def load_layers(path=DEFAULT_CSV):
    """Rows of a workloads CSV (``network,layer,C,H,W,K,R,S,stride,pad,dilation``) as dicts, with
    the numeric fields converted to ``int``."""
    with (path if hasattr(path, "open") else Path(path)).open(newline="") as f:
        rows = list(csv.DictReader(f))
    for row in rows:
        for key in _INT_FIELDS:
            row[key] = int(row[key])
    return rows


def _ones(shape):
    return np.ones(shape, dtype=np.int64)


def zero_fractions(layer_row, *, batch=1):
    """Structural zero fractions of the lowered loss and gradient operands of one layer.

    ``layer_row`` is a mapping with the workloads CSV fields ``C, H, W, K, R, S, stride, pad,
    dilation`` (ints or numeric strings; ``network`` and ``layer`` are copied if present).
    ``batch`` is N (it only changes ``loss_both``, since the loss A matrix does not grow with N).

    Returns a dict with the fractions (floats in [0, 1])

    - ``loss_b``, ``loss_a``, ``loss_both``: loss B (zero-spaced dY), loss A (rotated W, no
      zeros), and both operands together;
    - ``grad_a``, ``grad_b``, ``grad_both``: gradient A (dilated dY), gradient B (padded X),
      and both together;

    and the exact integer counts behind them: ``{loss,grad}_{a,b}_{zeros,size}``.
    """
    c, h, w, k, r, s_, stride, pad, dil = (int(layer_row[f]) for f in _INT_FIELDS)
    n = int(batch)
    if n < 1:
        raise ValueError(f"batch must be >= 1, not {batch!r}")
    oh, ow = golden.output_hw((h, w), (r, s_), stride, pad, dil)

    loss = golden.lower_input_grad(_ones((1, 1, oh, ow)), _ones((1, 1, r, s_)), (h, w),
                                   stride, pad, dil)
    grad = golden.lower_weight_grad(_ones((1, 1, h, w)), _ones((1, 1, oh, ow)), (r, s_),
                                    stride, pad, dil)
    # Scale the one-channel counts: loss B repeats per (k, n), gradient A per (k, n),
    # gradient B per (n, c); loss A (the kernel) has no zero-spaces.
    counts = {
        "loss_a_zeros": 0, "loss_a_size": c * k * r * s_,
        "loss_b_zeros": k * n * int(loss.b_zero.sum()), "loss_b_size": k * n * loss.b.size,
        "grad_a_zeros": k * n * int(grad.a_zero.sum()), "grad_a_size": k * n * grad.a.size,
        "grad_b_zeros": n * c * int(grad.b_zero.sum()), "grad_b_size": n * c * grad.b.size,
    }
    assert not loss.a_zero.any()
    kw = {"in_channels": c, "out_channels": k, "batch": n}
    for phase, pre in (("loss", "loss"), ("gradient", "grad")):
        closed = golden.structural_zero_counts(phase, (h, w), (r, s_), stride, pad, dil, **kw)
        for key, value in closed.items():
            if counts[f"{pre}_{key}"] != value:
                raise RuntimeError(f"{pre}_{key}: mask count {counts[f'{pre}_{key}']} != "
                                   f"closed form {value} for layer {dict(layer_row)}")

    out = {key: layer_row[key] for key in ("network", "layer") if key in layer_row}
    for pre in ("loss", "grad"):
        za, sa = counts[f"{pre}_a_zeros"], counts[f"{pre}_a_size"]
        zb, sb = counts[f"{pre}_b_zeros"], counts[f"{pre}_b_size"]
        out[f"{pre}_a"] = za / sa
        out[f"{pre}_b"] = zb / sb
        out[f"{pre}_both"] = (za + zb) / (sa + sb)
    out.update(counts)
    return out


def _table(rows, results):
    head = (f"{'network':<14}{'layer':<22}{'C':>5}{'HxW':>8}{'K':>6}{'RxS':>6}{'s':>3}{'p':>3}"
            f" | {'loss B':>7}{'loss A':>7}{'A+B':>7} | {'grad A':>7}{'grad B':>7}{'A+B':>7}")
    lines = [head, "-" * len(head)]
    for row, res in zip(rows, results):
        kernel = f"{row['R']}x{row['S']}"
        lines.append(
            f"{row['network']:<14}{row['layer']:<22}{row['C']:>5}"
            f"{row['H']:>4}x{row['W']:<3}{row['K']:>6}{kernel:>6}"
            f"{row['stride']:>3}{row['pad']:>3}"
            f" | {100 * res['loss_b']:>6.2f}%{100 * res['loss_a']:>6.2f}%"
            f"{100 * res['loss_both']:>6.2f}%"
            f" | {100 * res['grad_a']:>6.2f}%{100 * res['grad_b']:>6.2f}%"
            f"{100 * res['grad_both']:>6.2f}%")
    lines.append("-" * len(head))
    for key, name in (("loss_b", "loss B"), ("grad_a", "grad A")):
        vals = [res[key] for res in results]
        lines.append(f"{name}: {100 * min(vals):.2f}% to {100 * max(vals):.2f}% structural zeros "
                     f"over {len(vals)} layers")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m bpsa.tools.zero_report",
        description="Structural zero fraction of explicitly lowered backpropagation matrices.")
    parser.add_argument("--csv", type=Path, default=DEFAULT_CSV,
                        help=f"workloads CSV (default: {DEFAULT_CSV.name} in bpsa/workloads)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--batch", type=int, default=1, help="batch size N (default 1)")
    parser.add_argument("--min-stride", type=int, default=2,
                        help="only layers with stride >= this (default 2)")
    args = parser.parse_args(argv)
    rows = [row for row in load_layers(args.csv) if row["stride"] >= args.min_stride]
    results = [zero_fractions(row, batch=args.batch) for row in rows]
    if args.json:
        json.dump(results, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(f"Structural zero-space fraction, batch {args.batch}, layers with stride >= "
              f"{args.min_stride} of {args.csv.name}")
        print(_table(rows, results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
