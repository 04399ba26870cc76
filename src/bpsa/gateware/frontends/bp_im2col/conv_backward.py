"""The backward convolution (loss ``dX``, gradient ``dW``) on the input-stationary array, with
BP-im2col address generation or, for comparison on the same hardware, the traditional
zero-spaced flow (``baseline``).

Source: Yang et al., *BP-Im2col* (Secs. III-IV). Both GEMMs hold B in the PEs and stream A:

========  ===========================  ===============================  ====================
phase     A (buffer A, streamed)        B (buffer B, held)               result
========  ===========================  ===============================  ====================
loss      W rotated, channel-transp.   virtual zero-spaced dY           dX^T: C x NHW
gradient  virtual dilated dY           im2col of X                      dW: K x CRS
========  ===========================  ===============================  ====================

Buffers (one operand a word, written by the host through ``a_write`` / ``b_write`` while idle)
    BP-im2col mode: the compact tensors from word 0: loss: W (``K x C x R x S``, C order) in
    A, dY (``N x K x OH x OW``) in B; gradient: dY in A, X (``N x C x H x W``) in B.
    Baseline mode: the host writes the same compact tensors from ``src_base_a`` /
    ``src_base_b``; reorganization passes (one word a cycle, reading each kept source element
    once) first write the zero-spaced copies from word 0: loss: dY padded by ``d(R-1) - p``
    and zero-inserted (``N x K x (H + d_h(R-1)) x (W + d_w(S-1))``) in B; gradient: dY
    zero-inserted (``N x K x Hd x Wd``, ``Hd = s(OH-1)+1``) in A, then X zero-padded and cropped
    to what the gradient reads (``N x C x (Hd + d_h(R-1)) x (Wd + d_w(S-1))``) in B. The phase
    then runs as the stride-1, unpadded (gradient) or ``d(R-1)``-padded (loss) layer of the
    copies, whose virtual matrices have no zero-space left to skip: every lane is read, zeros
    included. ``src_base_*`` must not be below the copy's size (not checked here;
    ``bpsa.sim.conv_backward_run`` places them right after).

Schedule
    :class:`bpsa.gateware.frontends.bp_im2col.generators.TransposedAddressGenerator` (loss) or
    :class:`bpsa.gateware.frontends.bp_im2col.generators.DilatedAddressGenerator` (gradient) walks the tiles (column tile
    outer, row tile inner). A gatherer reads each B-tile row (``cols`` read ports; masked lanes
    are not read and become 0, :class:`bpsa.gateware.frontends.bp_im2col.generators.MaskExpander`'s contract) into one of
    two tile registers; the first tile is shifted into the reserve chains and loaded, then tile
    ``t`` streams its A vectors (``rows`` read ports of buffer A: per lane for the loss; at
    ``addr, addr+1, ..`` for the gradient, merged by
    :class:`bpsa.gateware.frontends.bp_im2col.generators.CrossbarRecovery`) while tile ``t+1`` is shifted in, ``a_last``
    switching the PEs (the schedule of ``bpsa.sim.gemm``'s held-B GEMM); a tile lasts at least
    ``2 * rows`` cycles.

FC backward (``Phase.FC``, configurations that generate ``interleaved``)
    InterGrad's interleaved dataflow on the same array: a fully connected layer ``Y = X W^T``
    with batch ``Bt = n``, ``I = c`` inputs and ``O = k`` outputs gets ``dX = dY W`` and ``dW =
    dY^T X`` in one pass, every dY element read once and held two cycles. Buffers, batch-major:
    dY (``Bt x O``) in A from word 0, X (``Bt x I``) in B from word 0 and W (``O x I``) in B
    from ``src_base_b`` (``>= Bt * I``); ``base_a`` / ``base_b`` are added as above. A dense
    walker visits the ``R x C`` tiles of W (input tile outer, output tile inner): tile ``t``
    streams ``(dY[n, o0:o0+R], X[n, i0:i0+C])`` then ``(dY[n, o0:o0+R], 0)`` for every ``n``
    (at least ``2R`` cycles a tile), while the W tile ``t + 2`` is read into a tile register on
    the cycles the activations leave buffer B's ports free; the drain of tile ``t - 1`` shifts
    W tile ``t + 1`` into the reserve chains. ``out`` carries ``dX[n, i0:i0+C]``'s share of
    tile ``t`` (``row`` = ``n``, ``tile`` = ``t``; the output tiles' shares are added by the
    receiver) and ``drain`` carries row ``r`` of ``dW[o0:o0+R, i0:i0+C]`` (with ``sgd_en``:
    the updated weights ``W - (dW >> sgd_shift)``, wrapped to the operand width).

Outputs
    ``out`` carries every psum vector (no backpressure: sample it every cycle) with ``row``
    (``m``: ``c`` or ``k``) and ``tile`` (the tile index ``t``: column block ``t // ceil(Kg /
    rows)``). The partial sums of the row tiles of one column block are accumulated by the host
    side (``bpsa.sim.conv_backward_run.assemble``); there is no P buffer in this top.
"""

from types import SimpleNamespace

from amaranth.hdl import Cat, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, enum, wiring
from amaranth.lib.memory import Memory, WritePort
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from bpsa.config import require_config
from bpsa.gateware.common.checked import CheckedComponent
from bpsa.gateware.array.arith import arith_for
from bpsa.gateware.array.systolic import Dataflow, SystolicArray, array_signature
from bpsa.gateware.frontends.bp_im2col.generators import (
    DESC_FIELDS,
    BPError,
    CrossbarRecovery,
    DilatedAddressGenerator,
    TransposedAddressGenerator,
)
from bpsa.gateware.array.pe import vertical_shape

__all__ = ["Phase", "COUNTERS", "backward_layout", "out_layout", "drain_layout", "ConvBackward"]

#: Counter outputs (32 bits), cleared at ``start``.
COUNTERS = (
    "cycles",
    "cycles_prologue",
    "cycles_reorg",
    "a_words",
    "b_words",
    "reorg_reads",
    "reorg_writes",
    "zeros_a",
    "zeros_b",
    "vectors",
    "tiles",
    "fired",
    "gated",
)
COUNTER_WIDTH = 32
TILE_WIDTH = 24


class Phase(enum.Enum, shape=2):
    LOSS = 0
    GRADIENT = 1
    FC = 2


def backward_layout(config):
    """The descriptor: ``phase``, ``baseline``, the layer
    (:data:`bpsa.gateware.frontends.bp_im2col.generators.DESC_FIELDS`, ``dim_width`` bits each), ``src_base_a`` /
    ``src_base_b`` (baseline: first word of the compact tensors) and ``base_a`` / ``base_b`` (added
    to every address the compute pass reads from buffer A / B, wrapping at the buffer's end: the
    accelerator's double-buffer bank; 0 for the layouts of the module docstring), ``sgd_en`` /
    ``sgd_shift`` (FC: drain
    the updated weights instead of dW)."""
    fields = {"phase": Phase, "baseline": 1}
    fields.update({name: unsigned(config.dim_width) for name in DESC_FIELDS})
    fields["src_base_a"] = unsigned(exact_log2(config.buf_a_depth))
    fields["src_base_b"] = unsigned(exact_log2(config.buf_b_depth))
    fields["base_a"] = unsigned(exact_log2(config.buf_a_depth))
    fields["base_b"] = unsigned(exact_log2(config.buf_b_depth))
    fields["sgd_en"] = unsigned(1)
    fields["sgd_shift"] = arith_for(config).shift_shape
    return data.StructLayout(fields)


def out_layout(config):
    return data.StructLayout(
        {
            "data": data.ArrayLayout(vertical_shape(config), config.cols),
            "row": unsigned(config.dim_width),
            "tile": unsigned(TILE_WIDTH),
        }
    )


def drain_layout(config):
    """FC phase: one row of a drained dW (or updated W) tile."""
    return data.StructLayout(
        {
            "data": data.ArrayLayout(arith_for(config).acc_shape, config.cols),
            "row": range(config.rows),
            "tile": unsigned(TILE_WIDTH),
        }
    )


def popcount(bits):
    total = 0
    for b in bits:
        total = total + b
    return total


class ConvBackward(CheckedComponent):
    """Backward top: buffers A and B, both BP-im2col address generators, the crossbar, the IS
    systolic array, the baseline's reorganization engine.

    Members
    -------
    layer : In(backward_layout(config))
        Read at ``start`` (held by the top while it runs).
    start : In(1)
        Starts the descriptor when idle.
    busy, done, error : Out(1)
        ``done`` pulses at the end of a run (also of a refused one); ``error`` is held until
        the next ``start``; ``error_code`` is the generator's refusal.
    a_write, b_write : Out(WritePort.Signature(addr_width=log2(depth), shape=operand))
        Host write ports of buffers A and B (while idle).
    out : Out(Signature(valid, payload: out_layout))
        psum vectors with their ``row`` and ``tile``.
    drain : Out(Signature(valid, payload: drain_layout))
        (configurations with ``interleaved``) FC phase: rows of dW tiles.
    cycles ... tiles : Out(32)
        :data:`COUNTERS`: busy cycles; prologue (after any reorganization, until the first A
        vector enters the array); reorganization cycles; words read from buffer A / B by the
        compute pass; reorganization reads (compact source elements) and writes (copies);
        zero elements sent to the array in A vectors (``zeros_a``) and in held B tiles
        (``zeros_b``), masked or read as zero, lanes past the matrix edge included; A vectors
        (slices); tiles; the array's MACs performed (``fired``) and skipped by zero gating
        (``gated``).
    array : In(array_signature)
        With ``shared_array=True``: the engine drives an array outside it (the accelerator's
        one array, :func:`bpsa.gateware.array.systolic.share_array`) instead of holding its own.
    """

    @classmethod
    def check_parameters(cls, config, *, shared_array=False):
        if not require_config(config).has("is"):
            raise ValueError(f"config {config.name!r} does not generate the 'is' dataflow")

    def __init__(self, config, *, shared_array=False):
        config.require_int("backward engine")
        self.config = config
        self.shared_array = shared_array
        op = arith_for(config).operand_shape
        members = {
            "layer": In(backward_layout(config)),
            "start": In(1),
            "busy": Out(1),
            "done": Out(1),
            "error": Out(1),
            "error_code": Out(BPError),
            "a_write": Out(
                WritePort.Signature(addr_width=exact_log2(config.buf_a_depth), shape=op)
            ),
            "b_write": Out(
                WritePort.Signature(addr_width=exact_log2(config.buf_b_depth), shape=op)
            ),
            "out": Out(wiring.Signature({"valid": Out(1), "payload": Out(out_layout(config))})),
        }
        if config.has("interleaved"):
            members["drain"] = Out(
                wiring.Signature({"valid": Out(1), "payload": Out(drain_layout(config))})
            )
        members.update({name: Out(COUNTER_WIDTH) for name in COUNTERS})
        if shared_array:
            members["array"] = In(array_signature(config))
        super().__init__(members)

    def elaborate(self, platform):
        s = SimpleNamespace()
        s.cfg = self.config
        s.m = Module()
        R, C = s.cfg.rows, s.cfg.cols
        s.R, s.C = R, C
        s.dw = s.cfg.dim_width
        aw_a, aw_b = exact_log2(s.cfg.buf_a_depth), exact_log2(s.cfg.buf_b_depth)
        s.aw_a, s.aw_b = aw_a, aw_b
        s.aw = max(s.aw_a, s.aw_b)
        s.op = arith_for(s.cfg).operand_shape
        s.sv = signed(s.dw + 4)

        s.amem = s.m.submodules.buf_a = Memory(shape=s.op, depth=s.cfg.buf_a_depth, init=[])
        s.bmem = s.m.submodules.buf_b = Memory(shape=s.op, depth=s.cfg.buf_b_depth, init=[])
        s.awp = s.amem.write_port()
        s.bwp = s.bmem.write_port()
        s.a_ports = [s.amem.read_port() for _ in range(s.R)]
        s.b_ports = [s.bmem.read_port() for _ in range(s.C)]
        s.lgen = s.m.submodules.loss_gen = TransposedAddressGenerator(s.cfg)
        s.ggen = s.m.submodules.grad_gen = DilatedAddressGenerator(s.cfg)
        s.xbar = s.m.submodules.crossbar = CrossbarRecovery(s.cfg)
        if self.shared_array:
            s.arr = self.array
        else:
            s.arr = s.m.submodules.array = SystolicArray(s.cfg)
        s.m.d.comb += s.arr.dataflow.eq(Dataflow.IS)

        s.d = Signal(backward_layout(s.cfg))
        s.grad = Signal()
        s.m.d.comb += s.grad.eq(s.d.phase == Phase.GRADIENT)
        s.il = s.cfg.has("interleaved")
        s.fc = Signal()  # Phase.FC (or the undefined 3, refused)
        s.m.d.comb += s.fc.eq(s.d.phase.as_value()[1])
        s.cnt = {name: getattr(self, name) for name in COUNTERS}

        def inc(name, by=1):
            s.m.d.sync += s.cnt[name].eq(s.cnt[name] + by)

        s.inc = inc

        self._layer_values(s)
        self._reorganizer(s)
        self._descriptors(s)
        self._gatherer(s)
        self._a_side(s)
        self._fc_walker(s)
        self._outputs(s)
        self._control(s)
        return s.m

    def _layer_values(self, s):
        """The registered products of the descriptor."""
        # --- per-layer values (registered products) ---------------------------------------
        drh, drw = Signal(s.dw + 1), Signal(s.dw + 1)  # d(R-1), d(S-1)
        s.drh, s.drw = drh, drw
        hd, wd = Signal(2 * s.dw), Signal(2 * s.dw)  # s(OH-1)+1, s(OW-1)+1
        s.hd, s.wd = hd, wd
        ohow, hw_ = Signal(s.aw + 1), Signal(s.aw + 1)
        s.ohow, s.hw_ = ohow, hw_
        nk, nc = Signal(2 * s.dw), Signal(2 * s.dw)
        s.nk, s.nc = nk, nc
        s.m.d.sync += [
            s.drh.eq(s.d.dil_h * (s.d.r - 1)),
            s.drw.eq(s.d.dil_w * (s.d.s - 1)),
            s.hd.eq(s.d.stride_h * (s.d.oh - 1) + 1),
            s.wd.eq(s.d.stride_w * (s.d.ow - 1) + 1),
            s.ohow.eq(s.d.oh * s.d.ow),
            s.hw_.eq(s.d.h * s.d.w),
            s.nk.eq(s.d.n * s.d.k),
            s.nc.eq(s.d.n * s.d.c),
        ]
        s.kc = Signal(2 * s.dw)  # FC: O * I (W's words)
        s.m.d.sync += s.kc.eq(s.d.k * s.d.c)

    def _reorganizer(self, s):
        """Baseline mode: a compact tensor into its zero-spaced copy (write side)."""
        # --- baseline reorganization: a compact tensor (from its src_base) -> its zero-spaced
        # copy Z (from word 0), one Z word a cycle. Per axis: source element o sits at Z index
        # first + o*step (0 <= o < count, first + o*step < size; the others are cropped).
        # loss: dY -> padded, zero-inserted dY in B; gradient: dY -> dilated dY in A, then
        # X -> padded (and cropped) X in B.
        s.rp = {
            name: Signal(
                s.sv if name.startswith("first") else unsigned(2 * s.dw + 2), name=f"rp_{name}"
            )
            for name in (
                "first_h",
                "first_w",
                "step_h",
                "step_w",
                "size_h",
                "size_w",
                "count_h",
                "count_w",
                "planes",
            )
        }
        s.rp_plane = Signal(s.aw + 1)  # source elements per plane
        s.rp_src = Signal(s.aw)
        s.rp_to_a = Signal()  # destination buffer A (else B)
        s.pass2 = Signal()  # gradient: the X pass comes next
        hn0, wn0 = Signal(s.sv), Signal(s.sv)  # Z index of the first kept element
        s.hn0, s.wn0 = hn0, wn0
        oh0, ow0 = Signal(2 * s.dw), Signal(2 * s.dw)  # its source row / column
        s.oh0, s.ow0 = oh0, ow0
        s.rowoff0 = Signal(s.aw + 1)  # oh0 * count_w
        plane, zh, zw = Signal(2 * s.dw), Signal(2 * s.dw + 2), Signal(2 * s.dw + 2)
        s.plane, s.zh, s.zw = plane, zh, zw
        hn, wn = Signal(s.sv), Signal(s.sv)
        s.hn, s.wn = hn, wn
        ohc, owc = Signal(2 * s.dw), Signal(2 * s.dw)
        s.ohc, s.owc = ohc, owc
        planebase, rowptr, wptr = Signal(s.aw + 1), Signal(s.aw + 1), Signal(s.aw + 1)
        s.planebase, s.rowptr, s.wptr = planebase, rowptr, wptr
        s.hit_h = (s.zh == s.hn) & (s.ohc < s.rp["count_h"])
        s.hit_w = (s.zw == s.wn) & (s.owc < s.rp["count_w"])
        r_v, r_hit, r_addr, r_to_a = Signal(), Signal(), Signal(s.aw), Signal()
        s.r_v, s.r_hit, s.r_addr, s.r_to_a = r_v, r_hit, r_addr, r_to_a
        s.reorg = Signal()
        s.m.d.sync += s.r_v.eq(0)
        s.r_data = Mux(s.r_to_a, s.a_ports[0].data, s.b_ports[0].data)
        s.m.d.comb += [
            s.awp.en.eq(self.a_write.en),
            s.awp.addr.eq(self.a_write.addr),
            s.awp.data.eq(self.a_write.data),
            s.bwp.en.eq(self.b_write.en),
            s.bwp.addr.eq(self.b_write.addr),
            s.bwp.data.eq(self.b_write.data),
        ]
        with s.m.If(s.r_v):
            s.inc("reorg_writes")
            with s.m.If(s.r_to_a):
                s.m.d.comb += [
                    s.awp.en.eq(1),
                    s.awp.addr.eq(s.r_addr),
                    s.awp.data.eq(Mux(s.r_hit, s.r_data, 0)),
                ]
            with s.m.Else():
                s.m.d.comb += [
                    s.bwp.en.eq(1),
                    s.bwp.addr.eq(s.r_addr),
                    s.bwp.data.eq(Mux(s.r_hit, s.r_data, 0)),
                ]

        def load_pass(*, to_a, src, planes, plane_elems, axes):
            s.m.d.sync += [
                s.rp_to_a.eq(to_a),
                s.rp_src.eq(src),
                s.rp["planes"].eq(planes),
                s.rp_plane.eq(plane_elems),
            ]
            for ax, (first, step, size, count) in zip("hw", axes):
                s.m.d.sync += [
                    s.rp[f"first_{ax}"].eq(first),
                    s.rp[f"step_{ax}"].eq(step),
                    s.rp[f"size_{ax}"].eq(size),
                    s.rp[f"count_{ax}"].eq(count),
                ]

        s.load_pass = load_pass

    def _descriptors(self, s):
        """The address generators' descriptors."""
        # --- generator descriptors ---------------------------------------------------------
        for gen in (s.lgen, s.ggen):
            s.gd = gen.desc.payload
            for name in DESC_FIELDS:
                s.m.d.comb += getattr(s.gd, name).eq(getattr(s.d, name))
        with s.m.If(s.d.baseline):
            # loss: the stride-1 loss of the padded, zero-inserted dY with padding d(R-1).
            s.m.d.comb += [
                s.lgen.desc.payload.oh.eq(s.d.h + s.drh),
                s.lgen.desc.payload.ow.eq(s.d.w + s.drw),
                s.lgen.desc.payload.stride_h.eq(1),
                s.lgen.desc.payload.stride_w.eq(1),
                s.lgen.desc.payload.pad_h.eq(s.drh),
                s.lgen.desc.payload.pad_w.eq(s.drw),
                s.lgen.desc.payload.pad_bottom.eq(s.drh),
            ]
            # gradient: the stride-1, unpadded gradient of the padded X and the dilated dY.
            s.m.d.comb += [
                s.ggen.desc.payload.oh.eq(s.hd),
                s.ggen.desc.payload.ow.eq(s.wd),
                s.ggen.desc.payload.h.eq(s.hd + s.drh),
                s.ggen.desc.payload.w.eq(s.wd + s.drw),
                s.ggen.desc.payload.stride_h.eq(1),
                s.ggen.desc.payload.stride_w.eq(1),
                s.ggen.desc.payload.pad_h.eq(0),
                s.ggen.desc.payload.pad_w.eq(0),
                s.ggen.desc.payload.pad_bottom.eq(0),
            ]

    def _gatherer(self, s):
        """B-tile rows into two tile registers."""
        # --- gatherer: B-tile rows -> two tile registers -------------------------------------
        s.gb = Signal.like(s.lgen.b.payload)
        s.gb_valid = Signal()
        s.m.d.comb += [
            s.gb_valid.eq(Mux(s.grad, s.ggen.b.valid, s.lgen.b.valid)),
            s.gb.eq(Mux(s.grad, s.ggen.b.payload, s.lgen.b.payload)),
        ]
        s.tile_regs = [
            [Signal(data.ArrayLayout(s.op, s.C), name=f"tile{b}_{i}") for i in range(s.R)]
            for b in range(2)
        ]
        s.issued = Signal(TILE_WIDTH)  # tiles whose rows were all requested
        s.gathered = Signal(TILE_WIDTH)  # tiles whose rows are all in a tile register
        s.shifted = Signal(TILE_WIDTH)  # tiles shifted into the chains
        s.ended = Signal()
        s.grow = Signal(range(s.R))
        s.running = Signal()
        g_v, g_row, g_bank, g_last, g_end = (
            Signal(),
            Signal(range(s.R)),
            Signal(),
            Signal(),
            Signal(),
        )
        s.g_v, s.g_row, s.g_bank, s.g_last, s.g_end = g_v, g_row, g_bank, g_last, g_end
        s.g_mask = Signal(s.C)
        s.b_take = Signal()
        s.m.d.comb += [
            s.b_take.eq(s.running & s.gb_valid & ((s.issued - s.shifted) < 2)),
            s.lgen.b.ready.eq(s.b_take & ~s.grad),
            s.ggen.b.ready.eq(s.b_take & s.grad),
        ]
        for j in range(s.C):
            s.m.d.comb += s.b_ports[j].addr.eq((s.gb.addr[j] + s.d.base_b)[: s.aw_b])
        s.m.d.sync += s.g_v.eq(s.b_take)
        with s.m.If(s.b_take):
            s.m.d.sync += [
                s.g_row.eq(s.grow),
                s.g_bank.eq(s.issued[0]),
                s.g_last.eq(s.gb.last),
                s.g_end.eq(s.gb.end),
                s.g_mask.eq(s.gb.mask),
                s.grow.eq(Mux(s.gb.last, 0, s.grow + 1)),
            ]
            s.inc("b_words", popcount(s.gb.mask))
            with s.m.If(s.gb.last):
                s.m.d.sync += s.issued.eq(s.issued + 1)
        s.row_vals = [Mux(s.g_mask[j], s.b_ports[j].data, 0) for j in range(s.C)]
        with s.m.If(s.g_v):
            for b in range(2):
                for i in range(s.R):
                    with s.m.If((s.g_bank == b) & (s.g_row == i)):
                        for j in range(s.C):
                            s.m.d.sync += s.tile_regs[b][i][j].eq(s.row_vals[j])
            s.inc("zeros_b", popcount([v == 0 for v in s.row_vals]))
            with s.m.If(s.g_last):
                s.m.d.sync += s.gathered.eq(s.gathered + 1)
            with s.m.If(s.g_end):
                s.m.d.sync += s.ended.eq(1)

    def _a_side(self, s):
        """A vectors to the array's left edge."""
        # --- A side: read ports -> (loss: mask | gradient: crossbar) -> array left edge -------
        s.a_take = Signal()
        s.m.d.comb += [s.lgen.a.ready.eq(s.a_take & ~s.grad), s.ggen.a.ready.eq(s.a_take & s.grad)]
        la, ga = s.lgen.a.payload, s.ggen.a.payload
        s.la, s.ga = la, ga
        a_valid, a_last, a_end, a_mask = Signal(), Signal(), Signal(), Signal(s.R)
        s.a_valid, s.a_last, s.a_end, s.a_mask = a_valid, a_last, a_end, a_mask
        s.m.d.comb += [
            s.a_valid.eq(Mux(s.grad, s.ggen.a.valid, s.lgen.a.valid)),
            s.a_last.eq(Mux(s.grad, s.ga.last, s.la.last)),
            s.a_end.eq(Mux(s.grad, s.ga.end, s.la.end)),
            s.a_mask.eq(Mux(s.grad, s.ga.mask, s.la.mask)),
        ]
        for i in range(s.R):
            s.m.d.comb += s.a_ports[i].addr.eq(
                (Mux(s.grad, (s.ga.addr + i)[: s.aw_a], s.la.addr[i]) + s.d.base_a)[: s.aw_a]
            )
        av, alast, aend, aslice, amask = Signal(), Signal(), Signal(), Signal(), Signal(s.R)
        s.av, s.alast, s.aend, s.aslice, s.amask = av, alast, aend, aslice, amask
        s.m.d.sync += s.av.eq(s.a_take)
        with s.m.If(s.a_take):
            s.m.d.sync += [
                s.amask.eq(s.a_mask),
                s.alast.eq(s.a_last),
                s.aend.eq(s.a_end),
                s.aslice.eq(~s.grad | s.ga.slice_end),
            ]
            s.inc("a_words", popcount(s.a_mask))
            with s.m.If(~s.grad | s.ga.slice_end):
                s.inc("vectors")
        # Gradient: the crossbar merges the beats of a slice (one registered stage).
        s.xi = s.xbar.i.payload
        s.m.d.comb += [
            s.xbar.i.valid.eq(s.av & s.grad),
            s.xi.mask.eq(s.amask),
            s.xi.slice_end.eq(s.aslice),
            s.xi.last.eq(s.alast),
            s.xi.end.eq(s.aend),
            s.xbar.o.ready.eq(1),
        ]
        for i in range(s.R):
            s.m.d.comb += s.xi.data[i].eq(s.a_ports[i].data)
        s.vec = [Signal(s.op, name=f"a_vec{i}") for i in range(s.R)]
        vec_v, vec_last = Signal(), Signal()
        s.vec_v, s.vec_last = vec_v, vec_last
        with s.m.If(s.grad):
            s.m.d.comb += [
                s.vec_v.eq(s.xbar.o.valid),
                s.vec_last.eq(s.xbar.o.valid & s.xbar.o.payload.last),
            ]
            s.m.d.comb += [s.vec[i].eq(s.xbar.o.payload.data[i]) for i in range(s.R)]
        with s.m.Else():
            s.m.d.comb += [s.vec_v.eq(s.av), s.vec_last.eq(s.av & s.alast)]
            s.m.d.comb += [s.vec[i].eq(Mux(s.amask[i], s.a_ports[i].data, 0)) for i in range(s.R)]
        for i in range(s.R):
            s.m.d.comb += s.arr.a_data[i].eq(s.vec[i])
        s.m.d.comb += [
            s.arr.a_valid.eq(s.vec_v),
            s.arr.a_last.eq(s.vec_last),
            s.arr.b_valid.eq(s.vec_v),
        ]
        for j in range(s.C):
            s.m.d.comb += s.arr.b_data[j].eq(0)
        with s.m.If(s.vec_v):
            s.inc("zeros_a", popcount([v == 0 for v in s.vec]))

    def _fc_walker(self, s):
        """FC backward: the dense walker, W-tile gatherer and drains."""
        # --- FC backward (interleaved): the dense walker -------------------------------------
        s.seen_a = Signal()  # an A vector reached the array (ends the prologue)
        # Gatherer of W tiles (tile g into tile register g % 2) on the cycles buffer B's ports
        # are free, and the stream of (dY, X) / (dY, 0) pairs; see the module docstring.
        s.wide = s.aw + 2  # addresses are used modulo the buffer depth
        f_issue, f_tag = Signal(), Signal()  # a pair's cycle is issued; its second
        s.f_issue, s.f_tag = f_issue, f_tag
        f_g_active, f_g_idx = Signal(), Signal(TILE_WIDTH)
        s.f_g_active, s.f_g_idx = f_g_active, f_g_idx
        f_g_o0, f_g_i0 = Signal(s.dw + 1), Signal(s.dw + 1)
        s.f_g_o0, s.f_g_i0 = f_g_o0, f_g_i0
        f_g_base, f_g_wrow, f_ri = Signal(s.wide), Signal(s.wide), Signal(s.wide)
        s.f_g_base, s.f_g_wrow, s.f_ri = f_g_base, f_g_wrow, f_ri
        f_g_row, f_g_r1, f_g_b1 = Signal(range(s.R)), Signal(range(s.R)), Signal()
        s.f_g_row, s.f_g_r1, s.f_g_b1 = f_g_row, f_g_r1, f_g_b1
        f_g_v, f_g_mask1 = Signal(), Signal(s.C)
        s.f_g_v, s.f_g_mask1 = f_g_v, f_g_mask1
        f_o0, f_i0, f_n = Signal(s.dw + 1), Signal(s.dw + 1), Signal(s.dw)
        s.f_o0, s.f_i0, s.f_n = f_o0, f_i0, f_n
        f_arow, f_brow = Signal(s.wide), Signal(s.wide)  # n * O, n * I
        s.f_arow, s.f_brow = f_arow, f_brow
        # interleaved contexts are 2R + mac_latency cycles apart (bpsa.gateware.array.systolic)
        il_gap = 2 * s.R + s.cfg.mac_latency
        f_cyc, f_pad = Signal(range(il_gap + 1)), Signal(range(il_gap + 1))
        s.f_cyc, s.f_pad = f_cyc, f_pad
        s1_v, s1_tag, s1_last = Signal(), Signal(), Signal()
        s.s1_v, s.s1_tag, s.s1_last = s1_v, s1_tag, s1_last
        s1_amask, s1_bmask = Signal(s.R), Signal(s.C)
        s.s1_amask, s.s1_bmask = s1_amask, s1_bmask
        dr_k, dr_r, dr_tile = Signal(), Signal(range(s.R)), Signal(TILE_WIDTH)
        s.dr_k, s.dr_r, s.dr_tile = dr_k, dr_r, dr_tile
        s.m.d.sync += [
            s.f_ri.eq(s.d.c * s.R),
            s.f_pad.eq(Mux(2 * s.d.n >= il_gap, 0, il_gap - 2 * s.d.n)),
        ]

        def start_gather():
            # the cursor (f_g_row, f_g_wrow) already points at the tile's first row
            s.m.d.sync += s.f_g_active.eq(1)

        s.start_gather = start_gather

        if s.il:
            s.g_go = Signal()
            s.m.d.comb += s.g_go.eq(s.fc & s.f_g_active & ~(s.f_issue & ~s.f_tag))
            s.g_mask = Signal(s.C)
            s.m.d.comb += s.g_mask.eq(
                Cat(((s.f_g_o0 + s.f_g_row) < s.d.k) & ((s.f_g_i0 + j) < s.d.c) for j in range(s.C))
            )
            s.m.d.sync += s.f_g_v.eq(s.g_go)
            with s.m.If(s.g_go):
                for j in range(s.C):
                    s.m.d.comb += s.b_ports[j].addr.eq(
                        (s.f_g_wrow + s.f_g_i0 + j + s.d.base_b)[: s.aw_b]
                    )
                s.m.d.sync += [
                    s.f_g_r1.eq(s.f_g_row),
                    s.f_g_b1.eq(s.f_g_idx[0]),
                    s.f_g_mask1.eq(s.g_mask),
                    s.f_g_row.eq(s.f_g_row + 1),
                    s.f_g_wrow.eq(s.f_g_wrow + s.d.c),
                ]
                s.inc("b_words", popcount(s.g_mask))
                with s.m.If(s.f_g_row == s.R - 1):
                    s.m.d.sync += [s.f_g_active.eq(0), s.f_g_idx.eq(s.f_g_idx + 1), s.f_g_row.eq(0)]
                    with s.m.If(s.f_g_o0 + s.R >= s.d.k):  # next input block
                        s.m.d.sync += [
                            s.f_g_o0.eq(0),
                            s.f_g_i0.eq(s.f_g_i0 + s.C),
                            s.f_g_base.eq(s.d.src_base_b),
                            s.f_g_wrow.eq(s.d.src_base_b),
                        ]
                    with s.m.Else():
                        s.m.d.sync += [
                            s.f_g_o0.eq(s.f_g_o0 + s.R),
                            s.f_g_base.eq(s.f_g_base + s.f_ri),
                            s.f_g_wrow.eq(s.f_g_base + s.f_ri),
                        ]
            with s.m.If(s.f_g_v):
                for b in range(2):
                    for i in range(s.R):
                        with s.m.If((s.f_g_b1 == b) & (s.f_g_r1 == i)):
                            for j in range(s.C):
                                s.m.d.sync += s.tile_regs[b][i][j].eq(
                                    Mux(s.f_g_mask1[j], s.b_ports[j].data, 0)
                                )

            # Stream: issue (addresses), then one registered stage to the array's edges.
            s.amask = Cat((s.f_o0 + i) < s.d.k for i in range(s.R))
            s.bmask = Cat((s.f_i0 + j) < s.d.c for j in range(s.C))
            s.m.d.sync += s.s1_v.eq(s.f_issue)
            with s.m.If(s.f_issue):
                for i in range(s.R):
                    s.m.d.comb += s.a_ports[i].addr.eq(
                        (s.f_arow + s.f_o0 + i + s.d.base_a)[: s.aw_a]
                    )
                with s.m.If(~s.f_tag):
                    for j in range(s.C):
                        s.m.d.comb += s.b_ports[j].addr.eq(
                            (s.f_brow + s.f_i0 + j + s.d.base_b)[: s.aw_b]
                        )
                    s.inc("a_words", popcount(s.amask))
                    s.inc("b_words", popcount(s.bmask))
                    s.inc("vectors")
                s.m.d.sync += [
                    s.s1_tag.eq(s.f_tag),
                    s.s1_last.eq(s.f_tag & (s.f_n + 1 == s.d.n)),
                    s.s1_amask.eq(s.amask),
                    s.s1_bmask.eq(s.bmask),
                ]
            s.f_a = [Mux(s.s1_amask[i], s.a_ports[i].data, 0) for i in range(s.R)]
            s.f_b = [Mux(~s.s1_tag & s.s1_bmask[j], s.b_ports[j].data, 0) for j in range(s.C)]
            with s.m.If(s.fc):
                s.m.d.comb += [
                    s.arr.dataflow.eq(Dataflow.INTERLEAVED),
                    s.arr.a_valid.eq(s.s1_v),
                    s.arr.a_last.eq(s.s1_v & s.s1_last),
                    s.arr.b_valid.eq(s.s1_v),
                    s.arr.b_tag.eq(s.s1_tag),
                    s.arr.sgd_en.eq(s.d.sgd_en),
                    s.arr.sgd_shift.eq(s.d.sgd_shift),
                ]
                s.m.d.comb += [s.arr.a_data[i].eq(s.f_a[i]) for i in range(s.R)]
                s.m.d.comb += [s.arr.b_data[j].eq(s.f_b[j]) for j in range(s.C)]
            with s.m.If(s.s1_v & ~s.s1_tag):
                s.m.d.sync += s.seen_a.eq(1)
                s.inc("zeros_a", popcount([v == 0 for v in s.f_a]))
                s.inc("zeros_b", popcount([v == 0 for v in s.f_b]))

            # Drains: W tile k + 2 (register k % 2) shifts in, row R-1 first, as dW tile k
            # leaves.
            with s.m.If(s.fc & s.arr.drain_shift):
                for b in range(2):
                    for r in range(s.R):
                        with s.m.If((s.dr_k == b) & (s.dr_r == r)):
                            s.m.d.comb += [
                                s.arr.preload[j].eq(s.tile_regs[b][s.R - 1 - r][j])
                                for j in range(s.C)
                            ]
                s.m.d.sync += s.dr_r.eq(s.dr_r + 1)
                with s.m.If(s.dr_r == s.R - 1):
                    s.m.d.sync += [s.dr_r.eq(0), s.dr_k.eq(~s.dr_k)]
            s.m.d.comb += [
                self.drain.valid.eq(s.fc & s.arr.drain_valid),
                self.drain.payload.data.eq(s.arr.drain_data),
                self.drain.payload.row.eq(s.arr.drain_row),
                self.drain.payload.tile.eq(s.dr_tile),
            ]
            with s.m.If(s.fc & s.arr.drain_valid & (s.arr.drain_row == 0)):
                s.m.d.sync += s.dr_tile.eq(s.dr_tile + 1)

    def _outputs(self, s):
        """Result vectors with their row and tile."""
        # --- outputs ------------------------------------------------------------------------
        s.rows_m = Signal(s.dw)  # M: C (loss) or K (gradient); FC: the batch
        s.m.d.comb += s.rows_m.eq(Mux(s.fc, s.d.n, Mux(s.grad, s.d.k, s.d.c)))
        out_m, out_t = Signal(s.dw), Signal(TILE_WIDTH)
        s.out_m, s.out_t = out_m, out_t
        s.m.d.comb += [
            self.out.valid.eq(s.arr.psum_valid),
            self.out.payload.data.eq(s.arr.psum_data),
            self.out.payload.row.eq(s.out_m),
            self.out.payload.tile.eq(s.out_t),
        ]
        with s.m.If(s.arr.psum_valid):
            with s.m.If(s.out_m + 1 == s.rows_m):
                s.m.d.sync += [s.out_m.eq(0), s.out_t.eq(s.out_t + 1)]
            with s.m.Else():
                s.m.d.sync += s.out_m.eq(s.out_m + 1)

    def _control(self, s):
        """The control FSM (tiles through the array, baseline reorganization, FC walker)."""
        # --- control ------------------------------------------------------------------------
        # A window streams one tile's A vectors; the next tile is shifted in from ``lat + R -
        # 1`` cycles after the window starts (``lat`` = cycles from a take to the array edge),
        # and the last beat is not taken before the shifts are done.
        s.tile = Signal(TILE_WIDTH)  # tile of the current window
        s.cyc = Signal(range(2 * s.R + 2))  # cycles since the window started (saturating)
        s.idx = Signal(range(s.R + 1))
        s.has_next = Signal()
        s.lat = Signal(2)
        s.pad = Signal(range(2 * s.R + 2))
        s.m.d.comb += [
            s.lat.eq(Mux(s.grad, 2, 1)),
            s.pad.eq(Mux(s.rows_m >= 2 * s.R + s.lat - 1, 0, 2 * s.R + s.lat - 1 - s.rows_m)),
        ]

        def preload_row(bank, i):
            for b in range(2):
                for r in range(s.R):
                    with s.m.If((bank == b) & (i == r)):
                        for j in range(s.C):
                            s.m.d.comb += s.arr.preload[j].eq(s.tile_regs[b][r][j])

        s.preload_row = preload_row

        s.m.d.comb += s.arr.clear.eq(0)
        s.m.d.comb += [self.fired.eq(s.arr.fired), self.gated.eq(s.arr.gated)]
        s.m.d.sync += self.done.eq(0)
        with s.m.If(self.busy):
            s.inc("cycles")
            with s.m.If(s.reorg):
                s.inc("cycles_reorg")
            with s.m.Elif(~s.seen_a):
                s.inc("cycles_prologue")
        with s.m.If(s.vec_v):
            s.m.d.sync += s.seen_a.eq(1)
        with s.m.FSM():
            self._states_run(s)
            self._states_reorg(s)
            self._states_fc(s)
            self._states_tiles(s)

    def _states_run(self, s):
        """IDLE and SETUP: take a descriptor, then the products."""
        with s.m.State("IDLE"):
            with s.m.If(self.start):
                s.m.d.sync += [
                    s.d.eq(self.layer),
                    self.error.eq(0),
                    self.error_code.eq(BPError.NONE),
                ]
                s.m.d.sync += [c.eq(0) for n_, c in s.cnt.items() if n_ not in ("fired", "gated")]
                s.m.d.comb += s.arr.clear.eq(1)
                s.m.d.sync += [
                    s.issued.eq(0),
                    s.gathered.eq(0),
                    s.shifted.eq(0),
                    s.ended.eq(0),
                    s.grow.eq(0),
                    s.tile.eq(0),
                    s.out_m.eq(0),
                    s.out_t.eq(0),
                    s.seen_a.eq(0),
                    s.idx.eq(0),
                ]
                s.m.d.sync += [
                    s.f_g_active.eq(0),
                    s.f_g_idx.eq(0),
                    s.f_g_o0.eq(0),
                    s.f_g_i0.eq(0),
                    s.f_g_row.eq(0),
                    s.f_o0.eq(0),
                    s.f_i0.eq(0),
                    s.f_n.eq(0),
                    s.f_arow.eq(0),
                    s.f_brow.eq(0),
                    s.f_cyc.eq(0),
                    s.f_tag.eq(0),
                    s.dr_k.eq(0),
                    s.dr_r.eq(0),
                    s.dr_tile.eq(0),
                ]
                s.m.next = "SETUP"
        with s.m.State("SETUP"):  # products settle into registers
            s.m.d.comb += self.busy.eq(1)
            s.m.d.sync += s.idx.eq(s.idx + 1)
            with s.m.If(s.idx == 1):
                s.m.d.sync += s.idx.eq(0)
                with s.m.If(s.fc):
                    s.m.next = "FC_CHECK"
                with s.m.Elif(~s.d.baseline):
                    s.m.next = "DESC"
                with s.m.Elif(s.grad):
                    s.m.d.sync += s.pass2.eq(1)
                    s.load_pass(
                        to_a=1,
                        src=s.d.src_base_a,
                        planes=s.nk,
                        plane_elems=s.ohow,
                        axes=((0, s.d.stride_h, s.hd, s.d.oh), (0, s.d.stride_w, s.wd, s.d.ow)),
                    )
                    s.m.next = "CROP"
                with s.m.Else():
                    s.m.d.sync += s.pass2.eq(0)
                    s.load_pass(
                        to_a=0,
                        src=s.d.src_base_b,
                        planes=s.nk,
                        plane_elems=s.ohow,
                        axes=(
                            (s.drh - s.d.pad_h, s.d.stride_h, s.d.h + s.drh, s.d.oh),
                            (s.drw - s.d.pad_w, s.d.stride_w, s.d.w + s.drw, s.d.ow),
                        ),
                    )
                    s.m.next = "CROP"

    def _states_reorg(self, s):
        """CROP, REORG, REORG_END: the baseline reorganization passes."""
        with s.m.State("CROP"):  # skip source elements cropped by the padding
            s.m.d.comb += [self.busy.eq(1), s.reorg.eq(1)]
            with s.m.If(s.idx == 0):
                s.m.d.sync += [
                    s.hn0.eq(s.rp["first_h"]),
                    s.wn0.eq(s.rp["first_w"]),
                    s.oh0.eq(0),
                    s.ow0.eq(0),
                    s.rowoff0.eq(0),
                    s.idx.eq(1),
                ]
            with s.m.Else():
                with s.m.If(s.hn0 < 0):
                    s.m.d.sync += [
                        s.hn0.eq(s.hn0 + s.rp["step_h"]),
                        s.oh0.eq(s.oh0 + 1),
                        s.rowoff0.eq(s.rowoff0 + s.rp["count_w"]),
                    ]
                with s.m.If(s.wn0 < 0):
                    s.m.d.sync += [s.wn0.eq(s.wn0 + s.rp["step_w"]), s.ow0.eq(s.ow0 + 1)]
                with s.m.If((s.hn0 >= 0) & (s.wn0 >= 0)):
                    s.m.d.sync += [
                        s.plane.eq(0),
                        s.zh.eq(0),
                        s.zw.eq(0),
                        s.hn.eq(s.hn0),
                        s.wn.eq(s.wn0),
                        s.ohc.eq(s.oh0),
                        s.owc.eq(s.ow0),
                        s.planebase.eq(0),
                        s.rowptr.eq(s.rowoff0),
                        s.wptr.eq(0),
                        s.idx.eq(0),
                    ]
                    s.m.next = "REORG"
        with s.m.State("REORG"):
            s.m.d.comb += [self.busy.eq(1), s.reorg.eq(1)]
            src = (s.rp_src + s.rowptr + s.owc)[: s.aw]
            with s.m.If(s.rp_to_a):
                s.m.d.comb += s.a_ports[0].addr.eq(src)
            with s.m.Else():
                s.m.d.comb += s.b_ports[0].addr.eq(src)
            s.m.d.sync += [
                s.r_v.eq(1),
                s.r_hit.eq(s.hit_h & s.hit_w),
                s.r_addr.eq(s.wptr[: s.aw]),
                s.r_to_a.eq(s.rp_to_a),
                s.wptr.eq(s.wptr + 1),
            ]
            with s.m.If(s.hit_h & s.hit_w):
                s.inc("reorg_reads")
            with s.m.If(s.hit_w):
                s.m.d.sync += [s.wn.eq(s.wn + s.rp["step_w"]), s.owc.eq(s.owc + 1)]
            with s.m.If(s.zw + 1 == s.rp["size_w"]):
                s.m.d.sync += [s.zw.eq(0), s.wn.eq(s.wn0), s.owc.eq(s.ow0)]
                with s.m.If(s.hit_h):
                    s.m.d.sync += [
                        s.hn.eq(s.hn + s.rp["step_h"]),
                        s.ohc.eq(s.ohc + 1),
                        s.rowptr.eq(s.rowptr + s.rp["count_w"]),
                    ]
                with s.m.If(s.zh + 1 == s.rp["size_h"]):
                    s.m.d.sync += [
                        s.zh.eq(0),
                        s.hn.eq(s.hn0),
                        s.ohc.eq(s.oh0),
                        s.plane.eq(s.plane + 1),
                        s.planebase.eq(s.planebase + s.rp_plane),
                        s.rowptr.eq(s.planebase + s.rp_plane + s.rowoff0),
                    ]
                    with s.m.If(s.plane + 1 == s.rp["planes"]):
                        s.m.next = "REORG_END"
                with s.m.Else():
                    s.m.d.sync += s.zh.eq(s.zh + 1)
            with s.m.Else():
                s.m.d.sync += s.zw.eq(s.zw + 1)
        with s.m.State("REORG_END"):  # the last write
            s.m.d.comb += [self.busy.eq(1), s.reorg.eq(1)]
            with s.m.If(s.pass2):
                s.m.d.sync += s.pass2.eq(0)
                s.load_pass(
                    to_a=0,
                    src=s.d.src_base_b,
                    planes=s.nc,
                    plane_elems=s.hw_,
                    axes=((s.d.pad_h, 1, s.hd + s.drh, s.d.h), (s.d.pad_w, 1, s.wd + s.drw, s.d.w)),
                )
                s.m.next = "CROP"
            with s.m.Else():
                s.m.next = "DESC"

    def _states_fc(self, s):
        """FC_CHECK and the FC walker's states."""
        with s.m.State("FC_CHECK"):  # products are valid: refuse, or start the walker
            s.m.d.comb += self.busy.eq(1)

            def refuse(code):
                s.m.d.sync += [self.error.eq(1), self.done.eq(1), self.error_code.eq(code)]
                s.m.next = "IDLE"

            s.refuse = refuse
            if not s.il:
                s.refuse(BPError.NOT_GENERATED)
            else:
                with s.m.If(s.d.phase.as_value() == 3):
                    s.refuse(BPError.NOT_GENERATED)
                with s.m.Elif((s.d.n == 0) | (s.d.c == 0) | (s.d.k == 0)):
                    s.refuse(BPError.ZERO_SIZE)
                with s.m.Elif(s.nk > s.cfg.buf_a_depth):
                    s.refuse(BPError.A_OVERFLOW)
                with s.m.Elif(
                    (s.nc > s.d.src_base_b) | (s.d.src_base_b + s.kc > s.cfg.buf_b_depth)
                ):
                    s.refuse(BPError.B_OVERFLOW)
                with s.m.Else():
                    s.m.d.sync += [s.f_g_base.eq(s.d.src_base_b), s.idx.eq(0)]
                    s.m.d.sync += [
                        s.f_g_active.eq(1),
                        s.f_g_wrow.eq(s.d.src_base_b),
                        s.f_g_row.eq(0),
                    ]
                    s.m.next = "FC_PRO0"
        if s.il:
            s.gather_done = ~s.f_g_active & ~s.f_g_v
            with s.m.State("FC_PRO0"):  # W tile 0 is read into register 0
                s.m.d.comb += self.busy.eq(1)
                with s.m.If(s.gather_done):
                    s.start_gather()
                    s.m.next = "FC_SHIFT0"
            with s.m.State("FC_SHIFT0"):  # ... shifted into the chains and loaded
                s.m.d.comb += self.busy.eq(1)
                with s.m.If(s.idx == s.R):
                    s.m.d.comb += s.arr.chain_load.eq(1)
                    s.m.d.sync += s.idx.eq(0)
                    s.m.next = "FC_PRO1"
                with s.m.Else():
                    s.m.d.comb += s.arr.chain_shift.eq(1)
                    s.preload_row(0, s.R - 1 - s.idx)
                    s.m.d.sync += s.idx.eq(s.idx + 1)
            with s.m.State("FC_PRO1"):  # W tile 1 read into register 1
                s.m.d.comb += self.busy.eq(1)
                with s.m.If(s.gather_done):
                    s.m.next = "FC_SHIFT1"
            with s.m.State("FC_SHIFT1"):  # ... and shifted into the reserve registers
                s.m.d.comb += [self.busy.eq(1), s.arr.chain_shift.eq(1)]
                s.preload_row(1, s.R - 1 - s.idx)
                s.m.d.sync += s.idx.eq(s.idx + 1)
                with s.m.If(s.idx == s.R - 1):
                    s.m.d.sync += [s.idx.eq(0), s.f_cyc.eq(0)]
                    s.start_gather()
                    s.m.next = "FC_WINDOW"
            with s.m.State("FC_WINDOW"):  # tile t: padding, then Bt pairs
                s.m.d.comb += self.busy.eq(1)
                with s.m.If(s.f_cyc < s.f_pad):
                    s.m.d.sync += s.f_cyc.eq(s.f_cyc + 1)
                with s.m.Else():
                    s.m.d.comb += s.f_issue.eq(1)
                    s.m.d.sync += s.f_tag.eq(~s.f_tag)
                    with s.m.If(s.f_tag):
                        s.m.d.sync += [
                            s.f_n.eq(s.f_n + 1),
                            s.f_arow.eq(s.f_arow + s.d.k),
                            s.f_brow.eq(s.f_brow + s.d.c),
                        ]
                        with s.m.If(s.f_n + 1 == s.d.n):
                            s.m.d.sync += [
                                s.f_n.eq(0),
                                s.f_arow.eq(0),
                                s.f_brow.eq(0),
                                s.f_cyc.eq(0),
                            ]
                            s.inc("tiles")
                            with s.m.If(s.f_o0 + s.R >= s.d.k):
                                s.m.d.sync += [s.f_o0.eq(0), s.f_i0.eq(s.f_i0 + s.C)]
                            with s.m.Else():
                                s.m.d.sync += s.f_o0.eq(s.f_o0 + s.R)
                            with s.m.If((s.f_o0 + s.R >= s.d.k) & (s.f_i0 + s.C >= s.d.c)):
                                s.m.next = "DRAIN"
                            with s.m.Else():
                                s.start_gather()

    def _states_tiles(self, s):
        """DESC ... DRAIN: tiles through the array."""
        with s.m.State("DESC"):
            s.m.d.comb += [self.busy.eq(1), s.running.eq(1)]
            s.m.d.comb += [s.lgen.desc.valid.eq(~s.grad), s.ggen.desc.valid.eq(s.grad)]
            with s.m.If(Mux(s.grad, s.ggen.desc.ready, s.lgen.desc.ready)):
                s.m.next = "CHECK"
        with s.m.State("CHECK"):  # the generator checks the layer or refuses it
            s.m.d.comb += [self.busy.eq(1), s.running.eq(1)]
            s.gen_error = Mux(s.grad, s.ggen.error, s.lgen.error)
            with s.m.If(s.gen_error):
                s.m.d.sync += [
                    self.error.eq(1),
                    self.done.eq(1),
                    self.error_code.eq(Mux(s.grad, s.ggen.error_code, s.lgen.error_code)),
                ]
                s.m.next = "IDLE"
            with s.m.Elif(s.gathered != 0):
                s.m.next = "LOAD"
        with s.m.State("LOAD"):  # tile 0 into the chains, row R-1 first
            s.m.d.comb += [self.busy.eq(1), s.running.eq(1)]
            with s.m.If(s.idx == s.R):
                s.m.d.comb += s.arr.chain_load.eq(1)
                s.m.d.sync += [s.shifted.eq(1), s.idx.eq(0)]
                s.m.next = "WAIT"
            with s.m.Else():
                s.m.d.comb += s.arr.chain_shift.eq(1)
                s.preload_row(0, s.R - 1 - s.idx)
                s.m.d.sync += s.idx.eq(s.idx + 1)
        with s.m.State("WAIT"):  # tile `tile` is in the PEs; is the next one ready?
            s.m.d.comb += [self.busy.eq(1), s.running.eq(1)]
            with s.m.If(s.gathered >= s.tile + 2):
                s.m.d.sync += [s.has_next.eq(1), s.cyc.eq(0)]
                s.m.next = "WINDOW"
            with s.m.Elif(s.ended & (s.gathered == s.tile + 1)):
                s.m.d.sync += [s.has_next.eq(0), s.cyc.eq(0)]
                s.m.next = "WINDOW"
        with s.m.State("WINDOW"):
            s.m.d.comb += [self.busy.eq(1), s.running.eq(1)]
            with s.m.If(s.cyc != 2 * s.R + 1):
                s.m.d.sync += s.cyc.eq(s.cyc + 1)
            first = s.R + s.lat - 1
            with s.m.If(s.has_next & (s.cyc >= first) & (s.cyc < first + s.R)):
                s.m.d.comb += s.arr.chain_shift.eq(1)
                s.preload_row(~s.tile[0], (first + s.R - 1) - s.cyc)
                with s.m.If(s.cyc == first + s.R - 1):
                    s.m.d.sync += s.shifted.eq(s.shifted + 1)
            s.m.d.comb += s.a_take.eq(s.a_valid & (s.cyc >= s.pad))
            with s.m.If(s.a_take & s.a_last):
                s.m.d.sync += [s.tile.eq(s.tile + 1), s.cyc.eq(0)]
                s.inc("tiles")
                with s.m.If(s.a_end):
                    s.m.next = "DRAIN"
                with s.m.Else():
                    s.m.next = "WAIT"
        with s.m.State("DRAIN"):
            s.m.d.comb += [self.busy.eq(1), s.running.eq(1)]
            with s.m.If(~s.av & ~s.xbar.o.valid & ~s.arr.busy & ~s.lgen.busy & ~s.ggen.busy):
                s.m.d.sync += self.done.eq(1)
                s.m.next = "IDLE"
