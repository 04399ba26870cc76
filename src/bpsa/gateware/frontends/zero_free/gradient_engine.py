"""The zero-free gradient walker on its own output-stationary array, with its X and dY
buffers: the engine a testbench runs run by run (top ``zg_engine``), in integers and in the
OCP MX formats.

A run (:func:`~bpsa.gateware.frontends.zero_free.gradient.zf_gradient_layout`) is one band
of one image, one X channel block (``feeder_bus_width`` channels a word) and one dY block
(``cols`` channels a word), in the buffers' layouts of
:class:`~bpsa.gateware.frontends.zero_free.gradient.ZeroFreeGradientWalker` (MX: each row's
scale words after its pixels). Every drained row whose channel is in the block leaves on
``zg`` (:func:`~bpsa.gateware.frontends.drain.zg_layout`): ``dW`` of one tap and ``cols``
output channels at its P offset; the run adds into P, so bands and images add up there.

MX: every segment of the walker is an output-stationary context. Its scale beat's codes wait
in a register until the segment's last vector enters the array, then in a queue until its
rows have drained: row ``i`` leaves with ``scale_row`` = X's code of the row's channel and
``scale_cols`` = dY's codes. Context ends are spaced at least :func:`segment_cycles` apart
(the array's context gap and P's fold spacing,
:data:`~bpsa.gateware.results.psum_buffer.MX_SPACING`: consecutive segments of a tap fold
into the same P words).
"""

from amaranth.hdl import Const, Module, Signal
from amaranth.lib import data, enum, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.memory import Memory, WritePort
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

from bpsa.config import require_config
from bpsa.gateware.array.arith import arith_for
from bpsa.gateware.array.systolic import (COUNTER_WIDTH, Dataflow, SystolicArray,
                                          array_signature)
from bpsa.gateware.common.skid import SkidBuffer
from bpsa.gateware.frontends.drain import context_spacing, zg_layout
from bpsa.gateware.frontends.zero_free.gradient import (
    ZeroFreeGradientWalker,
    drain_offsets,
    zf_gradient_layout,
)
from bpsa.gateware.results.psum_buffer import MX_SPACING

__all__ = ["ZeroFreeGradientEngine", "segment_cycles"]


def segment_cycles(config):
    """The fewest cycles between two context ends: the array's context gap and, in MX, P's
    fold spacing (the segments of one tap fold into the same words)."""
    gap = config.context_gap
    return max(gap, MX_SPACING) if config.is_mx else gap


class _State(enum.Enum, shape=2):
    IDLE = 0
    PRIME = 1                                 # the reserve chains zeroed (``rows`` shifts)
    RUN = 2                                   # the walker's beats into the array
    DRAIN = 3                                 # the last contexts leave the array


class ZeroFreeGradientEngine(wiring.Component):
    """See the module docstring.

    Members
    -------
    layer : In(zf_gradient_layout(config))
        The run, taken at ``start`` when idle.
    start : In(1)
    busy, done, error : Out(1)
        ``busy`` from the cycle after ``start`` until ``done`` (one cycle, after the run's
        last row has left on ``zg``); ``error`` with ``done`` when the run had no vector (a
        zero size in the descriptor: channels, rows, columns or kernel), which ends at once
        instead of waiting for a drain.
    x_write : Out(WritePort.Signature(addr_width=log2(buf_a_depth), shape=ArrayLayout(op, B)))
    dy_write : Out(WritePort.Signature(addr_width=log2(buf_b_depth), shape=ArrayLayout(op,
    cols)))
        The X and dY buffers' write ports.
    zg : Out(Signature(valid: Out(1), payload: Out(zg_layout(config))))
        The drained rows (no back-pressure).
    words_read, w_words_read : Out(COUNTER_WIDTH)
        X and dY buffer words read by the run (scale words included), cleared by ``start``.
    array : In(array_signature)
        With ``shared_array=True``: the engine drives an array outside it (the accelerator's
        one array, :func:`bpsa.gateware.array.systolic.share_array`) instead of holding its own.
    cfw_sel, cfw_addr, cfw_en : In, cfw_data : Out
        With ``cf_w=True``: while ``cfw_sel`` is high, the dY buffer's read port serves the
        channel-first front end (its W buffer in the accelerator's MX build,
        :mod:`bpsa.gateware.accelerator`).
    """

    def __init__(self, config, *, shared_array=False, cf_w=False):
        self.config = require_config(config)
        self.shared_array, self.cf_w = shared_array, cf_w
        op = arith_for(config).operand_shape
        members = {
            "layer": In(zf_gradient_layout(config)), "start": In(1),
            "busy": Out(1), "done": Out(1), "error": Out(1),
            "x_write": Out(WritePort.Signature(
                addr_width=ceil_log2(config.buf_a_depth),
                shape=data.ArrayLayout(op, config.feeder_bus_width))),
            "dy_write": Out(WritePort.Signature(
                addr_width=ceil_log2(config.buf_b_depth),
                shape=data.ArrayLayout(op, config.cols))),
            "zg": Out(wiring.Signature({"valid": Out(1), "payload": Out(zg_layout(config))})),
            "words_read": Out(COUNTER_WIDTH), "w_words_read": Out(COUNTER_WIDTH),
        }
        if cf_w:
            members.update({"cfw_sel": In(1), "cfw_addr": In(ceil_log2(config.buf_b_depth)),
                            "cfw_en": In(1), "cfw_data": Out(data.ArrayLayout(op, config.cols))})
        if shared_array:
            members["array"] = In(array_signature(config))
        super().__init__(members)

    def elaborate(self, platform):
        cfg = self.config
        m = Module()
        R, C = cfg.rows, cfg.cols
        walker = m.submodules.walker = ZeroFreeGradientWalker(cfg)
        reads = {}
        for name, port, mem_port in (("x", self.x_write, walker.x_mem),
                                     ("dy", self.dy_write, walker.dy_mem)):
            mem = m.submodules[f"{name}_buf"] = Memory(
                shape=mem_port.data.shape(), depth=2 ** len(mem_port.addr), init=[])
            wp = mem.write_port()
            m.d.comb += [wp.en.eq(port.en), wp.addr.eq(port.addr), wp.data.eq(port.data)]
            rp = mem.read_port()
            wiring.connect(m, mem_port, rp)
            reads[name] = rp
        if self.cf_w:              # the channel-first front end reads W through the dY port
            rp = reads["dy"]
            m.d.comb += self.cfw_data.eq(rp.data)
            with m.If(self.cfw_sel):
                m.d.comb += [rp.addr.eq(self.cfw_addr), rp.en.eq(self.cfw_en)]
        skid = m.submodules.skid = SkidBuffer(walker.feed.payload.shape())
        wiring.connect(m, walker.feed, skid.i)
        feed = skid.o
        if self.shared_array:
            arr = self.array
        else:
            arr = m.submodules.array = SystolicArray(cfg)
        m.d.comb += arr.dataflow.eq(Dataflow.OS)

        state = Signal(_State)
        prime = Signal(range(R + 1))
        load = Signal()
        with m.Switch(state):
            with m.Case(_State.IDLE):
                with m.If(self.start):
                    m.d.comb += [walker.start.eq(1), walker.layer.eq(self.layer),
                                 arr.clear.eq(1), load.eq(1)]
                    m.d.sync += [prime.eq(0), state.eq(_State.PRIME)]
            with m.Case(_State.PRIME):
                m.d.comb += arr.chain_shift.eq(1)          # preload is 0
                m.d.sync += prime.eq(prime + 1)
                with m.If(prime == R - 1):
                    m.d.sync += state.eq(_State.RUN)
            with m.Case(_State.RUN):
                with m.If(~walker.busy & ~feed.valid):
                    m.d.sync += state.eq(_State.DRAIN)

        # issue: a beat into the array edge (registered); a context's last vector waits for
        # the spacing since the previous one
        a_r = Signal(data.ArrayLayout(arr.a_data.shape().elem_shape, R))
        b_r = Signal(data.ArrayLayout(arr.a_data.shape().elem_shape, C))
        iv, il, take, vector = Signal(), Signal(), Signal(), Signal()
        _, may_end = context_spacing(m, iv & il, segment_cycles(cfg))
        is_scale = feed.p.scale if cfg.is_mx else Const(0)
        m.d.comb += [
            vector.eq(~is_scale),
            take.eq((state == _State.RUN) & feed.valid
                    & (~feed.p.last | is_scale | may_end)),
            feed.ready.eq(take),
        ]
        m.d.sync += [iv.eq(take & vector), il.eq(take & vector & feed.p.last)]
        any_ctx = Signal()                    # a context entered the array this run
        with m.If(load):
            m.d.sync += any_ctx.eq(0)
        with m.Elif(iv & il):
            m.d.sync += any_ctx.eq(1)
        with m.If(take):
            m.d.sync += [a_r.eq(feed.p.a), b_r.eq(feed.p.b)]
        m.d.comb += [arr.a_data.eq(a_r), arr.a_valid.eq(iv), arr.a_last.eq(il),
                     arr.b_valid.eq(iv)]
        m.d.comb += [arr.b_data[j].eq(b_r[j]) for j in range(C)]

        drained = arr.drain_valid & (arr.drain_row == 0)
        tap_end = self._scales(m, feed, take, arr) if cfg.is_mx else 1
        addr, keep, all_drained = drain_offsets(m, cfg, load, self.layer, drained, tap_end,
                                                arr.drain_row)
        m.d.comb += [self.zg.valid.eq(arr.drain_valid & keep),
                     self.zg.payload.data.eq(arr.drain_data), self.zg.payload.addr.eq(addr)]
        with m.If((state == _State.DRAIN) & (all_drained | ~any_ctx)):
            m.d.comb += [self.done.eq(1), self.error.eq(~any_ctx)]
            m.d.sync += state.eq(_State.IDLE)
        m.d.comb += self.busy.eq(state != _State.IDLE)
        for counter, rp in ((self.words_read, reads["x"]), (self.w_words_read, reads["dy"])):
            with m.If(self.start & (state == _State.IDLE)):
                m.d.sync += counter.eq(0)
            with m.Elif(self.busy & rp.en):
                m.d.sync += counter.eq(counter + 1)
        return m

    def _scales(self, m, feed, take, arr):
        """MX: a segment's scale codes, held from its scale beat until its last vector is
        taken, then queued (with whether it ends its tap) until its row 0 has drained; each
        drained row leaves with its own. Returns the draining context's ``end``."""
        cfg = self.config
        R, C = cfg.rows, cfg.cols
        entry = data.StructLayout({"a": data.ArrayLayout(8, R), "b": data.ArrayLayout(8, C),
                                   "end": 1})
        held, w = Signal(entry), Signal(entry)
        with m.If(take & feed.p.scale):
            m.d.sync += [held.a.eq(feed.p.a), held.b.eq(feed.p.b)]
        m.d.comb += [w.a.eq(held.a), w.b.eq(held.b), w.end.eq(feed.p.end)]
        # contexts between their last vector and their last row: the drain of one ends within
        # R + C + LATENCY cycles of its last vector, and context ends are segment_cycles apart
        depth = 1 << ceil_log2(-(-(R + C + cfg.mac_latency) // segment_cycles(cfg)) + 2)
        q = m.submodules.scale_queue = SyncFIFO(width=entry.size, depth=depth)
        m.d.comb += [q.w_en.eq(take & ~feed.p.scale & feed.p.last), q.w_data.eq(w),
                     q.r_en.eq(arr.drain_valid & (arr.drain_row == 0))]
        out = data.View(entry, q.r_data)
        m.d.comb += [self.zg.payload.scale_row.eq(out.a[arr.drain_row]),
                     self.zg.payload.scale_cols.eq(out.b)]
        return out.end
