"""PyTorch out (``bpsa.torch.offload``, from bpsa.torch.offloading): a model's convolutions,
linear layers, poolings and ReLUs run forward and backward on the accelerator through
autograd. The simulated RTL gives the golden model's bits, outputs and every gradient; both
follow plain PyTorch within the bf16 operands' rounding; what cannot run is named, or refused
with strict."""

import numpy as np
import pytest
import torch
from torch import nn

from bpsa.config import load_config
from bpsa.torch import offload

CFG = load_config("small_bf16")


class _Net(nn.Module):
    """Every offloaded kind: a conv with a bias (stride 2), ReLU (after the bias its forward
    stays in PyTorch, its mask is the max pooling's backward), max pooling, an average
    pooling with padding and overlapping windows, a second conv, the global average, a linear
    layer with a bias."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(2, 6, 3, stride=2, padding=1)
        self.relu = nn.ReLU()
        self.pool = nn.MaxPool2d(2)
        self.avg = nn.AvgPool2d(3, stride=1, padding=1)
        self.conv2 = nn.Conv2d(6, 5, 3, padding=1, bias=False)
        self.gap = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(5, 3)

    def forward(self, x):
        x = self.avg(self.pool(self.relu(self.conv1(x))))
        return self.fc(torch.flatten(self.gap(self.conv2(x)), 1))


def _step(model, x, target):
    """Outputs and the gradients of every parameter and of the input."""
    x = x.clone().requires_grad_()
    y = model(x)
    nn.functional.cross_entropy(y, target).backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    return y.detach(), x.grad.clone(), grads


def _data(seed=0):
    torch.manual_seed(seed)
    net = _Net()
    x = torch.randn(4, 2, 16, 16)
    return net, x, torch.tensor([0, 1, 2, 1])


def test_model_backend_follows_pytorch():
    """Outputs and gradients within the bf16 operands' rounding of plain PyTorch float32 (the
    relative error of a few bf16 roundings, 2**-8 each, through three layers)."""
    net, x, t = _data()
    with pytest.warns(UserWarning, match=r"stay in PyTorch: relu: its input is not the output "
                                         r"of a convolution or linear layer without a bias"):
        off = offload(net, CFG)
    assert off.offloaded == ["conv1", "relu", "pool", "avg", "conv2", "gap", "fc"]
    assert list(off.kept) == ["relu"] and off.module.pool.args["relu"]
    y, dx, grads = _step(off, x, t)
    y0, dx0, grads0 = _step(net, x, t)
    assert torch.allclose(y, y0, rtol=0.05, atol=0.02)
    assert torch.allclose(dx, dx0, rtol=0.1, atol=2e-3)
    for name, g0 in grads0.items():
        assert torch.allclose(grads[f"module.{name}"], g0, rtol=0.1, atol=3e-3), name
    phases = {(c["layer"], c["phase"]) for c in off.calls}
    assert ("conv1", "forward") in phases and ("conv2", "loss") in phases
    assert ("conv1", "gradient") in phases and ("pool", "pool_backward") in phases
    assert ("conv1", "loss") in phases               # the input's gradient, asked for
    assert not any(c["layer"] == "relu" for c in off.calls)     # no run of its own


def test_integer_scaling_follows_pytorch():
    """An int16 configuration (``ecp5_train``): every tensor scaled by a power of two with
    the accumulators' headroom; outputs and gradients within a thousandth of their largest
    value of plain PyTorch's."""
    net, x, t = _data()
    with pytest.warns(UserWarning, match="stay in PyTorch: relu"):
        off = offload(net, "ecp5_train")
    y, dx, grads = _step(off, x, t)
    y0, dx0, grads0 = _step(net, x, t)
    for got, want in [(y, y0), (dx, dx0)] + [(grads[f"module.{n}"], g) for n, g in
                                             grads0.items()]:
        assert (got - want).abs().max() <= 2e-3 * want.abs().max()


@pytest.mark.verilator
# small_bf16 in make test-long (bf16's phases through the accelerator against the golden model:
# test_gateware_accelerator's float training phases and bpsa sim --phase step in make test)
@pytest.mark.parametrize("config", [pytest.param("small_bf16", marks=pytest.mark.long), "small"])
def test_rtl_backend_gives_the_model_backends_bits(config):
    """The simulated accelerator and the golden model (floating point; int8 through the same
    scaling): the same outputs and gradients, bit for bit, over two SGD steps; every call's
    counters recorded per layer."""
    net, x, t = _data(1)
    with pytest.warns(UserWarning, match="stay in PyTorch: relu"):
        nets = {b: offload(net, config, backend=b) for b in ("model", "rtl")}
    opts = {b: torch.optim.SGD(m.parameters(), lr=0.1) for b, m in nets.items()}
    for _ in range(2):
        out = {}
        for b, m in nets.items():
            opts[b].zero_grad()
            out[b] = _step(m, x, t)
            opts[b].step()
        (y1, dx1, g1), (y2, dx2, g2) = out["model"], out["rtl"]
        assert torch.equal(y1.view(torch.int32), y2.view(torch.int32))
        assert torch.equal(dx1.view(torch.int32), dx2.view(torch.int32))
        for name in g1:
            assert torch.equal(g1[name].view(torch.int32), g2[name].view(torch.int32)), name
    calls = nets["rtl"].calls
    # the ReLU runs nothing of its own: its mask is the pooling's backward
    assert {c["layer"] for c in calls} == set(nets["rtl"].offloaded) - {"relu"}
    assert all(c["busy_cycles"] > 0 and c["dma_read_bytes"] > 0 for c in calls)
    nets["rtl"].close()


def test_grouped_and_depthwise_convolutions_run_in_packs():
    """A grouped and a depthwise conv (two filters a channel) offloaded in packs of groups
    (block-diagonal W): outputs and every gradient equal, bit for bit, those of the same
    groups offloaded as separate convs (zero weights are skipped MACs in the bf16 contract),
    and follow plain PyTorch within the bf16 rounding."""
    torch.manual_seed(5)
    grouped = nn.Sequential(nn.Conv2d(4, 6, 3, padding=1, groups=2, bias=False),
                            nn.Conv2d(6, 12, 3, stride=2, padding=1, groups=6, bias=False))

    class Split(nn.Module):             # the same layers, one conv a group
        def __init__(self):
            super().__init__()
            a, b = grouped[0].weight.detach(), grouped[1].weight.detach()
            self.a = nn.ModuleList(nn.Conv2d(2, 3, 3, padding=1, bias=False) for _ in range(2))
            self.b = nn.ModuleList(nn.Conv2d(1, 2, 3, stride=2, padding=1, bias=False)
                                   for _ in range(6))
            for g, m in enumerate(self.a):
                m.weight.data.copy_(a[3 * g:3 * g + 3])
            for g, m in enumerate(self.b):
                m.weight.data.copy_(b[2 * g:2 * g + 2])

        def forward(self, x):
            h = torch.cat([m(x[:, 2 * g:2 * g + 2]) for g, m in enumerate(self.a)], 1)
            return torch.cat([m(h[:, g:g + 1]) for g, m in enumerate(self.b)], 1)

    x = torch.randn(2, 4, 6, 6)
    off, ref = offload(grouped, CFG), offload(Split(), CFG)
    assert off.offloaded == ["0", "1"] and not off.kept
    xs = [x.clone().requires_grad_() for _ in range(3)]
    outs = [m(v) for m, v in zip((off, ref, grouped), xs)]
    for o in outs:
        o.square().sum().backward()
    assert torch.equal(outs[0], outs[1]) and torch.equal(xs[0].grad, xs[1].grad)
    assert torch.equal(off.module[0].weight.grad,
                       torch.cat([m.weight.grad for m in ref.module.a]))
    assert torch.equal(off.module[1].weight.grad,
                       torch.cat([m.weight.grad for m in ref.module.b]))
    assert torch.allclose(outs[0], outs[2], rtol=0.05, atol=0.05)
    assert torch.allclose(xs[0].grad, xs[2].grad, rtol=0.05, atol=0.1)
    # one backend call a pack and phase: 6 groups of 2 filters on 4 columns, packs of 2
    assert CFG.cols == 4
    assert sum(c["layer"] == "1" and c["phase"] == "gradient" for c in off.calls) == 3


def test_what_cannot_run_is_named_or_refused():
    model = nn.Sequential(nn.Conv2d(4, 4, 3, padding="same"), nn.BatchNorm2d(4), nn.ReLU(),
                          nn.AdaptiveAvgPool2d(2))
    with pytest.warns(UserWarning, match=r"stay in PyTorch: 0: padding other than zeros .*; "
                                         r"2: its input .*; 2.mask: .*; 3: adaptive output 2"):
        off = offload(model, CFG)
    assert off.offloaded == [] and list(off.kept) == ["0", "2", "2.mask", "3"]
    with pytest.raises(ValueError, match="layers the accelerator cannot run: 0: padding"):
        offload(model, CFG, strict=True)
    with pytest.raises(ValueError, match="integer scaling needs signed operands"):
        offload(model, load_config("small").replace(operand_signed=False, name="u8"))
    with pytest.raises(ValueError, match="holds an infinity or a NaN"):
        offload(nn.Conv2d(1, 1, 1), "small")(torch.tensor([[[[float("nan")]]]]))
    with pytest.raises(ValueError, match="backend must be 'model', 'rtl'"):
        offload(nn.MaxPool2d(2), CFG, backend="fpga")
    with pytest.raises(TypeError, match="takes floating-point tensors .*not torch.int64"):
        offload(nn.Sequential(nn.MaxPool2d(2)), CFG)(torch.ones(1, 1, 2, 2, dtype=torch.int64))
    with pytest.raises(ValueError, match="the offloaded Linear takes N x features"):
        offload(nn.Linear(4, 2), CFG)(torch.ones(2, 3, 4))
    with pytest.warns(UserWarning, match="stay in PyTorch: ReLU: its input .*; ReLU.mask"):
        alone = offload(nn.ReLU(), CFG)         # nothing before or after it to fuse into
    # a reason once, after the layers it applies to (past eight: six and the count)
    from bpsa.torch.offloading import _kept_text
    assert _kept_text({"a": "x", "b": "y", "c": "x"}) == "a, c: x; b: y"
    many = {f"r{i}": "why" for i in range(9)}
    assert _kept_text(many) == "r0, r1, r2, r3, r4, r5, ... (9 in all): why"
    np.testing.assert_array_equal(alone(torch.tensor([[[[-1.0, 2.0]]]])).numpy(),
                                  [[[[0.0, 2.0]]]])


def test_offload_is_bpsa_torch_offload_and_leaves_the_model_alone():
    """``bpsa.torch.offload(model, config=..., backend=...)`` is the function; the module
    stays importable by its own name; the offloaded copy trains, the model keeps its
    weights; ``import bpsa.torch`` alone does not import the offload module."""
    import subprocess
    import sys

    import bpsa.torch
    import bpsa.torch.offloading as m
    assert bpsa.torch.offload is m.offload and callable(bpsa.torch.offload)
    net = nn.Sequential(nn.Conv2d(1, 2, 3), nn.Flatten(), nn.Linear(2 * 4 * 4, 3))
    before = [p.detach().clone() for p in net.parameters()]
    off = bpsa.torch.offload(net, config=CFG, backend="model")
    torch.optim.SGD(off.parameters(), lr=0.5).zero_grad()
    off(torch.randn(2, 1, 6, 6)).sum().backward()
    torch.optim.SGD(off.parameters(), lr=0.5).step()
    assert all(torch.equal(a, b) for a, b in zip(before, net.parameters()))
    assert not all(torch.equal(a, b) for a, b in zip(before, off.parameters()))
    code = ("import sys, bpsa.torch; print('bpsa.torch.offloading' in sys.modules, "
            "'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.split() == ["False", "False"]


@pytest.mark.parametrize("fmt, tol", [("mxint8", 0.02), ("mxfp8_e4m3", 0.25)])
def test_mx_backend_follows_pytorch_and_the_golden_model(fmt, tol):
    """An MX configuration: the convolutions' outputs and every gradient are the MX golden
    model's fp32 sums of the same tensors in the front ends' orders (channel-first parts for
    the forward and the loss, the zero-free walker's segments for the gradient; bit for bit:
    the offload hands the phases the right tensors and geometry), and within the 8-bit elements' rounding of plain PyTorch
    float32 (a network without max pooling or ReLU, whose routing of gradients would turn a
    small difference into a different pixel); poolings and ReLUs stay in PyTorch, named."""
    from bpsa.models import mx
    preset = "small_mxint8" if fmt == "mxint8" else "small_mxfp8"
    net, x, t = _data(2)
    with pytest.warns(UserWarning, match=f"relu: the pooling unit is not built in {fmt}"):
        off = offload(net, preset)
    assert off.offloaded == ["conv1", "conv2", "fc"] and set(off.kept) == {"relu", "pool",
                                                                         "avg", "gap"}
    w = net.conv1.weight.detach().numpy()
    g = load_config(preset).rows          # the channel-first front end's parts
    want = mx.conv_forward(x.numpy(), w, fmt, stride=2, padding=1, part=g).view(np.float32)
    got = off.module.conv1(x) - net.conv1.bias.detach().view(1, -1, 1, 1)
    np.testing.assert_allclose(got.detach().numpy(), want, rtol=1e-6, atol=1e-6)
    dy = np.random.default_rng(3).standard_normal((4, 6, 8, 8)).astype(np.float32)
    for phase, args, ref in [
            ("loss", (dy, w, (16, 16)), mx.conv_loss(dy, w, fmt, (16, 16), 2, 1, part=g)),
            ("gradient", (x.numpy(), dy, (3, 3)), mx.conv_gradient(x.numpy(), dy, fmt, (3, 3),
                                                                   2, 1, walker=True))]:
        out = getattr(off.backend, phase)(*args, stride=(2, 2), padding=(1, 1),
                                          dilation=(1, 1))
        assert np.array_equal(out.view(np.uint32), ref), phase
    torch.manual_seed(2)
    lin = nn.Sequential(nn.Conv2d(2, 6, 3, stride=2, padding=1),
                        nn.Conv2d(6, 5, 3, padding=1, bias=False), nn.AdaptiveAvgPool2d(1),
                        nn.Flatten(), nn.Linear(5, 3))
    with pytest.warns(UserWarning, match="stay in PyTorch: 2: the pooling unit"):
        off = offload(lin, preset)
    y, dx, grads = _step(off, x, t)
    y0, dx0, grads0 = _step(lin, x, t)
    for name, got, want in [("y", y, y0), ("dx", dx, dx0)] + [
            (n, grads[f"module.{n}"], g) for n, g in grads0.items()]:
        assert (got - want).abs().max() <= tol * want.abs().max(), name


@pytest.mark.verilator
def test_mx_rtl_and_model_backends_agree_bit_for_bit():
    """The accelerator's MX build (backend ``rtl``, small_mxint8 under Verilator) and the
    golden model (backend ``model``) give the same outputs, input gradient and parameter
    gradients, bit for bit, through a network of strided and padded convolutions and a linear
    layer (its 1 x 1 convolutions), in both scale rules (the rule reaches the driver's
    quantizer: the two rules' results differ)."""
    net, x, t = _data(2)
    torch.manual_seed(2)
    lin = nn.Sequential(nn.Conv2d(2, 6, 3, stride=2, padding=1),
                        nn.Conv2d(6, 40, 3, padding=1, bias=False), nn.AdaptiveAvgPool2d(1),
                        nn.Flatten(), nn.Linear(40, 3))
    steps = {}
    for rule in ("floor", "ceil"):
        for backend in ("model", "rtl"):
            with pytest.warns(UserWarning, match="stay in PyTorch"):
                off = offload(lin, "small_mxint8", backend, mx_scale_rule=rule)
            steps[rule, backend] = _step(off, x, t)
            off.close()
        (y, dx, grads), (y0, dx0, grads0) = steps[rule, "rtl"], steps[rule, "model"]
        assert torch.equal(y, y0) and torch.equal(dx, dx0), rule
        assert grads.keys() == grads0.keys() and all(torch.equal(grads[n], grads0[n])
                                                     for n in grads), rule
    assert not torch.equal(steps["floor", "rtl"][0], steps["ceil", "rtl"][0])


def test_mx_scale_rule_and_refusals():
    """The scale rule reaches the quantizer: MXINT8's floor scale saturates 1.999 to 127/64,
    the ceil scale (one power of two up) rounds it to 2; an unknown rule and an unknown
    backend are refused."""
    x = torch.zeros(1, 32, 1, 1)
    x[0, 1, 0, 0] = 1.999
    conv = nn.Conv2d(32, 1, 1, bias=False)
    with torch.no_grad():
        conv.weight.zero_()
        conv.weight[0, 1, 0, 0] = 1.0
    got = {r: float(offload(conv, "small_mxint8", mx_scale_rule=r)(x).detach()[0, 0, 0, 0])
           for r in ("floor", "ceil")}
    assert got == {"floor": 127 / 64, "ceil": 2.0}
    with pytest.raises(ValueError, match="mx_scale_rule must be one of floor, ceil"):
        offload(conv, "small_mxint8", mx_scale_rule="up")
    with pytest.raises(ValueError, match="backend must be 'model', 'rtl' or an accelerator"):
        offload(conv, "small_mxfp8", backend="fpga")


@pytest.mark.verilator
def test_offload_runs_what_the_cycle_model_counts():
    """``bpsa.torch.models.digits_cnn`` (bias-free convolutions, each ReLU fused into the
    convolution's store, the first one's mask into the max pooling's backward, the second
    one's in PyTorch: the global average reads it) gives the golden model's bits through the
    RTL, and trained one step through
    the simulated accelerator: the offload calls exactly the layer phases ``bpsa perf
    --model`` counts (no ReLU runs), and its measured cycles are the model's (the linear
    layer as one image of the batch's pixels, as the model runs it)."""
    from bpsa.models.network_perf import network_step
    from bpsa.torch.models import digits_cnn
    from bpsa.torch.trace import trace
    cfg = load_config("small")
    net = digits_cnn()
    x = torch.randn(4, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    steps = {}
    for backend in ("model", "rtl"):
        with pytest.warns(UserWarning, match=r"stay in PyTorch: relu2.mask"):
            off = offload(net, cfg, backend=backend)
        steps[backend] = _step(off, x, torch.tensor([0, 1, 2, 3]))
    # the fused ReLUs: the RTL's bits are the golden model's
    (y, dx, grads), (y0, dx0, grads0) = steps["rtl"], steps["model"]
    assert torch.equal(y, y0) and torch.equal(dx, dx0)
    assert all(torch.equal(grads[n], grads0[n]) for n in grads)
    got = {}
    for c in off.calls:
        if c["phase"] == "loss" and c["layer"] == "conv1":
            continue                    # the input's gradient (_step asks for it)
        got[c["layer"], c["phase"]] = got.get((c["layer"], c["phase"]), 0) + c["busy_cycles"]
    off.close()
    step = network_step(cfg, trace(net, tuple(x.shape)).network, batch=4)
    pool = {"forward": "pool_forward", "loss": "pool_backward"}
    want = {(r["layer"], pool[r["phase"]] if r["op"].endswith("pool") else r["phase"]):
            r["cycles"] for r in step.rows if r["status"] == "run"}
    assert got.keys() == want.keys()
    # measured: the convolutions and the linear layer within 3.6 %, the poolings within
    # 10.2 % (the global average's forward; the pooling model's bound is 12 %), the step's
    # total 0.34 %
    for key, cycles in want.items():
        bound = 0.12 if key[1].startswith("pool") else 0.05
        assert abs(got[key] / cycles - 1) <= bound, (key, got[key], cycles)
    assert abs(sum(got.values()) / sum(want.values()) - 1) <= 0.01
