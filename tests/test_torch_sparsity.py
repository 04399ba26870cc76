"""Measured zero fractions equal a brute-force count of the MACs with a nonzero operand pair,
loop by loop (numpy, no convolution routine), on random layers with ReLU zeros, padding,
stride, dilation and groups; an in-place ReLU after a layer does not change its dY."""

import numpy as np
import pytest
import torch
from torch import nn

from bpsa.torch.sparsity import zero_fractions


def _brute(x, w, dy, stride, pad, dil, groups):
    """(MACs, nonzero pairs of forward, loss, gradient) of a conv, by its seven loops."""
    n, c, h, wd = x.shape
    k, cg, r, s = w.shape
    _, _, oh, ow = dy.shape
    kg = k // groups
    macs, fwd, loss, grad = 0, 0, 0, 0
    for b in range(n):
        for kk in range(k):
            g = kk // kg
            for i in range(oh):
                for j in range(ow):
                    for cc in range(cg):
                        for p in range(r):
                            for q in range(s):
                                macs += 1
                                y, xx = i * stride + p * dil - pad, j * stride + q * dil - pad
                                inside = 0 <= y < h and 0 <= xx < wd
                                xv = x[b, g * cg + cc, y, xx] if inside else 0.0
                                wv, dv = w[kk, cc, p, q], dy[b, kk, i, j]
                                fwd += xv != 0 and wv != 0
                                loss += inside and dv != 0 and wv != 0
                                grad += xv != 0 and dv != 0
    return macs, fwd, loss, grad


class _Net(nn.Module):
    def __init__(self, conv, inplace):
        super().__init__()
        self.conv, self.relu = conv, nn.ReLU(inplace=inplace)
        self.head = nn.Linear(conv.out_channels, 3)

    def forward(self, x):
        y = self.relu(self.conv(nn.functional.relu(x)))
        return self.head(y.mean((2, 3)))


@pytest.mark.parametrize("c,k,r,stride,pad,dil,groups", [
    (3, 4, 3, 1, 1, 1, 1), (4, 6, 3, 2, 1, 1, 2), (2, 3, 2, 2, 0, 2, 1), (4, 4, 3, 1, 2, 1, 4)])
def test_conv_fractions_equal_the_loops(c, k, r, stride, pad, dil, groups):
    torch.manual_seed(c * 100 + k * 10 + r)
    conv = nn.Conv2d(c, k, r, stride=stride, padding=pad, dilation=dil, groups=groups,
                     bias=False)
    with torch.no_grad():                      # zero weights too
        conv.weight[conv.weight.abs() < 0.1] = 0
    x = torch.randn(2, c, 7, 6)
    net = _Net(conv, inplace=True)
    got = zero_fractions(net, x, torch.tensor([0, 2]))
    # the reference: the same step without in-place ReLU, dY and X captured directly
    ref = _Net(conv, inplace=False)
    xin = nn.functional.relu(x)
    out = conv(xin)
    out.retain_grad()
    nn.functional.cross_entropy(ref.head(nn.functional.relu(out).mean((2, 3))),
                                torch.tensor([0, 2])).backward()
    macs, *fired = _brute(xin.numpy(), conv.weight.detach().numpy(), out.grad.numpy(),
                          stride, pad, dil, groups)
    want = [1 - f / macs for f in fired]
    assert [got["conv"][p] for p in ("forward", "loss", "gradient")] == pytest.approx(
        want, abs=1e-12)
    assert 0 < want[0] < 1 and 0 < want[1] < 1      # ReLU zeros and zero weights both there


def test_linear_fractions_and_the_model_left_as_it_was():
    torch.manual_seed(7)
    net = nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 4))
    x = torch.randn(3, 6)
    x[0, :3] = 0
    before = [p.detach().clone() for p in net.parameters()]
    got = zero_fractions(net, x, torch.tensor([1, 0, 3]))
    assert all(p.grad is None for p in net.parameters())
    assert all(torch.equal(a, b) for a, b in zip(before, net.parameters()))
    h = torch.relu(net[0](x)).detach().numpy()
    hh = torch.tensor(h, requires_grad=True)
    out = net[2](hh)
    out.retain_grad()
    nn.functional.cross_entropy(out, torch.tensor([1, 0, 3])).backward()
    dy, w = out.grad.numpy(), net[2].weight.detach().numpy()
    fwd = sum(h[b, i] != 0 and w[o, i] != 0 for b in range(3) for o in range(4) for i in range(5))
    loss = sum(dy[b, o] != 0 and w[o, i] != 0 for b in range(3) for o in range(4)
               for i in range(5))
    grad = sum(dy[b, o] != 0 and h[b, i] != 0 for b in range(3) for o in range(4)
               for i in range(5))
    assert got["2"] == pytest.approx({"forward": 1 - fwd / 60, "loss": 1 - loss / 60,
                                      "gradient": 1 - grad / 60}, abs=1e-12)
    assert got["0"]["forward"] == pytest.approx(3 / 18)     # x[0, :3] zero, W dense
    assert np.count_nonzero(h == 0) > 0


def test_a_module_that_takes_two_inputs_is_refused():
    class Odd(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 2)

        def forward(self, x):
            return self.fc(x[:, None, :])           # rank 3

    with pytest.raises(ValueError, match="fc: expected one input tensor of rank 2"):
        zero_fractions(Odd(), torch.randn(2, 4), torch.tensor([0, 1]))
