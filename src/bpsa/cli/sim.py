"""``bpsa sim``: a random problem through the generated RTL under Verilator, checked against
numpy: a GEMM on the array (:func:`bpsa.sim.simcmd.run_gemm`), a layer on an engine top
(``--engine``) or through the whole accelerator (``--phase``, :mod:`bpsa.sim.accel_run`,
:mod:`bpsa.sim.pool_run`). Prints the summary; exit status 1 when a result differs (or the
accelerator hung)."""

import argparse
import json
import sys
from contextlib import contextmanager
from dataclasses import dataclass

from bpsa.cli.args import UserError, add_config, config_of, int_at_least

__all__ = ["register", "run"]

#: The ``--layer`` syntax of a convolution, an FC layer and a pooling layer.
CONV_SYNTAX = "C=..,H=..,W=..,K=..,R=..,S=..,stride=..,pad=..,dilation=..,N=.."
FC_SYNTAX = "N=..,I=..,O=.."
POOL_SYNTAX = "C=..,H=..,W=..,R=..,S=..,stride=..,pad=..,N=..,kind=max|avg|global_avg"


def register(sub):
    """Add the ``sim`` sub-parser to ``sub``."""
    sp = sub.add_parser("sim", help="run a random problem through the generated RTL under "
                                     "Verilator and compare with numpy")
    add_config(sp)
    sp.add_argument("--gemm", metavar="M,K,N",
                    help="GEMM shape; for --dataflow interleaved: O,Bt,I (W is O x I, "
                         "batch Bt)")
    sp.add_argument("--dataflow", default="os", choices=["os", "ws", "is", "interleaved"])
    sp.add_argument("--stall", type=_probability, default=0.0, metavar="P",
                    help="--gemm in --dataflow os: an idle cycle before each slot with "
                         "probability P (a feeder that stalls; default 0)")
    sp.add_argument("--harness", choices=("native", "cocotb"), default="native",
                    help="--phase through the whole accelerator: the compiled Verilator "
                         "transport (native, fast; default) or cocotb with cocotbext-axi's bus "
                         "models")
    sp.add_argument("--simulator", choices=("verilator", "icarus"), default="verilator",
                    help="--harness cocotb: the simulator; verilator (default) or icarus "
                         "(Icarus Verilog, event-driven, when iverilog is installed: the "
                         "generated Verilog means the same there)")
    sp.add_argument("--engine", action="store_true",
                    help="run --phase on the engine top alone (ConvForward / ConvBackward, "
                         "buffers written directly) instead of the whole accelerator; with "
                         "--phase forward --im2col channel_first the channel-first engine "
                         "(cf_engine, integers or an MX format)")
    sp.add_argument("--phase", choices=["forward", "loss", "gradient", "step", "fc", "pool"],
                    default=None,
                    help="run a convolution layer (--layer) through the whole accelerator "
                         "(driver, AXI memory, DMA, tiling controller): forward (feeder + OS "
                         "array), loss|gradient (see --mode), or step (all three); "
                         "fc (--layer N=..,I=..,O=..: an FC layer's dX and dW in one "
                         "interleaved pass); pool (--layer C=..,H=..,W=..,R=..,S=..,stride=..,"
                         "pad=..,N=..,kind=max|avg|global_avg,relu=0|1: the pooling unit's "
                         "forward and backward); with --engine, forward|loss|gradient|fc on "
                         "the engine top alone")
    sp.add_argument("--baseline", action="store_true",
                    help="--phase fc: two descriptors (1x1 loss, then gradient) instead of "
                         "the interleaved pass; --phase loss|gradient: the traditional flow for "
                         "comparison; through "
                         "the accelerator, the driver builds the zero-spaced tensors in memory "
                         "and runs them as a forward convolution; with --engine, the zero-spaced "
                         "copy is written into the buffer and read densely")
    sp.add_argument("--mode", choices=["zero_free", "bp_im2col", "channel_first"], default=None,
                    type=lambda v: v.replace("-", "_"),
                    help="--phase loss|gradient|step through the accelerator: the backward "
                         "front end; zero_free (the zero-free walkers on the forward engine's "
                         "OS array: no inserted zero is read or multiplied) or bp_im2col (the "
                         "paper's NZ-detecting generators on the IS array); default: zero_free "
                         "when the configuration generates it; channel_first (--phase loss): "
                         "each stride class as a stride-1 forward on the channel-first front "
                         "end; with --engine --phase gradient, zero_free runs the zero-free "
                         "gradient engine (zg_engine, integers or an MX format)")
    sp.add_argument("--im2col", choices=["feeder", "channel_first"], default=None,
                    type=lambda v: v.replace("-", "_"),
                    help="--phase forward|step through the accelerator: the forward front "
                         "end; feeder (the Fornt data feeder, CHW X, OS array; default) or "
                         "channel_first (Zhou et al.'s implicit im2col: channel-blocked HWC X, "
                         "one X bank a row, WS array; configurations with forward_frontends "
                         "channel_first, e.g. small_cf and paper16)")
    sp.add_argument("--layer", metavar="C=..,H=..,W=..,K=..,R=..,S=..,stride=..,pad=..,"
                                       "dilation=..,N=..",
                    help="--phase forward|loss|gradient: the layer (W defaults to H, S to R, N "
                         "to 1, stride to 1, pad to 0, dilation to 1; stride/pad/dilation may "
                         "be HxW)")
    sp.add_argument("--seed", type=int_at_least(0), default=1,
                    help="seed of the random operands (default: 1)")
    sp.add_argument("--requant", type=int, default=None, metavar="SHIFT",
                    help="--phase forward, or loss in the zero-free mode, through the "
                         "accelerator: the output leaves as operands, shifted right by SHIFT, "
                         "rounded half up and saturated (the descriptor's REQUANT, OUT_SHIFT)")
    sp.add_argument("--sgd-shift", type=int, default=None,
                    help="interleaved / --phase fc: apply the in-place update W -= G >> SHIFT")
    sp.add_argument("--energy", action="store_true",
                    help="--phase forward|loss|gradient|step through the accelerator: the run's "
                         "energy from its counters (45 nm per-action energies, "
                         "bpsa.models.energy): energy_pj, per MAC slot, and each part's")
    sp.add_argument("--json", action="store_true", help="print one JSON object")
    sp.add_argument("--quiet", action="store_true", help="no progress bar")
    sp.add_argument("--trace", metavar="FILE.fst",
                    help="--phase through the accelerator: write an FST waveform (open it "
                         "with GTKWave or Surfer); the model is built with tracing")
    sp.add_argument("--trace-window", metavar="FIRST:LAST",
                    help="with --trace: only cycles FIRST to LAST (counted from reset)")
    sp.set_defaults(func=run)


def _probability(text):
    """An argparse ``type``: a number in [0, 1)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"{value:g} is not in [0, 1)")
    return value


def run(args):
    """Check the options, run the problem and print its summary (or one JSON object); exit
    status 1 when the result differs from numpy."""
    # MX: the array's GEMMs, the engines and the accelerator's convolution phases
    config = config_of(args, mx=args.phase is None or _cf_engine(args) or _zg_engine(args)
                       or (not args.engine and args.phase in ("forward", "loss", "gradient",
                                                              "step")))
    if args.sgd_shift is not None and config.is_mx:
        raise UserError(f"--sgd-shift: the interleaved pass's SGD step is not built in "
                        f"{config.arithmetic} (G leaves as block sums for the host's step)")
    if args.sgd_shift is not None and not 0 <= args.sgd_shift < config.acc_width:
        raise UserError(f"--sgd-shift {args.sgd_shift}: give a shift in [0, "
                        f"{config.acc_width - 1}] (acc_width {config.acc_width})")
    if args.baseline and (args.phase not in ("loss", "gradient", "fc")
                          or (args.phase == "fc" and args.engine)):
        raise UserError("--baseline applies only to --phase loss|gradient (and fc through "
                        "the accelerator)")
    if args.mode is not None and not _zg_engine(args) and (
            args.engine or args.baseline or args.phase not in ("loss", "gradient", "step")):
        raise UserError("--mode applies only to --phase loss|gradient|step through the "
                        "accelerator (not with --baseline), and as --mode zero_free to "
                        "--engine --phase gradient")
    if args.im2col is not None and (args.phase not in ("forward", "step") or (
            args.engine and (args.phase != "forward" or args.im2col != "channel_first"))):
        raise UserError("--im2col applies only to --phase forward|step through the "
                        "accelerator, and as --im2col channel_first to --engine --phase "
                        "forward")
    if args.engine and args.phase not in ("forward", "loss", "gradient", "fc"):
        raise UserError("--engine applies only to --phase forward|loss|gradient|fc")
    accelerator = args.phase is not None and not args.engine
    if (args.trace or args.trace_window) and not accelerator:
        raise UserError("--trace and --trace-window apply only to --phase through the "
                        "accelerator (not --gemm or --engine)")
    if args.harness != "native" and not accelerator:
        raise UserError("--harness applies only to --phase through the accelerator (not "
                        "--gemm or --engine)")
    if args.requant is not None and not accelerator:
        raise UserError("--requant applies to --phase forward and to the zero-free --phase "
                        "loss through the accelerator (not --gemm or --engine)")
    if args.energy and (args.engine or args.phase not in ("forward", "loss", "gradient",
                                                          "step")):
        raise UserError("--energy applies only to --phase forward|loss|gradient|step through "
                        "the accelerator")
    if args.stall and args.phase is not None:
        raise UserError("--stall applies only to --gemm in --dataflow os")
    if args.simulator != "verilator" and (args.engine or args.phase is None):
        raise UserError("--simulator applies only to --phase through the accelerator with "
                        "--harness cocotb")
    # floating point: what the accelerator cannot run (the FC's interleaved pass, the
    # BP-im2col and channel-first modes: dataflows a floating-point configuration does not
    # generate) is refused by the plan (bpsa.plan.capability.check), an engine by its top
    if args.phase is None:
        result = _gemm(args, config)
    elif _cf_engine(args):
        result = _engine_channel_first(args, config)
    elif _zg_engine(args):
        result = _engine_zero_free_gradient(args, config)
    elif args.engine:
        result = {"forward": _engine_forward, "fc": _engine_fc}.get(
            args.phase, _engine_backward)(args, config)
    else:
        from bpsa.sim.native import HangError, TraceWindowError
        try:
            result = {"fc": _accelerator_fc, "pool": _accelerator_pool}.get(
                args.phase, _accelerator)(args, config)
        except TraceWindowError as e:
            raise UserError(f"--trace-window: {e}") from None
        except HangError as e:
            print(f"bpsa: the accelerator hung: {e}", file=sys.stderr)
            sys.exit(1)
    result["config"] = config.name
    if args.trace:                  # where the waveform went
        from pathlib import Path
        result["trace"] = str(Path(args.trace).resolve())
    if args.json:
        print(json.dumps(result, sort_keys=True))
    else:
        width = max(len(k) for k in result)
        for k in sorted(result):
            v = result[k]
            print(f"{k:<{width}}  {v:.4f}" if isinstance(v, float) else f"{k:<{width}}  {v}")
    if not result["match"]:
        sys.exit(1)


def _dims(text):
    """``--gemm M,K,N``: three positive integers."""
    try:
        dims = tuple(int(x) for x in text.split(","))
    except ValueError:
        dims = ()
    if len(dims) != 3 or min(dims) < 1:
        raise UserError(f"--gemm must be three positive integers M,K,N, not {text!r}")
    return dims


def _gemm(args, config):
    """``bpsa sim --gemm M,K,N``: a random GEMM on the array in ``--dataflow``."""
    from bpsa.sim.simcmd import run_gemm
    if args.layer is not None:
        raise UserError("--layer needs --phase forward|loss|gradient")
    if args.gemm is None:
        raise UserError("give a problem: --gemm M,K,N (or --phase forward --layer ...)")
    dims = _dims(args.gemm)
    if not config.has(args.dataflow):
        raise UserError(f"dataflow {args.dataflow!r} is not generated in configuration "
                        f"{config.name!r} (dataflows {list(config.dataflows)})")
    if args.sgd_shift is not None and args.dataflow != "interleaved":
        raise UserError("--sgd-shift applies only to --dataflow interleaved")
    if args.stall and args.dataflow != "os":
        raise UserError("--stall applies only to --gemm in --dataflow os")
    return run_gemm(config, args.dataflow, dims, seed=args.seed, sgd_shift=args.sgd_shift,
                    stall=args.stall, progress=_progress(args))


@dataclass(frozen=True)
class _Path:
    """One way ``bpsa sim --phase`` runs a layer, for the guards every path shares
    (:func:`_guard`, :func:`_refusals`)."""
    #: the ``--layer`` syntax (``give a layer: --phase P --layer <syntax>``)
    syntax: str
    #: the layer's name in a refusal (``cannot run <noun> ...``)
    noun: str
    #: the options that do not apply, among ``dataflow``, ``sgd_shift`` and ``requant``
    unused: tuple
    #: the refusal when one of ``unused`` is given (``{phase}``: the ``--phase``)
    unused_message: str
    #: after ``--gemm does not apply to --phase P; give --layer`` when ``--gemm`` is given;
    #: None: the give-a-layer refusal
    gemm_hint: str | None = ""
    #: only on the native harness
    native_only: bool = False


_ENGINE_FORWARD = _Path(CONV_SYNTAX, "layer", ("dataflow", "sgd_shift"),
                        "--phase {phase} runs the os dataflow; --dataflow and --sgd-shift do "
                        "not apply")
_ENGINE_CF = _Path(CONV_SYNTAX, "layer", ("dataflow", "sgd_shift"),
                   "--phase {phase} --im2col channel_first runs the ws dataflow; --dataflow "
                   "and --sgd-shift do not apply")
_ENGINE_ZG = _Path(CONV_SYNTAX, "layer", ("dataflow", "sgd_shift"),
                   "--phase gradient --mode zero_free runs the os dataflow; --dataflow and "
                   "--sgd-shift do not apply")
_ENGINE_BACKWARD = _Path(CONV_SYNTAX, "layer", ("dataflow", "sgd_shift"),
                         "--phase {phase} runs the is dataflow; --dataflow and --sgd-shift do "
                         "not apply")
_ENGINE_FC = _Path(FC_SYNTAX, "FC layer", ("dataflow",),
                   "--phase {phase} runs the interleaved dataflow; --dataflow does not apply",
                   gemm_hint=" " + FC_SYNTAX)
_ACCELERATOR = _Path(CONV_SYNTAX, "layer", ("dataflow", "sgd_shift"),
                     "--phase {phase} picks its dataflow; --dataflow and --sgd-shift do not "
                     "apply")
_ACCELERATOR_FC = _Path(FC_SYNTAX, "FC layer", ("dataflow", "sgd_shift"),
                        "--phase {phase} through the accelerator picks its dataflow; "
                        "--dataflow and --sgd-shift do not apply (--engine runs the SGD "
                        "update)", gemm_hint=None)
_ACCELERATOR_POOL = _Path(POOL_SYNTAX, "pooling layer", ("dataflow", "sgd_shift", "requant"),
                          "--phase {phase}: --dataflow, --sgd-shift and --requant do not "
                          "apply", gemm_hint=None, native_only=True)


def _guard(args, path):
    """The option checks of every ``--phase`` path: a ``--layer`` and no ``--gemm``, none of
    the options that do not apply, the harness; :class:`UserError` naming the first that
    fails."""
    give = f"give a layer: --phase {args.phase} --layer {path.syntax}"
    if args.gemm is not None:
        raise UserError(give if path.gemm_hint is None else
                        f"--gemm does not apply to --phase {args.phase}; give --layer"
                        f"{path.gemm_hint}")
    if args.layer is None:
        raise UserError(give)
    if any(args.dataflow != "os" if option == "dataflow" else getattr(args, option) is not None
           for option in path.unused):
        raise UserError(path.unused_message.format(phase=args.phase))
    if path.native_only and args.harness != "native":
        raise UserError(f"--phase {args.phase} runs on the native harness")


@contextmanager
def _refusals(args, config, path):
    """Turn a :exc:`ValueError` of the block (the layer does not parse, or the configuration
    cannot run it) into the :class:`UserError` ``cannot run <noun> '<layer>' on '<config>':
    <why>``."""
    try:
        yield
    except ValueError as e:
        raise UserError(f"cannot run {path.noun} {args.layer!r} on {config.name!r}: {e}") \
            from None


def _engine_forward(args, config):
    """``bpsa sim --engine --phase forward``: one layer through ConvForward."""
    from bpsa.gateware.frontends.conv_forward import check_config
    from bpsa.sim.conv_forward_run import descriptor
    from bpsa.sim.simcmd import run_forward
    from bpsa.spec.layer import parse_layer
    _guard(args, _ENGINE_FORWARD)
    with _refusals(args, config, _ENGINE_FORWARD):
        check_config(config)
        layer = parse_layer(args.layer)
        descriptor(config, layer)
    return run_forward(config, layer, seed=args.seed, progress=_progress(args))


def _cf_engine(args):
    """``--engine --phase forward --im2col channel_first``."""
    return args.engine and args.phase == "forward" and args.im2col == "channel_first"


def _engine_channel_first(args, config):
    """``bpsa sim --engine --phase forward --im2col channel_first``: one layer through the
    channel-first engine (top ``cf_engine``), in integers or an MX format."""
    from bpsa.gateware.frontends.channel_first.channel_first import check_config
    from bpsa.sim.simcmd import run_cf_layers
    from bpsa.sim.testbenches.tb_channel_first import check_layer
    from bpsa.spec.layer import parse_layer
    _guard(args, _ENGINE_CF)
    with _refusals(args, config, _ENGINE_CF):
        check_config(config)
        layer = check_layer(config, parse_layer(args.layer))
    return run_cf_layers(config, [layer], seed=args.seed, progress=_progress(args))[0]


def _zg_engine(args):
    """``--engine --phase gradient --mode zero_free``."""
    return args.engine and args.phase == "gradient" and args.mode == "zero_free"


def _engine_zero_free_gradient(args, config):
    """``bpsa sim --engine --phase gradient --mode zero_free``: one layer's gradient through
    the zero-free gradient engine (top ``zg_engine``), in integers or an MX format."""
    from bpsa.sim.simcmd import check_zg_layer, run_zg_layers
    from bpsa.spec.layer import parse_layer
    _guard(args, _ENGINE_ZG)
    with _refusals(args, config, _ENGINE_ZG):
        if not config.has("os"):
            raise ValueError(f"the zero-free gradient engine needs the os dataflow "
                             f"({config.name!r} generates {', '.join(config.dataflows)})")
        layer = check_zg_layer(config, parse_layer(args.layer))
    return run_zg_layers(config, [layer], seed=args.seed, progress=_progress(args))[0]


def _engine_backward(args, config):
    """``bpsa sim --engine --phase loss|gradient``: one layer through ConvBackward."""
    from bpsa.sim.conv_backward_run import check_layer
    from bpsa.sim.simcmd import run_backward
    from bpsa.spec.layer import parse_layer
    _guard(args, _ENGINE_BACKWARD)
    with _refusals(args, config, _ENGINE_BACKWARD):
        layer = parse_layer(args.layer)
        check_layer(config, layer, args.phase, args.baseline)
    return run_backward(config, args.phase, layer, baseline=args.baseline, seed=args.seed,
                        progress=_progress(args))


def _engine_fc(args, config):
    """``bpsa sim --engine --phase fc``: one FC layer's backward pass through ConvBackward's
    interleaved dataflow."""
    from bpsa.sim.fc_backward_run import check_layer
    from bpsa.sim.simcmd import run_fc_layers
    from bpsa.spec.layer import parse_fc
    _guard(args, _ENGINE_FC)
    with _refusals(args, config, _ENGINE_FC):
        layer = parse_fc(args.layer)
        check_layer(config, layer, args.sgd_shift)
    return run_fc_layers(config, [layer], sgd_shift=args.sgd_shift, seed=args.seed,
                         progress=_progress(args))[0]


def _trace_window(text):
    """``FIRST:LAST`` cycles of a trace window."""
    try:
        first, last = (int(v.replace("_", "")) for v in text.split(":"))
    except ValueError:
        raise UserError(f"--trace-window {text!r}: give FIRST:LAST, two cycle numbers") \
            from None
    if not 0 <= first <= last:
        raise UserError(f"--trace-window {text!r}: need 0 <= FIRST <= LAST")
    return first, last


def _progress(args):
    """Progress bars and build messages on standard error, unless ``--json`` or ``--quiet``."""
    return not (args.quiet or args.json)


def _native(args):
    """The native transport's options of ``bpsa sim``: progress bar, trace."""
    window = _trace_window(args.trace_window) if args.trace_window else None
    if window and not args.trace:
        raise UserError("--trace-window needs --trace FILE.fst")
    if args.harness == "cocotb":
        if args.trace:
            raise UserError("--trace needs the native harness (cocotb: WAVES=1, see README)")
        return {"simulator": args.simulator}
    if args.simulator != "verilator":
        raise UserError(f"--simulator {args.simulator} runs the cocotb harness: add "
                        f"--harness cocotb")
    if args.trace:
        from bpsa.sim.native import check_trace_path
        try:
            check_trace_path(args.trace)
        except ValueError as e:
            raise UserError(f"--trace: {e}") from None
    return {"progress": _progress(args), "trace": args.trace,
            "trace_window": window}


def _accelerator(args, config):
    """``bpsa sim --phase forward|loss|gradient|step``: the layer through the accelerator top
    (driver, AXI memory, DMA); ``step`` runs the three phases."""
    from bpsa.plan.capability import requant_applies, requant_limit, resolve_mode
    from bpsa.sim.accel_run import check_layer, run_layer
    from bpsa.spec.layer import parse_layer
    _guard(args, _ACCELERATOR)
    phases = ["forward", "loss", "gradient"] if args.phase == "step" else [args.phase]
    if args.requant is not None:
        if args.phase not in ("forward", "loss") or args.baseline or not requant_applies(
                args.phase, resolve_mode(config, args.phase, args.mode)):
            raise UserError("--requant applies to --phase forward and to the zero-free "
                            "--phase loss (their outputs feed a next layer)")
        if not 0 <= args.requant <= requant_limit(config):
            raise UserError(f"--requant {args.requant}: give a shift in "
                            f"[0, {requant_limit(config)}]")
    modes = dict(baseline=args.baseline, mode=args.mode,
                 forward_mode="channel_first" if args.im2col == "channel_first" else None)
    with _refusals(args, config, _ACCELERATOR):
        layer = parse_layer(args.layer)
        plans = check_layer(config, layer, phases, requant=args.requant, **modes)
    return run_layer(config, layer, phases, seed=args.seed, requant=args.requant,
                     harness=args.harness, plans=plans, energy=args.energy, **modes,
                     **_native(args))


def _accelerator_fc(args, config):
    """``bpsa sim --phase fc``: an FC layer's backward pass through the accelerator, one
    interleaved PHASE 3 descriptor (``--baseline``: two descriptors, the loss and the gradient
    of the equivalent 1x1 convolution)."""
    from bpsa.sim.accel_run import check_fc, run_fc
    from bpsa.spec.layer import parse_fc
    _guard(args, _ACCELERATOR_FC)
    with _refusals(args, config, _ACCELERATOR_FC):
        layer = parse_fc(args.layer)
        check_fc(config, layer, args.baseline)
        layer.check_fields(config.dim_width)        # (the baseline's 1x1 layers too)
    return run_fc(config, layer, seed=args.seed, baseline=args.baseline, harness=args.harness,
                  **_native(args))


def _accelerator_pool(args, config):
    """``bpsa sim --phase pool``: a pooling layer's forward and backward through the
    accelerator (the pooling unit), both checked against the golden model."""
    from bpsa.sim.pool_run import run_pool
    from bpsa.spec.layer import parse_pool
    _guard(args, _ACCELERATOR_POOL)
    with _refusals(args, config, _ACCELERATOR_POOL):
        layer = parse_pool(args.layer)
        layer.check_fields(config.dim_width)
        return run_pool(config, layer, seed=args.seed, **_native(args))
