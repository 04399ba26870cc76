"""PyTorch in and out (needs the ``torch`` extra: ``pip install backprop-systolic[torch]``).

- :func:`offload` (``bpsa.torch.offload(model, config=..., backend=...)``, from
  :mod:`bpsa.torch.offloading`): a copy of a model whose layers run forward and backward on
  the accelerator (autograd functions calling the golden model or the simulated RTL); the
  model itself is not changed.
- :func:`bpsa.torch.trace.trace`: the layers of an ``nn.Module`` the accelerator runs, as a
  :class:`bpsa.spec.network.Network` (the rows of a network file), and every other operation
  as a host operation with its element count (``bpsa perf --model``).
- :mod:`bpsa.torch.models`: the digits CNN of ``bpsa train`` as an ``nn.Module``.

Importing this package does not import PyTorch; :func:`offload` does, on first use.
"""

__all__ = ["offload"]


def __getattr__(name):
    # offload from bpsa.torch.offloading, imported (with torch) when first asked for
    if name == "offload":
        from bpsa.torch.offloading import offload
        return offload
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
