"""``bpsa train --model``: any network of supported layers trained through the accelerator
(:func:`bpsa.torch.offload`), with an optimizer from ``torch.optim`` and a PyTorch
``Dataset``, next to the same model trained in plain PyTorch float32 (the same initial weights
and batch order).

Datasets: ``"digits"`` (scikit-learn's 8 x 8 digits, the split of :mod:`bpsa.host.digits`,
images ``pixel / 16`` as float32 1 x 8 x 8) or ``PKG.MODULE:FACTORY`` returning ``(train,
test)`` datasets of ``(image, label)`` pairs.
"""

import copy
import importlib

import numpy as np
import torch

from bpsa.torch.offloading import offload

__all__ = ["OPTIMIZERS", "digits_datasets", "load_datasets", "train", "train_float"]

#: ``--optimizer`` names.
OPTIMIZERS = {"sgd": torch.optim.SGD, "adam": torch.optim.Adam}


def digits_datasets(seed=0):
    """``(train, test)`` ``TensorDataset``s of the digits split (:func:`bpsa.host.digits.
    load_digits_split`): float32 images ``pixel / 16``, int64 labels."""
    from torch.utils.data import TensorDataset

    from bpsa.host.digits import load_digits_split
    xtr, ytr, xte, yte = load_digits_split(seed)
    img = (lambda x: torch.tensor(np.asarray(x) / 256.0, dtype=torch.float32))
    return (TensorDataset(img(xtr), torch.tensor(ytr)),
            TensorDataset(img(xte), torch.tensor(yte)))


def load_datasets(spec, seed=0):
    """The ``(train, test)`` datasets named by ``spec`` (module docstring); :exc:`ValueError`
    in one line when a factory path does not import or gives something else."""
    if spec == "digits":
        return digits_datasets(seed)
    module_name, sep, attr = str(spec).partition(":")
    if not sep:
        raise ValueError(f"--dataset {spec!r}: give digits or PKG.MODULE:FACTORY")
    try:
        factory = getattr(importlib.import_module(module_name), attr)
    except Exception as e:          # any import failure is the user's path: one line
        raise ValueError(f"--dataset {spec!r}: cannot import it ({type(e).__name__}: {e})") \
            from None
    out = factory()
    if not (isinstance(out, tuple) and len(out) == 2):
        raise ValueError(f"--dataset {spec!r}: {attr}() must return (train, test) datasets")
    return out


def _evaluate(model, data, batch):
    from torch.utils.data import DataLoader
    right = 0
    with torch.no_grad():
        for x, y in DataLoader(data, batch_size=batch):
            right += int((model(x).argmax(dim=1) == y).sum())
    return right / len(data)


def _epochs(model, params, train_set, test_set, *, epochs, batch, lr, optimizer, seed,
            progress, desc, calls=None):
    """The training loop both runs share; the history (a dict a epoch)."""
    from torch.utils.data import DataLoader
    from tqdm import tqdm
    opt = OPTIMIZERS[optimizer](params, lr=lr)
    order = torch.Generator().manual_seed(seed + 2)
    loader = DataLoader(train_set, batch_size=batch, shuffle=True, generator=order,
                        drop_last=True)
    history = []
    with tqdm(total=epochs * len(loader), disable=not progress, unit="step", desc=desc) as bar:
        for epoch in range(epochs):
            model.train()
            losses, right, c0 = [], 0, len(calls) if calls is not None else 0
            for x, y in loader:
                opt.zero_grad()
                out = model(x)
                loss = torch.nn.functional.cross_entropy(out, y)
                loss.backward()
                opt.step()
                losses.append(float(loss.detach()))
                right += int((out.argmax(dim=1) == y).sum())
                bar.update(1)
            cycles = (sum(c.get("busy_cycles", 0) for c in calls[c0:])
                      if calls is not None else 0)
            model.eval()
            history.append({"epoch": epoch + 1, "loss": float(np.mean(losses)),
                            "train_accuracy": right / (len(loader) * batch),
                            "test_accuracy": _evaluate(model, test_set, 256),
                            "train_cycles": cycles})
            bar.set_postfix(test=f"{history[-1]['test_accuracy']:.3f}")
    return history


def train_float(model, train_set, test_set, *, epochs=15, batch=32, lr=0.25, optimizer="sgd",
                seed=0):
    """Train ``model`` in place in plain PyTorch float32 (the loop :func:`train` runs for its
    reference); the history (a dict a epoch)."""
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {', '.join(OPTIMIZERS)}, not {optimizer!r}")
    torch.manual_seed(seed)
    return _epochs(model, model.parameters(), train_set, test_set, epochs=epochs, batch=batch,
                   lr=lr, optimizer=optimizer, seed=seed, progress=False, desc="")


def train(model, train_set, test_set, *, config="small_bf16", backend="model", epochs=15,
          batch=32, lr=0.25, optimizer="sgd", seed=0, progress=False, reference=True,
          mx_scale_rule="floor"):
    """Train ``model`` through the accelerator and, with ``reference``, a copy of it (the same
    initial weights, the same batch order) in plain PyTorch float32. Returns a dict:
    ``history`` and ``reference`` (a dict a epoch: loss, train and test accuracy),
    ``cycles_per_step`` and where they come from (``rtl``: the training steps' measured
    BUSY_CYCLES in the last epoch, without the test passes; ``model``: the cycle model's
    training step of the traced network; ``None`` in MX, which has no cycle model yet),
    ``offloaded`` and ``kept`` layers, and ``model``:
    the trained :class:`bpsa.torch.offloading.OffloadedModel` (``model`` itself is not changed;
    its parameters are ``model.module``'s). ``mx_scale_rule``: :func:`offload`'s."""
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {', '.join(OPTIMIZERS)}, not {optimizer!r}")
    torch.manual_seed(seed)
    start = copy.deepcopy(model)
    off = offload(model, config, backend, mx_scale_rule=mx_scale_rule)
    history = _epochs(off, off.parameters(), train_set, test_set, epochs=epochs, batch=batch,
                      lr=lr, optimizer=optimizer, seed=seed, progress=progress,
                      desc=f"{type(model).__name__} ({backend}, {off.config.name})",
                      calls=off.calls)
    ref = None
    if reference:
        ref = _epochs(start, start.parameters(), train_set, test_set, epochs=epochs,
                      batch=batch, lr=lr, optimizer=optimizer, seed=seed, progress=progress,
                      desc=f"{type(model).__name__} (PyTorch float32)")
    steps = len(train_set) // batch
    if backend == "rtl":
        cycles, source = history[-1]["train_cycles"] / steps, "measured BUSY_CYCLES"
    else:
        from bpsa.models.network_perf import network_step
        from bpsa.torch.trace import trace
        shape = (batch, *tuple(train_set[0][0].shape))
        net = trace(start if reference else model, shape).network
        cycles = network_step(off.config, net, batch=batch).totals["cycles"]
        source = "the cycle model's training step of the traced network"
    if backend == "rtl":
        off.close()
    return {"history": history, "reference": ref,
            "cycles_per_step": None if cycles is None else int(cycles),
            "cycles_source": source, "offloaded": off.offloaded, "kept": dict(off.kept),
            "config": off.config.name, "backend": backend, "model": off}
