"""``bpsa sweep``: every configuration of a grid on a network, with the cycle model, in parallel
on Dask.

A grid is ``FIELD=V1,V2,..`` items over the fields of :class:`bpsa.config.Config` (tuple
fields take ``+``-joined values: ``dataflows=os+ws``); the points are the product of the
items, each a copy of the base configuration with those fields changed. Every point is checked
before any work (an invalid value is one error naming the point and the field's range). Each
point runs :func:`bpsa.models.network_perf.network_step` on a Dask worker (a
``LocalCluster`` here, or the cluster of ``--scheduler``), prices its step's actions
(:func:`bpsa.models.energy.rows_energy`, 45 nm, every MAC fired: ``energy_uj``) and gets an
area from :mod:`bpsa.models.area` (or from Yosys with ``synth``). Rows go to the CSV as they finish
(flushed), so a crash loses nothing finished and rerunning the command resumes: points whose
label is in the CSV already are not run again.

The Pareto front (step time against area; the plot colours every point by its energy) is
taken over the points that run the most layer
phases (a point whose configuration refuses a layer the others run has an incomplete step time
and is left off the front, and the CSV says how many it refused).
"""

import csv
import itertools
import random
from pathlib import Path

from bpsa.config import Config, ConfigError

__all__ = ["GridError", "evaluate", "grid_front", "pareto", "parse_grid", "point_config",
           "run_sweep"]

#: The figures of a row, after the label and the grid's fields.
FIGURES = ("seconds", "cycles", "utilization", "forward_cycles", "loss_cycles",
           "gradient_cycles", "dma_bytes", "energy_uj", "layers_run", "refused", "cells",
           "memory_bits", "area", "area_source")


class GridError(ValueError):
    """A malformed grid or a grid point outside the configuration's allowed range."""


def synthesized(config, out_dir):
    """``{"cells", "memory_bits", "area"}`` of ``config`` from Yosys itself (generic cells
    of the whole accelerator; minutes to an hour by the size)."""
    from bpsa.models.area import memory_bits
    from bpsa.tools import synth
    report = synth.synth_report(config, "accelerator", out_dir, targets=["generic"])
    cells = report.data["targets"]["generic"]["summary"]["cells"]
    return {"cells": cells, "memory_bits": memory_bits(config), "area": cells}


def _value(field, text, kind):
    if kind is tuple:
        return tuple(v for v in text.split("+") if v)
    if kind is bool:
        if text.lower() not in ("true", "false", "1", "0"):
            raise GridError(f"grid {field}={text!r}: give true or false")
        return text.lower() in ("true", "1")
    if kind is int:
        try:
            return int(text)
        except ValueError:
            raise GridError(f"grid {field}={text!r}: not an integer") from None
    return text


def point_config(base, changes, name="sweep"):
    """The configuration of a grid point: ``base`` (a :class:`Config`, or its
    :meth:`Config.to_dict`) with ``changes``, and what follows the changed fields derived
    again as :meth:`Config.replace` derives it (``pool_lanes`` follows ``cols`` when the base's
    was ``cols``; the backward modes and front ends follow the dataflows)."""
    if not isinstance(base, Config):
        base = Config.from_dict(base)
    return base.replace(**changes, name=name)


def parse_grid(items, base):
    """``[(label, changes)]`` for ``items`` (``FIELD=V1,V2``) over ``base`` (a
    :class:`Config`); :exc:`GridError` for an unknown field, an empty list or a point the
    configuration does not allow."""
    kinds = {f: type(v) for f, v in base.to_dict().items() if f != "name"}
    kinds.update(dataflows=tuple, backward_modes=tuple)
    axes = []
    for item in items:
        field, sep, values = item.partition("=")
        if not sep or not field:
            raise GridError(f"grid item {item!r}: write FIELD=V1,V2,...")
        if field not in kinds:
            raise GridError(f"grid item {item!r}: {field!r} is not a configuration field "
                            f"(fields: {', '.join(sorted(kinds))})")
        if field in (a[0] for a in axes):
            raise GridError(f"grid item {item!r}: {field} is given twice")
        parsed = [_value(field, v, kinds[field]) for v in values.split(",") if v != ""]
        if not parsed:
            raise GridError(f"grid item {item!r}: no values")
        axes.append((field, parsed))
    if not axes:
        raise GridError("give at least one grid item FIELD=V1,V2,...")
    points = []
    for combo in itertools.product(*(vals for _, vals in axes)):
        changes = dict(zip((f for f, _ in axes), combo))
        label = " ".join(f"{f}={'+'.join(v) if isinstance(v, tuple) else v}"
                         for f, v in changes.items())
        try:
            point_config(base, changes)
        except ConfigError as e:
            raise GridError(f"grid point {label}: {e}") from None
        points.append((label, changes))
    return points


def evaluate(base_dict, label, changes, network, batch, phases, clock_mhz, synth_dir=None):
    """One grid point: a row of :data:`FIGURES` (runs on a Dask worker)."""
    from bpsa.models import area as area_model
    from bpsa.models.energy import rows_energy
    from bpsa.models.network_perf import network_step
    config = point_config(base_dict, changes)
    step = network_step(config, network, batch=batch, phases=phases, clock_mhz=clock_mhz)
    t = step.totals
    row = {"label": label, **{f: ("+".join(v) if isinstance(v, tuple) else v)
                               for f, v in changes.items()},
           "seconds": t["seconds"], "cycles": t["cycles"],
           "utilization": round(t["utilization"], 4),
           "dma_bytes": t["dma_read_bytes"] + t["dma_write_bytes"],
           "energy_uj": round(rows_energy(config, step.rows)["pj"] / 1e6, 3),
           "layers_run": t["layers_run"], "refused": t["refused"]}
    for phase in ("forward", "loss", "gradient"):
        row[f"{phase}_cycles"] = step.by_phase.get(phase, {}).get("cycles", 0)
    if synth_dir is not None:
        row.update(synthesized(config, Path(synth_dir) / _slug(label)),
                   area_source="yosys")
    else:
        row.update(area_model.estimate(config), area_source="model")
    return row


def _slug(label):
    return "".join(ch if ch.isalnum() else "_" for ch in label)


def _done(path, fields):
    """Labels already in the CSV at ``path`` (written by the same grid), else an empty set."""
    if not path.exists() or path.stat().st_size == 0:
        return set()
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        if reader.fieldnames != fields:
            raise GridError(f"{path}: written by a different grid (columns "
                            f"{','.join(reader.fieldnames or [])}); give another -o or remove "
                            f"it")
        return {row["label"] for row in reader}


def read_rows(path):
    with Path(path).open(newline="") as f:
        rows = list(csv.DictReader(f))
    for row in rows:
        for k in ("seconds", "area", "utilization", "energy_uj"):
            row[k] = float(row[k])
        for k in ("refused", "layers_run", "cycles"):
            row[k] = int(row[k])
    return rows


def pareto(rows):
    """The rows not dominated in (area, seconds), among those that run the most layers."""
    if not rows:
        return []
    most = max(r["layers_run"] for r in rows)
    full = sorted((r for r in rows if r["layers_run"] == most),
                  key=lambda r: (r["area"], r["seconds"]))
    front, best = [], float("inf")
    for r in full:
        if r["seconds"] < best:
            front.append(r)
            best = r["seconds"]
    return front


def grid_front(rows, points, plot, *, base, network, batch):
    """The rows of this grid's ``points`` (a resumed CSV may hold other points too) and their
    Pareto front (:func:`pareto`), drawn into the file ``plot`` (``.png``, ``.svg`` or
    ``.pdf``; titled by the ``network``, the ``batch`` and the ``base`` configuration).
    Returns ``(rows, front)``."""
    from bpsa.tools.perf_plots import plot_pareto
    labels = {label for label, _ in points}
    rows = [r for r in rows if r["label"] in labels]
    front = pareto(rows)
    plot_pareto(rows, front, plot, f"{network.name}, batch {batch}: {len(rows)} "
                                   f"configurations from {base.name} (cycle model)")
    return rows, front


def connect(scheduler, workers, timeout="10s"):
    """A Dask client: of the cluster at ``scheduler``, or of a new ``LocalCluster`` of
    ``workers`` one-thread processes. :exc:`GridError` when the scheduler cannot be reached
    within ``timeout``."""
    from dask.distributed import Client, LocalCluster
    if scheduler:
        try:
            return Client(scheduler, timeout=timeout)
        except (OSError, TimeoutError) as e:
            raise GridError(f"cannot reach the Dask scheduler at {scheduler!r}: {e}") from None
    cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                           dashboard_address=None)
    return Client(cluster)


def run_sweep(base, points, network, out_csv, *, batch=1, phases=("forward", "loss",
              "gradient"), clock_mhz=100.0, scheduler=None, workers=2, synth_dir=None,
              progress=True):
    """Evaluate ``points`` (:func:`parse_grid`) of ``network`` on Dask, appending a row to
    ``out_csv`` as each finishes; points already in it are skipped. Returns ``(rows,
    failed)``: every row of the CSV, and the labels whose evaluation failed."""
    from dask.distributed import as_completed
    from tqdm import tqdm
    out_csv = Path(out_csv)
    fields = ["label"] + list(points[0][1]) + list(FIGURES)
    done = _done(out_csv, fields)
    todo = [(label, ch) for label, ch in points if label not in done]
    failed = []
    if todo:
        base_dict = {k: v for k, v in base.to_dict().items() if k != "name"}
        client = connect(scheduler, workers)
        try:
            futures = {client.submit(evaluate, base_dict, label, ch, network, batch,
                                     tuple(phases), clock_mhz, synth_dir, pure=False): label
                       for label, ch in todo}
            new = not out_csv.exists() or out_csv.stat().st_size == 0
            with out_csv.open("a", newline="") as f, \
                    tqdm(total=len(points), initial=len(points) - len(todo), unit="config",
                         disable=not progress, desc=f"sweep {network.name}") as bar:
                writer = csv.DictWriter(f, fields, lineterminator="\n")
                if new:
                    writer.writeheader()
                for fut in as_completed(futures):
                    label = futures[fut]
                    try:
                        row = fut.result()
                    except Exception as e:      # a worker died or the point failed: go on
                        failed.append((label, f"{type(e).__name__}: {e}"))
                    else:
                        writer.writerow(row)
                        f.flush()
                    bar.update(1)
        finally:
            cluster = getattr(client, "cluster", None)
            client.close()
            if cluster is not None:
                cluster.close()
    return read_rows(out_csv), failed


def rtl_sample(base, points, network, count, *, batch=1, seed=1, max_channels=32,
               max_size=16, progress=True):
    """Re-run ``count`` random (grid point, conv layer, phase) triples through the RTL (the
    native Verilator transport, layers capped to ``max_channels`` channels and ``max_size``
    rows and columns so a run takes seconds) and compare the RTL's BUSY_CYCLES with the
    model's. Returns rows of ``label``, ``layer``, ``phase``, ``model``, ``rtl``, ``error``
    (model / RTL - 1) and ``match`` (the RTL's results equal the golden model's)."""
    from bpsa.models.perf import layer_cycles
    from bpsa.spec.layer import ConvLayer
    from bpsa.sim.accel_run import job, run_jobs, summary
    rng = random.Random(seed)
    convs = [lay for lay in network if lay.op == "conv"]
    if not convs:
        raise GridError(f"network {network.name!r} has no convolution to sample")
    picks, tries = [], 0
    while len(picks) < count and tries < 100 * count:
        tries += 1
        label, changes = rng.choice(points)
        lay = rng.choice(convs)
        phase = rng.choice(("forward", "loss", "gradient"))
        config = point_config(base, changes, f"{base.name}_{_slug(label)}")
        c, k = min(lay.c, max_channels), min(lay.k, max_channels)
        h, w = min(lay.h, max_size), min(lay.w, max_size)
        layer = ConvLayer.conv(batch, c, h, w, k, lay.r, lay.s, stride=lay.stride,
                               pad=lay.pad, dil=lay.dilation)
        try:
            model = layer_cycles(config, phase, layer)
        except ValueError:
            continue
        picks.append((label, config, lay.name, layer, phase, model.cycles))
    rows = []
    for label in dict.fromkeys(p[0] for p in picks):     # one Verilator build a configuration
        mine = [p for p in picks if p[0] == label]
        config = mine[0][1]
        results = run_jobs(config, [job(p[3], p[4], seed=i + 1) for i, p in enumerate(mine)],
                           tag="sweep", progress=progress)
        for (_, _, name, layer, phase, model), res in zip(mine, results):
            s = summary(config, res)
            rows.append({"label": label, "layer": f"{name} {layer.text()}", "phase": phase,
                         "model": model, "rtl": s["cycles"], "error": model / s["cycles"] - 1,
                         "match": bool(s["match"])})
    return rows
