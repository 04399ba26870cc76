"""Host side of the forward convolution (:class:`hw.conv_forward.ConvForward`).

Lays X and W out into the buffers' word images, builds the layer descriptor, assembles Y from
the drained rows, counts the traffic an explicit im2col would cause (from
:func:`sim.golden.lower_forward`), and runs a layer through the generated RTL under Verilator
(``bpsa sim --phase forward``). Layer strings look like ``C=3,H=32,W=32,K=8,R=7,S=7,stride=2,
pad=3,dilation=1,N=1`` (see :func:`parse_layer`).
"""

import hashlib
import json
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from . import golden
from .feeder_model import Layer
from .feeder_model import traffic as feeder_traffic
from .pe_model import wrap

__all__ = [
    "LAYER_KEYS", "ConvLayer", "parse_layer", "descriptor", "x_image", "w_image",
    "random_operands", "expected_y", "assemble", "traffic", "summary", "pack_struct",
    "unpack_struct", "run_forward", "run_forward_layers",
]

#: Keys of a layer string, and the defaults of the optional ones.
LAYER_KEYS = ("C", "H", "W", "K", "R", "S", "stride", "pad", "dilation", "N")
_DEFAULTS = {"N": 1, "stride": 1, "pad": 0, "dilation": 1}
_PAIR_KEYS = ("stride", "pad", "dilation")


def _pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


@dataclass(frozen=True)
class ConvLayer:
    """One forward convolution: X is ``batch x channels x height x width``, W is
    ``out_channels x channels x kernel_h x kernel_w``; stride, padding and dilation per axis."""
    batch: int
    channels: int
    height: int
    width: int
    out_channels: int
    kernel_h: int
    kernel_w: int
    stride_h: int = 1
    stride_w: int = 1
    pad_h: int = 0
    pad_w: int = 0
    dil_h: int = 1
    dil_w: int = 1
    pad_bottom: int | None = None      # bottom padding; None: pad_h (symmetric)

    @classmethod
    def conv(cls, n, c, h, w, k, r, s, stride=1, pad=0, dil=1, pad_bottom=None):
        """A layer from golden-style arguments (``stride``, ``pad``, ``dil``: int or (h, w));
        ``pad_bottom`` pads the bottom differently from the top."""
        (sh, sw), (ph, pw), (dh, dw) = _pair(stride), _pair(pad), _pair(dil)
        return cls(n, c, h, w, k, r, s, sh, sw, ph, pw, dh, dw, pad_bottom)

    @property
    def pad_b(self):
        return self.pad_h if self.pad_bottom is None else self.pad_bottom

    def padded_rows(self, x):
        """``x`` with its top / bottom padding made explicit (the golden model's padding is
        symmetric; the rows' is then 0)."""
        return np.pad(np.asarray(x, dtype=np.int64),
                      ((0, 0), (0, 0), (self.pad_h, self.pad_b), (0, 0)))

    @property
    def stride(self):
        return (self.stride_h, self.stride_w)

    @property
    def pad(self):
        return (self.pad_h, self.pad_w)

    @property
    def dil(self):
        return (self.dil_h, self.dil_w)

    @property
    def x_shape(self):
        return (self.batch, self.channels, self.height, self.width)

    @property
    def w_shape(self):
        return (self.out_channels, self.channels, self.kernel_h, self.kernel_w)

    @property
    def crs(self):
        """Elements of one im2col row (the depth of a context): ``C*R*S``."""
        return self.channels * self.kernel_h * self.kernel_w

    @property
    def out_hw(self):
        """``(OH, OW)``; raises ``ValueError`` when the kernel does not fit the padded input."""
        return golden.output_hw((self.height + self.pad_h + self.pad_b, self.width),
                                (self.kernel_h, self.kernel_w), self.stride, (0, self.pad_w),
                                self.dil)

    def feeder_layer(self, x_base=0):
        """The layer as :mod:`sim.feeder_model` sees it (X from element ``x_base``)."""
        return Layer(self.batch, self.channels, self.height, self.width, self.kernel_h,
                     self.kernel_w, self.stride_h, self.stride_w, self.pad_h, self.pad_w,
                     self.dil_h, self.dil_w, base=x_base, pad_bottom=self.pad_b)

    def text(self):
        """The layer string (:func:`parse_layer` reads it back)."""
        def v(h, w):
            return str(h) if h == w else f"{h}x{w}"
        return (f"C={self.channels},H={self.height},W={self.width},K={self.out_channels},"
                f"R={self.kernel_h},S={self.kernel_w},stride={v(*self.stride)},"
                f"pad={v(*self.pad)},dilation={v(*self.dil)},N={self.batch}")


def _value(key, text):
    parts = text.split("x") if key in _PAIR_KEYS else [text]
    try:
        vals = [int(p) for p in parts]
    except ValueError:
        vals = []
    if len(vals) != len(parts) or len(vals) not in (1, 2) or min(vals, default=-1) < 0:
        form = "a non-negative integer or HxW" if key in _PAIR_KEYS else "a non-negative integer"
        raise ValueError(f"layer key {key} must be {form}, not {text!r}")
    return vals[0] if len(vals) == 1 else tuple(vals)


def parse_layer(text):
    """A :class:`ConvLayer` from ``"C=..,H=..,W=..,K=..,R=..,S=..,stride=..,pad=..,
    dilation=..,N=.."``. ``C``, ``H``, ``K`` and ``R`` are required; ``W`` defaults to ``H``,
    ``S`` to ``R``, ``N`` to 1, ``stride`` to 1, ``pad`` to 0, ``dilation`` to 1. ``stride``,
    ``pad`` and ``dilation`` may be ``HxW`` pairs. Raises :exc:`ValueError` for unknown,
    repeated, missing or malformed keys and for sizes that give no output."""
    values = {}
    for item in (p.strip() for p in str(text).split(",")):
        if not item:
            continue
        key, sep, val = item.partition("=")
        key = key.strip()
        if not sep:
            raise ValueError(f"layer item {item!r} is not KEY=VALUE")
        if key not in LAYER_KEYS:
            raise ValueError(f"unknown layer key {key!r}; keys are {', '.join(LAYER_KEYS)}")
        if key in values:
            raise ValueError(f"layer key {key} given twice")
        values[key] = _value(key, val.strip())
    missing = [k for k in ("C", "H", "K", "R") if k not in values]
    if missing:
        raise ValueError(f"layer needs {', '.join(missing)} (keys: {', '.join(LAYER_KEYS)})")
    values.setdefault("W", values["H"])
    values.setdefault("S", values["R"])
    for k, v in _DEFAULTS.items():
        values.setdefault(k, v)
    for k in ("C", "H", "W", "K", "R", "S", "N"):
        if values[k] < 1:
            raise ValueError(f"layer key {k} must be at least 1, not {values[k]}")
    for k in ("stride", "dilation"):
        if min(_pair(values[k])) < 1:
            raise ValueError(f"layer key {k} must be at least 1, not {values[k]}")
    layer = ConvLayer.conv(values["N"], values["C"], values["H"], values["W"], values["K"],
                           values["R"], values["S"], values["stride"], values["pad"],
                           values["dilation"])
    layer.out_hw      # a kernel that does not fit the padded input raises here
    return layer


# --- buffer images and descriptor ----------------------------------------------------------

def descriptor(config, layer, x_base=0, w_base=0):
    """The :class:`~hw.conv_forward.ConvForward` descriptor of ``layer`` (a dict); raises
    :exc:`ValueError` with the reason when the hardware would refuse it."""
    from hw.conv_forward import layer_value
    d = {k: getattr(layer, k) for k in ("batch", "channels", "height", "width", "kernel_h",
                                         "kernel_w", "stride_h", "stride_w", "pad_h",
                                         "pad_w", "dil_h", "dil_w", "out_channels")}
    d.update(x_base=x_base, w_base=w_base, pad_bottom=layer.pad_b)
    return layer_value(config, d)


def _operand_range(config):
    w = config.operand_width
    return (-(1 << (w - 1)), 1 << (w - 1)) if config.operand_signed else (0, 1 << w)


def random_operands(config, layer, rng, zero_prob=0.1):
    """Random X and W (int64, the operand range, a fraction ``zero_prob`` of zeros)."""
    lo, hi = _operand_range(config)
    out = []
    for shape in (layer.x_shape, layer.w_shape):
        t = rng.integers(lo, hi, shape)
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
    """``sim.golden.conv2d`` wrapped to the accumulator width."""
    y = golden.conv2d(layer.padded_rows(x), w, layer.stride, (0, layer.pad_w), layer.dil)
    bits = config.acc_width
    return ((y + (1 << (bits - 1))) % (1 << bits)) - (1 << (bits - 1))


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
    :func:`sim.feeder_model.traffic`), ``im2col_elements`` (elements of the explicit im2col
    matrix :func:`sim.golden.lower_forward` builds, read once per tile) and ``im2col_words``
    (those packed ``feeder_bus_width`` to a word), ``x_words`` (words of X itself) and
    ``w_words`` (the W words of the layer)."""
    tiles = -(-layer.out_channels // config.cols)
    bw = config.feeder_bus_width
    zx = np.zeros(layer.x_shape, dtype=np.int64)
    zw = np.zeros((1,) + layer.w_shape[1:], dtype=np.int64)
    a = golden.lower_forward(layer.padded_rows(zx), zw, layer.stride, (0, layer.pad_w),
                             layer.dil).a
    words = feeder_traffic(config, layer.feeder_layer(x_base))["words_read"]
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


# --- running the RTL -----------------------------------------------------------------------

def run_forward_layers(config, layers, *, seed=1, random_base=False):
    """Run ``layers`` (a list of :class:`ConvLayer`) one after the other on one ConvForward
    generated for ``config`` under Verilator (cocotb module ``sim.tb_conv_forward``), with
    random X and W from ``seed``. Returns one summary dict per layer (see :func:`summary`);
    ``match`` tells whether Y equals ``sim.golden.conv2d``. Raises :exc:`ValueError` with the
    reason for a layer the hardware would refuse."""
    from .runner import run_cocotb
    for layer in layers:
        descriptor(config, layer)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "summary.json"
        env = {"BPSA_LAYERS": json.dumps([asdict(layer) for layer in layers]),
               "BPSA_SEED": str(seed), "BPSA_SUMMARY": str(out),
               "BPSA_RANDOM_BASE": "1" if random_base else ""}
        tag = f"{seed}_{hashlib.sha256(env['BPSA_LAYERS'].encode()).hexdigest()[:10]}"
        try:
            run_cocotb(config, "sim.tb_conv_forward", top="conv_forward",
                       testcase="forward_matches_golden", extra_env=env, tag=tag)
        except AssertionError:
            if not out.exists():
                raise
        return json.loads(out.read_text())


def run_forward(config, layer, *, seed=1):
    """:func:`run_forward_layers` for one layer: its summary dict."""
    return run_forward_layers(config, [layer], seed=seed)[0]
