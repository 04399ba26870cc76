"""``bpsa train``: a PyTorch model (``--model``; by default the digits CNN as an
``nn.Module``) trained through the accelerator in its arithmetic (:func:`bpsa.torch.train.train`,
on the simulated RTL or its golden model) next to plain PyTorch; with ``--numpy-loop`` the
digits CNN in the hand-written loops (:func:`bpsa.host.digits.training_run`,
:func:`bpsa.host.digits_float.training_run`)."""

import json
import sys
import warnings
from pathlib import Path

from bpsa.cli.args import (UserError, config_of, float_above, int_at_least, parent_dir,
                           plot_path, preset_list)
from bpsa.config import ARITHMETICS

__all__ = ["register", "run"]


def register(sub):
    """Add the ``train`` sub-parser to ``sub``."""
    sp = sub.add_parser("train", help="train a PyTorch model (default: the digits CNN) "
                                      "through the accelerator in its arithmetic, on the "
                                      "simulated RTL or its golden model, next to PyTorch",
                        epilog="examples: bpsa train --dataset digits --backend rtl; bpsa "
                               "train --model bpsa.torch.models:lenet_digits --dataset digits "
                               "--arithmetic bf16 --optimizer adam --lr 0.003; bpsa train "
                               "--dataset digits --numpy-loop --epochs 15 --backend rtl")
    sp.add_argument("--dataset", required=True, metavar="digits|PKG.MODULE:FACTORY",
                    help="digits: scikit-learn's 8 x 8 handwritten digits; with --model also "
                         "a factory returning (train, test) PyTorch datasets")
    sp.add_argument("--model", metavar="PKG.MODULE:FACTORY",
                    help="train this nn.Module through the accelerator (bpsa.torch.offload, "
                         "which trains a copy: the model's own weights do not change), "
                         "next to the same model in PyTorch float32, e.g. "
                         "bpsa.torch.models:lenet_digits (docs/guides/pytorch.md; default: the "
                         "digits CNN, bpsa.torch.models:digits_cnn)")
    sp.add_argument("--optimizer", choices=["sgd", "adam"], default="sgd",
                    help="the torch.optim optimizer (default: sgd; not with --numpy-loop)")
    sp.add_argument("--lr", type=float_above(0), default=None,
                    help="the learning rate (default: 2**-lr-shift; not with --numpy-loop)")
    sp.add_argument("--backend", choices=["rtl", "model"], default="model",
                    help="rtl: the convolutions on the accelerator under Verilator; model: the "
                         "same integers in numpy (default)")
    sp.add_argument("--config", default="ecp5_train",
                    help=f"preset ({preset_list()}) or TOML file with signed 16-bit operands "
                         "(default: ecp5_train)")
    sp.add_argument("--arithmetic", choices=ARITHMETICS, default=None,
                    help="the configuration's number format replaced (bf16, fp16: floating "
                         "point, fp32 master weights on the host; "
                         "docs/architecture/floating_point.md; mxint8, mxfp8_e4m3: OCP MX "
                         "block formats, docs/architecture/mx.md). "
                         "Default: the configuration's own")
    sp.add_argument("--mx-scale-rule", choices=["floor", "ceil"], default="floor",
                    help="an MX arithmetic's block scale: floor (OCP MX 6.3, default) or ceil "
                         "(rounded up, so that no element saturates)")
    sp.add_argument("--epochs", type=int_at_least(1), default=15, help="default: 15")
    sp.add_argument("--batch", type=int_at_least(1), default=32,
                    help="default: 32 (with --numpy-loop a power of two)")
    sp.add_argument("--lr-shift", type=int_at_least(0), default=2,
                    help="learning rate 2**-S (default: 2)")
    sp.add_argument("--seed", type=int_at_least(0), default=0,
                    help="the split, the initial weights and the order (default: 0)")
    sp.add_argument("--plot", metavar="FILE.png",
                    help="loss and accuracy curves (default: build/train/digits_<backend>.png)")
    sp.add_argument("--no-reference", action="store_true",
                    help="skip the PyTorch float32 run")
    sp.add_argument("--numpy-loop", action="store_true",
                    help="the digits CNN in the hand-written loop of docs/guides/train.md (integer "
                         "softmax and fixed-point SGD; with --arithmetic bf16 fp32 master "
                         "weights in numpy) instead of PyTorch through bpsa.torch.offload")
    sp.add_argument("--json", action="store_true", help="print one JSON object")
    sp.set_defaults(func=run)


def run(args):
    """Train, draw the curves and print the accuracy a epoch and the cycles a step (or one
    JSON object)."""
    from bpsa.host import digits
    from bpsa.tools.perf_plots import plot_training
    from bpsa.host import digits_float
    if args.model is not None and args.numpy_loop:
        raise UserError("--numpy-loop trains the digits CNN, not --model")
    if not args.numpy_loop:                 # the digits CNN as an nn.Module, offloaded
        if args.model is None and args.dataset != "digits":
            raise UserError(f"--dataset {args.dataset!r}: without --model, give digits")
        args.model = args.model or "bpsa.torch.models:digits_cnn"
        return _run_model(args)
    if args.dataset != "digits":
        raise UserError(f"--dataset {args.dataset!r}: --numpy-loop trains on digits")
    if args.mx_scale_rule != "floor":
        raise UserError("--mx-scale-rule applies to an MX arithmetic through --model")
    if args.lr is not None or args.optimizer != "sgd":
        raise UserError("--lr and --optimizer apply to PyTorch's loop (--numpy-loop takes "
                        "--lr-shift and SGD)")
    config = config_of(args)
    try:
        (digits_float.FloatModelOps if config.is_float else digits.ModelOps)(config)
    except ValueError as e:
        raise UserError(str(e)) from None
    if args.batch & (args.batch - 1):
        raise UserError(f"--batch {args.batch}: give a power of two")
    tag = f"{args.backend}_{config.arithmetic}" if config.is_float else args.backend
    plot = plot_path(str(Path(args.plot or f"build/train/digits_{tag}.png")))
    parent_dir(plot)
    simulate = None
    if args.backend == "rtl":
        import bpsa
        simulate = bpsa.simulate
    kw = dict(simulate=simulate, epochs=args.epochs, batch=args.batch, seed=args.seed,
              reference=not args.no_reference, progress=not args.json)
    if config.is_float:
        result = digits_float.training_run(config, lr=2.0 ** -args.lr_shift, **kw)
    else:
        result = digits.training_run(config, lr_shift=args.lr_shift, **kw)
    history, reference = result.history, result.reference
    plot_training(history, reference, plot, f"{args.backend}, {config.arithmetic}",
                  [("PyTorch bf16 autocast", result.reference_bf16)]
                  if result.reference_bf16 else ())
    summary = dict(result.summary(), plot=str(plot))
    if args.json:
        print(json.dumps(summary, sort_keys=True))
        return
    _print_epochs(history, reference, "reference")
    why = result.reference_missing or "--no-reference"
    print(f"test accuracy {summary['test_accuracy']:.3f} ({args.backend} backend on "
          f"{config.name})" + (f", PyTorch float32 {summary['reference_accuracy']:.3f}"
                               if reference else f", no PyTorch reference ({why})")
          + (f", PyTorch bf16 autocast {summary['reference_bf16_accuracy']:.3f}"
             if result.reference_bf16 else ""))
    print(f"{summary['cycles_per_step']:,d} accelerator cycles a step of {args.batch}, "
          f"{summary['cycles_per_epoch']:,d} an epoch ({result.cycles_source}); "
          f"curves: {plot}")


def _print_epochs(history, reference, label):
    """A line an epoch: the loss, the train and test accuracy, the reference's test accuracy."""
    for h in history:
        print(f"epoch {h['epoch']:3d}  loss {h['loss']:.4f}  train {h['train_accuracy']:.3f}  "
              f"test {h['test_accuracy']:.3f}"
              + (f"  {label} {reference[h['epoch'] - 1]['test_accuracy']:.3f}"
                 if reference else ""))


def _run_model(args):
    """``bpsa train --model``: :func:`bpsa.torch.train.train`, its curves and summary."""
    try:
        import torch
    except ImportError:
        raise UserError("--model needs PyTorch: pip install 'backprop-systolic[torch]' (make "
                        "install does)") from None
    from bpsa.tools.perf_plots import plot_training
    from bpsa.torch.trace import load_factory
    from bpsa.torch.train import load_datasets, train
    config = config_of(args, mx=True)
    if args.mx_scale_rule != "floor" and not config.is_mx:
        raise UserError(f"--mx-scale-rule applies to an MX arithmetic, not "
                        f"{config.arithmetic!r}")
    name = args.model.rpartition(":")[2]
    plot = plot_path(str(Path(args.plot or f"build/train/{name}_{args.backend}.png")))
    parent_dir(plot)
    try:
        torch.manual_seed(args.seed)        # the factory's initial weights, reproducibly
        model = load_factory(args.model)
        train_set, test_set = load_datasets(args.dataset, args.seed)
        # the layers kept in PyTorch are a note, also when warnings are errors
        with warnings.catch_warnings(record=True) as notes:
            warnings.filterwarnings("always", message="these layers stay in PyTorch")
            result = train(model, train_set, test_set, config=config, backend=args.backend,
                           epochs=args.epochs, batch=args.batch,
                           lr=args.lr if args.lr is not None else 2.0 ** -args.lr_shift,
                           optimizer=args.optimizer, seed=args.seed, progress=not args.json,
                           reference=not args.no_reference, mx_scale_rule=args.mx_scale_rule)
    except ValueError as e:
        raise UserError(str(e)) from None
    for note in notes:
        print(f"bpsa: note: {note.message}", file=sys.stderr)
    history, reference = result["history"], result["reference"]
    plot_training(history, reference, plot, f"{args.backend}, {config.arithmetic}")
    summary = {k: v for k, v in result.items() if k != "model"}
    summary.update(model=args.model, arithmetic=config.arithmetic)
    if config.is_mx:
        summary["mx_scale_rule"] = args.mx_scale_rule
    summary.update(plot=str(plot), epochs=args.epochs, test_accuracy=history[-1]["test_accuracy"],
                   reference_accuracy=reference[-1]["test_accuracy"] if reference else None)
    if args.json:
        print(json.dumps(summary, sort_keys=True))
        return
    _print_epochs(history, reference, "PyTorch float32")
    print(f"{name} on {config.name} ({args.backend}): test accuracy "
          f"{summary['test_accuracy']:.3f}"
          + (f", PyTorch float32 {summary['reference_accuracy']:.3f}" if reference else "")
          + (f"; {result['cycles_per_step']:,d} accelerator cycles a step of {args.batch} "
             if result["cycles_per_step"] is not None else "; ")
          + f"({result['cycles_source']}); layers offloaded: {len(result['offloaded'])}"
          + (f", kept in PyTorch: {', '.join(result['kept'])}" if result["kept"] else "")
          + f"; curves: {plot}")
