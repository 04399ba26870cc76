"""Shapes from a PyTorch model (bpsa.torch.trace): every operation the accelerator does not
run is listed with its element count, ``bpsa perf --model`` is ``--network``, and bad factories
and inputs are one-line errors. That torchvision's networks trace to the shipped network files
row for row is ``tests/test_tools_gen_networks.py`` (the files are written by this path)."""

import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from bpsa.tools.gen_networks import traced
from bpsa.torch.trace import load_factory, parse_input, trace


def _rows(net):
    return [(lay.name, lay.op, lay.c, lay.h, lay.w, lay.k, lay.r, lay.s, lay.stride, lay.pad,
             lay.dilation) for lay in net]


def test_resnet50_lists_what_stays_on_the_host():
    t = traced("resnet50")
    kinds = {}
    for h in t.host_ops:
        kinds[h.op] = kinds.get(h.op, 0) + 1
    # 53 batch norms, 16 residual additions, the classifier's bias, the flatten; every ReLU
    # follows a batch norm or an addition (its forward on the host), and only the stem's is
    # read by a pooling alone (its mask in the max pooling's backward)
    assert kinds == {"BatchNorm2d": 53, "add": 16, "bias": 1, "flatten": 1, "relu": 49,
                     "relu_mask": 48}
    assert t.relus == ()
    bn1 = next(h for h in t.host_ops if h.name == "bn1")
    assert bn1.elements == 64 * 112 * 112


class _Mixed(nn.Module):
    """Every kind of operation once: a conv with a bias, a grouped and a depthwise conv, batch
    norm, a residual addition, a concatenation, functional poolings (one whose ceil_mode adds a
    window), a rectangular stride, an adaptive pooling to a divisor and to its own size, a
    plane mean, dropout, a Linear and a softmax."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.grouped = nn.Conv2d(8, 8, 3, padding=1, groups=2, bias=False)
        self.depthwise = nn.Conv2d(8, 8, 3, padding=1, groups=8, bias=False)
        self.bn = nn.BatchNorm2d(8)
        self.rect = nn.Conv2d(16, 4, 3, stride=(1, 2), padding=1, bias=False)
        self.up = nn.AdaptiveAvgPool2d(5)
        self.same = nn.AdaptiveAvgPool2d((5, 5))
        self.drop = nn.Dropout(0.5)
        self.fc = nn.Linear(4, 3, bias=False)

    def forward(self, x):
        a = F.relu(self.conv(x))                               # 8 x 10 x 10
        b = self.bn(self.depthwise(self.grouped(a)))
        c = torch.cat([a + b, b], dim=1)                       # 16 x 10 x 10
        c = F.max_pool2d(c, 2)                                 # 16 x 5 x 5
        d = F.max_pool2d(c, 2, ceil_mode=True)                 # 3 x 3 with ceil_mode: host
        e = self.same(self.up(self.rect(c)))       # 4 x 5 x 3 (host), to 5 x 5 (host), same
        f = e.mean((2, 3))
        return F.softmax(self.fc(self.drop(f)), dim=1), d


def test_every_operation_is_a_row_or_a_host_operation():
    t = trace(_Mixed(), (2, 3, 10, 10))
    assert _rows(t.network) == [
        ("conv", "conv", 3, 10, 10, 8, 3, 3, 1, 1, 1),
        ("grouped", "conv", 8, 10, 10, 8, 3, 3, 1, 1, 1),
        ("depthwise", "conv", 8, 10, 10, 8, 3, 3, 1, 1, 1),
        ("max_pool2d", "max_pool", 16, 10, 10, 16, 2, 2, 2, 0, 1),
        ("mean", "global_avg_pool", 4, 5, 5, 4, 5, 5, 1, 0, 1),
        ("fc", "fc", 4, 1, 1, 3, 1, 1, 1, 0, 1)]
    host = [(h.name, h.op, h.elements) for h in t.host_ops]
    assert host == [
        ("conv.bias", "bias", 800), ("relu", "relu", 800),
        ("bn", "BatchNorm2d", 800), ("add", "add", 800), ("cat", "concat", 1600),
        ("max_pool2d_1", "max_pool", 144), ("rect", "conv", 60), ("up", "adaptive_avg_pool", 100),
        ("same", "adaptive_avg_pool", 100), ("drop", "Dropout", 4), ("softmax", "softmax", 3)]
    why = {h.name: h.reason for h in t.host_ops}
    assert [lay.groups for lay in t.network if lay.name in ("grouped", "depthwise")] == [2, 8]
    assert "stride 1 x 2 is not square" in why["rect"]
    assert "ceil_mode" in why["max_pool2d_1"]
    assert "unequal" in why["up"] and "nothing to run" in why["same"]
    assert "functional ReLU" in why["relu"] and t.relus == ()


class _Relus(nn.Module):
    """ReLUs in every position of the fusion rule: after a bias-free conv and before a max
    pooling (both parts fused), after a conv with a bias and before an average pooling
    (neither part), after a pooling (its forward fused), after a bias-free linear layer and
    before another (its mask on the host), one module called twice (once where it could fuse,
    once after an addition: neither call fuses), and a conv whose output a second layer also
    reads."""

    def __init__(self):
        super().__init__()
        self.c1, self.r1, self.p1 = nn.Conv2d(2, 4, 3, padding=1, bias=False), nn.ReLU(), \
            nn.MaxPool2d(2)
        self.c2, self.r2 = nn.Conv2d(4, 4, 1), nn.ReLU()
        self.p2, self.r3 = nn.AvgPool2d(2), nn.ReLU()
        self.c3, self.shared = nn.Conv2d(4, 4, 1, bias=False), nn.ReLU()
        self.c4, self.r4 = nn.Conv2d(4, 4, 1, bias=False), nn.ReLU()
        self.fc1, self.r5 = nn.Linear(4, 6, bias=False), nn.ReLU()
        self.fc2 = nn.Linear(6, 2, bias=False)

    def forward(self, x):
        x = self.p1(self.r1(self.c1(x)))                # 4 x 4 x 4
        x = self.r3(self.p2(self.r2(self.c2(x))))       # 4 x 2 x 2
        y = self.c4(x)
        x = self.shared(self.c3(x)) + self.r4(y) + y
        x = self.shared(x).mean((2, 3))
        return self.fc2(self.r5(self.fc1(x)))


def test_relus_fuse_where_the_hardware_does():
    """:mod:`bpsa.torch.fusion` on every case (the trace's view; the offload follows the same
    rule, ``test_torch_offloading``)."""
    t = trace(_Relus(), (2, 2, 8, 8))
    assert t.relus == (("r1", 256), ("r3", 16), ("r5", 6))
    relu_host = [(h.name, h.op) for h in t.host_ops if h.op.startswith("relu")]
    # r2's mask: an average pooling reads its output (its backward would read X only for it)
    assert relu_host == [("r2", "relu"), ("r2.mask", "relu_mask"), ("r3.mask", "relu_mask"),
                         ("shared", "relu"),
                         ("shared.mask", "relu_mask"), ("r4", "relu"), ("r4.mask", "relu_mask"),
                         ("shared", "relu"), ("shared.mask", "relu_mask"),
                         ("r5.mask", "relu_mask")]
    why = {h.name: h.reason for h in t.host_ops}
    assert "without a bias" in why["r2"] and "no max pooling" in why["r5.mask"]


def test_an_adaptive_pooling_to_a_divisor_is_a_pooling_row():
    model = nn.Sequential(nn.Conv2d(2, 4, 1, bias=False), nn.AdaptiveMaxPool2d(3))
    t = trace(model, (1, 2, 9, 9))
    assert _rows(t.network)[1] == ("1", "max_pool", 4, 9, 9, 4, 3, 3, 3, 0, 1)


def test_bad_factories_and_inputs_are_one_line_errors():
    for path, match in (("torchvision.models", "give PKG.MODULE:FACTORY"),
                        ("no_such_package_xyz.models:net", "cannot import 'no_such_package_xyz"),
                        ("torchvision.models:no_such_net", "has no factory 'no_such_net'"),
                        ("bpsa.torch.trace:parse_input", "parse_input")):
        with pytest.raises((ValueError, TypeError), match=match):
            load_factory(path)
    for text in ("1,3,8", "1,3,8,x", "0,3,8,8"):
        with pytest.raises(ValueError, match="--input"):
            parse_input(text)
    r = subprocess.run([sys.executable, "-m", "bpsa.cli", "perf", "--model",
                        "no_such_package_xyz:net", "--input", "1,3,8,8"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "cannot import 'no_such_package_xyz'" in r.stderr


def test_perf_model_equals_perf_network():
    """bpsa perf --model gives --network's training step (the digits CNN as an nn.Module
    against its network file: totals, phases, layers), with the host operations listed."""
    import json
    base = [sys.executable, "-m", "bpsa.cli", "perf", "--config", "small", "--json"]
    m = json.loads(subprocess.run(base + ["--model", "bpsa.torch.models:digits_cnn",
                                          "--input", "4,1,8,8"], capture_output=True,
                                  text=True, check=True).stdout)
    n = json.loads(subprocess.run(base + ["--network", "digits", "--batch", "4"],
                                  capture_output=True, text=True, check=True).stdout)
    for key in ("totals", "by_phase", "layers", "batch"):
        assert m[key] == n[key], key
    # relu2's mask: the global average reads its output (host)
    assert [h["op"] for h in m["host_ops"]] == ["relu_mask", "Flatten"]
    assert m["relus"] == [{"name": "relu1", "elements": 1024},
                          {"name": "relu2", "elements": 128}]
