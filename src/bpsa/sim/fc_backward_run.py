"""Host side of the FC backward phase of :class:`bpsa.gateware.frontends.bp_im2col.conv_backward.ConvBackward`
(InterGrad's interleaved dataflow): layer checks, buffer images, the descriptor, assembly of the
``out`` (dX) and ``drain`` (dW) vectors, the golden results and the summary: what the cocotb
testbench (:mod:`bpsa.sim.testbenches.tb_conv_backward`) and the Amaranth-simulator tests share.
:func:`bpsa.sim.simcmd.run_fc_layers` runs layers through the generated RTL under Verilator.

A fully connected layer ``Y = X W^T`` has batch ``N``, ``I`` inputs and ``O`` outputs; its
backward pass is ``dX = dY W`` (``N x I``) and ``dW = dY^T X`` (``O x I``), or with
``sgd_shift`` the updated weights ``W - (dW >> sgd_shift)``. Layer strings:
``N=8,I=20,O=10``.
"""

from dataclasses import asdict

import numpy as np

from bpsa.models import golden
from bpsa.gateware.frontends.bp_im2col.conv_backward import Phase as EnginePhase
from bpsa.spec.numeric import operand_range, wrap_array

__all__ = ["geometry", "check_layer", "descriptor", "random_tensors",
           "images", "expected", "assemble", "summary"]

def geometry(config, layer):
    """Words of dY (buffer A), X and W (buffer B), the tile grid and MACs."""
    n, i, o = layer.batch, layer.inputs, layer.outputs
    to, ti = -(-o // config.rows), -(-i // config.cols)
    return {"dy": n * o, "x": n * i, "w": o * i, "tiles_o": to, "tiles_i": ti,
            "tiles": to * ti, "macs": 2 * n * i * o}


def check_layer(config, layer, sgd_shift=None):
    """:exc:`ValueError` (one line, naming the reason) when the hardware cannot run the layer."""
    if not (config.has("is") and config.has("interleaved")):
        raise ValueError(f"configuration {config.name!r} does not generate the 'interleaved' "
                         f"dataflow (dataflows {list(config.dataflows)})")
    limit = (1 << config.dim_width) - 1
    for name, v in asdict(layer).items():
        if not 1 <= v <= limit:
            raise ValueError(f"FC layer {name} = {v} is outside 1..{limit} (dim_width "
                             f"{config.dim_width})")
    g = geometry(config, layer)
    if g["dy"] > config.buf_a_depth:
        raise ValueError(f"dY has {g['dy']} elements, buffer A holds {config.buf_a_depth}")
    if g["x"] + g["w"] > config.buf_b_depth:
        raise ValueError(f"X and W have {g['x'] + g['w']} elements, buffer B holds "
                         f"{config.buf_b_depth}")
    if sgd_shift is not None and not 0 <= sgd_shift < config.acc_width:
        raise ValueError(f"sgd_shift = {sgd_shift} is outside 0..{config.acc_width - 1}")


def descriptor(config, layer, sgd_shift=None):
    """The ``bpsa.gateware.frontends.bp_im2col.conv_backward.backward_layout`` field values: dY from word 0 of
    A, X from word 0 of B and W right after it. The convolution fields the FC phase ignores are 1 /
    0."""
    desc = {"phase": EnginePhase.FC.value, "baseline": 0, "n": layer.batch, "c": layer.inputs,
            "k": layer.outputs, "src_base_a": 0, "src_base_b": layer.batch * layer.inputs,
            "base_a": 0, "base_b": 0, "sgd_en": int(sgd_shift is not None),
            "sgd_shift": sgd_shift or 0}
    for name in ("h", "w", "r", "s", "oh", "ow", "stride_h", "stride_w", "dil_h", "dil_w"):
        desc[name] = 1
    for name in ("pad_h", "pad_w", "pad_bottom"):
        desc[name] = 0
    return desc


def random_tensors(config, layer, rng, zero_prob=0.0):
    """Random ``x`` (N x I), ``w`` (O x I) and ``dy`` (N x O) in the operand range."""
    lo, hi = operand_range(config)
    out = {}
    for name, shape in (("x", (layer.batch, layer.inputs)),
                        ("w", (layer.outputs, layer.inputs)),
                        ("dy", (layer.batch, layer.outputs))):
        t = rng.integers(lo, hi + 1, shape)
        if zero_prob:
            t[rng.random(shape) < zero_prob] = 0
        out[name] = t
    return out


def images(config, layer, tensors):
    """``{"a": (first_word, words), "b": (first_word, words)}``: dY in A; X then W in B."""
    b = np.concatenate([np.asarray(tensors["x"]).ravel(), np.asarray(tensors["w"]).ravel()])
    return {"a": (0, [int(v) for v in np.asarray(tensors["dy"]).ravel()]),
            "b": (0, [int(v) for v in b])}


def expected(config, layer, tensors, sgd_shift=None):
    """``{"dx", "dw"}`` from :func:`bpsa.models.golden.gemm`, wrapped to ``acc_width``; with
    ``sgd_shift`` ``dw`` is the updated weights, wrapped to the operand format."""
    dx = wrap_array(golden.gemm(tensors["dy"], tensors["w"]), config.acc_width)
    dw = wrap_array(golden.gemm(np.asarray(tensors["dy"]).T, tensors["x"]), config.acc_width)
    if sgd_shift is not None:
        dw = wrap_array(np.asarray(tensors["w"], dtype=np.int64) - (dw >> sgd_shift),
                        config.operand_width, config.operand_signed)
    return {"dx": dx, "dw": dw}


def assemble(config, layer, outs, drains):
    """dX from the ``out`` vectors ``(n, tile, data)`` (the output tiles' shares added) and dW
    from the ``drain`` rows ``(row, tile, data)``, both wrapped to ``acc_width``. Raises
    :exc:`AssertionError` for a wrong number or position of vectors."""
    R, C = config.rows, config.cols
    g = geometry(config, layer)
    n_, i_, o_ = layer.batch, layer.inputs, layer.outputs
    assert len(outs) == g["tiles"] * n_, f"{len(outs)} dX vectors, expected {g['tiles'] * n_}"
    assert len(drains) == g["tiles"] * R, f"{len(drains)} dW rows, expected {g['tiles'] * R}"
    dx = np.zeros((n_, g["tiles_i"] * C), dtype=np.int64)
    for n, tile, vec in outs:
        assert n < n_ and tile < g["tiles"], f"dX vector at n {n}, tile {tile}"
        i0 = (tile // g["tiles_o"]) * C               # input tiles outer, output tiles inner
        dx[n, i0:i0 + C] += np.asarray(vec, dtype=np.int64)
    dw = np.zeros((g["tiles_o"] * R, g["tiles_i"] * C), dtype=np.int64)
    seen = set()
    for row, tile, vec in drains:
        assert tile < g["tiles"] and (row, tile) not in seen, f"dW row {row} of tile {tile}"
        seen.add((row, tile))
        o0, i0 = (tile % g["tiles_o"]) * R, (tile // g["tiles_o"]) * C
        dw[o0 + row, i0:i0 + C] = vec
    return {"dx": wrap_array(dx[:, :i_], config.acc_width), "dw": dw[:o_, :i_]}


def summary(config, layer, got, want, counters, *, sgd_shift=None):
    """The summary of one run (``bpsa sim --phase fc --engine``)."""
    g = geometry(config, layer)
    cycles = int(counters["cycles"])
    match = got is not None and all(np.array_equal(got[k], want[k]) for k in ("dx", "dw"))
    return {"match": bool(match), "phase": "fc", "mode": "interleaved",
            "layer": layer.text(), "rows": config.rows, "cols": config.cols,
            "sgd_shift": sgd_shift, "cycles": cycles,
            "cycles_prologue": int(counters["cycles_prologue"]),
            "buffer_words_read": {"a": int(counters["a_words"]), "b": int(counters["b_words"])},
            "tiles": int(counters["tiles"]), "vectors": int(counters["vectors"]),
            "zeros_sent": int(counters["zeros_a"]) + int(counters["zeros_b"]),
            "useful_macs": g["macs"],
            "utilization": g["macs"] / (config.rows * config.cols * cycles) if cycles else 0.0}
