"""Full-size layers through the RTL against the cycle model (``make rtl-layers``,
``python -m bpsa.tools.rtl_layers``): seven ResNet-50 layer phases (:data:`LAYERS`: the first
layer's forward and zero-free gradient, a 3x3 forward in row bands, a zero-free loss of stride
2, a 1x1 stride-2 zero-free gradient and forward (both run as the driver's space-to-depth,
:mod:`bpsa.plan.space_to_depth`) and a channel-first 1x1 forward on 7x7 planes with
images stacked a run) at full size through the whole accelerator under Verilator (the native
transport, :func:`bpsa.sim.native.run_with_driver`). Each result is checked bit-exactly
against the golden model (random operands in [-8, 8], accumulators wrapped to ``acc_width``),
and the RTL's BUSY_CYCLES and DMA bytes are set against :func:`bpsa.models.perf.layer_cycles`
of the same layer, batch and front end (model error = model / RTL - 1). Writes
``rtl_layers.md`` and ``rtl_layers.json`` (``docs/results/``, stamped by
:func:`bpsa.tools.results.write_page`).
"""

import argparse
import time
from pathlib import Path
from typing import NamedTuple

from bpsa.config import load_config
from bpsa.models.perf import layer_cycles
from bpsa.spec.layer import ConvLayer
from bpsa.spec.network import load_network
from bpsa.tools.results import current_command, write_page

__all__ = ["BUFFER_COUNTS", "LAYERS", "TOLERANCE", "Case", "layer_cases", "measure",
           "rtl_layers_report"]

#: The model's error a layer may have (model cycles over RTL cycles, less one).
TOLERANCE = 0.02

#: The layers measured: (ResNet-50 layer, phase, forward front end or ``"best"`` (the
#: model's faster), least batch, why).
LAYERS = (
    ("conv1", "forward", "best", 1, "first layer: C = 3, 7x7 stride 2"),
    ("conv1", "gradient", None, 1,
     "C = 3 filled 3 of 16 rows; the driver's space-to-depth runs it as 12 channels of 4x4 "
     "taps"),
    ("layer1.0.conv2", "forward", "best", 1, "3x3 in row bands"),
    ("layer2.0.conv2", "loss", None, 1, "3x3 stride 2"),
    ("layer3.0.downsample.0", "gradient", None, 1,
     "1x1 stride 2 (space-to-depth: the even rows and columns)"),
    ("layer2.0.downsample.0", "forward", "best", 1,
     "1x1 stride 2 (space-to-depth: X' a quarter of X)"),
    ("layer4.1.conv1", "forward", "channel_first", 2,
     "1x1 on 7x7 planes, images stacked a run (batch 2 at least)"),
)


class Case(NamedTuple):
    """One layer phase to measure: ``name`` (the layer's), ``phase``, ``frontend``
    (forward: ``feeder`` or ``channel_first``; else ``zero_free``), ``layer`` (its
    :class:`bpsa.spec.layer.ConvLayer`, batch included) and ``why`` it is in the table."""
    name: str
    phase: str
    frontend: str
    layer: ConvLayer
    why: str = ""


def _model(config, case):
    """:func:`bpsa.models.perf.layer_cycles` of ``case``."""
    fe = case.frontend if case.phase == "forward" else "feeder"
    return layer_cycles(config, case.phase, case.layer, frontend=fe)


def _best(config, layer):
    """The forward front end the model finds faster for ``layer`` on ``config``."""
    ends = [fe for fe in ("feeder", "channel_first") if config.has_frontend(fe)]
    return min(ends, key=lambda fe: layer_cycles(config, "forward", layer,
                                                 frontend=fe).cycles)


def layer_cases(config, *, batch=1, network="resnet50", picks=LAYERS):
    """The :class:`Case` of each of ``picks`` (:data:`LAYERS`' form) in ``network`` at
    ``batch`` images (or the pick's least batch, when more)."""
    by_name = {lay.name: lay for lay in load_network(network)}
    cases = []
    for name, phase, frontend, least, why in picks:
        lay = by_name[name]
        conv = ConvLayer.conv(max(batch, least), lay.c, lay.h, lay.w, lay.k, lay.r, lay.s,
                              lay.stride, lay.pad, lay.dilation)
        if phase != "forward":
            frontend = "zero_free"
        elif frontend == "best":
            frontend = _best(config, conv)
        cases.append(Case(name, phase, frontend, conv, why))
    return cases


def _shape(layer):
    k = f"{layer.kernel_h}x{layer.kernel_w}/{layer.stride_h}"
    return (f"{layer.channels}x{layer.height}x{layer.width} -> {layer.out_channels}, {k}"
            + (f" p{layer.pad_h}" if layer.pad_h else ""))


def _operands(case, rng):
    """Random X, W and dY of ``case`` in [-8, 8] (each phase takes two of them)."""
    lay = case.layer
    return {"x": rng.integers(-8, 9, lay.x_shape), "w": rng.integers(-8, 9, lay.w_shape),
            "dy": rng.integers(-8, 9, (lay.batch, lay.out_channels, *lay.out_hw))}


async def _drive(drv, case, ops):
    """``case`` through the driver: its result."""
    lay = case.layer
    geo = (lay.stride, lay.pad, lay.dil)
    if case.phase == "forward":
        return await drv.forward(ops["x"], ops["w"], *geo, frontend=case.frontend)
    if case.phase == "loss":
        return await drv.loss(ops["dy"], ops["w"], (lay.height, lay.width), *geo,
                              mode="zero_free")
    return await drv.gradient(ops["x"], ops["dy"], (lay.kernel_h, lay.kernel_w), *geo,
                              mode="zero_free")


def _golden(config, case, ops):
    """The golden model's result of ``case``, wrapped to ``acc_width``."""
    from bpsa.models import golden
    from bpsa.spec.numeric import wrap_array
    lay = case.layer
    geo = (lay.stride, lay.pad, lay.dil)
    if case.phase == "forward":
        want = golden.conv2d(ops["x"], ops["w"], *geo)
    elif case.phase == "loss":
        want = golden.conv2d_input_grad(ops["dy"], ops["w"], (lay.height, lay.width), *geo)
    else:
        want = golden.conv2d_weight_grad(ops["x"], ops["dy"], (lay.kernel_h, lay.kernel_w),
                                         *geo)
    return wrap_array(want, config.acc_width)


def _row(config, case, got, want, drv, model, seconds, sim_cycles):
    """The table's row of a measured case (``drv``: the driver that ran it)."""
    import numpy as np
    counters, rtl = drv.counters, drv.counters["busy_cycles"]
    plan = {key: value for key, value in drv.plan.items()
            if key in ("banded", "bands", "images")}
    frontend = case.frontend + (" (space-to-depth)" if model.space_to_depth else "")
    return {"layer": case.name, "phase": case.phase, "frontend": frontend,
            "shape": _shape(case.layer), "batch": case.layer.batch, "why": case.why,
            "plan": plan,
            "match": bool(np.array_equal(got, want)),
            "rtl_cycles": rtl, "model_cycles": model.cycles, "error": model.cycles / rtl - 1,
            "within": abs(model.cycles / rtl - 1) <= TOLERANCE,
            "rtl_utilization": model.macs / (config.rows * config.cols * rtl),
            "model_utilization": model.utilization,
            "rtl_dma_read_bytes": counters["dma_read_bytes"],
            "model_dma_read_bytes": model.dma_read_bytes,
            "rtl_dma_write_bytes": counters["dma_write_bytes"],
            "model_dma_write_bytes": model.dma_write_bytes,
            "dma_equal": (counters["dma_read_bytes"], counters["dma_write_bytes"])
            == (model.dma_read_bytes, model.dma_write_bytes),
            # the energy model's action counts: each buffer's words (P's reads apart: the
            # RTL also counts the DMA's repeated reads)
            "rtl_buffer_words": {k: counters[f"buf_{k}"] for k in BUFFER_COUNTS},
            "model_buffer_words": {k: getattr(model, k) for k in BUFFER_COUNTS},
            "buffers_equal": all(counters[f"buf_{k}"] == getattr(model, k)
                                 for k in BUFFER_COUNTS),
            "seconds": seconds, "sim_cycles": sim_cycles,
            "cycles_per_second": sim_cycles / seconds}


#: The buffer counters the model's figures equal (``buf_<name>`` of the RTL's counters).
BUFFER_COUNTS = ("a_reads", "a_writes", "b_reads", "b_writes", "p_writes")


def measure(config, cases, *, seed=1, progress=True):
    """Run ``cases`` (:class:`Case`) one after the other through the accelerator for
    ``config`` on the native transport, each checked against the golden model; returns a row
    a case: ``match`` (bit-exact), RTL and model cycles, ``error`` (model / RTL - 1),
    ``within`` (:data:`TOLERANCE`), utilization, DMA bytes read and written by both and
    ``dma_equal``, the buffer words of :data:`BUFFER_COUNTS` by both and ``buffers_equal``,
    the driver's ``plan`` (``banded``, ``bands``, ``images``), ``seconds`` of
    the driver's run (host-side layout included, the golden model not) and the simulated
    cycles (set-up and polling included) with their rate.
    ``progress``: a tqdm bar of the model's cycles and a line a finished case."""
    import numpy as np
    from tqdm import tqdm

    from bpsa.sim.native import job_memory, run_with_driver
    rng = np.random.default_rng(seed)
    models = [_model(config, case) for case in cases]

    async def body(drv, t):
        rows = []
        with tqdm(total=sum(m.cycles for m in models), unit="cycle", unit_scale=True,
                  disable=not progress, dynamic_ncols=True) as bar:
            for case, model in zip(cases, models):
                bar.set_description(f"{case.name} {case.phase}")
                start, done = t.cycles, bar.n

                def on_cycles(now, start=start, done=done, total=model.cycles):
                    bar.update(done + min(now - start, total) - bar.n)
                t.on_cycles = on_cycles
                t0 = time.perf_counter()
                ops = _operands(case, rng)
                got = await _drive(drv, case, ops)
                seconds = time.perf_counter() - t0
                bar.update(done + model.cycles - bar.n)
                rows.append(_row(config, case, got, _golden(config, case, ops), drv, model,
                                 seconds, t.cycles - start))
                if progress:
                    r = rows[-1]
                    bar.write(f"{case.name} {case.phase} ({case.frontend}): RTL "
                              f"{r['rtl_cycles']:,}, model {r['model_cycles']:,} "
                              f"({r['error']:+.2%}), match {r['match']}, DMA equal "
                              f"{r['dma_equal']}, {r['seconds']:.0f} s")
        return rows

    jobs = [{"layer": case.layer.to_dict()} for case in cases]
    return run_with_driver(config, body, mem_bytes=job_memory(config, jobs), seed=seed)


def _markdown(config, batch, rows, seconds):
    head = ("| layer | phase | front end | C x H x W -> K, kernel | batch | bands / images "
            "| RTL cycles | model cycles | error | DMA bytes equal | buffer words equal "
            "| match | run (s) | cycles / s |")
    lines = [f"ResNet-50 layer phases at full size, batch {batch} (or the layer's least "
             "batch), through the whole accelerator under Verilator (the native transport), "
             "each result bit-exact against the golden model (operands in [-8, 8]); RTL "
             "cycles are BUSY_CYCLES, model cycles `bpsa.models.perf.layer_cycles` of the "
             "same layer, batch and front end, error = model / RTL - 1 (target: within "
             f"{TOLERANCE:.0%}); DMA bytes read and written, and the words read and written "
             "of each buffer (A, B; P's writes), RTL against model.", "", head,
             "|---|---|---|---|---:|---|---:|---:|---:|---|---|---|---:|---:|"]
    for r in rows:
        p = r["plan"]
        plan = f"{p['bands'] if p.get('banded') else 1} / {p.get('images', 1)}"
        lines.append(
            f"| {r['layer']} | {r['phase']} | {r['frontend']} | {r['shape']} | {r['batch']} "
            f"| {plan} | {r['rtl_cycles']:,} | {r['model_cycles']:,} | {r['error']:+.2%} "
            f"| {r['dma_equal']} | {r['buffers_equal']} | {r['match']} | {r['seconds']:.0f} "
            f"| {r['cycles_per_second']:,.0f} |")
    cycles = sum(r["sim_cycles"] for r in rows)
    run = sum(r["seconds"] for r in rows)
    worst = max(rows, key=lambda r: abs(r["error"]))
    lines += ["", f"{sum(r['match'] for r in rows)} of {len(rows)} bit-exact, "
                  f"{sum(r['within'] for r in rows)} within {TOLERANCE:.0%} of the model "
                  f"(largest error {worst['error']:+.2%}, {worst['layer']} {worst['phase']}), "
                  f"DMA bytes equal on {sum(r['dma_equal'] for r in rows)}, buffer words "
                  f"on {sum(r['buffers_equal'] for r in rows)}. "
                  f"{cycles:,} cycles simulated in {run:.0f} s of layer runs "
                  f"({cycles / run:,.0f} cycles/s, the driver's host work included), "
                  f"{seconds:.0f} s in all (the model's build, when not cached, included).", ""]
    lines += ["Why each layer:", ""]
    lines += [f"- {r['layer']} {r['phase']}: {r['why']}" for r in rows]
    for r in rows:
        if not r["buffers_equal"]:
            lines.append(f"- {r['layer']} {r['phase']}: buffer words RTL "
                         f"{r['rtl_buffer_words']}, model {r['model_buffer_words']}")
        if not r["dma_equal"]:
            lines.append(f"- {r['layer']} {r['phase']}: DMA bytes read / written RTL "
                         f"{r['rtl_dma_read_bytes']:,} / {r['rtl_dma_write_bytes']:,}, model "
                         f"{r['model_dma_read_bytes']:,} / {r['model_dma_write_bytes']:,}")
    return "\n".join(lines) + "\n"


def rtl_layers_report(out_dir="docs/results", *, config_name="paper16", batch=1, seed=1,
                      progress=True, command=None):
    """:func:`measure` of :data:`LAYERS` (:func:`layer_cases`) on ``config_name`` into
    ``out_dir/rtl_layers.md`` and ``.json``, stamped with ``command`` (default: the equivalent
    ``python -m bpsa.tools.rtl_layers``), the commit and the date; returns the rows."""
    t0 = time.perf_counter()
    config = load_config(config_name)
    rows = measure(config, layer_cases(config, batch=batch), seed=seed, progress=progress)
    seconds = time.perf_counter() - t0
    command = command or (f"python -m bpsa.tools.rtl_layers --config {config_name} --batch "
                          f"{batch} --seed {seed} -o {out_dir}")
    write_page(Path(out_dir) / "rtl_layers.md",
               f"Full-size layers through the RTL against the cycle model ({config.name})",
               command, _markdown(config, batch, rows, seconds),
               data={"config": config_name, "batch": batch, "seed": seed,
                     "tolerance": TOLERANCE, "seconds": seconds, "rows": rows})
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default="paper16")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("-o", "--out", default="docs/results")
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    rows = rtl_layers_report(args.out, config_name=args.config, batch=args.batch,
                             seed=args.seed, command=current_command())
    print(f"{'layer':>22} {'phase':>8} {'front end':>13} {'RTL cycles':>11} "
          f"{'model':>11} {'error':>7}  DMA equal  match")
    for r in rows:
        print(f"{r['layer']:>22} {r['phase']:>8} {r['frontend']:>13} {r['rtl_cycles']:>11,} "
              f"{r['model_cycles']:>11,} {r['error']:>+7.2%}  {str(r['dma_equal']):>9}  "
              f"{r['match']}")
    print(f"wrote {args.out}/rtl_layers.md, rtl_layers.json "
          f"({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
