"""Layer shapes: the one convolution layer type, the one FC layer type, their text form, and
the one output-size formula.

A convolution: X is ``batch x channels x height x width`` (N x C x H x W), W is
``out_channels x channels / groups x kernel_h x kernel_w`` (K x C/G x R x S), stride / padding /
dilation per axis; with ``groups`` G > 1 the channels split into G groups, output channels
``[g K/G, (g+1) K/G)`` reading input channels ``[g C/G, (g+1) C/G)`` (depthwise: G = C); ``OH = (H + 2 pad_h - dil_h (R - 1) - 1) // stride_h + 1`` and ``OW`` likewise
(:func:`out_size`). An FC layer ``Y = X W^T``: X is ``batch x inputs``, W ``outputs x inputs``.

Text form (``bpsa sim --layer``): ``C=..,H=..,W=..,K=..,R=..,S=..,stride=..,pad=..,
dilation=..,N=..,groups=..`` and ``N=..,I=..,O=..``.
"""

import numbers
import re
from dataclasses import asdict, dataclass, fields, replace

import numpy as np

__all__ = ["ConvLayer", "FcLayer", "LAYER_KEYS", "LayerGeometry", "POOL_KEYS", "PoolLayer",
           "check_fields", "conv_operands", "conv_params", "out_size", "output_hw", "pair",
           "parse_fc", "parse_layer", "parse_pool", "size_pair"]


def out_size(size, kernel, stride, pad, dil, pad_end=None):
    """Outputs along one axis: ``(size + pad + pad_end - dil (kernel - 1) - 1) // stride +
    1`` (``pad_end``: the far side's padding, ``pad`` unless given). May be 0 or negative
    when the dilated kernel does not fit; :func:`output_hw` checks."""
    pad_end = pad if pad_end is None else pad_end
    return (size + pad + pad_end - dil * (kernel - 1) - 1) // stride + 1


def _int(value, name):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer, not {value!r}")
    return int(value)


def pair(value, name="value"):
    """An integer or an ``(h, w)`` pair of integers (a tuple, list, array: anything with a
    length but a string) as a tuple of two Python ints. Raises :exc:`TypeError` for a
    non-integer and :exc:`ValueError` for a length other than 2, both naming ``name``."""
    if hasattr(value, "__len__") and not isinstance(value, (str, bytes)):
        if len(value) != 2:
            raise ValueError(f"{name} must be an integer or an (h, w) pair, not {value!r}")
        return (_int(value[0], name), _int(value[1], name))
    v = _int(value, name)
    return (v, v)


def conv_params(stride, padding, dilation):
    """``(stride, padding, dilation)`` as ``(h, w)`` pairs; :exc:`ValueError` naming the
    parameter for ``stride < 1``, ``padding < 0`` or ``dilation < 1``."""
    s, p, d = pair(stride, "stride"), pair(padding, "padding"), pair(dilation, "dilation")
    if min(s) < 1:
        raise ValueError(f"stride must be >= 1, not {stride!r}")
    if min(p) < 0:
        raise ValueError(f"padding must be >= 0, not {padding!r}")
    if min(d) < 1:
        raise ValueError(f"dilation must be >= 1, not {dilation!r}")
    return s, p, d


def output_hw(input_hw, kernel_hw, stride=1, padding=0, dilation=1):
    """Output size ``(OH, OW)`` of a convolution (:func:`out_size` on each axis).

    Raises :exc:`ValueError` (naming the parameter) for ``stride < 1``, ``padding < 0``,
    ``dilation < 1``, sizes ``< 1``, or a dilated kernel that does not fit in the padded input
    (which would give an empty or negative output)."""
    s, p, d = conv_params(stride, padding, dilation)
    hw, rs = pair(input_hw, "input_hw"), pair(kernel_hw, "kernel_hw")
    for name, v, given in (("input_hw", hw, input_hw), ("kernel_hw", rs, kernel_hw)):
        if min(v) < 1:
            raise ValueError(f"{name} must be >= 1 in both axes, not {given!r}")
    for axis in range(2):
        span = d[axis] * (rs[axis] - 1) + 1
        padded = hw[axis] + 2 * p[axis]
        if span > padded:
            raise ValueError(
                f"kernel_hw {rs} with dilation {d} spans {span} in axis {axis}, more than the "
                f"padded input: input_hw {hw} with padding {p} gives {padded}")
    return tuple(out_size(hw[a], rs[a], s[a], p[a], d[a]) for a in range(2))


def size_pair(value, name):
    """:func:`pair` of sizes: :exc:`ValueError` naming ``name`` when either is below 1."""
    hw = pair(value, name)
    if min(hw) < 1:
        raise ValueError(f"{name} must be >= 1 in both axes, not {value!r}")
    return hw


#: The operands of each convolution phase, and the form of each operand.
_PHASE_OPERANDS = {"forward": ("x", "w"), "loss": ("dy", "w"), "gradient": ("x", "dy")}
_OPERAND_FORMS = {"x": "N x C x H x W", "w": "K x C x R x S", "dy": "N x K x OH x OW"}


def conv_operands(phase, *, x=None, w=None, dy=None, input_hw=None, kernel_hw=None,
                  stride=1, padding=0, dilation=1, fit=True, groups=1):
    """The :class:`ConvLayer` whose ``phase`` (``"forward"``: ``x``, ``w``; ``"loss"``:
    ``dy``, ``w``, ``input_hw``; ``"gradient"``: ``x``, ``dy``, ``kernel_hw``) the operands
    describe (arrays, or anything :func:`numpy.shape` reads; the other phases' operands are
    ignored), checked against each other before any work: four dimensions each, the input
    channels of ``w`` and ``x``, the output channels of ``w`` and ``dy``, the batch of ``x``
    and ``dy``, ``dy``'s plane against the layer's output, ``stride``, ``padding`` and
    ``dilation`` (:func:`conv_params`). :exc:`ValueError` names the first disagreement.

    ``groups``: ``w`` has ``C / groups`` input channels (:class:`ConvLayer`'s ``groups``).

    ``fit``: a dilated kernel larger than the padded input is refused (:func:`output_hw`);
    ``False`` lets it through (``dy``'s plane is then not checked: the hardware refuses such a
    layer with KERNEL_TOO_LARGE)."""
    if phase not in _PHASE_OPERANDS:
        raise ValueError(f"phase must be one of {', '.join(_PHASE_OPERANDS)}, not {phase!r}")
    st, pad, dil = conv_params(stride, padding, dilation)
    given = {"x": x, "w": w, "dy": dy}
    shape = {}
    for name in _PHASE_OPERANDS[phase]:
        if given[name] is None:
            raise ValueError(f"the {phase} needs {name} ({_OPERAND_FORMS[name]})")
        shape[name] = tuple(int(v) for v in np.shape(given[name]))
        if len(shape[name]) != 4:
            raise ValueError(f"{name} must have 4 dimensions ({_OPERAND_FORMS[name]}), not "
                             f"shape {shape[name]}")
    g = groups
    if isinstance(g, bool) or not isinstance(g, numbers.Integral) or g < 1:
        raise ValueError(f"groups must be a positive integer, not {g!r}")
    if phase == "forward":
        (n, c, h, wd), (k, c_w, r, s) = shape["x"], shape["w"]
        if c_w * g != c:
            raise ValueError(f"w has {c_w} input channels but x has {c}"
                             + (f" ({c} / groups {g} = {c / g:g})" if g != 1 else ""))
    elif phase == "loss":
        (n, k_dy), (k, c, r, s) = shape["dy"][:2], shape["w"]
        c *= g
        h, wd = size_pair(input_hw, "input_hw")
        if k_dy != k:
            raise ValueError(f"dy has {k_dy} channels but w has {k} output channels")
    else:
        (n, c, h, wd), (n_dy, k) = shape["x"], shape["dy"][:2]
        r, s = size_pair(kernel_hw, "kernel_hw")
        if n_dy != n:
            raise ValueError(f"dy has batch {n_dy} but x has {n}")
    if fit:
        out = output_hw((h, wd), (r, s), st, pad, dil)
    else:
        out = tuple(out_size(*a) for a in zip((h, wd), (r, s), st, pad, dil))
    if "dy" in shape and min(out) > 0 and shape["dy"][2:] != out:
        raise ValueError(
            f"dy must have shape (N, {k}, {out[0]}, {out[1]}) for input_hw {(h, wd)}, "
            f"kernel_hw {(r, s)}, stride {st}, padding {pad}, dilation {dil}; not "
            f"{shape['dy']}")
    return ConvLayer.conv(n, c, h, wd, k, r, s, st, pad, dil, groups=g)


def check_fields(dim_width, what, **values):
    """:exc:`ValueError` when one of ``values`` (an int or a tuple of ints, by the name a
    message gives it) does not fit a descriptor's ``dim_width``-bit shape fields; ``what``
    names the layer in the message."""
    limit = (1 << dim_width) - 1
    for key, value in values.items():
        if any(not 0 <= v <= limit for v in (value if isinstance(value, tuple) else (value,))):
            raise ValueError(f"{what} {key} = {value} does not fit the descriptor's "
                             f"{dim_width}-bit fields (dim_width {dim_width}: at most {limit})")


class LayerGeometry:
    """Per-axis views and the output size of a layer with the fields ``height``, ``width``,
    ``kernel_h``, ``kernel_w``, ``stride_h``, ``stride_w``, ``pad_h``, ``pad_w``, ``dil_h``,
    ``dil_w`` and ``pad_bottom`` (``None``: ``pad_h``, symmetric)."""

    @property
    def pad_b(self):
        """Bottom padding (``pad_h`` unless set)."""
        return self.pad_h if self.pad_bottom is None else self.pad_bottom

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
    def out_hw(self):
        """``(OH, OW)``; raises ``ValueError`` when the kernel does not fit the padded input."""
        return output_hw((self.height + self.pad_h + self.pad_b, self.width),
                         (self.kernel_h, self.kernel_w), self.stride, (0, self.pad_w),
                         self.dil)

    @property
    def dilated_out_hw(self):
        """``(Hd, Wd) = (stride_h (OH - 1) + 1, stride_w (OW - 1) + 1)``: the output with
        ``stride - 1`` zeros between neighbours (the dilated dY of the weight gradient); raises
        like :attr:`out_hw`."""
        oh, ow = self.out_hw
        return (self.stride_h * (oh - 1) + 1, self.stride_w * (ow - 1) + 1)


@dataclass(frozen=True)
class ConvLayer(LayerGeometry):
    """One convolution layer (see the module docstring); ``pad_bottom`` pads the bottom
    differently from the top (``None``: ``pad_h``, symmetric). ``groups``: :exc:`ValueError`
    unless it divides ``channels`` and ``out_channels``. A descriptor runs an ordinary
    convolution: :meth:`group_layer` is the layer a group is (:mod:`bpsa.plan.groups` packs
    groups side by side)."""
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
    pad_bottom: int | None = None
    groups: int = 1

    def __post_init__(self):
        g = self.groups
        if g != 1 and (isinstance(g, bool) or not isinstance(g, numbers.Integral) or g < 1
                       or self.channels % g or self.out_channels % g):
            raise ValueError(f"groups = {g!r} must be a positive integer that divides the "
                             f"input channels ({self.channels}) and the output channels "
                             f"({self.out_channels})")

    @classmethod
    def conv(cls, n, c, h, w, k, r, s, stride=1, pad=0, dil=1, pad_bottom=None, groups=1):
        """A layer from golden-style arguments (``stride``, ``pad``, ``dil``: int or (h, w))."""
        (sh, sw), (ph, pw), (dh, dw) = pair(stride), pair(pad), pair(dil)
        return cls(n, c, h, w, k, r, s, sh, sw, ph, pw, dh, dw, pad_bottom, groups)

    def group_layer(self):
        """The ordinary convolution one group is (``channels / groups`` input and
        ``out_channels / groups`` output channels); the layer itself when ``groups`` is 1."""
        if self.groups == 1:
            return self
        return replace(self, channels=self.channels // self.groups,
                       out_channels=self.out_channels // self.groups, groups=1)

    def group_slices(self):
        """Each group's ``(input channels, output channels)`` as slices, group 0 first: X's
        and dX's channels ``[0]``, W's, Y's and dY's ``[1]`` (W's second axis is the group's
        own ``channels / groups``)."""
        cg, kg = self.channels // self.groups, self.out_channels // self.groups
        return [(slice(g * cg, (g + 1) * cg), slice(g * kg, (g + 1) * kg))
                for g in range(self.groups)]

    @property
    def macs(self):
        """The layer's multiply-accumulates a phase: ``N K OH OW (C / groups) R S``."""
        oh, ow = self.out_hw
        return self.batch * self.out_channels * oh * ow * self.crs

    def to_dict(self):
        """The layer's fields as a JSON-able dict (a job's ``"layer"``; :meth:`from_dict`)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, d):
        """The layer of :meth:`to_dict`'s dict; a missing optional field takes its default,
        a key that is not a field (a pooling job's ``kind`` and ``relu``) is left out."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})

    def padded_rows(self, x):
        """``x`` with its top / bottom padding made explicit (the golden model's padding is
        symmetric; the rows' is then 0)."""
        return np.pad(np.asarray(x, dtype=np.int64),
                      ((0, 0), (0, 0), (self.pad_h, self.pad_b), (0, 0)))

    @property
    def x_shape(self):
        return (self.batch, self.channels, self.height, self.width)

    @property
    def w_shape(self):
        return (self.out_channels, self.channels // self.groups, self.kernel_h, self.kernel_w)

    @property
    def crs(self):
        """Elements of one im2col row (the depth of a context): ``(C / groups) R S``."""
        return self.channels // self.groups * self.kernel_h * self.kernel_w

    def check_fields(self, dim_width):
        """:exc:`ValueError` naming the first of the layer's sizes (by its key in the text
        form, :data:`LAYER_KEYS`) that does not fit a descriptor's ``dim_width``-bit fields
        (:func:`check_fields`)."""
        g = self.group_layer()          # the hardware runs a group at a time
        check_fields(dim_width, "layer", N=g.batch, C=g.channels, H=g.height, W=g.width,
                     K=g.out_channels, R=g.kernel_h, S=g.kernel_w, stride=g.stride,
                     pad=g.pad, dilation=g.dil)

    def baseline(self, phase):
        """The forward convolution that computes ``phase`` (loss or gradient) of this layer
        the traditional way, on the zero-spaced tensors
        :func:`bpsa.host.driver.baseline_loss_operands` /
        :func:`bpsa.host.driver.baseline_gradient_operands` build."""
        hd, wd = self.dilated_out_hw       # raises when the kernel does not fit
        drh, drw = self.dil_h * (self.kernel_h - 1), self.dil_w * (self.kernel_w - 1)
        if phase == "loss":
            return ConvLayer.conv(self.batch, self.out_channels, self.height + drh,
                                  self.width + drw, self.channels, self.kernel_h,
                                  self.kernel_w, 1, 0, self.dil)
        if phase == "gradient":
            return ConvLayer.conv(self.channels, self.batch, hd + drh, wd + drw,
                                  self.out_channels, hd, wd, self.dil, 0, 1)
        raise ValueError(f"the baseline applies to loss and gradient, not {phase!r}")

    def text(self):
        """The layer string (:func:`parse_layer` reads it back)."""
        def v(h, w):
            return str(h) if h == w else f"{h}x{w}"
        return (f"C={self.channels},H={self.height},W={self.width},K={self.out_channels},"
                f"R={self.kernel_h},S={self.kernel_w},stride={v(*self.stride)},"
                f"pad={v(*self.pad)},dilation={v(*self.dil)},N={self.batch}"
                + (f",groups={self.groups}" if self.groups != 1 else ""))


#: Keys of a layer string, and the defaults of the optional ones.
LAYER_KEYS = ("C", "H", "W", "K", "R", "S", "stride", "pad", "dilation", "N", "groups")
_DEFAULTS = {"N": 1, "stride": 1, "pad": 0, "dilation": 1, "groups": 1}
_PAIR_KEYS = ("stride", "pad", "dilation")


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
    dilation=..,N=..,groups=.."``. ``C``, ``H``, ``K`` and ``R`` are required; ``W`` defaults
    to ``H``, ``S`` to ``R``, ``N`` to 1, ``stride`` to 1, ``pad`` to 0, ``dilation`` to 1,
    ``groups`` to 1. ``stride``,
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
    for k in ("C", "H", "W", "K", "R", "S", "N", "groups"):
        if values[k] < 1:
            raise ValueError(f"layer key {k} must be at least 1, not {values[k]}")
    for k in ("stride", "dilation"):
        if min(pair(values[k])) < 1:
            raise ValueError(f"layer key {k} must be at least 1, not {values[k]}")
    layer = ConvLayer.conv(values["N"], values["C"], values["H"], values["W"], values["K"],
                           values["R"], values["S"], values["stride"], values["pad"],
                           values["dilation"], groups=values["groups"])
    layer.out_hw      # a kernel that does not fit the padded input raises here
    return layer


@dataclass(frozen=True)
class FcLayer:
    """One fully connected layer ``Y = X W^T``: ``batch`` rows, ``inputs``, ``outputs``."""
    batch: int
    inputs: int
    outputs: int

    def text(self):
        return f"N={self.batch},I={self.inputs},O={self.outputs}"

    def check_fields(self, dim_width):
        """:exc:`ValueError` when ``N``, ``I`` or ``O`` does not fit a descriptor's
        ``dim_width``-bit fields (:func:`check_fields`)."""
        check_fields(dim_width, "FC layer", N=self.batch, I=self.inputs, O=self.outputs)


def parse_fc(text):
    """``N=8,I=20,O=10`` (``N`` defaults to 1) -> :class:`FcLayer`; :exc:`ValueError` names a
    bad or missing field."""
    fields = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        m = re.fullmatch(r"([A-Za-z]+)\s*=\s*(\d+)", part)
        if not m or m.group(1).upper() not in ("N", "I", "O"):
            raise ValueError(f"FC layer field {part!r} is not N=, I= or O= with an integer")
        fields[m.group(1).upper()] = int(m.group(2))
    for key in ("I", "O"):
        if key not in fields:
            raise ValueError(f"FC layer {text!r} has no {key}=")
    layer = FcLayer(fields.get("N", 1), fields["I"], fields["O"])
    for name, v in asdict(layer).items():
        if v < 1:
            raise ValueError(f"FC layer {name} = {v}: must be at least 1")
    return layer


#: Keys of a pooling layer's text (``bpsa sim --phase pool --layer``).
POOL_KEYS = ("C", "H", "W", "R", "S", "stride", "pad", "N", "kind", "relu")

#: Pooling kinds a layer may name (``global_avg``: ``avg`` over the whole plane).
_POOL_KINDS = ("max", "avg", "global_avg")


def global_avg_window(height, width):
    """``(kernel, stride, pad)`` pairs the pooling unit runs a global average of ``height x
    width`` planes with: ``avg`` with the plane as its window, strided by the plane (one
    window either way; with the stride the plane, the backward's walk finds each element's
    one covering window in a step instead of scanning the positions of a stride-1 window),
    no padding."""
    return (height, width), (height, width), (0, 0)


@dataclass(frozen=True)
class PoolLayer:
    """One pooling layer of ``batch`` images of ``channels`` planes ``height x width``:
    ``kind`` (``max``, ``avg``, ``global_avg``), window ``kernel``, ``stride``, ``pad`` (pairs;
    ``global_avg``: :func:`global_avg_window`), ``relu`` (forward: ReLU on the store path; backward: the
    ReLU's mask)."""
    batch: int
    channels: int
    height: int
    width: int
    kind: str
    kernel: tuple
    stride: tuple
    pad: tuple
    relu: bool = False

    @property
    def out_hw(self):
        return tuple(out_size(n, k, s, p, 1) for n, k, s, p in zip(
            (self.height, self.width), self.kernel, self.stride, self.pad))

    def check_fields(self, dim_width):
        """:exc:`ValueError` naming the first size (by its key, :data:`POOL_KEYS`) that does
        not fit a descriptor's ``dim_width``-bit fields (:func:`check_fields`)."""
        check_fields(dim_width, "pooling layer", N=self.batch, C=self.channels, H=self.height,
                     W=self.width, R=self.kernel[0], S=self.kernel[1], stride=self.stride,
                     pad=self.pad)

    def text(self):
        def hw(v):
            return f"{v[0]}x{v[1]}"
        return (f"C={self.channels},H={self.height},W={self.width},R={self.kernel[0]},"
                f"S={self.kernel[1]},stride={hw(self.stride)},pad={hw(self.pad)},"
                f"N={self.batch},kind={self.kind},relu={int(self.relu)}")


def parse_pool(text):
    """A :class:`PoolLayer` from ``"C=..,H=..,W=..,R=..,S=..,stride=..,pad=..,N=..,
    kind=max|avg|global_avg,relu=0|1"``. ``C``, ``H`` and ``kind`` are required, and ``R``
    unless the kind is ``global_avg``; ``W`` defaults to ``H``, ``S`` to ``R``, ``stride``
    to the kernel, ``pad`` to 0, ``N`` to 1, ``relu`` to 0. :exc:`ValueError` names a bad
    key or value, a zero stride, padding above kernel // 2 and a window larger than the
    padded input."""
    values = {}
    for item in (p.strip() for p in str(text).split(",")):
        if not item:
            continue
        key, sep, val = item.partition("=")
        key, val = key.strip(), val.strip()
        if not sep:
            raise ValueError(f"pooling layer item {item!r} is not KEY=VALUE")
        if key not in POOL_KEYS:
            raise ValueError(f"unknown pooling layer key {key!r}; keys are "
                             f"{', '.join(POOL_KEYS)}")
        if key in values:
            raise ValueError(f"pooling layer key {key} given twice")
        if key == "kind":
            if val not in _POOL_KINDS:
                raise ValueError(f"pooling kind must be one of {', '.join(_POOL_KINDS)}, not "
                                 f"{val!r}")
            values[key] = val
        elif key == "relu":
            if val not in ("0", "1"):
                raise ValueError(f"pooling layer key relu must be 0 or 1, not {val!r}")
            values[key] = val == "1"
        else:
            values[key] = _value(key, val)
    kind = values.get("kind")
    need = ["C", "H", "kind"] + ([] if kind == "global_avg" else ["R"])
    missing = [k for k in need if k not in values]
    if missing:
        raise ValueError(f"pooling layer needs {', '.join(missing)} (keys: "
                         f"{', '.join(POOL_KEYS)})")
    h = values["H"]
    w = values.get("W", h)
    for k in ("C", "H", "N"):
        if values.get(k, 1) < 1:
            raise ValueError(f"pooling layer key {k} must be at least 1, not {values[k]}")
    if w < 1:
        raise ValueError(f"pooling layer key W must be at least 1, not {w}")
    if kind == "global_avg":
        extra = [k for k in ("R", "S", "stride", "pad") if k in values]
        if extra:
            raise ValueError(f"global_avg pools the whole plane; drop {', '.join(extra)}")
        kernel, stride, pad = global_avg_window(h, w)
    else:
        kernel = (values["R"], values.get("S", values["R"]))
        if min(kernel) < 1:
            raise ValueError(f"pooling kernel must be at least 1, not {kernel}")
        stride = pair(values.get("stride", kernel))
        pad = pair(values.get("pad", 0))
        if min(stride) < 1:
            raise ValueError(f"pooling layer key stride must be at least 1, not {stride}")
        if pad[0] > kernel[0] // 2 or pad[1] > kernel[1] // 2:
            raise ValueError(f"pooling padding {pad} is more than kernel // 2 "
                             f"({kernel[0] // 2}, {kernel[1] // 2})")
        if kernel[0] > h + 2 * pad[0] or kernel[1] > w + 2 * pad[1]:
            raise ValueError(f"pooling window {kernel} is larger than the padded input "
                             f"({h + 2 * pad[0]}, {w + 2 * pad[1]})")
    return PoolLayer(values.get("N", 1), values["C"], h, w, kind, kernel, stride, pad,
                     values.get("relu", False))
