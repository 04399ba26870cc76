"""Grouped convolutions on the array: groups packed side by side into ordinary convolutions.

The hardware runs one ordinary convolution a descriptor. Each of a grouped layer's ``G``
groups is an ordinary convolution of ``cg = C / G`` input and ``kg = K / G`` output channels;
``P`` consecutive groups side by side are one ordinary convolution of ``P cg`` input and ``P
kg`` output channels (:func:`packed_layer`) whose W is block-diagonal (:func:`block_weights`:
zero outside each group's ``kg x cg`` block). Its forward is the ``P`` groups' Y, its loss
their dX (the zero weights add nothing), and the diagonal blocks of its gradient are their dW
(:func:`diagonal_blocks`; the blocks between groups are computed and dropped). A zero operand
is a gated MAC (it switches nothing and, in floating point, leaves the accumulator as it is:
``docs/architecture/floating_point.md``), but it takes its slot: the packed layer does ``P``
times a group's MACs per output, so packing buys nothing in the array's steady state and
wins where a group alone leaves the array's columns idle and a descriptor's fixed costs (its
set-up, loads, fill and drain) dominate: a depthwise layer's group is one channel.

:func:`packing` fills the columns: ``P = min(G, cols // max(cg, kg))`` (1 when a group's
channels fill them). MX formats do not pack: their 32-element blocks along the channels would
share a scale across groups. :func:`packs` cuts the ``G`` groups into runs of ``P`` (the last
may hold fewer).
"""

from dataclasses import replace

import numpy as np

__all__ = ["block_weights", "diagonal_blocks", "packed_layer", "packing", "packs"]


def packing(config, layer):
    """The groups of ``layer`` (a :class:`bpsa.spec.layer.ConvLayer`) one descriptor runs on
    ``config`` (see the module docstring); 1 for an ungrouped layer."""
    if layer.groups == 1 or config.is_mx:
        return 1
    one = layer.group_layer()
    return max(1, min(layer.groups, config.cols // max(one.channels, one.out_channels)))


def packs(layer, p):
    """``(first group, groups)`` of each run of ``p`` groups of ``layer``, in order."""
    if p < 1:
        raise ValueError(f"a pack holds at least one group, not {p}")
    return [(g, min(p, layer.groups - g)) for g in range(0, layer.groups, p)]


def packed_layer(layer, count):
    """The ordinary convolution ``count`` groups of ``layer`` side by side are."""
    one = layer.group_layer()
    return replace(one, channels=count * one.channels, out_channels=count * one.out_channels)


def block_weights(w, layer, first, count, zeros=np.zeros):
    """The packed layer's W (``count kg x count cg x R x S``) of groups ``first ..
    first + count - 1`` of ``w`` (the grouped layer's ``K x cg x R x S``): each group's
    block on the diagonal, zeros elsewhere. ``zeros(shape, dtype=...)`` makes the array
    (``torch.zeros`` for a tensor: autograd then takes the blocks' gradients)."""
    one = layer.group_layer()
    cg, kg = one.channels, one.out_channels
    out = zeros((count * kg, count * cg) + tuple(w.shape[2:]), dtype=w.dtype)
    for i in range(count):
        g = first + i
        out[i * kg:(i + 1) * kg, i * cg:(i + 1) * cg] = w[g * kg:(g + 1) * kg]
    return out


def diagonal_blocks(dw, layer, count):
    """The groups' dW (``count kg x cg x R x S``) from the packed layer's (``count kg x
    count cg x R x S``): each group's diagonal block."""
    one = layer.group_layer()
    cg, kg = one.channels, one.out_channels
    return np.concatenate([dw[i * kg:(i + 1) * kg, i * cg:(i + 1) * cg]
                           for i in range(count)], axis=0)
