"""``python -m bpsa.tools.float_training``: the digits CNN trained in bf16 on the accelerator's
model (bit-identical to its RTL), in int16 on the integer accelerator's model, and in PyTorch
float32 and bf16 autocast; the four curves in one figure and a JSON of the histories
(``make train-float``; writes ``docs/figures/training_bf16.png`` and
``docs/results/training/bf16.json``, stamped with the command, commit and date, which
``python -m bpsa.tools.results training`` turns into ``docs/results/training.md``)."""

import argparse
import json
from pathlib import Path

from bpsa.config import load_config
from bpsa.host import digits, digits_float
from bpsa.tools.perf_plots import plot_training
from bpsa.tools.results import current_command, stamp

__all__ = ["main"]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", default="small_bf16", help="a floating-point configuration")
    ap.add_argument("--int-config", default="ecp5_train", help="the integer configuration")
    ap.add_argument("--epochs", type=int, default=15)
    ap.add_argument("--figure", default="docs/figures/training_bf16.png")
    ap.add_argument("--json", default="docs/results/training/bf16.json")
    args = ap.parse_args(argv)
    fp = digits_float.training_run(load_config(args.config), epochs=args.epochs, progress=True)
    ints = digits.training_run(load_config(args.int_config), epochs=args.epochs,
                               reference=False, progress=True)
    Path(args.figure).parent.mkdir(parents=True, exist_ok=True)
    arith = load_config(args.config).arithmetic
    plot_training(fp.history, fp.reference, args.figure, f"model = RTL, {arith}",
                  [("PyTorch bf16 autocast", fp.reference_bf16),
                   ("accelerator (model = RTL, int16)", ints.history)])
    commit, date = stamp()
    command = (current_command() if argv is None
               else " ".join(["python -m bpsa.tools.float_training", *argv]))
    out = {"command": command, "commit": commit, "date": date, "float": fp.summary(),
           "float_reference_fp32": fp.reference,
           "float_reference_bf16": fp.reference_bf16, "int16": ints.summary()}
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    print(f"{arith}: test accuracy {fp.history[-1]['test_accuracy']:.4f}; PyTorch float32 "
          f"{fp.reference[-1]['test_accuracy']:.4f}, bf16 autocast "
          f"{fp.reference_bf16[-1]['test_accuracy']:.4f}; int16 "
          f"{ints.history[-1]['test_accuracy']:.4f}; {args.figure}, {args.json}")


if __name__ == "__main__":
    main()
