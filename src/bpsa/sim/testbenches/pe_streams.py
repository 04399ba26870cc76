"""Directed PE operand streams with their expected results computed by numpy.

Independent of :mod:`bpsa.models.pe_model`: the expectations come from dot products and element-wise
formulas over the whole stream, not from a cycle model. Used by the Amaranth-simulator tests and
the cocotb testbench alike.
"""

from dataclasses import dataclass, field

import numpy as np

from bpsa.models.pe_model import MODES, PEParams, with_zero_flags
from bpsa.spec.numeric import wrap

__all__ = ["DirectedStream", "directed_stream"]


@dataclass
class DirectedStream:
    cycles: list                      # inputs per cycle (model input names)
    checks: dict = field(default_factory=dict)   # cycle index -> {output name: value}
    gated: int = 0                    # expected number of gated MACs


def _operands(p, n, rng, zero_prob):
    ow = p.operand_width
    lo, hi = (-(1 << (ow - 1)), 1 << (ow - 1)) if p.operand_signed else (0, 1 << ow)
    x = rng.integers(lo, hi, n)
    x[rng.random(n) < zero_prob] = 0
    return x.astype(np.int64)


def directed_stream(cfg, mode, n, rng, *, held=None, preload=None, zero_prob=0.25):
    """A stream for ``mode`` ("os", "hold" or "interleaved") of ``n`` MAC slots.

    * os: preload ``preload`` into the reserve register, run two contexts of about n/2 slots;
      checks the first result (from a zero accumulator) and the second (from the preload).
    * hold: load the held operand ``held``, stream n slots; checks ``p_out`` every slot.
    * interleaved: load ``held`` as the weight, stream n/2 deltas each held two cycles (OS phase
      with an activation, HOLD phase with a partial sum); checks every partial sum and, at the
      end, the gradient G on the reserve chain and the context's weight on the weight chain
      (the SGD update is the array's, once per column).
    """
    p = PEParams.of(cfg)
    zg = p.zero_gating
    base = {"mode": MODES[mode]}
    cycles, checks = [], {}
    gated = 0

    def push(**kw):
        c = dict(base)
        c.update(kw)
        cycles.append(with_zero_flags(p, c))
        return len(cycles) - 1

    if mode == "os":
        p0 = 0 if preload is None else preload
        push(shift=1, chain_in=p0)
        # With reserve registers each context ends in a swap: the first starts from zero, the
        # second from the preload. A plain PE has no swap: the preload is shifted straight into
        # the accumulator, which keeps accumulating across contexts.
        start = 0 if p.reserve_registers else p0
        for ctx, length in enumerate((n // 2, n - n // 2)):
            a = _operands(p, length, rng, zero_prob)
            b = _operands(p, length, rng, zero_prob)
            av = rng.random(length) < 0.85
            bv = rng.random(length) < 0.85
            av[-1] = True                      # the context ends on a valid slot
            for i in range(length):
                last = i == length - 1
                idx = push(h=int(a[i]), h_valid=int(av[i]), h_last=int(last),
                           v=int(b[i]), v_valid=int(bv[i]))
            active = av & bv
            total = int(np.sum(np.where(active, a * b, 0)))
            gated += int(np.sum(active & ((a == 0) | (b == 0)))) if zg else 0
            # After the end, the reserve register holds the context's sum (plus the preload
            # for the second context, which started from it).
            if p.reserve_registers:
                checks[idx] = {"chain_out": wrap((0 if ctx == 0 else p0) + total, p.acc_width)}
            else:
                start += total
                checks[idx] = {"chain_out": wrap(start, p.acc_width)}
        return _pipelined(cycles, checks, gated, p, base)

    w = int(_operands(p, 1, rng, 0.0)[0]) if held is None else held
    push(shift=1, chain_in=w)
    push(load=1)
    if mode == "hold":
        a = _operands(p, n, rng, zero_prob)
        vw = p.vertical_width
        psum = rng.integers(-(1 << (vw - 2)), 1 << (vw - 2), n).astype(np.int64)
        av = rng.random(n) < 0.85
        vv = rng.random(n) < 0.85
        active = av & vv
        out = psum + np.where(active, a * w, 0)
        gated = int(np.sum(active & ((a == 0) | (w == 0)))) if zg else 0
        for i in range(n):
            idx = push(h=int(a[i]), h_valid=int(av[i]), p=int(psum[i]), v_valid=int(vv[i]))
            checks[idx] = {"p_out": wrap(int(out[i]), vw)}
        return _pipelined(cycles, checks, gated, p, base)

    if mode != "interleaved":
        raise ValueError(f"mode must be 'os', 'hold' or 'interleaved', not {mode!r}")
    k = max(1, n // 2)
    delta = _operands(p, k, rng, zero_prob)
    act = _operands(p, k, rng, zero_prob)
    vw = p.vertical_width
    psum = rng.integers(-(1 << (vw - 2)), 1 << (vw - 2), k).astype(np.int64)
    dv = rng.random(k) < 0.85
    dv[-1] = True
    for i in range(k):
        last = i == k - 1
        push(h=int(delta[i]), h_valid=int(dv[i]), v=int(act[i]), v_valid=1, v_tag=0)
        idx = push(h=int(delta[i]), h_valid=int(dv[i]), h_last=int(last), p=int(psum[i]),
                   v_valid=1, v_tag=1)
        expected_psum = psum[i] + (delta[i] * w if dv[i] else 0)
        checks[idx] = {"p_out": wrap(int(expected_psum), vw)}
    g = wrap(int(np.sum(np.where(dv, delta * act, 0))), p.acc_width)
    if zg:
        gated = int(np.sum(dv & ((delta == 0) | (act == 0)))) + \
            int(np.sum(dv & ((delta == 0) | (w == 0))))
    checks[len(cycles) - 1].update(chain_out=g, wchain_out=w)
    return _pipelined(cycles, checks, gated, p, base)


def _pipelined(cycles, checks, gated, p, base):
    """The stream as the pipelined PE takes it: written slot by slot (a slot's partial sum and
    its results in the slot's own cycle), each slot's partial sum and each check move
    ``mac_latency`` cycles later, the stream growing by that many idle cycles."""
    lat = p.mac_latency
    timed = [dict(c) for c in cycles] + [dict(base) for _ in range(lat)]
    for t, c in enumerate(cycles):
        timed[t].pop("p", None)
    for t, c in enumerate(cycles):
        if "p" in c:
            timed[t + lat]["p"] = c["p"]
    return DirectedStream(timed, {t + lat: v for t, v in checks.items()}, gated)
