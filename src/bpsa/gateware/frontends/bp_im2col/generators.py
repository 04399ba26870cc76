"""BP-im2col address generation: the loss and the weight gradient of a convolution layer on an
input-stationary array, straight from the compact dY, W and X, without any zero-spaced copy.

Source: Yang et al., *BP-Im2col* (Sec. III: virtual matrices, NZ detection Eqs. 2-4,
Algorithms 1-2, Fig. 5), generalized to every stride, padding (also larger than ``d(R-1)``,
which crops dY), dilation, rectangular kernels and inputs, per axis.

The GEMM ``Cmat = A @ B`` (A: ``M x Kg``, B: ``Kg x Ng``) is tiled over the ``rows x cols``
array, column tile outer, row tile inner::

    for nt in range(ceil(Ng / cols)):          # B columns nt*cols ...
        for kt in range(ceil(Kg / rows)):      # B rows / A columns kt*rows ...
            stream b: rows beats, B[kt*rows + i, nt*cols : nt*cols + cols]   (cols lanes)
            stream a: the M slices A[m, kt*rows : kt*rows + rows]             (rows lanes)

================  ==========================  ===============================  ================
generator         a (dynamic, buffer A)        b (stationary, buffer B)         M, Kg, Ng
================  ==========================  ===============================  ================
Transposed (dX)   W rotated 180 degrees,       virtual zero-spaced dY: rows     C, K*R*S, N*H*W
                  channel-transposed; dense    (k, r, q), columns (n, h, w)
Dilated (dW)      virtual dilated dY: rows     im2col of X: rows (n, i, j),     K, N*Hd*Wd, C*R*S
                  k, columns (n, i, j)         columns (c, r, q)
================  ==========================  ===============================  ================

Every address is the flat (C-order) index of the element in its compact NCHW / KCRS tensor,
exactly ``bpsa.models.golden``'s ``a_src`` / ``b_src``; ``bpsa.models.bp_im2col_model`` is the
beat-exact reference. No divider is used anywhere: the generators step the mixed-radix coordinates
(n, h, w), (k, r, q), (n, i, j), (c, r, q) and keep every virtual coordinate pre-divided by
the stride as a quotient/phase pair, so the NZ test of a lane is one small addition per axis.
The only divisions (``-(d(R-1) - p)`` and ``d`` by ``s``, per axis, for the transposed mode)
are done once per layer in the prologue by stepping the quotient, ``|quotient|`` cycles; the
per-layer products (``OH*OW``, ``K*OH*OW``, ``R*S``, ...) and the descriptor checks take a
3-cycle pipeline of multipliers, also once per layer.

Structure of a stream: a registered mixed-radix counter per lane, loaded once per tile from a
combinational chain of one-step incrementers (lane ``j+1`` = lane ``j`` + 1, the next tile
continuing from the last lane), and for the B operand one more counter for the row, stepped
per beat. The chain (``cols`` or ``rows`` incrementers deep) is the longest combinational
path; it could be pipelined, since its result is needed only once per tile.
"""

from amaranth.hdl import Cat, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, stream
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from bpsa.config import require_config
from bpsa.gateware.common.checked import CheckedComponent
from bpsa.gateware.common.enums import hw_enum
from bpsa.spec import errors

__all__ = [
    "BPError", "DESC_FIELDS", "COUNTERS", "layer_layout",
    "TransposedAddressGenerator", "DilatedAddressGenerator", "TransposedMap", "DilatedMap",
    "MaskExpander", "CrossbarRecovery",
]

#: Descriptor fields, each ``dim_width`` bits, in layout order (first field at bit 0):
#: X is ``n x c x h x w``, W is ``k x c x r x s``, dY is ``n x k x oh x ow``. ``pad_h`` is the
#: top padding of X, ``pad_bottom`` its bottom padding (asymmetric padding: the accelerator
#: cuts layers into row bands with it); ``pad_w`` pads left and right.
DESC_FIELDS = ("n", "c", "h", "w", "k", "r", "s", "oh", "ow",
               "stride_h", "stride_w", "pad_h", "pad_w", "dil_h", "dil_w", "pad_bottom")

#: Counter ports (``count_<name>``), 32 bits, cleared when a descriptor is accepted.
COUNTERS = ("prologue", "cycles", "a_beats", "a_addrs", "a_words", "a_zeros", "a_stalls",
            "b_beats", "b_addrs", "b_words", "b_zeros", "b_stalls")
COUNTER_WIDTH = 32


#: Why a descriptor was refused (``error_code``; ``error`` is set with it):
#: :class:`bpsa.spec.errors.BPError`.
BPError = hw_enum(errors.BPError, 3)


def layer_layout(config):
    """The layer descriptor: :data:`DESC_FIELDS`, each ``config.dim_width`` bits."""
    return data.StructLayout({name: unsigned(config.dim_width) for name in DESC_FIELDS})


def lanes_layout(addr_width, lanes):
    return data.StructLayout({
        "addr": data.ArrayLayout(unsigned(addr_width), lanes),
        "mask": unsigned(lanes),
        "last": 1,
        "end": 1,
    })


def popcount(bits):
    total = 0
    for b in bits:
        total = total + b
    return total


def _sat(value, width):
    """``value`` clamped to ``2**width - 1`` (so later products stay narrow)."""
    top = (1 << width) - 1
    return Mux(value > top, top, value)[:width]


class _AddressGenerator(CheckedComponent):
    """Shared descriptor handshake, checks, prologue, counters and status.

    Members
    -------
    desc : In(stream.Signature(layer_layout(config)))
        Layer descriptors; accepted (``ready``) only while idle. A layer runs from acceptance
        until both ``a`` and ``b`` have sent their ``end`` beat, or until it is refused.
    a, b : Out(stream.Signature(...))
        Address streams (see the subclasses). ``valid`` never depends on ``ready``; a beat is
        held until it is taken, so backpressure loses nothing. Both streams run
        independently, one beat per cycle each when ready.
    busy : Out(1)
        A descriptor is being checked or run.
    done : Out(1)
        One-cycle pulse after a layer's last beats were taken.
    error : Out(1), error_code : Out(BPError)
        Set when a descriptor is refused (no beat is sent; the generator returns to idle);
        held until the next descriptor is accepted.
    count_prologue : Out(32)
        Cycles from the descriptor handshake to the first valid ``b`` beat.
    count_cycles : Out(32)
        Cycles from the handshake to the end of the layer.
    count_{a,b}_beats, _addrs, _words, _zeros, _stalls : Out(32)
        Per stream: beats taken; addresses sent to the buffer; elements read (set mask bits);
        lanes inside the matrix masked as structural zeros (never read); cycles a beat was
        valid but not taken (backpressure).
    """

    _a_elems = _b_elems = None    # tensor sizes checked against buffer A / B (set by subclass)

    @classmethod
    def check_parameters(cls, config, *args, **kwargs):
        require_config(config)

    def __init__(self, config, a_layout, b_layout):
        self.config = config
        self.dw = config.dim_width
        self.vw = config.dim_width + 4          # signed virtual coordinates
        self.aw_a = exact_log2(config.buf_a_depth)
        self.aw_b = exact_log2(config.buf_b_depth)
        members = {
            "desc": In(stream.Signature(layer_layout(config))),
            "a": Out(stream.Signature(a_layout)),
            "b": Out(stream.Signature(b_layout)),
            "busy": Out(1), "done": Out(1), "error": Out(1), "error_code": Out(BPError),
        }
        members.update({f"count_{name}": Out(COUNTER_WIDTH) for name in COUNTERS})
        super().__init__(members)

    # --- descriptor checks and per-layer constants (a 3-stage pipeline) -------------------------

    def _checks(self, m, d):
        dw = self.dw
        aw = max(self.aw_a, self.aw_b)
        k = _Regs()
        # Stage 0: from the latched descriptor.
        s0 = {
            "zero_size": unsigned(1), "zero_step": unsigned(1),
            "drh": unsigned(2 * dw), "drw": unsigned(2 * dw),
            "soh": unsigned(2 * dw), "sow": unsigned(2 * dw),
            "hp": unsigned(dw + 2), "wp": unsigned(dw + 2),
            "ohow": unsigned(2 * dw), "rs": unsigned(2 * dw), "hw": unsigned(2 * dw),
            "dwh": unsigned(2 * dw), "pwh": unsigned(2 * dw),
        }
        k.add(s0)
        m.d.sync += [
            k.zero_size.eq(sum((d[f] == 0) for f in ("n", "c", "h", "w", "k", "r", "s",
                                                     "oh", "ow")) != 0),
            k.zero_step.eq((d.stride_h == 0) | (d.stride_w == 0) | (d.dil_h == 0)
                           | (d.dil_w == 0)),
            k.drh.eq(d.dil_h * (d.r - 1)), k.drw.eq(d.dil_w * (d.s - 1)),
            k.soh.eq(d.stride_h * (d.oh - 1)), k.sow.eq(d.stride_w * (d.ow - 1)),
            k.hp.eq(d.h + d.pad_h + d.pad_bottom), k.wp.eq(d.w + 2 * d.pad_w),
            k.ohow.eq(d.oh * d.ow), k.rs.eq(d.r * d.s), k.hw.eq(d.h * d.w),
            k.dwh.eq(d.dil_h * d.w), k.pwh.eq(d.pad_h * d.w),
        ]
        # Stage 1.
        k.add({
            "too_big": unsigned(1), "mismatch": unsigned(1),
            "kohow": unsigned(aw + 1 + dw), "crs": unsigned(3 * dw),
            "chw": unsigned(aw + 1 + dw), "nhw": unsigned(3 * dw),
        })
        lh = k.hp - k.drh - 1
        lw = k.wp - k.drw - 1
        m.d.sync += [
            k.too_big.eq((k.drh + 1 > k.hp) | (k.drw + 1 > k.wp)),
            k.mismatch.eq((k.soh > lh) | (lh - k.soh >= d.stride_h)
                          | (k.sow > lw) | (lw - k.sow >= d.stride_w)),
            k.kohow.eq(d.k * _sat(k.ohow, aw + 1)),
            k.crs.eq(d.c * k.rs),
            k.chw.eq(d.c * _sat(k.hw, aw + 1)),
            k.nhw.eq(d.n * k.hw),
        ]
        # Stage 2 (combinational, used in the last check cycle).
        sizes = {
            "dy": d.n * _sat(k.kohow, aw + 1),
            "w": d.k * _sat(k.crs, aw + 1),
            "x": d.n * _sat(k.chw, aw + 1),
        }
        code = Signal(BPError)
        with m.If(k.zero_size):
            m.d.comb += code.eq(BPError.ZERO_SIZE)
        with m.Elif(k.zero_step):
            m.d.comb += code.eq(BPError.ZERO_STEP)
        with m.Elif(k.too_big):
            m.d.comb += code.eq(BPError.KERNEL_TOO_LARGE)
        with m.Elif(k.mismatch):
            m.d.comb += code.eq(BPError.SHAPE_MISMATCH)
        with m.Elif(sizes[self._a_elems] > self.config.buf_a_depth):
            m.d.comb += code.eq(BPError.A_OVERFLOW)
        with m.Elif(sizes[self._b_elems] > self.config.buf_b_depth):
            m.d.comb += code.eq(BPError.B_OVERFLOW)
        with m.Else():
            m.d.comb += code.eq(BPError.NONE)
        return k, code

    # --- hooks ------------------------------------------------------------------------------------

    def _prepare(self, m, d, k, init):
        """Per-layer preparation after the checks; returns ``(ready, consts)``: a 1-bit "ready
        to start" value and what ``_walkers`` needs of it. ``init`` is high in the last check
        cycle."""
        return 1, None

    def _walkers(self, m, d, k, start, consts):
        """Build the two stream walkers; ``start`` loads their first beats."""
        raise NotImplementedError

    # --- control ----------------------------------------------------------------------------------

    def elaborate(self, platform):
        m = Module()
        d = Signal(layer_layout(self.config))
        k, code = self._checks(m, d)
        start = Signal()
        init = Signal()
        ready_to_start, consts = self._prepare(m, d, k, init)
        self._walkers(m, d, k, start, consts)

        counters = {name: getattr(self, f"count_{name}") for name in COUNTERS}
        seen_b = Signal()
        m.d.comb += self.busy.eq(0)
        m.d.sync += self.done.eq(0)
        with m.FSM():
            with m.State("IDLE"):
                m.d.comb += self.desc.ready.eq(1)
                with m.If(self.desc.valid):
                    m.d.sync += [d.eq(self.desc.payload), self.error.eq(0),
                                 self.error_code.eq(BPError.NONE), seen_b.eq(0)]
                    m.d.sync += [c.eq(0) for c in counters.values()]
                    m.next = "CHECK0"
            with m.State("CHECK0"):
                m.d.comb += self.busy.eq(1)
                m.next = "CHECK1"
            with m.State("CHECK1"):
                m.d.comb += self.busy.eq(1)
                m.next = "CHECK2"
            with m.State("CHECK2"):
                m.d.comb += self.busy.eq(1)
                with m.If(code != BPError.NONE):
                    m.d.sync += [self.error.eq(1), self.error_code.eq(code)]
                    m.next = "IDLE"
                with m.Else():
                    m.d.comb += init.eq(1)
                    m.next = "PREP"
            with m.State("PREP"):
                m.d.comb += self.busy.eq(1)
                with m.If(ready_to_start):
                    m.d.comb += start.eq(1)
                    m.next = "RUN"
            with m.State("RUN"):
                m.d.comb += self.busy.eq(1)
                with m.If(~self.a.valid & ~self.b.valid):
                    m.d.sync += self.done.eq(1)
                    m.next = "IDLE"

        with m.If(self.busy):
            m.d.sync += counters["cycles"].eq(counters["cycles"] + 1)
            with m.If(self.b.valid):
                m.d.sync += seen_b.eq(1)
            with m.Elif(~seen_b):
                m.d.sync += counters["prologue"].eq(counters["prologue"] + 1)
        return m

    def _count(self, m, side, *, addrs, words, zeros):
        """Counter updates of stream ``side`` on a handshake."""
        port = getattr(self, side)
        with m.If(port.valid & ~port.ready):
            c = getattr(self, f"count_{side}_stalls")
            m.d.sync += c.eq(c + 1)
        with m.If(port.valid & port.ready):
            for name, inc in (("beats", 1), ("addrs", addrs), ("words", words),
                              ("zeros", zeros)):
                c = getattr(self, f"count_{side}_{name}")
                m.d.sync += c.eq(c + inc)


class _Regs:
    """A namespace of named registers (``Signal`` attributes)."""

    def add(self, shapes):
        for name, shape in shapes.items():
            setattr(self, name, Signal(shape, name=f"k_{name}"))


def _chain(m, layout, seed, step, count, name):
    """``count`` signals: ``seed``, ``step(seed)``, ``step(step(seed))``, ... Each stage is a
    signal, so the simulator sees no exponential expression tree."""
    stages = [seed]
    for j in range(1, count):
        stage = Signal(layout, name=f"{name}_{j}")
        step(m, stage, stages[-1])
        stages.append(stage)
    return stages


def _b_walker(m, port, *, rows, cols, start, row_layout, row_origin, row_step, lane_layout,
              lane_origin, lane_step, beat, name):
    """Stream ``port`` of a B operand: per tile, ``rows`` beats (B rows), ``cols`` lanes.

    The B row coordinate is one mixed-radix counter stepped per beat across the row tiles of
    a column tile; the lane coordinates are registered per column tile and the next column
    tile's lanes are the continuation of the last lane. ``beat(row, lanes)`` returns the
    per-lane ``(addr, mask, inside)`` values. Returns ``(mask, inside)`` bit lists.
    """
    row = Signal(row_layout, name=f"{name}_row")
    row_next = Signal(row_layout, name=f"{name}_row_next")
    row_step(m, row_next, row)
    row_org = Signal(row_layout, name=f"{name}_row_org")
    row_origin(m, row_org)
    lanes = [Signal(lane_layout, name=f"{name}_lane{j}") for j in range(cols)]
    lane_org = Signal(lane_layout, name=f"{name}_lane_org")
    lane_origin(m, lane_org)
    lane_next = Signal(lane_layout, name=f"{name}_lane_next")
    lane_step(m, lane_next, lanes[-1])
    seed = Signal(lane_layout, name=f"{name}_seed")
    m.d.comb += seed.eq(Mux(start, lane_org.as_value(), lane_next.as_value()))
    chain = _chain(m, lane_layout, seed, lane_step, cols, f"{name}_chain")
    ri = Signal(range(rows), name=f"{name}_ri")

    masks, insides = [], []
    for j, (addr, mask, inside) in enumerate(beat(row, lanes)):
        m.d.comb += port.payload.addr[j].eq(addr)
        masks.append(mask)
        insides.append(inside)
    tile_end = ri == rows - 1
    m.d.comb += [
        port.payload.mask.eq(Mux(port.valid, _cat(masks), 0)),
        port.payload.last.eq(tile_end),
        port.payload.end.eq(tile_end & ~row_next.valid & ~lane_next.valid),
    ]
    load = [lane.eq(stage) for lane, stage in zip(lanes, chain)]
    with m.If(start):
        m.d.sync += [port.valid.eq(1), ri.eq(0), row.eq(row_org)] + load
    with m.Elif(port.valid & port.ready):
        with m.If(~tile_end):
            m.d.sync += [ri.eq(ri + 1), row.eq(row_next)]
        with m.Else():
            m.d.sync += ri.eq(0)
            with m.If(row_next.valid):
                m.d.sync += row.eq(row_next)
            with m.Elif(lane_next.valid):
                m.d.sync += [row.eq(row_org)] + load
            with m.Else():
                m.d.sync += port.valid.eq(0)
    return masks, insides


def _a_walker(m, port, *, rows, cols, start, n_slices, slice_step, ng, lane_layout,
              lane_origin, lane_step, beat, name):
    """Stream ``port`` of an A operand: per tile, the ``n_slices`` slices ``A[m, kt*rows ...]``.

    The lane coordinates (A columns) are registered per row tile; the next row tile's lanes
    continue from the last lane, and restart from the origin for the next column tile, of
    which there are ``ceil(ng / cols)``. ``mpart`` is ``m * slice_step``, modulo the address
    width. ``beat(lanes, mpart, slice_reset)`` drives the payload (except ``last``/``end``)
    and returns ``slice_end``; its slice state resets on ``slice_reset``.
    """
    lanes = [Signal(lane_layout, name=f"{name}_lane{i}") for i in range(rows)]
    lane_org = Signal(lane_layout, name=f"{name}_lane_org")
    lane_origin(m, lane_org)
    lane_next = Signal(lane_layout, name=f"{name}_lane_next")
    lane_step(m, lane_next, lanes[-1])
    seed = Signal(lane_layout, name=f"{name}_seed")
    m.d.comb += seed.eq(Mux(start | ~lane_next.valid, lane_org.as_value(),
                            lane_next.as_value()))
    chain = _chain(m, lane_layout, seed, lane_step, rows, f"{name}_chain")
    mi = Signal(len(n_slices), name=f"{name}_m")
    mpart = Signal(len(slice_step), name=f"{name}_mpart")
    ng_base = Signal(len(ng) + 1, name=f"{name}_ng_base")
    last_nt = ng_base + cols >= ng
    slice_reset = Signal(name=f"{name}_slice_reset")
    slice_end = beat(lanes, mpart, slice_reset)
    last = slice_end & (mi == n_slices - 1)
    m.d.comb += [
        port.payload.last.eq(last),
        port.payload.end.eq(last & ~lane_next.valid & last_nt),
    ]
    load = [lane.eq(stage) for lane, stage in zip(lanes, chain)]
    handshake = port.valid & port.ready
    m.d.comb += slice_reset.eq(start | (handshake & slice_end))
    with m.If(start):
        m.d.sync += [port.valid.eq(1), mi.eq(0), mpart.eq(0), ng_base.eq(0)] + load
    with m.Elif(handshake & slice_end):
        with m.If(~last):
            m.d.sync += [mi.eq(mi + 1), mpart.eq(mpart + slice_step)]
        with m.Else():
            m.d.sync += [mi.eq(0), mpart.eq(0)]
            with m.If(lane_next.valid):
                m.d.sync += load
            with m.Elif(~last_nt):
                m.d.sync += [ng_base.eq(ng_base + cols)] + load
            with m.Else():
                m.d.sync += port.valid.eq(0)


def _cat(bits):
    return Cat(*bits)


def _wrap_step(m, dst_p, dst_v, src_p, src_v, s, *, extra=None):
    """Quotient/phase increment by one: ``(v, p) + 1`` with phase modulo ``s``; ``extra`` is a
    list of (dst, src, delta) stepped by ``delta`` when the quotient steps."""
    with m.If(src_p + 1 == s):
        m.d.comb += dst_p.eq(0)
        if dst_v is not None:
            m.d.comb += dst_v.eq(src_v + 1)
        for dst, src, delta in extra or ():
            m.d.comb += dst.eq(src + delta)
    with m.Else():
        m.d.comb += dst_p.eq(src_p + 1)


class TransposedMap:
    """Virtual-B coordinate arithmetic of the transposed mode: the lane (B column ``(n, h,
    w)``) and row (B row ``(k, r, q)``) counters, their one-step increments, and a lane's NZ
    test and compact address. Shared by :class:`TransposedAddressGenerator` and its formal
    check against the division-based definitions.

    Invariants (``pad_lo = d(R-1) - p`` per axis, floor division, addresses mod
    ``2**aw``): lane ``h - pad_lo_h = vh*s_h + ph`` with ``0 <= ph < s_h`` (likewise ``w``),
    ``npart = n*K*OH*OW``, ``hpart = npart + vh*OW``; row ``r*d_h = vr*s_h + pr``,
    ``q*d_w = vq*s_w + pq``, ``kpart = k*OH*OW``, ``rpart = kpart + vr*OW``; ``valid`` while
    the coordinate is inside the matrix. The per-layer constants are the pairs
    ``org_h = (vh0, ph0, vh0*OW)`` of ``-pad_lo_h``, ``org_w = (vw0, pw0)``, ``tap_h = (dq,
    dr, dq*OW)`` of ``d_h``, ``tap_w = (dq, dr)``.
    """

    def __init__(self, d, *, dw, aw, ohow, kohow, org_h, org_w, tap_h, tap_w):
        self.d, self.dw, self.vw, self.aw = d, dw, dw + 4, aw
        self.ow = d.ow[:aw] if dw > aw else d.ow
        self.ohow, self.kohow = ohow[:aw], kohow[:aw]
        self.org_h, self.org_w, self.tap_h, self.tap_w = org_h, org_w, tap_h, tap_w
        vw = self.vw
        self.lane_layout = data.StructLayout({
            "valid": 1, "n": dw, "h": dw, "w": dw,
            "vh": signed(vw), "ph": dw, "vw": signed(vw), "pw": dw,
            "npart": aw, "hpart": aw,
        })
        self.row_layout = data.StructLayout({
            "valid": 1, "k": dw, "r": dw, "q": dw,
            "vr": signed(vw), "pr": dw, "vq": signed(vw), "pq": dw,
            "kpart": aw, "rpart": aw,
        })

    def lane_origin(self, m, o):
        vh0, ph0, vh0ow = self.org_h
        vw0, pw0 = self.org_w[:2]
        m.d.comb += [o.valid.eq(1), o.n.eq(0), o.h.eq(0), o.w.eq(0),
                     o.vh.eq(vh0), o.ph.eq(ph0), o.vw.eq(vw0), o.pw.eq(pw0),
                     o.npart.eq(0), o.hpart.eq(vh0ow)]

    def lane_step(self, m, o, i):
        """``o`` = the lane after ``i`` (``w`` fastest); ``valid`` drops past the last image."""
        d, ow, kohow = self.d, self.ow, self.kohow
        vh0, ph0, vh0ow = self.org_h
        vw0, pw0 = self.org_w[:2]
        m.d.comb += o.eq(i)
        with m.If(i.w + 1 == d.w):
            m.d.comb += [o.w.eq(0), o.vw.eq(vw0), o.pw.eq(pw0)]
            with m.If(i.h + 1 == d.h):
                m.d.comb += [o.h.eq(0), o.vh.eq(vh0), o.ph.eq(ph0), o.n.eq(i.n + 1),
                             o.npart.eq(i.npart + kohow),
                             o.hpart.eq(i.npart + kohow + vh0ow)]
                with m.If(i.n + 1 == d.n):
                    m.d.comb += o.valid.eq(0)
            with m.Else():
                m.d.comb += o.h.eq(i.h + 1)
                _wrap_step(m, o.ph, o.vh, i.ph, i.vh, d.stride_h,
                           extra=[(o.hpart, i.hpart, ow)])
        with m.Else():
            m.d.comb += o.w.eq(i.w + 1)
            _wrap_step(m, o.pw, o.vw, i.pw, i.vw, d.stride_w)

    def row_origin(self, m, o):
        m.d.comb += [o.eq(0), o.valid.eq(1)]

    def row_step(self, m, o, i):
        """``o`` = the row after ``i`` (``q`` fastest); ``valid`` drops past the last ``k``."""
        d, ow, ohow = self.d, self.ow, self.ohow
        dqh, drh, dqh_ow = self.tap_h
        dqw, drw = self.tap_w[:2]
        m.d.comb += o.eq(i)
        with m.If(i.q + 1 == d.s):
            m.d.comb += [o.q.eq(0), o.vq.eq(0), o.pq.eq(0)]
            with m.If(i.r + 1 == d.r):
                m.d.comb += [o.r.eq(0), o.vr.eq(0), o.pr.eq(0), o.k.eq(i.k + 1),
                             o.kpart.eq(i.kpart + ohow), o.rpart.eq(i.kpart + ohow)]
                with m.If(i.k + 1 == d.k):
                    m.d.comb += o.valid.eq(0)
            with m.Else():
                t = i.pr + drh
                carry = t >= d.stride_h
                m.d.comb += [o.r.eq(i.r + 1),
                             o.pr.eq(t - Mux(carry, d.stride_h, 0)),
                             o.vr.eq(i.vr + dqh + carry),
                             o.rpart.eq(i.rpart + dqh_ow + Mux(carry, ow, 0))]
        with m.Else():
            t = i.pq + drw
            carry = t >= d.stride_w
            m.d.comb += [o.q.eq(i.q + 1),
                         o.pq.eq(t - Mux(carry, d.stride_w, 0)),
                         o.vq.eq(i.vq + dqw + carry)]

    def lane_output(self, m, row, lane, name):
        """``(addr, nz, inside)`` of B element (row, lane): virtual position ``z = (vh + vr)*s +
        ph + pr`` per axis; zero-space when ``z < 0`` (area 0: top/left padding), off the
        stride grid or past the last dY pixel (area 1); ``addr`` is the compact dY address."""
        d, vw = self.d, self.vw
        sph = Signal(self.dw + 1, name=f"{name}_sph")
        spw = Signal(self.dw + 1, name=f"{name}_spw")
        m.d.comb += [sph.eq(lane.ph + row.pr), spw.eq(lane.pw + row.pq)]
        ch = sph >= d.stride_h
        cw = spw >= d.stride_w
        on_grid = ((sph == 0) | (sph == d.stride_h)) & ((spw == 0) | (spw == d.stride_w))
        vht = Signal(signed(vw + 1), name=f"{name}_vh")
        vwt = Signal(signed(vw + 1), name=f"{name}_vw")
        m.d.comb += [vht.eq(lane.vh + row.vr + ch), vwt.eq(lane.vw + row.vq + cw)]
        in_map = (vht >= 0) & (vht < d.oh) & (vwt >= 0) & (vwt < d.ow)
        inside = lane.valid & row.valid
        addr = (lane.hpart + row.rpart + Mux(ch, self.ow, 0) + lane.vw + row.vq + cw)
        return addr[:self.aw], inside & on_grid & in_map, inside


class TransposedAddressGenerator(_AddressGenerator):
    """BP-im2col transposed mode: operand addresses of the loss ``dX`` (Algorithm 1,
    generalized), with no zero-inserted or zero-padded dY.

    Stream ``b`` (buffer B holds the compact dY, ``N x K x OH x OW``): the virtual stationary
    matrix B of ``bpsa.models.golden.lower_input_grad``, ``(K*R*S) x (N*H*W)``. Each beat is one row
    of a B tile: ``cols`` lanes, lane ``j`` = column ``nt*cols + j``. A lane is tested for area
    0 (virtual row/column before the first dY pixel: the top/left padding) and area 1
    (off the stride grid: inserted zeros; past the last pixel: bottom/right padding and
    remainder); zero lanes and lanes outside the matrix have their ``mask`` bit clear and are
    never read, the others carry the flat dY address. Per tile ``rows`` beats, the rows past
    ``K*R*S`` fully masked.

    Stream ``a`` (buffer A holds the compact W, ``K x C x R x S``): matrix A ``C x (K*R*S)``,
    ``A[c, (k, r, q)] = W[k, c, R-1-r, S-1-q]``, by addressing alone. Per tile, ``C`` beats
    (``m = c``), lane ``i`` = column ``kt*rows + i``; lanes past ``K*R*S`` masked.

    Payloads: ``addr`` (per lane, ``log2(buf_*_depth)`` bits; unspecified where the mask bit is
    clear), ``mask``, ``last`` (last beat of a tile), ``end`` (last beat of the layer).

    Timing: one beat per cycle on each stream when ready, no bubble between tiles; the
    prologue is 4 cycles plus ``|q|`` for the largest quotient ``q`` of the per-layer
    divisions ``(p - d(R-1)) / s`` and ``d / s`` (per axis), stepped one unit a cycle.
    """

    _a_elems = "w"
    _b_elems = "dy"

    def __init__(self, config):
        super().__init__(config,
                         lanes_layout(exact_log2(config.buf_a_depth), config.rows),
                         lanes_layout(exact_log2(config.buf_b_depth), config.cols))

    def _prepare(self, m, d, k, init):
        """Normalize, per axis, ``p - d(R-1)`` (virtual offset of input pixel 0) and ``d`` (tap
        step) into ``quotient * s + phase`` with ``0 <= phase < s``, one unit of quotient per
        cycle; the quotients are also kept scaled by ``OW`` for the address."""
        vw, aw = self.vw, self.aw_b
        norm = {}
        done = []
        for axis, stride, pad, dil, drk in (("h", d.stride_h, d.pad_h, d.dil_h, k.drh),
                                            ("w", d.stride_w, d.pad_w, d.dil_w, k.drw)):
            for kind, x0 in (("org", pad - drk), ("tap", dil)):
                x = Signal(signed(vw), name=f"norm_{kind}{axis}_x")
                v = Signal(signed(vw), name=f"norm_{kind}{axis}_v")
                vs = Signal(aw, name=f"norm_{kind}{axis}_vow")    # v * OW (used for h)
                norm[kind + axis] = (v, x, vs)
                with m.If(init):
                    m.d.sync += [x.eq(x0), v.eq(0), vs.eq(0)]
                with m.Elif(x < 0):
                    m.d.sync += [x.eq(x + stride), v.eq(v - 1), vs.eq(vs - d.ow)]
                with m.Elif(x >= stride):
                    m.d.sync += [x.eq(x - stride), v.eq(v + 1), vs.eq(vs + d.ow)]
                done.append((x >= 0) & (x < stride))
        ok = Signal()
        m.d.comb += ok.eq(sum(done) == len(done))
        return ok, norm

    def _walkers(self, m, d, k, start, norm):
        cfg, dw = self.config, self.dw
        aw_a = self.aw_a

        # --- stream b: virtual zero-spaced dY -------------------------------------------------
        tm = TransposedMap(d, dw=dw, aw=self.aw_b, ohow=k.ohow, kohow=k.kohow,
                           org_h=norm["orgh"], org_w=norm["orgw"],
                           tap_h=norm["taph"], tap_w=norm["tapw"])

        def b_beat(row, lanes):
            return [tm.lane_output(m, row, lane, f"b{j}") for j, lane in enumerate(lanes)]

        masks, insides = _b_walker(
            m, self.b, rows=cfg.rows, cols=cfg.cols, start=start,
            row_layout=tm.row_layout, row_origin=tm.row_origin, row_step=tm.row_step,
            lane_layout=tm.lane_layout, lane_origin=tm.lane_origin, lane_step=tm.lane_step,
            beat=b_beat, name="b")
        words = popcount(masks)
        self._count(m, "b", addrs=words, words=words,
                    zeros=popcount(i & ~mk for i, mk in zip(insides, masks)))

        # --- stream a: W rotated and channel-transposed -------------------------------------
        # Lane (A column): (k, r, q); addr = k*C*R*S + (R*S - 1 - (r*S + q)) (mod 2**aw_a).
        rs = k.rs[:aw_a]
        crs_rs1 = (k.crs + k.rs - 1)[:aw_a]
        a_layout = data.StructLayout({"valid": 1, "k": dw, "r": dw, "q": dw, "addr": aw_a})

        def a_origin(m, o):
            m.d.comb += [o.valid.eq(1), o.k.eq(0), o.r.eq(0), o.q.eq(0), o.addr.eq(rs - 1)]

        def a_step(m, o, i):
            m.d.comb += [o.eq(i), o.addr.eq(i.addr - 1)]
            with m.If(i.q + 1 == d.s):
                m.d.comb += o.q.eq(0)
                with m.If(i.r + 1 == d.r):
                    m.d.comb += [o.r.eq(0), o.k.eq(i.k + 1), o.addr.eq(i.addr + crs_rs1)]
                    with m.If(i.k + 1 == d.k):
                        m.d.comb += o.valid.eq(0)
                with m.Else():
                    m.d.comb += o.r.eq(i.r + 1)
            with m.Else():
                m.d.comb += o.q.eq(i.q + 1)

        a_masks = []

        def a_beat(lanes, mpart, slice_reset):
            for i, lane in enumerate(lanes):
                m.d.comb += self.a.payload.addr[i].eq(lane.addr + mpart)
                a_masks.append(lane.valid)
            m.d.comb += self.a.payload.mask.eq(Mux(self.a.valid, _cat(a_masks), 0))
            return 1

        _a_walker(m, self.a, rows=cfg.rows, cols=cfg.cols, start=start, n_slices=d.c,
                  slice_step=rs, ng=k.nhw, lane_layout=a_layout, lane_origin=a_origin,
                  lane_step=a_step, beat=a_beat, name="a")
        a_words = popcount(a_masks)
        self._count(m, "a", addrs=a_words, words=a_words, zeros=0)


class DilatedMap:
    """Virtual-A coordinate arithmetic of the dilated mode: an A column ``(n, i, j)`` of the
    dilated dY (``Hd x Wd`` per image), its one-step increment and its NZ test (Eq. 4).
    Shared by :class:`DilatedAddressGenerator` and its formal check.

    Invariants (addresses mod ``2**aw``): ``pi = i % s_h``, ``pj = j % s_w``,
    ``npart = n*K*OH*OW``, ``hpart = npart + (i // s_h)*OW``, ``laddr = hpart + j // s_w``
    (the compact dY address for ``k = 0``); ``valid`` while ``n < N``.
    """

    def __init__(self, d, *, dw, aw, hd, wd, kohow):
        self.d, self.aw, self.hd, self.wd = d, aw, hd, wd
        self.ow = d.ow[:aw] if dw > aw else d.ow
        self.kohow = kohow[:aw]
        self.lane_layout = data.StructLayout({
            "valid": 1, "n": dw, "i": dw + 2, "j": dw + 2, "pi": dw, "pj": dw,
            "npart": aw, "hpart": aw, "laddr": aw,
        })

    def lane_origin(self, m, o):
        m.d.comb += [o.eq(0), o.valid.eq(1)]

    def lane_step(self, m, o, i):
        """``o`` = the column after ``i`` (``j`` fastest); ``valid`` drops past the last image."""
        d, aw, ow = self.d, self.aw, self.ow
        m.d.comb += o.eq(i)
        with m.If(i.j + 1 == self.wd):
            m.d.comb += [o.j.eq(0), o.pj.eq(0)]
            with m.If(i.i + 1 == self.hd):
                nxt = (i.npart + self.kohow)[:aw]
                m.d.comb += [o.i.eq(0), o.pi.eq(0), o.n.eq(i.n + 1),
                             o.npart.eq(nxt), o.hpart.eq(nxt), o.laddr.eq(nxt)]
                with m.If(i.n + 1 == d.n):
                    m.d.comb += o.valid.eq(0)
            with m.Else():
                m.d.comb += [o.i.eq(i.i + 1), o.laddr.eq(i.hpart)]
                with m.If(i.pi + 1 == d.stride_h):
                    m.d.comb += [o.pi.eq(0), o.hpart.eq(i.hpart + ow), o.laddr.eq(i.hpart + ow)]
                with m.Else():
                    m.d.comb += o.pi.eq(i.pi + 1)
        with m.Else():
            m.d.comb += o.j.eq(i.j + 1)
            _wrap_step(m, o.pj, None, i.pj, None, d.stride_w, extra=[(o.laddr, i.laddr, 1)])

    def lane_nz(self, lane):
        """Eq. 4 generalized: the column holds a dY pixel (not an inserted zero)."""
        return lane.valid & (lane.pi == 0) & (lane.pj == 0)


class DilatedAddressGenerator(_AddressGenerator):
    """BP-im2col dilated mode: operand addresses of the weight gradient ``dW`` (Algorithm 2,
    generalized), with no zero-inserted dY.

    Stream ``a`` (buffer A holds the compact dY, ``N x K x OH x OW``): the virtual dynamic
    matrix A of ``bpsa.models.golden.lower_weight_grad``, ``K x (N*Hd*Wd)`` with ``Hd = s(OH-1)+1``.
    Per tile, for each slice ``m = k``, the ``rows`` lanes ``(n, i, j)`` are NZ-tested (Eq. 4,
    per axis: ``i % s_h == 0 and j % s_w == 0``); the beat carries only ``addr``, the flat dY
    address of the first non-zero lane, and ``mask``: the buffer returns consecutive compact
    elements from ``addr``, one per set mask bit in lane order (see :class:`CrossbarRecovery`).
    Non-zero lanes of one batch image are consecutive in compact dY; an image boundary inside
    the slice breaks the run, so such a slice is sent as one beat per image holding a non-zero
    lane, ``slice_end`` on its last beat. A slice without non-zero lanes is one beat with an
    empty mask (no read).

    Stream ``b`` (buffer B holds the compact X, ``N x C x H x W``): the plain im2col matrix B,
    ``(N*Hd*Wd) x (C*R*S)``, ``B[(n, i, j), (c, r, q)] = X[n, c, i + r*d - p, j + q*d - p]``; the
    padding lanes and lanes outside the matrix are masked.

    Payloads: ``a``: ``addr`` (one, ``log2(buf_a_depth)`` bits), ``mask`` (``rows`` bits),
    ``slice_end``, ``last``, ``end``; ``b``: per-lane ``addr``, ``mask``, ``last``, ``end``.

    Timing: one beat per cycle on each stream when ready (``a``: one more beat per extra image
    in a slice); the prologue is 4 cycles (no division at all).
    """

    _a_elems = "dy"
    _b_elems = "x"

    def __init__(self, config):
        a_layout = data.StructLayout({
            "addr": unsigned(exact_log2(config.buf_a_depth)),
            "mask": unsigned(config.rows),
            "slice_end": 1, "last": 1, "end": 1,
        })
        super().__init__(config, a_layout,
                         lanes_layout(exact_log2(config.buf_b_depth), config.cols))

    def _walkers(self, m, d, k, start, consts):
        cfg, dw, vw = self.config, self.dw, self.vw
        aw_a, aw_b = self.aw_a, self.aw_b
        hd = k.soh + 1
        wd = k.sow + 1

        # --- stream a: virtual dilated dY --------------------------------------------------------
        dm = DilatedMap(d, dw=dw, aw=aw_a, hd=hd, wd=wd, kohow=k.kohow)
        a_layout, a_origin, a_step = dm.lane_layout, dm.lane_origin, dm.lane_step

        rows = cfg.rows
        counts = {}

        def a_beat(lanes, mpart, slice_reset):
            sent = Signal(rows, name="a_sent")        # lanes already sent in this slice
            nz = _cat([dm.lane_nz(lane) for lane in lanes])
            inside = _cat([lane.valid for lane in lanes])
            pending = Signal(rows, name="a_pending")
            m.d.comb += pending.eq(nz & ~sent)
            first = Signal(rows, name="a_first")      # one-hot lowest pending lane
            m.d.comb += first.eq(pending & (~pending + 1))
            # Lanes of the first pending lane's image: stop at the next image start (i=j=0).
            run = [first[0]]
            for i in range(1, rows):
                starts = (lanes[i].i == 0) & (lanes[i].j == 0)
                run.append(first[i] | (run[-1] & ~starts))
            seg = Signal(rows, name="a_seg")
            m.d.comb += seg.eq(pending & _cat(run))
            slice_end = Signal(name="a_slice_end")
            m.d.comb += slice_end.eq((pending & ~seg) == 0)
            addr = 0
            for i, lane in enumerate(lanes):
                addr = addr | Mux(first[i], lane.laddr, 0)
            m.d.comb += [
                self.a.payload.addr.eq(addr + mpart),
                self.a.payload.mask.eq(Mux(self.a.valid, seg, 0)),
                self.a.payload.slice_end.eq(slice_end),
            ]
            with m.If(slice_reset):
                m.d.sync += sent.eq(0)
            with m.Elif(self.a.valid & self.a.ready):
                m.d.sync += sent.eq(sent | seg)
            counts["seg"] = seg
            counts["zeros"] = Mux(slice_end, popcount(inside & ~nz), 0)
            return slice_end

        _a_walker(m, self.a, rows=rows, cols=cfg.cols, start=start, n_slices=d.k,
                  slice_step=k.ohow[:aw_a], ng=k.crs, lane_layout=a_layout,
                  lane_origin=a_origin, lane_step=a_step, beat=a_beat, name="a")
        seg = counts["seg"]
        self._count(m, "a", addrs=seg != 0, words=popcount(seg), zeros=counts["zeros"])

        # --- stream b: im2col of X ------------------------------------------------------------
        # Row (B row): (n, i, j); raddr = n*C*H*W + i*W + j, ipart = the same with j = 0.
        w_b = d.w[:aw_b] if dw > aw_b else d.w
        chw = k.chw[:aw_b]
        hw = k.hw[:aw_b]
        dwh = k.dwh[:aw_b]
        pwh = k.pwh[:aw_b]
        row_layout = data.StructLayout({
            "valid": 1, "n": dw, "i": dw + 2, "j": dw + 2,
            "npart": aw_b, "ipart": aw_b, "raddr": aw_b,
        })

        def row_origin(m, o):
            m.d.comb += [o.eq(0), o.valid.eq(1)]

        def row_step(m, o, i):
            m.d.comb += o.eq(i)
            with m.If(i.j + 1 == wd):
                m.d.comb += o.j.eq(0)
                with m.If(i.i + 1 == hd):
                    nxt = (i.npart + chw)[:aw_b]
                    m.d.comb += [o.i.eq(0), o.n.eq(i.n + 1), o.npart.eq(nxt),
                                 o.ipart.eq(nxt), o.raddr.eq(nxt)]
                    with m.If(i.n + 1 == d.n):
                        m.d.comb += o.valid.eq(0)
                with m.Else():
                    m.d.comb += [o.i.eq(i.i + 1), o.ipart.eq(i.ipart + w_b),
                                 o.raddr.eq(i.ipart + w_b)]
            with m.Else():
                m.d.comb += [o.j.eq(i.j + 1), o.raddr.eq(i.raddr + 1)]

        # Lane (B column): (c, r, q); xh = r*d_h - p_h, xw = q*d_w - p_w;
        # cpart = c*H*W, hpart = cpart + xh*W, laddr = hpart + xw.
        lane_layout = data.StructLayout({
            "valid": 1, "c": dw, "r": dw, "q": dw, "xh": signed(vw), "xw": signed(vw),
            "cpart": aw_b, "hpart": aw_b, "laddr": aw_b,
        })

        def lane_origin(m, o):
            m.d.comb += [o.valid.eq(1), o.c.eq(0), o.r.eq(0), o.q.eq(0),
                         o.xh.eq(-d.pad_h), o.xw.eq(-d.pad_w), o.cpart.eq(0),
                         o.hpart.eq(-pwh), o.laddr.eq(-pwh - d.pad_w)]

        def lane_step(m, o, i):
            m.d.comb += o.eq(i)
            with m.If(i.q + 1 == d.s):
                m.d.comb += [o.q.eq(0), o.xw.eq(-d.pad_w)]
                with m.If(i.r + 1 == d.r):
                    cpart = (i.cpart + hw)[:aw_b]
                    m.d.comb += [o.r.eq(0), o.xh.eq(-d.pad_h), o.c.eq(i.c + 1),
                                 o.cpart.eq(cpart), o.hpart.eq(cpart - pwh),
                                 o.laddr.eq(cpart - pwh - d.pad_w)]
                    with m.If(i.c + 1 == d.c):
                        m.d.comb += o.valid.eq(0)
                with m.Else():
                    m.d.comb += [o.r.eq(i.r + 1), o.xh.eq(i.xh + d.dil_h),
                                 o.hpart.eq(i.hpart + dwh),
                                 o.laddr.eq(i.hpart + dwh - d.pad_w)]
            with m.Else():
                m.d.comb += [o.q.eq(i.q + 1), o.xw.eq(i.xw + d.dil_w),
                             o.laddr.eq(i.laddr + d.dil_w)]

        def b_beat(row, lanes):
            out = []
            for j, lane in enumerate(lanes):
                xht = Signal(signed(vw + 1), name=f"b_xh{j}")
                xwt = Signal(signed(vw + 1), name=f"b_xw{j}")
                m.d.comb += [xht.eq(row.i + lane.xh), xwt.eq(row.j + lane.xw)]
                in_x = (xht >= 0) & (xht < d.h) & (xwt >= 0) & (xwt < d.w)
                inside = lane.valid & row.valid
                out.append(((row.raddr + lane.laddr)[:aw_b], inside & in_x, inside))
            return out

        masks, insides = _b_walker(
            m, self.b, rows=cfg.rows, cols=cfg.cols, start=start,
            row_layout=row_layout, row_origin=row_origin, row_step=row_step,
            lane_layout=lane_layout, lane_origin=lane_origin, lane_step=lane_step,
            beat=b_beat, name="b")
        words = popcount(masks)
        self._count(m, "b", addrs=words, words=words,
                    zeros=popcount(i & ~mk for i, mk in zip(insides, masks)))


def _operand_shape(config):
    from bpsa.gateware.array.arith import arith_for
    return arith_for(config).operand_shape


class MaskExpander(CheckedComponent):
    """Buffer side of the transposed mode: completes one B row read lane by lane.

    The buffer returns, for a beat of :class:`TransposedAddressGenerator`'s ``b`` stream, one
    element per lane (buffer B is modelled with ``cols`` read ports, one per lane; a banked
    buffer would serve the same contract). Lanes whose ``mask`` bit is clear were never read:
    their ``data`` is ignored and replaced by zero.

    Members
    -------
    i : In(stream.Signature({data: cols operands, mask: cols, last, end}))
    o : Out(stream.Signature(same layout))
        ``o.data[j] = i.data[j] if mask[j] else 0``; ``mask``, ``last``, ``end`` pass through.
        One registered stage, one row per cycle; ``i.ready = ~o.valid | o.ready``.
    """

    @classmethod
    def check_parameters(cls, config, *args, **kwargs):
        require_config(config)

    def __init__(self, config):
        self.config = config
        layout = data.StructLayout({
            "data": data.ArrayLayout(_operand_shape(config), config.cols),
            "mask": unsigned(config.cols), "last": 1, "end": 1,
        })
        super().__init__({"i": In(stream.Signature(layout)),
                          "o": Out(stream.Signature(layout))})

    def elaborate(self, platform):
        m = Module()
        m.d.comb += self.i.ready.eq(~self.o.valid | self.o.ready)
        with m.If(self.o.ready):
            m.d.sync += self.o.valid.eq(0)
        with m.If(self.i.valid & self.i.ready):
            p = self.i.payload
            m.d.sync += [self.o.valid.eq(1), self.o.payload.mask.eq(p.mask),
                         self.o.payload.last.eq(p.last), self.o.payload.end.eq(p.end)]
            for j in range(self.config.cols):
                m.d.sync += self.o.payload.data[j].eq(Mux(p.mask[j], p.data[j], 0))
        return m


class CrossbarRecovery(CheckedComponent):
    """Buffer side of the dilated mode: puts consecutive compact elements back in their lanes.

    For a beat of :class:`DilatedAddressGenerator`'s ``a`` stream, the buffer returns ``rows``
    consecutive elements starting at the beat's address (modelled with ``rows`` read ports at
    ``addr, addr+1, ...``; a wide unaligned read serves the same contract). The ``k``-th set
    bit of ``mask`` (in lane order) takes element ``k``; lanes whose bit is clear get zero.
    Beats of one slice (``slice_end`` on the last) are merged; one complete slice leaves.

    Members
    -------
    i : In(stream.Signature({data: rows operands, mask: rows, slice_end, last, end}))
    o : Out(stream.Signature({data: rows operands, mask: rows, last, end}))
        ``mask`` is the union of the slice's beat masks. One registered stage;
        ``i.ready = ~o.valid | o.ready``.
    """

    @classmethod
    def check_parameters(cls, config, *args, **kwargs):
        require_config(config)

    def __init__(self, config):
        self.config = config
        op = _operand_shape(config)
        lanes = data.ArrayLayout(op, config.rows)
        super().__init__({
            "i": In(stream.Signature(data.StructLayout({
                "data": lanes, "mask": unsigned(config.rows), "slice_end": 1, "last": 1,
                "end": 1}))),
            "o": Out(stream.Signature(data.StructLayout({
                "data": lanes, "mask": unsigned(config.rows), "last": 1, "end": 1}))),
        })

    def elaborate(self, platform):
        m = Module()
        rows = self.config.rows
        p = self.i.payload
        acc = Signal(self.o.payload.data.shape())
        acc_mask = Signal(rows)
        merged = Signal(self.o.payload.data.shape())
        rank = 0
        for lane in range(rows):
            # rank = number of set mask bits below this lane: its element's index.
            r = Signal(range(rows), name=f"rank{lane}")
            m.d.comb += r.eq(rank)
            m.d.comb += merged[lane].eq(Mux(p.mask[lane], p.data[r], acc[lane]))
            rank = rank + p.mask[lane]
        m.d.comb += self.i.ready.eq(~self.o.valid | self.o.ready)
        with m.If(self.o.ready):
            m.d.sync += self.o.valid.eq(0)
        with m.If(self.i.valid & self.i.ready):
            with m.If(p.slice_end):
                m.d.sync += [self.o.valid.eq(1), self.o.payload.data.eq(merged),
                             self.o.payload.mask.eq(acc_mask | p.mask),
                             self.o.payload.last.eq(p.last), self.o.payload.end.eq(p.end),
                             acc.eq(0), acc_mask.eq(0)]
            with m.Else():
                m.d.sync += [acc.eq(merged), acc_mask.eq(acc_mask | p.mask)]
        return m
