"""The layers of a PyTorch model, as the accelerator sees them (``bpsa perf --model``).

:func:`trace` runs ``torch.fx.symbolic_trace`` and shape propagation on an example input and
walks the graph in execution order:

- ``nn.Conv2d`` (one group, zero padding, square stride, padding and dilation): a ``conv`` row;
  its bias is a host operation (the array adds none);
- ``nn.Linear`` on a flat input: an ``fc`` row (its bias a host operation);
- ``nn.MaxPool2d`` / ``nn.AvgPool2d`` (``F.max_pool2d`` / ``F.avg_pool2d``; dilation 1, square
  stride and padding, padding counted in the average, ``ceil_mode`` only where it changes
  nothing): ``max_pool`` / ``avg_pool`` rows; ``nn.AdaptiveAvgPool2d`` / ``mean`` over the
  plane to 1 x 1: ``global_avg_pool``; an adaptive pooling to its input's size: nothing to
  run (listed as a host operation of no elements), to a divisor of it: a pooling row;
- ``nn.ReLU``: where the accelerator fuses it (:mod:`bpsa.torch.fusion`, the offload's rule),
  in :attr:`Traced.relus` (its forward on the store path of the layer before it; its mask,
  when also fused, in the backward of the max pooling after it); the parts not fused are host
  operations (``relu``: the forward, ``relu_mask``: the backward's mask); ``F.relu`` /
  ``relu``: a host operation (the offload replaces modules);
- grouped and depthwise convolutions are ``conv`` rows with their ``groups`` (the accelerator
  runs a group at a time);
- everything else (batch norm, residual additions, concatenation, flatten, dropout, softmax,
  ...): :attr:`Traced.host_ops`, each with the elements
  it produces for one image, never dropped.

Rows are per image (the batch is the caller's), named by the module's path in the model
(``layer1.0.conv1``) or, for a function, by the graph node's name.
"""

import operator
from dataclasses import dataclass

from bpsa.spec.network import Network, network_from_rows
from bpsa.torch.fusion import FORWARD_NOT_FUSED, MASK_NOT_FUSED, relu_fusion

__all__ = ["HostOp", "Traced", "load_factory", "parse_input", "trace"]


@dataclass(frozen=True)
class HostOp:
    """An operation that stays on the host: its name, kind, the elements it produces for one
    image, and why it is not the accelerator's."""
    name: str
    op: str
    elements: int
    reason: str


@dataclass(frozen=True)
class Traced:
    """A traced model: :attr:`network` (the accelerator's layers), :attr:`relus` (``(name,
    elements)`` of the ReLUs whose forward is on the store path), :attr:`host_ops`, and the
    example input's shape."""
    network: Network
    relus: tuple
    host_ops: tuple
    input_shape: tuple


def parse_input(text):
    """``"N,C,H,W"`` as four positive integers; :exc:`ValueError` naming what is wrong."""
    try:
        dims = tuple(int(v) for v in str(text).split(","))
    except ValueError:
        raise ValueError(f"--input {text!r}: give N,C,H,W as four integers") from None
    if len(dims) != 4 or min(dims) < 1:
        raise ValueError(f"--input {text!r}: give N,C,H,W as four positive integers")
    return dims


def load_factory(path):
    """The ``nn.Module`` made by ``PKG.MODULE:FACTORY`` (called with no arguments: for
    torchvision's models, ``weights=None``). :exc:`ValueError` with one line when the module
    does not import, has no such factory, or it does not return a module."""
    import importlib

    import torch
    module_name, sep, attr = str(path).partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"--model {path!r}: give PKG.MODULE:FACTORY, e.g. "
                         f"torchvision.models:resnet50")
    try:
        module = importlib.import_module(module_name)
    except Exception as e:          # any import failure is the user's path: one line
        raise ValueError(f"--model {path!r}: cannot import {module_name!r} "
                         f"({type(e).__name__}: {e})") from None
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise ValueError(f"--model {path!r}: {module_name!r} has no factory {attr!r}")
    model = factory()
    if not isinstance(model, torch.nn.Module):
        raise ValueError(f"--model {path!r}: {attr}() returned a {type(model).__name__}, "
                         f"not a torch.nn.Module")
    return model


def _pair(v):
    return tuple(v) if isinstance(v, (tuple, list)) else (v, v)


def _square(name, **values):
    """The common value of each pair in ``values``, or the reason it is not square."""
    out = {}
    for key, v in values.items():
        a, b = _pair(v)
        if a != b:
            return None, f"{key} {a} x {b} is not square (network rows take one value)"
        out[key] = a
    return out, None


#: The functional poolings' parameters after the input, in order.
_POOL_ARGS = {"max": ("kernel_size", "stride", "padding", "dilation", "ceil_mode",
                      "return_indices"),
              "avg": ("kernel_size", "stride", "padding", "ceil_mode", "count_include_pad",
                      "divisor_override")}


class _Walker:
    def __init__(self, gm, batch):
        self.gm, self.batch = gm, batch
        self.rows, self.relus, self.host = [], [], []
        self.row_nodes = set()          # the nodes the accelerator runs (a row each)

    def elements(self, node):
        meta = node.meta.get("tensor_meta")
        if meta is None or not hasattr(meta, "shape"):
            return 0
        n = 1
        for d in meta.shape:
            n *= int(d)
        return n // self.batch

    @staticmethod
    def shape(node):
        return tuple(int(d) for d in node.meta["tensor_meta"].shape)

    def host_op(self, node, name, op, reason):
        self.host.append(HostOp(name, op, self.elements(node), reason))

    def row(self, name, op, c, h, w, k, r, s, stride=1, pad=0, dilation=1, groups=1):
        self.rows.append({"layer": name, "op": op, "C": c, "H": h, "W": w,
                          "K": "" if op.endswith("pool") else k, "R": r, "S": s,
                          "stride": stride, "pad": pad, "dilation": dilation,
                          "groups": groups})

    # --- modules and functions ---------------------------------------------------------------
    def conv(self, node, name, mod):
        _, c, h, w = self.shape(node.args[0])
        sq, why = _square(name, stride=mod.stride, padding=mod.padding,
                          dilation=mod.dilation)
        if isinstance(mod.padding, str):
            why = f"padding {mod.padding!r} (give the padding in elements)"
        elif mod.padding_mode != "zeros":
            why = f"padding_mode {mod.padding_mode!r} (the accelerator pads with zeros)"
        if why:
            return self.host_op(node, name, "conv", why)
        r, s = _pair(mod.kernel_size)
        self.row(name, "conv", c, h, w, mod.out_channels, r, s, sq["stride"], sq["padding"],
                 sq["dilation"], mod.groups)
        if mod.bias is not None:
            self.host_op(node, f"{name}.bias", "bias", "the array adds no bias")

    def linear(self, node, name, mod):
        shape = self.shape(node.args[0])
        if len(shape) != 2:
            return self.host_op(node, name, "linear", f"input of shape {shape} is not "
                                                      f"N x features")
        self.row(name, "fc", mod.in_features, 1, 1, mod.out_features, 1, 1)
        if mod.bias is not None:
            self.host_op(node, f"{name}.bias", "bias", "the array adds no bias")

    def pool(self, node, name, kind, kernel, stride, padding, dilation=1, ceil_mode=False,
             count_include_pad=True, divisor_override=None):
        _, c, h, w = self.shape(node.args[0])
        stride = kernel if stride is None or stride == [] else stride
        sq, why = _square(name, stride=stride, padding=padding, dilation=dilation)
        r, s = _pair(kernel)
        if why is None and sq["dilation"] != 1:
            why = f"dilation {sq['dilation']} (the pooling unit's windows are dense)"
        if why is None and kind == "avg" and (not count_include_pad or divisor_override):
            why = "the pooling unit divides by the whole window (count_include_pad, no divisor)"
        if why is None and ceil_mode:
            out = self.shape(node)[2:]
            floor = ((h + 2 * sq["padding"] - r) // sq["stride"] + 1,
                     (w + 2 * sq["padding"] - s) // sq["stride"] + 1)
            if tuple(out) != floor:
                why = "ceil_mode adds a partial window (the pooling unit's are whole)"
        if why:
            return self.host_op(node, name, f"{kind}_pool", why)
        self.row(name, f"{kind}_pool", c, h, w, c, r, s, sq["stride"], sq["padding"])

    def adaptive(self, node, name, kind):
        _, c, h, w = self.shape(node.args[0])
        oh, ow = self.shape(node)[2:]
        if (oh, ow) == (h, w):
            return self.host_op(node, name, f"adaptive_{kind}_pool",
                                "its output is its input at this size: nothing to run")
        if kind == "avg" and (oh, ow) == (1, 1):
            return self.row(name, "global_avg_pool", c, h, w, c, h, w)
        if h % oh or w % ow or h // oh != w // ow:
            return self.host_op(node, name, f"adaptive_{kind}_pool",
                                f"{h} x {w} to {oh} x {ow}: windows of unequal sizes")
        self.row(name, f"{kind}_pool", c, h, w, c, h // oh, w // ow, h // oh, 0)

    def walk(self):
        """Every node in execution order: a row, a host operation, or (an ``nn.ReLU``'s
        call) a place in :attr:`host` that :meth:`place_relus` fills."""
        for node in self.gm.graph.nodes:
            if node.op in ("placeholder", "output", "get_attr"):
                continue
            before = len(self.rows)
            name = node.target if node.op == "call_module" else node.name
            if node.op == "call_module":
                self.module(node, name, self.gm.get_submodule(node.target))
            else:
                self.function(node, name)
            if len(self.rows) > before:
                self.row_nodes.add(node)

    def module(self, node, name, mod):
        from torch import nn
        if isinstance(mod, nn.Conv2d):
            self.conv(node, name, mod)
        elif isinstance(mod, nn.Linear):
            self.linear(node, name, mod)
        elif isinstance(mod, (nn.MaxPool2d, nn.AvgPool2d)):
            kind = "max" if isinstance(mod, nn.MaxPool2d) else "avg"
            extra = ({"dilation": mod.dilation} if kind == "max" else
                     {"count_include_pad": mod.count_include_pad,
                      "divisor_override": mod.divisor_override})
            self.pool(node, name, kind, mod.kernel_size, mod.stride, mod.padding,
                      ceil_mode=mod.ceil_mode, **extra)
        elif isinstance(mod, (nn.AdaptiveAvgPool2d, nn.AdaptiveMaxPool2d)):
            self.adaptive(node, name, "avg" if isinstance(mod, nn.AdaptiveAvgPool2d)
                          else "max")
        elif isinstance(mod, nn.ReLU):
            self.host.append((node, name))
        else:
            self.host_op(node, name, type(mod).__name__, "not a layer the accelerator runs")

    def function(self, node, name):
        import torch
        import torch.nn.functional as F
        pools = {F.max_pool2d: "max", F.avg_pool2d: "avg"}
        call = node.op == "call_function"
        if call and node.target in pools:
            kind = pools[node.target]
            kw = dict(zip(_POOL_ARGS[kind], node.args[1:]), **node.kwargs)
            if kw.pop("return_indices", False):
                return self.host_op(node, name, f"{kind}_pool", "return_indices (host)")
            self.pool(node, name, kind, kw.pop("kernel_size"), kw.pop("stride", None),
                      kw.pop("padding", 0), **kw)
        elif call and node.target is F.adaptive_avg_pool2d:
            self.adaptive(node, name, "avg")
        elif (call and node.target in (F.relu, torch.relu, torch.relu_)) or \
                (node.op == "call_method" and node.target in ("relu", "relu_")):
            self.host_op(node, name, "relu", "a functional ReLU (the offload fuses nn.ReLU "
                                             "modules)")
        elif node.op == "call_method" and node.target == "mean" and self._plane_mean(node):
            _, c, h, w = self.shape(node.args[0])
            self.row(name, "global_avg_pool", c, h, w, c, h, w)
        elif call and node.target in (operator.add, operator.iadd, torch.add):
            self.host_op(node, name, "add", "a residual addition (host)")
        elif call and node.target is torch.cat:
            self.host_op(node, name, "concat", "a concatenation (host)")
        else:
            what = getattr(node.target, "__name__", str(node.target))
            self.host_op(node, name, what, "not a layer the accelerator runs")

    def place_relus(self):
        """Each ``nn.ReLU`` call as :func:`bpsa.torch.fusion.relu_fusion` fuses it: in
        :attr:`relus` when its forward is on the store path, host operations for what is
        not fused, in place."""
        fusion = relu_fusion(self.gm, lambda n: n in self.row_nodes)
        host = []
        for h in self.host:
            if isinstance(h, HostOp):
                host.append(h)
                continue
            node, name = h
            fwd, bwd = fusion.relus[node.target]
            if fwd:
                self.relus.append((name, self.elements(node)))
            else:
                host.append(HostOp(name, "relu", self.elements(node), FORWARD_NOT_FUSED))
            if not bwd:
                host.append(HostOp(f"{name}.mask", "relu_mask", self.elements(node),
                                   MASK_NOT_FUSED))
        self.host = host

    def _plane_mean(self, node):
        """``x.mean((2, 3), keepdim=True)`` (or ``(-2, -1)``) of an N x C x H x W tensor."""
        dims = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim")
        shape = self.shape(node.args[0])
        if len(shape) != 4 or dims is None:
            return False
        dims = tuple(d % 4 for d in _pair(dims)) if not isinstance(dims, int) else (dims % 4,)
        return sorted(dims) == [2, 3]


def trace(model, example_input, name=None):
    """:class:`Traced` of ``model`` (an ``nn.Module``) run on ``example_input`` (a tensor
    ``N x C x H x W``, or its shape). The model is traced in eval mode, without gradients;
    its mode is restored. ``name``: the network's (default: the model's class name).
    :exc:`ValueError` when ``torch.fx`` cannot trace the model (data-dependent control flow)
    or a row is malformed."""
    import torch
    from torch.fx.passes.shape_prop import ShapeProp
    if not isinstance(example_input, torch.Tensor):
        example_input = torch.zeros(tuple(example_input))
    try:
        gm = torch.fx.symbolic_trace(model)
    except Exception as e:          # fx's errors are many kinds: one line
        raise ValueError(f"torch.fx cannot trace {type(model).__name__} "
                         f"({type(e).__name__}: {e})") from None
    was_training = model.training
    gm.eval()
    try:
        with torch.no_grad():
            ShapeProp(gm).propagate(example_input)
    finally:
        gm.train(was_training)
    walker = _Walker(gm, int(example_input.shape[0]))
    walker.walk()
    walker.place_relus()
    net_name = name or type(model).__name__
    network = network_from_rows(net_name, f"torch:{net_name}", walker.rows)
    return Traced(network, tuple(walker.relus), tuple(walker.host), tuple(example_input.shape))
