"""Host side of :class:`bpsa.gateware.frontends.bp_im2col.conv_backward.ConvBackward`: layer checks, buffer
images, the descriptor, assembly of the psum vectors into dX / dW, the summary of ``bpsa sim
--engine --phase loss|gradient``: what the engine top's cocotb testbench
(:mod:`bpsa.sim.testbenches.tb_conv_backward`) and the Amaranth-simulator tests share.
:func:`bpsa.sim.simcmd.run_backward_layers` runs layers through the generated RTL under
Verilator.

Layers are :class:`bpsa.spec.layer.ConvLayer` (parsed by
:func:`bpsa.spec.layer.parse_layer`). ``baseline`` selects the traditional flow: the
host writes the compact tensors at ``src_base_a`` / ``src_base_b`` (right after the zero-spaced
copies), the hardware writes the copies (see :mod:`bpsa.gateware.frontends.bp_im2col.conv_backward`) and reads
them densely.
"""

import numpy as np

from bpsa.models import golden
from bpsa.spec.layer import parse_layer
from bpsa.spec.numeric import operand_range, wrap_array

__all__ = ["PHASES", "parse_layer", "geometry", "check_layer", "descriptor", "random_tensors",
           "images", "expected", "assemble", "summary"]

#: Phases the hardware computes.
PHASES = ("loss", "gradient")


def geometry(config, layer, phase="loss"):
    """Sizes of one layer's phase: ``oh, ow``; ``dy``, ``w``, ``x`` (compact elements);
    ``za`` / ``zb`` (elements of the baseline's zero-spaced copies in buffers A / B: loss: none
    / the padded, zero-inserted dY; gradient: the dilated dY / the padded X); ``m, kg, ng``
    (GEMM dims), ``kt`` (row tiles per column block), ``tiles``."""
    oh, ow = layer.out_hw
    n, c, k = layer.batch, layer.channels, layer.out_channels
    r, s = layer.kernel_h, layer.kernel_w
    drh, drw = layer.dil_h * (r - 1), layer.dil_w * (s - 1)
    hd, wd = layer.dilated_out_hw
    g = {"oh": oh, "ow": ow, "hd": hd, "wd": wd, "dy": n * k * oh * ow, "w": k * c * r * s,
         "x": n * c * layer.height * layer.width}
    if phase == "loss":
        g.update(m=c, kg=k * r * s, ng=n * layer.height * layer.width, za=0,
                 zb=n * k * (layer.height + drh) * (layer.width + drw))
    else:
        g.update(m=k, kg=n * hd * wd, ng=c * r * s, za=n * k * hd * wd,
                 zb=n * c * (hd + drh) * (wd + drw))
    g["kt"] = -(-g["kg"] // config.rows)
    g["tiles"] = g["kt"] * -(-g["ng"] // config.cols)
    return g


def _operands(phase):
    """(tensor in buffer A, tensor in buffer B) of a phase."""
    return ("w", "dy") if phase == "loss" else ("dy", "x")


def check_layer(config, layer, phase="loss", baseline=False):
    """Raise :exc:`ValueError` (one line, naming the reason) when the hardware cannot run the
    layer: an unknown phase, a field wider than ``dim_width``, a tensor (with the baseline's
    zero-spaced copy) not fitting its buffer."""
    if phase not in PHASES:
        raise ValueError(f"phase {phase!r} is not one of {', '.join(PHASES)}")
    if not config.has("is"):
        raise ValueError(f"configuration {config.name!r} does not generate the 'is' dataflow")
    g = geometry(config, layer, phase)
    limit = (1 << config.dim_width) - 1
    fields = {k: v for k, v in descriptor(config, layer, phase).items()
              if k not in ("phase", "baseline", "src_base_a", "src_base_b", "base_a", "base_b")}
    fields.update(virtual_h=max(layer.height + layer.dil_h * (layer.kernel_h - 1),
                                g["hd"] + layer.dil_h * (layer.kernel_h - 1)),
                  virtual_w=max(layer.width + layer.dil_w * (layer.kernel_w - 1),
                                g["wd"] + layer.dil_w * (layer.kernel_w - 1)))
    for name, v in fields.items():
        if v > limit:
            raise ValueError(f"{name} = {v} does not fit dim_width {config.dim_width}")
    ta, tb = _operands(phase)
    for buf, t, z, depth in (("A", ta, "za", config.buf_a_depth),
                             ("B", tb, "zb", config.buf_b_depth)):
        need = g[t] + (g[z] if baseline else 0)
        if need > depth:
            what = f"{t} and its zero-spaced copy have" if baseline and g[z] else f"{t} has"
            raise ValueError(f"{what} {need} elements, buffer {buf} holds {depth}")


def descriptor(config, layer, phase="loss", *, baseline=False):
    """The ``bpsa.gateware.frontends.bp_im2col.conv_backward.backward_layout`` field values of a phase of
    ``layer``; in the
    baseline the compact tensors sit right after the zero-spaced copies."""
    oh, ow = layer.out_hw
    g = geometry(config, layer, phase)
    return {"phase": PHASES.index(phase), "baseline": int(bool(baseline)),
            "n": layer.batch, "c": layer.channels, "h": layer.height, "w": layer.width,
            "k": layer.out_channels, "r": layer.kernel_h, "s": layer.kernel_w,
            "oh": oh, "ow": ow, "stride_h": layer.stride_h, "stride_w": layer.stride_w,
            "pad_h": layer.pad_h, "pad_w": layer.pad_w, "dil_h": layer.dil_h,
            "dil_w": layer.dil_w, "pad_bottom": layer.pad_b,
            "src_base_a": g["za"] if baseline else 0,
            "src_base_b": g["zb"] if baseline else 0, "base_a": 0, "base_b": 0,
            "sgd_en": 0, "sgd_shift": 0}


def random_tensors(config, layer, rng, zero_prob=0.0):
    """Random dY (``N x K x OH x OW``), W and X (int64, the operand range; by default no
    zeros, so every zero the array sees is structural)."""
    lo, hi = operand_range(config)
    oh, ow = layer.out_hw
    out = {}
    for name, shape in (("dy", (layer.batch, layer.out_channels, oh, ow)),
                        ("w", layer.w_shape), ("x", layer.x_shape)):
        t = rng.integers(lo, hi + 1, shape)
        if zero_prob:
            t[rng.random(shape) < zero_prob] = 0
        else:
            t[t == 0] = 1
        out[name] = t
    return out


def images(config, layer, phase, tensors, *, baseline=False):
    """``{"a": (first_word, words), "b": (first_word, words)}``: the compact operands of the
    phase in buffers A and B (from 0, or from ``src_base_*`` in the baseline)."""
    desc = descriptor(config, layer, phase, baseline=baseline)
    ta, tb = _operands(phase)
    return {"a": (desc["src_base_a"], [int(v) for v in np.asarray(tensors[ta]).ravel()]),
            "b": (desc["src_base_b"], [int(v) for v in np.asarray(tensors[tb]).ravel()])}


def expected(config, layer, phase, tensors):
    """``bpsa.models.golden.conv2d_input_grad`` (loss) or ``conv2d_weight_grad`` (gradient), wrapped
    to ``acc_width``."""
    # rows padded explicitly (top pad_h, bottom pad_b): the golden model pads symmetrically
    args = (layer.stride, (0, layer.pad_w), layer.dil)
    hp = layer.height + layer.pad_h + layer.pad_b
    if phase == "loss":
        out = golden.conv2d_input_grad(tensors["dy"], tensors["w"], (hp, layer.width), *args)
        out = out[:, :, layer.pad_h:layer.pad_h + layer.height]
    else:
        out = golden.conv2d_weight_grad(layer.padded_rows(tensors["x"]), tensors["dy"],
                                        (layer.kernel_h, layer.kernel_w), *args)
    return wrap_array(out, config.acc_width)


def assemble(config, layer, phase, outputs):
    """dX or dW from the ``out`` vectors ``(row, tile, data)``: tile ``t`` is column block
    ``t // kt``; the K-tile partial sums of a block are added here. Raises
    :exc:`AssertionError` for a wrong number or position of vectors."""
    g = geometry(config, layer, phase)
    assert len(outputs) == g["tiles"] * g["m"], \
        f"{len(outputs)} psum vectors, expected {g['tiles'] * g['m']}"
    cmat = np.zeros((g["m"], -(-g["ng"] // config.cols) * config.cols), dtype=np.int64)
    for row, tile, vec in outputs:
        assert row < g["m"] and tile < g["tiles"], f"psum at row {row}, tile {tile}"
        nt = tile // g["kt"]
        cmat[row, nt * config.cols:(nt + 1) * config.cols] += np.asarray(vec, dtype=np.int64)
    cmat = cmat[:, :g["ng"]]
    if phase == "loss":
        out = cmat.reshape(layer.channels, layer.batch, layer.height, layer.width)
        out = out.transpose(1, 0, 2, 3)
    else:
        out = cmat.reshape(layer.w_shape)
    return wrap_array(out, config.acc_width)


def summary(config, layer, phase, got, want, counters, *, baseline=False):
    """The ``bpsa sim --phase loss|gradient`` summary of one run."""
    g = geometry(config, layer, phase)
    ta, tb = _operands(phase)
    cycles = int(counters["cycles"])
    reorg = int(counters["cycles_reorg"])
    prologue = int(counters["cycles_prologue"])
    macs = g["m"] * g["kg"] * g["ng"]
    reads = {"a": int(counters["a_words"]), "b": int(counters["b_words"])}
    # Reorganization reads of the compact tensors: loss: dY (B); gradient: dY (A) then X (B).
    rr = int(counters["reorg_reads"])
    if baseline and phase == "gradient":
        # The dilated copy keeps every dY pixel; the rest of the reads are X's.
        reads["a"] += g["dy"]
        reads["b"] += rr - g["dy"]
    else:
        reads["b"] += rr
    foot = {"a": g[ta] + (g["za"] if baseline else 0), "b": g[tb] + (g["zb"] if baseline else 0)}
    out = {"match": bool(np.array_equal(got, want)) if got is not None else False,
           "phase": phase, "mode": "baseline" if baseline else "bp-im2col",
           "layer": layer.text(), "rows": config.rows, "cols": config.cols,
           "cycles": cycles, "cycles_prologue": prologue, "cycles_reorg": reorg,
           "cycles_compute": cycles - prologue - reorg,
           "buffer_words_read": reads,
           "reorg_words": {"read": rr, "written": int(counters["reorg_writes"])},
           "zeros_sent": int(counters["zeros_a"]) + int(counters["zeros_b"]),
           "zeros_sent_a": int(counters["zeros_a"]), "zeros_sent_b": int(counters["zeros_b"]),
           "tiles": int(counters["tiles"]), "vectors": int(counters["vectors"]),
           "footprint_words": foot, "extra_storage_words": foot["a"] + foot["b"] - g[ta] - g[tb],
           "useful_macs": macs,
           "utilization": macs / (config.rows * config.cols * cycles) if cycles else 0.0}
    return out
