"""``bpsa train --model`` (bpsa.torch.train): a network trains through the offloaded
accelerator next to plain PyTorch from the same weights and batch order; datasets from the
digits split or a factory; one-line errors."""

import json

import pytest
import torch
from torch.utils.data import Subset

from bpsa.cli import main
from bpsa.torch.models import digits_cnn, resblock_digits
from bpsa.torch.train import digits_datasets, load_datasets, train, train_float


def tiny_digits():
    """The first 96 training and 64 test images of the digits split."""
    tr, te = digits_datasets()
    return Subset(tr, range(96)), Subset(te, range(64))


def test_digits_datasets():
    tr, te = digits_datasets()
    x, y = tr[0]
    assert x.shape == (1, 8, 8) and x.dtype == torch.float32 and 0 <= float(x.max()) <= 1
    assert len(tr) == 1437 and len(te) == 360 and y.dtype == torch.int64
    with pytest.raises(ValueError, match="give digits or PKG.MODULE:FACTORY"):
        load_datasets("mnist")
    with pytest.raises(ValueError, match="cannot import it"):
        load_datasets("no_such_package_xyz:data")
    with pytest.raises(ValueError, match=r"must return \(train, test\) datasets"):
        load_datasets("bpsa.torch.models:digits_cnn")


def test_the_accelerator_and_pytorch_train_from_the_same_start():
    """Two epochs of a residual network (batch norm and the addition on the host) on a tiny
    set: both runs start from the same weights and batches (their first losses agree within
    the bf16 rounding), both learn, the model given is not changed, and the cycle model
    gives the step's cycles."""
    model = resblock_digits()
    before = [p.clone() for p in model.parameters()]
    tr, te = tiny_digits()
    with pytest.warns(UserWarning, match="stay in PyTorch: stem.2, relu1, relu2: its input"):
        r = train(model, tr, te, epochs=2, batch=16, lr=0.1)
    h, ref = r["history"], r["reference"]
    assert abs(h[0]["loss"] - ref[0]["loss"]) < 0.05 * ref[0]["loss"]
    assert h[1]["loss"] < h[0]["loss"] and ref[1]["loss"] < ref[0]["loss"]
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert not torch.equal(before[0], r["model"].module.stem[0].weight)
    # the ReLUs after the batch norms stay in PyTorch; the last one's mask is the pooling's
    assert r["offloaded"] == ["stem.0", "conv1", "conv2", "relu2", "pool", "gap", "fc"]
    assert set(r["kept"]) == {"stem.2", "stem.2.mask", "relu1", "relu1.mask", "relu2"}
    assert r["cycles_per_step"] > 0 and "cycle model" in r["cycles_source"]


def test_train_float_trains_the_model_itself():
    model = digits_cnn()
    before = model.conv1.weight.detach().clone()
    tr, te = tiny_digits()
    h = train_float(model, tr, te, epochs=3, batch=16, lr=0.25)
    assert [e["epoch"] for e in h] == [1, 2, 3] and h[-1]["loss"] < h[0]["loss"]
    assert not torch.equal(before, model.conv1.weight)
    with pytest.raises(ValueError, match="optimizer must be one of"):
        train_float(model, tr, te, optimizer="lbfgs")


def test_cli(capsys):
    assert main(["train", "--model", "bpsa.torch.models:digits_cnn", "--dataset",
                 "test_torch_train:tiny_digits", "--epochs", "1", "--batch", "16", "--lr",
                 "0.25", "--config", "small_bf16", "--json", "--plot",
                 "build/test_torch_train.png"]) in (None, 0)
    out = json.loads(capsys.readouterr().out)
    assert out["config"] == "small_bf16" and len(out["history"]) == 1
    assert out["offloaded"] == ["conv1", "relu1", "pool1", "conv2", "relu2", "gap", "fc"]
    for argv, match in ((["--model", "no_such_package_xyz:m"], "cannot import"),
                        (["--numpy-loop", "--model", "bpsa.torch.models:digits_cnn"],
                         "--numpy-loop trains the digits CNN, not --model")):
        assert main(["train", "--dataset", "digits", "--epochs", "1", *argv]) == 2
        assert match in capsys.readouterr().err


def test_cli_mx(capsys):
    """``bpsa train --arithmetic mxfp8_e4m3 --mx-scale-rule ceil``: the golden model trains
    (the loss falls), the summary names the rule and the cycle model's step; a rule without
    MX and the numpy loop in MX are refused in one line."""
    assert main(["train", "--model", "bpsa.torch.models:digits_cnn", "--dataset",
                 "test_torch_train:tiny_digits", "--epochs", "2", "--batch", "16", "--lr",
                 "0.25", "--config", "small", "--arithmetic", "mxfp8_e4m3", "--mx-scale-rule",
                 "ceil", "--json", "--plot", "build/test_torch_train_mx.png"]) in (None, 0)
    out = json.loads(capsys.readouterr().out)
    assert out["config"] == "small_mxfp8_e4m3" and out["mx_scale_rule"] == "ceil"
    assert out["offloaded"] == ["conv1", "conv2", "fc"] and out["cycles_per_step"] > 0
    assert out["history"][1]["loss"] < out["history"][0]["loss"]
    for argv, match in (
            (["--config", "small_bf16", "--mx-scale-rule", "ceil"],
             "--mx-scale-rule applies to an MX arithmetic, not 'bf16'"),
            (["--config", "small_mxint8", "--numpy-loop"], "bpsa train --model on the golden")):
        assert main(["train", "--dataset", "digits", "--epochs", "1", *argv]) == 2
        err = capsys.readouterr().err
        assert match in err and len(err.strip().splitlines()) == 1, err
