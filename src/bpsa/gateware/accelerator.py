"""The whole accelerator: host registers, DMA, the compute engines, the partial-sum buffer and
the layer controller.

Blocks
    :class:`bpsa.gateware.bus.axi_lite.RegisterFile` (AXI4-Lite slave ``axil``: PROG_ADDR /
    PROG_WORDS, START, STATUS, DMA window, counters); :class:`bpsa.gateware.bus.dma.DmaEngine` (AXI4
    master ``mem``); the fetch unit and the dispatcher
    (:mod:`bpsa.gateware.control.fetch`, :mod:`bpsa.gateware.control.dispatcher`: the
    layer's program, :mod:`bpsa.spec.isa`);
    **one** :class:`bpsa.gateware.array.systolic.SystolicArray` with every generated dataflow, driven by
    the front end of the running phase (:func:`bpsa.gateware.array.systolic.share_array`): the
    channel-first front end :class:`bpsa.gateware.frontends.channel_first.channel_first.ChannelFirst`
    (weight-stationary; generated with ``forward_frontends`` ``channel_first``; it reads W
    through the forward engine's W buffer) for a forward in MODE 2, the
    forward engine :class:`bpsa.gateware.frontends.conv_forward.ConvForward` (feeder, output-
    stationary; generated when the configuration has the ``os`` dataflow; with the
    ``zero_free`` backward mode it also hosts the zero-free loss and gradient walkers) for the
    forward pass and the zero-free phases, and the
    backward engine :class:`bpsa.gateware.frontends.bp_im2col.conv_backward.ConvBackward` (BP-im2col generators,
    input-stationary, and the interleaved FC backward; generated with the ``bp_im2col``
    backward mode, which needs ``is``) for the rest; the P buffer (``buf_p_depth`` words of
    ``cols`` accumulators, read-add-write accumulation of every result vector, a clear pass, DMA
    stores); and the load unit and step scheduler. The address generation stays in the engines:
    the program only cuts a layer into tiles that fit the buffers and moves them.

MX (an OCP MX ``arithmetic``; :func:`check_mx`)
    The front ends built in MX around the one array: the channel-first front end (MODE 2: the
    forward, and the loss as the forwards of its stride classes) and
    :class:`~bpsa.gateware.frontends.zero_free.gradient_engine.ZeroFreeGradientEngine` (MODE 1
    gradient; its X and dY buffers take the FWD_X / FWD_W loads, and its dY buffer is the
    channel-first front end's W buffer); P in its MX mode, results stored as fp32
    (:attr:`bpsa.config.Config.result_width`). The driver quantizes; the external layouts,
    with the scale codes beside the element codes, are :mod:`bpsa.host.mx_layout`'s (X's
    channel-first scale bytes load into the scale bank, target CF_XS). A run no MX front end
    takes ends the layer with ``ENGINE``.

External memory layout
    Element sizes: :func:`bpsa.spec.numeric.element_bytes` of ``operand_width`` for operands,
    of ``acc_width`` for results; every tensor dense, little endian, from its ADDR_*.

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
    loss      dY blocked: N x KT x OH x OW x cols    dX blocked: N x CT x H x W x cols
    (MODE 1,  (ADDR_DY); W: CT x K x R x S x cols    (CT = ceil(C / cols); lanes past C
    zero-     (ADDR_W; lane j of block t: input      hold 0)
    free)     channel t*cols + j; lanes past C 0)
    gradient  dY blocked: N x KT x OH x OW x cols    dW blocked: KT x C x R x S x cols (the
    (MODE 1,  (ADDR_DY; lanes past K hold 0);        forward's W layout)
    zero-     X blocked: N x CT x H x W x B
    free)     (ADDR_X; B = feeder_bus_width,
              CT = ceil(C / B); lanes past C 0)
    forward   X blocked HWC: N x CT x H x W x L      Y blocked K-major: KT x N x OH x OW x
    (MODE 2,  (ADDR_X; L = min(C, rows), CT =        cols (a run's stacked images' Y is
    channel-  ceil(C / L); lanes past C hold 0);     one row a block)
    first)    W as the forward's
    FC back-  X: N x C (ADDR_X); W: K x C            dX: N x C, then dW: K x C
    ward      (ADDR_W); dY: N x K (ADDR_DY)
    pooling   X (ADDR_X), dY (ADDR_DY, backward):    Y or dX, as X
              N x C x H x W; with pool_lanes
              L > 1 blocked: N x ceil(C / L) x H
              x W x L (lanes past C hold 0)
    ========  =====================================  ========================================

    ``OH = (H + 2 pad_h - dil_h (R - 1) - 1) // stride_h + 1`` (and OW likewise).
    :mod:`bpsa.host.driver` lays tensors out this way and back.

Tiling and double buffering
    All loops are in the layer's program (:mod:`bpsa.plan.program`), which the fetch unit and
    the dispatcher run; a *group* is one engine run; the group, block and band sizes are
    :mod:`bpsa.plan.setup`'s, the bands' rows :mod:`bpsa.plan.bands`'.
    Buffers A (X SRAM / buffer A) and B (W buffer / buffer B) are split into two banks of
    half their depth. Group ``g`` is loaded into bank ``g % 2``; while the engine runs it, the
    DMA loads group ``g + 1`` into the other bank, so loads hide behind compute. Within an
    outer *step* the groups' results accumulate in P. When a step's last group has started,
    the controller saves what the step's store needs and goes on at once to the next step,
    loading its first group into the other bank while that last run computes; then it waits
    for the run, stores the finished step's P rows and clears P, and starts the new step. The
    P stores and clears themselves are not overlapped with compute (P has one copy).
    channel-first forward (PHASE 0 with MODE 2; :mod:`bpsa.gateware.frontends.channel_first.channel_first`):
    the forward's loops with groups of one channel block (``L`` channels): X[n, block, band
    rows] is one DMA run of ``L`` lanes a word into the half of the channel-first X banks of
    the group's parity, and the front end runs weight-stationary on the array. A step may
    take ``zn`` images (whole planes): their X side by side in the half (a DMA run an
    image), and either one run of them stacked into one plane of ``zn H`` rows, or a run an
    image from its word ``x_off`` of the half, the runs after the first HOLD (W read once for
    the images), image ``i``'s Y of block ``b`` at P row ``b zn + i``.
    forward: for each image n, range of ``kb`` output-channel blocks (``cols`` channels each)
    and row band (a step): clear P, then for each group of ``CG`` input channels load X[n,
    group, band] into the half of the X SRAM of the group's parity (once for the range's
    blocks) and, for each block of the range, the group's W words, and run the engine (one
    image, the group's channels, one block); P word ``b p_row + oh OW + ow`` accumulates
    ``Y[n, kb0 + b, oh, ow]`` across the groups (``p_row``: the band's words); store one run
    of the band's rows per block.
    loss: for each image n and block of ``CB`` dX channels: clear P, then for each group of
    ``KG`` output channels load W[group, block] into buffer A (one DMA run per output channel
    unless the block is all of C) and dY[n, group] into buffer B and run the loss on them; P
    accumulates dX[n, block]^T (row c, ``ceil(H W / cols)`` words a row); store one row per
    channel.
    gradient: for each block of ``KB`` output channels and each group of ``CG`` input
    channels: clear P, then for each image n and group of ``KG`` output channels of the block
    load dY[n, group] into A and X[n, channel group] into B and run the gradient; P
    accumulates dW[block, channel group] (row k - block start); store one row per output
    channel.
    zero-free gradient (PHASE 2 with MODE 1; :mod:`bpsa.gateware.frontends.zero_free.gradient`): for each
    range of ``kb`` output-channel blocks and each range of ``cn`` blocks of ``B`` input
    channels (a step): clear P, then for each image n and band of dY rows load X[n, blocks,
    band rows] into the X SRAM (one pixel a word, block after block, into the half of the
    band's parity), and for each output-channel block dY[n, output block, band] into the W
    buffer, then run the walker through the forward engine on the array once per input block
    (its X from word ``x_off`` of the half; the runs after the first HOLD, reading the same
    dY): per row group of the block and tap, one output-stationary context over the band's
    compact dY pixels. P word ``(b cn + i) B R S + c R S + r S + q`` accumulates
    dW[output block b, input block i, c, r, q] (``cols`` lanes); the step stores one run of
    ``c' R S cols`` accumulators per output block (``c'``: the step's input channels).
    zero-free loss (PHASE 1 with MODE 1; :mod:`bpsa.gateware.frontends.zero_free.loss`): for each range
    of ``cn`` blocks of ``cols`` input channels, band of dX rows and step of ``zn`` images
    (their dX bands in P, which is double-buffered; ``cn`` or ``zn`` is 1), for each group of
    ``kg`` blocks of output channels and each image: load dY[image, group, the band's dY rows]
    into the half of the X SRAM of its parity (once for the range's blocks), and for each
    block W[block, group] into the W buffer (with one block it stays in its bank across the
    images) and run the walker on the forward engine's array; the step stores one run of
    ``band W cols`` results per image or block.
    FC backward (PHASE 3; with the ``interleaved`` dataflow; H = W = R = S = 1, no padding):
    a fully connected layer ``Y = X W^T`` (batch N, C inputs, K outputs) gets dX and dW in
    one pass of the array's interleaved dataflow, driven by the backward engine. For each
    input block of ``FIB`` inputs, for each chunk of ``FNB`` batch rows (a step), for each block of
    ``FOB`` outputs (a group): load dY[chunk, out block] into A, X[chunk, in block] into B
    and W[out block, in block] after it (from word ``FNB FIB`` of the bank) and run; P row
    ``n`` (words from ``n FQ``) accumulates dX[n, in block] over the output blocks, P row
    ``FNB + k`` dW[k, in block] (the engine's drained rows, queued in a FIFO for the
    accumulate pipeline's free cycles) over the chunks. A step stores its dX rows, the block's last
    step the dW column after them; refused (TOO_LARGE) when ``K >= P``.
    A load is skipped when its bank already holds the same tensor slice (same address and
    length since START).

Row bands (spatial tiling)
    When a single channel plane does not fit (forward: H W elements in an X bank or OH OW
    words in P; loss: dX of one image in P or a dY plane in a bank; gradient: a dY plane in a
    bank of A or an X plane in a bank of B), the layer is cut into bands of rows. A group's
    band of several (output) channels is loaded as one DMA run per channel; the forward runs
    one channel a group (the X SRAM packs ``feeder_bus_width`` elements a word). forward:
    bands of ``BH`` output rows; each loads its X rows (halo included) and runs as a layer of
    its own with asymmetric padding (the engines' ``pad_h`` / ``pad_bottom``); its Y rows are
    stored at their place. loss: bands of ``BH`` dX rows; each loads the dY rows that reach
    it, ``[lo, hi]``, and runs with the top padding that puts them where the whole layer does.
    gradient: bands of ``BH`` dY rows, added up in P like the groups. A layer whose single row
    band does not fit (a very wide row)
    is refused with TOO_LARGE, and so is a forward / gradient layer that needs bands and pads
    more rows than its dilated kernel reaches (``pad_h > d(R-1)``).

Refusals
    The host's planner refuses a layer the configuration cannot run before the hardware sees it
    (:class:`AccelError` codes: ``PHASE``, ``MODE``, ``ZERO_SIZE``, ``ZERO_STEP``, ``SHAPE``,
    ``KERNEL_TOO_LARGE``, ``DIM``, ``TOO_LARGE``, ``ALIGN``, ``WINDOW``, ...; the driver
    raises them). The hardware ends a layer with ``STATUS.ERROR`` and DONE on a malformed
    program (``ERROR_PROGRAM | ProgramError``: :mod:`bpsa.spec.isa`), a DMA refusal or bus
    error (``DMA_BUS | code``, :class:`bpsa.gateware.bus.dma.DmaError`: a load, store or fetch
    outside the DMA window or misaligned is refused before any bus traffic) and an engine's
    refusal of a run (``ENGINE | code``: the backward engine's
    :class:`bpsa.gateware.frontends.bp_im2col.generators.BPError`, 0 for the forward engine).
"""

from types import SimpleNamespace

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from bpsa.config import require_config
from bpsa.gateware.array.systolic import SystolicArray, share_array
from bpsa.gateware.common.checked import CheckedComponent
from bpsa.gateware.bus.axi_lite import ADDR_WIDTH, Phase, RegisterFile, axi_lite_signature
from bpsa.gateware.bus.dma import (
    DmaEngine,
    axi4_signature,
)
from bpsa.gateware.control.counters import Counters
from bpsa.gateware.control.interfaces import AccelError
from bpsa.gateware.control.load_unit import LoadUnit, Target
from bpsa.gateware.results import psum_buffer, requantizer
from bpsa.gateware.results.psum_buffer import PsumBuffer
from bpsa.gateware.results.requantizer import Requantizer
from bpsa.gateware.control.result_addressing import (BackwardResults, FcDrainResults,
                                                        ForwardResults, ZeroFreeResults)
from bpsa.gateware.control.dispatcher import Dispatcher
from bpsa.gateware.control.fetch import Fetch
from bpsa.gateware.control.step_scheduler import StepScheduler
from bpsa.spec import regmap
from bpsa.spec.errors import ERROR_DMA_BUS, ERROR_ENGINE
from bpsa.spec.numeric import MX_BLOCK

__all__ = ["AccelError", "Accelerator", "ERROR_DMA_BUS", "ERROR_ENGINE", "check_mx"]



def check_mx(config):
    """``config`` when the accelerator's MX build can be generated for it, else
    :exc:`ValueError` naming the parameter. In MX the accelerator holds the front ends built in
    MX: the channel-first front end (the forward, and the loss as its stride classes) and the
    zero-free gradient walker with its buffers
    (:class:`~bpsa.gateware.frontends.zero_free.gradient_engine.ZeroFreeGradientEngine`)
    around the one array, and P's MX mode; the data feeder, the
    zero-free loss walker, the BP-im2col front end and the pooling unit are not generated (the
    planner refuses their modes, :data:`bpsa.plan.capability.MX_MODES`; pooling runs on the
    host). A run's channels lie in one 32-channel block: ``rows`` divides 32."""
    if not config.has_frontend("channel_first"):
        raise ValueError(f"forward_frontends must include 'channel_first' for the accelerator "
                         f"in {config.arithmetic!r} (its forward and loss front end), not "
                         f"{list(config.forward_frontends)!r}")
    if not config.has_mode("zero_free"):
        raise ValueError(f"backward_modes must include 'zero_free' for the accelerator in "
                         f"{config.arithmetic!r} (its gradient front end), not "
                         f"{list(config.backward_modes)!r}")
    if MX_BLOCK % config.rows:
        raise ValueError(f"rows must divide {MX_BLOCK} for the accelerator in "
                         f"{config.arithmetic!r} (a channel-first run's channels lie in one "
                         f"block), not {config.rows}")
    return config


class Accelerator(CheckedComponent):
    """The accelerator top (see the module docstring).

    Members
    -------
    axil : In(axi_lite_signature(12))
        Host register interface (:mod:`bpsa.gateware.bus.axi_lite`; Verilog ports ``axil__*``).
    mem : Out(axi4_signature(data_width=config.dma_data_width))
        External memory (:mod:`bpsa.gateware.bus.dma`; Verilog ports ``mem__*``).
    irq : Out(1)
        STATUS.DONE: high from the end of a layer until CLEAR or the next START.
    """

    @classmethod
    def check_parameters(cls, config):
        if not (require_config(config).has("os") or config.has("is")):
            raise ValueError(f"Accelerator needs the 'os' dataflow (forward) or the 'is' "
                             f"dataflow (loss, gradient), not dataflows "
                             f"{list(config.dataflows)!r}")
        if config.is_mx:
            check_mx(config)

    def __init__(self, config):
        self.config = config
        mx = config.is_mx                 # MX: the front ends built in MX only (check_mx)
        self.has_forward = config.has("os") and config.reserve_registers and not mx
        self.has_backward = config.has_mode("bp_im2col") and not mx
        self.has_zf = config.has_mode("zero_free")
        self.has_pool = config.has_pool() and not mx
        super().__init__({
            "axil": In(axi_lite_signature(ADDR_WIDTH)),
            "mem": Out(axi4_signature(data_width=config.dma_data_width)),
            "irq": Out(1),
        })

    # ------------------------------------------------------------------------------------------
    def elaborate(self, platform):
        cfg = self.config
        m = Module()

        rf = m.submodules.regs = RegisterFile(cfg)
        wiring.connect(m, wiring.flipped(self.axil), rf.axil)
        # the store path reads P through its registered read and the registered requantizer
        dma = m.submodules.dma = DmaEngine(
            cfg, read_latency=psum_buffer.READ_LATENCY + requantizer.LATENCY)
        wiring.connect(m, dma.axi, wiring.flipped(self.mem))
        m.d.comb += [dma.window_lo.eq(rf.window_lo), dma.window_hi.eq(rf.window_hi),
                     dma.clear_counters.eq(rf.clear)]
        # the layer's program: fetched by DMA, dispatched to the load unit, the step scheduler
        # and the engines (bpsa.spec.isa); ``d`` holds the layer's constants
        fetch = m.submodules.fetch = Fetch(cfg)
        ctrl = m.submodules.dispatch = Dispatcher(cfg)
        wiring.connect(m, fetch.insn, ctrl.insn)
        m.d.comb += [ctrl.insn_end.eq(fetch.insn_end), fetch.prog_addr.eq(rf.prog_addr),
                     fetch.prog_words.eq(rf.prog_words)]
        d = plan = ctrl.layer

        fwd = bwd = None
        if self.has_forward:
            from bpsa.gateware.frontends.conv_forward import ConvForward
            fwd = m.submodules.forward = ConvForward(cfg, shared_array=True)
        if self.has_backward:
            from bpsa.gateware.frontends.bp_im2col.conv_backward import ConvBackward
            bwd = m.submodules.backward = ConvBackward(cfg, shared_array=True)
        zge = None                        # MX: the zero-free gradient's own engine and buffers
        if cfg.is_mx:
            from bpsa.gateware.frontends.zero_free.gradient_engine import ZeroFreeGradientEngine
            zge = m.submodules.zf_gradient = ZeroFreeGradientEngine(cfg, shared_array=True,
                                                                     cf_w=True)
        # the one array: the engines are front ends that take turns driving it
        array = None
        if fwd is not None or bwd is not None or zge is not None:
            array = m.submodules.array = SystolicArray(cfg)
        cf = None
        if cfg.has_frontend("channel_first") and (fwd is not None or zge is not None):
            from bpsa.gateware.frontends.channel_first.channel_first import ChannelFirst
            cf = m.submodules.channel_first = ChannelFirst(cfg)
        pool = None
        if self.has_pool:
            from bpsa.gateware.frontends.pool.pool import PoolEngine
            pool = m.submodules.pool = PoolEngine(cfg)

        pbuf = m.submodules.buf_p = PsumBuffer(cfg)
        sched = m.submodules.steps = StepScheduler(cfg)
        load = m.submodules.load = LoadUnit(cfg)
        counters = m.submodules.counters = Counters(cfg)
        # stores of P: accumulators, or operands when the descriptor requantizes (REQUANT)
        requant = m.submodules.requantizer = Requantizer(cfg)
        busy, done, err = Signal(), Signal(), Signal(8)
        # the parts, for the methods that connect them (``bank``: the buffer half of the next
        # run, the step scheduler's)
        h = SimpleNamespace(m=m, cfg=cfg, rf=rf, dma=dma, fetch=fetch, ctrl=ctrl, d=d,
                            plan=plan, fwd=fwd, bwd=bwd, cf=cf, pool=pool, array=array, zge=zge,
                            wbuf=fwd if fwd is not None else zge,
                            pbuf=pbuf, sched=sched, load=load, counters=counters,
                            requant=requant, run=ctrl.run, geo=ctrl.geometry, bank=sched.bank,
                            busy=busy, done=done, err=err)
        fres = self._results(h)
        self._status(h)
        self._buffers(h)
        self._controller(h)
        phases = self._phases(h, fres)
        self._engine_layers(h, phases)
        self._engines(h, phases)
        self._control(h)
        return m

    def _results(self, h):
        """The engines' result addressing, into P (in the step's half)."""
        (m, cfg, d, plan, fwd, bwd, cf, pool, pbuf, sched, geo) = (
            h.m, h.cfg, h.d, h.plan, h.fwd, h.bwd, h.cf, h.pool, h.pbuf, h.sched, h.geo
        )
        fres = None
        zge = h.zge
        has_fc = bwd is not None and cfg.has("interleaved")
        p_row, row_base, kt_rows = geo.p_row, geo.row_base, geo.kt_rows
        fc_o0, fc_dw_p0 = geo.fc_o0, geo.fc_dw_p0
        results = []
        if fwd is not None or cf is not None:
            fres = m.submodules.forward_results = ForwardResults(cfg)
            if cf is None:
                wiring.connect(m, fwd.y, fres.y)
            elif fwd is None:     # MX: the channel-first front end is the forward's
                wiring.connect(m, cf.y, fres.y)
            else:                 # one forward front end runs at a time
                m.d.comb += [fres.y.valid.eq(fwd.y.valid | cf.y.valid),
                             fres.y.payload.eq(Mux(cf.y.valid, cf.y.payload, fwd.y.payload))]
            m.d.comb += [fres.ow.eq(plan.ow), fres.row_base.eq(row_base), fres.p_row.eq(p_row)]
            results.append(fres.acc)
        if self.has_zf:
            zres = m.submodules.zf_gradient_results = ZeroFreeResults(cfg)
            wiring.connect(m, (h.wbuf.zg), zres.zg)
            m.d.comb += [zres.start.eq(fwd.zg_start if fwd is not None else zge.start),
                         zres.row_base.eq(row_base), zres.p_row.eq(p_row)]
            results.append(zres.acc)
        if self.has_zf and fwd is not None:
            lres = m.submodules.zf_loss_results = ZeroFreeResults(cfg)
            wiring.connect(m, fwd.zl, lres.zg)
            m.d.comb += [lres.start.eq(fwd.zl_start), lres.row_base.eq(row_base),
                         lres.p_row.eq(p_row)]
            results.append(lres.acc)
        if bwd is not None:
            bres = m.submodules.backward_results = BackwardResults(cfg)
            wiring.connect(m, bwd.out, bres.out)
            m.d.comb += [bres.start.eq(bwd.start),
                         bres.row_base.eq(row_base), bres.p_row.eq(p_row),
                         bres.kt_rows.eq(kt_rows)]
            results.append(bres.acc)
        if pool is not None:
            results.append(pool.acc)
        # one engine runs at a time: its vectors go to P (in the step's half of P), each
        # source's through a register (P takes every vector: no ready), so that no engine's
        # result logic and the choice among the sources share a cycle; the pooling unit's
        # through two (its vectors leave its compare and average logic unregistered); the
        # registers count in P's busy (a step's store waits for them)
        staged = []
        for i, res in enumerate(results):
            valid, payload = res.valid, res.payload
            for k in range(2 if pool is not None and res is pool.acc else 1):
                valid_r = Signal(name=f"res{i}_valid" + "_r" * k)
                payload_r = Signal.like(res.payload, name=f"res{i}_payload" + "_r" * k)
                m.d.sync += [valid_r.eq(valid), payload_r.eq(payload)]
                valid, payload = valid_r, payload_r
                staged.append(valid)
            with m.If(valid):
                m.d.comb += [pbuf.acc.valid.eq(1), pbuf.acc.payload.eq(payload),
                             pbuf.acc.payload.addr.eq(payload.addr + sched.p_base)]
        h.p_staged = Cat(*staged).any() if staged else Const(0, 1)
        if has_fc:
            fcres = m.submodules.fc_results = FcDrainResults(cfg)
            wiring.connect(m, bwd.drain, fcres.drain)
            m.d.comb += [fcres.start.eq(bwd.start),
                         fcres.o0.eq(fc_o0), fcres.kt_rows.eq(kt_rows),
                         fcres.p_row.eq(p_row), fcres.dw_p0.eq(fc_dw_p0), fcres.k.eq(d.k)]
            wiring.connect(m, fcres.fill, pbuf.fill)

        return fres

    def _status(self, h):
        """The counters, STATUS and the interrupt."""
        (m, rf, dma, fetch, counters, busy, done, err) = (
            h.m, h.rf, h.dma, h.fetch, h.counters, h.busy, h.done, h.err
        )
        wiring.connect(m, rf.counter, counters.read)
        m.d.comb += [counters.dma_read.eq(dma.read_inc), counters.dma_write.eq(dma.write_inc),
                     counters.prog_read_bytes.eq(fetch.fetched << 3),
                     dma.uncounted.eq(fetch.fetching)]

        m.d.comb += [rf.busy.eq(busy), rf.done.eq(done), rf.error.eq(err)]
        # irq follows STATUS.DONE: set at the end of a layer, cleared by CLEAR or START
        with m.If(done):
            m.d.sync += self.irq.eq(1)
        with m.Elif(rf.clear | rf.start):
            m.d.sync += self.irq.eq(0)
        m.d.sync += done.eq(0)


    def _buffers(self, h):
        """The DMA's commands (loads, stores, fetches) and its buffer ports."""
        (m, cfg, rf, dma, fetch, d, fwd, bwd, cf, pool, pbuf, sched, load, counters, requant,
         busy) = (
            h.m, h.cfg, h.rf, h.dma, h.fetch, h.d, h.fwd, h.bwd, h.cf, h.pool, h.pbuf, h.sched,
            h.load, h.counters, h.requant, h.busy
        )
        B = cfg.feeder_bus_width
        # --- DMA: loads (the load unit) and stores, buffer ports -------------------------------
        m.d.comb += [load.dma_done.eq(dma.done), load.dma_error.eq(dma.error),
                     load.dma.ready.eq(dma.cmd.ready)]
        # the DMA's commands: the load unit's first, then the scheduler's stores, then fetches
        # (not while the load unit is about to offer a load's first command)
        with m.If(load.dma.valid):
            m.d.comb += [dma.cmd.valid.eq(1), dma.cmd.payload.eq(load.dma.payload)]
        with m.Elif(sched.dma_valid):
            m.d.comb += [dma.cmd.valid.eq(1), dma.cmd.payload.eq(sched.dma_cmd)]
        with m.Elif(~load.claim):
            m.d.comb += [dma.cmd.valid.eq(fetch.dma.valid),
                         dma.cmd.payload.eq(fetch.dma.payload)]
        m.d.comb += [sched.dma_ready.eq(dma.cmd.ready & ~load.dma.valid),
                     sched.dma_done.eq(dma.done),
                     sched.dma_error.eq(dma.error),
                     fetch.dma.ready.eq(dma.cmd.ready & ~load.dma.valid & ~sched.dma_valid
                                        & ~load.claim),
                     fetch.dma_done.eq(dma.done), fetch.dma_error.eq(dma.error)]
        bw = dma.buf_write
        m.d.comb += [fetch.write_addr.eq(bw.addr), fetch.write_data.eq(bw.data),
                     fetch.write_en.eq(bw.en)]
        target = load.target
        buf_en = Signal()                # a buffer write of a load (not of a fetch)
        m.d.comb += buf_en.eq(bw.en & ~fetch.fetching)
        if h.wbuf is not None:            # the forward engine's buffers (MX: the gradient's)
            xw = h.wbuf.x_write
            ww = fwd.w_write if fwd is not None else h.zge.dy_write
            m.d.comb += [xw.addr.eq(bw.addr), xw.data.eq(bw.data),
                         xw.en.eq(buf_en & (target == Target.FWD_X)),
                         ww.addr.eq(bw.addr), ww.data.eq(bw.data),
                         ww.en.eq(buf_en & (target == Target.FWD_W))]
        if bwd is not None:
            m.d.comb += [bwd.a_write.addr.eq(bw.addr), bwd.a_write.data.eq(bw.data),
                         bwd.a_write.en.eq(buf_en & (target == Target.BWD_A)),
                         bwd.b_write.addr.eq(bw.addr), bwd.b_write.data.eq(bw.data),
                         bwd.b_write.en.eq(buf_en & (target == Target.BWD_B))]
        if cf is not None:
            m.d.comb += [cf.x_write.addr.eq(bw.addr),
                         cf.x_write.data.eq(bw.data[:cfg.rows * cfg.operand_width]),
                         cf.x_write.en.eq(buf_en & (target == Target.CF_X))]
            if cfg.is_mx:                 # X's scale codes: a byte a pixel
                m.d.comb += [cf.xs_write.addr.eq(bw.addr), cf.xs_write.data.eq(bw.data[:8]),
                             cf.xs_write.en.eq(buf_en & (target == Target.CF_XS))]
        if pool is not None:
            m.d.comb += [pool.write.addr.eq(bw.addr),
                         pool.write.data.eq(bw.data[:cfg.pool_lanes * cfg.operand_width]),
                         pool.write.en.eq(buf_en & (target == Target.POOL))]
        m.d.comb += [requant.word.eq(pbuf.read_data), requant.enable.eq(d.requant),
                     requant.shift.eq(d.out_shift), sched.requant.eq(d.requant)]
        to_a = ((target == Target.FWD_X) | (target == Target.BWD_A) | (target == Target.POOL)
                | (target == Target.CF_X) | (target == Target.CF_XS))
        m.d.comb += [counters.clear.eq(rf.clear), counters.busy.eq(busy),
                     counters.dma_busy.eq(dma.busy),
                     counters.a_write.eq(buf_en & to_a), counters.b_write.eq(buf_en & ~to_a),
                     counters.p_read.eq(pbuf.read_event), counters.p_write.eq(pbuf.write_event),
                     pbuf.read_addr.eq(dma.buf_read.addr),
                     pbuf.read_en.eq(dma.buf_read.en & sched.storing),
                     dma.buf_read.data.eq(requant.out),
                     dma.buf_read_ready.eq(pbuf.read_ready)]


    def _controller(self, h):
        """The dispatcher's loads, runs and stores to the load unit and the step scheduler."""
        m, ctrl, sched, load = h.m, h.ctrl, h.sched, h.load
        # --- the controller: the dispatcher, the load unit and the step scheduler -------------
        lp = load.load.payload
        m.d.comb += [load.load.valid.eq(ctrl.load.valid), ctrl.load.ready.eq(load.load.ready)]
        for name in lp.shape().members:
            m.d.comb += getattr(lp, name).eq(getattr(ctrl.load.payload, name))
        m.d.comb += [ctrl.load_done.eq(load.done),
                     ctrl.load_error.eq(load.error)]
        for name in ("last", "new_step", "save", "save2"):
            m.d.comb += getattr(sched, name).eq(getattr(ctrl, name))
        m.d.comb += sched.final_save.eq(ctrl.final_step)
        for step, staged in ((sched.save_step, ctrl.save_step),
                             (sched.save2_step, ctrl.save2_step)):
            for name in step.shape().members:
                m.d.comb += getattr(step, name).eq(getattr(staged, name))
        m.d.comb += [sched.run.eq(ctrl.run_req), sched.hold.eq(ctrl.run_hold),
                     ctrl.started.eq(sched.started),
                     ctrl.finished.eq(sched.finished), ctrl.sched_fail.eq(sched.fail),
                     ctrl.sched_code.eq(sched.fail_code)]


    def _phases(self, h, fres):
        """Which engine runs the layer's phase; the pooling unit's and the channel-first front
        end's runs."""
        (m, cfg, ctrl, d, plan, fwd, cf, pool, array, sched, requant, run, geo, bank) = (
            h.m, h.cfg, h.ctrl, h.d, h.plan, h.fwd, h.cf, h.pool, h.array, h.sched, h.requant,
            h.run, h.geo, h.bank
        )
        phase = d.phase
        p_row = geo.p_row
        is_fwd = Signal()
        is_grad = Signal()
        is_fc = Signal()
        is_zg = Signal()                 # a zero-free gradient: the forward engine drives the array
        is_zl = Signal()                 # a zero-free loss: the same
        is_pool = Signal()               # a pooling phase: the pooling unit, no array
        m.d.comb += [is_fwd.eq(phase == Phase.FORWARD), is_grad.eq(phase == Phase.GRADIENT),
                     is_fc.eq(phase == Phase.FC_BACKWARD)]
        # the store path's ReLU: forward phases (the pooling backward's RELU is its mask)
        m.d.comb += requant.relu.eq(d.relu & (phase != Phase.POOL_BACKWARD))
        if pool is not None:
            m.d.comb += is_pool.eq((phase == Phase.POOL_FORWARD)
                                   | (phase == Phase.POOL_BACKWARD))
            pl, pw_ = pool.layer, ctrl.prun
            half = cfg.buf_pool_depth // 2
            m.d.comb += [pl.backward.eq(phase == Phase.POOL_BACKWARD),
                         pl.avg.eq(d.pool_kind == regmap.PoolKind.AVG), pl.relu.eq(d.relu),
                         pl.planes.eq(run.channels), pl.h.eq(d.h), pl.w.eq(d.w),
                         pl.r.eq(d.r), pl.s.eq(d.s), pl.stride_h.eq(d.stride_h),
                         pl.stride_w.eq(d.stride_w), pl.pad_h.eq(d.pad_h),
                         pl.pad_w.eq(d.pad_w), pl.oh.eq(plan.oh), pl.ow.eq(plan.ow),
                         pl.y0.eq(pw_.y0), pl.rows.eq(pw_.rows), pl.xlo.eq(pw_.xlo),
                         pl.dlo.eq(pw_.dlo), pl.drows.eq(pw_.drows), pl.q0.eq(pw_.q0),
                         pl.rem0.eq(pw_.rem0),
                         pl.qw0.eq(plan.qw0), pl.remw0.eq(plan.rw0),
                         pl.x_base.eq(bank * half), pl.d_base.eq(bank * half + pw_.d_offset),
                         pl.x_plane.eq(pw_.x_plane), pl.d_plane.eq(pw_.d_plane),
                         pl.p_row.eq(p_row), pl.rs.eq(plan.rs), pl.recip.eq(plan.recip)]
        if self.has_zf:
            m.d.comb += [is_zg.eq(is_grad & (d.mode == regmap.Mode.ZERO_FREE)),
                         is_zl.eq((phase == Phase.LOSS) & (d.mode == regmap.Mode.ZERO_FREE))]

        is_cf = Signal()                 # a channel-first forward: its front end drives the array
        if cf is not None:
            m.d.comb += is_cf.eq(is_fwd & (d.mode == regmap.Mode.CHANNEL_FIRST))
        # Which engine a run starts and which engine owns the array, each from a register of
        # the layer's phase and mode (a cycle behind the descriptor: a run starts at least two
        # cycles after its layer's descriptor is staged, the dispatcher's RUN and the
        # scheduler's IDLE between), so an engine's start is an AND of two registers.
        on_fwd = (is_fwd & ~is_cf) | is_zg | is_zl
        r = SimpleNamespace()
        for name, value in (("fwd", is_fwd), ("cf", is_cf), ("pool", is_pool), ("zg", is_zg),
                            ("zl", is_zl), ("on_fwd", on_fwd), ("fwd_run", is_fwd & ~is_cf),
                            ("bwd", ~on_fwd & ~is_cf & ~is_pool)):
            setattr(r, name, Signal(name=f"run_{name}"))
            m.d.sync += getattr(r, name).eq(value)
        if fres is not None:
            m.d.comb += fres.start.eq(sched.eng_start & r.fwd)
        if pool is not None:
            m.d.comb += pool.start.eq(sched.eng_start & r.pool)
            with m.If(r.pool):
                m.d.comb += [sched.eng_busy.eq(pool.busy), sched.eng_error.eq(pool.error)]
        if cf is not None:
            cr = cf.run
            m.d.comb += [cr.channels.eq(run.channels), cr.layer_channels.eq(d.c),
                         cr.height.eq(run.height), cr.out_rows.eq(ctrl.prun.rows),
                         cr.width.eq(d.w), cr.out_width.eq(plan.ow), cr.kernel_h.eq(d.r),
                         cr.kernel_w.eq(d.s), cr.stride_h.eq(d.stride_h),
                         cr.stride_w.eq(d.stride_w), cr.dil_h.eq(d.dil_h),
                         cr.dil_w.eq(d.dil_w), cr.pad_top.eq(run.pad_top),
                         cr.pad_w.eq(d.pad_w),
                         cr.x_base.eq(run.xbank * (cfg.buf_cf_depth // 2) + run.x_off),
                         cr.w_base.eq(bank * (cfg.buf_b_depth // 2)),
                         cf.start.eq(sched.eng_start & r.cf),
                         h.wbuf.cfw_sel.eq(is_cf), h.wbuf.cfw_addr.eq(cf.w_addr),
                         h.wbuf.cfw_en.eq(cf.w_en), cf.w_data.eq(h.wbuf.cfw_data)]

        return SimpleNamespace(is_fwd=is_fwd, is_grad=is_grad, is_fc=is_fc, is_zg=is_zg,
                               is_zl=is_zl,
                               is_pool=is_pool, is_cf=is_cf, r=r)

    def _engine_layers(self, h, f):
        """The engines' run descriptors, from the staging registers."""
        (m, cfg, ctrl, d, plan, fwd, bwd, sched, run, bank) = (
            h.m, h.cfg, h.ctrl, h.d, h.plan, h.fwd, h.bwd, h.sched, h.run, h.bank
        )
        B = cfg.feeder_bus_width
        is_fc, is_grad, is_zg, is_zl = f.is_fc, f.is_grad, f.is_zg, f.is_zl
        # engine descriptors (held while a run is in flight)
        if fwd is not None:
            lay = fwd.layer
            m.d.comb += [lay.batch.eq(1), lay.channels.eq(run.channels), lay.height.eq(run.height),
                         lay.width.eq(d.w), lay.kernel_h.eq(d.r), lay.kernel_w.eq(d.s),
                         lay.stride_h.eq(d.stride_h), lay.stride_w.eq(d.stride_w),
                         lay.pad_h.eq(run.pad_top), lay.pad_bottom.eq(run.pad_bottom),
                         lay.pad_w.eq(d.pad_w), lay.dil_h.eq(d.dil_h),
                         lay.dil_w.eq(d.dil_w), lay.out_channels.eq(run.out_channels),
                         lay.x_base.eq(run.xbank * (cfg.buf_a_depth // 2 * B)),
                         lay.w_base.eq(bank * (cfg.buf_b_depth // 2))]
        if bwd is not None:
            from bpsa.gateware.frontends.bp_im2col.conv_backward import Phase as BwdPhase
            bl = bwd.layer
            m.d.comb += [bl.phase.eq(Mux(is_fc, BwdPhase.FC,
                                         Mux(is_grad, BwdPhase.GRADIENT, BwdPhase.LOSS))),
                         bl.baseline.eq(0), bl.n.eq(Mux(is_fc, run.batch, 1)),
                         bl.c.eq(run.channels),
                         bl.h.eq(run.height),
                         bl.w.eq(d.w), bl.k.eq(run.out_channels), bl.r.eq(d.r), bl.s.eq(d.s),
                         bl.oh.eq(run.out_height), bl.ow.eq(plan.ow), bl.stride_h.eq(d.stride_h),
                         bl.stride_w.eq(d.stride_w), bl.pad_h.eq(run.pad_top),
                         bl.pad_bottom.eq(run.pad_bottom),
                         bl.pad_w.eq(d.pad_w), bl.dil_h.eq(d.dil_h), bl.dil_w.eq(d.dil_w),
                         bl.src_base_a.eq(0), bl.src_base_b.eq(Mux(is_fc, plan.fwoff, 0)),
                         bl.base_a.eq(bank * (cfg.buf_a_depth // 2)),
                         bl.base_b.eq(bank * (cfg.buf_b_depth // 2))]

        if self.has_zf:
            zl = fwd.zg_layer if fwd is not None else h.zge.layer
            m.d.comb += [zl.channels.eq(run.channels), zl.width.eq(d.w),
                         zl.height.eq(run.height), zl.out_height.eq(run.out_height),
                         zl.out_width.eq(plan.ow), zl.kernel_h.eq(d.r), zl.kernel_w.eq(d.s),
                         zl.stride_h.eq(d.stride_h), zl.stride_w.eq(d.stride_w),
                         zl.dil_h.eq(d.dil_h), zl.dil_w.eq(d.dil_w),
                         zl.pad_top.eq(run.pad_top), zl.pad_w.eq(d.pad_w),
                         zl.x_base.eq(run.xbank * (cfg.buf_a_depth // 2) + run.x_off),
                         zl.dy_base.eq(bank * (cfg.buf_b_depth // 2))]
            if fwd is None:
                m.d.comb += h.zge.start.eq(sched.eng_start & f.r.zg)
                return
            m.d.comb += fwd.zg_start.eq(sched.eng_start & f.r.zg)
            ll, zr = fwd.zl_layer, ctrl.zrun
            m.d.comb += [ll.height.eq(run.height), ll.width.eq(d.w),
                         ll.out_height.eq(run.out_height), ll.out_width.eq(plan.ow),
                         ll.kernel_h.eq(d.r), ll.kernel_w.eq(d.s),
                         ll.stride_h.eq(d.stride_h), ll.stride_w.eq(d.stride_w),
                         ll.pad_top.eq(run.pad_top), ll.pad_w.eq(d.pad_w),
                         ll.x_base.eq(run.xbank * (cfg.buf_a_depth // 2)),
                         ll.w_base.eq(bank * (cfg.buf_b_depth // 2) + run.w_off),
                         fwd.zl_start.eq(sched.eng_start & f.r.zl)]
            for name in ("pt_q", "pt_r", "pw_q", "pw_r", "dh_q", "dh_r", "dw_q", "dw_r",
                         "kblocks", "kvalid", "plane"):
                m.d.comb += getattr(ll, name).eq(getattr(zr, name))


    def _engines(self, h, f):
        """The phase's engine drives the array and runs the scheduler's runs; their statistics."""
        (m, fetch, ctrl, plan, fwd, bwd, cf, pool, array, pbuf, sched, counters, run, geo) = (
            h.m, h.fetch, h.ctrl, h.plan, h.fwd, h.bwd, h.cf, h.pool, h.array, h.pbuf, h.sched,
            h.counters, h.run, h.geo
        )
        is_fwd, is_cf, is_zg, is_zl, is_pool = f.is_fwd, f.is_cf, f.is_zg, f.is_zl, f.is_pool
        zge, r = h.zge, f.r
        # the phase's engine runs the scheduler's runs
        engines = [(eng, r.on_fwd if eng is fwd else (r.cf if eng is cf else
                                                       r.zg if eng is zge else r.bwd))
                   for eng in (fwd, bwd, cf, zge) if eng is not None]
        if engines:
            share_array(m, array, [(eng.array, active) for eng, active in engines])
        for eng, active in engines:
            if eng is fwd:
                m.d.comb += eng.start.eq(sched.eng_start & r.fwd_run)
            elif eng is bwd:
                m.d.comb += eng.start.eq(sched.eng_start & r.bwd)
            with m.If(active):
                m.d.comb += [sched.eng_busy.eq(eng.busy), sched.eng_error.eq(eng.error)]
                if eng is bwd:
                    m.d.comb += sched.eng_code.eq(bwd.error_code.as_value())
        if zge is not None:               # MX: a run no MX front end takes is refused
            with m.If(~r.cf & ~r.zg):
                m.d.comb += sched.eng_error.eq(1)
        m.d.comb += [sched.double.eq(is_zg | is_zl | is_pool | (is_fwd & plan.dbl)),
                     sched.abort.eq(ctrl.fail | fetch.error),
                     pbuf.clear_base.eq(sched.p_base),
                     pbuf.clear.eq(sched.p_clear), pbuf.clear_words.eq(sched.p_clear_words),
                     sched.p_clear_last.eq(pbuf.clear_last), sched.p_busy.eq(pbuf.busy | h.p_staged),
                     sched.clear_words.eq(geo.clear_words)]

        # engine status, summed into the counters when a run ends
        run_busy = Signal()
        m.d.comb += [run_busy.eq(Const(0, 1) | (fwd.busy if fwd is not None else 0)
                                 | (bwd.busy if bwd is not None else 0)
                                 | (cf.busy if cf is not None else 0)
                                 | (zge.busy if zge is not None else 0)),
                     counters.compute.eq(run_busy)]
        names = {id(fwd): "fwd", id(bwd): "bwd", id(cf): "cf", id(zge): "zg"}
        for eng in (fwd, bwd, cf, zge):
            if eng is None:
                continue
            was_busy = Signal(name=f"{names[id(eng)]}_was_busy")
            m.d.sync += was_busy.eq(eng.busy)
            s = counters.run_stats
            with m.If(was_busy & ~eng.busy):
                m.d.comb += counters.run_done.eq(1)
                if eng is cf or eng is zge:   # the array's counters: cleared at the start
                    m.d.comb += [s.fired.eq(array.fired), s.gated.eq(array.gated),
                                 s.a_words.eq(eng.words_read), s.b_words.eq(eng.w_words_read)]
                elif eng is fwd:
                    m.d.comb += [s.fired.eq(fwd.fired), s.gated.eq(fwd.gated),
                                 s.stall_cycles.eq(fwd.stall_cycles),
                                 s.a_words.eq(fwd.words_read), s.b_words.eq(fwd.w_words_read)]
                else:
                    m.d.comb += [s.fired.eq(bwd.fired), s.gated.eq(bwd.gated),
                                 s.a_words.eq(bwd.a_words), s.b_words.eq(bwd.b_words)]
        if pool is not None:              # the pooling buffer's reads count as A's
            pool_was_busy = Signal()
            m.d.sync += pool_was_busy.eq(pool.busy)
            with m.If(pool_was_busy & ~pool.busy):
                m.d.comb += [counters.run_done.eq(1),
                             counters.run_stats.a_words.eq(pool.words_read)]


    def _control(self, h):
        """The layer: START, the program, DONE or the first failure."""
        (m, rf, fetch, ctrl, sched, load, busy, done, err) = (
            h.m, h.rf, h.fetch, h.ctrl, h.sched, h.load, h.busy, h.done, h.err
        )
        with m.FSM(name="ctrl") as fsm:
            def fail(code):
                m.d.sync += [err.eq(code), done.eq(1)]
                m.next = "IDLE"

            with m.State("IDLE"):
                with m.If(rf.start):
                    m.d.sync += err.eq(0)
                    m.d.comb += [load.invalidate.eq(1), sched.layer_start.eq(1),
                                 fetch.start.eq(1), ctrl.start.eq(1)]
                    m.next = "RUN"
            with m.State("RUN"):             # the program, until END's store is done
                with m.If(ctrl.fail):
                    fail(ctrl.fail_code)
                with m.Elif(fetch.error):
                    fail(ERROR_DMA_BUS | fetch.error_code.as_value())
                with m.Elif(ctrl.done):
                    m.next = "DONE"
            with m.State("DONE"):
                m.d.sync += done.eq(1)
                m.next = "IDLE"
        m.d.comb += fetch.stop.eq(fsm.ongoing("IDLE"))
        m.d.comb += busy.eq(~fsm.ongoing("IDLE") | fetch.busy)

