"""``bpsa fuzz``: random layers of every phase, and layers the hardware must refuse, through the
whole accelerator on the native transport against the golden model."""

import collections
import json

import numpy as np
import pytest

from bpsa.config import load_config
from bpsa.models import golden
from bpsa.verify.fuzz import MAX_MACS, phases, random_job

SMALL = load_config("small")
#: Layers planned for 128-word buffers (bands, groups, strips on small layers), run on the
#: small build: its deeper buffers run the same programs (Config.check_runs_on)
TINY = SMALL.replace(buf_a_depth=128, buf_b_depth=128, buf_p_depth=128, name="small_tinybuf")


@pytest.mark.parametrize("config", [SMALL, load_config("paper16")], ids=lambda c: c.name)
def test_random_jobs_cover_every_phase_and_refusals(config):
    """The generator draws every generated phase, strides up to 4, dilation, padding, batch,
    stalls, and refusals; the layers it runs are within the MAC budget and valid."""
    rng = np.random.default_rng(3)
    jobs = [random_job(config, rng) for _ in range(400)]
    kinds = collections.Counter((j["phase"], "expect" in j) for j in jobs)
    for phase in phases(config):
        assert kinds[(phase, False)] > 25, kinds
    # pooling: both kinds, the ReLU, and refusals
    pools = [j for j in jobs if j["phase"].startswith("pool_")]
    assert {j["layer"]["kind"] for j in pools} == {"max", "avg"}
    assert {j["layer"]["relu"] for j in pools} == {False, True}
    assert sum("expect" in j for j in pools) >= 3
    # the loss and the gradient in both backward modes
    for phase in ("loss", "gradient"):
        assert {j["mode"] for j in jobs if j["phase"] == phase} == {"zero_free", "bp_im2col"}
    assert sum(n for (_, refused), n in kinds.items() if refused) >= 20, kinds
    lays = [j["layer"] for j in jobs if "expect" not in j
            and j["phase"] in ("forward", "loss", "gradient")]
    assert {lay["stride_h"] for lay in lays} >= {1, 2, 3, 4}
    assert {lay["dil_w"] for lay in lays} >= {1, 2, 3}
    assert max(lay["pad_h"] for lay in lays) >= 2 and max(lay["batch"] for lay in lays) == 3
    assert {j["stall"] for j in jobs} >= {0.0, 0.2, 0.5}
    for lay in lays:
        oh, ow = golden.output_hw((lay["height"], lay["width"]),
                                  (lay["kernel_h"], lay["kernel_w"]),
                                  (lay["stride_h"], lay["stride_w"]),
                                  (lay["pad_h"], lay["pad_w"]), (lay["dil_h"], lay["dil_w"]))
        assert lay["batch"] * lay["out_channels"] * oh * ow * lay["channels"] \
            * lay["kernel_h"] * lay["kernel_w"] <= MAX_MACS


def test_phases_follow_the_dataflows():
    assert phases(SMALL) == ["forward", "loss", "gradient", "fc_backward", "pool_forward",
                             "pool_backward"]
    # the zero-free gradient runs on the forward engine's array
    assert phases(SMALL.replace(dataflows=("os",), name="os_only")) == [
        "forward", "loss", "gradient", "pool_forward", "pool_backward"]
    assert phases(SMALL.replace(dataflows=("os",), backward_modes=(), pool_kinds=(),
                                name="os_no_backward")) == ["forward"]


@pytest.mark.verilator
def test_fuzz_small():
    """A few hundred random layers through the RTL on small buffers (so that they tile): no
    mismatch, the refusals right, every phase run."""
    from bpsa.verify.fuzz import fuzz
    res = fuzz(TINY, 300, seed=11, hardware=SMALL)
    assert res["mismatches"] == [], json.dumps(res["mismatches"][:3])
    assert res["ran"] + sum(res["refused"].values()) == 300
    assert sum(res["refused"].values()) >= 15 and res["cycles"] > 0


def test_fuzz_refuses_bad_counts():
    from bpsa.verify.fuzz import fuzz
    for bad in (0, -3):
        with pytest.raises(ValueError, match="count must be a positive number"):
            fuzz(SMALL, bad)


def test_cli_fuzz_refuses_bad_counts(capsys):
    from bpsa.cli import main
    assert main(["fuzz", "--count", "0"]) == 2
    assert "--count 0: give a positive number of layers" in capsys.readouterr().err


@pytest.mark.long
@pytest.mark.verilator
def test_fuzz_10000():
    """``bpsa fuzz --count 10000 --config small`` (make test-long): no mismatch."""
    from bpsa.verify.fuzz import fuzz
    res = fuzz(SMALL, 10_000, seed=1)
    assert res["mismatches"] == [], json.dumps(res["mismatches"][:3])
    assert res["ran"] + sum(res["refused"].values()) == 10_000


def test_a_configuration_without_a_phase_is_refused():
    """plain_os (no reserve registers, no backward mode, no pooling unit) runs no phase: the
    generator and ``bpsa fuzz`` say so in one line (was numpy's ``high <= 0``)."""
    plain = load_config("plain_os")
    assert phases(plain) == []
    with pytest.raises(ValueError, match="configuration 'plain_os' generates no accelerator "
                                         "phase to fuzz"):
        random_job(plain, np.random.default_rng(1))
