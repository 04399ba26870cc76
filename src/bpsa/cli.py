"""``bpsa``: the command-line front end (generation, simulation, synthesis, reports)."""

import argparse
import sys

from bpsa.config import ConfigError, load_config

__all__ = ["main"]


class UserError(Exception):
    """An error caused by the user's input: printed as one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (``bpsa <command>: error: ...``, exit status 2), like
    :class:`UserError`'s."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _int_at_least(lo):
    """An argparse ``type``: an integer >= ``lo``."""
    def parse(text):
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < lo:
            raise argparse.ArgumentTypeError(f"{value} is below {lo}")
        return value
    return parse


def _out_dir(path):
    """``path`` as a directory the command can write (created when missing), or
    :class:`UserError` naming why not."""
    from pathlib import Path
    out = Path(path)
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / ".bpsa_write_test"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        raise UserError(f"-o {path}: cannot write there ({e.strerror or e})") from None
    return out


def _version():
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("backprop-systolic")
    except PackageNotFoundError:          # running from a source tree without install
        return "unknown"


def _config(args):
    try:
        return load_config(args.config)
    except ConfigError as e:
        raise UserError(f"invalid configuration: {e}") from None


def cmd_verilog(args):
    from bpsa.platform.verilog import TOPS, write_verilog
    if args.top not in TOPS:
        raise UserError(f"--top must be one of {sorted(TOPS)}, not {args.top!r}")
    config = _config(args)
    path = write_verilog(config, args.top, _out_dir(args.output or f"build/{config.name}"))
    print(f"wrote {path} and {path.with_suffix('.json')} ({config.name}: "
          f"{config.rows}x{config.cols}, dataflows {', '.join(config.dataflows)})")


def cmd_synth(args):
    from bpsa.platform.verilog import TOPS
    from bpsa.tools import synth
    if args.top not in TOPS:
        raise UserError(f"--top must be one of {sorted(TOPS)}, not {args.top!r}")
    config = _config(args)
    if args.pe_overheads + args.array_overheads + args.report > 1:
        raise UserError("give only one of --report, --pe-overheads and --array-overheads")
    if args.blocks and not args.report:
        raise UserError("--blocks applies only to --report")
    if args.timing and (args.report or args.pe_overheads or args.array_overheads):
        raise UserError("--timing applies to one block's report (not --report or the "
                        "overhead tables)")
    _out_dir(args.output)
    if args.report:
        report = synth.design_report(config, args.output, targets=args.targets,
                                     blocks=args.blocks or synth.DESIGN_BLOCKS)
    elif args.pe_overheads:
        report = synth.pe_overhead_report(config, args.output, targets=args.targets)
    elif args.array_overheads:
        report = synth.array_overhead_report(config, args.output, targets=args.targets)
    else:
        report = synth.synth_report(config, args.top, args.output, targets=args.targets,
                                    timing=args.timing)
    print(report.markdown_path.read_text(), end="")
    print(f"wrote {report.markdown_path} and {report.json_path}")


def _dims(text):
    try:
        dims = tuple(int(x) for x in text.split(","))
    except ValueError:
        dims = ()
    if len(dims) != 3 or min(dims) < 1:
        raise UserError(f"--gemm must be three positive integers M,K,N, not {text!r}")
    return dims


def _sim_forward(args, config):
    """``bpsa sim --phase forward``: the summary of one layer through ConvForward."""
    from bpsa.gateware.engines.conv_forward import check_config
    from bpsa.spec.layer import parse_layer
    from bpsa.verify.conv_forward_run import descriptor, run_forward
    if args.gemm is not None:
        raise UserError("--gemm does not apply to --phase forward; give --layer")
    if args.layer is None:
        raise UserError("give a layer: --phase forward --layer C=..,H=..,W=..,K=..,R=..,S=..,"
                        "stride=..,pad=..,dilation=..,N=..")
    if args.dataflow != "os" or args.sgd_shift is not None:
        raise UserError("--phase forward runs the os dataflow; --dataflow and --sgd-shift do "
                        "not apply")
    try:
        check_config(config)
        layer = parse_layer(args.layer)
        descriptor(config, layer)
    except ValueError as e:
        raise UserError(f"cannot run layer {args.layer!r} on {config.name!r}: {e}") from None
    return run_forward(config, layer, seed=args.seed)


def _sim_backward(args, config):
    """``bpsa sim --phase loss|gradient``: the summary of one layer through ConvBackward."""
    from bpsa.spec.layer import parse_layer
    from bpsa.verify.conv_backward_run import check_layer, run_backward
    if args.gemm is not None:
        raise UserError(f"--gemm does not apply to --phase {args.phase}; give --layer")
    if args.layer is None:
        raise UserError(f"give a layer: --phase {args.phase} --layer C=..,H=..,W=..,K=..,R=..,"
                        "S=..,stride=..,pad=..,dilation=..,N=..")
    if args.dataflow != "os" or args.sgd_shift is not None:
        raise UserError(f"--phase {args.phase} runs the is dataflow; --dataflow and "
                        "--sgd-shift do not apply")
    try:
        layer = parse_layer(args.layer)
        check_layer(config, layer, args.phase, args.baseline)
    except ValueError as e:
        raise UserError(f"cannot run layer {args.layer!r} on {config.name!r}: {e}") from None
    return run_backward(config, args.phase, layer, baseline=args.baseline, seed=args.seed)


def _sim_fc(args, config):
    """``bpsa sim --engine --phase fc``: one FC layer's backward pass through ConvBackward's
    interleaved dataflow."""
    from bpsa.spec.layer import parse_fc
    from bpsa.verify.fc_backward_run import check_layer, run_fc_layers
    if args.gemm is not None:
        raise UserError("--gemm does not apply to --phase fc; give --layer N=..,I=..,O=..")
    if args.layer is None:
        raise UserError("give a layer: --phase fc --layer N=..,I=..,O=..")
    if args.dataflow != "os":
        raise UserError("--phase fc runs the interleaved dataflow; --dataflow does not apply")
    try:
        layer = parse_fc(args.layer)
        check_layer(config, layer, args.sgd_shift)
    except ValueError as e:
        raise UserError(f"cannot run FC layer {args.layer!r} on {config.name!r}: {e}") from None
    return run_fc_layers(config, [layer], sgd_shift=args.sgd_shift, seed=args.seed)[0]


def _sim_accelerator_fc(args, config):
    """``bpsa sim --phase fc``: an FC layer's backward pass through the accelerator, one
    interleaved PHASE 3 descriptor (``--baseline``: two descriptors, the loss and the gradient
    of the equivalent 1x1 convolution)."""
    from bpsa.plan.tiling import fc_plan, plan
    from bpsa.spec.layer import parse_fc
    from bpsa.verify.accel_run import run_jobs, summary
    if args.gemm is not None or args.layer is None:
        raise UserError("give a layer: --phase fc --layer N=..,I=..,O=..")
    if args.dataflow != "os" or args.sgd_shift is not None:
        raise UserError("--phase fc through the accelerator picks its dataflow; --dataflow "
                        "and --sgd-shift do not apply (--engine runs the SGD update)")
    try:
        layer = parse_fc(args.layer)
        if not args.baseline:
            if not (config.has("interleaved") and config.has("is")):
                raise ValueError(f"configuration {config.name!r} does not generate the "
                                 f"'interleaved' dataflow (use --baseline)")
            try:
                fc_plan(config, layer.batch, layer.inputs, layer.outputs)
            except ValueError as e:
                raise ValueError(f"{e} (--baseline runs it as two descriptors)") from None
        elif not config.has("is"):
            raise ValueError(f"configuration {config.name!r} does not generate 'is'")
        else:
            n, i, o = layer.batch, layer.inputs, layer.outputs
            plan(config, "loss", n, i, 1, 1, o, 1, 1)
            plan(config, "gradient", n, i, 1, 1, o, 1, 1)
    except ValueError as e:
        raise UserError(f"cannot run FC layer {args.layer!r} on {config.name!r}: {e}") from None
    job = {"phase": "fc_backward", "seed": args.seed, "interleaved": not args.baseline,
           "layer": {"batch": layer.batch, "channels": layer.inputs, "height": 1, "width": 1,
                     "out_channels": layer.outputs, "kernel_h": 1, "kernel_w": 1}}
    out = summary(config, run_jobs(config, [job], harness=args.harness, **_native(args))[0])
    out.update(phase="fc", layer=layer.text(), interleaved=not args.baseline)
    return out


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


def _native(args):
    """The native transport's options of ``bpsa sim``: progress bar, trace."""
    window = _trace_window(args.trace_window) if args.trace_window else None
    if window and not args.trace:
        raise UserError("--trace-window needs --trace FILE.fst")
    if args.harness == "cocotb":
        if args.trace:
            raise UserError("--trace needs the native harness (cocotb: WAVES=1, see README)")
        return {}
    if args.trace:
        from bpsa.verify.native import check_trace_path
        try:
            check_trace_path(args.trace)
        except ValueError as e:
            raise UserError(f"--trace: {e}") from None
    return {"progress": not (args.quiet or args.json), "trace": args.trace,
            "trace_window": window}


def _sim_accelerator(args, config):
    """``bpsa sim --phase forward|loss|gradient|step``: the layer through the accelerator top
    (driver, AXI memory, DMA); ``step`` runs the three phases."""
    from bpsa.spec.layer import parse_layer
    from bpsa.verify.accel_run import check_job, job, job_mode, run_jobs, summary
    if args.gemm is not None:
        raise UserError(f"--gemm does not apply to --phase {args.phase}; give --layer")
    if args.layer is None:
        raise UserError(f"give a layer: --phase {args.phase} --layer C=..,H=..,W=..,K=..,R=..,"
                        "S=..,stride=..,pad=..,dilation=..,N=..")
    if args.dataflow != "os" or args.sgd_shift is not None:
        raise UserError(f"--phase {args.phase} picks its dataflow; --dataflow and --sgd-shift "
                        "do not apply")
    phases = ["forward", "loss", "gradient"] if args.phase == "step" else [args.phase]
    if args.requant is not None:
        bits = (config.acc_width - 1).bit_length()
        if args.phase not in ("forward", "loss") or args.baseline or (
                args.phase == "loss" and job_mode(config, "loss", args.mode) != "zero_free"):
            raise UserError("--requant applies to --phase forward and to the zero-free "
                            "--phase loss (their outputs feed a next layer)")
        if not 0 <= args.requant < 1 << bits:
            raise UserError(f"--requant {args.requant}: give a shift in [0, {(1 << bits) - 1}]")
    try:
        layer = parse_layer(args.layer)
        for p in phases:
            check_job(config, layer, p, baseline=args.baseline, mode=args.mode)
    except ValueError as e:
        raise UserError(f"cannot run layer {args.layer!r} on {config.name!r}: {e}") from None
    results = run_jobs(config, [job(layer, p, seed=args.seed, baseline=args.baseline,
                                    mode=args.mode if p != "forward" else None,
                                    requant=args.requant)
                                for p in phases], harness=args.harness, **_native(args))
    sums = [summary(config, r) for r in results]
    if len(sums) == 1:
        return sums[0]
    out = {"match": all(s["match"] for s in sums), "phase": "step"}
    for s in sums:
        out.update({f"{s['phase']}_{k}": v for k, v in s.items() if k not in ("phase",)})
    return out


def cmd_sim(args):
    import json

    from bpsa.verify.simcmd import run_gemm
    config = _config(args)
    if args.sgd_shift is not None and not 0 <= args.sgd_shift < config.acc_width:
        raise UserError(f"--sgd-shift {args.sgd_shift}: give a shift in [0, "
                        f"{config.acc_width - 1}] (acc_width {config.acc_width})")
    if args.baseline and (args.phase not in ("loss", "gradient", "fc")
                          or (args.phase == "fc" and args.engine)):
        raise UserError("--baseline applies only to --phase loss|gradient (and fc through "
                        "the accelerator)")
    if args.mode is not None and (args.engine or args.baseline
                                  or args.phase not in ("loss", "gradient", "step")):
        raise UserError("--mode applies only to --phase loss|gradient|step through the "
                        "accelerator (not with --engine or --baseline)")
    if args.engine and args.phase not in ("forward", "loss", "gradient", "fc"):
        raise UserError("--engine applies only to --phase forward|loss|gradient|fc")
    if args.phase == "fc" and args.engine:
        result = _sim_fc(args, config)
    elif args.phase is not None and not args.engine:
        from bpsa.verify.native import HangError, TraceWindowError
        try:
            result = (_sim_accelerator_fc if args.phase == "fc" else _sim_accelerator)(args,
                                                                                     config)
        except TraceWindowError as e:
            raise UserError(f"--trace-window: {e}") from None
        except HangError as e:
            print(f"bpsa: the accelerator hung: {e}", file=sys.stderr)
            sys.exit(1)
    elif args.phase in ("loss", "gradient"):
        result = _sim_backward(args, config)
    elif args.phase == "forward":
        result = _sim_forward(args, config)
    else:
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
        result = run_gemm(config, args.dataflow, dims, seed=args.seed,
                          sgd_shift=args.sgd_shift)
    result["config"] = config.name
    if args.json:
        print(json.dumps(result, sort_keys=True))
    else:
        width = max(len(k) for k in result)
        for k in sorted(result):
            v = result[k]
            print(f"{k:<{width}}  {v:.4f}" if isinstance(v, float) else f"{k:<{width}}  {v}")
    if not result["match"]:
        sys.exit(1)


def cmd_fuzz(args):
    import json

    from bpsa.verify.fuzz import fuzz
    config = _config(args)
    if args.count < 1:
        raise UserError(f"--count {args.count}: give a positive number of layers")
    if not (config.has("os") or config.has("is")):
        raise UserError(f"configuration {config.name!r} generates no accelerator phase")
    res = fuzz(config, args.count, seed=args.seed, progress=not (args.quiet or args.json))
    res["config"], res["seed"] = config.name, args.seed
    res["layers_per_second"] = res["jobs"] / max(res["seconds"], 1e-9)
    res["cycles_per_second"] = res["cycles"] / max(res["seconds"], 1e-9)
    if args.json:
        print(json.dumps(res, sort_keys=True))
    else:
        refused = ", ".join(f"{k} {v}" for k, v in sorted(res["refused"].items())) or "none"
        print(f"{res['jobs']} random layers on {config.name} (seed {args.seed}): "
              f"{res['ran']} ran, {sum(res['refused'].values())} refused as expected "
              f"({refused}), {len(res['mismatches'])} mismatches")
        print(f"{res['cycles']:,} cycles in {res['seconds']:.1f} s: "
              f"{res['layers_per_second']:.1f} layers/s, "
              f"{res['cycles_per_second']:,.0f} cycles/s")
        for m in res["mismatches"]:
            print(f"MISMATCH {m['error']}\n  job {json.dumps(m['job'], sort_keys=True)}")
    if res["mismatches"]:
        sys.exit(1)


def cmd_regmap(args):
    """``bpsa regmap``: the register map of a configuration as JSON, a C header or Markdown."""
    from pathlib import Path

    from bpsa.spec.regmap_export import export
    text = export(_config(args), args.format)
    if args.output is None:
        print(text, end="")
        return
    out = Path(args.output)
    _out_dir(out.parent if str(out.parent) else ".")
    out.write_text(text)
    print(f"wrote {out}")


def cmd_perf(args):
    """``bpsa perf``: the cycle model (:mod:`bpsa.models.perf`) of a layer, or of every layer
    of the workload, in the zero-free loss and gradient."""
    import csv
    import json
    import time
    from importlib import resources

    from bpsa.models.perf import layer_cycles, traditional_cycles
    from bpsa.spec.layer import parse_layer
    config = _config(args)
    phases = {"both": ["loss", "gradient"],
              "all": ["forward", "loss", "gradient"]}.get(args.phase, [args.phase])
    if args.baseline:
        if "forward" in phases and args.phase != "all":
            raise UserError("--baseline applies to the loss and the gradient, not --phase "
                            "forward")
        phases = [p for p in phases if p != "forward"]
    model = traditional_cycles if args.baseline else layer_cycles
    if args.requant and args.baseline:
        raise UserError("--requant applies to the zero-free model, not --baseline")
    if (args.layer is None) == (not args.workload):
        raise UserError("give --layer C=..,H=..,K=.. or --workload")
    if args.layer is not None:
        try:
            lay = parse_layer(args.layer)
        except ValueError as e:
            raise UserError(f"--layer {args.layer!r}: {e}") from None
        rows = [{"network": "-", "layer": args.layer, "lay": lay}]
    else:
        with resources.files("bpsa.workloads").joinpath("conv_layers.csv").open() as f:
            rows = list(csv.DictReader(f))
    t0 = time.perf_counter()
    out = []
    for row in rows:
        if "lay" in row:
            lay = row["lay"]
            dims = dict(n=args.batch or lay.batch, c=lay.channels, h=lay.height, w=lay.width,
                        k=lay.out_channels, r=lay.kernel_h, s=lay.kernel_w, stride=lay.stride,
                        pad=lay.pad, dil=lay.dil)
        else:
            c, h, w, k, r, s, st, p, d = (int(row[x]) for x in (
                "C", "H", "W", "K", "R", "S", "stride", "pad", "dilation"))
            dims = dict(n=args.batch or 1, c=c, h=h, w=w, k=k, r=r, s=s, stride=(st, st),
                        pad=(p, p), dil=(d, d))
        for phase in phases:
            entry = {"network": row["network"], "layer": row["layer"], "phase": phase,
                     "batch": dims["n"], "baseline": args.baseline}
            try:
                extra = {"requant": True} if args.requant and phase != "gradient" else {}
                entry.update(model(config, phase, **dims, **extra).as_dict())
            except ValueError as e:
                if "lay" in row:
                    raise UserError(f"cannot model layer {args.layer!r} on "
                                    f"{config.name!r}: {e}") from None
                entry["refused"] = str(e)
            out.append(entry)
    seconds = time.perf_counter() - t0
    if args.json:
        print(json.dumps({"config": config.name, "seconds": seconds, "layers": out},
                         sort_keys=True))
        return
    print(f"{'network':14s} {'layer':22s} {'phase':8s} {'cycles':>11s} {'util':>6s} "
          f"{'roofline':>11s} {'x roof':>6s} {'DMA busy':>10s}  bound")
    for e in out:
        if "refused" in e:
            print(f"{e['network']:14s} {e['layer']:22s} {e['phase']:8s} refused: "
                  f"{e['refused']}")
            continue
        print(f"{e['network']:14s} {e['layer']:22s} {e['phase']:8s} {e['cycles']:11,d} "
              f"{e['utilization']:6.3f} {e['roofline_cycles']:11,d} {e['over_roofline']:6.2f} "
              f"{e['dma_busy_cycles']:10,d}  {e['bound']}")
    print(f"({len(out)} layer phases on {config.name} in {seconds:.2f} s)")


def cmd_zeros(args):
    from bpsa.tools import zero_report
    sys.exit(zero_report.main(["--json"] if args.json else []))


def _preset_size(config):
    """Sort key for ``--config auto``: array multiplier bits, then buffer bits."""
    return (config.rows * config.cols * config.operand_width ** 2,
            config.buf_a_depth + config.buf_b_depth + config.buf_p_depth)


def cmd_bitstream(args):
    import time

    from bpsa.config import load_config, preset_names
    from bpsa.platform import board
    t0 = time.monotonic()
    settings = board.load_board(args.board)
    out = _out_dir(args.output or f"build/bitstream/{args.board}")
    try:
        core = board.load_core(args.core)
    except (ImportError, AttributeError) as e:
        raise UserError(f"core {args.core or board.DEFAULT_CORE!r} is not available ({e}); "
                        f"give --core module:Class (e.g. bpsa.verify.board_tops:StandInCore)"
                        ) from None
    spec = args.config or settings.config
    if spec == "auto":
        try:
            candidates = sorted((load_config(n) for n in preset_names()), key=_preset_size,
                                reverse=True)
        except ConfigError as e:
            raise UserError(f"invalid configuration: {e}") from None
    else:
        try:
            candidates = [load_config(spec)]
        except ConfigError as e:
            raise UserError(f"invalid configuration: {e}") from None
    for i, config in enumerate(candidates):
        last = i == len(candidates) - 1
        try:            # the fit check runs before place and route
            report = board.build_bitstream(args.board, config, out, core=core,
                                           fit_only=args.fit_only, route_check=spec == "auto")
            break
        except board.FitError as e:
            if last:
                raise UserError(str(e)) from None
            print(f"[{args.board}] {e}; trying a smaller preset")
    print(board.format_report(report))
    print(f"total wall time {time.monotonic() - t0:.1f} s; report {out / 'report.json'}")


def build_parser():
    from bpsa.config import preset_names
    from bpsa.platform.tops import TOPS
    p = _Parser(prog="bpsa", description=__doc__,
                epilog="examples: bpsa verilog --config paper16 --top accelerator; "
                       "bpsa sim --phase loss --layer C=8,H=16,K=8,R=3,stride=2,pad=1; "
                       "bpsa perf --config paper16 --workload; bpsa regmap --format c. "
                       "Every command has its own --help.")
    p.add_argument("--version", action="version", version=f"bpsa {_version()}")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    presets = ", ".join(preset_names())

    def add_config(sp):
        sp.add_argument("--config", default="small",
                        help=f"preset name ({presets}) or path to a TOML file "
                             "(default: small)")

    sp = sub.add_parser("verilog", help="write Verilog and the configuration JSON")
    add_config(sp)
    sp.add_argument("--top", default="pe", choices=sorted(TOPS),
                    help="component to generate (default: pe)")
    sp.add_argument("-o", "--output", default=None,
                    help="output directory (default: build/<configuration name>, so two "
                         "presets never overwrite each other)")
    sp.set_defaults(func=cmd_verilog)

    sp = sub.add_parser("synth", help="Yosys area report (Markdown and JSON)")
    add_config(sp)
    sp.add_argument("--top", default="pe", choices=sorted(TOPS),
                    help="component to synthesize (default: pe)")
    sp.add_argument("-o", "--output", default="build/synth",
                    help="output directory (default: build/synth)")
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
    sp.set_defaults(func=cmd_synth)

    sp = sub.add_parser("sim", help="run a random problem through the generated RTL under "
                                     "Verilator and compare with numpy")
    add_config(sp)
    sp.add_argument("--gemm", metavar="M,K,N",
                    help="GEMM shape; for --dataflow interleaved: O,Bt,I (W is O x I, "
                         "batch Bt)")
    sp.add_argument("--dataflow", default="os", choices=["os", "ws", "is", "interleaved"])
    sp.add_argument("--harness", choices=("native", "cocotb"), default="native",
                    help="--phase through the whole accelerator: the compiled Verilator "
                         "transport (native, fast; default) or cocotb with cocotbext-axi's bus "
                         "models")
    sp.add_argument("--engine", action="store_true",
                    help="run --phase on the engine top alone (ConvForward / ConvBackward, "
                         "buffers written directly) instead of the whole accelerator")
    sp.add_argument("--phase", choices=["forward", "loss", "gradient", "step", "fc"],
                    default=None,
                    help="run a convolution layer (--layer) through the whole accelerator "
                         "(driver, AXI memory, DMA, tiling controller): forward (feeder + OS "
                         "array), loss|gradient (see --mode), or step (all three); "
                         "fc (--layer N=..,I=..,O=..: an FC layer's dX and dW in one "
                         "interleaved pass); with --engine, forward|loss|gradient|fc on the "
                         "engine top alone")
    sp.add_argument("--baseline", action="store_true",
                    help="--phase fc: two descriptors (1x1 loss, then gradient) instead of "
                         "the interleaved pass; --phase loss|gradient: the traditional flow for "
                         "comparison; through "
                         "the accelerator, the driver builds the zero-spaced tensors in memory "
                         "and runs them as a forward convolution; with --engine, the zero-spaced "
                         "copy is written into the buffer and read densely")
    sp.add_argument("--mode", choices=["zero_free", "bp_im2col"], default=None,
                    type=lambda v: v.replace("-", "_"),
                    help="--phase loss|gradient|step through the accelerator: the backward "
                         "front end; zero_free (the zero-free walkers on the forward engine's "
                         "OS array: no inserted zero is read or multiplied) or bp_im2col (the "
                         "paper's NZ-detecting generators on the IS array); default: zero_free "
                         "when the configuration generates it")
    sp.add_argument("--layer", metavar="C=..,H=..,W=..,K=..,R=..,S=..,stride=..,pad=..,"
                                       "dilation=..,N=..",
                    help="--phase forward|loss|gradient: the layer (W defaults to H, S to R, N "
                         "to 1, stride to 1, pad to 0, dilation to 1; stride/pad/dilation may "
                         "be HxW)")
    sp.add_argument("--seed", type=_int_at_least(0), default=1,
                    help="seed of the random operands (default: 1)")
    sp.add_argument("--requant", type=int, default=None, metavar="SHIFT",
                    help="--phase forward, or loss in the zero-free mode, through the "
                         "accelerator: the output leaves as operands, shifted right by SHIFT, "
                         "rounded half up and saturated (the descriptor's REQUANT, OUT_SHIFT)")
    sp.add_argument("--sgd-shift", type=int, default=None,
                    help="interleaved / --phase fc: apply the in-place update W -= G >> SHIFT")
    sp.add_argument("--json", action="store_true", help="print one JSON object")
    sp.add_argument("--quiet", action="store_true", help="no progress bar")
    sp.add_argument("--trace", metavar="FILE.fst",
                    help="--phase through the accelerator: write an FST waveform (open it "
                         "with GTKWave or Surfer); the model is built with tracing")
    sp.add_argument("--trace-window", metavar="FIRST:LAST",
                    help="with --trace: only cycles FIRST to LAST (counted from reset)")
    sp.set_defaults(func=cmd_sim)

    sp = sub.add_parser("bitstream", help="FPGA bitstream of the board top (core + UART "
                                           "bridge + SRAM): Yosys, fit check, nextpnr, pack")
    sp.add_argument("--board", required=True, choices=["icebreaker", "ulx3s"])
    sp.add_argument("--config", default=None,
                    help="preset name or TOML path; 'auto': the largest preset that fits "
                         "and stays within the board's measured routable share (route_limit) "
                         "(default: the board's preset in bpsa/platform/boards/<board>.toml)")
    sp.add_argument("--core", default=None,
                    help="core as module:Class (default bpsa.gateware.accelerator:Accelerator)")
    sp.add_argument("-o", "--output", default=None,
                    help="output directory (default: build/bitstream/<board>)")
    sp.add_argument("--fit-only", action="store_true",
                    help="stop after synthesis and the fit check (no place and route)")
    sp.set_defaults(func=cmd_bitstream)

    sp = sub.add_parser("fuzz", help="random layers of every phase (and layers the hardware "
                                      "must refuse) through the whole accelerator on the "
                                      "native transport, under random back-pressure, against "
                                      "the golden model; exit 1 on any mismatch")
    add_config(sp)
    sp.add_argument("--count", type=int, default=100, help="random layers (default: 100)")
    sp.add_argument("--seed", type=_int_at_least(0), default=1,
                    help="seed of the random layers (default: 1)")
    sp.add_argument("--quiet", action="store_true", help="no progress bar")
    sp.add_argument("--json", action="store_true", help="print one JSON object")
    sp.set_defaults(func=cmd_fuzz)

    sp = sub.add_parser("perf", help="cycle model of the forward pass and the zero-free loss "
                                     "and gradient: cycles, utilization, roofline, DMA and "
                                     "what bounds a layer, or every layer of the workload, in "
                                     "seconds without RTL")
    add_config(sp)
    sp.add_argument("--phase", choices=["forward", "loss", "gradient", "both", "all"],
                    default="all",
                    help="both: loss and gradient; all (default): forward, loss and gradient")
    sp.add_argument("--layer", metavar="C=..,H=..,K=..,R=..,stride=..,pad=..,N=..",
                    help="one layer (as for bpsa sim)")
    sp.add_argument("--workload", action="store_true",
                    help="every layer of src/bpsa/workloads/conv_layers.csv")
    sp.add_argument("--batch", type=_int_at_least(1), default=None,
                    help="batch (default: the layer's N, or 1 for --workload)")
    sp.add_argument("--baseline", action="store_true",
                    help="loss and gradient the traditional way: the forward convolution of "
                         "the zero-spaced operands (utilization of the layer's own MACs)")
    sp.add_argument("--requant", action="store_true",
                    help="the forward's and the loss's outputs leave requantized, as operands "
                         "(the descriptor's REQUANT), instead of as accumulators")
    sp.add_argument("--json", action="store_true", help="print one JSON object")
    sp.set_defaults(func=cmd_perf)

    sp = sub.add_parser("regmap", help="the register map (offsets, fields, codes, this "
                                       "configuration's constants) as JSON, a C header or "
                                       "Markdown, from the one definition the hardware uses",
                        epilog="example: bpsa regmap --config paper16 --format c -o bpsa.h")
    add_config(sp)
    sp.add_argument("--format", choices=["json", "c", "md"], default="json",
                    help="json (tools), c (a header for firmware) or md (documents); "
                         "default json")
    sp.add_argument("-o", "--output", default=None, help="file to write (default: stdout)")
    sp.set_defaults(func=cmd_regmap)

    sp = sub.add_parser("zeros", help="zero fraction of explicitly lowered loss/gradient "
                                      "matrices for the stride>=2 workload layers")
    sp.add_argument("--json", action="store_true")
    sp.set_defaults(func=cmd_zeros)
    return p


def main(argv=None):
    args = build_parser().parse_args(argv)
    try:
        args.func(args)
    except UserError as e:
        print(f"bpsa: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
