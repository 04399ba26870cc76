"""What a configuration can run: the front end or backward mode a phase resolves to, and each
refusal (a front end or mode not generated, requantization where the output cannot leave
requantized, a shift out of range, a ReLU off the forward) with its reason."""

import re

import pytest

from bpsa.config import load_config
from bpsa.plan.capability import check, requant_applies, requant_limit, resolve_mode

SMALL = load_config("small")
SMALL_CF = load_config("small_cf")
OS_ONLY = SMALL.replace(dataflows=("os",), backward_modes=("zero_free",), pool_kinds=(),
                        name="os_only")
IS_ONLY = SMALL.replace(dataflows=("is",), backward_modes=("bp_im2col",), pool_kinds=(),
                        name="is_only")


@pytest.mark.parametrize("phase,mode,want", [
    ("forward", None, "feeder"), ("forward", "feeder", "feeder"),
    ("forward", "channel-first", "channel_first"), ("forward", "bp_im2col", "feeder"),
    ("forward", "zero_free", "feeder"), ("loss", "channel_first", "channel_first"),
    ("loss", "bp_im2col", "bp_im2col"), ("gradient", "zero-free", "zero_free"),
])
def test_resolve_mode(phase, mode, want):
    assert resolve_mode(SMALL, phase, mode) == want


def test_default_backward_mode_is_the_generated_one():
    assert resolve_mode(OS_ONLY, "loss") == "zero_free"
    assert resolve_mode(IS_ONLY, "gradient") == "bp_im2col"


@pytest.mark.parametrize("config,phase,kw,reason", [
    (SMALL, "fc", {}, "phase must be one of forward, loss, gradient, not 'fc'"),
    (SMALL, "forward", {"mode": "im2col"},
     "the forward's front end (mode) must be 'feeder' or 'channel_first', not 'im2col'"),
    (SMALL, "gradient", {"mode": "channel_first"},
     "the channel-first front end runs the forward and the loss's stride classes"),
    (SMALL, "forward", {"mode": "channel_first"},
     "configuration 'small' does not generate the channel-first front end (its "
     "forward_frontends: ['feeder'])"),
    (IS_ONLY, "forward", {},
     "configuration 'is_only' does not generate the forward engine"),
    (OS_ONLY, "loss", {"mode": "bp_im2col"},
     "configuration 'os_only' does not generate the BP-im2col mode of the loss (its "
     "backward modes: ['zero_free'])"),
    (SMALL, "gradient", {"requant": 4},
     "requantization applies to the forward and the zero-free loss, not to the gradient"),
    (SMALL, "loss", {"mode": "bp_im2col", "requant": 4},
     "not to the loss in mode 'bp_im2col'"),
    (SMALL, "forward", {"requant": 32}, "requant (a shift) must be an integer in [0, 31]"),
    (SMALL, "forward", {"requant": True}, "requant"),
    (SMALL, "forward", {"requant": -1}, "requant"),
    (SMALL, "loss", {"relu": True}, "relu applies to the forward, not to loss"),
])
def test_refusals_name_the_reason(config, phase, kw, reason):
    with pytest.raises(ValueError, match=re.escape(reason)):
        check(config, phase, **kw)


def test_what_runs():
    assert check(SMALL, "forward", requant=31, relu=True) == "feeder"
    assert check(SMALL_CF, "forward", mode="channel_first", requant=0) == "channel_first"
    assert check(SMALL_CF, "loss", mode="channel_first", requant=5) == "channel_first"
    assert check(SMALL, "loss", mode="zero_free", requant=5) == "zero_free"
    assert check(OS_ONLY, "gradient") == "zero_free"
    assert requant_limit(SMALL) == 31 and requant_limit(SMALL.replace(acc_width=40)) == 63
    assert requant_applies("loss", "channel_first") and not requant_applies("loss", "bp_im2col")
    assert not requant_applies("gradient", "zero_free")
