"""Training the digits CNN (``workloads/networks/digits.csv``) in the accelerator's integer
arithmetic, on the 8 x 8 handwritten digits that scikit-learn ships (1,797 images, no
download).

Network, NCHW (per image 1 x 8 x 8, 10 classes)::

    conv1 3x3, 16 outputs, pad 1 -> ReLU -> max pool 2x2 -> conv2 3x3, 32 outputs, stride 2,
    pad 1 -> ReLU -> global average pool -> fc 32 -> 10

Fixed point (signed 16-bit operands, 32-bit accumulators that wrap as the hardware's do;
``Qn``: an integer holding ``value * 2**n``):

- input: the digits' pixels (0..16) times 16, Q8 (``pixel / 16`` in [0, 1]);
- weights: Q12 operands, requantized (``round(master / 2**12)``, halves up, saturated) from
  master weights the host keeps in Q24;
- activations Q8: a convolution's Q20 accumulators leave the accelerator requantized by 12
  (the descriptor's REQUANT, OUT_SHIFT 12) and through the ReLU (RELU, on the store path);
  max pooling keeps Q8; global average pooling is the plane's sum over 4, rounded
  (:func:`bpsa.models.golden.pool2d`), both on the pooling unit;
- the loss, on the host: the logits' Q20 accumulators shifted to Q8, a softmax from a table
  of ``exp(-i / 256)`` in Q16 (``i`` the distance to the largest logit, up to 4095), the
  probabilities in Q10 by integer division, and dL/dlogits = p - onehot in Q10;
- gradients Q10: each loss's Q22 accumulators leave requantized by 12; global average
  pooling's backward is dY over 4, rounded; max pooling routes dY to the window's first
  maximum; ReLU's backward masks by the forward's sign (the pooling unit's backward with
  RELU, its result leaving as saturated operands, OUT_SHIFT 0);
- weight gradients: the accumulators (Q18 = Q8 x Q10) summed over the batch;
- SGD: ``master -= (dW * 2**6) >> (lr_shift + log2(batch))`` (floor), i.e. the learning
  rate ``2**-lr_shift`` times the batch mean.

Two backends compute every layer (every convolution's forward, loss and gradient, the FC
layer as the 1 x 1 convolution of 1 x 1 images, the ReLUs, both poolings forward and
backward): ``model``, numpy (:mod:`bpsa.models.golden`, wrapped to ``acc_width``); ``rtl``,
the accelerator simulated under Verilator (:func:`bpsa.simulate`; a configuration with the
pooling unit). Only the loss and the SGD step run on the host. Both give the same integers,
so the same weights: a test checks it.
"""

from dataclasses import dataclass

import numpy as np

from bpsa.models import golden
from bpsa.spec.numeric import wrap_array

__all__ = ["LAYERS", "ModelOps", "AcceleratorOps", "init_master", "load_digits_split",
           "operands", "softmax_grad", "train", "train_step", "evaluate", "torch_reference",
           "TrainingRun", "training_run", "run_epochs", "cycles_per_step"]

W_FRAC, ACT_SHIFT = 12, 12          # weight operands Q12; Q20 / Q22 accumulators -> Q8 / Q10
MASTER_FRAC = 24
#: Layer shapes (K, C, R, S) of the weights; checked against the network file by a test.
LAYERS = {"conv1": (16, 1, 3, 3), "conv2": (32, 16, 3, 3), "fc": (10, 32, 1, 1)}
_EXP = np.round(np.exp(-np.arange(4096) / 256.0) * 65536).astype(np.int64)


def _check_config(config):
    if config.operand_width != 16 or not config.operand_signed or config.acc_width < 32:
        raise ValueError(f"the digits training needs signed 16-bit operands and 32-bit or "
                         f"wider accumulators; configuration {config.name!r} has "
                         f"{config.operand_width}-bit operands, {config.acc_width}-bit "
                         f"accumulators")


class ModelOps:
    """Every layer in numpy, as the accelerator computes it (accumulators wrap to
    ``acc_width``, outputs requantized and through the ReLU on the store path)."""

    name = "model"

    def __init__(self, config):
        _check_config(config)
        self.bits, self.acc = config.operand_width, config.acc_width
        self.cycles = 0

    def _out(self, acc, requant):
        acc = wrap_array(acc, self.acc)
        return acc if requant is None else golden.requantize(acc, requant, self.bits)

    def forward(self, x, w, stride=1, padding=0, requant=None, relu=False):
        y = self._out(golden.conv2d(x, w, stride, padding), requant)
        return np.maximum(y, 0) if relu else y

    def pool(self, x, kind, kernel=None):
        return golden.pool2d(x, kind, kernel)

    def pool_backward(self, dy, x, kind, kernel=None, relu=False, requant=None):
        dx = golden.pool2d_backward(dy, x, kind, kernel)
        return self._out(dx * (x > 0) if relu else dx, requant)

    def loss(self, dy, w, input_hw, stride=1, padding=0, requant=None):
        return self._out(golden.conv2d_input_grad(dy, w, tuple(input_hw), stride, padding),
                         requant)

    def gradient(self, x, dy, kernel_hw, stride=1, padding=0):
        return self._out(golden.conv2d_weight_grad(x, dy, tuple(kernel_hw), stride, padding),
                         None)


class AcceleratorOps:
    """Every layer on a simulated accelerator (``acc``: :func:`bpsa.simulate`, a
    configuration with the pooling unit); ``cycles`` adds up the BUSY_CYCLES of every
    descriptor run."""

    name = "rtl"

    def __init__(self, acc, config):
        _check_config(config)
        for kind in ("max", "avg"):
            if not config.has_pool(kind):
                raise ValueError(f"the digits training runs max and average pooling on the "
                                 f"pooling unit; configuration {config.name!r} generates "
                                 f"pool_kinds {list(config.pool_kinds)}")
        self.acc = acc
        self.cycles = 0

    def _count(self, out):
        self.cycles += self.acc.counters["busy_cycles"]
        return out

    def forward(self, x, w, stride=1, padding=0, requant=None, relu=False):
        return self._count(self.acc.forward(x, w, stride=stride, padding=padding,
                                            requant=requant, relu=relu))

    def pool(self, x, kind, kernel=None):
        return self._count(self.acc.pool(x, kind, kernel))

    def pool_backward(self, dy, x, kind, kernel=None, relu=False, requant=None):
        return self._count(self.acc.pool_backward(dy, x, kind, kernel, relu=relu,
                                                  requant=requant))

    def loss(self, dy, w, input_hw, stride=1, padding=0, requant=None):
        return self._count(self.acc.loss(dy, w, tuple(input_hw), stride=stride,
                                         padding=padding, requant=requant))

    def gradient(self, x, dy, kernel_hw, stride=1, padding=0):
        return self._count(self.acc.gradient(x, dy, tuple(kernel_hw), stride=stride,
                                             padding=padding))


def load_digits_split(seed=0, test=360):
    """``(x_train, y_train, x_test, y_test)``: the images as Q8 int64 (N x 1 x 8 x 8), a
    fixed seeded split with ``test`` test images."""
    from sklearn.datasets import load_digits
    d = load_digits()
    x = d.images.astype(np.int64)[:, None] * 16
    order = np.random.default_rng(seed).permutation(len(x))
    te, tr = order[:test], order[test:]
    return x[tr], d.target[tr].astype(np.int64), x[te], d.target[te].astype(np.int64)


def init_master(seed=0):
    """He-initialized master weights, Q24 int64 (and the same values in float for the
    reference)."""
    rng = np.random.default_rng(seed + 1)
    return {name: np.round(rng.normal(0, np.sqrt(2 / (c * r * s)), (k, c, r, s))
                           * 2 ** MASTER_FRAC).astype(np.int64)
            for name, (k, c, r, s) in LAYERS.items()}


def operands(master):
    """The Q12 weight operands of the Q24 master weights."""
    return {k: golden.requantize(v, MASTER_FRAC - W_FRAC, 16) for k, v in master.items()}


def softmax_grad(logits, labels):
    """``(dlogits Q10, p Q10)`` of the softmax cross-entropy, in integers (see the module)."""
    z = np.asarray(logits, dtype=np.int64) >> 12                        # Q20 -> Q8
    dist = np.minimum(z.max(axis=1, keepdims=True) - z, len(_EXP) - 1)
    e = _EXP[dist]
    p = (e << 10) // e.sum(axis=1, keepdims=True)
    onehot = np.zeros_like(p)
    onehot[np.arange(len(labels)), labels] = 1 << 10
    return p - onehot, p


def forward_pass(ops, x, w):
    """The forward of a batch: the tensors the backward needs, and the logits (Q20)."""
    a1 = ops.forward(x, w["conv1"], 1, 1, requant=ACT_SHIFT, relu=True)
    p1 = ops.pool(a1, "max", 2)
    a2 = ops.forward(p1, w["conv2"], 2, 1, requant=ACT_SHIFT, relu=True)
    gp = ops.pool(a2, "global_avg")
    logits = ops.forward(gp, w["fc"])[:, :, 0, 0]
    return {"a1": a1, "p1": p1, "a2": a2, "gp": gp}, logits


def train_step(ops, master, x, labels, lr_shift):
    """One SGD step on a batch (its size a power of two); updates ``master`` in place and
    returns ``(loss, correct)`` of the batch (the loss from the integer softmax, for
    reporting)."""
    batch = len(x)
    if batch & (batch - 1):
        raise ValueError(f"the batch must be a power of two, not {batch}")
    w = operands(master)
    t, logits = forward_pass(ops, x, w)
    dz, p = softmax_grad(logits, labels)
    dz4 = dz[:, :, None, None]
    dw = {"fc": ops.gradient(t["gp"], dz4, (1, 1))}
    dgp = ops.loss(dz4, w["fc"], (1, 1), requant=ACT_SHIFT)
    da2 = ops.pool_backward(dgp, t["a2"], "global_avg", relu=True, requant=0)
    dw["conv2"] = ops.gradient(t["p1"], da2, (3, 3), 2, 1)
    dp1 = ops.loss(da2, w["conv2"], t["p1"].shape[2:], 2, 1, requant=ACT_SHIFT)
    da1 = ops.pool_backward(dp1, t["a1"], "max", 2, relu=True, requant=0)
    dw["conv1"] = ops.gradient(x, da1, (3, 3), 1, 1)
    shift = lr_shift + batch.bit_length() - 1
    for name in master:
        master[name] -= (dw[name] << (MASTER_FRAC - 18)) >> shift
    picked = np.maximum(p[np.arange(batch), labels], 1) / 1024.0
    return float(-np.log(picked).mean()), int((logits.argmax(axis=1) == labels).sum())


def evaluate(ops, master, x, labels, chunk=360):
    """Accuracy on ``x``."""
    w = operands(master)
    right = 0
    for i in range(0, len(x), chunk):
        _, logits = forward_pass(ops, x[i:i + chunk], w)
        right += int((logits.argmax(axis=1) == labels[i:i + chunk]).sum())
    return right / len(x)


def train(ops, *, epochs=15, batch=32, lr_shift=2, seed=0, progress=False, eval_ops=None):
    """Train from :func:`init_master` (``seed``); returns ``(master, history)``, the history
    a dict a epoch: ``epoch``, ``loss``, ``train_accuracy``, ``test_accuracy``,
    ``cycles``. ``eval_ops`` computes the test accuracy (default: ``ops``)."""
    master = init_master(seed)
    history = run_epochs(ops, master, load_digits_split(seed),
                         lambda o, m, x, y: train_step(o, m, x, y, lr_shift), evaluate,
                         epochs=epochs, batch=batch, seed=seed, progress=progress,
                         eval_ops=eval_ops, desc=f"digits ({ops.name})")
    return master, history


def run_epochs(ops, master, data, step, test, *, epochs, batch, seed, progress, eval_ops,
               desc):
    """The training loop both arithmetics share: ``epochs`` passes over ``data`` (``x_train,
    y_train, x_test, y_test``) in batches of ``batch``, in the order of a generator seeded
    with ``seed + 2``, ``step(ops, master, x, y) -> (loss, correct)`` a batch, then
    ``test(eval_ops or ops, master, x_test, y_test)``; a progress bar (``desc``) with
    ``progress``. Returns the history (a dict a epoch, :func:`train`)."""
    from tqdm import tqdm
    xtr, ytr, xte, yte = data
    rng = np.random.default_rng(seed + 2)
    steps = len(xtr) // batch
    history = []
    with tqdm(total=epochs * steps, disable=not progress, unit="step", desc=desc) as bar:
        for epoch in range(epochs):
            order = rng.permutation(len(xtr))
            losses, right, c0 = [], 0, ops.cycles
            for i in range(steps):
                b = order[i * batch:(i + 1) * batch]
                loss, ok = step(ops, master, xtr[b], ytr[b])
                losses.append(loss)
                right += ok
                bar.update(1)
            history.append({"epoch": epoch + 1, "loss": float(np.mean(losses)),
                            "train_accuracy": right / (steps * batch),
                            "test_accuracy": test(eval_ops or ops, master, xte, yte),
                            "cycles": ops.cycles - c0})
            bar.set_postfix(test=f"{history[-1]['test_accuracy']:.3f}")
    return history


def cycles_per_step(config, history, *, measured, batch, seed, host):
    """``(cycles a step, where they come from)``: the last epoch's measured BUSY_CYCLES a
    step (``measured``: the rtl backend), else the cycle model's step of the ``digits``
    network (:func:`bpsa.models.network_perf.network_step`); ``host`` names what runs on the
    host in the source text."""
    if measured:
        steps = len(load_digits_split(seed)[0]) // batch
        return history[-1]["cycles"] / steps, f"measured BUSY_CYCLES of every layer run{host}"
    from bpsa.models.network_perf import network_step
    from bpsa.spec.network import load_network
    return (network_step(config, load_network("digits"), batch=batch).totals["cycles"],
            f"the cycle model{host}")


def torch_reference(*, epochs=15, batch=32, lr_shift=2, seed=0):
    """The same network, initial weights (the master weights' values), data order and
    schedule in PyTorch float32; its test accuracy a epoch. Needs ``torch``."""
    import torch
    import torch.nn.functional as F
    torch.manual_seed(seed)
    xtr, ytr, xte, yte = load_digits_split(seed)
    to = lambda a: torch.tensor(a / 256.0, dtype=torch.float32)     # noqa: E731  Q8 -> real
    xtr_f, xte_f = to(xtr), to(xte)
    params = {k: torch.tensor(v / 2.0 ** MASTER_FRAC, dtype=torch.float32, requires_grad=True)
              for k, v in init_master(seed).items()}

    def net(x):
        a1 = F.max_pool2d(F.relu(F.conv2d(x, params["conv1"], padding=1)), 2)
        a2 = F.relu(F.conv2d(a1, params["conv2"], stride=2, padding=1))
        return F.conv2d(a2.mean(dim=(2, 3), keepdim=True), params["fc"])[:, :, 0, 0]

    opt = torch.optim.SGD(params.values(), lr=2.0 ** -lr_shift)
    rng = np.random.default_rng(seed + 2)
    steps = len(xtr) // batch
    history = []
    for epoch in range(epochs):
        order = rng.permutation(len(xtr))
        for i in range(steps):
            b = torch.tensor(order[i * batch:(i + 1) * batch])
            opt.zero_grad()
            F.cross_entropy(net(xtr_f[b]), torch.tensor(ytr)[b]).backward()
            opt.step()
        with torch.no_grad():
            acc = (net(xte_f).argmax(dim=1).numpy() == yte).mean()
        history.append({"epoch": epoch + 1, "test_accuracy": float(acc)})
    return history


@dataclass
class TrainingRun:
    """A training run (:func:`training_run`): the accelerator's ``history`` (:func:`train`),
    the PyTorch ``reference``'s (None when not run; ``reference_missing`` says why when
    ``torch`` is not installed), and the accelerator cycles a step of ``batch`` images
    (``cycles_source`` says where they come from)."""
    config: str
    backend: str
    epochs: int
    batch: int
    steps: int
    history: list
    reference: list | None
    reference_missing: str | None
    cycles_per_step: float
    cycles_source: str
    #: floating point: PyTorch under bf16 autocast (:func:`bpsa.host.digits_float.
    #: torch_reference`), beside the float32 ``reference``
    reference_bf16: list | None = None

    def summary(self):
        """The run as a JSON-ready dict: ``dataset``, ``backend``, ``config``, ``epochs``,
        ``batch``, ``test_accuracy``, ``reference_accuracy`` (None without a reference),
        ``cycles_per_step``, ``cycles_per_epoch``, ``cycles_source`` and ``history``."""
        ref = self.reference
        return {"dataset": "digits", "backend": self.backend, "config": self.config,
                "epochs": self.epochs, "batch": self.batch,
                "test_accuracy": self.history[-1]["test_accuracy"],
                "reference_accuracy": ref[-1]["test_accuracy"] if ref else None,
                "cycles_per_step": round(self.cycles_per_step),
                "cycles_per_epoch": round(self.cycles_per_step * self.steps),
                "cycles_source": self.cycles_source, "history": self.history,
                **({"reference_bf16_accuracy": self.reference_bf16[-1]["test_accuracy"]}
                   if self.reference_bf16 else {})}


def training_run(config, *, simulate=None, epochs=15, batch=32, lr_shift=2, seed=0,
                 reference=True, progress=False):
    """Train the digits CNN on ``config`` (:func:`train`) and return a :class:`TrainingRun`.

    ``simulate``: the ``rtl`` backend, a callable opening the simulated accelerator as a
    context manager (:func:`bpsa.simulate`); the layers run on it, the test accuracy in numpy
    (the same integers) and the cycles are its measured ``BUSY_CYCLES``. None: the ``model``
    backend (:class:`ModelOps`), the cycles from the cycle model
    (:func:`bpsa.models.network_perf.network_step` of the ``digits`` network). ``reference``:
    also :func:`torch_reference` when ``torch`` is installed. Raises ValueError for a
    configuration the training cannot use (:class:`ModelOps`)."""
    model_ops = ModelOps(config)
    kw = dict(epochs=epochs, batch=batch, lr_shift=lr_shift, seed=seed)
    if simulate is not None:
        with simulate(config) as acc:
            ops = AcceleratorOps(acc, config)
            _, history = train(ops, progress=progress, eval_ops=model_ops, **kw)
    else:
        _, history = train(model_ops, progress=progress, **kw)
    steps = len(load_digits_split(seed)[0]) // batch
    per_step, source = cycles_per_step(config, history, measured=simulate is not None,
                                       batch=batch, seed=seed,
                                       host="" if simulate is not None
                                       else " (convolutions, FC and pooling)")
    ref, missing = None, None
    if reference:
        try:
            import torch  # noqa: F401
        except ImportError:
            missing = "torch is not installed"
        else:
            ref = torch_reference(**kw)
    return TrainingRun(config=config.name, backend="model" if simulate is None else "rtl",
                       epochs=epochs, batch=batch, steps=steps, history=history,
                       reference=ref, reference_missing=missing, cycles_per_step=per_step,
                       cycles_source=source)
