"""The partial-sum buffer P: result vectors added into it, a clear pass, and the DMA's reads.

In floating point (``config.is_float``) each lane's addition is the contract's fp32 ``P + y``
(:class:`bpsa.gateware.fp.fpu.FloatAdder` of an fp32 addend, one rounding, five stages; a zero
addend leaves the word unchanged), so P holds ``((+0 + y_0) + y_1) + ...`` of the vectors
for a word in the order they came (``docs/architecture/floating_point.md``).

In an MX format (``config.is_mx``) a vector's lanes are block sums, and the vector carries the
block's scale codes: ``scale_row`` (the array-row operand's, one for the vector) and
``scale_cols`` (the column operand's, one a lane). Each lane's addition is the MX contract's
steps 2 to 5 (:class:`bpsa.gateware.results.mx_accumulate.MxBlockAccumulator`: the sum scaled
by its two scales and added into the fp32 word, one rounding, seven stages; a zero sum leaves
the word unchanged), so P holds the fp32 fold of a word's blocks in the order they came
(``docs/architecture/mx.md``); its words are fp32 (:func:`p_word_width`).
"""

from amaranth.hdl import Cat, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from bpsa.config import Config
from bpsa.gateware.fp.fpu import FloatAdder, fp32_addend
from bpsa.gateware.results.mx_accumulate import MxBlockAccumulator
from bpsa.spec.numeric import mx_format

__all__ = ["FLOAT_SPACING", "MX_SPACING", "PsumBuffer", "READ_LATENCY", "accumulate_layout",
           "p_word_width"]

#: Cycles from a DMA read (``read_en``) to its ``read_data``.
READ_LATENCY = 2

#: Floating point: the fewest cycles between two vectors for the same word (the adder's
#: stages between the word's read and its write); the array's context gap (``2 rows + 5``)
#: keeps every engine's vectors for a word further apart.
FLOAT_SPACING = 2 + FloatAdder.LATENCY

#: MX: the fewest cycles between two vectors for the same word (the block accumulator's
#: stages between the word's read and its write; no forwarding).
MX_SPACING = 2 + MxBlockAccumulator.LATENCY


def p_word_width(config):
    """Bits of one lane of a P word: :attr:`bpsa.config.Config.result_width`."""
    return config.result_width


def _word_layout(config):
    """A P word: ``cols`` lanes of :func:`p_word_width` bits (MX: fp32 encodings, unsigned)."""
    return data.ArrayLayout((unsigned if config.is_mx else signed)(p_word_width(config)),
                            config.cols)


def accumulate_layout(config):
    """One result vector for P: ``addr`` (a P word) and ``data`` (``cols`` accumulators).

    MX: ``data`` holds block sums as the PE drains them (``mxint8``: 21-bit two's complement;
    ``mxfp8_e4m3``: 43 bits, unsigned: the 42-bit sum and the NaN flag above it), and the
    vector carries the blocks' E8M0 scale codes: ``scale_row`` (one for the vector: the
    operand on the array-row side, e.g. X's at the vector's pixel) and ``scale_cols`` (one a
    column: e.g. W's for that column's output channel)."""
    lane = signed(config.acc_width)
    if config.is_mx and not mx_format(config.arithmetic).is_int:
        lane = unsigned(config.acc_width)
    fields = {"addr": unsigned(exact_log2(config.buf_p_depth)),
              "data": data.ArrayLayout(lane, config.cols)}
    if config.is_mx:
        fields.update(scale_row=unsigned(8),
                      scale_cols=data.ArrayLayout(unsigned(8), config.cols))
    return data.StructLayout(fields)


class PsumBuffer(wiring.Component):
    """``buf_p_depth`` words of ``cols`` accumulators (``acc_width`` bits, wrapping).

    A vector taken from ``acc`` (or, in a cycle without one, from ``fill``) is added into its
    word in three stages (address, read, add and write; the word read is registered before
    the adder); a later vector for the same word sees the earlier one's sum (one cycle
    behind, forwarded from the adder; two behind, the read port is transparent to the write
    port). P is two
    memories, one a half (the top address bit), so that the DMA reads a finished step's half
    while result vectors accumulate in the other.

    Floating point: the addition is five stages (the write :data:`FLOAT_SPACING` cycles
    after the read), so a vector must come at least :data:`FLOAT_SPACING` cycles after the
    previous one for its word (no forwarding); ``fill`` is not taken (the FC phase is not
    built in floating point).

    MX: words of ``cols`` fp32 sums (:func:`p_word_width`); the addition is one
    :class:`~bpsa.gateware.results.mx_accumulate.MxBlockAccumulator` a column (the lane's
    block sum, ``scale_row`` and the column's ``scale_cols`` code, the word's fp32 sum), its
    seven stages between the read and the write, so vectors for a word come at least
    :data:`MX_SPACING` cycles apart (no forwarding); ``fill`` is not taken.

    Members
    -------
    acc : In(stream.Signature(accumulate_layout(config)))
        Result vectors; always taken (``ready`` is 1).
    fill : In(stream.Signature(accumulate_layout(config)))
        More vectors, taken in the cycles ``acc`` has none.
    clear : In(1), clear_words : In(48), clear_base : In(log2(buf_p_depth)),
    clear_last : Out(1)
        While ``clear`` is high, one word a cycle from word ``clear_base`` is zeroed;
        ``clear_last`` is high in the cycle that zeroes word ``clear_base + clear_words - 1``
        (the count then restarts).
    read_addr, read_en : In, read_data : Out
        A read port for the DMA's stores, used in cycles without an accumulation read in the
        same half (``read_ready``; a read in another cycle is not served); data two cycles
        after the read (:data:`READ_LATENCY`), for that cycle only. MX: ``cols`` fp32
        encodings.
    busy : Out(1)
        An accumulation is in flight or waiting in ``fill``.
    read_event, write_event : Out(2)
        The words read / written this cycle, 0..2 (for the counters).
    """

    def __init__(self, config):
        if not isinstance(config, Config):
            raise TypeError(f"config must be a Config, not {config!r}")
        self.config = config
        layout = accumulate_layout(config)
        aw = exact_log2(config.buf_p_depth)
        super().__init__({
            "acc": In(stream.Signature(layout)),
            "fill": In(stream.Signature(layout)),
            "clear": In(1), "clear_words": In(48), "clear_base": In(aw), "clear_last": Out(1),
            "read_addr": In(aw), "read_en": In(1), "read_ready": Out(1),
            "read_data": Out(_word_layout(config)),
            "busy": Out(1), "read_event": Out(2), "write_event": Out(2),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        aw = exact_log2(cfg.buf_p_depth)
        shape = accumulate_layout(cfg)["data"].shape
        word = _word_layout(cfg)
        # two banks, one a half of P (the top address bit): a store reads the half a
        # double-buffered step has finished while the next step accumulates in the other
        banks = []
        for b in range(2):
            mem = m.submodules[f"mem{b}"] = Memory(shape=word, depth=cfg.buf_p_depth // 2,
                                                   init=[])
            wp = mem.write_port()
            banks.append((wp, mem.read_port(transparent_for=(wp,))))

        def half(addr):
            return addr[aw - 1]

        # stage 1 (address), stage 2 (read: the memories' words into registers, one a bank,
        # so nothing but a register follows a block RAM's slow output), stage 3 (add, write)
        v1, v2, v3 = Signal(), Signal(), Signal()
        a1, a2, a3 = Signal(aw), Signal(aw), Signal(aw)
        x1 = Signal(shape)
        x2, x3 = Signal.like(x1), Signal.like(x1)
        m.d.sync += [v1.eq(0), v2.eq(v1), a2.eq(a1), x2.eq(x1), v3.eq(v2), a3.eq(a2),
                     x3.eq(x2)]
        scales = self._scale_stages(m) if cfg.is_mx else None
        m.d.comb += self.acc.ready.eq(1)
        if not (cfg.is_float or cfg.is_mx):
            m.d.comb += self.fill.ready.eq(~self.acc.valid)
        with m.If(self.acc.valid):
            m.d.sync += [v1.eq(1), a1.eq(self.acc.payload.addr), x1.eq(self.acc.payload.data)]
            if scales:
                m.d.sync += scales.take(self.acc.payload)
        with m.Elif(self.fill.valid & (0 if cfg.is_float or cfg.is_mx else 1)):
            m.d.sync += [v1.eq(1), a1.eq(self.fill.payload.addr),
                         x1.eq(self.fill.payload.data)]
        words = [Signal(word, name=f"word{b}") for b in range(2)]
        m.d.sync += [words[b].eq(banks[b][1].data) for b in range(2)]
        # a vector one behind another for the same word read it before that one's write
        # (two behind, the read port's transparency gives it the sum): it takes the sum
        sums, prev = Signal.like(words[0]), Signal.like(words[0])
        forward = Signal()
        if not (cfg.is_float or cfg.is_mx):     # floating point, MX: no forwarding (spacing)
            m.d.sync += [prev.eq(sums), forward.eq(v2 & v3 & (a2 == a3))]
        acc_data = Signal(word)
        m.d.comb += acc_data.eq(Mux(forward, prev, Mux(half(a3), words[1], words[0])))
        if cfg.is_float or cfg.is_mx:
            self._units(m, acc_data, x3, scales, sums)
            vw, aw_, stages = self._write_stages(m, v3, a3)
        else:
            for j in range(cfg.cols):
                m.d.comb += sums[j].eq(acc_data[j] + x3[j])
            vw, aw_, stages = v3, a3, []
        clr_at = self._clear_pass(m, aw)

        # each bank's ports: the accumulation first, then the clear pass / the DMA's reads
        read_ok = Signal()
        m.d.comb += read_ok.eq(~v1 | (half(a1) != half(self.read_addr)))
        events_r, events_w = [], []
        for b, (wp, rp) in enumerate(banks):
            acc_here = v1 & (half(a1) == b)
            with m.If(acc_here):
                m.d.comb += [rp.addr.eq(a1[:aw - 1]), rp.en.eq(1)]
            with m.Else():
                m.d.comb += [rp.addr.eq(self.read_addr[:aw - 1]),
                             rp.en.eq(self.read_en & (half(self.read_addr) == b))]
            with m.If(vw & (half(aw_) == b)):
                m.d.comb += [wp.addr.eq(aw_[:aw - 1]), wp.data.eq(sums), wp.en.eq(1)]
            with m.Elif(self.clear & ~vw & (half(clr_at) == b)):
                m.d.comb += [wp.addr.eq(clr_at[:aw - 1]), wp.data.eq(0), wp.en.eq(1)]
            events_r.append(rp.en)
            events_w.append(wp.en)
        # the DMA's word: the bank's word register (nothing but a register after the block
        # RAM), so it is there two cycles after the read, for one cycle
        dma_half = Signal(2)
        m.d.sync += dma_half.eq(Cat(half(self.read_addr), dma_half[0]))
        m.d.comb += [self.read_data.eq(Mux(dma_half[1], words[1], words[0])),
                     self.read_ready.eq(read_ok),
                     self.busy.eq(v1 | v2 | v3 | _any(stages) | self.fill.valid),
                     self.read_event.eq(events_r[0] + events_r[1]),
                     self.write_event.eq(events_w[0] + events_w[1])]
        return m

    def _scale_stages(self, m):
        """MX: the vector's scale codes through stages 1 to 3, beside its block sums."""
        return _ScaleStages(m, self.config.cols)

    def _units(self, m, acc_data, x3, scales, sums):
        """Floating point, MX: a column's adder (``FloatAdder`` of the lane as an fp32 addend;
        MX: ``MxBlockAccumulator`` of the lane's block sum and scales) of the word read and
        the vector in stage 3; ``sums`` is its result, the stages' latency later."""
        for j in range(self.config.cols):
            if self.config.is_mx:
                add = m.submodules[f"add{j}"] = MxBlockAccumulator(self.config)
                m.d.comb += [add.acc.eq(acc_data[j]), add.sum.eq(x3[j]),
                             add.scale_a.eq(scales.row[2]), add.scale_b.eq(scales.cols[2][j]),
                             sums[j].eq(add.result)]
            else:
                add = m.submodules[f"add{j}"] = FloatAdder(addend_width=24)
                m.d.comb += [add.acc.eq(acc_data[j]),
                             add.product.eq(fp32_addend(m, x3[j], f"y{j}")),
                             sums[j].eq(add.result)]

    def _write_stages(self, m, v3, a3):
        """Floating point, MX: the write's valid and address, the adders' latency after stage
        3 (the word is written then), and the stages' valid bits (for ``busy``)."""
        latency = MxBlockAccumulator.LATENCY if self.config.is_mx else FloatAdder.LATENCY
        vw, aw_ = v3, a3
        stages = []
        for k in range(latency):
            nv, na = Signal(name=f"vw{k}"), Signal(len(a3), name=f"aw{k}")
            m.d.sync += [nv.eq(vw), na.eq(aw_)]
            vw, aw_ = nv, na
            stages.append(nv)
        return vw, aw_, stages

    def _clear_pass(self, m, aw):
        """The clear pass's counter and ``clear_last``; returns the word it zeroes."""
        clr_addr = Signal(aw + 1)
        clr_at = Signal(aw)
        m.d.comb += clr_at.eq(self.clear_base + clr_addr)
        with m.If(self.clear):
            m.d.sync += clr_addr.eq(clr_addr + 1)
            with m.If(clr_addr + 1 >= self.clear_words):
                m.d.comb += self.clear_last.eq(1)
                m.d.sync += clr_addr.eq(0)
        return clr_at


class _ScaleStages:
    """MX: a vector's ``scale_row`` and ``scale_cols`` registered in stages 1, 2 and 3
    (``row[k]``, ``cols[k]`` for stage ``k + 1``), as its block sums are."""

    def __init__(self, m, cols):
        self.row = [Signal(8, name=f"scale_row{k + 1}") for k in range(3)]
        self.cols = [Signal(data.ArrayLayout(unsigned(8), cols), name=f"scale_cols{k + 1}")
                     for k in range(3)]
        m.d.sync += [self.row[k + 1].eq(self.row[k]) for k in range(2)]
        m.d.sync += [self.cols[k + 1].eq(self.cols[k]) for k in range(2)]

    def take(self, payload):
        """The statements that take a vector's scales into stage 1."""
        return [self.row[0].eq(payload.scale_row), self.cols[0].eq(payload.scale_cols)]


def _any(bits):
    """OR of 1-bit values (0 for none)."""
    out = 0
    for b in bits:
        out = out | b
    return out
