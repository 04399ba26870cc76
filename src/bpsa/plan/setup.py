"""The controller's set-up programs: checks, layer geometry and tiling of one descriptor,
written once in the step grammar of :mod:`bpsa.plan.grammar`.

The set-up sequencer (:mod:`bpsa.gateware.controller.setup_sequencer`) runs, for a descriptor:
the :func:`checks` step, :func:`geometry`, then the tiling program of the phase
(:func:`tiling_program`) and its address checks (:func:`address_program`). The host runs the
same programs on integers: :func:`run` (what the hardware computes, refusal included) and,
through it, :func:`bpsa.plan.tiling.plan` and :func:`bpsa.plan.tiling.fc_plan`.

Tiling: ``C`` is ``cols``; the A and B buffers are split into two banks of ``acap`` /
``bcap`` words, ``xcap = acap * feeder_bus_width`` elements for the forward's X; ``pcap``:
the P buffer's words; ``d(R-1)``: ``drh``.

    forward
        groups of ``cg = min(C_in, xcap // (H W), bcap // (R S))`` input channels, all output
        rows; when an X plane does not fit a bank or the output plane P (``banded``): one
        channel a group, bands of ``bh = min(OH, pcap // OW, (xcap // W - drh - 1) // s + 1)``
        output rows. ``kt = ceil(K / C)`` output-channel blocks, a step ``kb = min(kt, pcap
        // (bh OW))`` of them (P holds their Y band; X of a group is loaded once for them).
        P is double-buffered (``dbl``; ``pcap`` is then half of it, and a step's store
        overlaps the next step) when the layer needs bands anyway or when Y of all ``kt``
        blocks fits half of P; otherwise halving P would cost X reloads.
    loss
        dX channel blocks of ``cg = min(C_in, acap // (R S), pcap // ceil(W / C))`` channels,
        groups of ``kg = min(K, acap // (cg R S), bcap // (OH OW))`` output channels; when dX
        of a block (``cg ceil(H W / C)`` words) does not fit P or a dY plane a bank: bands of
        ``bh = min(H, (pcap // cg) C // W, s (bcap // OW - 1) - drh)`` dX rows and
        ``kg = min(K, acap // (cg R S), bcap // (((bh - 1 + drh) // s + 2) OW))``.
    gradient
        output-channel blocks of ``kb = min(K, pcap // ceil(R S / C))`` channels; groups of
        ``kg = min(kb, acap // (OH OW))`` output and ``cg = min(C_in, bcap // (H W),
        (pcap // kb) C // (R S))`` input channels; banded (a dY plane does not fit a bank of
        A or an X plane a bank of B): bands of ``bh = min(OH, acap // OW, (bcap // W - drh -
        1) // s + 1)`` dY rows, ``kg = min(kb, acap // (bh OW))``, ``cg = min(C_in, bcap //
        (((bh - 1) s + drh + 1) W), (pcap // kb) C // (R S))``.
    loss, zero-free (MODE 1; dY and W with ``cols`` channels a word, dX out blocked by ``cols``;
        P double-buffered, ``pcap`` is half of it)
        steps of ``cn`` blocks of ``cols`` input channels, a band and ``zn`` images, their dX
        bands in P: with ``q = pcap // (bh W)`` band slots, ``cn = min(ct, q)`` blocks (dY of
        a group and image is loaded once for them) when ``ct > 1`` and ``q > 1``, and then
        ``zn = 1``; otherwise, or when the host's search asks for ``zn`` images (W then
        loaded once for them, :func:`run`), ``cn = 1`` and ``zn = min(N, q, zn)`` images;
        groups of ``kg = min(kt, acap // words, bcap // (cols R S))`` blocks of ``cols``
        output channels (``words``: a block's dY rows of the band), a
        run per image of the step (W of the group stays in its bank); when dX of an image does
        not fit P (or a cn-th of it, asked for by the host's search, :func:`run`) or the dY
        plane a bank of A (``banded``): bands of ``bh = min(H, pcap // cn // W, s (acap // OW
        - 1) - d(R-1))`` dX rows.
    gradient, zero-free (MODE 1; ``B = feeder_bus_width``: X blocked by ``B`` channels, dY by
        ``cols``, one pixel a buffer word)
        P is double-buffered (``pcap`` is half of it): ``nb = min(C, B) R S`` P words hold dW
        of one block of input channels for ``cols``
        output channels; a step is ``cn`` input-channel blocks and ``kb = min(kt, pcap // (nb
        cn))`` output-channel blocks (``kt = ceil(K / C)``, ``ct = ceil(C_in / B)``; ``cn``
        from the host's search, :func:`run`); when the dY plane (``OH OW`` words) does not fit
        a bank of B or the X plane (``H W`` words) a cn-th of a bank of A (``banded``): bands
        of ``bh = min(OH, bcap // OW, (acap // cn // W - drh - 1) // s + 1)`` dY rows. Whole
        planes with no padding rows and ``H <= OH s``: ``zn = min(N, acap // (cn OH s W),
        bcap // (OH OW))`` images a run, stacked ``OH s`` rows apart. MX: a row's words are its
        pixels' and then its scale words (``px = W + ceil(W / 32)`` an X row, ``pd = OW +
        ceil(OW / 32)`` a dY row), which take the place of ``W`` and ``OW`` in every word count
        above (``xhw = H px``, ``dohow = OH pd``).
    FC backward (batch N, C inputs, K outputs)
        ``fib = min(C, (pcap // (K + 1)) C, max(C, bcap // 32))`` inputs a block (P rows of
        ``fq = ceil(fib / C)`` words), ``fob = min(K, (bcap // fib) // 2, acap)`` outputs and
        ``fnb = min(N, acap // fob, bcap // fib - fob, pcap // fq - K)`` batch rows a run.
    pooling forward and backward
        The pooling unit's buffer: two banks of ``bank = buf_pool_depth / 2`` words; P
        double-buffered, ``pel = buf_p_depth / 2 * epw`` elements of a plane a step, ``epw =
        cols / pool_lanes``; a "plane" is a block of ``pool_lanes`` planes, channel-blocked,
        ``planes = N ceil(C / pool_lanes)``.
        ``pg = min(planes, bank // (plane words), (buf_p_depth / 2) // pw)`` whole planes a
        step (``pw`` P words a plane's output), or, when a plane does not fit, one plane a
        step in bands of ``bh`` rows: forward ``min(OH, pel // OW, (bank // W - R) // s +
        1)`` output rows; backward ``min(H, pel // W, (bank - 2 R W - R OW) // (W + OW))``
        dX rows.

    A layer that needs bands is refused when not even one band fits, and a forward or
    gradient layer that needs bands when it pads more rows than its dilated kernel reaches.
"""

from bpsa.plan.grammar import (Check, Checks, Div, Mul, Refusal, Set, Skip, evaluate,
                               fp32_reciprocal,
                               high_bits, lift, low_bits, minimum, select, var)
from bpsa.spec.errors import AccelError
from bpsa.spec.numeric import POOL_RECIP_SHIFT, element_bytes, pool_window_limit
from bpsa.spec.regmap import (FORWARD_MODE_NAMES, MODE_NAMES, POOL_KIND_NAMES, Mode, Phase,
                              PoolKind)

__all__ = ["CF_FORWARD", "DESCRIPTOR", "OUTPUTS", "PLAN_REGISTERS", "STORE_CHUNK", "UNIT_WIDTH",
           "ZF_GRADIENT", "ZF_LOSS", "address_program", "checks", "generated_phases",
           "geometry", "programs", "register_widths", "run", "tiling_program"]

#: Bits of the set-up unit (sizes in elements and bytes).
UNIT_WIDTH = 48

#: P words a store command of the step scheduler moves at most (a load waits for one chunk of
#: a store, not for a whole row).
STORE_CHUNK = 64

#: Descriptor fields the programs read.
DESCRIPTOR = ("phase", "n", "c", "h", "w", "k", "r", "s", "stride_h", "stride_w", "pad_h",
              "pad_w", "dil_h", "dil_w", "addr_x", "addr_w", "addr_dy", "addr_out", "mode",
              "requant", "relu", "pool_kind", "window_lo", "window_hi")

#: Registers the set-up programs write: name -> ``"unit"`` (:data:`UNIT_WIDTH` bits),
#: ``"dim"`` (``dim_width + 2`` bits) or ``"bit"``.
PLAN_REGISTERS = {
    **{name: "unit" for name in (
        "drh", "drw", "oh", "ow", "hw", "ohow", "rs", "crs", "chw", "q1", "q2", "q3", "q4",
        "cg", "kg", "kt", "nb", "np", "t", "u", "rowlen", "tot", "kohow", "wdp1", "kb", "fib",
        "fob", "fnb", "fwoff", "fq", "fdw0", "ct", "xwords", "dwords", "zn", "cn",
        "recip", "planes", "pg", "pw", "qw0", "rw0", "cl", "cpl", "cimg", "px", "pd", "xhw",
        "dohow")},
    "bh": "dim",
    "banded": "bit",
    "dbl": "bit",
    "zs": "bit",
}

#: The program keys of the zero-free loss and gradient (a phase and a mode; the other
#: programs are keyed by their phase alone).
ZF_LOSS = (Phase.LOSS, Mode.ZERO_FREE)
ZF_GRADIENT = (Phase.GRADIENT, Mode.ZERO_FREE)
#: The program key of the channel-first forward (the forward in mode CHANNEL_FIRST).
CF_FORWARD = (Phase.FORWARD, Mode.CHANNEL_FIRST)

#: The registers a program's loops read (its *tile plan*); the others are scratch.
OUTPUTS = {
    Phase.FORWARD: ("oh", "ow", "hw", "ohow", "rs", "crs", "chw", "drh", "cg", "bh", "banded",
                    "kt", "kb", "dbl"),
    CF_FORWARD: ("oh", "ow", "hw", "ohow", "rs", "crs", "chw", "drh", "cg", "bh", "banded",
                 "kt", "kb", "dbl", "cl", "ct", "cpl", "cimg", "zn", "zs"),
    Phase.LOSS: ("oh", "ow", "hw", "ohow", "rs", "crs", "chw", "drh", "cg", "kg", "nb", "np",
                 "bh", "banded", "kohow"),
    Phase.GRADIENT: ("oh", "ow", "hw", "ohow", "rs", "crs", "chw", "drh", "nb", "kb", "kg",
                     "cg", "bh", "banded", "wdp1", "kohow"),
    Phase.FC_BACKWARD: ("fib", "fq", "fob", "fnb", "fwoff", "fdw0", "kohow"),
    ZF_GRADIENT: ("oh", "ow", "hw", "ohow", "rs", "crs", "drh", "nb", "kb", "kt", "ct", "bh",
                  "banded", "xwords", "dwords", "cn", "zn", "px", "pd", "xhw", "dohow"),
    ZF_LOSS: ("oh", "ow", "hw", "ohow", "rs", "drh", "nb", "kg", "kt", "ct", "bh", "banded",
              "zn", "cn"),
    Phase.POOL_FORWARD: ("oh", "ow", "hw", "ohow", "rs", "chw", "drh", "bh", "banded", "recip",
                         "planes", "pg", "pw", "qw0", "rw0"),
    Phase.POOL_BACKWARD: ("oh", "ow", "hw", "ohow", "rs", "chw", "drh", "bh", "banded",
                          "recip", "planes", "pg", "pw", "qw0", "rw0"),
}

TOO_LARGE = AccelError.TOO_LARGE

(phase, n, c, h, w, k, r, s, stride_h, stride_w, pad_h, pad_w, dil_h, dil_w, addr_x, addr_w,
 addr_dy, addr_out, mode, requant, relu, pool_kind, window_lo, window_hi) = (
    var(f) for f in DESCRIPTOR)
(drh, drw, oh, ow, hw, ohow, rs, crs, chw, q1, q2, q3, q4, cg, kg, kt, nb, np_, t, u, rowlen,
 tot, kohow, wdp1, kb, fib, fob, fnb, fwoff, fq, fdw0, bh, banded, ct, xwords, dwords, zn,
 dbl, cn) = (
    var(x) for x in ("drh", "drw", "oh", "ow", "hw", "ohow", "rs", "crs", "chw", "q1", "q2",
                     "q3", "q4", "cg", "kg", "kt", "nb", "np", "t", "u", "rowlen", "tot",
                     "kohow", "wdp1", "kb", "fib", "fob", "fnb", "fwoff", "fq", "fdw0", "bh",
                     "banded", "ct", "xwords", "dwords", "zn", "dbl", "cn"))
recip, planes, pg, pw, qw0, rw0 = (var(x) for x in ("recip", "planes", "pg", "pw", "qw0", "rw0"))
cl, cpl, cimg, zs = (var(x) for x in ("cl", "cpl", "cimg", "zs"))
px, pd, xhw, dohow = (var(x) for x in ("px", "pd", "xhw", "dohow"))


def register_widths(config):
    """Bits of every register in :data:`PLAN_REGISTERS` for ``config``."""
    bits = {"unit": UNIT_WIDTH, "dim": config.dim_width + 2, "bit": 1}
    return {name: bits[kind] for name, kind in PLAN_REGISTERS.items()}


def _caps(config):
    acap, bcap = config.buf_a_depth // 2, config.buf_b_depth // 2
    return acap, bcap, acap * config.feeder_bus_width, config.buf_p_depth


def generated_phases(config):
    """The phases the accelerator generated for ``config`` runs: forward with the ``os``
    dataflow and the reserve registers (the forward engine), loss with the BP-im2col engine
    (``backward_modes`` ``bp_im2col``), gradient with either backward mode, FC backward with
    the BP-im2col engine and the ``interleaved`` dataflow, the pooling phases with a pooling
    unit (``pool_kinds``). MX (:func:`bpsa.gateware.accelerator.check_mx`): the forward on
    the channel-first front end and the zero-free gradient (the loss runs as forwards)."""
    if config.is_mx:
        return (Phase.FORWARD, Phase.GRADIENT)
    fwd = config.has("os") and config.reserve_registers
    bwd = config.has_mode("bp_im2col")
    zf = config.has_mode("zero_free")
    pool = config.has_pool()
    return tuple(p for p, on in ((Phase.FORWARD, fwd), (Phase.LOSS, bwd or zf),
                                 (Phase.GRADIENT, bwd or zf),
                                 (Phase.FC_BACKWARD, bwd and config.has("interleaved")),
                                 (Phase.POOL_FORWARD, pool), (Phase.POOL_BACKWARD, pool))
                 if on)


def _generated_modes(config, phase_):
    """The :class:`Mode` values the hardware runs ``phase_`` (loss or gradient) in (MX: the
    zero-free gradient)."""
    return [m for m, name in MODE_NAMES.items() if config.has_mode(name)
            and (name == "zero_free" or not config.is_mx)]


def programs(config, phases):
    """The tiling programs the hardware generates: ``(key, phase, mode)``; ``mode`` is
    ``None`` for a program that runs the phase in every mode (the checks refused the
    others)."""
    out = []
    for p in phases:
        p = Phase(p)
        if p == Phase.FORWARD and config.has_frontend("channel_first"):
            out += [(CF_FORWARD, p, Mode.CHANNEL_FIRST), (p, p, Mode.BP_IM2COL)]
        elif p in (Phase.LOSS, Phase.GRADIENT) and Mode.ZERO_FREE in _generated_modes(config, p):
            out.append((ZF_LOSS if p == Phase.LOSS else ZF_GRADIENT, p, Mode.ZERO_FREE))
            if Mode.BP_IM2COL in _generated_modes(config, p):
                out.append((p, p, Mode.BP_IM2COL))
        else:
            out.append((p, p, None))
    return out


def _mode_names(modes):
    return ", ".join(MODE_NAMES[m] for m in modes) or "none"


def checks(config, phases):
    """The first step: refusals of the descriptor itself, in one clock cycle. ``phases``: the
    :class:`bpsa.spec.regmap.Phase` values the hardware generates."""
    unknown = None
    for p in phases:
        unknown = (phase != int(p)) if unknown is None else unknown & (phase != int(p))
    bad_mode, allowed = lift(0), []
    for p in phases:
        if Phase(p) not in (Phase.LOSS, Phase.GRADIENT):
            continue
        modes = _generated_modes(config, Phase(p))
        ok = lift(0)
        for mo in modes:
            ok = ok | (mode == int(mo))
        bad_mode = bad_mode | ((phase == int(p)) & (ok == 0))
        allowed.append(f"{Phase(p).name.lower()}: {_mode_names(modes)}")
    if Phase.FORWARD in [Phase(p) for p in phases]:
        fmodes = [v for v, name in FORWARD_MODE_NAMES.items() if config.has_frontend(name)
                  and (name == "channel_first" or not config.is_mx)]     # MX: its own
        ok = lift(0)
        for mo in fmodes:
            ok = ok | (mode == int(mo))
        bad_mode = bad_mode | ((phase == int(Phase.FORWARD)) & (ok == 0))
        allowed.append("forward: " + ", ".join(f"{int(v)} {FORWARD_MODE_NAMES[v]}"
                                               for v in fmodes))
    is_pool = (phase == int(Phase.POOL_FORWARD)) | (phase == int(Phase.POOL_BACKWARD))
    # pooling ignores K (its planes are N C)
    zero = ((n == 0) | (c == 0) | (h == 0) | (w == 0) | ((k == 0) & (is_pool == 0)) | (r == 0)
            | (s == 0))
    zstep = (stride_h == 0) | (stride_w == 0) | (dil_h == 0) | (dil_w == 0)
    fc_shape = (phase == int(Phase.FC_BACKWARD)) & (
        (h != 1) | (w != 1) | (r != 1) | (s != 1) | (pad_h != 0) | (pad_w != 0))
    names = ", ".join(Phase(int(p)).name for p in phases)
    kind_ok = lift(0)
    for kind, name in POOL_KIND_NAMES.items():
        if config.has_pool(name):
            kind_ok = kind_ok | (pool_kind == int(kind))
    bad_pool = is_pool & ((kind_ok == 0) | (dil_h != 1) | (dil_w != 1) | (2 * pad_h > r)
                          | (2 * pad_w > s))
    kinds = ", ".join(config.pool_kinds) or "none"
    return [Checks((
        Check(unknown, AccelError.PHASE, f"phase {{phase}} is not generated (only {names})"),
        Check(bad_mode, AccelError.MODE,
              f"mode {{mode}} is not generated for this phase ({'; '.join(allowed)})"),
        Check(zero, AccelError.ZERO_SIZE, "a size (N, C, H, W, K, R, S) is 0"),
        Check(zstep, AccelError.ZERO_STEP, "a stride or a dilation is 0"),
        Check(fc_shape, AccelError.SHAPE, "an FC layer has H = W = R = S = 1 and no padding"),
        Check((requant != 0) & (phase != int(Phase.FORWARD)) & (is_pool == 0)
              & ((phase != int(Phase.LOSS)) | (mode != int(Mode.ZERO_FREE))),
              AccelError.REQUANT, "requantization (REQUANT) applies to the forward, the "
                                  "zero-free loss and pooling only"),
        Check((relu != 0) & (phase != int(Phase.FORWARD)) & (is_pool == 0), AccelError.RELU,
              "RELU applies to the forward and pooling only"),
        Check(bad_pool, AccelError.POOL,
              f"pooling kind {{pool_kind}} is not generated (kinds: {kinds}), or a dilation is "
              f"not 1, or padding exceeds kernel // 2"),
    ))]


def geometry(config):
    """Output size and plane sizes, shared by every phase."""
    limit = (1 << config.dim_width) - 1
    return [
        Mul("drh", dil_h, r - 1),
        Mul("drw", dil_w, s - 1),
        Check((drh >= h + 2 * pad_h) | (drw >= w + 2 * pad_w), AccelError.KERNEL_TOO_LARGE,
              "the dilated kernel is larger than the padded input"),
        Div("oh", h + 2 * pad_h - drh - 1, stride_h),
        Div("ow", w + 2 * pad_w - drw - 1, stride_w),
        Set((("oh", oh + 1), ("ow", ow + 1))),
        Check((oh > limit) | (ow > limit), AccelError.DIM,
              f"the output ({{oh}} x {{ow}}) does not fit dim_width {config.dim_width}"),
        Mul("hw", h, w),
        Mul("ohow", oh, ow),
        Mul("rs", r, s),
        Mul("crs", c, rs),
        Mul("chw", c, hw),
    ]


def _band_checks(what, *, padding):
    out = [Check(banded & (bh == 0), TOO_LARGE, f"{what}: not even one row band fits")]
    if padding:
        out.append(Check(banded & (pad_h > drh), TOO_LARGE,
                         f"{what}, and a layer whose padding ({{pad_h}}) is larger than its "
                         f"dilated kernel's reach (d(R-1) = {{drh}}) is not cut into row bands"))
    return Checks(tuple(out))


def _forward(config, cf=False):
    """The forward's tiling; ``cf``: the channel-first front end's (X banks of
    ``buf_cf_depth / 2`` pixels, groups of one channel block of ``L = min(C, rows)``
    channels, X blocked ``N x CT x H x W x L``)."""
    acap, bcap, xcap, pcap = _caps(config)
    cols = config.cols
    half = pcap // 2
    pc = select(dbl, half, pcap)                # the P words a step has
    if cf:
        xcap = config.buf_cf_depth // 2
        what = (f"one channel block's image of X ({{hw}} pixels) or one plane of Y ({{ohow}} "
                f"words) does not fit a half of the channel-first X banks ({xcap}) / the P "
                f"buffer ({pcap})")
        # MX: a channel block's R S W scale words follow its W words
        wpb = "(min(C, rows) + 1) R S" if config.is_mx else "min(C, rows) R S"
        head = [
            Set((("cl", minimum(c, config.rows)),)),
            Mul("t", cl + 1 if config.is_mx else cl, rs),
            Check(t > bcap, TOO_LARGE,
                  f"W of one channel block ({{t}} words: {wpb}) does not fit a "
                  f"bank of buffer B ({bcap} words)"),
            Div("ct", c + cl - 1, cl),
            Mul("cpl", hw, cl),
            Mul("cimg", cpl, ct),
            Div("q1", xcap, hw),
        ]
        group = cl
    else:
        what = (f"one channel plane of X ({{hw}} elements) or of Y ({{ohow}} words) does not "
                f"fit a bank of buffer A ({xcap}) / the P buffer ({pcap})")
        head = [
            Check(rs > bcap, TOO_LARGE,
                  f"W of one channel ({{rs}} words) does not fit a bank of buffer B ({bcap} "
                  f"words)"),
            Div("q1", xcap, hw),
            Div("q2", bcap, rs),
        ]
        group = select(banded, 1, minimum(c, q1, q2))
    if cf:
        stack = [
            # zn images a step, asked for by the host's search (:func:`run`; not with cn):
            # their X in a half of the banks, their Y in half of P. Stacked (zs) into one
            # plane of zn H rows, one run, which the walk reads as each image's when there is
            # no padding row, H = OH s and the kernel stays within a stride (d (R - 1) < s);
            # otherwise a run an image, from its X offset, W held for the zn images
            Mul("t", oh, stride_h),
            Set((("zs", (pad_h == 0) & (t == h) & (drh < stride_h)),)),
            Set((("zn", select((zn > 1) & (cn < 2), minimum(zn, n), 1)),)),
            Mul("t", zn, hw),
            Mul("u", zn, ohow),
            Set((("zn", select((t > xcap) | (u > half), 1, zn)),)),
            Mul("t", zn, h),                    # the stacked height is a layer dimension
            Set((("zs", zs & (t < 1 << config.dim_width)),)),
        ]
    else:
        stack = [Set((("zn", 1),))]
    return head + stack + [
        # the host's search (:func:`run`) may ask for bands of a cn-th of P, so that X of a
        # group serves cn times as many output-channel blocks
        Mul("u", ohow, select(cn > 0, cn, 1)),
        Set((("banded", (q1 == 0) | (u > pcap)),)),
        Div("kt", k + (cols - 1), cols),
        # P double-buffered (stores overlap the next step) unless halving it would cost X
        # reuse: a layer that needs bands anyway, or whose Y of every block fits half of P
        Mul("t", zn, ohow),
        Div("q3", half, t),
        Set((("dbl", banded | (q3 >= kt)),)),
        Skip(banded == 0, 5),
        Div("q3", xcap, w),
        Div("t", select(q3 > drh, q3 - drh - 1, 0), stride_h),
        Set((("t", select(q3 > drh, t + 1, 0)),)),
        Div("q4", pc, select(cn > 0, cn, 1)),
        Div("q4", q4, ow),
        Set((("cg", group),
             ("bh", select(banded, minimum(oh, q4, t), oh)))),
        _band_checks(what, padding=True),
        # P holds a band of Y (of zn images) for kb output-channel blocks: X of a group
        # serves kb blocks
        Mul("t", bh, ow),
        Mul("t", t, zn),
        Div("q4", pc, t),
        Set((("kb", minimum(kt, q4)),)),
    ]


def _loss(config):
    acap, bcap, _, pcap = _caps(config)
    cols = config.cols
    what = (f"dX of one image ({{cg}} rows of {{nb}} words) does not fit the P buffer ({pcap} "
            f"words), or one dY plane ({{ohow}}) a bank of buffer B ({bcap})")
    return [
        Div("q1", acap, rs),
        Div("q2", w + (cols - 1), cols),
        Div("q2", pcap, q2),
        Set((("cg", minimum(c, q1, q2)),)),
        Checks((
            Check(q1 == 0, TOO_LARGE, f"one kernel plane of W ({{rs}} elements) does not fit a "
                                      f"bank of buffer A ({acap} words)"),
            Check(cg == 0, TOO_LARGE, f"one dX row ({{w}} elements) does not fit the P buffer "
                                      f"({pcap} words)"),
        )),
        Mul("t", cg, rs),
        Div("q1", acap, t),
        Div("q2", bcap, ohow),
        Div("nb", hw + (cols - 1), cols),
        Mul("np", cg, nb),
        Set((("banded", (np_ > pcap) | (q2 == 0)),)),
        Skip(banded == 0, 6),
        Div("t", pcap, cg),
        Mul("t", t, cols),
        Div("q3", t, w),
        Div("q4", bcap, ow),
        Mul("t", select(q4 > 0, q4 - 1, 0), stride_h),
        Set((("t", select(t > drh, t - drh, 0)),)),
        Set((("bh", select(banded, minimum(h, q3, t), h)),)),
        _band_checks(what, padding=False),
        # a band needs at most (bh - 1 + d(R-1)) // s + 2 dY rows per output channel
        Skip(banded == 0, 3),
        Div("t", bh - 1 + drh, stride_h),
        Mul("t", t + 2, ow),
        Div("q4", bcap, t),
        Set((("kg", select(banded, minimum(k, q1, q4), minimum(k, q1, q2))),)),
        Mul("kohow", k, ohow),
    ]


def _gradient(config):
    acap, bcap, _, pcap = _caps(config)
    cols = config.cols
    what = (f"one dY plane ({{ohow}}) or one X plane ({{hw}}) does not fit a bank of buffer "
            f"A / B ({acap} / {bcap} words)")
    return [
        Div("nb", rs + (cols - 1), cols),       # P words of one kernel plane
        Div("kb", pcap, nb),
        Check(kb == 0, TOO_LARGE, f"dW of one kernel plane ({{nb}} words) does not fit the P "
                                  f"buffer ({pcap} words)"),
        Set((("kb", minimum(k, kb)),)),
        Div("t", pcap, kb),
        Mul("t", t, cols),
        Div("q3", t, rs),
        Check(q3 == 0, TOO_LARGE, "P holds no dW row of an input channel"),
        Div("q1", acap, ohow),
        Div("q2", bcap, hw),
        Set((("banded", (q1 == 0) | (q2 == 0)),)),
        Skip(banded == 0, 4),
        Div("q4", acap, ow),
        Div("q1", bcap, w),
        Div("t", select(q1 > drh, q1 - drh - 1, 0), stride_h),
        Set((("t", select(q1 > drh, t + 1, 0)),)),
        Set((("bh", select(banded, minimum(oh, q4, t), oh)),)),
        _band_checks(what, padding=True),
        # banded: as many output / input channels as a band's rows leave room for
        Skip(banded == 0, 5),
        Mul("t", bh, ow),
        Div("q4", acap, t),
        Mul("u", bh - 1, stride_h),
        Mul("t", u + drh + 1, w),
        Div("u", bcap, t),
        Div("q1", acap, ohow),
        Set((("kg", select(banded, minimum(kb, q4), minimum(kb, q1))),
             ("cg", select(banded, minimum(c, u, q3), minimum(c, q2, q3))))),
        Mul("t", stride_w, ow - 1),
        Set((("wdp1", t + 1),)),
        Mul("kohow", k, ohow),
    ]


def _zf_gradient(config):
    acap, bcap, _, pcap = _caps(config)
    pcap //= 2                                  # P is double-buffered
    cols, B = config.cols, config.feeder_bus_width
    what = (f"one dY plane ({{dohow}} words) or one X plane ({{xhw}} words) does not fit a "
            f"bank of buffer B / A ({bcap} / {acap} words)")
    if config.is_mx:            # a row's words: its pixels', then its scale words (a block's)
        pitch = [Div("t", w + 31, 32), Set((("px", w + t),)),
                 Div("t", ow + 31, 32), Set((("pd", ow + t),))]
    else:
        pitch = [Set((("px", w), ("pd", ow)))]
    return pitch + [
        Mul("xhw", h, px),                      # buffer words of an X / a dY plane
        Mul("dohow", oh, pd),
        Mul("nb", rs, minimum(c, B)),           # P words: dW of a block of input channels
        Check(nb > pcap, TOO_LARGE, f"dW of min(C, {B}) input channels ({{nb}} words of {cols} "
                                    f"output channels) does not fit half the P buffer "
                                    f"({pcap} words; P is double-buffered)"),
        Div("kt", k + (cols - 1), cols),
        Div("ct", c + (B - 1), B),
        # cn input-channel blocks a step (asked for by the host's search, :func:`run`; at
        # least 1): their X shares a bank of A, P holds dW of cn kb block pairs
        Div("t", pcap, nb),
        Set((("cn", minimum(select(cn > 0, cn, 1), ct, t)),)),
        Div("t", t, cn),
        Div("q1", acap, cn),                    # words of a bank of A an input block has
        Set((("kb", minimum(kt, t)), ("banded", (dohow > bcap) | (xhw > q1)))),
        Skip(banded == 0, 4),
        Div("q4", bcap, pd),
        Div("q1", q1, px),
        Div("t", select(q1 > drh, q1 - drh - 1, 0), stride_h),
        Set((("t", select(q1 > drh, t + 1, 0)),)),
        Set((("bh", select(banded, minimum(oh, q4, t), oh)),)),
        _band_checks(what, padding=True),
        Mul("xwords", ct, xhw),                 # X words (pixels of B lanes) of one image
        Mul("dwords", kt, dohow),               # dY words (pixels of cols lanes) of one image
        # zn images a run, stacked OH s_h rows apart (their planes whole, no padding rows,
        # H <= OH s_h: no tap reaches the next image's rows): X of the step's blocks and dY
        # of a block for zn images fit their banks
        Mul("u", oh, stride_h),
        Set((("t", banded | (pad_h > 0) | (h > u)),)),
        Mul("u", u, px),
        Mul("u", u, cn),
        Div("q2", acap, u),
        Div("q3", bcap, dohow),
        Set((("zn", select(t, 1, minimum(n, q2, q3))),)),
        Set((("zn", select(zn == 0, 1, zn)),)),
    ]


def _reuse_cost(config, key, e, desc):
    """The host's estimate of a tiling ``e`` of program ``key`` (:func:`run`'s search): the
    cycles of the slower of the DMA (the zero-free programs' results written included) and
    the array, then the bytes read. Zero-free gradient: X once
    per step of ``kb`` output blocks (a band's rows with their halo), dY once per step of
    ``cn`` input blocks; the walker's vectors plus a fill and drain a run. Zero-free loss: dY
    once per step of ``cn`` input blocks (a band's rows with their halo), W once per run or,
    when the step's blocks fit a half of B, once per step and group; the MACs over the array
    plus a run's fill, drain and stride classes, and with ``zn`` images a step half of each
    step's first W load (the runs wait for it). Forward: X once per
    step of ``kb`` output blocks (a band's rows with their halo), W once per run (of ``zn``
    images, channel-first); a run's contexts (feeder: ``rows`` pixels each, at least the
    context gap apart) or tiles (channel-first: a tap each, at least ``2 rows`` cycles) plus
    its fill and drain."""
    R, C, B = config.rows, config.cols, config.feeder_bus_width
    n, h, w, s_h = desc["n"], desc["h"], desc["w"], desc["stride_h"]
    ob = element_bytes(config.operand_width)
    kt, ct, cn, oh, ow, rs = e["kt"], e["ct"], e["cn"], e["oh"], e["ow"], e["rs"]
    if key == ZF_GRADIENT:
        bands = -(-oh // e["bh"])
        in_rows = min(h, (e["bh"] - 1) * s_h + e["drh"] + 1) * bands
        nbytes = (n * ct * in_rows * w * B * -(-kt // e["kb"])
                  + n * kt * oh * ow * C * -(-ct // cn)) * ob
        runs = -(-n // e["zn"]) * ct * kt * bands
        compute = n * ct * kt * oh * ow * rs * -(-B // R) + runs * (3 * R + C + 10)
    elif key in (CF_FORWARD, Phase.FORWARD):
        bands = -(-oh // e["bh"])
        in_rows = min(h, (e["bh"] - 1) * s_h + e["drh"] + 1) * bands
        groups = -(-desc["c"] // e["cg"])
        zn = e.get("zn", 1)             # channel-first: images a step, W once for them
        stacked = zn if e.get("zs") else 1   # ... in one run when stacked
        runs = -(-n // stacked) * kt * bands * groups
        nbytes = (n * desc["c"] * in_rows * w * -(-kt // e["kb"])
                  + -(-n // zn) * kt * bands * groups * e["cg"] * rs * C) * ob
        if key == CF_FORWARD:            # a tile per tap, max(P, 2 rows) cycles each
            run = rs * max(stacked * e["bh"] * ow, 2 * R) + 3 * R + C + 10
        else:                           # a context per rows pixels, max(C R S, the gap) each
            run = e["bh"] * -(-ow // R) * max(e["cg"] * rs, config.context_gap) + 40 + 2 * R
        compute = runs * run
    else:
        bands = -(-h // e["bh"])
        dy_rows = min(oh, (e["bh"] - 1 + e["drh"]) // s_h + 2) * bands
        runs = n * bands * ct * -(-kt // e["kg"])
        groups = -(-kt // e["kg"])
        # W: a block's a run, or the step's blocks once (stays in B): of every output
        # channel once a step, or of a group while the group holds
        bcap = config.buf_b_depth // 2
        if cn * desc["k"] * rs <= bcap:
            w_loads = ct
        elif cn * min(e["kg"], kt) * rs * C <= bcap:
            w_loads = ct * (1 if groups == 1 else bands * -(-n // e["zn"]))
        else:
            w_loads = n * bands * ct
        # (a W load: the groups' W of every output channel, of one input block)
        nbytes = (n * kt * dy_rows * ow * C * -(-ct // cn) + w_loads * kt * rs * C * C) * ob
        classes = desc["stride_h"] * desc["stride_w"]
        # a context a tile of R pixels of a stride class and a tap, a vector an output channel
        contexts = sum(-(-len(range(a, h, s_h)) * len(range(b, w, desc["stride_w"])) // R)
                       * _class_taps(desc, a, b)
                       for a in range(min(s_h, h)) for b in range(min(desc["stride_w"], w)))
        compute = (n * ct * contexts * kt * C
                   + runs * (3 * R + C + 10 + classes * (rs + 3)))
        if e["zn"] > 1:                 # a step of images starts with its group's W, about
            steps = ct * bands * -(-n // e["zn"])       # half of it before the first run
            wstep = min(desc["k"], e["kg"] * C) * rs * C * ob
            compute += steps * wstep // (config.dma_data_width // 8) // 2
    if key in (ZF_GRADIENT, ZF_LOSS):   # the DMA also writes their results (dW, dX)
        outs = kt * desc["c"] * rs * C if key == ZF_GRADIENT else n * ct * h * w * C
        dma = nbytes + outs * element_bytes(config.result_width)
    else:                               # (the forward's Y left out: measured worse)
        dma = nbytes
    return max(dma // (config.dma_data_width // 8), compute), nbytes


def _class_taps(desc, a, b):
    """The kernel taps of the zero-free loss's stride class ``(a, b)``."""
    return sum(1 for r in range(desc["r"]) for q in range(desc["s"])
               if (a + desc["pad_h"] - r * desc["dil_h"]) % desc["stride_h"] == 0
               and (b + desc["pad_w"] - q * desc["dil_w"]) % desc["stride_w"] == 0)


def _zf_loss(config):
    acap, bcap, _, pcap = _caps(config)
    pcap //= 2                                  # P is double-buffered
    cols = config.cols
    what = (f"dX of one row ({{w}} words) does not fit the P buffer ({pcap} words), or one "
            f"dY row ({{ow}} words) a bank of buffer A ({acap} words)")
    return [
        Mul("nb", rs, cols),                    # W words of one block of output channels
        Check(nb > bcap, TOO_LARGE, f"W of {cols} output channels ({{nb}} words) does not fit "
                                    f"a bank of buffer B ({bcap} words)"),
        Div("kt", k + (cols - 1), cols),
        Div("ct", c + (cols - 1), cols),
        # the host's search (:func:`run`) may ask for bands of a cn-th of P, so that cn
        # input-channel blocks share each dY band
        Div("q3", pcap, select(cn > 0, cn, 1)),
        Set((("banded", (hw > q3) | (ohow > acap)),)),
        Skip(banded == 0, 5),
        Div("q3", q3, w),                       # dX rows P holds (a block's share)
        Div("q4", acap, ow),                    # dY rows a bank holds
        Mul("t", select(q4 > 0, q4 - 1, 0), stride_h),
        Set((("t", select(t > drh, t - drh, 0)),)),
        Set((("bh", minimum(h, q3, t)),)),
        Set((("bh", select(banded, bh, h)),)),
        _band_checks(what, padding=False),
        # dY words of one block of output channels for a band (at most (bh - 1 + d(R-1)) // s
        # + 2 rows)
        Set((("u", ohow),)),
        Skip(banded == 0, 2),
        Div("t", bh - 1 + drh, stride_h),
        Mul("u", t + 2, ow),
        Div("q1", acap, u),
        Div("q2", bcap, nb),
        Set((("kg", minimum(kt, q1, q2)),)),
        # a step's dX bands in P: several blocks of input channels (dY of a group is loaded
        # once for them) or, with one block, several images (W stays in its bank across them);
        # the host's search (:func:`run`) may ask for zn images (one block a step) where W
        # is the larger operand
        Mul("t", bh, w),
        Div("q3", pcap, t),
        Set((("cn", select((ct > 1) & (q3 > 1) & (zn < 2), minimum(ct, q3), 1)),)),
        Set((("zn", select(cn > 1, 1, minimum(n, q3, select(zn > 1, zn, n)))),)),
    ]


def _fc(config):
    acap, bcap, _, pcap = _caps(config)
    cols = config.cols
    return [
        Check(k >= pcap, TOO_LARGE, f"{{k}} outputs: P ({pcap} words) must hold every dW row "
                                    f"of an input block plus a dX row"),
        Div("q3", pcap, k + 1),                  # P words a row, at most
        Set((("fib", minimum(c, q3 * cols, max(cols, bcap // 32))),)),
        Div("fq", fib + (cols - 1), cols),
        Div("q1", bcap, fib),
        Check(q1 < 2, TOO_LARGE, f"a B bank ({bcap} words) does not hold an X row and a W row "
                                 f"of {{fib}} inputs"),
        Set((("fob", minimum(k, q1 >> 1, acap)),)),
        Div("q2", acap, fob),
        Div("q4", pcap, fq),
        Set((("fnb", minimum(n, q2, q1 - fob, q4 - k)),)),
        Mul("fwoff", fnb, fib),
        Mul("fdw0", fnb, fq),
        Mul("kohow", n, c),                      # N I: dX elements
    ]


def _pool(config, backward):
    """Pooling, forward or backward (see :mod:`bpsa.gateware.frontends.pool.pool`). The unit's buffer
    has two banks of ``bank`` elements; P is double-buffered (``pcap`` words a step, ``pel``
    elements). Whole planes when a plane's operands fit a bank and its output the step's P:
    ``pg`` planes a step (``pw`` P words each); otherwise one plane a step in bands of ``bh``
    output (forward) or dX (backward) rows. A backward band loads at most ``bh + 2R - 2`` X
    rows and ``bh + R - 1`` dY rows."""
    bank = config.buf_pool_depth // 2
    pcap = config.buf_p_depth // 2
    lanes = config.pool_lanes
    epw = config.cols // lanes                  # a plane's elements a P word holds
    pel = pcap * epw
    if config.is_float:             # the sum times fp32(1 / (R S)), rounded once
        out = [Check((pool_kind == int(PoolKind.AVG)) & (rs >= 1 << 24), AccelError.POOL,
                     "an average over {rs} elements (2**24 or more) has no fp32 reciprocal"),
               Set((("recip", fp32_reciprocal(rs)), ("drh", r - 1)))]
    else:
        limit = pool_window_limit(config)
        out = [
            Check((pool_kind == int(PoolKind.AVG)) & (rs > limit), AccelError.POOL,
                  f"an average over {{rs}} elements (more than {limit}) is not divided "
                  f"exactly"),
            Div("recip", 1 << POOL_RECIP_SHIFT, 2 * rs),
            Set((("recip", recip + 1), ("drh", r - 1)))]
    out += [
        Div("t", c + (lanes - 1), lanes),       # blocks of pool_lanes planes an image
        Mul("planes", n, t),
        Div("qw0", pad_w, stride_w),
        Mul("t", qw0, stride_w),
        Set((("rw0", pad_w - t),)),
    ]
    if not backward:
        what = (f"one plane of X ({{hw}} elements) does not fit a bank of the pooling buffer "
                f"({bank}) or its output ({{ohow}}) half of P ({pel} elements)")
        out += [
            Set((("banded", (hw > bank) | (ohow > pel)), ("u", hw))),
            Div("pw", ohow + (epw - 1), epw),
            Div("q3", bank, w),
            Div("t", select(q3 >= r, q3 - r, 0), stride_h),
            Set((("t", select(q3 >= r, t + 1, 0)),)),
            Div("q4", pel, ow),
            Set((("bh", select(banded, minimum(oh, q4, t), oh)), ("q3", hw))),
        ]
    else:
        what = (f"one plane of X and dY ({{hw}} + {{ohow}} elements) does not fit a bank of the "
                f"pooling buffer ({bank}) or its dX ({{hw}}) half of P ({pel} elements)")
        out += [
            # X is not read by an average's backward without the ReLU mask
            Set((("u", select((pool_kind == int(PoolKind.AVG)) & (relu == 0), 0, hw)),)),
            Set((("banded", (u + ohow > bank) | (hw > pel)),)),
            Div("pw", hw + (epw - 1), epw),
            Mul("t", 2 * r, w),
            Mul("q3", r, ow),
            Set((("t", t + q3),)),
            Div("t", select(bank > t, bank - t, 0), w + ow),
            Div("q4", pel, w),
            Set((("bh", select(banded, minimum(h, q4, t), h)), ("q3", u + ohow))),
        ]
    out += [                                    # q3: the buffer words of a plane
        Div("q1", bank, q3),
        Div("q2", pcap, pw),
        Set((("pg", select(banded, 1, minimum(planes, q1, q2))),)),
        _band_checks(what, padding=False),
    ]
    return out


def tiling_program(config, phase_):
    """The tiling steps of program ``phase_`` (a :class:`bpsa.spec.regmap.Phase`, or
    :data:`ZF_GRADIENT`)."""
    if phase_ == ZF_GRADIENT:
        return _zf_gradient(config)
    if phase_ == ZF_LOSS:
        return _zf_loss(config)
    if phase_ == CF_FORWARD:
        return _forward(config, cf=True)
    if Phase(phase_) in (Phase.POOL_FORWARD, Phase.POOL_BACKWARD):
        return _pool(config, Phase(phase_) == Phase.POOL_BACKWARD)
    return {Phase.FORWARD: _forward, Phase.LOSS: _loss, Phase.GRADIENT: _gradient,
            Phase.FC_BACKWARD: _fc}[Phase(phase_)](config)


def _tensor_checks(addr, count_steps, shift):
    """``count_steps`` (which leave the tensor's element count in ``tot``), then its alignment
    and window checks; ``shift``: log2 of its element bytes, or ``(acc, operand)`` for an
    output that requantization (REQUANT) makes operands."""
    def both(sh):
        end = addr + (tot << sh) - 1
        outside = (high_bits(tot, 32) | (addr < window_lo) | (end > window_hi)
                   | high_bits(end, 32))
        return [Check(low_bits(addr, sh) if sh else lift(0), AccelError.ALIGN,
                      "an address is not a multiple of its element size"),
                Check(outside, AccelError.WINDOW, "a tensor is not inside the DMA window")]
    if isinstance(shift, int):
        return count_steps + both(shift)
    acc, op = shift
    return count_steps + [Skip(requant != 0, 2), *both(acc), Skip(requant == 0, 2), *both(op)]


def address_program(config, phase_):
    """Alignment and window checks of the tensors of program ``phase_`` (after its tiling
    steps)."""
    cols, B = config.cols, config.feeder_bus_width
    obs = element_bytes(config.operand_width).bit_length() - 1
    abs_ = element_bytes(config.result_width).bit_length() - 1
    phase_ = phase_ if phase_ in (ZF_GRADIENT, ZF_LOSS, CF_FORWARD) else Phase(phase_)
    if phase_ == CF_FORWARD and config.is_mx:   # codes, then scale codes (bpsa.host.mx_layout)
        tensors = [(addr_x, [Mul("t", cl + 1, hw), Mul("t", t, ct), Mul("tot", t, n)], obs),
                   (addr_w, [Mul("t", ct, rs), Mul("t", kt, crs + t), Mul("tot", t, cols)],
                    obs),
                   (addr_out, [Mul("t", n, kt), Mul("rowlen", ohow, cols),
                               Mul("tot", t, rowlen)], abs_)]
    elif phase_ == CF_FORWARD:
        tensors = [(addr_x, [Mul("tot", n, cimg)], obs),
                   (addr_w, [Mul("t", kt, crs), Mul("tot", t, cols)], obs),
                   (addr_out, [Mul("t", n, kt), Mul("rowlen", ohow, cols),
                               Mul("tot", t, rowlen)], (abs_, obs))]
    elif phase_ == ZF_LOSS:
        tensors = [(addr_w, [Mul("t", ct, k), Mul("t", t, rs), Mul("tot", t, cols)], obs),
                   (addr_dy, [Mul("t", n, kt), Mul("t", t, ohow), Mul("tot", t, cols)], obs),
                   (addr_out, [Mul("t", n, ct), Mul("t", t, hw), Mul("tot", t, cols)],
                    (abs_, obs))]
    elif phase_ == ZF_GRADIENT:
        tensors = [(addr_dy, [Mul("t", n, dwords), Mul("tot", t, cols)], obs),
                   (addr_x, [Mul("t", n, xwords), Mul("tot", t, B)], obs),
                   (addr_out, [Mul("t", kt, crs), Mul("tot", t, cols)], abs_)]
    elif phase_ == Phase.FORWARD:
        tensors = [(addr_x, [Mul("tot", n, chw)], obs),
                   (addr_w, [Mul("t", kt, crs), Mul("tot", t, cols)], obs),
                   (addr_out, [Mul("t", n, kt), Mul("rowlen", ohow, cols),
                               Mul("tot", t, rowlen)], (abs_, obs))]
    elif phase_ == Phase.LOSS:
        tensors = [(addr_w, [Mul("tot", k, crs)], obs),
                   (addr_dy, [Mul("tot", n, kohow)], obs),
                   (addr_out, [Mul("tot", n, chw)], abs_)]
    elif phase_ == Phase.POOL_FORWARD:
        L = config.pool_lanes                   # planes channel-blocked by pool_lanes
        tensors = [(addr_x, [Mul("t", planes, hw), Mul("tot", t, L)], obs),
                   (addr_out, [Mul("t", planes, ohow), Mul("tot", t, L)], (abs_, obs))]
    elif phase_ == Phase.POOL_BACKWARD:
        L = config.pool_lanes
        tensors = [(addr_x, [Mul("t", planes, hw), Mul("tot", t, L)], obs),
                   (addr_dy, [Mul("t", planes, ohow), Mul("tot", t, L)], obs),
                   (addr_out, [Mul("t", planes, hw), Mul("tot", t, L)], (abs_, obs))]
    elif phase_ == Phase.GRADIENT:
        tensors = [(addr_dy, [Mul("tot", n, kohow)], obs),
                   (addr_x, [Mul("tot", n, chw)], obs),
                   (addr_out, [Mul("tot", k, crs)], abs_)]
    else:
        tensors = [(addr_x, [Set((("tot", kohow),))], obs),
                   (addr_w, [Mul("tot", k, c)], obs),
                   (addr_dy, [Mul("tot", n, k)], obs),
                   (addr_out, [Mul("t", k, c), Set((("tot", t + kohow),))], abs_)]
    steps = []
    for addr, count_steps, shift in tensors:
        steps += _tensor_checks(addr, count_steps, shift)
    return steps


def run(config, desc, *, phases=None, addresses=True):
    """The set-up of descriptor ``desc`` (field -> int, :data:`DESCRIPTOR`; addresses and the
    window default to 0 and the whole 32-bit space) as the hardware computes it: the
    registers (name -> int). Raises :class:`bpsa.plan.grammar.Refusal` with the hardware's
    error code. ``addresses=False`` leaves out the address checks. Memoized (the search of
    the reuse order evaluates the tiling several times; planner and cycle model ask for the
    same layer again and again)."""
    key = (config, tuple(sorted(desc.items())), None if phases is None else tuple(phases),
           addresses)
    hit = _RUN_CACHE.get(key)
    if hit is None:
        try:
            hit = _run(config, desc, phases=phases, addresses=addresses)
        except Refusal as err:
            hit = err
        if len(_RUN_CACHE) > 4096:
            _RUN_CACHE.clear()
        _RUN_CACHE[key] = hit
    if isinstance(hit, Refusal):
        raise hit
    return dict(hit)


_RUN_CACHE = {}


def _run(config, desc, *, phases=None, addresses=True):
    """:func:`run`, computed."""
    # registers a skipped step leaves alone hold a stale value in hardware; no result
    # depends on it (every read of one is behind a select)
    env = {name: 0 for name in PLAN_REGISTERS}
    env.update({"addr_x": 0, "addr_w": 0, "addr_dy": 0, "addr_out": 0, "mode": 0, "requant": 0,
                "relu": 0, "pool_kind": 0, "window_lo": 0, "window_hi": (1 << 32) - 1, **desc})
    widths = register_widths(config)
    if phases is None:
        phases = generated_phases(config)
    program = checks(config, phases) + geometry(config)
    kw = {"unit_width": UNIT_WIDTH, "overflow_code": TOO_LARGE}
    evaluate(program, env, widths, **kw)
    key = Phase(env["phase"])
    if key in (Phase.LOSS, Phase.GRADIENT) and env["mode"] == Mode.ZERO_FREE:
        key = ZF_LOSS if key == Phase.LOSS else ZF_GRADIENT
    if key == Phase.FORWARD and env["mode"] == Mode.CHANNEL_FIRST:
        key = CF_FORWARD
    program = tiling_program(config, key)
    if addresses:
        program = program + address_program(config, key)
    if key not in (ZF_GRADIENT, ZF_LOSS, CF_FORWARD, Phase.FORWARD):
        return evaluate(program, env, widths, **kw)
    # the reuse order: the host tries cn = 1, 2, 4, ... and keeps the cheapest tiling by
    # :func:`_reuse_cost` (1 when nothing else fits). Zero-free gradient: steps of cn input
    # blocks (X of a step's blocks shares a bank of A, each dY block loaded once serves them);
    # zero-free loss: bands of a cn-th of P (each dY band loaded once for cn input blocks);
    # forward: bands of a cn-th of P (X of a group loaded once for cn times the blocks);
    # channel-first forward and zero-free loss also zn = 2, 4, ... images a run or step (W
    # loaded once for them)
    best = evaluate(program, {**env, "cn": 1}, widths, **kw)
    cost = _reuse_cost(config, key, best, env)
    top = best["ct"] if key in (ZF_GRADIENT, ZF_LOSS) else best["kt"]
    asks = [("cn", top)] + ([("zn", env["n"])] if key in (CF_FORWARD, ZF_LOSS) else [])
    for name, most in asks:
        v = 2
        while v < 2 * most:
            try:
                e = evaluate(program, {**env, "cn": 1, name: min(v, most)}, widths, **kw)
            except Refusal:
                break
            c_ = _reuse_cost(config, key, e, env)
            if c_ < cost:
                best, cost = e, c_
            v *= 2
    return best
