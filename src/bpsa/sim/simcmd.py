"""``bpsa sim`` on one top: a random problem through the generated RTL of the array or of an
engine top under Verilator, run by the top's cocotb testbench (:mod:`bpsa.sim.testbenches`) and
checked against numpy or the golden model, with a summary of cycles, counters and utilization.

These are the runners of the single-top testbenches: they name them by module (cocotb imports
them in the simulator's process), and no testbench imports them back. ``python -m
bpsa.sim.simcmd [--config small] N,I,O ...`` prints the FC comparison table (:func:`main`).
"""

import hashlib
import json
import tempfile
from dataclasses import asdict
from pathlib import Path

from bpsa.sim import conv_backward_run, conv_forward_run, fc_backward_run
from bpsa.sim.runner import run_cocotb
from bpsa.spec.layer import ConvLayer, FcLayer, parse_layer

__all__ = ["check_cf_layer", "check_zg_layer", "compare_fc", "main", "run_backward",
           "run_backward_layers", "run_cf_layers", "run_fc_layers", "run_forward",
           "run_forward_layers", "run_gemm", "run_zg_layers"]


def _summary_run(config, test_module, *, top, env, tag, testcase=None, progress=True):
    """Run the cocotb module ``test_module`` on ``top`` with ``env`` and ``BPSA_SUMMARY``, the
    path the testbench writes its summary to; return that summary, also when a test failed
    after writing it (its ``match`` says so). ``progress``: a first build says so on standard
    error."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "summary.json"
        try:
            run_cocotb(config, test_module, top=top, testcase=testcase,
                       extra_env=dict(env, BPSA_SUMMARY=str(out)), tag=tag, progress=progress)
        except AssertionError:
            if not out.exists():
                raise
        return json.loads(out.read_text())


def _layers_env(name, layers):
    """``{name: the layers as JSON}`` and a short digest of it for the run's tag."""
    text = json.dumps([asdict(layer) for layer in layers])
    return {name: text}, hashlib.sha256(text.encode()).hexdigest()[:10]


def run_gemm(config, flow, dims, *, seed=1, sgd_shift=None, stall=0.0, progress=True):
    """Run a random GEMM (or, for ``interleaved``, an FC backward pass with dims (O, Bt, I))
    on the array generated for ``config`` (:mod:`bpsa.sim.testbenches.tb_array`). Returns the
    summary dict; ``match`` tells whether every result equals numpy (floating point: the
    golden model). ``stall`` (``os`` only): the probability of an idle cycle before each slot
    (a stalling feeder). ``progress``: a first build says so on standard error."""
    env = {"BPSA_FLOW": flow, "BPSA_DIMS": ",".join(str(d) for d in dims),
           "BPSA_SEED": str(seed), "BPSA_SGD": "" if sgd_shift is None else str(sgd_shift),
           "BPSA_STALL": str(stall)}
    tag = f"{flow}_{'x'.join(str(d) for d in dims)}_{seed}_{sgd_shift}_{stall}"
    return _summary_run(config, test_module="bpsa.sim.testbenches.tb_array", top="array",
                        env=env, tag=tag, progress=progress)


def run_forward_layers(config, layers, *, seed=1, random_base=False, progress=True):
    """Run ``layers`` (a list of :class:`ConvLayer`) one after the other on one ConvForward
    generated for ``config`` under Verilator (:mod:`bpsa.sim.testbenches.tb_conv_forward`),
    with random X and W from ``seed``. Returns one summary dict per layer (see
    :func:`bpsa.sim.conv_forward_run.summary`); ``match`` tells whether Y equals
    ``bpsa.models.golden.conv2d``. Raises :exc:`ValueError` with the reason for a layer the
    hardware would refuse."""
    for layer in layers:
        conv_forward_run.descriptor(config, layer)
    env, digest = _layers_env("BPSA_LAYERS", layers)
    env.update(BPSA_SEED=str(seed), BPSA_RANDOM_BASE="1" if random_base else "")
    return _summary_run(config, test_module="bpsa.sim.testbenches.tb_conv_forward",
                        top="conv_forward", testcase="forward_matches_golden", env=env,
                        tag=f"{seed}_{digest}", progress=progress)


def check_cf_layer(config, layer, phase="forward"):
    """``layer`` when the channel-first engine of ``config`` takes it for ``phase``, else
    :exc:`ValueError` with the reason: the testbench's
    :func:`bpsa.sim.testbenches.tb_channel_first.check_layer`, for callers outside the
    simulation package."""
    from bpsa.sim.testbenches.tb_channel_first import check_layer
    return check_layer(config, layer, phase=phase)


def run_cf_layers(config, layers, *, phases=None, seed=1, progress=True):
    """Run ``layers`` one after the other on the channel-first engine (top ``cf_engine``)
    generated for ``config`` under Verilator (:mod:`bpsa.sim.testbenches.tb_channel_first`),
    run by run, with random operands from ``seed`` (float32 quantized along C in an MX
    format); ``phases``: ``"forward"`` (default) or ``"loss"`` (its stride classes' forwards)
    a layer. Returns one summary dict per layer
    (:func:`bpsa.sim.testbenches.tb_channel_first.summary`); ``match`` tells whether Y (dX)
    equals the golden model's.
    Raises :exc:`ValueError` with the reason for a layer the engine cannot take."""
    from bpsa.sim.testbenches.tb_channel_first import check_layer
    phases = list(phases or ["forward"] * len(layers))
    for layer, phase in zip(layers, phases, strict=True):
        check_layer(config, layer, phase=phase)
    env, digest = _layers_env("BPSA_LAYERS", layers)
    env.update(BPSA_SEED=str(seed), BPSA_PHASES=",".join(phases))
    digest = hashlib.sha256((digest + env["BPSA_PHASES"]).encode()).hexdigest()[:10]
    return _summary_run(config, test_module="bpsa.sim.testbenches.tb_channel_first",
                        top="cf_engine", testcase="layers_match_golden", env=env,
                        tag=f"{seed}_{digest}", progress=progress)


def check_zg_layer(config, layer):
    """``layer`` when the zero-free gradient engine of ``config`` takes it, else
    :exc:`ValueError` with the reason: the testbench's
    :func:`bpsa.sim.testbenches.tb_zf_gradient.check_layer`, for callers outside the
    simulation package."""
    from bpsa.sim.testbenches.tb_zf_gradient import check_layer
    return check_layer(config, layer)


def run_zg_layers(config, layers, *, seed=1, progress=True):
    """Run the gradients of ``layers`` one after the other on the zero-free gradient engine
    (top ``zg_engine``) generated for ``config`` under Verilator
    (:mod:`bpsa.sim.testbenches.tb_zf_gradient`), run by run, with random X and dY from
    ``seed`` (float32 quantized along the rows in an MX format). Returns one summary dict per
    layer (:func:`bpsa.sim.testbenches.tb_zf_gradient.summary`); ``match`` tells whether dW
    equals the golden model's. Raises :exc:`ValueError` with the reason for a layer the
    engine cannot take."""
    for layer in layers:
        check_zg_layer(config, layer)
    env, digest = _layers_env("BPSA_LAYERS", layers)
    env.update(BPSA_SEED=str(seed))
    return _summary_run(config, test_module="bpsa.sim.testbenches.tb_zf_gradient",
                        top="zg_engine", testcase="layers_match_golden", env=env,
                        tag=f"{seed}_{digest}", progress=progress)


def run_forward(config, layer, *, seed=1, progress=True):
    """:func:`run_forward_layers` for one layer: its summary dict."""
    return run_forward_layers(config, [layer], seed=seed, progress=progress)[0]


def run_backward_layers(config, layers, *, phase="loss", baseline=False, seed=1,
                        progress=True):
    """Run ``layers`` one after the other on one ConvBackward generated for ``config`` under
    Verilator (:mod:`bpsa.sim.testbenches.tb_conv_backward`), random dY and W from ``seed``.
    Returns one summary dict per layer. Raises :exc:`ValueError` for a layer the hardware
    refuses."""
    for layer in layers:
        conv_backward_run.check_layer(config, layer, phase, baseline)
    env, digest = _layers_env("BPSA_LAYERS", layers)
    env.update(BPSA_SEED=str(seed), BPSA_BASELINE="1" if baseline else "", BPSA_PHASE=phase)
    return _summary_run(config, test_module="bpsa.sim.testbenches.tb_conv_backward",
                        top="conv_backward", testcase="backward_matches_golden", env=env,
                        tag=f"{phase}_{seed}_{int(baseline)}_{digest}", progress=progress)


def run_backward(config, phase, layer, *, baseline=False, seed=1, progress=True):
    """:func:`run_backward_layers` for one layer (a :class:`ConvLayer` or a layer string):
    its summary dict."""
    if not isinstance(layer, ConvLayer):
        layer = parse_layer(layer)
    return run_backward_layers(config, [layer], phase=phase, baseline=baseline, seed=seed,
                               progress=progress)[0]


def run_fc_layers(config, layers, *, sgd_shift=None, seed=1, progress=True):
    """Run FC layers (:class:`FcLayer`) one after the other on one ConvBackward generated for
    ``config`` under Verilator (cocotb test ``fc_matches_golden`` of
    :mod:`bpsa.sim.testbenches.tb_conv_backward`). Returns one summary dict per layer. Raises
    :exc:`ValueError` for a layer the hardware refuses."""
    for layer in layers:
        fc_backward_run.check_layer(config, layer, sgd_shift)
    env, digest = _layers_env("BPSA_FC_LAYERS", layers)
    env.update(BPSA_SEED=str(seed), BPSA_SGD_SHIFT="" if sgd_shift is None else str(sgd_shift))
    return _summary_run(config, test_module="bpsa.sim.testbenches.tb_conv_backward",
                        top="conv_backward", testcase="fc_matches_golden", env=env,
                        tag=f"fc_{seed}_{sgd_shift}_{digest}", progress=progress)


def compare_fc(config, layers, *, seed=9):
    """Each FC layer interleaved, and as two 1x1-convolution descriptors (loss, gradient) on
    the same engine: one row of figures per layer."""
    fc = run_fc_layers(config, layers, seed=seed)
    convs = [ConvLayer.conv(f.batch, f.inputs, 1, 1, f.outputs, 1, 1) for f in layers]
    loss = run_backward_layers(config, convs, phase="loss", seed=seed)
    grad = run_backward_layers(config, convs, phase="gradient", seed=seed)
    rows = []
    for f, r, lo, gr in zip(layers, fc, loss, grad):
        rows.append({"layer": f.text(), "match": r["match"] and lo["match"] and gr["match"],
                     "cycles": r["cycles"], "utilization": r["utilization"],
                     "loss_cycles": lo["cycles"], "gradient_cycles": gr["cycles"],
                     "reads": sum(r["buffer_words_read"].values()),
                     "separate_reads": sum(lo["buffer_words_read"].values())
                     + sum(gr["buffer_words_read"].values())})
    return rows


def main(argv=None):
    """``python -m bpsa.sim.simcmd [--config small] N,I,O ...``: the table of
    :func:`compare_fc`."""
    import argparse

    from bpsa.config import load_config
    ap = argparse.ArgumentParser(prog="python -m bpsa.sim.simcmd",
                                 description="Each FC layer's backward pass interleaved, and as "
                                 "a loss and a gradient descriptor, on ConvBackward's RTL.")
    ap.add_argument("--config", default="small")
    ap.add_argument("layers", nargs="+", metavar="N,I,O")
    args = ap.parse_args(argv)
    config = load_config(args.config)
    layers = [FcLayer(*(int(v) for v in text.split(","))) for text in args.layers]
    for layer in layers:
        fc_backward_run.check_layer(config, layer)
    rows = compare_fc(config, layers)
    print("| FC layer (N, I, O) | match | interleaved cycles | utilization | loss + gradient "
          "cycles | buffer words read, interleaved / separate |")
    print("|---|---|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['layer']} | {r['match']} | {r['cycles']} | {r['utilization']:.3f} | "
              f"{r['loss_cycles']} + {r['gradient_cycles']} = "
              f"{r['loss_cycles'] + r['gradient_cycles']} | {r['reads']} / "
              f"{r['separate_reads']} |")
    return 0 if all(r["match"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
