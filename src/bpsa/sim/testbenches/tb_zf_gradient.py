"""cocotb testbench of the zero-free gradient engine (top ``zg_engine``: the walker, its array
and its X and dY buffers; generated Verilog under Verilator) against the golden models, and
the run helpers its Amaranth test shares
(``tests/test_gateware_frontends_zero_free_gradient_engine.py``).

For each layer: random X and dY (integers, or float32 quantized along W and OW in each row in
an MX format); every run a controller would make (:func:`runs`: images, dY blocks of
``cols`` channels, X blocks of ``feeder_bus_width`` channels, row bands) with its buffer words
(:func:`run_words`); every ``zg`` row added into dW in the order it comes (:func:`add_rows`).
dW must equal ``bpsa.models.golden.conv2d_weight_grad`` (wrapped to ``acc_width``) or, in MX,
``bpsa.models.mx.conv_gradient(..., walker=True)`` bit for bit, and every layer's cycles the
cycle model's (:func:`model_cycles`).

Environment: ``BPSA_LAYERS`` (JSON list of :class:`bpsa.spec.layer.ConvLayer` fields) or
``BPSA_LAYER``, ``BPSA_SEED`` (default 1), ``BPSA_BANDS`` (row bands a layer, default 1),
``BPSA_SUMMARY`` (a path: the JSON list of the layers' summaries).
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
from bpsa.spec.numeric import MX_BLOCK, MX_SCALE_BIAS, MX_SCALE_NAN, mx_format

__all__ = ["X_BASE", "DY_BASE", "add_rows", "check_layer", "descriptor", "expected",
           "model_cycles", "operands", "random_operands", "run_words", "runs", "summary"]

#: The buffer bases the testbench writes a run's words at (not zero, so that the bases count).
X_BASE, DY_BASE = 3, 5


def _pitch(cfg, width):
    """Words of one buffer row: its pixels and, in MX, its scale words."""
    return width + (-(-width // MX_BLOCK) if cfg.is_mx else 0)


def runs(cfg, layer, bands=1):
    """The runs a controller would make for ``layer``: images, dY blocks (``k0``), X blocks
    (``c0``, ``cn`` channels), ``bands`` row bands of dY (``o0 .. o1``) with the X rows they
    read (``lo .. hi``) and the padding rows above (``pt``)."""
    oh = layer.out_hw[0]
    sh, ph, dh, r = layer.stride_h, layer.pad_h, layer.dil_h, layer.kernel_h
    edges = np.linspace(0, oh, bands + 1).astype(int)
    B = cfg.feeder_bus_width
    for n in range(layer.batch):
        for k0 in range(0, layer.out_channels, cfg.cols):
            for c0 in range(0, layer.channels, B):
                for o0, o1 in zip(edges[:-1], edges[1:]):
                    if o1 > o0:
                        first = int(o0) * sh - ph
                        lo = max(0, first)
                        hi = min(layer.height, (int(o1) - 1) * sh - ph + dh * (r - 1) + 1)
                        yield dict(n=n, k0=k0, c0=c0, cn=min(B, layer.channels - c0),
                                   o0=int(o0), o1=int(o1), lo=lo, hi=max(hi, lo),
                                   pt=lo - first)


def descriptor(layer, run, x_base=X_BASE, dy_base=DY_BASE):
    """The run's fields (:func:`bpsa.gateware.frontends.zero_free.gradient.zf_gradient_layout`)."""
    return dict(channels=run["cn"], width=layer.width, height=run["hi"] - run["lo"],
                out_height=run["o1"] - run["o0"], out_width=layer.out_hw[1],
                kernel_h=layer.kernel_h, kernel_w=layer.kernel_w, stride_h=layer.stride_h,
                stride_w=layer.stride_w, dil_h=layer.dil_h, dil_w=layer.dil_w,
                pad_top=run["pt"], pad_w=layer.pad_w, x_base=x_base, dy_base=dy_base)


def check_layer(cfg, layer, bands=1):
    """``layer`` when every run fits the engine of ``cfg`` from :data:`X_BASE` /
    :data:`DY_BASE`, else :exc:`ValueError` with the reason (a band of X in the X buffer, of
    dY in the dY buffer, every size in the descriptor's fields)."""
    big = 1 << (cfg.dim_width + 2)
    for name, v in (("height", layer.height), ("width", layer.width),
                    ("kernel_h", layer.kernel_h), ("kernel_w", layer.kernel_w)):
        if v >= big:
            raise ValueError(f"{name} {v} does not fit the descriptor's {cfg.dim_width + 2}-bit "
                             f"fields (dim_width + 2)")
    if min(layer.out_hw) < 1:
        raise ValueError(f"{layer.text()} has no output pixel")
    for run in runs(cfg, layer, bands):
        xw = (run["hi"] - run["lo"]) * _pitch(cfg, layer.width)
        dw = (run["o1"] - run["o0"]) * _pitch(cfg, layer.out_hw[1])
        if X_BASE + xw > cfg.buf_a_depth:
            raise ValueError(f"a band of X ({xw} words from word {X_BASE}) does not fit the X "
                             f"buffer ({cfg.buf_a_depth} words, buf_a_depth)")
        if DY_BASE + dw > cfg.buf_b_depth:
            raise ValueError(f"a band of dY ({dw} words from word {DY_BASE}) does not fit the "
                             f"dY buffer ({cfg.buf_b_depth} words, buf_b_depth)")
    return layer


def random_operands(cfg, layer, rng):
    """Random ``(x, dy)``: integers over the operand range, or (MX) float32 of many
    magnitudes along the rows (so that the blocks show) with zeros."""
    shapes = ((layer.batch, layer.channels, layer.height, layer.width),
              (layer.batch, layer.out_channels) + layer.out_hw)
    if not cfg.is_mx:
        lo = -(1 << (cfg.operand_width - 1))
        return tuple(rng.integers(lo, -lo, s) for s in shapes)
    from bpsa.sim.gemm import random_mx_operand
    return tuple(random_mx_operand(s, rng) for s in shapes)


def operands(cfg, x, dy):
    """``(x, xs, dy, dys)``: the lanes' operands and, in MX, the scale codes (X along W, dY
    along OW, :func:`bpsa.models.mx.quantize`; ``None`` for integers)."""
    if not cfg.is_mx:
        return x, None, dy, None
    (xc, xs), (gc, gs) = (mx.quantize(t, cfg.arithmetic, axis=3) for t in (x, dy))
    return xc, xs, gc, gs


def _rows(codes, scales, lanes, lane0, mask):
    """Buffer words of rows (``codes``: channels x rows x pixels; ``scales``: channels x rows x
    blocks or None): each row's pixels, then its scale words; ``lanes`` lanes from channel
    ``lane0``, zero past the tensor."""
    nch = codes.shape[0]

    def word(src, y, i):
        return [int(src[lane0 + j, y, i]) & mask if lane0 + j < nch else 0
                for j in range(lanes)]
    out = []
    for y in range(codes.shape[1]):
        out += [word(codes, y, i) for i in range(codes.shape[2])]
        if scales is not None:
            out += [word(scales, y, b) for b in range(scales.shape[2])]
    return out


def run_words(cfg, ops, run):
    """``(x_words, dy_words)`` of one run from :func:`operands`: X's band (rows ``lo .. hi``
    of image ``n``, channels ``c0 ..`` in lanes) and dY's band (rows ``o0 .. o1``, channels
    ``k0 ..``), each row its pixels' words, then (MX) its scale words; lanes as unsigned
    bits."""
    x, xs, dy, dys = ops
    mask = (1 << cfg.operand_width) - 1
    n = run["n"]
    xw = _rows(x[n, :, run["lo"]:run["hi"]], None if xs is None else
               xs[n, :, run["lo"]:run["hi"]], cfg.feeder_bus_width, run["c0"], mask)
    dw = _rows(dy[n, :, run["o0"]:run["o1"]], None if dys is None else
               dys[n, :, run["o0"]:run["o1"]], cfg.cols, run["k0"], mask)
    return xw, dw


def expected(cfg, x, dy, layer):
    """dW of the golden model: the integer gradient wrapped to ``acc_width``, or the MX
    contract's zero-free walker order (``walker=True``)."""
    geometry = ((layer.stride_h, layer.stride_w), (layer.pad_h, layer.pad_w),
                (layer.dil_h, layer.dil_w))
    kernel = (layer.kernel_h, layer.kernel_w)
    if cfg.is_mx:
        return mx.conv_gradient(x, dy, cfg.arithmetic, kernel, *geometry, walker=True)
    g = golden.conv2d_weight_grad(x, dy, kernel, *geometry)
    half = 1 << (cfg.acc_width - 1)
    return (g + half) % (2 * half) - half


def add_rows(cfg, dw, layer, run, rows):
    """Add a run's ``zg`` rows ``(addr, data, scale_row, scale_cols)`` into ``dw`` in the order
    they came: integers wrapped; MX folded (:func:`bpsa.models.mx.accumulate_blocks`), a
    group of rows with distinct addresses at a time."""
    rs = layer.kernel_h * layer.kernel_w
    kn = min(cfg.cols, layer.out_channels - run["k0"])
    if not cfg.is_mx:
        half = 1 << (cfg.acc_width - 1)
        for addr, data, _, _ in rows:
            c, t = divmod(addr, rs)
            for j in range(kn):
                at = (run["k0"] + j, run["c0"] + c, t // layer.kernel_w, t % layer.kernel_w)
                dw[at] = (int(dw[at]) + data[j] + half) % (2 * half) - half
        return
    f = mx_format(cfg.arithmetic)
    bits = cfg.acc_width if f.is_int else cfg.acc_width - 1
    start, seen = 0, set()
    for i in range(len(rows) + 1):
        if i < len(rows) and rows[i][0] not in seen:
            seen.add(rows[i][0])
            continue
        group = rows[start:i]
        if group:
            c, t = np.divmod(np.array([g[0] for g in group]), rs)
            at = (np.arange(kn)[None, :] + run["k0"], (run["c0"] + c)[:, None],
                  (t // layer.kernel_w)[:, None], (t % layer.kernel_w)[:, None])
            lanes = np.array([g[1][:kn] for g in group], dtype=np.int64) & (
                (1 << cfg.acc_width) - 1)             # the lanes' bits (signed or not)
            sr = np.array([g[2] for g in group], dtype=np.int64)[:, None]
            sc = np.array([g[3][:kn] for g in group], dtype=np.int64)
            v = lanes & ((1 << bits) - 1)
            v = np.where(v >> (bits - 1), v - (1 << bits), v)
            e = sr + sc - 2 * MX_SCALE_BIAS + 2 * f.quantum_exp
            bad = ((lanes >> bits) != 0) | (sr == MX_SCALE_NAN) | (sc == MX_SCALE_NAN)
            dw[at] = mx.accumulate_blocks(dw[at], v, e, bad)
        start, seen = i, ({rows[i][0]} if i < len(rows) else set())


def model_cycles(cfg, desc):
    """The cycle model's cycles of one run (its descriptor ``desc``):
    :func:`bpsa.models.perf.zg_engine_cycles`."""
    from bpsa.models.perf import zg_engine_cycles
    return zg_engine_cycles(cfg, **{k: v for k, v in desc.items()
                                    if k not in ("x_base", "dy_base")})


def summary(cfg, layer, match, cycles, model, run_count):
    """One layer's summary: ``layer``, ``match``, ``runs``, ``cycles`` (each run's, from the
    cycle that takes ``start`` to ``done``), ``model_cycles``, ``macs`` and ``utilization``
    (the layer's MACs over rows x cols x cycles)."""
    oh, ow = layer.out_hw
    macs = (layer.batch * layer.out_channels * oh * ow * layer.channels * layer.kernel_h
            * layer.kernel_w)
    return {"layer": layer.text(), "match": bool(match), "runs": run_count, "cycles": cycles,
            "model_cycles": model, "macs": macs,
            "utilization": macs / (cfg.rows * cfg.cols * max(cycles, 1))}


async def _run(dut, cfg, ops, run, desc):
    """One run: its words written, ``start``, every ``zg`` row until ``done``. Returns the
    rows and the run's cycles (the cycle that takes ``start`` and the busy ones)."""
    from bpsa.gateware.frontends.drain import zg_layout
    from bpsa.gateware.frontends.zero_free.gradient import zf_gradient_layout
    xw, dw = run_words(cfg, ops, run)
    await write_words(dut, "x_write", desc["x_base"], xw, cfg.operand_width)
    await write_words(dut, "dy_write", desc["dy_base"], dw, cfg.operand_width)
    dut.layer.value = pack_struct(zf_gradient_layout(cfg), desc)
    dut.start.value = 1
    await RisingEdge(dut.clk)
    dut.start.value = 0
    lay = zg_layout(cfg)
    arrays = {"data": (cfg.acc_width, cfg.cols, False), "scale_cols": (8, cfg.cols, False)}
    out, busy = [], 1                                  # the cycle that took start
    for _ in range(1_000_000):
        await ReadOnly()
        busy += int(dut.busy.value)
        if int(dut.zg__valid.value):
            f = unpack_struct(lay, int(dut.zg__payload.value), arrays)
            out.append((f["addr"], f["data"], f.get("scale_row"), f.get("scale_cols")))
        done = int(dut.done.value)
        assert not (done and int(dut.error.value)), f"error raised on {desc}"
        await RisingEdge(dut.clk)
        if done:
            return out, busy
    raise AssertionError(f"the engine did not finish {desc}")


@cocotb.test()
async def layers_match_golden(dut):
    """Every layer of the environment, run by run: dW equals the golden model's and the
    cycles the cycle model's."""
    cfg = Config.from_dict(load_config_json())
    rng = np.random.default_rng(int(os.environ.get("BPSA_SEED", "1")))
    bands = int(os.environ.get("BPSA_BANDS", "1"))
    await reset(dut, ("x_write", "dy_write"))
    results, failures = [], []
    for layer in layers_from_env("C=5,H=6,W=40,K=5,R=3,pad=1"):
        x, dy = random_operands(cfg, layer, rng)
        want = expected(cfg, x, dy, layer)
        ops = operands(cfg, x, dy)
        got = np.zeros(want.shape, want.dtype)
        cycles = model = count = 0
        for run in runs(cfg, layer, bands):
            desc = descriptor(layer, run)
            rows, took = await _run(dut, cfg, ops, run, desc)
            add_rows(cfg, got, layer, run, rows)
            cycles, model, count = cycles + took, model + model_cycles(cfg, desc), count + 1
        bad = np.argwhere(got != want)
        results.append(summary(cfg, layer, not len(bad), cycles, model, count))
        if len(bad):
            failures.append(f"{layer.text()}: {len(bad)} of {got.size} differ, first "
                            f"{tuple(bad[0])}")
        if cycles != model:
            failures.append(f"{layer.text()}: {cycles} cycles, the model {model}")
        dut._log.info(f"gradient {layer.text()}: {'match' if not len(bad) else 'MISMATCH'}, "
                      f"{count} runs, {cycles} cycles (model {model})")
    if os.environ.get("BPSA_SUMMARY"):
        with open(os.environ["BPSA_SUMMARY"], "w") as f:
            json.dump(results, f)
    assert not failures, "; ".join(failures)
