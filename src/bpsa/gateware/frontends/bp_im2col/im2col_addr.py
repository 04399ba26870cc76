"""Traditional (explicit) im2col address generation: the baseline of BP-im2col's Table IV.

A traditional accelerator lowers a convolution's backward pass in software (or with a DMA):
the zero-spaced / dilated / im2col matrices are written densely into the buffers, so the
hardware only walks two dense row-major matrices. This block is that walker, for the same
GEMM tiling, stream style and address widths as :mod:`bpsa.gateware.frontends.bp_im2col.generators`'s
``TransposedAddressGenerator`` and ``DilatedAddressGenerator``, so their areas can be compared
(``bpsa synth --top im2col_addr`` against ``--top bp_loss_addr`` / ``--top bp_grad_addr``).

The GEMM ``Cmat = A @ B`` (A: ``M x K`` at ``base_a`` with leading dimension ``lda``; B:
``K x N`` at ``base_b`` with leading dimension ``ldb``, both row-major in their buffers) is
tiled over the ``rows x cols`` input-stationary array, column tile outer, row tile inner::

    for n0 in range(0, N, cols):
        for k0 in range(0, K, rows):
            stream b: rows beats r, lane j: base_b + (k0 + r)*ldb + n0 + j
                      (mask: k0 + r < K and n0 + j < N)
            stream a: M beats m,   lane i: base_a + m*lda + k0 + i      (mask: k0 + i < K)

Addresses are modulo ``2**log2(buf_*_depth)``. The per-beat path has no multiplier: each stream
keeps a registered row address stepped by its leading dimension, a tile base stepped by
``rows`` / ``cols``, and remaining-size counters for the masks and the tile ends; lane ``j`` is
the row address plus the constant ``j``. The only per-layer work is the descriptor check (one
cycle, comparators only).
"""

from amaranth.hdl import Cat, Module, Mux, Signal, unsigned
from amaranth.lib import data, enum, stream
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from bpsa.gateware.common.checked import CheckedComponent
from bpsa.config import Config
from bpsa.gateware.frontends.bp_im2col.generators import lanes_layout, popcount

__all__ = ["COUNTERS", "DESC_FIELDS", "Im2colAddressGenerator", "Im2colError",
           "desc_layout", "mat_width"]

#: Descriptor fields, in layout order (first field at bit 0): the GEMM sizes, the leading
#: dimensions (``mat_width(config)`` bits each), then the bases (address widths).
DESC_FIELDS = ("m", "k", "n", "lda", "ldb", "base_a", "base_b")

#: Counter ports (``count_<name>``), 32 bits, cleared when a descriptor is accepted: the same
#: set as the BP-im2col generators (``*_zeros`` stay 0: no lane is masked as a structural zero,
#: the zeros of a lowered matrix are stored and read like any element).
COUNTERS = ("prologue", "cycles", "a_beats", "a_addrs", "a_words", "a_zeros", "a_stalls",
            "b_beats", "b_addrs", "b_words", "b_zeros", "b_stalls")
COUNTER_WIDTH = 32


class Im2colError(enum.Enum, shape=2):
    """Why a descriptor was refused. ``ZERO_SIZE``: M, K or N is 0. ``BAD_LD``: ``lda < K`` or
    ``ldb < N`` (rows would overlap)."""
    NONE = 0
    ZERO_SIZE = 1
    BAD_LD = 2


def mat_width(config):
    """Bits of the GEMM sizes and leading dimensions: ``2 * dim_width``, enough for the products
    of two layer fields (``K*R*S``, ``H*W``...)."""
    return 2 * config.dim_width


def desc_layout(config):
    mw = mat_width(config)
    fields = {name: unsigned(mw) for name in ("m", "k", "n", "lda", "ldb")}
    fields["base_a"] = unsigned(exact_log2(config.buf_a_depth))
    fields["base_b"] = unsigned(exact_log2(config.buf_b_depth))
    return data.StructLayout(fields)


class Im2colAddressGenerator(CheckedComponent):
    """Dense matrix walker of a traditional im2col accelerator (see the module docstring).

    Members
    -------
    desc : In(stream.Signature(desc_layout(config)))
        GEMM descriptors; accepted (``ready``) only while idle.
    a : Out(stream.Signature({addr: rows x log2(buf_a_depth), mask: rows, last, end}))
        Per tile, the ``M`` slices of A; ``last`` on a tile's last slice, ``end`` on the
        layer's last beat.
    b : Out(stream.Signature({addr: cols x log2(buf_b_depth), mask: cols, last, end}))
        Per tile, ``rows`` beats (rows of the B tile; rows past ``K`` fully masked).
        Both streams: ``valid`` is a register (never depends on ``ready``); a beat is held
        until taken; one beat per cycle each when ready, no bubble between tiles. ``addr`` of a
        masked lane is unspecified; ``mask`` is 0 while ``valid`` is low.
    busy, done, error, error_code, count_* :
        As in :mod:`bpsa.gateware.frontends.bp_im2col.generators`: ``done`` pulses after both streams sent their ``end``
        beat; a refused descriptor sets ``error`` / ``error_code`` (held until the next
        descriptor), sends no beat and returns to idle. Prologue: 1 cycle (the check).
    """

    @classmethod
    def check_parameters(cls, config):
        if not isinstance(config, Config):
            raise TypeError(f"config must be a Config, not {config!r}")

    def __init__(self, config):
        self.config = config
        self.mw = mat_width(config)
        self.aw_a = exact_log2(config.buf_a_depth)
        self.aw_b = exact_log2(config.buf_b_depth)
        members = {
            "desc": In(stream.Signature(desc_layout(config))),
            "a": Out(stream.Signature(lanes_layout(self.aw_a, config.rows))),
            "b": Out(stream.Signature(lanes_layout(self.aw_b, config.cols))),
            "busy": Out(1), "done": Out(1), "error": Out(1), "error_code": Out(Im2colError),
        }
        members.update({f"count_{name}": Out(COUNTER_WIDTH) for name in COUNTERS})
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        d = Signal(desc_layout(self.config))
        start = Signal()

        code = self._check(m, d)
        b_masks = self._stream_b(m, d, start)
        a_masks = self._stream_a(m, d, start)
        counters = {name: getattr(self, f"count_{name}") for name in COUNTERS}
        seen_b = self._control(m, d, start, code, counters)
        self._counters(m, counters, seen_b, a_masks, b_masks)
        return m

    def _check(self, m, d):
        """The descriptor ``d``'s error code (``Im2colError.NONE`` when it is accepted)."""
        code = Signal(Im2colError)
        with m.If((d.m == 0) | (d.k == 0) | (d.n == 0)):
            m.d.comb += code.eq(Im2colError.ZERO_SIZE)
        with m.Elif((d.lda < d.k) | (d.ldb < d.n)):
            m.d.comb += code.eq(Im2colError.BAD_LD)
        with m.Else():
            m.d.comb += code.eq(Im2colError.NONE)
        return code

    def _stream_b(self, m, d, start):
        """Stream b: rows of B tiles, from ``start`` on. Returns the beat's lane masks."""
        cfg, mw, aw_b = self.config, self.mw, self.aw_b
        rows, cols = cfg.rows, cfg.cols
        b = self.b
        ldb = d.ldb[:aw_b]
        b_row = Signal(aw_b)          # base_b + (k0 + r)*ldb + n0
        b_col = Signal(aw_b)          # base_b + n0
        b_krow = Signal(mw)           # k0 + r
        b_nrem = Signal(mw)           # N - n0
        b_ri = Signal(range(rows))    # r
        b_row_ok = b_krow < d.k
        b_masks = [b_row_ok & (b_nrem > j) for j in range(cols)]
        b_tile_end = b_ri == rows - 1
        b_more_k = b_krow + 1 < d.k           # at a tile end: another row tile follows
        b_more_n = b_nrem > cols
        for j in range(cols):
            m.d.comb += b.payload.addr[j].eq(b_row + j)
        m.d.comb += [
            b.payload.mask.eq(Mux(b.valid, Cat(*b_masks), 0)),
            b.payload.last.eq(b_tile_end),
            b.payload.end.eq(b_tile_end & ~b_more_k & ~b_more_n),
        ]
        with m.If(start):
            m.d.sync += [b.valid.eq(1), b_row.eq(d.base_b), b_col.eq(d.base_b), b_krow.eq(0),
                         b_nrem.eq(d.n), b_ri.eq(0)]
        with m.Elif(b.valid & b.ready):
            with m.If(~b_tile_end | b_more_k):
                m.d.sync += [b_ri.eq(Mux(b_tile_end, 0, b_ri + 1)), b_krow.eq(b_krow + 1),
                             b_row.eq(b_row + ldb)]
            with m.Elif(b_more_n):
                m.d.sync += [b_ri.eq(0), b_krow.eq(0), b_nrem.eq(b_nrem - cols),
                             b_col.eq(b_col + cols), b_row.eq(b_col + cols)]
            with m.Else():
                m.d.sync += b.valid.eq(0)
        return b_masks

    def _stream_a(self, m, d, start):
        """Stream a: slices of A, from ``start`` on. Returns the beat's lane masks."""
        cfg, mw, aw_a = self.config, self.mw, self.aw_a
        rows, cols = cfg.rows, cfg.cols
        a = self.a
        lda = d.lda[:aw_a]
        a_row = Signal(aw_a)          # base_a + m*lda + k0
        a_tile = Signal(aw_a)         # base_a + k0
        a_m = Signal(mw)              # m
        a_krem = Signal(mw)           # K - k0
        a_nrem = Signal(mw)           # N - n0
        a_masks = [a_krem > i for i in range(rows)]
        a_last = a_m + 1 == d.m
        a_more_k = a_krem > rows
        a_more_n = a_nrem > cols
        for i in range(rows):
            m.d.comb += a.payload.addr[i].eq(a_row + i)
        m.d.comb += [
            a.payload.mask.eq(Mux(a.valid, Cat(*a_masks), 0)),
            a.payload.last.eq(a_last),
            a.payload.end.eq(a_last & ~a_more_k & ~a_more_n),
        ]
        with m.If(start):
            m.d.sync += [a.valid.eq(1), a_row.eq(d.base_a), a_tile.eq(d.base_a), a_m.eq(0),
                         a_krem.eq(d.k), a_nrem.eq(d.n)]
        with m.Elif(a.valid & a.ready):
            with m.If(~a_last):
                m.d.sync += [a_m.eq(a_m + 1), a_row.eq(a_row + lda)]
            with m.Elif(a_more_k):
                m.d.sync += [a_m.eq(0), a_krem.eq(a_krem - rows), a_tile.eq(a_tile + rows),
                             a_row.eq(a_tile + rows)]
            with m.Elif(a_more_n):
                m.d.sync += [a_m.eq(0), a_krem.eq(d.k), a_nrem.eq(a_nrem - cols),
                             a_tile.eq(d.base_a), a_row.eq(d.base_a)]
            with m.Else():
                m.d.sync += a.valid.eq(0)
        return a_masks

    def _control(self, m, d, start, code, counters):
        """The control FSM: IDLE takes a descriptor into ``d`` (clearing the counters), CHECK
        refuses it (``code``) or pulses ``start``, RUN waits for both streams to end. Returns
        ``seen_b`` (a b beat since the descriptor)."""
        seen_b = Signal()
        m.d.sync += self.done.eq(0)
        with m.FSM():
            with m.State("IDLE"):
                m.d.comb += self.desc.ready.eq(1)
                with m.If(self.desc.valid):
                    m.d.sync += [d.eq(self.desc.payload), self.error.eq(0),
                                 self.error_code.eq(Im2colError.NONE), seen_b.eq(0)]
                    m.d.sync += [c.eq(0) for c in counters.values()]
                    m.next = "CHECK"
            with m.State("CHECK"):
                m.d.comb += self.busy.eq(1)
                with m.If(code != Im2colError.NONE):
                    m.d.sync += [self.error.eq(1), self.error_code.eq(code)]
                    m.next = "IDLE"
                with m.Else():
                    m.d.comb += start.eq(1)
                    m.next = "RUN"
            with m.State("RUN"):
                m.d.comb += self.busy.eq(1)
                with m.If(~self.a.valid & ~self.b.valid):
                    m.d.sync += self.done.eq(1)
                    m.next = "IDLE"
        return seen_b

    def _counters(self, m, counters, seen_b, a_masks, b_masks):
        """The performance counters: cycles, prologue, and per stream stalls, beats, addresses
        and words."""
        with m.If(self.busy):
            m.d.sync += counters["cycles"].eq(counters["cycles"] + 1)
            with m.If(self.b.valid):
                m.d.sync += seen_b.eq(1)
            with m.Elif(~seen_b):
                m.d.sync += counters["prologue"].eq(counters["prologue"] + 1)
        for side, masks in (("a", a_masks), ("b", b_masks)):
            port = getattr(self, side)
            with m.If(port.valid & ~port.ready):
                c = counters[f"{side}_stalls"]
                m.d.sync += c.eq(c + 1)
            with m.If(port.valid & port.ready):
                words = popcount(masks)
                for name, inc in (("beats", 1), ("addrs", words), ("words", words)):
                    c = counters[f"{side}_{name}"]
                    m.d.sync += c.eq(c + inc)
