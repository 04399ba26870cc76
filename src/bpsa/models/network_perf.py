"""A training step of a whole network on a configuration, from the cycle model
(:mod:`bpsa.models.perf`): per layer and phase the cycles, utilization, DMA bytes, buffer
words and what bounds it; the totals; the time a step takes at a clock.

How the layers map onto the accelerator:

- ``conv``: the forward (Fornt feeder), the zero-free loss and the zero-free gradient, batch
  ``batch``; the first layer's loss is skipped (nothing needs the image's gradient).
- ``fc``: a 1 x 1 convolution of one image whose ``batch`` pixels are the batch's rows
  (``C`` inputs as channels, ``H = 1``, ``W = batch``): ``Y = W X``, ``dX = W^T dY`` and
  ``dW = dY X^T`` are exactly its forward, loss and gradient.
- pooling (``max_pool``, ``avg_pool``, ``global_avg_pool``): the pooling unit's forward in
  the forward row and its backward (dX) in the loss row (:func:`bpsa.models.perf.
  pool_cycles`; no MACs), the gradient row skipped (no weights); refused with the reason on
  a configuration without the unit or the kind. A ReLU is not a row: where the accelerator
  fuses it (:mod:`bpsa.torch.fusion`) it costs nothing (the store path's RELU, the pooling
  backward's mask), and what is not fused runs on the host (``bpsa perf --model`` lists it);
  batch normalization, residual additions and concatenations move no MACs and are not in
  the network files.

A layer or phase the configuration cannot run is listed with the controller's reason (the
set-up program's refusal), never dropped. The cycle model runs once a distinct layer shape
and phase, so repeated blocks (ResNet's bottlenecks) cost one evaluation, in ``jobs``
processes.
"""

from dataclasses import dataclass, field

from bpsa.models.perf import layer_cycles, min_bytes, pool_cycles
from bpsa.spec.numeric import element_bytes
from bpsa.spec.layer import ConvLayer, out_size
from bpsa.spec.network import POOLS

__all__ = ["PHASES", "NetworkStep", "network_step"]

PHASES = ("forward", "loss", "gradient")

#: The figures of a row that add up over a step.
_SUMMED = ("cycles", "macs", "dma_read_bytes", "dma_write_bytes", "compute_cycles",
           "dma_busy_cycles", "min_bytes")


@dataclass
class NetworkStep:
    """``rows``: one dict a layer and phase (``status`` ``"run"``, ``"refused"`` or
    ``"skipped"``, with ``reason``); ``totals``: the summed figures of the rows that ran, and
    ``utilization`` (their MACs over rows x cols x cycles), ``seconds`` at ``clock_mhz``;
    ``by_phase``: the same per phase."""
    network: str
    config: str
    batch: int
    clock_mhz: float
    rows: list
    totals: dict = field(default_factory=dict)
    by_phase: dict = field(default_factory=dict)

    @property
    def refused(self):
        return [r for r in self.rows if r["status"] == "refused"]

    def as_dict(self):
        return {"network": self.network, "config": self.config, "batch": self.batch,
                "clock_mhz": self.clock_mhz, "totals": self.totals,
                "by_phase": self.by_phase, "layers": self.rows}


def _conv(layer, batch):
    """The convolution the accelerator runs for ``layer`` (see the module's docstring), a
    :class:`bpsa.spec.layer.ConvLayer`."""
    if layer.op == "fc":
        return ConvLayer.conv(1, layer.c, 1, batch, layer.k, 1, 1)
    return ConvLayer.conv(batch, layer.c, layer.h, layer.w, layer.k, layer.r, layer.s,
                          layer.stride, layer.pad, layer.dilation, groups=layer.groups)


#: Pooling kinds of the network files' ops.
_POOL_KIND = {"max_pool": "max", "avg_pool": "avg", "global_avg_pool": "global_avg"}


def _pool_dims(layer, batch):
    return dict(n=batch, c=layer.c, h=layer.h, w=layer.w, r=layer.r, s=layer.s,
                stride=(layer.stride,) * 2, pad=(layer.pad,) * 2, kind=_POOL_KIND[layer.op])


def _model(config, phase, key, requant, frontend="feeder"):
    """The cycle model of one (phase, shape), or the refusal's text (``key``: a convolution's
    :class:`bpsa.spec.layer.ConvLayer`, or a pooling's sorted keyword items); a forward on
    ``frontend`` (``"best"``: the faster of the two front ends, as a driver would pick per
    layer with MODE; its ``frontend`` says which)."""
    try:
        if phase.startswith("pool_"):
            key = dict(key)
            if not config.has_pool("avg" if key["kind"] == "global_avg" else key["kind"]):
                return (f"configuration {config.name!r} generates no {key['kind']} pooling "
                        f"(pool_kinds: {list(config.pool_kinds) or 'none'})")
            return pool_cycles(config, phase, **key,
                               requant=phase == "pool_forward" or requant)
        extra = {"requant": True} if requant and phase != "gradient" else {}
        if phase != "forward" or frontend == "feeder":
            return layer_cycles(config, phase, key, **extra)
        if frontend == "channel_first":
            return layer_cycles(config, phase, key, frontend=frontend, **extra)
        found, why = [], []
        for fe in ("feeder", "channel_first"):
            try:
                found.append(layer_cycles(config, phase, key, frontend=fe, **extra))
            except ValueError as e:
                why.append(str(e))
        if not found:
            return "; ".join(why)
        return min(found, key=lambda m: m.cycles)
    except ValueError as e:
        return str(e)


def network_step(config, network, *, batch=1, phases=PHASES, clock_mhz=100.0, requant=False,
                 jobs=1, frontend="feeder"):
    """The :class:`NetworkStep` of ``network`` (a :class:`bpsa.spec.network.Network`) on
    ``config``. ``requant``: the forward's and the loss's outputs leave as operands.
    ``frontend``: the convolutions' forward front end, ``"feeder"``, ``"channel_first"`` or
    ``"best"`` (per layer the faster; the rows' ``frontend`` says which). ``jobs``
    processes evaluate the distinct layer shapes (1: this process; a Dask worker must keep
    1, its processes cannot start others)."""
    if batch < 1:
        raise ValueError(f"batch must be >= 1, not {batch}")
    if frontend not in ("feeder", "channel_first", "best"):
        raise ValueError(f"frontend must be 'feeder', 'channel_first' or 'best', not "
                         f"{frontend!r}")
    if frontend != "feeder" and not config.has_frontend("channel_first"):
        raise ValueError(f"configuration {config.name!r} does not generate the channel-first "
                         f"front end (forward_frontends: {list(config.forward_frontends)})")
    unknown = [p for p in phases if p not in PHASES]
    if unknown:
        raise ValueError(f"phase {unknown[0]!r} is not one of {', '.join(PHASES)}")
    tasks = list(dict.fromkeys(
        (phase, _conv(lay, batch))
        for i, lay in enumerate(network) if lay.op not in POOLS
        for phase in phases if not (phase == "loss" and i == 0)))
    tasks += list(dict.fromkeys(
        (_POOL_PHASE[phase], tuple(sorted(_pool_dims(lay, batch).items())))
        for lay in network if lay.op in POOLS for phase in phases if phase in _POOL_PHASE))
    if jobs > 1 and len(tasks) > 1:
        from concurrent.futures import ProcessPoolExecutor
        with ProcessPoolExecutor(max_workers=min(jobs, len(tasks))) as pool:
            results = list(pool.map(_model, [config] * len(tasks), *zip(*tasks),
                                    [requant] * len(tasks), [frontend] * len(tasks)))
    else:
        results = [_model(config, phase, key, requant, frontend) for phase, key in tasks]
    done = dict(zip(tasks, results))

    rows = []
    for index, layer in enumerate(network):
        for phase in phases:
            row = {"layer": layer.name, "op": layer.op, "phase": phase, "batch": batch}
            if layer.op in POOLS and phase == "gradient":
                row.update(status="skipped", reason="pooling has no weights")
            elif layer.op in POOLS:
                dims = _pool_dims(layer, batch)
                m = done[(_POOL_PHASE[phase], tuple(sorted(dims.items())))]
                if isinstance(m, str):
                    row.update(status="refused", reason=m)
                else:
                    # X in, the output out; the backward also reads dY
                    ob = element_bytes(config.operand_width)
                    ins = layer.c * layer.h * layer.w * batch * ob
                    if phase == "loss":
                        ins += _pool_out(layer) * layer.c * batch * ob
                    row.update(status="run", **m.as_dict(), min_bytes=ins + m.dma_write_bytes)
            elif phase == "loss" and index == 0:
                row.update(status="skipped", reason="the first layer's loss (the image's "
                                                    "gradient) is not needed")
            else:
                conv = _conv(layer, batch)
                m = done[(phase, conv)]
                if isinstance(m, str):
                    row.update(status="refused", reason=m)
                else:
                    row.update(status="run", **m.as_dict(),
                               min_bytes=min_bytes(config, phase, conv,
                                                   requant=requant and phase != "gradient"))
            rows.append(row)
    step = NetworkStep(network.name, config.name, batch, clock_mhz, rows)
    step.totals = _totals(config, rows, clock_mhz)
    step.by_phase = {p: _totals(config, [r for r in rows if r["phase"] == p], clock_mhz)
                     for p in phases}
    return step


#: The pooling unit's phase in a network row's phase.
_POOL_PHASE = {"forward": "pool_forward", "loss": "pool_backward"}


def _pool_out(layer):
    """Output elements of a pooling layer's plane."""
    if layer.op == "global_avg_pool":
        return 1
    return (out_size(layer.h, layer.r, layer.stride, layer.pad, 1)
            * out_size(layer.w, layer.s, layer.stride, layer.pad, 1))


def _totals(config, rows, clock_mhz):
    ran = [r for r in rows if r["status"] == "run"]
    totals = {k: sum(r[k] for r in ran) for k in _SUMMED}
    cycles = totals["cycles"]
    totals.update(layers_run=len(ran),
                  refused=sum(r["status"] == "refused" for r in rows),
                  skipped=sum(r["status"] == "skipped" for r in rows),
                  utilization=totals["macs"] / (config.rows * config.cols * cycles)
                  if cycles else 0.0,
                  seconds=cycles / (clock_mhz * 1e6))
    return totals
