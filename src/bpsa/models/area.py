"""Area model of the whole accelerator, fitted on Yosys reports of the presets.

Area is the Yosys generic-cell count of the whole accelerator, ``bpsa synth --config P --top
accelerator --targets generic`` (``synth -flatten``; with no SRAM library Yosys maps the
buffers to flip-flops and read multiplexers, so they are in the count, at about three cells a
bit). It ranks configurations by size; it is not an ASIC area (an SRAM macro is several times
denser than flip-flops).

- ``memory_bits`` is exact, from the configuration: X / A ``buf_a_depth`` words of
  ``feeder_bus_width`` operands, W / B ``buf_b_depth`` words of ``cols`` operands, P
  ``buf_p_depth`` words of ``cols`` accumulators, and with the BP-im2col mode its own A and B
  of one operand a word (Yosys reported 245,760 bits for ``small`` and 4,325,376 for
  ``paper16`` before the pooling unit), and the pooling unit's ``buf_pool_depth`` operands.
- The pooling unit's logic (none of the fitted points has one) is added,
  :func:`pool_logic_cells`: ``bpsa synth --top pool --targets generic`` gave 53,342 cells
  on ``small`` with one lane and 75,875 on ``ecp5_train``, 33,200 and 35,600 of them beyond
  their buffers' bits at the fit's cells a bit (:data:`POOL_LOGIC_CELLS`, their mean), and
  138,072 on ``small`` with four lanes (``pool_lanes``; docs/synth/pool_small_lanes4),
  57,400 beyond its buffer's bits: 8,000 cells a lane more.
- The channel-first front end (``forward_frontends``; none of the fitted points has one):
  its ``rows`` X banks of ``buf_cf_depth`` operands are in ``memory_bits``, its logic is
  :func:`cf_logic_cells`, a line through two syntheses with the banks kept as memories
  (``bpsa.tools.yosys.synthesize(..., keep_memories=...)`` of ``--top channel_first``):
  9,572 generic cells on ``small`` (4 rows), 27,033 on ``paper16`` (16 rows).
- ``cells`` is a least-squares fit, ``a0 + a1 memory_bits + a2 R C w^2 + a3 R C acc
  dataflows`` (``w`` operand bits, ``acc`` accumulator bits): the controller, the buffers,
  the multipliers, and the accumulators and operand registers of each generated dataflow.
  The measured points are in ``area_points.json`` (preset, configuration, cells, the command
  and commit); :func:`leave_one_out` states the error on each preset left out of the fit
  (``python -m bpsa.models.area``).
"""

import json
from functools import lru_cache
from importlib import resources
from pathlib import Path

import numpy as np

__all__ = ["POOL_LOGIC_CELLS", "cf_logic_cells", "estimate", "features", "fit", "leave_one_out",
           "load_points", "memories", "memory_bits", "pool_logic_cells"]

#: Generic cells of the pooling unit's logic with one lane (its buffer is in ``memory_bits``).
POOL_LOGIC_CELLS = 34_400


def pool_logic_cells(lanes):
    """Generic cells of the pooling unit's logic computing ``lanes`` planes at once:
    :data:`POOL_LOGIC_CELLS` and 8,000 a lane more (a line through one lane and the four-lane
    ``small`` synthesis, 57,400; the datapath a lane, the walk shared)."""
    return POOL_LOGIC_CELLS + 8_000 * (lanes - 1)


def cf_logic_cells(rows):
    """Generic cells of the channel-first front end's logic for an array of ``rows`` rows
    (its banks are in ``memory_bits``): ``3,751 + 1,455 rows``, within 2 cells of the two
    measured points (4 rows: 9,572; 16 rows: 27,033)."""
    return 3_751 + 1_455 * rows


def memories(config):
    """The accelerator's buffers, ``{name: (words, word bits)}``, exact from the configuration:
    ``A`` (X / dY: ``buf_a_depth`` words of ``feeder_bus_width`` operands), ``B`` (W / dY:
    ``buf_b_depth`` words of ``cols`` operands), ``P`` (``buf_p_depth`` words of ``cols``
    accumulators); with the BP-im2col mode its own ``BP_A`` and ``BP_B`` of one operand a word,
    with pooling ``POOL`` (``buf_pool_depth`` words of ``pool_lanes`` operands), with the
    channel-first front end ``CF`` (its ``rows`` banks of ``buf_cf_depth`` operands, as one
    memory of ``rows buf_cf_depth`` words of one operand)."""
    op, acc = config.operand_width, config.acc_width
    out = {"A": (config.buf_a_depth, config.feeder_bus_width * op),
           "B": (config.buf_b_depth, config.cols * op),
           "P": (config.buf_p_depth, config.cols * acc)}
    if "bp_im2col" in config.backward_modes:
        out["BP_A"] = (config.buf_a_depth, op)
        out["BP_B"] = (config.buf_b_depth, op)
    if config.has_pool():
        out["POOL"] = (config.buf_pool_depth, config.pool_lanes * op)
    if config.has_frontend("channel_first"):
        out["CF"] = (config.rows * config.buf_cf_depth, op)
    return out


def memory_bits(config):
    """Bits of the accelerator's buffers (exact, from the configuration: :func:`memories`)."""
    return sum(words * bits for words, bits in memories(config).values())


def features(config):
    """The fit's regressors of ``config`` (see the module's docstring)."""
    R, C = config.rows, config.cols
    w, acc = config.operand_width, config.acc_width
    return [1.0, memory_bits(config), R * C * w * w, R * C * acc * len(config.dataflows)]


def load_points():
    """The measured points: dicts of ``preset``, ``config`` (a :class:`Config`), ``cells``."""
    from bpsa.config import Config
    data = json.loads(resources.files("bpsa.models").joinpath("area_points.json").read_text())
    return [dict(p, config=Config.from_dict(p["config"], name=p["preset"]))
            for p in data["points"]]


def fit(points):
    """Least-squares coefficients of :func:`features` on ``points``."""
    a = np.array([features(p["config"]) for p in points], dtype=float)
    b = np.array([p["cells"] for p in points], dtype=float)
    coef, *_ = np.linalg.lstsq(a, b, rcond=None)
    return coef


@lru_cache(maxsize=1)
def _coefficients():
    return tuple(fit(load_points()))


def estimate(config):
    """``{"cells", "memory_bits", "area"}`` of ``config`` from the fitted model (``area``
    is ``cells``)."""
    cells = max(0, int(round(float(np.dot(features(config), _coefficients())))))
    if config.has_pool():
        cells += pool_logic_cells(config.pool_lanes)
    if config.has_frontend("channel_first"):
        cells += cf_logic_cells(config.rows)
    return {"cells": cells, "memory_bits": memory_bits(config), "area": cells}


def leave_one_out(points=None):
    """For each point: the fit on the others, and its error on the point left out; rows of
    ``preset``, ``measured``, ``predicted``, ``error`` (predicted / measured - 1)."""
    points = load_points() if points is None else points
    rows = []
    for i, p in enumerate(points):
        coef = fit(points[:i] + points[i + 1:])
        pred = float(np.dot(features(p["config"]), coef))
        rows.append({"preset": p["preset"], "measured": p["cells"], "predicted": round(pred),
                     "error": pred / p["cells"] - 1})
    return rows


def collect(reports, commit):
    """The ``area_points.json`` text of ``reports`` (``accelerator_area.json`` files of
    ``bpsa synth --config P --top accelerator --targets generic``) measured at ``commit``."""
    points = []
    for path in reports:
        data = json.loads(Path(path).read_text())
        cfg = dict(data["config"])
        preset = cfg.pop("name")
        points.append({"preset": preset, "config": cfg,
                       "cells": data["targets"]["generic"]["summary"]["cells"]})
    return json.dumps({"measured": f"bpsa synth --config PRESET --top accelerator --targets "
                                  f"generic, {data['yosys']}, at {commit}",
                       "points": sorted(points, key=lambda p: p["cells"])}, indent=1) + "\n"


def main(argv=None):
    import argparse
    ap = argparse.ArgumentParser(description="the area model's fit and its held-out errors; "
                                             "--collect rewrites area_points.json")
    ap.add_argument("--collect", nargs="+", metavar="accelerator_area.json")
    ap.add_argument("--commit", default="unknown")
    args = ap.parse_args(argv)
    if args.collect:
        out = Path(__file__).with_name("area_points.json")
        out.write_text(collect(args.collect, args.commit))
        print(f"wrote {out}")
        _coefficients.cache_clear()
    pts = load_points()
    coef = fit(pts)
    print("cells = " + " + ".join(f"{c:.4g} {n}" for c, n in zip(
        coef, ["", "memory_bits", "R C w^2", "R C acc dataflows"])))
    print(f"{'preset':12s} {'measured':>10s} {'fit (all)':>10s} {'left out':>10s} {'error':>7s}")
    for p, row in zip(pts, leave_one_out(pts)):
        full = float(np.dot(features(p["config"]), coef))
        print(f"{p['preset']:12s} {p['cells']:10,d} {full:10,.0f} {row['predicted']:10,d} "
              f"{row['error']:+7.1%}")


if __name__ == "__main__":
    main()
