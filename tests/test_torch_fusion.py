"""Which ReLUs the accelerator fuses (bpsa.torch.fusion): the rule on a graph with a ReLU in
every position, as the trace and the offload ask it (``runs``: the layers the accelerator
runs)."""

import torch
from torch import nn

from bpsa.torch.fusion import relu_fusion


class _Relus(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1, self.r1, self.p1 = nn.Conv2d(2, 4, 3, padding=1, bias=False), nn.ReLU(), \
            nn.MaxPool2d(2)
        self.c2, self.r2, self.p2 = nn.Conv2d(4, 4, 1), nn.ReLU(), nn.AvgPool2d(2)
        self.r3 = nn.ReLU()
        self.c3, self.shared = nn.Conv2d(4, 4, 1, bias=False), nn.ReLU()
        self.fc1, self.r5 = nn.Linear(4, 6, bias=False), nn.ReLU()
        self.fc2 = nn.Linear(6, 2, bias=False)

    def forward(self, x):
        x = self.p1(self.r1(self.c1(x)))                # both parts
        x = self.r3(self.p2(self.r2(self.c2(x))))       # r2: neither; r3: after a pooling
        x = self.shared(self.c3(x)) + x                 # called twice: once fusible, once
        x = self.shared(x).mean((2, 3))                 # after an addition
        return self.fc2(self.r5(self.fc1(x)))           # r5: its forward only


def test_every_position():
    gm = torch.fx.symbolic_trace(_Relus())
    f = relu_fusion(gm, lambda node: True)
    assert f.relus == {"r1": (True, True), "r2": (False, False), "r3": (True, False),
                       "shared": (False, False), "r5": (True, False)}
    assert f.stores == {"c1", "p2", "fc1"} and f.masks == {"p1"}


def test_what_the_accelerator_does_not_run_fuses_nothing():
    """A producer or a pooling left to PyTorch (``runs`` false) takes no part: the ReLU
    after it keeps its forward, the one before it its mask."""
    gm = torch.fx.symbolic_trace(_Relus())
    f = relu_fusion(gm, lambda node: node.target not in ("c1", "p1"))
    assert f.relus["r1"] == (False, False) and "c1" not in f.stores and not f.masks
    assert f.relus["r5"] == (True, False)


def test_a_layer_called_twice_stores_only_when_every_call_feeds_a_fused_relu():
    class Twice(nn.Module):
        def __init__(self):
            super().__init__()
            self.c, self.r = nn.Conv2d(2, 2, 1, bias=False), nn.ReLU()

        def forward(self, x):
            return self.r(self.c(x)) + self.c(x)        # the second call feeds the addition

    f = relu_fusion(torch.fx.symbolic_trace(Twice()), lambda node: True)
    assert f.relus == {"r": (False, False)} and not f.stores
