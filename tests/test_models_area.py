"""The area model: buffer bits equal what Yosys reported for the presets (docs/results/area.md:
245,760 bits in `small`, 4,325,376 in `paper16`), the least-squares fit recovers known
coefficients, and each measured preset left out of the fit is predicted within the error
docs/guides/dse.md states."""

import pytest

from bpsa.config import Config, load_config
from bpsa.models import area


def test_memory_bits_match_yosys():
    # the Yosys reports of the fitted points (before the pooling unit and the channel-first
    # front end), and their buffers now: the pooling unit's (small 1,024 words of 4 x 8
    # bits, paper16 4,096 of 16 x 16), the channel-first banks (small 4 x 1,024 x 8, paper16
    # 16 x 4,096 x 16)
    bare = {"pool_kinds": (), "forward_frontends": ("feeder",)}
    assert area.memory_bits(load_config("small").replace(**bare)) == 245_760
    assert area.memory_bits(load_config("paper16").replace(**bare)) == 4_325_376
    assert area.memory_bits(load_config("small")) == 245_760 + 1024 * 4 * 8
    assert area.memory_bits(load_config("small_cf")) == 245_760 + 1024 * 8 + 4 * 1024 * 8
    assert area.memory_bits(load_config("paper16")) == \
        4_325_376 + 4096 * 16 * 16 + 16 * 4096 * 16
    # each unit adds its logic and its buffer's bits at the fit's cells a bit
    small = load_config("small")
    added = area.estimate(small)["cells"] - area.estimate(small.replace(pool_kinds=()))["cells"]
    assert abs(added - area.pool_logic_cells(4) - 32768 * area._coefficients()[1]) <= 1
    assert area.pool_logic_cells(1) == area.POOL_LOGIC_CELLS
    assert abs(area.pool_logic_cells(4) - 57_400) <= 1_000     # the four-lane synthesis
    small_cf = load_config("small_cf")
    added = area.estimate(small_cf)["cells"] - area.estimate(
        small_cf.replace(forward_frontends=("feeder",)))["cells"]
    assert abs(added - area.cf_logic_cells(4) - 32768 * area._coefficients()[1]) <= 1
    assert abs(area.cf_logic_cells(4) - 9_572) <= 2 and abs(area.cf_logic_cells(16) - 27_033) <= 2
    # without BP-im2col: A 256 x 4 x 8, B 256 x 2 x 8, P 256 x 2 x 24 bits
    cfg = Config(rows=2, cols=2, operand_width=8, acc_width=24, dataflows=("os",),
                 feeder_bus_width=4, buf_a_depth=256, buf_b_depth=256, buf_p_depth=256)
    assert area.memory_bits(cfg) == 256 * 4 * 8 + 256 * 2 * 8 + 256 * 2 * 24


def test_fit_recovers_known_coefficients():
    coef = [20_000.0, 3.0, 12.0, 5.0]
    cfgs = [Config(rows=r, cols=c, operand_width=w, acc_width=2 * w + 8, dataflows=df)
            for r, c, w, df in [(2, 2, 8, ("os",)), (4, 4, 8, ("os", "ws")), (8, 4, 16, ("os",)),
                                (8, 8, 16, ("os", "ws", "is")), (16, 8, 8, ("os",)),
                                (3, 5, 12, ("os", "ws", "is", "interleaved"))]]
    points = [{"preset": str(i), "config": c,
               "cells": sum(a * f for a, f in zip(coef, area.features(c)))}
              for i, c in enumerate(cfgs)]
    assert list(area.fit(points)) == pytest.approx(coef, rel=1e-6)
    assert all(abs(r["error"]) < 1e-6 for r in area.leave_one_out(points))


def test_measured_presets():
    points = area.load_points()
    assert len(points) >= 5
    for p in points:
        est = area.estimate(p["config"])
        assert est["area"] == est["cells"] and est["memory_bits"] == area.memory_bits(p["config"])
        assert est["cells"] == pytest.approx(p["cells"], rel=0.05), p["preset"]
    # each preset left out of the fit; measured (docs/guides/dse.md): within 18 % but for the
    # smallest, ice40 (2 x 2, below every other point: -66 %)
    smallest = min(points, key=lambda p: p["cells"])["preset"]
    for r in area.leave_one_out(points):
        assert abs(r["error"]) < (0.7 if r["preset"] == smallest else 0.25), r


def test_estimate_grows_with_the_array():
    base = load_config("paper16")
    sizes = [area.estimate(base.replace(rows=n, cols=n))["area"] for n in (2, 4, 8, 16)]
    assert sizes == sorted(sizes)
