"""Which ReLUs the accelerator fuses: one rule for the cycle model's trace
(:mod:`bpsa.torch.trace`, ``bpsa perf --model``) and the offload (:mod:`bpsa.torch.offloading`),
so both count the same runs.

A ReLU (a call of an ``nn.ReLU`` module) runs on the accelerator only where the hardware fuses
it (the layer descriptor's RELU, :mod:`bpsa.spec.regmap`):

- its forward into the store of the layer that produces its input, when that layer runs on the
  accelerator, only the ReLU reads its output, and it is a convolution or a linear layer without
  a bias (PyTorch adds a bias after the accelerator's output) or a pooling;
- its backward (the mask: dY where the ReLU's output is positive) into the backward of the
  max pooling that reads its output, when that pooling runs on the accelerator and only it
  reads the ReLU's output (the pooling backward's RELU zeroes dX where the pooling's input is
  not positive; a max pooling's backward reads that input anyway, an average's would read it
  only for the mask, so an average pooling leaves the mask to the host).

The part that is not fused runs on the host: a pass over a tensor there costs less than a
round trip through the DMA and the pooling unit. A module called in several places is one
module in the offload, so a ReLU is fused only where every call of it is, and a layer stores
with RELU (or a pooling masks its backward) only when every call of it feeds (or reads) a
fused ReLU.
"""

from dataclasses import dataclass

__all__ = ["FORWARD_NOT_FUSED", "Fusion", "MASK_NOT_FUSED", "relu_fusion"]

#: Why a ReLU's forward, or its mask, stays on the host (the trace's host operations, the
#: offload's ``kept``).
FORWARD_NOT_FUSED = ("its input is not the output of a convolution or linear layer without a "
                     "bias, or of a pooling, that only it reads")
MASK_NOT_FUSED = "the backward's mask: no max pooling on the accelerator alone reads its output"


@dataclass(frozen=True)
class Fusion:
    """The rule's answer for a traced graph: ``relus`` maps each ReLU module's target to
    ``(forward, backward)``, whether each part is fused; ``stores``: the targets of the
    layers that store with RELU; ``masks``: the targets of the max poolings whose backward
    masks."""
    relus: dict
    stores: frozenset
    masks: frozenset


def _kinds():
    from torch import nn
    pools = (nn.MaxPool2d, nn.AvgPool2d, nn.AdaptiveAvgPool2d, nn.AdaptiveMaxPool2d)
    return nn.ReLU, (nn.Conv2d, nn.Linear), pools, (nn.MaxPool2d, nn.AdaptiveMaxPool2d)


def relu_fusion(gm, runs):
    """The :class:`Fusion` of ``gm`` (a ``torch.fx.GraphModule``); ``runs(node)``: whether the
    accelerator runs that ``call_module`` node's layer (the caller's own criteria)."""
    relu_t, weighted, pools, max_pools = _kinds()
    calls = {}
    for node in gm.graph.nodes:
        if node.op == "call_module":
            calls.setdefault(node.target, []).append(node)
    kind = {t: type(gm.get_submodule(t)) for t in calls}
    relus = [t for t in calls if issubclass(kind[t], relu_t)]

    def producer(node):
        p = node.args[0] if node.args else None
        if getattr(p, "op", None) != "call_module" or len(p.users) != 1 or not runs(p):
            return None
        mod = gm.get_submodule(p.target)
        if isinstance(mod, pools) or (isinstance(mod, weighted) and mod.bias is None):
            return p
        return None

    def consumer(node):
        users = list(node.users)
        u = users[0] if len(users) == 1 else None
        if getattr(u, "op", None) == "call_module" and issubclass(kind[u.target], max_pools) \
                and u.args[0] is node and runs(u):
            return u
        return None

    fwd = {t: all(producer(n) is not None for n in calls[t]) for t in relus}
    bwd = {t: all(consumer(n) is not None for n in calls[t]) for t in relus}
    changed = True
    while changed:                  # every call of a storing layer or masking pooling agrees
        changed = False
        fused_fwd = {n for t in relus if fwd[t] for n in calls[t]}
        fused_bwd = {n for t in relus if bwd[t] for n in calls[t]}
        for t in relus:
            if fwd[t] and not all(len(p.users) == 1 and next(iter(p.users)) in fused_fwd
                                  for n in calls[t] for p in calls[producer(n).target]):
                fwd[t], changed = False, True
            if bwd[t] and not all(q.args[0] in fused_bwd
                                  for n in calls[t] for q in calls[consumer(n).target]):
                bwd[t], changed = False, True
    stores = frozenset(producer(n).target for t in relus if fwd[t] for n in calls[t])
    masks = frozenset(consumer(n).target for t in relus if bwd[t] for n in calls[t])
    return Fusion({t: (fwd[t], bwd[t]) for t in relus}, stores, masks)
