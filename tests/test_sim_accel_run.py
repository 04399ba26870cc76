"""A layer through the simulator's jobs is planned once: the plan :func:`check_job` returns is
the one the driver would compute (on random layers of every phase and mode, baseline and
channel-first stride classes included), and a run handed the plans equals a run that plans
again, result and counters."""

import random

import pytest

from bpsa.config import load_config
from bpsa.plan import capability, tiling
from bpsa.sim.accel_run import check_job, check_layer, job, run_jobs
from bpsa.spec.layer import ConvLayer

SMALL = load_config("small")
SMALL_CF = load_config("small_cf")


def _driver_plan(config, layer, phase, mode):
    """What :meth:`bpsa.host.driver.Driver.run` computes for the layer (channel-first loss:
    a forward a stride class, :meth:`bpsa.host.driver.Driver.loss`)."""
    return tiling.plan_or_strips(config, phase, layer,
                                 mode=capability.check(config, phase, mode=mode))


def _random_layers(seed, count):
    rng = random.Random(seed)
    for _ in range(count):
        r, s = rng.randint(1, 4), rng.randint(1, 4)
        yield ConvLayer.conv(rng.randint(1, 2), rng.randint(1, 12), rng.randint(r, 20),
                             rng.randint(s, 40), rng.randint(1, 12), r, s,
                             stride=(rng.randint(1, 3), rng.randint(1, 3)),
                             pad=(rng.randint(0, r // 2), rng.randint(0, s // 2)))


@pytest.mark.parametrize("config", [SMALL, SMALL_CF], ids=lambda c: c.name)
def test_check_job_plan_is_the_drivers(config):
    checked = 0
    for layer in _random_layers(7, 60):
        for phase, mode in (("forward", None), ("loss", "zero_free"), ("loss", "bp_im2col"),
                            ("gradient", "zero_free"), ("gradient", "bp_im2col")):
            try:
                want = _driver_plan(config, layer, phase, mode)
            except ValueError:
                with pytest.raises(ValueError):
                    check_job(config, layer, phase, mode=mode)
                continue
            try:        # check_job refuses more (a kernel wider than the feeder's pattern)
                got = check_job(config, layer, phase, mode=mode)
            except ValueError:
                continue
            assert got == want, (layer.text(), phase)
            checked += 1
        for phase in ("loss", "gradient"):      # the traditional flow's forward
            try:
                want = _driver_plan(config, layer.baseline(phase), "forward", None)
                got = check_job(config, layer, phase, baseline=True)
            except ValueError:
                continue
            assert got == want, (layer.text(), phase)
            checked += 1
    assert checked > 150


def test_channel_first_loss_plans_a_forward_a_class():
    import numpy as np

    from bpsa.plan.loss_classes import class_jobs
    for layer in _random_layers(3, 20):
        got = check_job(SMALL_CF, layer, "loss", mode="channel_first")
        dy = np.zeros((layer.batch, layer.out_channels, *layer.out_hw), dtype=np.int64)
        w = np.zeros(layer.w_shape, dtype=np.int64)
        jobs = class_jobs(dy, w, (layer.height, layer.width), layer.stride, layer.pad,
                          layer.dil)
        assert len(got["classes"]) == len(jobs)
        for plan, cj in zip(got["classes"], jobs):
            n, k, h, wd = cj.x.shape
            c, _, r, s = cj.w.shape
            fwd = ConvLayer.conv(n, k, h, wd, c, r, s, 1, cj.padding, cj.dilation)
            assert plan == _driver_plan(SMALL_CF, fwd, "forward", "channel_first")


@pytest.mark.verilator
def test_handed_plans_run_as_replanned():
    layer = ConvLayer.conv(2, 6, 9, 9, 5, 3, 3, stride=2, pad=1)
    phases = ["forward", "loss", "gradient"]
    plans = check_layer(SMALL, layer, phases, mode="zero_free")
    jobs = [job(layer, p, seed=3, mode=None if p == "forward" else "zero_free")
            for p in phases]
    handed = run_jobs(SMALL, jobs, plans=plans)
    again = run_jobs(SMALL, jobs)
    assert all(r["match"] for r in handed + again)
    assert [r["counters"] for r in handed] == [r["counters"] for r in again]
