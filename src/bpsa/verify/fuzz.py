"""Random layers through the whole accelerator on the native transport (``bpsa fuzz``).

Every job is a random layer of a phase the configuration generates (forward, loss, gradient,
FC backward, pooling forward and backward), with random shapes, strides, padding, dilation
(pooling: kind, ReLU), batch and groups (a quarter of the convolutions grouped, half of
those depthwise: they run in packs of groups, bpsa.plan.groups), under random memory
back-pressure.
Most are layers the configuration runs (the driver tiles them, in column strips
when a row is too wide): each result is compared with :mod:`bpsa.models.golden`. About one in
eight is a layer that one descriptor cannot hold: it is sent as one descriptor with the
driver's own check off, and the hardware must refuse it with the error code of the set-up
programs (:func:`bpsa.plan.setup.run`), move no data and not hang. In an MX format the jobs
are the convolution phases of the accelerator's MX build, compared with
:mod:`bpsa.models.mx` in the front ends' orders (no refusal is drawn for the loss, which is
several descriptors); :func:`fuzz_engine` runs the MX engines on their own.
"""

import dataclasses
import time

import numpy as np

from bpsa.plan import setup
from bpsa.plan.grammar import Refusal
from bpsa.plan.tiling import mode_value
from bpsa.spec.errors import error_name
from bpsa.spec.layer import ConvLayer
from bpsa.spec.regmap import Phase

__all__ = ["ENGINE_BATCH", "engine_phases", "fuzz", "fuzz_engine", "modes", "no_phase", "phases",
           "random_engine_layer", "random_job"]

_PHASES = {"forward": Phase.FORWARD, "loss": Phase.LOSS, "gradient": Phase.GRADIENT,
           "fc_backward": Phase.FC_BACKWARD, "pool_forward": Phase.POOL_FORWARD,
           "pool_backward": Phase.POOL_BACKWARD}
_POOL = ("pool_forward", "pool_backward")
#: Random jobs stay below this many dense MACs (so that thousands run in minutes).
MAX_MACS = 40_000
#: Stall probabilities of the memory's channels a job draws from.
STALLS = (0.0, 0.0, 0.2, 0.5)


def phases(config):
    """The phases the accelerator generated for ``config`` runs (MX: the convolution phases,
    the loss as the forwards of its stride classes)."""
    if config.is_mx:
        from bpsa.plan.capability import MX_MODES
        return list(MX_MODES)
    names = {p: name for name, p in _PHASES.items()}
    return [names[p] for p in setup.generated_phases(config)]


def no_phase(config):
    """Why the accelerator generated for ``config`` runs no phase a job could draw, or
    ``""`` when it runs one."""
    if phases(config):
        return ""
    return (f"configuration {config.name!r} generates no accelerator phase to fuzz (the "
            f"forward needs the 'os' dataflow with reserve_registers, the loss and the "
            f"gradient a backward mode, the pooling phases pool_kinds)")


def modes(config, phase):
    """The modes (names) the hardware runs ``phase`` in: the backward modes, the forward's
    front ends (``None``: the feeder; ``"channel_first"`` when generated), ``[None]`` for the
    other phases. MX: the phase's front end (:data:`bpsa.plan.capability.MX_MODES`)."""
    if config.is_mx:
        from bpsa.plan.capability import MX_MODES
        return list(MX_MODES[phase])
    if phase == "forward":
        return [None] + (["channel_first"] if config.has_frontend("channel_first") else [])
    if phase not in ("loss", "gradient"):
        return [None]
    return list(config.backward_modes)


def _refusal(config, phase, lay, mode=None):
    """The error name the hardware answers ``lay`` sent as one descriptor with, or None."""
    g = lay.get("groups", 1)           # the hardware runs a group at a time
    desc = {"phase": _PHASES[phase], "n": lay["batch"], "c": lay["channels"] // g,
            "h": lay["height"], "w": lay["width"], "k": lay["out_channels"] // g,
            "r": lay["kernel_h"], "s": lay["kernel_w"],
            "mode": int(mode_value(mode)) if mode else 0,
            "pool_kind": _KIND.get(lay.get("kind"), 0), "relu": int(lay.get("relu", False))}
    desc.update({k: lay[k] for k in ("stride_h", "stride_w", "pad_h", "pad_w", "dil_h",
                                     "dil_w")})
    try:
        setup.run(config, desc, addresses=False)
    except Refusal as e:
        return error_name(e.code)
    return None


#: POOL_KIND values of the pooling kinds.
_KIND = {"max": 0, "avg": 1}


def _pool_layer(config, rng, refuse):
    """A pooling layer: kernel 1-4 per axis, stride 1-4, padding up to kernel // 2 (beyond it,
    or a plane too large for a band, when it must be refused; the other refusals, a kind
    not generated or a dilation, the driver cannot send and tests/test_gateware_accelerator.py
    sends as raw descriptors)."""
    r, s = int(rng.integers(1, 5)), int(rng.integers(1, 5))
    kinds = list(config.pool_kinds)
    lay = {"batch": int(rng.integers(1, 3)), "channels": int(rng.integers(1, 6)),
           "height": int(rng.integers(r, 24)), "width": int(rng.integers(s, 24)),
           "kernel_h": r, "kernel_w": s, "stride_h": int(rng.integers(1, 5)),
           "stride_w": int(rng.integers(1, 5)), "pad_h": int(rng.integers(0, r // 2 + 1)),
           "pad_w": int(rng.integers(0, s // 2 + 1)), "dil_h": 1, "dil_w": 1,
           "kind": kinds[int(rng.integers(len(kinds)))], "relu": bool(rng.integers(0, 2))}
    if refuse:
        if rng.random() < 0.5:
            lay["pad_h"] = r // 2 + 1
        else:
            lay.update(height=int(rng.integers(1, 4)), batch=1, channels=1,
                       width=int(rng.integers(config.buf_pool_depth // 2,
                                              2 * config.buf_pool_depth)))
    lay["out_channels"] = lay["channels"]
    return lay


def _conv_layer(config, rng, wide):
    r, s = int(rng.integers(1, 5)), int(rng.integers(1, 5))
    lay = {"batch": int(rng.integers(1, 4)), "channels": int(rng.integers(1, 13)),
           "height": int(rng.integers(1, 20)), "width": int(rng.integers(1, 20)),
           "out_channels": int(rng.integers(1, 13)), "kernel_h": r, "kernel_w": s,
           "stride_h": int(rng.integers(1, 5)), "stride_w": int(rng.integers(1, 5)),
           "pad_h": int(rng.integers(0, r)), "pad_w": int(rng.integers(0, s)),
           "dil_h": int(rng.integers(1, 4)), "dil_w": int(rng.integers(1, 4))}
    if wide:    # wider than a bank: runs as column strips, refused as one descriptor
        bank = max(config.buf_a_depth, config.buf_b_depth, config.buf_p_depth)
        lay.update(height=int(rng.integers(1, 5)), width=int(rng.integers(bank // 4, 2 * bank)),
                   channels=int(rng.integers(1, 3)), out_channels=int(rng.integers(1, 3)),
                   batch=1)
    elif rng.random() < 0.25:       # grouped, half of them depthwise (one or two filters)
        if rng.random() < 0.5:
            g = lay["channels"]
            lay["out_channels"] = g * int(rng.integers(1, 3))
        else:
            g = int(rng.integers(2, 5))
            lay["channels"] = g * max(1, lay["channels"] // g)
            lay["out_channels"] = g * max(1, lay["out_channels"] // g)
        lay["groups"] = g
    return lay


def random_job(config, rng):
    """A random job (see the module docstring) for ``config`` from the numpy generator
    ``rng``: ``{"phase", "layer", "seed", "stall", "mode"}`` (a backward mode the
    configuration generates for the phase, drawn at random), plus ``"expect"`` (the error name)
    for a layer the hardware must refuse."""
    from bpsa.sim.accel_run import check_job
    choices = phases(config)
    if not choices:
        raise ValueError(no_phase(config))
    phase = choices[int(rng.integers(len(choices)))]
    mode_choices = modes(config, phase)
    mode = mode_choices[int(rng.integers(len(mode_choices)))]
    # (an MX loss is several descriptors, its stride classes: no refusal of one to draw)
    refuse = rng.random() < 0.125 and not (config.is_mx and phase == "loss")
    for attempt in range(10_000):
        if attempt == 200:      # no refusal found for this phase: a layer it runs
            refuse = False
        if phase in _POOL:
            lay = _pool_layer(config, rng, refuse)
            try:
                oh, ow = ConvLayer.conv(1, 1, lay["height"], lay["width"], 1, lay["kernel_h"],
                                        lay["kernel_w"], (lay["stride_h"], lay["stride_w"]),
                                        (lay["pad_h"], lay["pad_w"]),
                                        (lay["dil_h"], lay["dil_w"])).out_hw
            except ValueError:
                continue
            if max(lay["height"], lay["width"]) >= 1 << config.dim_width:
                continue
            job = {"phase": phase, "layer": lay, "seed": int(rng.integers(1 << 30)),
                   "stall": float(STALLS[int(rng.integers(len(STALLS)))]), "mode": None}
            expect = _refusal(config, phase, lay)
            if (expect is None) == refuse:
                continue
            if refuse:
                job["expect"] = expect
            return job
        if phase == "fc_backward":
            big = 2 * config.buf_p_depth if refuse else 48
            lay = {"batch": int(rng.integers(1, 17)), "channels": int(rng.integers(1, 49)),
                   "out_channels": int(rng.integers(1, big)), "height": 1,
                   "width": 1, "kernel_h": 1, "kernel_w": 1}
        else:
            lay = _conv_layer(config, rng, wide=refuse and rng.random() < 0.7)
        lay = dataclasses.asdict(ConvLayer.conv(
            lay["batch"], lay["channels"], lay["height"], lay["width"], lay["out_channels"],
            lay["kernel_h"], lay["kernel_w"], stride=(lay.get("stride_h", 1),
                                                      lay.get("stride_w", 1)),
            pad=(lay.get("pad_h", 0), lay.get("pad_w", 0)),
            dil=(lay.get("dil_h", 1), lay.get("dil_w", 1)), groups=lay.get("groups", 1)))
        layer = ConvLayer(**lay)
        # a dimension no descriptor field holds
        if max(v for v in lay.values() if isinstance(v, int)) >= 1 << config.dim_width:
            continue
        try:
            oh, ow = layer.out_hw
        except ValueError:
            continue
        if layer.macs > MAX_MACS and not refuse:
            continue
        job = {"phase": phase, "layer": lay, "seed": int(rng.integers(1 << 30)),
               "stall": float(STALLS[int(rng.integers(len(STALLS)))]), "mode": mode}
        expect = _refusal(config, phase, lay, mode)
        if refuse:
            if expect is None:
                continue
            job["expect"] = expect
            if phase == "fc_backward":      # one PHASE 3 descriptor, no fallback
                job["interleaved"] = True
            return job
        if phase == "fc_backward":
            if expect is not None:
                continue
            job["interleaved"] = True
            return job
        try:
            check_job(config, layer, phase, mode=mode)
        except ValueError:
            continue
        return job
    raise RuntimeError(f"no random {phase} layer found for configuration {config.name!r}")


def fuzz(config, count, *, seed=1, progress=False, opt=None, threads=None, hardware=None):
    """Run ``count`` random jobs (:func:`random_job`, from ``seed``) on the native transport
    (of ``hardware``, default ``config``: :class:`bpsa.sim.native.NativeTransport`).
    Returns ``{"jobs", "ran", "refused" (error name -> count), "mismatches" (a list of
    ``{"job", "error"}``), "cycles", "seconds", "layers_per_second", "cycles_per_second"}``;
    a mismatch is a result that differs from the golden model, a wrong refusal, a refusal
    that moved data, or a hang."""
    from tqdm import tqdm

    from bpsa.host.driver import BUDGET_FACTOR, AcceleratorError
    from bpsa.sim.jobs import run_job
    from bpsa.sim.native import HangError, expected_cycles, run_with_driver

    if not isinstance(count, int) or count < 1:
        raise ValueError(f"count must be a positive number of layers, not {count!r}")
    rng = np.random.default_rng(seed)
    jobs = [random_job(config, rng) for _ in range(count)]
    out = {"jobs": count, "ran": 0, "refused": {}, "mismatches": [], "cycles": 0}

    async def body(drv, t):
        t0 = time.perf_counter()
        for job in tqdm(jobs, unit="layer", disable=not progress, leave=False,
                        dynamic_ncols=True):
            t.set_stall(job["stall"])
            t.watchdog = 2 * BUDGET_FACTOR * expected_cycles(config, job)
            try:
                if job.get("expect"):
                    drv.check = False
                    try:
                        await run_job(config, drv, job, lambda: t.cycles)
                    except AcceleratorError as e:
                        moved = drv.counters["dma_read_bytes"] + drv.counters["dma_write_bytes"]
                        if e.name != job["expect"] or moved:
                            out["mismatches"].append({"job": job, "error": (
                                f"refused with {e.name}, moving {moved} bytes; expected "
                                f"{job['expect']}, moving none")})
                        else:
                            out["refused"][e.name] = out["refused"].get(e.name, 0) + 1
                    else:
                        out["mismatches"].append({"job": job, "error": "not refused"})
                    finally:
                        drv.check = True
                    continue
                got, want, _ = await run_job(config, drv, job, lambda: t.cycles)
            except HangError as e:
                out["mismatches"].append({"job": job, "error": f"hang: {e}"})
                break       # the design is stuck: later jobs would hang too
            out["ran"] += 1
            if not np.array_equal(got, want):
                bad = np.argwhere(got != want)[:3].tolist()
                out["mismatches"].append({"job": job, "error": (
                    f"differs from the golden model at {bad}: got "
                    f"{[int(got[tuple(b)]) for b in bad]}, want "
                    f"{[int(want[tuple(b)]) for b in bad]}")})
        out["cycles"] = int(t.cycles)
        out["seconds"] = time.perf_counter() - t0

    # memory for the largest layer's tensors (a 16 x 16 configuration's layers outgrow 1 MiB)
    from bpsa.sim.native import job_memory
    run_with_driver(config, body, mem_bytes=job_memory(config, jobs), seed=seed, opt=opt,
                    threads=threads, hardware=hardware)
    out["layers_per_second"] = out["jobs"] / max(out["seconds"], 1e-9)
    out["cycles_per_second"] = out["cycles"] / max(out["seconds"], 1e-9)
    return out


#: Layers a Verilator run of an engine takes (:func:`fuzz_engine`).
ENGINE_BATCH = 100


def engine_phases(config):
    """The phases :func:`fuzz_engine` draws for ``config``: ``forward`` and ``loss`` on the
    channel-first engine (the ``ws`` dataflow, at most 32 rows in MX), ``gradient`` on the
    zero-free gradient engine (the ``os`` dataflow). :exc:`ValueError` with the reasons when
    neither is generated."""
    from bpsa.gateware.frontends.channel_first.channel_first import check_config
    out = []
    try:
        check_config(config)
        out += ["forward", "loss"]
    except ValueError as e:
        why = str(e)
    if config.has("os"):
        out.append("gradient")
    if not out:
        raise ValueError(f"{why}; the zero-free gradient engine needs the 'os' dataflow")
    return out


def random_engine_layer(config, rng, phases=None):
    """``(phase, layer)``: a random layer of one of ``phases`` (default
    :func:`engine_phases`) its engine of ``config`` takes: forward and loss on the
    channel-first engine (:func:`bpsa.sim.simcmd.check_cf_layer`; C up to past two 32-channel
    blocks), gradient on the zero-free gradient engine (:func:`bpsa.sim.simcmd.check_zg_layer`;
    rows up to 80 pixels, past two 32-pixel blocks); batch 1-2, K past the columns, kernels
    1-3, strides 1-3, padding 0-2, dilation 1-2, below :data:`MAX_MACS`."""
    from bpsa.sim.simcmd import check_cf_layer, check_zg_layer
    phases = phases or engine_phases(config)
    for _ in range(10_000):
        phase = str(rng.choice(phases))
        n, k = int(rng.integers(1, 3)), int(rng.integers(1, 2 * config.cols + 3))
        if phase == "gradient":
            c = int(rng.integers(1, 2 * config.feeder_bus_width + 3))
            h, w = int(rng.integers(1, 9)), int(rng.integers(1, 81))
        else:
            c = int(rng.integers(1, 71))
            h, w = (int(v) for v in rng.integers(1, 11, 2))
        r, s = (int(v) for v in rng.integers(1, 4, 2))
        stride, pad, dil = (tuple(int(v) for v in rng.integers(lo, hi, 2))
                            for lo, hi in ((1, 4), (0, 3), (1, 3)))
        try:
            layer = ConvLayer.conv(n, c, h, w, k, r, s, stride=stride, pad=pad, dil=dil)
            oh, ow = layer.out_hw
            if min(oh, ow) < 1 or n * k * oh * ow * c * r * s > MAX_MACS:
                continue
            if phase == "gradient":
                return phase, check_zg_layer(config, layer)
            return phase, check_cf_layer(config, layer, phase=phase)
        except ValueError:
            continue
    raise RuntimeError(f"no random layer found for the engines of {config.name!r}")


def fuzz_engine(config, count, *, seed=1, progress=False):
    """Run ``count`` random layers (:func:`random_engine_layer`, from ``seed``) on the
    engines' Verilog under Verilator, :data:`ENGINE_BATCH` a simulator run: forward and loss
    on the channel-first engine (:func:`bpsa.sim.simcmd.run_cf_layers`), gradient on the
    zero-free gradient engine (:func:`bpsa.sim.simcmd.run_zg_layers`); in integers, or in an
    MX format against the contract's orders of those front ends; a layer's cycles must equal
    the cycle model's (its engine part). Returns ``{"jobs", "ran", "phases" (phase ->
    count), "mismatches" (a list of ``{"job", "error"}``), "cycles", "seconds",
    "layers_per_second", "cycles_per_second", "target": "engines"}``."""
    from tqdm import tqdm

    from bpsa.sim.simcmd import run_cf_layers, run_zg_layers
    if not isinstance(count, int) or count < 1:
        raise ValueError(f"count must be a positive number of layers, not {count!r}")
    phases = engine_phases(config)
    rng = np.random.default_rng(seed)
    jobs = [random_engine_layer(config, rng, phases) for _ in range(count)]
    out = {"jobs": count, "ran": 0, "phases": {}, "refused": {}, "mismatches": [],
           "cycles": 0, "target": "engines"}
    t0 = time.perf_counter()
    batches = []
    for grad in (False, True):
        mine = [job for job in jobs if (job[0] == "gradient") == grad]
        batches += [(grad, mine[b:b + ENGINE_BATCH]) for b in range(0, len(mine), ENGINE_BATCH)]
    for i, (grad, part) in enumerate(tqdm(batches, unit="batch", disable=not progress,
                                          leave=False, dynamic_ncols=True)):
        lays = [lay for _, lay in part]
        res = (run_zg_layers(config, lays, seed=seed + i, progress=progress) if grad else
               run_cf_layers(config, lays, phases=[p for p, _ in part], seed=seed + i,
                             progress=progress))
        for (phase, layer), r in zip(part, res):
            out["ran"] += 1
            out["phases"][phase] = out["phases"].get(phase, 0) + 1
            out["cycles"] += r["cycles"]
            if not r["match"]:
                out["mismatches"].append({"job": {"phase": phase, "layer": layer.text()},
                                          "error": "differs from the golden model"})
            if r["cycles"] != r["model_cycles"]:
                out["mismatches"].append({"job": {"phase": phase, "layer": layer.text()},
                                          "error": f"{r['cycles']} cycles, the cycle model "
                                                   f"{r['model_cycles']}"})
        if len(res) < len(part):
            out["mismatches"].append({"job": {"batch": i}, "error": (
                f"the simulation stopped after {len(res)} of {len(part)} layers")})
    out["seconds"] = time.perf_counter() - t0
    out["layers_per_second"] = out["ran"] / max(out["seconds"], 1e-9)
    out["cycles_per_second"] = out["cycles"] / max(out["seconds"], 1e-9)
    return out
