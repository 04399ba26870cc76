"""``bpsa fuzz``: random layers of every phase, and layers the hardware must refuse, through the
whole accelerator on the native transport against the golden model (in an MX format, the
accelerator's MX build); with ``--engines`` in an MX format, forward and loss layers through
the channel-first engine and gradient layers through the zero-free gradient engine
(:func:`bpsa.verify.fuzz.fuzz_engine`)."""

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
            // lay["groups"] * lay["kernel_h"] * lay["kernel_w"] <= MAX_MACS
    # grouped layers, depthwise ones (a group an input channel) among them
    grouped = [lay for lay in lays if lay["groups"] > 1]
    assert len(grouped) >= 20 and any(lay["groups"] == lay["channels"] for lay in grouped)
    assert all(lay["channels"] % lay["groups"] == lay["out_channels"] % lay["groups"] == 0
               for lay in grouped)


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


#: The channel-first engine's MX fuzz configurations: ``small_cf`` in each MX format.
CF_MX = {fmt: load_config("small_cf").replace(
    name=f"small_cf_{fmt}", arithmetic=fmt, operand_width=8, acc_width=w,
    operand_signed=fmt == "mxint8") for fmt, w in (("mxint8", 21), ("mxfp8_e4m3", 43))}


def test_random_engine_layers_cover_the_contract():
    """The engine fuzz draws forward, loss and gradient layers, C past two 32-channel blocks
    (forward, loss), rows past two 32-pixel blocks (gradient), strides up to 3, padding,
    dilation, batch 2, every one within the MAC budget and taken by its engine; a
    configuration with one of the engines draws its phases only."""
    from bpsa.sim.testbenches.tb_channel_first import check_layer
    from bpsa.sim.testbenches.tb_zf_gradient import check_layer as check_zg
    from bpsa.verify.fuzz import engine_phases, random_engine_layer
    rng = np.random.default_rng(5)
    cfg = CF_MX["mxint8"]
    jobs = [random_engine_layer(cfg, rng) for _ in range(300)]
    assert collections.Counter(p for p, _ in jobs).keys() == {"forward", "loss", "gradient"}
    lays = [lay for _, lay in jobs]
    assert max(lay.channels for p, lay in jobs if p != "gradient") > 64
    assert max(lay.width for p, lay in jobs if p == "gradient") > 64
    assert max(lay.batch for lay in lays) == 2
    assert {lay.stride_h for lay in lays} == {1, 2, 3} and {lay.dil_w for lay in lays} == {1, 2}
    assert max(lay.pad_h for lay in lays) == 2
    for phase, lay in jobs:
        oh, ow = lay.out_hw
        assert lay.batch * lay.out_channels * oh * ow * lay.channels * lay.kernel_h \
            * lay.kernel_w <= MAX_MACS
        if phase == "gradient":
            assert check_zg(cfg, lay) is lay
        else:
            assert check_layer(cfg, lay, phase=phase) is lay
    assert engine_phases(cfg.replace(name="os", dataflows=["os"])) == ["gradient"]
    assert engine_phases(cfg.replace(name="ws", dataflows=["ws"])) == ["forward", "loss"]
    with pytest.raises(ValueError, match="needs the 'ws' dataflow.*needs the 'os' dataflow"):
        engine_phases(cfg.replace(name="is", dataflows=["is"]))


@pytest.mark.long           # its own Verilator builds; the engines are checked in make test
@pytest.mark.cocotb
def test_fuzz_engine_mx(capsys, tmp_path):
    """``bpsa fuzz`` in an MX format runs random forward and loss layers on the channel-first
    engine's Verilog and gradient layers on the zero-free gradient engine's: no mismatch,
    the summary says where they ran; a configuration without either engine is refused with
    the reasons."""
    from bpsa.cli import main
    from bpsa.config import Config
    from bpsa.verify.fuzz import fuzz_engine
    cfg = CF_MX["mxfp8_e4m3"]
    res = fuzz_engine(cfg, 24, seed=7)
    assert res["mismatches"] == [] and res["ran"] == 24 and res["target"] == "engines"
    assert res["phases"].keys() == {"forward", "loss", "gradient"} and res["cycles"] > 0
    toml = tmp_path / "cf_mx.toml"
    toml.write_text("".join(f"{k} = {json.dumps(v)}\n" for k, v in cfg.to_dict().items()
                            if v != getattr(Config(), k)))
    assert main(["fuzz", "--config", str(toml), "--count", "3", "--seed", "2",
                 "--engines"]) in (None, 0)
    out = capsys.readouterr().out
    assert "3 random layers on small_cf_mxfp8_e4m3's engines (" in out
    assert "0 mismatches" in out
    with pytest.raises(ValueError, match="needs the 'ws' dataflow"):
        fuzz_engine(cfg.replace(name="no_ws", dataflows=["is"]), 1)


@pytest.mark.long
@pytest.mark.cocotb
@pytest.mark.parametrize("fmt", sorted(CF_MX))
def test_fuzz_engine_mx_2000(fmt):
    """``bpsa fuzz --config small_cf --arithmetic mxint8|mxfp8_e4m3 --count 2000`` (make
    test-long): no mismatch on the channel-first and zero-free gradient engines."""
    from bpsa.verify.fuzz import fuzz_engine
    res = fuzz_engine(CF_MX[fmt], 2000, seed=1)
    assert res["mismatches"] == [], json.dumps(res["mismatches"][:3])
    assert res["ran"] == 2000


@pytest.mark.verilator
def test_fuzz_mx_accelerator(capsys):
    """``bpsa fuzz --config small_mxint8``: random forward, loss (its stride classes) and
    gradient layers through the accelerator's MX build under random back-pressure, bit-exact
    to the contract in the front ends' orders, and forward and gradient descriptors the
    hardware must refuse (TOO_LARGE); the MXFP8 and 2000-layer runs are make test-long's."""
    from bpsa.cli import main
    from bpsa.verify.fuzz import fuzz
    cfg = load_config("small_mxint8")
    assert phases(cfg) == ["forward", "loss", "gradient"]
    rng = np.random.default_rng(2)
    jobs = [random_job(cfg, rng) for _ in range(200)]
    kinds = collections.Counter((j["phase"], j["mode"], "expect" in j) for j in jobs)
    assert {k[:2] for k in kinds} == {("forward", "channel_first"), ("loss", "channel_first"),
                                      ("gradient", "zero_free")}
    assert not kinds[("loss", "channel_first", True)] and kinds[("gradient", "zero_free", True)]
    res = fuzz(cfg, 60, seed=3)
    assert res["mismatches"] == [], json.dumps(res["mismatches"][:3])
    assert res["ran"] + sum(res["refused"].values()) == 60 and res["refused"]
    assert main(["fuzz", "--config", "small_mxint8", "--count", "5", "--quiet"]) in (None, 0)
    assert "0 mismatches" in capsys.readouterr().out


@pytest.mark.long
@pytest.mark.parametrize("preset", ["small_mxint8", "small_mxfp8"])
def test_fuzz_mx_accelerator_2000(preset):
    """``bpsa fuzz --config small_mxint8|small_mxfp8 --count 2000`` (make test-long): no
    mismatch through the accelerator's MX build."""
    from bpsa.verify.fuzz import fuzz
    res = fuzz(load_config(preset), 2000, seed=1)
    assert res["mismatches"] == [], json.dumps(res["mismatches"][:3])
    assert res["ran"] + sum(res["refused"].values()) == 2000
