"""R x C systolic array of PEs with edge skew, output deskew, automatic drain and counters.

Every port is *lane-aligned* and in *edge time*: the array delays row ``i`` of the left edge by
``i`` cycles, and column ``j`` of the top edge and of the chain commands by ``j`` cycles, so that
the element a user presents for row ``i`` in cycle ``t`` meets, in PE ``(i, j)`` in cycle
``t + i + j``, the element presented for column ``j`` in cycle ``t``. Outputs are deskewed the
same way, so one result vector (all columns) appears per cycle. There is no backpressure inside:
valid bits travel with the data, and whoever feeds the array stalls instead.

**Latency contract.** ``LATENCY`` (``config.mac_latency``, :data:`bpsa.config.MAC_LATENCY`:
4 for integers) is the number of cycles the PEs' pipelined multiply-accumulate adds to the plain systolic timing: a slot's product
is added ``LATENCY`` cycles after its operands meet in a PE. So the automatic drain of a context
begins ``R + LATENCY`` cycles after its ``a_last`` cycle (the first ``drain_shift``; the first
``drain_valid`` ``C + 1`` cycles later: :data:`bpsa.config.DRAIN_REGISTERS` = 2 registers at
the bottom of each column, the second holding the SGD step's result), and the partial sums of a vector presented in cycle ``t``
leave (deskewed) in cycle ``t + R + C - 1 + LATENCY``. ``busy`` stays high until the last
slot has left every pipeline. Front ends wait for ``drain_valid`` / ``psum_valid`` / ``busy``;
the cycle model (:mod:`bpsa.models.perf`) adds ``LATENCY`` to every drain.

Dataflows (``dataflow`` port, static while a run is in flight):

``OS`` (output-stationary)
    ``a`` lanes carry A[m0 + i, k], ``b`` lanes carry B[k, n0 + j]; a context (tile) ends with
    ``a_last`` on its final ``k``. Each PE then swaps its accumulator with its reserve register,
    and the array drains the finished tile automatically: starting ``R + LATENCY`` cycles after
    the ``a_last`` cycle it shifts the reserve chains ``R`` times, producing ``drain`` vectors for
    tile rows ``R-1`` down to ``0`` while the next tile already accumulates. Each shift takes the
    ``preload`` vector presented in that cycle (``drain_shift`` tells when) into the chain; the
    value a PE holds in its reserve register when its next context ends becomes its starting
    accumulator for the context after that. Contexts must be at least ``2R`` cycles apart
    (``a_last`` to ``a_last``); closer ones set ``error``.
``WS`` / ``IS`` (a held operand)
    The held tile is loaded through the reserve chains with ``chain_shift`` (the ``preload``
    vector is row ``R-1`` first, row ``0`` last) and copied into the PEs with ``chain_load``.
    ``a`` lanes carry the streamed operand, ``b`` lanes carry incoming partial sums (zero for a
    fresh sum), with ``b_valid`` on the same cycles as ``a_valid``. ``psum`` vectors appear
    ``R + C - 1 + LATENCY`` cycles later (the array delays the incoming sums by ``LATENCY``
    inside, so a user presents a slot's operand and its partial sum in the same cycle). A next held tile may be shifted in while the current one streams;
    ``a_last`` on the current tile's final vector then switches every PE to it at the right cycle.
``INTERLEAVED`` (InterGrad)
    ``a`` lanes carry delta, each value presented for two cycles; ``b`` lanes carry an
    activation with ``b_tag = 0`` in the first cycle and an incoming partial sum with
    ``b_tag = 1`` in the second. PEs hold W (loaded as for WS) and accumulate
    G = sum(delta * activation). ``psum`` vectors carry W^T delta (one per delta, from the tag-1
    cycles). ``a_last`` on the second cycle of the final delta ends the context: the drain
    produces G, or with ``sgd_en`` the updated weights ``W - (G >> sgd_shift)``, and the PEs
    take the next weights from their reserve registers. Interleaved contexts must be at least
    ``2R + LATENCY`` cycles apart (closer ones set ``error``): a PE takes its next weights in
    the end slot, after the previous context's drain has brought them.

Members
-------
dataflow : In(Dataflow)
a_data, a_valid, a_last : In
    Left edge: ``rows`` operand lanes.
b_data, b_valid[, b_tag] : In
    Top edge: ``cols`` lanes of the vertical channel width.
preload : In
    ``cols`` accumulator-width lanes shifted into the reserve chains on shift cycles.
chain_shift, chain_load : In
    User chain commands (held-operand loading); a collision with an automatic drain sets
    ``error``.
sgd_en, sgd_shift : In
    (interleaved) in-place SGD update; not in MX, whose G leaves as block sums for the
    host's fp32 step.
drain_shift : Out
    The array shifts the chains in this cycle and takes ``preload`` (registered, so it can be
    read before the cycle's inputs are set).
drain_data, drain_valid, drain_row : Out
    Deskewed reserve-chain outputs (finished OS tiles, G or updated W).
psum_data, psum_valid : Out
    Deskewed bottom-edge partial sums (WS, IS, interleaved).
busy : Out
    Data, a chain command or a drain is in flight.
error : Out
    Sticky: contexts closer than ``2R`` cycles (interleaved: ``2R + LATENCY``) or a chain
    command during a drain. Cleared by
    ``clear``.
clear : In
    Clears ``error`` and the counters.
cycles, a_words, b_words, drained, psums, fired, gated : Out
    Counters since ``clear``: busy cycles, valid left-edge vectors, valid top-edge vectors, drain
    vectors, psum vectors, MACs performed, MACs gated by zero operands (these two trail the
    MACs by three cycles, still inside ``busy``; ``cycles`` trails ``busy`` by one).
"""

from amaranth.hdl import Const, Module, Mux, Signal, Value
from amaranth.lib import data, enum, wiring
from amaranth.lib.wiring import In, Out

from bpsa.config import DRAIN_REGISTERS
from bpsa.gateware.array.arith import arith_for
from bpsa.gateware.array.float_reduce import PartialReducer
from bpsa.gateware.array.pe import PE, PEMode, vertical_shape
from bpsa.gateware.array.pe_float import FloatPE

__all__ = ["Dataflow", "SystolicArray", "COUNTER_WIDTH", "array_signature",
           "share_array"]

COUNTER_WIDTH = 48


class Dataflow(enum.Enum, shape=2):
    OS = 0
    WS = 1
    IS = 2
    INTERLEAVED = 3


_FLOW_NAMES = {Dataflow.OS: "os", Dataflow.WS: "ws", Dataflow.IS: "is",
               Dataflow.INTERLEAVED: "interleaved"}


def _delay(m, sig, n, name):
    """``sig`` delayed by ``n`` registered cycles (``n`` may be 0)."""
    for k in range(n):
        nxt = Signal.like(sig, name=f"{name}_d{k + 1}")
        m.d.sync += nxt.eq(sig)
        sig = nxt
    return sig


def _popcount(bits):
    """Sum of a list of 1-bit values as a balanced adder tree."""
    if not bits:
        return Const(0, 1)
    while len(bits) > 1:
        bits = [bits[k] + bits[k + 1] if k + 1 < len(bits) else bits[k]
                for k in range(0, len(bits), 2)]
    return bits[0]


def array_signature(config):
    """The :class:`SystolicArray` interface for ``config`` (its members, seen from the array).
    An engine that drives a shared array has ``In(array_signature(config))``."""
    ar = arith_for(config)
    R, C = config.rows, config.cols
    vshape = vertical_shape(config)
    members = {
        "dataflow": In(Dataflow),
        "a_data": In(data.ArrayLayout(ar.operand_shape, R)),
        "a_valid": In(1), "a_last": In(1),
        "b_data": In(data.ArrayLayout(vshape, C)),
        "b_valid": In(1),
        "preload": In(data.ArrayLayout(ar.acc_shape, C)),
        "chain_shift": In(1),
        "drain_shift": Out(1),
        "drain_data": Out(data.ArrayLayout(ar.acc_shape, C)),
        "drain_valid": Out(1),
        "drain_row": Out(range(R)),
        "busy": Out(1),
        "error": Out(1),
        "clear": In(1),
    }
    if config.has_held_operand:
        members.update({
            "chain_load": In(1),
            "psum_data": Out(data.ArrayLayout(vshape, C)),
            "psum_valid": Out(1),
        })
    if config.has("interleaved"):
        members["b_tag"] = In(1)
        if not config.is_mx:        # MX: G leaves as block sums; the host steps W
            members.update({"sgd_en": In(1), "sgd_shift": In(ar.shift_shape)})
    for name in ("cycles", "a_words", "b_words", "drained", "psums", "fired", "gated"):
        members[name] = Out(COUNTER_WIDTH)
    return wiring.Signature(members)


#: Array outputs that announce an event; a user that does not own the array sees them low.
_EVENT_OUTPUTS = ("drain_shift", "drain_valid", "psum_valid", "busy", "error")


def share_array(m, array, users):
    """Let several front ends drive one ``array``. ``users`` is a list of ``(port, owns)``: each
    ``port`` an ``In(array_signature(...))`` interface of an engine, ``owns`` a 1-bit value that
    is high for at most one user at a time (and stable while a run is in flight). The owner's
    inputs reach the array; every user sees the array's data and counters, but only the owner
    sees its events (drains, partial sums, busy, error), so an idle engine never mistakes
    another's results for its own. With no owner the array's inputs are idle (zero)."""
    for name, member in array.signature.members.items():
        if member.flow == In:
            value = Const(0, len(Value.cast(getattr(array, name))))
            for port, owns in reversed(users):
                value = Mux(owns, Value.cast(getattr(port, name)), value)
            m.d.comb += Value.cast(getattr(array, name)).eq(value)
        else:
            out = Value.cast(getattr(array, name))
            for port, owns in users:
                m.d.comb += Value.cast(getattr(port, name)).eq(
                    out & owns if name in _EVENT_OUTPUTS else out)


class SystolicArray(wiring.Component):
    def __init__(self, config):
        self.config = config
        self.arith = arith_for(config)
        super().__init__(array_signature(config))

    def elaborate(self, platform):
        cfg = self.config
        R, C = cfg.rows, cfg.cols
        L = cfg.mac_latency
        m = Module()

        pe_class = FloatPE if cfg.is_float else PE
        pes = [[pe_class(cfg) for _ in range(C)] for _ in range(R)]
        for i in range(R):
            for j in range(C):
                m.submodules[f"pe_{i}_{j}"] = pes[i][j]

        pe_mode = self._pe_mode(m)
        is_il = (self.dataflow == Dataflow.INTERLEAVED) if cfg.has("interleaved") else 0
        cnt, auto_shift, load = self._drain_control(m, is_il)
        shift = auto_shift | self.chain_shift

        self._left_edge(m, pes)
        self._top_edge(m, pes, shift, load)
        self._mesh(m, pes, pe_mode)

        # Drain output: column j shifts at edge time + j; deskew by C-1-j.
        if cfg.is_float:
            dv_stages = self._float_drain(m, pes, auto_shift)
        else:
            dv_stages = self._drain(m, pes, auto_shift, cnt, is_il)

        if cfg.has_held_operand:
            self._psum_output(m, pes, is_il)

        busy = self._busy(m, pes, cnt, dv_stages, load)
        self._counters(m, pes, busy)
        return m

    def _pe_mode(self, m):
        """Dataflow -> PE mode; dataflows that are not generated map to a harmless mode."""
        pe_mode = Signal(PEMode)
        with m.Switch(self.dataflow):
            with m.Case(Dataflow.OS):
                m.d.comb += pe_mode.eq(PEMode.OS)
            with m.Case(Dataflow.WS, Dataflow.IS):
                m.d.comb += pe_mode.eq(PEMode.HOLD)
            with m.Case(Dataflow.INTERLEAVED):
                m.d.comb += pe_mode.eq(PEMode.INTERLEAVED)
        return pe_mode

    def _drain_control(self, m, is_il):
        """Automatic drain after a context end (edge time), ``drain_shift`` and the collision
        ``error``. Returns the drain counter ``cnt``, ``auto_shift`` (the drain's chain shift)
        and the chain-load command (``Const(0)`` without a held operand)."""
        cfg = self.config
        R, L = cfg.rows, cfg.mac_latency
        drains = (self.dataflow == Dataflow.OS) | is_il if cfg.has_accumulator else Const(0)

        tag = self.b_tag if cfg.has("interleaved") else 0
        ctx_end = self.a_valid & self.a_last & drains & Mux(is_il, tag, 1)
        # The PEs swap LATENCY cycles after the slot that ends a context: so does the drain.
        ctx_swap = _delay(m, ctx_end, L, "ctx_end")
        # A drain shifts the chains once a row (a floating-point PE's partials side by side),
        # starting R cycles after the swap (when the last row has swapped).
        cnt = Signal(range(2 * R + 1))
        # Interleaved contexts swap weights in their first PE at the end slot itself, which must
        # come after the previous drain: they are 2R + LATENCY apart, OS contexts
        # config.context_gap (2R for integers).
        gap = max(cfg.context_gap, 2 * R + (L if cfg.has("interleaved") else 0))
        since = Signal(range(gap + 1), init=gap)
        # auto_shift is a register: high while cnt is in 2 .. R + 1, set from cnt's next value
        cnt_next = Signal.like(cnt)
        auto_shift = Signal()
        m.d.comb += cnt_next.eq(Mux(ctx_swap, 2 * R, Mux(cnt != 0, cnt - 1, 0)))
        m.d.sync += [cnt.eq(cnt_next), auto_shift.eq((cnt_next >= 2) & (cnt_next <= R + 1))]
        with m.If(ctx_end):
            m.d.sync += since.eq(1)
        with m.Elif(since != gap):
            m.d.sync += since.eq(since + 1)
        m.d.comb += self.drain_shift.eq(auto_shift)

        load = self.chain_load if cfg.has_held_operand else Const(0)
        min_gap = Mux(is_il, gap, cfg.context_gap) if cfg.has("interleaved") \
            else cfg.context_gap
        collide = (ctx_end & (since < min_gap)) | \
            (auto_shift & (self.chain_shift | load))
        with m.If(self.clear):
            m.d.sync += self.error.eq(0)
        with m.Elif(collide):
            m.d.sync += self.error.eq(1)
        return cnt, auto_shift, load

    def _left_edge(self, m, pes):
        """Left edge: row i delayed by i."""
        cfg = self.config
        for i in range(cfg.rows):
            pe = pes[i][0]
            if cfg.zero_gating:
                m.d.comb += pe.h_zero_in.eq(_delay(m, self.arith.zero(self.a_data[i]), i,
                                                   f"az{i}"))
            m.d.comb += [
                pe.h_in.eq(_delay(m, self.a_data[i], i, f"a{i}")),
                pe.h_valid_in.eq(_delay(m, self.a_valid, i, f"av{i}")),
                pe.h_last_in.eq(_delay(m, self.a_last, i, f"al{i}")),
            ]

    def _top_edge(self, m, pes, shift, load):
        """Top edge and chain commands: column j delayed by j."""
        cfg = self.config
        R, L = cfg.rows, cfg.mac_latency
        for j in range(cfg.cols):
            pe = pes[0][j]
            b_col = _delay(m, self.b_data[j], j, f"b{j}")
            m.d.comb += [
                pe.v_valid_in.eq(_delay(m, self.b_valid, j, f"bv{j}")),
                # floating point: the preload is partial 0's start, the others start at +0
                (pe.chain_in[0] if cfg.is_float else pe.chain_in).eq(
                    _delay(m, self.preload[j], j, f"pl{j}")),
            ]
            if cfg.has_accumulator:
                m.d.comb += pe.v_in.eq(self.arith.as_operand(b_col))
                if cfg.zero_gating:
                    b_zero = self.arith.zero(self.arith.as_operand(self.b_data[j]))
                    m.d.comb += pe.v_zero_in.eq(_delay(m, b_zero, j, f"bz{j}"))
            if cfg.has_held_operand:
                # Partial sums enter LATENCY cycles behind their slots, when the products are.
                m.d.comb += pe.p_in.eq(_delay(m, b_col, L, f"p{j}"))
            if cfg.has("interleaved"):
                m.d.comb += pe.wchain_in.eq(0)
            if cfg.has("interleaved"):
                m.d.comb += pe.v_tag_in.eq(_delay(m, self.b_tag, j, f"bt{j}"))
            col_shift = _delay(m, shift, j, f"sh{j}")
            col_load = _delay(m, load, j, f"ld{j}") if cfg.has_held_operand else None
            for i in range(R):
                m.d.comb += pes[i][j].shift.eq(col_shift)
                if col_load is not None:
                    m.d.comb += pes[i][j].load.eq(col_load)

    def _mesh(self, m, pes, pe_mode):
        """Mesh connections and broadcast controls."""
        cfg = self.config
        R, C = cfg.rows, cfg.cols
        for i in range(R):
            for j in range(C):
                pe = pes[i][j]
                m.d.comb += pe.mode.eq(pe_mode)
                if j + 1 < C:
                    right = pes[i][j + 1]
                    m.d.comb += [right.h_in.eq(pe.h_out), right.h_valid_in.eq(pe.h_valid_out),
                                 right.h_last_in.eq(pe.h_last_out)]
                    if cfg.zero_gating:
                        m.d.comb += right.h_zero_in.eq(pe.h_zero_out)
                if i + 1 < R:
                    down = pes[i + 1][j]
                    m.d.comb += [down.v_valid_in.eq(pe.v_valid_out),
                                 down.chain_in.eq(pe.chain_out)]
                    if cfg.has_accumulator:
                        m.d.comb += down.v_in.eq(pe.v_out)
                        if cfg.zero_gating:
                            m.d.comb += down.v_zero_in.eq(pe.v_zero_out)
                    if cfg.has_held_operand:
                        m.d.comb += down.p_in.eq(pe.p_out)
                    if cfg.has("interleaved"):
                        m.d.comb += [down.v_tag_in.eq(pe.v_tag_out),
                                     down.wchain_in.eq(pe.wchain_out)]

    def _psum_output(self, m, pes, is_il):
        """(held-operand dataflows) Partial-sum output: bottom of column j at edge time
        + R + j; deskew by C-1-j."""
        cfg = self.config
        R, C = cfg.rows, cfg.cols
        holds = (self.dataflow == Dataflow.WS) | (self.dataflow == Dataflow.IS) | is_il
        for j in range(C):
            bottom = pes[R - 1][j]
            m.d.comb += self.psum_data[j].eq(_delay(m, bottom.p_out, C - 1 - j, f"pd{j}"))
        bottom = pes[R - 1][C - 1]
        tag_ok = bottom.v_tag_out if cfg.has("interleaved") else 1
        slot_out = Signal()
        m.d.comb += slot_out.eq(bottom.v_valid_out & holds & Mux(is_il, tag_ok, 1))
        m.d.comb += self.psum_valid.eq(_delay(m, slot_out, cfg.mac_latency, "psv"))

    def _busy(self, m, pes, cnt, dv_stages, load):
        """Busy: anything valid inside, an edge input, or a drain pending. Drives ``busy`` and
        returns it."""
        cfg = self.config
        R, C = cfg.rows, cfg.cols
        inside = [pes[i][j].h_valid_out | pes[i][j].v_valid_out
                  for i in range(R) for j in range(C)]
        # A slot stays in a PE's pipeline LATENCY cycles after it has moved on.
        inside_any = Signal()
        m.d.comb += inside_any.eq(_popcount_any(inside))
        in_pipeline = [_delay(m, inside_any, k, "inside") for k in range(1, cfg.mac_latency + 1)]
        busy = Signal()
        m.d.comb += busy.eq(self.a_valid | self.b_valid | (cnt != 0) | _popcount_any(dv_stages)
                            | self.chain_shift | load | inside_any | _popcount_any(in_pipeline))
        m.d.comb += self.busy.eq(busy)
        return busy

    def _drain(self, m, pes, auto_shift, cnt, is_il):
        """The integer drain: each column's chain word, (interleaved) the SGD step, deskewed.
        Returns the stages of ``drain_valid``'s delay line (a vector in flight is busy)."""
        cfg = self.config
        R, C = cfg.rows, cfg.cols
        drain_valid_col0 = Signal()
        drain_row_col0 = Signal(range(R))
        m.d.comb += drain_valid_col0.eq(auto_shift)
        m.d.comb += drain_row_col0.eq(cnt - 2)     # R-1 on the first shift, 0 on the last
        for j in range(C):
            # Two registers at the bottom of each column: the chain's value (and, with the
            # interleave, the weight and the scaled gradient), then the result (G, or the
            # updated weight: the SGD step once per column as G and the weights leave).
            ar = self.arith
            bottom = pes[R - 1][j]
            g1 = Signal(ar.acc_shape, name=f"drain_g{j}")
            out = Signal(ar.acc_shape, name=f"drain{j}")
            m.d.sync += g1.eq(bottom.chain_out)
            if cfg.has("interleaved") and not cfg.is_mx:
                w1 = Signal(ar.operand_shape, name=f"drain_w{j}")
                scaled = Signal(ar.operand_shape.width, name=f"drain_scaled{j}")
                w_new = Signal(ar.operand_shape, name=f"w_new{j}")
                m.d.sync += [w1.eq(bottom.wchain_out),
                             scaled.eq(ar.scaled_gradient(bottom.chain_out, self.sgd_shift))]
                m.d.comb += w_new.eq(ar.step(w1, scaled))
                m.d.sync += out.eq(Mux(is_il & self.sgd_en, w_new, g1))
            else:
                m.d.sync += out.eq(g1)
            m.d.comb += self.drain_data[j].eq(_delay(m, out, C - 1 - j, f"dd{j}"))
        # drain_valid, and every stage of its delay line (a drained vector in flight keeps the
        # array busy until it leaves)
        dv_stages = [drain_valid_col0]
        for k in range(C + DRAIN_REGISTERS - 1):
            nxt = Signal(name=f"dv_d{k + 1}")
            m.d.sync += nxt.eq(dv_stages[-1])
            dv_stages.append(nxt)
        m.d.comb += [
            self.drain_valid.eq(dv_stages[-1]),
            self.drain_row.eq(_delay(m, drain_row_col0, C + DRAIN_REGISTERS - 1, "dr")),
        ]

        return dv_stages

    def _float_drain(self, m, pes, auto_shift):
        """The floating-point drain: each column's five partials a row through a
        :class:`~bpsa.gateware.array.float_reduce.PartialReducer`, its sums registered and deskewed.
        A vector leaves ``FLOAT_REDUCE_LATENCY + C`` cycles after its shift (column 0).
        Returns the stages of the busy terms."""
        cfg = self.config
        R, C = cfg.rows, cfg.cols
        col_auto = auto_shift
        busy = []
        for j in range(C):
            red = m.submodules[f"reduce{j}"] = PartialReducer()
            m.d.comb += [red.partials.eq(pes[R - 1][j].chain_out), red.valid.eq(col_auto)]
            out = Signal(32, name=f"drain{j}")
            m.d.sync += out.eq(red.result)
            m.d.comb += self.drain_data[j].eq(_delay(m, out, C - 1 - j, f"dd{j}"))
            busy.append(red.busy)
            if j == 0:
                done = red.result_valid
            if j + 1 < C:
                nxt = Signal(name=f"auto_col{j + 1}")
                m.d.sync += nxt.eq(col_auto)
                col_auto = nxt
        # rows R-1 .. 0 of a drain, one a cycle
        row = Signal(range(R), init=R - 1)
        with m.If(done):
            m.d.sync += row.eq(Mux(row == 0, R - 1, row - 1))
        dv_stages = [done]
        for k in range(C):
            nxt = Signal(name=f"dv_d{k + 1}")
            m.d.sync += nxt.eq(dv_stages[-1])
            dv_stages.append(nxt)
        m.d.comb += [self.drain_valid.eq(dv_stages[-1]),
                     self.drain_row.eq(_delay(m, row, C, "dr"))]
        return dv_stages + busy

    def _counters(self, m, pes, busy):
        """The counters since ``clear``. The MAC counts add R x C flags: a row's sum, then
        the sums of pairs of rows, then their sum, each registered (the counts trail the
        flags by three cycles, inside the busy time; no adder tree spans the array in one
        cycle); ``cycles`` counts ``busy`` a cycle later (its OR spans every PE). The MAC
        counts take ``clear`` a cycle late, from a register (it comes from the engines' start
        logic and resets every register of their tree): they drop the flags of the clearing
        cycle and the next, in which no PE can fire (an operand entering the array at the
        clear reaches a PE's MAC a cycle later at the earliest)."""
        R, C = self.config.rows, self.config.cols
        mac_clear = Signal()
        m.d.sync += mac_clear.eq(self.clear)

        def mac_count(flag, name):
            rows = []
            for i in range(R):
                row = Signal(range(C + 1), name=f"{name}_row{i}")
                m.d.sync += row.eq(Mux(mac_clear, 0, _popcount([getattr(pes[i][j], flag)
                                                                 for j in range(C)])))
                rows.append(row)
            pairs = []
            for k in range(0, R, 2):
                pair = Signal(range(2 * C + 1), name=f"{name}_rows{k}")
                m.d.sync += pair.eq(Mux(mac_clear, 0, _popcount(rows[k:k + 2])))
                pairs.append(pair)
            total = Signal(range(R * C + 1), name=f"{name}_sum")
            m.d.sync += total.eq(Mux(mac_clear, 0, _popcount(pairs)))
            return total

        busy_r = Signal()
        m.d.sync += busy_r.eq(busy & ~self.clear)
        counts = {
            "cycles": busy_r,
            "a_words": self.a_valid,
            "b_words": self.b_valid,
            "drained": self.drain_valid,
            "psums": self.psum_valid if self.config.has_held_operand else Const(0),
            "fired": mac_count("fired", "fired"),
            "gated": mac_count("gated", "gated"),
        }
        for name, inc in counts.items():
            counter = getattr(self, name)
            with m.If(mac_clear if name in ("fired", "gated") else self.clear):
                m.d.sync += counter.eq(0)
            with m.Else():
                m.d.sync += counter.eq(counter + inc)


def _popcount_any(bits):
    """OR of a list of 1-bit values."""
    acc = Const(0)
    for b in bits:
        acc = acc | b
    return acc
