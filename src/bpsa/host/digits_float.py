"""Training the digits CNN (:mod:`bpsa.host.digits`: the same network, data, split, initial
weights and data order) in floating point: bf16 or fp16 operands, fp32 accumulators
(``docs/architecture/floating_point.md``), fp32 master weights on the host.

A step:

- the images ``pixel / 16`` (exact in both formats); each weight operand the master weight
  rounded to the operand format (the driver's conversion, :func:`bpsa.models.floating.
  from_float32`);
- on the accelerator: the three layers' forward (the convolutions' outputs leave rounded to
  the operand format and through the ReLU, REQUANT 0 and RELU; the FC layer's logits as
  fp32), the losses (dX rounded to the operand format), the weight gradients (fp32), and on
  its pooling unit max pooling 2 x 2 and global average pooling, forward and backward with
  the ReLUs' backward masks (``docs/architecture/floating_point.md``, "Pooling"; dX rounded to the
  operand format), as the integer training does;
- on the host, in float32: the softmax cross-entropy and ``dL/dlogits = (p - onehot) /
  batch``, and SGD ``master -= lr * dW``.

Two backends compute the accelerator's part: ``model`` (:class:`FloatModelOps`, the golden
model :mod:`bpsa.models.float_layers` with the plan's groups and bands) and ``rtl``
(:class:`FloatAcceleratorOps`, :func:`bpsa.simulate`); they give the same bits, so the same
weights (a test runs a few steps on both).
"""

import numpy as np

from bpsa.host import digits
from bpsa.models import float_layers, float_pool, floating
from bpsa.plan import tiling
from bpsa.spec.layer import ConvLayer

__all__ = ["FloatAcceleratorOps", "FloatModelOps", "evaluate", "init_master", "torch_reference",
           "train", "train_step", "training_run"]


class FloatModelOps:
    """The accelerator's layers in the golden model (bit-exact to the RTL), tiled as the
    driver tiles each layer (:func:`bpsa.plan.tiling.plan_or_strips`: its groups, bands and
    column strips fix the order of the fp32 sums): float32 tensors in (rounded to the operand
    format), float32 out, the values :func:`bpsa.simulate` gives. Also the ``model`` backend
    of :func:`bpsa.torch.offload` (``counters`` empty: no hardware ran)."""

    name = "model"

    def __init__(self, config):
        if not config.is_float:
            raise ValueError(f"configuration {config.name!r} is not floating point "
                             f"(arithmetic {config.arithmetic!r})")
        self.config, self.fmt = config, config.arithmetic
        self.cycles = 0
        self.counters = {}

    def _bits(self, t):
        return floating.from_float32(np.asarray(t, dtype=np.float32), self.fmt).astype(np.int64)

    def _out(self, bits, requant):
        if requant is not None:
            return floating.to_float32(bits, self.fmt)
        return np.asarray(bits, dtype=np.int64).astype(np.uint32).view(np.float32)

    def _run(self, phase, shape, ops, hw, geo, requant=None, relu=False):
        mode = "feeder" if phase == "forward" else tiling.default_mode(self.config, phase)
        plan = tiling.plan_or_strips(self.config, phase, ConvLayer.conv(*shape, *geo),
                                     mode=mode)
        return self._out(float_layers.accelerator_run(
            phase, plan, ops, self.fmt, hw, *geo, requant=requant is not None, relu=relu),
            requant)

    def forward(self, x, w, stride=1, padding=0, dilation=1, requant=None, relu=False):
        (n, c, h, wd), (k, _, r, s) = x.shape, w.shape
        return self._run("forward", (n, c, h, wd, k, r, s),
                         {"x": self._bits(x), "w": self._bits(w)}, None,
                         (stride, padding, dilation), requant, relu)

    def loss(self, dy, w, input_hw, stride=1, padding=0, dilation=1, requant=None):
        (n, k, _, _), (_, c, r, s) = dy.shape, w.shape
        return self._run("loss", (n, c, *input_hw, k, r, s),
                         {"dy": self._bits(dy), "w": self._bits(w)}, tuple(input_hw),
                         (stride, padding, dilation), requant)

    def gradient(self, x, dy, kernel_hw, stride=1, padding=0, dilation=1):
        (n, c, h, wd), k = x.shape, dy.shape[1]
        return self._run("gradient", (n, c, h, wd, k, *kernel_hw),
                         {"x": self._bits(x), "dy": self._bits(dy)}, tuple(kernel_hw),
                         (stride, padding, dilation))

    def pool(self, x, kind, kernel=None, stride=None, padding=0, relu=False):
        """The pooling unit's forward, in the format (stride: the kernel's by default)."""
        return self._out(float_pool.pool2d(self._bits(x), kind, kernel, stride, padding,
                                           self.fmt, relu=relu), 0)

    def pool_backward(self, dy, x, kind, kernel=None, stride=None, padding=0, relu=False,
                      requant=None):
        return self._out(float_pool.pool2d_backward(
            self._bits(dy), self._bits(x), kind, kernel, stride, padding, self.fmt,
            relu=relu, requant=requant is not None), requant)


class FloatAcceleratorOps(digits.AcceleratorOps):
    """The accelerator's layers on a simulated accelerator (``acc``: :func:`bpsa.simulate` of
    a floating-point configuration with the pooling unit); ``cycles`` adds up every run's
    BUSY_CYCLES (the integer training's :class:`bpsa.host.digits.AcceleratorOps`)."""

    def __init__(self, acc, config):
        FloatModelOps(config)           # the same configuration check
        super().__init__(acc, config)


def init_master(seed=0):
    """The integer training's initial weights (:func:`bpsa.host.digits.init_master`) as
    float32 master weights."""
    return {k: (v / 2.0 ** digits.MASTER_FRAC).astype(np.float32)
            for k, v in digits.init_master(seed).items()}


def _images(x):
    """The Q8 images (:func:`bpsa.host.digits.load_digits_split`) as float32 ``pixel / 16``."""
    return (np.asarray(x) / 256.0).astype(np.float32)


def _forward(ops, x, w):
    a1 = ops.forward(x, w["conv1"], 1, 1, requant=0, relu=True)
    p1 = ops.pool(a1, "max", 2)
    a2 = ops.forward(p1, w["conv2"], 2, 1, requant=0, relu=True)
    gp = ops.pool(a2, "global_avg")
    logits = ops.forward(gp, w["fc"])[:, :, 0, 0]
    return {"a1": a1, "p1": p1, "a2": a2, "gp": gp}, logits


def train_step(ops, master, x, labels, lr):
    """One SGD step on a batch of float32 images; updates the fp32 ``master`` in place and
    returns ``(loss, correct)`` of the batch."""
    batch = len(x)
    t, logits = _forward(ops, x, master)
    z = logits - logits.max(axis=1, keepdims=True)
    e = np.exp(z, dtype=np.float32)
    p = e / e.sum(axis=1, keepdims=True)
    onehot = np.zeros_like(p)
    onehot[np.arange(batch), labels] = 1
    dz4 = ((p - onehot) / np.float32(batch))[:, :, None, None].astype(np.float32)
    dw = {"fc": ops.gradient(t["gp"], dz4, (1, 1))}
    dgp = ops.loss(dz4, master["fc"], (1, 1), requant=0)
    da2 = ops.pool_backward(dgp, t["a2"], "global_avg", relu=True, requant=0)
    dw["conv2"] = ops.gradient(t["p1"], da2, (3, 3), 2, 1)
    dp1 = ops.loss(da2, master["conv2"], t["p1"].shape[2:], 2, 1, requant=0)
    da1 = ops.pool_backward(dp1, t["a1"], "max", 2, relu=True, requant=0)
    dw["conv1"] = ops.gradient(x, da1, (3, 3), 1, 1)
    for name in master:
        master[name] -= np.float32(lr) * dw[name]
    picked = np.maximum(p[np.arange(batch), labels], 1e-30)
    return float(-np.log(picked).mean()), int((logits.argmax(axis=1) == labels).sum())


def evaluate(ops, master, x, labels, chunk=360):
    """Accuracy on the float32 images ``x``."""
    right = 0
    for i in range(0, len(x), chunk):
        _, logits = _forward(ops, x[i:i + chunk], master)
        right += int((logits.argmax(axis=1) == labels[i:i + chunk]).sum())
    return right / len(x)


def train(ops, *, epochs=15, batch=32, lr=0.25, seed=0, progress=False, eval_ops=None):
    """Train from :func:`init_master` (``seed``), the integer training's data order
    (:func:`bpsa.host.digits.run_epochs`); returns ``(master, history)`` as
    :func:`bpsa.host.digits.train` does."""
    xtr, ytr, xte, yte = digits.load_digits_split(seed)
    master = init_master(seed)
    history = digits.run_epochs(
        ops, master, (_images(xtr), ytr, _images(xte), yte),
        lambda o, m, x, y: train_step(o, m, x, y, lr), evaluate, epochs=epochs, batch=batch,
        seed=seed, progress=progress, eval_ops=eval_ops,
        desc=f"digits {ops.config.arithmetic} ({ops.name})")
    return master, history


def torch_reference(*, epochs=15, batch=32, lr=0.25, seed=0, autocast=None):
    """The same network, initial weights, data order and schedule in PyTorch float32, or
    with ``autocast="bf16"`` under ``torch.autocast`` to bfloat16 on the CPU; its test
    accuracy and loss a epoch. Needs ``torch``."""
    import contextlib

    import torch
    import torch.nn.functional as F
    torch.manual_seed(seed)
    xtr, ytr, xte, yte = digits.load_digits_split(seed)
    xtr_f, xte_f = torch.tensor(_images(xtr)), torch.tensor(_images(xte))
    params = {k: torch.tensor(v, requires_grad=True) for k, v in init_master(seed).items()}
    if autocast not in (None, "bf16"):
        raise ValueError(f"autocast must be None or 'bf16', not {autocast!r}")

    def cast():
        return torch.autocast("cpu", dtype=torch.bfloat16) if autocast \
            else contextlib.nullcontext()

    def net(x):
        with cast():
            a1 = F.max_pool2d(F.relu(F.conv2d(x, params["conv1"], padding=1)), 2)
            a2 = F.relu(F.conv2d(a1, params["conv2"], stride=2, padding=1))
            return F.conv2d(a2.mean(dim=(2, 3), keepdim=True), params["fc"])[:, :, 0, 0] \
                .float()

    opt = torch.optim.SGD(params.values(), lr=lr)
    rng = np.random.default_rng(seed + 2)
    steps = len(xtr) // batch
    history = []
    for epoch in range(epochs):
        order = rng.permutation(len(xtr))
        losses = []
        for i in range(steps):
            b = torch.tensor(order[i * batch:(i + 1) * batch])
            opt.zero_grad()
            loss = F.cross_entropy(net(xtr_f[b]), torch.tensor(ytr)[b])
            loss.backward()
            opt.step()
            losses.append(float(loss.detach()))
        with torch.no_grad():
            acc = (net(xte_f).argmax(dim=1).numpy() == yte).mean()
        history.append({"epoch": epoch + 1, "loss": float(np.mean(losses)),
                        "test_accuracy": float(acc)})
    return history


def training_run(config, *, simulate=None, epochs=15, batch=32, lr=0.25, seed=0,
                 reference=True, progress=False):
    """:func:`bpsa.host.digits.training_run` in floating point: :func:`train` on
    :class:`FloatModelOps` (``simulate`` None) or on the simulated accelerator
    (:class:`FloatAcceleratorOps`, the test accuracy from the model, the same bits), next to
    PyTorch float32 and under bf16 autocast (``reference``, when ``torch`` is installed).
    Returns a :class:`bpsa.host.digits.TrainingRun`; the cycles a step are measured (rtl) or
    the cycle model's (the pooling layers run on the host: not counted)."""
    model_ops = FloatModelOps(config)
    kw = dict(epochs=epochs, batch=batch, lr=lr, seed=seed)
    if simulate is not None:
        with simulate(config) as acc:
            ops = FloatAcceleratorOps(acc, config)
            _, history = train(ops, progress=progress, eval_ops=model_ops, **kw)
    else:
        _, history = train(model_ops, progress=progress, **kw)
    steps = len(digits.load_digits_split(seed)[0]) // batch
    per_step, source = digits.cycles_per_step(
        config, history, measured=simulate is not None, batch=batch, seed=seed,
        host=" (pooling on the host)" if simulate is not None
        else " (convolutions and FC; pooling on the host)")
    ref = ref16 = missing = None
    if reference:
        try:
            import torch  # noqa: F401
        except ImportError:
            missing = "torch is not installed"
        else:
            ref = torch_reference(**kw)
            ref16 = torch_reference(autocast="bf16", **kw)
    return digits.TrainingRun(config=config.name, backend="model" if simulate is None else "rtl",
                              epochs=epochs, batch=batch, steps=steps, history=history,
                              reference=ref, reference_missing=missing,
                              cycles_per_step=per_step, cycles_source=source,
                              reference_bf16=ref16)
