"""Host side of the forward convolution (:class:`bpsa.gateware.frontends.conv_forward.ConvForward`).

Lays X and W out into the buffers' word images, builds the layer descriptor, assembles Y from
the drained rows, counts the traffic an explicit im2col would cause (from
:func:`bpsa.models.golden.lower_forward`) and summarizes a run: what the engine top's cocotb
testbench (:mod:`bpsa.sim.testbenches.tb_conv_forward`) and the Amaranth-simulator tests share.
:func:`bpsa.sim.simcmd.run_forward_layers` runs layers through the generated RTL under Verilator
(``bpsa sim --engine --phase forward``). Layer strings look like
``C=3,H=32,W=32,K=8,R=7,S=7,stride=2, pad=3,dilation=1,N=1`` (see :func:`parse_layer`).
"""

import numpy as np

from bpsa.models import golden
from bpsa.models.feeder_model import FeederDescriptor
from bpsa.models.feeder_model import traffic as feeder_traffic
from bpsa.spec.numeric import operand_range, wrap, wrap_array

__all__ = [
    "descriptor", "x_image", "w_image", "random_operands", "expected_y",
    "assemble", "traffic", "summary", "pack_struct", "unpack_struct",
]


# --- buffer images and descriptor ----------------------------------------------------------

def descriptor(config, layer, x_base=0, w_base=0):
    """The :class:`~bpsa.gateware.frontends.conv_forward.ConvForward` descriptor of ``layer`` (a
    dict); raises :exc:`ValueError` with the reason when the hardware would refuse it."""
    from bpsa.gateware.frontends.conv_forward import layer_value
    d = {k: getattr(layer, k) for k in ("batch", "channels", "height", "width", "kernel_h",
                                         "kernel_w", "stride_h", "stride_w", "pad_h",
                                         "pad_w", "dil_h", "dil_w", "out_channels")}
    d.update(x_base=x_base, w_base=w_base, pad_bottom=layer.pad_b)
    return layer_value(config, d)


def random_operands(config, layer, rng, zero_prob=0.1):
    """Random X and W (int64, the operand range, a fraction ``zero_prob`` of zeros; floating
    point: encodings, :func:`bpsa.sim.gemm.random_float_operands`)."""
    if config.is_float:
        from bpsa.sim.gemm import random_float_operands
        return tuple(random_float_operands(config.arithmetic, shape, rng, zero_prob)
                     for shape in (layer.x_shape, layer.w_shape))
    lo, hi = operand_range(config)
    out = []
    for shape in (layer.x_shape, layer.w_shape):
        t = rng.integers(lo, hi + 1, shape)
        t[rng.random(shape) < zero_prob] = 0
        out.append(t)
    return tuple(out)


def x_image(config, layer, x, x_base=0):
    """``(first, words)``: the X SRAM words holding X flattened from element ``x_base``,
    ``words`` int64 of shape (count, B), starting at word ``first`` (other positions 0)."""
    bw = config.feeder_bus_width
    xs = np.asarray(x, dtype=np.int64).ravel()
    first, end = x_base // bw, -(-(x_base + xs.size) // bw)
    flat = np.zeros((end - first) * bw, dtype=np.int64)
    flat[x_base - first * bw:x_base - first * bw + xs.size] = xs
    return first, flat.reshape(-1, bw)


def w_image(config, layer, w):
    """The W buffer words (int64, ``tiles * CRS`` x ``cols``) from ``w_base``: word ``t*CRS +
    e`` holds ``W[t*cols + j, c, r, q]`` in lane ``j``, ``e = (c*R + r)*S + q``; 0 past K."""
    cols = config.cols
    w = np.asarray(w, dtype=np.int64).reshape(layer.out_channels, layer.crs)
    tiles = -(-layer.out_channels // cols)
    padded = np.zeros((tiles * cols, layer.crs), dtype=np.int64)
    padded[:layer.out_channels] = w
    return padded.reshape(tiles, cols, layer.crs).transpose(0, 2, 1).reshape(-1, cols)


def expected_y(config, layer, x, w):
    """``bpsa.models.golden.conv2d`` wrapped to the accumulator width (floating point:
    :func:`bpsa.models.float_layers.conv2d`, the fp32 encodings)."""
    if config.is_float:
        from bpsa.models import float_layers
        return float_layers.conv2d(layer.padded_rows(x), w, config.arithmetic, layer.stride,
                                   (0, layer.pad_w), layer.dil).astype(np.int64)
    y = golden.conv2d(layer.padded_rows(x), w, layer.stride, (0, layer.pad_w), layer.dil)
    return wrap_array(y, config.acc_width)


def assemble(config, layer, rows):
    """Y (N x K x OH x OW, int64) from the drained rows, each ``(n, k0, oh, ow0, row,
    lanes)``. Raises :exc:`AssertionError` for a position outside Y, a position seen twice,
    or one never seen."""
    oh_n, ow_n = layer.out_hw
    y = np.zeros((layer.batch, layer.out_channels, oh_n, ow_n), dtype=np.int64)
    seen = np.zeros((layer.batch, -(-layer.out_channels // config.cols), oh_n, ow_n), dtype=int)
    for n, k0, oh, ow0, row, lanes in rows:
        ow = ow0 + row
        if k0 % config.cols or not (n < layer.batch and k0 < layer.out_channels and oh < oh_n
                                    and ow < ow_n):
            raise AssertionError(f"row (n={n}, k0={k0}, oh={oh}, ow={ow}) is outside Y "
                                 f"{y.shape}")
        seen[n, k0 // config.cols, oh, ow] += 1
        k = min(config.cols, layer.out_channels - k0)
        y[n, k0:k0 + k, oh, ow] = lanes[:k]
    if (seen != 1).any():
        bad = np.argwhere(seen != 1)[0]
        raise AssertionError(f"{int((seen != 1).sum())} Y rows missing or repeated, first at "
                             f"(n, tile, oh, ow) = {tuple(int(v) for v in bad)}: "
                             f"{int(seen[tuple(bad)])} times")
    return y


def traffic(config, layer, x_base=0):
    """Traffic figures of a whole layer (all output-channel tiles; the feeder re-reads X for
    each): ``model_words_read`` (the X SRAM words the feeder reads, from
    :func:`bpsa.models.feeder_model.traffic`), ``im2col_elements`` (elements of the explicit im2col
    matrix :func:`bpsa.models.golden.lower_forward` builds, read once per tile) and ``im2col_words``
    (those packed ``feeder_bus_width`` to a word), ``x_words`` (words of X itself) and
    ``w_words`` (the W words of the layer)."""
    tiles = -(-layer.out_channels // config.cols)
    bw = config.feeder_bus_width
    zx = np.zeros(layer.x_shape, dtype=np.int64)
    zw = np.zeros((1,) + layer.w_shape[1:], dtype=np.int64)
    a = golden.lower_forward(layer.padded_rows(zx), zw, layer.stride, (0, layer.pad_w),
                             layer.dil).a
    words = feeder_traffic(config, FeederDescriptor.of(layer, base=x_base))["words_read"]
    return {"model_words_read": tiles * words, "im2col_elements": tiles * a.size,
            "im2col_words": tiles * -(-a.size // bw),
            "x_words": -(-int(np.prod(layer.x_shape)) // bw), "w_words": tiles * layer.crs}


def summary(config, layer, got, want, counters, x_base=0):
    """The ``bpsa sim --phase forward`` summary of one run."""
    oh_n, ow_n = layer.out_hw
    macs = layer.batch * layer.out_channels * oh_n * ow_n * layer.crs
    cycles = int(counters["cycles"])
    out = {"match": bool(np.array_equal(got, want)) if got is not None else False,
           "phase": "forward", "layer": layer.text(), "rows": config.rows,
           "cols": config.cols, "bus_width": config.feeder_bus_width,
           "lane_regs": config.feeder_lane_regs,
           "k_tiles": -(-layer.out_channels // config.cols),
           "contexts": layer.batch * oh_n * -(-ow_n // config.rows),
           "useful_macs": macs, "cycles": cycles,
           "utilization": macs / (config.rows * config.cols * cycles) if cycles else 0.0}
    out.update({k: int(v) for k, v in counters.items() if k not in ("cycles", "words_read")})
    out["sram_words_read"] = int(counters["words_read"])
    out.update(traffic(config, layer, x_base))
    return out


# --- struct packing (Verilog ports are flat vectors) ---------------------------------------

def pack_struct(layout, values):
    """The integer of a ``StructLayout`` port from a dict of field values (ints, or lists of
    ints for ``ArrayLayout`` fields)."""
    v = 0
    for name, field in layout:
        val = values[name]
        if isinstance(val, (list, tuple, np.ndarray)):
            ew = field.width // len(val)
            val = sum((int(e) & ((1 << ew) - 1)) << (i * ew) for i, e in enumerate(val))
        v |= (int(val) & ((1 << field.width) - 1)) << field.offset
    return v


def unpack_struct(layout, value, arrays=None):
    """A dict of the fields of a ``StructLayout`` port value; fields named in ``arrays``
    (name -> (element width, count, signed)) become lists of ints."""
    out = {}
    for name, field in layout:
        v = (int(value) >> field.offset) & ((1 << field.width) - 1)
        if arrays and name in arrays:
            ew, n, sgn = arrays[name]
            v = [wrap((v >> (i * ew)) & ((1 << ew) - 1), ew, sgn) for i in range(n)]
        out[name] = v
    return out
