"""``bpsa sim --phase pool``: one pooling layer's forward and backward through the whole
accelerator under Verilator (the native transport and the host driver), both checked against
:mod:`bpsa.models.golden` (floating point: :mod:`bpsa.models.float_pool`)."""

import numpy as np

from bpsa.models import golden
from bpsa.spec.numeric import operand_range

__all__ = ["run_pool"]


def _memory(config, layer):
    """Bytes of external memory the layer's tensors need (with room to spare)."""
    n, c, h, w = layer.batch, layer.channels, layer.height, layer.width
    elems = n * c * h * w
    need = elems * 2 + 4 * elems + (1 << 16)
    return 1 << max(20, (need - 1).bit_length())


def run_pool(config, layer, *, seed=1, progress=False, trace=None, trace_window=None,
             stall=0.0):
    """Run :class:`bpsa.spec.layer.PoolLayer` ``layer`` forward (random X) and backward
    (random dY) on ``config``; a summary dict: ``match`` (both equal the golden model), the
    busy cycles, DMA bytes and pooling-buffer reads of each phase, the tiling (planes a step,
    bands). :exc:`ValueError` when the configuration cannot run the layer."""
    from bpsa.sim.native import run_with_driver

    from bpsa.plan.tiling import pool_plan
    # progress: the build's messages (one layer: no progress bar of cycles)
    hw_kind = "avg" if layer.kind == "global_avg" else layer.kind
    if not config.has_pool(hw_kind):
        raise ValueError(f"configuration {config.name!r} generates no {hw_kind} pooling "
                         f"(pool_kinds: {list(config.pool_kinds) or 'none'})")
    for phase in ("pool_forward", "pool_backward"):       # refusals before any build
        pool_plan(config, phase, layer.batch, layer.channels, layer.height, layer.width,
                  *layer.kernel, layer.stride, layer.pad, hw_kind, layer.relu)
    rng = np.random.default_rng(seed)
    n, c, h, w = layer.batch, layer.channels, layer.height, layer.width
    kind = layer.kind
    args = {} if kind == "global_avg" else {"kernel": layer.kernel, "stride": layer.stride,
                                            "padding": layer.pad}
    if config.is_float:     # encodings (zeros, subnormals, specials); bpsa.models.float_pool
        from bpsa.models import float_pool
        from bpsa.sim.gemm import random_float_operands
        fmt = config.arithmetic
        x = random_float_operands(fmt, (n, c, h, w), rng, 0.1)
        want_y = float_pool.pool2d(x, kind, layer.kernel, layer.stride, layer.pad, fmt,
                                   relu=layer.relu)
        dy = random_float_operands(fmt, want_y.shape, rng, 0.1)
        want_dx = float_pool.pool2d_backward(dy, x, kind, layer.kernel, layer.stride,
                                             layer.pad, fmt, relu=layer.relu)
    else:
        lo, hi = operand_range(config)
        x = rng.integers(lo, hi + 1, (n, c, h, w))
        want_y = golden.pool2d(x, kind, layer.kernel, layer.stride, layer.pad)
        if layer.relu:
            want_y = np.maximum(want_y, 0)
        dy = rng.integers(lo, hi + 1, want_y.shape)
        want_dx = golden.pool2d_backward(dy, x, kind, layer.kernel, layer.stride, layer.pad)
        if layer.relu:
            want_dx = want_dx * (x > 0)
    out = {"phase": "pool", "layer": layer.text(), "config": config.name}

    async def body(drv, t):
        y = await drv.pool(x, kind, relu=layer.relu, **args)
        fwd = dict(drv.counters)
        plan = drv.plan
        dx = await drv.pool_backward(dy, x, kind, relu=layer.relu, **args)
        bwd = dict(drv.counters)
        return y, dx, fwd, bwd, plan, drv.plan

    y, dx, fwd, bwd, fplan, bplan = run_with_driver(
        config, body, mem_bytes=_memory(config, layer), seed=seed, trace=trace,
        trace_window=trace_window, stall=stall, progress=progress)
    out["forward_match"] = bool(np.array_equal(y, want_y))
    out["backward_match"] = bool(np.array_equal(dx, want_dx))
    out["match"] = out["forward_match"] and out["backward_match"]
    for name, cnt, plan in (("forward", fwd, fplan), ("backward", bwd, bplan)):
        out[f"{name}_cycles"] = cnt["busy_cycles"]
        out[f"{name}_dma_read_bytes"] = cnt["dma_read_bytes"]
        out[f"{name}_dma_write_bytes"] = cnt["dma_write_bytes"]
        out[f"{name}_buffer_reads"] = cnt["buf_a_reads"]
        out[f"{name}_steps"] = len(plan["runs"])
        out[f"{name}_banded"] = bool(plan["banded"])
    return out
