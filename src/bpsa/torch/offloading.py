"""PyTorch out: a model's layers run forward and backward on the accelerator
(:func:`offload`, also ``bpsa.torch.offload``).

``offload(model, config=..., backend=...)`` returns a copy of ``model`` (the model itself and
its weights do not change) whose ``nn.Conv2d``,
``nn.Linear``, ``nn.MaxPool2d``, ``nn.AvgPool2d``, ``nn.AdaptiveAvgPool2d(1)`` and ``nn.ReLU``
are autograd functions calling the accelerator: the convolution's forward, its loss (dX) and
its weight gradient (dW) on the array (a linear layer as a 1 x 1 convolution), the poolings
on the pooling unit, and each ReLU where the hardware fuses it (:mod:`bpsa.torch.fusion`, the
rule the cycle model's trace follows): its forward into the store of the layer before it (the
descriptor's RELU), its mask into the backward of the max pooling after it; what is not fused
runs in PyTorch (found with ``torch.fx``: a model it cannot trace fuses no ReLU). Biases are
added, and their gradients summed, by PyTorch; everything else (batch norm, residual
additions, softmax, the loss, the optimizer) stays in PyTorch. The parameters are the same
``nn.Parameter`` objects as the model's copy's, so any ``torch.optim`` optimizer updates
them.

Arithmetic: a floating-point configuration (``arithmetic`` bf16 or fp16,
``docs/architecture/floating_point.md``): float32 tensors in, rounded to the operand format by the
contract, float32 out (the convolutions' Y, dX and dW as fp32 sums; a pooling's output in
the operand format). An MX configuration (``mxint8``, ``mxfp8_e4m3``,
``docs/architecture/mx.md``): each phase's operands quantized in 32-element blocks along its
reduction axis (the scale rule ``mx_scale_rule``), fp32 sums out (:class:`MxModel`); the
poolings and ReLUs stay in PyTorch (the pooling unit is not built in MX). An integer
configuration: :class:`QuantizedBackend`'s per-tensor power-of-two scaling around the integer
accelerator (``docs/guides/pytorch.md``).

Backends: ``"model"`` (the bit-exact golden model: :class:`bpsa.host.digits_float.
FloatModelOps`, :mod:`bpsa.models.float_layers` and :mod:`bpsa.models.float_pool` with the
driver's tiling; :class:`MxModel` for MX; :class:`IntegerModel` for integers), ``"rtl"`` (the simulated
accelerator, :func:`bpsa.simulate`), or any object with the methods of
:class:`bpsa.sim.native.SimulatedAccelerator` (a board's). Every call's counters go to
:attr:`OffloadedModel.calls` (``rtl``: the hardware's cycles and DMA bytes).
"""

import copy
import warnings

import numpy as np
import torch
from torch import nn

from bpsa.config import load_config
from bpsa.host.digits_float import FloatModelOps
from bpsa.torch.fusion import FORWARD_NOT_FUSED, MASK_NOT_FUSED, relu_fusion
from bpsa.plan.groups import block_weights, packing, packs
from bpsa.spec.layer import ConvLayer

__all__ = ["IntegerModel", "MxModel", "OffloadedModel", "QuantizedBackend", "offload"]


def _pair(v):
    return tuple(v) if isinstance(v, (tuple, list)) else (v, v)


class IntegerModel:
    """An integer configuration's accelerator in the golden model (:mod:`bpsa.models.golden`):
    integer tensors in, the hardware's integers out (accumulators wrapped to ``acc_width``;
    a pooling forward's results as operands), the methods of
    :class:`bpsa.sim.native.SimulatedAccelerator`."""

    def __init__(self, config):
        self.config = config
        self.counters = {}

    def _acc(self, v):
        from bpsa.spec.numeric import wrap_array
        return wrap_array(v, self.config.acc_width)

    def forward(self, x, w, stride=1, padding=0, dilation=1, relu=False):
        from bpsa.models import golden
        y = self._acc(golden.conv2d(x, w, stride, padding, dilation))
        return np.maximum(y, 0) if relu else y

    def loss(self, dy, w, input_hw, stride=1, padding=0, dilation=1):
        from bpsa.models import golden
        return self._acc(golden.conv2d_input_grad(dy, w, tuple(input_hw), stride, padding,
                                                  dilation))

    def gradient(self, x, dy, kernel_hw, stride=1, padding=0, dilation=1):
        from bpsa.models import golden
        return self._acc(golden.conv2d_weight_grad(x, dy, tuple(kernel_hw), stride, padding,
                                                   dilation))

    def pool(self, x, kind, kernel=None, stride=None, padding=0, relu=False):
        from bpsa.models import golden
        y = golden.pool2d(x, kind, kernel, stride, padding)
        return np.maximum(y, 0) if relu else y

    def pool_backward(self, dy, x, kind, kernel=None, stride=None, padding=0, relu=False):
        from bpsa.models import golden
        dx = self._acc(golden.pool2d_backward(dy, x, kind, kernel, stride, padding))
        return dx * (np.asarray(x) > 0) if relu else dx


class MxModel:
    """An MX configuration's convolutions in the golden model of the MX contract, in the
    orders of the front ends that run them in MX: the channel-first order for the forward
    and the loss (:func:`bpsa.models.mx.conv_forward` and :func:`~bpsa.models.mx.conv_loss`
    with ``part = min(rows, 32)``) and the zero-free walker's for the gradient
    (:func:`~bpsa.models.mx.conv_gradient` with ``walker=True``): float32 tensors in,
    quantized per phase with the scale rule ``scale_rule`` (``"floor"``: OCP MX 6.3;
    ``"ceil"``: the scale rounded up), the fp32 sums out as float32: bit for bit what the
    accelerator's MX build computes (backend ``"rtl"``)."""

    def __init__(self, config, scale_rule="floor"):
        from bpsa.spec.numeric import MX_SCALE_RULES
        if not config.is_mx:
            raise ValueError(f"MxModel needs an MX configuration, not arithmetic "
                             f"{config.arithmetic!r}")
        if scale_rule not in MX_SCALE_RULES:
            raise ValueError(f"mx_scale_rule must be one of {', '.join(MX_SCALE_RULES)}, not "
                             f"{scale_rule!r}")
        self.config, self.scale_rule = config, scale_rule
        self.part = min(config.rows, 32)         # the channel-first front end's parts
        self.counters = {}

    @staticmethod
    def _f32(codes):
        return np.asarray(codes, dtype=np.uint32).view(np.float32)

    def forward(self, x, w, stride=1, padding=0, dilation=1):
        from bpsa.models import mx
        return self._f32(mx.conv_forward(x, w, self.config.arithmetic, stride, padding,
                                         dilation, scale_rule=self.scale_rule,
                                         part=self.part))

    def loss(self, dy, w, input_hw, stride=1, padding=0, dilation=1):
        from bpsa.models import mx
        return self._f32(mx.conv_loss(dy, w, self.config.arithmetic, tuple(input_hw), stride,
                                      padding, dilation, scale_rule=self.scale_rule,
                                      part=self.part))

    def gradient(self, x, dy, kernel_hw, stride=1, padding=0, dilation=1):
        from bpsa.models import mx
        return self._f32(mx.conv_gradient(x, dy, self.config.arithmetic, tuple(kernel_hw),
                                          stride, padding, dilation,
                                          scale_rule=self.scale_rule, walker=True))


class QuantizedBackend:
    """Float32 tensors through an integer accelerator (``inner``: :class:`IntegerModel`, a
    :class:`bpsa.sim.native.SimulatedAccelerator` or a board's), by a power-of-two scale a
    tensor: ``q = round(t 2**s)`` (halves to even) with the largest ``s`` that keeps ``|q| <=
    2**m - 1``, the result read back as ``acc 2**-(s_a + s_b)``. ``m`` leaves the
    accumulators their headroom: ``m = min(operand_width - 1, (acc_width - 2 - ceil(log2
    K)) // 2)`` for sums of ``K`` products (the forward's ``C R S``, the loss's ``K R S``, the
    gradient's ``N OH OW``), so no sum wraps; a pooling's operands take all ``operand_width -
    1`` bits (a maximum is exact; an average is the unit's rounded division). The max
    pooling's backward compares the quantized X (ties to the first)."""

    def __init__(self, config, inner):
        if not config.operand_signed:
            raise ValueError(f"offload's integer scaling needs signed operands; "
                             f"configuration {config.name!r} has unsigned ones")
        self.config, self.inner = config, inner

    @property
    def counters(self):
        return getattr(self.inner, "counters", {})

    def _bits(self, k):
        cfg = self.config
        return max(1, min(cfg.operand_width - 1,
                          (cfg.acc_width - 2 - int(np.ceil(np.log2(max(k, 1))))) // 2))

    @staticmethod
    def _q(t, bits):
        """``(q, s)`` of the float array ``t`` at ``bits`` magnitude bits."""
        t = np.asarray(t, dtype=np.float64)
        top = float(np.abs(t).max()) if t.size else 0.0
        if top == 0 or not np.isfinite(top):
            if not np.isfinite(top):
                raise ValueError("offload: a tensor holds an infinity or a NaN, which an "
                                 "integer configuration cannot scale")
            return np.zeros(t.shape, dtype=np.int64), 0
        s = int(np.floor(np.log2(((1 << bits) - 1) / top)))
        q = np.rint(t * 2.0 ** s)
        return np.clip(q, -((1 << bits) - 1), (1 << bits) - 1).astype(np.int64), s

    @staticmethod
    def _back(acc, s):
        return (np.asarray(acc, dtype=np.float64) * 2.0 ** -s).astype(np.float32)

    def forward(self, x, w, stride=1, padding=0, dilation=1, relu=False):
        b = self._bits(w.shape[1] * w.shape[2] * w.shape[3])
        (xq, sx), (wq, sw) = self._q(x, b), self._q(w, b)
        extra = {"relu": True} if relu else {}
        return self._back(self.inner.forward(xq, wq, stride, padding, dilation, **extra),
                          sx + sw)

    def loss(self, dy, w, input_hw, stride=1, padding=0, dilation=1):
        b = self._bits(w.shape[0] * w.shape[2] * w.shape[3])
        (dq, sd), (wq, sw) = self._q(dy, b), self._q(w, b)
        return self._back(self.inner.loss(dq, wq, tuple(input_hw), stride, padding,
                                          dilation), sd + sw)

    def gradient(self, x, dy, kernel_hw, stride=1, padding=0, dilation=1):
        b = self._bits(dy.shape[0] * dy.shape[2] * dy.shape[3])
        (xq, sx), (dq, sd) = self._q(x, b), self._q(dy, b)
        return self._back(self.inner.gradient(xq, dq, tuple(kernel_hw), stride, padding,
                                              dilation), sx + sd)

    def pool(self, x, kind, kernel=None, stride=None, padding=0, relu=False):
        xq, sx = self._q(x, self.config.operand_width - 1)
        return self._back(self.inner.pool(xq, kind, kernel, stride, padding, relu), sx)

    def pool_backward(self, dy, x, kind, kernel=None, stride=None, padding=0, relu=False):
        b = self.config.operand_width - 1
        (dq, sd), (xq, _) = self._q(dy, b), self._q(x, b)
        return self._back(self.inner.pool_backward(dq, xq, kind, kernel, stride, padding,
                                                   relu), sd)


class _Layer(nn.Module):
    """An offloaded layer: its ``name`` in the model and the :class:`OffloadedModel` whose
    backend runs it."""

    def __init__(self, name, owner):
        super().__init__()
        self.name = name
        self._owner = [owner]           # not a submodule

    def _run(self, phase, fn, *args, **kwargs):
        owner = self._owner[0]
        out = fn(*args, **kwargs)
        owner.calls.append({"layer": self.name, "phase": phase,
                            **dict(getattr(owner.backend, "counters", {}) or {})})
        return out


def _np(t):
    return t.detach().to(torch.float32).cpu().numpy()


class _ConvFn(torch.autograd.Function):
    """A convolution on the array; ``relu``: the ReLU after it fused into its store (the
    ReLU's mask is its own module's backward, or the pooling's after it)."""

    @staticmethod
    def forward(ctx, x, w, layer, geo, relu=False):
        ctx.save_for_backward(x, w)
        ctx.layer, ctx.geo = layer, geo
        be = layer._owner[0].backend
        extra = {"relu": True} if relu else {}
        return torch.from_numpy(np.ascontiguousarray(
            layer._run("forward", be.forward, _np(x), _np(w), **geo, **extra)))

    @staticmethod
    def backward(ctx, dy):
        x, w = ctx.saved_tensors
        layer, geo = ctx.layer, ctx.geo
        be = layer._owner[0].backend
        d = _np(dy)
        dx = dw = None
        if ctx.needs_input_grad[0]:
            dx = torch.from_numpy(np.ascontiguousarray(layer._run(
                "loss", be.loss, d, _np(w), tuple(x.shape[2:]), **geo)))
        if ctx.needs_input_grad[1]:
            dw = torch.from_numpy(np.ascontiguousarray(layer._run(
                "gradient", be.gradient, _np(x), d, tuple(w.shape[2:]), **geo)))
        return dx, dw, None, None, None


class _PoolFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, layer, args):
        be = layer._owner[0].backend
        y = layer._run("pool_forward", be.pool, _np(x), **args)
        ctx.layer, ctx.args = layer, args
        # with RELU (the mask of the ReLU before it) the backward zeroes dX where X is not
        # positive (bpsa.host.driver.pool_backward)
        ctx.save_for_backward(x)
        return torch.from_numpy(np.ascontiguousarray(y))

    @staticmethod
    def backward(ctx, dy):
        (x,) = ctx.saved_tensors
        layer, args = ctx.layer, ctx.args
        be = layer._owner[0].backend
        dx = layer._run("pool_backward", be.pool_backward, _np(dy), _np(x), **args)
        return torch.from_numpy(np.ascontiguousarray(dx)), None, None


class _ReluFn(torch.autograd.Function):
    """A ReLU fused in part: ``stored`` (its forward done by the layer before it's store),
    ``masked`` (its mask done by the max pooling after it's backward); the other part here, in
    PyTorch."""

    @staticmethod
    def forward(ctx, x, stored, masked):
        y = x.clone() if stored else torch.relu(x)
        ctx.masked = masked
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, dy):
        (y,) = ctx.saved_tensors
        return (dy if ctx.masked else dy * (y > 0)), None, None


class OffloadConv2d(_Layer):
    """``nn.Conv2d`` (zero padding) on the array, a grouped one in packs of groups
    (:mod:`bpsa.plan.groups`: a pack's slice of X and its groups' W block-diagonal a call of
    the backend, the outputs joined; autograd splits dY and keeps dW's diagonal blocks); the
    bias added by PyTorch; ``relu``: the ReLU after it fused into its store."""

    def __init__(self, name, owner, conv):
        super().__init__(name, owner)
        self.weight, self.bias, self.groups = conv.weight, conv.bias, conv.groups
        self.geo = {"stride": _pair(conv.stride), "padding": _pair(conv.padding),
                    "dilation": _pair(conv.dilation)}
        self.relu = False

    def forward(self, x):
        if self.groups == 1:
            y = _ConvFn.apply(x, self.weight, self, self.geo, self.relu)
        else:
            (n, c, h, w), (k, cg, r, s) = x.shape, self.weight.shape
            layer = ConvLayer.conv(n, c, h, w, k, r, s, groups=self.groups)
            outs = []
            for first, count in packs(layer, packing(self._owner[0].config, layer)):
                blocks = block_weights(self.weight, layer, first, count, zeros=torch.zeros)
                outs.append(_ConvFn.apply(x[:, first * cg:(first + count) * cg], blocks, self,
                                          self.geo, self.relu))
            y = torch.cat(outs, dim=1)
        return y if self.bias is None else y + self.bias.view(1, -1, 1, 1)


class OffloadLinear(_Layer):
    """``nn.Linear`` on ``N x features`` as a 1 x 1 convolution on the array, of one image
    whose ``N`` pixels are the batch's rows (as the cycle model runs an ``fc`` row,
    :mod:`bpsa.models.network_perf`); ``relu``: the ReLU after it fused into its store."""

    def __init__(self, name, owner, linear):
        super().__init__(name, owner)
        self.weight, self.bias = linear.weight, linear.bias
        self.relu = False

    def forward(self, x):
        if x.dim() != 2:
            raise ValueError(f"{self.name}: the offloaded Linear takes N x features, not "
                             f"shape {tuple(x.shape)}")
        geo = {"stride": (1, 1), "padding": (0, 0), "dilation": (1, 1)}
        y = _ConvFn.apply(x.t()[None, :, None, :], self.weight[:, :, None, None], self, geo,
                          self.relu)
        y = y[0, :, 0, :].t()
        return y if self.bias is None else y + self.bias


class OffloadPool(_Layer):
    """A pooling on the pooling unit; ``args["relu"]``: the mask of the ReLU before it fused
    into its backward (its forward's RELU changes nothing: its input is not negative)."""

    def __init__(self, name, owner, args):
        super().__init__(name, owner)
        self.args = args

    def forward(self, x):
        return _PoolFn.apply(x, self, self.args)


class OffloadRelu(_Layer):
    """An ``nn.ReLU`` fused in part (:mod:`bpsa.torch.fusion`): ``stored`` (its forward in the
    store of the layer before it), ``masked`` (its mask in the backward of the max pooling after
    it); the rest in PyTorch."""

    def __init__(self, name, owner, stored, masked):
        super().__init__(name, owner)
        self.stored, self.masked = stored, masked

    def forward(self, x):
        return _ReluFn.apply(x, self.stored, self.masked)


def _replacement(name, mod, owner):
    """The offloaded layer of ``mod``, or the reason it stays in PyTorch."""
    if isinstance(mod, nn.Conv2d):
        if isinstance(mod.padding, str) or mod.padding_mode != "zeros":
            return None, "padding other than zeros given in elements"
        return OffloadConv2d(name, owner, mod), None
    if isinstance(mod, nn.Linear):
        return OffloadLinear(name, owner, mod), None
    if isinstance(mod, (nn.MaxPool2d, nn.AvgPool2d)):
        kind = "max" if isinstance(mod, nn.MaxPool2d) else "avg"
        if mod.ceil_mode or (kind == "max" and (mod.dilation not in (1, (1, 1))
                                                 or mod.return_indices)) \
                or (kind == "avg" and (not mod.count_include_pad or mod.divisor_override)):
            return None, "ceil_mode, dilation, return_indices or a divisor the unit lacks"
        stride = mod.stride if mod.stride not in (None, ()) else mod.kernel_size
        return OffloadPool(name, owner, {"kind": kind, "kernel": _pair(mod.kernel_size),
                                         "stride": _pair(stride),
                                         "padding": _pair(mod.padding)}), None
    if isinstance(mod, nn.AdaptiveAvgPool2d):
        if _pair(mod.output_size) != (1, 1):
            return None, f"adaptive output {mod.output_size} (the unit runs 1 x 1)"
        return OffloadPool(name, owner, {"kind": "global_avg"}), None
    return None, None


class OffloadedModel(nn.Module):
    """The model with its supported layers offloaded (:func:`offload`): ``module`` (the
    copy), ``backend``, ``config``, ``offloaded`` (the names of the layers the accelerator
    runs), ``kept`` (``{name: reason}`` of those PyTorch runs) and ``calls`` (one dict a
    call: ``layer``, ``phase`` and the backend's counters)."""

    def __init__(self, module, backend, config):
        super().__init__()
        self.module = module
        self.backend, self.config = backend, config
        self.offloaded, self.kept, self.calls = [], {}, []

    def close(self):
        """Close the backend's simulated accelerator (``rtl``), if it has one."""
        for be in (self.backend, getattr(self.backend, "inner", None)):
            if hasattr(be, "close"):
                be.close()

    def forward(self, *args, **kwargs):
        for a in args:
            if isinstance(a, torch.Tensor) and not a.is_floating_point():
                raise TypeError(f"the offloaded model takes floating-point tensors "
                                f"(arithmetic {self.config.arithmetic}), not {a.dtype}")
        return self.module(*args, **kwargs)


def _backend(cfg, backend, mx_scale_rule):
    """The backend object of :func:`offload`."""
    if cfg.is_mx:
        if backend == "model":
            return MxModel(cfg, mx_scale_rule)
        if backend == "rtl":
            from bpsa.sim.native import SimulatedAccelerator
            return SimulatedAccelerator(cfg, progress=False, mx_scale_rule=mx_scale_rule)
        if isinstance(backend, str):
            raise ValueError(f"backend must be 'model', 'rtl' or an accelerator object, not "
                             f"{backend!r}")
        return backend
    if backend == "model":
        be = FloatModelOps(cfg) if cfg.is_float else IntegerModel(cfg)
    elif backend == "rtl":
        from bpsa.sim.native import SimulatedAccelerator
        be = SimulatedAccelerator(cfg, progress=False)
    elif isinstance(backend, str):
        raise ValueError(f"backend must be 'model', 'rtl' or an accelerator object, not "
                         f"{backend!r}")
    else:
        be = backend
    return be if cfg.is_float else QuantizedBackend(cfg, be)


def offload(model, config="small_bf16", backend="model", strict=False, *,
            mx_scale_rule="floor"):
    """:class:`OffloadedModel`: a deep copy of ``model`` whose supported layers run on the
    accelerator (module docstring). The copy is what trains: ``model`` itself, and its
    weights, do not change (train the returned model and read its weights from it).
    ``config``: a preset name, a TOML path or a
    :class:`bpsa.config.Config` of floating-point arithmetic with the pooling unit for
    poolings; ``backend``: ``"model"``, ``"rtl"`` or an accelerator object.
    ``mx_scale_rule``: an MX configuration's scale rule (``"floor"`` or ``"ceil"``,
    :func:`bpsa.models.mx.quantize`). Layers (and parts of ReLUs) that stay in PyTorch are
    named once in a warning, or refused with ``strict``."""
    cfg = load_config(config) if not hasattr(config, "arithmetic") else config
    out = OffloadedModel(copy.deepcopy(model), _backend(cfg, backend, mx_scale_rule), cfg)
    pooling = {"max": cfg.has_pool("max"), "avg": cfg.has_pool("avg")}
    plan = {}
    for name, mod in list(out.module.named_modules()):
        new, why = _replacement(name or type(mod).__name__, mod, out)
        if new is not None and isinstance(new, OffloadPool):
            kind = "avg" if new.args["kind"] == "global_avg" else new.args["kind"]
            if cfg.is_mx:
                new, why = None, f"the pooling unit is not built in {cfg.arithmetic}"
            elif not pooling[kind]:
                new, why = None, f"configuration {cfg.name!r} has no {kind} pooling unit"
        plan[name] = (mod, new, why)
    _fuse_relus(out, plan)
    for name, (_, new, why) in plan.items():
        if new is None:
            if why is not None:
                out.kept[name or type(model).__name__] = why
            continue
        if not name:                    # the model is one layer
            out.module = new
        else:
            parent, _, attr = name.rpartition(".")
            setattr(out.module.get_submodule(parent) if parent else out.module, attr, new)
        out.offloaded.append(new.name)
    order = {name or type(model).__name__: i for i, name in enumerate(plan)}
    out.kept = dict(sorted(out.kept.items(), key=lambda kv: order[kv[0].removesuffix(".mask")]))
    if out.kept:
        text = _kept_text(out.kept)
        if strict:
            raise ValueError(f"layers the accelerator cannot run: {text}")
        warnings.warn(f"these layers stay in PyTorch: {text}", stacklevel=2)
    return out


def _kept_text(kept):
    """``kept`` (``{name: reason}``) as one line: each reason once, after the names it applies
    to (in the model's order; past eight, the first six and the count)."""
    names = {}
    for name, why in kept.items():
        names.setdefault(why, []).append(name)
    parts = []
    for why, ns in names.items():
        shown = ", ".join(ns) if len(ns) <= 8 else f"{', '.join(ns[:6])}, ... ({len(ns)} in all)"
        parts.append(f"{shown}: {why}")
    return "; ".join(parts)


def _fuse_relus(out, plan):
    """Each ``nn.ReLU`` of ``plan`` (``{name: (module, replacement, why)}``) as
    :func:`bpsa.torch.fusion.relu_fusion` fuses it: its replacement, the layers that store
    with RELU and the poolings that mask; the parts not fused named in ``out.kept``."""
    relus = [name for name, (mod, _, _) in plan.items() if isinstance(mod, nn.ReLU)]
    if not relus:
        return
    fusion = None
    why = (f"the pooling unit is not built in {out.config.arithmetic} (the offload fuses no "
           f"ReLU in MX)")
    if not out.config.is_mx:
        try:
            gm = torch.fx.symbolic_trace(out.module)
            fusion = relu_fusion(gm, lambda n: plan.get(n.target, (None, None))[1] is not None)
        except Exception as e:      # fx's errors are many kinds: one line
            why = f"torch.fx cannot trace the model to find what a ReLU follows ({e})"
    for name in relus:
        stored, masked = fusion.relus.get(name, (False, False)) if fusion else (False, False)
        label = name or type(plan[name][0]).__name__
        if not stored:
            out.kept[label] = why if fusion is None else FORWARD_NOT_FUSED
        if not masked and fusion is not None:
            out.kept[f"{label}.mask"] = MASK_NOT_FUSED
        new = OffloadRelu(name, out, stored, masked) if stored or masked else None
        plan[name] = (plan[name][0], new, None)
    for name in (fusion.stores if fusion else ()):
        plan[name][1].relu = True
    for name in (fusion.masks if fusion else ()):
        plan[name][1].args = dict(plan[name][1].args, relu=True)
