"""The accelerator controller's tiling of a layer, in Python: group sizes, row bands and the
sub-layer each band hands to an engine.

:func:`plan` and :func:`fc_plan` run the set-up programs of :mod:`bpsa.plan.setup`, which the
controller's set-up sequencer runs in hardware; :mod:`bpsa.host.driver` uses :func:`plan` to
refuse layers before touching the hardware, and ``tests/test_plan_tiling.py`` checks, with
:mod:`bpsa.models.golden` alone, that running every band as its own asymmetrically padded
sub-layer and putting the pieces together gives the whole layer.

Row bands (*spatial tiling*)
    When a single channel plane does not fit a buffer bank or the P buffer, the controller cuts
    the layer into bands of rows and runs every band as a layer of its own. A group's band of
    several channels is loaded as one DMA run per channel (forward: one channel a group, since
    the X SRAM packs ``feeder_bus_width`` elements a word):

    forward, gradient
        bands of ``bh`` output rows ``[o0, o0 + obh)``. A band reads input rows ``[o0 s - p,
        (o0 + obh - 1) s - p + d(R-1)]``; the rows inside the image are loaded (``y0``,
        ``hb``), the rest are the band's top / bottom padding (``pt``, ``pb``). The forward
        band's Y rows are stored at ``o0``; the gradient's bands add up in P.
    loss
        bands of ``bh`` dX rows ``[h0, h0 + hb)``. The band needs dY rows ``[oh_lo, oh_hi]``,
        ``oh_lo = max(0, (h0 + p - d(R-1)) // s)``, ``oh_hi = min(OH - 1, (h0 + hb - 1 + p)
        // s)``; with top padding ``pt = p + h0 - oh_lo s`` the band's transposed convolution
        puts every dY row where the whole layer does. ``pb`` is the bottom padding that makes
        ``oh_hi - oh_lo + 1`` the band's output height.

    A layer that fits keeps one band (``banded`` is false) and groups of several channels.

Channel blocks
    The loss computes ``cblock`` dX channels at a time (W of one output channel for them must
    fit a bank of A, and P one dX row of each); the gradient ``kblock`` output channels at a
    time (P holds their dW rows for a channel group). ``cblocks`` / ``kblocks`` count them; a
    layer that fits has one.
    Banding the forward or the gradient needs ``pad_h <= dil_h (R - 1)`` (else a band could lie
    wholly in the padding); such layers are refused when they do not fit.

Column strips (*the driver's width tiling*)
    The controller tiles channels, batch and rows, but one row band still spans the whole
    width. A layer whose rows are too wide for a bank is cut by the *driver* into strips of
    columns (:func:`column_strips`), each one descriptor of a narrower layer with ``pad_w =
    0`` whose operands the driver gathers on the host (zero padding columns included):

    forward, gradient
        strips of Y / dY columns ``[q0, q0 + t)``; a strip reads the padded input's columns
        ``[q0 s, q0 s + W')``, ``W' = (t - 1) s + d(S-1) + 1``. Forward Y columns are
        stored at ``q0``; the gradient's partial dW of the strips are added on the host
        (``acc_width``-bit wrapping sums, exactly the hardware's).
    loss
        strips of dX columns ``[x0, x0 + t)``, padded columns ``[a, b) = [x0 + p, x0 + t +
        p)``. They need dY columns ``[q0, q1)``, ``q0 = max(0, (a - d(S-1)) // s)``, ``q1 =
        min(OW, (b - 1) // s + 1)``; the strip's transposed convolution (``W' = (q1 - q0 -
        1) s + d(S-1) + 1``, no padding) puts every one of them where the whole layer does,
        shifted by ``q0 s``, so dX columns ``[x0, x0 + t)`` are its columns from ``skip = a
        - q0 s`` (zero past ``W'``: no dY column reaches them).
"""

from dataclasses import dataclass, replace

from bpsa.plan import bands as band_programs
from bpsa.plan import setup, space_to_depth
from bpsa.plan.grammar import Refusal, evaluate
from bpsa.spec.layer import ConvLayer, out_size, pair
from bpsa.spec.regmap import (FORWARD_MODE_NAMES, MODE_NAMES, POOL_KIND_NAMES, Mode, Phase,
                              PoolKind)

__all__ = ["Band", "Strip", "bands", "column_strips", "default_mode", "fc_plan", "mode_value",
           "plan", "plan_or_strips", "pool_plan", "rewrite_of", "setup_descriptor", "strips"]


@dataclass(frozen=True)
class Band:
    """One band: ``out0`` / ``out_rows``: the rows of the banded output (forward: Y rows,
    loss: dX rows, gradient: dY rows); ``in0`` / ``in_rows``: the rows of the input the band
    loads (forward, gradient: X rows; loss: dY rows); ``pad_top`` / ``pad_bottom``: the
    engine's padding; ``engine_h`` / ``engine_oh``: the engine's ``H`` and ``OH``."""
    out0: int
    out_rows: int
    in0: int
    in_rows: int
    pad_top: int
    pad_bottom: int
    engine_h: int
    engine_oh: int


@dataclass(frozen=True)
class Strip:
    """One column strip: ``out0`` / ``out_cols``: the columns of the output it produces
    (forward: Y, loss: dX, gradient: dY, whose dW adds up); ``in0`` / ``in_cols``: the input
    columns it reads (forward, gradient: X columns of the unpadded image, ``in0 < 0`` and
    columns past W being padding; loss: dY columns); ``engine_w``: the strip layer's ``W``
    (``pad_w = 0``); ``skip``: loss only, the first column of the strip's dX that is kept.
    A loss strip no dY column reaches has ``in_cols == 0`` (its dX is zero, nothing runs)."""
    out0: int
    out_cols: int
    in0: int
    in_cols: int
    engine_w: int
    skip: int = 0


def _dims(h, w, r, s, stride, pad, dil):
    drh = dil[0] * (r - 1)
    return drh, out_size(h, r, stride[0], pad[0], dil[0]), out_size(w, s, stride[1], pad[1],
                                                                  dil[1])


def _ceil(a, b):
    return -(-a // b)


def mode_value(mode):
    """The MODE field (:class:`bpsa.spec.regmap.Mode`) of a mode name (``"bp_im2col"``,
    ``"zero_free"``, and for the forward ``"feeder"`` (0) or ``"channel_first"``; ``-`` may
    stand for ``_``) or value."""
    if isinstance(mode, str):
        by_name = {name: m for m, name in MODE_NAMES.items()}
        by_name.update({name: Mode(v) for v, name in FORWARD_MODE_NAMES.items()})
        key = mode.replace("-", "_")
        if key not in by_name:
            raise ValueError(f"mode must be one of {sorted(by_name)}, not {mode!r}")
        return by_name[key]
    return Mode(mode)


def default_mode(config, phase):
    """The mode the driver runs ``phase`` (``"loss"`` or ``"gradient"``) in by default: zero-free
    where the configuration generates it for the phase, else BP-im2col."""
    if phase in ("loss", "gradient") and config.has_mode("zero_free"):
        return "zero_free"
    return "bp_im2col"


def _setup(config, phase, layer, mode=Mode.BP_IM2COL):
    """The registers of :func:`bpsa.plan.setup.run` for ``layer`` (a
    :class:`bpsa.spec.layer.ConvLayer`; no address checks); :exc:`ValueError` with the
    refusal's reason."""
    try:
        return setup.run(config, setup_descriptor(phase, layer, mode), addresses=False)
    except Refusal as e:
        raise ValueError(str(e)) from None


def setup_descriptor(phase, layer, mode=Mode.BP_IM2COL):
    """The descriptor :func:`bpsa.plan.setup.run` takes for ``phase`` (a
    :class:`bpsa.spec.regmap.Phase`) of ``layer`` (a :class:`bpsa.spec.layer.ConvLayer`) in
    ``mode`` (a :class:`bpsa.spec.regmap.Mode`). The descriptor pads the top and the bottom
    alike: :exc:`ValueError` for a layer whose ``pad_bottom`` differs from ``pad_h``, and for
    a grouped layer (a descriptor runs an ordinary convolution: a pack of its groups,
    :mod:`bpsa.plan.groups`)."""
    if layer.groups != 1:
        raise ValueError(f"a descriptor runs an ordinary convolution (a pack of groups: "
                         f"bpsa.plan.groups), not a layer of {layer.groups} groups")
    if layer.pad_b != layer.pad_h:
        raise ValueError(f"the descriptor pads the bottom as the top (pad_h {layer.pad_h}), "
                         f"not pad_bottom {layer.pad_bottom}")
    return {"phase": phase, "n": layer.batch, "c": layer.channels, "h": layer.height,
            "w": layer.width, "k": layer.out_channels, "r": layer.kernel_h,
            "s": layer.kernel_w, "stride_h": layer.stride_h, "stride_w": layer.stride_w,
            "pad_h": layer.pad_h, "pad_w": layer.pad_w, "dil_h": layer.dil_h,
            "dil_w": layer.dil_w, "mode": int(mode)}


def plan(config, phase, layer, mode="bp_im2col"):
    """The controller's tiling of ``phase`` of ``layer`` (a :class:`bpsa.spec.layer.ConvLayer`
    with symmetric row padding; :mod:`bpsa.plan.setup`, the programs the hardware runs): a dict
    with ``group`` (channels per group: forward C, loss K, gradient ``(C, K)``), ``groups``,
    ``banded``, ``band`` (rows per band), ``bands``, ``runs`` (engine runs) and the channel
    blocks (loss: ``cblock``, ``cblocks``; forward, gradient: ``kblock``, ``kblocks``; forward:
    ``double``, P double-buffered); :exc:`ValueError`
    naming what does not fit (the hardware refuses the same layers with TOO_LARGE). ``mode``
    (loss, gradient): ``"bp_im2col"`` or ``"zero_free"`` (zero-free gradient: ``group`` is
    ``(B, cols)``, ``kblock`` output-channel blocks of ``cols`` and ``cstep`` input-channel
    blocks of ``B`` a step, ``images`` a run; zero-free loss:
    ``cstep`` input-channel blocks and ``images`` images a step; forward: ``images`` a step,
    more than one on the channel-first front end only, ``stacked`` into one run or a run
    each)."""
    phases = {"forward": Phase.FORWARD, "loss": Phase.LOSS, "gradient": Phase.GRADIENT}
    if phase not in phases:
        raise ValueError(f"phase {phase!r} is not forward, loss or gradient")
    mode = mode_value(mode)
    if phase == "forward" and mode != Mode.CHANNEL_FIRST:
        mode = Mode.BP_IM2COL
    e = _setup(config, phases[phase], layer, mode)
    n, c, h, k = layer.batch, layer.channels, layer.height, layer.out_channels
    banded, band = bool(e["banded"]), e["bh"]
    if phase == "loss" and mode == Mode.ZERO_FREE:
        bands_, kg = _ceil(h, band), e["kg"]
        return {"group": kg * config.cols, "groups": _ceil(e["kt"], kg),
                "cblock": config.cols, "cblocks": e["ct"], "cstep": e["cn"], "images": e["zn"],
                "banded": banded, "band": band,
                "bands": bands_, "runs": n * bands_ * e["ct"] * _ceil(e["kt"], kg)}
    if phase == "gradient" and mode == Mode.ZERO_FREE:
        bands_, kb = _ceil(e["oh"], band), e["kb"]
        return {"group": (config.feeder_bus_width, config.cols), "kblock": kb,
                "kblocks": _ceil(e["kt"], kb), "cstep": e["cn"], "images": e["zn"],
                "banded": banded, "band": band, "bands": bands_, "groups": e["ct"] * e["kt"],
                "runs": e["ct"] * _ceil(n, e["zn"]) * bands_ * e["kt"]}
    if phase == "forward":
        groups, bands_ = _ceil(c, e["cg"]), _ceil(e["oh"], band)
        return {"group": e["cg"], "groups": groups, "banded": banded, "band": band,
                "bands": bands_, "kblock": e["kb"], "kblocks": _ceil(e["kt"], e["kb"]),
                "double": bool(e["dbl"]), "images": e["zn"], "stacked": bool(e["zs"]),
                "runs": (_ceil(n, e["zn"]) if e["zs"] else n) * e["kt"] * bands_ * groups,
                "frontend": FORWARD_MODE_NAMES[0 if mode != Mode.CHANNEL_FIRST else mode]}
    if phase == "loss":
        groups, bands_, cblocks = _ceil(k, e["kg"]), _ceil(h, band), _ceil(c, e["cg"])
        return {"group": e["kg"], "groups": groups, "cblock": e["cg"], "cblocks": cblocks,
                "banded": banded, "band": band, "bands": bands_,
                "runs": n * bands_ * cblocks * groups}
    kb, kg, cg = e["kb"], e["kg"], e["cg"]
    # output-channel groups over all blocks (the last block may be shorter)
    k_groups = (k // kb) * _ceil(kb, kg) + _ceil(k % kb, kg)
    bands_ = _ceil(e["oh"], band)
    return {"group": (cg, kg), "groups": _ceil(c, cg) * k_groups, "kblock": kb,
            "kblocks": _ceil(k, kb), "banded": banded, "band": band, "bands": bands_,
            "runs": _ceil(c, cg) * n * bands_ * k_groups}


def bands(phase, h, w, r, s, stride, pad, dil, band, banded=True, dim_width=16):
    """The :class:`Band` list of a layer cut into bands of ``band`` rows (one band covering
    the layer when not ``banded``): :mod:`bpsa.plan.bands`' programs, the walker's."""
    drh, oh, ow = _dims(h, w, r, s, stride, pad, dil)
    sh, ph = stride[0], pad[0]
    if not banded:
        if phase == "loss":
            return [Band(0, h, 0, oh, ph, ph, h, oh)]
        return [Band(0, oh, 0, h, ph, ph, h, oh)]
    loss = phase == "loss"
    program = band_programs.loss_band() if loss else band_programs.output_band()
    widths = band_programs.register_widths(dim_width)
    out = []
    for o0 in range(0, h if loss else oh, band):
        obh = min(band, (h if loss else oh) - o0)
        e = evaluate(program, {"o0": o0, "obh": obh, "h": h, "w": w, "stride_h": sh,
                               "pad_h": ph, "drh": drh, "oh": oh, "ow": ow},
                     widths, unit_width=setup.UNIT_WIDTH, overflow_code=0)
        if loss:
            out.append(Band(o0, obh, e["lo"], e["eoh"], e["pt"], e["pb"], obh, e["eoh"]))
        else:
            out.append(Band(o0, obh, e["y0"], e["eh"], e["pt"], e["pb"], e["eh"], obh))
    return out


def strips(phase, w, s, stride_w, pad_w, dil_w, width):
    """The :class:`Strip` list of a layer of width ``w`` (kernel width ``s``) cut into strips
    of ``width`` output columns (forward, gradient: Y / dY columns; loss: dX columns)."""
    drw = dil_w * (s - 1)
    ow = out_size(w, s, stride_w, pad_w, dil_w)
    out = []
    if phase == "loss":
        for x0 in range(0, w, width):
            x1 = min(w, x0 + width)
            a, b = x0 + pad_w, x1 + pad_w
            q0 = max(0, (a - drw) // stride_w)
            q1 = min(ow, (b - 1) // stride_w + 1)
            if q0 >= q1:
                out.append(Strip(x0, x1 - x0, q0, 0, 0))
                continue
            ew = (q1 - q0 - 1) * stride_w + drw + 1
            out.append(Strip(x0, x1 - x0, q0, q1 - q0, ew, a - q0 * stride_w))
        return out
    for q0 in range(0, ow, width):
        q1 = min(ow, q0 + width)
        ew = (q1 - q0 - 1) * stride_w + drw + 1
        out.append(Strip(q0, q1 - q0, q0 * stride_w - pad_w, ew, ew))
    return out


def column_strips(config, phase, layer, mode="bp_im2col"):
    """The driver's column strips of ``layer`` (a :class:`bpsa.spec.layer.ConvLayer`) whose
    rows are too wide for the controller: ``(strips, plans)``, the widest strips (fewest
    descriptors) whose layers (``layer`` ``width`` ``engine_w`` wide, ``pad_w = 0``)
    :func:`plan` accepts, and those plans (``None`` for an empty loss strip).
    :exc:`ValueError` when even one-column strips do not fit (the reason is then not the
    width)."""
    w, s = layer.width, layer.kernel_w
    sw, pw, dw = layer.stride_w, layer.pad_w, layer.dil_w
    length = w if phase == "loss" else out_size(w, s, sw, pw, dw)
    if length < 2:
        raise ValueError(f"the layer is {length} column wide; there is nothing to cut")
    last = None
    for width in sorted({-(-length // m) for m in range(2, length + 1)}, reverse=True):
        out, plans = strips(phase, w, s, sw, pw, dw, width), []
        try:
            for st in out:
                plans.append(None if st.in_cols == 0 else plan(
                    config, phase, replace(layer, width=st.engine_w, pad_w=0), mode))
        except ValueError as e:
            last = e
            continue
        return out, plans
    raise ValueError(f"not even strips of one column fit ({last})")


def plan_or_strips(config, phase, layer, mode="bp_im2col"):
    """:func:`plan` of ``layer`` (a :class:`bpsa.spec.layer.ConvLayer`), or, when its rows
    are too wide for the controller, ``{"strips": [...], "plans": [...]}`` of
    :func:`column_strips`; :exc:`ValueError` naming why neither runs (both reasons when they
    differ). A layer the driver rewrites (:func:`rewrite_of`) is planned as the inner layer
    it runs."""
    sd = rewrite_of(config, phase, layer, mode)
    return _plan_or_strips(config, phase, layer if sd is None else sd.inner, mode)


def rewrite_of(config, phase, layer, mode="bp_im2col"):
    """The space-to-depth rewrite the driver runs ``phase`` of ``layer`` as in ``mode``
    (:func:`bpsa.plan.space_to_depth.rewrite`), when its inner layer runs on ``config``
    (a plan or column strips); ``None`` otherwise (the layer then runs as given)."""
    sd = space_to_depth.rewrite(layer, config.rows, phase, mode)
    if sd is None:
        return None
    try:
        _plan_or_strips(config, phase, sd.inner, mode)
    except ValueError:
        return None
    return sd


def _plan_or_strips(config, phase, layer, mode):
    try:
        return plan(config, phase, layer, mode=mode)
    except ValueError as e:
        try:
            strips_, plans = column_strips(config, phase, layer, mode=mode)
        except ValueError as e2:
            why = str(e2)
            raise ValueError(str(e) if why.endswith(f"({e})") else
                             f"{e}; cut into column strips: {why}") from None
        return {"strips": strips_, "plans": plans}


def fc_plan(config, n, i, o):
    """The controller's tiling of an FC layer's backward pass (PHASE 3: batch ``n``, ``i``
    inputs, ``o`` outputs; :mod:`bpsa.plan.setup`): a dict with ``fib`` (inputs per block),
    ``fq`` (P words a row, ``ceil(fib / cols)``), ``fob`` (outputs per run), ``fnb`` (batch
    rows per run) and ``runs``; :exc:`ValueError` naming what does not fit (the hardware
    refuses it with TOO_LARGE). P holds a chunk's dX rows and the input block's dW column:
    ``(fnb + o) fq`` words."""
    e = _setup(config, Phase.FC_BACKWARD, ConvLayer.conv(n, i, 1, 1, o, 1, 1))
    return {"fib": e["fib"], "fq": e["fq"], "fob": e["fob"], "fnb": e["fnb"],
            "runs": _ceil(i, e["fib"]) * _ceil(n, e["fnb"]) * _ceil(o, e["fob"])}


def pool_plan(config, phase, n, c, h, w, r, s, stride=None, pad=(0, 0), kind="max",
              relu=False):
    """The pooling set-up of :mod:`bpsa.plan.setup` and the runs the walker makes of it.

    ``phase``: ``"pool_forward"`` or ``"pool_backward"``; ``kind``: ``"max"`` or ``"avg"``
    (global average pooling is ``avg`` with ``r, s = h, w``); ``stride`` defaults to the
    kernel. :exc:`ValueError` with the hardware's reason for a refused layer. Returns the
    tile plan's registers (``pg`` planes a step, ``bh``, ``banded``, ...) and ``runs``: one
    dict a run (a step) with its planes ``i0`` and ``planes``, the band's rows ``y0`` and
    ``rows``, X rows ``xlo`` / ``xrows`` and dY rows ``dlo`` / ``drows`` loaded, the walk's
    start ``q0`` / ``rem0``, buffer words of a plane's X and dY (``x_plane``, ``d_plane``),
    dY's offset in the bank (``d_offset``), and the P words of a plane (``p_row``). With
    ``pool_lanes`` a "plane" is a block of that many planes (``planes = N ceil(C /
    pool_lanes)``, channel-blocked)."""
    stride = (r, s) if stride is None else pair(stride)
    pad = pair(pad)
    by_name = {name: k for k, name in POOL_KIND_NAMES.items()}
    if kind not in by_name:
        raise ValueError(f"pooling kind must be one of {sorted(by_name)}, not {kind!r}")
    ph = {"pool_forward": Phase.POOL_FORWARD, "pool_backward": Phase.POOL_BACKWARD}[phase]
    desc = {"phase": ph, "n": n, "c": c, "h": h, "w": w, "k": 0, "r": r, "s": s,
            "stride_h": stride[0], "stride_w": stride[1], "pad_h": pad[0], "pad_w": pad[1],
            "dil_h": 1, "dil_w": 1, "pool_kind": int(by_name[kind]), "relu": int(relu)}
    try:
        e = setup.run(config, desc, addresses=False)
    except Refusal as err:
        raise ValueError(str(err)) from None
    bwd = ph == Phase.POOL_BACKWARD
    oh, ow = e["oh"], e["ow"]
    epw = config.cols // config.pool_lanes     # a plane's elements a P word holds
    out_rows, out_w = (h, w) if bwd else (oh, ow)
    xskip = bwd and by_name[kind] == PoolKind.AVG and not relu
    program = band_programs.pool_backward_band() if bwd else band_programs.output_band()
    widths = band_programs.register_widths(config.dim_width)
    runs = []
    for i0 in range(0, e["planes"], e["pg"]):
        planes = min(e["pg"], e["planes"] - i0)
        for y0 in range(0, out_rows, e["bh"]):
            rows = min(e["bh"], out_rows - y0)
            b = evaluate(program, {"o0": y0, "obh": rows, "h": h, "w": w,
                                   "stride_h": stride[0], "pad_h": pad[0], "drh": r - 1,
                                   "oh": oh, "ow": ow}, widths,
                         unit_width=setup.UNIT_WIDTH, overflow_code=0)
            dlo, drows = (b["lo"], b["eoh"]) if bwd else (0, 0)
            x_plane = 0 if xskip else b["eh"] * w
            runs.append({"i0": i0, "planes": planes, "y0": y0, "rows": rows, "xlo": b["y0"],
                         "xrows": 0 if xskip else b["eh"], "dlo": dlo, "drows": drows,
                         "q0": b.get("pq", 0), "rem0": b.get("pr", 0), "x_plane": x_plane,
                         "d_plane": drows * ow, "d_offset": planes * x_plane,
                         "p_row": _ceil(rows * out_w, epw)})
    e["runs"] = runs
    return e
