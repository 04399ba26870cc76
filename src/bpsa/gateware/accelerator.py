"""The whole accelerator: host registers, DMA, the compute engines, the partial-sum buffer and
the layer controller.

Blocks
    :class:`bpsa.gateware.axi_lite.RegisterFile` (AXI4-Lite slave ``axil``: descriptor, START, STATUS,
    DMA window, counters); :class:`bpsa.gateware.dma.DmaEngine` (AXI4 master ``mem``); the forward engine
    :class:`bpsa.gateware.engines.conv_forward.ConvForward` (feeder + output-stationary array; generated when the
    configuration has the ``os`` dataflow) and the backward engine
    :class:`bpsa.gateware.engines.conv_backward.ConvBackward` (BP-im2col generators + input-stationary array;
    generated with ``is``); the P buffer (``buf_p_depth`` words of ``cols`` accumulators,
    read-add-write accumulation of every result vector, a clear pass, DMA stores); and the
    controller below. The address generation stays in the engines: the controller only cuts a
    layer into tiles that fit the buffers and moves them.

External memory layout (element sizes: :func:`bpsa.spec.numeric.element_bytes` of ``operand_width`` for
operands, of ``acc_width`` for results; every tensor dense, little endian, from its ADDR_*)
    ========  =====================================  ========================================
    phase     inputs                                 output (ADDR_OUT)
    ========  =====================================  ========================================
    forward   X: N x C x H x W (ADDR_X);             Y blocked: N x KT x OH x OW x cols
              W blocked: KT x C x R x S x cols        (lane j of block t: channel t*cols + j;
              (ADDR_W; KT = ceil(K / cols); lanes     lanes past K hold 0)
              past K hold 0)
    loss      W: K x C x R x S (ADDR_W);             dX: N x C x H x W
              dY: N x K x OH x OW (ADDR_DY)
    gradient  dY: N x K x OH x OW (ADDR_DY);         dW: K x C x R x S
              X: N x C x H x W (ADDR_X)
    FC back-  X: N x C (ADDR_X); W: K x C            dX: N x C, then dW: K x C
    ward      (ADDR_W); dY: N x K (ADDR_DY)
    ========  =====================================  ========================================
    ``OH = (H + 2 pad_h - dil_h (R - 1) - 1) // stride_h + 1`` (and OW likewise).
    :mod:`bpsa.host.driver` lays tensors out this way and back.

Tiling and double buffering (all loops in hardware; a *group* is one engine run)
    Buffers A (X SRAM / buffer A) and B (W buffer / buffer B) are split into two banks of
    half their depth. Group ``g`` is loaded into bank ``g % 2``; while the engine runs it, the
    DMA loads group ``g + 1`` into the other bank, so loads hide behind compute. Within an
    outer *step* the groups' results accumulate in P. When a step's last group has started,
    the controller saves what the step's store needs and goes on at once to the next step,
    loading its first group into the other bank while that last run computes; then it waits
    for the run, stores the finished step's P rows and clears P, and starts the new step. The
    P stores and clears themselves are not overlapped with compute (P has one copy).
    forward: for each image n and output-channel block t (``cols`` channels): clear P, then for
    each group of ``CG`` input channels load X[n, group] and the group's W words and run the
    engine (one image, the group's channels); P accumulates ``Y[n, block, :, :]`` across the
    groups (word ``oh * OW + ow``); store it. ``CG = min(C, X bank // (H W), W bank // (R S))``
    (X bank: ``buf_a_depth / 2 * feeder_bus_width`` elements; W bank ``buf_b_depth / 2``).
    loss: for each image n and block of ``CB`` dX channels: clear P, then for each group of
    ``KG`` output channels load W[group, block] into buffer A (one DMA run per output channel
    unless the block is all of C) and dY[n, group] into buffer B and run the loss on them; P
    accumulates dX[n, block]^T (row c, ``ceil(H W / cols)`` words a row); store one row per
    channel. ``CB = min(C, (buf_a_depth / 2) // (R S), buf_p_depth // ceil(W / cols))``,
    ``KG = min(K, (buf_a_depth / 2) // (CB R S), (buf_b_depth / 2) // (OH OW))``.
    gradient: for each block of ``KB`` output channels and each group of ``CG`` input
    channels: clear P, then for each image n and group of ``KG`` output channels of the block
    load dY[n, group] into A and X[n, channel group] into B and run the gradient; P
    accumulates dW[block, channel group] (row k - block start); store one row per output
    channel. ``KB = min(K, buf_p_depth // ceil(R S / cols))``, ``KG = min(KB, (buf_a_depth /
    2) // (OH OW))``, ``CG = min(C, (buf_b_depth / 2) // (H W), (buf_p_depth // KB) * cols //
    (R S))``.
    FC backward (PHASE 3; with the ``interleaved`` dataflow; H = W = R = S = 1, no padding):
    a fully connected layer ``Y = X W^T`` (batch N, C inputs, K outputs) gets dX and dW in
    one pass of the backward engine's interleaved dataflow. For each input block of ``FIB``
    inputs, for each chunk of ``FNB`` batch rows (a step), for each block of
    ``FOB`` outputs (a group): load dY[chunk, out block] into A, X[chunk, in block] into B
    and W[out block, in block] after it (from word ``FNB FIB`` of the bank) and run; P row
    ``n`` (words from ``n FQ``) accumulates dX[n, in block] over the output blocks, P row
    ``FNB + k`` dW[k, in block] (the engine's drained rows, queued in a FIFO for the
    accumulate pipeline's free cycles) over the chunks. A step stores its dX rows, the block's last step the dW column
    after them. ``FIB = min(C, (P // (K + 1)) cols, max(cols, B bank // 32))`` (rows of
    ``FQ = ceil(FIB / cols)`` P words; a narrow block keeps room for many batch rows and
    outputs a run), ``FOB = min(K, (B bank // FIB) // 2, A bank)``, ``FNB = min(N, A bank //
    FOB, B bank // FIB - FOB, P // FQ - K)``; refused (TOO_LARGE) when ``K >= P``.
    A load is skipped when its bank already holds the same tensor slice (same address and
    length since START).

Row bands (spatial tiling; :mod:`bpsa.plan.tiling` is the Python mirror)
    When a single channel plane does not fit (forward: H W elements in an X bank or OH OW
    words in P; loss: dX of one image in P or a dY plane in a bank; gradient: a dY plane in a
    bank of A or an X plane in a bank of B), the layer is cut into bands of rows. A group's
    band of several (output) channels is loaded as one DMA run per channel; the forward runs
    one channel a group (the X SRAM packs ``feeder_bus_width`` elements a word). forward:
    bands of ``BH`` output rows; each loads its X rows (halo included) and runs as a layer of
    its own with asymmetric padding (the engines' ``pad_h`` / ``pad_bottom``); its Y rows are
    stored at their place. loss: bands of ``BH`` dX rows; each loads the dY rows that reach
    it, ``[lo, hi]``, and runs with the top padding that puts them where the whole layer does.
    gradient: bands of ``BH`` dY rows, added up in P like the groups. Band heights:
    forward ``min(OH, P // OW, (X bank // W - d(R-1) - 1) // s + 1)``; loss ``min(H, (P // C)
    cols // W, s (B bank // OW - 1) - d(R-1))``; gradient ``min(OH, A bank // OW, (B bank //
    W - d(R-1) - 1) // s + 1)``. A layer whose single row band does not fit (a very wide row)
    is refused with TOO_LARGE, and so is a forward / gradient layer that needs bands and pads
    more rows than its dilated kernel reaches (``pad_h > d(R-1)``).

Refusals (``STATUS.ERROR`` with DONE, busy falls, nothing is read or written)
    Checked before any bus traffic, in this order: :class:`AccelError` ``PHASE`` (unknown, or
    a phase whose engine or dataflow is not generated), ``ZERO_SIZE``, ``ZERO_STEP``,
    ``SHAPE`` (FC backward with H, W, R or S not 1, or padding),
    ``KERNEL_TOO_LARGE`` (``dil (R-1) + 1`` larger than the padded input), ``DIM`` (OH or OW
    wider than ``dim_width``), ``TOO_LARGE`` (not even one row band fits, or a band would need a
    padding beyond the kernel's reach; see above), ``ALIGN`` (an address not a
    multiple of its element size), ``WINDOW`` (a tensor of the phase, input or output, not
    inside ``[WINDOW_LO, WINDOW_HI]`` or past 4 GiB). Later failures stop the layer at once:
    ``DMA_BUS | code`` (a bus error response; :class:`bpsa.gateware.dma.DmaError` in the low bits) and
    ``ENGINE | code`` (an engine refused a tile: the low bits are the backward engine's
    :class:`bpsa.gateware.bp_im2col.BPError`, 0 for the forward engine; e.g. a dilated kernel wider than
    ``feeder_pattern_width``).
"""

from amaranth.hdl import Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from bpsa.config import Config
from bpsa.gateware.axi_lite import ADDR_WIDTH, Phase, RegisterFile, axi_lite_signature
from bpsa.gateware.dma import (
    DmaEngine,
    DmaError,
    axi4_signature,
)
from bpsa.gateware.controller.counters import COUNTED, Counters
from bpsa.gateware.controller.interfaces import AccelError
from bpsa.gateware.controller.load_unit import Cache, LoadUnit, Target
from bpsa.gateware.controller.psum_buffer import PsumBuffer
from bpsa.gateware.controller.result_addressing import (BackwardResults, FcDrainResults,
                                                        ForwardResults)
from bpsa.gateware.controller.step_scheduler import StepScheduler
from bpsa.gateware.controller.setup_sequencer import SetupSequencer
from bpsa.gateware.seq_arith import SETUP_WIDTH, ArithOp, SeqMulDiv, alu_signature
from bpsa.plan import setup
from bpsa.spec import regmap
from bpsa.spec.errors import ERROR_DMA_BUS, ERROR_ENGINE
from bpsa.spec.numeric import element_bytes

__all__ = ["AccelError", "Accelerator", "ERROR_DMA_BUS", "ERROR_ENGINE"]

#: Bits of the set-up arithmetic (sizes in elements and bytes).
_W = SETUP_WIDTH




class Pulse:
    """In a ``("set", [...])`` step of the controller's programs: ``signal`` is high in that
    step's cycle (the other items are registered)."""

    def __init__(self, signal):
        self.signal = signal


class Accelerator(wiring.Component):
    """The accelerator top (see the module docstring).

    Members
    -------
    axil : In(axi_lite_signature(12))
        Host register interface (:mod:`bpsa.gateware.axi_lite`; Verilog ports ``axil__*``).
    mem : Out(axi4_signature())
        External memory (:mod:`bpsa.gateware.dma`; Verilog ports ``mem__*``).
    irq : Out(1)
        STATUS.DONE: high from the end of a layer until CLEAR or the next START.
    """

    def __init__(self, config):
        if not isinstance(config, Config):
            self._MustUse__silence = True
            raise TypeError(f"config must be a Config, not {config!r}")
        if not (config.has("os") or config.has("is")):
            self._MustUse__silence = True
            raise ValueError(f"Accelerator needs the 'os' dataflow (forward) or the 'is' "
                             f"dataflow (loss, gradient), not dataflows "
                             f"{list(config.dataflows)!r}")
        self.config = config
        self.has_forward = config.has("os") and config.reserve_registers
        self.has_backward = config.has("is")
        super().__init__({
            "axil": In(axi_lite_signature(ADDR_WIDTH)),
            "mem": Out(axi4_signature()),
            "irq": Out(1),
        })

    # ------------------------------------------------------------------------------------------
    def elaborate(self, platform):
        cfg = self.config
        m = Module()
        R, C, B = cfg.rows, cfg.cols, cfg.feeder_bus_width
        acc_w, op_w = cfg.acc_width, cfg.operand_width
        obs = exact_log2(element_bytes(op_w))
        abs_ = exact_log2(element_bytes(acc_w))
        dim = cfg.dim_width
        paw = exact_log2(cfg.buf_p_depth)

        rf = m.submodules.regs = RegisterFile(cfg)
        wiring.connect(m, wiring.flipped(self.axil), rf.axil)
        dma = m.submodules.dma = DmaEngine(cfg)
        wiring.connect(m, dma.axi, wiring.flipped(self.mem))
        m.d.comb += [dma.window_lo.eq(rf.window_lo), dma.window_hi.eq(rf.window_hi),
                     dma.clear_counters.eq(rf.clear)]
        d = rf.desc

        fwd = bwd = None
        if self.has_forward:
            from bpsa.gateware.engines.conv_forward import ConvForward
            fwd = m.submodules.forward = ConvForward(cfg)
        if self.has_backward:
            from bpsa.gateware.engines.conv_backward import ConvBackward
            from bpsa.gateware.engines.conv_backward import Phase as BwdPhase
            bwd = m.submodules.backward = ConvBackward(cfg)
        has_fc = bwd is not None and cfg.has("interleaved")

        # --- P buffer, fed by the engines' results; counters ---------------------------------
        pbuf = m.submodules.buf_p = PsumBuffer(cfg)
        sched = m.submodules.steps = StepScheduler(cfg)
        p_row = Signal(_W)            # words per P row (result row) of the next run
        row_base = Signal(dim + 1)    # gradient: first output channel of the group
        bank = sched.bank             # buffer half of the next load and run
        ow_reg = Signal(dim)
        fc_o0 = Signal(_W)            # FC: first output (dW row) of the next run's block
        fc_dw_p0 = Signal(paw + 1)    # FC: P word of dW row 0
        kt_rows = Signal(_W)          # row tiles per column block of the next run
        results = []
        if fwd is not None:
            fres = m.submodules.forward_results = ForwardResults(cfg)
            wiring.connect(m, fwd.y, fres.y)
            m.d.comb += fres.ow.eq(ow_reg)
            results.append(fres.acc)
        if bwd is not None:
            bres = m.submodules.backward_results = BackwardResults(cfg)
            wiring.connect(m, bwd.out, bres.out)
            m.d.comb += [bres.start.eq(bwd.start),
                         bres.row_base.eq(row_base), bres.p_row.eq(p_row),
                         bres.kt_rows.eq(kt_rows)]
            results.append(bres.acc)
        # one engine runs at a time: its vectors go to P
        for res in results:
            with m.If(res.valid):
                m.d.comb += [pbuf.acc.valid.eq(1), pbuf.acc.payload.eq(res.payload)]
        if has_fc:
            fcres = m.submodules.fc_results = FcDrainResults(cfg)
            wiring.connect(m, bwd.drain, fcres.drain)
            m.d.comb += [fcres.start.eq(bwd.start),
                         fcres.o0.eq(fc_o0), fcres.kt_rows.eq(kt_rows),
                         fcres.p_row.eq(p_row), fcres.dw_p0.eq(fc_dw_p0), fcres.k.eq(d.k)]
            wiring.connect(m, fcres.fill, pbuf.fill)

        counters = m.submodules.counters = Counters()
        for name in COUNTED:
            m.d.comb += getattr(rf.counters, name).eq(getattr(counters.counts, name))
        m.d.comb += [rf.counters.dma_read_bytes.eq(dma.read_bytes),
                     rf.counters.dma_write_bytes.eq(dma.write_bytes),
                     rf.counters.dma_busy_cycles.eq(dma.busy_cycles)]

        busy = Signal()
        done = Signal()
        err = Signal(8)
        m.d.comb += [rf.busy.eq(busy), rf.done.eq(done), rf.error.eq(err)]
        # irq follows STATUS.DONE: set at the end of a layer, cleared by CLEAR or START
        with m.If(done):
            m.d.sync += self.irq.eq(1)
        with m.Elif(rf.clear | rf.start):
            m.d.sync += self.irq.eq(0)
        m.d.sync += done.eq(0)

        # --- DMA: loads (the load unit) and stores, buffer ports -------------------------------
        load = m.submodules.load = LoadUnit(cfg)
        target = load.target
        m.d.comb += [load.dma_done.eq(dma.done), load.dma_error.eq(dma.error),
                     load.dma.ready.eq(dma.cmd.ready)]
        with m.If(load.dma.valid):
            m.d.comb += [dma.cmd.valid.eq(1), dma.cmd.payload.eq(load.dma.payload)]
        with m.Else():
            m.d.comb += [dma.cmd.valid.eq(sched.dma_valid), dma.cmd.payload.eq(sched.dma_cmd)]
        m.d.comb += [sched.dma_ready.eq(dma.cmd.ready), sched.dma_done.eq(dma.done),
                     sched.dma_error.eq(dma.error)]
        bw = dma.buf_write
        if fwd is not None:
            m.d.comb += [fwd.x_write.addr.eq(bw.addr), fwd.x_write.data.eq(bw.data),
                         fwd.x_write.en.eq(bw.en & (target == Target.FWD_X)),
                         fwd.w_write.addr.eq(bw.addr), fwd.w_write.data.eq(bw.data),
                         fwd.w_write.en.eq(bw.en & (target == Target.FWD_W))]
        if bwd is not None:
            m.d.comb += [bwd.a_write.addr.eq(bw.addr), bwd.a_write.data.eq(bw.data),
                         bwd.a_write.en.eq(bw.en & (target == Target.BWD_A)),
                         bwd.b_write.addr.eq(bw.addr), bwd.b_write.data.eq(bw.data),
                         bwd.b_write.en.eq(bw.en & (target == Target.BWD_B))]
        to_a = (target == Target.FWD_X) | (target == Target.BWD_A)
        m.d.comb += [counters.clear.eq(rf.clear), counters.busy.eq(busy),
                     counters.dma_busy.eq(dma.busy),
                     counters.a_write.eq(bw.en & to_a), counters.b_write.eq(bw.en & ~to_a),
                     counters.p_read.eq(pbuf.read_event), counters.p_write.eq(pbuf.write_event),
                     pbuf.read_addr.eq(dma.buf_read.addr),
                     pbuf.read_en.eq(dma.buf_read.en & sched.storing),
                     dma.buf_read.data.eq(pbuf.read_data.as_value())]

        # --- the controller ---------------------------------------------------------------------
        # the layer's tile plan (bpsa.plan.setup), from the set-up sequencer; the loops'
        # own registers below
        phases = (([regmap.Phase.FORWARD] if fwd is not None else [])
                  + ([regmap.Phase.LOSS, regmap.Phase.GRADIENT] if bwd is not None else [])
                  + ([regmap.Phase.FC_BACKWARD] if has_fc else []))
        seq = m.submodules.setup = SetupSequencer(cfg, phases)
        alu = m.submodules.setup_alu = SeqMulDiv(_W)
        req = alu_signature(_W).create(path=("loop_alu",))    # the loops' requests
        m.d.comb += [seq.desc.valid.eq(rf.start), seq.desc.payload.eq(rf.desc),
                     seq.window_lo.eq(rf.window_lo), seq.window_hi.eq(rf.window_hi),
                     seq.plan.ready.eq(1),
                     alu.start.eq(seq.alu.start | req.start),
                     alu.op.eq(Mux(seq.busy, seq.alu.op, req.op)),
                     alu.a.eq(Mux(seq.busy, seq.alu.a, req.a)),
                     alu.b.eq(Mux(seq.busy, seq.alu.b, req.b))]
        for name in ("busy", "done", "result", "overflow"):
            m.d.comb += [getattr(seq.alu, name).eq(getattr(alu, name)),
                         getattr(req, name).eq(getattr(alu, name))]
        plan = seq.plan.payload
        r = {name: getattr(plan, name) for name in setup.PLAN_REGISTERS}
        # the loops' registers; nb and np start from the plan's (LOSS_INIT), t, u and rowlen
        # are scratch: no other plan register is shadowed
        r.update({name: Signal(_W, name=name) for name in (
            "nb", "np", "t", "u", "rowlen", "len_a", "len_b", "len_x", "yoff", "blen", "dyoff",
            "eohow", "kend")})
        # row bands (bpsa.plan.tiling): this band's rows, the engine's sub-layer
        r.update({name: Signal(dim + 2, name=name) for name in (
            "obh", "y0", "yend", "eh", "eoh", "pt", "pb", "lo", "hi")})
        banded = plan.banded
        # FC: the next step clears the dW rows
        clear_dw = Signal()
        ptr = {name: Signal(33, name=f"ptr_{name}") for name in (
            "xn", "xg", "x", "w", "wk", "dy", "dyn", "out", "outn", "outg", "st", "st2",
            "dwg")}
        loop = {name: Signal(_W, name=f"loop_{name}") for name in (
            "n", "c0", "k0", "kti", "o0", "row", "pword", "kb0")}

        phase = d.phase
        is_fwd = Signal()
        is_loss = Signal()
        is_grad = Signal()
        is_fc = Signal()
        m.d.comb += [is_fwd.eq(phase == Phase.FORWARD), is_loss.eq(phase == Phase.LOSS),
                     is_grad.eq(phase == Phase.GRADIENT), is_fc.eq(phase == Phase.FC_BACKWARD)]

        def mn(*vals):
            out = vals[0]
            for v in vals[1:]:
                out = Mux(v < out, v, out)
            return out

        # engine descriptors (held while a run is in flight)
        grp_c = Signal(_W)    # channels of the current group
        grp_k = Signal(_W)    # output channels of the current group
        grp_n = Signal(_W)    # FC: batch rows of the current group
        if fwd is not None:
            lay = fwd.layer
            m.d.comb += [lay.batch.eq(1), lay.channels.eq(grp_c), lay.height.eq(r["eh"]),
                         lay.width.eq(d.w), lay.kernel_h.eq(d.r), lay.kernel_w.eq(d.s),
                         lay.stride_h.eq(d.stride_h), lay.stride_w.eq(d.stride_w),
                         lay.pad_h.eq(r["pt"]), lay.pad_bottom.eq(r["pb"]),
                         lay.pad_w.eq(d.pad_w), lay.dil_h.eq(d.dil_h),
                         lay.dil_w.eq(d.dil_w), lay.out_channels.eq(grp_k),
                         lay.x_base.eq(bank * (cfg.buf_a_depth // 2 * B)),
                         lay.w_base.eq(bank * (cfg.buf_b_depth // 2))]
        if bwd is not None:
            bl = bwd.layer
            m.d.comb += [bl.phase.eq(Mux(is_fc, BwdPhase.FC,
                                         Mux(is_grad, BwdPhase.GRADIENT, BwdPhase.LOSS))),
                         bl.baseline.eq(0), bl.n.eq(Mux(is_fc, grp_n, 1)), bl.c.eq(grp_c),
                         bl.h.eq(r["eh"]),
                         bl.w.eq(d.w), bl.k.eq(grp_k), bl.r.eq(d.r), bl.s.eq(d.s),
                         bl.oh.eq(r["eoh"]), bl.ow.eq(r["ow"]), bl.stride_h.eq(d.stride_h),
                         bl.stride_w.eq(d.stride_w), bl.pad_h.eq(r["pt"]),
                         bl.pad_bottom.eq(r["pb"]),
                         bl.pad_w.eq(d.pad_w), bl.dil_h.eq(d.dil_h), bl.dil_w.eq(d.dil_w),
                         bl.src_base_a.eq(0), bl.src_base_b.eq(Mux(is_fc, r["fwoff"], 0)),
                         bl.base_a.eq(bank * (cfg.buf_a_depth // 2)),
                         bl.base_b.eq(bank * (cfg.buf_b_depth // 2))]

        # the phase's engine runs the scheduler's runs
        engines = [(eng, is_fwd if eng is fwd else ~is_fwd) for eng in (fwd, bwd)
                   if eng is not None]
        for eng, active in engines:
            m.d.comb += eng.start.eq(sched.eng_start & active)
            with m.If(active):
                m.d.comb += [sched.eng_busy.eq(eng.busy), sched.eng_error.eq(eng.error)]
                if eng is bwd:
                    m.d.comb += sched.eng_code.eq(bwd.error_code.as_value())
        m.d.comb += [pbuf.clear.eq(sched.p_clear), pbuf.clear_words.eq(sched.p_clear_words),
                     sched.p_clear_last.eq(pbuf.clear_last), sched.p_busy.eq(pbuf.busy),
                     sched.clear_words.eq(r["np"])]

        # engine status, summed into the counters when a run ends
        run_busy = Signal()
        m.d.comb += [run_busy.eq(Const(0, 1) | (fwd.busy if fwd is not None else 0)
                                 | (bwd.busy if bwd is not None else 0)),
                     counters.compute.eq(run_busy)]
        for eng in (fwd, bwd):
            if eng is None:
                continue
            was_busy = Signal(name=f"{'fwd' if eng is fwd else 'bwd'}_was_busy")
            m.d.sync += was_busy.eq(eng.busy)
            s = counters.run_stats
            with m.If(was_busy & ~eng.busy):
                m.d.comb += counters.run_done.eq(1)
                if eng is fwd:
                    m.d.comb += [s.fired.eq(fwd.fired), s.gated.eq(fwd.gated),
                                 s.stall_cycles.eq(fwd.stall_cycles),
                                 s.a_words.eq(fwd.words_read), s.b_words.eq(fwd.w_words_read)]
                else:
                    m.d.comb += [s.fired.eq(bwd.fired), s.gated.eq(bwd.gated),
                                 s.a_words.eq(bwd.a_words), s.b_words.eq(bwd.b_words)]

        with m.FSM(name="ctrl") as fsm:

            def program(name, steps, then):
                """FSM states running ``steps`` in order, then going to ``then``. A step is
                ``("mul"|"div", dst, a, b)``, ``("set", [statements])``, ``("check",
                condition, error)`` or ``("skip", condition, n)`` (skip the next ``n`` steps
                when ``condition`` holds)."""
                names = [f"{name}_{i}" for i in range(len(steps))] + [then]
                for i, step in enumerate(steps):
                    nxt = names[i + 1]
                    kind = step[0]
                    if kind in ("mul", "div"):
                        _, dst, a, b = step
                        with m.State(names[i]):
                            m.d.comb += [req.start.eq(~req.busy & ~req.done), req.a.eq(a),
                                         req.b.eq(b),
                                         req.op.eq(ArithOp.MUL if kind == "mul"
                                                   else ArithOp.DIV)]
                            with m.If(req.done):
                                m.d.sync += dst.eq(req.result)
                                with m.If(req.overflow):
                                    fail(AccelError.TOO_LARGE)
                                with m.Else():
                                    m.next = nxt
                    elif kind == "set":
                        with m.State(names[i]):
                            m.d.sync += [s for s in step[1] if not isinstance(s, Pulse)]
                            m.d.comb += [s.signal.eq(1) for s in step[1] if isinstance(s, Pulse)]
                            m.next = nxt
                    elif kind == "skip":
                        _, cond, count = step
                        with m.State(names[i]):
                            with m.If(cond):
                                m.next = names[i + 1 + count]
                            with m.Else():
                                m.next = nxt
                    else:
                        _, cond, code = step
                        with m.State(names[i]):
                            with m.If(cond):
                                fail(code)
                            with m.Else():
                                m.next = nxt

            def fail(code):
                m.d.sync += [err.eq(code), done.eq(1)]
                m.next = "IDLE"

            with m.State("IDLE"):
                with m.If(rf.start):
                    m.d.sync += err.eq(0)
                    m.d.comb += [load.invalidate.eq(1), sched.layer_start.eq(1)]
                    m.next = "SETUP"
            # the set-up sequencer runs the checks, geometry and tiling (bpsa.plan.setup)
            inits = ([(Phase.FORWARD, "FWD_INIT")] if fwd is not None else []) + \
                ([(Phase.LOSS, "LOSS_INIT"), (Phase.GRADIENT, "GRAD_INIT")]
                 if bwd is not None else []) + \
                ([(Phase.FC_BACKWARD, "FC_INIT")] if has_fc else [])
            with m.State("SETUP"):
                with m.If(seq.plan.valid):
                    m.d.sync += ow_reg.eq(plan.ow)
                    with m.If(plan.error != AccelError.NONE):
                        fail(plan.error)
                    for ph, state in inits:
                        with m.Elif(phase.as_value() == ph.value):
                            m.next = state

            # --- DMA helpers -------------------------------------------------------------------
            def dma_load(name, tgt, cache_key, addr, length, lanes, then, runs=None, offset=0):
                """States ``name`` (hand the load unit the load into bank ``bank``; it skips a
                slice the bank holds already) and ``name_WAIT``. ``length`` elements from
                ``addr``; with ``runs = (count, run_len, stride)``, ``count`` runs of ``run_len``
                elements ``stride`` bytes apart in memory, packed one after the other into the
                bank (``length`` is then their total, which names the slice)."""
                count, run_len, stride = runs if runs is not None else (1, length, 0)
                lp = load.load.payload
                with m.State(name):
                    m.d.comb += [load.load.valid.eq(1), lp.target.eq(tgt),
                                 lp.cache.eq(Cache[cache_key.upper()]), lp.bank.eq(bank),
                                 lp.offset.eq(offset), lp.addr.eq(addr), lp.length.eq(length),
                                 lp.lanes.eq(lanes), lp.count.eq(count),
                                 lp.run_len.eq(run_len), lp.stride.eq(stride)]
                    with m.If(load.load.ready & load.hit):
                        m.next = then
                    with m.Elif(load.load.ready):
                        m.next = f"{name}_WAIT"
                with m.State(f"{name}_WAIT"):
                    with m.If(load.done):
                        with m.If(load.error != DmaError.NONE):
                            fail(ERROR_DMA_BUS | load.error.as_value())
                        with m.Else():
                            m.next = then

            def finish(name):
                with m.State(name):
                    m.d.sync += done.eq(1)
                    m.next = "IDLE"

            # --- row bands -------------------------------------------------------------------------
            def out_band(name, then):
                """Band of output rows ``[o0, o0 + obh)`` (forward, gradient): the X rows it
                loads (``y0``, ``eh``; ``yoff = y0 W``, ``blen = eh W``) and the engine's
                padding (bpsa.plan.tiling.bands)."""
                p = d.pad_h
                with m.State(name):
                    m.d.sync += r["obh"].eq(mn(r["bh"], r["oh"] - loop["o0"]))
                    with m.If(banded):
                        m.next = f"{name}_B_0"
                    with m.Else():
                        m.d.sync += [r["y0"].eq(0), r["eh"].eq(d.h), r["pt"].eq(p),
                                     r["pb"].eq(p), r["yoff"].eq(0), r["blen"].eq(r["hw"])]
                        m.next = then
                program(f"{name}_B", [
                    ("mul", r["t"], loop["o0"], d.stride_h),
                    ("mul", r["u"], r["obh"] - 1, d.stride_h),
                    ("set", [r["y0"].eq(Mux(r["t"] > p, r["t"] - p, 0)),
                             r["pt"].eq(Mux(r["t"] > p, 0, p - r["t"])),
                             r["yend"].eq(r["t"] + r["u"] + r["drh"] + 1 - p)]),
                    ("set", [r["eh"].eq(mn(d.h, r["yend"]) - r["y0"]),
                             r["pb"].eq(Mux(r["yend"] > d.h, r["yend"] - d.h, 0))]),
                    ("mul", r["yoff"], r["y0"], d.w),
                    ("mul", r["blen"], r["eh"], d.w),
                ], then)

            # --- steps (the step scheduler): the groups of a step add up in P; P is stored and
            # cleared between steps. The next step's first loads are issued while the step's
            # last group runs.
            def step_run(prefix):
                """``prefix_RUN_WAIT``: the scheduler runs the group just loaded (storing and
                clearing P first at a new step), then ``prefix_NEXT``; ``prefix_LAST``: it
                stores the layer's last step, then ``DONE``."""
                with m.State(f"{prefix}_RUN_WAIT"):
                    m.d.comb += sched.run.eq(1)
                    with m.If(sched.fail):
                        fail(sched.fail_code)
                    with m.Elif(sched.started):
                        m.next = f"{prefix}_NEXT"
                with m.State(f"{prefix}_LAST"):
                    m.d.comb += sched.last.eq(1)
                    with m.If(sched.fail):
                        fail(sched.fail_code)
                    with m.Elif(sched.finished):
                        m.next = "DONE"

            def save_step(rows, length, nb, stride, addr):
                """The step whose last group just started: what its store needs."""
                s = sched.save_step
                return [sched.save.eq(1), s.rows.eq(rows), s.length.eq(length), s.nb.eq(nb),
                        s.stride.eq(stride), s.addr.eq(addr)]

            # --- forward loops -------------------------------------------------------------------
            if fwd is not None:
                with m.State("FWD_INIT"):
                    m.d.sync += [loop["n"].eq(0), loop["kti"].eq(0), loop["k0"].eq(0),
                                 ptr["xn"].eq(d.addr_x), ptr["wk"].eq(d.addr_w),
                                 ptr["out"].eq(d.addr_out)]
                    m.next = "FWD_OUTER"
                with m.State("FWD_OUTER"):       # image n, output-channel block kti
                    m.d.sync += [loop["o0"].eq(0), grp_k.eq(mn(C, d.k - loop["k0"]))]
                    m.next = "FWD_BAND"
                out_band("FWD_BAND", "FWD_BANDP_0")
                program("FWD_BANDP", [           # step (n, kti, band o0): P words, first group
                    ("mul", r["np"], r["obh"], r["ow"]),
                    ("mul", r["rowlen"], r["np"], C),
                    ("set", [loop["c0"].eq(0), ptr["x"].eq(ptr["xn"] + (r["yoff"] << obs)),
                             ptr["w"].eq(ptr["wk"]), Pulse(sched.new_step)]),
                ], "FWD_GROUP_0")
                program("FWD_GROUP", [
                    ("set", [grp_c.eq(mn(r["cg"], d.c - loop["c0"]))]),
                    ("mul", r["len_a"], r["blen"], grp_c),
                    ("mul", r["t"], r["rs"], grp_c),
                    ("mul", r["len_b"], r["t"], C),
                ], "FWD_LOAD_X")
                dma_load("FWD_LOAD_X", Target.FWD_X, "a", ptr["x"], r["len_a"], B,
                         "FWD_LOAD_W")
                dma_load("FWD_LOAD_W", Target.FWD_W, "b", ptr["w"], r["len_b"], C,
                         "FWD_RUN_WAIT")
                step_run("FWD")
                with m.State("FWD_NEXT"):
                    m.d.sync += [loop["c0"].eq(loop["c0"] + grp_c),
                                 ptr["x"].eq(ptr["x"] + (Mux(banded, r["hw"], r["len_a"]) << obs)),
                                 ptr["w"].eq(ptr["w"] + (r["len_b"] << obs))]
                    with m.If(loop["c0"] + grp_c < d.c):
                        m.next = "FWD_GROUP_0"
                    with m.Else():                # the step's last group runs: next step
                        m.d.comb += save_step(1, r["rowlen"], 0, 0, ptr["out"])
                        m.d.sync += [ptr["out"].eq(ptr["out"] + (r["rowlen"] << abs_))]
                        with m.If(loop["o0"] + r["obh"] < r["oh"]):
                            m.d.sync += loop["o0"].eq(loop["o0"] + r["obh"])
                            m.next = "FWD_BAND"
                        with m.Elif(loop["kti"] + 1 < r["kt"]):
                            m.d.sync += [loop["kti"].eq(loop["kti"] + 1),
                                         loop["k0"].eq(loop["k0"] + C),
                                         ptr["wk"].eq(ptr["w"] + (r["len_b"] << obs))]
                            m.next = "FWD_OUTER"
                        with m.Elif(loop["n"] + 1 < d.n):
                            m.d.sync += [loop["kti"].eq(0), loop["k0"].eq(0),
                                         loop["n"].eq(loop["n"] + 1),
                                         ptr["xn"].eq(ptr["xn"] + (r["chw"] << obs)),
                                         ptr["wk"].eq(d.addr_w)]
                            m.next = "FWD_OUTER"
                        with m.Else():
                            m.d.comb += sched.final.eq(1)
                            m.next = "FWD_LAST"

            # --- loss loops ----------------------------------------------------------------------
            if bwd is not None:
                with m.State("LOSS_INIT"):
                    m.d.sync += [r["nb"].eq(plan.nb), r["np"].eq(plan.np)]
                    m.d.sync += [loop["n"].eq(0), ptr["dyn"].eq(d.addr_dy),
                                 ptr["outn"].eq(d.addr_out), row_base.eq(0)]
                    m.next = "LOSS_OUTER"
                with m.State("LOSS_OUTER"):      # image n
                    m.d.sync += loop["o0"].eq(0)
                    m.next = "LOSS_BAND"
                with m.State("LOSS_BAND"):       # band of dX rows [o0, o0 + obh)
                    m.d.sync += [r["obh"].eq(mn(r["bh"], d.h - loop["o0"])), loop["c0"].eq(0)]
                    with m.If(banded):
                        m.next = "LOSS_BAND_B_0"
                    with m.Else():
                        m.d.sync += [r["eh"].eq(d.h), r["eoh"].eq(r["oh"]), r["pt"].eq(d.pad_h),
                                     r["pb"].eq(d.pad_h), r["dyoff"].eq(0), r["yoff"].eq(0),
                                     r["blen"].eq(r["hw"]), r["eohow"].eq(r["ohow"])]
                        m.next = "LOSS_BANDP_0"
                h0, hb, p = loop["o0"], r["obh"], d.pad_h
                program("LOSS_BAND_B", [         # the dY rows [lo, hi] it needs (bpsa.plan.tiling)
                    ("set", [r["t"].eq(Mux(h0 + p > r["drh"], h0 + p - r["drh"], 0)),
                             r["eh"].eq(hb)]),
                    ("div", r["lo"], r["t"], d.stride_h),
                    ("div", r["hi"], h0 + hb - 1 + p, d.stride_h),
                    ("set", [r["hi"].eq(mn(r["hi"], r["oh"] - 1))]),
                    ("mul", r["t"], r["lo"], d.stride_h),
                    ("mul", r["u"], r["hi"], d.stride_h),
                    ("set", [r["pt"].eq(p + h0 - r["t"]), r["eoh"].eq(r["hi"] - r["lo"] + 1),
                             r["pb"].eq(Mux(r["u"] + r["drh"] + 1 > p + h0 + hb,
                                            r["u"] + r["drh"] + 1 - (p + h0 + hb), 0))]),
                    ("mul", r["dyoff"], r["lo"], r["ow"]),
                    ("mul", r["eohow"], r["eoh"], r["ow"]),
                    ("mul", r["yoff"], h0, d.w),
                    ("mul", r["blen"], hb, d.w),
                    ("div", r["nb"], r["blen"] + (C - 1), C),
                    ("mul", r["np"], r["cg"], r["nb"]),
                ], "LOSS_BANDP_0")
                program("LOSS_BANDP", [          # step (n, band o0, dX channel block c0)
                    ("set", [grp_c.eq(mn(r["cg"], d.c - loop["c0"]))]),
                    ("mul", r["t"], loop["c0"], r["hw"]),
                    ("mul", r["u"], loop["c0"], r["rs"]),
                    ("set", [loop["k0"].eq(0), ptr["w"].eq(d.addr_w + (r["u"] << obs)),
                             p_row.eq(r["nb"]), Pulse(sched.new_step),
                             ptr["out"].eq(ptr["outn"] + ((r["t"] + r["yoff"]) << abs_))]),
                ], "LOSS_GROUP_0")
                program("LOSS_GROUP", [
                    ("set", [grp_k.eq(mn(r["kg"], d.k - loop["k0"]))]),
                    ("mul", r["u"], r["rs"], grp_c),
                    ("mul", r["len_a"], r["u"], grp_k),
                    ("mul", r["len_x"], r["crs"], grp_k),
                    ("mul", r["len_b"], r["eohow"], grp_k),
                    ("mul", r["t"], r["rs"], grp_k),
                    ("div", kt_rows, r["t"] + (R - 1), R),
                    ("mul", r["t"], r["ohow"], loop["k0"]),
                    ("set", [ptr["dy"].eq(ptr["dyn"] + ((r["t"] + r["dyoff"]) << obs))]),
                ], "LOSS_LOAD_A")
                # W[group, block]: one run per output channel unless the block is all of C
                all_c = grp_c == d.c
                dma_load("LOSS_LOAD_A", Target.BWD_A, "a", ptr["w"], r["len_a"], 1,
                         "LOSS_LOAD_B", runs=(Mux(all_c, 1, grp_k), Mux(all_c, r["len_a"], r["u"]),
                                              r["crs"] << obs))
                dma_load("LOSS_LOAD_B", Target.BWD_B, "b", ptr["dy"], r["len_b"], 1,
                         "LOSS_RUN_WAIT", runs=(Mux(banded, grp_k, 1),
                                                Mux(banded, r["eohow"], r["len_b"]),
                                                r["ohow"] << obs))
                step_run("LOSS")
                with m.State("LOSS_NEXT"):
                    m.d.sync += [loop["k0"].eq(loop["k0"] + grp_k),
                                 ptr["w"].eq(ptr["w"] + (r["len_x"] << obs))]
                    with m.If(loop["k0"] + grp_k < d.k):
                        m.next = "LOSS_GROUP_0"
                    with m.Else():                # the step's last group runs: next step
                        m.d.comb += save_step(grp_c, r["blen"], r["nb"], r["hw"] << abs_,
                                              ptr["out"])
                        with m.If(loop["c0"] + grp_c < d.c):
                            m.d.sync += loop["c0"].eq(loop["c0"] + grp_c)
                            m.next = "LOSS_BANDP_0"
                        with m.Elif(loop["o0"] + r["obh"] < d.h):
                            m.d.sync += loop["o0"].eq(loop["o0"] + r["obh"])
                            m.next = "LOSS_BAND"
                        with m.Elif(loop["n"] + 1 < d.n):
                            m.d.sync += [loop["n"].eq(loop["n"] + 1),
                                         ptr["dyn"].eq(ptr["dyn"] + (r["kohow"] << obs)),
                                         ptr["outn"].eq(ptr["outn"] + (r["chw"] << abs_))]
                            m.next = "LOSS_OUTER"
                        with m.Else():
                            m.d.comb += sched.final.eq(1)
                            m.next = "LOSS_LAST"

                # --- gradient loops --------------------------------------------------------------
                with m.State("GRAD_INIT"):
                    m.d.sync += [loop["kb0"].eq(0)]
                    m.next = "GRAD_KBLK_0"
                program("GRAD_KBLK", [           # output channels [kb0, kend)
                    ("set", [r["kend"].eq(mn(loop["kb0"] + r["kb"], d.k)), loop["c0"].eq(0),
                             ptr["xg"].eq(d.addr_x)]),
                    ("mul", r["t"], loop["kb0"], r["crs"]),
                    ("set", [ptr["outg"].eq(d.addr_out + (r["t"] << abs_))]),
                ], "GRAD_OUTER_0")
                program("GRAD_OUTER", [          # step: output block kb0, channel group c0
                    ("set", [grp_c.eq(mn(r["cg"], d.c - loop["c0"]))]),
                    ("mul", r["rowlen"], r["rs"], grp_c),
                    ("div", r["nb"], r["rowlen"] + (C - 1), C),
                    ("mul", r["np"], r["kend"] - loop["kb0"], r["nb"]),
                    ("mul", r["len_x"], r["hw"], grp_c),
                    ("set", [p_row.eq(r["nb"]), loop["n"].eq(0), ptr["dyn"].eq(d.addr_dy),
                             ptr["xn"].eq(ptr["xg"]), Pulse(sched.new_step)]),
                ], "GRAD_IMAGE")
                with m.State("GRAD_IMAGE"):      # image n
                    m.d.sync += loop["o0"].eq(0)
                    m.next = "GRAD_BAND"
                out_band("GRAD_BAND", "GRAD_BANDP_0")
                program("GRAD_BANDP", [          # band of dY rows [o0, o0 + obh)
                    ("mul", r["t"], r["obh"] - 1, d.stride_h),
                    ("mul", r["t"], r["wdp1"], r["t"] + 1),
                    ("div", kt_rows, r["t"] + (R - 1), R),
                    ("mul", r["eohow"], r["obh"], r["ow"]),
                    ("mul", r["dyoff"], loop["o0"], r["ow"]),
                    ("mul", r["len_b"], r["blen"], grp_c),
                    ("set", [r["eoh"].eq(r["obh"]), loop["k0"].eq(loop["kb0"]),
                             ptr["x"].eq(ptr["xn"] + (r["yoff"] << obs))]),
                ], "GRAD_GROUP_0")
                program("GRAD_GROUP", [          # output-channel group k0
                    ("set", [grp_k.eq(mn(r["kg"], r["kend"] - loop["k0"])),
                             row_base.eq(loop["k0"] - loop["kb0"])]),
                    ("mul", r["len_a"], r["eohow"], grp_k),
                    ("mul", r["t"], r["ohow"], loop["k0"]),
                    ("set", [ptr["dy"].eq(ptr["dyn"] + ((r["t"] + r["dyoff"]) << obs))]),
                ], "GRAD_LOAD_A")
                dma_load("GRAD_LOAD_A", Target.BWD_A, "a", ptr["dy"], r["len_a"], 1,
                         "GRAD_LOAD_B", runs=(Mux(banded, grp_k, 1),
                                              Mux(banded, r["eohow"], r["len_a"]),
                                              r["ohow"] << obs))
                dma_load("GRAD_LOAD_B", Target.BWD_B, "b", ptr["x"], r["len_b"], 1,
                         "GRAD_RUN_WAIT", runs=(Mux(banded, grp_c, 1),
                                                Mux(banded, r["blen"], r["len_b"]),
                                                r["hw"] << obs))
                step_run("GRAD")
                with m.State("GRAD_NEXT"):
                    with m.If(loop["k0"] + grp_k < r["kend"]):
                        m.d.sync += loop["k0"].eq(loop["k0"] + grp_k)
                        m.next = "GRAD_GROUP_0"
                    with m.Elif(loop["o0"] + r["obh"] < r["oh"]):
                        m.d.sync += loop["o0"].eq(loop["o0"] + r["obh"])
                        m.next = "GRAD_BAND"
                    with m.Elif(loop["n"] + 1 < d.n):
                        m.d.sync += [loop["n"].eq(loop["n"] + 1),
                                     ptr["dyn"].eq(ptr["dyn"] + (r["kohow"] << obs)),
                                     ptr["xn"].eq(ptr["xn"] + (r["chw"] << obs))]
                        m.next = "GRAD_IMAGE"
                    with m.Else():                # the step's last group runs: next step
                        m.d.comb += save_step(r["kend"] - loop["kb0"], r["rowlen"], r["nb"],
                                              r["crs"] << abs_, ptr["outg"])
                        with m.If(loop["c0"] + grp_c < d.c):
                            m.d.sync += [loop["c0"].eq(loop["c0"] + grp_c),
                                         ptr["xg"].eq(ptr["xg"] + (r["len_x"] << obs)),
                                         ptr["outg"].eq(ptr["outg"] + (r["rowlen"] << abs_))]
                            m.next = "GRAD_OUTER_0"
                        with m.Elif(r["kend"] < d.k):
                            m.d.sync += loop["kb0"].eq(r["kend"])
                            m.next = "GRAD_KBLK_0"
                        with m.Else():
                            m.d.comb += sched.final.eq(1)
                            m.next = "GRAD_LAST"

            # --- FC backward loops (interleaved): input block c0 (a step per batch chunk n),
            # output blocks k0 (the groups); dX rows add up over the output blocks, the input
            # block's dW column over the batch chunks.
            if has_fc:
                with m.State("FC_INIT"):
                    m.d.sync += [loop["c0"].eq(0), ptr["outg"].eq(d.addr_out),
                                 ptr["dwg"].eq(d.addr_out + (r["kohow"] << abs_)),
                                 fc_dw_p0.eq(r["fnb"]), row_base.eq(0), p_row.eq(r["fq"]),
]
                    m.next = "FC_IB"
                with m.State("FC_IB"):           # input block c0
                    m.d.sync += [grp_c.eq(mn(r["fib"], d.c - loop["c0"])), loop["n"].eq(0),
                                 ptr["dyn"].eq(d.addr_dy),
                                 ptr["xn"].eq(d.addr_x + (loop["c0"] << obs)),
                                 ptr["outn"].eq(ptr["outg"]), clear_dw.eq(1)]
                    m.next = "FC_CHUNK_0"
                program("FC_CHUNK", [            # step: batch rows [n, n + grp_n)
                    ("set", [grp_n.eq(mn(r["fnb"], d.n - loop["n"])), loop["k0"].eq(0)]),
                    ("mul", r["np"], r["fnb"] + Mux(clear_dw, d.k, 0), r["fq"]),
                    ("set", [clear_dw.eq(0), ptr["dy"].eq(ptr["dyn"]),
                             ptr["w"].eq(d.addr_w + (loop["c0"] << obs)),
                             Pulse(sched.new_step)]),
                    ("mul", r["len_x"], grp_n, grp_c),
                    ("mul", r["u"], grp_n, d.k),
                    ("mul", r["rowlen"], grp_n, d.c),
                ], "FC_GROUP_0")
                program("FC_GROUP", [            # output block k0
                    ("set", [grp_k.eq(mn(r["fob"], d.k - loop["k0"])), fc_o0.eq(loop["k0"])]),
                    ("div", kt_rows, grp_k + (R - 1), R),      # output tiles of the run
                    ("mul", r["len_a"], grp_n, grp_k),
                    ("mul", r["len_b"], grp_k, grp_c),
                    ("mul", r["t"], grp_k, d.c),
                ], "FC_LOAD_DY")
                # one DMA run per row, or one for the whole block when its rows are whole
                all_k, all_c = grp_k == d.k, grp_c == d.c
                dma_load("FC_LOAD_DY", Target.BWD_A, "a", ptr["dy"], r["len_a"], 1,
                         "FC_LOAD_X", runs=(Mux(all_k, 1, grp_n), Mux(all_k, r["len_a"], grp_k),
                                            d.k << obs))
                dma_load("FC_LOAD_X", Target.BWD_B, "b", ptr["xn"], r["len_x"], 1,
                         "FC_LOAD_W", runs=(Mux(all_c, 1, grp_n), Mux(all_c, r["len_x"], grp_c),
                                            d.c << obs))
                dma_load("FC_LOAD_W", Target.BWD_B, "w", ptr["w"], r["len_b"], 1,
                         "FC_RUN_WAIT", runs=(Mux(all_c, 1, grp_k), Mux(all_c, r["len_b"], grp_c),
                                              d.c << obs), offset=r["fwoff"])
                step_run("FC")
                with m.State("FC_NEXT"):
                    m.d.sync += [loop["k0"].eq(loop["k0"] + grp_k),
                                 ptr["dy"].eq(ptr["dy"] + (grp_k << obs)),
                                 ptr["w"].eq(ptr["w"] + (r["t"] << obs))]
                    with m.If(loop["k0"] + grp_k < d.k):
                        m.next = "FC_GROUP_0"
                    with m.Else():                # the step's last group runs: next step
                        # dX rows [n, n + grp_n) of the input block
                        m.d.comb += save_step(grp_n, grp_c, r["fq"], d.c << abs_, ptr["outn"])
                        with m.If(loop["n"] + grp_n < d.n):
                            m.d.sync += [loop["n"].eq(loop["n"] + grp_n),
                                         ptr["dyn"].eq(ptr["dyn"] + (r["u"] << obs)),
                                         ptr["xn"].eq(ptr["xn"] + (r["rowlen"] << obs)),
                                         ptr["outn"].eq(ptr["outn"] + (r["rowlen"] << abs_))]
                            m.next = "FC_CHUNK_0"
                        with m.Else():            # ... and the block's dW column after it
                            s2 = sched.save2_step
                            m.d.comb += [sched.save2.eq(1), s2.rows.eq(d.k),
                                         s2.p0.eq(r["fdw0"]), s2.addr.eq(ptr["dwg"])]
                            m.d.sync += [ptr["dwg"].eq(ptr["dwg"] + (grp_c << abs_)),
                                         ptr["outg"].eq(ptr["outg"] + (grp_c << abs_))]
                            with m.If(loop["c0"] + grp_c < d.c):
                                m.d.sync += loop["c0"].eq(loop["c0"] + grp_c)
                                m.next = "FC_IB"
                            with m.Else():
                                m.d.comb += sched.final.eq(1)
                                m.next = "FC_LAST"
            finish("DONE")
        m.d.comb += busy.eq(~fsm.ongoing("IDLE"))
        return m

