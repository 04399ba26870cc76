"""Layers through the whole accelerator top under Verilator (``bpsa sim --phase ...``,
``bpsa.tools.bench_accelerator``): jobs in, one summary per job out."""

import json
import tempfile
from pathlib import Path

from bpsa.plan import capability
from bpsa.plan.tiling import fc_plan, plan, plan_or_strips
from bpsa.spec.layer import ConvLayer

__all__ = ["check_fc", "check_job", "check_layer", "fc_job", "job", "run_fc",
           "run_jobs", "run_layer", "summary"]


def job(layer, phase, *, seed=1, pauses=False, zero_prob=0.0, baseline=False, mode=None,
        requant=None):
    """The testbench job of a :class:`bpsa.spec.layer.ConvLayer` (``baseline``: loss or
    gradient the traditional way, see :meth:`bpsa.spec.layer.ConvLayer.baseline`; ``mode``:
    the backward mode,
    default the driver's; ``requant``: a shift, the output leaves requantized)."""
    return {"phase": phase, "layer": layer.to_dict(), "seed": seed,
            "pauses": pauses, "zero_prob": zero_prob, "baseline": baseline, "mode": mode,
            "requant": requant}


def check_job(config, layer, phase, baseline=False, mode=None, requant=None):
    """Raise :exc:`ValueError` naming the reason when the accelerator generated for ``config``
    cannot run ``phase`` of ``layer`` (with ``baseline``: the traditional flow's forward
    convolution; ``mode``: the front end or backward mode, ``requant``: a shift, both checked
    by :func:`bpsa.plan.capability.check`); else returns the layer's tiling plan (a grouped
    layer's: a full pack's of :mod:`bpsa.plan.groups`, which every pack but maybe the last
    runs; the last, smaller, is checked too)."""
    if layer.groups > 1:
        from bpsa.plan import groups
        p = groups.packing(config, layer)
        last = groups.packs(layer, p)[-1][1]
        if last != p:
            check_job(config, groups.packed_layer(layer, last), phase, baseline, mode, requant)
        return check_job(config, groups.packed_layer(layer, p), phase, baseline, mode,
                         requant)
    if baseline and config.is_mx:
        raise ValueError(f"the traditional flow's baseline is not run in "
                         f"{config.arithmetic!r} (its zero-spaced operands would be quantized "
                         f"in blocks the contract does not have)")
    if baseline:
        try:
            return check_job(config, layer.baseline(phase), "forward", requant=requant)
        except ValueError as e:
            raise ValueError(f"the baseline's forward convolution: {e}") from None
    mode = capability.check(config, phase, mode=mode, requant=requant)
    span_w = layer.dil_w * (layer.kernel_w - 1) + 1
    if mode == "feeder" and span_w > config.feeder_pattern_width:
        raise ValueError(f"the dilated kernel spans {span_w} columns, more than "
                         f"feeder_pattern_width {config.feeder_pattern_width}")
    limit = (1 << config.dim_width) - 1
    for name, v in layer.to_dict().items():
        if v is not None and v > limit:
            raise ValueError(f"{name} = {v} does not fit dim_width {config.dim_width}")
    try:
        layer.out_hw
    except ValueError:
        raise ValueError("the dilated kernel is larger than the padded input") from None
    if phase == "loss" and mode == "channel_first":
        # one channel-first forward a stride class (bpsa.plan.loss_classes)
        from bpsa.plan.loss_classes import class_layers
        return {"classes": [plan_or_strips(config, "forward", cl, mode="channel_first")
                            for cl in class_layers(layer)]}
    # rows too wide for the controller: the driver cuts the layer into column strips
    return plan_or_strips(config, phase, layer, mode="bp_im2col" if mode == "feeder" else mode)


def summary(config, result, *, energy=False):
    """The flat summary of one testbench result; with ``energy``, its energy from its counters
    (:mod:`bpsa.models.energy`, 45 nm): ``energy_pj``, ``energy_pj_per_mac`` and each part's
    ``energy_<part>_pj``."""
    c = result["counters"]
    out = {"phase": result["phase"], "baseline": bool(result.get("baseline")),
           "mode": result.get("mode"), "requant": result.get("requant"),
           "match": result["match"], "cycles": c["busy_cycles"],
           "compute_cycles": c["compute_cycles"], "dma_busy_cycles": c["dma_busy_cycles"],
           "dma_read_bytes": c["dma_read_bytes"], "dma_write_bytes": c["dma_write_bytes"],
           "buf_a_words": c["buf_a_reads"] + c["buf_a_writes"],
           "buf_b_words": c["buf_b_reads"] + c["buf_b_writes"],
           "buf_p_words": c["buf_p_reads"] + c["buf_p_writes"],
           "macs": c["macs"], "gated_macs": c["gated_macs"],
           "useful_macs": result["useful_macs"],
           "utilization": result["useful_macs"] / max(1, c["busy_cycles"] * config.rows
                                                      * config.cols)}
    out["strips"] = result.get("strips", 1)
    out["overlap_cycles"] = c["overlap_cycles"]
    out["dma_overlap"] = c["overlap_cycles"] / max(1, c["dma_busy_cycles"])
    if energy:
        from bpsa.models.energy import actions_from_counters, energy as energy_of
        mode = out["mode"] or "feeder"          # (a forward's default front end)
        e = energy_of(config, actions_from_counters(config, mode, c))
        out.update({"energy_pj": e["pj"], "energy_pj_per_mac": e["pj_per_mac"],
                    **{f"energy_{k}_pj": v for k, v in e["parts"].items()}})
    return out


def run_jobs(config, jobs, *, tag="cli", harness="native", plans=None, **native):
    """Run ``jobs`` through the accelerator top; returns the testbench results. ``harness``:
    ``"native"`` (the compiled transport, :func:`bpsa.sim.native.run_jobs`, which takes the
    keyword arguments ``native``: progress bar, trace, build, and ``plans``, a job's
    :func:`check_job` plan each, handed on to the driver) or ``"cocotb"``
    (:mod:`bpsa.sim.testbenches.tb_accelerator`, cocotbext-axi's bus models; the testbench's
    process plans the jobs again; ``simulator``: :data:`bpsa.sim.runner.SIMULATORS`)."""
    if harness == "native":
        from bpsa.sim.native import run_jobs as native_jobs
        return native_jobs(config, jobs, plans=plans, **native)
    if harness != "cocotb":
        raise ValueError(f"harness must be 'native' or 'cocotb', not {harness!r}")
    simulator = native.pop("simulator", "verilator")
    if any(v not in (None, False) for v in native.values()):
        raise ValueError(f"--harness cocotb does not take {', '.join(native)}")
    from bpsa.sim.runner import run_cocotb
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "results.json"
        run_cocotb(config, "bpsa.sim.testbenches.tb_accelerator", top="accelerator",
                   testcase="layers",
                   extra_env={"BPSA_JOBS": json.dumps(jobs), "BPSA_RESULTS": str(out)},
                   tag=tag, simulator=simulator)
        return json.loads(out.read_text())


def _modes(phase, mode, forward_mode):
    """The ``mode`` of a job of ``phase``: ``forward_mode`` for the forward, else ``mode``."""
    return forward_mode if phase == "forward" else mode


def check_layer(config, layer, phases, *, baseline=False, mode=None, forward_mode=None,
                requant=None):
    """:func:`check_job` of every phase of ``phases`` of ``layer`` (``mode``: the loss's and
    the gradient's; ``forward_mode``: the forward's, ``"channel_first"`` or None for the
    feeder): the phases' plans, which :func:`run_layer` hands on to the driver. Raises
    :exc:`ValueError` naming the first phase's reason."""
    return [check_job(config, layer, p, baseline=baseline, mode=_modes(p, mode, forward_mode),
                      requant=requant if p != "gradient" else None) for p in phases]


def run_layer(config, layer, phases, *, seed=1, baseline=False, mode=None, forward_mode=None,
              requant=None, harness="native", plans=None, energy=False, **native):
    """Run ``phases`` of ``layer`` (a :class:`bpsa.spec.layer.ConvLayer`; :func:`job`'s
    options, ``mode`` and ``forward_mode`` as for :func:`check_layer`, whose ``plans`` a
    caller that checked the layer hands on) through the accelerator top (:func:`run_jobs`).
    Returns the :func:`summary` of the one phase, or of several (a training ``step``) one
    dict: ``match`` (every phase's), ``phase`` ``"step"`` and each phase's figures as
    ``<phase>_<figure>``; ``energy``: with each summary's energy (:func:`summary`)."""
    results = run_jobs(config, [job(layer, p, seed=seed, baseline=baseline,
                                    mode=_modes(p, mode, forward_mode), requant=requant)
                                for p in phases], harness=harness, plans=plans, **native)
    sums = [summary(config, r, energy=energy) for r in results]
    if len(sums) == 1:
        return sums[0]
    out = {"match": all(s["match"] for s in sums), "phase": "step"}
    for s in sums:
        out.update({f"{s['phase']}_{k}": v for k, v in s.items() if k not in ("phase",)})
    return out


def check_fc(config, layer, baseline=False):
    """Raise :exc:`ValueError` naming the reason when the accelerator generated for ``config``
    cannot run the backward pass of the FC ``layer`` (a :class:`bpsa.spec.layer.FcLayer`):
    as one interleaved descriptor (PHASE 3), or with ``baseline`` as the loss and the
    gradient of the equivalent 1x1 convolution."""
    if not baseline:
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
        conv = ConvLayer.conv(n, i, 1, 1, o, 1, 1)
        plan(config, "loss", conv)
        plan(config, "gradient", conv)


def fc_job(layer, *, seed=1, baseline=False):
    """The testbench job of the backward pass of the FC ``layer``: one interleaved descriptor,
    or with ``baseline`` the loss and the gradient of the 1x1 convolution."""
    return {"phase": "fc_backward", "seed": seed, "interleaved": not baseline,
            "layer": ConvLayer.conv(layer.batch, layer.inputs, 1, 1, layer.outputs, 1,
                                    1).to_dict()}


def run_fc(config, layer, *, seed=1, baseline=False, harness="native", **native):
    """Run the backward pass of the FC ``layer`` through the accelerator top
    (:func:`fc_job`, :func:`run_jobs`). Returns its :func:`summary` with ``phase`` ``"fc"``,
    ``layer`` (the layer's text) and ``interleaved``."""
    result = run_jobs(config, [fc_job(layer, seed=seed, baseline=baseline)], harness=harness,
                      **native)[0]
    out = summary(config, result)
    out.update(phase="fc", layer=layer.text(), interleaved=not baseline)
    return out
