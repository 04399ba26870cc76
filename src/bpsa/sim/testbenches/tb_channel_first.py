"""cocotb testbench of the channel-first engine (top ``cf_engine``: the front end, its array
and a W buffer; generated Verilog under Verilator) against the golden models, and the run
helpers its Amaranth test shares (``tests/test_gateware_frontends_channel_first_channel_first.py``).

For each layer: random operands (integers, or float32 quantized along C in an MX format);
every run a controller would make (:func:`runs`) with its W words, X words and, in MX, the
W scale words and X's scale codes (:func:`run_words`); every ``y`` vector folded into Y in
the order it comes (:func:`accumulator`). Y must equal ``bpsa.models.golden.conv2d`` (wrapped
to ``acc_width``) or, in MX, ``bpsa.models.mx.conv_forward(..., part=rows)`` bit for bit;
``error`` must stay low, and every layer's cycles must equal the cycle model's
(:func:`model_cycles`). A loss layer runs as the forwards of its stride classes
(:mod:`bpsa.plan.loss_classes`, as the accelerator's channel-first loss does) and dX must
equal the golden loss (MX: ``conv_loss(..., part=rows)``).

Environment: ``BPSA_LAYERS`` (JSON list of :class:`bpsa.spec.layer.ConvLayer` fields) or
``BPSA_LAYER`` (one layer string), ``BPSA_SEED`` (default 1), ``BPSA_BANDS`` (row bands a
layer, default 1), ``BPSA_PHASES`` (a comma list, ``forward`` or ``loss`` a layer; default
every layer forward), ``BPSA_SUMMARY`` (a path: the JSON list of the layers' summaries,
:func:`summary`, written also when a layer mismatches).
"""

import json
import os

import cocotb
import numpy as np
from cocotb.triggers import ReadOnly, RisingEdge

from bpsa.config import Config
from bpsa.models import golden, mx
from bpsa.sim.conv_forward_run import pack_struct, unpack_struct
from bpsa.sim.runner import load_config_json
from bpsa.sim.testbenches.tb_util import layers_from_env, reset, write_words
from bpsa.spec.layer import ConvLayer
from bpsa.spec.numeric import MX_BLOCK, MX_SCALE_BIAS, MX_SCALE_NAN, mx_format

__all__ = ["X_BASE", "W_BASE", "accumulator", "channel_blocks", "check_layer", "descriptor",
           "expected", "expected_loss", "model_cycles", "operands", "out_size", "run_words",
           "runs", "summary"]

#: The buffer bases the testbench writes a run's words at (not zero, so that the bases count).
X_BASE, W_BASE = 3, 5


def out_size(size, k, s, p, d):
    """Output positions of one axis."""
    return (size + 2 * p - d * (k - 1) - 1) // s + 1


def channel_blocks(cfg, c):
    """A run's channels ``(c0, c1)``: all of C when it fits the rows, else blocks of ``rows``;
    MX: parts of ``rows`` channels inside each 32-channel block (its last part shorter), the
    contract's channel-first order."""
    R = cfg.rows
    if cfg.is_mx:
        return [(c0, min(c0 + R, b + MX_BLOCK, c)) for b in range(0, c, MX_BLOCK)
                for c0 in range(b, min(b + MX_BLOCK, c), R)]
    cb = c if c <= R else R
    return [(c0, min(c0 + cb, c)) for c0 in range(0, c, cb)]


def runs(cfg, shape, geometry, bands=1):
    """The runs a controller would make for a layer of ``shape`` ``(n, c, h, w, k, r, s)``
    and ``geometry`` ``(stride, pad, dil)`` (pairs): images, output-channel blocks, channel
    blocks (:func:`channel_blocks`), ``bands`` row bands of the output."""
    n, c, h, _, k, r, _ = shape
    stride, pad, dil = geometry
    oh = out_size(h, r, stride[0], pad[0], dil[0])
    edges = np.linspace(0, oh, bands + 1).astype(int)
    for img in range(n):
        for k0 in range(0, k, cfg.cols):
            for c0, c1 in channel_blocks(cfg, c):
                for o0, o1 in zip(edges[:-1], edges[1:]):
                    if o1 > o0:
                        first = o0 * stride[0] - pad[0]
                        lo = max(0, first)
                        hi = min(h, (o1 - 1) * stride[0] - pad[0] + dil[0] * (r - 1) + 1)
                        yield dict(n=img, k0=k0, c0=c0, cn=c1 - c0, o0=int(o0),
                                   o1=int(o1), lo=int(lo), hi=int(max(hi, lo)),
                                   pt=int(lo - first))


def check_layer(cfg, layer, bands=1, phase="forward"):
    """``layer`` (a :class:`~bpsa.spec.layer.ConvLayer`) when its runs fit the engine of
    ``cfg`` from :data:`X_BASE` / :data:`W_BASE`, else :exc:`ValueError` with the reason (a
    band of X in the X banks, a run's W words, in MX with its scale words, in the W buffer,
    every size in the descriptor's fields). ``phase`` ``"loss"``: each stride class's forward
    (:mod:`bpsa.plan.loss_classes`)."""
    if phase == "loss":
        from bpsa.plan.loss_classes import class_jobs
        n, k = layer.batch, layer.out_channels
        dy = np.zeros((n, k) + layer.out_hw)
        w = np.zeros((k, layer.channels, layer.kernel_h, layer.kernel_w))
        _, geometry = _shape(layer)
        for job in class_jobs(dy, w, (layer.height, layer.width), *geometry):
            check_layer(cfg, ConvLayer.conv(n, k, *job.x.shape[2:], layer.channels,
                                            *job.w.shape[2:], pad=job.padding,
                                            dil=job.dilation), bands)
        return layer
    shape, geometry = _shape(layer)
    n, c, h, wd, k, r, s = shape
    big = 1 << cfg.dim_width
    for name, v in (("channels", c), ("height", h), ("width", wd), ("kernel_h", r),
                    ("kernel_w", s)):
        if v >= big:
            raise ValueError(f"{name} {v} does not fit the descriptor's {cfg.dim_width}-bit "
                             f"fields (dim_width)")
    if min(out_size(h, r, geometry[0][0], geometry[1][0], geometry[2][0]),
           out_size(wd, s, geometry[0][1], geometry[1][1], geometry[2][1])) < 1:
        raise ValueError(f"{layer.text()} has no output pixel")
    band = max(run["hi"] - run["lo"] for run in runs(cfg, shape, geometry, bands)) * wd
    if X_BASE + band > cfg.buf_cf_depth:
        raise ValueError(f"a band of X ({band} pixels from word {X_BASE}) does not fit the X "
                         f"banks ({cfg.buf_cf_depth} words, buf_cf_depth)")
    words = (min(cfg.rows, c) + cfg.is_mx) * r * s
    if W_BASE + words > cfg.buf_b_depth:
        raise ValueError(f"a run's W words ({words} from word {W_BASE}) do not fit the W buffer "
                         f"({cfg.buf_b_depth} words, buf_b_depth)")
    return layer


def _shape(layer):
    """``(shape, geometry)`` of a ConvLayer, as :func:`runs` takes them."""
    shape = (layer.batch, layer.channels, layer.height, layer.width, layer.out_channels,
             layer.kernel_h, layer.kernel_w)
    geometry = ((layer.stride_h, layer.stride_w), (layer.pad_h, layer.pad_w),
                (layer.dil_h, layer.dil_w))
    return shape, geometry


def summary(cfg, layer, match, cycles, model_cycles, run_count):
    """One layer's summary: ``layer``, ``match``, ``runs``, ``cycles`` (each run's, from the
    cycle that takes ``start`` to ``done``; the buffer writes between runs not counted),
    ``model_cycles`` (the cycle model's for the same runs, :func:`model_cycles`), ``macs``
    and ``utilization`` (the layer's MACs over rows x cols x cycles)."""
    oh, ow = layer.out_hw
    macs = (layer.batch * layer.out_channels * oh * ow * layer.channels * layer.kernel_h
            * layer.kernel_w)
    return {"layer": layer.text(), "match": bool(match), "runs": run_count, "cycles": cycles,
            "model_cycles": model_cycles, "macs": macs,
            "utilization": macs / (cfg.rows * cfg.cols * max(cycles, 1))}


def model_cycles(cfg, desc):
    """The cycle model's cycles of one run (its descriptor ``desc``):
    :func:`bpsa.models.perf._cf_compute`, the engine's part of the accelerator's model."""
    from bpsa.models.perf import _cf_compute
    names = {"channels": "channels", "layer_channels": "layer_channels", "in_rows": "height",
             "width": "width", "out_rows": "out_rows", "ow": "out_width", "r": "kernel_h",
             "s": "kernel_w", "sh": "stride_h", "sw": "stride_w", "pt": "pad_top",
             "pw": "pad_w", "dh": "dil_h", "dw": "dil_w"}
    return _cf_compute(cfg, **{k: desc[v] for k, v in names.items()})[0]


def descriptor(run, shape, geometry, x_base, w_base):
    """The run's fields (:func:`bpsa.gateware.frontends.channel_first.channel_first.cf_run_layout`)."""
    _, c, _, wd, _, r, s = shape
    stride, pad, dil = geometry
    return dict(channels=run["cn"], layer_channels=c, height=run["hi"] - run["lo"],
                out_rows=run["o1"] - run["o0"], width=wd,
                out_width=out_size(wd, s, stride[1], pad[1], dil[1]), kernel_h=r, kernel_w=s,
                stride_h=stride[0], stride_w=stride[1], dil_h=dil[0], dil_w=dil[1],
                pad_top=run["pt"], pad_w=pad[1], x_base=x_base, w_base=w_base)


def operands(cfg, x, w):
    """``(x, xs, w, ws)``: the lanes' operands and, in MX, the scale codes (X and W quantized
    along C, :func:`bpsa.models.mx.quantize`; ``None`` for integers)."""
    if not cfg.is_mx:
        return x, None, w, None
    (xc, xs), (wc, ws) = (mx.quantize(t, cfg.arithmetic, axis=1) for t in (x, w))
    return xc, xs, wc, ws


def run_words(cfg, ops, run):
    """The buffer words of one run, from :func:`operands`: ``(w_words, x_words, x_scales)``.
    W: word ``(c R + r) S + q`` (from the run's ``w_base``) holds ``W[k0 + j, c0 + c, r, q]``
    in lane ``j``; MX: then ``R S`` scale words, word ``channels R S + r S + q`` lane ``j``
    the scale of ``(k0 + j, r, q)`` in the run's block. X: one pixel of the band a word (from
    ``x_base``, raster order), the run's channels in lanes ``0 .. channels - 1``; MX: the
    pixel's scale code of the run's block (else an empty list). Lanes as unsigned bits."""
    x, xs, w, ws = ops
    k, _, r, s = w.shape
    c0, cn, k0, b = run["c0"], run["cn"], run["k0"], run["c0"] // MX_BLOCK
    mask = (1 << cfg.operand_width) - 1
    cols = range(cfg.cols)
    ww = [[int(w[k0 + j, c0 + ci, tr, tq]) & mask if k0 + j < k else 0 for j in cols]
          for ci in range(cn) for tr in range(r) for tq in range(s)]
    if cfg.is_mx:
        ww += [[int(ws[k0 + j, b, tr, tq]) if k0 + j < k else 0 for j in cols]
               for tr in range(r) for tq in range(s)]
    band = x[run["n"], c0:c0 + cn, run["lo"]:run["hi"]]
    xw = [[int(band[ci, yy, xx]) & mask if ci < cn else 0 for ci in range(cfg.rows)]
          for yy in range(band.shape[1]) for xx in range(band.shape[2])]
    scales = [] if not cfg.is_mx else [
        int(v) for v in xs[run["n"], b, run["lo"]:run["hi"]].reshape(-1)]
    return ww, xw, scales


def accumulator(cfg):
    """``add(acc, lane, scale_row, scale_col)``: one ``y`` lane added into its Y element.
    Integers: wrapped to ``acc_width``. MX: the lane's bits (a block part's exact sum in two's
    complement and, for FP8 elements, a NaN flag above it) folded into the fp32 encoding
    ``acc`` by the contract's :func:`bpsa.models.mx.accumulate_block`."""
    accw = cfg.acc_width
    if not cfg.is_mx:
        def add(acc, lane, sr=None, sc=None):
            v = (acc + lane) & ((1 << accw) - 1)
            return v - (1 << accw) if v >> (accw - 1) else v
        return add
    f = mx_format(cfg.arithmetic)
    bits = accw if f.is_int else accw - 1

    def fold(acc, lane, sr, sc):
        lane &= (1 << accw) - 1
        v = lane & ((1 << bits) - 1)
        v = v - (1 << bits) if v >> (bits - 1) else v
        e = sr + sc - 2 * MX_SCALE_BIAS + 2 * f.quantum_exp
        return mx.accumulate_block(acc, v, e, bool(lane >> bits) or MX_SCALE_NAN in (sr, sc))
    return fold


def expected(cfg, x, w, geometry):
    """Y of the golden model: the integer convolution wrapped to ``acc_width``, or the MX
    contract's channel-first order (``part = rows``)."""
    stride, pad, dil = geometry
    if cfg.is_mx:
        return mx.conv_forward(x, w, cfg.arithmetic, stride, pad, dil, part=cfg.rows)
    y = golden.conv2d(x, w, stride, pad, dil)
    add = accumulator(cfg)
    return np.vectorize(lambda v: add(0, int(v)))(y).astype(np.int64)


def _random(cfg, shape, rng, scale_axes):
    """A random operand of ``shape``: float32 of many magnitudes (one a slice along
    ``scale_axes``) with zeros (MX), or integers over the operand range."""
    if not cfg.is_mx:
        lo = -(1 << (cfg.operand_width - 1))
        return rng.integers(lo, -lo, shape)
    from bpsa.sim.gemm import random_mx_operand
    return random_mx_operand(shape, rng, scale_axes)


def expected_loss(cfg, dy, w, input_hw, geometry):
    """dX of the golden model: the integer loss wrapped to ``acc_width``, or the MX
    contract's channel-first order of the loss (``part = rows``)."""
    stride, pad, dil = geometry
    if cfg.is_mx:
        return mx.conv_loss(dy, w, cfg.arithmetic, input_hw, stride, pad, dil, part=cfg.rows)
    add = accumulator(cfg)
    dx = golden.conv2d_input_grad(dy, w, input_hw, stride, pad, dil)
    return np.vectorize(lambda v: add(0, int(v)))(dx).astype(np.int64)


async def _run(dut, cfg, ops, run, desc):
    """One run: its words written, ``start``, every ``y`` vector until ``done``. Returns the
    vectors as ``(oh, ow0, data, scale_row, scale_cols)`` and the run's cycles (the cycle that
    takes ``start`` and the busy ones, as the cycle model counts a run)."""
    from bpsa.gateware.frontends.channel_first.channel_first import cf_run_layout
    from bpsa.gateware.frontends.drain import y_layout
    dut.layer.value = pack_struct(cf_run_layout(cfg), desc)
    for _ in range(cfg.rows + 1):                      # the banks' lane rule settles
        await RisingEdge(dut.clk)
    ww, xw, scales = run_words(cfg, ops, run)
    await write_words(dut, "w_write", desc["w_base"], ww, cfg.operand_width)
    await write_words(dut, "x_write", desc["x_base"], xw, cfg.operand_width)
    if cfg.is_mx:
        await write_words(dut, "xs_write", desc["x_base"], [[v] for v in scales], 8)
    dut.start.value = 1
    await RisingEdge(dut.clk)
    dut.start.value = 0
    lay = y_layout(cfg)
    arrays = {"data": (cfg.acc_width, cfg.cols, False), "scale_cols": (8, cfg.cols, False)}
    out = []
    busy = 0
    for _ in range(200_000):
        await RisingEdge(dut.clk)
        await ReadOnly()
        assert not int(dut.error.value), f"error raised on {desc}"
        busy += int(dut.busy.value)
        if int(dut.y__valid.value):
            f = unpack_struct(lay, int(dut.y__payload.value), arrays)
            out.append((f["oh"], f["ow0"], f["data"], f.get("scale_row"), f.get("scale_cols")))
        if int(dut.done.value):
            await RisingEdge(dut.clk)
            return out, busy + 1            # and the cycle that took start
    raise AssertionError(f"the front end did not finish {desc}")


async def _forward(dut, cfg, x, w, geometry, bands):
    """Every run of the forward of ``x`` by ``w`` on the engine; ``(Y, (cycles, the model's
    cycles), runs)``."""
    shape = x.shape + (w.shape[0],) + w.shape[2:]
    stride, pad, dil = geometry
    oh = out_size(shape[2], shape[5], stride[0], pad[0], dil[0])
    ow = out_size(shape[3], shape[6], stride[1], pad[1], dil[1])
    y = np.zeros((shape[0], shape[4], oh, ow), np.uint32 if cfg.is_mx else np.int64)
    ops = operands(cfg, x, w)
    cycles, model, count = 0, 0, 0
    for run in runs(cfg, shape, geometry, bands):
        desc = descriptor(run, shape, geometry, X_BASE, W_BASE)
        vectors, took = await _run(dut, cfg, ops, run, desc)
        cycles, model, count = cycles + took, model + model_cycles(cfg, desc), count + 1
        _add_vectors(cfg, y, run, vectors, min(cfg.cols, shape[4] - run["k0"]))
    return y, (cycles, model), count


def _add_vectors(cfg, y, run, vectors, kn):
    """Add a run's vectors into ``y`` in the order they came: a tile's vectors (each output
    pixel once) at a time, integers wrapped, MX folded by the vectorised
    :func:`bpsa.models.mx.accumulate_blocks` (equal to :func:`accumulator`'s fold, which the
    tests hold it to)."""
    if not cfg.is_mx:
        add = accumulator(cfg)
        for oy, ox, data, _, _ in vectors:
            for j in range(kn):
                at = (run["n"], run["k0"] + j, run["o0"] + oy, ox)
                y[at] = add(int(y[at]), data[j])
        return
    f = mx_format(cfg.arithmetic)
    bits = cfg.acc_width if f.is_int else cfg.acc_width - 1
    start, seen = 0, set()
    for i in range(len(vectors) + 1):
        if i < len(vectors) and (vectors[i][0], vectors[i][1]) not in seen:
            seen.add((vectors[i][0], vectors[i][1]))
            continue
        tile = vectors[start:i]                   # every pixel at most once: fold at once
        if tile:
            oy = np.array([v[0] for v in tile])[:, None] + run["o0"]
            ox = np.array([v[1] for v in tile])[:, None]
            kk = np.arange(kn)[None, :] + run["k0"]
            lanes = np.array([v[2][:kn] for v in tile], dtype=np.int64)
            sr = np.array([v[3] for v in tile], dtype=np.int64)[:, None]
            sc = np.array([v[4][:kn] for v in tile], dtype=np.int64)
            v = lanes & ((1 << bits) - 1)
            v = np.where(v >> (bits - 1), v - (1 << bits), v)
            e = sr + sc - 2 * MX_SCALE_BIAS + 2 * f.quantum_exp
            bad = ((lanes >> bits) != 0) | (sr == MX_SCALE_NAN) | (sc == MX_SCALE_NAN)
            at = (run["n"], kk, oy, ox)
            y[at] = mx.accumulate_blocks(y[at], v, e, bad)
        start, seen = i, ({(vectors[i][0], vectors[i][1])} if i < len(vectors) else set())


async def _loss(dut, cfg, dy, w, input_hw, geometry, bands):
    """dX as the forwards of its stride classes on the engine (:mod:`bpsa.plan.loss_classes`);
    ``(dX, (cycles, the model's cycles), runs)``."""
    from bpsa.plan.loss_classes import class_jobs, place
    dx = np.zeros((dy.shape[0], w.shape[1]) + tuple(input_hw),
                  np.uint32 if cfg.is_mx else np.int64)
    cycles, model, count = 0, 0, 0
    for job in class_jobs(dy, w, input_hw, *geometry):
        y, (took, mod), n = await _forward(dut, cfg, job.x, job.w,
                                           ((1, 1), job.padding, job.dilation), bands)
        place(dx, job, y, geometry[0])
        cycles, model, count = cycles + took, model + mod, count + n
    return dx, (cycles, model), count


@cocotb.test()
async def layers_match_golden(dut):
    """Every layer of the environment, run by run (``BPSA_PHASES``: a comma list of forward
    or loss, one a layer; default forward): Y or dX equals the golden model's."""
    cfg = Config.from_dict(load_config_json())
    rng = np.random.default_rng(int(os.environ.get("BPSA_SEED", "1")))
    bands = int(os.environ.get("BPSA_BANDS", "1"))
    ports = ("x_write", "w_write") + (("xs_write",) if cfg.is_mx else ())
    await reset(dut, ports)
    layers = layers_from_env("C=5,H=6,W=7,K=5,R=3,pad=1")
    phases = (os.environ.get("BPSA_PHASES") or ",".join(["forward"] * len(layers))).split(",")
    results, failures = [], []
    for layer, phase in zip(layers, phases, strict=True):
        shape, geometry = _shape(layer)
        w = _random(cfg, (layer.out_channels, layer.channels, layer.kernel_h, layer.kernel_w),
                    rng, (0, 1))
        if phase == "forward":
            x = _random(cfg, shape[:4], rng, (0, 1, 3))
            want = expected(cfg, x, w, geometry)
            got, cycles, count = await _forward(dut, cfg, x, w, geometry, bands)
        else:
            dy = _random(cfg, (layer.batch, layer.out_channels) + layer.out_hw, rng, (0, 1, 3))
            want = expected_loss(cfg, dy, w, shape[2:4], geometry)
            got, cycles, count = await _loss(dut, cfg, dy, w, shape[2:4], geometry, bands)
        bad = np.argwhere(got != want)
        results.append(dict(summary(cfg, layer, not len(bad), *cycles, count), phase=phase))
        if len(bad):
            failures.append(f"{phase} {layer.text()}: {len(bad)} of {got.size} differ, first "
                            f"{tuple(bad[0])}")
        if cycles[0] != cycles[1]:
            failures.append(f"{phase} {layer.text()}: {cycles[0]} cycles, the model "
                            f"{cycles[1]}")
        dut._log.info(f"{phase} {layer.text()}: {'match' if not len(bad) else 'MISMATCH'}, "
                      f"{count} runs, {cycles[0]} cycles (model {cycles[1]})")
    if os.environ.get("BPSA_SUMMARY"):
        with open(os.environ["BPSA_SUMMARY"], "w") as f:
            json.dump(results, f)
    assert not failures, "; ".join(failures)
