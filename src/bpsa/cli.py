"""``bpsa``: the command-line front end (generation, simulation, synthesis, reports)."""

import argparse
import os
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


def _bounded(cast, lo, strict):
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


def _int_at_least(lo):
    """An argparse ``type``: an integer >= ``lo``."""
    return _bounded(int, lo, strict=False)


def _float_above(lo):
    """An argparse ``type``: a number above ``lo``."""
    return _bounded(float, lo, strict=True)


def _network_names():
    from bpsa.spec.network import network_names
    return network_names()


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
    from bpsa.tools import overheads, synth
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
        report = overheads.pe_overhead_report(config, args.output, targets=args.targets)
    elif args.array_overheads:
        report = overheads.array_overhead_report(config, args.output, targets=args.targets)
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
    from bpsa.sim.conv_forward_run import descriptor, run_forward
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
    from bpsa.sim.conv_backward_run import check_layer, run_backward
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
    from bpsa.sim.fc_backward_run import check_layer, run_fc_layers
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
    from bpsa.sim.accel_run import run_jobs, summary
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
        from bpsa.sim.native import check_trace_path
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
    from bpsa.sim.accel_run import check_job, job, job_mode, run_jobs, summary
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
                args.phase == "loss"
                and job_mode(config, "loss", args.mode) not in ("zero_free", "channel_first")):
            raise UserError("--requant applies to --phase forward and to the zero-free "
                            "--phase loss (their outputs feed a next layer)")
        if not 0 <= args.requant < 1 << bits:
            raise UserError(f"--requant {args.requant}: give a shift in [0, {(1 << bits) - 1}]")
    fwd_mode = "channel_first" if args.im2col == "channel_first" else None
    try:
        layer = parse_layer(args.layer)
        for p in phases:
            check_job(config, layer, p, baseline=args.baseline,
                      mode=args.mode if p != "forward" else fwd_mode)
    except ValueError as e:
        raise UserError(f"cannot run layer {args.layer!r} on {config.name!r}: {e}") from None
    results = run_jobs(config, [job(layer, p, seed=args.seed, baseline=args.baseline,
                                    mode=args.mode if p != "forward" else fwd_mode,
                                    requant=args.requant)
                                for p in phases], harness=args.harness, **_native(args))
    sums = [summary(config, r) for r in results]
    if len(sums) == 1:
        return sums[0]
    out = {"match": all(s["match"] for s in sums), "phase": "step"}
    for s in sums:
        out.update({f"{s['phase']}_{k}": v for k, v in s.items() if k not in ("phase",)})
    return out


def _sim_accelerator_pool(args, config):
    """``bpsa sim --phase pool``: a pooling layer's forward and backward through the
    accelerator (the pooling unit), both checked against the golden model."""
    from bpsa.spec.layer import parse_pool
    from bpsa.sim.pool_run import run_pool
    if args.gemm is not None or args.layer is None:
        raise UserError("give a layer: --phase pool --layer C=..,H=..,W=..,R=..,S=..,"
                        "stride=..,pad=..,N=..,kind=max|avg|global_avg")
    if args.dataflow != "os" or args.sgd_shift is not None or args.requant is not None:
        raise UserError("--phase pool: --dataflow, --sgd-shift and --requant do not apply")
    if args.harness == "cocotb":
        raise UserError("--phase pool runs on the native harness")
    try:
        layer = parse_pool(args.layer)
        return run_pool(config, layer, seed=args.seed, **_native(args))
    except ValueError as e:
        raise UserError(f"cannot run pooling layer {args.layer!r} on {config.name!r}: {e}") \
            from None


def cmd_sim(args):
    import json

    from bpsa.sim.simcmd import run_gemm
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
    if args.im2col is not None and (args.engine or args.phase not in ("forward", "step")):
        raise UserError("--im2col applies only to --phase forward|step through the "
                        "accelerator (not with --engine)")
    if args.engine and args.phase not in ("forward", "loss", "gradient", "fc"):
        raise UserError("--engine applies only to --phase forward|loss|gradient|fc")
    if args.phase == "fc" and args.engine:
        result = _sim_fc(args, config)
    elif args.phase is not None and not args.engine:
        from bpsa.sim.native import HangError, TraceWindowError
        try:
            result = {"fc": _sim_accelerator_fc, "pool": _sim_accelerator_pool}.get(
                args.phase, _sim_accelerator)(args, config)
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
    if sum((args.layer is not None, args.workload, args.network is not None)) != 1:
        raise UserError("give one of --layer C=..,H=..,K=.., --workload or --network NAME")
    if args.network is not None:
        return _perf_network(args, config)
    if args.plot or args.csv or args.phases:
        raise UserError("--plot, --csv and --phases apply to --network")
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


def _perf_network(args, config):
    """``bpsa perf --network``: a training step of a whole network (the cycle model)."""
    import csv
    import json
    import time
    from pathlib import Path

    from bpsa.models.network_perf import PHASES, network_step
    from bpsa.spec.network import NetworkError, load_network
    if args.baseline:
        raise UserError("--baseline applies to --layer and --workload, not --network")
    phases = args.phases.split(",") if args.phases else list(PHASES)
    bad = [p for p in phases if p not in PHASES]
    if bad or not phases:
        raise UserError(f"--phases {args.phases!r}: give a comma list of "
                        f"{', '.join(PHASES)}")
    if args.plot and Path(args.plot).suffix not in (".png", ".svg", ".pdf"):
        raise UserError(f"--plot {args.plot!r}: the file must end in .png, .svg or .pdf")
    if args.plot:
        _out_dir(Path(args.plot).parent if str(Path(args.plot).parent) else ".")
    try:
        net = load_network(args.network)
    except NetworkError as e:
        raise UserError(str(e)) from None
    t0 = time.perf_counter()
    try:
        step = network_step(config, net, batch=args.batch or 1, phases=phases,
                            clock_mhz=args.clock, requant=args.requant,
                            jobs=os.cpu_count() or 1, frontend=args.frontend)
    except ValueError as e:
        raise UserError(f"--frontend {args.frontend}: {e}") from None
    seconds = time.perf_counter() - t0
    if args.plot:
        from bpsa.tools.perf_plots import plot_step
        plot_step(step, config, args.plot)
    if args.json:
        print(json.dumps(dict(step.as_dict(), model_seconds=seconds), sort_keys=True))
        return
    if args.csv:
        fields = ["layer", "op", "phase", "batch", "status", "frontend", "cycles",
                  "utilization", "macs",
                  "dma_read_bytes", "dma_write_bytes", "a_words", "b_words", "p_words",
                  "bound", "roofline_cycles", "reason"]
        w = csv.DictWriter(sys.stdout, fields, extrasaction="ignore", lineterminator="\n")
        w.writeheader()
        for r in step.rows:
            w.writerow(r)
        return
    print(f"{'layer':22s} {'op':6s} {'phase':8s} {'cycles':>13s} {'util':>6s} "
          f"{'DMA read':>13s} {'DMA write':>12s} {'A/B/P words':>17s}  bound")
    for r in step.rows:
        head = f"{r['layer']:22s} {r['op']:6s} {r['phase']:8s}"
        if r["status"] != "run":
            print(f"{head} {r['status']}: {r['reason']}")
            continue
        words = f"{r['a_words']}/{r['b_words']}/{r['p_words']}"
        print(f"{head} {r['cycles']:13,d} {r['utilization']:6.3f} {r['dma_read_bytes']:13,d} "
              f"{r['dma_write_bytes']:12,d} {words:>17s}  {r['bound']}")
    t = step.totals
    print(f"\n{net.name} on {config.name} ({config.rows}x{config.cols}), batch {step.batch}: "
          f"{t['cycles']:,d} cycles a training step, utilization {t['utilization']:.3f}, "
          f"{t['seconds'] * 1e3:,.2f} ms at {args.clock:g} MHz; DMA "
          f"{t['dma_read_bytes'] + t['dma_write_bytes']:,d} bytes")
    for phase, pt in step.by_phase.items():
        print(f"  {phase:8s} {pt['cycles']:15,d} cycles  utilization {pt['utilization']:.3f}"
              f"  ({pt['layers_run']} layers run, {pt['refused']} not run, "
              f"{pt['skipped']} skipped)")
    if step.refused:
        print(f"not run on {config.name}: {len(step.refused)} layer phases (listed above)")
    print(f"(the cycle model in {seconds:.2f} s"
          + (f"; plot: {args.plot})" if args.plot else ")"))


def cmd_sweep(args):
    """``bpsa sweep``: a grid of configurations on a network (:mod:`bpsa.tools.sweep`)."""
    import json
    import time
    from pathlib import Path

    from bpsa.models.network_perf import PHASES
    from bpsa.spec.network import NetworkError, load_network
    from bpsa.tools import sweep
    base = _config(args)
    phases = args.phases.split(",")
    if not phases or any(p not in PHASES for p in phases):
        raise UserError(f"--phases {args.phases!r}: give a comma list of {', '.join(PHASES)}")
    try:
        net = load_network(args.network)
        points = sweep.parse_grid(args.grid, base)
    except (NetworkError, sweep.GridError) as e:
        raise UserError(str(e)) from None
    out = Path(args.output or f"build/sweep/{net.name}_{base.name}.csv")
    if out.suffix != ".csv":
        raise UserError(f"-o {str(out)!r}: the sweep writes a .csv file")
    _out_dir(out.parent if str(out.parent) else ".")
    plot = Path(args.plot) if args.plot else out.with_suffix(".png")
    if plot.suffix not in (".png", ".svg", ".pdf"):
        raise UserError(f"--plot {str(plot)!r}: the file must end in .png, .svg or .pdf")
    t0 = time.perf_counter()
    try:
        rows, failed = sweep.run_sweep(
            base, points, net, out, batch=args.batch, phases=phases, clock_mhz=args.clock,
            scheduler=args.scheduler, workers=args.workers,
            synth_dir=out.with_suffix("") if args.synth else None, progress=not args.quiet)
    except sweep.GridError as e:
        raise UserError(str(e)) from None
    wall = time.perf_counter() - t0
    labels = {label for label, _ in points}
    rows = [r for r in rows if r["label"] in labels]
    front = sweep.pareto(rows)
    from bpsa.tools.perf_plots import plot_pareto
    plot_pareto(rows, front, plot, f"{net.name}, batch {args.batch}: {len(rows)} "
                                   f"configurations from {base.name} (cycle model)")
    sample = []
    if args.rtl_sample:
        sample = sweep.rtl_sample(base, points, net, args.rtl_sample, batch=1,
                                  progress=not args.quiet)
    if args.json:
        print(json.dumps({"points": len(points), "rows": rows, "pareto": front,
                          "failed": failed, "rtl_sample": sample, "seconds": wall,
                          "csv": str(out), "plot": str(plot)}, sort_keys=True, default=str))
    else:
        print(f"{len(rows)} of {len(points)} configurations of {net.name} in {wall:.1f} s: "
              f"{out}, Pareto plot {plot}")
        print(f"Pareto front (step time against area, {len(front)} points):")
        for r in front:
            print(f"  {r['label']:48s} {r['seconds'] * 1e3:12,.2f} ms  util "
                  f"{r['utilization']:.3f}  area {r['area']:14,.0f}")
        for r in sample:
            print(f"RTL sample: {r['label']}, {r['layer']} {r['phase']}: model {r['model']:,d}, "
                  f"RTL {r['rtl']:,d} ({r['error']:+.1%}), results "
                  f"{'match' if r['match'] else 'DIFFER'}")
        if sample:
            err = [abs(r["error"]) for r in sample]
            print(f"model error on the RTL sample: mean {sum(err) / len(err):.1%}, worst "
                  f"{max(err):.1%}")
    if failed:
        for label, why in failed:
            print(f"bpsa: point {label} failed: {why}", file=sys.stderr)
        print("bpsa: finished points are in the CSV; run the same command again to resume",
              file=sys.stderr)
        sys.exit(1)
    if sample and not all(r["match"] for r in sample):
        sys.exit(1)


def cmd_train(args):
    """``bpsa train``: the digits CNN in the accelerator's integer arithmetic
    (:mod:`bpsa.host.digits`)."""
    import json
    from pathlib import Path

    from bpsa.host import digits
    from bpsa.models.network_perf import network_step
    from bpsa.spec.network import load_network
    config = _config(args)
    try:
        digits.ModelOps(config)
    except ValueError as e:
        raise UserError(str(e)) from None
    if args.batch & (args.batch - 1):
        raise UserError(f"--batch {args.batch}: give a power of two")
    plot = Path(args.plot or f"build/train/digits_{args.backend}.png")
    if plot.suffix not in (".png", ".svg", ".pdf"):
        raise UserError(f"--plot {str(plot)!r}: the file must end in .png, .svg or .pdf")
    _out_dir(plot.parent if str(plot.parent) else ".")
    kw = dict(epochs=args.epochs, batch=args.batch, lr_shift=args.lr_shift, seed=args.seed)
    model_ops = digits.ModelOps(config)
    if args.backend == "rtl":
        import bpsa
        with bpsa.simulate(config) as acc:
            ops = digits.AcceleratorOps(acc, config)
            # the test accuracy in numpy (the same integers; the accelerator trains)
            master, history = digits.train(ops, progress=not args.json, eval_ops=model_ops,
                                           **kw)
    else:
        master, history = digits.train(model_ops, progress=not args.json, **kw)
    steps = (len(digits.load_digits_split(args.seed)[0]) // args.batch)
    if args.backend == "rtl":
        per_step = history[-1]["cycles"] / steps
        source = "measured BUSY_CYCLES of every layer run"
    else:
        step = network_step(config, load_network("digits"), batch=args.batch)
        per_step = step.totals["cycles"]
        source = "the cycle model (convolutions, FC and pooling)"
    reference, why = None, "--no-reference"
    if not args.no_reference:
        try:
            import torch  # noqa: F401
        except ImportError:
            why = "torch is not installed"
        else:
            reference = digits.torch_reference(**kw)
    _plot_training(history, reference, plot, args.backend)
    summary = {"dataset": "digits", "backend": args.backend, "config": config.name,
               "epochs": args.epochs, "batch": args.batch,
               "test_accuracy": history[-1]["test_accuracy"],
               "reference_accuracy": reference[-1]["test_accuracy"] if reference else None,
               "cycles_per_step": round(per_step), "cycles_per_epoch": round(per_step * steps),
               "cycles_source": source, "history": history, "plot": str(plot)}
    if args.json:
        print(json.dumps(summary, sort_keys=True))
        return
    for h in history:
        print(f"epoch {h['epoch']:3d}  loss {h['loss']:.4f}  train {h['train_accuracy']:.3f}  "
              f"test {h['test_accuracy']:.3f}"
              + (f"  reference {reference[h['epoch'] - 1]['test_accuracy']:.3f}"
                 if reference else ""))
    print(f"test accuracy {summary['test_accuracy']:.3f} ({args.backend} backend on "
          f"{config.name})" + (f", PyTorch float32 {summary['reference_accuracy']:.3f}"
                               if reference else f", no PyTorch reference ({why})"))
    print(f"{summary['cycles_per_step']:,d} accelerator cycles a step of {args.batch}, "
          f"{summary['cycles_per_epoch']:,d} an epoch ({source}); curves: {plot}")


def _plot_training(history, reference, path, backend):
    from bpsa.tools.perf_plots import plt
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
    epochs = [h["epoch"] for h in history]
    a.plot(epochs, [h["loss"] for h in history], "o-")
    a.set_xlabel("epoch")
    a.set_ylabel("training loss (integer softmax)")
    b.plot(epochs, [h["test_accuracy"] for h in history], "o-", label=f"accelerator ({backend})")
    b.plot(epochs, [h["train_accuracy"] for h in history], ".--", label="train (accelerator)")
    if reference:
        b.plot(epochs, [r["test_accuracy"] for r in reference], "s-", label="PyTorch float32")
    b.set_xlabel("epoch")
    b.set_ylabel("accuracy")
    b.set_ylim(0, 1)
    b.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


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
                        f"give --core module:Class (e.g. bpsa.platform.board_tops:StandInCore)"
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
                         "end")
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
    sp.add_argument("--network", metavar="NAME|FILE.csv",
                    help="a training step of a whole network: one of "
                         + ", ".join(_network_names()) + ", or a network file "
                         "(docs/networks.md)")
    sp.add_argument("--phases", metavar="forward,loss,gradient",
                    help="with --network: the phases of the step (default: all three)")
    sp.add_argument("--clock", type=_float_above(0), default=100.0, metavar="MHZ",
                    help="with --network: the clock for the time a step takes (default: 100)")
    sp.add_argument("--frontend", choices=["feeder", "channel_first", "best"],
                    default="feeder", type=lambda v: v.replace("-", "_"),
                    help="with --network: the forward's front end; best: per layer the "
                         "faster (the descriptor's MODE; configurations with forward_frontends "
                         "channel_first)")
    sp.add_argument("--csv", action="store_true", help="with --network: CSV on stdout")
    sp.add_argument("--plot", metavar="FILE.png|.svg",
                    help="with --network: utilization, time per layer and the roofline")
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

    sp = sub.add_parser("sweep", help="a grid of configurations on a whole network with the "
                                      "cycle model, in parallel on Dask: CSV and a Pareto plot "
                                      "of step time against area",
                        epilog="example: bpsa sweep --config paper16 --network resnet50 --grid "
                               "rows=8,16,32 cols=4,8,16 buf_a_depth=1024,4096,16384")
    sp.add_argument("--config", default="paper16",
                    help=f"the base configuration, a preset ({presets}) or a TOML file "
                         "(default: paper16)")
    sp.add_argument("--grid", nargs="+", required=True, metavar="FIELD=V1,V2",
                    help="configuration fields and their values (tuple fields join values "
                         "with +: dataflows=os+ws)")
    sp.add_argument("--network", default="resnet50", metavar="NAME|FILE.csv",
                    help="one of " + ", ".join(_network_names()) + ", or a network file "
                         "(default: resnet50)")
    sp.add_argument("--batch", type=_int_at_least(1), default=1, help="batch (default: 1)")
    sp.add_argument("--phases", default="forward,loss,gradient",
                    help="phases of the training step (default: all three)")
    sp.add_argument("--clock", type=_float_above(0), default=100.0, metavar="MHZ",
                    help="clock for the step time (default: 100)")
    sp.add_argument("--scheduler", metavar="ADDRESS",
                    help="a running Dask scheduler (tcp://host:8786); default: a LocalCluster "
                         "on this machine")
    sp.add_argument("--workers", type=_int_at_least(1), default=2,
                    help="LocalCluster worker processes (default: 2)")
    sp.add_argument("-o", "--output", metavar="FILE.csv",
                    help="the CSV (default: build/sweep/<network>_<config>.csv); rows are "
                         "appended as points finish, and a rerun skips the points in it")
    sp.add_argument("--plot", metavar="FILE.png|.svg",
                    help="the Pareto plot (default: the CSV's name with .png)")
    sp.add_argument("--synth", action="store_true",
                    help="area from Yosys (generic cells of each configuration, minutes "
                         "each) instead of the area model")
    sp.add_argument("--rtl-sample", type=_int_at_least(0), default=0, metavar="K",
                    help="re-run K random (configuration, layer, phase) points, layers capped "
                         "to 32 channels and 16 x 16, through the RTL and report the model's "
                         "error (a Verilator build a configuration)")
    sp.add_argument("--quiet", action="store_true", help="no progress bar")
    sp.add_argument("--json", action="store_true", help="print one JSON object")
    sp.set_defaults(func=cmd_sweep)

    sp = sub.add_parser("train", help="train the digits CNN in the accelerator's integer "
                                      "arithmetic, on the simulated RTL or its numpy model, "
                                      "next to PyTorch",
                        epilog="example: bpsa train --dataset digits --epochs 15 --backend rtl "
                               "--config ecp5_train")
    sp.add_argument("--dataset", choices=["digits"], required=True,
                    help="digits: scikit-learn's 8 x 8 handwritten digits")
    sp.add_argument("--backend", choices=["rtl", "model"], default="model",
                    help="rtl: the convolutions on the accelerator under Verilator; model: the "
                         "same integers in numpy (default)")
    sp.add_argument("--config", default="ecp5_train",
                    help=f"preset ({presets}) or TOML file with signed 16-bit operands "
                         "(default: ecp5_train)")
    sp.add_argument("--epochs", type=_int_at_least(1), default=15, help="default: 15")
    sp.add_argument("--batch", type=_int_at_least(1), default=32,
                    help="a power of two (default: 32)")
    sp.add_argument("--lr-shift", type=_int_at_least(0), default=2,
                    help="learning rate 2**-S (default: 2)")
    sp.add_argument("--seed", type=_int_at_least(0), default=0,
                    help="the split, the initial weights and the order (default: 0)")
    sp.add_argument("--plot", metavar="FILE.png",
                    help="loss and accuracy curves (default: build/train/digits_<backend>.png)")
    sp.add_argument("--no-reference", action="store_true",
                    help="skip the PyTorch float32 run")
    sp.add_argument("--json", action="store_true", help="print one JSON object")
    sp.set_defaults(func=cmd_train)

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
    except BrokenPipeError:             # the reader (head, less) stopped reading
        sys.stderr.close()
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
