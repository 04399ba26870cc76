"""PyTorch in and out (needs the ``torch`` extra: ``pip install backprop-systolic[torch]``).

- :func:`bpsa.torch.trace.trace`: the layers of an ``nn.Module`` the accelerator runs, as a
  :class:`bpsa.spec.network.Network` (the rows of a network file), and every other operation
  as a host operation with its element count (``bpsa perf --model``).
- :func:`bpsa.torch.offload.offload`: a model whose layers run forward and backward on the
  accelerator (autograd functions calling the golden model or the simulated RTL).
- :mod:`bpsa.torch.models`: the digits CNN of ``bpsa train`` as an ``nn.Module``.
"""
