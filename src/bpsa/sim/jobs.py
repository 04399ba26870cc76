"""Layer jobs through the host driver, on any transport: random tensors, the run, the golden
result and a summary. The cocotb testbench (:mod:`bpsa.sim.testbenches.tb_accelerator`) and the
native transport (:func:`bpsa.sim.native.run_jobs`) share them."""

import time

import numpy as np

from bpsa.models import float_layers, float_pool, golden
from bpsa.spec.layer import ConvLayer
from bpsa.spec.numeric import operand_range, wrap_array

__all__ = ["DEFAULT_JOBS", "job_layer", "job_tensors", "run_job", "run_jobs"]

#: Default jobs: one small layer per phase (stride 2, padding 1).
DEFAULT_JOBS = [{"phase": p, "layer": {"batch": 1, "channels": 2, "height": 5, "width": 5,
                                       "out_channels": 3, "kernel_h": 3, "kernel_w": 3,
                                       "stride_h": 2, "stride_w": 2, "pad_h": 1, "pad_w": 1},
                 "seed": 1} for p in ("forward", "loss", "gradient")]


def job_tensors(cfg, layer, rng, zero_prob):
    """Random operands of ``layer`` (a :class:`ConvLayer`) from ``rng``: ``x``, ``w`` and
    ``dy``, a share ``zero_prob`` of each set to zero (floating point: encodings,
    :func:`bpsa.sim.gemm.random_float_operands`, at least 10 % zeros and subnormals and 1 %
    infinities and NaNs)."""
    oh, ow = golden.output_hw((layer.height, layer.width), (layer.kernel_h, layer.kernel_w),
                              layer.stride, layer.pad, layer.dil)
    shapes = {"x": layer.x_shape, "w": layer.w_shape,
              "dy": (layer.batch, layer.out_channels, oh, ow)}
    if cfg.is_mx:
        # MX: float32 of many magnitudes (the blocks' scales differ) with zeros
        from bpsa.sim.gemm import random_mx_operand
        out = {}
        for name, shape in shapes.items():
            v = random_mx_operand(shape, rng)
            if zero_prob:
                v[rng.random(shape) < zero_prob] = 0
            out[name] = v
        return out
    if cfg.is_float:
        # floating point: at least 10 % zeros and subnormals, so skipped MACs are everywhere
        from bpsa.sim.gemm import random_float_operands
        return {name: random_float_operands(cfg.arithmetic, shape, rng, max(zero_prob, 0.1))
                for name, shape in shapes.items()}
    lo, hi = operand_range(cfg)
    out = {}
    for name, shape in shapes.items():
        t = rng.integers(lo, hi + 1, shape)
        if zero_prob:
            t[rng.random(shape) < zero_prob] = 0
        out[name] = t
    return out


def job_layer(job):
    """The :class:`ConvLayer` of ``job`` (its ``"layer"`` dict, :meth:`ConvLayer.to_dict`;
    a pooling job's dict also holds ``kind`` and ``relu``)."""
    return ConvLayer.from_dict(job["layer"])


def _float_golden(cfg, phase, plan, ops, hw, geo, requant=False, rewrite=None):
    """The floating-point golden result of one phase as the driver ran it (``plan``: its
    tiling, whose groups, bands or column strips fix the order of the fp32 additions;
    ``rewrite``: the driver's :class:`bpsa.plan.space_to_depth.SpaceToDepth` when it ran the
    inner layer, whose own tiling may order the additions differently from the layer's)."""
    if rewrite is not None:
        i = rewrite.inner
        ops = {name: (rewrite.x(t) if name == "x" else rewrite.weights(t) if name == "w"
                      else t) for name, t in ops.items()}
        hw = None if phase == "forward" else (i.kernel_h, i.kernel_w)
        out = _float_golden(cfg, phase, plan, ops, hw, dict(stride=1, padding=i.pad,
                                                             dilation=1), requant)
        return out if phase == "forward" else rewrite.dw(out)
    return float_layers.accelerator_run(phase, plan, ops, cfg.arithmetic, hw, geo["stride"],
                                        geo["padding"], geo["dilation"], requant=requant)


async def _mx_phase(cfg, drv, phase, layer, t, args, job, plan):
    """MX: one convolution phase through the driver and its golden value in the orders of the
    front ends that run it (``docs/architecture/mx.md``: the channel-first order with ``part =
    min(rows, 32)`` for the forward and the loss, the zero-free walker's for the gradient), both
    as float32 encodings."""
    from bpsa.models import mx
    fmt, part = cfg.arithmetic, min(cfg.rows, 32)
    geo = (args["stride"], args["padding"], args["dilation"])
    if phase == "forward":
        got = await drv.forward(t["x"], t["w"], frontend=job.get("mode"), plan=plan, **args)
        want = mx.conv_forward(t["x"], t["w"], fmt, *geo, part=part)
    elif phase == "loss":
        hw = (layer.height, layer.width)
        got = await drv.loss(t["dy"], t["w"], hw, mode=job.get("mode"), plan=plan, **args)
        want = mx.conv_loss(t["dy"], t["w"], fmt, hw, *geo, part=part)
    else:
        kh = (layer.kernel_h, layer.kernel_w)
        got = await drv.gradient(t["x"], t["dy"], kh, mode=job.get("mode"), plan=plan, **args)
        want = mx.conv_gradient(t["x"], t["dy"], fmt, kh, *geo, walker=True)
    return np.asarray(got, np.float32).view(np.uint32), np.asarray(want, np.uint32)


async def _conv_phase(cfg, drv, phase, layer, t, args, job, plan):
    """One convolution phase of an ungrouped ``layer`` through the driver and its golden
    value (MX, floating point, integers; the traditional flow's baseline): ``(got, want)``."""
    if cfg.is_mx:
        return await _mx_phase(cfg, drv, phase, layer, t, args, job, plan)
    elif phase == "forward" and cfg.is_float:
        got = await drv.forward(t["x"], t["w"], requant=job.get("requant"),
                                frontend=job.get("mode") or "feeder", plan=plan, **args)
        want = _float_golden(cfg, "forward", drv.plan, {"x": t["x"], "w": t["w"]}, None, args,
                             requant=job.get("requant") is not None, rewrite=drv.rewrite)
    elif phase == "forward":
        got = await drv.forward(t["x"], t["w"], requant=job.get("requant"),
                                frontend=job.get("mode") or "feeder", plan=plan, **args)
        want = golden.conv2d(t["x"], t["w"], args["stride"], args["padding"], args["dilation"])
    elif phase in ("loss", "gradient") and cfg.is_float and job.get("baseline"):
        # the traditional flow: the forward convolution of the zero-spaced operands
        from bpsa.host.driver import baseline_gradient_operands, baseline_loss_operands
        if phase == "loss":
            hw = (layer.height, layer.width)
            got = await drv.loss_baseline(t["dy"], t["w"], hw, plan=plan, **args)
            zp, wt, d = baseline_loss_operands(t["dy"], t["w"], hw, **args)
            want = _float_golden(cfg, "forward", drv.plan, {"x": zp, "w": wt}, None,
                                 dict(stride=1, padding=0, dilation=d))
        else:
            kh = (layer.kernel_h, layer.kernel_w)
            got = await drv.gradient_baseline(t["x"], t["dy"], kh, plan=plan, **args)
            xt, dd, d = baseline_gradient_operands(t["x"], t["dy"], kh, **args)
            want = _float_golden(cfg, "forward", drv.plan, {"x": xt, "w": dd}, None,
                                 dict(stride=d, padding=0, dilation=1)).transpose(1, 0, 2, 3)
    elif phase == "loss" and cfg.is_float:
        got = await drv.loss(t["dy"], t["w"], (layer.height, layer.width),
                             mode=job.get("mode"), requant=job.get("requant"), plan=plan,
                             **args)
        want = _float_golden(cfg, "loss", drv.plan, {"dy": t["dy"], "w": t["w"]},
                             (layer.height, layer.width), args,
                             requant=job.get("requant") is not None)
    elif phase == "gradient" and cfg.is_float:
        got = await drv.gradient(t["x"], t["dy"], (layer.kernel_h, layer.kernel_w),
                                 mode=job.get("mode"), plan=plan, **args)
        want = _float_golden(cfg, "gradient", drv.plan, {"x": t["x"], "dy": t["dy"]},
                             (layer.kernel_h, layer.kernel_w), args, rewrite=drv.rewrite)
    elif phase == "loss":
        if job.get("baseline"):
            got = await drv.loss_baseline(t["dy"], t["w"], (layer.height, layer.width),
                                          plan=plan, **args)
        else:
            got = await drv.loss(t["dy"], t["w"], (layer.height, layer.width),
                                 mode=job.get("mode"), requant=job.get("requant"), plan=plan,
                                 **args)
        want = golden.conv2d_input_grad(t["dy"], t["w"], (layer.height, layer.width),
                                        args["stride"], args["padding"], args["dilation"])
    else:
        if job.get("baseline"):
            got = await drv.gradient_baseline(t["x"], t["dy"],
                                              (layer.kernel_h, layer.kernel_w), plan=plan,
                                              **args)
        else:
            got = await drv.gradient(t["x"], t["dy"], (layer.kernel_h, layer.kernel_w),
                                     mode=job.get("mode"), plan=plan, **args)
        want = golden.conv2d_weight_grad(t["x"], t["dy"], (layer.kernel_h, layer.kernel_w),
                                         args["stride"], args["padding"], args["dilation"])
    return got, want


async def _grouped_phase(cfg, drv, phase, layer, t, args, job, plan):
    """A grouped layer's phase, a descriptor a pack of groups (:mod:`bpsa.plan.groups`: the
    packs' operand slices, W block-diagonal, each dW's diagonal blocks), the results joined
    and the counters summed; integers: checked against the grouped golden model itself, the
    other arithmetics (whose golden value follows each run's order of additions) pack by
    pack. ``plan``: a full pack's (:func:`bpsa.sim.accel_run.check_job`'s)."""
    from bpsa.plan import groups
    p = groups.packing(cfg, layer)
    one, got, want, total = layer.group_layer(), [], [], {}
    cg, kg = one.channels, one.out_channels
    for first, count in groups.packs(layer, p):
        part = {"x": t["x"][:, first * cg:(first + count) * cg],
                "w": groups.block_weights(t["w"], layer, first, count),
                "dy": t["dy"][:, first * kg:(first + count) * kg]}
        g, w = await _conv_phase(cfg, drv, phase, groups.packed_layer(layer, count), part,
                                 args, job, plan if count == p else None)
        if phase == "gradient":
            g, w = (groups.diagonal_blocks(v, layer, count) for v in (g, w))
        got.append(g)
        want.append(w)
        total = {name: v + total.get(name, 0) for name, v in drv.counters.items()}
    drv.counters = total
    axis = 0 if phase == "gradient" else 1
    got, want = np.concatenate(got, axis), np.concatenate(want, axis)
    if not (cfg.is_float or cfg.is_mx or job.get("baseline")):
        kw = dict(args, groups=layer.groups)
        if phase == "forward":
            want = golden.conv2d(t["x"], t["w"], **kw)
        elif phase == "loss":
            want = golden.conv2d_input_grad(t["dy"], t["w"], (layer.height, layer.width), **kw)
        else:
            want = golden.conv2d_weight_grad(t["x"], t["dy"], (layer.kernel_h, layer.kernel_w),
                                             **kw)
    return got, want


async def run_job(cfg, drv, job, clock, plan=None):
    """Run one job (``{"phase", "layer", "seed", "zero_prob", "baseline", "interleaved",
    "mode", "requant", "space_to_depth"}``; the last ``False``: the driver rewrites no layer,
    :mod:`bpsa.plan.space_to_depth`) through the driver ``drv``: random tensors from
    ``seed``, the result
    and its golden value (wrapped to ``acc_width``; with ``requant``, a shift, requantized to
    operands as the forward's or zero-free loss's output then leaves) and a summary
    (counters, match, useful MACs, simulated cycles by ``clock()``, wall seconds). ``plan``:
    the convolution's tiling when the caller checked the job already
    (:func:`bpsa.sim.accel_run.check_job`), handed on to the driver. Returns ``(got, want,
    summary)``."""
    layer = job_layer(job)
    lay = {**layer.to_dict(), **job["layer"]}       # the summary's (pooling: kind, relu)
    rng = np.random.default_rng(job.get("seed", 1))
    t = job_tensors(cfg, layer, rng, job.get("zero_prob", 0.0))
    args = dict(stride=layer.stride, padding=layer.pad, dilation=layer.dil)
    phase = job["phase"]
    drv.space_to_depth = job.get("space_to_depth", True)
    t0, s0 = time.perf_counter(), clock()
    if phase in ("pool_forward", "pool_backward"):     # the pooling unit
        kind, relu = lay["kind"], bool(lay.get("relu"))
        k = (layer.kernel_h, layer.kernel_w)
        pargs = dict(stride=args["stride"], padding=args["padding"], relu=relu)
        fmt = cfg.arithmetic
        if phase == "pool_forward":
            got = await drv.pool(t["x"], kind, k, **pargs)
            if cfg.is_float:
                want = float_pool.pool2d(t["x"], kind, k, args["stride"], args["padding"], fmt,
                                         relu=relu)
            else:
                want = golden.pool2d(t["x"], kind, k, args["stride"], args["padding"])
                want = np.maximum(want, 0) if relu else want
        else:
            got = await drv.pool_backward(t["dy"], t["x"], kind, k, **pargs)
            if cfg.is_float:
                want = float_pool.pool2d_backward(t["dy"], t["x"], kind, k, args["stride"],
                                                  args["padding"], fmt, relu=relu)
            else:
                want = golden.pool2d_backward(t["dy"], t["x"], kind, k, args["stride"],
                                              args["padding"])
                want = want * (t["x"] > 0) if relu else want
    elif phase == "fc_backward":      # a fully connected layer: N x C inputs, K outputs
        x, w, dy = (t[name].reshape(t[name].shape[:2]) for name in ("x", "w", "dy"))
        dx, dw = await drv.fc_backward(x, w, dy, interleaved=job.get("interleaved"))
        got = np.concatenate([dx.ravel(), dw.ravel()])
        want = np.concatenate([(dy @ w).ravel(), (dy.T @ x).ravel()])
    elif layer.groups > 1:
        got, want = await _grouped_phase(cfg, drv, phase, layer, t, args, job, plan)
    else:
        got, want = await _conv_phase(cfg, drv, phase, layer, t, args, job, plan)
    sim_cycles = int(clock() - s0)
    sim_seconds = time.perf_counter() - t0
    if not (cfg.is_float or cfg.is_mx):
        want = wrap_array(want, cfg.acc_width)
    if job.get("requant") is not None and not cfg.is_float:   # the output leaves as operands
        want = golden.requantize(want, job["requant"], cfg.operand_width, cfg.operand_signed)
    c = dict(drv.counters)
    # every phase does the forward's multiply-accumulates: N K OH OW C R S
    macs_dense = int(t["dy"].size) * layer.crs
    if phase == "fc_backward":      # dX and dW: two products of that size
        macs_dense *= 2
    if phase.startswith("pool_"):   # no MAC
        macs_dense = 0
    summary = {"phase": phase, "layer": lay, "pauses": bool(job.get("pauses")),
               "baseline": bool(job.get("baseline")),
               "mode": None if job.get("baseline") else drv.mode,
               "requant": job.get("requant"),
               "interleaved": job.get("interleaved"),
               "match": bool(np.array_equal(got, want)), "counters": c,
               "strips": len(drv.plan["strips"]) if isinstance(drv.plan, dict)
               and "strips" in drv.plan else 1,
               "cycles": c["busy_cycles"],
               "useful_macs": macs_dense, "sim_cycles": sim_cycles,
               "sim_seconds": sim_seconds}
    return got, want, summary


async def run_jobs(cfg, drv, jobs, clock, *, before=None, log=None, plans=None):
    """Run ``jobs`` one after the other (:func:`run_job`); a job with ``"expect"`` must be
    refused with that error name (the driver's own check is off for it). ``before(i, job)``
    prepares a job (e.g. the memory's stalls), ``log(i, summary)`` reports one; ``plans``:
    a job's plan each (:func:`run_job`), or ``None``. Returns one summary a job;
    :exc:`AssertionError` when a result differs from the golden model or a refusal is not the
    expected one."""
    from bpsa.host.driver import AcceleratorError
    out = []
    for i, job in enumerate(jobs):
        if before:
            before(i, job)
        if job.get("expect"):
            drv.check = False
            try:
                await run_job(cfg, drv, job, clock)
            except AcceleratorError as e:
                assert e.name == job["expect"], f"job {i} {job}: {e}"
                out.append({"phase": job["phase"], "layer": job["layer"], "refused": e.name})
                continue
            finally:
                drv.check = True
            raise AssertionError(f"job {i} {job}: not refused")
        got, want, summary = await run_job(cfg, drv, job, clock,
                                           plans[i] if plans is not None else None)
        out.append(summary)
        if not summary["match"]:
            bad = np.argwhere(got != want)[:5].tolist()
            raise AssertionError(f"job {i} {job}: result differs from the golden model at "
                                 f"{bad} (got {[int(got[tuple(b)]) for b in bad]}, want "
                                 f"{[int(want[tuple(b)]) for b in bad]})")
        if log:
            log(i, summary)
    return out

