"""Measured zero fractions: in one PyTorch training step of a model, the share of each
convolution's and linear layer's MACs, per phase, that have a zero operand (the MACs zero
gating skips; :mod:`bpsa.models.energy` prices the rest).

A phase's MACs are the layer's ``N K OH OW (C / groups) R S`` (the cycle model's ``macs``);
a MAC fires when both of its operands are nonzero:

- forward: ``X[n, c, oh s + r d - p, ow s + q d - p] W[k, c, r, q]`` (a padding element is
  zero);
- loss: ``dY[n, k, oh, ow] W[k, c, r, q]`` for the taps whose X element lies inside X (the
  zero-free walkers issue no other; dY is not zero-spaced: the inserted zeros of the
  traditional flow are not MACs here);
- gradient: ``dY[n, k, oh, ow] X[...]`` as in the forward.

The counts are the sums of the same convolutions over the operands' nonzero masks (0 / 1 in
float64: exact), where dY is the gradient of the loss at the layer's output. The values are
PyTorch's float32: a value the hardware's arithmetic rounds to zero is counted as nonzero,
so the fractions are lower bounds for integer configurations.
"""

from math import prod

__all__ = ["zero_fractions"]


def _conv_pairs(module, x, dy):
    """Nonzero operand pairs of a ``Conv2d``'s forward, loss and gradient."""
    import torch
    from torch.nn import grad
    mx, mw, mdy = ((t != 0).double() for t in (x, module.weight.detach(), dy))
    kw = {"stride": module.stride, "padding": module.padding, "dilation": module.dilation,
          "groups": module.groups}
    with torch.no_grad():
        fwd = torch.nn.functional.conv2d(mx, mw, **kw).sum()
        loss = grad.conv2d_input(tuple(x.shape), mw, mdy, **kw).sum()
        gradient = grad.conv2d_weight(mx, tuple(mw.shape), mdy, **kw).sum()
    n, _, oh, ow = dy.shape
    return prod((n, oh, ow, *mw.shape)), (fwd, loss, gradient)


def _linear_pairs(module, x, dy):
    """Nonzero operand pairs of a ``Linear``'s forward, loss and gradient."""
    mx, mw, mdy = ((t != 0).double() for t in (x, module.weight.detach(), dy))
    return x.shape[0] * prod(mw.shape), ((mx @ mw.T).sum(), (mdy @ mw).sum(),
                                         (mdy.T @ mx).sum())


def zero_fractions(model, images, labels, loss_fn=None):
    """``{module name: {"forward", "loss", "gradient": fraction}}`` of ``model``'s
    ``Conv2d`` and ``Linear`` modules in one training step on ``images`` and ``labels`` (the
    cross entropy unless ``loss_fn(output, labels)`` is given; the model's parameters and
    their gradients are left as they were). A layer the step does not reach is left out;
    :exc:`ValueError` for a module whose input is not one tensor of the expected rank."""
    import torch
    from torch import nn
    loss_fn = loss_fn or nn.functional.cross_entropy
    seen, hooks = {}, []

    def keep(name):
        def forward_hook(module, args, output):
            if len(args) != 1 or args[0].dim() != (4 if isinstance(module, nn.Conv2d) else 2):
                raise ValueError(f"{name}: expected one input tensor of rank "
                                 f"{4 if isinstance(module, nn.Conv2d) else 2}")
            seen.setdefault(name, {})["x"] = args[0].detach()
            output.register_hook(lambda g: seen[name].__setitem__("dy", g.detach()))
        return forward_hook
    for name, module in model.named_modules():
        if isinstance(module, (nn.Conv2d, nn.Linear)):
            hooks.append(module.register_forward_hook(keep(name)))
    saved = [p.grad for p in model.parameters()]
    try:
        with torch.enable_grad():
            loss_fn(model(images), labels).backward()
    finally:
        for h in hooks:
            h.remove()
        for p, g in zip(model.parameters(), saved):
            p.grad = g
    out = {}
    modules = dict(model.named_modules())
    for name, t in seen.items():
        if "dy" not in t:
            continue
        module = modules[name]
        pairs = _conv_pairs if isinstance(module, nn.Conv2d) else _linear_pairs
        macs, fired = pairs(module, t["x"], t["dy"])
        out[name] = {phase: 1 - float(f) / macs
                     for phase, f in zip(("forward", "loss", "gradient"), fired)}
    return out
