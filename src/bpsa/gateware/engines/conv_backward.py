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
    ``bpsa.verify.conv_backward_run`` places them right after).

Schedule
    :class:`bpsa.gateware.bp_im2col.TransposedAddressGenerator` (loss) or
    :class:`bpsa.gateware.bp_im2col.DilatedAddressGenerator` (gradient) walks the tiles (column tile
    outer, row tile inner). A gatherer reads each B-tile row (``cols`` read ports; masked lanes
    are not read and become 0, :class:`bpsa.gateware.bp_im2col.MaskExpander`'s contract) into one of two
    tile registers; the first tile is shifted into the reserve chains and loaded, then tile
    ``t`` streams its A vectors (``rows`` read ports of buffer A: per lane for the loss; at
    ``addr, addr+1, ..`` for the gradient, merged by :class:`bpsa.gateware.bp_im2col.CrossbarRecovery`)
    while tile ``t+1`` is shifted in, ``a_last`` switching the PEs (the schedule of
    ``bpsa.verify.gemm``'s held-B GEMM); a tile lasts at least ``2 * rows`` cycles.

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
    side (``bpsa.verify.conv_backward_run.assemble``); there is no P buffer in this top.
"""

from amaranth.hdl import Cat, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, enum, wiring
from amaranth.lib.memory import Memory, WritePort
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from bpsa.config import Config
from bpsa.gateware.arith import arith_for
from bpsa.gateware.array import Dataflow, SystolicArray
from bpsa.gateware.bp_im2col import (
    DESC_FIELDS,
    BPError,
    CrossbarRecovery,
    DilatedAddressGenerator,
    TransposedAddressGenerator,
)
from bpsa.gateware.pe import vertical_shape

__all__ = ["Phase", "COUNTERS", "backward_layout", "out_layout", "drain_layout", "ConvBackward"]

#: Counter outputs (32 bits), cleared at ``start``.
COUNTERS = ("cycles", "cycles_prologue", "cycles_reorg", "a_words", "b_words", "reorg_reads",
            "reorg_writes", "zeros_a", "zeros_b", "vectors", "tiles", "fired", "gated")
COUNTER_WIDTH = 32
TILE_WIDTH = 24


class Phase(enum.Enum, shape=2):
    LOSS = 0
    GRADIENT = 1
    FC = 2


def backward_layout(config):
    """The descriptor: ``phase``, ``baseline``, the layer (:data:`bpsa.gateware.bp_im2col.DESC_FIELDS`,
    ``dim_width`` bits each), ``src_base_a`` / ``src_base_b`` (baseline: first word of the
    compact tensors) and ``base_a`` / ``base_b`` (added to every address the compute pass
    reads from buffer A / B, wrapping at the buffer's end: the accelerator's double-buffer
    bank; 0 for the layouts of the module docstring), ``sgd_en`` / ``sgd_shift`` (FC: drain
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
    return data.StructLayout({
        "data": data.ArrayLayout(vertical_shape(config), config.cols),
        "row": unsigned(config.dim_width), "tile": unsigned(TILE_WIDTH),
    })


def drain_layout(config):
    """FC phase: one row of a drained dW (or updated W) tile."""
    return data.StructLayout({
        "data": data.ArrayLayout(arith_for(config).acc_shape, config.cols),
        "row": range(config.rows), "tile": unsigned(TILE_WIDTH),
    })


def _popcount(bits):
    total = 0
    for b in bits:
        total = total + b
    return total


class ConvBackward(wiring.Component):
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
    """

    def __init__(self, config):
        if not isinstance(config, Config):
            self._MustUse__silence = True
            raise TypeError(f"config must be a Config, not {config!r}")
        if not config.has("is"):
            self._MustUse__silence = True
            raise ValueError(f"config {config.name!r} does not generate the 'is' dataflow")
        self.config = config
        op = arith_for(config).operand_shape
        members = {
            "layer": In(backward_layout(config)), "start": In(1),
            "busy": Out(1), "done": Out(1), "error": Out(1), "error_code": Out(BPError),
            "a_write": Out(WritePort.Signature(addr_width=exact_log2(config.buf_a_depth),
                                               shape=op)),
            "b_write": Out(WritePort.Signature(addr_width=exact_log2(config.buf_b_depth),
                                               shape=op)),
            "out": Out(wiring.Signature({"valid": Out(1), "payload": Out(out_layout(config))})),
        }
        if config.has("interleaved"):
            members["drain"] = Out(wiring.Signature({"valid": Out(1),
                                                     "payload": Out(drain_layout(config))}))
        members.update({name: Out(COUNTER_WIDTH) for name in COUNTERS})
        super().__init__(members)

    def elaborate(self, platform):
        cfg = self.config
        m = Module()
        R, C = cfg.rows, cfg.cols
        dw = cfg.dim_width
        aw_a, aw_b = exact_log2(cfg.buf_a_depth), exact_log2(cfg.buf_b_depth)
        aw = max(aw_a, aw_b)
        op = arith_for(cfg).operand_shape
        sv = signed(dw + 4)

        amem = m.submodules.buf_a = Memory(shape=op, depth=cfg.buf_a_depth, init=[])
        bmem = m.submodules.buf_b = Memory(shape=op, depth=cfg.buf_b_depth, init=[])
        awp = amem.write_port()
        bwp = bmem.write_port()
        a_ports = [amem.read_port() for _ in range(R)]
        b_ports = [bmem.read_port() for _ in range(C)]
        lgen = m.submodules.loss_gen = TransposedAddressGenerator(cfg)
        ggen = m.submodules.grad_gen = DilatedAddressGenerator(cfg)
        xbar = m.submodules.crossbar = CrossbarRecovery(cfg)
        arr = m.submodules.array = SystolicArray(cfg)
        m.d.comb += arr.dataflow.eq(Dataflow.IS)

        d = Signal(backward_layout(cfg))
        grad = Signal()
        m.d.comb += grad.eq(d.phase == Phase.GRADIENT)
        il = cfg.has("interleaved")
        fc = Signal()                    # Phase.FC (or the undefined 3, refused)
        m.d.comb += fc.eq(d.phase.as_value()[1])
        cnt = {name: getattr(self, name) for name in COUNTERS}

        def inc(name, by=1):
            m.d.sync += cnt[name].eq(cnt[name] + by)

        # --- per-layer values (registered products) ---------------------------------------
        drh, drw = Signal(dw + 1), Signal(dw + 1)    # d(R-1), d(S-1)
        hd, wd = Signal(2 * dw), Signal(2 * dw)      # s(OH-1)+1, s(OW-1)+1
        ohow, hw_ = Signal(aw + 1), Signal(aw + 1)
        nk, nc = Signal(2 * dw), Signal(2 * dw)
        m.d.sync += [drh.eq(d.dil_h * (d.r - 1)), drw.eq(d.dil_w * (d.s - 1)),
                     hd.eq(d.stride_h * (d.oh - 1) + 1), wd.eq(d.stride_w * (d.ow - 1) + 1),
                     ohow.eq(d.oh * d.ow), hw_.eq(d.h * d.w), nk.eq(d.n * d.k),
                     nc.eq(d.n * d.c)]
        kc = Signal(2 * dw)                          # FC: O * I (W's words)
        m.d.sync += kc.eq(d.k * d.c)

        # --- baseline reorganization: a compact tensor (from its src_base) -> its zero-spaced
        # copy Z (from word 0), one Z word a cycle. Per axis: source element o sits at Z index
        # first + o*step (0 <= o < count, first + o*step < size; the others are cropped).
        # loss: dY -> padded, zero-inserted dY in B; gradient: dY -> dilated dY in A, then
        # X -> padded (and cropped) X in B.
        rp = {name: Signal(sv if name.startswith("first") else unsigned(2 * dw + 2),
                           name=f"rp_{name}")
              for name in ("first_h", "first_w", "step_h", "step_w", "size_h", "size_w",
                           "count_h", "count_w", "planes")}
        rp_plane = Signal(aw + 1)                    # source elements per plane
        rp_src = Signal(aw)
        rp_to_a = Signal()                           # destination buffer A (else B)
        pass2 = Signal()                             # gradient: the X pass comes next
        hn0, wn0 = Signal(sv), Signal(sv)            # Z index of the first kept element
        oh0, ow0 = Signal(2 * dw), Signal(2 * dw)    # its source row / column
        rowoff0 = Signal(aw + 1)                     # oh0 * count_w
        plane, zh, zw = Signal(2 * dw), Signal(2 * dw + 2), Signal(2 * dw + 2)
        hn, wn = Signal(sv), Signal(sv)
        ohc, owc = Signal(2 * dw), Signal(2 * dw)
        planebase, rowptr, wptr = Signal(aw + 1), Signal(aw + 1), Signal(aw + 1)
        hit_h = (zh == hn) & (ohc < rp["count_h"])
        hit_w = (zw == wn) & (owc < rp["count_w"])
        r_v, r_hit, r_addr, r_to_a = Signal(), Signal(), Signal(aw), Signal()
        reorg = Signal()
        m.d.sync += r_v.eq(0)
        r_data = Mux(r_to_a, a_ports[0].data, b_ports[0].data)
        m.d.comb += [awp.en.eq(self.a_write.en), awp.addr.eq(self.a_write.addr),
                     awp.data.eq(self.a_write.data),
                     bwp.en.eq(self.b_write.en), bwp.addr.eq(self.b_write.addr),
                     bwp.data.eq(self.b_write.data)]
        with m.If(r_v):
            inc("reorg_writes")
            with m.If(r_to_a):
                m.d.comb += [awp.en.eq(1), awp.addr.eq(r_addr), awp.data.eq(Mux(r_hit, r_data, 0))]
            with m.Else():
                m.d.comb += [bwp.en.eq(1), bwp.addr.eq(r_addr), bwp.data.eq(Mux(r_hit, r_data, 0))]

        def load_pass(*, to_a, src, planes, plane_elems, axes):
            m.d.sync += [rp_to_a.eq(to_a), rp_src.eq(src), rp["planes"].eq(planes),
                         rp_plane.eq(plane_elems)]
            for ax, (first, step, size, count) in zip("hw", axes):
                m.d.sync += [rp[f"first_{ax}"].eq(first), rp[f"step_{ax}"].eq(step),
                             rp[f"size_{ax}"].eq(size), rp[f"count_{ax}"].eq(count)]

        # --- generator descriptors ---------------------------------------------------------
        for gen in (lgen, ggen):
            gd = gen.desc.payload
            for name in DESC_FIELDS:
                m.d.comb += getattr(gd, name).eq(getattr(d, name))
        with m.If(d.baseline):
            # loss: the stride-1 loss of the padded, zero-inserted dY with padding d(R-1).
            m.d.comb += [lgen.desc.payload.oh.eq(d.h + drh), lgen.desc.payload.ow.eq(d.w + drw),
                         lgen.desc.payload.stride_h.eq(1), lgen.desc.payload.stride_w.eq(1),
                         lgen.desc.payload.pad_h.eq(drh), lgen.desc.payload.pad_w.eq(drw),
                         lgen.desc.payload.pad_bottom.eq(drh)]
            # gradient: the stride-1, unpadded gradient of the padded X and the dilated dY.
            m.d.comb += [ggen.desc.payload.oh.eq(hd), ggen.desc.payload.ow.eq(wd),
                         ggen.desc.payload.h.eq(hd + drh), ggen.desc.payload.w.eq(wd + drw),
                         ggen.desc.payload.stride_h.eq(1), ggen.desc.payload.stride_w.eq(1),
                         ggen.desc.payload.pad_h.eq(0), ggen.desc.payload.pad_w.eq(0),
                         ggen.desc.payload.pad_bottom.eq(0)]

        # --- gatherer: B-tile rows -> two tile registers -------------------------------------
        gb = Signal.like(lgen.b.payload)
        gb_valid = Signal()
        m.d.comb += [gb_valid.eq(Mux(grad, ggen.b.valid, lgen.b.valid)),
                     gb.eq(Mux(grad, ggen.b.payload, lgen.b.payload))]
        tile_regs = [[Signal(data.ArrayLayout(op, C), name=f"tile{b}_{i}") for i in range(R)]
                     for b in range(2)]
        issued = Signal(TILE_WIDTH)      # tiles whose rows were all requested
        gathered = Signal(TILE_WIDTH)    # tiles whose rows are all in a tile register
        shifted = Signal(TILE_WIDTH)     # tiles shifted into the chains
        ended = Signal()
        grow = Signal(range(R))
        running = Signal()
        g_v, g_row, g_bank, g_last, g_end = Signal(), Signal(range(R)), Signal(), Signal(), Signal()
        g_mask = Signal(C)
        b_take = Signal()
        m.d.comb += [b_take.eq(running & gb_valid & ((issued - shifted) < 2)),
                     lgen.b.ready.eq(b_take & ~grad), ggen.b.ready.eq(b_take & grad)]
        for j in range(C):
            m.d.comb += b_ports[j].addr.eq((gb.addr[j] + d.base_b)[:aw_b])
        m.d.sync += g_v.eq(b_take)
        with m.If(b_take):
            m.d.sync += [g_row.eq(grow), g_bank.eq(issued[0]), g_last.eq(gb.last),
                         g_end.eq(gb.end), g_mask.eq(gb.mask),
                         grow.eq(Mux(gb.last, 0, grow + 1))]
            inc("b_words", _popcount(gb.mask))
            with m.If(gb.last):
                m.d.sync += issued.eq(issued + 1)
        row_vals = [Mux(g_mask[j], b_ports[j].data, 0) for j in range(C)]
        with m.If(g_v):
            for b in range(2):
                for i in range(R):
                    with m.If((g_bank == b) & (g_row == i)):
                        for j in range(C):
                            m.d.sync += tile_regs[b][i][j].eq(row_vals[j])
            inc("zeros_b", _popcount([v == 0 for v in row_vals]))
            with m.If(g_last):
                m.d.sync += gathered.eq(gathered + 1)
            with m.If(g_end):
                m.d.sync += ended.eq(1)

        # --- A side: read ports -> (loss: mask | gradient: crossbar) -> array left edge -------
        a_take = Signal()
        m.d.comb += [lgen.a.ready.eq(a_take & ~grad), ggen.a.ready.eq(a_take & grad)]
        la, ga = lgen.a.payload, ggen.a.payload
        a_valid, a_last, a_end, a_mask = Signal(), Signal(), Signal(), Signal(R)
        m.d.comb += [a_valid.eq(Mux(grad, ggen.a.valid, lgen.a.valid)),
                     a_last.eq(Mux(grad, ga.last, la.last)),
                     a_end.eq(Mux(grad, ga.end, la.end)),
                     a_mask.eq(Mux(grad, ga.mask, la.mask))]
        for i in range(R):
            m.d.comb += a_ports[i].addr.eq(
                (Mux(grad, (ga.addr + i)[:aw_a], la.addr[i]) + d.base_a)[:aw_a])
        av, alast, aend, aslice, amask = Signal(), Signal(), Signal(), Signal(), Signal(R)
        m.d.sync += av.eq(a_take)
        with m.If(a_take):
            m.d.sync += [amask.eq(a_mask), alast.eq(a_last), aend.eq(a_end),
                         aslice.eq(~grad | ga.slice_end)]
            inc("a_words", _popcount(a_mask))
            with m.If(~grad | ga.slice_end):
                inc("vectors")
        # Gradient: the crossbar merges the beats of a slice (one registered stage).
        xi = xbar.i.payload
        m.d.comb += [xbar.i.valid.eq(av & grad), xi.mask.eq(amask), xi.slice_end.eq(aslice),
                     xi.last.eq(alast), xi.end.eq(aend), xbar.o.ready.eq(1)]
        for i in range(R):
            m.d.comb += xi.data[i].eq(a_ports[i].data)
        vec = [Signal(op, name=f"a_vec{i}") for i in range(R)]
        vec_v, vec_last = Signal(), Signal()
        with m.If(grad):
            m.d.comb += [vec_v.eq(xbar.o.valid), vec_last.eq(xbar.o.valid & xbar.o.payload.last)]
            m.d.comb += [vec[i].eq(xbar.o.payload.data[i]) for i in range(R)]
        with m.Else():
            m.d.comb += [vec_v.eq(av), vec_last.eq(av & alast)]
            m.d.comb += [vec[i].eq(Mux(amask[i], a_ports[i].data, 0)) for i in range(R)]
        for i in range(R):
            m.d.comb += arr.a_data[i].eq(vec[i])
        m.d.comb += [arr.a_valid.eq(vec_v), arr.a_last.eq(vec_last), arr.b_valid.eq(vec_v)]
        for j in range(C):
            m.d.comb += arr.b_data[j].eq(0)
        with m.If(vec_v):
            inc("zeros_a", _popcount([v == 0 for v in vec]))


        # --- FC backward (interleaved): the dense walker -------------------------------------
        seen_a = Signal()                # an A vector reached the array (ends the prologue)
        # Gatherer of W tiles (tile g into tile register g % 2) on the cycles buffer B's ports
        # are free, and the stream of (dY, X) / (dY, 0) pairs; see the module docstring.
        wide = aw + 2                    # addresses are used modulo the buffer depth
        f_issue, f_tag = Signal(), Signal()          # a pair's cycle is issued; its second
        f_g_active, f_g_idx = Signal(), Signal(TILE_WIDTH)
        f_g_o0, f_g_i0 = Signal(dw + 1), Signal(dw + 1)
        f_g_base, f_g_wrow, f_ri = Signal(wide), Signal(wide), Signal(wide)
        f_g_row, f_g_r1, f_g_b1 = Signal(range(R)), Signal(range(R)), Signal()
        f_g_v, f_g_mask1 = Signal(), Signal(C)
        f_o0, f_i0, f_n = Signal(dw + 1), Signal(dw + 1), Signal(dw)
        f_arow, f_brow = Signal(wide), Signal(wide)  # n * O, n * I
        f_cyc, f_pad = Signal(range(2 * R + 1)), Signal(range(2 * R + 1))
        s1_v, s1_tag, s1_last = Signal(), Signal(), Signal()
        s1_amask, s1_bmask = Signal(R), Signal(C)
        dr_k, dr_r, dr_tile = Signal(), Signal(range(R)), Signal(TILE_WIDTH)
        m.d.sync += [f_ri.eq(d.c * R), f_pad.eq(Mux(d.n >= R, 0, 2 * R - 2 * d.n))]

        def start_gather():
            # the cursor (f_g_row, f_g_wrow) already points at the tile's first row
            m.d.sync += f_g_active.eq(1)

        if il:
            g_go = Signal()
            m.d.comb += g_go.eq(fc & f_g_active & ~(f_issue & ~f_tag))
            g_mask = Signal(C)
            m.d.comb += g_mask.eq(Cat(((f_g_o0 + f_g_row) < d.k) & ((f_g_i0 + j) < d.c)
                                      for j in range(C)))
            m.d.sync += f_g_v.eq(g_go)
            with m.If(g_go):
                for j in range(C):
                    m.d.comb += b_ports[j].addr.eq((f_g_wrow + f_g_i0 + j + d.base_b)[:aw_b])
                m.d.sync += [f_g_r1.eq(f_g_row), f_g_b1.eq(f_g_idx[0]), f_g_mask1.eq(g_mask),
                             f_g_row.eq(f_g_row + 1), f_g_wrow.eq(f_g_wrow + d.c)]
                inc("b_words", _popcount(g_mask))
                with m.If(f_g_row == R - 1):
                    m.d.sync += [f_g_active.eq(0), f_g_idx.eq(f_g_idx + 1), f_g_row.eq(0)]
                    with m.If(f_g_o0 + R >= d.k):     # next input block
                        m.d.sync += [f_g_o0.eq(0), f_g_i0.eq(f_g_i0 + C),
                                     f_g_base.eq(d.src_base_b), f_g_wrow.eq(d.src_base_b)]
                    with m.Else():
                        m.d.sync += [f_g_o0.eq(f_g_o0 + R), f_g_base.eq(f_g_base + f_ri),
                                     f_g_wrow.eq(f_g_base + f_ri)]
            with m.If(f_g_v):
                for b in range(2):
                    for i in range(R):
                        with m.If((f_g_b1 == b) & (f_g_r1 == i)):
                            for j in range(C):
                                m.d.sync += tile_regs[b][i][j].eq(
                                    Mux(f_g_mask1[j], b_ports[j].data, 0))

            # Stream: issue (addresses), then one registered stage to the array's edges.
            amask = Cat((f_o0 + i) < d.k for i in range(R))
            bmask = Cat((f_i0 + j) < d.c for j in range(C))
            m.d.sync += s1_v.eq(f_issue)
            with m.If(f_issue):
                for i in range(R):
                    m.d.comb += a_ports[i].addr.eq((f_arow + f_o0 + i + d.base_a)[:aw_a])
                with m.If(~f_tag):
                    for j in range(C):
                        m.d.comb += b_ports[j].addr.eq((f_brow + f_i0 + j + d.base_b)[:aw_b])
                    inc("a_words", _popcount(amask))
                    inc("b_words", _popcount(bmask))
                    inc("vectors")
                m.d.sync += [s1_tag.eq(f_tag), s1_last.eq(f_tag & (f_n + 1 == d.n)),
                             s1_amask.eq(amask), s1_bmask.eq(bmask)]
            f_a = [Mux(s1_amask[i], a_ports[i].data, 0) for i in range(R)]
            f_b = [Mux(~s1_tag & s1_bmask[j], b_ports[j].data, 0) for j in range(C)]
            with m.If(fc):
                m.d.comb += [arr.dataflow.eq(Dataflow.INTERLEAVED),
                             arr.a_valid.eq(s1_v), arr.a_last.eq(s1_v & s1_last),
                             arr.b_valid.eq(s1_v), arr.b_tag.eq(s1_tag),
                             arr.sgd_en.eq(d.sgd_en), arr.sgd_shift.eq(d.sgd_shift)]
                m.d.comb += [arr.a_data[i].eq(f_a[i]) for i in range(R)]
                m.d.comb += [arr.b_data[j].eq(f_b[j]) for j in range(C)]
            with m.If(s1_v & ~s1_tag):
                m.d.sync += seen_a.eq(1)
                inc("zeros_a", _popcount([v == 0 for v in f_a]))
                inc("zeros_b", _popcount([v == 0 for v in f_b]))

            # Drains: W tile k + 2 (register k % 2) shifts in, row R-1 first, as dW tile k
            # leaves.
            with m.If(fc & arr.drain_shift):
                for b in range(2):
                    for r in range(R):
                        with m.If((dr_k == b) & (dr_r == r)):
                            m.d.comb += [arr.preload[j].eq(tile_regs[b][R - 1 - r][j])
                                         for j in range(C)]
                m.d.sync += dr_r.eq(dr_r + 1)
                with m.If(dr_r == R - 1):
                    m.d.sync += [dr_r.eq(0), dr_k.eq(~dr_k)]
            m.d.comb += [self.drain.valid.eq(fc & arr.drain_valid),
                         self.drain.payload.data.eq(arr.drain_data),
                         self.drain.payload.row.eq(arr.drain_row),
                         self.drain.payload.tile.eq(dr_tile)]
            with m.If(fc & arr.drain_valid & (arr.drain_row == 0)):
                m.d.sync += dr_tile.eq(dr_tile + 1)

        # --- outputs ------------------------------------------------------------------------
        rows_m = Signal(dw)              # M: C (loss) or K (gradient); FC: the batch
        m.d.comb += rows_m.eq(Mux(fc, d.n, Mux(grad, d.k, d.c)))
        out_m, out_t = Signal(dw), Signal(TILE_WIDTH)
        m.d.comb += [self.out.valid.eq(arr.psum_valid), self.out.payload.data.eq(arr.psum_data),
                     self.out.payload.row.eq(out_m), self.out.payload.tile.eq(out_t)]
        with m.If(arr.psum_valid):
            with m.If(out_m + 1 == rows_m):
                m.d.sync += [out_m.eq(0), out_t.eq(out_t + 1)]
            with m.Else():
                m.d.sync += out_m.eq(out_m + 1)

        # --- control ------------------------------------------------------------------------
        # A window streams one tile's A vectors; the next tile is shifted in from ``lat + R -
        # 1`` cycles after the window starts (``lat`` = cycles from a take to the array edge),
        # and the last beat is not taken before the shifts are done.
        tile = Signal(TILE_WIDTH)        # tile of the current window
        cyc = Signal(range(2 * R + 2))   # cycles since the window started (saturating)
        idx = Signal(range(R + 1))
        has_next = Signal()
        lat = Signal(2)
        pad = Signal(range(2 * R + 2))
        m.d.comb += [lat.eq(Mux(grad, 2, 1)),
                     pad.eq(Mux(rows_m >= 2 * R + lat - 1, 0, 2 * R + lat - 1 - rows_m))]

        def preload_row(bank, i):
            for b in range(2):
                for r in range(R):
                    with m.If((bank == b) & (i == r)):
                        for j in range(C):
                            m.d.comb += arr.preload[j].eq(tile_regs[b][r][j])

        m.d.comb += arr.clear.eq(0)
        m.d.comb += [self.fired.eq(arr.fired), self.gated.eq(arr.gated)]
        m.d.sync += self.done.eq(0)
        with m.If(self.busy):
            inc("cycles")
            with m.If(reorg):
                inc("cycles_reorg")
            with m.Elif(~seen_a):
                inc("cycles_prologue")
        with m.If(vec_v):
            m.d.sync += seen_a.eq(1)

        with m.FSM():
            with m.State("IDLE"):
                with m.If(self.start):
                    m.d.sync += [d.eq(self.layer), self.error.eq(0),
                                 self.error_code.eq(BPError.NONE)]
                    m.d.sync += [c.eq(0) for n_, c in cnt.items() if n_ not in ("fired", "gated")]
                    m.d.comb += arr.clear.eq(1)
                    m.d.sync += [issued.eq(0), gathered.eq(0), shifted.eq(0), ended.eq(0),
                                 grow.eq(0), tile.eq(0), out_m.eq(0), out_t.eq(0),
                                 seen_a.eq(0), idx.eq(0)]
                    m.d.sync += [f_g_active.eq(0), f_g_idx.eq(0), f_g_o0.eq(0), f_g_i0.eq(0),
                                 f_g_row.eq(0), f_o0.eq(0), f_i0.eq(0), f_n.eq(0), f_arow.eq(0),
                                 f_brow.eq(0), f_cyc.eq(0), f_tag.eq(0), dr_k.eq(0),
                                 dr_r.eq(0), dr_tile.eq(0)]
                    m.next = "SETUP"
            with m.State("SETUP"):           # products settle into registers
                m.d.comb += self.busy.eq(1)
                m.d.sync += idx.eq(idx + 1)
                with m.If(idx == 1):
                    m.d.sync += idx.eq(0)
                    with m.If(fc):
                        m.next = "FC_CHECK"
                    with m.Elif(~d.baseline):
                        m.next = "DESC"
                    with m.Elif(grad):
                        m.d.sync += pass2.eq(1)
                        load_pass(to_a=1, src=d.src_base_a, planes=nk, plane_elems=ohow,
                                  axes=((0, d.stride_h, hd, d.oh), (0, d.stride_w, wd, d.ow)))
                        m.next = "CROP"
                    with m.Else():
                        m.d.sync += pass2.eq(0)
                        load_pass(to_a=0, src=d.src_base_b, planes=nk, plane_elems=ohow,
                                  axes=((drh - d.pad_h, d.stride_h, d.h + drh, d.oh),
                                        (drw - d.pad_w, d.stride_w, d.w + drw, d.ow)))
                        m.next = "CROP"
            with m.State("CROP"):            # skip source elements cropped by the padding
                m.d.comb += [self.busy.eq(1), reorg.eq(1)]
                with m.If(idx == 0):
                    m.d.sync += [hn0.eq(rp["first_h"]), wn0.eq(rp["first_w"]), oh0.eq(0),
                                 ow0.eq(0), rowoff0.eq(0), idx.eq(1)]
                with m.Else():
                    with m.If(hn0 < 0):
                        m.d.sync += [hn0.eq(hn0 + rp["step_h"]), oh0.eq(oh0 + 1),
                                     rowoff0.eq(rowoff0 + rp["count_w"])]
                    with m.If(wn0 < 0):
                        m.d.sync += [wn0.eq(wn0 + rp["step_w"]), ow0.eq(ow0 + 1)]
                    with m.If((hn0 >= 0) & (wn0 >= 0)):
                        m.d.sync += [plane.eq(0), zh.eq(0), zw.eq(0), hn.eq(hn0), wn.eq(wn0),
                                     ohc.eq(oh0), owc.eq(ow0), planebase.eq(0),
                                     rowptr.eq(rowoff0), wptr.eq(0), idx.eq(0)]
                        m.next = "REORG"
            with m.State("REORG"):
                m.d.comb += [self.busy.eq(1), reorg.eq(1)]
                src = (rp_src + rowptr + owc)[:aw]
                with m.If(rp_to_a):
                    m.d.comb += a_ports[0].addr.eq(src)
                with m.Else():
                    m.d.comb += b_ports[0].addr.eq(src)
                m.d.sync += [r_v.eq(1), r_hit.eq(hit_h & hit_w), r_addr.eq(wptr[:aw]),
                             r_to_a.eq(rp_to_a), wptr.eq(wptr + 1)]
                with m.If(hit_h & hit_w):
                    inc("reorg_reads")
                with m.If(hit_w):
                    m.d.sync += [wn.eq(wn + rp["step_w"]), owc.eq(owc + 1)]
                with m.If(zw + 1 == rp["size_w"]):
                    m.d.sync += [zw.eq(0), wn.eq(wn0), owc.eq(ow0)]
                    with m.If(hit_h):
                        m.d.sync += [hn.eq(hn + rp["step_h"]), ohc.eq(ohc + 1),
                                     rowptr.eq(rowptr + rp["count_w"])]
                    with m.If(zh + 1 == rp["size_h"]):
                        m.d.sync += [zh.eq(0), hn.eq(hn0), ohc.eq(oh0), plane.eq(plane + 1),
                                     planebase.eq(planebase + rp_plane),
                                     rowptr.eq(planebase + rp_plane + rowoff0)]
                        with m.If(plane + 1 == rp["planes"]):
                            m.next = "REORG_END"
                    with m.Else():
                        m.d.sync += zh.eq(zh + 1)
                with m.Else():
                    m.d.sync += zw.eq(zw + 1)
            with m.State("REORG_END"):       # the last write
                m.d.comb += [self.busy.eq(1), reorg.eq(1)]
                with m.If(pass2):
                    m.d.sync += pass2.eq(0)
                    load_pass(to_a=0, src=d.src_base_b, planes=nc, plane_elems=hw_,
                              axes=((d.pad_h, 1, hd + drh, d.h), (d.pad_w, 1, wd + drw, d.w)))
                    m.next = "CROP"
                with m.Else():
                    m.next = "DESC"
            with m.State("FC_CHECK"):        # products are valid: refuse, or start the walker
                m.d.comb += self.busy.eq(1)

                def refuse(code):
                    m.d.sync += [self.error.eq(1), self.done.eq(1), self.error_code.eq(code)]
                    m.next = "IDLE"
                if not il:
                    refuse(BPError.NOT_GENERATED)
                else:
                    with m.If(d.phase.as_value() == 3):
                        refuse(BPError.NOT_GENERATED)
                    with m.Elif((d.n == 0) | (d.c == 0) | (d.k == 0)):
                        refuse(BPError.ZERO_SIZE)
                    with m.Elif(nk > cfg.buf_a_depth):
                        refuse(BPError.A_OVERFLOW)
                    with m.Elif((nc > d.src_base_b) | (d.src_base_b + kc > cfg.buf_b_depth)):
                        refuse(BPError.B_OVERFLOW)
                    with m.Else():
                        m.d.sync += [f_g_base.eq(d.src_base_b), idx.eq(0)]
                        m.d.sync += [f_g_active.eq(1), f_g_wrow.eq(d.src_base_b), f_g_row.eq(0)]
                        m.next = "FC_PRO0"
            if il:
                gather_done = ~f_g_active & ~f_g_v
                with m.State("FC_PRO0"):     # W tile 0 is read into register 0
                    m.d.comb += self.busy.eq(1)
                    with m.If(gather_done):
                        start_gather()
                        m.next = "FC_SHIFT0"
                with m.State("FC_SHIFT0"):   # ... shifted into the chains and loaded
                    m.d.comb += self.busy.eq(1)
                    with m.If(idx == R):
                        m.d.comb += arr.chain_load.eq(1)
                        m.d.sync += idx.eq(0)
                        m.next = "FC_PRO1"
                    with m.Else():
                        m.d.comb += arr.chain_shift.eq(1)
                        preload_row(0, R - 1 - idx)
                        m.d.sync += idx.eq(idx + 1)
                with m.State("FC_PRO1"):     # W tile 1 read into register 1
                    m.d.comb += self.busy.eq(1)
                    with m.If(gather_done):
                        m.next = "FC_SHIFT1"
                with m.State("FC_SHIFT1"):   # ... and shifted into the reserve registers
                    m.d.comb += [self.busy.eq(1), arr.chain_shift.eq(1)]
                    preload_row(1, R - 1 - idx)
                    m.d.sync += idx.eq(idx + 1)
                    with m.If(idx == R - 1):
                        m.d.sync += [idx.eq(0), f_cyc.eq(0)]
                        start_gather()
                        m.next = "FC_WINDOW"
                with m.State("FC_WINDOW"):   # tile t: padding, then Bt pairs
                    m.d.comb += self.busy.eq(1)
                    with m.If(f_cyc < f_pad):
                        m.d.sync += f_cyc.eq(f_cyc + 1)
                    with m.Else():
                        m.d.comb += f_issue.eq(1)
                        m.d.sync += f_tag.eq(~f_tag)
                        with m.If(f_tag):
                            m.d.sync += [f_n.eq(f_n + 1), f_arow.eq(f_arow + d.k),
                                         f_brow.eq(f_brow + d.c)]
                            with m.If(f_n + 1 == d.n):
                                m.d.sync += [f_n.eq(0), f_arow.eq(0), f_brow.eq(0),
                                             f_cyc.eq(0)]
                                inc("tiles")
                                with m.If(f_o0 + R >= d.k):
                                    m.d.sync += [f_o0.eq(0), f_i0.eq(f_i0 + C)]
                                with m.Else():
                                    m.d.sync += f_o0.eq(f_o0 + R)
                                with m.If((f_o0 + R >= d.k) & (f_i0 + C >= d.c)):
                                    m.next = "DRAIN"
                                with m.Else():
                                    start_gather()
            with m.State("DESC"):
                m.d.comb += [self.busy.eq(1), running.eq(1)]
                m.d.comb += [lgen.desc.valid.eq(~grad), ggen.desc.valid.eq(grad)]
                with m.If(Mux(grad, ggen.desc.ready, lgen.desc.ready)):
                    m.next = "CHECK"
            with m.State("CHECK"):           # the generator checks the layer or refuses it
                m.d.comb += [self.busy.eq(1), running.eq(1)]
                gen_error = Mux(grad, ggen.error, lgen.error)
                with m.If(gen_error):
                    m.d.sync += [self.error.eq(1), self.done.eq(1),
                                 self.error_code.eq(Mux(grad, ggen.error_code, lgen.error_code))]
                    m.next = "IDLE"
                with m.Elif(gathered != 0):
                    m.next = "LOAD"
            with m.State("LOAD"):            # tile 0 into the chains, row R-1 first
                m.d.comb += [self.busy.eq(1), running.eq(1)]
                with m.If(idx == R):
                    m.d.comb += arr.chain_load.eq(1)
                    m.d.sync += [shifted.eq(1), idx.eq(0)]
                    m.next = "WAIT"
                with m.Else():
                    m.d.comb += arr.chain_shift.eq(1)
                    preload_row(0, R - 1 - idx)
                    m.d.sync += idx.eq(idx + 1)
            with m.State("WAIT"):            # tile `tile` is in the PEs; is the next one ready?
                m.d.comb += [self.busy.eq(1), running.eq(1)]
                with m.If(gathered >= tile + 2):
                    m.d.sync += [has_next.eq(1), cyc.eq(0)]
                    m.next = "WINDOW"
                with m.Elif(ended & (gathered == tile + 1)):
                    m.d.sync += [has_next.eq(0), cyc.eq(0)]
                    m.next = "WINDOW"
            with m.State("WINDOW"):
                m.d.comb += [self.busy.eq(1), running.eq(1)]
                with m.If(cyc != 2 * R + 1):
                    m.d.sync += cyc.eq(cyc + 1)
                first = R + lat - 1
                with m.If(has_next & (cyc >= first) & (cyc < first + R)):
                    m.d.comb += arr.chain_shift.eq(1)
                    preload_row(~tile[0], (first + R - 1) - cyc)
                    with m.If(cyc == first + R - 1):
                        m.d.sync += shifted.eq(shifted + 1)
                m.d.comb += a_take.eq(a_valid & (cyc >= pad))
                with m.If(a_take & a_last):
                    m.d.sync += [tile.eq(tile + 1), cyc.eq(0)]
                    inc("tiles")
                    with m.If(a_end):
                        m.next = "DRAIN"
                    with m.Else():
                        m.next = "WAIT"
            with m.State("DRAIN"):
                m.d.comb += [self.busy.eq(1), running.eq(1)]
                with m.If(~av & ~xbar.o.valid & ~arr.busy & ~lgen.busy & ~ggen.busy):
                    m.d.sync += self.done.eq(1)
                    m.next = "IDLE"
        return m
