"""GEMM driver: tile any problem onto an R x C array and stream it through a dataflow.

A *program* is the cycle-by-cycle input of :class:`bpsa.gateware.array.systolic.SystolicArray` for one
problem plus the plan that puts the array's output vectors back into result matrices. Testbenches
(Amaranth simulator, cocotb/Verilator) and, later, the controller share this one tiling logic.

Dataflows (see ``src/bpsa/gateware/array/systolic.py`` for the port-level contract):

``os``
    ``C = A @ B``; one context per (R-row, C-column) output tile, streaming all of K.
``is``
    ``C = A @ B`` holding B (BP-im2col's stationary input matrix) in tiles of R rows of K x C
    columns of N; the rows of A (the dynamic matrix) stream; the partial sums of the K tiles are
    added as they leave the array (the partial-sum buffer's job).
``ws``
    ``C = A @ B`` holding A (the weights, in BP-im2col's convention that A is the dynamic,
    weight-like operand) as ``A^T`` tiles and streaming the columns of B: ``C^T = B^T A^T``.
``interleaved``
    FC backward pass (InterGrad): given W (O x I), delta (O x Bt) and activations (I x Bt),
    ``dA = W^T delta`` and ``G = delta a^T`` in one pass, each delta read once and held two
    cycles; optionally ``W_new = W - (G >> sgd_shift)``.

Tiles closer than ``2R`` cycles are padded with idle cycles (the drain of one context and the
load of the next held tile each need ``2R`` cycles of the chains).
"""

from dataclasses import dataclass, field

import numpy as np

from bpsa.config import DRAIN_REGISTERS, FLOAT_REDUCE_LATENCY, MX_WIDTHS, context_gap
from bpsa.models import floating
from bpsa.models.pe_model import PEParams, pe_matmul
from bpsa.spec.numeric import operand_range, wrap, wrap_array
from bpsa.sim.lanes import pack, unpack

__all__ = ["ArrayShape", "Program", "program", "DATAFLOW_CODES", "collect_outputs", "expected",
           "random_problem", "summary"]

#: The array's ``Dataflow`` encodings.
DATAFLOW_CODES = {"os": 0, "ws": 1, "is": 2, "interleaved": 3}


@dataclass(frozen=True)
class ArrayShape(PEParams):
    """What the driver needs to know of a configuration: the PE's formats plus the array size."""
    rows: int = 1
    cols: int = 1

    @classmethod
    def of(cls, cfg):
        get = (lambda k: cfg[k]) if isinstance(cfg, dict) else (lambda k: getattr(cfg, k))
        return cls(**vars(PEParams.of(cfg)), rows=get("rows"), cols=get("cols"))

    @property
    def context_gap(self):
        """The fewest cycles between output-stationary context ends
        (:func:`bpsa.config.context_gap`)."""
        return context_gap(self.rows, self.arithmetic)



@dataclass
class Program:
    """Inputs per cycle and the plan for the outputs of one problem."""
    flow: str
    shape: ArrayShape
    cycles: list                                   # dicts of non-default inputs
    static: dict                                   # dataflow, sgd_en, sgd_shift
    drain_targets: list = field(default_factory=list)   # per drain context: (kind, r0, c0)
    psum_targets: list = field(default_factory=list)    # per psum vector: (kind, row, c0)
    results: dict = field(default_factory=dict)    # name -> zero matrix to fill
    useful_macs: int = 0
    tiles: int = 0
    reads: dict = field(default_factory=dict)      # operand -> elements read from buffers
    writes: int = 0                                # result elements written

    def read(self, operand, n):
        self.reads[operand] = self.reads.get(operand, 0) + int(n)

    def port_values(self, cycle):
        """Packed port values of one cycle (every input port, defaults included)."""
        s = self.shape
        return {
            "a_data": pack(cycle.get("a", ()), s.operand_width),
            "a_valid": cycle.get("a_valid", 0),
            "a_last": cycle.get("a_last", 0),
            "b_data": pack(cycle.get("b", ()), s.vertical_width),
            "b_valid": cycle.get("b_valid", 0),
            "b_tag": cycle.get("b_tag", 0),
            "preload": pack(cycle.get("preload", ()), s.acc_width),
            "chain_shift": cycle.get("chain_shift", 0),
            "chain_load": cycle.get("chain_load", 0),
        }

    def assemble(self, drains, psums):
        """Results from the output vectors in arrival order: ``drains`` is a list of
        ``(row, lanes)``, ``psums`` a list of lanes. Checks the counts."""
        R = self.shape.rows
        if len(drains) != R * len(self.drain_targets):
            raise AssertionError(f"{len(drains)} drain vectors, expected "
                                 f"{R * len(self.drain_targets)}")
        if len(psums) != len(self.psum_targets):
            raise AssertionError(f"{len(psums)} psum vectors, expected {len(self.psum_targets)}")
        out = {k: v.copy() for k, v in self.results.items()}
        for t, (kind, r0, c0) in enumerate(self.drain_targets):
            for k in range(R):
                row, lanes = drains[t * R + k]
                if row != R - 1 - k:
                    raise AssertionError(f"drain vector {t * R + k} is row {row}, "
                                         f"expected {R - 1 - k}")
                _place(out[kind], r0 + row, c0, lanes, add=False)
        for (kind, row, c0), lanes in zip(self.psum_targets, psums):
            _place(out[kind], row, c0, lanes, add=True, bits=self.shape.acc_width,
                   signed=self.shape.vertical_signed)
        return out


def _place(mat, row, c0, lanes, *, add, bits=None, signed=True):
    if row >= mat.shape[0]:
        return
    n = min(len(lanes), mat.shape[1] - c0)
    vals = np.asarray(lanes[:n], dtype=np.int64)
    if add:
        s = mat[row, c0:c0 + n] + vals
        mat[row, c0:c0 + n] = [wrap(int(x), bits, signed) for x in s]
    else:
        mat[row, c0:c0 + n] = vals


def _lanes(vec, n):
    v = [int(x) for x in vec]
    return v + [0] * (n - len(v))


def _os(A, B, s, stalls=None):
    R, C = s.rows, s.cols
    M, K = A.shape
    N = B.shape[1]
    cycles = [{"chain_shift": 1} for _ in range(R)]      # zero the reserve chains
    prog = Program("os", s, cycles, {"dataflow": DATAFLOW_CODES["os"]})
    prog.results = {"c": np.zeros((M, N), dtype=np.int64)}
    last_end = -s.context_gap
    for m0 in range(0, M, R):
        for n0 in range(0, N, C):
            for k in range(K):
                while stalls is not None and stalls[1].random() < stalls[0]:
                    cycles.append({})
                if k == K - 1:      # context ends at least context_gap cycles apart
                    cycles.extend({} for _ in range(last_end + s.context_gap - len(cycles)))
                    last_end = len(cycles)
                cycles.append({"a": _lanes(A[m0:m0 + R, k], R), "a_valid": 1,
                               "a_last": int(k == K - 1),
                               "b": _lanes(B[k, n0:n0 + C], C), "b_valid": 1})
            prog.read("a", K * min(R, M - m0))
            prog.read("b", K * min(C, N - n0))
            prog.writes += min(R, M - m0) * min(C, N - n0)
            prog.drain_targets.append(("c", m0, n0))
            prog.tiles += 1
    cycles.extend({} for _ in range(_tail(s)))
    prog.useful_macs = M * K * N
    return prog


def _tail(s):
    """Idle cycles after the last context: its drain (and in floating point the partials'
    reduction) leaves the array."""
    extra = FLOAT_REDUCE_LATENCY if s.is_float else 0
    return s.context_gap + s.cols + 2 + s.mac_latency + DRAIN_REGISTERS + extra


def _hold(A, B, s, flow, result="c", transpose=False):
    """``A @ B`` holding B tiles; with ``transpose`` the result is stored transposed."""
    R, C = s.rows, s.cols
    M, K = A.shape
    N = B.shape[1]
    tiles = [(k0, n0) for n0 in range(0, N, C) for k0 in range(0, K, R)]
    cycles = []
    prog = Program(flow, s, cycles, {"dataflow": DATAFLOW_CODES[flow]})
    prog.results = {result: np.zeros((N, M) if transpose else (M, N), dtype=np.int64)}

    def tile_rows(t):
        k0, n0 = tiles[t]
        return [_lanes(B[k0 + r, n0:n0 + C], C) if k0 + r < K else [0] * C
                for r in range(R)]

    for row in reversed(tile_rows(0)):
        cycles.append({"chain_shift": 1, "preload": row})
    cycles.append({"chain_load": 1})
    for t, (k0, n0) in enumerate(tiles):
        rows_k, cols_n = min(R, K - k0), min(C, N - n0)
        prog.read("held", rows_k * cols_n)
        prog.read("streamed", M * rows_k)
        if k0 > 0:
            prog.read("partial_sums", M * cols_n)     # read-modify-write of the P buffer
        prog.writes += M * cols_n
        start = len(cycles)
        pad = max(0, 2 * R - M)
        cycles.extend({} for _ in range(pad))
        for m in range(M):
            cycles.append({"a": _lanes(A[m, k0:k0 + R], R), "a_valid": 1,
                           "a_last": int(m == M - 1), "b": [0] * C, "b_valid": 1})
            if transpose:
                prog.psum_targets.append((result, m, n0))
            else:
                prog.psum_targets.append((result, m, n0))
        if t + 1 < len(tiles):
            # The next tile's rows enter the chains once every PE has switched to this tile.
            for r, row in enumerate(reversed(tile_rows(t + 1))):
                cycles[start + R - 1 + r].update({"chain_shift": 1, "preload": row})
        prog.tiles += 1
    cycles.extend({} for _ in range(R + C + 2 + s.mac_latency + DRAIN_REGISTERS))
    prog.useful_macs = M * K * N
    if transpose:
        # psums are rows of C^T: (row m of A-side) -> column block n0 of the result.
        prog.psum_targets = [(k, row, c0) for (k, row, c0) in prog.psum_targets]
    return prog


def _interleaved(W, delta, act, s, sgd_shift=None):
    R, C = s.rows, s.cols
    O, I = W.shape
    Bt = delta.shape[1]
    tiles = [(o0, i0) for o0 in range(0, O, R) for i0 in range(0, I, C)]
    cycles = []
    static = {"dataflow": DATAFLOW_CODES["interleaved"], "sgd_en": int(sgd_shift is not None),
              "sgd_shift": sgd_shift or 0}
    prog = Program("interleaved", s, cycles, static)
    prog.results = {"da": np.zeros((I, Bt), dtype=np.int64),
                    "g": np.zeros((O, I), dtype=np.int64)}

    def w_rows(t):
        if t >= len(tiles):
            return [[0] * C for _ in range(R)]
        o0, i0 = tiles[t]
        return [_lanes(W[o0 + r, i0:i0 + C], C) if o0 + r < O else [0] * C for r in range(R)]

    for row in reversed(w_rows(0)):
        cycles.append({"chain_shift": 1, "preload": row})
    cycles.append({"chain_load": 1})
    for row in reversed(w_rows(1)):
        cycles.append({"chain_shift": 1, "preload": row})
    ends = []
    for t, (o0, i0) in enumerate(tiles):
        rows_o, cols_i = min(R, O - o0), min(C, I - i0)
        prog.read("w", rows_o * cols_i)
        prog.read("delta", Bt * rows_o)              # each delta read once, held two cycles
        prog.read("act", Bt * cols_i)
        if o0 > 0:
            prog.read("partial_sums", Bt * cols_i)
        prog.writes += Bt * cols_i + rows_o * cols_i  # dA (partial) and G or the new W
        cycles.extend({} for _ in range(max(0, 2 * R + s.mac_latency - 2 * Bt)))
        for n in range(Bt):
            d = _lanes(delta[o0:o0 + R, n], R)
            cycles.append({"a": d, "a_valid": 1, "b": _lanes(act[i0:i0 + C, n], C),
                           "b_valid": 1, "b_tag": 0})
            cycles.append({"a": d, "a_valid": 1, "a_last": int(n == Bt - 1), "b": [0] * C,
                           "b_valid": 1, "b_tag": 1})
            prog.psum_targets.append(("da", i0, n))
        ends.append(len(cycles) - 1)
        prog.drain_targets.append(("g", o0, i0))
        prog.tiles += 1
    cycles.extend({} for _ in range(2 * R + C + 2 + s.mac_latency + DRAIN_REGISTERS))
    # During the drain after context t (it starts R + LATENCY cycles after the context's end),
    # the chains take the weights of tile t + 2.
    for t, e in enumerate(ends):
        for r, row in enumerate(reversed(w_rows(t + 2))):
            cycles[e + R + s.mac_latency + r]["preload"] = row
    # psums are columns of dA: lanes go down the rows i0.. of column n.
    prog.psum_targets = [("da_t", n, i0) for (_, i0, n) in prog.psum_targets]
    prog.results["da_t"] = np.zeros((Bt, I), dtype=np.int64)
    del prog.results["da"]
    prog.useful_macs = 2 * O * I * Bt
    return prog


def program(flow, shape, *, a=None, b=None, w=None, delta=None, act=None, sgd_shift=None,
            stalls=None):
    """The program of one problem.

    ``os``/``ws``/``is``: ``a`` (M x K), ``b`` (K x N) -> result ``c``.
    ``interleaved``: ``w`` (O x I), ``delta`` (O x Bt), ``act`` (I x Bt) -> results ``da_t``
    (= (W^T delta)^T, Bt x I) and ``g`` (O x I, or the updated weights when ``sgd_shift`` is
    given).

    ``stalls`` (``os`` only): ``(probability, rng)``: before each slot, idle cycles (a feeder
    that stalls), each with that probability, so the stream has bubbles.
    """
    s = shape if isinstance(shape, ArrayShape) else ArrayShape.of(shape)
    if flow not in DATAFLOW_CODES:
        raise ValueError(f"dataflow must be one of {sorted(DATAFLOW_CODES)}, not {flow!r}")
    if flow not in s.dataflows:
        raise ValueError(f"dataflow {flow!r} is not generated in this configuration "
                         f"(dataflows {list(s.dataflows)})")
    if flow == "interleaved":
        w, delta, act = (np.asarray(x, dtype=np.int64) for x in (w, delta, act))
        if delta.shape[0] != w.shape[0] or act.shape[0] != w.shape[1] \
                or delta.shape[1] != act.shape[1]:
            raise ValueError(f"interleaved shapes do not match: W {w.shape}, "
                             f"delta {delta.shape}, act {act.shape}")
        return _interleaved(w, delta, act, s, sgd_shift)
    a, b = np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64)
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0] or 0 in a.shape + b.shape:
        raise ValueError(f"GEMM shapes do not chain: A {a.shape}, B {b.shape}")
    if flow == "os":
        return _os(a, b, s, stalls)
    if stalls is not None:
        raise ValueError("stalls are generated for the os dataflow only")
    if flow == "is":
        return _hold(a, b, s, "is")
    # ws: hold A^T (the weights), stream B^T: C^T = B^T @ A^T.
    return _hold(b.T, a.T, s, "ws", result="ct")


def collect_outputs(shape, values):
    """Decode one cycle's sampled outputs: ``values`` maps port names to integers. Returns
    ``(drain, psum)``, each None or the decoded vector (``(row, lanes)`` for the drain)."""
    s = shape
    drain = psum = None
    if values.get("drain_valid"):
        drain = (values["drain_row"], unpack(values["drain_data"], s.acc_width, s.cols,
                                             s.acc_signed))
    if values.get("psum_valid"):
        psum = unpack(values["psum_data"], s.vertical_width, s.cols, s.vertical_signed)
    return drain, psum


def expected(flow, shape, *, a=None, b=None, w=None, delta=None, act=None, sgd_shift=None):
    """What numpy says the program's results are (wrapped to the accumulator width)."""
    s = shape if isinstance(shape, ArrayShape) else ArrayShape.of(shape)
    if s.is_float:
        if flow != "os":
            raise ValueError(f"dataflow {flow!r} is not built in floating point")
        return {"c": floating.gemm_os(a, b, s.arithmetic).astype(np.int64)}

    def wr(t):
        return wrap_array(t, s.acc_width)

    if flow in ("os", "is", "ws"):
        # integers, or an MX format's block sums as the PEs hold them
        c = pe_matmul(a, b, s.arithmetic, s.acc_width)
        return {"ct": c.T} if flow == "ws" else {"c": c}
    if s.arithmetic in MX_WIDTHS:
        if sgd_shift is not None:
            raise ValueError("the interleaved pass's SGD step is not built in MX (G leaves as "
                             "block sums)")
        # the loss's partial sums down the columns and G's context, as the PEs hold them
        return {"da_t": pe_matmul(np.asarray(w).T, delta, s.arithmetic, s.acc_width).T,
                "g": pe_matmul(delta, np.asarray(act).T, s.arithmetic, s.acc_width)}
    w, delta, act = (np.asarray(x, dtype=np.int64) for x in (w, delta, act))
    g = wr(delta @ act.T)
    out = {"da_t": wr((w.T @ delta).T)}
    if sgd_shift is None:
        out["g"] = g
    else:
        out["g"] = wrap_array(w - (g >> sgd_shift), s.operand_width, s.operand_signed)
    return out


def random_problem(shape, flow, dims, rng, zero_prob=0.2):
    """Random operands (a fraction ``zero_prob`` of zeros) for ``program``: ``dims`` is
    (M, K, N) for os/ws/is and (O, Bt, I) for interleaved."""
    s = shape if isinstance(shape, ArrayShape) else ArrayShape.of(shape)
    if s.is_float:
        def mat(r, c):
            return random_float_operands(s.arithmetic, (r, c), rng, zero_prob)
    else:
        lo, hi = operand_range(s)

        def mat(r, c):
            x = rng.integers(lo, hi + 1, (r, c))
            x[rng.random((r, c)) < zero_prob] = 0
            return x

    if flow == "interleaved":
        o, bt, i = dims
        return {"w": mat(o, i), "delta": mat(o, bt), "act": mat(i, bt)}
    m, k, n = dims
    return {"a": mat(m, k), "b": mat(k, n)}


def random_mx_operand(shape, rng, scale_axes=None, zero_every=7):
    """A random float32 operand of ``shape`` for an MX configuration: normal values times
    powers of two in ``[2**-6, 2**5]``, one power a slice along ``scale_axes`` (default: one an
    element), so that the blocks' scales differ, and every ``zero_every``-th element zero."""
    mag = shape if scale_axes is None else tuple(
        d if i in scale_axes else 1 for i, d in enumerate(shape))
    v = rng.standard_normal(shape) * np.exp2(rng.integers(-6, 6, mag))
    v.flat[::zero_every] = 0
    return v.astype(np.float32)


def random_float_operands(fmt, shape, rng, zero_prob=0.2, special_prob=0.01):
    """Random ``fmt`` encodings (int64 array of ``shape``): normal numbers of both signs with
    exponents within 4 of the bias (sums of them cancel and round), a fraction ``zero_prob`` of
    zeros of either sign or subnormals (skipped MACs) and ``special_prob`` of infinities and
    NaNs."""
    f = floating.float_format(fmt)
    n = int(np.prod(shape))
    sign = rng.integers(0, 2, n) << (f.bits - 1)
    exp = (f.bias + rng.integers(-4, 5, n)) << f.man_bits
    x = sign | exp | rng.integers(0, 1 << f.man_bits, n)
    u = rng.random(n)
    zero = u < zero_prob
    x[zero] = sign[zero] | np.where(rng.random(int(zero.sum())) < 0.5, 0,
                                    rng.integers(1, 1 << f.man_bits, int(zero.sum())))
    special = (u >= zero_prob) & (u < zero_prob + special_prob)
    x[special] = sign[special] | f.inf | np.where(rng.random(int(special.sum())) < 0.5, 0, 1)
    return x.reshape(shape).astype(np.int64)


def summary(prog, got, want, counters):
    """The ``bpsa sim`` summary of one run: match, cycles, counters, utilization."""
    s = prog.shape
    match = all(np.array_equal(got[k], v) for k, v in want.items())
    cycles = int(counters["cycles"])
    out = {"match": bool(match), "dataflow": prog.flow, "rows": s.rows, "cols": s.cols,
           "tiles": prog.tiles, "cycles": cycles, "useful_macs": int(prog.useful_macs),
           "utilization": prog.useful_macs / (s.rows * s.cols * cycles) if cycles else 0.0}
    out.update({k: int(v) for k, v in counters.items() if k != "cycles"})
    out["reads"] = dict(sorted(prog.reads.items()))
    out["total_reads"] = sum(prog.reads.values())
    out["writes"] = prog.writes
    return out
